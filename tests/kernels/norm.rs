//! RMSNorm against float64: forward (y and the saved rstd) and backward (dx written or
//! accumulated, dγ accumulated) at odd widths and row counts, the ε-dominated regime, many rows
//! for the two-pass dγ reduction, determinism, shape errors, and finite differences of the
//! reference backward.

use super::common::*;
use ddl::gpu::Tensor;
use ddl::kernels::norm;

const EPS: f32 = 1e-5;

fn f64v(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// (y, rstd) in float64.
fn ref_forward(x: &[f64], gain: &[f64], rows: usize, dim: usize, eps: f64) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; rows * dim];
    let mut rs = vec![0.0; rows];
    for (r, rs) in rs.iter_mut().enumerate() {
        let row = &x[r * dim..(r + 1) * dim];
        let ms = row.iter().map(|v| v * v).sum::<f64>() / dim as f64;
        let rstd = 1.0 / (ms + eps).sqrt();
        *rs = rstd;
        for i in 0..dim {
            y[r * dim + i] = gain[i] * row[i] * rstd;
        }
    }
    (y, rs)
}

/// (dx, dgain contribution) in float64.
fn ref_backward(x: &[f64], gain: &[f64], dy: &[f64], rows: usize, dim: usize, eps: f64) -> (Vec<f64>, Vec<f64>) {
    let (_, rs) = ref_forward(x, gain, rows, dim, eps);
    let mut dx = vec![0.0; rows * dim];
    let mut dg = vec![0.0; dim];
    for (r, &rstd) in rs.iter().enumerate() {
        let o = r * dim;
        let s: f64 = (0..dim).map(|i| x[o + i] * gain[i] * dy[o + i]).sum();
        let c = rstd.powi(3) / dim as f64 * s;
        for i in 0..dim {
            dx[o + i] = rstd * gain[i] * dy[o + i] - c * x[o + i];
            dg[i] += dy[o + i] * x[o + i] * rstd;
        }
    }
    (dx, dg)
}

struct Out {
    y: Vec<f32>,
    rstd: Vec<f32>,
    dx: Vec<f32>,
    dgain: Vec<f32>,
}

/// Runs forward then backward on the GPU; `dx0`/`dgain0` are the accumulation starting values.
#[allow(clippy::too_many_arguments)]
fn run_gpu(
    gpu: &Gpu,
    x: &[f32],
    gain: &[f32],
    dy: &[f32],
    dx0: Option<&[f32]>,
    dgain0: &[f32],
    rows: usize,
    dim: usize,
    eps: f32,
) -> Out {
    let (tx, tg, tdy) = (upload(gpu, "x", x), upload(gpu, "gain", gain), upload(gpu, "dy", dy));
    let y = poisoned(gpu, "y", &[rows * dim]);
    let rstd = poisoned(gpu, "rstd", &[rows]);
    let dx = match dx0 {
        Some(d) => upload(gpu, "dx", d),
        None => poisoned(gpu, "dx", &[rows * dim]),
    };
    let dgain = upload(gpu, "dgain", dgain0);
    let mut ds = norm::rmsnorm_forward(gpu, tx.view(), tg.view(), y.view(), rstd.view(), rows, dim, eps).unwrap();
    ds.extend(
        norm::rmsnorm_backward(
            gpu,
            norm::NormGrads {
                x: tx.view(),
                gain: tg.view(),
                rstd: rstd.view(),
                dy: tdy.view(),
                dx: dx.view(),
                dgain: dgain.view(),
            },
            rows,
            dim,
            dx0.is_some(),
        )
        .unwrap(),
    );
    run(gpu, &ds);
    Out { y: read(gpu, &y), rstd: read(gpu, &rstd), dx: read(gpu, &dx), dgain: read(gpu, &dgain) }
}

