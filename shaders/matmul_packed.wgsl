// Matrix product over a pre-packed B (see src/prepack/layout.rs):
//   matmul_packed: out[m, n] = a[m, k] x B[k, n], B given packed as
//   packed[(((nb * k_steps + ks) * 16 + kr) * 16 + tx)] = vec4(B[ks*16 + kr, nb*64 + tx + 16j], j = 0..3)
// zero-padded to k_steps * 16 rows and a multiple of 64 columns.
// Same blocking as matmul.wgsl: a workgroup of 16 x 16 threads computes a 64 x 64 block
// of `out`, k stepping by 16, thread (ty, tx) accumulating rows ty + 16r and columns
// tx + 16c. The packed layout makes each k step of a column block 256 contiguous vec4s:
// every thread stages exactly one with no bounds check, and the four columns a thread
// multiplies for one k come out of workgroup memory as one vec4. Tensors are stored as
// `T` (f32, or f16 in the f16 form, the packed B too); the tiles and sums are f32.

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
@group(0) @binding(2) var<storage, read_write> packed: array<vec4<T>>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;

const BLOCK: u32 = 64u; // output rows and columns per workgroup
const KSTEP: u32 = 16u; // k per staged tile

var<workgroup> tile_a: array<array<f32, 16>, 64>; // [row in block][k in step]
var<workgroup> tile_b: array<array<vec4<f32>, 16>, 16>; // [k in step][thread column]

@compute @workgroup_size(16, 16)
fn matmul_packed(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = wid.y * BLOCK;
    let col0 = wid.x * BLOCK;
    let steps = (params.k + KSTEP - 1u) / KSTEP;
    // The first vec4 of this column block's panel; each step is 256 vec4s further.
    let panel = wid.x * steps * 256u + lid.y * 16u + lid.x;
    var acc = array<vec4<f32>, 4>();
    for (var t = 0u; t < steps; t = t + 1u) {
        let k0 = t * KSTEP;
        // thread (ty, tx) stages a[row0 + ty + 16r, k0 + tx] for r in 0..4
        let kk = k0 + lid.x;
        for (var r = 0u; r < 4u; r = r + 1u) {
            let row = row0 + lid.y + 16u * r;
            var v = 0.0;
            if row < params.m && kk < params.k {
                v = f32(a[row * params.k + kk]);
            }
            tile_a[lid.y + 16u * r][lid.x] = v;
        }
        // thread (ty, tx) stages the four columns tx + 16c of k row ty
        tile_b[lid.y][lid.x] = vec4<f32>(packed[panel + t * 256u]);
        workgroupBarrier();
        for (var i = 0u; i < KSTEP; i = i + 1u) {
            let bv = tile_b[i][lid.x];
            acc[0] = acc[0] + tile_a[lid.y][i] * bv;
            acc[1] = acc[1] + tile_a[lid.y + 16u][i] * bv;
            acc[2] = acc[2] + tile_a[lid.y + 32u][i] * bv;
            acc[3] = acc[3] + tile_a[lid.y + 48u][i] * bv;
        }
        workgroupBarrier();
    }
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
