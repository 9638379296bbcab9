//! `ddl train --dry-run`: what a training command would do, from its resolved settings, with no
//! device opened and nothing written: the folder (a new run, resumed, a copy continued, replaced,
//! or refused and why), the model and its parameters, the tokenizer and data (epochs where the
//! data's size is known), the steps and tokens, the evaluations and checkpoints, the memory plan,
//! and the settings `config.toml` would hold.

use std::path::{Path, PathBuf};

use super::cache::size;
use super::describe::count;
use super::{RunConfig, TrainError, checkpoint, data};

/// What a `ddl train` command would do.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DryRun {
    pub out: PathBuf,
    /// What would happen to `out`, in words.
    pub action: String,
    /// Why the run would not start (the error `ddl train` would give), when it would not.
    pub refused: Option<String>,
    pub variant: String,
    pub preset: String,
    pub parameters: usize,
    pub vocab_size: usize,
    /// The tokenizer's kind and where it comes from.
    pub tokenizer: String,
    pub data: String,
    /// Training and validation tokens, where known without tokenising.
    pub tokens: Option<(u64, u64)>,
    /// The step the run starts from and the one it trains to.
    pub start_step: usize,
    pub steps: usize,
    pub tokens_per_step: usize,
    /// Epochs of the training tokens by the last step, where their number is known.
    pub epochs: Option<f64>,
    /// The learning-rate schedule in words, and what a run that stops before its end leaves of
    /// it (with the setting that fits it to the run).
    pub schedule: String,
    pub schedule_unfinished: Option<String>,
    pub evaluations: String,
    pub checkpoints: String,
    /// The memory plan's total and its parts (bytes), as `ddl info --preset` gives them.
    pub memory: serde_json::Value,
    pub memory_total: u64,
    /// The `ddl info --preset … --set …` command that explains the plan.
    pub info_command: String,
    /// `config.toml` as the run would write it.
    pub settings: String,
}

/// What `ddl train` would do with `run` (resolved as it hands it to [`super::train`]) towards
/// `steps` in `out`: `from` is the checkpoint a resumed run continues (`out` itself, or the source
/// of a copy), `overwrite` its `--overwrite`. Settings that would be refused are errors; a folder
/// that would be refused is said in [`DryRun::refused`].
pub fn dry_run(
    run: &RunConfig,
    steps: usize,
    out: &Path,
    from: Option<&Path>,
    overwrite: bool,
) -> Result<DryRun, TrainError> {
    let mut run = run.clone();
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    };
    let mut refused = super::lock::refuse_if_held(out).err().map(|e| e.to_string());
    let (action, start, given) = match from {
        Some(src) => {
            let at = checkpoint::saved_step(src)?;
            let tok = checkpoint::saved_tokenizer(src)?;
            let action = if same(src, out) {
                format!("resumes the run in {} at step {at} (its checkpoint)", out.display())
            } else {
                format!(
                    "continues a copy of {}'s checkpoint at step {at} in {} (a branch)",
                    src.display(),
                    out.display()
                )
            };
            (action, at, Some(tok))
        }
        None => {
            let action = match super::claim_for_new_run(out, overwrite) {
                Ok(true) => format!(
                    "replaces the run in {} (--overwrite: the old one is removed once the new one starts)",
                    out.display()
                ),
                Ok(false) => format!("a new run in {}", out.display()),
                Err(e) => {
                    refused = refused.or(Some(e.to_string()));
                    format!("a new run in {}", out.display())
                }
            };
            let init = (!run.init_from.is_empty()).then(|| PathBuf::from(&run.init_from));
            let tok = init.as_deref().map(checkpoint::saved_tokenizer).transpose()?;
            // (The config.toml shown is the one the run would write.)
            run.init_from_step = init.as_deref().and_then(|p| checkpoint::saved_step(p).ok());
            (action, 0, tok)
        }
    };
    // The folder a new run or a copy writes: what the run would refuse before writing.
    if from.is_none_or(|src| !same(src, out)) {
        refused = refused.or_else(|| super::out_problem(out));
    }
    if start >= steps {
        refused = refused.or(Some(format!(
            "nothing to train: the checkpoint is at step {start}, --steps {steps}; pass --steps above {start}"
        )));
    }
    run.absolute_paths();
    let preview = data::preview(&run, given.as_ref())?;
    let tokenizer = match (&given, from) {
        (Some(_), Some(src)) => format!("{} (the checkpoint's, {})", preview.tokenizer.kind(), src.display()),
        (Some(_), None) => format!("{} (--init-from {}'s)", preview.tokenizer.kind(), run.init_from),
        (None, _) if run.tokenizer == "char" && run.data.is_empty() => "char (the corpus's characters)".to_string(),
        (None, _) if run.tokenizer == "char" => format!("{} (the shards' meta.json)", preview.tokenizer.kind()),
        (None, _) => format!("{} ({})", preview.tokenizer.kind(), run.tokenizer),
    };
    if from.is_none() && run.init_from.is_empty() {
        run.model.vocab_size = preview.tokenizer.vocab_size();
    }
    run.validate()?;
    let t = &run.train;
    // Splits shorter than one window, where their sizes are known without tokenising.
    if let Some((train, val)) = preview.tokens {
        let need = t.seq_len + 1;
        for (split, have) in [("train", train), ("validation", val)] {
            if (have as usize) < need {
                let e = data::DataError::TooShort { split, have: have as usize, need };
                refused = refused.or(Some(format!("{}: {e}", data::source_flag(&run))));
            }
        }
    }
    let per_step = t.batch_size * t.seq_len * t.grad_accum;
    let epochs =
        preview.tokens.filter(|(train, _)| *train > 0).map(|(train, _)| steps as f64 * per_step as f64 / train as f64);
    let cap = if t.val_max_tokens > 0 {
        // (Whole windows: the cap rounded up to them.)
        let windows = t.val_max_tokens.div_ceil(t.seq_len);
        format!(", at most {} tokens ({windows} windows)", count((windows * t.seq_len) as u64))
    } else {
        String::new()
    };
    let mut evaluations = if t.eval_every > 0 {
        format!(
            "every {} steps over {} batches of validation windows{cap}, and a final one over the whole validation \
             split{cap}",
            t.eval_every, t.eval_batches
        )
    } else {
        format!("one at the end, over the whole validation split{cap}")
    };
    if t.early_stop > 0 {
        evaluations.push_str(&format!("; the run stops early after {} evaluations without a lower loss", t.early_stop));
    }
    let keep = match t.checkpoint_keep {
        0 => "no step checkpoints kept".to_string(),
        n => format!("the newest {n} kept under checkpoints/"),
    };
    let checkpoints = if t.checkpoint_every > 0 {
        format!(
            "every {} steps and at the end; {keep}; the best by validation loss in checkpoints/best",
            t.checkpoint_every
        )
    } else {
        format!("at the end; {keep}; the best by validation loss in checkpoints/best")
    };
    let plan = crate::model::memory_plan_for(&run.model, t.batch_size, t.seq_len, t.storage(&run.model));
    let settings = run.settings_toml().map_err(|e| TrainError::Settings(e.to_string()))?;
    Ok(DryRun {
        out: out.to_path_buf(),
        action,
        refused,
        variant: run.model.variant.to_string(),
        preset: run.preset.clone(),
        parameters: plan.params,
        vocab_size: run.model.vocab_size,
        tokenizer,
        data: preview.source,
        tokens: preview.tokens,
        start_step: start,
        steps,
        tokens_per_step: per_step,
        epochs,
        schedule: t.schedule_words(),
        schedule_unfinished: t.unfinished_schedule(steps),
        evaluations,
        checkpoints,
        memory: plan.json(),
        memory_total: plan.total(),
        info_command: super::config::info_command(&run.preset, &run.model, t),
        settings,
    })
}

