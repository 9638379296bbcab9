//! `ddl info --checkpoint`: what a run folder or one of its kept checkpoints holds, read from
//! its files' metadata and the run's small records (`config.toml`, `data.json`, `summary.json`,
//! `checkpoints/best/best.json`); no tensor is read and no device opened.

use std::path::{Path, PathBuf};

use super::cache::size;
use super::checkpoint::{self, Best, CheckpointError, RunState};
use super::config::RunConfig;
use crate::model::ModelConfig;

/// What a checkpoint is and what it holds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckpointInfo {
    /// The folder asked about.
    pub path: PathBuf,
    /// `run` (a `ddl train --out` folder), `kept` (one of its `checkpoints/step-N`) or `best`
    /// (its `checkpoints/best`).
    pub kind: &'static str,
    /// The run folder (the path itself for a run).
    pub run: PathBuf,
    /// Optimizer steps the checkpoint's parameters have taken.
    pub step: usize,
    pub model: ModelConfig,
    pub parameters: usize,
    /// The tokenizer saved with the model: `char`, `byte-level BPE`, …
    pub tokenizer: String,
    pub vocab_size: usize,
    /// The run settings saved with the checkpoint (what `--resume` continues with); `None` for a
    /// model-only checkpoint (e.g. written by `scripts/torch_checkpoint.py`).
    pub settings: Option<RunConfig>,
    /// The run state saved with the moments (seconds trained, the step it was to stop after,
    /// f16 loss scaling); `None` without a moments file.
    pub state: Option<RunState>,
    /// Tokens one optimizer step trains on: batch × sequence × accumulation (over every rank).
    pub tokens_per_step: Option<usize>,
    /// The data record (`data.json`): where the tokens came from, how many for training and
    /// validation.
    pub data: Option<serde_json::Value>,
    /// The run's last losses (`summary.json`) when they are this checkpoint's step's.
    pub losses: Option<Losses>,
    /// The run's best checkpoint, when it keeps one.
    pub best: Option<Best>,
    /// Why `checkpoints/best/`'s record (`best.json`) is not read, when the folder is there and
    /// the record is missing or does not read (`ddl train --resume` writes it again).
    pub best_unreadable: Option<String>,
    /// The steps of the run's kept checkpoints (`checkpoints/step-N`).
    pub kept: Vec<usize>,
    /// The checkpoint's files and their sizes in bytes.
    pub files: Vec<(String, u64)>,
    /// The bytes the training plan of the saved settings needs on a device.
    pub plan_bytes: Option<u64>,
    /// Why the folder's `config.toml` does not read as a run's settings, when it is there and
    /// does not (an edit gone wrong; `--resume` writes it again from the saved settings).
    pub config_unreadable: Option<String>,
    /// The checkpoint a fine-tune started from (`ddl train --init-from`), when its settings name
    /// one.
    pub init_from: Option<InitFrom>,
    /// The process training the run now, when a live one holds its lock.
    pub training_now: Option<TrainingNow>,
    /// Why the run's lock file holds nothing, when there is one that does not (its process gone,
    /// or it came with a copy): `ddl train --resume` takes it over.
    pub stale_lock: Option<String>,
    /// Temporary files of the run's writers that no live process writes (killed writers', or a
    /// copy's of its original's): `--resume` removes them. None listed while the run trains.
    pub stale_temporaries: Vec<PathBuf>,
}

/// The process that trains a run now, and how far it has gone past the checkpoint described.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrainingNow {
    pub pid: u32,
    pub host: String,
    /// The steps its `metrics.jsonl` has logged past this checkpoint.
    pub steps_past: usize,
    /// The last step it logged, and the step it trains to (rows of an older ddl: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logged_step: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps_target: Option<usize>,
}

/// Where a fine-tune's parameters came from.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InitFrom {
    /// The checkpoint `--init-from` named (as its `config.toml` records it).
    pub path: String,
    /// Its step when the fine-tune took its parameters (`init_from_step` of `config.toml`; not
    /// recorded by a ddl before 2026-12-07).
    pub step_then: Option<usize>,
    /// Its step now, where it can still be read (a run folder that trained on since has moved
    /// on from the parameters the fine-tune took).
    pub step_now: Option<usize>,
    /// The model settings the fine-tune changed (`ModelConfig::FINE_TUNE_SETTINGS`), as
    /// `what from → to` ([`ModelConfig::fine_tune_changes`]), where the checkpoint can still be
    /// read.
    pub changed: Vec<String>,
}

