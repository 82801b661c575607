// `norm_block` of matmul_norm.wgsl as matmul_norm_block.wgsl computes it: every
// invocation reads its own rows.
// The shared-read file of the same family is the other definition.

const MAX_ROWS: u32 = 8u; // the tallest plain tile (rows8)

fn norm_block(row0: u32, col: u32) -> array<vec4<f32>, MAX_ROWS> {
    return norm_block_each(row0, col);
}
