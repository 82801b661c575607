//! GPT-2 checkpoints on the CPU: the Hugging Face fixture (`tests/data/gpt2-tiny`, made
//! by transformers) loads and its CPU forward pass and greedy generation match
//! transformers' own outputs; bad checkpoints and requests are typed errors; seeded
//! checkpoints of other shapes round-trip and decode incrementally as they recompute.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use wgalloc::error::ErrorKind;
use wgalloc::model::hf::{
    generate_greedy, Checkpoint, CheckpointError, CpuDecoder, CpuGpt2, Gpt2Config, Gpt2Weights,
};

#[derive(Deserialize)]
struct Reference {
    prompt_ids: Vec<u32>,
    prompt_logits: Vec<Vec<f32>>,
    generated_ids: Vec<u32>,
    step_logits: Vec<Vec<f32>>,
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gpt2-tiny")
}

fn reference() -> Reference {
    let text = std::fs::read_to_string(fixture().join("reference.json")).expect("reference");
    serde_json::from_str(&text).expect("reference parses")
}

/// A fresh directory under the system's temp dir for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wgalloc-gen-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// `max |a - b| <= 1e-3 * max |b|`, row by row.
fn assert_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = got
        .iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        err <= 1e-3 * scale,
        "{what}: max error {err} > 1e-3 x {scale}"
    );
}

fn load_tiny() -> CpuGpt2 {
    let ckpt = Checkpoint::load(&fixture()).expect("the fixture loads");
    CpuGpt2::new(ckpt.config, ckpt.weights).expect("a model")
}

#[test]
fn the_fixture_loads_with_hf_names_and_a_tied_head() {
    let ckpt = Checkpoint::load(&fixture()).expect("loads");
    assert_eq!(ckpt.config.n_layer, 2);
    assert_eq!(ckpt.config.inner(), 256);
    assert!(ckpt.weights.lm_head.is_none(), "tied: no lm_head.weight");
    assert_eq!(ckpt.weights.wte.len(), 512 * 64);
}

#[test]
fn prompt_logits_match_transformers() {
    let model = load_tiny();
    let r = reference();
    let logits = model.logits(&r.prompt_ids).expect("forward");
    let vocab = model.config().vocab_size;
    assert_eq!(r.prompt_logits.len(), r.prompt_ids.len());
    for (pos, want) in r.prompt_logits.iter().enumerate() {
        assert_close(
            &format!("prompt position {pos}"),
            &logits[pos * vocab..][..vocab],
            want,
        );
    }
}

#[test]
fn greedy_generation_matches_transformers_token_for_token() {
    let r = reference();
    let mut decoder = CpuDecoder::new(load_tiny());
    let g = generate_greedy(&mut decoder, &r.prompt_ids, r.generated_ids.len()).expect("runs");
    assert_eq!(g.generated_ids, r.generated_ids);
    for (i, (got, want)) in g.step_logits.iter().zip(&r.step_logits).enumerate() {
        assert_close(&format!("step {i}"), got, want);
    }
}

#[test]
fn kv_cached_steps_equal_a_full_recompute() {
    let model = load_tiny();
    let r = reference();
    let mut seq = r.prompt_ids.clone();
    seq.extend(&r.generated_ids[..r.generated_ids.len() - 1]);
    let full = model.logits(&seq).expect("full");
    let mut cache = model.new_cache();
    let mut stepped = model.forward(&mut cache, &r.prompt_ids).expect("prefill");
    for &t in &seq[r.prompt_ids.len()..] {
        stepped.extend(model.forward(&mut cache, &[t]).expect("step"));
    }
    for (i, (a, b)) in full.iter().zip(&stepped).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * (1.0 + a.abs()),
            "logit {i}: {a} vs {b}"
        );
    }
}

