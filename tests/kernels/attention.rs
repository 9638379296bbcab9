//! Causal multi-head attention (`shaders/attention.wgsl`) against a float64 CPU reference with a
//! naive softmax: forward and backward at odd head dims and lengths, several head-dim chunks,
//! KV-cache shapes (q_pos0, kv_stride > kv_len), token-by-token decoding through `set_kv`,
//! run-to-run determinism and shape errors.

use super::common::*;
use ddl::gpu::{Dispatch, Gpu, Tensor};
use ddl::kernels::attention::{self, AttnGrads, AttnIo, AttnShape, Method};

// ---------------------------------------------------------------------------------------------
// float64 reference

fn qx(s: &AttnShape, b: usize, i: usize, h: usize) -> usize {
    ((b * s.q_len + i) * s.heads + h) * s.head_dim
}

fn kx(s: &AttnShape, b: usize, t: usize, h: usize) -> usize {
    ((b * s.kv_stride + t) * s.heads + h) * s.head_dim
}

fn lx(s: &AttnShape, b: usize, h: usize, i: usize) -> usize {
    (b * s.heads + h) * s.q_len + i
}

/// The keys query i sees.
fn keys(s: &AttnShape, i: usize) -> std::ops::Range<usize> {
    0..(s.q_pos0 + i + 1).min(s.kv_len)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Softmax probabilities of query (b, i, h) over its visible keys, and the log-sum-exp.
fn probs(s: &AttnShape, scale: f64, q: &[f64], k: &[f64], b: usize, i: usize, h: usize) -> (Vec<f64>, f64) {
    let hd = s.head_dim;
    let qr = &q[qx(s, b, i, h)..][..hd];
    let sc: Vec<f64> = keys(s, i).map(|t| scale * dot(qr, &k[kx(s, b, t, h)..][..hd])).collect();
    let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
    let l: f64 = e.iter().sum();
    (e.iter().map(|x| x / l).collect(), m + l.ln())
}

/// `(out, lse)`.
fn ref_forward(s: &AttnShape, scale: f64, q: &[f64], k: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let hd = s.head_dim;
    let mut out = vec![0.0; s.q_elems()];
    let mut lse = vec![0.0; s.lse_elems()];
    for b in 0..s.batch {
        for h in 0..s.heads {
            for i in 0..s.q_len {
                let (p, l) = probs(s, scale, q, k, b, i, h);
                lse[lx(s, b, h, i)] = l;
                let o = qx(s, b, i, h);
                for (t, pt) in keys(s, i).zip(&p) {
                    for d in 0..hd {
                        out[o + d] += pt * v[kx(s, b, t, h) + d];
                    }
                }
            }
        }
    }
    (out, lse)
}

/// `(dq, dk, dv)` for the upstream gradient `dout` (spec 11.5).
fn ref_backward(
    s: &AttnShape,
    scale: f64,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    dout: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let hd = s.head_dim;
    let mut dq = vec![0.0; s.q_elems()];
    let mut dk = vec![0.0; s.kv_elems()];
    let mut dv = vec![0.0; s.kv_elems()];
    for b in 0..s.batch {
        for h in 0..s.heads {
            for i in 0..s.q_len {
                let (p, _) = probs(s, scale, q, k, b, i, h);
                let qo = qx(s, b, i, h);
                let go = &dout[qo..][..hd];
                let dp: Vec<f64> = keys(s, i).map(|t| dot(go, &v[kx(s, b, t, h)..][..hd])).collect();
                let dd: f64 = p.iter().zip(&dp).map(|(a, b)| a * b).sum();
                for (j, t) in keys(s, i).enumerate() {
                    let ds = p[j] * (dp[j] - dd);
                    let ko = kx(s, b, t, h);
                    for d in 0..hd {
                        dq[qo + d] += ds * scale * k[ko + d];
                        dk[ko + d] += ds * scale * q[qo + d];
                        dv[ko + d] += p[j] * go[d];
                    }
                }
            }
        }
    }
    (dq, dk, dv)
}

fn f64v(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

// ---------------------------------------------------------------------------------------------
// GPU harness

/// Random inputs for a shape; k/v rows at τ ≥ kv_len (cache padding) are NaN, so reading them
/// would poison the result. `amp` scales q (larger = peakier softmax).
struct Inputs {
    s: AttnShape,
    scale: f32,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    dout: Vec<f32>,
}

impl Inputs {
    fn new(rng: &mut Rng, s: AttnShape, amp: f32) -> Self {
        let q = rng.normal(s.q_elems(), amp);
        let mut k = rng.normal(s.kv_elems(), 1.0);
        let mut v = rng.normal(s.kv_elems(), 1.0);
        for b in 0..s.batch {
            for t in s.kv_len..s.kv_stride {
                for h in 0..s.heads {
                    let o = kx(&s, b, t, h);
                    k[o..o + s.head_dim].fill(f32::NAN);
                    v[o..o + s.head_dim].fill(f32::NAN);
                }
            }
        }
        let dout = rng.normal(s.q_elems(), 1.0);
        Inputs { s, scale: 1.0 / (s.head_dim as f32).sqrt(), q, k, v, dout }
    }

    /// The reference sees the NaN padding rows as zeros: they must not matter.
    fn k64(&self) -> Vec<f64> {
        self.k.iter().map(|&x| if x.is_nan() { 0.0 } else { x as f64 }).collect()
    }

    fn v64(&self) -> Vec<f64> {
        self.v.iter().map(|&x| if x.is_nan() { 0.0 } else { x as f64 }).collect()
    }
}

struct Gpus {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
}

fn gpu_forward(gpu: &Gpu, x: &Inputs) -> (Gpus, Vec<Dispatch>) {
    let s = &x.s;
    let t = Gpus {
        q: upload(gpu, "q", &x.q),
        k: upload(gpu, "k", &x.k),
        v: upload(gpu, "v", &x.v),
        out: poisoned(gpu, "out", &[s.q_elems()]),
        lse: poisoned(gpu, "lse", &[s.lse_elems()]),
    };
    let ds = attention::forward_seq(
        gpu,
        s,
        x.scale,
        AttnIo { q: t.q.view(), k: t.k.view(), v: t.v.view(), out: t.out.view(), lse: t.lse.view() },
    )
    .unwrap();
    run(gpu, &ds);
    (t, ds)
}

/// Every method of `forward_seq` / `backward`: the tiled kernels, and blocks of queries through the
/// matmuls with the CPU adapters' block size and with a small one (many blocks).
/// The forms of method `m`: the blocked methods with the decoding row kernel, the tiled one with
/// the tiled kernel for decoding too (each decoding kernel is tested either way).
fn set_method(f: &mut ddl::kernels::forms::Forms, m: Method) {
    f.attention = m;
    f.attention_rows = m != Method::Tiled;
}

const METHODS: [Method; 3] = [Method::Tiled, Method::Blocked(attention::BLOCK_ROWS), Method::Blocked(5)];

/// A training form: a [`Method`] and the blocked method's softmax row team (`attn_team`: 0 is
/// one invocation per row).
#[derive(Debug, Clone, Copy)]
struct Form(Method, usize);

/// Every form of `forward_seq` / `backward`: [`METHODS`] with one invocation per softmax row,
/// and the blocked method with teams: 32 as on a GPU, and 4, whose lanes keep 4 · 8 · 4 = 128
/// keys of a row in registers, so that rows past 128 keys (T = 130 below) take the path that
/// reads the rest again; 1 and 128, the team sizes' ends; and the causal method (the whole
/// score matrix, granules of 128 queries: T = 130 has two) with one invocation per row and
/// teams of 4 and 32. (Shapes it does not take, cache shapes, run the blocked method.)
const FORMS: [Form; 10] = [
    Form(Method::Tiled, 0),
    Form(Method::Blocked(attention::BLOCK_ROWS), 0),
    Form(Method::Blocked(5), 0),
    Form(Method::Blocked(attention::BLOCK_ROWS), 32),
    Form(Method::Blocked(5), 4),
    Form(Method::Blocked(7), 1),
    Form(Method::Blocked(attention::BLOCK_ROWS), 128),
    Form(Method::Causal, 0),
    Form(Method::Causal, 4),
    Form(Method::Causal, 32),
];

fn set_form(f: &mut ddl::kernels::forms::Forms, m: Form) {
    set_method(f, m.0);
    f.attention_row_team = m.1;
}

/// Runs forward then backward on the GPU: `(out, lse, dq, dk, dv)`.
fn gpu_both(gpu: &Gpu, x: &Inputs) -> [Vec<f32>; 5] {
    gpu_both_dispatched(gpu, x).0
}

/// [`gpu_both`], with the forward's and the backward's dispatches.
fn gpu_both_dispatched(gpu: &Gpu, x: &Inputs) -> ([Vec<f32>; 5], Vec<Dispatch>, Vec<Dispatch>) {
    let s = &x.s;
    let (t, fwd) = gpu_forward(gpu, x);
    let dout = upload(gpu, "dout", &x.dout);
    let dq = poisoned(gpu, "dq", &[s.q_elems()]);
    let dk = poisoned(gpu, "dk", &[s.kv_elems()]);
    let dv = poisoned(gpu, "dv", &[s.kv_elems()]);
    let ds = attention::backward(
        gpu,
        s,
        x.scale,
        AttnIo { q: t.q.view(), k: t.k.view(), v: t.v.view(), out: t.out.view(), lse: t.lse.view() },
        AttnGrads { dout: dout.view(), dq: dq.view(), dk: dk.view(), dv: dv.view() },
    )
    .unwrap();
    run(gpu, &ds);
    ([read(gpu, &t.out), read(gpu, &t.lse), read(gpu, &dq), read(gpu, &dk), read(gpu, &dv)], fwd, ds)
}

fn check_forward(gpu: &Gpu, rng: &mut Rng, s: AttnShape, amp: f32) {
    let x = Inputs::new(rng, s, amp);
    let (out, lse) = ref_forward(&s, x.scale as f64, &f64v(&x.q), &x.k64(), &x.v64());
    for m in FORMS {
        let (t, _) = with_forms(gpu, |f| set_form(f, m), |gpu| gpu_forward(gpu, &x));
        let name = format!("{s:?} {m:?}");
        assert_close(&format!("out {name}"), &read(gpu, &t.out), &out, 1e-5, rng.seed);
        assert_close(&format!("lse {name}"), &read(gpu, &t.lse), &lse, 1e-5, rng.seed);
    }
}

fn check_both(gpu: &Gpu, rng: &mut Rng, s: AttnShape, amp: f32) {
    check_both_in(gpu, rng, s, amp, &FORMS);
}

/// [`check_both`] in the forms `forms`.
fn check_both_in(gpu: &Gpu, rng: &mut Rng, s: AttnShape, amp: f32, forms: &[Form]) {
    let x = Inputs::new(rng, s, amp);
    for &m in forms {
        with_forms(gpu, |f| set_form(f, m), |gpu| check_both_with(gpu, rng.seed, &x, &format!("{m:?}")));
    }
}

fn check_both_with(gpu: &Gpu, seed: u64, x: &Inputs, method: &str) {
    let s = x.s;
    let [out, lse, dq, dk, dv] = gpu_both(gpu, x);
    let (q64, k64, v64) = (f64v(&x.q), x.k64(), x.v64());
    let sc = x.scale as f64;
    let (r_out, r_lse) = ref_forward(&s, sc, &q64, &k64, &v64);
    let (r_dq, r_dk, r_dv) = ref_backward(&s, sc, &q64, &k64, &v64, &f64v(&x.dout));
    let name = format!("{s:?} {method}");
    assert_close(&format!("out {name}"), &out, &r_out, 1e-5, seed);
    assert_close(&format!("lse {name}"), &lse, &r_lse, 1e-5, seed);
    assert_close(&format!("dq {name}"), &dq, &r_dq, 1e-4, seed);
    assert_close(&format!("dk {name}"), &dk, &r_dk, 1e-4, seed);
    assert_close(&format!("dv {name}"), &dv, &r_dv, 1e-4, seed);
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn cpu_backward_matches_finite_differences_of_the_cpu_forward() {
    let mut rng = Rng::fresh();
    // A cache-shaped call exercises both mask bounds (q_pos0 and kv_len) and the padding rows.
    for s in [
        AttnShape::training(2, 2, 5, 6),
        AttnShape { batch: 1, heads: 2, head_dim: 3, q_len: 4, kv_len: 7, kv_stride: 9, q_pos0: 2, half: false },
    ] {
        let x = Inputs::new(&mut rng, s, 1.5);
        let (q, k, v, g) = (f64v(&x.q), x.k64(), x.v64(), f64v(&x.dout));
        let sc = x.scale as f64;
        let loss = |q: &[f64], k: &[f64], v: &[f64]| dot(&ref_forward(&s, sc, q, k, v).0, &g);
        let (dq, dk, dv) = ref_backward(&s, sc, &q, &k, &v, &g);
        let e_q = fd_check(&mut |x| loss(x, &k, &v), &q, &dq, 40, &mut rng);
        let e_k = fd_check(&mut |x| loss(&q, x, &v), &k, &dk, 40, &mut rng);
        let e_v = fd_check(&mut |x| loss(&q, &k, x), &v, &dv, 40, &mut rng);
        for (n, e) in [("dq", e_q), ("dk", e_k), ("dv", e_v)] {
            assert!(e < 1e-5, "{n} finite-difference error {e:e} for {s:?} (seed {})", rng.seed);
        }
    }
}

#[test]
fn forward_matches_float64_for_odd_head_dims_and_lengths() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for h in [1, 7, 16, 64] {
        for t in [1, 2, 17, 65, 130] {
            check_forward(&gpu, &mut rng, AttnShape::training(2, 3, h, t), 1.0);
        }
    }
}

#[test]
fn backward_matches_float64_for_odd_head_dims_and_lengths() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for h in [1, 7, 16, 64] {
        for t in [1, 2, 17, 65, 130] {
            check_both(&gpu, &mut rng, AttnShape::training(2, 3, h, t), 1.0);
        }
    }
}

#[test]
fn head_dims_above_64_are_processed_in_several_chunks() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for h in [65, 100, 128, 131] {
        check_both(&gpu, &mut rng, AttnShape::training(1, 2, h, 37), 1.0);
    }
    check_both(
        &gpu,
        &mut rng,
        AttnShape { batch: 2, heads: 1, head_dim: 97, q_len: 6, kv_len: 21, kv_stride: 24, q_pos0: 15, half: false },
        1.0,
    );
}

