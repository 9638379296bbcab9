//! The two DDL compressors (spec 3.3, 3.4, 11.2, 11.3) against float64 references: forward and
//! backward at odd shapes (T < K, T = 1, single features and channels), accumulation into the
//! gradient buffers, chunked reductions that straddle sequences, more than 65535 workgroups,
//! bit-identical reruns, and finite-difference checks of the references themselves.

use super::common::*;
use ddl::gpu::{Dispatch, GpuError};
use ddl::kernels::shortconv::{self, ConvGrads, ConvShape, ValueShape};
use ddl::testing::f64s;

fn shape(batch: usize, seq: usize, d: usize, m: usize, kernel: usize) -> ConvShape {
    ConvShape { batch, seq, d, m, kernel, state_f16: false }
}

// ------------------------------------------------------------------------------------------------
// float64 references

/// Token axis, spec 3.3: a[b,t,i] = Σ_j ρ_j Σ_s κ[i,j,s]·X[b, t−(K−1)+s, i, j].
fn token_ref(s: &ConvShape, x: &[f64], kappa: &[f64], rho: &[f64]) -> Vec<f64> {
    let (tn, d, m, k) = (s.seq, s.d, s.m, s.kernel);
    let mut a = vec![0.0; s.tokens() * d];
    for b in 0..s.batch {
        for t in 0..tn {
            for i in 0..d {
                let mut acc = 0.0;
                for (j, &rj) in rho.iter().enumerate().take(m) {
                    let c = i * m + j;
                    let mut xt = 0.0;
                    for tap in 0..k {
                        let Some(tau) = (t + tap + 1).checked_sub(k) else {
                            continue;
                        };
                        xt += kappa[c * k + tap] * x[(b * tn + tau) * d * m + c];
                    }
                    acc += rj * xt;
                }
                a[(b * tn + t) * d + i] = acc;
            }
        }
    }
    a
}

/// Token axis backward, spec 11.2 (plain gradients, nothing accumulated): (dx, dkappa, drho).
fn token_grad_ref(s: &ConvShape, x: &[f64], kappa: &[f64], rho: &[f64], da: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (tn, d, m, k) = (s.seq, s.d, s.m, s.kernel);
    let dm = d * m;
    let mut dx = vec![0.0; s.tokens() * dm];
    let mut dk = vec![0.0; dm * k];
    let mut dr = vec![0.0; m];
    let xs = |b: usize, tau: usize, c: usize| x[(b * tn + tau) * dm + c];
    for b in 0..s.batch {
        for t in 0..tn {
            for i in 0..d {
                let g = da[(b * tn + t) * d + i];
                for (j, &rj) in rho.iter().enumerate().take(m) {
                    let c = i * m + j;
                    let dxt = rj * g; // ∂X̃
                    let mut xt = 0.0; // X̃
                    for tap in 0..k {
                        if let Some(tau) = (t + tap + 1).checked_sub(k) {
                            xt += kappa[c * k + tap] * xs(b, tau, c);
                            dk[c * k + tap] += dxt * xs(b, tau, c);
                        }
                    }
                    dr[j] += g * xt;
                }
            }
            // ∂X_τ += Σ_s κ[:,:,s] ∂X̃_{τ+K−1−s} (anti-causal, terms beyond T−1 dropped).
            let tau = t;
            for i in 0..d {
                for (j, &rj) in rho.iter().enumerate().take(m) {
                    let c = i * m + j;
                    let mut acc = 0.0;
                    for tap in 0..k {
                        let src = tau + k - 1 - tap;
                        if src < tn {
                            acc += kappa[c * k + tap] * rj * da[(b * tn + src) * d + i];
                        }
                    }
                    dx[(b * tn + tau) * dm + c] = acc;
                }
            }
        }
    }
    (dx, dk, dr)
}

/// Value axis (CC), spec 3.4: Ω[i,j] = Σ_r ρ_r κ[i, π+j−r].
fn omega_ref(d: usize, m: usize, kc: usize, kappa: &[f64], rho: &[f64]) -> Vec<f64> {
    let pi = (kc - 1) / 2;
    let mut om = vec![0.0; d * m];
    for i in 0..d {
        for j in 0..m {
            for (r, &rr) in rho.iter().enumerate().take(m) {
                let q = pi as isize + j as isize - r as isize;
                if q >= 0 && (q as usize) < kc {
                    om[i * m + j] += rr * kappa[i * kc + q as usize];
                }
            }
        }
    }
    om
}

fn value_ref(n: usize, d: usize, m: usize, kc: usize, x: &[f64], kappa: &[f64], rho: &[f64]) -> Vec<f64> {
    let om = omega_ref(d, m, kc, kappa, rho);
    let mut a = vec![0.0; n * d];
    for t in 0..n {
        for i in 0..d {
            a[t * d + i] = (0..m).map(|j| om[i * m + j] * x[(t * d + i) * m + j]).sum();
        }
    }
    a
}

/// Value axis backward, spec 11.3: (dx, dkappa, drho).
#[allow(clippy::too_many_arguments)]
fn value_grad_ref(
    n: usize,
    d: usize,
    m: usize,
    kc: usize,
    x: &[f64],
    kappa: &[f64],
    rho: &[f64],
    da: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let pi = (kc - 1) / 2;
    let om = omega_ref(d, m, kc, kappa, rho);
    let mut dx = vec![0.0; n * d * m];
    let mut dom = vec![0.0; d * m];
    for t in 0..n {
        for i in 0..d {
            for j in 0..m {
                dx[(t * d + i) * m + j] = da[t * d + i] * om[i * m + j];
                dom[i * m + j] += da[t * d + i] * x[(t * d + i) * m + j];
            }
        }
    }
    let mut dk = vec![0.0; d * kc];
    let mut dr = vec![0.0; m];
    for i in 0..d {
        for j in 0..m {
            for r in 0..m {
                let q = pi as isize + j as isize - r as isize;
                if q >= 0 && (q as usize) < kc {
                    dk[i * kc + q as usize] += rho[r] * dom[i * m + j];
                    dr[r] += dom[i * m + j] * kappa[i * kc + q as usize];
                }
            }
        }
    }
    (dx, dk, dr)
}

