//! `ddl data prepare`: text files, folders of them and JSON-lines files (documents) into token
//! shards in llm.c's format ([`super::shards`]), in constant memory.
//!
//! Inputs are read in pieces — a `.txt` file in chunks of about 8 MB cut before a line end that
//! follows a word (where a byte-level BPE pre-tokenizer splits anyway; a line of more than 16 MB
//! before other whitespace after a word, or between ASCII letters, digits and others,
//! `cut_point`), a `.jsonl` file one document per line (its `text` field) — and a batch of
//! pieces is tokenised by all cores at once, then written in order. `ddl train --corpus`'s cache
//! and `ddl tokenizer train` read a corpus so too (`Corpus`). Documents (files, JSON lines) are separated by the
//! tokenizer's end-of-text token, or by a newline for a char tokenizer (whose vocabulary, the
//! characters of the inputs, is collected by a first pass). The validation split is the end of the
//! token stream (`--val-tokens N`, or `--val-fraction f`: the last `n − round(n·(1 − f))` tokens,
//! the split `ddl train --corpus` makes), carved off the last training shards at the end. The
//! shards and `meta.json` are written into a temporary folder beside `--out` and moved into place
//! complete, so a stopped or failed run leaves nothing that looks like a shard set.

use std::io::{BufRead, Read};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use super::data::DataError;
use super::shards::{Format, HEADER_BYTES, Shard, Stream, Writer};
use crate::tokenizer::{CharTokenizer, Tokenizer};

mod input;
mod vocab;
use input::*;
pub(crate) use input::{CorpusPart, is_jsonl};
use vocab::*;
pub use vocab::{has_documents, train_bpe_on_documents};

/// Where the validation split comes from.
#[derive(Debug, Clone, Copy)]
pub enum ValSplit {
    Tokens(usize),
    Fraction(f64),
}

/// What `ddl data prepare` is asked for.
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    /// `char` or a tokenizer.json.
    pub tokenizer: String,
    pub out: PathBuf,
    pub inputs: Vec<PathBuf>,
    pub val: ValSplit,
    pub shard_tokens: usize,
    pub name: String,
    pub quiet: bool,
}

/// What was written.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub train_tokens: usize,
    pub val_tokens: usize,
    pub documents: usize,
    /// Documents without text (an empty file, a JSON line's `"text": ""`), skipped.
    pub empty: usize,
    pub bytes: u64,
    pub seconds: f64,
    pub files: Vec<PathBuf>,
}

/// A `.txt` piece size: about this many bytes.
const CHUNK: usize = 8 << 20;

/// Bytes of text tokenised in one parallel batch: a piece per core, 16–64 MB (Ctrl-C is seen
/// between batches, and within a piece every megabyte: [`encode_at`]).
fn batch_bytes(threads: usize) -> usize {
    (threads * CHUNK).clamp(16 << 20, 64 << 20)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DataError + '_ {
    move |source| DataError::Io { path: path.to_path_buf(), source }
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> DataError + '_ {
    move |source| DataError::Write { path: path.to_path_buf(), source }
}

