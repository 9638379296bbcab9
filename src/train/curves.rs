//! `ddl plot`: one metric of several runs as curves in one picture, from their `metrics.jsonl`
//! ([`super::metrics::Metrics`]), with a table of where each run ended.

use std::path::{Path, PathBuf};

use super::TrainError;
use super::config::RunConfig;
use super::metrics::{Metrics, TrainRow};
use super::plot;

/// What `ddl plot` draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Val,
    Train,
    GradNorm,
    Lr,
    TokPerS,
    Beta,
}

impl Metric {
    pub const ALL: [Metric; 6] =
        [Metric::Val, Metric::Train, Metric::GradNorm, Metric::Lr, Metric::TokPerS, Metric::Beta];

    pub fn parse(s: &str) -> Result<Metric, String> {
        Metric::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            format!("unknown metric '{s}' (expected one of {})", Metric::ALL.map(|m| m.name()).join(", "))
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::Val => "val",
            Metric::Train => "train",
            Metric::GradNorm => "grad_norm",
            Metric::Lr => "lr",
            Metric::TokPerS => "tok_per_s",
            Metric::Beta => "beta",
        }
    }

    /// The plot's title (ASCII: PNG text chunks are Latin-1) and its y axis.
    fn title(self) -> &'static str {
        match self {
            Metric::Val => "validation loss",
            Metric::Train => "training loss",
            Metric::GradNorm => "gradient norm",
            Metric::Lr => "learning rate",
            Metric::TokPerS => "tokens per second",
            Metric::Beta => "mean beta",
        }
    }

    fn y_label(self) -> &'static str {
        match self {
            Metric::Val | Metric::Train => "cross-entropy (nats)",
            Metric::GradNorm => "global gradient norm (before clipping)",
            Metric::Lr => "learning rate",
            Metric::TokPerS => "tokens per second",
            Metric::Beta => "β, mean over the step's tokens",
        }
    }
}

/// `ddl plot`'s x axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    Step,
    Tokens,
    Seconds,
}

impl XAxis {
    pub fn parse(s: &str) -> Result<XAxis, String> {
        match s {
            "step" | "steps" => Ok(XAxis::Step),
            "tokens" => Ok(XAxis::Tokens),
            "seconds" | "time" => Ok(XAxis::Seconds),
            _ => Err(format!("unknown x axis '{s}' (expected step, tokens or seconds)")),
        }
    }

    fn label(self) -> &'static str {
        match self {
            XAxis::Step => "optimizer step",
            XAxis::Tokens => "tokens trained",
            XAxis::Seconds => "seconds of training",
        }
    }
}

/// `ddl plot`'s settings.
pub struct PlotOptions {
    pub runs: Vec<PathBuf>,
    pub out: PathBuf,
    pub metric: Metric,
    pub x: XAxis,
    /// A trailing mean over this many logged steps (1: none); not for the validation curve.
    pub smooth: usize,
}

/// Where one run ended, as `ddl plot` tabulates it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunEnd {
    pub run: PathBuf,
    /// The last logged step, and the tokens it amounts to (from `config.toml`).
    pub step: usize,
    pub tokens: Option<u64>,
    /// The mean training loss over the last tenth of the logged steps.
    pub train_loss: Option<f64>,
    /// The validation curve's last and lowest points: (step, loss).
    pub val_last: Option<(usize, f64)>,
    pub val_best: Option<(usize, f64)>,
    /// The last evaluation over the whole validation split: (step, loss, tokens).
    pub val_whole: Option<(usize, f64, usize)>,
    /// Points this run gave the plot.
    pub points: usize,
}

/// A title `ddl plot` gives, as its PNG text chunk stores it.
fn stored_title(metric: Metric, runs: usize) -> String {
    format!("{}, {runs} run{}", metric.title(), if runs == 1 { "" } else { "s" })
}

/// Whether `title` (a PNG's stored title) is one `ddl plot` gave: it may replace that file.
fn is_plot_title(title: &str) -> bool {
    Metric::ALL.iter().any(|m| {
        title.strip_prefix(m.title()).and_then(|r| r.strip_prefix(", ")).is_some_and(|r| {
            let n = r.trim_end_matches(" runs").trim_end_matches(" run");
            n != r && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
        })
    })
}

