//! A run's data: the tokenizer its shards or checkpoint give, the shards it opens (with the
//! splits' lengths checked), the preview `--dry-run` shows, and the record (`data.json`) a
//! resume compares.

use super::*;

/// A run started from a checkpoint's parameters (`--init-from`, its tokenizer `tok`) names no
/// other tokenizer: neither its `tokenizer` file nor its `--data` shards' `meta.json`.
pub fn check_init_tokenizer(
    run: &crate::train::RunConfig,
    tok: &Tokenizer,
    from: &Path,
) -> Result<(), crate::train::TrainError> {
    let other = |what: String, vocab: usize, remedy: &str| {
        crate::train::TrainError::Settings(format!(
            "{what} another tokenizer (vocabulary {vocab}) than --init-from {}'s (vocabulary {}), whose token ids its \
             parameters were trained on: use that checkpoint's tokenizer ({remedy}: `ddl data prepare --tokenizer {} \
             --out DIR TEXT…` takes the checkpoint for its tokenizer)",
            from.display(),
            tok.vocab_size(),
            crate::shell_word(from)
        ))
    };
    if run.tokenizer != "char" && !run.tokenizer.is_empty() {
        let named = crate::train::build_tokenizer(&run.tokenizer, "")?;
        if named.to_json() != tok.to_json() {
            return Err(other(format!("tokenizer = {} is", run.tokenizer), named.vocab_size(), "drop --tokenizer"));
        }
    }
    if let Some((dir, m)) = data_meta(run)?
        && m.tokenizer != tok.to_json()
    {
        return Err(other(
            format!("the shards' {} name", dir.join("meta.json").display()),
            m.vocab_size,
            "prepare the --data shards with it",
        ));
    }
    Ok(())
}

/// The folder of a run's `--data` shards and its `meta.json`, when it has one (`None` also for
/// a `--corpus` run).
pub fn data_meta(run: &crate::train::RunConfig) -> Result<Option<(PathBuf, Meta)>, crate::train::TrainError> {
    if run.data.is_empty() {
        return Ok(None);
    }
    let format = crate::train::shards::Format::parse(&run.data_format).map_err(crate::train::TrainError::Settings)?;
    let (train, _) = crate::train::shards::find(&run.data, format).map_err(DataError::from)?;
    let dir = train[0].parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(read_data_meta(&dir)?.map(|m| (dir, m)))
}

/// The tokenizer of `--data` shards in `dir`: `given` (a resumed or fine-tuned run's), else their
/// `meta.json`'s, else the run's tokenizer file; a file that is not the one the shards were made
/// with is refused.
pub(super) fn shards_tokenizer(
    run: &crate::train::RunConfig,
    given: Option<&Tokenizer>,
    meta: Option<&Meta>,
    dir: &Path,
) -> Result<Tokenizer, crate::train::TrainError> {
    let tok = match (given, meta) {
        (Some(g), _) => g.clone(),
        (None, Some(m)) if run.tokenizer == "char" || run.tokenizer.is_empty() => {
            Tokenizer::from_json(&m.tokenizer).map_err(DataError::from)?
        }
        (None, _) if run.tokenizer == "char" => {
            return Err(crate::train::TrainError::Settings(format!(
                "--data '{}' has no meta.json naming its tokenizer, and a character tokenizer (`char`, the \
                 default) cannot be rebuilt from token ids: pass --tokenizer FILE (the tokenizer.json the shards \
                 were made with, e.g. GPT-2's for llm.c's FineWeb shards), or prepare the text with `ddl data \
                 prepare --tokenizer char`, whose meta.json carries it",
                run.data
            )));
        }
        (None, _) => crate::train::build_tokenizer(&run.tokenizer, "")?,
    };
    if let (Some(m), None) = (meta, given)
        && m.tokenizer != tok.to_json()
        && run.tokenizer != "char"
    {
        return Err(crate::train::TrainError::Settings(format!(
            "{}: the shards were made with another tokenizer (vocabulary {}) than --tokenizer {} (vocabulary {}); \
             drop --tokenizer to use theirs, or prepare the data again with this one",
            dir.join("meta.json").display(),
            m.vocab_size,
            run.tokenizer,
            tok.vocab_size()
        )));
    }
    Ok(tok)
}

