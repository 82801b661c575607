//! The benchmark's one error type.

use thiserror::Error;

/// An error of wgalloc's planner crate: reading a network or planning it.
#[derive(Debug, Error)]
pub enum WgallocError {
    /// The trace or ONNX file could not be read.
    #[error(transparent)]
    Graph(#[from] wgalloc_plan::GraphError),
    /// The planner refused the network.
    #[error(transparent)]
    Plan(#[from] wgalloc_plan::PlanError),
}

/// Why a replay or a table could not be made.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PeersError {
    /// wgalloc refused to read or plan a network.
    #[error("{network}: {source}")]
    Wgalloc {
        /// The trace or ONNX file.
        network: String,
        /// What wgalloc's planner said.
        #[source]
        source: WgallocError,
    },
    /// A fixed-capacity peer (offset-allocator, range-alloc) ran out of its arena.
    #[error("{allocator}: no room for {size} bytes at event {event} (arena {capacity} bytes)")]
    OutOfArena {
        /// The allocator's column name.
        allocator: &'static str,
        /// The request that failed.
        size: u64,
        /// Its position in the replay.
        event: usize,
        /// The arena the allocator was given.
        capacity: u64,
    },
    /// A size does not fit the allocator's offset type (offset-allocator's `u32`).
    #[error("{allocator}: {size} bytes do not fit its 32-bit offsets")]
    TooLarge {
        /// The allocator's column name.
        allocator: &'static str,
        /// The size that did not fit.
        size: u64,
    },
    /// CubeCL's memory management refused a reservation.
    #[error("cubecl: event {event} ({size} bytes): {message}")]
    Cubecl {
        /// Its position in the replay.
        event: usize,
        /// The request that failed.
        size: u64,
        /// CubeCL's `IoError`, as text (it is not a `std::error::Error` in every build).
        message: String,
    },
    /// The replay freed an allocation it never made (a bug in the event list).
    #[error("event {event} frees slot {slot}, which holds nothing")]
    BadFree {
        /// Its position in the replay.
        event: usize,
        /// The slot named.
        slot: usize,
    },
    /// No network was found to replay.
    #[error("no trace (traces/*.json) or ONNX file (onnx/*.onnx) found under {root}")]
    NothingToReplay {
        /// Where the benchmark looked.
        root: String,
    },
    /// A directory could not be listed.
    #[error("{path}: {source}")]
    Io {
        /// The directory.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The benchmark's result type.
pub type Result<T> = std::result::Result<T, PeersError>;
