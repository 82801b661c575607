// Matrix products tiled in workgroup memory:
//   matmul:    out[m, n] = a[m, k] x b[k, n]
//   matmul_bt: out[m, n] = a[m, k] x b[n, k]^T
// A workgroup of 16 x 16 threads computes a 64 x 64 block of `out`, stepping through k
// 16 at a time: a 64 x 16 tile of A and a 16 x 64 tile of B are staged in workgroup
// memory, and thread (ty, tx) accumulates the 4 x 4 outputs at rows ty + 16r and
// columns tx + 16c of the block (register blocking: 16 multiply-adds per 8 tile reads).
// Edges that are not multiples of the tile load zeros and skip their stores.

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

@group(0) @binding(1) var<storage, read_write> a: array<T>;
@group(0) @binding(2) var<storage, read_write> b: array<T>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;

const BLOCK: u32 = 64u; // output rows and columns per workgroup
const KSTEP: u32 = 16u; // k per staged tile

var<workgroup> tile_a: array<array<f32, 16>, 64>; // [row in block][k in step]
var<workgroup> tile_b: array<array<f32, 64>, 16>; // [k in step][column in block]

// Thread (ty, tx) stages a[row0 + ty + 16r, k0 + tx] for r in 0..4.
fn load_a(row0: u32, k0: u32, lid: vec3<u32>) {
    let kk = k0 + lid.x;
    for (var r = 0u; r < 4u; r = r + 1u) {
        let row = row0 + lid.y + 16u * r;
        var v = 0.0;
        if row < params.m && kk < params.k {
            v = f32(a[row * params.k + kk]);
        }
        tile_a[lid.y + 16u * r][lid.x] = v;
    }
}

// The 4 x 4 partial products of one staged step, added to `acc` (row r in acc[r]).
fn accumulate(acc: ptr<function, array<vec4<f32>, 4>>, lid: vec3<u32>) {
    for (var i = 0u; i < KSTEP; i = i + 1u) {
        let bv = vec4<f32>(
            tile_b[i][lid.x],
            tile_b[i][lid.x + 16u],
            tile_b[i][lid.x + 32u],
            tile_b[i][lid.x + 48u],
        );
        (*acc)[0] = (*acc)[0] + tile_a[lid.y][i] * bv;
        (*acc)[1] = (*acc)[1] + tile_a[lid.y + 16u][i] * bv;
        (*acc)[2] = (*acc)[2] + tile_a[lid.y + 32u][i] * bv;
        (*acc)[3] = (*acc)[3] + tile_a[lid.y + 48u][i] * bv;
    }
}

fn store(row0: u32, col0: u32, acc: array<vec4<f32>, 4>, lid: vec3<u32>) {
    for (var r = 0u; r < 4u; r = r + 1u) {
        let row = row0 + lid.y + 16u * r;
        for (var c = 0u; c < 4u; c = c + 1u) {
            let col = col0 + lid.x + 16u * c;
            if row < params.m && col < params.n {
                out[row * params.n + col] = T(acc[r][c]);
            }
        }
    }
}

@compute @workgroup_size(16, 16)
fn matmul(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = wid.y * BLOCK;
    let col0 = wid.x * BLOCK;
    let steps = (params.k + KSTEP - 1u) / KSTEP;
    var acc = array<vec4<f32>, 4>();
    for (var t = 0u; t < steps; t = t + 1u) {
        let k0 = t * KSTEP;
        load_a(row0, k0, lid);
        // thread (ty, tx) stages b[k0 + ty, col0 + tx + 16c]
        let kk = k0 + lid.y;
        for (var c = 0u; c < 4u; c = c + 1u) {
            let col = col0 + lid.x + 16u * c;
            var v = 0.0;
            if kk < params.k && col < params.n {
                v = f32(b[kk * params.n + col]);
            }
            tile_b[lid.y][lid.x + 16u * c] = v;
        }
        workgroupBarrier();
        accumulate(&acc, lid);
        workgroupBarrier();
    }
    store(row0, col0, acc, lid);
}

@compute @workgroup_size(16, 16)
fn matmul_bt(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = wid.y * BLOCK;
    let col0 = wid.x * BLOCK;
    let steps = (params.k + KSTEP - 1u) / KSTEP;
    var acc = array<vec4<f32>, 4>();
    for (var t = 0u; t < steps; t = t + 1u) {
        let k0 = t * KSTEP;
        load_a(row0, k0, lid);
        // thread (ty, tx) stages b[col0 + ty + 16c, k0 + tx] (contiguous along k),
        // transposed into tile_b[k][column]
        let kk = k0 + lid.x;
        for (var c = 0u; c < 4u; c = c + 1u) {
            let col = col0 + lid.y + 16u * c;
            var v = 0.0;
            if col < params.n && kk < params.k {
                v = f32(b[col * params.k + kk]);
            }
            tile_b[lid.x][lid.y + 16u * c] = v;
        }
        workgroupBarrier();
        accumulate(&acc, lid);
        workgroupBarrier();
    }
    store(row0, col0, acc, lid);
}
