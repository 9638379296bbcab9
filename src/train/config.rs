//! Training configuration: every hyper-parameter has a default from the preset and can be set
//! from a TOML file (`--config run.toml`) or flags (`--set key=value`). Unknown keys, wrong
//! types and out-of-range values are errors that name the key.

use serde::{Deserialize, Serialize};

use crate::model::{ModelConfig, Variant};

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
    /// Validation batches per evaluation (a fixed set).
    pub eval_batches: usize,
    /// Write a checkpoint every this many steps (0 = only at the end).
    pub checkpoint_every: usize,
    /// Print/log every this many steps.
    pub log_every: usize,
    /// Fraction of the corpus held out for validation.
    pub val_fraction: f64,
    /// Seed of the initialisation and of the batch order.
    pub seed: u64,
    /// Skip (instead of stopping at) a step whose loss or gradients are not finite.
    pub skip_nonfinite: bool,
    /// Store the expanded states in half precision (`--f16-state`; [`crate::model::Model::set_state_f16`]).
    #[serde(default)]
    pub state_f16: bool,
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
            min_lr: lr / 10.0,
            warmup_steps,
            decay_steps,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            grad_clip: 1.0,
            eval_every: 100,
            eval_batches: 8,
            checkpoint_every: 500,
            log_every: 10,
            val_fraction: 0.1,
            seed: 1337,
            skip_nonfinite: false,
            state_f16: false,
        }
    }

    pub fn validate(&self, model: &ModelConfig) -> Result<(), crate::model::ConfigError> {
        let e = |f: &str, m: String| Err(crate::model::ConfigError { field: format!("train.{f}"), msg: m });
        for (f, v) in [
            ("batch_size", self.batch_size),
            ("seq_len", self.seq_len),
            ("grad_accum", self.grad_accum),
            ("eval_batches", self.eval_batches),
            ("log_every", self.log_every),
        ] {
            if v == 0 {
                return e(f, "must be at least 1".into());
            }
        }
        if self.seq_len > model.max_seq_len {
            return e("seq_len", format!("{} exceeds model.max_seq_len {}", self.seq_len, model.max_seq_len));
        }
        if !(self.lr >= 0.0 && self.lr.is_finite()) {
            return e("lr", format!("must be ≥ 0, got {}", self.lr));
        }
        if !(self.min_lr >= 0.0 && self.min_lr <= self.lr) {
            return e("min_lr", format!("must be in [0, lr = {}], got {}", self.lr, self.min_lr));
        }
        for (f, v) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&v) {
                return e(f, format!("must be in [0, 1), got {v}"));
            }
        }
        if !(self.eps > 0.0) {
            return e("eps", format!("must be > 0, got {}", self.eps));
        }
        if !(self.weight_decay >= 0.0) {
            return e("weight_decay", format!("must be ≥ 0, got {}", self.weight_decay));
        }
        if !(self.grad_clip >= 0.0) {
            return e("grad_clip", format!("must be ≥ 0 (0 = off), got {}", self.grad_clip));
        }
        if !(self.val_fraction > 0.0 && self.val_fraction < 1.0) {
            return e("val_fraction", format!("must be in (0, 1), got {}", self.val_fraction));
        }
        if self.decay_steps < self.warmup_steps {
            return e(
                "decay_steps",
                format!("{} is shorter than warmup_steps {}", self.decay_steps, self.warmup_steps),
            );
        }
        if self.state_f16
            && let Err(why) = model.f16_state_support()
        {
            return e("state_f16", why);
        }
        Ok(())
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
}

