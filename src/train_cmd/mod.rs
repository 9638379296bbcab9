//! `ddl train`: the command's settings (preset, `--config`, `--set`, flags; a resumed run's
//! saved settings), the checks made before the adapter opens, and the report at the end (the
//! library's `ddl::train` trains).

use anyhow::{Context, Result};

use crate::cli::*;
#[cfg(feature = "mpi")]
use ddl::gpu::BackendChoice;

mod mpi;
mod report;
mod settings;
use mpi::*;
use report::*;
use settings::*;
pub(crate) use settings::{preset_with_config, set_names};

/// `vocab_size` under `[model]` in `ddl train --config` (a run's own `config.toml` has it): the
/// tokenizer sizes the vocabulary, so the value is taken only as what the tokenizer must give
/// ([`check_config_vocab`]); one that is not a whole number is refused here.
fn config_vocab_size(path: &std::path::Path) -> Result<Option<usize>> {
    let Some(v) = config_model_table(path).and_then(|m| m.get("vocab_size").cloned()) else { return Ok(None) };
    match v.as_integer().and_then(|n| usize::try_from(n).ok()) {
        Some(n) => Ok(Some(n)),
        None => anyhow::bail!(
            "--config {}: `vocab_size = {v}` under [model]: expected the tokenizer's vocabulary size, a whole number \
             (`ddl train` takes the size from the tokenizer; drop the line to let it)",
            path.display()
        ),
    }
}

/// The corpus, tokenizer and data a new run names exist (before the adapter opens). Paths are
/// taken from the current directory, a `--config` file's too; one that exists only beside the
/// `--config` file is named in the error.
fn check_inputs(run: &ddl::train::RunConfig, a: &TrainArgs) -> Result<()> {
    use std::path::Path;
    let inputs = [
        ("--corpus", "corpus", a.corpus.is_some(), run.corpus.as_str(), run.corpus != ddl::train::data::DEFAULT_CORPUS),
        ("--tokenizer", "tokenizer", a.tokenizer.is_some(), run.tokenizer.as_str(), run.tokenizer != "char"),
        // (A glob's files are looked for when the data opens.)
        (
            "--data",
            "data",
            a.data.is_some(),
            run.data.as_str(),
            !run.data.is_empty() && !run.data.contains(['*', '?', '[']),
        ),
    ];
    use ddl::train::data::{PathProblem, path_problem};
    for (flag, key, by_flag, value, named) in inputs {
        let path = Path::new(value);
        match path_problem(path).filter(|_| named) {
            None => continue,
            Some(PathProblem::Device) => {
                anyhow::bail!("{key} = {value}: a device, not a file or folder (a device such as /dev/zero never ends)")
            }
            Some(PathProblem::BrokenLink) => anyhow::bail!(
                "{key} = {value}: a symbolic link that leads nowhere (its target is missing, or the links loop)"
            ),
            Some(PathProblem::Missing) => {}
        }
        let here = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_else(|_| ".".into());
        if by_flag {
            anyhow::bail!("{flag} {value}: {key} '{value}' does not exist (looked for from {here})");
        }
        match found_beside_config(key, path, a.config.as_deref(), &here) {
            Some(msg) => anyhow::bail!(msg),
            None => anyhow::bail!(
                "{key} = \"{value}\" (from --config or --set) does not exist (looked for from {here}; \
                 a relative path is taken from the current directory); fix the setting or pass {flag} PATH"
            ),
        }
    }
    // An empty corpus file: said before the adapter opens (under `--distributed mpi`, before MPI
    // starts and the ranks open theirs); it was said after, as "corpus '…' is empty" alone.
    let corpus = Path::new(&run.corpus);
    if run.data.is_empty() && corpus.is_file() && std::fs::metadata(corpus).is_ok_and(|m| m.len() == 0) {
        let flag = if a.corpus.is_some() { "--corpus" } else { "corpus =" };
        anyhow::bail!(
            "{flag} {}: the file is empty (0 bytes), nothing to train on; give a text file (without --corpus the run \
             trains on {})",
            run.corpus,
            ddl::train::data::DEFAULT_CORPUS
        );
    }
    // A folder as the tokenizer: a run's (its tokenizer is in its checkpoint) or any other.
    let tok = Path::new(&run.tokenizer);
    if run.tokenizer != "char" && tok.is_dir() {
        let flag = if a.tokenizer.is_some() { "--tokenizer" } else { "tokenizer =" };
        if tok.join(ddl::train::checkpoint::MODEL_FILE).is_file() {
            anyhow::bail!(
                "{flag} {}: a run's folder, whose tokenizer is in its checkpoint; train on it with its model \
                 (`--init-from {}`), or make shards with it (`ddl data prepare --tokenizer {} --out DIR CORPUS`, \
                 then `ddl train --data DIR`: a new model with that tokenizer)",
                run.tokenizer,
                ddl::shell_word(&run.tokenizer),
                ddl::shell_word(&run.tokenizer)
            );
        }
        anyhow::bail!(
            "{flag} {}: a folder; give a tokenizer file (tokenizer.json, as `ddl tokenizer train` writes one) or char",
            run.tokenizer
        );
    }
    Ok(())
}

