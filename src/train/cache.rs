//! The shard cache of `ddl train --corpus` and `ddl eval --text`: the sets [`super::data`] makes
//! (a corpus's split, a text's tokens with a checkpoint's tokenizer), one folder each under
//! `CACHE/shards/KEY` (KEY from the corpus files' names, sizes and times, the tokenizer setting and
//! the validation fraction). Each set records the settings it serves in `cache.json`, whose
//! modification time is when a run last used it. With that record a set is *current* (a run with
//! these settings finds it) or *stale* (the corpus or the tokenizer file changed since, or the
//! corpus is gone: no run finds it again). A run removes the stale sets of its own settings (an
//! edited corpus leaves no set behind); `ddl data cache` lists the cache, `--prune` removes every
//! stale set (and what killed makers left), `--unused-for` the sets not used for a while,
//! `--clear` all.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::data::{DEFAULT_CORPUS, MAKING, Meta, read_meta};

/// The file of a set that records its settings (and, by its time, its last use).
pub const RECORD_FILE: &str = "cache.json";

/// The settings a cached set serves: a run with them finds it while the corpus and the tokenizer
/// file are as they were when it was made.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// The corpus: its absolute path (as given where it has none), "" for the built-in one.
    pub corpus: String,
    /// The tokenizer setting: `char`, or a tokenizer file's absolute path.
    pub tokenizer: String,
    pub val_fraction: f64,
}

impl Record {
    /// The record of a run's settings (`corpus` and `tok_setting` as given).
    pub fn new(corpus: &str, tok_setting: &str, val_fraction: f64) -> Record {
        let path = Path::new(corpus);
        let absolute = |p: &Path| std::fs::canonicalize(p).map(|p| p.display().to_string());
        let corpus = if !path.exists() && path == Path::new(DEFAULT_CORPUS) {
            String::new()
        } else {
            absolute(path).unwrap_or_else(|_| corpus.to_string())
        };
        let tokenizer = if tok_setting == "char" {
            tok_setting.to_string()
        } else {
            absolute(Path::new(tok_setting)).unwrap_or_else(|_| tok_setting.to_string())
        };
        Record { corpus, tokenizer, val_fraction }
    }

    fn same_settings(&self, o: &Record) -> bool {
        self.corpus == o.corpus
            && self.tokenizer == o.tokenizer
            && self.val_fraction.to_bits() == o.val_fraction.to_bits()
    }

    /// The corpus as a person names it.
    pub fn corpus_name(&self) -> String {
        if self.corpus.is_empty() { format!("{DEFAULT_CORPUS} (built in)") } else { self.corpus.clone() }
    }

    /// Whether a run with these settings finds a set of key base `base` now.
    fn state(&self, base: &str) -> State {
        let corpus = (!self.corpus.is_empty()).then(|| Path::new(&self.corpus));
        if corpus.is_some_and(|c| !c.exists()) {
            return State::CorpusGone;
        }
        match super::data::key_of(corpus, &self.tokenizer, self.val_fraction) {
            Ok(k) if k == base => State::Current,
            Ok(_) => State::Changed,
            Err(_) => State::CorpusGone,
        }
    }
}

/// Whether a run can find a set again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// A run with its settings finds it.
    Current,
    /// The corpus or the tokenizer file changed since it was made: no run finds it again.
    Changed,
    /// The corpus is gone (or no longer reads): no run finds it again.
    CorpusGone,
    /// Made by an earlier version of `ddl`, not used since: its settings are not known.
    Unrecorded,
    /// Its record (`cache.json`) is there but does not read (damaged, edited): its settings are
    /// not known. A run with its settings that finds it writes the record again.
    RecordDamaged,
    /// Its `meta.json` does not read (a run on its settings would make it again).
    Damaged,
}

impl State {
    /// Whether no run can find the set again (`--prune` removes it).
    pub fn stale(self) -> bool {
        matches!(self, State::Changed | State::CorpusGone | State::Damaged)
    }

    pub fn describe(self) -> &'static str {
        match self {
            State::Current => "current",
            State::Changed => "stale: corpus or tokenizer changed",
            State::CorpusGone => "stale: corpus gone",
            State::Unrecorded => "unrecorded (older ddl)",
            State::RecordDamaged => "record damaged (cache.json does not read)",
            State::Damaged => "damaged",
        }
    }
}

