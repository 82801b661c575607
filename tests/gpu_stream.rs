//! Allocators registered per stream (issue 7 part 2, ACL's `aclrtAllocatorRegister`):
//! every rule and failure path on a real device, with a user pool allocator that hands
//! out sub-ranges of one big wgpu buffer and counts what comes back.
//!
//! Leak / double-free proof: each descriptor is wrapped by `AllocatorDesc::counted`
//! (allocations == frees at the end) and the pool itself refuses a block it does not
//! hold (`double_frees`) and notes a free that came before the queue finished the work
//! submitted before it (`freed_early`, set from `queue.on_submitted_work_done`).
//!
//! No adapter: each test prints `SKIPPED: no wgpu adapter` and passes, unless
//! `WGALLOC_REQUIRE_GPU=1`, where it fails.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use wgalloc::device::{
    allocate_plan, read_buffer_range, GpuContext, PlannedMemory, WgpuStorage, STORAGE_USAGE,
};
use wgalloc::exec::cpu_ref;
use wgalloc::exec::TensorData;
use wgalloc::exec::{ExecError, TensorMemory};
use wgalloc::graph::{DType, Graph, GraphBuilder, TensorId};
use wgalloc::model::{build_gpt, ModelConfig};
use wgalloc::plan::{plan_graph, plan_weights, BufferId, BufferTypeDesc, Plan};
use wgalloc::storage::Region;
use wgalloc::stream::{
    AllocatorDesc, BlockCounter, BlockRequest, ExecuteRequest, ExecutionResult, Stream,
    StreamError, SyncReport,
};

/// A device of this test's own (or a passing return when there is no GPU). Tests in
/// one process run in parallel threads: on a shared queue another test's submission
/// made between a stream's `execute` and the pool's `arm` would delay the "work done"
/// callback past what the stream waits for, and report a free as early when it is not.
macro_rules! own_gpu {
    () => {{
        if common::gpu().is_none() {
            return;
        }
        GpuContext::from_env().expect("a device of its own")
    }};
}

// ---------------------------------------------------------------------------------
// A user pool: sub-ranges of one big buffer, first fit over freed ranges, then bump.

#[derive(Debug)]
struct PoolBlock {
    offset: u64,
    size: u64,
}

#[derive(Default)]
struct PoolState {
    /// Where the never-used tail starts.
    tail: u64,
    /// Freed ranges (offset, size).
    free: Vec<(u64, u64)>,
    /// Offsets of blocks handed out and not freed.
    live: HashSet<u64>,
}

struct Pool {
    buffer: wgpu::Buffer,
    state: Mutex<PoolState>,
    /// `alloc` fails once this many blocks were handed out (None: never).
    fail_after: Option<u64>,
    handed_out: AtomicU64,
    /// `address_of` reports this many bytes less than the block has.
    shrink: u64,
    /// `address_of` reports the offset moved by this many bytes.
    skew: u64,
    /// Set by `queue.on_submitted_work_done` after an execution was submitted.
    done: Arc<AtomicBool>,
    freed_early: AtomicU64,
    double_frees: AtomicU64,
}

impl Pool {
    /// A pool of `size` bytes whose first block starts one alignment unit in, so that
    /// no block sits at offset 0 of the buffer.
    fn new(ctx: &GpuContext, size: u64) -> Pool {
        let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment);
        Pool {
            buffer: ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("test pool"),
                size,
                usage: STORAGE_USAGE,
                mapped_at_creation: false,
            }),
            state: Mutex::new(PoolState {
                tail: alignment,
                ..PoolState::default()
            }),
            fail_after: None,
            handed_out: AtomicU64::new(0),
            shrink: 0,
            skew: 0,
            done: Arc::new(AtomicBool::new(false)),
            freed_early: AtomicU64::new(0),
            double_frees: AtomicU64::new(0),
        }
    }

    fn alloc(&self, request: &BlockRequest) -> Result<PoolBlock, wgalloc::stream::AllocFailure> {
        if self
            .fail_after
            .is_some_and(|n| self.handed_out.load(Ordering::SeqCst) >= n)
        {
            return Err(format!(
                "pool exhausted after {} blocks",
                self.handed_out.load(Ordering::SeqCst)
            )
            .into());
        }
        let mut state = self.state.lock().unwrap();
        let fit = state
            .free
            .iter()
            .position(|&(o, s)| s >= request.size && o.is_multiple_of(request.alignment));
        let offset = match fit {
            Some(i) => state.free.swap_remove(i).0,
            None => {
                let offset = state.tail.next_multiple_of(request.alignment);
                let end = offset + request.size;
                if end > self.buffer.size() {
                    return Err(format!("pool of {} bytes is full", self.buffer.size()).into());
                }
                state.tail = end;
                offset
            }
        };
        state.live.insert(offset);
        self.handed_out.fetch_add(1, Ordering::SeqCst);
        Ok(PoolBlock {
            offset,
            size: request.size,
        })
    }

    fn free(&self, block: PoolBlock) {
        if !self.done.load(Ordering::SeqCst) {
            self.freed_early.fetch_add(1, Ordering::SeqCst);
        }
        let mut state = self.state.lock().unwrap();
        if !state.live.remove(&block.offset) {
            self.double_frees.fetch_add(1, Ordering::SeqCst);
            return;
        }
        state.free.push((block.offset, block.size));
    }

    fn address(&self, block: &PoolBlock) -> Region {
        Region {
            buffer: self.buffer.clone(),
            offset: block.offset + self.skew,
            size: block.size - self.shrink,
        }
    }

    fn live_blocks(&self) -> usize {
        self.state.lock().unwrap().live.len()
    }

    /// Arms `done`: it becomes true once everything submitted so far has completed.
    fn arm(&self, ctx: &GpuContext) {
        self.done.store(false, Ordering::SeqCst);
        let done = self.done.clone();
        ctx.queue
            .on_submitted_work_done(move || done.store(true, Ordering::SeqCst));
    }

    /// Arms `done`, then synchronizes `stream`: every block it frees comes after the
    /// queue finished.
    fn arm_and_sync(&self, ctx: &GpuContext, stream: &mut Stream) -> SyncReport {
        self.arm(ctx);
        stream.synchronize().expect("sync")
    }

    /// Checks every block came back exactly once.
    fn assert_balanced(&self, counter: &BlockCounter) {
        let report = counter.report();
        assert!(
            report.balanced(),
            "every block freed exactly once: {report:?}"
        );
        assert_eq!(self.live_blocks(), 0, "the pool holds no live block");
        assert_eq!(
            self.double_frees.load(Ordering::SeqCst),
            0,
            "no double free"
        );
    }

    /// Checks every block came back exactly once, none before its work completed.
    fn assert_clean(&self, counter: &BlockCounter) {
        self.assert_balanced(counter);
        assert_eq!(
            self.freed_early.load(Ordering::SeqCst),
            0,
            "no block freed before the queue finished"
        );
    }
}

