//! Training end to end on the real adapter: exact resume, checkpoints, the CLI.

use std::path::{Path, PathBuf};
use std::process::Command;

use ddl::bench::CaseFilter;
use ddl::model::{Storage, Variant};
use ddl::train::{RunConfig, TrainOptions};

fn tmpdir(name: &str) -> PathBuf {
    ddl::testing::scratch_dir(&format!("test-{name}"))
}

/// A model small enough to train a few steps in seconds on lavapipe.
fn small_run(variant: Variant, corpus: &str) -> RunConfig {
    let mut r = RunConfig::preset("tiny", variant).unwrap();
    r.corpus = corpus.to_string();
    for kv in [
        "model.d_model=32",
        "model.n_layers=1",
        "model.n_heads=2",
        "model.head_dim=16",
        "model.mlp_hidden=85",
        "train.batch_size=2",
        "train.seq_len=16",
        "train.eval_every=0",
        "train.eval_batches=2",
        "train.checkpoint_every=0",
        "train.warmup_steps=2",
    ] {
        r.set(kv).unwrap();
    }
    r
}

fn env_cache(dir: &Path) {
    // Token caches go to the test's own directory.
    unsafe { std::env::set_var("DDL_CACHE_DIR", dir.join("cache")) };
}

#[test]
fn resuming_gives_bit_identical_losses_to_an_uninterrupted_run() {
    let dir = tmpdir("resume");
    env_cache(&dir);
    let c = ddl::testing::small_corpus(&dir);
    let gpu = ddl::testing::gpu();
    // The f16-state path (train.state_f16) resumes exactly too: the setting is part of the run.
    for (variant, f16) in [(Variant::Ddl, false), (Variant::Baseline, false), (Variant::Ddl, true)] {
        let mut run = small_run(variant, &c);
        run.set(&format!("train.state_f16={f16}")).unwrap();
        let variant = if f16 { format!("{variant}-f16") } else { variant.to_string() };
        let a = dir.join(format!("{variant}-a"));
        let b = dir.join(format!("{variant}-b"));
        let full = ddl::train::train(
            gpu.clone(),
            TrainOptions {
                run: run.clone(),
                steps: 6,
                out: a,
                resume: false,
                overwrite: false,
                show: ddl::train::Show::Quiet,
            },
        )
        .unwrap();
        let first = ddl::train::train(
            gpu.clone(),
            TrainOptions {
                run: run.clone(),
                steps: 3,
                out: b.clone(),
                resume: false,
                overwrite: false,
                show: ddl::train::Show::Quiet,
            },
        )
        .unwrap();
        let second = ddl::train::train(
            gpu.clone(),
            TrainOptions {
                run,
                steps: 6,
                out: b.clone(),
                resume: true,
                overwrite: false,
                show: ddl::train::Show::Quiet,
            },
        )
        .unwrap();
        let resumed: Vec<u32> = first.losses.iter().chain(&second.losses).map(|x| x.to_bits()).collect();
        let straight: Vec<u32> = full.losses.iter().map(|x| x.to_bits()).collect();
        assert_eq!(resumed, straight, "{variant}: losses {:?} vs {:?}", first.losses, full.losses);
        assert!(full.losses[5] < full.losses[0], "{variant}: loss did not go down: {:?}", full.losses);
        assert!(
            b.join("model.safetensors").exists()
                && b.join("optim.safetensors").exists()
                && b.join("metrics.jsonl").exists()
        );
        assert!(b.join("loss.png").exists(), "loss plot missing");
        let saved = std::fs::read_to_string(b.join("config.toml")).unwrap();
        assert!(saved.contains(&format!("state_f16 = {f16}")), "{variant}: config.toml lacks the setting:\n{saved}");
    }
}

#[test]
fn an_f16_run_skips_overflowing_steps_adjusts_its_loss_scale_and_resumes_bit_exact() {
    // An injected overflow: a first loss scale of 2^28 makes the scaled gradients overflow the
    // f16 operands, so the first steps are skipped (parameters untouched on the GPU) and halve
    // the scale until they fit; 3 clean steps double it again.
    let dir = tmpdir("f16-scale");
    env_cache(&dir);
    let c = ddl::testing::small_corpus(&dir);
    let gpu = ddl::testing::gpu();
    let mut run = small_run(Variant::Ddl, &c);
    for kv in ["train.precision=f16", "train.loss_scale=268435456.0", "train.loss_scale_growth=3"] {
        run.set(kv).unwrap();
    }
    let (a, b) = (dir.join("a"), dir.join("b"));
    let opts = |steps, out: &Path, resume| TrainOptions {
        run: run.clone(),
        steps,
        out: out.to_path_buf(),
        resume,
        overwrite: false,
        show: ddl::train::Show::Quiet,
    };
    let full = ddl::train::train(gpu.clone(), opts(20, &a, false)).unwrap();
    let first = ddl::train::train(gpu.clone(), opts(10, &b, false)).unwrap();
    let second = ddl::train::train(gpu.clone(), opts(20, &b, true)).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let resumed: Vec<f32> = first.losses.iter().chain(&second.losses).copied().collect();
    assert_eq!(bits(&resumed), bits(&full.losses), "resumed {resumed:?} vs {:?}", full.losses);
    let params = |d: &Path| std::fs::read(d.join("model.safetensors")).unwrap();
    assert!(params(&a) == params(&b), "the resumed run's parameters differ");
    // What metrics.jsonl says: the scale each step used and whether it was skipped.
    let steps: Vec<(f64, bool)> = std::fs::read_to_string(a.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("loss_scale").is_some())
        .map(|v| (v["loss_scale"].as_f64().unwrap(), v["skipped"].as_bool().unwrap()))
        .collect();
    assert_eq!(steps.len(), 20, "{steps:?}");
    assert!(steps[0] == (268435456.0, true), "{steps:?}");
    let skipped = steps.iter().filter(|s| s.1).count();
    assert!((2..15).contains(&skipped), "{skipped} skipped: {steps:?}");
    let mut clean = 0;
    for w in steps.windows(2) {
        let ((s0, skip0), (s1, _)) = (w[0], w[1]);
        clean = if skip0 { 0 } else { clean + 1 };
        let want = if skip0 {
            s0 / 2.0
        } else if clean == 3 {
            clean = 0;
            s0 * 2.0
        } else {
            s0
        };
        assert_eq!(s1, want, "{steps:?}");
    }
    assert!(steps.iter().any(|s| !s.1) && full.losses[19] < full.losses[0], "{:?}", full.losses);
    // Refused settings name the key.
    for (kv, key) in
        [("train.loss_scale=1000.0", "train.loss_scale"), ("train.loss_scale_growth=0", "loss_scale_growth")]
    {
        let mut r = run.clone();
        r.set(kv).unwrap();
        let e = r.validate().unwrap_err().to_string();
        assert!(e.contains(key), "{e}");
    }
}

#[test]
fn the_f16_state_is_refused_where_it_is_not_supported_with_a_clear_error() {
    let gpu = ddl::testing::gpu();
    let mut m = ddl::model::Model::new(gpu.clone(), bench_cfg(Variant::Baseline), 1).unwrap();
    let e = m.set_state_f16(true).unwrap_err().to_string();
    assert!(e.contains("f16 state") && e.contains("baseline"), "{e}");
    let mut cfg = bench_cfg(Variant::Ddl);
    cfg.d_v = 3;
    let mut m = ddl::model::Model::new(gpu.clone(), cfg, 1).unwrap();
    let e = m.set_state_f16(true).unwrap_err().to_string();
    assert!(e.contains("d_v = 4") && e.contains("d_v = 3"), "{e}");
    let mut m = ddl::model::Model::new(gpu, bench_cfg(Variant::DdlEc), 1).unwrap();
    assert!(m.set_state_f16(true).unwrap_err().to_string().contains("ddl_ec"));
    assert!(!m.state_f16, "a refused setting must leave the model as it was");
}

#[test]
fn the_step_statistics_carry_each_sublayers_mean_beta() {
    // The β sums copied into the step's one readback equal the mean of β read back directly.
    let gpu = ddl::testing::gpu();
    let mut cfg = ddl::model::ModelConfig::preset("tiny", Variant::Ddl).unwrap();
    (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.head_dim, cfg.mlp_hidden) = (32, 2, 2, 16, 85);
    let model = ddl::model::Model::new(gpu.clone(), cfg.clone(), 5).unwrap();
    let opt = ddl::kernels::adamw::AdamWConfig::paper(1e-3);
    let prog = model.program(3, 16, &opt).unwrap();
    let mut rng = ddl::testing::Rng::new(11);
    let (x, y) = (rng.ints(48, cfg.vocab_size), rng.ints(48, cfg.vocab_size));
    prog.set_batch(&model, &x, &y).unwrap();
    let stats = prog.run(&model, ddl::model::Parts::GRADIENTS).unwrap();
    let from_stats = ddl::model::beta_means_of(&stats, 48);
    let direct = ddl::train::beta_means(&model, &prog).unwrap();
    assert_eq!(from_stats.len(), 4);
    for (a, b) in from_stats.iter().zip(&direct) {
        assert!((a - b).abs() <= 1e-5 * b.abs(), "β mean from the statistics {a} vs read back {b}");
    }
}

#[test]
fn a_checkpoint_round_trips_and_rejects_a_mismatched_tensor() {
    let dir = tmpdir("ckpt");
    let cfg = ddl::model::ModelConfig::preset("tiny", Variant::DdlCcec).unwrap();
    let layout = ddl::model::Layout::new(&cfg);
    let p = layout.init(3);
    let tok = ddl::tokenizer::Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_chars(
        (0..cfg.vocab_size as u32).map(|i| char::from_u32(0x4e00 + i).unwrap()).collect(),
    ));
    ddl::train::checkpoint::save(&dir, &cfg, &tok, &layout, &p, None).unwrap();
    let back = ddl::train::checkpoint::load(&dir, false).unwrap();
    assert_eq!(back.config, cfg);
    assert_eq!(back.params, p);
    assert_eq!(back.tokenizer, tok);
    // Truncate the file: a clear error naming it.
    let f = dir.join("model.safetensors");
    let bytes = std::fs::read(&f).unwrap();
    std::fs::write(&f, &bytes[..bytes.len() / 2]).unwrap();
    let e = ddl::train::checkpoint::load(&dir, false).err().unwrap().to_string();
    assert!(e.contains("model.safetensors"), "{e}");
    let e = ddl::train::checkpoint::load(&dir.join("nope"), false).err().unwrap().to_string();
    assert!(e.contains("does not exist"), "{e}");
}

#[test]
fn a_checkpoint_streams_from_and_to_the_device_in_pieces_and_equals_the_host_path() {
    // A model with a tensor of 393,216 elements (more than one 262,144-element piece, not a
    // multiple of it): the streamed save writes what the host save writes, byte for byte, and
    // `load_to_device` puts back what `load` reads, moments included; a non-finite value in a
    // later piece is refused naming the tensor and its element.
    let gpu = ddl::testing::gpu();
    let mut cfg = ddl::model::ModelConfig::preset("tiny", Variant::Ddl).unwrap();
    (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.head_dim, cfg.mlp_hidden) = (384, 1, 3, 128, 1024);
    let model = ddl::model::Model::new(gpu.clone(), cfg.clone(), 7).unwrap();
    let n = model.layout.total;
    let mut rng = ddl::testing::Rng::new(9);
    let (mut m, mut v) = (rng.normal(n, 1.0), rng.normal(n, 1.0).iter().map(|x| x * x).collect::<Vec<f32>>());
    // Zeros in the alignment padding between tensors, as training leaves it (files hold tensors).
    let mut used = vec![false; n];
    for (s, &o) in model.layout.specs.iter().zip(&model.layout.offsets) {
        used[o..o + s.len()].fill(true);
    }
    for i in (0..n).filter(|&i| !used[i]) {
        (m[i], v[i]) = (0.0, 0.0);
    }
    model.adam_m.write_f32(&gpu, &m).unwrap();
    model.adam_v.write_f32(&gpu, &v).unwrap();
    let tok = ddl::tokenizer::Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_chars(
        (0..cfg.vocab_size as u32).map(|i| char::from_u32(0x4e00 + i).unwrap()).collect(),
    ));
    let state = ddl::train::checkpoint::RunState { step: 3, elapsed: 1.5, loss_scale: None, target: Some(5) };
    let (dev, host) = (tmpdir("ckpt-dev"), tmpdir("ckpt-host"));
    ddl::train::checkpoint::save_model(&dev, &model, &tok, &state, "x = 1").unwrap();
    let p = model.read_params().unwrap();
    ddl::train::checkpoint::save(&host, &cfg, &tok, &model.layout, &p, Some((&m, &v, &state, "x = 1"))).unwrap();
    for f in ["model.safetensors", "optim.safetensors"] {
        let (a, b) = (std::fs::read(dev.join(f)).unwrap(), std::fs::read(host.join(f)).unwrap());
        assert!(a == b, "{f}: the file streamed from the device differs from the one written from host copies");
    }
    let back = ddl::train::checkpoint::load(&dev, true).unwrap();
    assert_eq!(back.params, p);
    let (bm, bv, bs, br) = back.optim.unwrap();
    assert!(bm == m && bv == v && bs == state && br == "x = 1");
    let loaded = ddl::train::checkpoint::load_to_device(&dev, gpu.clone(), true).unwrap();
    assert_eq!(loaded.step, 3);
    assert_eq!(loaded.model.read_params().unwrap(), p);
    assert_eq!(loaded.model.adam_m.read_f32(&gpu).unwrap(), m);
    assert_eq!(loaded.model.adam_v.read_f32(&gpu).unwrap(), v);
    assert_eq!(loaded.optim.unwrap(), (state, "x = 1".to_string()));
    // A NaN at element 300,000 of the largest tensor (its second piece).
    let (o, len) = model.layout.range("blocks.0.mlp.w_down");
    assert!(len > 300_000);
    let mut bad = p.clone();
    bad[o + 300_000] = f32::NAN;
    let badd = tmpdir("ckpt-nan");
    ddl::train::checkpoint::save(&badd, &cfg, &tok, &model.layout, &bad, None).unwrap();
    let e = ddl::train::checkpoint::load_to_device(&badd, gpu.clone(), false).err().unwrap().to_string();
    assert!(
        e.contains("model.safetensors") && e.contains("blocks.0.mlp.w_down") && e.contains("element 300000"),
        "{e}"
    );
}

const SMALL: &[&str] = ddl::testing::SMALL_MODEL_FLAGS;

fn ddl_cmd(dir: &Path) -> Command {
    ddl::testing::ddl_command(env!("CARGO_BIN_EXE_ddl"), dir)
}

