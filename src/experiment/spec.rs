//! The experiment spec (`experiments/NAME.toml`): what a grid runs, checked before any run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{ExperimentError, run_name};
use crate::model::Variant;
use crate::train::RunConfig;

/// An experiment spec (`experiments/NAME.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    /// A title for the report.
    #[serde(default)]
    pub name: String,
    /// Free text shown at the top of the report.
    #[serde(default)]
    pub description: String,
    /// Model and schedule preset shared by every run.
    pub preset: String,
    /// Variants to compare, in report order.
    pub variants: Vec<String>,
    /// One run per (variant, seed); a seed fixes the initialisation and the batch order.
    pub seeds: Vec<u64>,
    /// More seeds for some variants (e.g. the core comparison), as `variant = [seeds]`.
    #[serde(default)]
    pub extra_seeds: BTreeMap<String, Vec<u64>>,
    /// Optimizer steps of every run (also the schedule's length unless `[train] decay_steps` is set);
    /// 0 only while a spec that gives `tokens` instead is read (`parse` resolves it).
    #[serde(default, deserialize_with = "at_least_one")]
    pub steps: usize,
    /// The tokens every run sees instead of `steps` (`5000000`, `"5M"`, `"2.5B"`): the step where a
    /// run has seen them (÷ batch_size × seq_len × grad_accum, rounded up). Kept beside the steps
    /// it resolved to in the grid's copy of the spec.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "token_count")]
    pub tokens: Option<u64>,
    /// Passes over the training split every run makes instead of `steps` (1, 2.5): the step where
    /// a run has seen epochs × the split's tokens (÷ the global batch's tokens, rounded up), as
    /// `ddl train --epochs` takes it. The split is counted from the corpus's cached set, else the
    /// corpus is tokenised to count it (into a temporary folder: the runs cache it). Kept beside
    /// the steps it resolved to in the grid's copy of the spec.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "epoch_count")]
    pub epochs: Option<f64>,
    /// The training split's tokens `epochs` were counted against (not written).
    #[serde(skip)]
    pub split_tokens: Option<u64>,
    /// Corpus and tokenizer (default: the preset's, TinyShakespeare and `char`).
    #[serde(default)]
    pub corpus: Option<String>,
    #[serde(default)]
    pub tokenizer: Option<String>,
    /// Overrides of the model config applied to every variant (as in a run's `[model]` table).
    #[serde(default)]
    pub model: toml::Table,
    /// Overrides of the training config (batch, learning rate, eval cadence ...).
    #[serde(default)]
    pub train: toml::Table,
    /// Validation batches on which the final β regimes are counted.
    #[serde(default = "default_beta_batches", deserialize_with = "at_least_one")]
    pub beta_batches: usize,
    /// Parts of every sublayer's write removed in turn at the end of each delta-write run
    /// (`"write"`, `"erase"`, `"v"`, as `ddl eval --ablate`): the report's ablation section.
    /// Added to a finished grid, the runs are ablated from their checkpoints, not trained again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ablate: Vec<String>,
    /// The ablations' validation batches (0: the whole split, the final evaluation's windows).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ablate_batches: usize,
}

/// A count that must be at least 1: a negative or zero one says so in those words (as `usize` it
/// read "expected a whole number ≥ 0", and 0 was then refused).
fn at_least_one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = i64::deserialize(d)?;
    usize::try_from(n)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| serde::de::Error::invalid_value(serde::de::Unexpected::Signed(n), &"a whole number ≥ 1"))
}

/// Passes over the training split: a number above 0, at most 10^6 (as `ddl train --epochs`).
fn epoch_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let e = f64::deserialize(d)?;
    if e.is_finite() && e > 0.0 && e <= 1e6 {
        Ok(Some(e))
    } else {
        Err(serde::de::Error::invalid_value(
            serde::de::Unexpected::Float(e),
            &"passes over the training split above 0 and at most 1000000 (1, 2.5)",
        ))
    }
}

/// A token count: a whole number (`5000000`) or one as `ddl train --tokens` takes it (`"5M"`).
fn token_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct Count;
    impl serde::de::Visitor<'_> for Count {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a token count: a whole number (5000000) or text such as \"5M\", \"2.5B\"")
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
            self.visit_str(&n.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
            self.visit_str(&n.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, x: f64) -> Result<Self::Value, E> {
            self.visit_str(&x.to_string())
        }
        fn visit_str<E: serde::de::Error>(self, t: &str) -> Result<Self::Value, E> {
            crate::train::cache::parse_count(t).map(Some).map_err(|e| E::custom(format!("tokens = {e}")))
        }
    }
    d.deserialize_any(Count)
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn default_beta_batches() -> usize {
    4
}