fn pool_desc(pool: Arc<Pool>) -> (AllocatorDesc<Pool, PoolBlock>, Arc<BlockCounter>) {
    AllocatorDesc::new()
        .object(pool)
        .alloc(|p: &Pool, r| p.alloc(r))
        .free(|p: &Pool, b| p.free(b))
        .address_of(|p: &Pool, b| p.address(b))
        .counted()
}

/// The size of the pools most tests hand to a stream.
const POOL_SIZE: u64 = 1 << 16;

/// A pool of [`POOL_SIZE`] bytes with no injected fault.
fn fresh_pool(ctx: &GpuContext) -> Arc<Pool> {
    Arc::new(Pool::new(ctx, POOL_SIZE))
}

/// A stream named `name` with `pool` registered as its allocator, and the counter of
/// the pool's descriptor.
fn pooled_stream(ctx: &GpuContext, pool: &Arc<Pool>, name: &str) -> (Stream, Arc<BlockCounter>) {
    let (desc, counter) = pool_desc(pool.clone());
    let mut stream = Stream::new(ctx, name);
    stream.register_allocator(&desc).expect("register");
    (stream, counter)
}

// ---------------------------------------------------------------------------------
// A small graph with a weight, its plans and its CPU reference.

struct Net {
    graph: Graph,
    x: TensorId,
    w: TensorId,
    out: TensorId,
    x_values: Vec<f32>,
    w_values: Vec<f32>,
}

fn net() -> Net {
    let mut b = GraphBuilder::new("stream-net");
    let x = b.input("x", DType::F32, &[8, 16]);
    let w = b.weight("w", DType::F32, &[16, 16]);
    let h = b.node("matmul", &[x, w], &[8, 16], false);
    let r = b.node("relu", &[h], &[8, 16], true);
    let s = b.node("add", &[r, x], &[8, 16], true);
    let out = b.node("softmax", &[s], &[8, 16], true);
    b.mark_output(out);
    let graph = b.build().expect("graph");
    let x_values = (0..128)
        .map(|i| ((i * 7 % 23) as f32 - 11.0) / 10.0)
        .collect();
    let w_values = (0..256)
        .map(|i| ((i * 5 % 17) as f32 - 8.0) / 16.0)
        .collect();
    Net {
        graph,
        x,
        w,
        out,
        x_values,
        w_values,
    }
}

impl Net {
    fn expected(&self) -> Vec<f32> {
        let mut values = HashMap::new();
        values.insert(self.x, TensorData::F32(self.x_values.clone()));
        values.insert(self.w, TensorData::F32(self.w_values.clone()));
        let all = cpu_ref::evaluate(&self.graph, &values).expect("cpu");
        all[self.out.index()]
            .as_ref()
            .and_then(|d| d.as_f32())
            .expect("out")
            .to_vec()
    }

    /// Checks that `result` holds the output and that it matches the CPU reference.
    fn assert_output(&self, result: Option<&ExecutionResult>) {
        let out = result.and_then(|r| r.output_f32(self.out)).expect("out");
        assert_close(&out, &self.expected());
    }

