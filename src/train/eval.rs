//! `ddl eval`: a checkpoint's loss, perplexity and bits per byte over its run's validation split
//! (or training split), over another text, or over token shards, in consecutive windows.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::data::{self, Dataset};
use super::shards::{Format, Shard, Stream};
use super::{EvalSpan, RunConfig, TrainError};
use crate::gpu::Gpu;
use crate::model::{Model, Program};

const BAR: &str = "{spinner} {prefix} [{elapsed_precise}] {wide_bar} batch {pos}/{len} eta {eta}";

/// What `ddl eval` reads.
#[derive(Debug, Clone)]
pub enum EvalSource {
    /// The run's own data (its corpus's split, or its `--data` shards).
    Run,
    /// A UTF-8 text file, or a folder of `.txt` files, tokenised with the checkpoint's tokenizer.
    Text(PathBuf),
    /// Token shards: a folder's split, or the files a path or glob names.
    Data { data: String, format: String },
}

/// Which split of the run's data or of a shard folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    Val,
    Train,
}

/// One evaluation's settings (`None`: the run's).
#[derive(Debug, Clone)]
pub struct EvalRequest {
    pub source: EvalSource,
    pub split: Split,
    /// Window length (at most the model's `max_seq_len`).
    pub seq_len: Option<usize>,
    /// Windows per batch.
    pub batch_size: Option<usize>,
    /// Only the first this many batches of windows.
    pub batches: Option<usize>,
    /// Also count, per sublayer, the evaluated tokens in each β regime.
    pub betas: bool,
    /// Another checkpoint to evaluate on the same windows, and the paired difference.
    pub against: Option<PathBuf>,
    /// The LM head in slices of this many rows (0 = all at once; `None`: the run's
    /// `train.head_chunk`): the same losses in one slice's logits ([`Model::loss_program`]).
    pub head_chunk: Option<usize>,
    /// Interventions on the writes (`--intervene`, as `ddl generate` takes them but `k=mean`,
    /// which needs a prompt): the model under them on the same windows, and the paired difference
    /// from the model as trained.
    pub intervene: Option<crate::model::Interventions>,
    /// Every sublayer's write in turn without each of these parts (`--ablate`), on the same
    /// windows: the paired difference from the model as trained per sublayer and part,
    /// Holm-corrected over all of them (empty: none).
    pub ablate: Vec<Ablate>,
    /// With `ablate`: a forest plot of the differences (PNG).
    pub plot: Option<PathBuf>,
    /// Each evaluated token's loss into this file (`--per-token`, tab-separated): the model as
    /// evaluated, and beside it under the interventions, the other checkpoint or each ablation.
    pub per_token: Option<PathBuf>,
    /// A reliability diagram of the model's predictions (a .png file; [`EvalResult::calibration`]).
    pub calibration_plot: Option<PathBuf>,
    /// A logit lens ([`EvalResult::lens`]): the model's head on every state, on the same windows.
    pub lens: bool,
    /// With `lens`: its plot (a .png file).
    pub lens_plot: Option<PathBuf>,
}

/// What `--ablate` removes from each sublayer's write in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ablate {
    /// The whole write (`write=0`, β = 0: X' = X).
    Write,
    /// Its erased part (`erase=0`: X' = X + β k vᵀ).
    Erase,
    /// Its value (`v=0`: X' = (I − β k kᵀ) X; `"v"` in JSON, as `--ablate v`).
    #[serde(rename = "v")]
    Value,
}

impl Ablate {
    /// Every part, in the order of the tables.
    pub const ALL: [Ablate; 3] = [Ablate::Write, Ablate::Erase, Ablate::Value];

    /// The part a name says (`write`, `erase` or `v`, as `--ablate` and an experiment spec's
    /// `ablate` take them).
    pub fn parse(name: &str) -> Result<Ablate, String> {
        Ablate::ALL.into_iter().find(|a| a.name() == name.trim()).ok_or_else(|| {
            format!(
                "'{name}' is not a part of a write: expected \"write\" (the whole write, β = 0), \"erase\" (its \
                 erased part, erase=0) or \"v\" (its value, v=0)"
            )
        })
    }

    /// Its name on the command line (`--ablate write|erase|v`).
    pub fn name(self) -> &'static str {
        match self {
            Ablate::Write => "write",
            Ablate::Erase => "erase",
            Ablate::Value => "v",
        }
    }

    /// The `--intervene` action that does it.
    pub fn action(self) -> &'static str {
        match self {
            Ablate::Write => "write=0",
            Ablate::Erase => "erase=0",
            Ablate::Value => "v=0",
        }
    }

    /// For the plot's title.
    fn short(self) -> &'static str {
        match self {
            Ablate::Write => "without its write (write=0)",
            Ablate::Erase => "without its erased part (erase=0)",
            Ablate::Value => "without its value (v=0)",
        }
    }

    /// The action and what it leaves of the write, for a table's header.
    pub fn words(self) -> &'static str {
        match self {
            Ablate::Write => "write=0: β = 0, X' = X",
            Ablate::Erase => "erase=0: X' = X + β k vᵀ",
            Ablate::Value => "v=0: X' = (I − β k kᵀ) X",
        }
    }
}

/// What an evaluation measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EvalResult {
    /// The checkpoint's training step.
    pub step: usize,
    /// What was evaluated, in words (the run's corpus split, a file, shards).
    pub source: String,
    /// The split of the run's data or of a `--data` folder; `None` (JSON null) for a `--text`,
    /// which is evaluated whole.
    pub split: Option<Split>,
    /// Mean cross-entropy per predicted token, in nats (label smoothing off).
    pub loss: f64,
    pub perplexity: f64,
    /// Predicted tokens.
    pub tokens: usize,
    /// UTF-8 bytes of text those tokens stand for (None: the tokenizer's decoder is not
    /// byte-level, so tokens do not say their bytes).
    pub bytes: Option<u64>,
    /// loss · tokens / (bytes · ln 2): comparable across tokenizers.
    pub bits_per_byte: Option<f64>,
    pub seq_len: usize,
    pub windows: usize,
    /// Whether every window of the split or text was evaluated (not only the first --batches).
    pub whole: bool,
    /// Tokens after the last whole window (fewer than `seq_len`): predicted by no window, so not
    /// in the loss (0 unless `whole`).
    pub uncounted: usize,
    /// With `--betas`: per sublayer, what its delta write did on the evaluated tokens (empty for
    /// the baseline, which has none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub betas: Vec<SublayerBetas>,
    /// Windows per batch (the unit of the paired comparison).
    pub batch_size: usize,
    /// With `--against`: the other checkpoint on the same windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub against: Option<Against>,
    /// With `--intervene`: the model under the interventions on the same windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intervened: Option<Intervened>,
    /// With `--ablate`: the parts it removed, and per sublayer and part the model without it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ablate: Vec<Ablate>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ablations: Vec<Ablation>,
    /// With `--ablate … --plot`: the file the forest plot of the ablations was drawn to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ablate_plot: Option<String>,
    /// With `--per-token`: the file each token's loss was written to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_token: Option<String>,
    /// Share of the predicted tokens that were the model's likeliest (top-1 accuracy).
    pub accuracy: f64,
    /// Share of the predicted tokens among the model's five likeliest.
    pub top5_accuracy: f64,
    /// Mean entropy of the model's predictions, in nats (a calibrated model's equals its loss on
    /// average).
    pub entropy: f64,
    /// Expected calibration error of the likeliest token's probability: Σ over
    /// [`EvalResult::calibration`]'s bins of (tokens / all) · |accuracy − mean probability|.
    pub calibration_error: f64,
    /// The likeliest token's probability in ten bins of width 0.1: per bin its tokens, their
    /// mean probability and how often the likeliest token was the one that came.
    pub calibration: Vec<CalibrationBin>,
    /// With `--calibration-plot`: the file the reliability diagram was written to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration_plot: Option<String>,
    /// With `--lens`: the model's head on the state after the embedding and after each
    /// sublayer's write (the last: the model's own output), in model order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lens: Vec<LensRow>,
    /// With `--lens-plot`: the file the lens was drawn to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lens_plot: Option<String>,
    /// What the lens's states after the embedding follow, for its header ([`crate::generate::lens_step`]:
    /// a sublayer's write, or the baseline's residual addition).
    #[serde(skip)]
    pub lens_step: &'static str,
}

/// One state of the logit lens ([`EvalResult::lens`]): the model's own head (the readout
/// compressor of the expanded variants, the final norm, the tied embedding) on the state the
/// embedding or a sublayer's write leaves, on the evaluated windows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LensRow {
    /// `embedding` (X_0), or the sublayer whose write (or residual addition) left the state
    /// (`block0.attn`, …; the last one's state is the model's output).
    pub state: String,
    /// Mean cross-entropy per predicted token, in nats.
    pub loss: f64,
    /// This state's loss − the state before's, over all the tokens (None for the embedding).
    pub change: Option<f64>,
    /// The mean over full batches of that change, and its 95 % t-interval (df = batches − 1);
    /// None with fewer than two full batches.
    pub mean_paired_change: Option<f64>,
    pub ci: Option<(f64, f64)>,
    pub accuracy: f64,
    pub top5_accuracy: f64,
    /// Mean entropy of the head's predictions, in nats.
    pub entropy: f64,
    /// Whether this is the model's output (the last state, read by the model's head).
    pub output: bool,
}

/// One bin of [`EvalResult::calibration`]: the tokens whose likeliest prediction had a
/// probability in [from, to) (the last bin includes 1).
#[derive(Debug, Clone, serde::Serialize)]
pub struct CalibrationBin {
    pub from: f64,
    pub to: f64,
    pub tokens: u64,
    /// Mean probability of the likeliest token (None: an empty bin).
    pub confidence: Option<f64>,
    /// Share of the bin's tokens whose likeliest prediction came (None: an empty bin).
    pub accuracy: Option<f64>,
}

/// Bins of [`EvalResult::calibration`].
const CALIBRATION_BINS: usize = 10;

