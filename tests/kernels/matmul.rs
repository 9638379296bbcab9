//! Matmul against float64 for every form, variant, odd and degenerate size, batches and
//! accumulation.

use super::common::*;
use ddl::gpu::View;
use ddl::kernels::matmul::{self, MAX_K_PER_DISPATCH, Matmul, MatmulElem, Operand};

/// float64 reference of `C (+)= alpha·A·B` over the operands' strided views (every batch of both
/// levels, `outer` and `batch`), for the rows `i % row_step == 0` (other rows of C are left as in
/// `c0`).
fn reference(mm: &Matmul, a: &[f32], b: &[f32], c0: &[f32], row_step: usize) -> Vec<f64> {
    let mut c: Vec<f64> = c0.iter().map(|&x| x as f64).collect();
    for (ob, bt) in batches(mm) {
        for i in (0..mm.m).step_by(row_step) {
            for j in 0..mm.n {
                let mut s = 0.0f64;
                for p in 0..mm.k {
                    s += a[at(mm, 0, ob, bt, i, p)] as f64 * b[at(mm, 1, ob, bt, p, j)] as f64;
                }
                let idx = at(mm, 2, ob, bt, i, j);
                c[idx] = mm.alpha as f64 * s + if mm.accumulate { c[idx] } else { 0.0 };
            }
        }
    }
    c
}

/// Every (outer, batch) pair of `mm`'s two batch levels.
fn batches(mm: &Matmul) -> impl Iterator<Item = (usize, usize)> + use<> {
    let batch = mm.batch;
    (0..mm.outer.max(1)).flat_map(move |ob| (0..batch).map(move |bt| (ob, bt)))
}

/// The element of operand `which` (0 A, 1 B, 2 C) at row `r`, column `col` of batch `bt` of
/// outer batch `ob`.
fn at(mm: &Matmul, which: usize, ob: usize, bt: usize, r: usize, col: usize) -> usize {
    let o = [&mm.a, &mm.b, &mm.c][which];
    ob * mm.outer_strides[which] + o.offset + bt * o.batch_stride + r * o.row_stride + col * o.col_stride
}

/// Uploads an operand as `elem` stores it: f32, or packed f16 pairs (padded to whole vec4s).
fn upload_elem(gpu: &ddl::gpu::Gpu, label: &str, v: &[f32], elem: MatmulElem) -> ddl::gpu::Tensor {
    if elem == MatmulElem::F16 {
        let mut v = v.to_vec();
        v.resize(v.len().next_multiple_of(4), 0.0);
        upload(gpu, label, &f16_pack(&v))
    } else {
        upload(gpu, label, v)
    }
}

type Bind<'a> = dyn Fn(&ddl::gpu::Gpu, View, View, View) -> Vec<ddl::gpu::Dispatch> + 'a;

fn extent(o: &Operand, rows: usize, cols: usize, batch: usize) -> usize {
    o.offset + (batch - 1) * o.batch_stride + (rows - 1) * o.row_stride + (cols - 1) * o.col_stride + 1
}

/// Runs `mm` with `variant` (None = the runtime's pick) on random data and checks it.
fn check(mm: Matmul, variant: Option<&str>) -> Vec<f32> {
    check_rows(mm, variant, 1)
}

/// `check`, comparing only every `row_step`-th row with float64 (every element of the product
/// must still have been written).
fn check_rows(mm: Matmul, variant: Option<&str>, row_step: usize) -> Vec<f32> {
    check_bound(mm, row_step, &format!("{variant:?}"), &|gpu, a, b, c| match variant {
        Some(v) => vec![mm.bind_variant(gpu, v, a, b, c).unwrap()],
        None => vec![mm.bind(gpu, a, b, c).unwrap()],
    })
}

/// `check_rows` with the dispatches made by `bind` (A, B and C views given).
fn check_bound(mm: Matmul, row_step: usize, how: &str, bind: &Bind<'_>) -> Vec<f32> {
    check_bound_tol(mm, row_step, how, bind, 1e-5)
}

/// [`check_bound`] at relative L2 `tol` (and `tol / 10` of the products' magnitude).
fn check_bound_tol(mm: Matmul, row_step: usize, how: &str, bind: &Bind<'_>, tol: f64) -> Vec<f32> {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    // f16 operands get values an f16 holds exactly: the product must then be the f32 one.
    let draw = |rng: &mut Rng, n: usize, e: MatmulElem| {
        let v = rng.uniform(n, -1.0, 1.0);
        if e.half() { f16_round(&v) } else { v }
    };
    // (The library's extents: both batch levels, and the padding a padded read reaches.)
    let [a_len, b_len, c_len] = mm.extents();
    let a = draw(&mut rng, a_len, mm.a_elem);
    let b = draw(&mut rng, b_len, mm.b_elem);
    let (ta, tb) = (upload_elem(&gpu, "a", &a, mm.a_elem), upload_elem(&gpu, "b", &b, mm.b_elem));
    let (tc, c0) = if mm.accumulate {
        let c0 = rng.uniform(c_len, -1.0, 1.0);
        (upload(&gpu, "c", &c0), c0)
    } else {
        (poisoned(&gpu, "c", &[c_len]), vec![0.0; c_len])
    };
    run(&gpu, &bind(&gpu, ta.view(), tb.view(), tc.view()));
    let got = tc.read_f32(&gpu).unwrap();
    let mut want = reference(&mm, &a, &b, &c0, row_step);
    // Elements of C outside the product (strided layouts) must stay as they were: NaN.
    let mut got_cmp = got.clone();
    for (g, w) in got_cmp.iter_mut().zip(want.iter_mut()) {
        if !mm.accumulate && g.is_nan() {
            *g = 0.0;
            *w = 0.0;
        }
    }
    // Rows the reference skipped compare equal by construction.
    if row_step > 1 {
        for (ob, bt) in batches(&mm) {
            for i in (0..mm.m).filter(|i| i % row_step != 0) {
                for j in 0..mm.n {
                    let idx = at(&mm, 2, ob, bt, i, j);
                    want[idx] = got_cmp[idx] as f64;
                }
            }
        }
    }
    let name = format!("matmul {}x{}x{} b{} {how}", mm.m, mm.n, mm.k, mm.batch);
    // A short dot product can cancel (e.g. K = 2 giving 1e-3 from inputs of size 1): judge the
    // error against the products' magnitude Σ|a||b| as well, the scale float32 rounding is
    // relative to; either bound passing is correct float32 arithmetic.
    let r = ddl::testing::compare(&name, &got_cmp, &want);
    if !r.passes(tol) {
        let abs_a: Vec<f32> = a.iter().map(|x| x.abs()).collect();
        let abs_b: Vec<f32> = b.iter().map(|x| x.abs()).collect();
        let mag = reference(
            &Matmul { accumulate: false, alpha: mm.alpha.abs(), ..mm },
            &abs_a,
            &abs_b,
            &vec![0.0; c_len],
            row_step,
        );
        let num: f64 = got_cmp.iter().zip(&want).map(|(g, w)| (*g as f64 - w).powi(2)).sum::<f64>().sqrt();
        let den: f64 = mag.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!(
            r.non_finite == 0 && num <= tol / 10.0 * den,
            "{r}\n  error {:.3e} of the products' magnitude; replay with DDL_TEST_SEED={}",
            num / den,
            rng.seed
        );
    }
    // …but every element inside the product must have been written.
    for (ob, bt) in batches(&mm) {
        for i in 0..mm.m {
            for j in 0..mm.n {
                assert!(!got[at(&mm, 2, ob, bt, i, j)].is_nan(), "{name}: C[{ob},{bt},{i},{j}] not written");
            }
        }
    }
    got
}

const SIZES: &[(usize, usize, usize)] =
    &[(1, 1, 1), (67, 85, 33), (1000, 3, 7), (3, 1000, 2), (2, 5, 300), (64, 64, 64), (129, 65, 17)];

#[test]
fn every_form_and_variant_matches_float64_at_odd_sizes() {
    for v in matmul::variants_for(&ddl::testing::gpu()) {
        for &(m, n, k) in SIZES {
            for mm in [Matmul::nn(m, n, k), Matmul::nt(m, n, k), Matmul::tn(m, n, k), Matmul::tt(m, n, k)] {
                check(mm, Some(v));
            }
        }
    }
}

#[test]
fn the_runtime_pick_is_correct_at_1024_cubed() {
    // Every element is checked for being written; every 8th row against float64.
    check_rows(Matmul::nn(1024, 1024, 1024), None, 8);
    check_rows(Matmul::tn(1024, 1024, 1024), None, 8);
}

#[test]
fn accumulate_adds_into_c_and_alpha_scales() {
    for v in matmul::variants_for(&ddl::testing::gpu()) {
        check(Matmul::nt(37, 29, 41).accumulate(true).alpha(0.37), Some(v));
        check(Matmul::tn(5, 71, 13).accumulate(true), Some(v));
    }
}

/// Attention-like: per head, Q_h (T×h) · K_hᵀ where heads are interleaved in rows of H·h; C
/// offset, padded rows and batch gaps.
fn attention_like() -> Matmul {
    let (t, h, heads) = (19, 7, 3);
    let row = heads * h;
    Matmul {
        m: t,
        n: t,
        k: h,
        batch: heads,
        a: Operand { offset: 0, row_stride: row, col_stride: 1, batch_stride: h },
        b: Operand { offset: 5, row_stride: 1, col_stride: row, batch_stride: h },
        c: Operand { offset: 3, row_stride: t + 2, col_stride: 1, batch_stride: t * (t + 2) + 1 },
        accumulate: false,
        alpha: 0.5,
        outer: 1,
        outer_strides: [0; 3],
        pad_reads: [false; 2],
        a_elem: MatmulElem::F32,
        b_elem: MatmulElem::F32,
        causal: Default::default(),
    }
}

#[test]
fn batched_products_with_offsets_and_strides() {
    let mm = attention_like();
    for v in matmul::variants_for(&ddl::testing::gpu()) {
        check(mm, Some(v));
    }
    check(Matmul::nn(17, 23, 9).batched(5), None);
}

/// Strided operands whose offsets and strides allow vec4 loads although K is not a multiple of
/// 4 (the register kernels' K tail): `form` is "nt" (A along K, B along K) or "tn" (A along M,
/// B along N); batched, with a C wider than the product.
fn strided_tail(form: &str, m: usize, n: usize, k: usize, batch: usize) -> Matmul {
    let pad = |x: usize| x.div_ceil(4) * 4 + 4;
    let (a, b) = if form == "nt" {
        let (ars, brs) = (pad(k), pad(k));
        (
            Operand { offset: 4, row_stride: ars, col_stride: 1, batch_stride: m * ars + 8 },
            Operand { offset: 8, row_stride: 1, col_stride: brs, batch_stride: n * brs + 4 },
        )
    } else {
        let (acs, brs) = (pad(m), pad(n));
        (
            Operand { offset: 4, row_stride: 1, col_stride: acs, batch_stride: k * acs + 8 },
            Operand { offset: 8, row_stride: brs, col_stride: 1, batch_stride: k * brs + 4 },
        )
    };
    Matmul {
        m,
        n,
        k,
        batch,
        a,
        b,
        c: Operand { offset: 1, row_stride: n + 3, col_stride: 1, batch_stride: m * (n + 3) + 2 },
        accumulate: false,
        alpha: 1.0,
        outer: 1,
        outer_strides: [0; 3],
        pad_reads: [false; 2],
        a_elem: MatmulElem::F32,
        b_elem: MatmulElem::F32,
        causal: Default::default(),
    }
}