    /// The weight in memory of its own (default allocator).
    fn weights(&self, ctx: &GpuContext) -> (Plan, PlannedMemory) {
        let plan = plan_weights(&self.graph, &storage(ctx)).expect("weight plan");
        let memory =
            allocate_plan(ctx, &plan, STORAGE_USAGE, &WgpuStorage::shared(ctx)).expect("alloc");
        TensorMemory::single(&plan, &memory)
            .write_f32(ctx, &self.graph, self.w, &self.w_values)
            .expect("upload w");
        (plan, memory)
    }

    fn request<'a>(
        &'a self,
        plan: &'a Plan,
        weights: &'a (Plan, PlannedMemory),
    ) -> ExecuteRequest<'a> {
        ExecuteRequest::new(&self.graph, plan)
            .input_f32(self.x, &self.x_values)
            .layer(&weights.0, &weights.1)
    }
}

/// The net with its weight uploaded and an activation plan made by `plan_of`: what
/// nearly every test executes.
struct Fixture {
    net: Net,
    weights: (Plan, PlannedMemory),
    plan: Plan,
}

fn fixture(ctx: &GpuContext, plan_of: fn(&GpuContext, &Graph) -> Plan) -> Fixture {
    let net = net();
    let weights = net.weights(ctx);
    let plan = plan_of(ctx, &net.graph);
    Fixture { net, weights, plan }
}

impl Fixture {
    /// The net's input and weight over the fixture's activation plan.
    fn request(&self) -> ExecuteRequest<'_> {
        self.net.request(&self.plan, &self.weights)
    }

    /// How many chunks, hence blocks, one execution takes.
    fn chunks(&self) -> u64 {
        chunks(&self.plan)
    }
}

fn storage(ctx: &GpuContext) -> BufferTypeDesc {
    ctx.buffer_types().expect("buffer types").storage.desc
}

/// The activation plan in one chunk.
fn one_chunk_plan(ctx: &GpuContext, graph: &Graph) -> Plan {
    let plan = plan_graph(graph, &storage(ctx)).expect("plan");
    plan.verify(graph).expect("verifies");
    plan
}

/// The activation plan spread over several chunks (at most 600 bytes each: one
/// 512-byte tensor per chunk).
fn multi_chunk_plan(ctx: &GpuContext, graph: &Graph) -> Plan {
    let small = BufferTypeDesc::new("small", storage(ctx).alignment(), 600).expect("type");
    let plan = plan_graph(graph, &small).expect("plan");
    plan.verify(graph).expect("verifies");
    assert!(
        plan.buffers[0].chunks.len() >= 2,
        "the plan has several chunks"
    );
    plan
}

fn chunks(plan: &Plan) -> u64 {
    plan.buffers.iter().map(|b| b.chunks.len() as u64).sum()
}

fn assert_close(gpu: &[f32], cpu: &[f32]) {
    assert_close_within(gpu, cpu, 1e-4, "element");
}

/// |gpu − cpu| ≤ `tolerance` · (1 + |cpu|) for every element, named `what` on failure.
fn assert_close_within(gpu: &[f32], cpu: &[f32], tolerance: f32, what: &str) {
    assert_eq!(gpu.len(), cpu.len());
    for (i, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        assert!(
            (g - c).abs() <= tolerance * (1.0 + c.abs()),
            "{what} {i}: gpu {g} cpu {c}"
        );
    }
}

// ---------------------------------------------------------------------------------
// Running with a user pool.

#[test]
fn a_graph_in_user_pool_blocks_matches_the_cpu_reference() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, multi_chunk_plan);
    let pool = fresh_pool(&ctx);
    let (mut stream, counter) = pooled_stream(&ctx, &pool, "pool");
    let id = stream.execute(&f.request()).expect("execute");
    assert_eq!(counter.report().allocations, f.chunks());
    let sync = pool.arm_and_sync(&ctx, &mut stream);
    assert_eq!(sync.executions, 1);
    assert_eq!(sync.blocks_freed as u64, f.chunks());
    let result = stream.take_result(id).expect("result");
    f.net.assert_output(Some(&result));
    pool.assert_clean(&counter);
    // A second execution reuses the freed ranges of the pool and still matches.
    let again = stream.execute(&f.request()).expect("again");
    pool.arm_and_sync(&ctx, &mut stream);
    let result = stream.take_result(again).expect("result");
    f.net.assert_output(Some(&result));
    assert_eq!(pool.state.lock().unwrap().tail, {
        // No new tail bytes: every block of the second run came from the free list.
        let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment);
        let mut tail = alignment;
        for b in &f.plan.buffers {
            for c in &b.chunks {
                tail = tail.next_multiple_of(alignment) + c.size.next_multiple_of(4);
            }
        }
        tail
    });
    pool.assert_clean(&counter);
}

