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

const BAR: &str = "{spinner} [{elapsed_precise}] {wide_bar} batch {pos}/{len} eta {eta}";

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
}

/// What an evaluation measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EvalResult {
    /// The checkpoint's training step.
    pub step: usize,
    /// What was evaluated, in words (the run's corpus split, a file, shards).
    pub source: String,
    pub split: Split,
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
    /// With `--betas`: per sublayer, what its delta write did on the evaluated tokens (empty for
    /// the baseline, which has none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub betas: Vec<SublayerBetas>,
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
    let (model, tok) = (ck.model, ck.tokenizer);
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
        return Err(TrainError::Settings(format!(
            "--seq-len {seq_len}: the model's context (max_seq_len) is {max} tokens; pass 1 to {max}"
        )));
    }
    t.seq_len = seq_len;
    t.batch_size = req.batch_size.unwrap_or(t.batch_size);
    let vocab = tok.vocab_size();
    let (tokens, source, key) = match &req.source {
        EvalSource::Run => {
            let run = run.as_ref().expect("read above for the run's own data");
            let (ds, _) = data::open_for_run(run, Some(&tok))?;
            let what = if run.data.is_empty() {
                format!("the run's corpus '{}'", run.corpus)
            } else {
                format!("the run's shards '{}'", run.data)
            };
            match req.split {
                Split::Val => (ds.val, format!("the validation split of {what}"), ds.key),
                Split::Train => {
                    // As many tokens as the validation split has, unless --batches says otherwise:
                    // the two losses then compare (the whole training split may be billions).
                    t.val_max_tokens = (ds.val_windows(seq_len) * seq_len).max(seq_len);
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
            let text = data::read_corpus(path)?;
            let ids = tok.encode(&text).map_err(|e| {
                TrainError::Settings(format!(
                    "--text '{}': {e}; the checkpoint's {} tokenizer cannot encode it{}",
                    path.display(),
                    tok.kind(),
                    if tok.kind() == "char" { " (a character model knows only its corpus's characters)" } else { "" }
                ))
            })?;
            let shard = Shard::from_tokens(path, &ids).map_err(data::DataError::from)?;
            (Stream::new(vec![shard]), format!("'{}'", path.display()), tok.fingerprint())
        }
        EvalSource::Data { data: d, format } => {
            t.val_max_tokens = 0;
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
            if let Some(m) = data::read_meta(&folder)?
                && m.tokenizer != tok.to_json()
            {
                return Err(TrainError::Settings(format!(
                    "{}: the shards were made with another tokenizer (vocabulary {}) than the checkpoint's (vocabulary \
                     {vocab}); prepare the text again with the checkpoint's tokenizer (`ddl data prepare --tokenizer`)",
                    folder.join("meta.json").display(),
                    m.vocab_size
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
            "{source} has {} tokens, fewer than one window of {} (--seq-len + 1): evaluate a longer text or pass a \
             shorter --seq-len",
            tokens.len(),
            seq_len + 1
        )));
    }
    let ds = Dataset::for_evaluation(tokens, seq_len, vocab, key)?;
    let span = match req.batches {
        Some(b) => {
            t.eval_batches = b;
            EvalSpan::Periodic
        }
        None => EvalSpan::Full,
    };
    let windows = super::eval_windows(&ds, &t, span, t.batch_size, seq_len);
    let whole = windows == ds.val_windows(seq_len);
    if req.betas && !model.cfg.variant.is_ddl() {
        eprintln!("--betas: a {} model has no delta writes, so no β to count", model.cfg.variant.name());
    }
    let prog = model.forward_program(t.batch_size, seq_len)?;
    let mut tally = BetaTally::default();
    let e = {
        // A bar on a terminal; without one, a line at every tenth of a long evaluation.
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new(0);
            b.set_style(indicatif::ProgressStyle::with_template(BAR).expect("a valid template"));
            b
        });
        let mut last = 0;
        let b = t.batch_size;
        let mut failed = None;
        let e = super::evaluate_ticking(&model, &prog, &ds, &t, span, &super::Single, &mut |done, of| {
            // The batch just run: its β, while the program still holds them.
            if req.betas && model.cfg.variant.is_ddl() && failed.is_none() {
                let rows = (windows - (done - 1) * b).min(b);
                if let Err(e) = tally.add(&model, &prog, rows) {
                    failed = Some(e);
                }
            }
            match &bar {
                Some(bar) => {
                    bar.set_length(of as u64);
                    bar.set_position(done as u64);
                }
                None if of >= 100 && done * 10 / of > last => {
                    last = done * 10 / of;
                    eprintln!("eval: batch {done}/{of}");
                }
                None => {}
            }
        })?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        e
    };
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
    let bits_per_byte =
        bytes.filter(|&b| b > 0).map(|b| e.loss * e.tokens as f64 / (b as f64 * std::f64::consts::LN_2));
    Ok(EvalResult {
        step: ck.step,
        source,
        split: req.split,
        loss: e.loss,
        perplexity: e.loss.exp(),
        tokens: e.tokens,
        bytes,
        bits_per_byte,
        seq_len,
        windows,
        whole,
        betas: tally.sublayers(),
    })
}

impl EvalResult {
    /// One line for people: loss, perplexity, bits per byte, and what they cover.
    pub fn line(&self) -> String {
        let name = match self.split {
            Split::Val if self.source.starts_with("the validation split") => "validation loss",
            Split::Train => "training-text loss",
            Split::Val => "loss",
        };
        let bpb = match self.bits_per_byte {
            Some(b) => format!(", {b:.4} bits per byte"),
            None => String::new(),
        };
        let bytes = self.bytes.map(|b| format!(" ({b} bytes)")).unwrap_or_default();
        let span = if self.whole { "all of" } else { "the first windows of" };
        let mut out = format!(
            "{name} {:.4} (perplexity {:.2}{bpb}) over {span} {}: {} tokens{bytes} in {} windows of {}, checkpoint \
             step {}",
            self.loss, self.perplexity, self.source, self.tokens, self.windows, self.seq_len, self.step
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
        out
    }
}
