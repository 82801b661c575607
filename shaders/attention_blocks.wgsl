// Fused causal multi-head attention with a block of queries per invocation (a form of
// attention.wgsl for CPU adapters; same bindings, parameters and results up to
// rounding):
//   attention_blocks: qkv [seq, 3d] (row t: q | k | v, head h at columns h*hd..) →
//                     out [seq, d], out[t, head h] = softmax_j≤t(q_t·k_j * scale) · v_j
// A workgroup of 16 invocations owns 64 consecutive queries of one head, BLOCK (4)
// consecutive queries an invocation. It walks the keys up to its last query CHUNK at a
// time: each key row is read once per invocation and scored against all BLOCK
// queries, each value row read once and added into all BLOCK outputs, so every element
// read from storage feeds BLOCK multiply-adds (attention.wgsl's one query per
// invocation feeds one). On a CPU adapter (llvmpipe) a storage read costs a load per
// invocation while private arrays are cheap vector loads, so this trades private
// memory (the queries and outputs, 2 x BLOCK x MAX_HD4 vec4s) for reads. Online
// softmax per query as in attention.wgsl: each chunk's scores, then one rescale of the
// running sum and output. hd must be a multiple of 4 and at most 4 * MAX_HD4 (256).
// The key and value rows are read in groups of 8 vec4s along the head through kv_group
// and kv_take: attention_blocks_plain.wgsl (each invocation reads what it uses) or
// attention_blocks_shared.wgsl (the reads shared across a subgroup), joined in front.
// Params: seq, heads, hd, unused; scale.

// Params and bindings: attention_io.wgsl, joined in front.

const BLOCK: u32 = 4u; // queries per invocation
const LANES: u32 = 16u; // invocations per workgroup
const CHUNK: u32 = 8u; // keys scored before each rescale
const MASKED: f32 = -1e30;

// The first vec4 of key `key`'s value row in this head (keys past the sequence read
// its last row).
fn value_row(key: u32, seq: u32, stride: u32, d4: u32, head: u32) -> u32 {
    return min(key, seq - 1u) * stride + 2u * d4 + head;
}

@compute @workgroup_size(16)
fn attention_blocks(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let seq = params.seq;
    let hd4 = head_vec4s();
    let d4 = params.heads * hd4;
    let stride = 3u * d4; // vec4s per qkv row
    let head = wid.y * hd4; // the head's first vec4 column within q, k or v
    let q0 = wid.x * (BLOCK * LANES);
    let first = q0 + lid.x * BLOCK; // this invocation's first query
    let keys = min(q0 + BLOCK * LANES, seq); // keys 0..keys cover every query of the group
    var q: array<array<vec4<f32>, MAX_HD4>, BLOCK>;
    var acc: array<array<vec4<f32>, MAX_HD4>, BLOCK>;
    var run_max: array<f32, BLOCK>;
    var run_sum: array<f32, BLOCK>;
    for (var i = 0u; i < BLOCK; i++) {
        let row = min(first + i, seq - 1u) * stride + head;
        for (var e = 0u; e < hd4; e++) {
            q[i][e] = vec4<f32>(qkv[row + e]) * params.scale;
        }
        run_max[i] = MASKED;
        run_sum[i] = 0.0;
    }
    kv_begin();
    for (var j0 = 0u; j0 < keys; j0 += CHUNK) {
        var s: array<array<f32, CHUNK>, BLOCK>;
        for (var c = 0u; c < CHUNK; c++) {
            let key = j0 + c;
            let krow = min(key, seq - 1u) * stride + d4 + head;
            var dots = vec4<f32>();
            // The head in groups of 8 vec4s (kv_group / kv_take: read here, or shared).
            for (var e0 = 0u; e0 < hd4; e0 += 8u) {
                let mine = kv_group(krow, e0, hd4);
                for (var j = 0u; j < 8u; j++) {
                    let e = e0 + j;
                    if e < hd4 {
                        let k = kv_take(mine, krow, e0, j);
                        dots += vec4(dot(q[0][e], k), dot(q[1][e], k), dot(q[2][e], k), dot(q[3][e], k));
                    }
                }
            }
            for (var i = 0u; i < BLOCK; i++) {
                s[i][c] = select(MASKED, dots[i], key <= first + i);
            }
        }
        var p: array<array<f32, CHUNK>, BLOCK>;
        var rescale: array<f32, BLOCK>;
        for (var i = 0u; i < BLOCK; i++) {
            var chunk_max = run_max[i];
            for (var c = 0u; c < CHUNK; c++) {
                chunk_max = max(chunk_max, s[i][c]);
            }
            rescale[i] = exp(run_max[i] - chunk_max);
            run_max[i] = chunk_max;
            var p_sum = 0.0;
            for (var c = 0u; c < CHUNK; c++) {
                p[i][c] = exp(s[i][c] - chunk_max);
                p_sum = p_sum + p[i][c];
            }
            run_sum[i] = run_sum[i] * rescale[i] + p_sum;
        }
        for (var e0 = 0u; e0 < hd4; e0 += 8u) {
            // This invocation's part of each value row of the chunk in this group.
            var mine: array<vec4<f32>, CHUNK>;
            for (var c = 0u; c < CHUNK; c++) {
                mine[c] = kv_group(value_row(j0 + c, seq, stride, d4, head), e0, hd4);
            }
            for (var j = 0u; j < 8u; j++) {
                let e = e0 + j;
                if e < hd4 {
                    var o0 = acc[0][e] * rescale[0];
                    var o1 = acc[1][e] * rescale[1];
                    var o2 = acc[2][e] * rescale[2];
                    var o3 = acc[3][e] * rescale[3];
                    for (var c = 0u; c < CHUNK; c++) {
                        let v = kv_take(mine[c], value_row(j0 + c, seq, stride, d4, head), e0, j);
                        o0 = fma(vec4(p[0][c]), v, o0);
                        o1 = fma(vec4(p[1][c]), v, o1);
                        o2 = fma(vec4(p[2][c]), v, o2);
                        o3 = fma(vec4(p[3][c]), v, o3);
                    }
                    acc[0][e] = o0;
                    acc[1][e] = o1;
                    acc[2][e] = o2;
                    acc[3][e] = o3;
                }
            }
        }
    }
    for (var i = 0u; i < BLOCK; i++) {
        let query = first + i;
        if query < seq {
            let inv = 1.0 / run_sum[i];
            for (var e = 0u; e < hd4; e++) {
                out[query * d4 + head + e] = vec4<T>(acc[i][e] * inv);
            }
        }
    }
}