impl ExperimentSpec {
    /// Reads and checks a spec file.
    pub fn load(path: &Path) -> Result<ExperimentSpec, ExperimentError> {
        let err = |msg: String| ExperimentError::Spec { path: path.to_path_buf(), msg };
        // A folder (an experiment's, whose spec is its experiment.toml), a path to nothing and
        // bytes that are not UTF-8, each with what to give (they were the system's words alone:
        // "Is a directory (os error 21)", "stream did not contain valid UTF-8").
        if path.is_dir() {
            let own = path.join("experiment.toml");
            return Err(err(if own.is_file() {
                format!(
                    "a folder, not a spec: it is an experiment's, whose spec is {}; to continue it, give --spec {} \
                     --out {}",
                    own.display(),
                    own.display(),
                    path.display()
                )
            } else {
                "a folder, not a spec: give a spec file (a TOML file such as experiments/shakespeare.toml)".into()
            }));
        }
        let bytes = std::fs::read(path).map_err(|e| {
            err(match e.kind() {
                std::io::ErrorKind::NotFound => "no such file: give a spec file (a TOML file such as \
                                                 experiments/shakespeare.toml; a relative path is taken from the \
                                                 current directory)"
                    .into(),
                _ => format!("cannot read the spec: {e}"),
            })
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            err(format!(
                "not UTF-8 text (byte {} is not part of a UTF-8 character): save the file as UTF-8",
                e.utf8_error().valid_up_to()
            ))
        })?;
        Self::parse(&text, path)
    }

    /// Parses and checks the text of a spec (`path` names it in errors).
    pub fn parse(text: &str, path: &Path) -> Result<ExperimentSpec, ExperimentError> {
        let err = |msg: String| ExperimentError::Spec { path: path.to_path_buf(), msg };
        // A run's settings (`ddl train`'s config.toml) given as a spec: it named `data` or
        // `data_format` as an unknown field.
        if let Ok(table) = text.parse::<toml::Table>()
            && !table.contains_key("variants")
            && (table.contains_key("data_format")
                || table.get("model").and_then(|m| m.as_table()).is_some_and(|m| m.contains_key("variant")))
        {
            return Err(err(
                "this is a run's settings (`ddl train`'s config.toml: one variant, no variants or seeds), not an \
                 experiment spec: give it to `ddl train --config`, or write a spec of preset, variants, seeds and \
                 steps (e.g. experiments/shakespeare.toml)"
                    .into(),
            ));
        }
        // `extra_seeds` as a list of seeds (or an empty one): "invalid type: sequence, expected a
        // map", or "[[extra_seeds]] is an array of tables" of `extra_seeds = []`.
        if let Ok(table) = text.parse::<toml::Table>()
            && let Some(v) = table.get("extra_seeds")
            && v.as_array().is_some_and(|a| a.is_empty() || !a.iter().all(|x| x.is_table()))
        {
            return Err(err(format!(
                "extra_seeds = {v}: expected a table of variant = [seeds] (more runs of some variants), e.g. \
                 extra_seeds = {{ ddl = [3, 4] }}; the seeds every variant runs go in `seeds`"
            )));
        }
        // `[[train]]` for `[train]` (an array of tables): "invalid type: sequence, expected a map".
        if let Ok(table) = text.parse::<toml::Table>()
            && let Some(k) = ["model", "train", "extra_seeds"].into_iter().find(|k| {
                table
                    .get(*k)
                    .and_then(|v| v.as_array())
                    .is_some_and(|a| !a.is_empty() && a.iter().all(|x| x.is_table()))
            })
        {
            return Err(err(format!(
                "[[{k}]] is an array of tables; the settings go in one table: write [{k}] with single brackets"
            )));
        }
        let mut spec: ExperimentSpec = toml::from_str(text).map_err(|e| {
            let msg = crate::train::config::plain_serde_message(&e.to_string());
            // (A key the spec must have: the four it always names, and an example.)
            if msg.contains("missing key `") {
                err(format!(
                    "{msg}a spec names at least preset, variants, seeds and steps, e.g. experiments/shakespeare.toml \
                     (docs/TRAINING.md, \"Experiments\")"
                ))
            } else {
                err(msg)
            }
        })?;
        spec.check().map_err(err)?;
        // The data files must exist now, before the experiment's folder is written.
        if let Some(c) = &spec.corpus
            && c != crate::train::data::DEFAULT_CORPUS
            && !Path::new(c).exists()
        {
            return Err(err(format!(
                "corpus = \"{c}\": no such file or folder (a UTF-8 text file or a folder of .txt files; a relative \
                 path is taken from the current directory)"
            )));
        }
        if let Some(t) = &spec.tokenizer
            && t != "char"
            && !Path::new(t).exists()
        {
            return Err(err(format!("tokenizer = \"{t}\": no such file (\"char\", or a tokenizer.json)")));
        }
        // Relative paths made absolute (as a run's config.toml holds them): the grid's copy of the
        // spec, experiment.toml, then finds them from any directory (`--report-only`, `ddl info
        // --checkpoint`, the grid run again from elsewhere).
        for (p, special) in [(&mut spec.corpus, crate::train::data::DEFAULT_CORPUS), (&mut spec.tokenizer, "char")] {
            if let Some(given) = p.as_mut()
                && given != special
                && Path::new(given).is_relative()
                && let Ok(abs) = std::fs::canonicalize(&*given)
            {
                *given = abs.display().to_string();
            }
        }
        spec.resolve_tokens().map_err(err)?;
        // Every run's config must resolve now, not an hour into the grid (a seed changes nothing
        // that is checked: each variant's first seed stands for its runs). A setting wrong for every
        // variant is the spec's; one wrong for some, theirs.
        let variants = spec.variant_list().map_err(err)?;
        let errors: Vec<(Variant, String)> = variants
            .iter()
            .filter_map(|&v| {
                let seed = spec.seeds_of(v).first().copied().unwrap_or(1);
                spec.run_config(v, seed).err().map(|m| (v, m))
            })
            .collect();
        if let Some((v, m)) = errors.first() {
            let everywhere = errors.len() == variants.len() && errors.iter().all(|e| e.1 == *m);
            return Err(err(if everywhere { m.clone() } else { format!("variant {v}: {m}") }));
        }
        Ok(spec)
    }

