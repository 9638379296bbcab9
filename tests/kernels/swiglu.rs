//! SwiGLU gating against float64: forward and backward at odd sizes, extreme gate values, a grid
//! larger than 65535 workgroups, determinism, and a finite-difference check of the reference.

use super::common::*;
use ddl::kernels::swiglu;

fn sigmoid(g: f64) -> f64 {
    if g >= 0.0 {
        1.0 / (1.0 + (-g).exp())
    } else {
        let e = g.exp();
        e / (1.0 + e)
    }
}

fn ref_forward(gate: &[f32], up: &[f32]) -> Vec<f64> {
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| {
            let g = g as f64;
            g * sigmoid(g) * u as f64
        })
        .collect()
}

/// (dgate, dup) in float64.
fn ref_backward(gate: &[f64], up: &[f64], dout: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut dg = Vec::with_capacity(gate.len());
    let mut du = Vec::with_capacity(gate.len());
    for i in 0..gate.len() {
        let (g, u, dy) = (gate[i], up[i], dout[i]);
        let s = sigmoid(g);
        du.push(dy * g * s);
        dg.push(dy * u * s * (1.0 + g * (1.0 - s)));
    }
    (dg, du)
}

fn f64v(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// Gate values: mostly N(0, 3²), with some very large magnitudes mixed in.
fn gates(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut g = rng.normal(n, 3.0);
    let extremes = [-1e4f32, -200.0, -88.0, -30.0, 30.0, 88.0, 200.0, 1e4];
    for (j, &e) in extremes.iter().enumerate() {
        if n > 4 * extremes.len() {
            g[(j * 4 + 1) % n] = e;
        }
    }
    g
}

fn check(n: usize) {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let gate = gates(&mut rng, n);
    let up = rng.normal(n, 1.0);
    let dout = rng.normal(n, 1.0);
    let (tg, tu, td) = (upload(&gpu, "gate", &gate), upload(&gpu, "up", &up), upload(&gpu, "dout", &dout));
    // Four elements per invocation where n is a multiple of 4, else one; forced off, one.
    let mut runs = Vec::new();
    for v4 in [true, false] {
        with_forms(
            &gpu,
            |f| f.swiglu_vec4 = v4,
            |gpu| {
                let out = poisoned(gpu, "out", &[n]);
                let dgate = poisoned(gpu, "dgate", &[n]);
                let dup = poisoned(gpu, "dup", &[n]);
                run(gpu, &swiglu::forward(gpu, tg.view(), tu.view(), out.view(), n).unwrap());
                run(gpu, &swiglu::backward(gpu, tg.view(), tu.view(), td.view(), dgate.view(), dup.view(), n).unwrap());
                let tag = format!("n={n} vec4={}", v4 && n.is_multiple_of(4));
                let (o, dg, du) = (read(gpu, &out), read(gpu, &dgate), read(gpu, &dup));
                assert_close(&format!("swiglu forward {tag}"), &o, &ref_forward(&gate, &up), 1e-5, rng.seed);
                let (wg, wu) = ref_backward(&f64v(&gate), &f64v(&up), &f64v(&dout));
                assert_close(&format!("swiglu dgate {tag}"), &dg, &wg, 1e-4, rng.seed);
                assert_close(&format!("swiglu dup {tag}"), &du, &wu, 1e-4, rng.seed);
                runs.push([o, dg, du].map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()));
            },
        );
    }
    // The same operations per element either way: the same bits.
    assert!(runs[0] == runs[1], "n={n}: the vec4 entry points differ from the scalar ones (seed {})", rng.seed);
}

#[test]
fn swiglu_forward_and_backward_match_float64_at_odd_sizes() {
    // 85 and 2730 are the spec's odd MLP widths F = ⌊8d/3⌋ (d = 32, 1024): rows of 3 × F.
    for n in [1, 7, 33, 85, 300, 85 * 33, 256 * 7 + 1, 2730, 3 * 2730, 4 * 2730, 1024] {
        check(n);
    }
}