#[test]
fn execute_returns_before_the_free_and_blocks_go_back_only_after_the_queue_finished() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, one_chunk_plan);
    let pool = fresh_pool(&ctx);
    let (mut stream, counter) = pooled_stream(&ctx, &pool, "ordering");
    for _ in 0..3 {
        stream.execute(&f.request()).expect("execute");
    }
    pool.arm(&ctx);
    assert_eq!(stream.pending_executions(), 3);
    assert_eq!(stream.held_blocks() as u64, 3 * f.chunks());
    assert_eq!(
        counter.report().frees,
        0,
        "nothing is freed before synchronize"
    );
    let sync = stream.synchronize().expect("sync");
    assert_eq!(sync.executions, 3);
    assert_eq!(stream.held_blocks(), 0);
    pool.assert_clean(&counter);
}

#[test]
fn the_descriptor_can_be_dropped_after_registration() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, one_chunk_plan);
    let pool = fresh_pool(&ctx);
    let mut stream = Stream::new(&ctx, "dropped-desc");
    let counter = {
        let (desc, counter) = pool_desc(pool.clone());
        stream.register_allocator(&desc).expect("register");
        counter
    };
    let id = stream.execute(&f.request()).expect("execute");
    pool.arm_and_sync(&ctx, &mut stream);
    f.net.assert_output(stream.result(id));
    assert_eq!(counter.report().allocations, f.chunks());
    pool.assert_clean(&counter);
}

#[test]
fn with_no_allocator_registered_the_stream_uses_the_default() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, multi_chunk_plan);
    let mut stream = Stream::new(&ctx, "default");
    assert!(!stream.has_registered_allocator());
    let id = stream.execute(&f.request()).expect("execute");
    let sync = stream.synchronize().expect("sync");
    assert_eq!(sync.blocks_freed as u64, f.chunks());
    let result = stream.take_result(id).expect("result");
    assert!(result.block_bytes >= f.plan.total_size());
    f.net.assert_output(Some(&result));
}

// ---------------------------------------------------------------------------------
// Registration.

#[test]
fn an_incomplete_descriptor_is_refused_and_the_previous_allocator_stays() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, one_chunk_plan);
    let pool = fresh_pool(&ctx);
    let (mut stream, counter) = pooled_stream(&ctx, &pool, "incomplete");
    let no_free: AllocatorDesc<Pool, PoolBlock> = AllocatorDesc::new()
        .object(pool.clone())
        .alloc(|p: &Pool, r| p.alloc(r))
        .address_of(|p: &Pool, b| p.address(b));
    assert_eq!(
        stream.register_allocator(&no_free),
        Err(StreamError::MissingCallback { callback: "free" })
    );
    let no_object: AllocatorDesc<Pool, PoolBlock> = AllocatorDesc::new()
        .alloc(|p: &Pool, r| p.alloc(r))
        .free(|p: &Pool, b| p.free(b))
        .address_of(|p: &Pool, b| p.address(b));
    assert_eq!(
        stream.register_allocator(&no_object),
        Err(StreamError::MissingCallback { callback: "object" })
    );
    stream.execute(&f.request()).expect("execute");
    pool.arm_and_sync(&ctx, &mut stream);
    assert_eq!(
        counter.report().allocations,
        f.chunks(),
        "the first allocator served"
    );
    pool.assert_clean(&counter);
}

#[test]
fn the_last_registration_wins_and_earlier_blocks_go_back_through_their_own_free() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, multi_chunk_plan);
    let (pool_a, pool_b) = (fresh_pool(&ctx), fresh_pool(&ctx));
    let (mut stream, count_a) = pooled_stream(&ctx, &pool_a, "reregister");
    let (desc_b, count_b) = pool_desc(pool_b.clone());
    let first = stream.execute(&f.request()).expect("on a");
    stream.register_allocator(&desc_b).expect("register b");
    let second = stream.execute(&f.request()).expect("on b");
    assert_eq!(count_a.report().allocations, f.chunks());
    assert_eq!(count_b.report().allocations, f.chunks());
    assert_eq!(count_a.report().frees, 0, "a's blocks wait for the stream");
    pool_a.arm(&ctx);
    pool_b.arm(&ctx);
    stream.synchronize().expect("sync");
    pool_a.assert_clean(&count_a);
    pool_b.assert_clean(&count_b);
    for id in [first, second] {
        f.net.assert_output(stream.result(id));
    }
}

#[test]
fn registering_the_same_allocator_twice_keeps_one_allocator_and_frees_once() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, one_chunk_plan);
    let pool = fresh_pool(&ctx);
    let (desc, counter) = pool_desc(pool.clone());
    let mut stream = Stream::new(&ctx, "twice");
    stream.register_allocator(&desc).expect("first");
    stream.execute(&f.request()).expect("execute");
    stream
        .register_allocator(&desc)
        .expect("second registration of the same");
    stream.execute(&f.request()).expect("execute again");
    pool.arm_and_sync(&ctx, &mut stream);
    assert_eq!(counter.report().allocations, 2 * f.chunks());
    pool.assert_clean(&counter);
}

// ---------------------------------------------------------------------------------
// Two streams.

