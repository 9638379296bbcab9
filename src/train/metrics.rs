//! A run's `metrics.jsonl` read back: for its `loss.png`, `ddl experiment`'s results, `ddl plot`,
//! early stopping on resume, and the visualizer's dashboard (which follows the file line by line
//! with [`parse_line`]; this module builds for the browser too).

use std::path::Path;

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone)]
pub enum Line {
    Train(TrainRow),
    Val(ValRow),
}

/// One evaluation.
#[derive(Debug, Clone, Copy)]
pub struct ValRow {
    pub step: f64,
    pub loss: f64,
    pub tokens: Option<u64>,
    /// Over the whole validation split (the final evaluation), with its part over the windows
    /// every evaluation covers (`subset`).
    pub full: bool,
    pub subset: Option<f64>,
    /// The share of its tokens whose likeliest prediction came (runs before it was logged: none),
    /// and a final evaluation's over the windows every evaluation covers.
    pub accuracy: Option<f64>,
    pub subset_accuracy: Option<f64>,
}

impl ValRow {
    /// Its point on the validation curve — the loss over the windows every evaluation covers:
    /// a final evaluation's part over them (none when it has no such part), else the loss.
    pub fn curve_point(&self) -> Option<(f64, f64)> {
        if self.full { self.subset.map(|s| (self.step, s)) } else { Some((self.step, self.loss)) }
    }

    /// Its point on the validation accuracy's curve, over the same windows as [`ValRow::curve_point`].
    pub fn accuracy_point(&self) -> Option<(f64, f64)> {
        let a = if self.full { self.subset_accuracy } else { self.accuracy };
        a.map(|a| (self.step, a))
    }
}

/// A line read: `None` when it is not JSON with a step.
pub fn parse_line(line: &str) -> Option<Line> {
    let j = serde_json::from_str::<serde_json::Value>(line).ok()?;
    let step = j["step"].as_f64()?;
    // (A loss that was not a finite number is written as null: an evaluation all the same.)
    let num = |key: &str| j.get(key).map(|x| x.as_f64().unwrap_or(f64::NAN));
    if let Some(loss) = num("val_loss") {
        return Some(Line::Val(ValRow {
            step,
            loss,
            tokens: j["val_tokens"].as_u64(),
            full: j["val_full"] == true,
            subset: num("val_subset_loss"),
            accuracy: j["val_accuracy"].as_f64(),
            subset_accuracy: j["val_subset_accuracy"].as_f64(),
        }));
    }
    Some(Line::Train(TrainRow {
        step,
        loss: j["loss"].as_f64(),
        lr: j["lr"].as_f64(),
        grad_norm: j["grad_norm"].as_f64(),
        tok_per_s: j["tok_per_s"].as_f64(),
        elapsed: j["elapsed"].as_f64(),
        beta_mean: j["beta_mean"].as_array().map(|a| a.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect()),
        // (An f16 step skipped for overflowing gradients at its loss scale has a finite loss: the
        // scale's own business, not this.)
        skipped_nonfinite: j["skipped"] == true && (j.get("loss_scale").is_none() || !j["loss"].is_f64()),
        steps_target: j["steps_target"].as_f64(),
    }))
}

/// One logged training step.
#[derive(Debug, Clone, Default)]
pub struct TrainRow {
    pub step: f64,
    pub loss: Option<f64>,
    pub lr: Option<f64>,
    pub grad_norm: Option<f64>,
    pub tok_per_s: Option<f64>,
    /// Seconds of training so far.
    pub elapsed: Option<f64>,
    /// Mean β over the step's tokens, per delta write in sublayer order (DDL variants).
    pub beta_mean: Option<Vec<f64>>,
    /// The step made no update: its loss or gradient norm was not finite (`train.skip_nonfinite`).
    pub skipped_nonfinite: bool,
    /// The step the invocation that logged it trains to (`--steps`; lines of runs before it was
    /// logged: none): how far a run that is training has to go.
    pub steps_target: Option<f64>,
}

