// The product of matmul_norm.wgsl (joined after this file) with each invocation reading
// and normalising the ROWS rows of x it multiplies itself (the same rows for the whole
// workgroup): `norm_block_each`. The kernel calls `norm_block`, which
// matmul_norm_block_plain.wgsl defines as this and matmul_norm_block_shared.wgsl as the
// form that shares that work across a subgroup.

// The ROWS x 4 block of layer_norm(x) x w whose first row is row0 and whose vec4 column
// is col (clamped by the caller), with `stats` filled for the block's rows.
fn norm_block_each(row0: u32, col: u32) -> array<vec4<f32>, MAX_ROWS> {
    let k4 = params.k / 4u;
    let n4 = params.n / 4u;
    var rows: array<u32, MAX_ROWS>;
    var mean: array<f32, MAX_ROWS>;
    var inv: array<f32, MAX_ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        rows[r] = row_base(row0, r);
        mean[r] = stats[r].x;
        inv[r] = stats[r].y;
    }
    var acc: array<vec4<f32>, MAX_ROWS>;
    for (var kq = 0u; kq < k4; kq++) {
        let base = kq * 4u * n4 + col;
        let b0 = vec4<f32>(w[base]);
        let b1 = vec4<f32>(w[base + n4]);
        let b2 = vec4<f32>(w[base + 2u * n4]);
        let b3 = vec4<f32>(w[base + 3u * n4]);
        let g = vec4<f32>(gain[kq]);
        let t = vec4<f32>(beta[kq]);
        for (var r = 0u; r < ROWS; r++) {
            let av = (vec4<f32>(x[rows[r] + kq]) - vec4(mean[r])) * inv[r] * g + t;
            acc[r] = fma(vec4(av.x), b0, fma(vec4(av.y), b1, fma(vec4(av.z), b2, fma(vec4(av.w), b3, acc[r]))));
        }
    }
    return acc;
}
