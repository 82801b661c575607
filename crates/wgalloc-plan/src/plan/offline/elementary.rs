//! The elementary offset ranges between the boundaries of placed items, and the
//! canonical cover of a run of them in a segment tree over them: the coordinates of
//! [`fill`](super::fill)'s pending items and [`class_sweep`](super::class_sweep)'s
//! fixed items.

use super::prepared::Prepared;

/// The boundaries (offset and top) of the items `fixed` at `offsets`, with 0 and
/// `u64::MAX`, sorted and without repeats: elementary range `k` is
/// `[bounds[k], bounds[k + 1])`. O(F log F).
pub(crate) fn boundaries(p: &Prepared, fixed: &[usize], offsets: &[u64]) -> Vec<u64> {
    let mut bounds: Vec<u64> = Vec::with_capacity(2 * fixed.len() + 2);
    bounds.push(0);
    bounds.push(u64::MAX);
    for &i in fixed {
        bounds.push(offsets[i]);
        bounds.push(offsets[i] + p.items[i].size);
    }
    bounds.sort_unstable();
    bounds.dedup();
    bounds
}

/// The elementary ranges `[l, r)` that `[offset, offset + size)` meets (at least one).
/// O(log F).
pub(crate) fn ranges_of(bounds: &[u64], offset: u64, size: u64) -> (usize, usize) {
    let l = bounds.partition_point(|&x| x <= offset) - 1;
    let r = bounds.partition_point(|&x| x < offset + size);
    (l, r.max(l + 1))
}

/// Calls `visit` on each node of the canonical cover of the leaves `[l, r)` in a
/// segment tree of `leaves` leaves (node 1 the root, leaf `k` node `leaves + k`):
/// O(log F) nodes, disjoint, together exactly those leaves. The leaves are elementary
/// ranges of offsets here, time sections in [`OverlapIndex`](super::index::OverlapIndex).
pub(crate) fn for_each_cover(leaves: usize, l: usize, r: usize, mut visit: impl FnMut(usize)) {
    let (mut l, mut r) = (l + leaves, r + leaves);
    while l < r {
        if l & 1 == 1 {
            visit(l);
            l += 1;
        }
        if r & 1 == 1 {
            r -= 1;
            visit(r);
        }
        l >>= 1;
        r >>= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cover_is_disjoint_and_exactly_its_ranges() {
        let leaves = 16;
        for l in 0..leaves {
            for r in l + 1..=leaves {
                let mut covered = vec![0u32; leaves];
                for_each_cover(leaves, l, r, |mut v| {
                    let mut width = 1;
                    while v < leaves {
                        v *= 2;
                        width *= 2;
                    }
                    for count in &mut covered[v - leaves..v - leaves + width] {
                        *count += 1;
                    }
                });
                let want: Vec<u32> = (0..leaves).map(|k| u32::from(k >= l && k < r)).collect();
                assert_eq!(covered, want, "[{l}, {r})");
            }
        }
    }

    #[test]
    fn ranges_of_an_item_are_those_it_meets() {
        let bounds = [0, 10, 20, 30, u64::MAX];
        assert_eq!(ranges_of(&bounds, 10, 10), (1, 2));
        assert_eq!(ranges_of(&bounds, 5, 20), (0, 3));
        assert_eq!(ranges_of(&bounds, 30, 5), (3, 4));
    }
}
