//! The data pipeline: a UTF-8 corpus (a file, or a directory of .txt files) tokenised once into a
//! cached token file (u16 or u32, memory-mapped), a train/validation split, and batches sampled
//! by a seeded generator that depends only on (seed, step, micro-batch) — so a resumed run sees
//! exactly the batches an uninterrupted run would.

use std::path::{Path, PathBuf};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::tokenizer::Tokenizer;

/// A corpus problem, naming the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("corpus '{0}' does not exist (pass --corpus PATH: a UTF-8 text file or a directory of .txt files)")]
    Missing(PathBuf),
    #[error("corpus directory '{0}' contains no .txt files")]
    NoTxt(PathBuf),
    #[error("corpus '{0}' is empty")]
    Empty(PathBuf),
    #[error("corpus '{path}' is not UTF-8 (first invalid byte at offset {offset})")]
    NotUtf8 { path: PathBuf, offset: usize },
    #[error("cannot read '{path}': {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Tokenize(#[from] crate::tokenizer::TokenizerError),
    #[error(
        "the {split} split has {have} tokens, fewer than one sequence of {need} (seq_len + 1): use a longer corpus or a shorter --set seq_len"
    )]
    TooShort { split: &'static str, have: usize, need: usize },
}

/// The default corpus setting: TinyShakespeare, relative to the repository.
pub const DEFAULT_CORPUS: &str = "assets/tinyshakespeare.txt";

/// TinyShakespeare in the binary, so that the default corpus works from any directory.
const EMBEDDED_CORPUS: &str = include_str!("../../assets/tinyshakespeare.txt");

/// Reads a corpus: one file, or every `.txt` file of a directory (sorted by name, joined by a
/// newline). The default corpus ([`DEFAULT_CORPUS`]) is the copy in the binary when the current
/// directory has no such file (the same text either way).
pub fn read_corpus(path: &Path) -> Result<String, DataError> {
    if !path.exists() && path == Path::new(DEFAULT_CORPUS) {
        return Ok(EMBEDDED_CORPUS.to_string());
    }
    if !path.exists() {
        return Err(DataError::Missing(path.to_path_buf()));
    }
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|source| DataError::Io { path: path.to_path_buf(), source })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "txt"))
            .collect();
        v.sort();
        if v.is_empty() {
            return Err(DataError::NoTxt(path.to_path_buf()));
        }
        v
    } else {
        vec![path.to_path_buf()]
    };
    let mut text = String::new();
    for f in files {
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

/// Token ids of the whole corpus, memory-mapped from the cache.
pub struct Tokens {
    map: memmap2::Mmap,
    wide: bool,
    pub path: PathBuf,
}

impl Tokens {
    pub fn len(&self) -> usize {
        self.map.len() / if self.wide { 4 } else { 2 }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> u32 {
        if self.wide {
            u32::from_le_bytes(self.map[4 * i..4 * i + 4].try_into().unwrap())
        } else {
            u16::from_le_bytes(self.map[2 * i..2 * i + 2].try_into().unwrap()) as u32
        }
    }
}

/// The cache directory: `$DDL_CACHE_DIR`, else `$XDG_CACHE_HOME/ddl`, else `~/.cache/ddl`.
pub fn cache_dir() -> PathBuf {
    if let Ok(d) = std::env::var("DDL_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Ok(d) = std::env::var("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("ddl");
    }
    std::env::var("HOME")
        .map(|h| PathBuf::from(h).join(".cache/ddl"))
        .unwrap_or_else(|_| std::env::temp_dir().join("ddl"))
}

/// Tokenises `text` once per (corpus, tokenizer) and memory-maps the cached ids.
pub fn tokens_cached(text: &str, tok: &Tokenizer) -> Result<Tokens, DataError> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(text.as_bytes());
    h.update(tok.to_json().as_bytes());
    let key: String = h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect();
    let wide = tok.vocab_size() > u16::MAX as usize + 1;
    let dir = cache_dir().join("tokens");
    let path = dir.join(format!("{key}.{}", if wide { "u32" } else { "u16" }));
    if !path.exists() {
        let ids = tok.encode(text)?;
        let mut bytes = Vec::with_capacity(ids.len() * if wide { 4 } else { 2 });
        for id in ids {
            if wide {
                bytes.extend_from_slice(&id.to_le_bytes());
            } else {
                bytes.extend_from_slice(&(id as u16).to_le_bytes());
            }
        }
        std::fs::create_dir_all(&dir).map_err(|source| DataError::Io { path: dir.clone(), source })?;
        crate::train::checkpoint::write_atomic(&path, &bytes)
            .map_err(|source| DataError::Io { path: path.clone(), source })?;
    }
    let f = std::fs::File::open(&path).map_err(|source| DataError::Io { path: path.clone(), source })?;
    // SAFETY: the cache file is written once (atomically) and never modified afterwards.
    let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|source| DataError::Io { path: path.clone(), source })?;
    Ok(Tokens { map, wide, path })
}

/// Train and validation ranges of one token stream, and the batch sampler.
pub struct Dataset {
    pub tokens: Tokens,
    /// Tokens `[0, split)` train, `[split, len)` validate.
    pub split: usize,
}

/// The dataset of a run's settings: its corpus tokenized with its tokenizer (cached), split at
/// `train.val_fraction`.
pub fn open_for_run(run: &crate::train::RunConfig) -> Result<Dataset, crate::train::TrainError> {
    let text = read_corpus(Path::new(&run.corpus))?;
    let tok = crate::train::build_tokenizer(&run.tokenizer, &text)?;
    let tokens = tokens_cached(&text, &tok)?;
    Ok(Dataset::new(tokens, run.train.val_fraction, run.train.seq_len)?)
}

impl Dataset {
    /// Tokens in the whole stream (train and validation).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Token `i` of the whole stream.
    pub fn get(&self, i: usize) -> u32 {
        self.tokens.get(i)
    }

    pub fn new(tokens: Tokens, val_fraction: f64, seq_len: usize) -> Result<Dataset, DataError> {
        let n = tokens.len();
        let split = ((n as f64) * (1.0 - val_fraction)).round() as usize;
        let need = seq_len + 1;
        if split < need {
            return Err(DataError::TooShort { split: "train", have: split, need });
        }
        if n - split < need {
            return Err(DataError::TooShort { split: "validation", have: n - split, need });
        }
        Ok(Dataset { tokens, split })
    }

    fn sample(&self, lo: usize, hi: usize, b: usize, t: usize, rng: &mut ChaCha8Rng) -> (Vec<i32>, Vec<i32>) {
        let mut x = Vec::with_capacity(b * t);
        let mut y = Vec::with_capacity(b * t);
        for _ in 0..b {
            let s = rng.random_range(lo..=hi - t - 1);
            for i in 0..t {
                x.push(self.tokens.get(s + i) as i32);
                y.push(self.tokens.get(s + i + 1) as i32);
            }
        }
        (x, y)
    }

    /// The training batch of (step, micro-batch): a pure function of the seed and position.
    pub fn train_batch(&self, seed: u64, step: usize, micro: usize, b: usize, t: usize) -> (Vec<i32>, Vec<i32>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(((step as u64) << 16) | micro as u64);
        self.sample(0, self.split, b, t, &mut rng)
    }

    /// Validation batch `i` of the fixed evaluation set.
    pub fn val_batch(&self, seed: u64, i: usize, b: usize, t: usize) -> (Vec<i32>, Vec<i32>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7661_6c69_6461_7465);
        rng.set_stream(i as u64);
        self.sample(self.split, self.tokens.len(), b, t, &mut rng)
    }
}
