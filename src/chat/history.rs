//! The chat's history file (↑/↓ across chats, `chat-history.txt` in the cache folder): each line
//! is added under a lock (a file beside it), reading the file as it is then (what other chats
//! added meanwhile) and replacing it whole (a temporary file renamed), so two chats at once never
//! tear it nor drop each other's lines. A history that cannot be written is said once, with why
//! and what to do (it was silently not kept). A chat's start removes the temporary files of chats
//! killed while they replaced the file.
//!
//! The file is in rustyline's format (`#V2`, then one line an entry, `\` and newlines escaped),
//! which the line editor loads at the start of a chat.

use std::path::{Path, PathBuf};

/// The most entries the file keeps (rustyline's default history size: the editor keeps no more).
const KEEP: usize = 100;

/// The first line of rustyline's history format.
const V2: &str = "#V2";

/// A chat's history file.
#[derive(Debug)]
pub struct History {
    path: PathBuf,
    /// Said already that the history is not kept (then tried no more).
    off: bool,
}

impl History {
    /// The history at `path`, its folder made and found writable (its lock file opened); `Err`:
    /// the note that the history will not be kept, why, and what to do.
    pub fn open(path: &Path) -> Result<History, String> {
        let h = History { path: path.to_path_buf(), off: false };
        let lock = h.lock_file().map_err(|e| h.not_kept(&e))?;
        // (A chat killed while it replaced the file left its temporary file, one more each time.)
        if lock.lock().is_ok() {
            h.remove_stale_temporaries();
        }
        Ok(h)
    }

    /// Removes the temporary files (`.chat-history.txt.tmp-PID-N`, [`write_atomic`]'s) of chats
    /// killed while they replaced the file: under the lock, which this chat holds, no live chat
    /// is writing one, and a file whose process is alive (a writer that took no lock) is kept.
    /// Returns what it removed.
    ///
    /// [`write_atomic`]: crate::train::checkpoint::write_atomic
    fn remove_stale_temporaries(&self) -> Vec<PathBuf> {
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        let prefix = format!(".{name}.tmp-");
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        let mut removed = Vec::new();
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            let pid = n
                .strip_prefix(&prefix)
                .and_then(|r| r.split_once('-'))
                .filter(|(_, k)| k.parse::<u64>().is_ok())
                .and_then(|(pid, _)| pid.parse::<u32>().ok());
            let Some(pid) = pid else { continue };
            let gone = pid != std::process::id() && crate::train::lock::alive(pid) != Some(true);
            if gone && std::fs::remove_file(e.path()).is_ok() {
                removed.push(e.path());
            }
        }
        removed
    }

    /// Adds `entry` to the file (unless it repeats the last entry, as the editor does): `Err`
    /// the first time that fails, with the note to say; later failures are silent (said once).
    pub fn add(&mut self, entry: &str) -> Result<(), String> {
        if self.off {
            return Ok(());
        }
        self.try_add(entry).map_err(|e| {
            self.off = true;
            self.not_kept(&e)
        })
    }

    fn try_add(&self, entry: &str) -> std::io::Result<()> {
        let lock = self.lock_file()?;
        // (Held until the file is replaced: another chat's entry waits, then reads this one.)
        lock.lock()?;
        let mut entries = match std::fs::read(&self.path) {
            Ok(bytes) => parse(&bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        if entries.last().map(String::as_str) != Some(entry) {
            entries.push(entry.to_string());
        }
        let skip = entries.len().saturating_sub(KEEP);
        crate::train::checkpoint::write_atomic(&self.path, format(&entries[skip..]).as_bytes())
    }

    fn lock_path(&self) -> PathBuf {
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        self.path.with_file_name(format!(".{name}.lock"))
    }

    /// The lock file, opened for writing (its folder made).
    fn lock_file(&self) -> std::io::Result<std::fs::File> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(self.lock_path())
    }

    /// The note that the history is not kept: the file, why, what to do.
    fn not_kept(&self, e: &std::io::Error) -> String {
        // (A full disk: room, not permissions, is what is missing.)
        let fix = if e.kind() == std::io::ErrorKind::StorageFull {
            "free space on its disk"
        } else {
            "make that folder writable"
        };
        format!(
            "note: this chat's lines will not be kept in its history: cannot write '{}': {}; to keep them, {fix} or \
             set DDL_CACHE_DIR to a folder you can write (the history is DDL_CACHE_DIR/chat-history.txt)",
            self.path.display(),
            crate::why_not_written(&self.path, e),
        )
    }
}