/// The `--init-from` checkpoint of a run with `settings` whose model is `model`.
fn init_from_of(settings: Option<&RunConfig>, model: &ModelConfig) -> Option<InitFrom> {
    let settings = settings?;
    let path = Some(settings.init_from.clone()).filter(|p| !p.is_empty())?;
    let src = Path::new(&path);
    let step_now = checkpoint::saved_step(src).ok();
    let changed = checkpoint::saved_config(src).map(|from| from.fine_tune_changes(model)).unwrap_or_default();
    Some(InitFrom { path, step_then: settings.init_from_step, step_now, changed })
}

/// A run's losses at the end of its last invocation.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Losses {
    pub train_loss: Option<f64>,
    pub val_loss: Option<f64>,
    pub val_tokens: Option<u64>,
    /// The validation loss covers the whole split (not `train.val_max_tokens` of it).
    pub val_whole: bool,
    /// `train.early_stop` ended the run at this step: (the step it was to reach, the best step
    /// and loss of its validation curve).
    pub stopped_early: Option<(usize, usize, f64)>,
}

/// Reads what `path` (a run folder or one of its kept checkpoints) holds. The error names what
/// is missing or does not read, and a kept checkpoint that does read where there is one.
pub fn describe(path: &Path) -> Result<CheckpointInfo, CheckpointError> {
    let (kind, run) = match checkpoint::kept_run_of(path) {
        Some(run) if path.file_name().is_some_and(|n| n == checkpoint::BEST_DIR) => ("best", run),
        Some(run) => ("kept", run),
        None => ("run", path.to_path_buf()),
    };
    let read = |e| if kind == "run" { checkpoint::with_remedy_for_reading(path, "--checkpoint", e) } else { e };
    let model = checkpoint::saved_config(path).map_err(read)?;
    let tok = checkpoint::saved_tokenizer(path).map_err(read)?;
    let step = checkpoint::saved_step(path).map_err(read)?;
    let has_optim = path.join(checkpoint::OPTIM_FILE).is_file();
    let state = if has_optim { Some(checkpoint::saved_state(path).map_err(read)?) } else { None };
    let settings = settings_of(path, has_optim);
    let init_from = init_from_of(settings.as_ref(), &model);
    let tokens_per_step = settings.as_ref().map(|s| s.train.batch_size * s.train.seq_len * s.train.grad_accum);
    let plan_bytes = settings.as_ref().map(|s| {
        crate::model::memory_plan_for(&model, s.train.batch_size, s.train.seq_len, s.train.storage(&model)).total()
    });
    let data = std::fs::read_to_string(path.join("data.json")).ok().and_then(|t| serde_json::from_str(&t).ok());
    let losses = (kind == "run").then(|| losses_at(path, step)).flatten();
    let files = [checkpoint::MODEL_FILE, checkpoint::OPTIM_FILE, "config.toml", "data.json"]
        .iter()
        .filter_map(|f| Some((f.to_string(), std::fs::metadata(path.join(f)).ok().filter(|m| m.is_file())?.len())))
        .collect();
    Ok(CheckpointInfo {
        path: path.to_path_buf(),
        kind,
        step,
        parameters: crate::model::params::Layout::new(&model).count(),
        tokenizer: tok.kind().to_string(),
        vocab_size: tok.vocab_size(),
        model,
        settings,
        state,
        tokens_per_step,
        data,
        losses,
        best: checkpoint::read_best(&run),
        best_unreadable: best_unreadable(&run),
        kept: checkpoint::kept_steps(&run),
        files,
        plan_bytes,
        training_now: super::lock::holder(&run).map(|(pid, host)| {
            let (steps_past, logged_step, steps_target) = super::logged_after(&run, step);
            TrainingNow { pid, host, steps_past, logged_step, steps_target }
        }),
        stale_lock: super::lock::stale_lock(&run),
        stale_temporaries: if super::lock::holder(&run).is_some() {
            Vec::new()
        } else {
            let mut t = checkpoint::stale_temporaries(&run);
            t.extend(super::lock::stale_temporaries(&run));
            t
        },
        run,
        config_unreadable: RunConfig::read_file(path).and_then(Result::err).map(|e| e.message().trim().to_string()),
        init_from,
    })
}

/// Why the record of `run`'s `checkpoints/best/` is not read, when that folder is there: its
/// `best.json` is missing or does not read as one (damaged, edited).
fn best_unreadable(run: &Path) -> Option<String> {
    let dir = run.join(checkpoint::KEPT_DIR).join(checkpoint::BEST_DIR);
    if !dir.is_dir() || checkpoint::read_best(run).is_some() {
        return None;
    }
    Some(match std::fs::read_to_string(dir.join(checkpoint::BEST_FILE)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "is missing".to_string(),
        Err(e) => format!("does not read ({e})"),
        Ok(text) => match serde_json::from_str::<Best>(&text) {
            Err(e) => format!("does not read ({e})"),
            Ok(_) => "does not read".to_string(),
        },
    })
}