#[test]
fn one_allocator_on_two_streams_is_refused_until_the_first_is_synchronized() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, one_chunk_plan);
    let pool = fresh_pool(&ctx);
    let (desc, counter) = pool_desc(pool.clone());
    let mut a = Stream::new(&ctx, "stream-a");
    let mut b = Stream::new(&ctx, "stream-b");
    a.register_allocator(&desc).expect("a");
    b.register_allocator(&desc).expect("b");
    a.execute(&f.request()).expect("a runs");
    let before = counter.report();
    assert_eq!(
        b.execute(&f.request()),
        Err(StreamError::AllocatorBusy {
            stream: a.id(),
            name: "stream-a".into()
        })
    );
    assert_eq!(
        counter.report(),
        before,
        "the refused execution took no block"
    );
    assert_eq!(b.pending_executions(), 0);
    a.execute(&f.request()).expect("a may keep going");
    pool.arm_and_sync(&ctx, &mut a);
    let id = b.execute(&f.request()).expect("b after a synchronized");
    pool.arm_and_sync(&ctx, &mut b);
    f.net.assert_output(b.result(id));
    pool.assert_clean(&counter);
}

#[test]
fn different_allocators_on_two_streams_run_at_once() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, one_chunk_plan);
    let (pool_a, pool_b) = (fresh_pool(&ctx), fresh_pool(&ctx));
    let (mut a, count_a) = pooled_stream(&ctx, &pool_a, "a");
    let (mut b, count_b) = pooled_stream(&ctx, &pool_b, "b");
    let ia = a.execute(&f.request()).expect("a");
    let ib = b
        .execute(&f.request())
        .expect("b while a is unsynchronized");
    pool_a.arm(&ctx);
    pool_b.arm(&ctx);
    b.synchronize().expect("sync b");
    a.synchronize().expect("sync a");
    f.net.assert_output(a.result(ia));
    f.net.assert_output(b.result(ib));
    pool_a.assert_clean(&count_a);
    pool_b.assert_clean(&count_b);
}

// ---------------------------------------------------------------------------------
// Failure paths.

#[test]
fn a_failing_alloc_returns_the_blocks_already_taken_and_the_stream_stays_usable() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, multi_chunk_plan);
    let pool = Arc::new(Pool {
        fail_after: Some(1),
        ..Pool::new(&ctx, POOL_SIZE)
    });
    let (mut stream, counter) = pooled_stream(&ctx, &pool, "failing");
    let error = stream.execute(&f.request()).expect_err("alloc fails");
    match &error {
        StreamError::AllocFailed {
            buffer: 0,
            chunk: 1,
            message,
            ..
        } => assert!(
            message.contains("pool exhausted after 1 blocks"),
            "{message}"
        ),
        other => panic!("unexpected {other:?}"),
    }
    let report = counter.report();
    assert_eq!(
        (report.allocations, report.failures, report.frees),
        (1, 1, 1)
    );
    assert_eq!(stream.pending_executions(), 0);
    // Never queued: the block goes back at once.
    pool.assert_balanced(&counter);
    // The stream still works with another allocator...
    let (good, good_count) = pool_desc(fresh_pool(&ctx));
    stream.register_allocator(&good).expect("register");
    let id = stream.execute(&f.request()).expect("execute");
    stream.synchronize().expect("sync");
    f.net.assert_output(stream.result(id));
    assert!(good_count.report().balanced());
}

#[test]
fn an_address_smaller_than_the_request_is_refused_and_the_block_goes_back() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, one_chunk_plan);
    let pool = Arc::new(Pool {
        shrink: 4,
        ..Pool::new(&ctx, POOL_SIZE)
    });
    let (mut stream, counter) = pooled_stream(&ctx, &pool, "short");
    let needed = f.plan.buffers[0].chunks[0].size.next_multiple_of(4);
    assert_eq!(
        stream.execute(&f.request()),
        Err(StreamError::BlockTooSmall {
            buffer: 0,
            chunk: 0,
            needed,
            got: needed - 4
        })
    );
    assert_eq!(counter.report().allocations, 1);
    // Never queued: the block goes back at once.
    pool.assert_balanced(&counter);
}

#[test]
fn a_misaligned_address_is_refused_and_the_block_goes_back() {
    let ctx = own_gpu!();
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment);
    if alignment <= 4 {
        common::skip_for_capability(
            "gpu_stream offset alignment",
            "storage offsets need no alignment beyond 4 on this device",
        );
        return;
    }
    let f = fixture(&ctx, one_chunk_plan);
    let pool = Arc::new(Pool {
        skew: 4,
        ..Pool::new(&ctx, POOL_SIZE)
    });
    let (mut stream, counter) = pooled_stream(&ctx, &pool, "misaligned");
    assert_eq!(
        stream.execute(&f.request()),
        Err(StreamError::MisalignedBlock {
            buffer: 0,
            chunk: 0,
            offset: alignment + 4,
            alignment
        })
    );
    // Never queued: the block goes back at once.
    pool.assert_balanced(&counter);
}