#[test]
fn peaked_softmax_with_large_scores_stays_accurate() {
    // Scores spread over tens of units: the online max must rescale correctly across tiles.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    check_both(&gpu, &mut rng, AttnShape::training(1, 2, 32, 77), 6.0);
    check_both(&gpu, &mut rng, AttnShape::training(2, 1, 9, 40), 12.0);
}

#[test]
fn cache_shapes_with_q_pos0_and_kv_stride_match_float64() {
    // (q_len, kv_len, kv_stride, q_pos0): prompt chunks against a cache, queries beyond the cache,
    // and a single query.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for (ql, kl, ks, p0) in
        [(5, 12, 16, 7), (9, 23, 30, 3), (20, 7, 7, 0), (1, 1, 4, 0), (33, 50, 64, 17), (17, 40, 41, 30)]
    {
        let s = AttnShape {
            batch: 2,
            heads: 3,
            head_dim: 13,
            q_len: ql,
            kv_len: kl,
            kv_stride: ks,
            q_pos0: p0,
            half: false,
        };
        check_both(&gpu, &mut rng, s, 1.0);
    }
}

/// The decoding loop: a cache of `cap` rows filled up to `n` (NaN beyond), `q_len` new queries
/// per step at positions n − q_len …, moved with `set_kv`; each step's rows must equal the full
/// training forward's rows.
fn decode_against_full(gpu: &Gpu, rng: &mut Rng, step: usize) {
    let (b, heads, hd, t, cap) = (2, 3, 16, 37, 40);
    let full = AttnShape::training(b, heads, hd, t);
    let x = Inputs::new(rng, full, 1.0);
    let (ft, _) = gpu_forward(gpu, &x);
    let f_out = read(gpu, &ft.out);
    let (r_out, r_lse) = ref_forward(&full, x.scale as f64, &f64v(&x.q), &x.k64(), &x.v64());

    let s0 = AttnShape::decode(b, heads, hd, step, step, cap);
    let kc = poisoned(gpu, "k_cache", &[s0.kv_elems()]);
    let vc = poisoned(gpu, "v_cache", &[s0.kv_elems()]);
    let qd = poisoned(gpu, "q_step", &[s0.q_elems()]);
    let out = poisoned(gpu, "out_step", &[s0.q_elems()]);
    let lse = poisoned(gpu, "lse_step", &[s0.lse_elems()]);
    let ds = attention::forward(
        gpu,
        &s0,
        x.scale,
        AttnIo { q: qd.view(), k: kc.view(), v: vc.view(), out: out.view(), lse: lse.view() },
    )
    .unwrap();
    let row = heads * hd;
    let mut n = step;
    while n <= t {
        let s = AttnShape::decode(b, heads, hd, step, n, cap);
        // Cache rows < n hold the true keys/values, the rest NaN.
        let mut kk = vec![f32::NAN; s.kv_elems()];
        let mut vv = vec![f32::NAN; s.kv_elems()];
        let mut qq = vec![0.0f32; s.q_elems()];
        for bb in 0..b {
            let src = bb * t * row;
            let dst = bb * cap * row;
            kk[dst..dst + n * row].copy_from_slice(&x.k[src..src + n * row]);
            vv[dst..dst + n * row].copy_from_slice(&x.v[src..src + n * row]);
            let qs = src + (n - step) * row;
            qq[bb * step * row..][..step * row].copy_from_slice(&x.q[qs..qs + step * row]);
        }
        kc.write_f32(gpu, &kk).unwrap();
        vc.write_f32(gpu, &vv).unwrap();
        qd.write_f32(gpu, &qq).unwrap();
        attention::set_kv(gpu, &ds, &s, x.scale).unwrap();
        run(gpu, &ds);
        let (got, got_lse) = (read(gpu, &out), read(gpu, &lse));
        let (mut want, mut want_gpu, mut want_lse) = (vec![], vec![], vec![]);
        for bb in 0..b {
            let o = (bb * t + n - step) * row;
            want.extend_from_slice(&r_out[o..o + step * row]);
            want_gpu.extend(f_out[o..o + step * row].iter().map(|&x| x as f64));
            for h in 0..heads {
                let l = lx(&full, bb, h, n - step);
                want_lse.extend_from_slice(&r_lse[l..l + step]);
            }
        }
        let name = format!("decode q_len {step} kv_len {n}");
        assert_close(&name, &got, &want, 1e-5, rng.seed);
        assert_close(&format!("{name} lse"), &got_lse, &want_lse, 1e-5, rng.seed);
        // And it agrees with the full forward on the GPU to float32 rounding.
        assert_close(&format!("{name} vs full"), &got, &want_gpu, 1e-6, rng.seed);
        n += step;
    }
}

