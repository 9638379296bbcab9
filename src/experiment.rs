//! `ddl experiment`: a grid of training runs (variants × seeds with shared settings), run one
//! after another and resumable, then a report comparing the variants: `report.md` (a table with
//! mean ± std over seeds and the paper's numbers beside it), `val_loss.png` (mean curves with a
//! band per variant), `comparisons.png` (each paired difference of the report's family with its
//! 95 % interval, significant after Holm or not) and `beta_regimes.png` (identity / projection / reflection shares of β per
//! sublayer on validation text at the end of training).
//!
//! Matched comparison: every run of one seed sees the same batches in the same order (the batch
//! sampler depends only on the seed and the step), the same number of steps and tokens, and the
//! same tokenizer; only the architecture (and so the initialisation) differs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::gpu::Gpu;
use crate::model::{Model, Variant};
use crate::stats;
use crate::train::{RunConfig, TrainError, TrainOptions, checkpoint, data, plot};

/// An experiment spec (`experiments/NAME.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    /// A title for the report.
    #[serde(default)]
    pub name: String,
    /// Free text shown at the top of the report.
    #[serde(default)]
    pub description: String,
    /// Model and schedule preset shared by every run.
    pub preset: String,
    /// Variants to compare, in report order.
    pub variants: Vec<String>,
    /// One run per (variant, seed); a seed fixes the initialisation and the batch order.
    pub seeds: Vec<u64>,
    /// More seeds for some variants (e.g. the core comparison), as `variant = [seeds]`.
    #[serde(default)]
    pub extra_seeds: BTreeMap<String, Vec<u64>>,
    /// Optimizer steps of every run (also the schedule's length unless `[train] decay_steps` is set).
    pub steps: usize,
    /// Corpus and tokenizer (default: the preset's, TinyShakespeare and `char`).
    #[serde(default)]
    pub corpus: Option<String>,
    #[serde(default)]
    pub tokenizer: Option<String>,
    /// Overrides of the model config applied to every variant (as in a run's `[model]` table).
    #[serde(default)]
    pub model: toml::Table,
    /// Overrides of the training config (batch, learning rate, eval cadence ...).
    #[serde(default)]
    pub train: toml::Table,
    /// Validation batches on which the final β regimes are counted.
    #[serde(default = "default_beta_batches")]
    pub beta_batches: usize,
}

fn default_beta_batches() -> usize {
    4
}

/// What is wrong with a spec or a run of the grid.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error("{path}: {msg}")]
    Spec { path: PathBuf, msg: String },
    /// (Boxed: a training error is large, and every grid function returns this type.)
    #[error("run {run}: {source}")]
    Train { run: String, source: Box<TrainError> },
    #[error(transparent)]
    Locked(#[from] crate::train::lock::LockError),
    #[error("run {run}: {msg}")]
    Run { run: String, msg: String },
    #[error("cannot write '{path}': {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Report(String),
}

impl ExperimentSpec {
    /// Reads and checks a spec file.
    pub fn load(path: &Path) -> Result<ExperimentSpec, ExperimentError> {
        let err = |msg: String| ExperimentError::Spec { path: path.to_path_buf(), msg };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read the spec: {e}")))?;
        Self::parse(&text, path)
    }

    /// Parses and checks the text of a spec (`path` names it in errors).
    pub fn parse(text: &str, path: &Path) -> Result<ExperimentSpec, ExperimentError> {
        let err = |msg: String| ExperimentError::Spec { path: path.to_path_buf(), msg };
        let spec: ExperimentSpec = toml::from_str(text).map_err(|e| err(e.message().to_string()))?;
        spec.check().map_err(err)?;
        // Every run's config must resolve now, not an hour into the grid.
        for v in spec.variant_list().map_err(err)? {
            for s in spec.seeds_of(v) {
                spec.run_config(v, s).map_err(|m| err(format!("variant {v}, seed {s}: {m}")))?;
            }
        }
        Ok(spec)
    }

    fn check(&self) -> Result<(), String> {
        if self.variants.is_empty() {
            return Err("variants: expected at least one variant".into());
        }
        if self.seeds.is_empty() {
            return Err("seeds: expected at least one seed".into());
        }
        let mut seen = std::collections::HashSet::new();
        for s in &self.seeds {
            if !seen.insert(*s) {
                return Err(format!("seeds: seed {s} appears twice"));
            }
        }
        for (name, extra) in &self.extra_seeds {
            let v = Variant::parse(name).map_err(|e| format!("extra_seeds: {e}"))?;
            if !self.variants.iter().any(|n| Variant::parse(n).ok() == Some(v)) {
                return Err(format!("extra_seeds: '{name}' is not one of the spec's variants"));
            }
            if let Some(s) = extra.iter().find(|s| self.seeds.contains(s)) {
                return Err(format!("extra_seeds: seed {s} of '{name}' is already in seeds"));
            }
            let mut own = std::collections::HashSet::new();
            if let Some(s) = extra.iter().find(|s| !own.insert(**s)) {
                return Err(format!("extra_seeds: seed {s} appears twice for '{name}'"));
            }
        }
        if self.steps == 0 {
            return Err("steps: expected at least 1".into());
        }
        if self.beta_batches == 0 {
            return Err("beta_batches: expected at least 1".into());
        }
        Ok(())
    }

    /// The seeds variant `v` runs: `seeds`, then its `extra_seeds`.
    pub fn seeds_of(&self, v: Variant) -> Vec<u64> {
        let extra = self.extra_seeds.iter().find(|(n, _)| Variant::parse(n).ok() == Some(v)).map(|(_, s)| s);
        self.seeds.iter().chain(extra.into_iter().flatten()).copied().collect()
    }

    /// Every seed of the grid, ascending.
    pub fn all_seeds(&self) -> Vec<u64> {
        let all: BTreeSet<u64> = self.seeds.iter().chain(self.extra_seeds.values().flatten()).copied().collect();
        all.into_iter().collect()
    }

    /// The variants, parsed, in spec order (no duplicates).
    pub fn variant_list(&self) -> Result<Vec<Variant>, String> {
        let mut out: Vec<Variant> = Vec::new();
        for name in &self.variants {
            let v = Variant::parse(name).map_err(|e| format!("variants: {e}"))?;
            if out.contains(&v) {
                return Err(format!("variants: '{name}' appears twice"));
            }
            out.push(v);
        }
        Ok(out)
    }

    /// The resolved config of one run of the grid.
    pub fn run_config(&self, variant: Variant, seed: u64) -> Result<RunConfig, String> {
        let mut run = RunConfig::preset(&self.preset, variant).map_err(|e| e.to_string())?;
        let mut overlay = toml::Table::new();
        if let Some(c) = &self.corpus {
            overlay.insert("corpus".into(), toml::Value::String(c.clone()));
        }
        if let Some(t) = &self.tokenizer {
            overlay.insert("tokenizer".into(), toml::Value::String(t.clone()));
        }
        if !self.model.is_empty() {
            overlay.insert("model".into(), toml::Value::Table(self.model.clone()));
        }
        let mut train = self.train.clone();
        if train.contains_key("seed") {
            return Err("[train] seed: seeds come from the spec's `seeds` list".into());
        }
        train.insert("seed".into(), toml::Value::Integer(seed as i64));
        // The schedule spans the run unless the spec says otherwise.
        if !train.contains_key("decay_steps") {
            train.insert("decay_steps".into(), toml::Value::Integer(self.steps as i64));
            if !train.contains_key("warmup_steps") && run.train.warmup_steps > self.steps / 5 {
                train.insert("warmup_steps".into(), toml::Value::Integer((self.steps / 10).max(1) as i64));
            }
        }
        overlay.insert("train".into(), toml::Value::Table(train));
        let text = toml::to_string(&overlay).map_err(|e| e.to_string())?;
        run.merge_toml(&text, "spec")?;
        run.validate().map_err(|e| e.to_string())?;
        Ok(run)
    }
}

/// The name of a run's directory under `OUT/runs/`.
pub fn run_name(variant: Variant, seed: u64) -> String {
    format!("{}-seed{seed}", variant.name())
}

/// Per-sublayer counts of tokens in each regime: [identity, projection, reflection].
pub type RegimeCounts = Vec<[u64; 3]>;

