//! Cross-entropy forward and backward against float64: label smoothing α = 0, 0.1, 0.7 with
//! ignored targets, vocabularies 1, 65, 67, 1000 and 50304, logits of ±1e4, all rows ignored,
//! more than 4096 rows (two-pass mean) and more than 65535 workgroups, row chunking, slices of
//! rows (the chunked LM head: the whole batch's bits),
//! determinism, and the CPU backward against finite differences of the CPU forward; each row's
//! scores for `ddl eval` (the target's rank, the likeliest token, its log p, the entropy) against
//! float64 with ties, row widths, slices and chunks.

use super::common::*;
use ddl::gpu::{Tensor, View};
use ddl::kernels::loss;

/// float64 forward on f64 logits: per-row lse, the mean loss over the valid rows, and their
/// count. Targets outside [0, V) are ignored.
fn forward_f64(x: &[f64], y: &[i32], v: usize, alpha: f64) -> (Vec<f64>, f64, usize) {
    let n = y.len();
    let mut lse = vec![0.0; n];
    let (mut sum, mut count) = (0.0, 0);
    for r in 0..n {
        let row = &x[r * v..(r + 1) * v];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        lse[r] = m + row.iter().map(|a| (a - m).exp()).sum::<f64>().ln();
        if y[r] >= 0 && (y[r] as usize) < v {
            let mean = row.iter().sum::<f64>() / v as f64;
            sum += (1.0 - alpha) * (lse[r] - row[y[r] as usize]) + alpha * (lse[r] - mean);
            count += 1;
        }
    }
    let mean = if count > 0 { sum / count as f64 } else { 0.0 };
    (lse, mean, count)
}

/// [`forward_f64`] of f32 logits.
fn forward_ref(x: &[f32], y: &[i32], v: usize, alpha: f64) -> (Vec<f64>, f64, usize) {
    forward_f64(&ddl::testing::f64s(x), y, v, alpha)
}

/// float64 backward of `scale · mean loss`.
fn backward_ref(x: &[f32], y: &[i32], v: usize, alpha: f64, scale: f64) -> Vec<f64> {
    let (lse, _, count) = forward_ref(x, y, v, alpha);
    let mut d = vec![0.0; x.len()];
    for r in 0..y.len() {
        if y[r] < 0 || y[r] as usize >= v {
            continue;
        }
        for c in 0..v {
            let p = (x[r * v + c] as f64 - lse[r]).exp();
            let onehot = if c == y[r] as usize { 1.0 - alpha } else { 0.0 };
            d[r * v + c] = scale * (p - onehot - alpha / v as f64) / count as f64;
        }
    }
    d
}

/// Targets in [0, v) with about a fifth ignored (−1, and a few other out-of-range values).
fn targets(rng: &mut Rng, n: usize, v: usize) -> Vec<i32> {
    let mut y = rng.ints(n, v);
    for t in &mut y {
        match rng.int(0, 20) {
            0..=2 => *t = -1,
            3 => *t = v as i32 + rng.int(0, 3) as i32,
            4 => *t = -7,
            _ => {}
        }
    }
    y
}

struct Run {
    lse: Vec<f32>,
    out: Vec<f32>,
    dlogits: Vec<f32>,
}

fn ce(n: usize, vocab: usize, label_smoothing: f32) -> loss::CeShape {
    loss::CeShape { n, vocab, label_smoothing }
}

fn io<'a>(logits: View<'a>, targets: View<'a>, lse: View<'a>, out: View<'a>) -> loss::CeIo<'a> {
    loss::CeIo { logits, targets, lse, out }
}

