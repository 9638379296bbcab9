//! Token shards in llm.c's format, read by memory map and written in constant memory.
//!
//! A shard is 256 little-endian int32 of header — magic, version, token count, the rest zero —
//! then the tokens: uint16 (magic 20240520, version 1) or, for vocabularies above 65,535, uint32
//! (magic 20240801, version 7). Shard sets are named as llm.c names them: `NAME_train_NNNNNN.bin`
//! and `NAME_val_NNNNNN.bin`, so its downloaded shards (the FineWeb GPT-2 shards, for example)
//! are recognised as they are. Headerless uint16 files (nanoGPT's `train.bin`) are read only when
//! asked for ([`Format::RawU16`]).

use std::io::Write;
use std::path::{Path, PathBuf};

/// Magic and version of uint16-token shards.
pub const MAGIC_U16: i32 = 20240520;
pub const VERSION_U16: i32 = 1;
/// Magic and version of uint32-token shards.
pub const MAGIC_U32: i32 = 20240801;
pub const VERSION_U32: i32 = 7;
/// Header bytes (256 int32).
pub const HEADER_BYTES: usize = 1024;

/// A shard problem, naming the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("cannot read '{path}': {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cannot write '{path}': {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error(
        "'{path}' has {len} bytes, fewer than the 1024-byte header of an llm.c token shard (a headerless uint16 \
         file such as nanoGPT's train.bin needs --data-format raw-u16)"
    )]
    NoHeader { path: PathBuf, len: u64 },
    #[error(
        "'{path}' starts with magic {magic}, not an llm.c token shard's ({MAGIC_U16} for uint16 tokens, \
         {MAGIC_U32} for uint32); a headerless uint16 file (nanoGPT's train.bin) needs --data-format raw-u16"
    )]
    Magic { path: PathBuf, magic: i32 },
    #[error(
        "'{path}' is text, not llm.c token shards: give it as text (`ddl train --corpus`, `ddl eval --text`), or \
         make shards of it with `ddl data prepare {path} --tokenizer T --out DIR`"
    )]
    Text { path: PathBuf },
    #[error("'{path}': magic {magic} with version {version}, expected version {expected}")]
    Version { path: PathBuf, magic: i32, version: i32, expected: i32 },
    #[error(
        "'{path}': its header says {header} tokens but the file holds {have}: it is truncated or was still being \
         written; download it again or re-run `ddl data prepare`"
    )]
    Truncated { path: PathBuf, header: u64, have: u64 },
    #[error("'{path}': a raw uint16 file must have an even size, got {len} bytes")]
    OddRaw { path: PathBuf, len: u64 },
    #[error("'{path}': token {index} is {id}, outside {whose} vocabulary of {vocab} ({why})")]
    OutOfVocab { path: PathBuf, index: usize, id: u32, vocab: usize, whose: &'static str, why: String },
    #[error("{0}")]
    Layout(String),
}

/// How the files of `--data` store tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// llm.c's shards (a header, uint16 or uint32 tokens).
    #[default]
    Llmc,
    /// Headerless little-endian uint16 tokens (nanoGPT's `train.bin` / `val.bin`).
    RawU16,
}

impl Format {
    pub fn parse(s: &str) -> Result<Format, String> {
        match s {
            "llmc" | "llm.c" => Ok(Format::Llmc),
            "raw-u16" => Ok(Format::RawU16),
            _ => Err(format!("unknown data format '{s}' (expected llmc or raw-u16)")),
        }
    }
}

/// Drops bytes `from .. to` of a read-only file mapping (widened to whole `block`s, a multiple of
/// the page size) from this process's resident memory; reading them again faults them back in
/// from the page cache or the file. Shards and checkpoints let go of what they have read.
pub(crate) fn forget_mapped(map: &memmap2::Mmap, from: usize, to: usize, block: usize) {
    #[cfg(unix)]
    {
        let (from, to) = (from / block * block, to.next_multiple_of(block).min(map.len()));
        if to > from {
            // SAFETY: a read-only mapping of a file this process does not write; after
            // MADV_DONTNEED, reading these bytes again faults them in from the page cache or the
            // file, so no slice into the map ever sees different or invalid memory.
            let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, to - from) };
        }
    }
    #[cfg(not(unix))]
    let _ = (map, from, to, block);
}

