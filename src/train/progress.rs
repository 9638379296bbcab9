//! What a run shows and writes as it goes: the progress bar (or plain log lines when stderr is
//! not a terminal), `metrics.jsonl` and the loss plot.

use std::io::{IsTerminal, Write};
use std::path::Path;

use super::{Show, TrainError, plot};

pub(super) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    /// The bars `bar` is one of (a job's), to take it out when it finishes.
    bars: Option<indicatif::MultiProgress>,
    plain: bool,
    /// Put before each line: `[name] ` for a job, else nothing.
    prefix: String,
    /// The bar is gone ([`Progress::finish`]): the final evaluation comes after it.
    finished: std::cell::Cell<bool>,
}

const BAR: &str = "{spinner} [{elapsed_precise}] {wide_bar} step {pos}/{len} {msg} eta {eta}";
const JOB_BAR: &str = "{spinner} {prefix} [{elapsed_precise}] {wide_bar} step {pos}/{len} {msg} eta {eta}";

impl Progress {
    pub(super) fn new(show: &Show, start: usize, end: usize) -> Progress {
        let quiet =
            Progress { bar: None, bars: None, plain: false, prefix: String::new(), finished: Default::default() };
        let bar = |template: &str| {
            let bar = indicatif::ProgressBar::new(end as u64);
            bar.set_position(start as u64);
            bar.set_style(indicatif::ProgressStyle::with_template(template).expect("a valid template"));
            bar
        };
        let terminal = std::io::stderr().is_terminal();
        match show {
            Show::Quiet => quiet,
            Show::Bar if terminal => Progress { bar: Some(bar(BAR)), ..quiet },
            Show::Bar => Progress { plain: true, ..quiet },
            Show::Job { name, bars } if terminal => {
                let b = bars.add(bar(JOB_BAR));
                b.set_prefix(name.clone());
                Progress { bar: Some(b), bars: Some(bars.clone()), prefix: format!("[{name}] "), ..quiet }
            }
            Show::Job { name, .. } => Progress { plain: true, prefix: format!("[{name}] "), ..quiet },
        }
    }

    pub(super) fn update(&self, step: usize, msg: String, log: bool) {
        if let Some(b) = &self.bar {
            b.set_position(step as u64);
            b.set_message(msg);
        } else if self.plain && log {
            say(&format!("{}step {step} {msg}", self.prefix));
        }
    }

    pub(super) fn println(&self, s: String) {
        if let Some(b) = &self.bar {
            // (A job's bar prints above all the bars.)
            b.println(format!("{}{s}", self.prefix));
        } else if self.plain {
            say(&format!("{}{s}", self.prefix));
        }
    }

    /// How far an evaluation of `of` batches has got: on the bar while it runs; after it (the
    /// final evaluation over the whole split), a line at every tenth of a long one (≥ 100
    /// batches), so that minutes of evaluation on a large split show a sign of life.
    pub(super) fn eval_tick(&self, k: &super::Tick<'_>, shown: &mut usize) {
        let (done, of) = (k.done, k.of);
        if let Some(b) = &self.bar
            && !self.finished.get()
        {
            b.set_message(format!("evaluating {done}/{of}"));
            return;
        }
        if (self.plain || self.bar.is_some()) && k.next_tenth(shown) {
            let line = format!("{}evaluation: batch {done}/{of}", self.prefix);
            match &self.bars {
                // Other jobs' bars are still drawn: print above them.
                Some(bars) => {
                    let _ = bars.println(line);
                }
                None => say(&line),
            }
        }
    }

    pub(super) fn finish(&self) {
        self.finished.set(true);
        if let Some(b) = &self.bar {
            b.finish_and_clear();
            if let Some(bars) = &self.bars {
                bars.remove(b);
            }
        }
    }
}

pub(super) fn append_line(path: &Path, line: &serde_json::Value) -> Result<(), TrainError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| TrainError::Io { path: path.to_path_buf(), source })?;
    writeln!(f, "{line}").map_err(|source| TrainError::Io { path: path.to_path_buf(), source })
}

