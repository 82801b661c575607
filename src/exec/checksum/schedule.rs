//! The checksum run as a list of dispatches and the table they read: pure CPU, no wgpu,
//! so the layout the shader sees is tested without a GPU.
//!
//! Every chunk buffer a dispatch touches is bound once (the window of it that the
//! plan's chunks cover, so a chunk in a large page binds only its part), in one of
//! [`SLOTS`] storage slots; the tensors are described by `(slot, word offset, words)`.
//! Per node: one reduce dispatch per group of inputs whose chunks fit the slots
//! (usually one) sums each input's checksum from memory as it is now, then one write
//! dispatch compares those sums with the CPU's prediction (mismatches go to the error
//! records) and writes the node's output words. Graph inputs are filled first by write
//! dispatches with no inputs; a final reduce + check covers the graph outputs.

use std::collections::BTreeSet;

use super::hash::{input_seed, node_seed};
use super::predict::{elementwise_source, source_of, word_len, written_root, Prediction, Source};
use crate::device::DeviceError;
use crate::exec::ExecError;
use crate::graph::{Graph, NodeId, Role, TensorId};
use crate::plan::Plan;

/// Chunk buffers one dispatch can bind (storage bindings 3..3+SLOTS of the shader).
pub(crate) const SLOTS: usize = 6;
/// Storage buffers the shader binds besides the slots (table and state).
pub(crate) const FIXED_STORAGE_BUFFERS: u32 = 2;
/// u32s per read record in the table: slot, offset, len, expected, tensor, node.
pub(crate) const READ_STRIDE: u32 = 8;
/// Mismatch records kept (node, tensor, expected, got) after the counter.
pub(crate) const MAX_RECORDS: u32 = 16;
/// Index in the state buffer of the first per-read checksum.
pub(crate) const SUMS_BASE: u32 = 1 + 4 * MAX_RECORDS;
/// The node number of the final check of the graph outputs (after the last node).
pub(crate) const END_NODE: u32 = u32::MAX;
/// Invocations per workgroup (the shader's `@workgroup_size`).
pub(crate) const WORKGROUP: u32 = 256;
/// At most this many workgroups along x per dispatch; invocations loop over the rest.
pub(crate) const MAX_GROUPS: u32 = 256;
/// Words each invocation handles at least before another workgroup is added.
const WORDS_PER_INVOCATION: u32 = 4;

/// Which entry point a dispatch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `reduce`: sums checksums of a group of reads.
    Reduce,
    /// `write`: checks a node's reads, then writes its output.
    Write,
}

/// One dispatch: its entry point, the chunk buffers in its slots (indices into the
/// run's unique buffers), its uniform parameters and its workgroup counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dispatch {
    pub kind: Kind,
    pub slots: [Option<usize>; SLOTS],
    pub params: [u32; 16],
    pub groups: (u32, u32),
}

/// A tensor's words in memory: a unique buffer, a word offset and a word count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Region {
    buffer: usize,
    offset: u32,
    len: u32,
}

/// A read checked against the prediction.
#[derive(Debug, Clone, Copy)]
struct Read {
    region: Region,
    expected: u32,
    tensor: u32,
    node: u32,
}

/// The whole run: the table (read records, then node input lists) and the dispatches.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    pub table: Vec<u32>,
    pub dispatches: Vec<Dispatch>,
    /// Number of reads (checksums summed on the GPU).
    pub reads: u32,
    /// Distinct tensors whose checksum is checked at least once.
    pub tensors_checked: usize,
}

/// Where the plan's chunks are: `chunk_buffer[buffer][chunk]` is an index into the
/// run's unique buffers, whose sizes in bytes are `buffer_sizes`, and
/// `chunk_span[buffer][chunk]` the chunk's `(base offset, size)` in that buffer (`(0,
/// buffer size)` for a chunk that is a whole buffer).
pub(crate) struct Chunks<'a> {
    pub chunk_buffer: &'a [Vec<usize>],
    pub chunk_span: &'a [Vec<(u64, u64)>],
    pub buffer_sizes: &'a [u64],
}

struct Builder<'a> {
    graph: &'a Graph,
    plan: &'a Plan,
    chunks: Chunks<'a>,
    prediction: &'a Prediction,
    reads: Vec<Read>,
    ins: Vec<u32>,
    dispatches: Vec<Dispatch>,
    checked: BTreeSet<u32>,
}