/// One cached set.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Set {
    pub key: String,
    pub dir: PathBuf,
    /// Bytes of its files.
    pub bytes: u64,
    pub train_tokens: Option<usize>,
    pub val_tokens: Option<usize>,
    pub vocab_size: Option<usize>,
    pub record: Option<Record>,
    /// `meta.json`'s account of its source (`--corpus PATH`), for sets without a record.
    pub source: Option<String>,
    /// The tokenizer's kind (`char`, `bpe`) for sets without a record.
    pub kind: Option<String>,
    /// When a run last used it (made it, or found it), as far as the cache knows.
    #[serde(serialize_with = "unix_seconds")]
    pub last_used: Option<SystemTime>,
    pub state: State,
}

fn unix_seconds<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()) {
        Some(d) => s.serialize_some(&d.as_secs()),
        None => s.serialize_none(),
    }
}

impl Set {
    /// The corpus it was made from, as far as it is known.
    pub fn corpus(&self) -> String {
        match (&self.record, &self.source) {
            (Some(r), _) => r.corpus_name(),
            (None, Some(s)) => s.strip_prefix("--corpus ").unwrap_or(s).to_string(),
            (None, None) => "?".into(),
        }
    }

    /// Its tokenizer, as a person names it: the setting and the vocabulary size (and whose it is
    /// when it is not the one the settings name: a set `KEY-DIGEST` was made with a checkpoint's
    /// tokenizer (a resumed run's, an `--init-from` run's, an evaluation's), the file having changed since).
    pub fn tokenizer(&self) -> String {
        let given = if self.key.contains('-') { ", a checkpoint's" } else { "" };
        format!("{}{given}", self.named_tokenizer())
    }

    fn named_tokenizer(&self) -> String {
        let vocab = self.vocab_size.map(|v| format!(" ({v})")).unwrap_or_default();
        match &self.record {
            Some(r) if r.tokenizer == "char" => format!("char{vocab}"),
            Some(r) if r.tokenizer.starts_with(super::data::EVAL_TOKENIZER) => format!("a checkpoint's{vocab}"),
            Some(r) => format!(
                "{}{vocab}",
                Path::new(&r.tokenizer).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
            ),
            None => format!("{}{vocab}", self.kind.as_deref().unwrap_or("?")),
        }
    }
}

/// What the cache holds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listing {
    /// The shard cache's folder.
    pub root: PathBuf,
    /// Bytes of its sets and leftovers.
    pub bytes: u64,
    /// Its sets, the most recently used first.
    pub sets: Vec<Set>,
    /// What makers and removers that were killed left (hidden folders of processes gone), with
    /// their bytes.
    pub leftovers: Vec<(PathBuf, u64)>,
    /// Sets being made or removed now (by a live process).
    pub in_progress: usize,
    /// Files and folders whose names are not a set's (a cache key): not the cache's, never removed.
    pub others: Vec<PathBuf>,
}

/// Whether `name` is a set's: a cache key, 24 hexadecimal digits, with `-` and 12 more for a set
/// made with a resumed run's tokenizer.
fn is_key(name: &str) -> bool {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    match name.split_once('-') {
        None => hex(name, 24),
        Some((k, d)) => hex(k, 24) && hex(d, 12),
    }
}

/// The bytes of the files of `dir` (a set's folder is flat).
fn folder_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|r| r.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn read_record(dir: &Path) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(dir.join(RECORD_FILE)).ok()?).ok()
}

/// Whether `dir` has a record file that does not read as one (damaged, edited; an earlier
/// version's set has none).
fn record_damaged(dir: &Path) -> bool {
    dir.join(RECORD_FILE).exists() && read_record(dir).is_none()
}

/// The set in `dir` (its name the key), without reading its shards.
fn set_at(dir: &Path) -> Set {
    let key = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let meta: Option<Meta> = read_meta(dir).ok().flatten();
    let record = read_record(dir);
    let base = key.split('-').next().unwrap_or_default();
    let source = meta.as_ref().map(|m| m.source.clone()).filter(|s| !s.is_empty());
    let state = match (&meta, &record) {
        (None, _) => State::Damaged,
        (Some(_), Some(r)) => r.state(base),
        // Without a record, what `meta.json` says: a corpus named by an absolute path that is gone
        // is gone (a relative one depends on the directory the run was in).
        (Some(_), None) => match source
            .as_deref()
            .and_then(|s| s.strip_prefix("--corpus ").or_else(|| s.strip_prefix("--text ")))
            .map(Path::new)
        {
            Some(p) if p.is_absolute() && !p.exists() => State::CorpusGone,
            // (Said as damaged, not as an earlier version's: `ddl data cache` says what to do.)
            _ if record_damaged(dir) => State::RecordDamaged,
            _ => State::Unrecorded,
        },
    };
    // The tokenizer's kind, where no record names it.
    let kind = match (&record, &meta) {
        // (Its tag only: building a BPE tokenizer at every run's start would cost.)
        (None, Some(m)) => {
            #[derive(serde::Deserialize)]
            struct Tagged {
                kind: String,
            }
            serde_json::from_str::<Tagged>(&m.tokenizer).ok().map(|t| t.kind)
        }
        _ => None,
    };
    let last_used = modified(&dir.join(RECORD_FILE)).or_else(|| modified(&dir.join("meta.json")));
    Set {
        key,
        dir: dir.to_path_buf(),
        bytes: folder_bytes(dir),
        train_tokens: meta.as_ref().map(|m| m.train_tokens),
        val_tokens: meta.as_ref().map(|m| m.val_tokens),
        vocab_size: meta.as_ref().map(|m| m.vocab_size),
        source,
        kind,
        record,
        last_used,
        state,
    }
}

