//! The data pipeline. A run reads token shards in llm.c's format by memory map
//! ([`super::shards`]): either a shard set given with `--data` (`ddl data prepare` writes them,
//! llm.c's downloads work as they are), or, for `--corpus`, a shard set the first run makes once
//! in the cache from the UTF-8 corpus (a file, or a directory of .txt files joined by a newline)
//! and later runs open without reading the corpus again (keyed by the files' names, sizes and
//! modification times, the tokenizer and the split). Training batches are sampled by a seeded
//! generator that depends only on (seed, step, micro-batch) — so a resumed run, and every rank
//! of a data-parallel one, sees exactly the batches an uninterrupted single run would; windows
//! cross shard boundaries. Validation is a fixed set of windows over the validation split.

use std::path::{Path, PathBuf};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::tokenizer::Tokenizer;

/// A corpus problem, naming the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("corpus '{0}' does not exist (pass --corpus PATH: a UTF-8 text file or a directory of .txt files)")]
    Missing(PathBuf),
    #[error("corpus '{0}' is a symbolic link that leads nowhere (its target is missing, or the links loop)")]
    BrokenLink(PathBuf),
    #[error(
        "corpus directory '{0}' contains no .txt files (a corpus folder's text files must end in .txt; `ddl data \
         prepare` also reads .jsonl files and subfolders){hint}",
        hint = not_a_corpus(.0)
    )]
    NoTxt(PathBuf),
    #[error(
        "input '{0}' does not exist (ddl data prepare takes text files, folders of .txt / .jsonl files and .jsonl \
         files): check the path, relative to the current folder{hint}",
        hint = built_in_elsewhere(.0)
    )]
    MissingInput(PathBuf),
    #[error("input folder '{0}' holds no .txt or .jsonl files")]
    NoInputFiles(PathBuf),
    #[error(
        "corpus '{0}' is empty: there is no text to learn from; give a text file, or a folder of .txt files, that holds some"
    )]
    Empty(PathBuf),
    #[error("'{0}' is a device, not a text file (a device such as /dev/zero never ends); give a file or a folder")]
    Device(PathBuf),
    /// `ddl data prepare`'s input that is a pipe: read more than once, it blocked.
    #[error(
        "'{0}' is a pipe, which can be read only once as it comes, and `ddl data prepare` reads its inputs more than \
         once; save what it gives to a file first (e.g. `… > text.txt`) and give that"
    )]
    Pipe(PathBuf),
    #[error(
        "'{path}' is not UTF-8 text (first invalid byte at offset {offset}){}",
        match not_a_corpus(path) {
            h if h.is_empty() => ": convert it (e.g. `iconv -f LATIN1 -t UTF-8`), or leave that file out".into(),
            h => h,
        }
    )]
    NotUtf8 { path: PathBuf, offset: usize },
    #[error("cannot read '{path}': {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "'{path}': character {ch:?} at byte {offset} is not among the character tokenizer's {vocab} characters, \
         which are those of the text it was made from (a resumed run's: its corpus has changed since; restore the \
         corpus, or start a new run)"
    )]
    UnknownChar { path: PathBuf, offset: usize, ch: char, vocab: usize },
    /// `ddl data prepare`'s: an input's character the tokenizer lacks (`line`: a JSON-lines
    /// file's line and the byte in its `text`).
    #[error("{}", unknown_in_input(path, *line, *offset, *ch, *vocab))]
    UnknownCharInInput { path: PathBuf, line: Option<(usize, usize)>, offset: usize, ch: char, vocab: usize },
    /// A character the BPE tokenizer has no token for and would drop (no unknown token, no byte
    /// fallback), placed in its file (`line`: a JSON-lines file's line and the byte in its `text`).
    #[error("{}", dropped_in(path, *line, *offset, *ch))]
    DroppedChar { path: PathBuf, line: Option<(usize, usize)>, offset: usize, ch: char },
    #[error("interrupted ({how}): nothing was written to --out", how = crate::train::interruption())]
    Interrupted,
    #[error("cannot write '{path}': {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error(
        "--out {out}: cannot make '{made}' ({source}); the shards are written into a temporary folder \
         beside --out, then moved into place: give an --out in a folder you can write, with room for the shards"
    )]
    OutFolder { out: PathBuf, made: PathBuf, source: std::io::Error },
    #[error(
        "cannot write the shard cache in '{path}': {source}; the corpus is tokenised into the cache once \
         (DDL_CACHE_DIR, else $XDG_CACHE_HOME/ddl or ~/.cache/ddl): set DDL_CACHE_DIR to a writable folder with \
         room for the shards (2 bytes a token, 4 above 65,536 token ids)"
    )]
    Cache { path: PathBuf, source: std::io::Error },
    #[error(
        "interrupted ({how}) while tokenising {0} into the shard cache: a set not finished is not kept (the next \
         use tokenises it again)",
        how = crate::train::interruption()
    )]
    CacheInterrupted(String),
    #[error(
        "'{0}' is a JSON-lines file: read as a text it would be its JSON syntax and all; `ddl data prepare` reads \
         its documents (their `text` fields) into shards for `ddl train --data` and `ddl eval --data` (and \
         `ddl tokenizer train --corpus` trains a tokenizer on them)"
    )]
    JsonLinesAsText(PathBuf),
    #[error("{0}")]
    Tokenize(#[from] crate::tokenizer::TokenizerError),
    #[error(
        "the {split} split has {have} token(s), fewer than one sequence of {need} (seq_len + 1): use a longer corpus, \
         a shorter --set train.seq_len, or (for a split of a --corpus) another --set train.val_fraction"
    )]
    TooShort { split: &'static str, have: usize, need: usize },
    #[error(transparent)]
    Shard(#[from] super::shards::ShardError),
    #[error("{path}: {msg}")]
    Meta { path: PathBuf, msg: String },
    /// A `--corpus` or `--text` file whose size or modification time changed while it was read
    /// into the shard cache: its tokens could mix two versions, and the set would be found again
    /// under the key of the version it started from.
    #[error(
        "{0} changed while it was being tokenised into the shard cache (its size or modification time differ from \
         when it was first read), so its tokens could mix two versions: nothing was cached; run again once the \
         file no longer changes (copy it elsewhere first if something keeps writing it)"
    )]
    ChangedWhileRead(String),
}

/// The default corpus setting: TinyShakespeare, relative to the repository.
pub const DEFAULT_CORPUS: &str = "assets/tinyshakespeare.txt";

/// TinyShakespeare in the binary, so that the default corpus works from any directory.
const EMBEDDED_CORPUS: &str = include_str!("../../assets/tinyshakespeare.txt");

/// The built-in corpus (TinyShakespeare), the default `--corpus`.
pub fn embedded_corpus() -> &'static str {
    EMBEDDED_CORPUS
}

/// For a missing input named as the built-in corpus: where that name is read without the file.
fn built_in_elsewhere(path: &Path) -> String {
    if path != Path::new(DEFAULT_CORPUS) {
        return String::new();
    }
    format!(
        "; the built-in TinyShakespeare is read by this name only by `ddl train --corpus`, `ddl eval --text` and \
         `ddl tokenizer train`: here give the file's path (a checkout's {DEFAULT_CORPUS})"
    )
}

/// What a corpus path is when it is token shards or a run rather than text (`--corpus` given what
/// `--data` or `--checkpoint` takes), said as the remedy; empty when it is neither.
fn not_a_corpus(path: &Path) -> String {
    let shown = path.display();
    if path.is_file() {
        let mut head = [0u8; 4];
        let read = std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head));
        let magic = i32::from_le_bytes(head);
        return match read.is_ok() && [super::shards::MAGIC_U16, super::shards::MAGIC_U32].contains(&magic) {
            true => ": it is a token shard (llm.c's format), not text: give its folder to `ddl train --data` (or `ddl \
                     eval --data`)"
                .into(),
            false => String::new(),
        };
    }
    if super::checkpoint::is_run(path) {
        return format!(
            "; '{shown}' is a run's folder, not text (`ddl info --checkpoint {shown}` names the data it trained on)"
        );
    }
    let bins = std::fs::read_dir(path)
        .map(|d| d.flatten().any(|e| e.path().extension().is_some_and(|x| x == "bin")))
        .unwrap_or(false);
    match bins || path.join("meta.json").is_file() {
        true => format!("; '{shown}' holds token shards, not text: give it as --data {shown}"),
        false => String::new(),
    }
}

/// Reads a corpus: one file, or every `.txt` file of a directory (sorted by name, joined by a
/// newline). The default corpus ([`DEFAULT_CORPUS`]) is the copy in the binary when the current
/// directory has no such file (the same text either way).
pub fn read_corpus(path: &Path) -> Result<String, DataError> {
    use super::prepare::{Corpus, CorpusPart};
    let mut text = String::new();
    for part in Corpus::open(path)?.parts {
        let f = match part {
            CorpusPart::Text(t) => return Ok(t.to_string()),
            CorpusPart::File(f) => f,
        };
        let bytes = std::fs::read(&f).map_err(|source| DataError::Io { path: f.clone(), source })?;
        let s = String::from_utf8(bytes)
            .map_err(|e| DataError::NotUtf8 { path: f.clone(), offset: e.utf8_error().valid_up_to() })?;
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&s);
    }
    if text.is_empty() {
        return Err(DataError::Empty(path.to_path_buf()));
    }
    Ok(text)
}

