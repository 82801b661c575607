//! The importer on small hand-built models: the mapping rules, one test per kind of bad
//! file, and where shapes come from when the file leaves them out (tract's inference
//! with the `onnx-infer` feature, a typed error without it).

use std::collections::HashMap;

use prost::Message;

use super::proto::*;
use super::{parse_onnx, OnnxOptions};
use crate::graph::{DType, Graph, GraphError, Role};

fn dim(n: i64) -> DimensionProto {
    DimensionProto {
        dim_value: Some(n),
        dim_param: None,
    }
}

fn sym(s: &str) -> DimensionProto {
    DimensionProto {
        dim_value: None,
        dim_param: Some(s.into()),
    }
}

fn value(name: &str, elem_type: i32, dims: Vec<DimensionProto>) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorTypeProto {
                elem_type,
                shape: Some(TensorShapeProto { dim: dims }),
            }),
        }),
    }
}

fn f32s(name: &str, dims: &[i64]) -> ValueInfoProto {
    value(name, 1, dims.iter().map(|&d| dim(d)).collect())
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: format!("{op}_{}", outputs.first().copied().unwrap_or("")),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..NodeProto::default()
    }
}

/// `TensorProto.DataLocation.EXTERNAL`: the data lives in another file.
const DATA_EXTERNAL: i32 = 1;

fn weight(name: &str, dims: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 1,
        data_location: DATA_EXTERNAL,
        ..TensorProto::default()
    }
}

fn ints(name: &str, data: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![data.len() as i64],
        data_type: 7,
        int64_data: data.to_vec(),
        ..TensorProto::default()
    }
}

/// x[1,8] -> MatMul(w[8,8]) -> h -> Relu -> r -> Reshape([2,4]) -> v -> Sigmoid -> y.
fn small() -> GraphProto {
    GraphProto {
        name: "small".into(),
        node: vec![
            node("MatMul", &["x", "w"], &["h"]),
            node("Relu", &["h"], &["r"]),
            node("Reshape", &["r", "shape"], &["v"]),
            node("Sigmoid", &["v"], &["y"]),
        ],
        initializer: vec![weight("w", &[8, 8]), ints("shape", &[2, 4])],
        input: vec![f32s("x", &[1, 8])],
        output: vec![f32s("y", &[2, 4])],
        value_info: vec![f32s("h", &[1, 8]), f32s("r", &[1, 8]), f32s("v", &[2, 4])],
    }
}

fn encode(graph: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        producer_name: "test".into(),
        graph: Some(graph),
    }
    .encode_to_vec()
}

fn import(graph: GraphProto) -> Result<Graph, GraphError> {
    parse_onnx(&encode(graph), &OnnxOptions::default())
}

fn tensor<'g>(g: &'g Graph, name: &str) -> &'g crate::graph::Tensor {
    g.tensors
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tensor {name}"))
}

#[test]
fn a_small_model_maps_roles_views_and_inplace_flags() {
    let g = import(small()).expect("imports");
    assert_eq!(g.name, "small");
    assert_eq!(
        g.nodes.iter().map(|n| n.op.as_str()).collect::<Vec<_>>(),
        ["mat_mul", "relu", "reshape", "sigmoid"]
    );
    assert_eq!(tensor(&g, "x").role, Role::Input);
    assert_eq!(tensor(&g, "w").role, Role::Weight);
    assert_eq!(tensor(&g, "w").size, 256);
    assert_eq!(tensor(&g, "shape").dtype, DType::I64);
    assert_eq!(tensor(&g, "h").role, Role::Intermediate);
    assert_eq!(tensor(&g, "v").view_of, Some(tensor(&g, "r").id));
    assert_eq!(tensor(&g, "y").role, Role::Output);
    assert_eq!(
        g.nodes.iter().map(|n| n.inplace).collect::<Vec<_>>(),
        [false, true, false, true]
    );
}

#[test]
fn a_transpose_of_a_weight_is_folded_into_a_weight() {
    let mut m = small();
    m.node[0] = node("MatMul", &["x", "wt"], &["h"]);
    m.node.insert(0, node("Transpose", &["w"], &["wt"]));
    m.value_info.push(f32s("wt", &[8, 8]));
    let g = import(m).expect("imports");
    assert_eq!(g.nodes.len(), 4, "the transpose is not a runtime node");
    assert_eq!(tensor(&g, "wt").role, Role::Weight);
    // A weight that only feeds a folded constant is folded away with it.
    assert!(g.tensors.iter().all(|t| t.name != "w"));
}

