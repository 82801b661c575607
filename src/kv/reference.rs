//! The paged attention on the CPU: one layer's step over a [`KvCache`] in host memory,
//! reading and appending through the block table exactly as the kernels do (the same
//! functions as the executor's CPU reference, `exec::cpu_ref::kv_*`).

use super::{KvCache, KvError};
use crate::exec::cpu_ref::{kv_append_page, kv_attend_page, kv_normalize, kv_self, KvDims};
use crate::storage::{HostMemory, HostStorage, Storage, StorageError};

fn storage_error(what: &'static str, source: StorageError) -> KvError {
    KvError::Storage {
        what,
        bytes: 0,
        pages: 0,
        blocks: 0,
        source,
    }
}

fn bad(problem: String) -> KvError {
    KvError::BadConfig { problem }
}

/// Layer `layer`'s attention for a chunk `qkv [n, 3·d]` at positions `past..past + n`
/// of a cache on host memory (after [`KvCache::begin`] mapped the chunk's blocks):
/// writes the chunk's K and V rows into their blocks and returns `out [n, d]`, the
/// chunk's causal attention over the cached keys and its own.
///
/// # Errors
/// [`KvError::BadConfig`] when `qkv` is not `[n, 3·d]` or a layer is out of range, or
/// the table maps past a page; [`KvError::Storage`] when `host` does not hold a page.
pub fn attend_layer<S: Storage<Memory = HostMemory>>(
    cache: &KvCache<S>,
    host: &HostStorage,
    qkv: &[f32],
    layer: u32,
) -> Result<Vec<f32>, KvError> {
    let config = cache.config();
    let width = config.width() as usize;
    if layer >= config.layers
        || width == 0
        || qkv.is_empty()
        || !qkv.len().is_multiple_of(3 * width)
    {
        return Err(bad(format!(
            "qkv of {} floats for width {width}, layer {layer} of {}",
            qkv.len(),
            config.layers
        )));
    }
    let dims = KvDims {
        n: qkv.len() / (3 * width),
        heads: config.heads as usize,
        head_dim: config.head_dim as usize,
        layer: layer as usize,
        scale: 1.0 / (config.head_dim as f32).sqrt(),
    };
    let table = cache.table_words();
    let mut state = kv_self(qkv, dims.n, dims.heads, dims.head_dim, dims.scale);
    for (p, region) in cache.pages().iter().enumerate() {
        let bytes = host
            .read(region)
            .map_err(|e| storage_error("page read", e))?;
        let mut values = super::decode(config.dtype, &bytes);
        kv_append_page(&dims, qkv, &table, p as u32, &mut values).map_err(bad)?;
        kv_attend_page(&dims, &mut state, qkv, &table, p as u32, &values).map_err(bad)?;
        let out = super::encode(config.dtype, &values);
        host.write(region, &out)
            .map_err(|e| storage_error("page write", e))?;
    }
    Ok(kv_normalize(&dims, &state))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::exec::cpu_ref::attention_causal;
    use crate::kv::KvConfig;

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| {
                let x = (i as u32 ^ seed)
                    .wrapping_mul(2_654_435_761)
                    .rotate_left(13);
                (x % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// Runs `chunks` through a cache of `config` on two layers and compares every
    /// chunk's output with full causal attention over the whole sequence so far.
    fn check(config: KvConfig, chunks: &[u32]) {
        let host = Arc::new(HostStorage::unlimited());
        let mut cache = KvCache::new(Arc::clone(&host), config).expect("table");
        let w = config.width() as usize;
        let total: u32 = chunks.iter().sum();
        let seqs: Vec<Vec<f32>> = (0..config.layers)
            .map(|l| values(total as usize * 3 * w, 17 + l))
            .collect();
        let scale = 1.0 / (config.head_dim as f32).sqrt();
        let mut past = 0usize;
        for &n in chunks {
            let step = cache.begin(n).expect("blocks");
            assert_eq!(step.past as usize, past);
            for (l, seq) in seqs.iter().enumerate() {
                let end = past + n as usize;
                let chunk = &seq[past * 3 * w..end * 3 * w];
                let got = attend_layer(&cache, &host, chunk, l as u32).expect("attends");
                let full = attention_causal(
                    &seq[..end * 3 * w],
                    end,
                    config.heads as usize,
                    config.head_dim as usize,
                    scale,
                );
                let want = &full[past * w..end * w];
                for (i, (g, e)) in got.iter().zip(want).enumerate() {
                    assert!(
                        (g - e).abs() < 1e-5,
                        "layer {l} past {past} n {n} [{i}]: {g} vs {e}"
                    );
                }
            }
            cache.commit(n).expect("mapped");
            past += n as usize;
        }
        assert!(cache.pages().len() > 1, "the context spans several pages");
    }

    #[test]
    fn paged_attention_equals_full_causal_attention_for_decode_and_prefill() {
        // Blocks of 3 tokens, 2 blocks a page: 20 tokens span 4 pages.
        let config = KvConfig::new(2, 2, 16, 3, 32)
            .and_then(|c| c.with_blocks_per_page(2))
            .expect("valid");
        check(config, &[5, 1, 1, 4, 1, 7, 1]);
        // Head width 64, blocks of 5 that do not divide the context, one block a page.
        let wide = KvConfig::new(2, 1, 64, 5, 40).expect("valid");
        check(wide, &[1, 1, 9, 1, 6, 1]);
    }

    #[test]
    fn the_executor_cpu_reference_of_a_step_graph_equals_the_paged_reference() {
        use crate::exec::cpu_ref::evaluate;
        use crate::exec::{Inputs, TensorData};
        use crate::graph::{DType, GraphBuilder};
        use crate::kv::KvTensors;

        let config = KvConfig::new(2, 2, 8, 3, 24)
            .and_then(|c| c.with_blocks_per_page(2))
            .expect("valid");
        let host = Arc::new(HostStorage::unlimited());
        let mut cache = KvCache::new(Arc::clone(&host), config).expect("table");
        let w = config.width() as usize;
        let seq = values(13 * 3 * w, 11);
        // A prefill of 10 tokens (two pages) through the paged reference, layer 1.
        cache.begin(10).expect("blocks");
        attend_layer(&cache, &host, &seq[..10 * 3 * w], 1).expect("prefill");
        cache.commit(10).expect("mapped");
        // The next chunk of 3: the step graph on the executor's CPU reference, with the
        // cache's table and pages as values, against the paged reference.
        cache.begin(3).expect("blocks");
        let mut b = GraphBuilder::new("step");
        let qkv = b.input("qkv", DType::F32, &[3, 3 * config.width()]);
        let kv = KvTensors::add(&mut b, &config, config.pages_for(config.max_tokens));
        let out = kv.attention(&mut b, qkv, 1).expect("attention");
        b.mark_output(out);
        let graph = b.build().expect("valid");
        let chunk = &seq[10 * 3 * w..13 * 3 * w];
        let mut inputs = Inputs::new();
        inputs.insert(qkv, TensorData::F32(chunk.to_vec()));
        inputs.insert(kv.table, TensorData::U32(cache.table_words()));
        for (i, &page) in kv.pages.iter().enumerate() {
            let values = match cache.pages().get(i) {
                Some(region) => host
                    .read(region)
                    .expect("live")
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
                None => vec![0.0; config.page_words() as usize],
            };
            inputs.insert(page, TensorData::F32(values));
        }
        let all = evaluate(&graph, &inputs).expect("the CPU reference runs kv ops");
        let got = match all.get(out.index()) {
            Some(Some(TensorData::F32(v))) => v.clone(),
            other => panic!("no output: {other:?}"),
        };
        let want = attend_layer(&cache, &host, chunk, 1).expect("attends");
        assert_eq!(got.len(), want.len());
        for (g, e) in got.iter().zip(&want) {
            assert!((g - e).abs() < 1e-6, "{g} vs {e}");
        }
        let full = attention_causal(&seq[..13 * 3 * w], 13, 2, 8, 1.0 / 8f32.sqrt());
        for (g, e) in got.iter().zip(&full[10 * w..]) {
            assert!((g - e).abs() < 1e-5, "{g} vs {e}");
        }
    }

    #[test]
    fn a_reused_block_is_read_through_the_table() {
        let config = KvConfig::new(2, 2, 4, 2, 16)
            .and_then(|c| c.with_blocks_per_page(2))
            .expect("valid");
        let host = Arc::new(HostStorage::unlimited());
        let mut cache = KvCache::new(Arc::clone(&host), config).expect("table");
        let w = config.width() as usize;
        let seq = values(12 * 3 * w, 5);
        cache.begin(8).expect("blocks");
        attend_layer(&cache, &host, &seq[..8 * 3 * w], 0).expect("prefill");
        cache.commit(8).expect("mapped");
        // Truncate to 2 tokens, then regrow with other tokens: blocks are reused.
        cache.truncate(2);
        let other = values(12 * 3 * w, 99);
        let mut full = seq[..2 * 3 * w].to_vec();
        full.extend_from_slice(&other[2 * 3 * w..6 * 3 * w]);
        cache.begin(4).expect("reuse");
        let got = attend_layer(&cache, &host, &other[2 * 3 * w..6 * 3 * w], 0).expect("attends");
        let want = attention_causal(&full, 6, 2, 4, 0.5);
        for (g, e) in got.iter().zip(&want[2 * w..]) {
            assert!((g - e).abs() < 1e-5, "{g} vs {e}");
        }
        assert!(
            attend_layer(&cache, &host, &seq[..5], 0).is_err(),
            "not [n, 3d]"
        );
        assert!(
            attend_layer(&cache, &host, &seq[..3 * w], 2).is_err(),
            "no layer 2"
        );
    }
}
