//! Random mutations of real traces and interval CSVs: whatever the bytes, the importers
//! return a graph (or problem) that validates, or a typed [`GraphError`]; never a
//! panic, a hang or an allocation out of proportion to the input. Byte edits (flips,
//! truncation, deleted, duplicated and spliced ranges, numbers swapped for limits,
//! negatives, fractions and NaN) and structured edits (fields of the wrong type,
//! missing fields, ids rewired past the end, views in cycles, duplicated rows).
//!
//! Cases per property: 1024, or `WGALLOC_FUZZ_CASES`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Value};
use wgalloc_plan::graph::{parse_trace, read_trace, write_trace, Graph, GraphError};
use wgalloc_plan::plan::IntervalProblem;

fn repo(dir: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(dir)
}

/// The shipped traces (`traces/*.json`), read once.
fn traces() -> &'static [String] {
    static TRACES: OnceLock<Vec<String>> = OnceLock::new();
    TRACES.get_or_init(|| {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(repo("traces"))
            .expect("traces folder")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        paths.sort();
        let mut texts: Vec<String> = paths
            .iter()
            .map(|p| std::fs::read_to_string(p).expect("a trace"))
            .collect();
        texts.push(SMALL_TRACE.to_string());
        texts
    })
}

/// The small CSVs of `dsa/` (the 600 KB one is left out to keep cases fast).
fn csvs() -> &'static [String] {
    static CSVS: OnceLock<Vec<String>> = OnceLock::new();
    CSVS.get_or_init(|| {
        [
            "input.12.csv",
            "A.1048576.csv",
            "F.1048576.csv",
            "resnet50_somas.csv",
        ]
        .iter()
        .map(|f| std::fs::read_to_string(repo("dsa").join(f)).expect("a csv"))
        .collect()
    })
}

/// Every role, a view, an in-place node: small enough for thousands of cases.
const SMALL_TRACE: &str = include_str!("data/small_trace.json");

#[path = "support/fuzz.rs"]
mod fuzz;
use fuzz::{apply, cases, timed, Edit, NASTY};

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (any::<Index>(), 1..=255u8).prop_map(|(at, mask)| Edit::Flip(false, at, mask)),
        1 => any::<Index>().prop_map(Edit::Truncate),
        1 => (any::<Index>(), 1..=256usize).prop_map(|(at, len)| Edit::Delete(false, at, len)),
        1 => (any::<Index>(), 1..=256usize).prop_map(|(at, len)| Edit::Duplicate(false, at, len)),
        1 => (any::<Index>(), 1..=256usize, any::<Index>())
            .prop_map(|(from, len, to)| Edit::Splice(from, len, to)),
        3 => (any::<Index>(), any::<Index>()).prop_map(|(at, token)| Edit::Number(at, token)),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(at, token)| Edit::Insert(at, token)),
    ]
}

/// What every accepted trace must satisfy: it validates, and it writes and reads back
/// as the same graph.
fn check_accepted(graph: &Graph) -> Result<(), TestCaseError> {
    prop_assert_eq!(graph.validate(), Ok(()));
    let text = write_trace(graph).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let again = parse_trace(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&again.tensors, &graph.tensors);
    prop_assert_eq!(&again.nodes, &graph.nodes);
    Ok(())
}

/// What every accepted CSV must satisfy: non-empty ids, each once, `lower < upper`,
/// and a lower bound no larger than the naive size.
fn check_accepted_csv(problem: &IntervalProblem) -> Result<(), TestCaseError> {
    prop_assert!(!problem.intervals.is_empty());
    let mut ids = HashSet::new();
    for iv in &problem.intervals {
        prop_assert!(!iv.id.is_empty());
        prop_assert!(iv.lower < iv.upper, "{iv:?}");
        prop_assert!(ids.insert(iv.id.as_str()), "id {} twice", iv.id);
    }
    prop_assert!(problem.lower_bound() <= problem.naive_size());
    Ok(())
}