/// `ddl plot`: runs' curves from their metrics.jsonl in one PNG (no device), the table of where
/// each ended, its own picture replaced and nothing else, runs without the metric named.
#[test]
fn plot_draws_runs_curves_and_tabulates_where_each_ended() {
    let dir = tmpdir("plot");
    // Two runs' folders as `ddl train` leaves them: config.toml (B 2 × T 16) and metrics.jsonl.
    let run = |name: &str, variant: Variant, lines: &[String]| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.toml"), toml::to_string(&small_run(variant, "c.txt")).unwrap()).unwrap();
        std::fs::write(d.join("metrics.jsonl"), lines.join("\n") + "\n").unwrap();
        d
    };
    let step = |s: usize, loss: f64, betas: &str| {
        format!(
            "{{\"step\":{s},\"loss\":{loss},\"lr\":0.001,\"grad_norm\":1.5,\"tok_per_s\":100,\"elapsed\":{}{betas}}}",
            s as f64 * 0.5
        )
    };
    let val = |s: usize, loss: f64, full: bool| {
        let extra = if full { format!(",\"val_subset_loss\":{}", loss - 0.25) } else { String::new() };
        format!("{{\"step\":{s},\"val_loss\":{loss},\"val_tokens\":64,\"val_full\":{full}{extra}}}")
    };
    let b = ",\"beta_mean\":[1.0,0.5]";
    let a = run(
        "a",
        Variant::Ddl,
        &[step(1, 4.0, b), step(2, 3.0, b), val(2, 3.5, false), step(3, 2.0, b), step(4, 1.0, b), val(4, 2.9, true)],
    );
    let base = run("base", Variant::Baseline, &[step(1, 4.5, ""), step(2, 3.5, ""), val(2, 3.0, true)]);
    let out = dir.join("val.png");
    let text = |o: &std::process::Output| {
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
    };
    let plot = |args: &[&str]| ddl_cmd(&dir).arg("plot").args(args).output().unwrap();
    let (sa, sb, so) = (a.to_str().unwrap(), base.to_str().unwrap(), out.to_str().unwrap());
    let o = plot(&[sa, sb, "--out", so, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = &j["runs"][0];
    // 4 steps of 32 tokens; the last 10 % of the logged losses (one); the curve's last point is the
    // final evaluation's part over the windows every evaluation covers (2.9 - 0.25), its best too.
    assert_eq!((r["step"].as_u64(), r["tokens"].as_u64(), r["train_loss"].as_f64()), (Some(4), Some(128), Some(1.0)));
    assert_eq!(
        (&r["val_last"], &r["val_best"], &r["val_whole"]),
        (&serde_json::json!([4, 2.65]), &serde_json::json!([4, 2.65]), &serde_json::json!([4, 2.9, 64]))
    );
    assert_eq!((r["points"].as_u64(), j["runs"][1]["points"].as_u64()), (Some(2), Some(1)));
    assert_eq!(ddl::train::plot::plot_title(&out).as_deref(), Some("validation loss, 2 runs"));
    // The text table; its own picture replaced; by tokens, smoothed, β of one run per write.
    let o = plot(&[sa, sb, "--out", so, "--metric", "train", "--x", "tokens", "--smooth", "2"]);
    let t = text(&o);
    assert!(
        o.status.success() && t.contains("train (last 10 %)") && t.contains("2.6500 @4") && t.contains("wrote "),
        "{t}"
    );
    assert_eq!(ddl::train::plot::plot_title(&out).as_deref(), Some("training loss, 2 runs"));
    // Lines that do not read (an edit) are skipped and said, with the file and their numbers (they
    // were skipped without a word); a torn last line (a run writing it, or killed) is not.
    let edited = run("edited", Variant::Ddl, &[step(1, 4.0, b), "{\"step\": 2, oops".into(), step(3, 2.0, b)]);
    let mut m = std::fs::read_to_string(edited.join("metrics.jsonl")).unwrap();
    m.push_str("{\"step\":4,\"lo");
    std::fs::write(edited.join("metrics.jsonl"), &m).unwrap();
    let o = plot(&[edited.to_str().unwrap(), "--out", so, "--metric", "train"]);
    let t = text(&o);
    let file = edited.join("metrics.jsonl").display().to_string();
    assert!(
        o.status.success()
            && t.contains(&format!("note: {file}: skipped 1 line that does not read"))
            && t.contains("(line 2)"),
        "{t}"
    );
    let o = plot(&[edited.to_str().unwrap(), "--out", so, "--metric", "train", "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["unreadable"], serde_json::json!([[file, [2]]]), "{j}");
    let o = plot(&[sa, "--out", so, "--metric", "train"]);
    assert!(o.status.success() && !text(&o).contains("skipped"), "{}", text(&o));
    let o = plot(&[sa, "--out", so, "--metric", "beta", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["runs"][0]["points"].as_u64(), Some(8), "two writes × four steps");
    // Refused, naming what and why: the baseline's β, a folder without metrics, a run given twice,
    // a file ddl plot did not draw (a run's loss.png), a bad metric.
    for (args, want) in [
        (vec![sa, sb, "--out", so, "--metric", "beta"], "no β in its metrics.jsonl"),
        // (A folder of runs: named as one, with its runs.)
        (vec![sa, dir.to_str().unwrap(), "--out", so], "holds run folders (a, base, edited), not a run"),
        (vec![sa, sa, "--out", so], "given twice"),
        (vec![sa, "--out", a.join("loss.png").to_str().unwrap()], "not a plot `ddl plot` drew"),
        (vec![sa, "--out", so, "--metric", "loss"], "unknown metric 'loss'"),
        (vec![sa, "--out", so, "--smooth", "3"], "--smooth 3: the validation curves are drawn as evaluated"),
        (vec![sa, "--out", dir.join("x.svg").to_str().unwrap()], "give a file name ending in .png"),
    ] {
        if want.contains("not a plot") {
            ddl::train::progress::plot_metrics(&a).unwrap();
        }
        let o = plot(&args);
        assert!(o.status.code() == Some(1) && text(&o).contains(want), "{args:?}: {want:?} not in {}", text(&o));
    }
    assert_eq!(ddl::train::plot::plot_title(&a.join("loss.png")).as_deref(), Some("loss"));
    // A run stopped before its first evaluation: said so by its settings (it blamed
    // train.eval_every = 0 whatever the run had).
    let young = run("young", Variant::Ddl, &[step(1, 4.0, b), step(2, 3.0, b)]);
    let mut r = small_run(Variant::Ddl, "c.txt");
    r.set("train.eval_every=100").unwrap();
    std::fs::write(young.join("config.toml"), toml::to_string(&r).unwrap()).unwrap();
    let none = run("none", Variant::Ddl, &[step(1, 4.0, b)]);
    for (d, want) in [(&young, "logged up to step 2, its first evaluation is at step 100"), (&none, "eval_every = 0")] {
        let o = plot(&[d.to_str().unwrap(), "--out", so]);
        assert!(o.status.code() == Some(1) && text(&o).contains(want), "{want:?} not in {}", text(&o));
        assert!(text(&o).contains("ddl train --resume RUN"), "{}", text(&o));
    }
    // One training now (another live process holds it: PID 1 always runs on Linux) goes on by
    // itself: not told to resume, which is refused while it trains.
    if std::path::Path::new("/proc/1").exists() {
        let lock = young.join(ddl::train::lock::LOCK_FILE);
        std::fs::write(&lock, format!("1 {}\n", ddl::train::lock::host_name())).unwrap();
        let o = plot(&[young.to_str().unwrap(), "--out", so]);
        let t = text(&o);
        assert!(o.status.code() == Some(1) && t.contains("it is training now") && !t.contains("--resume"), "{t}");
        std::fs::remove_file(&lock).unwrap();
    }
}

#[test]
fn plot_draws_an_experiments_variants_as_means_over_seeds() {
    // An experiment's folder as `ddl experiment` leaves it: runs/VARIANT-seedN, each a run folder.
    let dir = tmpdir("plot-exp");
    let exp = dir.join("grid");
    let run = |name: &str, variant: Variant, vals: &[(usize, f64)], beta: bool| {
        let d = exp.join("runs").join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.toml"), toml::to_string(&small_run(variant, "c.txt")).unwrap()).unwrap();
        let b = if beta { ",\"beta_mean\":[1.0,0.5]" } else { "" };
        let mut lines = Vec::new();
        for &(s, l) in vals {
            lines.push(format!("{{\"step\":{s},\"loss\":{},\"lr\":0.001,\"elapsed\":{s}{b}}}", l + 0.5));
            lines.push(format!("{{\"step\":{s},\"val_loss\":{l},\"val_tokens\":64,\"val_full\":false}}"));
        }
        std::fs::write(d.join("metrics.jsonl"), lines.join("\n") + "\n").unwrap();
        d
    };
    run("baseline-seed1", Variant::Baseline, &[(2, 3.0), (4, 2.0)], false);
    run("baseline-seed2", Variant::Baseline, &[(2, 3.2), (4, 2.4)], false);
    let d1 = run("ddl-seed1", Variant::Ddl, &[(2, 2.9), (4, 1.8)], true);
    // A seed still training (two steps of four) and one not started.
    run("ddl-seed2", Variant::Ddl, &[(2, 3.1)], true);
    std::fs::create_dir_all(exp.join("runs/ddl-seed3")).unwrap();
    std::fs::write(exp.join("experiment.toml"), "").unwrap();
    let out = dir.join("exp.png");
    let text = |o: &std::process::Output| {
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
    };
    let plot = |args: &[&str]| ddl_cmd(&dir).arg("plot").args(args).output().unwrap();
    let (se, so) = (exp.to_str().unwrap(), out.to_str().unwrap());
    let o = plot(&[se, "--out", so, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let g = &j["groups"];
    assert_eq!((g[0]["name"].as_str(), g[1]["name"].as_str(), g[2].is_null()), (Some("baseline"), Some("ddl"), true));
    let spread = |v: &serde_json::Value| (v["mean"].as_f64().unwrap(), v["sd"].as_f64().unwrap(), v["n"].as_u64());
    let close = |(m, s, n): (f64, f64, Option<u64>), want: (f64, f64, u64)| {
        (m - want.0).abs() < 1e-12 && (s - want.1).abs() < 1e-12 && n == Some(want.2)
    };
    // Baseline: last points 2.0 and 2.4 (mean 2.2, sd √0.08), best the same; training 2.5 and 2.9.
    assert!(close(spread(&g[0]["val_last"]), (2.2, 0.08f64.sqrt(), 2)), "{g}");
    assert!(close(spread(&g[0]["train_loss"]), (2.7, 0.08f64.sqrt(), 2)), "{g}");
    assert_eq!(
        (g[0]["runs"].as_u64(), &g[0]["steps"], g[0]["common_step"].as_u64()),
        (Some(2), &serde_json::json!([4, 4]), Some(4))
    );
    // ddl: the unfinished seed ends at step 2, and the band's curve with it.
    assert_eq!((&g[1]["steps"], g[1]["common_step"].as_u64()), (&serde_json::json!([2, 4]), Some(2)));
    // Its last points 1.8 (step 4) and 3.1 (step 2): the table's columns are each run's own.
    assert!(close(spread(&g[1]["val_last"]), (2.45, 1.3 / 2f64.sqrt(), 2)), "{g}");
    assert_eq!(j["runs"].as_array().map(Vec::len), Some(4));
    assert_eq!(j["runs"][2]["group"].as_str(), Some("ddl"));
    let left = j["left_out"].to_string();
    assert!(left.contains("ddl-seed3") && left.contains("not started"), "{left}");
    assert_eq!(
        ddl::train::plot::plot_title(&out).as_deref(),
        Some("validation loss, 4 runs by variant: mean over seeds, band min..max")
    );
    // The text: one row per variant with mean ± sd, the cut curve and the run left out named;
    // its own picture replaced.
    let o = plot(&[se, "--out", so, "--metric", "train", "--x", "seconds"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("variant (mean ± sd over its runs)") && t.contains("2.2000 ± 0.2828"), "{t}");
    assert!(t.contains("ddl at step 2") && t.contains("left out: ") && !t.contains("baseline-seed1"), "{t}");
    // β: the baseline's runs have none and are left out; the ddl runs are drawn.
    let o = plot(&[se, "--out", so, "--metric", "beta", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((j["groups"][0]["name"].as_str(), j["groups"][1].is_null()), (Some("ddl"), true), "{j}");
    assert!(j["left_out"].to_string().contains("no β"), "{j}");
    // Two experiments (and a run beside them): curves named after their folders.
    let exp2 = dir.join("grid2");
    std::fs::create_dir_all(exp2.join("runs")).unwrap();
    copy_dir(&d1, &exp2.join("runs/ddl-seed1"));
    let single = dir.join("single");
    copy_dir(&d1, &single);
    let o = plot(&[se, exp2.to_str().unwrap(), single.to_str().unwrap(), "--out", so, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = j["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert_eq!(names, [format!("{se}/baseline"), format!("{se}/ddl"), format!("{}/ddl", exp2.display())]);
    assert_eq!(j["runs"].as_array().map(Vec::len), Some(6));
    // Refused: a run given itself and inside its experiment; an experiment without runs yet; a
    // metric no run has.
    let empty = dir.join("empty");
    std::fs::create_dir_all(empty.join("runs")).unwrap();
    for (args, want) in [
        (vec![se, d1.to_str().unwrap(), "--out", so], "given twice"),
        (vec![empty.to_str().unwrap(), "--out", so], "holds no run yet"),
        (vec![se, "--out", so, "--metric", "grad_norm"], "no run of the experiments given has a point of it"),
    ] {
        let o = plot(&args);
        assert!(o.status.code() == Some(1) && text(&o).contains(want), "{args:?}: {want:?} not in {}", text(&o));
    }
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// `ddl train --dry-run`: what the command would do, from the settings it resolved, with no
/// device opened and nothing written (no run folder, no cached shard set); refused settings and
/// folders are failures naming why.
#[test]
fn a_dry_run_says_what_training_would_do_and_writes_nothing() {
    let dir = tmpdir("dry-run");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let small: Vec<&str> =
        SMALL.iter().copied().chain(["--set", "model.max_seq_len=16", "--set", "train.eval_every=2"]).collect();
    let train = |args: &[&str]| {
        let o = ddl_cmd(&dir)
            .args(["train", "--preset", "tiny", "--variant", "ddl", "--corpus", &c, "--out"])
            .arg(&out)
            .args(&small)
            .args(args)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), text)
    };
    let chars = {
        let mut v: Vec<char> = std::fs::read_to_string(&c).unwrap().chars().collect();
        v.sort();
        v.dedup();
        v.len()
    };
    let (code, plan, all) = train(&["--steps", "6", "--dry-run"]);
    assert_eq!(code, Some(0), "{all}");
    assert!(
        plan.contains(&format!("a new run in {}", out.display())) && plan.contains(&format!("vocabulary {chars}")),
        "{plan}"
    );
    assert!(
        plan.contains("not tokenised yet")
            && plan.contains("6 to train")
            && plan.contains("32 tokens a step: 192 tokens"),
        "{plan}"
    );
    assert!(plan.contains("evaluations: every 2 steps over 1 batches"), "{plan}");
    // The schedule, and that these 6 steps stop long before its end (the preset's decay_steps).
    assert!(plan.contains("schedule: lr ") && plan.contains("at step 2000 (train.decay_steps)"), "{plan}");
    assert!(
        plan.contains(
            "note: the learning-rate schedule runs to step 2000 (train.decay_steps), past this run's 6 steps"
        )
    );
    // --tokens instead of --steps: the step where the run has seen them (200 ÷ 32, rounded up).
    let (code, plan, all) = train(&["--tokens", "0.2k", "--dry-run"]);
    assert_eq!(code, Some(0), "{all}");
    assert!(plan.contains("7 to train") && plan.contains("32 tokens a step: 224 tokens"), "{plan}");
    assert!(all.contains("--tokens 200: 7 steps of 32 tokens (batch_size 2 × seq_len 16 × grad_accum 1)"), "{all}");
    for (bad, says) in [("5Q", "expected a token count such as"), ("0", "at least 1 token"), ("-5", "at least 1")] {
        let (code, _, all) = train(&["--tokens", bad, "--dry-run"]);
        assert!(code == Some(2) && all.contains(says), "{bad}: {all}");
    }
    let (code, _, all) = train(&["--tokens", "1k", "--steps", "3", "--dry-run"]);
    assert!(code == Some(2) && all.contains("'--tokens <TOKENS>' cannot be used with '--steps <STEPS>'"), "{all}");
    // The settings as config.toml will hold them: they read back as the run's.
    let toml_text = plan.split_once("settings (config.toml):\n").unwrap().1;
    let cfg: ddl::train::RunConfig = toml::from_str(toml_text).unwrap();
    assert_eq!(
        (cfg.model.vocab_size, cfg.model.d_model, cfg.train.batch_size, cfg.corpus.as_str()),
        (chars, 32, 2, c.as_str())
    );
    let plan_params = ddl::model::Layout::new(&cfg.model).count();
    assert!(plan.contains(&format!("{} parameters", describe_count(plan_params))), "{plan}");
    // --epochs: the corpus not yet tokenised is tokenised to count its training split (a dry run
    // into a folder it removes: the cache stays empty); the steps are checked against data.json below.
    let (code, plan, all) = train(&["--epochs", "0.5", "--dry-run"]);
    assert_eq!(code, Some(0), "{all}");
    let epoch_steps: usize = all
        .split_once("--epochs 0.5: ")
        .and_then(|(_, r)| r.split_once(' '))
        .and_then(|(n, _)| n.replace(' ', "").parse().ok())
        .unwrap_or_else(|| panic!("no --epochs line in {all}"));
    assert!(plan.contains(&format!("({epoch_steps} to train)")) && plan.contains("0.50 epochs"), "{plan}");
    for (bad, says) in [("0", "above 0"), ("-1", "above 0"), ("x", "a number of passes")] {
        let (code, _, all) = train(&["--epochs", bad, "--dry-run"]);
        assert!(code == Some(2) && all.contains(says), "{bad}: {all}");
    }
    for other in [["--steps", "3"], ["--tokens", "1k"]] {
        let (code, _, all) = train(&["--epochs", "1", other[0], other[1], "--dry-run"]);
        assert!(code == Some(2) && all.contains("cannot be used with"), "{all}");
    }
    assert!(!out.exists() && !dir.join("cache").exists(), "a dry run writes nothing");
    // Trained for two steps; then resuming it, with the corpus's set cached: its tokens and epochs.
    let (code, _, all) = train(&["--steps", "2"]);
    assert_eq!(code, Some(0), "{all}");
    let o = ddl_cmd(&dir).args(["train", "--resume"]).arg(&out).args(["--steps", "5", "--dry-run"]).output().unwrap();
    let plan = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{plan}{}", String::from_utf8_lossy(&o.stderr));
    assert!(plan.contains("resumes the run in") && plan.contains("at step 2") && plan.contains("3 to train"), "{plan}");
    // --tokens that the run has seen already: said as given, with the step it came to.
    let o = ddl_cmd(&dir).args(["train", "--resume"]).arg(&out).args(["--tokens", "32"]).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && said.contains("at step 2, past --tokens 32: step 1"), "{said}");
    assert!(said.contains("--tokens 32: 1 step of 32 tokens"), "{said}");
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("data.json")).unwrap()).unwrap();
    let train_tokens = data["train_tokens"].as_u64().unwrap();
    assert_eq!(epoch_steps, (0.5 * train_tokens as f64 / 32.0).ceil() as usize, "--epochs 0.5's steps");
    let o = ddl_cmd(&dir).args(["train", "--resume"]).arg(&out).args(["--epochs", "1", "--dry-run"]).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let whole = train_tokens.div_ceil(32);
    assert!(o.status.success() && said.contains(&format!("({} to train)", whole - 2)), "{said}");
    let line = format!("{} training tokens", describe_count(train_tokens as usize));
    assert!(
        plan.contains(&line) && plan.contains(&format!("{:.2} epochs", 5.0 * 32.0 / train_tokens as f64)),
        "{line}\n{plan}"
    );
    // A new run into it is refused as `ddl train` refuses it (exit 1, the plan said, the reason
    // on stderr); with --overwrite it would replace it; a bad setting fails as it does.
    let (code, plan, all) = train(&["--steps", "6", "--dry-run"]);
    assert!(code == Some(1) && plan.contains("it would not start") && all.contains("--overwrite replaces it"), "{all}");
    let (code, plan, all) = train(&["--steps", "6", "--dry-run", "--overwrite"]);
    assert!(code == Some(0) && plan.contains("replaces the run in"), "{all}");
    let (code, _, all) = train(&["--steps", "6", "--dry-run", "--set", "train.lr=-1"]);
    assert!(code == Some(1) && all.contains("train.lr = -1"), "{all}");
    assert_eq!(ddl::train::checkpoint::saved_step(&out).unwrap(), 2, "the run is as it was");

    // What the run would refuse, its dry run refuses too (exit 1 after the plan), and a resumed
    // run refuses its unreadable data before its "training … resuming" line (session 81: the
    // dry runs said these would start).
    let resume = |dry: bool| {
        let mut cmd = ddl_cmd(&dir);
        cmd.args(["train", "--resume"]).arg(&out).args(["--steps", "5"]);
        if dry {
            cmd.arg("--dry-run");
        }
        let o = cmd.output().unwrap();
        (o.status.code(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
    };
    let record = std::fs::read(out.join("data.json")).unwrap();
    std::fs::write(out.join("data.json"), "{").unwrap();
    for dry in [true, false] {
        let (code, all) = resume(dry);
        assert!(code == Some(1) && all.contains("data.json: not the record") && !all.contains("training ddl"), "{all}");
        assert_eq!(dry, all.contains("it would not start"), "{all}");
    }
    std::fs::write(out.join("data.json"), &record).unwrap();
    let aside = dir.join("corpus.aside");
    std::fs::rename(&c, &aside).unwrap();
    for dry in [true, false] {
        let (code, all) = resume(dry);
        let said = all.contains("the run's corpus") && all.contains("pass --corpus PATH where it is now");
        assert!(code == Some(1) && said && !all.contains("training ddl"), "{all}");
    }
    std::fs::rename(&aside, &c).unwrap();
    assert_eq!(ddl::train::checkpoint::saved_step(&out).unwrap(), 2, "the run is as it was");
    // --out a file, or below one; a corpus whose validation split is shorter than a window.
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let new_run = |corpus: &str, out: &std::path::Path, dry: bool| {
        let mut cmd = ddl_cmd(&dir);
        cmd.args(["train", "--preset", "tiny", "--corpus", corpus, "--steps", "2", "--out"]).arg(out).args(&small);
        if dry {
            cmd.arg("--dry-run");
        }
        let o = cmd.output().unwrap();
        (o.status.code(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
    };
    let (code, all) = new_run(&c, &file, true);
    assert!(code == Some(1) && all.contains("it would not start") && all.contains("is a file"), "{all}");
    let (code, all) = new_run(&c, &file.join("sub"), true);
    assert!(code == Some(1) && all.contains("a-file' is a file, so the run's folder cannot be made"), "{all}");
    // (The split sizes are known once the corpus is tokenised: the refused run cached it.)
    let short = dir.join("short.txt");
    std::fs::write(&short, "ROMEO: but soft, what light through yonder window breaks").unwrap();
    for dry in [false, true] {
        let (code, all) = new_run(short.to_str().unwrap(), &dir.join("short-run"), dry);
        let said = all.contains("the validation split has 6 token(s), fewer than one sequence of 17");
        assert!(code == Some(1) && said && all.contains("short.txt"), "{all}");
        assert_eq!(dry, all.contains("it would not start"), "{all}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    assert!(!dir.join("short-run").exists());
}

/// `describe`'s counts: thousands apart by spaces.
fn describe_count(n: usize) -> String {
    let d = n.to_string();
    d.chars().enumerate().fold(String::new(), |mut s, (i, c)| {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            s.push(' ');
        }
        s.push(c);
        s
    })
}

#[test]
fn info_plans_a_presets_memory_in_each_precision() {
    // `ddl info --preset P --variant V [--precision f16]`: the plan `ddl train` checks against,
    // f16 with its weight copy, the SwiGLU output in f16 and the states it implies.
    let dir = tmpdir("info");
    let info = |extra: &[&str]| {
        let o =
            ddl_cmd(&dir).args(["info", "--preset", "small-124m", "--variant", "ddl"]).args(extra).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(o.status.success(), "{text}{}", String::from_utf8_lossy(&o.stderr));
        text
    };
    let bytes = |text: &str, what: &str| -> u64 {
        let line =
            text.lines().find(|l| l.trim_start().starts_with(what)).unwrap_or_else(|| panic!("no {what} in {text}"));
        line.split_whitespace().nth(what.split_whitespace().count()).unwrap().parse().unwrap()
    };
    let cfg = ddl::model::ModelConfig::preset("small-124m", Variant::Ddl).unwrap();
    let (f32, f16) = (info(&[]), info(&["--precision", "f16"]));
    assert!(f16.contains("variant ddl (f16, f16 states)") && !f32.contains("(f16"), "{f16}");
    let (f32_rc, f16_rc) = (info(&["--recompute"]), info(&["--precision", "f16", "--recompute"]));
    assert!(f16_rc.contains("variant ddl (f16, f16 states, recompute)") && f32_rc.contains("variant ddl (recompute)"));
    for (text, state_f16, p, recompute) in [
        (&f32, false, ddl::model::Precision::F32, false),
        (&f16, true, ddl::model::Precision::F16, false),
        (&f32_rc, false, ddl::model::Precision::F32, true),
        (&f16_rc, true, ddl::model::Precision::F16, true),
    ] {
        let plan = ddl::model::memory_plan_for(
            &cfg,
            8,
            1024,
            Storage { state_f16, precision: p, recompute, ..Default::default() },
        );
        assert_eq!(bytes(text, "activations"), plan.activation_bytes, "{text}");
        assert_eq!(bytes(text, "f16 weight copy"), plan.half_param_bytes, "{text}");
    }
    assert!(bytes(&f16, "f16 weight copy") > 0 && bytes(&f16, "activations") < bytes(&f32, "activations"));
    // Recomputing keeps one a, c and ψ instead of 12 layers' (small-124m, 8 × 1024, f32), and the
    // QK norms' outputs in the pre-RoPE q and k: 12 × (2 sublayers × (a + c) + q and k normed + ψ)
    // − (a + c + ψ) floats.
    let (n, d, f) = (8192u64, 768, 2048);
    let saved = 12 * (6 * n * d + n * f) - (2 * n * d + n * f);
    assert_eq!(bytes(&f32, "activations") - bytes(&f32_rc, "activations"), 4 * saved);
    // `--memory 80GB`: the largest batch each way of storing, as the library computes it.
    let fit = info(&["--memory", "80GB"]);
    let batch = |row: &str| -> usize {
        let line = fit.lines().find(|l| l.trim_start().starts_with(row) && l.contains(" B ")).unwrap();
        line.split(" B ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    };
    for (row, state_f16, precision, recompute) in [
        ("f32 ", false, ddl::model::Precision::F32, false),
        ("f32 --recompute", false, ddl::model::Precision::F32, true),
        ("--f16-state --recompute", true, ddl::model::Precision::F32, true),
        ("--precision f16 ", true, ddl::model::Precision::F16, false),
    ] {
        let st = Storage { state_f16, precision, recompute, ..Default::default() };
        assert_eq!(batch(row), ddl::model::largest_batch(&cfg, 1024, st, 80_000_000_000), "{row}: {fit}");
    }
    assert!(batch("f32 --recompute") > batch("f32 "), "{fit}");
    // `--head-chunk 1024`: the logits of 1024 rows instead of 8192 (V = 50304), in every row of
    // `--memory` too.
    // A chunk of all the rows (or more) is the whole head, said and planned as such.
    let all_rows = info(&["--head-chunk", "100000"]);
    assert!(all_rows.contains("the LM head runs whole") && !all_rows.contains("(head chunk"), "{all_rows}");
    assert_eq!(bytes(&all_rows, "activations"), bytes(&f32, "activations"));
    let chunked = info(&["--head-chunk", "1024"]);
    assert!(chunked.contains("variant ddl (head chunk 1024)"), "{chunked}");
    let v = cfg.vocab_size as u64;
    assert_eq!(bytes(&f32, "activations") - bytes(&chunked, "activations"), 4 * (8192 - 1024) * v);
    let all = ddl::model::memory_plan(&cfg, 1, 1).param_bytes;
    assert!(chunked.contains(&format!("largest single buffer: {all} bytes (params (all ")), "{chunked}");
    assert!(f32.contains(&format!("largest single buffer: {} bytes (logits)", 4 * 8192 * v)), "{f32}");
    let fit_c = info(&["--memory", "80GB", "--head-chunk", "1024"]);
    assert!(fit_c.contains("the LM head in slices of 1024 rows"), "{fit_c}");
    let line = fit_c.lines().find(|l| l.trim_start().starts_with("f32 --recompute")).unwrap();
    let b: usize = line.split(" B ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    let st = Storage { recompute: true, head_chunk: 1024, ..Default::default() };
    assert_eq!(b, ddl::model::largest_batch(&cfg, 1024, st, 80_000_000_000), "{fit_c}");
    assert!(b > batch("f32 --recompute"), "{fit_c}");
    // `--json`: the same plan and batches as one object.
    let v: serde_json::Value =
        serde_json::from_str(&info(&["--precision", "f16", "--memory", "80GB", "--json"])).unwrap();
    let f16_text = info(&["--precision", "f16"]);
    let st = &v["storage"];
    assert_eq!(
        (st["precision"].as_str(), st["f16_state"].as_bool(), v["batch"].as_u64()),
        (Some("f16"), Some(true), Some(8))
    );
    for (key, what) in [("activations", "activations"), ("f16_weight_copy", "f16 weight copy"), ("total", "total")] {
        assert_eq!(v["plan"]["bytes"][key].as_u64(), Some(bytes(&f16_text, what)), "{key}: {v}");
    }
    assert_eq!(v["model"]["d_model"], 768);
    let rows = v["fit"]["rows"].as_array().unwrap();
    let row = |name: &str| rows.iter().find(|r| r["storage"] == name).unwrap_or_else(|| panic!("{name}: {v}"));
    assert_eq!(row("f32 --recompute")["batch"].as_u64(), Some(batch("f32 --recompute") as u64), "{v}");
    assert_eq!(row("f32")["batch"].as_u64(), Some(batch("f32 ") as u64), "{v}");
    assert_eq!(
        rows.len(),
        fit.lines().filter(|l| l.starts_with("  ") && (l.contains(" B ") || l.contains(" none "))).count(),
        "{fit}"
    );
    let o = ddl_cmd(&dir).args(["info", "--preset", "small-124m", "--memory", "80 XB"]).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("--memory") && e.contains("'80 XB'") && e.contains("80GB"), "{e}");
}

#[test]
fn a_context_whose_rope_table_no_buffer_holds_is_refused_naming_it() {
    // The RoPE table holds max_seq_len × head_dim floats in one buffer. Past 2^31 − 1 of them it
    // is refused with the settings (before: `ddl train --dry-run` passed, the run failed as the
    // device opened with "shape error: rope table: max_pos … exceeds 2^31 elements"); past the
    // adapter's largest buffer the run says which context fits (before: "tensor 'rope.table' …
    // needs N bytes", after computing the table on the host), and writes nothing.
    let dir = tmpdir("rope-table");
    let run = |args: &[&str]| {
        let o = ddl_cmd(&dir).args(args).output().unwrap();
        (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
    };
    let huge = ["--set", "model.head_dim=16384", "--set", "model.max_seq_len=16777216"];
    let dry = dir.join("dry");
    let (ok, t) = run(&[&["train", "--dry-run", "--out", dry.to_str().unwrap()][..], &huge].concat());
    assert!(!ok && t.contains("model.max_seq_len = 16777216: model.max_seq_len × model.head_dim"), "{t}");
    assert!(t.contains("--set model.max_seq_len=131071 or less") && !t.contains("panicked"), "{t}");
    let (ok, t) = run(&[&["info", "--preset", "tiny"][..], &huge].concat());
    assert!(!ok && t.contains("model.max_seq_len = 16777216:"), "{t}");
    // A table under 2^31 floats that is over this adapter's largest buffer (lavapipe: 2^31 − 1
    // bytes, so 2^23 positions of 64): refused by name, nothing written.
    let (ok, info) = run(&["info", "--json"]);
    assert!(ok, "{info}");
    let v: serde_json::Value = serde_json::from_str(&info).unwrap();
    let max = v["chosen"]["limits"]["max_buffer_size"].as_u64().unwrap();
    let positions = max / 256 + 1;
    let text = dir.join("t.txt");
    std::fs::write(&text, "abcdefgh ".repeat(40)).unwrap();
    // (Where the adapter's buffers hold the longest context's table, there is nothing to refuse.)
    if positions <= 1 << 24 {
        let out = dir.join("run");
        let ctx = format!("model.max_seq_len={positions}");
        let (ok, t) = run(&[
            "train",
            "--corpus",
            text.to_str().unwrap(),
            "--steps",
            "1",
            "--out",
            out.to_str().unwrap(),
            "--variant",
            "baseline",
            "--set",
            "model.d_model=8",
            "--set",
            "model.n_heads=1",
            "--set",
            "model.head_dim=64",
            "--set",
            "model.n_layers=1",
            "--set",
            "train.seq_len=4",
            "--set",
            "train.batch_size=1",
            "--set",
            &ctx,
        ]);
        let fits = max / 256;
        assert!(!ok && t.contains(&format!("model.max_seq_len = {positions}: the RoPE table")), "{t}");
        assert!(t.contains(&format!("--set model.max_seq_len={fits} or less")), "{t}");
        assert!(!out.join("model.safetensors").exists() && !out.join("config.toml").exists(), "{t}");
    }

    // A context whose decode caches (keys and values of every position, max_seq_len × H·h
    // floats a layer) are over the adapter's largest buffer, its RoPE table not: the model
    // trains and evaluates; generating is refused before anything is printed, naming the context
    // that fits (before: the prompt printed, then "tensor 'kcache0' … needs N bytes"; `ddl train
    // --sample` failed so after the whole run), and `--sample` is refused before training.
    let positions = max / (4 * 64 * 128) + 1;
    if positions > 1 << 24 {
        return; // (An adapter whose buffers hold the longest context's caches.)
    }
    let fits = max / (4 * 64 * 128);
    let ctx = format!("model.max_seq_len={positions}");
    let args = |out: &Path| -> Vec<String> {
        [
            "train",
            "--corpus",
            text.to_str().unwrap(),
            "--steps",
            "1",
            "--out",
            out.to_str().unwrap(),
            "--set",
            "model.d_model=8",
            "--set",
            "model.n_heads=64",
            "--set",
            "model.head_dim=128",
            "--set",
            "model.n_layers=1",
            "--set",
            "train.seq_len=4",
            "--set",
            "train.batch_size=1",
            "--set",
            &ctx,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let says = format!("model.max_seq_len = {positions} tokens, needs decode caches");
    let remedy = format!("--set model.max_seq_len={fits})");
    let out = dir.join("kv");
    let mut sample: Vec<String> = args(&out);
    sample.extend(["--sample".to_string(), "3".to_string()]);
    let (ok, t) = run(&sample.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(!ok && t.contains("--sample 3: ") && t.contains(&says) && t.contains(&remedy), "{t}");
    assert!(!out.exists(), "refused before the run: {t}");
    let (ok, t) = run(&args(&out).iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(ok, "{t}");
    let o = ddl_cmd(&dir)
        .args(["generate", "--checkpoint", out.to_str().unwrap(), "--prompt", "abc", "--max-tokens", "2"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains(&says) && e.contains(&remedy), "{e}");
    assert!(o.stdout.is_empty(), "nothing printed: {}", String::from_utf8_lossy(&o.stdout));
    let o = ddl_cmd(&dir)
        .args(["chat", "--checkpoint", out.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains(&says) && !e.contains("chat with"), "{e}");
    let (ok, t) = run(&["eval", "--checkpoint", out.to_str().unwrap(), "--batches", "1"]);
    assert!(ok && t.contains("loss"), "{t}");
}

#[test]
fn info_plans_the_shape_a_set_gives() {
    // `ddl info --preset P --set model.KEY=VALUE`: the memory plan of the shape a run given the
    // same --set would train (`ddl train --dry-run` and `ddl info --checkpoint` point to `ddl info
    // --preset` to explain their plan; before, it took no --set and planned only the presets).
    let dir = tmpdir("info-set");
    let sets = ["model.d_v=3", "model.d_model=100", "model.n_heads=5", "model.head_dim=14", "model.n_layers=3"];
    let set_args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s]).collect();
    let run = |args: &[&str]| {
        let o = ddl_cmd(&dir).args(args).output().unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let mut info = vec!["info", "--preset", "tiny", "--variant", "ddl_ccec", "--batch", "3", "--seq", "7"];
    info.extend(&set_args);
    let (ok, out, err) = run(&[&info[..], &["--json"]].concat());
    assert!(ok, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut cfg = RunConfig::preset("tiny", Variant::DdlCcec).unwrap();
    for s in sets {
        cfg.set(s).unwrap();
    }
    let cfg = cfg.model;
    // (CC's K_c follows d_v; F and h_k follow d.)
    assert_eq!((cfg.d_v, cfg.state_kernel, cfg.d_model, cfg.mlp_hidden), (3, 3, 100, 266));
    let plan = ddl::model::memory_plan_for(&cfg, 3, 7, Storage::default());
    assert_eq!(v["plan"]["bytes"]["total"].as_u64(), Some(plan.total()), "{v}");
    assert_eq!((v["model"]["d_model"].as_u64(), v["model"]["d_v"].as_u64()), (Some(100), Some(3)), "{v}");
    assert_eq!(v["sets"].as_array().map(|a| a.len()), Some(sets.len()), "{v}");
    // The text names the settings; its parameter count is the one `ddl train --dry-run` gives
    // for the same --set.
    let (ok, text, err) = run(&info);
    assert!(ok && text.contains("with --set model.d_v=3 --set model.d_model=100"), "{text}{err}");
    let params = |t: &str, after: &str| -> String {
        t.lines().find_map(|l| l.split(after).nth(1)).unwrap_or_else(|| panic!("{after}: {t}")).to_string()
    };
    let n: usize = params(&text, "parameters: ").trim().parse().unwrap();
    let mut dry = vec!["train", "--dry-run", "--variant", "ddl_ccec", "--out"];
    let out = dir.join("dry");
    dry.push(out.to_str().unwrap());
    dry.extend(&set_args);
    let (ok, d, err) = run(&dry);
    assert!(ok, "{d}{err}");
    assert!(d.contains(&format!("{} parameters", describe_count(n))), "{n}: {d}");
    // The dry run names the `ddl info` command that explains its plan (it said "`ddl info
    // --preset` explains one", which planned only the preset's shape): run, it plans the same
    // model at the run's batch and length.
    let line = d.lines().find(|l| l.starts_with("memory plan: ")).unwrap_or_else(|| panic!("{d}"));
    let cmd = line.split('`').nth(1).unwrap_or_else(|| panic!("{line}"));
    assert!(
        cmd.starts_with("ddl info --preset tiny --variant ddl_ccec --set model.d_model=100 --set model.d_v=3"),
        "{cmd}"
    );
    let args: Vec<&str> = cmd.split(' ').skip(1).chain(["--json"]).collect();
    let (ok, out, err) = run(&args);
    assert!(ok, "{cmd}: {out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let t = ddl::train::TrainConfig::preset("tiny");
    let at_run = ddl::model::memory_plan_for(&cfg, t.batch_size, t.seq_len, Storage::default());
    assert_eq!(v["plan"]["bytes"]["total"].as_u64(), Some(at_run.total()), "{cmd}: {v}");
    // Refused, naming the setting and what to give instead: a bad value (the remedy is --set:
    // this command has no --config), the variant, a run setting a flag gives, one the plan does
    // not read, a context the preset's length does not fit.
    for (set, says) in [
        ("model.d_v=0", "model.d_v = 0: expected an integer in 1 ..= 1024"),
        ("model.variant=ddl", "name the variant to plan with --variant"),
        ("train.batch_size=3", "give --batch N instead"),
        ("train.lr=0", "train.lr would be ignored"),
        ("model.max_seq_len=32", "give a --seq of at most 32"),
        ("model.nope=1", "unknown key 'model.nope'"),
    ] {
        let (ok, out, err) = run(&["info", "--preset", "tiny", "--set", set]);
        assert!(
            !ok && err.contains(says) && !err.contains("--config") && !err.contains("panicked"),
            "{set}: {out}{err}"
        );
    }
    // A legal model at a legal batch whose activations no device holds: refused by name, not a
    // panic (the plan's byte counts overflowed u64: "attempt to multiply with overflow" in
    // memory_plan_for, from `ddl train --dry-run` as from `ddl info`).
    let huge = ["--set", "model.d_model=2048", "--set", "model.d_v=1024", "--set", "model.n_layers=1024"];
    let (ok, out, err) = run(&[&["info", "--preset", "tiny", "--batch", "16777216"][..], &huge].concat());
    assert!(!ok && err.contains("--batch 16777216:") && err.contains("more than 2^60"), "{out}{err}");
    assert!(!err.contains("panicked") && out.is_empty(), "{out}{err}");
    let dry = dir.join("huge");
    let train = ["train", "--dry-run", "--out", dry.to_str().unwrap(), "--set", "train.batch_size=16777216"];
    let (ok, out, err) = run(&[&train[..], &huge].concat());
    assert!(
        !ok && err.contains("train.batch_size = 16777216:") && err.contains("lower train.batch_size"),
        "{out}{err}"
    );
    assert!(!err.contains("panicked") && !dry.exists(), "{out}{err}");
}

#[test]
fn the_cli_trains_evaluates_and_samples() {
    let dir = tmpdir("cli");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let st = ddl_cmd(&dir)
        .args(["train", "--preset", "tiny", "--variant", "ddl_v1", "--steps", "3", "--corpus", &c, "--out"])
        .arg(&out)
        .args(["--set", "model.d_model=32", "--set", "model.n_layers=1", "--set", "model.n_heads=2"])
        .args(["--set", "model.head_dim=16", "--set", "model.mlp_hidden=85", "--set", "train.batch_size=2"])
        .args(["--set", "train.seq_len=16", "--set", "train.eval_batches=2", "--sample", "64"])
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&st.stdout);
    let se = String::from_utf8_lossy(&st.stderr);
    assert!(st.status.success(), "train failed: {so}\n{se}");
    assert!(so.contains("validation loss") && so.contains("--- sample ---"), "{so}");
    // The sample's 1 + 64 tokens pass the context of 64: said with the flag that asked for them
    // (it said "the prompt's 1 tokens and --max-tokens 64", a flag train does not take).
    assert!(se.contains("note: the prompt's 1 token and --sample 64 pass the context of 64"), "{se}");
    assert!(se.contains("(lower --sample to stay within it)"), "{se}");
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert!(metrics.lines().count() >= 4, "{metrics}");
    // Every step line says how long the step waited for its batches (drawn ahead on a thread:
    // the first step draws its own).
    for line in metrics.lines().filter(|l| l.contains("\"loss\"")) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["data_ms"].as_f64().is_some_and(|d| d >= 0.0), "{line}");
        // ... and the step it trains to (ddl-viz's "step N of M" while it trains).
        assert_eq!(v["steps_target"].as_u64(), Some(3), "{line}");
    }
    // Every step's line has the mean β of each sublayer (1 layer: attention and MLP), in (0, 2).
    for line in metrics.lines().filter(|l| l.contains("\"loss\"")) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let betas = v["beta_mean"].as_array().unwrap_or_else(|| panic!("no beta_mean in {line}"));
        assert_eq!(betas.len(), 2, "{line}");
        assert!(betas.iter().all(|b| b.as_f64().is_some_and(|b| b > 0.0 && b < 2.0)), "{line}");
    }
    let cfg = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(cfg.contains("d_model = 32"), "{cfg}");

    let ev = ddl_cmd(&dir).args(["eval", "--checkpoint"]).arg(&out).output().unwrap();
    assert!(ev.status.success(), "{}", String::from_utf8_lossy(&ev.stderr));
    assert!(String::from_utf8_lossy(&ev.stdout).contains("perplexity"));
}

/// `ddl eval` over a text, over token shards and over the run's training split: the run's
/// validation text given as `--text` (or as a headerless uint16 file to `--data`) is the run's own
/// validation loss to the bit over several batches of windows (every page an evaluation lets go of
/// is read again), bits per byte are loss · tokens / (bytes · ln 2) with the bytes of the predicted
/// text, and bad requests are clear errors.
/// A micro run of `variant` (d = 16, `layers` blocks) trained 2 steps on `corpus` into
/// `dir/name`, for the evaluation tests.
fn micro_run(dir: &Path, name: &str, variant: &str, corpus: &str, layers: usize) -> PathBuf {
    let o = ddl_cmd(dir)
        .args(["train", "--preset", "tiny", "--variant", variant, "--steps", "2", "--corpus", corpus, "--out"])
        .arg(dir.join(name))
        .args(["--set", "model.d_model=16", "--set", &format!("model.n_layers={layers}"), "--set", "model.n_heads=2"])
        .args(["--set", "model.head_dim=8", "--set", "model.mlp_hidden=40", "--set", "train.batch_size=2"])
        .args(["--set", "train.seq_len=16", "--set", "train.eval_batches=1"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    dir.join(name)
}

/// `train.early_stop`: with the learning rate 0 the validation loss never falls below the first
/// evaluation's, so the run stops after `early_stop` more evaluations (checkpoint and final
/// evaluation as at a last step); resuming counts on from its metrics, and the setting may be
/// changed on resuming to train on.
#[test]
fn early_stopping_ends_a_run_whose_validation_loss_stops_falling_and_resumes() {
    let dir = tmpdir("early-stop");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let train = |extra: &[&str]| {
        let mut cmd = ddl_cmd(&dir);
        cmd.arg("train").args(extra).arg("--out").arg(&out);
        let o = cmd.output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "{text}");
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
        (text, summary)
    };
    let (text, s) = train(&[
        "--preset",
        "tiny",
        "--variant",
        "ddl",
        "--steps",
        "10",
        "--corpus",
        &c,
        "--set",
        "model.d_model=16",
        "--set",
        "model.n_layers=1",
        "--set",
        "model.n_heads=2",
        "--set",
        "model.head_dim=8",
        "--set",
        "model.mlp_hidden=40",
        "--set",
        "train.batch_size=2",
        "--set",
        "train.seq_len=16",
        "--set",
        "train.eval_batches=1",
        "--set",
        "train.eval_every=1",
        "--set",
        "train.lr=0",
        "--set",
        "train.min_lr=0",
        "--set",
        "train.early_stop=2",
    ]);
    // Evaluations at steps 1 (the best), 2 and 3 (not below it): stopped after step 3.
    assert!(text.contains("stopped early after step 3 of 10 (train.early_stop): 2 evaluations"), "{text}");
    // Its lowest point, step 1, fell on no checkpoint step: said, with the setting that keeps it.
    assert!(
        text.contains("lowest at step 1, which is no checkpoint step")
            && text.contains("the best checkpoint is step 3's")
            && text.contains("train.checkpoint_every = train.eval_every"),
        "{text}"
    );
    assert_eq!((s["step"].as_u64(), s["stopped_early"]["best_step"].as_u64()), (Some(3), Some(1)));
    assert_eq!(ddl::train::checkpoint::saved_step(&out).unwrap(), 3);
    let m = ddl::train::metrics::Metrics::read(&out).unwrap().unwrap();
    assert_eq!(m.full.map(|f| f.0), Some(3), "the final evaluation, as at a last step");
    let o = ddl_cmd(&dir).args(["info", "--checkpoint"]).arg(&out).output().unwrap();
    let info = String::from_utf8_lossy(&o.stdout);
    assert!(
        info.contains("stopped early (train.early_stop) before step 10: the validation curve was lowest at step 1"),
        "{info}"
    );
    // Resumed to 10 as it was given: counts on from its metrics (the first new evaluation stops it),
    // one evaluation per step: step 3's periodic and final evaluations are one (they were
    // counted as two, so that a resumed run stopped an evaluation early).
    let (text, s) = train(&["--resume", out.to_str().unwrap(), "--steps", "10"]);
    assert!(text.contains("stopped early after step 4 of 10 (train.early_stop): 3 evaluations"), "{text}");
    assert_eq!(s["stopped_early"]["evaluations"].as_u64(), Some(3), "{s}");
    assert_eq!(s["step"].as_u64(), Some(4));
    // Turned off on resuming: trains to the end.
    let (text, s) = train(&["--resume", out.to_str().unwrap(), "--steps", "6", "--set", "train.early_stop=0"]);
    assert!(!text.contains("stopped early") && s["stopped_early"].is_null(), "{text}");
    assert_eq!(s["step"].as_u64(), Some(6));
    // Without evaluations to count it is refused, naming the setting and the remedy.
    let o = ddl_cmd(&dir)
        .args(["train", "--preset", "tiny", "--steps", "2", "--corpus", &c, "--set", "train.eval_every=0"])
        .args(["--set", "train.early_stop=3", "--out"])
        .arg(dir.join("refused"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("train.early_stop") && e.contains("train.eval_every"), "{e}");
    assert!(!dir.join("refused").join("config.toml").exists());
}

#[test]
fn eval_measures_a_text_shards_and_the_training_split_in_bits_per_byte() {
    let dir = tmpdir("eval-sources");
    let c = ddl::testing::small_corpus(&dir);
    let train_micro = |name: &str, variant: &str, corpus: &str| micro_run(&dir, name, variant, corpus, 1);
    let out = train_micro("run", "ddl", &c);
    let eval = |args: &[&str]| ddl_cmd(&dir).args(["eval", "--checkpoint"]).arg(&out).args(args).output().unwrap();
    let json = |args: &[&str]| -> serde_json::Value {
        let o = eval(&[args, &["--json"]].concat());
        assert!(o.status.success(), "eval {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
    };
    let own = json(&[]);
    let (windows, tokens) = (own["windows"].as_u64().unwrap() as usize, own["tokens"].as_u64().unwrap() as usize);
    assert_eq!(tokens, windows * 16);
    // The LM head in slices of 5 rows (7 a batch of 32): the same loss, to the bit.
    let sliced = json(&["--head-chunk", "5"]);
    for k in ["loss", "tokens", "windows", "bits_per_byte", "accuracy", "top5_accuracy", "calibration"] {
        assert_eq!(sliced[k], own[k], "{k} of eval --head-chunk 5: {sliced} against {own}");
    }
    // The run's final evaluation (the whole validation split, as here): its loss and its
    // accuracy, from the training program's own scored evaluation, are this evaluation's.
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let last: serde_json::Value = metrics
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .rfind(|j| j["val_full"] == true)
        .unwrap();
    assert_eq!(last["val_tokens"], own["tokens"], "{last}");
    assert!((last["val_loss"].as_f64().unwrap() - own["loss"].as_f64().unwrap()).abs() < 1e-6, "{last} vs {own}");
    let acc = own["accuracy"].as_f64().unwrap();
    assert_eq!(last["val_accuracy"].as_f64(), Some(acc), "{last} vs {own}");
    assert!(last["val_subset_accuracy"].is_number() && acc > 0.0 && acc < 1.0, "{last}");
    // `ddl plot --metric val_accuracy` draws its curve (every evaluation logged one).
    let png = dir.join("acc.png");
    let o = ddl_cmd(&dir)
        .args(["plot", "--metric", "val_accuracy", "--json", "--out", png.to_str().unwrap()])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(ddl::train::plot::plot_title(&png).as_deref(), Some("validation accuracy, 1 run"));
    let evals = metrics.lines().filter(|l| l.contains("\"val_loss\"")).count();
    let plotted: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plotted["runs"][0]["points"].as_u64(), Some(evals as u64), "{plotted}");
    assert!(windows > 8 && own["whole"] == true && own["split"] == "val", "{own}");

    // The validation split's tokens, as the run reads them.
    unsafe { std::env::set_var("DDL_CACHE_DIR", dir.join("cache")) };
    let run: RunConfig = toml::from_str(&std::fs::read_to_string(out.join("config.toml")).unwrap()).unwrap();
    let (ds, tok) = ddl::train::data::open_for_run(&run, None).unwrap();
    let ids: Vec<u32> = (0..ds.val.len()).map(|i| ds.val.get(i)).collect();
    // The tokens after the last whole window are said, as not counted.
    assert_eq!(own["uncounted"].as_u64(), Some((ids.len() - 1 - tokens) as u64), "{own}");
    // Bytes: those of the predicted tokens 1 ..= windows · T.
    let bytes = tok.decode(&ids[1..=tokens]).unwrap().len() as u64;
    assert_eq!(own["bytes"].as_u64(), Some(bytes), "{own}");
    let (loss, bpb) = (own["loss"].as_f64().unwrap(), own["bits_per_byte"].as_f64().unwrap());
    let want = loss * tokens as f64 / (bytes as f64 * std::f64::consts::LN_2);
    assert!((bpb - want).abs() <= 1e-12 * want && loss > 1.0, "{own}");

    let text = dir.join("val.txt");
    std::fs::write(&text, tok.decode(&ids).unwrap()).unwrap();
    let raw = dir.join("val.bin");
    std::fs::write(&raw, ids.iter().flat_map(|&i| (i as u16).to_le_bytes()).collect::<Vec<u8>>()).unwrap();
    for args in
        [&["--text", text.to_str().unwrap()][..], &["--data", raw.to_str().unwrap(), "--data-format", "raw-u16"]]
    {
        let other = json(args);
        for k in ["loss", "tokens", "bytes", "windows", "bits_per_byte", "whole"] {
            assert_eq!(other[k], own[k], "{k} of eval {args:?}: {other} against the run's {own}");
        }
        // A text is evaluated whole: no split (null); shards have their validation split.
        let split = if args[0] == "--text" { serde_json::Value::Null } else { "val".into() };
        assert_eq!(other["split"], split, "{other}");
    }
    // `ddl data prepare`'s shards of the same corpus (its characters, the same split): the same loss;
    // shards of another text, whose meta.json names another character set, are refused.
    let prepare = |name: &str, input: &str| {
        let mut prep = ddl_cmd(&dir);
        let o = prep
            .args(["data", "prepare", "--tokenizer", "char", "--out"])
            .arg(dir.join(name))
            .arg(input)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        dir.join(name).display().to_string()
    };
    let same = json(&["--data", &prepare("shards", &c)]);
    assert_eq!((same["loss"].clone(), same["tokens"].clone()), (own["loss"].clone(), own["tokens"].clone()), "{same}");
    let other = dir.join("other.txt");
    std::fs::write(&other, "To be, or not to be, that is the question.\n".repeat(40)).unwrap();
    let o = eval(&["--data", &prepare("other-shards", other.to_str().unwrap())]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("meta.json") && e.contains("another tokenizer"), "{e}");

    // A missing --text is named as such (not as a training corpus).
    let missing = dir.join("missing.txt");
    let o = eval(&["--text", missing.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("--text") && e.contains("missing.txt") && !e.contains("--corpus"), "{e}");

    // Human output names what it covers.
    let line = String::from_utf8_lossy(&eval(&["--text", text.to_str().unwrap()]).stdout).into_owned();
    assert!(
        line.contains("bits per byte") && line.contains("val.txt") && line.contains(&format!("{tokens} tokens")),
        "{line}"
    );

    // The training split: as many windows as the validation split, another loss.
    let train = json(&["--split", "train"]);
    assert_eq!((train["windows"].clone(), train["split"].clone()), (own["windows"].clone(), "train".into()), "{train}");
    assert!(train["loss"].as_f64().unwrap().is_finite() && train["loss"] != own["loss"], "{train}");
    // The first batches, in shorter windows.
    let first = json(&["--batches", "1", "--seq-len", "8"]);
    assert_eq!(
        (first["windows"].as_u64(), first["tokens"].as_u64(), first["whole"].as_bool()),
        (Some(2), Some(16), Some(false))
    );
    assert_eq!(first["uncounted"].as_u64(), Some(0), "only whole evaluations count what is left over: {first}");

    // β per sublayer over exactly the evaluated tokens (a last batch's padding rows left out:
    // the windows are not a multiple of the batch here), each regime's share consistent with the mean.
    let odd_windows = json(&["--betas", "--batch-size", "3"]);
    assert_ne!(odd_windows["windows"].as_u64().unwrap() % 3, 0, "{odd_windows}");
    let betas = odd_windows["betas"].as_array().unwrap();
    assert_eq!(
        betas.iter().map(|b| b["sublayer"].as_str().unwrap()).collect::<Vec<_>>(),
        ["block0.attn", "block0.mlp"]
    );
    for b in betas {
        let f = |k: &str| b[k].as_f64().unwrap();
        assert_eq!(b["tokens"], odd_windows["tokens"], "{b}");
        assert!((f("identity") + f("projection") + f("reflection") - 1.0).abs() < 1e-12, "{b}");
        let (lo, hi) = (
            0.5 * f("projection") + 1.5 * f("reflection"),
            0.5 * f("identity") + 1.5 * f("projection") + 2.0 * f("reflection"),
        );
        assert!(f("mean") >= lo && f("mean") <= hi, "{b}: the mean β against its regimes");
    }
    assert!(own.get("betas").is_none(), "β only when asked: {own}");

    // A folder with only the model file evaluates a text (in windows of its context unless told).
    let bare = dir.join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::copy(out.join("model.safetensors"), bare.join("model.safetensors")).unwrap();
    let on_bare = |args: &[&str]| ddl_cmd(&dir).args(["eval", "--checkpoint"]).arg(&bare).args(args).output().unwrap();
    let o = on_bare(&["--text", text.to_str().unwrap(), "--seq-len", "16", "--batch-size", "2", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["loss"].clone(), v["tokens"].clone()), (own["loss"].clone(), own["tokens"].clone()), "{v}");
    // In words: a text of 16 + 1 + 5 tokens is one window, and the last 5 tokens are said to be left out.
    let short = dir.join("short.txt");
    std::fs::write(&short, tok.decode(&ids[..22]).unwrap()).unwrap();
    let o = on_bare(&["--text", short.to_str().unwrap(), "--seq-len", "16"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.contains(": 16 tokens")
            && t.contains("in 1 window of 16 (the last 5 tokens, too few for a window, not counted)"),
        "{t}"
    );
    let o = on_bare(&[]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("no config.toml") && e.contains("--text"), "{e}");

    // --against: another checkpoint on the same windows, paired by batch. The same model: no
    // difference at all (p = 1); another model: its own loss on those windows, the difference
    // of the two, and an interval around the mean of the paired batches.
    let same = json(&["--against", bare.to_str().unwrap(), "--batch-size", "2"]);
    let a = &same["against"];
    assert_eq!(
        (a["difference"].as_f64(), a["mean_paired_difference"].as_f64(), a["p"].as_f64()),
        (Some(0.0), Some(0.0), Some(1.0)),
        "{same}"
    );
    let acc = &a["accuracy"];
    assert_eq!(acc["this"], acc["other"], "{same}");
    assert_eq!((acc["difference"].as_f64(), acc["p"].as_f64()), (Some(0.0), Some(1.0)), "{same}");
    let base = train_micro("base", "baseline", &c);
    let vs = json(&["--against", base.to_str().unwrap()]);
    let base_alone = {
        let o = ddl_cmd(&dir).args(["eval", "--json", "--checkpoint"]).arg(&base).output().unwrap();
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let a = &vs["against"];
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    assert_eq!(a["loss"], base_alone["loss"], "{vs}");
    assert!((f(&a["difference"]) - (f(&own["loss"]) - f(&base_alone["loss"]))).abs() < 1e-15, "{vs}");
    assert_eq!(a["pairs"].as_u64(), Some(windows as u64 / 2), "full batches of 2 windows: {vs}");
    let (m, ci) = (f(&a["mean_paired_difference"]), a["ci"].as_array().unwrap().iter().map(f).collect::<Vec<_>>());
    assert!(ci[0] < m && m < ci[1] && f(&a["p"]) >= 0.0 && f(&a["p"]) <= 1.0, "{vs}");
    if windows % 2 == 0 {
        assert!((m - f(&a["difference"])).abs() < 1e-9, "all batches full: the paired mean is the difference: {vs}");
    }
    // Their top-1 accuracies on the same windows, each its own evaluation's, paired by batch.
    let acc = &a["accuracy"];
    assert_eq!((&acc["this"], &acc["other"]), (&own["accuracy"], &base_alone["accuracy"]), "{vs}");
    assert!((f(&acc["difference"]) - (f(&own["accuracy"]) - f(&base_alone["accuracy"]))).abs() < 1e-15, "{vs}");
    let (m, ci) = (f(&acc["mean_paired_difference"]), acc["ci"].as_array().unwrap().iter().map(f).collect::<Vec<_>>());
    assert!(ci[0] <= m && m <= ci[1] && (0.0..=1.0).contains(&f(&acc["p"])), "{vs}");
    if windows % 2 == 0 {
        assert!((m - f(&acc["difference"])).abs() < 1e-12, "equal batches: the paired mean is the difference: {vs}");
    }
    let line = String::from_utf8_lossy(&eval(&["--against", base.to_str().unwrap()]).stdout).into_owned();
    assert!(line.contains("against") && line.contains("95 % t-interval") && line.contains("this − that"), "{line}");
    assert!(line.contains("top-1 accuracy ") && line.contains("points"), "{line}");
    // (Interventions and ablations compare losses only.)
    let iv = json(&["--intervene", "block0.mlp:write=0"]);
    assert!(iv["intervened"].get("accuracy").is_none(), "{iv}");
    // A checkpoint with another tokenizer (another corpus's characters) does not pair.
    let other_tok = train_micro("other-tok", "ddl", other.to_str().unwrap());
    let o = eval(&["--against", other_tok.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("--against") && e.contains("tokenizer"), "{e}");

    // Bad requests: what is wrong and what to do.
    let bad = |args: &[&str], want: &[&str]| {
        let o = eval(args);
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success() && want.iter().all(|w| e.contains(w)), "eval {args:?}: {e}");
    };
    bad(&["--seq-len", "100000"], &["--seq-len 100000", "max_seq_len"]);
    let odd = dir.join("odd.txt");
    std::fs::write(&odd, "ROMEO: ☃").unwrap();
    bad(&["--text", odd.to_str().unwrap()], &["odd.txt", "'☃'", "char tokenizer"]);
    bad(&["--text", text.to_str().unwrap(), "--split", "train"], &["--split train"]);
    let nested = dir.join("nested");
    std::fs::create_dir_all(nested.join("sub")).unwrap();
    std::fs::write(nested.join("sub/a.txt"), "ROMEO: hello there, my friend.\n".repeat(20)).unwrap();
    bad(&["--text", nested.to_str().unwrap()], &["without .txt files", "its 1 subfolder(s) are not read"]);
    bad(
        &["--data", raw.to_str().unwrap(), "--data-format", "raw-u16", "--split", "train"],
        &["--split train", "is a file or a glob", "drop --split"],
    );
    let short = dir.join("short.txt");
    std::fs::write(&short, "ROMEO:").unwrap();
    // (The remedy names the --seq-len that fits it, and a one-token text fits none: it said
    // "pass a shorter --seq-len" even at --seq-len 1.)
    bad(&["--text", short.to_str().unwrap()], &["short.txt", "fewer than one window", "pass --seq-len 5 or less"]);
    let one = dir.join("short1.txt");
    std::fs::write(&one, "R").unwrap();
    bad(
        &["--text", one.to_str().unwrap(), "--seq-len", "1"],
        &["1 token, fewer than one window of 2", "needs two tokens"],
    );
    // ... and leaves no token set of it in the cache (the texts evaluated above keep theirs).
    let cache = ddl_cmd(&dir).args(["data", "cache"]).output().unwrap();
    let listed = String::from_utf8_lossy(&cache.stdout).into_owned();
    assert!(cache.status.success() && !listed.contains("odd.txt"), "{listed}");
    assert!(listed.contains(text.file_name().unwrap().to_str().unwrap()) && !listed.contains("short.txt"), "{listed}");
    bad(&["--data", dir.join("none").to_str().unwrap()], &["does not exist"]);
    bad(&["--against", dir.join("no-run").to_str().unwrap()], &["--against", "no-run", "does not exist"]);
}

/// `--per-token`'s own columns, before β and other runs' losses.
const OWN: [&str; 9] = ["index", "token", "text", "loss", "rank", "top", "top_text", "top_logprob", "entropy"];

/// `--per-token`'s scores of each token (rows of [`OWN`] of the checkpoint `run` over `text` in
/// windows of 16) against the same windows through the decode program, teacher-forced: the
/// loss, the rank (where no other logit is within 1e-4 of the target's), the likeliest token, its
/// log p and the entropy; and the evaluation's accuracy, entropy and calibration (`r`) against
/// the table's columns.
fn check_scores(run: &Path, text: &str, rows: &[Vec<String>], r: &serde_json::Value) {
    let gpu = ddl::testing::gpu();
    let (model, tok) = ddl::generate::load_for_inference(&gpu, run).unwrap();
    let ids = tok.encode(text).unwrap();
    let v = model.cfg.vocab_size;
    let num = |row: &[String], c: usize| row[c].parse::<f64>().unwrap();
    let mut near_ties = 0;
    for w in 0..rows.len() / 16 {
        let window = &ids[w * 16..w * 16 + 16];
        let mut cache = model.decode_cache().unwrap();
        let mut p = model.decode_program(&cache, 16).unwrap();
        let logits = p.forward(&model, window, &mut cache).unwrap();
        for j in 0..16 {
            let (row, target) = (&rows[w * 16 + j], ids[w * 16 + j + 1]);
            let l = &logits[j * v..(j + 1) * v];
            let s = ddl::generate::score_token(l, target, 1, &tok);
            let lse = l[s.top[0].id as usize] as f64 - s.top[0].logprob;
            let h: f64 = l.iter().map(|&x| (x as f64 - lse).exp() * (lse - x as f64)).sum();
            let at = format!("window {w} row {j}: {row:?}");
            assert_eq!(num(row, 1) as u32, target, "{at}");
            assert!((num(row, 3) + s.logprob).abs() < 1e-4, "{at}: loss vs log p {}", s.logprob);
            assert!((num(row, 7) - s.top[0].logprob).abs() < 1e-4, "{at}: top log p {}", s.top[0].logprob);
            assert!((num(row, 8) - h).abs() < 1e-4, "{at}: entropy {h}");
            if l.iter().enumerate().any(|(c, &x)| c != target as usize && (x - l[target as usize]).abs() < 1e-4) {
                near_ties += 1;
            } else {
                assert_eq!(num(row, 4) as usize, s.rank, "{at}: rank");
                assert_eq!(num(row, 5) as u32, s.top[0].id, "{at}: likeliest token");
            }
            assert_eq!(row[4] == "1", row[5] == row[1], "{at}: rank 1 is the likeliest token");
        }
    }
    assert!(near_ties < rows.len() / 4, "{near_ties} rows of near ties");
    let share = |pred: &dyn Fn(&[String]) -> bool| rows.iter().filter(|r| pred(r)).count() as f64 / rows.len() as f64;
    let f = |k: &str| r[k].as_f64().unwrap();
    assert!((f("accuracy") - share(&|r| r[4] == "1")).abs() < 1e-12, "{r}");
    assert!((f("top5_accuracy") - share(&|r| num(r, 4) <= 5.0)).abs() < 1e-12, "{r}");
    assert!(f("top5_accuracy") >= f("accuracy") && f("top5_accuracy") > 0.0, "{r}");
    let mean_h = rows.iter().map(|r| num(r, 8)).sum::<f64>() / rows.len() as f64;
    assert!((f("entropy") - mean_h).abs() < 1e-5, "{r}");
    // The calibration bins from the table's likeliest p (to 6 decimals: a p at a bin's edge may
    // fall either side, within the tolerance).
    let bins = r["calibration"].as_array().unwrap();
    assert_eq!(bins.len(), 10);
    assert_eq!(bins.iter().map(|b| b["tokens"].as_u64().unwrap()).sum::<u64>(), rows.len() as u64);
    let mut ece = 0.0;
    for (i, b) in bins.iter().enumerate() {
        let inside: Vec<&Vec<String>> =
            rows.iter().filter(|r| ((num(r, 7).exp() * 10.0) as usize).min(9) == i).collect();
        let (hits, conf) =
            (inside.iter().filter(|r| r[4] == "1").count() as f64, inside.iter().map(|r| num(r, 7).exp()).sum::<f64>());
        ece += (hits - conf).abs() / rows.len() as f64;
        if b["tokens"].as_u64().unwrap() == 0 {
            assert!(b["confidence"].is_null() && b["accuracy"].is_null(), "{b}");
        }
    }
    assert!((f("calibration_error") - ece).abs() < 1e-3, "{ece} vs {r}");
}

/// `ddl eval --per-token FILE`: every evaluated token's loss, in order, beside the model's under
/// interventions, the other checkpoint's or each ablation's; the columns' means are the losses
/// the evaluation reports, each row's text is the token it predicts, a sliced head writes the
/// same file, and a bad file name is refused before anything is evaluated.
#[test]
fn eval_writes_every_tokens_loss_with_its_text() {
    let dir = tmpdir("eval-per-token");
    let c = ddl::testing::small_corpus(&dir);
    let out = micro_run(&dir, "run", "ddl", &c, 2);
    let other = micro_run(&dir, "other", "ddl_v1", &c, 2);
    // A text of 3 windows of 16 and 4 tokens left over, with newlines to escape.
    let text: String = std::fs::read_to_string(&c).unwrap().chars().skip(1000).take(3 * 16 + 5).collect();
    assert!(text.contains('\n'));
    let txt = dir.join("some.txt");
    std::fs::write(&txt, &text).unwrap();
    let eval = |file: &str, args: &[&str]| -> serde_json::Value {
        let o = ddl_cmd(&dir)
            .args(["eval", "--json", "--batch-size", "2", "--text", txt.to_str().unwrap(), "--checkpoint"])
            .arg(&out)
            .args(["--per-token", dir.join(file).to_str().unwrap()])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "eval {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    // (header, rows of fields) with the text field unescaped.
    let table = |file: &str| -> (Vec<String>, Vec<Vec<String>>) {
        let body = std::fs::read_to_string(dir.join(file)).unwrap();
        let mut lines = body.lines();
        let head = lines.next().unwrap().split('\t').map(String::from).collect::<Vec<_>>();
        let unescape = |f: &str| f.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r").replace("\\\\", "\\");
        let rows = lines
            .map(|l| {
                let mut f: Vec<String> = l.split('\t').map(String::from).collect();
                assert_eq!(f.len(), head.len(), "{l:?}");
                f[2] = unescape(&f[2]);
                f
            })
            .collect();
        (head, rows)
    };
    let mean = |rows: &[Vec<String>], col: usize| {
        rows.iter().map(|r| r[col].parse::<f64>().unwrap()).sum::<f64>() / rows.len() as f64
    };
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    let r = eval("t.tsv", &["--intervene", "block0.mlp:write=0"]);
    assert_eq!(r["per_token"], dir.join("t.tsv").to_str().unwrap());
    let (head, rows) = table("t.tsv");
    assert_eq!(head, [&OWN[..], &["loss_intervened"]].concat());
    assert_eq!(rows.len() as u64, r["tokens"].as_u64().unwrap());
    assert_eq!(rows.len(), 3 * 16, "every token of the whole windows");
    // Row i predicts token i + 1 of the text: its text is that character.
    let chars: Vec<String> = text.chars().map(String::from).collect();
    for (i, row) in rows.iter().enumerate() {
        assert_eq!((row[0].parse::<usize>().unwrap(), &row[2]), (i + 1, &chars[i + 1]), "row {i}");
    }
    assert!((mean(&rows, 3) - f(&r["loss"])).abs() < 1e-5, "{} vs {r}", mean(&rows, 3));
    assert!((mean(&rows, 9) - f(&r["intervened"]["loss"])).abs() < 1e-5, "{} vs {r}", mean(&rows, 9));
    assert!(rows.iter().any(|row| row[3] != row[9]), "the intervention changes some token's loss");
    check_scores(&out, &text, &rows, &r);
    // The LM head in slices of 5 rows: the same bits.
    eval("sliced.tsv", &["--intervene", "block0.mlp:write=0", "--head-chunk", "5"]);
    assert_eq!(std::fs::read(dir.join("sliced.tsv")).unwrap(), std::fs::read(dir.join("t.tsv")).unwrap());
    // With --betas: each token's β per sublayer (the model as trained), before the other losses.
    let bt = eval("beta.tsv", &["--betas", "--intervene", "block0.mlp:write=0"]);
    let (head, rows) = table("beta.tsv");
    let want = ["beta_block0.attn", "beta_block0.mlp", "beta_block1.attn", "beta_block1.mlp", "loss_intervened"];
    assert_eq!(head[9..], want);
    for k in 0..4 {
        assert!((mean(&rows, 9 + k) - f(&bt["betas"][k]["mean"])).abs() < 1e-5, "{k}: {bt}");
    }
    assert_eq!(
        rows.iter().map(|r| r[13].clone()).collect::<Vec<_>>(),
        table("t.tsv").1.iter().map(|r| r[9].clone()).collect::<Vec<_>>()
    );
    // Another checkpoint on the same tokens; each ablation's column.
    let a = eval("a.tsv", &["--against", other.to_str().unwrap()]);
    let (head, rows) = table("a.tsv");
    assert_eq!(head[9], "loss_against");
    assert!((mean(&rows, 9) - f(&a["against"]["loss"])).abs() < 1e-5, "{a}");
    let b = eval("b.tsv", &["--ablate", "write,erase"]);
    let (head, rows) = table("b.tsv");
    assert_eq!(
        head[9..],
        [
            "loss_block0.attn:write=0",
            "loss_block0.attn:erase=0",
            "loss_block0.mlp:write=0",
            "loss_block0.mlp:erase=0",
            "loss_block1.attn:write=0",
            "loss_block1.attn:erase=0",
            "loss_block1.mlp:write=0",
            "loss_block1.mlp:erase=0"
        ]
    );
    for (k, row) in b["ablations"].as_array().unwrap().iter().enumerate() {
        assert!((mean(&rows, 9 + k) - f(&row["loss"])).abs() < 1e-5, "{row}");
    }
    // The line for people names the file.
    let o = ddl_cmd(&dir)
        .args([
            "eval",
            "--text",
            txt.to_str().unwrap(),
            "--per-token",
            dir.join("p.tsv").to_str().unwrap(),
            "--checkpoint",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        line.contains("each token's loss, rank and the model's likeliest token: ")
            && line.contains("p.tsv (48 rows, tab-separated)"),
        "{line}"
    );
    assert!(line.contains("the likeliest token came ") && line.contains("calibration error "), "{line}");
    // --calibration-plot: a reliability diagram named in the line and the JSON; it replaces only
    // an earlier one; a name that is not a .png or a file of someone else's is refused first.
    let png = dir.join("cal.png");
    let cal = |args: &[&str]| {
        ddl_cmd(&dir)
            .args(["eval", "--text", txt.to_str().unwrap(), "--checkpoint", out.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap()
    };
    for _ in 0..2 {
        let o = cal(&["--json", "--calibration-plot", png.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(r["calibration_plot"], png.to_str().unwrap());
        let title = ddl::train::plot::plot_title(&png).unwrap();
        assert!(title.starts_with("calibration of 'run' (step 2) on some.txt: error "), "{title}");
    }
    std::fs::write(dir.join("mine.png"), b"a picture").unwrap();
    for (file, want) in [("cal.txt", "ending in .png"), ("mine.png", "is not a plot")] {
        let o = cal(&["--calibration-plot", dir.join(file).to_str().unwrap()]);
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success() && e.contains("--calibration-plot") && e.contains(want), "{e}");
        assert!(o.stdout.is_empty(), "{e}");
    }
    assert_eq!(std::fs::read(dir.join("mine.png")).unwrap(), b"a picture");
    // An earlier table is replaced; anything else is refused first (nothing evaluated, nothing
    // left behind): a missing folder, a folder, a file that is not such a table (the text
    // itself), a place inside the run's kept checkpoints.
    eval("t.tsv", &[]);
    assert_eq!(table("t.tsv").0, OWN);
    std::fs::create_dir_all(out.join("checkpoints")).unwrap();
    let cases = [
        ("no/such/x.tsv", "does not exist"),
        ("", "is a folder"),
        ("some.txt", "is not a table"),
        ("run/checkpoints/x.tsv", "inside the kept checkpoints"),
    ];
    for (file, want) in cases {
        let path = dir.join(file);
        let o = ddl_cmd(&dir)
            .args(["eval", "--checkpoint", out.to_str().unwrap(), "--per-token", path.to_str().unwrap()])
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success() && e.contains("--per-token") && e.contains(want), "{e}");
        assert!(o.stdout.is_empty() && !e.contains("batch "), "{e}");
    }
    assert!(!dir.join("no").exists() && !out.join("checkpoints/x.tsv").exists());
    assert_eq!(std::fs::read_to_string(&txt).unwrap(), text, "the text as it was");
    // (`--trace` is refused there too, before generating.)
    let o = ddl_cmd(&dir)
        .args(["generate", "--checkpoint", out.to_str().unwrap(), "--prompt", "RO", "--max-tokens", "2", "--trace"])
        .arg(out.join("checkpoints/t.safetensors"))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success() && e.contains("inside the kept checkpoints") && o.stdout.is_empty(), "{e}");
}

/// The final evaluation over the whole validation split comes after the progress bar: when it is
/// long (≥ 100 batches) it says how far it has got, at every tenth, up to its last batch.
/// `ddl eval --intervene` and `--ablate`: the model under interventions (or each sublayer's
/// write ablated in turn) on the same windows, paired with the model as trained; bad requests
/// refused before anything is evaluated.
#[test]
fn eval_under_interventions_and_ablations_pairs_with_the_model_as_trained() {
    let dir = tmpdir("eval-intervene");
    let c = ddl::testing::small_corpus(&dir);
    let train_micro = |name: &str, variant: &str| micro_run(&dir, name, variant, &c, 2);
    let out = train_micro("run", "ddl");
    let eval_of = |ck: &std::path::Path, args: &[&str]| {
        ddl_cmd(&dir).args(["eval", "--batch-size", "2", "--checkpoint"]).arg(ck).args(args).output().unwrap()
    };
    let eval = |args: &[&str]| eval_of(&out, args);
    let json = |args: &[&str]| -> serde_json::Value {
        let o = eval(&[args, &["--json"]].concat());
        assert!(o.status.success(), "eval {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
    };
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    // Factors of 1: the model as trained, to the bit.
    let same = json(&["--intervene", "all:erase*=1", "--intervene", "all:v*=1"]);
    let i = &same["intervened"];
    assert_eq!((i["loss"].clone(), f(&i["difference"]), f(&i["p"])), (same["loss"].clone(), 0.0, 1.0), "{same}");
    assert_eq!(i["interventions"], "all:erase*=1; all:v*=1");
    // A write removed: another loss, the difference intervened − as trained, an interval.
    let cut = json(&["--intervene", "block0.mlp:write=0"]);
    let i = &cut["intervened"];
    assert_ne!(i["loss"], cut["loss"], "{cut}");
    assert!((f(&i["difference"]) - (f(&i["loss"]) - f(&cut["loss"]))).abs() < 1e-15, "{cut}");
    let ci: Vec<f64> = i["ci"].as_array().unwrap().iter().map(f).collect();
    assert!(ci[0] <= f(&i["mean_paired_difference"]) && f(&i["mean_paired_difference"]) <= ci[1], "{cut}");
    assert_eq!(i["allow_out_of_range"], false);
    let wide = json(&["--intervene", "all:beta=3", "--allow-out-of-range"]);
    assert_eq!(wide["intervened"]["allow_out_of_range"], true, "{wide}");
    // Every sublayer ablated in turn: the same losses as one --intervene each, Holm over them,
    // and the forest plot.
    let plot = dir.join("ablate.png");
    let all = json(&["--ablate", "write", "--plot", plot.to_str().unwrap()]);
    assert_eq!(all["ablate"], serde_json::json!(["write"]));
    let rows = all["ablations"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["sublayer"].as_str().unwrap()).collect();
    assert_eq!(names, ["block0.attn", "block0.mlp", "block1.attn", "block1.mlp"]);
    assert_eq!((rows[1]["spec"].clone(), rows[1]["loss"].clone()), ("block0.mlp:write=0".into(), i["loss"].clone()));
    assert_eq!(all["loss"], cut["loss"], "the model as trained");
    for r in rows {
        assert!(f(&r["p_holm"]) >= f(&r["p"]) && f(&r["p_holm"]) <= 1.0, "{r}");
    }
    assert!(std::fs::read(&plot).unwrap().starts_with(b"\x89PNG"), "the plot is a PNG image");
    // Where the plot went is said, as --lens-plot's and --calibration-plot's are (it was not).
    assert_eq!(all["ablate_plot"].as_str(), plot.to_str(), "{all}");
    let erase = json(&["--ablate", "erase"]);
    assert_eq!(erase["ablations"][3]["spec"], "block1.mlp:erase=0");
    assert!(erase["ablations"].as_array().unwrap().iter().all(|r| r["loss"] != erase["loss"]), "{erase}");
    // Several parts: each sublayer's together, Holm over all the rows.
    // (Its plot replaces the earlier --plot's.)
    let before = std::fs::read(&plot).unwrap();
    let two = json(&["--ablate", "v,erase,v", "--batches", "2", "--plot", plot.to_str().unwrap()]);
    assert_ne!(std::fs::read(&plot).unwrap(), before, "the earlier plot was not replaced");
    assert_eq!(two["ablate"], serde_json::json!(["v", "erase"]), "as the flag names them, once each");
    let specs: Vec<&str> = two["ablations"].as_array().unwrap().iter().map(|r| r["spec"].as_str().unwrap()).collect();
    assert_eq!(specs[..3], ["block0.attn:v=0", "block0.attn:erase=0", "block0.mlp:v=0"]);
    assert_eq!((specs.len(), two["ablations"][1]["part"].clone()), (8, "erase".into()));
    let line = String::from_utf8_lossy(&eval(&["--ablate", "v", "--plot", plot.to_str().unwrap()]).stdout).into_owned();
    let said = format!("forest plot of the ablations: {}", plot.display());
    for want in ["v=0: X' = (I − β k kᵀ) X", "p after Holm over the 4 rows", "block1.mlp:v=0", "95 % interval", &said]
    {
        assert!(line.contains(want), "{want:?} in {line}");
    }
    assert!(!json(&["--ablate", "v", "--batches", "1"]).as_object().unwrap().contains_key("ablate_plot"));
    // One batch: nothing to pair, said once, with what to pass.
    let one = String::from_utf8_lossy(&eval(&["--ablate", "write", "--batches", "1"]).stdout).into_owned();
    assert!(one.contains("no intervals; pass --batches 2 or more") && !one.contains("df 0"), "{one}");
    let one = String::from_utf8_lossy(&eval(&["--intervene", "all:v=0", "--batches", "1"]).stdout).into_owned();
    assert!(one.contains("no interval (pass --batches 2 or more)"), "{one}");
    let line = String::from_utf8_lossy(&eval(&["--intervene", "block0.mlp:write=0"]).stdout).into_owned();
    assert!(line.contains("under block0.mlp:write=0") && line.contains("intervened − as trained"), "{line}");

    // --lens: the head on the state after the embedding and after each sublayer's write; the
    // last row is the model's own output (its loss and accuracy, which the lens leaves alone);
    // a state reads as the model with every later write off; the head in slices gives the same.
    let plain = json(&[]);
    let lens_png = dir.join("lens.png");
    let lensed = json(&["--lens-plot", lens_png.to_str().unwrap()]);
    for k in ["loss", "accuracy", "top5_accuracy", "entropy", "calibration_error"] {
        assert_eq!(lensed[k], plain[k], "{k}: the lens changed the model's own evaluation");
    }
    let rows = lensed["lens"].as_array().unwrap();
    let states: Vec<&str> = rows.iter().map(|r| r["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["embedding", "block0.attn", "block0.mlp", "block1.attn", "block1.mlp"]);
    let last = &rows[4];
    assert_eq!(
        (last["loss"].clone(), last["accuracy"].clone(), last["output"].clone()),
        (plain["loss"].clone(), plain["accuracy"].clone(), true.into())
    );
    assert!(rows[0]["change"].is_null() && rows[..4].iter().all(|r| r["output"] == false), "{lensed}");
    for w in rows.windows(2) {
        assert!((f(&w[1]["change"]) - (f(&w[1]["loss"]) - f(&w[0]["loss"]))).abs() < 1e-12, "{w:?}");
        let ci: Vec<f64> = w[1]["ci"].as_array().unwrap().iter().map(f).collect();
        assert!(ci[0] <= f(&w[1]["mean_paired_change"]) && f(&w[1]["mean_paired_change"]) <= ci[1], "{w:?}");
    }
    for (s, r) in rows[..4].iter().enumerate() {
        let later: Vec<String> = (s..4)
            .flat_map(|i| {
                [
                    "--intervene".into(),
                    format!("{}:write=0", ["block0.attn", "block0.mlp", "block1.attn", "block1.mlp"][i]),
                ]
            })
            .collect();
        let off = json(&later.iter().map(String::as_str).collect::<Vec<_>>());
        let want = f(&off["intervened"]["loss"]);
        assert!((f(&r["loss"]) - want).abs() <= 1e-6 * want, "state {s}: lens {} against {want}", r["loss"]);
    }
    assert!(std::fs::read(&lens_png).unwrap().starts_with(b"\x89PNG"), "the lens plot is a PNG image");
    // --per-token: each earlier state's loss per token, its column's mean the lens's loss.
    let tsv = dir.join("lens.tsv");
    let with_rows = json(&["--lens", "--per-token", tsv.to_str().unwrap()]);
    assert_eq!(with_rows["lens"], lensed["lens"]);
    let table = std::fs::read_to_string(&tsv).unwrap();
    let header: Vec<&str> = table.lines().next().unwrap().split('\t').collect();
    for (s, r) in rows[..4].iter().enumerate() {
        let col = header.iter().position(|h| *h == format!("loss_lens_{}", states[s])).expect("the state's column");
        let vals: Vec<f64> = table.lines().skip(1).map(|l| l.split('\t').nth(col).unwrap().parse().unwrap()).collect();
        let mean = vals.iter().sum::<f64>() / vals.len() as f64;
        assert!((mean - f(&r["loss"])).abs() < 1e-5, "{}: column mean {mean} against {}", states[s], r["loss"]);
    }
    assert!(!header.contains(&"loss_lens_block1.mlp"), "the output's column is `loss`: {header:?}");
    let sliced = json(&["--lens", "--head-chunk", "5"]);
    assert_eq!(sliced["lens"], lensed["lens"], "the head in slices");
    let line = String::from_utf8_lossy(&eval(&["--lens", "--batches", "1"]).stdout).into_owned();
    for want in ["logit lens", "block1.mlp", "(the model's output)", "no intervals: pass --batches 2 or more"] {
        assert!(line.contains(want), "{want:?} in {line}");
    }
    assert!(line.contains("after each sublayer's write") && !line.contains("residual addition"), "{line}");
    // Bad requests: said before anything is evaluated, nothing written.
    let base = train_micro("base", "baseline");
    let bad = |ck: &std::path::Path, args: &[&str], want: &[&str]| {
        let o = eval_of(ck, args);
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success() && want.iter().all(|w| e.contains(w)), "eval {args:?}: {e}");
        assert!(!e.contains("batch ") && o.stdout.is_empty(), "eval {args:?} evaluated first: {e}");
    };
    bad(&out, &["--intervene", "block0.attn:k=mean"], &["k=mean", "ddl generate"]);
    bad(&out, &["--intervene", "block5.mlp:beta=0"], &["block 5", "blocks 0 to 1"]);
    bad(&out, &["--intervene", "block0.mlp:gamma=0"], &["unknown action"]);
    bad(&out, &["--intervene", "all:beta=3"], &["--allow-out-of-range"]);
    // The baseline's lens: its residual stream read after each sublayer.
    let o = eval_of(&base, &["--lens", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["lens"].as_array().unwrap().len(), v["lens"][4]["loss"].clone()), (5, v["loss"].clone()), "{v}");
    // It has residual additions, no delta writes, and the headers say so (they said "after each
    // sublayer's write"): eval's and generate's.
    let o = eval_of(&base, &["--lens", "--batches", "1"]);
    let line = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(line.contains("after each sublayer's residual addition") && !line.contains("sublayer's write"), "{line}");
    let o = ddl_cmd(&dir)
        .args(["generate", "--prompt", "First", "--max-tokens", "3", "--lens", "--checkpoint"])
        .arg(&base)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success() && shown.contains("--- logit lens:"), "{shown}{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        shown.contains("after each sublayer's residual addition") && !shown.contains("sublayer's write"),
        "{shown}"
    );
    bad(&base, &["--intervene", "all:write=0"], &["no β or k"]);
    bad(&base, &["--ablate", "erase"], &["--ablate erase", "no delta writes"]);
    bad(&out, &["--ablate", "write", "--plot", dir.join("x.jpg").to_str().unwrap()], &["x.jpg", ".png"]);
    bad(&out, &["--ablate", "write", "--plot", dir.join("no/such/x.png").to_str().unwrap()], &["does not exist"]);
    bad(&out, &["--plot", plot.to_str().unwrap()], &["--ablate"]);
    // A PNG that is no earlier --plot (the run's own loss.png): refused, kept.
    let loss_png = out.join("loss.png");
    let kept = std::fs::read(&loss_png).unwrap();
    bad(&out, &["--ablate", "write", "--plot", loss_png.to_str().unwrap()], &["loss.png", "is not a plot"]);
    assert_eq!(std::fs::read(&loss_png).unwrap(), kept);
    bad(&out, &["--ablate", "write", "--against", base.to_str().unwrap()], &["--against"]);
    bad(&out, &["--ablate", "write", "--intervene", "all:write=0"], &["--intervene"]);
    bad(&out, &["--lens-plot", dir.join("lens.jpg").to_str().unwrap()], &["--lens-plot", "lens.jpg", ".png"]);
    bad(&out, &["--lens-plot", loss_png.to_str().unwrap()], &["loss.png", "is not a plot"]);
    assert_eq!(std::fs::read(&loss_png).unwrap(), kept);
    // Two outputs given one file (also as two spellings of it): refused first, naming both flags.
    let same = dir.join("same.png");
    let same = same.to_str().unwrap();
    let want = ["--per-token", "--calibration-plot", "name the same file"];
    bad(&out, &["--per-token", same, "--calibration-plot", same], &want);
    let spelled = format!("{}/./same.png", dir.display());
    bad(&out, &["--lens-plot", same, "--ablate", "write", "--plot", &spelled], &["--plot", "--lens-plot", "same file"]);
    assert!(!dir.join("same.png").exists());

    assert!(!dir.join("x.jpg").exists() && !dir.join("no").exists());
}

#[test]
fn a_long_final_evaluation_shows_its_progress() {
    let dir = tmpdir("eval-progress");
    let c = ddl::testing::small_corpus(&dir);
    let o = ddl_cmd(&dir)
        .args(["train", "--preset", "tiny", "--variant", "baseline", "--steps", "1", "--corpus", &c, "--out"])
        .arg(dir.join("run"))
        .args(["--set", "model.d_model=16", "--set", "model.n_layers=1", "--set", "model.n_heads=2"])
        .args(["--set", "model.head_dim=8", "--set", "model.mlp_hidden=40", "--set", "train.batch_size=1"])
        .args(["--set", "train.seq_len=16", "--set", "train.eval_every=0"])
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{err}");
    // 20 000 characters, a tenth for validation: (2000 − 1) / 16 = 124 windows, one a batch.
    assert!(out.contains("over the whole validation split: 1984 tokens"), "{out}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("evaluation: batch ")).collect();
    assert_eq!(lines.len(), 10, "{err}");
    assert_eq!(lines.last(), Some(&"evaluation: batch 124/124"), "{err}");
    // Cut by train.val_max_tokens, it is not called the whole split (in summary.json neither).
    let o = ddl_cmd(&dir)
        .args(["train", "--preset", "tiny", "--variant", "baseline", "--steps", "2", "--corpus", &c, "--out"])
        .arg(dir.join("cut"))
        .args(["--set", "model.d_model=16", "--set", "model.n_layers=1", "--set", "model.n_heads=2"])
        .args(["--set", "model.head_dim=8", "--set", "model.mlp_hidden=40", "--set", "train.batch_size=1"])
        .args(["--set", "train.seq_len=16", "--set", "train.eval_every=1", "--set", "train.val_max_tokens=160"])
        .args(["--set", "train.eval_batches=20"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("over the validation split's first 160 tokens: train.val_max_tokens"), "{out}");
    // The cap holds for the evaluations during training too (20 batches of 16 tokens would be
    // 320): every evaluation covers the same 160 tokens, so the best checkpoint compares them.
    let metrics = std::fs::read_to_string(dir.join("cut/metrics.jsonl")).unwrap();
    let evals: Vec<serde_json::Value> = metrics
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| r["val_loss"].is_number())
        .collect();
    assert_eq!(evals.len(), 2, "{metrics}");
    assert_eq!(evals[0]["val_tokens"].as_u64(), Some(160), "{metrics}");
    assert_eq!(evals[1]["val_subset_tokens"].as_u64(), Some(160), "{metrics}");
    // `ddl eval --split train` covers as many tokens as the validation evaluation does.
    let o = ddl_cmd(&dir)
        .args(["eval", "--json", "--split", "train", "--checkpoint"])
        .arg(dir.join("cut"))
        .output()
        .unwrap();
    let e: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(e["tokens"].as_u64(), Some(160), "{e}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cut/summary.json")).unwrap()).unwrap();
    assert_eq!((summary["val_tokens"].as_u64(), summary["val_whole"].as_bool()), (Some(160), Some(false)));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run/summary.json")).unwrap()).unwrap();
    assert_eq!(summary["val_whole"].as_bool(), Some(true));
}

/// Any d_v the settings accept trains, evaluates and generates through the CLI: d_v = 9 (above the
/// delta write's segment forms) for ddl_cc, whose K_c follows d_v.
#[test]
fn a_value_width_above_eight_trains_evaluates_and_generates_through_the_cli() {
    let dir = tmpdir("cli-dv9");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let st = ddl_cmd(&dir)
        .args(["train", "--preset", "tiny", "--variant", "ddl_cc", "--steps", "3", "--corpus", &c, "--out"])
        .arg(&out)
        .args(["--set", "model.d_model=16", "--set", "model.n_layers=1", "--set", "model.n_heads=2"])
        .args(["--set", "model.head_dim=8", "--set", "model.mlp_hidden=40", "--set", "model.d_v=9"])
        .args(["--set", "train.batch_size=2", "--set", "train.seq_len=16", "--set", "train.eval_batches=1"])
        .args(["--sample", "4"])
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&st.stdout);
    assert!(st.status.success(), "train failed: {so}\n{}", String::from_utf8_lossy(&st.stderr));
    assert!(so.contains("validation loss") && so.contains("--- sample ---"), "{so}");
    let cfg = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(cfg.contains("d_v = 9") && cfg.contains("state_kernel = 9"), "{cfg}");
    let ev = ddl_cmd(&dir).args(["eval", "--checkpoint"]).arg(&out).output().unwrap();
    assert!(ev.status.success(), "{}", String::from_utf8_lossy(&ev.stderr));
    let loss = String::from_utf8_lossy(&ev.stdout);
    assert!(loss.contains("perplexity"), "{loss}");
}

/// `ddl chat`'s session: the second turn prefills only its own line, its reply is the one a fresh
/// generation over the whole conversation gives (the context is kept), replies stream one piece
/// per token, and past the context the window slides and the chat goes on.
#[test]
fn a_chat_keeps_its_caches_across_turns_and_streams_token_by_token() {
    use ddl::chat::{ChatSettings, PlainLines, Session};
    use ddl::generate::{GenOptions, Sampler, SamplerConfig};
    let dir = tmpdir("chat");
    env_cache(&dir);
    let c = ddl::testing::small_corpus(&dir);
    let gpu = ddl::testing::gpu();
    let out = dir.join("run");
    let mut run = small_run(Variant::Ddl, &c);
    run.set("model.max_seq_len=48").unwrap();
    ddl::train::train(
        gpu.clone(),
        TrainOptions {
            run,
            steps: 3,
            out: out.clone(),
            resume: false,
            overwrite: false,
            show: ddl::train::Show::Quiet,
        },
    )
    .unwrap();
    let (model, tok) = ddl::generate::load_for_inference(&gpu, &out).unwrap();
    let greedy = SamplerConfig { temperature: 0.0, ..Default::default() };
    let settings = ChatSettings { sampler: greedy.clone(), max_tokens: 6, stop: Vec::new(), logprobs: None };
    let mut s = Session::new(&model, &tok, settings.clone(), true);
    let mut pieces = Vec::new();
    let r1 = s.turn("First Citizen:", |p| pieces.push(p.to_string())).unwrap();
    assert_eq!(r1.prefilled, "First Citizen:\n".chars().count());
    assert!(!r1.tokens.is_empty());
    // Char tokens: one streamed piece per generated token, in order.
    assert_eq!(pieces.len(), r1.tokens.len(), "{pieces:?}");
    assert_eq!(pieces.concat(), r1.text);
    let before: Vec<u32> = s.history().to_vec();
    // A reply cut by max_tokens ends without a newline: the next line starts on a new one, as
    // the screen shows it (not glued to the reply's last word).
    let line = if r1.text.ends_with('\n') { "Second\n".to_string() } else { "\nSecond\n".to_string() };
    let r2 = s.turn("Second", |_| {}).unwrap();
    assert_eq!(r2.prefilled, line.chars().count(), "the second turn prefills only its line");
    let mut prompt = before.clone();
    prompt.extend(tok.encode(&line).unwrap());
    let opts = GenOptions {
        max_tokens: 6,
        stop: vec!["\n\n".into()],
        stop_token: tok.eot_id(),
        trace: false,
        beta_maps: None,
        k_mean: Vec::new(),
    };
    let (fresh, _) =
        ddl::generate::generate(&model, &tok, &prompt, &opts, &mut Sampler::new(greedy.clone()), |_| {}).unwrap();
    assert_eq!(r2.tokens, fresh, "the cached turn must equal a generation over the whole conversation");
    assert!(s.history().starts_with(&prompt));
    assert!(r2.scores.is_empty(), "no scores unless asked");
    // /set logprobs 3: each reply token scored as the model saw it (greedy: the likeliest), the
    // log-probabilities those of the whole conversation teacher-forced.
    let mut scored = Session::new(&model, &tok, ChatSettings { logprobs: Some(3), ..settings.clone() }, false);
    let r = scored.turn("First Citizen:", |_| {}).unwrap();
    assert_eq!(r.tokens, r1.tokens);
    assert_eq!(r.scores.iter().map(|x| x.id).collect::<Vec<_>>(), r.tokens);
    let forced =
        ddl::generate::continuation_logprobs(&model, &tok.encode("First Citizen:\n").unwrap(), &r.tokens, None, &[])
            .unwrap();
    for (x, want) in r.scores.iter().zip(&forced) {
        assert!(
            x.rank == 1 && x.top.len() == 3 && x.top[0].id == x.id && (x.logprob - want).abs() < 1e-4,
            "{x:?} {want}"
        );
    }
    // Every token read has a trace with one β per sublayer; the β of the cached turns equal a
    // single prefill of the whole conversation's, and differ from the second line read alone
    // (the context reaches its writes through attention).
    assert_eq!(s.traces().len(), s.history().len());
    assert!(s.traces().iter().all(|t| t.beta.len() == 2));
    let sampler = || Sampler::new(SamplerConfig { temperature: 0.0, ..Default::default() });
    let full = ddl::generate::Generator::new(&model, &tok, &prompt, sampler(), true).unwrap();
    for (i, (a, b)) in s.traces()[..prompt.len()].iter().zip(full.prompt_traces()).enumerate() {
        assert_eq!(a.token, b.token);
        for (x, y) in a.beta.iter().zip(&b.beta) {
            assert!((x - y).abs() < 1e-4, "token {i}: β {x} cached vs {y} in one prefill");
        }
    }
    let second = tok.encode(&line).unwrap();
    let alone = ddl::generate::Generator::new(&model, &tok, &second, sampler(), true).unwrap();
    let cached = &s.traces()[before.len()..prompt.len()];
    let moved = alone
        .prompt_traces()
        .iter()
        .zip(cached)
        .flat_map(|(a, b)| a.beta.iter().zip(&b.beta))
        .map(|(x, y)| (x - y).abs());
    assert!(moved.fold(0.0f32, f32::max) > 1e-3, "the second turn's writes must see the first turn");
    // Past the context (48 tokens): the window slides, the chat goes on.
    let long = "x".repeat(40);
    let r3 = s.turn(&long, |_| {}).unwrap();
    assert!(r3.prefilled >= 41 && r3.prefilled <= 48, "{}", r3.prefilled);
    s.turn("and on", |_| {}).unwrap();
    // A line longer than the context: only the tokens read have traces, as for a first line's.
    let (read, traced) = (s.history().len(), s.traces().len());
    let r5 = s.turn(&"y".repeat(60), |_| {}).unwrap();
    assert!(r5.dropped > 0);
    let new_traces = &s.traces()[traced..];
    assert!(new_traces.iter().all(|t| t.beta.len() == 2), "a trace without β (a token not read)");
    assert_eq!(new_traces.len(), s.history().len() - read - r5.dropped, "traces of the tokens read only");

    // Through `chat::run`: every token reaches the output as its own flushed write, commands and
    // errors go to the log, and the trace file holds the whole conversation.
    struct Writes(Vec<String>);
    impl std::io::Write for Writes {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.push(String::from_utf8_lossy(b).into_owned());
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let script = "First Citizen:\n/set top_k 3\n/set  max_tokens   4\n/settings\n/set nope 1\n/set stop \\n\n/set stop ab\n\
                  /reset now\n/set stop \\\\n\n/set stop ✓\n/set stop none\nSecond\n/reset\nagain\n/quit\n";
    let (mut input, mut log, mut out) = (std::io::Cursor::new(script.as_bytes()), Vec::new(), Writes(Vec::new()));
    let trace = dir.join("chat-trace.safetensors");
    let mut prompts = Vec::new();
    let mut lines = PlainLines::new(&mut input, &mut prompts);
    let settings_seed = settings.sampler.seed;
    let opts = ddl::chat::ChatOptions { trace: Some(&trace), ..Default::default() };
    ddl::chat::run(&model, &tok, settings, &mut lines, &mut out, &mut log, &opts).unwrap();
    let log = String::from_utf8(log).unwrap();
    assert!(
        log.contains("(top_k = 3)") && log.contains("unknown setting 'nope'") && log.contains("context cleared"),
        "{log}"
    );
    assert!(log.contains("max_tokens 4") && log.contains("top_k 3"), "{log}");
    // `stop TEXT` adds: the list that holds is said.
    assert!(log.contains(r#"(stop texts: ["\n", "ab"], and a blank line)"#), "{log}");
    // `\\n` typed is a backslash and an n; a command with words after it is not run.
    assert!(log.contains(r#"(stop texts: ["\n", "ab", "\\n"], and a blank line)"#), "{log}");
    assert!(log.contains("/reset takes nothing after it (got 'now')"), "{log}");
    // A stop text the character tokenizer cannot write is said to stop nothing (as `--stop`'s).
    assert!(
        log.contains("note: stop \"✓\" can never be generated (character '✓'")
            && log.contains("it will not stop a reply"),
        "{log}"
    );
    assert_eq!(log.matches("context cleared").count(), 1, "{log}");
    let replies: Vec<&String> = out.0.iter().filter(|w| w.as_str() != "\n").collect();
    assert!(replies.len() >= 6 + 4, "token-by-token writes expected, got {:?}", out.0);
    let bytes = std::fs::read(&trace).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    // After /reset the trace is the new conversation: "again\n" and its reply.
    let n = st.tensor("beta").unwrap().shape()[0];
    assert!(n > "again\n".len() && n <= "again\n".len() + 5, "{n}");
    // The summary tells the line's tokens (read) from the reply's (written).
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trace.with_extension("json")).unwrap()).unwrap();
    let read: Vec<bool> = summary["tokens"].as_array().unwrap().iter().map(|t| t["read"] == true).collect();
    assert_eq!(read.len(), n);
    assert!(read[.."again\n".len()].iter().all(|&r| r) && read["again\n".len()..].iter().all(|&r| !r), "{read:?}");
    // …and how the reply was made: the settings then in force, the turn's own seed (the third
    // turn: the chat's seed + 2), in the summary and in the safetensors header.
    let turns = summary["turns"].as_array().unwrap_or_else(|| panic!("{summary}"));
    assert_eq!(turns.len(), 1, "{summary}");
    let t = &turns[0];
    assert_eq!((t["from_token"].as_u64(), t["max_tokens"].as_u64()), (Some(0), Some(4)), "{t}");
    assert_eq!(t["stop"], serde_json::json!([]), "{t}");
    assert_eq!(t["sampling"]["top_k"], 3, "{t}");
    assert_eq!(t["sampling"]["seed"].as_u64(), Some(settings_seed + 2), "{t}");
    assert_eq!(summary["sampling"], serde_json::Value::Null, "{summary}");
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let header: serde_json::Value = serde_json::from_str(&meta.metadata().as_ref().unwrap()["turns"]).unwrap();
    assert_eq!(header, summary["turns"]);
}

/// `ddl chat` under interventions, and its turns undone: a turn after `/intervene` is the reply a
/// fresh generation under the interventions over the whole conversation gives (the conversation
/// re-read under them), its writes carry them, `/intervene none` gives the model back as trained;
/// `/undo` restores the conversation before the last turn exactly (the same greedy reply again),
/// and `run` says all of it, saves the text and records each turn's interventions in the trace.
#[test]
fn a_chat_runs_under_interventions_and_undoes_turns() {
    use ddl::chat::{ChatOptions, ChatSettings, PlainLines, Session};
    use ddl::generate::{GenOptions, Sampler, SamplerConfig};
    let dir = tmpdir("chat-intervene");
    env_cache(&dir);
    let c = ddl::testing::small_corpus(&dir);
    let gpu = ddl::testing::gpu();
    let out = dir.join("run");
    let mut run = small_run(Variant::Ddl, &c);
    // (Two blocks: an intervention on block 0 changes what block 1's attention cached.)
    run.set("model.max_seq_len=48").unwrap();
    run.set("model.n_layers=2").unwrap();
    let show = ddl::train::Show::Quiet;
    let opts = TrainOptions { run, steps: 3, out: out.clone(), resume: false, overwrite: false, show };
    ddl::train::train(gpu.clone(), opts).unwrap();
    let (model, tok) = ddl::generate::load_for_inference(&gpu, &out).unwrap();
    let greedy = SamplerConfig { temperature: 0.0, ..Default::default() };
    let settings = ChatSettings { sampler: greedy.clone(), max_tokens: 5, stop: Vec::new(), logprobs: None };
    let fresh = |prompt: &[u32], iv: &ddl::model::Interventions| -> Vec<u32> {
        let opts = GenOptions {
            max_tokens: 5,
            stop: vec!["\n\n".into()],
            stop_token: tok.eot_id(),
            trace: false,
            beta_maps: (!iv.is_empty()).then(|| iv.maps(&model.cfg).unwrap()),
            k_mean: iv.k_mean_targets(&model.cfg).unwrap(),
        };
        ddl::generate::generate(&model, &tok, prompt, &opts, &mut Sampler::new(greedy.clone()), |_| {}).unwrap().0
    };
    let mut s = Session::new(&model, &tok, settings.clone(), true);
    s.turn("First Citizen:", |_| {}).unwrap();
    let after_first = s.history().to_vec();
    let (traces_first, turns_first) = (s.traces().len(), s.turns().len());
    let r2 = s.turn("Second", |_| {}).unwrap();
    // Undo: the conversation before the turn, its traces and turns too; the same line again
    // gives the same greedy reply.
    assert_eq!(s.undo().unwrap().as_deref(), Some("Second"));
    assert_eq!(s.history(), &after_first[..]);
    assert_eq!((s.traces().len(), s.read().len(), s.turns().len()), (traces_first, traces_first, turns_first));
    let again = s.turn("Second", |_| {}).unwrap();
    assert_eq!(again.tokens, r2.tokens, "the turn after /undo must be the turn it replaced");
    assert_eq!(s.undo().unwrap().as_deref(), Some("Second"));

    // Under an intervention: the conversation re-read, the next reply as a fresh generation
    // under it over the whole conversation, the intervened sublayer's β 0 in every new trace.
    let iv = ddl::model::Interventions::parse(&["block0.mlp:beta=0".into()], false).unwrap();
    let reread = s.set_interventions(iv.clone()).unwrap();
    assert_eq!(reread, after_first.len());
    // The prediction is the intervened model's over the conversation (and not the model's own).
    let logits_of = |history: &[u32], iv: &ddl::model::Interventions| -> Vec<f32> {
        let (maps, k_mean) =
            ((!iv.is_empty()).then(|| iv.maps(&model.cfg).unwrap()), iv.k_mean_targets(&model.cfg).unwrap());
        let sampler = Sampler::new(greedy.clone());
        let g = ddl::generate::Generator::with_interventions(&model, &tok, history, sampler, false, maps, &k_mean);
        g.unwrap().logits().to_vec()
    };
    let gap = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    let none = ddl::model::Interventions::default();
    let (want, own) = (logits_of(&after_first, &iv), logits_of(&after_first, &none));
    assert!(gap(s.logits(), &want) < 1e-4, "re-read: {}", gap(s.logits(), &want));
    assert!(gap(&want, &own) > 1e-2, "the intervention changes the prediction by only {}", gap(&want, &own));
    let line = tok.encode(if after_first.ends_with(&tok.encode("\n").unwrap()) { "Second\n" } else { "\nSecond\n" });
    let mut prompt = after_first.clone();
    prompt.extend(line.unwrap());
    let r = s.turn("Second", |_| {}).unwrap();
    assert_eq!(r.tokens, fresh(&prompt, &iv), "a turn under an intervention is a generation under it");
    // (Block 1 attends over the whole conversation as the intervened model cached it.)
    let after = s.history().to_vec();
    assert!(
        gap(s.logits(), &logits_of(&after, &iv)) < 1e-4,
        "after the turn: {}",
        gap(s.logits(), &logits_of(&after, &iv))
    );
    let own = fresh(&prompt, &ddl::model::Interventions::default());
    let new_traces = &s.traces()[traces_first..];
    assert!(!new_traces.is_empty() && new_traces.iter().all(|t| t.beta[1] == 0.0), "block0.mlp's β is not 0");
    assert!(s.traces()[..traces_first].iter().any(|t| t.beta[1] != 0.0), "the earlier traces stay as read");
    assert_eq!(s.turns().last().unwrap().interventions, "block0.mlp:beta=0");
    // Ended: as trained again (the same turn redone).
    s.undo().unwrap();
    s.set_interventions(ddl::model::Interventions::default()).unwrap();
    assert_eq!(s.turn("Second", |_| {}).unwrap().tokens, own);
    assert_eq!(s.turns().last().unwrap().interventions, "");
    // Refused: a block the model lacks changes nothing.
    let bad = ddl::model::Interventions::parse(&["block9.mlp:beta=0".into()], false).unwrap();
    let e = s.set_interventions(bad).unwrap_err().to_string();
    assert!(e.contains("block9.mlp:beta=0") && e.contains("blocks 0 to"), "{e}");
    assert!(s.interventions().is_empty());
    // Nothing left to undo after undoing every turn; the first line's turn starts afresh.
    s.undo().unwrap();
    assert_eq!(s.undo().unwrap().as_deref(), Some("First Citizen:"));
    assert!(s.history().is_empty() && s.traces().is_empty() && s.turns().is_empty());
    assert_eq!(s.undo().unwrap(), None);

    // Through `run`: what each command says, the saved text, each turn's interventions in the
    // trace (and, all turns alike, at its top).
    let trace = dir.join("chat.safetensors");
    let saved = dir.join("chat.txt");
    let taken = dir.join("taken.txt");
    std::fs::write(&taken, "mine").unwrap();
    let script = format!(
        "/intervene\nFirst Citizen:\n/intervene block0.mlp:beta=0 all:erase=0\n/intervene block0.mlp:beta=0; all:erase=0\n\
         /intervene block0.mlp:beta=3\n/intervene nope\n/settings\nSecond\n/undo\n/retry\n/retry\n/save {}\n\
         /save {}\n/save {}\n/save {}\n/undo now\n",
        saved.display(),
        saved.display(),
        taken.display(),
        dir.display()
    );
    let (mut input, mut log, mut text) = (std::io::Cursor::new(script.into_bytes()), Vec::new(), Vec::new());
    let mut prompts = Vec::new();
    let mut lines = PlainLines::new(&mut input, &mut prompts);
    let iv0 = ddl::model::Interventions::parse(&["block0.attn:beta<=1".into()], false).unwrap();
    let opts = ChatOptions { trace: Some(&trace), interventions: iv0 };
    ddl::chat::run(&model, &tok, settings, &mut lines, &mut text, &mut log, &opts).unwrap();
    let log = String::from_utf8(log).unwrap();
    for want in [
        "(under block0.attn:beta<=1)",
        "(interventions: block0.attn:beta<=1)",
        "(interventions: block0.attn:beta<=1; block0.mlp:beta=0; all:erase=0; the conversation's last",
        "tokens re-read under them)",
        // (The same specs again, `;`-separated: they add, composed in order.)
        "(interventions: block0.attn:beta<=1; block0.mlp:beta=0; all:erase=0; block0.mlp:beta=0; all:erase=0;",
        "error: /intervene 'block0.mlp:beta=3': β = 3 is outside [0, 2]",
        "start the chat with --allow-out-of-range",
        "error: /intervene 'nope': expected TARGET:ACTION",
        "interventions: block0.attn:beta<=1; block0.mlp:beta=0; all:erase=0; block0.mlp:beta=0; all:erase=0)",
        "(undone: \"Second\" and its reply)",
        "(again: \"First Citizen:\")",
        "(saved the conversation, ",
        "exists and this chat did not write it",
        "is a folder: give a file name",
        "/undo takes nothing after it (got 'now')",
    ] {
        assert!(log.contains(want), "{want:?} not in the log:\n{log}");
    }
    // Saved twice to the same file (this chat's own); another's file is left as it was.
    assert_eq!(log.matches("(saved the conversation, ").count(), 2, "{log}");
    assert_eq!(std::fs::read_to_string(&taken).unwrap(), "mine");
    let saved_text = std::fs::read_to_string(&saved).unwrap();
    assert!(saved_text.starts_with("First Citizen:\n"), "{saved_text:?}");
    assert!(!saved_text.contains("Second"), "the undone turn is not in the saved text: {saved_text:?}");
    // Two /retry: the first line's turn twice redone, one turn left in the trace.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trace.with_extension("json")).unwrap()).unwrap();
    let turns = summary["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 1, "{summary}");
    let want_iv = "block0.attn:beta<=1; block0.mlp:beta=0; all:erase=0; block0.mlp:beta=0; all:erase=0";
    assert_eq!(turns[0]["interventions"], want_iv, "{summary}");
    assert_eq!(summary["interventions"], want_iv, "{summary}");
    let n = summary["tokens"].as_array().unwrap().len();
    assert_eq!(n, tok.encode(&saved_text).unwrap().len(), "the trace is the saved conversation's tokens");
    // `ddl chat --allow-out-of-range` without --intervene: /intervene takes β outside [0, 2]
    // (it was refused, telling to start the chat with the flag it was started with).
    let mut input =
        std::io::Cursor::new(b"/intervene block0.mlp:beta=3\n/intervene none\n/intervene all:beta=-1\n".to_vec());
    let mut prompts = Vec::new();
    let mut lines = PlainLines::new(&mut input, &mut prompts);
    let (mut log, mut text) = (Vec::new(), Vec::new());
    let wide = ddl::model::Interventions::parse(&[], true).unwrap();
    let opts = ChatOptions { trace: None, interventions: wide };
    let settings = ChatSettings { sampler: greedy.clone(), max_tokens: 5, stop: Vec::new(), logprobs: None };
    ddl::chat::run(&model, &tok, settings, &mut lines, &mut text, &mut log, &opts).unwrap();
    let log = String::from_utf8(log).unwrap();
    assert!(log.contains("(interventions: block0.mlp:beta=3") && log.contains("(interventions: all:beta=-1"), "{log}");
    assert!(!log.contains("outside [0, 2]") && !log.contains("error"), "{log}");
    // Every turn undone: the trace records no turns as `[]` (it wrote `"turns": null`), in the
    // summary and the safetensors metadata.
    let mut input = std::io::Cursor::new(b"First\n/undo\n".to_vec());
    let mut prompts = Vec::new();
    let mut lines = PlainLines::new(&mut input, &mut prompts);
    let (mut log, mut text) = (Vec::new(), Vec::new());
    let opts =
        ChatOptions { trace: Some(&trace), interventions: ddl::model::Interventions::parse(&[], false).unwrap() };
    let settings = ChatSettings { sampler: greedy.clone(), max_tokens: 3, stop: Vec::new(), logprobs: None };
    ddl::chat::run(&model, &tok, settings, &mut lines, &mut text, &mut log, &opts).unwrap();
    let log = String::from_utf8(log).unwrap();
    assert!(log.contains("(undone: \"First\" and its reply)"), "{log}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trace.with_extension("json")).unwrap()).unwrap();
    assert_eq!(summary["turns"], serde_json::json!([]), "{summary}");
    let bytes = std::fs::read(&trace).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(meta.metadata().as_ref().unwrap()["turns"], "[]");
}

/// Evaluation during training runs over the training program's activations: the sharing
/// forward program allocates no activations and gives the separate forward program's loss, bit
/// for bit, and the training step after it is unchanged.
#[test]
fn evaluation_shares_the_training_programs_activations() {
    use std::sync::atomic::Ordering;
    let gpu = ddl::testing::gpu();
    for variant in [Variant::Ddl, Variant::DdlCc, Variant::Baseline] {
        let mut cfg = ddl::model::ModelConfig::preset("tiny", variant).unwrap();
        (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.head_dim, cfg.mlp_hidden) = (32, 2, 2, 16, 85);
        let (b, t) = (2, 16);
        let model = ddl::model::Model::new(gpu.clone(), cfg.clone(), 3).unwrap();
        let opt = ddl::kernels::adamw::AdamWConfig::paper(1e-3);
        let prog = model.program(b, t, &opt).unwrap();
        let own = model.forward_program(b, t).unwrap();
        let live = gpu.stats.live_bytes.load(Ordering::SeqCst);
        let shared = model.forward_program_sharing(&prog).unwrap();
        let grown = gpu.stats.live_bytes.load(Ordering::SeqCst) - live;
        assert!(grown <= 4096, "{variant}: the sharing program allocated {grown} bytes");
        let v = cfg.vocab_size as i32;
        let x: Vec<i32> = (0..(b * t) as i32).map(|i| (i * 7) % v).collect();
        let y: Vec<i32> = (0..(b * t) as i32).map(|i| (i * 11 + 3) % v).collect();
        own.set_batch(&model, &x, &y).unwrap();
        shared.set_batch(&model, &x, &y).unwrap();
        let (a, na) = model.eval_loss(&own).unwrap();
        let (c, nc) = model.eval_loss(&shared).unwrap();
        assert_eq!((a.to_bits(), na), (c.to_bits(), nc), "{variant}");
        // A training step after the shared evaluation: the same as on a fresh model.
        let twin = ddl::model::Model::new(gpu.clone(), cfg.clone(), 3).unwrap();
        let tprog = twin.program(b, t, &opt).unwrap();
        for (m, p) in [(&model, &prog), (&twin, &tprog)] {
            p.set_batch(m, &x, &y).unwrap();
        }
        let s1 = model.train_step(&prog, &opt).unwrap();
        let s2 = twin.train_step(&tprog, &opt).unwrap();
        assert_eq!((s1.0.to_bits(), s1.1.to_bits()), (s2.0.to_bits(), s2.1.to_bits()), "{variant}");
    }
}

/// `shader_checks=0` (`Forms::shader_checks`): every kernel of a training step built without
/// wgpu's index clamps and loop counters gives the same bits as with them, with this adapter's
/// forms and with the GPU forms (staged matmul tiles and team reductions in workgroup memory,
/// blocked attention, the wide compressor finish), for variants that run every state kernel. An
/// index that left its array, harmless under the clamp, would read other values here. So does
/// `unchecked=all-delta-shortconv` (`Forms::unchecked`, the H200's form from session 40 to GPU
/// run 5, which made it `unchecked=all`, the same as `shader_checks=0` here): every module
/// unchecked but the delta write's and the compressor's, checked and unchecked pipelines mixed
/// in one step.
#[test]
fn kernels_built_without_wgpus_runtime_checks_train_to_the_same_bits() {
    use std::sync::Arc;
    let base = ddl::testing::gpu();
    let gpu_forms = ddl::kernels::forms::Forms::defaults(false, (32, 32), base.features);
    for (forms_name, forms) in [("this adapter's", base.forms.clone()), ("GPU", gpu_forms)] {
        let checked = base.with_forms(|f| *f = forms.clone());
        let unchecked = base.with_forms(|f| (*f, f.shader_checks) = (forms.clone(), false));
        let partly = base.with_forms(|f| {
            *f = forms.clone();
            f.apply("unchecked=all-delta-shortconv", base.features).unwrap();
        });
        assert!(checked.forms.shader_checks && !unchecked.forms.shader_checks);
        // The handles share the device's pipeline cache: the unchecked form is its own
        // pipeline (its own module), under the same kernel name; `unchecked=all-delta-shortconv`
        // takes the unchecked pipelines but the compressor's and the delta write's.
        let adamw = |g: &Arc<ddl::gpu::Gpu>| g.kernel("adamw", None, "adamw_step").unwrap();
        let mm = |g: &Arc<ddl::gpu::Gpu>| g.kernel("matmul", Some("w128"), "wm_kk").unwrap();
        let conv = |g: &Arc<ddl::gpu::Gpu>| g.kernel("shortconv", Some("m1"), "token_forward").unwrap();
        let (a, b) = (adamw(&checked), adamw(&unchecked));
        assert!(!Arc::ptr_eq(&a, &b) && a.name == b.name, "{} / {}", a.name, b.name);
        assert!(Arc::ptr_eq(&adamw(&partly), &b) && Arc::ptr_eq(&mm(&partly), &mm(&unchecked)));
        assert!(!Arc::ptr_eq(&mm(&partly), &mm(&checked)));
        assert!(Arc::ptr_eq(&conv(&partly), &conv(&checked)) && !Arc::ptr_eq(&conv(&partly), &conv(&unchecked)));
        for variant in [Variant::DdlCcec, Variant::DdlVmap, Variant::Baseline] {
            let mut cfg = ddl::model::ModelConfig::preset("tiny", variant).unwrap();
            (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.head_dim, cfg.mlp_hidden) = (48, 2, 3, 16, 85);
            let (b, t) = (3, 23);
            let v = cfg.vocab_size as i32;
            let x: Vec<i32> = (0..(b * t) as i32).map(|i| (i * 7 + 1) % v).collect();
            let y: Vec<i32> = (0..(b * t) as i32).map(|i| (i * 11 + 3) % v).collect();
            let opt = ddl::kernels::adamw::AdamWConfig::paper(1e-3);
            let run = |gpu: &std::sync::Arc<ddl::gpu::Gpu>| {
                let model = ddl::model::Model::new(gpu.clone(), cfg.clone(), 5).unwrap();
                let prog = model.program(b, t, &opt).unwrap();
                prog.set_batch(&model, &x, &y).unwrap();
                let mut steps = Vec::new();
                for step in 1..=2 {
                    let o = ddl::kernels::adamw::AdamWConfig { step, ..opt };
                    let (loss, norm) = model.train_step(&prog, &o).unwrap();
                    steps.push([loss.to_bits(), norm.to_bits()]);
                }
                let params: Vec<u32> = model.read_params().unwrap().iter().map(|p| p.to_bits()).collect();
                (steps, params)
            };
            let want = run(&checked);
            assert!(want.0.iter().flatten().all(|&b| f32::from_bits(b).is_finite()), "{variant}: {:?}", want.0);
            for (side, gpu) in [("none checked", &unchecked), ("unchecked=all-delta-shortconv", &partly)] {
                let got = run(gpu);
                assert_eq!(want.0, got.0, "{variant}, {forms_name} forms, {side}: loss and gradient norm per step");
                let differ = want.1.iter().zip(&got.1).filter(|(a, b)| a != b).count();
                assert_eq!(
                    differ,
                    0,
                    "{variant}, {forms_name} forms, {side}: {differ} of {} parameters differ",
                    want.1.len()
                );
            }
        }
    }
}

/// Gradient accumulation: k micro-batches of B sequences are one submit (their inputs uploaded
/// once, one readback) and equal one batch of k·B sequences — loss, gradient norm and the
/// parameters after the AdamW update — to float32 summation order: relative differences ≤ 1e-5
/// for the loss and norm, relative L2 ≤ 1e-5 for the parameters (measured on lavapipe: loss and
/// norm ≤ 2e-7, parameters 2e-8 (ddl) and 1.4e-6 (baseline, where AdamW's first step turns a few
/// near-zero gradient elements' rounding into ±lr)).
#[test]
fn an_accumulated_step_is_one_submit_and_equals_one_batch_of_all_its_sequences() {
    use std::sync::atomic::Ordering;
    let gpu = own_gpu();
    for variant in [Variant::Ddl, Variant::Baseline] {
        let mut cfg = ddl::model::ModelConfig::preset("tiny", variant).unwrap();
        (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.head_dim, cfg.mlp_hidden) = (32, 2, 2, 16, 85);
        let (b, t, k) = (2usize, 16usize, 3usize);
        let opt = ddl::kernels::adamw::AdamWConfig::paper(1e-3);
        let a = ddl::model::Model::new(gpu.clone(), cfg.clone(), 5).unwrap();
        let obj = ddl::model::Objective { label_smoothing: 0.0, loss_scale: 1.0 / k as f32 };
        let pa = a.program_with(b, t, &opt, obj).unwrap();
        let one = ddl::model::Model::new(gpu.clone(), cfg.clone(), 5).unwrap();
        let pb = one.program(k * b, t, &opt).unwrap();
        let v = cfg.vocab_size as i32;
        let batches: Vec<(Vec<i32>, Vec<i32>)> = (0..k as i32)
            .map(|m| {
                let x = (0..(b * t) as i32).map(|i| (i * 7 + m * 13) % v).collect();
                let y = (0..(b * t) as i32).map(|i| (i * 11 + m * 5 + 3) % v).collect();
                (x, y)
            })
            .collect();
        a.set_optimizer_step(&pa, &opt).unwrap();
        let submits = gpu.stats.submits.load(Ordering::SeqCst);
        let sa = pa.run_accumulated(&a, &batches, true).unwrap();
        assert_eq!(gpu.stats.submits.load(Ordering::SeqCst) - submits, 1, "{variant}: one submit per step");
        assert_eq!(sa.len(), k);
        let x: Vec<i32> = batches.iter().flat_map(|(x, _)| x.clone()).collect();
        let y: Vec<i32> = batches.iter().flat_map(|(_, y)| y.clone()).collect();
        pb.set_batch(&one, &x, &y).unwrap();
        let (loss_b, norm_b) = one.train_step(&pb, &opt).unwrap();
        let loss_a = sa.iter().map(|s| s[0] as f64).sum::<f64>() / k as f64;
        let norm_a = (sa[k - 1][2] as f64).sqrt();
        let rel = |p: f64, q: f64| (p - q).abs() / q.abs();
        assert!(rel(loss_a, loss_b as f64) <= 1e-5, "{variant}: loss {loss_a} vs {loss_b}");
        assert!(rel(norm_a, norm_b as f64) <= 1e-5, "{variant}: norm {norm_a} vs {norm_b}");
        let (pa_, pb_) = (a.read_params().unwrap(), one.read_params().unwrap());
        let num: f64 = pa_.iter().zip(&pb_).map(|(p, q)| ((p - q) as f64).powi(2)).sum();
        let den: f64 = pb_.iter().map(|q| (*q as f64).powi(2)).sum();
        assert!((num / den).sqrt() <= 1e-5, "{variant}: parameters differ by {} rel L2", (num / den).sqrt());
    }
}

#[test]
fn bad_training_inputs_are_clear_errors() {
    let dir = tmpdir("bad");
    let run = |args: &[&str]| {
        let o = ddl_cmd(&dir).args(args).output().unwrap();
        assert!(!o.status.success(), "{args:?} should fail");
        let e = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!e.contains("panicked"), "{args:?} panicked: {e}");
        e
    };
    let out = dir.join("o").display().to_string();
    let e = run(&["train", "--corpus", "/nonexistent/x.txt", "--out", &out, "--steps", "1"]);
    assert!(e.contains("/nonexistent/x.txt") && e.contains("does not exist"), "{e}");
    let e = run(&["train", "--set", "train.nope=1", "--out", &out]);
    assert!(e.contains("unknown key"), "{e}");
    let e = run(&["train", "--set", "model.d_v=0", "--out", &out]);
    assert!(e.contains("d_v"), "{e}");
    let e = run(&["train", "--variant", "ddl_x", "--out", &out]);
    assert!(e.contains("unknown variant"), "{e}");
    let e = run(&["eval", "--checkpoint", "/nonexistent/run"]);
    assert!(e.contains("does not exist"), "{e}");
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let e = run(&["train", "--corpus", empty.to_str().unwrap(), "--out", &out]);
    assert!(e.contains("empty"), "{e}");
}

#[test]
fn generate_streams_text_writes_a_trace_and_chat_keeps_context() {
    let dir = tmpdir("gen");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let st = ddl_cmd(&dir)
        .args(["train", "--preset", "tiny", "--variant", "ddl", "--steps", "2", "--corpus", &c, "--out"])
        .arg(&out)
        .args(["--set", "model.d_model=32", "--set", "model.n_layers=1", "--set", "model.n_heads=2"])
        .args(["--set", "model.head_dim=16", "--set", "model.mlp_hidden=85", "--set", "train.batch_size=2"])
        .args(["--set", "train.seq_len=16", "--set", "model.max_seq_len=16", "--set", "train.eval_batches=1"])
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    // 40 tokens through a context of 16: the window slides instead of failing.
    let trace = dir.join("trace.safetensors");
    let g = ddl_cmd(&dir)
        .args(["generate", "--checkpoint"])
        .arg(&out)
        .args(["--prompt", "First Citizen:", "--max-tokens", "40", "--temperature", "0", "--trace"])
        .arg(&trace)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&g.stdout).to_string();
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    assert!(text.starts_with("First Citizen:") && text.chars().count() >= "First Citizen:".len() + 40, "{text:?}");
    let bytes = std::fs::read(&trace).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let beta = st.tensor("beta").unwrap();
    assert_eq!(beta.shape(), &[40, 2], "40 tokens × 2 sublayers");
    let k = st.tensor("k").unwrap();
    assert_eq!(k.shape(), &[40, 2, 32]);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trace.with_extension("json")).unwrap()).unwrap();
    assert_eq!(summary["tokens"].as_array().unwrap().len(), 40);
    assert!(summary["regime_counts"][0]["projection"].is_u64());
    // The sublayers as --intervene and `eval --betas` name them.
    assert_eq!(summary["sublayers"], serde_json::json!(["block0.attn", "block0.mlp"]));
    // Each token's score as `--logprobs 5 --json` gives it: log p and rank, the five likeliest
    // (ids in the safetensors, with texts in the summary).
    let g = ddl_cmd(&dir)
        .args(["generate", "--checkpoint"])
        .arg(&out)
        .args(["--prompt", "First Citizen:", "--max-tokens", "40", "--temperature", "0", "--json", "--logprobs", "5"])
        .output()
        .unwrap();
    let scored: serde_json::Value = serde_json::from_slice(&g.stdout).unwrap();
    let tensor = |name: &str| -> Vec<f32> {
        st.tensor(name).unwrap().data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    };
    let (lp, rank, top_ids) = (tensor("logprob"), tensor("rank"), tensor("top_ids"));
    assert_eq!((lp.len(), top_ids.len()), (40, 200));
    for (i, s) in scored["logprobs"].as_array().unwrap().iter().enumerate() {
        assert!((lp[i] as f64 - s["logprob"].as_f64().unwrap()).abs() < 1e-5, "token {i}: {} vs {s}", lp[i]);
        assert_eq!(rank[i] as u64, s["rank"].as_u64().unwrap());
        let ids: Vec<u64> = s["top"].as_array().unwrap().iter().map(|a| a["id"].as_u64().unwrap()).collect();
        assert_eq!(top_ids[i * 5..i * 5 + 5].iter().map(|&x| x as u64).collect::<Vec<_>>(), ids);
        assert_eq!(summary["tokens"][i]["top"], s["top"], "token {i}");
    }
    // Greedy decoding is deterministic.
    let g2 = ddl_cmd(&dir)
        .args(["generate", "--checkpoint"])
        .arg(&out)
        .args(["--prompt", "First Citizen:", "--max-tokens", "40", "--temperature", "0"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&g2.stdout), text);
    // --samples: each sample is what its seed gives alone, headed by it.
    let run_gen = |args: &[&str]| {
        let o = ddl_cmd(&dir)
            .args(["generate", "--checkpoint"])
            .arg(&out)
            .args(["--prompt", "First", "--max-tokens", "12"])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let both = run_gen(&["--samples", "2", "--seed", "3"]);
    let expected = format!(
        "--- sample 1 of 2 (--seed 3) ---\n{}--- sample 2 of 2 (--seed 4) ---\n{}",
        run_gen(&["--seed", "3"]),
        run_gen(&["--seed", "4"])
    );
    assert_eq!(both, expected);
    // --json --logprobs: each token's log-probability is the model's teacher-forced one (through
    // a slide of the context of 16: 5 + 12 tokens), its rank and alternatives agree with it; the
    // text is the streamed one's.
    let lines = run_gen(&["--seed", "5", "--samples", "2", "--json", "--logprobs", "3"]);
    let gpu = ddl::testing::gpu();
    let (model, tok) = ddl::generate::load_for_inference(&gpu, &out).unwrap();
    let prompt = tok.encode("First").unwrap();
    let lines: Vec<serde_json::Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    for (i, j) in lines.iter().enumerate() {
        let ids: Vec<u32> = j["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
        assert_eq!(
            (j["sample"].as_u64(), j["seed"].as_u64(), j["stop"].as_str()),
            (Some(i as u64 + 1), Some(5 + i as u64), Some("length"))
        );
        assert_eq!(ids.len(), 12);
        assert_eq!(j["text"].as_str().unwrap(), tok.decode(&ids).unwrap());
        let (t, seed) = (j["text"].as_str().unwrap(), (5 + i).to_string());
        let end = if t.ends_with('\n') { "" } else { "\n" };
        assert_eq!(run_gen(&["--seed", &seed]), format!("First{t}{end}"));
        let want = ddl::generate::continuation_logprobs(&model, &prompt, &ids, None, &[]).unwrap();
        let lp = j["logprobs"].as_array().unwrap();
        for (k, (s, w)) in lp.iter().zip(&want).enumerate() {
            let got = s["logprob"].as_f64().unwrap();
            assert!((got - w).abs() < 1e-4, "token {k}: {got} against teacher-forced {w}");
            let top = s["top"].as_array().unwrap();
            let top_lp: Vec<f64> = top.iter().map(|a| a["logprob"].as_f64().unwrap()).collect();
            assert!(top.len() == 3 && top_lp.windows(2).all(|w| w[0] >= w[1]), "{s}");
            let rank = s["rank"].as_u64().unwrap() as usize;
            assert_eq!(rank == 1, (got - top_lp[0]).abs() < 1e-12, "{s}");
            if rank <= 3 {
                assert_eq!(top[rank - 1]["id"], s["id"], "{s}");
            }
        }
    }
    let gen_prompt = |prompt: &str, args: &[&str]| {
        let o =
            ddl_cmd(&dir).args(["generate", "--checkpoint"]).arg(&out).args(["--prompt", prompt]).args(args).output();
        let o = o.unwrap();
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // --score-prompt: the prompt's own tokens, each as the prefill of a generation scores it (a
    // prompt within the context: the Generator's prompt traces), before the continuation's.
    let short = "First Citizen:";
    let j: serde_json::Value = serde_json::from_str(
        gen_prompt(short, &["--json", "--logprobs", "3", "--score-prompt", "--max-tokens", "2"]).trim(),
    )
    .unwrap();
    let sampler = ddl::generate::Sampler::new(ddl::generate::SamplerConfig::default());
    let ids = tok.encode(short).unwrap();
    let g = ddl::generate::Generator::new(&model, &tok, &ids, sampler, true).unwrap();
    let ps = j["prompt_logprobs"].as_array().unwrap();
    assert_eq!(ps.len(), ids.len() - 1, "{j}");
    for (k, (s, t)) in ps.iter().zip(&g.prompt_traces()[1..]).enumerate() {
        let want = t.score.as_ref().unwrap();
        let got = s["logprob"].as_f64().unwrap();
        assert!((got - want.logprob).abs() < 1e-5, "prompt token {}: {got} against the prefill's {want:?}", k + 1);
        assert_eq!((s["id"].as_u64(), s["rank"].as_u64()), (Some(ids[k + 1] as u64), Some(want.rank as u64)));
        let top: Vec<u64> = s["top"].as_array().unwrap().iter().map(|a| a["id"].as_u64().unwrap()).collect();
        assert_eq!(top, want.top[..3].iter().map(|a| a.id as u64).collect::<Vec<_>>(), "the trace keeps five");
    }
    assert_eq!(j["logprobs"].as_array().unwrap().len(), 2);
    // A prompt longer than the context of 16: every token after the first, in the contexts
    // generation gives a continuation (slides of half the context); the table numbers them by
    // place and comes before the text.
    let long = "First Citizen:\nBefore we proceed";
    let ids = tok.encode(long).unwrap();
    assert!(ids.len() > 16);
    let j: serde_json::Value = serde_json::from_str(
        gen_prompt(long, &["--json", "--logprobs", "1", "--score-prompt", "--max-tokens", "1"]).lines().next().unwrap(),
    )
    .unwrap();
    let want = ddl::generate::continuation_logprobs(&model, &ids[..1], &ids[1..], None, &[]).unwrap();
    let got: Vec<f64> =
        j["prompt_logprobs"].as_array().unwrap().iter().map(|s| s["logprob"].as_f64().unwrap()).collect();
    assert_eq!(got.len(), want.len());
    assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-9), "{got:?} vs {want:?}");
    let shown = gen_prompt(long, &["--logprobs", "0", "--score-prompt", "--max-tokens", "1"]);
    let (table, rest) = shown.split_once("\nFirst Citizen:\nBefore we proceed").unwrap();
    assert!(table.starts_with("--- the prompt's log-probabilities under the model"), "{shown}");
    let rows: Vec<&str> = table.lines().skip(2).take_while(|l| !l.starts_with("mean log p")).collect();
    assert_eq!(rows.len(), ids.len() - 1, "{table}");
    assert!(rows[0].trim_start().starts_with("2 ") && table.contains(&format!("over {} tokens", ids.len() - 1)));
    assert!(rest.contains("--- log-probabilities under the model"), "{shown}");
    // A one-token prompt has nothing to score: said so.
    let one = gen_prompt("F", &["--logprobs", "0", "--score-prompt", "--max-tokens", "1"]);
    assert!(one.contains("no token to score: the prompt is one token"), "{one}");
    // Greedy: every token the most likely; the text's table has a row per token.
    let greedy: serde_json::Value =
        serde_json::from_str(&run_gen(&["--temperature", "0", "--json", "--logprobs", "1"])).unwrap();
    for s in greedy["logprobs"].as_array().unwrap() {
        assert!(s["rank"] == 1 && s["top"][0]["id"] == s["id"], "{s}");
    }
    let stop: String = greedy["text"].as_str().unwrap().chars().nth(2).unwrap().to_string();
    let stop = if stop == "\n" { "\\n".to_string() } else { stop };
    let cut: serde_json::Value =
        serde_json::from_str(&run_gen(&["--temperature", "0", "--json", "--stop", &stop])).unwrap();
    let n = cut["tokens"].as_array().unwrap().len();
    assert!(cut["stop"] == "stop_text" && (1..=3).contains(&n) && cut.get("logprobs").is_none(), "{cut}");
    let shown = run_gen(&["--logprobs", "0"]);
    let table = shown.split_once("--- log-probabilities under the model").map(|t| t.1).unwrap_or_default();
    let rows = table.lines().skip(2).take_while(|l| !l.starts_with("mean log p")).count();
    assert!(rows == 12 && table.contains("over 12 tokens") && !table.contains("top "), "{shown}");
    // --lens: per token, the model's head at each state; the last state's is the model's own
    // teacher-forced log p (through the context's slides: 5 + 12 tokens in a context of 16), a
    // state's rank 1 where its likeliest is the token; with every write off, every state reads
    // X_0 (the same numbers); the table after the text.
    let j: serde_json::Value = serde_json::from_str(run_gen(&["--seed", "5", "--json", "--lens"]).trim()).unwrap();
    let ids: Vec<u32> = j["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
    let states: Vec<&str> = j["lens"]["states"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert_eq!(states, ["embedding", "block0.attn", "block0.mlp"]);
    let rows = j["lens"]["tokens"].as_array().unwrap();
    assert_eq!(rows.len(), ids.len());
    let want = ddl::generate::continuation_logprobs(&model, &prompt, &ids, None, &[]).unwrap();
    for (k, row) in rows.iter().enumerate() {
        let row = row.as_array().unwrap();
        assert_eq!(row.len(), 3);
        let own = row[2]["logprob"].as_f64().unwrap();
        assert!((own - want[k]).abs() < 1e-4, "token {k}: the lens's output {own} against teacher-forced {}", want[k]);
        for s in row {
            let (lp, top_lp) = (s["logprob"].as_f64().unwrap(), s["top_logprob"].as_f64().unwrap());
            assert_eq!(s["rank"] == 1, s["top"] == ids[k], "token {k}: {s}");
            assert!(lp <= top_lp + 1e-6 && s["entropy"].as_f64().unwrap() >= 0.0, "token {k}: {s}");
            assert_eq!(s["top_text"].as_str().unwrap(), tok.decode(&[s["top"].as_u64().unwrap() as u32]).unwrap());
        }
    }
    assert_ne!(rows[0][0], rows[0][2], "the embedding's head is not the model's");
    let off: serde_json::Value =
        serde_json::from_str(run_gen(&["--seed", "5", "--json", "--lens", "--intervene", "all:write=0"]).trim())
            .unwrap();
    for row in off["lens"]["tokens"].as_array().unwrap() {
        assert!(row[0] == row[1] && row[1] == row[2], "every write off: every state is X_0: {row}");
    }
    let shown = run_gen(&["--seed", "5", "--lens"]);
    let table = shown.split_once("--- logit lens:").map(|t| t.1).unwrap_or_default();
    let trows: Vec<&str> = table.lines().skip(2).take_while(|l| !l.starts_with("mean log p")).collect();
    assert_eq!(trows.len(), 12, "{shown}");
    assert!(table.contains("mean log p per state (12 tokens)") && table.contains("block0.mlp"), "{shown}");
    assert!(shown.contains("after each sublayer's write"), "{shown}");
    let o = ddl_cmd(&dir)
        .args(["generate", "--checkpoint"])
        .arg(&out)
        .args(["--prompt", "First", "--lens", "--intervene", "block0.attn:k=mean"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("--lens") && e.contains("k=mean") && o.stdout.is_empty(), "{e}");
    // Invalid sampling values and an empty prompt are clear errors.
    for (args, want) in [
        (vec!["--samples", "2", "--temperature", "0"], "greedy decoding gives the same text"),
        (vec!["--samples", "2", "--trace", "t.safetensors"], "a trace holds one generation"),
        (vec!["--samples", "0"], "--samples"),
        (vec!["--temperature=-1"], "--temperature"),
        (vec!["--top-p=1.5"], "--top-p"),
        (vec!["--max-tokens", "0"], "--max-tokens"),
        (vec!["--logprobs=-1"], "--logprobs"),
        (vec!["--json", "--compare", "--intervene", "all:beta=0"], "cannot be used with"),
        (vec!["--score-prompt"], "--logprobs"),
    ] {
        let o = ddl_cmd(&dir)
            .args(["generate", "--checkpoint"])
            .arg(&out)
            .args(["--prompt", "a"])
            .args(&args)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && e.contains(want), "{args:?}: {e}");
    }
    let o = ddl_cmd(&dir).args(["generate", "--checkpoint"]).arg(&out).args(["--prompt", ""]).output().unwrap();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("empty"));
    // Chat: two turns, a setting, a reset, quit.
    let mut child = ddl_cmd(&dir)
        .args(["chat", "--checkpoint"])
        .arg(&out)
        .args(["--max-tokens", "5", "--temperature", "0"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().unwrap();
        stdin.write_all(b"First\n/set temperature 0.5\n/set nope 1\nSecond\n/reset\n/quit\n").unwrap();
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("(temperature = 0.5)")
            && err.contains("unknown setting 'nope'")
            && err.contains("context cleared"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).lines().count() >= 2, "a reply per turn");
}

#[test]
fn ctrl_c_sigterm_and_a_closed_pipe_save_a_checkpoint_and_exit_cleanly_and_the_run_resumes() {
    let dir = tmpdir("sigint");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let args = |steps: &str| -> Vec<String> {
        let mut v: Vec<String> =
            ["train", "--preset", "tiny", "--variant", "baseline", "--steps", steps, "--corpus", &c]
                .iter()
                .map(|s| s.to_string())
                .collect();
        for kv in
            ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.head_dim=16", "model.mlp_hidden=85"]
        {
            v.push("--set".into());
            v.push(kv.into());
        }
        for kv in ["train.batch_size=2", "train.seq_len=16", "train.eval_batches=1", "train.eval_every=0"] {
            v.push("--set".into());
            v.push(kv.into());
        }
        v
    };
    let started = |out: &Path| {
        // Wait until a few steps are logged.
        let metrics = out.join("metrics.jsonl");
        let t0 = std::time::Instant::now();
        while std::fs::read_to_string(&metrics).map(|s| s.lines().count()).unwrap_or(0) < 3 {
            assert!(t0.elapsed().as_secs() < 120, "training did not start");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    // A long run into `out`, its stderr piped, once it has logged a few steps.
    let spawn = |out: &Path| {
        let child = ddl_cmd(&dir)
            .args(args("100000"))
            .arg("--out")
            .arg(out)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        started(out);
        child
    };
    // Ctrl-C while the run starts (a slow start injected): it ends at once, saying so, and
    // leaves neither the folder it made nor its lock.
    let early = dir.join("early");
    let child = ddl_cmd(&dir)
        .args(args("100000"))
        .arg("--out")
        .arg(&early)
        .env("DDL_FAULT_SLOW_START", "60")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !early.join(".ddl-lock").exists() {
        assert!(t0.elapsed().as_secs() < 60, "the run did not take its lock");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("while the run was starting: nothing was trained"), "{err}");
    assert!(!early.exists(), "a run stopped while starting left {}", early.display());

    let child = spawn(&out);
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    // The same interruption delivered again at once (GNU timeout signals the process, then its
    // group) is not a second Ctrl-C: the run still saves (it stopped without saving).
    std::thread::sleep(std::time::Duration::from_millis(3));
    let _ = Command::new("kill").args(["-INT", &pid]).status();
    let o = child.wait_with_output().unwrap();
    let (status, err) = (o.status, String::from_utf8_lossy(&o.stderr));
    // Saved, then the status of a program Ctrl-C ended (a script's next command must not run).
    assert_eq!(status.code(), Some(130), "Ctrl-C must save and exit with 130, got {status:?}: {err}");
    assert!(!err.contains("second Ctrl-C"), "{err}");
    assert!(err.contains("interrupted (Ctrl-C) at step"), "{err}");
    // With the command that continues it (it said where the checkpoint was only).
    let go_on = format!(
        "checkpoint saved in {}; `ddl train --resume {}` continues it to step 100000",
        out.display(),
        ddl::shell_word(&out)
    );
    assert!(err.contains(&go_on), "{err}");
    assert!(!out.join(".ddl-lock").exists(), "the lock goes with the process");
    let ck = ddl::train::checkpoint::load(&out, true).unwrap();
    assert!(ck.step >= 3, "checkpoint at step {}", ck.step);
    // The interrupted run resumes from its checkpoint.
    let o = ddl_cmd(&dir).args(args(&(ck.step + 2).to_string())).arg("--resume").arg(&out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(ddl::train::checkpoint::load(&out, false).unwrap().step, ck.step + 2);
    // Its first line says where it continues from.
    assert!(err.contains(&format!(", resuming at step {} of {}\n", ck.step, ck.step + 2)), "{err}");

    // SIGTERM (`kill`, `timeout`, Slurm, systemd) stops as cleanly: saved, 143.
    let term = dir.join("term");
    let child = spawn(&term);
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(143), "SIGTERM must save and exit with 143: {err}");
    assert!(err.contains("SIGTERM: stopping cleanly") && err.contains("interrupted (SIGTERM) at step"), "{err}");
    assert!(!term.join(".ddl-lock").exists(), "the lock goes with the process");
    assert!(ddl::train::checkpoint::load(&term, true).unwrap().step >= 3);

    // Its output's reader gone (`ddl train … 2>&1 | head -2`): saved, 141, not killed by SIGPIPE
    // between checkpoints.
    let pipe = dir.join("pipe");
    let mut child = spawn(&pipe);
    drop(child.stderr.take());
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed().as_secs() < 120, "the run went on after its stderr's reader left");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(141), "a closed output pipe must save and exit with 141, got {status:?}");
    assert!(!pipe.join(".ddl-lock").exists(), "the lock goes with the process");
    assert!(ddl::train::checkpoint::load(&pipe, true).unwrap().step >= 3);
}

/// Ctrl-C or SIGTERM during `ddl train --sample N`'s sample (the run saved before it) stops the
/// sample at once, saying so, with 130 / 143 (the first was ignored: the training's clean stop
/// was still listening, and sampling never looked).
#[test]
fn ctrl_c_during_the_sample_after_training_stops_it_at_once() {
    use std::io::BufRead;
    let dir = tmpdir("sigint-sample");
    let c = ddl::testing::small_corpus(&dir);
    for (signal, status, name) in [("-INT", 130, "Ctrl-C"), ("-TERM", 143, "SIGTERM")] {
        let out = dir.join(format!("run{signal}"));
        let mut child = ddl_cmd(&dir)
            .args(["train", "--variant", "ddl", "--steps", "2", "--sample", "1000000", "--corpus", &c])
            .args(["--set", "model.d_model=32", "--set", "model.n_layers=1", "--set", "model.n_heads=2"])
            .args(["--set", "model.head_dim=16", "--set", "model.mlp_hidden=85", "--set", "train.batch_size=2"])
            .args(["--set", "train.seq_len=16", "--set", "train.eval_batches=1", "--out"])
            .arg(&out)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        assert!(lines.any(|l| l.unwrap().contains("--- sample ---")), "no sample was started");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let t0 = std::time::Instant::now();
        assert!(Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap().success());
        // (Read to its end: a closed stdout would stop the process as SIGPIPE.)
        let rest = std::thread::spawn(move || lines.count());
        let o = child.wait_with_output().unwrap();
        rest.join().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(t0.elapsed().as_secs() < 30, "the sample went on after {name}: {err}");
        assert_eq!(o.status.code(), Some(status), "{err}");
        assert!(err.contains(&format!("{name}: stopped the sample (the run was saved before it)")), "{err}");
        assert_eq!(ddl::train::checkpoint::load(&out, false).unwrap().step, 2);
    }
}

/// Ctrl-C or SIGTERM during `ddl generate` stops it at the next token: the text so far stays
/// printed, stderr says what stopped it after how many tokens, the status is 130 / 143 (as `ddl
/// train`'s), and a `--trace` of the cut generation is not written (the process died at once,
/// without a word).
#[test]
fn ctrl_c_during_generate_stops_at_the_next_token_and_says_so() {
    use std::io::Read;
    let dir = tmpdir("sigint-generate");
    let c = ddl::testing::small_corpus(&dir);
    let ck = micro_run(&dir, "ck", "ddl", &c, 1);
    for (signal, status, name) in [("-INT", 130, "Ctrl-C"), ("-TERM", 143, "SIGTERM")] {
        let trace = dir.join(format!("trace{signal}.bin"));
        let mut child = ddl_cmd(&dir)
            .args(["generate", "--checkpoint", ck.to_str().unwrap(), "--prompt", "To be", "--max-tokens"])
            .args(["1000000", "--trace", trace.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Some tokens after the prompt, then the signal.
        let mut stdout = child.stdout.take().unwrap();
        let mut got = vec![0u8; 16];
        stdout.read_exact(&mut got).unwrap();
        let t0 = std::time::Instant::now();
        assert!(Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap().success());
        let rest = std::thread::spawn(move || {
            let mut rest = Vec::new();
            stdout.read_to_end(&mut rest).unwrap();
            rest
        });
        let o = child.wait_with_output().unwrap();
        got.extend(rest.join().unwrap());
        let (out, err) = (String::from_utf8_lossy(&got), String::from_utf8_lossy(&o.stderr));
        assert!(t0.elapsed().as_secs() < 30, "the generation went on after {name}: {err}");
        assert_eq!(o.status.code(), Some(status), "{err}");
        assert!(out.starts_with("To be") && out.ends_with('\n'), "{out:?}");
        let said = err.lines().find(|l| l.contains("stopped the generation")).unwrap_or_default();
        assert!(said.starts_with(&format!("{name}: stopped the generation after ")), "{err}");
        // The count said is the tokens printed (a char model's: one character each; the line
        // ended after them unless the last was a newline), at least the 11 read past the prompt.
        let n: usize = said.split("after ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        let shown = out["To be".len()..].chars().count();
        assert!(n >= 11 && (n == shown || n + 1 == shown), "{said}: {shown} characters printed");
        assert!(said.contains("no trace written"), "{err}");
        let traces: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(&format!("trace{signal}")))
            .collect();
        assert!(traces.is_empty(), "a trace of the cut generation: {traces:?}");
    }
}

/// Ctrl-C while `--corpus` is tokenised into the shard cache (a large corpus takes a while; the
/// process died at once and left the half-made set): exit 130, said so, nothing left in the cache
/// or in --out. A maker killed outright leaves its folder, which the next maker of any corpus
/// removes.
#[test]
fn ctrl_c_while_the_corpus_is_tokenised_leaves_nothing() {
    use std::io::{BufRead, Write};
    let dir = tmpdir("sigint-corpus");
    let big = dir.join("big.txt");
    {
        // Over 64 MiB: the size that says it is being tokenised (the line waited for).
        let mut f = std::io::BufWriter::new(std::fs::File::create(&big).unwrap());
        let text = ddl::train::data::embedded_corpus();
        for _ in 0..(66 << 20) / text.len() + 1 {
            f.write_all(text.as_bytes()).unwrap();
        }
    }
    let out = dir.join("run");
    let shards = dir.join("cache/shards");
    std::fs::create_dir_all(&shards).unwrap();
    // A killed maker's folder (of another corpus).
    let stale = shards.join(format!(".0123abcd.make-{}.0", (1u32 << 22) + 5));
    std::fs::create_dir_all(&stale).unwrap();
    let mut child = ddl_cmd(&dir)
        .args(["train", "--steps", "1", "--no-autotune", "--corpus", big.to_str().unwrap()])
        .arg("--out")
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        said.push(line.clone());
        if line.contains("tokenising --corpus") {
            break;
        }
    }
    assert!(said.last().is_some_and(|l| l.contains("tokenising --corpus")), "{said:?}");
    assert!(!stale.exists(), "the killed maker's folder is left");
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    said.extend(lines.map(|l| l.unwrap()));
    let status = child.wait().unwrap();
    let said = said.join("\n");
    assert_eq!(status.code(), Some(130), "{said}");
    assert!(said.contains("interrupted (Ctrl-C) while tokenising --corpus"), "{said}");
    let left: Vec<_> = std::fs::read_dir(&shards).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "left in the cache: {left:?}");
    let in_out: Vec<_> =
        std::fs::read_dir(&out).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(in_out.is_empty(), "left in --out: {in_out:?}");
}

/// A tiny model of `variant` (the benchmark tests' size).
fn bench_cfg(variant: Variant) -> ddl::model::ModelConfig {
    let mut cfg = ddl::model::ModelConfig::preset("tiny", variant).unwrap();
    (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.head_dim, cfg.mlp_hidden) = (32, 2, 2, 16, 85);
    cfg
}

/// A device of the test's own, so the runtime's counters (submits, allocations, peak bytes) see
/// only what the test runs.
fn own_gpu() -> std::sync::Arc<ddl::gpu::Gpu> {
    let opts = ddl::gpu::GpuOptions::from_env().unwrap();
    ddl::gpu::Gpu::new(&opts).unwrap_or_else(|e| panic!("GPU tests need an adapter and none could be opened: {e}"))
}

#[test]
fn the_training_benchmark_counts_one_submit_one_readback_no_allocations_and_a_peak_within_the_plan() {
    use ddl::model::Precision::{F16, F32};
    for (v, f16, p) in [
        (Variant::Baseline, false, F32),
        (Variant::Ddl, false, F32),
        (Variant::DdlCcec, false, F32),
        (Variant::Ddl, true, F32),
        (Variant::DdlVmap, false, F16),
    ] {
        let gpu = own_gpu();
        let mut rows = Vec::new();
        let st = Storage { state_f16: f16, precision: p, ..Default::default() };
        // MFU against the measured rate for one of them (on lavapipe 7 s of 1024³ products each
        // time), against a stated peak (--peak-tflops) for the others.
        let peak = ((v, f16) != (Variant::Ddl, false)).then_some(0.5);
        ddl::bench::train_rows(&gpu, &bench_cfg(v), 2, 16, 3, true, st, peak, |r| rows.push(r.0)).unwrap();
        let r = &rows[0];
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{v:?}: field {k} missing in {r}"));
        let mfu = f("model_gflop_per_s") / f("ceiling_gflop_per_s");
        assert!((f("mfu") - mfu).abs() <= 1e-12 * mfu, "{v:?}: {r}");
        match peak {
            Some(t) => assert_eq!(
                (r["ceiling"].as_str(), f("ceiling_gflop_per_s"), r["ceiling_up_to"].is_null()),
                (Some("stated"), t * 1e3, true)
            ),
            // lavapipe's 1024³ product takes far more than 20 ms: measured at 1024³ alone.
            None => assert_eq!(
                (r["ceiling"].as_str(), r["ceiling_up_to"].as_u64()),
                (Some("measured"), Some(1024)),
                "{v:?}"
            ),
        }
        assert_eq!(r["bench"], "train");
        assert_eq!(
            (f("submits_per_step"), f("readbacks_per_step"), f("allocs_per_step")),
            (1.0, 1.0, 0.0),
            "{v:?}: {r}"
        );
        let peak = f("peak_over_plan");
        assert!((0.9..=1.1).contains(&peak), "{v:?}: peak {peak}× the plan");
        assert!(f("step_ms") > 0.0 && f("tok_per_s") > 0.0 && f("mfu") > 0.0 && f("best_step_ms") <= f("step_ms"));
        assert!(f("loss_init").is_finite() && f("loss_last").is_finite());
        // f16 precision implies f16 states where the variant has them (ddl_vmap at d_v = 4).
        assert_eq!((r["precision"].as_str(), r["state_f16"].as_bool()), (Some(p.name()), Some(f16 || p == F16)));
        // --dispatches: one row per dispatch of the profiled step, in order.
        let listed: Vec<_> = rows[1..].iter().filter(|r| r["bench"] == "train_dispatch").collect();
        assert_eq!(listed.len() as u64, r["dispatches_per_step"].as_u64().unwrap(), "{v:?}");
        assert!(listed.iter().enumerate().all(|(i, d)| d["index"].as_u64() == Some(i as u64)));
        // The profiled step's GPU timeline (lavapipe has timestamps): a span covering the
        // kernels' starts, the idle time between dispatches within it.
        let (span, idle) = (f("gpu_span_ms"), f("gpu_idle_ms"));
        assert!(span > 0.0 && (0.0..=span).contains(&idle), "{v:?}: span {span}, idle {idle}");
        let last = listed.iter().map(|d| d["start_ms"].as_f64().expect("a start per dispatch")).fold(0.0, f64::max);
        assert!(last <= span && listed[0]["start_ms"].as_f64() == Some(0.0), "{v:?}: last start {last}, span {span}");
        // The blocked attention's products are split apart from the linear layers' (the same
        // kernels) as `attention:matmul::…`, and count as matmul time; its softmax steps keep
        // their own names.
        let split = r["split_ms"].as_object().unwrap();
        assert!(split.keys().any(|k| k.starts_with("attention:matmul::")), "{v:?}: {split:?}");
        assert!(split.keys().any(|k| k.starts_with("matmul::")), "{v:?}: the linear layers' products");
        assert!(split.keys().any(|k| k.starts_with("attention_rows::")), "{v:?}: {split:?}");
        assert!(listed.iter().any(|d| d["kernel"].as_str().unwrap().starts_with("attention:matmul[")));
        let mm: f64 = split
            .iter()
            .filter(|(k, _)| k.starts_with("matmul::") || k.starts_with("attention:matmul::"))
            .map(|(_, x)| x.as_f64().unwrap())
            .sum();
        assert!((mm / f("profiled_ms") - f("matmul_share")).abs() < 1e-9, "{v:?}: {mm} of {}", f("profiled_ms"));
        // The products' FLOPs and rates per key: every matmul dispatch carries its FLOPs, the
        // rest none; each key's rate is its GFLOP over its ms.
        let (gflop, rate) = (r["split_gflop"].as_object().unwrap(), r["split_tflop_per_s"].as_object().unwrap());
        assert!(gflop.keys().all(|k| k.starts_with("matmul::") || k.starts_with("attention:matmul::")), "{gflop:?}");
        assert!(gflop.keys().any(|k| k.starts_with("matmul::")), "{v:?}: the linear layers' products");
        assert!(gflop.keys().any(|k| k.starts_with("attention:matmul::")), "{v:?}: {gflop:?}");
        for (k, g) in gflop {
            let (g, ms) = (g.as_f64().unwrap(), split[k].as_f64().unwrap());
            assert!(
                g > 0.0 && (rate[k].as_f64().unwrap() - g / ms).abs() <= 1e-9 * g / ms,
                "{v:?} {k}: {g} GFLOP, {ms} ms"
            );
        }
        for d in &listed {
            let name = d["kernel"].as_str().unwrap();
            let is_mm = name.starts_with("matmul[") || name.starts_with("attention:matmul[");
            assert_eq!(d["gflop"].as_f64().is_some_and(|g| g > 0.0), is_mm, "{v:?}: {d}");
        }
        let listed_gflop: f64 = listed.iter().filter_map(|d| d["gflop"].as_f64()).sum();
        let split_total: f64 = gflop.values().map(|g| g.as_f64().unwrap()).sum();
        assert!((listed_gflop - split_total).abs() <= 1e-9 * split_total, "{listed_gflop} / {split_total}");
    }
}

#[test]
fn the_compared_training_benchmark_alternates_blocks_and_reports_their_ratios() {
    let gpu = ddl::testing::gpu();
    let mut rows = Vec::new();
    ddl::bench::train_compare_rows(
        &gpu,
        None,
        &bench_cfg(Variant::Ddl),
        &bench_cfg(Variant::Baseline),
        2,
        16,
        3,
        Storage::default(),
        Storage::default(),
        |r| rows.push(r.0),
    )
    .unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("field {k} missing in {r}"));
    assert_eq!(
        (r["bench"].as_str(), r["variant"].as_str(), r["against"].as_str()),
        (Some("train_compare"), Some("ddl"), Some("baseline"))
    );
    assert_eq!(r["blocks"], 3);
    // Two steps of each side per block: the best step is at most the median.
    assert!(f("best_step_ms") > 0.0 && f("best_step_ms") <= f("median_step_ms"));
    assert!(f("against_best_step_ms") > 0.0 && f("against_best_step_ms") <= f("against_median_step_ms"));
    assert!(f("ratio_min_block") > 0.0 && f("ratio_min_block") <= f("ratio_median_block"));
    assert!(f("ratio_median_block") <= f("ratio_max_block"));
    assert!((f("ratio_best") - f("best_step_ms") / f("against_best_step_ms")).abs() < 1e-12);
    assert!(r["losses_identical"].is_null() && r["against_forms"].is_null(), "two variants: {r}");
    // The same variant against other forms (`--against-forms`): forms that give the same bits
    // train to the same losses on both sides, and the row says so; forms that do not, say not.
    for (change, same) in [("shader_checks", true), ("attention", false)] {
        let other = gpu.with_forms(|f| match change {
            "shader_checks" => f.shader_checks = !f.shader_checks,
            // The tiled kernel's online softmax against the blocked form's rows.
            _ => f.attention = ddl::kernels::forms::AttentionForm::Tiled,
        });
        assert_ne!(gpu.forms.attention, ddl::kernels::forms::AttentionForm::Tiled);
        let mut rows = Vec::new();
        let cfg = bench_cfg(Variant::Ddl);
        ddl::bench::train_compare_rows(
            &gpu,
            Some((&other, change)),
            &cfg,
            &cfg,
            2,
            16,
            1,
            Storage::default(),
            Storage::default(),
            |r| rows.push(r.0),
        )
        .unwrap();
        let r = &rows[0];
        assert_eq!((r["against_forms"].as_str(), r["losses_identical"].as_bool()), (Some(change), Some(same)), "{r}");
    }
    // In f16, other forms are compared in f16 on both sides (`--precision f16 --against-forms`;
    // the f32 other side of `--against` alone would compare f16 with f32): ψ stored in f16 or
    // rounded as read, the same bits.
    let other = gpu.with_forms(|f| f.f16_acts = false);
    let cfg = bench_cfg(Variant::DdlVmap);
    let f16 = Storage { precision: ddl::model::Precision::F16, ..Storage::default() };
    let compare = |og: Option<(&std::sync::Arc<ddl::gpu::Gpu>, &str)>, st: Storage| {
        let mut rows = Vec::new();
        let against = ddl::bench::against_storage(st, og.is_some(), Storage::default());
        ddl::bench::train_compare_rows(&gpu, og, &cfg, &cfg, 2, 16, 1, st, against, |r| rows.push(r.0)).unwrap();
        rows.remove(0)
    };
    let r = compare(Some((&other, "f16_acts=0")), f16);
    assert_eq!((r["precision"].as_str(), r["against_precision"].as_str()), (Some("f16"), Some("f16")), "{r}");
    assert_eq!(r["losses_identical"].as_bool(), Some(true), "{r}");
    let r = compare(None, f16);
    assert_eq!((r["precision"].as_str(), r["against_precision"].as_str()), (Some("f16"), Some("f32")), "{r}");
    assert!(r["losses_identical"].is_null(), "f16 against f32: {r}");
    // `--recompute --against ddl_vmap`: the measured side recomputes, the other keeps; the same
    // numerics, so the same bits (the row says so).
    let r = compare(None, Storage { recompute: true, ..Storage::default() });
    assert_eq!((r["recompute"].as_bool(), r["against_recompute"].as_bool()), (Some(true), Some(false)), "{r}");
    assert_eq!(r["losses_identical"].as_bool(), Some(true), "recomputing against keeping: {r}");
}

#[test]
fn the_generation_benchmark_reports_cached_and_recomputed_token_times_per_context() {
    let gpu = ddl::testing::gpu();
    let mut rows = Vec::new();
    ddl::bench::generate_rows(&gpu, &bench_cfg(Variant::Ddl), &[5, 12], 2, |r| rows.push(r.0)).unwrap();
    assert_eq!(rows.len(), 2);
    for (r, ctx) in rows.iter().zip([5, 12]) {
        assert_eq!((r["bench"].as_str(), r["context"].as_u64()), (Some("generate"), Some(ctx)));
        let (c, f) = (r["cached_ms_per_token"].as_f64().unwrap(), r["recompute_ms_per_token"].as_f64().unwrap());
        assert!(c > 0.0 && f > 0.0 && (r["speedup"].as_f64().unwrap() - f / c).abs() < 1e-9, "{r}");
    }
}

#[test]
fn the_matmul_benchmark_times_a_models_products_marks_the_engines_pick_and_times_what_needs_pieces_in_pieces() {
    use ddl::bench::VariantSet;
    let gpu = ddl::testing::gpu();
    let products = ddl::bench::model_matmuls(24, 32, 48, 85, 65);
    assert_eq!(products.len(), 15, "five layers × (forward, dW, dX)");
    let variants = ddl::kernels::matmul::variants_for(&gpu);
    // Every variant: one row each, exactly one of them the engine's pick.
    let mut rows = Vec::new();
    ddl::bench::matmul_rows(&gpu, &products[..1], &VariantSet::All, 1, |r| rows.push(r.0)).unwrap();
    assert_eq!(rows.len(), variants.len());
    for (name, mm) in &products[..1] {
        let mine: Vec<_> = rows.iter().filter(|r| r["case"] == name.as_str()).collect();
        assert_eq!(mine.len(), variants.len(), "{name}");
        assert_eq!(mine.iter().filter(|r| r["auto"] == true).count(), 1, "{name}");
        for r in &mine {
            assert_eq!(
                (r["m"].as_u64(), r["n"].as_u64(), r["k"].as_u64()),
                (Some(mm.m as u64), Some(mm.n as u64), Some(mm.k as u64))
            );
            let g = r["gflop_per_s"].as_f64().unwrap();
            assert!(g.is_finite() && g > 0.0, "{r}");
        }
    }
    // Against other forms (`--against-forms`): each row also times the variant on the other
    // handle, in A B B A blocks.
    let other = gpu.with_forms(|f| f.shader_checks = !f.shader_checks);
    let mut rows = Vec::new();
    ddl::bench::matmul_rows_against(&gpu, Some((&other, "x")), &products[..1], &VariantSet::Auto, 2, |r| {
        rows.push(r.0)
    })
    .unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!((r["against_forms"].as_str(), r["blocks"].as_u64()), (Some("x"), Some(2)), "{r}");
    assert!(r["against_ms"].as_f64().unwrap() > 0.0 && r["ratio_median_block"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["ratio_median_ci95"].is_null(), "no interval from 2 blocks: {r}");
    // A variant the other side's forms do not run (`--against-forms matmul_subgroup=0` and a
    // `…g` variant): a row that says so, not the binding's error about the adapter's subgroups.
    if let Some(g) = variants.iter().find(|v| v.ends_with('g')) {
        let other = gpu.with_forms(|f| f.matmul_subgroup = false);
        let named = VariantSet::Named(vec![g.to_string(), variants[0].to_string()]);
        let mut rows = Vec::new();
        ddl::bench::matmul_rows_against(&gpu, Some((&other, "matmul_subgroup=0")), &products[..1], &named, 1, |r| {
            rows.push(r.0)
        })
        .unwrap();
        assert_eq!(rows.len(), 2, "{rows:?}");
        let skipped = rows.iter().find(|r| r["variant"] == *g).unwrap();
        let why = skipped["skipped"].as_str().unwrap_or_default();
        assert!(why.contains("--against-forms matmul_subgroup=0") && why.contains("--variants"), "{skipped}");
        assert!(rows.iter().any(|r| r["variant"] == variants[0] && r["against_ms"].as_f64().is_some()), "{rows:?}");
    }
    // Only the pick, and a named list.
    let mut rows = Vec::new();
    ddl::bench::matmul_rows(&gpu, &products, &VariantSet::Auto, 1, |r| rows.push(r.0)).unwrap();
    assert_eq!(rows.len(), 15);
    assert!(rows.iter().all(|r| r["auto"] == true && r["ms"].as_f64().unwrap() > 0.0));
    let named = VariantSet::Named(vec![variants[0].to_string()]);
    let mut rows = Vec::new();
    ddl::bench::matmul_rows(&gpu, &products[..2], &named, 1, |r| rows.push(r.0)).unwrap();
    assert!(rows.len() == 2 && rows.iter().all(|r| r["variant"] == variants[0]));
    // On a device whose bindings hold 1 KiB, the LM head's products (65 × 32 floats) are timed
    // as the model runs them, in pieces (one `pieces:N` row each, also against other forms);
    // the small ones still run whole.
    let small = gpu.with_max_storage_binding(1024).unwrap();
    let few = ddl::bench::model_matmuls(4, 8, 8, 8, 65);
    let mut rows = Vec::new();
    ddl::bench::matmul_rows(&small, &few, &VariantSet::Auto, 1, |r| rows.push(r.0)).unwrap();
    assert!(rows.iter().all(|r| r.get("skipped").is_none()), "{rows:?}");
    let pieces: Vec<_> = rows.iter().filter(|r| r.get("pieces").is_some()).collect();
    assert_eq!(pieces.len(), 3, "{rows:?}");
    for r in &pieces {
        let n = r["pieces"].as_u64().unwrap();
        assert!(r["case"].as_str().unwrap().starts_with("lm_head") && n > 1, "{r}");
        assert_eq!(r["variant"].as_str().unwrap(), format!("pieces:{n}"));
        assert!(
            r["auto"] == true && r["ms"].as_f64().unwrap() > 0.0 && r["gflop_per_s"].as_f64().unwrap() > 0.0,
            "{r}"
        );
    }
    assert_eq!(rows.len(), 15);
    let other = small.with_forms(|f| f.shader_checks = !f.shader_checks);
    let mut rows = Vec::new();
    ddl::bench::matmul_rows_against(&small, Some((&other, "x")), &few[few.len() - 3..], &VariantSet::Auto, 2, |r| {
        rows.push(r.0)
    })
    .unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|r| r["against_ms"].as_f64().unwrap() > 0.0 && r.get("pieces").is_some()), "{rows:?}");
    // Over 600 tokens the weight gradients of a narrow model (8 × 8 and the like) are few-tile
    // sums the model splits along K: each gets a `split:P` row after its pick's, timing what the
    // model runs.
    let long = ddl::bench::model_matmuls(600, 8, 8, 8, 12);
    let mut rows = Vec::new();
    ddl::bench::matmul_rows(&gpu, &long, &VariantSet::Auto, 1, |r| rows.push(r.0)).unwrap();
    let split: Vec<_> = rows.iter().filter(|r| r["split"] == true).collect();
    let want: Vec<&str> = long.iter().filter(|(_, mm)| mm.k_pieces(&gpu) > 1).map(|(name, _)| name.as_str()).collect();
    assert!(!want.is_empty() && want.iter().all(|n| n.contains("dW")), "{want:?}");
    assert_eq!(split.iter().map(|r| r["case"].as_str().unwrap()).collect::<Vec<_>>(), want);
    for r in split {
        let pieces: usize = r["variant"].as_str().unwrap().strip_prefix("split:").unwrap().parse().unwrap();
        assert!(pieces > 1 && r["dispatches"].as_u64().unwrap() >= 2 && r["auto"] == false, "{r}");
        assert!(r["gflop_per_s"].as_f64().unwrap() > 0.0, "{r}");
    }
}

#[test]
fn every_kernel_benchmark_runs_at_the_shapes_it_is_given() {
    let gpu = ddl::testing::gpu();
    // Odd sizes, none of them shakespeare-char's.
    let shape = ddl::bench::BenchShape {
        b: 1,
        t: 9,
        d: 36,
        heads: 3,
        head_dim: 12,
        f: 97,
        vocab: 67,
        m: 3,
        kernel: 3,
        params: 5_001,
    };
    let listed = ddl::bench::kernel_case_names(&gpu, &shape).unwrap();
    for (module, f) in ddl::bench::BENCHES {
        let cases = f(&gpu, &shape, &CaseFilter::all()).unwrap_or_else(|e| panic!("{module}: {e}"));
        assert!(!cases.is_empty(), "{module}: no cases");
        // `--list` names exactly the cases built, in order, building none.
        let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
        let mine: Vec<&str> = listed.iter().filter(|(m, _)| m == module).map(|(_, n)| n.as_str()).collect();
        assert_eq!(names, mine, "{module}");
        // A filter keeping nothing builds nothing; one keeping a case builds it (and the others
        // of its group at most).
        let none = [String::from("no such case")];
        assert!(f(&gpu, &shape, &CaseFilter::new(&none)).unwrap().is_empty(), "{module}");
        let last = [names[names.len() - 1].to_string()];
        let kept = f(&gpu, &shape, &CaseFilter::new(&last)).unwrap();
        assert!(kept.iter().any(|c| c.name == last[0]) && kept.len() <= names.len(), "{module}");
        let mut rows = Vec::new();
        ddl::bench::kernel_rows(&gpu, module, cases, 1, 1.0, 1.0, |r| rows.push(r.0))
            .unwrap_or_else(|e| panic!("{module}: {e}"));
        for r in &rows {
            let ms = r["ms"].as_f64().unwrap();
            assert!(ms.is_finite() && ms > 0.0, "{module}: {r}");
            // Rows carry their kernel module apart from the case's name (shape, variant).
            assert_eq!(r["module"], *module, "{r}");
        }
    }
    // A preset's shapes are its ddl model's.
    let s = ddl::bench::BenchShape::preset("small-124m", 8, 1024).unwrap();
    let cfg = ddl::model::ModelConfig::preset("small-124m", Variant::Ddl).unwrap();
    assert_eq!(
        (s.b, s.t, s.d, s.heads, s.head_dim, s.f, s.vocab, s.m, s.kernel),
        (8, 1024, 768, 6, 128, 2048, 50304, 4, 4)
    );
    assert_eq!(s.params, ddl::model::Layout::new(&cfg).total);
    let e = ddl::bench::BenchShape::preset("gpt-9", 1, 1).unwrap_err().to_string();
    assert!(e.contains("unknown preset 'gpt-9'"), "{e}");
}

#[test]
fn the_stop_token_ends_generation_and_is_neither_shown_nor_returned() {
    let dir = tmpdir("stoptok");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    // A one-step model of d = 32 (what it generates does not matter, only where it stops).
    let small = "model.d_model=32 model.n_layers=1 model.n_heads=2 model.head_dim=16 model.mlp_hidden=85 \
                 train.batch_size=2 train.seq_len=16 train.eval_batches=1";
    let mut train = ddl_cmd(&dir);
    train.args(["train", "--variant", "ddl", "--steps", "1", "--corpus", &c, "--out"]).arg(&out);
    for kv in small.split_whitespace() {
        train.args(["--set", kv]);
    }
    let st = train.output().unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let gpu = ddl::testing::gpu();
    let (model, tok) = ddl::generate::load_for_inference(&gpu, &out).unwrap();
    let prompt = tok.encode("First").unwrap();
    let greedy =
        || ddl::generate::Sampler::new(ddl::generate::SamplerConfig { temperature: 0.0, ..Default::default() });
    let run = |stop_token: Option<u32>| {
        let opts = ddl::generate::GenOptions {
            max_tokens: 3,
            stop: Vec::new(),
            stop_token,
            trace: true,
            beta_maps: None,
            k_mean: Vec::new(),
        };
        let mut shown = String::new();
        let (ids, traces) =
            ddl::generate::generate(&model, &tok, &prompt, &opts, &mut greedy(), |t| shown.push_str(t)).unwrap();
        (ids, traces.len(), shown)
    };
    let (free, n, text) = run(None);
    assert_eq!((free.len(), n), (3, 3));
    // Stopping at the second token (when it differs from the first): one token, its text
    // only, one trace.
    if free[1] != free[0] {
        let (ids, n, shown) = run(Some(free[1]));
        assert_eq!(ids, free[..1].to_vec());
        assert_eq!(n, 1);
        assert_eq!(shown, tok.decode(&free[..1]).unwrap());
        assert!(text.starts_with(&shown) && text.len() > shown.len(), "{text:?} vs {shown:?}");
    }
    // Stopping at the first: nothing at all.
    let (ids, n, shown) = run(Some(free[0]));
    assert!(ids.is_empty() && n == 0 && shown.is_empty(), "{ids:?} {shown:?}");
}

#[test]
fn token_ids_outside_the_vocabulary_are_refused_before_the_gpu_sees_them() {
    let gpu = ddl::testing::gpu();
    let mut cfg = ddl::model::ModelConfig::preset("tiny", Variant::Ddl).unwrap();
    (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.head_dim, cfg.mlp_hidden) = (32, 1, 2, 16, 85);
    let model = ddl::model::Model::new(gpu.clone(), cfg.clone(), 5).unwrap();
    let prog = model.forward_program(1, 4).unwrap();
    let v = cfg.vocab_size as i32;
    for bad in [v, v + 100, -1] {
        let e = prog.set_batch(&model, &[0, 1, bad, 2], &[-1; 4]).unwrap_err().to_string();
        assert!(e.contains(&format!("token id {bad} at position 2")) && e.contains(&format!("[0, {v})")), "{e}");
    }
    // Decoding goes through the same check.
    let mut cache = model.decode_cache().unwrap();
    let mut step = model.decode_program(&cache, 1).unwrap();
    let e = step.forward(&model, &[v as u32], &mut cache).unwrap_err().to_string();
    assert!(e.contains("outside the model's vocabulary"), "{e}");
    assert_eq!(cache.pos, 0, "a refused token does not advance the cache");
    prog.set_batch(&model, &[0, 1, v - 1, 2], &[-1; 4]).unwrap();
}

#[test]
fn the_data_benchmark_prepares_draws_and_trains_each_set_and_cleans_up() {
    // At a few MiB (the real one makes ≥ 1 GB): every row is there with finite numbers, each
    // training run wrote its summary.json (read for start-up and memory), and the folder is gone,
    // with the one above it that it made too (`made` was left).
    let dir = tmpdir("benchdata");
    let work = dir.join("made/sets");
    let o = ddl_cmd(&dir)
        .args(["bench", "data", "--mib", "3", "--small-mib", "1", "--steps", "2", "--draws", "5", "--json", "--dir"])
        .arg(&work)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<serde_json::Value> = out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    for set in ["small", "large"] {
        for bench in ["data_prepare", "data_draw", "data_train"] {
            let r = rows
                .iter()
                .find(|r| r["bench"] == bench && r["set"] == set)
                .unwrap_or_else(|| panic!("no {bench} row for the {set} set in {out}"));
            let keys: &[&str] = match bench {
                "data_prepare" => &["shard_mb", "seconds", "mb_per_s", "tokens"],
                "data_draw" => &["open_s", "draw_ms_mean", "draw_ms_max"],
                _ => &["startup_s", "data_open_s", "data_ms_mean", "tokens_per_s", "peak_rss_added_mib", "plan_mib"],
            };
            for k in keys {
                let v = r[k].as_f64().unwrap_or(f64::NAN);
                assert!(v.is_finite() && v >= 0.0, "{bench} {set}: {k} = {v} in {r}");
            }
        }
    }
    let large = rows.iter().find(|r| r["bench"] == "data_prepare" && r["set"] == "large").unwrap();
    assert!(large["shard_mb"].as_f64().unwrap() > 3.0, "{large}");
    assert_eq!(rows.iter().find(|r| r["bench"] == "data_train").unwrap()["steps"], 2);
    assert!(!dir.join("made").exists(), "the benchmark's folder was left behind");
}

#[test]
fn a_sigterm_to_the_data_benchmark_alone_stops_its_training_run_too() {
    // A scheduler's SIGTERM reaches the benchmark, not the `ddl train` it runs (Ctrl-C at a
    // terminal reaches both): the benchmark passes it on, so no run goes on training after it.
    let dir = tmpdir("benchdata-term");
    let work = dir.join("sets");
    let child = ddl_cmd(&dir)
        .args(["bench", "data", "--mib", "2", "--small-mib", "1", "--steps", "100000", "--draws", "2", "--dir"])
        .arg(&work)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let metrics = work.join("small-run/metrics.jsonl");
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(&metrics).is_ok_and(|m| m.lines().count() >= 2) {
        assert!(t0.elapsed().as_secs() < 300, "the small set's training run did not start");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let run_pids = || -> Vec<String> {
        let needle = work.join("small-run").display().to_string();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
                    let c = String::from_utf8_lossy(&c).replace('\0', " ");
                    c.contains(" train ") && c.contains(&needle)
                })
            })
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect()
    };
    assert_eq!(run_pids().len(), 1, "the training run is not seen running");
    let mut child = child;
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    // (Before, it waited for the run's 100000 steps: a minute says it did not stop.)
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed().as_secs() > 60 {
            let _ = child.kill();
            for pid in run_pids() {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
            }
            panic!("the benchmark did not stop within a minute of its SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(143), "{err}");
    assert!(err.contains("bench data: interrupted (SIGTERM)"), "{err}");
    assert_eq!(run_pids(), Vec::<String>::new(), "the training run went on after the benchmark stopped");
    assert!(!work.exists(), "the benchmark's folder was left behind");
}

#[test]
fn in_f16_the_weights_f16_copy_follows_every_optimizer_step() {
    // `--precision f16` reads its weights from an f16 copy of the parameters that the training
    // program's optimizer pass rewrites after AdamW: after each step it must be exactly the
    // updated parameters rounded to nearest, and the loss must still fall.
    use ddl::model::{AdamWConfig, Model, Precision};
    let gpu = ddl::testing::gpu();
    let mut model = Model::new(gpu.clone(), bench_cfg(Variant::DdlVmap), 3).unwrap();
    model.set_precision(Precision::F16).unwrap();
    let opt = AdamWConfig::paper(1e-2);
    let prog = model.program(2, 16, &opt).unwrap();
    let mut rng = ddl::testing::Rng::new(5);
    let (x, y) = (rng.ints(32, 65), rng.ints(32, 65));
    prog.set_batch(&model, &x, &y).unwrap();
    let mut losses = Vec::new();
    for step in 1..=4 {
        let (loss, _) = model.train_step(&prog, &AdamWConfig { step, ..opt }).unwrap();
        losses.push(loss);
        let p = model.read_params().unwrap();
        let got = model.params16.as_ref().unwrap().read_f32(&gpu).unwrap();
        let mismatched = p
            .chunks(2)
            .zip(&got)
            .filter(|(pair, w)| {
                let hi = pair.get(1).copied().unwrap_or(0.0);
                let want =
                    half::f16::from_f32(pair[0]).to_bits() as u32 | (half::f16::from_f32(hi).to_bits() as u32) << 16;
                w.to_bits() != want
            })
            .count();
        assert_eq!(mismatched, 0, "step {step}: {mismatched} words of the f16 copy are stale");
    }
    assert!(losses[3] < losses[0], "{losses:?}");
}

#[test]
fn the_precision_benchmark_pairs_f16_and_f32_runs_by_seed_and_reuses_finished_ones() {
    let dir = tmpdir("bench-precision");
    env_cache(&dir);
    let c = ddl::testing::small_corpus(&dir);
    let gpu = ddl::testing::gpu();
    // A small model over the preset (`bench precision --set`): the settings the benchmark sets
    // itself (`small_run`'s schedule and evaluations) are the benchmark's.
    let b = ddl::bench::precision::PrecisionBench {
        base: small_run(Variant::Ddl, "not this corpus"),
        corpus: c,
        steps: 3,
        seeds: vec![1, 2],
        out: dir.join("runs"),
    };
    let collect = || {
        let mut rows = Vec::new();
        ddl::bench::precision::precision_rows(&gpu, &b, |r| rows.push(r.0)).unwrap();
        rows
    };
    let rows = collect();
    assert_eq!(rows.len(), 5, "{rows:?}");
    let runs: Vec<_> =
        rows[..4].iter().map(|r| (r["precision"].as_str().unwrap(), r["seed"].as_u64().unwrap())).collect();
    assert_eq!(runs, [("f32", 1), ("f16", 1), ("f32", 2), ("f16", 2)]);
    // Each run: the base's model, the benchmark's corpus, precision, seed and schedule.
    for r in &rows[..4] {
        let dir = std::path::PathBuf::from(r["dir"].as_str().unwrap());
        let run = ddl::train::RunConfig::read_file(&dir).unwrap().unwrap();
        assert_eq!((run.model.d_model, run.model.n_layers, run.train.batch_size), (32, 1, 2), "{}", dir.display());
        assert_eq!(
            (run.corpus.as_str(), run.train.precision.name()),
            (b.corpus.as_str(), r["precision"].as_str().unwrap())
        );
        assert_eq!(
            (run.train.seed, run.train.decay_steps, run.train.warmup_steps),
            (r["seed"].as_u64().unwrap(), 3, 1)
        );
        assert!(!run.train.state_f16 && run.train.eval_every == 0, "{}", dir.display());
    }
    let s = &rows[4];
    let f = |k: &str| s[k].as_f64().unwrap();
    let diffs: Vec<f64> = (0..2)
        .map(|i| rows[2 * i + 1]["val_loss"].as_f64().unwrap() - rows[2 * i]["val_loss"].as_f64().unwrap())
        .collect();
    assert!((f("diff_mean") - (diffs[0] + diffs[1]) / 2.0).abs() < 1e-12, "{s}");
    assert_eq!(s["within_f32_spread"].as_bool(), Some(f("diff_mean").abs() <= f("f32_sd")));
    // A second call reads the finished runs back: the same numbers, no training.
    let again = collect();
    assert_eq!(again[4]["diff_mean"], s["diff_mean"]);
    // Another corpus in the same --out: its runs are not this benchmark's (they were reported as
    // if they were), and are kept.
    let other = dir.join("other.txt");
    std::fs::write(&other, "Another text altogether, of other letters and words. ".repeat(400)).unwrap();
    let moved = ddl::bench::precision::PrecisionBench { corpus: other.display().to_string(), ..b.clone() };
    let e = ddl::bench::precision::precision_rows(&gpu, &moved, |_| {}).unwrap_err().to_string();
    assert!(e.contains("corpus") && e.contains("give another --out") && e.contains("ddl-f32-seed1"), "{e}");
    assert_eq!(collect()[4]["diff_mean"], s["diff_mean"], "the runs are as they were");
    let one = ddl::bench::precision::PrecisionBench { seeds: vec![1], ..b };
    assert!(ddl::bench::precision::precision_rows(&gpu, &one, |_| {}).unwrap_err().to_string().contains("--seeds"));
}

/// The precision benchmark's verdict writes a difference of zero without a sign (`-0.0000`
/// before) and one that four decimals would show as a zero in three significant digits.
#[test]
fn the_precision_verdict_writes_zero_unsigned_and_a_tiny_difference_in_its_digits() {
    use ddl::bench::precision::signed_diff;
    assert_eq!(signed_diff(-0.0), "0.0000");
    assert_eq!(signed_diff(0.0), "0.0000");
    assert_eq!(signed_diff(0.01234), "+0.0123");
    assert_eq!(signed_diff(-0.01234), "-0.0123");
    assert_eq!(signed_diff(-0.0000321), "-3.21e-5");
    assert_eq!(signed_diff(4e-9), "+4.00e-9");
    for x in [-0.00004999, 0.00004999, -1e-300] {
        assert!(!signed_diff(x).contains("0.0000"), "{x}: {}", signed_diff(x));
    }
}

#[test]
fn short_dispatches_are_timed_back_to_back_and_long_ones_alone() {
    // `bench kernels` and `bench matmul` time a short case as k runs recorded back to back in one
    // submission (a short dispatch submitted alone measured 2–5× slow on an H200): k makes a
    // repetition hold ≥ STEADY_MS of kernel time, at most 16; a long case runs once.
    use ddl::bench::{STEADY_MS, runs_per_rep};
    assert_eq!(STEADY_MS, 2.0);
    for (first, k) in [(0.05, 16), (0.125, 16), (0.13, 16), (0.5, 4), (0.6, 4), (1.0, 2), (1.9, 2), (2.0, 1), (40.0, 1)]
    {
        assert_eq!(runs_per_rep(first), k, "a first run of {first} ms");
    }
    assert_eq!((runs_per_rep(0.0), runs_per_rep(f64::NAN), runs_per_rep(-1.0)), (1, 1, 1));
    // On the adapter: a per-run time (the sum over the k runs / k) and k within its bounds.
    use ddl::kernels::elementwise;
    let gpu = ddl::testing::gpu();
    let x = ddl::gpu::Tensor::from_f32(&gpu, "x", &[64], &[1.0; 64]).unwrap();
    let short = elementwise::scale(&gpu, x.view(), 1.0, 64).unwrap();
    let refs: Vec<&ddl::gpu::Dispatch> = short.iter().collect();
    let (ms, k) = ddl::bench::steady_ms(&gpu, &refs, 3).unwrap();
    assert!(ms > 0.0 && ms.is_finite() && (1..=16).contains(&k), "{ms} ms, {k} runs per repetition");
}

/// The memory plan's largest buffer is the largest tensor a model and its training program
/// allocate (what `ddl info` and the fit checks compare with the adapter's largest buffer),
/// whichever it is: the parameters' one buffer, the logits, the states' gradient or the MLP's
/// hidden layer; with f32 and f16 states, whole and sliced heads.
#[test]
fn the_plans_largest_buffer_is_the_largest_tensor_allocated() {
    use ddl::model::Storage;
    let gpu = own_gpu();
    let opt = ddl::kernels::adamw::AdamWConfig::paper(1e-3);
    let mut seen = std::collections::BTreeSet::new();
    for (variant, b, t, vocab, hidden, state_f16, head_chunk) in [
        (Variant::Baseline, 2, 8, 65, 85, false, 0),   // the parameters
        (Variant::Baseline, 8, 32, 900, 85, false, 0), // the logits
        (Variant::Baseline, 8, 32, 65, 300, false, 0), // the MLP's hidden layer
        (Variant::Ddl, 8, 32, 65, 85, false, 0),       // the states' gradient
        (Variant::Ddl, 8, 32, 65, 85, true, 0),        // ... f32 with f16 states too
        (Variant::DdlVmap, 8, 32, 900, 85, false, 16), // sliced logits: the gradient again
    ] {
        let mut cfg = bench_cfg(variant);
        (cfg.vocab_size, cfg.mlp_hidden) = (vocab, hidden);
        let st = Storage { state_f16, head_chunk, ..Default::default() };
        let plan = ddl::model::memory_plan_for(&cfg, b, t, st);
        gpu.stats.reset_peak();
        let mut model = ddl::model::Model::new(gpu.clone(), cfg.clone(), 1).unwrap();
        if state_f16 {
            model.set_state_f16(true).unwrap();
        }
        model.set_head_chunk(head_chunk);
        let prog = model.program(b, t, &opt).unwrap();
        let what = format!("{variant:?} {b}×{t} V {vocab} F {hidden} f16 states {state_f16} chunk {head_chunk}");
        assert_eq!(gpu.stats.largest(), plan.largest.1, "{what}: plan {:?}", plan.largest);
        seen.insert(plan.largest.0.split(' ').next().unwrap().to_string());
        drop((prog, model));
    }
    assert_eq!(seen.len(), 4, "each kind of buffer largest once: {seen:?}");
}

/// A forward-only program (evaluation) keeps per layer only what is read after its forward —
/// the states and the delta writes' saves — and shares one layer's intermediates among all: two
/// more layers add their states, saves and β columns, where a training program adds every
/// activation.
#[test]
fn a_forward_program_shares_the_layers_intermediates() {
    let gpu = own_gpu();
    let (b, t) = (2, 16);
    let n = (b * t) as u64;
    let added = |layers: usize, train: bool| -> u64 {
        let mut cfg = bench_cfg(Variant::Ddl);
        (cfg.mlp_hidden, cfg.n_layers) = (88, layers);
        let model = ddl::model::Model::new(gpu.clone(), cfg, 1).unwrap();
        let before = gpu.stats.live();
        let opt = ddl::kernels::adamw::AdamWConfig::paper(1e-3);
        let prog = if train { model.program(b, t, &opt) } else { model.forward_program(b, t) }.unwrap();
        let bytes = gpu.stats.live() - before;
        drop(prog);
        bytes
    };
    let cfg = bench_cfg(Variant::Ddl);
    let (d, m) = (cfg.d_model as u64, cfg.m() as u64);
    // Per layer: two states, two writes' saves (k̃ placeholder, r, β, v, δ), two β columns, two
    // statistics.
    let per_layer = 4 * (2 * n * d * m + 2 * (1 + 2 * n + 2 * n * m) + 2 * n + 2);
    // (Plus the dispatches' own few-element stand-ins and marks: under 4 KiB a layer, where one
    // sublayer's a, c and h alone are 12 KiB here.)
    let forward = added(4, false) - added(2, false);
    assert!(
        (2 * per_layer..=2 * per_layer + 2 * 4096).contains(&forward),
        "two more layers of a forward program added {forward} bytes; their states, saves and β columns are {}",
        2 * per_layer
    );
    let train = added(4, true) - added(2, true);
    // A training program keeps at least each sublayer's a, c and h besides.
    assert!(
        train >= forward + 2 * 2 * 4 * 3 * n * d,
        "a training program keeps every layer's activations: {train} vs {forward} bytes"
    );
}

/// Makes the device's shared scratch of a program of this shape and precision (the blocked
/// attention's blocks), so that programs made after it do not count it among their bytes.
fn warm_shared_scratch(
    gpu: &std::sync::Arc<ddl::gpu::Gpu>,
    cfg: &ddl::model::ModelConfig,
    p: ddl::model::Precision,
    (b, t): (usize, usize),
    opt: &ddl::kernels::adamw::AdamWConfig,
) {
    let mut model = ddl::model::Model::new(gpu.clone(), cfg.clone(), 5).unwrap();
    model.set_precision(p).unwrap();
    drop(model.program(b, t, opt).unwrap());
}

/// `--recompute` (`train.recompute`): a training program keeps one c (and a), QK-norm output,
/// ψ and v-Map direction branch (q1, s1, k̃) for every layer and rebuilds them in the backward
/// with the forward's own kernels: the same loss and gradient norm per step and the same parameters after AdamW, to the bit, as keeping
/// them — in f32 and f16, with this adapter's forms and with the GPU forms (blocked attention,
/// team reductions, the unfolded delta-write heads), for every kind of sublayer input (the
/// baseline's state, the compressors, the EC expansion, the v-Map branch) — and a program
/// smaller by exactly what the memory plan says.
#[test]
fn recomputing_trains_the_same_bits_in_the_memory_the_plan_saves() {
    use ddl::model::Precision::{F16, F32};
    let base = own_gpu();
    let gpu_forms = ddl::kernels::forms::Forms::defaults(false, (32, 32), base.features);
    for (forms_name, forms) in [("this adapter's", base.forms.clone()), ("GPU", gpu_forms)] {
        let gpu = base.with_forms(|f| *f = forms.clone());
        for (variant, p) in [
            (Variant::Baseline, F32),
            (Variant::Ddl, F32),
            (Variant::DdlCcec, F32),
            (Variant::DdlVmap, F32),
            (Variant::Baseline, F16),
            (Variant::Ddl, F16),
        ] {
            let mut cfg = bench_cfg(variant);
            cfg.n_layers = 3;
            let (b, t) = (3, 23);
            let v = cfg.vocab_size as i32;
            let x: Vec<i32> = (0..(b * t) as i32).map(|i| (i * 7 + 1) % v).collect();
            let y: Vec<i32> = (0..(b * t) as i32).map(|i| (i * 11 + 3) % v).collect();
            let opt = ddl::kernels::adamw::AdamWConfig::paper(1e-3);
            let state_f16 = p == F16 && cfg.f16_state_support().is_ok();
            // The device's shared scratch (the blocked attention's score blocks, in f16 its P and
            // dS blocks too) is made by the first program of a shape and precision: made here, so
            // that neither side below counts it.
            warm_shared_scratch(&gpu, &cfg, p, (b, t), &opt);
            let run = |recompute: bool| {
                let mut model = ddl::model::Model::new(gpu.clone(), cfg.clone(), 5).unwrap();
                model.set_precision(p).unwrap();
                model.set_state_f16(state_f16).unwrap();
                model.set_recompute(recompute);
                let before = gpu.stats.live();
                let prog = model.program(b, t, &opt).unwrap();
                let bytes = gpu.stats.live() - before;
                prog.set_batch(&model, &x, &y).unwrap();
                let mut steps = Vec::new();
                for step in 1..=3 {
                    let o = ddl::kernels::adamw::AdamWConfig { step, ..opt };
                    let (loss, norm) = model.train_step(&prog, &o).unwrap();
                    steps.push([loss.to_bits(), norm.to_bits()]);
                }
                let params: Vec<u32> = model.read_params().unwrap().iter().map(|p| p.to_bits()).collect();
                (steps, params, bytes)
            };
            let (keep, rebuild) = (run(false), run(true));
            let what = format!("{variant} {p}, {forms_name} forms");
            assert!(keep.0.iter().flatten().all(|&b| f32::from_bits(b).is_finite()), "{what}: {:?}", keep.0);
            assert_eq!(keep.0, rebuild.0, "{what}: loss and gradient norm per step");
            let differ = keep.1.iter().zip(&rebuild.1).filter(|(a, b)| a != b).count();
            assert_eq!(differ, 0, "{what}: {differ} of {} parameters differ", keep.1.len());
            // The program's bytes: smaller by the plan's difference, exactly.
            let plan = |recompute: bool| {
                ddl::model::memory_plan_for(
                    &cfg,
                    b,
                    t,
                    Storage { state_f16, precision: p, recompute, ..Default::default() },
                )
                .activation_bytes
            };
            let saved = plan(false) - plan(true);
            assert!(saved > 0, "{what}");
            assert_eq!(keep.2 - rebuild.2, saved, "{what}: the program's bytes against the plan's");
        }
    }
}

/// `--head-chunk R` (`train.head_chunk`): a training program computes the LM head in slices of R
/// rows in the forward (logits, loss, the logits' gradient and its shares of ∂E and ∂zn) in one
/// buffer of R rows: the first step's loss is the same bits as the unsliced head's, every later
/// loss and gradient norm and the parameters after three steps agree to float32 rounding (∂E sums
/// the slices' products); in f32 and f16 (whose loss scale reaches the forward's loss backward:
/// a scaled step's gradients are the scale times the unscaled ones, exactly), with this
/// adapter's forms and the GPU's; a forward-only run of the sliced program (evaluation) gives
/// the same loss as a forward program and leaves the gradients alone, and so does `ddl eval`'s
/// program in the same slices (`Model::loss_program`); accumulated micro-batches agree too; and
/// the program is smaller by the plan's difference, exactly.
#[test]
fn the_lm_head_in_slices_trains_the_same_run_in_the_memory_the_plan_saves() {
    use ddl::model::Parts;
    use ddl::model::Precision::{F16, F32};
    let base = own_gpu();
    let gpu_forms = ddl::kernels::forms::Forms::defaults(false, (32, 32), base.features);
    let rel = |a: &[f32], b: &[f32]| -> f64 {
        let num: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum();
        let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
        (num / den.max(1e-300)).sqrt()
    };
    for (forms_name, forms) in [("this adapter's", base.forms.clone()), ("GPU", gpu_forms)] {
        let gpu = base.with_forms(|f| *f = forms.clone());
        for (variant, p, chunk) in [
            (Variant::Baseline, F32, 16),
            (Variant::Ddl, F32, 7),
            (Variant::DdlCcec, F32, 16),
            (Variant::DdlVmap, F32, 1),
            (Variant::Baseline, F16, 16),
            (Variant::Ddl, F16, 30),
        ] {
            let mut cfg = bench_cfg(variant);
            cfg.n_layers = 2;
            let (b, t) = (3, 23);
            let v = cfg.vocab_size as i32;
            let x: Vec<i32> = (0..(b * t) as i32).map(|i| (i * 7 + 1) % v).collect();
            let mut y: Vec<i32> = (0..(b * t) as i32).map(|i| (i * 11 + 3) % v).collect();
            y[5] = -1;
            let opt = ddl::kernels::adamw::AdamWConfig::paper(1e-3);
            let state_f16 = p == F16 && cfg.f16_state_support().is_ok();
            warm_shared_scratch(&gpu, &cfg, p, (b, t), &opt);
            let what = format!("{variant} {p}, slices of {chunk}, {forms_name} forms");
            let run = |chunk: usize| {
                let mut model = ddl::model::Model::new(gpu.clone(), cfg.clone(), 5).unwrap();
                model.set_precision(p).unwrap();
                model.set_state_f16(state_f16).unwrap();
                model.set_head_chunk(chunk);
                let before = gpu.stats.live();
                let prog = model.program(b, t, &opt).unwrap();
                let bytes = gpu.stats.live() - before;
                assert_eq!(prog.acts().head_chunked(), chunk > 0, "{what}");
                prog.set_batch(&model, &x, &y).unwrap();
                // A scaled step's gradients: the scale times the unscaled ones (a power of two).
                let (_, g1) = (model.forward_backward(&prog).unwrap(), model.grads.read_f32(&model.gpu).unwrap());
                prog.set_loss_scale(&model, 1024.0).unwrap();
                model.forward_backward(&prog).unwrap();
                let g1024 = model.grads.read_f32(&model.gpu).unwrap();
                prog.set_loss_scale(&model, 1.0).unwrap();
                // (In f16 the unscaled gradients' f16 operands lose what the scale keeps.)
                let times: Vec<f32> = g1.iter().map(|a| a * 1024.0).collect();
                let scaled = if p == F32 {
                    times.iter().zip(&g1024).all(|(a, b)| a.to_bits() == b.to_bits())
                } else {
                    rel(&times, &g1024) < 1e-2
                };
                assert!(scaled, "{what} (chunk {chunk}): the loss scale does not reach the loss backward");
                // Evaluation over the training program: a forward program's loss, gradients untouched.
                let eval = prog.run(&model, Parts::FORWARD).unwrap();
                assert_eq!(
                    model.grads.read_f32(&model.gpu).unwrap(),
                    g1024,
                    "{what}: a forward-only run changed the gradients"
                );
                let fp = model.forward_program_sharing(&prog).unwrap();
                let mut shared = fp.run(&model, Parts::FORWARD).unwrap();
                // `ddl eval`'s program, its head in the same slices.
                let lp = model.loss_program(b, t, chunk).unwrap();
                assert_eq!(lp.acts().head_rows, if chunk > 0 { chunk } else { b * t }, "{what}");
                lp.set_batch(&model, &x, &y).unwrap();
                shared.extend(lp.run(&model, Parts::FORWARD).unwrap());
                let mut steps = Vec::new();
                for step in 1..=3 {
                    let o = ddl::kernels::adamw::AdamWConfig { step, ..opt };
                    let (loss, norm) = model.train_step(&prog, &o).unwrap();
                    steps.push([loss, norm]);
                }
                let acc = prog
                    .run_accumulated(
                        &model,
                        &[(x.clone(), y.clone()), (x.iter().rev().copied().collect(), y.clone())],
                        false,
                    )
                    .unwrap();
                (
                    steps,
                    model.read_params().unwrap(),
                    bytes,
                    g1,
                    eval,
                    shared,
                    acc,
                    model.grads.read_f32(&model.gpu).unwrap(),
                )
            };
            let (whole, sliced) = (run(0), run(chunk));
            assert!(whole.0.iter().flatten().all(|a| a.is_finite()), "{what}: {:?}", whole.0);
            assert_eq!(whole.0[0][0].to_bits(), sliced.0[0][0].to_bits(), "{what}: the first loss");
            // (f16 rounds every linear layer's operands: a rounding apart in ∂E moves some of them
            // by an f16 ulp after an update.)
            let (tl, tn, tg, tp, ta) =
                if p == F32 { (1e-5, 1e-4, 1e-5, 1e-6, 1e-5) } else { (1e-3, 1e-2, 1e-3, 1e-4, 1e-2) };
            for (s, (a, b)) in whole.0.iter().zip(&sliced.0).enumerate() {
                assert!((a[0] - b[0]).abs() <= tl * a[0].abs(), "{what}: step {} loss {} vs {}", s + 1, a[0], b[0]);
                assert!((a[1] - b[1]).abs() <= tn * a[1].abs(), "{what}: step {} norm {} vs {}", s + 1, a[1], b[1]);
            }
            let (dg, dp, dacc) = (rel(&sliced.3, &whole.3), rel(&sliced.1, &whole.1), rel(&sliced.7, &whole.7));
            assert!(
                dg < tg && dp < tp && dacc < ta,
                "{what}: gradients {dg:e}, parameters {dp:e}, accumulated {dacc:e}"
            );
            // The loss of evaluation: the unsliced head's bits (the forward-only head with the
            // training objective, and a forward program over the activations without smoothing).
            assert_eq!(whole.4[..2], sliced.4[..2], "{what}: forward-only loss and count");
            assert_eq!(whole.5[..2], sliced.5[..2], "{what}: the sharing forward program's loss");
            let k = whole.5.len() / 2;
            for side in [&whole.5, &sliced.5] {
                assert_eq!(side[k..k + 2], whole.5[..2], "{what}: `ddl eval`'s program against a forward program");
            }
            for (a, b) in whole.6.iter().zip(&sliced.6) {
                assert!((a[0] - b[0]).abs() <= tl * a[0].abs(), "{what}: accumulated losses {a:?} vs {b:?}");
            }
            // The program's bytes: smaller by the plan's difference, exactly.
            let plan = |head_chunk: usize| {
                let st = Storage { state_f16, precision: p, head_chunk, ..Default::default() };
                ddl::model::memory_plan_for(&cfg, b, t, st).activation_bytes
            };
            assert_eq!(plan(0) - plan(chunk), 4 * (b * t - chunk) as u64 * cfg.vocab_size as u64, "{what}");
            assert_eq!(whole.2 - sliced.2, plan(0) - plan(chunk), "{what}: the program's bytes against the plan's");
        }
    }
}

/// `ddl train --recompute`: the run's settings say so, its steps log the same losses and
/// gradient norms as the same run keeping its activations, and a run may take it up when it
/// resumes (`--set train.recompute=true` is not a changed setting there: it changes how, not
/// what, the run trains); `ddl train --head-chunk R` likewise, its losses a rounding apart.
#[test]
fn the_cli_trains_the_same_run_when_recomputing_or_slicing_the_head_and_resumes_into_it() {
    let dir = tmpdir("recompute");
    let c = ddl::testing::small_corpus(&dir);
    let train = |name: &str, steps: &str, extra: &[&str]| {
        let out = dir.join(name);
        let mut cmd = ddl_cmd(&dir);
        cmd.args(["train", "--preset", "tiny", "--variant", "ddl_ec", "--steps", steps, "--corpus", &c, "--out"])
            .arg(&out);
        for kv in ["model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.head_dim=16"] {
            cmd.args(["--set", kv]);
        }
        for kv in ["model.mlp_hidden=85", "train.batch_size=2", "train.seq_len=16", "train.eval_every=0"] {
            cmd.args(["--set", kv]);
        }
        let o = cmd.args(["--set", "train.eval_batches=1", "--set", "train.log_every=1"]).args(extra).output().unwrap();
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        out
    };
    // (loss, grad_norm) of every step line, as logged.
    let steps = |out: &Path| -> Vec<(String, String)> {
        let text = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["loss"].is_number() && v["step"].is_number())
            .map(|v| (v["loss"].to_string(), v["grad_norm"].to_string()))
            .collect()
    };
    let (keep, rebuild) = (train("keep", "3", &[]), train("rebuild", "3", &["--recompute"]));
    assert_eq!(steps(&keep).len(), 3, "{:?}", steps(&keep));
    assert_eq!(steps(&keep), steps(&rebuild), "the same run, recomputing or not");
    let saved = |out: &Path| std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(saved(&rebuild).contains("recompute = true") && saved(&keep).contains("recompute = false"));
    // The kept run resumes recomputing, with the flag or the setting.
    train("keep", "4", &["--resume", keep.to_str().unwrap(), "--recompute"]);
    train("keep", "5", &["--resume", keep.to_str().unwrap(), "--set", "train.recompute=true"]);
    assert_eq!(steps(&keep).len(), 5);
    // `--head-chunk 5` (32 tokens a batch: 7 slices): the first loss the same bits, the others
    // and the gradient norms a rounding apart; a run may take it up, or change it, when it
    // resumes.
    let sliced = train("sliced", "3", &["--head-chunk", "5"]);
    assert!(saved(&sliced).contains("head_chunk = 5") && saved(&rebuild).contains("head_chunk = 0"));
    let (a, b) = (steps(&rebuild), steps(&sliced));
    assert_eq!((a.len(), &a[0].0), (b.len(), &b[0].0), "{a:?} vs {b:?}");
    for ((la, na), (lb, nb)) in a.iter().zip(&b) {
        let f = |x: &str| x.parse::<f64>().unwrap();
        assert!((f(la) - f(lb)).abs() < 1e-5 * f(la) && (f(na) - f(nb)).abs() < 1e-4 * f(na), "{a:?} vs {b:?}");
    }
    train("sliced", "4", &["--resume", sliced.to_str().unwrap(), "--head-chunk", "7"]);
    train("keep", "6", &["--resume", keep.to_str().unwrap(), "--set", "train.head_chunk=3"]);
    assert_eq!((steps(&sliced).len(), steps(&keep).len()), (4, 6));
}

/// `ddl train --init-from CHECKPOINT`: a new run from a checkpoint's parameters, model and
/// tokenizer (fine-tuning): at learning rate 0 its parameters stay the checkpoint's to the bit;
/// its own settings and schedule apply, its config.toml records the source and it resumes; a
/// model setting, another variant or tokenizer, or text the tokenizer cannot encode is refused.
#[test]
fn a_run_starts_from_a_checkpoints_parameters_with_init_from() {
    let dir = tmpdir("init-from");
    let c = ddl::testing::small_corpus(&dir);
    // (The preset's MLP width.)
    let small: Vec<&str> = SMALL.chunks(2).filter(|p| p[1] != "model.mlp_hidden=85").flatten().copied().collect();
    let run = |args: &[&str]| {
        let o = ddl_cmd(&dir).arg("--no-autotune").arg("train").args(args).output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let a = dir.join("a").display().to_string();
    let (ok, e) = run(&[&["--corpus", &c, "--variant", "ddl_cc", "--steps", "3", "--out", &a][..], &small].concat());
    assert!(ok, "{e}");
    // Learning rate 0 for one step: the parameters are the checkpoint's, bit for bit.
    let b = dir.join("b").display().to_string();
    let rest = ["--set", "train.batch_size=2", "--set", "train.seq_len=16", "--set", "train.eval_batches=1"];
    let (ok, e) =
        run(&[&["--init-from", &a, "--corpus", &c, "--steps", "1", "--out", &b, "--set", "train.lr=0"][..], &rest]
            .concat());
    assert!(ok, "{e}");
    assert!(e.contains("starting from the parameters of") && e.contains("(step 3)"), "{e}");
    let (ck_a, ck_b) = (
        ddl::train::checkpoint::load(Path::new(&a), false).unwrap(),
        ddl::train::checkpoint::load(Path::new(&b), false).unwrap(),
    );
    assert_eq!(ck_b.step, 1);
    assert_eq!(ck_a.config, ck_b.config);
    assert!(ck_a.params.iter().zip(&ck_b.params).all(|(x, y)| x.to_bits() == y.to_bits()), "parameters moved at lr 0");
    let cfg = std::fs::read_to_string(Path::new(&b).join("config.toml")).unwrap();
    assert!(cfg.contains("init_from = ") && cfg.contains("lr = 0.0"), "{cfg}");
    // The model settings that fix no parameter may change (they were refused with every
    // model.* as "its parameters fix its shape"), and the fine-tune uses them: label smoothing
    // changes the first step's loss on the same batch from the same parameters; a longer context
    // trains windows past the checkpoint's.
    let first_loss = |run: &str| -> f64 {
        let m = std::fs::read_to_string(Path::new(run).join("metrics.jsonl")).unwrap();
        let line = m.lines().find(|l| l.contains("\"step\":1,") && l.contains("\"loss\"")).unwrap().to_string();
        serde_json::from_str::<serde_json::Value>(&line).unwrap()["loss"].as_f64().unwrap()
    };
    let smooth = dir.join("smooth").display().to_string();
    let (ok, e) = run(&[
        &["--init-from", &a, "--corpus", &c, "--steps", "1", "--out", &smooth, "--set", "train.lr=0"][..],
        &rest,
        &["--set", "model.label_smoothing=0.1"],
    ]
    .concat());
    assert!(ok, "{e}");
    let ck_s = ddl::train::checkpoint::load(Path::new(&smooth), false).unwrap();
    assert_eq!(ck_s.config.label_smoothing, 0.1);
    assert_eq!(ck_s.config.with_fine_tune_settings_of(&ck_a.config), ck_a.config, "only α changed");
    assert!(ck_a.params.iter().zip(&ck_s.params).all(|(x, y)| x.to_bits() == y.to_bits()));
    let (plain, smoothed) = (first_loss(&b), first_loss(&smooth));
    assert!(smoothed != plain && smoothed.is_finite(), "α 0.1 trained on loss {smoothed}, α 0 on {plain}");
    // Another RoPE base (a context-extending fine-tune raises it): taken, recorded, and used (the
    // same batch from the same parameters scores otherwise); the parameters are the checkpoint's.
    let base = dir.join("base").display().to_string();
    let (ok, e) = run(&[
        &["--init-from", &a, "--corpus", &c, "--steps", "1", "--out", &base, "--set", "train.lr=0"][..],
        &rest,
        &["--set", "model.rope_base=40"],
    ]
    .concat());
    assert!(ok, "{e}");
    assert!(e.contains(&format!("(step 3); changed: RoPE base {} → 40", ck_a.config.rope_base)), "{e}");
    let ck_r = ddl::train::checkpoint::load(Path::new(&base), false).unwrap();
    assert_eq!(ck_r.config.rope_base, 40.0);
    assert_eq!(ck_r.config.with_fine_tune_settings_of(&ck_a.config), ck_a.config, "only the RoPE base changed");
    assert!(ck_a.params.iter().zip(&ck_r.params).all(|(x, y)| x.to_bits() == y.to_bits()));
    let rebased = first_loss(&base);
    assert!(
        rebased != plain && rebased.is_finite(),
        "RoPE base 40 trained on loss {rebased}, the checkpoint's on {plain}"
    );
    // `ddl info --checkpoint` says where the parameters came from, at which step, and what the
    // fine-tune changed; once the source has trained on, its step now too (it said only the step
    // now, which read as the step the fine-tune started from).
    let info = |run: &str| {
        let o = ddl_cmd(&dir).args(["info", "--checkpoint", run]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let src = std::fs::canonicalize(&a).unwrap().display().to_string();
    let now = info(&base);
    assert!(now.contains(&format!("fine-tuned from: the parameters of {src} at step 3 (`--init-from`)")), "{now}");
    assert!(now.contains(&format!("changed: RoPE base {} → 40", ck_a.config.rope_base)), "{now}");
    assert!(std::fs::read_to_string(Path::new(&base).join("config.toml")).unwrap().contains("init_from_step = 3"));
    let (ok, e) = run(&["--resume", &a, "--steps", "4"]);
    assert!(ok, "{e}");
    let later = info(&base);
    let want = format!("the parameters of {src} at step 3 (`--init-from`; that checkpoint is now at step 4)");
    assert!(later.contains(&want), "{later}");
    assert!(!later.contains("training now"), "{later}");
    // A run that a live process trains (its lock; one of another host is never taken for stale):
    // said, with the steps logged past the checkpoint described.
    let lock = Path::new(&base).join(".ddl-lock");
    std::fs::write(&lock, "1 another-host").unwrap();
    let busy = info(&base);
    let o = ddl_cmd(&dir).args(["info", "--checkpoint", &base, "--json"]).output().unwrap();
    std::fs::remove_file(&lock).unwrap();
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let now =
        serde_json::json!({"pid": 1, "host": "another-host", "steps_past": 0, "logged_step": 1, "steps_target": 1});
    assert_eq!(j["training_now"], now);
    assert!(
        busy.contains(
            "training now: process 1 on another-host, at step 1 of 1; its metrics.jsonl has logged 0 steps past this"
        ),
        "{busy}"
    );
    let long = dir.join("long").display().to_string();
    let past = ck_a.config.max_seq_len + 8;
    let (ok, e) = run(&[
        &["--init-from", &a, "--corpus", &c, "--steps", "1", "--out", &long][..],
        &["--set", "train.batch_size=1", "--set", "train.eval_batches=1"],
        &["--set", format!("train.seq_len={past}").as_str(), "--set", format!("model.max_seq_len={past}").as_str()],
    ]
    .concat());
    assert!(ok, "{e}");
    let ck_l = ddl::train::checkpoint::load(Path::new(&long), false).unwrap();
    assert_eq!((ck_l.config.max_seq_len, ck_l.config.label_smoothing), (past, 0.0));
    let cfg_l = std::fs::read_to_string(Path::new(&long).join("config.toml")).unwrap();
    assert!(cfg_l.contains(&format!("max_seq_len = {past}")), "{cfg_l}");
    // Its config.toml given again with the checkpoint it started from (init_from in it): taken,
    // its context with it.
    let again = dir.join("again").display().to_string();
    let (ok, e) = run(&["--config", &format!("{long}/config.toml"), "--steps", "1", "--out", &again, "--dry-run"]);
    assert!(ok, "{e}");
    // Its own run: it resumes (the source is not read again).
    let (ok, e) = run(&["--resume", &b, "--steps", "2"]);
    assert!(ok, "{e}");
    // Refused: a model setting, another variant, another tokenizer, a character the model lacks,
    // a checkpoint that is not one.
    let c2 = dir.join("c2").display().to_string();
    for (args, needle) in [
        (vec!["--set", "model.d_model=64"], "model.d_model keeps its value (it sizes parameters"),
        (vec!["--set", "model.beta_init=0.5"], "(it only sets how parameters start"),
        (vec!["--set", "model.norm_eps=1e-3"], "(it changes what the parameters compute"),
        (vec!["--set", "model.rope_base=0"], "model.rope_base = 0: expected a finite number > 0"),
        (vec!["--variant", "ddl"], "holds a ddl_cc model"),
        (vec!["--corpus", dir.join("odd.txt").to_str().unwrap()], "characters of --init-from"),
        (vec!["--tokenizer", dir.join("tok.json").to_str().unwrap()], "another tokenizer"),
        // Windows past the checkpoint's context: the remedy lowers them or raises the context.
        (vec!["--set", "train.seq_len=100000"], "or raise it (--set model.max_seq_len=100000"),
    ] {
        std::fs::write(dir.join("odd.txt"), "zebra ÿ ".repeat(50)).unwrap();
        let tok = ddl::tokenizer::Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_corpus("xyz").unwrap());
        std::fs::write(dir.join("tok.json"), tok.to_json()).unwrap();
        let mut full = vec!["--init-from", &a, "--steps", "1", "--out", &c2];
        if !args.contains(&"--corpus") {
            full.extend(["--corpus", &c]);
        }
        full.extend(args.iter().copied());
        let (ok, e) = run(&full);
        assert!(!ok && e.contains(needle) && !e.contains("panicked"), "{args:?}: {e}");
        assert!(!Path::new(&c2).join("model.safetensors").exists(), "{args:?} left a run");
    }
    // Shards made with another tokenizer: named by their meta.json, with the remedy, before a
    // token id past the model's vocabulary is met.
    // (Long enough for a sequence in each split: shards too short are refused first, before
    // the adapter opens, as they would be with the right tokenizer.)
    let shards = dir.join("odd-shards");
    std::fs::write(dir.join("odd-long.txt"), "zebra ÿ ".repeat(2000)).unwrap();
    let o = ddl_cmd(&dir)
        .args(["data", "prepare", "--tokenizer", "char", "--out"])
        .arg(&shards)
        .arg(dir.join("odd-long.txt"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (ok, e) = run(&["--init-from", &a, "--data", shards.to_str().unwrap(), "--steps", "1", "--out", &c2]);
    assert!(!ok && e.contains("meta.json") && e.contains("prepare the --data shards with it"), "{e}");
    assert!(!e.contains("drop --tokenizer") && !e.contains("outside the model's vocabulary"), "{e}");
    let (ok, e) = run(&["--init-from", dir.join("nope").to_str().unwrap(), "--out", &c2]);
    assert!(!ok && e.contains("--init-from") && e.contains("nope"), "{e}");
    let (ok, e) = run(&["--init-from", &a, "--resume", &b]);
    assert!(!ok && e.contains("--init-from"), "{e}");
    // A model-only checkpoint (as scripts/torch_checkpoint.py writes one): --resume is refused,
    // pointing here; --init-from trains from it.
    let only = dir.join("model-only");
    std::fs::create_dir_all(&only).unwrap();
    std::fs::copy(Path::new(&a).join("model.safetensors"), only.join("model.safetensors")).unwrap();
    let (ok, e) = run(&["--resume", only.to_str().unwrap(), "--steps", "2"]);
    assert!(!ok && e.contains("model-only") && e.contains("--init-from"), "{e}");
    let d = dir.join("d").display().to_string();
    let (ok, e) =
        run(&[&["--init-from", only.to_str().unwrap(), "--corpus", &c, "--steps", "1", "--out", &d][..], &rest]
            .concat());
    assert!(ok, "{e}");
}

/// A fine-tune's tokenizer is the checkpoint's: another tokenizer file, shards made with another
/// one and `--tokenizer char` for a checkpoint of a BPE are refused by `--dry-run` as by the run
/// (the dry run planned them, and `--tokenizer char` was ignored by both, config.toml saying
/// `char`); the checkpoint's own tokenizer given again is taken.
#[test]
fn a_dry_run_refuses_another_tokenizer_than_the_init_from_checkpoints() {
    let dir = tmpdir("init-from-tokenizer");
    let c = ddl::testing::small_corpus(&dir);
    let tok = dir.join("bpe.json").display().to_string();
    let o = ddl_cmd(&dir).args(["tokenizer", "train", "--corpus", &c, "--vocab-size", "300", "--out", &tok]).output();
    let o = o.unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = |args: &[&str]| {
        let o = ddl_cmd(&dir).arg("train").args(args).output().unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let a = dir.join("a").display().to_string();
    let (ok, e) = run(&[&["--corpus", &c, "--tokenizer", &tok, "--steps", "1", "--out", &a][..], SMALL].concat());
    assert!(ok, "{e}");
    let char_tok = ddl::tokenizer::Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_corpus("xyz").unwrap());
    std::fs::write(dir.join("char.json"), char_tok.to_json()).unwrap();
    let shards = dir.join("char-shards");
    let o = ddl_cmd(&dir).args(["data", "prepare", "--tokenizer", "char", "--out"]).arg(&shards).arg(&c).output();
    assert!(o.unwrap().status.success());
    let b = dir.join("b").display().to_string();
    let other = dir.join("char.json").display().to_string();
    let shards = shards.display().to_string();
    for (given, needle) in [
        (["--tokenizer", other.as_str()], "another tokenizer (vocabulary 3) than --init-from"),
        (["--data", shards.as_str()], "meta.json name another tokenizer"),
        (["--tokenizer", "char"], "--tokenizer char: --init-from"),
    ] {
        for dry in [true, false] {
            let mut args = vec!["--init-from", &a, "--steps", "1", "--out", &b];
            args.extend(given);
            if given[0] != "--data" {
                args.extend(["--corpus", &c]);
            }
            if dry {
                args.push("--dry-run");
            }
            let (ok, e) = run(&args);
            assert!(
                !ok && e.contains(needle) && e.contains("drop --tokenizer") == (given[0] != "--data"),
                "{args:?}: {e}"
            );
            assert!(!e.contains("dry run (nothing trained") && !Path::new(&b).exists(), "{args:?}: {e}");
        }
    }
    let (ok, e) = run(&["--init-from", &a, "--corpus", &c, "--tokenizer", &tok, "--out", &b, "--dry-run"]);
    assert!(ok, "{e}");
}
