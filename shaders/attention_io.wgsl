// What the fused causal attention kernels share (attention.wgsl, attention_tiled.wgsl,
// attention_blocks.wgsl, each joined after this file): the parameter block (seq, heads,
// hd, unused; scale) and the bindings, qkv [seq, 3d] in and out [seq, d].

struct Params {
    seq: u32,
    heads: u32,
    hd: u32,
    unused0: u32,
    scale: f32,
    unused1: f32,
    unused2: f32,
    unused3: f32,
}

@group(0) @binding(1) var<storage, read_write> qkv: array<vec4<T>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<T>>;