/// A field of a trace object set to a value of any JSON type.
#[derive(Debug, Clone)]
enum Poke {
    /// Set a field of the top-level object.
    Top(&'static str, Value),
    /// Set a field of a tensor.
    Tensor(Index, &'static str, Value),
    /// Set a field of a node.
    Node(Index, &'static str, Value),
    /// Remove a required field of a tensor.
    DropTensorField(Index, &'static str),
    /// Remove a required field of a node.
    DropNodeField(Index, &'static str),
    /// Point one of a node's inputs (or its output) at any tensor, or past the end.
    Rewire(Index, Index, Index),
    /// Make a tensor a view of any tensor: itself, a later one, or one past the end.
    MakeView(Index, Index),
    /// Give a tensor another role.
    Role(Index, &'static str),
    /// Swap two nodes (reads before writes, producers twice).
    SwapNodes(Index, Index),
    /// Remove a tensor (ids no longer match positions).
    DropTensor(Index),
    /// Repeat a node at another step.
    CopyNode(Index, Index),
}

const TOP_FIELDS: [&str; 5] = ["format", "name", "dtype_bytes", "tensors", "nodes"];
const TENSOR_FIELDS: [&str; 6] = ["id", "name", "role", "bytes", "shape", "view_of"];
const NODE_FIELDS: [&str; 4] = ["op", "inputs", "output", "elementwise"];
const ROLES: [&str; 6] = [
    "input",
    "weight",
    "intermediate",
    "output",
    "view",
    "banana",
];
/// Fields whose absence is always an error.
const REQUIRED_TENSOR: [&str; 3] = ["id", "role", "bytes"];
const REQUIRED_NODE: [&str; 3] = ["op", "inputs", "output"];

/// A JSON value of any type, with the integer limits over-represented.
fn junk() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop::sample::select(vec![
            0u64,
            1,
            2,
            3,
            4,
            8,
            u64::from(u32::MAX),
            1 << 32,
            1 << 60,
            u64::MAX - 3,
            u64::MAX,
        ])
        .prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(vec!["", "input", "view", "tensor-graph-trace/1", "ü\u{0}"])
            .prop_map(Value::from),
        prop::collection::vec(prop_oneof![0u64..8, Just(u64::MAX), Just(1 << 32)], 0..5)
            .prop_map(|v| json!(v)),
        Just(json!([[1, 2], -1, "x"])),
        Just(json!({"id": 0})),
    ]
}

fn poke() -> impl Strategy<Value = Poke> {
    let idx = any::<Index>;
    prop_oneof![
        1 => (prop::sample::select(&TOP_FIELDS[..]), junk()).prop_map(|(f, v)| Poke::Top(f, v)),
        3 => (idx(), prop::sample::select(&TENSOR_FIELDS[..]), junk())
            .prop_map(|(i, f, v)| Poke::Tensor(i, f, v)),
        3 => (idx(), prop::sample::select(&NODE_FIELDS[..]), junk())
            .prop_map(|(i, f, v)| Poke::Node(i, f, v)),
        1 => (idx(), prop::sample::select(&REQUIRED_TENSOR[..]))
            .prop_map(|(i, f)| Poke::DropTensorField(i, f)),
        1 => (idx(), prop::sample::select(&REQUIRED_NODE[..]))
            .prop_map(|(i, f)| Poke::DropNodeField(i, f)),
        3 => (idx(), idx(), idx()).prop_map(|(n, slot, to)| Poke::Rewire(n, slot, to)),
        3 => (idx(), idx()).prop_map(|(t, of)| Poke::MakeView(t, of)),
        2 => (idx(), prop::sample::select(&ROLES[..])).prop_map(|(t, r)| Poke::Role(t, r)),
        1 => (idx(), idx()).prop_map(|(a, b)| Poke::SwapNodes(a, b)),
        1 => idx().prop_map(Poke::DropTensor),
        1 => (idx(), idx()).prop_map(|(a, b)| Poke::CopyNode(a, b)),
    ]
}

/// Whether a poke makes the trace invalid whatever else it holds.
fn certainly_invalid(poke: &Poke, tensors: usize) -> bool {
    match poke {
        Poke::DropTensorField(..) | Poke::DropNodeField(..) => true,
        Poke::Top(field, value) => match *field {
            "format" => value.as_str() != Some("tensor-graph-trace/1"),
            // An empty list may be part of an empty graph, which is valid.
            "tensors" | "nodes" => !matches!(value, Value::Array(a) if a.is_empty()),
            _ => false,
        },
        // An id at or past the end is unknown.
        Poke::Rewire(_, _, to) => to.index(tensors + 2) >= tensors,
        _ => false,
    }
}

fn array<'a>(doc: &'a mut Value, key: &str) -> Option<&'a mut Vec<Value>> {
    doc.get_mut(key).and_then(Value::as_array_mut)
}

/// Sets `field` of `object` if it is an object; returns whether it was.
fn set(object: &mut Value, field: &str, value: Value) -> bool {
    object
        .as_object_mut()
        .map(|o| o.insert(field.to_string(), value))
        .is_some()
}

/// The entry at `at` of the array `key` of `doc`, if the array has entries.
fn entry<'a>(doc: &'a mut Value, key: &str, at: &Index) -> Option<&'a mut Value> {
    let list = array(doc, key)?;
    if list.is_empty() {
        return None;
    }
    let i = at.index(list.len());
    list.get_mut(i)
}

