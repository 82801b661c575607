// Fused causal multi-head attention over a packed QKV activation:
//   attention_causal: qkv [seq, 3d] (row t: q | k | v, head h at columns h*hd..) →
//                     out [seq, d], out[t, head h] = softmax_j≤t(q_t·k_j * scale) · v_j
// One invocation per query and head, QUERIES consecutive queries of one head per
// workgroup (flash-attention style, no score matrix in memory). The workgroup walks
// the keys up to its last query in chunks of CHUNK: every invocation reads the same
// key and value rows at the same time (one load serves the workgroup), scores the
// chunk against its own query (keys after it are masked), rescales its running sum and
// output once per chunk (online softmax) and adds the chunk's probabilities times v.
// The output is divided by the running sum at the end. The query and the output row
// stay in the invocation's registers: hd must be a multiple of 4 and at most 4 *
// MAX_HD4 (256). Params: seq, heads, hd, unused; scale.

// Params and bindings: attention_io.wgsl, joined in front.

const QUERIES: u32 = 16u; // queries per workgroup (one per invocation)
const CHUNK: u32 = 8u; // keys scored before each rescale
const MASKED: f32 = -1e30;

@compute @workgroup_size(16)
fn attention_causal(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let seq = params.seq;
    let hd4 = head_vec4s();
    let d4 = params.heads * hd4;
    let stride = 3u * d4; // vec4s per qkv row
    let head = wid.y * hd4; // the head's first vec4 column within q, k or v
    let q0 = wid.x * QUERIES;
    let query = min(q0 + lid.x, seq - 1u);
    let keys = min(q0 + QUERIES, seq); // keys 0..keys cover every query of the group
    var q: array<vec4<f32>, MAX_HD4>;
    var acc: array<vec4<f32>, MAX_HD4>;
    for (var e = 0u; e < hd4; e++) {
        q[e] = vec4<f32>(qkv[query * stride + head + e]) * params.scale;
    }
    var run_max = MASKED;
    var run_sum = 0.0;
    for (var j0 = 0u; j0 < keys; j0 += CHUNK) {
        var s: array<f32, CHUNK>;
        var chunk_max = run_max;
        for (var c = 0u; c < CHUNK; c++) {
            let key = j0 + c;
            let krow = min(key, seq - 1u) * stride + d4 + head;
            var dot_qk = 0.0;
            for (var e = 0u; e < hd4; e++) {
                dot_qk = dot_qk + dot(q[e], vec4<f32>(qkv[krow + e]));
            }
            s[c] = select(MASKED, dot_qk, key <= query);
            chunk_max = max(chunk_max, s[c]);
        }
        let rescale = exp(run_max - chunk_max);
        run_max = chunk_max;
        var p: array<f32, CHUNK>;
        var p_sum = 0.0;
        for (var c = 0u; c < CHUNK; c++) {
            p[c] = exp(s[c] - chunk_max);
            p_sum = p_sum + p[c];
        }
        run_sum = run_sum * rescale + p_sum;
        for (var e = 0u; e < hd4; e++) {
            var o = acc[e] * rescale;
            for (var c = 0u; c < CHUNK; c++) {
                let vrow = min(j0 + c, seq - 1u) * stride + 2u * d4 + head;
                o = fma(vec4(p[c]), vec4<f32>(qkv[vrow + e]), o);
            }
            acc[e] = o;
        }
    }
    if q0 + lid.x < seq {
        let inv = 1.0 / run_sum;
        for (var e = 0u; e < hd4; e++) {
            out[query * d4 + head + e] = vec4<T>(acc[e] * inv);
        }
    }
}
