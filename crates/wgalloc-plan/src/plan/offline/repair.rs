//! Repair of the peak's column, for instances too large for the exact search.
//!
//! A skyline placement peaks above the lower bound when the items live at some busy
//! time step do not stack without gaps there: an item resting on a higher floor
//! elsewhere in its lifetime leaves a gap below it in that step's column. The repair
//! finds that step (the *critical section*: the busiest section in the lifetime of an
//! item that reaches the peak) and places everything again with the skyline, the items
//! live in the critical section first (in area, then size order: [`INNER`]) and the
//! others after them in each static order in turn ([`OUTER`]): among items on the same
//! floor, the column's items go first, so the column is built as one stack while the
//! rest fills around it. The first run that peaks lower is kept; its critical section
//! is added to the columns that go first, and so on, until a round brings nothing, a
//! new placement's critical section is one already first, the target is reached, the
//! work runs out or the deadline passes. Every run is a complete skyline placement, so
//! every plan kept is valid.
//!
//! Putting the column first also makes the orders that tie-break by start time or
//! lifetime length cheap: alone they pop each short item again for every long item
//! stacked over it on its floor (about 1,100 pops per item on iopddl_S_1); with the
//! column's long items already placed, about 170.

use std::time::Instant;

use super::greedy::Order;
use super::prepared::Prepared;
use super::skyline::{self, Cutoffs, SkyOrder};

/// The static orders tried for the items outside the columns, in turn: first those that
/// build nested lifetimes as stacks (start time, then lifetime length), which the
/// skyline alone can rarely afford on large instances, then the others.
const OUTER: [SkyOrder; 7] = [
    SkyOrder::Start,
    SkyOrder::Keys(super::greedy::TWA),
    SkyOrder::Keys(super::greedy::WAT),
    SkyOrder::Area,
    SkyOrder::Keys(super::greedy::TAW),
    SkyOrder::End,
    SkyOrder::Size,
];

/// The static orders tried for the column's items, in turn, with each order of
/// [`OUTER`] for the rest.
const INNER: [SkyOrder; 2] = [SkyOrder::Area, SkyOrder::Size];

/// What a repair aims at and may spend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    /// Stop once the peak is at or below this.
    pub target: u64,
    /// Heap pops all the skyline runs may spend together.
    pub work: u64,
    /// Stop once this instant has passed.
    pub deadline: Option<Instant>,
}

/// The section whose column decides `peak`: among the sections of the first item (by
/// position) whose top is the peak, the one with the most bytes live (the first on
/// ties). `None` if no item reaches `peak`.
pub(crate) fn critical_section(p: &Prepared, offsets: &[u64], peak: u64) -> Option<u32> {
    let it = p
        .items
        .iter()
        .zip(offsets)
        .find(|(it, &o)| o.saturating_add(it.size) == peak)?
        .0;
    // Reverse the comparison's tie so that the first busiest section wins.
    (it.a..it.b).max_by(|&s, &t| p.live[s as usize].cmp(&p.live[t as usize]).then(t.cmp(&s)))
}

/// The items of `first` (a flag per item position) in `inner` order, then the others in
/// `outer` order.
fn columns_first(first: &[bool], inner: &[usize], outer: &[usize]) -> Order {
    inner
        .iter()
        .copied()
        .filter(|&i| first[i])
        .chain(outer.iter().copied().filter(|&i| !first[i]))
        .collect()
}

