//! AdamW with global-norm clipping against a float64 CPU AdamW (golden README section 4) over
//! five steps: clipping active, inactive and switching, decay on some blocks only, a learning
//! rate that changes every step through `set_step`, chunked bindings, determinism.

use super::common::*;
use ddl::gpu::View;
use ddl::gpu::{DType, Tensor};
use ddl::kernels::adamw::{self, AdamWBufs, AdamWConfig};
use ddl::kernels::reduce;

/// The buffers of one step.
fn bufs<'a>(
    p: &'a Tensor,
    g: &'a Tensor,
    m: &'a Tensor,
    v: &'a Tensor,
    mask: View<'a>,
    norm: View<'a>,
) -> AdamWBufs<'a> {
    AdamWBufs { params: p, grads: g, m, v, decay_mask: mask, norm_sq: norm }
}

/// float64 AdamW state.
struct CpuAdamW {
    p: Vec<f64>,
    m: Vec<f64>,
    v: Vec<f64>,
}

impl CpuAdamW {
    /// One step with the golden formulas; `decayed[i]` says whether element i is decayed.
    fn step(&mut self, g: &[f32], decayed: &[bool], c: &AdamWConfig) {
        let (lr, b1, b2) = (c.lr as f64, c.beta1 as f64, c.beta2 as f64);
        let (eps, wd, t) = (c.eps as f64, c.weight_decay as f64, c.step as i32);
        let norm = g.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
        let clip = if c.grad_clip > 0.0 { (c.grad_clip as f64 / (norm + c.clip_eps as f64)).min(1.0) } else { 1.0 };
        for i in 0..g.len() {
            let gi = g[i] as f64 * clip;
            if decayed[i] {
                self.p[i] *= 1.0 - lr * wd;
            }
            self.m[i] = b1 * self.m[i] + (1.0 - b1) * gi;
            self.v[i] = b2 * self.v[i] + (1.0 - b2) * gi * gi;
            let denom = self.v[i].sqrt() / (1.0 - b2.powi(t)).sqrt() + eps;
            self.p[i] -= lr / (1.0 - b1.powi(t)) * self.m[i] / denom;
        }
    }
}

fn config(step: u32, grad_clip: f32) -> AdamWConfig {
    AdamWConfig {
        // a schedule: set_step must carry the new lr too
        lr: 1e-2 * (1.0 - 0.1 * step as f32),
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.5,
        grad_clip,
        clip_eps: 1e-6,
        step,
        grad_scale: 1.0,
    }
}

/// A flat layout of `sizes` tensors, each aligned to 64 elements; every other one decayed.
fn layout(sizes: &[usize]) -> (usize, Vec<(usize, usize)>) {
    let mut off = 0;
    let mut decayed = Vec::new();
    for (i, &s) in sizes.iter().enumerate() {
        if i % 2 == 0 {
            decayed.push((off, s));
        }
        off = (off + s).div_ceil(64) * 64;
    }
    (off, decayed)
}

struct Outcome {
    p: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
}

/// Five steps on the GPU (sum_squares of the gradients, then the AdamW step bound once and
/// updated with set_step) and on the CPU; asserts they agree and returns the GPU state.
fn five_steps(
    gpu: &Gpu,
    rng: Rng,
    sizes: &[usize],
    grad_clip: f32,
    factors: [f32; 5],
    chunk: Option<usize>,
) -> Outcome {
    five_steps_scaled(gpu, rng, sizes, grad_clip, factors, chunk, 1.0)
}

