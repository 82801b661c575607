// Row normalisations over the last dimension, one 256-thread workgroup per row:
//   layer_norm: out = (x - mean) / sqrt(var + eps) * gain + bias   (two-pass variance)
//   rms_norm:   out = x / sqrt(mean(x^2) + eps) * gain
// Rows beyond 65535 use the second workgroup dimension.

struct Params {
    rows: u32,
    cols: u32,
    unused0: u32,
    unused1: u32,
    eps: f32,
    unused2: f32,
    unused3: f32,
    unused4: f32,
}

@group(0) @binding(1) var<storage, read_write> x: array<T>;
@group(0) @binding(2) var<storage, read_write> gain: array<T>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;
@group(0) @binding(4) var<storage, read_write> bias: array<T>;

var<workgroup> scratch: array<f32, 256>;

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

// Columns this workgroup handles: zero past the last row, so that every thread still
// reaches every barrier.
fn columns(row: u32) -> u32 {
    return select(0u, params.cols, row < params.rows);
}

@compute @workgroup_size(256)
fn layer_norm(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.y * groups.x + wid.x;
    let cols = columns(row);
    let base = row * params.cols;
    let n = f32(params.cols);
    var local = 0.0;
    for (var c = lid; c < cols; c = c + 256u) {
        local = local + f32(x[base + c]);
    }
    let mean = workgroup_sum(local, lid) / n;
    var local_sq = 0.0;
    for (var c = lid; c < cols; c = c + 256u) {
        let d = f32(x[base + c]) - mean;
        local_sq = local_sq + d * d;
    }
    let variance = workgroup_sum(local_sq, lid) / n;
    let inv = inverseSqrt(variance + params.eps);
    for (var c = lid; c < cols; c = c + 256u) {
        out[base + c] = T((f32(x[base + c]) - mean) * inv * f32(gain[c]) + f32(bias[c]));
    }
}

@compute @workgroup_size(256)
fn rms_norm(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.y * groups.x + wid.x;
    let cols = columns(row);
    let base = row * params.cols;
    var local_sq = 0.0;
    for (var c = lid; c < cols; c = c + 256u) {
        let v = f32(x[base + c]);
        local_sq = local_sq + v * v;
    }
    let mean_sq = workgroup_sum(local_sq, lid) / f32(params.cols);
    let inv = inverseSqrt(mean_sq + params.eps);
    for (var c = lid; c < cols; c = c + 256u) {
        out[base + c] = T(f32(x[base + c]) * inv * f32(gain[c]));
    }
}

// layer_norm_rows: the same layer norm with one invocation per row (16 rows per
// workgroup, no barrier): for many short rows, where the per-row workgroup spends its
// time in barriers. Rows beyond 65535 workgroups use the second dimension.
@compute @workgroup_size(16)
fn layer_norm_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = (wid.y * groups.x + wid.x) * 16u + lid;
    if row >= params.rows {
        return;
    }
    let cols = params.cols;
    let base = row * cols;
    let n = f32(cols);
    var sum = 0.0;
    for (var c = 0u; c < cols; c++) {
        sum = sum + f32(x[base + c]);
    }
    let mean = sum / n;
    var sum_sq = 0.0;
    for (var c = 0u; c < cols; c++) {
        let d = f32(x[base + c]) - mean;
        sum_sq = sum_sq + d * d;
    }
    let inv = inverseSqrt(sum_sq / n + params.eps);
    for (var c = 0u; c < cols; c++) {
        out[base + c] = T((f32(x[base + c]) - mean) * inv * f32(gain[c]) + f32(bias[c]));
    }
}