/// Random inputs at `scale`, GPU vs float64 for forward and backward, with every row-team size
/// the adapters use (1 on CPU adapters, up to 256 on GPUs); teams of one with the quad entry
/// points (dim a multiple of 4) and without.
fn check(rows: usize, dim: usize, scale: f32, accumulate_dx: bool) {
    for team in [1, 4, 128, 256] {
        with_forms(&gpu(), |f| f.norm_team = Some(team), |gpu| check_team(gpu, rows, dim, scale, accumulate_dx, team));
    }
    with_forms(
        &gpu(),
        |f| (f.norm_team, f.norm_quads) = (Some(1), false),
        |gpu| check_team(gpu, rows, dim, scale, accumulate_dx, 1),
    );
    // The vec teams (GPUs' `norm_vec`) where dim allows them: the rule's team, a forced team of
    // two (four quads a lane at dim 32, else the rule) and of 256 (idle lanes past the row).
    for forced in [None, Some(2), Some(256)] {
        with_forms(
            &gpu(),
            |f| (f.norm_vec, f.norm_one_row_per_invocation, f.norm_team) = (true, false, forced),
            |gpu| {
                let t = norm::vec_team(gpu, rows, dim, &[]);
                assert_eq!(t.is_some(), dim.is_multiple_of(4) && dim <= 4096, "vec team at dim {dim}: {t:?}");
                check_team(gpu, rows, dim, scale, accumulate_dx, t.map_or(0, |t| 1000 + t))
            },
        );
    }
}

fn check_team(gpu: &Gpu, rows: usize, dim: usize, scale: f32, accumulate_dx: bool, team: usize) {
    let mut rng = Rng::fresh();
    let x = rng.normal(rows * dim, scale);
    let gain = rng.uniform(dim, 0.5, 1.5);
    let dy = rng.normal(rows * dim, 1.0);
    let dx0 = rng.normal(rows * dim, 1.0);
    let (xd, gd, dyd) = (f64v(&x), f64v(&gain), f64v(&dy));
    let (wy, wr) = ref_forward(&xd, &gd, rows, dim, EPS as f64);
    let (mut wdx, mut wdg) = ref_backward(&xd, &gd, &dyd, rows, dim, EPS as f64);
    // dγ's starting value: the scale of the gradient's terms (Σ over rows of |∂y x r|, not of
    // their sum, which can cancel to nearly nothing) with the gradient's sign per element, so that
    // preload + gradient never cancels (with dim = 1 the check is one number, whose relative error
    // would otherwise measure the f32 rounding of a near-cancelled sum of hundreds of terms, not
    // the kernel: seed 1006877791334138076 failed at rel 1.3e-4 with |Δ| 8e-7 when this was the
    // rms of the sums).
    let mut terms = vec![0.0f64; dim];
    for (r, &rstd) in wr.iter().enumerate() {
        for (i, t) in terms.iter_mut().enumerate() {
            *t += (dyd[r * dim + i] * xd[r * dim + i] * rstd).abs();
        }
    }
    let rms = (terms.iter().map(|g| g * g).sum::<f64>() / dim as f64).sqrt().max(1e-3);
    let dgain0: Vec<f32> =
        rng.uniform(dim, 0.5, 1.5).iter().zip(&wdg).map(|(&u, &g)| (u as f64 * rms).copysign(g) as f32).collect();
    let got = run_gpu(gpu, &x, &gain, &dy, accumulate_dx.then_some(&dx0[..]), &dgain0, rows, dim, EPS);
    if accumulate_dx {
        for (w, a) in wdx.iter_mut().zip(&dx0) {
            *w += *a as f64;
        }
    }
    for (w, a) in wdg.iter_mut().zip(&dgain0) {
        *w += *a as f64;
    }
    // team: 1000 + N for the vec form's teams of N.
    let tag = format!("rows={rows} dim={dim} scale={scale} acc={accumulate_dx} team={team}");
    assert_close(&format!("rmsnorm y {tag}"), &got.y, &wy, 1e-5, rng.seed);
    assert_close(&format!("rmsnorm rstd {tag}"), &got.rstd, &wr, 1e-5, rng.seed);
    assert_close(&format!("rmsnorm dx {tag}"), &got.dx, &wdx, 1e-4, rng.seed);
    assert_close(&format!("rmsnorm dgain {tag}"), &got.dgain, &wdg, 1e-4, rng.seed);
}

#[test]
fn rmsnorm_forward_and_backward_match_float64_for_odd_widths() {
    for &(rows, dim) in &[(1, 85), (7, 85), (300, 33), (7, 384), (3, 257), (2, 1000), (300, 16), (17, 6), (5, 2)] {
        check(rows, dim, 1.0, false);
    }
}