#[test]
fn swiglu_forward_in_f16_stores_the_f32_forwards_values_rounded_to_nearest_even() {
    // `--precision f16`'s SwiGLU output (`forward_f16`): each value of the f32 forward rounded to
    // the nearest f16, ties to even (what the products would read from the f32 output as f16
    // operands), packed two to a word — bit for bit, at the spec's odd widths, with large gates
    // (outputs past f16's range become ±inf, as rounding makes them) and values at f16's
    // subnormals; and close to float64.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for n in [4, 84, 340, 4 * 2730, 65535 * 4 + 8] {
        let mut gate = gates(&mut rng, n);
        let mut up = rng.normal(n, 1.0);
        if n > 64 {
            // Tiny products (f16 subnormals, and a tie at the smallest one) and one past 65504.
            (gate[3], up[3]) = (1.0, 3e-6);
            (gate[7], up[7]) = (40.0, 5.960_464_5e-8 / 2.0 / 40.0);
            (gate[11], up[11]) = (300.0, 300.0);
        }
        let (tg, tu) = (upload(&gpu, "gate", &gate), upload(&gpu, "up", &up));
        let out = poisoned(&gpu, "out", &[n]);
        let outh = poisoned_f16(&gpu, "outh", n);
        run(&gpu, &swiglu::forward(&gpu, tg.view(), tu.view(), out.view(), n).unwrap());
        run(&gpu, &swiglu::forward_f16(&gpu, tg.view(), tu.view(), outh.view(), n).unwrap());
        let (o32, o16) = (read(&gpu, &out), f16_unpack(&read(&gpu, &outh)));
        assert_eq!(o16.len(), n);
        for i in 0..n {
            let want = half::f16::from_f32(o32[i]).to_bits();
            let got = half::f16::from_f32(o16[i]).to_bits();
            assert_eq!(got, want, "n={n} i={i}: f32 output {:e} stored as {:e} (seed {})", o32[i], o16[i], rng.seed);
        }
        if n > 64 {
            assert!(o16[11].is_infinite(), "300·silu(300) = 90000 rounds past 65504: {}", o16[11]);
        }
        let finite: Vec<usize> = (0..n).filter(|&i| o16[i].is_finite()).collect();
        let want = ref_forward(&gate, &up);
        let (got_f, want_f): (Vec<f32>, Vec<f64>) = finite.iter().map(|&i| (o16[i], want[i])).unzip();
        assert_close(&format!("swiglu forward f16 n={n}"), &got_f, &want_f, 1e-3, rng.seed);
    }
    // What it refuses: n off a multiple of 4, an output too short, an output off 8 bytes.
    let a = upload(&gpu, "a", &[0.0; 16]);
    let e = swiglu::forward_f16(&gpu, a.view(), a.view(), a.view(), 6).unwrap_err();
    assert!(e.to_string().contains("multiple of 4"), "{e}");
    let e = swiglu::forward_f16(&gpu, a.view(), a.view(), a.view().sub(0, 3), 8).unwrap_err();
    assert!(e.to_string().contains("'out' needs 4 elements"), "{e}");
    let e = swiglu::forward_f16(&gpu, a.view(), a.view(), a.view().sub(1, 4), 8).unwrap_err();
    assert!(e.to_string().contains("out on 8"), "{e}");
}

#[test]
fn swiglu_is_finite_and_exact_in_the_limits_of_large_gates() {
    // silu(g) → g for g ≫ 0 and → 0 for g ≪ 0; σ'(g) terms vanish without NaN or overflow.
    let gpu = gpu();
    let gate = [-1e30f32, -1e4, -100.0, -20.0, 0.0, 20.0, 100.0, 1e4, 1e30];
    let n = gate.len();
    let up = vec![1.0f32; n];
    let dout = vec![1.0f32; n];
    let (tg, tu, td) = (upload(&gpu, "gate", &gate), upload(&gpu, "up", &up), upload(&gpu, "dout", &dout));
    let (out, dgate, dup) = (poisoned(&gpu, "out", &[n]), poisoned(&gpu, "dgate", &[n]), poisoned(&gpu, "dup", &[n]));
    let mut ds = swiglu::forward(&gpu, tg.view(), tu.view(), out.view(), n).unwrap();
    ds.extend(swiglu::backward(&gpu, tg.view(), tu.view(), td.view(), dgate.view(), dup.view(), n).unwrap());
    run(&gpu, &ds);
    let (o, dg, du) = (read(&gpu, &out), read(&gpu, &dgate), read(&gpu, &dup));
    for i in 0..n {
        assert!(
            o[i].is_finite() && dg[i].is_finite() && du[i].is_finite(),
            "gate {}: out {} dgate {} dup {}",
            gate[i],
            o[i],
            dg[i],
            du[i]
        );
    }
    for i in [5, 6, 7, 8] {
        assert_eq!(o[i], gate[i], "silu({}) should be the identity", gate[i]);
        assert_eq!(du[i], gate[i]);
        assert_eq!(dg[i], 1.0, "silu'({}) should be 1", gate[i]);
    }
    for i in [0, 1, 2] {
        assert!(o[i].abs() < 1e-30 && dg[i].abs() < 1e-30, "gate {}", gate[i]);
    }
    assert_eq!(o[4], 0.0);
    assert_eq!(dg[4], 0.5);
}

