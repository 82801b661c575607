// The adapter's own ceilings, for the forward benchmark's roofline (benches/forward.rs):
//   fma_peak:  each invocation runs `iters` rounds of 8 independent vec4 multiply-adds
//              (64 flops per round) and stores one value so nothing is optimised away;
//   copy_bw:   dst[i] = src[i] over vec4s (16 bytes read and 16 written per element).

struct Params {
    iters: u32,
    len: u32,
    unused0: u32,
    unused1: u32,
    seed: f32,
    unused2: f32,
    unused3: f32,
    unused4: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> src: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> dst: array<vec4<f32>>;

@compute @workgroup_size(64)
fn fma_peak(@builtin(global_invocation_id) gid: vec3<u32>) {
    let s = params.seed + f32(gid.x) * 1e-7 + src[0].x * f32(params.len);
    var a0 = vec4(s);
    var a1 = vec4(s + 1.0);
    var a2 = vec4(s + 2.0);
    var a3 = vec4(s + 3.0);
    var a4 = vec4(s + 4.0);
    var a5 = vec4(s + 5.0);
    var a6 = vec4(s + 6.0);
    var a7 = vec4(s + 7.0);
    let m = vec4(0.9999);
    let c = vec4(1e-4);
    for (var i = 0u; i < params.iters; i++) {
        a0 = fma(a0, m, c);
        a1 = fma(a1, m, c);
        a2 = fma(a2, m, c);
        a3 = fma(a3, m, c);
        a4 = fma(a4, m, c);
        a5 = fma(a5, m, c);
        a6 = fma(a6, m, c);
        a7 = fma(a7, m, c);
    }
    dst[gid.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

@compute @workgroup_size(64)
fn copy_bw(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.y * groups.x * 64u + gid.x;
    if i < params.len {
        dst[i] = src[i];
    }
}