/// Forward then backward on the GPU in one submission (the backward reads the valid count
/// from `out` on the GPU), with outputs poisoned first.
fn gpu_ce(gpu: &Gpu, x: &[f32], y: &[i32], v: usize, alpha: f32, scale: f32, chunk: Option<usize>) -> Run {
    let n = y.len();
    let tx = upload(gpu, "logits", x);
    let ty = Tensor::from_i32(gpu, "targets", &[n], y).unwrap();
    let lse = poisoned(gpu, "lse", &[n]);
    let out = poisoned(gpu, "out", &[2]);
    let dl = poisoned(gpu, "dlogits", &[n * v]);
    let c = chunk.unwrap_or(usize::MAX);
    let (s, io) = (ce(n, v, alpha), io(tx.view(), ty.view(), lse.view(), out.view()));
    let mut ds = loss::cross_entropy_forward_chunked(gpu, &s, io, c).unwrap();
    ds.extend(loss::cross_entropy_backward_chunked(gpu, &s, io, dl.view(), scale, c).unwrap());
    run(gpu, &ds);
    Run { lse: read(gpu, &lse), out: read(gpu, &out), dlogits: read(gpu, &dl) }
}

/// Runs forward and backward and checks lse, the mean loss, the count and the gradient, with the
/// adapter's invocations per row and with the full team forced, and one per row where an adapter
/// would choose it (V ≤ CPU_ROW_VOCAB).
fn check(x: &[f32], y: &[i32], v: usize, alpha: f32, scale: f32, seed: u64) -> Run {
    let team = (1usize << (usize::BITS - 1 - v.leading_zeros())).min(256);
    let one = if v <= loss::CPU_ROW_VOCAB { 1 } else { team };
    for tpr in [one, team] {
        with_forms(
            &gpu(),
            |f| f.ce_threads_per_row = Some(tpr),
            |gpu| check_tpr(gpu, x, y, v, alpha, scale, seed, &format!(" tpr={tpr}")),
        );
    }
    check_tpr(&gpu(), x, y, v, alpha, scale, seed, "")
}

#[allow(clippy::too_many_arguments)]
fn check_tpr(gpu: &Gpu, x: &[f32], y: &[i32], v: usize, alpha: f32, scale: f32, seed: u64, tag: &str) -> Run {
    let got = gpu_ce(gpu, x, y, v, alpha, scale, None);
    let name = format!("ce n={} V={v} α={alpha}{tag}", y.len());
    let (lse, mean, count) = forward_ref(x, y, v, alpha as f64);
    assert_close(&format!("{name} lse"), &got.lse, &lse, 1e-5, seed);
    assert_close(&format!("{name} loss"), &got.out[..1], &[mean], 1e-5, seed);
    assert_eq!(got.out[1], count as f32, "{name}: count (seed {seed})");
    let d = backward_ref(x, y, v, alpha as f64, scale as f64);
    assert_close(&format!("{name} dlogits"), &got.dlogits, &d, 1e-4, seed);
    got
}

#[test]
fn forward_and_backward_match_float64_with_label_smoothing_and_ignored_targets() {
    let mut rng = Rng::fresh();
    for (v, n) in [(1, 257), (65, 300), (67, 131), (1000, 37), (67, 1)] {
        for alpha in [0.0, 0.1, 0.7] {
            let x = rng.normal(n * v, 2.0);
            let mut y = targets(&mut rng, n, v);
            if n == 1 {
                y[0] = 0;
            }
            check(&x, &y, v, alpha, 0.75, rng.seed);
        }
    }
}

#[test]
fn logits_of_plus_minus_1e4_are_numerically_stable() {
    let mut rng = Rng::fresh();
    let (n, v) = (61, 67);
    for alpha in [0.0, 0.1] {
        // Spread over ±1e4: the softmax is nearly one-hot.
        let x = rng.uniform(n * v, -1e4, 1e4);
        check(&x, &targets(&mut rng, n, v), v, alpha, 1.0, rng.seed);
        // Shifted by ±1e4 with O(1) spread: a dense softmax whose lse is ~1e4 (renormalised).
        for shift in [1e4f32, -1e4] {
            let x: Vec<f32> = rng.normal(n * v, 2.0).iter().map(|a| a + shift).collect();
            check(&x, &targets(&mut rng, n, v), v, alpha, 1.0, rng.seed);
        }
        // Shifted by 40: below the renormalisation threshold, the saved lse is used as is.
        let x: Vec<f32> = rng.normal(n * v, 2.0).iter().map(|a| a + 40.0).collect();
        check(&x, &targets(&mut rng, n, v), v, alpha, 1.0, rng.seed);
    }
}

