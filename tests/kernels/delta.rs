//! The delta write against a float64 reference written straight from spec sections 2, 11.1 and
//! 14.4/14.8: every size class (d below, at and beyond the workgroup and the register cache,
//! m = 1 … 8 with every layout and m = 9, 16, 33 one token per invocation, one to 66 000 tokens), all three value activations, the ε_k guard, saturated
//! sigmoids, accumulation, determinism and shape errors. The reference backward is itself checked
//! against central finite differences of the reference forward.

// The references index like the formulas they transcribe.
#![allow(clippy::needless_range_loop)]

use super::common::*;
use ddl::gpu::{GpuError, Tensor};
use ddl::kernels::delta::{self, BetaMap, DeltaShape, Heads, Saves, VAct, WriteGrads, WriteIn, WriteOut};
use ddl::kernels::forms::Forms;

const EPS_K: f32 = 1e-5;
const ACTS: [VAct; 3] = [VAct::Sigmoid4, VAct::Sigmoid, VAct::Linear];

// ---------------------------------------------------------------------------------------------
// float64 reference

fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

fn act(f: VAct, u: f64) -> f64 {
    match f {
        VAct::Sigmoid4 => 4.0 * sigmoid(u),
        VAct::Sigmoid => sigmoid(u),
        VAct::Linear => u,
    }
}

fn act_grad_from_v(f: VAct, v: f64) -> f64 {
    match f {
        VAct::Sigmoid4 => v * (1.0 - v / 4.0),
        VAct::Sigmoid => v * (1.0 - v),
        VAct::Linear => 1.0,
    }
}

/// Forward inputs and parameters (float64 copies of what the GPU gets).
#[derive(Clone)]
struct Inputs {
    x: Vec<f64>,
    kraw: Vec<f64>,
    a: Vec<f64>,
    c: Vec<f64>,
    w_beta: Vec<f64>,
    b_beta: Vec<f64>,
    w_v: Vec<f64>,
    b_v: Vec<f64>,
}

/// Forward outputs: the new state and the saved traces.
struct Outputs {
    x_out: Vec<f64>,
    k: Vec<f64>,
    rnorm: Vec<f64>,
    beta: Vec<f64>,
    v: Vec<f64>,
    delta: Vec<f64>,
    /// The scales x_out, δ, v and β are computed from (as for the backward, see
    /// [`ref_backward_scale`]): float32 rounding is proportional to them where they cancel.
    x_out_scale: Vec<f64>,
    delta_scale: Vec<f64>,
    v_scale: Vec<f64>,
    beta_scale: Vec<f64>,
}

fn ref_forward(s: &DeltaShape, p: &Inputs) -> Outputs {
    let (n, d, m) = (s.n, s.d, s.m);
    let eps = s.k_eps as f64;
    let mut o = Outputs {
        x_out: vec![0.0; n * d * m],
        k: vec![0.0; n * d],
        rnorm: vec![0.0; n],
        beta: vec![0.0; n],
        v: vec![0.0; n * m],
        delta: vec![0.0; n * m],
        x_out_scale: vec![0.0; n * d * m],
        delta_scale: vec![0.0; n * m],
        v_scale: vec![0.0; n * m],
        beta_scale: vec![0.0; n],
    };
    for t in 0..n {
        let kr = &p.kraw[t * d..(t + 1) * d];
        let norm = (kr.iter().map(|q| q * q).sum::<f64>() + eps * eps).sqrt();
        let k: Vec<f64> = kr.iter().map(|q| q / norm).collect();
        let z = (0..d).map(|i| p.w_beta[i] * p.c[t * d + i]).sum::<f64>() + p.b_beta[0];
        let (map, gate) = (s.beta, 2.0 * sigmoid(z));
        let beta = (map.scale as f64 * gate + map.add as f64).clamp(map.lo as f64, map.hi as f64);
        // (The write's factors: X' = X + β k (value · v − erase · kᵀX)ᵀ; the saved v is value · v.)
        let (erase, value) = (map.erase as f64, map.value as f64);
        for j in 0..m {
            let u = (0..d).map(|i| p.w_v[j * d + i] * p.a[t * d + i]).sum::<f64>() + p.b_v[j];
            let v0 = act(s.v_act, u);
            let v = value * v0;
            let proj = (0..d).map(|i| k[i] * p.x[(t * d + i) * m + j]).sum::<f64>();
            let dl = v - erase * proj;
            let u_scale = (0..d).map(|i| (p.w_v[j * d + i] * p.a[t * d + i]).abs()).sum::<f64>() + p.b_v[j].abs();
            let v_scale = value * act_grad_from_v(s.v_act, v0) * u_scale;
            let dl_scale =
                v_scale + v.abs() + erase * (0..d).map(|i| (k[i] * p.x[(t * d + i) * m + j]).abs()).sum::<f64>();
            for i in 0..d {
                let e = (t * d + i) * m + j;
                o.x_out[e] = p.x[e] + beta * k[i] * dl;
                o.x_out_scale[e] = p.x[e].abs() + beta * k[i].abs() * dl_scale;
            }
            o.v[t * m + j] = v;
            o.delta[t * m + j] = dl;
            o.v_scale[t * m + j] = v_scale;
            o.delta_scale[t * m + j] = dl_scale;
        }
        o.k[t * d..(t + 1) * d].copy_from_slice(&k);
        o.rnorm[t] = 1.0 / norm;
        o.beta[t] = beta;
        // z sums d products: its rounding scales with Σ|w_β c|, β's with dβ/dz times that.
        let z_scale = (0..d).map(|i| (p.w_beta[i] * p.c[t * d + i]).abs()).sum::<f64>() + p.b_beta[0].abs();
        o.beta_scale[t] = (map.scale as f64).abs() * gate * (1.0 - 0.5 * gate) * z_scale + (map.add as f64).abs();
    }
    o
}

/// What the backward reads besides G.
struct Saved<'a> {
    x: &'a [f64],
    k: &'a [f64],
    rnorm: &'a [f64],
    beta: &'a [f64],
    v: &'a [f64],
    delta: &'a [f64],
    a: &'a [f64],
    c: &'a [f64],
    w_beta: &'a [f64],
    w_v: &'a [f64],
}

/// Gradients of one backward (da not accumulated, parameter gradients from zero).
#[derive(Clone)]
struct Grads {
    dx: Vec<f64>,
    dkraw: Vec<f64>,
    da: Vec<f64>,
    dc: Vec<f64>,
    dw_beta: Vec<f64>,
    db_beta: Vec<f64>,
    dw_v: Vec<f64>,
    db_v: Vec<f64>,
}

fn ref_backward(s: &DeltaShape, gr: &[f64], sv: &Saved) -> Grads {
    backward_impl(s, gr, sv, false)
}

/// The scale each gradient is computed from: the backward with every input replaced by its
/// magnitude and every difference by a sum. Rounding in float32 is proportional to it, so where a
/// result cancels (∂k̃ is ∂k/n minus its component along k: for d = 1 nothing but rounding is
/// left; a gradient sum over tokens can come out near 0) the error is measured against it.
fn ref_backward_scale(s: &DeltaShape, gr: &[f64], sv: &Saved) -> Grads {
    backward_impl(s, gr, sv, true)
}

