//! Headless training: data, schedule, the loop, evaluation, metrics, plots and checkpoints with
//! exact resume.

pub mod cache;
pub mod checkpoint;
pub mod collective;
pub mod config;
pub mod curves;
pub mod data;
#[cfg(feature = "native")]
pub mod describe;
#[cfg(feature = "mpi")]
pub mod distributed;
pub mod eval;
mod exchange;
mod folder;
pub mod inspect;
pub mod lock;
pub mod metrics;
#[cfg(feature = "native")]
pub mod plan;
pub mod plot;
pub mod prepare;
pub mod progress;
pub mod shards;
mod signals;
mod trainer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::gpu::Gpu;
use crate::kernels::adamw::AdamWConfig;
use crate::model::{Model, Program};
use crate::tokenizer::{CharTokenizer, Tokenizer};

pub use collective::{Collective, Single};
pub use config::{RunConfig, TrainConfig};
pub use exchange::{CommTimes, DistOptions, ranks_share};
use folder::*;
pub use folder::{
    branch_run, logged_after, logged_steps_after, out_problem, resume_data_problem, resumed_corpus_missing,
    trained_files,
};
pub use progress::plot_metrics;
use signals::*;
pub use signals::{
    CtrlcScope, Scrap, clear_interruption, install_ctrlc, interrupted, interrupted_status, interruption,
    stop_at_once_from_now, stop_on_broken_pipe,
};
pub(crate) use signals::{
    NO_STEP, SAVED_STEP, SAVING_STEP, SIGINT, SIGPIPE, SIGTERM, StartingRun, TRAINING, adopt_signal, interrupt_now,
    interrupting_signal,
};
use trainer::Trainer;
pub use trainer::tune_for;

/// What to do about a write that failed, for the errors that have a remedy: a full disk, no
/// permission.
fn io_remedy(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
            "; free space on that disk (the run's files written before are intact), or continue the run on another \
             one: `ddl train --resume DIR --out OTHER` copies it there"
        }
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
            "; make the folder writable, or write the run to another --out (a run goes on in a copy with `ddl train \
             --resume DIR --out OTHER`, leaving DIR as it is)"
        }
        _ => "",
    }
}

/// What to do about a write to `path` that failed: [`io_remedy`], or, where its folder is gone
/// (moved or removed while the run trained: "No such file or directory" alone), that.
fn io_remedy_at(path: &Path, e: &std::io::Error) -> String {
    match path.parent().filter(|d| e.kind() == std::io::ErrorKind::NotFound && !d.as_os_str().is_empty()) {
        Some(dir) if !dir.exists() => format!(
            "; the run's folder '{}' is gone (moved or removed while the run trained), and the checkpoints it saved \
             with it: where it was moved, `ddl train --resume NEW_PLACE` continues the run",
            dir.display()
        ),
        _ => io_remedy(e).to_string(),
    }
}

