//! Input expansion X⁰ (spec 3.5, 11.4) against float64 references: EC and replication, forward
//! and backward at odd shapes (T < K, T = 1), dekernel accumulation, chunked reductions that
//! straddle sequences, more than 65535 workgroups, bit-identical reruns, identity init =
//! replication, and finite-difference checks of the references.

use super::common::*;
use ddl::gpu::GpuError;
use ddl::kernels::expand::{self, ConvShape};
use ddl::testing::f64s;

fn shape(batch: usize, seq: usize, d: usize, m: usize, kernel: usize) -> ConvShape {
    ConvShape { batch, seq, d, m, kernel, state_f16: false }
}

// ------------------------------------------------------------------------------------------------
// float64 references

/// EC, spec 3.5: x0[b,t,i,j] = Σ_s E[i,j,s]·e[b, t−(K−1)+s, i].
fn ec_ref(s: &ConvShape, e: &[f64], ek: &[f64]) -> Vec<f64> {
    let (tn, d, m, k) = (s.seq, s.d, s.m, s.kernel);
    let mut x0 = vec![0.0; s.tokens() * d * m];
    for b in 0..s.batch {
        for t in 0..tn {
            for i in 0..d {
                for j in 0..m {
                    let c = i * m + j;
                    let mut acc = 0.0;
                    for tap in 0..k {
                        if let Some(tau) = (t + tap + 1).checked_sub(k) {
                            acc += ek[c * k + tap] * e[(b * tn + tau) * d + i];
                        }
                    }
                    x0[(b * tn + t) * d * m + c] = acc;
                }
            }
        }
    }
    x0
}

/// EC backward, spec 11.4: (de, dekernel) for upstream gradient g.
fn ec_grad_ref(s: &ConvShape, e: &[f64], ek: &[f64], g: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (tn, d, m, k) = (s.seq, s.d, s.m, s.kernel);
    let dm = d * m;
    let mut de = vec![0.0; s.tokens() * d];
    let mut dek = vec![0.0; dm * k];
    for b in 0..s.batch {
        for t in 0..tn {
            for i in 0..d {
                for j in 0..m {
                    let c = i * m + j;
                    for tap in 0..k {
                        // ∂E[i,j,s] = Σ_t G_t[i,j] e_{t−K+1+s}[i]
                        if let Some(tau) = (t + tap + 1).checked_sub(k) {
                            dek[c * k + tap] += g[(b * tn + t) * dm + c] * e[(b * tn + tau) * d + i];
                        }
                        // ∂e_τ[i] = Σ_j Σ_s E[i,j,s] G_{τ+K−1−s}[i,j], with τ = t here.
                        let src = t + k - 1 - tap;
                        if src < tn {
                            de[(b * tn + t) * d + i] += ek[c * k + tap] * g[(b * tn + src) * dm + c];
                        }
                    }
                }
            }
        }
    }
    (de, dek)
}

fn replicate_ref(n: usize, d: usize, m: usize, e: &[f64]) -> Vec<f64> {
    (0..n * d * m).map(|o| e[o / m]).collect()
}

