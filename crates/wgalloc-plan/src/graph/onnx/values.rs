//! What the file says about each value: element type and (possibly partial) shape,
//! from graph inputs, outputs, `value_info`, initializers and `Constant` nodes, with
//! symbolic dimensions resolved from [`super::OnnxOptions::dims`].

use std::collections::HashMap;

use super::proto::{TensorProto, TypeProto, ValueInfoProto};
use crate::graph::{DType, GraphError};

/// One dimension of a value's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A known size.
    Fixed(u64),
    /// A symbol that the options did not resolve.
    Symbol(String),
    /// Neither a size nor a symbol.
    Unknown,
}

/// A value's element type and shape as far as the file tells them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValueType {
    /// The element type, when known.
    pub dtype: Option<DType>,
    /// The dimensions, when the rank is known.
    pub dims: Option<Vec<Dim>>,
}

impl ValueType {
    /// The shape, when every dimension is known.
    pub fn concrete(&self) -> Option<Vec<u64>> {
        self.dims
            .as_ref()?
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => Some(*n),
                _ => None,
            })
            .collect()
    }

    /// The first symbol left unresolved, if any.
    pub fn symbol(&self) -> Option<&str> {
        self.dims.as_ref()?.iter().find_map(|d| match d {
            Dim::Symbol(s) => Some(s.as_str()),
            _ => None,
        })
    }
}

/// The element type of ONNX `TensorProto.DataType` number `elem_type`; `Ok(None)` for
/// `UNDEFINED` (0).
///
/// # Errors
/// [`GraphError::UnknownElementType`] for strings, complex numbers, 8- and 4-bit
/// floats and numbers outside the enum.
pub fn dtype_of(elem_type: i32, value: &str) -> Result<Option<DType>, GraphError> {
    Ok(Some(match elem_type {
        0 => return Ok(None),
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        4 => DType::U16,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        16 => DType::Bf16,
        _ => {
            return Err(GraphError::UnknownElementType {
                value: value.to_string(),
                elem_type,
            })
        }
    }))
}

/// A dimension from the file: negative sizes are rejected.
fn fixed(size: i64, value: &str) -> Result<u64, GraphError> {
    u64::try_from(size).map_err(|_| GraphError::BadShape {
        value: value.to_string(),
        problem: format!("dimension {size} is negative"),
    })
}

/// The type a `ValueInfoProto` declares, symbols resolved from `dims`.
///
/// # Errors
/// An unknown element type or a negative dimension.
pub fn from_value_info(
    info: &ValueInfoProto,
    dims: &HashMap<String, u64>,
) -> Result<ValueType, GraphError> {
    let Some(TypeProto {
        tensor_type: Some(tensor),
    }) = &info.r#type
    else {
        return Ok(ValueType::default());
    };
    let dtype = dtype_of(tensor.elem_type, &info.name)?;
    let shape = match &tensor.shape {
        None => None,
        Some(shape) => Some(
            shape
                .dim
                .iter()
                .map(|d| match (&d.dim_value, &d.dim_param) {
                    (Some(v), _) => fixed(*v, &info.name).map(Dim::Fixed),
                    (None, Some(p)) if !p.is_empty() => Ok(match dims.get(p) {
                        Some(n) => Dim::Fixed(*n),
                        None => Dim::Symbol(p.clone()),
                    }),
                    _ => Ok(Dim::Unknown),
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    Ok(ValueType { dtype, dims: shape })
}

/// The type of a tensor literal (an initializer or a `Constant`'s value).
///
/// # Errors
/// An unknown element type or a negative dimension.
pub fn from_tensor(tensor: &TensorProto, value: &str) -> Result<ValueType, GraphError> {
    let dims = tensor
        .dims
        .iter()
        .map(|&d| fixed(d, value).map(Dim::Fixed))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ValueType {
        dtype: dtype_of(tensor.data_type, value)?,
        dims: Some(dims),
    })
}

/// Merges what two sources say about a value: known dimensions win over unknown ones.
pub fn merge(old: &ValueType, new: &ValueType) -> ValueType {
    let dims = match (&old.dims, &new.dims) {
        (Some(a), Some(b)) if a.len() == b.len() => Some(
            a.iter()
                .zip(b)
                .map(|(x, y)| match (x, y) {
                    (Dim::Fixed(_), _) => x.clone(),
                    (_, Dim::Fixed(_)) => y.clone(),
                    (Dim::Symbol(_), _) => x.clone(),
                    _ => y.clone(),
                })
                .collect(),
        ),
        (Some(a), _) => Some(a.clone()),
        (None, b) => b.clone(),
    };
    ValueType {
        dtype: old.dtype.or(new.dtype),
        dims,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::onnx::proto::{DimensionProto, TensorShapeProto, TensorTypeProto};

    fn info(dims: Vec<DimensionProto>) -> ValueInfoProto {
        ValueInfoProto {
            name: "x".into(),
            r#type: Some(TypeProto {
                tensor_type: Some(TensorTypeProto {
                    elem_type: 1,
                    shape: Some(TensorShapeProto { dim: dims }),
                }),
            }),
        }
    }

    fn param(p: &str) -> DimensionProto {
        DimensionProto {
            dim_value: None,
            dim_param: Some(p.into()),
        }
    }

    #[test]
    fn symbols_resolve_from_the_options_and_stay_named_otherwise() {
        let dims = HashMap::from([("batch".to_string(), 2)]);
        let t = from_value_info(&info(vec![param("batch"), param("seq")]), &dims).expect("valid");
        assert_eq!(t.dims, Some(vec![Dim::Fixed(2), Dim::Symbol("seq".into())]));
        assert_eq!(t.symbol(), Some("seq"));
        assert_eq!(t.concrete(), None);
    }

    #[test]
    fn negative_dimensions_and_strings_are_rejected() {
        let neg = DimensionProto {
            dim_value: Some(-3),
            dim_param: None,
        };
        assert!(matches!(
            from_value_info(&info(vec![neg]), &HashMap::new()),
            Err(GraphError::BadShape { .. })
        ));
        assert!(matches!(
            dtype_of(8, "s"),
            Err(GraphError::UnknownElementType { elem_type: 8, .. })
        ));
        assert_eq!(dtype_of(7, "ids").expect("valid"), Some(DType::I64));
    }

    #[test]
    fn merge_keeps_known_dimensions() {
        let a = ValueType {
            dtype: Some(DType::F32),
            dims: Some(vec![Dim::Fixed(1), Dim::Symbol("s".into())]),
        };
        let b = ValueType {
            dtype: None,
            dims: Some(vec![Dim::Unknown, Dim::Fixed(4)]),
        };
        assert_eq!(merge(&a, &b).concrete(), Some(vec![1, 4]));
    }
}