/// Every predicted token's scores ([`Program::row_ranks`]), tallied batch by batch: top-1 and
/// top-5 hits, the entropy's sum, the calibration bins; with `keep`, every row's scores in order.
#[derive(Debug, Clone, Default)]
struct ScoreTally {
    tokens: u64,
    top1: u64,
    top5: u64,
    entropy: f64,
    /// Per bin: tokens, Σ probability of the likeliest token, tokens whose likeliest came.
    bins: [(u64, f64, u64); CALIBRATION_BINS],
    keep: bool,
    rows: Vec<[f32; 4]>,
    /// Per batch added: (hits of the likeliest token, tokens), for a paired comparison.
    batches: Vec<(u64, u64)>,
}

impl ScoreTally {
    /// Adds rows of (rank, likeliest token, its log p, entropy); rows of rank 0 (ignored targets)
    /// count in nothing.
    fn add(&mut self, rows: &[f32]) {
        let (top1, tokens) = (self.top1, self.tokens);
        self.add_rows(rows);
        self.batches.push((self.top1 - top1, self.tokens - tokens));
    }

    fn add_rows(&mut self, rows: &[f32]) {
        for r in rows.chunks_exact(4) {
            if self.keep {
                self.rows.push([r[0], r[1], r[2], r[3]]);
            }
            let rank = r[0];
            if rank < 1.0 {
                continue;
            }
            self.tokens += 1;
            self.top1 += (rank == 1.0) as u64;
            self.top5 += (rank <= 5.0) as u64;
            self.entropy += r[3] as f64;
            let p = (r[2] as f64).exp().clamp(0.0, 1.0);
            let bin = &mut self.bins[((p * CALIBRATION_BINS as f64) as usize).min(CALIBRATION_BINS - 1)];
            bin.0 += 1;
            bin.1 += p;
            bin.2 += (rank == 1.0) as u64;
        }
    }

    fn share(&self, n: u64) -> f64 {
        if self.tokens == 0 { 0.0 } else { n as f64 / self.tokens as f64 }
    }

    fn calibration(&self) -> Vec<CalibrationBin> {
        let edge = |i: usize| i as f64 / CALIBRATION_BINS as f64;
        self.bins
            .iter()
            .enumerate()
            .map(|(i, &(n, conf, hit))| CalibrationBin {
                from: edge(i),
                to: edge(i + 1),
                tokens: n,
                confidence: (n > 0).then(|| conf / n as f64),
                accuracy: (n > 0).then(|| hit as f64 / n as f64),
            })
            .collect()
    }

    fn calibration_error(&self) -> f64 {
        if self.tokens == 0 {
            return 0.0;
        }
        self.bins.iter().map(|&(_, conf, hit)| (hit as f64 - conf).abs()).sum::<f64>() / self.tokens as f64
    }
}

/// A second evaluation on the same windows, and its paired difference from the first.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Versus {
    pub loss: f64,
    pub perplexity: f64,
    pub bits_per_byte: Option<f64>,
    /// The difference of the two losses over all the tokens (which one minus which: see the
    /// struct that holds it).
    pub difference: f64,
    /// Full batches compared (the paired units).
    pub pairs: usize,
    /// Mean over the full batches of the same difference, its 95 % t-interval (df = pairs − 1),
    /// t and the two-sided p of Student's paired t-test; None with fewer than two full batches.
    pub mean_paired_difference: Option<f64>,
    pub ci: Option<(f64, f64)>,
    pub t: Option<f64>,
    pub p: Option<f64>,
    /// Every batch's difference the same (not zero): no spread, so no t-test; `p` is the exact
    /// sign test's and `ci` no interval (stats::Paired::no_spread). Written only when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_spread: bool,
    /// With `--against`: the two models' top-1 accuracies on the same windows, paired by batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<AccuracyVersus>,
}

/// The 95 % t-interval of a paired difference of two accuracies (shares), cut at −1 and +1:
/// two accuracies differ by at most one share, which the t-interval of a few batches passes.
fn accuracy_ci(p: &crate::stats::Paired) -> (f64, f64) {
    (p.diff.ci.0.max(-1.0), p.diff.ci.1.min(1.0))
}

/// Two top-1 accuracies on the same windows (this − other, in shares of the tokens): the
/// difference over all the tokens and Student's paired t over the full batches (the units of
/// the loss's comparison); no interval with fewer than two full batches.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AccuracyVersus {
    pub this: f64,
    pub other: f64,
    pub difference: f64,
    pub mean_paired_difference: Option<f64>,
    /// The 95 % t-interval of the mean paired difference, cut at −1 and +1 (a difference of two
    /// shares lies between; the t-interval of a few batches may not).
    pub ci: Option<(f64, f64)>,
    pub t: Option<f64>,
    pub p: Option<f64>,
    /// As [`Versus::no_spread`]: common with few batches (the same count of tokens apart).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_spread: bool,
}

/// The other checkpoint of `--against` on the same windows, and this one's difference from it
/// (this − other).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Against {
    pub checkpoint: String,
    pub step: usize,
    #[serde(flatten)]
    pub vs: Versus,
}

/// The model under `--intervene` on the same windows, and its difference from the model as
/// trained (intervened − as trained: positive when the interventions raise the loss).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Intervened {
    /// The specs, `; `-separated.
    pub interventions: String,
    pub allow_out_of_range: bool,
    #[serde(flatten)]
    pub vs: Versus,
}

/// One row of `--ablate`: the model with one part of a sublayer's write ablated (ablated − as
/// trained), and its p after Holm's correction over every row (sublayer and part).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ablation {
    pub sublayer: String,
    pub part: Ablate,
    pub spec: String,
    #[serde(flatten)]
    pub vs: Versus,
    pub p_holm: Option<f64>,
}

/// β over a sublayer's tokens: the mean and the shares of the three regimes (identity β < 0.5,
/// projection 0.5 ≤ β ≤ 1.5, reflection β > 1.5).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SublayerBetas {
    /// `block0.attn`, `block0.mlp`, … (the names `--intervene` takes).
    pub sublayer: String,
    pub mean: f64,
    pub identity: f64,
    pub projection: f64,
    pub reflection: f64,
    pub tokens: u64,
}

/// Per sublayer, the tokens in each β regime and the sum of β, added batch by batch from a
/// program's saved writes.
#[derive(Debug, Clone, Default)]
pub struct BetaTally {
    /// [identity, projection, reflection] per sublayer.
    pub counts: Vec<[u64; 3]>,
    pub sums: Vec<f64>,
    /// With `keep` set: every added token's β per sublayer, in order (`--per-token --betas`).
    pub keep: bool,
    pub tokens: Vec<Vec<f32>>,
}

impl BetaTally {
    /// Adds the β of the first `rows` sequences of the batch `prog` ran last (rows past them are
    /// padding).
    pub fn add(&mut self, model: &Model, prog: &Program, rows: usize) -> Result<(), crate::gpu::GpuError> {
        let n = rows * prog.t();
        for (s, w) in prog.acts().writes().enumerate() {
            let b = w.beta.read_f32(&model.gpu)?;
            if self.counts.len() <= s {
                self.counts.push([0; 3]);
                self.sums.push(0.0);
                self.tokens.push(Vec::new());
            }
            if self.keep {
                self.tokens[s].extend_from_slice(&b[..n]);
            }
            for &beta in &b[..n] {
                let r = match crate::generate::regime(beta) {
                    "identity" => 0,
                    "projection" => 1,
                    _ => 2,
                };
                self.counts[s][r] += 1;
                self.sums[s] += beta as f64;
            }
        }
        Ok(())
    }

    /// The mean β per sublayer.
    pub fn means(&self) -> Vec<f64> {
        self.counts.iter().zip(&self.sums).map(|(c, s)| s / c.iter().sum::<u64>().max(1) as f64).collect()
    }

    /// Per sublayer: its name, mean and regime shares.
    pub fn sublayers(&self) -> Vec<SublayerBetas> {
        self.counts
            .iter()
            .zip(self.means())
            .enumerate()
            .map(|(i, (c, mean))| {
                let tokens = c.iter().sum::<u64>();
                let share = |k: usize| c[k] as f64 / tokens.max(1) as f64;
                SublayerBetas {
                    sublayer: crate::model::intervene::sublayer_name(i),
                    mean,
                    identity: share(0),
                    projection: share(1),
                    reflection: share(2),
                    tokens,
                }
            })
            .collect()
    }
}

