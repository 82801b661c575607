// How attention_blocks.wgsl (joined after this file) reads its key and value rows:
// each invocation reads every vec4 it uses itself. attention_blocks_shared.wgsl is the
// form that shares the reads across a subgroup.

// Called once by every invocation before the keys: nothing to set up.
fn kv_begin() {}

// This invocation's part of the group of 8 vec4s of a row from e0 (none here: each
// vec4 is read when taken).
fn kv_group(row: u32, e0: u32, hd4: u32) -> vec4<f32> {
    return vec4<f32>();
}

// Vec4 e0 + j of the row at `row` (`mine` is kv_group's value, unused here).
fn kv_take(mine: vec4<f32>, row: u32, e0: u32, j: u32) -> vec4<f32> {
    return vec4<f32>(qkv[row + e0 + j]);
}