/// Runs `ddl data prepare`.
pub fn prepare(opts: &PrepareOptions) -> Result<Prepared, crate::train::TrainError> {
    use crate::train::TrainError;
    let t0 = std::time::Instant::now();
    if let ValSplit::Fraction(f) = opts.val
        && !(f > 0.0 && f < 1.0)
    {
        return Err(TrainError::Settings(format!("--val-fraction {f}: expected a number in (0, 1)")));
    }
    if opts.out.exists() && !opts.out.is_dir() {
        return Err(TrainError::Settings(format!(
            "--out '{}' is a file: the shards go into a folder; give a new (or empty) folder's path",
            opts.out.display()
        )));
    }
    // (A file where a folder above --out would be made was "cannot make 'a.txt' (File exists)".)
    if let Some(file) = opts.out.parent().and_then(super::data::file_in_the_way) {
        return Err(TrainError::Settings(format!(
            "--out '{}': '{}' is a file, so the folder cannot be made there; give a new (or empty) folder's path",
            opts.out.display(),
            file.display()
        )));
    }
    check_name(&opts.name)?;
    if opts.out.exists() && std::fs::read_dir(&opts.out).map(|mut d| d.next().is_some()).unwrap_or(true) {
        return Err(TrainError::Settings(format!(
            "--out '{}' exists and is not empty: choose a new folder (shard sets are not mixed)",
            opts.out.display()
        )));
    }
    let (files, again) = input_files(&opts.inputs)?;
    if !again.is_empty() && !opts.quiet {
        let named: Vec<String> = again.iter().take(3).map(|p| format!("'{}'", p.display())).collect();
        eprintln!(
            "note: {}{} reached a second time (given twice, or also through a folder or a link given) {} read once",
            named.join(", "),
            if again.len() > 3 { format!(" and {} more", again.len() - 3) } else { String::new() },
            if again.len() == 1 { "is" } else { "are" }
        );
    }
    let bytes: u64 = files.iter().map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0)).sum();
    let tok = if opts.tokenizer == "char" {
        char_tokenizer(&files)?
    } else {
        crate::train::load_tokenizer(Path::new(&opts.tokenizer))
            .map_err(|source| TrainError::Tokenizer { setting: opts.tokenizer.clone(), source })?
    };
    if !tok.cuts_exactly() && !opts.quiet {
        eprintln!(
            "note: {} does not pre-tokenise as GPT-2's byte-level BPE without a prefix space (it has a normaliser, a \
             prefix space, another pre-tokenizer such as SentencePiece's, or an added token that holds or strips \
             whitespace): a text file's ~8 MB pieces are tokenised each on its own, so the tokens where they meet \
             may differ from the whole text's",
            opts.tokenizer
        );
    }
    let sep: Vec<u32> = match tok.eot_id() {
        Some(id) => vec![id],
        None => tok.encode("\n").map_err(DataError::from)?,
    };
    if sep.is_empty() && !opts.quiet {
        eprintln!(
            "note: {} has no {} token and encodes a newline to no token: documents follow each other with \
             nothing between them (add {} to the tokenizer as a special token to mark where they meet)",
            opts.tokenizer,
            crate::tokenizer::EOT,
            crate::tokenizer::EOT
        );
    }
    let wide = tok.vocab_size() > u16::MAX as usize + 1;
    let parent = opts.out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let out_folder = |made: &Path| {
        let (out, made) = (opts.out.clone(), made.to_path_buf());
        move |source| DataError::OutFolder { out, made, source }
    };
    // The folders above --out that this run makes, deepest first: removed again if it fails.
    let made_above = crate::train::data::missing_folders(parent);
    std::fs::create_dir_all(parent).map_err(out_folder(parent))?;
    let stem =
        format!(".{}.prepare-", opts.out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
    remove_stale_temp_dirs(parent, &stem);
    let tmp = parent.join(format!("{stem}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(out_folder(&tmp))?;
    // Ctrl-C stops at the next piece of text and removes the partial shards (a second one
    // exits at once, removing them too).
    crate::train::install_ctrlc();
    let _scrap = crate::train::Scrap::new(&tmp);
    let result = write_all(opts, &files, &tok, &sep, wide, &tmp, bytes).and_then(|written| {
        // Move into place: the folder appears complete.
        if opts.out.exists() {
            let _ = std::fs::remove_dir(&opts.out);
        }
        std::fs::rename(&tmp, &opts.out).map_err(write_err(&opts.out))?;
        Ok(written)
    });
    let (train, val, documents, empty) = match result {
        Ok(x) => x,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            for d in &made_above {
                let _ = std::fs::remove_dir(d);
            }
            return Err(e);
        }
    };
    let mut listed: Vec<PathBuf> = std::fs::read_dir(&opts.out)
        .map_err(io(&opts.out))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    listed.sort();
    Ok(Prepared {
        train_tokens: train,
        val_tokens: val,
        documents,
        empty,
        bytes,
        seconds: t0.elapsed().as_secs_f64(),
        files: listed,
    })
}

/// A shard name prefix must be a plain file name part: not empty, no path separators, not
/// starting with a dot (the shards would be hidden).
fn check_name(name: &str) -> Result<(), crate::train::TrainError> {
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\']) {
        return Err(crate::train::TrainError::Settings(format!(
            "--name {name:?}: expected a plain prefix for the shards' file names (NAME_train_000000.bin): \
             not empty, without '/' or '\\', not starting with '.'"
        )));
    }
    // `ddl train --data` tells the splits apart by `_train_` and `_val_` in the file names: a
    // name that holds one (or ends in `_train`/`_val`) would put its training shards in both.
    let marked = format!("{name}_");
    if let Some(split) = ["_train_", "_val_"].into_iter().find(|m| marked.contains(m)) {
        return Err(crate::train::TrainError::Settings(format!(
            "--name {name:?}: the shards' names would hold {split:?} (NAME_train_000000.bin, NAME_val_000000.bin), \
             which `ddl train --data` reads as the split: choose a name without \"_train\" or \"_val\" before an \
             underscore or at its end (e.g. {:?})",
            name.replace("_train", "-train").replace("_val", "-val")
        )));
    }
    Ok(())
}

/// Removes the temporary folders (`{stem}PID`, `{stem}PID.N`) that earlier processes writing the
/// same output (`ddl data prepare`, `ddl train --resume … --out`, `--corpus`'s shard cache) left
/// when killed (their process no longer exists).
pub(crate) fn remove_stale_temp_dirs(parent: &Path, stem: &str) {
    remove_dead_writers(parent, |name| name.strip_prefix(stem));
}

/// Removes the entries of `parent` whose name `pid_of` takes to `PID` or `PID.N` (the rest of the
/// name after its stem) and whose process is gone.
pub(crate) fn remove_dead_writers(parent: &Path, pid_of: impl Fn(&str) -> Option<&str>) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = pid_of(&name).and_then(|p| p.split('.').next()?.parse::<u32>().ok()) else {
            continue;
        };
        // (Where liveness cannot be checked, the folder is left.)
        if pid != std::process::id() && crate::train::lock::alive(pid) == Some(false) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Training tokens, validation tokens, documents, empty documents skipped.
type Written = (usize, usize, usize, usize);

/// `tok`'s ids of `text`, which starts at byte `at` of a longer text: an unknown character's
/// position is given in that text.
fn encode_at(tok: &Tokenizer, text: &str, at: u64) -> Result<Vec<u32>, crate::tokenizer::TokenizerError> {
    use crate::tokenizer::TokenizerError;
    let shift = |from: usize| {
        move |e| match e {
            TokenizerError::Unknown { ch, pos, vocab } => TokenizerError::Unknown { ch, pos: pos + from, vocab },
            TokenizerError::Dropped { ch, pos } => TokenizerError::Dropped { ch, pos: pos + from },
            e => e,
        }
    };
    if text.len() <= ENCODE_STEP || !tok.cuts_exactly() {
        return tok.encode(text).map_err(shift(at as usize));
    }
    // A piece in steps of about a megabyte (cut where the tokens do not change), Ctrl-C looked
    // at between them: a piece of 8 MB took 20 s on a slow core with a BPE. Interrupted, the
    // ids so far are returned; the encoder sees the interruption before it finishes.
    let mut ids = Vec::with_capacity(text.len() / 3);
    for part in crate::tokenizer::chunks(text, ENCODE_STEP) {
        if crate::train::interrupted() {
            break;
        }
        let from = part.as_ptr() as usize - text.as_ptr() as usize;
        ids.extend(tok.encode(part).map_err(shift(at as usize + from))?);
    }
    Ok(ids)
}