/// Why a run stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("output directory '{}' is not writable: {source}{}", path.display(), io_remedy(source))]
    OutDir { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Config(#[from] crate::model::ConfigError),
    #[error("{0}")]
    Settings(String),
    #[error(transparent)]
    Data(#[from] data::DataError),
    #[error("tokenizer = {setting:?} (expected \"char\" or the path of a tokenizer.json): {source}")]
    Tokenizer { setting: String, source: crate::tokenizer::TokenizerError },
    #[error(transparent)]
    Checkpoint(#[from] checkpoint::CheckpointError),
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error(
        "step {step}: the {what} is not finite ({value}); the run stopped without writing a checkpoint \
         (the last one saved before, if any, is kept). Lower the learning rate, or pass --skip-nonfinite to skip such \
         steps"
    )]
    NonFinite { step: usize, what: &'static str, value: f32 },
    #[error("cannot write '{}': {source}{}", path.display(), io_remedy_at(path, source))]
    Io { path: PathBuf, source: std::io::Error },
    #[error("step {step}: saving the checkpoint failed: {source}. {kept}")]
    Save { step: usize, kept: String, source: checkpoint::CheckpointError },
    #[error("step {step}: {source}. {kept}")]
    GpuAtStep { step: usize, kept: String, source: crate::gpu::GpuError },
    /// The driver ran out of memory during a step: the plan of what the run asks for, how to
    /// need less, and what is kept.
    #[error("step {step}: {detail}. {memory}. {kept}")]
    OutOfMemoryAtStep { step: usize, detail: String, memory: String, kept: String },
    #[error(
        "'{}' holds a run ({what}): `ddl train --resume {}` continues it, --overwrite replaces it, or choose \
         another --out",
        dir.display(),
        crate::shell_word(dir)
    )]
    RunExists { dir: PathBuf, what: String },
    #[error(
        "'{}' holds a run that stopped before its first checkpoint ({what}; no {}), so it cannot be resumed: \
         --overwrite replaces it, or choose another --out",
        dir.display(),
        checkpoint::MODEL_FILE
    )]
    RunWithoutCheckpoint { dir: PathBuf, what: String },
    /// A run whose own checkpoint is gone but which keeps others (`kept`: the remedy).
    #[error(
        "'{}' holds a run ({what}) whose {} is gone, but {kept}; --overwrite replaces the run and its kept \
         checkpoints, or choose another --out",
        dir.display(),
        checkpoint::MODEL_FILE
    )]
    RunWithKeptCheckpoints { dir: PathBuf, what: String, kept: String },
    /// A run whose own checkpoint does not read (`problem`), so that `--resume` would fail;
    /// `kept`: a kept checkpoint to continue from, said as "; but …", or empty.
    #[error(
        "'{}' holds a run ({what}) whose checkpoint does not read ({problem}), so it cannot be resumed{kept}; \
         --overwrite replaces the run, or choose another --out",
        dir.display()
    )]
    RunUnreadable { dir: PathBuf, what: String, problem: String, kept: String },
    /// Files of the names a run writes in a folder that holds no run (the user's own settings
    /// file, a copied summary, a plot): a new run would replace them.
    #[error(
        "'{}' holds {files} but no run (no metrics.jsonl, no checkpoint, no data.json a run wrote): a new run writes \
         files of these names and would replace them{hint}. Move them elsewhere, choose another --out, or pass \
         --overwrite to replace them",
        dir.display()
    )]
    NotARunsFiles { dir: PathBuf, files: String, hint: String },
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    /// Ctrl-C (or SIGTERM) stopped work that keeps nothing of itself half done (an evaluation
    /// of a grid's ablations), where the process stops cleanly on it.
    #[error("{} stopped {what} before its end: nothing of it was kept", interruption())]
    Interrupted { what: String },
    /// A data-parallel run cannot go on; every rank meets this error at the same point.
    #[error("{msg}")]
    Distributed { rank: usize, size: usize, msg: String },
}

impl TrainError {
    /// Whether every rank of a data-parallel run stops with this error at the same point (a
    /// settings mismatch found at start-up, parameters that diverged, a non-finite step), so
    /// the ranks can wait for each other to report it before the job ends.
    pub fn on_every_rank(&self) -> bool {
        matches!(self, TrainError::Distributed { .. } | TrainError::NonFinite { .. })
    }
}

