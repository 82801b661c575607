// The product of the tiled matmul kernels (matmul_tiled.wgsl, joined after this file),
// with the reads of A shared across a subgroup (needs the device's subgroup feature,
// wgpu::Features::SUBGROUP): the ROWS rows a workgroup multiplies are the same for all
// its invocations, so at each step of k invocation s of a subgroup reads row s of a
// group of at most GROUP_ROWS of them (one vec4) and every invocation takes each row
// of the group from the one that read it with subgroupShuffle. A tile of ROWS <= 8 is
// one group; the tall tiles (16 or 32 rows) are two or four groups of 8, so that each
// read of B feeds up to 32 rows (a narrower subgroup reads as matmul_block.wgsl does).
// Where every storage read costs a load per invocation (llvmpipe), that is up to 8
// times fewer reads of A and, with the tall tiles, 2-4 times fewer of B per
// multiply-add. The invocation's index in its subgroup and the subgroup's size come
// from subgroup sums (subgroupExclusiveAdd / subgroupAdd of 1), so the entry points
// need no subgroup builtins. Called in uniform control flow: every invocation of the
// workgroup calls it before any returns. Same sums in the same order as
// matmul_block.wgsl.

// MAX_ROWS, GROUP_ROWS and add_group: matmul_shared_groups.wgsl, joined in front.

// The ROWS x 4 block of a x b whose first row is row0 and whose vec4 column is c4
// (rows past m and columns past n read the last row / column and are not stored).
fn block(row0: u32, c4: u32) -> array<vec4<f32>, MAX_ROWS> {
    let k4 = params.k / 4u;
    let n4 = params.n / 4u;
    let col = min(c4, n4 - 1u);
    let lane = subgroupExclusiveAdd(1u); // this invocation's index in its subgroup
    let width = subgroupAdd(1u); // invocations of the subgroup
    let group = min(ROWS, GROUP_ROWS); // rows of each group (ROWS is 4, 8, 16 or 32)
    var acc: array<vec4<f32>, MAX_ROWS>;
    if width >= group {
        // One read per invocation, group and step, shuffled from lane r: the common
        // case (llvmpipe's 8-wide subgroups), kept free of arrays indexed at run time,
        // which a CPU adapter turns into a load per invocation again. The groups past
        // the first exist for the tall tiles only (ROWS is a pipeline constant).
        let mine = min(lane, group - 1u);
        let row_0 = min(row0 + mine, params.m - 1u) * k4;
        let row_1 = min(row0 + GROUP_ROWS + mine, params.m - 1u) * k4;
        let row_2 = min(row0 + 2u * GROUP_ROWS + mine, params.m - 1u) * k4;
        let row_3 = min(row0 + 3u * GROUP_ROWS + mine, params.m - 1u) * k4;
        for (var kq = 0u; kq < k4; kq++) {
            let base = kq * 4u * n4 + col;
            let b0 = vec4<f32>(b[base]);
            let b1 = vec4<f32>(b[base + n4]);
            let b2 = vec4<f32>(b[base + 2u * n4]);
            let b3 = vec4<f32>(b[base + 3u * n4]);
            add_group(&acc, 0u, group, vec4<f32>(a[row_0 + kq]), b0, b1, b2, b3);
            if ROWS > GROUP_ROWS {
                add_group(&acc, GROUP_ROWS, GROUP_ROWS, vec4<f32>(a[row_1 + kq]), b0, b1, b2, b3);
            }
            if ROWS > 2u * GROUP_ROWS {
                add_group(&acc, 2u * GROUP_ROWS, GROUP_ROWS, vec4<f32>(a[row_2 + kq]), b0, b1, b2, b3);
                add_group(&acc, 3u * GROUP_ROWS, GROUP_ROWS, vec4<f32>(a[row_3 + kq]), b0, b1, b2, b3);
            }
        }
        return acc;
    }
    // A subgroup narrower than the tile: every invocation reads its own rows.
    return block_each(row0, c4);
}
