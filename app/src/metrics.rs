//! Training metrics of a run directory: `metrics.jsonl`, read incrementally so that a run that
//! is still training is followed (new lines are picked up; a rewritten file is re-read).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// One training step (as the engine reads `metrics.jsonl`).
pub use ddl::train::metrics::TrainRow;

/// The metrics of a run, followed as the file grows.
#[derive(Debug, Default)]
pub struct Metrics {
    pub dir: PathBuf,
    pub train: Vec<TrainRow>,
    /// (step, validation loss) over the windows every evaluation covers.
    pub val: Vec<(f64, f64)>,
    /// (step, validation loss) of the last final evaluation (the whole validation split).
    pub full: Option<(f64, f64)>,
    /// (step, top-1 accuracy) over the same windows as `val`, of the evaluations that logged it.
    pub val_accuracy: Vec<(f64, f64)>,
    /// The last final evaluation's top-1 accuracy over the whole split (runs before it was
    /// logged: none).
    pub full_accuracy: Option<f64>,
    /// Lines that were not valid JSON (reported, skipped).
    pub bad_lines: usize,
    /// What the run is doing, where its folder says (read at each poll).
    pub state: Option<RunState>,
    offset: u64,
    partial: String,
    last_poll: Option<web_time::Instant>,
}

/// What a run folder is, for the errors of a folder that is not one.
const RUN_REMEDY: &str = "give a training run's folder (the --out folder of `ddl train`, which writes its \
                          metrics.jsonl from the first step), or a checkpoint with --checkpoint";

/// What a run's folder says the run is doing: a live process holds its lock, or its last
/// invocation's `summary.json` says how that ended (at or after the last step logged: a run
/// killed after it resumed left an older one, which says nothing of it).
#[derive(Debug, Clone, PartialEq)]
pub enum RunState {
    Training,
    Finished {
        step: usize,
    },
    StoppedEarly {
        step: usize,
        planned: usize,
    },
    /// Ctrl-C or SIGTERM: the checkpoint of `step` saved, `target` the step it was to reach.
    Interrupted {
        step: usize,
        target: usize,
    },
}

impl RunState {
    /// Read from `dir` (`last_step`: the last step `metrics.jsonl` logged); `None` where neither
    /// the lock nor the summary says (a run killed, one that stopped on an error, an older ddl's).
    pub fn read(dir: &Path, last_step: Option<f64>) -> Option<RunState> {
        if training_now(dir) {
            return Some(RunState::Training);
        }
        let text = std::fs::read_to_string(dir.join("summary.json")).ok()?;
        let j: serde_json::Value = serde_json::from_str(&text).ok()?;
        let step = j["step"].as_u64()? as usize;
        if last_step.is_some_and(|s| s > step as f64) {
            return None;
        }
        let target = j["steps_target"].as_u64().map_or(step, |t| t as usize);
        Some(match (j["interrupted"].as_bool(), j["stopped_early"]["planned"].as_u64()) {
            (Some(true), _) => RunState::Interrupted { step, target },
            (_, Some(planned)) => RunState::StoppedEarly { step, planned: planned as usize },
            _ => RunState::Finished { step },
        })
    }

    /// The dashboard's words for it (`dir`: the run, named in the command that goes on).
    pub fn describe(&self, dir: &Path) -> String {
        match *self {
            RunState::Training => "training now".into(),
            RunState::Finished { step } => format!("finished at step {step}"),
            RunState::StoppedEarly { step, planned } => {
                format!("stopped early at step {step} of {planned} (train.early_stop)")
            }
            // (At its last step: stopped during the final evaluation, which a resume makes up.)
            RunState::Interrupted { step, target } if step >= target => format!(
                "stopped during the final evaluation of step {step}: `ddl train --resume {}` makes it up",
                ddl::shell_word(dir)
            ),
            // (The folder as one shell word: `runs/ré sumé` quoted, as `ddl train` says it.)
            RunState::Interrupted { step, target } => {
                format!("stopped at step {step} of {target}: `ddl train --resume {}` goes on", ddl::shell_word(dir))
            }
        }
    }
}

