//! Training configuration: every hyper-parameter has a default from the preset and can be set
//! from a TOML file (`--config run.toml`) or flags (`--set key=value`). Unknown keys, wrong
//! types and out-of-range values are errors that name the key.

use serde::{Deserialize, Serialize};

use crate::model::{ConfigError, ModelConfig, Precision, Variant};

mod settings;
pub(crate) use settings::edit_distance;
pub use settings::plain_serde_message;

/// The optimisation and data settings of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Sequences per micro-batch.
    pub batch_size: usize,
    /// Tokens per sequence (≤ model.max_seq_len).
    pub seq_len: usize,
    /// Micro-batches accumulated into one optimizer step (global batch = batch_size × grad_accum).
    pub grad_accum: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Learning rate at the end of the cosine decay.
    pub min_lr: f64,
    /// Linear warm-up steps from 0 to `lr`.
    pub warmup_steps: usize,
    /// Step at which the cosine reaches `min_lr` (the schedule's length; `--steps` only says
    /// where this invocation stops).
    pub decay_steps: usize,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Max global gradient norm (0 = no clipping).
    pub grad_clip: f64,
    /// Evaluate every this many steps (0 = only at the end).
    pub eval_every: usize,
    /// Batches of validation windows per evaluation during training (the first ones: a fixed
    /// subset); the final evaluation covers the whole validation split.
    pub eval_batches: usize,
    /// Tokens an evaluation covers, the final one's and those during training, in whole windows
    /// of `seq_len` (rounded up; 0 = the whole validation split).
    #[serde(default)]
    pub val_max_tokens: usize,
    /// Write a checkpoint every this many steps (0 = only at the end).
    pub checkpoint_every: usize,
    /// Checkpoints kept as `checkpoints/step-NNNNNNNN/` besides the run folder's own (the newest
    /// N; 0 = none). The best by validation loss is kept as `checkpoints/best/` either way.
    #[serde(default = "default_checkpoint_keep")]
    pub checkpoint_keep: usize,
    /// Print/log every this many steps.
    pub log_every: usize,
    /// Fraction of the corpus held out for validation.
    pub val_fraction: f64,
    /// Seed of the initialisation and of the batch order.
    pub seed: u64,
    /// Skip (instead of stopping at) a step whose loss or gradients are not finite.
    pub skip_nonfinite: bool,
    /// Stop training after this many evaluations in a row without a validation loss below the
    /// best so far (0 = never): the run then ends as at its last step (checkpoint, final
    /// evaluation). May change when a run resumes.
    #[serde(default)]
    pub early_stop: usize,
    /// Store the expanded states in half precision (`--f16-state`; [`crate::model::Model::set_state_f16`]).
    #[serde(default)]
    pub state_f16: bool,
    /// The arithmetic of the linear layers (`--precision`): `f32`, or `f16` (f16 operands with
    /// f32 accumulation, dynamic loss scaling, and f16 states where the variant has them;
    /// [`crate::model::Precision`]).
    #[serde(default)]
    pub precision: Precision,
    /// Rebuild cheap activations in the backward instead of keeping one per layer
    /// (`--recompute`; [`crate::model::Model::set_recompute`]): the same results in less memory,
    /// for one more elementwise or norm pass per sublayer. May change when a run resumes.
    #[serde(default)]
    pub recompute: bool,
    /// Compute the LM head in slices of this many rows (`--head-chunk`; 0 = all rows at once;
    /// [`crate::model::Model::set_head_chunk`]): one slice's logits instead of the batch's, the
    /// same losses, the embedding's gradient summed slice by slice. May be set when a run
    /// resumes.
    #[serde(default)]
    pub head_chunk: usize,
    /// The loss scale an f16 run starts from (a power of two): halved after every step whose
    /// gradients overflow (the step is skipped), doubled after `loss_scale_growth` clean steps.
    #[serde(default = "default_loss_scale")]
    pub loss_scale: f64,
    /// Clean steps after which an f16 run doubles its loss scale.
    #[serde(default = "default_loss_scale_growth")]
    pub loss_scale_growth: usize,
}

fn default_checkpoint_keep() -> usize {
    2
}

/// The loss scale an f16 run starts from unless `train.loss_scale` says otherwise.
pub const DEFAULT_LOSS_SCALE: f64 = 65536.0;

fn default_loss_scale() -> f64 {
    DEFAULT_LOSS_SCALE
}

fn default_loss_scale_growth() -> usize {
    2000
}

/// A tenth of `lr` (the default `train.min_lr`) as the decimal number it is meant to be, to 15
/// significant digits: `3e-3 / 10.0` is 0.00030000000000000003 in binary, which config.toml and
/// the messages showed.
fn tenth(lr: f64) -> f64 {
    let t = lr / 10.0;
    format!("{t:.14e}").parse().unwrap_or(t)
}

impl TrainConfig {
    /// The training settings of a named preset ([`crate::presets::PRESETS`]; the paper's
    /// optimizer settings, schedule lengths scaled to the preset); a name that is not a preset
    /// gets the paper-scale ones (B 8, T 1024, lr 1e-3, 2000 warm-up, 100,000 decay steps).
    pub fn preset(name: &str) -> Self {
        let (batch_size, seq_len, lr, warmup_steps, decay_steps) = match crate::presets::find(name) {
            Some(p) => (p.batch_size, p.seq_len, p.lr, p.warmup_steps, p.decay_steps),
            None => (8, 1024, 1e-3, 2000, 100_000),
        };
        TrainConfig {
            batch_size,
            seq_len,
            grad_accum: 1,
            lr,
            min_lr: tenth(lr),
            warmup_steps,
            decay_steps,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            grad_clip: 1.0,
            eval_every: 100,
            eval_batches: 8,
            val_max_tokens: 0,
            checkpoint_every: 500,
            checkpoint_keep: 2,
            log_every: 10,
            val_fraction: 0.1,
            seed: 1337,
            skip_nonfinite: false,
            early_stop: 0,
            state_f16: false,
            precision: Precision::F32,
            recompute: false,
            head_chunk: 0,
            loss_scale: default_loss_scale(),
            loss_scale_growth: default_loss_scale_growth(),
        }
    }

