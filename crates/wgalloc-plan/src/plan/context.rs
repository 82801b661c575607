//! Context tensors (ggml's `alloc_ctx_tensors_from_buft`): pack a list of tensors,
//! typically a model's weights, into as few chunks of a buffer type as its max size
//! allows. Every one of them lives for the whole pass, so nothing is reused.

use super::{
    BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement, Plan, PlanError, TensorAllocator,
};
use crate::graph::{Graph, Role, TensorId};

/// The planner name of context plans.
pub const CONTEXT_PLANNER: &str = "context";

/// Packs `tensors` in the given order into chunks of `buffer_type`: each tensor goes
/// at the next aligned offset of the current chunk, and a new chunk starts when it
/// would pass the max size. A tensor larger than the max size gets an oversized chunk
/// of its own. Views in the list are skipped (they alias their root), as are repeats.
///
/// The result is a [`Plan`] named `"context"` with one buffer, a placement for every
/// listed tensor and every view of one, and `None` elsewhere, so weights are looked up
/// the same way activations are.
///
/// # Errors
/// [`PlanError::UnknownTensor`] for an id the graph does not have;
/// [`PlanError::SizeOverflow`] if a size overflows when aligned.
pub fn alloc_ctx_tensors(
    graph: &Graph,
    tensors: &[TensorId],
    buffer_type: &BufferTypeDesc,
) -> Result<Plan, PlanError> {
    let count = graph.tensors.len();
    let mut placements: Vec<Option<Placement>> = vec![None; count];
    let mut chunks: Vec<ChunkPlan> = Vec::new();
    let mut current = TensorAllocator::new(buffer_type.alignment(), buffer_type.max_size)?;
    for &id in tensors {
        let tensor = graph
            .tensor(id)
            .ok_or(PlanError::UnknownTensor { tensor: id, count })?;
        if tensor.is_view() || placements[id.index()].is_some() {
            continue;
        }
        let binding = graph
            .reserved_size(id)
            .ok_or(PlanError::SizeOverflow { tensor: id })?;
        let size = current.reserved_size(id, binding)?;
        if size > buffer_type.max_size {
            close_chunk(&mut chunks, &mut current, buffer_type)?;
            chunks.push(ChunkPlan {
                size,
                oversized: true,
            });
            placements[id.index()] = Some(Placement {
                buffer: BufferId(0),
                chunk: chunks.len() - 1,
                offset: 0,
                size,
            });
            continue;
        }
        let offset = match current.alloc(id, binding) {
            Ok(offset) => offset,
            Err(PlanError::OutOfSpace { .. }) => {
                close_chunk(&mut chunks, &mut current, buffer_type)?;
                current.alloc(id, binding)?
            }
            Err(other) => return Err(other),
        };
        placements[id.index()] = Some(Placement {
            buffer: BufferId(0),
            chunk: chunks.len(),
            offset,
            size,
        });
    }
    close_chunk(&mut chunks, &mut current, buffer_type)?;
    let root = super::walk::roots(graph);
    for (i, t) in graph.tensors.iter().enumerate() {
        if t.is_view() {
            placements[i] = placements[root[i] as usize];
        }
    }
    let plan = Plan {
        planner: CONTEXT_PLANNER.to_string(),
        placements,
        buffers: vec![BufferPlan {
            buffer_type: buffer_type.clone(),
            chunks,
            same_as: None,
        }],
        inplace: Vec::new(),
    };
    if cfg!(debug_assertions) && graph.validate().is_ok() {
        plan.verify_placed(graph)?;
    }
    Ok(plan)
}

/// Packs every weight of the graph (non-view tensors with role `weight`, in id order)
/// with [`alloc_ctx_tensors`].
///
/// # Errors
/// As [`alloc_ctx_tensors`].
pub fn plan_weights(graph: &Graph, buffer_type: &BufferTypeDesc) -> Result<Plan, PlanError> {
    let weights: Vec<TensorId> = graph
        .tensors
        .iter()
        .filter(|t| t.role == Role::Weight && !t.is_view())
        .map(|t| t.id)
        .collect();
    alloc_ctx_tensors(graph, &weights, buffer_type)
}

/// Ends the current chunk if it holds anything, and starts an empty one.
fn close_chunk(
    chunks: &mut Vec<ChunkPlan>,
    current: &mut TensorAllocator,
    buffer_type: &BufferTypeDesc,
) -> Result<(), PlanError> {
    if current.offset() > 0 {
        chunks.push(ChunkPlan {
            size: current.offset(),
            oversized: false,
        });
        *current = TensorAllocator::new(buffer_type.alignment(), buffer_type.max_size)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};

    fn weights_graph(sizes: &[u64]) -> (Graph, Vec<TensorId>) {
        let mut b = GraphBuilder::new("w");
        let x = b.input("x", DType::U8, &[4]);
        let ws: Vec<TensorId> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| b.weight(format!("w{i}"), DType::U8, &[s]))
            .collect();
        let mut inputs = vec![x];
        inputs.extend(&ws);
        let y = b.node("sum", &inputs, &[1], false);
        b.mark_output(y);
        (b.build().expect("valid"), ws)
    }

    #[test]
    fn weights_pack_in_order_into_as_few_chunks_as_max_size_allows() {
        let (g, ws) = weights_graph(&[40, 40, 40, 10]);
        let plan =
            plan_weights(&g, &BufferTypeDesc::new("w", 16, 100).expect("valid")).expect("plan");
        let at = |t: TensorId| plan.placement(t).map(|p| (p.chunk, p.offset));
        assert_eq!(at(ws[0]), Some((0, 0)));
        assert_eq!(at(ws[1]), Some((0, 48)));
        assert_eq!(at(ws[2]), Some((1, 0)));
        assert_eq!(at(ws[3]), Some((1, 48)));
        assert_eq!(
            plan.buffers[0]
                .chunks
                .iter()
                .map(|c| c.size)
                .collect::<Vec<_>>(),
            [96, 64]
        );
        assert_eq!(
            plan.placement(TensorId(0)),
            None,
            "the input is not a context tensor"
        );
        plan.verify_placed(&g).expect("valid");
        // The strict check wants every activation placed, whatever the plan's name.
        assert!(matches!(
            plan.verify(&g),
            Err(PlanError::Missing {
                tensor: TensorId(0),
                ..
            })
        ));
    }

    #[test]
    fn weight_above_max_size_gets_its_own_oversized_chunk() {
        let (g, ws) = weights_graph(&[10, 500, 10]);
        let plan =
            plan_weights(&g, &BufferTypeDesc::new("w", 4, 100).expect("valid")).expect("plan");
        assert_eq!(
            plan.buffers[0].chunks,
            [
                ChunkPlan {
                    size: 12,
                    oversized: false
                },
                ChunkPlan {
                    size: 500,
                    oversized: true
                },
                ChunkPlan {
                    size: 12,
                    oversized: false
                },
            ]
        );
        assert_eq!(plan.placement(ws[1]).map(|p| p.chunk), Some(1));
        plan.verify_placed(&g).expect("valid");
    }

    #[test]
    fn unknown_tensor_is_an_error() {
        let (g, _) = weights_graph(&[10]);
        let buft = BufferTypeDesc::new("w", 4, 100).expect("valid");
        assert_eq!(
            alloc_ctx_tensors(&g, &[TensorId(99)], &buft),
            Err(PlanError::UnknownTensor {
                tensor: TensorId(99),
                count: 3
            })
        );
    }
}
