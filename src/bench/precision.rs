//! `ddl bench precision`: does training in f16 (`--precision f16`) reach the loss f32 reaches?
//! Runs of one preset and variant at each precision for each seed (a seed's two runs see the same
//! batches), their final validation losses over the whole split, and the paired f16 − f32
//! difference against the spread of the f32 runs over seeds. Runs finished earlier in `out` are
//! read back, so an interrupted benchmark continues where it stopped.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::Row;
use crate::gpu::Gpu;
use crate::model::Precision;
use crate::stats::{Paired, Sample};
use crate::train::{RunConfig, TrainOptions};

/// What to compare.
#[derive(Debug, Clone)]
pub struct PrecisionBench {
    /// The runs' settings: a preset's for the variant, with any others over them (`ddl bench
    /// precision --config / --set`, e.g. a smaller model). The benchmark sets its own over these
    /// ([`OWN_SETTINGS`]): the corpus, the precision, the seed, the schedule's length (`steps`,
    /// warm-up a tenth), no evaluations or checkpoints before the end.
    pub base: RunConfig,
    pub corpus: String,
    pub steps: usize,
    pub seeds: Vec<u64>,
    pub out: PathBuf,
}

/// One run's final validation loss (read from its `summary.json` when it already finished
/// `steps`, else trained now).
fn run_one(
    gpu: &std::sync::Arc<Gpu>,
    b: &PrecisionBench,
    precision: Precision,
    seed: u64,
) -> anyhow::Result<(f64, usize, f64, PathBuf)> {
    let dir = b.out.join(format!("{}-{}-seed{seed}", b.base.model.variant.name(), precision.name()));
    let run = run_config(b, precision, seed)?;
    // A run of other settings (another preset or corpus) in the same folder is not this one's
    // result: refused, not reported as if it were, nor overwritten.
    if let Some(Ok(saved)) = RunConfig::read_file(&dir) {
        let diffs = run.resume_differences(&saved).map_err(anyhow::Error::msg)?;
        if !diffs.is_empty() {
            let list: Vec<String> =
                diffs.iter().map(|(k, have, want)| format!("{k} = {have} there, {want} here")).collect();
            anyhow::bail!(
                "{}: a run of other settings than this benchmark's ({}); give another --out, or delete that folder \
                 to train it again",
                dir.display(),
                list.join("; ")
            );
        }
    }
    if let Some(done) = finished(&dir, b.steps) {
        return Ok((done.0, done.1, done.2, dir));
    }
    let s = crate::train::train(
        gpu.clone(),
        TrainOptions {
            run,
            steps: b.steps,
            out: dir.clone(),
            resume: false,
            overwrite: true,
            show: crate::train::Show::Quiet,
        },
    )?;
    if crate::train::interrupted() {
        anyhow::bail!("{}: interrupted ({})", dir.display(), crate::train::interruption());
    }
    let val = s.val_loss.ok_or_else(|| anyhow::anyhow!("{}: the run reported no validation loss", dir.display()))?;
    Ok((val, s.val_tokens.unwrap_or(0), s.tokens_per_s, dir))
}

/// The settings [`run_config`] gives each run over the base, each with the flag that gives it
/// or why it is the benchmark's (`ddl bench precision --set` refuses them with that reason).
pub const OWN_SETTINGS: [(&str, &str); 10] = [
    ("train.precision", "each seed trains once in f32 and once in f16"),
    ("train.state_f16", "the f32 runs keep f32 states, and f16 precision implies f16 states"),
    ("train.seed", "give --seeds"),
    ("train.decay_steps", "the schedule is --steps long"),
    ("train.warmup_steps", "warm-up is a tenth of --steps"),
    ("train.eval_every", "the runs are evaluated once, at the end"),
    ("train.checkpoint_every", "the runs keep their final checkpoint only"),
    ("corpus", "give --corpus"),
    ("data", "the runs train on --corpus"),
    ("init_from", "the runs start from the spec's initialisation"),
];

/// The settings of one run of the benchmark: the base with [`OWN_SETTINGS`] given their values.
fn run_config(b: &PrecisionBench, precision: Precision, seed: u64) -> anyhow::Result<RunConfig> {
    let mut run = b.base.clone();
    run.corpus = b.corpus.clone();
    run.data.clear();
    run.init_from.clear();
    run.init_from_step = None;
    for kv in [
        format!("train.precision={}", precision.name()),
        // f32 runs in f32 throughout (f16 precision implies f16 states where the variant has them).
        "train.state_f16=false".to_string(),
        format!("train.seed={seed}"),
        format!("train.decay_steps={}", b.steps),
        format!("train.warmup_steps={}", (b.steps / 10).max(1)),
        "train.eval_every=0".to_string(),
        "train.checkpoint_every=0".to_string(),
    ] {
        run.set(&kv).map_err(anyhow::Error::msg)?;
    }
    Ok(run)
}

