//! Matmul against float64 for every form, variant, odd and degenerate size, batches and
//! accumulation.

use super::common::*;
use ddl::kernels::matmul::{self, Matmul, Operand};

/// float64 reference of `C (+)= alpha·A·B` over the operands' strided views.
fn reference(mm: &Matmul, a: &[f32], b: &[f32], c0: &[f32]) -> Vec<f64> {
    let mut c: Vec<f64> = c0.iter().map(|&x| x as f64).collect();
    let at = |o: &Operand, bt, r, col| o.offset + bt * o.batch_stride + r * o.row_stride + col * o.col_stride;
    for bt in 0..mm.batch {
        for i in 0..mm.m {
            for j in 0..mm.n {
                let mut s = 0.0f64;
                for p in 0..mm.k {
                    s += a[at(&mm.a, bt, i, p)] as f64 * b[at(&mm.b, bt, p, j)] as f64;
                }
                let idx = at(&mm.c, bt, i, j);
                c[idx] = mm.alpha as f64 * s + if mm.accumulate { c[idx] } else { 0.0 };
            }
        }
    }
    c
}

fn extent(o: &Operand, rows: usize, cols: usize, batch: usize) -> usize {
    o.offset + (batch - 1) * o.batch_stride + (rows - 1) * o.row_stride + (cols - 1) * o.col_stride + 1
}

/// Runs `mm` with `variant` (None = the runtime's pick) on random data and checks it.
fn check(mm: Matmul, variant: Option<&str>) -> Vec<f32> {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let a = rng.uniform(extent(&mm.a, mm.m, mm.k, mm.batch), -1.0, 1.0);
    let b = rng.uniform(extent(&mm.b, mm.k, mm.n, mm.batch), -1.0, 1.0);
    let c_len = extent(&mm.c, mm.m, mm.n, mm.batch);
    let (ta, tb) = (upload(&gpu, "a", &a), upload(&gpu, "b", &b));
    let (tc, c0) = if mm.accumulate {
        let c0 = rng.uniform(c_len, -1.0, 1.0);
        (upload(&gpu, "c", &c0), c0)
    } else {
        (poisoned(&gpu, "c", &[c_len]), vec![0.0; c_len])
    };
    let d = match variant {
        Some(v) => mm.bind_variant(&gpu, v, ta.view(), tb.view(), tc.view()).unwrap(),
        None => mm.bind(&gpu, ta.view(), tb.view(), tc.view()).unwrap(),
    };
    gpu.run(&[&d]).unwrap();
    let got = tc.read_f32(&gpu).unwrap();
    let mut want = reference(&mm, &a, &b, &c0);
    // Elements of C outside the product (strided layouts) must stay as they were: NaN.
    let mut got_cmp = got.clone();
    for (g, w) in got_cmp.iter_mut().zip(want.iter_mut()) {
        if !mm.accumulate && g.is_nan() {
            *g = 0.0;
            *w = 0.0;
        }
    }
    let name = format!("matmul {}x{}x{} b{} {:?}", mm.m, mm.n, mm.k, mm.batch, variant);
    assert_close(&name, &got_cmp, &want, 1e-5, rng.seed);
    // …but every element inside the product must have been written.
    let at = |bt, i, j| mm.c.offset + bt * mm.c.batch_stride + i * mm.c.row_stride + j;
    for bt in 0..mm.batch {
        for i in 0..mm.m {
            for j in 0..mm.n {
                assert!(!got[at(bt, i, j)].is_nan(), "{name}: C[{bt},{i},{j}] not written");
            }
        }
    }
    got
}

const SIZES: &[(usize, usize, usize)] =
    &[(1, 1, 1), (67, 85, 33), (1000, 3, 7), (3, 1000, 2), (2, 5, 300), (64, 64, 64), (129, 65, 17)];

#[test]
fn every_form_and_variant_matches_float64_at_odd_sizes() {
    for v in matmul::variants() {
        for &(m, n, k) in SIZES {
            for mm in [Matmul::nn(m, n, k), Matmul::nt(m, n, k), Matmul::tn(m, n, k), Matmul::tt(m, n, k)] {
                check(mm, Some(v));
            }
        }
    }
}

#[test]
fn the_runtime_pick_is_correct_at_1024_cubed() {
    check(Matmul::nn(1024, 1024, 1024), None);
}

#[test]
fn accumulate_adds_into_c_and_alpha_scales() {
    for v in matmul::variants() {
        check(Matmul::nt(37, 29, 41).accumulate(true).alpha(0.37), Some(v));
        check(Matmul::tn(5, 71, 13).accumulate(true), Some(v));
    }
}

#[test]
fn batched_products_with_offsets_and_strides() {
    // Attention-like: per head, Q_h (T×h) · K_hᵀ where heads are interleaved in rows of H·h.
    let (t, h, heads) = (19, 7, 3);
    let row = heads * h;
    let mm = Matmul {
        m: t,
        n: t,
        k: h,
        batch: heads,
        a: Operand { offset: 0, row_stride: row, col_stride: 1, batch_stride: h },
        b: Operand { offset: 5, row_stride: 1, col_stride: row, batch_stride: h },
        c: Operand { offset: 3, row_stride: t + 2, col_stride: 1, batch_stride: t * (t + 2) + 1 },
        accumulate: false,
        alpha: 0.5,
    };
    for v in matmul::variants() {
        check(mm, Some(v));
    }
    check(Matmul::nn(17, 23, 9).batched(5), None);
}

#[test]
fn all_variants_give_bit_identical_results() {
    // Same summation order in every variant: the autotuner may switch without changing training.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let mm = Matmul::nt(77, 93, 131);
    let a = upload(&gpu, "a", &rng.normal(77 * 131, 1.0));
    let b = upload(&gpu, "b", &rng.normal(93 * 131, 1.0));
    let mut outs = Vec::new();
    for v in matmul::variants() {
        let c = poisoned(&gpu, "c", &[77 * 93]);
        let d = mm.bind_variant(&gpu, v, a.view(), b.view(), c.view()).unwrap();
        gpu.run(&[&d]).unwrap();
        gpu.run(&[&d]).unwrap();
        outs.push((v, c.read_f32(&gpu).unwrap()));
    }
    for (v, o) in &outs[1..] {
        let same = o.iter().zip(&outs[0].1).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "variant {v} differs from {} (seed {})", outs[0].0, rng.seed);
    }
}

#[test]
fn shape_errors_are_reported_not_panicked() {
    let gpu = gpu();
    let a = upload(&gpu, "a", &[1.0; 6]);
    let c = upload(&gpu, "c", &[0.0; 4]);
    let e = Matmul::nn(2, 2, 4).bind(&gpu, a.view(), a.view(), c.view()).unwrap_err();
    assert!(e.to_string().contains("A needs 32 bytes"), "{e}");
    let e = Matmul::nn(0, 2, 3).bind(&gpu, a.view(), a.view(), c.view()).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
}