/// Products that reach every entry point of the register-block variants (edge tiles: M and N
/// are not multiples of any tile), with the entry point each must use.
fn entry_point_cases() -> Vec<(Matmul, &'static str)> {
    vec![
        (Matmul::nt(132, 68, 36), "mm_kk"),
        (Matmul::nn(132, 68, 36), "mm_kn"),
        (Matmul::tn(132, 68, 36), "mm_mn"),
        (Matmul::tt(132, 68, 36), "mm_mk"),
        (Matmul::nt(1, 20, 64), "mm_kk"),
        (Matmul::tn(12, 4, 7), "mm_mn"),
        (strided_tail("nt", 20, 37, 37, 3), "mm_kk"),
        (strided_tail("tn", 20, 36, 39, 2), "mm_mn"),
        (Matmul::nt(67, 85, 33), "mm_ss"),
        (Matmul::tn(65, 384, 30), "mm_ss"),
        (Matmul::nn(9, 132, 4).alpha(-0.5), "mm_kn"),
        // Several staged tiles each way, K a whole number of stages.
        (Matmul::nn(260, 200, 48), "mm_kn"),
        // Aligned strides but K < 4: buffers shorter than one vec4 cannot be bound as vec4s.
        (
            Matmul {
                a: Operand { offset: 0, row_stride: 4, col_stride: 1, batch_stride: 4 },
                b: Operand { offset: 0, row_stride: 1, col_stride: 4, batch_stride: 4 },
                ..Matmul::nt(1, 1, 2)
            },
            "mm_ss",
        ),
    ]
}

/// The entry point a register-block variant runs for the vec4 form `entry`: the `_g` one in
/// the subgroup variants (`mm_ss` has none).
fn subgroup_entry(v: &str, entry: &'static str) -> String {
    if matmul::subgroup_variant(v) && entry != "mm_ss" { format!("{entry}_g") } else { entry.to_string() }
}

fn register_variants() -> Vec<&'static str> {
    matmul::variants_for(&ddl::testing::gpu()).into_iter().filter(|v| matmul::direct(v).unwrap()).collect()
}

#[test]
fn every_entry_point_of_the_register_kernels_matches_float64() {
    let direct = register_variants();
    assert!(direct.len() >= 2, "{direct:?}");
    for v in direct {
        for (mm, entry) in entry_point_cases() {
            assert_eq!(mm.entry_point(v).unwrap(), subgroup_entry(v, entry), "{mm:?}");
            check(mm, Some(v));
            check(mm.accumulate(true), Some(v));
        }
    }
}

fn staged_variants() -> Vec<&'static str> {
    let v: Vec<_> = matmul::variants_for(&ddl::testing::gpu()).into_iter().filter(|v| v.starts_with('w')).collect();
    assert_eq!(v, ["w128", "w128k16", "w64", "w128x64", "w64x128", "w128w"]);
    v
}

/// The entry point a staged variant runs for the register-block entry point `entry`.
fn staged_entry(entry: &'static str) -> String {
    if entry == "mm_ss" { entry.to_string() } else { entry.replace("mm_", "wm_") }
}

#[test]
fn every_entry_point_of_the_staged_kernels_matches_float64() {
    // Edge tiles, K below one stage (7, 4, 2), a stage tail (36, 37, …) and whole stages (48, 64).
    for v in staged_variants() {
        for (mm, entry) in entry_point_cases() {
            assert_eq!(mm.entry_point(v).unwrap(), staged_entry(entry), "{mm:?}");
            check(mm, Some(v));
            check(mm.accumulate(true), Some(v));
        }
    }
}

#[test]
fn the_staged_tiles_diagnostic_halves_compute_one_slice_and_are_never_picked() {
    // `TILE:mma` (the arithmetic alone), `TILE:stage` (the staging alone) and `TILE:fma` (the
    // FMAs alone) time the halves of a staged tile on a GPU; with K within one slice each is the
    // product, bit for bit, and past it none is (the first slice summed once per slice; the last
    // slice only; the first K step's operands for every step of a slice).
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let diag = matmul::staged_diagnostics_for(&gpu);
    assert_eq!(diag, matmul::STAGED_DIAGNOSTIC, "every staged tile's three halves");
    let run = |mm: &Matmul, v: &str, a: &ddl::gpu::Tensor, b: &ddl::gpu::Tensor| {
        let c = poisoned(&gpu, "c", &[mm.c.extent(mm.m, mm.n, mm.batch)]);
        let d = mm.bind_variant(&gpu, v, a.view(), b.view(), c.view()).unwrap();
        gpu.run(&[&d]).unwrap();
        c.read_f32(&gpu).unwrap()
    };
    for v in staged_variants() {
        let bk = ddl::shaders::MatmulKey::parse(v).unwrap().tile.bk;
        // (K a multiple of 4: rows of A and B along K as vec4s, the entry point `wm_kk`.)
        for (k, one_slice) in [(bk, true), (bk - 4, true), (3 * bk + 4, false)] {
            let mm = Matmul::nt(150, 70, k);
            assert_eq!(mm.entry_point(v).unwrap(), "wm_kk");
            let a = upload(&gpu, "a", &rng.normal(mm.a.extent(mm.m, mm.k, 1), 1.0));
            let b = upload(&gpu, "b", &rng.normal(mm.b.extent(mm.k, mm.n, 1), 1.0));
            let product = run(&mm, v, &a, &b);
            assert!(product.iter().all(|x| x.is_finite()), "{v} K={k}: the product wrote every output");
            for half in ["mma", "stage", "fma"] {
                let name = format!("{v}:{half}");
                let out = run(&mm, &name, &a, &b);
                assert!(out.iter().all(|x| x.is_finite()), "{name} K={k}: every output written (seed {})", rng.seed);
                assert_eq!(
                    same_bits(&out, &product),
                    one_slice,
                    "{name} K={k}: the product iff one slice (seed {})",
                    rng.seed
                );
            }
        }
    }
    // Other layouts are refused with the remedy, and no pick or autotune list holds the halves.
    let nn = Matmul::nn(64, 64, 64);
    let (a, b, c) = (upload(&gpu, "a", &[0.0; 4096]), upload(&gpu, "b", &[0.0; 4096]), upload(&gpu, "c", &[0.0; 4096]));
    let e = nn.bind_variant(&gpu, "w128:mma", a.view(), b.view(), c.view()).unwrap_err().to_string();
    assert!(e.contains("--cases nt") && e.contains("wm_kn"), "{e}");
    for d in matmul::STAGED_DIAGNOSTIC {
        assert!(!matmul::variants().contains(&d) && !matmul::variants_for(&gpu).contains(&d), "{d}");
    }
}

#[test]
fn all_variants_give_bit_identical_results() {
    // Same summation order in every variant and entry point: the autotuner may switch without
    // changing training. Each variant also runs twice and must repeat itself bit for bit.
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let mut cases: Vec<Matmul> = vec![Matmul::nt(77, 93, 131)];
    cases.extend(entry_point_cases().into_iter().map(|(mm, _)| mm));
    for mm in cases {
        let a = upload(&gpu, "a", &rng.normal(mm.a.extent(mm.m, mm.k, mm.batch), 1.0));
        let b = upload(&gpu, "b", &rng.normal(mm.b.extent(mm.k, mm.n, mm.batch), 1.0));
        let c_len = mm.c.extent(mm.m, mm.n, mm.batch);
        let mut outs = Vec::new();
        for v in matmul::variants_for(&ddl::testing::gpu()) {
            let c = poisoned(&gpu, "c", &[c_len]);
            let d = mm.bind_variant(&gpu, v, a.view(), b.view(), c.view()).unwrap();
            gpu.run(&[&d]).unwrap();
            let first = c.read_f32(&gpu).unwrap();
            gpu.run(&[&d]).unwrap();
            let second = c.read_f32(&gpu).unwrap();
            let same = |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
            assert!(same(&first, &second), "variant {v} is not deterministic on {mm:?} (seed {})", rng.seed);
            outs.push((v, second));
        }
        for (v, o) in &outs[1..] {
            let same = o.iter().zip(&outs[0].1).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "variant {v} ({}) differs from {} ({}) on {mm:?} (seed {})",
                mm.entry_point(v).unwrap(),
                outs[0].0,
                mm.entry_point(outs[0].0).unwrap(),
                rng.seed
            );
        }
    }
}

#[test]
fn more_than_65535_workgroups_cover_every_tile() {
    // t16 needs 65537 workgroups here and r8 131073: the grid is split over x and y.
    let m = 16 * 65536 + 3;
    for v in ["t16", "r8"] {
        let mm = Matmul::nn(m, 3, 2);
        let (bm, bn) = matmul::tile(v).unwrap();
        assert!(m.div_ceil(bm) * 3usize.div_ceil(bn) > 65535);
        check(mm, Some(v));
    }
}

#[test]
fn the_heuristic_picks_register_blocks_on_cpus_and_staged_tiles_on_gpus() {
    // Both cost models on any adapter (the `cpu` form says which one a device uses), the CPU one
    // with 2 worker threads (the development and CI machines').
    for cpu in [true, false] {
        let gpu = gpu().with_forms(|f| (f.cpu, f.cpu_threads) = (cpu, 2));
        let big = Matmul::nt(2048, 1024, 384);
        let decode = Matmul::nt(1, 1024, 384);
        let (hb, hd) = (matmul::heuristic(&gpu, &big), matmul::heuristic(&gpu, &decode));
        if cpu {
            // With subgroups of at most 8 (llvmpipe) the same tiles loading A once per subgroup.
            let g = if matmul::subgroup_variants(&gpu) { "g" } else { "" };
            assert_eq!((hb.to_string(), hd.to_string()), (format!("r128{g}"), format!("r8{g}")));
            // Attention P·V per head (N = head size 64): the 64-column tile, not half a 128 one.
            let pv = Matmul::nn(256, 64, 256).batched(48);
            assert_eq!(matmul::heuristic(&gpu, &pv), format!("c64{g}"));
        } else {
            // The staged tiles where they fill the card, register blocks below that.
            assert_eq!((hb, hd), ("w128", "r8"));
            assert_eq!(matmul::heuristic(&gpu, &Matmul::nt(1024, 768, 768)), "w64");
            assert_eq!(matmul::heuristic(&gpu, &Matmul::nn(256, 64, 256).batched(2)), "c64");
        }
    }
}

