//! The one rule for the bytes a tensor occupies and the range a kernel may bind for it.
//!
//! Every layer asks this module instead of restating the rule: the planners (how many
//! bytes to reserve for a root), [`crate::plan::Plan::verify`], the device's limit check,
//! the executor's bindings and the checksum proof.
//!
//! * A non-view occupies its own `size` bytes from the start of its placement.
//! * A view aliases its root. The graph model has no view offset (tensor-graph-trace/1
//!   records none), so a view starts at its root's first byte and occupies
//!   `min(view size, root size)` bytes of it:
//!   - a **broadcast** view (`expand`, stride 0) larger than its root occupies the
//!     root's bytes and no more: the elements it repeats are the root's;
//!   - a **strided** view of the same size (`transpose`, `permute`) occupies the root;
//!   - a **partial** view (a `getitem` of a packed output, a `narrow`) occupies a prefix.
//!
//!   A view of a view resolves to the root; clamping by the root alone is exact, since
//!   every link starts at the root's first byte.
//! * Kernels bind whole 4-byte words (wgpu requires storage binding sizes to be
//!   multiples of 4): the **binding size** is the occupied size rounded up to 4. A
//!   planner reserves at least its root's binding size, so the binding of the root and
//!   of every view of it lies inside the root's reservation.
//! * A tensor of size 0 occupies nothing and cannot be bound (a zero-size binding is
//!   invalid in wgpu); planners reserve nothing for it and kernels skip it.

use super::{Graph, TensorId};

/// The granule of a storage binding: binding sizes are multiples of this many bytes.
pub const BINDING_GRANULE: u64 = 4;

/// Rounds a byte size up to the binding granule (4 bytes); `None` on overflow.
pub fn binding_size(size: u64) -> Option<u64> {
    size.checked_next_multiple_of(BINDING_GRANULE)
}

/// The bytes a tensor occupies inside its root's memory (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// The tensor that owns the memory (the tensor itself for a non-view).
    pub root: TensorId,
    /// Byte offset from the root's first byte (0 in the current graph model).
    pub offset: u64,
    /// Bytes occupied, exact (not rounded): at most the root's size.
    pub size: u64,
}

impl Extent {
    /// The bytes a kernel binds: [`Extent::size`] rounded up to 4; `None` on overflow.
    pub fn binding_size(&self) -> Option<u64> {
        binding_size(self.size)
    }

    /// One past the last byte a binding covers, counted from the root's first byte;
    /// `None` on overflow.
    pub fn binding_end(&self) -> Option<u64> {
        self.offset.checked_add(self.binding_size()?)
    }

    /// Whether there is nothing to bind (size 0).
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
}

impl Graph {
    /// Where `id`'s bytes are: its root, the offset in the root and the bytes occupied
    /// (see the module docs of [`crate::graph::extent`](self)). `None` for an unknown id
    /// or a cyclic view chain.
    pub fn extent(&self, id: TensorId) -> Option<Extent> {
        let tensor = self.tensor(id)?;
        let root = self.root_of(id)?;
        let root_size = self.tensor(root)?.size;
        Some(Extent {
            root,
            offset: 0,
            size: tensor.size.min(root_size),
        })
    }

    /// Bytes a planner must reserve for the planned tensor `id` (before rounding to a
    /// buffer type's alignment): its binding size, so that it and every view of it can
    /// be bound. `None` for an unknown id or a size that overflows when rounded (which
    /// [`Graph::validate`] refuses).
    pub fn reserved_size(&self, id: TensorId) -> Option<u64> {
        binding_size(self.tensor(id)?.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};

    #[test]
    fn binding_sizes_round_up_to_whole_words() {
        assert_eq!(binding_size(0), Some(0));
        assert_eq!(binding_size(1), Some(4));
        assert_eq!(binding_size(6), Some(8));
        assert_eq!(binding_size(8), Some(8));
        assert_eq!(binding_size(u64::MAX - 2), None);
    }

    #[test]
    fn a_non_view_occupies_its_own_bytes() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F16, &[3]);
        let g = b.build().expect("valid");
        let e = g.extent(x).expect("extent");
        assert_eq!((e.root, e.offset, e.size), (x, 0, 6));
        assert_eq!(e.binding_size(), Some(8));
        assert_eq!(g.reserved_size(x), Some(8));
    }

    #[test]
    fn a_broadcast_view_occupies_only_its_roots_bytes() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[32]);
        let wide = b.view("expand", x, &[128, 32]);
        let g = b.build().expect("valid");
        let e = g.extent(wide).expect("extent");
        assert_eq!((e.root, e.size), (x, 128));
        assert_eq!(e.binding_end(), Some(128));
    }

    #[test]
    fn a_partial_view_of_a_view_occupies_a_prefix_of_the_root() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[64]);
        let reshaped = b.view("reshape", x, &[8, 8]);
        let half = b.view("narrow", reshaped, &[4, 8]);
        let g = b.build().expect("valid");
        let e = g.extent(half).expect("extent");
        assert_eq!((e.root, e.offset, e.size), (x, 0, 128));
    }

    #[test]
    fn an_empty_tensor_has_nothing_to_bind() {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, &[0]);
        let g = b.build().expect("valid");
        assert!(g.extent(x).expect("extent").is_empty());
        assert_eq!(g.reserved_size(x), Some(0));
    }

    #[test]
    fn unknown_ids_have_no_extent() {
        let g = GraphBuilder::new("g").build().expect("valid");
        assert_eq!(g.extent(TensorId(3)), None);
        assert_eq!(g.reserved_size(TensorId(3)), None);
    }
}
