//! Deterministic reductions against float64: Σ x² over odd lengths, chunked bindings and buffers
//! larger than one storage binding; column sums over odd shapes, up to 100k rows, accumulating
//! and chunked.

use super::common::*;
use ddl::gpu::{DType, Tensor};
use ddl::kernels::reduce;

fn sum_squares_ref(x: &[f32]) -> f64 {
    x.iter().map(|&v| v as f64 * v as f64).sum()
}

fn col_sum_ref(x: &[f32], rows: usize, cols: usize, out0: Option<&[f32]>) -> Vec<f64> {
    let mut out: Vec<f64> = match out0 {
        Some(o) => o.iter().map(|&v| v as f64).collect(),
        None => vec![0.0; cols],
    };
    for r in 0..rows {
        for c in 0..cols {
            out[c] += x[r * cols + c] as f64;
        }
    }
    out
}

/// Σ x² of the first `n` elements of a tensor holding `x` (which may be longer), with at most
/// `chunk` elements per binding (None = the adapter's limit).
fn gpu_sum_squares(gpu: &Gpu, x: &Tensor, n: usize, chunk: Option<usize>) -> f32 {
    let out = poisoned(gpu, "out", &[1]);
    let ds = match chunk {
        Some(c) => reduce::sum_squares_chunked(gpu, x, n, out.view(), c).unwrap(),
        None => reduce::sum_squares(gpu, x, n, out.view()).unwrap(),
    };
    run(gpu, &ds);
    read(gpu, &out)[0]
}

#[test]
fn sum_squares_matches_float64_for_odd_lengths_and_ignores_elements_past_n() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    // Both block forms (one invocation per block in order, CPU adapters' default; a workgroup
    // with a tree) on any adapter; the in-order one applies where n is a multiple of 4.
    for seq in [true, false] {
        for n in [1, 7, 255, 4092, 4095, 4096, 4097, 4100, 100_003, 100_004, 1_000_001, 1_000_000] {
            let mut x = rng.normal(n + 13, 1.5);
            for v in &mut x[n..] {
                *v = 1e6; // must not be counted
            }
            let t = upload(&gpu, "x", &x);
            let got = with_forms(&gpu, |f| f.sum_squares_seq = seq, |gpu| gpu_sum_squares(gpu, &t, n, None));
            let want = sum_squares_ref(&x[..n]);
            assert_close(&format!("sum_squares n={n} seq={seq}"), &[got], &[want], 1e-5, rng.seed);
        }
    }
    let t = upload(&gpu, "x", &[1.0; 8192]);
    for (seq, entry) in [(true, "sum_squares_seq4"), (false, "sum_squares_partial4")] {
        let ds = with_forms(
            &gpu,
            |f| f.sum_squares_seq = seq,
            |gpu| reduce::sum_squares(gpu, &t, 8192, poisoned(gpu, "o", &[1]).view()),
        )
        .unwrap();
        assert!(ds[0].kernel.name.ends_with(entry), "seq={seq}: {}", ds[0].kernel.name);
    }
}

#[test]
fn sum_squares_of_a_buffer_larger_than_one_storage_binding_matches_float64() {
    // More elements than one binding holds (so it is chunked for real) and more than 4096²
    // (so the partials need a second partial level before the final sum).
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let max = (gpu.limits.max_storage_buffer_binding_size / 4) as usize;
    let n = (max + 5003).max(4096 * 4096 + 4097);
    let x = rng.uniform(n, -1.0, 1.0);
    let t = Tensor::from_f32(&gpu, "x", &[n], &x).unwrap();
    let out = poisoned(&gpu, "out", &[1]);
    let ds = reduce::sum_squares(&gpu, &t, n, out.view()).unwrap();
    // chunks + two levels of partials
    assert!(ds.len() >= 4, "{} dispatches", ds.len());
    run(&gpu, &ds);
    let got = read(&gpu, &out)[0];
    assert_close("sum_squares huge", &[got], &[sum_squares_ref(&x)], 1e-5, rng.seed);
}

