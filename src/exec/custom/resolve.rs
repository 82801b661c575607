//! A node of a user op resolved for a run: its shapes checked, its grid against the
//! device's limit, its parameter block, and its inputs' values for the CPU reference.

use super::op::OpShapes;
use super::registry::Registered;
use crate::exec::ops::dense_f32_node;
use crate::exec::{ExecError, KernelParams};
use crate::graph::{Graph, NodeId};

/// A user-op node, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UserCall {
    /// The node's shapes and parameters.
    pub(crate) shapes: OpShapes,
    /// The parameter block.
    pub(crate) params: KernelParams,
}

/// Checks node `step` against `op`: its input count, dense f32 tensors, the op's own
/// shape check.
///
/// # Errors
/// The errors of [`dense_f32_node`], and [`ExecError::BadShape`] with the op's own
/// message when its shape check fails.
pub(crate) fn resolve_user(
    graph: &Graph,
    step: usize,
    op: &Registered,
) -> Result<UserCall, ExecError> {
    let (inputs, output) = dense_f32_node(graph, step, op.op.inputs)?;
    let params = graph
        .nodes
        .get(step)
        .map(|n| n.params.clone())
        .unwrap_or_default();
    let shapes = OpShapes {
        inputs,
        output,
        params,
    };
    if let Some(check) = &op.op.check {
        check(&shapes).map_err(|problem| ExecError::BadShape {
            node: NodeId(u32::try_from(step).unwrap_or(u32::MAX)),
            op: op.op.name.clone(),
            problem,
        })?;
    }
    let params = (op.op.params)(&shapes);
    Ok(UserCall { shapes, params })
}

/// The node's workgroup grid, each dimension within `max_per_dimension`.
///
/// # Errors
/// [`ExecError::TooManyWorkgroups`] naming the largest dimension over the limit.
pub(crate) fn grid(
    op: &Registered,
    call: &UserCall,
    node: u32,
    max_per_dimension: u32,
) -> Result<[u32; 3], ExecError> {
    let grid = (op.op.grid)(&call.shapes);
    let worst = grid.iter().copied().max().unwrap_or(0);
    let too_many = || ExecError::TooManyWorkgroups {
        node: NodeId(node),
        groups: worst,
        max: max_per_dimension,
    };
    if worst > u64::from(max_per_dimension) {
        return Err(too_many());
    }
    let small = |g: u64| u32::try_from(g).map_err(|_| too_many());
    Ok([small(grid[0])?, small(grid[1])?, small(grid[2])?])
}

/// The node's output computed by the op's CPU reference from its inputs' values.
///
/// # Errors
/// [`ExecError::NoCpuReference`] when the op has none; [`ExecError::BadShape`] when
/// an input's value has the wrong length or the reference returns a wrong length.
pub(crate) fn apply_cpu(
    op: &Registered,
    call: &UserCall,
    inputs: &[&[f32]],
    node: u32,
) -> Result<Vec<f32>, ExecError> {
    let bad = |problem: String| ExecError::BadShape {
        node: NodeId(node),
        op: op.op.name.clone(),
        problem,
    };
    let cpu = op
        .op
        .cpu
        .as_ref()
        .ok_or_else(|| ExecError::NoCpuReference {
            node: NodeId(node),
            op: op.op.name.clone(),
        })?;
    for (i, values) in inputs.iter().enumerate() {
        if values.len() as u64 != call.shapes.input_len(i) {
            return Err(bad(format!(
                "input {i} has {} values, its shape {:?} has {}",
                values.len(),
                call.shapes.inputs.get(i),
                call.shapes.input_len(i)
            )));
        }
    }
    let out = cpu(inputs, &call.shapes);
    if out.len() as u64 != call.shapes.output_len() {
        return Err(bad(format!(
            "the CPU reference returned {} values, the output has {}",
            out.len(),
            call.shapes.output_len()
        )));
    }
    Ok(out)
}
