// Fused causal multi-head attention with the keys in workgroup memory (the tiled form
// of attention.wgsl, same bindings, parameters and results up to rounding):
//   attention_tiled: qkv [seq, 3d] (row t: q | k | v, head h at columns h*hd..) →
//                    out [seq, d], out[t, head h] = softmax_j≤t(q_t·k_j * scale) · v_j
// A workgroup of 64 invocations owns TILE consecutive queries of one head. It walks the
// keys up to its last query TILE at a time: the whole workgroup loads the key and value
// rows of the tile into workgroup memory once (coalesced, each row read by one
// invocation instead of by every query), then four invocations per query score a
// quarter of the tile's keys each, and after a barrier each of the four rescales its
// running sum and its quarter of the output columns once per tile (online softmax,
// flash-attention style; no score matrix in memory) and adds the tile's probabilities
// times v. The query tile is loaded (pre-scaled) once. Each invocation recomputes its
// row's probabilities from the scores in workgroup memory, so the four invocations of a
// row agree without another barrier. The tiles' rows are padded to STRIDE (one vec4
// more than a row holds) so that the rows one group of invocations reads at once fall
// on different memory banks. hd must be a multiple of 4 and at most 4 * TILE_HD4 (64).
// Params: seq, heads, hd, unused; scale.

// Params and bindings: attention_io.wgsl, joined in front.

const TILE: u32 = 16u; // queries per workgroup, and keys per tile
const LANES: u32 = 4u; // invocations per query
const TILE_HD4: u32 = 16u; // vec4s per head, at most
const STRIDE: u32 = 17u; // the row stride of the tiles: TILE_HD4 (or TILE) + 1
const MASKED: f32 = -1e30;

var<workgroup> q_tile: array<vec4<f32>, 272>; // TILE queries x STRIDE, pre-scaled
var<workgroup> k_tile: array<vec4<f32>, 272>; // TILE keys x STRIDE
var<workgroup> v_tile: array<vec4<f32>, 272>; // TILE values x STRIDE
var<workgroup> s_tile: array<f32, 272>; // TILE queries x STRIDE: the scores

@compute @workgroup_size(64)
fn attention_tiled(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let seq = params.seq;
    let hd4 = head_vec4s();
    let d4 = params.heads * hd4;
    let stride = 3u * d4; // vec4s per qkv row
    let head = wid.y * hd4; // the head's first vec4 column within q, k or v
    let q0 = wid.x * TILE;
    let keys = min(q0 + TILE, seq); // keys 0..keys cover every query of the group
    let row = lid / LANES; // this invocation's query within the tile
    let lane = lid % LANES; // its quarter of the keys and of the output columns
    let query = q0 + row;
    let loads = TILE * hd4; // vec4s in one tile of queries, keys or values

    for (var i = lid; i < loads; i += 64u) {
        let t = i / hd4;
        let e = i % hd4;
        let src = min(q0 + t, seq - 1u) * stride + head + e;
        q_tile[t * STRIDE + e] = vec4<f32>(qkv[src]) * params.scale;
    }
    var acc: array<vec4<f32>, 4>; // output columns lane, lane + 4, ..
    var run_max = MASKED;
    var run_sum = 0.0;
    for (var j0 = 0u; j0 < keys; j0 += TILE) {
        workgroupBarrier(); // the previous tile is no longer read
        for (var i = lid; i < loads; i += 64u) {
            let t = i / hd4;
            let e = i % hd4;
            let src = min(j0 + t, seq - 1u) * stride + head + e;
            k_tile[t * STRIDE + e] = vec4<f32>(qkv[src + d4]);
            v_tile[t * STRIDE + e] = vec4<f32>(qkv[src + 2u * d4]);
        }
        workgroupBarrier();
        for (var c = lane; c < TILE; c += LANES) {
            var dot_qk = 0.0;
            for (var e = 0u; e < hd4; e++) {
                dot_qk = dot_qk + dot(q_tile[row * STRIDE + e], k_tile[c * STRIDE + e]);
            }
            s_tile[row * STRIDE + c] = select(MASKED, dot_qk, j0 + c <= query);
        }
        workgroupBarrier();
        var p: array<f32, TILE>;
        var tile_max = run_max;
        for (var c = 0u; c < TILE; c++) {
            p[c] = s_tile[row * STRIDE + c];
            tile_max = max(tile_max, p[c]);
        }
        let rescale = exp(run_max - tile_max);
        run_max = tile_max;
        var p_sum = 0.0;
        for (var c = 0u; c < TILE; c++) {
            p[c] = exp(p[c] - tile_max);
            p_sum = p_sum + p[c];
        }
        run_sum = run_sum * rescale + p_sum;
        for (var i = 0u; i < 4u; i++) {
            let e = lane + i * LANES;
            if e < hd4 {
                var o = acc[i] * rescale;
                for (var c = 0u; c < TILE; c++) {
                    o = fma(vec4(p[c]), v_tile[c * STRIDE + e], o);
                }
                acc[i] = o;
            }
        }
    }
    if query < seq {
        let inv = 1.0 / run_sum;
        for (var i = 0u; i < 4u; i++) {
            let e = lane + i * LANES;
            if e < hd4 {
                out[query * d4 + head + e] = vec4<T>(acc[i] * inv);
            }
        }
    }
}