#[test]
fn swiglu_forward_covers_a_grid_of_more_than_65535_workgroups() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let n = 65535 * 256 + 300;
    let gate = rng.uniform(n, -6.0, 6.0);
    let up = rng.uniform(n, -1.0, 1.0);
    let (tg, tu) = (upload(&gpu, "gate", &gate), upload(&gpu, "up", &up));
    let out = poisoned(&gpu, "out", &[n]);
    // One element per invocation (the vec4 form needs a quarter of the workgroups and shares
    // the same grid_1d split).
    let ds = with_forms(
        &gpu,
        |f| f.swiglu_vec4 = false,
        |gpu| swiglu::forward(gpu, tg.view(), tu.view(), out.view(), n).unwrap(),
    );
    assert!(ds[0].workgroups[1] > 1, "{:?}", ds[0].workgroups);
    run(&gpu, &ds);
    assert_close("swiglu forward (2-D grid)", &read(&gpu, &out), &ref_forward(&gate, &up), 1e-5, rng.seed);
}

#[test]
fn swiglu_backward_reference_matches_finite_differences() {
    let mut rng = Rng::fresh();
    let n = 41;
    let gate = f64v(&rng.normal(n, 3.0));
    let up = f64v(&rng.normal(n, 1.0));
    let w = f64v(&rng.normal(n, 1.0));
    let (dg, du) = ref_backward(&gate, &up, &w);
    // L = Σ w ⊙ silu(gate) ⊙ up, differentiated in gate and in up.
    let loss = |g: &[f64], u: &[f64]| -> f64 { (0..n).map(|i| w[i] * g[i] * sigmoid(g[i]) * u[i]).sum::<f64>() };
    let e_g = fd_check(&mut |g| loss(g, &up), &gate, &dg, 30, &mut rng);
    let e_u = fd_check(&mut |u| loss(&gate, u), &up, &du, 30, &mut rng);
    assert!(e_g < 1e-6 && e_u < 1e-6, "fd: dgate {e_g:e} dup {e_u:e} (seed {})", rng.seed);
}

#[test]
fn swiglu_is_bit_identical_run_after_run() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let n = 1000;
    let (tg, tu, td) = (
        upload(&gpu, "gate", &gates(&mut rng, n)),
        upload(&gpu, "up", &rng.normal(n, 1.0)),
        upload(&gpu, "dout", &rng.normal(n, 1.0)),
    );
    let mut outs = Vec::new();
    for _ in 0..2 {
        let (out, dgate, dup) =
            (poisoned(&gpu, "out", &[n]), poisoned(&gpu, "dgate", &[n]), poisoned(&gpu, "dup", &[n]));
        let mut ds = swiglu::forward(&gpu, tg.view(), tu.view(), out.view(), n).unwrap();
        ds.extend(swiglu::backward(&gpu, tg.view(), tu.view(), td.view(), dgate.view(), dup.view(), n).unwrap());
        run(&gpu, &ds);
        let bits = |t| read(&gpu, t).iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        outs.push((bits(&out), bits(&dgate), bits(&dup)));
    }
    assert!(outs[0] == outs[1], "two runs differ (seed {})", rng.seed);
}

#[test]
fn swiglu_shape_errors_are_reported_not_panicked() {
    let gpu = gpu();
    let a = upload(&gpu, "a", &[0.0; 8]);
    let short = upload(&gpu, "short", &[0.0; 5]);
    let e = swiglu::forward(&gpu, a.view(), short.view(), a.view(), 8).unwrap_err();
    assert!(e.to_string().contains("'up' needs 8 elements, the view has 5"), "{e}");
    let e = swiglu::backward(&gpu, a.view(), a.view(), a.view(), short.view(), a.view(), 8).unwrap_err();
    assert!(e.to_string().contains("'dgate'"), "{e}");
    let e = swiglu::forward(&gpu, a.view(), a.view(), a.view(), 0).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
}