    /// Checks every field (and those that depend on the model's); the error names the full key,
    /// the value, the allowed range and the remedy.
    pub fn validate(&self, model: &ModelConfig) -> Result<(), ConfigError> {
        let e = |f: &str, v: &dyn std::fmt::Display, expected: String| {
            Err(ConfigError::new(&format!("train.{f}"), v, expected))
        };
        for (f, v, what) in [
            ("batch_size", self.batch_size, "sequences per micro-batch"),
            ("seq_len", self.seq_len, "tokens per sequence"),
            ("grad_accum", self.grad_accum, "micro-batches per step"),
            ("eval_batches", self.eval_batches, "validation batches per evaluation"),
            ("log_every", self.log_every, "steps between log lines"),
        ] {
            if v == 0 || v > 1 << 24 {
                return e(f, &v, format!("expected an integer in 1 ..= 2^24 ({what})"));
            }
        }
        if self.seq_len > model.max_seq_len {
            return Err(ConfigError::new(
                "train.seq_len",
                self.seq_len,
                format!("at most model.max_seq_len = {}", model.max_seq_len),
            )
            .remedy(format!(
                "lower it (--set train.seq_len={}) or raise the model's context (--set model.max_seq_len={})",
                model.max_seq_len, self.seq_len
            )));
        }
        let tokens = self.batch_size as u128 * self.seq_len as u128;
        if tokens > u32::MAX as u128 {
            return Err(ConfigError::new(
                "train.batch_size",
                self.batch_size,
                format!("batch_size × seq_len at most 2^32 − 1 tokens, got {tokens}"),
            )
            .remedy("lower train.batch_size and raise train.grad_accum (same global batch, less memory)"));
        }
        // The activations of a micro-batch, over-estimated per token (the states of every layer,
        // each sublayer's saves, the attention's scores of a whole row, the logits, the
        // scratches): beyond 2^60 bytes no device holds them, and the memory plan's own sums
        // (u64, in bytes) would overflow (`ddl train --dry-run` and `ddl info --preset --set`
        // panicked at 2,048 × 1,024 × d_v 1,024 over 2^24 × 64 tokens).
        let (d, m, l) = (model.d_model as u128, model.m() as u128, model.n_layers as u128);
        let (dq, h, f, hk) =
            (model.qk_dim() as u128, model.n_heads as u128, model.mlp_stride() as u128, model.k_mlp_hidden as u128);
        let per_token = (2 * l + 3) * d * m
            + l * (8 * dq + 4 * h + 4 * f + 2 * (6 * d + 2 * hk + 2 * m + 4))
            + h * self.seq_len as u128
            + model.vocab_size as u128
            + 16 * (d + dq + f + hk + 1);
        let bytes = 4 * tokens * per_token;
        if bytes > 1u128 << 60 {
            return Err(ConfigError::new(
                "train.batch_size",
                self.batch_size,
                format!(
                    "{} × {} tokens of this model would need about {:.1e} bytes of activations, more than 2^60 \
                     (an exbibyte)",
                    self.batch_size, self.seq_len, bytes as f64
                ),
            )
            .remedy("lower train.batch_size (or train.seq_len), or make the model smaller"));
        }
        if self.early_stop > 1 << 20 {
            return e(
                "early_stop",
                &self.early_stop,
                "expected an integer in 0 ..= 2^20 (evaluations without improvement before stopping; 0 = never)".into(),
            );
        }
        if self.early_stop > 0 && self.eval_every == 0 {
            return Err(ConfigError::new(
                "train.early_stop",
                self.early_stop,
                "evaluations during training to count, but train.eval_every is 0".to_string(),
            )
            .remedy("set train.eval_every (e.g. --set train.eval_every=100), or leave train.early_stop at 0"));
        }
        if self.checkpoint_keep > 1 << 20 {
            return e(
                "checkpoint_keep",
                &self.checkpoint_keep,
                "expected an integer in 0 ..= 2^20 (checkpoints kept besides the latest; 0 = none)".into(),
            );
        }
        if !(self.lr >= 0.0 && self.lr.is_finite()) {
            return e("lr", &self.lr, "expected a finite number ≥ 0 (the peak learning rate)".into());
        }
        if !(self.min_lr >= 0.0 && self.min_lr <= self.lr) {
            return e("min_lr", &self.min_lr, format!("expected a number in [0, train.lr = {}]", self.lr));
        }
        for (f, v) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&v) {
                return e(f, &v, "expected a number in [0, 1)".into());
            }
        }
        if !(self.eps > 0.0 && self.eps.is_finite()) {
            return e("eps", &self.eps, "expected a finite number > 0".into());
        }
        if !(self.weight_decay >= 0.0 && self.weight_decay.is_finite()) {
            return e("weight_decay", &self.weight_decay, "expected a finite number ≥ 0".into());
        }
        if !(self.grad_clip >= 0.0 && self.grad_clip.is_finite()) {
            return e("grad_clip", &self.grad_clip, "expected a finite number ≥ 0 (0 = no clipping)".into());
        }
        if !(self.val_fraction > 0.0 && self.val_fraction < 1.0) {
            return e("val_fraction", &self.val_fraction, "expected a number in (0, 1)".into());
        }
        if self.decay_steps < self.warmup_steps {
            return Err(ConfigError::new(
                "train.decay_steps",
                self.decay_steps,
                format!("at least train.warmup_steps = {}", self.warmup_steps),
            )
            .remedy(format!("raise it (--set train.decay_steps={}) or lower train.warmup_steps", self.warmup_steps)));
        }
        let pow2 = self.loss_scale.is_finite() && self.loss_scale > 0.0 && self.loss_scale.log2().fract() == 0.0;
        if !(pow2 && (-24.0..=100.0).contains(&self.loss_scale.log2())) {
            return e(
                "loss_scale",
                &self.loss_scale,
                "expected a power of two in 2^-24 ..= 2^100 (the f16 run's first loss scale; 65536 is usual)".into(),
            );
        }
        if self.loss_scale_growth == 0 || self.loss_scale_growth > 1 << 30 {
            return e(
                "loss_scale_growth",
                &self.loss_scale_growth,
                "expected an integer in 1 ..= 2^30 (clean steps before the loss scale doubles)".into(),
            );
        }
        if self.state_f16
            && let Err(why) = model.f16_state_support()
        {
            return Err(ConfigError::new("train.state_f16", true, why)
                .remedy("drop --f16-state (or set train.state_f16 = false) for this model"));
        }
        Ok(())
    }

    /// Whether the expanded states are stored in f16: `--f16-state`, or `--precision f16` where
    /// the variant has f16 states.
    pub fn states_f16(&self, model: &ModelConfig) -> bool {
        self.state_f16 || (self.precision == Precision::F16 && model.f16_state_support().is_ok())
    }

    /// How the run's training program stores its activations (the memory plan's terms).
    pub fn storage(&self, model: &ModelConfig) -> crate::model::Storage {
        crate::model::Storage {
            state_f16: self.states_f16(model),
            precision: self.precision,
            recompute: self.recompute,
            head_chunk: self.head_chunk,
            // The device's attention form decides: [`crate::model::Storage::on`].
            whole_attention: false,
        }
    }

    /// Learning rate at `step` (0-based): linear warm-up, then cosine to `min_lr` at
    /// `decay_steps`, then `min_lr`.
    pub fn lr_at(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        if step >= self.decay_steps {
            return self.min_lr;
        }
        let span = (self.decay_steps - self.warmup_steps).max(1) as f64;
        let r = (step - self.warmup_steps) as f64 / span;
        self.min_lr + 0.5 * (1.0 + (std::f64::consts::PI * r).cos()) * (self.lr - self.min_lr)
    }

    /// The tokens one optimizer step sees: the global batch, batch_size × seq_len × grad_accum.
    pub fn tokens_per_step(&self) -> u64 {
        self.batch_size as u64 * self.seq_len as u64 * self.grad_accum as u64
    }

    /// The schedule as `ddl train --dry-run` says it: "lr 0.003, warm-up 50 steps, cosine to 0.0003
    /// at step 2000 (train.decay_steps)".
    pub fn schedule_words(&self) -> String {
        format!(
            "lr {}, warm-up {} steps, cosine to {} at step {} (train.decay_steps)",
            self.lr, self.warmup_steps, self.min_lr, self.decay_steps
        )
    }

    /// What a run that ends at step `steps` leaves of its schedule, when it does not reach the
    /// schedule's end: the rate at its last step (and that its warm-up is not done), with the
    /// setting that fits the schedule to the run; `None` when the run reaches `decay_steps`.
    pub fn unfinished_schedule(&self, steps: usize) -> Option<String> {
        if steps == 0 || steps >= self.decay_steps {
            return None;
        }
        let end = self.lr_at(steps - 1);
        let (warm, fit) = if steps < self.warmup_steps {
            (
                format!(" and inside its warm-up ({} steps: the peak {} is never reached)", self.warmup_steps, self.lr),
                format!(" --set train.warmup_steps={}", (steps / 10).max(1)),
            )
        } else {
            (String::new(), String::new())
        };
        Some(format!(
            "the learning-rate schedule runs to step {} (train.decay_steps), past this run's {steps} steps{warm}: \
             its last step trains at {end:.2e}, not at min_lr {}; as intended if you will continue it to step {} \
             (--resume with --steps), else --set train.decay_steps={steps}{fit} fits the schedule to the run",
            self.decay_steps, self.min_lr, self.decay_steps
        ))
    }
}