/// What `metrics.jsonl` holds.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub train: Vec<TrainRow>,
    /// The validation curve: (step, loss) of every evaluation over the windows each evaluation
    /// covers — the final evaluation's point is its part over those windows, so that the curve
    /// does not jump where the whole split is evaluated.
    pub val: Vec<(f64, f64)>,
    /// The validation accuracy's curve over the same windows: (step, share of tokens whose
    /// likeliest prediction came), of the evaluations that logged it.
    pub val_accuracy: Vec<(f64, f64)>,
    /// The last evaluation over the whole validation split: (step, loss, tokens).
    pub full: Option<(usize, f64, usize)>,
    /// That evaluation's top-1 accuracy (runs before it was logged: none).
    pub full_accuracy: Option<f64>,
    /// The numbers (from 1) of the lines that did not read as JSON with a step, a torn last line
    /// aside (one without its newline: being written by a run training now, or cut by a crash,
    /// which `--resume` drops without a word).
    pub bad_lines: Vec<usize>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut m = Metrics::default();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            match parse_line(line) {
                None => {
                    let torn = i + 1 == lines.len() && !text.ends_with('\n');
                    if !torn {
                        m.bad_lines.push(i + 1);
                    }
                }
                Some(Line::Train(row)) => m.train.push(row),
                Some(Line::Val(v)) => {
                    if v.full {
                        m.full = Some((v.step as usize, v.loss, v.tokens.unwrap_or(0) as usize));
                        m.full_accuracy = v.accuracy;
                    }
                    if let Some(p) = v.curve_point() {
                        m.val.push(p);
                    }
                    if let Some(p) = v.accuracy_point() {
                        m.val_accuracy.push(p);
                    }
                }
            }
        }
        m
    }

    /// `DIR/metrics.jsonl`; `None` when there is none (a run stopped before its first step).
    pub fn read(dir: &Path) -> std::io::Result<Option<Metrics>> {
        match std::fs::read_to_string(dir.join("metrics.jsonl")) {
            Ok(t) => Ok(Some(Metrics::parse(&t))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The mean training loss over the last tenth of the logged steps (at least one): the end
    /// of a noisy curve.
    pub fn final_train_loss(&self) -> Option<f64> {
        let losses: Vec<f64> = self.train.iter().filter_map(|r| r.loss).collect();
        let tail = (losses.len() / 10).max(1).min(losses.len());
        (tail > 0).then(|| losses[losses.len() - tail..].iter().sum::<f64>() / tail as f64)
    }

    /// The lowest point of the validation curve: (step, loss).
    pub fn best_val(&self) -> Option<(f64, f64)> {
        self.val.iter().copied().filter(|p| p.1.is_finite()).min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Seconds trained by `step`: those of the last logged step at or before it.
    pub fn elapsed_at(&self, step: f64) -> Option<f64> {
        self.train.iter().rev().find(|r| r.step <= step).and_then(|r| r.elapsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_read_back_with_the_final_evaluation_on_the_curve_s_windows() {
        let text = "{\"step\":1,\"loss\":4.0,\"lr\":0.1,\"elapsed\":0.5,\"beta_mean\":[1.0,0.5]}\n\
                    not json\n\
                    {\"step\":2,\"loss\":3.0,\"elapsed\":1.0}\n\
                    {\"step\":2,\"val_loss\":3.5,\"val_tokens\":10,\"val_full\":false,\"val_accuracy\":0.25}\n\
                    {\"step\":4,\"loss\":2.0,\"elapsed\":2.0}\n\
                    {\"step\":4,\"val_loss\":2.9,\"val_tokens\":99,\"val_full\":true,\"val_subset_loss\":2.5,\
                     \"val_accuracy\":0.3,\"val_subset_accuracy\":0.375}\n\
                    {\"step\":5,\"val_loss\":2.8,\"val_tokens\":10,\"val_full\":false}\n";
        let m = Metrics::parse(text);
        assert_eq!(m.bad_lines, vec![2]);
        // A torn last line (no newline: a run writing it, or killed) is not counted; one with its
        // newline is.
        let torn = format!("{text}{{\"step\":6,\"lo");
        assert_eq!(Metrics::parse(&torn).bad_lines, vec![2]);
        assert_eq!(Metrics::parse(&format!("{torn}\n")).bad_lines, vec![2, 8]);
        assert_eq!(m.train.len(), 3);
        assert_eq!(m.val, vec![(2.0, 3.5), (4.0, 2.5), (5.0, 2.8)]);
        // (The final evaluation's accuracy on the curve's windows; a row without one, none.)
        assert_eq!(m.val_accuracy, vec![(2.0, 0.25), (4.0, 0.375)]);
        assert_eq!(m.full, Some((4, 2.9, 99)));
        assert_eq!(m.best_val(), Some((4.0, 2.5)));
        assert_eq!(m.final_train_loss(), Some(2.0));
        assert_eq!(m.elapsed_at(3.0), Some(1.0));
        assert_eq!(m.train[0].beta_mean.as_deref(), Some(&[1.0, 0.5][..]));
    }

    /// A step skipped for a non-finite loss or gradient (`train.skip_nonfinite`) is told from one
    /// an f16 run's loss scale skipped (finite loss, the scale logged): the experiment's results
    /// count the first.
    #[test]
    fn steps_skipped_for_a_non_finite_value_are_told_from_the_loss_scales() {
        let text = "{\"step\":1,\"loss\":4.0,\"grad_norm\":1.0,\"skipped\":false}\n\
                    {\"step\":2,\"loss\":4.0,\"grad_norm\":null,\"skipped\":true}\n\
                    {\"step\":3,\"loss\":null,\"grad_norm\":null,\"skipped\":true,\"loss_scale\":1.0}\n\
                    {\"step\":4,\"loss\":4.0,\"grad_norm\":null,\"skipped\":true,\"loss_scale\":1.0}\n\
                    {\"step\":5,\"loss\":4.0}\n";
        let m = Metrics::parse(text);
        let skipped: Vec<bool> = m.train.iter().map(|r| r.skipped_nonfinite).collect();
        assert_eq!(skipped, [false, true, true, false, false]);
    }

    /// An evaluation whose loss was not a finite number (the trainer writes null) is read as an
    /// evaluation with a NaN loss, not as a training step without values; it is never the best.
    #[test]
    fn an_evaluation_logged_as_null_is_an_evaluation() {
        let text = "{\"step\":1,\"loss\":4.0}\n\
                    {\"step\":1,\"val_loss\":3.5,\"val_tokens\":10,\"val_full\":false}\n\
                    {\"step\":2,\"loss\":3.0}\n\
                    {\"step\":2,\"val_loss\":null,\"val_ppl\":null,\"val_tokens\":10,\"val_full\":false}\n\
                    {\"step\":3,\"val_loss\":null,\"val_tokens\":99,\"val_full\":true,\"val_subset_loss\":null}\n";
        let m = Metrics::parse(text);
        assert_eq!((m.train.len(), m.bad_lines.len()), (2, 0));
        assert_eq!(m.val.len(), 3);
        assert!(m.val[1].1.is_nan() && m.val[2].1.is_nan() && m.val[1].0 == 2.0);
        assert!(m.full.is_some_and(|f| f.0 == 3 && f.1.is_nan() && f.2 == 99));
        assert_eq!(m.best_val(), Some((1.0, 3.5)));
    }
}
