// `block` of matmul_tiled.wgsl as matmul_block.wgsl computes it: every invocation
// reads its own rows.
// The shared-read file of the same family is the other definition.

const MAX_ROWS: u32 = 8u; // the tallest plain tile (rows8)

fn block(row0: u32, c4: u32) -> array<vec4<f32>, MAX_ROWS> {
    return block_each(row0, c4);
}