/// `assert_close` for very large outputs: the relative L2 error and the NaN count are computed
/// here in one pass; only a failure pays for the full report (which sorts every element).
#[track_caller]
fn assert_close_large(name: &str, got: &[f32], want: &[f64], tol: f64, seed: u64) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let (mut num, mut den, mut finite) = (0.0f64, 0.0f64, true);
    for (&g, &w) in got.iter().zip(want) {
        finite &= g.is_finite();
        num += (g as f64 - w) * (g as f64 - w);
        den += w * w;
    }
    if !(finite && (num / den.max(f64::MIN_POSITIVE)).sqrt() <= tol) {
        assert_close(name, got, want, tol, seed);
    }
}

fn plus(a: &[f32], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(&x, &y)| x as f64 + y).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

// ------------------------------------------------------------------------------------------------
// GPU runs

/// Inputs of one compressor test: state, kernel, read vector, upstream gradient and the initial
/// contents of the three accumulated gradients.
struct Inputs {
    x: Vec<f32>,
    kappa: Vec<f32>,
    rho: Vec<f32>,
    da: Vec<f32>,
    dx0: Vec<f32>,
    dk0: Vec<f32>,
    dr0: Vec<f32>,
}

impl Inputs {
    fn draw(rng: &mut Rng, state: usize, kernel: usize, m: usize, out: usize) -> Inputs {
        Inputs {
            x: rng.normal(state, 1.0),
            kappa: rng.uniform(kernel, -1.0, 1.0),
            rho: rng.uniform(m, -1.0, 1.0),
            da: rng.normal(out, 1.0),
            dx0: rng.uniform(state, -1.0, 1.0),
            dk0: rng.uniform(kernel, -1.0, 1.0),
            dr0: rng.uniform(m, -1.0, 1.0),
        }
    }
}

/// GPU outputs: a, and dx, dkappa, drho after accumulation.
struct Outputs {
    a: Vec<f32>,
    dx: Vec<f32>,
    dk: Vec<f32>,
    dr: Vec<f32>,
}

impl Outputs {
    /// Asserts that every output has the same bits as `other`'s (`what`: which two runs).
    fn assert_same_bits(&self, other: &Outputs, what: &str, seed: u64) {
        for (name, p, q) in [
            ("a", &self.a, &other.a),
            ("dx", &self.dx, &other.dx),
            ("dkappa", &self.dk, &other.dk),
            ("drho", &self.dr, &other.dr),
        ] {
            let same = p.iter().zip(q).all(|(u, v)| u.to_bits() == v.to_bits());
            // How far apart, when they differ: an ulp (arithmetic contracted otherwise) or more.
            let worst =
                p.iter().zip(q).map(|(u, v)| (u - v).abs() / v.abs().max(f32::MIN_POSITIVE)).fold(0f32, f32::max);
            assert!(same, "{name} differs {what} (seed {seed}; largest relative difference {worst:e})");
        }
    }

    /// Asserts that the outputs of a run on `inp` (accumulators as drawn) match float64.
    fn assert_close_to(&self, want: &Want, inp: &Inputs, tag: &str, seed: u64) {
        close_scaled(&format!("a {tag}"), &self.a, &want.a, &want.a_scale, 1e-5, seed);
        // Accumulated gradients: relative to |preload| + Σ|terms| where they cancel (a one-element
        // dρ of n = 1 can cancel to 1e-4 of its terms and fail a plain relative check).
        let scale =
            |acc: &[f32], g: &[f64]| -> Vec<f64> { acc.iter().zip(g).map(|(a, g)| a.abs() as f64 + g).collect() };
        let [sx, sk, sr] = &want.g_scale;
        close_scaled(&format!("dx {tag}"), &self.dx, &plus(&inp.dx0, &want.dx), &scale(&inp.dx0, sx), 1e-4, seed);
        close_scaled(&format!("dkappa {tag}"), &self.dk, &plus(&inp.dk0, &want.dk), &scale(&inp.dk0, sk), 1e-4, seed);
        close_scaled(&format!("drho {tag}"), &self.dr, &plus(&inp.dr0, &want.dr), &scale(&inp.dr0, sr), 1e-4, seed);
    }
}

/// The float64 forward (and its scale: the same sums over absolute values) and gradients.
struct Want {
    a: Vec<f64>,
    a_scale: Vec<f64>,
    dx: Vec<f64>,
    dk: Vec<f64>,
    dr: Vec<f64>,
    /// Each gradient's sum of |terms| (the backward on absolute values): the scale its float32
    /// rounding is relative to, where terms (and the preloaded accumulator) cancel.
    g_scale: [Vec<f64>; 3],
}

/// [`Want`] of the token-axis compressor at shape `s` on `inp`.
fn token_want(s: &ConvShape, inp: &Inputs) -> Want {
    let (x, kappa, rho, da) = (f64s(&inp.x), f64s(&inp.kappa), f64s(&inp.rho), f64s(&inp.da));
    let (dx, dk, dr) = token_grad_ref(s, &x, &kappa, &rho, &da);
    let (ax, ak, ar) = token_grad_ref(s, &abs64(&inp.x), &abs64(&inp.kappa), &abs64(&inp.rho), &abs64(&inp.da));
    Want {
        g_scale: [ax, ak, ar],
        a: token_ref(s, &x, &kappa, &rho),
        a_scale: token_ref(s, &abs64(&inp.x), &abs64(&inp.kappa), &abs64(&inp.rho)),
        dx,
        dk,
        dr,
    }
}

/// [`Want`] of the value-axis (CC) compressor on `inp`.
fn value_want(n: usize, d: usize, m: usize, kc: usize, inp: &Inputs) -> Want {
    let (x, kappa, rho, da) = (f64s(&inp.x), f64s(&inp.kappa), f64s(&inp.rho), f64s(&inp.da));
    let (dx, dk, dr) = value_grad_ref(n, d, m, kc, &x, &kappa, &rho, &da);
    let (ax, ak, ar) =
        value_grad_ref(n, d, m, kc, &abs64(&inp.x), &abs64(&inp.kappa), &abs64(&inp.rho), &abs64(&inp.da));
    Want {
        g_scale: [ax, ak, ar],
        a: value_ref(n, d, m, kc, &x, &kappa, &rho),
        a_scale: value_ref(n, d, m, kc, &abs64(&inp.x), &abs64(&inp.kappa), &abs64(&inp.rho)),
        dx,
        dk,
        dr,
    }
}

