// The product of the tiled matmul kernels (matmul_tiled.wgsl, joined after this file)
// for GPUs: a workgroup of 256 invocations (LANES = 256, ROWS = 4) computes a 64 x 64
// block of the output, staging 64 rows x 16 of A and 16 x 64 of B in workgroup memory
// at each step of 16 along k, so every element read from storage feeds 64
// multiply-adds (the register tiles of matmul_block.wgsl read each row of B once per
// ROWS rows, and leave the rest to the caches). Invocation t owns rows 4 * (t / 16) ..
// + 4 of the block and its vec4 column t % 16 (a 4 x 4 tile of the output).
// Each output element sums over k in the same order as matmul_block.wgsl (per group of
// four: k + 3 first, then k + 2, k + 1, k), so the products match the other tiles'.
// Rows past m and columns past n read the last row / column and are not stored; steps
// of k past its end (k a multiple of 4, not of 16) read zeros.

const MAX_ROWS: u32 = 8u; // the tiled kernels' accumulators (this tile fills 4)
const TILE: u32 = 64u; // output rows and columns per workgroup
const TILE4: u32 = 16u; // vec4 columns per workgroup (and invocations along a row)
const STEP: u32 = 16u; // k per staged step

// A's block at this step, transposed: a_tile[kk * 16 + i] holds rows 4i .. 4i + 3 of the
// block at k offset kk, so an invocation's four rows are one vec4.
var<workgroup> a_tile: array<vec4<f32>, 256>;
// B's block at this step: b_tile[kk * 16 + c] is vec4 column c at k offset kk.
var<workgroup> b_tile: array<vec4<f32>, 256>;

// The first row of this invocation's 4 x 4 tile (matmul_tiled.wgsl's entries call it).
fn block_row0(wid: vec3<u32>, lid: vec3<u32>) -> u32 {
    return wid.y * TILE + (lid.x / TILE4) * 4u;
}

// This invocation's vec4 column.
fn block_c4(wid: vec3<u32>, lid: vec3<u32>) -> u32 {
    return wid.x * TILE4 + lid.x % TILE4;
}

// The ROWS (4) x 4 tile of a x b whose first row is row0 and whose vec4 column is c4.
// Called in uniform control flow: it holds barriers, and every invocation of the
// workgroup stages its share of each step.
fn block(row0: u32, c4: u32) -> array<vec4<f32>, MAX_ROWS> {
    let k4 = params.k / 4u;
    let n4 = params.n / 4u;
    let ty = (row0 % TILE) / 4u;
    let tx = c4 % TILE4;
    let t = ty * TILE4 + tx;
    let top = row0 - ty * 4u; // the block's first row
    let left4 = c4 - tx; // the block's first vec4 column
    // What invocation t stages: one vec4 of A (row t / 4 of the block, the k quad
    // t % 4 of the step) and one of B (k offset t / 16, vec4 column t % 16).
    let a_row = min(top + t / 4u, params.m - 1u) * k4;
    let a_quad = t % 4u;
    let b_k = t / TILE4;
    let b_col = min(left4 + t % TILE4, n4 - 1u);
    var acc: array<vec4<f32>, MAX_ROWS>;
    for (var k0 = 0u; k0 < k4; k0 += STEP / 4u) {
        workgroupBarrier();
        let kq = k0 + a_quad;
        var av = vec4<f32>(0.0);
        if kq < k4 {
            av = vec4<f32>(a[a_row + kq]);
        }
        // Row t / 4 of the block sits in slot (t / 4) / 4, lane (t / 4) % 4.
        let slot = (t / 4u) / 4u;
        let lane = (t / 4u) % 4u;
        a_tile[(a_quad * 4u + 0u) * TILE4 + slot][lane] = av.x;
        a_tile[(a_quad * 4u + 1u) * TILE4 + slot][lane] = av.y;
        a_tile[(a_quad * 4u + 2u) * TILE4 + slot][lane] = av.z;
        a_tile[(a_quad * 4u + 3u) * TILE4 + slot][lane] = av.w;
        let kb = k0 * 4u + b_k;
        var bv = vec4<f32>(0.0);
        if kb < params.k {
            bv = vec4<f32>(b[kb * n4 + b_col]);
        }
        b_tile[b_k * TILE4 + t % TILE4] = bv;
        workgroupBarrier();
        for (var q = 0u; q < 4u; q++) {
            let kk = q * 4u;
            let a0 = a_tile[kk * TILE4 + ty];
            let a1 = a_tile[(kk + 1u) * TILE4 + ty];
            let a2 = a_tile[(kk + 2u) * TILE4 + ty];
            let a3 = a_tile[(kk + 3u) * TILE4 + ty];
            let b0 = b_tile[kk * TILE4 + tx];
            let b1 = b_tile[(kk + 1u) * TILE4 + tx];
            let b2 = b_tile[(kk + 2u) * TILE4 + tx];
            let b3 = b_tile[(kk + 3u) * TILE4 + tx];
            for (var r = 0u; r < 4u; r++) {
                acc[r] = fma(vec4(a0[r]), b0, fma(vec4(a1[r]), b1, fma(vec4(a2[r]), b2, fma(vec4(a3[r]), b3, acc[r]))));
            }
        }
    }
    return acc;
}
