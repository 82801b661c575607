//! [`BlockCounter`]: counts what an allocator descriptor's callbacks do, so tests (and
//! users) can see that every block given out came back exactly once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::AllocatorDesc;

/// What a counted descriptor's callbacks have done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockReport {
    /// `alloc` calls that gave a block.
    pub allocations: u64,
    /// `alloc` calls that failed.
    pub failures: u64,
    /// `free` calls.
    pub frees: u64,
    /// Bytes asked for by successful `alloc` calls.
    pub allocated_bytes: u64,
}

impl BlockReport {
    /// Blocks given out and not yet freed (0 when everything came back; negative
    /// balances show as [`BlockReport::excess_frees`]).
    pub fn live_blocks(&self) -> u64 {
        self.allocations.saturating_sub(self.frees)
    }

    /// Frees beyond the blocks given out (a double free); 0 when none.
    pub fn excess_frees(&self) -> u64 {
        self.frees.saturating_sub(self.allocations)
    }

    /// Every block given out was freed exactly once.
    pub fn balanced(&self) -> bool {
        self.allocations == self.frees
    }
}

/// Shared counters behind a counted descriptor ([`AllocatorDesc::counted`]).
#[derive(Debug, Default)]
pub struct BlockCounter {
    allocations: AtomicU64,
    failures: AtomicU64,
    frees: AtomicU64,
    allocated_bytes: AtomicU64,
}

impl BlockCounter {
    /// The counts so far.
    pub fn report(&self) -> BlockReport {
        BlockReport {
            allocations: self.allocations.load(Ordering::SeqCst),
            failures: self.failures.load(Ordering::SeqCst),
            frees: self.frees.load(Ordering::SeqCst),
            allocated_bytes: self.allocated_bytes.load(Ordering::SeqCst),
        }
    }
}

impl<T: 'static, B: 'static> AllocatorDesc<T, B> {
    /// The same descriptor with its `alloc` and `free` callbacks counted (callbacks not
    /// set stay unset), and the counter.
    pub fn counted(self) -> (AllocatorDesc<T, B>, Arc<BlockCounter>) {
        let counter = Arc::new(BlockCounter::default());
        let mut desc = self;
        if let Some(alloc) = desc.alloc.take() {
            let c = counter.clone();
            desc = desc.alloc(move |object, request| {
                let result = alloc(object, request);
                match &result {
                    Ok(_) => {
                        c.allocations.fetch_add(1, Ordering::SeqCst);
                        let _ = c.allocated_bytes.fetch_update(
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                            |v| Some(v.saturating_add(request.size)),
                        );
                    }
                    Err(_) => {
                        c.failures.fetch_add(1, Ordering::SeqCst);
                    }
                }
                result
            });
        }
        if let Some(free) = desc.free.take() {
            let c = counter.clone();
            desc = desc.free(move |object, block| {
                c.frees.fetch_add(1, Ordering::SeqCst);
                free(object, block);
            });
        }
        (desc, counter)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::stream::BlockRequest;

    fn request(size: u64) -> BlockRequest {
        BlockRequest {
            buffer: 0,
            chunk: 0,
            size,
            alignment: 32,
            usage: wgpu::BufferUsages::STORAGE,
        }
    }

    #[test]
    fn counted_callbacks_count_successes_failures_and_frees() {
        let desc: AllocatorDesc<(), u64> = AllocatorDesc::new()
            .object(Arc::new(()))
            .alloc(|_, r| {
                if r.size > 100 {
                    Err("too big".into())
                } else {
                    Ok(r.size)
                }
            })
            .free(|_, _| {});
        let (desc, counter) = desc.counted();
        let parts = desc.parts();
        assert!(parts.is_err(), "address_of is still missing");
        let alloc = desc.alloc.clone().unwrap();
        let free = desc.free.clone().unwrap();
        let a = alloc(&(), &request(64)).unwrap();
        assert!(alloc(&(), &request(128)).is_err());
        assert_eq!(
            counter.report(),
            BlockReport {
                allocations: 1,
                failures: 1,
                frees: 0,
                allocated_bytes: 64
            }
        );
        assert_eq!(counter.report().live_blocks(), 1);
        assert!(!counter.report().balanced());
        free(&(), a);
        assert!(counter.report().balanced());
        free(&(), 7);
        assert_eq!(counter.report().excess_frees(), 1);
    }
}