/// One memory-mapped shard.
pub struct Shard {
    pub path: PathBuf,
    map: memmap2::Mmap,
    offset: usize,
    wide: bool,
    len: usize,
    /// Anonymous memory ([`Shard::from_tokens`]): its pages are the only copy, never released.
    anon: bool,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ShardError + '_ {
    move |source| ShardError::Io { path: path.to_path_buf(), source }
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> ShardError + '_ {
    move |source| ShardError::Write { path: path.to_path_buf(), source }
}

impl Shard {
    /// Maps `path` and checks its header (magic, version, the count against the file's size).
    pub fn open(path: &Path, format: Format) -> Result<Shard, ShardError> {
        let f = std::fs::File::open(path).map_err(io(path))?;
        let bytes = f.metadata().map_err(io(path))?.len();
        // SAFETY: shards are read-only inputs; a file changed under the map would give wrong
        // tokens, not unsafety in safe code reading bytes (the same contract as every mmap reader).
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(io(path))?;
        let p = path.to_path_buf();
        if format == Format::RawU16 {
            if bytes % 2 != 0 {
                return Err(ShardError::OddRaw { path: p, len: bytes });
            }
            return Ok(Shard { path: p, map, offset: 0, wide: false, len: (bytes / 2) as usize, anon: false });
        }
        // (A text file given as shards: its first bytes, UTF-8 without control characters but
        // line ends and tabs, say so; a character cut by the header's end is still text.)
        let head = &map[..(bytes as usize).min(HEADER_BYTES)];
        let head = match std::str::from_utf8(head) {
            Ok(t) => Some(t),
            Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok(),
            Err(_) => None,
        };
        let text =
            head.is_some_and(|t| !t.is_empty() && !t.chars().any(|c| c.is_control() && !"\t\n\r\x0c".contains(c)));
        if bytes < HEADER_BYTES as u64 {
            return Err(if text { ShardError::Text { path: p } } else { ShardError::NoHeader { path: p, len: bytes } });
        }
        let word = |i: usize| i32::from_le_bytes(map[4 * i..4 * i + 4].try_into().unwrap());
        let (magic, version, count) = (word(0), word(1), word(2) as u32 as u64);
        let (wide, expected) = match magic {
            MAGIC_U16 => (false, VERSION_U16),
            MAGIC_U32 => (true, VERSION_U32),
            _ if text => return Err(ShardError::Text { path: p }),
            _ => return Err(ShardError::Magic { path: p, magic }),
        };
        if version != expected {
            return Err(ShardError::Version { path: p, magic, version, expected });
        }
        let have = (bytes - HEADER_BYTES as u64) / if wide { 4 } else { 2 };
        if have < count {
            return Err(ShardError::Truncated { path: p, header: count, have });
        }
        Ok(Shard { path: p, map, offset: HEADER_BYTES, wide, len: count as usize, anon: false })
    }