type Fwd<'a> = dyn Fn(
        &ddl::gpu::Gpu,
        ddl::gpu::View,
        ddl::gpu::View,
        ddl::gpu::View,
        ddl::gpu::View,
    ) -> ddl::gpu::Result<Vec<Dispatch>>
    + 'a;
type Bwd<'a> = dyn Fn(&ddl::gpu::Gpu, [ddl::gpu::View; 7]) -> ddl::gpu::Result<Vec<Dispatch>> + 'a;

/// Runs a forward (a poisoned) and a backward (accumulators preloaded) on the GPU.
fn run_gpu(gpu: &Gpu, inp: &Inputs, out_len: usize, fwd: &Fwd, bwd: &Bwd) -> Outputs {
    let x = upload(gpu, "x", &inp.x);
    let kappa = upload(gpu, "kappa", &inp.kappa);
    let rho = upload(gpu, "rho", &inp.rho);
    let a = poisoned(gpu, "a", &[out_len]);
    run(gpu, &fwd(gpu, x.view(), kappa.view(), rho.view(), a.view()).unwrap());
    let da = upload(gpu, "da", &inp.da);
    let dx = upload(gpu, "dx", &inp.dx0);
    let dk = upload(gpu, "dkappa", &inp.dk0);
    let dr = upload(gpu, "drho", &inp.dr0);
    run(gpu, &bwd(gpu, [x.view(), kappa.view(), rho.view(), da.view(), dx.view(), dk.view(), dr.view()]).unwrap());
    Outputs { a: read(gpu, &a), dx: read(gpu, &dx), dk: read(gpu, &dk), dr: read(gpu, &dr) }
}

/// The backward's seven views (x, κ, ρ, ∂a, ∂X, dκ, dρ) as the launchers take them.
fn grads<'a>([x, kappa, rho, da, dx, dkappa, drho]: [ddl::gpu::View<'a>; 7]) -> ConvGrads<'a> {
    ConvGrads { x, kappa, rho, da, dx, dkappa, drho }
}

fn run_token(gpu: &Gpu, s: &ConvShape, inp: &Inputs) -> Outputs {
    let fwd: &Fwd = &|g, x, k, r, a| shortconv::token_forward(g, s, x, k, r, a);
    run_gpu(gpu, inp, s.tokens() * s.d, fwd, &|g, v| shortconv::token_backward(g, s, grads(v)))
}

fn run_value(gpu: &Gpu, n: usize, d: usize, m: usize, kc: usize, inp: &Inputs) -> Outputs {
    let vs = ValueShape { n, d, m, kc };
    let fwd: &Fwd = &|g, x, k, r, a| shortconv::value_forward(g, &vs, x, k, r, a);
    run_gpu(gpu, inp, n * d, fwd, &|g, v| shortconv::value_backward(g, &vs, grads(v)))
}

/// Compares with `assert_close`, or with [`assert_close_large`] beyond a million elements.
#[track_caller]
fn close(name: &str, got: &[f32], want: &[f64], tol: f64, seed: u64) {
    if got.len() > 1 << 20 {
        assert_close_large(name, got, want, tol, seed);
    } else {
        assert_close(name, got, want, tol, seed);
    }
}

/// Initial contents of an accumulated gradient: magnitudes at the gradient's own scale, each
/// element's sign matched to the gradient's, so that preload + gradient never cancels to near
/// zero (the relative error would then measure the rounding of the preload, not the kernel).
fn preload(rng: &mut Rng, grad: &[f64]) -> Vec<f32> {
    let rms = (grad.iter().map(|g| g * g).sum::<f64>() / grad.len() as f64).sqrt().max(1e-3);
    let u = rng.uniform(grad.len(), 0.5, 1.5);
    u.iter().zip(grad).map(|(&u, &g)| (u as f64 * rms).copysign(g) as f32).collect()
}

/// `close`, passing when the error is within `tol` of the L2 norm of `scale` (the same forward on
/// absolute values, see [`within_scale`]): an output that cancels to much less than its terms
/// (one element of a few terms of both signs) holds the f32 rounding of the terms.
#[track_caller]
fn close_scaled(name: &str, got: &[f32], want: &[f64], scale: &[f64], tol: f64, seed: u64) {
    if !within_scale(got, want, scale, tol) {
        close(name, got, want, tol, seed);
    }
}

/// Runs `gpu` on `inp` (accumulators preloaded, see [`preload`]) and compares the forward with
/// `a` (≤ 1e-5, see [`close_scaled`] with `a_scale`, the forward on absolute values) and each
/// accumulated gradient with preload + `grads` (≤ 1e-4).
#[allow(clippy::too_many_arguments)]
fn check_against(name: &str, mut inp: Inputs, rng: &mut Rng, w: &Want, gpu: impl Fn(&Inputs) -> Outputs) {
    let (a, a_scale, grads) = (&w.a, &w.a_scale, [&w.dx[..], &w.dk[..], &w.dr[..]]);
    inp.dx0 = preload(rng, grads[0]);
    inp.dk0 = preload(rng, grads[1]);
    inp.dr0 = preload(rng, grads[2]);
    let got = gpu(&inp);
    let seed = rng.seed;
    close_scaled(&format!("{name} a"), &got.a, a, a_scale, 1e-5, seed);
    // At the scale of the terms and the preload (a gradient summed over many tokens can cancel).
    for (what, out, init, grad, sc) in [
        ("dx", &got.dx, &inp.dx0, grads[0], &w.g_scale[0]),
        ("dkappa", &got.dk, &inp.dk0, grads[1], &w.g_scale[1]),
        ("drho", &got.dr, &inp.dr0, grads[2], &w.g_scale[2]),
    ] {
        let scale: Vec<f64> = init.iter().zip(sc).map(|(a, g)| a.abs() as f64 + g).collect();
        close_scaled(&format!("{name} {what}"), out, &plus(init, grad), &scale, 1e-4, seed);
    }
}

/// Token axis at one shape.
fn check_token(gpu: &Gpu, s: ConvShape) {
    let mut rng = Rng::fresh();
    let (n, d, m, k) = (s.tokens(), s.d, s.m, s.kernel);
    let inp = Inputs::draw(&mut rng, n * d * m, d * m * k, m, n * d);
    let w = token_want(&s, &inp);
    let name = format!("token {s:?}");
    check_against(&name, inp, &mut rng, &w, |inp| run_token(gpu, &s, inp));
}

