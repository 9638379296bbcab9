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

mod outputs;
mod result;
mod run;
mod tally;
mod text;
pub use outputs::tsv_field;
use outputs::*;
use result::accuracy_ci;
pub use result::{
    Ablation, AccuracyVersus, Against, CalibrationBin, EvalResult, Intervened, LensRow, SublayerBetas, Versus,
};
use run::*;
pub use tally::BetaTally;
use tally::*;

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
    /// Interventions on the writes (`--intervene`, as `ddl generate` takes them but `k=mean`,
    /// which needs a prompt): the model under them on the same windows, and the paired difference
    /// from the model as trained.
    pub intervene: Option<crate::model::Interventions>,
    /// Every sublayer's write in turn without each of these parts (`--ablate`), on the same
    /// windows: the paired difference from the model as trained per sublayer and part,
    /// Holm-corrected over all of them (empty: none).
    pub ablate: Vec<Ablate>,
    /// With `ablate`: a forest plot of the differences (PNG).
    pub plot: Option<PathBuf>,
    /// Each evaluated token's loss into this file (`--per-token`, tab-separated): the model as
    /// evaluated, and beside it under the interventions, the other checkpoint or each ablation.
    pub per_token: Option<PathBuf>,
    /// A reliability diagram of the model's predictions (a .png file; [`EvalResult::calibration`]).
    pub calibration_plot: Option<PathBuf>,
    /// A logit lens ([`EvalResult::lens`]): the model's head on every state, on the same windows.
    pub lens: bool,
    /// With `lens`: its plot (a .png file).
    pub lens_plot: Option<PathBuf>,
}

/// What `--ablate` removes from each sublayer's write in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ablate {
    /// The whole write (`write=0`, β = 0: X' = X).
    Write,
    /// Its erased part (`erase=0`: X' = X + β k vᵀ).
    Erase,
    /// Its value (`v=0`: X' = (I − β k kᵀ) X; `"v"` in JSON, as `--ablate v`).
    #[serde(rename = "v")]
    Value,
}

impl Ablate {
    /// Every part, in the order of the tables.
    pub const ALL: [Ablate; 3] = [Ablate::Write, Ablate::Erase, Ablate::Value];

    /// The part a name says (`write`, `erase` or `v`, as `--ablate` and an experiment spec's
    /// `ablate` take them).
    pub fn parse(name: &str) -> Result<Ablate, String> {
        Ablate::ALL.into_iter().find(|a| a.name() == name.trim()).ok_or_else(|| {
            format!(
                "'{name}' is not a part of a write: expected \"write\" (the whole write, β = 0), \"erase\" (its \
                 erased part, erase=0) or \"v\" (its value, v=0)"
            )
        })
    }

    /// Its name on the command line (`--ablate write|erase|v`).
    pub fn name(self) -> &'static str {
        match self {
            Ablate::Write => "write",
            Ablate::Erase => "erase",
            Ablate::Value => "v",
        }
    }

    /// The `--intervene` action that does it.
    pub fn action(self) -> &'static str {
        match self {
            Ablate::Write => "write=0",
            Ablate::Erase => "erase=0",
            Ablate::Value => "v=0",
        }
    }

    /// For the plot's title.
    fn short(self) -> &'static str {
        match self {
            Ablate::Write => "without its write (write=0)",
            Ablate::Erase => "without its erased part (erase=0)",
            Ablate::Value => "without its value (v=0)",
        }
    }

    /// The action and what it leaves of the write, for a table's header.
    pub fn words(self) -> &'static str {
        match self {
            Ablate::Write => "write=0: β = 0, X' = X",
            Ablate::Erase => "erase=0: X' = X + β k vᵀ",
            Ablate::Value => "v=0: X' = (I − β k kᵀ) X",
        }
    }
}

