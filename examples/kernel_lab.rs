//! Scratch lab: times one WGSL matmul-like kernel read from a file at run time.
//! `kernel_lab FILE ENTRY M K N BM BN [REPS]`: grid = (ceil(N/BN), ceil(M/BM)); FILE may
//! be several files joined with `+` (the prelude goes in front). Bindings: the
//! parameters (0), A (1), B (2), the output (3). `LAB_B` sets B's form:
//! * `buffer` (default): a storage buffer, row-major `[k, n]`;
//! * `strips`: a storage buffer in strips of 64 columns, each strip's rows contiguous:
//!   `packed[(column / 64 * k + row) * 64 + column % 64]`;
//! * `texture`: an `rgba32float` texture `n / 4` texels wide and `k` high.
//!
//! The kernels of docs/tune.md's lab table ("What still bounds the shared tile on
//! lavapipe") are in `examples/lab/` (entry points `from_buffer`, `from_texture`).
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
    let body: String = file
        .split('+')
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let src = format!("{prelude}{body}");
    let b_form = std::env::var("LAB_B").unwrap_or_else(|_| "buffer".into());
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
    if b_form == "strips" {
        let mut packed = vec![0f32; bv.len()];
        for row in 0..k {
            for col in 0..n {
                let at = ((col / 64) * k + row) * 64 + col % 64;
                packed[at as usize] = bv[(row * n + col) as usize];
            }
        }
        ctx.queue
            .write_buffer(&bb, 0, bytemuck::cast_slice(&packed));
    } else {
        ctx.queue.write_buffer(&bb, 0, bytemuck::cast_slice(&bv));
    }
    // The texture form's B (only made for it: a wide B exceeds a texture's width).
    let view = (b_form == "texture").then(|| {
        let texture = dev.create_texture(&wgpu::TextureDescriptor {
            label: None,
            size: wgpu::Extent3d {
                width: n / 4,
                height: k,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wgpu::TextureFormat::Rgba32Float,
            usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
            view_formats: &[],
        });
        ctx.queue.write_texture(
            wgpu::TexelCopyTextureInfo {
                texture: &texture,
                mip_level: 0,
                origin: wgpu::Origin3d::ZERO,
                aspect: wgpu::TextureAspect::All,
            },
            bytemuck::cast_slice(&bv),
            wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(n * 4),
                rows_per_image: None,
            },
            wgpu::Extent3d {
                width: n / 4,
                height: k,
                depth_or_array_layers: 1,
            },
        );
        texture.create_view(&Default::default())
    });
    let b_binding = match &view {
        Some(view) => wgpu::BindingResource::TextureView(view),
        None => bb.as_entire_binding(),
    };
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
                resource: b_binding,
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
