//! What an evaluation found: the losses and scores, the paired comparisons (another checkpoint, an
//! intervention, each ablated write), β per sublayer, the lens's rows and the calibration bins.

use super::*;

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
pub(super) fn accuracy_ci(p: &crate::stats::Paired) -> (f64, f64) {
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