/// [`five_steps`] with gradients that carry a loss scale `scale` on the GPU (the CPU steps the
/// unscaled ones).
fn five_steps_scaled(
    gpu: &Gpu,
    mut rng: Rng,
    sizes: &[usize],
    grad_clip: f32,
    factors: [f32; 5],
    chunk: Option<usize>,
    scale: f32,
) -> Outcome {
    let (n, ranges) = layout(sizes);
    let mask = adamw::decay_mask(n, &ranges);
    let decayed: Vec<bool> = (0..n).map(|i| mask[i / 64] != 0).collect();
    let p0 = rng.normal(n, 0.5);
    let params = upload(gpu, "params", &p0);
    let grads = Tensor::zeros(gpu, "grads", &[n], DType::F32).unwrap();
    let m = Tensor::zeros(gpu, "m", &[n], DType::F32).unwrap();
    let v = Tensor::zeros(gpu, "v", &[n], DType::F32).unwrap();
    let tmask = Tensor::from_u32(gpu, "mask", &[mask.len()], &mask).unwrap();
    let norm_sq = poisoned(gpu, "norm_sq", &[1]);
    let norm_ds = reduce::sum_squares(gpu, &grads, n, norm_sq.view()).unwrap();
    let c1 = AdamWConfig { grad_scale: scale, ..config(1, grad_clip) };
    let step_ds = match chunk {
        Some(c) => adamw::step_chunked(gpu, &bufs(&params, &grads, &m, &v, tmask.view(), norm_sq.view()), n, &c1, c),
        None => adamw::step(gpu, &bufs(&params, &grads, &m, &v, tmask.view(), norm_sq.view()), n, &c1),
    }
    .unwrap();
    let mut cpu = CpuAdamW { p: p0.iter().map(|&x| x as f64).collect(), m: vec![0.0; n], v: vec![0.0; n] };
    for (t, f) in (1..=5).zip(factors) {
        let c = AdamWConfig { grad_scale: scale, ..config(t, grad_clip) };
        let g: Vec<f32> = rng.normal(n, 1.0).iter().map(|x| x * f).collect();
        grads.write_f32(gpu, &g.iter().map(|x| x * scale).collect::<Vec<_>>()).unwrap();
        if t > 1 {
            adamw::set_step(gpu, &step_ds, &c).unwrap();
        }
        let all: Vec<&ddl::gpu::Dispatch> = norm_ds.iter().chain(&step_ds).collect();
        gpu.run(&all).unwrap();
        cpu.step(&g, &decayed, &c);
    }
    let out = Outcome { p: read(gpu, &params), m: read(gpu, &m), v: read(gpu, &v) };
    let name = format!("adamw n={n} clip={grad_clip} {factors:?} chunk={chunk:?}");
    assert_close(&format!("{name} params"), &out.p, &cpu.p, 1e-5, rng.seed);
    assert_close(&format!("{name} m"), &out.m, &cpu.m, 1e-5, rng.seed);
    assert_close(&format!("{name} v"), &out.v, &cpu.v, 1e-5, rng.seed);
    // The update itself is the sensitive quantity (parameters barely move).
    let upd: Vec<f32> = out.p.iter().zip(&p0).map(|(a, b)| a - b).collect();
    let want: Vec<f64> = cpu.p.iter().zip(&p0).map(|(a, &b)| a - b as f64).collect();
    assert_close(&format!("{name} update"), &upd, &want, 1e-4, rng.seed);
    out
}

const SIZES: &[usize] = &[130, 64, 77, 1, 300, 5];

#[test]
fn five_steps_match_float64_with_clipping_active_at_every_step() {
    // ‖g‖ ≈ sqrt(n) ≈ 24: a clip at 5 is always active.
    five_steps(&gpu(), Rng::fresh(), SIZES, 5.0, [1.0; 5], None);
}

#[test]
fn five_steps_match_float64_with_clipping_switching_on_and_off() {
    five_steps(&gpu(), Rng::fresh(), SIZES, 24.0, [2.0, 0.3, 3.0, 0.2, 2.5], None);
}

#[test]
fn five_steps_match_float64_without_clipping() {
    five_steps(&gpu(), Rng::fresh(), SIZES, 0.0, [1.0, 0.5, 2.0, 1.0, 0.1], None);
    five_steps(&gpu(), Rng::fresh(), SIZES, 1e4, [1.0; 5], None);
}

#[test]
fn chunked_bindings_match_float64_and_are_bit_identical_to_one_binding() {
    let sizes = [1000, 2049, 17, 3000, 64, 999];
    let factors = [1.0, 2.0, 0.5, 3.0, 1.0];
    let seed = Rng::fresh().seed;
    let whole = five_steps(&gpu(), Rng::new(seed), &sizes, 30.0, factors, None);
    // A requested size becomes a multiple of 16·alignment (the mask's alignment), at least one.
    for c in [1, 5000] {
        let chunked = five_steps(&gpu(), Rng::new(seed), &sizes, 30.0, factors, Some(c));
        for (x, y) in [(&whole.p, &chunked.p), (&whole.m, &chunked.m), (&whole.v, &chunked.v)] {
            let same = x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same, "chunk {c}: differs from one binding (seed {seed})");
        }
    }
    let gpu = gpu();
    let (n, _) = layout(&sizes);
    let t = |l| Tensor::zeros(&gpu, l, &[n], DType::F32).unwrap();
    let mask = Tensor::zeros(&gpu, "mask", &[n.div_ceil(64)], DType::U32).unwrap();
    let norm = t("norm");
    let ds = adamw::step_chunked(
        &gpu,
        &bufs(&t("p"), &t("g"), &t("m"), &t("v"), mask.view(), norm.view()),
        n,
        &config(1, 0.0),
        1,
    )
    .unwrap();
    let quantum = 16 * gpu.limits.min_storage_buffer_offset_alignment as usize;
    assert_eq!(ds.len(), n.div_ceil(quantum));
}

