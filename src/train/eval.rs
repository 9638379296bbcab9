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
}

/// The other checkpoint of `--against` on the same windows, and this one's difference from it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Against {
    pub checkpoint: String,
    pub step: usize,
    pub loss: f64,
    pub perplexity: f64,
    pub bits_per_byte: Option<f64>,
    /// This checkpoint's loss minus the other's (over all the tokens).
    pub difference: f64,
    /// Full batches compared (the paired units).
    pub pairs: usize,
    /// Mean over the full batches of (this − other), its 95 % t-interval (df = pairs − 1), t and
    /// the two-sided p of Student's paired t-test; None with fewer than two full batches.
    pub mean_paired_difference: Option<f64>,
    pub ci: Option<(f64, f64)>,
    pub t: Option<f64>,
    pub p: Option<f64>,
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
                    sublayer: format!("block{}.{}", i / 2, if i % 2 == 0 { "attn" } else { "mlp" }),
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
    let ck = super::checkpoint::load_to_device(dir, gpu.clone(), false)?;
    let (model, tok, ck_step) = (ck.model, ck.tokenizer, ck.step);
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
        let run_text = std::fs::read_to_string(&cfg_path)
            .map_err(|source| TrainError::Settings(format!("cannot read '{}': {source}", cfg_path.display())))?;
        Some(
            toml::from_str(&run_text)
                .map_err(|e| TrainError::Settings(format!("{}: not a run's settings: {e}", cfg_path.display())))?,
        )
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
        return Err(TrainError::Settings(format!(
            "{source} has {} token{}, fewer than one window of {} (--seq-len + 1): evaluate a longer text or pass a \
             shorter --seq-len",
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
    let label = if req.against.is_some() { format!("{} ", dir.display()) } else { String::new() };
    let (e, losses, tally) = run_model(&model, &ds, &t, span, windows, req.betas, &label)?;
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
    drop(model);
    let against = match &req.against {
        None => None,
        Some(other) => {
            let ck = super::checkpoint::load_to_device(other, gpu.clone(), false)
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
            let (eb, lb, _) = run_model(&ck.model, &ds, &t, span, windows, false, &format!("{} ", other.display()))?;
            // Paired by batch: the same windows through both models. The units are the full
            // batches (a last, partial batch weighs otherwise in the token mean).
            let full = t.batch_size * seq_len;
            let pairs: Vec<(f64, f64)> =
                losses.iter().zip(&lb).filter(|((_, n), _)| *n == full).map(|(&(a, _), &(b, _))| (a, b)).collect();
            let test = crate::stats::Paired::of(&pairs);
            Some(Against {
                checkpoint: other.display().to_string(),
                step: ck.step,
                loss: eb.loss,
                perplexity: eb.loss.exp(),
                bits_per_byte: bpb(eb.loss, eb.tokens),
                difference: e.loss - eb.loss,
                pairs: pairs.len(),
                mean_paired_difference: test.map(|p| p.diff.mean),
                ci: test.map(|p| p.diff.ci),
                t: test.map(|p| p.t),
                p: test.map(|p| p.p),
            })
        }
    };
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
    })
}

/// What [`run_model`] measured: the evaluation, each batch's (mean loss, tokens), the β tally.
type ModelRun = (super::Eval, Vec<(f64, usize)>, BetaTally);

/// One model over the windows of `span`: the evaluation, each batch's (mean loss, tokens), and
/// with `betas` the β tally. Shows progress (`label` names the model when there are two).
fn run_model(
    model: &Model,
    ds: &Dataset,
    t: &super::TrainConfig,
    span: EvalSpan,
    windows: usize,
    betas: bool,
    label: &str,
) -> Result<ModelRun, TrainError> {
    run_model_in(model, ds, t, span, windows, betas, label).map_err(|e| match e {
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
    betas: bool,
    label: &str,
) -> Result<ModelRun, TrainError> {
    // (The head in the run's slices, or `--head-chunk`'s: the same loss, less memory.)
    let prog = model.loss_program(t.batch_size, t.seq_len, t.head_chunk)?;
    let mut tally = BetaTally::default();
    let mut losses = Vec::new();
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
        // The batch just run: its β, while the program still holds them.
        if betas && model.cfg.variant.is_ddl() && failed.is_none() {
            let rows = (windows - (k.done - 1) * b).min(b);
            if let Err(e) = tally.add(model, &prog, rows) {
                failed = Some(e);
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
        true
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok((e, losses, tally))
}

impl EvalResult {
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
        if let Some(a) = &self.against {
            let bpb = a.bits_per_byte.map(|b| format!(", {b:.4} bits per byte")).unwrap_or_default();
            out.push_str(&format!(
                "\nagainst {} (step {}): loss {:.4} (perplexity {:.2}{bpb}) on the same windows; this − that = {:+.4} \
                 nats per token",
                a.checkpoint, a.step, a.loss, a.perplexity, a.difference
            ));
            match (a.mean_paired_difference, a.ci, a.p) {
                (Some(m), Some((lo, hi)), Some(p)) => {
                    let verdict = if p >= 0.05 {
                        "not distinguishable on this text"
                    } else if m < 0.0 {
                        "this checkpoint predicts this text better"
                    } else {
                        "the other checkpoint predicts this text better"
                    };
                    // Student's t in f64 resolves p down to about 1e-15.
                    let p = match p {
                        p if p < 1e-15 => "p < 1e-15".to_string(),
                        p if p < 1e-3 => format!("p = {p:.1e}"),
                        p => format!("p = {p:.3}"),
                    };
                    out.push_str(&format!(
                        "\npaired over {} batches of {} windows: mean {m:+.4} [{lo:+.4}, {hi:+.4}] (95 % t-interval, \
                         df {}), {p}: {verdict}. The interval covers the text's variation, not the training's \
                         (seeds): see `ddl experiment` for that",
                        a.pairs,
                        self.batch_size,
                        a.pairs.saturating_sub(1)
                    ));
                }
                _ => out.push_str(&format!(
                    "\nfewer than two full batches of {} window{} to pair: no interval ({})",
                    self.batch_size,
                    if self.batch_size == 1 { "" } else { "s" },
                    if self.batch_size > 1 {
                        "pass a smaller --batch-size or a longer text"
                    } else {
                        "pass a longer text"
                    }
                )),
            }
        }
        out
    }
}