#[test]
fn rmsnorm_matches_float64_for_width_one_where_it_is_well_conditioned() {
    // With dim = 1, dx = rγdy·εr² is ε/(x²+ε) times the size of the two terms the formula
    // subtracts, so f32 (and the f32 rstd the backward receives) loses ~log10(x²/ε) digits.
    // Inputs of size √ε keep it well-conditioned; the forward is exact-ish at any size.
    for rows in [1, 7, 300] {
        check(rows, 1, 3e-3, false);
        check(rows, 1, 3e-3, true);
    }
}

#[test]
fn rmsnorm_backward_accumulates_into_dx_when_asked() {
    // dim = 1 with x² ≫ ε is ill-conditioned (dx = rγ·dy·εr², a difference of two nearly equal
    // terms): it is covered at x ≈ √ε where it is well-conditioned, so use dim ≥ 2 here.
    for &(rows, dim) in &[(1, 2), (7, 85), (300, 33), (5, 384)] {
        check(rows, dim, 1.0, true);
    }
}

#[test]
fn rmsnorm_matches_float64_when_epsilon_dominates_the_mean_square() {
    // RMS 1e-4 ≪ √ε ≈ 3.2e-3: the output is ε-dominated (spec 10.1), ε on the mean square.
    for &(rows, dim) in &[(7, 85), (300, 33), (5, 16)] {
        check(rows, dim, 1e-4, false);
    }
}

#[test]
fn rmsnorm_gain_gradient_reduces_many_rows_for_qk_norm_shapes() {
    // rows = N·H with a small head dim (more than 1024 chunks of 16 rows), and a tall block
    // norm: exercises both dγ passes with many chunks and a grid over many workgroups.
    check(20001, 3, 1.0, false);
    check(2048 * 6, 16, 1.0, true);
    check(4099, 85, 1.0, false);
    // The vec form's chunks of 8 rows with a short last one, one quad a lane.
    check(4099, 84, 1.0, true);
}

#[test]
fn vec_teams_hold_rows_up_to_4096_features_in_registers() {
    // Up to four quads a lane (a forced team of 4 at dim 64 and of 256 at 4096); wider rows and
    // widths off a multiple of 4 go to the team kernels; the rule's teams.
    let g = gpu();
    let vec = |forced: Option<usize>| {
        g.with_forms(|f| (f.norm_vec, f.norm_one_row_per_invocation, f.norm_team) = (true, false, forced))
    };
    assert_eq!(norm::vec_team(&vec(Some(4)), 100, 64, &[]), Some(4));
    assert_eq!(norm::vec_team(&vec(Some(4)), 100, 68, &[]), Some(32), "17 quads: the rule's team (a whole row)");
    assert_eq!(norm::vec_team(&vec(None), 100, 4, &[]), Some(1));
    assert_eq!(norm::vec_team(&vec(Some(1)), 100, 64, &[]), None, "forced teams of one: the quad kernels");
    assert_eq!(norm::vec_team(&vec(None), 100, 4096, &[]), Some(256));
    assert_eq!(norm::vec_team(&vec(None), 100, 4100, &[]), None);
    assert_eq!(norm::vec_team(&vec(None), 100, 66, &[]), None);
    assert_eq!(norm::vec_team(&vec(None), 8192, 768, &[]), Some(64));
    assert_eq!(norm::vec_team(&vec(None), 49152, 128, &[]), Some(32));
    assert_eq!(norm::vec_team(&vec(None), 10, 8, &[]), Some(2));
    assert_eq!(norm::vec_team(&g.with_forms(|f| f.norm_vec = false), 8192, 768, &[]), None);
    for (rows, dim, forced) in [(37, 64, Some(4)), (9, 4096, None), (300, 4092, None)] {
        with_forms(
            &g,
            |f| (f.norm_vec, f.norm_one_row_per_invocation, f.norm_team) = (true, false, forced),
            |gpu| check_team(gpu, rows, dim, 1.0, true, 1000 + norm::vec_team(gpu, rows, dim, &[]).unwrap()),
        );
    }
}

