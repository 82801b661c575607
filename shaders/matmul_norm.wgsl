// A layer norm fused into the prologue of the register-tiled matmul with a bias:
//   matmul_norm_bias: out[m, n] = epilogue(layer_norm(x)[m, k] x w[k, n] + bias[n])
// layer_norm(x) = (x - mean) / sqrt(var + eps) * gain + beta over each row of x (two-pass
// variance, as norm.wgsl), never stored: the normalised row is formed as the product
// reads it. k and n are multiples of 4. One GPT-2 step runs its QKV projection and the
// MLP's up projection (epilogue GELU, the tanh form) this way: no layer-norm dispatch
// and no normalised activation in memory.
// Tiling as matmul_tiled.wgsl: each invocation owns ROWS rows and 4 adjacent columns of
// `out`; a workgroup of LANES invocations covers ROWS rows and 4 * LANES columns. The
// workgroup first computes the mean and inverse deviation of its ROWS rows together
// (each lane sums a stride of the row, then one lane per row adds the partial sums).
// Tensors are stored as T (storage_f32.wgsl / storage_f16.wgsl); the statistics, the
// normalised row and the accumulators are f32. The product is `norm_block`, joined in
// front of this file from matmul_norm_block.wgsl (each invocation reads and normalises
// its rows itself) or matmul_norm_block_shared.wgsl (a subgroup shares that work),
// with `acc_row` (a row of the block: matmul_tiled.wgsl says where it comes from).
// Params: m, k, n, epilogue (0 none, 1 GELU); eps.

struct Params {
    m: u32,
    k: u32,
    n: u32,
    epilogue: u32,
    eps: f32,
    unused1: f32,
    unused2: f32,
    unused3: f32,
}

@group(0) @binding(1) var<storage, read_write> x: array<vec4<T>>;
@group(0) @binding(2) var<storage, read_write> w: array<vec4<T>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<T>>;
@group(0) @binding(4) var<storage, read_write> bias: array<vec4<T>>;
@group(0) @binding(5) var<storage, read_write> gain: array<vec4<T>>;
@group(0) @binding(6) var<storage, read_write> beta: array<vec4<T>>;

override ROWS: u32 = 8u; // rows of `out` per invocation, at most MAX_ROWS (the block file's)
override LANES: u32 = 16u; // invocations per workgroup, ROWS * LANES at most 512

// Per (row, lane) partial sums, then per row [mean, inverse deviation].
var<workgroup> partial: array<f32, 512>; // ROWS * LANES (at most 512: 8 x 64, 32 x 16)
var<workgroup> stats: array<vec2<f32>, MAX_ROWS>;

// GELU, tanh approximation (as unary.wgsl).
fn gelu(v: vec4<f32>) -> vec4<f32> {
    let c = 0.7978845608028654; // sqrt(2 / pi)
    let inner = clamp(c * (v + 0.044715 * v * v * v), vec4(-15.0), vec4(15.0));
    return 0.5 * v * (1.0 + tanh(inner));
}

// The first vec4 of row r of the block starting at row0 (rows past m read row m - 1).
fn row_base(row0: u32, r: u32) -> u32 {
    return min(row0 + r, params.m - 1u) * (params.k / 4u);
}

// Fills `stats` for rows row0..row0 + ROWS. Every invocation of the workgroup calls it
// (it holds barriers).
fn row_stats(row0: u32, lane: u32) {
    let k4 = params.k / 4u;
    let cols = f32(params.k);
    for (var r = 0u; r < ROWS; r++) {
        let base = row_base(row0, r);
        var s = 0.0;
        for (var q = lane; q < k4; q += LANES) {
            let v = vec4<f32>(x[base + q]);
            s = s + (v.x + v.y + v.z + v.w);
        }
        partial[r * LANES + lane] = s;
    }
    workgroupBarrier();
    // One lane per row adds its partial sums (a tile taller than its workgroup is
    // wide takes a lane for several rows).
    for (var r = lane; r < ROWS; r += LANES) {
        var s = 0.0;
        for (var i = 0u; i < LANES; i++) {
            s = s + partial[r * LANES + i];
        }
        stats[r] = vec2(s / cols, 0.0);
    }
    workgroupBarrier();
    for (var r = 0u; r < ROWS; r++) {
        let base = row_base(row0, r);
        let mean = stats[r].x;
        var s = 0.0;
        for (var q = lane; q < k4; q += LANES) {
            let d = vec4<f32>(x[base + q]) - vec4(mean);
            s = s + dot(d, d);
        }
        partial[r * LANES + lane] = s;
    }
    workgroupBarrier();
    for (var r = lane; r < ROWS; r += LANES) {
        var s = 0.0;
        for (var i = 0u; i < LANES; i++) {
            s = s + partial[r * LANES + i];
        }
        stats[r] = vec2(stats[r].x, inverseSqrt(s / cols + params.eps));
    }
    workgroupBarrier();
}

@compute @workgroup_size(LANES)
fn matmul_norm_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = wid.y * ROWS;
    row_stats(row0, lid.x);
    let n4 = params.n / 4u;
    let c4 = wid.x * LANES + lid.x;
    var acc = norm_block(row0, min(c4, n4 - 1u));
    if c4 >= n4 {
        return;
    }
    let bias_c = vec4<f32>(bias[c4]);
    for (var r = 0u; r < ROWS; r++) {
        let row = row0 + r;
        if row < params.m {
            var v = acc_row(&acc, r) + bias_c;
            if params.epilogue == 1u {
                v = gelu(v);
            }
            out[row * n4 + c4] = vec4<T>(v);
        }
    }
}
