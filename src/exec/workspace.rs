//! The executor's workspace: one storage buffer of scratch memory, owned by the
//! executor and separate from every planned buffer, so nothing written there can
//! clobber a planned tensor.
//!
//! WebGPU forbids two overlapping writable storage bindings in one dispatch, and every
//! tensor is bound `read_write`. When two inputs of a node share bytes (`mul(x, x)`,
//! `add(a, view_of_a)`), the later one is staged: a [`super::Kernel::CopyWords`]
//! dispatch, in the same compute pass just before the node's, copies it into a
//! workspace slot, and the node binds the slot instead. Slots start at offset 0 for
//! every node (dispatches of one pass are ordered, so nodes reuse the same bytes); the
//! workspace is the largest need of any node, grows when a graph needs more and is
//! kept across runs.

/// Where one staged input lives in the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Byte offset in the workspace, a multiple of the storage offset alignment.
    pub offset: u64,
    /// Bytes (the input's bound size).
    pub size: u64,
}

/// Which inputs of one dispatch are staged, and the workspace bytes the node needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Staging {
    /// Per input, in the node's order: its slot when staged.
    pub slots: Vec<Option<Slot>>,
    /// Workspace bytes the staged inputs take (the end of the last slot).
    pub bytes: u64,
}

impl Staging {
    /// Number of staged inputs.
    pub fn count(&self) -> usize {
        self.slots.iter().flatten().count()
    }
}

/// Decides which of a node's inputs to stage: input `j ≥ 1` is staged when it overlaps
/// (`overlaps(i, j)`) an earlier input `i` that stays at its planned range. Input 0 is
/// never staged (an in-place output shares its range). `sizes` are the inputs' bound
/// sizes; slots are laid out from offset 0, each at a multiple of `alignment`.
///
/// `None` when the slots' offsets overflow `u64`.
pub fn stage_overlapping(
    sizes: &[u64],
    overlaps: impl Fn(usize, usize) -> bool,
    alignment: u64,
) -> Option<Staging> {
    let alignment = alignment.max(1);
    let mut slots: Vec<Option<Slot>> = Vec::with_capacity(sizes.len());
    let mut end = 0u64;
    for (j, &size) in sizes.iter().enumerate() {
        let clash = (0..j).any(|i| slots[i].is_none() && overlaps(i, j));
        if j == 0 || !clash {
            slots.push(None);
            continue;
        }
        let offset = end.checked_next_multiple_of(alignment)?;
        end = offset.checked_add(size)?;
        slots.push(Some(Slot { offset, size }));
    }
    Some(Staging { slots, bytes: end })
}

/// The workspace buffer, created on first need and grown (never shrunk) when a run
/// needs more; each new buffer gets a new generation, which the bind-group cache keys.
#[derive(Debug, Default)]
pub struct Workspace {
    buffer: Option<wgpu::Buffer>,
    generation: u64,
}

impl Workspace {
    /// No buffer yet.
    pub fn new() -> Workspace {
        Workspace::default()
    }

    /// Bytes of the current buffer (0 before the first need).
    pub fn bytes(&self) -> u64 {
        self.buffer.as_ref().map_or(0, wgpu::Buffer::size)
    }

    /// Buffers created so far (0 before the first need).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The current buffer, if any.
    pub fn buffer(&self) -> Option<&wgpu::Buffer> {
        self.buffer.as_ref()
    }

    /// Makes the buffer at least `bytes` long: a new buffer of the next power of two
    /// (or exactly `bytes`, rounded up to 4, where that would pass `max_size`). The
    /// caller has checked `bytes ≤ max_size`.
    pub fn ensure(&mut self, device: &wgpu::Device, bytes: u64, max_size: u64) {
        if bytes == 0 || self.bytes() >= bytes {
            return;
        }
        let exact = bytes.checked_next_multiple_of(4).unwrap_or(bytes);
        let size = exact
            .checked_next_power_of_two()
            .filter(|&s| s <= max_size)
            .unwrap_or(exact);
        self.buffer = Some(device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgalloc executor workspace"),
            size,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        }));
        self.generation += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Overlap of byte ranges `(offset, size)` in one buffer.
    fn by_ranges(ranges: &[(u64, u64)]) -> impl Fn(usize, usize) -> bool + '_ {
        move |i, j| {
            let ((a, la), (b, lb)) = (ranges[i], ranges[j]);
            a < b + lb && b < a + la
        }
    }

    #[test]
    fn disjoint_inputs_stage_nothing() {
        let ranges = [(0, 64), (64, 64), (256, 16)];
        let s = stage_overlapping(&[64, 64, 16], by_ranges(&ranges), 256).expect("fits");
        assert_eq!(s.slots, vec![None, None, None]);
        assert_eq!((s.bytes, s.count()), (0, 0));
    }

    #[test]
    fn the_same_tensor_twice_stages_the_second_use() {
        let ranges = [(128, 96), (128, 96)];
        let s = stage_overlapping(&[96, 96], by_ranges(&ranges), 256).expect("fits");
        assert_eq!(
            s.slots,
            vec![
                None,
                Some(Slot {
                    offset: 0,
                    size: 96
                })
            ]
        );
        assert_eq!(s.bytes, 96);
    }

    #[test]
    fn a_partial_overlap_is_staged_and_slots_are_aligned() {
        // x, gain overlapping x, bias overlapping x: both later inputs staged.
        let ranges = [(0, 1024), (512, 100), (1000, 40)];
        let s = stage_overlapping(&[1024, 100, 40], by_ranges(&ranges), 256).expect("fits");
        assert_eq!(
            s.slots,
            vec![
                None,
                Some(Slot {
                    offset: 0,
                    size: 100
                }),
                Some(Slot {
                    offset: 256,
                    size: 40
                }),
            ]
        );
        assert_eq!((s.bytes, s.count()), (296, 2));
    }

    #[test]
    fn an_input_overlapping_only_a_staged_input_stays_in_place() {
        // 1 overlaps 0 (staged); 2 overlaps only 1, whose copy is in the workspace.
        let ranges = [(0, 64), (32, 64), (80, 64)];
        let s = stage_overlapping(&[64, 64, 64], by_ranges(&ranges), 4).expect("fits");
        assert_eq!(
            s.slots,
            vec![
                None,
                Some(Slot {
                    offset: 0,
                    size: 64
                }),
                None
            ]
        );
    }

    #[test]
    fn slots_past_u64_are_refused() {
        let ranges = [(0, 8), (0, 8), (0, 8)];
        assert_eq!(
            stage_overlapping(&[8, u64::MAX - 8, 8], by_ranges(&ranges), 256),
            None
        );
    }
}