#[test]
fn four_elements_per_invocation_give_the_bits_of_one() {
    // adamw_step4 (the model's case: sizes padded to 64) against the scalar kernel, whole and
    // chunked, clipping on.
    let seed = Rng::fresh().seed;
    for chunk in [None, Some(1)] {
        let a = with_forms(
            &gpu(),
            |f| f.adamw_vec4 = true,
            |gpu| five_steps(gpu, Rng::new(seed), SIZES, 5.0, [1.0, 3.0, 0.5, 1.0, 2.0], chunk),
        );
        let b = with_forms(
            &gpu(),
            |f| f.adamw_vec4 = false,
            |gpu| five_steps(gpu, Rng::new(seed), SIZES, 5.0, [1.0, 3.0, 0.5, 1.0, 2.0], chunk),
        );
        for (x, y) in [(&a.p, &b.p), (&a.m, &b.m), (&a.v, &b.v)] {
            let same = x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same, "chunk {chunk:?}: vec4 and scalar steps differ (seed {seed})");
        }
    }
    let gpu = gpu();
    assert!(adamw::vec4(&gpu, 64) && !adamw::vec4(&gpu, 66));
    assert!(!adamw::vec4(&gpu.with_forms(|f| f.adamw_vec4 = false), 64));
}

#[test]
fn gradients_that_carry_a_power_of_two_loss_scale_give_the_unscaled_bits() {
    // Dynamic loss scaling: grads hold S·g; the step divides by S (and clips the norm of g). With
    // S a power of two every scaling is exact, so the result is the unscaled step bit for bit,
    // clipping on, off and switching.
    let seed = Rng::fresh().seed;
    for (clip, factors) in [(5.0, [1.0; 5]), (24.0, [2.0, 0.3, 3.0, 0.2, 2.5]), (0.0, [1.0, 0.5, 2.0, 1.0, 0.1])] {
        let plain = five_steps(&gpu(), Rng::new(seed), SIZES, clip, factors, None);
        for scale in [65536.0, 0.125] {
            let scaled = five_steps_scaled(&gpu(), Rng::new(seed), SIZES, clip, factors, None, scale);
            for (x, y) in [(&plain.p, &scaled.p), (&plain.m, &scaled.m), (&plain.v, &scaled.v)] {
                let same = x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
                assert!(same, "clip {clip}, scale {scale}: differs from the unscaled step (seed {seed})");
            }
        }
    }
    let gpu = gpu();
    let t = |l| Tensor::zeros(&gpu, l, &[64], DType::F32).unwrap();
    let mask = Tensor::zeros(&gpu, "mask", &[1], DType::U32).unwrap();
    for bad in [0.0, -2.0, f32::INFINITY, f32::NAN] {
        let c = AdamWConfig { grad_scale: bad, ..config(1, 1.0) };
        let e = adamw::step(&gpu, &bufs(&t("p"), &t("g"), &t("m"), &t("v"), mask.view(), t("n").view()), 64, &c);
        assert!(e.unwrap_err().to_string().contains("grad_scale"));
    }
}

#[test]
fn results_are_bit_identical_run_to_run() {
    let seed = Rng::fresh().seed;
    let a = five_steps(&gpu(), Rng::new(seed), SIZES, 5.0, [1.0; 5], None);
    let b = five_steps(&gpu(), Rng::new(seed), SIZES, 5.0, [1.0; 5], None);
    for (x, y) in [(&a.p, &b.p), (&a.m, &b.m), (&a.v, &b.v)] {
        let same = x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
        assert!(same, "seed {seed}");
    }
}