/// `forward` itself (the decoding entry: the flash kernel, or on the blocked method's adapters the
/// row kernel for ≤ 4 queries and head dims ≤ 64, with vec4 rows when the head dim is a multiple
/// of 4) at decoding shapes against float64, under every method.
#[test]
fn decoding_forward_matches_float64_with_the_tiled_and_the_row_kernel() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for m in METHODS {
        for hd in [1, 5, 16, 33, 64, 70] {
            for (ql, kl, ks) in [(1, 1, 3), (1, 37, 40), (3, 20, 24), (4, 9, 9), (5, 30, 31)] {
                let s = AttnShape::decode(2, 3, hd, ql, kl, ks);
                let x = Inputs::new(&mut rng, s, 1.5);
                let q = upload(&gpu, "q", &x.q);
                let (k, v) = (upload(&gpu, "k", &x.k), upload(&gpu, "v", &x.v));
                let out = poisoned(&gpu, "out", &[s.q_elems()]);
                let lse = poisoned(&gpu, "lse", &[s.lse_elems()]);
                let ds = with_forms(
                    &gpu,
                    |f| set_method(f, m),
                    |gpu| {
                        attention::forward(
                            gpu,
                            &s,
                            x.scale,
                            AttnIo { q: q.view(), k: k.view(), v: v.view(), out: out.view(), lse: lse.view() },
                        )
                    },
                )
                .unwrap();
                // The row kernel reads rows as vec4s when the head dim allows it.
                // (with few rows, split over a workgroup per row).
                let rows = matches!(m, Method::Blocked(_)) && ql <= attention::ROWS_KERNEL_MAX_QUERIES && hd <= 64;
                let split = 2 * 3 * ql <= attention::SPLIT_ROWS_MAX;
                let want = match (rows, hd % 4 == 0, split) {
                    (true, true, true) => "::attn_fwd_split4",
                    (true, true, false) => "::attn_fwd_rows4",
                    (true, false, _) => "::attn_fwd_rows",
                    _ => "::attn_fwd",
                };
                assert!(ds[0].kernel.name.ends_with(want), "{s:?} {m:?}: {} (want {want})", ds[0].kernel.name);
                run(&gpu, &ds);
                let (r_out, r_lse) = ref_forward(&s, x.scale as f64, &f64v(&x.q), &x.k64(), &x.v64());
                let name = format!("{s:?} {m:?} ({})", ds[0].kernel.name);
                assert_close(&format!("out {name}"), &read(&gpu, &out), &r_out, 1e-5, rng.seed);
                assert_close(&format!("lse {name}"), &read(&gpu, &lse), &r_lse, 1e-5, rng.seed);
            }
        }
    }
}

