//! Whether a folder holds this spec's experiment: a grid keeps the spec it was started with (it
//! may grow by variants, seeds and ablations), its trained runs must have the spec's settings and
//! its data, and files of the names it writes that no experiment made are not replaced.

use std::path::{Path, PathBuf};

use super::{ExperimentError, ExperimentSpec, run_name};
use crate::model::Variant;
use crate::train::{RunConfig, checkpoint};

/// Whether any run folder under `runs` has trained (its metrics or checkpoint).
fn any_run_trained(runs: &Path) -> bool {
    std::fs::read_dir(runs).is_ok_and(|d| {
        d.flatten().any(|e| ["metrics.jsonl", checkpoint::MODEL_FILE].iter().any(|f| e.path().join(f).exists()))
    })
}

/// Whether `dir` is an experiment's `runs/` (beside its `experiment.toml`).
fn is_runs_of_experiment(dir: &Path) -> bool {
    dir.file_name().is_some_and(|n| n == "runs") && dir.parent().is_some_and(|p| p.join("experiment.toml").is_file())
}

/// `path` with its deepest existing folder resolved (`..`, links), the rest as given.
fn resolved(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    for a in abs.ancestors() {
        if let Ok(real) = a.canonicalize() {
            return real.join(abs.strip_prefix(a).unwrap_or(Path::new("")));
        }
    }
    abs
}

/// Whether `spec` may run into `out`: a directory keeps the spec it was started with; the grid
/// may grow (more variants or seeds: the finished runs still count), but the settings every run
/// shares may not change under runs that trained.
pub fn check_out(spec: &ExperimentSpec, out: &Path) -> Result<(), ExperimentError> {
    // A file at --out or above it: the grid's folder cannot be made (said before any device
    // opens, and by --dry-run).
    if let Some(file) = crate::train::data::file_in_the_way(out) {
        return Err(ExperimentError::Report(format!(
            "--out '{}': '{}' is a file, so the experiment's folder cannot be made there; give a new folder's path (or \
             an experiment's, to resume it)",
            out.display(),
            file.display()
        )));
    }
    // An experiment's runs/ or a folder in it: every folder there is one of that grid's runs (the
    // new grid's runs/ and report were written into it, and `ddl plot` of that experiment then
    // left out a run "runs").
    if let Some(grid) = resolved(out).ancestors().find(|a| is_runs_of_experiment(a)).map(Path::to_path_buf) {
        // (Named as given where it can be: `out`'s own words, not the resolved path.)
        let grid = out.ancestors().find(|a| is_runs_of_experiment(a)).map_or(grid, Path::to_path_buf);
        let experiment = grid.parent().unwrap_or(&grid);
        return Err(ExperimentError::Report(format!(
            "--out '{}' is inside the runs/ folder of the experiment in '{}', where every folder is one of its runs: \
             give '{}' to continue that experiment, or a folder outside it for a new one",
            out.display(),
            experiment.display(),
            experiment.display()
        )));
    }
    // A `ddl train` run's folder: the grid's files (runs/, report, plots) would mix with its.
    let trained = crate::train::trained_files(out);
    if !trained.is_empty() {
        return Err(ExperimentError::Report(format!(
            "--out '{}' holds a training run ({}), not an experiment: give the grid a folder of its own (a new one, or \
             one an experiment made)",
            out.display(),
            trained.join(", ")
        )));
    }
    let spec_path = out.join("experiment.toml");
    // (Runs restored into a folder without the spec, scripts/experiment-runs.sh, are an
    // experiment's.)
    let has_runs = std::fs::read_dir(out.join("runs")).is_ok_and(|mut d| d.next().is_some());
    if !spec_path.exists() && !has_runs {
        // A folder no experiment made: files of the names the grid writes are someone else's.
        let theirs: Vec<&str> = [
            "report.md",
            "val_loss.png",
            "beta_regimes.png",
            "comparisons.png",
            super::ablation::PLOT,
            super::speed::SPEED_FILE,
        ]
        .into_iter()
        .filter(|f| out.join(f).exists())
        .collect();
        if !theirs.is_empty() {
            return Err(ExperimentError::Report(format!(
                "--out '{}' holds {} but no experiment.toml and no runs/, so no experiment made it: the grid writes files of these \
                 names and would replace them. Give the grid a folder of its own (a new one, or one an experiment \
                 made), or move those files elsewhere",
                out.display(),
                theirs.join(", ")
            )));
        }
    }
    if let Ok(old) = std::fs::read_to_string(&spec_path) {
        let same = |a: &ExperimentSpec, b: &ExperimentSpec| same_runs(a, b);
        let old = match toml::from_str::<ExperimentSpec>(&old) {
            Ok(o) => Some(o),
            // (An edit gone wrong: said with the parser's words, not as a changed spec.)
            Err(e) if any_run_trained(&out.join("runs")) => {
                return Err(ExperimentError::Spec {
                    path: spec_path.clone(),
                    msg: format!(
                        "the spec this experiment was started with does not read ({}); it is the grid's own copy: \
                         write the spec its runs were trained with back into it (`cp SPEC {}` if yours is \
                         unchanged) to go on",
                        crate::train::config::plain_serde_message(&e.to_string()).trim(),
                        spec_path.display()
                    ),
                });
            }
            Err(_) => None,
        };
        match old {
            Some(o) if same(&o, spec) => {}
            // Before any run has trained, the spec may still change (a first attempt that failed).
            _ if !any_run_trained(&out.join("runs")) => {}
            // The folder's copy reads as other settings, but the runs it trained are the spec's,
            // run by run (a spec that now gives a value that used to follow from another, as the
            // MLP widths from d since session 81): going on pairs like with like, and the copy
            // is replaced by the spec.
            Some(o)
                if (o.steps, o.beta_batches) == (spec.steps, spec.beta_batches)
                    && trained_spec_runs(spec, out) > 0
                    && runs_trained_as_specified(spec, out).is_ok() =>
            {
                eprintln!(
                    "note: {}'s settings differ from the spec's ({}), but every run trained there has the spec's \
                     settings: going on with the spec",
                    spec_path.display(),
                    changed_settings(&o, spec)
                );
            }
            o => {
                let changed = o.map(|o| changed_settings(&o, spec)).unwrap_or_else(|| "unreadable".into());
                return Err(ExperimentError::Spec {
                    path: spec_path,
                    msg: format!(
                        "this directory holds an experiment whose runs share other settings than this spec's \
                         ({changed}); use a new --out directory (or delete this one) to run the changed spec. \
                         Adding variants, seeds or ablations is fine"
                    ),
                });
            }
        }
    }
    runs_trained_as_specified(spec, out)
}