/// `--tokenizer char` given for `--data` shards whose `meta.json` names a BPE tokenizer: `char`
/// (the default) means the shards' own there, so the flag would be ignored without a word.
fn refuse_char_for_bpe_shards(run: &ddl::train::RunConfig, a: &TrainArgs) -> Result<()> {
    if a.tokenizer.as_deref() != Some("char") {
        return Ok(());
    }
    // (Shards that do not open are said so when the data opens.)
    if let Ok(Some((dir, meta))) = ddl::train::data::data_meta(run)
        && let Ok(tok) = ddl::tokenizer::Tokenizer::from_json(&meta.tokenizer)
        && tok.kind() != "char"
    {
        anyhow::bail!(
            "--tokenizer char: the shards in {} were made with a {} tokenizer of {} tokens (their meta.json), which \
             they are trained with; drop --tokenizer",
            dir.display(),
            tok.kind(),
            tok.vocab_size()
        );
    }
    Ok(())
}

/// `ddl train --resume DIR`: a `DIR/config.toml` edited since the checkpoint was saved is said,
/// with the keys that differ (the checkpoint's settings are the run's, and config.toml is
/// written from them again; the edit was ignored and undone without a word).
fn note_edited_config(saved: &ddl::train::RunConfig, dir: &std::path::Path) {
    let path = dir.join("config.toml");
    let edited = match ddl::train::RunConfig::read_file(dir) {
        None => return,
        Some(Ok(edited)) => edited,
        // (A file that no longer reads as settings cannot be compared: the saved ones replace it.)
        Some(Err(e)) => {
            eprintln!(
                "note: {} does not read as a run's settings ({}); the run continues with the settings saved with \
                 the checkpoint and writes them to config.toml again",
                path.display(),
                e.message().trim()
            );
            return;
        }
    };
    let Ok(differ) = edited.resume_differences(saved) else { return };
    if !differ.is_empty() {
        let differ: Vec<String> =
            differ.iter().map(|(k, have, there)| format!("{k} {there} there, {have} saved")).collect();
        eprintln!(
            "note: {} differs from the settings saved with the checkpoint ({}); the run continues with the saved \
             ones and writes them to config.toml again: to change a setting, start a new run (or continue a copy \
             with --out) with --set",
            path.display(),
            differ.join(", ")
        );
    }
}

/// The number of processes an MPI launcher started this one among (Open MPI's
/// `OMPI_COMM_WORLD_SIZE`, MPICH's and Slurm's `PMI_SIZE`), when it set one.
pub(crate) fn launched_ranks() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"].iter().find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// This process's rank among those an MPI launcher started (`OMPI_COMM_WORLD_RANK`, `PMI_RANK`);
/// 0 when started alone.
fn launched_rank() -> usize {
    ["OMPI_COMM_WORLD_RANK", "PMI_RANK"].iter().find_map(|v| std::env::var(v).ok()?.trim().parse().ok()).unwrap_or(0)
}

