//! [`check_plan_against_limits`]: a plan of a graph against a device's limits, before
//! any wgpu call, with every tensor's binding taken from the one rule of
//! [`crate::graph::extent`].

use crate::device::{check_bindings, check_chunks_against_limits, DeviceError};
use crate::graph::Graph;
use crate::plan::Plan;

/// Checks a plan against a device's limits before any wgpu call: every chunk fits
/// `max_buffer_size`; every placed tensor's binding (its extent in `graph`, rounded up
/// to whole words: [`crate::graph::extent`], the rule every layer shares) fits
/// `max_storage_buffer_binding_size`, starts at a multiple of
/// `min_storage_buffer_offset_alignment` and lies inside its chunk.
///
/// # Errors
/// [`DeviceError::ChunkTooLarge`], [`DeviceError::TensorTooLarge`] (both "never fits" on
/// this device), [`DeviceError::MisalignedPlacement`], [`DeviceError::BadPlacement`] or
/// [`DeviceError::PlanForAnotherGraph`].
pub fn check_plan_against_limits(
    plan: &Plan,
    graph: &Graph,
    limits: &wgpu::Limits,
) -> Result<(), DeviceError> {
    check_chunks_against_limits(plan, limits)?;
    if plan.placements.len() != graph.tensors.len() {
        return Err(DeviceError::PlanForAnotherGraph {
            placements: plan.placements.len(),
            tensors: graph.tensors.len(),
        });
    }
    check_bindings(plan, limits, |tensor, _| {
        let extent = graph.extent(tensor)?;
        Some((extent.offset, extent.binding_size()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder, TensorId};
    use crate::plan::{BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement};

    fn limits(max_binding: u64) -> wgpu::Limits {
        wgpu::Limits {
            max_buffer_size: 1 << 20,
            max_storage_buffer_binding_size: max_binding,
            min_storage_buffer_offset_alignment: 32,
            ..wgpu::Limits::default()
        }
    }

    fn one_chunk_plan(chunk: u64, placements: Vec<Option<Placement>>) -> Plan {
        Plan {
            planner: "test".into(),
            placements,
            buffers: vec![BufferPlan {
                buffer_type: BufferTypeDesc::new("storage", 32, 1 << 20).expect("valid"),
                chunks: vec![ChunkPlan {
                    size: chunk,
                    oversized: false,
                }],
                same_as: None,
            }],
            inplace: Vec::new(),
        }
    }

    fn at(offset: u64, size: u64) -> Option<Placement> {
        Some(Placement {
            buffer: BufferId(0),
            chunk: 0,
            offset,
            size,
        })
    }

    #[test]
    fn the_check_uses_exact_tensor_sizes_not_reservations() {
        // Reserved 1024 bytes for a 1000-byte tensor: only the 1000 bytes are bound.
        let mut b = GraphBuilder::new("g");
        b.input("x", DType::U8, &[1000]);
        let graph = b.build().expect("valid");
        let plan = one_chunk_plan(1024, vec![at(0, 1024)]);
        assert!(check_plan_against_limits(&plan, &graph, &limits(1000)).is_ok());
        assert!(matches!(
            check_plan_against_limits(&plan, &graph, &limits(996)),
            Err(DeviceError::TensorTooLarge { size: 1000, .. })
        ));
    }

    #[test]
    fn a_broadcast_view_binds_its_roots_bytes_not_its_logical_size() {
        // bert's expand_2: a view 128 times larger than its root, whose root ends the
        // chunk. Bound at its logical size it would run past the chunk.
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[32]);
        b.view("expand", x, &[128, 32]);
        let graph = b.build().expect("valid");
        let plan = one_chunk_plan(256, vec![at(128, 128), at(128, 128)]);
        assert_eq!(
            check_plan_against_limits(&plan, &graph, &limits(1 << 20)),
            Ok(())
        );
    }

    #[test]
    fn a_plan_for_another_graph_is_refused() {
        let graph = GraphBuilder::new("empty").build().expect("valid");
        let plan = one_chunk_plan(256, vec![at(0, 64), at(64, 64)]);
        assert_eq!(
            check_plan_against_limits(&plan, &graph, &limits(4096)),
            Err(DeviceError::PlanForAnotherGraph {
                placements: 2,
                tensors: 0
            })
        );
        let _ = TensorId(0);
    }
}