/// `small` with the reshape target computed by `Shape(x)` instead of an initializer,
/// and no value_info for `v` or the shape value.
fn reshape_by_shape_arithmetic() -> GraphProto {
    let mut m = small();
    m.node[2] = node("Reshape", &["r", "s"], &["v"]);
    m.node.insert(2, node("Shape", &["x"], &["s"]));
    m.value_info.retain(|v| v.name != "v");
    m.output = vec![f32s("y", &[1, 8])];
    m
}

/// `small` followed by an Expand whose value_info leaves a dimension symbolic (as
/// `onnx.shape_inference` does in bert's embeddings).
fn expand_with_a_symbolic_value_info() -> GraphProto {
    let mut m = small();
    m.node.push(node("Expand", &["y", "target"], &["e"]));
    m.node.push(node("Neg", &["e"], &["z"]));
    m.initializer.push(ints("target", &[3, 2, 4]));
    m.value_info.push(f32s("y", &[2, 4]));
    m.value_info
        .push(value("e", 1, vec![dim(3), sym("unk__0"), dim(4)]));
    m.output = vec![f32s("z", &[3, 2, 4])];
    m
}

#[cfg(feature = "onnx-infer")]
#[test]
fn shape_arithmetic_on_an_activation_is_a_constant_and_tract_infers_the_reshape() {
    let g = import(reshape_by_shape_arithmetic()).expect("imports");
    assert_eq!(tensor(&g, "v").shape, vec![1, 8]);
    assert_eq!(tensor(&g, "s").role, Role::Weight);
    assert_eq!(tensor(&g, "s").dtype, DType::I64);
    assert_eq!(tensor(&g, "s").shape, vec![2]);
    assert!(g.nodes.iter().all(|n| n.op != "shape"));
}

#[cfg(feature = "onnx-infer")]
#[test]
fn tract_fills_a_dimension_value_info_leaves_symbolic() {
    let g = import(expand_with_a_symbolic_value_info()).expect("imports");
    assert_eq!(tensor(&g, "e").shape, vec![3, 2, 4]);
    assert_eq!(tensor(&g, "e").view_of, Some(tensor(&g, "y").id));
}

#[cfg(feature = "onnx-infer")]
#[test]
fn tract_sees_the_dim_options_as_fixed_dimensions() {
    // The input's batch is symbolic and the file types nothing after it: tract must
    // see batch = 3 to give h its shape.
    let mut m = small();
    m.input = vec![value("x", 1, vec![sym("batch"), dim(8)])];
    m.value_info.clear();
    // The output's rows are a symbol no option gives: tract finds them.
    m.output = vec![value("y", 1, vec![sym("rows"), dim(4)])];
    m.initializer[1] = ints("shape", &[-1, 4]);
    let options = OnnxOptions {
        dims: HashMap::from([("batch".to_string(), 3)]),
    };
    let g = parse_onnx(&encode(m), &options).expect("imports");
    assert_eq!(tensor(&g, "h").shape, vec![3, 8]);
    assert_eq!(tensor(&g, "v").shape, vec![6, 4]);
    assert_eq!(tensor(&g, "y").shape, vec![6, 4]);
}

