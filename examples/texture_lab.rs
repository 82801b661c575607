//! Scratch lab: where a tiled matmul's time goes on a CPU adapter. Times two kernels
//! of the same product, `from_buffer` (B a storage buffer) in FILE_B and `from_texture`
//! (B an `rgba32float` texture read with `textureLoad`) in FILE_T, each checked at four
//! outputs against the CPU:
//!
//! `texture_lab FILE_B FILE_T M K N [REPS]` (workgroups cover `LAB_ROWS` rows, default
//! 8, and `LAB_COLS` columns, default 64). The kernels of docs/tune.md's lab table are
//! in `examples/lab/`: `matmul_b_buffer.wgsl` (the `rows8sg` product),
//! `matmul_b_texture.wgsl` (the same, B from a texture), `matmul_b_strips.wgsl` (B in
//! strips of 64 columns, `LAB_STRIPS=1`) and `matmul_16x2_buffer.wgsl` (16 rows x 2
//! columns an invocation, `LAB_ROWS=16`).
use std::time::Instant;
use wgalloc::device::GpuContext;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let p = |i: usize| a[i].parse::<u32>().unwrap();
    let (m, k, n) = (p(3), p(4), p(5));
    let reps: u32 = a.get(6).map(|s| s.parse().unwrap()).unwrap_or(10);
    let ctx = GpuContext::from_env().unwrap();
    let dev = &ctx.device;
    let module_of = |file: &str| {
        let src = std::fs::read_to_string(file).unwrap();
        dev.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(src.into()),
        })
    };
    let modules = [module_of(&a[1]), module_of(&a[2])];
    let st =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let mk = |len: u64, usage| {
        dev.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: len * 4,
            usage,
            mapped_at_creation: false,
        })
    };
    let ab = mk(u64::from(m * k), st);
    let bb = mk(u64::from(k * n), st);
    let ob = mk(u64::from(m * n), st);
    let av: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7 % 13) as f32) * 0.1 - 0.6)
        .collect();
    let bv: Vec<f32> = (0..k * n)
        .map(|i| ((i * 5 % 11) as f32) * 0.1 - 0.5)
        .collect();
    ctx.queue.write_buffer(&ab, 0, bytemuck::cast_slice(&av));
    // `LAB_STRIPS=1`: B in strips of 64 columns for the buffer kernel, each strip's
    // rows contiguous: packed[(strip * k + row) * 64 + column % 64].
    if std::env::var_os("LAB_STRIPS").is_some() {
        let mut packed = vec![0f32; (k * n) as usize];
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
    let tex = dev.create_texture(&wgpu::TextureDescriptor {
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
            texture: &tex,
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
    let view = tex.create_view(&Default::default());
    let ub = dev.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 32,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let params: [u32; 8] = [m, k, n, 0, 0, 0, 0, 0];
    ctx.queue
        .write_buffer(&ub, 0, bytemuck::cast_slice(&params));
    for (module, entry) in modules.iter().zip(["from_buffer", "from_texture"]) {
        let pipeline = dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        });
        let layout = pipeline.get_bind_group_layout(0);
        let b_res = if entry == "from_buffer" {
            bb.as_entire_binding()
        } else {
            wgpu::BindingResource::TextureView(&view)
        };
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
                    resource: b_res,
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: ob.as_entire_binding(),
                },
            ],
        });
        let run = |count: u32| {
            let mut enc = dev.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &group, &[]);
                let env = |k: &str, d: u32| {
                    std::env::var(k)
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(d)
                };
                for _ in 0..count {
                    pass.dispatch_workgroups(
                        n / env("LAB_COLS", 64),
                        m.div_ceil(env("LAB_ROWS", 8)),
                        1,
                    );
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
        let rb = mk(
            u64::from(m * n),
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        let mut enc = dev.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&ob, 0, &rb, 0, u64::from(m * n) * 4);
        ctx.queue.submit([enc.finish()]);
        rb.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        dev.poll(wgpu::PollType::wait_indefinitely()).unwrap();
        let out: Vec<f32> =
            bytemuck::cast_slice(&rb.slice(..).get_mapped_range().unwrap()).to_vec();
        let mut err = 0f32;
        for &(i, j) in &[(0u32, 0u32), (m - 1, n - 1), (m / 2, n / 3), (m / 3, n - 1)] {
            let s: f32 = (0..k)
                .map(|kk| av[(i * k + kk) as usize] * bv[(kk * n + j) as usize])
                .sum();
            err = err.max((s - out[(i * n + j) as usize]).abs());
        }
        let flops = 2.0 * f64::from(m) * f64::from(k) * f64::from(n);
        println!(
            "{entry} {m}x{k}x{n}: {:.3} ms  {:.2} GFLOP/s  maxerr {err:.2e}",
            t * 1e3,
            flops / t / 1e9
        );
        ctx.queue
            .write_buffer(&ob, 0, &vec![0u8; (m * n * 4) as usize]);
    }
}