/// Version of the cached shard sets' layout (part of their key).
const CACHE_FORMAT: &str = "ddl-corpus-shards-1";

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
    fn split_sums_problem(&self) -> Option<String> {
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
fn listed_but_missing(folder: &Path, file: &str) -> DataError {
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
        let n = super::shards::Shard::open(&p, super::shards::Format::Llmc)?.len();
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
struct PreparedSet {
    meta: Meta,
    folder: PathBuf,
    train: Vec<PathBuf>,
    val: Vec<PathBuf>,
    /// Given as a folder (all of it), not a glob.
    whole_folder: bool,
}

/// `run`'s prepared shard set; `None` for a corpus (its cached set is checked as it opens) and
/// for shards without a `meta.json` (llm.c's downloads), which have nothing to check against.
fn prepared_set(run: &crate::train::RunConfig) -> Result<Option<PreparedSet>, crate::train::TrainError> {
    use super::shards::{Format, find};
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
fn read_piped(path: &Path, flag: &str) -> Result<String, DataError> {
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
/// [`super::prepare::Corpus::write_set`] writes the same in pieces.)
fn write_shard_set(
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

/// Why an input path (corpus, tokenizer, data, text) cannot be read as a file or folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathProblem {
    /// Nothing there.
    Missing,
    /// A symbolic link to nothing (its target is missing, or the links loop).
    BrokenLink,
    /// A character or block device, which may never end (/dev/zero).
    Device,
}

/// Whether `path` is a pipe (a FIFO: its text can be read only once, as it comes).
pub fn is_pipe(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

/// What is wrong with `path` as an input, if anything.
pub fn path_problem(path: &Path) -> Option<PathProblem> {
    let Ok(m) = std::fs::metadata(path) else {
        return Some(if std::fs::symlink_metadata(path).is_ok() {
            PathProblem::BrokenLink
        } else {
            PathProblem::Missing
        });
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if m.file_type().is_char_device() || m.file_type().is_block_device() {
            return Some(PathProblem::Device);
        }
    }
    let _ = m;
    None
}

/// The corpus files of a `--corpus` setting (one file, or a directory's sorted .txt files).
pub(crate) fn corpus_files(path: &Path) -> Result<Vec<PathBuf>, DataError> {
    match path_problem(path) {
        Some(PathProblem::Missing) => return Err(DataError::Missing(path.to_path_buf())),
        Some(PathProblem::BrokenLink) => return Err(DataError::BrokenLink(path.to_path_buf())),
        Some(PathProblem::Device) => return Err(DataError::Device(path.to_path_buf())),
        None => {}
    }
    if !path.is_dir() {
        if super::prepare::is_jsonl(path) {
            return Err(DataError::JsonLinesAsText(path.to_path_buf()));
        }
        return Ok(vec![path.to_path_buf()]);
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|source| DataError::Io { path: path.to_path_buf(), source })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "txt") && p.is_file())
        .collect();
    v.sort();
    // A file reached twice (a link to another .txt of the folder) is read once: read twice, its
    // end would be in the validation split and its copy in the training split.
    let mut seen = std::collections::HashSet::new();
    v.retain(|p| seen.insert(p.canonicalize().unwrap_or_else(|_| p.clone())));
    if v.is_empty() {
        return Err(DataError::NoTxt(path.to_path_buf()));
    }
    Ok(v)
}

/// The char tokenizer of a `--corpus` (the characters of its text), read in pieces.
pub fn corpus_char_tokenizer(corpus: &Path) -> Result<Tokenizer, DataError> {
    super::prepare::Corpus::open(corpus)?.char_tokenizer()
}

/// A byte-level BPE of `vocab_size` tokens trained on a `--corpus`'s text, read in pieces
/// (`ddl tokenizer train`).
pub fn train_corpus_bpe(corpus: &Path, vocab_size: usize, bar: bool) -> Result<Tokenizer, DataError> {
    super::prepare::Corpus::open(corpus)?.train_bpe(vocab_size, CORPUS_CHUNK, bar)
}

/// The bytes of a `--corpus`'s text and the tokens `tok` makes of them, read in pieces.
pub fn corpus_token_count(corpus: &Path, tok: &Tokenizer, bar: bool) -> Result<(u64, usize), DataError> {
    super::prepare::Corpus::open(corpus)?.count_tokens(tok, bar)
}

/// A corpus this large (bytes) is said to be tokenised, with a progress bar on a terminal.
const BIG_CORPUS: u64 = 64 << 20;
/// The bytes a `--corpus` is read in at a time (its pieces: [`super::prepare`]).
const CORPUS_CHUNK: usize = 8 << 20;

/// The cache key of a corpus's shard set, from what `stat` tells (no read of the corpus): the
/// files' absolute names, sizes and modification times, the tokenizer setting (a file's size and
/// time) and the validation fraction. A resumed run, which passes the tokenizer it trained with,
/// gets the same key as the run that made the set.
fn corpus_key(corpus: &str, tok_setting: &str, val_fraction: f64) -> Result<String, DataError> {
    let path = Path::new(corpus);
    let embedded = !path.exists() && path == Path::new(DEFAULT_CORPUS);
    key_of((!embedded).then_some(path), tok_setting, val_fraction)
}

/// [`corpus_key`] of the corpus at `corpus` (`None`: the built-in TinyShakespeare).
pub(crate) fn key_of(corpus: Option<&Path>, tok_setting: &str, val_fraction: f64) -> Result<String, DataError> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(CACHE_FORMAT.as_bytes());
    let stat = |h: &mut sha2::Sha256, p: &Path| -> Result<(), DataError> {
        let m = std::fs::metadata(p).map_err(|source| DataError::Io { path: p.to_path_buf(), source })?;
        let t = m.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).unwrap_or_default();
        h.update(std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()).to_string_lossy().as_bytes());
        h.update(m.len().to_le_bytes());
        h.update(t.as_nanos().to_le_bytes());
        Ok(())
    };
    match corpus {
        None => {
            h.update(b"embedded tinyshakespeare");
            h.update((EMBEDDED_CORPUS.len() as u64).to_le_bytes());
        }
        Some(path) => {
            for f in corpus_files(path)? {
                stat(&mut h, &f)?;
            }
        }
    }
    if tok_setting == "char" {
        h.update(b"char");
    } else {
        stat(&mut h, Path::new(tok_setting)).or_else(|_| {
            h.update(tok_setting.as_bytes());
            Ok::<(), DataError>(())
        })?;
    }
    h.update(val_fraction.to_le_bytes());
    Ok(h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect())
}

/// The `--corpus` front end's set, as a run that settles on it at once has it (the tests'): the
/// corpus's cached shard set in the cache folder `root` (made on first use: the corpus read
/// `chunk` bytes at a time, tokenised with `given` or the run's tokenizer setting, split at
/// `val_fraction`) and the tokenizer it was made with, the sets it makes stale removed
/// ([`super::cache::used`]).
#[cfg(test)]
fn corpus_shards_in(
    root: &Path,
    corpus: &str,
    tok_setting: &str,
    given: Option<&Tokenizer>,
    val_fraction: f64,
    chunk: usize,
) -> Result<(PathBuf, Tokenizer), crate::train::TrainError> {
    let (dir, tok, stale) = corpus_set_in(root, corpus, tok_setting, given, val_fraction, chunk)?;
    say_removed(stale, corpus);
    Ok((dir, tok))
}

/// The `--corpus` front end: the corpus's cached shard set in the cache folder `root` (made on
/// first use: the corpus read `chunk` bytes at a time, tokenised with `given` or the run's
/// tokenizer setting, split at `val_fraction`), the tokenizer it was made with, and the sets it
/// makes stale, which the caller removes ([`say_removed`]) once the run settles on the set (a
/// resumed run after its data check: [`Dataset::settle`]).
fn corpus_set_in(
    root: &Path,
    corpus: &str,
    tok_setting: &str,
    given: Option<&Tokenizer>,
    val_fraction: f64,
    chunk: usize,
) -> Result<(PathBuf, Tokenizer, super::cache::Stale), crate::train::TrainError> {
    let (dir, tok) = find_or_make_set(root, corpus, tok_setting, given, val_fraction, chunk)?;
    let stale = super::cache::mark_used(root, &dir, &super::cache::Record::new(corpus, tok_setting, val_fraction));
    Ok((dir, tok, stale))
}

/// Removes the cached sets `stale` names and says so (`corpus`: the run's --corpus).
fn say_removed(stale: super::cache::Stale, corpus: &str) {
    let removed = stale.remove();
    if !removed.is_empty() {
        let bytes: u64 = removed.iter().map(|s| s.1).sum();
        eprintln!(
            "note: removed {} of an earlier version of --corpus {corpus} or of its tokenizer \
             file ({}; `ddl data cache` lists the cache)",
            crate::plural(removed.len(), "cached shard set"),
            super::cache::size(bytes)
        );
    }
}

/// The cached set of the corpus with these settings, made if there is none.
fn find_or_make_set(
    root: &Path,
    corpus: &str,
    tok_setting: &str,
    given: Option<&Tokenizer>,
    val_fraction: f64,
    chunk: usize,
) -> Result<(PathBuf, Tokenizer), crate::train::TrainError> {
    let base = corpus_key(corpus, tok_setting, val_fraction)?;
    // (Before any read, so that a change during the tokenizer's read is caught as well.)
    let before = corpus_stamp(Path::new(corpus));
    let source = super::prepare::Corpus::open(Path::new(corpus))?;
    // A corpus that is not all regular files (a pipe, `<(…)`) can be read once only: held whole.
    let held = if source.regular() { None } else { Some(read_piped(Path::new(corpus), "--corpus")?) };
    // A set made with the tokenizer the settings name is `base`; one made with another
    // (`given`: a resumed run's or evaluation's, the settings' file having changed since) is
    // `base-DIGEST`, never `base`, where a new run on the same settings would take it and train
    // with a tokenizer they do not name.
    let with_digest = |t: &Tokenizer| {
        use sha2::Digest;
        let d = sha2::Sha256::digest(t.to_json().as_bytes());
        format!("{base}-{}", d.iter().take(6).map(|b| format!("{b:02x}")).collect::<String>())
    };
    let settings_tok = || -> Result<Tokenizer, crate::train::TrainError> {
        match (tok_setting, &held) {
            ("char", Some(text)) => Ok(crate::train::build_tokenizer("char", text)?),
            ("char", None) => {
                // Ctrl-C while the corpus is read stops cleanly (and only then: a cached set
                // found is used at once).
                let _ctrlc = crate::train::CtrlcScope::new();
                Ok(source.char_tokenizer().map_err(|e| interrupted_making(e, &format!("--corpus {corpus}")))?)
            }
            _ => crate::train::build_tokenizer(tok_setting, ""),
        }
    };
    let found = cached_set(&root.join(&base))?;
    let (key, tok) = match (given, found) {
        (Some(g), Some(meta)) if g.to_json() == meta.tokenizer => return Ok((root.join(&base), g.clone())),
        (None, Some(meta)) => {
            let theirs = Tokenizer::from_json(&meta.tokenizer).map_err(DataError::from)?;
            // (A tokenizer file's set is checked against the file: an earlier version made sets
            // with a resumed run's tokenizer under `base`.)
            match (tok_setting != "char").then(settings_tok).transpose()? {
                Some(t) if t.to_json() != meta.tokenizer => (with_digest(&t), t),
                _ => return Ok((root.join(&base), theirs)),
            }
        }
        (None, None) => (base.clone(), settings_tok()?),
        (Some(g), found) => {
            let key = with_digest(g);
            if cached_set(&root.join(&key))?.is_some() {
                return Ok((root.join(&key), g.clone()));
            }
            // No set yet: `base` if the settings name this very tokenizer (a resumed run whose
            // cache was removed), else its own.
            let same = found.is_none() && settings_tok().is_ok_and(|t| t.to_json() == g.to_json());
            (if same { base.clone() } else { key }, g.clone())
        }
    };
    let dir = root.join(&key);
    if key != base && cached_set(&dir)?.is_some() {
        return Ok((dir, tok));
    }
    make_set(root, &key, Input { source: &source, held, flag: "--corpus", before }, &tok, val_fraction, chunk)?;
    Ok((dir, tok))
}

