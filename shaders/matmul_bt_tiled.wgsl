// Register-tiled product with a transposed B and vectorised loads:
//   matmul_bt_tiled: out[m, n] = a[m, k] x b[n, k]^T   (k a multiple of 4; any n)
// The blocking of matmul_tiled.wgsl: ROWS rows per invocation (A loads shared by the
// whole workgroup), LANES invocations per workgroup, no workgroup memory. The product
// is `bt_block`, joined in front of this file from matmul_bt_block.wgsl (each
// invocation reads its A rows itself) or matmul_bt_block_shared.wgsl (a subgroup
// shares those reads). Params: m, k, n.

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

override ROWS: u32 = 8u; // rows of `out` per invocation, at most MAX_ROWS
override LANES: u32 = 16u; // invocations per workgroup
const MAX_ROWS: u32 = 8u;

// Each invocation owns ROWS rows and columns 4c..4c+3, reading those four rows of b
// as vec4s along k.
@compute @workgroup_size(LANES)
fn matmul_bt_tiled(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = wid.y * ROWS;
    let col0 = (wid.x * LANES + lid.x) * 4u;
    let acc = bt_block(row0, col0);
    for (var r = 0u; r < ROWS; r++) {
        let row = row0 + r;
        if row < params.m {
            for (var j = 0u; j < 4u; j++) {
                if col0 + j < params.n {
                    out[row * params.n + col0 + j] = T(acc[r][j]);
                }
            }
        }
    }
}