/// Evaluates the checkpoint in `dir` (a run folder, or a kept checkpoint's folder) as `req` asks.
pub fn evaluate_checkpoint(gpu: &Arc<Gpu>, dir: &Path, req: &EvalRequest) -> Result<EvalResult, TrainError> {
    check_distinct_outputs(req)?;
    if let Some(path) = &req.plot {
        check_plot_path(path)?;
    }
    if let Some(path) = &req.per_token {
        check_per_token_path(path)?;
    }
    if let Some(path) = &req.calibration_plot {
        check_calibration_plot_path(path)?;
    }
    if let Some(path) = &req.lens_plot {
        super::plot::check_png_out("--lens-plot", path, |t| t.starts_with(LENS_PLOT_TITLE), "`ddl eval --lens-plot`")
            .map_err(TrainError::Settings)?;
    }
    let rows = req.per_token.is_some();
    let ck = super::checkpoint::load_to_device(dir, gpu.clone(), false)
        .map_err(|e| super::checkpoint::with_kept_for_reading(dir, "--checkpoint", e))?;
    let (model, tok, ck_step) = (ck.model, ck.tokenizer, ck.step);
    // (What the lens's states follow, for its headers, kept past the model's drop.)
    let lens_step = crate::generate::lens_step(model.cfg.variant);
    // The interventions against the model, before any window is evaluated.
    let intervened_maps = match &req.intervene {
        None => None,
        Some(iv) => {
            if let Some(i) = iv.list.iter().find(|i| i.action == crate::model::intervene::Action::KMean) {
                return Err(TrainError::Settings(format!(
                    "--intervene '{}': k=mean fixes a write's direction to the mean k of a generation's prompt, \
                     which an evaluation over windows does not have; measure it with `ddl generate --intervene {} \
                     --compare`, or give β or term specs here (beta=V, beta*=S, write=0, erase=0, v=0, …)",
                    i.spec, i.spec
                )));
            }
            Some(iv.maps(&model.cfg).map_err(|e| TrainError::Settings(e.to_string()))?)
        }
    };
    if let Some(kind) = req.ablate.first()
        && !model.cfg.variant.is_ddl()
    {
        return Err(TrainError::Settings(format!(
            "--ablate {}: '{}' is a {} model: its sublayers add their outputs (residual additions), there are no \
             delta writes to ablate; give a checkpoint of a delta-write variant (ddl, ddl_v1, ddl_ec, …)",
            kind.name(),
            dir.display(),
            model.cfg.variant.name()
        )));
    }
    // --against's tokenizer first (its metadata only): a mismatch is refused before evaluating.
    if let Some(other) = &req.against {
        let theirs = super::checkpoint::saved_tokenizer(other)
            .map_err(|e| TrainError::Settings(format!("--against '{}': {e}", other.display())))?;
        if theirs != tok {
            return Err(TrainError::Settings(format!(
                "--against '{}': its tokenizer is not the one of '{}' ({}), so their losses per token do not \
                 compare window by window; evaluate each alone and compare bits per byte",
                other.display(),
                dir.display(),
                theirs.difference(&tok).replace("the first", "--against's").replace("the second", "the run's"),
            )));
        }
    }
    // The run's settings; a folder with only a model file (a demo checkpoint) evaluates a text or
    // shards in windows of the model's context, 8 to a batch.
    let cfg_path = dir.join("config.toml");
    let max = model.cfg.max_seq_len;
    if !cfg_path.exists() && matches!(req.source, EvalSource::Run) {
        return Err(TrainError::Settings(format!(
            "'{}' has a model but no config.toml, so it does not say what data it was trained on: pass --text FILE \
             or --data DIR to evaluate it, or --checkpoint the run's folder",
            dir.display()
        )));
    }
    let run: Option<RunConfig> = if cfg_path.exists() {
        let read = RunConfig::read_file(dir).ok_or_else(|| {
            let source = std::fs::read_to_string(&cfg_path).err().map_or_else(String::new, |e| e.to_string());
            TrainError::Settings(format!("cannot read '{}': {source}", cfg_path.display()))
        })?;
        match read {
            Ok(r) => Some(r),
            // An edited file that no longer reads: the settings saved with the checkpoint are the
            // run's (what `--resume` continues with and writes back).
            Err(e) => {
                let saved = super::checkpoint::saved_run_config(dir)
                    .ok()
                    .filter(|t| !t.is_empty())
                    .and_then(|t| toml::from_str::<RunConfig>(&t).ok());
                match saved {
                    Some(r) => {
                        eprintln!(
                            "note: {} does not read as a run's settings ({}); evaluating with the settings saved with \
                             the checkpoint (`ddl train --resume {}` writes them to config.toml again)",
                            cfg_path.display(),
                            e.message().trim(),
                            dir.display()
                        );
                        Some(r)
                    }
                    None => {
                        return Err(TrainError::Settings(format!(
                            "{}: not a run's settings: {e}; restore the file (the run wrote it at its start; its \
                             kept checkpoints hold copies)",
                            cfg_path.display()
                        )));
                    }
                }
            }
        }
    } else {
        None
    };
    let mut t = match &run {
        Some(r) => r.train.clone(),
        None => super::TrainConfig { batch_size: 8, seq_len: max, ..super::TrainConfig::preset("") },
    };
    let seq_len = req.seq_len.unwrap_or(t.seq_len);
    if seq_len == 0 || seq_len > max {
        let from = match req.seq_len {
            Some(_) => format!("--seq-len {seq_len}"),
            None => format!("seq_len = {seq_len} in {}", cfg_path.display()),
        };
        return Err(TrainError::Settings(format!(
            "{from}: the model's context (max_seq_len) is {max} tokens; pass --seq-len 1 to {max}"
        )));
    }
    t.seq_len = seq_len;
    t.batch_size = req.batch_size.unwrap_or(t.batch_size);
    t.head_chunk = req.head_chunk.unwrap_or(t.head_chunk);
    let vocab = tok.vocab_size();
    let (tokens, source, key) = match &req.source {
        EvalSource::Run => {
            let run = run.as_ref().expect("read above for the run's own data");
            let what = if run.data.is_empty() {
                format!("the run's corpus '{}'", run.corpus)
            } else {
                format!("the run's shards '{}'", run.data)
            };
            let other = "evaluate another text with --text FILE (or shards with --data DIR)";
            let (ds, _) = data::open_for_run(run, Some(&tok)).map_err(|e| {
                let e = match e {
                    // (Ctrl-C: said as such, exit 130.)
                    e @ TrainError::Data(data::DataError::CacheInterrupted(_)) => return e,
                    // (Its remedy names `ddl train --corpus`.)
                    TrainError::Data(data::DataError::Missing(_)) => "it does not exist".to_string(),
                    e => e.to_string(),
                };
                TrainError::Settings(format!(
                    "{what} (from {}): {e}; restore the data the run trained on, or {other}",
                    cfg_path.display()
                ))
            })?;
            let now = data::data_record(&ds, run);
            data::check_data_record(dir, &now, "evaluate its splits", &format!("Restore it, or {other}"))?;
            // (data.json names the shards by a fingerprint of their ends; what is read is checked
            // against meta.json's SHA-256s, as `ddl train --data` and `eval --data` check it.)
            match req.split {
                Split::Val => {
                    data::verify_run_split(run, true, None)?;
                    (ds.val, format!("the validation split of {what}"), ds.key)
                }
                Split::Train => {
                    // As many tokens as the evaluation of the validation split covers (its windows,
                    // up to the run's train.val_max_tokens), unless --batches says otherwise: the
                    // two losses then compare (the whole training split may be billions).
                    let val_windows = super::eval_windows(&ds, &t, EvalSpan::Full, 1, seq_len);
                    t.val_max_tokens = (val_windows * seq_len).max(seq_len);
                    let read = t.val_max_tokens.max(req.batches.unwrap_or(0) * t.batch_size * seq_len) + 1;
                    data::verify_run_split(run, false, Some(read))?;
                    (ds.train, format!("the training split of {what}"), ds.key)
                }
            }
        }
        EvalSource::Text(path) => {
            if req.split == Split::Train {
                return Err(TrainError::Settings(
                    "--split train names a split of the run's data or of a --data folder; --text is evaluated whole"
                        .into(),
                ));
            }
            // The whole text is evaluated, not a run's validation budget of it.
            t.val_max_tokens = 0;
            let (files, made) = data::text_shards(path, &tok).map_err(|e| match e {
                // (The corpus errors' remedies name `ddl train --corpus`.)
                TrainError::Data(data::DataError::Missing(p)) => TrainError::Settings(format!(
                    "--text '{}' does not exist: pass a UTF-8 text file or a folder of .txt files",
                    p.display()
                )),
                TrainError::Data(data::DataError::Empty(p)) => {
                    TrainError::Settings(format!("--text '{}' is empty: give a text to evaluate", p.display()))
                }
                TrainError::Data(data::DataError::NoTxt(p)) => {
                    // (Its own .txt files only: a folder whose texts are in subfolders is said so.)
                    let subs =
                        std::fs::read_dir(&p).map(|d| d.flatten().filter(|e| e.path().is_dir()).count()).unwrap_or(0);
                    let note = if subs > 0 {
                        format!(" (its {subs} subfolder(s) are not read: give one of them, or the files)")
                    } else {
                        String::new()
                    };
                    TrainError::Settings(format!(
                        "--text '{}' is a folder without .txt files{note}: give a text file, or a folder of .txt files",
                        p.display()
                    ))
                }
                TrainError::Data(data::DataError::UnknownChar { path: p, offset, ch, vocab }) => {
                    let place = if p == *path { String::new() } else { format!(" of '{}'", p.display()) };
                    TrainError::Settings(format!(
                        "--text '{}': character {ch:?} at byte {offset}{place} is not among the {vocab} characters of \
                         the checkpoint's char tokenizer: a character model knows only its corpus's characters (take \
                         them out of the text, or evaluate a model with a byte-level tokenizer)",
                        path.display(),
                    ))
                }
                TrainError::Data(data::DataError::Tokenize(e)) => TrainError::Settings(format!(
                    "--text '{}': {e}; the checkpoint's {} tokenizer cannot encode it",
                    path.display(),
                    tok.kind()
                )),
                e => e,
            })?;
            let shards = files.iter().map(|p| Shard::open(p, Format::Llmc)).collect::<Result<Vec<_>, _>>();
            let stream = Stream::new(shards.map_err(data::DataError::from)?);
            if made && stream.len() <= seq_len {
                // Refused below: a text too short to evaluate leaves nothing in the cache.
                data::remove_text_set(&files);
            }
            (stream, format!("'{}'", path.display()), tok.fingerprint())
        }
        EvalSource::Data { data: d, format } => {
            t.val_max_tokens = 0;
            if req.split == Split::Train && !Path::new(d).is_dir() {
                // (A file or a glob is evaluated as given: the split of a folder's shards does not
                // apply, and a validation shard was labelled training text.)
                return Err(TrainError::Settings(format!(
                    "--split train chooses the training shards of a --data folder; --data '{d}' is a file or a glob, \
                     evaluated as given: drop --split, or give the folder"
                )));
            }
            let format = Format::parse(format).map_err(TrainError::Settings)?;
            let files =
                super::shards::find_for_eval(d, format, req.split == Split::Val).map_err(data::DataError::from)?;
            if req.split == Split::Train {
                // As for the run's data: as many tokens as the folder's validation shards hold.
                let val = super::shards::find_for_eval(d, format, true).unwrap_or_default();
                let lens = val.iter().map(|p| Shard::open(p, format).map(|s| s.len())).collect::<Result<Vec<_>, _>>();
                let n: usize = lens.map(|l| l.iter().sum()).unwrap_or(0);
                t.val_max_tokens = if n > seq_len { (n - 1) / seq_len * seq_len } else { 0 };
            }
            // Shards that say which tokenizer made them must have been made with the checkpoint's.
            let folder = files[0].parent().map(Path::to_path_buf).unwrap_or_default();
            let meta = data::read_data_meta(&folder)?;
            if let Some(m) = &meta {
                if format == Format::Llmc {
                    data::check_meta_counts(m, &folder)?;
                }
                // (Evaluation reads every token of these files anyway.)
                data::verify_shards(m, &folder, &files, Path::new(d).is_dir())?;
            }
            if let Some(m) = meta
                && m.tokenizer != tok.to_json()
            {
                let how = crate::tokenizer::Tokenizer::from_json(&m.tokenizer)
                    .map(|theirs| theirs.difference(&tok))
                    .unwrap_or_else(|e| format!("theirs unreadable: {e}"));
                return Err(TrainError::Settings(format!(
                    "{}: the shards were made with another tokenizer (vocabulary {}) than the checkpoint's (vocabulary \
                     {vocab}; {how}); prepare the text again with the checkpoint's tokenizer (`ddl data prepare \
                     --tokenizer {}`: a run folder gives its model's)",
                    folder.join("meta.json").display(),
                    m.vocab_size,
                    dir.display()
                )));
            }
            let shards = files.iter().map(|p| Shard::open(p, format)).collect::<Result<Vec<_>, _>>();
            let stream = Stream::new(shards.map_err(data::DataError::from)?);
            stream.check_vocab(vocab).map_err(data::DataError::from)?;
            let key = data::fingerprint(&files)?;
            let what = if files.len() == 1 {
                format!("'{}'", files[0].display())
            } else {
                format!("{} shards of '{d}'", files.len())
            };
            (stream, what, key)
        }
    };
    if tokens.len() <= seq_len {
        // (A window is at least two tokens: with one token there is nothing to predict at any
        // --seq-len.)
        let remedy = if tokens.len() >= 2 {
            format!("evaluate a longer text or pass --seq-len {} or less", tokens.len() - 1)
        } else {
            "evaluate a longer text (a window needs two tokens: one read, one predicted)".to_string()
        };
        return Err(TrainError::Settings(format!(
            "{source} has {} token{}, fewer than one window of {} (--seq-len + 1): {remedy}",
            tokens.len(),
            if tokens.len() == 1 { "" } else { "s" },
            seq_len + 1
        )));
    }
    let ds = Dataset::for_evaluation(tokens, seq_len, vocab, key)?;
    let span = match req.batches {
        Some(b) => {
            // --batches says how much: not capped by the run's train.val_max_tokens.
            t.eval_batches = b;
            t.val_max_tokens = 0;
            EvalSpan::Periodic
        }
        None => EvalSpan::Full,
    };
    // A batch larger than the windows there are would only allocate rows that predict nothing.
    t.batch_size = t.batch_size.min(super::eval_windows(&ds, &t, EvalSpan::Full, 1, seq_len).max(1));
    let windows = super::eval_windows(&ds, &t, span, t.batch_size, seq_len);
    let whole = windows == ds.val_windows(seq_len);
    let uncounted = if whole { ds.val.len() - 1 - windows * seq_len } else { 0 };
    if req.betas && !model.cfg.variant.is_ddl() {
        eprintln!("--betas: a {} model has no delta writes, so no β to count", model.cfg.variant.name());
    }
    let label = if req.against.is_some() {
        format!("{} ", dir.display())
    } else if req.intervene.is_some() || !req.ablate.is_empty() {
        "as trained ".to_string()
    } else {
        String::new()
    };
    let own = Measure { betas: req.betas, rows, scores: true, lens: req.lens };
    let ModelRun { eval: e, losses, betas: mut tally, rows: own_rows, scores, lens: mut lens_tally } =
        run_model(&model, &ds, &t, span, windows, own, &label, None)?;
    let mut scores = scores.expect("the model's own run scores its tokens");
    let token_scores = std::mem::take(&mut scores.rows);
    // With --per-token: each run's token losses beside the model's own (column name, losses);
    // with --lens first each earlier state's.
    let mut columns: Vec<(String, Vec<f32>)> = lens_tally
        .iter_mut()
        .enumerate()
        .filter(|_| rows)
        .map(|(s, l)| (format!("lens_{}", lens_state_name(s)), std::mem::take(&mut l.rows)))
        .collect();
    // (With --betas: each token's β per sublayer, after its loss.)
    let beta_columns: Vec<(String, Vec<f32>)> = std::mem::take(&mut tally.tokens)
        .into_iter()
        .enumerate()
        .map(|(s, b)| (crate::model::intervene::sublayer_name(s), b))
        .collect();
    // Window w predicts tokens w·T + 1 ..= w·T + T: together 1 ..= windows·T.
    let bytes = tok.token_bytes().map(|table| {
        let n = windows * seq_len;
        let mut sum = 0u64;
        const PIECE: usize = 1 << 20;
        for a in (1..=n).step_by(PIECE) {
            let b = (a + PIECE).min(n + 1);
            sum += (a..b).map(|i| table.get(ds.val.get(i) as usize).copied().unwrap_or(0) as u64).sum::<u64>();
            ds.val.release(a, b - a);
        }
        sum
    });
    let bpb = |loss: f64, tokens: usize| {
        bytes.filter(|&b| b > 0).map(|b| loss * tokens as f64 / (b as f64 * std::f64::consts::LN_2))
    };
    // Another evaluation of the same windows against this one, paired by batch: the units are
    // the full batches (a last, partial batch weighs otherwise in the token mean). The
    // differences are this − other, or other − this when `other_first`.
    let full = t.batch_size * seq_len;
    let versus = |other: &ModelRun, other_first: bool| -> Versus {
        let (eo, lo) = (&other.eval, &other.losses);
        let pairs: Vec<(f64, f64)> = losses
            .iter()
            .zip(lo)
            .filter(|((_, n), _)| *n == full)
            .map(|(&(a, _), &(b, _))| if other_first { (b, a) } else { (a, b) })
            .collect();
        let test = crate::stats::Paired::of(&pairs);
        Versus {
            loss: eo.loss,
            perplexity: eo.loss.exp(),
            bits_per_byte: bpb(eo.loss, eo.tokens),
            difference: if other_first { eo.loss - e.loss } else { e.loss - eo.loss },
            pairs: pairs.len(),
            mean_paired_difference: test.map(|p| p.diff.mean),
            ci: test.map(|p| p.diff.ci),
            t: test.map(|p| p.t),
            p: test.map(|p| p.p),
            no_spread: test.is_some_and(|p| p.no_spread),
            accuracy: other.scores.as_ref().map(|theirs| {
                // (this − other, whichever ran first.)
                let (a, b) = if other_first { (theirs, &scores) } else { (&scores, theirs) };
                let pairs: Vec<(f64, f64)> = a
                    .batches
                    .iter()
                    .zip(&b.batches)
                    .zip(&losses)
                    .filter(|(_, (_, n))| *n == full)
                    .map(|((&(ha, na), &(hb, nb)), _)| (ha as f64 / na.max(1) as f64, hb as f64 / nb.max(1) as f64))
                    .collect();
                let test = crate::stats::Paired::of(&pairs);
                let (this, that) = (a.share(a.top1), b.share(b.top1));
                AccuracyVersus {
                    this,
                    other: that,
                    difference: this - that,
                    mean_paired_difference: test.map(|p| p.diff.mean),
                    ci: test.as_ref().map(accuracy_ci),
                    t: test.map(|p| p.t),
                    p: test.map(|p| p.p),
                    no_spread: test.is_some_and(|p| p.no_spread),
                }
            }),
        }
    };
    let intervened = match (&req.intervene, &intervened_maps) {
        (Some(iv), Some(maps)) => {
            let label = format!("{} ", iv.describe());
            let what = Measure { rows, ..Default::default() };
            let mut run = run_model(&model, &ds, &t, span, windows, what, &label, Some(maps))?;
            columns.push(("intervened".into(), std::mem::take(&mut run.rows)));
            Some(Intervened {
                interventions: iv.describe(),
                allow_out_of_range: iv.allow_out_of_range,
                vs: versus(&run, true),
            })
        }
        _ => None,
    };
    let mut ablations = Vec::new();
    if !req.ablate.is_empty() {
        // Sublayer by sublayer, its parts together (the order of the table and the plot).
        let subs = 2 * model.cfg.n_layers;
        let all = subs * req.ablate.len();
        for s in 0..subs {
            let sublayer = crate::model::intervene::sublayer_name(s);
            for &part in &req.ablate {
                let spec = format!("{sublayer}:{}", part.action());
                let maps = crate::model::Interventions::parse(std::slice::from_ref(&spec), false)
                    .and_then(|iv| iv.maps(&model.cfg))
                    .map_err(|e| TrainError::Settings(e.to_string()))?;
                let label = format!("{spec} ({}/{all}) ", ablations.len() + 1);
                let what = Measure { rows, ..Default::default() };
                let mut run = run_model(&model, &ds, &t, span, windows, what, &label, Some(&maps))?;
                columns.push((spec.clone(), std::mem::take(&mut run.rows)));
                ablations.push(Ablation {
                    sublayer: sublayer.clone(),
                    part,
                    spec,
                    vs: versus(&run, true),
                    p_holm: None,
                });
            }
        }
        // Holm over every row (a family fixed by the model and the parts asked for).
        let ps: Vec<f64> = ablations.iter().filter_map(|a| a.vs.p).collect();
        if ps.len() == ablations.len() {
            for (a, h) in ablations.iter_mut().zip(crate::stats::holm(&ps)) {
                a.p_holm = Some(h);
            }
        }
        if let Some(path) = &req.plot {
            plot_ablations(path, &req.ablate, &ablations, t.batch_size)?;
        }
    }
    drop(model);
    let against = match &req.against {
        None => None,
        Some(other) => {
            let ck = super::checkpoint::load_to_device(other, gpu.clone(), false)
                .map_err(|e| super::checkpoint::with_kept_for_reading(other, "--against", e))
                .map_err(|e| TrainError::Settings(format!("--against '{}': {e}", other.display())))?;
            if ck.model.cfg.max_seq_len < seq_len {
                return Err(TrainError::Settings(format!(
                    "--against '{}': its context (max_seq_len) is {} tokens, shorter than the windows of {seq_len}; \
                     pass --seq-len {} or less",
                    other.display(),
                    ck.model.cfg.max_seq_len,
                    ck.model.cfg.max_seq_len
                )));
            }
            let label = format!("{} ", other.display());
            let what = Measure { rows, scores: true, ..Default::default() };
            let mut run = run_model(&ck.model, &ds, &t, span, windows, what, &label, None)?;
            columns.push(("against".into(), std::mem::take(&mut run.rows)));
            // Paired by batch: the same windows through both models.
            Some(Against { checkpoint: other.display().to_string(), step: ck.step, vs: versus(&run, false) })
        }
    };
    let per_token = match &req.per_token {
        Some(path) => {
            // Window w's row j predicts token w·T + j + 1 of the evaluated tokens.
            let ids: Vec<u32> = (1..=own_rows.len()).map(|i| ds.val.get(i)).collect();
            write_per_token(path, &tok, &ids, &own_rows, &token_scores, &beta_columns, &columns)?;
            Some(path.display().to_string())
        }
        None => None,
    };
    let calibration = scores.calibration();
    let calibration_error = scores.calibration_error();
    let lens = if req.lens { lens_rows(&lens_tally, (e.loss, &scores, &losses), full) } else { Vec::new() };
    if let Some(path) = &req.lens_plot {
        let title = format!(
            "{LENS_PLOT_TITLE} '{}' (step {ck_step}) on {}",
            dir.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
            short_source(&source),
        );
        plot_lens(path, &title, lens_step, &lens)?;
    }
    if let Some(path) = &req.calibration_plot {
        let title = format!(
            "{CALIBRATION_PLOT_TITLE} '{}' (step {ck_step}) on {}: error {calibration_error:.4}",
            dir.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
            short_source(&source),
        );
        let x = format!("p of the likeliest token ({} tokens in 10 bins)", scores.tokens);
        super::plot::reliability_plot(path, &title, &x, &calibration)
            .map_err(|e| TrainError::Settings(format!("--calibration-plot '{}': {e}", path.display())))?;
    }
    Ok(EvalResult {
        step: ck_step,
        source,
        split: if matches!(req.source, EvalSource::Text(_)) { None } else { Some(req.split) },
        loss: e.loss,
        perplexity: e.loss.exp(),
        tokens: e.tokens,
        bytes,
        bits_per_byte: bpb(e.loss, e.tokens),
        seq_len,
        windows,
        whole,
        uncounted,
        betas: tally.sublayers(),
        batch_size: t.batch_size,
        against,
        intervened,
        ablate: req.ablate.clone(),
        ablations,
        ablate_plot: req.plot.as_ref().filter(|_| !req.ablate.is_empty()).map(|p| p.display().to_string()),
        per_token,
        accuracy: scores.share(scores.top1),
        top5_accuracy: scores.share(scores.top5),
        entropy: if scores.tokens > 0 { scores.entropy / scores.tokens as f64 } else { 0.0 },
        calibration_error,
        calibration,
        calibration_plot: req.calibration_plot.as_ref().map(|p| p.display().to_string()),
        lens,
        lens_plot: req.lens_plot.as_ref().map(|p| p.display().to_string()),
        lens_step,
    })
}