fn default_tokenizer() -> String {
    "char".to_string()
}

fn default_data_format() -> String {
    "llmc".to_string()
}

/// Everything a run is made of, as written to `DIR/config.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub preset: String,
    /// Text file or directory of .txt files.
    pub corpus: String,
    /// `"char"` (the corpus's characters) or the path of a tokenizer.json (`ddl tokenizer train`).
    #[serde(default = "default_tokenizer")]
    pub tokenizer: String,
    /// Token shards to train on instead of the corpus: a folder (`ddl data prepare`'s, or llm.c's
    /// downloaded shards) or a glob; empty = the corpus.
    #[serde(default)]
    pub data: String,
    /// How `data` stores tokens: `llmc` (llm.c's shards) or `raw-u16` (headerless uint16).
    #[serde(default = "default_data_format")]
    pub data_format: String,
    /// The checkpoint folder whose parameters a new run starts from (`ddl train --init-from`),
    /// with its model and tokenizer, instead of the spec's initialisation; empty = the spec's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub init_from: String,
    /// The step `init_from`'s checkpoint was at when the run took its parameters (recorded by
    /// the run, not a setting: that folder may train on since); `None` = no `init_from`, or a run
    /// of a ddl that did not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_from_step: Option<usize>,
    pub model: ModelConfig,
    pub train: TrainConfig,
}