impl Schedule {
    /// Lays out the checksum run of `graph` over `plan`'s memory.
    ///
    /// # Errors
    /// [`ExecError::ChecksumPlacement`] when a tensor the run touches has no placement,
    /// a misaligned offset, or words beyond its reservation or its chunk;
    /// [`ExecError::ChecksumGraph`] when a read has no prediction;
    /// [`ExecError::ChecksumLimit`] when a count does not fit the shader's u32s.
    pub fn build(
        graph: &Graph,
        plan: &Plan,
        chunks: Chunks<'_>,
        prediction: &Prediction,
    ) -> Result<Schedule, ExecError> {
        if plan.placements.len() != graph.tensors.len() {
            return Err(ExecError::Device(DeviceError::PlanForAnotherGraph {
                placements: plan.placements.len(),
                tensors: graph.tensors.len(),
            }));
        }
        let mut b = Builder {
            graph,
            plan,
            chunks,
            prediction,
            reads: Vec::new(),
            ins: Vec::new(),
            dispatches: Vec::new(),
            checked: BTreeSet::new(),
        };
        for tensor in &graph.tensors {
            if tensor.role == Role::Input && graph.is_planned(tensor.id) {
                let out = b.region(tensor.id)?;
                b.push_write(input_seed(tensor.id.0), 0, 0, Some(out), None, 0, 0);
            }
        }
        for step in 0..graph.nodes.len() {
            b.node(step)?;
        }
        b.final_check()?;
        b.finish()
    }
}

fn to_u32(value: usize, what: &str) -> Result<u32, ExecError> {
    u32::try_from(value).map_err(|_| ExecError::ChecksumLimit {
        what: what.to_string(),
        needed: value as u64,
        limit: u64::from(u32::MAX),
    })
}

fn groups_for(words: u32) -> u32 {
    words
        .div_ceil(WORKGROUP * WORDS_PER_INVOCATION)
        .clamp(1, MAX_GROUPS)
}

