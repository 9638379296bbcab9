//! Token embedding against float64 and against the exact f32 sum in increasing position:
//! forward gather (out-of-range ids give zero rows), backward scatter-add through the host index
//! (duplicates, one id everywhere, every id once, rows outside the batch untouched), replaying
//! one bound dispatch with a new index, determinism, index errors, shape errors, and finite
//! differences of the reference backward.

use super::common::*;
use ddl::gpu::{DType, Tensor};
use ddl::kernels::embedding;

fn f64v(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

fn ref_forward(tokens: &[i32], table: &[f64], d: usize, vocab: usize) -> Vec<f64> {
    let mut out = vec![0.0; tokens.len() * d];
    for (r, &t) in tokens.iter().enumerate() {
        if t >= 0 && (t as usize) < vocab {
            let t = t as usize;
            out[r * d..(r + 1) * d].copy_from_slice(&table[t * d..(t + 1) * d]);
        }
    }
    out
}

/// dtable contribution in float64.
fn ref_backward(tokens: &[i32], dout: &[f64], d: usize, vocab: usize) -> Vec<f64> {
    let mut g = vec![0.0; vocab * d];
    for (r, &t) in tokens.iter().enumerate() {
        for c in 0..d {
            g[t as usize * d + c] += dout[r * d + c];
        }
    }
    g
}

/// The exact f32 result the kernel promises: per row, 0 + Σ in increasing r, then added once.
fn exact_f32(tokens: &[i32], dout: &[f32], dtable0: &[f32], d: usize) -> Vec<f32> {
    let mut want = dtable0.to_vec();
    let vocab = dtable0.len() / d;
    for v in 0..vocab {
        if !tokens.contains(&(v as i32)) {
            continue;
        }
        for c in 0..d {
            let mut s = 0.0f32;
            for (r, &t) in tokens.iter().enumerate() {
                if t as usize == v {
                    s += dout[r * d + c];
                }
            }
            want[v * d + c] += s;
        }
    }
    want
}

fn index_tensor(gpu: &ddl::gpu::Gpu, tokens: &[i32], vocab: usize) -> Tensor {
    let idx = embedding::build_index(tokens, vocab).unwrap();
    assert_eq!(idx.len(), embedding::index_len(tokens.len()));
    Tensor::from_u32(gpu, "index", &[idx.len()], &idx).unwrap()
}

/// `rng` is the test's one generator (it also drew `tokens`): its seed replays the whole case.
fn check_forward(rng: &mut Rng, tokens: &[i32], d: usize, vocab: usize) {
    let gpu = gpu();
    let n = tokens.len();
    let table = rng.normal(vocab * d, 1.0);
    let tt = Tensor::from_i32(&gpu, "tokens", &[n], tokens).unwrap();
    let tab = upload(&gpu, "table", &table);
    let out = poisoned(&gpu, "out", &[n * d]);
    run(&gpu, &embedding::forward(&gpu, tt.view(), tab.view(), out.view(), n, d, vocab).unwrap());
    let got = read(&gpu, &out);
    let want = ref_forward(tokens, &f64v(&table), d, vocab);
    let name = format!("embedding forward n={n} d={d} vocab={vocab}");
    assert_close(&name, &got, &want, 1e-5, rng.seed);
    // A gather is exact.
    assert!(got.iter().zip(&want).all(|(g, w)| *g as f64 == *w), "{name}: not an exact copy (seed {})", rng.seed);
}

fn check_backward(rng: &mut Rng, tokens: &[i32], d: usize, vocab: usize) {
    let gpu = gpu();
    let n = tokens.len();
    let dout = rng.normal(n * d, 1.0);
    let dtable0 = rng.normal(vocab * d, 1.0);
    let idx = index_tensor(&gpu, tokens, vocab);
    let td = upload(&gpu, "dout", &dout);
    let dtable = upload(&gpu, "dtable", &dtable0);
    run(&gpu, &embedding::backward(&gpu, idx.view(), td.view(), dtable.view(), n, d, vocab).unwrap());
    let got = read(&gpu, &dtable);
    let mut want = ref_backward(tokens, &f64v(&dout), d, vocab);
    for (w, a) in want.iter_mut().zip(&dtable0) {
        *w += *a as f64;
    }
    let name = format!("embedding backward n={n} d={d} vocab={vocab}");
    assert_close(&name, &got, &want, 1e-4, rng.seed);
    // Summed in increasing position, then added once: bit-exact with the f32 sequential sum;
    // rows of ids not in the batch keep their bits.
    let exact = exact_f32(tokens, &dout, &dtable0, d);
    for (i, (g, w)) in got.iter().zip(&exact).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{name}: dtable[{}, {}] = {g:e}, the in-order f32 sum is {w:e} (seed {})",
            i / d,
            i % d,
            rng.seed
        );
    }
}