#[test]
fn rmsnorm_backward_reference_matches_finite_differences() {
    let mut rng = Rng::fresh();
    let (rows, dim) = (3, 7);
    let x = f64v(&rng.normal(rows * dim, 1.0));
    let gain = f64v(&rng.uniform(dim, 0.5, 1.5));
    let w = f64v(&rng.normal(rows * dim, 1.0));
    let eps = 1e-2; // large, so the ε term matters in the check
    let (dx, dg) = ref_backward(&x, &gain, &w, rows, dim, eps);
    let loss = |x: &[f64], g: &[f64]| -> f64 {
        let (y, _) = ref_forward(x, g, rows, dim, eps);
        y.iter().zip(&w).map(|(a, b)| a * b).sum()
    };
    let e_x = fd_check(&mut |v| loss(v, &gain), &x, &dx, 40, &mut rng);
    let e_g = fd_check(&mut |v| loss(&x, v), &gain, &dg, 20, &mut rng);
    assert!(e_x < 1e-6 && e_g < 1e-6, "fd: dx {e_x:e} dgain {e_g:e} (seed {})", rng.seed);
}

#[test]
fn rmsnorm_is_bit_identical_run_after_run() {
    let mut rng = Rng::fresh();
    let (rows, dim) = (3001, 85);
    let x = rng.normal(rows * dim, 1.0);
    let gain = rng.uniform(dim, 0.5, 1.5);
    let dy = rng.normal(rows * dim, 1.0);
    let dg0 = rng.normal(dim, 1.0);
    let a = run_gpu(&gpu(), &x, &gain, &dy, None, &dg0, rows, dim, EPS);
    let b = run_gpu(&gpu(), &x, &gain, &dy, None, &dg0, rows, dim, EPS);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (name, p, q) in
        [("y", &a.y, &b.y), ("rstd", &a.rstd, &b.rstd), ("dx", &a.dx, &b.dx), ("dgain", &a.dgain, &b.dgain)]
    {
        assert!(bits(p) == bits(q), "{name} differs between runs (seed {})", rng.seed);
    }
    // The vec teams, at a width they take.
    let dim = 84;
    let x = rng.normal(rows * dim, 1.0);
    let gain = rng.uniform(dim, 0.5, 1.5);
    let dy = rng.normal(rows * dim, 1.0);
    let dg0 = rng.normal(dim, 1.0);
    let g = gpu().with_forms(|f| (f.norm_vec, f.norm_one_row_per_invocation) = (true, false));
    assert!(norm::vec_team(&g, rows, dim, &[]).is_some());
    let a = run_gpu(&g, &x, &gain, &dy, None, &dg0, rows, dim, EPS);
    let b = run_gpu(&g, &x, &gain, &dy, None, &dg0, rows, dim, EPS);
    for (name, p, q) in
        [("y", &a.y, &b.y), ("rstd", &a.rstd, &b.rstd), ("dx", &a.dx, &b.dx), ("dgain", &a.dgain, &b.dgain)]
    {
        assert!(bits(p) == bits(q), "vec teams: {name} differs between runs (seed {})", rng.seed);
    }
}

#[test]
fn quad_entry_points_give_the_bits_of_the_one_row_per_invocation_loops() {
    // Same sums in the same order, four features per load: bit-identical. Rows that leave idle
    // invocations in the last workgroup, both dx modes.
    let mut rng = Rng::fresh();
    for &(rows, dim, acc) in &[(300usize, 384usize, false), (77, 64, true), (5, 4, false), (257, 128, true)] {
        let x = rng.normal(rows * dim, 1.0);
        let gain = rng.uniform(dim, 0.5, 1.5);
        let dy = rng.normal(rows * dim, 1.0);
        let dx0 = rng.normal(rows * dim, 1.0);
        let dg0 = rng.normal(dim, 1.0);
        let g = gpu();
        assert!(norm::quads(&g, 1, dim, &[]) && !norm::quads(&g, 1, dim + 2, &[]) && !norm::quads(&g, 4, dim, &[]));
        assert!(!norm::quads(&g.with_forms(|f| f.norm_quads = false), 1, dim, &[]));
        let run = |q: bool| {
            with_forms(
                &g,
                |f| (f.norm_team, f.norm_quads) = (Some(1), q),
                |gpu| run_gpu(gpu, &x, &gain, &dy, acc.then_some(&dx0[..]), &dg0, rows, dim, EPS),
            )
        };
        let (a, b) = (run(true), run(false));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (name, p, q) in
            [("y", &a.y, &b.y), ("rstd", &a.rstd, &b.rstd), ("dx", &a.dx, &b.dx), ("dgain", &a.dgain, &b.dgain)]
        {
            assert!(
                bits(p) == bits(q),
                "{name} rows={rows} dim={dim}: quads differ from the loops (seed {})",
                rng.seed
            );
        }
    }
}