#[test]
fn all_rows_ignored_give_loss_0_count_0_and_zero_gradients() {
    let mut rng = Rng::fresh();
    for (n, v) in [(1, 5), (40, 67), (9000, 3)] {
        let x = rng.normal(n * v, 1.0);
        let y: Vec<i32> = (0..n).map(|i| if i % 2 == 0 { -1 } else { -3 }).collect();
        let got = check(&x, &y, v, 0.1, 1.0, rng.seed);
        assert_eq!(got.out, [0.0, 0.0]);
        assert!(got.dlogits.iter().all(|&d| d == 0.0));
    }
}

#[test]
fn the_gpt2_vocabulary_of_50304_matches_float64() {
    let mut rng = Rng::fresh();
    let (n, v) = (5, 50304);
    let x = rng.normal(n * v, 3.0);
    let mut y = targets(&mut rng, n, v);
    y[0] = 17;
    check(&x, &y, v, 0.1, 1.0, rng.seed);
}

#[test]
fn more_than_4096_rows_and_more_than_65535_workgroups_match_float64() {
    let mut rng = Rng::fresh();
    // V = 3 packs 128 rows per workgroup: 9000 rows need three partials of the mean.
    let (n, v) = (9000, 3);
    check(&rng.normal(n * v, 1.0), &targets(&mut rng, n, v), v, 0.1, 1.0, rng.seed);
    // V = 65 with the team of 64 packs 4 rows per workgroup: 65535·4 + 7 rows need a second
    // grid dimension.
    let (n, v) = (65535 * 4 + 7, 65);
    let (x, y) = (rng.normal(n * v, 1.0), targets(&mut rng, n, v));
    with_forms(
        &gpu(),
        |f| f.ce_threads_per_row = Some(64),
        |gpu| check_tpr(gpu, &x, &y, v, 0.0, 1.0, rng.seed, " tpr=64"),
    );
}

#[test]
fn row_chunks_give_the_same_bits_as_one_binding() {
    let mut rng = Rng::fresh();
    // Chunks start at aligned offsets: with V = 67 or 1 that is a multiple of 64 rows on an
    // adapter with 256-byte alignment; any row of V = 50304 = 64·786 starts aligned.
    for (n, v, chunk_rows) in [(300, 67, 128), (7, 50304, 2), (200, 1, 64)] {
        let x = rng.normal(n * v, 2.0);
        let y = targets(&mut rng, n, v);
        let whole = check(&x, &y, v, 0.1, 0.5, rng.seed);
        let gpu = gpu();
        let dummy = Tensor::zeros(&gpu, "d", &[n * v], ddl::gpu::DType::F32).unwrap();
        let dl = Tensor::zeros(&gpu, "o", &[n * v], ddl::gpu::DType::F32).unwrap();
        let d = dummy.view();
        let ds =
            loss::cross_entropy_backward_chunked(&gpu, &ce(n, v, 0.1), io(d, d, d, d), dl.view(), 0.5, chunk_rows * v)
                .unwrap();
        assert!(ds.len() > 1, "n {n} V {v}: {} chunks", ds.len());
        let chunked = gpu_ce(&gpu, &x, &y, v, 0.1, 0.5, Some(chunk_rows * v));
        for (name, a, b) in [
            ("lse", &whole.lse, &chunked.lse),
            ("out", &whole.out, &chunked.out),
            ("dlogits", &whole.dlogits, &chunked.dlogits),
        ] {
            let same = a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same, "V {v}: chunked {name} differs (seed {})", rng.seed);
        }
    }
}

