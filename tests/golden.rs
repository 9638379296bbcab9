//! Parity with the PyTorch float64 golden files, through the same code path as `ddl golden`.

use std::sync::Arc;

use ddl::gpu::Gpu;

fn check(name: &str) {
    check_on(&ddl::testing::gpu(), name);
}

fn check_on(gpu: &Arc<Gpu>, name: &str) {
    let path = ddl::testing::data_path("tests/golden").join(format!("{name}.safetensors"));
    check_path_on(gpu, name, &path);
}

fn check_path(name: &str, path: &std::path::Path) {
    check_path_on(&ddl::testing::gpu(), name, path);
}

fn check_path_on(gpu: &Arc<Gpu>, name: &str, path: &std::path::Path) {
    let g = ddl::golden::Golden::load(path).unwrap_or_else(|e| panic!("{e}"));
    let rows = ddl::golden::check(gpu, &g).unwrap_or_else(|e| panic!("{e}"));
    let fails: Vec<String> = rows.iter().filter(|r| !r.pass).map(|r| r.to_string()).collect();
    assert!(rows.len() > 50, "{name}: only {} rows compared", rows.len());
    assert!(fails.is_empty(), "{name}: {} of {} rows failed:\n{}", fails.len(), rows.len(), fails.join("\n"));
    // Every quantity the file holds was read by the check (none passed over).
    assert!(g.unread().is_empty(), "{name}: tensors not compared: {:?}", g.unread());
}

/// The eight variants, in the spec's order.
const ALL: &[&str] = &["baseline", "ddl_v1", "ddl", "ddl_ec", "ddl_cc", "ddl_ccec", "ddl_v1_vmap", "ddl_vmap"];
/// The variants of the second and fifth sets the tests of other forms run besides the public set.
const SOME_ODD: &[&str] = &["ddl", "ddl_ccec", "ddl_vmap"];
const SOME_UNALIGNED: &[&str] = &["baseline", "ddl", "ddl_cc", "ddl_vmap"];

/// `public` of the public set, `odd` of the second set and `unaligned` of the fifth, on `gpu`.
fn check_sets_on(gpu: &Arc<Gpu>, public: &[&str], odd: &[&str], unaligned: &[&str]) {
    for v in public {
        check_on(gpu, v);
    }
    for (set, names) in [("odd", odd), ("unaligned", unaligned)] {
        let dir = ddl::testing::data_path(&format!("tests/golden/{set}"));
        for v in names {
            check_path_on(gpu, &format!("{set}/{v}"), &dir.join(format!("{v}.safetensors")));
        }
    }
}

#[test]
fn golden_baseline() {
    check("baseline");
}

#[test]
fn golden_ddl_v1() {
    check("ddl_v1");
}

#[test]
fn golden_ddl() {
    check("ddl");
}

#[test]
fn golden_ddl_ec() {
    check("ddl_ec");
}

#[test]
fn golden_ddl_cc() {
    check("ddl_cc");
}

#[test]
fn golden_ddl_ccec() {
    check("ddl_ccec");
}

#[test]
fn golden_ddl_v1_vmap() {
    check("ddl_v1_vmap");
}

#[test]
fn golden_ddl_vmap() {
    check("ddl_vmap");
}

/// Every variant of the second set (H·h ≠ d, odd d_v, K_s ≠ K_e, T < K, other β₀, v_act, h_k).
#[test]
fn golden_odd_shapes_every_variant() {
    let dir = ddl::testing::data_path("tests/golden/odd");
    for v in ALL {
        check_path(&format!("odd/{v}"), &dir.join(format!("{v}.safetensors")));
    }
}

/// The fifth set: d = 30 and F = 85, widths that are not multiples of 4 (padded and unpadded
/// activations in one product), every variant.
#[test]
fn golden_unaligned_widths_every_variant() {
    let dir = ddl::testing::data_path("tests/golden/unaligned");
    for v in ALL {
        check_path(&format!("unaligned/{v}"), &dir.join(format!("{v}.safetensors")));
    }
}

