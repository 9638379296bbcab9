//! `ddl info --checkpoint EXPERIMENT`: what an experiment's folder holds, from its files without a
//! device: its spec, every run of the grid and how far it is (finished with its losses, at a step,
//! or not started), each variant's mean over its finished runs, runs the spec does not name, and
//! its report.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{ExperimentError, ExperimentSpec, grid, run_name};
use crate::train::checkpoint;

/// One run of an experiment's folder.
#[derive(Debug, Clone, Serialize)]
pub struct RunStatus {
    pub name: String,
    /// `finished`, `finished, to ablate`, `resumes at step N`, `new` (these two followed by
    /// ` (its result.json …)` where one is there that the grid will not use), `checkpoint does
    /// not read (…)`, `training now (process P on HOST)`, or (a folder the spec does not name)
    /// `not in the spec`.
    pub state: String,
    /// The step its checkpoint holds, where it has one.
    pub step: Option<usize>,
    /// A finished run's losses (`result.json`): the final validation loss and the training loss
    /// over its last tenth of steps.
    pub val_loss: Option<f64>,
    pub train_loss: Option<f64>,
    /// Its final validation top-1 accuracy (results made before it was logged: none).
    pub val_accuracy: Option<f64>,
    /// A finished run's steps skipped for a loss or gradient that was not finite
    /// (`skip_nonfinite`; `result.json`'s `skipped_steps`).
    pub skipped_steps: usize,
    /// A finished run's steps (`result.json`'s `steps`, skipped ones counted).
    pub trained_steps: Option<usize>,
}

/// One variant's finished runs: the mean and standard deviation (n − 1) of their final
/// validation losses.
#[derive(Debug, Clone, Serialize)]
pub struct VariantSummary {
    pub variant: String,
    pub runs: usize,
    pub finished: usize,
    /// Finished runs whose final validation loss is not finite (left out of the mean).
    pub diverged: usize,
    pub val_mean: Option<f64>,
    pub val_sd: Option<f64>,
    /// The same of the final top-1 accuracies, over the finished runs that logged one.
    pub accuracy_mean: Option<f64>,
    pub accuracy_sd: Option<f64>,
}

/// What an experiment's folder holds.
#[derive(Debug, Clone, Serialize)]
pub struct ExperimentInfo {
    pub path: PathBuf,
    /// The spec's name, description, preset and steps (`None`: the folder has no readable
    /// `experiment.toml`; its runs are listed as found).
    pub name: Option<String>,
    pub description: Option<String>,
    pub preset: Option<String>,
    pub steps: Option<usize>,
    /// How the spec gives the runs' length where not in steps ("epochs = 0.2, 768 a step"), for
    /// the text.
    #[serde(skip)]
    pub length_given: Option<String>,
    /// Why the spec could not be read, when it is there.
    pub spec_problem: Option<String>,
    pub runs: Vec<RunStatus>,
    pub variants: Vec<VariantSummary>,
    pub report: Option<PathBuf>,
    /// The comparisons the report makes of the spec's variants (its family: the baseline with
    /// each other variant, the k-Map/v-Map pairs); `None` without a readable spec.
    pub comparisons: Option<usize>,
    /// The parts of each write the spec's `ablate` removes (`write`, `erase`, `v`), and the runs
    /// whose result holds those ablations.
    pub ablate: Vec<String>,
    pub ablated: usize,
}

