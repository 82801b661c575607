// Rotary position embedding on [rows, dim] (dim even): row r is position r; the pair
// (x[r, 2j], x[r, 2j + 1]) is rotated by the angle r * base^(-2j / dim).
// `rope` writes `out`; `rope_inplace` rewrites `x` (bound once). One thread per pair.
// Elements are stored as `T` (f32 or f16), the rotation computed in f32.

struct Params {
    pairs: u32, // rows * dim / 2
    dim: u32,
    unused0: u32,
    unused1: u32,
    base: f32,  // 10000 unless the node says otherwise
    unused2: f32,
    unused3: f32,
    unused4: f32,
}

@group(0) @binding(1) var<storage, read_write> x: array<T>;
@group(0) @binding(2) var<storage, read_write> out: array<T>;

// (cos, sin) of the angle of pair p.
fn rotation(p: u32) -> vec2<f32> {
    let half = params.dim / 2u;
    let row = p / half;
    let j = p % half;
    let inv_freq = pow(params.base, -2.0 * f32(j) / f32(params.dim));
    let angle = f32(row) * inv_freq;
    return vec2<f32>(cos(angle), sin(angle));
}

// Index of the first element of pair p.
fn first_of(p: u32) -> u32 {
    let half = params.dim / 2u;
    return (p / half) * params.dim + 2u * (p % half);
}

@compute @workgroup_size(256)
fn rope(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = grid_element(wid, groups, lid);
    if p < params.pairs {
        let r = rotation(p);
        let i = first_of(p);
        let x0 = f32(x[i]);
        let x1 = f32(x[i + 1u]);
        out[i] = T(x0 * r.x - x1 * r.y);
        out[i + 1u] = T(x0 * r.y + x1 * r.x);
    }
}

@compute @workgroup_size(256)
fn rope_inplace(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = grid_element(wid, groups, lid);
    if p < params.pairs {
        let r = rotation(p);
        let i = first_of(p);
        let x0 = f32(x[i]);
        let x1 = f32(x[i + 1u]);
        x[i] = T(x0 * r.x - x1 * r.y);
        x[i + 1u] = T(x0 * r.y + x1 * r.x);
    }
}
