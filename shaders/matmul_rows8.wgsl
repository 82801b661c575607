// acc_row for the tiled matmuls whose accumulators hold 8 rows (MAX_ROWS = 8: the
// plain tiles and the staged 64 x 64 tile; matmul_shared_groups.wgsl has the 32-row
// form), joined after the file that defines MAX_ROWS.
//
// Row r of an invocation's accumulators (the block of a tiled matmul, MAX_ROWS of
// them), read with a constant index whatever r is. An epilogue that indexed the array
// at run time (`acc[r]` in its loop over the rows) made llvmpipe keep every
// accumulator in memory for the whole product, and each row of a tall tile cost a
// load and a store of it a step of k: the shared tiles of 16 and 32 rows ran 1.5-2x
// slower at k = 256 and up to 3x at k = 64 (docs/tune.md, "Accumulators read by a
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
        default: {
            return (*acc)[7];
        }
    }
}