/// The tokenizer setting under which `ddl eval --text` caches a text's tokens: the checkpoint's
/// tokenizer by its fingerprint (a run's settings never look like it).
pub(crate) const EVAL_TOKENIZER: &str = "checkpoint tokenizer ";

/// The training shards of the tokens `tok` makes of the text `path` (a file, or a folder's .txt
/// files joined by newlines as a `--corpus`), for `ddl eval --text`: a set of the shard cache
/// with no validation split, made once in pieces (constant memory; what pieces cannot give
/// exactly, read whole) and found again by later evaluations of the text with this tokenizer.
/// The flag: whether this call made the set (a caller that finds the text unusable, e.g.
/// shorter than one window, removes it with [`remove_text_set`] rather than leave it cached).
pub fn text_shards(path: &Path, tok: &Tokenizer) -> Result<(Vec<PathBuf>, bool), crate::train::TrainError> {
    text_shards_in(&crate::cache_dir().join("shards"), path, tok, CORPUS_CHUNK)
}

/// Removes the cached set whose shards [`text_shards`] gave (its folder), best effort: the
/// cache's listing and pruning find what a failure leaves.
pub fn remove_text_set(files: &[PathBuf]) {
    if let Some(dir) = files.first().and_then(|f| f.parent()) {
        let _ = super::cache::remove_set(dir);
    }
}

fn text_shards_in(
    root: &Path,
    path: &Path,
    tok: &Tokenizer,
    chunk: usize,
) -> Result<(Vec<PathBuf>, bool), crate::train::TrainError> {
    let text = path.to_string_lossy();
    let setting = format!("{EVAL_TOKENIZER}{}", tok.fingerprint());
    let key = corpus_key(&text, &setting, 0.0)?;
    let dir = root.join(&key);
    let mut made = false;
    let meta = match cached_set(&dir)? {
        Some(m) if m.tokenizer == tok.to_json() => m,
        found => {
            made = true;
            // (A set of this key with another tokenizer: a fingerprint's collision, replaced.)
            if found.is_some() {
                super::cache::remove_set(&dir).map_err(|source| DataError::Cache { path: dir.clone(), source })?;
            }
            let before = corpus_stamp(path);
            let source = super::prepare::Corpus::open(path)?;
            let held = if source.regular() { None } else { Some(read_piped(path, "--text")?) };
            make_set(root, &key, Input { source: &source, held, flag: "--text", before }, tok, 0.0, chunk)?;
            read_meta(&dir)?.ok_or_else(|| DataError::Meta { path: dir.clone(), msg: "no meta.json".into() })?
        }
    };
    let removed = super::cache::used(root, &dir, &super::cache::Record::new(&text, &setting, 0.0));
    if !removed.is_empty() {
        eprintln!("note: removed {} cached token set(s) of an earlier version of --text {text}", removed.len());
    }
    Ok((meta.shards.iter().filter(|s| s.file.contains("_train_")).map(|s| dir.join(&s.file)).collect(), made))
}

/// An interruption of the making of a set said as such (`what`: `--corpus PATH`, `--text PATH`).
fn interrupted_making(e: DataError, what: &str) -> DataError {
    match e {
        DataError::Interrupted => DataError::CacheInterrupted(what.to_string()),
        e => e,
    }
}

/// What a set is made of: the corpus (or text) `source`, `held` its text when it could be read
/// only once, `flag` the setting that named it (`--corpus`, `--text`), for messages, and
/// `before` its files' [`corpus_stamp`] before it was first read (a set of a corpus that changed
/// meanwhile is not kept).
struct Input<'a> {
    source: &'a super::prepare::Corpus,
    held: Option<String>,
    flag: &'a str,
    before: Option<String>,
}

/// What `stat` tells of the corpus at `path` (its files' names, sizes and modification times),
/// `None` where it is no file or folder (the built-in TinyShakespeare, a pipe read whole).
fn corpus_stamp(path: &Path) -> Option<String> {
    key_of(Some(path), "char", 0.0).ok()
}

/// Makes the shard set `root/key` of `input` with `tok` (read `chunk` bytes at a time unless
/// held) and checks it.
fn make_set(
    root: &Path,
    key: &str,
    input: Input<'_>,
    tok: &Tokenizer,
    val_fraction: f64,
    chunk: usize,
) -> Result<(), DataError> {
    let Input { source, held, flag, before } = input;
    let dir = root.join(key);
    // Ctrl-C stops cleanly: nothing half-made is left.
    let _ctrlc = crate::train::CtrlcScope::new();
    let corpus = source.path.display().to_string();
    let corpus = corpus.as_str();
    let what = format!("{flag} {corpus}");
    // Built in a private folder, renamed into place complete (a concurrent maker's copy wins):
    // private to this call, not only to the process, since the runs of `ddl experiment --jobs`
    // are threads of one process that may all make the same set at once. What a killed maker
    // left (of any corpus) is removed by the next.
    static MAKER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nth = MAKER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    remove_stale_makers(root);
    // Another process making this very set (the ranks of one machine under mpirun, runs started
    // together): waited for, and its set taken, rather than every one tokenising the corpus.
    if wait_for_other_maker(root, key, &what).map_err(|e| interrupted_making(e, &what))?
        && cached_set(&dir)?.is_some_and(|m| m.tokenizer == tok.to_json())
    {
        return Ok(());
    }
    let tmp = root.join(format!(".{key}{MAKING}{}.{nth}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|source| DataError::Cache { path: root.to_path_buf(), source })?;
    let _scrap = crate::train::Scrap::new(&tmp);
    let bytes = source.bytes();
    let big = bytes >= BIG_CORPUS;
    if big {
        eprintln!(
            "note: tokenising {what} ({:.1} MiB) into the shard cache {} once; later uses of it start at once",
            bytes as f64 / (1 << 20) as f64,
            dir.display()
        );
    }
    let shard_tokens = 100_000_000;
    let held_was_piped = held.is_some();
    let made = match held {
        // Pieces give the whole text's tokens: read in pieces.
        None if tok.cuts_exactly() => source.write_set(&tmp, &what, tok, val_fraction, shard_tokens, chunk, big),
        // Else the text whole, encoded at once (a tokenizer with a normaliser or a prefix space, a
        // pipe).
        held => (|| {
            let text = match held {
                Some(t) => t,
                None => read_corpus(Path::new(corpus))?,
            };
            let ids = tok.encode(&text).map_err(|e| source.locate(e.into()))?;
            let split = ((ids.len() as f64) * (1.0 - val_fraction)).round() as usize;
            write_shard_set(&tmp, "corpus", tok, &ids, split, shard_tokens, &what)
        })(),
    };
    // A corpus that changed while it was read: its tokens may mix versions (and its tokenizer,
    // read before, may lack a character the new version has: said as the change it is).
    if !held_was_piped
        && before.is_some()
        && !matches!(made, Err(DataError::Interrupted))
        && corpus_stamp(&source.path) != before
    {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(DataError::ChangedWhileRead(what));
    }
    made.map_err(|e| {
        let _ = std::fs::remove_dir_all(&tmp);
        match interrupted_making(e, &what) {
            DataError::Write { source, .. } | DataError::Shard(super::shards::ShardError::Write { source, .. }) => {
                DataError::Cache { path: root.to_path_buf(), source }
            }
            DataError::Io { path, source } if path.starts_with(&tmp) => {
                DataError::Cache { path: root.to_path_buf(), source }
            }
            e => e,
        }
    })?;
    if std::fs::rename(&tmp, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    // Ours, or a concurrent maker's; checked whole either way (what is there is what trains).
    if let Err(why) = set_problem(&dir) {
        return Err(DataError::Meta {
            path: dir,
            msg: format!(
                "the cached shard set could not be made ({why}): remove the folder, or set DDL_CACHE_DIR to another \
                 cache"
            ),
        });
    }
    // Ctrl-C after the last piece: the set is whole and kept, and the command stops as asked
    // (a command that went on would not look at it again: `ddl eval` ran to its end).
    if crate::train::interrupted() {
        return Err(DataError::CacheInterrupted(what));
    }
    Ok(())
}

/// The part of a maker's temporary folder's name (`.KEY.make-PID.N`) before its process id.
pub(crate) const MAKING: &str = ".make-";

/// Waits while another live process of this machine makes the set `key` in `root` (its maker's
/// folder `.KEY.make-PID.N` is there), saying so once; `true` if it waited. Ctrl-C stops the
/// wait. Threads of this process (`ddl experiment --jobs`) make their own copies, as before.
fn wait_for_other_maker(root: &Path, key: &str, what: &str) -> Result<bool, DataError> {
    let prefix = format!(".{key}{MAKING}");
    let other = || -> Option<u32> {
        std::fs::read_dir(root).ok()?.flatten().find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid: u32 = name.strip_prefix(&prefix)?.split('.').next()?.parse().ok()?;
            (pid != std::process::id() && super::lock::alive(pid) == Some(true)).then_some(pid)
        })
    };
    let Some(pid) = other() else { return Ok(false) };
    eprintln!("{}", waiting_note(pid, what, root));
    while other().is_some() {
        if crate::train::interrupted() {
            return Err(DataError::Interrupted);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    Ok(true)
}

/// What [`wait_for_other_maker`] says while process `pid` makes the set of `what` in `root`.
fn waiting_note(pid: u32, what: &str, root: &Path) -> String {
    format!(
        "note: waiting for process {pid}, which is tokenising {what} into the shard cache {} (another run, or \
         another rank of this machine): its set is then used",
        root.display()
    )
}

/// Removes the temporary folders of makers, of any set, whose process is gone (killed).
fn remove_stale_makers(root: &Path) {
    super::prepare::remove_dead_writers(root, |name| Some(name.strip_prefix('.')?.rsplit_once(MAKING)?.1));
}

/// What is wrong with the shard set in `dir`, if anything: its `meta.json` must read and its
/// shards' token counts add up to the split sizes it records; the folder's shard files must be
/// exactly the ones it lists, each with the SHA-256 it records.
pub(crate) fn set_problem(dir: &Path) -> Result<Meta, String> {
    let meta = match read_meta(dir) {
        Err(e) => return Err(format!("its meta.json does not read: {e}")),
        Ok(None) => return Err("it has no meta.json".into()),
        Ok(Some(m)) => m,
    };
    if meta.split_sums_problem().is_some() {
        return Err("its meta.json's token counts do not add up".into());
    }
    let entries = std::fs::read_dir(dir).map_err(|e| format!("it does not list: {e}"))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".bin") && !meta.shards.iter().any(|s| s.file == name) {
            return Err(format!("{name} is not in its meta.json"));
        }
    }
    for sm in &meta.shards {
        let p = dir.join(&sm.file);
        match file_digest(&p) {
            Err(e) => return Err(e.to_string()),
            Ok(d) if d != sm.sha256 => {
                return Err(format!("{} has another SHA-256 than its meta.json records", p.display()));
            }
            Ok(_) => {}
        }
    }
    Ok(meta)
}

/// The cached shard set in `dir`, checked whole ([`set_problem`]: reading the set once costs a
/// fraction of making it again). A damaged set — a shard changed, cut short, gone or added, the
/// meta unreadable or gone, the folder a file — is derived data: it is moved aside and removed
/// with a note, and `None` tells the caller to make it again from the corpus. A set that cannot be
/// moved aside is an error (it is never trained on). A set another maker renames into place at
/// that moment is found complete or not at all (the rename is atomic).
fn cached_set(dir: &Path) -> Result<Option<Meta>, DataError> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Ok(None);
    }
    let why = match set_problem(dir) {
        Ok(meta) => return Ok(Some(meta)),
        Err(why) => why,
    };
    eprintln!("note: the cached shard set {} is damaged ({why}); making it again from the corpus", dir.display());
    // Aside first (one rename: a concurrent run that found the same damage finds it gone), then
    // removed; a run that has the old shards mapped keeps its mapping.
    match super::cache::move_aside(dir, super::cache::DAMAGED) {
        Ok(Some(aside)) => {
            // (A "set" that is a file is damaged too.)
            if std::fs::remove_dir_all(&aside).is_err() {
                let _ = std::fs::remove_file(&aside);
            }
            Ok(None)
        }
        // Another run moved it first.
        Ok(None) => Ok(None),
        Err(e) => Err(DataError::Meta {
            path: dir.to_path_buf(),
            msg: format!(
                "the cached shard set is damaged ({why}) and cannot be moved aside ({e}): remove the folder, or set \
                 DDL_CACHE_DIR to another cache"
            ),
        }),
    }
}

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
            from.display()
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
    let format = super::shards::Format::parse(&run.data_format).map_err(crate::train::TrainError::Settings)?;
    let (train, _) = super::shards::find(&run.data, format).map_err(DataError::from)?;
    let dir = train[0].parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(read_data_meta(&dir)?.map(|m| (dir, m)))
}

