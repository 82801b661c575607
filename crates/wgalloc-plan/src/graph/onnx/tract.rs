//! Library shape inference, behind the `onnx-infer` feature: tract's analysis types
//! every value of the model, and the importer takes from it the shapes the file does not
//! give (docs/onnx.md, "Shapes").
//!
//! tract builds its model from the weights' bytes, which a file saved without its
//! external data does not have. So before tract sees the model, every initializer
//! without inline bytes becomes a graph input typed with its dims and element type
//! (small inline tensors, the ones shape arithmetic reads, stay constants), and
//! symbolic dimensions take their `--dim` values: tract then sees fixed shapes only.

use std::cell::Cell;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

use prost::Message;
use tract_onnx::pb;
use tract_onnx::pb::tensor_shape_proto::{dimension, Dimension};
use tract_onnx::prelude::{DatumType, InferenceModelExt};
use tract_onnx::tract_hir::infer::Factoid;

use super::import::Inferred;
use crate::graph::DType;

/// `TensorProto.DataLocation.EXTERNAL`.
const EXTERNAL: i32 = 1;

/// Runs tract's shape inference on the serialized model `bytes`, symbolic dimensions
/// taken from `dims`, and returns the shape and element type of every value tract pins
/// down. Never fails: what tract cannot type is absent, and tract's first error (or a
/// panic inside tract, caught) is kept to explain why.
pub fn infer(bytes: &[u8], dims: &HashMap<String, u64>) -> Inferred {
    match quietly(|| catch_unwind(AssertUnwindSafe(|| analyse(bytes, dims)))) {
        Ok(Ok(inferred)) => inferred,
        Ok(Err(error)) => Inferred {
            types: HashMap::new(),
            error: Some(error),
        },
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Inferred {
                types: HashMap::new(),
                error: Some(format!("tract panicked: {message}")),
            }
        }
    }
}