#[test]
fn embedding_forward_matches_float64_for_odd_widths() {
    let mut rng = Rng::fresh();
    for &(n, d, vocab) in &[(1, 1, 1), (7, 85, 67), (300, 33, 67), (300, 1, 67), (5, 384, 3), (2048, 7, 67)] {
        let tokens = rng.ints(n, vocab);
        check_forward(&mut rng, &tokens, d, vocab);
    }
}

#[test]
fn embedding_forward_writes_zero_rows_for_out_of_range_ids() {
    let vocab = 67;
    let tokens = [3, -1, 66, 67, i32::MAX, i32::MIN, 0, 1000];
    let mut rng = Rng::fresh();
    for d in [1, 33, 85] {
        check_forward(&mut rng, &tokens, d, vocab);
    }
}

#[test]
fn embedding_backward_matches_float64_and_sums_in_increasing_position() {
    let mut rng = Rng::fresh();
    for &(n, d, vocab) in &[(1, 1, 1), (7, 85, 67), (300, 33, 67), (300, 1, 67), (7, 384, 3), (3000, 5, 67)] {
        let tokens = rng.ints(n, vocab);
        check_backward(&mut rng, &tokens, d, vocab);
    }
}

#[test]
fn embedding_backward_handles_one_id_everywhere_and_every_id_once() {
    let vocab = 67;
    let mut rng = Rng::fresh();
    check_backward(&mut rng, &[5; 300], 33, vocab);
    check_backward(&mut rng, &[66; 7], 85, vocab);
    let mut every: Vec<i32> = (0..vocab as i32).rev().collect();
    every.swap(3, 40);
    check_backward(&mut rng, &every, 33, vocab);
    // More tokens than ids and fewer tokens than ids (slots = min(n, vocab)).
    let tokens = rng.ints(5, 1000);
    check_backward(&mut rng, &tokens, 9, 1000);
}

#[test]
fn embedding_backward_dispatch_replays_with_a_new_index_each_step() {
    // Bound once; the caller re-uploads the index each step (the grid does not depend on it).
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let (n, d, vocab) = (300, 33, 67);
    let idx = Tensor::zeros(&gpu, "index", &[embedding::index_len(n)], DType::U32).unwrap();
    let dout = rng.normal(n * d, 1.0);
    let td = upload(&gpu, "dout", &dout);
    let dtable = Tensor::zeros(&gpu, "dtable", &[vocab * d], DType::F32).unwrap();
    let ds = embedding::backward(&gpu, idx.view(), td.view(), dtable.view(), n, d, vocab).unwrap();
    let mut want = vec![0.0f64; vocab * d];
    for step in 0..3 {
        let tokens = if step == 1 { vec![7; n] } else { rng.ints(n, vocab) };
        let index = embedding::build_index(&tokens, vocab).unwrap();
        idx.write_i32(&gpu, bytemuck::cast_slice(&index)).unwrap();
        run(&gpu, &ds);
        for (w, g) in want.iter_mut().zip(ref_backward(&tokens, &f64v(&dout), d, vocab)) {
            *w += g;
        }
        assert_close(&format!("embedding backward step {step}"), &read(&gpu, &dtable), &want, 1e-4, rng.seed);
    }
    let other = embedding::backward(&gpu, idx.view(), td.view(), dtable.view(), n, d, vocab).unwrap();
    assert_eq!(ds[0].workgroups, other[0].workgroups);
}

