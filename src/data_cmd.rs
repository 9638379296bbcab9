//! `ddl tokenizer` (train, encode, decode) and `ddl data` (prepare, inspect, cache): the tokenizers
//! and the token sets a run trains on.

use super::*;

pub(super) fn tokenizer(cmd: TokenizerCmd) -> Result<()> {
    match cmd {
        TokenizerCmd::Train { corpus, vocab_size, out, force } => {
            train_cmd::refuse_inside_kept("--out", &out)?;
            refuse_pipe("--corpus", &corpus, "`ddl tokenizer train` reads its corpus twice (to train, then to count)")?;
            check_tokenizer_out(&corpus, &out, force)?;
            // The corpus is read in pieces (a corpus of gigabytes is never held whole), twice:
            // to train, then to count the tokens.
            let t0 = std::time::Instant::now();
            // JSON lines (a file, or in a folder): their documents' text, as `ddl data prepare`
            // reads them; else the text of the file or the folder's .txt files.
            // (Each read's progress on a terminal: minutes of a large corpus were silent.)
            let (tok, bytes, n) = if ddl::train::prepare::has_documents(&corpus) {
                ddl::train::prepare::train_bpe_on_documents(std::slice::from_ref(&corpus), vocab_size, true)?
            } else {
                let tok = ddl::train::data::train_corpus_bpe(&corpus, vocab_size, true)?;
                let (bytes, n) = ddl::train::data::corpus_token_count(&corpus, &tok, true)?;
                (tok, bytes, n)
            };
            let secs = t0.elapsed().as_secs_f64();
            if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("--out {}: cannot make the folder '{}'", out.display(), dir.display()))?;
            }
            // (Without --force never over a file made meanwhile: two trainers racing to one --out.)
            tok.save_as(&out, force)?;
            let short = if tok.vocab_size() < vocab_size {
                // (A merge needs a pair seen at least twice: a small corpus runs out of them.)
                "; the corpus has no more pairs of tokens that occur twice to merge"
            } else {
                ""
            };
            println!("trained in {secs:.1} s: vocab size {} (asked for {vocab_size}{short})", tok.vocab_size());
            println!(
                "compression: {:.3} bytes per token ({bytes} bytes -> {n} tokens)",
                bytes as f64 / n.max(1) as f64
            );
            println!("wrote {}", out.display());
        }
        TokenizerCmd::Encode { tokenizer, text, pieces } => {
            let tok = tokenizer_for(&tokenizer)?;
            let text = if text == "-" {
                read_stdin_capped(
                    "--text -",
                    1 << 30,
                    "encode it in pieces, or tokenize a corpus with `ddl data prepare`, which streams files of any size",
                )?
            } else {
                crate::note_a_file_name("--text", &text);
                text
            };
            let ids = tok.encode(&text).map_err(|e| match e {
                ddl::tokenizer::TokenizerError::Unknown { .. } => anyhow::anyhow!(
                    "--text: {e}; the tokenizer of {} cannot encode it: leave that character out, or use a \
                     tokenizer made from a corpus that has it",
                    tokenizer.display()
                ),
                e => anyhow::anyhow!("--text: {e}"),
            })?;
            if pieces {
                let mut out = String::new();
                for &id in &ids {
                    let text = ddl::train::eval::tsv_field(&tok.decode(&[id]).unwrap_or_default());
                    out.push_str(&format!("{id}\t{text}\n"));
                }
                print!("{out}");
            } else {
                println!("{}", ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(" "));
            }
        }
        TokenizerCmd::Decode { tokenizer, ids } => {
            use std::io::{IsTerminal, Write};
            let tok = tokenizer_for(&tokenizer)?;
            let ids = if ids == "-" { read_stdin_capped("--ids -", 1 << 30, "decode the ids in pieces")? } else { ids };
            let ids = parse_ids(&ids, tok.vocab_size()).map_err(|e| anyhow::anyhow!("--ids: {e}"))?;
            let text = tok.decode(&ids).map_err(|e| anyhow::anyhow!("--ids: {e}"))?;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            if std::io::stdout().is_terminal() && !text.ends_with('\n') {
                writeln!(out)?;
            }
            out.flush()?;
        }
    }
    Ok(())
}

