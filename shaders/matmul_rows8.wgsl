// acc_row for the tiled matmuls whose accumulators hold 8 rows (MAX_ROWS = 8: the
// plain tiles and the staged 64 x 64 tile), joined after the file that defines
// MAX_ROWS. The 32-row shared forms read a row by a constant index
// (matmul_shared_groups.wgsl); here the index stays the run-time one these epilogues
// always used. These are the tiles a GPU runs, where the switch was never measured;
// on llvmpipe a switch here showed no gain within the noise (docs/tune.md,
// "Accumulators read by a constant index").

fn acc_row(acc: ptr<function, array<vec4<f32>, MAX_ROWS>>, r: u32) -> vec4<f32> {
    return (*acc)[r];
}