pub(crate) fn train(dev: &DeviceArgs, a: TrainArgs) -> Result<()> {
    use ddl::train::{Show, TrainOptions};
    if a.distributed.is_none()
        && let Some(n) = launched_ranks().filter(|&n| n > 1)
    {
        // N independent runs into one folder: all but one were refused as "in use", naming no cause.
        anyhow::bail!(
            "started as one of {n} MPI processes (mpirun -n {n}) without --distributed mpi: each would train alone \
             into the same --out; add --distributed mpi for data-parallel training (docs/TRAINING.md), or run one \
             process without mpirun"
        );
    }
    let variant = a.variant.as_deref().map(ddl::model::Variant::parse).transpose().map_err(anyhow::Error::msg)?;
    // --resume DIR continues DIR; with --out NEW it continues a copy of DIR's checkpoint in NEW
    // (a branch: DIR, or a kept checkpoint of a run, stays as it is).
    let (out, from) = match (&a.resume, &a.out) {
        (Some(r), Some(o)) if !same_folder(r, o) => {
            refuse_inside_kept("--out", o)?;
            (o.clone(), Some(r.clone()))
        }
        (Some(r), _) => {
            if let Some(run) = ddl::train::checkpoint::kept_run_of(r) {
                anyhow::bail!(
                    "--resume {}: a kept checkpoint of the run in '{}': training in it would change it, and that run \
                     replaces its kept checkpoints as it goes on; continue it in a new folder with --out NEW_DIR",
                    r.display(),
                    run.display()
                );
            }
            (r.clone(), Some(r.clone()))
        }
        (None, Some(o)) => {
            refuse_inside_kept("--out", o)?;
            (o.clone(), None)
        }
        (None, None) => anyhow::bail!("--out DIR is required"),
    };
    let resume = from.is_some();
    // The step of the copy `--resume SRC --out NEW` made (removed again if the run cannot start).
    let mut branched = None;
    // A resumed run starts from its saved settings, which flags may repeat but not change.
    let saved = from.as_deref().map(ddl::train::RunConfig::saved).transpose().map_err(anyhow::Error::msg)?;
    // (Said once: by the first of a data-parallel run's processes.)
    if let (Some(saved), Some(dir), 0) = (&saved, &from, launched_rank()) {
        note_edited_config(saved, dir);
    }
    // --steps: given, or a resumed run's last target (what it was interrupted on the way to).
    let steps = match (a.steps, &from) {
        (Some(n), _) => n,
        // (--tokens: the step is resolved once the run's batch is known, below.)
        (None, _) if a.tokens.is_some() || a.epochs.is_some() => 0,
        (None, Some(src)) => ddl::train::saved_target(src).ok_or_else(|| {
            anyhow::anyhow!(
                "--resume {}: the checkpoint does not record the --steps it was trained towards (it was saved \
                 by an older ddl); pass --steps N",
                src.display()
            )
        })?,
        (None, None) => 200,
    };
    let init_from = match (&a.resume, &a.config) {
        (None, Some(path)) => config_init_from(path, a.init_from.as_deref())?.or(a.init_from.clone()),
        _ => a.init_from.clone(),
    };
    let a = TrainArgs { steps: Some(steps), init_from, ..a };
    let config_vocab = match &a.config {
        Some(path) => config_vocab_size(path)?,
        None => None,
    };
    let mut run = match &saved {
        Some(saved) => {
            let mut run = saved.clone();
            if let Some(p) = &a.preset
                && *p != run.preset
            {
                anyhow::bail!(
                    "--preset {p}: the run in '{}' trains preset {}; drop --preset to resume, or start a new run with --out",
                    from.as_ref().expect("resumed").display(),
                    run.preset
                );
            }
            if let Some(path) = &a.config {
                if let Some(v) = config_vocab.filter(|&v| v != run.model.vocab_size) {
                    anyhow::bail!(
                        "--config {}: `vocab_size = {v}` under [model], but the run in '{}' has a vocabulary of {} (its \
                         tokenizer's), which it keeps; drop the line",
                        path.display(),
                        from.as_ref().expect("resumed").display(),
                        run.model.vocab_size
                    );
                }
                let text = read_config(path)?;
                run.merge_toml(&text, &path.display().to_string()).map_err(anyhow::Error::msg)?;
            }
            run
        }
        None => match &a.init_from {
            None => preset_with_config(a.preset.as_deref(), variant, a.config.as_deref())?,
            Some(ck) => {
                // The checkpoint's model; the preset (the schedule's defaults) its run's unless given.
                let cfg = init_config(ck)?;
                if let Some(v) = variant
                    && v != cfg.variant
                {
                    anyhow::bail!(
                        "--variant {v}: --init-from {} holds a {} model, whose parameters a {v} model cannot take; \
                         drop --variant",
                        ck.display(),
                        cfg.variant
                    );
                }
                // A [model] table is refused by name (before it could be read as contradicting
                // the checkpoint's variant, which the user did not give as --variant).
                // (Bar the settings a fine-tune may change, as a fine-tune's own config.toml has
                // them.)
                let fixed = |m: &toml::Table| -> Vec<String> {
                    let mut m = m.clone();
                    m.retain(|k, _| !ddl::model::ModelConfig::FINE_TUNE_SETTINGS.contains(&k));
                    model_differences(&m, &cfg)
                };
                if let Some(path) = &a.config
                    && let Some(m) = config_model_table(path)
                    && !fixed(&m).is_empty()
                {
                    anyhow::bail!(
                        "--config {}: a [model] table changes the model ({}), which --init-from {} gives (its \
                         checkpoint's); drop the [model] settings",
                        path.display(),
                        fixed(&m).join("; "),
                        ck.display()
                    );
                }
                let saved = ddl::train::RunConfig::saved(ck).ok().map(|r| r.preset);
                let preset = a.preset.clone().or(saved);
                let mut run = preset_with_config(preset.as_deref(), Some(cfg.variant), a.config.as_deref())?;
                let plain = ddl::train::RunConfig::preset(&run.preset, cfg.variant)?;
                // (A [model] table that is the checkpoint's model, as a run's own config.toml
                // has, was let through above.)
                let checkpoints = a.config.as_deref().and_then(config_model_table).is_some_and(|m| !m.is_empty());
                if run.model != plain.model && !checkpoints {
                    anyhow::bail!(
                        "--config {}: a [model] table changes the model, which --init-from {} gives (its checkpoint's); \
                         drop the [model] settings",
                        a.config.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
                        ck.display()
                    );
                }
                // The checkpoint's model, with the fine-tune settings the [model] table names.
                let named = a.config.as_deref().and_then(config_model_table).unwrap_or_default();
                let mut model = cfg;
                if named.contains_key("label_smoothing") {
                    model.label_smoothing = run.model.label_smoothing;
                }
                if named.contains_key("max_seq_len") {
                    model.max_seq_len = run.model.max_seq_len;
                }
                if named.contains_key("rope_base") {
                    model.rope_base = run.model.rope_base;
                }
                run.model = model;
                run
            }
        },
    };
    // What the settings are without the flags: the defaults (the preset's, or the saved run's),
    // then --config and --set; the flags go on top. A flag that changes a setting that --config
    // or --set gave another value is refused (either way one of them would be ignored).
    let defaults = match &saved {
        Some(saved) => saved.clone(),
        None => ddl::train::RunConfig::preset(&run.preset, run.model.variant)?,
    };
    for kv in &a.sets {
        let key = kv.split_once('=').map(|(k, _)| k.trim()).unwrap_or(kv.as_str());
        // The tokenizer sizes the vocabulary when the run opens (trainer), so a set one would be
        // overwritten without a word.
        if matches!(key, "model.vocab_size" | "vocab_size") {
            anyhow::bail!(
                "--set {kv}: `ddl train` takes the vocabulary size from the tokenizer (the corpus's \
                 characters with --tokenizer char, or a tokenizer.json's vocabulary), so this setting \
                 would be ignored; drop it, or train a tokenizer of the size you want \
                 (`ddl tokenizer train --corpus FILE --vocab-size N --out tok.json`, then --tokenizer tok.json)"
            );
        }
        // A fine-tune keeps the checkpoint's model but the settings that fix no parameter
        // (`ModelConfig::FINE_TUNE_SETTINGS`); each other one is refused with its reason.
        let field = key.strip_prefix("model.").unwrap_or(key);
        if let Some(ck) = &a.init_from
            && (key.starts_with("model.") || key == "variant")
            && let Some(why) = ddl::model::ModelConfig::fixed_on_fine_tune(field)
        {
            anyhow::bail!(
                "--set {kv}: the model is --init-from {}'s and model.{field} keeps its value ({why}); drop it (on a \
                 fine-tune --set changes only model.{})",
                ck.display(),
                ddl::model::ModelConfig::FINE_TUNE_SETTINGS.join(", model.")
            );
        }
        if key == "preset" {
            anyhow::bail!(
                "--set {kv}: a preset is every default at once, chosen with --preset NAME (or `preset = \"NAME\"` in \
                 --config), not a setting --set changes"
            );
        }
        if key == "init_from_step" {
            anyhow::bail!(
                "--set {kv}: init_from_step is what a fine-tune records (the step of the --init-from checkpoint \
                 it started from), not a setting; drop it"
            );
        }
        // (It was "unknown key 'init_from'", a key config.toml and --config take, without the flag.)
        if key == "init_from" {
            anyhow::bail!(
                "--set {kv}: the checkpoint a run starts from is given with --init-from DIR (or `init_from = \"DIR\"` \
                 in --config), not with --set"
            );
        }
        let before = toml::Table::try_from(&run).ok();
        run.set(kv).map_err(anyhow::Error::msg)?;
        // A --set over a value the --config file gives: the --set wins (it comes after the file),
        // said once (it replaced the file's value without a word).
        if let (Some(path), Some(before), Ok(after)) = (&a.config, before, toml::Table::try_from(&run)) {
            for (key, old, _) in changed_values(&before, &after) {
                // (Said once under mpirun, by the first rank.)
                if config_value(path, &key).is_some() && launched_rank() == 0 {
                    eprintln!(
                        "note: --set {kv} replaces {key} = {old} of --config {} (a --set comes after the file)",
                        path.display()
                    );
                }
            }
        }
    }
    let without_flags = run.clone();
    if let Some(c) = &a.corpus {
        run.corpus = c.clone();
    }
    if let Some(t) = &a.tokenizer {
        run.tokenizer = t.clone();
    }
    if let Some(d) = &a.data {
        run.data = d.clone();
    }
    if let Some(f) = &a.data_format {
        ddl::train::shards::Format::parse(f).map_err(anyhow::Error::msg)?;
        run.data_format = f.clone();
    }
    if let Some(v) = variant {
        run.model.variant = v;
    }
    if let Some(ck) = &a.init_from {
        // A new run in the folder it starts from (or one that holds it) would replace its own
        // source (with --overwrite; without, the folder is refused as holding a run).
        if let (Ok(src), Ok(dst)) = (ck.canonicalize(), out.canonicalize())
            && src.starts_with(&dst)
        {
            anyhow::bail!(
                "--init-from {} --out {}: the new run would replace the run it starts from; choose another --out",
                ck.display(),
                out.display()
            );
        }
        // (Absolute: config.toml records where the parameters came from.)
        run.init_from = std::fs::canonicalize(ck).unwrap_or_else(|_| ck.clone()).display().to_string();
    }
    if let Some(s) = a.seed {
        run.train.seed = s;
    }
    if a.skip_nonfinite {
        run.train.skip_nonfinite = true;
    }
    if a.f16_state {
        run.train.state_f16 = true;
    }
    if let Some(p) = a.precision {
        run.train.precision = p;
    }
    if a.recompute {
        run.train.recompute = true;
    }
    if let Some(rows) = a.head_chunk {
        run.train.head_chunk = rows;
    }
    let flags = [
        ("--corpus", "corpus"),
        ("--tokenizer", "tokenizer"),
        ("--data", "data"),
        ("--data-format", "data_format"),
        ("--variant", "model.variant"),
        ("--seed", "train.seed"),
        ("--skip-nonfinite", "train.skip_nonfinite"),
        ("--f16-state", "train.state_f16"),
        ("--precision", "train.precision"),
        ("--recompute", "train.recompute"),
        ("--head-chunk", "train.head_chunk"),
    ];
    let (d, w, f) = (settings_table(&defaults)?, settings_table(&without_flags)?, settings_table(&run)?);
    for (flag, key) in flags {
        let get = |t: &toml::Table| -> Option<toml::Value> {
            match key.split_once('.') {
                Some((table, k)) => t.get(table)?.get(k).cloned(),
                None => t.get(key).cloned(),
            }
        };
        // (Given by --set or --config, even at the default's value: the flag would override it
        // without a word.)
        let by_set = set_names(&a.sets, key);
        let named = by_set || a.config.as_deref().is_some_and(|p| config_value(p, key).is_some());
        let (default, explicit, last) = (get(&d), get(&w), get(&f));
        if (named || explicit != default) && last != explicit {
            let show = |v: Option<toml::Value>| v.map_or("(unset)".into(), |v| v.to_string());
            let remedy = if by_set {
                "drop one of them".to_string()
            } else {
                // (A run's config.toml names every setting; a --set overrides the file.)
                format!("drop one of them (a --set overrides the file: --set {key}=VALUE in place of {flag})")
            };
            anyhow::bail!(
                "{flag} gives {key} = {} but {} gives {key} = {}: {remedy}",
                show(last),
                if by_set { "--set" } else { "--config" },
                show(explicit)
            );
        }
    }
    if let (Some(saved), Some(dir)) = (&saved, &from) {
        // (A changed setting would otherwise be ignored without a word.)
        run.check_resume(saved, dir).map_err(anyhow::Error::msg)?;
    }
    let branch = from.as_deref().filter(|src| !same_folder(src, &out));
    if let Some(src) = branch
        && a.distributed.is_some()
    {
        // (Every rank runs this command; the copy is one process's job.)
        anyhow::bail!(
            "--resume {} --out {}: continuing a copy is not done with --distributed; copy the folder first \
             (cp -r {} {}) and resume the copy",
            src.display(),
            out.display(),
            src.display(),
            out.display()
        );
    }
    if !resume {
        // Every setting is checked before the adapter opens or anything is written.
        run.validate().map_err(|mut e| {
            // The model is the checkpoint's with --init-from, its context too unless --set
            // model.max_seq_len raises it.
            if let Some(ck) = &a.init_from
                && e.key == "train.seq_len"
            {
                e.remedy = format!(
                    "lower it (--set train.seq_len={}): the context is --init-from {}'s model's, or raise it (--set \
                     model.max_seq_len={}; the RoPE table it sizes has no parameters)",
                    run.model.max_seq_len,
                    ck.display(),
                    e.value
                );
            }
            // A value that came from the --config file (not --set, not a flag): the file named.
            match &a.config {
                Some(path) if config_gave(path, &e.key, &e.value, &a.sets) => {
                    anyhow::anyhow!("--config {}: {e}", path.display())
                }
                _ => e.into(),
            }
        })?;
        check_inputs(&run, &a)?;
        refuse_char_for_bpe_shards(&run, &a)?;
        check_init_tokenizer(&run, &a)?;
        if let (Some(given), Some(path), None) = (config_vocab, &a.config, &a.init_from) {
            check_config_vocab(&run, path, given)?;
        }
    }
    // A resumed run's data that cannot be read (gone from where it was, a malformed data.json):
    // refused before the adapter opens (a finished run may still say so and sample, below).
    let resume_refusal = from
        .as_deref()
        .and_then(|src| ddl::train::resume_data_problem(&run, src, a.corpus.is_some(), a.data.is_some()));
    // --tokens / --epochs: the step where the run has seen that many tokens, or passes over its
    // training split (its global batch's tokens a step), said with how it came to it.
    // (--epochs: the epochs by the last step, for a dry run's plan whose corpus is not cached.)
    let mut by_epochs = None;
    let per_step = run.train.tokens_per_step();
    let resolved = match (a.tokens, a.epochs) {
        (Some(tokens), _) => {
            let steps = usize::try_from(tokens.div_ceil(per_step)).unwrap_or(usize::MAX);
            let all = ddl::train::describe::count((steps as u64).saturating_mul(per_step));
            Some((steps, format!("--tokens {}", ddl::train::describe::count(tokens)), format!("{all} tokens in all")))
        }
        (None, Some(epochs)) => {
            let train = ddl::train::data::train_tokens(&run, from.as_deref(), !a.dry_run)?;
            let steps = ddl::train::data::epoch_steps(epochs, train, per_step);
            by_epochs = Some(steps as f64 * per_step as f64 / train as f64);
            let split = format!("{epochs} × the training split's {} tokens", ddl::train::describe::count(train));
            Some((steps, format!("--epochs {epochs}"), split))
        }
        (None, None) => None,
    };
    let (steps, a) = match resolved {
        Some((steps, flag, all)) => {
            if launched_rank() == 0 {
                use ddl::train::describe::count;
                eprintln!(
                    "{flag}: {} {} of {} tokens (batch_size {} × seq_len {} × grad_accum {}), {all}",
                    count(steps as u64),
                    if steps == 1 { "step" } else { "steps" },
                    count(per_step),
                    run.train.batch_size,
                    run.train.seq_len,
                    run.train.grad_accum,
                );
            }
            (steps, TrainArgs { steps: Some(steps), ..a })
        }
        None => (steps, a),
    };
    // `--distributed mpi`'s own flags: a dry run refuses what the run would (it said nothing of
    // a `--mpi-bucket-mib -1` the run then refused).
    if a.distributed == Some(Distributed::Mpi) {
        check_mpi_flags(&a)?;
    }
    if a.dry_run {
        // Under `mpirun -n N … --distributed mpi` every process makes the dry run: the first says
        // it, and the N ranks are checked as the run checks them (a global batch they cannot share).
        let say = launched_rank() == 0;
        let ranks = launched_ranks().filter(|_| a.distributed.is_some());
        let unshared = ranks.and_then(|n| ddl::train::ranks_share(&run.train, n, resume).err());
        let plan = match (ddl::train::plan::dry_run(&run, steps, &out, from.as_deref(), a.overwrite), resume_refusal) {
            // (Its data unreadable, the plan cannot be made: the reason is the plan.)
            (Err(_), Some(why)) => {
                if say {
                    println!("dry run (nothing trained, nothing written): it would not start: {why}");
                }
                anyhow::bail!("the run would not start: {why}");
            }
            (plan, why) => {
                let mut plan = plan?;
                plan.epochs = plan.epochs.or(by_epochs);
                plan.refused = plan.refused.or(why).or(unshared);
                plan
            }
        };
        if say {
            print!("{}", plan.text());
        }
        // (A command that would be refused fails its dry run too, for scripts that check first.)
        if let Some(why) = plan.refused {
            anyhow::bail!("the run would not start: {why}");
        }
        return Ok(());
    }
    // Nothing to train (the checkpoint at or past --steps): said, with the run's results, without
    // opening the device for training and without writing anything (not when the final
    // evaluation is still to be made up); `--sample N` then samples the run's model. Under
    // `--distributed mpi` too, before MPI starts and the ranks open their adapters (it was said
    // after); under mpirun the first process says it and samples, the others end quietly.
    if let Some(src) = from.as_deref()
        && let Ok(at) = ddl::train::checkpoint::saved_step(src)
        && at >= steps
    {
        let mut done = ddl::train::finished_summary(src, at);
        // A finished run whose metrics.jsonl lost the final evaluation summary.json holds (a copy
        // cut short, a torn last line) is resumed to make it again (nothing trained), so that its
        // curves have it: `ddl plot` sends such a run to `--resume`. (Under MPI too: the ranks
        // evaluate together.)
        if at == steps && branch.is_none() && ddl::train::final_evaluation_lost(src, at) {
            if launched_rank() == 0 {
                eprintln!(
                    "note: {} lacks the final evaluation of step {at} that summary.json holds (the file was cut short \
                     or replaced): it is made again, nothing is trained",
                    src.join("metrics.jsonl").display()
                );
            }
            done = None;
        }
        // (--tokens said as given, with the step it came to.)
        let given = match (a.tokens, a.epochs) {
            (Some(t), _) => format!("--tokens {}: step {steps}", ddl::train::describe::count(t)),
            (_, Some(e)) => format!("--epochs {e}: step {steps}"),
            _ => format!("--steps {steps}"),
        };
        let said = if branch.is_some() {
            Some(format!(
                "nothing to train: {} is at step {at} ({given}); nothing was copied to {}: pass --steps above \
                 {at} to continue it there",
                src.display(),
                out.display()
            ))
        } else if at > steps {
            Some(format!(
                "nothing to train: the run is at step {at}, past {given}; pass --steps above {at} to continue it"
            ))
        } else {
            done.as_ref().map(|_| {
                format!(
                    "nothing to train: the run finished at step {at} ({given}), its final evaluation \
                     included; pass a larger --steps to continue it"
                )
            })
        };
        if let Some(said) = said {
            if launched_rank() != 0 {
                return Ok(());
            }
            println!("{said}");
            if let Some((summary, from_metrics)) = &done {
                if *from_metrics {
                    println!(
                        "(its summary.json is missing or unreadable: the results below are metrics.jsonl's final \
                         evaluation)"
                    );
                }
                print_results(src, summary);
            }
            return print_sample(dev, src, a.sample);
        }
    }
    // A new run that stops before its schedule's end (a short --steps on a preset's decay_steps):
    // said once as it starts, with the setting that fits the schedule to it (a resume continues
    // the schedule it has).
    let schedule_note = |run: &ddl::train::RunConfig| {
        if from.is_none()
            && launched_rank() == 0
            && let Some(n) = run.train.unfinished_schedule(steps)
        {
            eprintln!("note: {n}");
        }
    };
    // A new run's corpus is tokenised and cached (CPU work) before the adapter opens, or MPI
    // starts: one too short for a validation split, or for a sequence, is refused without an
    // adapter (it was refused after the adapter opened). Ctrl-C meanwhile: as in the run (130).
    let check_new_data = |run: &ddl::train::RunConfig| match resume {
        true => Ok(()),
        false => ddl::train::check_new_run_data(run),
    };
    if a.distributed == Some(Distributed::Mpi) {
        if let Some(why) = resume_refusal {
            anyhow::bail!(why);
        }
        // A global batch the launcher's ranks cannot share, said before MPI starts, the adapter
        // opens and the data is read (the run checks it again against MPI's own rank count).
        if let Some(n) = launched_ranks() {
            ddl::train::ranks_share(&run.train, n, resume).map_err(anyhow::Error::msg)?;
        }
        check_new_data(&run)?;
        schedule_note(&run);
        return train_mpi(dev, &a, run, out, resume);
    }
    if let Some(why) = resume_refusal {
        anyhow::bail!(why);
    }
    check_new_data(&run)?;
    schedule_note(&run);
    let gpu = dev.open().context("opening the GPU")?;
    ddl::kernels::matmul::autotune::set_enabled(!dev.no_autotune);
    // The sample after the run needs the decode caches: refused now, not after the training.
    if a.sample > 0 {
        ddl::model::decode::check_decode_cache(&run.model, &gpu)
            .map_err(|e| anyhow::anyhow!("--sample {}: {e}; drop --sample to train the run", a.sample))?;
    }
    if let Some(src) = branch {
        let copied = ddl::train::branch_run(src, &out)?;
        eprintln!("continuing {} in {} (a copy of its checkpoint at step {copied})", src.display(), out.display());
        branched = Some(copied);
    }
    // Its output's reader gone (`ddl train … | head`), the run saves and stops as on Ctrl-C.
    ddl::train::stop_on_broken_pipe();
    let summary = ddl::train::train(
        gpu.clone(),
        TrainOptions { run, steps, out: out.clone(), resume, overwrite: a.overwrite, show: Show::Bar },
    )
    .inspect_err(|_| {
        // A copy that trained no step (the run could not start) is removed again.
        if let Some(step) = branched
            && ddl::train::logged_steps_after(&out, step) == 0
        {
            let _ = std::fs::remove_dir_all(&out);
        }
    });
    let summary = match summary {
        // Ctrl-C while the corpus was tokenised: said so, and 130 as a run Ctrl-C stopped.
        Err(ddl::train::TrainError::Data(e @ ddl::train::data::DataError::CacheInterrupted(_))) => {
            eprintln!("{e}");
            return Err(crate::Interrupted.into());
        }
        // A resumed run's corpus is its own: restored there, or given where it is now (its
        // tokens are checked against data.json).
        Err(ddl::train::TrainError::Data(ddl::train::data::DataError::Missing(p))) if resume && a.corpus.is_none() => {
            anyhow::bail!(ddl::train::resumed_corpus_missing(&p, &out.join("config.toml")));
        }
        s => s?,
    };
    report_training(dev, &a, &out, &summary)?;
    if summary.interrupted {
        return Err(crate::Interrupted.into());
    }
    Ok(())
}

/// Refuses an output (`flag PATH`) inside a run's `checkpoints/` folder, at any depth: the run
/// prunes and replaces what is there.
pub(crate) fn refuse_inside_kept(flag: &str, path: &std::path::Path) -> Result<()> {
    match ddl::train::checkpoint::kept_refusal(flag, path) {
        Some(e) => Err(anyhow::Error::msg(e)),
        None => Ok(()),
    }
}

/// A run's settings as a TOML table (for comparing one key across versions of them).
fn settings_table(run: &ddl::train::RunConfig) -> Result<toml::Table> {
    toml::Table::try_from(run).map_err(|e| anyhow::anyhow!("the run settings: {e}"))
}

/// Whether two paths name the same folder (the same path, or both exist and resolve alike).
fn same_folder(a: &std::path::Path, b: &std::path::Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}
