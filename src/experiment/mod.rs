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

mod ablation;
mod folder;
mod grid;
mod length;
mod report;
mod spec;
mod speed;
pub mod status;

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::gpu::Gpu;
use crate::model::Variant;
use crate::train::TrainError;

pub use folder::{check_out, same_data_as_trained};
pub use grid::{beta_regimes, run, run_state, runs_to_do};
pub use report::{Question, comparison_family, paper_val_loss, verdict};
pub use spec::ExperimentSpec;
pub use speed::{SPEED_BLOCKS, SPEED_FILE, measure_speed};

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
    /// (The numbers that may not be finite — a run that diverged — are written as JSON's null,
    /// and null reads back as NaN.)
    #[serde(deserialize_with = "nan_if_null")]
    pub final_train_loss: f64,
    /// NaN: the run diverged (its final evaluation was not a finite number).
    #[serde(deserialize_with = "nan_if_null")]
    pub final_val_loss: f64,
    /// The final evaluation's top-1 accuracy: the share of the validation tokens whose likeliest
    /// prediction came (results made before it was logged: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_val_accuracy: Option<f64>,
    /// (step, validation loss) at every evaluation.
    #[serde(deserialize_with = "curve_nan_if_null")]
    pub val_curve: Vec<(f64, f64)>,
    /// Median training throughput.
    #[serde(deserialize_with = "nan_if_null")]
    pub tok_per_s: f64,
    /// Wall time of the training, seconds.
    #[serde(deserialize_with = "nan_if_null")]
    pub elapsed_s: f64,
    /// Per sublayer: tokens with β < 0.5, in [0.5, 1.5], > 1.5 on the validation batches.
    pub regimes: RegimeCounts,
    /// Mean β per sublayer on the same tokens.
    #[serde(deserialize_with = "all_nan_if_null")]
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
    /// With the spec's `ablate`: the run's final model with each part of each sublayer's write
    /// removed in turn (`None`: not ablated, or a baseline run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ablations: Option<RunAblations>,
    /// Steps that made no update: their loss or gradient was not finite and `skip_nonfinite =
    /// true` under [train] skipped them (results made before they were counted: 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_steps: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl RunResult {
    /// Its final validation loss is not a finite number: the run diverged.
    pub fn diverged(&self) -> bool {
        !self.final_val_loss.is_finite()
    }
}

/// A number that JSON holds as null (serde_json writes NaN and ±∞ so) read as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn all_nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(Vec::<Option<f64>>::deserialize(d)?.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect())
}

fn curve_nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(f64, f64)>, D::Error> {
    Ok(Vec::<(f64, Option<f64>)>::deserialize(d)?.into_iter().map(|(s, l)| (s, l.unwrap_or(f64::NAN))).collect())
}

/// A run's ablations (`ddl eval --ablate` on its final checkpoint, over the validation split).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunAblations {
    /// The validation batches they cover (0: the whole split).
    pub batches: usize,
    /// Tokens evaluated, and the loss of the model as trained over them.
    pub tokens: usize,
    pub loss: f64,
    pub rows: Vec<RunAblation>,
}

/// One sublayer with one part of its write removed: its loss, and the difference from the model
/// as trained over the same tokens (ablated − as trained: positive when the part carried
/// something the model uses).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunAblation {
    pub sublayer: String,
    pub part: crate::train::eval::Ablate,
    pub loss: f64,
    pub difference: f64,
}

impl RunAblations {
    /// Whether these ablations answer the spec's: every part it asks for, over its batches.
    pub fn cover(&self, parts: &[crate::train::eval::Ablate], batches: usize) -> bool {
        self.batches == batches && parts.iter().all(|p| self.rows.iter().any(|r| r.part == *p))
    }
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
    /// Each run's numbers are the same bits as one at a time. Each run then shows its own bar
    /// under the grid's on a terminal, or its lines begin with its name.
    pub more_devices: Vec<Arc<Gpu>>,
}

/// An adapter as results record it: `NAME (Backend)`.
pub fn adapter_name(gpu: &Gpu) -> String {
    format!("{} ({:?})", gpu.info.name, gpu.info.backend)
}

/// What the submodules' tests share: a small spec and a run's result.
#[cfg(test)]
mod test_support {
    use super::*;

    pub(super) fn spec(extra: &str) -> Result<ExperimentSpec, String> {
        let text =
            format!("preset = \"tiny\"\nvariants = [\"baseline\", \"ddl\"]\nseeds = [1, 2]\nsteps = 20\n{extra}");
        let s: ExperimentSpec = toml::from_str(&text).map_err(|e| e.to_string())?;
        s.check()?;
        s.variant_list()?;
        Ok(s)
    }

    pub(super) fn result(v: &str, seed: u64, loss: f64, commit: &str) -> RunResult {
        RunResult {
            variant: v.to_string(),
            seed,
            params: 1000,
            steps: 20,
            tokens: 640,
            final_train_loss: loss + 0.01,
            final_val_loss: loss,
            final_val_accuracy: None,
            val_curve: vec![(10.0, 2.5)],
            tok_per_s: 100.0,
            elapsed_s: 1.0,
            regimes: Vec::new(),
            beta_mean: Vec::new(),
            val_tokens: 4096,
            commit: commit.to_string(),
            dirty: "clean".to_string(),
            adapter: "llvmpipe (Vulkan)".to_string(),
            ablations: None,
            skipped_steps: 0,
        }
    }
}
