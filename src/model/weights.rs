//! Seeded pseudo-random numbers for weights and tokens: the one generator of wgalloc,
//! [`wgalloc_plan::seeded::SeededRng`] (SplitMix64: fast, stable across platforms and
//! releases, which a crate's RNG may not be), re-exported where the models use it.

pub use wgalloc_plan::seeded::SeededRng;
