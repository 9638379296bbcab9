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
    ValAccuracy,
    Train,
    GradNorm,
    Lr,
    TokPerS,
    Beta,
}

impl Metric {
    pub const ALL: [Metric; 7] =
        [Metric::Val, Metric::ValAccuracy, Metric::Train, Metric::GradNorm, Metric::Lr, Metric::TokPerS, Metric::Beta];

    pub fn parse(s: &str) -> Result<Metric, String> {
        Metric::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            format!("unknown metric '{s}' (expected one of {})", Metric::ALL.map(|m| m.name()).join(", "))
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::Val => "val",
            Metric::ValAccuracy => "val_accuracy",
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
            Metric::ValAccuracy => "validation accuracy",
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
            Metric::ValAccuracy => "share of tokens whose likeliest prediction came (top-1)",
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
    /// The experiment variant's curve it is part of (`None`: its own curve).
    pub group: Option<String>,
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

/// The suffix of the title of a plot of experiments' variants.
const GROUPED: &str = " by variant: mean over seeds, band min..max";

/// A title `ddl plot` gives, as its PNG text chunk stores it.
fn stored_title(metric: Metric, runs: usize, grouped: bool) -> String {
    format!("{}, {}{}", metric.title(), crate::plural(runs, "run"), if grouped { GROUPED } else { "" })
}

/// Whether `title` (a PNG's stored title) is one `ddl plot` gave: it may replace that file.
fn is_plot_title(title: &str) -> bool {
    let title = title.strip_suffix(GROUPED).unwrap_or(title);
    Metric::ALL.iter().any(|m| {
        title.strip_prefix(m.title()).and_then(|r| r.strip_prefix(", ")).is_some_and(|r| {
            let n = r.trim_end_matches(" runs").trim_end_matches(" run");
            n != r && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
        })
    })
}

/// Whether `dir` is an experiment's folder (`ddl experiment --out`): its runs under `runs/`, no
/// run of its own.
pub fn is_experiment(dir: &Path) -> bool {
    dir.join("runs").is_dir() && !dir.join("metrics.jsonl").exists()
}

/// Run folders under a curve's name.
pub type Groups = Vec<(String, Vec<PathBuf>)>;

/// An experiment's run folders by variant (`runs/VARIANT-seedN`), the variants in the engine's
/// order, each one's runs by seed; a folder of another name is a group of its own, after them.
pub fn experiment_groups(dir: &Path) -> std::io::Result<Groups> {
    let mut runs: Vec<(usize, String, u64, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir.join("runs"))? {
        let e = e?;
        if !e.path().is_dir() {
            continue;
        }
        let name = e.file_name().to_string_lossy().to_string();
        let parsed = name.rsplit_once("-seed").and_then(|(v, s)| {
            let v = crate::model::Variant::parse(v).ok()?;
            Some((crate::model::Variant::ALL.iter().position(|&x| x == v)?, v.name().to_string(), s.parse().ok()?))
        });
        let (order, group, seed) = parsed.unwrap_or((usize::MAX, name, 0));
        runs.push((order, group, seed, e.path()));
    }
    runs.sort();
    let mut groups: Groups = Vec::new();
    for (_, group, _, path) in runs {
        match groups.last_mut() {
            Some((g, paths)) if *g == group => paths.push(path),
            _ => groups.push((group, vec![path])),
        }
    }
    Ok(groups)
}

/// The run folders an experiment's `experiment.toml` names that do not exist yet (none where it
/// does not read).
fn unstarted_runs(dir: &Path) -> Vec<PathBuf> {
    let spec = std::fs::read_to_string(dir.join("experiment.toml"))
        .ok()
        .and_then(|t| toml::from_str::<crate::experiment::ExperimentSpec>(&t).ok());
    let Some(spec) = spec else { return Vec::new() };
    spec.run_dirs(dir).into_iter().filter(|run| !run.exists()).collect()
}

/// One run's curves keyed by step (before the x axis maps them), and where it ended.
struct RunCurves {
    series: Vec<(String, Vec<(f64, f64)>)>,
    /// The x of a step: the step, its tokens, or the run's seconds of training by then.
    x: Vec<(f64, f64)>,
    end: RunEnd,
}

/// Reads `run`'s `o.metric` (`per_write`: one curve per delta write for β). `None` when it has
/// no point of the metric (`why` says why). Lines of its `metrics.jsonl` that do not read are
/// added to `unreadable` (the file, their numbers).
fn read_run(
    run: &Path,
    o: &PlotOptions,
    per_write: bool,
    label: &str,
    unreadable: &mut Vec<(PathBuf, Vec<usize>)>,
) -> Result<Result<RunCurves, String>, TrainError> {
    let bad = |why: String| TrainError::Settings(format!("{}: {why}", run.display()));
    if !run.is_dir() {
        let what = if run.exists() { "not a folder" } else { "does not exist" };
        return Err(bad(format!(
            "{what}: give run folders (`ddl train --out`) or experiments' (`ddl experiment --out`)"
        )));
    }
    let m = Metrics::read(run).map_err(|e| bad(format!("cannot read metrics.jsonl: {e}")))?.ok_or_else(|| {
        // A folder of runs (an experiment's runs/): its runs, and the experiment's folder.
        let mut inside: Vec<String> = std::fs::read_dir(run)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().join("metrics.jsonl").is_file())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        inside.sort();
        if let Some(first) = inside.first() {
            let more = if inside.len() > 5 { format!(" and {} more", inside.len() - 5) } else { String::new() };
            let experiment = run
                .parent()
                .filter(|p| run.file_name().is_some_and(|n| n == "runs") && is_experiment(p))
                .map(|p| format!(", or the experiment's folder '{}' (one curve per variant)", p.display()))
                .unwrap_or_default();
            return bad(format!(
                "holds run folders ({}{more}), not a run: give them (e.g. '{}'){experiment}",
                inside.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
                run.join(first).display()
            ));
        }
        bad("holds no metrics.jsonl: not a run folder of `ddl train` (a kept checkpoint has none: give its run), or a \
             run stopped before its first step"
            .into())
    })?;
    if !m.bad_lines.is_empty() {
        unreadable.push((run.join("metrics.jsonl"), m.bad_lines.clone()));
    }
    let per_step = tokens_per_step(run);
    if o.x == XAxis::Tokens && per_step.is_none() {
        return Err(bad("its config.toml does not read, so its tokens per step are unknown: plot by step".into()));
    }
    let rows = |f: &dyn Fn(&TrainRow) -> Option<f64>| -> Vec<(f64, f64)> {
        let pts: Vec<(f64, f64)> = m.train.iter().filter_map(|r| Some((r.step, f(r)?))).collect();
        smooth(&pts, o.smooth)
    };
    let one = |points| vec![(label.to_string(), points)];
    let mut series: Vec<(String, Vec<(f64, f64)>)> = match o.metric {
        Metric::Val => one(m.val.clone()),
        Metric::ValAccuracy => one(m.val_accuracy.clone()),
        Metric::Train => one(rows(&|r| r.loss)),
        Metric::GradNorm => one(rows(&|r| r.grad_norm)),
        Metric::Lr => one(rows(&|r| r.lr)),
        Metric::TokPerS => one(rows(&|r| r.tok_per_s)),
        Metric::Beta if per_write => {
            // One run: every write's own curve.
            let writes = m.train.iter().filter_map(|r| r.beta_mean.as_ref().map(Vec::len)).max().unwrap_or(0);
            (0..writes)
                .map(|j| {
                    let name = format!("block {} {}", j / 2, if j % 2 == 0 { "attention" } else { "MLP" });
                    (name, rows(&|r| r.beta_mean.as_ref()?.get(j).copied()))
                })
                .collect()
        }
        Metric::Beta => {
            let mean = |r: &TrainRow| {
                let b = r.beta_mean.as_ref().filter(|b| !b.is_empty())?;
                Some(b.iter().sum::<f64>() / b.len() as f64)
            };
            vec![(format!("{label} (mean of its writes)"), rows(&mean))]
        }
    };
    series.retain(|s| !s.1.is_empty());
    let points = series.iter().map(|s| s.1.len()).sum();
    // (Points that are not finite numbers are not drawn: with none else, the picture would be
    // missing, or an earlier one left, after "wrote OUT".)
    if points > 0 && series.iter().flat_map(|s| &s.1).all(|p| !p.1.is_finite()) {
        return Ok(Err(format!(
            "each of its {} of it is not a finite number (the run diverged), so there is no curve to draw",
            crate::plural(points, "point")
        )));
    }
    if points == 0 {
        let last = m.train.last().map_or(0, |r| r.step as usize);
        let eval_every = RunConfig::read_file(run).and_then(Result::ok).map(|c| c.train.eval_every);
        // (A run training now goes on by itself: resuming it is refused while it runs.)
        let training = super::lock::refuse_if_held(run).is_err();
        let go_on = if training { "it is training now" } else { "`ddl train --resume RUN` goes on" };
        // (A finished run whose metrics.jsonl lost the final evaluation its summary.json holds: a
        // copy cut short. `--resume` makes it again.)
        let lost =
            !training && super::checkpoint::saved_step(run).is_ok_and(|step| super::final_evaluation_lost(run, step));
        let val_why = match eval_every {
            _ if lost => {
                "no evaluation in its metrics.jsonl, though its summary.json holds the final one (the file was \
                 cut short or replaced): `ddl train --resume RUN` makes it again, nothing trained"
                    .to_string()
            }
            Some(0) => format!(
                "no evaluation in its metrics.jsonl (train.eval_every = 0 and no final evaluation yet: the run has not \
                 finished; {})",
                if training { "it is training now" } else { "`ddl train --resume RUN` makes it" }
            ),
            Some(n) => format!(
                "no evaluation in its metrics.jsonl yet (it logged up to step {last}, its first evaluation is at step \
                 {n} or at its end; {go_on})"
            ),
            None => "no evaluation in its metrics.jsonl yet".to_string(),
        };
        let why = match o.metric {
            Metric::Val => val_why.as_str(),
            Metric::ValAccuracy => {
                "no evaluation with an accuracy in its metrics.jsonl (none yet, or a run logged before evaluations \
                 measured it: `ddl eval --checkpoint RUN` gives it now)"
            }
            Metric::Beta => "no β in its metrics.jsonl (the baseline has no delta writes)",
            _ => "no logged step with this metric in its metrics.jsonl",
        };
        return Ok(Err(why.to_string()));
    }
    let mut x: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.iter().map(|p| p.0)).map(|s| (s, s)).collect();
    x.sort_by(|a, b| a.0.total_cmp(&b.0));
    x.dedup_by(|a, b| a.0 == b.0);
    for (s, xv) in &mut x {
        *xv = match o.x {
            XAxis::Step => *s,
            XAxis::Tokens => *s * per_step.unwrap_or(0) as f64,
            XAxis::Seconds => m.elapsed_at(*s).unwrap_or(0.0),
        };
    }
    let step = m.train.last().map_or(0.0, |r| r.step).max(m.val.last().map_or(0.0, |v| v.0)) as usize;
    let end = RunEnd {
        run: run.to_path_buf(),
        group: None,
        step,
        tokens: per_step.map(|t| (t * step) as u64),
        train_loss: m.final_train_loss(),
        val_last: m.val.last().map(|&(s, l)| (s as usize, l)),
        val_best: m.best_val().map(|(s, l)| (s as usize, l)),
        val_whole: m.full,
        points,
    };
    Ok(Ok(RunCurves { series, x, end }))
}

