//! Random mutations of GPT-2 checkpoints (`config.json` + `model.safetensors`, the
//! fixture in `tests/data/gpt2-tiny` and a small seeded one): whatever the bytes, the
//! loader returns weights that agree with the config, or a typed [`CheckpointError`];
//! never a panic, an abort or an allocation sized by a number in the file. Byte edits
//! (flips, truncation, deleted, duplicated and spliced ranges, numbers in the header
//! and the config swapped for limits, negatives, fractions and NaN) and structured
//! edits (offsets past the end or overlapping, dtypes and shapes that disagree, tensors
//! removed or renamed, header lengths up to `u64::MAX`, configs of absurd sizes).
//! CPU only: no device is opened.
//!
//! Cases per property: 2048 (256 for the one that writes files), or
//! `WGALLOC_FUZZ_CASES`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Map, Value};
use wgalloc::model::hf::{
    check_weights, weights_from_safetensors, Checkpoint, CheckpointError, Gpt2Config, Gpt2Weights,
};

const PREFIX: &str = "transformer.";

/// A valid checkpoint to mutate.
struct Base {
    config: Gpt2Config,
    config_text: String,
    bytes: Vec<u8>,
    /// The 8-byte length and the JSON header: where the interesting bytes are.
    header_end: usize,
}

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/gpt2-tiny")
}

/// The transformers fixture, and a small seeded checkpoint with an untied head and
/// names without the `transformer.` prefix.
fn bases() -> &'static [Base] {
    static BASES: OnceLock<Vec<Base>> = OnceLock::new();
    BASES.get_or_init(|| {
        let config_text =
            std::fs::read_to_string(fixture().join("config.json")).expect("fixture config");
        let bytes = std::fs::read(fixture().join("model.safetensors")).expect("fixture weights");
        let tiny = Base {
            config: Gpt2Config::from_json(&config_text).expect("fixture config parses"),
            header_end: header_end(&bytes),
            config_text,
            bytes,
        };
        let mut config = Gpt2Config::new(2, 8, 2, 7, 5);
        config.tie_word_embeddings = false;
        config.n_inner = Some(12);
        let ckpt = Checkpoint {
            weights: Gpt2Weights::seeded(&config, 7),
            config: config.clone(),
        };
        let bytes = ckpt.safetensors_bytes(false).expect("serializes");
        let seeded = Base {
            config_text: serde_json::to_string(&config).expect("config json"),
            config,
            header_end: header_end(&bytes),
            bytes,
        };
        vec![tiny, seeded]
    })
}

fn header_end(bytes: &[u8]) -> usize {
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    8 + usize::try_from(n).expect("small header")
}

/// A safetensors file split into its header (as JSON) and its data.
fn split(bytes: &[u8]) -> (Map<String, Value>, Vec<u8>) {
    let end = header_end(bytes);
    let header = serde_json::from_slice(&bytes[8..end]).expect("header json");
    (header, bytes[end..].to_vec())
}