/// Draws `o.metric` of every run of `o.runs` into `o.out` and returns where each ended. The
/// output is checked before anything is read (a PNG `ddl plot` drew before may be replaced, no
/// other file), and written whole or not at all.
pub fn plot_runs(o: &PlotOptions) -> Result<Vec<RunEnd>, TrainError> {
    plot::check_png_out("--out", &o.out, is_plot_title, "`ddl plot`").map_err(TrainError::Settings)?;
    let bad = |run: &Path, why: String| TrainError::Settings(format!("{}: {why}", run.display()));
    for (i, r) in o.runs.iter().enumerate() {
        if o.runs[..i].iter().any(|q| same_file(q, r)) {
            return Err(bad(r, "given twice; give each run once".into()));
        }
    }
    let mut series = Vec::new();
    let mut ends = Vec::new();
    for run in &o.runs {
        if !run.is_dir() {
            return Err(bad(run, "not a folder: give run folders (`ddl train --out`)".into()));
        }
        let m =
            Metrics::read(run).map_err(|e| bad(run, format!("cannot read metrics.jsonl: {e}")))?.ok_or_else(|| {
                bad(
                    run,
                    "holds no metrics.jsonl: not a run folder of `ddl train` (a kept checkpoint has none: give its \
                     run), or a run stopped before its first step"
                        .into(),
                )
            })?;
        let per_step = tokens_per_step(run);
        let x_of = |step: f64| -> Result<f64, TrainError> {
            match o.x {
                XAxis::Step => Ok(step),
                XAxis::Tokens => per_step.map(|t| step * t as f64).ok_or_else(|| {
                    bad(run, "its config.toml does not read, so its tokens per step are unknown: plot by step".into())
                }),
                XAxis::Seconds => Ok(m.elapsed_at(step).unwrap_or(0.0)),
            }
        };
        let label = run.display().to_string();
        let rows = |f: &dyn Fn(&TrainRow) -> Option<f64>| -> Result<Vec<(f64, f64)>, TrainError> {
            let pts: Vec<(f64, f64)> = m.train.iter().filter_map(|r| Some((r.step, f(r)?))).collect();
            smooth(&pts, o.smooth).into_iter().map(|(s, y)| Ok((x_of(s)?, y))).collect()
        };
        let mut own: Vec<plot::Series> = match o.metric {
            Metric::Val => {
                let pts = m.val.iter().map(|&(s, y)| Ok((x_of(s)?, y))).collect::<Result<_, TrainError>>()?;
                vec![plot::Series { name: label.clone(), points: pts }]
            }
            Metric::Train => vec![plot::Series { name: label.clone(), points: rows(&|r| r.loss)? }],
            Metric::GradNorm => vec![plot::Series { name: label.clone(), points: rows(&|r| r.grad_norm)? }],
            Metric::Lr => vec![plot::Series { name: label.clone(), points: rows(&|r| r.lr)? }],
            Metric::TokPerS => vec![plot::Series { name: label.clone(), points: rows(&|r| r.tok_per_s)? }],
            Metric::Beta if o.runs.len() == 1 => {
                // One run: every write's own curve.
                let writes = m.train.iter().filter_map(|r| r.beta_mean.as_ref().map(Vec::len)).max().unwrap_or(0);
                (0..writes)
                    .map(|j| {
                        let name = format!("block {} {}", j / 2, if j % 2 == 0 { "attention" } else { "MLP" });
                        rows(&|r| r.beta_mean.as_ref()?.get(j).copied()).map(|points| plot::Series { name, points })
                    })
                    .collect::<Result<_, _>>()?
            }
            Metric::Beta => {
                let mean = |r: &TrainRow| {
                    let b = r.beta_mean.as_ref().filter(|b| !b.is_empty())?;
                    Some(b.iter().sum::<f64>() / b.len() as f64)
                };
                vec![plot::Series { name: format!("{label} (mean of its writes)"), points: rows(&mean)? }]
            }
        };
        own.retain(|s| !s.points.is_empty());
        let points = own.iter().map(|s| s.points.len()).sum();
        if points == 0 {
            let why = match o.metric {
                Metric::Val => "no evaluation in its metrics.jsonl (train.eval_every = 0 and no final evaluation yet)",
                Metric::Beta => "no β in its metrics.jsonl (the baseline has no delta writes)",
                _ => "no logged step with this metric in its metrics.jsonl",
            };
            return Err(bad(
                run,
                format!("--metric {}: {why}; choose another metric or leave the run out", o.metric.name()),
            ));
        }
        series.extend(own);
        let step = m.train.last().map_or(0.0, |r| r.step).max(m.val.last().map_or(0.0, |v| v.0)) as usize;
        ends.push(RunEnd {
            run: run.clone(),
            step,
            tokens: per_step.map(|t| (t * step) as u64),
            train_loss: m.final_train_loss(),
            val_last: m.val.last().map(|&(s, l)| (s as usize, l)),
            val_best: m.best_val().map(|(s, l)| (s as usize, l)),
            val_whole: m.full,
            points,
        });
    }
    // (ASCII, as PNG text stores it: the file is recognised as this command's by its title.)
    let title = stored_title(o.metric, o.runs.len());
    let x_label = if o.smooth > 1 && o.metric != Metric::Val {
        format!("{} (each point the mean of the last {} logged steps)", o.x.label(), o.smooth)
    } else {
        o.x.label().to_string()
    };
    plot::line_plot(&o.out, &title, &x_label, o.metric.y_label(), &series)
        .map_err(|e| TrainError::Settings(format!("--out {}: the plot was not written: {e}", o.out.display())))?;
    Ok(ends)
}