    /// A shard in memory holding `ids` (a text tokenised for `ddl eval --text`); `name` stands
    /// for its path in messages.
    pub fn from_tokens(name: &Path, ids: &[u32]) -> Result<Shard, ShardError> {
        let mut map = memmap2::MmapMut::map_anon((4 * ids.len()).max(4)).map_err(io(name))?;
        for (o, id) in map.chunks_exact_mut(4).zip(ids) {
            o.copy_from_slice(&id.to_le_bytes());
        }
        let map = map.make_read_only().map_err(io(name))?;
        Ok(Shard { path: name.to_path_buf(), map, offset: 0, wide: true, len: ids.len(), anon: true })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// 16 or 32: the width of each stored id.
    pub fn id_bits(&self) -> u32 {
        if self.wide { 32 } else { 16 }
    }

    /// Token `i` (< len).
    #[inline]
    pub fn get(&self, i: usize) -> u32 {
        if self.wide {
            let o = self.offset + 4 * i;
            u32::from_le_bytes(self.map[o..o + 4].try_into().unwrap())
        } else {
            let o = self.offset + 2 * i;
            u16::from_le_bytes(self.map[o..o + 2].try_into().unwrap()) as u32
        }
    }

    /// Tells the kernel that reads will be at random places (batches of windows anywhere in the
    /// training split): a fault then maps the page it needs rather than a read-around window,
    /// which with large page-cache folios and a deep read-ahead made each batch add megabytes
    /// to the resident size (measured: +480 MiB after 400 windows of a 600 MiB set).
    pub fn advise_random(&self) {
        #[cfg(unix)]
        if !self.anon {
            let _ = self.map.advise(memmap2::Advice::Random);
        }
    }

    /// Drops the pages of tokens `start .. start + len` from this process's mappings (see
    /// [`Stream::release`]).
    pub fn release(&self, start: usize, len: usize) {
        // Released anonymous pages would read back as zeros.
        if self.anon {
            return;
        }
        // Whole 2 MiB blocks around the range: a fault maps more than the page it needs
        // (fault-around, large folios), and a page not released stays resident.
        let width = if self.wide { 4 } else { 2 };
        forget_mapped(&self.map, self.offset + width * start, self.offset + width * (start + len), 2 << 20);
    }

    /// The largest token id (a pass over the shard: for the vocabulary check).
    pub fn max_id(&self) -> Option<(usize, u32)> {
        // In pieces, each let go of once read: the scan does not leave the shard resident.
        const PIECE: usize = 1 << 20;
        let mut best: Option<(usize, u32)> = None;
        for a in (0..self.len).step_by(PIECE) {
            let b = (a + PIECE).min(self.len);
            if let Some(m) = (a..b).map(|i| (i, self.get(i))).max_by_key(|&(_, t)| t)
                && best.is_none_or(|(_, t)| m.1 > t)
            {
                best = Some(m);
            }
            self.release(a, b - a);
        }
        best
    }
}

/// Shards read as one token stream, in order.
pub struct Stream {
    pub shards: Vec<Shard>,
    starts: Vec<usize>,
    len: usize,
}

impl Stream {
    pub fn new(shards: Vec<Shard>) -> Stream {
        let mut starts = Vec::with_capacity(shards.len());
        let mut len = 0;
        for s in &shards {
            starts.push(len);
            len += s.len();
        }
        Stream { shards, starts, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Token `i` of the stream (< len), across shard boundaries.
    #[inline]
    pub fn get(&self, i: usize) -> u32 {
        let s = self.starts.partition_point(|&st| st <= i) - 1;
        self.shards[s].get(i - self.starts[s])
    }

    /// Lets go of the pages holding tokens `start .. start + len` (read already: they are copied
    /// into a batch). They stay in the page cache, but leave this process's resident memory,
    /// which would otherwise grow with every window read — by whole large folios per fault on
    /// recent kernels — up to the size of the data.
    pub fn release(&self, start: usize, len: usize) {
        let (mut i, end) = (start, (start + len).min(self.len));
        while i < end {
            let s = self.starts.partition_point(|&st| st <= i) - 1;
            let shard = &self.shards[s];
            let (a, b) = (i - self.starts[s], (end - self.starts[s]).min(shard.len));
            shard.release(a, b - a);
            i = self.starts[s] + b;
        }
    }

    /// [`Shard::advise_random`] for every shard.
    pub fn advise_random(&self) {
        self.shards.iter().for_each(Shard::advise_random);
    }

    /// The first shard that stores ids in 16 bits although the vocabulary has more than 65,536
    /// tokens (ids from 65,536 up cannot be in it: written from such a tokenizer, they were cut).
    pub fn narrow_for(&self, vocab: usize) -> Option<&Path> {
        (vocab > 1 << 16).then(|| self.shards.iter().find(|s| !s.wide).map(|s| s.path.as_path())).flatten()
    }

    /// Fails naming the shard and position of the first token id ≥ `vocab`; `whose` names the
    /// vocabulary in the message ("the model's", "the tokenizer's").
    pub fn check_vocab(&self, vocab: usize, whose: &'static str) -> Result<(), ShardError> {
        for s in &self.shards {
            if let Some((index, id)) = s.max_id()
                && id as usize >= vocab
            {
                let index = (0..s.len()).find(|&i| s.get(i) as usize >= vocab).unwrap_or(index);
                // A file read as headerless that starts with an llm.c header: its header words
                // were read as tokens.
                let magic = s.map.get(..4).map(|b| i32::from_le_bytes(b.try_into().unwrap()));
                let why = match magic {
                    Some(m @ (MAGIC_U16 | MAGIC_U32)) if !s.anon && s.offset == 0 => format!(
                        "the file starts with an llm.c shard's header (magic {m}), read here as tokens: pass \
                         --data-format llmc"
                    ),
                    _ => "the shards were made with another tokenizer; use the tokenizer they were made with, or \
                          prepare them again"
                        .into(),
                };
                return Err(ShardError::OutOfVocab {
                    path: s.path.clone(),
                    index,
                    id: s.get(index),
                    vocab,
                    whose,
                    why,
                });
            }
        }
        Ok(())
    }
}

/// Writes a split (`NAME_train_…` or `NAME_val_…`) as shards of at most `shard_tokens` tokens,
/// in constant memory: each shard goes to a temporary name and is renamed once complete, with the
/// count in its header, so a stopped writer leaves no shard that looks finished.
pub struct Writer {
    dir: PathBuf,
    name: String,
    split: String,
    shard_tokens: usize,
    wide: bool,
    cur: Option<(std::io::BufWriter<std::fs::File>, PathBuf, usize)>,
    done: Vec<(PathBuf, usize)>,
}

impl Writer {
    /// `wide`: uint32 tokens (vocabularies above 65,536 ids).
    pub fn new(dir: &Path, name: &str, split: &str, shard_tokens: usize, wide: bool) -> Writer {
        Writer {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            split: split.to_string(),
            shard_tokens: shard_tokens.max(1),
            wide,
            cur: None,
            done: Vec::new(),
        }
    }

    /// The final path of shard `i`.
    pub fn shard_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("{}_{}_{i:06}.bin", self.name, self.split))
    }

