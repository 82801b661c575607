//! A node of a user op resolved for a run: its shapes checked, its grid against the
//! device's limit, its parameter block, and its inputs' values for the CPU reference.

use super::op::{elements, OpShapes, ShapeError};
use super::registry::Registered;
use crate::exec::ops::dense_f32_node;
use crate::exec::ExecError;
use crate::graph::{Graph, NodeId};

/// A user-op node, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UserCall {
    /// The node's shapes and parameters.
    pub(crate) shapes: OpShapes,
    /// The parameter block's bytes, when the op has one.
    pub(crate) params: Option<Vec<u8>>,
}

/// A closure's [`ShapeError`] as the executor's error for node `node`.
fn bad_shape(op: &Registered, node: u32, error: &ShapeError) -> ExecError {
    ExecError::BadShape {
        node: NodeId(node),
        op: op.op.name.clone(),
        problem: error.to_string(),
    }
}

/// Checks node `step` against `op`: its input count, dense f32 tensors, the op's own
/// shape check, its parameter block.
///
/// # Errors
/// The errors of [`dense_f32_node`], and [`ExecError::BadShape`] with the closure's
/// message when the op's shape check or parameter block refuses the node.
pub(crate) fn resolve_user(
    graph: &Graph,
    step: usize,
    op: &Registered,
) -> Result<UserCall, ExecError> {
    let node = u32::try_from(step).unwrap_or(u32::MAX);
    let (inputs, output) = dense_f32_node(graph, step, op.op.inputs)?;
    let params = graph
        .nodes
        .get(step)
        .map(|n| n.params.clone())
        .unwrap_or_default();
    let shapes = OpShapes::new(inputs, output, params);
    if let Some(check) = &op.op.check {
        check(&shapes).map_err(|e| bad_shape(op, node, &e))?;
    }
    let params = match &op.checked.params {
        Some(block) => Some((block.bytes)(&shapes).map_err(|e| bad_shape(op, node, &e))?),
        None => None,
    };
    Ok(UserCall { shapes, params })
}

/// The grid derived from a workgroup size and the output's shape: one invocation per
/// output element (see [`crate::exec::UserOp::workgroups`]).
fn default_grid(size: [u32; 3], output: &[u64]) -> [u64; 3] {
    let [x, y, z] = size.map(|d| u64::from(d.max(1)));
    let n = elements(output);
    let last = |k: usize| {
        output
            .len()
            .checked_sub(k + 1)
            .and_then(|i| output.get(i))
            .copied()
            .unwrap_or(1)
    };
    if z > 1 {
        let (dx, dy) = (last(0), last(1));
        let rest = n / dx.max(1) / dy.max(1);
        [dx.div_ceil(x), dy.div_ceil(y), rest.div_ceil(z)]
    } else if y > 1 {
        let dx = last(0);
        [dx.div_ceil(x), (n / dx.max(1)).div_ceil(y), 1]
    } else {
        [n.div_ceil(x), 1, 1]
    }
}

