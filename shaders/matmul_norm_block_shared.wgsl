// The product of matmul_norm.wgsl (joined after this file) with the reads of x shared
// across a subgroup, as matmul_block_shared.wgsl does for matmul_tiled.wgsl (see
// there): invocation s of a subgroup of S >= ROWS reads row s at each step of k,
// normalises it (its mean, inverse deviation, gain and beta) and every invocation takes
// each normalised row from the one that formed it with subgroupShuffle; a narrower
// subgroup works as matmul_norm_block.wgsl does. Needs the device's subgroup feature;
// called in uniform control flow. The same values and sums in the same order as
// matmul_norm_block.wgsl.

// The ROWS x 4 block of layer_norm(x) x w whose first row is row0 and whose vec4 column
// is col (clamped by the caller), with `stats` filled for the block's rows.
fn norm_block(row0: u32, col: u32) -> array<vec4<f32>, MAX_ROWS> {
    let k4 = params.k / 4u;
    let n4 = params.n / 4u;
    let lane = subgroupExclusiveAdd(1u); // this invocation's index in its subgroup
    let width = subgroupAdd(1u); // invocations of the subgroup
    var acc: array<vec4<f32>, MAX_ROWS>;
    if width >= ROWS {
        let mine = min(lane, ROWS - 1u);
        let my_row = row_base(row0, mine);
        let my_mean = stats[mine].x;
        let my_inv = stats[mine].y;
        for (var kq = 0u; kq < k4; kq++) {
            let base = kq * 4u * n4 + col;
            let b0 = vec4<f32>(w[base]);
            let b1 = vec4<f32>(w[base + n4]);
            let b2 = vec4<f32>(w[base + 2u * n4]);
            let b3 = vec4<f32>(w[base + 3u * n4]);
            let g = vec4<f32>(gain[kq]);
            let t = vec4<f32>(beta[kq]);
            let formed = (vec4<f32>(x[my_row + kq]) - vec4(my_mean)) * my_inv * g + t;
            for (var r = 0u; r < ROWS; r++) {
                let av = subgroupShuffle(formed, r);
                acc[r] = fma(vec4(av.x), b0, fma(vec4(av.y), b1, fma(vec4(av.z), b2, fma(vec4(av.w), b3, acc[r]))));
            }
        }
        return acc;
    }
    // A subgroup narrower than the tile: every invocation reads its own rows.
    return norm_block_each(row0, col);
}
