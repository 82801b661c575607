//! [`KvTensors`]: how a step's graph names the KV cache (a block table and page
//! tensors, weights to the planner so it never places them) and the attention nodes
//! that read and append to it.

use super::{KvConfig, KvError};
use crate::exec::kv_state_row;
use crate::graph::{DType, Graph, GraphBuilder, Role, Tensor, TensorId};

/// The cache's tensors in one step graph: the block table (u32) and `slots` page
/// tensors (the config's element type, f32 or f16, one page each). All are [`Role::Weight`]: the activation planner never
/// places them; [`super::DeviceKvCache::layer`] places them on the cache's regions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvTensors {
    /// The block table, `config.table_words()` u32.
    pub table: TensorId,
    /// The page tensors, page `i` of the block table bound as `pages[i]`.
    pub pages: Vec<TensorId>,
    /// Heads of the cache.
    pub heads: u32,
    /// Width of one head.
    pub head_dim: u32,
    /// Layers of the cache.
    pub layers: u32,
    /// The element type of the pages (and of the qkv the attention nodes take).
    pub dtype: DType,
}

impl KvTensors {
    /// Adds the table and `slots` page tensors (at least one) to `builder`; `slots` is
    /// [`KvConfig::pages_for`] of the longest context the graph serves.
    pub fn add(builder: &mut GraphBuilder, config: &KvConfig, slots: u32) -> KvTensors {
        let table = builder.weight("kv.table", DType::U32, &[config.table_words()]);
        let pages = (0..slots.max(1))
            .map(|i| builder.weight(format!("kv.page{i}"), config.dtype, &[config.page_words()]))
            .collect();
        KvTensors {
            table,
            pages,
            heads: config.heads,
            head_dim: config.head_dim,
            layers: config.layers,
            dtype: config.dtype,
        }
    }

    /// Page slots the graph binds.
    pub fn slots(&self) -> usize {
        self.pages.len()
    }

    /// Every cache tensor: the table, then the pages.
    pub fn tensors(&self) -> impl Iterator<Item = TensorId> + '_ {
        std::iter::once(self.table).chain(self.pages.iter().copied())
    }

    /// Appends layer `layer`'s attention over the cache for `qkv [n, 3·d]` (rows
    /// `q | k | v`) and returns its output `[n, d]`: one node per page slot,
    /// `kv_self_attend` for the first (the chunk's own keys, then the page), then
    /// `kv_attend`, the last one normalised (`kv_self_attend_out` or `kv_attend_out`,
    /// its output of the pages' element type; the states between are f32).
    /// Each page's node also writes the chunk's K and V rows that fall in that page.
    ///
    /// # Errors
    /// [`KvError::NotInGraph`] when `qkv` is not in the builder's graph or is not
    /// `[n, 3·heads·head_dim]` of the pages' element type; [`KvError::BadConfig`] for a layer past the cache's.
    pub fn attention(
        &self,
        builder: &mut GraphBuilder,
        qkv: TensorId,
        layer: u32,
    ) -> Result<TensorId, KvError> {
        if layer >= self.layers {
            return Err(KvError::BadConfig {
                problem: format!("layer {layer} of a cache of {} layers", self.layers),
            });
        }
        let width = u64::from(self.heads) * u64::from(self.head_dim);
        let n = qkv_rows(builder.graph(), qkv, width, self.dtype)?;
        let heads = self.heads as f32;
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        let state_shape = [
            n,
            u64::from(self.heads),
            kv_state_row(u64::from(self.head_dim)),
        ];
        let last = self.pages.len() - 1;
        // The chunk's own keys and the first page: one node (`kv_self_attend`, or
        // `kv_self_attend_out` when it is the only page).
        let first = [qkv, self.table, self.pages[0]];
        let params = [heads, layer as f32, 0.0, scale];
        if last == 0 {
            return Ok(self.normalised(builder, "kv_self_attend_out", &first, [n, width], &params));
        }
        let mut state =
            builder.node_with_params("kv_self_attend", &first, &state_shape, false, &params);
        for (i, &page) in self.pages.iter().enumerate().skip(1) {
            let inputs = [state, qkv, self.table, page];
            let params = [heads, layer as f32, i as f32, scale];
            state = if i == last {
                self.normalised(builder, "kv_attend_out", &inputs, [n, width], &params)
            } else {
                builder.node_with_params("kv_attend", &inputs, &state_shape, true, &params)
            };
        }
        Ok(state)
    }

    /// Appends the last, normalising node of a layer's attention: its output `[n, d]`
    /// is of the pages' element type (f32 or f16); the states before it stay f32.
    fn normalised(
        &self,
        builder: &mut GraphBuilder,
        op: &str,
        inputs: &[TensorId],
        shape: [u64; 2],
        params: &[f32],
    ) -> TensorId {
        let output = builder.tensor(Tensor {
            id: TensorId(0),
            name: format!("{op}_{}", builder.graph().nodes.len()),
            dtype: self.dtype,
            shape: shape.to_vec(),
            size: shape[0] * shape[1] * self.dtype.size(),
            role: Role::Intermediate,
            view_of: None,
            dynamic: None,
        });
        builder.push_node(op, inputs, output, false, params);
        output
    }

    /// Checks that the graph holds these tensors as the cache of `config` lays them out.
    ///
    /// # Errors
    /// [`KvError::NotInGraph`] naming the first tensor that differs.
    pub fn check(&self, graph: &Graph, config: &KvConfig) -> Result<(), KvError> {
        let expect = |id: TensorId, dtype: DType, words: u64| {
            let bytes = words * dtype.size();
            let problem = match graph.tensor(id) {
                None => Some("missing".to_string()),
                Some(t) if t.role != Role::Weight || t.view_of.is_some() => {
                    Some(format!("role {:?}, expected a weight (not a view)", t.role))
                }
                Some(t) if t.dtype != dtype || t.size != bytes => Some(format!(
                    "{:?} of {} bytes, expected {dtype:?} of {bytes} bytes",
                    t.dtype, t.size
                )),
                Some(_) => None,
            };
            match problem {
                Some(problem) => Err(KvError::NotInGraph {
                    tensor: id.0,
                    problem,
                }),
                None => Ok(()),
            }
        };
        expect(self.table, DType::U32, config.table_words())?;
        for &page in &self.pages {
            expect(page, config.dtype, config.page_words())?;
        }
        Ok(())
    }
}