#[test]
fn the_gradient_written_over_the_logits_is_the_same_bits() {
    // Training programs write the logits' gradient over the logits (variant `inplace`): the same
    // values as the gradient in its own buffer, in one binding and in row chunks, with a
    // renormalised row (|lse| ≥ 64: a second pass over the row before any write), ignored
    // targets, and the GPT-2 vocabulary.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    // (Chunks start at aligned offsets: 64 rows of V = 67, 2 rows of V = 50304.)
    for (n, v, chunk) in [(37, 65, None), (6, 50304, Some(2 * 50304)), (150, 67, Some(64 * 67))] {
        let mut x = rng.normal(n * v, 2.0);
        x[..v].iter_mut().for_each(|e| *e += 100.0);
        let y = targets(&mut rng, n, v);
        let split = gpu_ce(&gpu, &x, &y, v, 0.1, 0.5, chunk);
        let tx = upload(&gpu, "logits", &x);
        let ty = Tensor::from_i32(&gpu, "targets", &[n], &y).unwrap();
        let (lse, out) = (poisoned(&gpu, "lse", &[n]), poisoned(&gpu, "out", &[2]));
        let c = chunk.unwrap_or(usize::MAX);
        let (s, io) = (ce(n, v, 0.1), io(tx.view(), ty.view(), lse.view(), out.view()));
        let mut ds = loss::cross_entropy_forward_chunked(&gpu, &s, io, c).unwrap();
        let bw = loss::cross_entropy_backward_chunked(&gpu, &s, io, tx.view(), 0.5, c).unwrap();
        assert!(bw.iter().all(|d| d.kernel.name.contains("inplace")), "{:?}", bw[0].kernel.name);
        ds.extend(bw);
        run(&gpu, &ds);
        let got = read(&gpu, &tx);
        let same = got.iter().zip(&split.dlogits).all(|(p, q)| p.to_bits() == q.to_bits());
        assert!(same && got.len() == split.dlogits.len(), "n {n} V {v}: in place differs (seed {})", rng.seed);
        assert!(split.lse[0] >= 64.0, "row 0 is not renormalised: lse {}", split.lse[0]);
    }
}

