// Register-tiled matrix products with vectorised loads and fused epilogues:
//   matmul_tiled:        out[m, n] = epilogue(a[m, k] x b[k, n])      (k, n multiples of 4)
//   matmul_tiled_acc:    out[m, n] += a[m, k] x b[k, n]               (the residual in place)
//   matmul_tiled_acc_to: out[m, n] = res[m, n] + a[m, k] x b[k, n]
//   matmul_tiled_bias:   out[m, n] = epilogue(a x b + bias[n])      (bias bound as `res`)
//   matmul_tiled_acc_bias: out[m, n] += a x b + bias[n]             (bias bound as `res`)
//   matmul_tiled_acc_to_bias: out[m, n] = res[m, n] + a x b + bias[n]
// Each invocation owns ROWS rows and 4 adjacent columns of `out` (one vec4); a workgroup
// of LANES invocations covers ROWS rows and 4 * LANES columns. Per step of 4 along k,
// an invocation loads one vec4 of A per row (the same address for the whole workgroup)
// and four vec4 rows of B, and does 16 * ROWS multiply-adds: the accumulators stay in
// registers and nothing is staged in workgroup memory, so no barrier is needed. ROWS
// and LANES are pipeline constants: the executor picks a tile per problem shape and
// adapter (exec::kernels::MatmulTile). The product itself is `block`, joined in front
// of this file from matmul_block.wgsl (each invocation reads its A rows itself) or
// matmul_block_shared.wgsl (the invocations of a subgroup share the A rows' reads), or
// matmul_block_tile64.wgsl (a 64 x 64 block per workgroup staged in workgroup memory,
// for GPUs); so are `block_row0` and `block_c4`, which place an invocation's block,
// and `acc_row`, which the epilogues read a row of the block with
// (matmul_shared_groups.wgsl: a constant index for the 32-row shared forms;
// matmul_rows8.wgsl for the 8-row tiles).
// matmul_bt_tiled.wgsl is the transposed-B form. Params: m, k, n, epilogue (0 none,
// 1 GELU).

struct Params {
    m: u32,
    k: u32,
    n: u32,
    epilogue: u32,
    unused1: f32,
    unused2: f32,
    unused3: f32,
    unused4: f32,
}

@group(0) @binding(1) var<storage, read_write> a: array<vec4<T>>;
@group(0) @binding(2) var<storage, read_write> b: array<vec4<T>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<T>>;
@group(0) @binding(4) var<storage, read_write> res: array<vec4<T>>;
@group(0) @binding(5) var<storage, read_write> bias5: array<vec4<T>>;

override ROWS: u32 = 8u; // rows of `out` per invocation, at most MAX_ROWS (the block file's)
override LANES: u32 = 16u; // invocations per workgroup

// GELU, tanh approximation (as unary.wgsl).
fn gelu(x: vec4<f32>) -> vec4<f32> {
    let c = 0.7978845608028654; // sqrt(2 / pi)
    let inner = clamp(c * (x + 0.044715 * x * x * x), vec4(-15.0), vec4(15.0));
    return 0.5 * x * (1.0 + tanh(inner));
}

@compute @workgroup_size(LANES)
fn matmul_tiled(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = block_row0(wid, lid);
    let c4 = block_c4(wid, lid);
    var acc = block(row0, c4);
    let n4 = params.n / 4u;
    if c4 >= n4 {
        return;
    }
    for (var r = 0u; r < ROWS; r++) {
        let row = row0 + r;
        if row < params.m {
            var v = acc_row(&acc, r);
            if params.epilogue == 1u {
                v = gelu(v);
            }
            out[row * n4 + c4] = vec4<T>(v);
        }
    }
}

@compute @workgroup_size(LANES)
fn matmul_tiled_acc(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = block_row0(wid, lid);
    let c4 = block_c4(wid, lid);
    var acc = block(row0, c4);
    let n4 = params.n / 4u;
    if c4 >= n4 {
        return;
    }
    for (var r = 0u; r < ROWS; r++) {
        let row = row0 + r;
        if row < params.m {
            let i = row * n4 + c4;
            out[i] = vec4<T>(vec4<f32>(out[i]) + acc_row(&acc, r));
        }
    }
}

@compute @workgroup_size(LANES)
fn matmul_tiled_acc_to(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = block_row0(wid, lid);
    let c4 = block_c4(wid, lid);
    var acc = block(row0, c4);
    let n4 = params.n / 4u;
    if c4 >= n4 {
        return;
    }
    for (var r = 0u; r < ROWS; r++) {
        let row = row0 + r;
        if row < params.m {
            let i = row * n4 + c4;
            out[i] = vec4<T>(vec4<f32>(res[i]) + acc_row(&acc, r));
        }
    }
}

@compute @workgroup_size(LANES)
fn matmul_tiled_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = block_row0(wid, lid);
    let c4 = block_c4(wid, lid);
    var acc = block(row0, c4);
    let n4 = params.n / 4u;
    if c4 >= n4 {
        return;
    }
    let bias = vec4<f32>(res[c4]);
    for (var r = 0u; r < ROWS; r++) {
        let row = row0 + r;
        if row < params.m {
            var v = acc_row(&acc, r) + bias;
            if params.epilogue == 1u {
                v = gelu(v);
            }
            out[row * n4 + c4] = vec4<T>(v);
        }
    }
}

@compute @workgroup_size(LANES)
fn matmul_tiled_acc_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = block_row0(wid, lid);
    let c4 = block_c4(wid, lid);
    var acc = block(row0, c4);
    let n4 = params.n / 4u;
    if c4 >= n4 {
        return;
    }
    let bias = vec4<f32>(res[c4]);
    for (var r = 0u; r < ROWS; r++) {
        let row = row0 + r;
        if row < params.m {
            let i = row * n4 + c4;
            out[i] = vec4<T>(vec4<f32>(out[i]) + (acc_row(&acc, r) + bias));
        }
    }
}

@compute @workgroup_size(LANES)
fn matmul_tiled_acc_to_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row0 = block_row0(wid, lid);
    let c4 = block_c4(wid, lid);
    var acc = block(row0, c4);
    let n4 = params.n / 4u;
    if c4 >= n4 {
        return;
    }
    let bias = vec4<f32>(bias5[c4]);
    for (var r = 0u; r < ROWS; r++) {
        let row = row0 + r;
        if row < params.m {
            let i = row * n4 + c4;
            out[i] = vec4<T>(vec4<f32>(res[i]) + (acc_row(&acc, r) + bias));
        }
    }
}