/// `--tokenizer` of `ddl tokenizer encode` and `decode`: a tokenizer.json or a run's.
pub(super) fn tokenizer_for(path: &std::path::Path) -> Result<ddl::tokenizer::Tokenizer> {
    if path.as_os_str() == "char" {
        anyhow::bail!(
            "--tokenizer char: a character tokenizer is made from a corpus (`ddl train` and `ddl data prepare` build \
             one); give a tokenizer.json, or a run folder for its model's tokenizer"
        );
    }
    Ok(ddl::train::load_tokenizer(path)?)
}

/// Token ids separated by spaces or commas, each below `vocab`.
pub(super) fn parse_ids(text: &str, vocab: usize) -> std::result::Result<Vec<u32>, String> {
    let words: Vec<&str> = text.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()).collect();
    if words.is_empty() {
        return Err(
            "no ids: give token ids separated by spaces or commas (as `ddl tokenizer encode` prints them)".into()
        );
    }
    words
        .iter()
        .enumerate()
        .map(|(i, w)| match w.parse::<u64>() {
            Ok(id) if (id as u128) < vocab as u128 => Ok(id as u32),
            Ok(id) => Err(format!(
                "id {id} (the {} of the ids) is outside the tokenizer's vocabulary of {vocab} (ids 0 to {})",
                ordinal(i + 1),
                vocab - 1
            )),
            Err(_) => Err(format!(
                "'{w}' (the {} of the ids) is not a token id: expected whole numbers from 0 to {}, separated by \
                 spaces or commas",
                ordinal(i + 1),
                vocab.saturating_sub(1)
            )),
        })
        .collect()
}

/// 1st, 2nd, 3rd, 4th, … 11th, 12th, 13th, 21st.
pub(super) fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// `ddl tokenizer train --out`: not the corpus (or one of its files), not a folder, and not an
/// existing file unless `force`; its folder exists or can be made. Checked before the (long)
/// training.
pub(super) fn check_tokenizer_out(corpus: &std::path::Path, out: &std::path::Path, force: bool) -> Result<()> {
    let shown = out.display();
    if ddl::train::data::path_problem(out) == Some(ddl::train::data::PathProblem::BrokenLink) {
        anyhow::bail!(
            "--out {shown} is a symbolic link that leads nowhere (its target is missing, or the links loop); give \
             a file name, or remove the link"
        );
    }
    if out.is_dir() {
        anyhow::bail!(
            "--out {shown} is a folder; give the tokenizer's file name, e.g. {}",
            out.join("tokenizer.json").display()
        );
    }
    // A missing folder is made after the training, as `ddl data prepare` makes its --out's; one
    // that cannot be (a file in its place) is refused now.
    let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if let Some(file) = ddl::train::data::file_in_the_way(dir) {
        anyhow::bail!(
            "--out {shown}: '{}' is a file, so the folder '{}' cannot be made; choose another --out",
            file.display(),
            dir.display()
        );
    }
    if let (Ok(o), Ok(c)) = (out.canonicalize(), corpus.canonicalize())
        && (o == c || (c.is_dir() && o.starts_with(&c) && o.extension().is_some_and(|e| e == "txt")))
    {
        anyhow::bail!(
            "--out {shown} is the corpus (--corpus {}): writing the tokenizer would destroy it; choose another --out",
            corpus.display()
        );
    }
    // (The write renames a new file over the path: a device or a pipe would become a plain file.)
    if let Ok(m) = std::fs::metadata(out)
        && !m.is_file()
    {
        anyhow::bail!("--out {shown} is not a regular file (a device, a pipe or a socket): give a file name");
    }
    if out.exists() && !force {
        anyhow::bail!("--out {shown} exists: pass --force to replace it, or choose another --out");
    }
    // A folder that takes no file (read-only, a name too long, a file system such as /proc) is
    // said before the training, not after it: minutes on a large corpus. Where the folder is
    // still to be made, its nearest existing one is tried.
    let (probe, made) = match dir.ancestors().find(|a| a.as_os_str().is_empty() || a.is_dir()) {
        Some(a) if a == dir => (out.to_path_buf(), None),
        Some(a) => {
            let a = if a.as_os_str().is_empty() { std::path::Path::new(".") } else { a };
            (a.join(".ddl-probe"), Some(a))
        }
        None => (out.to_path_buf(), None),
    };
    if let Err(e) = ddl::train::checkpoint::probe_writable(&probe) {
        let place = match made {
            Some(a) => format!("the folder '{}' cannot be made in '{}'", dir.display(), a.display()),
            None => format!("no file can be written under that name in '{}'", dir.display()),
        };
        anyhow::bail!("--out {shown}: {place} ({e}); choose another --out, or make that folder writable");
    }
    Ok(())
}

