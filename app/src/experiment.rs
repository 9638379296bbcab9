//! Several training runs side by side: an experiment folder (`ddl experiment --out DIR`, whose
//! runs are `DIR/runs/*`) or any run folders. Each run's validation curve comes from its
//! `metrics.jsonl`; its variant, seed and final validation loss from `result.json` when the
//! experiment wrote one (else the folder's name `VARIANT-seedN` and the curve's last point).

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
}

/// The runs of an experiment.
#[derive(Debug, Clone, Default)]
pub struct Experiment {
    pub dir: PathBuf,
    pub runs: Vec<RunCurve>,
    /// Run folders that could not be read, with why.
    pub skipped: Vec<String>,
}

impl Experiment {
    /// Opens an experiment folder (with `runs/`), a folder of run folders, or one run folder.
    pub fn open(dir: &Path) -> Result<Experiment, String> {
        if !dir.is_dir() {
            let what = if dir.exists() { "is a file, not a folder" } else { "does not exist" };
            return Err(format!("the experiment folder {} {what}", dir.display()));
        }
        let base = if dir.join("runs").is_dir() { dir.join("runs") } else { dir.to_path_buf() };
        let mut ignored = Vec::new();
        let mut folders: Vec<PathBuf> = if base.join("metrics.jsonl").is_file() {
            vec![base.clone()]
        } else {
            let mut v = Vec::new();
            let entries = std::fs::read_dir(&base).map_err(|e| format!("cannot list {}: {e}", base.display()))?;
            for p in entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
                if p.join("metrics.jsonl").is_file() {
                    v.push(p);
                } else if p.join("runs").is_dir() {
                    // An experiment folder among the folders given: its runs.
                    let runs = std::fs::read_dir(p.join("runs")).map(|r| r.flatten().map(|e| e.path()).collect());
                    v.extend(
                        runs.unwrap_or_else(|_| Vec::new()).into_iter().filter(|r| r.join("metrics.jsonl").is_file()),
                    );
                } else {
                    let name = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
                    ignored.push(format!("{name}: no metrics.jsonl (not a training run)"));
                }
            }
            v
        };
        folders.sort();
        if folders.is_empty() {
            return Err(format!(
                "{} holds no training runs (folders with metrics.jsonl, or an experiment's runs/ folder)",
                dir.display()
            ));
        }
        let mut e = Experiment { dir: dir.to_path_buf(), ..Default::default() };
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

    /// Adds one run folder (a message in `skipped` when it cannot be read).
    pub fn add_run(&mut self, dir: &Path) {
        let name = dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let m = match Metrics::open(dir) {
            Ok(m) => m,
            Err(e) => {
                self.skipped.push(format!("{name}: {e}"));
                return;
            }
        };
        let result: Option<serde_json::Value> =
            std::fs::read_to_string(dir.join("result.json")).ok().and_then(|s| serde_json::from_str(&s).ok());
        // Without a result: the run's config.toml, else the folder's name `VARIANT-seedN`.
        let config = std::fs::read_to_string(dir.join("config.toml")).unwrap_or_default();
        let (guess_variant, guess_seed) = match name.rsplit_once("-seed") {
            Some((v, s)) => (v.to_string(), s.parse().ok()),
            None => (name.clone(), None),
        };
        let r = result.as_ref();
        self.runs.push(RunCurve {
            variant: r
                .and_then(|r| r["variant"].as_str())
                .map(String::from)
                .or_else(|| setting(&config, "model", "variant"))
                .unwrap_or(guess_variant),
            seed: r
                .and_then(|r| r["seed"].as_u64())
                .or_else(|| setting(&config, "train", "seed").and_then(|s| s.parse().ok()))
                .or(guess_seed),
            final_val: r
                .and_then(|r| r["final_val_loss"].as_f64())
                .or_else(|| m.full.map(|f| f.1))
                .or_else(|| m.val.last().map(|v| v.1)),
            val_tokens: r.and_then(|r| r["val_tokens"].as_u64()),
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
                let at: Vec<f64> =
                    runs.iter().filter_map(|r| r.val.iter().find(|v| v.0 == step).map(|v| v.1)).collect();
                (at.len() == runs.len()).then(|| {
                    let mean = at.iter().sum::<f64>() / at.len() as f64;
                    let lo = at.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = at.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    (step, mean, lo, hi)
                })
            })
            .collect()
    }

    /// The final validation loss per variant.
    pub fn summary(&self) -> Vec<VariantSummary> {
        self.variants()
            .into_iter()
            .filter_map(|v| {
                let x: Vec<f64> = self.runs.iter().filter(|r| r.variant == v).filter_map(|r| r.final_val).collect();
                if x.is_empty() {
                    return None;
                }
                let n = x.len() as f64;
                let mean = x.iter().sum::<f64>() / n;
                let sd = if x.len() > 1 {
                    (x.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
                } else {
                    0.0
                };
                Some(VariantSummary {
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
        assert_eq!(e.skipped, ["not-a-run: no metrics.jsonl (not a training run)"]);
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