/// Copies the fixture into a temp dir, then lets `edit` spoil it.
fn spoiled(name: &str, edit: impl FnOnce(&Path)) -> Result<Checkpoint, CheckpointError> {
    let dir = temp_dir(name);
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture().join(file), dir.join(file)).expect("copy");
    }
    edit(&dir);
    let result = Checkpoint::load(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn edit_config(dir: &Path, key: &str, value: serde_json::Value) {
    let path = dir.join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    json[key] = value;
    std::fs::write(&path, json.to_string()).expect("write");
}

#[test]
fn a_truncated_safetensors_file_is_a_typed_error() {
    let e = spoiled("truncated", |dir| {
        let path = dir.join("model.safetensors");
        let bytes = std::fs::read(&path).expect("read");
        std::fs::write(&path, &bytes[..bytes.len() - 1000]).expect("write");
    })
    .expect_err("truncated");
    assert!(
        matches!(e, CheckpointError::CorruptSafetensors { .. }),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::BadInput);
    let e = spoiled("garbage", |dir| {
        std::fs::write(dir.join("model.safetensors"), b"not a safetensors file").expect("w");
    })
    .expect_err("garbage");
    assert!(
        matches!(e, CheckpointError::CorruptSafetensors { .. }),
        "{e}"
    );
}

#[test]
fn a_config_that_does_not_match_the_weights_names_the_tensor() {
    let e = spoiled("width", |dir| edit_config(dir, "n_embd", 32.into())).expect_err("width");
    match e {
        CheckpointError::WrongShape {
            name,
            expected,
            found,
        } => {
            assert_eq!(name, "transformer.wte.weight");
            assert_eq!(expected, vec![512, 32]);
            assert_eq!(found, vec![512, 64]);
        }
        other => panic!("{other}"),
    }
    let e = spoiled("vocab", |dir| edit_config(dir, "vocab_size", 500.into())).expect_err("v");
    assert!(
        matches!(&e, CheckpointError::WrongShape { name, .. } if name == "transformer.wte.weight"),
        "{e}"
    );
    let e = spoiled("layers", |dir| edit_config(dir, "n_layer", 1.into())).expect_err("layers");
    assert!(
        matches!(&e, CheckpointError::ConfigMismatch { name, .. } if name.contains("h.1.")),
        "{e}"
    );
    let e = spoiled("more", |dir| edit_config(dir, "n_layer", 3.into())).expect_err("more");
    assert!(
        matches!(&e, CheckpointError::MissingTensor { name, .. } if name == "h.2.ln_1.weight"),
        "{e}"
    );
    let e = spoiled("inner", |dir| edit_config(dir, "n_inner", 100.into())).expect_err("inner");
    assert!(
        matches!(&e, CheckpointError::WrongShape { name, .. } if name.ends_with("h.0.mlp.c_fc.weight")),
        "{e}"
    );
    let e = spoiled("untied", |dir| {
        edit_config(dir, "tie_word_embeddings", false.into())
    })
    .expect_err("untied needs lm_head.weight");
    assert!(
        matches!(&e, CheckpointError::MissingTensor { name, .. } if name == "lm_head.weight"),
        "{e}"
    );
    let e = spoiled("act", |dir| {
        edit_config(dir, "activation_function", "gelu".into())
    })
    .expect_err("activation");
    assert!(
        matches!(e, CheckpointError::UnsupportedActivation { .. }),
        "{e}"
    );
    let e = spoiled("noconfig", |dir| {
        std::fs::remove_file(dir.join("config.json")).expect("rm")
    })
    .expect_err("no config");
    assert_eq!(e.kind(), ErrorKind::Io);
}

#[test]
fn a_missing_tensor_and_a_wrong_dtype_are_named() {
    let ckpt = Checkpoint::load(&fixture()).expect("loads");
    let bytes = std::fs::read(fixture().join("model.safetensors")).expect("read");
    let file = safetensors::SafeTensors::deserialize(&bytes).expect("parses");
    // Rewrite the file without one tensor, then with one tensor as f64.
    let rewrite = |skip: &str, as_f64: &str| -> Vec<u8> {
        let mut owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
        for (name, view) in file.tensors() {
            if name == skip {
                continue;
            }
            if name == as_f64 {
                let wide: Vec<u8> = view
                    .data()
                    .chunks_exact(4)
                    .flat_map(|c| {
                        f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes()
                    })
                    .collect();
                owned.push((name, safetensors::Dtype::F64, view.shape().to_vec(), wide));
            } else {
                owned.push((
                    name,
                    view.dtype(),
                    view.shape().to_vec(),
                    view.data().to_vec(),
                ));
            }
        }
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = owned
            .iter()
            .map(|(n, d, s, b)| {
                (
                    n.clone(),
                    safetensors::tensor::TensorView::new(*d, s.clone(), b).expect("view"),
                )
            })
            .collect();
        safetensors::serialize(views, None).expect("serialize")
    };
    let missing = rewrite("transformer.h.1.mlp.c_proj.bias", "");
    let e = wgalloc::model::hf::weights_from_safetensors(&ckpt.config, &missing, "mem")
        .expect_err("missing");
    assert!(
        matches!(&e, CheckpointError::MissingTensor { name, alternative }
            if name == "h.1.mlp.c_proj.bias" && alternative == "transformer.h.1.mlp.c_proj.bias"),
        "{e}"
    );
    let wide = rewrite("", "transformer.ln_f.bias");
    let e =
        wgalloc::model::hf::weights_from_safetensors(&ckpt.config, &wide, "mem").expect_err("f64");
    assert!(
        matches!(&e, CheckpointError::WrongDtype { name, found } if name == "transformer.ln_f.bias" && found == "F64"),
        "{e}"
    );
}

#[test]
fn tokens_past_the_vocabulary_and_contexts_past_n_positions_are_refused() {
    let mut decoder = CpuDecoder::new(load_tiny());
    let e = generate_greedy(&mut decoder, &[1, 512], 3).expect_err("vocab");
    assert!(matches!(
        e,
        wgalloc::Error::Checkpoint(CheckpointError::TokenOutOfVocab {
            token: 512,
            position: 1,
            vocab: 512
        })
    ));
    assert_eq!(e.kind(), ErrorKind::BadInput);
    let e = generate_greedy(&mut decoder, &[1; 60], 6).expect_err("context");
    assert!(matches!(
        e,
        wgalloc::Error::Checkpoint(CheckpointError::ContextTooLong {
            needed: 65,
            n_positions: 64
        })
    ));
    // 60 + 5 fed = 64 positions: fits exactly.
    let g = generate_greedy(&mut decoder, &[1; 60], 5).expect("fits");
    assert_eq!(g.generated_ids.len(), 5);
}

/// The seeded configurations the GPU tests use too: an odd vocabulary, `n_inner` not
/// 4 x width, head widths 16 and 64, a non-default epsilon, an untied head.
fn seeded_configs() -> Vec<Gpt2Config> {
    let mut odd = Gpt2Config::new(2, 32, 2, 101, 40);
    odd.n_inner = Some(72);
    let mut wide_heads = Gpt2Config::new(1, 128, 2, 64, 24);
    wide_heads.layer_norm_epsilon = 1e-3;
    let mut untied = Gpt2Config::new(1, 48, 3, 37, 16);
    untied.tie_word_embeddings = false;
    vec![odd, wide_heads, untied]
}

#[test]
fn seeded_checkpoints_round_trip_and_decode_as_they_recompute() {
    for (i, config) in seeded_configs().into_iter().enumerate() {
        let ckpt = Checkpoint {
            weights: Gpt2Weights::seeded(&config, 100 + i as u64),
            config: config.clone(),
        };
        let dir = temp_dir(&format!("seeded{i}"));
        ckpt.save(&dir, i % 2 == 0).expect("saves");
        let back = Checkpoint::load(&dir).expect("loads");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(back, ckpt, "config {i}");
        let model = CpuGpt2::new(back.config, back.weights).expect("model");
        let prompt: Vec<u32> = (0..5)
            .map(|t| (t * 7 + i as u32) % config.vocab_size as u32)
            .collect();
        let g = generate_greedy(&mut CpuDecoder::new(model.clone()), &prompt, 6).expect("gen");
        let mut seq = prompt.clone();
        seq.extend(&g.generated_ids[..5]);
        let full = model.logits(&seq).expect("full");
        let v = config.vocab_size;
        for (step, logits) in g.step_logits.iter().enumerate() {
            let row = &full[(prompt.len() - 1 + step) * v..][..v];
            for (a, b) in row.iter().zip(logits) {
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + a.abs()),
                    "config {i} step {step}"
                );
            }
        }
    }
}