    /// `tokens` instead of `steps`: the steps it takes (its global batch's tokens a step, the first
    /// variant's: the grid's runs share batch and context). Both given must agree (the grid's own
    /// copy of a spec keeps both); neither is refused.
    fn resolve_tokens(&mut self) -> Result<(), String> {
        if let (Some(t), Some(e)) = (self.tokens, self.epochs) {
            return Err(format!(
                "tokens = {t} and epochs = {e}: both give the runs' length; give one of steps, tokens or epochs"
            ));
        }
        if let Some(epochs) = self.epochs {
            return self.resolve_epochs(epochs);
        }
        let Some(tokens) = self.tokens else {
            if self.steps == 0 {
                return Err("missing `steps`: a spec names at least preset, variants, seeds and steps (or tokens = \
                            \"5M\" or epochs = 1 instead of steps: the step where each run has seen them), e.g. \
                            experiments/shakespeare.toml (docs/TRAINING.md, \"Experiments\")"
                    .into());
            }
            return Ok(());
        };
        let Some(per_step) = self.tokens_per_step() else {
            // (A setting that does not resolve: said by the spec's run checks, by variant.)
            if self.steps == 0 {
                self.steps = 1 << 40;
            }
            return Ok(());
        };
        let steps = usize::try_from(tokens.div_ceil(per_step)).unwrap_or(usize::MAX).max(1);
        if self.steps != 0 && self.steps != steps {
            return Err(format!(
                "steps = {} and tokens = {} disagree: {} tokens are {} of {} tokens (batch_size × seq_len × \
                 grad_accum); give one of them",
                self.steps,
                tokens,
                crate::train::cache::count(tokens),
                crate::plural(steps, "step"),
                crate::train::cache::count(per_step)
            ));
        }
        self.steps = steps;
        Ok(())
    }

    /// `epochs` instead of `steps`: the steps they take, from the training split's tokens (the
    /// first variant's run settings: the grid's runs share corpus, tokenizer and batch). Both given
    /// must agree.
    fn resolve_epochs(&mut self, epochs: f64) -> Result<(), String> {
        let v = self.variant_list()?.first().copied();
        let probe = ExperimentSpec { steps: 1 << 40, ..self.clone() };
        // (The run settings [`Self::tokens_per_step`] reads its batch from.)
        let Some(run) = v.and_then(|v| probe.run_config(v, self.seeds.first().copied().unwrap_or(1)).ok()) else {
            // (A setting that does not resolve: said by the spec's run checks, by variant.)
            if self.steps == 0 {
                self.steps = 1 << 40;
            }
            return Ok(());
        };
        let per_step = run.train.tokens_per_step();
        let train = crate::train::data::train_tokens(&run, None, false)
            .map_err(|e| format!("epochs = {epochs}: the training split could not be counted: {e}"))?;
        let steps = crate::train::data::epoch_steps(epochs, train, per_step);
        if self.steps != 0 && self.steps != steps {
            return Err(format!(
                "steps = {} and epochs = {epochs} disagree: {epochs} × the training split's {} tokens are {} of {} \
                 tokens (batch_size × seq_len × grad_accum); give one of them",
                self.steps,
                crate::train::cache::count(train),
                crate::plural(steps, "step"),
                crate::train::cache::count(per_step)
            ));
        }
        self.steps = steps;
        self.split_tokens = Some(train);
        Ok(())
    }

    /// The tokens one step of the grid's runs sees (its global batch), if the first variant's
    /// settings resolve.
    pub fn tokens_per_step(&self) -> Option<u64> {
        let v = *self.variant_list().ok()?.first()?;
        // (Any length will do: the batch does not depend on it.)
        let probe = ExperimentSpec { steps: 1 << 40, ..self.clone() };
        Some(probe.run_config(v, self.seeds.first().copied().unwrap_or(1)).ok()?.train.tokens_per_step())
    }

    /// The folders of the spec's runs in the grid `out` (`out/runs/VARIANT-seedS`, every variant's
    /// seeds; none where the variants do not read).
    pub fn run_dirs(&self, out: &Path) -> Vec<std::path::PathBuf> {
        let variants = self.variant_list().unwrap_or_default();
        variants
            .iter()
            .flat_map(|&v| self.seeds_of(v).into_iter().map(move |seed| out.join("runs").join(run_name(v, seed))))
            .collect()
    }

    /// The runs' length as the grid says it: "250 steps", or "153 steps (tokens = 5M, 32.8 k a step)".
    pub fn length_words(&self) -> String {
        let steps = crate::plural(self.steps, "step");
        match self.length_given() {
            Some(given) => format!("{steps} ({given})"),
            None => steps,
        }
    }

    /// How the spec gives the runs' length where not in steps: "tokens = 5M, 32.8 k a step",
    /// "epochs = 1 of the training split's 18.0 k tokens, 768 a step" (without the split's size
    /// in a grid's copy read as it is, not counted again).
    pub fn length_given(&self) -> Option<String> {
        let per = crate::train::cache::count(self.tokens_per_step()?);
        match (self.tokens, self.epochs, self.split_tokens) {
            (Some(t), _, _) => Some(format!("tokens = {}, {per} a step", crate::train::cache::count(t))),
            (_, Some(e), Some(split)) => Some(format!(
                "epochs = {e} of the training split's {} tokens, {per} a step",
                crate::train::cache::count(split)
            )),
            (_, Some(e), None) => Some(format!("epochs = {e}, {per} a step")),
            _ => None,
        }
    }

