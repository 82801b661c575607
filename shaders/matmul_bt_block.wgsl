// The product of matmul_bt_tiled.wgsl (joined after this file) with each invocation
// reading the ROWS rows of A it multiplies itself: `bt_block_each`. The kernel calls
// `bt_block`, which matmul_bt_block_plain.wgsl defines as this and
// matmul_bt_block_shared.wgsl as the form that shares those reads across a subgroup.

// The ROWS x 4 block of a x b^T whose first row is row0 and whose first column is
// col0 (rows past m and columns past n read the last row / column and are not stored).
fn bt_block_each(row0: u32, col0: u32) -> array<vec4<f32>, MAX_ROWS> {
    let k4 = params.k / 4u;
    var rows: array<u32, MAX_ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        rows[r] = min(row0 + r, params.m - 1u) * k4;
    }
    let b0r = min(col0, params.n - 1u) * k4;
    let b1r = min(col0 + 1u, params.n - 1u) * k4;
    let b2r = min(col0 + 2u, params.n - 1u) * k4;
    let b3r = min(col0 + 3u, params.n - 1u) * k4;
    var acc: array<vec4<f32>, MAX_ROWS>;
    for (var kq = 0u; kq < k4; kq++) {
        let b0 = vec4<f32>(b[b0r + kq]);
        let b1 = vec4<f32>(b[b1r + kq]);
        let b2 = vec4<f32>(b[b2r + kq]);
        let b3 = vec4<f32>(b[b3r + kq]);
        for (var r = 0u; r < ROWS; r++) {
            let av = vec4<f32>(a[rows[r] + kq]);
            acc[r] = acc[r] + vec4(dot(av, b0), dot(av, b1), dot(av, b2), dot(av, b3));
        }
    }
    return acc;
}