#[test]
fn decoding_rows_beyond_the_split_limit_use_the_vec4_row_kernel() {
    // More than SPLIT_ROWS_MAX rows (batch · queries · heads): one invocation per row, vec4 rows.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let m = Method::Blocked(attention::BLOCK_ROWS);
    for (b, heads, ql, hd) in [(4, 9, 1, 16), (3, 4, 3, 64)] {
        let s = AttnShape::decode(b, heads, hd, ql, 37, 40);
        assert!(b * heads * ql > attention::SPLIT_ROWS_MAX);
        let x = Inputs::new(&mut rng, s, 1.5);
        let q = upload(&gpu, "q", &x.q);
        let (k, v) = (upload(&gpu, "k", &x.k), upload(&gpu, "v", &x.v));
        let out = poisoned(&gpu, "out", &[s.q_elems()]);
        let lse = poisoned(&gpu, "lse", &[s.lse_elems()]);
        let ds = with_forms(
            &gpu,
            |f| set_method(f, m),
            |gpu| {
                attention::forward(
                    gpu,
                    &s,
                    x.scale,
                    AttnIo { q: q.view(), k: k.view(), v: v.view(), out: out.view(), lse: lse.view() },
                )
            },
        )
        .unwrap();
        assert!(ds[0].kernel.name.ends_with("::attn_fwd_rows4"), "{}", ds[0].kernel.name);
        run(&gpu, &ds);
        let (r_out, r_lse) = ref_forward(&s, x.scale as f64, &f64v(&x.q), &x.k64(), &x.v64());
        assert_close(&format!("out {s:?}"), &read(&gpu, &out), &r_out, 1e-5, rng.seed);
        assert_close(&format!("lse {s:?}"), &read(&gpu, &lse), &r_lse, 1e-5, rng.seed);
    }
}