#[test]
fn sum_squares_in_small_chunks_is_bit_identical_to_one_binding() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    // An odd length (scalar loads) and a multiple of 4 (`sum_squares_partial4`, vec4 loads).
    for n in [30_001, 30_000] {
        let x = rng.normal(n, 1.0);
        let t = upload(&gpu, "x", &x);
        let whole = gpu_sum_squares(&gpu, &t, n, None);
        assert_close("sum_squares", &[whole], &[sum_squares_ref(&x)], 1e-5, rng.seed);
        for chunk in [4096, 3 * 4096, 5000, 8 * 4096] {
            let ds = reduce::sum_squares_chunked(&gpu, &t, n, poisoned(&gpu, "o", &[1]).view(), chunk).unwrap();
            let expect_chunks = n.div_ceil(chunk / 4096 * 4096);
            assert_eq!(ds.len(), expect_chunks + 1, "chunk {chunk}");
            assert_eq!(ds[0].kernel.name.ends_with('4'), n % 4 == 0, "{}", ds[0].kernel.name);
            let got = gpu_sum_squares(&gpu, &t, n, Some(chunk));
            assert_eq!(got.to_bits(), whole.to_bits(), "n {n} chunk {chunk}: {got} vs {whole} (seed {})", rng.seed);
            // The other block form keeps its bits across chunkings too.
            let other = !reduce::seq_blocks(&gpu);
            let (w2, g2) = with_forms(
                &gpu,
                |f| f.sum_squares_seq = other,
                |gpu| (gpu_sum_squares(gpu, &t, n, None), gpu_sum_squares(gpu, &t, n, Some(chunk))),
            );
            assert_eq!(g2.to_bits(), w2.to_bits(), "seq={other} n {n} chunk {chunk} (seed {})", rng.seed);
        }
    }
}

#[test]
fn sum_squares_is_bit_identical_run_to_run() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let n = 77_777;
    let t = upload(&gpu, "x", &rng.normal(n, 1.0));
    let a = gpu_sum_squares(&gpu, &t, n, None);
    let b = gpu_sum_squares(&gpu, &t, n, None);
    assert_eq!(a.to_bits(), b.to_bits(), "seed {}", rng.seed);
}

/// Runs col_sum on random data (accumulating into random values when asked) and checks it.
fn check_col_sum(rows: usize, cols: usize, accumulate: bool, chunk: Option<usize>) -> Vec<f32> {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let x = rng.normal(rows * cols, 1.0);
    let tx = upload(&gpu, "x", &x);
    let (out, out0) = if accumulate {
        let o = rng.normal(cols, 1.0);
        (upload(&gpu, "out", &o), Some(o))
    } else {
        (poisoned(&gpu, "out", &[cols]), None)
    };
    let ds = match chunk {
        Some(c) => reduce::col_sum_chunked(&gpu, tx.view(), out.view(), rows, cols, accumulate, c),
        None => reduce::col_sum(&gpu, tx.view(), out.view(), rows, cols, accumulate),
    }
    .unwrap();
    run(&gpu, &ds);
    let got = read(&gpu, &out);
    let want = col_sum_ref(&x, rows, cols, out0.as_deref());
    let name = format!("col_sum {rows}x{cols} acc={accumulate} chunk={chunk:?}");
    // A column sum of zero-mean data cancels: its float32 error scales with the sum of |x|, not
    // with the result. Bound each column by that condition-aware scale (a dropped or doubled row
    // would be ~1/rows of it, far above 1e-6), and require every value to be finite.
    for c in 0..cols {
        let scale: f64 = (0..rows).map(|r| x[r * cols + c].abs() as f64).sum::<f64>()
            + out0.as_ref().map_or(0.0, |o| o[c].abs() as f64);
        let err = (got[c] as f64 - want[c]).abs();
        assert!(
            got[c].is_finite() && err <= 1e-6 * scale.max(1e-30),
            "{name}: column {c}: got {} want {} (|err| {err:e} > 1e-6 * sum|x| {scale:e}); replay with DDL_TEST_SEED={}",
            got[c],
            want[c],
            rng.seed
        );
    }
    got
}

#[test]
fn col_sum_matches_float64_for_odd_shapes_up_to_100k_rows() {
    for (rows, cols) in
        [(1, 1), (7, 3), (33, 65), (1000, 1), (8193, 2), (100_000, 1), (100_000, 4), (3001, 385), (5, 1000), (513, 64)]
    {
        check_col_sum(rows, cols, false, None);
    }
}