#[test]
fn an_address_past_its_buffer_end_is_refused() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, one_chunk_plan);
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment);
    let pool = Arc::new(Pool {
        skew: alignment * 64,
        ..Pool::new(&ctx, POOL_SIZE)
    });
    let (mut stream, counter) = pooled_stream(&ctx, &pool, "past-end");
    let bigger = BufferTypeDesc::new("big", alignment, 1 << 30).expect("type");
    // A chunk that nearly fills the pool: moved by 64 alignment units it ends past it.
    let mut plan = f.plan.clone();
    plan.buffers[0].buffer_type = bigger;
    plan.buffers[0].chunks[0].size = POOL_SIZE - 2 * alignment;
    assert!(matches!(
        stream.execute(&f.net.request(&plan, &f.weights)),
        Err(StreamError::BlockPastBufferEnd { buffer_size, .. }) if buffer_size == POOL_SIZE
    ));
    // Never queued: the block goes back at once.
    pool.assert_balanced(&counter);
}

#[test]
fn a_refused_input_after_allocation_returns_the_blocks_and_the_stream_stays_usable() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, one_chunk_plan);
    let pool = fresh_pool(&ctx);
    let (mut stream, counter) = pooled_stream(&ctx, &pool, "bad-input");
    let short = [1.0f32; 3];
    let bad = ExecuteRequest::new(&f.net.graph, &f.plan)
        .input_f32(f.net.x, &short)
        .layer(&f.weights.0, &f.weights.1);
    pool.arm(&ctx);
    assert!(matches!(
        stream.execute(&bad),
        Err(StreamError::Exec(ExecError::WrongDataSize { got: 12, .. }))
    ));
    pool.assert_clean(&counter);
    let id = stream.execute(&f.request()).expect("execute");
    pool.arm_and_sync(&ctx, &mut stream);
    assert!(stream.result(id).is_some());
    pool.assert_clean(&counter);
}

#[test]
fn dropping_a_stream_with_unsynchronized_work_waits_then_frees() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, multi_chunk_plan);
    let pool = fresh_pool(&ctx);
    let (desc, counter) = pool_desc(pool.clone());
    let mut stream = Stream::new(&ctx, "dropped");
    stream.register_allocator(&desc).expect("register");
    stream.execute(&f.request()).expect("execute");
    stream.execute(&f.request()).expect("execute");
    pool.arm(&ctx);
    assert_eq!(counter.report().frees, 0);
    drop(stream);
    assert_eq!(counter.report().allocations, 2 * f.chunks());
    pool.assert_clean(&counter);
    // Its allocator is free for another stream now.
    let mut other = Stream::new(&ctx, "after");
    other.register_allocator(&desc).expect("register");
    other.execute(&f.request()).expect("no longer busy");
    pool.arm_and_sync(&ctx, &mut other);
    pool.assert_clean(&counter);
}

// ---------------------------------------------------------------------------------
// Regions: tensors bound inside a larger buffer at a base offset.

/// A storage buffer of `size` bytes owned by the test, not by any planned memory.
fn big_buffer(ctx: &GpuContext, size: u64) -> wgpu::Buffer {
    ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("big"),
        size,
        usage: STORAGE_USAGE,
        mapped_at_creation: false,
    })
}

/// Planned memory of one buffer with one chunk: `size` bytes of `buffer` at `offset`.
fn one_region(buffer: wgpu::Buffer, offset: u64, size: u64) -> PlannedMemory {
    PlannedMemory::from_regions(vec![vec![Region {
        buffer,
        offset,
        size,
    }]])
}

#[test]
fn tensors_of_a_region_live_at_the_region_base_plus_their_offset() {
    let ctx = own_gpu!();
    let net = net();
    let plan = one_chunk_plan(&ctx, &net.graph);
    let base = 4 * u64::from(ctx.limits.min_storage_buffer_offset_alignment);
    let size = plan.buffers[0].chunks[0].size.next_multiple_of(4);
    let big = big_buffer(&ctx, base + size);
    let memory = one_region(big.clone(), base, size);
    assert_eq!(
        memory.region(BufferId(0), 0).map(|r| (r.offset, r.size)),
        Some((base, size))
    );
    let tensors = TensorMemory::single(&plan, &memory);
    tensors
        .write_f32(&ctx, &net.graph, net.x, &net.x_values)
        .expect("write");
    let at = plan.placement(net.x).expect("x placed").offset;
    let raw = read_buffer_range(&ctx, &big, base + at, 512).expect("raw read");
    assert_eq!(raw, bytemuck::cast_slice::<f32, u8>(&net.x_values));
    assert_eq!(
        tensors.read_f32(&ctx, &net.graph, net.x).expect("read"),
        net.x_values
    );
    assert_eq!(memory.total_size(), 0, "regions are not owned");
    drop(memory);
    // The big buffer was not destroyed with the memory: it can still be read.
    assert!(read_buffer_range(&ctx, &big, 0, 4).is_ok());
}

