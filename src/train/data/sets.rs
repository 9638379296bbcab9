//! The `--corpus` shard sets in the cache: their keys (from what `stat` tells of the corpus, the
//! tokenizer and the split), made once by the first run (a second one waits for it), found by
//! later runs, and checked before they are used.

use super::*;

/// A corpus this large (bytes) is said to be tokenised, with a progress bar on a terminal.
pub(super) const BIG_CORPUS: u64 = 64 << 20;
/// The bytes a `--corpus` is read in at a time (its pieces: [`crate::train::prepare`]).
pub(super) const CORPUS_CHUNK: usize = 8 << 20;

/// The cache key of a corpus's shard set, from what `stat` tells (no read of the corpus): the
/// files' absolute names, sizes and modification times, the tokenizer setting (a file's size and
/// time) and the validation fraction. A resumed run, which passes the tokenizer it trained with,
/// gets the same key as the run that made the set.
pub(super) fn corpus_key(corpus: &str, tok_setting: &str, val_fraction: f64) -> Result<String, DataError> {
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
/// ([`crate::train::cache::used`]).
#[cfg(test)]
pub(super) fn corpus_shards_in(
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
pub(super) fn corpus_set_in(
    root: &Path,
    corpus: &str,
    tok_setting: &str,
    given: Option<&Tokenizer>,
    val_fraction: f64,
    chunk: usize,
) -> Result<(PathBuf, Tokenizer, crate::train::cache::Stale), crate::train::TrainError> {
    let (dir, tok) = find_or_make_set(root, corpus, tok_setting, given, val_fraction, chunk)?;
    let stale = crate::train::cache::mark_used(
        root,
        &dir,
        &crate::train::cache::Record::new(corpus, tok_setting, val_fraction),
    );
    Ok((dir, tok, stale))
}

/// Removes the cached sets `stale` names and says so (`corpus`: the run's --corpus).
pub(super) fn say_removed(stale: crate::train::cache::Stale, corpus: &str) {
    let removed = stale.remove();
    if !removed.is_empty() {
        let bytes: u64 = removed.iter().map(|s| s.1).sum();
        eprintln!(
            "note: removed {} of an earlier version of --corpus {corpus} or of its tokenizer \
             file ({}; `ddl data cache` lists the cache)",
            crate::plural(removed.len(), "cached shard set"),
            crate::train::cache::size(bytes)
        );
    }
}

/// The cached set of the corpus with these settings, made if there is none.
pub(super) fn find_or_make_set(
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
    let source = crate::train::prepare::Corpus::open(Path::new(corpus))?;
    // (Checked on every use, not only as a set is made: one cached before that check existed
    // would be trained on unchecked.)
    source.refuse_utf16()?;
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
        let _ = crate::train::cache::remove_set(dir);
    }
}

pub(super) fn text_shards_in(
    root: &Path,
    path: &Path,
    tok: &Tokenizer,
    chunk: usize,
) -> Result<(Vec<PathBuf>, bool), crate::train::TrainError> {
    let text = path.to_string_lossy();
    let setting = format!("{EVAL_TOKENIZER}{}", tok.fingerprint());
    let key = corpus_key(&text, &setting, 0.0)?;
    let dir = root.join(&key);
    // (Checked on every use, not only as the set is made: a UTF-16 text cached before that check
    // existed was evaluated from its tokens unchecked. Such a set is removed.)
    if let Err(e) = crate::train::prepare::Corpus::open(path)?.refuse_utf16() {
        if dir.is_dir() {
            let _ = crate::train::cache::remove_set(&dir);
        }
        return Err(e.into());
    }
    let mut made = false;
    let meta = match cached_set(&dir)? {
        Some(m) if m.tokenizer == tok.to_json() => m,
        found => {
            made = true;
            // (A set of this key with another tokenizer: a fingerprint's collision, replaced.)
            if found.is_some() {
                crate::train::cache::remove_set(&dir).map_err(|error| DataError::Cache { path: dir.clone(), error })?;
            }
            let before = corpus_stamp(path);
            let source = crate::train::prepare::Corpus::open(path)?;
            let held = if source.regular() { None } else { Some(read_piped(path, "--text")?) };
            make_set(root, &key, Input { source: &source, held, flag: "--text", before }, tok, 0.0, chunk)?;
            read_meta(&dir)?.ok_or_else(|| DataError::Meta { path: dir.clone(), msg: "no meta.json".into() })?
        }
    };
    let removed = crate::train::cache::used(root, &dir, &crate::train::cache::Record::new(&text, &setting, 0.0));
    if !removed.is_empty() {
        eprintln!("note: removed {} cached token set(s) of an earlier version of --text {text}", removed.len());
    }
    Ok((meta.shards.iter().filter(|s| s.file.contains("_train_")).map(|s| dir.join(&s.file)).collect(), made))
}

/// An interruption of the making of a set said as such (`what`: `--corpus PATH`, `--text PATH`).
pub(super) fn interrupted_making(e: DataError, what: &str) -> DataError {
    match e {
        DataError::Interrupted => DataError::CacheInterrupted(what.to_string()),
        e => e,
    }
}

/// What a set is made of: the corpus (or text) `source`, `held` its text when it could be read
/// only once, `flag` the setting that named it (`--corpus`, `--text`), for messages, and
/// `before` its files' [`corpus_stamp`] before it was first read (a set of a corpus that changed
/// meanwhile is not kept).
pub(super) struct Input<'a> {
    pub(super) source: &'a crate::train::prepare::Corpus,
    pub(super) held: Option<String>,
    pub(super) flag: &'a str,
    pub(super) before: Option<String>,
}