/// What a run's data would be, found without making anything (`ddl train --dry-run`).
#[derive(Debug, Clone)]
pub struct DataPreview {
    pub tokenizer: Tokenizer,
    /// Where the tokens come from, in words.
    pub source: String,
    /// The splits' tokens where known without tokenising: the shards', or the corpus's cached
    /// set's (`None`: the corpus is tokenised when the run opens it, and cached then).
    pub tokens: Option<(u64, u64)>,
}

/// The training and validation shards of `--data SPEC` (`shards::find`); where a folder's
/// meta.json lists a split's shards that are gone, those are named (not "prepare it with
/// --val-tokens", which the set was).
pub(super) fn find_shards(
    spec: &str,
    format: crate::train::shards::Format,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), DataError> {
    crate::train::shards::find(spec, format).map_err(|e| {
        let folder = Path::new(spec);
        match read_meta(folder) {
            Ok(Some(m)) if folder.is_dir() => missing_listed_shard(&m, folder).unwrap_or(DataError::from(e)),
            _ => DataError::from(e),
        }
    })
}

/// The tokenizer and the splits' sizes of `run`'s data as [`open_for_run`] would find them, with
/// nothing written: shards are counted from their headers, a corpus's cached set is used when
/// there is a sound one (a damaged one is left as it is, to be made again by the run), else only
/// its tokenizer is made (a char tokenizer reads the corpus once). `given`: a resumed or
/// fine-tuned run's tokenizer.
pub fn preview(
    run: &crate::train::RunConfig,
    given: Option<&Tokenizer>,
) -> Result<DataPreview, crate::train::TrainError> {
    use crate::train::shards::{Format, Shard};
    let count = |files: &[PathBuf], format: Format| -> Result<u64, DataError> {
        files.iter().map(|p| Ok(Shard::open(p, format)?.len() as u64)).sum()
    };
    if !run.data.is_empty() {
        let format = Format::parse(&run.data_format).map_err(crate::train::TrainError::Settings)?;
        let (train, val) = find_shards(&run.data, format)?;
        let dir = train[0].parent().map(Path::to_path_buf).unwrap_or_default();
        let meta = read_data_meta(&dir)?;
        let tokenizer = shards_tokenizer(run, given, meta.as_ref(), &dir)?;
        let tokens = (count(&train, format)?, count(&val, format)?);
        let source = format!("shards {} ({} training, {} validation files)", run.data, train.len(), val.len());
        return Ok(DataPreview { tokenizer, source, tokens: Some(tokens) });
    }
    let root = crate::cache_dir().join("shards");
    let base = corpus_key(&run.corpus, &run.tokenizer, run.train.val_fraction)?;
    let cached = set_problem(&root.join(&base)).ok();
    let from_cache = cached.as_ref().and_then(|m| {
        let t = Tokenizer::from_json(&m.tokenizer).ok()?;
        // (The set of another tokenizer than a resumed run's, or than a tokenizer file's now,
        // is not the one the run would use.)
        let same = match given {
            Some(g) => *g == t,
            None => run.tokenizer == "char" || crate::train::build_tokenizer(&run.tokenizer, "").is_ok_and(|f| f == t),
        };
        same.then_some((t, (m.train_tokens as u64, m.val_tokens as u64)))
    });
    let corpus = if Path::new(&run.corpus) == Path::new(DEFAULT_CORPUS) && !Path::new(DEFAULT_CORPUS).exists() {
        "TinyShakespeare (built in)".to_string()
    } else {
        run.corpus.clone()
    };
    Ok(match from_cache {
        Some((tokenizer, tokens)) => {
            DataPreview { tokenizer, source: format!("corpus {corpus} (its cached shard set)"), tokens: Some(tokens) }
        }
        None => {
            let tokenizer = match given {
                Some(g) => g.clone(),
                None if run.tokenizer == "char" => corpus_char_tokenizer(Path::new(&run.corpus))?,
                None => crate::train::build_tokenizer(&run.tokenizer, "")?,
            };
            DataPreview {
                tokenizer,
                source: format!("corpus {corpus} (not tokenised yet: the run tokenises and caches it when it opens)"),
                tokens: None,
            }
        }
    })
}