pub(super) fn data_cmd(d: DataCmd) -> Result<()> {
    use ddl::train::prepare::{PrepareOptions, ValSplit, prepare};
    let (tokenizer, out, inputs, val_tokens, val_fraction, shard_tokens, name) = match d {
        DataCmd::Prepare { tokenizer, out, inputs, val_tokens, val_fraction, shard_tokens, name } => {
            (tokenizer, out, inputs, val_tokens, val_fraction, shard_tokens, name)
        }
        DataCmd::Inspect { data, data_format, tokenizer, split, at, sample, verify, json } => {
            return inspect_cmd(data, data_format, tokenizer, split, at, sample, verify, json);
        }
        DataCmd::Cache { prune, unused_for, clear, dry_run, json } => {
            return cache_cmd(prune || clear, ddl::train::cache::Prune { all: clear, unused_for, dry_run }, json);
        }
    };
    train_cmd::refuse_inside_kept("--out", &out)?;
    let val = match (val_tokens, val_fraction) {
        (Some(n), _) => ValSplit::Tokens(n),
        (None, f) => ValSplit::Fraction(f.unwrap_or(0.1)),
    };
    let opts = PrepareOptions { tokenizer, out: out.clone(), inputs, val, shard_tokens, name, quiet: false };
    let p = match prepare(&opts) {
        // Stopped by Ctrl-C, leaving nothing: said so, and 130 as `ddl train` exits.
        Err(ddl::train::TrainError::Data(e @ ddl::train::data::DataError::Interrupted)) => {
            eprintln!("{e}");
            return Err(Interrupted.into());
        }
        r => r?,
    };
    println!(
        "{}{}, {:.1} MB of text -> {} training and {} validation tokens in {:.1} s ({:.1} MB/s, {:.2} M tokens/s)",
        ddl::plural(p.documents, "document"),
        match p.empty {
            0 => String::new(),
            1 => " (1 without text skipped)".to_string(),
            n => format!(" ({n} without text skipped)"),
        },
        p.bytes as f64 / 1e6,
        p.train_tokens,
        p.val_tokens,
        p.seconds,
        p.bytes as f64 / 1e6 / p.seconds.max(1e-9),
        (p.train_tokens + p.val_tokens) as f64 / 1e6 / p.seconds.max(1e-9)
    );
    for f in &p.files {
        println!("  {}", f.display());
    }
    println!("train on it with: ddl train --data {} ...", out.display());
    Ok(())
}

/// `ddl data inspect`: what a shard set holds.
#[allow(clippy::too_many_arguments)]
pub(super) fn inspect_cmd(
    data: String,
    data_format: String,
    tokenizer: Option<std::path::PathBuf>,
    split: String,
    at: usize,
    sample: usize,
    verify: bool,
    json: bool,
) -> Result<()> {
    use ddl::train::inspect::{InspectOptions, Split, inspect};
    use std::io::IsTerminal;
    let format = ddl::train::shards::Format::parse(&data_format).map_err(|e| anyhow::anyhow!("--data-format: {e}"))?;
    let split = Split::parse(&split).map_err(|e| anyhow::anyhow!("--split: {e}"))?;
    let tokenizer = match tokenizer {
        Some(p) => {
            Some((tokenizer_for(&p).with_context(|| format!("--tokenizer {}", p.display()))?, p.display().to_string()))
        }
        None => None,
    };
    let progress = std::io::stderr().is_terminal();
    let info = inspect(&InspectOptions { data, format, tokenizer, split, at, sample, verify, progress })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        print!("{}", info.text());
    }
    Ok(())
}