#[test]
fn rmsnorm_recorded_dispatches_can_be_replayed() {
    // The same bound dispatches recorded twice: dγ accumulates twice, dx is rewritten.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let (rows, dim) = (37, 33);
    let x = rng.normal(rows * dim, 1.0);
    let gain = rng.uniform(dim, 0.5, 1.5);
    let dy = rng.normal(rows * dim, 1.0);
    let (tx, tg, tdy) = (upload(&gpu, "x", &x), upload(&gpu, "gain", &gain), upload(&gpu, "dy", &dy));
    let y = poisoned(&gpu, "y", &[rows * dim]);
    let rstd = poisoned(&gpu, "rstd", &[rows]);
    let dx = poisoned(&gpu, "dx", &[rows * dim]);
    let dgain = upload(&gpu, "dgain", &vec![0.0; dim]);
    let mut ds = norm::rmsnorm_forward(&gpu, tx.view(), tg.view(), y.view(), rstd.view(), rows, dim, EPS).unwrap();
    ds.extend(
        norm::rmsnorm_backward(
            &gpu,
            norm::NormGrads {
                x: tx.view(),
                gain: tg.view(),
                rstd: rstd.view(),
                dy: tdy.view(),
                dx: dx.view(),
                dgain: dgain.view(),
            },
            rows,
            dim,
            false,
        )
        .unwrap(),
    );
    run(&gpu, &ds);
    run(&gpu, &ds);
    let (xd, gd, dyd) = (f64v(&x), f64v(&gain), f64v(&dy));
    let (wdx, wdg) = ref_backward(&xd, &gd, &dyd, rows, dim, EPS as f64);
    let wdg2: Vec<f64> = wdg.iter().map(|v| 2.0 * v).collect();
    assert_close("replayed dx", &read(&gpu, &dx), &wdx, 1e-4, rng.seed);
    assert_close("replayed dgain", &read(&gpu, &dgain), &wdg2, 1e-4, rng.seed);
}

#[test]
fn rmsnorm_shape_errors_are_reported_not_panicked() {
    let gpu = gpu();
    let big = upload(&gpu, "big", &[0.0; 64]);
    let small = Tensor::from_f32(&gpu, "small", &[5], &[0.0; 5]).unwrap();
    let e = norm::rmsnorm_forward(&gpu, big.view(), small.view(), big.view(), big.view(), 4, 8, EPS).unwrap_err();
    assert!(e.to_string().contains("'gain' needs 8 elements, the view has 5"), "{e}");
    let e = norm::rmsnorm_forward(&gpu, big.view(), big.view(), big.view(), small.view(), 8, 8, EPS).unwrap_err();
    assert!(e.to_string().contains("'rstd' needs 8 elements"), "{e}");
    let e = norm::rmsnorm_backward(
        &gpu,
        norm::NormGrads {
            x: big.view(),
            gain: big.view(),
            rstd: big.view(),
            dy: small.view(),
            dx: big.view(),
            dgain: big.view(),
        },
        4,
        8,
        false,
    )
    .unwrap_err();
    assert!(e.to_string().contains("'dy' needs 32 elements, the view has 5"), "{e}");
    let e = norm::rmsnorm_forward(&gpu, big.view(), big.view(), big.view(), big.view(), 0, 8, EPS).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
}