    /// Appends tokens, starting new shards as they fill.
    pub fn push(&mut self, mut ids: &[u32]) -> Result<(), ShardError> {
        while !ids.is_empty() {
            if self.cur.is_none() {
                // Every shard is mapped when the set is read, and a process may hold about 65,000
                // mappings (Linux's vm.max_map_count): far fewer shards than that.
                if self.done.len() >= MAX_SHARDS {
                    return Err(ShardError::Layout(format!(
                        "more than {MAX_SHARDS} {} shards of {} tokens: the set could not be mapped to be read; give \
                         a larger --shard-tokens (a split may have at most {MAX_SHARDS} shards: with --shard-tokens N \
                         it holds at most {MAX_SHARDS} × N tokens; the default, 100000000, holds 10^12)",
                        self.split, self.shard_tokens
                    )));
                }
                let tmp = self.dir.join(format!(".{}_{}_{:06}.bin.part", self.name, self.split, self.done.len()));
                let f = std::fs::File::create(&tmp).map_err(write_err(&tmp))?;
                let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
                w.write_all(&[0u8; HEADER_BYTES]).map_err(write_err(&tmp))?;
                self.cur = Some((w, tmp, 0));
            }
            let (w, tmp, n) = self.cur.as_mut().unwrap();
            let take = (self.shard_tokens - *n).min(ids.len());
            let mut buf = Vec::with_capacity(take * 4);
            for &id in &ids[..take] {
                if self.wide {
                    buf.extend_from_slice(&id.to_le_bytes());
                } else {
                    buf.extend_from_slice(&(id as u16).to_le_bytes());
                }
            }
            w.write_all(&buf).map_err(write_err(tmp))?;
            *n += take;
            ids = &ids[take..];
            if *n == self.shard_tokens {
                self.close()?;
            }
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), ShardError> {
        use std::io::{Seek, SeekFrom};
        let Some((w, tmp, n)) = self.cur.take() else { return Ok(()) };
        let mut f = w.into_inner().map_err(|e| ShardError::Write { path: tmp.clone(), source: e.into_error() })?;
        let (magic, version) = if self.wide { (MAGIC_U32, VERSION_U32) } else { (MAGIC_U16, VERSION_U16) };
        let mut header = [0u8; 12];
        header[..4].copy_from_slice(&magic.to_le_bytes());
        header[4..8].copy_from_slice(&version.to_le_bytes());
        // (The header's count is 32 bits: a larger shard would read as another length.)
        let count = i32::try_from(n).map_err(|_| {
            ShardError::Layout(format!("{n} tokens in one shard: an llm.c header counts at most {}", i32::MAX))
        })?;
        header[8..].copy_from_slice(&count.to_le_bytes());
        f.seek(SeekFrom::Start(0)).map_err(write_err(&tmp))?;
        f.write_all(&header).map_err(write_err(&tmp))?;
        f.sync_all().map_err(write_err(&tmp))?;
        let path = self.shard_path(self.done.len());
        std::fs::rename(&tmp, &path).map_err(write_err(&path))?;
        self.done.push((path, n));
        Ok(())
    }

    /// Closes the last shard; returns every shard written with its token count.
    pub fn finish(mut self) -> Result<Vec<(PathBuf, usize)>, ShardError> {
        self.close()?;
        Ok(std::mem::take(&mut self.done))
    }
}

/// The train and validation shards of a folder (llm.c's names: `*_train_*.bin`, `*_val_*.bin`,
/// sorted), or the files a glob names (`DIR/*.bin`: `val` in the name marks validation). For
/// [`Format::RawU16`]: `train.bin` and `val.bin` of the folder.
pub fn find(data: &str, format: Format) -> Result<(Vec<PathBuf>, Vec<PathBuf>), ShardError> {
    let (train, val) = find_parts(data, format)?;
    let layout = |m: String| ShardError::Layout(m);
    if format == Format::RawU16 && Path::new(data).is_dir() && (train.is_empty() || val.is_empty()) {
        let other = if find_parts(data, Format::Llmc).is_ok_and(|(t, v)| !t.is_empty() && !v.is_empty()) {
            "; it holds llm.c-format shards (NAME_train_000001.bin …): drop --data-format raw-u16"
        } else {
            ""
        };
        return Err(layout(format!(
            "--data '{data}' with --data-format raw-u16: no {} (raw-u16 reads a folder's train.bin and val.bin, \
             headerless 16-bit token ids){other}",
            if train.is_empty() { "train.bin" } else { "val.bin" }
        )));
    }
    if train.is_empty() {
        return Err(layout(format!(
            "--data '{data}' holds no training shards (llm.c's names: NAME_train_000001.bin …; `ddl data prepare` \
             writes them){}",
            not_shards(data)
        )));
    }
    if val.is_empty() {
        return Err(layout(format!(
            "--data '{data}' holds no validation shard (NAME_val_000000.bin): validation needs one (`ddl data \
             prepare --val-tokens N` writes it){}",
            not_shards(data)
        )));
    }
    Ok((train, val))
}

/// What `--data` is when it is text or a run rather than token shards, said as the remedy; empty
/// when it is neither.
pub(crate) fn not_shards(data: &str) -> String {
    let path = Path::new(data);
    if super::checkpoint::is_run(path) {
        return format!(
            "; '{data}' is a run's folder, not token shards (`ddl info --checkpoint {}` names the data it trained \
             on)",
            crate::shell_word(path)
        );
    }
    let text = |p: &Path| p.is_file() && p.extension().is_some_and(|e| e == "txt");
    let has_text = text(path) || std::fs::read_dir(path).map(|d| d.flatten().any(|e| text(&e.path()))).unwrap_or(false);
    match has_text {
        true => format!(
            "; '{data}' is text, not token shards: give it as --corpus {data} (tokenised when the run starts), or \
             make shards of it with `ddl data prepare {} --tokenizer T --out DIR`",
            crate::shell_word(path)
        ),
        false => String::new(),
    }
}

/// The shards `ddl eval --data` reads: a file or a glob as given (whatever their names), or a
/// folder's validation shards (`val` true) or training shards.
pub fn find_for_eval(data: &str, format: Format, val: bool) -> Result<Vec<PathBuf>, ShardError> {
    let path = Path::new(data);
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    if !path.is_dir() && data.contains(['*', '?']) {
        return glob_files(data);
    }
    let (train, vals) = find_parts(data, format)?;
    let (files, which) = if val { (vals, "validation") } else { (train, "training") };
    if files.is_empty() {
        return Err(ShardError::Layout(format!(
            "--data '{data}' holds no {which} shards (llm.c's names: NAME_{}_000000.bin; headerless: {}.bin); name \
             a file or a glob to evaluate other files",
            if val { "val" } else { "train" },
            if val { "val" } else { "train" }
        )));
    }
    Ok(files)
}

/// The training and validation files of `data` (either may be empty).
pub fn find_parts(data: &str, format: Format) -> Result<(Vec<PathBuf>, Vec<PathBuf>), ShardError> {
    let path = Path::new(data);
    let layout = |m: String| ShardError::Layout(m);
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(io(path))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "bin") && p.is_file())
            .collect();
        v.sort();
        v
    } else if data.contains(['*', '?']) {
        glob_files(data)?
    } else if path.is_file() {
        vec![path.to_path_buf()]
    } else {
        return Err(layout(format!(
            "--data '{data}' does not exist (a folder of shards, a glob such as 'DIR/*_train_*.bin', or a file)"
        )));
    };
    let name = |p: &PathBuf| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (val, train): (Vec<PathBuf>, Vec<PathBuf>) = if format == Format::RawU16 && path.is_dir() {
        let t = path.join("train.bin");
        let v = path.join("val.bin");
        (v.exists().then_some(v).into_iter().collect(), t.exists().then_some(t).into_iter().collect())
    } else {
        files.into_iter().partition(|p| {
            let n = name(p);
            n.contains("_val_") || n.starts_with("val") || n.contains("_val.")
        })
    };
    Ok((train, val))
}

