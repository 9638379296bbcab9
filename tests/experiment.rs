//! `ddl experiment` end to end: a miniature grid (2 variants × 2 seeds × a few steps) through the
//! real CLI, its report files, resumability, and bad specs.

use std::path::{Path, PathBuf};
use std::process::Command;

fn tmpdir(name: &str) -> PathBuf {
    ddl::testing::scratch_dir(&format!("test-{name}"))
}

fn ddl(dir: &Path, args: &[&str]) -> std::process::Output {
    ddl::testing::ddl_command(env!("CARGO_BIN_EXE_ddl"), dir).args(args).output().expect("running the ddl binary")
}

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn spec(dir: &Path, steps: usize) -> PathBuf {
    let corpus = ddl::testing::small_corpus(dir);
    let p = dir.join("mini.toml");
    std::fs::write(
        &p,
        format!(
            r#"name = "mini"
preset = "tiny"
variants = ["baseline", "ddl"]
seeds = [1, 2]
steps = {steps}
corpus = "{}"
beta_batches = 2
[model]
d_model = 32
n_layers = 1
n_heads = 2
head_dim = 16
mlp_hidden = 85
[train]
batch_size = 2
seq_len = 16
eval_every = 2
eval_batches = 2
checkpoint_every = 0
"#,
            corpus
        ),
    )
    .unwrap();
    p
}