/// Gradients of the heads folded into the norm backward, float64: with c = RMSNorm(x), the
/// write's z_t = w_β·c_t + b_β and u_t = W_v x_t + b_v, and upstream dy (into c), ∂z, ∂u.
struct HeadsRef {
    dx: Vec<f64>,
    dg: Vec<f64>,
    dwb: Vec<f64>,
    dbb: f64,
    dwv: Vec<f64>,
    dbv: Vec<f64>,
}

fn abs(v: &[f32]) -> Vec<f64> {
    v.iter().map(|x| x.abs() as f64).collect()
}

#[allow(clippy::too_many_arguments)]
fn ref_heads(
    x: &[f64],
    gain: &[f64],
    dy: &[f64],
    dz: &[f64],
    du: &[f64],
    wb: &[f64],
    wv: &[f64],
    rows: usize,
    dim: usize,
    m: usize,
) -> HeadsRef {
    let eps = EPS as f64;
    let (c, _) = ref_forward(x, gain, rows, dim, eps);
    let mut dyt = dy.to_vec();
    for t in 0..rows {
        for i in 0..dim {
            dyt[t * dim + i] += dz[t] * wb[i];
        }
    }
    let (mut dx, dg) = ref_backward(x, gain, &dyt, rows, dim, eps);
    let (mut dwb, mut dbb, mut dwv, mut dbv) = (vec![0.0; dim], 0.0, vec![0.0; m * dim], vec![0.0; m]);
    for t in 0..rows {
        dbb += dz[t];
        for i in 0..dim {
            let ti = t * dim + i;
            dwb[i] += dz[t] * c[ti];
            for j in 0..m {
                dx[ti] += wv[j * dim + i] * du[t * m + j];
                dwv[j * dim + i] += du[t * m + j] * x[ti];
            }
        }
        for j in 0..m {
            dbv[j] += du[t * m + j];
        }
    }
    HeadsRef { dx, dg, dwb, dbb, dwv, dbv }
}

#[test]
fn the_heads_reference_matches_finite_differences() {
    let mut rng = Rng::fresh();
    let (rows, dim, m) = (5, 6, 3);
    let x = f64v(&rng.normal(rows * dim, 1.0));
    let gain = f64v(&rng.uniform(dim, 0.5, 1.5));
    let (dy, dz, du) =
        (f64v(&rng.normal(rows * dim, 1.0)), f64v(&rng.normal(rows, 1.0)), f64v(&rng.normal(rows * m, 1.0)));
    let (wb, wv) = (f64v(&rng.normal(dim, 1.0)), f64v(&rng.normal(m * dim, 1.0)));
    let (bb, bv) = (0.3, f64v(&rng.normal(m, 1.0)));
    let h = ref_heads(&x, &gain, &dy, &dz, &du, &wb, &wv, rows, dim, m);
    // L = Σ_t dy_t·c_t + ∂z_t (w_β·c_t + b_β) + ∂u_t·(W_v x_t + b_v)
    let loss = |x: &[f64], g: &[f64], wb: &[f64], bb: f64, wv: &[f64], bv: &[f64]| -> f64 {
        let (c, _) = ref_forward(x, g, rows, dim, EPS as f64);
        let mut l = 0.0;
        for t in 0..rows {
            let mut z = bb;
            for i in 0..dim {
                l += dy[t * dim + i] * c[t * dim + i];
                z += wb[i] * c[t * dim + i];
            }
            l += dz[t] * z;
            for j in 0..m {
                let u = bv[j] + (0..dim).map(|i| wv[j * dim + i] * x[t * dim + i]).sum::<f64>();
                l += du[t * m + j] * u;
            }
        }
        l
    };
    let e = [
        fd_check(&mut |v| loss(v, &gain, &wb, bb, &wv, &bv), &x, &h.dx, 30, &mut rng),
        fd_check(&mut |v| loss(&x, v, &wb, bb, &wv, &bv), &gain, &h.dg, 6, &mut rng),
        fd_check(&mut |v| loss(&x, &gain, v, bb, &wv, &bv), &wb, &h.dwb, 6, &mut rng),
        fd_check(&mut |v| loss(&x, &gain, &wb, v[0], &wv, &bv), &[bb], &[h.dbb], 1, &mut rng),
        fd_check(&mut |v| loss(&x, &gain, &wb, bb, v, &bv), &wv, &h.dwv, 10, &mut rng),
        fd_check(&mut |v| loss(&x, &gain, &wb, bb, &wv, v), &bv, &h.dbv, 3, &mut rng),
    ];
    assert!(e.iter().all(|&e| e < 1e-6), "fd errors (dx, dγ, dw_β, db_β, dW_v, db_v) {e:?} (seed {})", rng.seed);
}

