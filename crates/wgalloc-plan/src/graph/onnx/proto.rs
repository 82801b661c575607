//! The subset of the ONNX protobuf schema (onnx.proto, IR version 3 and later) the
//! importer reads, decoded with `prost`. Fields not listed here are skipped by the
//! decoder: subgraph bodies, sparse initializers, training information, metadata.
//!
//! Field numbers follow the public onnx.proto. The structs are written by hand so the
//! build needs no `protoc`.

use prost::Message;

/// `ModelProto`: the file's top-level message.
#[derive(Clone, PartialEq, Message)]
pub struct ModelProto {
    /// The IR version the file follows.
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    /// The opsets the graph's ops come from.
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// The tool that wrote the file.
    #[prost(string, tag = "2")]
    pub producer_name: String,
    /// The graph itself.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
}

/// `OperatorSetIdProto`: one opset a model imports.
#[derive(Clone, PartialEq, Message)]
pub struct OperatorSetIdProto {
    /// The op domain (empty for the default `ai.onnx`).
    #[prost(string, tag = "1")]
    pub domain: String,
    /// Its version.
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// `GraphProto`: nodes, initializers, inputs, outputs and value information.
#[derive(Clone, PartialEq, Message)]
pub struct GraphProto {
    /// Nodes, which the format requires in topological order.
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// The graph's name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Constant tensors (weights), possibly with their data in an external file.
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// Graph inputs (from IR 4 on, initializers need not be listed here).
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// Graph outputs.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    /// Types and shapes of other values, as shape inference left them.
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
}

/// `NodeProto`: one op application.
#[derive(Clone, PartialEq, Message)]
pub struct NodeProto {
    /// Names of the values read; an empty name is an absent optional input.
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// Names of the values written; an empty name is an unused optional output.
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// The node's own name (may be empty).
    #[prost(string, tag = "3")]
    pub name: String,
    /// The op (`Conv`, `Relu`, ...).
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// The op's domain (empty for `ai.onnx`).
    #[prost(string, tag = "7")]
    pub domain: String,
    /// The op's attributes.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
}

/// Attribute type tag for a graph (`AttributeProto.AttributeType.GRAPH`).
pub const ATTRIBUTE_GRAPH: i32 = 5;
/// Attribute type tag for a list of graphs (`GRAPHS`).
pub const ATTRIBUTE_GRAPHS: i32 = 10;

/// `AttributeProto`: a named op attribute. Subgraph bodies are not decoded; their
/// presence shows in `type`.
#[derive(Clone, PartialEq, Message)]
pub struct AttributeProto {
    /// The attribute's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its type tag (`AttributeType`).
    #[prost(int32, tag = "20")]
    pub r#type: i32,
    /// A float value.
    #[prost(float, tag = "2")]
    pub f: f32,
    /// An integer value.
    #[prost(int64, tag = "3")]
    pub i: i64,
    /// A tensor value (the `value` of a `Constant` node).
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    /// A list of integers.
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
}

/// `ValueInfoProto`: a value's name and type.
#[derive(Clone, PartialEq, Message)]
pub struct ValueInfoProto {
    /// The value's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its type, when known.
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
}

/// `TypeProto`, of which only the tensor case is read (`tensor_type`, field 1).
#[derive(Clone, PartialEq, Message)]
pub struct TypeProto {
    /// Set when the value is a dense tensor.
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TensorTypeProto>,
}

/// `TypeProto.Tensor`: element type and (possibly partial) shape.
#[derive(Clone, PartialEq, Message)]
pub struct TensorTypeProto {
    /// The element type (`TensorProto.DataType`).
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    /// The shape; absent when even the rank is unknown.
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

/// `TensorShapeProto`: one entry per dimension.
#[derive(Clone, PartialEq, Message)]
pub struct TensorShapeProto {
    /// The dimensions, outermost first.
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<DimensionProto>,
}

/// `TensorShapeProto.Dimension`: a number, a symbol, or nothing (unknown).
#[derive(Clone, PartialEq, Message)]
pub struct DimensionProto {
    /// The fixed size, when set.
    #[prost(int64, optional, tag = "1")]
    pub dim_value: Option<i64>,
    /// The symbol, when the size is symbolic.
    #[prost(string, optional, tag = "2")]
    pub dim_param: Option<String>,
}

/// `TensorProto`: an initializer or a `Constant`'s value. The importer reads only its
/// shape, element type and name; the inline data fields and the data location are
/// decoded so that a model built or edited with these structs and encoded again (the
/// tests do) keeps its small integer constants, which the library shape inference
/// evaluates (float data and external-data entries are not kept).
#[derive(Clone, PartialEq, Message)]
pub struct TensorProto {
    /// The shape.
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    /// The element type (`DataType`).
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    /// The tensor's name (for an initializer, the value it defines).
    #[prost(string, tag = "8")]
    pub name: String,
    /// Inline `int32`-class data (int32, int16, int8, uint16, uint8, bool, float16).
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    /// Inline int64 data.
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    /// Inline data as little-endian bytes.
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    /// Where the data is (`DEFAULT` 0 or `EXTERNAL` 1).
    #[prost(int32, tag = "14")]
    pub data_location: i32,
}

/// Decodes a serialized `ModelProto`.
///
/// # Errors
/// `prost`'s decode error (truncated input, a bad wire type, nesting too deep).
pub fn decode_model(bytes: &[u8]) -> Result<ModelProto, prost::DecodeError> {
    ModelProto::decode(bytes)
}