#[cfg(not(feature = "onnx-infer"))]
#[test]
fn without_the_library_a_value_the_file_does_not_type_says_how_to_get_it() {
    for (m, values) in [
        (reshape_by_shape_arithmetic(), ["s", "v"]),
        (expand_with_a_symbolic_value_info(), ["e", "e"]),
    ] {
        match import(m) {
            Err(GraphError::ShapeUnknown { value, problem, .. }) => {
                assert!(values.contains(&value.as_str()), "{value}");
                assert!(problem.contains("--features onnx-infer"), "{problem}");
                assert!(problem.contains("infer_shapes"), "{problem}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn several_outputs_are_views_of_one_packed_tensor() {
    let mut m = small();
    m.node.push(node("Split", &["y"], &["a", "b"]));
    m.node.push(node("Add", &["a", "b"], &["z"]));
    m.value_info.push(f32s("y", &[2, 4]));
    m.value_info.push(f32s("a", &[1, 4]));
    m.value_info.push(f32s("b", &[1, 4]));
    m.output = vec![f32s("z", &[1, 4])];
    let g = import(m).expect("imports");
    let packed = g.nodes[4].output;
    assert_eq!(g.tensors[packed.index()].size, 32);
    assert_eq!(tensor(&g, "a").view_of, Some(packed));
    assert_eq!(tensor(&g, "b").view_of, Some(packed));
}

#[test]
fn symbolic_dims_resolve_from_the_options_or_are_named() {
    let mut m = small();
    m.input = vec![value("x", 1, vec![sym("batch"), dim(8)])];
    let bytes = encode(m);
    match parse_onnx(&bytes, &OnnxOptions::default()) {
        Err(GraphError::UnresolvedDim { dim, value }) => {
            assert_eq!((dim.as_str(), value.as_str()), ("batch", "x"));
        }
        other => panic!("{other:?}"),
    }
    let options = OnnxOptions {
        dims: HashMap::from([("batch".to_string(), 1)]),
    };
    assert!(parse_onnx(&bytes, &options).is_ok());
}

#[test]
fn truncated_bytes_are_not_onnx() {
    let bytes = encode(small());
    for cut in [1, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            matches!(
                parse_onnx(&bytes[..cut], &OnnxOptions::default()),
                Err(GraphError::NotOnnx { .. })
            ),
            "cut at {cut}"
        );
    }
    assert_eq!(
        parse_onnx(&[], &OnnxOptions::default()),
        Err(GraphError::Empty)
    );
}

#[test]
fn an_unknown_element_type_is_named() {
    let mut m = small();
    m.input = vec![value("x", 8, vec![dim(1), dim(8)])];
    assert_eq!(
        import(m),
        Err(GraphError::UnknownElementType {
            value: "x".into(),
            elem_type: 8
        })
    );
}

#[test]
fn a_value_used_but_never_produced_is_named() {
    let mut m = small();
    m.node[1] = node("Relu", &["nowhere"], &["r"]);
    match import(m) {
        Err(GraphError::UnknownValue { node, value }) => {
            assert_eq!(value, "nowhere");
            assert!(node.contains("Relu_r"), "{node}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cycle_or_a_node_out_of_order_is_named() {
    let mut m = small();
    m.node[0] = node("MatMul", &["x", "w", "y"], &["h"]);
    match import(m) {
        Err(GraphError::NotTopological {
            node,
            value,
            producer,
        }) => {
            assert_eq!(value, "y");
            assert!(node.contains("MatMul"), "{node}");
            assert!(producer.contains("Sigmoid"), "{producer}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_value_defined_twice_is_named() {
    let mut m = small();
    m.node[1] = node("Relu", &["h"], &["h"]);
    assert!(matches!(import(m), Err(GraphError::DefinedTwice { value, .. }) if value == "h"));
}

#[test]
fn a_shape_that_cannot_be_inferred_is_named() {
    // An op of a custom domain that no value_info types: no library knows it either.
    // (With the value_info of the Relu after it, tract would infer it backwards.)
    let mut m = small();
    m.value_info.retain(|v| v.name != "h" && v.name != "r");
    m.node[0] = node("Mystery", &["x", "w"], &["h"]);
    m.node[0].domain = "com.example".into();
    match import(m) {
        Err(GraphError::ShapeUnknown {
            value,
            node,
            problem,
        }) => {
            assert_eq!(value, "h");
            assert!(node.contains("Mystery"), "{node}");
            assert!(
                problem.contains("no value_info gives its shape"),
                "{problem}"
            );
            let library = if cfg!(feature = "onnx-infer") {
                "tract's shape inference did not find it"
            } else {
                "--features onnx-infer"
            };
            assert!(problem.contains(library), "{problem}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_overflowing_or_negative_dimension_is_named() {
    let mut m = small();
    m.value_info[0] = f32s("h", &[1 << 40, 1 << 40]);
    assert!(matches!(import(m), Err(GraphError::BadShape { value, .. }) if value == "h"));
    let mut m = small();
    m.value_info[0] = f32s("h", &[-1, 8]);
    assert!(matches!(import(m), Err(GraphError::BadShape { value, .. }) if value == "h"));
}

#[test]
fn a_subgraph_is_refused() {
    let mut m = small();
    m.node[1].attribute.push(AttributeProto {
        name: "then_branch".into(),
        r#type: ATTRIBUTE_GRAPH,
        ..AttributeProto::default()
    });
    assert!(matches!(import(m), Err(GraphError::UnsupportedNode { .. })));
}

#[test]
fn a_model_without_a_graph_is_refused() {
    let bytes = ModelProto::default().encode_to_vec();
    // An empty message encodes to no bytes at all.
    assert_eq!(
        parse_onnx(&bytes, &OnnxOptions::default()),
        Err(GraphError::Empty)
    );
    let bytes = ModelProto {
        ir_version: 8,
        ..ModelProto::default()
    }
    .encode_to_vec();
    assert!(matches!(
        parse_onnx(&bytes, &OnnxOptions::default()),
        Err(GraphError::MissingField { field: "graph", .. })
    ));
}