/// What one finished run contributes to the report (`runs/NAME/result.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    pub variant: String,
    pub seed: u64,
    pub params: usize,
    pub steps: usize,
    pub tokens: u64,
    /// Mean training loss over the last tenth of the steps (at least one step).
    pub final_train_loss: f64,
    pub final_val_loss: f64,
    /// (step, validation loss) at every evaluation.
    pub val_curve: Vec<(f64, f64)>,
    /// Median training throughput.
    pub tok_per_s: f64,
    /// Wall time of the training, seconds.
    pub elapsed_s: f64,
    /// Per sublayer: tokens with β < 0.5, in [0.5, 1.5], > 1.5 on the validation batches.
    pub regimes: RegimeCounts,
    /// Mean β per sublayer on the same tokens.
    pub beta_mean: Vec<f64>,
    /// Validation tokens `final_val_loss` covers (the whole split, or `train.val_max_tokens`;
    /// 0 in results made before the final evaluation covered the whole split).
    #[serde(default)]
    pub val_tokens: usize,
    /// The engine's commit and whether its tree was "clean" or "dirty" ([`crate::build_commit`]).
    #[serde(default)]
    pub commit: String,
    #[serde(default)]
    pub dirty: String,
    /// The adapter that trained it (name and backend, as `ddl info` says); empty in results made
    /// before it was recorded. Adapters round differently (their kernel forms differ), so a
    /// report says which ones made its runs.
    #[serde(default)]
    pub adapter: String,
}

/// Options of [`run`].
pub struct ExperimentOptions {
    pub out: PathBuf,
    /// Only rebuild the report from the finished runs.
    pub report_only: bool,
    /// Measure the speed section again (see [`measure_speed`]), even where it was measured.
    pub speed: bool,
    pub quiet: bool,
    /// More devices (other instances of the same adapter): with k of them, up to k + 1 runs
    /// train at once, each on its own device (`ddl experiment --jobs`), for a machine one run
    /// leaves partly idle (a small model on a GPU, a CPU adapter's cores between dispatches).
    /// Each run's numbers are the same bits as one at a time. Their step lines are then left
    /// out of the output (each run's `metrics.jsonl` has them).
    pub more_devices: Vec<Arc<Gpu>>,
}

/// The file of the report's speed section in the experiment's folder.
pub const SPEED_FILE: &str = "speed.jsonl";
/// Blocks (A B B A) per variant in the speed section: 12 give the median ratio's 95 % interval.
pub const SPEED_BLOCKS: usize = 12;

/// The speed section: each variant's training step against the baseline's at the grid's model and
/// batch (the config its first finished run saved), the two alternated in one process
/// ([`crate::bench::train_compare_rows`], what `ddl bench train --against baseline` runs), written
/// to `OUT/speed.jsonl` with the adapter and the engine's commit. Not the grid's wall clock: its
/// runs share a machine with whatever else runs. Needs a finished baseline run.
pub fn measure_speed(gpu: &Arc<Gpu>, spec: &ExperimentSpec, out: &Path, quiet: bool) -> Result<(), ExperimentError> {
    let variants =
        spec.variant_list().map_err(|m| ExperimentError::Spec { path: out.join("experiment.toml"), msg: m })?;
    let saved = |v: Variant| -> Result<RunConfig, ExperimentError> {
        let seed = spec
            .seeds_of(v)
            .into_iter()
            .find(|&s| result_of(&out.join("runs").join(run_name(v, s)), spec.steps).is_some())
            .ok_or_else(|| ExperimentError::Report(format!("speed: {} has no finished run to measure", v.name())))?;
        let path = out.join("runs").join(run_name(v, seed)).join("config.toml");
        let text =
            std::fs::read_to_string(&path).map_err(|source| ExperimentError::Io { path: path.clone(), source })?;
        toml::from_str(&text).map_err(|e| ExperimentError::Report(format!("speed: {}: {e}", path.display())))
    };
    let base = saved(Variant::Baseline)?;
    let (batch, seq) = (base.train.batch_size, base.train.seq_len);
    let (commit, dirty) = crate::build_commit();
    let mut text = String::new();
    for &v in variants.iter().filter(|&&v| v != Variant::Baseline) {
        let cfg = saved(v)?;
        if !quiet {
            eprintln!("speed: {} against baseline, {SPEED_BLOCKS} blocks of 4 steps at {batch} × {seq}", v.name());
        }
        let mut row = None;
        crate::bench::train_compare_rows(
            gpu,
            None,
            &cfg.model,
            &base.model,
            batch,
            seq,
            SPEED_BLOCKS,
            false,
            crate::model::Precision::F32,
            |r| row = Some(r.0),
        )
        .map_err(|e| ExperimentError::Report(format!("speed: {} against baseline: {e:#}", v.name())))?;
        let mut row = row.ok_or_else(|| ExperimentError::Report("speed: the benchmark gave no row".into()))?;
        row["adapter"] = serde_json::json!(gpu.info.name);
        row["commit"] = serde_json::json!(commit);
        row["dirty"] = serde_json::json!(dirty);
        text.push_str(&format!("{row}\n"));
    }
    let path = out.join(SPEED_FILE);
    checkpoint::write_atomic(&path, text.as_bytes()).map_err(|source| ExperimentError::Io { path, source })
}

/// The rows of `OUT/speed.jsonl` (none when it is missing).
fn speed_rows(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join(SPEED_FILE))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The speed section of the report from `OUT/speed.jsonl`, or why there is none.
fn speed_section(out: &Path) -> String {
    let mut md = String::from("## Speed\n\n");
    let rows = speed_rows(out);
    let Some(first) = rows.first() else {
        md.push_str(
            "Not measured yet: the experiment measures it once its runs are finished (`ddl experiment … --speed` \
             measures it now).\n\n",
        );
        return md;
    };
    let commit = first["commit"].as_str().unwrap_or("");
    md.push_str(&format!(
        "Each variant's training step against the baseline's at this grid's model and batch ({} × {}), the two \
         alternated in one process in blocks of four steps (baseline, variant, variant, baseline; what `ddl bench \
         train --against baseline` does), measured after the runs on {} by engine {} ({}): median step, and the \
         median over blocks of the block's time ratio with its distribution-free 95 % interval. Not the runs' \
         wall clock, which depends on what else ran on the machine.\n\n",
        first["batch"],
        first["seq"],
        first["adapter"].as_str().unwrap_or("?"),
        &commit[..commit.len().min(12)],
        first["dirty"].as_str().unwrap_or("?"),
    ));
    md.push_str("| variant | step (ms) | baseline step (ms) | time ÷ baseline time | 95 % interval | blocks |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|\n");
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    for r in &rows {
        let ci = r["ratio_median_ci95"]
            .as_array()
            .map(|c| format!("[{:.3}, {:.3}]", f(&c[0]), f(&c[1])))
            .unwrap_or_else(|| "n/a".into());
        md.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.3} | {ci} | {} |\n",
            r["variant"].as_str().unwrap_or("?"),
            f(&r["median_step_ms"]),
            f(&r["against_median_step_ms"]),
            f(&r["ratio_median_block"]),
            r["blocks"]
        ));
    }
    md.push('\n');
    md
}

