//! Several training runs side by side: an experiment folder (`ddl experiment --out DIR`, whose
//! runs are `DIR/runs/*`) or any run folders. Each run's validation curve comes from its
//! `metrics.jsonl` (or, for a run that kept only its `result.json`, as the committed experiments
//! do, from that file's curve); its variant, seed and final validation loss from `result.json`
//! when the experiment wrote one (else its `config.toml` or the folder's name `VARIANT-seedN`,
//! and the whole-split evaluation or the curve's last point).

use std::path::{Path, PathBuf};

use crate::metrics::Metrics;

/// One run's curve.
#[derive(Debug, Clone)]
pub struct RunCurve {
    pub name: String,
    /// The run folder.
    pub dir: PathBuf,
    pub variant: String,
    pub seed: Option<u64>,
    /// (step, validation loss) as logged during training.
    pub val: Vec<(f64, f64)>,
    /// The final validation loss (`result.json`'s, over the whole split when the run made one;
    /// else the curve's last point).
    pub final_val: Option<f64>,
    /// Tokens the final validation loss covers (`result.json`).
    pub val_tokens: Option<u64>,
    /// The final evaluation's top-1 accuracy (`result.json`'s, else the run's whole-split
    /// evaluation's; runs before it was logged: none).
    pub final_accuracy: Option<f64>,
    /// Where the final validation loss comes from.
    pub final_from: FinalFrom,
    /// The steps the run trained (`result.json`, else the last step its metrics logged).
    pub steps: Option<u64>,
    /// The model's size from its `config.toml` ("d 128, 4 blocks"), where it has one.
    pub size: Option<String>,
    /// Steps skipped for a loss or gradient that was not finite (`train.skip_nonfinite`): no
    /// update at those steps (`result.json`'s `skipped_steps`, else the steps its metrics log
    /// as skipped).
    pub skipped_steps: u64,
}

/// Where a run's final validation loss comes from: losses of different sources are measured
/// over different tokens and do not compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalFrom {
    /// `result.json` (`ddl experiment`), over its `val_tokens`.
    Result,
    /// The run's final evaluation over its whole validation split (`metrics.jsonl`).
    WholeSplit,
    /// The last periodic evaluation (a subset of the split): the run has no final one.
    Periodic,
    /// No validation loss at all.
    None,
}

impl FinalFrom {
    pub fn describe(self) -> &'static str {
        match self {
            FinalFrom::Result => "result.json",
            FinalFrom::WholeSplit => "the run's whole validation split (metrics.jsonl)",
            FinalFrom::Periodic => "the last periodic evaluation (a subset; the run made no final one)",
            FinalFrom::None => "none",
        }
    }
}

/// Whether `p` is a run folder: a `metrics.jsonl`, or an experiment run's `result.json`.
pub fn is_run(p: &Path) -> bool {
    p.join("metrics.jsonl").is_file() || p.join("result.json").is_file()
}

/// What to do with an experiment folder `dir` given as a checkpoint: open it with
/// `--experiment`, or give one of its runs that keeps a model (named), or, where none does (runs
/// saved without their checkpoints, as `scripts/experiment-runs.sh save` keeps them), that none
/// opens as a checkpoint.
pub fn experiment_as_checkpoint(dir: &Path) -> String {
    let runs = if dir.join("runs").is_dir() { dir.join("runs") } else { dir.to_path_buf() };
    let mut with_model: Vec<PathBuf> = std::fs::read_dir(&runs)
        .map(|rd| {
            rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.join("model.safetensors").is_file()).collect()
        })
        .unwrap_or_default();
    with_model.sort();
    match with_model.first() {
        Some(run) => format!(
            "an experiment folder: open it with --experiment {}, or give one of its runs as the checkpoint (e.g. \
             --checkpoint {})",
            dir.display(),
            run.display()
        ),
        None => format!(
            "an experiment folder: open it with --experiment {}; none of its runs keeps a model.safetensors (runs kept \
             without their checkpoints), so none opens as a checkpoint",
            dir.display()
        ),
    }
}

