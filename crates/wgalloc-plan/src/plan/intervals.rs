//! Lifetime-interval problems (the MiniMalloc / TelaMalloc CSV form `id,lower,upper,size`):
//! a buffer per row, live over `[lower, upper)`, needing `size` bytes.

use std::collections::BTreeMap;
use std::path::Path;

use crate::graph::{GraphError, TensorId};
use crate::plan::PlanError;

/// One buffer of an interval problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    /// The row's id, as written in the file.
    pub id: String,
    /// First time the buffer is live.
    pub lower: u64,
    /// First time after `lower` at which it is dead again (half-open interval).
    pub upper: u64,
    /// Bytes needed.
    pub size: u64,
}

/// Ids ordered by length, then bytes (for numbers without leading zeros, their order).
fn id_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.as_bytes().cmp(b.as_bytes()))
}

/// The hash of the ids in the duplicate check of [`IntervalProblem::parse_csv`]: a
/// multiply-rotate over 8-byte words (a few times faster than the default SipHash on
/// short ids; a file crafted to collide only makes its own import slower).
#[derive(Debug, Clone, Copy, Default)]
struct IdHash;

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// See [`IdHash`].
#[derive(Debug, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x51_7C_C1_B7_27_22_0A_95);
        }
    }

    fn finish(&self) -> u64 {
        // Mix the high bits down: hashbrown takes its control bits from the top.
        self.0 ^ (self.0 >> 29)
    }
}

/// A solution of an [`IntervalProblem`]: an offset per interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntervalPlan {
    /// `offsets[i]` for interval `i` (file order): it occupies `[offset, offset + size)`.
    pub offsets: Vec<u64>,
    /// The memory the plan claims to need: every interval ends at or below it.
    pub peak: u64,
    /// The planner that made it (a strategy name such as `greedy-size` or `best`).
    pub planner: String,
}

/// A static memory allocation problem: give every interval an offset so that no two
/// intervals live at a common time overlap in memory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IntervalProblem {
    /// A name (the file stem).
    pub name: String,
    /// The buffers, in file order.
    pub intervals: Vec<Interval>,
}

impl IntervalProblem {
    /// Reads a CSV file.
    ///
    /// # Errors
    /// [`GraphError::Io`] if unreadable, else what [`IntervalProblem::parse_csv`] finds.
    pub fn read_csv(path: &Path) -> Result<IntervalProblem, GraphError> {
        let text = std::fs::read_to_string(path).map_err(|e| GraphError::io(path, &e))?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        IntervalProblem::parse_csv(&name, &text)
    }

