//! An evaluation's result as the text `ddl eval` prints.

use super::*;

/// A p-value as the reports print it (Student's t in f64 resolves p down to about 1e-15).
pub(super) fn p_text(p: f64) -> String {
    match p {
        p if p < 1e-15 => "p < 1e-15".to_string(),
        p if p < 1e-3 => format!("p = {p:.1e}"),
        p => format!("p = {p:.3}"),
    }
}

impl EvalResult {
    /// The paired comparison's line of `v` (its mean difference, interval, p and verdict: `sign`
    /// names a significant mean's meaning), or why there is none.
    pub(super) fn paired(&self, v: &Versus, sign: impl Fn(f64) -> &'static str) -> String {
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
    pub(super) fn windows_word(&self) -> String {
        crate::plural(self.batch_size, "window")
    }

    /// How to get two full batches to pair.
    pub(super) fn more(&self) -> &'static str {
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
        let bytes = self.bytes.map(|b| format!(" ({})", crate::plural(b as usize, "byte"))).unwrap_or_default();
        let span = if self.whole { "all of" } else { "the first windows of" };
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
            crate::plural(self.tokens, "token"),
            crate::plural(self.windows, "window"),
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
