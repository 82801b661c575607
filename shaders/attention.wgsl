// Fused causal multi-head attention over a packed QKV activation:
//   attention_causal: qkv [seq, 3d] (row t: q | k | v, head h at columns h*hd..) →
//                     out [seq, d], out[t, head h] = softmax_j≤t(q_t·k_j * scale) · v_j
// One workgroup of 64 invocations takes 8 queries of one head and walks the keys in
// blocks of 64 (flash-attention style, no score matrix in memory):
//   1. invocation j scores key j of the block against the 8 queries (the query loads
//      are shared by the whole workgroup) into an 8 x 64 tile in workgroup memory,
//      masking keys after each query;
//   2. 8 invocations, one per query, take the block's running maximum, turn the
//      scores into exp(score - max) and rescale the running sum (online softmax);
//   3. every invocation owns (query, vec4 column) pairs of the output and adds the
//      block's probabilities times v, after rescaling what it had.
// The output is divided by the running sum at the end. hd must be a multiple of 4 and
// at most 4 * MAX_PAIRS * 64 / 8 (256). Params: seq, heads, hd, unused; scale.

struct Params {
    seq: u32,
    heads: u32,
    hd: u32,
    unused0: u32,
    scale: f32,
    unused1: f32,
    unused2: f32,
    unused3: f32,
}

@group(0) @binding(1) var<storage, read_write> qkv: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;

const QUERIES: u32 = 8u; // queries per workgroup
const KEYS: u32 = 64u; // keys per block = invocations per workgroup
const MAX_PAIRS: u32 = 8u; // (query, vec4 column) pairs per invocation: hd <= 256
const MASKED: f32 = -1e30;

var<workgroup> probs: array<array<f32, KEYS>, QUERIES>;
var<workgroup> row_max: array<f32, QUERIES>;
var<workgroup> row_sum: array<f32, QUERIES>;
var<workgroup> row_rescale: array<f32, QUERIES>;

@compute @workgroup_size(64)
fn attention_causal(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let seq = params.seq;
    let hd4 = params.hd / 4u;
    let d4 = params.heads * hd4;
    let stride = 3u * d4; // vec4s per qkv row
    let head = wid.y * hd4; // the head's first vec4 column within q, k or v
    let q0 = wid.x * QUERIES;
    let last_query = min(q0 + QUERIES - 1u, seq - 1u);
    let blocks = last_query / KEYS + 1u;
    let lane = lid.x;
    if lane < QUERIES {
        row_max[lane] = MASKED;
        row_sum[lane] = 0.0;
    }
    var acc: array<vec4<f32>, MAX_PAIRS>;
    let pairs = QUERIES * hd4;
    workgroupBarrier();
    for (var blk = 0u; blk < blocks; blk++) {
        // 1. scores of key `lane` of the block against the 8 queries
        let key = blk * KEYS + lane;
        let krow = min(key, seq - 1u) * stride + d4 + head;
        var s: array<f32, QUERIES>;
        for (var e = 0u; e < hd4; e++) {
            let kv = qkv[krow + e];
            for (var r = 0u; r < QUERIES; r++) {
                let q = min(q0 + r, seq - 1u);
                s[r] = s[r] + dot(qkv[q * stride + head + e], kv);
            }
        }
        for (var r = 0u; r < QUERIES; r++) {
            let q = min(q0 + r, seq - 1u);
            probs[r][lane] = select(MASKED, s[r] * params.scale, key <= q);
        }
        workgroupBarrier();
        // 2. online softmax, one invocation per query
        if lane < QUERIES {
            let old_max = row_max[lane];
            var new_max = old_max;
            for (var j = 0u; j < KEYS; j++) {
                new_max = max(new_max, probs[lane][j]);
            }
            var sum = 0.0;
            for (var j = 0u; j < KEYS; j++) {
                let p = exp(probs[lane][j] - new_max);
                probs[lane][j] = p;
                sum = sum + p;
            }
            let rescale = exp(old_max - new_max);
            row_rescale[lane] = rescale;
            row_sum[lane] = row_sum[lane] * rescale + sum;
            row_max[lane] = new_max;
        }
        workgroupBarrier();
        // 3. probabilities times v
        for (var i = 0u; i < MAX_PAIRS; i++) {
            let pair = lane + i * KEYS;
            if pair < pairs {
                let r = pair / hd4;
                let c = pair % hd4;
                var o = acc[i] * row_rescale[r];
                let vcol = 2u * d4 + head + c;
                for (var j = 0u; j < KEYS; j++) {
                    let vrow = min(blk * KEYS + j, seq - 1u);
                    o = fma(vec4(probs[r][j]), qkv[vrow * stride + vcol], o);
                }
                acc[i] = o;
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < MAX_PAIRS; i++) {
        let pair = lane + i * KEYS;
        if pair < pairs {
            let r = pair / hd4;
            let c = pair % hd4;
            let q = q0 + r;
            if q < seq {
                out[q * d4 + head + c] = acc[i] / row_sum[r];
            }
        }
    }
}