fn backward_impl(s: &DeltaShape, gr: &[f64], sv: &Saved, abs: bool) -> Grads {
    let (n, d, m) = (s.n, s.d, s.m);
    let f = |x: f64| if abs { x.abs() } else { x };
    let sub = |a: f64, b: f64| if abs { a + b } else { a - b };
    let mut o = Grads {
        dx: vec![0.0; n * d * m],
        dkraw: vec![0.0; n * d],
        da: vec![0.0; n * d],
        dc: vec![0.0; n * d],
        dw_beta: vec![0.0; d],
        db_beta: vec![0.0; 1],
        dw_v: vec![0.0; m * d],
        db_v: vec![0.0; m],
    };
    for t in 0..n {
        let k: Vec<f64> = sv.k[t * d..(t + 1) * d].iter().map(|&x| f(x)).collect();
        let st = |i: usize, j: usize| (t * d + i) * m + j;
        let g = |i: usize, j: usize| f(gr[st(i, j)]);
        let beta = sv.beta[t];
        // g = Gᵀk
        let gv: Vec<f64> = (0..m).map(|j| (0..d).map(|i| k[i] * g(i, j)).sum()).collect();
        for i in 0..d {
            for j in 0..m {
                o.dx[st(i, j)] = sub(g(i, j), beta * k[i] * gv[j]);
            }
        }
        let dl: Vec<f64> = sv.delta[t * m..(t + 1) * m].iter().map(|&x| f(x)).collect();
        let dbeta: f64 = (0..m).map(|j| gv[j] * dl[j]).sum();
        // ∂k = β(Gδ − Xg)
        let dk: Vec<f64> = (0..d)
            .map(|i| {
                let gd: f64 = (0..m).map(|j| g(i, j) * dl[j]).sum();
                let xg: f64 = (0..m).map(|j| f(sv.x[st(i, j)]) * gv[j]).sum();
                beta * sub(gd, xg)
            })
            .collect();
        let kdk: f64 = (0..d).map(|i| k[i] * dk[i]).sum();
        for i in 0..d {
            o.dkraw[t * d + i] = sub(dk[i], k[i] * kdk) * sv.rnorm[t];
        }
        let dz = dbeta * beta * (1.0 - beta / 2.0);
        let du: Vec<f64> = (0..m).map(|j| beta * gv[j] * act_grad_from_v(s.v_act, sv.v[t * m + j])).collect();
        for i in 0..d {
            o.dc[t * d + i] = dz * f(sv.w_beta[i]);
            o.da[t * d + i] = (0..m).map(|j| f(sv.w_v[j * d + i]) * du[j]).sum();
            o.dw_beta[i] += dz * f(sv.c[t * d + i]);
            for j in 0..m {
                o.dw_v[j * d + i] += du[j] * f(sv.a[t * d + i]);
            }
        }
        o.db_beta[0] += dz;
        for j in 0..m {
            o.db_v[j] += du[j];
        }
    }
    o
}

// ---------------------------------------------------------------------------------------------
// inputs

