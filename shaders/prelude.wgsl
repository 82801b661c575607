// The prelude: joined in front of every executor kernel before it is compiled or
// validated (WGSL has no include; `exec::Shader::source` does the joining). It declares
// what every kernel shares, so no kernel restates it:
// * the per-dispatch parameter block at binding 0 of group 0. Each kernel names its
//   slots in its own `struct Params`: four u32 then four f32, 32 bytes, the layout of
//   `exec::KernelParams` (`tests/shaders_validate.rs` checks every kernel against it);
// * the index of an element over a 2-D grid of 256-wide workgroups (more than 65535
//   groups along x spill into y).

@group(0) @binding(0) var<uniform> params: Params;

fn grid_element(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * groups.x + wid.x) * 256u + lid;
}

