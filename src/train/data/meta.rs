//! A shard set's `meta.json`: what `ddl data prepare` and the `--corpus` cache write beside the
//! shards (counts, the tokenizer, each file's digest), read back, written, and checked against
//! the files (a run's shards verified beside its first steps).

use super::*;

/// Version of the cached shard sets' layout (part of their key).
pub(super) const CACHE_FORMAT: &str = "ddl-corpus-shards-1";

/// What `meta.json` of a shard set holds.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Meta {
    pub format: String,
    /// The tokenizer, as checkpoints store it ([`Tokenizer::to_json`]).
    pub tokenizer: String,
    pub vocab_size: usize,
    pub train_tokens: usize,
    pub val_tokens: usize,
    /// Shard file names with their token counts and SHA-256 digests.
    pub shards: Vec<ShardMeta>,
    /// What the tokens were made from, and how documents are separated.
    #[serde(default)]
    pub source: String,
}

impl Meta {
    /// Where the listed shards' token counts do not add up to a split's recorded size.
    pub(super) fn split_sums_problem(&self) -> Option<String> {
        let sum = |part: &str| self.shards.iter().filter(|s| s.file.contains(part)).map(|s| s.tokens).sum::<usize>();
        [("_train_", "train_tokens", self.train_tokens), ("_val_", "val_tokens", self.val_tokens)]
            .into_iter()
            .find(|&(part, _, total)| sum(part) != total)
            .map(|(part, split, total)| format!("{split} is {total} but its {part} shards list {} tokens", sum(part)))
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ShardMeta {
    pub file: String,
    pub tokens: usize,
    pub sha256: String,
}

/// The error for a shard `file` that the `meta.json` of `folder` lists but the folder lacks.
pub(super) fn listed_but_missing(folder: &Path, file: &str) -> DataError {
    DataError::Meta {
        path: folder.join(file),
        msg: format!(
            "{} lists this shard, which is missing (or not a file): its tokens would be left out; restore it or \
             prepare the data again",
            folder.join("meta.json").display()
        ),
    }
}

/// The first shard of `meta`'s list that `folder` lacks (deleted or moved since `ddl data
/// prepare` wrote the set), as the error that names it.
pub fn missing_listed_shard(meta: &Meta, folder: &Path) -> Option<DataError> {
    meta.shards.iter().find(|sm| !folder.join(&sm.file).is_file()).map(|sm| listed_but_missing(folder, &sm.file))
}

/// Checks shard files against the `meta.json` of their folder: each must be listed there, with
/// the SHA-256 it records (a shard changed or added since `ddl data prepare` wrote the set is an
/// error naming it); with `whole_folder` (the data given as a folder, not a glob), every shard it
/// lists of the splits among `files` must be there too.
pub fn verify_shards(meta: &Meta, folder: &Path, files: &[PathBuf], whole_folder: bool) -> Result<(), DataError> {
    let meta_path = folder.join("meta.json");
    let err = |p: &Path, msg: String| DataError::Meta { path: p.to_path_buf(), msg };
    let names: Vec<String> =
        files.iter().map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()).collect();
    if whole_folder {
        let split_of = |n: &str| if n.contains("_val_") { "_val_" } else { "_train_" };
        for sm in &meta.shards {
            if names.iter().any(|n| split_of(n) == split_of(&sm.file)) && !names.contains(&sm.file) {
                return Err(listed_but_missing(folder, &sm.file));
            }
        }
    }
    for (p, name) in files.iter().zip(&names) {
        let Some(sm) = meta.shards.iter().find(|s| &s.file == name) else {
            return Err(err(
                p,
                format!(
                    "not a shard {} lists: it was not made with the others by `ddl data prepare`; move it out of the \
                     folder, or prepare the data again",
                    meta_path.display()
                ),
            ));
        };
        if file_digest(p)? != sm.sha256 {
            return Err(err(
                p,
                format!(
                    "its SHA-256 differs from the one {} records: the shard changed since `ddl data prepare` wrote \
                     it; prepare the data again",
                    meta_path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Checks a shard folder's `meta.json` against itself and the shards' headers (cheap: no
/// digests, which [`verify_shards`] compares): the listed shards' counts add up to the splits'
/// sizes, each present shard holds the tokens listed for it, and the vocabulary is the
/// tokenizer's. A `meta.json` edited by hand, or of another set, is an error naming it.
pub fn check_meta_counts(meta: &Meta, folder: &Path) -> Result<(), DataError> {
    let meta_path = folder.join("meta.json");
    let bad = |msg: String| DataError::Meta {
        path: meta_path.clone(),
        msg: format!("{msg}: the file does not describe these shards; prepare the data again (`ddl data prepare`)"),
    };
    if let Some(why) = meta.split_sums_problem() {
        return Err(bad(why));
    }
    for sm in &meta.shards {
        let p = folder.join(&sm.file);
        if !p.is_file() {
            continue;
        }
        let n = crate::train::shards::Shard::open(&p, crate::train::shards::Format::Llmc)?.len();
        if n != sm.tokens {
            return Err(bad(format!("it lists {} tokens for {}, whose header says {n}", sm.tokens, sm.file)));
        }
    }
    let vocab = Tokenizer::from_json(&meta.tokenizer)
        .map_err(|e| DataError::Meta {
            path: meta_path.clone(),
            msg: format!(
                "its tokenizer cannot serve a model ({e}); prepare the data again (`ddl data prepare`) with a \
                 tokenizer that loads (`ddl tokenizer encode --tokenizer FILE --text x` checks one)"
            ),
        })?
        .vocab_size();
    if vocab != meta.vocab_size {
        return Err(bad(format!("vocab_size is {} but its tokenizer has {vocab} tokens", meta.vocab_size)));
    }
    Ok(())
}

/// A run's prepared shard set (`--data` with a `meta.json`).
pub(super) struct PreparedSet {
    meta: Meta,
    folder: PathBuf,
    train: Vec<PathBuf>,
    val: Vec<PathBuf>,
    /// Given as a folder (all of it), not a glob.
    whole_folder: bool,
}

/// `run`'s prepared shard set; `None` for a corpus (its cached set is checked as it opens) and
/// for shards without a `meta.json` (llm.c's downloads), which have nothing to check against.
pub(super) fn prepared_set(run: &crate::train::RunConfig) -> Result<Option<PreparedSet>, crate::train::TrainError> {
    use crate::train::shards::{Format, find};
    if run.data.is_empty() {
        return Ok(None);
    }
    let format = Format::parse(&run.data_format).map_err(crate::train::TrainError::Settings)?;
    let (train, val) = find(&run.data, format).map_err(DataError::from)?;
    let folder = train[0].parent().map(Path::to_path_buf).unwrap_or_default();
    let Some(meta) = read_meta(&folder)? else { return Ok(None) };
    Ok(Some(PreparedSet { meta, folder, train, val, whole_folder: Path::new(&run.data).is_dir() }))
}

/// Checks the shards of one split of `run`'s prepared data as [`verify_shards`] does, up to the
/// shard that holds token `upto` (all of them when `None`): what an evaluation of that split reads.
pub fn verify_run_split(
    run: &crate::train::RunConfig,
    val: bool,
    upto: Option<usize>,
) -> Result<(), crate::train::TrainError> {
    let Some(set) = prepared_set(run)? else { return Ok(()) };
    let mut files = if val { set.val } else { set.train };
    if let Some(n) = upto {
        // The shards before the one that holds token `n`, and that one.
        let mut seen = 0;
        let keep = files
            .iter()
            .position(|p| {
                let name = p.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
                seen += set.meta.shards.iter().find(|s| s.file == name).map_or(0, |s| s.tokens);
                seen > n
            })
            .map_or(files.len(), |i| i + 1);
        files.truncate(keep);
    }
    Ok(verify_shards(&set.meta, &set.folder, &files, set.whole_folder && upto.is_none())?)
}

/// The check of a run's prepared shards against their SHA-256s ([`verify_shards`]), on a thread
/// from the run's start: reading gigabytes of shards must not hold the first step back, but no
/// checkpoint is written before it has passed ([`ShardCheck::wait`]).
pub struct ShardCheck(std::thread::JoinHandle<Result<(), DataError>>);

impl ShardCheck {
    /// Starts the check of `run`'s prepared shards; `None` where there is nothing to check
    /// (`prepared_set`).
    pub fn start(run: &crate::train::RunConfig) -> Result<Option<ShardCheck>, crate::train::TrainError> {
        let Some(set) = prepared_set(run)? else { return Ok(None) };
        let files: Vec<PathBuf> = set.train.into_iter().chain(set.val).collect();
        let h = std::thread::Builder::new()
            .name("ddl-shard-check".into())
            .spawn(move || verify_shards(&set.meta, &set.folder, &files, set.whole_folder))
            .map_err(|e| crate::train::TrainError::Settings(format!("cannot start the shards' check: {e}")))?;
        Ok(Some(ShardCheck(h)))
    }

    /// Whether the check has finished (its verdict is then [`ShardCheck::wait`]'s, at once).
    pub fn finished(&self) -> bool {
        self.0.is_finished()
    }

    /// The check's verdict, waiting for it.
    pub fn wait(self) -> Result<(), DataError> {
        self.0.join().unwrap_or_else(|_| {
            Err(DataError::Meta { path: PathBuf::from("(shard check)"), msg: "the check's thread panicked".into() })
        })
    }
}

/// SHA-256 of a file, hex.
pub fn file_digest(path: &Path) -> Result<String, DataError> {
    use sha2::Digest;
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Reads `DIR/meta.json`, `None` when there is none.
pub fn read_meta(dir: &Path) -> Result<Option<Meta>, DataError> {
    let p = dir.join("meta.json");
    if !p.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&p).map_err(|source| DataError::Io { path: p.clone(), source })?;
    serde_json::from_str(&text).map(Some).map_err(|e| DataError::Meta { path: p, msg: e.to_string() })
}

/// [`read_corpus`] of a text that can be read only once (a pipe), saying first that it waits for
/// the pipe's writer (else a pipe nobody writes to looks like a hang).
pub(super) fn read_piped(path: &Path, flag: &str) -> Result<String, DataError> {
    #[cfg(not(unix))]
    let _ = flag;
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo()) {
            eprintln!("note: {flag} {} is a pipe: reading it until its writer closes it", path.display());
        }
    }
    read_corpus(path)
}

/// [`read_meta`] of a `--data` folder: a `meta.json` that does not read is said with what to do.
pub fn read_data_meta(dir: &Path) -> Result<Option<Meta>, DataError> {
    read_meta(dir).map_err(|e| match e {
        DataError::Meta { path, msg } => DataError::Meta {
            path,
            msg: format!(
                "does not read as the meta.json `ddl data prepare` writes ({msg}); prepare the data again, or remove \
                 meta.json to read the shards without it (nothing is then checked)"
            ),
        },
        e => e,
    })
}

/// Writes train and validation shards (`NAME_train_…`, `NAME_val_…`) of `ids` split at `split`
/// into `dir`, with `meta.json`; returns the meta. (A corpus's set from its whole text:
/// [`crate::train::prepare::Corpus::write_set`] writes the same in pieces.)
pub(super) fn write_shard_set(
    dir: &Path,
    name: &str,
    tok: &Tokenizer,
    ids: &[u32],
    split: usize,
    shard_tokens: usize,
    source: &str,
) -> Result<Meta, DataError> {
    let wide = tok.vocab_size() > u16::MAX as usize + 1;
    let mut shards = Vec::new();
    for (part, range) in [("train", 0..split), ("val", split..ids.len())] {
        let mut w = crate::train::shards::Writer::new(dir, name, part, shard_tokens, wide);
        w.push(&ids[range])?;
        shards.extend(w.finish()?);
    }
    finish_meta(dir, tok, shards, split, ids.len() - split, source)
}

/// `meta.json` for shards already written.
pub fn finish_meta(
    dir: &Path,
    tok: &Tokenizer,
    shards: Vec<(PathBuf, usize)>,
    train_tokens: usize,
    val_tokens: usize,
    source: &str,
) -> Result<Meta, DataError> {
    let mut metas = Vec::new();
    for (p, n) in shards {
        let file = p.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        metas.push(ShardMeta { file, tokens: n, sha256: file_digest(&p)? });
    }
    let meta = Meta {
        format: CACHE_FORMAT.into(),
        tokenizer: tok.to_json(),
        vocab_size: tok.vocab_size(),
        train_tokens,
        val_tokens,
        shards: metas,
        source: source.to_string(),
    };
    let p = dir.join("meta.json");
    let text = serde_json::to_string_pretty(&meta).expect("serialisable");
    crate::train::checkpoint::write_atomic(&p, text.as_bytes()).map_err(|source| DataError::Io { path: p, source })?;
    Ok(meta)
}
