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

// Constants, the lane, the block scan, the append and the decode merge:
// kv_pages.wgsl, joined in front.

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
    scan_page(l, past, mapped, bt, this_page);
}

@compute @workgroup_size(SLICES)
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

@compute @workgroup_size(SLICES)
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

@compute @workgroup_size(SLICES)
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