/// Token axis at one shape with the state in f16 (`--f16-state`): the reference runs on the
/// f16-rounded X the GPU reads, so the tolerances are those of f32.
fn check_token_f16(s: ConvShape) {
    let s = ConvShape { state_f16: true, ..s };
    let mut rng = Rng::fresh();
    let (n, d, m, k) = (s.tokens(), s.d, s.m, s.kernel);
    let mut inp = Inputs::draw(&mut rng, n * d * m, d * m * k, m, n * d);
    inp.x = f16_round(&inp.x);
    let w = token_want(&s, &inp);
    let name = format!("token f16 {s:?}");
    check_against(&name, inp, &mut rng, &w, |inp| {
        let packed = Inputs {
            x: f16_pack(&inp.x),
            kappa: inp.kappa.clone(),
            rho: inp.rho.clone(),
            da: inp.da.clone(),
            dx0: inp.dx0.clone(),
            dk0: inp.dk0.clone(),
            dr0: inp.dr0.clone(),
        };
        run_token(&gpu(), &s, &packed)
    });
}

/// Value axis at one shape.
fn check_value(gpu: &Gpu, n: usize, d: usize, m: usize, kc: usize) {
    let mut rng = Rng::fresh();
    let inp = Inputs::draw(&mut rng, n * d * m, d * kc, m, n * d);
    let w = value_want(n, d, m, kc, &inp);
    let name = format!("value n={n} d={d} m={m} kc={kc}");
    check_against(&name, inp, &mut rng, &w, |inp| run_value(gpu, n, d, m, kc, inp));
}

const BS: [usize; 3] = [1, 2, 3];
const TS: [usize; 5] = [1, 2, 3, 9, 40];
const DS: [usize; 3] = [1, 5, 33];
const MS: [usize; 3] = [1, 3, 4];
const KS: [usize; 4] = [1, 2, 4, 5];

// ------------------------------------------------------------------------------------------------
// Token axis

#[test]
fn token_compressor_forward_and_backward_match_float64_over_odd_shapes_and_short_sequences() {
    // Every (T, K) pair, including T < K and T = 1 (the decoding window); B, d and m cycle so
    // that every listed value meets several (T, K).
    let mut idx = 0;
    for &t in &TS {
        for &k in &KS {
            check_token(&gpu(), shape(BS[idx % 3], t, DS[(idx / 3) % 3], MS[(idx + idx / 3) % 3], k));
            idx += 1;
        }
    }
}

#[test]
fn token_compressor_on_an_f16_state_matches_float64_on_the_rounded_state() {
    // `--f16-state` (m = 4): the one-walk K = 4 kernel and the two-walk 8-slot one (K ≠ 4),
    // T < K and T = 1, odd d, several chunks; then the shapes it refuses.
    let gpu = f16_gpu();
    for (b, t, d, k) in
        [(1, 1, 1, 4), (2, 3, 5, 4), (3, 40, 33, 4), (2, 9, 5, 1), (1, 40, 33, 5), (3, 9, 4, 8), (2, 70, 6, 2)]
    {
        check_token_f16(shape(b, t, d, 4, k));
    }
    for (m, k) in [(3, 4), (4, 9)] {
        let s = ConvShape { state_f16: true, ..shape(1, 5, 4, m, k) };
        let t = upload(&gpu, "t", &vec![0.0; 4096]);
        let Err(e) = shortconv::token_forward(&gpu, &s, t.view(), t.view(), t.view(), t.view()) else {
            panic!("m = {m}, K = {k} with an f16 state must fail")
        };
        assert!(e.to_string().contains("f16 state needs m = 4"), "m = {m}, K = {k}: {e}");
    }
}

#[test]
fn compressors_of_states_wider_than_eight_value_channels_match_float64() {
    // d_v > 8 (the delta write's one-token-per-invocation form): the token-axis compressor (ddl's
    // and every expanded variant's readout) and the value-axis one (CC, K_c = m as the spec asks,
    // and K_c ≠ m) at m = 9, 16, 33, odd d, T < K and T = 1, several chunks.
    for (i, &m) in [9usize, 16, 33].iter().enumerate() {
        check_token(&gpu(), shape(1 + i % 2, [1, 3, 40][i], [5, 4, 3][i], m, [4, 2, 5][i]));
        check_token(&gpu(), shape(2, 70, 2, m, 4));
        check_value(&gpu(), [1, 9, 40][i], [5, 8, 3][i], m, m);
        check_value(&gpu(), 33, 4, m, [2, 5, 4][i]);
    }
}

#[test]
fn token_compressor_reductions_over_many_chunks_and_sequence_boundaries_match_float64() {
    // 3·700 tokens: 66 chunks of 32 (the one-walk kernel, K = 4) that straddle the sequence ends;
    // 9000 tokens (K = 3, chunks of at least 16): the chunk count is capped and each chunk holds
    // more tokens.
    check_token(&gpu(), shape(3, 700, 7, 3, 4));
    check_token(&gpu(), shape(1, 9000, 2, 2, 3));
}

#[test]
fn token_compressor_beyond_the_windowed_kernels_matches_float64() {
    // m ≤ 4 and K ≤ 8 run the windowed kernels (every shape above); wider states and longer
    // kernels the per-element ones.
    for s in [shape(2, 9, 5, 6, 4), shape(1, 40, 3, 8, 2), shape(3, 12, 4, 2, 9), shape(2, 3, 7, 5, 11)] {
        assert!(!ddl::kernels::shortconv::windowed(&s));
        check_token(&gpu(), s);
    }
    for s in [shape(2, 70, 5, 4, 8), shape(2, 33, 6, 2, 7)] {
        assert!(ddl::kernels::shortconv::windowed(&s));
        check_token(&gpu(), s);
    }
}

#[test]
fn token_compressor_with_more_than_65535_workgroups_matches_float64() {
    let gpu = gpu();
    let max = gpu.limits.max_compute_workgroups_per_dimension as usize;
    // n·d invocations for the forward, n·d·m for dx: both beyond one grid dimension.
    let d = 4099;
    let t = (max * 256).div_ceil(d) + 3;
    check_token(&gpu, shape(1, t, d, 1, 2));
}

