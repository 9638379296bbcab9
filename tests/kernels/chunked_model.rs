//! A whole model on a device whose storage bindings are a few KiB: the embedding table, the tied
//! LM head, the MLP weights, the logits and the flat parameter buffers are all bound in chunks
//! (embedding row chunks, split matmuls, chunked loss, AdamW and reductions), and one training
//! step must compute what the same model computes with whole bindings.

use super::common::*;
use ddl::gpu::Op;
use ddl::kernels::adamw::AdamWConfig;
use ddl::model::{Model, ModelConfig, Precision, Program, Variant};

const OPT: AdamWConfig = AdamWConfig::paper(1e-3);

fn runs(p: &Program) -> usize {
    [p.zero_ops(), p.forward_ops(), p.backward_ops(), p.finish_ops()]
        .iter()
        .flat_map(|ops| ops.iter())
        .filter(|o| matches!(o, Op::Run(_)))
        .count()
}

/// (loss, grad norm, gradients, dispatches) of one forward+backward, then the loss after one
/// AdamW step on the same batch.
fn step(
    gpu: &std::sync::Arc<ddl::gpu::Gpu>,
    cfg: &ModelConfig,
    x: &[i32],
    y: &[i32],
    t: usize,
    precision: Precision,
) -> (f32, f32, Vec<f32>, usize, f32) {
    let mut model = Model::new(gpu.clone(), cfg.clone(), 1).unwrap();
    model.set_precision(precision).unwrap();
    let prog = model.program(x.len() / t, t, &OPT).unwrap();
    prog.set_batch(&model, x, y).unwrap();
    let (loss, gnorm) = model.forward_backward(&prog).unwrap();
    let grads = model.grads.read_f32(gpu).unwrap();
    model.train_step(&prog, &OPT).unwrap();
    let after = model.train_step(&prog, &AdamWConfig { step: 2, ..OPT }).unwrap().0;
    (loss, gnorm, grads, runs(&prog), after)
}

#[test]
fn a_model_with_every_binding_chunked_trains_like_the_whole_one() {
    let gpu = gpu();
    // 64 KiB bindings: the table (1000 × 128 floats, 500 KiB), the logits [32, 1000], the MLP
    // weights [341, 128] and the parameter, gradient and moment buffers exceed them.
    let small = gpu.with_max_storage_binding(64 * 1024).unwrap();
    assert_eq!(small.limits.max_storage_buffer_binding_size, 64 * 1024);
    let mut rng = Rng::fresh();
    // In f16 the MLP weights' f16 copy (87 KiB), ψ and the head's E are f16-stored operands cut
    // like the f32 ones.
    for (variant, precision) in [
        (Variant::Baseline, Precision::F32),
        (Variant::Ddl, Precision::F32),
        (Variant::Baseline, Precision::F16),
        (Variant::Ddl, Precision::F16),
    ] {
        let cfg = ModelConfig { vocab_size: 1000, ..ModelConfig::preset("tiny", variant).unwrap() };
        let (b, t) = (2, 16);
        let x = rng.ints(b * t, cfg.vocab_size);
        let mut y = rng.ints(b * t, cfg.vocab_size);
        y[3] = -1; // an ignored target
        let whole = step(&gpu, &cfg, &x, &y, t, precision);
        let chunked = step(&small, &cfg, &x, &y, t, precision);
        let name = format!("{variant:?} {} chunked", precision.name());
        assert!(chunked.3 > whole.3, "{name}: {} dispatches, whole bindings {}", chunked.3, whole.3);
        // The LM head's dX = dlogits·E is split along the vocabulary (K): float32 rounding only.
        // In f16 such a difference moves the f16 rounding of an operand read after it by one f16
        // step (2^-11 relative) here and there, and those steps spread through the backward's
        // later roundings up to the f16 rounding scale (measured 5–7e-4 relative L2 of the
        // gradients; the f16 tolerance against float64 is 5e-2): bounds ten times that.
        let rel = |a: f32, b: f32| ((a - b) / b).abs();
        let (g_tol, n_tol, l_tol) = if precision == Precision::F16 { (5e-3, 1e-3, 1e-3) } else { (1e-5, 1e-5, 1e-4) };
        assert!(
            whole.0.is_finite() && rel(chunked.0, whole.0) < 1e-6,
            "{name}: loss {} vs {} (seed {})",
            chunked.0,
            whole.0,
            rng.seed
        );
        assert!(rel(chunked.1, whole.1) < n_tol, "{name}: grad norm {} vs {} (seed {})", chunked.1, whole.1, rng.seed);
        let want: Vec<f64> = whole.2.iter().map(|&g| g as f64).collect();
        let r = ddl::testing::compare(&format!("{name} gradients"), &chunked.2, &want);
        assert!(r.passes(g_tol), "{r} (seed {})", rng.seed);
        assert!(
            rel(chunked.4, whole.4) < l_tol,
            "{name}: loss after two steps {} vs {} (seed {})",
            chunked.4,
            whole.4,
            rng.seed
        );
        assert!(whole.4 < whole.0, "{name}: two steps on one batch lower the loss: {} → {}", whole.0, whole.4);
    }
}