/// The lens's name of state X_s: `embedding` (X_0), else the sublayer whose write left it.
fn lens_state_name(s: usize) -> String {
    if s == 0 { "embedding".into() } else { crate::model::intervene::sublayer_name(s - 1) }
}

/// The lens's rows: each earlier state's tally, then the model's own output (`own`: its loss,
/// scores and per-batch losses), each with its change from the state before, paired over the
/// full batches (`full` tokens).
fn lens_rows(states: &[LensTally], own: (f64, &ScoreTally, &[(f64, usize)]), full: usize) -> Vec<LensRow> {
    let mut out: Vec<LensRow> = Vec::with_capacity(states.len() + 1);
    let (own_loss, own_scores, own_batches) = own;
    let all = states
        .iter()
        .map(|s| (s.loss / s.scores.tokens.max(1) as f64, &s.scores, s.batches.as_slice()))
        .chain(std::iter::once((own_loss, own_scores, own_batches)));
    let mut before: Option<&[(f64, usize)]> = None;
    for (i, (loss, sc, batches)) in all.enumerate() {
        let test = before.and_then(|b| {
            let pairs: Vec<(f64, f64)> =
                batches.iter().zip(b).filter(|((_, n), _)| *n == full).map(|(&(x, _), &(y, _))| (x, y)).collect();
            crate::stats::Paired::of(&pairs)
        });
        out.push(LensRow {
            state: lens_state_name(i),
            loss,
            change: out.last().map(|prev| loss - prev.loss),
            mean_paired_change: test.map(|p| p.diff.mean),
            // (No spread: no interval, the change alone.)
            ci: test.filter(|p| !p.no_spread).map(|p| p.diff.ci),
            accuracy: sc.share(sc.top1),
            top5_accuracy: sc.share(sc.top5),
            entropy: if sc.tokens > 0 { sc.entropy / sc.tokens as f64 } else { 0.0 },
            output: i == states.len(),
        });
        before = Some(batches);
    }
    out
}

