//! [`HostStorage`]: host memory behind the [`Storage`] trait, strict about its
//! contract, for testing the runtime's memory rules without a GPU.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{check_copy, Memory, Region, RegionRequest, Storage, StorageError, StorageReport};

/// A block of host memory: its bytes, size and usage. Handles compare by identity.
#[derive(Clone)]
pub struct HostMemory {
    block: Arc<HostBlock>,
}

struct HostBlock {
    id: u64,
    usage: wgpu::BufferUsages,
    bytes: Mutex<Vec<u8>>,
}

impl HostMemory {
    fn bytes(&self) -> MutexGuard<'_, Vec<u8>> {
        self.block
            .bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A number naming this block in the process.
    pub fn id(&self) -> u64 {
        self.block.id
    }
}

impl PartialEq for HostMemory {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.block, &other.block)
    }
}

impl Eq for HostMemory {}

impl fmt::Debug for HostMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostMemory#{}({} bytes)", self.block.id, self.size())
    }
}

impl Memory for HostMemory {
    fn size(&self) -> u64 {
        self.bytes().len() as u64
    }

    fn usage(&self) -> wgpu::BufferUsages {
        self.block.usage
    }
}

#[derive(Default)]
struct HostState {
    /// Live regions by block id (one region a block).
    live: HashMap<u64, u64>,
    report: StorageReport,
}

/// Host memory with an optional capacity: every region is a block of its own,
/// zero-filled. It checks its contract strictly (a foreign or double free is an
/// error, and counted), can be told to refuse allocations, and reports what is live.
pub struct HostStorage {
    capacity: u64,
    /// Allocations that succeed before every later one is refused (`u64::MAX`: never).
    refuse_after: AtomicU64,
    state: Mutex<HostState>,
}

impl fmt::Debug for HostStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostStorage")
            .field("capacity", &self.capacity)
            .field("report", &self.report())
            .finish_non_exhaustive()
    }
}

impl HostStorage {
    /// Host memory of at most `capacity` live bytes.
    pub fn with_capacity(capacity: u64) -> HostStorage {
        HostStorage {
            capacity,
            refuse_after: AtomicU64::new(u64::MAX),
            state: Mutex::new(HostState::default()),
        }
    }

    /// Host memory with no capacity limit.
    pub fn unlimited() -> HostStorage {
        HostStorage::with_capacity(u64::MAX)
    }

    fn lock(&self) -> MutexGuard<'_, HostState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses every allocation after the next `n` successful ones
    /// ([`StorageError::Refused`]), to test failure paths.
    pub fn refuse_after(&self, n: u64) {
        let done = self.lock().report.allocations;
        self.refuse_after
            .store(done.saturating_add(n), Ordering::SeqCst);
    }

    /// What it has done, and what is live.
    pub fn report(&self) -> StorageReport {
        self.lock().report
    }

    /// The bytes of a live region.
    ///
    /// # Errors
    /// [`StorageError::UnknownRegion`] when the region is not live or runs past its
    /// block.
    pub fn read(&self, region: &Region<HostMemory>) -> Result<Vec<u8>, StorageError> {
        self.check_live(region)?;
        let bytes = region.buffer.bytes();
        Ok(bytes[region.offset as usize..(region.offset + region.size) as usize].to_vec())
    }

