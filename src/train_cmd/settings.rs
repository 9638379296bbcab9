//! A run's settings before anything runs: the preset, `--config` (its model table checked against
//! the preset, the tokenizer and `--init-from`), `--set`, and a fine-tune's source model.

use super::*;

/// A `vocab_size` given in `--config` (`given`, from the file `path`) against the vocabulary of
/// the tokenizer the run trains with (its data opened as the run will open it: a corpus's cached
/// set is made now, and found again by the run): a size the tokenizer does not give is refused,
/// as it would be ignored.
pub(super) fn check_config_vocab(run: &ddl::train::RunConfig, path: &std::path::Path, given: usize) -> Result<()> {
    let (_, tok) = ddl::train::data::open_for_run(run, None)?;
    if tok.vocab_size() != given {
        let which = if run.tokenizer == "char" || run.tokenizer.is_empty() {
            if run.data.is_empty() {
                format!("the characters of --corpus {}", run.corpus)
            } else {
                format!("the tokenizer of --data {}", run.data)
            }
        } else {
            format!("--tokenizer {}", run.tokenizer)
        };
        anyhow::bail!(
            "--config {}: `vocab_size = {given}` under [model], but the run's tokenizer ({which}) has {} tokens: \
             `ddl train` takes the vocabulary size from the tokenizer, so this setting would be ignored; drop it, or \
             train a tokenizer of the size you want (`ddl tokenizer train --corpus FILE --vocab-size N --out \
             tok.json`, then --tokenizer tok.json)",
            path.display(),
            tok.vocab_size()
        );
    }
    Ok(())
}

/// `init_from = "DIR"` in a `--config` file (a run's own `config.toml` has it when the run
/// started from a checkpoint): the `--init-from` it stands for, `flag` the one given (both given:
/// they must name the same checkpoint).
pub(super) fn config_init_from(
    path: &std::path::Path,
    flag: Option<&std::path::Path>,
) -> Result<Option<std::path::PathBuf>> {
    let Some(text) = std::fs::read_to_string(path).ok() else { return Ok(None) };
    let Some(v) = toml::from_str::<toml::Table>(&text).ok().and_then(|t| t.get("init_from").cloned()) else {
        return Ok(None);
    };
    let Some(dir) = v.as_str() else {
        anyhow::bail!(
            "--config {}: `init_from = {v}`: expected the checkpoint folder the run starts from, a string (quoted in \
             TOML), as --init-from DIR gives it",
            path.display()
        );
    };
    if dir.is_empty() {
        return Ok(None);
    }
    let dir = std::path::PathBuf::from(dir);
    // Missing: said as the file's line, as a corpus's is (it was said as `--init-from DIR`, a
    // flag not given), with the folder where it exists only beside the file.
    if flag.is_none() && !dir.exists() {
        let here = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_else(|_| ".".into());
        match found_beside_config("init_from", &dir, Some(path), &here) {
            Some(msg) => anyhow::bail!("--config {}: {msg}", path.display()),
            None => anyhow::bail!(
                "--config {}: init_from = \"{}\": no such checkpoint folder (looked for from {here}; a relative path is \
                 taken from the current directory); give a run's folder or one of its checkpoints/ folders, or drop \
                 the line to start a new model",
                path.display(),
                dir.display()
            ),
        }
    }
    if let Some(f) = flag {
        let same = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        if same(f) != same(&dir) {
            anyhow::bail!(
                "--init-from {} and --config {} (init_from = \"{}\") name different checkpoints to start from; drop \
                 one of them",
                f.display(),
                path.display(),
                dir.display()
            );
        }
    }
    Ok(Some(dir))
}

/// The settings of a `--config` `[model]` table that are not `cfg`'s, said as `key = value where
/// the checkpoint has value` (none: the table of a run's own config.toml, given again with the
/// checkpoint it started from).
pub(super) fn model_differences(table: &toml::Table, cfg: &ddl::model::ModelConfig) -> Vec<String> {
    let own = toml::Table::try_from(cfg).unwrap_or_default();
    table
        .iter()
        .filter_map(|(k, v)| {
            let same = match (own.get(k), v) {
                (Some(toml::Value::Float(a)), toml::Value::Integer(b)) => *a == *b as f64,
                (Some(have), v) => have == v,
                (None, _) => false,
            };
            (!same).then(|| match own.get(k) {
                Some(have) => format!("{k} = {v} where the checkpoint has {have}"),
                None => format!("{k} = {v}"),
            })
        })
        .collect()
}

/// What the `--config` file `path` gives `key` (`table.field`, or a top-level key), if it reads.
pub(super) fn config_value(path: &std::path::Path, key: &str) -> Option<toml::Value> {
    let table = std::fs::read_to_string(path).ok().and_then(|t| toml::from_str::<toml::Table>(&t).ok())?;
    match key.split_once('.') {
        None => table.get(key).cloned(),
        Some((t, field)) => table.get(t)?.as_table()?.get(field).cloned(),
    }
}