/// What was evaluated, for a plot's title: a text, shards or the run's data by their file name
/// (a title stays short), and the split of the run's data.
fn short_source(source: &str) -> String {
    // A quoted path anywhere (a text, or "the validation split of the run's corpus '…'"): its
    // file name, and the split where one is named (a long path made the plots' titles wider
    // than the picture).
    let (Some(a), Some(b)) = (source.find('\''), source.rfind('\'')) else { return source.to_string() };
    if b <= a {
        return source.to_string();
    }
    let inner = &source[a + 1..b];
    let name = Path::new(inner).file_name().map_or_else(|| inner.to_string(), |n| n.to_string_lossy().into_owned());
    let split = ["validation", "training"]
        .into_iter()
        .find(|s| source.starts_with(&format!("the {s} split")))
        .map(|s| format!(" ({s} split)"))
        .unwrap_or_default();
    format!("{name}{split}")
}

/// Refuses two of the outputs (`--plot`, `--per-token`, `--calibration-plot`, `--lens-plot`)
/// given the same file: the later written would replace the earlier, and the message would
/// name a file that holds something else.
fn check_distinct_outputs(req: &EvalRequest) -> Result<(), TrainError> {
    let outputs: Vec<(&str, &Path)> = [
        ("--plot", &req.plot),
        ("--per-token", &req.per_token),
        ("--calibration-plot", &req.calibration_plot),
        ("--lens-plot", &req.lens_plot),
    ]
    .into_iter()
    .filter_map(|(flag, p)| p.as_deref().map(|p| (flag, p)))
    .collect();
    // The same file: by its real path where both exist, else by the absolute path as written.
    let key = |p: &Path| p.canonicalize().or_else(|_| std::path::absolute(p)).unwrap_or_else(|_| p.to_path_buf());
    for (i, (a, pa)) in outputs.iter().enumerate() {
        for (b, pb) in &outputs[i + 1..] {
            if key(pa) == key(pb) {
                return Err(TrainError::Settings(format!(
                    "{a} {} and {b} {} name the same file: each output needs a file of its own (the one \
                     written later would replace the other); give one of them another name",
                    pa.display(),
                    pb.display()
                )));
            }
        }
    }
    Ok(())
}

/// `--per-token`'s file, checked before any evaluation (the table is written whole at the end, or
/// not at all): not a folder, in a folder that exists and takes files, not inside a run's kept
/// checkpoints (the run prunes them), and absent or an earlier `--per-token` table (which it
/// replaces) — never a text, a checkpoint or a run's own file.
fn check_per_token_path(path: &Path) -> Result<(), TrainError> {
    let bad = |why: String| TrainError::Settings(format!("--per-token '{}': {why}", path.display()));
    if path.is_dir() {
        return Err(bad("is a folder: give a file name (e.g. tokens.tsv)".into()));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(bad(format!(
            "the folder '{}' does not exist: make it first, or write the file elsewhere",
            parent.display()
        )));
    }
    if let Some(e) = super::checkpoint::kept_refusal("--per-token", path) {
        return Err(TrainError::Settings(e));
    }
    if path.exists() && !is_per_token_table(path) {
        return Err(bad(
            "exists and is not a table `ddl eval --per-token` wrote, and writing would replace it; choose another \
             file name"
                .into(),
        ));
    }
    super::checkpoint::probe_writable(path)
        .map_err(|e| bad(format!("cannot write there: {e}; choose a folder that takes files")))
}

/// Whether `path` begins with the header [`write_per_token`] writes.
fn is_per_token_table(path: &Path) -> bool {
    use std::io::Read;
    const HEAD: &[u8] = b"index\ttoken\ttext\tloss";
    let mut head = [0u8; HEAD.len() + 1];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok()
        && head.starts_with(HEAD)
        && matches!(head[HEAD.len()], b'\t' | b'\n')
}

