//! The general-purpose offset allocators of the wgpu world, replayed online over one
//! large arena: offset-allocator (Bevy's, a port of Sebastian Aaltonen's
//! OffsetAllocator: two-level bins, O(1) good fit) and range-alloc (gfx-rs, used inside
//! wgpu: best fit over a sorted free list, neighbours merged).
//!
//! The arena is far larger than any network here, so no request fails; the figure is
//! the highest byte any live allocation ever reached, the smallest buffer the sequence
//! would have fitted in.

use crate::error::{PeersError, Result};
use crate::replay::{Event, Replay};

/// offset-allocator's column.
pub const OFFSET_ALLOCATOR: &str = "offset-allocator";
/// range-alloc's column.
pub const RANGE_ALLOC: &str = "range-alloc";

/// The arena given to range-alloc (1 TiB: never the limit).
const RANGE_ARENA: u64 = 1 << 40;

/// Replays `replay` through offset-allocator over a `u32::MAX`-byte arena; returns the
/// highest end offset of a live allocation.
///
/// # Errors
///
/// [`PeersError::TooLarge`] for a request over `u32::MAX` bytes,
/// [`PeersError::OutOfArena`] if the allocator finds no room, [`PeersError::BadFree`]
/// for a free of a slot it does not hold.
pub fn offset_allocator_peak(replay: &Replay) -> Result<u64> {
    let capacity = u32::MAX;
    let mut arena: offset_allocator::Allocator<u32> = offset_allocator::Allocator::new(capacity);
    let mut live: Vec<Option<offset_allocator::Allocation<u32>>> =
        vec![None; replay.intervals.len()];
    let mut peak = 0u64;
    for (event_index, event) in replay.events.iter().enumerate() {
        match *event {
            Event::Alloc { slot, size } => {
                let request = u32::try_from(size).map_err(|_| PeersError::TooLarge {
                    allocator: OFFSET_ALLOCATOR,
                    size,
                })?;
                let allocation = arena.allocate(request).ok_or(PeersError::OutOfArena {
                    allocator: OFFSET_ALLOCATOR,
                    size,
                    event: event_index,
                    capacity: u64::from(capacity),
                })?;
                peak = peak.max(u64::from(allocation.offset) + size);
                if let Some(entry) = live.get_mut(slot) {
                    *entry = Some(allocation);
                }
            }
            Event::Free { slot } => {
                let allocation =
                    live.get_mut(slot)
                        .and_then(Option::take)
                        .ok_or(PeersError::BadFree {
                            slot,
                            event: event_index,
                        })?;
                arena.free(allocation);
            }
        }
    }
    Ok(peak)
}

/// Replays `replay` through range-alloc's best fit over a 1 TiB arena; returns the
/// highest end offset of a live allocation.
///
/// # Errors
///
/// [`PeersError::OutOfArena`] if the allocator finds no room, [`PeersError::BadFree`]
/// for a free of a slot it does not hold.
pub fn range_alloc_peak(replay: &Replay) -> Result<u64> {
    let mut arena = range_alloc::RangeAllocator::new(0..RANGE_ARENA);
    let mut live: Vec<Option<std::ops::Range<u64>>> = vec![None; replay.intervals.len()];
    let mut peak = 0u64;
    for (event_index, event) in replay.events.iter().enumerate() {
        match *event {
            Event::Alloc { slot, size } => {
                let range = arena
                    .allocate_range(size)
                    .map_err(|_| PeersError::OutOfArena {
                        allocator: RANGE_ALLOC,
                        size,
                        event: event_index,
                        capacity: RANGE_ARENA,
                    })?;
                peak = peak.max(range.end);
                if let Some(entry) = live.get_mut(slot) {
                    *entry = Some(range);
                }
            }
            Event::Free { slot } => {
                let range =
                    live.get_mut(slot)
                        .and_then(Option::take)
                        .ok_or(PeersError::BadFree {
                            slot,
                            event: event_index,
                        })?;
                arena.free_range(range);
            }
        }
    }
    Ok(peak)
}
