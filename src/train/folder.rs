//! A run's folder: which files show it holds a run, claiming it for a new run (and removing the
//! run it replaces), branching a run into another folder, and what keeps a folder from taking
//! one.

use std::path::{Path, PathBuf};

use super::{RunConfig, TrainError, checkpoint, data, prepare};

/// The files that show a folder holds a run that trained: its metrics and checkpoint.
const TRAINED_FILES: [&str; 3] = ["metrics.jsonl", checkpoint::MODEL_FILE, checkpoint::OPTIM_FILE];

/// Those of [`TRAINED_FILES`] that `dir` holds: a run trained there when any (what new runs, grids
/// and benchmarks refuse to mix their files with).
pub fn trained_files(dir: &Path) -> Vec<&'static str> {
    TRAINED_FILES.into_iter().filter(|f| dir.join(f).exists()).collect()
}

/// Every file a run writes into its folder (what `--overwrite` removes).
const RUN_FILES: [&str; 9] = [
    "metrics.jsonl",
    "data.json",
    checkpoint::MODEL_FILE,
    checkpoint::OPTIM_FILE,
    "config.toml",
    checkpoint::OPTIM_PREV_FILE,
    "loss.png",
    "distributed.json",
    "summary.json",
];

/// A new run in `dir`: refused when the folder holds a run (its metrics or checkpoint: a run
/// that trained) unless `overwrite`. Returns whether there is a run to replace, which
/// [`remove_run`] removes once the new run is known to start (its settings, data and programs
/// work here): a new run that fails to start leaves the old one as it was.
pub(super) fn claim_for_new_run(dir: &Path, overwrite: bool) -> Result<bool, TrainError> {
    let found = trained_files(dir);
    if found.is_empty() {
        let others: Vec<&str> = RUN_FILES.into_iter().filter(|f| dir.join(f).exists()).collect();
        if others.is_empty() {
            return Ok(false);
        }
        if overwrite {
            return Ok(true);
        }
        // A run that stopped before its first step leaves its config.toml and data.json (its
        // record of the data): the new run writes over them, as its own. (Kept checkpoints
        // beside them are a run's to continue: said, not removed.) Anything else is not the
        // run's to replace.
        if is_runs_data_record(&dir.join("data.json")) {
            return match checkpoint::kept_remedy_for(dir, &[]) {
                Some(kept) => {
                    Err(TrainError::RunWithKeptCheckpoints { dir: dir.to_path_buf(), what: others.join(", "), kept })
                }
                None => Ok(false),
            };
        }
        let hint = if others.contains(&"config.toml") {
            " (a settings file for --config belongs outside the folder a run writes: the run keeps its resolved \
             settings in config.toml)"
        } else {
            ""
        };
        return Err(TrainError::NotARunsFiles {
            dir: dir.to_path_buf(),
            files: others.join(", "),
            hint: hint.to_string(),
        });
    }
    if !overwrite {
        let (dir, what) = (dir.to_path_buf(), found.join(", "));
        return Err(if found.contains(&checkpoint::MODEL_FILE) {
            // (Its files' metadata and run state, as `--resume` reads them first.)
            match checkpoint::saved_state(&dir) {
                Ok(_) => TrainError::RunExists { dir, what },
                Err(e) => {
                    let kept = checkpoint::kept_remedy_for(&dir, checkpoint::suspect_files(&e))
                        .map(|k| format!("; but {k}"))
                        .unwrap_or_default();
                    TrainError::RunUnreadable { dir, what, problem: e.to_string(), kept }
                }
            }
        } else if let Some(kept) = checkpoint::kept_remedy_for(&dir, &[]) {
            TrainError::RunWithKeptCheckpoints { dir, what, kept }
        } else {
            TrainError::RunWithoutCheckpoint { dir, what }
        });
    }
    Ok(true)
}

/// Whether `path` is the record of its data a run writes (`data.json`: key, split sizes, source).
pub(super) fn is_runs_data_record(path: &Path) -> bool {
    std::fs::read_to_string(path).ok().and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok()).is_some_and(
        |v| v["key"].is_string() && v["train_tokens"].is_u64() && v["val_tokens"].is_u64() && v["source"].is_string(),
    )
}

