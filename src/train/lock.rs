//! A run folder belongs to one process at a time: `DIR/.ddl-lock` holds the PID and host of the
//! process that trains (or runs an experiment) in it, is created atomically (create-new) and
//! removed when the process is done. A lock whose process is gone (killed with SIGKILL, a crash)
//! is recognised on the same host (no `/proc/PID`) and taken over; one from another host, or
//! where processes cannot be checked, is reported with the file to remove. The lock names the
//! folder it was made in (device and inode), so one copied with its folder (`cp -r` of a run
//! while it trains) does not hold the copy.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The lock file's name in a run folder.
pub const LOCK_FILE: &str = ".ddl-lock";

/// Held while this process works in a folder; dropping it removes the lock.
#[derive(Debug)]
pub struct RunLock {
    path: PathBuf,
}

/// Why a folder could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "'{dir}' is in use by process {pid} on {host} (lock file {lock}): wait for it to finish, stop it, or \
         choose another folder; if no such process runs any more, delete the lock file"
    )]
    Held { dir: PathBuf, pid: u32, host: String, lock: PathBuf },
    #[error("cannot lock '{dir}': {source}")]
    Io { dir: PathBuf, source: std::io::Error },
}

/// This machine's name (for the lock's owner).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this machine".into())
}

/// Whether process `pid` is alive on this host: `Some` where that can be checked (`/proc`).
pub(crate) fn alive(pid: u32) -> Option<bool> {
    if !Path::new("/proc/self").exists() {
        return None;
    }
    Some(Path::new(&format!("/proc/{pid}")).exists())
}

/// The process holding `dir`'s lock (PID, host) when it is alive or on another host; `None`
/// when the folder is free or its lock is stale.
pub fn holder(dir: &Path) -> Option<(u32, String)> {
    let text = std::fs::read_to_string(dir.join(LOCK_FILE)).ok()?;
    let (pid, host, start) = parse_lock(&text);
    (!stale(pid, &host, start) && !copied(&text, dir)).then(|| (pid.unwrap_or(0), host))
}

/// Why `dir`'s lock file does not hold the folder, when there is one that does not: its process
/// is gone (killed, a crash), or it came with a copy of the folder. `ddl train --resume` takes
/// such a lock over.
pub fn stale_lock(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(LOCK_FILE)).ok()?;
    let (pid, host, start) = parse_lock(&text);
    if copied(&text, dir) {
        let pid = pid.map(|p| format!(" (process {p} on {host})")).unwrap_or_default();
        return Some(format!("it came with a copy of the folder: its process{pid} works in the folder it was made in"));
    }
    stale(pid, &host, start).then(|| match pid {
        Some(p) if p == std::process::id() => "it is this process's own".to_string(),
        Some(p) => format!("process {p} on {host} is gone (it was killed or crashed)"),
        None => "it is half-written (its writer was killed)".to_string(),
    })
}

/// A lock file's PID (`None`: unreadable or half-written), host and the process's start time
/// ([`started`]; absent in locks of older builds).
fn parse_lock(text: &str) -> (Option<u32>, String, Option<u64>) {
    let mut words = text.split_whitespace();
    let pid = words.next().and_then(|p| p.parse().ok());
    let host = words.next().unwrap_or("").to_string();
    (pid, host, words.next().and_then(|t| t.parse().ok()))
}