/// Runs what is not finished yet, then writes the report. Returns the report's path, or `None`
/// when the grid was interrupted (Ctrl-C; run again to continue).
pub fn run(gpu: Arc<Gpu>, spec: &ExperimentSpec, opts: &ExperimentOptions) -> Result<Option<PathBuf>, ExperimentError> {
    let out = &opts.out;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExperimentError::Io { path, source }
    };
    std::fs::create_dir_all(out.join("runs")).map_err(io(&out.join("runs")))?;
    // One experiment per folder at a time (its runs are each locked again by training).
    let _lock = crate::train::lock::RunLock::acquire(out)?;
    // The spec a directory was started with is kept; a different spec needs a new directory.
    let spec_path = out.join("experiment.toml");
    let spec_text = toml::to_string(spec).map_err(|e| ExperimentError::Report(e.to_string()))?;
    if let Ok(old) = std::fs::read_to_string(&spec_path) {
        // The grid may grow (more variants or seeds: the finished runs still count), but the
        // settings every run shares may not change under finished runs.
        let same = |a: &ExperimentSpec, b: &ExperimentSpec| {
            let strip = |s: &ExperimentSpec| ExperimentSpec {
                name: String::new(),
                description: String::new(),
                variants: Vec::new(),
                seeds: Vec::new(),
                extra_seeds: BTreeMap::new(),
                ..s.clone()
            };
            strip(a) == strip(b)
        };
        match toml::from_str::<ExperimentSpec>(&old) {
            Ok(o) if same(&o, spec) => {}
            _ => {
                return Err(ExperimentError::Spec {
                    path: spec_path,
                    msg: "this directory holds an experiment whose shared settings (preset, steps, corpus, \
                          tokenizer, [model], [train], beta_batches) differ from this spec's; use a new --out \
                          directory (or delete this one) to run the changed spec. Adding variants or seeds is fine"
                        .into(),
                });
            }
        }
    }
    checkpoint::write_atomic(&spec_path, spec_text.as_bytes()).map_err(io(&spec_path))?;
    let variants = spec.variant_list().map_err(|m| ExperimentError::Spec { path: spec_path.clone(), msg: m })?;
    let total: usize = variants.iter().map(|&v| spec.seeds_of(v).len()).sum();
    if !opts.report_only {
        // Seed-major: after the first seed every variant has one run to compare.
        let mut pending = std::collections::VecDeque::new();
        let mut i = 0;
        for seed in spec.all_seeds() {
            for &v in variants.iter().filter(|&&v| spec.seeds_of(v).contains(&seed)) {
                i += 1;
                let name = run_name(v, seed);
                if result_of(&out.join("runs").join(&name), spec.steps).is_some() {
                    if !opts.quiet {
                        eprintln!("[{i}/{total}] {name}: finished earlier, not re-run");
                    }
                    continue;
                }
                pending.push_back((i, v, seed));
            }
        }
        let devices: Vec<&Arc<Gpu>> = std::iter::once(&gpu).chain(&opts.more_devices).collect();
        let jobs = devices.len().min(pending.len()).max(1);
        let queue = std::sync::Mutex::new(pending);
        let failed = std::sync::Mutex::new(None::<ExperimentError>);
        let interrupted = std::sync::atomic::AtomicBool::new(false);
        // One worker per device: the next unfinished run of the queue, until it is empty, a run
        // fails (the others finish theirs) or training is interrupted.
        let worker = |g: &Arc<Gpu>| {
            use std::sync::atomic::Ordering::SeqCst;
            while failed.lock().unwrap().is_none() && !interrupted.load(SeqCst) {
                let Some((i, v, seed)) = queue.lock().unwrap().pop_front() else { break };
                match train_run(g, spec, opts, (i, total), v, seed, jobs > 1) {
                    Ok(true) => {}
                    Ok(false) => interrupted.store(true, SeqCst),
                    Err(e) => {
                        failed.lock().unwrap().get_or_insert(e);
                    }
                }
            }
        };
        if jobs == 1 {
            worker(&gpu);
        } else {
            std::thread::scope(|sc| {
                for (j, g) in devices.iter().take(jobs).enumerate() {
                    // Training's stack, as the main thread's (a spawned thread gets 2 MiB).
                    let started = std::thread::Builder::new()
                        .name(format!("experiment-job-{j}"))
                        .stack_size(64 << 20)
                        .spawn_scoped(sc, || worker(g));
                    if let Err(e) = started {
                        // The jobs already started go on; no new run starts.
                        failed.lock().unwrap().get_or_insert(ExperimentError::Report(format!(
                            "--jobs {}: could not start job {} ({e}); try fewer jobs",
                            devices.len(),
                            j + 1
                        )));
                        break;
                    }
                }
            });
        }
        if let Some(e) = failed.into_inner().unwrap() {
            return Err(e);
        }
        if interrupted.into_inner() {
            if jobs > 1 {
                eprintln!(
                    "interrupted: the runs in progress saved their checkpoints; run the same command to continue"
                );
            }
            return Ok(None);
        }
    }
    let mut results = Vec::new();
    let mut missing = Vec::new();
    for &v in &variants {
        for seed in spec.seeds_of(v) {
            match result_of(&out.join("runs").join(run_name(v, seed)), spec.steps) {
                Some(r) => results.push(r),
                None => missing.push(run_name(v, seed)),
            }
        }
    }
    if results.is_empty() {
        return Err(ExperimentError::Report(format!(
            "{}: no finished runs yet (missing: {}); run without --report-only first",
            out.display(),
            missing.join(", ")
        )));
    }
    // The speed section, once every run is finished (again when the grid grew), or when asked for.
    let measured: BTreeSet<String> =
        speed_rows(out).iter().filter_map(|r| r["variant"].as_str().map(str::to_string)).collect();
    let speed_missing = variants.iter().any(|v| *v != Variant::Baseline && !measured.contains(v.name()));
    if opts.speed || (speed_missing && missing.is_empty() && !opts.report_only) {
        measure_speed(&gpu, spec, out, opts.quiet)?;
    }
    let commits: BTreeSet<(&str, &str)> = results.iter().map(|r| (r.commit.as_str(), r.dirty.as_str())).collect();
    if commits.len() > 1 && !opts.quiet {
        let list: Vec<String> = commits.iter().map(|(c, d)| format!("{} ({d})", &c[..c.len().min(12)])).collect();
        eprintln!(
            "warning: the runs of this report were made by different builds of the engine: {}; the report says so",
            list.join(", ")
        );
    }
    let report = write_report(out, spec, &variants, &results, &missing)?;
    Ok(Some(report))
}

/// Trains run `v`, `seed` of the grid (the `at`-th of its runs, of `of`) on `gpu` (resuming its
/// checkpoint where there is one), then writes its `result.json`. `Ok(false)` when training was
/// interrupted (the checkpoint is saved). With `parallel`, training prints no step lines (other
/// runs are training beside it) and the run's lines name it.
fn train_run(
    gpu: &Arc<Gpu>,
    spec: &ExperimentSpec,
    opts: &ExperimentOptions,
    (at, of): (usize, usize),
    v: Variant,
    seed: u64,
    parallel: bool,
) -> Result<bool, ExperimentError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExperimentError::Io { path, source }
    };
    let name = run_name(v, seed);
    let dir = opts.out.join("runs").join(&name);
    let run_cfg = spec.run_config(v, seed).map_err(|msg| ExperimentError::Run { run: name.clone(), msg })?;
    let resume = dir.join(checkpoint::OPTIM_FILE).exists();
    if !opts.quiet {
        eprintln!(
            "[{at}/{of}] {name}: {} {} steps -> {}{}",
            if resume { "resuming," } else { "training" },
            spec.steps,
            dir.display(),
            if parallel { " (beside other runs: its step lines are in its metrics.jsonl)" } else { "" }
        );
    }
    let summary = crate::train::train(
        gpu.clone(),
        TrainOptions {
            run: run_cfg,
            steps: spec.steps,
            out: dir.clone(),
            resume,
            // A run stopped before its first checkpoint starts again.
            overwrite: !resume,
            quiet: opts.quiet || parallel,
        },
    )
    .map_err(|source| ExperimentError::Train { run: name.clone(), source: Box::new(source) })?;
    if summary.interrupted {
        eprintln!("interrupted during {name}: its checkpoint is saved; run the same command to continue");
        return Ok(false);
    }
    let result = finish_run(gpu, &dir, v, seed, spec).map_err(|msg| ExperimentError::Run { run: name.clone(), msg })?;
    let path = dir.join("result.json");
    let text = serde_json::to_string_pretty(&result).map_err(|e| ExperimentError::Report(e.to_string()))?;
    checkpoint::write_atomic(&path, text.as_bytes()).map_err(io(&path))?;
    if !opts.quiet {
        eprintln!(
            "[{at}/{of}] {name}: val loss {:.4}, train loss {:.4}, {:.0} tok/s",
            result.final_val_loss, result.final_train_loss, result.tok_per_s
        );
    }
    Ok(true)
}

/// The result of a finished run, if `dir` holds one for `steps` steps.
fn result_of(dir: &Path, steps: usize) -> Option<RunResult> {
    let text = std::fs::read_to_string(dir.join("result.json")).ok()?;
    let r: RunResult = serde_json::from_str(&text).ok()?;
    (r.steps == steps).then_some(r)
}

/// Reads a finished run's metrics and counts its β regimes on validation text.
fn finish_run(gpu: &Arc<Gpu>, dir: &Path, v: Variant, seed: u64, spec: &ExperimentSpec) -> Result<RunResult, String> {
    let metrics_path = dir.join("metrics.jsonl");
    let text = std::fs::read_to_string(&metrics_path).map_err(|e| format!("{}: {e}", metrics_path.display()))?;
    let mut losses = Vec::new();
    let mut tps = Vec::new();
    let mut elapsed = 0.0f64;
    let mut val_curve = Vec::new();
    // The final evaluation over the whole validation split (its loss and tokens).
    let mut full: Option<(f64, usize)> = None;
    for line in text.lines() {
        let Ok(j) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let step = j["step"].as_f64().unwrap_or(0.0);
        if let Some(vl) = j["val_loss"].as_f64() {
            if j["val_full"] == true {
                full = Some((vl, j["val_tokens"].as_u64().unwrap_or(0) as usize));
                // The curve's last point: the same windows as the evaluations during training.
                if let Some(sub) = j["val_subset_loss"].as_f64() {
                    val_curve.push((step, sub));
                }
            } else {
                val_curve.push((step, vl));
            }
        } else if let Some(l) = j["loss"].as_f64() {
            losses.push(l);
            if let Some(t) = j["tok_per_s"].as_f64() {
                tps.push(t);
            }
            elapsed = elapsed.max(j["elapsed"].as_f64().unwrap_or(0.0));
        }
    }
    let (final_val_loss, val_tokens) = full
        .or_else(|| val_curve.last().map(|p| (p.1, 0)))
        .ok_or_else(|| format!("{}: no validation row", metrics_path.display()))?;
    let tail = (losses.len() / 10).max(1).min(losses.len().max(1));
    let final_train_loss =
        if losses.is_empty() { f64::NAN } else { losses[losses.len() - tail..].iter().sum::<f64>() / tail as f64 };
    tps.sort_by(|a, b| a.total_cmp(b));
    let tok_per_s = if tps.is_empty() { f64::NAN } else { tps[tps.len() / 2] };

    let ck = checkpoint::load(dir, false).map_err(|e| e.to_string())?;
    let run: RunConfig = {
        let p = dir.join("config.toml");
        let t = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        toml::from_str(&t).map_err(|e| format!("{}: {e}", p.display()))?
    };
    let t = &run.train;
    let (regimes, beta_mean) = beta_regimes(gpu, &ck, &run, spec.beta_batches)?;
    Ok(RunResult {
        variant: v.name().to_string(),
        seed,
        params: crate::model::Layout::new(&ck.config).count(),
        steps: ck.step,
        tokens: (ck.step * t.batch_size * t.seq_len * t.grad_accum) as u64,
        final_train_loss,
        final_val_loss,
        val_curve,
        tok_per_s,
        elapsed_s: elapsed,
        regimes,
        beta_mean,
        val_tokens,
        commit: crate::build_commit().0.to_string(),
        dirty: crate::build_commit().1.to_string(),
        adapter: adapter_name(gpu),
    })
}

