// The product of the tiled matmul kernels (matmul_tiled.wgsl, joined after this file),
// with the reads of A shared across a subgroup (needs the device's subgroup feature,
// wgpu::Features::SUBGROUP): the ROWS rows a workgroup multiplies are the same for all
// its invocations, so at each step of k invocation s of a subgroup of S >= ROWS reads
// row s of them (one vec4) and every invocation takes each row from the one that read
// it with subgroupShuffle (a narrower subgroup reads as matmul_block.wgsl does). Where every storage read
// costs a load per invocation (llvmpipe), that is ROWS times fewer reads of A. The
// invocation's index in its subgroup and the subgroup's size come from subgroup sums
// (subgroupExclusiveAdd / subgroupAdd of 1), so the entry points need no subgroup
// builtins. Called in uniform control flow: every invocation of the workgroup calls it
// before any returns. Same sums in the same order as matmul_block.wgsl.

// The ROWS x 4 block of a x b whose first row is row0 and whose vec4 column is c4
// (rows past m and columns past n read the last row / column and are not stored).
fn block(row0: u32, c4: u32) -> array<vec4<f32>, MAX_ROWS> {
    let k4 = params.k / 4u;
    let n4 = params.n / 4u;
    let col = min(c4, n4 - 1u);
    let lane = subgroupExclusiveAdd(1u); // this invocation's index in its subgroup
    let width = subgroupAdd(1u); // invocations of the subgroup
    var acc: array<vec4<f32>, MAX_ROWS>;
    if width >= ROWS {
        // One read per invocation and step, shuffled from lane r: the common case
        // (llvmpipe's 8-wide subgroups for 8 rows), kept free of arrays indexed at run
        // time, which a CPU adapter turns into a load per invocation again.
        let my_row = min(row0 + min(lane, ROWS - 1u), params.m - 1u) * k4;
        for (var kq = 0u; kq < k4; kq++) {
            let base = kq * 4u * n4 + col;
            let b0 = vec4<f32>(b[base]);
            let b1 = vec4<f32>(b[base + n4]);
            let b2 = vec4<f32>(b[base + 2u * n4]);
            let b3 = vec4<f32>(b[base + 3u * n4]);
            let read = vec4<f32>(a[my_row + kq]);
            for (var r = 0u; r < ROWS; r++) {
                let av = subgroupShuffle(read, r);
                acc[r] = fma(vec4(av.x), b0, fma(vec4(av.y), b1, fma(vec4(av.z), b2, fma(vec4(av.w), b3, acc[r]))));
            }
        }
        return acc;
    }
    // A subgroup narrower than the tile: every invocation reads its own rows.
    return block_each(row0, c4);
}
