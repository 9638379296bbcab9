//! Kept checkpoints (`checkpoints/step-N`) and the best one (`best/`, `best.json`): snapshots of a
//! run taken by hard links, pruned to the newest N, and what a damaged run can be read from instead.

use super::*;

/// The run folder whose kept checkpoint `path` is (`RUN/checkpoints/NAME`, however spelled:
/// relative, through `.` or `..`, or a symbolic link; a folder not made yet by its parent), if
/// it is one.
pub fn kept_run_of(path: &Path) -> Option<PathBuf> {
    let real = resolved(path)?;
    let kept = real.parent()?;
    (kept.file_name()? == KEPT_DIR).then(|| kept.parent().map(Path::to_path_buf)).flatten()
}

/// `path` absolute and resolved (`.`, `..`, symbolic links) as far as it exists, with the parts
/// not made yet appended.
pub(super) fn resolved(path: &Path) -> Option<PathBuf> {
    let mut base = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir().ok()?.join(path) };
    let mut rest = Vec::new();
    loop {
        if let Ok(r) = base.canonicalize() {
            return Some(rest.iter().rev().fold(r, |p: PathBuf, c: &std::ffi::OsString| p.join(c)));
        }
        rest.push(base.file_name()?.to_os_string());
        base = base.parent()?.to_path_buf();
    }
}

/// Refuses an output `path` (given as `flag`) inside a run's `checkpoints/` folder, at any depth
/// ([`inside_kept`]): the error text, naming the run; `None` elsewhere.
pub fn kept_refusal(flag: &str, path: &Path) -> Option<String> {
    inside_kept(path).map(|run| {
        format!(
            "{flag} {}: inside the kept checkpoints of the run in '{}' (its checkpoints/ folder belongs to that \
             run, which removes old checkpoints with everything in them); choose a folder outside it",
            path.display(),
            run.display()
        )
    })
}

/// The run whose `checkpoints/` folder `path` lies in, at any depth (however spelled; parts not
/// made yet are allowed): the run prunes and replaces what is there, so no output goes inside.
pub fn inside_kept(path: &Path) -> Option<PathBuf> {
    resolved(path)?.ancestors().find_map(|a| {
        let run = a.parent()?;
        (a.file_name()? == KEPT_DIR && is_run(run)).then(|| run.to_path_buf())
    })
}

/// Where a run whose own checkpoint is missing or does not read can continue from, said as a
/// remedy: the newest of its kept checkpoints (`checkpoints/step-N`, newest first, then
/// `checkpoints/best`) whose files read (their metadata and run state, the step of both) and are
/// not the run's files named in `suspect`, those that may be damaged (kept files are hard links
/// of the run's, so a file damaged in place is damaged there too; `[]`: the run's files are
/// missing, not damaged; [`suspect_files`] names them from an error). `None` when it keeps none
/// that reads.
#[cfg(feature = "native")]
pub fn kept_remedy_for(run: &Path, suspect: &[&str]) -> Option<String> {
    let (usable, step) = kept_that_reads(run, suspect)?;
    Some(format!(
        "its kept checkpoint {} (step {step}) reads: `ddl train --resume {} --out NEW` continues from it in a new \
         folder",
        usable.display(),
        crate::shell_word(&usable)
    ))
}

/// The newest kept checkpoint of `run` (then its best) that reads and shares none of the files
/// `suspect` with the run's own, with its step.
#[cfg(feature = "native")]
pub(super) fn kept_that_reads(run: &Path, suspect: &[&str]) -> Option<(PathBuf, usize)> {
    let kept = run.join(KEPT_DIR);
    let mut dirs: Vec<PathBuf> = kept_steps(run).into_iter().rev().map(|s| kept.join(step_dir_name(s))).collect();
    dirs.push(kept.join(BEST_DIR));
    let shares = |d: &Path| suspect.iter().any(|f| same_file(&d.join(f), &run.join(f)));
    let usable = dirs.into_iter().find(|d| !shares(d) && saved_state(d).is_ok())?;
    let step = saved_step(&usable).ok()?;
    Some((usable, step))
}

/// A model that does not load for evaluation or generation (`e`, from `run`'s `model.safetensors`
/// damaged or missing), with the kept checkpoint that reads, if any, named as the one to give
/// instead (`flag`: `--checkpoint`, `--against`).
#[cfg(feature = "native")]
pub fn with_kept_for_reading(run: &Path, flag: &str, e: CheckpointError) -> CheckpointError {
    with_kept_named(run, flag, e).0
}

/// `run`'s model file, by its name.
#[cfg(feature = "native")]
fn is_model(p: &Path) -> bool {
    p.file_name().is_some_and(|n| n == MODEL_FILE)
}

