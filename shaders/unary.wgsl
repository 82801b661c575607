// Unary elementwise kernels: copy, scale, relu, gelu (tanh form), silu.
//
// `unary` reads `x` and writes `out`; `unary_inplace` rewrites `x` (the in-place
// variant binds its one range once). The op is chosen by `params.op`. Elements are
// indexed over a 2-D grid of 256-wide workgroups so that more than 65535 groups fit.

struct Params {
    len: u32,   // elements of x (and of out)
    op: u32,    // 0 copy, 1 scale, 2 relu, 3 gelu, 4 silu
    unused0: u32,
    unused1: u32,
    alpha: f32, // scale factor (op 1)
    unused2: f32,
    unused3: f32,
    unused4: f32,
}

@group(0) @binding(1) var<storage, read_write> x: array<T>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;

const SQRT_2_OVER_PI: f32 = 0.7978845608028654;

fn gelu_tanh(v: f32) -> f32 {
    // tanh saturates to +-1 in f32 beyond |u| = 10; clamping avoids inf/inf in
    // implementations that build tanh from exp.
    let u = clamp(SQRT_2_OVER_PI * (v + 0.044715 * v * v * v), -10.0, 10.0);
    return 0.5 * v * (1.0 + tanh(u));
}

fn apply(v: f32) -> f32 {
    switch params.op {
        case 1u: { return v * params.alpha; }
        case 2u: { return max(v, 0.0); }
        case 3u: { return gelu_tanh(v); }
        case 4u: { return v / (1.0 + exp(-v)); }
        default: { return v; }
    }
}

@compute @workgroup_size(256)
fn unary(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = grid_element(wid, groups, lid);
    if i < params.len {
        out[i] = T(apply(f32(x[i])));
    }
}

@compute @workgroup_size(256)
fn unary_inplace(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = grid_element(wid, groups, lid);
    if i < params.len {
        x[i] = T(apply(f32(x[i])));
    }
}