#[test]
fn token_compressor_on_a_zero_padded_window_of_the_last_k_states_reproduces_each_full_output() {
    // Decoding (spec 7): the newest output from a buffer of the last K states (zeros before the
    // sequence start) must equal the full-sequence output at that position.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let full = shape(1, 11, 5, 3, 4);
    let (tn, d, m, k) = (full.seq, full.d, full.m, full.kernel);
    let dm = d * m;
    let x = rng.normal(tn * dm, 1.0);
    let kappa = upload(&gpu, "kappa", &rng.uniform(dm * k, -1.0, 1.0));
    let rho = upload(&gpu, "rho", &rng.uniform(m, -1.0, 1.0));
    let a_full = poisoned(&gpu, "a_full", &[tn * d]);
    let tx = upload(&gpu, "x", &x);
    run(&gpu, &shortconv::token_forward(&gpu, &full, tx.view(), kappa.view(), rho.view(), a_full.view()).unwrap());
    let a_full = read(&gpu, &a_full);
    let window = shape(1, k, d, m, k);
    for t in 0..tn {
        let mut w = vec![0.0f32; k * dm];
        for slot in 0..k {
            if let Some(tau) = (t + slot + 1).checked_sub(k) {
                w[slot * dm..(slot + 1) * dm].copy_from_slice(&x[tau * dm..(tau + 1) * dm]);
            }
        }
        let tw = upload(&gpu, "window", &w);
        let aw = poisoned(&gpu, "a_window", &[k * d]);
        run(&gpu, &shortconv::token_forward(&gpu, &window, tw.view(), kappa.view(), rho.view(), aw.view()).unwrap());
        let newest = read(&gpu, &aw)[(k - 1) * d..].to_vec();
        let want: Vec<f64> = f64s(&a_full[t * d..(t + 1) * d]);
        assert_close(&format!("window at t={t}"), &newest, &want, 1e-6, rng.seed);
    }
}

#[test]
fn token_compressor_backward_is_bit_identical_run_to_run() {
    let mut rng = Rng::fresh();
    let s = shape(2, 300, 33, 4, 4);
    let (n, d, m, k) = (s.tokens(), s.d, s.m, s.kernel);
    let inp = Inputs::draw(&mut rng, n * d * m, d * m * k, m, n * d);
    run_token(&gpu(), &s, &inp).assert_same_bits(&run_token(&gpu(), &s, &inp), "between token runs", rng.seed);
}

/// The finish forms (`conv_finish_wide`): one workgroup per value channel, or the sums spread
/// over the grid (a group pass when there are more than 32 rows of chunk partials, one
/// invocation per kernel element, then the ρ reduction). Each against float64 over few rows
/// (no group pass), many (groups, a short last one), m = 1 and K ≠ 4 (the two-walk partials),
/// and each bit-identical run to run; the two forms agree within rounding.
#[test]
fn both_compressor_finishes_match_float64_and_are_bit_identical_run_to_run() {
    for s in [shape(2, 9, 5, 4, 4), shape(3, 700, 7, 3, 4), shape(2, 1100, 4, 1, 4), shape(1, 2000, 3, 2, 3)] {
        let mut rng = Rng::fresh();
        let (n, d, m, k) = (s.tokens(), s.d, s.m, s.kernel);
        let inp = Inputs::draw(&mut rng, n * d * m, d * m * k, m, n * d);
        let want = token_want(&s, &inp);
        for wide in [false, true] {
            let gpu = gpu().with_forms(|f| f.conv_finish_wide = wide);
            let tag = format!("{s:?} wide finish {wide}");
            let got = run_token(&gpu, &s, &inp);
            got.assert_close_to(&want, &inp, &tag, rng.seed);
            got.assert_same_bits(&run_token(&gpu, &s, &inp), &format!("{tag}: run to run"), rng.seed);
        }
    }
}

