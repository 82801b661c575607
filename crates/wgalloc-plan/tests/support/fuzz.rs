//! What the fuzz suites of both crates share (`import_fuzz.rs` here and the root
//! crate's `tests/checkpoint_fuzz.rs`, which includes this file by path): the case
//! count, the hang guard, the byte-level edits and the tokens they insert.

use std::time::{Duration, Instant};

use proptest::sample::Index;

/// Cases per property: `default`, or `WGALLOC_FUZZ_CASES`.
pub fn cases(default: u32) -> u32 {
    std::env::var("WGALLOC_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A parse or load of the suites' inputs (at most about 550 KB) that takes this long
/// is a hang.
pub const SLOW: Duration = Duration::from_secs(5);

/// Runs `f`, failing the case if it takes longer than [`SLOW`].
pub fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    assert!(took < SLOW, "{what} took {took:?}: a hang");
    out
}

/// Tokens that replace a number or land between two bytes: the limits of 32 and 64
/// bits and one past them, 2^60, negatives, fractions, exponents past f64, NaN and
/// infinity spellings, and other JSON types.
pub const NASTY: [&str; 24] = [
    "0",
    "-1",
    "-0",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "1152921504606846976",
    "-9223372036854775808",
    "99999999999999999999999999999999",
    "1.5",
    "1e3",
    "1e999",
    "-1e999",
    "NaN",
    "nan",
    "Infinity",
    "null",
    "true",
    "\"7\"",
    "[]",
    "{}",
    "",
    ",",
];

/// The `[start, end)` of every run of ASCII digits, with a leading `-` if any.
pub fn digit_runs(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let start = if i > 0 && bytes[i - 1] == b'-' {
                i - 1
            } else {
                i
            };
            let mut end = i;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            runs.push((start, end));
            i = end;
        } else {
            i += 1;
        }
    }
    runs
}

/// One byte-level edit of a file. `bool`: the edit lands in the file's hot part (its
/// first `hot` bytes, see [`apply`]: a header) rather than anywhere.
#[derive(Debug, Clone)]
pub enum Edit {
    /// XOR a byte with a non-zero mask.
    Flip(bool, Index, u8),
    /// Cut the file at a point.
    Truncate(Index),
    /// Remove up to `len` bytes from a point.
    Delete(bool, Index, usize),
    /// Repeat a range right after itself.
    Duplicate(bool, Index, usize),
    /// Copy a range to another point.
    Splice(Index, usize, Index),
    /// Replace one run of digits (with its sign) of the hot part by a [`NASTY`] token.
    Number(Index, Index),
    /// Insert a [`NASTY`] token at a point of the hot part.
    Insert(Index, Index),
}

/// Applies an edit; `hot` is where the hot part ends (`usize::MAX`: the whole file).
pub fn apply(bytes: &mut Vec<u8>, edit: &Edit, hot: usize) {
    let span = |in_hot: bool, len: usize| if in_hot { hot.min(len) } else { len };
    // A point in `0..=span`, so that an edit can reach the end of its span.
    let point = |at: &Index, span: usize| at.index(span + 1);
    match edit {
        Edit::Flip(h, at, mask) => {
            let span = span(*h, bytes.len());
            if span > 0 {
                bytes[at.index(span)] ^= mask;
            }
        }
        Edit::Truncate(at) => bytes.truncate(point(at, bytes.len())),
        Edit::Delete(h, at, len) => {
            let start = point(at, span(*h, bytes.len()));
            let end = (start + len).min(bytes.len());
            bytes.drain(start..end);
        }
        Edit::Duplicate(h, at, len) => {
            let start = point(at, span(*h, bytes.len()));
            let end = (start + len).min(bytes.len());
            let copy = bytes[start..end].to_vec();
            bytes.splice(end..end, copy);
        }
        Edit::Splice(from, len, to) => {
            let start = point(from, bytes.len());
            let end = (start + len).min(bytes.len());
            let copy = bytes[start..end].to_vec();
            let to = point(to, bytes.len());
            bytes.splice(to..to, copy);
        }
        Edit::Number(at, token) => {
            let runs = digit_runs(&bytes[..span(true, bytes.len())]);
            if !runs.is_empty() {
                let (start, end) = runs[at.index(runs.len())];
                bytes.splice(start..end, NASTY[token.index(NASTY.len())].bytes());
            }
        }
        Edit::Insert(at, token) => {
            let i = point(at, span(true, bytes.len()));
            bytes.splice(i..i, NASTY[token.index(NASTY.len())].bytes());
        }
    }
}
