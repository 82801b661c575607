//! [`GpuGpt2`]: GPT-2 on the device with planned memory. Weights are packed by the
//! context allocator and uploaded once; the KV cache ([`DeviceKvCache`]) is memory of
//! its own, kept across steps; each step shape (tokens in the step, page slots of the
//! context) has one graph and one activation plan, made the first time the shape is
//! seen and reused after; every bucket's plan shares one activation reservation, grown
//! only when a bucket needs more. After warm-up a decode step plans nothing and
//! creates no buffer, bind group or pipeline ([`StepReport`] counts them).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::generate::Decoder;
use super::readback::Readback;
use super::step_graph::{build_step_graph, head_pieces, LogitRows, StepAttention, StepGraph};
use super::{check_tokens, CheckpointError, Gpt2Config, Gpt2Weights};
use crate::device::{
    allocate_plan, GpuContext, PlannedMemory, SharedStorage, WgpuStorage, STORAGE_USAGE,
};
use crate::exec::checksum::{prove, ChecksumReport};
use crate::exec::{Executor, StorageType, TensorMemory};
use crate::kv::{prove_step, CachePlant, DeviceKvCache, KvConfig, KvProof, KvReport};
use crate::plan::{alloc_ctx_tensors, lower_bounds, plan, BufferTypeDesc, Plan, PlanOptions};

/// The default largest KV page (16 MiB): GPT-2 small's 1024 tokens in 5 pages, so the
/// cache grows a page at a time and attention takes one dispatch per page.
pub const DEFAULT_PAGE_BYTES: u64 = 16 << 20;

/// Choices of a [`GpuGpt2`].
#[derive(Clone)]
pub struct GpuOptions {
    /// The most tokens one prefill step runs (a longer prompt runs in chunks).
    pub prefill_chunk: usize,
    /// Tokens per KV block.
    pub block_tokens: u32,
    /// The largest KV page in bytes (also capped by the device's largest storage
    /// binding): smaller pages spread a context over more pages.
    pub max_page_bytes: u64,
    /// The longest context the cache is sized for (`None`: `n_positions`).
    pub max_context: Option<usize>,
    /// The largest LM-head piece in bytes (`None`: the device's largest storage
    /// binding).
    pub head_piece_bytes: Option<u64>,
    /// Where the KV cache's pages come from (`None`: plain device buffers).
    pub kv_storage: Option<SharedStorage>,
    /// How weights, activations and the KV cache's pages are stored: f32, or f16
    /// (half the bytes, kernels accumulating in f32; needs the adapter's
    /// `shader-f16`, [`crate::exec::ExecError::ShaderF16Missing`] without it).
    pub dtype: StorageType,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            prefill_chunk: 64,
            block_tokens: 16,
            max_page_bytes: DEFAULT_PAGE_BYTES,
            max_context: None,
            head_piece_bytes: None,
            kv_storage: None,
            dtype: StorageType::F32,
        }
    }
}

impl std::fmt::Debug for GpuOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuOptions")
            .field("prefill_chunk", &self.prefill_chunk)
            .field("block_tokens", &self.block_tokens)
            .field("max_page_bytes", &self.max_page_bytes)
            .field("max_context", &self.max_context)
            .field("head_piece_bytes", &self.head_piece_bytes)
            .field("kv_storage", &self.kv_storage.is_some())
            .field("dtype", &self.dtype)
            .finish()
    }
}

/// A step shape: the key of a bucket's graph and plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BucketKey {
    /// A step over the KV cache: `rows` tokens (the step's tokens rounded up to a
    /// power of two, at most the prefill chunk), `slots` page slots (the context
    /// rounded up to whole pages).
    Step {
        /// Tokens in the step.
        rows: usize,
        /// Page slots bound.
        slots: u32,
        /// Which rows get logits ([`LogitRows::Last`] for a single row).
        logits: LogitRows,
    },
    /// A full recompute of a sequence of `rows` tokens (no cache).
    Recompute {
        /// Tokens.
        rows: usize,
    },
}

/// One bucket: its graph, its plan and what it cost.
struct Bucket {
    /// The executor's recording key ([`Executor::run_cached`]): unique per bucket.
    id: u64,
    step: StepGraph,
    plan: Plan,
    kv_layer: Option<Plan>,
    lower_bound: u64,
    plan_time: Duration,
    runs: usize,
}

