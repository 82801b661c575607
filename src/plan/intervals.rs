//! Lifetime-interval problems (the MiniMalloc / TelaMalloc CSV form `id,lower,upper,size`):
//! a buffer per row, live over `[lower, upper)`, needing `size` bytes.

use std::path::Path;

use crate::graph::GraphError;

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
    /// [`crate::Error::Io`] if unreadable, else what [`IntervalProblem::parse_csv`] finds.
    pub fn read_csv(path: &Path) -> crate::Result<IntervalProblem> {
        let text = std::fs::read_to_string(path).map_err(|source| crate::Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(IntervalProblem::parse_csv(&name, &text)?)
    }

    /// Parses `id,lower,upper,size` rows. A first line that does not parse as numbers
    /// is taken as the header only if it names the columns `id,lower,upper,size`.
    ///
    /// # Errors
    /// [`GraphError::Empty`] for a file with no rows; [`GraphError::BadCsvRow`] with the
    /// 1-based line number for a row with the wrong number of fields, a value that is
    /// not a non-negative integer, `lower >= upper`, or a repeated id.
    pub fn parse_csv(name: &str, text: &str) -> Result<IntervalProblem, GraphError> {
        let mut intervals = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let row = raw.trim();
            if row.is_empty() || row.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = row.split(',').map(str::trim).collect();
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
            let id = fields[0].to_string();
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
            if !seen.insert(id.clone()) {
                return Err(GraphError::BadCsvRow {
                    line,
                    problem: format!("id {id:?} repeats an earlier row"),
                });
            }
            intervals.push(Interval {
                id,
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
    pub fn lower_bound(&self) -> u64 {
        let mut events: Vec<(u64, i8, u64)> = Vec::with_capacity(self.intervals.len() * 2);
        for iv in &self.intervals {
            events.push((iv.lower, 1, iv.size));
            events.push((iv.upper, -1, iv.size));
        }
        // Ends sort before starts at the same time: [lower, upper) is half-open.
        events.sort_unstable_by_key(|&(t, kind, _)| (t, kind));
        let (mut live, mut peak) = (0u64, 0u64);
        for (_, kind, size) in events {
            if kind > 0 {
                live = live.saturating_add(size);
                peak = peak.max(live);
            } else {
                live -= size;
            }
        }
        peak
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

    #[test]
    fn bad_rows_name_their_line() {
        let cases = [
            ("id,lower,upper,size\n1,0,3\n", 2),
            ("id,lower,upper,size\n1,0,3,4\n2,-1,3,4\n", 3),
            ("id,lower,upper,size\n1,5,5,4\n", 2),
            ("1,0,3,x\n", 1),
            ("1,0,3,4\n1,0,3,4\n", 2),
            ("1,0,3,4.5\n", 1),
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
