//! RoPE against float64 (angles evaluated directly in f64, so the host table is checked too):
//! forward and backward for several head dims, heads, sequence lengths and offsets (positions
//! beyond 1000), `set_pos0` rebinding for decoding, determinism, shape errors, and finite
//! differences of the reference backward.

use super::common::*;
use ddl::gpu::Tensor;
use ddl::kernels::rope::{self, RopeShape};

const BASE: f64 = 10000.0;

/// Rotates every head of `x` by +φ (`sign` = 1, forward) or −φ (`sign` = −1, backward).
fn reference(s: &RopeShape, x: &[f64], sign: f64) -> Vec<f64> {
    let (h, half) = (s.head_dim, s.head_dim / 2);
    let mut y = vec![0.0; x.len()];
    for r in 0..s.rows {
        let pos = (s.pos0 + r % s.seq_len) as f64;
        for hd in 0..s.heads {
            let o = (r * s.heads + hd) * h;
            for i in 0..half {
                let theta = BASE.powf(-((2 * i) as f64) / h as f64);
                let (sn, c) = (sign * (pos * theta).sin(), (pos * theta).cos());
                let (a, b) = (x[o + i], x[o + i + half]);
                y[o + i] = a * c - b * sn;
                y[o + i + half] = a * sn + b * c;
            }
        }
    }
    y
}

fn f64v(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

fn len(s: &RopeShape) -> usize {
    s.rows * s.heads * s.head_dim
}

/// Forward and backward on the GPU vs float64.
fn check(s: RopeShape, max_pos: usize) {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let n = len(&s);
    let x = rng.normal(n, 1.0);
    let dy = rng.normal(n, 1.0);
    let tab = rope::table(&gpu, max_pos, s.head_dim, BASE).unwrap();
    let (tx, tdy) = (upload(&gpu, "x", &x), upload(&gpu, "dy", &dy));
    // Four pairs per invocation where h/2 is a multiple of 4, else one; forced off, one: the
    // same operations per element, so the same bits.
    let mut runs = Vec::new();
    for v4 in [true, false] {
        with_forms(
            &gpu,
            |f| f.rope_vec4 = v4,
            |gpu| {
                let (y, dx) = (poisoned(gpu, "y", &[n]), poisoned(gpu, "dx", &[n]));
                let mut ds = rope::forward(gpu, &s, tab.view(), tx.view(), y.view()).unwrap();
                ds.extend(rope::backward(gpu, &s, tab.view(), tdy.view(), dx.view()).unwrap());
                run(gpu, &ds);
                let (gy, gdx) = (read(gpu, &y), read(gpu, &dx));
                let tag = format!("{s:?} vec4 {}", v4 && s.head_dim.is_multiple_of(8));
                assert_close(&format!("rope forward {tag}"), &gy, &reference(&s, &f64v(&x), 1.0), 1e-5, rng.seed);
                assert_close(&format!("rope backward {tag}"), &gdx, &reference(&s, &f64v(&dy), -1.0), 1e-4, rng.seed);
                runs.push([gy, gdx].map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()));
            },
        );
    }
    assert!(runs[0] == runs[1], "{s:?}: the vec4 entry points differ from the scalar ones (seed {})", rng.seed);
}

fn shape(rows: usize, seq_len: usize, heads: usize, head_dim: usize, pos0: usize) -> RopeShape {
    RopeShape { rows, seq_len, heads, head_dim, pos0 }
}

#[test]
fn rope_forward_and_backward_match_float64_for_several_head_dims() {
    for &h in &[2, 6, 8, 16, 24, 64] {
        check(shape(1, 1, 1, h, 0), 1);
        check(shape(7, 7, 3, h, 0), 7);
        check(shape(300, 100, 2, h, 0), 100);
        check(shape(21, 7, 5, h, 3), 11);
    }
}

#[test]
fn rope_matches_float64_at_positions_beyond_1000() {
    // Decoding-like offsets and long sequences: angles up to ~4000 rad for the fastest pair.
    check(shape(5, 5, 3, 16, 1234), 1300);
    check(shape(300, 300, 1, 6, 3700), 4000);
    check(shape(2 * 1100, 1100, 2, 2, 0), 1100);
}