/// (val loss, val tokens, tok/s) of a run folder whose `summary.json` says it reached `steps`.
fn finished(dir: &Path, steps: usize) -> Option<(f64, usize, f64)> {
    let text = std::fs::read_to_string(dir.join("summary.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    (v["step"].as_u64()? == steps as u64 && !v["interrupted"].as_bool().unwrap_or(true)).then_some((
        v["val_loss"].as_f64()?,
        v["val_tokens"].as_u64().unwrap_or(0) as usize,
        v["tokens_per_s"].as_f64().unwrap_or(f64::NAN),
    ))
}

/// `--seeds`: at least two, each once (`ddl bench precision` checks them before the adapter
/// opens, [`precision_rows`] again).
pub fn check_seeds(seeds: &[u64]) -> anyhow::Result<()> {
    if seeds.len() < 2 {
        anyhow::bail!(
            "--seeds: at least two seeds are needed for a spread and a paired test, got {seeds:?}; give two or more \
             different seeds (e.g. --seeds 1,2,3)"
        );
    }
    // A seed given twice is one run counted twice: a spread and a test of it would be false.
    if let Some(s) = seeds.iter().enumerate().find_map(|(i, s)| seeds[..i].contains(s).then_some(s)) {
        anyhow::bail!("--seeds: seed {s} is given twice; give at least two different seeds (e.g. 1,2,3)");
    }
    Ok(())
}

/// A signed loss difference in the verdict: `+0.0123`, `-0.0123`; zero (either sign) `0.0000`; one
/// that four decimals would show as a zero, in three significant digits (`-3.21e-6`).
pub fn signed_diff(x: f64) -> String {
    if x == 0.0 {
        "0.0000".to_string()
    } else if x.abs() < 0.00005 {
        format!("{x:+.2e}")
    } else {
        format!("{x:+.4}")
    }
}

/// The runs (a row each, as they finish) and the comparison (one row): per precision the mean
/// and sd over seeds, the paired f16 − f32 difference with its 95 % interval and p, and whether
/// its mean lies within the f32 seed spread (|mean difference| ≤ sd of the f32 losses).
pub fn precision_rows(gpu: &std::sync::Arc<Gpu>, b: &PrecisionBench, mut emit: impl FnMut(Row)) -> anyhow::Result<()> {
    check_seeds(&b.seeds)?;
    let mut pairs = Vec::new();
    for &seed in &b.seeds {
        let mut vals = [0.0; 2];
        for (i, p) in [Precision::F32, Precision::F16].into_iter().enumerate() {
            let (val, tokens, tok_s, dir) = run_one(gpu, b, p, seed)?;
            vals[i] = val;
            emit(Row(json!({
                "bench": "precision_run", "preset": b.base.preset, "variant": b.base.model.variant.name(), "precision": p.name(),
                "seed": seed, "steps": b.steps, "val_loss": val, "val_tokens": tokens, "tok_per_s": tok_s,
                "dir": dir.display().to_string(),
            })));
        }
        pairs.push((vals[1], vals[0]));
    }
    let f32s = Sample::of(&pairs.iter().map(|p| p.1).collect::<Vec<_>>());
    let f16s = Sample::of(&pairs.iter().map(|p| p.0).collect::<Vec<_>>());
    let d = Paired::of(&pairs).expect("two or more seeds");
    let within = d.diff.mean.abs() <= f32s.sd;
    emit(Row(json!({
        "bench": "precision", "preset": b.base.preset, "variant": b.base.model.variant.name(), "steps": b.steps, "seeds": b.seeds,
        "f32_mean": f32s.mean, "f32_sd": f32s.sd, "f16_mean": f16s.mean, "f16_sd": f16s.sd,
        "diff_mean": d.diff.mean, "diff_ci95": [d.diff.ci.0, d.diff.ci.1], "t": d.t, "df": d.df, "p": d.p,
        "no_spread": d.no_spread, "within_f32_spread": within,
        "verdict": format!(
            "f16 − f32 = {} ({}, n = {}): {} the f32 seed spread (sd {:.4})",
            signed_diff(d.diff.mean),
            if d.no_spread {
                format!("every seed the same: no spread, no interval; exact sign test p = {:.3}", d.p)
            } else {
                format!("95 % interval [{}, {}], p = {:.3}", signed_diff(d.diff.ci.0), signed_diff(d.diff.ci.1), d.p)
            },
            pairs.len(),
            if within { "within" } else { "OUTSIDE" }, f32s.sd
        ),
    })));
    Ok(())
}