/// Cuts `metrics.jsonl` back to the lines of steps ≤ `step` (a resumed run continues from its
/// checkpoint: lines a stopped run logged after it would otherwise appear twice), and drops
/// lines that are not JSON objects with a step (a line torn by a crash mid-write, which the next
/// line appended would otherwise be glued onto). Written atomically. What the curves lose is said
/// (the steps before `step` are drawn from this file): a file that is missing or holds no line
/// of a step up to `step`, and lines dropped as unreadable other than a torn last one.
pub(super) fn cut_metrics(path: &Path, step: usize) -> Result<usize, TrainError> {
    let Ok(bytes) = std::fs::read(path) else {
        if step > 0 {
            eprintln!(
                "note: {} is missing: the run goes on from step {step}, and its curves (loss.png, `ddl plot`) \
                 start there",
                path.display()
            );
        }
        return Ok(0);
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut kept = String::with_capacity(text.len());
    let (mut cut, mut kept_lines, mut unreadable) = (0, 0, Vec::new());
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let read = serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| v["step"].as_u64());
        // (A last line without its newline is one a crash tore: dropped without a word.)
        let torn = i + 1 == lines.len() && !text.ends_with('\n');
        if read.is_none() && !torn && !line.trim().is_empty() {
            unreadable.push(i + 1);
        }
        if read.is_some_and(|s| s as usize <= step) {
            kept.push_str(line);
            kept.push('\n');
            kept_lines += 1;
        } else {
            cut += 1;
        }
    }
    if !unreadable.is_empty() {
        let shown: Vec<String> = unreadable.iter().take(5).map(|n| n.to_string()).collect();
        eprintln!(
            "note: {}: dropped {} line(s) that do not read as a step's record (line {}{}): edited or damaged; the \
             curves lack them",
            path.display(),
            unreadable.len(),
            shown.join(", "),
            if unreadable.len() > 5 { ", …" } else { "" }
        );
    }
    if kept_lines == 0 && step > 0 {
        eprintln!(
            "note: {} holds no record of the steps up to {step}: the run goes on from step {step}, and its curves \
             (loss.png, `ddl plot`) start there",
            path.display()
        );
    }
    // A file with other links (the run copied with `cp -al`, a backup by `rsync --link-dest`)
    // becomes this run's own before lines are appended: the copy's would change with it.
    #[cfg(unix)]
    let shared = std::fs::metadata(path).is_ok_and(|m| std::os::unix::fs::MetadataExt::nlink(&m) > 1);
    #[cfg(not(unix))]
    let shared = false;
    if cut > 0 || kept.len() != bytes.len() || shared {
        crate::train::checkpoint::write_atomic(path, kept.as_bytes())
            .map_err(|source| TrainError::Io { path: path.to_path_buf(), source })?;
    }
    Ok(cut)
}

/// Reads `metrics.jsonl` back into the loss plot (the validation curve on the windows every
/// evaluation covers: [`super::metrics::Metrics::val`]).
pub fn plot_metrics(dir: &Path) -> Result<(), String> {
    // A run stopped before its first logged step: nothing to plot.
    let Some(m) = super::metrics::Metrics::read(dir).map_err(|e| e.to_string())? else { return Ok(()) };
    let train = m.train.iter().filter_map(|r| Some((r.step, r.loss?))).collect();
    plot::line_plot(
        &dir.join("loss.png"),
        "loss",
        "step",
        "cross-entropy (nats)",
        &[
            plot::Series { name: "train".into(), points: train },
            plot::Series { name: "validation".into(), points: m.val },
        ],
    )
}

/// (current, peak) resident bytes of this process (`VmRSS`, `VmHWM` of /proc/self/status);
/// `None` off Linux.
pub fn rss() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Resets the peak resident size to the current one (Linux: `5` into /proc/self/clear_refs).
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// With `DDL_TRACE_MEMORY=1`, prints the resident size (current and peak, MiB above `base`) at a
/// named stage of a run to stderr: where a run's memory goes, measured.
pub fn trace_memory(stage: &str, base: Option<u64>, tensors: u64) {
    if std::env::var_os("DDL_TRACE_MEMORY").is_none_or(|v| v == "0") {
        return;
    }
    if let Some((now, peak)) = rss() {
        let b = base.unwrap_or(0);
        let mib = |x: u64| x.saturating_sub(b) as f64 / (1u64 << 20) as f64;
        eprintln!(
            "memory at {stage}: resident +{:.1} MiB, peak +{:.1} MiB, GPU tensors {:.1} MiB",
            mib(now),
            mib(peak),
            tensors as f64 / (1u64 << 20) as f64
        );
        if std::env::var("DDL_TRACE_MEMORY").as_deref() == Ok("2") {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
            let mut cur = String::new();
            let mut rows = Vec::new();
            for l in smaps.lines() {
                if l.starts_with("Rss:") {
                    let kb: u64 = l.split_whitespace().nth(1).unwrap().parse().unwrap();
                    rows.push((kb, cur.clone()));
                } else if !l.contains(':') || l.split_whitespace().next().is_some_and(|w| w.contains('-')) {
                    cur = l.to_string();
                }
            }
            rows.sort();
            for (kb, name) in rows.iter().rev().take(12) {
                eprintln!("   {:>8} KiB  {name}", kb);
            }
        }
    }
}

/// A line on stderr that never panics: a run whose output's reader went away (the write fails
/// with a broken pipe) stops cleanly on the SIGPIPE ([`super::install_ctrlc`]) rather than in a
/// panic of `eprintln!`.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

// (Its tests need unix's file names and hard links: on other platforms there is none.)
#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A resumed run whose folder is a hard-linked copy's twin (`cp -al runs/a runs/b`, a
    /// snapshot by `rsync --link-dest`) appended its lines to the copy's `metrics.jsonl` too.
    #[test]
    fn a_resumed_runs_metrics_are_its_own_not_a_hard_linked_copys() {
        let dir = crate::testing::scratch_dir("metrics-linked");
        let (run, copy) = (dir.join("metrics.jsonl"), dir.join("copy.jsonl"));
        let logged = "{\"step\": 1, \"loss\": 4.0}\n{\"step\": 2, \"loss\": 3.9}\n";
        std::fs::write(&run, logged).unwrap();
        std::fs::hard_link(&run, &copy).unwrap();
        assert_eq!(cut_metrics(&run, 2).unwrap(), 0);
        append_line(&run, &serde_json::json!({"step": 3, "loss": 3.8})).unwrap();
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), logged, "the copy's metrics changed");
        assert_eq!(std::fs::read_to_string(&run).unwrap().lines().count(), 3);
        std::fs::remove_dir_all(&dir).ok();
    }
}