/// A `--data` run's shards as found: their format, the two splits' files, their folder and its
/// `meta.json`.
pub(super) struct RunShards {
    format: crate::train::shards::Format,
    train: Vec<PathBuf>,
    val: Vec<PathBuf>,
    dir: PathBuf,
    meta: Option<Meta>,
}

/// `run.data`'s shards found, and checked against the folder's `meta.json` where it has one.
pub(super) fn run_shards(run: &crate::train::RunConfig) -> Result<RunShards, crate::train::TrainError> {
    use crate::train::shards::Format;
    let format = Format::parse(&run.data_format).map_err(crate::train::TrainError::Settings)?;
    let (train, val) = find_shards(&run.data, format)?;
    let dir = train[0].parent().map(Path::to_path_buf).unwrap_or_default();
    let meta = read_data_meta(&dir)?;
    if let Some(m) = &meta
        && format == Format::Llmc
    {
        check_meta_counts(m, &dir)?;
        // A listed shard gone from the folder given: refused now (a stat each), not by the
        // digests' check beside the first steps, after the run's folder was made.
        if let Some(e) = missing_listed_shard(m, &dir).filter(|_| Path::new(&run.data).is_dir()) {
            return Err(e.into());
        }
    }
    Ok(RunShards { format, train, val, dir, meta })
}

/// A split too short for one sequence, said with the data it is a split of.
pub(super) fn too_short(run: &crate::train::RunConfig, e: DataError) -> crate::train::TrainError {
    match e {
        DataError::TooShort { .. } => crate::train::TrainError::Settings(format!("{}: {e}", source_flag(run))),
        e => e.into(),
    }
}

/// A new run's `--data` shards checked before the adapter opens: found (against their
/// `meta.json`), their headers read (memory-mapped: no token is read or tokenised), and each
/// split refused, as [`open_for_run`] refuses it, when it is shorter than one sequence.
pub fn check_run_shards(run: &crate::train::RunConfig) -> Result<(), crate::train::TrainError> {
    use crate::train::shards::Shard;
    let RunShards { format, train, val, .. } = run_shards(run)?;
    let tokens = |files: &[PathBuf]| -> Result<usize, DataError> {
        files.iter().map(|p| Ok(Shard::open(p, format)?.len())).sum()
    };
    let (train, val) = (tokens(&train)?, tokens(&val)?);
    check_split_lengths(train, val, run.train.seq_len).map_err(|e| too_short(run, e))
}

/// Each split holds at least one sequence of `seq_len + 1` tokens.
pub(super) fn check_split_lengths(train: usize, val: usize, seq_len: usize) -> Result<(), DataError> {
    let need = seq_len + 1;
    if train < need {
        return Err(DataError::TooShort { split: "train", have: train, need });
    }
    if val < need {
        return Err(DataError::TooShort { split: "validation", have: val, need });
    }
    Ok(())
}

