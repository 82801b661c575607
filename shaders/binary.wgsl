// Binary elementwise kernels: add and mul, with `b` broadcast by repetition
// (`b[i % len_b]`, so a bias row of length `cols` applies to every row).
//
// `binary` writes `out = a op b`; `binary_inplace` rewrites `a` (bound once).

struct Params {
    len: u32,   // elements of a (and of out)
    len_b: u32, // elements of b; divides len
    op: u32,    // 0 add, 1 mul
    unused0: u32,
    unused1: f32,
    unused2: f32,
    unused3: f32,
    unused4: f32,
}

@group(0) @binding(1) var<storage, read_write> a: array<T>;
@group(0) @binding(2) var<storage, read_write> b: array<T>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;

fn combine(u: f32, v: f32) -> f32 {
    if params.op == 1u {
        return u * v;
    }
    return u + v;
}

@compute @workgroup_size(256)
fn binary(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = grid_element(wid, groups, lid);
    if i < params.len {
        out[i] = T(combine(f32(a[i]), f32(b[i % params.len_b])));
    }
}

@compute @workgroup_size(256)
fn binary_inplace(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = grid_element(wid, groups, lid);
    if i < params.len {
        a[i] = T(combine(f32(a[i]), f32(b[i % params.len_b])));
    }
}