impl DryRun {
    /// The plan as lines of text, the settings last.
    pub fn text(&self) -> String {
        let mut out = vec![format!("dry run (nothing trained, nothing written): {}", self.action)];
        if let Some(why) = &self.refused {
            out.push(format!("it would not start: {why}"));
        }
        out.push(format!(
            "model: {} (preset {}), {} parameters, vocabulary {}",
            self.variant,
            self.preset,
            count(self.parameters as u64),
            self.vocab_size
        ));
        out.push(format!("tokenizer: {}", self.tokenizer));
        out.push(format!("data: {}", self.data));
        if let Some((train, val)) = self.tokens {
            out.push(format!("  {} training tokens, {} validation", count(train), count(val)));
        }
        let left = self.steps.saturating_sub(self.start_step);
        let mut line = format!(
            "steps: {} → {} ({left} to train), {} tokens a step: {} tokens",
            self.start_step,
            self.steps,
            count(self.tokens_per_step as u64),
            // (A --steps past what u64 tokens hold is said, not wrapped.)
            u64::try_from(left as u128 * self.tokens_per_step as u128)
                .map(count)
                .unwrap_or_else(|_| format!("more than {}", count(u64::MAX)))
        );
        if let Some(e) = self.epochs {
            line.push_str(&format!("; {e:.2} epochs of the training tokens by step {}", self.steps));
        }
        out.push(line);
        out.push(format!("schedule: {}", self.schedule));
        if let Some(n) = &self.schedule_unfinished {
            out.push(format!("  note: {n}"));
        }
        out.push(format!("evaluations: {}", self.evaluations));
        out.push(format!("checkpoints: {}", self.checkpoints));
        out.push(format!(
            "memory plan: {} (`{}` explains it; the run checks it against the adapter when it opens)",
            size(self.memory_total),
            self.info_command
        ));
        out.push(format!("settings (config.toml):\n{}", self.settings.trim_end()));
        out.join("\n") + "\n"
    }
}
