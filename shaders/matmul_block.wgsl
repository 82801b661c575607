// The product of the tiled matmul kernels (matmul_tiled.wgsl, joined after this file)
// with each invocation reading the ROWS rows of A it multiplies itself (the same
// addresses for the whole workgroup): `block_each`. The kernels call `block`, which
// matmul_block_plain.wgsl defines as this and matmul_block_shared.wgsl as the form that
// shares those reads across a subgroup (falling back to this one).

// The first row of this invocation's block: a workgroup covers ROWS rows
// (matmul_tiled.wgsl's entries call it).
fn block_row0(wid: vec3<u32>, lid: vec3<u32>) -> u32 {
    return wid.y * ROWS;
}

// This invocation's vec4 column: LANES invocations side by side.
fn block_c4(wid: vec3<u32>, lid: vec3<u32>) -> u32 {
    return wid.x * LANES + lid.x;
}

// The ROWS x 4 block of a x b whose first row is row0 and whose vec4 column is c4
// (rows past m and columns past n read the last row / column and are not stored).
fn block_each(row0: u32, c4: u32) -> array<vec4<f32>, MAX_ROWS> {
    let k4 = params.k / 4u;
    let n4 = params.n / 4u;
    let col = min(c4, n4 - 1u);
    var rows: array<u32, MAX_ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        rows[r] = min(row0 + r, params.m - 1u) * k4;
    }
    var acc: array<vec4<f32>, MAX_ROWS>;
    for (var kq = 0u; kq < k4; kq++) {
        let base = kq * 4u * n4 + col;
        let b0 = vec4<f32>(b[base]);
        let b1 = vec4<f32>(b[base + n4]);
        let b2 = vec4<f32>(b[base + 2u * n4]);
        let b3 = vec4<f32>(b[base + 3u * n4]);
        for (var r = 0u; r < ROWS; r++) {
            let av = vec4<f32>(a[rows[r] + kq]);
            acc[r] = fma(vec4(av.x), b0, fma(vec4(av.y), b1, fma(vec4(av.z), b2, fma(vec4(av.w), b3, acc[r]))));
        }
    }
    return acc;
}