/// A bucket's memory, for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketReport {
    /// The shape.
    pub key: BucketKey,
    /// Nodes of its graph.
    pub nodes: usize,
    /// Bytes its activation plan needs.
    pub plan_bytes: u64,
    /// The in-place-aware lower bound of its activations.
    pub lower_bound: u64,
    /// Steps run with it.
    pub runs: usize,
    /// Time its plan took (once).
    pub plan_time: Duration,
}

/// What one step did and cost.
#[derive(Debug, Clone, PartialEq)]
pub struct StepReport {
    /// The bucket it ran in.
    pub key: BucketKey,
    /// Tokens in the cache before the step.
    pub past: usize,
    /// Whether the bucket's graph and plan were made by this step.
    pub planned: bool,
    /// Device buffers created by this step (activation reservation, KV pages, readback).
    pub buffers_created: usize,
    /// Bind groups created by the executor during this step.
    pub bind_groups_created: usize,
    /// Pipelines built during this step.
    pub pipelines_built: usize,
    /// Host time of the step up to and including its submit: bucket lookup (and
    /// planning when `planned`), the cache's table and the input written, the pass
    /// recorded (or taken ready-made, see `encode_ahead_time`), the submit.
    pub host_time: Duration,
    /// Of `host_time`, the executor's encode time (its parameter write and the pass
    /// recorded, or the pass recorded ahead taken).
    pub encode_time: Duration,
    /// Of `host_time`, the `queue.submit` call.
    pub submit_time: Duration,
    /// Host time after the submit, while the device ran the step, recording the
    /// bucket's next pass (which the bucket's next step submits without encoding): off
    /// the step's critical path, not part of `host_time`.
    pub encode_ahead_time: Duration,
    /// Wall time from submit until the device finished (the submit and the ahead
    /// encoding included).
    pub wait_time: Duration,
    /// GPU time of the pass (timestamp queries), when the device has them.
    pub gpu_time: Option<Duration>,
    /// Time to read the logits back.
    pub readback_time: Duration,
    /// Dispatches recorded.
    pub dispatches: usize,
}

impl StepReport {
    /// The step's wall time: its host time, then from the submit until the device
    /// finished.
    pub fn wall_time(&self) -> Duration {
        (self.host_time + self.wait_time).saturating_sub(self.submit_time)
    }
}

/// Memory of a [`GpuGpt2`].
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryReport {
    /// Bytes of weights on the device (the context allocator's chunks).
    pub weight_bytes: u64,
    /// Bytes of the embedding tables kept on the host for the lookup.
    pub host_embedding_bytes: u64,
    /// The LM head's pieces (one binding each).
    pub head_pieces: usize,
    /// The KV cache (pages reserved, blocks used).
    pub kv: KvReport,
    /// Bytes of the activation reservation every bucket shares.
    pub activation_bytes: u64,
    /// Each bucket's plan against its bound.
    pub buckets: Vec<BucketReport>,
    /// Bytes planned on the device in all: weights, the KV cache's pages and table,
    /// the activation reservation.
    pub planned_device_bytes: u64,
    /// What the driver allocated for every buffer of the device (wgpu's allocator
    /// report, where the backend has one: Vulkan, DX12), and what its memory blocks
    /// reserve.
    pub driver_bytes: Option<(u64, u64)>,
}

/// GPT-2 on a device (see the module docs).
pub struct GpuGpt2 {
    ctx: GpuContext,
    config: Gpt2Config,
    options: GpuOptions,
    wte: Vec<f32>,
    wpe: Vec<f32>,
    pieces: Vec<std::ops::Range<usize>>,
    storage: BufferTypeDesc,
    weight_plan: Plan,
    weight_memory: PlannedMemory,
    kv: DeviceKvCache<SharedStorage>,
    buckets: BTreeMap<BucketKey, Bucket>,
    activations: Option<PlannedMemory>,
    activation_bytes: u64,
    executor: Executor,
    readback: Readback,
    steps: Vec<StepReport>,
    pipeline_time: Duration,
    /// Pipelines built on the device as of the last run.
    pipelines: usize,
}

impl std::fmt::Debug for GpuGpt2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuGpt2")
            .field("adapter", &self.ctx.info.name)
            .field("config", &self.config)
            .field("buckets", &self.buckets.len())
            .finish_non_exhaustive()
    }
}

