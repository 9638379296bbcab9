//! `ddl experiment`: a grid of training runs (variants × seeds with shared settings), run one
//! after another and resumable, then a report comparing the variants: `report.md` (a table with
//! mean ± std over seeds and the paper's numbers beside it), `val_loss.png` (mean curves with a
//! band per variant) and `beta_regimes.png` (identity / projection / reflection shares of β per
//! sublayer on validation text at the end of training).
//!
//! Matched comparison: every run of one seed sees the same batches in the same order (the batch
//! sampler depends only on the seed and the step), the same number of steps and tokens, and the
//! same tokenizer; only the architecture (and so the initialisation) differs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::gpu::Gpu;
use crate::model::{Model, Variant};
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
    #[error("run {run}: {source}")]
    Train { run: String, source: TrainError },
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
            for &s in &spec.seeds {
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
        if self.steps == 0 {
            return Err("steps: expected at least 1".into());
        }
        if self.beta_batches == 0 {
            return Err("beta_batches: expected at least 1".into());
        }
        Ok(())
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
}

/// Options of [`run`].
pub struct ExperimentOptions {
    pub out: PathBuf,
    /// Only rebuild the report from the finished runs.
    pub report_only: bool,
    pub quiet: bool,
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
    let total = variants.len() * spec.seeds.len();
    let mut i = 0;
    if !opts.report_only {
        // Seed-major: after the first seed every variant has one run to compare.
        for &seed in &spec.seeds {
            for &v in &variants {
                i += 1;
                let name = run_name(v, seed);
                let dir = out.join("runs").join(&name);
                if result_of(&dir, spec.steps).is_some() {
                    if !opts.quiet {
                        eprintln!("[{i}/{total}] {name}: finished earlier, not re-run");
                    }
                    continue;
                }
                let run_cfg =
                    spec.run_config(v, seed).map_err(|msg| ExperimentError::Run { run: name.clone(), msg })?;
                let resume = dir.join(checkpoint::OPTIM_FILE).exists();
                if !opts.quiet {
                    eprintln!(
                        "[{i}/{total}] {name}: {} {} steps -> {}",
                        if resume { "resuming," } else { "training" },
                        spec.steps,
                        dir.display()
                    );
                }
                let summary = crate::train::train(
                    gpu.clone(),
                    TrainOptions {
                        run: run_cfg.clone(),
                        steps: spec.steps,
                        out: dir.clone(),
                        resume,
                        // A run stopped before its first checkpoint starts again.
                        overwrite: !resume,
                        quiet: opts.quiet,
                    },
                )
                .map_err(|source| ExperimentError::Train { run: name.clone(), source })?;
                if summary.interrupted {
                    eprintln!("interrupted during {name}: its checkpoint is saved; run the same command to continue");
                    return Ok(None);
                }
                let result = finish_run(&gpu, &dir, v, seed, spec)
                    .map_err(|msg| ExperimentError::Run { run: name.clone(), msg })?;
                let path = dir.join("result.json");
                let text = serde_json::to_string_pretty(&result).map_err(|e| ExperimentError::Report(e.to_string()))?;
                checkpoint::write_atomic(&path, text.as_bytes()).map_err(io(&path))?;
                if !opts.quiet {
                    eprintln!(
                        "[{i}/{total}] {name}: val loss {:.4}, train loss {:.4}, {:.0} tok/s",
                        result.final_val_loss, result.final_train_loss, result.tok_per_s
                    );
                }
            }
        }
    }
    let mut results = Vec::new();
    let mut missing = Vec::new();
    for &v in &variants {
        for &seed in &spec.seeds {
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
    let report = write_report(out, spec, &variants, &results, &missing)?;
    Ok(Some(report))
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
    for line in text.lines() {
        let Ok(j) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let step = j["step"].as_f64().unwrap_or(0.0);
        if let Some(vl) = j["val_loss"].as_f64() {
            val_curve.push((step, vl));
        } else if let Some(l) = j["loss"].as_f64() {
            losses.push(l);
            if let Some(t) = j["tok_per_s"].as_f64() {
                tps.push(t);
            }
            elapsed = elapsed.max(j["elapsed"].as_f64().unwrap_or(0.0));
        }
    }
    let final_val_loss =
        val_curve.last().map(|p| p.1).ok_or_else(|| format!("{}: no validation row", metrics_path.display()))?;
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
    })
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

/// Mean ± std of the same-seed differences `a − b` of final validation losses (seeds both ran).
fn paired_diff(results: &[RunResult], a: Variant, b: Variant) -> Option<(f64, f64, usize)> {
    let of = |v: Variant| -> BTreeMap<u64, f64> {
        results.iter().filter(|r| r.variant == v.name()).map(|r| (r.seed, r.final_val_loss)).collect()
    };
    let (ra, rb) = (of(a), of(b));
    let d: Vec<f64> = ra.iter().filter_map(|(s, x)| rb.get(s).map(|y| x - y)).collect();
    if d.is_empty() {
        return None;
    }
    let (m, sd) = mean_std(&d);
    Some((m, sd, d.len()))
}

fn mean_std(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let s = if x.len() > 1 { (x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() } else { f64::NAN };
    (m, s)
}

/// `+m ± s` (just `+m` without a std).
fn signed_pm(m: f64, s: f64) -> String {
    if s.is_finite() { format!("{m:+.4} ± {s:.4}") } else { format!("{m:+.4}") }
}

fn pm(m: f64, s: f64) -> String {
    if s.is_finite() { format!("{m:.4} ± {s:.4}") } else { format!("{m:.4}") }
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
    md.push_str(&format!(
        "Preset `{}`, {} steps per run ({} tokens), seeds {:?}; every run of one seed sees the same \
         batches in the same order. Train loss is the mean over the last tenth of the steps; val \
         loss is measured at the end on the run's fixed validation batches; mean ± sample std over seeds.\n\n",
        spec.preset, spec.steps, any.tokens, spec.seeds
    ));
    if !missing.is_empty() {
        md.push_str(&format!("**Unfinished runs (not in the table):** {}\n\n", missing.join(", ")));
    }
    md.push_str("| variant | params | runs | train loss | val loss | val perplexity | Δ val vs baseline (paired) | tok/s | paper val loss (Small 124M) |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut means: Vec<(Variant, f64, f64)> = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let rs = &by_variant[&i];
        if rs.is_empty() {
            md.push_str(&format!("| {} | | 0 | | | | | | |\n", v.name()));
            continue;
        }
        let tl: Vec<f64> = rs.iter().map(|r| r.final_train_loss).collect();
        let vl: Vec<f64> = rs.iter().map(|r| r.final_val_loss).collect();
        let ppl: Vec<f64> = vl.iter().map(|x| x.exp()).collect();
        let tps: Vec<f64> = rs.iter().map(|r| r.tok_per_s).collect();
        let (vm, vs) = mean_std(&vl);
        means.push((*v, vm, vs));
        let delta = match paired_diff(results, *v, Variant::Baseline) {
            Some((m, s, _)) if *v != Variant::Baseline => signed_pm(m, s),
            _ => "—".to_string(),
        };
        let (tm, ts) = mean_std(&tl);
        let (pmn, pst) = mean_std(&ppl);
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {} |\n",
            v.name(),
            rs[0].params,
            rs.len(),
            pm(tm, ts),
            pm(vm, vs),
            if pst.is_finite() { format!("{pmn:.2} ± {pst:.2}") } else { format!("{pmn:.2}") },
            delta,
            mean_std(&tps).0,
            paper_val_loss(*v).map(|x| format!("{x:.3}")).unwrap_or_else(|| paper_note(*v).into()),
        ));
    }
    md.push('\n');
    // The paper's ordering: baseline > DDL d_v=1 > DDL d_v=4 in validation loss.
    let get = |v: Variant| means.iter().find(|m| m.0 == v).map(|m| (m.1, m.2));
    md.push_str("## Does the paper's ordering reproduce?\n\n");
    match (get(Variant::Baseline), get(Variant::DdlV1), get(Variant::Ddl)) {
        (Some(b), Some(v1), Some(v4)) => {
            let ordered = b.0 > v1.0 && v1.0 > v4.0;
            let mut sorted = means.clone();
            sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
            let order: Vec<String> = sorted.iter().map(|m| format!("{} {:.4}", m.0.name(), m.1)).collect();
            md.push_str(&format!(
                "Paper: baseline > ddl_v1 > ddl (validation loss 2.854 > 2.848 > 2.835). Here: baseline {:.4}, \
                 ddl_v1 {:.4}, ddl {:.4} → the ordering **{}**.\n\nAll variants from highest to lowest \
                 validation loss: {}.\n\n",
                b.0,
                v1.0,
                v4.0,
                if ordered { "reproduced" } else { "did not reproduce" },
                order.join(" > ")
            ));
            let sep = |a: (f64, f64), b: (f64, f64)| {
                let s = (a.1.powi(2) + b.1.powi(2)).sqrt();
                if s.is_finite() && s > 0.0 { (a.0 - b.0) / s } else { f64::NAN }
            };
            md.push_str(&format!(
                "Differences in units of the combined seed std: baseline − ddl_v1 = {:.1}σ, ddl_v1 − ddl = {:.1}σ \
                 (below about 2σ a difference is within seed noise at this scale).\n\n",
                sep(b, v1),
                sep(v1, v4)
            ));
        }
        _ => md.push_str("The grid does not contain baseline, ddl_v1 and ddl all three; nothing to compare.\n\n"),
    }
    // k-Map (sublayer output = direction) against v-Map (sublayer output = value), per width.
    let pairs = [(Variant::DdlV1, Variant::DdlV1Vmap, "d_v = 1"), (Variant::Ddl, Variant::DdlVmap, "d_v = 4")];
    let rows: Vec<String> = pairs
        .iter()
        .filter_map(|&(k, v, width)| {
            let (km, ks) = get(k)?;
            let (vm, vs) = get(v)?;
            let (dm, ds, n) = paired_diff(results, v, k)?;
            let z = if ds.is_finite() && ds > 0.0 { dm / (ds / (n as f64).sqrt()) } else { f64::NAN };
            let verdict = if !z.is_finite() || z.abs() < 2.0 {
                "no clear winner (within seed noise)"
            } else if dm > 0.0 {
                "**k-Map**"
            } else {
                "**v-Map**"
            };
            Some(format!(
                "| {width} | {} {} | {} {} | {} | {:.1} | {verdict} |\n",
                k.name(),
                pm(km, ks),
                v.name(),
                pm(vm, vs),
                signed_pm(dm, ds),
                z
            ))
        })
        .collect();
    if !rows.is_empty() {
        md.push_str("## k-Map or v-Map?\n\n");
        md.push_str(
            "k-Map (the paper's primary form): the sublayer output is the direction k, a linear head on the \
             compressed input the value v. v-Map: the sublayer output goes through the value head, a small \
             MLP on the normalised input gives k (spec section 14). Same gate, same backbone. The difference \
             is paired by seed (v-Map − k-Map, same batches); t = mean / (std / √seeds).\n\n",
        );
        md.push_str("| width | k-Map val loss | v-Map val loss | v − k (paired) | t | better here |\n");
        md.push_str("|---|---|---|---:|---:|---|\n");
        for r in rows {
            md.push_str(&r);
        }
        md.push('\n');
    }
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
                    for k in 0..3 {
                        shares[s][k] += r.regimes[s][k] as f64 / tot / rs.len() as f64;
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
    md.push_str("## Runs\n\n| run | val loss | train loss | tok/s | wall time |\n|---|---:|---:|---:|---:|\n");
    for r in results {
        md.push_str(&format!(
            "| {}-seed{} | {:.4} | {:.4} | {:.0} | {:.0} s |\n",
            r.variant, r.seed, r.final_val_loss, r.final_train_loss, r.tok_per_s, r.elapsed_s
        ));
    }
    let total_s: f64 = results.iter().map(|r| r.elapsed_s).sum();
    md.push_str(&format!(
        "\nTotal training time {:.1} min. Plots: `val_loss.png`, `beta_regimes.png`.\n",
        total_s / 60.0
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

    #[test]
    fn the_report_says_which_of_k_map_and_v_map_wins_per_width() {
        let names = ["baseline", "ddl_v1", "ddl_v1_vmap", "ddl", "ddl_vmap"];
        let s = ExperimentSpec {
            variants: names.iter().map(|v| v.to_string()).collect(),
            seeds: vec![1, 2, 3],
            ..spec("").unwrap()
        };
        let variants = s.variant_list().unwrap();
        // d_v = 1: v-Map worse by 0.121–0.123 on every seed; d_v = 4: differences of both signs.
        let loss = |v: &str, seed: u64| match v {
            "baseline" => 2.12,
            "ddl_v1" => 2.09 + 0.01 * seed as f64,
            "ddl_v1_vmap" => 2.21 + 0.011 * seed as f64,
            "ddl" => 2.03 + [0.0, 0.03, -0.02][seed as usize - 1],
            _ => 2.03 + [0.02, -0.01, 0.01][seed as usize - 1],
        };
        let results: Vec<RunResult> = names
            .iter()
            .flat_map(|v| (1..=3).map(move |seed| (v, seed)))
            .map(|(v, seed)| RunResult {
                variant: v.to_string(),
                seed,
                params: 1000,
                steps: 20,
                tokens: 640,
                final_train_loss: loss(v, seed) + 0.01,
                final_val_loss: loss(v, seed),
                val_curve: vec![(10.0, 2.5), (20.0, loss(v, seed))],
                tok_per_s: 100.0,
                elapsed_s: 1.0,
                regimes: Vec::new(),
                beta_mean: Vec::new(),
            })
            .collect();
        let dir = std::env::temp_dir().join(format!("ddl-report-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = write_report(&dir, &s, &variants, &results, &[]).unwrap();
        let md = std::fs::read_to_string(path).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        let row = |w: &str| md.lines().find(|l| l.starts_with(&format!("| {w} |"))).unwrap_or_default().to_string();
        assert!(md.contains("## k-Map or v-Map?"), "{md}");
        assert!(row("d_v = 1").ends_with("| **k-Map** |"), "{}", row("d_v = 1"));
        assert!(row("d_v = 1").contains("+0.1220"), "{}", row("d_v = 1"));
        assert!(row("d_v = 4").contains("no clear winner"), "{}", row("d_v = 4"));
        // The paper has no Small-scale number for v-Map.
        let vmap = md.lines().find(|l| l.starts_with("| ddl_vmap |")).unwrap();
        assert!(vmap.ends_with("| — |"), "{vmap}");
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