/// Bytes of a piece tokenised between two looks at Ctrl-C ([`encode_at`]).
const ENCODE_STEP: usize = 1 << 20;

/// What an [`Encoder`] wrote: the shards with their token counts, the tokens, the documents and
/// the empty ones skipped.
struct Encoded {
    shards: Vec<(PathBuf, usize)>,
    tokens: usize,
    documents: usize,
    empty: usize,
}

/// Text pieces into token shards: pieces are batched, a batch tokenised by all cores at once and
/// written in order, documents separated by `sep`, the progress (bytes of `bytes`) on a bar.
struct Encoder<'a> {
    tok: &'a Tokenizer,
    sep: &'a [u32],
    threads: usize,
    /// `None`: the tokens are counted only.
    writer: Option<Writer>,
    /// Pieces: text, whether it starts a document, its first byte's offset in the text pushed.
    batch: Vec<(String, bool, u64)>,
    batch_bytes: usize,
    /// Tokens written, documents begun, empty documents skipped, bytes of text read.
    total: usize,
    documents: usize,
    empty: usize,
    read: u64,
    bar: Option<indicatif::ProgressBar>,
    bytes: u64,
    t0: std::time::Instant,
}

impl<'a> Encoder<'a> {
    fn new(tok: &'a Tokenizer, sep: &'a [u32], writer: Option<Writer>, bytes: u64, bar: bool) -> Self {
        let bar = bar.then(|| {
            let b = indicatif::ProgressBar::new(bytes);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg} eta {eta}",
                )
                .expect("a valid template"),
            );
            b
        });
        Encoder {
            tok,
            sep,
            threads: std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(1, 64),
            writer,
            batch: Vec::new(),
            batch_bytes: 0,
            total: 0,
            documents: 0,
            empty: 0,
            read: 0,
            bar,
            bytes,
            t0: std::time::Instant::now(),
        }
    }

    /// Takes a piece of text (`starts`: it begins a document); Ctrl-C stops here.
    fn push(&mut self, text: String, starts: bool) -> Result<(), DataError> {
        if crate::train::interrupted() {
            return Err(DataError::Interrupted);
        }
        // A document without text (an empty file, a JSON line's `"text": ""`) is none: it was
        // counted, and its separator put two end-of-text tokens in a row into the shards. (Only
        // a document's first piece can be empty: the others hold the bytes that cut them.)
        if starts && text.is_empty() {
            self.empty += 1;
            return Ok(());
        }
        let len = text.len() as u64;
        self.batch_bytes += text.len();
        self.read += len;
        self.batch.push((text, starts, self.read - len));
        if self.batch_bytes >= batch_bytes(self.threads) || self.batch.len() >= 4096 {
            self.flush()?;
            if let Some(b) = &self.bar {
                b.set_position(self.read.min(self.bytes));
                b.set_message(format!(
                    "{:.2} M tokens/s",
                    self.total as f64 / self.t0.elapsed().as_secs_f64().max(1e-9) / 1e6
                ));
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DataError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        // Contiguous parts of the batch, one per thread, encoded at once, written in order.
        let per = self.batch.len().div_ceil(self.threads);
        let tok = self.tok;
        let encoded: Vec<Result<Vec<Vec<u32>>, crate::tokenizer::TokenizerError>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .batch
                .chunks(per)
                .map(|part| {
                    s.spawn(move || part.iter().map(|(t, _, at)| encode_at(tok, t, *at)).collect::<Result<Vec<_>, _>>())
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a tokenizer thread panicked")).collect()
        });
        let mut i = 0;
        for part in encoded {
            for ids in part? {
                if self.batch[i].1 {
                    if self.documents > 0 {
                        if let Some(w) = &mut self.writer {
                            w.push(self.sep)?;
                        }
                        self.total += self.sep.len();
                    }
                    self.documents += 1;
                }
                if let Some(w) = &mut self.writer {
                    w.push(&ids)?;
                }
                self.total += ids.len();
                i += 1;
            }
        }
        self.batch.clear();
        self.batch_bytes = 0;
        Ok(())
    }

    /// The shards written, the tokens and the documents.
    fn finish(mut self) -> Result<Encoded, DataError> {
        self.flush()?;
        if crate::train::interrupted() {
            return Err(DataError::Interrupted);
        }
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        let shards = match self.writer.take() {
            Some(w) => w.finish()?,
            None => Vec::new(),
        };
        Ok(Encoded { shards, tokens: self.total, documents: self.documents, empty: self.empty })
    }
}

fn write_all(
    opts: &PrepareOptions,
    files: &[PathBuf],
    tok: &Tokenizer,
    sep: &[u32],
    wide: bool,
    dir: &Path,
    bytes: u64,
) -> Result<Written, crate::train::TrainError> {
    let writer = Writer::new(dir, &opts.name, "train", opts.shard_tokens, wide);
    let mut enc = Encoder::new(tok, sep, Some(writer), bytes, !opts.quiet);
    // Where each file's text starts in the text pushed: a batch holds pieces of several files.
    let mut starts: Vec<(usize, PathBuf)> = Vec::new();
    let mut with_nul = Vec::new();
    for f in files {
        starts.push((enc.read as usize, f.clone()));
        let mut nul = false;
        pieces(f, |text, starts_doc| {
            nul |= text.contains('\0');
            enc.push(text, starts_doc)
        })
        .map_err(|e| placed_input(e, &starts))?;
        if nul {
            with_nul.push(format!("'{}'", f.display()));
        }
    }
    if !with_nul.is_empty() {
        let more = if with_nul.len() > 3 { format!(" and {} more", with_nul.len() - 3) } else { String::new() };
        note_nul_bytes(&format!("{}{more}", with_nul[..with_nul.len().min(3)].join(", ")), with_nul.len() > 1);
    }
    let Encoded { mut shards, tokens: total, documents, empty } = enc.finish().map_err(|e| placed_input(e, &starts))?;
    // The validation split: the end of the stream.
    let val_n = match opts.val {
        ValSplit::Tokens(n) => n,
        ValSplit::Fraction(f) => total - ((total as f64) * (1.0 - f)).round() as usize,
    };
    let listed = || {
        let names: Vec<String> = files.iter().take(3).map(|f| format!("'{}'", f.display())).collect();
        format!(
            "{}{}",
            names.join(", "),
            if files.len() > 3 { format!(" and {} more", files.len() - 3) } else { String::new() }
        )
    };
    if total < 2 {
        return Err(crate::train::TrainError::Settings(format!(
            "the inputs ({}) give {total} token(s){}: too little text to split into training and validation; add text",
            listed(),
            if empty > 0 { format!(" ({empty} document(s) without text skipped)") } else { String::new() }
        )));
    }
    if val_n == 0 {
        return Err(crate::train::TrainError::Settings(format!(
            "the inputs give {total} tokens, of which the validation split (--val-fraction / --val-tokens) takes 0: \
             raise --val-fraction or pass --val-tokens N (at least 1)"
        )));
    }
    if val_n >= total {
        return Err(crate::train::TrainError::Settings(format!(
            "the inputs give {total} tokens and the validation split asks for {val_n}, which leaves none for \
             training: lower --val-tokens / --val-fraction, or add text"
        )));
    }
    let split = total - val_n;
    let val = carve(dir, &opts.name, &mut shards, split, opts.shard_tokens, wide)?;
    let source = format!(
        "ddl data prepare: {} input file(s), {documents} document(s) separated by {}",
        files.len(),
        match (tok.eot_id(), sep.is_empty()) {
            (Some(_), _) => "the end-of-text token",
            (None, false) => "a newline",
            // (The tokenizer drops newlines: meta.json says so rather than claim one.)
            (None, true) => "nothing (the tokenizer has no end-of-text token and drops newlines)",
        }
    );
    let mut all = shards.clone();
    all.extend(val);
    super::data::finish_meta(dir, tok, all, split, val_n, &source)?;
    Ok((split, val_n, documents, empty))
}

/// Says that `what` (files, or `--corpus PATH`; `several`: more than one) holds NUL bytes, which
/// no text holds: a binary file, or one a crash left zeros in (blocks of NULs), was tokenised
/// without a word, a char model's vocabulary gaining '\0'.
fn note_nul_bytes(what: &str, several: bool) {
    let (holds, they) = if several { ("hold", "files") } else { ("holds", "file") };
    eprintln!(
        "note: {what} {holds} NUL bytes, which text does not: a binary {they}, or one a crash left zeros in? They \
         were tokenised as characters; `grep -c -aP '\\x00' FILE` counts the lines with them, `tr -d '\\000' < \
         FILE > NEW` takes them out"
    );
}

/// A `--corpus` read in pieces: its parts' text joined by newlines, one document — the text
/// [`super::data::read_corpus`] reads whole.
#[derive(Debug, Clone)]
pub(crate) struct Corpus {
    /// The setting, for messages.
    pub path: PathBuf,
    pub parts: Vec<CorpusPart>,
}

impl Corpus {
    /// The parts of a `--corpus`: its files, or the built-in text for the default corpus when it
    /// is not there.
    pub fn open(path: &Path) -> Result<Corpus, DataError> {
        use super::data::{DEFAULT_CORPUS, corpus_files, embedded_corpus};
        let parts = if !path.exists() && path == Path::new(DEFAULT_CORPUS) {
            vec![CorpusPart::Text(embedded_corpus())]
        } else {
            corpus_files(path)?.into_iter().map(CorpusPart::File).collect()
        };
        Ok(Corpus { path: path.to_path_buf(), parts })
    }

    /// An unknown character's error with the file it is in and its offset there (the encoder
    /// gives its offset in the joined text).
    pub fn locate(&self, e: DataError) -> DataError {
        // The parts' starts in the text, as `CorpusFeed` joins them (a newline after text).
        let mut starts = Vec::new();
        let mut at = 0usize;
        for p in &self.parts {
            let (path, len) = match p {
                CorpusPart::File(f) => (f.clone(), std::fs::metadata(f).map_or(0, |m| m.len() as usize)),
                CorpusPart::Text(t) => (PathBuf::from(super::data::DEFAULT_CORPUS), t.len()),
            };
            at += usize::from(at > 0);
            starts.push((at, path));
            at += len;
        }
        placed(e, &starts)
    }

    /// Whether every part can be read again (no pipe, no device).
    pub fn regular(&self) -> bool {
        self.parts.iter().all(|p| match p {
            CorpusPart::File(f) => std::fs::metadata(f).is_ok_and(|m| m.is_file()),
            CorpusPart::Text(_) => true,
        })
    }

    /// Refuses the first of its regular files whose first bytes are UTF-16
    /// ([`super::data::utf16_encoding`]), as reading it to make a set does: checked again where a
    /// cached set of it is found, so that a set cached before that check existed (a UTF-16 file
    /// without a byte-order mark tokenised as it was, NULs and all) is not used unchecked.
    pub fn refuse_utf16(&self) -> Result<(), DataError> {
        for part in &self.parts {
            let CorpusPart::File(f) = part else { continue };
            // (A pipe can be read once only: its bytes are checked as it is read.)
            if !std::fs::metadata(f).is_ok_and(|m| m.is_file()) {
                continue;
            }
            let mut head = Vec::with_capacity(4096);
            std::fs::File::open(f).and_then(|r| r.take(4096).read_to_end(&mut head)).map_err(io(f))?;
            if let Some(enc) = super::data::utf16_encoding(&head) {
                return Err(DataError::Utf16 { path: f.clone(), enc });
            }
        }
        Ok(())
    }

    /// The bytes of its text (the parts' sizes and the newlines that join them).
    pub fn bytes(&self) -> u64 {
        let sizes = self.parts.iter().map(|p| match p {
            CorpusPart::File(f) => std::fs::metadata(f).map(|m| m.len()).unwrap_or(0),
            CorpusPart::Text(t) => t.len() as u64,
        });
        sizes.sum::<u64>() + self.parts.len().saturating_sub(1) as u64
    }

    /// The char tokenizer of its text: [`CharTokenizer::from_corpus`] of the whole text, without
    /// holding it.
    pub fn char_tokenizer(&self) -> Result<Tokenizer, DataError> {
        let mut set = crate::tokenizer::CharSet::default();
        text_pieces(&mut CorpusFeed::new(&self.parts), CHUNK, false, |t, _| {
            if crate::train::interrupted() {
                return Err(DataError::Interrupted);
            }
            set.add(&t);
            Ok(())
        })?;
        let chars = set.chars();
        if chars.is_empty() {
            return Err(DataError::Empty(self.path.clone()));
        }
        Ok(Tokenizer::Char(CharTokenizer::from_chars(chars)))
    }

    /// A byte-level BPE of `vocab_size` tokens trained on its text
    /// ([`crate::tokenizer::train_bpe`] of the whole text), read in pieces on a thread of its own
    /// while the trainer counts them (about `chunk` bytes each): the text is never held whole.
    /// `bar`: its progress on a terminal.
    pub fn train_bpe(&self, vocab_size: usize, chunk: usize, bar: bool) -> Result<Tokenizer, DataError> {
        let shown = TrainingBar::new(bar, self.bytes(), vocab_size);
        // The trainer's own pieces (64 KB: what it counts on a core at once) of the pieces read.
        let (tx, rx) = std::sync::mpsc::sync_channel::<String>(256);
        let (read, trained) = std::thread::scope(|s| {
            let reader = s.spawn(move || {
                let mut read = 0u64;
                text_pieces(&mut CorpusFeed::new(&self.parts), chunk, false, |t, _| {
                    read += t.len() as u64;
                    // (A trainer that stopped — its error is returned — takes no more.)
                    for piece in crate::tokenizer::chunks(&t, crate::tokenizer::CHUNK_BYTES) {
                        tx.send(piece.to_string()).map_err(|_| DataError::Interrupted)?;
                    }
                    Ok(())
                })
                .map(|()| read)
            });
            let trained = crate::tokenizer::train_bpe_pieces(shown.taken(rx), vocab_size);
            (reader.join().expect("the corpus reader panicked"), trained)
        });
        shown.done();
        // (An empty corpus is said as such, not as the merges it could not teach; a failed read
        // as the read's error, which left the trainer short of text.)
        match (read, trained) {
            (Ok(0), _) => Err(DataError::Empty(self.path.clone())),
            (Err(e), Ok(_) | Err(crate::tokenizer::TokenizerError::NoMerges)) => Err(e),
            (_, Err(e)) => Err(e.into()),
            (Ok(_), Ok(tok)) => Ok(tok),
        }
    }

    /// The bytes of its text and the tokens `tok` makes of them, counted in pieces on every core
    /// (`bar`: on a terminal, the progress).
    pub fn count_tokens(&self, tok: &Tokenizer, bar: bool) -> Result<(u64, usize), DataError> {
        let mut enc = Encoder::new(tok, &[], None, self.bytes(), bar);
        text_pieces(&mut CorpusFeed::new(&self.parts), CHUNK, false, |t, starts| enc.push(t, starts))?;
        let read = enc.read;
        Ok((read, enc.finish()?.tokens))
    }

    /// Writes its shard set into `dir` in constant memory: its text tokenised with `tok` in
    /// pieces of about `chunk` bytes — the tokens of the whole text, since pieces are cut where
    /// byte-level BPE splits anyway (a line of more than `2 × chunk` bytes without a space
    /// between words is the exception, [`cut_point`]) — its last `n − round(n·(1 − f))` tokens
    /// the validation split; `bar`: progress shown on a terminal; `source`: how the set's
    /// `meta.json` names its text (`--corpus PATH`, `--text PATH`).
    #[allow(clippy::too_many_arguments)]
    pub fn write_set(
        &self,
        dir: &Path,
        source: &str,
        tok: &Tokenizer,
        val_fraction: f64,
        shard_tokens: usize,
        chunk: usize,
        bar: bool,
    ) -> Result<super::data::Meta, DataError> {
        let wide = tok.vocab_size() > u16::MAX as usize + 1;
        let writer = Writer::new(dir, "corpus", "train", shard_tokens, wide);
        let mut enc = Encoder::new(tok, &[], Some(writer), self.bytes(), bar);
        let mut nul = false;
        text_pieces(&mut CorpusFeed::new(&self.parts), chunk, false, |t, starts| {
            nul |= t.contains('\0');
            enc.push(t, starts)
        })
        .map_err(|e| self.locate(e))?;
        if nul {
            note_nul_bytes(source, false);
        }
        if enc.read == 0 {
            return Err(DataError::Empty(self.path.clone()));
        }
        let Encoded { mut shards, tokens: total, .. } = enc.finish().map_err(|e| self.locate(e))?;
        let split = ((total as f64) * (1.0 - val_fraction)).round() as usize;
        let val = carve(dir, "corpus", &mut shards, split, shard_tokens, wide)?;
        shards.extend(val);
        super::data::finish_meta(dir, tok, shards, split, total - split, source)
    }
}

/// Moves tokens `[split, total)` of the training shards into validation shards and truncates
/// the training shards at `split`.
fn carve(
    dir: &Path,
    name: &str,
    shards: &mut Vec<(PathBuf, usize)>,
    split: usize,
    shard_tokens: usize,
    wide: bool,
) -> Result<Vec<(PathBuf, usize)>, DataError> {
    let mut vw = Writer::new(dir, name, "val", shard_tokens, wide);
    {
        let stream =
            Stream::new(shards.iter().map(|(p, _)| Shard::open(p, Format::Llmc)).collect::<Result<Vec<_>, _>>()?);
        let mut i = split;
        let mut buf = Vec::with_capacity(1 << 20);
        while i < stream.len() {
            let end = (i + (1 << 20)).min(stream.len());
            buf.clear();
            buf.extend((i..end).map(|k| stream.get(k)));
            vw.push(&buf)?;
            i = end;
        }
    }
    let val = vw.finish()?;
    // Truncate: shards wholly past the split go, the one holding it is cut.
    let mut start = 0usize;
    let mut kept = Vec::new();
    for (p, n) in shards.drain(..) {
        if start >= split {
            std::fs::remove_file(&p).map_err(io(&p))?;
        } else if start + n > split {
            let keep = split - start;
            let width = if wide { 4 } else { 2 };
            let f = std::fs::OpenOptions::new().write(true).open(&p).map_err(io(&p))?;
            f.set_len((HEADER_BYTES + keep * width) as u64).map_err(io(&p))?;
            use std::io::{Seek, SeekFrom, Write};
            let mut f = f;
            f.seek(SeekFrom::Start(8)).map_err(io(&p))?;
            f.write_all(&(keep as i32).to_le_bytes()).map_err(io(&p))?;
            f.sync_all().map_err(io(&p))?;
            kept.push((p, keep));
        } else {
            kept.push((p, n));
        }
        start += n;
    }
    *shards = kept;
    Ok(val)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Options of a char-level set of `input` in `out` (one validation token, 1000 a shard).
    fn char_opts(out: PathBuf, input: PathBuf) -> PrepareOptions {
        PrepareOptions {
            tokenizer: "char".into(),
            out,
            inputs: vec![input],
            val: ValSplit::Tokens(1),
            shard_tokens: 1000,
            name: "data".into(),
            quiet: true,
        }
    }

    /// The ids of the whole text from the Hugging Face tokenizer itself (no cutting of ours).
    fn whole_ids(tok: &Tokenizer, text: &str) -> Vec<u32> {
        let Tokenizer::Bpe(t) = tok else { unreachable!("a BPE") };
        t.encode_fast(text, false).unwrap().get_ids().to_vec()
    }

    fn pieces_of_text(dir: &Path, name: &str, text: &str, chunk: usize) -> Vec<String> {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        let mut got = Vec::new();
        pieces_of(&p, chunk, |t, _| {
            got.push(t);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        got
    }

    /// A JSON line that gives `text` twice is refused naming the file, the line and the field (the
    /// last value was taken, the first document dropped without a word); a `text` inside another
    /// field's object is no second one.
    #[test]
    fn a_json_line_with_the_text_field_twice_is_refused() {
        let dir = crate::testing::scratch_dir("prepare-jsonl-twice");
        let p = dir.join("docs.jsonl");
        std::fs::write(&p, "{\"text\": \"one\"}\n{\"text\": \"a\", \"text\": \"b\"}\n").unwrap();
        let e = pieces_of(&p, 4096, |_, _| Ok(())).unwrap_err().to_string();
        assert!(
            e.contains("docs.jsonl") && e.contains("line 2") && e.contains("\"text\" is given more than once"),
            "{e}"
        );
        std::fs::write(&p, "{\"meta\": {\"text\": \"x\"}, \"text\": \"a\"}\n").unwrap();
        let mut got = Vec::new();
        pieces_of(&p, 4096, |t, _| {
            got.push(t);
            Ok(())
        })
        .unwrap();
        assert_eq!(got, vec!["a".to_string()]);
        assert_eq!((text_fields("[1]"), text_fields("{\"te\\u0078t\": 1, \"text\": 2}")), (0, 2));
    }

    /// A document without text — a JSON line's `"text": ""`, an empty file, one that holds only
    /// a byte-order mark — is skipped and said: it was counted as a document, and its separator
    /// put two in a row into the shards (`"a" "" "b"` gave a, newline, newline, b).
    #[test]
    fn documents_without_text_are_skipped_not_counted() {
        let dir = crate::testing::scratch_dir("prepare-empty-docs");
        let inputs = dir.join("in");
        std::fs::create_dir_all(&inputs).unwrap();
        std::fs::write(inputs.join("a.jsonl"), "{\"text\": \"ab\"}\n{\"text\": \"\"}\n{\"text\": \"cd\"}\n").unwrap();
        std::fs::write(inputs.join("b.txt"), "").unwrap();
        std::fs::write(inputs.join("c.txt"), "\u{feff}").unwrap();
        std::fs::write(inputs.join("d.txt"), "ef").unwrap();
        let out = dir.join("shards");
        let opts = char_opts(out.clone(), inputs);
        let p = prepare(&opts).unwrap();
        assert_eq!((p.documents, p.empty, p.train_tokens + p.val_tokens), (3, 3, 8), "{p:?}");
        let meta = crate::train::data::read_meta(&out).unwrap().unwrap();
        let tok = Tokenizer::from_json(&meta.tokenizer).unwrap();
        let mut ids = Vec::new();
        for f in &p.files {
            let shard = crate::train::shards::Shard::open(f, crate::train::shards::Format::Llmc).unwrap();
            ids.extend((0..shard.len()).map(|i| shard.get(i)));
        }
        assert_eq!(tok.decode(&ids).unwrap(), "ab\ncd\nef");
        // Nothing but empty documents: no text, said so.
        std::fs::write(dir.join("e.jsonl"), "{\"text\": \"\"}\n{\"text\": \"\"}\n").unwrap();
        let e = prepare(&PrepareOptions { out: dir.join("none"), inputs: vec![dir.join("e.jsonl")], ..opts })
            .unwrap_err()
            .to_string();
        assert!(e.contains("give 0 token(s) (2 document(s) without text skipped)"), "{e}");
    }

    /// An --out below a file (`notes.txt/shards`) says which file is in the way (it was "cannot
    /// make 'notes.txt' (File exists)", as if it were a folder that could not be written).
    #[test]
    fn an_out_below_a_file_names_the_file() {
        let dir = crate::testing::scratch_dir("prepare-out-below-file");
        let text = dir.join("notes.txt");
        std::fs::write(&text, "some text to prepare\n").unwrap();
        let opts = char_opts(text.join("sub/shards"), text.clone());
        let e = prepare(&opts).unwrap_err().to_string();
        assert!(e.contains("notes.txt' is a file, so the folder cannot be made there"), "{e}");
    }

    /// A run that fails leaves no folder behind: not --out, nor the folders above it that it made
    /// (an empty `a/b` was left when `a/b/shards` failed), while a folder that was there stays.
    #[test]
    fn a_failed_prepare_removes_the_folders_it_made_above_out() {
        let dir = crate::testing::scratch_dir("prepare-made-above");
        let empty = dir.join("empty.txt");
        std::fs::write(&empty, "").unwrap();
        let opts = char_opts(dir.join("a/b/shards"), empty);
        let e = prepare(&opts).unwrap_err().to_string();
        assert!(e.contains("give 0 token(s)"), "{e}");
        assert!(!dir.join("a").exists(), "a folder it made above --out is left");
        std::fs::create_dir_all(dir.join("a")).unwrap();
        prepare(&opts).unwrap_err();
        assert!(dir.join("a").is_dir() && !dir.join("a/b").exists(), "one of the user's was removed, or a/b left");
    }

    /// A JSON line without a string `text` says what it holds instead: the type of its `text`,
    /// its fields (a misspelt name), or that it is no object (all were "no string field
    /// \"text\"", the same for a number as for a missing field).
    #[test]
    fn a_json_line_without_a_string_text_says_what_it_holds() {
        let dir = crate::testing::scratch_dir("prepare-jsonl-kinds");
        let p = dir.join("docs.jsonl");
        for (line, want) in [
            ("{\"text\": 5}", "its \"text\" is a number, not a string"),
            ("{\"text\": null}", "its \"text\" is null"),
            ("{\"txt\": \"a\", \"id\": 1}", "its fields are \"id\", \"txt\""),
            ("{}", "an empty object"),
            ("[\"a\"]", "it is an array, not an object"),
        ] {
            std::fs::write(&p, format!("{{\"text\": \"ok\"}}\n{line}\n")).unwrap();
            let e = pieces_of(&p, 4096, |_, _| Ok(())).unwrap_err().to_string();
            assert!(
                e.contains("docs.jsonl") && e.contains("line 2: no string field") && e.contains(want),
                "{line}: {e}"
            );
        }
        // A line that is not JSON says what the file should hold (it gave the parser's words alone).
        std::fs::write(&p, "{\"text\": \"ok\"}\n{\"text\": \"cut\n").unwrap();
        let e = pieces_of(&p, 4096, |_, _| Ok(())).unwrap_err().to_string();
        assert!(e.contains("line 2: not JSON") && e.contains("one object per line") && e.contains(".txt file"), "{e}");
    }

    /// `tokenizer train`'s bar counts the bytes of the pieces as the trainer takes them, then
    /// says the merges are being learnt (the command was silent for minutes on a large corpus).
    #[test]
    fn the_training_bar_counts_what_the_trainer_takes_then_the_merges() {
        let shown = TrainingBar(Some(indicatif::ProgressBar::hidden()), 300);
        let (tx, rx) = std::sync::mpsc::sync_channel::<String>(4);
        let bar = shown.0.clone().unwrap();
        std::thread::scope(|s| {
            s.spawn(move || {
                for p in ["ab", "cde", "fghi"] {
                    tx.send(p.to_string()).unwrap();
                }
            });
            let mut taken = shown.taken(rx);
            assert_eq!(taken.next().as_deref(), Some("ab"));
            assert_eq!((bar.position(), bar.message()), (2, String::new()));
            assert_eq!(taken.by_ref().count(), 2);
        });
        assert_eq!(bar.position(), 9);
        assert_eq!(bar.message(), "learning the merges (up to 300 tokens)");
        shown.done();
        assert!(bar.is_finished());
    }

    /// A corpus that is one long line is cut into bounded pieces (it was held whole: a line of
    /// gigabytes, gigabytes of memory), at single spaces, where byte-level BPE gives the tokens of
    /// the uncut text; a line without spaces at character boundaries.
    #[test]
    fn a_long_line_is_cut_into_bounded_pieces_with_the_tokens_of_the_whole() {
        let dir = crate::testing::scratch_dir("prepare-long-line");
        let shakespeare = crate::train::data::embedded_corpus();
        let tok = crate::tokenizer::train_bpe(&shakespeare[..200_000], 600).unwrap();
        let chunk = 4096;
        // One line: the corpus's lines joined by spaces (runs of spaces and punctuation kept).
        let line: String = shakespeare[..120_000].replace('\n', " ");
        let got = pieces_of_text(&dir, "line.txt", &line, chunk);
        assert!(got.len() > 10, "cut into {} pieces", got.len());
        assert_eq!(got.concat(), line, "the pieces are the text");
        assert!(
            got.iter().all(|p| p.len() <= 3 * chunk),
            "a piece over the bound: {:?}",
            got.iter().map(String::len).max()
        );
        let whole = whole_ids(&tok, &line);
        let cut: Vec<u32> = got.iter().flat_map(|p| tok.encode(p).unwrap()).collect();
        assert_eq!(cut, whole, "the pieces' tokens are the whole line's");

        // No whitespace, ASCII (base64): cut between letters, digits and others, to the same ids.
        let b64: String = (0..100_000u32)
            .map(|i| b"ABCdef0123+/xyZ9="[(i.wrapping_mul(2_654_435_761) >> 7) as usize % 17] as char)
            .collect();
        let tok3 = crate::tokenizer::train_bpe(&b64, 400).unwrap();
        let got = pieces_of_text(&dir, "b64.txt", &b64, chunk);
        assert!(got.len() > 5 && got.iter().all(|p| p.len() <= 3 * chunk), "{} pieces", got.len());
        let cut: Vec<u32> = got.iter().flat_map(|p| tok3.encode(p).unwrap()).collect();
        assert_eq!(cut, whole_ids(&tok3, &b64), "base64: the pieces' tokens are the whole line's");

        // No space at all, multi-byte characters: bounded, cut at character boundaries.
        let blob: String = "日本語のテキストé".repeat(3000);
        let got = pieces_of_text(&dir, "blob.txt", &blob, chunk);
        assert!(got.len() > 5 && got.iter().all(|p| p.len() <= 3 * chunk));
        assert_eq!(got.concat(), blob);

        // Lines ending in a space: " \n" is one pre-token, never cut between (it was: another
        // token than the whole text's where a piece ended).
        let spaced = shakespeare[..120_000].replace('\n', " \n");
        let tok2 = crate::tokenizer::train_bpe(&spaced, 500).unwrap();
        let got = pieces_of_text(&dir, "spaced.txt", &spaced, chunk);
        assert!(got.len() > 10);
        let cut: Vec<u32> = got.iter().flat_map(|p| tok2.encode(p).unwrap()).collect();
        assert_eq!(cut, whole_ids(&tok2, &spaced), "the pieces' tokens are the whole text's");

        // Ordinary text is cut at its lines' ends (before the newline that follows a word).
        let text = &shakespeare[..60_000];
        let got = pieces_of_text(&dir, "text.txt", text, chunk);
        assert_eq!(got.concat(), text);
        for p in &got[1..] {
            assert!(p.starts_with('\n'), "a piece of ordinary text cut mid-line: {:?}…", &p[..20]);
        }
    }

    /// Text whose lines end in other marks than letters and ASCII punctuation — Chinese (`。`,
    /// `」`), emoji, Cyrillic, tabs, CRLF — is cut at its lines too (it was cut only at hard
    /// character boundaries every 16 MB, changing tokens there, and a piece of 16 MB tokenised
    /// at once took gigabytes), with the tokens of the whole text.
    #[test]
    fn text_in_any_script_is_cut_at_its_lines_with_the_tokens_of_the_whole() {
        let dir = crate::testing::scratch_dir("prepare-scripts");
        let lines = [
            "「你好，世界。」他说。",
            "今日は良い天気ですね！",
            "Привет, мир… — «цитата»",
            "emoji 🎉🎉 end 🎉",
            "tab\tseparated\tvalues\t",
            "crlf line\r",
            "  leading spaces and trailing ones  ",
            "數字１２３と number 456。",
            "",
            "don't we'll they're 's",
        ];
        let mut text = String::new();
        let mut n = 0usize;
        while text.len() < 200_000 {
            text.push_str(lines[n % lines.len()]);
            text.push_str(if n % 7 == 3 { " " } else { "" });
            text.push('\n');
            n = n * 31 % 1009 + 1;
        }
        let tok = crate::tokenizer::train_bpe(&text, 700).unwrap();
        let chunk = 2048;
        let got = pieces_of_text(&dir, "scripts.txt", &text, chunk);
        assert_eq!(got.concat(), text, "the pieces are the text");
        assert!(got.len() > 50, "cut into {} pieces", got.len());
        assert!(got.iter().all(|p| p.len() <= 2 * chunk), "{:?}", got.iter().map(String::len).max());
        let cut: Vec<u32> = got.iter().flat_map(|p| tok.encode(p).unwrap()).collect();
        assert_eq!(cut, whole_ids(&tok, &text), "the pieces' tokens are the whole text's");
        // And the tokenizer's own 64 KB pieces.
        assert_eq!(tok.encode(&text).unwrap(), whole_ids(&tok, &text));
        // Chinese alone, with Windows line ends and paragraphs indented with U+3000 (no newline
        // between two non-space characters there): every piece starts at a line's end.
        let lines = ["「你好，世界。」他说。", "今日は良い天気ですね！", "數字１２３。"];
        for (name, end, indent) in [("zh", "\n", ""), ("zh-crlf", "\r\n", ""), ("zh-indent", "\n", "\u{3000}\u{3000}")]
        {
            let zh: String = (0..3000).map(|i| format!("{indent}{}{end}", lines[i % 3])).collect();
            let got = pieces_of_text(&dir, &format!("{name}.txt"), &zh, chunk);
            assert!(got.len() > 10, "{name}: {} pieces", got.len());
            assert!(got[1..].iter().all(|p| p.starts_with(['\n', '\r'])), "{name}: a piece cut mid-line");
            let cut: Vec<u32> = got.iter().flat_map(|p| tok.encode(p).unwrap()).collect();
            assert_eq!(cut, whole_ids(&tok, &zh), "{name}");
            assert_eq!(tok.encode(&zh).unwrap(), whole_ids(&tok, &zh), "{name}: the tokenizer's own pieces");
        }
    }
}