/// A safetensors file of `header` and `data`, declaring `declared` header bytes (the
/// true length when `None`).
fn join(header: &Map<String, Value>, data: &[u8], declared: Option<u64>) -> Vec<u8> {
    let text = serde_json::to_string(header).expect("header json");
    let n = declared.unwrap_or(text.len() as u64);
    let mut bytes = n.to_le_bytes().to_vec();
    bytes.extend_from_slice(text.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

#[path = "../crates/wgalloc-plan/tests/support/fuzz.rs"]
mod fuzz;
use fuzz::{apply, cases, timed, Edit};

fn edit() -> impl Strategy<Value = Edit> {
    let idx = any::<Index>;
    prop_oneof![
        3 => (any::<bool>(), idx(), 1..=255u8).prop_map(|(h, at, mask)| Edit::Flip(h, at, mask)),
        1 => idx().prop_map(Edit::Truncate),
        1 => (any::<bool>(), idx(), 1..=256usize).prop_map(|(h, at, len)| Edit::Delete(h, at, len)),
        1 => (any::<bool>(), idx(), 1..=256usize)
            .prop_map(|(h, at, len)| Edit::Duplicate(h, at, len)),
        1 => (idx(), 1..=256usize, idx()).prop_map(|(from, len, to)| Edit::Splice(from, len, to)),
        4 => (idx(), idx()).prop_map(|(at, token)| Edit::Number(at, token)),
        1 => (idx(), idx()).prop_map(|(at, token)| Edit::Insert(at, token)),
    ]
}

/// Loads weights from bytes: `Some` weights, which must have every length the config
/// implies, or `None` for a typed refusal.
fn load(config: &Gpt2Config, bytes: &[u8]) -> Result<Option<Gpt2Weights>, TestCaseError> {
    match timed("weights_from_safetensors", || {
        weights_from_safetensors(config, bytes, "fuzz")
    }) {
        Ok(weights) => {
            let check = check_weights(config, &weights);
            prop_assert!(check.is_ok(), "accepted weights: {check:?}");
            Ok(Some(weights))
        }
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            Ok(None)
        }
    }
}

/// What a structured edit does to an offset pair.
#[derive(Debug, Clone)]
enum Offsets {
    /// The end moves past the data.
    PastEnd(u64),
    /// The tensor takes another tensor's range.
    Overlap(Index),
    /// Begin and end swapped.
    Reversed,
    /// An end of `u64::MAX`.
    EndMax,
    /// An end of 2^60.
    End2Pow60,
    /// Both shifted by a few bytes.
    Shift(u64),
    /// Not a pair of non-negative integers.
    Junk(Value),
}

/// What a structured edit does to a shape.
#[derive(Debug, Clone)]
enum Shape {
    /// A scalar.
    Scalar,
    /// A dimension of 0.
    Zero,
    /// One dimension of `u64::MAX` elements.
    Max,
    /// 2^32 x 2^32: the element count overflows 64 bits.
    Square32,
    /// 2^60 elements.
    Pow60,
    /// Dimensions reversed.
    Transposed,
    /// A trailing 1.
    ExtraOne,
    /// The first dimension one larger.
    PlusOne,
    /// Not a list of non-negative integers.
    Junk(Value),
}

/// One structured edit of a safetensors header.
#[derive(Debug, Clone)]
enum HeaderPoke {
    /// Change a tensor's data offsets.
    Offsets(Index, Offsets),
    /// Change a tensor's dtype.
    Dtype(Index, &'static str),
    /// Change a tensor's shape.
    Shape(Index, Shape),
    /// Remove a tensor's entry (its bytes stay).
    Remove(Index),
    /// Rename a tensor: onto another tensor, into block 99, to nothing, or to its other
    /// spelling (with or without the prefix, which is still valid).
    Rename(Index, Index, u8),
    /// Replace the `__metadata__` entry.
    Metadata(Value),
}

/// One edit of the file around the header.
#[derive(Debug, Clone)]
enum Tail {
    /// Declare a header length other than the true one.
    Declared(u64),
    /// Remove bytes from the end of the data.
    TruncateData(usize),
    /// Add bytes after the data.
    AppendData(usize),
}

const DTYPES: [&str; 12] = [
    "F16", "BF16", "F64", "I32", "U32", "U8", "BOOL", "F8_E4M3", "C64", "I64", "XYZ", "f32",
];

fn junk() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(-1)),
        Just(json!(1.5)),
        Just(json!("12")),
        Just(json!([0])),
        Just(json!([0, 1, 2])),
        Just(json!([-4, 4])),
        Just(json!({"a": 1})),
        any::<u64>().prop_map(|v| json!([v])),
    ]
}