/// The folder's identity on this machine (`dir=DEVICE:INODE`), which a copy of it does not share
/// and a rename keeps; `None` where it cannot be read.
fn folder_id(dir: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(dir).ok().map(|m| format!("dir={}:{}", m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

/// Whether the lock `text` (of this host) was made in another folder than `dir`: it came with a
/// copy of its folder (a run copied while it trained), and its process works elsewhere. (Another
/// host's view of a shared folder may give it another identity: its locks are left as they are.)
fn copied(text: &str, dir: &Path) -> bool {
    let (_, host, _) = parse_lock(text);
    let made_in = text.split_whitespace().skip(2).find(|w| w.starts_with("dir="));
    host == host_name() && matches!((made_in, folder_id(dir)), (Some(a), Some(b)) if a != b)
}

/// When process `pid` started (clock ticks after boot, `/proc/PID/stat`'s 22nd field), where
/// that can be read: with the PID it names one process, not whichever later reuses the number.
fn started(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which may hold spaces and parentheses: field 3 onwards.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// Whether a lock of `pid` on `host` (its process started at `start`) may be taken over: this
/// process's own (a second run after the first ended badly), a process of this host that is gone
/// (or whose PID another process now has: its start time differs), or a half-written lock (a
/// writer killed between create and write). A lock of another host is never stale.
fn stale(pid: Option<u32>, host: &str, start: Option<u64>) -> bool {
    match pid {
        Some(p) if p == std::process::id() && host == host_name() => true,
        Some(p) if host == host_name() => {
            alive(p) == Some(false) || matches!((start, started(p)), (Some(a), Some(b)) if a != b)
        }
        None => true,
        Some(_) => false,
    }
}

/// The error [`RunLock::acquire`] would give now when a live process holds `dir`'s lock (a
/// command that checks before it starts its work: `ddl experiment` before it opens devices).
pub fn refuse_if_held(dir: &Path) -> Result<(), LockError> {
    match holder(dir) {
        Some((pid, host)) => Err(LockError::Held { dir: dir.to_path_buf(), pid, host, lock: dir.join(LOCK_FILE) }),
        None => Ok(()),
    }
}

impl RunLock {
    /// Locks `dir` (which must exist) for this process. The lock file appears complete (written
    /// under a temporary name, then linked into place, which fails if one is there): another
    /// process never reads a half-written lock and takes it for a stale one.
    pub fn acquire(dir: &Path) -> Result<RunLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io { dir: dir.to_path_buf(), source };
        let mut me = format!("{} {}", std::process::id(), host_name());
        for word in started(std::process::id()).map(|t| t.to_string()).into_iter().chain(folder_id(dir)) {
            me = format!("{me} {word}");
        }
        me.push('\n');
        remove_dead_temporaries(dir);
        let tmp = dir.join(format!("{LOCK_FILE}.new-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::fs::write(&tmp, &me).map_err(io)?;
        let done = |r| {
            let _ = std::fs::remove_file(&tmp);
            r
        };
        // Three tries: the later ones after taking over a stale lock (or losing one to another
        // process that took it over at the same moment).
        for _ in 0..3 {
            match link_new(&tmp, &path) {
                Ok(()) => {
                    HELD.lock().unwrap_or_else(|e| e.into_inner()).push(path.clone());
                    return done(Ok(RunLock { path }));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let judged = std::fs::read_to_string(&path).unwrap_or_default();
                    let (pid, host, start) = parse_lock(&judged);
                    if !stale(pid, &host, start) && !copied(&judged, dir) {
                        return done(Err(LockError::Held {
                            dir: dir.to_path_buf(),
                            pid: pid.unwrap_or(0),
                            host,
                            lock: path.clone(),
                        }));
                    }
                    let why = stale_lock(dir);
                    if let Err(e) = take_over(&path, &judged) {
                        return done(Err(io(e)));
                    }
                    // (Said: a folder moved or copied after its run was killed took it silently.)
                    if let Some(why) = why.filter(|w| !w.ends_with("process's own") && !path.exists()) {
                        eprintln!("note: took over the stale lock of '{}' ({LOCK_FILE}): {why}", dir.display());
                    }
                }
                Err(e) => return done(Err(io(e))),
            }
        }
        done(Err(io(std::io::Error::other("another process took the lock at the same moment"))))
    }
}

/// The temporary files of the lock in `dir` (`.ddl-lock.new-PID`, `.ddl-lock.stale-PID`) that no
/// live [`RunLock::acquire`] uses: left by a process killed in the middle of it, or copied with
/// the folder from one taking a lock where it was made (its text names that folder). `ddl info
/// --checkpoint` names them; the next lock of `dir` removes them.
pub fn stale_temporaries(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = [".new-", ".stale-"]
                .iter()
                .find_map(|m| name.strip_prefix(LOCK_FILE)?.strip_prefix(m))
                .and_then(|p| p.parse::<u32>().ok());
            pid.is_some_and(|p| {
                p != std::process::id()
                    && (alive(p) == Some(false)
                        || std::fs::read_to_string(e.path()).is_ok_and(|text| copied(&text, dir)))
            })
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// Removes the lock's [`stale_temporaries`] from `dir`.
fn remove_dead_temporaries(dir: &Path) {
    for p in stale_temporaries(dir) {
        let _ = std::fs::remove_file(p);
    }
}

/// Links the complete file `tmp` to `path`, failing with `AlreadyExists` if `path` exists (where
/// the file system has no hard links: `path` created new, then written).
fn link_new(tmp: &Path, path: &Path) -> std::io::Result<()> {
    match std::fs::hard_link(tmp, path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
            f.write_all(&std::fs::read(tmp)?)
        }
        r => r,
    }
}

/// Removes the lock file at `path` if it is still the one whose contents `judged` were found
/// stale: it is moved aside first (one rename), and a lock another process made meanwhile (it
/// took the stale one over a moment before) is put back, not removed under its feet. `Ok` also
/// when the file is gone or was put back: the caller tries to lock again.
fn take_over(path: &Path, judged: &str) -> std::io::Result<()> {
    let aside = path.with_file_name(format!("{LOCK_FILE}.stale-{}", std::process::id()));
    match std::fs::rename(path, &aside) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    }
    let moved = std::fs::read_to_string(&aside).unwrap_or_default();
    if moved != judged {
        // Another process's lock, made since it was judged: back in place (unless yet another
        // lock was made there meanwhile, which then stands).
        let _ = std::fs::hard_link(&aside, path);
    }
    std::fs::remove_file(&aside)
}

impl Drop for RunLock {
    fn drop(&mut self) {
        HELD.lock().unwrap_or_else(|e| e.into_inner()).retain(|p| p != &self.path);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The lock files this process holds, for [`release_all`].
static HELD: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Removes every lock this process holds: before it exits without unwinding (a second Ctrl-C),
/// which would leave them for the next process to recognise as stale.
pub fn release_all() {
    for p in HELD.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_holder_is_refused_a_dead_one_is_taken_over_and_the_lock_goes_with_its_guard() {
        let dir = std::env::temp_dir().join(format!("ddl-lock-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lock = dir.join(LOCK_FILE);
        {
            let _held = RunLock::acquire(&dir).unwrap();
            assert!(lock.exists());
        }
        assert!(!lock.exists(), "the lock is removed when its guard drops");
        if alive(1) == Some(true) {
            // PID 1 is alive on Linux: a lock it holds on this host is respected.
            std::fs::write(&lock, format!("1 {}\n", host_name())).unwrap();
            let e = RunLock::acquire(&dir).unwrap_err().to_string();
            assert!(e.contains("process 1 on") && e.contains(".ddl-lock"), "{e}");
            // A process that is gone: the lock is stale and taken over.
            let mut child = std::process::Command::new("true").spawn().unwrap();
            let pid = child.id();
            child.wait().unwrap();
            std::fs::write(&lock, format!("{pid} {}\n", host_name())).unwrap();
            drop(RunLock::acquire(&dir).unwrap());
            // A live PID that another process now has (its start time is not the lock's): stale.
            let start = started(1).expect("PID 1's start time");
            std::fs::write(&lock, format!("1 {} {}\n", host_name(), start + 1)).unwrap();
            drop(RunLock::acquire(&dir).unwrap());
            // The same start time: the same process, respected.
            std::fs::write(&lock, format!("1 {} {start}\n", host_name())).unwrap();
            assert!(RunLock::acquire(&dir).unwrap_err().to_string().contains("process 1 on"));
            std::fs::remove_file(&lock).unwrap();
            // This process's lock records its start time.
            let held = RunLock::acquire(&dir).unwrap();
            let (pid, host, start) = parse_lock(&std::fs::read_to_string(&lock).unwrap());
            assert_eq!((pid, host, start), (Some(std::process::id()), host_name(), started(std::process::id())));
            assert!(start.is_some());
            // An exit without unwinding removes it first.
            release_all();
            assert!(!lock.exists(), "release_all removes the locks held");
            drop(held);
        }
        // A takeover removes only the lock it judged stale: one another process made since
        // (it took the stale lock over a moment before) stays, and is then respected.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = format!("{} {}\n", child.id(), host_name());
        child.wait().unwrap();
        if let Some(start) = started(1) {
            let live = format!("1 {} {start}\n", host_name());
            std::fs::write(&lock, &live).unwrap();
            take_over(&lock, &dead).unwrap();
            assert_eq!(std::fs::read_to_string(&lock).unwrap(), live, "a live lock was taken over");
            assert!(RunLock::acquire(&dir).unwrap_err().to_string().contains("process 1 on"));
            // The stale one it judged goes.
            std::fs::write(&lock, &dead).unwrap();
            take_over(&lock, &dead).unwrap();
            assert!(!lock.exists());
            // No temporary file of the lock is left beside it, and a killed process's are removed.
            std::fs::write(dir.join(format!("{LOCK_FILE}.new-{}", child.id())), &dead).unwrap();
            drop(RunLock::acquire(&dir).unwrap());
            let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).collect();
            assert!(left.is_empty(), "{left:?}");
        }
        // Another host's lock cannot be checked: refused.
        std::fs::write(&lock, "4242 some-other-host\n").unwrap();
        assert!(RunLock::acquire(&dir).unwrap_err().to_string().contains("some-other-host"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_lock_copied_with_its_folder_does_not_hold_the_copy() {
        let Some(start) = started(1) else { return };
        let base = crate::testing::scratch_dir("lock-copied");
        let (run, copy) = (base.join("run"), base.join("copy"));
        std::fs::create_dir_all(&run).unwrap();
        std::fs::create_dir_all(&copy).unwrap();
        // A live process (PID 1) trains in `run`; `cp -r run copy` took its lock along.
        let live = format!("1 {} {start} {}\n", host_name(), folder_id(&run).expect("the folder's identity"));
        std::fs::write(run.join(LOCK_FILE), &live).unwrap();
        std::fs::write(copy.join(LOCK_FILE), &live).unwrap();
        assert_eq!(holder(&run).map(|h| h.0), Some(1), "the run's own lock holds it");
        assert!(RunLock::acquire(&run).unwrap_err().to_string().contains("process 1 on"));
        assert_eq!(holder(&copy), None, "the copy is not being trained");
        drop(RunLock::acquire(&copy).expect("the copy can be resumed while the original trains"));
        assert!(!copy.join(LOCK_FILE).exists());
        // A folder renamed while it trains keeps its identity, and its lock holds it.
        let moved = base.join("moved");
        std::fs::rename(&run, &moved).unwrap();
        assert_eq!(holder(&moved).map(|h| h.0), Some(1));
        std::fs::remove_dir_all(&base).ok();
    }
}
