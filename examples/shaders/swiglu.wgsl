// SwiGLU, `out = silu(gate) * up`: out of place (`swiglu`) and in place over `gate`
// (`swiglu_inplace`). A WGSL module of its own: it declares its parameter block and
// its storage buffers; wgalloc binds them by reflection. `Params` has the layout of
// `wgalloc::exec::KernelParams` (4 x u32, 4 x f32), which wgalloc fills by default:
// `len` is the output's element count.
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

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> gate: array<f32>;
@group(0) @binding(2) var<storage, read_write> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

fn swiglu_of(g: f32, u: f32) -> f32 {
    return g / (1.0 + exp(-g)) * u;
}

@compute @workgroup_size(256)
fn swiglu(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < params.len {
        out[i] = swiglu_of(gate[i], up[i]);
    }
}

@compute @workgroup_size(256)
fn swiglu_inplace(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < params.len {
        gate[i] = swiglu_of(gate[i], up[i]);
    }
}