#[test]
fn slices_of_rows_give_the_same_bits_as_the_whole_batch() {
    // The chunked LM head: the count first, then per slice of rows its forward and its backward
    // written over its logits (before the next slice's logits would replace them), the mean
    // last. Every row's lse and gradient and the mean and count are the whole batch's bits;
    // slices of odd sizes with a remainder, a renormalised row, ignored targets, the GPT-2
    // vocabulary (whose slices bind in chunks of 2 rows here), and a slice of every row.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for (n, v, slice, max_chunk) in
        [(37, 65, 5, usize::MAX), (150, 67, 64, usize::MAX), (9, 50304, 4, 2 * 50304), (23, 67, 23, usize::MAX)]
    {
        let mut x = rng.normal(n * v, 2.0);
        x[v..2 * v].iter_mut().for_each(|e| *e += 100.0);
        let y = targets(&mut rng, n, v);
        let whole = gpu_ce(&gpu, &x, &y, v, 0.1, 0.5, None);
        let ty = Tensor::from_i32(&gpu, "targets", &[n], &y).unwrap();
        let (lse, out) = (poisoned(&gpu, "lse", &[n]), poisoned(&gpu, "out", &[2]));
        let slices_of = loss::RowSlices::new(&gpu, &ce(n, v, 0.1)).unwrap();
        let mut ds = slices_of.count(&gpu, ty.view(), out.view()).unwrap();
        let mut slices = Vec::new();
        for r0 in (0..n).step_by(slice) {
            let rows = slice.min(n - r0);
            let t = upload(&gpu, "slice", &x[r0 * v..(r0 + rows) * v]);
            let range = r0..r0 + rows;
            let fwd = slices_of.forward_rows_chunked(&gpu, t.view(), ty.view(), lse.view(), range.clone(), max_chunk);
            ds.extend(fwd.unwrap());
            let io = io(t.view(), ty.view(), lse.view(), out.view());
            ds.extend(slices_of.backward_rows(&gpu, io, t.view(), range, 0.5).unwrap());
            slices.push(t);
        }
        ds.extend(slices_of.finish(&gpu, ty.view(), out.view()).unwrap());
        run(&gpu, &ds);
        let dl: Vec<f32> = slices.iter().flat_map(|t| read(&gpu, t)).collect();
        for (name, a, b) in [
            ("lse", &whole.lse, &read(&gpu, &lse)),
            ("out", &whole.out, &read(&gpu, &out)),
            ("dlogits", &whole.dlogits, &dl),
        ] {
            let same = a.len() == b.len() && a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same, "n {n} V {v} slices of {slice}: {name} differs (seed {})", rng.seed);
        }
        assert!(whole.lse[1] >= 64.0, "row 1 is not renormalised: lse {}", whole.lse[1]);
    }
    // The count alone: (0, valid targets) over poisoned outputs.
    let y = [3, -1, 0, 7, 2];
    let ty = Tensor::from_i32(&gpu, "targets", &[5], &y).unwrap();
    let out = poisoned(&gpu, "out", &[2]);
    let slices_of = loss::RowSlices::new(&gpu, &ce(5, 4, 0.0)).unwrap();
    run(&gpu, &slices_of.count(&gpu, ty.view(), out.view()).unwrap());
    assert_eq!(read(&gpu, &out), [0.0, 3.0]);
    // Rows outside the loss, or a slice whose logits are too short, are refused.
    let t = upload(&gpu, "t", &[0.0; 8]);
    let lse = upload(&gpu, "lse", &[0.0; 5]);
    let e = slices_of.forward_rows(&gpu, t.view(), ty.view(), lse.view(), 4..6).unwrap_err();
    assert!(e.to_string().contains("rows 4..6 outside the loss's 5 rows"), "{e}");
    let e = slices_of.forward_rows(&gpu, t.view(), ty.view(), lse.view(), 0..3).unwrap_err();
    assert!(e.to_string().contains("'logits' needs 12 elements"), "{e}");
    let io = io(t.view(), ty.view(), lse.view(), out.view());
    let e = slices_of.backward_rows(&gpu, io, t.view(), 0..0, 1.0).unwrap_err();
    assert!(e.to_string().contains("outside"), "{e}");
}

/// float64 scores of a row as `RowSlices::with_ranks` gives them: (rank of the target: 1 + how
/// many logits exceed its own or equal it at a smaller index, so that rank 1 is the likeliest
/// token; the vocabulary size for a NaN logit; 0 when ignored; the likeliest token, the first
/// among ties; its log p; the entropy in nats).
fn scores_f64(x: &[f32], y: &[i32], v: usize) -> Vec<(f32, f32, f64, f64)> {
    (0..y.len())
        .map(|r| {
            let row = &x[r * v..(r + 1) * v];
            let m = row.iter().fold(f64::NEG_INFINITY, |m, &a| m.max(a as f64));
            let lse = m + row.iter().map(|&a| (a as f64 - m).exp()).sum::<f64>().ln();
            let rank = match y[r] {
                t if t >= 0 && (t as usize) < v && row[t as usize].is_nan() => v,
                t if t >= 0 && (t as usize) < v => {
                    let (t, own) = (t as usize, row[t as usize]);
                    1 + row.iter().enumerate().filter(|&(c, &a)| a > own || (a == own && c < t)).count()
                }
                _ => 0,
            };
            let top = (0..v).fold(0, |b, c| if row[c] > row[b] { c } else { b });
            let h: f64 = row.iter().map(|&a| (a as f64 - lse).exp() * (lse - a as f64)).sum();
            (rank as f32, top as f32, row[top] as f64 - lse, h)
        })
        .collect()
}