/// Repairs the placement `offsets` (per item position, peaking at `peak`) within
/// `budget`. Returns the lowest placement found (the given one if nothing peaked lower),
/// its peak, and the heap pops spent.
pub(crate) fn repair(
    p: &Prepared,
    mut offsets: Vec<u64>,
    mut peak: u64,
    budget: &Budget,
) -> (Vec<u64>, u64, u64) {
    let mut spent = 0u64;
    let mut first = vec![false; p.items.len()];
    let mut columns: Vec<u32> = Vec::new();
    let mut inners: Vec<Option<Order>> = vec![None; INNER.len()];
    let mut outers: Vec<Option<Order>> = vec![None; OUTER.len()];
    let expired = || budget.deadline.is_some_and(|d| Instant::now() >= d);
    while peak > budget.target && spent < budget.work && !expired() {
        let Some(section) = critical_section(p, &offsets, peak) else {
            break;
        };
        if columns.contains(&section) {
            break;
        }
        columns.push(section);
        for (flag, it) in first.iter_mut().zip(&p.items) {
            *flag |= it.a <= section && section < it.b;
        }
        let mut improved = false;
        // Each outer order with every inner order before the next outer order.
        let pairs = (0..OUTER.len()).flat_map(|o| (0..INNER.len()).map(move |i| (i, o)));
        for (i, o) in pairs {
            if spent >= budget.work || expired() {
                break;
            }
            let inner = inners[i].get_or_insert_with(|| INNER[i].order(p));
            let outer = outers[o].get_or_insert_with(|| OUTER[o].order(p));
            let order = columns_first(&first, inner, outer);
            let limits = Cutoffs {
                stop_at: peak,
                work: budget.work - spent,
                deadline: budget.deadline,
            };
            let run = skyline::place_within(p, &order, &limits);
            spent = spent.saturating_add(run.pops);
            if let Some((placed, placed_peak)) = run.placed {
                offsets = placed;
                peak = placed_peak;
                improved = true;
                break;
            }
        }
        if !improved {
            break;
        }
    }
    (offsets, peak, spent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::offline::{interval_ranges, workload, LiveRange};
    use proptest::prelude::*;

    /// Panics unless the placement is valid: a sweep over time keeping the live items
    /// ordered by offset (O(n log n), for large instances).
    pub(crate) fn assert_valid_sweep(p: &Prepared, offsets: &[u64], peak: u64) {
        let mut events: Vec<(u32, bool, usize)> = Vec::new();
        for (i, it) in p.items.iter().enumerate() {
            assert!(offsets[i] + it.size <= peak, "item {i} above the peak");
            events.push((it.a, true, i));
            events.push((it.b, false, i));
        }
        // Ends (false) before starts (true) at the same section.
        events.sort_unstable();
        let mut live = std::collections::BTreeMap::new();
        for (_, start, i) in events {
            let (lo, hi) = (offsets[i], offsets[i] + p.items[i].size);
            if !start {
                live.remove(&(lo, i));
                continue;
            }
            if let Some((&(_, j), &top)) = live.range(..(lo, i)).next_back() {
                assert!(top <= lo, "items {j} and {i} overlap");
            }
            if let Some((&(o, j), _)) = live.range((lo, i)..).next() {
                assert!(hi <= o, "items {i} and {j} overlap");
            }
            live.insert((lo, i), hi);
        }
    }

    fn r(start: u64, end: u64, size: u64) -> LiveRange {
        LiveRange { start, end, size }
    }

    fn unlimited(target: u64) -> Budget {
        Budget {
            target,
            work: u64::MAX,
            deadline: None,
        }
    }

    fn area_skyline(p: &Prepared) -> (Vec<u64>, u64) {
        skyline::place(p, &SkyOrder::Area.order(p))
    }

    #[test]
    fn critical_section_is_the_busiest_under_the_peak_item() {
        // Item 1 reaches the peak; sections 1 and 2 of its lifetime hold 3 and 5 bytes.
        let p = Prepared::new(&[r(0, 2, 2), r(1, 3, 1), r(2, 3, 4)], 1).expect("valid");
        assert_eq!(p.live, vec![2, 3, 5]);
        assert_eq!(critical_section(&p, &[0, 4, 0], 5), Some(2));
        assert_eq!(critical_section(&p, &[0, 4, 0], 9), None);
    }

    #[test]
    fn column_items_come_first_in_the_inner_order() {
        let first = [false, true, false, true];
        assert_eq!(
            columns_first(&first, &[3, 2, 1, 0], &[0, 1, 2, 3]),
            vec![3, 1, 0, 2]
        );
    }

    #[test]
    fn repair_closes_the_gap_the_area_order_leaves() {
        // By area: [0,3) at 0, then on floor 0 [4,8) before [3,5), so [3,5) rests on
        // it at 1 and [2,4) on [3,5) at 3: peak 6, with a gap at [0,1) in section 3.
        // With the column of [2,4)'s busiest section first, the rest by start: 5, the
        // bound.
        let ranges = [r(2, 4, 3), r(3, 5, 2), r(4, 8, 1), r(0, 3, 2)];
        let p = Prepared::new(&ranges, 1).expect("valid");
        let (offsets, peak) = area_skyline(&p);
        assert_eq!((peak, p.lower_bound), (6, 5));
        let (repaired, repaired_peak, spent) = repair(&p, offsets, peak, &unlimited(0));
        p.assert_valid(&repaired, repaired_peak);
        assert_eq!(repaired_peak, 5);
        assert!(spent > 0);
    }

    #[test]
    fn repair_stops_at_once_at_the_target_and_out_of_work() {
        let p =
            Prepared::new(&interval_ranges(&workload::training_step(5, 600)), 1).expect("valid");
        let (offsets, peak) = area_skyline(&p);
        let (same, same_peak, spent) = repair(&p, offsets.clone(), peak, &unlimited(peak));
        assert_eq!((same, same_peak, spent), (offsets.clone(), peak, 0));
        let none = Budget {
            work: 0,
            ..unlimited(0)
        };
        assert_eq!(repair(&p, offsets.clone(), peak, &none).2, 0);
        let past = Budget {
            deadline: Some(Instant::now()),
            ..unlimited(0)
        };
        assert_eq!(repair(&p, offsets, peak, &past).2, 0);
    }

    #[test]
    fn repair_is_valid_and_never_worse_on_generated_training_steps() {
        for seed in 0..4 {
            let problem = workload::training_step(seed, 3_000);
            let p = Prepared::new(&interval_ranges(&problem), 1).expect("valid");
            let (offsets, peak) = area_skyline(&p);
            let budget = Budget {
                work: 400 * p.items.len() as u64,
                ..unlimited(p.lower_bound)
            };
            let (repaired, repaired_peak, spent) = repair(&p, offsets, peak, &budget);
            assert_valid_sweep(&p, &repaired, repaired_peak);
            assert!(repaired_peak <= peak && repaired_peak >= p.lower_bound);
            assert!(spent <= budget.work + 1, "seed {seed}: {spent}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn repaired_placements_are_valid(
            raw in prop::collection::vec((0u64..30, 1u64..12, 1u64..9), 1..40),
            work in 1u64..5_000,
        ) {
            let ranges: Vec<LiveRange> =
                raw.iter().map(|&(s, len, size)| r(s, s + len, size)).collect();
            let p = Prepared::new(&ranges, 1).expect("valid");
            let (offsets, peak) = area_skyline(&p);
            let budget = Budget { work, ..unlimited(p.lower_bound) };
            let (repaired, repaired_peak, _) = repair(&p, offsets, peak, &budget);
            p.assert_valid(&repaired, repaired_peak);
            prop_assert!(repaired_peak <= peak);
            prop_assert!(repaired_peak >= p.lower_bound);
        }
    }
}