/// The delta write's heads folded into the norm backward (`norm::rmsnorm_backward_heads`, the
/// CPU-adapter path of the model's DDL sublayers) against float64: ∂c = dy + ∂z_t w_β, dx = the
/// norm backward of ∂c + W_vᵀ∂u_t (written or added), dγ, and the four head gradients added into
/// one buffer laid out like the model's (each at a 64-element boundary; the gaps must stay as
/// they were). Rows past the subgroup tiles (odd), m = 1, 3, 4, with and without the
/// subgroup-shared loads.
fn check_heads(gpu: &Gpu, rows: usize, dim: usize, m: usize, accumulate_dx: bool) {
    let mut rng = Rng::fresh();
    let x = rng.normal(rows * dim, 1.3);
    let gain = rng.uniform(dim, 0.5, 1.5);
    let dy = rng.normal(rows * dim, 1.0);
    let dx0 = rng.normal(rows * dim, 1.0);
    let dgain0 = rng.normal(dim, 1.0);
    let (dz, du) = (rng.normal(rows, 1.0), rng.normal(rows * m, 1.0));
    let (wb, wv) = (rng.normal(dim, 0.5), rng.normal(m * dim, 0.5));
    let a = |v: usize| v.next_multiple_of(64);
    let (o_wb, o_bb) = (0, a(dim));
    let o_wv = a(o_bb + 1);
    let o_bv = a(o_wv + m * dim);
    let hg0 = rng.normal(o_bv + m + 5, 1.0);

    let (tx, tg, tdy) = (upload(gpu, "x", &x), upload(gpu, "gain", &gain), upload(gpu, "dy", &dy));
    let (tdz, tdu, twb, twv) =
        (upload(gpu, "dz", &dz), upload(gpu, "du", &du), upload(gpu, "wb", &wb), upload(gpu, "wv", &wv));
    let y = poisoned(gpu, "y", &[rows * dim]);
    let rstd = poisoned(gpu, "rstd", &[rows]);
    let dx = if accumulate_dx { upload(gpu, "dx", &dx0) } else { poisoned(gpu, "dx", &[rows * dim]) };
    let dgain = upload(gpu, "dgain", &dgain0);
    let hg = upload(gpu, "head grads", &hg0);
    let hv = hg.view();
    let terms = norm::HeadTerms {
        m,
        dz: tdz.view(),
        du: tdu.view(),
        w_beta: twb.view(),
        w_v: twv.view(),
        dw_beta: hv.sub(o_wb, dim),
        db_beta: hv.sub(o_bb, 1),
        dw_v: hv.sub(o_wv, m * dim),
        db_v: hv.sub(o_bv, m),
    };
    assert!(norm::folds_heads(gpu, rows, dim, m, &[]), "the heads must fold at rows {rows} dim {dim} m {m}");
    let mut ds = norm::rmsnorm_forward(gpu, tx.view(), tg.view(), y.view(), rstd.view(), rows, dim, EPS).unwrap();
    ds.extend(
        norm::rmsnorm_backward_heads(
            gpu,
            norm::NormGrads {
                x: tx.view(),
                gain: tg.view(),
                rstd: rstd.view(),
                dy: tdy.view(),
                dx: dx.view(),
                dgain: dgain.view(),
            },
            rows,
            dim,
            accumulate_dx,
            &terms,
        )
        .unwrap(),
    );
    run(gpu, &ds);

    // float64
    let h =
        ref_heads(&f64v(&x), &f64v(&gain), &f64v(&dy), &f64v(&dz), &f64v(&du), &f64v(&wb), &f64v(&wv), rows, dim, m);
    let (mut wdx, mut wdg) = (h.dx.clone(), h.dg.clone());
    if accumulate_dx {
        for (w, a) in wdx.iter_mut().zip(&dx0) {
            *w += *a as f64;
        }
    }
    // The head gradients added into their places in the flat gradient buffer.
    let placed = |mut v: Vec<f64>, h: &HeadsRef| {
        for (off, g) in [(o_wb, &h.dwb[..]), (o_bb, &[h.dbb][..]), (o_wv, &h.dwv[..]), (o_bv, &h.dbv[..])] {
            for (k, g) in g.iter().enumerate() {
                v[off + k] += g;
            }
        }
        v
    };
    let whg = placed(f64v(&hg0), &h);
    for (w, g0) in wdg.iter_mut().zip(&dgain0) {
        *w += *g0 as f64;
    }
    let tag = format!("rows={rows} dim={dim} m={m} acc={accumulate_dx}");
    assert_close(&format!("heads norm dx {tag}"), &read(gpu, &dx), &wdx, 1e-4, rng.seed);
    assert_close(&format!("heads norm dgain {tag}"), &read(gpu, &dgain), &wdg, 1e-4, rng.seed);
    let got = read(gpu, &hg);
    // A head gradient is a preload plus a sum over the rows of terms of both signs: where it
    // nearly cancels (db_beta is one such sum), its own size says nothing of the rounding, so an
    // element also passes within 1e-4 of its scale, the preload's and the terms' magnitudes
    // (the reference on absolute values: |c| = c(|x|, |γ|), the rstd being the same).
    let ha = ref_heads(&abs(&x), &abs(&gain), &abs(&dy), &abs(&dz), &abs(&du), &abs(&wb), &abs(&wv), rows, dim, m);
    let scale = placed(abs(&hg0), &ha);
    for (name, off, len) in [("dw_beta", o_wb, dim), ("db_beta", o_bb, 1), ("dw_v", o_wv, m * dim), ("db_v", o_bv, m)] {
        let (g, w, sc) = (&got[off..off + len], &whg[off..off + len], &scale[off..off + len]);
        let within = g.iter().zip(w).zip(sc).all(|((&g, &w), &sc)| g.is_finite() && (g as f64 - w).abs() <= 1e-4 * sc);
        if !within {
            assert_close(&format!("heads {name} {tag}"), g, w, 1e-4, rng.seed);
        }
    }
    let inside = |k: usize| {
        (o_wb..o_wb + dim).contains(&k)
            || k == o_bb
            || (o_wv..o_wv + m * dim).contains(&k)
            || (o_bv..o_bv + m).contains(&k)
    };
    for (k, (g, g0)) in got.iter().zip(&hg0).enumerate() {
        assert!(inside(k) || g.to_bits() == g0.to_bits(), "{tag}: element {k} between the head gradients changed");
    }
}