fn default_tokenizer() -> String {
    "char".to_string()
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
    pub model: ModelConfig,
    pub train: TrainConfig,
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
    }

    /// For `ddl train --resume DIR` with flags: fails unless these settings equal the ones the
    /// run saved in `DIR/config.toml` (flags may repeat the saved settings, not change them: a
    /// changed setting would be silently ignored). The error lists every difference and the
    /// remedy. `model.vocab_size` (from the tokenizer) and `train.skip_nonfinite` may differ.
    pub fn check_resume(&self, out: &std::path::Path) -> Result<(), String> {
        let path = out.join("config.toml");
        let saved_text = std::fs::read_to_string(&path)
            .map_err(|e| format!("--resume: reading the run's saved settings {}: {e}", path.display()))?;
        let saved: toml::Table =
            toml::from_str(&saved_text).map_err(|e| format!("--resume: parsing {}: {e}", path.display()))?;
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
                if key == "model.vocab_size" || key == "train.skip_nonfinite" || have == Some(want) {
                    continue;
                }
                let have = have.map(|h| h.to_string()).unwrap_or_else(|| "(unset)".into());
                diffs.push(format!("{key}: saved {have}, given {want}"));
            }
        }
        if diffs.is_empty() {
            return Ok(());
        }
        Err(format!(
            "--resume continues '{}' with the settings saved in {}; the flags given change {} setting(s): {}. \
             Drop those flags to resume, or start a new run with --out to change them",
            out.display(),
            path.display(),
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
            model: ModelConfig::preset(preset, variant)?,
            train: TrainConfig::preset(preset),
        })
    }

    /// Applies a TOML file's tables (`[model]`, `[train]`, top-level `corpus`, `tokenizer`) over `self`.
    pub fn merge_toml(&mut self, text: &str, origin: &str) -> Result<(), String> {
        let overlay: toml::Table = toml::from_str(text).map_err(|e| format!("{origin}: {e}"))?;
        let overlay_copy = overlay.clone();
        let mut base = toml::Table::try_from(&*self).map_err(|e| e.to_string())?;
        for (k, v) in overlay {
            match (base.get_mut(&k), v) {
                (Some(toml::Value::Table(bt)), toml::Value::Table(ot)) => {
                    for (k2, v2) in ot {
                        if !bt.contains_key(&k2) {
                            return Err(format!("{origin}: unknown key '{k}.{k2}'"));
                        }
                        bt.insert(k2, v2);
                    }
                }
                (Some(slot), v) => *slot = v,
                (None, _) => {
                    return Err(format!(
                        "{origin}: unknown key '{k}' (expected preset, corpus, tokenizer, [model], [train])"
                    ));
                }
            }
        }
        *self = base.clone().try_into().map_err(|e: toml::de::Error| {
            // Name the key whose value has the wrong type: the first overlay key that alone
            // fails to deserialise over the old config.
            let mut key = None;
            if let Ok(old) = toml::Table::try_from(&*self) {
                'find: for (k, v) in &overlay_copy {
                    let pairs: Vec<(Option<&str>, &toml::Value)> = match v {
                        toml::Value::Table(t) => t.iter().map(|(k2, v2)| (Some(k2.as_str()), v2)).collect(),
                        v => vec![(None, v)],
                    };
                    for (k2, v2) in pairs {
                        let mut probe = old.clone();
                        match (k2, probe.get_mut(k)) {
                            (Some(k2), Some(toml::Value::Table(t))) => {
                                t.insert(k2.to_string(), v2.clone());
                            }
                            _ => {
                                probe.insert(k.clone(), v2.clone());
                            }
                        }
                        if probe.try_into::<RunConfig>().is_err() {
                            key = Some(match k2 {
                                Some(k2) => format!("{k}.{k2} = {v2}"),
                                None => format!("{k} = {v2}"),
                            });
                            break 'find;
                        }
                    }
                }
            }
            match key {
                Some(k) => format!("{origin}: {k}: {}", e.message()),
                None => format!("{origin}: {}", e.message()),
            }
        })?;
        Ok(())
    }

    /// Applies `key=value` (`train.lr=3e-4`, `model.d_v=2`, `corpus=...`, `tokenizer=...`; a bare train or
    /// model key such as `lr=3e-4` is looked up in both tables).
    pub fn set(&mut self, kv: &str) -> Result<(), String> {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("--set '{kv}': expected key=value"))?;
        let (k, v) = (k.trim(), v.trim());
        let base = toml::Table::try_from(&*self).map_err(|e| e.to_string())?;
        let path: Vec<String> = if k.contains('.') {
            k.split('.').map(|s| s.to_string()).collect()
        } else if base.contains_key(k) {
            vec![k.to_string()]
        } else {
            let in_train = base["train"].as_table().is_some_and(|t| t.contains_key(k));
            let in_model = base["model"].as_table().is_some_and(|t| t.contains_key(k));
            match (in_train, in_model) {
                (true, false) => vec!["train".into(), k.into()],
                (false, true) => vec!["model".into(), k.into()],
                (true, true) => return Err(format!("--set '{k}' is ambiguous: write train.{k} or model.{k}")),
                (false, false) => return Err(format!("--set: unknown key '{k}'")),
            }
        };
        // Parse the value as a TOML literal; bare words are strings.
        let value: toml::Value = toml::from_str::<toml::Table>(&format!("x = {v}"))
            .map(|t| t["x"].clone())
            .unwrap_or_else(|_| toml::Value::String(v.to_string()));
        let mut doc = String::new();
        if path.len() == 1 {
            doc.push_str(&format!("{} = {}\n", path[0], value));
        } else if path.len() == 2 {
            doc.push_str(&format!("[{}]\n{} = {}\n", path[0], path[1], value));
        } else {
            return Err(format!("--set: key '{k}' is nested too deeply"));
        }
        self.merge_toml(&doc, &format!("--set {k}"))
    }

    pub fn validate(&self) -> Result<(), crate::model::ConfigError> {
        self.model.validate()?;
        self.train.validate(&self.model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let e = c.set("train.batch_size=\"x\"").unwrap_err();
        assert!(e.contains("batch_size") || e.contains("invalid type"), "{e}");
        c.merge_toml("[train]\nsteps_typo = 3\n", "run.toml").unwrap_err();
        c.merge_toml("corpus = \"a.txt\"\n[train]\nwarmup_steps = 3\n", "run.toml").unwrap();
        assert_eq!((c.corpus.as_str(), c.train.warmup_steps), ("a.txt", 3));
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
