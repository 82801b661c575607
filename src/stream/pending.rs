//! [`PendingWork`]: the executions a stream submitted and has not synchronized, with
//! the blocks each one holds and the allocator claim it keeps. Blocks are freed, and
//! claims let go, only when the work is finished ([`PendingWork::finish`], after the
//! stream waited for the queue) or abandoned ([`PendingWork::abandon`], at a drop
//! after a failed wait). Generic over the held block, so the deferral rule is tested
//! on host memory.

use super::busy;
use super::ExecutionId;

/// One submitted execution: its id, the claimed allocator key (if shared), what keeps
/// that allocator alive, the blocks it holds, and what the stream keeps beside them.
pub(crate) struct Pending<B, A, X> {
    pub(crate) id: ExecutionId,
    pub(crate) key: Option<usize>,
    /// Holding it keeps the allocator object alive while its key (its address) is
    /// claimed, even when the execution holds no block and the stream registers
    /// another allocator: a freed object's address could otherwise be reused by a new
    /// one and be refused.
    pub(crate) _allocator: A,
    /// Dropping one frees it through its allocator.
    pub(crate) blocks: Vec<B>,
    pub(crate) extra: X,
}

/// The unsynchronized work of one stream.
pub(crate) struct PendingWork<B, A, X> {
    stream: u64,
    items: Vec<Pending<B, A, X>>,
}

impl<B, A, X> PendingWork<B, A, X> {
    /// No work yet, for stream `stream`.
    pub(crate) fn new(stream: u64) -> PendingWork<B, A, X> {
        PendingWork {
            stream,
            items: Vec::new(),
        }
    }

    /// Adds a submitted execution (its claim was kept by the caller).
    pub(crate) fn push(&mut self, pending: Pending<B, A, X>) {
        self.items.push(pending);
    }

    /// Executions not finished.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is pending.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Blocks held by pending executions.
    pub(crate) fn held_blocks(&self) -> usize {
        self.items.iter().map(|p| p.blocks.len()).sum()
    }

    /// What each pending execution keeps beside its blocks, in order.
    pub(crate) fn extras(&self) -> impl Iterator<Item = &X> {
        self.items.iter().map(|p| &p.extra)
    }

    /// The work is complete (the caller waited for the queue): every block is freed,
    /// every claim let go, and each execution's id, block count and extra come back in
    /// submission order.
    pub(crate) fn finish(&mut self) -> Vec<(ExecutionId, usize, X)> {
        std::mem::take(&mut self.items)
            .into_iter()
            .map(|p| {
                let blocks = p.blocks.len();
                drop(p.blocks);
                if let Some(key) = p.key {
                    busy::release(key, self.stream);
                }
                (p.id, blocks, p.extra)
            })
            .collect()
    }

    /// Frees every block and lets every claim go without results (the device could not
    /// be waited on, so it runs nothing more on them).
    pub(crate) fn abandon(&mut self) {
        let _ = self.finish();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::storage::OwnedRegion;
    use crate::storage::{CountingStorage, HostMemory, HostStorage, RegionRequest, Storage};

    type Host = Arc<CountingStorage<HostStorage>>;

    fn held(host: &Host, n: usize) -> Vec<OwnedRegion<HostMemory>> {
        (0..n)
            .map(|_| {
                let region = host.allocate(&RegionRequest::new(64)).expect("region");
                OwnedRegion::new(host.clone(), region)
            })
            .collect()
    }

    // Keys no real allocator has (real keys are addresses of live `Arc`s).
    const KEY: usize = 17;

    #[test]
    fn blocks_stay_held_until_the_work_is_finished_and_then_go_back_once() {
        let host: Host = Arc::new(CountingStorage::new(HostStorage::unlimited()));
        let mut work = PendingWork::new(1000);
        for i in 0..3 {
            busy::claim(KEY, 1000, "a").expect("claim").keep();
            work.push(Pending {
                id: ExecutionId(i),
                key: Some(KEY),
                _allocator: (),
                blocks: held(&host, 2),
                extra: i * 10,
            });
        }
        assert_eq!((work.len(), work.held_blocks()), (3, 6));
        assert_eq!(
            host.report().live_regions,
            6,
            "nothing is freed before the work is done"
        );
        assert!(
            busy::claim(KEY, 2000, "b").is_err(),
            "the allocator is busy meanwhile"
        );
        let done = work.finish();
        let ids: Vec<u64> = done.iter().map(|(id, _, _)| id.0).collect();
        assert_eq!(ids, [0, 1, 2], "submission order");
        assert_eq!(
            done.iter().map(|(_, n, x)| (*n, *x)).collect::<Vec<_>>(),
            [(2, 0), (2, 10), (2, 20)]
        );
        let report = host.report();
        assert_eq!(
            (report.live_regions, report.frees, report.bad_frees),
            (0, 6, 0)
        );
        assert!(work.is_empty());
        busy::claim(KEY, 2000, "b")
            .expect("let go at finish")
            .keep();
        busy::release(KEY, 2000);
    }

    #[test]
    fn abandoned_work_frees_everything_and_lets_the_claim_go() {
        const OTHER: usize = 19;
        let host: Host = Arc::new(CountingStorage::new(HostStorage::unlimited()));
        let mut work = PendingWork::new(3000);
        busy::claim(OTHER, 3000, "c").expect("claim").keep();
        work.push(Pending {
            id: ExecutionId(1),
            key: Some(OTHER),
            _allocator: (),
            blocks: held(&host, 3),
            extra: (),
        });
        work.abandon();
        assert_eq!(host.report().live_regions, 0);
        busy::claim(OTHER, 4000, "d").expect("let go").keep();
        busy::release(OTHER, 4000);
    }
}