#[test]
fn subgroup_variants_exist_exactly_where_subgroups_fit_in_one_row_of_eight() {
    // The `…g` variants share A's row blocks over a subgroup, so every subgroup must lie within
    // one row of DX = 8 invocations: a fixed subgroup size dividing 8 (llvmpipe: 8).
    let gpu = gpu();
    let (lo, hi) = (gpu.info.subgroup_min_size, gpu.info.subgroup_max_size);
    let fits = gpu.features.contains(wgpu::Features::SUBGROUP) && lo == hi && 8 % hi.max(1) == 0 && hi >= 1;
    assert_eq!(matmul::subgroup_variants(&gpu), fits, "subgroups {lo}..{hi}");
    let with_g: Vec<_> = matmul::variants_for(&gpu).into_iter().filter(|v| matmul::subgroup_variant(v)).collect();
    assert_eq!(with_g.len(), if fits { 4 } else { 0 }, "{with_g:?}");
    if !fits {
        let a = upload(&gpu, "a", &[1.0; 16]);
        let c = upload(&gpu, "c", &[0.0; 16]);
        let e = Matmul::nn(4, 4, 4).bind_variant(&gpu, "r128g", a.view(), a.view(), c.view()).unwrap_err();
        assert!(e.to_string().contains("needs subgroups"), "{e}");
    } else {
        // Where they fit but the forms leave them out, the message names the form, not the
        // adapter's subgroups (which fit).
        let off = gpu.with_forms(|f| f.matmul_subgroup = false);
        let a = upload(&off, "a", &[1.0; 16]);
        let c = upload(&off, "c", &[0.0; 16]);
        let e = Matmul::nn(4, 4, 4).bind_variant(&off, "r128g", a.view(), a.view(), c.view()).unwrap_err();
        assert!(e.to_string().contains("matmul_subgroup=off"), "{e}");
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

#[test]
fn autotune_times_every_variant_and_ranks_them_fastest_first() {
    let gpu = gpu();
    let mm = Matmul::nt(64, 96, 40);
    let ranked = matmul::autotune::measure(&gpu, &mm, 2).unwrap();
    let mut names: Vec<&str> = ranked.iter().map(|r| r.0).collect();
    names.sort();
    let mut all = matmul::variants_for(&ddl::testing::gpu());
    all.sort();
    assert_eq!(names, all);
    assert!(ranked.windows(2).all(|w| w[0].1 <= w[1].1), "{ranked:?}");
    assert!(ranked.iter().all(|r| r.1.is_finite() && r.1 >= 0.0), "{ranked:?}");
}

/// `mm` bound with `bind_split_chunked(max_chunk)` against float64 (K split: float32 rounding
/// of the partial sums) and, when K is not split, bit for bit against the unsplit product.
/// Returns the piece sizes `[batch, M, N, K]`.
fn check_split(mm: Matmul, max_chunk: usize) -> [usize; 4] {
    let gpu = gpu();
    let sizes = mm.split_sizes(&gpu, max_chunk).unwrap();
    let pieces: usize = [mm.batch, mm.m, mm.n, mm.k].iter().zip(&sizes).map(|(f, s)| f.div_ceil(*s)).product();
    let how = format!("split {max_chunk} into {sizes:?}");
    check_bound(mm, 1, &how, &|gpu, a, b, c| {
        let ds = mm.bind_split_chunked(gpu, a, b, c, max_chunk).unwrap();
        assert_eq!(ds.len(), pieces, "{mm:?} {how}");
        ds
    });
    if sizes[3] == mm.k {
        // Same summation order per output: the same bits as one dispatch (on fresh inputs).
        let mut rng = Rng::fresh();
        let a = rng.uniform(extent(&mm.a, mm.m, mm.k, mm.batch), -1.0, 1.0);
        let b = rng.uniform(extent(&mm.b, mm.k, mm.n, mm.batch), -1.0, 1.0);
        let c_len = extent(&mm.c, mm.m, mm.n, mm.batch);
        let c0 = rng.uniform(c_len, -1.0, 1.0);
        let (ta, tb) = (upload_elem(&gpu, "a", &a, mm.a_elem), upload_elem(&gpu, "b", &b, mm.b_elem));
        let (split, whole) = (upload(&gpu, "c.split", &c0), upload(&gpu, "c.whole", &c0));
        run(&gpu, &mm.bind_split_chunked(&gpu, ta.view(), tb.view(), split.view(), max_chunk).unwrap());
        run(&gpu, &[mm.bind(&gpu, ta.view(), tb.view(), whole.view()).unwrap()]);
        let bits = |t| read(&gpu, t).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert!(bits(&split) == bits(&whole), "{mm:?} {how}: not bit-identical to one dispatch (seed {})", rng.seed);
    }
    sizes
}

#[test]
fn split_products_match_float64_in_every_form() {
    let align = (gpu().limits.min_storage_buffer_offset_alignment / 4) as usize;
    let mut k_split = 0;
    let mut mn_split = 0;
    for &(m, n, k) in &[(67, 85, 33), (129, 65, 17), (5, 300, 70), (300, 7, 129), (64, 64, 64)] {
        for mm in [Matmul::nn(m, n, k), Matmul::nt(m, n, k), Matmul::tn(m, n, k), Matmul::tt(m, n, k)] {
            for max_chunk in [700, 3000, 64 * align] {
                for mm in [mm, mm.accumulate(true).alpha(-0.75)] {
                    let s = check_split(mm, max_chunk);
                    k_split += (s[3] < k) as usize;
                    mn_split += (s[1] < m || s[2] < n) as usize;
                }
            }
        }
    }
    // Both kinds of split were exercised.
    assert!(k_split > 0 && mn_split > 0, "K split {k_split} times, M/N {mn_split}");
}

#[test]
fn split_products_keep_batches_offsets_and_strides() {
    // Strided, offset, batched operands (attention-like and register-kernel tails).
    let attn = attention_like();
    for max_chunk in [100, 300] {
        check_split(attn, max_chunk);
        check_split(strided_tail("nt", 20, 37, 37, 3), max_chunk * 4);
        check_split(strided_tail("tn", 20, 36, 39, 2), max_chunk * 4);
        // Packed batches split along the batch only: exact.
        let s = check_split(Matmul::nn(17, 23, 9).batched(5), max_chunk * 4);
        assert!(s[0] < 5, "{s:?}");
    }
}

#[test]
fn lm_head_shapes_split_along_the_vocabulary() {
    // The tied LM head at a reduced scale: E [V, d] larger than the binding, X [N, d].
    let (n, v, d) = (8, 1003, 24);
    let max_chunk = 8000; // E has 24072 elements
    // logits = X·Eᵀ and dE += dlogitsᵀ·X split along V only: exact.
    let s = check_split(Matmul::nt(n, v, d), max_chunk);
    assert!(s[2] < v && s[3] == d, "{s:?}");
    let s = check_split(Matmul::tn(v, d, n).accumulate(true), max_chunk);
    assert!(s[1] < v && s[3] == n, "{s:?}");
    // dX = dlogits·E reduces over V: E's rows must be split along K.
    let s = check_split(Matmul::nn(n, d, v), max_chunk);
    assert!(s[3] < v, "{s:?}");
}

#[test]
fn sums_over_more_than_65535_terms_are_split_along_k() {
    // Weight gradients sum over every token of a micro-batch (K = B·T). llvmpipe stops any shader
    // loop after 65 535 iterations, silently truncating the sum: bind_split caps K per dispatch
    // at MAX_K_PER_DISPATCH whatever the binding size, and the pieces accumulate.
    // (nn 9×4×300 001 in one dispatch: rel-L2 0.37 on lavapipe.)
    for mm in [Matmul::tn(3, 5, 70_001), Matmul::nn(9, 4, 300_001), Matmul::tn(33, 17, 262_147).accumulate(true)] {
        let s = check_split(mm, usize::MAX);
        assert!(s[3] <= MAX_K_PER_DISPATCH && s[3] < mm.k, "{mm:?}: K pieces of {}", s[3]);
    }
    // Below the cap nothing is split.
    assert_eq!(Matmul::tn(3, 5, MAX_K_PER_DISPATCH).split_sizes(&gpu(), usize::MAX).unwrap()[3], MAX_K_PER_DISPATCH);
}

#[test]
fn a_split_too_small_for_one_aligned_element_is_an_error() {
    let gpu = gpu();
    let a = upload(&gpu, "a", &[1.0; 64]);
    let c = upload(&gpu, "c", &[0.0; 64]);
    let e = Matmul::nn(8, 8, 8).bind_split_chunked(&gpu, a.view(), a.view(), c.view(), 1).unwrap_err();
    assert!(e.to_string().contains("matmul 8x8x8 operand"), "{e}");
}

/// Two batch levels (heads inside sequences of a `[seq, T, heads, h]` layout): every variant, and
/// the split path, against float64 per group, and bit-identical to one product per group.
#[test]
fn two_batch_levels_match_float64_and_one_product_per_group() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for (seqs, t, heads, h) in [(3, 19, 2, 7), (2, 16, 3, 8), (4, 5, 1, 4)] {
        let row = heads * h;
        let (sq, sc) = (t * row + 4, heads * t * (t + 1) + 8);
        let mm = Matmul {
            m: t,
            n: t,
            k: h,
            batch: heads,
            a: Operand { offset: 4, row_stride: row, col_stride: 1, batch_stride: h },
            b: Operand { offset: 0, row_stride: 1, col_stride: row, batch_stride: h },
            c: Operand { offset: 0, row_stride: t + 1, col_stride: 1, batch_stride: t * (t + 1) },
            accumulate: false,
            alpha: 0.75,
            outer: seqs,
            outer_strides: [sq, sq, sc],
            pad_reads: [false; 2],
            a_elem: MatmulElem::F32,
            b_elem: MatmulElem::F32,
            causal: Default::default(),
        };
        let [ea, eb, ec] = mm.extents();
        let a = rng.uniform(ea, -1.0, 1.0);
        let b = rng.uniform(eb, -1.0, 1.0);
        let (ta, tb) = (upload(&gpu, "a", &a), upload(&gpu, "b", &b));
        // The reference: each group as a one-level product with shifted offsets.
        let group = |o: usize| {
            let sh = |op: Operand, s: usize| Operand { offset: op.offset + o * s, ..op };
            Matmul { a: sh(mm.a, sq), b: sh(mm.b, sq), c: sh(mm.c, sc), outer: 1, outer_strides: [0; 3], ..mm }
        };
        let mut want = vec![0.0f64; ec];
        for o in 0..seqs {
            let g = group(o);
            let got = reference(&g, &a, &b, &vec![0.0; ec], 1);
            for bt in 0..heads {
                for i in 0..t {
                    for j in 0..t {
                        let idx = g.c.offset + bt * g.c.batch_stride + i * g.c.row_stride + j;
                        want[idx] = got[idx];
                    }
                }
            }
        }
        let mut per_group = None;
        for how in matmul::variants_for(&ddl::testing::gpu()).into_iter().map(Some).chain([None]) {
            let tc = poisoned(&gpu, "c", &[ec]);
            let ds = match how {
                Some(v) => vec![mm.bind_variant(&gpu, v, ta.view(), tb.view(), tc.view()).unwrap()],
                // Bindings of 64 elements force the split path (one group per piece, or less).
                None => mm.bind_split_chunked(&gpu, ta.view(), tb.view(), tc.view(), 64).unwrap(),
            };
            run(&gpu, &ds);
            let mut got = read(&gpu, &tc);
            // Gaps between the products stay NaN (never written); compare only the products.
            let mut w = want.clone();
            for (g, x) in got.iter_mut().zip(w.iter_mut()) {
                if g.is_nan() && *x == 0.0 {
                    *g = 0.0;
                }
            }
            assert_close(&format!("two-level {seqs}x{heads} t{t} h{h} {how:?}"), &got, &w, 1e-5, rng.seed);
            if how == Some("r128") {
                // One one-level product per group gives the same bits.
                let tc1 = poisoned(&gpu, "c1", &[ec]);
                for o in 0..seqs {
                    run(&gpu, &[group(o).bind_variant(&gpu, "r128", ta.view(), tb.view(), tc1.view()).unwrap()]);
                }
                per_group = Some((got.clone(), read(&gpu, &tc1)));
            }
        }
        let (two, one) = per_group.unwrap();
        for (x, y) in two.iter().zip(&one) {
            assert!(x.to_bits() == y.to_bits() || (y.is_nan() && *x == 0.0), "two levels vs per group: {x} vs {y}");
        }
    }
}

/// `pad_reads` (`pad_a`, `pad_b`): A's rows past M and B's columns past N (up to a multiple of 4) are read by the
/// vec4 kernels when M, N are not multiples of 4; NaN there must not reach any stored output.
#[test]
fn padded_operands_keep_the_vec4_kernels_and_ignore_what_lies_in_the_padding() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    // (M, N, K): the MLP products of F = 341 (tiny) at odd token counts, and small edges.
    for &(m, n, k) in &[(341usize, 128usize, 70usize), (128, 341, 77), (5, 3, 9), (341, 341, 33), (1, 2, 5)] {
        let (m4, n4) = (m.next_multiple_of(4), n.next_multiple_of(4));
        // Aᵀ·B with A stored [K, M4] and B stored [K, N4] (weight gradients over padded activations).
        let mm = Matmul {
            a: Operand { offset: 0, row_stride: 1, col_stride: m4, batch_stride: k * m4 },
            b: Operand { offset: 0, row_stride: n4, col_stride: 1, batch_stride: k * n4 },
            ..Matmul::tn(m, n, k)
        }
        .pad_a(true)
        .pad_b(true);
        let mut a = rng.uniform(k * m4, -1.0, 1.0);
        let mut b = rng.uniform(k * n4, -1.0, 1.0);
        for p in 0..k {
            a[p * m4 + m..(p + 1) * m4].fill(f32::NAN);
            b[p * n4 + n..(p + 1) * n4].fill(f32::NAN);
        }
        for v in register_variants().into_iter().chain(staged_variants()) {
            let want = if v.starts_with('w') { "wm_mn".to_string() } else { subgroup_entry(v, "mm_mn") };
            assert_eq!(mm.entry_point(v).unwrap(), want, "{m}x{n}x{k} {v}");
            for acc in [false, true] {
                let mm = mm.accumulate(acc);
                let c0 = rng.uniform(m * n, -1.0, 1.0);
                let (ta, tb) = (upload(&gpu, "a", &a), upload(&gpu, "b", &b));
                let tc = if acc { upload(&gpu, "c", &c0) } else { poisoned(&gpu, "c", &[m * n]) };
                run(&gpu, &[mm.bind_variant(&gpu, v, ta.view(), tb.view(), tc.view()).unwrap()]);
                let got = tc.read_f32(&gpu).unwrap();
                let want = reference(&mm, &a, &b, &if acc { c0 } else { vec![0.0; m * n] }, 1);
                let r = ddl::testing::compare(&format!("padded tn {m}x{n}x{k} {v} acc {acc}"), &got, &want);
                // (A short dot product can cancel: 1×2×5 gave 4e-3 from terms of size 1, 1.2e-5
                // relative. Judged against the products' magnitude Σ|a||b| too, as `check` does.)
                if !r.passes(1e-5) {
                    let abs = |x: &[f32]| x.iter().map(|v| v.abs()).collect::<Vec<f32>>();
                    let plain = Matmul { accumulate: false, ..mm };
                    let mag = reference(&plain, &abs(&a), &abs(&b), &vec![0.0; m * n], 1);
                    let num = got.iter().zip(&want).map(|(g, w)| (*g as f64 - w).powi(2)).sum::<f64>().sqrt();
                    let den = mag.iter().map(|x| x * x).sum::<f64>().sqrt();
                    assert!(
                        r.non_finite == 0 && num <= 1e-6 * den,
                        "{r}\n  error {:.3e} of the products' magnitude; replay with DDL_TEST_SEED={}",
                        num / den,
                        rng.seed
                    );
                }
            }
        }
        // Without the flag the same layout falls back to scalar loads.
        assert_eq!(
            Matmul { pad_reads: [false; 2], ..mm }.entry_point("r8").unwrap(),
            if m % 4 == 0 && n % 4 == 0 { "mm_mn" } else { "mm_ss" }
        );
    }
}