#[test]
fn row_scores_match_float64_with_ties_row_widths_slices_and_chunks() {
    // What `ddl eval` reads per token: ranks and likeliest tokens exactly (rows of small integer
    // logits tie often, within and across the invocations of a row; a row whose maximum repeats;
    // a renormalised row of +100), the log p and entropy to 1e-5 of float64; ignored targets
    // rank 0; the outputs poisoned first; the forward's own results unchanged by the scoring.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for (n, v, slice, max_chunk) in [
        (9, 1, 9, usize::MAX),
        (300, 65, 300, usize::MAX),
        (131, 67, 17, usize::MAX),
        (37, 1000, 37, usize::MAX),
        (5, 50304, 3, 2 * 50304),
    ] {
        let mut x = rng.normal(n * v, 2.0);
        for r in (0..n).filter(|r| r % 3 == 1) {
            x[r * v..(r + 1) * v].iter_mut().for_each(|e| *e = e.round().clamp(-2.0, 2.0));
        }
        if n > 2 && v > 3 {
            x[2 * v..3 * v].iter_mut().for_each(|e| *e += 100.0);
            let top = x[..v].iter().cloned().fold(f32::MIN, f32::max) + 1.0;
            (x[0], x[v - 1], x[v / 2]) = (top - 1.0, top, top);
        }
        let y = targets(&mut rng, n, v);
        let want = scores_f64(&x, &y, v);
        let team = (1usize << (usize::BITS - 1 - v.leading_zeros())).min(256);
        for tpr in [None, Some(1), Some(team)] {
            let name = format!("scores n={n} V={v} slices of {slice} tpr={tpr:?} (seed {})", rng.seed);
            with_forms(
                &gpu,
                |f| f.ce_threads_per_row = tpr,
                |gpu| {
                    let ty = Tensor::from_i32(gpu, "targets", &[n], &y).unwrap();
                    let lse = poisoned(gpu, "lse", &[n]);
                    let ce = loss::RowSlices::with_ranks(gpu, &ce(n, v, 0.0)).unwrap();
                    ddl::kernels::poison(gpu, ce.ranks().unwrap()).unwrap();
                    let mut ds = Vec::new();
                    let mut keep = Vec::new();
                    for r0 in (0..n).step_by(slice) {
                        let rows = slice.min(n - r0);
                        let t = upload(gpu, "slice", &x[r0 * v..(r0 + rows) * v]);
                        let range = r0..r0 + rows;
                        ds.extend(
                            ce.forward_rows_chunked(gpu, t.view(), ty.view(), lse.view(), range, max_chunk).unwrap(),
                        );
                        keep.push(t);
                    }
                    run(gpu, &ds);
                    let got = read(gpu, ce.ranks().unwrap());
                    for (r, w) in want.iter().enumerate() {
                        let g = &got[4 * r..4 * r + 4];
                        assert_eq!((g[0], g[1]), (w.0, w.1), "{name}: row {r}'s rank and likeliest token");
                    }
                    let logp: Vec<f32> = (0..n).map(|r| got[4 * r + 2]).collect();
                    let h: Vec<f32> = (0..n).map(|r| got[4 * r + 3]).collect();
                    assert_close(
                        &format!("{name} log p"),
                        &logp,
                        &want.iter().map(|w| w.2).collect::<Vec<_>>(),
                        1e-5,
                        rng.seed,
                    );
                    assert_close(
                        &format!("{name} entropy"),
                        &h,
                        &want.iter().map(|w| w.3).collect::<Vec<_>>(),
                        1e-5,
                        rng.seed,
                    );
                    // (The losses beside them are the unscored forward's.)
                    let (lse_want, ..) = forward_ref(&x, &y, v, 0.0);
                    assert_close(&format!("{name} lse"), &read(gpu, &lse), &lse_want, 1e-5, rng.seed);
                },
            );
        }
    }
    // Without with_ranks there are none.
    assert!(loss::RowSlices::new(&gpu, &ce(3, 5, 0.0)).unwrap().ranks().is_none());
}