/// The tokenizer of `--data` shards in `dir`: `given` (a resumed or fine-tuned run's), else their
/// `meta.json`'s, else the run's tokenizer file; a file that is not the one the shards were made
/// with is refused.
fn shards_tokenizer(
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
fn find_shards(spec: &str, format: super::shards::Format) -> Result<(Vec<PathBuf>, Vec<PathBuf>), DataError> {
    super::shards::find(spec, format).map_err(|e| {
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
    use super::shards::{Format, Shard};
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
struct RunShards {
    format: super::shards::Format,
    train: Vec<PathBuf>,
    val: Vec<PathBuf>,
    dir: PathBuf,
    meta: Option<Meta>,
}

/// `run.data`'s shards found, and checked against the folder's `meta.json` where it has one.
fn run_shards(run: &crate::train::RunConfig) -> Result<RunShards, crate::train::TrainError> {
    use super::shards::Format;
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
fn too_short(run: &crate::train::RunConfig, e: DataError) -> crate::train::TrainError {
    match e {
        DataError::TooShort { .. } => crate::train::TrainError::Settings(format!("{}: {e}", source_flag(run))),
        e => e.into(),
    }
}

/// A new run's `--data` shards checked before the adapter opens: found (against their
/// `meta.json`), their headers read (memory-mapped: no token is read or tokenised), and each
/// split refused, as [`open_for_run`] refuses it, when it is shorter than one sequence.
pub fn check_run_shards(run: &crate::train::RunConfig) -> Result<(), crate::train::TrainError> {
    use super::shards::Shard;
    let RunShards { format, train, val, .. } = run_shards(run)?;
    let tokens = |files: &[PathBuf]| -> Result<usize, DataError> {
        files.iter().map(|p| Ok(Shard::open(p, format)?.len())).sum()
    };
    let (train, val) = (tokens(&train)?, tokens(&val)?);
    check_split_lengths(train, val, run.train.seq_len).map_err(|e| too_short(run, e))
}

/// Each split holds at least one sequence of `seq_len + 1` tokens.
fn check_split_lengths(train: usize, val: usize, seq_len: usize) -> Result<(), DataError> {
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
    use super::shards::{Format, Shard, Stream, find};
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
fn tokens_identity(m: &Meta) -> String {
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
    let root = crate::cache_dir().join("shards");
    let base = corpus_key(&run.corpus, &run.tokenizer, run.train.val_fraction)?;
    let cached = cached_set(&root.join(&base))?.is_some();
    let scratch = (!write_cache && !cached).then(|| {
        static NTH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nth = NTH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::env::temp_dir().join(format!("ddl-check-{}-{nth}", std::process::id()))
    });
    let made = find_or_make_set(
        scratch.as_deref().unwrap_or(&root),
        &run.corpus,
        &run.tokenizer,
        None,
        run.train.val_fraction,
        CORPUS_CHUNK,
    );
    let meta = made.and_then(|(dir, _)| {
        read_meta(&dir)?.ok_or_else(|| DataError::Meta { path: dir, msg: "no meta.json".into() }.into())
    });
    if let Some(d) = &scratch {
        let _ = std::fs::remove_dir_all(d);
    }
    let m = meta?;
    Ok(record(tokens_identity(&m), m.train_tokens, m.val_tokens, run))
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
fn record(key: String, train_tokens: usize, val_tokens: usize, run: &crate::train::RunConfig) -> serde_json::Value {
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

/// Train and validation streams, the batch sampler and the validation windows.
pub struct Dataset {
    pub train: super::shards::Stream,
    pub val: super::shards::Stream,
    /// Tokens of the training split (`get(i)` reads `[0, split)` from it, the rest from `val`).
    pub split: usize,
    vocab: usize,
    /// Names the data (the cache key or the shards' fingerprint): data-parallel ranks and resumed
    /// runs compare it.
    pub key: String,
    /// The shards' folder: a `--data` folder, or the cache's set of a `--corpus` (`ddl data
    /// cache` lists it by this name).
    pub folder: Option<PathBuf>,
    /// The cached sets a `--corpus` run's set makes stale: removed by [`Dataset::settle`].
    stale_sets: Option<super::cache::Stale>,
}

impl Dataset {
    pub fn new(
        train: super::shards::Stream,
        val: super::shards::Stream,
        seq_len: usize,
        vocab: usize,
        key: String,
    ) -> Result<Dataset, DataError> {
        check_split_lengths(train.len(), val.len(), seq_len)?;
        Ok(Dataset { split: train.len(), train, val, vocab, key, folder: None, stale_sets: None })
    }

    /// A dataset to evaluate on alone: `tokens` as its validation split and no training split
    /// (`train_batch` refuses). `ddl eval --text` / `--data`, and `--split train`.
    pub fn for_evaluation(
        tokens: super::shards::Stream,
        seq_len: usize,
        vocab: usize,
        key: String,
    ) -> Result<Dataset, DataError> {
        let need = seq_len + 1;
        if tokens.len() < need {
            return Err(DataError::TooShort { split: "evaluated", have: tokens.len(), need });
        }
        Ok(Dataset {
            split: 0,
            train: super::shards::Stream::new(Vec::new()),
            val: tokens,
            vocab,
            key,
            folder: None,
            stale_sets: None,
        })
    }

    /// The run trains on this data (a resumed run: its data checked): the cached sets of an
    /// earlier version of its `--corpus` (or of its tokenizer file), which no run can find again,
    /// are removed and said. Until then a refused run leaves the cache as it found it.
    pub fn settle(&mut self, corpus: &str) {
        if let Some(stale) = self.stale_sets.take() {
            say_removed(stale, corpus);
        }
    }

    /// Tokens in the whole stream (train and validation).
    pub fn len(&self) -> usize {
        self.train.len() + self.val.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Token `i` of the train stream followed by the validation stream.
    pub fn get(&self, i: usize) -> u32 {
        if i < self.split { self.train.get(i) } else { self.val.get(i - self.split) }
    }

    /// The training batch of (step, micro-batch): a pure function of the seed and position
    /// (windows anywhere in the training split, across shard boundaries). A token id outside the
    /// vocabulary is an error naming its shard.
    pub fn train_batch(
        &self,
        seed: u64,
        step: usize,
        micro: usize,
        b: usize,
        t: usize,
    ) -> Result<(Vec<i32>, Vec<i32>), DataError> {
        if self.split <= t {
            return Err(DataError::TooShort { split: "train", have: self.split, need: t + 1 });
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(((step as u64) << 16) | micro as u64);
        let mut x = Vec::with_capacity(b * t);
        let mut y = Vec::with_capacity(b * t);
        for _ in 0..b {
            let s = rng.random_range(0..=self.split - t - 1);
            for i in 0..t {
                x.push(self.train.get(s + i) as i32);
                y.push(self.train.get(s + i + 1) as i32);
            }
            self.train.release(s, t + 1);
        }
        if let Some(i) = x.iter().chain(&y).position(|&id| id as usize >= self.vocab) {
            // Rare: find the shard for the message.
            self.train.check_vocab(self.vocab, "the model's")?;
            return Err(DataError::Meta {
                path: PathBuf::from("training shards"),
                msg: format!("token {} outside the vocabulary of {}", x.iter().chain(&y).nth(i).unwrap(), self.vocab),
            });
        }
        Ok((x, y))
    }

    /// Validation windows of `t` tokens (and their next-token targets): consecutive,
    /// non-overlapping, from the start of the validation split — all of it.
    pub fn val_windows(&self, t: usize) -> usize {
        (self.val.len() - 1) / t
    }

    /// Windows `first .. first + b` as a batch (rows past the last window: no targets).
    pub fn val_batch(&self, first: usize, b: usize, t: usize) -> (Vec<i32>, Vec<i32>) {
        let n = self.val_windows(t);
        let mut x = vec![0i32; b * t];
        let mut y = vec![-1i32; b * t];
        for r in 0..b {
            let w = first + r;
            if w >= n {
                break;
            }
            for i in 0..t {
                x[r * t + i] = self.val.get(w * t + i) as i32;
                y[r * t + i] = self.val.get(w * t + i + 1) as i32;
            }
        }
        // Windows are read in order: drop the pages of this batch's (the last one is shared
        // with the next batch's first window and is faulted in again, from the page cache).
        let rows = b.min(n.saturating_sub(first));
        if rows > 0 {
            self.val.release(first * t, rows * t);
        }
        (x, y)
    }
}

/// Where character `ch` is in an input: its byte, or a JSON-lines file's line and the byte in
/// its `text`.
fn char_at(line: Option<(usize, usize)>, offset: usize, ch: char) -> String {
    match line {
        Some((n, b)) => format!("line {n}: character {ch:?} at byte {b} of its text"),
        None => format!("character {ch:?} at byte {offset}"),
    }
}

/// [`DataError::DroppedChar`]'s message.
fn dropped_in(path: &Path, line: Option<(usize, usize)>, offset: usize, ch: char) -> String {
    let at = char_at(line, offset, ch);
    format!(
        "'{}': {at} has no token in the BPE tokenizer, which has neither an unknown token nor byte fallback, so it \
         would be dropped without a word: take it out of the text, or use a tokenizer that covers it (`ddl \
         tokenizer train` writes a byte-level BPE, which covers every byte)",
        path.display()
    )
}

/// [`DataError::UnknownCharInInput`]'s message.
fn unknown_in_input(path: &Path, line: Option<(usize, usize)>, offset: usize, ch: char, vocab: usize) -> String {
    let at = char_at(line, offset, ch);
    format!(
        "'{}': {at} is not among the {vocab} characters of the --tokenizer's character tokenizer (those of the \
         text its model was trained on): take it out of the input, or prepare for a new model with --tokenizer \
         char (the inputs' own characters) or a byte-level BPE (`ddl tokenizer train`)",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The note of a wait for another maker reads as one sentence (it had ten spaces in the
    /// middle: "another run, or          another rank").
    #[test]
    fn the_note_of_a_wait_for_another_maker_has_no_run_of_spaces() {
        let note = waiting_note(7, "--corpus c.txt", Path::new("/cache/shards"));
        assert!(note.contains("(another run, or another rank of this machine)"), "{note}");
        assert!(!note.contains("  "), "{note}");
    }

    /// Token shards or a run given where text goes (`--corpus`), and text or a run given where
    /// shards go (`--data`), say what they are and what to give instead (the messages named the
    /// missing .txt files, "not UTF-8" with `iconv` as the remedy, or a missing shard alone).
    #[test]
    fn shards_text_and_runs_given_for_each_other_are_named() {
        let root = crate::testing::scratch_dir("data-not-a-corpus");
        let shards = root.join("shards");
        std::fs::create_dir_all(&shards).unwrap();
        let shard = shards.join("data_val_000000.bin");
        let mut bytes = vec![0u8; 1024 + 8];
        bytes[..4].copy_from_slice(&super::super::shards::MAGIC_U16.to_le_bytes());
        bytes[100] = 0xff;
        std::fs::write(&shard, &bytes).unwrap();
        let e = read_corpus(&shards).unwrap_err().to_string();
        assert!(e.contains("holds token shards, not text: give it as --data"), "{e}");
        let e = read_corpus(&shard).unwrap_err().to_string();
        assert!(e.contains("not UTF-8") && e.contains("it is a token shard") && !e.contains("iconv"), "{e}");
        let latin1 = root.join("latin1.txt");
        std::fs::write(&latin1, b"caf\xe9").unwrap();
        let e = read_corpus(&latin1).unwrap_err().to_string();
        assert!(e.contains("iconv") && !e.contains("token shard"), "{e}");

        let run = root.join("run");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(run.join("metrics.jsonl"), "").unwrap();
        let e = read_corpus(&run).unwrap_err().to_string();
        assert!(e.contains("is a run's folder, not text"), "{e}");
        let fmt = super::super::shards::Format::Llmc;
        let e = super::super::shards::find(run.to_str().unwrap(), fmt).unwrap_err().to_string();
        assert!(e.contains("is a run's folder, not token shards"), "{e}");
        // (`ddl data inspect` of a run's folder said only that it holds no shards.)
        let o = crate::train::inspect::InspectOptions {
            data: run.to_str().unwrap().to_string(),
            format: fmt,
            tokenizer: None,
            split: crate::train::inspect::Split::Train,
            at: 0,
            sample: 0,
            verify: false,
            progress: false,
        };
        let e = crate::train::inspect::inspect(&o).unwrap_err().to_string();
        assert!(e.contains("holds no shards") && e.contains("is a run's folder, not token shards"), "{e}");

        let text = root.join("play.txt");
        std::fs::write(&text, "To be, or not to be").unwrap();
        for given in [&text, &root] {
            let e = super::super::shards::find(given.to_str().unwrap(), fmt).unwrap_err().to_string();
            assert!(e.contains("is text, not token shards: give it as --corpus"), "{given:?}: {e}");
        }
    }

    /// A set another live process is making (the ranks of one machine under mpirun) is waited
    /// for and taken, not tokenised again by every process; a killed maker's is not waited for.
    #[test]
    fn a_set_another_process_makes_is_waited_for_and_taken() {
        let dir = crate::testing::scratch_dir("cache-wait");
        let corpus = dir.join("c.txt");
        std::fs::write(&corpus, "to be or not to be, that is the question\n".repeat(40)).unwrap();
        let c = corpus.to_str().unwrap().to_string();
        let key = corpus_key(&c, "char", 0.1).unwrap();
        // The other maker's set, made beforehand in another cache, and its live process.
        let elsewhere = dir.join("elsewhere");
        let (made, _) = corpus_shards_in(&elsewhere, &c, "char", None, 0.1, CORPUS_CHUNK).unwrap();
        let mut other = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let root = dir.join("cache");
        let making = root.join(format!(".{key}{MAKING}{}.0", other.id()));
        std::fs::create_dir_all(&making).unwrap();
        let waiter = {
            let (root, c) = (root.clone(), c.clone());
            std::thread::spawn(move || corpus_shards_in(&root, &c, "char", None, 0.1, CORPUS_CHUNK).map(|r| r.0))
        };
        std::thread::sleep(std::time::Duration::from_millis(600));
        let mine = hidden_entries(&root).into_iter().filter(|n| !making.ends_with(n)).collect::<Vec<_>>();
        assert!(mine.is_empty() && !root.join(&key).exists(), "it made its own set: {mine:?}");
        // The other finishes: its set in place, its maker's folder gone.
        std::fs::rename(&made, root.join(&key)).unwrap();
        std::fs::remove_dir(&making).unwrap();
        let stamp = |d: &Path| std::fs::metadata(d.join("meta.json")).unwrap().modified().unwrap();
        let before = stamp(&root.join(&key));
        assert_eq!(waiter.join().unwrap().unwrap(), root.join(&key));
        assert_eq!(stamp(&root.join(&key)), before, "the other process's set was made again");
        // A maker whose process is gone is not waited for: the set is made.
        other.kill().unwrap();
        other.wait().unwrap();
        std::fs::remove_dir_all(root.join(&key)).unwrap();
        std::fs::create_dir_all(&making).unwrap();
        let t = std::time::Instant::now();
        let (d, _) = corpus_shards_in(&root, &c, "char", None, 0.1, CORPUS_CHUNK).unwrap();
        assert!(d.join("meta.json").is_file() && !making.exists());
        assert!(t.elapsed() < std::time::Duration::from_secs(20));
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A corpus edited while it is tokenised into the cache (its stamp, taken before the first
    /// read, no longer what `stat` tells once the set is made) is not cached under the key of the
    /// version it started from (it was: the next run found a set that could mix two versions):
    /// refused, saying so, with nothing left in the cache; unchanged, the set is made.
    #[test]
    fn a_corpus_that_changes_while_it_is_read_is_not_cached() {
        let dir = crate::testing::scratch_dir("data-corpus-changed");
        let root = dir.join("cache");
        let corpus = dir.join("c.txt");
        std::fs::write(&corpus, &embedded_corpus()[..5000]).unwrap();
        let tok = corpus_char_tokenizer(&corpus).unwrap();
        let before = corpus_stamp(&corpus);
        assert!(before.is_some());
        // Edited after the stamp (as if while the set was made).
        std::fs::write(&corpus, &embedded_corpus()[..6000]).unwrap();
        let source = super::super::prepare::Corpus::open(&corpus).unwrap();
        let input = Input { source: &source, held: None, flag: "--corpus", before };
        let e = make_set(&root, "0123456789abcdef01234567", input, &tok, 0.1, 1024).unwrap_err();
        assert!(matches!(e, DataError::ChangedWhileRead(_)), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("c.txt") && msg.contains("changed while") && msg.contains("run again"), "{msg}");
        let left: Vec<_> = std::fs::read_dir(&root).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "left in the cache: {left:?}");
        // (Its tokenizer, read before the edit, lacks a character the new version has: the
        // change is what the error said, not that character.) Unchanged since its stamp, with
        // the tokenizer of what it holds now: made and whole.
        let tok = corpus_char_tokenizer(&corpus).unwrap();
        let input = Input { source: &source, held: None, flag: "--corpus", before: corpus_stamp(&corpus) };
        make_set(&root, "0123456789abcdef01234567", input, &tok, 0.1, 1024).unwrap();
        set_problem(&root.join("0123456789abcdef01234567")).unwrap();
    }

    /// `--corpus`'s shard set is made in pieces (it was: the whole corpus read, then its whole
    /// token list held, gigabytes for a large corpus) with exactly the tokenizer, tokens, split
    /// and shard files of the whole text: files joined by newlines (a byte-order mark, a file
    /// without a final newline, an empty one), char and BPE tokenizers, pieces much smaller than
    /// the text, shards split across the validation boundary; a file that is not UTF-8 is named
    /// with the offset in it; and a killed maker's temporary folder is removed.
    #[test]
    fn a_corpus_is_made_into_shards_in_pieces_with_the_tokens_of_its_whole_text() {
        use crate::train::prepare::{Corpus, CorpusPart};
        let dir = crate::testing::scratch_dir("data-corpus-pieces");
        let shakespeare = embedded_corpus();
        let folder = dir.join("folder");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("a.txt"), &shakespeare[..30_000]).unwrap();
        std::fs::write(folder.join("b.txt"), format!("\u{feff}{}", &shakespeare[30_000..41_003])).unwrap();
        std::fs::write(folder.join("c.txt"), "").unwrap();
        std::fs::write(folder.join("d.txt"), "Ünïcödé — ends without a newline").unwrap();
        let one = dir.join("one.txt");
        std::fs::write(&one, &shakespeare[..50_000]).unwrap();
        let tiny = dir.join("tiny.txt");
        std::fs::write(&tiny, "hello world").unwrap();
        let bpe = crate::tokenizer::train_bpe(&shakespeare[..100_000], 400).unwrap();
        for corpus in [&folder, &one, &tiny] {
            let text = read_corpus(corpus).unwrap();
            let opened = Corpus::open(corpus).unwrap();
            let chars = Tokenizer::Char(crate::tokenizer::CharTokenizer::from_corpus(&text).unwrap());
            let streamed = corpus_char_tokenizer(corpus).unwrap();
            assert_eq!(streamed.to_json(), chars.to_json(), "{}: the char tokenizer", corpus.display());
            for (name, tok) in [("char", &chars), ("bpe", &bpe)] {
                for (val_fraction, shard_tokens) in [(0.1, 3000), (0.37, 1 << 20)] {
                    let what = format!("{} with {name}, {val_fraction}, {shard_tokens}", corpus.display());
                    let ids = tok.encode(&text).unwrap();
                    let split = ((ids.len() as f64) * (1.0 - val_fraction)).round() as usize;
                    let (old, new) = (dir.join("old"), dir.join("new"));
                    for d in [&old, &new] {
                        let _ = std::fs::remove_dir_all(d);
                        std::fs::create_dir_all(d).unwrap();
                    }
                    let source = format!("--corpus {}", corpus.display());
                    let want = write_shard_set(&old, "corpus", tok, &ids, split, shard_tokens, &source).unwrap();
                    let got = opened
                        .write_set(&new, &source, tok, val_fraction, shard_tokens, 1024, false)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(serde_json::to_string(&got).unwrap(), serde_json::to_string(&want).unwrap(), "{what}");
                    if corpus == &folder && shard_tokens == 3000 {
                        assert!(got.shards.len() >= 4, "{what}: {} shards, the boundary inside one", got.shards.len());
                    }
                    set_problem(&new).unwrap_or_else(|e| panic!("{what}: {e}"));
                }
            }
        }

        // Not UTF-8: the file and the offset in it, as reading it whole says.
        let bad = dir.join("bad");
        std::fs::create_dir_all(&bad).unwrap();
        std::fs::write(bad.join("a.txt"), &shakespeare[..5000]).unwrap();
        std::fs::write(bad.join("b.txt"), [&shakespeare.as_bytes()[..3001], &[0xff, b'x']].concat()).unwrap();
        let whole = read_corpus(&bad).unwrap_err().to_string();
        assert!(whole.contains("b.txt") && whole.contains("3001"), "{whole}");
        let streamed = corpus_char_tokenizer(&bad).unwrap_err().to_string();
        assert_eq!(streamed, whole);
        let made =
            Corpus::open(&bad).unwrap().write_set(&dir.join("bad-set"), "--corpus bad", &bpe, 0.1, 1000, 1024, false);
        assert_eq!(made.unwrap_err().to_string(), whole);
        // Empty: the corpus named.
        let empty = dir.join("empty.txt");
        std::fs::write(&empty, "").unwrap();
        assert!(matches!(corpus_char_tokenizer(&empty), Err(DataError::Empty(p)) if p == empty));
        let source = Corpus { path: empty.clone(), parts: vec![CorpusPart::File(empty.clone())] };
        let made = source.write_set(&dir.join("empty-set"), "--corpus empty", &bpe, 0.1, 1000, 1024, false);
        assert!(matches!(made, Err(DataError::Empty(ref p)) if p == &empty), "{made:?}");

        // Through the cache: a killed maker's folder goes, the set is the whole text's.
        let root = dir.join("cache");
        let key = corpus_key(one.to_str().unwrap(), "char", 0.1).unwrap();
        let stale = root.join(format!(".{key}.make-{}.0", u32::MAX - 7));
        std::fs::create_dir_all(&stale).unwrap();
        std::fs::write(stale.join("corpus_train_000000.bin.part"), b"half").unwrap();
        let (d, tok) = corpus_shards_in(&root, one.to_str().unwrap(), "char", None, 0.1, CORPUS_CHUNK).unwrap();
        assert!(!stale.exists(), "the killed maker's folder is left: {:?}", hidden_entries(&root));
        assert!(hidden_entries(&root).is_empty(), "{:?}", hidden_entries(&root));
        let meta = read_meta(&d).unwrap().unwrap();
        let ids = tok.encode(&read_corpus(&one).unwrap()).unwrap();
        assert_eq!(meta.train_tokens + meta.val_tokens, ids.len());
    }

    /// `ddl tokenizer train` reads its corpus in pieces (it held the whole text): the same
    /// tokenizer as one trained on the whole text, the same token count, the errors of reading
    /// it whole.
    #[test]
    fn a_tokenizer_is_trained_on_a_corpus_read_in_pieces() {
        use crate::train::prepare::Corpus;
        let dir = crate::testing::scratch_dir("data-bpe-pieces");
        let shakespeare = embedded_corpus();
        let folder = dir.join("folder");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("a.txt"), &shakespeare[..60_000]).unwrap();
        std::fs::write(folder.join("b.txt"), format!("\u{feff}{} ends", &shakespeare[60_000..90_000])).unwrap();
        let text = read_corpus(&folder).unwrap();
        let whole = crate::tokenizer::train_bpe(&text, 500).unwrap();
        let corpus = Corpus::open(&folder).unwrap();
        let pieces = corpus.train_bpe(500, 2048, false).unwrap();
        assert_eq!(pieces.to_json(), whole.to_json(), "the same merges as the whole text's");
        assert_eq!(train_corpus_bpe(&folder, 500, false).unwrap().to_json(), whole.to_json());
        let (bytes, n) = corpus_token_count(&folder, &pieces, false).unwrap();
        assert_eq!((bytes, n), (text.len() as u64, whole.encode(&text).unwrap().len()));
        // Errors: the whole text's (the file and offset; empty; a vocabulary too small).
        std::fs::write(folder.join("c.txt"), [&shakespeare.as_bytes()[..777], &[0xc3, b'(']].concat()).unwrap();
        let bad = Corpus::open(&folder).unwrap().train_bpe(500, 2048, false).unwrap_err().to_string();
        assert_eq!(bad, read_corpus(&folder).unwrap_err().to_string());
        assert!(bad.contains("c.txt") && bad.contains("777"), "{bad}");
        let empty = dir.join("empty.txt");
        std::fs::write(&empty, "").unwrap();
        assert!(matches!(train_corpus_bpe(&empty, 500, false), Err(DataError::Empty(p)) if p == empty));
        let small = train_corpus_bpe(&dir.join("folder/a.txt"), 10, false).unwrap_err().to_string();
        assert!(small.contains("10"), "{small}");
    }

    /// A set made with a resumed run's tokenizer (given) is never the one a new run on the same
    /// settings finds: a new run once trained, silently, with the tokenizer of an earlier run
    /// instead of the file it named (its cache had been made again by a resume after the file
    /// changed), and a char run with the characters of an earlier corpus.
    #[test]
    fn a_new_run_gets_the_tokenizer_its_settings_name_whatever_resumes_cached() {
        let dir = crate::testing::scratch_dir("data-cache-tokenizer");
        let root = dir.join("shards");
        let corpus = crate::testing::small_corpus(&dir);
        let c = corpus.as_str();
        let text = read_corpus(Path::new(c)).unwrap();
        let tok_a = crate::tokenizer::train_bpe(&text, 320).unwrap();
        let tok_b = crate::tokenizer::train_bpe(&text, 290).unwrap();
        let file = dir.join("tok.json");
        let f = file.to_str().unwrap();
        tok_a.save_as(&file, true).unwrap();
        let (_, got) = corpus_shards_in(&root, c, f, None, 0.1, CORPUS_CHUNK).unwrap();
        assert_eq!(got.to_json(), tok_a.to_json(), "a new run: the file's tokenizer");
        // The file changes; a run trained with A resumes (its cache removed), then a new run.
        tok_b.save_as(&file, true).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let (d, got) = corpus_shards_in(&root, c, f, Some(&tok_a), 0.1, CORPUS_CHUNK).unwrap();
        assert_eq!(got.to_json(), tok_a.to_json(), "the resumed run: its own tokenizer");
        assert_eq!(read_meta(&d).unwrap().unwrap().tokenizer, tok_a.to_json());
        let (d2, got) = corpus_shards_in(&root, c, f, None, 0.1, CORPUS_CHUNK).unwrap();
        assert_eq!(
            got.to_json(),
            tok_b.to_json(),
            "a new run after the resume: the file's tokenizer, not the resumed run's"
        );
        assert_eq!(read_meta(&d2).unwrap().unwrap().tokenizer, tok_b.to_json());
        assert_ne!(d, d2);
        // A resume with the file's own tokenizer uses the new run's set.
        assert_eq!(corpus_shards_in(&root, c, f, Some(&tok_b), 0.1, CORPUS_CHUNK).unwrap().0, d2);
        // A set an earlier version left under the settings' key with another tokenizer is not taken.
        let base = corpus_key(c, f, 0.1).unwrap();
        std::fs::remove_dir_all(root.join(&base)).unwrap();
        let copy = |from: &Path, to: &Path| {
            std::fs::create_dir_all(to).unwrap();
            for e in std::fs::read_dir(from).unwrap().flatten() {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        };
        copy(&d, &root.join(&base));
        let (_, got) = corpus_shards_in(&root, c, f, None, 0.1, CORPUS_CHUNK).unwrap();
        assert_eq!(got.to_json(), tok_b.to_json(), "a stale set under the settings' key");

        // Characters: a resumed run's tokenizer with characters the corpus lacks.
        let char_root = dir.join("char-shards");
        let mut chars = crate::tokenizer::CharSet::default();
        chars.add(&text);
        chars.add("~§");
        let old = Tokenizer::Char(crate::tokenizer::CharTokenizer::from_chars(chars.chars()));
        let (_, got) = corpus_shards_in(&char_root, c, "char", Some(&old), 0.1, CORPUS_CHUNK).unwrap();
        assert_eq!(got.vocab_size(), old.vocab_size());
        let (_, got) = corpus_shards_in(&char_root, c, "char", None, 0.1, CORPUS_CHUNK).unwrap();
        let own = Tokenizer::Char(crate::tokenizer::CharTokenizer::from_corpus(&text).unwrap());
        assert_eq!(got.to_json(), own.to_json(), "a new char run: the corpus's characters");
        // A resume whose tokenizer is the corpus's own finds the same set.
        let (d_own, _) = corpus_shards_in(&char_root, c, "char", None, 0.1, CORPUS_CHUNK).unwrap();
        assert_eq!(corpus_shards_in(&char_root, c, "char", Some(&own), 0.1, CORPUS_CHUNK).unwrap().0, d_own);
    }

    /// The shard cache keeps what a run can find: a run on an edited corpus removes its earlier
    /// set (not the sets of other settings), a set records its settings (an earlier version's set
    /// gets them when used), and `prune` removes the stale sets (corpus or tokenizer changed,
    /// corpus gone), killed processes' leftovers, the sets unused for a span, or all.
    #[test]
    fn the_corpus_cache_keeps_what_a_run_can_find_and_prunes_the_rest() {
        use super::super::cache::{self, Prune, State};
        let dir = crate::testing::scratch_dir("data-cache-prune");
        let root = dir.join("shards");
        let a = crate::testing::small_corpus(&dir);
        let b = dir.join("b.txt");
        std::fs::write(&b, &std::fs::read_to_string(&a).unwrap()[..6_000]).unwrap();
        let b = b.to_str().unwrap();
        let tok = dir.join("tok.json");
        crate::tokenizer::train_bpe(&read_corpus(Path::new(&a)).unwrap(), 300).unwrap().save_as(&tok, true).unwrap();
        let t = tok.to_str().unwrap();
        let set = |corpus: &str, tok: &str| corpus_shards_in(&root, corpus, tok, None, 0.1, CORPUS_CHUNK).unwrap().0;
        let states = || -> Vec<(String, State)> {
            let mut v: Vec<_> = cache::list(&root).unwrap().sets.into_iter().map(|s| (s.key, s.state)).collect();
            v.sort();
            v
        };
        let key = |d: &Path| d.file_name().unwrap().to_string_lossy().into_owned();
        let (a_char, a_bpe, b_char) = (set(&a, "char"), set(&a, t), set(b, "char"));
        let rec = cache::Record::new(&a, "char", 0.1);
        assert_eq!(rec.corpus, std::fs::canonicalize(&a).unwrap().display().to_string());
        assert_eq!(
            serde_json::from_slice::<cache::Record>(&std::fs::read(a_char.join(cache::RECORD_FILE)).unwrap()).unwrap(),
            rec
        );
        let mut want =
            vec![(key(&a_char), State::Current), (key(&a_bpe), State::Current), (key(&b_char), State::Current)];
        want.sort();
        assert_eq!(states(), want);
        // The same settings again: the same set, nothing removed.
        assert_eq!(set(&a, "char"), a_char);
        assert_eq!(states().len(), 3);

        // A is edited: its char run makes a new set and removes its earlier one; A's BPE set is
        // stale now too (another setting: it stays until pruned).
        std::fs::write(&a, std::fs::read_to_string(&a).unwrap() + "\nMore text.\n").unwrap();
        let a_char2 = set(&a, "char");
        assert_ne!(a_char2, a_char);
        assert!(!a_char.exists(), "the set of the edited corpus's earlier version is removed");
        let s = states();
        assert_eq!(s.len(), 3, "{s:?}");
        assert!(s.contains(&(key(&a_bpe), State::Changed)) && s.contains(&(key(&a_char2), State::Current)), "{s:?}");

        // An earlier version's set (no record) is listed as such, and recorded when used.
        std::fs::remove_file(b_char.join(cache::RECORD_FILE)).unwrap();
        assert!(states().contains(&(key(&b_char), State::Unrecorded)));
        assert_eq!(set(b, "char"), b_char);
        assert!(states().contains(&(key(&b_char), State::Current)));
        // A damaged record is said as such (it was listed as an earlier version's), and written
        // again when a run uses the set.
        std::fs::write(b_char.join(cache::RECORD_FILE), "{\"corpus\": \"/x").unwrap();
        assert!(states().contains(&(key(&b_char), State::RecordDamaged)), "{:?}", states());
        assert_eq!(State::RecordDamaged.describe(), "record damaged (cache.json does not read)");
        assert!(!State::RecordDamaged.stale(), "the set may be current: a run finds it");
        assert_eq!(set(b, "char"), b_char);
        assert!(states().contains(&(key(&b_char), State::Current)));

        // Leftovers: a killed maker's folder is pruned, a live one's is not touched.
        let gone = std::process::Command::new("true").spawn().unwrap();
        let gone_pid = gone.id();
        let mut gone = gone;
        gone.wait().unwrap();
        let dead = root.join(format!(".{}{MAKING}{gone_pid}.0", key(&a_char)));
        let live = root.join(format!(".{}{MAKING}{}.7", key(&a_char), std::process::id()));
        for d in [&dead, &live] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("x.bin"), [0u8; 100]).unwrap();
        }
        let l = cache::list(&root).unwrap();
        assert_eq!(l.leftovers.iter().map(|x| x.0.clone()).collect::<Vec<_>>(), vec![dead.clone()]);
        assert_eq!(l.in_progress, 1);

        // A folder that is not a set's (a user's, DDL_CACHE_DIR pointed elsewhere) is left alone.
        let mine = root.join("my-notes");
        std::fs::create_dir_all(&mine).unwrap();
        assert_eq!(cache::list(&root).unwrap().others, vec![mine.clone()]);

        // A dry run removes nothing; a prune the stale set and the leftover, and keeps the rest.
        let dry = cache::prune(&root, &Prune { dry_run: true, ..Prune::default() }).unwrap();
        assert_eq!(dry.sets.iter().map(|s| s.key.clone()).collect::<Vec<_>>(), vec![key(&a_bpe)]);
        assert!(a_bpe.exists() && dead.exists());
        let p = cache::prune(&root, &Prune::default()).unwrap();
        assert_eq!(p.sets.iter().map(|s| s.key.clone()).collect::<Vec<_>>(), vec![key(&a_bpe)]);
        assert_eq!(p.leftovers, vec![dead.clone()]);
        assert!(p.failed.is_empty());
        assert!(!a_bpe.exists() && !dead.exists() && live.exists());
        let mut want = vec![(key(&a_char2), State::Current), (key(&b_char), State::Current)];
        want.sort();
        assert_eq!(states(), want);

        // B is gone: stale.
        std::fs::remove_file(b).unwrap();
        assert!(states().contains(&(key(&b_char), State::CorpusGone)));
        assert_eq!(cache::prune(&root, &Prune::default()).unwrap().sets.len(), 1);
        assert!(!b_char.exists());

        // Unused for a span: 40 days ago is 30 days unused; 1 day is not.
        let f = std::fs::File::options().write(true).open(a_char2.join(cache::RECORD_FILE)).unwrap();
        f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(40 * 86_400)).unwrap();
        drop(f);
        let days = |d: u64| Prune { unused_for: Some(std::time::Duration::from_secs(d * 86_400)), ..Prune::default() };
        assert!(cache::prune(&root, &Prune::default()).unwrap().sets.is_empty(), "a current set stays");
        assert!(cache::prune(&root, &days(41)).unwrap().sets.is_empty());
        assert_eq!(cache::prune(&root, &days(30)).unwrap().sets.len(), 1);
        assert!(cache::list(&root).unwrap().sets.is_empty());

        // All.
        set(&a, t);
        assert_eq!(cache::list(&root).unwrap().sets.len(), 1);
        assert_eq!(cache::prune(&root, &Prune { all: true, ..Prune::default() }).unwrap().sets.len(), 1);
        assert!(cache::list(&root).unwrap().sets.is_empty());
        assert!(mine.exists(), "a folder that is not a set's stays");
        std::fs::remove_dir_all(&live).unwrap();
        std::fs::remove_dir_all(&mine).unwrap();
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0, "nothing is left in the cache");
        // A cache that is not a folder is an error, one that does not exist is empty.
        std::fs::remove_dir_all(&root).unwrap();
        assert!(cache::list(&root).unwrap().sets.is_empty());
        std::fs::write(&root, "a file").unwrap();
        assert!(cache::list(&root).is_err() && cache::prune(&root, &Prune::default()).is_err());
    }

    /// `ddl eval --text`'s tokens: those of the whole text (a file, a folder), made in pieces
    /// into the cache once and found again; an edited text's earlier set goes; a character the
    /// checkpoint lacks is placed in its file; another tokenizer gets its own set.
    #[test]
    fn a_text_to_evaluate_is_tokenised_once_into_the_cache() {
        use crate::train::shards::{Format, Shard, Stream};
        let dir = crate::testing::scratch_dir("data-eval-text");
        let root = dir.join("shards");
        let corpus = crate::testing::small_corpus(&dir);
        let text = std::fs::read_to_string(&corpus).unwrap();
        let char_tok = Tokenizer::Char(crate::tokenizer::CharTokenizer::from_corpus(&text).unwrap());
        let bpe = crate::tokenizer::train_bpe(&text, 300).unwrap();
        let tokens = |files: &[PathBuf]| -> Vec<u32> {
            let s = Stream::new(files.iter().map(|p| Shard::open(p, Format::Llmc).unwrap()).collect());
            (0..s.len()).map(|i| s.get(i)).collect()
        };
        let path = Path::new(&corpus);
        for tok in [&char_tok, &bpe] {
            // Pieces of 1 kB: many cuts, the whole text's tokens.
            let (files, made) = text_shards_in(&root, path, tok, 1 << 10).unwrap();
            assert!(made, "made now");
            assert_eq!(tokens(&files), tok.encode(&text).unwrap(), "{}", tok.kind());
            let modified = std::fs::metadata(&files[0]).unwrap().modified().unwrap();
            let (again, made) = text_shards_in(&root, path, tok, 1 << 10).unwrap();
            assert!(!made, "found, not made");
            assert_eq!(again, files, "found again");
            assert_eq!(std::fs::metadata(&again[0]).unwrap().modified().unwrap(), modified, "not made again");
        }
        assert_eq!(super::super::cache::list(&root).unwrap().sets.len(), 2, "a set per tokenizer");
        // Edited: the new text's tokens, the earlier set of this tokenizer removed.
        let edited = format!("{text}\nAnd more.\n");
        std::fs::write(path, &edited).unwrap();
        let files = text_shards_in(&root, path, &char_tok, 1 << 10).unwrap().0;
        assert_eq!(tokens(&files), char_tok.encode(&edited).unwrap());
        let sets = super::super::cache::list(&root).unwrap().sets;
        assert_eq!(sets.len(), 2, "the edited text's char set replaces the earlier one; the BPE set stays (stale)");
        assert!(sets.iter().any(|s| s.state == super::super::cache::State::Changed));
        // A folder: its files joined by a newline; a character the tokenizer lacks, in its file.
        let folder = dir.join("texts");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("a.txt"), &text[..500]).unwrap();
        std::fs::write(folder.join("b.txt"), &text[500..1000]).unwrap();
        let files = text_shards_in(&root, &folder, &char_tok, 1 << 10).unwrap().0;
        assert_eq!(tokens(&files), char_tok.encode(&format!("{}\n{}", &text[..500], &text[500..1000])).unwrap());
        std::fs::write(folder.join("c.txt"), "ab\u{00a7}c").unwrap();
        match text_shards_in(&root, &folder, &char_tok, 1 << 10) {
            Err(crate::train::TrainError::Data(DataError::UnknownChar { path, offset, ch, .. })) => {
                assert_eq!((path, offset, ch), (folder.join("c.txt"), 2, '\u{00a7}'));
            }
            other => panic!("expected an unknown character, got {other:?}"),
        }
        assert!(hidden_entries(&root).is_empty(), "nothing half-made is left");
    }

    /// The set's tokens, train then validation.
    fn set_tokens(dir: &Path) -> Vec<u32> {
        let meta = read_meta(dir).unwrap().unwrap();
        let shards = meta.shards.iter().map(|s| {
            crate::train::shards::Shard::open(&dir.join(&s.file), crate::train::shards::Format::Llmc).unwrap()
        });
        let stream = crate::train::shards::Stream::new(shards.collect());
        (0..stream.len()).map(|i| stream.get(i)).collect()
    }

    /// What pieces cannot give exactly, `--corpus` reads whole, as before: a tokenizer with a
    /// prefix space (each piece would start with one), and a corpus that reads once (a pipe: a
    /// char tokenizer's first pass emptied it, "corpus is empty"); a folder whose first file is
    /// empty is joined as `read_corpus` joins it (no newline first), and one of empty files is
    /// empty.
    #[test]
    fn what_pieces_cannot_give_exactly_is_read_whole() {
        let dir = crate::testing::scratch_dir("data-corpus-whole");
        let root = dir.join("shards");
        let shakespeare = embedded_corpus();
        let corpus = dir.join("c.txt");
        std::fs::write(&corpus, &shakespeare[..40_000]).unwrap();
        let c = corpus.to_str().unwrap();
        let text = read_corpus(&corpus).unwrap();
        let bpe = crate::tokenizer::train_bpe(&text, 400).unwrap();
        let plain = dir.join("plain.json");
        bpe.save_as(&plain, true).unwrap();
        let json = std::fs::read_to_string(&plain).unwrap();
        let prefixed = dir.join("prefixed.json");
        let flipped = json.replace("\"add_prefix_space\": false", "\"add_prefix_space\": true");
        assert!(flipped != json, "the tokenizer file's prefix-space setting was not found");
        std::fs::write(&prefixed, flipped).unwrap();
        let pre = Tokenizer::load(&prefixed).unwrap();
        assert!(!pre.cuts_exactly() && bpe.cuts_exactly());
        // An added token that takes the whitespace beside it (RoBERTa's <mask>) is not cut either.
        for strip in ["lstrip", "rstrip"] {
            let stripping = dir.join(format!("{strip}.json"));
            let edited = json.replace(&format!("\"{strip}\": false"), &format!("\"{strip}\": true"));
            assert!(edited != json, "{strip} not found");
            std::fs::write(&stripping, edited).unwrap();
            assert!(!Tokenizer::load(&stripping).unwrap().cuts_exactly(), "{strip}");
        }
        for (file, tok) in [(&plain, &bpe), (&prefixed, &pre)] {
            let (d, got) = corpus_shards_in(&root, c, file.to_str().unwrap(), None, 0.1, 1024).unwrap();
            assert_eq!(got.to_json(), tok.to_json());
            assert_eq!(set_tokens(&d), tok.encode(&text).unwrap(), "{}: the whole text's tokens", file.display());
        }
        // (Pieces would have differed: the test can fail.)
        let mut pieces = Vec::new();
        let source = crate::train::prepare::Corpus::open(&corpus).unwrap();
        std::fs::create_dir_all(dir.join("pieces")).unwrap();
        source.write_set(&dir.join("pieces"), "--corpus pieces", &pre, 0.1, 1 << 20, 1024, false).unwrap();
        pieces.extend(set_tokens(&dir.join("pieces")));
        assert!(pieces != pre.encode(&text).unwrap(), "pieces gave the whole text's tokens");

        // A pipe, read once.
        #[cfg(unix)]
        {
            let fifo = dir.join("fifo.txt");
            assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
            let (f2, t2) = (fifo.clone(), text.clone());
            let writer = std::thread::spawn(move || std::fs::write(&f2, t2).unwrap());
            let (d, tok) = corpus_shards_in(&root, fifo.to_str().unwrap(), "char", None, 0.1, 1024).unwrap();
            writer.join().unwrap();
            let own = Tokenizer::Char(crate::tokenizer::CharTokenizer::from_corpus(&text).unwrap());
            assert_eq!(tok.to_json(), own.to_json());
            assert_eq!(set_tokens(&d), own.encode(&text).unwrap());
        }

        // An empty first file; empty files only.
        let folder = dir.join("folder");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("a.txt"), "").unwrap();
        std::fs::write(folder.join("b.txt"), &shakespeare[..5000]).unwrap();
        let whole = read_corpus(&folder).unwrap();
        assert!(!whole.starts_with('\n'));
        let (d, tok) = corpus_shards_in(&root, folder.to_str().unwrap(), "char", None, 0.1, 1024).unwrap();
        assert_eq!(set_tokens(&d), tok.encode(&whole).unwrap());
        std::fs::write(folder.join("b.txt"), "").unwrap();
        std::fs::write(folder.join("c.txt"), "").unwrap();
        let empty = corpus_shards_in(&root, folder.to_str().unwrap(), "char", None, 0.1, 1024).unwrap_err();
        assert!(empty.to_string().contains("empty"), "{empty}");

        // A character the given tokenizer lacks: its file and its offset there.
        std::fs::write(folder.join("b.txt"), &shakespeare[..3000]).unwrap();
        std::fs::write(folder.join("c.txt"), "the tale ~ here").unwrap();
        let given = Tokenizer::Char(crate::tokenizer::CharTokenizer::from_corpus(&shakespeare[..3000]).unwrap());
        let e = corpus_shards_in(&root, folder.to_str().unwrap(), "char", Some(&given), 0.1, 1024).unwrap_err();
        let want = format!("'{}': character '~' at byte 9 is not among", folder.join("c.txt").display());
        assert!(e.to_string().contains(&want), "{e}");
        assert!(hidden_entries(&root).is_empty(), "{:?}", hidden_entries(&root));
    }

    /// The names in `root` that start with a dot (temporary and moved-aside folders).
    fn hidden_entries(root: &Path) -> Vec<std::ffi::OsString> {
        std::fs::read_dir(root)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.file_name())
            .collect()
    }

    /// The runs of `ddl experiment --jobs` are threads of one process: when they all make the
    /// same corpus's shard set at once in a fresh cache, each must get the complete set (they
    /// once shared one temporary folder named after the process, and a run read shards that
    /// another had already renamed away).
    #[test]
    fn threads_making_the_same_shard_set_at_once_all_get_it_complete() {
        let dir = crate::testing::scratch_dir("data-shards-race");
        let corpus = crate::testing::small_corpus(&dir);
        let root = dir.join("shards");
        let n = 8;
        let barrier = std::sync::Barrier::new(n);
        let got: Vec<(PathBuf, String)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        let (d, tok) = corpus_shards_in(&root, &corpus, "char", None, 0.1, CORPUS_CHUNK)
                            .unwrap_or_else(|e| panic!("a concurrent maker failed: {e}"));
                        (d, tok.to_json())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (d, tok) in &got {
            assert_eq!((d, tok), (&got[0].0, &got[0].1), "every thread gets the one set");
        }
        let meta = read_meta(&got[0].0).unwrap().expect("the set's meta.json");
        for sh in &meta.shards {
            assert!(got[0].0.join(&sh.file).is_file(), "shard {} missing", sh.file);
        }
        // No temporary folder is left behind.
        let left = hidden_entries(&root);
        assert!(left.is_empty(), "temporary folders left: {left:?}");
    }

    /// A damaged cached set (a shard's byte changed, a shard cut short or gone, meta.json torn) is
    /// made again from the corpus — the same tokens as before — instead of being trained on.
    #[test]
    fn a_damaged_cached_shard_set_is_made_again() {
        let dir = crate::testing::scratch_dir("data-shards-damaged");
        let corpus = crate::testing::small_corpus(&dir);
        let root = dir.join("shards");
        let (d, _) = corpus_shards_in(&root, &corpus, "char", None, 0.1, CORPUS_CHUNK).unwrap();
        let meta = read_meta(&d).unwrap().unwrap();
        let shard = d.join(&meta.shards[0].file);
        let good = std::fs::read(&shard).unwrap();
        let damages: [(&str, &dyn Fn()); 9] = [
            ("a byte changed", &|| {
                let mut b = good.clone();
                let n = b.len();
                b[n - 3] ^= 0x40;
                std::fs::write(&shard, b).unwrap();
            }),
            ("cut short", &|| std::fs::write(&shard, &good[..good.len() / 2]).unwrap()),
            ("gone", &|| std::fs::remove_file(&shard).unwrap()),
            ("meta.json torn", &|| std::fs::write(d.join("meta.json"), "{\"format\": \"ddl-corpus").unwrap()),
            ("meta.json gone", &|| std::fs::remove_file(d.join("meta.json")).unwrap()),
            ("a shard added", &|| std::fs::write(d.join("corpus_train_000009.bin"), &good).unwrap()),
            ("an entry dropped", &|| {
                let mut m = read_meta(&d).unwrap().unwrap();
                let gone = m.shards.remove(0);
                m.train_tokens -= gone.tokens;
                std::fs::write(d.join("meta.json"), serde_json::to_string(&m).unwrap()).unwrap();
            }),
            ("counts changed", &|| {
                let mut m = read_meta(&d).unwrap().unwrap();
                m.train_tokens += 1;
                std::fs::write(d.join("meta.json"), serde_json::to_string(&m).unwrap()).unwrap();
            }),
            ("the folder a file", &|| {
                std::fs::remove_dir_all(&d).unwrap();
                std::fs::write(&d, "x").unwrap();
            }),
        ];
        for (what, damage) in damages {
            damage();
            let (d2, _) = corpus_shards_in(&root, &corpus, "char", None, 0.1, CORPUS_CHUNK)
                .unwrap_or_else(|e| panic!("{what}: the damaged set was not made again: {e}"));
            assert_eq!(d2, d, "{what}: the same key");
            assert_eq!(std::fs::read(&shard).unwrap(), good, "{what}: the same tokens as the first time");
            let m2 = read_meta(&d2).unwrap().unwrap();
            assert_eq!(
                serde_json::to_string(&m2.shards).unwrap(),
                serde_json::to_string(&meta.shards).unwrap(),
                "{what}"
            );
            assert!(cached_set(&d2).unwrap().is_some(), "{what}: the new set checks whole");
        }
        let left = hidden_entries(&root);
        assert!(left.is_empty(), "damaged sets left aside: {left:?}");
    }
}