/// The settings (`table.field`, or a top-level key) whose values differ between two settings
/// tables: (key, value in `a`, value in `b`).
pub(super) fn changed_values(a: &toml::Table, b: &toml::Table) -> Vec<(String, toml::Value, toml::Value)> {
    let mut out = Vec::new();
    for (k, va) in a {
        match (va, b.get(k)) {
            (toml::Value::Table(ta), Some(toml::Value::Table(tb))) => {
                for (f, x) in ta {
                    if let Some(y) = tb.get(f).filter(|y| *y != x) {
                        out.push((format!("{k}.{f}"), x.clone(), y.clone()));
                    }
                }
            }
            (x, Some(y)) if x != y => out.push((k.clone(), x.clone(), y.clone())),
            _ => {}
        }
    }
    out
}

/// Whether one of the `--set`s `sets` names `key` (`table.field`; `--set` takes the bare field
/// too).
pub(crate) fn set_names(sets: &[String], key: &str) -> bool {
    let field = key.rsplit('.').next().unwrap_or(key);
    sets.iter().any(|kv| {
        let k = kv.split_once('=').map(|(k, _)| k.trim()).unwrap_or(kv);
        k == key || k == field
    })
}

/// Whether the `--config` file `path` sets `key` (`table.field`) to `value` (as the setting's
/// error writes it) and no `--set` of `sets` gives it after.
pub(super) fn config_gave(path: &std::path::Path, key: &str, value: &str, sets: &[String]) -> bool {
    let same = |v: &toml::Value| match v {
        toml::Value::String(s) => s == value,
        // (NaN is no number's equal, its own neither: `lr = nan` was not named as the file's.)
        toml::Value::Float(f) => value.parse::<f64>().is_ok_and(|x| x == *f || (x.is_nan() && f.is_nan())),
        v => v.to_string() == value,
    };
    config_value(path, key).is_some_and(|v| same(&v)) && !set_names(sets, key)
}

/// The `[model]` table of a `--config` file (`None`: no such table, or a file that does not read,
/// which [`preset_with_config`] then reports).
pub(super) fn config_model_table(path: &std::path::Path) -> Option<toml::Table> {
    let text = std::fs::read_to_string(path).ok()?;
    let table: toml::Table = toml::from_str(&text).ok()?;
    table.get("model")?.as_table().cloned()
}

/// The text of the `--config` file `path`: a folder (a run's, whose settings are its
/// `config.toml`), a path to nothing and bytes that are not UTF-8 are said with what to give
/// (a folder was "Is a directory (os error 21)", and a resumed run's file not UTF-8 "stream did
/// not contain valid UTF-8").
pub(super) fn read_config(path: &std::path::Path) -> Result<String> {
    if path.is_dir() {
        let inside = path.join("config.toml");
        let hint = if inside.is_file() {
            format!("; its settings file is {} (a run's folder keeps them there)", inside.display())
        } else {
            String::new()
        };
        anyhow::bail!(
            "--config {}: a folder, not a settings file: give a TOML file of [model] and [train] tables{hint}",
            path.display()
        );
    }
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => anyhow::anyhow!(
            "--config {}: no such file (a TOML file of [model] and [train] tables, e.g. a run's config.toml; a \
             relative path is taken from the current directory)",
            path.display()
        ),
        _ => anyhow::anyhow!("--config {}: cannot read it: {e}", path.display()),
    })?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "--config {}: not UTF-8 text (byte {} is not part of a UTF-8 character): save the file as UTF-8",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// A preset's settings for a variant with a `--config` file's tables over them (`ddl train`,
