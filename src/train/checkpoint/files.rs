//! Writing files so that a crash or a full disk leaves the old file or the new, never half of one:
//! a temporary name, synced, then renamed (and the folder synced); free space; stale temporaries.

use super::*;

/// Where [`write_tmp`] puts the bytes of `path` before the rename: unique per process and per
/// write, so threads writing the same file at once do not share a temporary file.
pub(super) fn tmp_path(path: &Path) -> PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = path.parent().unwrap_or(Path::new("."));
    dir.join(format!(".{}.tmp-{}-{n}", path.file_name().unwrap_or_default().to_string_lossy(), std::process::id()))
}

/// Fault injection for the disk-full test: with `DDL_FAULT_ENOSPC_SAVE=N`, checkpoint saves
/// after the first N of this process fail half-way through a file with "No space left on device".
pub(super) fn injected_enospc() -> bool {
    static SAVES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let Some(n) = std::env::var("DDL_FAULT_ENOSPC_SAVE").ok().and_then(|v| v.parse::<usize>().ok()) else {
        return false;
    };
    SAVES.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= n
}

/// Bytes an unprivileged writer may still write in the file system holding `dir` (Unix), or
/// `None` where that is not known. `DDL_FAULT_FREE_BYTES=N` pretends N (fault injection for the
/// tests).
pub fn free_bytes(dir: &Path) -> Option<u64> {
    if let Some(n) = std::env::var("DDL_FAULT_FREE_BYTES").ok().and_then(|v| v.parse::<u64>().ok()) {
        return Some(n);
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: `statvfs` fills the zeroed struct from a NUL-terminated path.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return None;
        }
        Some(st.f_bavail as u64 * st.f_frsize as u64)
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

/// Runs `write` on the temporary file of `path`; on failure removes it.
pub(super) fn with_tmp(path: &Path, write: impl FnOnce(&Path) -> std::io::Result<()>) -> std::io::Result<PathBuf> {
    let tmp = tmp_path(path);
    match write(&tmp) {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Writes `bytes` into the temporary file of `path` and syncs it; on failure removes it.
pub(super) fn write_tmp(path: &Path, bytes: &[u8], fail: bool) -> std::io::Result<PathBuf> {
    with_tmp(path, |tmp| {
        let mut f = std::fs::File::create(tmp)?;
        if fail {
            f.write_all(&bytes[..bytes.len() / 2])?;
            return Err(std::io::Error::from_raw_os_error(28));
        }
        f.write_all(bytes)?;
        f.sync_all()
    })
}

pub(super) fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Writes `bytes` to `path` atomically (temp file in the same directory, fsync, rename): a
/// crash or a full disk leaves either the old file or the new one, never a torn one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    commit_tmp(&write_tmp(path, bytes, false)?, path)
}

/// Writes several files that belong together (a trace and its JSON summary) so that a full disk
/// or an unwritable name leaves every one as it was: all are written whole to temporary files
/// first, then renamed into place (a rename takes no space). A failure removes the temporary
/// files. (`DDL_FAULT_ENOSPC_SAVE=N` fails the writes after the first N of this process.)
pub fn write_all_atomic(files: &[(&Path, &[u8])]) -> std::io::Result<()> {
    let mut tmps: Vec<PathBuf> = Vec::new();
    for (path, bytes) in files {
        match write_tmp(path, bytes, injected_enospc()) {
            Ok(t) => tmps.push(t),
            Err(e) => {
                for t in &tmps {
                    let _ = std::fs::remove_file(t);
                }
                return Err(e);
            }
        }
    }
    let mut result = Ok(());
    for (tmp, (path, _)) in tmps.iter().zip(files) {
        if result.is_ok() {
            result = commit_tmp(tmp, path);
        } else {
            let _ = std::fs::remove_file(tmp);
        }
    }
    result
}

/// [`write_atomic`] that never replaces: the complete temporary file is linked to `path`, which
/// fails if `path` exists (another process's file made meanwhile stays as it is).
pub fn write_new_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = write_tmp(path, bytes, false)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    linked?;
    sync_dir(path.parent().unwrap_or(Path::new(".")));
    Ok(())
}

/// Renames a complete temporary file onto `path` and syncs the folder; on failure removes it.
pub(super) fn commit_tmp(tmp: &Path, path: &Path) -> std::io::Result<()> {
    std::fs::rename(tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(tmp);
    })?;
    sync_dir(path.parent().unwrap_or(Path::new(".")));
    Ok(())
}

/// Removes temporary files left in a run directory by writers that were killed (not ours).
pub fn remove_stale_tmp(dir: &Path) {
    let ours = format!(".tmp-{}-", std::process::id());
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let ours_kind = [MODEL_FILE, OPTIM_FILE, "config.toml"].iter().any(|f| name.starts_with(&format!(".{f}.tmp-")));
        if ours_kind && !name.contains(&ours) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The temporary files and folders a run writes that are in `run` and not this process's: left
/// by a writer that was killed, or copied with the folder while its run trained (`cp -r`, rsync).
/// Only the run's own names (its checkpoint files, `config.toml`, `data.json`, `summary.json`,
/// `metrics.jsonl`, `loss.png`, the kept checkpoints' snapshots), never another command's
/// (a `--trace` written into the folder); meaningful where no live process trains in `run`.
pub fn stale_temporaries(run: &Path) -> Vec<PathBuf> {
    let ours = format!(".tmp-{}", std::process::id());
    let names = |dir: &Path| -> Vec<(String, PathBuf)> {
        let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
        entries.map(|e| (e.file_name().to_string_lossy().into_owned(), e.path())).collect()
    };
    let files = [MODEL_FILE, OPTIM_FILE, "config.toml", "data.json", "summary.json", "metrics.jsonl"];
    let mut found: Vec<PathBuf> = names(run)
        .into_iter()
        .filter(|(n, _)| {
            n == ".tmp-loss.png"
                || (files.iter().any(|f| n.starts_with(&format!(".{f}.tmp-"))) && !n.contains(&format!("{ours}-")))
        })
        .map(|(_, p)| p)
        .collect();
    // (A kept checkpoint's snapshot being made: `.step-N.tmp-PID`, `.best.tmp-PID`.)
    found.extend(
        names(&run.join(KEPT_DIR))
            .into_iter()
            .filter(|(n, _)| n.starts_with('.') && n.contains(".tmp-") && !n.ends_with(&ours))
            .map(|(_, p)| p),
    );
    found.sort();
    found
}

/// Removes [`stale_temporaries`] from `run`, which this process has locked: none is a live
/// writer's. Returns what it removed.
pub fn remove_stale_temporaries(run: &Path) -> Vec<PathBuf> {
    let mut removed = stale_temporaries(run);
    removed.retain(|p| if p.is_dir() { std::fs::remove_dir_all(p) } else { std::fs::remove_file(p) }.is_ok());
    removed
}

/// Whether `path`'s folder takes a file under the temporary name its atomic write would use
/// (made and removed at once): a read-only folder or a name too long is found before the work
/// whose result goes there, not after it.
pub fn probe_writable(path: &Path) -> std::io::Result<()> {
    let probe = tmp_path(path);
    std::fs::File::create(&probe)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}