/// The third set: d_v = 9, wider than the delta write's segment forms (one token per invocation,
/// its variant compiled on first use), for every expanded variant (CC with K_c = d_v).
#[test]
fn golden_value_width_nine_every_expanded_variant() {
    let dir = ddl::testing::data_path("tests/golden/wide");
    for v in ["ddl", "ddl_ec", "ddl_cc", "ddl_ccec", "ddl_vmap"] {
        check_path(&format!("wide/{v}"), &dir.join(format!("{v}.safetensors")));
    }
}

/// The DDL variants whose heads' backward the CPU adapters fold into the norm backward
/// (`norm::rmsnorm_backward_heads`), forced on here: the golden batch has too few rows for the
/// one-row-per-invocation norm kernels that path needs, so the tests above run the heads kernel.
#[test]
fn golden_with_the_heads_in_the_norm_backward() {
    let gpu = ddl::testing::gpu().with_forms(|f| f.norm_team = Some(1));
    assert!(ddl::kernels::norm::folds_heads(&gpu, 18, 32, 4, &[]), "the fold must be on for this test");
    let k_map = ["ddl_v1", "ddl", "ddl_ec", "ddl_cc", "ddl_ccec"];
    check_sets_on(&gpu, &k_map, &k_map, &[]);
}

/// Every DDL variant with the packed delta forward (the form of devices with fewer than 15
/// storage buffers per stage: a browser's WebGPU): the heads copied in, the saves copied out,
/// the training step's backward reading them.
#[test]
fn golden_with_the_packed_delta_forward() {
    let gpu = ddl::testing::gpu().with_forms(|f| f.delta_packed = true);
    check_sets_on(&gpu, &ALL[1..], SOME_ODD, SOME_UNALIGNED);
}

/// Every variant with the forms a GPU gets (`Forms::defaults` of a discrete adapter with
/// subgroups of 32: blocked attention of 256 rows, 128-wide delta segments, team reductions, the
/// compressor's wide finish over a block's two calls, the GPU matmul heuristic), run here on the
/// CPU adapter: the model's GPU path against float64 before a card runs it.
#[test]
fn golden_with_a_gpus_forms() {
    let base = ddl::testing::gpu();
    let forms = ddl::kernels::forms::Forms::defaults(false, (32, 32), base.features);
    let gpu = base.with_forms(|f| *f = forms);
    assert!(gpu.forms.conv_finish_wide && !gpu.forms.cpu);
    check_sets_on(&gpu, ALL, SOME_ODD, SOME_UNALIGNED);
}

/// Every variant with a GPU's forms plus the forms that are not a GPU default (`kernels::forms`):
/// the compressor's batched walks (`conv_batch`: slower on an H200, GPU run 5) and the attention
/// over the whole causal score matrix (`attention=causal`: the H200's `MEASURED` line since run
/// 5); the softmax steps by teams of 32 (`attn_team`) and RMSNorm's vec teams (`norm_vec`),
/// candidates until run 5 made them GPU defaults, stay set here. Before a default flips on a
/// card's numbers, the model with it already matches float64 here.
#[test]
fn golden_with_a_gpus_candidate_forms() {
    let base = ddl::testing::gpu();
    let forms = ddl::kernels::forms::Forms::defaults(false, (32, 32), base.features);
    let gpu = base.with_forms(|f| {
        *f = forms;
        (f.attention_row_team, f.conv_batch, f.norm_vec) = (32, true, true);
        f.attention = ddl::kernels::attention::Method::Causal;
    });
    check_sets_on(&gpu, ALL, SOME_ODD, SOME_UNALIGNED);
}

