// Matrix products tiled in workgroup memory (16 x 16 tiles, one output element per
// thread):
//   matmul:    out[m, n] = a[m, k] x b[k, n]
//   matmul_bt: out[m, n] = a[m, k] x b[n, k]^T
// Edges that are not multiples of 16 load zeros into the tiles.

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

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const TILE: u32 = 16u;

var<workgroup> tile_a: array<array<f32, 16>, 16>;
var<workgroup> tile_b: array<array<f32, 16>, 16>;

// Loads tile `t` of A: thread (ty, tx) loads a[row, t*16 + tx].
fn load_a(row: u32, t: u32, lid: vec3<u32>) {
    let ka = t * TILE + lid.x;
    var v = 0.0;
    if row < params.m && ka < params.k {
        v = a[row * params.k + ka];
    }
    tile_a[lid.y][lid.x] = v;
}

// tile_a[ty][i] * tile_b[i][tx] summed over the tile.
fn tile_dot(lid: vec3<u32>) -> f32 {
    var acc = 0.0;
    for (var i = 0u; i < TILE; i = i + 1u) {
        acc = acc + tile_a[lid.y][i] * tile_b[i][lid.x];
    }
    return acc;
}

fn store(row: u32, col: u32, acc: f32) {
    if row < params.m && col < params.n {
        out[row * params.n + col] = acc;
    }
}

@compute @workgroup_size(16, 16)
fn matmul(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y * TILE + lid.y;
    let col = wid.x * TILE + lid.x;
    let tiles = (params.k + TILE - 1u) / TILE;
    var acc = 0.0;
    for (var t = 0u; t < tiles; t = t + 1u) {
        load_a(row, t, lid);
        // thread (ty, tx) loads b[t*16 + ty, col]
        let kb = t * TILE + lid.y;
        var v = 0.0;
        if kb < params.k && col < params.n {
            v = b[kb * params.n + col];
        }
        tile_b[lid.y][lid.x] = v;
        workgroupBarrier();
        acc = acc + tile_dot(lid);
        workgroupBarrier();
    }
    store(row, col, acc);
}

@compute @workgroup_size(16, 16)
fn matmul_bt(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y * TILE + lid.y;
    let col = wid.x * TILE + lid.x;
    let tiles = (params.k + TILE - 1u) / TILE;
    var acc = 0.0;
    for (var t = 0u; t < tiles; t = t + 1u) {
        load_a(row, t, lid);
        // thread (ty, tx) loads b[wid.x*16 + ty, t*16 + tx] (contiguous along k) and
        // stores it transposed, so tile_b[i][j] = b[col j, k i].
        let bn = wid.x * TILE + lid.y;
        let kb = t * TILE + lid.x;
        var v = 0.0;
        if bn < params.n && kb < params.k {
            v = b[bn * params.k + kb];
        }
        tile_b[lid.x][lid.y] = v;
        workgroupBarrier();
        acc = acc + tile_dot(lid);
        workgroupBarrier();
    }
    store(row, col, acc);
}
