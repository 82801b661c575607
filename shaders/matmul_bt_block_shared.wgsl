// The product of matmul_bt_tiled.wgsl (joined after this file) with the reads of A
// shared across a subgroup, as matmul_block_shared.wgsl does for matmul_tiled.wgsl
// (see there): at each step of k invocation s of a subgroup reads row s of each group
// of at most GROUP_ROWS rows and every invocation takes each row from the one that
// read it with subgroupShuffle (two or four groups of 8 for the tall tiles); a
// narrower subgroup reads as matmul_bt_block.wgsl does. Needs the device's subgroup
// feature; called in uniform control flow. Same sums in the same order as
// matmul_bt_block.wgsl.

// MAX_ROWS and GROUP_ROWS: matmul_shared_groups.wgsl, joined in front.

// Adds one step of k to the accumulators of the `count` rows from `first`: `read` is
// this invocation's vec4 of row first + lane, and b0..b3 the step's vec4s of the four
// columns' rows of b.
fn add_bt_group(
    acc: ptr<function, array<vec4<f32>, MAX_ROWS>>,
    first: u32,
    count: u32,
    read: vec4<f32>,
    b0: vec4<f32>,
    b1: vec4<f32>,
    b2: vec4<f32>,
    b3: vec4<f32>,
) {
    for (var r = 0u; r < count; r++) {
        let av = subgroupShuffle(read, r);
        (*acc)[first + r] = (*acc)[first + r] + vec4(dot(av, b0), dot(av, b1), dot(av, b2), dot(av, b3));
    }
}

// The ROWS x 4 block of a x b^T whose first row is row0 and whose first column is
// col0 (rows past m and columns past n read the last row / column and are not stored).
fn bt_block(row0: u32, col0: u32) -> array<vec4<f32>, MAX_ROWS> {
    let k4 = params.k / 4u;
    let lane = subgroupExclusiveAdd(1u); // this invocation's index in its subgroup
    let width = subgroupAdd(1u); // invocations of the subgroup
    let group = min(ROWS, GROUP_ROWS); // rows of each group (ROWS is 4, 8, 16 or 32)
    let b0r = min(col0, params.n - 1u) * k4;
    let b1r = min(col0 + 1u, params.n - 1u) * k4;
    let b2r = min(col0 + 2u, params.n - 1u) * k4;
    let b3r = min(col0 + 3u, params.n - 1u) * k4;
    var acc: array<vec4<f32>, MAX_ROWS>;
    if width >= group {
        let mine = min(lane, group - 1u);
        let row_0 = min(row0 + mine, params.m - 1u) * k4;
        let row_1 = min(row0 + GROUP_ROWS + mine, params.m - 1u) * k4;
        let row_2 = min(row0 + 2u * GROUP_ROWS + mine, params.m - 1u) * k4;
        let row_3 = min(row0 + 3u * GROUP_ROWS + mine, params.m - 1u) * k4;
        for (var kq = 0u; kq < k4; kq++) {
            let b0 = vec4<f32>(b[b0r + kq]);
            let b1 = vec4<f32>(b[b1r + kq]);
            let b2 = vec4<f32>(b[b2r + kq]);
            let b3 = vec4<f32>(b[b3r + kq]);
            add_bt_group(&acc, 0u, group, vec4<f32>(a[row_0 + kq]), b0, b1, b2, b3);
            if ROWS > GROUP_ROWS {
                add_bt_group(&acc, GROUP_ROWS, GROUP_ROWS, vec4<f32>(a[row_1 + kq]), b0, b1, b2, b3);
            }
            if ROWS > 2u * GROUP_ROWS {
                add_bt_group(&acc, 2u * GROUP_ROWS, GROUP_ROWS, vec4<f32>(a[row_2 + kq]), b0, b1, b2, b3);
                add_bt_group(&acc, 3u * GROUP_ROWS, GROUP_ROWS, vec4<f32>(a[row_3 + kq]), b0, b1, b2, b3);
            }
        }
        return acc;
    }
    // A subgroup narrower than the tile: every invocation reads its own rows.
    return bt_block_each(row0, col0);
}