#[test]
fn a_tensor_past_its_region_is_refused() {
    let ctx = own_gpu!();
    let net = net();
    let plan = one_chunk_plan(&ctx, &net.graph);
    // A region shorter than the chunk, inside a buffer that would be long enough.
    let memory = one_region(big_buffer(&ctx, 1 << 16), 0, 64);
    let tensors = TensorMemory::single(&plan, &memory);
    let far = net
        .graph
        .tensors
        .iter()
        .map(|t| t.id)
        .find(|&t| plan.placement(t).is_some_and(|p| p.offset + p.size > 64))
        .expect("a tensor beyond 64 bytes");
    assert!(matches!(
        tensors.range(&net.graph, far, 4),
        Err(ExecError::PastBufferEnd {
            buffer_size: 64,
            ..
        })
    ));
}

// ---------------------------------------------------------------------------------
// The built-in transformer on a stream.

#[test]
fn the_built_in_transformer_runs_on_a_stream_with_a_pool() {
    let ctx = own_gpu!();
    let config = ModelConfig {
        seq: 8,
        seed: 7,
        ..common::tiny_model(1)
    };
    let model = build_gpt(&config).expect("model");
    let graph = &model.graph;
    let weight_plan = plan_weights(graph, &storage(&ctx)).expect("weights");
    let weight_memory = allocate_plan(
        &ctx,
        &weight_plan,
        STORAGE_USAGE,
        &WgpuStorage::shared(&ctx),
    )
    .expect("alloc");
    let mut values = HashMap::new();
    {
        let layer = TensorMemory::single(&weight_plan, &weight_memory);
        for w in model.weights() {
            let v = model.weight_values(w);
            layer.write_f32(&ctx, graph, w, &v).expect("upload");
            values.insert(w, TensorData::F32(v));
        }
    }
    let tokens = model.token_ids();
    values.insert(model.tokens, TensorData::U32(tokens.clone()));
    let plan = one_chunk_plan(&ctx, graph);
    let pool = Arc::new(Pool::new(&ctx, plan.total_size() * 2 + (1 << 12)));
    let (mut stream, counter) = pooled_stream(&ctx, &pool, "gpt");
    let request = ExecuteRequest::new(graph, &plan)
        .input(model.tokens, bytemuck::cast_slice(&tokens))
        .layer(&weight_plan, &weight_memory)
        .read_back(model.logits);
    let id = stream.execute(&request).expect("execute");
    pool.arm_and_sync(&ctx, &mut stream);
    let cpu = cpu_ref::evaluate(graph, &values).expect("cpu");
    let cpu = cpu[model.logits.index()]
        .as_ref()
        .and_then(|d| d.as_f32())
        .expect("logits");
    let gpu = stream
        .result(id)
        .and_then(|r| r.output_f32(model.logits))
        .expect("logits");
    assert_close_within(&gpu, cpu, 1e-3, "logit");
    pool.assert_clean(&counter);
    eprintln!(
        "gpt on a stream: {} nodes, {} activation bytes in {} pool block(s), weights {} B",
        graph.nodes.len(),
        plan.total_size(),
        counter.report().allocations,
        weight_plan.total_size()
    );
}

// ---------------------------------------------------------------------------------
// Review regressions.

#[test]
fn a_panicking_alloc_callback_does_not_leave_the_allocator_claimed() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, one_chunk_plan);
    let pool = fresh_pool(&ctx);
    let panic_once = Arc::new(AtomicBool::new(true));
    let armed = panic_once.clone();
    let (desc, counter) = AllocatorDesc::new()
        .object(pool.clone())
        .alloc(move |p: &Pool, r| {
            assert!(!armed.swap(false, Ordering::SeqCst), "user pool corrupted");
            p.alloc(r)
        })
        .free(|p: &Pool, b| p.free(b))
        .address_of(|p: &Pool, b| p.address(b))
        .counted();
    let mut a = Stream::new(&ctx, "panics");
    let mut b = Stream::new(&ctx, "after-panic");
    a.register_allocator(&desc).expect("a");
    b.register_allocator(&desc).expect("b");
    let request = f.request();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| a.execute(&request)));
    assert!(unwound.is_err(), "the callback panicked");
    assert_eq!(a.pending_executions(), 0);
    // `a` has nothing to synchronize, so only the unwinding could let the claim go.
    let id = b
        .execute(&f.request())
        .expect("the allocator is free again");
    pool.arm_and_sync(&ctx, &mut b);
    f.net.assert_output(b.result(id));
    pool.assert_clean(&counter);
}

#[test]
fn an_address_whose_reported_size_runs_past_its_buffer_is_refused() {
    let ctx = own_gpu!();
    let f = fixture(&ctx, one_chunk_plan);
    let pool = fresh_pool(&ctx);
    let (desc, counter) = AllocatorDesc::new()
        .object(pool.clone())
        .alloc(|p: &Pool, r| p.alloc(r))
        .free(|p: &Pool, b| p.free(b))
        .address_of(|p: &Pool, b| {
            // The offset is right, but the block claims the whole buffer and more.
            let mut address = p.address(b);
            address.size = address.buffer.size() - address.offset + 256;
            address
        })
        .counted();
    let mut stream = Stream::new(&ctx, "oversized-address");
    stream.register_allocator(&desc).expect("register");
    assert!(matches!(
        stream.execute(&f.request()),
        Err(StreamError::BlockPastBufferEnd { buffer_size, size, offset, .. })
            if buffer_size == POOL_SIZE && offset + size > buffer_size
    ));
    pool.assert_balanced(&counter);
}

