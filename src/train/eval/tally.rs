//! What an evaluation adds up batch by batch: every predicted token's scores
//! (top-1/top-5 hits, entropy, calibration bins), β per sublayer, and the logit lens's states.

use super::*;

/// Bins of [`EvalResult::calibration`].
pub(super) const CALIBRATION_BINS: usize = 10;

/// Every predicted token's scores ([`Program::row_ranks`]), tallied batch by batch: top-1 and
/// top-5 hits, the entropy's sum, the calibration bins; with `keep`, every row's scores in order.
#[derive(Debug, Clone, Default)]
pub(super) struct ScoreTally {
    pub(super) tokens: u64,
    pub(super) top1: u64,
    pub(super) top5: u64,
    pub(super) entropy: f64,
    /// Per bin: tokens, Σ probability of the likeliest token, tokens whose likeliest came.
    pub(super) bins: [(u64, f64, u64); CALIBRATION_BINS],
    pub(super) keep: bool,
    pub(super) rows: Vec<[f32; 4]>,
    /// Per batch added: (hits of the likeliest token, tokens), for a paired comparison.
    pub(super) batches: Vec<(u64, u64)>,
}

impl ScoreTally {
    /// Adds rows of (rank, likeliest token, its log p, entropy); rows of rank 0 (ignored targets)
    /// count in nothing.
    pub(super) fn add(&mut self, rows: &[f32]) {
        let (top1, tokens) = (self.top1, self.tokens);
        self.add_rows(rows);
        self.batches.push((self.top1 - top1, self.tokens - tokens));
    }

    pub(super) fn add_rows(&mut self, rows: &[f32]) {
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

    pub(super) fn share(&self, n: u64) -> f64 {
        if self.tokens == 0 { 0.0 } else { n as f64 / self.tokens as f64 }
    }

    pub(super) fn calibration(&self) -> Vec<CalibrationBin> {
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

    pub(super) fn calibration_error(&self) -> f64 {
        if self.tokens == 0 {
            return 0.0;
        }
        self.bins.iter().map(|&(_, conf, hit)| (hit as f64 - conf).abs()).sum::<f64>() / self.tokens as f64
    }
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

/// The lens's name of state X_s: `embedding` (X_0), else the sublayer whose write left it.
pub(super) fn lens_state_name(s: usize) -> String {
    if s == 0 { "embedding".into() } else { crate::model::intervene::sublayer_name(s - 1) }
}

/// The lens's rows: each earlier state's tally, then the model's own output (`own`: its loss,
/// scores and per-batch losses), each with its change from the state before, paired over the
/// full batches (`full` tokens).
pub(super) fn lens_rows(states: &[LensTally], own: (f64, &ScoreTally, &[(f64, usize)]), full: usize) -> Vec<LensRow> {
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

/// One state's rows of the logit lens, tallied batch by batch.
#[derive(Debug, Clone, Default)]
pub(super) struct LensTally {
    /// Σ loss over the predicted tokens.
    pub(super) loss: f64,
    /// Per batch added: (mean loss, tokens).
    pub(super) batches: Vec<(f64, usize)>,
    pub(super) scores: ScoreTally,
    /// With `keep`: every added row's loss, in order (`--per-token --lens`).
    pub(super) keep: bool,
    pub(super) rows: Vec<f32>,
}

impl LensTally {
    /// Adds a batch's rows: losses `[rows]` and scores `[rows, 4]` (ignored targets, of rank 0,
    /// count in nothing).
    pub(super) fn add(&mut self, losses: &[f32], scores: &[f32]) {
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
