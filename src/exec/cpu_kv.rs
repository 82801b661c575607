//! The CPU math of the paged KV-cache ops (`kv_self`, `kv_attend`, `kv_attend_out`):
//! the same online softmax as `shaders/kv_self.wgsl` and `shaders/kv_attend.wgsl`,
//! accumulated in f64, reading the cache through the same block table layout
//! (`[past, mapped blocks, block_tokens, 0]`, then `(page, word offset)` per block).

use super::ops::{kv_state_row, KV_TABLE_HEADER};

/// The dimensions of one `kv_attend` call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvDims {
    /// Queries of the chunk.
    pub n: usize,
    /// Heads.
    pub heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// The layer whose rows are read.
    pub layer: usize,
    /// Score scale.
    pub scale: f32,
}

impl KvDims {
    /// Floats of the state `[n, heads, head_dim + 4]`.
    pub fn state_len(&self) -> usize {
        self.n * self.heads * kv_state_row(self.head_dim as u64) as usize
    }

    fn width(&self) -> usize {
        self.heads * self.head_dim
    }

    fn row(&self, t: usize, h: usize) -> usize {
        (t * self.heads + h) * (self.head_dim + 4)
    }
}

/// Adds one key (score `s`, already scaled; value row `v`) to a state row.
fn add_key(row: &mut [f32], s: f64, v: impl Fn(usize) -> f64) {
    let (max, sum) = (f64::from(row[0]), f64::from(row[1]));
    let new_max = max.max(s);
    let rescale = (max - new_max).exp();
    let p = (s - new_max).exp();
    row[0] = new_max as f32;
    row[1] = (sum * rescale + p) as f32;
    for (e, a) in row[4..].iter_mut().enumerate() {
        *a = (f64::from(*a) * rescale + p * v(e)) as f32;
    }
}

/// An empty state row: no key seen (max very low, sum 0).
fn empty_row(row: &mut [f32]) {
    row.fill(0.0);
    row[0] = -1e30;
}

/// `kv_self`: the state of each (query `t`, head) over the chunk's keys `j <= t`.
pub fn kv_self(qkv: &[f32], n: usize, heads: usize, head_dim: usize, scale: f32) -> Vec<f32> {
    let dims = KvDims {
        n,
        heads,
        head_dim,
        layer: 0,
        scale,
    };
    let w = dims.width();
    let at = |t: usize, part: usize, h: usize, e: usize| {
        f64::from(qkv[t * 3 * w + part * w + h * head_dim + e])
    };
    let mut state = vec![0.0f32; dims.state_len()];
    for t in 0..n {
        for h in 0..heads {
            let r = dims.row(t, h);
            let row = &mut state[r..r + head_dim + 4];
            empty_row(row);
            for j in 0..=t {
                let s: f64 = (0..head_dim)
                    .map(|e| at(t, 0, h, e) * at(j, 1, h, e))
                    .sum::<f64>()
                    * f64::from(scale);
                add_key(row, s, |e| at(j, 2, h, e));
            }
        }
    }
    state
}

/// The cache's header: `(past, mapped blocks, block_tokens)`.
fn header(table: &[u32]) -> Result<(usize, usize, usize), String> {
    if (table.len() as u64) < KV_TABLE_HEADER {
        return Err(format!(
            "block table of {} words has no header",
            table.len()
        ));
    }
    Ok((
        table[0] as usize,
        table[1] as usize,
        (table[2] as usize).max(1),
    ))
}

/// The word offset of logical block `b` in `page`, when the table maps it there.
fn block_in_page(table: &[u32], b: usize, page: u32) -> Option<usize> {
    let at = KV_TABLE_HEADER as usize + 2 * b;
    (table.get(at) == Some(&page)).then(|| table.get(at + 1).map(|&o| o as usize))?
}