impl GpuGpt2 {
    /// Uploads `weights` for `config`, creates the KV cache and builds every pipeline.
    ///
    /// # Errors
    /// [`CheckpointError`] when the weights do not match the config or the model's
    /// head width is not a multiple of 4; [`crate::kv::KvError`] when the cache cannot
    /// be made; planning, allocation and upload errors.
    pub fn new(
        ctx: &GpuContext,
        config: &Gpt2Config,
        weights: &Gpt2Weights,
        options: GpuOptions,
    ) -> crate::Result<GpuGpt2> {
        super::cpu::check_weights(config, weights)?;
        let max_binding = ctx.limits.max_storage_buffer_binding_size;
        let pieces = head_pieces(
            config,
            options
                .head_piece_bytes
                .unwrap_or(max_binding)
                .min(max_binding),
        );
        let max_context = options
            .max_context
            .unwrap_or(config.n_positions)
            .min(config.n_positions);
        let hd = config.head_dim();
        let kv_config = KvConfig::new(
            config.n_layer as u32,
            config.n_head as u32,
            hd as u32,
            options.block_tokens,
            max_context as u32,
        )?
        .with_dtype(options.dtype.dtype())?
        .fit_pages(&ctx.limits, options.max_page_bytes)?;
        let storage = ctx.buffer_types()?.storage.desc;
        // The pipelines first: f16 on a device without shader-f16 is refused before
        // any upload.
        let mut executor = Executor::new(ctx);
        let started = Instant::now();
        executor.build_all_pipelines_for(options.dtype)?;
        let pipeline_time = started.elapsed();
        // Any step graph declares the weights with the same ids.
        let probe = build_step_graph(
            config,
            1,
            StepAttention::Recompute,
            &pieces,
            LogitRows::All,
            options.dtype.dtype(),
        )?;
        let ids = probe.weights.all();
        let weight_plan = alloc_ctx_tensors(&probe.graph, &ids, &storage)?;
        let weight_memory =
            allocate_plan(ctx, &weight_plan, STORAGE_USAGE, &WgpuStorage::shared(ctx))?;
        {
            let memory = TensorMemory::single(&weight_plan, &weight_memory);
            for (ids, layer) in probe.weights.layers.iter().zip(&weights.layers) {
                for (&id, values) in ids.iter().zip(layer.fields()) {
                    memory.write_f32(ctx, &probe.graph, id, values)?;
                }
            }
            let [g, b] = probe.weights.ln_f;
            memory.write_f32(ctx, &probe.graph, g, &weights.ln_f_g)?;
            memory.write_f32(ctx, &probe.graph, b, &weights.ln_f_b)?;
            let d = config.n_embd;
            for (&id, range) in probe.weights.head.iter().zip(&pieces) {
                let rows = &weights.head()[range.start * d..range.end * d];
                memory.write_f32(ctx, &probe.graph, id, rows)?;
            }
        }
        let kv_storage = options
            .kv_storage
            .clone()
            .unwrap_or_else(|| Arc::new(WgpuStorage::wgpu(ctx)));
        let kv = DeviceKvCache::new(ctx, kv_storage, kv_config)?;
        // An empty pass reads the device's pipeline count, so that the first step's
        // count is its own.
        let empty = crate::graph::GraphBuilder::new("empty").build()?;
        let pipelines = executor.run(&empty, &TensorMemory::new())?.pipelines;
        Ok(GpuGpt2 {
            ctx: ctx.clone(),
            config: config.clone(),
            options,
            wte: weights.wte.clone(),
            wpe: weights.wpe.clone(),
            pieces,
            storage,
            weight_plan,
            weight_memory,
            kv,
            buckets: BTreeMap::new(),
            activations: None,
            activation_bytes: 0,
            executor,
            readback: Readback::default(),
            steps: Vec::new(),
            pipeline_time,
            pipelines,
        })
    }

    /// The longest context the cache holds.
    pub fn max_context(&self) -> usize {
        self.kv.config().max_tokens as usize
    }

    /// The KV cache's shape.
    pub fn kv_config(&self) -> &KvConfig {
        self.kv.config()
    }

    /// Time spent building every pipeline when the model was made (once).
    pub fn pipeline_time(&self) -> Duration {
        self.pipeline_time
    }

    /// Every step run so far, in order.
    pub fn steps(&self) -> &[StepReport] {
        &self.steps
    }