// ---------------------------------------------------------------------------------
// wgpu's own refusals come back as errors (error scopes), never as wgpu's panic.

#[test]
fn reading_back_a_tensor_in_a_buffer_without_copy_src_is_a_typed_error_and_nothing_leaks() {
    let ctx = own_gpu!();
    let net = net();
    let plan = one_chunk_plan(&ctx, &net.graph);
    // The weight's memory can be bound and written, but not copied from.
    let weight_plan = plan_weights(&net.graph, &storage(&ctx)).expect("weight plan");
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
    let memory =
        allocate_plan(&ctx, &weight_plan, usage, &WgpuStorage::shared(&ctx)).expect("alloc");
    TensorMemory::single(&weight_plan, &memory)
        .write_f32(&ctx, &net.graph, net.w, &net.w_values)
        .expect("upload w");
    let f = Fixture {
        net,
        weights: (weight_plan, memory),
        plan,
    };
    let pool = fresh_pool(&ctx);
    let (mut stream, counter) = pooled_stream(&ctx, &pool, "no-copy-src");
    let request = f.request().read_back(f.net.w);
    pool.arm(&ctx);
    match stream.execute(&request) {
        Err(StreamError::Device(wgalloc::device::DeviceError::Validation { message })) => {
            assert!(!message.is_empty());
        }
        other => panic!("{other:?}"),
    }
    pool.assert_clean(&counter);
    // The stream and the device are still usable.
    let id = stream.execute(&f.request()).expect("execute");
    pool.arm_and_sync(&ctx, &mut stream);
    f.net.assert_output(stream.result(id));
    pool.assert_clean(&counter);
}

#[test]
fn an_address_in_a_buffer_of_another_device_is_a_typed_error_and_nothing_leaks() {
    let _ = own_gpu!();
    let (ctx, other) = common::two_devices_of_one_adapter();
    let f = fixture(&ctx, one_chunk_plan);
    let pool = Arc::new(Pool::new(&other, POOL_SIZE));
    let (mut stream, counter) = pooled_stream(&ctx, &pool, "other-device");
    let error = stream
        .execute(&f.request())
        .expect_err("a block of another device");
    assert!(
        matches!(error, StreamError::Exec(_) | StreamError::Device(_)),
        "{error:?}"
    );
    pool.assert_balanced(&counter);
    // Without inputs to write, the refusal comes from binding the block.
    let no_inputs = ExecuteRequest::new(&f.net.graph, &f.plan).layer(&f.weights.0, &f.weights.1);
    assert!(stream.execute(&no_inputs).is_err());
    pool.assert_balanced(&counter);
}

// ---------------------------------------------------------------------------------
// Any storage registered on a stream.

#[test]
fn a_registered_page_pool_runs_the_graph_frees_after_sync_and_is_one_allocator() {
    use wgalloc::storage::{CountingStorage, PagedStorage, Storage};
    let ctx = own_gpu!();
    let f = fixture(&ctx, multi_chunk_plan);
    let alignment = u64::from(ctx.limits.min_storage_buffer_offset_alignment).max(4);
    let pages = Arc::new(CountingStorage::new(wgalloc::device::WgpuStorage::wgpu(
        &ctx,
    )));
    let pool = Arc::new(
        PagedStorage::new(pages.clone(), 1 << 16, alignment, STORAGE_USAGE).expect("pool"),
    );
    // A region in use already: the stream's blocks start past offset 0 of the page.
    let first = pool
        .allocate(&wgalloc::storage::RegionRequest::new(4))
        .expect("a small region");
    let mut a = Stream::new(&ctx, "pages-a");
    let mut b = Stream::new(&ctx, "pages-b");
    a.register_storage(pool.clone());
    b.register_storage(pool.clone());
    assert!(a.has_registered_allocator());
    let id = a.execute(&f.request()).expect("a runs");
    assert_eq!(pool.live_regions() as u64, 1 + f.chunks());
    assert!(
        matches!(
            b.execute(&f.request()),
            Err(StreamError::AllocatorBusy { .. })
        ),
        "one storage on two streams is one allocator"
    );
    let sync = a.synchronize().expect("sync");
    assert_eq!(sync.blocks_freed as u64, f.chunks());
    assert_eq!(pool.live_regions(), 1, "blocks went back at synchronize");
    f.net.assert_output(a.result(id));
    let id = b.execute(&f.request()).expect("b after a synchronized");
    b.synchronize().expect("sync");
    f.net.assert_output(b.result(id));
    assert_eq!(pages.report().allocations, 1, "one page served every block");
    pool.free(first).expect("free");
    drop((a, b, pool));
    let report = pages.report();
    assert_eq!(
        (report.live_regions, report.bad_frees),
        (0, 0),
        "{report:?}"
    );
}
