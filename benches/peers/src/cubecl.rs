//! CubeCL's memory management (cubecl-server 0.11.3), configured as burn's wgpu
//! backend gets it, over a storage that only keeps books.
//!
//! Configuration followed: `cubecl-wgpu` 0.11.3, `src/runtime.rs` (`create_server`)
//! and `src/compute/mem_manager.rs` (`main_memory`):
//!
//! * `MemoryDeviceProperties::new(min(max_storage_buffer_binding_size,
//!   max_buffer_size), max(min_uniform_buffer_offset_alignment,
//!   min_storage_buffer_offset_alignment))` from the adapter's own limits, which
//!   cubecl-wgpu requests in full (`src/backend/wgsl.rs`, `try_request_device`); on
//!   lavapipe that is a 128 MiB page and alignment 32 (`wgalloc info`). No
//!   `max_memory`: plain WebGPU states no capacity.
//! * `MemoryConfiguration::default()` (`Adaptive`), what burn-wgpu 0.22's
//!   `RuntimeOptions::default()` passes, and `MemoryManagementOptions::new("Main GPU
//!   Memory")`.
//! * Each allocation is `reserve(size, PageUpdate::Allow)` then `bind` to a fresh
//!   handle, after a relocation when `relocation_need()` asks for one, as
//!   `WgpuServer::initialize_memory` does (`src/compute/server.rs`); a free is the last
//!   handle dropped.
//! * `WgpuStorage::alloc` (`src/compute/storage.rs`) makes every page at least 32 bytes
//!   and counts its size; [`BookkeepingStorage`] does the same without memory.
//!
//! The figure is the peak of the pages the storage holds (bytes reserved from the
//! driver), which is what a process's GPU memory shows.

use std::collections::HashMap;

use cubecl_ir::MemoryDeviceProperties;
use cubecl_server::logging::ServerLogger;
use cubecl_server::memory_management::relocation::{CopyQueue, RelocationNeed, StorageCopy};
use cubecl_server::memory_management::{
    ErrorGraph, ManagedMemoryHandle, MemoryConfiguration, MemoryManagement,
    MemoryManagementOptions, PageUpdate,
};
use cubecl_server::server::{IoError, ServerError};
use cubecl_server::storage::{ComputeStorage, StorageHandle, StorageId, StorageUtilization};

use crate::error::{PeersError, Result};
use crate::replay::{Event, Replay};

/// The column's name.
pub const CUBECL: &str = "CubeCL (burn wgpu)";

/// `WgpuStorage`'s smallest buffer (cubecl-wgpu 0.11.3, `src/compute/storage.rs`).
const MIN_BUFFER_SIZE: u64 = 32;

/// The adapter limits the memory is configured from: lavapipe's (and NVIDIA's)
/// `min(max_storage_buffer_binding_size, max_buffer_size)` and offset alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CubeclLimits {
    /// `min(max_storage_buffer_binding_size, max_buffer_size)`.
    pub max_page_size: u64,
    /// `max(min_uniform_buffer_offset_alignment, min_storage_buffer_offset_alignment)`.
    pub alignment: u64,
}

impl CubeclLimits {
    /// lavapipe's limits: 128 MiB storage bindings, 2 GiB buffers, alignment 32.
    pub const LAVAPIPE: CubeclLimits = CubeclLimits {
        max_page_size: 128 << 20,
        alignment: 32,
    };
}

/// A `ComputeStorage` that allocates nothing: it numbers pages and adds up their
/// sizes, the way `WgpuStorage` counts the buffers it creates.
#[derive(Debug, Default)]
pub struct BookkeepingStorage {
    alignment: usize,
    pages: HashMap<StorageId, u64>,
    allocated: u64,
    peak: u64,
}

impl BookkeepingStorage {
    /// An empty storage with `alignment`.
    pub fn new(alignment: usize) -> Self {
        BookkeepingStorage {
            alignment,
            ..Default::default()
        }
    }

    /// The most bytes held at once so far.
    pub fn peak(&self) -> u64 {
        self.peak
    }
}

impl ComputeStorage for BookkeepingStorage {
    type Resource = ();

    fn alignment(&self) -> usize {
        self.alignment
    }

    fn get(&mut self, _handle: &StorageHandle) -> std::result::Result<(), IoError> {
        Ok(())
    }

    fn alloc(&mut self, size: u64) -> std::result::Result<StorageHandle, IoError> {
        let id = StorageId::new();
        let page = size.max(MIN_BUFFER_SIZE);
        self.pages.insert(id, page);
        self.allocated = self.allocated.saturating_add(page);
        self.peak = self.peak.max(self.allocated);
        Ok(StorageHandle::new(
            id,
            StorageUtilization { offset: 0, size },
        ))
    }

