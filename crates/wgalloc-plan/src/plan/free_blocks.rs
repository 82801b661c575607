//! [`FreeBlockAllocator`]: the free-block allocator used while planning (ggml's dynamic
//! tensor allocator, without its fixed caps).
//!
//! Memory is a list of chunks, each at most `max_size` bytes. Inside a chunk, the
//! bytes below `top` are either allocated or in a free block ("hole"); the bytes from
//! `top` to `max_size` are the tail. An allocation takes, in this order:
//! 1. the best-fitting hole of any chunk (the smallest that fits; ties go to the
//!    lowest chunk, then the lowest offset);
//! 2. the tail of the chunk whose high-water mark rises least (ties: the chunk that
//!    leaves the least unused room below its high-water mark, then the lowest chunk);
//! 3. a new chunk. A size above `max_size` gets an oversized chunk of its own, which
//!    is never shared with another allocation.
//!
//! A hole freed next to another hole merges with it; a hole that reaches `top` gives
//! its bytes back to the tail. The high-water mark of a chunk is the chunk's size.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasher, Hasher};

use super::{align_up, BufferTypeDesc, ChunkPlan, PlanError};

/// The hash of the live offsets: a multiply of the offset, its high half folded into
/// the low one by `finish`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OffsetHash;

impl BuildHasher for OffsetHash {
    type Hasher = OffsetHasher;

    fn build_hasher(&self) -> OffsetHasher {
        OffsetHasher(0)
    }
}

/// See [`OffsetHash`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct OffsetHasher(u64);

impl Hasher for OffsetHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Chunk {
    /// Free blocks strictly below `top`, `offset -> size`, never adjacent to each
    /// other nor ending at `top` (those are merged).
    holes: BTreeMap<u64, u64>,
    /// One past the highest allocated byte.
    top: u64,
    /// The largest `top` ever reached: the bytes the chunk needs.
    high_water: u64,
    /// Holds one allocation larger than the max size; never reused.
    oversized: bool,
    /// The live allocations, `offset -> aligned size`: a free must name one exactly.
    /// Hashed: an exact lookup per free; only a refused free scans it.
    live: HashMap<u64, u64, OffsetHash>,
}

/// Where an allocation landed: `[offset, offset + size)` of chunk `chunk`; `size` is
/// the requested size rounded up to the alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkRange {
    /// The chunk.
    pub chunk: usize,
    /// Byte offset inside the chunk (a multiple of the alignment).
    pub offset: u64,
    /// Bytes reserved (the aligned size).
    pub size: u64,
}

/// A best-fit free-block allocator over chunks of at most `max_size` bytes, tracking
/// each chunk's high-water mark. Pure bookkeeping: it hands out offsets, no memory.
///
/// ```
/// use wgalloc_plan::plan::FreeBlockAllocator;
/// let mut a = FreeBlockAllocator::new(16, 1024).unwrap();
/// let x = a.alloc(100).unwrap();
/// let y = a.alloc(50).unwrap();
/// assert_eq!((x.offset, x.size, y.offset), (0, 112, 112));
/// a.free(x.chunk, x.offset, x.size).unwrap();
/// // The freed hole is reused before the tail grows.
/// assert_eq!(a.alloc(64).unwrap().offset, 0);
/// assert_eq!(a.high_water(0), Some(176));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeBlockAllocator {
    alignment: u64,
    max_size: u64,
    chunks: Vec<Chunk>,
    /// Number of holes over all chunks (lets `alloc` skip the hole search).
    holes: usize,
    /// Every hole as `(size, chunk, offset)`: the first at or above a size is the best
    /// fit (smallest, then lowest chunk, then lowest offset) in O(log holes).
    by_size: BTreeSet<(u64, usize, u64)>,
}

impl FreeBlockAllocator {
    /// An empty allocator.
    ///
    /// # Errors
    /// [`PlanError::BadAlignment`] unless `alignment` is a power of two;
    /// [`PlanError::BadMaxSize`] if `max_size` is 0.
    pub fn new(alignment: u64, max_size: u64) -> Result<Self, PlanError> {
        if !alignment.is_power_of_two() {
            return Err(PlanError::BadAlignment { alignment });
        }
        if max_size == 0 {
            return Err(PlanError::BadMaxSize { max_size });
        }
        Ok(FreeBlockAllocator {
            alignment,
            max_size,
            chunks: Vec::new(),
            holes: 0,
            by_size: BTreeSet::new(),
        })
    }

