//! A shared cache of pre-packed weights (after ONNX Runtime's
//! `SharedPrePackedWeightCache`): a kernel packs a weight once into the layout it reads
//! fastest, stores the packed buffers in the cache, and every other node and graph
//! that uses the same weight reads the cached buffers.
//!
//! * [`PrepackedWeightCache`]: the cache (cheap to clone, shared); its
//!   [`CacheAllocator`] is the allocator packed buffers must come from;
//!   [`PrepackedWeightCache::store`] takes ownership on success and gives the buffers
//!   back in a [`StoreError`] otherwise; storing under a key again releases and
//!   replaces the old data; [`PrepackedWeightCache::get`] shares them.
//! * [`PrepackKey`]: weight name + shape + content hash + [`PackFormat`].
//! * [`crate::exec::packed`]: matmul's B operand packed for `shaders/matmul_packed.wgsl`, with CPU
//!   references for the packing and the product.
//! * [`pack_matmul_weights`]: rewrites a graph's weight matmuls to `matmul_packed`;
//!   [`bind_packed_weights`] fetches (or packs and stores) their packed weights and
//!   makes them a [`crate::exec::TensorMemory`] layer.
//! * [`crate::model::PrepackedModel`]: the built-in transformer run that way.

mod allocator;
mod bind;
mod cache;
mod entry;
mod error;
mod graph;
mod key;

pub use crate::exec::packed::BSource;
pub use allocator::CacheAllocator;
pub use bind::{bind_packed_weights, key_of, PackedLayer, PrepackReport};
pub use cache::PrepackedWeightCache;
pub use entry::{
    CacheStats, CacheStorage, Lookup, PackedBuffer, PackedWeight, StoreError, StoreOutcome,
};
pub use error::PrepackError;
pub use graph::{pack_matmul_weights, PackedGraph, PackedTensor};
pub use key::{content_hash, PackFormat, PrepackKey};
