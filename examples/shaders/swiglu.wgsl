// SwiGLU, `out = silu(gate) * up`: out of place (`swiglu`) and in place over `gate`
// (`swiglu_inplace`). wgalloc joins its prelude in front (`params` at binding 0 and
// `grid_element`); this file declares the `Params` layout the prelude binds.
struct Params {
    len: u32,
    unused0: u32,
    unused1: u32,
    unused2: u32,
    unused3: f32,
    unused4: f32,
    unused5: f32,
    unused6: f32,
}

@group(0) @binding(1) var<storage, read_write> gate: array<f32>;
@group(0) @binding(2) var<storage, read_write> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

fn swiglu_of(g: f32, u: f32) -> f32 {
    return g / (1.0 + exp(-g)) * u;
}

@compute @workgroup_size(256)
fn swiglu(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = grid_element(wid, groups, lid);
    if i < params.len {
        out[i] = swiglu_of(gate[i], up[i]);
    }
}

@compute @workgroup_size(256)
fn swiglu_inplace(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = grid_element(wid, groups, lid);
    if i < params.len {
        gate[i] = swiglu_of(gate[i], up[i]);
    }
}