#[test]
fn decoding_one_token_at_a_time_reproduces_the_full_forward() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for m in METHODS {
        with_forms(&gpu, |f| set_method(f, m), |gpu| decode_against_full(gpu, &mut rng, 1));
    }
}

#[test]
fn decoding_prompt_chunks_reproduces_the_full_forward() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for m in METHODS {
        with_forms(&gpu, |f| set_method(f, m), |gpu| decode_against_full(gpu, &mut rng, 4));
    }
    decode_against_full(&gpu, &mut rng, 18);
}

#[test]
fn forward_and_backward_are_bit_identical_run_to_run() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for s in [AttnShape::training(2, 2, 24, 70), AttnShape::training(1, 2, 100, 33)] {
        let x = Inputs::new(&mut rng, s, 2.0);
        for m in FORMS {
            let a = with_forms(&gpu, |f| set_form(f, m), |gpu| gpu_both(gpu, &x));
            let b = with_forms(&gpu, |f| set_form(f, m), |gpu| gpu_both(gpu, &x));
            for (i, (ga, gb)) in a.iter().zip(&b).enumerate() {
                assert!(
                    same_bits(ga, gb),
                    "output {i} (out, lse, dq, dk, dv) differs between runs for {s:?} {m:?} (seed {})",
                    rng.seed
                );
            }
        }
    }
}

