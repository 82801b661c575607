//! `ModelSession`: the built-in decoder on planned memory across several runs.

mod common;

use wgalloc::model::{ModelConfig, ModelSession, RunOptions};

fn tiny() -> ModelConfig {
    common::tiny_model(1)
}

#[test]
fn repeated_runs_reuse_the_reservation_and_every_bind_group() {
    let Some(ctx) = common::gpu() else { return };
    let mut session = ModelSession::new(&ctx, &tiny()).expect("session");
    let first = session.run(16, RunOptions::default()).expect("runs");
    assert!(first.passed(), "{first:?}");
    assert!(!first.reused_reservation);
    assert!(first.exec.bind_groups_created > 0);
    let again = session.run(16, RunOptions::default()).expect("runs");
    assert!(again.passed());
    assert!(again.reused_reservation);
    assert_eq!(
        again.exec.bind_groups_created, 0,
        "same memory, same bind groups"
    );
    assert_eq!(again.activation_bytes, first.activation_bytes);
}

#[test]
fn a_shorter_sequence_fits_the_reservation_and_a_longer_one_grows_it() {
    let Some(ctx) = common::gpu() else { return };
    let mut session = ModelSession::new(&ctx, &tiny()).expect("session");
    let long = session.run(16, RunOptions::default()).expect("runs");
    let short = session.run(8, RunOptions::default()).expect("runs");
    assert!(short.passed() && short.reused_reservation && !short.weights_rebuilt);
    assert_eq!(short.activation_bytes, long.activation_bytes);
    assert!(short.graph_bytes < long.graph_bytes);
    let longer = session.run(24, RunOptions::default()).expect("runs");
    assert!(longer.passed() && !longer.reused_reservation && longer.weights_rebuilt);
    assert!(longer.activation_bytes > long.activation_bytes);
    assert_eq!(session.reserved_activation_bytes(), longer.activation_bytes);
}

#[test]
fn an_injected_clobber_fails_verify_the_logits_and_the_proof() {
    let Some(ctx) = common::gpu() else { return };
    // Heads of width 6 keep attention head by head (see `fused_layers`): the fused
    // layers have no pair to clobber (every tensor live while another is written is
    // read by the same node, or the other is too large to move beside it).
    let per_head = ModelConfig {
        width: 24,
        heads: 4,
        ..tiny()
    };
    assert!(!wgalloc::model::fused_layers(&per_head));
    let mut session = ModelSession::new(&ctx, &per_head).expect("session");
    let run = session
        .run(
            16,
            RunOptions {
                inject_clobber: true,
            },
        )
        .expect("runs");
    let clobber = run.clobber.expect("the model has a pair to clobber");
    assert!(!run.plan_verified);
    assert!(!run.logits_match, "max error {}", run.max_abs_error);
    let first = run.proof.first().expect("the proof names a tensor");
    assert_eq!(first.tensor, clobber.victim, "{first}");
    assert!(!run.passed());
    // The next honest run on the same memory passes again.
    assert!(session
        .run(16, RunOptions::default())
        .expect("runs")
        .passed());
}

#[test]
fn a_model_too_large_for_the_device_is_refused_before_allocating() {
    let Some(ctx) = common::gpu() else { return };
    let binding = ctx.limits.max_storage_buffer_binding_size;
    let vocab = binding / 4 / 32 + 1; // the token embedding alone exceeds a binding
    let config = ModelConfig { vocab, ..tiny() };
    let error = ModelSession::new(&ctx, &config).expect_err("too large");
    assert!(error.to_string().contains("token embedding"), "{error}");
}