/// `ddl train --resume SRC --out DST`: DST (new, or an empty folder) receives a copy of SRC's
/// checkpoint, settings, data record, metrics (a kept checkpoint's metrics are its run's, which
/// the resume cuts back to its step) and best checkpoint (when it is not newer than SRC's step),
/// so that resuming DST continues SRC's run there and SRC stays as it is. The copy is made in a
/// temporary folder renamed to DST at the end: a failed or killed copy leaves no DST (what a
/// killed one leaves is removed by the next). Returns the checkpoint's step.
pub fn branch_run(src: &Path, dst: &Path) -> Result<usize, TrainError> {
    let step = checkpoint::saved_step(src)?;
    let trained = trained_files(dst);
    if !trained.is_empty() {
        // (A run there; other files are refused below as a folder not empty. Not "--overwrite
        // replaces it": a copy never replaces a run.)
        return Err(TrainError::Settings(format!(
            "--out '{}' holds a run ({}): the copy of --resume {} goes into a new (or empty) folder; choose another \
             --out (`ddl train --resume {}` continues the run that is there)",
            dst.display(),
            trained.join(", "),
            src.display(),
            crate::shell_word(dst)
        )));
    }
    if dst.exists() && !dst.is_dir() {
        return Err(TrainError::Settings(format!(
            "--out '{}' is a file: the copy of --resume {} goes into a new (or empty) folder",
            dst.display(),
            src.display()
        )));
    }
    if dst.exists() && std::fs::read_dir(dst).map(|mut d| d.next().is_some()).unwrap_or(true) {
        return Err(TrainError::Settings(format!(
            "--out '{}' exists and is not empty: the copy of --resume {} goes into a new (or empty) folder",
            dst.display(),
            src.display()
        )));
    }
    let parent = dst.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TrainError::Io { path, source }
    };
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let stem = format!(".{}.branch-", dst.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
    prepare::remove_stale_temp_dirs(parent, &stem);
    let tmp = parent.join(format!("{stem}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let result = (|| {
        std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
        let kept_run = checkpoint::kept_run_of(src);
        let run = kept_run.as_deref().unwrap_or(src);
        let metrics = [src, run].into_iter().map(|d| d.join("metrics.jsonl")).find(|p| p.exists());
        let mut copies: Vec<(PathBuf, PathBuf)> =
            [checkpoint::MODEL_FILE, checkpoint::OPTIM_FILE, checkpoint::OPTIM_PREV_FILE, "config.toml", "data.json"]
                .iter()
                .map(|f| (src.join(f), tmp.join(f)))
                .filter(|(s, _)| s.exists())
                .collect();
        copies.extend(metrics.map(|m| (m, tmp.join("metrics.jsonl"))));
        // The best so far, unless it is newer than the checkpoint continued.
        if checkpoint::read_best(run).is_some_and(|b| b.step <= step) {
            let (from, to) = (
                run.join(checkpoint::KEPT_DIR).join(checkpoint::BEST_DIR),
                tmp.join(checkpoint::KEPT_DIR).join(checkpoint::BEST_DIR),
            );
            std::fs::create_dir_all(&to).map_err(io(&to))?;
            for e in std::fs::read_dir(&from).map_err(io(&from))?.flatten() {
                if e.path().is_file() && !e.file_name().to_string_lossy().starts_with('.') {
                    copies.push((e.path(), to.join(e.file_name())));
                }
            }
        }
        for (s, d) in &copies {
            std::fs::copy(s, d).map_err(io(s))?;
            // The copy is the new run's own: writable whatever the source's mode (a read-only
            // run's files kept it, and the branch failed writing metrics.jsonl).
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mut perm = std::fs::metadata(d).map_err(io(d))?.permissions();
                if perm.mode() & 0o200 == 0 {
                    perm.set_mode(perm.mode() | 0o200);
                    std::fs::set_permissions(d, perm).map_err(io(d))?;
                }
            }
        }
        if dst.exists() {
            std::fs::remove_dir(dst).map_err(io(dst))?;
        }
        std::fs::rename(&tmp, dst).map_err(io(dst))
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    Ok(step)
}

/// Lines of `dir/metrics.jsonl` logged for steps after `step` (0 without the file).
pub fn logged_steps_after(dir: &Path, step: usize) -> usize {
    logged_after(dir, step).0
}

/// What `metrics.jsonl` in `dir` has logged past `step`: the number of step rows, the last step
/// row's step and the step its invocation trains to (`steps_target`; rows of an older ddl: none).
pub fn logged_after(dir: &Path, step: usize) -> (usize, Option<usize>, Option<usize>) {
    let Ok(text) = std::fs::read_to_string(dir.join("metrics.jsonl")) else { return (0, None, None) };
    let (mut past, mut last, mut target) = (0, None, None);
    for v in text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()) {
        let Some(s) = v["step"].as_u64().map(|s| s as usize) else { continue };
        past += (s > step) as usize;
        // (Step rows only: a validation row has no loss.)
        if v.get("loss").is_some() {
            (last, target) = (Some(s), v["steps_target"].as_u64().map(|t| t as usize));
        }
    }
    (past, last, target)
}