impl Builder<'_> {
    fn region(&self, root: TensorId) -> Result<Region, ExecError> {
        let bad = |problem: String| ExecError::ChecksumPlacement {
            tensor: root,
            problem,
        };
        let placement = self
            .plan
            .placement(root)
            .ok_or_else(|| bad("has no placement".to_string()))?;
        let buffer = self
            .chunks
            .chunk_buffer
            .get(placement.buffer.0)
            .and_then(|b| b.get(placement.chunk))
            .copied()
            .ok_or_else(|| {
                bad(format!(
                    "placed in buffer {} chunk {}, which has no memory",
                    placement.buffer.0, placement.chunk
                ))
            })?;
        let len = word_len(self.graph, root)?;
        let bytes = u64::from(len) * 4;
        if !placement.offset.is_multiple_of(4) {
            return Err(bad(format!(
                "offset {} is not a multiple of 4 bytes",
                placement.offset
            )));
        }
        if bytes > placement.size {
            return Err(bad(format!(
                "its {bytes} bytes of whole words exceed its reservation of {} bytes",
                placement.size
            )));
        }
        let (base, span) = self
            .chunks
            .chunk_span
            .get(placement.buffer.0)
            .and_then(|b| b.get(placement.chunk))
            .copied()
            .unwrap_or((0, 0));
        let capacity = self.chunks.buffer_sizes.get(buffer).copied().unwrap_or(0);
        let end = placement.offset.checked_add(bytes);
        if end.is_none_or(|e| e > span) {
            return Err(bad(format!(
                "words [{}, {}+{bytes}) run past its chunk of {span} bytes",
                placement.offset, placement.offset
            )));
        }
        // The chunk may be a range of a larger buffer: words count from the buffer.
        let at = base
            .checked_add(placement.offset)
            .filter(|at| at.is_multiple_of(4) && at.checked_add(bytes).is_some_and(|e| e <= capacity))
            .ok_or_else(|| {
                bad(format!(
                    "its chunk starts at byte {base} of a {capacity}-byte buffer: words [{base}+{}, +{bytes}) are not whole words inside it",
                    placement.offset
                ))
            })?;
        let offset = u32::try_from(at / 4).map_err(|_| ExecError::ChecksumLimit {
            what: format!("word offset of tensor {root}"),
            needed: at / 4,
            limit: u64::from(u32::MAX),
        })?;
        Ok(Region {
            buffer,
            offset,
            len,
        })
    }

    fn read(&mut self, root: TensorId, node: u32) -> Result<u32, ExecError> {
        let region = self.region(root)?;
        let expected =
            self.prediction
                .checksum(self.graph, root)
                .ok_or_else(|| ExecError::ChecksumGraph {
                    node: (node != END_NODE).then_some(NodeId(node)),
                    tensor: root,
                    problem: "reads planned memory that nothing has written".to_string(),
                })?;
        let index = to_u32(self.reads.len(), "reads")?;
        self.reads.push(Read {
            region,
            expected,
            tensor: root.0,
            node,
        });
        self.checked.insert(root.0);
        Ok(index)
    }

    /// Reduce dispatches for reads `[first, first + count)`, grouped so that each
    /// group's distinct chunk buffers fit the slots.
    fn push_reduces(&mut self, first: u32, count: u32) {
        let mut start = first;
        while start < first + count {
            let mut slots: [Option<usize>; SLOTS] = [None; SLOTS];
            let mut used = 0usize;
            let mut end = start;
            let mut longest = 0u32;
            while end < first + count {
                let read = &self.reads[end as usize];
                let buffer = read.region.buffer;
                if !slots[..used].contains(&Some(buffer)) {
                    if used == SLOTS {
                        break;
                    }
                    slots[used] = Some(buffer);
                    used += 1;
                }
                longest = longest.max(read.region.len);
                end += 1;
            }
            let mut params = [0u32; 16];
            params[1] = start;
            self.dispatches.push(Dispatch {
                kind: Kind::Reduce,
                slots,
                params,
                groups: (groups_for(longest), end - start),
            });
            start = end;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn push_write(
        &mut self,
        seed: u32,
        ins_start: u32,
        ins_count: u32,
        out: Option<Region>,
        in0: Option<Region>,
        check_base: u32,
        checks: u32,
    ) {
        let mut slots: [Option<usize>; SLOTS] = [None; SLOTS];
        let mut params = [0u32; 16];
        params[0] = seed;
        params[1] = ins_start;
        params[2] = ins_count;
        let mut longest = 0;
        if let Some(out) = out {
            slots[0] = Some(out.buffer);
            params[4] = 0;
            params[5] = out.offset;
            params[6] = out.len;
            longest = out.len;
        }
        if let Some(src) = in0 {
            let slot = if slots[0] == Some(src.buffer) {
                0
            } else {
                slots[1] = Some(src.buffer);
                1
            };
            params[8] = slot;
            params[9] = src.offset;
            params[10] = src.len;
            params[11] = 1;
        }
        params[12] = check_base;
        params[13] = checks;
        self.dispatches.push(Dispatch {
            kind: Kind::Write,
            slots,
            params,
            groups: (groups_for(longest), 1),
        });
    }

    fn node(&mut self, step: usize) -> Result<(), ExecError> {
        let graph = self.graph;
        let node = &graph.nodes[step];
        let step32 = to_u32(step, "nodes")?;
        let first_read = to_u32(self.reads.len(), "reads")?;
        let ins_start = to_u32(self.ins.len(), "node inputs")?;
        for &input in &node.inputs {
            match source_of(graph, input) {
                Source::Constant(c) => self.ins.extend([0, c]),
                Source::Memory(root) => {
                    let index = self.read(root, step32)?;
                    self.ins.extend([1, index]);
                }
            }
        }
        let reads = to_u32(self.reads.len(), "reads")? - first_read;
        self.push_reduces(first_read, reads);
        let out = written_root(graph, node.output)
            .map(|root| self.region(root))
            .transpose()?;
        let in0 = elementwise_source(graph, step)
            .map(|root| self.region(root))
            .transpose()?;
        if out.is_none() && reads == 0 {
            return Ok(());
        }
        let ins_count = to_u32(node.inputs.len(), "node inputs")?;
        self.push_write(
            node_seed(step32),
            ins_start,
            ins_count,
            out,
            in0,
            first_read,
            reads,
        );
        Ok(())
    }

    fn final_check(&mut self) -> Result<(), ExecError> {
        let graph = self.graph;
        let roots: BTreeSet<TensorId> = graph
            .tensors
            .iter()
            .filter(|t| t.role == Role::Output)
            .filter_map(|t| graph.root_of(t.id))
            .filter(|&r| graph.is_planned(r))
            .collect();
        let first = to_u32(self.reads.len(), "reads")?;
        for root in roots {
            self.read(root, END_NODE)?;
        }
        let count = to_u32(self.reads.len(), "reads")? - first;
        if count > 0 {
            self.push_reduces(first, count);
            self.push_write(0, 0, 0, None, None, first, count);
        }
        Ok(())
    }

    fn finish(self) -> Result<Schedule, ExecError> {
        let reads = to_u32(self.reads.len(), "reads")?;
        let ins_base = reads
            .checked_mul(READ_STRIDE)
            .ok_or(ExecError::ChecksumLimit {
                what: "table words".to_string(),
                needed: u64::from(reads) * u64::from(READ_STRIDE),
                limit: u64::from(u32::MAX),
            })?;
        let mut table = vec![0u32; ins_base as usize];
        let mut dispatches = self.dispatches;
        for d in &mut dispatches {
            match d.kind {
                Kind::Reduce => {
                    let start = d.params[1];
                    for r in start..start + d.groups.1 {
                        let read = self.reads[r as usize];
                        let slot = d
                            .slots
                            .iter()
                            .position(|s| *s == Some(read.region.buffer))
                            .unwrap_or(0);
                        let at = (r * READ_STRIDE) as usize;
                        table[at..at + 6].copy_from_slice(&[
                            slot as u32,
                            read.region.offset,
                            read.region.len,
                            read.expected,
                            read.tensor,
                            read.node,
                        ]);
                    }
                }
                Kind::Write => d.params[1] += ins_base,
            }
        }
        table.extend_from_slice(&self.ins);
        Ok(Schedule {
            table,
            dispatches,
            reads,
            tensors_checked: self.checked.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};
    use crate::plan::{naive_plan, BufferTypeDesc};

    fn layout(graph: &Graph, plan: &Plan) -> Result<Schedule, ExecError> {
        let chunk_buffer: Vec<Vec<usize>> = vec![(0..plan.buffers[0].chunks.len()).collect()];
        let sizes: Vec<u64> = plan.buffers[0].chunks.iter().map(|c| c.size).collect();
        let spans: Vec<Vec<(u64, u64)>> = vec![sizes.iter().map(|&s| (0, s)).collect()];
        let prediction = Prediction::of(graph)?;
        Schedule::build(
            graph,
            plan,
            Chunks {
                chunk_buffer: &chunk_buffer,
                chunk_span: &spans,
                buffer_sizes: &sizes,
            },
            &prediction,
        )
    }

    fn naive(graph: &Graph) -> Plan {
        let bt = BufferTypeDesc::new("storage", 32, 1 << 20).expect("buffer type");
        naive_plan(graph, &bt).expect("plan")
    }

    #[test]
    fn node_with_more_chunks_than_slots_gets_several_reduce_dispatches() {
        let mut b = GraphBuilder::new("wide");
        let xs: Vec<TensorId> = (0..8)
            .map(|i| b.input(format!("x{i}"), DType::F32, &[16]))
            .collect();
        let y = b.node("concat", &xs, &[128], false);
        b.mark_output(y);
        let g = b.build().expect("valid");
        let s = layout(&g, &naive(&g)).expect("schedule");
        let kinds: Vec<(Kind, u32)> = s.dispatches.iter().map(|d| (d.kind, d.groups.1)).collect();
        let fills = vec![(Kind::Write, 1); 8];
        let mut expected = fills;
        expected.extend([
            (Kind::Reduce, 6),
            (Kind::Reduce, 2),
            (Kind::Write, 1),
            (Kind::Reduce, 1),
            (Kind::Write, 1),
        ]);
        assert_eq!(kinds, expected);
        assert_eq!(s.reads, 9);
        assert_eq!(s.tensors_checked, 9);
    }

    #[test]
    fn inplace_output_shares_the_slot_of_its_first_input() {
        let mut b = GraphBuilder::new("inplace");
        let x = b.input("x", DType::F32, &[16]);
        let y = b.node("relu", &[x], &[16], true);
        b.mark_output(y);
        let g = b.build().expect("valid");
        let mut plan = naive(&g);
        plan.placements[y.index()] = plan.placements[x.index()];
        let s = layout(&g, &plan).expect("schedule");
        let write = s
            .dispatches
            .iter()
            .filter(|d| d.kind == Kind::Write)
            .nth(1)
            .expect("the node's write");
        assert_eq!(write.slots[0], Some(0));
        assert_eq!(write.slots[1], None);
        assert_eq!(write.params[8], 0);
        assert_eq!(write.params[11], 1);
    }

    #[test]
    fn read_records_carry_slot_offset_length_and_prediction() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[10]);
        let y = b.node("neg", &[x], &[10], false);
        b.mark_output(y);
        let g = b.build().expect("valid");
        let s = layout(&g, &naive(&g)).expect("schedule");
        let p = Prediction::of(&g).expect("prediction");
        let first = &s.table[..READ_STRIDE as usize];
        assert_eq!(
            &first[..6],
            &[0, 0, 10, p.checksum(&g, x).unwrap_or(1), x.0, 0]
        );
    }

    #[test]
    fn placement_past_its_chunk_is_refused() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[10]);
        let y = b.node("neg", &[x], &[100], false);
        b.mark_output(y);
        let g = b.build().expect("valid");
        let mut plan = naive(&g);
        plan.placements[y.index()] = plan.placements[x.index()];
        assert!(matches!(
            layout(&g, &plan),
            Err(ExecError::ChecksumPlacement {
                tensor: TensorId(1),
                ..
            })
        ));
    }

    #[test]
    fn misaligned_offset_is_refused() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[10]);
        let g = b.build().expect("valid");
        let mut plan = naive(&g);
        if let Some(p) = plan.placements[x.index()].as_mut() {
            p.offset = 2;
        }
        assert!(matches!(
            layout(&g, &plan),
            Err(ExecError::ChecksumPlacement {
                tensor: TensorId(0),
                ..
            })
        ));
    }
}
