//! `model::Forward` computes the same logits on every run: the plan reuses the token
//! ids' bytes once the embedding has read them (checked here, so the test means
//! something), and each run writes the ids again (issue 25, stumble 9).

mod common;

use wgalloc::model::{Forward, LOGITS_TOLERANCE};

#[test]
fn every_run_of_the_forward_pass_computes_the_reference_logits() {
    let Some(ctx) = common::gpu() else { return };
    let config = common::tiny_model(2);
    let mut forward = Forward::new(&ctx, &config).expect("builds");
    let graph = &forward.model().graph;
    let tokens = forward.model().tokens;
    let plan = forward.plan();
    let ids = plan.placement(tokens).expect("the ids are planned");
    let reused = graph.tensors.iter().any(|t| {
        t.id != tokens
            && t.view_of.is_none()
            && plan.placement(t.id).is_some_and(|p| {
                p.buffer == ids.buffer
                    && p.chunk == ids.chunk
                    && p.offset < ids.offset + ids.size
                    && ids.offset < p.offset + p.size
            })
    });
    assert!(
        reused,
        "the plan reuses the ids' bytes (else this test checks nothing)"
    );
    let reference = forward
        .model()
        .reference_logits(forward.model().token_ids())
        .expect("reference");
    let scale = reference.iter().fold(1f32, |m, v| m.max(v.abs()));
    for run in 0..3 {
        forward.run().expect("runs");
        let logits = forward.logits().expect("logits");
        let error = logits
            .iter()
            .zip(&reference)
            .fold(0f32, |m, (g, c)| m.max((g - c).abs()));
        assert!(
            logits.len() == reference.len() && error <= LOGITS_TOLERANCE * scale,
            "run {run}: max error {error}"
        );
    }
}