    /// An empty allocator with a buffer type's alignment and max size.
    pub fn for_buffer_type(buffer_type: &BufferTypeDesc) -> Self {
        FreeBlockAllocator {
            alignment: buffer_type.alignment(),
            max_size: buffer_type.max_size,
            chunks: Vec::new(),
            holes: 0,
            by_size: BTreeSet::new(),
        }
    }

    /// The offset alignment.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The largest chunk that is not oversized.
    pub fn max_size(&self) -> u64 {
        self.max_size
    }

    /// Reserves `size` bytes (rounded up to the alignment; 0 counts as 1 so that every
    /// allocation has an address of its own).
    ///
    /// # Errors
    /// [`PlanError::AlignOverflow`] if rounding `size` up overflows 64 bits.
    pub fn alloc(&mut self, size: u64) -> Result<ChunkRange, PlanError> {
        let Some(size) = align_up(size.max(1), self.alignment) else {
            return Err(PlanError::AlignOverflow {
                size,
                alignment: self.alignment,
            });
        };
        if size > self.max_size {
            return Ok(self.new_chunk(size, true));
        }
        if self.holes > 0 {
            if let Some(found) = self.take_best_hole(size) {
                return Ok(found);
            }
        }
        if let Some(found) = self.take_best_tail(size) {
            return Ok(found);
        }
        Ok(self.new_chunk(size, false))
    }

    /// The smallest hole that holds `size` bytes (ties: the lowest chunk, then the
    /// lowest offset), cut from its start. O(log holes).
    fn take_best_hole(&mut self, size: u64) -> Option<ChunkRange> {
        let &(hole, c, offset) = self.by_size.range((size, 0, 0)..).next()?;
        self.remove_hole(c, offset, hole);
        if hole > size {
            self.add_hole(c, offset + size, hole - size);
        }
        self.chunks[c].live.insert(offset, size);
        Some(ChunkRange {
            chunk: c,
            offset,
            size,
        })
    }

    /// Records the hole `[offset, offset + size)` of chunk `c`.
    fn add_hole(&mut self, c: usize, offset: u64, size: u64) {
        self.chunks[c].holes.insert(offset, size);
        self.by_size.insert((size, c, offset));
        self.holes += 1;
    }

    /// Forgets the hole `[offset, offset + size)` of chunk `c`.
    fn remove_hole(&mut self, c: usize, offset: u64, size: u64) {
        self.chunks[c].holes.remove(&offset);
        self.by_size.remove(&(size, c, offset));
        self.holes -= 1;
    }

    /// The tail of the chunk whose high-water mark rises least.
    fn take_best_tail(&mut self, size: u64) -> Option<ChunkRange> {
        let mut best: Option<(u64, u64, usize)> = None;
        for (c, chunk) in self.chunks.iter().enumerate() {
            if chunk.oversized || self.max_size - chunk.top < size {
                continue;
            }
            let end = chunk.top + size;
            let rise = end.saturating_sub(chunk.high_water);
            let unused = chunk.high_water.saturating_sub(end);
            if best.is_none_or(|(r, u, _)| (rise, unused) < (r, u)) {
                best = Some((rise, unused, c));
            }
        }
        let (_, _, c) = best?;
        let chunk = &mut self.chunks[c];
        let offset = chunk.top;
        chunk.live.insert(offset, size);
        chunk.top += size;
        chunk.high_water = chunk.high_water.max(chunk.top);
        Some(ChunkRange {
            chunk: c,
            offset,
            size,
        })
    }

    fn new_chunk(&mut self, size: u64, oversized: bool) -> ChunkRange {
        self.chunks.push(Chunk {
            holes: BTreeMap::new(),
            top: size,
            high_water: size,
            oversized,
            live: {
                let mut live = HashMap::with_hasher(OffsetHash);
                live.insert(0, size);
                live
            },
        });
        ChunkRange {
            chunk: self.chunks.len() - 1,
            offset: 0,
            size,
        }
    }

