//! Rewriting a graph so that every matmul whose B operand is a weight reads a
//! pre-packed copy of it (`matmul_packed`).

use super::{PackFormat, PrepackError};
use crate::exec::packed::{packed_shape, BSource, PackError};
use crate::exec::StorageType;
use crate::graph::{Graph, Role, Tensor, TensorId};

/// One packed tensor the rewrite added: it stands for `weight` packed as `format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedTensor {
    /// The new tensor (a weight of the rewritten graph, `[n/64, k/16, 1024]` f32).
    pub packed: TensorId,
    /// The original weight it is packed from.
    pub weight: TensorId,
    /// The packing.
    pub format: PackFormat,
    /// Inner dimension of the matmul.
    pub k: u64,
    /// Columns of the matmul's result.
    pub n: u64,
    /// Steps of the nodes that read it, in order.
    pub nodes: Vec<usize>,
}

/// A graph whose weight matmuls read packed tensors.
///
/// Tensor ids of the original graph are unchanged (packed tensors are appended), so
/// plans and values keyed by the original ids still apply.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedGraph {
    /// The rewritten graph.
    pub graph: Graph,
    /// One entry per distinct (weight, format), in order of first use.
    pub packed: Vec<PackedTensor>,
}

impl PackedGraph {
    /// Weights of the rewritten graph that some node still reads as they are (not
    /// the packed tensors): these still need device memory of their own.
    pub fn weights_still_read(&self) -> Vec<TensorId> {
        let mut read = vec![false; self.graph.tensors.len()];
        for node in &self.graph.nodes {
            for &input in &node.inputs {
                if let Some(root) = self.graph.root_of(input) {
                    if let Some(r) = read.get_mut(root.index()) {
                        *r = true;
                    }
                }
            }
        }
        self.graph
            .tensors
            .iter()
            .filter(|t| t.role == Role::Weight && !t.is_view() && read[t.id.index()])
            .filter(|t| self.packed.iter().all(|p| p.packed != t.id))
            .map(|t| t.id)
            .collect()
    }

    /// The packed tensor standing for `weight` as `format`, if the rewrite made one.
    pub fn packed_of(&self, weight: TensorId, format: PackFormat) -> Option<&PackedTensor> {
        self.packed
            .iter()
            .find(|p| p.weight == weight && p.format == format)
    }
}

/// The weight matmul's B operand `b` is, with its `(k, n)` and packing, if it can be
/// packed: a non-view f32 or f16 weight of rank 2, not also the A operand.
fn packable(graph: &Graph, op: &str, a: TensorId, b: TensorId) -> Option<(u64, u64, PackFormat)> {
    let t = graph.tensor(b)?;
    let storage = StorageType::of(t.dtype)?;
    if t.role != Role::Weight || t.is_view() || a == b {
        return None;
    }
    let [rows, cols] = <[u64; 2]>::try_from(t.shape.as_slice()).ok()?;
    let (k, n, source) = match op {
        "matmul" => (rows, cols, BSource::KByN),
        "matmul_bt" => (cols, rows, BSource::NByK),
        _ => return None,
    };
    Some((k, n, PackFormat::MatmulB { source, storage }))
}

