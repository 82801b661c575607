//! A caller tells "bad input", "never fits on this device", "does not fit now" (out of
//! memory) and "a user callback failed" apart from the top-level [`wgalloc::Error`],
//! whichever layer the error came up through.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use wgalloc::device::{BufferStorage, CallbackAllocator, DeviceError, SharedStorage, WgpuStorage};
use wgalloc::error::{Error, ErrorKind};
use wgalloc::exec::ExecError;
use wgalloc::graph::{parse_trace, DType, GraphBuilder, TensorId};
use wgalloc::plan::{PlanError, Planner, TensorAllocator};

#[test]
fn a_malformed_trace_is_bad_input() {
    let error: Error = parse_trace("{}").expect_err("no format tag").into();
    assert_eq!(error.kind(), ErrorKind::BadInput);
}

#[test]
fn a_full_fixed_buffer_does_not_fit_now() {
    let mut tensors = TensorAllocator::new(32, 64).expect("valid");
    tensors.alloc(TensorId(0), 64).expect("fits");
    let error: Error = tensors.alloc(TensorId(1), 1).expect_err("full").into();
    assert!(matches!(error, Error::Plan(PlanError::OutOfSpace { .. })));
    assert_eq!(error.kind(), ErrorKind::OutOfMemory);
}

#[test]
fn out_of_memory_keeps_its_kind_through_allocation_and_execution_layers() {
    let oom = DeviceError::ChunkAllocation {
        buffer: 0,
        chunk: 2,
        size: 1 << 30,
        source: Box::new(DeviceError::OutOfDeviceMemory { size: 1 << 30 }),
    };
    assert_eq!(Error::from(oom.clone()).kind(), ErrorKind::OutOfMemory);
    let through_exec = Error::from(ExecError::from(oom.clone()));
    assert_eq!(through_exec.kind(), ErrorKind::OutOfMemory);
    // The typed error is still there to match on, not text.
    assert!(matches!(
        through_exec,
        Error::Exec(ExecError::Device(DeviceError::ChunkAllocation { .. }))
    ));
    let limit = DeviceError::TensorTooLarge {
        tensor: TensorId(4),
        size: 1 << 40,
        max_size: 1 << 27,
    };
    assert_eq!(
        Error::from(ExecError::from(limit)).kind(),
        ErrorKind::NeverFits
    );
}

fn small_graph() -> wgalloc::graph::Graph {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, &[1024]);
    let y = b.node("relu", &[x], &[1024], true);
    let z = b.node("scale", &[y], &[1024], false);
    b.mark_output(z);
    b.build().expect("valid")
}

#[test]
fn allocate_and_prove_names_the_kind_of_each_failure_on_the_gpu() {
    let Some(ctx) = common::gpu() else { return };
    let graph = small_graph();
    let storage = ctx.buffer_types().expect("types").storage.desc;
    let plan = Planner::Ggml.plan_graph(&graph, &storage).expect("plan");

    // An allocator that runs out of memory: "does not fit now".
    let released = Arc::new(AtomicUsize::new(0));
    let released_in = released.clone();
    let out_of_memory = CallbackAllocator::new(
        |_, request| Err(DeviceError::OutOfDeviceMemory { size: request.size }),
        move |_| {
            released_in.fetch_add(1, Ordering::Relaxed);
        },
    );
    let out_of_memory: SharedStorage = Arc::new(BufferStorage::new(&ctx, out_of_memory));
    let error = common::allocate_and_prove(&ctx, &graph, &plan, &out_of_memory).expect_err("oom");
    assert_eq!(error.kind(), ErrorKind::OutOfMemory, "{error}");
    assert_eq!(
        released.load(Ordering::Relaxed),
        0,
        "no buffer was handed out"
    );

    // A user callback that fails with its own reason.
    let refusing = CallbackAllocator::new(
        |_, request| {
            Err(DeviceError::AllocatorRefused {
                size: request.size,
                message: "pool closed".into(),
            })
        },
        |_| {},
    );
    let refusing: SharedStorage = Arc::new(BufferStorage::new(&ctx, refusing));
    let error = common::allocate_and_prove(&ctx, &graph, &plan, &refusing).expect_err("refused");
    assert_eq!(error.kind(), ErrorKind::Callback, "{error}");
    assert!(error.to_string().contains("pool closed"), "{error}");

    // A device whose storage bindings are smaller than a tensor: "never fits".
    let mut small = ctx.clone();
    small.limits.max_storage_buffer_binding_size = 1024;
    let wgpu = WgpuStorage::shared(&ctx);
    let error = common::allocate_and_prove(&small, &graph, &plan, &wgpu).expect_err("too big");
    assert_eq!(error.kind(), ErrorKind::NeverFits, "{error}");

    // A plan for another graph: bad input.
    let other = GraphBuilder::new("empty").build().expect("valid");
    let error = common::allocate_and_prove(&ctx, &other, &plan, &wgpu).expect_err("mismatch");
    assert_eq!(error.kind(), ErrorKind::BadInput, "{error}");

    // And the honest path proves.
    let report = common::allocate_and_prove(&ctx, &graph, &plan, &wgpu).expect("proves");
    assert!(report.verified(), "{report}");
}
