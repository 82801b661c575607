// The product of matmul_bt_tiled.wgsl (joined after this file) with the reads of A
// shared across a subgroup, as matmul_block_shared.wgsl does for matmul_tiled.wgsl
// (see there): invocation s of a subgroup of S >= ROWS reads row s at each step of k
// and every invocation takes each row from the one that read it with subgroupShuffle;
// a narrower subgroup reads as matmul_bt_block.wgsl does. Needs the device's subgroup
// feature; called in uniform control flow. Same sums in the same order as
// matmul_bt_block.wgsl.

// The ROWS x 4 block of a x b^T whose first row is row0 and whose first column is
// col0 (rows past m and columns past n read the last row / column and are not stored).
fn bt_block(row0: u32, col0: u32) -> array<vec4<f32>, MAX_ROWS> {
    let k4 = params.k / 4u;
    let lane = subgroupExclusiveAdd(1u); // this invocation's index in its subgroup
    let width = subgroupAdd(1u); // invocations of the subgroup
    let b0r = min(col0, params.n - 1u) * k4;
    let b1r = min(col0 + 1u, params.n - 1u) * k4;
    let b2r = min(col0 + 2u, params.n - 1u) * k4;
    let b3r = min(col0 + 3u, params.n - 1u) * k4;
    var acc: array<vec4<f32>, MAX_ROWS>;
    if width >= ROWS {
        let my_row = min(row0 + min(lane, ROWS - 1u), params.m - 1u) * k4;
        for (var kq = 0u; kq < k4; kq++) {
            let b0 = vec4<f32>(b[b0r + kq]);
            let b1 = vec4<f32>(b[b1r + kq]);
            let b2 = vec4<f32>(b[b2r + kq]);
            let b3 = vec4<f32>(b[b3r + kq]);
            let read = vec4<f32>(a[my_row + kq]);
            for (var r = 0u; r < ROWS; r++) {
                let av = subgroupShuffle(read, r);
                acc[r] = acc[r] + vec4(dot(av, b0), dot(av, b1), dot(av, b2), dot(av, b3));
            }
        }
        return acc;
    }
    // A subgroup narrower than the tile: every invocation reads its own rows.
    return bt_block_each(row0, col0);
}