/// The markers of the hidden folders of a cache: a maker's (`.KEY.make-PID.N`), a damaged set
/// moved aside (`.KEY.damaged.PID.N`), a set being removed (`.KEY.removed.PID.N`).
const HIDDEN: [&str; 3] = [MAKING, DAMAGED, REMOVING];
const REMOVING: &str = ".removed.";
pub(crate) const DAMAGED: &str = ".damaged.";

/// The process id in a hidden folder's name, if it is one of the cache's.
fn hidden_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?;
    let tail = HIDDEN.iter().find_map(|m| rest.rsplit_once(m).map(|(_, t)| t))?;
    tail.split('.').next()?.parse().ok()
}

/// What the shard cache `root` holds (nothing when it does not exist; an error when it is not a
/// folder or cannot be listed).
pub fn list(root: &Path) -> std::io::Result<Listing> {
    let mut l = Listing {
        root: root.to_path_buf(),
        bytes: 0,
        sets: Vec::new(),
        leftovers: Vec::new(),
        in_progress: 0,
        others: Vec::new(),
    };
    let entries = match std::fs::read_dir(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(l),
        r => r?,
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            // (A file a person put here is said, as a folder is; a hidden one is a record
            // being written.)
            if !name.starts_with('.') {
                l.others.push(e.path());
            }
            continue;
        }
        if name.starts_with('.') {
            match hidden_pid(&name) {
                Some(pid) if pid != std::process::id() && super::lock::alive(pid) == Some(false) => {
                    l.leftovers.push((e.path(), folder_bytes(&e.path())))
                }
                Some(_) => l.in_progress += 1,
                None => {}
            }
            continue;
        }
        if is_key(&name) {
            l.sets.push(set_at(&e.path()));
        } else {
            l.others.push(e.path());
        }
    }
    l.sets.sort_by(|a, b| b.last_used.cmp(&a.last_used).then_with(|| a.key.cmp(&b.key)));
    l.others.sort();
    l.bytes = l.sets.iter().map(|s| s.bytes).sum::<u64>() + l.leftovers.iter().map(|l| l.1).sum::<u64>();
    Ok(l)
}