/// What could not be removed of the shard cache `root`: each folder with its error, or, where
/// every one failed for the same reason (a read-only disk: 20 folders said "Read-only file
/// system" 20 times), the reason once with the folders counted.
fn removal_failures(root: &std::path::Path, failed: &[(std::path::PathBuf, String)]) -> String {
    let n = ddl::plural(failed.len(), "folder");
    let remedy = "remove them by hand, or check the cache's permissions";
    match failed {
        [(_, first), rest @ ..] if !rest.is_empty() && rest.iter().all(|(_, e)| e == first) => {
            let read_only = if first.contains("Read-only file system") {
                " (the cache is on a read-only disk: make it writable, or point DDL_CACHE_DIR at another folder for \
                 new sets)"
            } else {
                ""
            };
            format!("could not remove {n} of the shard cache in {}: {first}{read_only}; {remedy}", root.display())
        }
        _ => {
            let what: Vec<String> = failed.iter().map(|(d, e)| format!("{}: {e}", d.display())).collect();
            format!("could not remove {n} of the shard cache: {} ({remedy})", what.join("; "))
        }
    }
}

/// `ddl data cache`: the shard cache listed, or pruned (`remove`).
pub(super) fn cache_cmd(remove: bool, p: ddl::train::cache::Prune, json: bool) -> Result<()> {
    use ddl::train::cache::{State, age, count, list, prune, reason, size};
    let root = ddl::cache_dir().join("shards");
    let unreadable = |e: std::io::Error| {
        anyhow::anyhow!(
            "the shard cache '{}' cannot be listed ({}): it is DDL_CACHE_DIR's (else $XDG_CACHE_HOME/ddl's or \
             ~/.cache/ddl's) folder shards/; point DDL_CACHE_DIR at a folder",
            root.display(),
            ddl::why_not_written(&root, &e)
        )
    };
    if remove {
        let out = prune(&root, &p).map_err(unreadable)?;
        if json {
            println!("{}", serde_json::json!({ "root": root, "dry_run": p.dry_run, "removed": out }));
        } else {
            let now = std::time::SystemTime::now();
            let verb = if p.dry_run { "would remove" } else { "removed" };
            for s in &out.sets {
                println!(
                    "{verb} {}  {}  {}  ({})",
                    s.key,
                    s.corpus(),
                    size(s.bytes),
                    reason(s, &p, now).unwrap_or_default()
                );
            }
            for d in &out.leftovers {
                println!("{verb} {}  (left by a process that was killed)", d.display());
            }
            println!(
                "{} {} and {}: {} ({})",
                if p.dry_run { "would free" } else { "freed" },
                ddl::plural(out.sets.len(), "set"),
                ddl::plural(out.leftovers.len(), "leftover"),
                size(out.bytes),
                root.display()
            );
        }
        if !out.failed.is_empty() {
            anyhow::bail!("{}", removal_failures(&root, &out.failed));
        }
        return Ok(());
    }
    let l = list(&root).map_err(unreadable)?;
    if json {
        println!("{}", serde_json::to_string(&l)?);
        return Ok(());
    }
    println!("shard cache of `ddl train --corpus` and `ddl eval --text`: {}", root.display());
    if l.sets.is_empty() && l.leftovers.is_empty() {
        println!("(empty{})", if root.exists() { "" } else { ": no set made yet" });
    } else {
        let now = std::time::SystemTime::now();
        let rows: Vec<[String; 8]> = l
            .sets
            .iter()
            .map(|s| {
                let tokens = match (s.train_tokens, s.val_tokens) {
                    (Some(t), Some(v)) => count((t + v) as u64),
                    _ => "?".into(),
                };
                let val = match &s.record {
                    Some(r) if r.val_fraction == 0.0 => "-".to_string(),
                    Some(r) => format!("{}", r.val_fraction),
                    None => "?".into(),
                };
                let used = s
                    .last_used
                    .and_then(|t| now.duration_since(t).ok())
                    .map(|d| format!("{} ago", age(d)))
                    .unwrap_or_else(|| "?".into());
                [s.key.clone(), s.corpus(), s.tokenizer(), val, tokens, size(s.bytes), used, s.state.describe().into()]
            })
            .collect();
        let head = ["set", "corpus", "tokenizer", "val", "tokens", "size", "last used", "state"].map(String::from);
        let widths: Vec<usize> =
            (0..8).map(|i| rows.iter().chain([&head]).map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
        for r in [&head].into_iter().chain(&rows) {
            let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            println!("{}", cells.join("  ").trim_end());
        }
        let stale: Vec<_> = l.sets.iter().filter(|s| s.state.stale()).collect();
        let left: u64 = l.leftovers.iter().map(|l| l.1).sum();
        println!("{}, {} in all (val: the validation fraction)", ddl::plural(l.sets.len(), "set"), size(l.bytes));
        if !stale.is_empty() || !l.leftovers.is_empty() {
            println!(
                "{} ({}) and {} of killed processes ({}): `ddl data cache --prune` removes them",
                ddl::plural(stale.len(), "stale set"),
                size(stale.iter().map(|s| s.bytes).sum()),
                ddl::plural(l.leftovers.len(), "leftover"),
                size(left)
            );
        }
        let unrecorded = l.sets.iter().filter(|s| s.state == State::Unrecorded).count();
        if unrecorded > 0 {
            println!(
                "{} made by an earlier ddl, whose settings are not recorded (a run that uses one records it): \
                 `ddl data cache --prune --unused-for 30d` removes those unused for 30 days",
                ddl::plural(unrecorded, "set")
            );
        }
        let damaged: Vec<_> = l.sets.iter().filter(|s| s.state == State::RecordDamaged).collect();
        if !damaged.is_empty() {
            let files: Vec<String> =
                damaged.iter().map(|s| s.dir.join(ddl::train::cache::RECORD_FILE).display().to_string()).collect();
            println!(
                "{} whose record does not read (damaged or edited: {}), so their settings are not known: a run \
                 with their settings finds them and writes the record again; `ddl data cache --prune --unused-for \
                 30d` removes those unused for 30 days, `ddl data cache --clear` every set",
                ddl::plural(damaged.len(), "set"),
                files.join(", ")
            );
        }
    }
    if l.in_progress > 0 {
        println!("{} set(s) being made or removed by a running process", l.in_progress);
    }
    if !l.others.is_empty() {
        let names: Vec<String> = l.others.iter().map(|p| p.display().to_string()).collect();
        println!("not the cache's (names that are not a set's), left alone: {}", names.join(", "));
    }
    Ok(())
}

/// Refuses `path` when it is a pipe: `what` says why the command cannot read it there (a pipe
/// without a writer blocked it, and one read twice blocked the second read).
pub(super) fn refuse_pipe(flag: &str, path: &std::path::Path, what: &str) -> Result<()> {
    if ddl::train::data::is_pipe(path) {
        anyhow::bail!(
            "{flag} {}: a pipe, which can be read only once as it comes, and {what}; save what it gives to a file \
             first (e.g. `… > text.txt`) and give that",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Folders that failed for one reason are said once, with the count (a read-only cache said
    /// "Read-only file system" once a folder); different reasons each with their folder.
    #[test]
    fn removal_failures_say_a_shared_reason_once() {
        let root = std::path::Path::new("/c/shards");
        let ro = "Read-only file system (os error 30)".to_string();
        let same: Vec<_> = (0..20).map(|i| (root.join(format!("s{i}")), ro.clone())).collect();
        let t = super::removal_failures(root, &same);
        assert_eq!(t.matches("Read-only").count(), 1, "{t}");
        assert!(t.starts_with("could not remove 20 folders of the shard cache in /c/shards: Read-only"), "{t}");
        assert!(t.contains("point DDL_CACHE_DIR at another folder"), "{t}");
        let mixed = vec![(root.join("a"), "Permission denied".to_string()), (root.join("b"), ro)];
        let t = super::removal_failures(root, &mixed);
        let want = format!("{}: Permission denied; {}: Read-only", root.join("a").display(), root.join("b").display());
        assert!(t.contains(&want), "{t}");
    }
}
