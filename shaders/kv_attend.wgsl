// The paged KV cache's half of attention, one dispatch per page buffer of the cache:
//   kv_attend_inplace: (state, qkv, table, page)       state updated in place
//   kv_attend:         (state, qkv, table, page, out)  out: the updated state
//   kv_attend_out:     (state, qkv, table, page, out)  out [n, d]: acc / sum
// state [n, heads, hd + 4]: per (query t, head h) [max, sum, 0, 0, acc[hd]], the online
// softmax of kv_self.wgsl (scores already scaled). The chunk's n queries sit at
// positions past..past+n; this kernel adds the cached keys at positions < past whose
// block lies in this page, and appends the chunk's own K and V rows whose block lies in
// this page (positions >= past: never the rows it reads).
// table (u32): [past, mapped blocks, block_tokens, 0], then per logical block
// (page, word offset of the block in its page). A block holds every layer: layer l at
// l * 2 * block_tokens * d words, its K rows [block_tokens, d] then its V rows.
// One invocation per query and head, QUERIES queries of one head per workgroup; every
// invocation of a workgroup walks the same blocks (the table reads are uniform).
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

@group(0) @binding(1) var<storage, read_write> state: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> qkv: array<vec4<T>>;
@group(0) @binding(3) var<storage, read_write> table: array<u32>;
@group(0) @binding(4) var<storage, read_write> page: array<vec4<T>>;
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;
// The normalised output [n, d], stored as T (the same binding as `out`; an entry point
// uses one of the two).
@group(0) @binding(5) var<storage, read_write> out_t: array<vec4<T>>;

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

// Loads the state, appends, adds this page's cached keys. The caller stores.
fn attend(l: Lane) {
    let past = table[0];
    let mapped = table[1];
    let bt = max(table[2], 1u);
    let this_page = u32(params.page);
    // The state so far: the first slice's (the others start empty).
    let carried = l.slice == 0u;
    let first = select(vec4(MASKED, 0.0, 0.0, 0.0), state[l.row], carried);
    run_max = first.x;
    run_sum = first.y;
    for (var e = 0u; e < l.hd4; e++) {
        q[e] = vec4<f32>(qkv[l.query * 3u * l.d4 + l.head + e]) * params.scale;
        acc[e] = select(vec4(0.0), state[l.row + 1u + e], carried);
    }
    append(l, past, mapped, bt, this_page);
    let blocks = min((past + bt - 1u) / bt, mapped);
    let layer_at = params.layer * 2u * bt * l.d4;
    for (var b = 0u; b < blocks; b++) {
        if table[HEADER + 2u * b] != this_page {
            continue;
        }
        let k0 = table[HEADER + 2u * b + 1u] / 4u + layer_at + l.head;
        let rows = min(bt, past - b * bt);
        scan_block(l, k0, k0 + bt * l.d4, rows);
    }
}

@compute @workgroup_size(QUERIES)
fn kv_attend_inplace(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let l = lane(wid, lid);
    attend(l);
    add_slices(l, lid);
    if l.valid {
        state[l.row] = vec4(run_max, run_sum, 0.0, 0.0);
        for (var e = 0u; e < l.hd4; e++) {
            state[l.row + 1u + e] = acc[e];
        }
    }
}

@compute @workgroup_size(QUERIES)
fn kv_attend(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let l = lane(wid, lid);
    attend(l);
    add_slices(l, lid);
    if l.valid {
        out[l.row] = vec4(run_max, run_sum, 0.0, 0.0);
        for (var e = 0u; e < l.hd4; e++) {
            out[l.row + 1u + e] = acc[e];
        }
    }
}

@compute @workgroup_size(QUERIES)
fn kv_attend_out(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let l = lane(wid, lid);
    attend(l);
    add_slices(l, lid);
    if l.valid {
        let inv = 1.0 / run_sum;
        for (var e = 0u; e < l.hd4; e++) {
            out_t[l.query * l.d4 + l.head + e] = vec4<T>(acc[e] * inv);
        }
    }
}