/// What a finished (or interrupted) run reports.
#[derive(Debug, Clone)]
pub struct Summary {
    pub step: usize,
    /// The step this invocation was to stop after (`--steps`): a later `--resume` without
    /// `--steps` continues to it.
    pub target: usize,
    pub last_loss: f32,
    pub val_loss: Option<f64>,
    /// Tokens the final validation loss covers (the whole validation split, or
    /// `train.val_max_tokens`).
    pub val_tokens: Option<usize>,
    /// Whether those tokens are the whole validation split (false: `train.val_max_tokens` cut it).
    pub val_whole: bool,
    /// The best checkpoint (`checkpoints/best/`), when evaluations chose one.
    pub best: Option<checkpoint::Best>,
    /// Seconds from the call to the first step (settings, data, model, programs), and of them
    /// opening the data (tokenizing a corpus the first time; mapping shards after).
    pub startup_s: f64,
    pub data_open_s: f64,
    pub tokens_per_s: f64,
    pub interrupted: bool,
    /// `train.early_stop` ended this invocation before its last step.
    pub stopped_early: Option<EarlyStop>,
    /// Steps of this invocation skipped for a non-finite loss or gradient norm
    /// (`train.skip_nonfinite`).
    pub skipped_nonfinite: usize,
    /// (peak resident bytes the run added after the device was created, the memory plan's
    /// total): Linux only (`/proc/self/status`).
    pub memory: Option<(u64, u64)>,
    /// The adapter's memory is the host's (a CPU adapter): the resident size holds the model's
    /// buffers, not only the host side's.
    pub host_device_memory: bool,
    pub losses: Vec<f32>,
}

/// Where and why `train.early_stop` ended a run.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct EarlyStop {
    /// The step it stopped after, and the step it was to train to.
    pub step: usize,
    pub planned: usize,
    /// The validation curve's lowest point, and the evaluations since that were not below it.
    pub best_step: usize,
    pub best_loss: f64,
    pub evaluations: usize,
}

impl std::fmt::Display for EarlyStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stopped early after step {} of {} (train.early_stop): {} without a validation loss below \
             step {}'s {:.4}; `ddl train --resume` with a larger --steps and --set train.early_stop=0 (or a larger \
             one) trains on",
            self.step,
            self.planned,
            crate::plural(self.evaluations, "evaluation"),
            self.best_step,
            self.best_loss
        )
    }
}

impl Summary {
    /// What `summary.json` in the run folder holds: this invocation's end (its losses are in
    /// `metrics.jsonl`).
    pub fn to_json(&self) -> serde_json::Value {
        let finite = |x: f64| x.is_finite().then_some(x);
        serde_json::json!({
            "step": self.step,
            "steps_target": self.target,
            "train_loss": finite(self.last_loss as f64),
            "val_loss": self.val_loss.and_then(finite),
            "val_tokens": self.val_tokens,
            "val_whole": self.val_tokens.map(|_| self.val_whole),
            "best": self.best,
            "startup_s": self.startup_s,
            "data_open_s": self.data_open_s,
            "tokens_per_s": finite(self.tokens_per_s),
            "interrupted": self.interrupted,
            "stopped_early": self.stopped_early,
            "steps_this_invocation": self.losses.len(),
            "skipped_nonfinite": self.skipped_nonfinite,
            "peak_resident_added_bytes": self.memory.map(|m| m.0),
            "memory_plan_bytes": self.memory.map(|m| m.1),
        })
    }
}