/// The dataset and tokenizer of a run: `--data` shards (with their `meta.json`'s tokenizer, the
/// run's `tokenizer` file, or `given`), else the corpus's cached shard set. `given`: the
/// tokenizer a resumed run was trained with.
pub fn open_for_run(
    run: &crate::train::RunConfig,
    given: Option<&Tokenizer>,
) -> Result<(Dataset, Tokenizer), crate::train::TrainError> {
    use crate::train::shards::{Format, Shard, Stream, find};
    let t = &run.train;
    let mut stale_sets = None;
    let (train, val, tok, key, folder) = if !run.data.is_empty() {
        let RunShards { format, train, val, dir, meta } = run_shards(run)?;
        let tok = shards_tokenizer(run, given, meta.as_ref(), &dir)?;
        let open = |v: Vec<PathBuf>| -> Result<Stream, DataError> {
            Ok(Stream::new(v.iter().map(|p| Shard::open(p, format)).collect::<Result<Vec<_>, _>>()?))
        };
        let key = fingerprint(&train.iter().chain(&val).cloned().collect::<Vec<_>>())?;
        (open(train)?, open(val)?, tok, key, dir)
    } else {
        let root = crate::cache_dir().join("shards");
        let (dir, tok, stale) = corpus_set_in(&root, &run.corpus, &run.tokenizer, given, t.val_fraction, CORPUS_CHUNK)?;
        stale_sets = Some(stale);
        let (train, val) = find(dir.to_str().unwrap_or_default(), Format::Llmc).map_err(|e| {
            // The shards are the cache's, made from the corpus: a split too small to hold a
            // shard is the corpus's shortness, which the message names.
            if e.to_string().contains("holds no validation shard") {
                crate::train::TrainError::Settings(format!(
                    "--corpus {}: too little text for a validation split (train.val_fraction = {} of it gives no \
                     token): use a longer corpus, or a larger --set train.val_fraction",
                    run.corpus, t.val_fraction
                ))
            } else if e.to_string().contains("holds no training shards") {
                crate::train::TrainError::Settings(format!(
                    "--corpus {}: train.val_fraction = {} leaves no token for training: use a smaller --set \
                     train.val_fraction (the default is 0.1)",
                    run.corpus, t.val_fraction
                ))
            } else {
                DataError::from(e).into()
            }
        })?;
        let open = |v: Vec<PathBuf>| -> Result<Stream, DataError> {
            Ok(Stream::new(v.iter().map(|p| Shard::open(p, Format::Llmc)).collect::<Result<Vec<_>, _>>()?))
        };
        // The tokens' identity: the shards' digests (a corpus file rewritten with the same text
        // gets a new cache key but the same tokens, and a run on it still resumes).
        let key = match read_meta(&dir)? {
            Some(m) => tokens_identity(&m),
            None => dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        };
        (open(train)?, open(val)?, tok, key, dir)
    };
    // The validation split is read whole by evaluation: check its ids once here.
    val.check_vocab(tok.vocab_size(), "the tokenizer's").map_err(DataError::from)?;
    if let Some(p) = train.narrow_for(tok.vocab_size()).or(val.narrow_for(tok.vocab_size())) {
        eprintln!(
            "note: {} stores token ids in 16 bits, but the tokenizer has {} tokens: ids from 65536 up cannot be in \
             it (shards written from this tokenizer's ids in 16 bits lost their upper bits); `ddl data prepare` \
             writes 32-bit shards for such a vocabulary",
            p.display(),
            tok.vocab_size()
        );
    }
    train.advise_random();
    let mut ds = Dataset::new(train, val, t.seq_len, tok.vocab_size(), key).map_err(|e| too_short(run, e))?;
    ds.folder = Some(folder);
    ds.stale_sets = stale_sets;
    Ok((ds, tok))
}

/// The identity of a cached set's tokens (a run's data key): a digest of its shards' digests and
/// token counts.
pub(super) fn tokens_identity(m: &Meta) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for sm in &m.shards {
        h.update(sm.sha256.as_bytes());
        h.update((sm.tokens as u64).to_le_bytes());
    }
    h.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// The [`data_record`] (key and split sizes) a new run with `run`'s `--corpus` settings would
/// train on now, for checks before training (`ddl experiment`'s grid, and its dry run): from the
/// cached set; without one, made in the cache (`write_cache`) or in a temporary folder removed
/// after (a dry run leaves the cache as it was). Removes no earlier set of the corpus (a refused
/// run must not delete the set of the version it asks to restore).
pub fn corpus_record(
    run: &crate::train::RunConfig,
    write_cache: bool,
) -> Result<serde_json::Value, crate::train::TrainError> {
    let m = corpus_meta(run, None, write_cache)?;
    Ok(record(tokens_identity(&m), m.train_tokens, m.val_tokens, run))
}

/// The `meta.json` of `run`'s corpus's cached set as the run would open it (`given`: the
/// tokenizer of the checkpoint it continues): found, or made in the cache (`write_cache`) or in
/// a temporary folder removed after (a dry run leaves the cache as it was).
fn corpus_meta(
    run: &crate::train::RunConfig,
    given: Option<&Tokenizer>,
    write_cache: bool,
) -> Result<Meta, crate::train::TrainError> {
    let root = crate::cache_dir().join("shards");
    let base = corpus_key(&run.corpus, &run.tokenizer, run.train.val_fraction)?;
    // (With `given`, the set found may be another tokenizer's, and one made for it would be
    // written into the cache: a dry run tokenises into the temporary folder.)
    let cached = given.is_none() && cached_set(&root.join(&base))?.is_some();
    let scratch = (!write_cache && !cached).then(|| {
        static NTH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nth = NTH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::env::temp_dir().join(format!("ddl-check-{}-{nth}", std::process::id()))
    });
    let made = find_or_make_set(
        scratch.as_deref().unwrap_or(&root),
        &run.corpus,
        &run.tokenizer,
        given,
        run.train.val_fraction,
        CORPUS_CHUNK,
    );
    let meta = made.and_then(|(dir, _)| {
        read_meta(&dir)?.ok_or_else(|| DataError::Meta { path: dir, msg: "no meta.json".into() }.into())
    });
    if let Some(d) = &scratch {
        let _ = std::fs::remove_dir_all(d);
    }
    meta
}

