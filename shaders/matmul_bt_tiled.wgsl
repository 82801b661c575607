// Register-tiled product with a transposed B and vectorised loads:
//   matmul_bt_tiled: out[m, n] = a[m, k] x b[n, k]^T   (k a multiple of 4; any n)
// The blocking of matmul_tiled.wgsl: ROWS rows per invocation (A loads shared by the
// whole workgroup), LANES invocations per workgroup, no workgroup memory. The product
// is `bt_block`, joined in front of this file from matmul_bt_block.wgsl (each
// invocation reads its A rows itself) or matmul_bt_block_shared.wgsl (a subgroup
// shares those reads), with `acc_row` (a row of the block: matmul_tiled.wgsl says
// where it comes from). Params: m, k, n.

struct Params {
    m: u32,
    k: u32,
    n: u32,
    unused0: u32,
    unused1: f32,
    unused2: f32,
    unused3: f32,
    unused4: f32,
}

@group(0) @binding(1) var<storage, read_write> a: array<vec4<T>>;
@group(0) @binding(2) var<storage, read_write> b: array<vec4<T>>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;

override ROWS: u32 = 8u; // rows of `out` per invocation, at most MAX_ROWS (the block file's)
override LANES: u32 = 16u; // invocations per workgroup

// Each invocation owns ROWS rows and columns 4c..4c+3, reading those four rows of b
// as vec4s along k.
@compute @workgroup_size(LANES)
fn matmul_bt_tiled(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = wid.y * ROWS;
    let col0 = (wid.x * LANES + lid.x) * 4u;
    var acc = bt_block(row0, col0);
    // The four columns stored one by one (n need not be a multiple of 4), each by
    // name: no index into the accumulators that the compiler must keep at run time,
    // which a CPU adapter pays for by keeping them in memory.
    for (var r = 0u; r < ROWS; r++) {
        let row = row0 + r;
        if row < params.m {
            let v = acc_row(&acc, r);
            let at = row * params.n + col0;
            if col0 < params.n {
                out[at] = T(v.x);
            }
            if col0 + 1u < params.n {
                out[at + 1u] = T(v.y);
            }
            if col0 + 2u < params.n {
                out[at + 2u] = T(v.z);
            }
            if col0 + 3u < params.n {
                out[at + 3u] = T(v.w);
            }
        }
    }
}