#[test]
fn col_sum_of_few_rows_runs_per_column_in_order_and_matches_float64() {
    // Up to `seq_rows` rows (16; 128 on CPU adapters) take the barrier-free per-column kernels:
    // vec4 columns when cols is a multiple of 4, scalar otherwise; one row more takes the tree.
    let gpu = gpu();
    let top = reduce::seq_rows(&gpu);
    for (rows, cols, entry) in [
        (2, 16384, "col_sum_seq4"),
        (6, 128 * 341, "col_sum_seq4"),
        (16, 4, "col_sum_seq4"),
        (5, 1001, "col_sum_seq"),
        (1, 3, "col_sum_seq"),
        (top, 640, "col_sum_seq4"),
        (top, 7, "col_sum_seq"),
        (top + 1, 12, "::col_sum"),
        (top + 1, 640, "::col_sum"),
    ] {
        let x = upload(&gpu, "x", &vec![0.0; rows * cols]);
        let o = upload(&gpu, "o", &vec![0.0; cols]);
        let ds = reduce::col_sum(&gpu, x.view(), o.view(), rows, cols, false).unwrap();
        assert!(ds[0].kernel.name.ends_with(entry), "{rows}x{cols}: {} is not {entry}", ds[0].kernel.name);
        check_col_sum(rows, cols, false, None);
        check_col_sum(rows, cols, true, None);
    }
}

#[test]
fn col_sum_accumulate_adds_into_the_output() {
    for (rows, cols) in [(1, 1), (9, 5), (20_000, 3), (700, 130)] {
        check_col_sum(rows, cols, true, None);
    }
}

#[test]
fn col_sum_in_small_chunks_matches_float64() {
    // Chunk rows must start aligned: with 7 columns that is a multiple of 64 rows.
    check_col_sum(20_000, 7, false, Some(7 * 1024));
    check_col_sum(3000, 384, true, Some(384 * 200));
    check_col_sum(10_001, 1, false, Some(4096));
    let gpu = gpu();
    let x = upload(&gpu, "x", &[0.0; 7000]);
    let o = upload(&gpu, "o", &[0.0; 7]);
    let err = reduce::col_sum_chunked(&gpu, x.view(), o.view(), 1000, 7, false, 70).unwrap_err();
    assert!(err.to_string().contains("chunk"), "{err}");
}

#[test]
fn col_sum_is_bit_identical_run_to_run() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let (rows, cols) = (30_011, 13);
    let x = upload(&gpu, "x", &rng.normal(rows * cols, 1.0));
    let out = Tensor::zeros(&gpu, "out", &[cols], DType::F32).unwrap();
    let ds = reduce::col_sum(&gpu, x.view(), out.view(), rows, cols, false).unwrap();
    run(&gpu, &ds);
    let a = read(&gpu, &out);
    run(&gpu, &ds);
    let b = read(&gpu, &out);
    let same = a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits());
    assert!(same, "seed {}", rng.seed);
}

#[test]
fn shape_errors_are_reported_not_panicked() {
    let gpu = gpu();
    let x = upload(&gpu, "x", &[1.0; 10]);
    let o = upload(&gpu, "o", &[0.0; 2]);
    let e = reduce::sum_squares(&gpu, &x, 11, o.view()).unwrap_err();
    assert!(e.to_string().contains("needs 11 elements"), "{e}");
    let e = reduce::col_sum(&gpu, x.view(), o.view(), 4, 3, false).unwrap_err();
    assert!(e.to_string().contains("'x' needs 12 elements"), "{e}");
    let e = reduce::col_sum(&gpu, x.view(), o.view(), 2, 3, false).unwrap_err();
    assert!(e.to_string().contains("'out' needs 3 elements"), "{e}");
    let e = reduce::col_sum(&gpu, x.view(), x.view(), 2, 3, false).unwrap_err();
    assert!(e.to_string().contains("same buffer"), "{e}");
    let e = reduce::sum_squares(&gpu, &x, 5, x.view()).unwrap_err();
    assert!(e.to_string().contains("same buffer"), "{e}");
    let e = reduce::col_sum_in_order(&gpu, x.view(), o.view(), 4, 3, false).unwrap_err();
    assert!(e.to_string().contains("'x' needs 12 elements"), "{e}");
    let e = reduce::col_sum_in_order(&gpu, x.view(), o.view(), 2, 3, true).unwrap_err();
    assert!(e.to_string().contains("'out' needs 3 elements"), "{e}");
}