/// `ddl bench train`). The preset and variant are the flags', else the file's (`preset = …`,
/// `[model] variant = …`: the defaults are the preset's for that variant), else tiny and ddl;
/// a flag and the file naming different ones is an error.
pub(crate) fn preset_with_config(
    preset: Option<&str>,
    variant: Option<ddl::model::Variant>,
    config: Option<&std::path::Path>,
) -> Result<ddl::train::RunConfig> {
    let file = config
        .map(|path| {
            let text = read_config(path)?;
            let table: toml::Table = toml::from_str(&text).map_err(|e| {
                // (The parser calls an integer beyond 64 bits an "invalid type".)
                let hint = if e.to_string().contains("as i128") {
                    "; TOML integers are at most 9223372036854775807 (and each setting's own range is smaller)"
                } else {
                    // (A text file given by mistake read "key with no value, expected `=`" alone.)
                    "\n--config takes a TOML file of [model] and [train] tables (a run's config.toml, say): mend the \
                     line shown, or give such a file"
                };
                anyhow::anyhow!("{}: {}{hint}", path.display(), e.to_string().trim_end())
            })?;
            Ok::<_, anyhow::Error>((path, text, table))
        })
        .transpose()?;
    let in_file = |get: &dyn Fn(&toml::Table) -> Option<String>| file.as_ref().and_then(|(_, _, t)| get(t));
    let file_preset = in_file(&|t| t.get("preset")?.as_str().map(String::from));
    let file_variant = in_file(&|t| t.get("model")?.get("variant")?.as_str().map(String::from));
    let shown = || file.as_ref().map(|(p, _, _)| p.display().to_string()).unwrap_or_default();
    let preset_flag = preset;
    let preset = match (preset, file_preset.as_deref()) {
        (Some(a), Some(b)) if a != b => {
            anyhow::bail!("--preset {a} contradicts `preset = \"{b}\"` in --config {}: drop one of them", shown())
        }
        (Some(a), _) => a.to_string(),
        (None, Some(b)) => b.to_string(),
        (None, None) => "tiny".to_string(),
    };
    let file_variant = file_variant
        .map(|v| {
            ddl::model::Variant::parse(&v).map_err(|e| anyhow::anyhow!("--config {}: model.variant: {e}", shown()))
        })
        .transpose()?;
    let variant = match (variant, file_variant) {
        (Some(a), Some(b)) if a != b => {
            anyhow::bail!(
                "--variant {a} contradicts `variant = \"{b}\"` under [model] in --config {}: drop one of them",
                shown()
            )
        }
        (a, b) => a.or(b).unwrap_or(ddl::model::Variant::Ddl),
    };
    let mut run = ddl::train::RunConfig::preset(&preset, variant).map_err(|e| match (&file_preset, preset_flag) {
        // (The remedy names --preset; the name came from the file.)
        (Some(_), None) => {
            anyhow::anyhow!("--config {}: preset = \"{preset}\": {}; write one of them there", shown(), e.expected)
        }
        _ => e.into(),
    })?;
    if let Some((path, text, _)) = &file {
        run.merge_toml(text, &path.display().to_string()).map_err(anyhow::Error::msg)?;
    }
    Ok(run)
}

/// The model config of the checkpoint `--init-from` names, or what is wrong with it.
pub(super) fn init_config(ck: &std::path::Path) -> Result<ddl::model::ModelConfig> {
    use ddl::train::checkpoint::{CheckpointError, MODEL_FILE};
    ddl::train::checkpoint::saved_config(ck).map_err(|e| match e {
        // (A missing model file's message says what the folder is and what to give, as a missing
        // folder's and a file's do.)
        CheckpointError::MissingFile(ref f) if f.ends_with(MODEL_FILE) => {
            anyhow::anyhow!("--init-from {}: {e}", ck.display())
        }
        CheckpointError::MissingDir(_) | CheckpointError::NotADir(_) => {
            anyhow::anyhow!("--init-from {}: {e}", ck.display())
        }
        e => anyhow::anyhow!(
            "--init-from {}: {e} (give a `ddl train --out` folder or one of its checkpoints/ folders)",
            ck.display()
        ),
    })
}

/// A relative path of a `--config` file's `key` that does not exist from the current directory
/// `here` but does beside the file: the error saying so and what to write instead.
pub(super) fn found_beside_config(
    key: &str,
    value: &std::path::Path,
    config: Option<&std::path::Path>,
    here: &str,
) -> Option<String> {
    let b = config
        .and_then(std::path::Path::parent)
        .filter(|dir| !dir.as_os_str().is_empty() && value.is_relative())
        .map(|dir| dir.join(value))
        .filter(|p| p.exists())?;
    Some(format!(
        "{key} = \"{}\" does not exist from the current directory {here}; '{}' exists beside the --config file, but a \
         relative path in it is taken from the current directory: write {key} = \"{}\" (or an absolute path), or run \
         from the --config file's folder",
        value.display(),
        b.display(),
        b.display()
    ))
}

/// A fine-tune (`--init-from CK`) trains with the checkpoint's tokenizer: a tokenizer file or
/// `--data` shards of another one are refused with the settings, so that `--dry-run` refuses
/// what the run refuses (the run's data check made it, after a dry run had planned the run), and
/// `--tokenizer char` given for a checkpoint of a BPE is refused too (it was ignored without a
/// word, and config.toml said `char`).
pub(super) fn check_init_tokenizer(run: &ddl::train::RunConfig, a: &TrainArgs) -> Result<()> {
    let Some(ck) = &a.init_from else { return Ok(()) };
    let tok = ddl::train::checkpoint::saved_tokenizer(ck)?;
    if a.tokenizer.as_deref() == Some("char") && tok.kind() != "char" {
        anyhow::bail!(
            "--tokenizer char: --init-from {}'s model reads a {} tokenizer of {} tokens (saved with it), whose token \
             ids its parameters were trained on, and the fine-tune trains with it; drop --tokenizer",
            ck.display(),
            tok.kind(),
            tok.vocab_size()
        );
    }
    ddl::train::data::check_init_tokenizer(run, &tok, ck)?;
    Ok(())
}
