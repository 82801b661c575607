// copy_words: the executor's staging copy, `dst[i] = src[i]` for i < params.len, as
// 32-bit words (bit for bit: f32 values and u32 token ids alike).
//
// When two inputs of one dispatch share bytes, the executor stages the later one into
// its workspace with this kernel, in the same compute pass, and binds the copy instead
// (WebGPU forbids two overlapping writable bindings in one dispatch).

struct Params {
    len: u32, // 32-bit words to copy
    unused0: u32,
    unused1: u32,
    unused2: u32,
    unused3: f32,
    unused4: f32,
    unused5: f32,
    unused6: f32,
}

@group(0) @binding(1) var<storage, read_write> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn copy_words(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = grid_element(wid, groups, lid);
    if i < params.len {
        dst[i] = src[i];
    }
}
