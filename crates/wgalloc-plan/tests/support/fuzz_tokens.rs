//! Test support shared by the fuzz suites of both crates (`import_fuzz.rs` here and
//! the root crate's `tests/checkpoint_fuzz.rs`, which includes this file by path).

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
