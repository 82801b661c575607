//! [`Inputs`]: the one shape of a graph's input and weight values, taken by every
//! runner (graph contexts, streams, tensor memory, the CPU reference).

use std::collections::HashMap;

use crate::graph::TensorId;

/// Values by tensor: what every runner takes ([`crate::runtime::GraphContext::execute`],
/// [`crate::stream::ExecuteRequest::inputs`], [`super::TensorMemory::write_inputs`],
/// [`super::cpu_ref::evaluate`]).
pub type Inputs = HashMap<TensorId, TensorData>;

/// The values of one tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    /// Float values.
    F32(Vec<f32>),
    /// Integer values (token ids).
    U32(Vec<u32>),
}

impl TensorData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(v) => v.len(),
            TensorData::U32(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The float values, if this is `F32`.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            TensorData::F32(v) => Some(v),
            TensorData::U32(_) => None,
        }
    }

    /// The little-endian bytes (what the GPU buffer holds).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            TensorData::F32(v) => bytemuck::cast_slice(v).to_vec(),
            TensorData::U32(v) => bytemuck::cast_slice(v).to_vec(),
        }
    }

    /// The little-endian bytes, borrowed (what the GPU buffer holds).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            TensorData::F32(v) => bytemuck::cast_slice(v),
            TensorData::U32(v) => bytemuck::cast_slice(v),
        }
    }

    /// The first `len` elements (all of them when there are fewer).
    pub(crate) fn prefix(&self, len: usize) -> TensorData {
        match self {
            TensorData::F32(v) => TensorData::F32(v[..len.min(v.len())].to_vec()),
            TensorData::U32(v) => TensorData::U32(v[..len.min(v.len())].to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_little_endian_and_borrowed() {
        let data = TensorData::U32(vec![1, 0x0102_0304]);
        assert_eq!(data.as_bytes(), &[1, 0, 0, 0, 4, 3, 2, 1]);
        assert_eq!(data.to_bytes(), data.as_bytes());
        assert_eq!(
            TensorData::F32(vec![1.0, 2.0]).prefix(1),
            TensorData::F32(vec![1.0])
        );
    }
}