/// Every variant with the LM head in slices of rows (`ddl golden --head-chunk R`): slices of one
/// row, of 7 (a remainder), and of the whole batch (no slicing), with the lavapipe forms and a
/// GPU's, and in f16; the check's own row confirms the slices ran (and the loss of a forward-only
/// run over the sliced program's activations is checked too).
#[test]
fn golden_with_the_lm_head_in_slices() {
    let base = ddl::testing::gpu();
    let gpu_forms = ddl::kernels::forms::Forms::defaults(false, (32, 32), base.features);
    let gpu_like = base.with_forms(|f| *f = gpu_forms);
    let stored = |chunk: usize, precision| ddl::model::Storage { head_chunk: chunk, precision, ..Default::default() };
    let f32_ = ddl::model::Precision::F32;
    let mut runs: Vec<(&Arc<Gpu>, String, ddl::model::Storage)> = Vec::new();
    for v in ALL {
        runs.push((&base, v.to_string(), stored(7, f32_)));
    }
    for (set, names) in [("odd", SOME_ODD), ("unaligned", SOME_UNALIGNED)] {
        for v in names {
            runs.push((&base, format!("{set}/{v}"), stored(1, f32_)));
            runs.push((&gpu_like, format!("{set}/{v}"), stored(7, f32_)));
        }
    }
    for v in ["baseline", "ddl"] {
        runs.push((&base, v.to_string(), stored(1 << 20, f32_)));
        runs.push((&base, v.to_string(), stored(5, ddl::model::Precision::F16)));
    }
    let root = ddl::testing::data_path("tests/golden");
    for (gpu, name, st) in runs {
        let g = ddl::golden::Golden::load(&root.join(format!("{name}.safetensors"))).unwrap_or_else(|e| panic!("{e}"));
        let rows = ddl::golden::check_stored(gpu, &g, st).unwrap_or_else(|e| panic!("{e}"));
        let fails: Vec<String> = rows.iter().filter(|r| !r.pass).map(|r| r.to_string()).collect();
        let what = format!("{name} (head chunk {}, {})", st.head_chunk, st.precision.name());
        assert!(fails.is_empty(), "{what}: {} of {} rows failed:\n{}", fails.len(), rows.len(), fails.join("\n"));
        let n = g.batch * g.seq_len;
        let slices = n.div_ceil(st.head_chunk.min(n));
        let head = rows.iter().find(|r| r.name.starts_with("head: ")).expect("the slices' row");
        assert_eq!(head.name, format!("head: {slices} slices of {} rows", st.head_chunk.min(n)), "{what}");
        let eval = rows.iter().any(|r| r.name == "out.loss (forward only, sliced)");
        assert_eq!(eval, slices > 1, "{what}: the forward-only loss is checked exactly when the head is sliced");
    }
}

/// Every variant at T = 1 (one key per query: the q/k gradients are exactly zero, and AdamW must
/// not turn rounding noise there into an update).
#[test]
fn golden_one_token_every_variant() {
    let dir = ddl::testing::data_path("tests/golden/t1");
    for v in ALL {
        check_path(&format!("t1/{v}"), &dir.join(format!("{v}.safetensors")));
    }
}

