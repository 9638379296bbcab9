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

mod meta;
mod run;
mod sets;
pub use meta::*;
pub use run::*;
pub use sets::*;

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
    /// A `ddl data prepare` input that is a symbolic link to nothing (it was "does not exist",
    /// while `ls` lists it).
    #[error(
        "input '{0}' is a symbolic link that leads nowhere (its target is missing, or the links loop): give the \
         file it should lead to, or make the link again"
    )]
    BrokenLinkInput(PathBuf),
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
    /// A text in UTF-16 (`enc` as `iconv -f` names it: [`utf16_encoding`]), found in the bytes
    /// read (a pipe cannot be read again to find it).
    #[error("'{path}'{}", utf16_remedy(enc, path))]
    Utf16 { path: PathBuf, enc: &'static str },
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
        "cannot write the shard cache in '{path}': {}; the corpus is tokenised into the cache once \
         (DDL_CACHE_DIR, else $XDG_CACHE_HOME/ddl or ~/.cache/ddl): set DDL_CACHE_DIR to a writable folder with \
         room for the shards (2 bytes a token, 4 above 65,536 token ids)",
        crate::why_not_written(path, error)
    )]
    // `error`, not `source`: its text is in the message already, or the file in the way instead.
    Cache { path: PathBuf, error: std::io::Error },
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
const EMBEDDED_CORPUS: &str = include_str!("../../../assets/tinyshakespeare.txt");

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
        // (A short file's first bytes are read too: a UTF-16 mark alone is 2.)
        let start = std::fs::File::open(path).and_then(|f| {
            let mut start = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(f, 4096), &mut start).map(|_| start)
        });
        if let Some(enc) = start.ok().and_then(|b| utf16_encoding(&b)) {
            return utf16_remedy(enc, path);
        }
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
            "; '{shown}' is a run's folder, not text (`ddl info --checkpoint {}` names the data it trained on)",
            crate::shell_word(path)
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

/// A UTF-16 file's error's end: what it is and the command that converts it.
fn utf16_remedy(enc: &str, path: &Path) -> String {
    let how = match path.is_file() {
        true => format!("e.g. `iconv -f {enc} -t UTF-8 {} > NEW.txt`, or leave that file out", crate::shell_word(path)),
        // (A pipe: `iconv … /dev/stdin > NEW.txt` would read nothing.)
        false => format!("e.g. `iconv -f {enc} -t UTF-8 FILE | …` in the pipe"),
    };
    format!(": {}, {how}", utf16_said(enc))
}

/// What a UTF-16 text is ([`utf16_encoding`]'s `enc`), before the command that converts it:
/// `iconv -f LATIN1`, the remedy for other text that is not UTF-8, would make it a text of NUL
/// characters. `enc` is what `iconv -f` takes: `UTF-16` for a text with a byte-order mark,
/// `UTF-16LE` or `UTF-16BE` for one without.
pub fn utf16_said(enc: &str) -> String {
    let why = match enc {
        "UTF-16" => "it starts with UTF-16's byte-order mark, as Windows' Notepad \"Unicode\" and PowerShell's `>` \
                     write it"
            .to_string(),
        _ => format!(
            "a NUL byte beside every Latin letter: {enc} without a byte-order mark, as `iconv -t {enc}` writes it"
        ),
    };
    format!("it is UTF-16 text, not UTF-8 ({why}): convert it from {enc}")
}

/// The UTF-16 that `head`, the first bytes of a text, is in, as `iconv -f` names it: `UTF-16`
/// when it starts with a byte-order mark (FF FE or FE FF: never UTF-8); `UTF-16LE` or `UTF-16BE`
/// when, without one, a NUL byte stands at one of every two places and hardly ever at the other
/// (its first 4096 bytes, at least 2: a Latin letter's high byte; valid UTF-8 to a reader that
/// does not look, which a byte-level model read as it was). `None` for other text. `head` starts
/// at an even offset of the text (a line of a chat may not: [`utf16_encoding_at`]).
pub fn utf16_encoding(head: &[u8]) -> Option<&'static str> {
    utf16_encoding_at(head, false)
}