/// A live process trains in `dir` now (`ddl train` or `ddl experiment` holds its lock: a killed
/// run's stale lock is not one). A run that has logged no step yet (the first step's compilation
/// and tile tuning take a while) is one: the dashboard waits for its rows; the Experiment view
/// reads its folders again while one trains there.
pub fn training_now(dir: &Path) -> bool {
    #[cfg(not(target_arch = "wasm32"))]
    return ddl::train::lock::holder(dir).is_some();
    // (The browser's engine has no training, and a page reads no run folder.)
    #[cfg(target_arch = "wasm32")]
    {
        let _ = dir;
        false
    }
}

/// `dir` is a training run's folder, one that holds `metrics.jsonl` or a run that is starting:
/// else what it is instead and what to give (`ddl-viz --run` checks this before its window
/// opens; [`Metrics::open`] too).
pub fn check_run_dir(dir: &Path) -> Result<(), String> {
    if !dir.is_dir() {
        let what = if dir.exists() { "is a file, not a folder" } else { "does not exist" };
        return Err(format!("the run directory {} {what}; {RUN_REMEDY}", dir.display()));
    }
    if !dir.join("metrics.jsonl").exists() && !training_now(dir) {
        // (A kept checkpoint, RUN/checkpoints/NAME: its run's curves are two folders up.)
        let run = dir
            .parent()
            .filter(|p| p.file_name().is_some_and(|n| n == "checkpoints"))
            .and_then(Path::parent)
            .filter(|r| r.join("metrics.jsonl").is_file());
        let hint = if dir.join("runs").is_dir() || dir.join("experiment.toml").is_file() {
            " (an experiment folder: open it with --experiment DIR, or Open… in the Experiment view)".to_string()
        } else if let Some(run) = run {
            format!(" (a checkpoint the run kept: its run is {}, --run {0})", run.display())
        } else {
            format!("; {RUN_REMEDY}")
        };
        return Err(format!("{} has no metrics.jsonl: not a training run directory{hint}", dir.display()));
    }
    Ok(())
}

/// How far a run that is training has come: its last step logged, the step it trains to, and
/// the seconds left at the pace of its last steps (their evaluations and checkpoints included),
/// where two rows of this invocation give a pace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    pub step: f64,
    pub target: f64,
    pub left_s: Option<f64>,
}

impl Metrics {
    /// The progress of a run training now (`None`: not training, or its rows name no target —
    /// an older ddl's — or none logged yet).
    pub fn progress(&self) -> Option<Progress> {
        if self.state != Some(RunState::Training) {
            return None;
        }
        let last = self.train.last()?;
        let target = last.steps_target?;
        // The pace over the last 50 steps of this invocation (the same target: a resumed run's
        // earlier rows went to another one, and its clock restarted from its checkpoint's).
        let first = self
            .train
            .iter()
            .rev()
            .take(50)
            .take_while(|r| r.steps_target == Some(target))
            .last()
            .filter(|r| r.step < last.step);
        let pace = match first.map(|f| (f.step, f.elapsed, last.elapsed)) {
            Some((s, Some(a), Some(b))) if b > a => Some((b - a) / (last.step - s)),
            _ => None,
        };
        Some(Progress { step: last.step, target, left_s: pace.map(|p| p * (target - last.step).max(0.0)) })
    }

    /// Opens a run directory (it must hold `metrics.jsonl`).
    pub fn open(dir: &Path) -> Result<Metrics, String> {
        check_run_dir(dir)?;
        let mut m = Metrics { dir: dir.to_path_buf(), ..Default::default() };
        m.poll()?;
        Ok(m)
    }

    /// The metrics of a run that kept only a validation curve (an experiment's `result.json`).
    pub fn from_curve(dir: &Path, val: Vec<(f64, f64)>) -> Metrics {
        Metrics { dir: dir.to_path_buf(), val, ..Default::default() }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join("metrics.jsonl")
    }

    /// Polls at most once per `every`; returns whether new rows arrived.
    pub fn poll_every(&mut self, every: std::time::Duration) -> Result<bool, String> {
        if self.last_poll.is_some_and(|t| t.elapsed() < every) {
            return Ok(false);
        }
        self.poll()
    }

