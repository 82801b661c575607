//! Scratch lab: times one WGSL matmul-like kernel read from a file at run time.
//! `kernel_lab FILE ENTRY M K N BM BN [REPS]`: grid = (ceil(N/BN), ceil(M/BM)).
use std::time::Instant;
use wgalloc::device::GpuContext;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let file = &a[1];
    let entry = &a[2];
    let p = |i: usize| a[i].parse::<u32>().unwrap();
    let (m, k, n, bm, bn) = (p(3), p(4), p(5), p(6), p(7));
    let reps: u32 = a.get(8).map(|s| s.parse().unwrap()).unwrap_or(20);
    let ctx = GpuContext::from_env().unwrap();
    let prelude = include_str!("../shaders/prelude.wgsl");
    let src = format!("{prelude}{}", std::fs::read_to_string(file).unwrap());
    let dev = &ctx.device;
    let module = dev.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(src.into()),
    });
    let pipeline = dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some(entry),
        compilation_options: Default::default(),
        cache: None,
    });
    let mk = |len: u64, usage| {
        dev.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: len * 4,
            usage,
            mapped_at_creation: false,
        })
    };
    let st =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let ab = mk(u64::from(m) * u64::from(k), st);
    let bb = mk(u64::from(k) * u64::from(n), st);
    let ob = mk(u64::from(m) * u64::from(n), st);
    let av: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7 % 13) as f32) * 0.1 - 0.6)
        .collect();
    let bv: Vec<f32> = (0..k * n)
        .map(|i| ((i * 5 % 11) as f32) * 0.1 - 0.5)
        .collect();
    ctx.queue.write_buffer(&ab, 0, bytemuck::cast_slice(&av));
    ctx.queue.write_buffer(&bb, 0, bytemuck::cast_slice(&bv));
    let ub = mk(
        8,
        wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
    );
    let params: [u32; 8] = [m, k, n, 0, 0, 0, 0, 0];
    ctx.queue
        .write_buffer(&ub, 0, bytemuck::cast_slice(&params));
    let layout = pipeline.get_bind_group_layout(0);
    let group = dev.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &layout,
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: ub.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: ab.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 2,
                resource: bb.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 3,
                resource: ob.as_entire_binding(),
            },
        ],
    });
    let grid = (n.div_ceil(bn), m.div_ceil(bm));
    let run = |count: u32| {
        let mut enc = dev.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &group, &[]);
            for _ in 0..count {
                pass.dispatch_workgroups(grid.0, grid.1, 1);
            }
        }
        let t = Instant::now();
        ctx.queue.submit([enc.finish()]);
        dev.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        t.elapsed()
    };
    run(1);
    let mut times: Vec<f64> = (0..5)
        .map(|_| run(reps).as_secs_f64() / f64::from(reps))
        .collect();
    times.sort_by(f64::total_cmp);
    let t = times[2];
    // check a few outputs against the CPU
    let rb = mk(
        u64::from(m) * u64::from(n),
        wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
    );
    let mut enc = dev.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(&ob, 0, &rb, 0, u64::from(m * n) * 4);
    ctx.queue.submit([enc.finish()]);
    rb.slice(..).map_async(wgpu::MapMode::Read, |_| {});
    dev.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let out: Vec<f32> = bytemuck::cast_slice(&rb.slice(..).get_mapped_range().unwrap()).to_vec();
    let bt = entry.contains("bt");
    let mut err = 0f32;
    for &(i, j) in &[(0u32, 0u32), (m - 1, n - 1), (m / 2, n / 3), (m / 3, n - 1)] {
        let mut s = 0f32;
        for kk in 0..k {
            let b = if bt {
                bv[(j * k + kk) as usize]
            } else {
                bv[(kk * n + j) as usize]
            };
            s += av[(i * k + kk) as usize] * b;
        }
        err = err.max((s - out[(i * n + j) as usize]).abs());
    }
    let flops = 2.0 * f64::from(m) * f64::from(k) * f64::from(n);
    println!(
        "{file}:{entry} {m}x{k}x{n}: {:.3} ms  {:.2} GFLOP/s  maxerr {err:.2e}",
        t * 1e3,
        flops / t / 1e9
    );
}