#[test]
fn a_query_that_sees_one_key_gets_exactly_zero_score_gradients() {
    // Its softmax is exactly 1 (out = v), so dS = P·(dP − dout·out) is 0 in exact arithmetic. The
    // kernels must give exactly 0 too: rounding noise here would become a full AdamW step on wq/wk
    // (tests/golden/t1). T = 1 checks dq and dk; longer sequences check the first query's dq row.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for (hd, t) in [(8, 1), (5, 1), (33, 1), (70, 1), (130, 1), (8, 9), (37, 20), (100, 3)] {
        let s = AttnShape::training(3, 2, hd, t);
        let x = Inputs::new(&mut rng, s, 2.0);
        for m in FORMS {
            let [out, _, dq, dk, dv] = with_forms(&gpu, |f| set_form(f, m), |gpu| gpu_both(gpu, &x));
            for b in 0..s.batch {
                for h in 0..s.heads {
                    let o = qx(&s, b, 0, h);
                    let row = &dq[o..o + hd];
                    assert!(
                        row.iter().all(|&g| g == 0.0),
                        "dq of query 0 (b {b}, head {h}) for {s:?} {m:?} is {row:?}, not 0"
                    );
                    assert_eq!(&out[o..o + hd], &x.v[o..o + hd], "out of query 0 is not exactly v_0 for {s:?}");
                }
            }
            if t == 1 {
                assert!(dk.iter().all(|&g| g == 0.0), "dk at T = 1 for {s:?} {m:?} is not exactly 0: {dk:?}");
                // dv = P·dout with P recomputed from the saved log-sum-exp: exp(s' − lse) is 1 up
                // to the rounding of exp, which WGSL allows to be 3 + 2·|x| ulp (x ≈ 0 here), and of
                // the recomputed score s' against the one lse saved (an ulp or two of |s|), both
                // left to the driver: NVIDIA's exp differs from lavapipe's (the H200 check of
                // 2026-11-28 measured 3 ulp where lavapipe gives at most 2). So dv is dout within
                // (3 + 0.5 + 2·|s|) ulp, with s = scale · q·k of that head.
                for b in 0..s.batch {
                    for h in 0..s.heads {
                        let o = qx(&s, b, 0, h);
                        let score: f32 = (0..hd).map(|d| x.scale * x.q[o + d] * x.k[kx(&s, b, 0, h) + d]).sum();
                        let ulps = 3.5 + 2.0 * score.abs();
                        for d in o..o + hd {
                            let (g, want) = (dv[kx(&s, b, 0, h) + d - o], x.dout[d]);
                            assert!(
                                (g - want).abs() <= ulps * f32::EPSILON * want.abs(),
                                "dv (b {b}, head {h}, channel {}) at T = 1 is {g}, not dout {want} (within {ulps:.1} \
                                 ulp: score {score}) for {s:?} {m:?}",
                                d - o
                            );
                        }
                    }
                }
            }
        }
        if t > 1 {
            check_both(&gpu, &mut rng, s, 2.0);
        }
    }
}

#[test]
fn blocked_attention_reads_no_stale_scratch_columns() {
    // The softmax steps write a block's rows only up to the keys its products read (the columns
    // beyond, up to the widest block's, keep what they held), and the masked keys within as
    // zeros. With both scratch buffers poisoned with NaN first, every output must still match
    // float64, in every form of the blocked method.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let x = Inputs::new(&mut rng, AttnShape::training(2, 3, 16, 45), 1.0);
    for m in FORMS.into_iter().filter(|m| m.0 != Method::Tiled) {
        with_forms(
            &gpu,
            |f| set_form(f, m),
            |gpu| {
                for key in ["attention.blocked.s", "attention.blocked.ds"] {
                    ddl::kernels::poison(gpu, &gpu.shared_scratch(key, 1 << 16).unwrap()).unwrap();
                }
                check_both_with(gpu, rng.seed, &x, &format!("{m:?} on a NaN-poisoned scratch"));
            },
        );
    }
}

#[test]
fn more_than_65535_workgroups_cover_every_head() {
    // One query and one key per head, 65 537 heads: the grids spill over the x dimension. (At
    // T = 1 the causal method's team forms are its one-invocation form's grids: left out.)
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let forms: Vec<Form> = FORMS.into_iter().filter(|m| m.0 != Method::Causal || m.1 == 0).collect();
    check_both_in(&gpu, &mut rng, AttnShape::training(1, 65_537, 1, 1), 1.0, &forms);
}

#[test]
fn shape_errors_are_reported_not_panicked() {
    let gpu = gpu();
    let s = AttnShape::training(2, 3, 8, 5);
    let big = upload(&gpu, "big", &vec![0.0; s.q_elems()]);
    let small = upload(&gpu, "small", &vec![0.0; s.q_elems() - 1]);
    let lse = upload(&gpu, "lse", &vec![0.0; s.lse_elems()]);
    let io = AttnIo { q: big.view(), k: big.view(), v: big.view(), out: big.view(), lse: lse.view() };
    let e = attention::forward(&gpu, &s, 1.0, AttnIo { k: small.view(), ..io }).unwrap_err();
    assert!(e.to_string().contains("'k' [batch, kv_stride"), "{e}");
    assert!(e.to_string().contains("needs 240 elements"), "{e}");
    assert!(e.to_string().contains("has 239"), "{e}");
    let e = attention::backward(
        &gpu,
        &s,
        1.0,
        io,
        AttnGrads { dout: big.view(), dq: big.view(), dk: big.view(), dv: small.view() },
    )
    .unwrap_err();
    assert!(e.to_string().contains("dv"), "{e}");
    for bad in [AttnShape { head_dim: 0, ..s }, AttnShape { kv_len: 0, ..s }, AttnShape { kv_stride: 4, ..s }] {
        let e = attention::forward(&gpu, &bad, 1.0, io).unwrap_err();
        assert!(matches!(e, ddl::gpu::GpuError::Shape(_)), "{e}");
    }
    // set_kv refuses dispatches bound for another q_len, or that are not the forward.
    let ds = attention::forward(&gpu, &s, 1.0, io).unwrap();
    let other = AttnShape::training(2, 3, 8, 40);
    assert!(attention::set_kv(&gpu, &ds, &other, 1.0).is_err());
    assert!(attention::set_kv(&gpu, &ds[..0], &s, 1.0).is_err());
    attention::set_kv(&gpu, &ds, &AttnShape { kv_len: 3, ..s }, 1.0).unwrap();
}