    /// Reads the lines appended since the last call, and the run's state; returns whether new
    /// rows arrived.
    pub fn poll(&mut self) -> Result<bool, String> {
        self.last_poll = Some(web_time::Instant::now());
        let arrived = self.read_rows()?;
        // (After the rows: a summary of a step before the last row is an earlier invocation's.)
        self.state = RunState::read(&self.dir, self.train.last().map(|r| r.step));
        Ok(arrived)
    }

    /// Reads the lines appended since the last call; returns whether new rows arrived.
    fn read_rows(&mut self) -> Result<bool, String> {
        let path = self.path();
        let file = match std::fs::File::open(&path) {
            Ok(f) => Some(f),
            // A run starting: no step logged yet (or, with --overwrite, the old run's file removed).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && training_now(&self.dir) => None,
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let len = match &file {
            Some(f) => f.metadata().map_err(|e| e.to_string())?.len(),
            None => 0,
        };
        if len < self.offset {
            // The file was rewritten (a new run in the same directory): start over.
            self.train.clear();
            self.val.clear();
            self.val_accuracy.clear();
            (self.full, self.full_accuracy) = (None, None);
            self.bad_lines = 0;
            self.offset = 0;
            self.partial.clear();
        }
        if len == self.offset {
            return Ok(false);
        }
        let mut f = file.expect("a length above the offset read from the file");
        f.seek(SeekFrom::Start(self.offset)).map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        f.take(len - self.offset).read_to_end(&mut buf).map_err(|e| e.to_string())?;
        self.offset += buf.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&buf));
        let before = self.train.len() + self.val.len();
        // Only complete lines: a line still being written stays in `partial`.
        while let Some(nl) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=nl).collect();
            self.parse_line(line.trim());
        }
        Ok(self.train.len() + self.val.len() > before)
    }

    fn parse_line(&mut self, line: &str) {
        use ddl::train::metrics::{Line, parse_line};
        if line.is_empty() {
            return;
        }
        match parse_line(line) {
            None => self.bad_lines += 1,
            Some(Line::Train(row)) => self.train.push(row),
            Some(Line::Val(v)) => {
                // The final evaluation covers the whole split; the curve continues with its part
                // over the windows every evaluation covers (the same loss as the points before).
                if v.full {
                    self.full = Some((v.step, v.loss));
                    self.full_accuracy = v.accuracy;
                }
                if let Some(p) = v.curve_point() {
                    self.val.push(p);
                }
                if let Some(p) = v.accuracy_point() {
                    self.val_accuracy.push(p);
                }
            }
        }
    }

    /// Number of sublayers in the β means (0 for baseline runs).
    pub fn n_sublayers(&self) -> usize {
        self.train.iter().filter_map(|r| r.beta_mean.as_ref().map(|b| b.len())).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn follows_a_growing_file_and_skips_partial_and_bad_lines() {
        let dir = ddl::testing::scratch_dir("ddl-viz-metrics");
        let p = dir.join("metrics.jsonl");
        std::fs::write(
            &p,
            "{\"step\":1,\"loss\":4.0,\"lr\":0.001,\"grad_norm\":1.5,\"beta_mean\":[0.5,1.0]}\n{\"step\":2,",
        )
        .unwrap();
        let mut m = Metrics::open(&dir).unwrap();
        assert_eq!(m.train.len(), 1);
        assert_eq!(m.n_sublayers(), 2);
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"\"loss\":3.5}\nnot json\n{\"step\":2,\"val_loss\":3.7,\"val_ppl\":40}\n").unwrap();
        assert!(m.poll().unwrap());
        assert_eq!(m.train.len(), 2);
        assert_eq!(m.train[1].loss, Some(3.5));
        assert_eq!(m.val, vec![(2.0, 3.7)]);
        assert_eq!(m.bad_lines, 1);
        // The final evaluation: its subset part continues the curve, the whole split's is apart.
        f.write_all(b"{\"step\":3,\"val_loss\":3.9,\"val_full\":true,\"val_subset_loss\":3.6}\n").unwrap();
        assert!(m.poll().unwrap());
        assert_eq!(m.val, vec![(2.0, 3.7), (3.0, 3.6)]);
        assert_eq!(m.full, Some((3.0, 3.9)));
        assert!(m.val_accuracy.is_empty() && m.full_accuracy.is_none());
        // Accuracies: the periodic one on the curve, the final one's subset part continuing it.
        f.write_all(b"{\"step\":4,\"val_loss\":3.5,\"val_accuracy\":0.25}\n").unwrap();
        f.write_all(b"{\"step\":5,\"val_loss\":3.4,\"val_full\":true,\"val_subset_loss\":3.3,\"val_accuracy\":0.3,")
            .unwrap();
        f.write_all(b"\"val_subset_accuracy\":0.31}\n").unwrap();
        assert!(m.poll().unwrap());
        assert_eq!(m.val_accuracy, vec![(4.0, 0.25), (5.0, 0.31)]);
        assert_eq!((m.full, m.full_accuracy), (Some((5.0, 3.4)), Some(0.3)));
        assert!(!m.poll().unwrap());
        // Rewritten (shorter): re-read from the start, the earlier run's final evaluation gone.
        std::fs::write(&p, "{\"step\":1,\"loss\":9.0}\n").unwrap();
        assert!(m.poll().unwrap());
        assert!(m.full.is_none() && m.full_accuracy.is_none() && m.val_accuracy.is_empty());
        assert_eq!(m.train.len(), 1);
        assert_eq!(m.train[0].loss, Some(9.0));
        assert!(Metrics::open(&dir.join("nope")).is_err());
        // A file, and a folder that is not a run's: each says what to give instead.
        let e = Metrics::open(&p).unwrap_err();
        assert!(e.contains("is a file, not a folder; give a training run's folder (the --out folder"), "{e}");
        let other = dir.join("other");
        std::fs::create_dir_all(&other).unwrap();
        let e = Metrics::open(&other).unwrap_err();
        assert!(e.contains("not a training run directory; give a training run's folder"), "{e}");
        // A checkpoint the run kept (RUN/checkpoints/NAME) opened as a run: its run is named.
        let kept = dir.join("checkpoints/step-100");
        std::fs::create_dir_all(&kept).unwrap();
        let e = Metrics::open(&kept).unwrap_err();
        assert!(e.contains(&format!("its run is {}, --run {0}", dir.display())), "{e}");
    }

    /// A run that has started and logged no step (its lock there, no metrics.jsonl) is followed
    /// until its rows come (it was refused as "not a training run directory", the dashboard
    /// opened with `ddl train … & ddl-viz --run DIR` closed at once); without the lock it is not.
    #[test]
    fn a_starting_run_is_followed_until_its_first_rows() {
        let dir = ddl::testing::scratch_dir("ddl-viz-starting");
        assert!(check_run_dir(&dir).unwrap_err().contains("no metrics.jsonl"));
        // (A live process of this host: this test's own is taken for a stale lock, as a second
        // run of the process that locked it may take it over.)
        let lock = dir.join(ddl::train::lock::LOCK_FILE);
        std::fs::write(&lock, "1 another-host").unwrap();
        let mut m = Metrics::open(&dir).unwrap();
        assert!(m.train.is_empty() && !m.poll().unwrap());
        std::fs::write(dir.join("metrics.jsonl"), "{\"step\":1,\"loss\":4.0}\n").unwrap();
        assert!(m.poll().unwrap());
        assert_eq!(m.train.len(), 1);
        // --overwrite's new run removed the file: started over, waiting again.
        std::fs::remove_file(dir.join("metrics.jsonl")).unwrap();
        assert!(!m.poll().unwrap());
        assert!(m.train.is_empty());
        // The run gone (its lock removed) without a metrics.jsonl: an error, as before.
        std::fs::remove_file(&lock).unwrap();
        assert!(m.poll().unwrap_err().contains("cannot read"));
        // A killed run's stale lock (a process of this host that is gone) is no run starting.
        // (Nor does the state say anything of it.)
        std::fs::write(&lock, format!("{} {}", u32::MAX - 1, ddl::train::lock::host_name())).unwrap();
        assert!(check_run_dir(&dir).unwrap_err().contains("no metrics.jsonl"));
    }

    /// A run training now says how far it has come and the time left at its last steps' pace
    /// (the Training view could not before its first checkpoint: the target was on disk only
    /// there and in the summary of its end); rows of an earlier invocation (another target)
    /// give no pace, and rows without a target (an older ddl's) no progress.
    #[test]
    fn a_training_run_says_its_progress_and_the_time_left() {
        let dir = ddl::testing::scratch_dir("ddl-viz-progress");
        let row = |step: u32, elapsed: f64, target: u32| {
            format!("{{\"step\":{step},\"loss\":4.0,\"elapsed\":{elapsed},\"steps_target\":{target}}}\n")
        };
        // An earlier invocation to 10 at 1 s a step, then this one to 40 at 2 s a step.
        let mut text: String = (1..=10).map(|s| row(s, s as f64, 10)).collect();
        std::fs::write(dir.join("metrics.jsonl"), &text).unwrap();
        let mut m = Metrics::open(&dir).unwrap();
        assert_eq!(m.progress(), None, "not training");
        std::fs::write(dir.join(ddl::train::lock::LOCK_FILE), "1 another-host").unwrap();
        m.poll().unwrap();
        assert_eq!(m.progress(), Some(Progress { step: 10.0, target: 10.0, left_s: Some(0.0) }));
        text.push_str(&row(11, 12.0, 40));
        std::fs::write(dir.join("metrics.jsonl"), &text).unwrap();
        m.poll().unwrap();
        assert_eq!(m.progress(), Some(Progress { step: 11.0, target: 40.0, left_s: None }), "one row of this one");
        text.extend((12..=20).map(|s| row(s, 12.0 + 2.0 * (s - 11) as f64, 40)));
        std::fs::write(dir.join("metrics.jsonl"), &text).unwrap();
        m.poll().unwrap();
        assert_eq!(m.progress(), Some(Progress { step: 20.0, target: 40.0, left_s: Some(40.0) }));
        std::fs::write(dir.join("metrics.jsonl"), "{\"step\":1,\"loss\":4.0,\"elapsed\":1}\n").unwrap();
        m.poll().unwrap();
        assert_eq!(m.progress(), None, "no target logged");
    }

    /// The run's state: training while a live process holds its lock; else how its last
    /// invocation ended, from summary.json, where that is at or after the last step logged.
    #[test]
    fn the_state_is_read_from_the_lock_and_the_summary() {
        let dir = ddl::testing::scratch_dir("ddl-viz-state");
        std::fs::write(dir.join("metrics.jsonl"), "{\"step\":1,\"loss\":4.0}\n{\"step\":7,\"loss\":3.0}\n").unwrap();
        let mut m = Metrics::open(&dir).unwrap();
        assert_eq!(m.state, None, "neither a lock nor a summary");
        let lock = dir.join(ddl::train::lock::LOCK_FILE);
        std::fs::write(&lock, "1 another-host").unwrap();
        m.poll().unwrap();
        assert_eq!(m.state, Some(RunState::Training));
        std::fs::remove_file(&lock).unwrap();
        let summary = |step: u64, target: u64, interrupted: bool, early: &str| {
            let text = format!(
                "{{\"step\":{step},\"steps_target\":{target},\"interrupted\":{interrupted},\"stopped_early\":{early}}}"
            );
            std::fs::write(dir.join("summary.json"), text).unwrap();
        };
        summary(7, 30, true, "null");
        m.poll().unwrap();
        assert_eq!(m.state, Some(RunState::Interrupted { step: 7, target: 30 }));
        let said = m.state.as_ref().unwrap().describe(Path::new("runs/ré sumé"));
        assert!(said.ends_with("`ddl train --resume 'runs/ré sumé'` goes on"), "{said}");
        let words = m.state.as_ref().unwrap().describe(&dir);
        assert!(words.contains("stopped at step 7 of 30") && words.contains("ddl train --resume"), "{words}");
        summary(7, 7, true, "null");
        m.poll().unwrap();
        assert!(m.state.as_ref().unwrap().describe(&dir).contains("during the final evaluation"));
        summary(7, 7, false, "null");
        m.poll().unwrap();
        assert_eq!(m.state.as_ref().unwrap().describe(&dir), "finished at step 7");
        summary(7, 50, false, "{\"step\":7,\"planned\":50}");
        m.poll().unwrap();
        assert_eq!(m.state, Some(RunState::StoppedEarly { step: 7, planned: 50 }));
        // A summary of an earlier invocation (a resumed run logged past it, then was killed).
        summary(1, 1, false, "null");
        m.poll().unwrap();
        assert_eq!(m.state, None);
    }
}
