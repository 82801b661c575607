//! [`ChecksumReport`]: what a checksum run found, and how long it took.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::graph::{Graph, NodeId, TensorId};

/// One tensor whose memory did not hold the predicted checksum when a node read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// The node that saw it (`None`: the final check of the graph outputs).
    pub node: Option<NodeId>,
    /// That node's op (`end of pass` for the final check).
    pub op: String,
    /// The tensor whose memory was clobbered (a root: views read their root's memory).
    pub tensor: TensorId,
    /// Its name.
    pub tensor_name: String,
    /// The checksum the CPU predicted.
    pub expected: u32,
    /// The checksum the GPU found in memory.
    pub got: u32,
}

impl Mismatch {
    /// Names the tensor and node from raw record fields.
    pub(crate) fn from_record(
        graph: &Graph,
        node: u32,
        tensor: u32,
        expected: u32,
        got: u32,
    ) -> Mismatch {
        let node_id = (node != super::schedule::END_NODE).then_some(NodeId(node));
        let op = node_id
            .and_then(|n| graph.node(n))
            .map_or_else(|| "end of pass".to_string(), |n| n.op.clone());
        let tensor = TensorId(tensor);
        let tensor_name = graph
            .tensor(tensor)
            .map_or_else(|| "?".to_string(), |t| t.name.clone());
        Mismatch {
            node: node_id,
            op,
            tensor,
            tensor_name,
            expected,
            got,
        }
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seen_by = match self.node {
            Some(n) => format!("node {n} ({})", self.op),
            None => "the final check of the outputs".to_string(),
        };
        write!(
            f,
            "tensor {} ({}) was clobbered: {seen_by} read checksum {:#010x}, expected {:#010x}",
            self.tensor, self.tensor_name, self.got, self.expected
        )
    }
}

/// The outcome of a checksum run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChecksumReport {
    /// Nodes of the graph that ran.
    pub nodes: usize,
    /// Distinct tensors whose checksum was checked at least once.
    pub tensors: usize,
    /// Reads checked (every planned input of every node, and every graph output at the end).
    pub checks: u32,
    /// Dispatches recorded into the one compute pass.
    pub dispatches: usize,
    /// Reads whose checksum differed from the prediction.
    pub mismatches: u32,
    /// The first mismatches in the order the GPU found them (at most 16).
    pub first_mismatches: Vec<Mismatch>,
    /// CPU time to record the command buffer.
    pub encode_time: Duration,
    /// GPU time of the compute pass from timestamp queries, when the device has them.
    pub gpu_time: Option<Duration>,
    /// Time from submit until the results were read back.
    pub wall_time: Duration,
}

impl ChecksumReport {
    /// Whether every read matched the prediction.
    pub fn verified(&self) -> bool {
        self.mismatches == 0
    }

    /// The first clobbered tensor found, and the node that saw it.
    pub fn first(&self) -> Option<&Mismatch> {
        self.first_mismatches.first()
    }
}

impl fmt::Display for ChecksumReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.first() {
            None if self.verified() => write!(
                f,
                "verified: {} nodes, {} tensors, {} mismatches",
                self.nodes, self.tensors, self.mismatches
            ),
            None => write!(f, "FAILED: {} mismatches (no record kept)", self.mismatches),
            Some(first) => write!(f, "FAILED: {first} ({} mismatches in all)", self.mismatches),
        }
    }
}
