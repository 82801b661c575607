// fill: out[i] = params.value + i for i < params.len.
// The smallest kernel that proves a planned range can be bound, written and read back.

struct Params {
    value: u32,
    len: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> params: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < params.len {
        out[i] = params.value + i;
    }
}