#[test]
fn a_miniature_grid_runs_resumes_and_writes_the_report() {
    let dir = tmpdir("experiment");
    let s = spec(&dir, 4);
    let out = dir.join("out");
    let (s, o) = (s.to_str().unwrap(), out.to_str().unwrap());
    let r = ddl(&dir, &["experiment", "--spec", s, "--out", o]);
    assert!(r.status.success(), "{}", text(&r));
    // After each run, the time the others will take at the pace so far (none after the last).
    let t = text(&r);
    assert!(
        t.contains("grid: 3 runs of 4 to train, about ") && t.contains(" more at the pace of the 1 run trained"),
        "{t}"
    );
    assert!(t.contains("grid: 1 run of 4 to train, about ") && !t.contains("grid: 0 runs"), "{t}");
    for f in ["report.md", "val_loss.png", "comparisons.png", "beta_regimes.png", "experiment.toml"] {
        let p = out.join(f);
        assert!(p.is_file(), "{} missing:\n{}", p.display(), text(&r));
    }
    for png in ["val_loss.png", "comparisons.png", "beta_regimes.png"] {
        let b = std::fs::read(out.join(png)).unwrap();
        assert_eq!(&b[1..4], b"PNG");
        assert!(b.len() > 5_000, "{png} is suspiciously small ({} bytes)", b.len());
    }
    // Each run is a normal `ddl train` directory with a result.
    for run in ["baseline-seed1", "baseline-seed2", "ddl-seed1", "ddl-seed2"] {
        let d = out.join("runs").join(run);
        for f in ["config.toml", "metrics.jsonl", "model.safetensors", "result.json"] {
            assert!(d.join(f).is_file(), "{run}/{f} missing");
        }
        let res: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("result.json")).unwrap()).unwrap();
        assert_eq!(res["steps"], 4);
        assert!(res["final_val_loss"].as_f64().unwrap().is_finite());
        // The final number is the whole-split evaluation, with its token count and the build.
        assert!(res["val_tokens"].as_u64().unwrap() > 0, "{res}");
        assert_eq!(res["commit"].as_str().unwrap(), ddl::build_commit().0, "{res}");
        // Its top-1 accuracy: the final evaluation's, as metrics.jsonl logged it.
        let metrics = std::fs::read_to_string(d.join("metrics.jsonl")).unwrap();
        let last_full = metrics
            .lines()
            .rev()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|j| j["val_full"] == true)
            .unwrap();
        let acc = res["final_val_accuracy"].as_f64().unwrap();
        assert_eq!(acc, last_full["val_accuracy"].as_f64().unwrap(), "{res}");
        assert!((0.0..=1.0).contains(&acc), "{res}");
        let regimes = res["regimes"].as_array().unwrap();
        if run.starts_with("ddl") {
            // 2 sublayers, 2 batches of 2×16 tokens each.
            assert_eq!(regimes.len(), 2, "{run}");
            for r in regimes {
                let n: u64 = r.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).sum();
                assert_eq!(n, 2 * 2 * 16, "{run}");
            }
        } else {
            assert!(regimes.is_empty());
        }
    }
    // Matched comparison: the two variants of a seed trained with the same training settings.
    let cfg = |run: &str| -> toml::Table {
        toml::from_str(&std::fs::read_to_string(out.join("runs").join(run).join("config.toml")).unwrap()).unwrap()
    };
    assert_eq!(cfg("baseline-seed1")["train"], cfg("ddl-seed1")["train"]);
    assert_ne!(cfg("ddl-seed1")["train"], cfg("ddl-seed2")["train"]);
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for needle in [
        "| baseline |",
        "| ddl |",
        "2.854",
        "2.835",
        "± ",
        "## Comparisons",
        "| baseline − ddl |",
        "## Top-1 accuracy",
        "val accuracy % (mean ± sd)",
        "p (Holm)",
        "identity",
        "Engine: ",
        "## Speed",
        "time ÷ baseline time",
    ] {
        assert!(report.contains(needle), "report lacks {needle:?}:\n{report}");
    }
    // The speed section: measured in one process once the runs finished, ddl against baseline.
    let speed = |out: &Path| -> Vec<serde_json::Value> {
        std::fs::read_to_string(out.join("speed.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let rows = speed(&out);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0]["variant"].as_str(), rows[0]["against"].as_str()), (Some("ddl"), Some("baseline")));
    assert_eq!(
        (rows[0]["batch"].as_u64(), rows[0]["seq"].as_u64(), rows[0]["d"].as_u64()),
        (Some(2), Some(16), Some(32))
    );
    let ratio = rows[0]["ratio_median_block"].as_f64().unwrap();
    assert!(ratio.is_finite() && ratio > 0.0, "{}", rows[0]);
    let ci = rows[0]["ratio_median_ci95"].as_array().expect("12 blocks give an interval");
    assert!(ci[0].as_f64().unwrap() <= ratio && ratio <= ci[1].as_f64().unwrap(), "{}", rows[0]);
    assert!(report.contains(&format!("| ddl | {:.2} |", rows[0]["median_step_ms"].as_f64().unwrap())), "{report}");
    let mtime =
        |run: &str| std::fs::metadata(out.join("runs").join(run).join("result.json")).unwrap().modified().unwrap();
    let before = mtime("ddl-seed2");
    // Run again: nothing is re-run.
    let r2 = ddl(&dir, &["experiment", "--spec", s, "--out", o]);
    assert!(r2.status.success(), "{}", text(&r2));
    assert_eq!(text(&r2).matches("finished earlier, not re-run").count(), 4, "{}", text(&r2));
    assert_eq!(mtime("ddl-seed2"), before);
    // `ddl info --checkpoint OUT`: every run finished with its result's losses, each variant's
    // mean over them; `ddl plot OUT`: one curve per variant over its two seeds.
    let info = |o: &str| -> serde_json::Value {
        let r = ddl(&dir, &["info", "--checkpoint", o, "--json"]);
        assert!(r.status.success(), "{}", text(&r));
        serde_json::from_slice(&r.stdout).unwrap()
    };
    let result = |run: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(out.join("runs").join(run).join("result.json")).unwrap()).unwrap()
    };
    let j = info(o);
    assert_eq!((j["steps"].as_u64(), j["runs"].as_array().map(Vec::len)), (Some(4), Some(4)), "{j}");
    for r in j["runs"].as_array().unwrap() {
        let res = result(r["name"].as_str().unwrap());
        assert_eq!((r["state"].as_str(), r["step"].as_u64()), (Some("finished"), Some(4)), "{r}");
        assert_eq!((&r["val_loss"], &r["train_loss"]), (&res["final_val_loss"], &res["final_train_loss"]), "{r}");
        assert_eq!(r["val_accuracy"], res["final_val_accuracy"], "{r}");
    }
    let mean = (result("ddl-seed1")["final_val_loss"].as_f64().unwrap()
        + result("ddl-seed2")["final_val_loss"].as_f64().unwrap())
        / 2.0;
    let v = &j["variants"][1];
    assert!(
        v["variant"] == "ddl" && v["finished"] == 2 && (v["val_mean"].as_f64().unwrap() - mean).abs() < 1e-12,
        "{j}"
    );
    let acc = |run: &str| result(run)["final_val_accuracy"].as_f64().unwrap();
    let acc_mean = (acc("ddl-seed1") + acc("ddl-seed2")) / 2.0;
    assert!((v["accuracy_mean"].as_f64().unwrap() - acc_mean).abs() < 1e-12, "{j}");
    let r = ddl(&dir, &["info", "--checkpoint", o]);
    let t = text(&r);
    assert!(t.contains("4 of 4 runs finished") && t.contains("report: ") && t.contains("± "), "{t}");
    assert!(t.contains("val acc") && t.contains(&format!("top-1 accuracy {:.2} ± ", 100.0 * acc_mean)), "{t}");
    let png = dir.join("variants.png");
    let r = ddl(&dir, &["plot", o, "--out", png.to_str().unwrap(), "--json"]);
    let p: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap_or_else(|_| panic!("{}", text(&r)));
    assert_eq!((p["groups"][0]["name"].as_str(), p["groups"][0]["runs"].as_u64()), (Some("baseline"), Some(2)), "{p}");
    assert_eq!(
        (p["groups"][1]["name"].as_str(), p["groups"][1]["common_step"].as_u64()),
        (Some("ddl"), Some(4)),
        "{p}"
    );
    // A run whose result is lost but whose checkpoint is there resumes; a missing run is trained.
    std::fs::remove_file(out.join("runs/ddl-seed2/result.json")).unwrap();
    std::fs::remove_dir_all(out.join("runs/baseline-seed2")).unwrap();
    let states: Vec<String> =
        info(o)["runs"].as_array().unwrap().iter().map(|r| r["state"].as_str().unwrap().to_string()).collect();
    assert_eq!(states, ["finished", "new", "finished", "resumes at step 4"]);
    let r3 = ddl(&dir, &["experiment", "--spec", s, "--out", o]);
    assert!(r3.status.success(), "{}", text(&r3));
    let t3 = text(&r3);
    assert!(t3.contains("ddl-seed2: resuming"), "{t3}");
    assert!(t3.contains("baseline-seed2: training"), "{t3}");
    assert!(out.join("runs/ddl-seed2/result.json").is_file());
    // --report-only rebuilds the report without training (or measuring); --speed measures again.
    std::fs::remove_file(out.join("report.md")).unwrap();
    let speed_time = || std::fs::metadata(out.join("speed.jsonl")).unwrap().modified().unwrap();
    let measured = speed_time();
    let r4 = ddl(&dir, &["experiment", "--spec", s, "--out", o, "--report-only"]);
    assert!(r4.status.success() && out.join("report.md").is_file(), "{}", text(&r4));
    assert_eq!(speed_time(), measured, "--report-only measured the speed");
    let r4 = ddl(&dir, &["experiment", "--spec", s, "--out", o, "--report-only", "--speed"]);
    assert!(r4.status.success(), "{}", text(&r4));
    assert!(speed_time() > measured && text(&r4).contains("speed: ddl against baseline"), "{}", text(&r4));
    // --report-only with a grown spec reports; the folder keeps the spec its runs trained by.
    let kept = std::fs::read_to_string(out.join("experiment.toml")).unwrap();
    let grown = dir.join("grown.toml");
    std::fs::write(&grown, std::fs::read_to_string(s).unwrap().replace("seeds = [1, 2]", "seeds = [1, 2, 3]")).unwrap();
    let r5 = ddl(&dir, &["experiment", "--spec", grown.to_str().unwrap(), "--out", o, "--report-only"]);
    assert!(r5.status.success(), "{}", text(&r5));
    assert_eq!(std::fs::read_to_string(out.join("experiment.toml")).unwrap(), kept, "--report-only rewrote the spec");
    // Carried through git (scripts/experiment-runs.sh): the finished runs' result.json and
    // config.toml alone give a fresh folder the same report, nothing re-trained.
    let script = ddl::testing::data_path("scripts/experiment-runs.sh");
    let sh = |args: &[&Path]| Command::new("bash").arg(&script).args(args).output().expect("running bash");
    let (keep, fresh) = (dir.join("keep"), dir.join("fresh"));
    let r = sh(&[Path::new("save"), &out, &keep]);
    assert!(r.status.success() && text(&r).contains("saved 4 finished run(s)"), "{}", text(&r));
    let mut kept: Vec<String> = std::fs::read_dir(keep.join("ddl-seed1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(kept, ["config.toml", "result.json"]);
    let r = sh(&[Path::new("restore"), &keep, &fresh]);
    assert!(r.status.success() && text(&r).contains("restored 4 finished run(s)"), "{}", text(&r));
    let r = ddl(&dir, &["experiment", "--spec", s, "--out", fresh.to_str().unwrap(), "--report-only"]);
    assert!(r.status.success(), "{}", text(&r));
    let table = |p: &Path| -> Vec<String> {
        let text = std::fs::read_to_string(p.join("report.md")).unwrap();
        // The results before the speed section (which the fresh folder has not measured).
        let results = text.split("## Speed").next().unwrap().to_string();
        results
            .lines()
            .filter(|l| l.starts_with("| baseline |") || l.starts_with("| ddl |"))
            .map(str::to_string)
            .collect()
    };
    assert!(!table(&out).is_empty());
    assert_eq!(table(&fresh), table(&out), "the carried runs give another report");
    // A carried result of another length is left out of the report, said, and trained again.
    let res = fresh.join("runs/ddl-seed2/result.json");
    let other = std::fs::read_to_string(&res).unwrap().replace("\"steps\": 4", "\"steps\": 99");
    std::fs::write(&res, other).unwrap();
    let fr = fresh.to_str().unwrap();
    let r = ddl(&dir, &["experiment", "--spec", s, "--out", fr, "--report-only"]);
    assert!(text(&r).contains("ddl-seed2 is left out of the report (its result.json is of 99 steps"), "{}", text(&r));
    let r = ddl(&dir, &["experiment", "--spec", s, "--out", fr]);
    let t = text(&r);
    assert!(
        r.status.success() && t.contains("ddl-seed2: trained again (its result.json is of 99 steps, the spec's 4)"),
        "{t}"
    );
    assert_eq!(t.matches("finished earlier, not re-run").count(), 3, "{t}");
    let r = sh(&[Path::new("save"), &dir.join("nowhere"), &keep]);
    assert!(!r.status.success() && text(&r).contains("no such folder"), "{}", text(&r));
    // A grid folder given where the kept runs go: the hint, not "restored 0".
    let r = sh(&[Path::new("restore"), &out, &dir.join("fresh2")]);
    assert!(!r.status.success() && text(&r).contains("did you mean") && text(&r).contains("/runs"), "{}", text(&r));
    // So is the folder the GPU check's grid.tar.gz unpacked into (its runs in grid-runs/).
    let unpacked = dir.join("unpacked");
    std::fs::create_dir_all(unpacked.join("grid-runs")).unwrap();
    let r = sh(&[Path::new("restore"), &unpacked, &dir.join("fresh3")]);
    let want = format!("did you mean: {} restore {}", script.display(), unpacked.join("grid-runs").display());
    assert!(!r.status.success() && text(&r).contains(&want), "{}", text(&r));
    // An unfinished checkpoint of a run KEEP holds finished (another grid folder, not restored
    // first) never replaces its result; `save` of a finished run removes a checkpoint kept of it.
    let other = dir.join("other-grid/runs/ddl-seed1");
    std::fs::create_dir_all(&other).unwrap();
    for f in ["config.toml", "model.safetensors", "optim.safetensors", "metrics.jsonl"] {
        std::fs::write(other.join(f), "x").unwrap();
    }
    let r = sh(&[Path::new("save-partial"), &dir.join("other-grid"), &keep]);
    assert!(r.status.success() && text(&r).contains("1 left out: finished in"), "{}", text(&r));
    assert!(keep.join("ddl-seed1/result.json").is_file() && !keep.join("ddl-seed1/model.safetensors").exists());
    let keep2 = dir.join("keep2");
    let r = sh(&[Path::new("save-partial"), &dir.join("other-grid"), &keep2]);
    assert!(r.status.success() && keep2.join("ddl-seed1/optim.safetensors").is_file(), "{}", text(&r));
    let r = sh(&[Path::new("save"), &out, &keep2]);
    assert!(r.status.success(), "{}", text(&r));
    let mut kept: Vec<String> = std::fs::read_dir(keep2.join("ddl-seed1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(kept, ["config.toml", "result.json"], "the finished run's files only");
    // The same directory with changed shared settings is refused, naming the problem.
    let s5 = spec(&dir.join("other").tap_mkdir(), 5);
    let r5 = ddl(&dir, &["experiment", "--spec", s5.to_str().unwrap(), "--out", o]);
    assert!(!r5.status.success());
    assert!(text(&r5).contains("share other settings") && text(&r5).contains("steps: "), "{}", text(&r5));
    // The folder's copy of the spec reads as other settings, but its trained runs are the spec's
    // (a value that used to follow from another and is given now: the MLP widths from d since
    // session 81): it goes on, saying so.
    let copy = out.join("experiment.toml");
    let copy_kept = std::fs::read_to_string(&copy).unwrap();
    std::fs::write(&copy, copy_kept.replace("mlp_hidden = 85", "mlp_hidden = 99")).unwrap();
    let r = ddl(&dir, &["experiment", "--spec", s, "--out", o, "--dry-run"]);
    let t = text(&r);
    assert!(
        r.status.success() && t.contains("model.mlp_hidden: 99 → 85") && t.contains("going on with the spec"),
        "{t}"
    );
    std::fs::write(&copy, &copy_kept).unwrap();
    // A grown grid (one more variant) keeps the finished runs and trains only the new ones.
    let grown =
        std::fs::read_to_string(s).unwrap().replace(r#"["baseline", "ddl"]"#, r#"["baseline", "ddl", "ddl_v1"]"#);
    let s6 = dir.join("grown.toml");
    std::fs::write(&s6, grown).unwrap();
    let r6 = ddl(&dir, &["experiment", "--spec", s6.to_str().unwrap(), "--out", o]);
    let t6 = text(&r6);
    assert!(r6.status.success(), "{t6}");
    assert_eq!(t6.matches("finished earlier, not re-run").count(), 4, "{t6}");
    assert!(t6.contains("ddl_v1-seed1: training") && t6.contains("ddl_v1-seed2: training"), "{t6}");
    assert!(std::fs::read_to_string(out.join("report.md")).unwrap().contains("| ddl_v1 |"));
    // The grown grid's speed section has the new variant too.
    let names: Vec<String> = speed(&out).iter().map(|r| r["variant"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["ddl", "ddl_v1"], "{t6}");
}

trait TapMkdir {
    fn tap_mkdir(self) -> PathBuf;
}

impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> PathBuf {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}

#[test]
fn bad_specs_are_clear_errors() {
    let dir = tmpdir("experiment-bad");
    let out = dir.join("out");
    let cases: &[(&str, &str)] = &[
        ("preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\n", "steps"),
        ("preset = \"tiny\"\nvariants = [\"ddl\", \"nope\"]\nseeds = [1]\nsteps = 3\n", "unknown variant 'nope'"),
        ("preset = \"tiny\"\nvariants = []\nseeds = [1]\nsteps = 3\n", "variants"),
        ("preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = 3\ncolour = 1\n", "colour"),
        ("preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = 3\n[train]\nlr = -1.0\n", "lr"),
        ("preset = \"huge\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = 3\n", "unknown preset"),
        ("preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = \"three\"\n", "line 4"),
        (
            "preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = 3\n[model]\nvariant = \"baseline\"\n",
            "[model] variant",
        ),
        (
            "preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = 3\ncorpus = \"/no/such.txt\"\n",
            "/no/such.txt",
        ),
        ("preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [9223372036854775808]\nsteps = 3\n", "too large"),
        // In the spec's words, not serde's Rust types.
        ("preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = -5\n", "expected a whole number ≥ 1"),
        ("preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [-1]\nsteps = 3\n", "expected a whole number ≥ 0"),
        ("", "missing key `preset`"),
        // extra_seeds as a list: serde's "expected a map", or "[[extra_seeds]] is an array of tables".
        (
            "preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = 3\nextra_seeds = [2]\n",
            "extra_seeds = { ddl = [3, 4] }",
        ),
        (
            "preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = 3\nextra_seeds = []\n",
            "extra_seeds = []: expected a table",
        ),
        ("variants = [\"ddl\"]\nseeds = [1]\nsteps = 3\n", "a spec names at least preset, variants, seeds and steps"),
    ];
    for (i, (spec, needle)) in cases.iter().enumerate() {
        let p = dir.join(format!("bad{i}.toml"));
        std::fs::write(&p, spec).unwrap();
        let r = ddl(&dir, &["experiment", "--spec", p.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        let t = text(&r);
        assert!(!r.status.success(), "case {i} succeeded: {t}");
        assert!(
            t.contains(needle) && t.contains(&format!("bad{i}.toml")),
            "case {i}: expected {needle:?} and the file name in: {t}"
        );
        assert!(!t.contains("panicked"), "{t}");
    }
    // --report-only of a folder that holds no experiment: refused, nothing created.
    let good = dir.join("good.toml");
    std::fs::write(&good, "preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = 3\n").unwrap();
    let r =
        ddl(&dir, &["experiment", "--spec", good.to_str().unwrap(), "--out", out.to_str().unwrap(), "--report-only"]);
    assert!(!r.status.success() && text(&r).contains("holds no experiment"), "{}", text(&r));
    // One run of the spec is "1 run", not "1 runs".
    let r = ddl(&dir, &["experiment", "--spec", good.to_str().unwrap(), "--out", "o", "--dry-run"]);
    assert!(r.status.success() && text(&r).contains("1 run of 3 steps, preset tiny"), "{}", text(&r));
    // `tokens` instead of `steps`: the dry run says the steps they give and the tokens.
    let by_tokens = dir.join("tokens.toml");
    std::fs::write(&by_tokens, "preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\ntokens = \"0.2k\"\n").unwrap();
    let r = ddl(&dir, &["experiment", "--spec", by_tokens.to_str().unwrap(), "--out", "o", "--dry-run"]);
    assert!(r.status.success() && text(&r).contains("1 run of 1 step (tokens = 200, 768 a step)"), "{}", text(&r));
    // --dry-run beside --report-only or --speed listed the runs and did neither: refused.
    for other in ["--report-only", "--speed"] {
        let r = ddl(&dir, &["experiment", "--spec", good.to_str().unwrap(), "--out", "o", "--dry-run", other]);
        let t = text(&r);
        assert!(!r.status.success() && t.contains(&format!("'--dry-run' cannot be used with '{other}'")), "{t}");
    }
    let r = ddl(&dir, &["experiment", "--spec", dir.join("missing.toml").to_str().unwrap(), "--out", "x"]);
    assert!(!r.status.success() && text(&r).contains("missing.toml"), "{}", text(&r));
    assert!(!out.exists(), "a bad spec must not create the output directory");
    // A `ddl train` run's folder is no experiment's, nor is a folder of someone's own files of
    // the names the grid writes (no experiment.toml, no runs/): refused (also by --dry-run),
    // naming what is there, nothing added or replaced.
    let run = dir.join("a-run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("model.safetensors"), "x").unwrap();
    let mine = dir.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("report.md"), "my notes").unwrap();
    std::fs::write(mine.join("val_loss.png"), "my plot").unwrap();
    for (folder, said) in [
        (&run, "holds a training run (model.safetensors)"),
        (&mine, "holds report.md, val_loss.png but no experiment.toml"),
    ] {
        let before: Vec<_> =
            std::fs::read_dir(folder).unwrap().flatten().map(|e| std::fs::read(e.path()).unwrap()).collect();
        for extra in [&[][..], &["--dry-run"][..]] {
            let mut args = vec!["experiment", "--spec", good.to_str().unwrap(), "--out", folder.to_str().unwrap()];
            args.extend(extra);
            let r = ddl(&dir, &args);
            let t = text(&r);
            assert!(!r.status.success() && t.contains(said), "{t}");
            let after: Vec<_> =
                std::fs::read_dir(folder).unwrap().flatten().map(|e| std::fs::read(e.path()).unwrap()).collect();
            assert_eq!(after, before, "{t}");
        }
    }
    // A file at --out or above it: refused before any device opens (and by --dry-run), the file
    // kept (the grid opened the device and failed on 'Not a directory').
    let file = dir.join("afile");
    std::fs::write(&file, "mine").unwrap();
    for o in [file.clone(), file.join("sub")] {
        for extra in [&[][..], &["--dry-run"][..]] {
            let mut args = vec!["experiment", "--spec", good.to_str().unwrap(), "--out", o.to_str().unwrap()];
            args.extend(extra);
            let r = ddl(&dir, &args);
            let t = text(&r);
            assert!(!r.status.success() && t.contains("afile' is a file") && !t.contains(") -> "), "{t}");
        }
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    // An experiment's runs/, or a folder in it, is none of a new grid's: refused (also by
    // --dry-run), nothing written there (the new grid's runs/, report and plots went into it, and
    // `ddl plot` of the experiment then left out a run "runs").
    let grid = dir.join("grid");
    let runs = grid.join("runs").tap_mkdir();
    std::fs::copy(&good, grid.join("experiment.toml")).unwrap();
    for o in [runs.clone(), runs.join("new"), runs.join("x/../new")] {
        for extra in [&[][..], &["--dry-run"][..]] {
            let mut args = vec!["experiment", "--spec", good.to_str().unwrap(), "--out", o.to_str().unwrap()];
            args.extend(extra);
            let r = ddl(&dir, &args);
            let t = text(&r);
            assert!(!r.status.success() && t.contains("inside the runs/ folder of the experiment in"), "{t}");
            assert!(t.contains(&format!("give '{}' to continue", grid.display())), "{t}");
            assert_eq!(std::fs::read_dir(&runs).unwrap().count(), 0, "{t}");
        }
    }
    // A folder another live process works in (PID 1 always runs on Linux): refused naming it,
    // before devices open and the grid's headers are said.
    if Path::new("/proc/1").exists() {
        let busy = dir.join("busy");
        std::fs::create_dir_all(&busy).unwrap();
        let lock = busy.join(ddl::train::lock::LOCK_FILE);
        std::fs::write(&lock, format!("1 {}\n", ddl::train::lock::host_name())).unwrap();
        let r = ddl(
            &dir,
            &["experiment", "--spec", good.to_str().unwrap(), "--out", busy.to_str().unwrap(), "--jobs", "2"],
        );
        let t = text(&r);
        assert!(!r.status.success() && t.contains("in use by process 1 on"), "{t}");
        assert!(!t.contains("--jobs 2:") && !t.contains(") -> "), "headers before the refusal: {t}");
        assert!(lock.exists() && !busy.join("experiment.toml").exists(), "{t}");
    }
}

/// `scripts/experiment-runs.sh restore` of an unfinished run's checkpoint over an older one: a
/// restore that fails half-way (here at an entry `cp` cannot copy, as a full disk or Ctrl-C would)
/// leaves the run's checkpoint as it was, not the new model beside the old moments; one that
/// succeeds puts the whole set in place and leaves nothing aside.
#[test]
fn a_failed_restore_of_a_checkpoint_leaves_the_run_as_it_was() {
    let dir = tmpdir("experiment-restore-partial");
    let (keep, out) = (dir.join("keep"), dir.join("out"));
    let (kept, run) = (keep.join("ddl-seed1"), out.join("runs/ddl-seed1"));
    std::fs::create_dir_all(&run).unwrap();
    for f in ["config.toml", "metrics.jsonl", "model.safetensors", "optim.safetensors"] {
        std::fs::write(run.join(f), "old").unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::create_dir_all(&kept).unwrap();
    for f in ["config.toml", "metrics.jsonl", "model.safetensors", "optim.safetensors"] {
        std::fs::write(kept.join(f), "new").unwrap();
    }
    // (A folder sorts between model.safetensors and optim.safetensors: `cp` fails there.)
    std::fs::create_dir_all(kept.join("n")).unwrap();
    let script = ddl::testing::data_path("scripts/experiment-runs.sh");
    let sh = || Command::new("bash").arg(&script).args([Path::new("restore"), &keep, &out]).output().unwrap();
    let r = sh();
    assert!(!r.status.success(), "{}", text(&r));
    for f in ["config.toml", "metrics.jsonl", "model.safetensors", "optim.safetensors"] {
        assert_eq!(std::fs::read_to_string(run.join(f)).unwrap(), "old", "{f}: {}", text(&r));
    }
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, ["runs"], "the copy aside is removed: {}", text(&r));
    std::fs::remove_dir(kept.join("n")).unwrap();
    let r = sh();
    assert!(r.status.success() && text(&r).contains("1 unfinished run(s) to resume"), "{}", text(&r));
    for f in ["config.toml", "metrics.jsonl", "model.safetensors", "optim.safetensors"] {
        assert_eq!(std::fs::read_to_string(run.join(f)).unwrap(), "new", "{f}");
    }
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, ["runs"], "nothing left aside in {}", out.display());
}

/// A run of the grid whose checkpoint does not read (damaged while the grid was stopped): `ddl
/// info` and the grid say so, and the grid's remedy (move the folder out: the run trains again),
/// not `ddl train`'s (`--resume KEPT --out NEW` continues it outside the grid), nor nothing at all.
#[test]
fn a_run_whose_checkpoint_does_not_read_gets_the_grids_remedy() {
    let dir = tmpdir("experiment-damaged");
    let out = dir.join("out");
    let good = dir.join("good.toml");
    std::fs::write(&good, "preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = 3\n").unwrap();
    let run = out.join("runs/ddl-seed1");
    std::fs::create_dir_all(&run).unwrap();
    for f in ["model.safetensors", "optim.safetensors"] {
        std::fs::write(run.join(f), "cut short").unwrap();
    }
    let (g, o) = (good.to_str().unwrap(), out.to_str().unwrap());
    let r = ddl(&dir, &["experiment", "--spec", g, "--out", o, "--dry-run"]);
    let t = text(&r);
    assert!(r.status.success() && t.contains("checkpoint does not read"), "{t}");
    let r = ddl(&dir, &["experiment", "--spec", g, "--out", o]);
    let t = text(&r);
    assert!(!r.status.success(), "{t}");
    assert!(
        t.contains("run ddl-seed1:")
            && t.contains("not a valid safetensors file")
            && t.contains(&format!("move '{}' out of the grid", run.display()))
            && t.contains("trains the run again from step 0"),
        "{t}"
    );
    assert!(!t.contains("panicked") && !t.contains("--out NEW"), "{t}");
    let r = ddl(&dir, &["info", "--checkpoint", o]);
    assert!(text(&r).contains("checkpoint does not read"), "{}", text(&r));
    assert!(run.join("model.safetensors").is_file(), "the grid removed the damaged run");
}

/// A run whose metrics.jsonl went while its result was not written yet (the folder changed while
/// the grid ran, or after it stopped): the grid resumes it from its checkpoint, and the metrics
/// then hold the made-up final evaluation alone. It was reported without a word, its training
/// loss and speed NaN; it is refused with the grid's remedy (train it again).
#[test]
fn a_run_without_its_training_metrics_is_refused_not_reported_as_nan() {
    let dir = tmpdir("experiment-no-metrics");
    let out = dir.join("out");
    let mut one = std::fs::read_to_string(spec(&dir, 2)).unwrap();
    one = one
        .replace("variants = [\"baseline\", \"ddl\"]", "variants = [\"ddl\"]")
        .replace("seeds = [1, 2]", "seeds = [1]");
    let s = dir.join("one.toml");
    std::fs::write(&s, one).unwrap();
    let (s, o) = (s.to_str().unwrap(), out.to_str().unwrap());
    let r = ddl(&dir, &["experiment", "--spec", s, "--out", o]);
    assert!(r.status.success(), "{}", text(&r));
    let run = out.join("runs/ddl-seed1");
    for f in ["result.json", "metrics.jsonl"] {
        std::fs::remove_file(run.join(f)).unwrap();
    }
    let r = ddl(&dir, &["experiment", "--spec", s, "--out", o]);
    let t = text(&r);
    assert!(!r.status.success(), "{t}");
    assert!(
        t.contains("run ddl-seed1:")
            && t.contains("no training step")
            && t.contains(&format!("move '{}' out of the grid", run.display()))
            && t.contains("trains the run again from step 0"),
        "{t}"
    );
    assert!(!run.join("result.json").exists(), "{t}");
}

#[test]
fn extra_seeds_give_some_variants_more_runs() {
    // `--dry-run` lists the grid: seeds 1-2 for both variants, 3 and 4 for ddl only, seed-major.
    let dir = tmpdir("extra-seeds");
    let s = spec(&dir, 2);
    let text_ = std::fs::read_to_string(&s)
        .unwrap()
        .replace("seeds = [1, 2]\n", "seeds = [1, 2]\nextra_seeds = { ddl = [3, 4] }\n");
    std::fs::write(&s, text_).unwrap();
    let out = dir.join("out");
    let r = ddl(&dir, &["experiment", "--spec", s.to_str().unwrap(), "--out", out.to_str().unwrap(), "--dry-run"]);
    let t = text(&r);
    assert!(r.status.success(), "{t}");
    assert!(t.contains("6 runs of 2 steps"), "{t}");
    let runs: Vec<&str> =
        t.lines().filter_map(|l| l.split_whitespace().next().filter(|w| w.contains("-seed"))).collect();
    assert_eq!(runs, ["baseline-seed1", "ddl-seed1", "baseline-seed2", "ddl-seed2", "ddl-seed3", "ddl-seed4"], "{t}");
    // A seed in both lists is refused naming it.
    let bad = std::fs::read_to_string(&s).unwrap().replace("ddl = [3, 4]", "ddl = [2]");
    std::fs::write(&s, bad).unwrap();
    let r = ddl(&dir, &["experiment", "--spec", s.to_str().unwrap(), "--out", out.to_str().unwrap(), "--dry-run"]);
    assert!(!r.status.success() && text(&r).contains("seed 2 of 'ddl' is already in seeds"), "{}", text(&r));
}

/// `--jobs 2`: two runs train at once, each on its own device, and every run's numbers (losses,
/// validation curve, β regimes) are the same bits as when the grid trains one run at a time. On
/// a fresh cache every variant's matmul tiles are measured before the jobs start, each shape once.
#[test]
fn jobs_train_runs_at_once_to_the_same_numbers() {
    let dir = tmpdir("experiment-jobs");
    let s = spec(&dir, 4);
    let s = s.to_str().unwrap();
    let (one, two) = (dir.join("one"), dir.join("two"));
    // (Tiles measured, as the other tests' runs do not.)
    let r = ddl::testing::ddl_command(env!("CARGO_BIN_EXE_ddl"), &dir)
        .args(["experiment", "--spec", s, "--out", two.to_str().unwrap(), "--jobs", "2"])
        .env("DDL_NO_AUTOTUNE", "0")
        .output()
        .unwrap();
    let t = text(&r);
    assert!(r.status.success(), "{t}");
    assert!(t.contains("--jobs 2: up to 2 runs at once") && t.contains("beside other runs"), "{t}");
    // Runs side by side still show their progress, each line with the run's name.
    for run in ["baseline-seed1", "baseline-seed2", "ddl-seed1", "ddl-seed2"] {
        assert!(t.contains(&format!("[{run}] step 4 loss")), "{run}: {t}");
        assert!(t.contains(&format!("[{run}] step 2: val loss")), "{run}: {t}");
    }
    // Every variant's matmul tiles were measured before the jobs started, each shape once: no run
    // measures beside another that trains (the first two used to time their tiles side by side,
    // later variants beside running jobs).
    let line = t.lines().find(|l| l.starts_with("tuned the matmul tiles of ")).unwrap_or_else(|| panic!("{t}"));
    let measured: usize =
        line["tuned the matmul tiles of ".len()..].split_whitespace().next().unwrap().parse().unwrap();
    let cached: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cache/matmul-autotune.json")).unwrap()).unwrap();
    assert!(line.contains("for the 2 variant(s)") && line.contains("before the jobs start"), "{t}");
    assert_eq!(measured, cached.len(), "{measured} measured, {} shapes cached: {t}", cached.len());
    assert!(!t.contains("] tuned the matmul tiles"), "a job measured tiles while another trained: {t}");
    let r = ddl(&dir, &["experiment", "--spec", s, "--out", one.to_str().unwrap()]);
    let t = text(&r);
    assert!(r.status.success(), "{t}");
    // One at a time, stderr not a terminal: each run's plain lines, without a name.
    assert!(t.contains("\nstep 4 loss") && t.contains("\nstep 2: val loss") && !t.contains("[ddl-seed1] step"), "{t}");
    assert!(two.join("report.md").is_file(), "{t}");
    for run in ["baseline-seed1", "baseline-seed2", "ddl-seed1", "ddl-seed2"] {
        let res = |out: &Path| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(out.join("runs").join(run).join("result.json")).unwrap())
                .unwrap()
        };
        let (a, b) = (res(&one), res(&two));
        for key in ["final_val_loss", "final_train_loss", "val_curve", "regimes", "beta_mean", "val_tokens"] {
            assert_eq!(a[key], b[key], "{run}: {key}");
        }
    }
    // Ctrl-C while the speed section is measured (every run finished): it stops there, exit 130,
    // no speed.jsonl or report written, and says to run the command again, which finishes them.
    std::fs::remove_file(one.join("speed.jsonl")).unwrap();
    std::fs::remove_file(one.join("report.md")).unwrap();
    let mut child = ddl::testing::ddl_command(env!("CARGO_BIN_EXE_ddl"), &dir)
        .args(["experiment", "--spec", s, "--out", one.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut err, &mut line).unwrap() == 0 {
            panic!("no speed measurement began: {seen}");
        }
        seen.push_str(&line);
        if line.starts_with("speed: ddl against baseline") {
            break;
        }
    }
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    std::io::Read::read_to_string(&mut err, &mut seen).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen}");
    assert!(
        seen.contains("Ctrl-C during the speed measurement: every run is finished; run the same command"),
        "{seen}"
    );
    assert!(!one.join("speed.jsonl").exists() && !one.join("report.md").exists(), "{seen}");
    let r = ddl(&dir, &["experiment", "--spec", s, "--out", one.to_str().unwrap()]);
    assert!(r.status.success() && one.join("speed.jsonl").is_file() && one.join("report.md").is_file(), "{}", text(&r));
    // A bad count is a clear error.
    let r = ddl(&dir, &["experiment", "--spec", s, "--out", two.to_str().unwrap(), "--jobs", "0"]);
    assert!(!r.status.success() && text(&r).contains("--jobs"), "{}", text(&r));
}

/// A grid without the baseline finishes with its report: the speed section (steps against the
/// baseline's) says why it is not measured (it failed the whole report, on every re-run).
#[test]
fn a_grid_without_the_baseline_writes_its_report() {
    let dir = tmpdir("no-baseline");
    let s = spec(&dir, 2);
    let text_ = std::fs::read_to_string(&s)
        .unwrap()
        .replace("variants = [\"baseline\", \"ddl\"]", "variants = [\"ddl\", \"ddl_v1\"]")
        .replace("seeds = [1, 2]", "seeds = [1]");
    std::fs::write(&s, text_).unwrap();
    let out = dir.join("out");
    let r = ddl(&dir, &["experiment", "--spec", s.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", text(&r));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("this grid has no baseline variant"), "{md}");
    let (sp, o) = (s.to_str().unwrap(), out.to_str().unwrap());
    // A run folder trained with other settings (restored from another grid): refused, by
    // --dry-run too, naming the setting (it was reported as the spec's).
    let cfg = out.join("runs/ddl-seed1/config.toml");
    let kept = std::fs::read_to_string(&cfg).unwrap();
    let lr = kept.lines().find(|l| l.starts_with("lr = ")).unwrap().to_string();
    std::fs::write(&cfg, kept.replace(&lr, "lr = 0.0123")).unwrap();
    for extra in [&[][..], &["--dry-run"][..]] {
        let r = ddl(&dir, &[&["experiment", "--spec", sp, "--out", o][..], extra].concat());
        let t = text(&r);
        assert!(
            !r.status.success()
                && t.contains("was trained with other settings")
                && t.contains("train.lr = 0.0123 there"),
            "{t}"
        );
    }
    std::fs::write(&cfg, &kept).unwrap();
    // The grid's copy of its spec edited into something that does not read: said so, with the
    // parser's words and the remedy (it read as a spec of other settings, "unreadable").
    let copy = out.join("experiment.toml");
    let spec_kept = std::fs::read_to_string(&copy).unwrap();
    std::fs::write(&copy, "garbage = [\n").unwrap();
    let r = ddl(&dir, &["experiment", "--spec", sp, "--out", o, "--dry-run"]);
    assert!(!r.status.success() && text(&r).contains("does not read") && text(&r).contains("cp SPEC"), "{}", text(&r));
    std::fs::write(&copy, &spec_kept).unwrap();
    // Another live process working in the folder (PID 1 always runs on Linux): --dry-run refuses
    // as the grid would (it listed the runs as new); `ddl info` says a run trains now.
    if Path::new("/proc/1").exists() {
        let lock = out.join(ddl::train::lock::LOCK_FILE);
        std::fs::write(&lock, format!("1 {}\n", ddl::train::lock::host_name())).unwrap();
        let r = ddl(&dir, &["experiment", "--spec", sp, "--out", o, "--dry-run"]);
        assert!(!r.status.success() && text(&r).contains("in use by process 1"), "{}", text(&r));
        std::fs::remove_file(&lock).unwrap();
        let run_lock = out.join("runs/ddl-seed1").join(ddl::train::lock::LOCK_FILE);
        std::fs::write(&run_lock, format!("1 {}\n", ddl::train::lock::host_name())).unwrap();
        let r = ddl(&dir, &["info", "--checkpoint", o]);
        let t = text(&r);
        assert!(t.contains("training now (process 1 on") && t.contains("the experiment is running"), "{t}");
        assert!(!t.contains("continue it"), "{t}");
        std::fs::remove_file(&run_lock).unwrap();
    }
    let r = ddl(&dir, &["experiment", "--spec", s.to_str().unwrap(), "--out", out.to_str().unwrap(), "--speed"]);
    assert!(!r.status.success() && text(&r).contains("add \"baseline\""), "{}", text(&r));
    // The baseline alone: nothing to time against it, said so (it read "Not measured yet", also
    // after --speed).
    let only = dir.join("only.toml");
    std::fs::write(&only, std::fs::read_to_string(&s).unwrap().replace("[\"ddl\", \"ddl_v1\"]", "[\"baseline\"]"))
        .unwrap();
    let out = dir.join("only");
    let r = ddl(&dir, &["experiment", "--spec", only.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", text(&r));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("has no variant besides the baseline") && !md.contains("Not measured yet"), "{md}");
    let r = ddl(&dir, &["experiment", "--spec", only.to_str().unwrap(), "--out", out.to_str().unwrap(), "--speed"]);
    assert!(!r.status.success() && text(&r).contains("has only the baseline"), "{}", text(&r));
}

/// A grid whose corpus was edited after some runs trained starts no new run (it would pair runs
/// trained on different texts), naming the data on both sides and the remedy; a report over runs
/// whose records name different data says so.
#[test]
fn a_grid_refuses_new_runs_on_an_edited_corpus() {
    let dir = tmpdir("edited-corpus");
    let s = spec(&dir, 2);
    let one = std::fs::read_to_string(&s).unwrap().replace("seeds = [1, 2]", "seeds = [1]");
    std::fs::write(&s, &one).unwrap();
    let out = dir.join("out");
    let args = ["experiment", "--spec", s.to_str().unwrap(), "--out", out.to_str().unwrap(), "--no-autotune"];
    let r = ddl(&dir, &args);
    assert!(r.status.success(), "{}", text(&r));
    // The dry run says what the folder holds, and refuses what the run would refuse.
    std::fs::write(&s, one.replace("seeds = [1]", "seeds = [1, 2]")).unwrap();
    let dry = ["experiment", "--spec", s.to_str().unwrap(), "--out", out.to_str().unwrap(), "--dry-run"];
    let t = text(&ddl(&dir, &dry));
    assert!(t.contains("4 runs of 2 steps") && t.contains("2 finished, 0 to resume, 2 new"), "{t}");
    let state = |run: &str| t.lines().find(|l| l.trim_start().starts_with(run)).unwrap_or("").to_string();
    assert!(state("ddl-seed1").ends_with("finished") && state("ddl-seed2").ends_with("new"), "{t}");
    std::fs::write(&s, one.replace("steps = 2", "steps = 3")).unwrap();
    let r = ddl(&dir, &dry);
    assert!(!r.status.success() && text(&r).contains("steps: 2 → 3"), "{}", text(&r));
    std::fs::write(&s, one.replace("seeds = [1]", "seeds = [1, 2]")).unwrap();
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, std::fs::read_to_string(&corpus).unwrap() + "\nEDITED\n").unwrap();
    let sets = || -> Vec<std::ffi::OsString> {
        let mut v: Vec<_> =
            std::fs::read_dir(dir.join("cache/shards")).unwrap().map(|e| e.unwrap().file_name()).collect();
        v.sort();
        v
    };
    let before = sets();
    let r = ddl(&dir, &dry);
    assert!(!r.status.success() && text(&r).contains("training data changed"), "{}", text(&r));
    assert_eq!(sets(), before, "a dry run leaves the cache as it was");
    let r = ddl(&dir, &args);
    let t = text(&r);
    assert!(!r.status.success(), "{t}");
    assert!(before.iter().all(|s| dir.join("cache/shards").join(s).exists()), "a refused run keeps the trained-on set");
    assert!(t.contains("training data changed") && t.contains("restore the corpus") && t.contains("new --out"), "{t}");
    assert!(!out.join("runs/baseline-seed2").exists(), "no new run started: {t}");
    // Records that differ (a grid mixed by an earlier version): the report warns.
    let rec = out.join("runs/ddl-seed1/data.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&rec).unwrap()).unwrap();
    v["key"] = serde_json::json!("0123456789abcdef");
    std::fs::write(&rec, v.to_string()).unwrap();
    std::fs::write(&s, &one).unwrap();
    let r = ddl(&dir, &["experiment", "--spec", s.to_str().unwrap(), "--out", out.to_str().unwrap(), "--report-only"]);
    assert!(r.status.success(), "{}", text(&r));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("Warning: these runs trained on different data"), "{md}");
}

/// `ablate` added to a finished grid: its delta-write runs are ablated from their checkpoints
/// (nothing trained again), each result keeps its ablations, and the report gains the section
/// and its plot. The numbers are `ddl eval --ablate`'s on the same checkpoint; a run already
/// ablated is not ablated again; `--dry-run` and `--report-only` name the runs still to ablate;
/// a run kept without its checkpoint is named, not fatal.
#[test]
fn ablations_are_added_to_a_finished_grid_from_its_checkpoints() {
    let dir = tmpdir("experiment-ablate");
    let s = spec(&dir, 2);
    let out = dir.join("out");
    let (sp, o) = (s.to_str().unwrap(), out.to_str().unwrap());
    let r = ddl(&dir, &["experiment", "--spec", sp, "--out", o]);
    assert!(r.status.success(), "{}", text(&r));
    let report = || std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(!report().contains("ablation") && !out.join("ablations.png").exists(), "{}", report());
    let metrics = |run: &str| std::fs::read(out.join("runs").join(run).join("metrics.jsonl")).unwrap();
    let before = metrics("ddl-seed1");
    // The spec now asks for the write's parts (keys before the [model] table).
    let asked = std::fs::read_to_string(&s)
        .unwrap()
        .replace("beta_batches = 2\n", "beta_batches = 2\nablate = [\"v\", \"write\", \"erase\"]\n");
    std::fs::write(&s, asked).unwrap();
    let r = ddl(&dir, &["experiment", "--spec", sp, "--out", o, "--dry-run"]);
    let t = text(&r);
    assert!(r.status.success() && t.contains("4 finished"), "{t}");
    let state = |run: &str| t.lines().find(|l| l.trim_start().starts_with(run)).unwrap_or_else(|| panic!("{run}: {t}"));
    assert!(
        state("ddl-seed1").ends_with("finished, to ablate") && state("baseline-seed1").ends_with("finished"),
        "{t}"
    );
    let r = ddl(&dir, &["experiment", "--spec", sp, "--out", o, "--report-only"]);
    assert!(r.status.success(), "{}", text(&r));
    assert!(report().contains("**Not ablated yet (left out of this section):** ddl-seed1, ddl-seed2"), "{}", report());
    let result = |run: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(out.join("runs").join(run).join("result.json")).unwrap()).unwrap()
    };
    // Ctrl-C as the second run's ablations start: they stop at their first batch, the first run's
    // are kept, the second's result is as it was, the exit status is Ctrl-C's.
    let r = ddl::testing::ddl_command(env!("CARGO_BIN_EXE_ddl"), &dir)
        .args(["experiment", "--spec", sp, "--out", o])
        .env("DDL_FAULT_INTERRUPT_ABLATION", "2")
        .output()
        .unwrap();
    let t = text(&r);
    assert_eq!(r.status.code(), Some(130), "{t}");
    assert!(t.contains("ddl-seed1: finished earlier, not re-run"), "{t}");
    assert!(t.contains("ddl-seed1: each sublayer's write without its write / erase / v in turn"), "{t}");
    assert!(!t.contains("baseline-seed1: each sublayer"), "{t}");
    assert!(t.contains("ddl-seed2: its ablations were stopped before their end; nothing of them was kept"), "{t}");
    assert!(t.contains("Ctrl-C during the ablations: the runs ablated so far are kept"), "{t}");
    assert!(result("ddl-seed1").get("ablations").is_some() && result("ddl-seed2").get("ablations").is_none(), "{t}");
    // The same command goes on: the runs are not trained again; the second ddl run is ablated.
    let r = ddl(&dir, &["experiment", "--spec", sp, "--out", o]);
    let t = text(&r);
    assert!(r.status.success(), "{t}");
    assert!(t.contains("ddl-seed2: each sublayer's write without its write / erase / v in turn"), "{t}");
    assert!(!t.contains("ddl-seed1: each sublayer") && !t.contains("baseline-seed1: each sublayer"), "{t}");
    assert_eq!(metrics("ddl-seed1"), before, "ablating trained nothing");
    assert!(result("baseline-seed1").get("ablations").is_none());
    let a = result("ddl-seed1")["ablations"].clone();
    let rows = a["rows"].as_array().unwrap();
    // One block: two sublayers × three parts, over the whole validation split.
    assert_eq!(rows.len(), 6, "{a}");
    assert_eq!((a["batches"].as_u64(), a["tokens"].as_u64()), (Some(0), result("ddl-seed1")["val_tokens"].as_u64()));
    // The same numbers as `ddl eval --ablate` on the run's checkpoint.
    let e = ddl(
        &dir,
        &["eval", "--checkpoint", out.join("runs/ddl-seed1").to_str().unwrap(), "--ablate", "write,erase,v", "--json"],
    );
    assert!(e.status.success(), "{}", text(&e));
    let e: serde_json::Value = serde_json::from_slice(&e.stdout).unwrap();
    assert_eq!(a["loss"], e["loss"], "{a}\n{e}");
    for (mine, theirs) in rows.iter().zip(e["ablations"].as_array().unwrap()) {
        for key in ["sublayer", "part", "loss", "difference"] {
            assert_eq!(mine[key], theirs[key], "{key}: {mine} vs {theirs}");
        }
    }
    let md = report();
    for needle in [
        "## What each part of the write carries (ablations)",
        "| ddl | block0.attn | write=0 | 2 |",
        "| ddl | block0.mlp | v=0 − write=0 | 2 |",
        "**ddl** (2 seeds): removing the whole write",
        "`ablations.png`",
    ] {
        assert!(md.contains(needle), "report lacks {needle:?}:\n{md}");
    }
    assert!(!md.contains("Not ablated yet"), "{md}");
    let png = std::fs::read(out.join("ablations.png")).unwrap();
    assert!(&png[1..4] == b"PNG" && png.len() > 5_000, "{} bytes", png.len());
    // Again: nothing left to ablate.
    let r = ddl(&dir, &["experiment", "--spec", sp, "--out", o]);
    assert!(r.status.success() && !text(&r).contains("each sublayer's write without"), "{}", text(&r));
    // The spec asks for fewer batches: a run whose checkpoint is gone is named and left out.
    let fewer = std::fs::read_to_string(&s).unwrap().replace("ablate = [", "ablate_batches = 1\nablate = [");
    std::fs::write(&s, fewer).unwrap();
    std::fs::remove_file(out.join("runs/ddl-seed2/model.safetensors")).unwrap();
    let r = ddl(&dir, &["experiment", "--spec", sp, "--out", o]);
    let t = text(&r);
    assert!(r.status.success(), "{t}");
    assert!(t.contains("warning: ddl-seed2 cannot be ablated") && t.contains("model.safetensors"), "{t}");
    assert_eq!(result("ddl-seed1")["ablations"]["batches"], 1, "{t}");
    let md = report();
    assert!(md.contains("**Not ablated yet (left out of this section):** ddl-seed2"), "{md}");
    assert!(
        md.contains("| ddl | block0.attn | write=0 | 1 | ")
            && md.contains("**ddl** (1 seed): too few seeds to test")
            && md.contains("the validation split's first batch ("),
        "{md}"
    );
    // A part the run does not hold (here its erase rows taken out of its result) is ablated
    // alone: the rows it holds stay as they are, the new ones are the same numbers as before.
    let whole = result("ddl-seed1");
    let mut partial = whole.clone();
    partial["ablations"]["rows"].as_array_mut().unwrap().retain(|r| r["part"] != "erase");
    let path = out.join("runs/ddl-seed1/result.json");
    std::fs::write(&path, serde_json::to_string_pretty(&partial).unwrap()).unwrap();
    let r = ddl(&dir, &["experiment", "--spec", sp, "--out", o]);
    let t = text(&r);
    assert!(r.status.success(), "{t}");
    assert!(t.contains("ddl-seed1: each sublayer's write without its erase in turn"), "{t}");
    assert_eq!(result("ddl-seed1")["ablations"], whole["ablations"], "{t}");
    // Rows held against another loss of the model as trained (results restored from another
    // adapter) are not mixed with new ones: every part is measured again.
    partial["ablations"]["loss"] = serde_json::json!(whole["ablations"]["loss"].as_f64().unwrap() + 0.5);
    partial["ablations"]["rows"].as_array_mut().unwrap().iter_mut().for_each(|r| r["difference"] = 9.0.into());
    std::fs::write(&path, serde_json::to_string_pretty(&partial).unwrap()).unwrap();
    let r = ddl(&dir, &["experiment", "--spec", sp, "--out", o]);
    assert!(r.status.success(), "{}", text(&r));
    assert_eq!(result("ddl-seed1")["ablations"], whole["ablations"], "{}", text(&r));
    // Without `ablate`: no section, no plot left behind.
    let none = std::fs::read_to_string(&s)
        .unwrap()
        .replace("ablate_batches = 1\n", "")
        .replace("ablate = [\"v\", \"write\", \"erase\"]\n", "");
    std::fs::write(&s, none).unwrap();
    let r = ddl(&dir, &["experiment", "--spec", sp, "--out", o, "--report-only"]);
    assert!(r.status.success(), "{}", text(&r));
    assert!(!report().contains("ablation") && !out.join("ablations.png").exists(), "{}", report());
}

/// `experiments/length_extrapolation.py` (the grid README's length arithmetic) refuses a
/// `--check` that is not a folder of runs (it printed the fit without the check, as if the path
/// held no run of these variants), says when a checked folder lacks one of the variants, and
/// names the runs a folder holds when `--variants` or `--seed` names none of them.
#[test]
fn the_length_extrapolation_names_a_check_folder_that_holds_no_runs() {
    let script = ddl::testing::data_path("experiments/length_extrapolation.py");
    let py = |args: &[&str]| Command::new("python3").arg(&script).args(args).output().expect("running python3");
    let dir = tmpdir("length-extrapolation");
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("no-such-runs");
    let o = py(&["--check", missing.to_str().unwrap()]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains(&format!("--check {}: not a folder", missing.display())), "{t}");
    let k32 = ddl::testing::data_path("docs/experiments/shakespeare-32k-lavapipe/runs");
    let o = py(&["--check", k32.to_str().unwrap()]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("baseline: predicted +0.0112 over the last fifth at 32000 steps, measured +0.0154"), "{t}");
    assert!(t.contains("ddl: no finished run ddl-seed1 in --check"), "{t}");
    let o = py(&["--variants", "baseline", "--seed", "9"]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("no finished run 'baseline-seed9' there") && t.contains("baseline-seed5, ddl-seed1"), "{t}");
}

/// A grid whose runs were kept as `scripts/experiment-runs.sh save` keeps them (result.json and
/// config.toml: docs/experiments/'s): `ddl plot` says that is why it has no curve and where the
/// curves are (it said "no metrics.jsonl yet (not started)" of finished runs and advised another
/// metric, which could not help), and `ddl info --checkpoint` no longer advises `ddl plot` there.
#[test]
fn a_grid_kept_without_its_metrics_is_not_said_to_be_unstarted() {
    let dir = tmpdir("experiment-kept-plot");
    let kept = ddl::testing::data_path("docs/experiments/shakespeare-32k-lavapipe");
    let png = dir.join("curves.png");
    let r = ddl(&dir, &["plot", kept.to_str().unwrap(), "--out", png.to_str().unwrap()]);
    let t = text(&r);
    assert!(!r.status.success() && !png.exists(), "{t}");
    assert!(t.contains("kept without its metrics.jsonl") && t.contains("report has its curves (val_loss.png)"), "{t}");
    assert!(!t.contains("not started") && !t.contains("choose another metric"), "{t}");
    let r = ddl(&dir, &["info", "--checkpoint", kept.to_str().unwrap()]);
    let t = text(&r);
    assert!(r.status.success(), "{t}");
    assert!(t.contains("curves: the report's val_loss.png") && !t.contains("--out curves.png"), "{t}");
}

/// A spec's relative corpus (taken from the current directory) is kept absolute in the grid's
/// experiment.toml, as the runs' config.toml keep it: the grid is reported (`--report-only` with
/// its experiment.toml as the spec) and described from any other directory (it was "corpus = \"c.txt\":
/// no such file"), and the same spec run again where it was written is the same spec. (Its
/// length is given as `epochs`, which experiment.toml keeps and the report says.)
#[test]
fn a_grid_with_a_relative_corpus_is_found_from_any_directory() {
    let dir = tmpdir("experiment-relative-corpus");
    let corpus = ddl::testing::small_corpus(&dir);
    let text_of = std::fs::read_to_string(spec(&dir, 1)).unwrap();
    let relative = text_of.replace(&format!("corpus = \"{corpus}\""), "corpus = \"corpus.txt\"");
    let relative = relative.replace("variants = [\"baseline\", \"ddl\"]", "variants = [\"baseline\"]");
    let relative = relative.replace("seeds = [1, 2]", "seeds = [1]");
    // (Its length as epochs: 0.01 of the training split, said in experiment.toml and the report.)
    let relative = relative.replace("steps = 1\n", "epochs = 0.01\n");
    assert!(relative.contains("corpus = \"corpus.txt\""), "{relative}");
    std::fs::write(dir.join("rel.toml"), relative).unwrap();
    let run = |cwd: &Path, args: &[&str]| {
        ddl::testing::ddl_command(env!("CARGO_BIN_EXE_ddl"), &dir).current_dir(cwd).args(args).output().unwrap()
    };
    let r = run(&dir, &["experiment", "--spec", "rel.toml", "--out", "grid"]);
    assert!(r.status.success(), "{}", text(&r));
    let copy = std::fs::read_to_string(dir.join("grid/experiment.toml")).unwrap();
    let absolute = std::fs::canonicalize(&corpus).unwrap().display().to_string();
    assert!(copy.contains(&format!("corpus = \"{absolute}\"")), "{copy}");
    assert!(copy.contains("epochs = 0.01") && copy.contains("steps = "), "{copy}");
    let report = std::fs::read_to_string(dir.join("grid/report.md")).unwrap();
    assert!(report.contains("; `epochs = 0.01`: passes over the training split)"), "{report}");
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let g = dir.join("grid");
    let g = g.to_str().unwrap();
    let own = format!("{g}/experiment.toml");
    let r = run(&elsewhere, &["experiment", "--spec", &own, "--out", g, "--report-only"]);
    assert!(r.status.success(), "{}", text(&r));
    let r = run(&elsewhere, &["info", "--checkpoint", g]);
    assert!(r.status.success() && !text(&r).contains("without a readable experiment.toml"), "{}", text(&r));
    let r = run(&dir, &["experiment", "--spec", "rel.toml", "--out", "grid"]);
    assert!(r.status.success() && text(&r).contains("finished earlier, not re-run"), "{}", text(&r));
}