#[test]
fn blocked_attention_with_f16_operands_matches_float64_at_f16_tolerance() {
    // `--precision f16`: the blocked form's products read their operands rounded to f16 (q, k, v
    // and dO here already f16 values; the probabilities and dS are rounded inside), accumulate in
    // f32, and keep the softmax and its statistics in f32. The f16 path must really run: its
    // error is well above the f32 path's on the same inputs, and below the stated tolerance.
    let gpu = f16_gpu();
    let mut rng = Rng::fresh();
    let seed = rng.seed;
    let base = AttnShape::training(2, 3, 24, 37);
    let mut x = Inputs::new(&mut rng, base, 1.0);
    for v in [&mut x.q, &mut x.k, &mut x.v, &mut x.dout] {
        *v = f16_round(v);
    }
    let (q64, k64, v64) = (f64v(&x.q), x.k64(), x.v64());
    let sc = x.scale as f64;
    let (r_out, r_lse) = ref_forward(&base, sc, &q64, &k64, &v64);
    let (r_dq, r_dk, r_dv) = ref_backward(&base, sc, &q64, &k64, &v64, &f64v(&x.dout));
    let rel = |g: &[f32], w: &[f64]| {
        let num: f64 = g.iter().zip(w).map(|(a, b)| (*a as f64 - b).powi(2)).sum();
        (num / w.iter().map(|b| b * b).sum::<f64>()).sqrt()
    };
    for m in [Method::Blocked(attention::BLOCK_ROWS), Method::Blocked(5), Method::Causal] {
        let mut errs = Vec::new();
        for half in [false, true] {
            x.s = AttnShape { half, ..base };
            let [out, lse, dq, dk, dv] = with_forms(&gpu, |f| set_method(f, m), |gpu| gpu_both(gpu, &x));
            let e = [rel(&out, &r_out), rel(&lse, &r_lse), rel(&dq, &r_dq), rel(&dk, &r_dk), rel(&dv, &r_dv)];
            if half {
                let tol = [3e-3, 1e-3, 1e-2, 1e-2, 3e-3];
                for (i, name) in ["out", "lse", "dq", "dk", "dv"].iter().enumerate() {
                    assert!(e[i] <= tol[i], "{m:?} {name}: {:.2e} > {:.0e} (seed {seed})", e[i], tol[i]);
                }
            }
            errs.push(e);
        }
        assert!(
            errs[1][0] > 10.0 * errs[0][0] && errs[1][2] > 10.0 * errs[0][2],
            "{m:?}: f16 changed nothing: {errs:?}"
        );
    }
}

#[test]
fn blocked_attention_with_p_and_ds_stored_in_f16_gives_the_same_bits() {
    // `--precision f16` with the form `attn_p16` (on by default): the softmax steps store P and
    // dS in f16 buffers of their own and the products read them as f16-stored operands, where
    // without it they write them over the f32 scores and dP and the products round them to f16
    // as they read. Both round to nearest even, so every output must be the same bits, in every
    // form of the blocked method (team forms too, and rows past the 128 keys a team of 4 keeps
    // in registers: T = 130), on NaN-poisoned f16 scratch; and the f16 stores must really run
    // (the dispatches name the `h` variant).
    let gpu = f16_gpu();
    let mut rng = Rng::fresh();
    for t in [37, 130] {
        let mut x = Inputs::new(&mut rng, AttnShape { half: true, ..AttnShape::training(2, 3, 24, t) }, 1.0);
        for v in [&mut x.q, &mut x.k, &mut x.v, &mut x.dout] {
            *v = f16_round(v);
        }
        for m in FORMS.into_iter().filter(|m| m.0 != Method::Tiled) {
            let mut got = Vec::new();
            for on in [false, true] {
                got.push(with_forms(
                    &gpu,
                    |f| {
                        set_form(f, m);
                        f.attn_p16 = on;
                    },
                    |gpu| {
                        for key in ["attention.blocked.p16", "attention.blocked.ds16"] {
                            ddl::kernels::poison(gpu, &gpu.shared_scratch(key, 1 << 16).unwrap()).unwrap();
                        }
                        let (_, ds) = gpu_forward(gpu, &x);
                        let rows: Vec<String> = ds
                            .iter()
                            .map(|d| d.kernel.name.clone())
                            .filter(|n| n.starts_with("attention_rows"))
                            .collect();
                        let want = if on { "attention_rows[h]::" } else { "attention_rows[f32]::" };
                        assert!(
                            !rows.is_empty() && rows.iter().all(|n| n.starts_with(want)),
                            "{m:?} on {on}: {rows:?}"
                        );
                        gpu_both(gpu, &x)
                    },
                ));
            }
            for (i, name) in ["out", "lse", "dq", "dk", "dv"].iter().enumerate() {
                let (a, b) = (&got[0][i], &got[1][i]);
                assert!(a.iter().all(|v| v.is_finite()), "{m:?} T {t} {name}: not finite (seed {})", rng.seed);
                assert!(same_bits(a, b), "{m:?} T {t}: {name} differs with P and dS stored in f16 (seed {})", rng.seed);
            }
        }
    }
}