/// A token's text in one tab-separated field: `\\`, `\t`, `\n` and `\r` escaped.
pub fn tsv_field(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// Writes `--per-token`'s table: a header, then per evaluated token its index among the
/// evaluated tokens (`index`: row i is token i + 1, the first being only read), id (`token`), text (`text`, escaped: [`tsv_field`]; a byte-level
/// token that is part of a character shows U+FFFD), the model's loss in nats (`loss`), its rank
/// among the model's predictions (`rank`: 1 = the likeliest), the likeliest token (`top`,
/// `top_text`) and its log p (`top_logprob`), the entropy of the prediction (`entropy`, nats:
/// `scores`), its β per sublayer (`betas`: `beta_NAME`), and each other run's loss (`columns`:
/// `loss_NAME`, the interventions, the other checkpoint, each ablation).
fn write_per_token(
    path: &Path,
    tok: &crate::tokenizer::Tokenizer,
    ids: &[u32],
    loss: &[f32],
    scores: &[[f32; 4]],
    betas: &[(String, Vec<f32>)],
    columns: &[(String, Vec<f32>)],
) -> Result<(), TrainError> {
    use std::fmt::Write as _;
    let texts: Vec<String> =
        (0..tok.vocab_size() as u32).map(|id| tsv_field(&tok.decode(&[id]).unwrap_or_default())).collect();
    let mut out = String::from("index\ttoken\ttext\tloss\trank\ttop\ttop_text\ttop_logprob\tentropy");
    for (name, _) in betas {
        out.push_str("\tbeta_");
        out.push_str(name);
    }
    for (name, _) in columns {
        out.push_str("\tloss_");
        out.push_str(name);
    }
    out.push('\n');
    for (i, &id) in ids.iter().enumerate() {
        let text = texts.get(id as usize).map(String::as_str).unwrap_or("");
        let _ = write!(out, "{}\t{id}\t{text}\t{:.6}", i + 1, loss[i]);
        let [rank, top, top_logprob, entropy] = scores[i];
        let top = top as u32;
        let top_text = texts.get(top as usize).map(String::as_str).unwrap_or("");
        let _ = write!(out, "\t{}\t{top}\t{top_text}\t{top_logprob:.6}\t{entropy:.6}", rank as u32);
        for (_, b) in betas {
            let _ = write!(out, "\t{:.6}", b[i]);
        }
        for (_, c) in columns {
            let _ = write!(out, "\t{:.6}", c[i]);
        }
        out.push('\n');
    }
    super::checkpoint::write_atomic(path, out.as_bytes())
        .map_err(|e| TrainError::Settings(format!("--per-token '{}': cannot write it: {e}", path.display())))
}

/// How `--plot`'s titles begin: an existing file is replaced only when it is such a plot.
const ABLATION_PLOT_TITLE: &str = "loss change per sublayer";

/// How `--calibration-plot`'s titles begin: an existing file is replaced only when it is such a plot.
const CALIBRATION_PLOT_TITLE: &str = "calibration of";

/// The start of `--lens-plot`'s title (what marks a plot it may replace).
const LENS_PLOT_TITLE: &str = "logit lens of";

/// `--lens-plot`: loss and top-1 accuracy per state.
fn plot_lens(path: &Path, title: &str, step: &str, rows: &[LensRow]) -> Result<(), TrainError> {
    let labels: Vec<String> = rows.iter().map(|r| r.state.clone()).collect();
    let loss = super::plot::StatePanel {
        y_label: "loss (nats per token)".into(),
        values: rows.iter().map(|r| r.loss).collect(),
    };
    let acc = super::plot::StatePanel {
        y_label: "top-1 accuracy (%)".into(),
        values: rows.iter().map(|r| 100.0 * r.accuracy).collect(),
    };
    let x = format!("the state the head reads: after the embedding, after {step} (last: the model's output)");
    super::plot::state_plot(path, title, &x, &labels, &[loss, acc])
        .map_err(|e| TrainError::Settings(format!("--lens-plot '{}': {e}", path.display())))
}

/// `--calibration-plot`'s file, checked as `--plot`'s before any evaluation.
fn check_calibration_plot_path(path: &Path) -> Result<(), TrainError> {
    super::plot::check_png_out(
        "--calibration-plot",
        path,
        |t| t.starts_with(CALIBRATION_PLOT_TITLE),
        "`ddl eval --calibration-plot`",
    )
    .map_err(TrainError::Settings)
}

/// `--plot`'s file: a `.png` in a folder that exists, not a folder itself, absent or an earlier
/// `--plot` (checked before any evaluation; the plot is written whole or not at all).
fn check_plot_path(path: &Path) -> Result<(), TrainError> {
    super::plot::check_png_out("--plot", path, |t| t.starts_with(ABLATION_PLOT_TITLE), "`ddl eval --plot`")
        .map_err(TrainError::Settings)
}

/// The forest plot of `--ablate`: per sublayer, ablated − as trained with its 95 % t-interval,
/// filled where Holm's p is below 0.05.
fn plot_ablations(path: &Path, parts: &[Ablate], rows: &[Ablation], batch: usize) -> Result<(), TrainError> {
    let pairs = rows.first().map_or(0, |a| a.vs.pairs);
    let rows: Vec<super::plot::Interval> = rows
        .iter()
        .map(|a| {
            // (No spread: a point, no interval.)
            let (lo, hi) = a.vs.ci.filter(|_| !a.vs.no_spread).unwrap_or((f64::NAN, f64::NAN));
            super::plot::Interval {
                label: if parts.len() > 1 { a.spec.clone() } else { a.sublayer.clone() },
                mean: a.vs.mean_paired_difference.unwrap_or(a.vs.difference),
                lo,
                hi,
                significant: a.p_holm.is_some_and(|p| p < 0.05),
            }
        })
        .collect();
    let title = match parts {
        [one] => format!("{ABLATION_PLOT_TITLE} {}", one.short()),
        _ => format!("{ABLATION_PLOT_TITLE} and part of its write removed"),
    };
    let s = |n: usize| if n == 1 { "" } else { "s" };
    let x = if pairs >= 2 {
        format!(
            "ablated − as trained, nats per token (mean over {pairs} batches of {batch} window{}, 95 % t-interval; \
             filled: p < 0.05 after Holm)",
            s(batch)
        )
    } else {
        "ablated − as trained, nats per token over all the tokens (no intervals: fewer than two full batches)".into()
    };
    super::plot::interval_plot(path, &title, &x, &rows)
        .map_err(|e| TrainError::Settings(format!("--plot '{}': {e}", path.display())))
}

/// What [`run_model`] measures besides the loss.
#[derive(Debug, Clone, Copy, Default)]
struct Measure {
    /// The β tally per sublayer.
    betas: bool,
    /// Every evaluated token's loss, in order.
    rows: bool,
    /// Every token's scores (rank, likeliest token, its log p, entropy): accuracy, calibration.
    scores: bool,
    /// The logit lens: the head over every earlier state (implies `scores`).
    lens: bool,
}

/// What [`run_model`] measured.
struct ModelRun {
    eval: super::Eval,
    /// Each batch's (mean loss, tokens).
    losses: Vec<(f64, usize)>,
    betas: BetaTally,
    /// With [`Measure::rows`]: every evaluated token's loss in order.
    rows: Vec<f32>,
    scores: Option<ScoreTally>,
    /// With [`Measure::lens`]: per state X_0 … X_2L−1, its tally.
    lens: Vec<LensTally>,
}

/// One state's rows of the logit lens, tallied batch by batch.
#[derive(Debug, Clone, Default)]
struct LensTally {
    /// Σ loss over the predicted tokens.
    loss: f64,
    /// Per batch added: (mean loss, tokens).
    batches: Vec<(f64, usize)>,
    scores: ScoreTally,
    /// With `keep`: every added row's loss, in order (`--per-token --lens`).
    keep: bool,
    rows: Vec<f32>,
}

impl LensTally {
    /// Adds a batch's rows: losses `[rows]` and scores `[rows, 4]` (ignored targets, of rank 0,
    /// count in nothing).
    fn add(&mut self, losses: &[f32], scores: &[f32]) {
        let tokens = self.scores.tokens;
        if self.keep {
            self.rows.extend_from_slice(losses);
        }
        self.scores.add(scores);
        let sum: f64 =
            losses.iter().zip(scores.chunks_exact(4)).filter(|(_, s)| s[0] >= 1.0).map(|(&l, _)| l as f64).sum();
        let n = (self.scores.tokens - tokens) as usize;
        self.loss += sum;
        self.batches.push((if n > 0 { sum / n as f64 } else { 0.0 }, n));
    }
}

/// One model over the windows of `span` (`what` says what it measures besides the loss; with
/// `maps`, under interventions on its writes). Shows progress (`label` names the model when
/// there are two).
#[allow(clippy::too_many_arguments)]
fn run_model(
    model: &Model,
    ds: &Dataset,
    t: &super::TrainConfig,
    span: EvalSpan,
    windows: usize,
    what: Measure,
    label: &str,
    maps: Option<&[crate::kernels::delta::BetaMap]>,
) -> Result<ModelRun, TrainError> {
    run_model_in(model, ds, t, span, windows, what, label, maps).map_err(|e| match e {
        // A batch of windows whose buffers the adapter cannot bind: the batch that would fit.
        TrainError::Gpu(crate::gpu::GpuError::TooLarge { needed, max, .. }) => {
            let fits = (t.batch_size as u128 * max as u128 / needed.max(1) as u128) as usize;
            let fix = if fits >= 1 {
                format!("pass --batch-size {fits} or less")
            } else {
                "pass --batch-size 1 and a shorter --seq-len".to_string()
            };
            TrainError::Settings(format!(
                "a batch of {} windows of {} tokens does not fit adapter '{}': one of its buffers needs {needed} \
                 bytes, at most {max} can be bound; {fix}",
                t.batch_size, t.seq_len, model.gpu.info.name
            ))
        }
        e => e,
    })
}

#[allow(clippy::too_many_arguments)]
fn run_model_in(
    model: &Model,
    ds: &Dataset,
    t: &super::TrainConfig,
    span: EvalSpan,
    windows: usize,
    what: Measure,
    label: &str,
    maps: Option<&[crate::kernels::delta::BetaMap]>,
) -> Result<ModelRun, TrainError> {
    let Measure { betas, rows, scores, lens } = what;
    // (The head in the run's slices, or `--head-chunk`'s: the same loss, less memory.)
    use crate::model::Scoring;
    let scoring = if lens {
        Scoring::Lens
    } else if scores {
        Scoring::Ranks
    } else {
        Scoring::Loss
    };
    let prog = model.loss_program_with(t.batch_size, t.seq_len, t.head_chunk, maps, scoring)?;
    let mut tally = BetaTally { keep: rows, ..Default::default() };
    let mut score_tally = (scores || lens).then(|| ScoreTally { keep: rows, ..Default::default() });
    let mut lens_tally =
        vec![LensTally { keep: rows, ..Default::default() }; if lens { 2 * model.cfg.n_layers } else { 0 }];
    let mut losses = Vec::new();
    let mut token_losses = Vec::new();
    // A bar on a terminal; without one, a line at every tenth of a long evaluation.
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(indicatif::ProgressStyle::with_template(BAR).expect("a valid template"));
        b.set_prefix(label.trim().to_string());
        b
    });
    let mut last = 0;
    let b = t.batch_size;
    let mut failed = None;
    let e = super::evaluate_sharded(model, &prog, ds, t, span, &super::Single, &mut |k| {
        losses.push((k.loss, k.tokens));
        // The batch just run: its β and token losses, while the program still holds them.
        let live = (windows - (k.done - 1) * b).min(b);
        if betas
            && model.cfg.variant.is_ddl()
            && failed.is_none()
            && let Err(e) = tally.add(model, &prog, live)
        {
            failed = Some(e);
        }
        if let Some(st) = &mut score_tally
            && failed.is_none()
        {
            // (The scores evaluate_sharded read back for the accuracy: its live rows.)
            match k.scores {
                Some(l) => st.add(&l[..4 * live * t.seq_len]),
                None => failed = Some(crate::gpu::GpuError::Shape("a loss program without its token scores".into())),
            }
        }
        if lens && failed.is_none() {
            // Each state's live rows (the batch's first `live` windows).
            let (n, m) = (prog.b() * t.seq_len, live * t.seq_len);
            match prog.lens().map(|l| (l.loss.read_f32(&model.gpu), l.ranks.read_f32(&model.gpu))) {
                Some((Ok(l), Ok(r))) => {
                    for (s, st) in lens_tally.iter_mut().enumerate() {
                        st.add(&l[s * n..s * n + m], &r[4 * s * n..4 * (s * n + m)]);
                    }
                }
                Some((Err(e), _) | (_, Err(e))) => failed = Some(e),
                None => failed = Some(crate::gpu::GpuError::Shape("a loss program without its lens".into())),
            }
        }
        if rows && failed.is_none() {
            match prog.row_losses().map(|l| l.read_f32(&model.gpu)) {
                Some(Ok(l)) => token_losses.extend_from_slice(&l[..live * t.seq_len]),
                Some(Err(e)) => failed = Some(e),
                None => failed = Some(crate::gpu::GpuError::Shape("a loss program without its loss head".into())),
            }
        }
        match &bar {
            Some(bar) => {
                bar.set_length(k.of as u64);
                bar.set_position(k.done as u64);
            }
            None if k.next_tenth(&mut last) => eprintln!("evaluation: {label}batch {}/{}", k.done, k.of),
            None => {}
        }
        // Where Ctrl-C stops cleanly (a grid's ablations), it stops here; elsewhere `ddl eval`
        // ends at once on it and this stays false.
        !super::interrupted()
    })?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if !e.complete {
        let what = match label.trim() {
            "" => "the evaluation".to_string(),
            l => format!("the evaluation ({l})"),
        };
        return Err(TrainError::Interrupted { what });
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    Ok(ModelRun { eval: e, losses, betas: tally, rows: token_losses, scores: score_tally, lens: lens_tally })
}