/// `key`'s value under `[table]` of a run's `config.toml` (a string's without its quotes): the
/// two settings the view needs, read without a TOML parser (the browser build has none).
fn setting(config: &str, table: &str, key: &str) -> Option<String> {
    let mut current = String::new();
    for line in config.lines().map(str::trim) {
        if let Some(t) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = t.trim().to_string();
        } else if current == table
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == key
        {
            return Some(v.trim().trim_matches('"').to_string());
        }
    }
    None
}

/// Per-variant statistics of the final validation loss.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantSummary {
    pub variant: String,
    pub runs: usize,
    pub mean: f64,
    /// Sample standard deviation over the runs (0 for one run).
    pub sd: f64,
    pub min: f64,
    pub max: f64,
    /// The final top-1 accuracies of the runs that have one: (runs, mean, sd; 0 for one run).
    pub accuracy: Option<(usize, f64, f64)>,
}

/// The runs of an experiment.
#[derive(Debug, Clone, Default)]
pub struct Experiment {
    pub dir: PathBuf,
    pub runs: Vec<RunCurve>,
    /// Run folders that could not be read, with why.
    pub skipped: Vec<String>,
    /// The folders opened (each as [`Experiment::open`] took it): what [`Experiment::reload`]
    /// reads again.
    pub sources: Vec<PathBuf>,
    /// A live process trained there when the folders were last read (the view says so).
    pub following: bool,
}

/// What the Experiment view opens, for the errors of a path that is not one.
const EXPERIMENT_REMEDY: &str =
    "give an experiment folder (the --out folder of `ddl experiment`), a folder of run folders or a run's folder";

/// `dir` is a folder, as the Experiment view opens folders (`ddl-viz --experiment` checks this
/// before its window opens; [`Experiment::open`] too): else what to give.
pub fn check_experiment_path(dir: &Path) -> Result<(), String> {
    if !dir.is_dir() {
        let what = if dir.exists() { "is a file, not a folder" } else { "does not exist" };
        return Err(format!("the experiment folder {} {what}; {EXPERIMENT_REMEDY}", dir.display()));
    }
    Ok(())
}

