// The paged KV cache's shared part of kv_attend.wgsl and kv_self_attend.wgsl, joined
// in front of each (exec::kernels::Shader::source_for): the invocation's lane, the
// scan of a cached block, the append of the chunk's own K and V rows, and the merge
// of a decode step's slices. The kernel file declares the bindings these read (qkv,
// table, page) and Params (n, heads, hd, layer).

const QUERIES: u32 = 16u;
const CHUNK: u32 = 8u;
const MAX_HD4: u32 = 64u;
const MASKED: f32 = -1e30;
const HEADER: u32 = 4u;

var<private> q: array<vec4<f32>, MAX_HD4>;
var<private> acc: array<vec4<f32>, MAX_HD4>;
var<private> run_max: f32;
var<private> run_sum: f32;
// One slice's state while add_slices() merges it: [max, sum, 0, 0], then acc.
var<workgroup> other: array<vec4<f32>, 65>; // 1 + MAX_HD4

// What one invocation works on.
struct Lane {
    query: u32,     // the query row (clamped to n - 1)
    valid: bool,    // whether the query row exists (else nothing is stored)
    head: u32,      // the head's first vec4 column within q, k or v
    hd4: u32,
    d4: u32,
    row: u32,       // the first vec4 of this (query, head)'s state row
    slice: u32,     // which of `slices` interleaved shares of the keys it scans
    slices: u32,    // 1, or QUERIES in a decode step (one query, see lane())
}

// One query (a decode step): the workgroup's QUERIES invocations share its keys, each
// scanning every QUERIES-th cached key with a softmax state of its own, and
// add_slices() merges the states into invocation 0, which stores. Otherwise one
// invocation per query.
fn lane(wid: vec3<u32>, lid: vec3<u32>) -> Lane {
    let hd4 = params.hd / 4u;
    if params.n == 1u {
        return Lane(0u, lid.x == 0u, wid.y * hd4, hd4, params.heads * hd4, wid.y * (hd4 + 1u),
            lid.x, QUERIES);
    }
    let t = wid.x * QUERIES + lid.x;
    let query = min(t, params.n - 1u);
    return Lane(query, t < params.n, wid.y * hd4, hd4, params.heads * hd4,
        (query * params.heads + wid.y) * (hd4 + 1u), 0u, 1u);
}

// Merges the softmax states of a decode step's slices into invocation 0's (every
// invocation calls it: it holds barriers when there is one query).
fn add_slices(l: Lane, lid: vec3<u32>) {
    if params.n != 1u {
        return;
    }
    for (var s = 1u; s < QUERIES; s++) {
        workgroupBarrier();
        if lid.x == s {
            other[0] = vec4(run_max, run_sum, 0.0, 0.0);
            for (var e = 0u; e < l.hd4; e++) {
                other[1u + e] = acc[e];
            }
        }
        workgroupBarrier();
        if lid.x == 0u {
            let their_max = other[0].x;
            let m = max(run_max, their_max);
            let mine = exp(run_max - m);
            let theirs = exp(their_max - m);
            run_sum = run_sum * mine + other[0].y * theirs;
            for (var e = 0u; e < l.hd4; e++) {
                acc[e] = acc[e] * mine + other[1u + e] * theirs;
            }
            run_max = m;
        }
    }
}

// Writes this lane's K and V rows into the cache when their block lies in this page.
fn append(l: Lane, past: u32, mapped: u32, bt: u32, this_page: u32) {
    let pos = past + l.query;
    let block = pos / bt;
    if !l.valid || block >= mapped || table[HEADER + 2u * block] != this_page {
        return;
    }
    let base = (table[HEADER + 2u * block + 1u] / 4u) + params.layer * 2u * bt * l.d4;
    let k = base + (pos % bt) * l.d4 + l.head;
    let v = k + bt * l.d4;
    let src = l.query * 3u * l.d4 + l.head;
    for (var e = 0u; e < l.hd4; e++) {
        page[k + e] = qkv[src + l.d4 + e];
        page[v + e] = qkv[src + 2u * l.d4 + e];
    }
}

// Adds this lane's keys of one block to the running softmax: rows slice, slice +
// slices, ... below `rows`.
fn scan_block(l: Lane, k0: u32, v0: u32, rows: u32) {
    let mine = select(0u, (rows - l.slice + l.slices - 1u) / l.slices, l.slice < rows);
    for (var c0 = 0u; c0 < mine; c0 += CHUNK) {
        var s: array<f32, CHUNK>;
        var chunk_max = run_max;
        for (var c = 0u; c < CHUNK; c++) {
            let krow = k0 + (l.slice + min(c0 + c, mine - 1u) * l.slices) * l.d4;
            var dot_qk = 0.0;
            for (var e = 0u; e < l.hd4; e++) {
                dot_qk = dot_qk + dot(q[e], vec4<f32>(page[krow + e]));
            }
            s[c] = select(MASKED, dot_qk, c0 + c < mine);
            chunk_max = max(chunk_max, s[c]);
        }
        let rescale = exp(run_max - chunk_max);
        run_max = chunk_max;
        var p: array<f32, CHUNK>;
        var p_sum = 0.0;
        for (var c = 0u; c < CHUNK; c++) {
            p[c] = select(0.0, exp(s[c] - chunk_max), c0 + c < mine);
            p_sum = p_sum + p[c];
        }
        run_sum = run_sum * rescale + p_sum;
        for (var e = 0u; e < l.hd4; e++) {
            var o = acc[e] * rescale;
            for (var c = 0u; c < CHUNK; c++) {
                let vrow = v0 + (l.slice + min(c0 + c, mine - 1u) * l.slices) * l.d4;
                o = fma(vec4(p[c]), vec4<f32>(page[vrow + e]), o);
            }
            acc[e] = o;
        }
    }
}

