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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::custom::tests_support::swiglu;
    use crate::exec::custom::UserOps;
    use crate::graph::{DType, GraphBuilder};

    fn graph(gate: &[u64], up: &[u64]) -> Graph {
        let mut b = GraphBuilder::new("g");
        let g = b.input("g", DType::F32, gate);
        let u = b.input("u", DType::F32, up);
        let h = b.node("sw", &[g, u], gate, false);
        b.mark_output(h);
        b.build().expect("valid")
    }

    fn op(ops: &UserOps) -> &Registered {
        ops.get("sw").expect("registered")
    }

    #[test]
    fn the_ops_own_shape_check_refuses_a_node_with_its_message() {
        let mut ops = UserOps::new();
        let checked = swiglu("sw").check(|s| {
            (s.inputs[0] == s.inputs[1])
                .then_some(())
                .ok_or_else(|| format!("gate {:?} and up {:?} differ", s.inputs[0], s.inputs[1]))
        });
        ops.register(checked).expect("registers");
        let call = resolve_user(&graph(&[2, 8], &[2, 8]), 0, op(&ops)).expect("same shapes");
        assert_eq!(call.shapes.output, vec![2, 8]);
        assert_eq!(
            call.params.ints,
            [16, 16, 0, 0],
            "the default parameter block"
        );
        match resolve_user(&graph(&[2, 8], &[16]), 0, op(&ops)) {
            Err(ExecError::BadShape { node, op, problem }) => {
                assert_eq!((node, op.as_str()), (NodeId(0), "sw"));
                assert!(problem.contains("differ"), "{problem}");
            }
            other => panic!("expected the op's refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_grid_over_the_limit_is_refused_and_one_within_it_is_kept() {
        let mut ops = UserOps::new();
        ops.register(swiglu("sw").workgroups(|s| [s.output_len(), 2, 1]))
            .expect("registers");
        let call = resolve_user(&graph(&[4, 100], &[4, 100]), 0, op(&ops)).expect("resolves");
        assert_eq!(grid(op(&ops), &call, 0, 400), Ok([400, 2, 1]));
        assert_eq!(
            grid(op(&ops), &call, 5, 399),
            Err(ExecError::TooManyWorkgroups {
                node: NodeId(5),
                groups: 400,
                max: 399
            })
        );
    }

    #[test]
    fn a_cpu_reference_of_the_wrong_length_is_refused() {
        let mut ops = UserOps::new();
        ops.register(swiglu("sw").cpu(|inputs, _| inputs[0][1..].to_vec()))
            .expect("registers");
        let call = resolve_user(&graph(&[3], &[3]), 0, op(&ops)).expect("resolves");
        let x = [1.0, 2.0, 3.0];
        assert!(matches!(
            apply_cpu(op(&ops), &call, &[&x, &x], 0),
            Err(ExecError::BadShape { .. })
        ));
        assert!(matches!(
            apply_cpu(op(&ops), &call, &[&x, &x[..2]], 0),
            Err(ExecError::BadShape { .. })
        ));
    }

    #[test]
    fn a_node_with_the_wrong_input_count_or_dtype_is_refused() {
        let mut ops = UserOps::new();
        ops.register(swiglu("sw")).expect("registers");
        let mut b = GraphBuilder::new("g");
        let g = b.input("g", DType::F32, &[4]);
        let ids = b.input("ids", DType::U32, &[4]);
        b.node("sw", &[g], &[4], false);
        b.node("sw", &[g, ids], &[4], false);
        let graph = b.build().expect("valid");
        assert!(matches!(
            resolve_user(&graph, 0, op(&ops)),
            Err(ExecError::WrongArity {
                expected: 2,
                got: 1,
                ..
            })
        ));
        assert!(matches!(
            resolve_user(&graph, 1, op(&ops)),
            Err(ExecError::BadShape { .. })
        ));
    }
}