/// The steps in which a run of `per_step` tokens a step has made `epochs` passes over a training
/// split of `train_tokens` (rounded up, at least 1): `ddl train --epochs`, an experiment spec's
/// `epochs`.
pub fn epoch_steps(epochs: f64, train_tokens: u64, per_step: u64) -> usize {
    ((epochs * train_tokens as f64 / per_step as f64).ceil() as usize).max(1)
}

/// The training split's tokens of the data `run` trains on (`ddl train --epochs`): counted as
/// [`preview`] counts them (shards' headers, the corpus's cached set), else the corpus tokenised
/// into its cached set now, as the run would (`write_cache`; a dry run tokenises into a
/// temporary folder removed after). `from`: a resumed run's checkpoint, whose tokenizer it is;
/// a run started `--init-from` takes that checkpoint's. A corpus that can be read only once (a
/// pipe) is refused: the run could not read it again.
pub fn train_tokens(
    run: &crate::train::RunConfig,
    from: Option<&Path>,
    write_cache: bool,
) -> Result<u64, crate::train::TrainError> {
    let init = (!run.init_from.is_empty()).then(|| PathBuf::from(&run.init_from));
    let given = match from.or(init.as_deref()) {
        Some(dir) => Some(crate::train::checkpoint::saved_tokenizer(dir)?),
        None => None,
    };
    if let Some((train, _)) = preview(run, given.as_ref())?.tokens {
        return Ok(train);
    }
    // (A corpus that cannot be read is said by the tokenising below, as the run says it.)
    if corpus_files(Path::new(&run.corpus)).is_ok_and(|files| files.iter().any(|f| is_pipe(f))) {
        return Err(crate::train::TrainError::Settings(format!(
            "epochs: the corpus {} is a pipe, whose text can be read only once, and epochs need its size before the run reads it: give --steps or --tokens instead (`steps` or `tokens` in an experiment spec), or save the text to a file first",
            run.corpus
        )));
    }
    Ok(corpus_meta(run, given.as_ref(), write_cache)?.train_tokens as u64)
}

/// The record `data.json` a run folder keeps of the data it trains on: what identifies it (the
/// cache key or the shards' fingerprint, the split sizes) and where it came from.
pub fn data_record(ds: &Dataset, run: &crate::train::RunConfig) -> serde_json::Value {
    let mut v = record(ds.key.clone(), ds.split, ds.val.len(), run);
    // (Where the shards are: for a corpus, the cache's set, as `ddl data cache` names it.)
    if let Some(f) = &ds.folder {
        v["folder"] = serde_json::json!(f);
    }
    v
}

/// The file that stands where `path` or a folder above it would be (so that the folder cannot
/// be made), if any.
pub fn file_in_the_way(path: &Path) -> Option<&Path> {
    path.ancestors().find(|a| !a.as_os_str().is_empty() && a.exists() && !a.is_dir())
}

/// The folders that making `path` would create (it and those above it that do not exist),
/// deepest first: what a run that fails removes again.
pub fn missing_folders(path: &Path) -> Vec<PathBuf> {
    path.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.exists()).map(Path::to_path_buf).collect()
}

/// A run's data as the flag that gives it: `--corpus PATH` or `--data PATH`.
pub fn source_flag(run: &crate::train::RunConfig) -> String {
    if run.data.is_empty() { format!("--corpus {}", run.corpus) } else { format!("--data {}", run.data) }
}