#[test]
fn embedding_index_layout_is_stable_sorted_positions_with_unique_ids_and_starts() {
    let tokens = [3, 1, 3, 0, 1, 3];
    let idx = embedding::build_index(&tokens, 5).unwrap();
    let n = tokens.len();
    assert_eq!(idx.len(), 3 * n + 2);
    assert_eq!(idx[0], 3, "unique ids");
    assert_eq!(&idx[1..4], &[0, 1, 3], "ids");
    assert_eq!(&idx[1 + n..1 + n + 4], &[0, 1, 3, 6], "starts");
    assert_eq!(&idx[2 + 2 * n..], &[3, 1, 4, 0, 2, 5], "positions");
}

#[test]
fn embedding_index_rejects_ids_outside_the_vocabulary() {
    let e = embedding::build_index(&[1, 2, 67, 0], 67).unwrap_err();
    let m = e.to_string();
    assert!(m.contains("token id 67 at position 2") && m.contains("[0, 67)"), "{m}");
    let e = embedding::build_index(&[-1], 67).unwrap_err();
    assert!(e.to_string().contains("token id -1 at position 0"), "{e}");
}

#[test]
fn embedding_backward_reference_matches_finite_differences() {
    let mut rng = Rng::fresh();
    let (n, d, vocab) = (9, 4, 5);
    let tokens = rng.ints(n, vocab);
    let table = f64v(&rng.normal(vocab * d, 1.0));
    let w = f64v(&rng.normal(n * d, 1.0));
    let grad = ref_backward(&tokens, &w, d, vocab);
    let err = fd_check(
        &mut |t| ref_forward(&tokens, t, d, vocab).iter().zip(&w).map(|(a, b)| a * b).sum(),
        &table,
        &grad,
        30,
        &mut rng,
    );
    assert!(err < 1e-6, "fd {err:e} (seed {})", rng.seed);
}

#[test]
fn embedding_is_bit_identical_run_after_run() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let (n, d, vocab) = (2048, 33, 67);
    let tokens = rng.ints(n, vocab);
    let table = rng.normal(vocab * d, 1.0);
    let dout = rng.normal(n * d, 1.0);
    let tt = Tensor::from_i32(&gpu, "tokens", &[n], &tokens).unwrap();
    let idx = index_tensor(&gpu, &tokens, vocab);
    let (tab, td) = (upload(&gpu, "table", &table), upload(&gpu, "dout", &dout));
    let mut outs = Vec::new();
    for _ in 0..2 {
        let out = poisoned(&gpu, "out", &[n * d]);
        let dtable = upload(&gpu, "dtable", &table);
        let mut ds = embedding::forward(&gpu, tt.view(), tab.view(), out.view(), n, d, vocab).unwrap();
        ds.extend(embedding::backward(&gpu, idx.view(), td.view(), dtable.view(), n, d, vocab).unwrap());
        run(&gpu, &ds);
        let bits = |t| read(&gpu, t).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        outs.push((bits(&out), bits(&dtable)));
    }
    assert!(outs[0] == outs[1], "two runs differ (seed {})", rng.seed);
}