#[test]
fn rope_set_pos0_moves_bound_dispatches_to_a_new_position() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let mut s = shape(4, 1, 3, 16, 0); // 4 sequences decoding one token each
    let n = len(&s);
    let tab = rope::table(&gpu, 2048, s.head_dim, BASE).unwrap();
    let x = rng.normal(n, 1.0);
    let tx = upload(&gpu, "x", &x);
    let (y, dx) = (poisoned(&gpu, "y", &[n]), poisoned(&gpu, "dx", &[n]));
    let mut ds = rope::forward(&gpu, &s, tab.view(), tx.view(), y.view()).unwrap();
    ds.extend(rope::backward(&gpu, &s, tab.view(), tx.view(), dx.view()).unwrap());
    for pos0 in [0, 1, 1500, 2047] {
        s.pos0 = pos0;
        rope::set_pos0(&gpu, &ds, &s).unwrap();
        run(&gpu, &ds);
        assert_close(
            &format!("rope forward after set_pos0 {pos0}"),
            &read(&gpu, &y),
            &reference(&s, &f64v(&x), 1.0),
            1e-5,
            rng.seed,
        );
        assert_close(
            &format!("rope backward after set_pos0 {pos0}"),
            &read(&gpu, &dx),
            &reference(&s, &f64v(&x), -1.0),
            1e-4,
            rng.seed,
        );
    }
    // Only pos0 may change; other dispatches are refused.
    let e = rope::set_pos0(&gpu, &ds, &shape(5, 1, 3, 16, 0)).unwrap_err();
    assert!(e.to_string().contains("only pos0 may change"), "{e}");
    s.pos0 = 2048;
    let e = rope::set_pos0(&gpu, &ds, &s).unwrap_err();
    assert!(e.to_string().contains("= 2049 but the table holds 2048 positions"), "{e}");
    let fill = ddl::kernels::fill(&gpu, &y, 0, 1, 0.0).unwrap();
    let e = rope::set_pos0(&gpu, &[fill], &s).unwrap_err();
    assert!(e.to_string().contains("not a RoPE dispatch"), "{e}");
}

#[test]
fn rope_backward_reference_matches_finite_differences() {
    let mut rng = Rng::fresh();
    let s = shape(3, 2, 2, 6, 5);
    let n = len(&s);
    let x = f64v(&rng.normal(n, 1.0));
    let w = f64v(&rng.normal(n, 1.0));
    // L = Σ w ⊙ RoPE(x), so ∂L/∂x = RoPE backward(w).
    let grad = reference(&s, &w, -1.0);
    let err =
        fd_check(&mut |v| reference(&s, v, 1.0).iter().zip(&w).map(|(a, b)| a * b).sum(), &x, &grad, 30, &mut rng);
    assert!(err < 1e-6, "fd {err:e} (seed {})", rng.seed);
}

#[test]
fn rope_is_bit_identical_run_after_run() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let s = shape(300, 100, 3, 16, 7);
    let n = len(&s);
    let tab = rope::table(&gpu, 107, s.head_dim, BASE).unwrap();
    let tx = upload(&gpu, "x", &rng.normal(n, 1.0));
    let mut outs = Vec::new();
    for _ in 0..2 {
        let (y, dx) = (poisoned(&gpu, "y", &[n]), poisoned(&gpu, "dx", &[n]));
        let mut ds = rope::forward(&gpu, &s, tab.view(), tx.view(), y.view()).unwrap();
        ds.extend(rope::backward(&gpu, &s, tab.view(), tx.view(), dx.view()).unwrap());
        run(&gpu, &ds);
        let bits = |t| read(&gpu, t).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        outs.push((bits(&y), bits(&dx)));
    }
    assert!(outs[0] == outs[1], "two runs differ (seed {})", rng.seed);
}

#[test]
fn rope_shape_errors_are_reported_not_panicked() {
    let gpu = gpu();
    let t = Tensor::from_f32(&gpu, "t", &[64], &[0.0; 64]).unwrap();
    let tab = rope::table(&gpu, 8, 4, BASE).unwrap(); // 8 positions of head dim 4
    let e = rope::forward(&gpu, &shape(2, 2, 1, 5, 0), tab.view(), t.view(), t.view()).unwrap_err();
    assert!(e.to_string().contains("odd"), "{e}");
    let e = rope::table(&gpu, 8, 5, BASE).unwrap_err();
    assert!(e.to_string().contains("even"), "{e}");
    let e = rope::forward(&gpu, &shape(2, 2, 1, 4, 7), tab.view(), t.view(), t.view()).unwrap_err();
    assert!(e.to_string().contains("= 9 but the table holds 8 positions"), "{e}");
    let short = upload(&gpu, "short", &[0.0; 10]);
    let e = rope::backward(&gpu, &shape(3, 3, 1, 4, 0), tab.view(), t.view(), short.view()).unwrap_err();
    assert!(e.to_string().contains("'dx' needs rows 3 × heads 1 × head_dim 4 = 12 elements, the view has 10"), "{e}");
    let e = rope::forward(&gpu, &shape(0, 1, 1, 4, 0), tab.view(), t.view(), t.view()).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
}