/// A p-value as the reports print it (Student's t in f64 resolves p down to about 1e-15).
fn p_text(p: f64) -> String {
    match p {
        p if p < 1e-15 => "p < 1e-15".to_string(),
        p if p < 1e-3 => format!("p = {p:.1e}"),
        p => format!("p = {p:.3}"),
    }
}

impl EvalResult {
    /// The paired comparison's line of `v` (its mean difference, interval, p and verdict: `sign`
    /// names a significant mean's meaning), or why there is none.
    fn paired(&self, v: &Versus, sign: impl Fn(f64) -> &'static str) -> String {
        match (v.mean_paired_difference, v.ci, v.p) {
            (Some(m), _, Some(p)) if v.no_spread => {
                let verdict = if p >= 0.05 { "not distinguishable on this text" } else { sign(m) };
                format!(
                    "\npaired over {} batches of {}: every difference {m:+.4} (no spread: no t-test nor interval), \
                     exact sign test p = {p:.3}: {verdict}",
                    v.pairs,
                    self.windows_word(),
                )
            }
            (Some(m), Some((lo, hi)), Some(p)) => {
                let verdict = if p >= 0.05 { "not distinguishable on this text" } else { sign(m) };
                format!(
                    "\npaired over {} batches of {}: mean {m:+.4} [{lo:+.4}, {hi:+.4}] (95 % t-interval, df {}), \
                     {}: {verdict}. The interval covers the text's variation, not the training's (seeds): see `ddl \
                     experiment` for that",
                    v.pairs,
                    self.windows_word(),
                    v.pairs.saturating_sub(1),
                    p_text(p)
                )
            }
            _ => format!(
                "\nfewer than two full batches of {} to pair: no interval ({})",
                self.windows_word(),
                self.more()
            ),
        }
    }

    /// "N window(s)" of a batch.
    fn windows_word(&self) -> String {
        format!("{} window{}", self.batch_size, if self.batch_size == 1 { "" } else { "s" })
    }