/// An adapter as results record it: `NAME (Backend)`.
pub fn adapter_name(gpu: &Gpu) -> String {
    format!("{} ({:?})", gpu.info.name, gpu.info.backend)
}

/// Counts, per sublayer, the validation tokens whose β falls in each regime (and the mean β).
/// The validation batches are the first windows of the validation split, the same text for every
/// run of the grid.
pub fn beta_regimes(
    gpu: &Arc<Gpu>,
    ck: &checkpoint::Loaded,
    run: &RunConfig,
    batches: usize,
) -> Result<(RegimeCounts, Vec<f64>), String> {
    if !ck.config.variant.is_ddl() {
        return Ok((Vec::new(), Vec::new()));
    }
    let model = Model::with_params(gpu.clone(), ck.config.clone(), &ck.params).map_err(|e| e.to_string())?;
    let (ds, _) = data::open_for_run(run, Some(&ck.tokenizer)).map_err(|e| e.to_string())?;
    let t = &run.train;
    let batches = batches.min(ds.val_windows(t.seq_len).div_ceil(t.batch_size));
    let prog = model.forward_program(t.batch_size, t.seq_len).map_err(|e| e.to_string())?;
    let mut counts: RegimeCounts = Vec::new();
    let mut sums: Vec<f64> = Vec::new();
    for i in 0..batches {
        let (x, y) = ds.val_batch(i * t.batch_size, t.batch_size, t.seq_len);
        prog.set_batch(&model, &x, &y).map_err(|e| e.to_string())?;
        model.eval_loss(&prog).map_err(|e| e.to_string())?;
        for (s, w) in prog.acts().writes().enumerate() {
            let b = w.beta.read_f32(&model.gpu).map_err(|e| e.to_string())?;
            if counts.len() <= s {
                counts.push([0; 3]);
                sums.push(0.0);
            }
            for &beta in &b[..t.batch_size * t.seq_len] {
                let r = match crate::generate::regime(beta) {
                    "identity" => 0,
                    "projection" => 1,
                    _ => 2,
                };
                counts[s][r] += 1;
                sums[s] += beta as f64;
            }
        }
    }
    let means = counts.iter().zip(&sums).map(|(c, s)| s / c.iter().sum::<u64>().max(1) as f64).collect();
    Ok((counts, means))
}

/// The paper's validation losses (Small 124M, FineWeb-Edu) for reference.
pub fn paper_val_loss(v: Variant) -> Option<f64> {
    match v {
        Variant::Baseline => Some(2.854),
        Variant::DdlV1 => Some(2.848),
        Variant::Ddl => Some(2.835),
        _ => None,
    }
}

/// The paper column for variants without a number: EC/CC are reported between the two DDL rows;
/// the v-Map variants have no Small-scale number.
fn paper_note(v: Variant) -> &'static str {
    match v {
        Variant::DdlV1Vmap | Variant::DdlVmap => "—",
        _ => "between the two DDL rows",
    }
}

fn mean_std(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let s = if x.len() > 1 { (x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() } else { f64::NAN };
    (m, s)
}

fn pm(m: f64, s: f64) -> String {
    if s.is_finite() { format!("{m:.4} ± {s:.4}") } else { format!("{m:.4}") }
}

/// What a comparison of the report's family asks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Question {
    /// A gap of the paper's ordering: the first variant's loss is higher than the second's.
    PaperGap,
    /// A variant against the baseline (either direction).
    VsBaseline,
    /// v-Map against k-Map at one width (either direction).
    KvMap,
}

/// The report's family of comparisons `(a, b, question)`, each tested as a − b paired by seed,
/// fixed by the spec's variant list before any run: the three gaps of the paper's ordering,
/// every other variant against the baseline, and v-Map against k-Map at d_v = 1 and 4. Holm's
/// correction runs over all of them.
pub fn comparison_family(variants: &[Variant]) -> Vec<(Variant, Variant, Question)> {
    use Variant::*;
    let has = |v: Variant| variants.contains(&v);
    let mut f = Vec::new();
    for (a, b) in [(Baseline, DdlV1), (DdlV1, Ddl), (Baseline, Ddl)] {
        if has(a) && has(b) {
            f.push((a, b, Question::PaperGap));
        }
    }
    for &v in variants {
        if v != Baseline && v != DdlV1 && v != Ddl && has(Baseline) {
            f.push((v, Baseline, Question::VsBaseline));
        }
    }
    for (k, vm) in [(DdlV1, DdlV1Vmap), (Ddl, DdlVmap)] {
        if has(k) && has(vm) {
            f.push((vm, k, Question::KvMap));
        }
    }
    f
}

/// The sentence a comparison's numbers support (Holm-adjusted p at 5 %).
pub fn verdict(q: Question, a: Variant, b: Variant, diff: f64, p_holm: f64) -> String {
    let sig = p_holm < 0.05;
    let at = format!("p {} after Holm", p_text(p_holm));
    match (q, sig) {
        (_, false) => format!("not distinguishable ({at})"),
        (Question::PaperGap, true) if diff > 0.0 => format!("reproduced at p < 0.05 after Holm ({at})"),
        (Question::PaperGap, true) => format!("reversed: {} lower than {} ({at})", a.name(), b.name()),
        (Question::VsBaseline, true) if diff < 0.0 => format!("lower than the baseline ({at})"),
        (Question::VsBaseline, true) => format!("higher than the baseline ({at})"),
        (Question::KvMap, true) if diff > 0.0 => format!("k-Map better ({at})"),
        (Question::KvMap, true) => format!("v-Map better ({at})"),
    }
}

/// The paired t-test of the final validation losses of `a` − `b` over the seeds both ran.
fn paired(results: &[RunResult], a: Variant, b: Variant) -> Option<stats::Paired> {
    let of = |v: Variant| -> BTreeMap<u64, f64> {
        results.iter().filter(|r| r.variant == v.name()).map(|r| (r.seed, r.final_val_loss)).collect()
    };
    let (ra, rb) = (of(a), of(b));
    let pairs: Vec<(f64, f64)> = ra.iter().filter_map(|(s, x)| rb.get(s).map(|y| (*x, *y))).collect();
    stats::Paired::of(&pairs)
}

