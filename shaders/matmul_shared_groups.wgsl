// What the shared-read products of the tiled matmuls share (matmul_block_shared.wgsl,
// matmul_bt_block_shared.wgsl, matmul_norm_block_shared.wgsl, each joined after this
// file): the accumulators' size and the groups of rows one subgroup read covers, and
// one step of k for a group of `matmul`'s or the norm-fused matmul's rows.

const MAX_ROWS: u32 = 32u; // the tallest shared tile (rows32sg)
const GROUP_ROWS: u32 = 8u; // rows one subgroup read shares

// Adds one step of k to the accumulators of the `count` rows from `first`: `read` is
// this invocation's vec4 of row first + lane (as the product takes it), and b0..b3 its
// four rows of B.
fn add_group(
    acc: ptr<function, array<vec4<f32>, MAX_ROWS>>,
    first: u32,
    count: u32,
    read: vec4<f32>,
    b0: vec4<f32>,
    b1: vec4<f32>,
    b2: vec4<f32>,
    b3: vec4<f32>,
) {
    for (var r = 0u; r < count; r++) {
        let av = subgroupShuffle(read, r);
        (*acc)[first + r] = fma(vec4(av.x), b0, fma(vec4(av.y), b1, fma(vec4(av.z), b2, fma(vec4(av.w), b3, (*acc)[first + r]))));
    }
}