fn header_poke() -> impl Strategy<Value = HeaderPoke> {
    let idx = any::<Index>;
    let offsets = prop_oneof![
        (1..=1u64 << 20).prop_map(Offsets::PastEnd),
        idx().prop_map(Offsets::Overlap),
        Just(Offsets::Reversed),
        Just(Offsets::EndMax),
        Just(Offsets::End2Pow60),
        (1..=64u64).prop_map(Offsets::Shift),
        junk().prop_map(Offsets::Junk),
    ];
    let shape = prop_oneof![
        Just(Shape::Scalar),
        Just(Shape::Zero),
        Just(Shape::Max),
        Just(Shape::Square32),
        Just(Shape::Pow60),
        Just(Shape::Transposed),
        Just(Shape::ExtraOne),
        Just(Shape::PlusOne),
        junk().prop_map(Shape::Junk),
    ];
    prop_oneof![
        3 => (idx(), offsets).prop_map(|(t, o)| HeaderPoke::Offsets(t, o)),
        2 => (idx(), prop::sample::select(&DTYPES[..])).prop_map(|(t, d)| HeaderPoke::Dtype(t, d)),
        3 => (idx(), shape).prop_map(|(t, s)| HeaderPoke::Shape(t, s)),
        1 => idx().prop_map(HeaderPoke::Remove),
        2 => (idx(), idx(), 0..4u8).prop_map(|(t, to, how)| HeaderPoke::Rename(t, to, how)),
        1 => prop_oneof![
            Just(json!({})),
            Just(json!({"format": 1})),
            Just(json!([])),
            Just(json!("pt")),
            Just(Value::Null),
        ]
        .prop_map(HeaderPoke::Metadata),
    ]
}

fn tail() -> impl Strategy<Value = Tail> {
    prop_oneof![
        prop::sample::select(vec![0u64, 1, 7, u64::MAX, 1 << 60, 1 << 32, 100_000_001])
            .prop_map(Tail::Declared),
        (1..=64usize).prop_map(Tail::TruncateData),
        (1..=64usize).prop_map(Tail::AppendData),
    ]
}

/// The tensor names of a header, sorted, without `__metadata__`.
fn tensor_names(header: &Map<String, Value>) -> Vec<String> {
    header
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect()
}

/// The other spelling of a name: with the prefix if it has none, else without.
fn other_spelling(name: &str) -> String {
    match name.strip_prefix(PREFIX) {
        Some(bare) => bare.to_string(),
        None => format!("{PREFIX}{name}"),
    }
}

