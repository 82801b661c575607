//! The CPU's prediction of the checksum run: the exact checksum every planned tensor's
//! memory holds from the node that writes it until its last reader.

use super::hash::{
    checksum, combine, derived_word, fresh_word, input_seed, node_seed, term, weight_checksum,
    words_for,
};
use crate::exec::ExecError;
use crate::graph::{Graph, NodeId, Role, TensorId};

/// What one node input contributes to the node's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A weight (or a view of one): a constant, not read from memory.
    Constant(u32),
    /// Planned memory: the root tensor whose words are read.
    Memory(TensorId),
}

/// The CPU's exact prediction of every planned tensor's checksum in the checksum run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prediction {
    /// `checksums[i]`: the checksum of root tensor `i`'s words once written (`None` for
    /// weights, views and tensors no node writes).
    checksums: Vec<Option<u32>>,
}

/// The number of words of a planned tensor, as a `u32` (word indices are u32 on the GPU).
pub(crate) fn word_len(graph: &Graph, root: TensorId) -> Result<u32, ExecError> {
    let size = graph.extent(root).map_or(0, |e| e.size);
    let words = words_for(size);
    u32::try_from(words).map_err(|_| ExecError::ChecksumLimit {
        what: format!("words of tensor {root}"),
        needed: words,
        limit: u64::from(u32::MAX),
    })
}

/// Where node input `input` comes from: a weight constant, or the memory of its root.
pub(crate) fn source_of(graph: &Graph, input: TensorId) -> Source {
    let root = graph.root_of(input).unwrap_or(input);
    match graph.tensor(root) {
        Some(t) if t.role == Role::Weight => Source::Constant(weight_checksum(root.0)),
        _ => Source::Memory(root),
    }
}

/// The planned root a node writes, or `None` when its output is a view (an alias that
/// writes nothing) or not planned.
pub(crate) fn written_root(graph: &Graph, output: TensorId) -> Option<TensorId> {
    let tensor = graph.tensor(output)?;
    (tensor.view_of.is_none() && graph.is_planned(output)).then_some(output)
}

/// The root whose words an elementwise node derives its output from: its first
/// input's root, when the node is `inplace`, writes memory and reads that input from
/// planned memory.
pub(crate) fn elementwise_source(graph: &Graph, step: usize) -> Option<TensorId> {
    let node = graph.nodes.get(step)?;
    if !node.inplace {
        return None;
    }
    written_root(graph, node.output)?;
    match source_of(graph, *node.inputs.first()?) {
        Source::Memory(root) => Some(root),
        Source::Constant(_) => None,
    }
}

impl Prediction {
    /// Predicts every checksum of the checksum run of `graph` (a validated graph):
    /// inputs are filled with fresh words of their input seed, and each node writes words
    /// derived from a hash of everything it read (the module docs of
    /// [`crate::exec::checksum`]).
    ///
    /// # Errors
    /// [`ExecError::ChecksumGraph`] when a node reads planned memory that no node has
    /// written yet; [`ExecError::ChecksumLimit`] when a tensor has more than `u32::MAX`
    /// words.
    pub fn of(graph: &Graph) -> Result<Prediction, ExecError> {
        let count = graph.tensors.len();
        // Words are only kept for tensors a later elementwise node derives from, and
        // only until that node.
        let mut last_derive: Vec<Option<usize>> = vec![None; count];
        for step in 0..graph.nodes.len() {
            if let Some(root) = elementwise_source(graph, step) {
                last_derive[root.index()] = Some(step);
            }
        }
        let mut checksums: Vec<Option<u32>> = vec![None; count];
        let mut kept: Vec<Option<Vec<u32>>> = vec![None; count];
        for tensor in &graph.tensors {
            if tensor.role == Role::Input && graph.is_planned(tensor.id) {
                let key = input_seed(tensor.id.0);
                let len = word_len(graph, tensor.id)?;
                let (sum, words) =
                    write_words(len, last_derive[tensor.id.index()].is_some(), |i| {
                        fresh_word(key, i)
                    });
                checksums[tensor.id.index()] = Some(sum);
                kept[tensor.id.index()] = words;
            }
        }
        for (step, node) in graph.nodes.iter().enumerate() {
            let step32 = u32::try_from(step).unwrap_or(u32::MAX);
            let mut key = node_seed(step32);
            for (position, &input) in (0u32..).zip(&node.inputs) {
                let sum = match source_of(graph, input) {
                    Source::Constant(c) => c,
                    Source::Memory(root) => {
                        checksums[root.index()].ok_or_else(|| ExecError::ChecksumGraph {
                            node: Some(NodeId(step32)),
                            tensor: root,
                            problem: "reads planned memory that nothing has written".to_string(),
                        })?
                    }
                };
                key = combine(key, position, sum);
            }
            let Some(out) = written_root(graph, node.output) else {
                continue;
            };
            let len = word_len(graph, out)?;
            let keep = last_derive[out.index()].is_some();
            let (sum, words) = match elementwise_source(graph, step) {
                Some(src) => {
                    let input = kept[src.index()].take().unwrap_or_default();
                    let result = write_words(len, keep, |i| {
                        derived_word(key, i, input.get(i as usize).copied().unwrap_or(0))
                    });
                    if last_derive[src.index()].is_some_and(|last| last > step) {
                        kept[src.index()] = Some(input);
                    }
                    result
                }
                None => write_words(len, keep, |i| fresh_word(key, i)),
            };
            checksums[out.index()] = Some(sum);
            kept[out.index()] = words;
        }
        Ok(Prediction { checksums })
    }

