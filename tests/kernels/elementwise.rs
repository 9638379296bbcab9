//! `y += x` and `x *= alpha` against float64: odd lengths, grids over 65535 workgroups, chunked
//! bindings, determinism, shape errors.

use super::common::*;
use ddl::kernels::elementwise;

fn check_add(n: usize, chunk: Option<usize>) {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let x = rng.normal(n + 5, 1.0);
    let y0 = rng.normal(n + 5, 1.0);
    let (tx, ty) = (upload(&gpu, "x", &x), upload(&gpu, "y", &y0));
    let ds = match chunk {
        Some(c) => elementwise::add_chunked(&gpu, tx.view(), ty.view(), n, c),
        None => elementwise::add(&gpu, tx.view(), ty.view(), n),
    }
    .unwrap();
    run(&gpu, &ds);
    let got = read(&gpu, &ty);
    // y accumulates: the reference adds to the random starting values; past n, y is untouched.
    let want: Vec<f64> = (0..n + 5).map(|i| y0[i] as f64 + if i < n { x[i] as f64 } else { 0.0 }).collect();
    assert_close(&format!("add n={n} chunk={chunk:?}"), &got, &want, 1e-6, rng.seed);
    assert!(got[n..].iter().zip(&y0[n..]).all(|(a, b)| a == b));
}

fn check_scale(n: usize, alpha: f32, chunk: Option<usize>) {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let x0 = rng.normal(n + 3, 1.0);
    let t = upload(&gpu, "x", &x0);
    let ds = match chunk {
        Some(c) => elementwise::scale_chunked(&gpu, t.view(), alpha, n, c),
        None => elementwise::scale(&gpu, t.view(), alpha, n),
    }
    .unwrap();
    run(&gpu, &ds);
    let got = read(&gpu, &t);
    let want: Vec<f64> = (0..n + 3).map(|i| x0[i] as f64 * if i < n { alpha as f64 } else { 1.0 }).collect();
    assert_close(&format!("scale n={n} a={alpha}"), &got, &want, 1e-6, rng.seed);
}

#[test]
fn add_matches_float64_for_odd_lengths() {
    for n in [1, 7, 255, 256, 257, 100_003] {
        check_add(n, None);
    }
}

#[test]
fn scale_matches_float64_for_odd_lengths() {
    for (n, a) in [(1, 0.5), (7, -3.25), (257, 0.0), (100_003, 1.7)] {
        check_scale(n, a, None);
    }
}

#[test]
fn more_than_65535_workgroups_reach_every_element() {
    let n = 65535 * 256 + 333;
    check_add(n, None);
    check_scale(n, 0.75, None);
}

#[test]
fn chunked_bindings_match_float64() {
    let gpu = gpu();
    let (t, u) = (upload(&gpu, "t", &[0.0; 10_007]), upload(&gpu, "u", &[0.0; 10_007]));
    // Chunks start at multiples of the offset alignment whatever size is asked for.
    for c in [1, 100, 1000, 4096] {
        let ds = elementwise::add_chunked(&gpu, t.view(), u.view(), 10_007, c).unwrap();
        assert!(ds.len() > 1, "chunk {c}: {} dispatches", ds.len());
        check_add(10_007, Some(c));
        check_scale(10_007, 1.5, Some(c));
    }
}

#[test]
fn results_are_bit_identical_run_to_run() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let n = 5001;
    let x = upload(&gpu, "x", &rng.normal(n, 1.0));
    let y0 = rng.normal(n, 1.0);
    let mut outs = Vec::new();
    for _ in 0..2 {
        let y = upload(&gpu, "y", &y0);
        let mut ds = elementwise::add(&gpu, x.view(), y.view(), n).unwrap();
        ds.extend(elementwise::scale(&gpu, y.view(), 0.3, n).unwrap());
        run(&gpu, &ds);
        outs.push(read(&gpu, &y));
    }
    let same = outs[0].iter().zip(&outs[1]).all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "seed {}", rng.seed);
}

#[test]
fn shape_errors_are_reported_not_panicked() {
    let gpu = gpu();
    let x = upload(&gpu, "x", &[1.0; 10]);
    let y = upload(&gpu, "y", &[1.0; 8]);
    let e = elementwise::add(&gpu, x.view(), y.view(), 9).unwrap_err();
    assert!(e.to_string().contains("'y' needs 9 elements"), "{e}");
    let e = elementwise::scale(&gpu, y.view(), 2.0, 11).unwrap_err();
    assert!(e.to_string().contains("'x' needs 11 elements"), "{e}");
    let e = elementwise::add(&gpu, x.view().sub(0, 5), x.view().sub(5, 5), 5).unwrap_err();
    assert!(e.to_string().contains("same buffer"), "{e}");
}