/// Moves the set in `dir` aside under a hidden name (`.KEY{marker}PID.N`, which a listing counts
/// as in progress, or as a leftover once the process is gone): one rename, so that a run finds a
/// set whole or not at all. `None`: it was gone already (another process moved it first).
pub(crate) fn move_aside(dir: &Path, marker: &str) -> std::io::Result<Option<PathBuf>> {
    static NTH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nth = NTH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let aside = dir.with_file_name(format!(".{name}{marker}{}.{nth}", std::process::id()));
    match std::fs::rename(dir, &aside) {
        Ok(()) => Ok(Some(aside)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes the set in `dir`: moved aside first ([`move_aside`]), then deleted. A run that has its
/// shards mapped keeps reading them (on Unix). `false`: another process removed it first.
pub(crate) fn remove_set(dir: &Path) -> std::io::Result<bool> {
    match move_aside(dir, REMOVING)? {
        Some(aside) => std::fs::remove_dir_all(&aside).map(|()| true),
        None => Ok(false),
    }
}

/// Marks the set in `dir` used now by a run with settings `record` (its record written if it has
/// none or another, else its time set), then removes the sets of the cache `root` with the same
/// settings that no run can find again (made before the corpus or the tokenizer file last
/// changed); returns them with their bytes. Nothing here fails a run: a cache that cannot be
/// written keeps what it has. (Only the sets' small records are read, not their `meta.json`s,
/// which hold a BPE's whole vocabulary: this runs at every run's start.)
pub(crate) fn used(root: &Path, dir: &Path, record: &Record) -> Vec<(PathBuf, u64)> {
    mark_used(root, dir, record).remove()
}

/// The sets a run's set makes stale, removed when the run has settled on it ([`Stale::remove`]):
/// a resumed run removes them after its data check, so that a refused resume (its corpus
/// changed) leaves the cache as it found it.
#[derive(Debug)]
pub struct Stale {
    root: PathBuf,
    dir: PathBuf,
    record: Record,
}

/// Marks the set in `dir` (of the cache `root`) used now by a run with settings `record`: its
/// record written if it has none or another, else its time set. The sets it makes stale are
/// removed by the [`Stale`] returned.
pub(crate) fn mark_used(root: &Path, dir: &Path, record: &Record) -> Stale {
    let path = dir.join(RECORD_FILE);
    if read_record(dir).as_ref() == Some(record) {
        if let Ok(f) = std::fs::File::options().write(true).open(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
    } else if let Ok(json) = serde_json::to_vec_pretty(record) {
        // Written whole under another name, then renamed: a reader never sees half of it.
        // (Private to the call: the runs of `ddl experiment --jobs` are threads of one process.)
        static NTH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nth = NTH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".{RECORD_FILE}.{}.{nth}", std::process::id()));
        if std::fs::write(&tmp, json).is_err() || std::fs::rename(&tmp, &path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    Stale { root: root.to_path_buf(), dir: dir.to_path_buf(), record: record.clone() }
}

impl Stale {
    /// Removes the sets of the cache with the same settings as this run's that no run can find
    /// again (made before the corpus or the tokenizer file last changed); returns them with their
    /// bytes. Nothing here fails a run: what cannot be removed stays.
    pub fn remove(self) -> Vec<(PathBuf, u64)> {
        let mine = self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut removed = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.root) else { return removed };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == mine || !is_key(&name) {
                continue;
            }
            let other = e.path();
            let base = name.split('-').next().unwrap_or_default();
            let stale =
                read_record(&other).is_some_and(|r| r.same_settings(&self.record) && r.state(base) == State::Changed);
            if stale {
                let bytes = folder_bytes(&other);
                if remove_set(&other).is_ok_and(|mine| mine) {
                    removed.push((other, bytes));
                }
            }
        }
        removed
    }
}

/// What `prune` removes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Prune {
    /// Every set (else the stale ones).
    pub all: bool,
    /// Also the sets not used for this long.
    pub unused_for: Option<Duration>,
    /// Say what would go; remove nothing.
    pub dry_run: bool,
}

/// What `prune` removed (or, dry, would remove).
#[derive(Debug, Default, serde::Serialize)]
pub struct Pruned {
    pub sets: Vec<Set>,
    pub leftovers: Vec<PathBuf>,
    pub bytes: u64,
    /// What could not be removed, and why.
    pub failed: Vec<(PathBuf, String)>,
}

/// Why `set` goes under `p`, if it does.
pub fn reason(set: &Set, p: &Prune, now: SystemTime) -> Option<String> {
    if p.all {
        return Some("--clear".into());
    }
    if set.state.stale() {
        return Some(set.state.describe().to_string());
    }
    let idle = set.last_used.and_then(|t| now.duration_since(t).ok())?;
    p.unused_for.filter(|&d| idle >= d).map(|_| format!("unused for {}", age(idle)))
}

/// Removes from the shard cache `root` what `p` names, and what killed processes left (an error:
/// the cache cannot be listed).
pub fn prune(root: &Path, p: &Prune) -> std::io::Result<Pruned> {
    let l = list(root)?;
    let now = SystemTime::now();
    let mut out = Pruned::default();
    for set in l.sets {
        if reason(&set, p, now).is_none() {
            continue;
        }
        if !p.dry_run {
            match remove_set(&set.dir) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    out.failed.push((set.dir.clone(), e.to_string()));
                    continue;
                }
            }
        }
        out.bytes += set.bytes;
        out.sets.push(set);
    }
    for (dir, bytes) in l.leftovers {
        if !p.dry_run
            && let Err(e) = std::fs::remove_dir_all(&dir)
        {
            out.failed.push((dir, e.to_string()));
            continue;
        }
        out.bytes += bytes;
        out.leftovers.push(dir);
    }
    Ok(out)
}

/// `n` in thousands, millions or billions: `units` names each scale with its decimals.
fn scaled(n: u64, units: [(&str, usize); 4]) -> String {
    let (i, div) = match n {
        0..1_000 => return format!("{n}{}", units[0].0),
        1_000..1_000_000 => (1, 1e3),
        1_000_000..1_000_000_000 => (2, 1e6),
        _ => (3, 1e9),
    };
    format!("{:.*}{}", units[i].1, n as f64 / div, units[i].0)
}