#[test]
fn the_heads_folded_into_the_norm_backward_match_float64() {
    for sg in [true, false] {
        let g = gpu();
        let sg = sg && g.features.contains(wgpu::Features::SUBGROUP);
        with_forms(
            &g,
            |f| (f.subgroup_loads, f.norm_team) = (sg, Some(1)),
            |gpu| {
                for (rows, dim, m, acc) in
                    [(67, 12, 4, false), (130, 36, 3, true), (64, 4, 1, false), (301, 128, 4, true)]
                {
                    check_heads(gpu, rows, dim, m, acc);
                }
            },
        );
    }
}

#[test]
fn the_heads_fold_only_where_the_quad_kernels_run() {
    let gpu = gpu();
    with_forms(
        &gpu,
        |f| f.norm_team = Some(1),
        |gpu| {
            assert!(norm::folds_heads(gpu, 64, 8, 4, &[]));
            assert!(!norm::folds_heads(gpu, 64, 10, 4, &[]), "dim not a multiple of 4");
            assert!(!norm::folds_heads(gpu, 64, 8, 5, &[]), "m above 4");
            assert!(with_forms(gpu, |f| f.norm_heads = false, |gpu| !norm::folds_heads(gpu, 64, 8, 4, &[])));
        },
    );
    with_forms(&gpu, |f| f.norm_team = Some(4), |gpu| assert!(!norm::folds_heads(gpu, 64, 8, 4, &[]), "teams of four"));
}