/// Describes the experiment in `dir` (`ddl experiment --out`).
pub fn describe(dir: &Path) -> Result<ExperimentInfo, ExperimentError> {
    let spec_path = dir.join("experiment.toml");
    let (spec, spec_problem) = match spec_path.exists() {
        false => (None, None),
        // (Read, not checked as a new grid's spec is: its corpus may have moved since.)
        true => match std::fs::read_to_string(&spec_path).map_err(|e| e.to_string()).and_then(|t| {
            let s: ExperimentSpec = toml::from_str(&t).map_err(|e| e.to_string())?;
            s.variant_list().map(|_| s)
        }) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e)),
        },
    };
    let runs_dir = dir.join("runs");
    let step_of = |d: &Path| d.join(checkpoint::MODEL_FILE).exists().then(|| checkpoint::saved_step(d).ok()).flatten();
    let mut runs = Vec::new();
    let mut variants = Vec::new();
    let mut named = std::collections::BTreeSet::new();
    let (mut comparisons, mut ablated) = (None, 0);
    if let Some(s) = &spec {
        let list = s.variant_list().map_err(|msg| ExperimentError::Spec { path: spec_path.clone(), msg })?;
        comparisons = Some(super::report::comparison_family(&list).len());
        for &v in &list {
            let (mut vals, mut accs, mut finished, mut diverged) = (Vec::new(), Vec::new(), 0, 0);
            let seeds = s.seeds_of(v);
            for &seed in &seeds {
                let name = run_name(v, seed);
                let d = runs_dir.join(&name);
                let result = grid::result_of(&d, s.steps);
                // (A run that diverged is listed with its NaN, not averaged.)
                finished += result.is_some() as usize;
                diverged += result.as_ref().is_some_and(|r| r.diverged()) as usize;
                ablated += result.as_ref().is_some_and(|r| r.ablations.is_some()) as usize;
                if let Some(r) = result.as_ref().filter(|r| !r.diverged()) {
                    vals.push(r.final_val_loss);
                    accs.extend(r.final_val_accuracy);
                }
                runs.push(RunStatus {
                    state: grid::run_state(s, dir, v, seed),
                    step: step_of(&d),
                    val_loss: result.as_ref().map(|r| r.final_val_loss),
                    train_loss: result.as_ref().map(|r| r.final_train_loss),
                    val_accuracy: result.as_ref().and_then(|r| r.final_val_accuracy),
                    skipped_steps: result.as_ref().map_or(0, |r| r.skipped_steps),
                    trained_steps: result.as_ref().map(|r| r.steps),
                    name: name.clone(),
                });
                named.insert(name);
            }
            let spread = crate::train::curves::Spread::of(vals);
            let acc = crate::train::curves::Spread::of(accs);
            variants.push(VariantSummary {
                variant: v.name().to_string(),
                runs: seeds.len(),
                finished,
                diverged,
                val_mean: spread.map(|s| s.mean),
                val_sd: spread.filter(|s| s.n > 1).map(|s| s.sd),
                accuracy_mean: acc.map(|s| s.mean),
                accuracy_sd: acc.filter(|s| s.n > 1).map(|s| s.sd),
            });
        }
    }
    // Run folders the spec does not name (or every one, without a spec).
    let mut others: Vec<PathBuf> = std::fs::read_dir(&runs_dir)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    others.sort();
    for d in others {
        let name = d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if named.contains(&name) {
            continue;
        }
        let result: Option<super::RunResult> =
            std::fs::read_to_string(d.join("result.json")).ok().and_then(|t| serde_json::from_str(&t).ok());
        let step = step_of(&d);
        let state = match (&spec, &result, step) {
            (Some(_), _, _) => "not in the spec".to_string(),
            (None, Some(r), _) => format!("finished ({} steps)", r.steps),
            (None, None, Some(s)) => format!("at step {s}"),
            (None, None, None) => "no checkpoint".to_string(),
        };
        runs.push(RunStatus {
            name,
            state,
            step,
            val_loss: result.as_ref().map(|r| r.final_val_loss),
            train_loss: result.as_ref().map(|r| r.final_train_loss),
            val_accuracy: result.as_ref().and_then(|r| r.final_val_accuracy),
            skipped_steps: result.as_ref().map_or(0, |r| r.skipped_steps),
            trained_steps: result.as_ref().map(|r| r.steps),
        });
    }
    let report = Some(dir.join("report.md")).filter(|p| p.is_file());
    Ok(ExperimentInfo {
        path: dir.to_path_buf(),
        name: spec.as_ref().map(|s| s.name.clone()),
        description: spec.as_ref().map(|s| s.description.clone()),
        preset: spec.as_ref().map(|s| s.preset.clone()),
        steps: spec.as_ref().map(|s| s.steps),
        length_given: spec.as_ref().and_then(|s| s.length_given()),
        spec_problem,
        runs,
        variants,
        report,
        comparisons,
        ablate: spec.as_ref().map(|s| s.ablate.clone()).unwrap_or_default(),
        ablated,
    })
}

