//! [`KvError`]: why the KV cache refused a configuration, a step or a proof.

use thiserror::Error;

use crate::device::DeviceError;
use crate::exec::ExecError;
use crate::storage::StorageError;
use wgalloc_plan::ErrorKind;

/// Why the KV cache refused. Every refusal leaves the cache as it was.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum KvError {
    /// A configuration the kernels cannot take.
    #[error("bad KV cache configuration: {problem}")]
    BadConfig {
        /// What is wrong, with the numbers.
        problem: String,
    },
    /// A page (or the block table) larger than one storage binding of the device.
    #[error(
        "a KV {what} of {bytes} bytes exceeds the device's largest storage binding ({max} bytes)"
    )]
    TooLargeForBinding {
        /// `page` or `block table`.
        what: &'static str,
        /// Its bytes.
        bytes: u64,
        /// `max_storage_buffer_binding_size`.
        max: u64,
    },
    /// The context would pass the cache's `max_tokens`.
    #[error("a context of {needed} tokens does not fit a KV cache of {max} tokens")]
    ContextFull {
        /// Tokens the step needs.
        needed: u64,
        /// The cache's `max_tokens`.
        max: u64,
    },
    /// The storage refused a page or the block table; the cache is unchanged.
    #[error("the storage refused a KV {what} of {bytes} bytes (cache: {pages} pages, {blocks} blocks mapped): {source}")]
    Storage {
        /// `page` or `block table`.
        what: &'static str,
        /// Bytes asked for.
        bytes: u64,
        /// Pages the cache holds (after the refusal, as before it).
        pages: usize,
        /// Blocks mapped (as before the refusal).
        blocks: usize,
        /// What the storage said (its `kind()` tells out of memory now from never).
        #[source]
        source: StorageError,
    },
    /// The step's blocks lie in a page the step's graph binds no slot for.
    #[error("the context needs page {page} but the step graph binds {slots} page slots")]
    TooManyPages {
        /// The page needed.
        page: usize,
        /// Page slots of the graph ([`super::KvTensors::slots`]).
        slots: usize,
    },
    /// A tensor of [`super::KvTensors`] is missing from the graph or has another size.
    #[error("KV tensor {tensor} is not in the graph as expected: {problem}")]
    NotInGraph {
        /// The tensor's id.
        tensor: u32,
        /// What differs.
        problem: String,
    },
    /// A chunk of a step's activation memory shares bytes with the cache's memory.
    #[error("activation chunk {chunk} of buffer {buffer} ({size} bytes at {offset}) overlaps the KV cache's {what}")]
    OverlapsCache {
        /// The plan buffer of the chunk.
        buffer: usize,
        /// The chunk.
        chunk: usize,
        /// Its offset in its wgpu buffer.
        offset: u64,
        /// Its bytes.
        size: u64,
        /// `block table` or `page N`.
        what: String,
    },
    /// Committing or truncating past what was mapped.
    #[error("cannot commit {tokens} tokens: only {mapped} are mapped")]
    NotMapped {
        /// Tokens the commit would reach.
        tokens: u64,
        /// Tokens the mapped blocks hold.
        mapped: u64,
    },
    /// The executor or the proof refused.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The device refused (upload, readback).
    #[error(transparent)]
    Device(#[from] DeviceError),
}

impl KvError {
    /// What a caller can do about it (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            KvError::BadConfig { .. }
            | KvError::NotInGraph { .. }
            | KvError::NotMapped { .. }
            | KvError::OverlapsCache { .. }
            | KvError::TooManyPages { .. } => ErrorKind::BadInput,
            KvError::TooLargeForBinding { .. } | KvError::ContextFull { .. } => {
                ErrorKind::NeverFits
            }
            KvError::Storage { source, .. } => source.kind(),
            KvError::Exec(e) => e.kind(),
            KvError::Device(e) => e.kind(),
        }
    }
}