/// The most shards of one split a set may have ([`Writer::push`]).
pub const MAX_SHARDS: usize = 10_000;

/// Files matching a glob whose wildcards are in the file name only (`DIR/*_train_*.bin`).
fn glob_files(pattern: &str) -> Result<Vec<PathBuf>, ShardError> {
    let p = Path::new(pattern);
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let pat = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if dir.to_string_lossy().contains(['*', '?']) {
        return Err(ShardError::Layout(format!("--data '{pattern}': wildcards only in the file name")));
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|f| f.file_name().is_some_and(|n| wildcard(&pat, &n.to_string_lossy())))
        // (`DIR/*` takes the shards, not the set's meta.json.)
        .filter(|f| f.file_name().is_none_or(|n| n != "meta.json"))
        .collect();
    v.sort();
    if v.is_empty() {
        return Err(ShardError::Layout(format!(
            "--data '{pattern}' matches no file (the wildcards are * and ?, in the file name only)"
        )));
    }
    Ok(v)
}

/// `*` and `?` matching.
fn wildcard(p: &str, s: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (p.chars().collect(), s.chars().collect());
    let (mut pi, mut si, mut star, mut mark) = (0, 0, None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A text file given as shards (`ddl eval --data corpus.txt`, `ddl data inspect corpus.txt`)
    /// is said to be text, with what takes text and how to make shards of it: it was "starts with
    /// magic 1936877894" (or "fewer than the 1024-byte header"). Bytes that are not text keep the
    /// shard errors.
    #[test]
    fn a_text_file_given_as_shards_is_said_to_be_text() {
        let dir = crate::testing::scratch_dir("shards-text");
        for (name, text) in [("long.txt", "First Citizen: ".repeat(100)), ("short.txt", "To be, or not".into())] {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            let e = Shard::open(&p, Format::Llmc).err().unwrap().to_string();
            assert!(e.starts_with(&format!("'{}' is text, not llm.c token shards", p.display())), "{e}");
            assert!(e.contains("ddl eval --text") && e.contains("ddl data prepare"), "{e}");
        }
        let p = dir.join("bin");
        std::fs::write(&p, [7u8; 2048]).unwrap();
        assert!(matches!(Shard::open(&p, Format::Llmc), Err(ShardError::Magic { .. })));
        std::fs::write(&p, [0u8, 1, 2]).unwrap();
        assert!(matches!(Shard::open(&p, Format::Llmc), Err(ShardError::NoHeader { .. })));
    }

    /// A text's tokens in anonymous memory read back after any release (released anonymous
    /// pages would read as zeros: `ddl eval --text` once evaluated zeros past its first batch).
    #[test]
    fn tokens_in_memory_survive_release_and_read_back() {
        let ids: Vec<u32> = (0..3_000_000u32).map(|i| i.wrapping_mul(2_654_435_761) % 50_257).collect();
        let s = Stream::new(vec![Shard::from_tokens(Path::new("text.txt"), &ids).unwrap()]);
        assert_eq!(s.len(), ids.len());
        s.advise_random();
        s.release(0, ids.len());
        assert!(ids.iter().enumerate().all(|(i, &id)| s.get(i) == id));
        assert_eq!(s.shards[0].max_id().map(|m| m.1), ids.iter().max().copied());
        assert!(ids.iter().enumerate().all(|(i, &id)| s.get(i) == id), "max_id released nothing");
    }

    #[test]
    fn written_shards_read_back_across_boundaries_in_both_widths() {
        let dir = crate::testing::scratch_dir("shards-rw");
        for wide in [false, true] {
            let name = if wide { "w" } else { "n" };
            let mut w = Writer::new(&dir, name, "train", 7, wide);
            let ids: Vec<u32> = (0..30u32).map(|i| if wide { 70_000 + i * 3 } else { i * 3 }).collect();
            w.push(&ids[..4]).unwrap();
            w.push(&ids[4..]).unwrap();
            let shards = w.finish().unwrap();
            assert_eq!(shards.iter().map(|s| s.1).collect::<Vec<_>>(), vec![7, 7, 7, 7, 2]);
            assert!(shards[0].0.ends_with(format!("{name}_train_000000.bin")));
            let s = Stream::new(shards.iter().map(|(p, _)| Shard::open(p, Format::Llmc).unwrap()).collect());
            assert_eq!(s.len(), 30);
            assert_eq!((0..30).map(|i| s.get(i)).collect::<Vec<_>>(), ids);
            assert!(s.check_vocab(200_000, "the model's").is_ok());
            let e = s.check_vocab(if wide { 70_050 } else { 50 }, "the model's").unwrap_err().to_string();
            assert!(e.contains("outside the model's vocabulary") && e.contains(&format!("{name}_train_0000")), "{e}");
            // 16-bit shards cannot hold a vocabulary past 65,536: named; 32-bit ones can.
            assert_eq!(s.narrow_for(70_000).is_some(), !wide);
            assert!(s.narrow_for(65_536).is_none());
        }
        assert!(std::fs::read_dir(&dir).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().ends_with(".part")));
    }

    #[test]
    fn bad_shards_are_errors_that_name_the_file() {
        let dir = crate::testing::scratch_dir("shards-bad");
        let write = |name: &str, words: &[i32], tokens: usize| {
            let p = dir.join(name);
            let mut b = vec![0u8; HEADER_BYTES];
            for (i, w) in words.iter().enumerate() {
                b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
            }
            b.extend(std::iter::repeat_n(0u8, 2 * tokens));
            std::fs::write(&p, b).unwrap();
            p
        };
        let cases = [
            (write("magic.bin", &[123, 1, 4], 4), "magic 123"),
            (write("version.bin", &[MAGIC_U16, 3, 4], 4), "version 3"),
            (write("short.bin", &[MAGIC_U16, 1, 10], 4), "says 10 tokens but the file holds 4"),
        ];
        for (p, needle) in cases {
            let e = Shard::open(&p, Format::Llmc).err().unwrap().to_string();
            assert!(e.contains(needle) && e.contains(p.file_name().unwrap().to_str().unwrap()), "{e}");
        }
        let tiny = dir.join("tiny.bin");
        std::fs::write(&tiny, [1u8, 2, 3]).unwrap();
        assert!(Shard::open(&tiny, Format::Llmc).err().unwrap().to_string().contains("raw-u16"));
        assert!(Shard::open(&tiny, Format::RawU16).err().unwrap().to_string().contains("even size"));
        std::fs::write(&tiny, [1u8, 0, 2, 0]).unwrap();
        let r = Shard::open(&tiny, Format::RawU16).unwrap();
        assert_eq!((r.len(), r.get(0), r.get(1)), (2, 1, 2));
        // An llm.c shard read as headerless: its header words are out of the vocabulary, and the
        // error says to read it as llm.c's; a headerless file's own out-of-vocabulary token does not.
        let llmc = write("llmc.bin", &[MAGIC_U16, 1, 4], 4);
        let as_raw = Stream::new(vec![Shard::open(&llmc, Format::RawU16).unwrap()]);
        let e = as_raw.check_vocab(50257, "the model's").unwrap_err().to_string();
        assert!(
            e.contains("llmc.bin") && e.contains("llm.c shard's header") && e.contains("--data-format llmc"),
            "{e}"
        );
        Stream::new(vec![Shard::open(&llmc, Format::Llmc).unwrap()]).check_vocab(50257, "the model's").unwrap();
        let e = Stream::new(vec![r]).check_vocab(2, "the model's").unwrap_err().to_string();
        assert!(e.contains("token 1 is 2") && e.contains("another tokenizer") && !e.contains("llmc"), "{e}");
    }

    #[test]
    fn folders_and_globs_find_train_and_validation_shards() {
        let dir = crate::testing::scratch_dir("shards-find");
        for n in ["fw_train_000001.bin", "fw_train_000002.bin", "fw_val_000000.bin", "notes.txt"] {
            std::fs::write(dir.join(n), b"").unwrap();
        }
        let (t, v) = find(dir.to_str().unwrap(), Format::Llmc).unwrap();
        assert_eq!(t.len(), 2);
        assert!(t[0].ends_with("fw_train_000001.bin") && v[0].ends_with("fw_val_000000.bin"));
        let (t, v) = find(&format!("{}/fw_*.bin", dir.display()), Format::Llmc).unwrap();
        assert_eq!((t.len(), v.len()), (2, 1));
        assert!(
            find(&format!("{}/xx*.bin", dir.display()), Format::Llmc).unwrap_err().to_string().contains("matches no")
        );
        assert!(wildcard("a*b?c", "axxbyc") && !wildcard("a*b", "ac") && wildcard("*", ""));
        let only = crate::testing::scratch_dir("shards-find-noval");
        std::fs::write(only.join("x_train_000000.bin"), b"").unwrap();
        assert!(find(only.to_str().unwrap(), Format::Llmc).unwrap_err().to_string().contains("no validation shard"));
    }
}