/// [`with_kept_for_reading`]'s error, and whether it names a kept checkpoint that reads.
#[cfg(feature = "native")]
fn with_kept_named(run: &Path, flag: &str, e: CheckpointError) -> (CheckpointError, bool) {
    // (A run training in the folder that has saved no checkpoint yet: the missing file's message
    // says so, with when there will be one.)
    let Some((kept, step)) = (match &e {
        CheckpointError::Corrupt { path, .. }
        | CheckpointError::Content { path, .. }
        | CheckpointError::MissingFile(path)
            if is_model(path) =>
        {
            kept_that_reads(run, &[MODEL_FILE])
        }
        _ => None,
    }) else {
        return (e, false);
    };
    let but =
        format!("; but its kept checkpoint {} (step {step}) reads: give {flag} {}", kept.display(), kept.display());
    let e = match e {
        CheckpointError::Corrupt { path, msg } => CheckpointError::Corrupt { path, msg: msg + &but },
        CheckpointError::Content { path, msg } => CheckpointError::Content { path, msg: msg + &but },
        CheckpointError::MissingFile(path) => {
            CheckpointError::Content { path, msg: format!("the file is missing{but}") }
        }
        e => e,
    };
    (e, true)
}

/// [`with_kept_for_reading`], and where no kept checkpoint reads, a model file that is not a
/// safetensors file (cut short, damaged) is said to be damaged, with what to do: copy it again or
/// give `flag` another checkpoint (`ddl generate`, `ddl eval` and `ddl info --checkpoint` said
/// what was wrong and nothing more).
#[cfg(feature = "native")]
pub fn with_remedy_for_reading(run: &Path, flag: &str, e: CheckpointError) -> CheckpointError {
    match with_kept_named(run, flag, e) {
        (CheckpointError::Corrupt { path, msg }, false) if is_model(&path) => {
            let msg = format!(
                "{msg}; the file is damaged: copy the checkpoint again from where it came from, or give {flag} \
                 another checkpoint"
            );
            CheckpointError::Corrupt { path, msg }
        }
        (e, _) => e,
    }
}

/// The folder of a run's kept checkpoints.
pub const KEPT_DIR: &str = "checkpoints";

/// The best checkpoint's folder inside [`KEPT_DIR`] and its record there.
pub const BEST_DIR: &str = "best";

pub const BEST_FILE: &str = "best.json";

/// A run's small files copied into each kept checkpoint, so that it is a run folder of its own
/// (`ddl eval`, `ddl generate` and `--resume` take it).
pub(super) const RUN_FILES: [&str; 2] = ["config.toml", "data.json"];

/// The best checkpoint's record (`checkpoints/best/best.json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Best {
    pub step: usize,
    /// Validation loss over the periodic subset (the windows every evaluation covers).
    pub val_loss: f64,
    /// Tokens of that subset.
    pub val_tokens: usize,
}

/// The name of step `step`'s kept checkpoint folder.
pub fn step_dir_name(step: usize) -> String {
    format!("step-{step:08}")
}

/// A hard link of `src` at `dst` (the file is not copied: the run folder's own checkpoint files
/// are replaced by rename at the next save, so the link keeps this version); a copy where the file
/// system has no hard links.
pub(super) fn link_or_copy(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::hard_link(src, dst).or_else(|_| std::fs::copy(src, dst).map(|_| ()))
}

/// Fills a new folder `tmp` with the checkpoint at the top of `run` (model and moments linked,
/// the run's small files copied), then renames it to `dst`, replacing what was there.
pub(super) fn snapshot(run: &Path, tmp: &Path, dst: &Path, extra: Option<(&str, &[u8])>) -> std::io::Result<()> {
    let _ = std::fs::remove_dir_all(tmp);
    std::fs::create_dir_all(tmp)?;
    let fill = || -> std::io::Result<()> {
        for f in [MODEL_FILE, OPTIM_FILE] {
            link_or_copy(&run.join(f), &tmp.join(f))?;
        }
        for f in RUN_FILES {
            if run.join(f).exists() {
                std::fs::copy(run.join(f), tmp.join(f))?;
            }
        }
        if let Some((name, bytes)) = extra {
            std::fs::write(tmp.join(name), bytes)?;
        }
        sync_dir(tmp);
        // Replace `dst` by renames only: the old folder moves aside first, then goes.
        // (From the path's own bytes: its display is lossy, and a folder whose name is not
        // UTF-8 would send the old folder to a path that does not exist.)
        let mut old = tmp.as_os_str().to_owned();
        old.push(".old");
        let old = PathBuf::from(old);
        if dst.exists() {
            std::fs::rename(dst, &old)?;
        }
        std::fs::rename(tmp, dst)?;
        let _ = std::fs::remove_dir_all(&old);
        sync_dir(dst.parent().unwrap_or(Path::new(".")));
        Ok(())
    };
    fill().inspect_err(|_| {
        let _ = std::fs::remove_dir_all(tmp);
    })
}

