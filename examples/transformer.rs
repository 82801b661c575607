//! Library use with your own `wgpu::Device`: adopt it, run the built-in decoder on
//! planned memory, and read the report.
//!
//! ```sh
//! cargo run --release --example transformer
//! ```

use wgalloc::device::GpuContext;
use wgalloc::model::{ModelConfig, ModelSession, RunOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The caller's own instance, adapter and device, created the usual wgpu way.
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let Ok(adapter) = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    })) else {
        eprintln!("SKIPPED: no wgpu adapter");
        return Ok(());
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("my device"),
        // Ask for the adapter's real limits: wgpu's defaults cap storage bindings.
        required_limits: adapter.limits(),
        ..Default::default()
    }))?;

    // wgalloc works on that device; every limit check uses the limits requested above.
    let ctx = GpuContext::adopt(device, queue, adapter.get_info());
    let config = ModelConfig {
        layers: 2,
        width: 128,
        heads: 4,
        seq: 64,
        vocab: 512,
        seed: 7,
        dtype: Default::default(),
    };
    let mut session = ModelSession::new(&ctx, &config)?;
    println!(
        "{}: {} bytes of weights in {} chunk(s)",
        ctx.info.name,
        session.weight_bytes(),
        session.weight_plan().buffers[0].chunks.len()
    );
    // The longest sequence first: it reserves the activation memory; shorter ones reuse it.
    for seq in [64, 32] {
        let run = session.run(seq, RunOptions::default())?;
        println!(
            "seq {seq}: activations {} B (naive {} B, bound {} B), reused reservation: {}, \
             max |gpu - cpu| {:.2e}, proof: {}, passed: {}",
            run.activation_bytes,
            run.naive_bytes,
            run.lower_bounds.inplace_aware,
            run.reused_reservation,
            run.max_abs_error,
            run.proof,
            run.passed()
        );
    }
    Ok(())
}