/// Padding is per operand: a weight gradient over one padded activation (`[tokens, round4(F)]`)
/// and one unpadded (`[tokens, d]`, d not a multiple of 4) reads past neither buffer. Training
/// with d = 30 failed here once: `pad_reads` padded both operands, so the MLP's ∂W_down asked
/// 8 bytes past ∂h's buffer (`matmul 30x341x768: A needs 92168 bytes of its buffer, the
/// binding has 92160`).
#[test]
fn padding_one_operand_reads_nothing_past_the_other() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    for &(m, n, k) in &[(30usize, 341usize, 70usize), (341, 30, 77), (6, 5, 9)] {
        for pad_a in [false, true] {
            // The padded operand has rows of round4, the other exactly its width.
            let (ma, nb) = if pad_a { (m.next_multiple_of(4), n) } else { (m, n.next_multiple_of(4)) };
            let mm = Matmul {
                a: Operand { offset: 0, row_stride: 1, col_stride: ma, batch_stride: k * ma },
                b: Operand { offset: 0, row_stride: nb, col_stride: 1, batch_stride: k * nb },
                ..Matmul::tn(m, n, k)
            };
            let mm = if pad_a { mm.pad_a(true) } else { mm.pad_b(true) };
            let mut a = rng.uniform(k * ma, -1.0, 1.0);
            let mut b = rng.uniform(k * nb, -1.0, 1.0);
            for p in 0..k {
                a[p * ma + m..(p + 1) * ma].fill(f32::NAN);
                b[p * nb + n..(p + 1) * nb].fill(f32::NAN);
            }
            let (ta, tb) = (upload(&gpu, "a", &a), upload(&gpu, "b", &b));
            // Both padded would read past the unpadded buffer: refused, naming it.
            let both = mm.pad_a(true).pad_b(true);
            let tc = poisoned(&gpu, "c", &[m * n]);
            let e = both.bind(&gpu, ta.view(), tb.view(), tc.view()).unwrap_err().to_string();
            let short = if pad_a { "B needs" } else { "A needs" };
            assert!(m % 4 == 0 && n % 4 == 0 || e.contains(short), "{m}x{n}x{k} pad_a {pad_a}: {e}");
            for v in register_variants().into_iter().chain(staged_variants()) {
                let tc = poisoned(&gpu, "c", &[m * n]);
                run(&gpu, &[mm.bind_variant(&gpu, v, ta.view(), tb.view(), tc.view()).unwrap()]);
                let got = tc.read_f32(&gpu).unwrap();
                let want = reference(&mm, &a, &b, &vec![0.0; m * n], 1);
                let r = ddl::testing::compare(&format!("tn {m}x{n}x{k} pad_a {pad_a} {v}"), &got, &want);
                assert!(r.passes(1e-5), "{r}; replay with DDL_TEST_SEED={}", rng.seed);
            }
        }
    }
}

/// Products with one or two output tiles and a long K (a small head's weight gradient over many
/// tokens) are cut into K pieces summed afterwards: more than one dispatch, still float64-close,
/// with accumulation, alpha, a K remainder and strided operands, and bit-identical reruns.
/// Split products share one K-pieces scratch per device: two of them recorded back to back (the
/// second overwrites the first one's pieces) both match float64.
#[test]
fn split_products_share_one_scratch_and_stay_correct_back_to_back() {
    // A device of its own: other tests' products must not grow the shared scratch in between.
    let opts = ddl::gpu::GpuOptions::from_env().unwrap();
    let gpu =
        ddl::gpu::Gpu::new(&opts).unwrap_or_else(|e| panic!("GPU tests need an adapter and none could be opened: {e}"));
    let mut rng = Rng::fresh();
    let mms = [Matmul::tn(4, 128, 2047), Matmul::nt(3, 5, 4099).alpha(-0.5).accumulate(true)];
    let mut ds = Vec::new();
    let mut cases = Vec::new();
    for mm in mms {
        assert!(mm.k_pieces(&gpu) > 1, "{mm:?}: not split");
        let [ea, eb, ec] = mm.extents();
        let (a, b, c0) = (rng.uniform(ea, -1.0, 1.0), rng.uniform(eb, -1.0, 1.0), rng.uniform(ec, -1.0, 1.0));
        let (ta, tb, tc) = (upload(&gpu, "a", &a), upload(&gpu, "b", &b), upload(&gpu, "c", &c0));
        ds.extend(mm.bind_split(&gpu, ta.view(), tb.view(), tc.view()).unwrap());
        cases.push((mm, a, b, c0, ta, tb, tc));
    }
    let scratches: Vec<_> =
        ds.iter().flat_map(|d| d.scratch.iter()).filter(|t| t.label == matmul::K_PIECES_SCRATCH).collect();
    assert_eq!(scratches.len(), 2, "one kept scratch per split product");
    assert!(std::sync::Arc::ptr_eq(&scratches[0].buffer, &scratches[1].buffer), "the products use different buffers");
    run(&gpu, &ds);
    for (mm, a, b, c0, _ta, _tb, tc) in &cases {
        let want = reference(mm, a, b, c0, 1);
        let r =
            ddl::testing::compare(&format!("{mm:?} after another split product"), &tc.read_f32(&gpu).unwrap(), &want);
        assert!(r.passes(1e-5), "{r}; replay with DDL_TEST_SEED={}", rng.seed);
    }
}

/// A product `gpu` splits along K: its pieces within the bound programs reserve under the
/// device's rule, against float64 plain and accumulating (two dispatches or more), and
/// bit-identical run to run.
fn check_split_k(gpu: &Gpu, mm: Matmul, how: &str) {
    let pieces = mm.k_pieces(gpu);
    // Programs reserve the shared scratch from this bound before any product asks.
    let bound = matmul::k_pieces_bound(matmul::KSplit::of(gpu), mm.m, mm.n, mm.k);
    assert!(pieces * mm.m * mm.n <= bound, "{mm:?}: {pieces} pieces exceed the bound {bound}");
    for acc in [false, true] {
        let mm = mm.accumulate(acc);
        check_bound(mm, 1, how, &|_, a, b, c| {
            let ds = mm.bind_split(gpu, a, b, c).unwrap();
            assert!(ds.len() >= 2, "{mm:?}: {} dispatch(es)", ds.len());
            ds
        });
    }
    // Same inputs twice: bit-identical.
    let mut rng = Rng::fresh();
    let [ea, eb, ec] = mm.extents();
    let (ta, tb) = (upload(gpu, "a", &rng.uniform(ea, -1.0, 1.0)), upload(gpu, "b", &rng.uniform(eb, -1.0, 1.0)));
    let runs: Vec<Vec<u32>> = (0..2)
        .map(|_| {
            let tc = poisoned(gpu, "c", &[ec]);
            run(gpu, &mm.bind_split(gpu, ta.view(), tb.view(), tc.view()).unwrap());
            tc.read_f32(gpu).unwrap().iter().map(|x| x.to_bits()).collect()
        })
        .collect();
    assert_eq!(runs[0], runs[1], "{mm:?}: reruns differ");
}

