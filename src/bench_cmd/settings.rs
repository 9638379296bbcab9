//! `ddl bench`'s model and training settings (`bench train`, `bench precision`): the preset's,
//! then `--config` and `--set`, checked as `ddl train` checks them, and the settings a
//! benchmark does not use refused by name.

use anyhow::Result;

use crate::train_cmd::preset_with_config;

/// The model and training settings `bench train` times: the preset's for the variant, then
/// `--config`'s tables and the `--set` overrides, checked as `ddl train` checks them.
pub(crate) fn bench_config(
    preset: &str,
    variant: &str,
    config: Option<&std::path::Path>,
    sets: &[String],
) -> Result<(ddl::model::ModelConfig, ddl::train::TrainConfig)> {
    let run =
        checked_settings("bench train", " (and --against)", preset, variant, config, sets, unused_settings, false)?;
    Ok((run.model, run.train))
}

/// A benchmark's run settings: the preset's for the variant, then `--config`'s tables and the
/// `--set` overrides, each step's settings passed to `check(keys, what)` (what the benchmark
/// would ignore or sets itself): those it changes, and those a `--set` names even at the value
/// they have (`--set train.precision=f32` where the benchmark runs f16 too), and with
/// `config_names` those `--config` names; the variant only from `--variant`; validated as
/// `ddl train` validates them.
#[allow(clippy::too_many_arguments)]
pub(super) fn checked_settings(
    bench: &str,
    variant_flags: &str,
    preset: &str,
    variant: &str,
    config: Option<&std::path::Path>,
    sets: &[String],
    check: fn(&[String], &str) -> Result<()>,
    config_names: bool,
) -> Result<ddl::train::RunConfig> {
    let v = ddl::model::Variant::parse(variant).map_err(anyhow::Error::msg)?;
    let mut run = preset_with_config(Some(preset), Some(v), config)?;
    let plain = ddl::train::RunConfig::preset(preset, v)?;
    let mut keys = changed_settings(&plain, &run)?;
    if config_names && let Some(path) = config {
        keys.extend(config_keys(path).into_iter().filter(|k| !keys.contains(k)).collect::<Vec<_>>());
    }
    check(&keys, "--config")?;
    for kv in sets {
        let before = run.clone();
        run.set(kv).map_err(anyhow::Error::msg)?;
        // The setting a --set names is the one said: those that follow it (train.min_lr follows
        // train.lr) were listed beside it, as if given too; a model setting's changes are checked.
        let keys = match set_key(&before, kv) {
            Some(k) => vec![k],
            None => changed_settings(&before, &run)?,
        };
        check(&keys, &format!("--set {kv}"))?;
    }
    if run.model.variant != v {
        anyhow::bail!(
            "{bench}: --config / --set give model.variant = {}, but --variant is {variant}: \
             name the variant with --variant{variant_flags} only",
            run.model.variant
        );
    }
    run.validate()?;
    Ok(run)
}

/// `bench train` times steps on random tokens with its own optimizer settings: of the run's
/// settings it takes the model's and these (the flags `--f16-state` and `--precision` take the
/// storage and precision).
pub(super) const BENCH_TRAIN_KEYS: [&str; 4] = ["batch_size", "seq_len", "recompute", "head_chunk"];

/// The run's data settings, named by their own names (the training settings are `train.KEY`).
pub(super) const DATA_KEYS: [&str; 5] = ["corpus", "tokenizer", "data", "data_format", "init_from"];

/// The settings `after` changes against `before`: `train.KEY` for each training setting, and the
/// run's data settings by name (the model's are not listed).
pub(super) fn changed_settings(before: &ddl::train::RunConfig, after: &ddl::train::RunConfig) -> Result<Vec<String>> {
    let (b, a) = (serde_json::to_value(&before.train)?, serde_json::to_value(&after.train)?);
    let mut changed: Vec<String> = a
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, v)| b.get(k.as_str()) != Some(v))
        .map(|(k, _)| format!("train.{k}"))
        .collect();
    for (key, x, y) in [
        ("corpus", &before.corpus, &after.corpus),
        ("tokenizer", &before.tokenizer, &after.tokenizer),
        ("data", &before.data, &after.data),
        ("data_format", &before.data_format, &after.data_format),
        ("init_from", &before.init_from, &after.init_from),
    ] {
        if x != y {
            changed.push(key.to_string());
        }
    }
    Ok(changed)
}

