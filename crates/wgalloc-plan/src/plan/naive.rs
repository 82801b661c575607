//! [`naive_plan`]: every planned tensor in memory of its own, the baseline that other
//! planners are measured against.

use super::{BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement, Plan, PlanError};
use crate::graph::Graph;

/// Plans `graph` with no reuse at all: each planned tensor (input, intermediate,
/// output) gets a chunk of its own in buffer 0, at offset 0, sized to the tensor's
/// bytes rounded up to the buffer type's alignment. A view gets its root's placement;
/// weights (and views of weights) get `None`. A tensor larger than
/// `buffer_type.max_size` gets an oversized chunk. The planner is named `naive`.
///
/// # Errors
/// [`PlanError::InvalidGraph`] when the graph does not validate;
/// [`PlanError::SizeOverflow`] when a size cannot be aligned in 64 bits.
pub fn naive_plan(graph: &Graph, buffer_type: &BufferTypeDesc) -> Result<Plan, PlanError> {
    graph.validate()?;
    let mut placements: Vec<Option<Placement>> = vec![None; graph.tensors.len()];
    let mut chunks = Vec::new();
    for id in graph.planned_tensors() {
        let size = graph
            .reserved_size(id)
            .and_then(|size| buffer_type.align_up(size))
            .ok_or(PlanError::SizeOverflow { tensor: id })?;
        placements[id.index()] = Some(Placement {
            buffer: BufferId(0),
            chunk: chunks.len(),
            offset: 0,
            size,
        });
        chunks.push(ChunkPlan {
            size,
            oversized: size > buffer_type.max_size,
        });
    }
    for tensor in &graph.tensors {
        if tensor.view_of.is_some() {
            let root = graph.root_of(tensor.id).unwrap_or(tensor.id);
            placements[tensor.id.index()] = placements.get(root.index()).copied().flatten();
        }
    }
    Ok(Plan {
        planner: "naive".to_string(),
        placements,
        buffers: vec![BufferPlan {
            buffer_type: buffer_type.clone(),
            chunks,
            same_as: None,
        }],
        inplace: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};

    fn storage(alignment: u64, max_size: u64) -> BufferTypeDesc {
        BufferTypeDesc::new("storage", alignment, max_size).expect("valid buffer type")
    }

    #[test]
    fn every_planned_tensor_gets_its_own_aligned_chunk() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[3]);
        let w = b.weight("w", DType::F32, &[3]);
        let y = b.node("mul", &[x, w], &[3], true);
        let z = b.node("sum", &[y], &[5], false);
        b.mark_output(z);
        let g = b.build().expect("valid");
        let plan = naive_plan(&g, &storage(32, 1 << 20)).expect("plan");
        assert_eq!(plan.planner, "naive");
        assert_eq!(plan.placement(w), None);
        let sizes: Vec<u64> = plan.buffers[0].chunks.iter().map(|c| c.size).collect();
        assert_eq!(sizes, vec![32, 32, 32]);
        let chunks: Vec<usize> = [x, y, z]
            .iter()
            .map(|&t| plan.placement(t).map(|p| p.chunk).unwrap_or(usize::MAX))
            .collect();
        assert_eq!(chunks, vec![0, 1, 2]);
        assert!(plan.inplace.is_empty());
        assert_eq!(plan.total_size(), 96);
    }

    #[test]
    fn views_share_their_roots_placement_and_weight_views_have_none() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[4]);
        let w = b.weight("w", DType::F32, &[4]);
        let wv = b.view("wv", w, &[2, 2]);
        let a = b.node("relu", &[x], &[4], true);
        let v = b.view("v", a, &[2, 2]);
        let c = b.node("add", &[v, wv], &[2, 2], false);
        b.mark_output(c);
        let g = b.build().expect("valid");
        let plan = naive_plan(&g, &storage(4, 1 << 20)).expect("plan");
        assert_eq!(plan.placement(v), plan.placement(a));
        assert!(plan.placement(a).is_some());
        assert_eq!(plan.placement(wv), None);
        assert_eq!(plan.buffers[0].chunks.len(), 3);
    }

    #[test]
    fn tensor_above_max_size_gets_an_oversized_chunk() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[64]);
        let y = b.node("relu", &[x], &[4], false);
        b.mark_output(y);
        let g = b.build().expect("valid");
        let plan = naive_plan(&g, &storage(4, 100)).expect("plan");
        let flags: Vec<bool> = plan.buffers[0].chunks.iter().map(|c| c.oversized).collect();
        assert_eq!(flags, vec![true, false]);
    }

    #[test]
    fn invalid_graph_is_refused() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[4]);
        let _ = b.node("relu", &[crate::graph::TensorId(9)], &[4], false);
        let _ = x;
        let g = b.graph().clone();
        assert!(matches!(
            naive_plan(&g, &storage(4, 100)),
            Err(PlanError::InvalidGraph(_))
        ));
    }
}