/// The results of a run in `dir` whose checkpoint is at step `step` and whose final evaluation
/// there is done: what `--resume` of a finished run reports without opening the device. From
/// `summary.json` (at that step, not interrupted, with a validation loss); where that file is
/// missing or unreadable, from `metrics.jsonl`'s final evaluation row of that step (the second
/// value says so). None when the final evaluation is not recorded (the device path makes it up).
/// Its losses and memory are empty (they belong to the invocation that trained).
#[cfg(feature = "native")]
pub fn finished_summary(dir: &Path, step: usize) -> Option<(Summary, bool)> {
    if checkpoint::saved_step(dir).ok() != Some(step) {
        return None;
    }
    let summary = |j: &serde_json::Value, whole: Option<bool>| -> Option<Summary> {
        let val_tokens = j["val_tokens"].as_u64()? as usize;
        Some(Summary {
            step,
            target: j["steps_target"].as_u64().map_or(step, |t| t as usize),
            last_loss: j["train_loss"].as_f64().map_or(f32::NAN, |x| x as f32),
            val_loss: Some(j["val_loss"].as_f64()?),
            val_tokens: Some(val_tokens),
            val_whole: whole.or(j["val_whole"].as_bool()).unwrap_or(true),
            best: checkpoint::read_best(dir),
            startup_s: 0.0,
            data_open_s: 0.0,
            tokens_per_s: j["tokens_per_s"].as_f64().unwrap_or(f64::NAN),
            interrupted: false,
            stopped_early: None,
            skipped_nonfinite: 0,
            memory: None,
            host_device_memory: false,
            losses: Vec::new(),
        })
    };
    let file = std::fs::read_to_string(dir.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .filter(|j| j["step"].as_u64().is_some());
    if let Some(j) = file {
        // A summary of this step that is whole: its evaluation is done, or was stopped.
        if j["step"].as_u64() == Some(step as u64) && j["interrupted"].is_boolean() {
            return if j["interrupted"] == false { summary(&j, None).map(|s| (s, false)) } else { None };
        }
    }
    // No usable summary: the final evaluation's row in metrics.jsonl (its tokens are the whole
    // split unless `train.val_max_tokens` cut them).
    let row = final_evaluation_row(dir, step)?;
    let cap = RunConfig::saved(dir).ok().map_or(0, |c| c.train.val_max_tokens);
    let whole = cap == 0 || row["val_tokens"].as_u64().is_some_and(|n| (n as usize) < cap);
    summary(&row, Some(whole)).map(|s| (s, true))
}

/// Whether the run in `dir`, finished at `step`, lost from `metrics.jsonl` the final evaluation
/// its `summary.json` holds (the file cut short in a copy, or replaced): the curves (`ddl plot`,
/// loss.png) draw from metrics.jsonl, and `--resume` makes the evaluation again.
#[cfg(feature = "native")]
pub fn final_evaluation_lost(dir: &Path, step: usize) -> bool {
    finished_summary(dir, step).is_some_and(|(_, from_metrics)| !from_metrics)
        && final_evaluation_row(dir, step).is_none()
}

/// The last row of `out/metrics.jsonl` holding the final evaluation (over the whole validation
/// split) of `step`, if any.
#[cfg(feature = "native")]
pub(crate) fn final_evaluation_row(out: &Path, step: usize) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(out.join("metrics.jsonl")).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["val_full"] == true && j["step"].as_u64() == Some(step as u64) && j["val_loss"].is_number())
}

/// The `--steps` of the invocation that saved `dir`'s checkpoint (its run state), if recorded
/// (checkpoints before it was are not): what `--resume` without `--steps` continues to.
#[cfg(feature = "native")]
pub fn saved_target(dir: &Path) -> Option<usize> {
    checkpoint::saved_state(dir).ok()?.target.filter(|&t| t >= 1)
}

/// How to run.
pub struct TrainOptions {
    pub run: RunConfig,
    /// Stop after this optimizer step (the schedule's length is `train.decay_steps`).
    pub steps: usize,
    pub out: PathBuf,
    /// Continue from the checkpoint in `out`.
    pub resume: bool,
    /// Replace a run that `out` holds (without it, a folder holding a run is refused unless
    /// resuming).
    pub overwrite: bool,
    /// What the run shows as it goes.
    pub show: Show,
}

/// What a run shows as it goes (its files are the same whatever it shows).
#[derive(Clone, Debug, Default)]
pub enum Show {
    /// A progress bar when stderr is a terminal, else a line at every logged step.
    #[default]
    Bar,
    /// Nothing (tests, benchmarks; the ranks after the first always).
    Quiet,
    /// One of several runs training at once in this process (`ddl experiment --jobs`): on a
    /// terminal its own bar, named, among the others' in `bars`; else its lines, each starting
    /// with `[name]`.
    Job { name: String, bars: indicatif::MultiProgress },
}

fn adamw_cfg(t: &TrainConfig, step: usize) -> AdamWConfig {
    AdamWConfig {
        lr: t.lr_at(step) as f32,
        beta1: t.beta1 as f32,
        beta2: t.beta2 as f32,
        eps: t.eps as f32,
        weight_decay: t.weight_decay as f32,
        grad_clip: t.grad_clip as f32,
        clip_eps: 1e-6,
        step: (step + 1) as u32,
        grad_scale: 1.0,
    }
}