    /// Weights, cache and activations.
    pub fn memory_report(&self) -> MemoryReport {
        let kv = self.kv.report();
        MemoryReport {
            planned_device_bytes: self.weight_plan.total_size()
                + kv.reserved_bytes
                + kv.table_bytes
                + self.activation_bytes,
            driver_bytes: crate::device::allocator_report(&self.ctx.device)
                .map(|r| (r.total_allocated_bytes, r.total_reserved_bytes)),
            weight_bytes: self.weight_plan.total_size(),
            host_embedding_bytes: 4 * (self.wte.len() + self.wpe.len()) as u64,
            head_pieces: self.pieces.len(),
            kv,
            activation_bytes: self.activation_bytes,
            buckets: self
                .buckets
                .iter()
                .map(|(key, b)| BucketReport {
                    key: *key,
                    nodes: b.step.graph.nodes.len(),
                    plan_bytes: b.plan.total_size(),
                    lower_bound: b.lower_bound,
                    runs: b.runs,
                    plan_time: b.plan_time,
                })
                .collect(),
        }
    }

    /// The ggml-style worst-case reservation for this model as it runs: its largest
    /// chunk ([`GpuOptions::prefill_chunk`], at most the longest context) at the longest
    /// context its cache holds, planned with the ggml planner ([`super::worst_case`]),
    /// to set beside [`MemoryReport::activation_bytes`].
    ///
    /// # Errors
    /// Planning errors.
    pub fn worst_case(&self) -> crate::Result<super::WorstCase> {
        let context = self.max_context();
        super::worst_case(
            &self.config,
            self.kv.config(),
            &self.pieces,
            self.options.prefill_chunk.clamp(1, context),
            context,
            &self.storage,
        )
    }

    /// `wte[token] + wpe[position]` for the tokens at positions `past..`.
    fn embed(&self, past: usize, tokens: &[u32]) -> Vec<f32> {
        let d = self.config.n_embd;
        let mut out = Vec::with_capacity(tokens.len() * d);
        for (i, &t) in tokens.iter().enumerate() {
            let te = &self.wte[t as usize * d..][..d];
            let pe = &self.wpe[(past + i) * d..][..d];
            out.extend(te.iter().zip(pe).map(|(a, b)| a + b));
        }
        out
    }

    /// The bucket for `key`, made (graph, plan, cache layer, reservation) when new.
    /// Returns whether it was made and the buffers that creates.
    fn ensure_bucket(&mut self, key: BucketKey) -> crate::Result<(bool, usize)> {
        if self.buckets.contains_key(&key) {
            return Ok((false, 0));
        }
        let started = Instant::now();
        let (rows, attention, logits) = match key {
            BucketKey::Step {
                rows,
                slots,
                logits,
            } => (
                rows,
                StepAttention::Paged {
                    kv: *self.kv.config(),
                    slots,
                },
                logits,
            ),
            BucketKey::Recompute { rows } => (rows, StepAttention::Recompute, LogitRows::All),
        };
        let step = build_step_graph(
            &self.config,
            rows,
            attention,
            &self.pieces,
            logits,
            self.options.dtype.dtype(),
        )?;
        let plan = plan(
            &step.graph,
            std::slice::from_ref(&self.storage),
            &PlanOptions::default(),
        )?;
        let plan_time = started.elapsed();
        let lower_bound = lower_bounds(&step.graph)?.inplace_aware;
        let pages_before = self.kv.report().pages;
        let kv_layer = match &step.kv {
            Some(kv) => Some(self.kv.layer(&step.graph, kv)?),
            None => None,
        };
        let mut created = self.kv.report().pages - pages_before;
        let single_chunk =
            plan.buffers.len() == 1 && plan.buffers.iter().all(|b| b.chunks.len() <= 1);
        if !single_chunk {
            return Err(CheckpointError::BadConfig {
                field: "n_embd",
                problem: format!(
                    "the step's activations need {} buffers / chunks; one chunk is shared",
                    plan.buffers.len()
                ),
            }
            .into());
        }
        if plan.total_size() > self.activation_bytes || self.activations.is_none() {
            self.activations = None;
            self.activations = Some(allocate_plan(
                &self.ctx,
                &plan,
                STORAGE_USAGE,
                &WgpuStorage::shared(&self.ctx),
            )?);
            self.activation_bytes = plan.total_size();
            created += 1;
        }
        self.buckets.insert(
            key,
            Bucket {
                id: self.buckets.len() as u64,
                step,
                plan,
                kv_layer,
                lower_bound,
                plan_time,
                runs: 0,
            },
        );
        Ok((true, created))
    }