impl Experiment {
    /// Opens an experiment folder (with `runs/`), a folder of run folders, or one run folder.
    pub fn open(dir: &Path) -> Result<Experiment, String> {
        check_experiment_path(dir)?;
        let base = if dir.join("runs").is_dir() { dir.join("runs") } else { dir.to_path_buf() };
        let mut ignored = Vec::new();
        let mut folders: Vec<PathBuf> = if is_run(&base) {
            vec![base.clone()]
        } else {
            let mut v = Vec::new();
            let entries = std::fs::read_dir(&base).map_err(|e| format!("cannot list {}: {e}", base.display()))?;
            for p in entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
                if is_run(&p) {
                    v.push(p);
                } else if p.join("runs").is_dir() {
                    // An experiment folder among the folders given: its runs.
                    let runs = std::fs::read_dir(p.join("runs")).map(|r| r.flatten().map(|e| e.path()).collect());
                    v.extend(runs.unwrap_or_else(|_| Vec::new()).into_iter().filter(|r| is_run(r)));
                } else {
                    let name = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
                    ignored.push(format!("{name}: no metrics.jsonl or result.json (not a training run)"));
                }
            }
            v
        };
        folders.sort();
        if folders.is_empty() {
            return Err(format!(
                "{} holds no training runs (folders with metrics.jsonl or result.json, or an experiment's runs/ \
                 folder); {EXPERIMENT_REMEDY}",
                dir.display()
            ));
        }
        let mut e = Experiment { dir: dir.to_path_buf(), sources: vec![dir.to_path_buf()], ..Default::default() };
        for f in folders {
            e.add_run(&f);
        }
        if !e.runs.is_empty() {
            e.skipped.extend(ignored);
        }
        if e.runs.is_empty() {
            return Err(format!("no run of {} could be read: {}", dir.display(), e.skipped.join("; ")));
        }
        Ok(e)
    }

    /// Opens every folder of `dirs` ([`Experiment::open`]) as one experiment: a folder that holds
    /// no run is skipped with why (named in [`Experiment::skipped`]), a run in two folders is
    /// shown once; an error only when no folder holds a run.
    pub fn open_all(dirs: &[PathBuf]) -> Result<Experiment, String> {
        let mut all: Option<Experiment> = None;
        let mut errors = Vec::new();
        for d in dirs {
            match Experiment::open(d) {
                Ok(e) => match &mut all {
                    Some(a) => a.merge(e),
                    None => all = Some(e),
                },
                Err(e) => errors.push(e),
            }
        }
        match all {
            Some(mut a) => {
                a.skipped.extend(errors);
                Ok(a)
            }
            None => Err(errors.join("; ")),
        }
    }

    /// Adds `other`'s runs (those not shown already: a run given twice, or inside two folders
    /// given, is shown once) and its skipped folders.
    pub fn merge(&mut self, other: Experiment) {
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let seen: Vec<PathBuf> = self.runs.iter().map(|r| canonical(&r.dir)).collect();
        self.runs.extend(other.runs.into_iter().filter(|r| !seen.contains(&canonical(&r.dir))));
        self.skipped.extend(other.skipped);
        for s in other.sources {
            if !self.sources.contains(&s) {
                self.sources.push(s);
            }
        }
    }

    /// Whether a live process trains in one of the folders opened or one of their runs (`ddl
    /// experiment` holds its folder's lock while the grid runs; `ddl train` its run's): the view
    /// then reads them again as they grow ([`Experiment::reload`]).
    pub fn live(&self) -> bool {
        self.sources.iter().chain(self.runs.iter().map(|r| &r.dir)).any(|d| crate::metrics::training_now(d))
    }

    /// The folders opened, read again: new runs, new points, new results (`None` when none of
    /// them reads now: the view keeps what it shows).
    pub fn reload(&self) -> Option<Experiment> {
        Experiment::open_all(&self.sources).ok()
    }

    /// Adds one run folder (a message in `skipped` when it cannot be read).
    pub fn add_run(&mut self, dir: &Path) {
        let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let result: Option<serde_json::Value> =
            std::fs::read_to_string(dir.join("result.json")).ok().and_then(|s| serde_json::from_str(&s).ok());
        let m = match Metrics::open(dir) {
            Ok(m) => m,
            // A run that kept only its result (a committed experiment): the curve it holds.
            Err(_) if !dir.join("metrics.jsonl").exists() && result.is_some() => {
                let curve = result
                    .as_ref()
                    .and_then(|r| r["val_curve"].as_array())
                    .map(|a| a.iter().filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?))).collect::<Vec<_>>());
                Metrics::from_curve(dir, curve.unwrap_or_default())
            }
            Err(e) => {
                self.skipped.push(format!("{name}: {e}"));
                return;
            }
        };
        // Without a result: the run's config.toml, else the folder's name `VARIANT-seedN`.
        let config = std::fs::read_to_string(dir.join("config.toml")).unwrap_or_default();
        let (guess_variant, guess_seed) = match name.rsplit_once("-seed") {
            Some((v, s)) => (v.to_string(), s.parse().ok()),
            None => (name.clone(), None),
        };
        let r = result.as_ref();
        // (`ddl experiment` writes a diverged run's final loss as null: NaN, the run's final loss
        // all the same — not a reason to take its last periodic evaluation instead.)
        let result_final = r.and_then(|r| r.get("final_val_loss")).map(|v| v.as_f64().unwrap_or(f64::NAN));
        let final_accuracy = match result_final {
            Some(_) => r.and_then(|r| r["final_val_accuracy"].as_f64()),
            None => m.full_accuracy,
        };
        let (final_val, final_from) = match (result_final, m.full, m.val.last()) {
            (Some(f), _, _) => (Some(f), FinalFrom::Result),
            (None, Some(full), _) => (Some(full.1), FinalFrom::WholeSplit),
            (None, None, Some(last)) => (Some(last.1), FinalFrom::Periodic),
            (None, None, None) => (None, FinalFrom::None),
        };
        let skipped_steps = r
            .and_then(|r| r["skipped_steps"].as_u64())
            .unwrap_or_else(|| m.train.iter().filter(|t| t.skipped_nonfinite).count() as u64);
        self.runs.push(RunCurve {
            skipped_steps,
            variant: r
                .and_then(|r| r["variant"].as_str())
                .map(String::from)
                .or_else(|| setting(&config, "model", "variant"))
                .unwrap_or(guess_variant),
            seed: r
                .and_then(|r| r["seed"].as_u64())
                .or_else(|| setting(&config, "train", "seed").and_then(|s| s.parse().ok()))
                .or(guess_seed),
            final_val,
            final_from,
            steps: r.and_then(|r| r["steps"].as_u64()).or_else(|| m.train.last().map(|t| t.step as u64)),
            size: setting(&config, "model", "d_model")
                .zip(setting(&config, "model", "n_layers"))
                .map(|(d, l)| format!("d {d}, {l} blocks")),
            val_tokens: r.and_then(|r| r["val_tokens"].as_u64()),
            final_accuracy,
            val: m.val,
            dir: dir.to_path_buf(),
            name,
        });
    }

    /// The variants in first-seen order.
    pub fn variants(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for r in &self.runs {
            if !v.contains(&r.variant) {
                v.push(r.variant.clone());
            }
        }
        v
    }

    /// Mean and band (min, max) of a variant's curves at the steps every one of its runs logged.
    pub fn band(&self, variant: &str) -> Vec<(f64, f64, f64, f64)> {
        let runs: Vec<&RunCurve> = self.runs.iter().filter(|r| r.variant == variant).collect();
        let Some(first) = runs.first() else { return Vec::new() };
        first
            .val
            .iter()
            .filter_map(|&(step, _)| {
                let at: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| r.val.iter().find(|v| v.0 == step).map(|v| v.1))
                    .filter(|l| l.is_finite())
                    .collect();
                (at.len() == runs.len()).then(|| {
                    let mean = at.iter().sum::<f64>() / at.len() as f64;
                    let lo = at.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = at.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    (step, mean, lo, hi)
                })
            })
            .collect()
    }

    /// Why the final losses of the table do not compare, or `None` where they do: measured
    /// from different sources or over different numbers of tokens, or runs of one variant
    /// trained for different numbers of steps.
    pub fn mixed(&self) -> Option<String> {
        let mut why = Vec::new();
        let mut sources: Vec<FinalFrom> = Vec::new();
        for r in self.runs.iter().filter(|r| r.final_val.is_some()) {
            if !sources.contains(&r.final_from) {
                sources.push(r.final_from);
            }
        }
        if sources.len() > 1 {
            let parts: Vec<String> = sources
                .iter()
                .map(|s| {
                    let n = self.runs.iter().filter(|r| r.final_val.is_some() && r.final_from == *s).count();
                    format!("{n} from {}", s.describe())
                })
                .collect();
            why.push(format!("final losses measured differently: {}", parts.join(", ")));
        }
        let tokens: Vec<u64> = self.runs.iter().filter_map(|r| r.val_tokens).collect();
        if let (Some(lo), Some(hi)) = (tokens.iter().min(), tokens.iter().max())
            && lo != hi
        {
            why.push(format!("over {lo} to {hi} validation tokens"));
        }
        for v in self.variants() {
            let mut steps: Vec<u64> = self.runs.iter().filter(|r| r.variant == v).filter_map(|r| r.steps).collect();
            steps.sort_unstable();
            steps.dedup();
            if steps.len() > 1 {
                let list: Vec<String> = steps.iter().map(u64::to_string).collect();
                why.push(format!("runs of {v} trained for different numbers of steps ({})", list.join(", ")));
            }
            let mut sizes: Vec<&str> =
                self.runs.iter().filter(|r| r.variant == v).filter_map(|r| r.size.as_deref()).collect();
            sizes.sort_unstable();
            sizes.dedup();
            if sizes.len() > 1 {
                why.push(format!("runs of {v} are models of different sizes ({})", sizes.join("; ")));
            }
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// The runs that diverged: a final validation loss that is not a finite number. As in
    /// `ddl experiment`'s report, they are named and left out of the statistics.
    pub fn diverged(&self) -> Vec<&RunCurve> {
        self.runs.iter().filter(|r| r.final_val.is_some_and(|f| !f.is_finite())).collect()
    }

    /// The runs that skipped steps (`train.skip_nonfinite`): they made fewer updates than the
    /// steps they name, which the report and `ddl info` say, and so does the view.
    pub fn with_skipped_steps(&self) -> Vec<&RunCurve> {
        self.runs.iter().filter(|r| r.skipped_steps > 0).collect()
    }

    /// The final validation loss per variant (over the runs that did not diverge).
    pub fn summary(&self) -> Vec<VariantSummary> {
        self.variants()
            .into_iter()
            .filter_map(|v| {
                let x: Vec<f64> = self
                    .runs
                    .iter()
                    .filter(|r| r.variant == v)
                    .filter_map(|r| r.final_val)
                    .filter(|f| f.is_finite())
                    .collect();
                if x.is_empty() {
                    return None;
                }
                let (mean, sd) = mean_sd(&x);
                let acc: Vec<f64> = self
                    .runs
                    .iter()
                    .filter(|r| r.variant == v && r.final_val.is_some_and(f64::is_finite))
                    .filter_map(|r| r.final_accuracy)
                    .collect();
                let accuracy = (!acc.is_empty()).then(|| {
                    let (m, s) = mean_sd(&acc);
                    (acc.len(), m, s)
                });
                Some(VariantSummary {
                    accuracy,
                    variant: v,
                    runs: x.len(),
                    mean,
                    sd,
                    min: x.iter().copied().fold(f64::INFINITY, f64::min),
                    max: x.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                })
            })
            .collect()
    }
}

/// Mean and sample standard deviation (0 for one value) of a non-empty list.
fn mean_sd(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let sd = if x.len() > 1 { (x.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() } else { 0.0 };
    (mean, sd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_run(dir: &Path, name: &str, vals: &[(u32, f64)], result: Option<f64>) {
        let d = dir.join("runs").join(name);
        std::fs::create_dir_all(&d).unwrap();
        let lines: String = vals.iter().map(|(s, v)| format!("{{\"step\":{s},\"val_loss\":{v}}}\n")).collect();
        std::fs::write(d.join("metrics.jsonl"), lines).unwrap();
        if let Some(f) = result {
            let (v, s) = name.rsplit_once("-seed").unwrap();
            std::fs::write(
                d.join("result.json"),
                format!("{{\"variant\":\"{v}\",\"seed\":{s},\"final_val_loss\":{f},\"val_tokens\":1000}}"),
            )
            .unwrap();
        }
    }

    #[test]
    fn runs_group_by_variant_with_bands_and_final_statistics() {
        let dir = std::env::temp_dir().join(format!("ddl-viz-exp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write_run(&dir, "baseline-seed1", &[(50, 2.0), (100, 1.8)], Some(1.7));
        write_run(&dir, "baseline-seed2", &[(50, 2.2), (100, 1.9)], Some(1.9));
        write_run(&dir, "ddl-seed1", &[(50, 2.1), (100, 1.7)], None);
        std::fs::create_dir_all(dir.join("runs/not-a-run")).unwrap();
        let e = Experiment::open(&dir).unwrap();
        assert_eq!(e.variants(), ["baseline", "ddl"]);
        assert_eq!(e.band("baseline"), [(50.0, 2.1, 2.0, 2.2), (100.0, 1.85, 1.8, 1.9)]);
        let s = e.summary();
        assert_eq!((s[0].runs, s[0].min, s[0].max), (2, 1.7, 1.9));
        assert!((s[0].mean - 1.8).abs() < 1e-12 && (s[0].sd - 0.02f64.sqrt()).abs() < 1e-12, "{s:?}");
        // Without result.json: the name's variant and seed, the curve's last point.
        let d = e.runs.iter().find(|r| r.variant == "ddl").unwrap();
        assert_eq!((d.seed, d.final_val, d.val_tokens), (Some(1), Some(1.7), None));
        // One run folder opens as an experiment of one run; an empty folder is an error.
        assert_eq!(Experiment::open(&dir.join("runs/ddl-seed1")).unwrap().runs.len(), 1);
        assert!(Experiment::open(&dir.join("runs/not-a-run")).unwrap_err().contains("no training runs"));
        assert!(Experiment::open(&dir.join("missing")).unwrap_err().contains("does not exist"));
        // A file, and a folder without runs: each says what to give instead.
        let e = Experiment::open(&dir.join("runs/ddl-seed1/metrics.jsonl")).unwrap_err();
        assert!(e.contains("is a file, not a folder; give an experiment folder (the --out folder"), "{e}");
        let e = Experiment::open(&dir.join("runs/not-a-run")).unwrap_err();
        assert!(e.contains("runs/ folder); give an experiment folder"), "{e}");
        // A run folder named otherwise: its config.toml's variant and seed, not its name.
        write_run(&dir, "my-run", &[(50, 2.3)], None);
        std::fs::write(
            dir.join("runs/my-run/config.toml"),
            "preset = \"tiny\"\n\n[model]\nvariant = \"ddl_v1\"\nd_v = 1\n\n[train]\nlr = 0.001\nseed = 7\n",
        )
        .unwrap();
        let e = Experiment::open(&dir).unwrap();
        let mine = e.runs.iter().find(|r| r.name == "my-run").unwrap();
        assert_eq!((mine.variant.as_str(), mine.seed), ("ddl_v1", Some(7)));
        // The folder without metrics.jsonl is named as skipped; an experiment inside a folder
        // given contributes its runs.
        assert_eq!(e.skipped, ["not-a-run: no metrics.jsonl or result.json (not a training run)"]);
        // Losses of different sources are said not to compare (two from result.json, the
        // others their last periodic evaluation).
        let why = e.mixed().unwrap();
        assert!(why.contains("2 from result.json") && why.contains("2 from the last periodic"), "{why}");
        // A run that kept only its result.json (a committed experiment): its curve from there.
        let kept = dir.join("kept/baseline-seed3");
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::write(
            kept.join("result.json"),
            "{\"variant\":\"baseline\",\"seed\":3,\"steps\":100,\"final_val_loss\":1.8,\"val_tokens\":1000,\
             \"val_curve\":[[50.0,2.1],[100.0,1.85]]}",
        )
        .unwrap();
        let k = Experiment::open(&dir.join("kept")).unwrap();
        assert_eq!(k.runs.len(), 1);
        let r = &k.runs[0];
        assert_eq!(
            (r.val.clone(), r.final_val, r.final_from, r.steps),
            (vec![(50.0, 2.1), (100.0, 1.85)], Some(1.8), FinalFrom::Result, Some(100))
        );
        assert!(k.mixed().is_none());
        // A run of the same variant trained longer, or a model of another size: said so.
        let longer = dir.join("kept/baseline-seed4");
        std::fs::create_dir_all(&longer).unwrap();
        std::fs::write(
            longer.join("result.json"),
            "{\"variant\":\"baseline\",\"seed\":4,\"steps\":200,\"final_val_loss\":1.7,\"val_tokens\":1000}",
        )
        .unwrap();
        std::fs::write(longer.join("config.toml"), "[model]\nd_model = 64\nn_layers = 2\n").unwrap();
        std::fs::write(kept.join("config.toml"), "[model]\nd_model = 128\nn_layers = 4\n").unwrap();
        let why = Experiment::open(&dir.join("kept")).unwrap().mixed().unwrap();
        assert!(why.contains("different numbers of steps (100, 200)"), "{why}");
        assert!(why.contains("different sizes (d 128, 4 blocks; d 64, 2 blocks)"), "{why}");
        std::fs::remove_dir_all(&longer).unwrap();
        // Several folders: one without runs is skipped (named), not the end of the view; a run
        // in two of them is shown once.
        let all = Experiment::open_all(&[
            dir.join("kept"),
            dir.join("runs/not-a-run"),
            dir.join("kept/baseline-seed3"),
            dir.join("runs/baseline-seed1"),
        ])
        .unwrap();
        assert_eq!(all.runs.len(), 2, "{:?}", all.runs);
        assert!(
            all.skipped.iter().any(|s| s.contains("not-a-run") && s.contains("no training runs")),
            "{:?}",
            all.skipped
        );
        assert!(Experiment::open_all(&[dir.join("runs/not-a-run")]).unwrap_err().contains("no training runs"));
        let _ = std::fs::remove_dir_all(dir.join("kept"));
        let outer = dir.with_extension("outer");
        let _ = std::fs::remove_dir_all(&outer);
        std::fs::create_dir_all(&outer).unwrap();
        std::fs::rename(&dir, outer.join("exp")).unwrap();
        assert_eq!(Experiment::open(&outer).unwrap().runs.len(), 4);
        std::fs::rename(outer.join("exp"), &dir).unwrap();
        let _ = std::fs::remove_dir_all(&outer);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
