//! The allocation sequence every online peer replays, taken from a graph.
//!
//! The rule: walk the nodes in execution order; before node `i` runs, allocate every
//! planned tensor whose memory becomes live at step `i` (graph inputs at step 0, a
//! node's outputs at its own step); after node `i`, free every tensor whose last use is
//! step `i` (outputs live to the last step). Views have no memory of their own: their
//! root lives until the last use of any view ([`Lifetimes`] already says so). Weights
//! are not part of the activation memory. Sizes are the bytes wgalloc reserves for a
//! tensor (whole 4-byte words) rounded up to 32, the storage alignment of lavapipe and
//! NVIDIA; zero-byte tensors are skipped.

use wgalloc_plan::graph::{Graph, Lifetimes};

/// The granule every request is rounded to.
pub const GRANULE: u64 = 32;

/// One step of the replay. A slot names one tensor's allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Allocate `size` bytes for `slot`.
    Alloc {
        /// The allocation's slot, dense from 0.
        slot: usize,
        /// Bytes, a multiple of [`GRANULE`].
        size: u64,
    },
    /// Free `slot`'s allocation.
    Free {
        /// A slot allocated earlier.
        slot: usize,
    },
}

/// A tensor's memory as an interval of steps, for the offline peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// First step live.
    pub first: u32,
    /// Last step live, inclusive.
    pub last: u32,
    /// Bytes, a multiple of [`GRANULE`].
    pub size: u64,
}

/// The replay of one graph: its events, and the same tensors as intervals.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    /// Allocations and frees in order.
    pub events: Vec<Event>,
    /// `intervals[slot]`: the lifetime and size of the slot's tensor.
    pub intervals: Vec<Interval>,
}

impl Replay {
    /// The replay of a validated graph.
    pub fn of(graph: &Graph) -> Replay {
        let lifetimes = Lifetimes::of(graph);
        let steps = lifetimes.steps.max(1) as usize;
        let mut starts: Vec<Vec<usize>> = vec![Vec::new(); steps];
        let mut ends: Vec<Vec<usize>> = vec![Vec::new(); steps];
        let mut intervals = Vec::new();
        for id in graph.planned_tensors() {
            let (Some(life), Some(size)) = (lifetimes.get(id), graph.reserved_size(id)) else {
                continue;
            };
            let size = size.div_ceil(GRANULE).saturating_mul(GRANULE);
            if size == 0 {
                continue;
            }
            let slot = intervals.len();
            intervals.push(Interval {
                first: life.first,
                last: life.last,
                size,
            });
            let first = (life.first as usize).min(steps - 1);
            let last = (life.last as usize).clamp(first, steps - 1);
            starts[first].push(slot);
            ends[last].push(slot);
        }
        let mut events = Vec::with_capacity(intervals.len() * 2);
        for step in 0..steps {
            for &slot in &starts[step] {
                events.push(Event::Alloc {
                    slot,
                    size: intervals[slot].size,
                });
            }
            for &slot in &ends[step] {
                events.push(Event::Free { slot });
            }
        }
        Replay { events, intervals }
    }

    /// The largest sum of live sizes after any allocation: no online allocator can
    /// reserve less on this sequence (the strict bound, at the replay's granule).
    pub fn live_peak(&self) -> u64 {
        let mut live = 0u64;
        let mut peak = 0u64;
        for event in &self.events {
            match *event {
                Event::Alloc { size, .. } => {
                    live = live.saturating_add(size);
                    peak = peak.max(live);
                }
                Event::Free { slot } => {
                    live = live.saturating_sub(self.intervals.get(slot).map_or(0, |i| i.size));
                }
            }
        }
        peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wgalloc_plan::graph::{DType, GraphBuilder};

    #[test]
    fn allocates_before_the_node_and_frees_after_the_last_use_through_views() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[10]); // 40 bytes -> 64
        let a = b.node("relu", &[x], &[10], false);
        let v = b.view("v", a, &[2, 5]);
        let c = b.node("neg", &[x], &[10], false);
        let d = b.node("add", &[v, c], &[2, 5], false);
        b.mark_output(d);
        let g = b.build().expect("valid");
        let r = Replay::of(&g);
        use Event::*;
        // slots follow planned_tensors' order: x, a, c, d
        assert_eq!(
            r.events,
            vec![
                Alloc { slot: 0, size: 64 },
                Alloc { slot: 1, size: 64 },
                Alloc { slot: 2, size: 64 },
                Free { slot: 0 },
                Alloc { slot: 3, size: 64 },
                Free { slot: 1 },
                Free { slot: 2 },
                Free { slot: 3 },
            ]
        );
        assert_eq!(r.live_peak(), 192);
    }
}