fn replicate_grad_ref(n: usize, d: usize, m: usize, g: &[f64]) -> Vec<f64> {
    (0..n * d).map(|o| g[o * m..(o + 1) * m].iter().sum()).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `assert_close`, with the relative L2 error of outputs beyond a million elements computed here
/// in one pass (the full report, which sorts every element, is only built on failure).
#[track_caller]
fn close(name: &str, got: &[f32], want: &[f64], tol: f64, seed: u64) {
    if got.len() > 1 << 20 {
        assert_eq!(got.len(), want.len(), "{name}: length");
        let (mut num, mut den, mut finite) = (0.0f64, 0.0f64, true);
        for (&g, &w) in got.iter().zip(want) {
            finite &= g.is_finite();
            num += (g as f64 - w) * (g as f64 - w);
            den += w * w;
        }
        if finite && (num / den.max(f64::MIN_POSITIVE)).sqrt() <= tol {
            return;
        }
    }
    assert_close(name, got, want, tol, seed);
}

// ------------------------------------------------------------------------------------------------
// GPU runs

struct EcInputs {
    e: Vec<f32>,
    ek: Vec<f32>,
    g: Vec<f32>,
    dek0: Vec<f32>,
}

struct EcOutputs {
    x0: Vec<f32>,
    de: Vec<f32>,
    dek: Vec<f32>,
}

fn ec_inputs(s: &ConvShape, rng: &mut Rng) -> EcInputs {
    let (n, d, m, k) = (s.tokens(), s.d, s.m, s.kernel);
    EcInputs {
        e: rng.normal(n * d, 1.0),
        ek: rng.uniform(d * m * k, -1.0, 1.0),
        g: rng.normal(n * d * m, 1.0),
        dek0: rng.uniform(d * m * k, -1.0, 1.0),
    }
}

/// EC forward (x0 poisoned) and backward (de poisoned, dekernel preloaded) on the GPU.
fn run_ec(s: &ConvShape, inp: &EcInputs) -> EcOutputs {
    let gpu = gpu();
    let (n, d, m) = (s.tokens(), s.d, s.m);
    let e = upload(&gpu, "e", &inp.e);
    let ek = upload(&gpu, "ekernel", &inp.ek);
    let x0 = poisoned(&gpu, "x0", &[n * d * m]);
    run(&gpu, &expand::ec_forward(&gpu, s, e.view(), ek.view(), x0.view()).unwrap());
    let g = upload(&gpu, "g", &inp.g);
    let de = poisoned(&gpu, "de", &[n * d]);
    let dek = upload(&gpu, "dekernel", &inp.dek0);
    run(&gpu, &expand::ec_backward(&gpu, s, e.view(), ek.view(), g.view(), de.view(), dek.view()).unwrap());
    EcOutputs { x0: read(&gpu, &x0), de: read(&gpu, &de), dek: read(&gpu, &dek) }
}

/// EC at one shape: forward ≤ 1e-5, de and the accumulated dekernel ≤ 1e-4 vs float64.
fn check_ec(s: ConvShape) {
    let mut rng = Rng::fresh();
    let mut inp = ec_inputs(&s, &mut rng);
    let (e, ek, g) = (f64s(&inp.e), f64s(&inp.ek), f64s(&inp.g));
    let (de, dek) = ec_grad_ref(&s, &e, &ek, &g);
    // dekernel preload: at the gradient's scale with matching signs, so that preload + gradient
    // never cancels to near zero (that would measure the preload's rounding, not the kernel).
    let rms = (dek.iter().map(|v| v * v).sum::<f64>() / dek.len() as f64).sqrt().max(1e-3);
    let u = rng.uniform(dek.len(), 0.5, 1.5);
    inp.dek0 = u.iter().zip(&dek).map(|(&u, &v)| (u as f64 * rms).copysign(v) as f32).collect();
    let got = run_ec(&s, &inp);
    let name = format!("ec {s:?}");
    let seed = rng.seed;
    // x0 is a sum of K terms of both signs: compared at the scale of the terms (`within_scale`).
    let (x0, x0_scale) = (ec_ref(&s, &e, &ek), ec_ref(&s, &abs64(&inp.e), &abs64(&inp.ek)));
    if !within_scale(&got.x0, &x0, &x0_scale, 1e-5) {
        close(&format!("{name} x0"), &got.x0, &x0, 1e-5, seed);
    }
    let dek: Vec<f64> = inp.dek0.iter().zip(&dek).map(|(&a, b)| a as f64 + b).collect();
    close(&format!("{name} de"), &got.de, &de, 1e-4, seed);
    close(&format!("{name} dekernel"), &got.dek, &dek, 1e-4, seed);
}

/// Replication forward (x0 poisoned) and backward (de poisoned) at one size.
fn check_replicate(n: usize, d: usize, m: usize) {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let e = rng.normal(n * d, 1.0);
    let g = rng.normal(n * d * m, 1.0);
    let te = upload(&gpu, "e", &e);
    let x0 = poisoned(&gpu, "x0", &[n * d * m]);
    let fwd = expand::replicate_forward(&gpu, n, d, m, te.view(), x0.view()).unwrap();
    run(&gpu, &fwd);
    let tg = upload(&gpu, "g", &g);
    let de = poisoned(&gpu, "de", &[n * d]);
    let bwd = expand::replicate_backward(&gpu, n, d, m, tg.view(), de.view()).unwrap();
    run(&gpu, &bwd);
    // m = 4: a state row is one vec4 (the `*4` entry points).
    for ds in [&fwd, &bwd] {
        assert_eq!(ds[0].kernel.name.ends_with('4'), m == 4, "{}", ds[0].kernel.name);
    }
    let name = format!("replicate n={n} d={d} m={m}");
    let want = replicate_ref(n, d, m, &f64s(&e));
    close(&format!("{name} x0"), &read(&gpu, &x0), &want, 0.0, rng.seed);
    // de is a sum of m terms of both signs: compared at the scale of the terms (`within_scale`),
    // as a single cancelling row (n = d = 1) can leave a relative error of 2e-5 by f32 rounding.
    let (want, scale) = (replicate_grad_ref(n, d, m, &f64s(&g)), replicate_grad_ref(n, d, m, &abs64(&g)));
    let got = read(&gpu, &de);
    if !within_scale(&got, &want, &scale, 1e-5) {
        close(&format!("{name} de"), &got, &want, 1e-5, rng.seed);
    }
}

const BS: [usize; 3] = [1, 2, 3];
const TS: [usize; 5] = [1, 2, 3, 9, 40];
const DS: [usize; 3] = [1, 5, 33];
const MS: [usize; 3] = [1, 3, 4];
const KS: [usize; 4] = [1, 2, 4, 5];

// ------------------------------------------------------------------------------------------------
// EC

#[test]
fn ec_forward_and_backward_match_float64_over_odd_shapes_and_short_sequences() {
    // Every (T, K) pair, including T < K and T = 1; B, d and m cycle so that every listed value
    // meets several (T, K).
    let mut idx = 0;
    for &t in &TS {
        for &k in &KS {
            check_ec(shape(BS[idx % 3], t, DS[(idx / 3) % 3], MS[(idx + idx / 3) % 3], k));
            idx += 1;
        }
    }
}

#[test]
fn ec_dekernel_reductions_over_many_chunks_and_sequence_boundaries_match_float64() {
    check_ec(shape(3, 700, 7, 3, 4));
    check_ec(shape(1, 9000, 2, 2, 3));
}

#[test]
fn ec_with_more_than_65535_workgroups_matches_float64() {
    let gpu = gpu();
    let max = gpu.limits.max_compute_workgroups_per_dimension as usize;
    // n·d·m invocations for the forward, n·d for de: both beyond one grid dimension.
    let d = 4099;
    let t = (max * 256).div_ceil(d) + 3;
    check_ec(shape(1, t, d, 1, 2));
}

#[test]
fn ec_backward_is_bit_identical_run_to_run() {
    let mut rng = Rng::fresh();
    let s = shape(2, 300, 33, 4, 4);
    let inp = ec_inputs(&s, &mut rng);
    let first = run_ec(&s, &inp);
    let second = run_ec(&s, &inp);
    for (name, p, q) in
        [("x0", &first.x0, &second.x0), ("de", &first.de, &second.de), ("dekernel", &first.dek, &second.dek)]
    {
        let same = p.iter().zip(q).all(|(u, v)| u.to_bits() == v.to_bits());
        assert!(same, "ec {name} differs between runs (seed {})", rng.seed);
    }
}

#[test]
fn ec_with_the_identity_init_reproduces_replication_bit_for_bit() {
    // Spec 3.5: E[i,j,K−1] = 1, other taps 0 ⇒ X⁰_t = e_t 1ᵀ.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let s = shape(2, 5, 7, 4, 4);
    let (n, d, m, k) = (s.tokens(), s.d, s.m, s.kernel);
    let e = upload(&gpu, "e", &rng.normal(n * d, 1.0));
    let mut ident = vec![0.0f32; d * m * k];
    for c in 0..d * m {
        ident[c * k + k - 1] = 1.0;
    }
    let ek = upload(&gpu, "ekernel", &ident);
    let xa = poisoned(&gpu, "x0_ec", &[n * d * m]);
    let xb = poisoned(&gpu, "x0_rep", &[n * d * m]);
    let mut ds = expand::ec_forward(&gpu, &s, e.view(), ek.view(), xa.view()).unwrap();
    ds.extend(expand::replicate_forward(&gpu, n, d, m, e.view(), xb.view()).unwrap());
    run(&gpu, &ds);
    let (a, b) = (read(&gpu, &xa), read(&gpu, &xb));
    assert!(
        a.iter().zip(&b).all(|(u, v)| u.to_bits() == v.to_bits()),
        "identity EC differs from replication (seed {})",
        rng.seed
    );
}

#[test]
fn ec_reference_backward_matches_central_finite_differences() {
    let mut rng = Rng::fresh();
    for s in [shape(1, 1, 2, 3, 4), shape(2, 3, 3, 2, 5), shape(2, 9, 4, 3, 2), shape(3, 7, 2, 4, 4)] {
        let (n, d, m, k) = (s.tokens(), s.d, s.m, s.kernel);
        let e = f64s(&rng.normal(n * d, 1.0));
        let ek = f64s(&rng.uniform(d * m * k, -1.0, 1.0));
        let w = f64s(&rng.normal(n * d * m, 1.0));
        let (de, dek) = ec_grad_ref(&s, &e, &ek, &w);
        let ee = fd_check(&mut |v| dot(&w, &ec_ref(&s, v, &ek)), &e, &de, 30, &mut rng);
        let ek_err = fd_check(&mut |v| dot(&w, &ec_ref(&s, &e, v)), &ek, &dek, 30, &mut rng);
        for (what, err) in [("de", ee), ("dekernel", ek_err)] {
            assert!(err < 1e-6, "{s:?} {what}: fd error {err:e} (seed {})", rng.seed);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Replication

#[test]
fn replicate_into_an_f16_state_writes_every_row_rounded_once() {
    // `--f16-state`: X⁰[t, i, j] = f16(e[t, i]) for j < 4, exactly (a single rounding), every
    // half written (the buffer starts as f16 NaN); odd sizes and more rows than one workgroup.
    let gpu = f16_gpu();
    let mut rng = Rng::fresh();
    for (n, d) in [(1, 1), (3, 5), (37, 33), (300, 7)] {
        let e = rng.normal(n * d, 3.0);
        let te = upload(&gpu, "e", &e);
        let x0 = poisoned_f16(&gpu, "x0", n * d * 4);
        run(&gpu, &expand::replicate_forward_f16(&gpu, n, d, te.view(), x0.view()).unwrap());
        let got = f16_unpack(&read(&gpu, &x0));
        let want: Vec<f32> = f16_round(&e).iter().flat_map(|&v| [v; 4]).collect();
        assert_eq!(got.len(), want.len());
        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g.to_bits() == w.to_bits(), "n={n} d={d}: x0[{o}] = {g}, want {w} (seed {})", rng.seed);
        }
    }
    // A view too short for the rows is a clear error.
    let te = upload(&gpu, "e", &[0.0; 20]);
    let short = upload(&gpu, "x0", &[0.0; 10]);
    let e = expand::replicate_forward_f16(&gpu, 4, 5, te.view(), short.view()).unwrap_err();
    assert!(e.to_string().contains("x0"), "{e}");
}

#[test]
fn replicate_forward_and_backward_match_float64_for_odd_sizes() {
    for &n in &[1usize, 2, 3, 9, 40, 120] {
        for &d in &DS {
            for &m in &MS {
                check_replicate(n, d, m);
            }
        }
    }
}

#[test]
fn ec_and_replication_of_states_wider_than_eight_value_channels_match_float64() {
    // d_v > 8 (the delta write's one-token-per-invocation form): m = 9, 16, 33, odd d, T < K.
    for (i, &m) in [9usize, 16, 33].iter().enumerate() {
        check_ec(shape(1 + i % 2, [1, 3, 40][i], [5, 4, 3][i], m, [4, 2, 5][i]));
        check_replicate([1, 9, 40][i], [5, 8, 3][i], m);
    }
}

#[test]
fn replicate_with_more_than_65535_workgroups_matches_float64() {
    let gpu = gpu();
    let max = gpu.limits.max_compute_workgroups_per_dimension as usize;
    // n·d·m for the forward and n·d for the backward both beyond one grid dimension.
    let d = 4099;
    check_replicate((max * 256).div_ceil(d) + 1, d, 1);
    check_replicate(1000, 1001, 17);
}

#[test]
fn replicate_reference_backward_matches_central_finite_differences() {
    let mut rng = Rng::fresh();
    let (n, d, m) = (3, 4, 3);
    let e = f64s(&rng.normal(n * d, 1.0));
    let w = f64s(&rng.normal(n * d * m, 1.0));
    let de = replicate_grad_ref(n, d, m, &w);
    let err = fd_check(&mut |v| dot(&w, &replicate_ref(n, d, m, v)), &e, &de, 12, &mut rng);
    assert!(err < 1e-6, "fd error {err:e} (seed {})", rng.seed);
}

// ------------------------------------------------------------------------------------------------
// Errors

#[test]
fn expand_shape_errors_name_the_tensor_and_are_not_panics() {
    let gpu = gpu();
    let s = shape(2, 3, 4, 2, 3);
    let e = upload(&gpu, "e", &[0.0; 2 * 3 * 4]);
    let ek = upload(&gpu, "ekernel", &[0.0; 4 * 2 * 3]);
    let x0 = upload(&gpu, "x0", &[0.0; 2 * 3 * 4 * 2]);
    let short = upload(&gpu, "short", &[0.0; 7]);
    let err = expand::ec_forward(&gpu, &s, e.view(), ek.view(), short.view()).unwrap_err();
    assert!(matches!(err, GpuError::Shape(_)), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("'x0'") && msg.contains("48") && msg.contains('7'), "{msg}");
    let err = expand::ec_backward(&gpu, &s, e.view(), short.view(), x0.view(), e.view(), ek.view()).unwrap_err();
    assert!(err.to_string().contains("'ekernel'"), "{err}");
    let err = expand::ec_forward(&gpu, &shape(2, 3, 4, 2, 0), e.view(), ek.view(), x0.view()).unwrap_err();
    assert!(matches!(err, GpuError::Shape(_)), "{err}");
    let err = expand::replicate_forward(&gpu, 6, 4, 3, e.view(), x0.view()).unwrap_err();
    assert!(err.to_string().contains("'x0'"), "{err}");
    let err = expand::replicate_backward(&gpu, 6, 4, 2, x0.view(), short.view()).unwrap_err();
    assert!(err.to_string().contains("'de'"), "{err}");
    let err = expand::replicate_backward(&gpu, 0, 4, 2, x0.view(), e.view()).unwrap_err();
    assert!(matches!(err, GpuError::Shape(_)), "{err}");
}