    /// Gives back `[offset, offset + size)` of `chunk` (size as passed to or returned
    /// by [`FreeBlockAllocator::alloc`]; it is rounded up the same way). The block merges
    /// with free neighbours. Freeing an oversized chunk's allocation keeps the chunk
    /// reserved for it.
    ///
    /// # Errors
    /// [`PlanError::BadFree`] if the block is not allocated memory of that chunk
    /// (unknown chunk, misaligned, past the top, overlapping a free block, or not exactly
    /// one live allocation: a block that overlaps a live one without matching it);
    /// [`PlanError::AlignOverflow`] if rounding `size` up overflows.
    pub fn free(&mut self, chunk: usize, offset: u64, size: u64) -> Result<(), PlanError> {
        let Some(aligned) = align_up(size.max(1), self.alignment) else {
            return Err(PlanError::AlignOverflow {
                size,
                alignment: self.alignment,
            });
        };
        let bad = |problem| PlanError::BadFree {
            chunk,
            offset,
            size,
            problem,
        };
        let alignment = self.alignment;
        let c = self
            .chunks
            .get_mut(chunk)
            .ok_or_else(|| bad("no such chunk"))?;
        if !offset.is_multiple_of(alignment) {
            return Err(bad("offset is not aligned"));
        }
        let end = offset
            .checked_add(aligned)
            .ok_or_else(|| bad("end overflows"))?;
        if end > c.top {
            return Err(bad("block ends past the allocated top"));
        }
        match c.live.get(&offset) {
            Some(&live) if live == aligned => {
                c.live.remove(&offset);
            }
            Some(_) => {
                return Err(bad(
                    "block's size differs from the live block at its offset",
                ))
            }
            None if c.live.iter().any(|(&o, &s)| o < end && o + s > offset) => {
                return Err(bad("block overlaps a live block without matching it"))
            }
            None => return Err(bad("no live block starts at this offset")),
        }
        if c.oversized {
            // The chunk stays reserved (never shared); its bytes are no longer in use.
            c.top = 0;
            return Ok(());
        }
        // The holes just before and at or after the block.
        let prev = c.holes.range(..offset).next_back().map(|(&o, &s)| (o, s));
        let next = c.holes.range(offset..).next().map(|(&o, &s)| (o, s));
        if next.is_some_and(|(o, _)| o < end) || prev.is_some_and(|(o, s)| o + s > offset) {
            return Err(bad("block overlaps a free block"));
        }
        let prev = prev.filter(|&(o, s)| o + s == offset);
        let next = next.filter(|&(o, _)| o == end);
        let top = c.top;
        if end == top {
            // Back to the tail, together with a hole just below it.
            self.chunks[chunk].top = offset;
            if let Some((o, s)) = prev {
                self.chunks[chunk].top = o;
                self.remove_hole(chunk, o, s);
            }
            return Ok(());
        }
        let (mut start, mut stop) = (offset, end);
        if let Some((o, s)) = prev {
            self.remove_hole(chunk, o, s);
            start = o;
        }
        if let Some((o, s)) = next {
            self.remove_hole(chunk, o, s);
            stop = o + s;
        }
        self.add_hole(chunk, start, stop - start);
        Ok(())
    }

    /// Number of chunks opened so far.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// The high-water mark (bytes needed) of a chunk.
    pub fn high_water(&self, chunk: usize) -> Option<u64> {
        self.chunks.get(chunk).map(|c| c.high_water)
    }

    /// Whether a chunk holds a single allocation above the max size.
    pub fn is_oversized(&self, chunk: usize) -> bool {
        self.chunks.get(chunk).is_some_and(|c| c.oversized)
    }

    /// Number of free blocks (holes) over all chunks, not counting the tails.
    pub fn free_blocks(&self) -> usize {
        self.holes
    }

    /// Bytes currently allocated over all chunks.
    pub fn allocated(&self) -> u64 {
        self.chunks.iter().fold(0u64, |acc, c| {
            let free: u64 = if c.oversized {
                0
            } else {
                c.holes.values().sum()
            };
            acc.saturating_add(c.top - free)
        })
    }

