// The paged KV cache's shared part of kv_attend.wgsl and kv_self_attend.wgsl, joined
// in front of each (exec::kernels::Shader::source_for): the invocation's lane, the
// scan of a cached block, the append of the chunk's own K and V rows, and the merge
// of a decode step's slices. The kernel file declares the bindings these read (qkv,
// table, page) and Params (n, heads, hd, layer).

const QUERIES: u32 = 16u;
// Invocations a workgroup (the entry points' workgroup size): QUERIES, or more where a
// decode step splits the keys wider (a pipeline constant, a power of two of at least
// QUERIES and at most MAX_SLICES; exec::kernels::DecodeSlices). With more than
// QUERIES, a workgroup of several queries (a prefill chunk) leaves the rest idle.
override SLICES: u32 = 16u;
const MAX_SLICES: u32 = 256u;
const CHUNK: u32 = 8u;
const MASKED: f32 = -1e30;
const HEADER: u32 = 4u;

var<private> q: array<vec4<f32>, MAX_HD4>;
var<private> acc: array<vec4<f32>, MAX_HD4>;
var<private> run_max: f32;
var<private> run_sum: f32;
// One slice's state while add_slices() merges it: [max, sum, 0, 0], then acc.
var<workgroup> other: array<vec4<f32>, MAX_HD4 + 1u>;
// The slices' maxima or sums, then one vec4 of their acc, while add_slices() adds them
// as a tree (SLICES > QUERIES).
var<workgroup> slice_sums: array<vec4<f32>, MAX_SLICES>;

// What one invocation works on.
struct Lane {
    query: u32,     // the query row (clamped to n - 1)
    valid: bool,    // whether the query row exists (else nothing is stored)
    head: u32,      // the head's first vec4 column within q, k or v
    hd4: u32,
    d4: u32,
    row: u32,       // the first vec4 of this (query, head)'s state row
    slice: u32,     // which of `slices` interleaved shares of the keys it scans
    slices: u32,    // 1, or SLICES in a decode step (one query, see lane())
}

// One query (a decode step): the workgroup's SLICES invocations share its keys, each
// scanning every SLICES-th cached key with a softmax state of its own, and
// add_slices() merges the states into invocation 0, which stores. Otherwise one
// invocation per query (the first QUERIES invocations).
fn lane(wid: vec3<u32>, lid: vec3<u32>) -> Lane {
    let hd4 = head_vec4s();
    if params.n == 1u {
        return Lane(0u, lid.x == 0u, wid.y * hd4, hd4, params.heads * hd4, wid.y * (hd4 + 1u),
            lid.x, SLICES);
    }
    let t = wid.x * QUERIES + min(lid.x, QUERIES - 1u);
    let query = min(t, params.n - 1u);
    return Lane(query, t < params.n && lid.x < QUERIES, wid.y * hd4, hd4, params.heads * hd4,
        (query * params.heads + wid.y) * (hd4 + 1u), 0u, 1u);
}

// The sum over the workgroup's slices of v (a tree, log2(SLICES) rounds), returned
// in invocation 0 (and left in slice_sums[0]); `maximum` takes their maximum instead.
// Every invocation calls it.
fn slices_total(v: vec4<f32>, s: u32, maximum: bool) -> vec4<f32> {
    workgroupBarrier();
    slice_sums[s] = v;
    for (var half = SLICES / 2u; half > 0u; half = half / 2u) {
        workgroupBarrier();
        if s < half {
            let o = slice_sums[s + half];
            slice_sums[s] = select(slice_sums[s] + o, max(slice_sums[s], o), maximum);
        }
    }
    return slice_sums[s];
}