/// A token count as a person reads it: "830", "12.3 k", "1.12 M", "9.87 G".
pub fn count(n: u64) -> String {
    scaled(n, [("", 0), (" k", 1), (" M", 2), (" G", 2)])
}

/// `bytes` as a person reads them (kB, MB, GB: powers of 1000).
pub fn size(bytes: u64) -> String {
    scaled(bytes, [(" B", 0), (" kB", 1), (" MB", 1), (" GB", 2)])
}

/// A time span as a person reads it: "40 s", "12 min", "5 h", "3 days".
pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s} s"),
        120..7_200 => format!("{} min", s / 60),
        7_200..172_800 => format!("{} h", s / 3_600),
        _ => format!("{} days", s / 86_400),
    }
}

/// Parses a token count ≥ 1 as people write one (`train --tokens`, an experiment spec's `tokens`): `5000000`, `5M`, `2.5B` (k, M, G or B,
/// T: powers of 1000), `1e9`.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, scale) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() && !t[..i].ends_with(['e', 'E']) => {
            let scale = match c {
                'k' | 'K' => 1e3,
                'M' => 1e6,
                'G' | 'B' => 1e9,
                'T' => 1e12,
                _ => {
                    return Err(format!(
                        "'{s}': expected a token count such as 5000000, 5M, 2.5B or 1e9 (k, M, G or B, T)"
                    ));
                }
            };
            (&t[..i], scale)
        }
        _ => (t, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v * scale >= 1.0 && v * scale <= 1e18 => Ok((v * scale).round() as u64),
        Ok(v) if v.is_finite() && v * scale > 1e18 => Err(format!("{s}: at most 1e18 tokens")),
        Ok(_) => Err(format!("{s}: at least 1 token")),
        Err(_) => Err(format!("'{s}': expected a token count such as 5000000, 5M, 2.5B or 1e9 (k, M, G or B, T)")),
    }
}

/// Parses a span: a number with a unit, `s`, `m` (minutes), `h`, `d` or `w` (`30d`, `12h`, `1e3d`).
pub fn parse_span(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let unit_at = t.rfind(|c: char| !c.is_ascii_alphabetic()).map_or(0, |i| i + 1);
    let (num, unit) = t.split_at(unit_at);
    let secs = match unit {
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3_600.0,
        "d" => 86_400.0,
        "w" => 604_800.0,
        _ => return Err(format!("'{s}': expected a number with a unit, s, m, h, d or w (e.g. 30d, 12h)")),
    };
    match num.trim().parse::<f64>() {
        Ok(n) if !n.is_nan() && n >= 0.0 => Duration::try_from_secs_f64(n * secs)
            .map_err(|_| format!("'{s}': too long a span (at most about 500 billion years)")),
        _ => Err(format!("'{s}': expected a non-negative number before the unit (e.g. 30d, 12h)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_parse_and_print() {
        assert_eq!(parse_span("30d").unwrap(), Duration::from_secs(30 * 86_400));
        assert_eq!(parse_span("1.5h").unwrap(), Duration::from_secs(5_400));
        assert_eq!(parse_span("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_span("1e3d").unwrap(), Duration::from_secs(1_000 * 86_400));
        assert!(parse_span("99999999999999999999d").unwrap_err().contains("too long"));
        assert!(parse_span("1e400d").unwrap_err().contains("too long"), "parses as infinity");
        for bad in ["30", "d", "-1d", "3x", "nand", "30D", ""] {
            assert!(parse_span(bad).is_err(), "{bad}");
        }
        assert_eq!(age(Duration::from_secs(90)), "90 s");
        assert_eq!(age(Duration::from_secs(3 * 86_400 + 5)), "3 days");
        assert_eq!(size(1_234_567), "1.2 MB");
        assert_eq!((size(999), size(1_500), size(2_345_678_901)), ("999 B".into(), "1.5 kB".into(), "2.35 GB".into()));
        assert_eq!((count(830), count(12_345), count(1_120_000)), ("830".into(), "12.3 k".into(), "1.12 M".into()));
    }

    #[test]
    fn a_listing_names_what_is_not_the_caches() {
        let root = std::env::temp_dir().join(format!("ddl-cache-list-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("notes")).unwrap();
        std::fs::write(root.join("readme.txt"), "mine").unwrap();
        std::fs::write(root.join(".record.json.1.0"), "{").unwrap();
        let l = list(&root).unwrap();
        assert_eq!(l.others, [root.join("notes"), root.join("readme.txt")]);
        assert!(l.sets.is_empty() && l.leftovers.is_empty() && l.bytes == 0);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
