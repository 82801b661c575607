// What the shared-read products of the tiled matmuls share (matmul_block_shared.wgsl,
// matmul_bt_block_shared.wgsl, matmul_norm_block_shared.wgsl, each joined after this
// file): the accumulators' size and the groups of rows one subgroup read covers, the
// epilogues' read of one row (acc_row), and one step of k for a group of `matmul`'s or
// the norm-fused matmul's rows.

const MAX_ROWS: u32 = 32u; // the tallest shared tile (rows32sg)
const GROUP_ROWS: u32 = 8u; // rows one subgroup read shares

// Row r of an invocation's accumulators (the block of a tiled matmul, MAX_ROWS of
// them), read with a constant index whatever r is. An epilogue that indexed the array
// at run time (`acc[r]` in its loop over the rows) made the tall tiles pay a cost per
// row whatever k was, as if llvmpipe kept the accumulators in memory for the whole
// product: the shared tiles of 16 and 32 rows ran 1.5-2x slower at k = 256 and up to
// 3x at k = 64 (docs/tune.md, "Accumulators read by a
// constant index").
fn acc_row(acc: ptr<function, array<vec4<f32>, MAX_ROWS>>, r: u32) -> vec4<f32> {
    switch r {
        case 0u: {
            return (*acc)[0];
        }
        case 1u: {
            return (*acc)[1];
        }
        case 2u: {
            return (*acc)[2];
        }
        case 3u: {
            return (*acc)[3];
        }
        case 4u: {
            return (*acc)[4];
        }
        case 5u: {
            return (*acc)[5];
        }
        case 6u: {
            return (*acc)[6];
        }
        case 7u: {
            return (*acc)[7];
        }
        case 8u: {
            return (*acc)[8];
        }
        case 9u: {
            return (*acc)[9];
        }
        case 10u: {
            return (*acc)[10];
        }
        case 11u: {
            return (*acc)[11];
        }
        case 12u: {
            return (*acc)[12];
        }
        case 13u: {
            return (*acc)[13];
        }
        case 14u: {
            return (*acc)[14];
        }
        case 15u: {
            return (*acc)[15];
        }
        case 16u: {
            return (*acc)[16];
        }
        case 17u: {
            return (*acc)[17];
        }
        case 18u: {
            return (*acc)[18];
        }
        case 19u: {
            return (*acc)[19];
        }
        case 20u: {
            return (*acc)[20];
        }
        case 21u: {
            return (*acc)[21];
        }
        case 22u: {
            return (*acc)[22];
        }
        case 23u: {
            return (*acc)[23];
        }
        case 24u: {
            return (*acc)[24];
        }
        case 25u: {
            return (*acc)[25];
        }
        case 26u: {
            return (*acc)[26];
        }
        case 27u: {
            return (*acc)[27];
        }
        case 28u: {
            return (*acc)[28];
        }
        case 29u: {
            return (*acc)[29];
        }
        case 30u: {
            return (*acc)[30];
        }
        default: {
            return (*acc)[31];
        }
    }
}

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