/// The run settings saved in the checkpoint's moments file, else its `config.toml`.
fn settings_of(path: &Path, has_optim: bool) -> Option<RunConfig> {
    let saved = if has_optim { checkpoint::saved_run_config(path).ok().filter(|t| !t.is_empty()) } else { None };
    let text = saved.or_else(|| std::fs::read_to_string(path.join("config.toml")).ok())?;
    toml::from_str(&text).ok()
}

/// The losses of the run's `summary.json` when it was written at `step`.
fn losses_at(run: &Path, step: usize) -> Option<Losses> {
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).ok()?).ok()?;
    (j["step"].as_u64()? == step as u64).then(|| Losses {
        train_loss: j["train_loss"].as_f64(),
        val_loss: j["val_loss"].as_f64(),
        val_tokens: j["val_tokens"].as_u64(),
        val_whole: j["val_whole"].as_bool().unwrap_or(false),
        stopped_early: {
            let e = &j["stopped_early"];
            e["planned"]
                .as_u64()
                .zip(e["best_step"].as_u64())
                .zip(e["best_loss"].as_f64())
                .map(|((p, b), l)| (p as usize, b as usize, l))
        },
    })
}

/// A count with thousands apart: 811 068 (exact, where `cache::count` rounds to k, M, G).
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