/// `kv_attend` on the CPU: adds to `state` the cached keys at positions `< past` whose
/// block the table maps to `page` (`page_values` its floats).
///
/// # Errors
/// A message when the table or the page is shorter than what it maps.
pub fn kv_attend_page(
    dims: &KvDims,
    state: &mut [f32],
    qkv: &[f32],
    table: &[u32],
    page: u32,
    page_values: &[f32],
) -> Result<(), String> {
    let (past, mapped, bt) = header(table)?;
    let w = dims.width();
    let blocks = past.div_ceil(bt).min(mapped);
    for b in 0..blocks {
        let Some(offset) = block_in_page(table, b, page) else {
            continue;
        };
        let k0 = offset + dims.layer * 2 * bt * w;
        let end = k0 + 2 * bt * w;
        if end > page_values.len() {
            return Err(format!(
                "block {b} runs to word {end}, past the page's {} words",
                page_values.len()
            ));
        }
        for r in 0..bt.min(past - b * bt) {
            for t in 0..dims.n {
                for h in 0..dims.heads {
                    let key = |e: usize| f64::from(page_values[k0 + r * w + h * dims.head_dim + e]);
                    let value = |e: usize| {
                        f64::from(page_values[k0 + (bt + r) * w + h * dims.head_dim + e])
                    };
                    let s: f64 = (0..dims.head_dim)
                        .map(|e| f64::from(qkv[t * 3 * w + h * dims.head_dim + e]) * key(e))
                        .sum::<f64>()
                        * f64::from(dims.scale);
                    let at = dims.row(t, h);
                    add_key(&mut state[at..at + dims.head_dim + 4], s, value);
                }
            }
        }
    }
    Ok(())
}

/// The append half of `kv_attend` on the CPU: writes the chunk's K and V rows whose
/// block the table maps to `page` into `page_values`.
///
/// # Errors
/// A message when the table or the page is shorter than what it maps.
pub fn kv_append_page(
    dims: &KvDims,
    qkv: &[f32],
    table: &[u32],
    page: u32,
    page_values: &mut [f32],
) -> Result<(), String> {
    let (past, mapped, bt) = header(table)?;
    let w = dims.width();
    for t in 0..dims.n {
        let pos = past + t;
        let b = pos / bt;
        if b >= mapped {
            continue;
        }
        let Some(offset) = block_in_page(table, b, page) else {
            continue;
        };
        let k = offset + dims.layer * 2 * bt * w + (pos % bt) * w;
        let v = k + bt * w;
        if v + w > page_values.len() {
            return Err(format!(
                "block {b} runs to word {}, past the page's {} words",
                v + w,
                page_values.len()
            ));
        }
        page_values[k..k + w].copy_from_slice(&qkv[t * 3 * w + w..t * 3 * w + 2 * w]);
        page_values[v..v + w].copy_from_slice(&qkv[t * 3 * w + 2 * w..t * 3 * w + 3 * w]);
    }
    Ok(())
}

/// `kv_attend_out`'s last step: `out [n, heads·head_dim] = acc / sum`.
pub fn normalize(dims: &KvDims, state: &[f32]) -> Vec<f32> {
    let w = dims.width();
    let mut out = vec![0.0f32; dims.n * w];
    for t in 0..dims.n {
        for h in 0..dims.heads {
            let r = dims.row(t, h);
            let sum = f64::from(state[r + 1]);
            for e in 0..dims.head_dim {
                out[t * w + h * dims.head_dim + e] = (f64::from(state[r + 4 + e]) / sum) as f32;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::cpu_ref::attention_causal;

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len)
            .map(|i| {
                let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
                ((x >> 8) % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn self_attention_of_a_whole_sequence_is_causal_attention() {
        let (n, heads, hd) = (7, 2, 8);
        let qkv = values(n * 3 * heads * hd, 3);
        let scale = 1.0 / (hd as f32).sqrt();
        let dims = KvDims {
            n,
            heads,
            head_dim: hd,
            layer: 0,
            scale,
        };
        let got = normalize(&dims, &kv_self(&qkv, n, heads, hd, scale));
        let want = attention_causal(&qkv, n, heads, hd, scale);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-5, "{g} vs {w}");
        }
    }

    #[test]
    fn a_short_table_is_an_error_not_a_panic() {
        let dims = KvDims {
            n: 1,
            heads: 1,
            head_dim: 4,
            layer: 0,
            scale: 1.0,
        };
        let mut state = vec![0.0; dims.state_len()];
        let qkv = vec![0.0; 12];
        assert!(kv_attend_page(&dims, &mut state, &qkv, &[1, 1], 0, &[]).is_err());
        // A block mapped past the page's end.
        let table = [4, 1, 4, 0, 0, 0];
        assert!(kv_attend_page(&dims, &mut state, &qkv, &table, 0, &[0.0; 8]).is_err());
        assert!(
            kv_append_page(&dims, &qkv, &table, 0, &mut [0.0; 8]).is_ok(),
            "past the block"
        );
    }
}