/// The setting `--set KEY=VALUE` names, as [`changed_settings`] names it (`train.KEY`, a data
/// setting's name; `--set` takes a training setting's bare name too); `None` for the model's.
pub(super) fn set_key(run: &ddl::train::RunConfig, kv: &str) -> Option<String> {
    let k = kv.split_once('=').map_or(kv, |(k, _)| k).trim();
    if k.starts_with("train.") || DATA_KEYS.contains(&k) {
        return Some(k.to_string());
    }
    let train = serde_json::to_value(&run.train).ok()?;
    (!k.contains('.') && train.get(k).is_some()).then(|| format!("train.{k}"))
}

/// The training and data settings the `--config` file `path` names, as [`changed_settings`]
/// names them (a file that does not read names none: `--config` itself was read before).
pub(super) fn config_keys(path: &std::path::Path) -> Vec<String> {
    let Some(table) = std::fs::read_to_string(path).ok().and_then(|t| toml::from_str::<toml::Table>(&t).ok()) else {
        return Vec::new();
    };
    let train = table.get("train").and_then(|t| t.as_table()).into_iter().flat_map(|t| t.keys());
    let mut keys: Vec<String> = train.map(|k| format!("train.{k}")).collect();
    keys.extend(DATA_KEYS.iter().filter(|k| table.contains_key(**k)).map(|k| k.to_string()));
    keys
}

/// Which of `--set` and `--config` gives the training setting `key` (`train.FIELD`), if either
/// names it (even at the value it has): a flag that gives it too contradicts them.
pub(super) fn named_by(config: Option<&std::path::Path>, sets: &[String], key: &str) -> Option<&'static str> {
    if crate::train_cmd::set_names(sets, key) {
        return Some("--set");
    }
    config.filter(|p| config_keys(p).iter().any(|k| k == key)).map(|_| "--config")
}

/// Settings `bench train` would ignore, among `keys` (those `what` changes or names): refused,
/// naming what it does take (it was timed as if the setting were not there).
pub(super) fn unused_settings(keys: &[String], what: &str) -> Result<()> {
    let changed: Vec<&String> =
        keys.iter().filter(|k| !k.strip_prefix("train.").is_some_and(|k| BENCH_TRAIN_KEYS.contains(&k))).collect();
    if changed.is_empty() {
        return Ok(());
    }
    let flag = match changed[0].as_str() {
        "train.precision" => " (give --precision for the step's precision)",
        "train.state_f16" => " (give --f16-state for f16 states)",
        _ => "",
    };
    // What to do: a --set is dropped; a file is cut down (a run's config.toml names its corpus and
    // optimizer settings, so it was refused with no way out said).
    let remedy = if what.starts_with("--config") {
        "; leave the others out of the file (to time a run's model: a file with its config.toml's [model] table)"
    } else {
        "; drop that --set"
    };
    anyhow::bail!(
        "{what}: bench train times steps on random tokens with its own optimizer settings, so {} would be \
         ignored{flag}; it takes the model's settings and train.{} (--batch, --seq, --recompute, --head-chunk){remedy}",
        changed.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", "),
        BENCH_TRAIN_KEYS.join(", train.")
    )
}

/// A setting `bench precision` sets in each run itself, among `keys` (those `what` changes or
/// names, even at the value it has: the benchmark's value would replace it without a word):
/// refused, naming the flag that gives it.
pub(super) fn precision_own(keys: &[String], what: &str) -> Result<()> {
    if let Some((key, why)) = ddl::bench::precision::OWN_SETTINGS.iter().find(|(k, _)| keys.iter().any(|c| c == k)) {
        anyhow::bail!("{what}: bench precision sets {key} in each run itself ({why}); leave it out");
    }
    Ok(())
}

/// The base settings of `bench precision`'s runs: the preset's for the variant, then `--config`'s
/// tables and the `--set` overrides, checked as `ddl train` checks them; settings the benchmark
/// sets itself are refused, naming what gives them.
pub(crate) fn precision_config(
    preset: &str,
    variant: &str,
    config: Option<&std::path::Path>,
    sets: &[String],
) -> Result<ddl::train::RunConfig> {
    checked_settings("bench precision", "", preset, variant, config, sets, precision_own, true)
}