/// Removes the files of the run in `dir` (`--overwrite`, after [`claim_for_new_run`]) and its
/// kept checkpoints.
pub(super) fn remove_run(dir: &Path) -> Result<(), TrainError> {
    for f in RUN_FILES {
        let path = dir.join(f);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(TrainError::Io { path, source }),
        }
    }
    // The kept checkpoints of the replaced run.
    let kept = dir.join(checkpoint::KEPT_DIR);
    match std::fs::remove_dir_all(&kept) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(TrainError::Io { path: kept, source }),
    }
}

/// Why a run could not write its folder `dir`, as far as can be told without writing: a link to
/// nothing, a file in its place or in the place of a folder above it (`ddl train --dry-run`
/// says it; the run refuses it before anything is written).
pub fn out_problem(dir: &Path) -> Option<String> {
    if data::path_problem(dir) == Some(data::PathProblem::BrokenLink) {
        return Some(format!(
            "--out '{}' is a symbolic link that leads nowhere (its target is missing, or the links loop); give a \
             folder, or make the link's target first",
            dir.display()
        ));
    }
    if dir.exists() && !dir.is_dir() {
        return Some(format!(
            "--out '{}' is a file: a run writes a folder; give a new folder's path (or a run's, with --resume)",
            dir.display()
        ));
    }
    if let Some(file) = data::file_in_the_way(dir) {
        return Some(format!(
            "--out '{}': '{}' is a file, so the run's folder cannot be made there; choose another --out",
            dir.display(),
            file.display()
        ));
    }
    None
}

/// Why a resumed run (its settings `run`, continuing the checkpoint in `from`) could not read
/// its data, as far as can be told before the adapter opens: its record `data.json` malformed,
/// its corpus or shards gone from where its config.toml (or the flag given now) says.
pub fn resume_data_problem(run: &RunConfig, from: &Path, corpus_given: bool, data_given: bool) -> Option<String> {
    if let Err(path) = data::saved_data_record(from) {
        return Some(data::malformed_record(&path, "resume"));
    }
    let config = from.join("config.toml");
    if !run.data.is_empty() {
        let missing = !run.data.contains(['*', '?']) && !Path::new(&run.data).exists();
        return missing.then(|| match data_given {
            true => format!("--data '{}' does not exist (a folder of shards, a glob or a file)", run.data),
            false => format!(
                "the run's shards '{}' (from {}) do not exist: a resumed run trains on the data it started on; \
                 restore them there, or, if they moved, pass --data PATH where they are now (they are checked \
                 against the run's data.json)",
                run.data,
                config.display()
            ),
        });
    }
    let corpus = Path::new(&run.corpus);
    if run.corpus == data::DEFAULT_CORPUS || corpus.exists() {
        return None;
    }
    Some(match corpus_given {
        true => data::DataError::Missing(corpus.to_path_buf()).to_string(),
        false => resumed_corpus_missing(corpus, &config),
    })
}

/// A resumed run's corpus `corpus` (from its `config`) is gone: what to do.
pub fn resumed_corpus_missing(corpus: &Path, config: &Path) -> String {
    format!(
        "the run's corpus '{}' (from {}) does not exist: a resumed run trains on the text it started on; restore it \
         there, or, if it moved, pass --corpus PATH where it is now (its tokens are checked against the run's \
         data.json)",
        corpus.display(),
        config.display()
    )
}

pub(super) fn check_writable(dir: &Path) -> Result<(), TrainError> {
    if let Some(why) = out_problem(dir) {
        return Err(TrainError::Settings(why));
    }
    let err = |source| TrainError::OutDir { path: dir.to_path_buf(), source };
    std::fs::create_dir_all(dir).map_err(err)?;
    let probe = dir.join(format!(".write-test-{}", std::process::id()));
    std::fs::write(&probe, b"ok").map_err(err)?;
    std::fs::remove_file(&probe).map_err(err)?;
    Ok(())
}