thread_local! {
    /// Whether this thread is inside tract's analysis, where a panic is caught and
    /// becomes the import's error, so printing it would only be noise.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with panic messages silenced on this thread only: once per process a panic
/// hook is installed that says nothing while the thread's [`QUIET`] flag is set and
/// hands every other panic (any other thread, or this one outside `f`) to the hook that
/// was there before, so the rest of the program prints its panics as usual.
fn quietly<T>(f: impl FnOnce() -> T) -> T {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let was = QUIET.with(|quiet| quiet.replace(true));
    let result = f();
    QUIET.with(|quiet| quiet.set(was));
    result
}

/// Decodes, prepares and analyses the model; the error is tract's message.
fn analyse(bytes: &[u8], dims: &HashMap<String, u64>) -> Result<Inferred, String> {
    let mut model = pb::ModelProto::decode(bytes).map_err(|e| e.to_string())?;
    let graph = model
        .graph
        .as_mut()
        .ok_or_else(|| "the model has no graph".to_string())?;
    prepare(graph, dims);
    let parsed = tract_onnx::onnx()
        .parse(&model, None)
        .map_err(|e| format!("{e:#}"))?;
    if let Some(name) = parsed.unresolved_inputs.first() {
        return Err(format!("value {name:?} is read but never written"));
    }
    let mut inference = parsed.model;
    // Obstinate: an op tract cannot analyse stops only what depends on it.
    let error = inference.analyse(true).err().map(|e| format!("{e:#}"));
    let mut types = HashMap::new();
    for (name, outlet) in &parsed.outlets_by_name {
        let Ok(fact) = inference.outlet_fact(*outlet) else {
            continue;
        };
        let shape = fact
            .shape
            .as_concrete_finite()
            .ok()
            .flatten()
            .map(|s| s.iter().map(|&d| d as u64).collect::<Vec<u64>>());
        let dtype = fact.datum_type.concretize().and_then(dtype_of);
        if let (Some(shape), Some(dtype)) = (shape, dtype) {
            types.insert(name.clone(), (shape, dtype));
        }
    }
    Ok(Inferred { types, error })
}

/// Whether a tensor literal carries its bytes in the file.
fn has_inline_data(t: &pb::TensorProto) -> bool {
    t.data_location != Some(EXTERNAL)
        && (!t.raw_data.is_empty()
            || !t.float_data.is_empty()
            || !t.int32_data.is_empty()
            || !t.int64_data.is_empty()
            || !t.double_data.is_empty()
            || !t.uint64_data.is_empty()
            || !t.string_data.is_empty())
}

/// Rewrites `graph` so tract needs no weight bytes and sees no unresolved symbol:
/// initializers without inline data become typed graph inputs, and every `dim_param`
/// takes its value from `dims` or becomes an unknown dimension.
fn prepare(graph: &mut pb::GraphProto, dims: &HashMap<String, u64>) {
    let (inline, bare): (Vec<_>, Vec<_>) = std::mem::take(&mut graph.initializer)
        .into_iter()
        .partition(has_inline_data);
    graph.initializer = inline;
    for t in bare {
        let info = pb::ValueInfoProto {
            name: t.name.clone(),
            r#type: Some(tensor_type(t.data_type, &t.dims)),
            ..pb::ValueInfoProto::default()
        };
        // Before IR 4 an initializer is listed as a graph input too.
        match graph.input.iter_mut().find(|i| i.name == t.name) {
            Some(listed) => *listed = info,
            None => graph.input.push(info),
        }
    }
    let infos = graph
        .input
        .iter_mut()
        .chain(graph.output.iter_mut())
        .chain(graph.value_info.iter_mut());
    for info in infos {
        let Some(pb::type_proto::Value::TensorType(t)) =
            info.r#type.as_mut().and_then(|t| t.value.as_mut())
        else {
            continue;
        };
        for d in t.shape.iter_mut().flat_map(|s| s.dim.iter_mut()) {
            if let Some(dimension::Value::DimParam(p)) = &d.value {
                d.value = dims
                    .get(p)
                    .and_then(|&n| i64::try_from(n).ok())
                    .map(dimension::Value::DimValue);
            }
        }
    }
}

/// The `TypeProto` of a dense tensor with fixed dims.
fn tensor_type(elem_type: i32, dims: &[i64]) -> pb::TypeProto {
    let dim = dims
        .iter()
        .map(|&d| Dimension {
            value: Some(dimension::Value::DimValue(d)),
            ..Dimension::default()
        })
        .collect();
    pb::TypeProto {
        value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
            elem_type,
            shape: Some(pb::TensorShapeProto { dim }),
        })),
        ..pb::TypeProto::default()
    }
}

/// The element type of a tract datum type; tract types shape values as `TDim`, which
/// ONNX stores as int64.
fn dtype_of(dt: DatumType) -> Option<DType> {
    Some(match dt {
        DatumType::Bool => DType::Bool,
        DatumType::U8 => DType::U8,
        DatumType::U16 => DType::U16,
        DatumType::U32 => DType::U32,
        DatumType::U64 => DType::U64,
        DatumType::I8 => DType::I8,
        DatumType::I16 => DType::I16,
        DatumType::I32 => DType::I32,
        DatumType::I64 | DatumType::TDim => DType::I64,
        DatumType::F16 => DType::F16,
        DatumType::F32 => DType::F32,
        DatumType::F64 => DType::F64,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_is_set_only_inside_and_a_caught_panic_becomes_a_value() {
        assert!(!QUIET.with(Cell::get));
        let caught = quietly(|| {
            assert!(QUIET.with(Cell::get));
            catch_unwind(|| -> u32 { panic!("inside tract") })
        });
        assert!(caught.is_err());
        assert!(
            !QUIET.with(Cell::get),
            "the flag is restored after the call"
        );
    }

    #[test]
    fn another_thread_is_not_silenced() {
        let inner = quietly(|| std::thread::spawn(|| QUIET.with(Cell::get)).join());
        assert_eq!(inner.ok(), Some(false));
    }
}