#[test]
fn token_compressor_reference_backward_matches_central_finite_differences() {
    let mut rng = Rng::fresh();
    for s in [shape(1, 1, 2, 3, 4), shape(2, 3, 3, 2, 5), shape(2, 9, 4, 3, 2), shape(3, 7, 2, 4, 4)] {
        let (n, d, m, k) = (s.tokens(), s.d, s.m, s.kernel);
        let x = f64s(&rng.normal(n * d * m, 1.0));
        let kappa = f64s(&rng.uniform(d * m * k, -1.0, 1.0));
        let rho = f64s(&rng.uniform(m, -1.0, 1.0));
        let w = f64s(&rng.normal(n * d, 1.0));
        let (dx, dk, dr) = token_grad_ref(&s, &x, &kappa, &rho, &w);
        let ex = fd_check(&mut |v| dot(&w, &token_ref(&s, v, &kappa, &rho)), &x, &dx, 40, &mut rng);
        let ek = fd_check(&mut |v| dot(&w, &token_ref(&s, &x, v, &rho)), &kappa, &dk, 40, &mut rng);
        let er = fd_check(&mut |v| dot(&w, &token_ref(&s, &x, &kappa, v)), &rho, &dr, 10, &mut rng);
        for (what, e) in [("dx", ex), ("dkappa", ek), ("drho", er)] {
            assert!(e < 1e-6, "{s:?} {what}: fd error {e:e} (seed {})", rng.seed);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Value axis (CC)

#[test]
fn cc_compressor_forward_and_backward_match_float64_for_kc_equal_and_unequal_to_m() {
    let mut idx = 0;
    for &n in &[1usize, 2, 3, 9, 40, 120] {
        for &m in &MS {
            // kc = m (the reference configurations) and kc ≠ m, narrower and wider.
            for kc in 1..=5 {
                check_value(&gpu(), n, DS[idx % 3], m, kc);
                idx += 1;
            }
        }
    }
}

/// The CC compressor in quads (CPU adapters, d a multiple of 4, m ≤ 4: four features per
/// invocation, Ω formed once per quad; the forward and the backward's first pass), forced on and
/// off on this adapter: against float64 and bit-identical, over m = 1..4, kc equal to m and not,
/// short sequences and chunks that end mid-way.
#[test]
fn cc_compressor_in_quads_matches_float64_and_the_plain_kernels() {
    for (n, d, m, kc) in [(1, 4, 1, 1), (3, 8, 2, 3), (40, 12, 3, 3), (70, 36, 4, 4), (33, 64, 4, 5), (97, 4, 4, 2)] {
        let mut rng = Rng::fresh();
        let inp = Inputs::draw(&mut rng, n * d * m, d * kc, m, n * d);
        let want = value_want(n, d, m, kc, &inp);
        let mut outs = vec![];
        for quads in [true, false] {
            let got = with_forms(
                &gpu(),
                |f| f.conv_quads = quads,
                |gpu| {
                    let s = ConvShape { batch: 1, seq: n, d, m, kernel: kc, state_f16: false };
                    assert_eq!(shortconv::conv_quads(gpu, &s), quads);
                    let (tx, tk, tr) =
                        (upload(gpu, "x", &inp.x), upload(gpu, "kappa", &inp.kappa), upload(gpu, "rho", &inp.rho));
                    let out = poisoned(gpu, "a", &[n * d]);
                    let ds = shortconv::value_forward(
                        gpu,
                        &ValueShape { n, d, m, kc },
                        tx.view(),
                        tk.view(),
                        tr.view(),
                        out.view(),
                    )
                    .unwrap();
                    assert_eq!(ds[0].kernel.name.contains("value_forward_wq"), quads, "{}", ds[0].kernel.name);
                    run_value(gpu, n, d, m, kc, &inp)
                },
            );
            got.assert_close_to(&want, &inp, &format!("cc n={n} d={d} m={m} kc={kc} quads {quads}"), rng.seed);
            outs.push(got);
        }
        let what = format!("between quads and the plain kernels, n={n} d={d} m={m} kc={kc}");
        outs[0].assert_same_bits(&outs[1], &what, rng.seed);
    }
}

#[test]
fn cc_compressor_reductions_over_many_chunks_and_large_grids_match_float64() {
    check_value(&gpu(), 9000, 3, 4, 4);
    let gpu = gpu();
    let max = gpu.limits.max_compute_workgroups_per_dimension as usize;
    let d = 4099;
    check_value(&gpu, (max * 256).div_ceil(d) + 5, d, 1, 3);
}

#[test]
fn cc_compressor_backward_is_bit_identical_run_to_run() {
    let mut rng = Rng::fresh();
    let (n, d, m, kc) = (1100, 33, 4, 4);
    let inp = Inputs::draw(&mut rng, n * d * m, d * kc, m, n * d);
    run_value(&gpu(), n, d, m, kc, &inp).assert_same_bits(
        &run_value(&gpu(), n, d, m, kc, &inp),
        "between cc runs",
        rng.seed,
    );
}

#[test]
fn cc_compressor_reference_matches_the_spec_omega_for_m_4_and_finite_differences() {
    let mut rng = Rng::fresh();
    // Spec 3.4 spelled out for m = kc = 4 (π = 1).
    let kappa = f64s(&rng.uniform(4, -1.0, 1.0));
    let rho = f64s(&rng.uniform(4, -1.0, 1.0));
    let (k, r) = (&kappa, &rho);
    let want = [
        r[0] * k[1] + r[1] * k[0],
        r[0] * k[2] + r[1] * k[1] + r[2] * k[0],
        r[0] * k[3] + r[1] * k[2] + r[2] * k[1] + r[3] * k[0],
        r[1] * k[3] + r[2] * k[2] + r[3] * k[1],
    ];
    let om = omega_ref(1, 4, 4, &kappa, &rho);
    for j in 0..4 {
        assert!((om[j] - want[j]).abs() < 1e-12, "Ω[{j}] {} vs {}", om[j], want[j]);
    }
    for (n, d, m, kc) in [(3, 2, 4, 4), (2, 3, 3, 5), (4, 2, 4, 2), (2, 2, 1, 3)] {
        let x = f64s(&rng.normal(n * d * m, 1.0));
        let kappa = f64s(&rng.uniform(d * kc, -1.0, 1.0));
        let rho = f64s(&rng.uniform(m, -1.0, 1.0));
        let w = f64s(&rng.normal(n * d, 1.0));
        let (dx, dk, dr) = value_grad_ref(n, d, m, kc, &x, &kappa, &rho, &w);
        let f = |x: &[f64], kp: &[f64], rh: &[f64]| dot(&w, &value_ref(n, d, m, kc, x, kp, rh));
        let ex = fd_check(&mut |v| f(v, &kappa, &rho), &x, &dx, 30, &mut rng);
        let ek = fd_check(&mut |v| f(&x, v, &rho), &kappa, &dk, 20, &mut rng);
        let er = fd_check(&mut |v| f(&x, &kappa, v), &rho, &dr, 10, &mut rng);
        for (what, e) in [("dx", ex), ("dkappa", ek), ("drho", er)] {
            assert!(e < 1e-6, "n={n} d={d} m={m} kc={kc} {what}: fd error {e:e} (seed {})", rng.seed);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Errors

#[test]
fn compressor_shape_errors_name_the_tensor_and_are_not_panics() {
    let gpu = gpu();
    let s = shape(2, 3, 4, 2, 3);
    let x = upload(&gpu, "x", &[0.0; 2 * 3 * 4 * 2]);
    let short = upload(&gpu, "short", &[0.0; 5]);
    let kappa = upload(&gpu, "kappa", &[0.0; 4 * 2 * 3]);
    let rho = upload(&gpu, "rho", &[0.0; 2]);
    let a = upload(&gpu, "a", &[0.0; 2 * 3 * 4]);
    let e = shortconv::token_forward(&gpu, &s, x.view(), short.view(), rho.view(), a.view()).unwrap_err();
    assert!(matches!(e, GpuError::Shape(_)), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("kappa") && msg.contains("24") && msg.contains('5'), "{msg}");
    let e = shortconv::token_forward(&gpu, &shape(2, 0, 4, 2, 3), x.view(), kappa.view(), rho.view(), a.view())
        .unwrap_err();
    assert!(matches!(e, GpuError::Shape(_)), "{e}");
    let e = shortconv::token_backward(
        &gpu,
        &s,
        grads([x.view(), kappa.view(), rho.view(), a.view(), short.view(), kappa.view(), rho.view()]),
    )
    .unwrap_err();
    assert!(e.to_string().contains("'dx'"), "{e}");
    let e = shortconv::value_forward(
        &gpu,
        &ValueShape { n: 3, d: 2, m: 8, kc: 3 },
        x.view(),
        kappa.view(),
        short.view(),
        a.view(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("'rho'"), "{e}");
    let e = shortconv::value_backward(
        &gpu,
        &ValueShape { n: 6, d: 4, m: 2, kc: 0 },
        grads([x.view(), kappa.view(), rho.view(), a.view(), x.view(), kappa.view(), rho.view()]),
    )
    .unwrap_err();
    assert!(matches!(e, GpuError::Shape(_)), "{e}");
}

/// A block's two compressor calls (same κ, ρ; different states and ∂a) writing consecutive slots
/// of one buffer of chunk partials, summed by one finish (`token_backward_walk` twice, then
/// `token_backward_finish` over both): each dx gets its own call's gradient, dκ and dρ the sum of
/// both calls', against float64. Windowed (K = 4) and general (K = 3, K = 6) walks, each with
/// both finishes (one workgroup per value channel, and the wide one: with 2100 tokens its group
/// pass runs, over a short last group).
#[test]
fn two_compressor_calls_sharing_one_finish_match_float64() {
    let shapes = [shape(3, 37, 5, 4, 4), shape(2, 19, 3, 3, 3), shape(1, 70, 4, 2, 6), shape(3, 700, 7, 3, 4)];
    for (s, wide) in shapes.into_iter().flat_map(|s| [(s, false), (s, true)]) {
        let gpu = gpu().with_forms(|f| f.conv_finish_wide = wide);
        let mut rng = Rng::fresh();
        let (n, dm, k) = (s.tokens(), s.d * s.m, s.kernel);
        let kappa = rng.uniform(dm * k, -1.0, 1.0);
        let rho = rng.uniform(s.m, -1.0, 1.0);
        let (x1, x2) = (rng.normal(n * dm, 1.0), rng.normal(n * dm, 1.0));
        let (da1, da2) = (rng.normal(n * s.d, 1.0), rng.normal(n * s.d, 1.0));
        let f = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        let (kd, rd) = (f(&kappa), f(&rho));
        let (wdx1, wdk1, wdr1) = token_grad_ref(&s, &f(&x1), &kd, &rd, &f(&da1));
        let (wdx2, wdk2, wdr2) = token_grad_ref(&s, &f(&x2), &kd, &rd, &f(&da2));
        let wdk: Vec<f64> = wdk1.iter().zip(&wdk2).map(|(a, b)| a + b).collect();
        let wdr: Vec<f64> = wdr1.iter().zip(&wdr2).map(|(a, b)| a + b).collect();
        let (dx01, dx02) = (preload(&mut rng, &wdx1), preload(&mut rng, &wdx2));
        let (dk0, dr0) = (preload(&mut rng, &wdk), preload(&mut rng, &wdr));

        let up = |l: &str, v: &[f32]| upload(&gpu, l, v);
        let (tk, tr) = (up("kappa", &kappa), up("rho", &rho));
        let (tx1, tx2, tda1, tda2) = (up("x1", &x1), up("x2", &x2), up("da1", &da1), up("da2", &da2));
        let (tdx1, tdx2, tdk, tdr) = (up("dx1", &dx01), up("dx2", &dx02), up("dk", &dk0), up("dr", &dr0));
        let part = shortconv::token_partials(&gpu, &s, 2).unwrap();
        let slot = |c| shortconv::token_partial_slot(&gpu, &s, &part, c);
        let g1 = grads([tx1.view(), tk.view(), tr.view(), tda1.view(), tdx1.view(), tdk.view(), tdr.view()]);
        let g2 = ConvGrads { x: tx2.view(), da: tda2.view(), dx: tdx2.view(), ..g1 };
        let add = || shortconv::WalkOut::AddToDx;
        let mut ds = shortconv::token_backward_walk(&gpu, &s, g1, slot(0), add()).unwrap();
        ds.extend(shortconv::token_backward_walk(&gpu, &s, g2, slot(1), add()).unwrap());
        let finish = shortconv::token_backward_finish(&gpu, &s, g2, &part, 2).unwrap();
        // One dispatch, or the wide finish's two or three (its group pass with many rows).
        let passes = finish.len();
        assert!(
            if wide { passes == 3 || (passes == 2 && s.tokens() < 2000) } else { passes == 1 },
            "{s:?} wide {wide}: {passes} dispatches"
        );
        ds.extend(finish);
        run(&gpu, &ds);
        let tag = format!("{s:?} wide finish {wide}");
        close(&format!("shared dx1 {tag}"), &read(&gpu, &tdx1), &plus(&dx01, &wdx1), 1e-4, rng.seed);
        close(&format!("shared dx2 {tag}"), &read(&gpu, &tdx2), &plus(&dx02, &wdx2), 1e-4, rng.seed);
        close(&format!("shared dkappa {tag}"), &read(&gpu, &tdk), &plus(&dk0, &wdk), 1e-4, rng.seed);
        close(&format!("shared drho {tag}"), &read(&gpu, &tdr), &plus(&dr0, &wdr), 1e-4, rng.seed);
    }
}

/// The forward walks of the length the adapters use (16 tokens) and others, odd ones included, across sequence boundaries inside and between walks, against float64.
#[test]
fn token_compressor_forward_matches_float64_for_every_walk_length() {
    // With the batched walk too (four tokens' loads at a time: walks of 1 and 5 tokens end
    // inside a batch).
    for (chunk, batch) in
        [(1, false), (5, false), (16, false), (64, false), (200, false), (1, true), (5, true), (16, true)]
    {
        with_forms(
            &gpu(),
            |f| (f.conv_forward_chunk, f.conv_quads, f.conv_batch) = (chunk, f.conv_quads && !batch, batch),
            |gpu| {
                for s in [shape(3, 37, 5, 4, 4), shape(2, 70, 3, 3, 3), shape(1, 130, 4, 2, 6), shape(4, 1, 3, 4, 4)] {
                    check_token(gpu, s);
                }
            },
        );
    }
}

/// The compressor's CPU-adapter layouts, each forced on this adapter: the forward and the one-walk
/// backward in quads (four features per invocation, d a multiple of 4), the backward walk as a
/// sweep (a workgroup barrier per token step, for d not a multiple of 4), and the GPU layout (one
/// feature per invocation, no barrier), plain and batched (`conv_batch`: four tokens' loads at a
/// time). Against float64 over shapes whose last workgroup is part idle, whose last chunk is
/// short and whose sequences end inside chunks (T = 1 included), and all forms bit-identical (the
/// same sums in the same order). Also the ∂e and write modes.
#[test]
fn the_compressor_layouts_match_float64_and_give_the_same_bits() {
    let shapes = [
        shape(3, 37, 8, 4, 4),
        shape(2, 70, 12, 3, 4),
        shape(1, 130, 132, 2, 4),
        shape(4, 1, 4, 4, 4),
        shape(2, 41, 64, 1, 4),
        shape(3, 37, 5, 4, 4),
        shape(1, 50, 6, 4, 3),
    ];
    let forms = [(true, false, false), (false, true, false), (false, false, false), (false, false, true)];
    for s in shapes {
        let mut rng = Rng::fresh();
        let (n, d, m, k) = (s.tokens(), s.d, s.m, s.kernel);
        let inp = Inputs::draw(&mut rng, n * d * m, d * m * k, m, n * d);
        let want = token_want(&s, &inp);
        let mut outs = vec![];
        for (quads, sweep, batch) in forms {
            let got = with_forms(
                &gpu(),
                |f| (f.conv_quads, f.conv_sweep, f.conv_batch) = (quads, sweep, batch),
                |gpu| {
                    assert_eq!(shortconv::conv_quads(gpu, &s), quads && d % 4 == 0);
                    assert_eq!(shortconv::walk_sweep(gpu), sweep);
                    assert_eq!(shortconv::walk_batch(gpu), batch);
                    run_token(gpu, &s, &inp)
                },
            );
            let tag = format!("{s:?} quads {quads} sweep {sweep} batch {batch}");
            got.assert_close_to(&want, &inp, &tag, rng.seed);
            outs.push((tag, got));
        }
        for (tag, got) in &outs[1..] {
            outs[0].1.assert_same_bits(got, &format!("between {} and {tag}", outs[0].0), rng.seed);
        }
    }
    // The ∂e and write modes of every form (the other test runs the adapter's own choice).
    for (quads, sweep, batch) in forms {
        with_forms(
            &gpu(),
            |f| (f.conv_quads, f.conv_sweep, f.conv_batch) = (quads, sweep, batch),
            the_walk_writes_dx_or_de_against_float64,
        );
    }
}

/// The last compressor call of a replicated-embedding model writes ∂e = Σ_j (∂X + its gradient)
/// instead of ∂X (`token_backward_walk` with `de`, the one-walk kernel): against float64, with
/// ∂X left exactly as it was; shapes the kernel does not take are an error.
#[test]
fn the_compressor_walk_can_write_dx_or_the_replication_gradient_instead_of_adding_into_dx() {
    the_walk_writes_dx_or_de_against_float64(&gpu());
    let gpu = gpu();
    let s = shape(1, 9, 2, 2, 3);
    let t = |l: &str, len: usize| poisoned(&gpu, l, &[len]);
    let (x, k, r, da, dx, de) = (t("x", 36), t("k", 12), t("r", 2), t("da", 18), t("dx", 36), t("de", 18));
    let (dk, dr) = (t("dk", 12), t("dr", 2));
    let part = shortconv::token_partials(&gpu, &s, 1).unwrap();
    let g = grads([x.view(), k.view(), r.view(), da.view(), dx.view(), dk.view(), dr.view()]);
    let err = shortconv::token_backward_walk(&gpu, &s, g, part.view(), shortconv::WalkOut::SumIntoDe(de.view()))
        .expect_err("K = 3 has no one-walk kernel");
    assert!(err.to_string().contains("de"), "{err}");
}

/// ∂e and written ∂X of the one-walk kernel against float64 (∂X untouched when writing ∂e).
fn the_walk_writes_dx_or_de_against_float64(gpu: &Gpu) {
    for s in [shape(3, 37, 5, 4, 4), shape(2, 19, 8, 3, 4), shape(1, 70, 4, 1, 4), shape(2, 33, 12, 4, 4)] {
        assert!(shortconv::sums_into_de(gpu, &s));
        let mut rng = Rng::fresh();
        let (n, d, m, k) = (s.tokens(), s.d, s.m, s.kernel);
        let kappa = rng.uniform(d * m * k, -1.0, 1.0);
        let rho = rng.uniform(m, -1.0, 1.0);
        let (x, da, dx0) = (rng.normal(n * d * m, 1.0), rng.normal(n * d, 1.0), rng.normal(n * d * m, 1.0));
        let f = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        let (wdx, _, _) = token_grad_ref(&s, &f(&x), &f(&kappa), &f(&rho), &f(&da));
        let want: Vec<f64> =
            (0..n * d).map(|e| (0..m).map(|j| dx0[e * m + j] as f64 + wdx[e * m + j]).sum::<f64>()).collect();
        let up = |l: &str, v: &[f32]| upload(gpu, l, v);
        let (tx, tk, tr, tda, tdx) = (up("x", &x), up("kappa", &kappa), up("rho", &rho), up("da", &da), up("dx", &dx0));
        let de = poisoned(gpu, "de", &[n * d]);
        // The walk leaves dκ and dρ alone: stand-ins that nothing may read.
        let (dk, dr) = (poisoned(gpu, "dk", &[d * m * k]), poisoned(gpu, "dr", &[m]));
        let g = grads([tx.view(), tk.view(), tr.view(), tda.view(), tdx.view(), dk.view(), dr.view()]);
        let part = shortconv::token_partials(gpu, &s, 1).unwrap();
        let ds =
            shortconv::token_backward_walk(gpu, &s, g, part.view(), shortconv::WalkOut::SumIntoDe(de.view())).unwrap();
        run(gpu, &ds);
        close(&format!("de {s:?}"), &read(gpu, &de), &want, 1e-5, rng.seed);
        let after = read(gpu, &tdx);
        assert!(after.iter().zip(&dx0).all(|(a, b)| a.to_bits() == b.to_bits()), "{s:?}: dx changed");
        // WriteDx: the gradient alone into a poisoned dx (nothing read from it).
        let fresh = poisoned(gpu, "dx fresh", &[n * d * m]);
        let part = shortconv::token_partials(gpu, &s, 1).unwrap();
        let g = ConvGrads { dx: fresh.view(), ..g };
        let ds = shortconv::token_backward_walk(gpu, &s, g, part.view(), shortconv::WalkOut::WriteDx).unwrap();
        run(gpu, &ds);
        close(&format!("written dx {s:?}"), &read(gpu, &fresh), &wdx, 1e-5, rng.seed);
    }
}