impl RunCurves {
    fn x_of(&self, step: f64) -> f64 {
        self.x.binary_search_by(|p| p.0.total_cmp(&step)).map_or(step, |i| self.x[i].1)
    }
}

/// Mean, standard deviation (n − 1) and count of some values.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Spread {
    pub mean: f64,
    pub sd: f64,
    pub n: usize,
}

impl Spread {
    /// The spread of some values (`None` for none; sd 0 for one).
    pub fn of(xs: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let xs: Vec<f64> = xs.into_iter().collect();
        let n = xs.len();
        if n == 0 {
            return None;
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 { (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt() } else { 0.0 };
        Some(Spread { mean, sd, n })
    }
}

/// Where an experiment's runs of one variant ended, over its seeds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GroupEnd {
    /// The variant, after its experiment's folder when several inputs were given.
    pub name: String,
    pub experiment: PathBuf,
    /// Runs drawn (those with the metric), and the range of their last steps.
    pub runs: usize,
    pub steps: (usize, usize),
    /// The last step every run has reached: the band's curve ends there.
    pub common_step: Option<usize>,
    pub train_loss: Option<Spread>,
    pub val_last: Option<Spread>,
    pub val_best: Option<Spread>,
    pub val_whole: Option<Spread>,
}

/// What `ddl plot` found: every run's end, and every experiment variant's.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlotEnds {
    pub runs: Vec<RunEnd>,
    pub groups: Vec<GroupEnd>,
    /// Runs of experiments left out, and why (no metrics yet, no point of the metric).
    pub left_out: Vec<(PathBuf, String)>,
    /// `metrics.jsonl` files with lines that do not read as a step's record (edited, damaged),
    /// skipped: the file and the lines' numbers (a torn last line of a run writing it, or
    /// killed, is not counted).
    pub unreadable: Vec<(PathBuf, Vec<usize>)>,
}