/// Rewrites every `matmul` / `matmul_bt` node whose second input is a weight (a
/// non-view 2-D f32 or f16 tensor with role weight) into `matmul_packed` reading a new
/// packed weight tensor of the weight's type. Nodes that share a weight (with the same orientation) share one
/// packed tensor. Other nodes, and matmuls of two activations, are left alone.
///
/// # Errors
/// [`PrepackError::Pack`] for a zero-sized weight;
/// [`PrepackError::Graph`] when the rewritten graph fails validation.
pub fn pack_matmul_weights(graph: &Graph) -> Result<PackedGraph, PrepackError> {
    let mut out = graph.clone();
    let mut packed: Vec<PackedTensor> = Vec::new();
    for step in 0..out.nodes.len() {
        let node = &out.nodes[step];
        let [a, b] = match <[TensorId; 2]>::try_from(node.inputs.as_slice()) {
            Ok(ab) => ab,
            Err(_) => continue,
        };
        let Some((k, n, format)) = packable(graph, &node.op, a, b) else {
            continue;
        };
        let PackFormat::MatmulB { storage, .. } = format;
        let dtype = storage.dtype();
        let index = match packed
            .iter()
            .position(|p| p.weight == b && p.format == format)
        {
            Some(i) => i,
            None => {
                let shape = packed_shape(k, n).ok_or(PackError::BadDimensions { k, n })?;
                let size = shape
                    .iter()
                    .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
                    .ok_or(PackError::BadDimensions { k, n })?;
                let id = TensorId(u32::try_from(out.tensors.len()).map_err(|_| {
                    PrepackError::Graph {
                        message: "too many tensors".into(),
                    }
                })?);
                let name = graph.tensor(b).map_or_else(String::new, |t| t.name.clone());
                out.tensors.push(Tensor {
                    id,
                    name: format!("{name}@{format}"),
                    dtype,
                    shape: shape.to_vec(),
                    size,
                    role: Role::Weight,
                    view_of: None,
                    dynamic: None,
                });
                packed.push(PackedTensor {
                    packed: id,
                    weight: b,
                    format,
                    k,
                    n,
                    nodes: Vec::new(),
                });
                packed.len() - 1
            }
        };
        packed[index].nodes.push(step);
        let node = &mut out.nodes[step];
        node.op = "matmul_packed".to_string();
        node.inputs[1] = packed[index].packed;
        node.params.clear();
    }
    out.validate().map_err(|e| PrepackError::Graph {
        message: e.to_string(),
    })?;
    Ok(PackedGraph { graph: out, packed })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};

    #[test]
    fn weight_matmuls_are_rewritten_and_a_shared_weight_is_packed_once() {
        let mut b = GraphBuilder::new("t");
        let x = b.input("x", DType::F32, &[3, 20]);
        let w = b.weight("w", DType::F32, &[20, 70]);
        let y1 = b.node("matmul", &[x, w], &[3, 70], false);
        let y2 = b.node("matmul", &[x, w], &[3, 70], false);
        let s = b.node("add", &[y1, y2], &[3, 70], false);
        let t = b.node("matmul_bt", &[s, s], &[3, 3], false);
        b.mark_output(t);
        let g = b.build().expect("valid");
        let p = pack_matmul_weights(&g).expect("rewrites");
        assert_eq!(p.packed.len(), 1);
        let packed = &p.packed[0];
        assert_eq!((packed.weight, packed.k, packed.n), (w, 20, 70));
        assert_eq!(packed.nodes, vec![0, 1]);
        let pt = p.graph.tensor(packed.packed).expect("added");
        assert_eq!(
            (pt.shape.clone(), pt.size),
            (vec![2, 2, 1024], 2 * 2 * 1024 * 4)
        );
        assert_eq!(p.graph.nodes[0].op, "matmul_packed");
        assert_eq!(p.graph.nodes[1].inputs, vec![x, packed.packed]);
        assert_eq!(p.graph.nodes[3].op, "matmul_bt", "two activations stay");
        assert!(p.weights_still_read().is_empty(), "w is only read packed");
        assert_eq!(p.graph.tensors[..g.tensors.len()], g.tensors[..]);
    }

    #[test]
    fn an_f16_weight_is_packed_as_f16_at_half_the_bytes() {
        let mut b = GraphBuilder::new("t");
        let x = b.input("x", DType::F32, &[3, 20]);
        let w = b.weight("w", DType::F32, &[20, 70]);
        let y = b.node("matmul", &[x, w], &[3, 70], false);
        b.mark_output(y);
        let mut g = b.build().expect("valid");
        for t in &mut g.tensors {
            t.dtype = DType::F16;
            t.size /= 2;
        }
        let p = pack_matmul_weights(&g).expect("rewrites");
        let packed = &p.packed[0];
        assert_eq!(
            packed.format,
            PackFormat::MatmulB {
                source: BSource::KByN,
                storage: StorageType::F16,
            }
        );
        let pt = p.graph.tensor(packed.packed).expect("added");
        assert_eq!((pt.dtype, pt.size), (DType::F16, 2 * 2 * 1024 * 2));
        assert!(pt.name.ends_with("@matmul-b/kn/f16"), "{}", pt.name);
        // An integer "weight" is never packed.
        let mut ints = g.clone();
        ints.tensors[w.index()].dtype = DType::U32;
        ints.tensors[w.index()].size = 20 * 70 * 4;
        assert!(pack_matmul_weights(&ints)
            .expect("rewrites")
            .packed
            .is_empty());
    }

    #[test]
    fn a_tied_weight_is_packed_transposed_and_still_read_by_its_other_node() {
        let mut b = GraphBuilder::new("t");
        let ids = b.input("ids", DType::U32, &[4]);
        let table = b.weight("wte", DType::F32, &[50, 32]);
        let h = b.node("embedding", &[ids, table], &[4, 32], false);
        let logits = b.node("matmul_bt", &[h, table], &[4, 50], false);
        b.mark_output(logits);
        let g = b.build().expect("valid");
        let p = pack_matmul_weights(&g).expect("rewrites");
        let packed = &p.packed[0];
        assert_eq!((packed.k, packed.n), (32, 50));
        assert_eq!(
            packed.format,
            PackFormat::MatmulB {
                source: BSource::NByK,
                storage: crate::exec::StorageType::F32,
            }
        );
        assert_eq!(p.weights_still_read(), vec![table]);
    }
}

