//! What is computed: tensors, nodes in execution order, a builder, validation,
//! lifetimes and the import of real-network traces (tensor-graph-trace/1) and of ONNX
//! models.

mod builder;
mod dynamic_len;
mod error;
pub mod extent;
mod facts;
mod lifetime;
mod model;
pub mod onnx;
mod summary;
// Generators of test graphs, for tests and benches.
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod synthetic;
mod trace;
mod validate;

pub use builder::GraphBuilder;
pub use error::GraphError;
pub use extent::{binding_size, Extent, BINDING_GRANULE};
pub(crate) use facts::{GraphFacts, K_HAS_PRODUCER, K_VIEW, ROLE_MASK, ROLE_OUTPUT, ROLE_WEIGHT};
pub use lifetime::{Lifetime, Lifetimes};
pub use model::{DType, DynamicLen, Graph, Node, NodeId, Role, Tensor, TensorId};
pub use onnx::{parse_onnx, read_onnx, OnnxOptions};
pub use summary::{GraphSummary, RoleSummary};
pub use trace::{parse_trace, read_trace, write_trace, TRACE_FORMAT};