/// A [`data_record`] of these tokens (their identity and split sizes) from `run`'s data.
pub(super) fn record(
    key: String,
    train_tokens: usize,
    val_tokens: usize,
    run: &crate::train::RunConfig,
) -> serde_json::Value {
    let source = source_flag(run);
    serde_json::json!({"key": key, "train_tokens": train_tokens, "val_tokens": val_tokens, "source": source})
}

/// The record `data.json` in the run folder `dir`: none (runs older than the record), or `Err`
/// with its path when it is there but malformed.
pub fn saved_data_record(dir: &Path) -> Result<Option<serde_json::Value>, PathBuf> {
    let path = dir.join("data.json");
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(None) };
    serde_json::from_str::<serde_json::Value>(&text).ok().filter(|v| v["key"].is_string()).map(Some).ok_or(path)
}

/// What is said of a malformed `data.json` at `path` when the run is to `doing`.
pub fn malformed_record(path: &Path, doing: &str) -> String {
    format!(
        "{}: not the record of a run's data (malformed), so this run cannot {doing} with the data checked; \
         restore the file (a copy of the run has it), or delete it to go on without the check",
        path.display()
    )
}

/// Checks `ds` against the record `data.json` that a run folder keeps of the data it trained on
/// (`now`, a [`data_record`] of the data at hand: their keys and split sizes): `Err` with both
/// sides when they differ (a run without the record passes; a malformed one is an error).
/// `doing` says what needs the same data.
pub fn check_data_record(
    dir: &Path,
    now: &serde_json::Value,
    doing: &str,
    remedy: &str,
) -> Result<(), crate::train::TrainError> {
    let path = dir.join("data.json");
    let saved = match saved_data_record(dir) {
        // (Runs older than the record have none.)
        Ok(None) => return Ok(()),
        Ok(Some(v)) => v,
        Err(path) => return Err(crate::train::TrainError::Settings(malformed_record(&path, doing))),
    };

    if ["key", "train_tokens", "val_tokens"].iter().all(|k| saved[k] == now[k]) {
        return Ok(());
    }
    // The default corpus's name resolves against the current folder: a file of that name here is
    // read instead of the built-in text, which is most likely what changed.
    let here = Path::new(DEFAULT_CORPUS);
    let note = if now["source"].as_str() == Some(&format!("--corpus {DEFAULT_CORPUS}")) && here.is_file() {
        let at = std::fs::canonicalize(here).unwrap_or_else(|_| here.to_path_buf());
        format!(
            " (the default corpus '{DEFAULT_CORPUS}' was read from {}: the name resolves against the current folder, \
             and the built-in text is used only where no such file is; run from another folder to read the built-in \
             one)",
            at.display()
        )
    } else {
        String::new()
    };
    Err(crate::train::TrainError::Settings(format!(
        "{}: the training data changed since this run started (saved: {} train and {} validation tokens, id {}; \
         now: {} and {}, id {}{note}; the id of shards is their file names, sizes and the digests of their first \
         and last MiB, of a corpus its cache key: the same tokens renamed or cut into other shards count as \
         changed), so this run cannot {doing} on it. {remedy}",
        path.display(),
        saved["train_tokens"],
        saved["val_tokens"],
        saved["key"],
        now["train_tokens"],
        now["val_tokens"],
        now["key"]
    )))
}

/// A cheap fingerprint of a shard set (no full read): each file's name, size, and digests of its
/// first and last MiB. What a resumed run compares.
pub fn fingerprint(files: &[PathBuf]) -> Result<String, DataError> {
    use sha2::Digest;
    use std::io::{Read, Seek, SeekFrom};
    let mut h = sha2::Sha256::new();
    for p in files {
        let io = |source| DataError::Io { path: p.clone(), source };
        let mut f = std::fs::File::open(p).map_err(io)?;
        let len = f.metadata().map_err(io)?.len();
        h.update(p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default().as_bytes());
        h.update(len.to_le_bytes());
        let mut buf = vec![0u8; (len.min(1 << 20)) as usize];
        f.read_exact(&mut buf).map_err(io)?;
        h.update(&buf);
        f.seek(SeekFrom::Start(len - buf.len() as u64)).map_err(io)?;
        f.read_exact(&mut buf).map_err(io)?;
        h.update(&buf);
    }
    Ok(h.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect())
}