impl ExperimentInfo {
    /// The description as lines of text.
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        let p = self.path.display();
        let finished = self.runs.iter().filter(|r| r.state.starts_with("finished")).count();
        match (&self.name, self.steps, &self.preset) {
            (Some(name), Some(steps), Some(preset)) => {
                let title = if name.is_empty() { String::new() } else { format!(" \"{name}\"") };
                out.push(format!(
                    "{p}: the experiment{title}, preset {preset}, {} a run{}; {finished} of {} finished",
                    crate::plural(steps, "step"),
                    self.length_given.as_ref().map_or(String::new(), |g| format!(" ({g})")),
                    crate::plural(self.runs.iter().filter(|r| r.state != "not in the spec").count(), "run")
                ));
                if let Some(d) = self.description.as_ref().filter(|d| !d.trim().is_empty()) {
                    out.push(format!("  {}", d.trim()));
                }
            }
            _ => out.push(format!(
                "{p}: an experiment's folder without a readable experiment.toml{}; its runs as found:",
                self.spec_problem.as_ref().map(|e| format!(" ({e})")).unwrap_or_default()
            )),
        }
        let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
        let w = self.runs.iter().map(|r| r.name.chars().count()).max().unwrap_or(3).max(3);
        let sw = self.runs.iter().map(|r| r.state.chars().count()).max().unwrap_or(5).max(5);
        // (The accuracy column where some run logged it.)
        let acc = self.runs.iter().any(|r| r.val_accuracy.is_some());
        let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.2} %", 100.0 * v));
        let head = format!("  {:<w$}  {:<sw$}  {:>10}  {:>10}", "run", "state", "val loss", "train loss");
        out.push(if acc { format!("{head}  {:>9}", "val acc") } else { head });
        for r in &self.runs {
            let row = format!("  {:<w$}  {:<sw$}  {:>10}  {:>10}", r.name, r.state, f(r.val_loss), f(r.train_loss));
            out.push(if acc { format!("{row}  {:>9}", pct(r.val_accuracy)) } else { row });
        }
        // (The report names them too; nothing here said a finished run had made fewer updates.)
        let skipped: Vec<String> = self
            .runs
            .iter()
            .filter(|r| r.skipped_steps > 0)
            .map(|r| match r.trained_steps {
                Some(n) => format!("{} ({} of {n})", r.name, r.skipped_steps),
                None => format!("{} ({})", r.name, r.skipped_steps),
            })
            .collect();
        if !skipped.is_empty() {
            out.push(format!("steps skipped as not finite (skip_nonfinite: no update there): {}", skipped.join(", ")));
        }
        if !self.variants.is_empty() {
            out.push("final validation loss per variant (its finished runs: mean ± sd):".to_string());
            for v in &self.variants {
                let value = match (v.val_mean, v.val_sd) {
                    (Some(m), Some(s)) => format!("{m:.4} ± {s:.4}"),
                    (Some(m), None) => format!("{m:.4}"),
                    _ => "-".into(),
                };
                let accuracy = match (v.accuracy_mean, v.accuracy_sd) {
                    (Some(m), Some(s)) => format!("; top-1 accuracy {:.2} ± {:.2} %", 100.0 * m, 100.0 * s),
                    (Some(m), None) => format!("; top-1 accuracy {:.2} %", 100.0 * m),
                    _ => String::new(),
                };
                let diverged = match v.diverged {
                    0 => String::new(),
                    n => format!(", {n} diverged (val loss not finite; not in the mean)"),
                };
                out.push(format!(
                    "  {:<12} {value}{accuracy}  ({} of {} finished{diverged})",
                    v.variant,
                    v.finished,
                    crate::plural(v.runs, "run")
                ));
            }
        }
        // (It said "its comparisons with their intervals and tests" of a grid that has none.)
        let ablations = if self.ablate.is_empty() {
            String::new()
        } else {
            let to_ablate = self.runs.iter().filter(|r| r.state == "finished, to ablate").count();
            let more = if to_ablate > 0 { format!(", {to_ablate} to ablate") } else { String::new() };
            format!("; ablations ({}): {} done{more}", self.ablate.join(", "), crate::plural(self.ablated, "run"))
        };
        let what = match self.comparisons {
            Some(0) => "each variant's mean; no comparison: the report compares the baseline with each other variant \
                        and k-Map with v-Map, and this grid holds no such pair"
                .to_string(),
            Some(1) => "1 comparison with its interval and test".to_string(),
            Some(n) => format!("{n} comparisons with their intervals and tests"),
            None => "as it was written".to_string(),
        };
        match &self.report {
            Some(r) => out.push(format!("report: {} ({what}{ablations})", r.display())),
            None => out.push("no report yet: `ddl experiment` writes report.md when its runs finish".into()),
        }
        if let Some(r) = self.runs.iter().find(|r| r.state.starts_with("training now")) {
            out.push(format!("{} is {}: the experiment is running", r.name, r.state));
        } else if self.steps.is_some()
            // (The spec's runs not done: a folder it does not name is none of them, and a run to
            // ablate is one.)
            && self.runs.iter().any(|r| r.state != "finished" && r.state != "not in the spec")
        {
            out.push(format!(
                "continue it: ddl experiment --spec {} --out {p}",
                self.path.join("experiment.toml").display()
            ));
        }
        // (Runs kept as scripts/experiment-runs.sh saves them have no metrics.jsonl: `ddl plot`
        // has nothing to draw, and was advised all the same.)
        if self.runs.iter().any(|r| self.path.join("runs").join(&r.name).join("metrics.jsonl").is_file()) {
            out.push(format!("curves: ddl plot {p} --out curves.png (each variant's mean over its seeds)"));
        } else if self.runs.iter().any(|r| r.state == "finished") {
            out.push(
                "curves: the report's val_loss.png (its runs were kept without metrics.jsonl: `ddl plot` has none to draw)"
                    .into(),
            );
        }
        out.join("\n") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(states: &[&str]) -> ExperimentInfo {
        ExperimentInfo {
            path: PathBuf::from("out"),
            name: Some("x".into()),
            description: None,
            preset: Some("tiny".into()),
            steps: Some(4),
            length_given: None,
            spec_problem: None,
            runs: states
                .iter()
                .enumerate()
                .map(|(i, s)| RunStatus {
                    name: format!("ddl-seed{i}"),
                    state: s.to_string(),
                    step: None,
                    val_loss: None,
                    train_loss: None,
                    val_accuracy: None,
                    skipped_steps: 0,
                    trained_steps: None,
                })
                .collect(),
            variants: Vec::new(),
            report: None,
            comparisons: Some(1),
            ablate: Vec::new(),
            ablated: 0,
        }
    }

    /// The report line says what the report holds: its comparisons (a grid without a pair to
    /// compare was told "its comparisons with their intervals and tests"), and the ablations
    /// done and to do (not said before).
    #[test]
    fn the_report_line_says_what_the_report_holds() {
        let mut i = info(&["finished", "finished"]);
        i.report = Some(PathBuf::from("out/report.md"));
        assert!(i.text().contains("report: out/report.md (1 comparison with its interval and test)"), "{}", i.text());
        i.comparisons = Some(0);
        assert!(i.text().contains("(each variant's mean; no comparison: the report compares"), "{}", i.text());
        let mut i = info(&["finished", "finished, to ablate"]);
        i.report = Some(PathBuf::from("out/report.md"));
        (i.comparisons, i.ablate, i.ablated) = (Some(3), vec!["write".into(), "erase".into()], 1);
        assert!(
            i.text().contains(
                "(3 comparisons with their intervals and tests; ablations (write, erase): 1 run done, 1 to ablate)"
            ),
            "{}",
            i.text()
        );
    }

    /// The command to go on is given while a run of the spec is not done: not for a folder of
    /// the spec's runs all finished beside one the spec does not name (it was), and for a run
    /// finished but still to ablate (it was not: "finished, to ablate" counted as done).
    #[test]
    fn the_continue_hint_follows_the_specs_runs() {
        let hint = |states: &[&str]| info(states).text().contains("continue it: ddl experiment");
        assert!(!hint(&["finished", "finished"]));
        assert!(!hint(&["finished", "not in the spec"]));
        assert!(hint(&["finished", "finished, to ablate"]));
        assert!(hint(&["finished", "new"]));
        assert!(hint(&["finished", "resumes at step 2"]));
        let t = info(&["finished", "not in the spec", "new"]).text();
        assert!(t.contains("1 of 2 runs finished"), "{t}");
        // One run: "1 of 1 run finished" (it said "1 of 1 runs").
        let t = info(&["finished"]).text();
        assert!(t.contains("1 of 1 run finished"), "{t}");
    }

    /// Finished runs with steps skipped for a value that was not finite are named with how many
    /// (nothing said so), and none is said where none was skipped.
    #[test]
    fn runs_with_skipped_steps_are_named() {
        let mut i = info(&["finished", "finished"]);
        assert!(!i.text().contains("skipped"), "{}", i.text());
        i.runs[1].skipped_steps = 3;
        let t = i.text();
        assert!(t.contains("steps skipped as not finite (skip_nonfinite: no update there): ddl-seed1 (3)\n"), "{t}");
        // Of how many, where result.json says (as the report and the app do).
        i.runs[1].trained_steps = Some(20);
        let t = i.text();
        assert!(t.contains("no update there): ddl-seed1 (3 of 20)\n"), "{t}");
    }
}