#[test]
fn embedding_shape_errors_are_reported_not_panicked() {
    let gpu = gpu();
    let toks = Tensor::from_i32(&gpu, "tokens", &[4], &[0, 1, 2, 3]).unwrap();
    let f = upload(&gpu, "f", &[0.0; 64]);
    let e = embedding::forward(&gpu, toks.view(), f.view(), f.view(), 4, 8, 10).unwrap_err();
    assert!(e.to_string().contains("'table' needs 80 elements, the view has 64"), "{e}");
    let e = embedding::forward(&gpu, toks.view(), f.view(), f.view(), 5, 2, 10).unwrap_err();
    assert!(e.to_string().contains("'tokens' needs 5 elements"), "{e}");
    let e = embedding::backward(&gpu, toks.view(), f.view(), f.view(), 4, 2, 10).unwrap_err();
    assert!(e.to_string().contains("'index' needs 14 elements, the view has 4"), "{e}");
    let e = embedding::forward(&gpu, toks.view(), f.view(), f.view(), 0, 2, 10).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
}

/// Forward and backward with the table bound in chunks of at most `max_chunk` elements, against
/// float64 and bit for bit against what the unchunked dispatches promise (an exact gather, the
/// in-order f32 sum); returns how many dispatches (chunks) each used.
fn check_chunked(tokens: &[i32], d: usize, vocab: usize, max_chunk: usize) -> usize {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let n = tokens.len();
    let name = format!("chunked embedding n={n} d={d} vocab={vocab} chunk={max_chunk}");
    let table = rng.normal(vocab * d, 1.0);
    let tt = Tensor::from_i32(&gpu, "tokens", &[n], tokens).unwrap();
    let tab = upload(&gpu, "table", &table);
    let out = poisoned(&gpu, "out", &[n * d]);
    let fwd = embedding::forward_chunked(&gpu, tt.view(), tab.view(), out.view(), n, d, vocab, max_chunk).unwrap();
    run(&gpu, &fwd);
    let got = read(&gpu, &out);
    let want = ref_forward(tokens, &f64v(&table), d, vocab);
    assert_close(&format!("{name} forward"), &got, &want, 1e-5, rng.seed);
    assert!(
        got.iter().zip(&want).all(|(g, w)| *g as f64 == *w),
        "{name}: forward not an exact copy (seed {})",
        rng.seed
    );

    // Backward only over valid ids (the index rejects the others).
    let valid: Vec<i32> = tokens.iter().map(|&t| if t >= 0 && (t as usize) < vocab { t } else { 0 }).collect();
    let dout = rng.normal(n * d, 1.0);
    let dtable0 = rng.normal(vocab * d, 1.0);
    let idx = index_tensor(&gpu, &valid, vocab);
    let td = upload(&gpu, "dout", &dout);
    let dtable = upload(&gpu, "dtable", &dtable0);
    let bwd = embedding::backward_chunked(&gpu, idx.view(), td.view(), dtable.view(), n, d, vocab, max_chunk).unwrap();
    assert_eq!(bwd.len(), fwd.len(), "{name}: forward and backward chunk the table alike");
    run(&gpu, &bwd);
    let got = read(&gpu, &dtable);
    let mut want = ref_backward(&valid, &f64v(&dout), d, vocab);
    for (w, a) in want.iter_mut().zip(&dtable0) {
        *w += *a as f64;
    }
    assert_close(&format!("{name} backward"), &got, &want, 1e-4, rng.seed);
    let exact = exact_f32(&valid, &dout, &dtable0, d);
    for (i, (g, w)) in got.iter().zip(&exact).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{name}: dtable[{}, {}] = {g:e}, the in-order f32 sum is {w:e} (seed {})",
            i / d,
            i % d,
            rng.seed
        );
    }
    fwd.len()
}