    /// The predicted checksum of `tensor`'s memory (its root's for a view), if a
    /// planned tensor with that root is written by the run.
    pub fn checksum(&self, graph: &Graph, tensor: TensorId) -> Option<u32> {
        let root = graph.root_of(tensor)?;
        self.checksums.get(root.index()).copied().flatten()
    }
}

/// Computes `len` words with `word`, returning their checksum and, if `keep`, the words.
fn write_words(len: u32, keep: bool, word: impl Fn(u32) -> u32) -> (u32, Option<Vec<u32>>) {
    if keep {
        let words: Vec<u32> = (0..len).map(&word).collect();
        (checksum(&words), Some(words))
    } else {
        let sum = (0..len).fold(0u32, |acc, i| acc.wrapping_add(term(i, word(i))));
        (sum, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};

    #[test]
    fn input_checksum_is_the_checksum_of_its_fill_pattern() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[5]);
        let y = b.node("relu", &[x], &[5], false);
        b.mark_output(y);
        let g = b.build().expect("valid");
        let p = Prediction::of(&g).expect("prediction");
        let words: Vec<u32> = (0..5).map(|i| fresh_word(input_seed(x.0), i)).collect();
        assert_eq!(p.checksum(&g, x), Some(checksum(&words)));
    }

    #[test]
    fn elementwise_output_derives_from_its_first_inputs_words() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[3]);
        let w = b.weight("w", DType::F32, &[3]);
        let y = b.node("mul", &[x, w], &[3], true);
        b.mark_output(y);
        let g = b.build().expect("valid");
        let p = Prediction::of(&g).expect("prediction");
        let xs: Vec<u32> = (0..3).map(|i| fresh_word(input_seed(x.0), i)).collect();
        let key = combine(
            combine(node_seed(0), 0, checksum(&xs)),
            1,
            weight_checksum(w.0),
        );
        let ys: Vec<u32> = (0..3)
            .map(|i| derived_word(key, i, xs[i as usize]))
            .collect();
        assert_eq!(p.checksum(&g, y), Some(checksum(&ys)));
    }

    #[test]
    fn view_reads_its_roots_checksum_and_view_nodes_write_nothing() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[4]);
        let a = b.node("relu", &[x], &[4], false);
        let v = b.view("v", a, &[2, 2]);
        b.push_node("reshape", &[a], v, false, &[]);
        let c = b.node("neg", &[v], &[2, 2], false);
        b.mark_output(c);
        let g = b.build().expect("valid");
        let p = Prediction::of(&g).expect("prediction");
        assert_eq!(p.checksum(&g, v), p.checksum(&g, a));
        assert!(p.checksum(&g, c).is_some());
        assert_ne!(p.checksum(&g, c), p.checksum(&g, a));
    }

    #[test]
    fn odd_sized_tensor_is_predicted_over_whole_words() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::U8, &[5]);
        let g = b.build().expect("valid");
        let p = Prediction::of(&g).expect("prediction");
        let words: Vec<u32> = (0..2).map(|i| fresh_word(input_seed(x.0), i)).collect();
        assert_eq!(p.checksum(&g, x), Some(checksum(&words)));
    }

    #[test]
    fn weights_have_no_predicted_memory() {
        let mut b = GraphBuilder::new("g");
        let w = b.weight("w", DType::F32, &[4]);
        let y = b.node("neg", &[w], &[4], false);
        b.mark_output(y);
        let g = b.build().expect("valid");
        let p = Prediction::of(&g).expect("prediction");
        assert_eq!(p.checksum(&g, w), None);
        assert!(p.checksum(&g, y).is_some());
    }
}