/// Temporary folders of [`snapshot`] left by killed writers (not this process's).
pub(super) fn remove_stale_snapshots(kept: &Path) {
    let ours = format!(".tmp-{}", std::process::id());
    let Ok(entries) = std::fs::read_dir(kept) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with('.') && name.contains(".tmp-") && !name.contains(&ours) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The steps of the kept checkpoints of `run`, oldest first.
pub fn kept_steps(run: &Path) -> Vec<usize> {
    let mut steps: Vec<usize> = std::fs::read_dir(run.join(KEPT_DIR))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("step-")?.parse().ok())
        .collect();
    steps.sort_unstable();
    steps
}

/// Keeps the checkpoint just saved at the top of `run` (step `step`) as
/// `checkpoints/step-NNNNNNNN/` and removes the kept ones beyond the newest `keep` (`keep = 0`:
/// none kept, and earlier ones removed). Kept files are hard links where the file system allows:
/// a kept checkpoint costs disk space only once the run folder's own files have moved on.
pub fn keep_step(run: &Path, step: usize, keep: usize) -> Result<(), CheckpointError> {
    let kept = run.join(KEPT_DIR);
    let io = |source| CheckpointError::Io { path: kept.clone(), source };
    if keep > 0 {
        std::fs::create_dir_all(&kept).map_err(io)?;
        remove_stale_snapshots(&kept);
        let name = step_dir_name(step);
        let tmp = kept.join(format!(".{name}.tmp-{}", std::process::id()));
        snapshot(run, &tmp, &kept.join(&name), None).map_err(io)?;
    }
    let steps = kept_steps(run);
    for s in &steps[..steps.len().saturating_sub(keep)] {
        std::fs::remove_dir_all(kept.join(step_dir_name(*s))).map_err(io)?;
    }
    Ok(())
}

/// The best checkpoint's record, when `run` has one.
pub fn read_best(run: &Path) -> Option<Best> {
    let text = std::fs::read_to_string(run.join(KEPT_DIR).join(BEST_DIR).join(BEST_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Makes the checkpoint at the top of `run` the best one: `checkpoints/best/` (linked as
/// [`keep_step`] does) with `best.json` recording its step and validation loss.
pub fn mark_best(run: &Path, best: &Best) -> Result<(), CheckpointError> {
    let kept = run.join(KEPT_DIR);
    let io = |source| CheckpointError::Io { path: kept.join(BEST_DIR), source };
    std::fs::create_dir_all(&kept).map_err(io)?;
    remove_stale_snapshots(&kept);
    let tmp = kept.join(format!(".{BEST_DIR}.tmp-{}", std::process::id()));
    let record = serde_json::to_vec_pretty(best).map_err(|e| io(std::io::Error::other(e)))?;
    snapshot(run, &tmp, &kept.join(BEST_DIR), Some((BEST_FILE, &record))).map_err(io)
}

// (Its tests need unix's file names and hard links: on other platforms there is none.)
#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A run whose folder's name is not UTF-8 (`runs/x\xffy`, which Linux allows): its second
    /// best checkpoint replaced the first through a path made from the name's lossy display, and
    /// the save failed ("cannot read or write 'runs/x\u{fffd}y/checkpoints/best': No such file").
    #[test]
    fn a_folder_whose_name_is_not_utf8_keeps_its_best_checkpoint_again() {
        use std::os::unix::ffi::OsStrExt;
        let base = crate::testing::scratch_dir("kept-not-utf8");
        let run = base.join(std::ffi::OsStr::from_bytes(b"x\xffy"));
        std::fs::create_dir_all(&run).unwrap();
        for f in [MODEL_FILE, OPTIM_FILE] {
            std::fs::write(run.join(f), b"weights").unwrap();
        }
        for step in [1, 2] {
            mark_best(&run, &Best { step, val_loss: 1.0 / step as f64, val_tokens: 64 }).unwrap();
            keep_step(&run, step, 1).unwrap();
            keep_step(&run, step, 1).unwrap();
        }
        assert_eq!(read_best(&run).map(|b| b.step), Some(2));
        assert_eq!(kept_steps(&run), [2]);
        std::fs::remove_dir_all(&base).ok();
    }
}