/// The entries of a history file in rustyline's format (a file of an older format: one entry a
/// line; bytes that are not UTF-8 read as U+FFFD, so that no entry is lost).
fn parse(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.lines().peekable();
    let v2 = lines.peek() == Some(&V2);
    if v2 {
        lines.next();
    }
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            if !v2 {
                return l.to_string();
            }
            let mut out = String::with_capacity(l.len());
            let mut chars = l.chars();
            while let Some(c) = chars.next() {
                match (c, c == '\\') {
                    (_, true) => match chars.next() {
                        Some('n') => out.push('\n'),
                        Some(other) => out.push(other),
                        None => out.push('\\'),
                    },
                    (c, false) => out.push(c),
                }
            }
            out
        })
        .collect()
}

/// `entries` as rustyline writes them.
fn format(entries: &[String]) -> String {
    let mut out = format!("{V2}\n");
    for e in entries {
        out.push_str(&e.replace('\\', "\\\\").replace('\n', "\\n"));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file reads back as rustyline writes and reads it (escaped backslashes and newlines).
    #[test]
    fn entries_read_back_as_written_in_the_line_editors_format() {
        let entries = vec!["a\\b".to_string(), "two\nlines".to_string(), "/set seed 1".to_string()];
        let text = format(&entries);
        assert_eq!(text, "#V2\na\\\\b\ntwo\\nlines\n/set seed 1\n");
        assert_eq!(parse(text.as_bytes()), entries);
        assert_eq!(parse(b"old\nformat\n"), ["old", "format"]);
    }

    /// Two chats adding lines at once (two writers, each its own `History` as a process has):
    /// every line of both is in the file, whole, in the format the editor reads. (rustyline's
    /// `save_history` truncated the file and wrote its own lines only: the other chat's were lost,
    /// and a longer file's tail could stay behind a shorter one.)
    #[test]
    fn two_chats_at_once_keep_every_line_of_both() {
        let dir = crate::testing::scratch_dir("chat-history-two");
        let path = dir.join("cache/chat-history.txt");
        let writers: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|who| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let mut h = History::open(&path).unwrap();
                    for i in 0..40 {
                        h.add(&format!("{who} line {i} {}", "x".repeat(i * 7))).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("#V2\n"), "{text}");
        let mut got = parse(text.as_bytes());
        got.sort();
        let mut want: Vec<String> = ["a", "b"]
            .iter()
            .flat_map(|w| (0..40).map(move |i| format!("{w} line {i} {}", "x".repeat(i * 7))))
            .collect();
        want.sort();
        assert_eq!(got, want);
    }

    /// A chat killed while it replaced the file (`kill -9` between the temporary file's write and
    /// its rename) left `.chat-history.txt.tmp-PID-N`, which no later chat removed: the next chat
    /// removes those of processes that are gone, and keeps a live process's and other files.
    #[test]
    fn a_killed_chats_temporary_file_is_removed_by_the_next_chat() {
        let dir = crate::testing::scratch_dir("chat-history-stale");
        let path = dir.join("chat-history.txt");
        std::fs::write(&path, "#V2\nkept\n").unwrap();
        let mut dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        dead.wait().unwrap();
        let mut live = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let stale = dir.join(format!(".chat-history.txt.tmp-{dead_pid}-0"));
        let writing = dir.join(format!(".chat-history.txt.tmp-{}-3", live.id()));
        let other = dir.join(".chat-history.txt.tmp-notes");
        for f in [&stale, &writing, &other] {
            std::fs::write(f, "#V2\npart").unwrap();
        }
        let mut h = History::open(&path).unwrap();
        let left = (stale.exists(), writing.exists(), other.exists());
        let _ = live.kill();
        let _ = live.wait();
        assert_eq!(left, (false, true, true), "stale, live writer's, another file");
        h.add("next").unwrap();
        assert_eq!(parse(&std::fs::read(&path).unwrap()), ["kept", "next"]);
    }

    /// A cache that cannot be written (`DDL_CACHE_DIR` at a file) is said at the start, naming the
    /// file in the way and what to do; one that fails later is said at the first line, once.
    #[test]
    fn a_history_that_cannot_be_written_is_said_once() {
        let dir = crate::testing::scratch_dir("chat-history-unwritable");
        let file = dir.join("cache-file");
        std::fs::write(&file, "x").unwrap();
        let e = History::open(&file.join("chat-history.txt")).unwrap_err();
        for needle in [
            "will not be kept in its history",
            &format!("'{}' is a file, not a folder", file.display()),
            "set DDL_CACHE_DIR to a folder you can write",
        ] {
            assert!(e.contains(needle), "{needle:?} in {e}");
        }
        // Writable at the start, then not (the folder replaced by a file): said at the next line
        // only.
        let cache = dir.join("cache");
        let mut h = History::open(&cache.join("chat-history.txt")).unwrap();
        h.add("one").unwrap();
        std::fs::remove_dir_all(&cache).unwrap();
        std::fs::write(&cache, "x").unwrap();
        let e = h.add("two").unwrap_err();
        assert!(e.contains(&format!("'{}' is a file, not a folder", cache.display())), "{e}");
        assert_eq!(h.add("three"), Ok(()));
    }
}