#[test]
fn few_tile_products_with_long_sums_are_split_along_k() {
    let gpu = gpu();
    let cases = [
        Matmul::tn(1, 128, 768),
        Matmul::tn(4, 128, 2047),
        Matmul::nt(3, 5, 4099).alpha(-0.5),
        Matmul {
            a: Operand { offset: 4, row_stride: 1, col_stride: 12, batch_stride: 0 },
            b: Operand { offset: 8, row_stride: 36, col_stride: 1, batch_stride: 0 },
            ..Matmul::tn(9, 33, 1001)
        },
    ];
    for mm in cases {
        assert!(mm.k_pieces(&gpu) > 1, "{mm:?}: not split");
        check_split_k(&gpu, mm, "split along K");
    }
    // Many tiles or a short K: one dispatch as before. Many is the adapter's own: a side of at
    // least √split_k_tiles tiles of 128 (2048 at the GPU default's 256 tiles, 2896 at the H200's
    // measured 512, where 2048 × 2048 is split in two: GPU run 5), and at least 2048 (a CPU
    // adapter's rule splits up to 2^16 outputs).
    let busy = matmul::KSplit::of(&gpu).busy;
    let side = (128 * (1..).find(|t| t * t >= busy).unwrap()).max(2048);
    assert_eq!(Matmul::tn(side, side, 768).k_pieces(&gpu), 1, "{side} × {side}, split_k_tiles {busy}");
    assert_eq!(Matmul::tn(1, 128, 300).k_pieces(&gpu), 1);
}

/// A GPU's split-K rule (`split_k_tiles`, forced here with the forms of a discrete adapter):
/// weight gradients of narrow layers — outputs of many elements but fewer than 128 tiles of
/// 128 × 128 — are split into ⌊256 / tiles⌋ pieces (at most K / 128 and 32), within the bound
/// programs reserve; against float64, plain and accumulating, and bit-identical run to run. Wide
/// outputs, short sums and `split_k_tiles=0` stay one product; the CPU rule is unchanged.
#[test]
fn a_gpus_split_along_k_covers_narrow_weight_gradients() {
    let base = gpu();
    let gpu = base.with_forms(|f| *f = ddl::kernels::forms::Forms::defaults(false, (32, 32), base.features));
    let rule = matmul::KSplit::of(&gpu);
    assert_eq!(rule, matmul::KSplit { cpu: false, busy: matmul::GPU_SPLIT_K_TILES });
    // 300 × 260: 9 tiles → 28 pieces; 130 × 389 over 1030: 8 tiles, K / 128 = 8 pieces (and a
    // remainder of 6); 260 × 390 over 2050: 12 tiles → 21, K / 128 = 16 pieces.
    // (On a GPU `base` already has these forms; the CPU rule's check needs a CPU adapter.)
    for (mm, want) in
        [(Matmul::tn(300, 260, 4099), 28), (Matmul::tn(130, 389, 1030), 8), (Matmul::tn(260, 390, 2050), 16)]
    {
        assert_eq!(mm.k_pieces(&gpu), want, "{mm:?}");
        if base.forms.cpu && mm.m * mm.n > 1 << 16 {
            assert_eq!(mm.k_pieces(&base), 1, "{mm:?}: the CPU rule splits only outputs of ≤ 2^16 elements");
        }
        check_split_k(&gpu, mm, "a GPU's split along K");
    }
    // 2048 × 2048: 256 tiles, no split; K < 512: no split; the form at 0: no split.
    assert_eq!(Matmul::tn(2048, 2048, 8192).k_pieces(&gpu), 1);
    assert_eq!(Matmul::tn(300, 260, 500).k_pieces(&gpu), 1);
    assert_eq!(matmul::k_pieces_bound(rule, 2048, 2048, 8192), 0);
    let off = gpu.with_forms(|f| f.split_k_tiles = 0);
    assert_eq!(Matmul::tn(300, 260, 4099).k_pieces(&off), 1);
    assert_eq!(matmul::k_pieces_bound(matmul::KSplit::of(&off), 300, 260, 4099), 0);
}

// ---- f16 operands (`--precision f16`): MatmulElem::R16 (f32 storage rounded as read) and F16
// (f16 storage), accumulated in f32 ----

const HALF: [(MatmulElem, MatmulElem); 4] = [
    (MatmulElem::R16, MatmulElem::R16),
    (MatmulElem::F16, MatmulElem::F16),
    (MatmulElem::R16, MatmulElem::F16),
    (MatmulElem::F16, MatmulElem::R16),
];

#[test]
fn f16_operands_match_float64_in_every_variant_and_entry_point() {
    let gpu = f16_gpu();
    // Every tile variant with one of the operand pairs (in turn), through every entry point;
    // inputs an f16 holds exactly, so the result is held to the f32 kernel's tolerance.
    for (i, v) in matmul::variants_for(&gpu).into_iter().enumerate() {
        let (ea, eb) = HALF[i % HALF.len()];
        for (mm, entry) in entry_point_cases() {
            let mm = mm.elems(ea, eb);
            let want = if matmul::direct(v).unwrap() {
                subgroup_entry(v, entry)
            } else if v.starts_with('w') {
                staged_entry(entry)
            } else {
                "matmul".to_string()
            };
            assert_eq!(mm.entry_point(v).unwrap(), want, "{mm:?}");
            check(if entry == "mm_kk" { mm.accumulate(true).alpha(0.75) } else { mm }, Some(v));
        }
    }
    // Every pair at odd sizes with the runtime's pick.
    for (i, (ea, eb)) in HALF.into_iter().enumerate() {
        for &(m, n, k) in SIZES {
            let mm = if i % 2 == 0 { Matmul::nt(m, n, k) } else { Matmul::tn(m, n, k) };
            check(mm.elems(ea, eb), None);
        }
    }
}

#[test]
fn f16_forms_are_the_f32_kernel_on_operands_rounded_to_nearest() {
    // General f32 inputs: reading them rounded (R16) must give the same bits as storing them
    // in f16 (F16, rounded to nearest on the host) and as the f32 kernel on the host-rounded
    // values: one accumulation, exact f16 products. (WGSL lets a conversion to f16 round either
    // way when the value is not representable; every adapter seen rounds to nearest, and this
    // test says so if one does not.) The tiled kernels: cooperative matrices (DDL_FORMS
    // matmul_coop=1) sum in another order.
    let gpu = f16_gpu().with_forms(|f| f.matmul_coop = false);
    let mut rng = Rng::fresh();
    for mm in [Matmul::nt(67, 85, 131), Matmul::tn(40, 36, 300), Matmul::nn(9, 132, 4)] {
        let a = rng.normal(mm.a.extent(mm.m, mm.k, 1), 1.0);
        let b = rng.normal(mm.b.extent(mm.k, mm.n, 1), 1.0);
        let c_len = mm.c.extent(mm.m, mm.n, 1);
        let product = |mm: Matmul, a: &[f32], b: &[f32]| {
            let (ta, tb) = (upload_elem(&gpu, "a", a, mm.a_elem), upload_elem(&gpu, "b", b, mm.b_elem));
            let tc = poisoned(&gpu, "c", &[c_len]);
            run(&gpu, &[mm.bind(&gpu, ta.view(), tb.view(), tc.view()).unwrap()]);
            tc.read_f32(&gpu).unwrap()
        };
        let exact = product(mm, &f16_round(&a), &f16_round(&b));
        for (ea, eb) in HALF {
            let got = product(mm.elems(ea, eb), &a, &b);
            let same = got.iter().zip(&exact).all(|(g, w)| g.to_bits() == w.to_bits());
            assert!(same, "{mm:?} with {ea:?}/{eb:?}: not the f32 product of the rounded operands");
        }
        // …and the rounding happened: the f32 product of the unrounded inputs differs.
        let full = product(mm, &a, &b);
        let moved = full.iter().zip(&exact).filter(|(f, e)| f != e).count();
        assert!(moved > c_len / 2, "{mm:?}: only {moved} of {c_len} outputs moved by rounding to f16");
    }
}

#[test]
fn r16_operands_round_to_nearest_even_at_f16s_edges() {
    // R16 reads round in the shader by integer arithmetic (parts/f16_round.wgsl): NVIDIA's
    // compiler folds f32(f16(x)) into x. A 1 × n × 1 product against 1 gives the rounded
    // operand itself: ties (to even), subnormals, the overflow edge, infinities, each equal to the
    // host's round to nearest even (−0 is summed into +0 by the accumulation: compared as values);
    // then every f16 subnormal and every tie between two of them (`f16_subnormal_grid`).
    let gpu = f16_gpu();
    let specials = [
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
        -(1.0 + 1.0 / 2048.0),
        65504.0,
        65519.996,
        65520.0,
        -1e6,
        1.5 * 2f32.powi(-24),
        2f32.powi(-25),
        2f32.powi(-14) * (1.0 - 2f32.powi(-20)),
        3.0e-6,
        -7.0e-7,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.1,
        -0.0,
    ];
    let b: Vec<f32> = specials.into_iter().chain(f16_subnormal_grid()).collect();
    let want = f16_round(&b);
    for v in matmul::variants_for(&gpu).into_iter().map(Some).chain([None]) {
        let mm = Matmul::nn(1, b.len(), 1).elems(MatmulElem::F32, MatmulElem::R16);
        let (ta, tb) = (upload(&gpu, "a", &[1.0]), upload(&gpu, "b", &b));
        let tc = poisoned(&gpu, "c", &[b.len()]);
        let d = match v {
            Some(v) => mm.bind_variant(&gpu, v, ta.view(), tb.view(), tc.view()).unwrap(),
            None => mm.bind(&gpu, ta.view(), tb.view(), tc.view()).unwrap(),
        };
        run(&gpu, &[d]);
        let got = tc.read_f32(&gpu).unwrap();
        let bad: Vec<String> = (0..b.len())
            .filter(|&i| got[i] != want[i])
            .take(5)
            .map(|i| format!("{:e} rounds to {:e}, want {:e}", b[i], got[i], want[i]))
            .collect();
        assert!(bad.is_empty(), "variant {v:?}:\n{}", bad.join("\n"));
    }
}