    /// Runs one step of `tokens` (at most [`GpuOptions::prefill_chunk`] of them, or
    /// any number for a recompute) and returns their logits (`[tokens.len(), vocab]`,
    /// or the last row's `[vocab]` for [`LogitRows::Last`]).
    fn run(
        &mut self,
        tokens: &[u32],
        recompute: bool,
        logit_rows: LogitRows,
    ) -> crate::Result<Vec<f32>> {
        let started = Instant::now();
        let past = if recompute {
            0
        } else {
            self.kv.report().tokens as usize
        };
        check_tokens(&self.config, past, tokens)?;
        let needed = past + tokens.len();
        if !recompute && needed > self.max_context() {
            return Err(CheckpointError::ContextTooLong {
                needed,
                n_positions: self.max_context(),
            }
            .into());
        }
        let rows = tokens.len();
        // A step's rows are rounded up to a power of two (at most the prefill chunk):
        // the padding rows are zeros, come after the real ones (causal attention keeps
        // them out of the real rows), and write nothing the cache keeps (their
        // positions are past the step's mapped blocks, or past what it commits and
        // rewritten before they are read).
        let padded = if recompute {
            rows
        } else {
            rows.next_power_of_two()
                .min(self.options.prefill_chunk.max(rows))
        };
        let key = if recompute {
            BucketKey::Recompute { rows }
        } else {
            BucketKey::Step {
                rows: padded,
                slots: self.kv.config().pages_for(needed as u32),
                logits: if padded == 1 {
                    LogitRows::Last
                } else {
                    logit_rows
                },
            }
        };
        let (planned, mut buffers_created) = self.ensure_bucket(key)?;
        let mut embedded = self.embed(past, tokens);
        embedded.resize(padded * self.config.n_embd, 0.0);
        let pages_before = self.kv.report().pages;
        // ensure_bucket made both; a missing one is refused, not unwrapped.
        let unready = || CheckpointError::BadConfig {
            field: "n_positions",
            problem: format!("bucket {key:?} has no plan or memory"),
        };
        let bucket = self.buckets.get(&key).ok_or_else(unready)?;
        if let Some(kv) = &bucket.step.kv {
            self.kv.begin_step(kv, rows as u32)?;
        }
        buffers_created += self.kv.report().pages - pages_before;
        let activations = self.activations.as_ref().ok_or_else(unready)?;
        let mut memory = TensorMemory::single(&bucket.plan, activations);
        if let Some(layer) = &bucket.kv_layer {
            memory = memory.with_layer(layer, self.kv.memory());
        }
        let memory = memory.with_layer(&self.weight_plan, &self.weight_memory);
        let graph = &bucket.step.graph;
        memory.write_f32(&self.ctx, graph, bucket.step.input, &embedded)?;
        if let Some(index) = bucket.step.last_row {
            memory.write_u32(&self.ctx, graph, index, &[rows as u32 - 1])?;
        }
        let before_run = started.elapsed();
        // The bucket's dispatches are recorded once and replayed: a steady step resolves
        // no node and looks up no bind group (re-recorded when the memory changed).
        let run = self.executor.run_cached(bucket.id, graph, &memory)?;
        let pipelines_built = run.pipelines.saturating_sub(self.pipelines);
        self.pipelines = run.pipelines;
        let regions = bucket
            .step
            .logits
            .iter()
            .map(|&id| memory.range(graph, id, 4).map(|r| r.region()))
            .collect::<Result<Vec<_>, _>>()?;
        let read_started = Instant::now();
        let readbacks_before = self.readback.created;
        let bytes = self.readback.read(&self.ctx, &regions)?;
        let readback_time = read_started.elapsed();
        buffers_created += self.readback.created - readbacks_before;
        if bucket.step.kv.is_some() {
            self.kv.commit(rows as u32)?;
        }
        let vocab = self.config.vocab_size;
        let out_rows = bucket.step.logit_rows.min(rows);
        let mut logits = vec![0f32; out_rows * vocab];
        // Logits are stored as the model's type (f32, or f16 widened exactly).
        let element = self.options.dtype.dtype().size() as usize;
        let value = |c: &[u8]| match c {
            [a, b] => half::f16::from_le_bytes([*a, *b]).to_f32(),
            [a, b, c, d] => f32::from_le_bytes([*a, *b, *c, *d]),
            _ => f32::NAN,
        };
        for (piece, range) in bytes.iter().zip(&self.pieces) {
            let width = range.len();
            for (r, row) in piece
                .chunks_exact(element * width)
                .enumerate()
                .take(out_rows)
            {
                for (j, c) in row.chunks_exact(element).enumerate() {
                    logits[r * vocab + range.start + j] = value(c);
                }
            }
        }
        if let Some(bucket) = self.buckets.get_mut(&key) {
            bucket.runs += 1;
        }
        self.steps.push(StepReport {
            key,
            past,
            planned,
            buffers_created,
            bind_groups_created: run.bind_groups_created,
            pipelines_built,
            host_time: before_run + run.encode_time + run.submit_time,
            encode_time: run.encode_time,
            submit_time: run.submit_time,
            encode_ahead_time: run.encode_ahead_time,
            wait_time: run.wait_time,
            gpu_time: run.gpu_time,
            readback_time,
            dispatches: run.dispatches,
        });
        Ok(logits)
    }