/// A trailing mean over `w` points (the first ones over those there are).
fn smooth(pts: &[(f64, f64)], w: usize) -> Vec<(f64, f64)> {
    if w <= 1 {
        return pts.to_vec();
    }
    let mut sum = 0.0;
    pts.iter()
        .enumerate()
        .map(|(i, &(x, y))| {
            sum += y;
            if i >= w {
                sum -= pts[i - w].1;
            }
            (x, sum / (i + 1).min(w) as f64)
        })
        .collect()
}

/// Tokens one optimizer step of the run trains on (its `config.toml`).
fn tokens_per_step(run: &Path) -> Option<usize> {
    let c: RunConfig = toml::from_str(&std::fs::read_to_string(run.join("config.toml")).ok()?).ok()?;
    Some(c.train.batch_size * c.train.seq_len * c.train.grad_accum)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The table of where the runs ended, as text.
pub fn ends_text(ends: &[RunEnd]) -> String {
    let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
    let at = |x: Option<(usize, f64)>| x.map_or("-".to_string(), |(s, l)| format!("{l:.4} @{s}"));
    let mut rows = vec![[
        "run".to_string(),
        "step".into(),
        "tokens".into(),
        "train (last 10 %)".into(),
        "val (last)".into(),
        "val (best)".into(),
        "val (whole split)".into(),
    ]];
    for e in ends {
        rows.push([
            e.run.display().to_string(),
            e.step.to_string(),
            e.tokens.map_or("-".into(), |t| t.to_string()),
            f(e.train_loss),
            at(e.val_last),
            at(e.val_best),
            e.val_whole.map_or("-".into(), |(s, l, _)| format!("{l:.4} @{s}")),
        ]);
    }
    let widths: Vec<usize> = (0..7).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in &rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, s)| if c == 0 { format!("{s:<w$}", w = widths[c]) } else { format!("{s:>w$}", w = widths[c]) })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoothing_is_a_trailing_mean_and_titles_are_recognised() {
        let pts = [(1.0, 1.0), (2.0, 3.0), (3.0, 5.0), (4.0, 7.0)];
        assert_eq!(smooth(&pts, 2), vec![(1.0, 1.0), (2.0, 2.0), (3.0, 4.0), (4.0, 6.0)]);
        assert_eq!(smooth(&pts, 1), pts.to_vec());
        for m in Metric::ALL {
            assert!(is_plot_title(&stored_title(m, 1)) && is_plot_title(&stored_title(m, 12)), "{m:?}");
            assert_eq!(Metric::parse(m.name()), Ok(m));
        }
        for other in ["loss", "validation loss per variant", "validation loss, runs", "validation loss, 3 runs!"] {
            assert!(!is_plot_title(other), "{other}");
        }
        assert!(Metric::parse("loss").unwrap_err().contains("val, train"));
    }
}
