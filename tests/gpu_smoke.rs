//! The smallest end-to-end proof on a real adapter: a planned chunk is allocated, one
//! tensor's range is filled by the `fill` kernel, and readback shows the kernel's values
//! there and the neighbour's bytes untouched.

mod common;

use std::num::NonZeroU64;

use wgalloc::device::{
    allocate_plan, read_buffer_range, read_tensor, write_tensor, DeviceError, GpuContext,
    PlannedMemory, WgpuStorage, STORAGE_USAGE,
};
use wgalloc::graph::TensorId;
use wgalloc::plan::{BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement, Plan};
use wgalloc::storage::Region;

const LEN: u32 = 100;

fn two_tensor_plan(ctx: &GpuContext) -> Plan {
    let storage = ctx.buffer_types().unwrap().storage.desc;
    let align = storage.alignment();
    let size = storage.align_up(u64::from(LEN) * 4).unwrap();
    let second = Placement {
        buffer: BufferId(0),
        chunk: 0,
        offset: size,
        size,
    };
    Plan {
        planner: "hand".into(),
        placements: vec![
            Some(Placement {
                offset: 0,
                ..second
            }),
            Some(second),
        ],
        buffers: vec![BufferPlan {
            buffer_type: BufferTypeDesc::new("storage", align, storage.max_size).unwrap(),
            chunks: vec![ChunkPlan {
                size: 2 * size,
                oversized: false,
            }],
            same_as: None,
        }],
        inplace: vec![],
    }
}

fn run_fill(ctx: &GpuContext, target: &wgpu::Buffer, placement: &Placement, value: u32) {
    let module = ctx
        .device
        .create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("fill"),
            source: wgpu::ShaderSource::Wgsl(include_str!("shaders/fill.wgsl").into()),
        });
    let pipeline = ctx
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("fill"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
    let params = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("fill params"),
        size: 16,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let words = [value, LEN, 0, 0];
    ctx.queue
        .write_buffer(&params, 0, bytemuck::cast_slice(&words));
    let bind_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("fill"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: target,
                    offset: placement.offset,
                    size: NonZeroU64::new(u64::from(LEN) * 4),
                }),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: params.as_entire_binding(),
            },
        ],
    });
    let mut encoder = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(LEN.div_ceil(64), 1, 1);
    }
    ctx.queue.submit([encoder.finish()]);
}

#[test]
fn fill_kernel_writes_its_tensor_and_leaves_the_neighbour_alone() {
    let Some(ctx) = common::gpu() else { return };
    let plan = two_tensor_plan(&ctx);
    let memory = allocate_plan(&ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(&ctx)).unwrap();
    let first = plan.placement(TensorId(0)).unwrap();
    let second = plan.placement(TensorId(1)).unwrap();
    let sentinel = vec![0xAB_u8; (LEN * 4) as usize];
    write_tensor(&ctx, &memory, TensorId(0), &first, &sentinel).unwrap();

    let target = memory.region(second.buffer, second.chunk).unwrap();
    run_fill(&ctx, &target.buffer, &second, 7000);

    let bytes = read_tensor(&ctx, &memory, TensorId(1), &second, u64::from(LEN) * 4).unwrap();
    let got: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
    let expected: Vec<u32> = (0..LEN).map(|i| 7000 + i).collect();
    assert_eq!(got, expected);
    let neighbour = read_tensor(&ctx, &memory, TensorId(0), &first, u64::from(LEN) * 4).unwrap();
    assert_eq!(neighbour, sentinel);
}

#[test]
fn unaligned_readback_returns_exactly_the_bytes_asked_for() {
    let Some(ctx) = common::gpu() else { return };
    let plan = two_tensor_plan(&ctx);
    let memory = allocate_plan(&ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(&ctx)).unwrap();
    let first = plan.placement(TensorId(0)).unwrap();
    let data: Vec<u8> = (0..=255u8).collect();
    write_tensor(&ctx, &memory, TensorId(0), &first, &data).unwrap();
    let buffer = &memory.region(first.buffer, first.chunk).unwrap().buffer;
    let bytes = read_buffer_range(&ctx, buffer, 5, 7).unwrap();
    assert_eq!(bytes, &data[5..12]);
    let bytes = read_buffer_range(&ctx, buffer, 253, 3).unwrap();
    assert_eq!(bytes, &data[253..256]);
}

#[test]
fn tensor_transfers_honour_a_chunk_that_is_a_range_of_a_larger_buffer() {
    let Some(ctx) = common::gpu() else { return };
    let pool = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("pool"),
        size: 4096,
        usage: STORAGE_USAGE,
        mapped_at_creation: false,
    });
    // The chunk is bytes 1024..1536 of the pool; the tensor sits at offset 64 in it.
    let memory = PlannedMemory::from_regions(vec![vec![Region {
        buffer: pool.clone(),
        offset: 1024,
        size: 512,
    }]]);
    let placement = Placement {
        buffer: BufferId(0),
        chunk: 0,
        offset: 64,
        size: 256,
    };
    let data: Vec<u8> = (0..=255u8).collect();
    write_tensor(&ctx, &memory, TensorId(0), &placement, &data).unwrap();
    // The bytes landed at the region's base plus the placement's offset.
    assert_eq!(
        read_buffer_range(&ctx, &pool, 1024 + 64, 256).unwrap(),
        data
    );
    assert_eq!(read_buffer_range(&ctx, &pool, 64, 4).unwrap(), vec![0; 4]);
    assert_eq!(
        read_tensor(&ctx, &memory, TensorId(0), &placement, 256).unwrap(),
        data
    );
    // A placement running past the region (though not past the pool) is refused.
    let past = Placement {
        offset: 384,
        ..placement
    };
    assert!(matches!(
        write_tensor(&ctx, &memory, TensorId(0), &past, &data),
        Err(DeviceError::BadPlacement { offset: 384, .. })
    ));
    assert!(matches!(
        read_tensor(&ctx, &memory, TensorId(0), &past, 256),
        Err(DeviceError::BadPlacement { .. })
    ));
}