/// Ties and NaN: a row of equal logits ranks its tokens in the likeliest token's order (rank 1
/// only for the first, which is the likeliest: a collapsed model's output is not a hit for every
/// target), and a NaN logit of the target ranks last (it compared false with everything: rank 1,
/// a hit). Top-1 accuracy counts rank 1.
#[test]
fn ties_rank_in_the_likeliest_tokens_order_and_a_nan_target_ranks_last() {
    let gpu = gpu();
    let v = 9;
    let mut x = vec![0.5f32; 5 * v];
    x[v..2 * v].iter_mut().for_each(|e| *e = f32::NAN);
    x[2 * v + 4] = f32::NAN;
    x[4 * v + 2] = 3.0;
    x[4 * v + 6] = 3.0;
    let y = [5, 3, 4, 0, 6];
    let want = scores_f64(&x, &y, v);
    assert_eq!(want.iter().map(|w| w.0).collect::<Vec<_>>(), [6.0, 9.0, 9.0, 1.0, 2.0], "the reference");
    for tpr in [Some(1), Some(8)] {
        with_forms(
            &gpu,
            |f| f.ce_threads_per_row = tpr,
            |gpu| {
                let ty = Tensor::from_i32(gpu, "targets", &[5], &y).unwrap();
                let lse = poisoned(gpu, "lse", &[5]);
                let ce = loss::RowSlices::with_ranks(gpu, &ce(5, v, 0.0)).unwrap();
                ddl::kernels::poison(gpu, ce.ranks().unwrap()).unwrap();
                let t = upload(gpu, "logits", &x);
                let ds = ce.forward_rows_chunked(gpu, t.view(), ty.view(), lse.view(), 0..5, usize::MAX).unwrap();
                run(gpu, &ds);
                let got = read(gpu, ce.ranks().unwrap());
                let ranks: Vec<f32> = (0..5).map(|r| got[4 * r]).collect();
                assert_eq!(ranks, [6.0, 9.0, 9.0, 1.0, 2.0], "tpr {tpr:?}");
                for r in [0, 3, 4] {
                    assert_eq!(got[4 * r + 1], want[r].1, "tpr {tpr:?}: row {r}'s likeliest token");
                }
            },
        );
    }
}

#[test]
fn a_forced_row_width_stays_within_safe_bounds() {
    // One invocation per row is refused where a row would be one invocation's loop of more than
    // CPU_ROW_VOCAB logits (llvmpipe cuts loops past 65 535 iterations per invocation).
    let gpu = gpu();
    assert_eq!(with_forms(&gpu, |f| f.ce_threads_per_row = Some(1), |gpu| loss::threads_per_row(gpu, 50304)), 16);
    assert_eq!(with_forms(&gpu, |f| f.ce_threads_per_row = Some(1), |gpu| loss::threads_per_row(gpu, 4096)), 1);
    assert_eq!(with_forms(&gpu, |f| f.ce_threads_per_row = Some(256), |gpu| loss::threads_per_row(gpu, 65)), 64);
    assert_eq!(with_forms(&gpu, |f| f.ce_threads_per_row = Some(8), |gpu| loss::threads_per_row(gpu, 65)), 8);
}

#[test]
fn results_are_bit_identical_run_to_run() {
    let mut rng = Rng::fresh();
    let (n, v) = (333, 1000);
    let x = rng.normal(n * v, 2.0);
    let y = targets(&mut rng, n, v);
    let a = gpu_ce(&gpu(), &x, &y, v, 0.1, 1.0, None);
    let b = gpu_ce(&gpu(), &x, &y, v, 0.1, 1.0, None);
    for (name, p, q) in [("lse", &a.lse, &b.lse), ("out", &a.out, &b.out), ("dlogits", &a.dlogits, &b.dlogits)] {
        let same = p.iter().zip(q).all(|(s, t)| s.to_bits() == t.to_bits());
        assert!(same, "{name} differs between runs (seed {})", rng.seed);
    }
}