/// Applies a structured edit; returns whether it changed anything.
fn poke_trace(doc: &mut Value, poke: &Poke) -> bool {
    let tensors = array(doc, "tensors").map_or(0, |t| t.len());
    match poke {
        Poke::Top(field, value) => set(doc, field, value.clone()),
        Poke::Tensor(i, field, value) => {
            entry(doc, "tensors", i).is_some_and(|t| set(t, field, value.clone()))
        }
        Poke::Node(i, field, value) => {
            entry(doc, "nodes", i).is_some_and(|n| set(n, field, value.clone()))
        }
        Poke::DropTensorField(i, field) => entry(doc, "tensors", i)
            .and_then(Value::as_object_mut)
            .is_some_and(|o| o.remove(*field).is_some()),
        Poke::DropNodeField(i, field) => entry(doc, "nodes", i)
            .and_then(Value::as_object_mut)
            .is_some_and(|o| o.remove(*field).is_some()),
        Poke::Rewire(node, slot, to) => {
            let to = Value::from(to.index(tensors + 2));
            let Some(node) = entry(doc, "nodes", node) else {
                return false;
            };
            match node.get_mut("inputs").and_then(Value::as_array_mut) {
                Some(inputs) if slot.index(inputs.len() + 1) < inputs.len() => {
                    let i = slot.index(inputs.len() + 1);
                    inputs[i] = to;
                    true
                }
                _ => set(node, "output", to),
            }
        }
        Poke::MakeView(t, of) => entry(doc, "tensors", t).is_some_and(|t| {
            set(t, "role", json!("view")) && set(t, "view_of", json!(of.index(tensors + 2)))
        }),
        Poke::Role(t, role) => {
            entry(doc, "tensors", t).is_some_and(|t| set(t, "role", json!(role)))
        }
        Poke::SwapNodes(a, b) => match array(doc, "nodes") {
            Some(n) if !n.is_empty() => {
                let len = n.len();
                n.swap(a.index(len), b.index(len));
                true
            }
            _ => false,
        },
        Poke::DropTensor(a) => match array(doc, "tensors") {
            Some(t) if !t.is_empty() => {
                let n = t.len();
                t.remove(a.index(n));
                true
            }
            _ => false,
        },
        Poke::CopyNode(a, b) => match array(doc, "nodes") {
            Some(n) if !n.is_empty() => {
                let len = n.len();
                let copy = n[a.index(len)].clone();
                n.insert(b.index(len + 1), copy);
                true
            }
            _ => false,
        },
    }
}