/// Which validation windows an evaluation covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalSpan {
    /// The first `train.eval_batches` batches of windows (the evaluations during training), at
    /// most the windows `train.val_max_tokens` leaves.
    Periodic,
    /// Every window of the validation split (up to `train.val_max_tokens` when set): the final
    /// evaluation, `ddl eval`, the experiments.
    Full,
}

/// What an evaluation measured.
#[derive(Debug, Clone, Copy)]
pub struct Eval {
    /// Mean cross-entropy per predicted token (label smoothing off).
    pub loss: f64,
    /// Predicted tokens it covers.
    pub tokens: usize,
    /// The loss and tokens of its part over the periodic subset (the first `train.eval_batches`
    /// batches of windows, which every evaluation covers): the number evaluations of different
    /// spans are compared by (the best checkpoint).
    pub subset: (f64, usize),
    /// The share of the predicted tokens that were the model's likeliest (top-1 accuracy), all
    /// and over the periodic subset; NaN when the program does not score its tokens
    /// ([`crate::model::Scoring::Ranks`]; training's evaluation program does).
    pub accuracy: f64,
    pub subset_accuracy: f64,
    /// Whether it covered its whole span (false: its `tick` stopped it; the numbers cover the
    /// batches before).
    pub complete: bool,
}

/// The windows `span` covers at a program's batch `b` and length `t`.
pub fn eval_windows(data: &data::Dataset, cfg: &TrainConfig, span: EvalSpan, b: usize, t: usize) -> usize {
    let all = data.val_windows(t);
    // `train.val_max_tokens` caps every evaluation, the periodic ones too: their windows are
    // then the final one's first (its subset, by which the best checkpoint is chosen, is the
    // same windows in every evaluation).
    let full = if cfg.val_max_tokens > 0 { all.min(cfg.val_max_tokens.div_ceil(t)) } else { all };
    match span {
        EvalSpan::Periodic => full.min(cfg.eval_batches * b),
        EvalSpan::Full => full,
    }
}

/// Mean validation loss over the windows of `span` (label smoothing off).
pub fn evaluate(
    model: &Model,
    prog: &Program,
    data: &data::Dataset,
    t: &TrainConfig,
    span: EvalSpan,
) -> Result<Eval, TrainError> {
    evaluate_sharded(model, prog, data, t, span, &Single, &mut |_| true)
}

/// One batch of an evaluation, just run (`prog` still holds its activations).
#[derive(Debug, Clone, Copy)]
pub struct Tick<'a> {
    /// This rank's batches done, of `of`.
    pub done: usize,
    pub of: usize,
    /// The batch's mean loss and the tokens it predicted.
    pub loss: f64,
    pub tokens: usize,
    /// The batch's token scores `[b·t, 4]` as read back for the accuracy (a program that scores
    /// its tokens: [`Program::row_ranks`]), so that a caller needs no second readback.
    pub scores: Option<&'a [f32]>,
}

impl Tick<'_> {
    /// Whether this batch finishes another tenth of a long evaluation (≥ 100 batches) since
    /// `shown` (tenths already reported, updated): where a run without a progress bar prints a
    /// line, so that minutes of evaluation show a sign of life.
    pub fn next_tenth(&self, shown: &mut usize) -> bool {
        let tenth = self.done * 10 / self.of.max(1);
        if self.of >= 100 && tenth > *shown {
            *shown = tenth;
            return true;
        }
        false
    }
}

