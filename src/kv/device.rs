//! [`DeviceKvCache`]: a [`KvCache`] on a device: its block table uploaded before each
//! step, and its regions as a layer of the executor's tensor memory.

use super::{KvCache, KvConfig, KvError, KvReport, KvStep, KvTensors};
use crate::device::{read_buffer_range, write_buffer, GpuContext, PlannedMemory};
use crate::graph::Graph;
use crate::plan::{BufferId, BufferPlan, BufferTypeDesc, ChunkPlan, Placement, Plan};
use crate::storage::Storage;

/// A KV cache on a device: pages are regions of any storage of wgpu buffers (plain
/// buffers, sub-ranges of a [`crate::storage::PagedStorage`], a user's storage), never
/// above the device's largest storage binding.
///
/// A step: [`DeviceKvCache::begin_step`] (maps the chunk's blocks, uploads the table),
/// [`crate::exec::Executor::run`] over a tensor memory with the cache's layer
/// ([`DeviceKvCache::layer`], [`DeviceKvCache::memory`]), then
/// [`DeviceKvCache::commit`].
#[derive(Debug)]
pub struct DeviceKvCache<S: Storage<Memory = wgpu::Buffer>> {
    ctx: GpuContext,
    cache: KvCache<S>,
    memory: PlannedMemory,
    memory_pages: usize,
}

/// The cache's regions as plan chunks: the table, then each page.
fn memory_of<S: Storage<Memory = wgpu::Buffer>>(cache: &KvCache<S>) -> PlannedMemory {
    let row = cache
        .table_region()
        .into_iter()
        .chain(cache.pages())
        .cloned()
        .collect();
    PlannedMemory::from_regions(vec![row])
}

impl<S: Storage<Memory = wgpu::Buffer>> DeviceKvCache<S> {
    /// An empty cache of `config` on `storage`, on `ctx`'s device.
    ///
    /// # Errors
    /// [`KvError::TooLargeForBinding`] when a page or the table is larger than the
    /// device's `max_storage_buffer_binding_size`; [`KvError::BadConfig`] when
    /// `config.alignment` is not a multiple of its `min_storage_buffer_offset_alignment`;
    /// [`KvError::Storage`] when the storage refuses the table; [`KvError::Device`]
    /// when the table cannot be written.
    pub fn new(
        ctx: &GpuContext,
        storage: S,
        config: KvConfig,
    ) -> Result<DeviceKvCache<S>, KvError> {
        let max = ctx.limits.max_storage_buffer_binding_size;
        for (what, bytes) in [
            ("page", config.page_bytes()),
            ("block table", config.table_words() * 4),
        ] {
            if bytes > max {
                return Err(KvError::TooLargeForBinding { what, bytes, max });
            }
        }
        let align = u64::from(ctx.limits.min_storage_buffer_offset_alignment).max(4);
        if !config.alignment.is_multiple_of(align) {
            return Err(KvError::BadConfig {
                problem: format!(
                    "alignment {} is not a multiple of the device's storage offset alignment {align}",
                    config.alignment
                ),
            });
        }
        let cache = KvCache::new(storage, config)?;
        let memory = memory_of(&cache);
        let device = DeviceKvCache {
            ctx: ctx.clone(),
            cache,
            memory,
            memory_pages: 0,
        };
        device.upload()?;
        Ok(device)
    }

    /// The cache underneath (pages, blocks, table).
    pub fn cache(&self) -> &KvCache<S> {
        &self.cache
    }

    /// The cache's shape.
    pub fn config(&self) -> &KvConfig {
        self.cache.config()
    }

    /// What the cache holds (pages reserved, blocks used, tokens).
    pub fn report(&self) -> KvReport {
        self.cache.report()
    }

    /// The cache's memory layer for [`crate::exec::TensorMemory::with_layer`]: the
    /// table and every page as chunks of one plan buffer. It is the same object (same
    /// id, so cached bind groups stay valid) until a page is added.
    pub fn memory(&self) -> &PlannedMemory {
        &self.memory
    }

    fn refresh_memory(&mut self) {
        if self.memory_pages != self.cache.pages().len() {
            self.memory = memory_of(&self.cache);
            self.memory_pages = self.cache.pages().len();
        }
    }

    fn upload(&self) -> Result<(), KvError> {
        let words = self.cache.table_words();
        if let Some(table) = self.cache.table_region() {
            write_buffer(
                &self.ctx,
                &table.buffer,
                table.offset,
                bytemuck::cast_slice(&words),
            )?;
        }
        Ok(())
    }