/// The dispatches of `ds` by kernel: (products, softmax steps).
fn products_and_rows(ds: &[Dispatch]) -> (usize, usize) {
    let rows = ds.iter().filter(|d| d.kernel.name.starts_with("attention_rows")).count();
    (ds.len() - rows, rows)
}

#[test]
fn causal_attention_keeps_the_blocked_bits_of_out_lse_and_dq_in_one_dispatch_per_product() {
    // The causal method's products sum what the blocked method's do plus exact zeros (P and dS
    // between a query's last key and its granule's end), in the same order: out, lse and dQ
    // must be the blocked method's bits, for every team form; dK and dV sum every query in one
    // product (the blocked method adds per-block sums): float64 at the usual tolerance. T = 300
    // has granules of 128, 128 and 44 queries; the forward is 3 dispatches (scores, softmax,
    // values), the backward 6 (scores, dP, softmax, dV, dK, dQ), whatever T. With its products'
    // tiles longest first (`causal_lpt`) every output is the same bits.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for (s, amp) in [(AttnShape::training(2, 3, 16, 300), 1.0), (AttnShape::training(1, 2, 7, 129), 3.0)] {
        let x = Inputs::new(&mut rng, s, amp);
        for team in [0, 4, 32] {
            let causal = with_forms(
                &gpu,
                |f| set_form(f, Form(Method::Causal, team)),
                |gpu| {
                    let (got, fwd, bwd) = gpu_both_dispatched(gpu, &x);
                    assert_eq!(products_and_rows(&fwd), (2, 1), "{s:?} team {team}: forward dispatches");
                    assert_eq!(products_and_rows(&bwd), (5, 1), "{s:?} team {team}: backward dispatches");
                    check_both_with(gpu, rng.seed, &x, &format!("causal team {team}"));
                    got
                },
            );
            // Its products' tiles longest first (`causal_lpt`): only the order changes, so every
            // output keeps its bits.
            let lpt = with_forms(
                &gpu,
                |f| {
                    set_form(f, Form(Method::Causal, team));
                    f.causal_lpt = true;
                },
                |gpu| gpu_both(gpu, &x),
            );
            for (i, name) in ["out", "lse", "dq", "dk", "dv"].iter().enumerate() {
                assert!(
                    same_bits(&causal[i], &lpt[i]),
                    "{s:?} team {team}: {name} differs with the tiles longest first (seed {})",
                    rng.seed
                );
            }
            let blocked = with_forms(
                &gpu,
                |f| set_form(f, Form(Method::Blocked(attention::GPU_BLOCK_ROWS), team)),
                |gpu| gpu_both(gpu, &x),
            );
            for (i, name) in ["out", "lse", "dq"].iter().enumerate() {
                assert!(
                    same_bits(&causal[i], &blocked[i]),
                    "{s:?} team {team}: the causal method's {name} differs from the blocked method's (seed {})",
                    rng.seed
                );
            }
        }
    }
}

#[test]
fn causal_attention_runs_the_blocked_method_where_it_cannot_run() {
    // A score matrix past one storage binding (lavapipe: 128 MiB, 33.5 M floats; 6000² = 36 M;
    // a GPU's bindings are capped so here, where an H200's 2 GiB held the matrix: GPU run 5)
    // and cache shapes run the blocked method with the adapter's default block, correctly.
    let gpu = gpu().with_max_storage_binding(128 << 20).unwrap();
    let mut rng = Rng::fresh();
    let big = AttnShape::training(1, 1, 1, 6000);
    let cache =
        AttnShape { batch: 2, heads: 3, head_dim: 13, q_len: 9, kv_len: 23, kv_stride: 30, q_pos0: 14, half: false };
    for (s, what) in [(big, "a matrix past one binding"), (cache, "a cache shape")] {
        let x = Inputs::new(&mut rng, s, 1.0);
        let (t, ds) = with_forms(&gpu, |f| set_form(f, Form(Method::Causal, 0)), |gpu| gpu_forward(gpu, &x));
        let rows = products_and_rows(&ds).1;
        let block = attention::default_block_rows(&gpu);
        let want = s.q_len.div_ceil(block.min(s.q_len.div_ceil(2)));
        assert_eq!(rows, want, "{what}: one softmax step per block of {block} queries");
        let (out, lse) = ref_forward(&s, x.scale as f64, &f64v(&x.q), &x.k64(), &x.v64());
        assert_close(&format!("out, {what}"), &read(&gpu, &t.out), &out, 1e-5, rng.seed);
        assert_close(&format!("lse, {what}"), &read(&gpu, &t.lse), &lse, 1e-5, rng.seed);
    }
}