    pub(super) fn check(&self) -> Result<(), String> {
        if self.variants.is_empty() {
            let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
            return Err(format!(
                "variants = []: expected at least one variant of {}; e.g. variants = [\"baseline\", \"ddl\"]",
                names.join(", ")
            ));
        }
        if self.seeds.is_empty() {
            return Err(
                "seeds = []: expected at least one seed (a whole number; each is one run of every variant); e.g. \
                 seeds = [1, 2, 3] (3 or more for the report's verdicts)"
                    .into(),
            );
        }
        if let Some(s) = self.seeds.iter().chain(self.extra_seeds.values().flatten()).find(|&&s| s > i64::MAX as u64) {
            return Err(format!(
                "seeds / extra_seeds: seed {s} is too large: a run's seed is a whole number from 0 to {} (its \
                 config.toml holds it)",
                i64::MAX
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for s in &self.seeds {
            if !seen.insert(*s) {
                return Err(format!(
                    "seeds: seed {s} appears twice: each seed is one run of every variant; list it once"
                ));
            }
        }
        for (name, extra) in &self.extra_seeds {
            let v = Variant::parse(name).map_err(|e| format!("extra_seeds: {e}"))?;
            if !self.variants.iter().any(|n| Variant::parse(n).ok() == Some(v)) {
                return Err(format!(
                    "extra_seeds: '{name}' is not one of the spec's variants ({}): add '{name}' to variants, or remove \
                     its entry from extra_seeds",
                    self.variants.join(", ")
                ));
            }
            if let Some(s) = extra.iter().find(|s| self.seeds.contains(s)) {
                return Err(format!(
                    "extra_seeds: seed {s} of '{name}' is already in seeds (every variant runs the seeds in `seeds`): \
                     remove {s} from '{name}' under extra_seeds"
                ));
            }
            let mut own = std::collections::HashSet::new();
            if let Some(s) = extra.iter().find(|s| !own.insert(**s)) {
                return Err(format!("extra_seeds: seed {s} appears twice for '{name}': list it once"));
            }
        }
        // (steps and beta_batches ≥ 1: their deserializer, `at_least_one`.)
        self.ablate_parts()?;
        if self.ablate_batches > 0 && self.ablate.is_empty() {
            return Err(format!(
                "ablate_batches = {}: there is nothing to ablate; add ablate = [\"write\", \"erase\", \"v\"] (or \
                 some of them), or remove ablate_batches",
                self.ablate_batches
            ));
        }
        if !self.ablate.is_empty()
            && let Ok(vs) = self.variant_list()
            && !vs.iter().any(|v| v.is_ddl())
        {
            return Err(format!(
                "ablate = {:?}: no variant of the spec has delta writes to ablate (the baseline adds its sublayers' \
                 outputs); add a delta-write variant (ddl, ddl_v1, …) or remove ablate",
                self.ablate
            ));
        }
        Ok(())
    }

    /// The parts `ablate` names, in the order of the tables (write, erase, v).
    pub fn ablate_parts(&self) -> Result<Vec<crate::train::eval::Ablate>, String> {
        let mut parts = Vec::new();
        for name in &self.ablate {
            let p = crate::train::eval::Ablate::parse(name).map_err(|e| format!("ablate: {e}"))?;
            if parts.contains(&p) {
                return Err(format!("ablate: \"{name}\" appears twice: list each part once"));
            }
            parts.push(p);
        }
        parts.sort();
        Ok(parts)
    }

    /// The seeds variant `v` runs: `seeds`, then its `extra_seeds`.
    pub fn seeds_of(&self, v: Variant) -> Vec<u64> {
        let extra = self.extra_seeds.iter().find(|(n, _)| Variant::parse(n).ok() == Some(v)).map(|(_, s)| s);
        self.seeds.iter().chain(extra.into_iter().flatten()).copied().collect()
    }

    /// Every seed of the grid, ascending.
    pub fn all_seeds(&self) -> Vec<u64> {
        let all: BTreeSet<u64> = self.seeds.iter().chain(self.extra_seeds.values().flatten()).copied().collect();
        all.into_iter().collect()
    }

    /// The variants, parsed, in spec order (no duplicates).
    pub fn variant_list(&self) -> Result<Vec<Variant>, String> {
        let mut out: Vec<Variant> = Vec::new();
        for name in &self.variants {
            let v = Variant::parse(name).map_err(|e| format!("variants: {e}"))?;
            if out.contains(&v) {
                return Err(format!("variants: '{name}' appears twice: list each variant once"));
            }
            out.push(v);
        }
        Ok(out)
    }

    /// The resolved config of one run of the grid.
    pub fn run_config(&self, variant: Variant, seed: u64) -> Result<RunConfig, String> {
        let mut run = RunConfig::preset(&self.preset, variant).map_err(in_spec)?;
        let mut overlay = toml::Table::new();
        if let Some(c) = &self.corpus {
            overlay.insert("corpus".into(), toml::Value::String(c.clone()));
        }
        if let Some(t) = &self.tokenizer {
            overlay.insert("tokenizer".into(), toml::Value::String(t.clone()));
        }
        if !self.model.is_empty() {
            overlay.insert("model".into(), toml::Value::Table(self.model.clone()));
        }
        if self.model.contains_key("variant") {
            return Err("[model] variant: variants come from the spec's `variants` list".into());
        }
        if let Some(v) = self.model.get("vocab_size") {
            // (It was ignored: each run takes its tokenizer's size.)
            return Err(format!(
                "[model] vocab_size = {v}: each run's vocabulary is its tokenizer's size (the corpus's characters, or \
                 the `tokenizer` file's tokens); drop it"
            ));
        }
        let mut train = self.train.clone();
        if train.contains_key("seed") {
            return Err("[train] seed: seeds come from the spec's `seeds` list".into());
        }
        // (A run stopped early has a result of fewer steps, which the grid never counts as
        // finished: its report was refused as "no finished runs yet", and training again stops
        // at the same place.)
        if let Some(n) = train.get("early_stop").filter(|n| n.as_integer() != Some(0)) {
            return Err(format!(
                "`early_stop = {n}` under [train]: every run of a grid trains the spec's {} (its comparisons \
                 pair runs of the same steps and tokens), and a run stopped early would never count as finished; \
                 remove early_stop (or set it to 0), and choose `steps` by the report's length check",
                // (With `tokens`, the steps are not resolved yet while the settings are checked.)
                match (self.tokens, self.epochs) {
                    (Some(t), _) => format!("{} tokens (`tokens`)", crate::train::cache::count(t)),
                    (_, Some(e)) => format!("{e} epoch{} (`epochs`)", if e == 1.0 { "" } else { "s" }),
                    _ => crate::plural(self.steps, "step"),
                }
            ));
        }
        train.insert("seed".into(), toml::Value::Integer(seed as i64));
        // The schedule spans the run unless the spec says otherwise.
        if !train.contains_key("decay_steps") {
            // A warm-up the spec gives past the run's end: said as its own (it was "`decay_steps =
            // STEPS` under [train]: at least train.warmup_steps", a key the spec did not write,
            // with the remedy of raising it past the run).
            if let Some(w) = train.get("warmup_steps").and_then(|w| w.as_integer())
                && w > self.steps as i64
            {
                return Err(format!(
                    "`warmup_steps = {w}` under [train]: at most the run's {} steps (`steps`; the schedule spans the \
                     run unless `decay_steps` under [train] is set); lower `warmup_steps` under [train] to {} or less",
                    self.steps, self.steps
                ));
            }
            train.insert("decay_steps".into(), toml::Value::Integer(self.steps as i64));
            if !train.contains_key("warmup_steps") && run.train.warmup_steps > self.steps / 5 {
                train.insert("warmup_steps".into(), toml::Value::Integer((self.steps / 10).max(1) as i64));
            }
        }
        overlay.insert("train".into(), toml::Value::Table(train));
        let text = toml::to_string(&overlay).map_err(|e| e.to_string())?;
        run.merge_toml(&text, "spec")?;
        run.validate().map_err(in_spec)?;
        Ok(run)
    }
}

/// A setting's error in the spec's words: where the spec sets it (`batch_size` under [train],
/// `preset`) and its remedy with the spec's keys for `ddl train`'s flags (`--set train.x=V` is
/// `x = V` under [train], `--preset NAME` is `preset = "NAME"`).
fn in_spec(e: crate::model::ConfigError) -> String {
    let place = match e.key.split_once('.') {
        Some((table @ ("model" | "train"), field)) => format!("`{field} = {}` under [{table}]", e.value),
        // (The spec's one string setting here: quoted as it is written.)
        _ if e.key == "preset" => format!("`preset = \"{}\"`", e.value),
        _ => format!("`{} = {}`", e.key, e.value),
    };
    let remedy = if e.remedy.starts_with("change it with --set ") {
        match e.key.split_once('.') {
            Some((table, field)) => format!("change `{field}` under [{table}] in the spec"),
            None => format!("change `{}` in the spec", e.key),
        }
    } else {
        spec_words(&e.remedy)
    };
    format!("{place}: {}; {remedy}", e.expected)
}

/// `ddl train`'s flags in a remedy said as the spec's keys.
fn spec_words(remedy: &str) -> String {
    let mut out = String::new();
    let mut rest = remedy;
    while let Some(i) = [rest.find("--set "), rest.find("--preset ")].into_iter().flatten().min() {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let start = if after.starts_with("--set ") { 6 } else { 9 };
        let end = after[start..].find([' ', ')', ',', ';']).map_or(after.len(), |j| j + start);
        let flag = &after[..end];
        match flag.strip_prefix("--set ").and_then(|kv| kv.split_once('=')) {
            Some((key, value)) => match key.split_once('.') {
                Some((table, field)) => out.push_str(&format!("`{field} = {value}` under [{table}]")),
                None => out.push_str(&format!("`{key} = {value}`")),
            },
            None => match flag.strip_prefix("--preset ") {
                Some(name) => out.push_str(&format!("`preset = \"{name}\"`")),
                None => out.push_str(flag),
            },
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::test_support::spec;

    /// `epochs` instead of `steps`: passes over the training split (a char corpus: a token a
    /// character of its training part), rounded up to whole steps; said in the grid's length; the
    /// copy keeps both and reads back; with `tokens`, or steps that disagree, refused by name.
    #[test]
    fn epochs_give_the_steps() {
        let dir = crate::testing::scratch_dir("spec-epochs");
        let corpus = crate::testing::small_corpus(&dir);
        let head = format!("preset = \"tiny\"\nvariants = [\"baseline\", \"ddl\"]\nseeds = [1]\ncorpus = {corpus:?}\n");
        let parse = |extra: &str| ExperimentSpec::parse(&format!("{head}{extra}"), Path::new("s.toml"));
        let per = parse("steps = 1\n").unwrap().tokens_per_step().unwrap();
        let s = parse("epochs = 2.5\n").unwrap();
        let split = s.split_tokens.unwrap();
        assert!((15_000..20_000).contains(&split), "{split} of a 20,000-character corpus");
        assert_eq!(s.steps as u64, (5 * split).div_ceil(2 * per), "{s:?}");
        assert!(s.length_words().contains("(epochs = 2.5 of the training split's "), "{}", s.length_words());
        assert_eq!(parse("epochs = 1\n").unwrap().steps as u64, split.div_ceil(per));
        let copy = toml::to_string(&s).unwrap();
        assert!(copy.contains(&format!("steps = {}", s.steps)) && copy.contains("epochs = 2.5"), "{copy}");
        assert_eq!(ExperimentSpec::parse(&copy, Path::new("copy.toml")).unwrap(), s);
        // (The copy read as it is, as `ddl info --checkpoint` reads it: not counted again.)
        let raw: ExperimentSpec = toml::from_str(&copy).unwrap();
        assert!(raw.length_words().ends_with(&format!("(epochs = 2.5, {} a step)", crate::train::cache::count(per))));
        let e = parse(&format!("steps = {}\nepochs = 2.5\n", s.steps + 1)).unwrap_err().to_string();
        assert!(e.contains("disagree") && e.contains("give one of them"), "{e}");
        let e = parse("epochs = 1\ntokens = 100\n").unwrap_err().to_string();
        assert!(e.contains("both give the runs' length"), "{e}");
        for bad in ["0", "-1", "1e9"] {
            let e = parse(&format!("epochs = {bad}\n")).unwrap_err().to_string();
            assert!(e.contains("above 0 and at most 1000000"), "{bad}: {e}");
        }
        let e = parse("epochs = 1\n[train]\nearly_stop = 2\n").unwrap_err().to_string();
        assert!(e.contains("trains the spec's 1 epoch (`epochs`)"), "{e}");
    }

    /// `tokens` instead of `steps`: the step where each run has seen them (rounded up), written as
    /// `ddl train --tokens` takes them or as a whole number; both given must agree (the grid's own
    /// copy keeps both and reads back); neither, or a count that is no count, is refused by name.
    #[test]
    fn tokens_give_the_steps() {
        let head = "preset = \"tiny\"\nvariants = [\"baseline\", \"ddl\"]\nseeds = [1]\n";
        let parse = |extra: &str| ExperimentSpec::parse(&format!("{head}{extra}"), Path::new("s.toml"));
        let per = parse("steps = 1\n").unwrap().tokens_per_step().unwrap();
        let t = parse("steps = 1\n").unwrap().run_config(Variant::Ddl, 1).unwrap().train;
        assert_eq!(per, (t.batch_size * t.seq_len * t.grad_accum) as u64);
        // 10 steps' tokens and one more: 11 steps; "0.2k" and 200 the same.
        let s = parse(&format!("tokens = {}\n", 10 * per + 1)).unwrap();
        assert_eq!((s.steps, s.tokens), (11, Some(10 * per + 1)));
        assert_eq!(parse("tokens = \"0.2k\"\n").unwrap().steps, parse("tokens = 200\n").unwrap().steps);
        assert!(s.length_words().starts_with("11 steps (tokens = "), "{}", s.length_words());
        // The schedule spans the resolved steps.
        assert_eq!(s.run_config(Variant::Ddl, 1).unwrap().train.decay_steps, 11);
        // The grid's copy (serialized with both) reads back the same.
        let copy = toml::to_string(&s).unwrap();
        assert!(copy.contains("steps = 11") && copy.contains("tokens = "), "{copy}");
        assert_eq!(ExperimentSpec::parse(&copy, Path::new("copy.toml")).unwrap(), s);
        let e = parse(&format!("steps = 3\ntokens = {}\n", 10 * per)).unwrap_err().to_string();
        assert!(e.contains("steps = 3 and tokens = ") && e.contains("10 steps") && e.contains("give one"), "{e}");
        // A setting refused while the steps are not resolved: said without them.
        let e = parse("tokens = \"3k\"\n[train]\nearly_stop = 2\n").unwrap_err().to_string();
        assert!(e.contains("trains the spec's 3.0 k tokens (`tokens`)") && !e.contains("1099511627776"), "{e}");
        let e = parse("").unwrap_err().to_string();
        assert!(e.contains("missing `steps`") && e.contains("tokens = \"5M\""), "{e}");
        for (bad, needle) in [("\"5X\"", "expected a token count"), ("0", "at least 1 token"), ("true", "token count")]
        {
            let e = parse(&format!("tokens = {bad}\n")).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("s.toml"), "tokens = {bad}: {e}");
        }
    }

    /// A setting out of range is said where the spec sets it, with its remedy in the spec's keys
    /// (the messages were `ddl train`'s: `--set train.batch_size=VALUE`, `--preset NAME`), and
    /// without a run's name when every run has it.
    #[test]
    fn a_bad_setting_is_said_in_the_specs_words() {
        let bad = |extra: &str, preset: &str| {
            let text = format!(
                "preset = \"{preset}\"\nvariants = [\"baseline\", \"ddl\"]\nseeds = [1, 2]\nsteps = 20\n{extra}"
            );
            ExperimentSpec::parse(&text, Path::new("s.toml")).unwrap_err().to_string()
        };
        let e = bad("[train]\nbatch_size = 0\n", "tiny");
        assert!(e.contains("`batch_size = 0` under [train]") && e.contains("in the spec"), "{e}");
        assert!(!e.contains("--set") && !e.contains("--config") && !e.contains("variant "), "{e}");
        let e = bad("[train]\nseq_len = 100\n", "tiny");
        assert!(e.contains("`seq_len = 64` under [train]") && e.contains("`max_seq_len = 100` under [model]"), "{e}");
        assert!(!e.contains("--set"), "{e}");
        // A warm-up longer than the run: its own key and the spec's remedy (it named a
        // `decay_steps = 20` the spec did not write, and to raise it past the run).
        let e = bad("[train]\nwarmup_steps = 100\n", "tiny");
        assert!(e.contains("`warmup_steps = 100` under [train]: at most the run's 20 steps"), "{e}");
        assert!(e.contains("lower `warmup_steps` under [train] to 20 or less") && !e.contains("decay_steps = "), "{e}");
        let e = bad("[train]\nwarmup_steps = 100\ndecay_steps = 50\n", "tiny");
        assert!(e.contains("`decay_steps = 50` under [train]"), "{e}");
        let e = bad("", "huge");
        assert!(
            e.contains("`preset = \"huge\"`") && e.contains("`preset = \"NAME\"`") && !e.contains("--preset"),
            "{e}"
        );
        assert_eq!(
            spec_words("lower it (--set a.b=1) or --preset X, then"),
            "lower it (`b = 1` under [a]) or `preset = \"X\"`, then"
        );
    }

    /// A `--spec` that is a folder, nothing, or not UTF-8 says what it is and what to give (the
    /// system's words alone before: "Is a directory (os error 21)", "stream did not contain valid
    /// UTF-8").
    #[test]
    fn a_spec_path_that_is_no_spec_file_says_what_to_give() {
        let dir = crate::testing::scratch_dir("spec-path");
        let e = ExperimentSpec::load(&dir).unwrap_err().to_string();
        assert!(e.contains("a folder, not a spec") && e.contains("experiments/shakespeare.toml"), "{e}");
        std::fs::write(dir.join("experiment.toml"), "preset = \"tiny\"\n").unwrap();
        let e = ExperimentSpec::load(&dir).unwrap_err().to_string();
        let own = dir.join("experiment.toml").display().to_string();
        assert!(e.contains(&format!("--spec {own} --out {}", dir.display())), "{e}");
        let e = ExperimentSpec::load(&dir.join("none.toml")).unwrap_err().to_string();
        assert!(e.contains("none.toml: no such file: give a spec file"), "{e}");
        std::fs::write(dir.join("latin1.toml"), b"name = \"caf\xe9\"\n").unwrap();
        let e = ExperimentSpec::load(&dir.join("latin1.toml")).unwrap_err().to_string();
        assert!(e.contains("not UTF-8 text (byte 11") && e.contains("save the file as UTF-8"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// `steps` and `beta_batches` ask for what they take: a negative one said "≥ 0", and 0 was
    /// then refused.
    #[test]
    fn counts_that_must_be_positive_say_so() {
        let parse = |tail: &str| {
            let text = format!("preset = \"tiny\"\nvariants = [\"baseline\"]\nseeds = [1]\n{tail}");
            ExperimentSpec::parse(&text, Path::new("s.toml"))
        };
        for bad in ["steps = -5", "steps = 0", "steps = 10\nbeta_batches = 0", "steps = 10\nbeta_batches = -1"] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("a whole number ≥ 1") && !e.contains("≥ 0"), "{bad}: {e}");
            assert!(e.contains("s.toml"), "{bad}: {e}");
        }
        // A run's config.toml given as a spec is said to be one (it named `data` an unknown field).
        let run = crate::train::RunConfig::preset("tiny", Variant::Ddl).unwrap().settings_toml().unwrap();
        let e = ExperimentSpec::parse(&run, Path::new("config.toml")).unwrap_err().to_string();
        assert!(e.contains("config.toml: this is a run's settings") && e.contains("ddl train --config"), "{e}");
        // `[[train]]` for `[train]`: said as such (it was "invalid type: sequence, expected a map").
        let e = parse("steps = 7\n[[train]]\nlr = 1.0\n").unwrap_err().to_string();
        assert!(e.contains("s.toml: [[train]] is an array of tables") && e.contains("write [train]"), "{e}");
        let e = parse("steps = 2.5").unwrap_err().to_string();
        assert!(e.contains("expected a whole number") && !e.contains("i64"), "{e}");
        let s = parse("steps = 7\nbeta_batches = 2").unwrap();
        assert_eq!((s.steps, s.beta_batches), (7, 2));
        assert_eq!(parse("steps = 7").unwrap().beta_batches, default_beta_batches());
    }

    #[test]
    fn run_configs_share_everything_but_the_variant_and_the_seed() {
        let s = spec("[train]\nbatch_size = 4\nlr = 2e-3\n[model]\nd_model = 64\n").unwrap();
        let a = s.run_config(Variant::Baseline, 1).unwrap();
        let b = s.run_config(Variant::Ddl, 1).unwrap();
        assert_eq!((a.train.batch_size, a.train.lr, a.model.d_model), (4, 2e-3, 64));
        assert_eq!(a.train, b.train, "matched comparison: one training config per seed");
        assert_eq!(a.train.decay_steps, 20, "the schedule spans the run");
        assert!(a.train.warmup_steps <= 4);
        assert_eq!(s.run_config(Variant::Ddl, 2).unwrap().train.seed, 2);
        assert_ne!(a.model.variant, b.model.variant);
    }

    #[test]
    fn extra_seeds_add_runs_to_some_variants() {
        let s = spec("extra_seeds = { ddl = [3, 4] }\n").unwrap();
        assert_eq!(s.seeds_of(Variant::Ddl), [1, 2, 3, 4]);
        assert_eq!(s.seeds_of(Variant::Baseline), [1, 2]);
        assert_eq!(s.all_seeds(), [1, 2, 3, 4]);
        assert!(spec("extra_seeds = { ddl_cc = [3] }\n").unwrap_err().contains("not one of the spec's variants"));
        assert!(spec("extra_seeds = { ddl = [2] }\n").unwrap_err().contains("already in seeds"));
        assert!(spec("extra_seeds = { ddl = [3, 3] }\n").unwrap_err().contains("appears twice"));
        // Each with its remedy (they named the problem only).
        let e = spec("extra_seeds = { ddl_cc = [3] }\n").unwrap_err();
        assert!(e.contains("add 'ddl_cc' to variants, or remove its entry from extra_seeds"), "{e}");
        let e = spec("extra_seeds = { ddl = [2] }\n").unwrap_err();
        assert!(e.contains("every variant runs the seeds in `seeds`") && e.contains("remove 2 from"), "{e}");
        assert!(spec("extra_seeds = { ddl = [3, 3] }\n").unwrap_err().contains("list it once"));
        assert!(spec("ablate = [\"v\", \"v\"]\n").unwrap_err().contains("list each part once"));
    }

    #[test]
    fn bad_specs_name_the_problem() {
        assert!(spec("").is_ok());
        let e = spec("bogus = 1\n").unwrap_err();
        assert!(e.contains("bogus"), "{e}");
        let t = "preset = \"tiny\"\nvariants = [\"ddl\", \"nope\"]\nseeds = [1]\nsteps = 5\n";
        let s: ExperimentSpec = toml::from_str(t).unwrap();
        assert!(s.variant_list().unwrap_err().contains("nope"));
        let t = "preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1, 1]\nsteps = 5\n";
        let s: ExperimentSpec = toml::from_str(t).unwrap();
        assert!(s.check().unwrap_err().contains("seed 1 appears twice"));
        assert!(s.check().unwrap_err().contains("list it once"));
        let t = "preset = \"tiny\"\nvariants = [\"ddl\", \"ddl\"]\nseeds = [1]\nsteps = 5\n";
        let s: ExperimentSpec = toml::from_str(t).unwrap();
        assert!(s.variant_list().unwrap_err().contains("'ddl' appears twice: list each variant once"));
        // Empty lists: the setting, what it takes and an example (it said "expected at least one
        // variant", naming none).
        let t = "preset = \"tiny\"\nvariants = []\nseeds = [1]\nsteps = 5\n";
        let e = toml::from_str::<ExperimentSpec>(t).unwrap().check().unwrap_err();
        assert!(e.contains("variants = []: expected at least one variant of baseline, ddl_v1, ddl,"), "{e}");
        assert!(e.contains("e.g. variants = [\"baseline\", \"ddl\"]"), "{e}");
        let t = "preset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = []\nsteps = 5\n";
        let e = toml::from_str::<ExperimentSpec>(t).unwrap().check().unwrap_err();
        assert!(e.contains("seeds = []: expected at least one seed") && e.contains("e.g. seeds = [1, 2, 3]"), "{e}");
        let s = spec("[train]\nseed = 3\n").unwrap();
        assert!(s.run_config(Variant::Ddl, 1).unwrap_err().contains("seeds"));
        // A run stopped early would never count as finished (its result is of fewer steps).
        let s = spec("[train]\nearly_stop = 2\neval_every = 5\n").unwrap();
        let e = s.run_config(Variant::Ddl, 1).unwrap_err();
        assert!(e.contains("`early_stop = 2` under [train]") && e.contains("remove early_stop"), "{e}");
        assert!(spec("[train]\nearly_stop = 0\n").unwrap().run_config(Variant::Ddl, 1).is_ok());
        let s = spec("[train]\nlr = -1.0\n").unwrap();
        assert!(s.run_config(Variant::Ddl, 1).unwrap_err().contains("lr"));
        let s = spec("[model]\nvocab_size = 99\n").unwrap();
        let e = s.run_config(Variant::Ddl, 1).unwrap_err();
        assert!(e.contains("[model] vocab_size = 99") && e.contains("tokenizer's size"), "{e}");
        let s = spec("[model]\nd_modle = 3\n").unwrap();
        assert!(s.run_config(Variant::Ddl, 1).unwrap_err().contains("d_modle"));
    }
}