    /// A plan placing `kv`'s tensors of `graph` on the cache's regions (the layer to
    /// pass with [`DeviceKvCache::memory`]). First reserves a page for every slot the
    /// graph binds. Build it once per step graph.
    ///
    /// # Errors
    /// [`KvError::NotInGraph`] when the graph's cache tensors do not match the cache;
    /// [`KvError::Storage`] when the storage refuses a page (none is kept).
    pub fn layer(&mut self, graph: &Graph, kv: &KvTensors) -> Result<Plan, KvError> {
        kv.check(graph, self.cache.config())?;
        self.cache.reserve_pages(kv.slots())?;
        self.refresh_memory();
        let regions = self
            .cache
            .table_region()
            .into_iter()
            .chain(self.cache.pages())
            .map(|r| r.size);
        let chunks: Vec<ChunkPlan> = regions
            .map(|size| ChunkPlan {
                size,
                oversized: false,
            })
            .collect();
        let mut placements = vec![None; graph.tensors.len()];
        for (chunk, id) in kv.tensors().enumerate() {
            if let (Some(slot), Some(c)) = (placements.get_mut(id.index()), chunks.get(chunk)) {
                *slot = Some(Placement {
                    buffer: BufferId(0),
                    chunk,
                    offset: 0,
                    size: c.size,
                });
            }
        }
        let config = self.cache.config();
        let buffer_type =
            BufferTypeDesc::new("kv cache", config.alignment, config.page_bytes().max(1)).map_err(
                |e| KvError::BadConfig {
                    problem: e.to_string(),
                },
            )?;
        Ok(Plan {
            planner: "kv cache".to_string(),
            placements,
            buffers: vec![BufferPlan {
                buffer_type,
                chunks,
                same_as: None,
            }],
            inplace: Vec::new(),
        })
    }

    /// Starts a step of `n` tokens for a graph with `kv`'s page slots: maps the
    /// chunk's blocks (a page taken only when no block slot is free) and uploads the
    /// table. Returns where the chunk sits.
    ///
    /// # Errors
    /// [`KvError::ContextFull`], [`KvError::Storage`] (the cache unchanged),
    /// [`KvError::TooManyPages`] when a block would lie past the graph's slots (no page
    /// is asked for, the blocks this call mapped are given back), [`KvError::Device`]
    /// when the upload fails.
    pub fn begin_step(&mut self, kv: &KvTensors, n: u32) -> Result<KvStep, KvError> {
        let step = self.cache.begin_within(n, kv.slots())?;
        self.refresh_memory();
        self.upload()?;
        Ok(step)
    }

    /// Ends a step: its `n` tokens are in the cache (the table is uploaded again at the
    /// next [`DeviceKvCache::begin_step`]).
    ///
    /// # Errors
    /// [`KvError::NotMapped`] for tokens no step mapped.
    pub fn commit(&mut self, n: u32) -> Result<(), KvError> {
        self.cache.commit(n)
    }

    /// Keeps the first `tokens` tokens; their blocks stay, the others are free for
    /// reuse (the pages stay).
    ///
    /// # Errors
    /// [`KvError::Device`] when the table cannot be written.
    pub fn truncate(&mut self, tokens: u32) -> Result<(), KvError> {
        self.cache.truncate(tokens);
        self.upload()
    }

    /// Checks that no chunk of `activations` (a step's activation memory) shares a byte
    /// with the cache's table or pages: the real-memory half of "the plan never
    /// overlaps the cache" (the plan half is the proof, [`DeviceKvCache::prove_step`]).
    ///
    /// # Errors
    /// [`KvError::OverlapsCache`] naming the first chunk that does.
    pub fn check_apart(&self, activations: &PlannedMemory) -> Result<(), KvError> {
        let cache = self
            .cache
            .table_region()
            .map(|r| ("block table".to_string(), r))
            .into_iter()
            .chain(
                self.cache
                    .pages()
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (format!("page {i}"), r)),
            );
        let cache: Vec<(String, &crate::storage::Region)> = cache.collect();
        for (buffer, row) in activations.regions().iter().enumerate() {
            for (chunk, region) in row.iter().enumerate() {
                if let Some((what, _)) = cache.iter().find(|(_, c)| c.overlaps(region)) {
                    return Err(KvError::OverlapsCache {
                        buffer,
                        chunk,
                        offset: region.offset,
                        size: region.size,
                        what: what.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Proves a step's plan with this cache live: [`DeviceKvCache::check_apart`] on
    /// the real memory, then [`crate::kv::prove_step`] (the checksum proof with the
    /// cache held live, over a stand-in of it: the cache is not overwritten).
    ///
    /// # Errors
    /// As [`DeviceKvCache::check_apart`] and [`crate::kv::prove_step`].
    pub fn prove_step(
        &self,
        graph: &Graph,
        kv: &KvTensors,
        activations: &Plan,
        memory: &PlannedMemory,
    ) -> Result<crate::exec::checksum::ChecksumReport, KvError> {
        kv.check(graph, self.cache.config())?;
        self.check_apart(memory)?;
        super::prove_step(&self.ctx, graph, kv, activations, memory)
    }

    /// Reads back logical block `block` (every layer's K and V rows, widened to f32
    /// from the cache's element type); `None` when it is not mapped.
    ///
    /// # Errors
    /// [`KvError::Device`] when the readback fails.
    pub fn read_block(&self, block: usize) -> Result<Option<Vec<f32>>, KvError> {
        let Some(region) = self.cache.block_region(block) else {
            return Ok(None);
        };
        let bytes = read_buffer_range(&self.ctx, &region.buffer, region.offset, region.size)?;
        Ok(Some(super::decode(self.cache.config().dtype, &bytes)))
    }

    /// Reads back the block table as the kernels see it.
    ///
    /// # Errors
    /// [`KvError::Device`] when the readback fails.
    pub fn read_table(&self) -> Result<Vec<u32>, KvError> {
        let Some(table) = self.cache.table_region() else {
            return Ok(Vec::new());
        };
        let bytes = read_buffer_range(&self.ctx, &table.buffer, table.offset, table.size)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}