fn poke_header(header: &mut Map<String, Value>, data_len: u64, poke: &HeaderPoke) {
    let names = tensor_names(header);
    if names.is_empty() {
        return;
    }
    let pick = |i: &Index| names[i.index(names.len())].clone();
    match poke {
        HeaderPoke::Offsets(t, how) => {
            let name = pick(t);
            let old = header[&name]["data_offsets"].clone();
            let (begin, end) = (old[0].as_u64().unwrap_or(0), old[1].as_u64().unwrap_or(0));
            let new = match how {
                Offsets::PastEnd(k) => json!([begin, data_len + k]),
                Offsets::Overlap(other) => header[&pick(other)]["data_offsets"].clone(),
                Offsets::Reversed => json!([end, begin]),
                Offsets::EndMax => json!([begin, u64::MAX]),
                Offsets::End2Pow60 => json!([begin, 1u64 << 60]),
                Offsets::Shift(k) => json!([begin + k, end + k]),
                Offsets::Junk(v) => v.clone(),
            };
            header[&name]["data_offsets"] = new;
        }
        HeaderPoke::Dtype(t, dtype) => header[&pick(t)]["dtype"] = json!(dtype),
        HeaderPoke::Shape(t, how) => {
            let name = pick(t);
            let old: Vec<Value> = header[&name]["shape"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let new = match how {
                Shape::Scalar => json!([]),
                Shape::Zero => json!([0]),
                Shape::Max => json!([u64::MAX]),
                Shape::Square32 => json!([1u64 << 32, 1u64 << 32]),
                Shape::Pow60 => json!([1u64 << 60]),
                Shape::Transposed => Value::Array(old.iter().rev().cloned().collect()),
                Shape::ExtraOne => Value::Array(old.iter().cloned().chain([json!(1)]).collect()),
                Shape::PlusOne => {
                    let mut dims = old.clone();
                    if let Some(first) = dims.first_mut() {
                        *first = json!(first.as_u64().unwrap_or(0) + 1);
                    }
                    Value::Array(dims)
                }
                Shape::Junk(v) => v.clone(),
            };
            header[&name]["shape"] = new;
        }
        HeaderPoke::Remove(t) => {
            header.remove(&pick(t));
        }
        HeaderPoke::Rename(t, to, how) => {
            let name = pick(t);
            let new = match how {
                0 => pick(to),
                1 => "h.99.ln_1.weight".to_string(),
                2 => String::new(),
                _ => other_spelling(&name),
            };
            if let Some(entry) = header.remove(&name) {
                header.insert(new, entry);
            }
        }
        HeaderPoke::Metadata(v) => {
            header.insert("__metadata__".to_string(), v.clone());
        }
    }
}

/// A header's tensors by their name without the prefix; `None` when two entries
/// share a name that way.
fn by_bare_name(header: &Map<String, Value>) -> Option<BTreeMap<String, Value>> {
    let mut out = BTreeMap::new();
    for name in tensor_names(header) {
        let bare = name.strip_prefix(PREFIX).unwrap_or(&name).to_string();
        if out.insert(bare, header[&name].clone()).is_some() {
            return None;
        }
    }
    Some(out)
}

/// A config field set to a value of any size or type.
#[derive(Debug, Clone)]
struct ConfigPoke(&'static str, Value);

const CONFIG_FIELDS: [&str; 9] = [
    "n_layer",
    "n_embd",
    "n_head",
    "n_inner",
    "vocab_size",
    "n_positions",
    "layer_norm_epsilon",
    "activation_function",
    "tie_word_embeddings",
];

fn config_poke() -> impl Strategy<Value = ConfigPoke> {
    let value = prop_oneof![
        3 => prop::sample::select(vec![
            0u64,
            1,
            2,
            3,
            4,
            64,
            1000,
            65536,
            1_000_000,
            1_000_000_000,
            u64::from(u32::MAX),
            1 << 32,
            1_000_000_000_000,
            1 << 60,
            1 << 62,
            u64::MAX / 4 + 1,
            u64::MAX,
        ])
        .prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(Value::from),
        1 => prop::sample::select(vec![
            json!(-1),
            json!(1e-50),
            json!(1e300),
            json!(1.5),
            json!(null),
            json!(true),
            json!("gelu_new"),
            json!("64"),
            json!([64]),
        ]),
    ];
    (prop::sample::select(&CONFIG_FIELDS[..]), value).prop_map(|(f, v)| ConfigPoke(f, v))
}

/// What every accepted config must satisfy: it checks again, and every tensor it
/// implies has a 32-bit element count (as [`Gpt2Config::check`] promises) computed
/// without wrapping.
fn check_accepted_config(c: &Gpt2Config) -> Result<(), TestCaseError> {
    prop_assert!(c.check().is_ok());
    let (d, v, p, i) = (
        c.n_embd as u128,
        c.vocab_size as u128,
        c.n_positions as u128,
        c.inner() as u128,
    );
    let limit = u128::from(u32::MAX);
    for (what, elements) in [
        ("wte", v * d),
        ("wpe", p * d),
        ("fc", i * d),
        ("attn", d.saturating_mul(d).saturating_mul(3)),
    ] {
        prop_assert!(elements <= limit, "{what}: {elements} elements in {c:?}");
    }
    prop_assert!(u32::try_from(c.n_layer).is_ok(), "{c:?}");
    prop_assert!(c.parameters() > 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(2048)))]

    /// Byte edits of a checkpoint's safetensors file (mostly in its header) give
    /// weights of the config's every length, or a typed error.
    #[test]
    fn mutated_safetensors_bytes_never_panic(
        which in any::<Index>(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let base = &bases()[which.index(bases().len())];
        let mut bytes = base.bytes.clone();
        for e in &edits {
            apply(&mut bytes, e, base.header_end);
        }
        load(&base.config, &bytes)?;
    }

    /// A safetensors file cut anywhere is corrupt.
    #[test]
    fn truncated_safetensors_are_corrupt(
        which in any::<Index>(),
        in_header in any::<bool>(),
        cut in any::<Index>(),
    ) {
        let base = &bases()[which.index(bases().len())];
        // Half the cuts in the header, half anywhere.
        let len = if in_header { base.header_end } else { base.bytes.len() };
        let bytes = &base.bytes[..cut.index(len)];
        let e = weights_from_safetensors(&base.config, bytes, "fuzz").expect_err("truncated");
        prop_assert!(matches!(e, CheckpointError::CorruptSafetensors { .. }), "{e}");
    }

    /// Headers with offsets past the end or overlapping, dtypes and shapes that
    /// disagree with the bytes or the config, tensors removed or renamed, a wrong
    /// header length or data length: a typed error whenever the tensors the config
    /// reads are no longer exactly the original ones, never a panic.
    #[test]
    fn structurally_mutated_safetensors_are_errors_not_panics(
        which in any::<Index>(),
        pokes in prop::collection::vec(header_poke(), 0..4),
        tail in proptest::option::of(tail()),
    ) {
        let base = &bases()[which.index(bases().len())];
        let (original, data) = split(&base.bytes);
        let mut header = original.clone();
        for p in &pokes {
            poke_header(&mut header, data.len() as u64, p);
        }
        let changed = by_bare_name(&header) != by_bare_name(&original);
        let true_len = serde_json::to_string(&header).expect("json").len() as u64;
        let (declared, data) = match &tail {
            Some(Tail::Declared(n)) if *n != true_len => (Some(*n), data),
            Some(Tail::TruncateData(k)) => (None, data[..data.len() - k].to_vec()),
            Some(Tail::AppendData(k)) => {
                let mut more = data;
                more.extend(std::iter::repeat_n(0x41, *k));
                (None, more)
            }
            _ => (None, data),
        };
        let broken_layout = declared.is_some() || data.len() + base.header_end
            != base.bytes.len();
        let bytes = join(&header, &data, declared);
        let result = timed("weights_from_safetensors", || {
            weights_from_safetensors(&base.config, &bytes, "fuzz")
        });
        match result {
            Ok(weights) => {
                prop_assert!(
                    !changed && !broken_layout,
                    "accepted after {pokes:?} {tail:?}"
                );
                prop_assert!(check_weights(&base.config, &weights).is_ok());
            }
            Err(e) if broken_layout => {
                prop_assert!(matches!(e, CheckpointError::CorruptSafetensors { .. }), "{e}");
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    /// Byte edits and fields of any size or type in `config.json`: a config that
    /// checks (with every tensor size in 32 bits, computed without wrapping) or a
    /// typed error; and a config that checks never makes the weights' loader panic
    /// or reserve memory for blocks the file does not hold.
    #[test]
    fn mutated_configs_are_errors_or_load_without_panics(
        which in any::<Index>(),
        edits in prop::collection::vec(edit(), 0..2),
        pokes in prop::collection::vec(config_poke(), 0..4),
    ) {
        let base = &bases()[which.index(bases().len())];
        let mut doc: Value = serde_json::from_str(&base.config_text).expect("json");
        for ConfigPoke(field, value) in &pokes {
            doc[*field] = value.clone();
        }
        let mut bytes = doc.to_string().into_bytes();
        let hot = bytes.len();
        for e in &edits {
            apply(&mut bytes, e, hot);
        }
        let text = String::from_utf8_lossy(&bytes);
        match timed("from_json", || Gpt2Config::from_json(&text)) {
            Ok(config) => {
                check_accepted_config(&config)?;
                load(&config, &base.bytes)?;
            }
            Err(e) => prop_assert!(
                matches!(
                    e,
                    CheckpointError::BadConfigJson { .. }
                        | CheckpointError::BadConfig { .. }
                        | CheckpointError::UnsupportedActivation { .. }
                ),
                "{e}"
            ),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// Both files of a checkpoint directory spoiled at once, loaded from disk: a
    /// checkpoint that agrees with itself, or a typed error.
    #[test]
    fn a_spoiled_checkpoint_directory_loads_or_is_an_error(
        config_edits in prop::collection::vec(edit(), 0..3),
        weight_edits in prop::collection::vec(edit(), 0..3),
        case in any::<u64>(),
    ) {
        let base = &bases()[0];
        let mut config = base.config_text.clone().into_bytes();
        let hot = config.len();
        for e in &config_edits {
            apply(&mut config, e, hot);
        }
        let mut weights = base.bytes.clone();
        for e in &weight_edits {
            apply(&mut weights, e, base.header_end);
        }
        let dir = std::env::temp_dir()
            .join(format!("wgalloc-checkpoint-fuzz-{}-{case}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("config.json"), &config).expect("write");
        std::fs::write(dir.join("model.safetensors"), &weights).expect("write");
        let result = timed("Checkpoint::load", || Checkpoint::load(&dir));
        let _ = std::fs::remove_dir_all(&dir);
        match result {
            Ok(ckpt) => prop_assert!(check_weights(&ckpt.config, &ckpt.weights).is_ok()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}

/// The fixture's config with one field replaced.
fn fixture_config_with(field: &str, value: Value) -> Result<Gpt2Config, CheckpointError> {
    let mut doc: Value = serde_json::from_str(&bases()[0].config_text).expect("json");
    doc[field] = value;
    Gpt2Config::from_json(&doc.to_string())
}

/// A header length of `u64::MAX` or 2^60 is refused before anything that size is
/// allocated.
#[test]
fn a_header_length_of_u64_max_or_2_pow_60_is_corrupt() {
    let base = &bases()[0];
    for n in [u64::MAX, 1 << 60, 100_000_001] {
        let mut bytes = base.bytes.clone();
        bytes[..8].copy_from_slice(&n.to_le_bytes());
        let e = weights_from_safetensors(&base.config, &bytes, "fuzz").expect_err("length");
        assert!(
            matches!(e, CheckpointError::CorruptSafetensors { .. }),
            "{n}: {e}"
        );
    }
}

/// A tensor declared to end at byte 2^60 (or `u64::MAX`) of an 8-byte data section is
/// corrupt, whatever its shape claims.
#[test]
fn a_tensor_declared_past_the_data_is_corrupt() {
    let config = Gpt2Config::new(1, 2, 1, 1, 1);
    for (shape, end) in [
        (json!([1u64 << 58]), 1u64 << 60),
        (json!([u64::MAX]), u64::MAX),
    ] {
        let mut header = Map::new();
        header.insert(
            "wte.weight".into(),
            json!({"dtype": "F32", "shape": shape, "data_offsets": [0, end]}),
        );
        let bytes = join(&header, &[0; 8], None);
        let e = weights_from_safetensors(&config, &bytes, "fuzz").expect_err("past the end");
        assert!(
            matches!(e, CheckpointError::CorruptSafetensors { .. }),
            "{e}"
        );
    }
}

/// Eight F64 tensors of 2^58 - 1 elements each: offsets that chain validly up to
/// 2^64 - 64. safetensors 0.8 adds the header length to that end unchecked (a panic
/// where overflow checks are on, as in `cargo test`): the loader refuses the file
/// first, naming the tensor that ends past the data.
#[test]
fn offsets_that_sum_near_u64_max_are_corrupt_not_an_overflow() {
    let elements = (1u64 << 58) - 1;
    let size = elements * 8;
    let mut header = Map::new();
    for i in 0..8u64 {
        header.insert(
            format!("t{i}"),
            json!({"dtype": "F64", "shape": [elements], "data_offsets": [i * size, (i + 1) * size]}),
        );
    }
    let bytes = join(&header, &[], None);
    let config = Gpt2Config::new(1, 2, 1, 1, 1);
    match weights_from_safetensors(&config, &bytes, "fuzz") {
        Err(CheckpointError::CorruptSafetensors { reason, .. }) => {
            assert!(reason.contains("past the"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// A config of 2^60 blocks (or more than 32 bits of them) is refused when read: it
/// used to pass the check and make the loader reserve a place for every block (2^60:
/// a capacity-overflow panic; 4 billion: an aborted 1.2 TB allocation).
#[test]
fn a_config_of_2_pow_60_layers_is_refused() {
    for n_layer in [1u64 << 60, 1_000_000_000_000, 1 << 32] {
        match fixture_config_with("n_layer", json!(n_layer)) {
            Err(CheckpointError::BadConfig { field, .. }) => assert_eq!(field, "n_layer"),
            other => panic!("{n_layer}: {other:?}"),
        }
    }
}

/// A config whose tensor sizes wrap to 0 in 64 bits (width 2^32 x vocabulary 2^32;
/// an `n_inner` of 2^63) is refused: the check used to multiply unchecked, so these
/// passed in release builds and overflowed in debug ones.
#[test]
fn a_config_whose_sizes_wrap_64_bits_is_refused() {
    let mut doc: Value = serde_json::from_str(&bases()[0].config_text).expect("json");
    doc["n_embd"] = json!(1u64 << 32);
    doc["vocab_size"] = json!(1u64 << 32);
    doc["n_positions"] = json!(1u64 << 32);
    doc["n_head"] = json!(1);
    assert!(matches!(
        Gpt2Config::from_json(&doc.to_string()),
        Err(CheckpointError::BadConfig { .. })
    ));
    for n_inner in [1u64 << 63, u64::MAX] {
        match fixture_config_with("n_inner", json!(n_inner)) {
            Err(CheckpointError::BadConfig { field, .. }) => assert_eq!(field, "n_inner"),
            other => panic!("{n_inner}: {other:?}"),
        }
    }
    // `4 * n_embd` for a null `n_inner` overflows 64 bits.
    let mut c = Gpt2Config::new(1, 1 << 62, 1, 1, 1);
    c.n_inner = None;
    assert!(matches!(c.check(), Err(CheckpointError::BadConfig { .. })));
}

/// A config that claims 4 billion blocks, over the fixture's 2: the loader reads block
/// by block and names the first missing tensor instead of reserving memory for every
/// block the config claims.
#[test]
fn a_config_claiming_more_blocks_than_the_file_reserves_nothing_for_them() {
    let base = &bases()[0];
    let mut config = base.config.clone();
    config.n_layer = u32::MAX as usize;
    assert!(config.check().is_ok(), "within the config's limits");
    match weights_from_safetensors(&config, &base.bytes, "fuzz") {
        Err(CheckpointError::MissingTensor { name, .. }) => assert_eq!(name, "h.2.ln_1.weight"),
        other => panic!("{other:?}"),
    }
}

/// Every tensor within 32 bits and 4 billion blocks of them: more than 2^64
/// parameters, refused rather than counted modulo 2^64.
#[test]
fn a_config_of_more_than_2_pow_64_parameters_is_refused() {
    // 3 x 37837^2 and 37837 x 113511 are just below 2^32.
    let mut c = Gpt2Config::new(u32::MAX as usize, 37837, 1, 1, 1);
    c.n_inner = Some(113_511);
    match c.check() {
        Err(CheckpointError::BadConfig { field, problem }) => {
            assert_eq!(field, "n_layer");
            assert!(problem.contains("64 bits"), "{problem}");
        }
        other => panic!("{other:?}"),
    }
    c.n_layer = 2;
    assert!(c.check().is_ok());
}