#[test]
fn embedding_chunked_table_matches_float64_and_the_unchunked_bits() {
    let mut rng = Rng::fresh();
    // vocab 1000 × d 37: 37 is odd, so chunks start at multiples of `align` rows; a chunk of a
    // few rows gives hundreds of dispatches, ids at every chunk boundary included.
    let (d, vocab) = (37, 1000);
    let align = (gpu().limits.min_storage_buffer_offset_alignment / 4) as usize;
    for rows in [1, 3] {
        let max_chunk = rows * align * d + d - 1; // not a whole number of rows
        let mut tokens = rng.ints(500, vocab);
        // Ids on both sides of every chunk boundary, the first and last ids, and repeats.
        for v0 in (0..vocab).step_by(rows * align) {
            tokens.extend([v0 as i32, v0.saturating_sub(1) as i32, (v0 + 1).min(vocab - 1) as i32, v0 as i32]);
        }
        tokens.extend([0, vocab as i32 - 1, vocab as i32 - 1]);
        let chunks = check_chunked(&tokens, d, vocab, max_chunk);
        assert_eq!(chunks, vocab.div_ceil(rows * align), "chunks for {rows}·{align} rows");
    }
    // Small batches (most chunks see no id), d = 1, an aligned width, one chunk of the whole table.
    check_chunked(&rng.ints(5, vocab), 9, vocab, 100);
    check_chunked(&rng.ints(300, 67), 1, 67, 16);
    check_chunked(&rng.ints(300, 67), 64, 67, 64 * 5);
    assert_eq!(check_chunked(&rng.ints(30, 67), 33, 67, 67 * 33), 1);
}

#[test]
fn embedding_chunked_forward_writes_zero_rows_for_out_of_range_ids_once() {
    // Ids outside [0, vocab) belong to no chunk: the first chunk writes their zero rows.
    let tokens = [3, -1, 66, 67, i32::MAX, i32::MIN, 0, 1000, 40];
    for d in [1, 33, 85] {
        assert!(check_chunked(&tokens, d, 67, 8 * d) > 1);
    }
}

#[test]
fn embedding_chunked_backward_replays_with_a_new_index_and_is_bit_identical() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let (n, d, vocab, max_chunk) = (300, 33, 67, 16 * 33);
    let dout = upload(&gpu, "dout", &rng.normal(n * d, 1.0));
    let idx = Tensor::zeros(&gpu, "index", &[embedding::index_len(n)], DType::U32).unwrap();
    let chunked = Tensor::zeros(&gpu, "dtable.chunked", &[vocab * d], DType::F32).unwrap();
    let whole = Tensor::zeros(&gpu, "dtable.whole", &[vocab * d], DType::F32).unwrap();
    let ds =
        embedding::backward_chunked(&gpu, idx.view(), dout.view(), chunked.view(), n, d, vocab, max_chunk).unwrap();
    let one = embedding::backward(&gpu, idx.view(), dout.view(), whole.view(), n, d, vocab).unwrap();
    assert!(ds.len() > 1 && one.len() == 1, "{} chunks, {} unchunked", ds.len(), one.len());
    for step in 0..3 {
        let tokens = if step == 1 { vec![66; n] } else { rng.ints(n, vocab) };
        idx.write_u32(&gpu, &embedding::build_index(&tokens, vocab).unwrap()).unwrap();
        run(&gpu, &ds);
        run(&gpu, &one);
        let bits = |t| read(&gpu, t).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert!(bits(&chunked) == bits(&whole), "step {step}: chunked and unchunked differ (seed {})", rng.seed);
    }
}

#[test]
fn embedding_chunk_smaller_than_an_aligned_row_group_is_an_error() {
    let gpu = gpu();
    let toks = Tensor::from_i32(&gpu, "tokens", &[4], &[0, 1, 2, 3]).unwrap();
    let f = upload(&gpu, "f", &[0.0; 370]);
    let o = upload(&gpu, "o", &[0.0; 4 * 37]);
    // 37 is odd: chunks start at multiples of `align` rows, which 37 elements cannot hold.
    let e = embedding::forward_chunked(&gpu, toks.view(), f.view(), o.view(), 4, 37, 10, 37).unwrap_err();
    assert!(e.to_string().contains("embedding forward table chunk"), "{e}");
}