#[test]
fn reference_backward_matches_finite_differences_of_reference_forward() {
    let mut rng = Rng::fresh();
    let (n, v) = (9, 7);
    for alpha in [0.0, 0.1, 0.7] {
        let x32 = rng.normal(n * v, 1.5);
        let y = targets(&mut rng, n, v);
        let scale = 0.8;
        let grad = backward_ref(&x32, &y, v, alpha, scale);
        let x: Vec<f64> = x32.iter().map(|&a| a as f64).collect();
        let mut f = |xp: &[f64]| forward_f64(xp, &y, v, alpha).1 * scale;
        // Central differences with h = 1e-6 carry ~1e-10 of rounding noise, ~1e-6 relative on
        // the smallest gradient elements: a wrong formula is off by far more than 1e-5.
        let worst = fd_check(&mut f, &x, &grad, 60, &mut rng);
        assert!(worst < 1e-5, "α {alpha}: worst relative error {worst:e} (seed {})", rng.seed);
    }
}

#[test]
fn shape_errors_are_reported_not_panicked() {
    let gpu = gpu();
    let x = upload(&gpu, "x", &[0.0; 20]);
    let y = Tensor::from_i32(&gpu, "y", &[4], &[0; 4]).unwrap();
    let s = upload(&gpu, "s", &[0.0; 4]);
    let (xv, yv, sv) = (x.view(), y.view(), s.view());
    let e = loss::cross_entropy_forward(&gpu, &ce(4, 6, 0.0), io(xv, yv, sv, sv)).unwrap_err();
    assert!(e.to_string().contains("'logits' needs 24 elements"), "{e}");
    let e = loss::cross_entropy_forward(&gpu, &ce(5, 4, 0.0), io(xv, yv, sv, sv)).unwrap_err();
    assert!(e.to_string().contains("'targets' needs 5 elements"), "{e}");
    let e = loss::cross_entropy_forward(&gpu, &ce(4, 0, 0.0), io(xv, yv, sv, sv)).unwrap_err();
    assert!(e.to_string().contains("vocab"), "{e}");
    let e = loss::cross_entropy_backward(&gpu, &ce(4, 5, 0.0), io(xv, yv, sv, sv), sv, 1.0).unwrap_err();
    assert!(e.to_string().contains("'dlogits' needs 20 elements"), "{e}");
    let d = upload(&gpu, "d", &[0.0; 20]);
    // The gradient over the logits themselves is allowed (`inplace`); elsewhere in their buffer,
    // or over another input, it is not.
    assert!(loss::cross_entropy_backward(&gpu, &ce(4, 5, 0.0), io(xv, yv, sv, sv), xv, 1.0).is_ok());
    let big = upload(&gpu, "big", &[0.0; 84]);
    let (b0, b64) = (big.view().sub(0, 20), big.view().sub(64, 20));
    let e = loss::cross_entropy_backward(&gpu, &ce(4, 5, 0.0), io(b0, yv, sv, sv), b64, 1.0).unwrap_err();
    assert!(e.to_string().contains("same buffer"), "{e}");
    let s2 = upload(&gpu, "s2", &[0.0; 20]);
    let e = loss::cross_entropy_backward(&gpu, &ce(4, 5, 0.0), io(xv, yv, s2.view(), sv), s2.view(), 1.0).unwrap_err();
    assert!(e.to_string().contains("same buffer"), "{e}");
    let e = loss::cross_entropy_forward(&gpu, &ce(4, 5, 0.0), io(d.view(), yv, d.view(), sv)).unwrap_err();
    assert!(e.to_string().contains("same buffer"), "{e}");
}