#[test]
fn a_malformed_golden_file_is_a_clear_error() {
    let dir = ddl::testing::scratch_dir("golden-bad");
    let p = dir.join("bad.safetensors");
    std::fs::write(&p, b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all").unwrap();
    let e = ddl::golden::Golden::load(&p).err().expect("must fail");
    assert!(e.to_string().contains("bad.safetensors"), "{e}");
    let e = ddl::golden::Golden::load(&dir.join("missing.safetensors")).err().expect("must fail");
    assert!(e.to_string().contains("cannot read"), "{e}");
}

/// A tensor the build does not know (a newer reference's) is named in the report, not passed
/// over in silence; the known ones are still compared.
#[test]
fn tensors_a_golden_file_holds_beyond_the_checks_are_named() {
    let path = ddl::testing::data_path("tests/golden/baseline.safetensors");
    let mut g = ddl::golden::Golden::load(&path).unwrap();
    for name in ["internal.block0.future_thing", "out.something_new"] {
        g.tensors.insert(name.into(), (vec![2], ddl::golden::Data::F32(vec![0.0, 1.0])));
    }
    let rows = ddl::golden::check(&ddl::testing::gpu(), &g).unwrap();
    assert!(rows.len() > 50 && rows.iter().all(|r| r.pass));
    assert_eq!(g.unread(), ["internal.block0.future_thing", "out.something_new"]);
    let report = ddl::golden::report(&path, &g, &rows, true);
    assert!(
        report.contains("2 of the file's")
            && report.contains("not compared")
            && report.contains("internal.block0.future_thing, out.something_new"),
        "{report}"
    );
    // --quiet with every row passing: the summary alone, no table header; without it, both.
    assert!(!report.contains("rel_l2") && report.contains("compared, 0 failed"), "{report}");
    let full = ddl::golden::report(&path, &g, &rows, false);
    assert!(full.contains("rel_l2") && full.lines().count() > rows.len(), "{full}");
}

/// The f16 saved-state path (`--f16-state`) against the same float64 goldens at the looser
/// tolerances of [`ddl::golden::f16_state_tol`]: every variant it supports (d_v = 4), in the
/// CPU adapters' layouts (quads, and one token per invocation without them) and the GPUs'
/// (segments of invocations per token). The check cannot pass vacuously: the f16
/// rows must differ from the f32 ones by more than f32 rounding.
#[test]
fn golden_f16_state() {
    let gpu = ddl::testing::gpu();
    assert!(
        gpu.features.contains(wgpu::Features::SHADER_F16),
        "adapter {} has no SHADER_F16, which the f16-state tests need",
        gpu.info.name
    );
    let root = ddl::testing::data_path("tests/golden");
    let worst = |rows: &[ddl::golden::Row]| {
        rows.iter().filter(|r| r.tol > 0.0 && r.tol < 1.0).map(|r| r.rel_l2).fold(0.0, f64::max)
    };
    let run = |gpu: &Arc<Gpu>, name: &str| {
        let g = ddl::golden::Golden::load(&root.join(format!("{name}.safetensors"))).unwrap_or_else(|e| panic!("{e}"));
        let rows = ddl::golden::check_with(gpu, &g, true).unwrap_or_else(|e| panic!("{e}"));
        let f32_rows = ddl::golden::check(gpu, &g).unwrap_or_else(|e| panic!("{e}"));
        let fails: Vec<String> = rows.iter().filter(|r| !r.pass).map(|r| r.to_string()).collect();
        assert!(rows.len() > 50, "{name}: only {} rows compared", rows.len());
        assert!(fails.is_empty(), "{name}: {} of {} rows failed:\n{}", fails.len(), rows.len(), fails.join("\n"));
        let (w16, w32) = (worst(&rows), worst(&f32_rows));
        assert!(w16 > 2.0 * w32, "{name}: the f16 state changed nothing (worst {w16:e} vs f32 {w32:e})");
    };
    for name in ["ddl", "ddl_vmap"] {
        run(&gpu, name);
    }
    run(&gpu.with_forms(|f| f.delta_quads = false), "ddl");
    run(&gpu.with_forms(|f| f.delta_segment = Some(8)), "ddl");
}

/// The baseline's residual added by each sublayer's last product (form `residual_fused`, on by
/// default) or by a separate h and an add pass: the same bits in every set and both precisions —
/// every row but the h traces, which the fused form reads as X_out − X_in (they pass the golden
/// tolerance in both forms).
#[test]
fn golden_the_residual_in_the_product_keeps_the_bits() {
    let gpu = ddl::testing::gpu();
    assert!(gpu.forms.residual_fused, "the test compares the fused residual (the default) with the add pass");
    let off = gpu.with_forms(|f| f.residual_fused = false);
    let root = ddl::testing::data_path("tests/golden");
    for set in ["", "odd/", "t1/", "unaligned/"] {
        let g = ddl::golden::Golden::load(&root.join(format!("{set}baseline.safetensors")))
            .unwrap_or_else(|e| panic!("{e}"));
        for precision in [ddl::model::Precision::F32, ddl::model::Precision::F16] {
            let fused = ddl::golden::check_precision(&gpu, &g, false, precision).unwrap_or_else(|e| panic!("{e}"));
            let add = ddl::golden::check_precision(&off, &g, false, precision).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(fused.len(), add.len(), "{set}baseline {precision:?}: rows");
            let mut compared = 0;
            for (a, b) in fused.iter().zip(&add) {
                assert!(a.pass && b.pass, "{set}baseline {precision:?}: {a} / {b}");
                if a.name.ends_with(".h") {
                    continue;
                }
                compared += 1;
                assert_eq!(a.rel_l2.to_bits(), b.rel_l2.to_bits(), "{set}baseline {precision:?}: {a} / {b}");
            }
            assert!(compared > 50, "{set}baseline {precision:?}: only {compared} rows compared");
        }
    }
}

/// `--precision f16` against the float64 goldens at the f16 tolerances: the linear layers and the
/// LM head take f16 operands (and the states are f16 where the variant has them). The f16 kernels
/// must really have run: every file's worst error is well above the f32 path's, and below the
/// tolerance; the head's f16 rounding shows in the logits' error.
#[test]
fn golden_f16_precision() {
    let gpu = ddl::testing::gpu();
    assert!(
        gpu.features.contains(wgpu::Features::SHADER_F16),
        "adapter {} has no SHADER_F16, which the f16 tests need",
        gpu.info.name
    );
    let root = ddl::testing::data_path("tests/golden");
    let worst = |rows: &[ddl::golden::Row]| {
        rows.iter().filter(|r| r.tol > 0.0 && r.tol < 1.0).map(|r| r.rel_l2).fold(0.0, f64::max)
    };
    for &name in ALL {
        let g = ddl::golden::Golden::load(&root.join(format!("{name}.safetensors"))).unwrap_or_else(|e| panic!("{e}"));
        let rows =
            ddl::golden::check_precision(&gpu, &g, false, ddl::model::Precision::F16).unwrap_or_else(|e| panic!("{e}"));
        let f32_rows = ddl::golden::check(&gpu, &g).unwrap_or_else(|e| panic!("{e}"));
        let fails: Vec<String> = rows.iter().filter(|r| !r.pass).map(|r| r.to_string()).collect();
        assert!(rows.len() > 50, "{name}: only {} rows compared", rows.len());
        assert!(fails.is_empty(), "{name}: {} of {} rows failed:\n{}", fails.len(), rows.len(), fails.join("\n"));
        let (w16, w32) = (worst(&rows), worst(&f32_rows));
        assert!(w16 > 10.0 * w32, "{name}: f16 precision changed nothing (worst {w16:e} vs f32 {w32:e})");
        eprintln!("{name}: worst relative L2 {w16:.2e} in f16, {w32:.2e} in f32");
        if name == "ddl_vmap" || name == "baseline" {
            // The weights read from the f16 copy or rounded from the f32 parameters as read
            // (form matmul_f16_weights): the same bits.
            let off = gpu.with_forms(|f| f.matmul_f16_weights = false);
            let other = ddl::golden::check_precision(&off, &g, false, ddl::model::Precision::F16)
                .unwrap_or_else(|e| panic!("{e}"));
            let differ: Vec<String> = rows
                .iter()
                .zip(&other)
                .filter(|(a, b)| a.rel_l2.to_bits() != b.rel_l2.to_bits())
                .map(|(a, b)| format!("{a} / {b}"))
                .collect();
            assert!(
                differ.is_empty() && rows.len() == other.len(),
                "{name}: the f16 weight copy changed the results:\n{}",
                differ.join("\n")
            );
            // The MLP's SwiGLU output stored in f16 or in f32 and rounded as read (form
            // f16_acts): the same bits.
            let off = gpu.with_forms(|f| f.f16_acts = false);
            let other = ddl::golden::check_precision(&off, &g, false, ddl::model::Precision::F16)
                .unwrap_or_else(|e| panic!("{e}"));
            let same = rows.iter().zip(&other).all(|(a, b)| a.rel_l2.to_bits() == b.rel_l2.to_bits());
            assert!(same && rows.len() == other.len(), "{name}: storing ψ in f16 changed the results");
            // The LM head on f16 operands (form head_f16) or in f32: its rounding shows in the
            // logits' error, which both keep within the f16 tolerance.
            let off = gpu.with_forms(|f| f.head_f16 = false);
            let f32_head = ddl::golden::check_precision(&off, &g, false, ddl::model::Precision::F16)
                .unwrap_or_else(|e| panic!("{e}"));
            let logits = |rows: &[ddl::golden::Row]| rows.iter().find(|r| r.name == "out.logits").unwrap().clone();
            let (h16, h32) = (logits(&rows), logits(&f32_head));
            let fails: Vec<String> = f32_head.iter().filter(|r| !r.pass).map(|r| r.to_string()).collect();
            assert!(fails.is_empty(), "{name}: with head_f16=0:\n{}", fails.join("\n"));
            assert!(
                h16.rel_l2 > h32.rel_l2,
                "{name}: the f16 head did not change the logits' error ({:e} vs {:e} with head_f16=0)",
                h16.rel_l2,
                h32.rel_l2
            );
        }
    }
}