/// Rows of `qkv`, checked to be `[n, 3·width]` of `dtype`.
fn qkv_rows(graph: &Graph, qkv: TensorId, width: u64, dtype: DType) -> Result<u64, KvError> {
    let t = graph.tensor(qkv).ok_or(KvError::NotInGraph {
        tensor: qkv.0,
        problem: "missing".to_string(),
    })?;
    let element = dtype.size();
    let rows = t.size / element / (3 * width);
    if t.dtype != dtype || rows == 0 || t.size != rows * 3 * width * element {
        return Err(KvError::NotInGraph {
            tensor: qkv.0,
            problem: format!(
                "qkv is {:?} {:?} ({} bytes), expected {dtype:?} [n, {}]",
                t.dtype,
                t.shape,
                t.size,
                3 * width
            ),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{resolve, OpCall};

    #[test]
    fn attention_over_two_pages_is_self_then_one_node_per_page() {
        let config = KvConfig::new(2, 2, 8, 4, 32)
            .and_then(|c| c.with_blocks_per_page(2))
            .expect("valid");
        let mut b = GraphBuilder::new("step");
        let qkv = b.input("qkv", DType::F32, &[3, 48]);
        let kv = KvTensors::add(&mut b, &config, config.pages_for(20));
        assert_eq!(kv.slots(), 3);
        let out = kv.attention(&mut b, qkv, 1).expect("fits");
        assert!(kv.attention(&mut b, qkv, 2).is_err(), "no layer 2");
        assert!(kv.attention(&mut b, kv.table, 0).is_err(), "not a qkv");
        b.mark_output(out);
        let g = b.build().expect("valid");
        kv.check(&g, &config).expect("laid out as the config says");
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op.as_str()).collect();
        assert_eq!(ops, ["kv_self_attend", "kv_attend", "kv_attend_out"]);
        assert_eq!(g.tensor(out).map(|t| t.shape.clone()), Some(vec![3, 16]));
        match resolve(&g, 0) {
            Ok(OpCall::KvSelfAttend {
                layer,
                page,
                normalize,
                ..
            }) => assert_eq!((layer, page, normalize), (1, 0, false)),
            other => panic!("node 0: {other:?}"),
        }
        for step in 1..3 {
            match resolve(&g, step) {
                Ok(OpCall::KvAttend { layer, page, .. }) => {
                    assert_eq!((layer, page), (1, step as u32))
                }
                other => panic!("node {step}: {other:?}"),
            }
        }
        assert_eq!(
            crate::exec::storage_of(&g, 0),
            crate::exec::StorageType::F32
        );
        let other = KvConfig::new(2, 2, 8, 4, 64).expect("valid");
        assert!(matches!(
            kv.check(&g, &other),
            Err(KvError::NotInGraph { .. })
        ));
    }

    #[test]
    fn an_f16_cache_has_f16_pages_and_takes_an_f16_qkv() {
        let config = KvConfig::new(2, 2, 8, 4, 32)
            .and_then(|c| c.with_blocks_per_page(2))
            .and_then(|c| c.with_dtype(DType::F16))
            .expect("valid");
        let mut b = GraphBuilder::new("step");
        let qkv = b.input("qkv", DType::F16, &[3, 48]);
        let wide = b.input("wide", DType::F32, &[3, 48]);
        let kv = KvTensors::add(&mut b, &config, config.pages_for(20));
        let out = kv.attention(&mut b, qkv, 0).expect("fits");
        assert!(
            matches!(
                kv.attention(&mut b, wide, 0),
                Err(KvError::NotInGraph { .. })
            ),
            "an f32 qkv against f16 pages"
        );
        b.mark_output(out);
        let g = b.build().expect("valid");
        kv.check(&g, &config).expect("laid out as the config says");
        for &page in &kv.pages {
            let t = g.tensor(page).expect("page");
            assert_eq!((t.dtype, t.size), (DType::F16, config.page_bytes()));
        }
        let f32_config = config.with_dtype(DType::F32).expect("valid");
        assert!(matches!(
            kv.check(&g, &f32_config),
            Err(KvError::NotInGraph { .. })
        ));
        for step in 0..g.nodes.len() {
            resolve(&g, step).expect("f16 KV nodes resolve");
            assert_eq!(
                crate::exec::storage_of(&g, step),
                crate::exec::StorageType::F16
            );
        }
        // The state between the pages stays f32; the normalised output is f16.
        let state = g.tensor(g.nodes[0].output).expect("state");
        assert_eq!(state.dtype, DType::F32);
        assert_eq!(g.tensor(out).map(|t| t.dtype), Some(DType::F16));
    }
}