impl CheckpointInfo {
    /// The description as lines of text.
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        let (c, run) = (&self.model, self.run.display());
        out.push(match self.kind {
            "run" => format!("{}: a run folder, its checkpoint at step {}", self.path.display(), self.step),
            "best" => format!("{}: the best checkpoint of the run {run}, step {}", self.path.display(), self.step),
            _ => format!("{}: a kept checkpoint of the run {run}, step {}", self.path.display(), self.step),
        });
        out.push(format!(
            "model: {}, V {} d {} L {} H {} h {} F {} d_v {}, context {} tokens; {} parameters",
            c.variant,
            c.vocab_size,
            c.d_model,
            c.n_layers,
            c.n_heads,
            c.head_dim,
            c.mlp_hidden,
            c.m(),
            c.max_seq_len,
            count(self.parameters as u64)
        ));
        // (A run still training moves on from what is described here.)
        if let Some(t) = &self.training_now {
            // (How far it has gone, where its rows say: the target was on disk only at its first
            // checkpoint.)
            let at = match (t.logged_step, t.steps_target) {
                (Some(s), Some(target)) => format!(", at step {s} of {target}"),
                (Some(s), None) => format!(", at step {s}"),
                _ => String::new(),
            };
            out.push(format!(
                "training now: process {} on {}{at}; its metrics.jsonl has logged {} past this checkpoint",
                t.pid,
                t.host,
                crate::plural(t.steps_past, "step")
            ));
        }
        out.push(format!("tokenizer: {}, {} tokens (saved with the model)", self.tokenizer, self.vocab_size));
        match (&self.state, self.tokens_per_step) {
            (Some(st), tokens) => {
                let mut line = format!("trained: {} steps", self.step);
                if let Some(t) = tokens {
                    line.push_str(&format!(
                        ", {} tokens ({} a step)",
                        count(t as u64 * self.step as u64),
                        count(t as u64)
                    ));
                }
                line.push_str(&format!(", {:.0} s of training", st.elapsed));
                if let Some(target) = st.target.filter(|&t| t > self.step) {
                    line.push_str(&format!(
                        "; its invocation was to go on to step {target} (`ddl train --resume` continues there)"
                    ));
                }
                out.push(line);
                if let Some(ls) = &st.loss_scale {
                    out.push(format!(
                        "f16 loss scaling: scale {}, {} steps skipped for overflow so far",
                        ls.scale, ls.skipped
                    ));
                }
            }
            (None, _) => out.push(format!(
                "trained: {} steps; no moments file ({}): a model-only checkpoint, for eval, generate and \
                 `ddl train --init-from`, not for --resume",
                self.step,
                checkpoint::OPTIM_FILE
            )),
        }
        if let Some(s) = &self.settings {
            let t = &s.train;
            let accum = if t.grad_accum > 1 { format!(" × {} accumulated", t.grad_accum) } else { String::new() };
            out.push(format!(
                "settings: B {} × T {}{accum}, lr {} → {} (warmup {}, decay to step {}), weight decay {}, precision {}{}, \
                 seed {}",
                t.batch_size,
                t.seq_len,
                t.lr,
                t.min_lr,
                t.warmup_steps,
                t.decay_steps,
                t.weight_decay,
                t.precision.name(),
                if t.state_f16 { ", f16 states" } else { "" },
                t.seed
            ));
            if let Some(b) = self.plan_bytes {
                out.push(format!(
                    "training memory plan: {} at these settings (`{}` explains it)",
                    size(b),
                    super::config::info_command(&s.preset, &self.model, t)
                ));
            }
        }
        if let Some(f) = &self.init_from {
            let then = f.step_then.map(|s| format!(" at step {s}")).unwrap_or_default();
            let now = match f.step_now {
                // (It may have trained on, or been trained again, since.)
                Some(s) if f.step_then == Some(s) => String::new(),
                Some(s) => format!("; that checkpoint is now at step {s}"),
                None => "; that checkpoint does not read there now".to_string(),
            };
            let changed =
                if f.changed.is_empty() { String::new() } else { format!("; changed: {}", f.changed.join(", ")) };
            out.push(format!("fine-tuned from: the parameters of {}{then} (`--init-from`{now}){changed}", f.path));
        }
        if let Some(d) = &self.data {
            let tokens = |k: &str| d[k].as_u64().map(count).unwrap_or_else(|| "?".into());
            let source = d["source"].as_str().unwrap_or("?");
            out.push(format!(
                "data: {source}: {} training tokens, {} validation",
                tokens("train_tokens"),
                tokens("val_tokens")
            ));
            if let (Some(per), Some(train)) = (self.tokens_per_step, d["train_tokens"].as_u64())
                && train > 0
            {
                let epochs = (per as f64 * self.step as f64) / train as f64;
                out.push(format!("  {epochs:.2} epochs of the training tokens so far"));
            }
        }
        if let Some(l) = &self.losses {
            let mut parts = Vec::new();
            if let Some(x) = l.train_loss {
                parts.push(format!("train {x:.4}"));
            }
            if let Some(x) = l.val_loss {
                let over = match (l.val_whole, l.val_tokens) {
                    (true, Some(n)) => format!(" (the whole validation split, {} tokens)", count(n)),
                    (false, Some(n)) => format!(" ({} validation tokens)", count(n)),
                    _ => String::new(),
                };
                parts.push(format!("validation {x:.4}{over}"));
            }
            // (A loss logged as null: not a finite number, a diverged or skipped step.)
            if parts.is_empty() {
                parts.push("none that is a finite number (the run's metrics.jsonl logs them as null)".into());
            }
            out.push(format!("losses at this step: {}", parts.join(", ")));
            if let Some((planned, best_step, best_loss)) = l.stopped_early {
                out.push(format!(
                    "stopped early (train.early_stop) before step {planned}: the validation curve was lowest at step \
                     {best_step}, {best_loss:.4}"
                ));
            }
        }
        if let Some(b) = &self.best {
            out.push(format!(
                "best: step {}, validation loss {:.4} over {} tokens ({})",
                b.step,
                b.val_loss,
                count(b.val_tokens as u64),
                self.run.join(checkpoint::KEPT_DIR).join(checkpoint::BEST_DIR).display()
            ));
        }
        if let Some(why) = &self.best_unreadable {
            let best = self.run.join(checkpoint::KEPT_DIR).join(checkpoint::BEST_DIR);
            out.push(format!(
                "note: the best checkpoint's record {} {why}: its step and validation loss are not known here; \
                 `ddl train --resume {}` writes it again from best/'s step and the loss metrics.jsonl logged there (where it logged one)",
                best.join(checkpoint::BEST_FILE).display(),
                crate::shell_word(&self.run)
            ));
        }
        if !self.kept.is_empty() {
            let steps: Vec<String> = self.kept.iter().map(|s| s.to_string()).collect();
            out.push(format!(
                "kept checkpoints at steps {} ({})",
                steps.join(", "),
                self.run.join(checkpoint::KEPT_DIR).display()
            ));
        }
        let files: Vec<String> = self.files.iter().map(|(f, b)| format!("{f} {}", size(*b))).collect();
        out.push(format!("files: {}", files.join(", ")));
        if let Some(e) = &self.config_unreadable {
            out.push(format!(
                "note: its config.toml does not read as a run's settings ({e}){}",
                if self.state.is_some() {
                    "; the settings above are those saved with the checkpoint, and `ddl train --resume` writes them to \
                     config.toml again"
                } else {
                    ""
                }
            ));
        }
        let resume = format!("`ddl train --resume {}`", crate::shell_word(&self.run));
        if let Some(why) = &self.stale_lock {
            out.push(format!(
                "note: its lock file {} is stale, no run trains there: {why}; {resume} takes it over",
                self.run.join(super::lock::LOCK_FILE).display()
            ));
        }
        if !self.stale_temporaries.is_empty() {
            let names: Vec<String> = self.stale_temporaries.iter().map(|p| p.display().to_string()).collect();
            out.push(format!(
                "note: {} that no live process writes (left by a writer that was killed, or copied with the folder \
                 while its run trained): {}; {resume} removes them (or delete them)",
                crate::plural(names.len(), "temporary file"),
                names.join(", ")
            ));
        }
        out.join("\n") + "\n"
    }
}