/// The comparisons section: the family, each paired test, Holm's adjustment and the verdicts,
/// then the paper's ordering in one generated sentence; with the rows of its forest plot
/// (`comparisons.png`: each tested difference, its interval, significant after Holm or not).
fn comparisons_section(results: &[RunResult], variants: &[Variant]) -> (String, Vec<plot::Interval>) {
    let family = comparison_family(variants);
    let mut md = String::from("## Comparisons\n\n");
    let mut rows = Vec::new();
    if family.is_empty() {
        md.push_str("The grid holds no pair of the report's family (it needs the baseline or a k-Map/v-Map pair).\n\n");
        return (md, rows);
    }
    let tests: Vec<Option<stats::Paired>> = family.iter().map(|&(a, b, _)| paired(results, a, b)).collect();
    let ps: Vec<f64> = tests.iter().map(|t| t.map(|t| t.p).unwrap_or(1.0)).collect();
    let adjusted = stats::holm(&ps);
    let listed: Vec<String> = family.iter().map(|(a, b, _)| format!("{} − {}", a.name(), b.name())).collect();
    md.push_str(&format!(
        "The family, fixed by the spec's variant list before the runs ({} comparisons): {}. Each is the \
         difference of final validation losses paired by seed (the runs of a seed share their batches): \
         its mean, 95 % t-interval (seeds − 1 degrees of freedom), Student's paired t and two-sided p, and \
         p adjusted by Holm's method over the whole family. A verdict needs the adjusted p below 0.05.\n\n",
        family.len(),
        listed.join(", ")
    ));
    md.push_str("| a − b | seeds | mean difference | 95 % interval | t (df) | p | p (Holm) | verdict |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---|\n");
    let mut verdicts = Vec::new();
    for (((a, b, q), t), ph) in family.iter().zip(&tests).zip(&adjusted) {
        match t {
            Some(t) => {
                let v = verdict(*q, *a, *b, t.diff.mean, *ph);
                md.push_str(&format!(
                    "| {} − {} | {} | {:+.4} | {} | {:.2} ({}) | {} | {} | {v} |\n",
                    a.name(),
                    b.name(),
                    t.diff.n,
                    t.diff.mean,
                    interval(t.diff.ci),
                    t.t,
                    t.df,
                    p_text(t.p).trim_start_matches("= "),
                    p_text(*ph).trim_start_matches("= ")
                ));
                verdicts.push(((*a, *b), (t.diff.mean, *ph)));
                rows.push(plot::Interval {
                    label: format!("{} − {}", a.name(), b.name()),
                    mean: t.diff.mean,
                    lo: t.diff.ci.0,
                    hi: t.diff.ci.1,
                    significant: *ph < 0.05,
                });
            }
            None => md.push_str(&format!(
                "| {} − {} | < 2 | | | | | | too few paired seeds to test |\n",
                a.name(),
                b.name()
            )),
        }
    }
    md.push('\n');
    // The paper's ordering baseline > ddl_v1 > ddl: both adjacent gaps must hold.
    let gap = |a: Variant, b: Variant| verdicts.iter().find(|(k, _)| *k == (a, b)).map(|(_, x)| *x);
    if let (Some(g1), Some(g2)) = (gap(Variant::Baseline, Variant::DdlV1), gap(Variant::DdlV1, Variant::Ddl)) {
        let holds = |g: (f64, f64)| g.0 > 0.0 && g.1 < 0.05;
        let reversed = |g: (f64, f64)| g.0 < 0.0 && g.1 < 0.05;
        let sentence = if holds(g1) && holds(g2) {
            "**reproduced**: both gaps are significant at p < 0.05 after Holm, in the paper's direction".to_string()
        } else if reversed(g1) || reversed(g2) {
            "**not reproduced**: at least one gap is significantly reversed".to_string()
        } else {
            format!(
                "**not distinguishable** at this size and number of seeds: baseline − ddl_v1 {:+.4} (p {} after Holm), \
                 ddl_v1 − ddl {:+.4} (p {} after Holm)",
                g1.0,
                p_text(g1.1),
                g2.0,
                p_text(g2.1)
            )
        };
        md.push_str(&format!(
            "The paper's ordering (baseline > ddl_v1 > ddl in validation loss; 2.854 > 2.848 > 2.835 at 124M): {sentence}.\n\n"
        ));
    }
    if !rows.is_empty() {
        md.push_str(
            "Plot: `comparisons.png` (each difference with its 95 % interval; filled red: significant after Holm, \
             hollow grey: not).\n\n",
        );
    }
    (md, rows)
}

/// "[1, 2, 3]", with the extra seeds of some variants.
fn seeds_text(spec: &ExperimentSpec) -> String {
    let mut t = format!("{:?}", spec.seeds);
    let extra: Vec<String> = spec.extra_seeds.iter().map(|(v, s)| format!("{v} also {s:?}")).collect();
    if !extra.is_empty() {
        t.push_str(&format!(" ({})", extra.join(", ")));
    }
    t
}

/// Whether the runs are long enough: over the last 20 % of the steps the mean validation curve
/// of every variant should change by less than half the paired seed spread (the median standard
/// deviation over seeds of the family's paired differences).
fn length_section(spec: &ExperimentSpec, results: &[RunResult], variants: &[Variant]) -> String {
    let mut md = String::from("## Are the runs long enough?\n\n");
    let family = comparison_family(variants);
    let core: Vec<_> = family.iter().filter(|f| f.2 == Question::PaperGap).collect();
    let use_: Vec<_> = if core.is_empty() { family.iter().collect() } else { core };
    let mut sds: Vec<f64> = use_
        .iter()
        .filter_map(|&&(a, b, _)| paired(results, a, b).map(|p| p.diff.sd))
        .filter(|s| s.is_finite())
        .collect();
    sds.sort_by(f64::total_cmp);
    let spread = sds.get(sds.len() / 2).copied();
    let from = 0.8 * spec.steps as f64;
    let mut rows = Vec::new();
    for &v in variants {
        let rs: Vec<&RunResult> = results.iter().filter(|r| r.variant == v.name()).collect();
        // The mean curve at the evaluations every seed has.
        let mut at: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for r in &rs {
            for &(s, l) in &r.val_curve {
                at.entry(s as u64).or_default().push(l);
            }
        }
        let mean: BTreeMap<u64, f64> = at
            .iter()
            .filter(|(_, ls)| !rs.is_empty() && ls.len() == rs.len())
            .map(|(&s, ls)| (s, ls.iter().sum::<f64>() / ls.len() as f64))
            .collect();
        let Some((start, end)) = last_fifth(mean.keys().copied(), from) else {
            continue;
        };
        rows.push((v, start, end, mean[&start] - mean[&end]));
    }
    if rows.is_empty() {
        md.push_str("The curves have no evaluation in the last 20 % of the steps.\n\n");
        return md;
    }
    let mut table = String::from(
        "Change of the mean validation curve (the windows every evaluation covers) over the last 20 % of the \
         steps:\n\n| variant | from step | to step | decrease |\n|---|---:|---:|---:|\n",
    );
    for (v, a, b, d) in &rows {
        table.push_str(&format!("| {} | {a} | {b} | {d:+.4} |\n", v.name()));
    }
    let Some(spread) = spread else {
        // One seed (a pilot): the curves' changes, without a spread to judge them by.
        md.push_str(&format!(
            "No paired spread to compare with (fewer than two seeds of a compared pair), so no verdict. {table}\n"
        ));
        return md;
    };
    // The curve that changes most; a rise (the validation loss going up while the training
    // loss goes down) is overfitting, which longer runs make worse, not better.
    let (worst_variant, worst, rising) = rows
        .iter()
        .max_by(|a, b| a.3.abs().total_cmp(&b.3.abs()))
        .map(|r| (r.0, r.3.abs(), r.3 < 0.0))
        .expect("rows is not empty");
    md.push_str(&format!(
        "Half the paired seed spread: {:.4} (the median over the compared pairs of the standard deviation over \
         seeds of their final differences: {:.4}). {table}",
        spread / 2.0,
        spread
    ));
    md.push_str(&format!(
        "\n{}\n\n",
        if worst < spread / 2.0 {
            format!("**Long enough**: every curve changes by less than half the paired spread (largest {worst:.4}).")
        } else if rising {
            format!(
                "**Not settled: overfitting**: the {} curve rises by {worst:.4} over the last 20 %, more than half the \
                 paired spread ({:.4}): its validation loss went up while it trained, so longer runs would not settle \
                 it; a length near the curves' lowest point (or more data per parameter) would. Which comparisons \
                 moved over the last 20 %: below.",
                worst_variant.name(),
                spread / 2.0
            )
        } else {
            format!(
                "**Not long enough**: a curve still changes by {worst:.4}, more than half the paired spread ({:.4}); \
                 longer runs may move the comparisons (which ones moved over the last 20 %: below).",
                spread / 2.0
            )
        }
    ));
    md.push_str(&drift_table(results, &family, from, spread / 2.0));
    md
}

/// The last fifth of a curve: its evaluation step nearest `from` (80 % of the steps) and its last
/// one, ascending `steps`; `None` without two distinct steps.
fn last_fifth(steps: impl Iterator<Item = u64>, from: f64) -> Option<(u64, u64)> {
    let steps: Vec<u64> = steps.collect();
    let end = *steps.last()?;
    let start = *steps.iter().min_by(|x, y| (**x as f64 - from).abs().total_cmp(&(**y as f64 - from).abs()))?;
    (start < end).then_some((start, end))
}