/// The node's workgroup grid for its entry point (in place or not), each dimension
/// within `max_per_dimension`, launching an invocation per output element unless the
/// op is strided.
///
/// # Errors
/// [`ExecError::TooManyWorkgroups`] naming the largest dimension over the limit;
/// [`ExecError::BadShape`] when the op's grid closure refuses the node or its grid
/// launches fewer invocations than the output has elements.
pub(crate) fn grid(
    op: &Registered,
    call: &UserCall,
    node: u32,
    max_per_dimension: u32,
    inplace: bool,
) -> Result<[u32; 3], ExecError> {
    let entry = match (&op.checked.inplace, inplace) {
        (Some(entry), true) => entry,
        _ => &op.checked.entry,
    };
    let grid = match &op.op.grid {
        Some(grid) => grid(&call.shapes).map_err(|e| bad_shape(op, node, &e))?,
        None => default_grid(entry.workgroup_size, call.shapes.output()),
    };
    let worst = grid.iter().copied().max().unwrap_or(0);
    let too_many = || ExecError::TooManyWorkgroups {
        node: NodeId(node),
        groups: worst,
        max: max_per_dimension,
    };
    if worst > u64::from(max_per_dimension) {
        return Err(too_many());
    }
    let launched = grid
        .iter()
        .fold(entry.invocations(), |n, &g| n.saturating_mul(g));
    let wanted = call.shapes.output_len();
    if op.op.covers && launched < wanted {
        return Err(bad_shape(
            op,
            node,
            &ShapeError::Refused(format!(
                "the grid {grid:?} of @workgroup_size {:?} launches {launched} invocations \
                 for {wanted} output elements: part of the output would stay unwritten \
                 (fix UserOp::workgroups, or mark a looping kernel UserOp::strided)",
                entry.workgroup_size
            )),
        ));
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
                call.shapes.inputs().get(i),
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
            let (gate, up) = (s.input(0)?, s.input(1)?);
            (gate == up)
                .then_some(())
                .ok_or_else(|| format!("gate {gate:?} and up {up:?} differ").into())
        });
        ops.register(checked).expect("registers");
        let call = resolve_user(&graph(&[2, 8], &[2, 8]), 0, op(&ops)).expect("same shapes");
        assert_eq!(call.shapes.output(), &[2, 8]);
        let block = call.params.expect("a parameter block");
        let params: &crate::exec::KernelParams = bytemuck::from_bytes(&block);
        assert_eq!(params.ints, [16, 16, 0, 0], "the default parameter block");
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
        ops.register(swiglu("sw").workgroups(|s| Ok([s.output_len(), 2, 1])))
            .expect("registers");
        let call = resolve_user(&graph(&[4, 100], &[4, 100]), 0, op(&ops)).expect("resolves");
        assert_eq!(grid(op(&ops), &call, 0, 400, false), Ok([400, 2, 1]));
        assert_eq!(
            grid(op(&ops), &call, 5, 399, false),
            Err(ExecError::TooManyWorkgroups {
                node: NodeId(5),
                groups: 400,
                max: 399
            })
        );
    }

    #[test]
    fn the_default_grid_follows_the_reflected_workgroup_size() {
        // 1-D: along x over every element.
        assert_eq!(default_grid([256, 1, 1], &[70, 1000]), [274, 1, 1]);
        // 2-D (the 16x16 matmul): x over the columns, y over the rows.
        assert_eq!(default_grid([16, 16, 1], &[32, 32]), [2, 2, 1]);
        assert_eq!(default_grid([16, 16, 1], &[3, 33, 17]), [2, 7, 1]);
        assert_eq!(default_grid([8, 8, 1], &[5]), [1, 1, 1]);
        // 3-D: x, y over the last two, z over the rest.
        assert_eq!(default_grid([4, 4, 4], &[2, 3, 9, 5]), [2, 3, 2]);
        for (size, shape) in [
            ([16u32, 16, 1], vec![31u64, 47]),
            ([64, 1, 1], vec![1000]),
            ([4, 2, 2], vec![3, 5, 7, 9]),
        ] {
            let [x, y, z] = default_grid(size, &shape);
            let launched = x * y * z * size.iter().map(|&d| u64::from(d)).product::<u64>();
            assert!(launched >= elements(&shape), "{size:?} {shape:?}");
        }
    }

    #[test]
    fn a_grid_that_launches_too_few_invocations_is_refused_unless_strided() {
        let mut ops = UserOps::new();
        ops.register(swiglu("few").workgroups(|s| Ok([s.output_len() / 256, 1, 1])))
            .expect("registers");
        ops.register(swiglu("loops").workgroups(|_| Ok([1, 1, 1])).strided())
            .expect("registers");
        let g = graph(&[4, 100], &[4, 100]);
        let call = resolve_user(&g, 0, ops.get("few").expect("few")).expect("resolves");
        match grid(ops.get("few").expect("few"), &call, 0, 65535, false) {
            Err(ExecError::BadShape { problem, .. }) => {
                assert!(problem.contains("256 invocations for 400"), "{problem}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(
            grid(ops.get("loops").expect("loops"), &call, 0, 65535, false),
            Ok([1, 1, 1])
        );
    }

    #[test]
    fn a_params_closure_with_a_wrong_rank_is_a_typed_error_not_a_panic() {
        let mut ops = UserOps::new();
        ops.register(swiglu("rank").params(|s| {
            let [m, n] = s.dims(0)?;
            Ok(crate::exec::KernelParams {
                ints: [OpShapes::u32(m)?, OpShapes::u32(n)?, 0, 0],
                floats: [0.0; 4],
            })
        }))
        .expect("registers");
        let op = ops.get("rank").expect("rank");
        assert!(resolve_user(&graph(&[2, 8], &[2, 8]), 0, op).is_ok());
        match resolve_user(&graph(&[16], &[16]), 0, op) {
            Err(ExecError::BadShape { problem, .. }) => {
                assert!(problem.contains("rank 2 expected"), "{problem}")
            }
            other => panic!("expected a typed rank error, got {other:?}"),
        }
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
