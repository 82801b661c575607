// The product of matmul_norm.wgsl (joined after this file) with the reads of x shared
// across a subgroup, as matmul_block_shared.wgsl does for matmul_tiled.wgsl (see
// there): at each step of k invocation s of a subgroup reads row s of each group of at
// most GROUP_ROWS rows, normalises it (its mean, inverse deviation, gain and beta) and
// every invocation takes each normalised row from the one that formed it with
// subgroupShuffle (two or four groups of 8 for the tall tiles); a narrower subgroup
// works as matmul_norm_block.wgsl does. Needs the device's subgroup feature; called in
// uniform control flow. The same values and sums in the same order as
// matmul_norm_block.wgsl.

// MAX_ROWS, GROUP_ROWS and add_group: matmul_shared_groups.wgsl, joined in front.

// Row `at` (the index of its first vec4) at step kq normalised with its statistics
// `st` (mean, inverse deviation), g and t the step's gain and beta.
fn formed(at: u32, st: vec2<f32>, kq: u32, g: vec4<f32>, t: vec4<f32>) -> vec4<f32> {
    return (vec4<f32>(x[at + kq]) - vec4(st.x)) * st.y * g + t;
}

// The ROWS x 4 block of layer_norm(x) x w whose first row is row0 and whose vec4 column
// is col (clamped by the caller), with `stats` filled for the block's rows.
fn norm_block(row0: u32, col: u32) -> array<vec4<f32>, MAX_ROWS> {
    let k4 = params.k / 4u;
    let n4 = params.n / 4u;
    let lane = subgroupExclusiveAdd(1u); // this invocation's index in its subgroup
    let width = subgroupAdd(1u); // invocations of the subgroup
    let group = min(ROWS, GROUP_ROWS); // rows of each group (ROWS is 4, 8, 16 or 32)
    var acc: array<vec4<f32>, MAX_ROWS>;
    if width >= group {
        let mine = min(lane, group - 1u);
        // Each group's row of this invocation and its statistics, read once.
        let row_0 = row_base(row0, mine);
        let row_1 = row_base(row0, GROUP_ROWS + mine);
        let row_2 = row_base(row0, 2u * GROUP_ROWS + mine);
        let row_3 = row_base(row0, 3u * GROUP_ROWS + mine);
        let st_0 = stats[mine];
        let st_1 = stats[GROUP_ROWS + mine];
        let st_2 = stats[2u * GROUP_ROWS + mine];
        let st_3 = stats[3u * GROUP_ROWS + mine];
        for (var kq = 0u; kq < k4; kq++) {
            let base = kq * 4u * n4 + col;
            let b0 = vec4<f32>(w[base]);
            let b1 = vec4<f32>(w[base + n4]);
            let b2 = vec4<f32>(w[base + 2u * n4]);
            let b3 = vec4<f32>(w[base + 3u * n4]);
            let g = vec4<f32>(gain[kq]);
            let t = vec4<f32>(beta[kq]);
            add_group(&acc, 0u, group, formed(row_0, st_0, kq, g, t), b0, b1, b2, b3);
            if ROWS > GROUP_ROWS {
                let f1 = formed(row_1, st_1, kq, g, t);
                add_group(&acc, GROUP_ROWS, GROUP_ROWS, f1, b0, b1, b2, b3);
            }
            if ROWS > 2u * GROUP_ROWS {
                let f2 = formed(row_2, st_2, kq, g, t);
                add_group(&acc, 2u * GROUP_ROWS, GROUP_ROWS, f2, b0, b1, b2, b3);
                let f3 = formed(row_3, st_3, kq, g, t);
                add_group(&acc, 3u * GROUP_ROWS, GROUP_ROWS, f3, b0, b1, b2, b3);
            }
        }
        return acc;
    }
    // A subgroup narrower than the tile: every invocation reads its own rows.
    return norm_block_each(row0, col);
}