    fn dealloc(&mut self, id: StorageId) {
        if let Some(page) = self.pages.remove(&id) {
            self.allocated = self.allocated.saturating_sub(page);
        }
    }

    fn flush(&mut self) {}

    fn bytes_allocated(&self) -> u64 {
        self.allocated
    }
}

/// Copies that cost nothing: the storage holds no bytes to move.
struct NoCopies;

impl CopyQueue<BookkeepingStorage> for NoCopies {
    fn wait_device(&mut self) -> std::result::Result<(), ServerError> {
        Ok(())
    }

    fn copy(
        &mut self,
        _storage: &mut BookkeepingStorage,
        _copy: &StorageCopy,
    ) -> std::result::Result<(), IoError> {
        Ok(())
    }

    fn wait_copies(&mut self) -> std::result::Result<(), ServerError> {
        Ok(())
    }
}

/// Replays `replay` through CubeCL's memory management configured for `limits`;
/// returns the peak of the bytes its pages hold.
///
/// # Errors
///
/// [`PeersError::Cubecl`] when a reservation or a bind fails, [`PeersError::BadFree`]
/// for a free of a slot it does not hold.
pub fn cubecl_peak(replay: &Replay, limits: CubeclLimits) -> Result<u64> {
    let properties = MemoryDeviceProperties::new(limits.max_page_size, limits.alignment);
    let storage = BookkeepingStorage::new(limits.alignment as usize);
    let mut memory = MemoryManagement::from_configuration(
        storage,
        &properties,
        MemoryConfiguration::default(),
        std::sync::Arc::new(ServerLogger::default()),
        MemoryManagementOptions::new("Main GPU Memory"),
    );
    let mut failures = ErrorGraph::default();
    let mut live: Vec<Option<ManagedMemoryHandle>> = vec![None; replay.intervals.len()];
    for (event_index, event) in replay.events.iter().enumerate() {
        match *event {
            Event::Alloc { slot, size } => {
                let need = memory.relocation_need();
                if need != RelocationNeed::Nothing {
                    let allocated = memory.bytes_allocated();
                    if let Some(reason) = need.reason(|| allocated) {
                        memory.relocate(&mut NoCopies, reason, &mut failures);
                    }
                }
                let cubecl_error = |e: IoError| PeersError::Cubecl {
                    event: event_index,
                    size,
                    message: format!("{e:?}"),
                };
                let reserved = memory
                    .reserve(size, PageUpdate::Allow, &mut failures)
                    .map_err(cubecl_error)?;
                let assigned = ManagedMemoryHandle::new();
                memory
                    .bind(reserved, assigned.clone(), 0, &mut failures)
                    .map_err(cubecl_error)?;
                if let Some(entry) = live.get_mut(slot) {
                    *entry = Some(assigned);
                }
            }
            Event::Free { slot } => {
                live.get_mut(slot)
                    .and_then(Option::take)
                    .ok_or(PeersError::BadFree {
                        slot,
                        event: event_index,
                    })?;
            }
        }
    }
    Ok(memory.storage().peak())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::Interval;

    fn replay(events: Vec<Event>, sizes: &[u64]) -> Replay {
        Replay {
            events,
            intervals: sizes
                .iter()
                .map(|&size| Interval {
                    first: 0,
                    last: 0,
                    size,
                })
                .collect(),
        }
    }

    #[test]
    fn bookkeeping_storage_counts_pages_and_their_peak() {
        let mut storage = BookkeepingStorage::new(32);
        let a = storage.alloc(100).expect("alloc");
        let b = storage.alloc(1).expect("alloc");
        assert_eq!(storage.bytes_allocated(), 132);
        storage.dealloc(a.id);
        storage.dealloc(b.id);
        storage.dealloc(b.id);
        assert_eq!(storage.bytes_allocated(), 0);
        assert_eq!(storage.peak(), 132);
    }

    #[test]
    fn reserves_at_least_what_is_live_and_reuses_freed_room() {
        let mib = 1 << 20;
        use Event::*;
        let events = vec![
            Alloc { slot: 0, size: mib },
            Alloc { slot: 1, size: mib },
            Free { slot: 0 },
            Free { slot: 1 },
            Alloc { slot: 2, size: mib },
            Free { slot: 2 },
        ];
        let peak =
            cubecl_peak(&replay(events, &[mib, mib, mib]), CubeclLimits::LAVAPIPE).expect("replay");
        assert!(peak >= 2 * mib, "{peak}");
        assert!(peak <= 8 * mib, "{peak}");
    }

    #[test]
    fn a_free_of_an_unknown_slot_is_an_error() {
        let events = vec![Event::Free { slot: 0 }];
        assert!(matches!(
            cubecl_peak(&replay(events, &[32]), CubeclLimits::LAVAPIPE),
            Err(PeersError::BadFree { slot: 0, .. })
        ));
    }
}
