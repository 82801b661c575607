//! Greedy by size over whole buffers ("shared objects"), as in Pisarchyk and Lee,
//! *Efficient Memory Management for Deep Neural Net Inference* (2020), the strategy
//! TFLite's GPU delegate and ratchet use: every tensor lives in one whole buffer; the
//! tensors are taken largest first, and each goes to the smallest existing buffer that
//! is large enough and holds no tensor whose lifetime overlaps its own, or to a new
//! buffer of its own size. The memory is the sum of the buffers.
//!
//! It sees every lifetime at once (offline), but it never packs two live tensors into
//! one buffer, so a buffer's tail past a smaller tenant is wasted.

use crate::replay::{Interval, Replay};

/// The column's name.
pub const GREEDY_BY_SIZE: &str = "greedy by size";

/// One shared buffer: its size and the lifetimes of its tenants.
struct SharedBuffer {
    size: u64,
    tenants: Vec<Interval>,
}

/// The sum of the buffers greedy by size creates for `replay`'s tensors.
pub fn greedy_by_size_total(replay: &Replay) -> u64 {
    let mut order: Vec<&Interval> = replay.intervals.iter().collect();
    // Largest first; ties by first use, so the result is deterministic.
    order.sort_by(|a, b| b.size.cmp(&a.size).then(a.first.cmp(&b.first)));
    let mut buffers: Vec<SharedBuffer> = Vec::new();
    for tensor in order {
        let overlaps = |t: &Interval| t.first <= tensor.last && tensor.first <= t.last;
        let best = buffers
            .iter_mut()
            .filter(|b| b.size >= tensor.size && !b.tenants.iter().any(overlaps))
            .min_by_key(|b| b.size);
        match best {
            Some(buffer) => buffer.tenants.push(*tensor),
            None => buffers.push(SharedBuffer {
                size: tensor.size,
                tenants: vec![*tensor],
            }),
        }
    }
    buffers.iter().map(|b| b.size).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(intervals: &[(u32, u32, u64)]) -> Replay {
        Replay {
            events: Vec::new(),
            intervals: intervals
                .iter()
                .map(|&(first, last, size)| Interval { first, last, size })
                .collect(),
        }
    }

    #[test]
    fn a_dead_buffer_is_reused_by_a_smaller_tensor() {
        assert_eq!(
            greedy_by_size_total(&replay(&[(0, 1, 100), (2, 3, 60)])),
            100
        );
    }

    #[test]
    fn live_tensors_never_share_a_buffer() {
        assert_eq!(
            greedy_by_size_total(&replay(&[(0, 2, 100), (1, 3, 60)])),
            160
        );
    }

    #[test]
    fn the_smallest_free_buffer_that_fits_is_chosen() {
        // 200 and 100 overlap; 90 (steps 4-5) fits both and must take the 100 one,
        // leaving the 200 one for the later 150.
        let total = greedy_by_size_total(&replay(&[
            (0, 1, 200),
            (0, 1, 100),
            (4, 5, 90),
            (4, 5, 150),
        ]));
        assert_eq!(total, 300);
    }
}