    /// How to get two full batches to pair.
    fn more(&self) -> &'static str {
        match (self.whole, self.batch_size > 1) {
            (false, _) => "pass --batches 2 or more",
            (true, true) => "pass a smaller --batch-size or a longer text",
            (true, false) => "pass a longer text",
        }
    }

    /// One line for people: loss, perplexity, bits per byte, and what they cover.
    pub fn line(&self) -> String {
        let name = match self.split {
            Some(Split::Val) if self.source.starts_with("the validation split") => "validation loss",
            Some(Split::Train) => "training-text loss",
            Some(Split::Val) | None => "loss",
        };
        let bpb = match self.bits_per_byte {
            Some(b) => format!(", {b:.4} bits per byte"),
            None => String::new(),
        };
        let bytes = self.bytes.map(|b| format!(" ({b} bytes)")).unwrap_or_default();
        let span = if self.whole { "all of" } else { "the first windows of" };
        let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let left = if self.uncounted > 0 {
            let last = if self.uncounted == 1 { "token".into() } else { format!("{} tokens", self.uncounted) };
            format!(" (the last {last}, too few for a window, not counted)")
        } else {
            String::new()
        };
        let mut out = format!(
            "{name} {:.4} (perplexity {:.2}{bpb}) over {span} {}: {}{bytes} in {} of {}{left}, checkpoint step {}",
            self.loss,
            self.perplexity,
            self.source,
            plural(self.tokens, "token", "tokens"),
            plural(self.windows, "window", "windows"),
            self.seq_len,
            self.step
        );
        if self.tokens > 0 {
            out.push_str(&format!(
                "\nthe likeliest token came {:.2} % of the time (top-1 accuracy; among the five likeliest {:.2} %); \
                 mean entropy {:.4} nats; calibration error {:.4} (|accuracy − mean p| of the likeliest token over \
                 {CALIBRATION_BINS} bins of p, weighted by tokens)",
                100.0 * self.accuracy,
                100.0 * self.top5_accuracy,
                self.entropy,
                self.calibration_error
            ));
        }
        if !self.betas.is_empty() {
            out.push_str(&format!(
                "\nβ on these tokens, per sublayer (identity β < 0.5, projection 0.5–1.5, reflection > 1.5):\n\
                 {:<12} {:>7} {:>9} {:>11} {:>11}",
                "sublayer", "mean β", "identity", "projection", "reflection"
            ));
            for s in &self.betas {
                out.push_str(&format!(
                    "\n{:<12} {:>7.3} {:>8.1}% {:>10.1}% {:>10.1}%",
                    s.sublayer,
                    s.mean,
                    100.0 * s.identity,
                    100.0 * s.projection,
                    100.0 * s.reflection
                ));
            }
        }
        if !self.lens.is_empty() {
            let paired = self.lens.iter().any(|r| r.ci.is_some());
            let how = match paired {
                true => format!("mean over full batches of {} [95 % t-interval]", self.windows_word()),
                false => format!("over all the tokens (no intervals: {})", self.more()),
            };
            out.push_str(&format!(
                "\nlogit lens: the model's own head (its readout compressor where it has one, final norm, tied \
                 embedding) on the state after the embedding and after {}; change = this state's loss − the one \
                 before's, {how}:\n{:<14} {:>8} {:>28} {:>8} {:>8} {:>8}",
                self.lens_step, "state", "loss", "change", "top-1", "top-5", "entropy"
            ));
            for r in &self.lens {
                let change = match (r.mean_paired_change, r.ci, r.change) {
                    (Some(m), Some((lo, hi)), _) => format!("{m:+.4} [{lo:+.4}, {hi:+.4}]"),
                    (_, _, Some(c)) => format!("{c:+.4}"),
                    _ => String::new(),
                };
                out.push_str(&format!(
                    "\n{:<14} {:>8.4} {:>28} {:>7.2}% {:>7.2}% {:>8.4}{}",
                    r.state,
                    r.loss,
                    change,
                    100.0 * r.accuracy,
                    100.0 * r.top5_accuracy,
                    r.entropy,
                    if r.output { "  (the model's output)" } else { "" }
                ));
            }
            if let Some(p) = &self.lens_plot {
                out.push_str(&format!("\nlens plot: {p}"));
            }
        }
        if let Some(a) = &self.against {
            let v = &a.vs;
            let bpb = v.bits_per_byte.map(|b| format!(", {b:.4} bits per byte")).unwrap_or_default();
            out.push_str(&format!(
                "\nagainst {} (step {}): loss {:.4} (perplexity {:.2}{bpb}) on the same windows; this − that = {:+.4} \
                 nats per token",
                a.checkpoint, a.step, v.loss, v.perplexity, v.difference
            ));
            out.push_str(&self.paired(v, |m| {
                if m < 0.0 {
                    "this checkpoint predicts this text better"
                } else {
                    "the other checkpoint predicts this text better"
                }
            }));
            if let Some(acc) = &v.accuracy {
                out.push_str(&format!(
                    "\ntop-1 accuracy {:.2} % against {:.2} %: this − that = {:+.2} points",
                    100.0 * acc.this,
                    100.0 * acc.other,
                    100.0 * acc.difference
                ));
                let verdict = |p: f64, m: f64| match (p < 0.05, m > 0.0) {
                    (false, _) => "not distinguishable on this text",
                    (true, true) => "this checkpoint's likeliest token comes more often",
                    (true, false) => "the other checkpoint's likeliest token comes more often",
                };
                out.push_str(&match (acc.mean_paired_difference, acc.ci, acc.p) {
                    (Some(m), _, Some(p)) if acc.no_spread => format!(
                        ", paired over the same batches: every difference {:+.2} points (no spread: no t-test nor \
                         interval), exact sign test p = {p:.3}: {}",
                        100.0 * m,
                        verdict(p, m)
                    ),
                    (Some(m), Some((lo, hi)), Some(p)) => {
                        let verdict = verdict(p, m);
                        format!(
                            ", paired over the same batches: mean {:+.2} [{:+.2}, {:+.2}] points (95 % t-interval{}), \
                             {}: {verdict}",
                            100.0 * m,
                            100.0 * lo,
                            100.0 * hi,
                            if lo <= -1.0 || hi >= 1.0 { ", cut at ±100 points" } else { "" },
                            p_text(p)
                        )
                    }
                    _ => " (no interval: fewer than two full batches)".to_string(),
                });
            }
        }
        if let Some(i) = &self.intervened {
            let v = &i.vs;
            let bpb = v.bits_per_byte.map(|b| format!(", {b:.4} bits per byte")).unwrap_or_default();
            let allowed = if i.allow_out_of_range { " (β allowed outside [0, 2])" } else { "" };
            out.push_str(&format!(
                "\nunder {}{allowed}: loss {:.4} (perplexity {:.2}{bpb}) on the same windows; intervened − as trained = \
                 {:+.4} nats per token",
                i.interventions, v.loss, v.perplexity, v.difference
            ));
            out.push_str(&self.paired(v, |m| {
                if m > 0.0 { "the interventions raise the loss" } else { "the interventions lower the loss" }
            }));
        }
        if !self.ablate.is_empty() {
            let a0 = self.ablations.first();
            let pairs = a0.map_or(0, |a| a.vs.pairs);
            let parts: Vec<&str> = self.ablate.iter().map(|p| p.words()).collect();
            let how = if pairs >= 2 {
                format!(
                    "paired over {pairs} batches of {} (mean, 95 % t-interval, df {}; p after Holm over the {} rows)",
                    self.windows_word(),
                    pairs - 1,
                    self.ablations.len()
                )
            } else {
                format!(
                    "over all the tokens (fewer than two full batches of {} to pair: no intervals; {})",
                    self.windows_word(),
                    self.more()
                )
            };
            out.push_str(&format!(
                "\neach sublayer's write with one part removed in turn ({}) on the same windows: loss, and ablated − as \
                 trained {how}:\n{:<20} {:>8} {:>9}  {:<22} {}",
                parts.join("; "),
                "ablated",
                "loss",
                "Δ loss",
                "95 % interval",
                "p (Holm)"
            ));
            for a in &self.ablations {
                let v = &a.vs;
                let m = v.mean_paired_difference.unwrap_or(v.difference);
                let ci = match v.ci {
                    _ if v.no_spread => "no spread".into(),
                    Some((lo, hi)) => format!("[{lo:+.4}, {hi:+.4}]"),
                    None => "–".into(),
                };
                let p = a.p_holm.map(p_text).unwrap_or_else(|| "–".into());
                out.push_str(&format!("\n{:<20} {:>8.4} {:>+9.4}  {ci:<22} {p}", a.spec, v.loss, m));
            }
            if self.ablations.iter().any(|a| a.vs.no_spread) {
                out.push_str(
                    "\n(no spread: every batch's difference the same, so no t-test nor interval; that row's p is the \
                     exact sign test's, 2^(1−batches), before Holm)",
                );
            }
            let significant = self.ablations.iter().filter(|a| a.p_holm.is_some_and(|p| p < 0.05)).count();
            let mean = |a: &Ablation| a.vs.mean_paired_difference.unwrap_or(a.vs.difference);
            if let Some(top) = self.ablations.iter().max_by(|a, b| mean(a).total_cmp(&mean(b))).filter(|_| pairs >= 2) {
                let top = if mean(top) > 0.0 {
                    format!("the largest rise: {} ({:+.4})", top.spec, mean(top))
                } else {
                    "none raises the loss".to_string()
                };
                out.push_str(&format!(
                    "\n{significant} of {} rows change the loss at p < 0.05 after Holm; {top}. The intervals cover \
                     the text's variation, not the training's (seeds)",
                    self.ablations.len(),
                ));
            }
            if let Some(p) = &self.ablate_plot {
                out.push_str(&format!("\nforest plot of the ablations: {p}"));
            }
        }
        if let Some(f) = &self.calibration_plot {
            out.push_str(&format!("\nreliability diagram: {f}"));
        }
        if let Some(f) = &self.per_token {
            out.push_str(&format!(
                "\neach token's loss, rank and the model's likeliest token: {f} ({} rows, tab-separated)",
                self.tokens
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two batches whose accuracies differ by the same count of tokens: "no spread", the sign
    /// test's p = 0.5 and "not distinguishable", where Student's t would have said p = 0 and a
    /// winner. The loss's comparison with spread keeps its t-interval; an ablation without spread
    /// says so in its row and under the table.
    #[test]
    fn comparisons_without_spread_say_so_and_give_the_sign_test() {
        let paired = |pairs: &[(f64, f64)]| crate::stats::Paired::of(pairs).unwrap();
        let loss = paired(&[(2.10, 2.00), (2.30, 2.15)]);
        let acc = paired(&[(0.50, 0.50 - 3.0 / 64.0), (0.25, 0.25 - 3.0 / 64.0)]);
        assert!(!loss.no_spread && acc.no_spread && acc.p == 0.5, "{loss:?} {acc:?}");
        let vs = |t: crate::stats::Paired, accuracy: Option<AccuracyVersus>| Versus {
            loss: 2.075,
            perplexity: 2.075f64.exp(),
            bits_per_byte: None,
            difference: t.diff.mean,
            pairs: 2,
            mean_paired_difference: Some(t.diff.mean),
            ci: Some(t.diff.ci),
            t: Some(t.t),
            p: Some(t.p),
            no_spread: t.no_spread,
            accuracy,
        };
        let accuracy = AccuracyVersus {
            this: 0.375,
            other: 0.375 - 3.0 / 64.0,
            difference: 3.0 / 64.0,
            mean_paired_difference: Some(acc.diff.mean),
            ci: Some(acc.diff.ci),
            t: Some(acc.t),
            p: Some(acc.p),
            no_spread: true,
        };
        let r = EvalResult {
            step: 10,
            source: "'t.txt'".into(),
            split: None,
            loss: 2.2,
            perplexity: 2.2f64.exp(),
            tokens: 128,
            bytes: None,
            bits_per_byte: None,
            seq_len: 16,
            windows: 8,
            whole: true,
            uncounted: 0,
            betas: vec![],
            batch_size: 4,
            against: Some(Against { checkpoint: "runs/b".into(), step: 10, vs: vs(loss, Some(accuracy)) }),
            intervened: None,
            ablate: vec![Ablate::Write],
            ablations: vec![Ablation {
                sublayer: "block0.attn".into(),
                part: Ablate::Write,
                spec: "block0.attn:write=0".into(),
                vs: vs(paired(&[(2.5, 2.2), (2.4, 2.1)]), None),
                p_holm: Some(0.5),
            }],
            ablate_plot: None,
            per_token: None,
            accuracy: 0.375,
            top5_accuracy: 0.8,
            entropy: 1.0,
            calibration_error: 0.0,
            calibration: vec![],
            calibration_plot: None,
            lens: vec![],
            lens_plot: None,
            lens_step: "each sublayer's write",
        };
        let line = r.line();
        assert!(line.contains("mean +0.1250 [") && line.contains("(95 % t-interval, df 1), p = 0."), "{line}");
        assert!(
            line.contains(
                "paired over the same batches: every difference +4.69 points (no spread: no t-test nor interval), \
                 exact sign test p = 0.500: not distinguishable on this text"
            ),
            "{line}"
        );
        assert!(
            line.contains("block0.attn:write=0") && line.contains("no spread") && line.contains("exact sign test's"),
            "{line}"
        );
        assert!(!line.contains("inf") && !line.contains("NaN") && !line.contains("p < 1e-15"), "{line}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["against"]["accuracy"]["no_spread"], true, "{json}");
        assert!(json["against"].get("no_spread").is_none(), "written only when true: {json}");
        // Two batches 80 and 0 points apart: mean +40, t-interval ±508 points at df 1, past what
        // two accuracies can differ by: cut at ±100 and said (it printed [-468.25, +548.25]).
        let wide = AccuracyVersus {
            no_spread: false,
            ci: Some(accuracy_ci(&paired(&[(0.9, 0.1), (0.5, 0.5)]))),
            mean_paired_difference: Some(0.4),
            p: Some(0.5),
            ..r.against.as_ref().unwrap().vs.accuracy.clone().unwrap()
        };
        let mut r = r;
        r.against.as_mut().unwrap().vs.accuracy = Some(wide);
        let line = r.line();
        assert!(
            line.contains("mean +40.00 [-100.00, +100.00] points (95 % t-interval, cut at ±100 points), p = 0.500"),
            "{line}"
        );
    }

    #[test]
    fn plot_titles_name_what_was_evaluated_by_its_file_name() {
        let long = "/a/very/long/folder/that/makes/titles/wider/than/their/pictures/corpus.txt";
        assert_eq!(super::short_source(&format!("'{long}'")), "corpus.txt");
        assert_eq!(
            super::short_source(&format!("the validation split of the run's corpus '{long}'")),
            "corpus.txt (validation split)"
        );
        assert_eq!(super::short_source("the training split of the run's shards '/d/web'"), "web (training split)");
        assert_eq!(super::short_source("TinyShakespeare (built in)"), "TinyShakespeare (built in)");
    }
}
