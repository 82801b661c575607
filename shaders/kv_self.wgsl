// Causal attention of a chunk of n new queries over the chunk's own keys, as the
// online-softmax state the paged-cache kernels (kv_attend.wgsl) continue:
//   kv_self: qkv [n, 3d] (row t: q | k | v, head h at columns h*hd..) →
//            state [n, heads, hd + 4], per (query t, head h): [max, sum, 0, 0, acc[hd]]
//            over keys j <= t of the chunk: max = max_j s_j, sum = Σ exp(s_j - max),
//            acc = Σ exp(s_j - max) v_j, with s_j = q_t·k_j * scale.
// The chunk sits at positions past..past+n of the sequence; the keys before it live in
// the cache and are added by kv_attend, so this kernel needs no position at all.
// One invocation per query and head, QUERIES consecutive queries of one head per
// workgroup; keys in chunks of CHUNK read by the whole workgroup at once, one rescale
// per chunk (as attention.wgsl). hd a multiple of 4, at most 4 * MAX_HD4 (256).
// qkv is stored as T (storage_f32.wgsl / storage_f16.wgsl); the state is f32 either way.
// Params: n, heads, hd, unused; scale.

struct Params {
    n: u32,
    heads: u32,
    hd: u32,
    unused0: u32,
    scale: f32,
    unused1: f32,
    unused2: f32,
    unused3: f32,
}

@group(0) @binding(1) var<storage, read_write> qkv: array<vec4<T>>;
@group(0) @binding(2) var<storage, read_write> state: array<vec4<f32>>;

const QUERIES: u32 = 16u;
const CHUNK: u32 = 8u;
const MASKED: f32 = -1e30;

@compute @workgroup_size(16)
fn kv_self(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let n = params.n;
    let hd4 = head_vec4s();
    let d4 = params.heads * hd4;
    let stride = 3u * d4;
    let head = wid.y * hd4;
    let q0 = wid.x * QUERIES;
    let query = min(q0 + lid.x, n - 1u);
    let keys = min(q0 + QUERIES, n);
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
            let krow = min(key, n - 1u) * stride + d4 + head;
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
            p[c] = select(0.0, exp(s[c] - chunk_max), j0 + c <= query);
            p_sum = p_sum + p[c];
        }
        run_sum = run_sum * rescale + p_sum;
        // The rows of V outside, the head inside: the head's loop has a known length
        // (HD4) and holds no loop, so a compiler can fix every index into acc by
        // unrolling it (as the tiled matmuls' epilogues needed on llvmpipe; here the
        // gain was within the noise there). The same operations in the same order for
        // each element as the head outside.
        for (var e = 0u; e < hd4; e++) {
            acc[e] = acc[e] * rescale;
        }
        for (var c = 0u; c < CHUNK; c++) {
            let vrow = min(j0 + c, n - 1u) * stride + 2u * d4 + head;
            let weight = vec4(p[c]);
            for (var e = 0u; e < hd4; e++) {
                acc[e] = fma(weight, vec4<f32>(qkv[vrow + e]), acc[e]);
            }
        }
    }
    if q0 + lid.x < n {
        let row = (query * params.heads + wid.y) * (hd4 + 1u);
        state[row] = vec4(run_max, run_sum, 0.0, 0.0);
        for (var e = 0u; e < hd4; e++) {
            state[row + 1u + e] = acc[e];
        }
    }
}