    /// Every chunk's size (its high-water mark) and whether it is oversized.
    pub fn chunks(&self) -> Vec<ChunkPlan> {
        self.chunks
            .iter()
            .map(|c| ChunkPlan {
                size: c.high_water,
                oversized: c.oversized,
            })
            .collect()
    }

    /// Sum of the chunks' high-water marks.
    pub fn total_size(&self) -> u64 {
        self.chunks
            .iter()
            .fold(0u64, |acc, c| acc.saturating_add(c.high_water))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(a: &mut FreeBlockAllocator, size: u64) -> (usize, u64) {
        let x = a.alloc(size).expect("alloc");
        (x.chunk, x.offset)
    }

    #[test]
    fn sizes_are_rounded_up_to_the_alignment() {
        let mut a = FreeBlockAllocator::new(32, 1 << 20).expect("valid");
        assert_eq!(a.alloc(1).expect("a").size, 32);
        assert_eq!(a.alloc(0).expect("a").size, 32);
        assert_eq!(a.alloc(64).expect("a").size, 64);
        assert_eq!(a.high_water(0), Some(128));
    }

    #[test]
    fn freed_hole_is_preferred_to_exact_fit_tail() {
        let mut a = FreeBlockAllocator::new(1, 1000).expect("valid");
        let x = a.alloc(64).expect("x");
        let _y = a.alloc(32).expect("y");
        let z = a.alloc(32).expect("z");
        // The tail now has exactly 32 bytes below the high-water mark...
        a.free(z.chunk, z.offset, z.size).expect("free z");
        // ...and there is a 64-byte hole at the start.
        a.free(x.chunk, x.offset, x.size).expect("free x");
        assert_eq!(
            alloc(&mut a, 32),
            (0, 0),
            "the hole wins over the exact-fit tail"
        );
        assert_eq!(a.high_water(0), Some(128));
    }

    #[test]
    fn smallest_fitting_hole_wins_over_earlier_larger_one() {
        let mut a = FreeBlockAllocator::new(1, 1000).expect("valid");
        let blocks: Vec<_> = [100, 10, 50, 10, 30, 10]
            .iter()
            .map(|&s| a.alloc(s).expect("alloc"))
            .collect();
        for i in [0, 2, 4] {
            a.free(0, blocks[i].offset, blocks[i].size).expect("free");
        }
        assert_eq!(alloc(&mut a, 25), (0, blocks[4].offset));
        assert_eq!(alloc(&mut a, 40), (0, blocks[2].offset));
        assert_eq!(alloc(&mut a, 60), (0, 0));
    }

    #[test]
    fn neighbouring_free_blocks_merge_and_are_reused() {
        let mut a = FreeBlockAllocator::new(1, 1000).expect("valid");
        let p: Vec<_> = (0..4).map(|_| a.alloc(10).expect("alloc")).collect();
        a.free(0, p[0].offset, 10).expect("free");
        a.free(0, p[2].offset, 10).expect("free");
        assert_eq!(a.free_blocks(), 2);
        a.free(0, p[1].offset, 10).expect("free");
        assert_eq!(a.free_blocks(), 1, "three neighbours are one block");
        assert_eq!(alloc(&mut a, 30), (0, 0));
        assert_eq!(a.high_water(0), Some(40));
    }

    #[test]
    fn freeing_the_top_block_returns_it_to_the_tail() {
        let mut a = FreeBlockAllocator::new(1, 1000).expect("valid");
        let x = a.alloc(10).expect("x");
        let y = a.alloc(10).expect("y");
        let z = a.alloc(10).expect("z");
        a.free(0, y.offset, 10).expect("free y");
        a.free(0, z.offset, 10).expect("free z");
        assert_eq!(a.free_blocks(), 0, "y and z went back to the tail");
        assert_eq!(a.allocated(), 10);
        assert_eq!(alloc(&mut a, 20), (0, 10));
        assert_eq!(a.high_water(0), Some(30));
        a.free(0, x.offset, 10).expect("free x");
        assert_eq!(a.free_blocks(), 1);
    }

    #[test]
    fn more_than_one_chunk_of_tensors_opens_a_second_chunk() {
        let mut a = FreeBlockAllocator::new(1, 100).expect("valid");
        assert_eq!(alloc(&mut a, 60), (0, 0));
        assert_eq!(alloc(&mut a, 60), (1, 0));
        assert_eq!(alloc(&mut a, 40), (0, 60));
        assert_eq!(a.chunks().len(), 2);
        assert!(a.chunks().iter().all(|c| c.size <= 100 && !c.oversized));
    }

    #[test]
    fn tail_goes_to_the_chunk_whose_high_water_rises_least() {
        let mut a = FreeBlockAllocator::new(1, 100).expect("valid");
        let x = a.alloc(90).expect("x"); // chunk 0
        let _y = a.alloc(50).expect("y"); // chunk 1
        a.free(0, x.offset, x.size).expect("free"); // chunk 0 empty, high water 90
                                                    // 40 fits both tails: chunk 0 without growing, chunk 1 by growing to 90.
        assert_eq!(alloc(&mut a, 40), (0, 0));
        assert_eq!(a.high_water(1), Some(50));
    }

    #[test]
    fn tensor_larger_than_max_size_gets_an_oversized_chunk() {
        let mut a = FreeBlockAllocator::new(4, 100).expect("valid");
        assert_eq!(alloc(&mut a, 10), (0, 0));
        let big = a.alloc(250).expect("big");
        assert_eq!((big.chunk, big.offset, big.size), (1, 0, 252));
        assert!(a.is_oversized(1));
        a.free(1, 0, 250).expect("free big");
        // Never shared: a small allocation does not go there.
        assert_eq!(alloc(&mut a, 10), (0, 12));
        assert_eq!(
            a.chunks()[1],
            ChunkPlan {
                size: 252,
                oversized: true
            }
        );
    }

    #[test]
    fn a_free_that_overlaps_live_blocks_without_matching_one_is_refused() {
        let mut a = FreeBlockAllocator::new(8, 100).expect("valid");
        let x = a.alloc(16).expect("x");
        let y = a.alloc(16).expect("y");
        let _z = a.alloc(16).expect("z");
        let problem = |r: Result<(), PlanError>| match r {
            Err(PlanError::BadFree { problem, .. }) => problem,
            other => panic!("expected BadFree, got {other:?}"),
        };
        // Straddles x and y.
        assert!(problem(a.free(0, 8, 16)).contains("overlaps a live block"));
        // Starts at x but is larger (x and y together).
        assert!(problem(a.free(0, x.offset, 32)).contains("differs"));
        // Starts at y but is smaller than y.
        assert!(problem(a.free(0, y.offset, 8)).contains("differs"));
        // Nothing was freed by the refusals: x and y still free exactly once.
        a.free(0, y.offset, 16).expect("free y");
        a.free(0, x.offset, 16).expect("free x");
        assert_eq!(a.free_blocks(), 1);
    }

    #[test]
    fn a_bad_free_is_an_error_not_a_panic() {
        let mut a = FreeBlockAllocator::new(8, 100).expect("valid");
        let x = a.alloc(16).expect("x");
        let _y = a.alloc(16).expect("y");
        assert!(matches!(
            a.free(3, 0, 8),
            Err(PlanError::BadFree { chunk: 3, .. })
        ));
        assert!(matches!(a.free(0, 4, 8), Err(PlanError::BadFree { .. })));
        assert!(matches!(a.free(0, 24, 16), Err(PlanError::BadFree { .. })));
        a.free(0, x.offset, 16).expect("free x");
        assert!(
            matches!(a.free(0, 0, 8), Err(PlanError::BadFree { .. })),
            "double free"
        );
        assert!(matches!(
            a.alloc(u64::MAX),
            Err(PlanError::AlignOverflow { .. })
        ));
    }

    #[test]
    fn no_fixed_cap_on_chunks_or_free_blocks() {
        let mut a = FreeBlockAllocator::new(1, 64).expect("valid");
        let blocks: Vec<_> = (0..2000).map(|_| a.alloc(16).expect("alloc")).collect();
        assert_eq!(a.chunk_count(), 500);
        for b in blocks.iter().step_by(2) {
            a.free(b.chunk, b.offset, b.size).expect("free");
        }
        assert_eq!(a.free_blocks(), 1000);
        assert_eq!(a.allocated(), 1000 * 16);
    }
}