#[test]
fn decay_mask_marks_the_64_element_words_of_the_decayed_ranges() {
    assert_eq!(adamw::decay_mask(200, &[(0, 10), (128, 65)]), [1, 0, 1, 1]);
    assert_eq!(adamw::decay_mask(64, &[]), [0]);
    assert_eq!(adamw::decay_mask(65, &[(64, 1)]), [0, 1]);
    assert!(adamw::decay_mask(0, &[]).is_empty());
}

#[test]
#[should_panic(expected = "not aligned to 64")]
fn decay_mask_rejects_an_unaligned_range() {
    adamw::decay_mask(200, &[(10, 5)]);
}

#[test]
fn bad_sizes_steps_and_dispatches_are_errors_not_panics() {
    let gpu = gpu();
    let t = |l, n| Tensor::zeros(&gpu, l, &[n], DType::F32).unwrap();
    let (p, g, m, v) = (t("p", 100), t("g", 100), t("m", 99), t("v", 100));
    let mask = Tensor::zeros(&gpu, "mask", &[2], DType::U32).unwrap();
    let norm = t("norm", 1);
    let c = config(1, 1.0);
    let e = adamw::step(&gpu, &bufs(&p, &g, &m, &v, mask.view(), norm.view()), 100, &c).unwrap_err();
    assert!(e.to_string().contains("'m' needs 100 elements"), "{e}");
    let e = adamw::step(&gpu, &bufs(&p, &g, &p, &v, mask.view(), norm.view()), 99, &c).unwrap_err();
    assert!(e.to_string().contains("same buffer"), "{e}");
    let e = adamw::step(&gpu, &bufs(&p, &g, &v, &t("v2", 200), mask.view(), norm.view()), 200, &c).unwrap_err();
    assert!(e.to_string().contains("'params' needs 200"), "{e}");
    let short = Tensor::zeros(&gpu, "mask", &[1], DType::U32).unwrap();
    let e = adamw::step(&gpu, &bufs(&p, &g, &v, &t("v3", 100), short.view(), norm.view()), 100, &c).unwrap_err();
    assert!(e.to_string().contains("'decay_mask' needs 2 elements"), "{e}");
    let e = adamw::step(&gpu, &bufs(&p, &g, &t("m2", 100), &v, mask.view(), norm.view()), 100, &config(0, 1.0))
        .unwrap_err();
    assert!(e.to_string().contains("1-based"), "{e}");
    let ds = adamw::step(&gpu, &bufs(&p, &g, &t("m3", 100), &v, mask.view(), norm.view()), 100, &c).unwrap();
    assert!(adamw::set_step(&gpu, &ds, &config(0, 1.0)).is_err());
    let other = reduce::sum_squares(&gpu, &g, 100, norm.view()).unwrap();
    let e = adamw::set_step(&gpu, &other, &c).unwrap_err();
    assert!(e.to_string().contains("not made by adamw::step"), "{e}");
}

#[test]
fn a_non_finite_gradient_norm_leaves_parameters_and_moments_untouched() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let n = 300;
    let p0 = rng.normal(n, 1.0);
    let params = upload(&gpu, "p", &p0);
    let grads = upload(&gpu, "g", &rng.normal(n, 1.0));
    let m = upload(&gpu, "m", &vec![0.5; n]);
    let v = upload(&gpu, "v", &vec![0.25; n]);
    let mask = ddl::gpu::Tensor::from_u32(&gpu, "mask", &[n.div_ceil(64)], &vec![1; n.div_ceil(64)]).unwrap();
    let cfg = ddl::kernels::adamw::AdamWConfig::paper(1e-2);
    for bad in [f32::NAN, f32::INFINITY] {
        let norm = upload(&gpu, "norm", &[bad]);
        let ds =
            ddl::kernels::adamw::step(&gpu, &bufs(&params, &grads, &m, &v, mask.view(), norm.view()), n, &cfg).unwrap();
        run(&gpu, &ds);
        assert_eq!(read(&gpu, &params), p0, "norm {bad}: parameters changed");
        assert!(read(&gpu, &m).iter().all(|&x| x == 0.5) && read(&gpu, &v).iter().all(|&x| x == 0.25));
    }
    // A finite norm does update (the guard is not always on).
    let norm = upload(&gpu, "norm", &[4.0]);
    let ds =
        ddl::kernels::adamw::step(&gpu, &bufs(&params, &grads, &m, &v, mask.view(), norm.view()), n, &cfg).unwrap();
    run(&gpu, &ds);
    assert_ne!(read(&gpu, &params), p0);
}