/// One structured edit of a CSV's rows.
#[derive(Debug, Clone)]
enum RowEdit {
    /// Replace one field of a row by a [`NASTY`] token.
    Field(Index, Index, Index),
    /// Repeat a data row further down (its id then repeats).
    RepeatRow(Index, Index),
    /// Swap a row's lower and upper.
    SwapBounds(Index),
    /// Remove a row's last field.
    DropField(Index),
    /// Add a field to a row.
    ExtraField(Index),
    /// Replace the header by a mangled one.
    Header(&'static str),
}

fn row_edit() -> impl Strategy<Value = RowEdit> {
    let idx = any::<Index>;
    prop_oneof![
        4 => (idx(), idx(), idx()).prop_map(|(r, c, t)| RowEdit::Field(r, c, t)),
        1 => (idx(), idx()).prop_map(|(r, at)| RowEdit::RepeatRow(r, at)),
        1 => idx().prop_map(RowEdit::SwapBounds),
        1 => idx().prop_map(RowEdit::DropField),
        1 => idx().prop_map(RowEdit::ExtraField),
        1 => prop::sample::select(vec![
            "id,lower,upper",
            "ID,LOWER,UPPER,SIZE",
            "id,upper,lower,size",
            "id,lower,upper,size,extra",
            "",
            "# comment",
            "0,0,1,1",
        ])
        .prop_map(RowEdit::Header),
    ]
}

/// Whether a line is a row that cannot parse: not blank, not a comment, and not of
/// four fields.
fn wrong_width(line: &str) -> bool {
    let row = line.trim();
    !row.is_empty() && !row.starts_with('#') && row.split(',').count() != 4
}

/// Applies a row edit to data rows (never the header, except [`RowEdit::Header`]);
/// returns whether the file is then certainly invalid, whatever the other rows hold.
fn edit_rows(lines: &mut Vec<String>, edit: &RowEdit) -> bool {
    let data = lines.len().saturating_sub(1);
    if data == 0 {
        return false;
    }
    let row = |i: &Index| 1 + i.index(data);
    match edit {
        RowEdit::Field(r, c, t) => {
            let r = row(r);
            let mut fields: Vec<String> = lines[r].split(',').map(str::to_string).collect();
            let c = c.index(fields.len());
            fields[c] = NASTY[t.index(NASTY.len())].to_string();
            lines[r] = fields.join(",");
            false
        }
        RowEdit::RepeatRow(r, at) => {
            let r = row(r);
            let copy = lines[r].clone();
            let at = r + 1 + at.index(lines.len() - r);
            let trimmed = copy.trim();
            let counts = !trimmed.is_empty() && !trimmed.starts_with('#');
            lines.insert(at, copy);
            // Two equal rows: both bad, or one id twice.
            counts
        }
        RowEdit::SwapBounds(r) => {
            let r = row(r);
            let fields: Vec<&str> = lines[r].split(',').collect();
            let bounds = fields
                .get(1..3)
                .map(|b| (b[0].trim().parse::<u64>(), b[1].trim().parse::<u64>()));
            match (fields.len(), bounds) {
                (4, Some((Ok(lower), Ok(upper)))) if lower < upper => {
                    lines[r] = format!("{},{},{},{}", fields[0], fields[2], fields[1], fields[3]);
                    true
                }
                _ => false,
            }
        }
        RowEdit::DropField(r) => {
            let r = row(r);
            if let Some(comma) = lines[r].rfind(',') {
                lines[r].truncate(comma);
            }
            wrong_width(&lines[r])
        }
        RowEdit::ExtraField(r) => {
            let r = row(r);
            lines[r].push_str(",0");
            wrong_width(&lines[r])
        }
        RowEdit::Header(h) => {
            lines[0] = (*h).to_string();
            false
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(1024)))]