/// [`utf16_encoding`] of bytes that start at an odd offset of the text when `odd`.
pub fn utf16_encoding_at(head: &[u8], odd: bool) -> Option<&'static str> {
    if head.starts_with(&[0xff, 0xfe]) || head.starts_with(&[0xfe, 0xff]) {
        return Some("UTF-16");
    }
    let head = &head[..head.len().min(4096)];
    if head.len() < 2 {
        return None;
    }
    // NULs and places at even and at odd offsets of `head`.
    let (mut nul, mut all) = ([0usize; 2], [0usize; 2]);
    for (i, &b) in head.iter().enumerate() {
        all[i % 2] += 1;
        nul[i % 2] += usize::from(b == 0);
    }
    let mostly = |p: usize| nul[p] > 0 && 2 * nul[p] >= all[p] && 10 * nul[1 - p] <= all[1 - p];
    // (A NUL after each letter: little-endian; before it: big-endian.)
    match (mostly(1), mostly(0)) {
        (true, _) => Some(if odd { "UTF-16BE" } else { "UTF-16LE" }),
        (_, true) => Some(if odd { "UTF-16LE" } else { "UTF-16BE" }),
        _ => None,
    }
}

/// Whether `head`, the first bytes of a text, is UTF-16 ([`utf16_encoding`]).
pub fn is_utf16(head: &[u8]) -> bool {
    utf16_encoding(head).is_some()
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
        // (From the bytes read: a pipe's are gone, so it was said as LATIN1.)
        if let Some(enc) = utf16_encoding(&bytes) {
            return Err(DataError::Utf16 { path: f, enc });
        }
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
        // UTF-16 (Notepad's "Unicode"), of one character too: said, with iconv from UTF-16 (the
        // remedy was `iconv -f LATIN1`, which makes a text of NUL characters of it).
        for bytes in [&b"\xff\xfeh\0i\0\n\0"[..], b"\xfe\xff\0h", b"\xff\xfe"] {
            std::fs::write(&latin1, bytes).unwrap();
            let e = read_corpus(&latin1).unwrap_err().to_string();
            assert!(
                e.contains("it is UTF-16 text") && e.contains("iconv -f UTF-16 -t UTF-8") && !e.contains("LATIN1"),
                "{e}"
            );
        }

        // Without a byte-order mark too (`iconv -t UTF-16LE`: valid UTF-8, read as it was), with
        // the endianness iconv needs; text with a stray NUL, or binary, is not taken for it.
        use super::utf16_encoding as enc;
        let (le, be): (Vec<u8>, Vec<u8>) = "ROMEO: é\n"
            .encode_utf16()
            .map(|u| (u.to_le_bytes(), u.to_be_bytes()))
            .fold((Vec::new(), Vec::new()), |(mut l, mut b), (x, y)| {
                l.extend(x);
                b.extend(y);
                (l, b)
            });
        assert_eq!(
            (enc(&le), enc(&be), enc(b"h\0"), enc(b"\0h\0i")),
            (Some("UTF-16LE"), Some("UTF-16BE"), Some("UTF-16LE"), Some("UTF-16BE"))
        );
        // (Bytes from an odd offset: a chat's line after a line of one byte.)
        let at_odd = |b: &[u8]| super::utf16_encoding_at(&b[1..], true);
        assert_eq!((at_odd(&le), at_odd(&be)), (Some("UTF-16LE"), Some("UTF-16BE")));
        for other in [&b"ROMEO: hi\n"[..], b"a\0bcdefgh", b"\0\0\0\0\x01\x02", b"\0", b"h", b""] {
            assert_eq!(enc(other), None, "{other:?}");
        }
        std::fs::write(&latin1, &le).unwrap();
        let e = read_corpus(&latin1).unwrap_err().to_string();
        assert!(e.contains("it is UTF-16 text") && e.contains("iconv -f UTF-16LE -t UTF-8"), "{e}");

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
