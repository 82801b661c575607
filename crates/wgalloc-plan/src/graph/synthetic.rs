//! Synthetic graphs for benchmarks and property tests: deterministic chains and
//! transformer-style stacks of any length, and seeded random DAGs with views,
//! in-place nodes, outputs and inputs.

use super::{DType, Graph, GraphBuilder, GraphError, TensorId};
use crate::seeded::Rng;

/// A chain of `n_nodes` unary ops over one input: every third op runs in place, the
/// others change the width (seeded, deterministic); the last tensor is the output.
///
/// # Errors
/// Never for `n_nodes >= 1`; [`GraphError`] only if the builder rejects the graph.
pub fn chain(n_nodes: usize) -> Result<Graph, GraphError> {
    let mut rng = Rng(0xC4A1_2024);
    let widths = [1024u64, 1536, 2048, 4096];
    let mut b = GraphBuilder::new(format!("chain{n_nodes}"));
    let mut len = widths[0];
    let mut last = b.input("x", DType::F32, &[len]);
    for i in 0..n_nodes {
        last = if i % 3 == 2 {
            b.node("scale", &[last], &[len], true)
        } else {
            len = widths[rng.below(widths.len() as u64) as usize];
            b.node("map", &[last], &[len], false)
        };
    }
    b.mark_output(last);
    b.build()
}

/// A transformer-style stack cut at `n_nodes` nodes: per layer (15 nodes) layer norm,
/// q/k/v projections, a transposed view of k, scores, in-place scale and softmax,
/// attention, output projection, in-place residual add, layer norm, MLP with in-place
/// GELU, in-place residual add. Sequence 128, width 768, weights shared by all layers.
/// The last tensor produced is the output.
///
/// # Errors
/// Never for `n_nodes >= 1`; [`GraphError`] only if the builder rejects the graph.
pub fn transformer(n_nodes: usize) -> Result<Graph, GraphError> {
    const SEQ: u64 = 128;
    const D: u64 = 768;
    let mut b = GraphBuilder::new(format!("transformer{n_nodes}"));
    let x = b.input("x", DType::F32, &[SEQ, D]);
    let wq = b.weight("wq", DType::F32, &[D, D]);
    let wk = b.weight("wk", DType::F32, &[D, D]);
    let wv = b.weight("wv", DType::F32, &[D, D]);
    let wo = b.weight("wo", DType::F32, &[D, D]);
    let w1 = b.weight("w1", DType::F32, &[D, 4 * D]);
    let w2 = b.weight("w2", DType::F32, &[4 * D, D]);
    let mut residual = x;
    let mut nodes = 0usize;
    let mut last = x;
    // Appends one node unless the budget is spent.
    macro_rules! node {
        ($op:expr, $inputs:expr, $shape:expr, $inplace:expr) => {{
            if nodes == n_nodes {
                break;
            }
            nodes += 1;
            last = b.node($op, $inputs, $shape, $inplace);
            last
        }};
    }
    while nodes < n_nodes {
        let n1 = node!("layer_norm", &[residual], &[SEQ, D], false);
        let q = node!("matmul", &[n1, wq], &[SEQ, D], false);
        let k = node!("matmul", &[n1, wk], &[SEQ, D], false);
        let v = node!("matmul", &[n1, wv], &[SEQ, D], false);
        let kt = b.view("k_t", k, &[D, SEQ]);
        let s = node!("matmul", &[q, kt], &[SEQ, SEQ], false);
        let s = node!("scale", &[s], &[SEQ, SEQ], true);
        let p = node!("softmax", &[s], &[SEQ, SEQ], true);
        let a = node!("matmul", &[p, v], &[SEQ, D], false);
        let o = node!("matmul", &[a, wo], &[SEQ, D], false);
        let r = node!("add", &[o, residual], &[SEQ, D], true);
        let n2 = node!("layer_norm", &[r], &[SEQ, D], false);
        let h = node!("matmul", &[n2, w1], &[SEQ, 4 * D], false);
        let g = node!("gelu", &[h], &[SEQ, 4 * D], true);
        let f = node!("matmul", &[g, w2], &[SEQ, D], false);
        residual = node!("add", &[f, r], &[SEQ, D], true);
    }
    b.mark_output(last);
    b.build()
}

/// A seeded random DAG of 1 to `max_nodes` nodes over 1 to 3 inputs and up to 2
/// weights: plain nodes of 1 to 3 inputs, in-place nodes (output the size of the first
/// input, which may be a view or a weight), nodes that produce a view, views produced
/// by no node, and random outputs. Same seed, same graph.
///
/// # Errors
/// Never in practice (the generator only builds valid graphs); the builder's
/// [`GraphError`] otherwise.
pub fn random_graph(seed: u64, max_nodes: usize) -> Result<Graph, GraphError> {
    let mut rng = Rng(seed);
    let mut b = GraphBuilder::new(format!("random{seed}"));
    let len = |rng: &mut Rng| 1 + rng.below(32);
    let mut readable: Vec<TensorId> = Vec::new();
    let mut memory: Vec<TensorId> = Vec::new(); // readable, not a weight
    for i in 0..1 + rng.below(3) {
        let l = len(&mut rng);
        let t = b.input(format!("in{i}"), DType::F32, &[l]);
        readable.push(t);
        memory.push(t);
    }
    for i in 0..rng.below(3) {
        let l = len(&mut rng);
        readable.push(b.weight(format!("w{i}"), DType::F32, &[l]));
    }
    let n_nodes = 1 + rng.below(max_nodes.max(1) as u64) as usize;
    for _ in 0..n_nodes {
        let kind = rng.below(100);
        let out = if kind < 30 {
            // In place over the first input.
            let first = if rng.chance(90) {
                rng.pick(&memory)
            } else {
                rng.pick(&readable)
            };
            let Some(first) = first else { continue };
            let shape = b.graph().tensors[first.index()].shape.clone();
            let mut inputs = vec![first];
            for _ in 0..rng.below(3) {
                inputs.extend(rng.pick(&readable));
            }
            // Every tensor here is f32, so the same shape is the same size.
            b.node("inplace", &inputs, &shape, true)
        } else if kind < 40 {
            // A node that produces a view.
            let Some(of) = rng.pick(&memory) else {
                continue;
            };
            let l = len(&mut rng);
            let v = b.view("view", of, &[l]);
            b.push_node("view", &[of], v, false, &[]);
            v
        } else if kind < 50 {
            // A view produced by no node.
            let Some(of) = rng.pick(&memory) else {
                continue;
            };
            let l = len(&mut rng);
            b.view("alias", of, &[l])
        } else {
            let mut inputs = Vec::new();
            for _ in 0..1 + rng.below(3) {
                inputs.extend(rng.pick(&readable));
            }
            let l = len(&mut rng);
            b.node("op", &inputs, &[l], false)
        };
        readable.push(out);
        memory.push(out);
        if rng.chance(15) {
            b.mark_output(out);
        }
    }
    b.build()
}
