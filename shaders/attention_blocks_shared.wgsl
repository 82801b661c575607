// How attention_blocks.wgsl (joined after this file) reads its key and value rows,
// shared across a subgroup (needs the device's subgroup feature, with subgroups of at
// least 8 invocations: the tuner offers the form only there): every invocation of the
// workgroup reads the same key and value rows, so in each group of 8 vec4s along the
// head invocation s of a subgroup reads vec4 s and the others take it with
// subgroupShuffle, a read per 8 vec4s where attention_blocks_plain.wgsl reads each.
// On llvmpipe every storage read is a load per lane, even of one address, so that is
// 8 times fewer loads of K and V. The same sums in the same order as the plain form.

var<private> kv_lane: u32;

// This invocation's lane in its subgroup: every invocation calls it before the keys.
fn kv_begin() {
    kv_lane = subgroupExclusiveAdd(1u);
}

// This invocation's vec4 of the group of 8 of the row at `row` from e0 (lanes past 7
// read vec4 7's; clamped to the head's last vec4).
fn kv_group(row: u32, e0: u32, hd4: u32) -> vec4<f32> {
    return vec4<f32>(qkv[row + min(e0 + min(kv_lane, 7u), hd4 - 1u)]);
}

// Vec4 e0 + j of the row at `row`: lane j's kv_group value (`mine`).
fn kv_take(mine: vec4<f32>, row: u32, e0: u32, j: u32) -> vec4<f32> {
    return subgroupShuffle(mine, j);
}
