//! Allocators registered per stream (the rules of ACL's `aclrtAllocatorRegister`).
//!
//! A [`Stream`] is a sequence of executions on a device's queue. A user describes an
//! allocator with an [`AllocatorDesc`] (an object and `alloc`, `free` and `address_of`
//! callbacks) and registers it on a stream; every execution on the stream then takes
//! one block per planned chunk of its activations from that allocator, and tensors are
//! bound inside the blocks (a block may be a range of a larger buffer, e.g. a pool).
//!
//! * Registration refuses an incomplete descriptor ([`StreamError::MissingCallback`])
//!   and keeps what it needs, so the descriptor may be dropped. The last registration
//!   on a stream wins. With none, the stream uses a default allocator (one wgpu buffer
//!   per block).
//! * [`Stream::execute`] submits without waiting; [`Stream::synchronize`] waits for the
//!   stream's submissions, reads back the outputs and only then frees the blocks.
//! * One allocator object on two streams: executing on one while the other has
//!   unsynchronized work is refused ([`StreamError::AllocatorBusy`]).
//! * [`AllocatorDesc::counted`] counts what the descriptor hands out and takes back
//!   (a [`crate::storage::StorageReport`]) to show that every block came back exactly
//!   once.

mod busy;
mod counter;
mod descriptor;
mod error;
mod pending;
mod registered;
mod request;
#[allow(clippy::module_inception)]
mod stream;

pub use counter::BlockCounter;
pub use descriptor::{AllocFailure, AllocatorDesc, BlockRequest};
pub use error::StreamError;
pub use request::{ExecuteRequest, ExecutionId, ExecutionResult, SyncReport};
pub use stream::Stream;