/// How many of the spec's runs have trained in `out` (their metrics or checkpoint).
fn trained_spec_runs(spec: &ExperimentSpec, out: &Path) -> usize {
    spec.run_dirs(out)
        .into_iter()
        .filter(|d| ["metrics.jsonl", checkpoint::MODEL_FILE].iter().any(|f| d.join(f).exists()))
        .count()
}

/// Refuses a grid whose run folders hold runs trained with other settings than the spec gives
/// them (a run restored from another grid, `scripts/experiment-runs.sh restore`, or copied in):
/// a finished one would be reported as the spec's, paired with runs it does not match. The data
/// each trained on is checked apart ([`same_data_as_trained`]), so the corpus and tokenizer
/// paths are not compared here.
fn runs_trained_as_specified(spec: &ExperimentSpec, out: &Path) -> Result<(), ExperimentError> {
    let Ok(variants) = spec.variant_list() else { return Ok(()) };
    for v in variants {
        for seed in spec.seeds_of(v) {
            let name = run_name(v, seed);
            let dir = out.join("runs").join(&name);
            let (Some(Ok(saved)), Ok(want)) = (RunConfig::read_file(&dir), spec.run_config(v, seed)) else {
                continue;
            };
            let diffs =
                want.resume_differences(&saved).map_err(|msg| ExperimentError::Run { run: name.clone(), msg })?;
            let diffs: Vec<String> = diffs
                .into_iter()
                .filter(|(k, ..)| !matches!(k.as_str(), "corpus" | "tokenizer" | "data"))
                .map(|(k, have, want)| format!("{k} = {have} there, {want} in the spec"))
                .collect();
            if !diffs.is_empty() {
                return Err(ExperimentError::Run {
                    run: name,
                    msg: format!(
                        "{} was trained with other settings than the spec gives it ({}): its result would be \
                         reported and paired as the spec's. Move that folder out of the grid (the run then trains \
                         again), or give the spec its own --out",
                        dir.display(),
                        diffs.join("; ")
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Whether two specs train the same runs: every variant either lists resolves to the same run
/// config under both (a setting written out at its default, `lr = 0.003`, changes nothing), with
/// the same length and β-count batches. Names, descriptions, variants and seeds may differ.
fn same_runs(a: &ExperimentSpec, b: &ExperimentSpec) -> bool {
    if (a.steps, a.beta_batches) != (b.steps, b.beta_batches) {
        return false;
    }
    let (Ok(va), Ok(vb)) = (a.variant_list(), b.variant_list()) else { return false };
    let mut variants: Vec<Variant> = Vec::new();
    for v in va.into_iter().chain(vb) {
        if !variants.contains(&v) {
            variants.push(v);
        }
    }
    if variants.is_empty() {
        variants.push(Variant::Baseline);
    }
    variants.iter().all(|&v| match (a.run_config(v, 1), b.run_config(v, 1)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    })
}

/// Refuses to start new runs of a grid whose trained runs saw other data than the spec's corpus
/// gives now (it was edited since): a comparison would pair runs trained on different texts. Each
/// run's `data.json` keeps what it trained on (the tokens' digest and split sizes).
/// `write_cache`: a set the corpus needs is made in the cache (a dry run makes it aside and
/// removes it).
pub fn same_data_as_trained(
    spec: &ExperimentSpec,
    out: &Path,
    variants: &[Variant],
    write_cache: bool,
) -> Result<(), ExperimentError> {
    let runs = out.join("runs");
    let mut recorded: Vec<PathBuf> = std::fs::read_dir(&runs)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.join("data.json").is_file()).collect())
        .unwrap_or_default();
    recorded.sort();
    let (Some(&v), Some(seed)) = (variants.first(), spec.all_seeds().first().copied()) else { return Ok(()) };
    if recorded.is_empty() {
        return Ok(());
    }
    let run_cfg = spec.run_config(v, seed).map_err(|msg| ExperimentError::Run { run: run_name(v, seed), msg })?;
    let spec_path = out.join("experiment.toml");
    let data_error =
        |e: crate::train::TrainError| ExperimentError::Spec { path: spec_path.clone(), msg: e.to_string() };
    let now = crate::train::data::corpus_record(&run_cfg, write_cache).map_err(data_error)?;
    for dir in recorded {
        crate::train::data::check_data_record(
            &dir,
            &now,
            "be paired with new runs trained",
            &format!(
                "The grid's runs must train on the same text: restore the corpus ({}) they trained on, or run the \
                 spec in a new --out directory",
                run_cfg.corpus
            ),
        )
        .map_err(data_error)?;
    }
    Ok(())
}

/// The shared settings (top-level keys and `[model]` / `[train]` entries) that differ between
/// two specs, as `key: old → new`.
fn changed_settings(old: &ExperimentSpec, new: &ExperimentSpec) -> String {
    let table = |s: &ExperimentSpec| toml::Table::try_from(s).unwrap_or_default();
    let (a, b) = (table(old), table(new));
    let skip = ["name", "description", "variants", "seeds", "extra_seeds", "ablate", "ablate_batches"];
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).filter(|k| !skip.contains(&k.as_str())).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    let show = |v: Option<&toml::Value>| v.map_or("(unset)".to_string(), |v| v.to_string());
    for k in keys {
        match (a.get(k), b.get(k)) {
            (Some(toml::Value::Table(x)), Some(toml::Value::Table(y))) => {
                let mut inner: Vec<&String> = x.keys().chain(y.keys()).collect();
                inner.sort();
                inner.dedup();
                for k2 in inner {
                    if x.get(k2) != y.get(k2) {
                        out.push(format!("{k}.{k2}: {} → {}", show(x.get(k2)), show(y.get(k2))));
                    }
                }
            }
            (x, y) if x != y => out.push(format!("{k}: {} → {}", show(x), show(y))),
            _ => {}
        }
    }
    out.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::test_support::spec;

    /// A folder's runs are compared by what they train, not by how the spec is written: a setting
    /// written out at the value it had is no change (it was refused as one), another value is.
    #[test]
    fn a_setting_written_at_its_value_is_no_change() {
        let plain = spec("").unwrap();
        let lr = plain.run_config(Variant::Ddl, 1).unwrap().train.lr;
        let d_model = plain.run_config(Variant::Ddl, 1).unwrap().model.d_model;
        let written = spec(&format!("[train]\nlr = {lr:?}\n[model]\nd_model = {d_model}\n")).unwrap();
        assert!(same_runs(&plain, &written) && same_runs(&written, &plain));
        let more = spec("extra_seeds = { ddl = [3] }\n").unwrap();
        assert!(same_runs(&plain, &more), "more seeds are no change");
        let changed = spec(&format!("[train]\nlr = {:?}\n", lr * 2.0)).unwrap();
        assert!(!same_runs(&plain, &changed) && !same_runs(&written, &changed));
        assert!(changed_settings(&plain, &changed).contains("train.lr: (unset) → "));
        let longer = spec("").map(|s| ExperimentSpec { steps: 21, ..s }).unwrap();
        assert!(!same_runs(&plain, &longer));
        let counted = ExperimentSpec { beta_batches: 5, ..spec("").unwrap() };
        assert!(!same_runs(&plain, &counted));
        // A [model] setting only the ddl variants read still counts once a ddl variant is listed.
        let d_v = spec("[model]\nd_v = 2\n").unwrap();
        assert!(!same_runs(&plain, &d_v));
    }
}