    /// Byte edits of a shipped trace give a graph that validates and round-trips, or
    /// a typed error; never a panic or a hang.
    #[test]
    fn mutated_trace_bytes_never_panic(
        which in any::<Index>(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let all = traces();
        let mut bytes = all[which.index(all.len())].as_bytes().to_vec();
        for e in &edits {
            apply(&mut bytes, e, usize::MAX);
        }
        let text = String::from_utf8_lossy(&bytes);
        match timed("parse_trace", || parse_trace(&text)) {
            Ok(graph) => check_accepted(&graph)?,
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    /// A trace cut anywhere before its last brace is never a graph.
    #[test]
    fn truncated_traces_are_errors(which in any::<Index>(), cut in any::<Index>()) {
        let all = traces();
        let text = all[which.index(all.len())].trim_end();
        let cut = cut.index(text.len());
        let Some(prefix) = text.get(..cut) else {
            return Ok(());
        };
        let e = parse_trace(prefix).expect_err("a strict prefix of a JSON object");
        prop_assert!(
            matches!(e, GraphError::NotJson { .. } | GraphError::Empty),
            "{e:?}"
        );
    }

    /// Well-formed JSON with fields of the wrong type, missing fields, ids past the
    /// end, views in cycles and nodes out of order: a valid graph or a typed error,
    /// and always an error where the edit cannot leave the trace valid.
    #[test]
    fn structurally_mutated_traces_are_errors_not_panics(
        which in any::<Index>(),
        pokes in prop::collection::vec(poke(), 1..5),
    ) {
        let all = traces();
        let mut doc: Value = serde_json::from_str(&all[which.index(all.len())]).expect("json");
        let mut invalid = false;
        for p in &pokes {
            let tensors = array(&mut doc, "tensors").map_or(0, |t| t.len());
            let changed = poke_trace(&mut doc, p);
            // Later pokes may undo an earlier one's damage: only the last one counts.
            invalid = changed && certainly_invalid(p, tensors);
        }
        let text = doc.to_string();
        match timed("parse_trace", || parse_trace(&text)) {
            Ok(graph) => {
                prop_assert!(!invalid, "accepted after {:?}", pokes.last());
                check_accepted(&graph)?;
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    /// Byte edits of a shipped interval CSV give a problem whose rows are well formed,
    /// or a typed error.
    #[test]
    fn mutated_csv_bytes_never_panic(
        which in any::<Index>(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let all = csvs();
        let mut bytes = all[which.index(all.len())].as_bytes().to_vec();
        for e in &edits {
            apply(&mut bytes, e, usize::MAX);
        }
        let text = String::from_utf8_lossy(&bytes);
        match timed("parse_csv", || IntervalProblem::parse_csv("fuzz", &text)) {
            Ok(problem) => check_accepted_csv(&problem)?,
            Err(e) => prop_assert!(
                matches!(e, GraphError::BadCsvRow { .. } | GraphError::Empty),
                "{e:?}"
            ),
        }
    }

    /// Rows with nasty numbers, a repeated id, swapped bounds, a field too few or too
    /// many, a mangled header: a well-formed problem or a `BadCsvRow`, and always an
    /// error for the edits no CSV survives.
    #[test]
    fn structurally_mutated_csvs_are_errors_not_panics(
        which in any::<Index>(),
        edits in prop::collection::vec(row_edit(), 1..4),
    ) {
        let all = csvs();
        let mut lines: Vec<String> =
            all[which.index(all.len())].lines().map(str::to_string).collect();
        let mut invalid = false;
        for e in &edits {
            // Later edits may repair an earlier one's damage: only the last one counts.
            invalid = edit_rows(&mut lines, e);
        }
        let text = lines.join("\n");
        match timed("parse_csv", || IntervalProblem::parse_csv("fuzz", &text)) {
            Ok(problem) => {
                prop_assert!(!invalid, "accepted after {edits:?}");
                check_accepted_csv(&problem)?;
            }
            Err(e) => prop_assert!(
                matches!(e, GraphError::BadCsvRow { .. } | GraphError::Empty),
                "{e:?}"
            ),
        }
    }

    /// Arbitrary bytes (mostly not UTF-8, mostly not JSON) are errors for both
    /// importers.
    #[test]
    fn random_bytes_are_errors(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        prop_assert!(parse_trace(&text).is_err());
        if let Ok(problem) = IntervalProblem::parse_csv("fuzz", &text) {
            check_accepted_csv(&problem)?;
        }
    }
}

/// A file that is not UTF-8 is refused when read, for both importers.
#[test]
fn a_file_that_is_not_utf8_is_an_io_error() {
    let dir = std::env::temp_dir().join(format!("wgalloc-import-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let trace = dir.join("bad.json");
    let mut bytes = SMALL_TRACE.as_bytes().to_vec();
    bytes[40] = 0xFF;
    std::fs::write(&trace, &bytes).expect("write");
    let csv = dir.join("bad.csv");
    std::fs::write(&csv, b"id,lower,upper,size\n\xFF,0,1,4\n").expect("write");
    let t = read_trace(&trace);
    let c = IntervalProblem::read_csv(&csv);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(matches!(t, Err(GraphError::Io { .. })), "{t:?}");
    assert!(matches!(c, Err(GraphError::Io { .. })), "{c:?}");
}

/// A trace that declares a tensor of 2^60 bytes (and a shape of 2^60 elements) is
/// accepted as a description without allocating it: the importer holds sizes, never
/// buffers.
#[test]
fn a_declared_size_of_2_pow_60_is_only_a_number() {
    let text = SMALL_TRACE.replacen(
        r#""id":2,"name":"y","role":"intermediate","bytes":16,"shape":[4]"#,
        r#""id":2,"name":"y","role":"intermediate","bytes":1152921504606846976,"shape":[268435456,1073741824]"#,
        1,
    );
    let text = text.replacen(r#""elementwise":true}"#, r#""elementwise":false}"#, 1);
    let graph = parse_trace(&text).expect("a size is a number");
    assert_eq!(graph.tensors[2].size, 1 << 60);
}