#[test]
fn f16_stored_operands_are_split_like_f32_ones() {
    // `--precision f16`'s f16-stored operands (ψ, P and dS, the weights' f16 copy) in products
    // whose operands exceed one storage binding, or whose sums exceed MAX_K_PER_DISPATCH (a weight
    // gradient over more than 32 768 tokens), are cut at aligned four-byte words like f32 ones:
    // against float64, and the same bits as one dispatch where K stays whole (`check_split`).
    let stored = |(a, b): &(MatmulElem, MatmulElem)| *a == MatmulElem::F16 || *b == MatmulElem::F16;
    let cases = [
        (Matmul::nt(67, 85, 131), 700),
        (Matmul::tn(129, 65, 17), 900),
        (Matmul::nn(5, 300, 70).accumulate(true).alpha(-0.75), 600),
        // The LM head at a reduced scale with E [V, d] in f16: logits, then ∂X = ∂logits·E (K split).
        (Matmul::nt(8, 1003, 24), 8000),
        (Matmul::nn(8, 24, 1003), 3000),
        (attention_like(), 100),
        (strided_tail("nt", 20, 37, 37, 3), 1200),
    ];
    let (mut k_split, mut mn_split) = (0, 0);
    for (mm, max_chunk) in cases {
        for (ea, eb) in HALF.iter().filter(|p| stored(p)) {
            let mm = mm.elems(*ea, *eb);
            let s = check_split(mm, max_chunk);
            let pieces: usize = [mm.batch, mm.m, mm.n, mm.k].iter().zip(&s).map(|(f, s)| f.div_ceil(*s)).product();
            assert!(pieces > 1, "{mm:?}: not split at {max_chunk}");
            k_split += (s[3] < mm.k) as usize;
            mn_split += (s[0] < mm.batch || s[1] < mm.m || s[2] < mm.n) as usize;
        }
    }
    assert!(k_split > 0 && mn_split > 0, "K split {k_split} times, batch/M/N {mn_split}");
    // Sums past one dispatch: ∂W_down = ∂hᵀ·ψ over 40 003 tokens with ψ in f16.
    let long = Matmul::tn(3, 5, 40_003).elems(MatmulElem::R16, MatmulElem::F16);
    let s = check_split(long, usize::MAX);
    assert!(s[3] <= MAX_K_PER_DISPATCH && s[3] < long.k, "{s:?}");
    // On a device whose bindings hold 4 KiB every piece's views fit (wgpu refuses a larger
    // binding), and the pieces give one dispatch's bits on the whole device.
    let gpu = f16_gpu();
    let small = gpu.with_max_storage_binding(4096).unwrap();
    let mut rng = Rng::fresh();
    for (ea, eb) in HALF.iter().filter(|p| stored(p)) {
        let mm = Matmul::nt(67, 85, 131).elems(*ea, *eb);
        let a = rng.uniform(extent(&mm.a, mm.m, mm.k, 1), -1.0, 1.0);
        let b = rng.uniform(extent(&mm.b, mm.k, mm.n, 1), -1.0, 1.0);
        let c_len = extent(&mm.c, mm.m, mm.n, 1);
        let product = |g: &ddl::gpu::Gpu, split: bool| {
            let (ta, tb) = (upload_elem(g, "a", &a, mm.a_elem), upload_elem(g, "b", &b, mm.b_elem));
            let tc = upload(g, "c", &vec![f32::NAN; c_len]);
            let ds = if split {
                mm.bind_split(g, ta.view(), tb.view(), tc.view()).unwrap()
            } else {
                vec![mm.bind(g, ta.view(), tb.view(), tc.view()).unwrap()]
            };
            run(g, &ds);
            (ds.len(), tc.read_f32(g).unwrap())
        };
        let ((pieces, got), (_, want)) = (product(&small, true), product(&gpu, false));
        assert!(pieces > 1, "{mm:?}: {pieces} pieces on 4 KiB bindings");
        let same = got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits());
        assert!(same, "{mm:?}: {pieces} pieces on 4 KiB bindings differ from one dispatch (seed {})", rng.seed);
    }
}

/// `Matmul::split_products` lists the products `bind_split` binds, in order (the pieces of a
/// product past one binding, each outer batch's; the product itself where it fits), and
/// `bench::tune_plan` (`ddl bench matmul --tune`) measures each piece shape once, so that the
/// benchmark's `pieces:N` rows time the variants a training step's autotuner picks for them.
#[test]
fn split_products_are_the_products_bind_split_binds() {
    let gpu = f16_gpu();
    let small = gpu.with_max_storage_binding(4096).unwrap();
    let h = MatmulElem::F16;
    let mut two = Matmul::nn(32, 48, 40).batched(2).accumulate(true);
    two.outer = 2;
    two.outer_strides = [2 * 32 * 40, 2 * 40 * 48, 2 * 32 * 48];
    let cases = [
        Matmul::nt(67, 85, 131),
        Matmul::tn(40, 72, 300).elems(MatmulElem::R16, h).alpha(0.5),
        two,
        Matmul::nt(9, 7, 5),
    ];
    let mut rng = Rng::fresh();
    for mm in cases {
        let [ea, eb, ec] = mm.extents();
        let ta = upload_elem(&small, "a", &rng.uniform(ea, -1.0, 1.0), mm.a_elem);
        let tb = upload_elem(&small, "b", &rng.uniform(eb, -1.0, 1.0), mm.b_elem);
        let tc = upload(&small, "c", &vec![f32::NAN; ec]);
        let ds = mm.bind_split(&small, ta.view(), tb.view(), tc.view()).unwrap();
        let ps = mm.split_products(&small).unwrap();
        assert_eq!(ps.len(), ds.len(), "{mm:?}");
        for (i, (p, d)) in ps.iter().zip(&ds).enumerate() {
            assert_eq!(p.flops(), d.flops, "{mm:?}: piece {i} ({p:?})");
            assert!(p.outer == 1 && p.a_elem == mm.a_elem && p.b_elem == mm.b_elem, "{p:?}");
        }
        let total: f64 = ps.iter().map(|p| p.flops()).sum();
        assert_eq!(total, mm.flops(), "{mm:?}: the pieces cover the product");
        if ds.len() == 1 {
            assert_eq!(ps, vec![mm], "a product that fits is its own one product");
        }
        // --tune's plan: the product where it fits one dispatch, else each piece shape once.
        let plan = ddl::bench::tune_plan(&small, &[("p".to_string(), mm)]).unwrap();
        if ddl::bench::matmul_skip(&small, &mm).is_none() {
            assert_eq!(plan, vec![("p".to_string(), None, mm)]);
        } else {
            assert!(ps.len() > 1 && !plan.is_empty() && plan.len() <= ps.len(), "{mm:?}: {plan:?}");
            for (_, i, p) in &plan {
                assert_eq!(Some(*p), i.map(|i| ps[i]), "{mm:?}");
            }
            for p in &ps {
                assert!(plan.iter().any(|(_, _, q)| (q.m, q.n, q.k, q.batch) == (p.m, p.n, p.k, p.batch)), "{p:?}");
            }
        }
    }
}

/// Products past one 128 × 128 tile for the quad-staged kernels: vec4 and scalar loads in each
/// layout (A along K or M, B along N or K), edges, K tails, batches.
fn quad_staging_cases() -> [Matmul; 7] {
    [
        Matmul::nt(260, 200, 100),
        Matmul::nn(136, 130, 64).batched(2),
        Matmul::tn(200, 136, 66),
        Matmul::tt(130, 129, 37),
        Matmul::nt(150, 140, 33),
        strided_tail("nt", 150, 37, 130, 3),
        strided_tail("tn", 140, 36, 139, 2),
    ]
}

