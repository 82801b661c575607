//! [`Checker`]: the checks every op family shares (dtypes, shape against byte size,
//! 32-bit indexing), each failing with an error that names the node and op.

use super::MAX_ELEMENTS;
use crate::exec::ExecError;
use crate::graph::{DType, Graph, NodeId, Tensor, TensorId};

/// The element types the f32-only kernels take.
pub(super) const F32S: &[DType] = &[DType::F32];

/// The element type of an f16 node's float tensors.
pub(super) const F16S: &[DType] = &[DType::F16];

/// Checks a node against its op and returns its dimensions.
pub(super) struct Checker<'g> {
    pub(super) graph: &'g Graph,
    pub(super) step: u32,
    pub(super) op: &'g str,
}

impl<'g> Checker<'g> {
    /// A [`ExecError::BadShape`] for this node.
    pub(super) fn bad(&self, problem: String) -> ExecError {
        ExecError::BadShape {
            node: NodeId(self.step),
            op: self.op.to_string(),
            problem,
        }
    }

    /// The tensor `id`, or [`ExecError::UnknownTensor`].
    pub(super) fn tensor(&self, id: TensorId) -> Result<&'g Tensor, ExecError> {
        self.graph.tensor(id).ok_or(ExecError::UnknownTensor {
            node: NodeId(self.step),
            tensor: id,
        })
    }

    /// `value` as a 32-bit index, or [`ExecError::TooManyElements`].
    pub(super) fn small(&self, value: u64) -> Result<u32, ExecError> {
        u32::try_from(value).map_err(|_| ExecError::TooManyElements {
            node: NodeId(self.step),
            len: value,
            max: MAX_ELEMENTS,
        })
    }

    /// Elements of a tensor, checking that shape, dtype and byte size agree.
    pub(super) fn len(&self, t: &Tensor, dtypes: &[DType]) -> Result<u64, ExecError> {
        if !dtypes.contains(&t.dtype) {
            return Err(self.bad(format!(
                "tensor {} is {:?}, expected one of {:?}",
                t.id, t.dtype, dtypes
            )));
        }
        let len = t
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| self.bad(format!("shape {:?} of {} overflows", t.shape, t.id)))?;
        if len.checked_mul(t.dtype.size()) != Some(t.size) {
            return Err(self.bad(format!(
                "tensor {} has shape {:?} ({len} elements) but {} bytes",
                t.id, t.shape, t.size
            )));
        }
        if len == 0 {
            return Err(self.bad(format!("tensor {} is empty", t.id)));
        }
        Ok(len)
    }

    /// The last dimension of `t` (1 for a scalar).
    pub(super) fn last_dim(t: &Tensor) -> u64 {
        t.shape.last().copied().unwrap_or(1)
    }

    /// Checks that the output has `want` elements.
    pub(super) fn same_len(&self, out: &Tensor, out_len: u64, want: u64) -> Result<(), ExecError> {
        if out_len != want {
            return Err(self.bad(format!(
                "output {} has {out_len} elements, expected {want}",
                out.id
            )));
        }
        Ok(())
    }
}

/// What every family resolver sees: the node's checked tensors and the output's
/// element count.
pub(super) struct NodeView<'g> {
    /// The shared checks.
    pub(super) c: Checker<'g>,
    /// The node's inputs, in order.
    pub(super) inputs: Vec<&'g Tensor>,
    /// The node's output.
    pub(super) out: &'g Tensor,
    /// Elements of the output (checked f32 or f16, 32-bit).
    pub(super) out_len: u64,
    /// The float type every float tensor of the node has: the output's (f32 or f16;
    /// a node's inputs and output are stored alike).
    pub(super) float: &'static [DType],
    /// The node's parameters.
    pub(super) params: &'g [f32],
}

impl NodeView<'_> {
    /// `params[i]`, or `default` when the node gives none.
    pub(super) fn param(&self, i: usize, default: f32) -> f32 {
        self.params.get(i).copied().unwrap_or(default)
    }
}
