//! The KV cache of generation: memory of its own, taken from a [`crate::storage::Storage`]
//! and kept across steps, read and appended to by the paged-attention ops through a
//! block table (see `docs/kv-api.md` and `docs/kv.md`).
//!
//! * [`KvConfig`]: the shape (layers, heads, head width), the element type (f32 or
//!   f16 pages, [`KvConfig::with_dtype`]), `block_tokens` per block,
//!   `blocks_per_page` per page; a page (one storage region, one binding) never
//!   exceeds the device's `max_storage_buffer_binding_size`.
//! * [`KvCache`]: the memory rules on any storage (unit-tested on host storage): pages
//!   taken one at a time only when no block slot is free, never moved or copied; the
//!   block table; a refused page is a typed error that changes nothing.
//! * [`DeviceKvCache`]: the cache on a device: the table uploaded before each step,
//!   the cache's regions as a layer of the executor's [`crate::exec::TensorMemory`].
//! * [`KvTensors`]: how a step graph names the cache (weights to the planner, so the
//!   activation plan never overlaps it) and the attention nodes over it (`kv_self`,
//!   `kv_attend`, `kv_attend_out`: one dispatch per page, the online-softmax state
//!   carried between them).
//! * [`KvProof`], [`prove_step`]: the checksum proof with the cache live for the whole
//!   step.
//! * [`reference`](mod@reference): the paged attention on the CPU, through the block table.

mod cache;
mod config;
mod device;
mod error;
mod graph;
mod proof;
pub mod reference;

pub use cache::{BlockSlot, KvCache, KvReport, KvStep};
pub use config::{KvConfig, DEFAULT_ALIGNMENT};
pub use device::DeviceKvCache;
pub use error::KvError;
pub use graph::KvTensors;
pub use proof::{prove_step, CachePlant, KvProof, PROOF_TENSOR_BYTES};

/// Page bytes (little-endian, `dtype` f32 or f16) widened to f32.
fn decode(dtype: crate::graph::DType, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        crate::graph::DType::F16 => crate::exec::f32_from_f16_bytes(bytes),
        _ => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    }
}

/// `values` as page bytes of `dtype` (f16: rounded to nearest, ties to even).
fn encode(dtype: crate::graph::DType, values: &[f32]) -> Vec<u8> {
    match dtype {
        crate::graph::DType::F16 => crate::exec::f16_bytes(values),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}
