//! [`compute_pipeline`]: one compute pipeline of one entry point over one bind-group
//! layout, the way every kernel wgalloc compiles is built (built-in kernels, user ops,
//! the checksum kernels).

/// A compute pipeline for `entry` of `module`, laid out as `layout` (group 0), with
/// the pipeline-overridable `constants` given. Call it inside an error scope
/// ([`crate::device::scoped`]): wgpu reports a bad entry point there.
pub(crate) fn compute_pipeline(
    device: &wgpu::Device,
    module: &wgpu::ShaderModule,
    entry: &str,
    layout: &wgpu::BindGroupLayout,
    constants: &[(&str, f64)],
) -> wgpu::ComputePipeline {
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(entry),
        bind_group_layouts: &[Some(layout)],
        immediate_size: 0,
    });
    device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(entry),
        layout: Some(&pipeline_layout),
        module,
        entry_point: Some(entry),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants,
            ..Default::default()
        },
        cache: None,
    })
}