/// Why a run of an experiment has no metrics.jsonl, as `ddl plot` leaves it out.
const KEPT_WITHOUT_METRICS: &str = "kept without its metrics.jsonl (a finished run saved as scripts/experiment-runs.sh save \
     keeps it: result.json and config.toml)";

/// Why a run folder without metrics.jsonl has no curve: a finished run kept without it (its
/// result.json is there: docs/experiments' runs), or one not started. It said "not started" of
/// the committed grids' finished runs.
fn no_metrics_reason(run: &Path) -> &'static str {
    if run.join("result.json").is_file() { KEPT_WITHOUT_METRICS } else { "no metrics.jsonl yet (not started)" }
}

/// Draws `o.metric` of every run of `o.runs` into `o.out` and returns where each ended. A run
/// folder is one curve; an experiment's folder (`ddl experiment --out`) is one curve per variant,
/// the mean over its seeds at the steps every seed has logged, with a min..max band. The output
/// is checked before anything is read (a PNG `ddl plot` drew before may be replaced, no other
/// file), and written whole or not at all.
pub fn plot_runs(o: &PlotOptions) -> Result<PlotEnds, TrainError> {
    // (An evaluation's point is a mean over its windows already; it was left as it was without
    // a word.)
    if o.smooth > 1 && matches!(o.metric, Metric::Val | Metric::ValAccuracy) {
        return Err(TrainError::Settings(format!(
            "--smooth {}: the validation curves are drawn as evaluated (each point one evaluation's mean over its \
             windows); --smooth averages logged steps: --metric train, grad_norm, lr, tok_per_s or beta",
            o.smooth
        )));
    }
    plot::check_png_out("--out", &o.out, is_plot_title, "`ddl plot`").map_err(TrainError::Settings)?;
    let bad = |run: &Path, why: String| TrainError::Settings(format!("{}: {why}", run.display()));
    // Each input: a run, or an experiment's runs by variant.
    let mut inputs: Vec<(PathBuf, Option<Groups>)> = Vec::new();
    for p in &o.runs {
        if is_experiment(p) {
            let groups = experiment_groups(p).map_err(|e| bad(p, format!("cannot list its runs/: {e}")))?;
            if groups.is_empty() {
                return Err(bad(p, "an experiment's folder whose runs/ holds no run yet: nothing to plot".into()));
            }
            inputs.push((p.clone(), Some(groups)));
        } else {
            inputs.push((p.clone(), None));
        }
    }
    let all: Vec<&PathBuf> = inputs
        .iter()
        .flat_map(|(p, g)| match g {
            None => vec![p],
            Some(g) => g.iter().flat_map(|(_, r)| r).collect(),
        })
        .collect();
    for (i, r) in all.iter().enumerate() {
        if all[..i].iter().any(|q| same_file(q, r)) {
            return Err(bad(
                r,
                "given twice (itself, or in an experiment's folder given too); give each run once".into(),
            ));
        }
    }
    let grouped = inputs.iter().any(|i| i.1.is_some());
    let per_write = o.metric == Metric::Beta && !grouped && o.runs.len() == 1;
    let several = inputs.len() > 1;
    let mut bands: Vec<plot::Band> = Vec::new();
    let mut ends = PlotEnds { runs: Vec::new(), groups: Vec::new(), left_out: Vec::new(), unreadable: Vec::new() };
    for (input, groups) in &inputs {
        let Some(groups) = groups else {
            let label = input.display().to_string();
            let c = read_run(input, o, per_write, &label, &mut ends.unreadable)?.map_err(|why| {
                bad(input, format!("--metric {}: {why}; choose another metric or leave the run out", o.metric.name()))
            })?;
            for (name, pts) in &c.series {
                bands.push(plot::Band {
                    name: name.clone(),
                    points: pts.iter().map(|&(s, y)| (c.x_of(s), y, y, y)).collect(),
                });
            }
            ends.runs.push(c.end);
            continue;
        };
        for (variant, runs) in groups {
            let name = if several { format!("{}/{variant}", input.display()) } else { variant.clone() };
            let mut curves = Vec::new();
            for run in runs {
                if !run.join("metrics.jsonl").exists() {
                    ends.left_out.push((run.clone(), no_metrics_reason(run).into()));
                    continue;
                }
                match read_run(run, o, false, &name, &mut ends.unreadable)? {
                    Ok(mut c) => {
                        c.end.group = Some(name.clone());
                        curves.push(c)
                    }
                    Err(why) => ends.left_out.push((run.clone(), why)),
                }
            }
            if curves.is_empty() {
                continue;
            }
            // The steps every run has: mean, min and max there (x: the runs' mean).
            let mut at: std::collections::BTreeMap<u64, Vec<(f64, f64)>> = Default::default();
            for c in &curves {
                for &(s, y) in &c.series[0].1 {
                    at.entry(s.to_bits()).or_default().push((c.x_of(s), y));
                }
            }
            let mut pts: Vec<(f64, f64, f64, f64, f64)> = at
                .into_iter()
                .filter(|(_, v)| v.len() == curves.len())
                .map(|(s, v)| {
                    let n = v.len() as f64;
                    let y = v.iter().map(|p| p.1);
                    (
                        f64::from_bits(s),
                        v.iter().map(|p| p.0).sum::<f64>() / n,
                        y.clone().sum::<f64>() / n,
                        y.clone().fold(f64::INFINITY, f64::min),
                        y.fold(f64::NEG_INFINITY, f64::max),
                    )
                })
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let e: Vec<&RunEnd> = curves.iter().map(|c| &c.end).collect();
            let steps = e.iter().map(|e| e.step);
            ends.groups.push(GroupEnd {
                name: name.clone(),
                experiment: input.clone(),
                runs: curves.len(),
                steps: (steps.clone().min().unwrap_or(0), steps.max().unwrap_or(0)),
                common_step: pts.last().map(|p| p.0 as usize),
                train_loss: Spread::of(e.iter().filter_map(|e| e.train_loss)),
                val_last: Spread::of(e.iter().filter_map(|e| e.val_last.map(|v| v.1))),
                val_best: Spread::of(e.iter().filter_map(|e| e.val_best.map(|v| v.1))),
                val_whole: Spread::of(e.iter().filter_map(|e| e.val_whole.map(|v| v.1))),
            });
            let seeds = if curves.len() == 1 { "1 run".to_string() } else { format!("{} runs", curves.len()) };
            bands.push(plot::Band {
                name: format!("{name} ({seeds})"),
                points: pts.into_iter().map(|(_, x, m, lo, hi)| (x, m, lo, hi)).collect(),
            });
            ends.runs.extend(curves.into_iter().map(|c| c.end));
        }
        // The spec's runs with no folder yet (a grid under way, or grown): a variant none of whose
        // runs had started had no curve and no word.
        for run in unstarted_runs(input) {
            ends.left_out.push((run, "not started (no folder yet)".into()));
        }
    }
    if bands.is_empty() {
        let why = ends.left_out.first().map_or(String::new(), |(r, w)| format!(" ({}: {w})", r.display()));
        // (Runs kept without their metrics have no curve of any metric: "choose another metric"
        // could not help.)
        let remedy = if !ends.left_out.is_empty() && ends.left_out.iter().all(|(_, w)| w == KEPT_WITHOUT_METRICS) {
            "no metric can be drawn from these runs; the experiment's report has its curves (val_loss.png)"
        } else {
            "choose another metric"
        };
        return Err(TrainError::Settings(format!(
            "--metric {}: no run of the experiments given has a point of it{why}; {remedy}",
            o.metric.name()
        )));
    }
    // (ASCII, as PNG text stores it: the file is recognised as this command's by its title.)
    let title = stored_title(o.metric, ends.runs.len(), grouped);
    let x_label = if o.smooth > 1 && !matches!(o.metric, Metric::Val | Metric::ValAccuracy) {
        format!("{} (each point the mean of the last {} logged steps)", o.x.label(), o.smooth)
    } else {
        o.x.label().to_string()
    };
    let drawn = if grouped {
        plot::band_plot(&o.out, &title, &x_label, o.metric.y_label(), &bands)
    } else {
        let series: Vec<plot::Series> = bands
            .into_iter()
            .map(|b| plot::Series { name: b.name, points: b.points.into_iter().map(|p| (p.0, p.1)).collect() })
            .collect();
        plot::line_plot(&o.out, &title, &x_label, o.metric.y_label(), &series)
    };
    drawn.map_err(|e| TrainError::Settings(format!("--out {}: the plot was not written: {e}", o.out.display())))?;
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
    let c = RunConfig::read_file(run)?.ok()?;
    Some(c.train.batch_size * c.train.seq_len * c.train.grad_accum)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Lays out rows of cells: the first column left-aligned, the others right-aligned.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
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

/// The tables of where the runs ended, as text: the runs drawn on their own, then the
/// experiments' variants (mean ± standard deviation over their runs; each run's numbers are in
/// `--json`), then the runs left out.
pub fn ends_text(ends: &PlotEnds) -> String {
    let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
    let at = |x: Option<(usize, f64)>| x.map_or("-".to_string(), |(s, l)| format!("{l:.4} @{s}"));
    let head = |first: &str, second: &str| -> Vec<String> {
        [first, second, "tokens", "train (last 10 %)", "val (last)", "val (best)", "val (whole split)"]
            .map(String::from)
            .to_vec()
    };
    let mut out = String::new();
    let own: Vec<&RunEnd> = ends.runs.iter().filter(|e| e.group.is_none()).collect();
    if !own.is_empty() {
        let mut rows = vec![head("run", "step")];
        for e in own {
            rows.push(vec![
                e.run.display().to_string(),
                e.step.to_string(),
                e.tokens.map_or("-".into(), |t| t.to_string()),
                f(e.train_loss),
                at(e.val_last),
                at(e.val_best),
                e.val_whole.map_or("-".into(), |(s, l, _)| format!("{l:.4} @{s}")),
            ]);
        }
        out.push_str(&table(&rows));
    }
    if !ends.groups.is_empty() {
        if !out.is_empty() {
            out.push('\n');
        }
        let pm = |x: Option<Spread>| {
            x.map_or("-".to_string(), |s| {
                if s.n > 1 { format!("{:.4} ± {:.4}", s.mean, s.sd) } else { format!("{:.4}", s.mean) }
            })
        };
        let mut rows = vec![head("variant (mean ± sd over its runs)", "runs")];
        rows[0][2] = "steps".into();
        for g in &ends.groups {
            let (lo, hi) = g.steps;
            rows.push(vec![
                g.name.clone(),
                g.runs.to_string(),
                if lo == hi { lo.to_string() } else { format!("{lo}..{hi}") },
                pm(g.train_loss),
                pm(g.val_last),
                pm(g.val_best),
                pm(g.val_whole),
            ]);
        }
        out.push_str(&table(&rows));
        let cut: Vec<String> = ends
            .groups
            .iter()
            .filter(|g| g.steps.0 != g.steps.1)
            .map(|g| format!("{} at step {}", g.name, g.common_step.map_or("-".into(), |s| s.to_string())))
            .collect();
        if !cut.is_empty() {
            out.push_str(&format!(
                "(runs of different lengths: a curve ends where its shortest run does: {})\n",
                cut.join(", ")
            ));
        }
    }
    for (run, why) in &ends.left_out {
        out.push_str(&format!("left out: {}: {why}\n", run.display()));
    }
    for (file, lines) in &ends.unreadable {
        let shown: Vec<String> = lines.iter().take(5).map(|n| n.to_string()).collect();
        out.push_str(&format!(
            "note: {}: skipped {} that {} not read as a step's record (line {}{}): edited or damaged; the \
             curves and the table lack them\n",
            file.display(),
            crate::plural(lines.len(), "line"),
            if lines.len() == 1 { "does" } else { "do" },
            shown.join(", "),
            if lines.len() > 5 { ", …" } else { "" }
        ));
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
            for g in [false, true] {
                assert!(is_plot_title(&stored_title(m, 1, g)) && is_plot_title(&stored_title(m, 12, g)), "{m:?}");
            }
            assert_eq!(Metric::parse(m.name()), Ok(m));
        }
        for other in ["loss", "validation loss per variant", "validation loss, runs", "validation loss, 3 runs!"] {
            assert!(!is_plot_title(other), "{other}");
        }
        assert!(Metric::parse("loss").unwrap_err().contains("val, val_accuracy, train"));
    }

    /// A folder of runs given as one (an experiment's `runs/`) names its runs and, for an
    /// experiment's, the experiment's folder: it was told it is "not a run folder of `ddl train`
    /// … or a run stopped before its first step".
    #[test]
    fn a_folder_of_runs_given_as_a_run_names_them() {
        let dir = crate::testing::scratch_dir("plot-runs-folder");
        for name in ["baseline-seed1", "ddl-seed1"] {
            let run = dir.join("exp/runs").join(name);
            std::fs::create_dir_all(&run).unwrap();
            std::fs::write(run.join("metrics.jsonl"), "{\"step\":1,\"loss\":4.0}\n").unwrap();
        }
        let runs = dir.join("exp/runs");
        let o = PlotOptions {
            runs: vec![runs.clone()],
            out: dir.join("p.png"),
            metric: Metric::Train,
            x: XAxis::Step,
            smooth: 1,
        };
        let e = plot_runs(&o).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("holds run folders (baseline-seed1, ddl-seed1)"), "{e}");
        assert!(e.contains(&format!("the experiment's folder '{}'", dir.join("exp").display())), "{e}");
        assert!(!e.contains("stopped before its first step"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A run given that does not exist says so: it was called "not a folder", as a file given is.
    #[test]
    fn a_run_that_does_not_exist_is_not_called_a_file() {
        let dir = crate::testing::scratch_dir("plot-missing");
        std::fs::write(dir.join("notes.txt"), "a file").unwrap();
        let o = |run: PathBuf| PlotOptions {
            runs: vec![run],
            out: dir.join("p.png"),
            metric: Metric::Train,
            x: XAxis::Step,
            smooth: 1,
        };
        let e = plot_runs(&o(dir.join("runs/a"))).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("runs/a: does not exist: give run folders"), "{e}");
        let e = plot_runs(&o(dir.join("notes.txt"))).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("notes.txt: not a folder: give run folders"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A run whose points of the metric are none of them finite (it diverged) is refused, or left
    /// out of its experiment's curve, with that reason: `ddl plot` said "wrote OUT" and wrote
    /// nothing (the drawing skips points that are not finite, and had none left).
    #[test]
    fn a_run_without_a_finite_point_is_said_not_drawn_in_silence() {
        let dir = crate::testing::scratch_dir("plot-diverged");
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(
            run.join("metrics.jsonl"),
            "{\"step\":1,\"loss\":4.0}\n{\"step\":2,\"val_loss\":null,\"val_tokens\":10,\"val_full\":false}\n\
             {\"step\":2,\"val_loss\":null,\"val_tokens\":99,\"val_full\":true,\"val_subset_loss\":null}\n",
        )
        .unwrap();
        let out = dir.join("val.png");
        let o =
            |runs: Vec<PathBuf>| PlotOptions { runs, out: out.clone(), metric: Metric::Val, x: XAxis::Step, smooth: 1 };
        let e = plot_runs(&o(vec![run.clone()])).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("--metric val") && e.contains("not a finite number") && e.contains("diverged"), "{e}");
        assert!(!out.exists());
        // Beside a run with a curve: that one is drawn, and this one named.
        let good = dir.join("good");
        std::fs::create_dir_all(&good).unwrap();
        std::fs::write(
            good.join("metrics.jsonl"),
            "{\"step\":2,\"val_loss\":3.0,\"val_tokens\":10,\"val_full\":false}\n",
        )
        .unwrap();
        let e = plot_runs(&o(vec![good.clone(), run.clone()])).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("run: --metric val") && e.contains("leave the run out"), "{e}");
        plot_runs(&o(vec![good])).unwrap();
        assert!(out.is_file());
        std::fs::remove_dir_all(&dir).ok();
    }

    /// An experiment under way: the spec's runs with no folder yet are said (a variant none of
    /// whose runs had started had no curve and no word, so the plot looked like the whole grid).
    #[test]
    fn an_experiments_runs_not_started_are_said() {
        let dir = crate::testing::scratch_dir("plot-unstarted");
        let exp = dir.join("exp");
        let run = exp.join("runs/baseline-seed1");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(
            exp.join("experiment.toml"),
            "preset = \"tiny\"\nvariants = [\"baseline\", \"ddl\"]\nseeds = [1, 2]\nsteps = 3\n",
        )
        .unwrap();
        std::fs::write(run.join("metrics.jsonl"), "{\"step\":1,\"loss\":4.0}\n").unwrap();
        let o = PlotOptions {
            runs: vec![exp.clone()],
            out: dir.join("p.png"),
            metric: Metric::Train,
            x: XAxis::Step,
            smooth: 1,
        };
        let ends = plot_runs(&o).unwrap();
        let left: Vec<String> =
            ends.left_out.iter().map(|(r, _)| r.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(left, ["baseline-seed2", "ddl-seed1", "ddl-seed2"]);
        let t = ends_text(&ends);
        assert!(
            t.contains(&format!("left out: {}: not started (no folder yet)", exp.join("runs/ddl-seed1").display())),
            "{t}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