    /// Writes `data` at the start of a live region.
    ///
    /// # Errors
    /// [`StorageError::UnknownRegion`] when the region is not live;
    /// [`StorageError::BadCopy`] when `data` is longer than the region.
    pub fn write(&self, region: &Region<HostMemory>, data: &[u8]) -> Result<(), StorageError> {
        self.check_live(region)?;
        if data.len() as u64 > region.size {
            return Err(StorageError::BadCopy {
                bytes: data.len() as u64,
                from: data.len() as u64,
                to: region.size,
            });
        }
        let start = region.offset as usize;
        region.buffer.bytes()[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Whether `region` lies in a live block of this storage.
    fn check_live(&self, region: &Region<HostMemory>) -> Result<(), StorageError> {
        let live = self.lock().live.contains_key(&region.buffer.id());
        if live && region.is_inside_buffer() {
            Ok(())
        } else {
            Err(StorageError::UnknownRegion {
                offset: region.offset,
                size: region.size,
            })
        }
    }
}

impl Storage for HostStorage {
    type Memory = HostMemory;

    fn allocate(&self, request: &RegionRequest) -> Result<Region<HostMemory>, StorageError> {
        static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);
        let size = request.checked_size()?;
        let mut state = self.lock();
        if state.report.allocations >= self.refuse_after.load(Ordering::SeqCst) {
            state.report.failures += 1;
            return Err(StorageError::Refused {
                message: format!("host storage told to refuse ({size} bytes asked)"),
            });
        }
        if size > self.capacity {
            state.report.failures += 1;
            return Err(StorageError::TooLarge {
                size,
                max: self.capacity,
            });
        }
        let available = self.capacity - state.report.live_bytes;
        if size > available {
            state.report.failures += 1;
            return Err(StorageError::OutOfMemory {
                size,
                available,
                capacity: self.capacity,
            });
        }
        let bytes = usize::try_from(size)
            .ok()
            .and_then(|n| {
                let mut v = Vec::new();
                v.try_reserve_exact(n).ok()?;
                v.resize(n, 0u8);
                Some(v)
            })
            .ok_or(StorageError::OutOfMemory {
                size,
                available,
                capacity: self.capacity,
            })?;
        let memory = HostMemory {
            block: Arc::new(HostBlock {
                id: NEXT_BLOCK.fetch_add(1, Ordering::Relaxed),
                usage: request.usage,
                bytes: Mutex::new(bytes),
            }),
        };
        state.live.insert(memory.id(), size);
        state.report.record_allocation(size);
        Ok(Region::whole(memory))
    }

    fn free(&self, region: Region<HostMemory>) -> Result<(), StorageError> {
        let mut state = self.lock();
        let whole = region.offset == 0 && state.live.get(&region.buffer.id()) == Some(&region.size);
        if !whole {
            state.report.bad_frees += 1;
            return Err(StorageError::UnknownRegion {
                offset: region.offset,
                size: region.size,
            });
        }
        state.live.remove(&region.buffer.id());
        state.report.record_free(region.size);
        Ok(())
    }

    fn copy(
        &self,
        from: &Region<HostMemory>,
        to: &Region<HostMemory>,
        bytes: u64,
    ) -> Result<(), StorageError> {
        check_copy(from, to, bytes)?;
        let data = self.read(from)?;
        self.write(to, &data[..bytes as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_refusals_tell_now_from_never_and_leave_nothing() {
        let host = HostStorage::with_capacity(64);
        let a = host.allocate(&RegionRequest::new(48)).expect("fits");
        assert!(matches!(
            host.allocate(&RegionRequest::new(32)),
            Err(StorageError::OutOfMemory { available: 16, .. })
        ));
        assert!(matches!(
            host.allocate(&RegionRequest::new(65)),
            Err(StorageError::TooLarge { .. })
        ));
        host.free(a).expect("free");
        let report = host.report();
        assert_eq!((report.live_regions, report.live_bytes), (0, 0));
        assert_eq!(report.failures, 2);
    }

    #[test]
    fn double_and_foreign_frees_are_refused_and_counted() {
        let host = HostStorage::unlimited();
        let other = HostStorage::unlimited();
        let a = host.allocate(&RegionRequest::new(16)).expect("a");
        let foreign = other.allocate(&RegionRequest::new(16)).expect("b");
        host.free(a.clone()).expect("first free");
        assert!(host.free(a).is_err());
        assert!(host.free(foreign.clone()).is_err());
        assert!(host.free(foreign.sub(0, 8).expect("part")).is_err());
        assert_eq!(host.report().bad_frees, 3);
        other.free(foreign).expect("its own storage takes it");
    }

    #[test]
    fn refusing_after_n_allocations() {
        let host = HostStorage::unlimited();
        host.refuse_after(1);
        let a = host.allocate(&RegionRequest::new(4)).expect("one more");
        assert!(matches!(
            host.allocate(&RegionRequest::new(4)),
            Err(StorageError::Refused { .. })
        ));
        host.free(a).expect("free");
    }

    #[test]
    fn copies_move_bytes_and_check_their_bounds() {
        let host = HostStorage::unlimited();
        let a = host.allocate(&RegionRequest::new(8)).expect("a");
        let b = host.allocate(&RegionRequest::new(8)).expect("b");
        host.write(&a, &[7; 8]).expect("write");
        host.copy(&a, &b, 4).expect("copy");
        assert_eq!(host.read(&b).expect("read"), vec![7, 7, 7, 7, 0, 0, 0, 0]);
        assert!(matches!(
            host.copy(&a, &b, 12),
            Err(StorageError::BadCopy { .. })
        ));
        assert!(matches!(
            host.copy(&a, &b, 3),
            Err(StorageError::BadCopy { .. })
        ));
    }
}