/// [`evaluate`] with the batches shared out over the ranks of `comm` (batch i on rank i mod N)
/// and the sums reduced: every rank gets the same value. `tick` runs after each of this rank's
/// batches (`ddl eval`: a progress bar, β, each batch's loss for a paired comparison) and says
/// whether to go on: a single process stops there when it says no (the result then has
/// `complete: false`); ranks of a data-parallel run always go on together.
pub fn evaluate_sharded(
    model: &Model,
    prog: &Program,
    data: &data::Dataset,
    t: &TrainConfig,
    span: EvalSpan,
    comm: &dyn Collective,
    tick: &mut dyn FnMut(Tick<'_>) -> bool,
) -> Result<Eval, TrainError> {
    let (b, len) = (prog.b(), prog.t());
    let windows = eval_windows(data, t, span, b, len);
    let batches = windows.div_ceil(b);
    // The periodic subset is the first batches of every span.
    let subset_batches = eval_windows(data, t, EvalSpan::Periodic, b, len).div_ceil(b).min(batches);
    // loss·tokens and tokens, all and the subset; the likeliest token's hits, all and the subset
    let mut sums = [0.0f64; 6];
    let scored = prog.row_ranks().is_some();
    let mine = (comm.rank()..batches).step_by(comm.size()).len();
    let mut complete = true;
    for (done, i) in (comm.rank()..batches).step_by(comm.size()).enumerate() {
        let (x, mut y) = data.val_batch(i * b, b, len);
        // Rows past the span's last window predict nothing.
        for r in (windows - i * b).min(b)..b {
            y[r * len..(r + 1) * len].fill(-1);
        }
        prog.set_batch(model, &x, &y)?;
        let (loss, n) = model.eval_loss(prog)?;
        // (Rank 1: the likeliest token came; ignored rows have rank 0.)
        let scores = prog.row_ranks().map(|r| r.read_f32(&model.gpu)).transpose()?;
        let hits = scores.as_deref().map_or(0, |s| s.chunks_exact(4).filter(|s| s[0] == 1.0).count()) as f64;
        sums[0] += loss as f64 * n as f64;
        sums[1] += n as f64;
        sums[4] += hits;
        if i < subset_batches {
            sums[2] += loss as f64 * n as f64;
            sums[3] += n as f64;
            sums[5] += hits;
        }
        let k = Tick { done: done + 1, of: mine, loss: loss as f64, tokens: n as usize, scores: scores.as_deref() };
        let go_on = tick(k);
        if !go_on && !comm.is_distributed() {
            complete = false;
            break;
        }
    }
    if comm.is_distributed() {
        comm.all_reduce_sum_f64(&mut sums, "validation loss");
    }
    let mean = |s: f64, n: f64| if n > 0.0 { s / n } else { f64::NAN };
    let share = |hits: f64, n: f64| if scored { mean(hits, n) } else { f64::NAN };
    Ok(Eval {
        loss: mean(sums[0], sums[1]),
        tokens: sums[1] as usize,
        subset: (mean(sums[2], sums[3]), sums[3] as usize),
        accuracy: share(sums[4], sums[1]),
        subset_accuracy: share(sums[5], sums[3]),
        complete,
    })
}

/// Mean β of every sublayer (DDL variants) of the last forward pass of `prog`.
pub fn beta_means(model: &Model, prog: &Program) -> Result<Vec<f64>, TrainError> {
    let mut out = Vec::new();
    for w in prog.acts().writes() {
        let b = w.beta.read_f32(&model.gpu)?;
        out.push(b.iter().map(|&x| x as f64).sum::<f64>() / b.len().max(1) as f64);
    }
    Ok(out)
}

/// The tokenizer a run's `tokenizer` setting names: `"char"` builds one from the corpus text,
/// anything else is the path of a tokenizer.json.
pub fn build_tokenizer(setting: &str, corpus_text: &str) -> Result<Tokenizer, TrainError> {
    if setting == "char" {
        return Ok(Tokenizer::Char(CharTokenizer::from_corpus(corpus_text).map_err(data::DataError::from)?));
    }
    Tokenizer::load(Path::new(setting)).map_err(|source| TrainError::Tokenizer { setting: setting.to_string(), source })
}

/// A tokenizer file, or the tokenizer a checkpoint holds when `path` is a run folder or one of
/// its kept checkpoints (`ddl data prepare --tokenizer RUN`, `ddl tokenizer encode`: the text
/// tokenised as that model reads it, whatever became of its tokenizer file).
pub fn load_tokenizer(path: &Path) -> Result<Tokenizer, crate::tokenizer::TokenizerError> {
    if path.is_dir() && path.join(checkpoint::MODEL_FILE).is_file() {
        return checkpoint::saved_tokenizer(path).map_err(|e| crate::tokenizer::TokenizerError::Malformed {
            path: path.join(checkpoint::MODEL_FILE),
            msg: e.to_string(),
        });
    }
    if path.is_dir() {
        let inside = path.join("tokenizer.json");
        let remedy = match inside.is_file() {
            true => format!("give the tokenizer.json it holds, '{}'", inside.display()),
            false => {
                "give a tokenizer.json (Hugging Face format), or a run folder (`ddl train --out`) for its model's \
                      tokenizer"
                    .into()
            }
        };
        return Err(crate::tokenizer::TokenizerError::Folder { path: path.to_path_buf(), remedy });
    }
    Tokenizer::load(path)
}

/// A new run's data checked before the adapter opens: a corpus tokenised and cached, and its
/// splits checked, or `--data` shards found and their lengths read from their headers (nothing
/// tokenised); data too short for a validation split, or for one sequence, is refused without
/// asking for an adapter. (The run opens the data again.)
pub fn check_new_run_data(run: &RunConfig) -> Result<(), TrainError> {
    let mut run = run.clone();
    run.absolute_paths();
    if !run.data.is_empty() {
        return data::check_run_shards(&run);
    }
    trainer::open_new_run_data(&run).map(drop)
}

/// Trains (or resumes) a model and writes everything into `opts.out`.
pub fn train(gpu: Arc<Gpu>, opts: TrainOptions) -> Result<Summary, TrainError> {
    train_with(gpu, opts, &Single, &DistOptions::default())
}

/// [`train`] as one rank of a data-parallel run: the micro-batches of each global batch
/// (`batch_size × grad_accum` sequences, the same a single process draws) are shared out over the
/// ranks (micro-batch m on rank m mod N), the gradients summed with `comm`, and every rank applies
/// the same AdamW step. Rank 0 alone writes config, metrics, plots and checkpoints.
pub fn train_with(
    gpu: Arc<Gpu>,
    opts: TrainOptions,
    comm: &dyn Collective,
    dist: &DistOptions,
) -> Result<Summary, TrainError> {
    let mut run = Trainer::open(gpu, opts, comm, dist)?;
    while run.step < run.end && !run.interrupted() {
        let step = run.step()?;
        run.log(&step)?;
        run.after_step()?;
    }
    run.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Losses written to `summary.json` and `metrics.jsonl` read back as the same f64 (what a
    /// finished run's `--resume` reports, what `bench precision` and the experiment report read
    /// back): serde_json's default parser gets about 6 % of random f64 one unit in the last place
    /// off; its `float_roundtrip` feature (Cargo.toml) parses them exactly.
    #[test]
    fn losses_read_back_from_json_are_the_losses_written() {
        let mut rng = crate::testing::Rng::fresh();
        let u = rng.uniform(40_000, 0.0, 1.0);
        for p in u.chunks(2) {
            let x = p[0] as f64 * 8.0 + p[1] as f64 * 1e-7;
            let text = serde_json::json!({ "val_loss": x }).to_string();
            let back: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(back["val_loss"].as_f64(), Some(x), "seed {}: {text}", rng.seed);
        }
    }

    /// A write that failed for want of space or permission says what to do; others say what failed.
    #[test]
    fn write_errors_name_their_remedy() {
        let err = |kind| TrainError::Io { path: "run/metrics.jsonl".into(), source: std::io::Error::from(kind) };
        let full = err(std::io::ErrorKind::StorageFull).to_string();
        assert!(full.starts_with("cannot write 'run/metrics.jsonl': ") && full.contains("free space"), "{full}");
        assert!(full.contains("--resume DIR --out OTHER"), "{full}");
        let denied = err(std::io::ErrorKind::PermissionDenied).to_string();
        assert!(denied.contains("make the folder writable"), "{denied}");
        let other = err(std::io::ErrorKind::InvalidData).to_string();
        assert!(!other.contains("; "), "{other}");
        // A run's folder moved (or removed) while it trained: said, with where its checkpoints
        // are (it was "No such file or directory" alone).
        let gone = std::env::temp_dir().join("ddl-no-such-run-folder").join("metrics.jsonl");
        let e = TrainError::Io { path: gone, source: std::io::Error::from(std::io::ErrorKind::NotFound) }.to_string();
        assert!(
            e.contains("ddl-no-such-run-folder' is gone (moved or removed") && e.contains("--resume NEW_PLACE"),
            "{e}"
        );
        // The command given runs as printed in a shell, whatever the folder's name.
        let exists = TrainError::RunExists { dir: "runs/ré sumé".into(), what: "metrics.jsonl".into() }.to_string();
        assert!(exists.contains("`ddl train --resume 'runs/ré sumé'` continues it"), "{exists}");
        // A run on a read-only disk (`--resume` of a run on a DVD, a read-only mount) was told
        // only the OS's words: now how to go on elsewhere.
        for kind in [std::io::ErrorKind::ReadOnlyFilesystem, std::io::ErrorKind::PermissionDenied] {
            let out = TrainError::OutDir { path: "runs/a".into(), source: std::io::Error::from(kind) }.to_string();
            assert!(out.starts_with("output directory 'runs/a' is not writable: "), "{out}");
            assert!(out.contains("make the folder writable") && out.contains("--resume DIR --out OTHER"), "{out}");
        }
    }

    /// A second Ctrl-C removes the folders still being written (`ddl data prepare` left its
    /// temporary folder, and said a checkpoint was intact where there was none) and says so;
    /// a folder whose writer finished (its [`Scrap`] dropped) stays.
    #[test]
    fn a_second_ctrl_c_removes_unfinished_output_and_says_what_is_left() {
        let dir = crate::testing::scratch_dir("scrap");
        let (writing, done) = (dir.join(".out.prepare-1"), dir.join("done"));
        std::fs::create_dir_all(&writing).unwrap();
        std::fs::create_dir_all(&done).unwrap();
        std::fs::write(writing.join("data_train_000000.bin"), b"half").unwrap();
        // (The registry is the process's: other tests' folders may be in it too.)
        let listed = |p: &Path| SCRAP.lock().unwrap().contains(&p.to_path_buf());
        let w = Scrap::new(&writing);
        drop(Scrap::new(&done));
        assert!(listed(&writing) && !listed(&done));
        let said = stop_at_once_with("second Ctrl-C", std::slice::from_ref(&writing), None);
        assert!(!writing.exists() && done.exists(), "{said}");
        assert!(said.contains("removed the unfinished") && said.contains(".out.prepare-1"), "{said}");
        assert!(!said.contains("checkpoint"), "{said}");
        assert_eq!(stop_at_once_with("second Ctrl-C", &[], None), "second Ctrl-C: stopped at once");
        // Two interruptions of different kinds are named as such.
        assert_eq!(
            (label_of("Ctrl-C", "Ctrl-C"), label_of("Ctrl-C", "SIGTERM")),
            ("second Ctrl-C".into(), "SIGTERM after Ctrl-C".into())
        );
        // A training run: the checkpoint that is left, or that there is none; the save cut short.
        let said = stop_at_once_with("second Ctrl-C", &[], Some((Some(6), None)));
        assert!(
            said.ends_with("stopped at once; the checkpoint of step 6 is intact (`--resume` continues from it)"),
            "{said}"
        );
        let said = stop_at_once_with("second Ctrl-C", &[], Some((Some(6), Some(9))));
        assert!(said.contains("without finishing the save of step 9; the checkpoint of step 6 is intact"), "{said}");
        let said = stop_at_once_with("second Ctrl-C", &[], Some((None, None)));
        assert!(said.contains("no checkpoint had been saved yet") && !said.contains("--resume"), "{said}");
        drop(w);
        assert!(!listed(&writing));
    }
}