/// The `ddl info --preset` command that prints the memory plan of training `model` with `train`'s
/// batch, length and storage on `preset`'s defaults: the preset and variant, a `--set` for each
/// model setting that differs from the preset's (d_model first and d_v second, so that the
/// widths and K_c that follow them are the ones given after), `--batch`, `--seq` and the storage
/// flags. `ddl train --dry-run` and `ddl info --checkpoint` name it beside their plan's total.
pub fn info_command(preset: &str, model: &ModelConfig, train: &TrainConfig) -> String {
    let mut cmd = format!("ddl info --preset {preset} --variant {}", model.variant);
    let plain = ModelConfig::preset(preset, model.variant).ok();
    let (Ok(serde_json::Value::Object(now)), Some(Ok(serde_json::Value::Object(was)))) =
        (serde_json::to_value(model), plain.as_ref().map(serde_json::to_value))
    else {
        return format!("ddl info --preset {preset}");
    };
    let mut keys: Vec<&String> = now.keys().filter(|k| k.as_str() != "variant" && now.get(*k) != was.get(*k)).collect();
    keys.sort_by_key(|k| (k.as_str() != "d_model", k.as_str() != "d_v", k.as_str().to_string()));
    for k in keys {
        let v = match &now[k] {
            serde_json::Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        cmd.push_str(&format!(" --set model.{k}={v}"));
    }
    cmd.push_str(&format!(" --batch {} --seq {}", train.batch_size, train.seq_len));
    if train.state_f16 {
        cmd.push_str(" --f16-state");
    }
    if train.precision == Precision::F16 {
        cmd.push_str(" --precision f16");
    }
    if train.recompute {
        cmd.push_str(" --recompute");
    }
    if train.head_chunk > 0 {
        cmd.push_str(&format!(" --head-chunk {}", train.head_chunk));
    }
    cmd
}

impl RunConfig {
    /// Makes the corpus and tokenizer paths absolute where they name files that exist relative
    /// to the current directory, so that the run folder's `config.toml` still finds them from
    /// any other directory (`ddl eval`, `--resume`). The default corpus and `char` stay as they
    /// are (the default corpus is in the binary).
    pub fn absolute_paths(&mut self) {
        let abs = |p: &str| -> Option<String> {
            let path = std::path::Path::new(p);
            if path.is_absolute() || !path.exists() {
                return None;
            }
            std::fs::canonicalize(path).ok().map(|a| a.display().to_string())
        };
        if self.corpus != super::data::DEFAULT_CORPUS
            && let Some(a) = abs(&self.corpus)
        {
            self.corpus = a;
        }
        if self.tokenizer != "char"
            && let Some(a) = abs(&self.tokenizer)
        {
            self.tokenizer = a;
        }
        if !self.data.is_empty() {
            let d = std::path::Path::new(&self.data);
            if let Some(a) = abs(&self.data) {
                self.data = a;
            } else if !d.is_absolute()
                && let (Some(parent), Some(name)) = (d.parent(), d.file_name())
                && let Some(pa) = abs(&parent.to_string_lossy()).or_else(|| {
                    parent
                        .as_os_str()
                        .is_empty()
                        .then(|| std::env::current_dir().ok())
                        .flatten()
                        .map(|c| c.display().to_string())
                })
            {
                // A glob: make its folder absolute.
                self.data = std::path::Path::new(&pa).join(name).display().to_string();
            }
        }
    }

    /// The run's `config.toml` as training writes it (and `--dry-run` shows it): a `--data` run
    /// reads no corpus, so its file names none (the default it carries would read as if the run
    /// had trained on it).
    pub fn settings_toml(&self) -> Result<String, toml::ser::Error> {
        let mut run = self.clone();
        if !run.data.is_empty() {
            run.corpus.clear();
        }
        let text = toml::to_string(&run)?;
        // With `data`, `char` (the default) means the shards' own tokenizer: said beside it (a
        // run on BPE shards read `tokenizer = "char"` in its config.toml, though it trains a BPE).
        if !run.data.is_empty() && run.tokenizer == "char" {
            return Ok(text.replacen(
                "tokenizer = \"char\"\n",
                "tokenizer = \"char\" # with `data`: the shards' own (their meta.json's), which the checkpoint holds\n",
                1,
            ));
        }
        Ok(text)
    }

    /// `dir/config.toml` as settings: `None` when there is no such file (or it cannot be read),
    /// `Some(Err(why))` when it does not parse as a run's settings (an edit gone wrong).
    pub fn read_file(dir: &std::path::Path) -> Option<Result<RunConfig, toml::de::Error>> {
        let text = std::fs::read_to_string(dir.join("config.toml")).ok()?;
        Some(toml::from_str(&text))
    }

    /// The settings `ddl train --resume DIR` continues with: those saved in DIR's checkpoint
    /// (what the run trained with), or for a checkpoint without them `DIR/config.toml`. The
    /// error says what DIR lacks and how to go on.
    pub fn saved(dir: &std::path::Path) -> Result<RunConfig, String> {
        use super::checkpoint::{CheckpointError, MODEL_FILE};
        if dir.exists() && !dir.is_dir() {
            return Err(format!(
                "--resume {}: a file, not a run folder (give a `ddl train --out` folder)",
                dir.display()
            ));
        }
        if !dir.is_dir() {
            return Err(format!("--resume {}: no such folder (give a `ddl train --out` folder)", dir.display()));
        }
        if !dir.join(MODEL_FILE).exists()
            && let Some((pid, host)) = super::lock::holder(dir)
        {
            return Err(format!(
                "--resume {}: a run is training in it now (process {pid} on {host}) and has saved no checkpoint yet; \
                 wait until it ends (or stop it: Ctrl-C saves one) and resume then",
                dir.display()
            ));
        }
        if !dir.join(MODEL_FILE).exists() && dir.join("metrics.jsonl").exists() {
            if let Some(kept) = super::checkpoint::kept_remedy_for(dir, &[]) {
                return Err(format!(
                    "--resume {}: the run has no {MODEL_FILE} (its newest checkpoint is gone), but {kept} \
                     (`--overwrite` would remove the kept checkpoints too)",
                    dir.display(),
                ));
            }
            return Err(format!(
                "--resume {}: the run has no {MODEL_FILE}: it stopped before its first checkpoint \
                 (train.checkpoint_every steps), so there is nothing to continue from; start it again with \
                 `ddl train --out {} --overwrite`",
                dir.display(),
                crate::shell_word(dir)
            ));
        }
        let text = super::checkpoint::saved_run_config(dir).map_err(|e| match e {
            CheckpointError::MissingFile(f)
                if f.ends_with(super::checkpoint::OPTIM_FILE) && dir.join(MODEL_FILE).is_file() =>
            {
                match super::checkpoint::kept_remedy_for(dir, &[]) {
                    // A run's moments file gone: a kept checkpoint continues with its moments.
                    Some(kept) => format!(
                        "--resume {}: the run's checkpoint has a model but no {} (AdamW moments and run state), but \
                         {kept}; or start a new run from the model's parameters (fresh moments) with `ddl train \
                         --init-from {} --out NEW`",
                        dir.display(),
                        super::checkpoint::OPTIM_FILE,
                        crate::shell_word(dir)
                    ),
                    None => format!(
                        "--resume {}: the checkpoint has a model but no {} (AdamW moments and run state): a \
                         model-only checkpoint (e.g. written by scripts/torch_checkpoint.py) cannot be resumed; start \
                         a new run from its parameters with `ddl train --init-from {} --out NEW`",
                        dir.display(),
                        super::checkpoint::OPTIM_FILE,
                        crate::shell_word(dir)
                    ),
                }
            }
            // (A missing model file's message says what the folder is and what to give.)
            CheckpointError::MissingFile(ref f) if f.ends_with(MODEL_FILE) => {
                format!("--resume {}: {e}", dir.display())
            }
            CheckpointError::MissingFile(_) => {
                format!(
                    "--resume {}: {e} (give a `ddl train --out` folder or one of its checkpoints/ folders)",
                    dir.display()
                )
            }
            e => match super::checkpoint::kept_remedy_for(dir, super::checkpoint::suspect_files(&e)) {
                Some(kept) => format!("--resume {}: {e}; {kept}", dir.display()),
                None => e.to_string(),
            },
        })?;
        let (text, from) = if text.is_empty() {
            let path = dir.join("config.toml");
            let t = std::fs::read_to_string(&path)
                .map_err(|e| format!("--resume: reading the run's saved settings {}: {e}", path.display()))?;
            (t, path)
        } else {
            (text, dir.join(super::checkpoint::OPTIM_FILE))
        };
        toml::from_str(&text)
            .map_err(|e| format!("--resume: the run settings saved in {} are invalid: {e}", from.display()))
    }

    /// The settings of `self` that a run resumed with them would change from `saved`, as (key,
    /// saved value, this value): paths compared as a new run stores them, numbers by value,
    /// leaving out those a resume may change (see [`RunConfig::check_resume`]).
    pub fn resume_differences(&self, saved: &RunConfig) -> Result<Vec<(String, String, String)>, String> {
        let mut saved = saved.clone();
        saved.absolute_paths();
        let saved = toml::Table::try_from(&saved).map_err(|e| e.to_string())?;
        // Paths as a new run stores them.
        let mut given = self.clone();
        given.absolute_paths();
        let given = toml::Table::try_from(&given).map_err(|e| e.to_string())?;
        let mut diffs = Vec::new();
        for (k, v) in &given {
            let pairs: Vec<(String, &toml::Value, Option<&toml::Value>)> = match v {
                toml::Value::Table(t) => t
                    .iter()
                    .map(|(k2, v2)| {
                        (format!("{k}.{k2}"), v2, saved.get(k).and_then(|s| s.as_table()).and_then(|s| s.get(k2)))
                    })
                    .collect(),
                v => vec![(k.clone(), v, saved.get(k))],
            };
            for (key, want, have) in pairs {
                // (Settings that change how, not what, a run trains may differ on resuming.)
                if matches!(
                    key.as_str(),
                    "model.vocab_size"
                        | "train.skip_nonfinite"
                        | "train.recompute"
                        | "train.head_chunk"
                        | "train.early_stop"
                ) || have == Some(want)
                {
                    continue;
                }
                // A number written another way (3e-5 given for the 2.9999999999999997e-5 a tenth of
                // 3e-4 saved) is the same setting.
                if let (Some(toml::Value::Float(h)), toml::Value::Float(w)) = (have, want)
                    && (h - w).abs() <= 1e-12 * h.abs().max(w.abs())
                {
                    continue;
                }
                diffs.push((key, have.map(|h| h.to_string()).unwrap_or_else(|| "(unset)".into()), want.to_string()));
            }
        }
        Ok(diffs)
    }

    /// For `ddl train --resume DIR`: fails unless these settings (the saved ones, `saved`, with
    /// the flags given applied) equal `saved` (flags may repeat the saved settings, not change
    /// them: a changed setting would be silently ignored). The error lists every difference and
    /// the remedy. `model.vocab_size` (from the tokenizer) and the settings of how, not what, a
    /// run trains (`train.skip_nonfinite`, `train.recompute`, `train.head_chunk`) and when it stops
    /// (`train.early_stop`) may differ, and
    /// the paths of `corpus` and `data` (the trainer checks the tokens there against `data.json`).
    pub fn check_resume(&self, saved: &RunConfig, out: &std::path::Path) -> Result<(), String> {
        let mut diffs = self.resume_differences(saved)?;
        // Where the data is may change (a corpus moved): the resumed run checks its tokens
        // against the run's data.json.
        diffs.retain(|(k, _, _)| k != "corpus" && k != "data");
        if diffs.is_empty() {
            return Ok(());
        }
        // Another variant brings its own defaults (the baseline's d_v of 0): those are said as
        // following from it, not as settings the user changed.
        let other_model = diffs
            .iter()
            .any(|d| d.0 == "model.variant")
            .then(|| RunConfig::preset(&self.preset, self.model.variant).ok())
            .flatten()
            .and_then(|d| toml::Table::try_from(&d.model).ok());
        let follows = |key: &str, want: &str| {
            let k = key.strip_prefix("model.")?;
            (k != "variant" && other_model.as_ref()?.get(k)?.to_string() == want).then_some(())
        };
        let (derived, diffs): (Vec<_>, Vec<_>) = diffs.into_iter().partition(|(k, _, w)| follows(k, w).is_some());
        // A given lr brings its own minimum (a tenth of it) unless min_lr is given too: said as
        // following from it, not as a setting the user changed.
        let lr_changed = diffs.iter().any(|d| d.0 == "train.lr");
        let (min_lr, diffs): (Vec<_>, Vec<_>) = diffs
            .into_iter()
            .partition(|(k, _, _)| k == "train.min_lr" && lr_changed && self.train.min_lr == tenth(self.train.lr));
        let diffs: Vec<String> = diffs
            .iter()
            .map(|(key, have, want)| {
                let mut line = format!("{key}: saved {have}, given {want}");
                let with = match key.as_str() {
                    "model.variant" => &derived,
                    "train.lr" => &min_lr,
                    _ => return line,
                };
                if !with.is_empty() {
                    let with: Vec<String> = with.iter().map(|(k, h, w)| format!("{k} {h} → {w}")).collect();
                    line += &format!(" (and with it {})", with.join(", "));
                }
                line
            })
            .collect();
        Err(format!(
            "--resume continues '{}' with the settings saved in its checkpoint; the flags given change {} \
             setting(s): {}. Drop those flags to resume (a copy continued with --out keeps the checkpoint's \
             settings too), or start a new run (without --resume) to change them",
            out.display(),
            diffs.len(),
            diffs.join("; ")
        ))
    }

    /// Defaults of a preset and variant; the vocabulary is fixed later by the tokenizer.
    pub fn preset(preset: &str, variant: Variant) -> Result<Self, crate::model::ConfigError> {
        Ok(RunConfig {
            preset: preset.to_string(),
            corpus: super::data::DEFAULT_CORPUS.to_string(),
            tokenizer: default_tokenizer(),
            data: String::new(),
            data_format: default_data_format(),
            init_from: String::new(),
            init_from_step: None,
            model: ModelConfig::preset(preset, variant)?,
            train: TrainConfig::preset(preset),
        })
    }

    pub fn validate(&self) -> Result<(), crate::model::ConfigError> {
        self.model.validate()?;
        // (What `--data-format` refuses, `--set data_format=…` and a --config file do too.)
        if let Err(e) = super::shards::Format::parse(&self.data_format) {
            return Err(crate::model::ConfigError::new("data_format", format!("{:?}", self.data_format), e));
        }
        self.train.validate(&self.model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--resume` of a folder without a checkpoint gives the folder's remedy once (it appended a
    /// second, general one after the message's own).
    #[test]
    fn resuming_a_folder_without_a_checkpoint_gives_one_remedy() {
        let dir = crate::testing::scratch_dir("resume-no-checkpoint");
        let e = RunConfig::saved(&dir).unwrap_err();
        assert_eq!(e.matches("give a").count(), 1, "{e}");
        assert!(e.contains("give a run's folder"), "{e}");
    }

    #[test]
    fn the_settings_table_in_training_md_names_every_key() {
        // docs/TRAINING.md's "Every setting" lists what config.toml holds: a key added without a
        // row there fails here.
        let doc = include_str!("../../../docs/TRAINING.md");
        let table = doc.split("### Every setting").nth(1).expect("the section").split("\n\n|").nth(1).unwrap_or("");
        let table = table.split("\n\n").next().unwrap_or("");
        let mut run = RunConfig::preset("tiny", crate::model::Variant::Ddl).unwrap();
        run.init_from = "x".into();
        run.init_from_step = Some(3);
        let t = toml::Table::try_from(&run).unwrap();
        let mut missing = Vec::new();
        for (k, v) in &t {
            let keys: Vec<String> = match v.as_table() {
                Some(inner) => inner.keys().map(|f| format!("{k}.{f}")).collect(),
                None => vec![k.clone()],
            };
            for key in keys {
                if !table.contains(&format!("`{key}`")) {
                    missing.push(key);
                }
            }
        }
        assert!(missing.is_empty(), "docs/TRAINING.md's settings table lacks {missing:?}");
    }

    /// train.min_lr is a tenth of train.lr unless given: `--set train.lr=3e-4` on the tiny preset
    /// (lr 3e-3) was refused for the preset's min_lr of 3e-4.
    #[test]
    fn a_new_learning_rate_takes_its_minimum_along_unless_given() {
        let mut c = RunConfig::preset("tiny", Variant::Ddl).unwrap();
        c.set("train.lr=3e-4").unwrap();
        assert_eq!(c.train.min_lr, 3e-5);
        c.validate().unwrap();
        c.set("train.min_lr=1e-5").unwrap();
        c.set("train.lr=2e-4").unwrap();
        assert_eq!(c.train.min_lr, 1e-5, "a given minimum stays");
        c.merge_toml("[train]\nlr = 1e-3\nmin_lr = 5e-4\n", "run.toml").unwrap();
        assert_eq!((c.train.lr, c.train.min_lr), (1e-3, 5e-4), "given together");
        // The tenth as written in decimal: 3e-3 / 10 is 0.00030000000000000003 in binary, which
        // config.toml and the messages showed.
        let tiny = RunConfig::preset("tiny", Variant::Ddl).unwrap();
        assert_eq!(tiny.train.lr, 3e-3);
        assert_eq!(tiny.train.min_lr.to_string(), "0.0003");
        assert!(toml::to_string(&tiny).unwrap().contains("min_lr = 0.0003\n"));
        // A config saved with the binary tenth still takes a new lr's minimum along.
        let mut old = tiny.clone();
        old.train.min_lr = 3e-3 / 10.0;
        old.set("train.lr=2e-3").unwrap();
        assert_eq!(old.train.min_lr, 2e-4);
    }

    /// The spec's F = ⌊8d/3⌋ and h_k = max(1, ⌊d/4⌋) follow a new d (they kept the preset's
    /// until session 81), unless given with it or before.
    #[test]
    fn a_new_width_takes_the_mlp_widths_along_unless_given() {
        let mut c = RunConfig::preset("tiny", Variant::DdlVmap).unwrap();
        assert_eq!((c.model.d_model, c.model.mlp_hidden, c.model.k_mlp_hidden), (128, 341, 32));
        c.set("model.d_model=64").unwrap();
        assert_eq!((c.model.mlp_hidden, c.model.k_mlp_hidden), (170, 16));
        c.validate().unwrap();
        c.set("model.d_model=3").unwrap();
        assert_eq!((c.model.mlp_hidden, c.model.k_mlp_hidden), (8, 1), "h_k at least 1");
        // Given, earlier or together with d: they stay. (As train.min_lr: "given earlier" is a
        // value other than the rule's for the d of then; the rule's own value follows.)
        let mut c = RunConfig::preset("tiny", Variant::DdlVmap).unwrap();
        c.set("model.mlp_hidden=300").unwrap();
        c.set("model.d_model=64").unwrap();
        assert_eq!((c.model.mlp_hidden, c.model.k_mlp_hidden), (300, 16));
        c.set("model.mlp_hidden=341").unwrap();
        assert_eq!(c.model.mlp_hidden, 341, "after d: as given");
        let mut c = RunConfig::preset("tiny", Variant::DdlVmap).unwrap();
        c.merge_toml("[model]\nd_model = 64\nk_mlp_hidden = 32\n", "spec.toml").unwrap();
        assert_eq!((c.model.mlp_hidden, c.model.k_mlp_hidden), (170, 32));
        // A saved run's config.toml gives both: read back as written.
        let mut saved = RunConfig::preset("tiny", Variant::Ddl).unwrap();
        saved.merge_toml(&toml::to_string(&c).unwrap(), "config.toml").unwrap();
        assert_eq!(saved.model, c.model);
        // Every preset's widths are the rule's (so following changes no preset).
        for p in crate::presets::PRESETS {
            let m = RunConfig::preset(p.name, Variant::DdlVmap).unwrap().model;
            assert_eq!((m.mlp_hidden, m.k_mlp_hidden), (m.d_model * 8 / 3, (m.d_model / 4).max(1)), "{}", p.name);
        }
    }

    #[test]
    fn a_changed_variant_takes_its_own_defaults_unless_they_were_given() {
        // --config with `variant = "baseline"`, then --set model.variant=ddl: d_v was 0.
        let mut c = RunConfig::preset("tiny", Variant::Baseline).unwrap();
        c.set("model.variant=ddl").unwrap();
        assert_eq!(c.model, RunConfig::preset("tiny", Variant::Ddl).unwrap().model);
        c.validate().unwrap();
        let mut c = RunConfig::preset("tiny", Variant::Ddl).unwrap();
        c.set("model.variant=ddl_vmap").unwrap();
        assert_eq!(c.model, RunConfig::preset("tiny", Variant::DdlVmap).unwrap().model);
        c.set("model.variant=ddl_ec").unwrap();
        assert_eq!(c.model.state_kernel, c.model.d_v, "value axis: K_c = d_v");
        // Given values stay, whether earlier or together with the variant.
        let mut c = RunConfig::preset("tiny", Variant::Ddl).unwrap();
        c.set("model.d_v=2").unwrap();
        c.set("model.variant=ddl_vmap").unwrap();
        assert_eq!((c.model.d_v, c.model.v_act), (2, crate::model::VActName::Linear));
        let mut c = RunConfig::preset("tiny", Variant::Baseline).unwrap();
        c.merge_toml("[model]\nvariant = \"ddl\"\nd_v = 3\n", "t").unwrap();
        assert_eq!(c.model.d_v, 3);
    }

    #[test]
    fn f16_states_are_refused_for_variants_and_shapes_without_them() {
        let mut c = RunConfig::preset("tiny", Variant::Ddl).unwrap();
        c.set("train.state_f16=true").unwrap();
        c.validate().unwrap();
        let mut b = RunConfig::preset("tiny", Variant::Baseline).unwrap();
        b.set("train.state_f16=true").unwrap();
        let e = b.validate().unwrap_err().to_string();
        assert!(e.contains("train.state_f16") && e.contains("baseline"), "{e}");
        c.set("model.d_v=2").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("train.state_f16") && e.contains("d_v = 4, got 2"), "{e}");
        // Older run configs without the key still load, as f32 states.
        let mut t = toml::Value::try_from(RunConfig::preset("tiny", Variant::Ddl).unwrap()).unwrap();
        t["train"].as_table_mut().unwrap().remove("state_f16");
        let back: RunConfig = t.try_into().unwrap();
        assert!(!back.train.state_f16);
    }

    #[test]
    fn set_and_toml_override_defaults_and_reject_unknown_keys_and_wrong_types() {
        let mut c = RunConfig::preset("tiny", Variant::Ddl).unwrap();
        c.set("lr=3e-4").unwrap();
        c.set("model.d_v=2").unwrap();
        c.set("train.seed=7").unwrap();
        assert_eq!((c.train.lr, c.model.d_v, c.train.seed), (3e-4, 2, 7));
        assert!(c.set("nope=1").unwrap_err().contains("unknown key 'nope'"));
        let e = c.set("train.steps=5").unwrap_err();
        assert!(
            e.contains("unknown key 'train.steps'") && e.contains("--steps N") && e.contains("warmup_steps"),
            "{e}"
        );
        let e = c.set("model.dv=2").unwrap_err();
        assert!(e.contains("did you mean 'model.d_v'?"), "{e}");
        let e = c.set("lrr=2").unwrap_err();
        assert!(e.contains("did you mean 'train.lr'?") && e.contains("model.d_v, "), "{e}");
        let e = c.set("train.batch_size=\"x\"").unwrap_err();
        assert!(e.contains("train.batch_size") && e.contains("takes a whole number"), "{e}");
        assert!(c.set("=3").unwrap_err().contains("with a key"));
        assert!(c.set("train.lr=1e400").unwrap_err().contains("too large for a number"));
        let e = c.merge_toml("lr = 0.1\n", "run.toml").unwrap_err();
        assert!(e.contains("lr goes under [train]"), "{e}");
        let e = c.set("train.lr=abc").unwrap_err();
        assert!(e.contains("train.lr takes a number, e.g. its current value 0.0003"), "{e}");
        c.merge_toml("[train]\nsteps_typo = 3\n", "run.toml").unwrap_err();
        // An experiment's spec is pointed to `ddl experiment` (it said "unknown key 'beta_batches'").
        let spec = "preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = 5\nbeta_batches = 2\n";
        let e = c.clone().merge_toml(spec, "exp.toml").unwrap_err();
        assert!(e.contains("exp.toml is an experiment spec") && e.contains("ddl experiment --spec exp.toml"), "{e}");
        // `[[train]]` for `[train]` is said as such (it read "expected a whole number ≥ 0").
        let e = c.clone().merge_toml("[[train]]\nlr = 1.0\n", "run.toml").unwrap_err();
        assert!(e.contains("run.toml: [[train]] is an array of tables") && e.contains("write [train]"), "{e}");
        c.merge_toml("corpus = \"a.txt\"\n[train]\nwarmup_steps = 3\n", "run.toml").unwrap();
        assert_eq!((c.corpus.as_str(), c.train.warmup_steps), ("a.txt", 3));
    }

    /// Every out-of-range setting names its full key, the value given, the allowed range and the
    /// remedy (the CLI side, nothing left behind: tests/reliability.rs).
    #[test]
    fn out_of_range_settings_name_key_value_range_and_remedy() {
        let cases: &[(Variant, &str, &str, &str)] = &[
            (Variant::Ddl, "model.d_v=0", "model.d_v = 0", "1 ..= 1024"),
            (Variant::Ddl, "model.d_v=5000", "model.d_v = 5000", "1 ..= 1024"),
            (Variant::DdlV1, "model.d_v=3", "model.d_v = 3", "has d_v = 1"),
            (Variant::Ddl, "model.head_dim=0", "model.head_dim = 0", "1 ..= 16384"),
            (Variant::Ddl, "model.head_dim=7", "model.head_dim = 7", "even"),
            (Variant::Ddl, "model.state_kernel=0", "model.state_kernel = 0", "1 ..= 4096"),
            (Variant::DdlEc, "model.embed_kernel=0", "model.embed_kernel = 0", "1 ..= 4096"),
            (Variant::DdlCc, "model.state_kernel=3", "model.state_kernel = 3", "K_c = d_v = 4"),
            (Variant::DdlVmap, "model.k_mlp_hidden=0", "model.k_mlp_hidden = 0", "1 ..= 2^20"),
            (Variant::Ddl, "model.n_layers=0", "model.n_layers = 0", "1 ..= 4096"),
            (Variant::Ddl, "model.beta_init=2.5", "model.beta_init = 2.5", "[0, 2]"),
            (Variant::Ddl, "model.k_eps=0", "model.k_eps = 0", "> 0"),
            (Variant::Ddl, "model.label_smoothing=1", "model.label_smoothing = 1", "[0, 1)"),
            (Variant::Ddl, "train.batch_size=0", "train.batch_size = 0", "1 ..= 2^24"),
            (Variant::Ddl, "train.seq_len=100000", "train.seq_len = 100000", "model.max_seq_len"),
            (Variant::Ddl, "train.lr=-1", "train.lr = -1", "≥ 0"),
            (Variant::Ddl, "train.beta2=1", "train.beta2 = 1", "[0, 1)"),
            (Variant::Ddl, "train.val_fraction=0", "train.val_fraction = 0", "(0, 1)"),
            (Variant::Ddl, "train.decay_steps=1", "train.decay_steps = 1", "warmup_steps"),
            (Variant::Ddl, "train.grad_accum=0", "train.grad_accum = 0", "1 ..= 2^24"),
        ];
        for &(variant, kv, head, range) in cases {
            let mut c = RunConfig::preset("tiny", variant).unwrap();
            c.set(kv).unwrap();
            let e = c.validate().unwrap_err();
            let text = e.to_string();
            assert!(text.starts_with(head), "{kv}: {text}");
            assert!(e.expected.contains(range), "{kv}: {text}");
            let key = kv.split('=').next().unwrap();
            assert!(e.remedy.contains(key) || e.remedy.contains("drop"), "{kv}: no remedy naming {key}: {text}");
        }
    }

    #[test]
    fn a_value_axis_compressor_takes_its_kernel_from_d_v_unless_both_are_given() {
        let mut c = RunConfig::preset("tiny", Variant::DdlCc).unwrap();
        c.set("model.d_v=9").unwrap();
        assert_eq!(c.model.state_kernel, 9);
        c.validate().unwrap();
        c.merge_toml("[model]\nd_v = 6\nstate_kernel = 5\n", "run.toml").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("K_c = d_v = 6"));
        // The token-axis compressor's K_s is independent of d_v.
        let mut t = RunConfig::preset("tiny", Variant::Ddl).unwrap();
        t.set("model.d_v=9").unwrap();
        assert_eq!(t.model.state_kernel, 4);
    }

    #[test]
    fn the_tokenizer_defaults_to_char_and_older_config_files_without_it_still_load() {
        let mut c = RunConfig::preset("tiny", Variant::Ddl).unwrap();
        assert_eq!(c.tokenizer, "char");
        let mut table = toml::Table::try_from(&c).unwrap();
        table.remove("tokenizer");
        let old: RunConfig = toml::from_str(&toml::to_string(&table).unwrap()).unwrap();
        assert_eq!(old, c);
        c.set("tokenizer=runs/tok/tokenizer.json").unwrap();
        assert_eq!(c.tokenizer, "runs/tok/tokenizer.json");
        c.merge_toml("tokenizer = \"char\"\n", "run.toml").unwrap();
        assert_eq!(c.tokenizer, "char");
        // With --data, config.toml says beside `char` that it means the shards' own tokenizer,
        // and reads back the same; a corpus run's says nothing more.
        assert!(!c.settings_toml().unwrap().contains('#'));
        c.data = "shards".into();
        let text = c.settings_toml().unwrap();
        assert!(text.contains("tokenizer = \"char\" # with `data`: the shards' own"), "{text}");
        let back: RunConfig = toml::from_str(&text).unwrap();
        assert_eq!(back, RunConfig { corpus: String::new(), ..c });
    }

    /// A run that stops before its schedule's end is said with the rate it ends at and the
    /// setting that fits the schedule to it; inside the warm-up, that too; one that reaches
    /// decay_steps says nothing.
    #[test]
    fn an_unfinished_schedule_is_said_with_its_remedy() {
        let t =
            TrainConfig { lr: 3e-3, min_lr: 3e-4, warmup_steps: 50, decay_steps: 2000, ..TrainConfig::preset("tiny") };
        assert_eq!(t.unfinished_schedule(2000), None);
        assert_eq!(t.unfinished_schedule(5000), None);
        let n = t.unfinished_schedule(300).unwrap();
        assert!(n.contains("runs to step 2000") && n.contains("past this run's 300 steps"), "{n}");
        assert!(n.contains(&format!("{:.2e}", t.lr_at(299))) && n.contains("--set train.decay_steps=300 fits"), "{n}");
        assert!(!n.contains("warm-up") && !n.contains("warmup_steps"), "{n}");
        let n = t.unfinished_schedule(30).unwrap();
        assert!(n.contains("inside its warm-up (50 steps") && n.contains("--set train.warmup_steps=3"), "{n}");
        assert!(n.contains(&format!("{:.2e}", 3e-3 * 30.0 / 50.0)), "{n}");
        assert!(t.schedule_words().contains("warm-up 50 steps, cosine to 0.0003 at step 2000"));
    }

    #[test]
    fn schedule_warms_up_then_decays_by_cosine_to_the_floor() {
        let mut t = TrainConfig::preset("tiny");
        t.lr = 1.0;
        t.min_lr = 0.1;
        t.warmup_steps = 10;
        t.decay_steps = 110;
        assert!((t.lr_at(0) - 0.1).abs() < 1e-12);
        assert!((t.lr_at(9) - 1.0).abs() < 1e-12);
        assert!((t.lr_at(60) - 0.55).abs() < 1e-12);
        assert!((t.lr_at(110) - 0.1).abs() < 1e-12 && (t.lr_at(10_000) - 0.1).abs() < 1e-12);
        assert!(t.lr_at(30) > t.lr_at(31));
    }
}
