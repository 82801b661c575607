//! Import of the shared traces and interval CSVs, and one test per malformed input.

use std::path::{Path, PathBuf};

use wgalloc_plan::graph::{parse_trace, read_trace, write_trace, GraphError, Role, TensorId};
use wgalloc_plan::plan::IntervalProblem;

fn data(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("data folder")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

#[test]
fn every_shared_trace_imports_and_validates() {
    let traces: Vec<PathBuf> = data("traces")
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(traces.len(), 5);
    for path in traces {
        let graph = read_trace(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        graph.validate().expect("validates");
        assert!(!graph.nodes.is_empty());
        let summary = graph.summary();
        assert!(summary.input.count >= 1, "{}", path.display());
        assert!(summary.output.count >= 1, "{}", path.display());
        assert!(summary.weight.bytes > 0);
    }
}

#[test]
fn every_shared_interval_csv_imports() {
    let csvs: Vec<PathBuf> = data("dsa")
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    assert_eq!(csvs.len(), 10);
    for path in csvs {
        let problem =
            IntervalProblem::read_csv(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!problem.intervals.is_empty());
        assert!(problem.lower_bound() <= problem.naive_size());
    }
}

#[test]
fn published_interval_lower_bounds_are_reproduced() {
    let dsa = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("dsa");
    for (file, bound) in [
        ("resnet50_somas.csv", 1_515_472_556u64),
        ("iopddl_G_1.csv", 3_030_937_746),
        ("iopddl_S_1.csv", 1_498_635_932),
        ("input.12.csv", 12),
    ] {
        let p = IntervalProblem::read_csv(&dsa.join(file)).expect("reads");
        assert_eq!(p.lower_bound(), bound, "{file}");
    }
}

/// Every role, a view, an in-place node (shared with `import_fuzz.rs`).
const GOOD: &str = include_str!("data/small_trace.json");

fn broken(from: &str, to: &str) -> Result<wgalloc_plan::graph::Graph, GraphError> {
    assert!(GOOD.contains(from), "{from}");
    parse_trace(&GOOD.replacen(from, to, 1))
}

#[test]
fn the_reference_trace_parses_with_roles_and_views() {
    let g = parse_trace(GOOD).expect("valid");
    assert_eq!(g.tensors.len(), 5);
    assert_eq!(g.tensors[3].view_of, Some(TensorId(2)));
    assert_eq!(g.tensors[4].role, Role::Output);
    assert!(g.nodes[0].inplace);
}

#[test]
fn not_json_is_rejected() {
    assert!(matches!(
        parse_trace("{not json"),
        Err(GraphError::NotJson { .. })
    ));
    assert!(matches!(
        parse_trace("[1,2]"),
        Err(GraphError::NotJson { .. })
    ));
}

#[test]
fn empty_file_is_rejected() {
    assert_eq!(parse_trace(""), Err(GraphError::Empty));
    assert_eq!(parse_trace("  \n"), Err(GraphError::Empty));
}

#[test]
fn wrong_format_tag_is_rejected() {
    assert!(matches!(
        broken("tensor-graph-trace/1", "tensor-graph-trace/9"),
        Err(GraphError::WrongFormat { .. })
    ));
}

#[test]
fn missing_field_is_named() {
    match broken(
        r#""op":"relu","inputs":[3],"output":4"#,
        r#""op":"relu","inputs":[3]"#,
    ) {
        Err(GraphError::MissingField { context, field }) => {
            assert_eq!(field, "output");
            assert!(context.contains("node 2"), "{context}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        broken(
            r#""id":2,"name":"y","role":"intermediate","bytes":16,"#,
            r#""id":2,"name":"y","role":"intermediate","#
        ),
        Err(GraphError::MissingField { field: "bytes", .. })
    ));
}

#[test]
fn unknown_tensor_id_is_named() {
    match broken(
        r#""inputs":[0,1],"output":2"#,
        r#""inputs":[0,9],"output":2"#,
    ) {
        Err(GraphError::UnknownTensor { tensor, context }) => {
            assert_eq!(tensor, TensorId(9));
            assert!(context.contains("node 0"), "{context}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_id_above_u32_max_is_a_bad_field_not_an_unknown_tensor() {
    match broken(
        r#""inputs":[0,1],"output":2"#,
        r#""inputs":[0,4294967296],"output":2"#,
    ) {
        Err(GraphError::BadField {
            context,
            field,
            problem,
        }) => {
            assert_eq!(field, "inputs");
            assert!(context.contains("node 0"), "{context}");
            assert!(problem.contains("4294967296"), "{problem}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_written_trace_reads_back_as_the_same_graph() {
    for path in data("traces")
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
    {
        let graph = read_trace(&path).expect("a shipped trace");
        let text = write_trace(&graph).expect("one element type");
        let again = parse_trace(&text).expect("reads back");
        assert_eq!(again.tensors, graph.tensors, "{}", path.display());
        assert_eq!(again.nodes, graph.nodes, "{}", path.display());
    }
}

#[test]
fn a_graph_of_mixed_element_types_is_not_written_as_a_trace() {
    let mut b = wgalloc_plan::graph::GraphBuilder::new("mixed");
    b.input("x", wgalloc_plan::graph::DType::F16, &[3]);
    b.input("y", wgalloc_plan::graph::DType::F32, &[3]);
    let graph = b.build().expect("valid");
    assert!(matches!(
        write_trace(&graph),
        Err(GraphError::BadField { field: "dtype", .. })
    ));
}

#[test]
fn duplicate_producer_is_rejected() {
    match broken(
        r#""op":"relu","inputs":[3],"output":4"#,
        r#""op":"relu","inputs":[3],"output":2"#,
    ) {
        Err(GraphError::ProducedTwice { tensor, .. }) => assert_eq!(tensor, TensorId(2)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn forward_reference_is_rejected() {
    match broken(
        r#""op":"mul","inputs":[0,1]"#,
        r#""op":"mul","inputs":[0,4]"#,
    ) {
        Err(GraphError::ReadBeforeProduced { tensor, node, .. }) => {
            assert_eq!(tensor, TensorId(4));
            assert_eq!(node.0, 0);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn view_cycle_is_rejected() {
    let text = GOOD.replacen(
        r#""id":2,"name":"y","role":"intermediate""#,
        r#""id":2,"name":"y","role":"view","view_of":3"#,
        1,
    );
    assert!(matches!(
        parse_trace(&text),
        Err(GraphError::ViewCycle { .. })
    ));
}

#[test]
fn view_without_root_is_rejected() {
    assert!(matches!(
        broken(r#""role":"view","view_of":2,"#, r#""role":"view","#),
        Err(GraphError::ViewWithoutRoot { .. })
    ));
    assert!(matches!(
        broken(
            r#""role":"view","view_of":2,"#,
            r#""role":"view","view_of":77,"#
        ),
        Err(GraphError::UnknownTensor {
            tensor: TensorId(77),
            ..
        })
    ));
}

#[test]
fn overflowing_size_is_rejected() {
    // bytes beyond 64 bits
    assert!(matches!(
        broken(
            r#""bytes":16,"shape":[4]}"#,
            r#""bytes":18446744073709551616,"shape":[4]}"#
        ),
        Err(GraphError::BadField { field: "bytes", .. })
    ));
    // a shape whose element count overflows
    assert!(matches!(
        broken(r#""shape":[4]}"#, r#""shape":[4294967296,4294967296,16]}"#),
        Err(GraphError::BadSize { .. })
    ));
}

#[test]
fn negative_or_fractional_numbers_are_rejected() {
    assert!(matches!(
        broken(r#""bytes":16,"shape":[4]}"#, r#""bytes":-16,"shape":[4]}"#),
        Err(GraphError::BadField { field: "bytes", .. })
    ));
    assert!(matches!(
        broken(r#""bytes":16,"shape":[4]}"#, r#""bytes":16.5,"shape":[4]}"#),
        Err(GraphError::BadField { field: "bytes", .. })
    ));
    assert!(matches!(
        broken(r#""inputs":[0,1]"#, r#""inputs":[0,1.5]"#),
        Err(GraphError::BadField {
            field: "inputs",
            ..
        })
    ));
}

#[test]
fn node_producing_an_input_or_weight_is_rejected() {
    assert!(matches!(
        broken(
            r#""op":"mul","inputs":[0,1],"output":2"#,
            r#""op":"mul","inputs":[0,2],"output":1"#
        ),
        Err(GraphError::ProducesInputOrWeight { role: "weight", .. })
    ));
}

#[test]
fn ids_must_equal_positions_and_roles_must_be_known() {
    assert!(matches!(
        broken(r#"{"id":0,"name":"x""#, r#"{"id":5,"name":"x""#),
        Err(GraphError::IdMismatch { position: 0, id: 5 })
    ));
    assert!(matches!(
        broken(r#""role":"input""#, r#""role":"banana""#),
        Err(GraphError::BadField { field: "role", .. })
    ));
}

#[test]
fn intermediate_never_produced_is_rejected() {
    let text = GOOD.replacen(
        r#"{"id":4,"name":"z","role":"output","bytes":16,"shape":[2,2]}],"#,
        r#"{"id":4,"name":"z","role":"output","bytes":16,"shape":[2,2]},{"id":5,"name":"orphan","role":"intermediate","bytes":4,"shape":[1]}],"#,
        1,
    );
    assert!(matches!(
        parse_trace(&text),
        Err(GraphError::NeverProduced { .. })
    ));
}

#[test]
fn bad_csv_rows_give_line_numbers() {
    for (text, line) in [
        ("id,lower,upper,size\n0,0,4,8\n1,0,x,8\n", 3),
        ("id,lower,upper,size\n0,4,4,8\n", 2),
        ("id,lower,upper,size\n0,5,4,8\n", 2),
        ("id,lower,upper,size\n0,0,4\n", 2),
        ("id,lower,upper,size\n0,0,4,-8\n", 2),
    ] {
        match IntervalProblem::parse_csv("t", text) {
            Err(GraphError::BadCsvRow { line: got, .. }) => assert_eq!(got, line, "{text}"),
            other => panic!("{text}: {other:?}"),
        }
    }
}