// Merges the softmax states of a decode step's slices into invocation 0's (every
// invocation calls it: it holds barriers when there is one query). Up to QUERIES
// slices, one after another; more as a tree (add_slices_tree).
fn add_slices(l: Lane, lid: vec3<u32>) {
    if params.n != 1u {
        return;
    }
    if SLICES > QUERIES {
        add_slices_tree(l, lid.x);
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

// add_slices() for many slices: the largest maximum, every slice's state rescaled to
// it, then the sums and each vec4 of acc added as trees (1 + hd4 of them, after the
// maximum's).
fn add_slices_tree(l: Lane, s: u32) {
    _ = slices_total(vec4(run_max), s, true);
    let everyone = first_slice_total();
    // A slice with no keys has run_max MASKED and adds nothing.
    let scale = select(exp(run_max - everyone), 0.0, run_sum == 0.0);
    let sum = slices_total(vec4(run_sum * scale), s, false).x;
    // The width from the pipeline constant or params, not from `l` (a lane's value): the
    // loop holds barriers.
    let hd4 = head_vec4s();
    for (var e = 0u; e < hd4; e++) {
        let total = slices_total(acc[e] * scale, s, false);
        if s == 0u {
            acc[e] = total;
        }
    }
    if s == 0u {
        run_max = everyone;
        run_sum = sum;
    }
}

// The last slices_total's result, read by every invocation.
fn first_slice_total() -> f32 {
    workgroupBarrier();
    return slice_sums[0].x;
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

// Adds this lane's keys of every cached block of this page (positions < past) to the
// running softmax. A decode step's slices take the page's keys in turn across its
// blocks (slice s the keys s, s + slices, ... of the page, whatever the block size),
// so that every slice has work when the blocks are shorter than the slices.
fn scan_page(l: Lane, past: u32, mapped: u32, bt: u32, this_page: u32) {
    let blocks = min((past + bt - 1u) / bt, mapped);
    let layer_at = params.layer * 2u * bt * l.d4;
    var seen = 0u; // this page's keys in the blocks before
    for (var b = 0u; b < blocks; b++) {
        if table[HEADER + 2u * b] != this_page {
            continue;
        }
        let k0 = table[HEADER + 2u * b + 1u] / 4u + layer_at + l.head;
        let rows = min(bt, past - b * bt);
        // The block's first row goes to slice seen % slices; this lane's first row is
        // the one after as many rows as it comes later.
        let first = (l.slice + l.slices - seen % l.slices) % l.slices;
        scan_block(l, k0, k0 + bt * l.d4, rows, first);
        seen += rows;
    }
}

// Adds this lane's keys of one block to the running softmax: rows first, first +
// slices, ... below `rows`. Rows past them in the last chunk are masked and not read.
fn scan_block(l: Lane, k0: u32, v0: u32, rows: u32, first: u32) {
    let mine = select(0u, (rows - first + l.slices - 1u) / l.slices, first < rows);
    for (var c0 = 0u; c0 < mine; c0 += CHUNK) {
        var s: array<f32, CHUNK>;
        var chunk_max = run_max;
        for (var c = 0u; c < CHUNK; c++) {
            s[c] = MASKED;
            if c0 + c < mine {
                let krow = k0 + (first + (c0 + c) * l.slices) * l.d4;
                var dot_qk = 0.0;
                for (var e = 0u; e < l.hd4; e++) {
                    dot_qk = dot_qk + dot(q[e], vec4<f32>(page[krow + e]));
                }
                s[c] = dot_qk;
            }
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
        let live = min(CHUNK, mine - c0);
        // The rows of V outside, the head inside (as kv_self.wgsl: indices into acc
        // a compiler can fix; the same operations in the same order).
        for (var e = 0u; e < l.hd4; e++) {
            acc[e] = acc[e] * rescale;
        }
        for (var c = 0u; c < live; c++) {
            let vrow = v0 + (first + (c0 + c) * l.slices) * l.d4;
            let weight = vec4(p[c]);
            for (var e = 0u; e < l.hd4; e++) {
                acc[e] = fma(weight, vec4<f32>(page[vrow + e]), acc[e]);
            }
        }
    }
}
