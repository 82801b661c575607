// Softmax over the rows of a [rows, cols] matrix, one 256-thread workgroup per row,
// numerically stable (the row maximum is subtracted before exp).
//
// Causal variant (`causal != 0`): row r of each [period, cols] block masks the
// columns c > r % period (for a [seq, seq] score matrix, row r sees columns 0..=r).
// `softmax_rows` writes `out`; `softmax_rows_inplace` rewrites `x` (bound once).
// Rows beyond 65535 use the second workgroup dimension.

struct Params {
    rows: u32,
    cols: u32,
    causal: u32, // 0: plain softmax; else the causal mask applies
    period: u32, // rows per causal block (the second-to-last dimension)
    unused0: f32,
    unused1: f32,
    unused2: f32,
    unused3: f32,
}

@group(0) @binding(1) var<storage, read_write> x: array<T>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;

var<workgroup> scratch: array<f32, 256>;

fn workgroup_max(v: f32, lid: u32) -> f32 {
    scratch[lid] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if lid < s {
            scratch[lid] = max(scratch[lid], scratch[lid + s]);
        }
        workgroupBarrier();
    }
    let result = scratch[0];
    workgroupBarrier();
    return result;
}

fn workgroup_sum(v: f32, lid: u32) -> f32 {
    scratch[lid] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if lid < s {
            scratch[lid] = scratch[lid] + scratch[lid + s];
        }
        workgroupBarrier();
    }
    let result = scratch[0];
    workgroupBarrier();
    return result;
}

// Columns of this row that take part: all, or 0..=r % period when causal. Zero for a
// workgroup past the last row (so every thread still reaches every barrier).
fn visible_columns(row: u32) -> u32 {
    if row >= params.rows {
        return 0u;
    }
    if params.causal != 0u {
        return min(params.cols, row % params.period + 1u);
    }
    return params.cols;
}

// (row maximum, sum of exp(x - maximum)) over the visible columns.
fn row_stats(base: u32, visible: u32, lid: u32) -> vec2<f32> {
    var local_max = -3.4028234e38;
    for (var c = lid; c < visible; c = c + 256u) {
        local_max = max(local_max, f32(x[base + c]));
    }
    let row_max = workgroup_max(local_max, lid);
    var local_sum = 0.0;
    for (var c = lid; c < visible; c = c + 256u) {
        local_sum = local_sum + exp(f32(x[base + c]) - row_max);
    }
    let total = workgroup_sum(local_sum, lid);
    return vec2<f32>(row_max, total);
}

fn probability(v: f32, c: u32, visible: u32, stats: vec2<f32>) -> f32 {
    if c < visible {
        return exp(v - stats.x) / stats.y;
    }
    return 0.0;
}

@compute @workgroup_size(256)
fn softmax_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.y * groups.x + wid.x;
    let visible = visible_columns(row);
    let base = row * params.cols;
    let stats = row_stats(base, visible, lid);
    let cols = select(0u, params.cols, row < params.rows);
    for (var c = lid; c < cols; c = c + 256u) {
        out[base + c] = T(probability(f32(x[base + c]), c, visible, stats));
    }
}

@compute @workgroup_size(256)
fn softmax_rows_inplace(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.y * groups.x + wid.x;
    let visible = visible_columns(row);
    let base = row * params.cols;
    let stats = row_stats(base, visible, lid);
    let cols = select(0u, params.cols, row < params.rows);
    for (var c = lid; c < cols; c = c + 256u) {
        x[base + c] = T(probability(f32(x[base + c]), c, visible, stats));
    }
}