    /// Parses `id,lower,upper,size` rows. A first line that does not parse as numbers
    /// is taken as the header only if it names the columns `id,lower,upper,size`.
    ///
    /// # Errors
    /// [`GraphError::Empty`] for a file with no rows; [`GraphError::BadCsvRow`] with the
    /// 1-based line number for a row with the wrong number of fields, a value that is
    /// not a non-negative integer, `lower >= upper`, or a repeated id.
    pub fn parse_csv(name: &str, text: &str) -> Result<IntervalProblem, GraphError> {
        // Sized from the line count, ids borrowed from the text and fields split
        // into a reused vector: a million rows load in a fraction of a second.
        let rows = text.bytes().filter(|&b| b == b'\n').count() + 1;
        let mut intervals = Vec::with_capacity(rows);
        // Ids in increasing order (by length, then bytes: "9" < "10") are distinct
        // without hashing: the rows up to the first one out of that order are checked
        // by a binary search among them, the rows after by a hash set.
        let mut ordered = 0usize;
        let mut seen: std::collections::HashSet<&str, IdHash> =
            std::collections::HashSet::with_hasher(IdHash);
        let mut fields: Vec<&str> = Vec::with_capacity(4);
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let row = raw.trim();
            if row.is_empty() || row.starts_with('#') {
                continue;
            }
            fields.clear();
            fields.extend(row.split(',').map(str::trim));
            if line == 1 && fields.first().is_some_and(|f| f.eq_ignore_ascii_case("id")) {
                let header: Vec<String> = fields.iter().map(|f| f.to_ascii_lowercase()).collect();
                if header != ["id", "lower", "upper", "size"] {
                    return Err(GraphError::BadCsvRow {
                        line,
                        problem: format!("header is {row:?}; expected id,lower,upper,size"),
                    });
                }
                continue;
            }
            if fields.len() != 4 {
                return Err(GraphError::BadCsvRow {
                    line,
                    problem: format!("{} fields; expected 4 (id,lower,upper,size)", fields.len()),
                });
            }
            let number = |column: &str, text: &str| -> Result<u64, GraphError> {
                text.parse::<u64>().map_err(|_| GraphError::BadCsvRow {
                    line,
                    problem: format!("{column} {text:?} is not a non-negative integer"),
                })
            };
            let id = fields[0];
            if id.is_empty() {
                return Err(GraphError::BadCsvRow {
                    line,
                    problem: "empty id".into(),
                });
            }
            let lower = number("lower", fields[1])?;
            let upper = number("upper", fields[2])?;
            let size = number("size", fields[3])?;
            if lower >= upper {
                return Err(GraphError::BadCsvRow {
                    line,
                    problem: format!("lower {lower} >= upper {upper}"),
                });
            }
            let in_order = ordered == intervals.len()
                && intervals
                    .last()
                    .is_none_or(|last: &Interval| id_order(&last.id, id).is_lt());
            let repeats = if in_order {
                ordered += 1;
                false
            } else {
                intervals[..ordered]
                    .binary_search_by(|iv| id_order(&iv.id, id))
                    .is_ok()
                    || !seen.insert(id)
            };
            if repeats {
                return Err(GraphError::BadCsvRow {
                    line,
                    problem: format!("id {id:?} repeats an earlier row"),
                });
            }
            intervals.push(Interval {
                id: id.to_string(),
                lower,
                upper,
                size,
            });
        }
        if intervals.is_empty() {
            return Err(GraphError::Empty);
        }
        Ok(IntervalProblem {
            name: name.to_string(),
            intervals,
        })
    }

    /// The largest total size live at one time: no placement can peak below it.
    /// Saturates at `u64::MAX` when more is live at once than 64 bits can count.
    pub fn lower_bound(&self) -> u64 {
        let mut events: Vec<(u64, i8, u64)> = Vec::with_capacity(self.intervals.len() * 2);
        for iv in &self.intervals {
            events.push((iv.lower, 1, iv.size));
            events.push((iv.upper, -1, iv.size));
        }
        // Ends sort before starts at the same time: [lower, upper) is half-open.
        events.sort_unstable_by_key(|&(t, kind, _)| (t, kind));
        // 128 bits: 2^64 intervals of 2^64 - 1 bytes cannot overflow it.
        let (mut live, mut peak) = (0u128, 0u128);
        for (_, kind, size) in events {
            if kind > 0 {
                live += u128::from(size);
                peak = peak.max(live);
            } else {
                live -= u128::from(size);
            }
        }
        u64::try_from(peak).unwrap_or(u64::MAX)
    }

    /// Checks a plan in O(n log n): one offset per interval, every interval ends at or
    /// below the peak, and no two intervals live at a common time overlap in memory.
    /// Zero-size intervals overlap nothing.
    ///
    /// # Errors
    /// [`PlanError::WrongGraph`] if the plan has another number of offsets;
    /// [`PlanError::OutOfBounds`] (the interval's index as tensor id) for an interval
    /// that ends above the peak or past `u64::MAX`; [`PlanError::IntervalOverlap`]
    /// naming the first two overlapping intervals found.
    pub fn verify(&self, plan: &IntervalPlan) -> Result<(), PlanError> {
        if plan.offsets.len() != self.intervals.len() {
            return Err(PlanError::WrongGraph {
                planned: plan.offsets.len(),
                actual: self.intervals.len(),
            });
        }
        let tensor = |i: usize| TensorId(u32::try_from(i).unwrap_or(u32::MAX));
        let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(self.intervals.len() * 2);
        for (i, (iv, &offset)) in self.intervals.iter().zip(&plan.offsets).enumerate() {
            let end = offset
                .checked_add(iv.size)
                .ok_or_else(|| PlanError::OutOfBounds {
                    tensor: tensor(i),
                    problem: format!(
                        "interval {} at offset {offset} with size {} ends past 2^64",
                        iv.id, iv.size
                    ),
                })?;
            if end > plan.peak {
                return Err(PlanError::OutOfBounds {
                    tensor: tensor(i),
                    problem: format!(
                        "interval {} ends at {end}, above the plan's peak {}",
                        iv.id, plan.peak
                    ),
                });
            }
            if iv.size > 0 {
                // `false` (an end) sorts before `true` (a start) at the same time.
                events.push((iv.lower, true, i));
                events.push((iv.upper, false, i));
            }
        }
        events.sort_unstable();
        // The memory ranges live now, by offset; pairwise disjoint while no overlap
        // has been found, so a new range can only hit its two neighbours.
        let mut live: BTreeMap<u64, usize> = BTreeMap::new();
        for (time, is_start, i) in events {
            let offset = plan.offsets[i];
            if !is_start {
                live.remove(&offset);
                continue;
            }
            let end = offset.saturating_add(self.intervals[i].size);
            let below = live.range(..=offset).next_back();
            let above = live.range(offset..).next();
            for (&other_offset, &j) in below.into_iter().chain(above) {
                let other_end = other_offset.saturating_add(self.intervals[j].size);
                if other_offset < end && offset < other_end {
                    let (a, b) = (&self.intervals[j], &self.intervals[i]);
                    return Err(PlanError::IntervalOverlap {
                        first: a.id.clone(),
                        first_offset: other_offset,
                        first_size: a.size,
                        second: b.id.clone(),
                        second_offset: offset,
                        second_size: b.size,
                        time,
                    });
                }
            }
            live.insert(offset, i);
        }
        Ok(())
    }

    /// Every buffer in memory of its own.
    pub fn naive_size(&self) -> u64 {
        self.intervals
            .iter()
            .fold(0u64, |acc, iv| acc.saturating_add(iv.size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_minimalloc_example_and_its_bound() {
        let p = IntervalProblem::parse_csv(
            "x",
            "id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n",
        )
        .expect("valid");
        assert_eq!(p.intervals.len(), 5);
        assert_eq!(p.lower_bound(), 12);
        assert_eq!(p.naive_size(), 20);
    }

    fn example() -> IntervalProblem {
        IntervalProblem::parse_csv(
            "x",
            "id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n",
        )
        .expect("valid")
    }

    fn plan(offsets: &[u64], peak: u64) -> IntervalPlan {
        IntervalPlan {
            offsets: offsets.to_vec(),
            peak,
            planner: "test".into(),
        }
    }

    #[test]
    fn verify_accepts_an_optimal_plan() {
        assert_eq!(example().verify(&plan(&[0, 0, 4, 0, 8], 12)), Ok(()));
    }

    #[test]
    fn verify_names_both_overlapping_intervals() {
        match example().verify(&plan(&[0, 0, 2, 4, 8], 12)) {
            Err(PlanError::IntervalOverlap {
                first,
                second,
                time,
                ..
            }) => {
                assert_eq!((first.as_str(), second.as_str(), time), ("b1", "b3", 0));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn verify_allows_reuse_when_one_ends_as_the_other_starts() {
        // b1 ends at 3 as b2 starts at 3: same offset is fine (half-open lifetimes).
        assert_eq!(example().verify(&plan(&[0, 0, 4, 0, 8], 12)), Ok(()));
        let p = IntervalProblem::parse_csv("x", "a,0,3,4\nb,2,5,4\n").expect("valid");
        assert!(p.verify(&plan(&[0, 2], 6)).is_err());
        assert_eq!(p.verify(&plan(&[0, 4], 8)), Ok(()));
    }

    #[test]
    fn verify_rejects_a_peak_too_low_and_a_wrong_count() {
        assert!(matches!(
            example().verify(&plan(&[0, 0, 4, 0, 8], 11)),
            Err(PlanError::OutOfBounds {
                tensor: TensorId(4),
                ..
            })
        ));
        assert!(matches!(
            example().verify(&plan(&[0, 0], 12)),
            Err(PlanError::WrongGraph {
                planned: 2,
                actual: 5
            })
        ));
        assert!(matches!(
            example().verify(&plan(&[0, 0, 4, 0, u64::MAX], u64::MAX)),
            Err(PlanError::OutOfBounds { .. })
        ));
    }

    #[test]
    fn a_bound_beyond_64_bits_saturates_instead_of_panicking() {
        let p = IntervalProblem::parse_csv("x", "a,0,2,18446744073709551615\nb,0,2,1\n")
            .expect("valid rows");
        assert_eq!(p.lower_bound(), u64::MAX);
        assert_eq!(p.naive_size(), u64::MAX);
    }

    #[test]
    fn bad_rows_name_their_line() {
        let cases = [
            ("id,lower,upper,size\n1,0,3\n", 2),
            ("id,lower,upper,size\n1,0,3,4\n2,-1,3,4\n", 3),
            ("id,lower,upper,size\n1,5,5,4\n", 2),
            ("1,0,3,x\n", 1),
            ("1,0,3,4\n1,0,3,4\n", 2),
            ("1,0,3,4.5\n", 1),
            // A repeat in the ordered prefix, found after the order breaks.
            ("1,0,3,4\n9,0,3,4\n10,0,3,4\n5,0,3,4\n9,0,3,4\n", 5),
            // A repeat among the rows after the order broke.
            ("b,0,3,4\na,0,3,4\nz,0,3,4\nz,0,3,4\n", 4),
            ("b,0,3,4\na,0,3,4\nc,0,3,4\na,0,3,4\n", 4),
        ];
        for (text, expected) in cases {
            match IntervalProblem::parse_csv("x", text) {
                Err(GraphError::BadCsvRow { line, .. }) => assert_eq!(line, expected, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert_eq!(IntervalProblem::parse_csv("x", ""), Err(GraphError::Empty));
        assert_eq!(
            IntervalProblem::parse_csv("x", "id,lower,upper,size\n"),
            Err(GraphError::Empty)
        );
    }
}