/// What `stat` tells of the corpus at `path` (its files' names, sizes and modification times),
/// `None` where it is no file or folder (the built-in TinyShakespeare, a pipe read whole).
pub(super) fn corpus_stamp(path: &Path) -> Option<String> {
    key_of(Some(path), "char", 0.0).ok()
}

/// Makes the shard set `root/key` of `input` with `tok` (read `chunk` bytes at a time unless
/// held) and checks it.
pub(super) fn make_set(
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
    std::fs::create_dir_all(&tmp).map_err(|error| DataError::Cache { path: root.to_path_buf(), error })?;
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
            DataError::Write { source, .. }
            | DataError::Shard(crate::train::shards::ShardError::Write { source, .. }) => {
                DataError::Cache { path: root.to_path_buf(), error: source }
            }
            DataError::Io { path, source } if path.starts_with(&tmp) => {
                DataError::Cache { path: root.to_path_buf(), error: source }
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
pub(super) fn wait_for_other_maker(root: &Path, key: &str, what: &str) -> Result<bool, DataError> {
    let prefix = format!(".{key}{MAKING}");
    let other = || -> Option<u32> {
        std::fs::read_dir(root).ok()?.flatten().find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid: u32 = name.strip_prefix(&prefix)?.split('.').next()?.parse().ok()?;
            (pid != std::process::id() && crate::train::lock::alive(pid) == Some(true)).then_some(pid)
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
pub(super) fn waiting_note(pid: u32, what: &str, root: &Path) -> String {
    format!(
        "note: waiting for process {pid}, which is tokenising {what} into the shard cache {} (another run, or \
         another rank of this machine): its set is then used",
        root.display()
    )
}

/// Removes the temporary folders of makers, of any set, whose process is gone (killed).
pub(super) fn remove_stale_makers(root: &Path) {
    crate::train::prepare::remove_dead_writers(root, |name| Some(name.strip_prefix('.')?.rsplit_once(MAKING)?.1));
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
pub(super) fn cached_set(dir: &Path) -> Result<Option<Meta>, DataError> {
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
    match crate::train::cache::move_aside(dir, crate::train::cache::DAMAGED) {
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