#[test]
fn the_cooperative_matrix_staging_puts_every_operand_element_where_the_fragments_read_it() {
    // `coop128`'s and `coop8`'s staging (the part coop_staging) runs here without cooperative
    // matrices (`coop::stage_check`): every staged value of every tile and K slice of 32 must be
    // the operand element it stands for, rounded to f16 (R16) or as stored (F16), and zero past
    // the edges — through vec4 loads (aligned layouts) and scalar ones (odd strides, edges), in
    // each layout (A along K or M, B along N or K), with batches and a K tail.
    let gpu = f16_gpu();
    let mut rng = Rng::fresh();
    for (i, mm) in quad_staging_cases().into_iter().enumerate() {
        let (ea, eb) = HALF[i % HALF.len()];
        let mm = mm.elems(ea, eb);
        let [na, nb, _] = mm.extents();
        let (a, b) = (rng.uniform(na, -4.0, 4.0), rng.uniform(nb, -4.0, 4.0));
        let (ta, tb) = (upload_elem(&gpu, "a", &a, ea), upload_elem(&gpu, "b", &b, eb));
        let (a, b) = (f16_round(&a), f16_round(&b));
        let values = matmul::coop::stage_check_len(&mm);
        let out = poisoned(&gpu, "staged", &[values]);
        let d = matmul::coop::stage_check(&mm, &gpu, ta.view(), tb.view(), out.view()).unwrap();
        run(&gpu, &[d]);
        let got = out.read_f32(&gpu).unwrap();
        let (tm, tn, slices) = (mm.m.div_ceil(128), mm.n.div_ceil(128), mm.k.div_ceil(32));
        let mut at = 0;
        for z in 0..mm.batch {
            for ty in 0..tm {
                for tx in 0..tn {
                    for s in 0..slices {
                        for r in 0..128 {
                            for kk in 0..32 {
                                let (gi, gk) = (ty * 128 + r, s * 32 + kk);
                                let want = if gi < mm.m && gk < mm.k {
                                    a[mm.a.offset + z * mm.a.batch_stride + gi * mm.a.row_stride + gk * mm.a.col_stride]
                                } else {
                                    0.0
                                };
                                assert_eq!(
                                    got[at], want,
                                    "{mm:?}: A slice {s} of tile ({z}, {ty}, {tx}), row {r}, k {kk}"
                                );
                                at += 1;
                            }
                        }
                        for kk in 0..32 {
                            for j in 0..128 {
                                let (gk, gj) = (s * 32 + kk, tx * 128 + j);
                                let want = if gk < mm.k && gj < mm.n {
                                    b[mm.b.offset + z * mm.b.batch_stride + gk * mm.b.row_stride + gj * mm.b.col_stride]
                                } else {
                                    0.0
                                };
                                assert_eq!(
                                    got[at], want,
                                    "{mm:?}: B slice {s} of tile ({z}, {ty}, {tx}), k {kk}, column {j}"
                                );
                                at += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(at, values);
    }
}

#[test]
fn coop128_and_coop128v_without_their_cooperative_matrix_operations_match_float64() {
    // `coop::soft_check` (and the others of `SOFT`): mm_coop128's (mm_coop128v's) staging,
    // tiles, subgroup layout, fragment offsets and output path, with the fragment products done by
    // the invocations (lavapipe has no cooperative matrices): against float64 on f16 operands,
    // every layout, edges, K tails (and a K of one slice), batches, accumulation and alpha. What
    // it leaves to the GPU check: the cooperative-matrix operations themselves (for coop128v,
    // also that its loads read quads with strides in quads as `soft128v` reads them).
    let mut cases = Vec::from(quad_staging_cases());
    cases.insert(5, Matmul::nn(1, 20, 7));
    for (i, mm) in cases.into_iter().enumerate() {
        let (ea, eb) = HALF[i % HALF.len()];
        let mm = mm.elems(ea, eb).accumulate(i % 2 == 1).alpha(if i % 3 == 0 { 1.0 } else { -0.5 });
        for (name, soft) in SOFT {
            let how = format!("{name} {i} {:?}/{:?}", mm.a_elem, mm.b_elem);
            check_bound_tol(mm, 1, &how, &|gpu, a, b, c| vec![soft(&mm, gpu, a, b, c).unwrap()], 1e-5);
        }
    }
}

/// A soft check: a cooperative-matrix kernel's staging and layout with the products done by
/// the invocations (`coop::soft_check*`).
type Soft = fn(&Matmul, &ddl::gpu::Gpu, View<'_>, View<'_>, View<'_>) -> ddl::gpu::Result<ddl::gpu::Dispatch>;

/// The soft checks: `coop128`'s (`soft128`); `coop128v`'s (`soft128v`), with f16 quads in flight
/// as `coop128vq` holds them and with two slices in flight as `coop128v2` keeps them.
const SOFT: [(&str, Soft); 4] = [
    ("soft128", matmul::coop::soft_check),
    ("soft128v", matmul::coop::soft_check_v),
    ("soft128v with f16 quads in flight (coop128vq)", matmul::coop::soft_check_vq),
    ("soft128v with two slices in flight (coop128v2)", matmul::coop::soft_check_v2),
];

/// Products `coop128d` runs beyond its self-test's (`coop::direct_cases`): two batch levels,
/// operands at offsets and with strides past their widths, one fragment row and column.
fn direct_more() -> Vec<Matmul> {
    let h = MatmulElem::F16;
    let mut strided = Matmul::nt(48, 144, 32).elems(h, h);
    strided.a = Operand { offset: 8, row_stride: 40, col_stride: 1, batch_stride: 0 };
    strided.b = Operand { offset: 24, row_stride: 1, col_stride: 48, batch_stride: 0 };
    let mut two = Matmul::nn(32, 48, 16).batched(2).elems(h, h).accumulate(true);
    two.outer = 2;
    two.outer_strides = [2 * 32 * 16, 2 * 16 * 48, 2 * 32 * 48];
    vec![two, strided, Matmul::tn(16, 16, 16).elems(h, h).alpha(3.0)]
}

#[test]
fn coop128d_without_its_cooperative_matrix_operations_matches_float64() {
    // `coop::soft_check_d` (`soft128d`): mm_coop128d's fragment origins and strides straight from
    // the operands (clamped at the edges), its tiles, subgroup layout and output path, with the
    // fragment products done by the invocations: against float64 on f16-stored operands, every
    // layout, ragged tiles, batches (two levels), offsets, accumulation and alpha. What it leaves
    // to the GPU check: the cooperative-matrix loads and products themselves.
    let cases: Vec<Matmul> = matmul::coop::direct_cases().into_iter().chain(direct_more()).collect();
    for (i, mm) in cases.into_iter().enumerate() {
        assert!(matmul::coop::direct_fits(&mm).is_none(), "case {i} does not fit coop128d");
        let how = format!("soft128d {i} {}x{}x{}", mm.m, mm.n, mm.k);
        check_bound_tol(
            mm,
            1,
            &how,
            &|gpu, a, b, c| vec![matmul::coop::soft_check_d(&mm, gpu, a, b, c).unwrap()],
            1e-5,
        );
    }
    // What it refuses: an f32-stored operand, a side off a multiple of 16, a misaligned offset.
    let h = MatmulElem::F16;
    let mut off = Matmul::nn(32, 32, 32).elems(h, h);
    off.a.offset = 4;
    for (mm, needle) in [
        (Matmul::nn(32, 32, 32).elems(MatmulElem::R16, h), "both operands stored in f16"),
        (Matmul::nn(32, 40, 32).elems(h, h), "multiples of 16"),
        (Matmul::nn(32, 32, 24).elems(h, h), "multiples of 16"),
        (off, "multiples of 8"),
    ] {
        let why = matmul::coop::direct_fits(&mm).unwrap_or_default();
        assert!(why.contains(needle), "{}x{}x{}: {why:?}", mm.m, mm.n, mm.k);
    }
}

#[test]
fn cooperative_matrix_products_match_float64_where_the_adapter_has_them() {
    // Tensor cores (matmul::coop): where the device offers 16×16×16 f16 → f32 and its self-test
    // passed, every layout, edge, batch level and operand form against float64 on f16 inputs.
    // Adapters without them (lavapipe) skip, except under DDL_REQUIRE_COOP=1 (the GPU check),
    // where that is a failure. The form is off by default (slower than the tiles so far): on here.
    let gpu = gpu().with_forms(|f| f.matmul_coop = true);
    // Every cooperative-matrix name, the benchmark's diagnostic halves too: bound only where the
    // device has them (else an error that says so), and then they run and write every output.
    let mm = Matmul::nn(40, 48, 64).elems(MatmulElem::R16, MatmulElem::F16);
    let [ea, eb, ec] = mm.extents();
    let mut rng = Rng::fresh();
    let ta = upload(&gpu, "a", &rng.uniform(ea, -1.0, 1.0));
    let tb = upload_elem(&gpu, "b", &rng.uniform(eb, -1.0, 1.0), MatmulElem::F16);
    use matmul::coop::{VARIANT8, VARIANT128, VARIANT128D, VARIANT128V, VARIANT128V2, VARIANT128VQ};
    for v in matmul::coop::ALL.into_iter().chain(matmul::coop::DIAGNOSTIC) {
        let tc = poisoned(&gpu, "c", &[ec]);
        let family_ok = if v == VARIANT8 { matmul::coop::status8(&gpu).is_ok() } else { gpu.coop.is_ok() };
        match mm.bind_variant(&gpu, v, ta.view(), tb.view(), tc.view()) {
            Ok(d) => {
                assert!(family_ok, "{v} bound without its cooperative matrices");
                run(&gpu, &[d]);
                assert!(tc.read_f32(&gpu).unwrap().iter().all(|x| x.is_finite()), "{v}: outputs left unwritten");
            }
            Err(e) if v == VARIANT128 && gpu.coop.is_ok() => {
                assert!(matmul::coop::wide_status(&gpu).is_err() && e.to_string().contains(v), "{v}: {e}")
            }
            Err(e) if v == VARIANT128D && gpu.coop.is_ok() => {
                // coop128d binds only products of two f16-stored operands (this one's A is f32).
                assert!(e.to_string().contains("both operands stored in f16"), "{v}: {e}")
            }
            Err(e) if v == VARIANT128VQ && gpu.coop.is_ok() => {
                assert!(matmul::coop::wide_vq_status(&gpu).is_err() && e.to_string().contains(v), "{v}: {e}")
            }
            Err(e) if v == VARIANT128V2 && gpu.coop.is_ok() => {
                assert!(matmul::coop::wide_v2_status(&gpu).is_err() && e.to_string().contains(v), "{v}: {e}")
            }
            Err(e) if v.starts_with(VARIANT128V) && gpu.coop.is_ok() => {
                // coop128v where its self-test failed; its halves where the device cannot run it.
                assert!(matmul::coop::wide_v_status(&gpu).is_err() && e.to_string().contains(v), "{v}: {e}")
            }
            Err(e) => assert!(!family_ok && e.to_string().contains("cooperative matrices"), "{v}: {e}"),
        }
    }
    let here = matmul::coop::variants_here(&gpu);
    if here.is_empty() {
        let why = matmul::coop::why_not(&gpu).unwrap_or_default();
        let required = std::env::var("DDL_REQUIRE_COOP").is_ok_and(|v| v == "1");
        assert!(!required, "DDL_REQUIRE_COOP=1, but cooperative-matrix matmuls are off on {}: {why}", gpu.info.name);
        eprintln!("skipped: cooperative-matrix matmuls are off on {} ({why})", gpu.info.name);
        return;
    }
    // The wide form (its own self-test): required where the GPU check runs.
    for (v, status) in [
        (VARIANT128, matmul::coop::wide_status(&gpu)),
        (VARIANT128V, matmul::coop::wide_v_status(&gpu)),
        (VARIANT128VQ, matmul::coop::wide_vq_status(&gpu)),
        (VARIANT128V2, matmul::coop::wide_v2_status(&gpu)),
        (VARIANT128D, matmul::coop::direct_status(&gpu)),
    ] {
        if let (true, Err(why)) = (matmul::coop::usable(&gpu), status) {
            let required = std::env::var("DDL_REQUIRE_COOP").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "DDL_REQUIRE_COOP=1, but the cooperative-matrix form {v} is off on {}: {why}",
                gpu.info.name
            );
        }
    }
    let coop = |mm: Matmul| {
        // (coop128d: the products it can run, two f16-stored aligned operands.)
        for &v in here.iter().filter(|&&v| v != VARIANT128D || matmul::coop::direct_fits(&mm).is_none()) {
            let how = format!("{v} {:?}/{:?}", mm.a_elem, mm.b_elem);
            check_bound_tol(mm, 1, &how, &|gpu, a, b, c| vec![mm.bind_variant(gpu, v, a, b, c).unwrap()], 1e-4);
        }
    };
    // The causal attention products on the variants that run them (`coop::CAUSAL`).
    for &v in here.iter().filter(|v| matmul::coop::CAUSAL.contains(v)) {
        check_causal(&gpu, v, 16, true, &|gpu, mm, a, b, c| mm.bind_variant(gpu, v, a, b, c).unwrap(), 1e-4);
    }
    for (i, (mm, _)) in entry_point_cases().into_iter().enumerate() {
        let (ea, eb) = HALF[i % HALF.len()];
        coop(mm.elems(ea, eb));
        coop(mm.elems(ea, eb).accumulate(true).alpha(-0.75));
    }
    for &(m, n, k) in SIZES {
        coop(Matmul::tn(m, n, k).elems(MatmulElem::R16, MatmulElem::F16));
    }
    coop(attention_like().elems(MatmulElem::R16, MatmulElem::R16));
    // The wide form's layouts past one tile: whole and ragged tiles, vec4 and scalar staging
    // (strided operands), K tails, two batch levels.
    for (i, mm) in [
        Matmul::nt(260, 300, 100),
        Matmul::nn(257, 130, 64),
        Matmul::tn(128, 256, 96),
        Matmul::tt(200, 140, 45),
        Matmul::nt(150, 140, 33),
        Matmul::tn(130, 129, 30),
        strided_tail("nt", 150, 37, 130, 3),
        strided_tail("tn", 140, 36, 139, 2),
    ]
    .into_iter()
    .enumerate()
    {
        let (ea, eb) = HALF[i % HALF.len()];
        coop(mm.elems(ea, eb).accumulate(i % 2 == 1).alpha(if i % 3 == 0 { 1.0 } else { 0.5 }));
    }
    // coop128d's own: every layout of two f16-stored operands, ragged tiles, batches.
    for mm in matmul::coop::direct_cases().into_iter().chain(direct_more()) {
        coop(mm);
    }
    // coop128vq holds the same f16 values in flight as coop128v converts at its stash, and
    // coop128v2 stashes the same slices an iteration later: the same products, bit for bit (vec4
    // and scalar staging, both operand forms, a ragged tile).
    let same: Vec<&str> = [VARIANT128V, VARIANT128VQ, VARIANT128V2].into_iter().filter(|v| here.contains(v)).collect();
    if same.len() > 1 && same[0] == VARIANT128V {
        for mm in [
            Matmul::nt(260, 300, 100).elems(MatmulElem::R16, MatmulElem::R16),
            Matmul::tn(130, 129, 30).elems(MatmulElem::R16, MatmulElem::F16),
            strided_tail("nt", 150, 37, 130, 3).elems(MatmulElem::F16, MatmulElem::R16),
        ] {
            let [ea, eb, ec] = mm.extents();
            let ta = upload_elem(&gpu, "a", &rng.uniform(ea, -1.0, 1.0), mm.a_elem);
            let tb = upload_elem(&gpu, "b", &rng.uniform(eb, -1.0, 1.0), mm.b_elem);
            let outs: Vec<Vec<f32>> = same
                .iter()
                .map(|v| {
                    let tc = poisoned(&gpu, "c", &[ec]);
                    run(&gpu, &[mm.bind_variant(&gpu, v, ta.view(), tb.view(), tc.view()).unwrap()]);
                    tc.read_f32(&gpu).unwrap()
                })
                .collect();
            for (v, out) in same.iter().zip(&outs).skip(1) {
                assert!(same_bits(&outs[0], out), "{}x{}x{}: {v} differs from coop128v", mm.m, mm.n, mm.k);
            }
        }
    }
    // The engine picks them for f16 products of at least 16 × 16 (the wide one from 128 × 128
    // where its self-test passed; the 8 × 8 one where only it runs).
    let (small, wide) = if !matmul::coop::usable(&gpu) {
        (VARIANT8, VARIANT8)
    } else if matmul::coop::wide_status(&gpu).is_ok() {
        (matmul::coop::VARIANT, VARIANT128)
    } else {
        (matmul::coop::VARIANT, matmul::coop::VARIANT)
    };
    assert_eq!(matmul::pick(&gpu, &Matmul::nt(64, 64, 64).half(true)), small);
    assert_eq!(matmul::pick(&gpu, &Matmul::nt(128, 128, 64).half(true)), wide);
    // With the form matmul_coop_v, coop128v where its self-test passed.
    let gv = gpu.with_forms(|f| f.matmul_coop_v = true);
    let wide_v = if matmul::coop::usable(&gv) && matmul::coop::wide_v_status(&gv).is_ok() { VARIANT128V } else { wide };
    assert_eq!(matmul::pick(&gv, &Matmul::nt(128, 128, 64).half(true)), wide_v);
    assert_eq!(matmul::pick(&gv, &Matmul::nt(64, 64, 64).half(true)), small);
    assert_ne!(matmul::pick(&gpu, &Matmul::nt(64, 64, 64)), small);
}

/// The end of the granule of row `i` (a query) among `t` keys: the keys a causal score row holds.
fn granule_end(i: usize, t: usize) -> usize {
    t.min((i / matmul::CAUSAL_GRANULE + 1) * matmul::CAUSAL_GRANULE)
}

#[test]
fn causal_products_compute_only_their_granules_in_every_variant() {
    // The three kinds of causal attention product (form `attention=causal`, `check_causal`) in
    // every tile variant, with head dims 16 (vec4 entry points) and 9 (B read by scalars), f32
    // operands; the products over keys and queries also with their tiles taken longest first
    // (form `causal_lpt`, toggled from the adapter's default: every tile once, its K range
    // decoded under the order's flag; a tile missed keeps its NaN). (That the order changes no
    // bit: the causal attention's test, `causal_attention_keeps_the_blocked_bits_…`.)
    let gpu = gpu();
    let lpt = gpu.with_forms(|f| f.causal_lpt = !f.causal_lpt);
    let over_keys = Matmul::nn(300, 16, 300).causal(matmul::Causal::KeysToGranuleEnd);
    assert_ne!(over_keys.causal_code(&gpu), over_keys.causal_code(&lpt), "causal_lpt changes nothing");
    for hd in [16usize, 9] {
        for v in matmul::variants_for(&gpu) {
            for (g, order) in [(&gpu, ""), (&lpt, " (the other order)")] {
                let how = format!("{v} hd {hd}{order}");
                check_causal(g, &how, hd, false, &|gpu, mm, a, b, c| mm.bind_variant(gpu, v, a, b, c).unwrap(), 1e-5);
            }
        }
    }
}

type CausalBind<'a> = dyn Fn(&ddl::gpu::Gpu, &Matmul, View, View, View) -> ddl::gpu::Dispatch + 'a;

/// The three kinds of causal attention product over a whole T × T score matrix, T = 300
/// (granules of 128, 128 and 44 queries), two heads of `hd`, through `bind`:
/// - the scores S = Q·Kᵀ: exactly the keys below each query's granule end are written (float64
///   there), everything past them keeps its NaN (the skipped tiles ran nothing);
/// - O = P·V over keys: P holds NaN past each row's granule end (what the softmax step leaves
///   unwritten) and zeros between the diagonal and it: O must be float64's sum over the keys
///   each query sees, so no tile read past its granule;
/// - dV = Pᵀ·dO over queries: likewise, with P's NaN in the rows before each key's granule.
///
/// With `half`, as `--precision f16` runs them: P stored in f16, Q, K and the values f32 rounded
/// to f16 as read (the reference takes the f16 values). Relative L2 `tol`.
fn check_causal(gpu: &ddl::gpu::Gpu, how: &str, hd: usize, half: bool, bind: &CausalBind<'_>, tol: f64) {
    let mut rng = Rng::fresh();
    let (t, batch) = (300usize, 2usize);
    let value = |x: Vec<f32>| if half { f16_round(&x) } else { x };
    let (e32, e16) = if half { (MatmulElem::R16, MatmulElem::F16) } else { (MatmulElem::F32, MatmulElem::F32) };
    let ldk = t.next_multiple_of(4);
    let s_op = Operand { offset: 0, row_stride: ldk, col_stride: 1, batch_stride: t * ldk };
    let st_op = Operand { offset: 0, row_stride: 1, col_stride: ldk, batch_stride: t * ldk };
    let mut p = vec![f32::NAN; batch * t * ldk];
    for b in 0..batch {
        for i in 0..t {
            for j in 0..granule_end(i, t) {
                p[b * t * ldk + i * ldk + j] = if j <= i { value(rng.uniform(1, 0.0, 1.0))[0] } else { 0.0 };
            }
        }
    }
    let tp = upload_elem(gpu, "p", &p, e16);
    let q = value(rng.uniform(batch * t * hd, -1.0, 1.0));
    let k = value(rng.uniform(batch * t * hd, -1.0, 1.0));
    let (tq, tk) = (upload(gpu, "q", &q), upload(gpu, "k", &k));
    let at = |b: usize, i: usize, d: usize| (b * t + i) * hd + d;
    let scores =
        Matmul { c: s_op, ..Matmul::nt(t, t, hd).batched(batch) }.causal(matmul::Causal::Scores).elems(e32, e32);
    let ts = poisoned(gpu, "s", &[batch * t * ldk]);
    run(gpu, &[bind(gpu, &scores, tq.view(), tk.view(), ts.view())]);
    let got = read(gpu, &ts);
    let (mut g, mut w) = (Vec::new(), Vec::new());
    for b in 0..batch {
        for i in 0..t {
            for j in 0..t {
                let x = got[b * t * ldk + i * ldk + j];
                if j < granule_end(i, t) {
                    g.push(x);
                    w.push((0..hd).map(|d| q[at(b, i, d)] as f64 * k[at(b, j, d)] as f64).sum::<f64>());
                } else {
                    assert!(x.is_nan(), "{how}: S[{b},{i},{j}] past the granule end was written ({x})");
                }
            }
        }
    }
    assert_close(&format!("causal scores {how}"), &g, &w, tol, rng.seed);
    let rows = Operand::row_major(t, hd);
    for (kind, a_op) in [(matmul::Causal::KeysToGranuleEnd, s_op), (matmul::Causal::QueriesFromGranule, st_op)] {
        let mm = Matmul { a: a_op, b: rows, c: rows, ..Matmul::nn(t, hd, t).batched(batch) };
        let mm =
            Matmul { b: Operand { batch_stride: t * hd, ..mm.b }, c: Operand { batch_stride: t * hd, ..mm.c }, ..mm }
                .causal(kind)
                .elems(e16, e32);
        let out = poisoned(gpu, "o", &[batch * t * hd]);
        run(gpu, &[bind(gpu, &mm, tp.view(), tq.view(), out.view())]);
        let mut want = vec![0.0f64; batch * t * hd];
        for b in 0..batch {
            for i in 0..t {
                for j in 0..=i {
                    let pij = p[b * t * ldk + i * ldk + j] as f64;
                    for d in 0..hd {
                        if kind == matmul::Causal::KeysToGranuleEnd {
                            want[at(b, i, d)] += pij * q[at(b, j, d)] as f64;
                        } else {
                            want[at(b, j, d)] += pij * q[at(b, i, d)] as f64;
                        }
                    }
                }
            }
        }
        assert_close(&format!("causal {kind:?} {how}"), &read(gpu, &out), &want, tol, rng.seed);
    }
}

#[test]
fn coop128v_runs_causal_products_without_its_cooperative_matrix_operations() {
    // coop128v's K loop over a causal product's range and its grid's skipped score tiles
    // (`coop::CAUSAL`), checked on any adapter through its soft check (`soft128v`, and with f16
    // quads or two slices in flight as coop128vq and coop128v2 run them): what the GPU check's
    // coop test then runs on the tensor cores. The f16 tiles through the same harness: the
    // harness itself.
    let gpu = f16_gpu();
    // (`soft128`, coop128's, is refused below: not in `coop::CAUSAL`.)
    for (name, soft) in &SOFT[1..] {
        check_causal(&gpu, name, 16, true, &|gpu, mm, a, b, c| soft(mm, gpu, a, b, c).unwrap(), 1e-5);
    }
    check_causal(&gpu, "w128 f16", 16, true, &|gpu, mm, a, b, c| mm.bind_variant(gpu, "w128", a, b, c).unwrap(), 1e-5);
    // The other cooperative-matrix kernels refuse them, whatever the adapter.
    let mm = Matmul::nt(256, 256, 16).causal(matmul::Causal::Scores).elems(MatmulElem::R16, MatmulElem::R16);
    let (a, c) = (upload(&gpu, "a", &vec![0.5; 256 * 16]), poisoned(&gpu, "c", &[256 * 256]));
    for v in [matmul::coop::VARIANT, matmul::coop::VARIANT128, matmul::coop::VARIANT128D, "coop128v:mma"] {
        let e = mm.bind_variant(&gpu, v, a.view(), a.view(), c.view()).unwrap_err().to_string();
        assert!(e.contains("causal") && e.contains(&matmul::coop::CAUSAL.join(", ")), "{v}: {e}");
    }
}

#[test]
fn causal_products_run_in_one_dispatch_or_not_at_all() {
    // Pieces would move the rows and K ranges a causal product counts its granules in: where its
    // operands exceed a binding it is an error that names the blocked attention, not a split.
    let gpu = gpu();
    let t = 40;
    let mm = Matmul::nt(t, t, 8).causal(matmul::Causal::Scores);
    // (The score products' tiles are equal: no order to choose.)
    assert_eq!(mm.causal_code(&gpu.with_forms(|f| f.causal_lpt = true)), mm.causal_code(&gpu));
    let (a, c) = (upload(&gpu, "a", &vec![0.5; t * 8]), poisoned(&gpu, "c", &[t * t]));
    let e = mm.bind_split_chunked(&gpu, a.view(), a.view(), c.view(), 256).unwrap_err();
    assert!(e.to_string().contains("needs one dispatch") && e.to_string().contains("attention=blocked"), "{e}");
    let ds = mm.bind_split_chunked(&gpu, a.view(), a.view(), c.view(), 1 << 20).unwrap();
    assert_eq!(ds.len(), 1);
}