fn f64v(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// Random inputs. With `special`, token 0 has ‖k̃‖ = 3ε_k, token 1 (if any) a zero direction,
/// and token 2 (if any) gate and value logits of order ±100 (saturated sigmoids).
fn draw(rng: &mut Rng, s: &DeltaShape, special: bool) -> Vec<Vec<f32>> {
    let (n, d, m) = (s.n, s.d, s.m);
    let sd = 1.0 / (d as f32).sqrt();
    // An f16 state holds the rounded values: the reference sees exactly those.
    let x = if s.state_f16 { f16_round(&rng.normal(n * d * m, 1.0)) } else { rng.normal(n * d * m, 1.0) };
    let mut kraw = rng.normal(n * d, 1.0);
    let mut a = rng.normal(n * d, 1.0);
    let mut c = rng.normal(n * d, 1.0);
    let w_beta = rng.normal(d, sd);
    let b_beta = rng.normal(1, 0.5);
    let w_v = rng.normal(m * d, sd);
    let b_v = rng.normal(m, 0.5);
    if special {
        let row = &mut kraw[0..d];
        let norm = row.iter().map(|q| q * q).sum::<f32>().sqrt();
        row.iter_mut().for_each(|q| *q *= 3.0 * EPS_K / norm);
        if n > 1 {
            kraw[d..2 * d].iter_mut().for_each(|q| *q = 0.0);
        }
        if n > 2 {
            c[2 * d..3 * d].iter_mut().for_each(|q| *q *= 100.0);
            a[2 * d..3 * d].iter_mut().for_each(|q| *q *= 100.0);
        }
    }
    vec![x, kraw, a, c, w_beta, b_beta, w_v, b_v]
}

fn inputs_f64(v: &[Vec<f32>]) -> Inputs {
    Inputs {
        x: f64v(&v[0]),
        kraw: f64v(&v[1]),
        a: f64v(&v[2]),
        c: f64v(&v[3]),
        w_beta: f64v(&v[4]),
        b_beta: f64v(&v[5]),
        w_v: f64v(&v[6]),
        b_v: f64v(&v[7]),
    }
}

/// Compares per-token data by relative L2 error: the first `special` tokens one by one, then all
/// the others together. A special token's error is measured against the larger of its own norm
/// and a typical token's norm (a saturated β of 1e-40 flushed to 0 is not an error). `floor`, when
/// given, is a per-element scale the error is also measured against: the size of the terms a
/// result is computed from when it cancels (∂k̃ projects ∂k/n orthogonally to k; for d = 1 the
/// projection leaves only rounding).
#[allow(clippy::too_many_arguments)]
#[track_caller]
fn close(
    name: &str,
    got: &[f32],
    want: &[f64],
    per_token: usize,
    special: usize,
    floor: Option<&[f64]>,
    tol: f64,
    seed: u64,
) {
    assert_eq!(got.len(), want.len(), "{name}: lengths differ");
    let tokens = got.len().div_ceil(per_token);
    let special = special.min(tokens);
    let sq = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>();
    let rest = special * per_token..got.len();
    let typical = if tokens > special { sq(&want[rest.clone()]) / (tokens - special) as f64 } else { 0.0 };
    let mut groups: Vec<(String, std::ops::Range<usize>, f64)> =
        (0..special).map(|t| (format!("{name} [token {t}]"), t * per_token..(t + 1) * per_token, typical)).collect();
    if !rest.is_empty() {
        groups.push((name.to_string(), rest, 0.0));
    }
    for (label, r, typical) in groups {
        let (g, w) = (&got[r.clone()], &want[r.clone()]);
        let finite = g.iter().all(|v| v.is_finite());
        // Differences below 2⁻¹⁰⁰ are underflow, not errors: subnormals flushed to zero (allowed
        // on GPUs), and results a few ulps above the smallest normal f32 that an approximate exp
        // flushes as well (llvmpipe's exp(z) at z ≈ −87, the gate of a token with c·100: β = 2σ(z)
        // came out 0 against 2.3e-38). Nothing the write computes means anything at that scale.
        const UNDERFLOW: f64 = 7.888609052210118e-31; // 2⁻¹⁰⁰
        let diff = |a: f32, b: f64| (a as f64 - b).abs();
        let num: f64 = g.iter().zip(w).map(|(a, b)| diff(*a, *b)).filter(|e| *e >= UNDERFLOW).map(|e| e * e).sum();
        let fl = floor.map(|f| sq(&f[r.clone()])).unwrap_or(0.0);
        let den = sq(w).max(fl).max(typical);
        let err = if den > 0.0 { (num / den).sqrt() } else { num.sqrt() };
        if !(finite && err <= tol) {
            let report = ddl::testing::compare(&label, g, w);
            panic!("{report}\n  error {err:e} (scaled) exceeds {tol:e}; replay with DDL_TEST_SEED={seed}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// GPU runs

struct GpuFwd {
    x_out: Vec<f32>,
    k: Vec<f32>,
    rnorm: Vec<f32>,
    beta: Vec<f32>,
    v: Vec<f32>,
    delta: Vec<f32>,
}

struct GpuBwd {
    dx: Vec<f32>,
    dkraw: Vec<f32>,
    da: Vec<f32>,
    dc: Vec<f32>,
    dw_beta: Vec<f32>,
    db_beta: Vec<f32>,
    dw_v: Vec<f32>,
    db_v: Vec<f32>,
}

fn gpu_forward(gpu: &Gpu, s: &DeltaShape, inp: &[Vec<f32>]) -> GpuFwd {
    gpu_forward_k(gpu, s, inp, true)
}

/// The forward with or without storing k (training passes none: the backward recomputes k̃·r).
fn gpu_forward_k(gpu: &Gpu, s: &DeltaShape, inp: &[Vec<f32>], store_k: bool) -> GpuFwd {
    gpu_forward_kb(gpu, s, inp, store_k, None).0
}

/// … and with β also into column `col` of a poisoned `[n, stride]` buffer (returned).
fn gpu_forward_kb(
    gpu: &Gpu,
    s: &DeltaShape,
    inp: &[Vec<f32>],
    store_k: bool,
    betas: Option<(usize, usize)>,
) -> (GpuFwd, Vec<f32>) {
    let (n, d, m) = (s.n, s.d, s.m);
    let t: Vec<Tensor> = ["x", "kraw", "a", "c", "w_beta", "b_beta", "w_v", "b_v"]
        .iter()
        .zip(inp)
        .map(|(l, v)| if *l == "x" && s.state_f16 { upload(gpu, l, &f16_pack(v)) } else { upload(gpu, l, v) })
        .collect();
    let x_out = if s.state_f16 { poisoned_f16(gpu, "x_out", n * d * m) } else { poisoned(gpu, "x_out", &[n * d * m]) };
    let k = poisoned(gpu, "k", &[n * d]);
    let rnorm = poisoned(gpu, "rnorm", &[n]);
    let beta = poisoned(gpu, "beta", &[n]);
    let v = poisoned(gpu, "v", &[n * m]);
    let dl = poisoned(gpu, "delta", &[n * m]);
    let ball = poisoned(gpu, "betas", &[n * betas.map_or(1, |b| b.1)]);
    let inp = WriteIn { x: t[0].view(), kraw: t[1].view(), a: t[2].view(), c: t[3].view() };
    let heads = Heads { w_beta: t[4].view(), b_beta: t[5].view(), w_v: t[6].view(), b_v: t[7].view() };
    let saves = Saves { rnorm: rnorm.view(), beta: beta.view(), v: v.view(), delta: dl.view() };
    let out = WriteOut { x_out: x_out.view(), k: store_k.then(|| k.view()), saves };
    let ds = delta::forward(gpu, s, inp, heads, out, betas.map(|(c, st)| (ball.view(), c, st))).unwrap();
    run(gpu, &ds);
    let f = GpuFwd {
        x_out: if s.state_f16 { f16_unpack(&read(gpu, &x_out)) } else { read(gpu, &x_out) },
        k: read(gpu, &k),
        rnorm: read(gpu, &rnorm),
        beta: read(gpu, &beta),
        v: read(gpu, &v),
        delta: read(gpu, &dl),
    };
    (f, read(gpu, &ball))
}

/// Backward inputs: G, the saved traces (from the GPU forward) and the gradient buffers' initial
/// values (`da0` = None: da is overwritten and poisoned before the run).
struct BwdIn<'a> {
    g: &'a [f32],
    inp: &'a [Vec<f32>],
    fwd: &'a GpuFwd,
    da0: Option<&'a [f32]>,
    dw_beta0: &'a [f32],
    db_beta0: &'a [f32],
    dw_v0: &'a [f32],
    db_v0: &'a [f32],
}

fn gpu_backward(gpu: &Gpu, s: &DeltaShape, b: &BwdIn) -> GpuBwd {
    let (n, d, m) = (s.n, s.d, s.m);
    let up = |l: &str, v: &[f32]| upload(gpu, l, v);
    let g = up("g", b.g);
    let x = if s.state_f16 { up("x", &f16_pack(&b.inp[0])) } else { up("x", &b.inp[0]) };
    let a = up("a", &b.inp[2]);
    let c = up("c", &b.inp[3]);
    let w_beta = up("w_beta", &b.inp[4]);
    let w_v = up("w_v", &b.inp[6]);
    let kraw = up("kraw", &b.inp[1]);
    let rnorm = up("rnorm", &b.fwd.rnorm);
    let beta = up("beta", &b.fwd.beta);
    let v = up("v", &b.fwd.v);
    let dl = up("delta", &b.fwd.delta);
    let dx = poisoned(gpu, "dx", &[n * d * m]);
    let dkraw = poisoned(gpu, "dkraw", &[n * d]);
    let dc = poisoned(gpu, "dc", &[n * d]);
    let da = match b.da0 {
        Some(v) => up("da", v),
        None => poisoned(gpu, "da", &[n * d]),
    };
    // The head gradients in four buffers, or (PACKED) in one, laid out like a model's
    // parameters: each at the next 64-element boundary after the previous one (so b_β right
    // after w_β when d is a multiple of 64): one column sum adds all four.
    let packed = PACKED.with(|p| p.get());
    let o_bb = d.next_multiple_of(64);
    let o_wv = (o_bb + 1).next_multiple_of(64);
    let o_bv = (o_wv + m * d).next_multiple_of(64);
    let owned = |e: usize| e < d || e == o_bb || (o_wv..o_wv + m * d).contains(&e) || e >= o_bv;
    let grads = packed.then(|| {
        // The padding holds markers the column sum must leave as they are.
        let mut all: Vec<f32> = (0..o_bv + m).map(|e| 1000.0 + e as f32).collect();
        all[..d].copy_from_slice(b.dw_beta0);
        all[o_bb] = b.db_beta0[0];
        all[o_wv..o_wv + m * d].copy_from_slice(b.dw_v0);
        all[o_bv..].copy_from_slice(b.db_v0);
        up("grads", &all)
    });
    let dw_beta = up("dw_beta", b.dw_beta0);
    let db_beta = up("db_beta", b.db_beta0);
    let dw_v = up("dw_v", b.dw_v0);
    let db_v = up("db_v", b.db_v0);
    fn gv<'t>(
        grads: &'t Option<ddl::gpu::Tensor>,
        t: &'t ddl::gpu::Tensor,
        off: usize,
        len: usize,
    ) -> ddl::gpu::View<'t> {
        match grads {
            Some(all) => all.view().sub(off, len),
            None => t.view(),
        }
    }
    let dheads = Heads {
        w_beta: gv(&grads, &dw_beta, 0, d),
        // (views need not start at a binding offset: the column sum binds the run from w_β)
        b_beta: match &grads {
            Some(all) => ddl::gpu::View { offset: 4 * o_bb as u64, size: 4, ..all.view() },
            None => db_beta.view(),
        },
        w_v: gv(&grads, &dw_v, o_wv, m * d),
        b_v: match &grads {
            Some(all) => ddl::gpu::View { offset: 4 * o_bv as u64, size: 4 * m as u64, ..all.view() },
            None => db_v.view(),
        },
    };
    let inp = WriteIn { x: x.view(), kraw: kraw.view(), a: a.view(), c: c.view() };
    // The backward reads w_β and W_v only; the biases' places are filled with them.
    let heads = Heads { w_beta: w_beta.view(), b_beta: w_beta.view(), w_v: w_v.view(), b_v: w_v.view() };
    let saves = Saves { rnorm: rnorm.view(), beta: beta.view(), v: v.view(), delta: dl.view() };
    let out = WriteGrads { dx: dx.view(), dkraw: dkraw.view(), da: da.view(), dc: dc.view() };
    let ds = delta::backward(gpu, s, g.view(), inp, heads, saves, out, dheads, b.da0.is_some()).unwrap();
    if packed {
        // The model's layout: one column sum.
        assert_eq!(ds.len(), 3, "kernel, heads and one column sum");
    }
    run(gpu, &ds);
    let (dw_beta, db_beta, dw_v, db_v) = match &grads {
        Some(all) => {
            let v = read(gpu, all);
            for e in (0..v.len()).filter(|&e| !owned(e)) {
                assert_eq!(v[e], 1000.0 + e as f32, "padding element {e} between the head gradients changed");
            }
            (v[..d].to_vec(), vec![v[o_bb]], v[o_wv..o_wv + m * d].to_vec(), v[o_bv..].to_vec())
        }
        None => (read(gpu, &dw_beta), read(gpu, &db_beta), read(gpu, &dw_v), read(gpu, &db_v)),
    };
    GpuBwd {
        dx: read(gpu, &dx),
        dkraw: read(gpu, &dkraw),
        da: read(gpu, &da),
        dc: read(gpu, &dc),
        dw_beta,
        db_beta,
        dw_v,
        db_v,
    }
}

thread_local! {
    /// Whether `gpu_backward` passes the head gradients as views into one buffer (the model's
    /// layout, one column sum per pair) instead of four buffers.
    static PACKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn plus(a: &[f64], b: &[f32]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x + *y as f64).collect()
}

/// Runs forward and backward on fresh random data and checks both against float64:
/// forward ≤ 1e-5, backward ≤ 1e-4 (relative L2), parameter gradients added onto random values.
fn check(gpu: &Gpu, s: DeltaShape, accumulate_da: bool, special: bool) {
    let mut rng = Rng::fresh();
    let seed = rng.seed;
    let (n, d, m) = (s.n, s.d, s.m);
    let inp = draw(&mut rng, &s, special);
    let sp = if special { 3 } else { 0 };
    let tag = format!("n={n} d={d} m={m} {:?} acc_da={accumulate_da}", s.v_act);

    let f = gpu_forward(gpu, &s, &inp);
    let p = inputs_f64(&inp);
    let want = ref_forward(&s, &p);
    // Per-token outputs: the special tokens are compared one by one.
    let chk = |what: &str, got: &[f32], want: &[f64], per: usize, floor: Option<&[f64]>, tol| {
        let sp = if per == usize::MAX { 0 } else { sp };
        let per = per.min(got.len().max(1));
        close(&format!("{what} {tag}"), got, want, per, sp, floor, tol, seed)
    };
    let all = usize::MAX;
    let tol = 1e-5;
    // An f16 X' is the f32 result rounded once: relative error ≤ 2⁻¹¹ per element.
    let x_tol = if s.state_f16 { 1e-3 } else { tol };
    chk("x_out", &f.x_out, &want.x_out, d * m, Some(&want.x_out_scale), x_tol);
    chk("k", &f.k, &want.k, d, None, tol);
    chk("rnorm", &f.rnorm, &want.rnorm, 1, None, tol);
    chk("beta", &f.beta, &want.beta, 1, Some(&want.beta_scale), tol);
    chk("v", &f.v, &want.v, m, Some(&want.v_scale), tol);
    chk("delta", &f.delta, &want.delta, m, Some(&want.delta_scale), tol);

    let g = rng.normal(n * d * m, 1.0);
    let da0 = rng.normal(n * d, 1.0);
    let dw_beta0 = rng.normal(d, 1.0);
    let db_beta0 = rng.normal(1, 1.0);
    let dw_v0 = rng.normal(m * d, 1.0);
    let db_v0 = rng.normal(m, 1.0);
    let got = gpu_backward(
        gpu,
        &s,
        &BwdIn {
            g: &g,
            inp: &inp,
            fwd: &f,
            da0: accumulate_da.then_some(&da0[..]),
            dw_beta0: &dw_beta0,
            db_beta0: &db_beta0,
            dw_v0: &dw_v0,
            db_v0: &db_v0,
        },
    );
    // The reference backward reads exactly the saved values the GPU backward read.
    let (k, rnorm, beta, v, dl) = (f64v(&f.k), f64v(&f.rnorm), f64v(&f.beta), f64v(&f.v), f64v(&f.delta));
    let saved = Saved {
        x: &p.x,
        k: &k,
        rnorm: &rnorm,
        beta: &beta,
        v: &v,
        delta: &dl,
        a: &p.a,
        c: &p.c,
        w_beta: &p.w_beta,
        w_v: &p.w_v,
    };
    let g = f64v(&g);
    let w = ref_backward(&s, &g, &saved);
    let ws = ref_backward_scale(&s, &g, &saved);
    // Accumulated outputs: the reference and its scale include the initial values.
    let acc = |w: &[f64], ws: &[f64], init: &[f32]| -> (Vec<f64>, Vec<f64>) {
        let abs: Vec<f32> = init.iter().map(|x| x.abs()).collect();
        (plus(w, init), plus(ws, &abs))
    };
    let (want_da, da_scale) = if accumulate_da { acc(&w.da, &ws.da, &da0) } else { (w.da.clone(), ws.da.clone()) };
    let tol = 1e-4;
    chk("dx", &got.dx, &w.dx, d * m, Some(&ws.dx), tol);
    chk("dkraw", &got.dkraw, &w.dkraw, d, Some(&ws.dkraw), tol);
    chk("da", &got.da, &want_da, d, Some(&da_scale), tol);
    chk("dc", &got.dc, &w.dc, d, Some(&ws.dc), tol);
    for (name, got, w, ws, init) in [
        ("dw_beta", &got.dw_beta, &w.dw_beta, &ws.dw_beta, &dw_beta0),
        ("db_beta", &got.db_beta, &w.db_beta, &ws.db_beta, &db_beta0),
        ("dw_v", &got.dw_v, &w.dw_v, &ws.dw_v, &dw_v0),
        ("db_v", &got.db_v, &w.db_v, &ws.db_v, &db_v0),
    ] {
        let (want, scale) = acc(w, ws, init);
        chk(name, got, &want, all, Some(&scale), tol);
    }
}

fn shape(n: usize, d: usize, m: usize, v_act: VAct) -> DeltaShape {
    DeltaShape { n, d, m, k_eps: EPS_K, v_act, state_f16: false, beta: BetaMap::IDENTITY }
}

fn grid(gpu: &Gpu, v_act: VAct) {
    let mut i = 0;
    for &d in &[1, 5, 33, 300] {
        for &m in &[1, 3, 4] {
            for &n in &[1, 7, 50] {
                check(gpu, shape(n, d, m, v_act), i % 2 == 1, true);
                i += 1;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// tests

#[test]
fn reference_backward_matches_finite_differences_of_reference_forward_for_every_input() {
    // L = ⟨R, X'⟩ for a random R: a random linear functional of the write's output, whose gradient
    // is the backward with G = R. Every coordinate of every input and parameter is probed, with
    // tokens at ‖k̃‖ = 3ε_k and ‖k̃‖ = 0 among them.
    let mut rng = Rng::fresh();
    for v_act in ACTS {
        for (n, d, m) in [(4, 5, 1), (4, 6, 3)] {
            let s = shape(n, d, m, v_act);
            let inp = draw(&mut rng, &s, true);
            let p = inputs_f64(&inp);
            let r = f64v(&rng.normal(n * d * m, 1.0));
            let o = ref_forward(&s, &p);
            let gr = ref_backward(
                &s,
                &r,
                &Saved {
                    x: &p.x,
                    k: &o.k,
                    rnorm: &o.rnorm,
                    beta: &o.beta,
                    v: &o.v,
                    delta: &o.delta,
                    a: &p.a,
                    c: &p.c,
                    w_beta: &p.w_beta,
                    w_v: &p.w_v,
                },
            );
            // L(q+) − L(q−) summed element by element, so that the parts of X' a probe does not
            // change cancel exactly instead of adding rounding.
            let loss_diff = |qp: &Inputs, qm: &Inputs| -> f64 {
                let (op, om) = (ref_forward(&s, qp), ref_forward(&s, qm));
                (op.x_out.iter().zip(&om.x_out).zip(&r)).map(|((a, b), y)| (a - b) * y).sum()
            };
            // (name, the input, its gradient, elements per token; usize::MAX: a parameter)
            type Field = fn(&mut Inputs) -> &mut Vec<f64>;
            let fields: [(&str, Field, &[f64], usize); 8] = [
                ("x", |q| &mut q.x, &gr.dx, d * m),
                ("kraw", |q| &mut q.kraw, &gr.dkraw, d),
                ("a", |q| &mut q.a, &gr.da, d),
                ("c", |q| &mut q.c, &gr.dc, d),
                ("w_beta", |q| &mut q.w_beta, &gr.dw_beta, usize::MAX),
                ("b_beta", |q| &mut q.b_beta, &gr.db_beta, usize::MAX),
                ("w_v", |q| &mut q.w_v, &gr.dw_v, usize::MAX),
                ("b_v", |q| &mut q.b_v, &gr.db_v, usize::MAX),
            ];
            for (name, field, grad, per) in fields {
                let mut q = p.clone();
                let len = field(&mut q).len();
                let per = per.min(len);
                let mut worst = (0.0f64, 0usize, 0.0, 0.0);
                for e in 0..len {
                    let x0 = field(&mut q)[e];
                    // Steps relative to the scale of the coordinate: for k̃, that of its token's
                    // norm, at least 10 ε_k (the ε_k tokens have components ~1e-5 or 0).
                    let tok = e / per * per..(e / per + 1) * per;
                    let floor = if name == "kraw" {
                        let nrm = p.kraw[tok.clone()].iter().map(|v| v * v).sum::<f64>().sqrt();
                        (0.1 * nrm).max(10.0 * EPS_K as f64)
                    } else {
                        1.0
                    };
                    // Central differences at h and 2h, Richardson-extrapolated (error O(h⁴)), so
                    // that h can be large enough for rounding in the loss not to matter.
                    let h = 1e-4 * x0.abs().max(floor);
                    let mut central = |h: f64| {
                        let mut qm = q.clone();
                        field(&mut q)[e] = x0 + h;
                        field(&mut qm)[e] = x0 - h;
                        let diff = loss_diff(&q, &qm);
                        field(&mut q)[e] = x0;
                        diff / (2.0 * h)
                    };
                    let fd = (4.0 * central(h) - central(2.0 * h)) / 3.0;
                    // Relative error, with floors: 1e-4 of the token's largest gradient, and 1e-3
                    // absolute (the difference quotient carries up to ~1e-10 of rounding): a
                    // gradient that is ~0 (saturated sigmoids) or zero by chance cannot be checked
                    // more finely than that.
                    let scale = grad[tok].iter().fold(0.0f64, |a, g| a.max(g.abs()));
                    let err = (fd - grad[e]).abs() / fd.abs().max(grad[e].abs()).max(1e-4 * scale).max(1e-3);
                    if err > worst.0 {
                        worst = (err, e, fd, grad[e]);
                    }
                }
                assert!(
                    worst.0 < 1e-6,
                    "{name} ({v_act:?}, n={n} d={d} m={m}): finite differences differ by {:e} at \
                     element {} ({:e} vs {:e}; seed {})",
                    worst.0,
                    worst.1,
                    worst.2,
                    worst.3,
                    rng.seed
                );
            }
        }
    }
}

#[test]
fn sigmoid4_write_matches_float64_for_every_size_in_the_grid() {
    grid(&gpu(), VAct::Sigmoid4);
}

#[test]
fn sigmoid_write_matches_float64_for_every_size_in_the_grid() {
    grid(&gpu(), VAct::Sigmoid);
}

#[test]
fn linear_write_matches_float64_for_every_size_in_the_grid() {
    grid(&gpu(), VAct::Linear);
}

#[test]
fn states_wider_than_the_register_cache_and_eight_value_channels_match_float64() {
    // Rows past 4 per invocation (d > 512) are read twice and their ∂k is parked in dkraw;
    // m = 8 is the widest with the segment forms (wider: value_widths_above_eight_…).
    check(&gpu(), shape(5, 1500, 8, VAct::Sigmoid4), true, true);
    check(&gpu(), shape(4, 1025, 2, VAct::Linear), false, true);
    check(&gpu(), shape(5, 256, 8, VAct::Sigmoid), false, true);
    check(&gpu(), shape(2, 1024, 5, VAct::Sigmoid4), true, false);
    check(&gpu(), shape(3, 512, 4, VAct::Sigmoid4), false, false);
    check(&gpu(), shape(5, 513, 3, VAct::Sigmoid), true, true);
    // Segment boundaries: 64 → two tokens per workgroup, 128 → one, 129 → one, two rows a lane.
    check(&gpu(), shape(9, 64, 3, VAct::Sigmoid4), false, true);
    check(&gpu(), shape(9, 128, 4, VAct::Sigmoid), true, true);
    check(&gpu(), shape(9, 129, 1, VAct::Linear), false, true);
}

#[test]
fn value_widths_above_eight_run_one_token_per_invocation_and_match_float64() {
    // m > 8 has one form (one token per invocation, its variant compiled on first use) in every
    // configuration of the device's forms: a GPU's segment width asked for, quads with and
    // without subgroup-shared loads, and neither. m = 9, 16, 33 at odd and quad-sized d, several heads
    // chunks (n = 130), rows past the register cache (d = 600), both da modes.
    let shapes = [(7, 5, 9), (130, 44, 16), (9, 33, 33), (4, 600, 9), (50, 12, 16), (3, 8, 33)];
    let forms: [(Option<usize>, bool, bool); 3] =
        [(Some(128), true, true), (Some(1), true, false), (Some(32), false, false)];
    for (seg, on, shared) in forms {
        let set = |f: &mut Forms| (f.delta_segment, f.delta_quads, f.subgroup_loads) = (seg, on, shared);
        with_forms(&gpu(), set, |gpu| {
            for (i, &(n, d, m)) in shapes.iter().enumerate() {
                assert_eq!(delta::segment_width(gpu, n, d, m), 1, "m = {m}");
                let act = [VAct::Sigmoid4, VAct::Sigmoid, VAct::Linear][i % 3];
                check(gpu, shape(n, d, m, act), i % 2 == 0, i % 3 != 1);
            }
        });
    }
    // Up to m = 8 the device's choice stands.
    with_forms(&gpu(), |f| f.delta_segment = Some(32), |gpu| assert_eq!(delta::segment_width(gpu, 9, 300, 8), 32));
}

#[test]
fn every_segment_width_matches_float64() {
    // The adapter picks the width (GPUs: up to 128 invocations per token with a workgroup
    // reduction; CPU adapters: 1, no reduction); every width must give the same results.
    for seg in [1, 2, 8, 32, 128] {
        with_forms(
            &gpu(),
            |f| f.delta_segment = Some(seg),
            |gpu| {
                for (i, &(n, d, m)) in
                    [(7, 5, 1), (50, 33, 3), (9, 300, 4), (4, 1025, 2), (9, 129, 8)].iter().enumerate()
                {
                    let act = [VAct::Sigmoid4, VAct::Sigmoid, VAct::Linear][i % 3];
                    check(gpu, shape(n, d, m, act), i % 2 == 0, true);
                }
            },
        );
    }
}

#[test]
fn f16_state_kernels_match_float64_on_the_rounded_state_in_every_layout() {
    // `--f16-state`: X is read from and X' written to half-precision rows (m = 4), every sum in
    // f32. The reference runs on the f16-rounded X, so everything but X' must match as tightly
    // as in f32; X' is the f32 result rounded once. Every layout: one token per invocation with
    // quads (with and without subgroup-shared loads) and without, and segments (GPUs).
    let gpu = f16_gpu();
    let shapes = [(7, 4), (65, 44), (9, 300), (50, 33), (1, 8)];
    let f16 = |n: usize, d: usize, act: VAct| DeltaShape { state_f16: true, ..shape(n, d, 4, act) };
    for seg in [1, 8, 32] {
        for (on, shared) in [(true, true), (true, false), (false, true)] {
            if seg > 1 && !(on && shared) {
                continue;
            }
            let forms = |f: &mut Forms| (f.delta_segment, f.subgroup_loads, f.delta_quads) = (Some(seg), shared, on);
            with_forms(&gpu, forms, |gpu| {
                for (i, &(n, d)) in shapes.iter().enumerate() {
                    let act = [VAct::Sigmoid4, VAct::Sigmoid, VAct::Linear][i % 3];
                    check(gpu, f16(n, d, act), i % 2 == 1, i % 3 != 2);
                }
            });
        }
    }
    // Only m = 4 has f16 rows: other widths are a clear error.
    let bad = DeltaShape { state_f16: true, ..shape(3, 8, 3, VAct::Sigmoid4) };
    let inp = draw(&mut Rng::fresh(), &DeltaShape { state_f16: false, ..bad }, false);
    let t = upload(&gpu, "t", &inp[0]);
    let inp = WriteIn { x: t.view(), kraw: t.view(), a: t.view(), c: t.view() };
    let heads = Heads { w_beta: t.view(), b_beta: t.view(), w_v: t.view(), b_v: t.view() };
    let saves = Saves { rnorm: t.view(), beta: t.view(), v: t.view(), delta: t.view() };
    let Err(e) = delta::forward(&gpu, &bad, inp, heads, WriteOut { x_out: t.view(), k: None, saves }, None) else {
        panic!("m = 3 with an f16 state must fail")
    };
    assert!(e.to_string().contains("f16 state needs m = 4"), "{e}");
}

#[test]
fn quad_kernels_of_the_one_token_per_invocation_layout_match_float64() {
    // One token per invocation with d a multiple of 4 runs the `*_q` entry points (four
    // features per load; with subgroup-shared loads of the head weights, and of ∂z, ∂u in the
    // heads, where the adapter has subgroups); with them off the same shapes run the
    // per-feature ones. Odd token
    // counts, several heads chunks, every value width class, both da modes and both gradient
    // layouts.
    let shapes = [(7, 4, 1), (65, 44, 4), (9, 128, 3), (130, 300, 8), (3, 1028, 2), (50, 12, 5), (200, 64, 4)];
    for (on, shared) in [(true, true), (true, false), (false, true)] {
        let forms = |f: &mut Forms| (f.delta_segment, f.subgroup_loads, f.delta_quads) = (Some(1), shared, on);
        with_forms(&gpu(), forms, |gpu| {
            for (i, &(n, d, m)) in shapes.iter().enumerate() {
                assert_eq!(delta::quads(gpu, 1, d), on, "quads at d = {d}");
                let act = [VAct::Sigmoid4, VAct::Sigmoid, VAct::Linear][i % 3];
                PACKED.with(|p| p.set(i % 2 == 1));
                check(gpu, shape(n, d, m, act), i % 3 == 1, i % 4 != 3);
            }
            PACKED.with(|p| p.set(false));
            assert!(!delta::quads(gpu, 1, 45) && !delta::quads(gpu, 2, 44));
        });
    }
}

#[test]
fn a_beta_map_sets_scales_and_clamps_the_gate_before_the_write() {
    // Interventions: β' = clamp(scale · β + add, lo, hi) before the write, in every layout
    // (segment and one-token-per-invocation widths, quads); the identity is the model's gate.
    let gpu = gpu();
    let maps = [
        ("identity", BetaMap::IDENTITY),
        ("β = 0", BetaMap { scale: 0.0, add: 0.0, ..BetaMap::IDENTITY }),
        ("β = 1", BetaMap { scale: 0.0, add: 1.0, ..BetaMap::IDENTITY }),
        ("β = 2", BetaMap { scale: 0.0, add: 2.0, ..BetaMap::IDENTITY }),
        ("β × 0.5", BetaMap { scale: 0.5, ..BetaMap::IDENTITY }),
        ("β ≤ 0.8", BetaMap { hi: 0.8, ..BetaMap::IDENTITY }),
        ("β ≥ 1.2", BetaMap { lo: 1.2, ..BetaMap::IDENTITY }),
        // The write's terms: no erase (X + β k vᵀ), no value (the operator alone), both scaled.
        ("erase = 0", BetaMap { erase: 0.0, ..BetaMap::IDENTITY }),
        ("v = 0", BetaMap { value: 0.0, ..BetaMap::IDENTITY }),
        ("erase × 0.5, v × 3, β = 2", BetaMap { erase: 0.5, value: 3.0, scale: 0.0, add: 2.0, ..BetaMap::IDENTITY }),
    ];
    for (n, d, m) in [(7, 37, 4), (5, 64, 1), (3, 19, 9)] {
        for (name, map) in maps {
            let s = DeltaShape { beta: map, ..shape(n, d, m, VAct::Sigmoid4) };
            let mut rng = Rng::fresh();
            let seed = rng.seed;
            let inp = draw(&mut rng, &s, false);
            let f = gpu_forward(&gpu, &s, &inp);
            let want = ref_forward(&s, &inputs_f64(&inp));
            let tag = format!("{name} n={n} d={d} m={m}");
            close(&format!("beta {tag}"), &f.beta, &want.beta, 1, 0, Some(&want.beta_scale), 1e-5, seed);
            close(&format!("x_out {tag}"), &f.x_out, &want.x_out, d * m, 0, Some(&want.x_out_scale), 1e-5, seed);
            // The saved v and δ are the write's own (what traces show).
            close(&format!("v {tag}"), &f.v, &want.v, m, 0, Some(&want.v_scale), 1e-5, seed);
            close(&format!("delta {tag}"), &f.delta, &want.delta, m, 0, Some(&want.delta_scale), 1e-5, seed);
            if map.erase == 0.0 {
                assert_eq!(f.delta, f.v, "{tag}: nothing erased, δ = v");
            }
            if map.value == 0.0 {
                assert!(f.v.iter().all(|&v| v == 0.0), "{tag}: nothing written");
            }
            if map.scale == 0.0 {
                assert!(f.beta.iter().all(|&b| b == map.add), "{tag}: β {:?}", f.beta);
            }
            if map == (BetaMap { scale: 0.0, add: 0.0, ..BetaMap::IDENTITY }) {
                // β = 0: the write is the identity, bit for bit.
                assert_eq!(f.x_out, inp[0], "{tag}: X' must equal X");
            }
        }
    }
}

#[test]
fn more_tokens_than_one_grid_dimension_holds_are_all_written() {
    // 66 000 workgroups: one token each (d > 64), the grid is split over x and y.
    check(&gpu(), shape(66_000, 65, 1, VAct::Sigmoid4), true, true);
}

#[test]
fn token_sums_over_the_most_chunks_are_added_chunk_by_chunk() {
    // 40 000 tokens: the head gradients' sums over tokens run in the most chunks (256, of 157
    // tokens, the last one shorter), added in chunk order; 16 385 tokens: 257 tokens per chunk
    // would exceed the cap, so 256 chunks of 65 (the last 10).
    check(&gpu(), shape(40_000, 3, 2, VAct::Sigmoid4), false, true);
    check(&gpu(), shape(16_385, 2, 1, VAct::Linear), true, false);
}

#[test]
fn accumulate_da_adds_into_da_and_otherwise_overwrites_it() {
    for acc in [false, true] {
        check(&gpu(), shape(9, 70, 4, VAct::Sigmoid4), acc, true);
        check(&gpu(), shape(9, 70, 1, VAct::Linear), acc, false);
    }
}

#[test]
fn head_gradients_laid_out_like_the_models_match_float64() {
    // w_β, b_β, W_v, b_v in one buffer at 64-element boundaries (b_β right after w_β when d is
    // a multiple of 64): the heads' partials are summed by one column sum. Odd token counts,
    // several chunks, both da modes.
    PACKED.with(|p| p.set(true));
    for (i, (n, d, m)) in [(9, 70, 4), (200, 33, 3), (130, 64, 1), (1, 5, 2)].into_iter().enumerate() {
        check(&gpu(), shape(n, d, m, VAct::Sigmoid4), i % 2 == 0, true);
    }
    PACKED.with(|p| p.set(false));
}

/// Random inputs of one forward + backward, and a function that runs both on the GPU and returns
/// the bits of every output.
fn bits_of_a_run(s: &DeltaShape, rng: &mut Rng) -> impl Fn(&Gpu) -> Vec<Vec<u32>> + use<> {
    let (n, d, m) = (s.n, s.d, s.m);
    let inp = draw(rng, s, true);
    let g = rng.normal(n * d * m, 1.0);
    let da0 = rng.normal(n * d, 1.0);
    let (dw_beta0, db_beta0) = (rng.normal(d, 1.0), rng.normal(1, 1.0));
    let (dw_v0, db_v0) = (rng.normal(m * d, 1.0), rng.normal(m, 1.0));
    let s = *s;
    move |gpu: &Gpu| {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
        let f = gpu_forward(gpu, &s, &inp);
        let b = gpu_backward(
            gpu,
            &s,
            &BwdIn {
                g: &g,
                inp: &inp,
                fwd: &f,
                da0: Some(&da0),
                dw_beta0: &dw_beta0,
                db_beta0: &db_beta0,
                dw_v0: &dw_v0,
                db_v0: &db_v0,
            },
        );
        [
            &f.x_out, &f.k, &f.rnorm, &f.beta, &f.v, &f.delta, &b.dx, &b.dkraw, &b.da, &b.dc, &b.dw_beta, &b.db_beta,
            &b.dw_v, &b.db_v,
        ]
        .iter()
        .map(|v| bits(v))
        .collect()
    }
}

#[test]
fn forward_and_backward_are_bit_identical_run_to_run() {
    let mut rng = Rng::fresh();
    let run = bits_of_a_run(&shape(300, 257, 4, VAct::Sigmoid4), &mut rng);
    let gpu = gpu();
    assert!(run(&gpu) == run(&gpu), "two runs on the same inputs differ (seed {})", rng.seed);
}

#[test]
fn subgroup_shared_loads_give_the_bits_of_per_invocation_loads() {
    // The `g` entry points (head weights and ∂z, ∂u loaded once per subgroup) add the same terms
    // in the same order: bit-identical to every invocation loading. Token counts that leave idle
    // invocations in the last workgroup, d that leaves idle ones in the heads' last feature tile,
    // several heads chunks. The adapter's choice: on for CPU adapters with subgroups.
    let gpu = gpu();
    let has = gpu.features.contains(wgpu::Features::SUBGROUP);
    assert_eq!(
        ddl::kernels::subgroup_loads(&gpu),
        has && gpu.forms.cpu,
        "subgroup-shared loads are chosen on CPU adapters with subgroups"
    );
    let mut rng = Rng::fresh();
    with_forms(
        &gpu,
        |f| f.delta_segment = Some(1),
        |gpu| {
            for (n, d, m) in [(130, 300, 4), (7, 132, 1), (200, 44, 3), (65, 1028, 8)] {
                let run = bits_of_a_run(&shape(n, d, m, VAct::Sigmoid4), &mut rng);
                let on = run(&gpu.with_forms(|f| f.subgroup_loads = true));
                let off = run(&gpu.with_forms(|f| f.subgroup_loads = false));
                assert!(on == off, "n {n} d {d} m {m}: shared loads change the results (seed {})", rng.seed);
            }
        },
    );
    assert!(has || !with_forms(&gpu, |f| f.subgroup_loads = true, ddl::kernels::subgroup_loads));
}

#[test]
fn traces_may_be_disjoint_views_of_one_buffer_and_params_of_another() {
    // How a model binds them: the saved traces carved out of one buffer, the head parameters
    // out of the flat parameter buffer, at offsets aligned as the adapter requires.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let s = shape(5, 7, 3, VAct::Sigmoid4);
    let (n, d, m) = (s.n, s.d, s.m);
    let inp = draw(&mut rng, &s, false);
    let want = gpu_forward(&gpu, &s, &inp);
    let align = (gpu.limits.min_storage_buffer_offset_alignment as usize / 4).max(1);
    let at = |i: usize| i * 64usize.div_ceil(align) * align;
    let mut flat = vec![0.0f32; at(4)];
    for (q, v) in inp[4..8].iter().enumerate() {
        flat[at(q)..at(q) + v.len()].copy_from_slice(v);
    }
    let params = upload(&gpu, "params", &flat);
    let pv = |q: usize, len: usize| params.view().sub(at(q), len);
    let traces = poisoned(&gpu, "traces", &[at(5)]);
    let tv = |q: usize, len: usize| traces.view().sub(at(q), len);
    let t: Vec<Tensor> = inp[..4].iter().map(|v| upload(&gpu, "in", v)).collect();
    let x_out = poisoned(&gpu, "x_out", &[n * d * m]);
    let inp = WriteIn { x: t[0].view(), kraw: t[1].view(), a: t[2].view(), c: t[3].view() };
    let heads = Heads { w_beta: pv(0, d), b_beta: pv(1, 1), w_v: pv(2, m * d), b_v: pv(3, m) };
    let saves = Saves { rnorm: tv(1, n), beta: tv(2, n), v: tv(3, n * m), delta: tv(4, n * m) };
    let out = WriteOut { x_out: x_out.view(), k: Some(tv(0, n * d)), saves };
    let ds = delta::forward(&gpu, &s, inp, heads, out, None).unwrap();
    run(&gpu, &ds);
    let all = read(&gpu, &traces);
    let part = |q: usize, len: usize| &all[at(q)..at(q) + len];
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&read(&gpu, &x_out)), bits(&want.x_out));
    assert_eq!(bits(part(0, n * d)), bits(&want.k));
    assert_eq!(bits(part(1, n)), bits(&want.rnorm));
    assert_eq!(bits(part(2, n)), bits(&want.beta));
    assert_eq!(bits(part(3, n * m)), bits(&want.v));
    assert_eq!(bits(part(4, n * m)), bits(&want.delta));
}

#[test]
fn shape_errors_and_aliased_outputs_are_reported_not_panicked() {
    let gpu = gpu();
    let s = shape(3, 4, 2, VAct::Sigmoid4);
    let t = |len: usize| upload(&gpu, "t", &vec![0.5; len]);
    let (sd, nd, n, nm) = (3 * 4 * 2, 3 * 4, 3, 3 * 2);
    let (x, kr, a, c) = (t(sd), t(nd), t(nd), t(nd));
    let (wb, bb, wv, bv) = (t(4), t(1), t(8), t(2));
    let (xo, k, rn, bt, v, dl) = (t(sd), t(nd), t(n), t(n), t(nm), t(nm));
    let fwd = |s: &DeltaShape, x: &Tensor, xo: &Tensor| {
        let inp = WriteIn { x: x.view(), kraw: kr.view(), a: a.view(), c: c.view() };
        let heads = Heads { w_beta: wb.view(), b_beta: bb.view(), w_v: wv.view(), b_v: bv.view() };
        let saves = Saves { rnorm: rn.view(), beta: bt.view(), v: v.view(), delta: dl.view() };
        delta::forward(&gpu, s, inp, heads, WriteOut { x_out: xo.view(), k: Some(k.view()), saves }, None)
    };
    assert!(fwd(&s, &x, &xo).is_ok());
    let short = t(sd - 1);
    match fwd(&s, &short, &xo) {
        Err(GpuError::Shape(msg)) => {
            assert!(msg.contains("'x'") && msg.contains("24") && msg.contains("23"), "{msg}")
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    assert!(matches!(fwd(&s, &x, &x), Err(GpuError::Shape(_))));
    for bad in [
        shape(0, 4, 2, VAct::Sigmoid4),
        shape(3, 0, 2, VAct::Sigmoid4),
        shape(3, 4, 0, VAct::Sigmoid4),
        shape(3, 4, 70_000, VAct::Sigmoid4),
        DeltaShape { k_eps: f32::NAN, ..s },
    ] {
        assert!(matches!(fwd(&bad, &x, &xo), Err(GpuError::Shape(_))), "{bad:?} accepted");
    }
    // Backward: dx must not be g, and every view must be long enough.
    let (g, dx, dkr, da, dc) = (t(sd), t(sd), t(nd), t(nd), t(nd));
    let (dwb, dbb, dwv, dbv) = (t(4), t(1), t(8), t(2));
    let bwd = |g: &Tensor, dx: &Tensor, dwv: &Tensor| {
        let inp = WriteIn { x: x.view(), kraw: k.view(), a: a.view(), c: c.view() };
        let heads = Heads { w_beta: wb.view(), b_beta: bb.view(), w_v: wv.view(), b_v: bv.view() };
        let saves = Saves { rnorm: rn.view(), beta: bt.view(), v: v.view(), delta: dl.view() };
        let out = WriteGrads { dx: dx.view(), dkraw: dkr.view(), da: da.view(), dc: dc.view() };
        let dheads = Heads { w_beta: dwb.view(), b_beta: dbb.view(), w_v: dwv.view(), b_v: dbv.view() };
        delta::backward(&gpu, &s, g.view(), inp, heads, saves, out, dheads, false)
    };
    assert!(bwd(&g, &dx, &dwv).is_ok());
    assert!(matches!(bwd(&g, &g, &dwv), Err(GpuError::Shape(_))));
    match bwd(&g, &dx, &t(7)) {
        Err(GpuError::Shape(msg)) => assert!(msg.contains("dw_v"), "{msg}"),
        other => panic!("expected a shape error, got {other:?}"),
    }
}

/// Without k (as training runs it) the forward writes the same X' and traces, bit for bit, and
/// leaves k untouched; the backward recomputes k = k̃·r, so its results do not depend on it (the
/// backward tests above run from k̃ and r only). Every segment width and both entry forms.
#[test]
fn the_forward_without_k_writes_the_same_state_and_traces() {
    for (seg, quads) in [(1, true), (1, false), (4, false), (32, false)] {
        with_forms(
            &gpu(),
            |f| (f.delta_segment, f.delta_quads) = (Some(seg), quads),
            |gpu| {
                {
                    let mut rng = Rng::fresh();
                    let s = shape(37, 12, 4, VAct::Sigmoid4);
                    let inp = draw(&mut rng, &s, false);
                    let (a, b) = (gpu_forward_k(gpu, &s, &inp, true), gpu_forward_k(gpu, &s, &inp, false));
                    let same = |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
                    let tag = format!("seg {seg} quads {quads} (seed {})", rng.seed);
                    // How far apart, when they differ: an ulp (arithmetic the driver contracted
                    // otherwise) or more (a wrong value).
                    let worst = |x: &[f32], y: &[f32]| {
                        x.iter()
                            .zip(y)
                            .map(|(p, q)| (p - q).abs() / q.abs().max(f32::MIN_POSITIVE))
                            .fold(0f32, f32::max)
                    };
                    assert!(
                        same(&a.x_out, &b.x_out) && same(&a.rnorm, &b.rnorm),
                        "{tag}: X' or r differs (largest relative differences {:e} and {:e})",
                        worst(&a.x_out, &b.x_out),
                        worst(&a.rnorm, &b.rnorm)
                    );
                    assert!(
                        same(&a.beta, &b.beta) && same(&a.v, &b.v) && same(&a.delta, &b.delta),
                        "{tag}: traces differ"
                    );
                    assert!(b.k.iter().all(|v| v.is_nan()), "{tag}: k was written");
                    // β of a write also into its column of a model's [n, writes] buffer.
                    let (c, ball) = gpu_forward_kb(gpu, &s, &inp, false, Some((2, 3)));
                    for t in 0..s.n {
                        assert_eq!(ball[t * 3 + 2].to_bits(), c.beta[t].to_bits(), "{tag}: β column, token {t}");
                        assert!(ball[t * 3].is_nan() && ball[t * 3 + 1].is_nan(), "{tag}: other columns written");
                    }
                }
            },
        );
    }
}

/// The packed form (heads from one buffer, saves into one: 9 storage buffers, for devices that
/// allow fewer than 15 per stage, a browser's WebGPU) gives the split form's bits in every layout,
/// writes only its own ranges of the packed saves, and each launcher refuses the other form.
#[test]
fn the_packed_forward_gives_the_split_forwards_bits() {
    for (seg, quads, m) in [(1, true, 4), (1, false, 3), (4, false, 4), (32, false, 2), (1, true, 9)] {
        with_forms(
            &gpu(),
            |f| (f.delta_segment, f.delta_quads) = (Some(seg), quads),
            |split_gpu| {
                let packed_gpu = split_gpu.with_forms(|f| f.delta_packed = true);
                let gpu = &*packed_gpu;
                let mut rng = Rng::fresh();
                let s = shape(37, 12, m, VAct::Sigmoid4);
                let (n, d) = (s.n, s.d);
                let inp = draw(&mut rng, &s, false);
                let (want, want_betas) = gpu_forward_kb(split_gpu, &s, &inp, true, Some((1, 2)));
                let tag = format!("seg {seg} quads {quads} m {m} (seed {})", rng.seed);
                // The heads packed as the layer does it: [w_β | b_β | W_v | b_v].
                let (hl, [o_bb, o_wv, o_bv]) = delta::packed_heads(d, m);
                let mut hv = vec![f32::NAN; hl];
                hv[..d].copy_from_slice(&inp[4]);
                hv[o_bb] = inp[5][0];
                hv[o_wv..o_wv + m * d].copy_from_slice(&inp[6]);
                hv[o_bv..o_bv + m].copy_from_slice(&inp[7]);
                assert!(hv.iter().all(|x| !x.is_nan()), "{tag}: the packed heads have a hole");
                let heads = upload(gpu, "heads", &hv);
                let t: Vec<Tensor> = ["x", "kraw", "a", "c"].iter().zip(&inp).map(|(l, v)| upload(gpu, l, v)).collect();
                let x_out = poisoned(gpu, "x_out", &[n * d * m]);
                let k = poisoned(gpu, "k", &[n * d]);
                let (sl, [o_beta, o_v, o_delta]) = delta::packed_saves(n, m);
                let saves = poisoned(gpu, "saves", &[sl + 5]);
                let ball = poisoned(gpu, "betas", &[n * 2]);
                let wi = WriteIn { x: t[0].view(), kraw: t[1].view(), a: t[2].view(), c: t[3].view() };
                let ds = delta::forward_packed(
                    gpu,
                    &s,
                    wi,
                    heads.view(),
                    x_out.view(),
                    Some(k.view()),
                    saves.view(),
                    Some((ball.view(), 1, 2)),
                )
                .unwrap();
                run(gpu, &ds);
                let sv = read(gpu, &saves);
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&read(gpu, &x_out)), bits(&want.x_out), "{tag}: X'");
                assert_eq!(bits(&read(gpu, &k)), bits(&want.k), "{tag}: k");
                assert_eq!(bits(&sv[..n]), bits(&want.rnorm), "{tag}: 1/n");
                assert_eq!(bits(&sv[o_beta..o_beta + n]), bits(&want.beta), "{tag}: β");
                assert_eq!(bits(&sv[o_v..o_v + n * m]), bits(&want.v), "{tag}: v");
                assert_eq!(bits(&sv[o_delta..o_delta + n * m]), bits(&want.delta), "{tag}: δ");
                assert!(sv[sl..].iter().all(|x| x.is_nan()), "{tag}: wrote past the packed saves");
                assert_eq!(bits(&read(gpu, &ball)), bits(&want_betas), "{tag}: β column");
                // Each launcher refuses the form its device does not take.
                let out = WriteOut {
                    x_out: x_out.view(),
                    k: None,
                    saves: Saves { rnorm: k.view(), beta: k.view(), v: k.view(), delta: k.view() },
                };
                let hv4 = Heads { w_beta: t[1].view(), b_beta: t[1].view(), w_v: t[1].view(), b_v: t[1].view() };
                let e = delta::forward(gpu, &s, wi, hv4, out, None).unwrap_err().to_string();
                assert!(e.contains("forward_packed"), "{e}");
                let e = delta::forward_packed(split_gpu, &s, wi, heads.view(), x_out.view(), None, saves.view(), None)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("delta_packed"), "{e}");
            },
        );
    }
}