    /// The logits of the whole sequence `tokens` by a full recompute on the device
    /// (no cache; the cache is left as it is).
    ///
    /// # Errors
    /// A bad token or a sequence past `n_positions`; planning, allocation and
    /// execution errors.
    pub fn recompute(&mut self, tokens: &[u32]) -> crate::Result<Vec<f32>> {
        self.run(tokens, true, LogitRows::All)
    }

    /// Proves every bucket's plan with the checksum run, the KV cache live through
    /// each step (step buckets: [`prove_step`]; recompute buckets: the plain proof).
    /// It overwrites the activation memory, not the cache.
    ///
    /// # Errors
    /// Layout and device errors of the proof.
    pub fn prove_buckets(&self) -> crate::Result<Vec<(BucketKey, ChecksumReport)>> {
        let Some(activations) = self.activations.as_ref() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(self.buckets.len());
        for (key, bucket) in &self.buckets {
            let report = match &bucket.step.kv {
                Some(kv) => {
                    prove_step(&self.ctx, &bucket.step.graph, kv, &bucket.plan, activations)?
                }
                None => prove(&self.ctx, &bucket.step.graph, &bucket.plan, activations)?,
            };
            out.push((*key, report));
        }
        Ok(out)
    }
}

impl GpuGpt2 {
    /// Proves bucket `key`'s plan with the cache live, after planting a clobber
    /// when `plant` ([`KvProof::plant_over_cache`]: an activation moved over a cache
    /// page, as a buggy plan would): the proof must then name the page.
    ///
    /// # Errors
    /// [`CheckpointError::BadConfig`] when there is no such step bucket (recompute
    /// buckets have no cache); layout and device errors of the proof.
    pub fn prove_bucket(
        &self,
        key: BucketKey,
        plant: bool,
    ) -> crate::Result<(ChecksumReport, Option<CachePlant>)> {
        let missing = || CheckpointError::BadConfig {
            field: "n_positions",
            problem: format!("no step bucket {key:?} has run"),
        };
        let bucket = self.buckets.get(&key).ok_or_else(missing)?;
        let kv = bucket.step.kv.as_ref().ok_or_else(missing)?;
        let activations = self.activations.as_ref().ok_or_else(missing)?;
        let mut proof = KvProof::new(&bucket.step.graph, kv, &bucket.plan)?;
        let planted = if plant {
            proof.plant_over_cache()
        } else {
            None
        };
        Ok((proof.run(&self.ctx, activations)?, planted))
    }
}

impl Decoder for GpuGpt2 {
    fn config(&self) -> &Gpt2Config {
        &self.config
    }

    fn context_len(&self) -> usize {
        self.kv.report().tokens as usize
    }

    fn reset(&mut self) {
        // Writing the table back can only fail on a lost device; the next step's
        // upload would report that.
        let _ = self.kv.truncate(0);
    }

    fn append(&mut self, tokens: &[u32]) -> crate::Result<Vec<f32>> {
        let past = self.context_len();
        check_tokens(&self.config, past, tokens)?;
        let mut logits = Vec::with_capacity(tokens.len() * self.config.vocab_size);
        for chunk in tokens.chunks(self.options.prefill_chunk.max(1)) {
            logits.extend(self.run(chunk, false, LogitRows::All)?);
        }
        Ok(logits)
    }

    fn append_last(&mut self, tokens: &[u32]) -> crate::Result<Vec<f32>> {
        let past = self.context_len();
        check_tokens(&self.config, past, tokens)?;
        let mut logits = Vec::new();
        for chunk in tokens.chunks(self.options.prefill_chunk.max(1)) {
            logits = self.run(chunk, false, LogitRows::Last)?;
        }
        Ok(logits)
    }
}
