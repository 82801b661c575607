//! The bind-group cache: one bind group per kernel and set of bound ranges (planned
//! ranges and ranges of the executor's workspace), reused by every later dispatch (and
//! run) that binds the same ranges of the same memory.

use std::collections::HashMap;

use super::kernels::PipelineKey;
use crate::plan::BufferId;

/// One bound range, as the plan names it: the memory layer it came from, the plan's
/// buffer and chunk, the byte offset and the bound size (a multiple of 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RangeKey {
    /// Index of the layer of the [`super::TensorMemory`].
    pub layer: usize,
    /// The plan's buffer.
    pub buffer: BufferId,
    /// The chunk in that buffer.
    pub chunk: usize,
    /// Byte offset in the chunk.
    pub offset: u64,
    /// Bytes bound.
    pub size: u64,
}

impl RangeKey {
    /// Whether two ranges share a byte (same layer, buffer and chunk, intersecting).
    pub fn overlaps(&self, other: &RangeKey) -> bool {
        self.layer == other.layer
            && self.buffer == other.buffer
            && self.chunk == other.chunk
            && self.offset < other.offset.saturating_add(other.size)
            && other.offset < self.offset.saturating_add(self.size)
    }
}

/// One storage binding of a bind group: a planned range, or a range of the executor's
/// workspace (where an input that overlaps another input of its dispatch is staged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BindingKey {
    /// A tensor's planned range.
    Planned(RangeKey),
    /// Bytes `offset..offset + size` of the executor's workspace buffer.
    Workspace {
        /// Byte offset in the workspace (a multiple of the storage offset alignment).
        offset: u64,
        /// Bytes bound.
        size: u64,
    },
}

/// What a bind group is cached under: the kernel and its storage ranges in binding
/// order. The uniform is the executor's one parameter buffer, the same for all.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BindGroupKey {
    /// The pipeline (its layout follows from it).
    pub(crate) kernel: PipelineKey,
    /// The storage ranges, binding 1 first.
    pub ranges: Vec<BindingKey>,
}

/// Bind groups of one tensor memory, one parameter buffer and one workspace buffer.
/// The executor clears it when any changes, so it never holds buffers of a memory no
/// longer in use.
#[derive(Debug, Default)]
pub struct BindGroupCache {
    owner: Option<(Vec<u64>, u64, u64)>,
    groups: HashMap<BindGroupKey, wgpu::BindGroup>,
    created: usize,
    reused: usize,
}

impl BindGroupCache {
    /// An empty cache.
    pub fn new() -> BindGroupCache {
        BindGroupCache::default()
    }

    /// Makes the cache belong to `(memory key, uniform generation, workspace
    /// generation)` (the key from [`crate::exec::TensorMemory::memory_key`]), dropping
    /// every bind group made for another.
    pub fn bind_to(&mut self, memory: &[u64], uniform: u64, workspace: u64) {
        let same = self
            .owner
            .as_ref()
            .is_some_and(|(m, u, w)| m.as_slice() == memory && *u == uniform && *w == workspace);
        if !same {
            self.groups.clear();
            self.owner = Some((memory.to_vec(), uniform, workspace));
        }
    }

    /// The cached group for `key`, or the one `make` builds (then cached).
    pub fn get_or_create(
        &mut self,
        key: BindGroupKey,
        make: impl FnOnce() -> wgpu::BindGroup,
    ) -> wgpu::BindGroup {
        if let Some(group) = self.groups.get(&key) {
            self.reused += 1;
            return group.clone();
        }
        self.created += 1;
        let group = make();
        self.groups.insert(key, group.clone());
        group
    }

    /// Groups created and reused since the cache was made, as (created, reused).
    pub fn counts(&self) -> (usize, usize) {
        (self.created, self.reused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::kernels::Kernel;

    fn range(layer: usize, chunk: usize, offset: u64, size: u64) -> RangeKey {
        RangeKey {
            layer,
            buffer: BufferId(0),
            chunk,
            offset,
            size,
        }
    }

    fn planned(layer: usize, chunk: usize, offset: u64, size: u64) -> BindingKey {
        BindingKey::Planned(range(layer, chunk, offset, size))
    }

    #[test]
    fn same_kernel_and_ranges_give_equal_keys() {
        let a = BindGroupKey {
            kernel: PipelineKey::Builtin(Kernel::Binary),
            ranges: vec![
                planned(0, 0, 0, 64),
                planned(0, 0, 64, 64),
                planned(0, 0, 128, 64),
            ],
        };
        let b = a.clone();
        assert_eq!(a, b);
        let other_kernel = BindGroupKey {
            kernel: PipelineKey::Builtin(Kernel::Matmul),
            ..a.clone()
        };
        assert_ne!(a, other_kernel);
        let mut moved = a.clone();
        moved.ranges[2] = planned(0, 0, 192, 64);
        assert_ne!(a, moved);
        let mut other_layer = a.clone();
        other_layer.ranges[0] = planned(1, 0, 0, 64);
        assert_ne!(a, other_layer);
    }

    #[test]
    fn a_staged_input_keys_its_workspace_range_not_its_planned_one() {
        let planned_key = BindGroupKey {
            kernel: PipelineKey::Builtin(Kernel::Binary),
            ranges: vec![
                planned(0, 0, 0, 64),
                planned(0, 0, 0, 64),
                planned(0, 0, 64, 64),
            ],
        };
        let mut staged = planned_key.clone();
        staged.ranges[1] = BindingKey::Workspace {
            offset: 0,
            size: 64,
        };
        assert_ne!(planned_key, staged);
        let mut elsewhere = staged.clone();
        elsewhere.ranges[1] = BindingKey::Workspace {
            offset: 256,
            size: 64,
        };
        assert_ne!(staged, elsewhere);
    }

    #[test]
    fn ranges_overlap_only_in_the_same_chunk_when_bytes_intersect() {
        assert!(range(0, 0, 0, 64).overlaps(&range(0, 0, 32, 64)));
        assert!(!range(0, 0, 0, 64).overlaps(&range(0, 0, 64, 64)));
        assert!(!range(0, 0, 0, 64).overlaps(&range(0, 1, 0, 64)));
        assert!(!range(0, 0, 0, 64).overlaps(&range(1, 0, 0, 64)));
        assert!(range(0, 0, 100, 4).overlaps(&range(0, 0, 0, 256)));
    }
}