/// Evaluates the checkpoint in `dir` (a run folder, or a kept checkpoint's folder) as `req` asks.
pub fn evaluate_checkpoint(gpu: &Arc<Gpu>, dir: &Path, req: &EvalRequest) -> Result<EvalResult, TrainError> {
    check_distinct_outputs(req)?;
    if let Some(path) = &req.plot {
        check_plot_path(path)?;
    }
    if let Some(path) = &req.per_token {
        check_per_token_path(path)?;
    }
    if let Some(path) = &req.calibration_plot {
        check_calibration_plot_path(path)?;
    }
    if let Some(path) = &req.lens_plot {
        super::plot::check_png_out("--lens-plot", path, |t| t.starts_with(LENS_PLOT_TITLE), "`ddl eval --lens-plot`")
            .map_err(TrainError::Settings)?;
    }
    let rows = req.per_token.is_some();
    let ck = super::checkpoint::load_to_device(dir, gpu.clone(), false)
        .map_err(|e| super::checkpoint::with_remedy_for_reading(dir, "--checkpoint", e))?;
    let (model, tok, ck_step) = (ck.model, ck.tokenizer, ck.step);
    // (What the lens's states follow, for its headers, kept past the model's drop.)
    let lens_step = crate::generate::lens_step(model.cfg.variant);
    // The interventions against the model, before any window is evaluated.
    let intervened_maps = match &req.intervene {
        None => None,
        Some(iv) => {
            if let Some(i) = iv.list.iter().find(|i| i.action == crate::model::intervene::Action::KMean) {
                return Err(TrainError::Settings(format!(
                    "--intervene '{}': k=mean fixes a write's direction to the mean k of a generation's prompt, \
                     which an evaluation over windows does not have; measure it with `ddl generate --intervene {} \
                     --compare`, or give β or term specs here (beta=V, beta*=S, write=0, erase=0, v=0, …)",
                    i.spec, i.spec
                )));
            }
            Some(iv.maps(&model.cfg).map_err(|e| TrainError::Settings(e.to_string()))?)
        }
    };
    if let Some(kind) = req.ablate.first()
        && !model.cfg.variant.is_ddl()
    {
        return Err(TrainError::Settings(format!(
            "--ablate {}: '{}' is a {} model: its sublayers add their outputs (residual additions), there are no \
             delta writes to ablate; give a checkpoint of a delta-write variant (ddl, ddl_v1, ddl_ec, …)",
            kind.name(),
            dir.display(),
            model.cfg.variant.name()
        )));
    }
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
        let read = RunConfig::read_file(dir).ok_or_else(|| {
            let source = std::fs::read_to_string(&cfg_path).err().map_or_else(String::new, |e| e.to_string());
            TrainError::Settings(format!("cannot read '{}': {source}", cfg_path.display()))
        })?;
        match read {
            Ok(r) => Some(r),
            // An edited file that no longer reads: the settings saved with the checkpoint are the
            // run's (what `--resume` continues with and writes back).
            Err(e) => {
                let saved = super::checkpoint::saved_run_config(dir)
                    .ok()
                    .filter(|t| !t.is_empty())
                    .and_then(|t| toml::from_str::<RunConfig>(&t).ok());
                match saved {
                    Some(r) => {
                        eprintln!(
                            "note: {} does not read as a run's settings ({}); evaluating with the settings saved with \
                             the checkpoint (`ddl train --resume {}` writes them to config.toml again)",
                            cfg_path.display(),
                            e.message().trim(),
                            crate::shell_word(dir)
                        );
                        Some(r)
                    }
                    None => {
                        return Err(TrainError::Settings(format!(
                            "{}: not a run's settings: {e}; restore the file (the run wrote it at its start; its \
                             kept checkpoints hold copies)",
                            cfg_path.display()
                        )));
                    }
                }
            }
        }
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
                    // (The data is there; the cache it is tokenised into is not writable: its own
                    // remedy, not "restore the data".)
                    e @ TrainError::Data(data::DataError::Cache { .. }) => return e,
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
                // (`-` reads standard input for generate and tokenizer encode, not here.)
                TrainError::Data(data::DataError::Missing(p)) if p.as_os_str() == "-" => TrainError::Settings(
                    "--text - is no file, and --text does not read standard input as `-`: give a file, or \
                     `--text /dev/stdin` to evaluate what is piped in"
                        .into(),
                ),
                TrainError::Data(data::DataError::Missing(p)) => TrainError::Settings(format!(
                    "--text '{}' does not exist: pass a UTF-8 text file or a folder of .txt files",
                    p.display()
                )),
                TrainError::Data(data::DataError::Empty(p)) => {
                    TrainError::Settings(format!("--text '{}' is empty: give a text to evaluate", p.display()))
                }
                // (It was "corpus '…' is a symbolic link …": --text names no corpus.)
                TrainError::Data(data::DataError::BrokenLink(p)) => TrainError::Settings(format!(
                    "--text '{}' is a symbolic link that leads nowhere (its target is missing, or the links loop): \
                     give the file it should lead to, or make the link again",
                    p.display()
                )),
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
                    // (Characters no one sees in the text said as what they are, as `--prompt`'s.)
                    let what = match ch {
                        '\r' => {
                            "; the text has Windows line ends, \\r\\n: convert them, e.g. `tr -d '\\r' < FILE > NEW`"
                        }
                        '\u{feff}' if offset == 0 => {
                            "; it is a byte-order mark, which Windows editors write: strip it, e.g. `sed -i \
                             '1s/^\\xEF\\xBB\\xBF//' FILE`"
                        }
                        _ => "",
                    };
                    TrainError::Settings(format!(
                        "--text '{}': character {ch:?} at byte {offset}{place} is not among the {vocab} characters of \
                         the checkpoint's char tokenizer: a character model knows only its corpus's characters (take \
                         them out of the text, or evaluate a model with a byte-level tokenizer){what}",
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
            stream.check_vocab(vocab, "the model's").map_err(data::DataError::from)?;
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
        // (A window is at least two tokens: with one token there is nothing to predict at any
        // --seq-len.)
        let remedy = if tokens.len() >= 2 {
            format!("evaluate a longer text or pass --seq-len {} or less", tokens.len() - 1)
        } else {
            "evaluate a longer text (a window needs two tokens: one read, one predicted)".to_string()
        };
        return Err(TrainError::Settings(format!(
            "{source} has {}, fewer than one window of {} (--seq-len + 1): {remedy}",
            crate::plural(tokens.len(), "token"),
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
    let label = if req.against.is_some() {
        format!("{} ", dir.display())
    } else if req.intervene.is_some() || !req.ablate.is_empty() {
        "as trained ".to_string()
    } else {
        String::new()
    };
    let own = Measure { betas: req.betas, rows, scores: true, lens: req.lens };
    let ModelRun { eval: e, losses, betas: mut tally, rows: own_rows, scores, lens: mut lens_tally } =
        run_model(&model, &ds, &t, span, windows, own, &label, None)?;
    let mut scores = scores.expect("the model's own run scores its tokens");
    let token_scores = std::mem::take(&mut scores.rows);
    // With --per-token: each run's token losses beside the model's own (column name, losses);
    // with --lens first each earlier state's.
    let mut columns: Vec<(String, Vec<f32>)> = lens_tally
        .iter_mut()
        .enumerate()
        .filter(|_| rows)
        .map(|(s, l)| (format!("lens_{}", lens_state_name(s)), std::mem::take(&mut l.rows)))
        .collect();
    // (With --betas: each token's β per sublayer, after its loss.)
    let beta_columns: Vec<(String, Vec<f32>)> = std::mem::take(&mut tally.tokens)
        .into_iter()
        .enumerate()
        .map(|(s, b)| (crate::model::intervene::sublayer_name(s), b))
        .collect();
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
    // Another evaluation of the same windows against this one, paired by batch: the units are
    // the full batches (a last, partial batch weighs otherwise in the token mean). The
    // differences are this − other, or other − this when `other_first`.
    let full = t.batch_size * seq_len;
    let versus = |other: &ModelRun, other_first: bool| -> Versus {
        let (eo, lo) = (&other.eval, &other.losses);
        let pairs: Vec<(f64, f64)> = losses
            .iter()
            .zip(lo)
            .filter(|((_, n), _)| *n == full)
            .map(|(&(a, _), &(b, _))| if other_first { (b, a) } else { (a, b) })
            .collect();
        let test = crate::stats::Paired::of(&pairs);
        Versus {
            loss: eo.loss,
            perplexity: eo.loss.exp(),
            bits_per_byte: bpb(eo.loss, eo.tokens),
            difference: if other_first { eo.loss - e.loss } else { e.loss - eo.loss },
            pairs: pairs.len(),
            mean_paired_difference: test.map(|p| p.diff.mean),
            ci: test.map(|p| p.diff.ci),
            t: test.map(|p| p.t),
            p: test.map(|p| p.p),
            no_spread: test.is_some_and(|p| p.no_spread),
            accuracy: other.scores.as_ref().map(|theirs| {
                // (this − other, whichever ran first.)
                let (a, b) = if other_first { (theirs, &scores) } else { (&scores, theirs) };
                let pairs: Vec<(f64, f64)> = a
                    .batches
                    .iter()
                    .zip(&b.batches)
                    .zip(&losses)
                    .filter(|(_, (_, n))| *n == full)
                    .map(|((&(ha, na), &(hb, nb)), _)| (ha as f64 / na.max(1) as f64, hb as f64 / nb.max(1) as f64))
                    .collect();
                let test = crate::stats::Paired::of(&pairs);
                let (this, that) = (a.share(a.top1), b.share(b.top1));
                AccuracyVersus {
                    this,
                    other: that,
                    difference: this - that,
                    mean_paired_difference: test.map(|p| p.diff.mean),
                    ci: test.as_ref().map(accuracy_ci),
                    t: test.map(|p| p.t),
                    p: test.map(|p| p.p),
                    no_spread: test.is_some_and(|p| p.no_spread),
                }
            }),
        }
    };
    let intervened = match (&req.intervene, &intervened_maps) {
        (Some(iv), Some(maps)) => {
            let label = format!("{} ", iv.describe());
            let what = Measure { rows, ..Default::default() };
            let mut run = run_model(&model, &ds, &t, span, windows, what, &label, Some(maps))?;
            columns.push(("intervened".into(), std::mem::take(&mut run.rows)));
            Some(Intervened {
                interventions: iv.describe(),
                allow_out_of_range: iv.allow_out_of_range,
                vs: versus(&run, true),
            })
        }
        _ => None,
    };
    let mut ablations = Vec::new();
    if !req.ablate.is_empty() {
        // Sublayer by sublayer, its parts together (the order of the table and the plot).
        let subs = 2 * model.cfg.n_layers;
        let all = subs * req.ablate.len();
        for s in 0..subs {
            let sublayer = crate::model::intervene::sublayer_name(s);
            for &part in &req.ablate {
                let spec = format!("{sublayer}:{}", part.action());
                let maps = crate::model::Interventions::parse(std::slice::from_ref(&spec), false)
                    .and_then(|iv| iv.maps(&model.cfg))
                    .map_err(|e| TrainError::Settings(e.to_string()))?;
                let label = format!("{spec} ({}/{all}) ", ablations.len() + 1);
                let what = Measure { rows, ..Default::default() };
                let mut run = run_model(&model, &ds, &t, span, windows, what, &label, Some(&maps))?;
                columns.push((spec.clone(), std::mem::take(&mut run.rows)));
                ablations.push(Ablation {
                    sublayer: sublayer.clone(),
                    part,
                    spec,
                    vs: versus(&run, true),
                    p_holm: None,
                });
            }
        }
        // Holm over every row (a family fixed by the model and the parts asked for).
        let ps: Vec<f64> = ablations.iter().filter_map(|a| a.vs.p).collect();
        if ps.len() == ablations.len() {
            for (a, h) in ablations.iter_mut().zip(crate::stats::holm(&ps)) {
                a.p_holm = Some(h);
            }
        }
        if let Some(path) = &req.plot {
            plot_ablations(path, &req.ablate, &ablations, t.batch_size)?;
        }
    }
    drop(model);
    let against = match &req.against {
        None => None,
        Some(other) => {
            let ck = super::checkpoint::load_to_device(other, gpu.clone(), false)
                .map_err(|e| super::checkpoint::with_remedy_for_reading(other, "--against", e))
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
            let label = format!("{} ", other.display());
            let what = Measure { rows, scores: true, ..Default::default() };
            let mut run = run_model(&ck.model, &ds, &t, span, windows, what, &label, None)?;
            columns.push(("against".into(), std::mem::take(&mut run.rows)));
            // Paired by batch: the same windows through both models.
            Some(Against { checkpoint: other.display().to_string(), step: ck.step, vs: versus(&run, false) })
        }
    };
    let per_token = match &req.per_token {
        Some(path) => {
            // Window w's row j predicts token w·T + j + 1 of the evaluated tokens.
            let ids: Vec<u32> = (1..=own_rows.len()).map(|i| ds.val.get(i)).collect();
            write_per_token(path, &tok, &ids, &own_rows, &token_scores, &beta_columns, &columns)?;
            Some(path.display().to_string())
        }
        None => None,
    };
    let calibration = scores.calibration();
    let calibration_error = scores.calibration_error();
    let lens = if req.lens { lens_rows(&lens_tally, (e.loss, &scores, &losses), full) } else { Vec::new() };
    if let Some(path) = &req.lens_plot {
        let title = format!(
            "{LENS_PLOT_TITLE} '{}' (step {ck_step}) on {}",
            dir.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
            short_source(&source),
        );
        plot_lens(path, &title, lens_step, &lens)?;
    }
    if let Some(path) = &req.calibration_plot {
        let title = format!(
            "{CALIBRATION_PLOT_TITLE} '{}' (step {ck_step}) on {}: error {calibration_error:.4}",
            dir.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
            short_source(&source),
        );
        let x = format!("p of the likeliest token ({} tokens in 10 bins)", scores.tokens);
        super::plot::reliability_plot(path, &title, &x, &calibration)
            .map_err(|e| TrainError::Settings(format!("--calibration-plot '{}': {e}", path.display())))?;
    }
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
        intervened,
        ablate: req.ablate.clone(),
        ablations,
        ablate_plot: req.plot.as_ref().filter(|_| !req.ablate.is_empty()).map(|p| p.display().to_string()),
        per_token,
        accuracy: scores.share(scores.top1),
        top5_accuracy: scores.share(scores.top5),
        entropy: if scores.tokens > 0 { scores.entropy / scores.tokens as f64 } else { 0.0 },
        calibration_error,
        calibration,
        calibration_plot: req.calibration_plot.as_ref().map(|p| p.display().to_string()),
        lens,
        lens_plot: req.lens_plot.as_ref().map(|p| p.display().to_string()),
        lens_step,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two batches whose accuracies differ by the same count of tokens: "no spread", the sign
    /// test's p = 0.5 and "not distinguishable", where Student's t would have said p = 0 and a
    /// winner. The loss's comparison with spread keeps its t-interval; an ablation without spread
    /// says so in its row and under the table.
    #[test]
    fn comparisons_without_spread_say_so_and_give_the_sign_test() {
        let paired = |pairs: &[(f64, f64)]| crate::stats::Paired::of(pairs).unwrap();
        let loss = paired(&[(2.10, 2.00), (2.30, 2.15)]);
        let acc = paired(&[(0.50, 0.50 - 3.0 / 64.0), (0.25, 0.25 - 3.0 / 64.0)]);
        assert!(!loss.no_spread && acc.no_spread && acc.p == 0.5, "{loss:?} {acc:?}");
        let vs = |t: crate::stats::Paired, accuracy: Option<AccuracyVersus>| Versus {
            loss: 2.075,
            perplexity: 2.075f64.exp(),
            bits_per_byte: None,
            difference: t.diff.mean,
            pairs: 2,
            mean_paired_difference: Some(t.diff.mean),
            ci: Some(t.diff.ci),
            t: Some(t.t),
            p: Some(t.p),
            no_spread: t.no_spread,
            accuracy,
        };
        let accuracy = AccuracyVersus {
            this: 0.375,
            other: 0.375 - 3.0 / 64.0,
            difference: 3.0 / 64.0,
            mean_paired_difference: Some(acc.diff.mean),
            ci: Some(acc.diff.ci),
            t: Some(acc.t),
            p: Some(acc.p),
            no_spread: true,
        };
        let r = EvalResult {
            step: 10,
            source: "'t.txt'".into(),
            split: None,
            loss: 2.2,
            perplexity: 2.2f64.exp(),
            tokens: 128,
            bytes: None,
            bits_per_byte: None,
            seq_len: 16,
            windows: 8,
            whole: true,
            uncounted: 0,
            betas: vec![],
            batch_size: 4,
            against: Some(Against { checkpoint: "runs/b".into(), step: 10, vs: vs(loss, Some(accuracy)) }),
            intervened: None,
            ablate: vec![Ablate::Write],
            ablations: vec![Ablation {
                sublayer: "block0.attn".into(),
                part: Ablate::Write,
                spec: "block0.attn:write=0".into(),
                vs: vs(paired(&[(2.5, 2.2), (2.4, 2.1)]), None),
                p_holm: Some(0.5),
            }],
            ablate_plot: None,
            per_token: None,
            accuracy: 0.375,
            top5_accuracy: 0.8,
            entropy: 1.0,
            calibration_error: 0.0,
            calibration: vec![],
            calibration_plot: None,
            lens: vec![],
            lens_plot: None,
            lens_step: "each sublayer's write",
        };
        let line = r.line();
        assert!(line.contains("mean +0.1250 [") && line.contains("(95 % t-interval, df 1), p = 0."), "{line}");
        assert!(
            line.contains(
                "paired over the same batches: every difference +4.69 points (no spread: no t-test nor interval), \
                 exact sign test p = 0.500: not distinguishable on this text"
            ),
            "{line}"
        );
        assert!(
            line.contains("block0.attn:write=0") && line.contains("no spread") && line.contains("exact sign test's"),
            "{line}"
        );
        assert!(!line.contains("inf") && !line.contains("NaN") && !line.contains("p < 1e-15"), "{line}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["against"]["accuracy"]["no_spread"], true, "{json}");
        assert!(json["against"].get("no_spread").is_none(), "written only when true: {json}");
        // Two batches 80 and 0 points apart: mean +40, t-interval ±508 points at df 1, past what
        // two accuracies can differ by: cut at ±100 and said (it printed [-468.25, +548.25]).
        let wide = AccuracyVersus {
            no_spread: false,
            ci: Some(accuracy_ci(&paired(&[(0.9, 0.1), (0.5, 0.5)]))),
            mean_paired_difference: Some(0.4),
            p: Some(0.5),
            ..r.against.as_ref().unwrap().vs.accuracy.clone().unwrap()
        };
        let mut r = r;
        r.against.as_mut().unwrap().vs.accuracy = Some(wide);
        let line = r.line();
        assert!(
            line.contains("mean +40.00 [-100.00, +100.00] points (95 % t-interval, cut at ±100 points), p = 0.500"),
            "{line}"
        );
        // A text of two bytes at --seq-len 1: "1 token (1 byte)", not "(1 bytes)".
        let r = EvalResult { tokens: 1, bytes: Some(1), windows: 1, seq_len: 1, against: None, ablations: vec![], ..r };
        assert!(r.line().contains(": 1 token (1 byte) in 1 window of 1,"), "{}", r.line());
    }

    #[test]
    fn plot_titles_name_what_was_evaluated_by_its_file_name() {
        let long = "/a/very/long/folder/that/makes/titles/wider/than/their/pictures/corpus.txt";
        assert_eq!(super::short_source(&format!("'{long}'")), "corpus.txt");
        assert_eq!(
            super::short_source(&format!("the validation split of the run's corpus '{long}'")),
            "corpus.txt (validation split)"
        );
        assert_eq!(super::short_source("the training split of the run's shards '/d/web'"), "web (training split)");
        assert_eq!(super::short_source("TinyShakespeare (built in)"), "TinyShakespeare (built in)");
    }
}