/// How each comparison of the family moved over the last 20 % of the steps: the mean paired
/// difference a − b on the evaluation subset at the evaluation nearest 80 % of the steps and at
/// the last one both curves of every paired seed have, against half the paired spread. Where the
/// curves still fall but fall together, a comparison can be steady though the runs are not long
/// enough; where it moves, its final verdict may not hold at another length.
fn drift_table(results: &[RunResult], family: &[(Variant, Variant, Question)], from: f64, half: f64) -> String {
    let curve = |v: Variant, seed: u64| -> Option<BTreeMap<u64, f64>> {
        results
            .iter()
            .find(|r| r.variant == v.name() && r.seed == seed)
            .map(|r| r.val_curve.iter().map(|&(s, l)| (s as u64, l)).collect())
    };
    let mut rows = Vec::new();
    for &(a, b, _) in family {
        let seeds: Vec<u64> = results.iter().filter(|r| r.variant == a.name()).map(|r| r.seed).collect();
        let pairs: Vec<(BTreeMap<u64, f64>, BTreeMap<u64, f64>)> =
            seeds.iter().filter_map(|&s| Some((curve(a, s)?, curve(b, s)?))).collect();
        if pairs.is_empty() {
            continue;
        }
        // The evaluation steps every curve of the pairs has.
        let common = pairs[0]
            .0
            .keys()
            .copied()
            .filter(|s| pairs.iter().all(|(ca, cb)| ca.contains_key(s) && cb.contains_key(s)));
        let Some((start, end)) = last_fifth(common, from) else {
            continue;
        };
        let mean_at = |s: u64| pairs.iter().map(|(ca, cb)| ca[&s] - cb[&s]).sum::<f64>() / pairs.len() as f64;
        let (d0, d1) = (mean_at(start), mean_at(end));
        rows.push(format!(
            "| {} − {} | {} | {start} | {d0:+.4} | {end} | {d1:+.4} | {:+.4} | {} |\n",
            a.name(),
            b.name(),
            pairs.len(),
            d1 - d0,
            if (d1 - d0).abs() < half { "steady" } else { "moves" }
        ));
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut md = format!(
        "Do the comparisons still move? Each comparison's mean paired difference on the evaluation subset \
         (not the whole split of the table above) at the start and the end of the last 20 % of the steps; \
         \"steady\" when it changed by less than half the paired spread ({half:.4}):\n\n\
         | a − b | seeds | from step | difference | to step | difference | change | |\n|---|---:|---:|---:|---:|---:|---:|---|\n"
    );
    for r in rows {
        md.push_str(&r);
    }
    md.push('\n');
    md
}

/// "= 0.034", or "< 0.001".
fn p_text(p: f64) -> String {
    if p < 0.001 { "< 0.001".into() } else { format!("= {p:.3}") }
}

/// `[lo, hi]` of an interval (blank without one).
fn interval(ci: (f64, f64)) -> String {
    if ci.0.is_finite() && ci.1.is_finite() { format!("[{:+.4}, {:+.4}]", ci.0, ci.1) } else { "—".into() }
}

/// Writes `report.md`, `val_loss.png` and `beta_regimes.png`; returns the report's path.
fn write_report(
    out: &Path,
    spec: &ExperimentSpec,
    variants: &[Variant],
    results: &[RunResult],
    missing: &[String],
) -> Result<PathBuf, ExperimentError> {
    let by_variant: BTreeMap<usize, Vec<&RunResult>> = variants
        .iter()
        .enumerate()
        .map(|(i, v)| (i, results.iter().filter(|r| r.variant == v.name()).collect()))
        .collect();
    let mut md = String::new();
    let title = if spec.name.is_empty() { "experiment".to_string() } else { spec.name.clone() };
    md.push_str(&format!("# Experiment: {title}\n\n"));
    if !spec.description.is_empty() {
        md.push_str(&format!("{}\n\n", spec.description.trim()));
    }
    let any = results[0].clone();
    let val_tokens: BTreeSet<usize> = results.iter().map(|r| r.val_tokens).collect();
    let val_what = match (val_tokens.len(), val_tokens.first()) {
        (1, Some(&0)) => "the run's last evaluation (results made before the whole-split evaluation)".to_string(),
        (1, Some(n)) => {
            format!("the whole validation split at the end of the run ({n} tokens, the same for every run)")
        }
        _ => format!("the final evaluation; token counts differ between runs: {val_tokens:?}"),
    };
    md.push_str(&format!(
        "Preset `{}`, {} steps per run ({} tokens), seeds {}; every run of one seed sees the same \
         batches in the same order. Train loss is the mean over the last tenth of the steps; val \
         loss is measured over {val_what}. Per variant: mean, sample standard deviation over seeds \
         and the 95 % t-interval of the mean. Speed: its own section, measured in one process.\n\n",
        spec.preset,
        spec.steps,
        any.tokens,
        seeds_text(spec),
    ));
    // Which build made the runs.
    let commits: BTreeSet<(String, String)> = results.iter().map(|r| (r.commit.clone(), r.dirty.clone())).collect();
    let commit_text: Vec<String> = commits
        .iter()
        .map(|(c, d)| if c.is_empty() { "unrecorded".to_string() } else { format!("{} ({d})", &c[..c.len().min(12)]) })
        .collect();
    md.push_str(&format!("Engine: {}.\n\n", commit_text.join(", ")));
    if commits.len() > 1 {
        md.push_str("**Warning: these runs were made by different builds of the engine.**\n\n");
    }
    // Which adapters trained them (runs made before it was recorded: "unrecorded").
    let mut adapters: BTreeMap<&str, usize> = BTreeMap::new();
    for r in results {
        *adapters.entry(if r.adapter.is_empty() { "unrecorded" } else { r.adapter.as_str() }).or_default() += 1;
    }
    let adapter_text: Vec<String> =
        adapters.iter().map(|(a, n)| format!("{a}: {n} run{}", if *n == 1 { "" } else { "s" })).collect();
    md.push_str(&format!("Adapter: {}.\n\n", adapter_text.join("; ")));
    if adapters.keys().filter(|a| **a != "unrecorded").count() > 1 {
        md.push_str(
            "**Warning: these runs were trained on different adapters, whose kernel forms round differently.**\n\n",
        );
    }
    if !missing.is_empty() {
        md.push_str(&format!("**Unfinished runs (not in the table):** {}\n\n", missing.join(", ")));
    }
    md.push_str("| variant | params | seeds | train loss | val loss (mean ± sd) | 95 % interval | val perplexity | paper val loss (Small 124M) |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (i, v) in variants.iter().enumerate() {
        let rs = &by_variant[&i];
        if rs.is_empty() {
            md.push_str(&format!("| {} | | 0 | | | | | |\n", v.name()));
            continue;
        }
        let tl: Vec<f64> = rs.iter().map(|r| r.final_train_loss).collect();
        let vl: Vec<f64> = rs.iter().map(|r| r.final_val_loss).collect();
        let (t, val) = (stats::Sample::of(&tl), stats::Sample::of(&vl));
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {:.2} | {} |\n",
            v.name(),
            rs[0].params,
            rs.len(),
            pm(t.mean, t.sd),
            pm(val.mean, val.sd),
            interval(val.ci),
            val.mean.exp(),
            paper_val_loss(*v).map(|x| format!("{x:.3}")).unwrap_or_else(|| paper_note(*v).into()),
        ));
    }
    md.push('\n');
    let (comparisons, forest) = comparisons_section(results, variants);
    md.push_str(&comparisons);
    md.push_str(&length_section(spec, results, variants));
    // β regimes.
    let ddl_rows: Vec<(Variant, Vec<[f64; 3]>, Vec<f64>)> = variants
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_ddl())
        .filter_map(|(i, v)| {
            let rs = &by_variant[&i];
            let n_sub = rs.first()?.regimes.len();
            if n_sub == 0 {
                return None;
            }
            let mut shares = vec![[0.0; 3]; n_sub];
            let mut beta = vec![0.0; n_sub];
            for r in rs {
                for s in 0..n_sub {
                    let tot = r.regimes[s].iter().sum::<u64>().max(1) as f64;
                    for (share, &count) in shares[s].iter_mut().zip(&r.regimes[s]) {
                        *share += count as f64 / tot / rs.len() as f64;
                    }
                    beta[s] += r.beta_mean[s] / rs.len() as f64;
                }
            }
            Some((*v, shares, beta))
        })
        .collect();
    if !ddl_rows.is_empty() {
        md.push_str("## β regimes at the end of training\n\n");
        md.push_str(&format!(
            "Share of validation tokens ({} batches) whose gate β is identity-like (β < 0.5, λ = 1−β > 0.5), a \
             projection (0.5 ≤ β ≤ 1.5) or reflection-like (β > 1.5), per sublayer (block i: attention `iA`, MLP \
             `iM`), averaged over seeds, with the mean β. Plot: `beta_regimes.png`.\n\n",
            spec.beta_batches
        ));
        md.push_str(
            "| variant | sublayer | identity | projection | reflection | mean β |\n|---|---|---:|---:|---:|---:|\n",
        );
        for (v, shares, beta) in &ddl_rows {
            for (s, sh) in shares.iter().enumerate() {
                md.push_str(&format!(
                    "| {} | {}{} | {:.0}% | {:.0}% | {:.0}% | {:.3} |\n",
                    v.name(),
                    s / 2,
                    if s % 2 == 0 { "A" } else { "M" },
                    sh[0] * 100.0,
                    sh[1] * 100.0,
                    sh[2] * 100.0,
                    beta[s]
                ));
            }
        }
        md.push('\n');
    }
    md.push_str(&speed_section(out));
    md.push_str(
        "## Runs\n\nTheir tok/s and wall time are those of a machine shared with other work: not a speed \
         measurement (see Speed).\n\n| run | val loss | train loss | tok/s | wall time |\n|---|---:|---:|---:|---:|\n",
    );
    for r in results {
        md.push_str(&format!(
            "| {}-seed{} | {:.4} | {:.4} | {:.0} | {:.0} s |\n",
            r.variant, r.seed, r.final_val_loss, r.final_train_loss, r.tok_per_s, r.elapsed_s
        ));
    }
    let total_s: f64 = results.iter().map(|r| r.elapsed_s).sum();
    md.push_str(&format!(
        "\nTotal training time {:.1} min. Plots: `val_loss.png`{}, `beta_regimes.png`.\n",
        total_s / 60.0,
        if forest.is_empty() { "" } else { ", `comparisons.png`" }
    ));

    // Validation-loss curves: mean over seeds with a min–max band.
    let mut bands = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let rs = &by_variant[&i];
        if rs.is_empty() {
            continue;
        }
        let mut at: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for r in rs {
            for &(s, l) in &r.val_curve {
                at.entry(s as u64).or_default().push(l);
            }
        }
        let pts = at
            .iter()
            .filter(|(_, ls)| ls.len() == rs.len())
            .map(|(&s, ls)| {
                let (m, _) = mean_std(ls);
                let lo = ls.iter().cloned().fold(f64::INFINITY, f64::min);
                let hi = ls.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                (s as f64, m, lo, hi)
            })
            .collect();
        bands.push(plot::Band { name: v.name().to_string(), points: pts });
    }
    plot::band_plot(
        &out.join("val_loss.png"),
        &format!("validation loss ({title}): mean over seeds, band = min..max"),
        "step",
        "cross-entropy (nats)",
        &bands,
    )
    .map_err(ExperimentError::Report)?;
    let panels: Vec<plot::RegimePanel> = ddl_rows
        .iter()
        .map(|(v, shares, _)| plot::RegimePanel {
            name: v.name().to_string(),
            labels: (0..shares.len()).map(|s| format!("{}{}", s / 2, if s % 2 == 0 { "A" } else { "M" })).collect(),
            shares: shares.clone(),
        })
        .collect();
    if !panels.is_empty() {
        plot::regime_plot(&out.join("beta_regimes.png"), "β regimes per sublayer on validation text", &panels)
            .map_err(ExperimentError::Report)?;
    }
    if !forest.is_empty() {
        plot::interval_plot(
            &out.join("comparisons.png"),
            "paired differences of final validation loss (a − b, nats): mean and 95 % interval",
            "a − b (nats); > 0: b lower",
            &forest,
        )
        .map_err(ExperimentError::Report)?;
    }
    let path = out.join("report.md");
    checkpoint::write_atomic(&path, md.as_bytes())
        .map_err(|source| ExperimentError::Io { path: path.clone(), source })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> Result<ExperimentSpec, String> {
        let text =
            format!("preset = \"tiny\"\nvariants = [\"baseline\", \"ddl\"]\nseeds = [1, 2]\nsteps = 20\n{extra}");
        let s: ExperimentSpec = toml::from_str(&text).map_err(|e| e.to_string())?;
        s.check()?;
        s.variant_list()?;
        Ok(s)
    }

    #[test]
    fn run_configs_share_everything_but_the_variant_and_the_seed() {
        let s = spec("[train]\nbatch_size = 4\nlr = 2e-3\n[model]\nd_model = 64\n").unwrap();
        let a = s.run_config(Variant::Baseline, 1).unwrap();
        let b = s.run_config(Variant::Ddl, 1).unwrap();
        assert_eq!((a.train.batch_size, a.train.lr, a.model.d_model), (4, 2e-3, 64));
        assert_eq!(a.train, b.train, "matched comparison: one training config per seed");
        assert_eq!(a.train.decay_steps, 20, "the schedule spans the run");
        assert!(a.train.warmup_steps <= 4);
        assert_eq!(s.run_config(Variant::Ddl, 2).unwrap().train.seed, 2);
        assert_ne!(a.model.variant, b.model.variant);
    }

    fn result(v: &str, seed: u64, loss: f64, commit: &str) -> RunResult {
        RunResult {
            variant: v.to_string(),
            seed,
            params: 1000,
            steps: 20,
            tokens: 640,
            final_train_loss: loss + 0.01,
            final_val_loss: loss,
            val_curve: vec![(10.0, 2.5)],
            tok_per_s: 100.0,
            elapsed_s: 1.0,
            regimes: Vec::new(),
            beta_mean: Vec::new(),
            val_tokens: 4096,
            commit: commit.to_string(),
            dirty: "clean".to_string(),
            adapter: "llvmpipe (Vulkan)".to_string(),
        }
    }

    fn report(names: &[&str], seeds: u64, loss: impl Fn(&str, u64) -> f64, commit: impl Fn(u64) -> String) -> String {
        let s = ExperimentSpec {
            variants: names.iter().map(|v| v.to_string()).collect(),
            seeds: (1..=seeds).collect(),
            ..spec("").unwrap()
        };
        let variants = s.variant_list().unwrap();
        let results: Vec<RunResult> = names
            .iter()
            .flat_map(|v| (1..=seeds).map(move |seed| (v, seed)))
            .map(|(v, seed)| result(v, seed, loss(v, seed), &commit(seed)))
            .collect();
        let dir = std::env::temp_dir().join(format!("ddl-report-test-{}-{seeds}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = write_report(&dir, &s, &variants, &results, &[]).unwrap();
        let md = std::fs::read_to_string(path).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        md
    }

    fn row(md: &str, pair: &str) -> String {
        md.lines().find(|l| l.starts_with(&format!("| {pair} |"))).unwrap_or_default().to_string()
    }

    #[test]
    fn the_report_tests_its_fixed_family_and_writes_what_the_numbers_support() {
        let names = ["baseline", "ddl_v1", "ddl_v1_vmap", "ddl", "ddl_vmap", "ddl_cc"];
        // Five seeds. baseline − ddl_v1: +0.05 with ±0.005 wobble (significant); ddl_v1 − ddl:
        // differences of both signs (not distinguishable); v-Map worse than k-Map at d_v = 1 by
        // 0.12 on every seed (significant, k-Map better); ddl_cc 0.03 above the baseline but
        // noisy; ddl_vmap equal to ddl.
        let wob = |seed: u64| [0.0, 0.005, -0.005, 0.003, -0.003][seed as usize - 1];
        let loss = |v: &str, seed: u64| match v {
            "baseline" => 2.20 + wob(seed),
            "ddl_v1" => 2.15,
            "ddl_v1_vmap" => 2.27 + wob(seed) / 5.0,
            "ddl" => 2.15 + [0.02, -0.03, 0.01, -0.01, 0.02][seed as usize - 1],
            "ddl_vmap" => 2.15 + [0.02, -0.03, 0.01, -0.01, 0.02][seed as usize - 1],
            _ => 2.23 + [0.1, -0.1, 0.05, -0.04, 0.0][seed as usize - 1],
        };
        let md = report(&names, 5, loss, |_| "abc".into());
        // The family: 3 gaps, ddl_v1_vmap, ddl_vmap and ddl_cc against the baseline, 2 k/v pairs.
        assert!(md.contains("(8 comparisons)"), "{md}");
        assert!(
            row(&md, "baseline − ddl_v1").contains("reproduced at p < 0.05 after Holm"),
            "{}",
            row(&md, "baseline − ddl_v1")
        );
        assert!(row(&md, "ddl_v1 − ddl").contains("not distinguishable"), "{}", row(&md, "ddl_v1 − ddl"));
        assert!(row(&md, "ddl_v1_vmap − ddl_v1").contains("k-Map better"), "{}", row(&md, "ddl_v1_vmap − ddl_v1"));
        assert!(row(&md, "ddl_vmap − ddl").contains("not distinguishable"));
        assert!(row(&md, "ddl_cc − baseline").contains("not distinguishable"), "{}", row(&md, "ddl_cc − baseline"));
        // baseline − ddl_v1 = +0.05 with sd of the wobble (0.0042): t ≈ 26.5 at df 4.
        assert!(row(&md, "baseline − ddl_v1").contains("| 5 | +0.0500 |"), "{}", row(&md, "baseline − ddl_v1"));
        assert!(md.contains("The paper's ordering") && md.contains("**not distinguishable** at this size"), "{md}");
        assert!(!md.contains("Warning: these runs were made by different builds"));
        assert!(md.contains("Adapter: llvmpipe (Vulkan): 30 runs.") && !md.contains("different adapters"), "{md}");
        // The paper has no Small-scale number for v-Map.
        let vmap = md.lines().find(|l| l.starts_with("| ddl_vmap |")).unwrap();
        assert!(vmap.ends_with("| — |"), "{vmap}");
        // A reversal is called one; runs of different builds are flagged.
        let md = report(
            &["baseline", "ddl_v1", "ddl"],
            3,
            |v, s| match v {
                "baseline" => 2.0 + 0.001 * s as f64,
                "ddl_v1" => 2.1,
                _ => 2.05 - 0.002 * s as f64,
            },
            |s| format!("c{s}"),
        );
        assert!(row(&md, "baseline − ddl_v1").contains("reversed"), "{}", row(&md, "baseline − ddl_v1"));
        assert!(md.contains("**not reproduced**"), "{md}");
        assert!(md.contains("Warning: these runs were made by different builds"), "{md}");
    }

    #[test]
    fn the_length_check_compares_the_last_fifth_of_the_curves_with_half_the_paired_spread() {
        let s = spec("").unwrap(); // 20 steps, baseline and ddl, seeds 1 and 2
        let variants = s.variant_list().unwrap();
        // Paired differences baseline − ddl: 0.05 and 0.07 → sd 0.01414, half 0.00707.
        let mk = |drop: f64| -> Vec<RunResult> {
            [("baseline", 1, 2.20), ("baseline", 2, 2.22), ("ddl", 1, 2.15), ("ddl", 2, 2.15)]
                .iter()
                .map(|&(v, seed, l)| RunResult {
                    val_curve: vec![(8.0, l + 0.3), (16.0, l + drop), (20.0, l)],
                    ..result(v, seed, l, "abc")
                })
                .collect()
        };
        let md = length_section(&s, &mk(0.002), &variants);
        assert!(md.contains("Half the paired seed spread: 0.0071") && md.contains("**Long enough**"), "{md}");
        assert!(md.contains("| ddl | 16 | 20 | +0.0020 |"), "{md}");
        // Both curves fell by the same 0.002: baseline − ddl is 0.06 at steps 16 and 20.
        assert!(md.contains("| baseline − ddl | 2 | 16 | +0.0600 | 20 | +0.0600 | +0.0000 | steady |"), "{md}");
        let md = length_section(&s, &mk(0.03), &variants);
        assert!(md.contains("**Not long enough**: a curve still changes by 0.0300"), "{md}");
        // Still falling 0.03, but together: the comparison is steady.
        assert!(md.contains("| +0.0600 | +0.0000 | steady |"), "{md}");
        // The baseline falls 0.03 over the last fifth, ddl 0.002: the difference moves by −0.028.
        let mut moving = mk(0.002);
        for r in moving.iter_mut().filter(|r| r.variant == "baseline") {
            r.val_curve[1].1 += 0.028;
        }
        let md = length_section(&s, &moving, &variants);
        assert!(md.contains("| baseline − ddl | 2 | 16 | +0.0880 | 20 | +0.0600 | -0.0280 | moves |"), "{md}");
        // A curve that rises over the last fifth overfits: the verdict says so instead of asking
        // for longer runs.
        let mut rising = mk(0.002);
        for r in rising.iter_mut().filter(|r| r.variant == "ddl") {
            r.val_curve[1].1 -= 0.022;
        }
        let md = length_section(&s, &rising, &variants);
        assert!(md.contains("| ddl | 16 | 20 | -0.0200 |"), "{md}");
        assert!(md.contains("**Not settled: overfitting**: the ddl curve rises by 0.0200"), "{md}");
        assert!(!md.contains("Not long enough") && !md.contains("**Long enough**"), "{md}");
        // One seed: no spread and no verdict, but the curves' changes still.
        let one: Vec<RunResult> = mk(0.002).into_iter().filter(|r| r.seed == 1).collect();
        let md = length_section(&s, &one, &variants);
        assert!(md.contains("No paired spread") && md.contains("no verdict"), "{md}");
        assert!(md.contains("| ddl | 16 | 20 | +0.0020 |") && !md.contains("Long enough"), "{md}");
    }

    #[test]
    fn the_report_names_the_adapters_that_trained_its_runs_and_flags_a_mix() {
        let s = spec("").unwrap(); // baseline and ddl, seeds 1 and 2
        let variants = s.variant_list().unwrap();
        let md_of = |adapters: [&str; 4]| {
            let results: Vec<RunResult> = [("baseline", 1), ("baseline", 2), ("ddl", 1), ("ddl", 2)]
                .iter()
                .zip(adapters)
                .map(|(&(v, seed), a)| RunResult {
                    adapter: a.to_string(),
                    ..result(v, seed, 2.0 + seed as f64 / 100.0, "abc")
                })
                .collect();
            let dir =
                std::env::temp_dir().join(format!("ddl-adapter-test-{}-{}", std::process::id(), adapters.join("")));
            std::fs::create_dir_all(&dir).unwrap();
            let md = std::fs::read_to_string(write_report(&dir, &s, &variants, &results, &[]).unwrap()).unwrap();
            std::fs::remove_dir_all(&dir).ok();
            md
        };
        // Older results without the field count as unrecorded, which is no mix.
        let md = md_of(["", "", "NVIDIA H200 (Vulkan)", "NVIDIA H200 (Vulkan)"]);
        assert!(md.contains("Adapter: NVIDIA H200 (Vulkan): 2 runs; unrecorded: 2 runs."), "{md}");
        assert!(!md.contains("different adapters"), "{md}");
        let md = md_of(["llvmpipe (Vulkan)", "llvmpipe (Vulkan)", "llvmpipe (Vulkan)", "NVIDIA H200 (Vulkan)"]);
        assert!(md.contains("Adapter: NVIDIA H200 (Vulkan): 1 run; llvmpipe (Vulkan): 3 runs."), "{md}");
        assert!(md.contains("**Warning: these runs were trained on different adapters"), "{md}");
        // A result.json written before the field existed still reads.
        let old: RunResult = serde_json::from_str(
            r#"{"variant":"ddl","seed":1,"params":1,"steps":1,"tokens":1,"final_train_loss":1,"final_val_loss":1,
                "val_curve":[],"tok_per_s":1,"elapsed_s":1,"regimes":[],"beta_mean":[]}"#,
        )
        .unwrap();
        assert_eq!(old.adapter, "");
    }

    #[test]
    fn extra_seeds_add_runs_to_some_variants() {
        let s = spec("extra_seeds = { ddl = [3, 4] }\n").unwrap();
        assert_eq!(s.seeds_of(Variant::Ddl), [1, 2, 3, 4]);
        assert_eq!(s.seeds_of(Variant::Baseline), [1, 2]);
        assert_eq!(s.all_seeds(), [1, 2, 3, 4]);
        assert!(spec("extra_seeds = { ddl_cc = [3] }\n").unwrap_err().contains("not one of the spec's variants"));
        assert!(spec("extra_seeds = { ddl = [2] }\n").unwrap_err().contains("already in seeds"));
        assert!(spec("extra_seeds = { ddl = [3, 3] }\n").unwrap_err().contains("appears twice"));
    }

    #[test]
    fn bad_specs_name_the_problem() {
        assert!(spec("").is_ok());
        let e = spec("bogus = 1\n").unwrap_err();
        assert!(e.contains("bogus"), "{e}");
        let t = "preset = \"tiny\"\nvariants = [\"ddl\", \"nope\"]\nseeds = [1]\nsteps = 5\n";
        let s: ExperimentSpec = toml::from_str(t).unwrap();
        assert!(s.variant_list().unwrap_err().contains("nope"));
        let t = "preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1, 1]\nsteps = 5\n";
        let s: ExperimentSpec = toml::from_str(t).unwrap();
        assert!(s.check().unwrap_err().contains("seed 1 appears twice"));
        let s = spec("[train]\nseed = 3\n").unwrap();
        assert!(s.run_config(Variant::Ddl, 1).unwrap_err().contains("seeds"));
        let s = spec("[train]\nlr = -1.0\n").unwrap();
        assert!(s.run_config(Variant::Ddl, 1).unwrap_err().contains("lr"));
        let s = spec("[model]\nd_modle = 3\n").unwrap();
        assert!(s.run_config(Variant::Ddl, 1).unwrap_err().contains("d_modle"));
    }
}