#[test]
fn copy_rows_moves_every_row_into_the_new_stride_and_leaves_the_gaps() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    // (rows, cols, x stride, y stride): the padded w_down of tiny (128 × 341 → 344), odd cases.
    for (rows, cols, xs, ys) in
        [(128, 341, 341, 344), (1, 1, 1, 1), (7, 5, 9, 5), (3, 2730, 2730, 2732), (300, 3, 3, 4)]
    {
        let x = rng.normal((rows - 1) * xs + cols, 1.0);
        let ylen = (rows - 1) * ys + cols + 2;
        for chunk in [None, Some(700), Some(cols + 64)] {
            let y = poisoned(&gpu, "y", &[ylen]);
            let tx = upload(&gpu, "x", &x);
            let ds = match chunk {
                None => elementwise::copy_rows(&gpu, tx.view(), y.view(), rows, cols, xs, ys).unwrap(),
                Some(c) if c >= cols + 64 => {
                    elementwise::copy_rows_chunked(&gpu, tx.view(), y.view(), rows, cols, xs, ys, c).unwrap()
                }
                Some(_) => continue,
            };
            if chunk == Some(700) && rows * ys > 1400 {
                assert!(ds.len() > 1, "{rows}x{cols}: one dispatch for bindings of 700 elements");
            }
            run(&gpu, &ds);
            let got = read(&gpu, &y);
            for (i, g) in got.iter().enumerate() {
                let (r, c) = (i / ys, i % ys);
                if r < rows && c < cols {
                    assert_eq!(g.to_bits(), x[r * xs + c].to_bits(), "{rows}x{cols} ({xs}→{ys}): y[{r},{c}]");
                } else {
                    assert!(g.is_nan(), "{rows}x{cols} ({xs}→{ys}): y[{i}] outside the rows was written");
                }
            }
        }
    }
    // Bad shapes are errors, not panics.
    let t = upload(&gpu, "t", &[0.0; 8]);
    let u = poisoned(&gpu, "u", &[8]);
    assert!(elementwise::copy_rows(&gpu, t.view(), u.view(), 3, 3, 3, 3).is_err());
    assert!(elementwise::copy_rows(&gpu, t.view(), u.view(), 2, 4, 3, 4).is_err());
    assert!(elementwise::copy_rows(&gpu, t.view(), u.view(), 0, 4, 4, 4).is_err());
}

#[test]
fn pack_f16_rounds_every_element_to_nearest_and_packs_two_per_word() {
    // The parameters' f16 copy (`--precision f16`): odd and even lengths, one binding and
    // chunks, values around f16's range edges (overflow to infinity, subnormals, ties), every
    // word written (poisoned output). Bit for bit the host's round-to-nearest-even.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for (n, chunk) in [(1usize, None), (2, None), (777, None), (70_001, None), (70_001, Some(1)), (9_000, Some(4096))] {
        let mut x = rng.normal(n, 3.0);
        // 65519.996 rounds down to 65504, 65520 up to infinity; 1.5 · 2^-24 and 2^-25 are ties
        // among the subnormals (to 2^-23 and to 0); just below 2^-14 rounds up to the smallest
        // normal; ±infinity stays.
        let specials = [
            65504.0,
            65520.0,
            1e6,
            -7e4,
            6e-8,
            3e-8,
            1e-9,
            -0.0,
            1.0 + 1.0 / 2048.0,
            1.0 + 3.0 / 2048.0,
            65519.996,
            1.5 * 2f32.powi(-24),
            -(2f32.powi(-25)),
            2f32.powi(-14) * (1.0 - 2f32.powi(-20)),
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        for (i, v) in specials.iter().enumerate().filter(|(i, _)| *i < n) {
            x[i * 7 % n] = *v;
        }
        let tx = upload(&gpu, "x", &x);
        let words = n.div_ceil(2);
        let ty = poisoned(&gpu, "y", &[words]);
        let ds = match chunk {
            None => elementwise::pack_f16(&gpu, tx.view(), ty.view(), n),
            Some(c) => elementwise::pack_f16_chunked(&gpu, tx.view(), ty.view(), n, c),
        }
        .unwrap();
        run(&gpu, &ds);
        let got: Vec<u32> = ty.read_f32(&gpu).unwrap().iter().map(|w| w.to_bits()).collect();
        let mut padded = x.clone();
        padded.resize(2 * words, 0.0);
        let want: Vec<u32> = f16_pack(&padded).iter().map(|w| w.to_bits()).collect();
        let bad: Vec<_> = (0..words).filter(|&i| got[i] != want[i]).take(5).collect();
        assert!(
            bad.is_empty(),
            "n {n} chunk {chunk:?}: words {bad:?} differ, e.g. {:08x} vs {:08x} (seed {})",
            got[bad[0]],
            want[bad[0]],
            rng.seed
        );
    }
    // Every subnormal and every tie between two of them, bit for bit (−0 keeps its sign).
    let x = f16_subnormal_grid();
    let n = x.len();
    let tx = upload(&gpu, "x", &x);
    let ty = poisoned(&gpu, "y", &[n.div_ceil(2)]);
    run(&gpu, &elementwise::pack_f16(&gpu, tx.view(), ty.view(), n).unwrap());
    let got = f16_unpack(&ty.read_f32(&gpu).unwrap());
    let want = f16_round(&x);
    let bad: Vec<String> = (0..n)
        .filter(|&i| got[i].to_bits() != want[i].to_bits())
        .take(5)
        .map(|i| format!("{:e} packed as {:e}, want {:e}", x[i], got[i], want[i]))
        .collect();
    assert!(bad.is_empty(), "pack_f16 around f16's subnormals:\n{}", bad.join("\n"));
    let t = upload(&gpu, "x", &[0.0; 8]);
    let e = elementwise::pack_f16(&gpu, t.view(), upload(&gpu, "y", &[0.0; 3]).view(), 8).unwrap_err().to_string();
    assert!(e.contains("pack_f16") && e.contains("ceil(n / 2)"), "{e}");
}