#[cfg(test)]
mod evaluation_tests {
    use std::collections::HashMap;

    use super::*;
    use crate::exec::cpu_ref::evaluate;
    use crate::exec::packed::pack_b;
    use crate::exec::TensorData;
    use crate::exec::{resolve, OpCall};
    use crate::graph::{DType, GraphBuilder};

    fn ramp(len: u64, scale: f32) -> Vec<f32> {
        (0..len).map(|i| ((i % 13) as f32 - 6.0) * scale).collect()
    }

    #[test]
    fn the_rewritten_graph_evaluates_to_the_original_on_the_cpu() {
        let mut b = GraphBuilder::new("t");
        let x = b.input("x", DType::F32, &[5, 19]);
        let w = b.weight("w", DType::F32, &[19, 70]);
        let v = b.weight("v", DType::F32, &[33, 70]);
        let y = b.node("matmul", &[x, w], &[5, 70], false);
        let z = b.node("matmul_bt", &[y, v], &[5, 33], false);
        b.mark_output(z);
        let g = b.build().expect("valid");
        let p = pack_matmul_weights(&g).expect("rewrites");
        assert_eq!(
            resolve(&p.graph, 1),
            Ok(OpCall::MatmulPacked { m: 5, k: 70, n: 33 })
        );
        let (xv, wv, vv) = (ramp(95, 0.1), ramp(19 * 70, 0.05), ramp(33 * 70, 0.02));
        let mut original = HashMap::new();
        original.insert(x, TensorData::F32(xv.clone()));
        original.insert(w, TensorData::F32(wv.clone()));
        original.insert(v, TensorData::F32(vv.clone()));
        let mut packed = original.clone();
        for pt in &p.packed {
            let src = if pt.weight == w { &wv } else { &vv };
            let source = match pt.format {
                PackFormat::MatmulB { source, .. } => source,
            };
            let data = pack_b(pt.k, pt.n, source, src).expect("packs");
            packed.insert(pt.packed, TensorData::F32(data));
        }
        let want = evaluate(&g, &original).expect("original runs");
        let got = evaluate(&p.graph, &packed).expect("packed runs");
        assert_eq!(got[z.index()], want[z.index()]);
    }

    #[test]
    fn a_packed_input_of_the_wrong_shape_is_a_bad_shape() {
        let mut b = GraphBuilder::new("t");
        let x = b.input("x", DType::F32, &[2, 20]);
        let p = b.weight("p", DType::F32, &[1, 1, 1024]);
        b.node("matmul_packed", &[x, p], &[2, 8], false);
        let g = b.build().expect("valid");
        assert!(matches!(
            resolve(&g, 0),
            Err(crate::exec::ExecError::BadShape {
                node: crate::graph::NodeId(0),
                ..
            })
        ));
    }
}

#[cfg(test)]
mod model_tests {
    use super::*;
    use crate::model::{build_gpt, ModelConfig};

    fn bytes(graph: &Graph, ids: impl Iterator<Item = TensorId>) -> u64 {
        ids.map(|id| graph.tensors[id.index()].size).sum()
    }

    #[test]
    fn the_default_transformer_packs_every_weight_matmul_without_padding() {
        let model = build_gpt(&ModelConfig::default()).expect("builds");
        let p = pack_matmul_weights(&model.graph).expect("rewrites");
        // 4 layers x the QKV projection + the tied lm head; the output projection and
        // the MLP are fused matmuls (matmul_add, matmul_gelu), which read B unpacked.
        assert_eq!(p.packed.len(), 4 + 1);
        let packed = bytes(&p.graph, p.packed.iter().map(|t| t.packed));
        let sources = bytes(&p.graph, p.packed.iter().map(|t| t.weight));
        assert_eq!(packed, sources, "every dimension is a multiple of 64");
        // wte stays for the embedding; every other matrix is only read packed, except
        // those of the fused matmuls.
        let still = p.weights_still_read();
        assert!(still.iter().all(|&id| {
            let t = &p.graph.tensors[id.index()];
            t.shape.len() == 1
                || t.name == "wte"
                || t.name == "wpe"
                || t.name.ends_with(".attn.wo")
                || t.name.contains(".mlp.")
        }));
    }
}
