//! Running and proving: WGSL kernels, the executor, CPU references and the alias proof.

mod error;

pub use error::ExecError;
pub mod checksum;
