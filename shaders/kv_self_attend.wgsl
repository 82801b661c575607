// The first page of the paged KV cache's attention with the chunk's own keys in the
// same dispatch (kv_self.wgsl, then kv_attend.wgsl's first page, in one kernel):
//   kv_self_attend:     (qkv, table, page, out)  out: the state after this page
//   kv_self_attend_out: (qkv, table, page, out)  out [n, d]: acc / sum
// Per (query t, head h) the online softmax starts over the chunk's keys j <= t (as
// kv_self.wgsl: same loop, same order), then continues over the cached keys at
// positions < past whose block lies in this page, and appends the chunk's own K and V
// rows whose block lies in this page (as kv_attend.wgsl, with which it shares
// kv_pages.wgsl). One dispatch fewer per layer; the state
// between kv_self and the first page is never stored.
// A decode step (one query) would leave all but one invocation of each head's workgroup
// idle, walking the whole context alone: there the QUERIES invocations split the
// cached keys (each every QUERIES-th key of a block, with a softmax state of its own)
// and merge their states into the first at the end (add_slices); the sums are added
// in another order than one invocation would, so results differ by rounding.
// qkv, the pages and the normalised output are stored as T (storage_f32.wgsl /
// storage_f16.wgsl; the table's offsets count elements of T); the state and every
// score, sum and accumulator are f32.
// Params: n, heads, hd, layer; scale, page (a whole number).

struct Params {
    n: u32,
    heads: u32,
    hd: u32,
    layer: u32,
    scale: f32,
    page: f32,
    unused2: f32,
    unused3: f32,
}

@group(0) @binding(1) var<storage, read_write> qkv: array<vec4<T>>;
@group(0) @binding(2) var<storage, read_write> table: array<u32>;
@group(0) @binding(3) var<storage, read_write> page: array<vec4<T>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;
// The normalised output [n, d], stored as T (the same binding as `out`; an entry point
// uses one of the two).
@group(0) @binding(4) var<storage, read_write> out_t: array<vec4<T>>;

// Constants, the lane, the block scan, the append and the decode merge:
// kv_pages.wgsl, joined in front.

// The chunk's own keys j <= query (kv_self.wgsl's loop): keys up to the workgroup's
// last query, in chunks of CHUNK, one rescale per chunk. Sets run_max, run_sum, acc.
fn self_state(l: Lane, wid: vec3<u32>) {
    let n = params.n;
    let stride = 3u * l.d4;
    let keys = min(wid.x * QUERIES + QUERIES, n);
    run_max = MASKED;
    run_sum = 0.0;
    for (var e = 0u; e < l.hd4; e++) {
        acc[e] = vec4(0.0);
    }
    // In a decode step the first slice takes the chunk's one key; the others start
    // empty.
    let own = select(0u, keys, l.slice == 0u);
    for (var j0 = 0u; j0 < own; j0 += CHUNK) {
        var s: array<f32, CHUNK>;
        var chunk_max = run_max;
        for (var c = 0u; c < CHUNK; c++) {
            let key = j0 + c;
            let krow = min(key, n - 1u) * stride + l.d4 + l.head;
            var dot_qk = 0.0;
            for (var e = 0u; e < l.hd4; e++) {
                dot_qk = dot_qk + dot(q[e], vec4<f32>(qkv[krow + e]));
            }
            s[c] = select(MASKED, dot_qk, key <= l.query);
            chunk_max = max(chunk_max, s[c]);
        }
        let rescale = exp(run_max - chunk_max);
        run_max = chunk_max;
        var p: array<f32, CHUNK>;
        var p_sum = 0.0;
        for (var c = 0u; c < CHUNK; c++) {
            p[c] = select(0.0, exp(s[c] - chunk_max), j0 + c <= l.query);
            p_sum = p_sum + p[c];
        }
        run_sum = run_sum * rescale + p_sum;
        // The rows of V outside, the head inside (as kv_self.wgsl: indices into acc
        // a compiler can fix; the same operations in the same order).
        for (var e = 0u; e < l.hd4; e++) {
            acc[e] = acc[e] * rescale;
        }
        for (var c = 0u; c < CHUNK; c++) {
            let vrow = min(j0 + c, n - 1u) * stride + 2u * l.d4 + l.head;
            let weight = vec4(p[c]);
            for (var e = 0u; e < l.hd4; e++) {
                acc[e] = fma(weight, vec4<f32>(qkv[vrow + e]), acc[e]);
            }
        }
    }
}

// The query, the chunk's own keys, the append, this page's cached keys. The caller
// stores.
fn self_attend(l: Lane, wid: vec3<u32>) {
    let past = table[0];
    let mapped = table[1];
    let bt = max(table[2], 1u);
    let this_page = u32(params.page);
    for (var e = 0u; e < l.hd4; e++) {
        q[e] = vec4<f32>(qkv[l.query * 3u * l.d4 + l.head + e]) * params.scale;
    }
    self_state(l, wid);
    append(l, past, mapped, bt, this_page);
    scan_page(l, past, mapped, bt, this_page);
}

@compute @workgroup_size(SLICES)
fn kv_self_attend(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let l = lane(wid, lid);
    self_attend(l, wid);
    add_slices(l, lid);
    if l.valid {
        out[l.row] = vec4(run_max, run_sum, 0.0, 0.0);
        for (var e = 0u; e < l.hd4; e++) {
            out[l.row + 1u + e] = acc[e];
        }
    }
}

@compute @workgroup_size(SLICES)
fn kv_self_attend_out(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let l = lane(wid, lid);
    self_attend(l, wid);
    add_slices(l, lid);
    if l.valid {
        let inv = 1.0 / run_sum;
        for (var e = 0u; e < l.hd4; e++) {
            out_t[l.query * l.d4 + l.head + e] = vec4<T>(acc[e] * inv);
        }
    }
}
