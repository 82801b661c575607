// Stream compaction: `count_positive` counts the elements of `x` that are > 0 and
// writes the count as a whole-number f32 into `count[0]`; `compact` writes those
// elements, in order, to the first `out_len` slots of `out` (zeros after them when
// fewer were kept). One workgroup of 256 threads: each thread walks a contiguous slice
// of `x`, a workgroup prefix sum of the per-thread counts gives each slice its first
// output slot, so the order of `x` is kept without atomics. `x` and `out` are stored as
// `T` (f32, or f16 in the f16 form); the count is f32 in both forms (exact to 2^24).

struct Params {
    len: u32,     // elements of x
    out_len: u32, // elements of out (compact only)
    unused0: u32,
    unused1: u32,
    unused2: f32,
    unused3: f32,
    unused4: f32,
    unused5: f32,
}

@group(0) @binding(1) var<storage, read_write> x: array<T>;
@group(0) @binding(2) var<storage, read_write> second: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;

var<workgroup> partial: array<u32, 256>;

// The slice [start, end) of x that thread `lid` walks.
fn slice_of(lid: u32) -> vec2<u32> {
    let per = (params.len + 255u) / 256u;
    let start = min(lid * per, params.len);
    let end = min(start + per, params.len);
    return vec2<u32>(start, end);
}

fn kept_in(range: vec2<u32>) -> u32 {
    var n = 0u;
    for (var i = range.x; i < range.y; i = i + 1u) {
        if f32(x[i]) > 0.0 {
            n = n + 1u;
        }
    }
    return n;
}

// Inclusive prefix sum of `partial` (Hillis-Steele); every thread must call it.
fn scan(lid: u32) {
    for (var step = 1u; step < 256u; step = step * 2u) {
        workgroupBarrier();
        var add = 0u;
        if lid >= step {
            add = partial[lid - step];
        }
        workgroupBarrier();
        partial[lid] = partial[lid] + add;
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn count_positive(@builtin(local_invocation_index) lid: u32) {
    partial[lid] = kept_in(slice_of(lid));
    scan(lid);
    if lid == 0u {
        // `second` is the count here (binding 2 of a two-range dispatch).
        second[0] = f32(partial[255]);
    }
}

@compute @workgroup_size(256)
fn compact(@builtin(local_invocation_index) lid: u32) {
    let range = slice_of(lid);
    let mine = kept_in(range);
    partial[lid] = mine;
    scan(lid);
    // `second` is the count tensor: bound so the dependency is explicit, not read.
    var slot = partial[lid] - mine;
    for (var i = range.x; i < range.y; i = i + 1u) {
        let v = x[i];
        if f32(v) > 0.0 {
            if slot < params.out_len {
                out[slot] = v;
            }
            slot = slot + 1u;
        }
    }
    // Zero the slots past the kept elements (when out_len exceeds the count).
    let total = partial[255];
    for (var j = total + lid; j < params.out_len; j = j + 256u) {
        out[j] = T(0.0);
    }
}
