//! Settings read onto a run's config: a TOML file's tables (`--config`, a saved config.toml) and
//! `--set key=value`, every unknown key named with the closest known one.

use super::*;

impl RunConfig {
    /// Applies a TOML file's tables (`[model]`, `[train]`, top-level `corpus`, `tokenizer`) over `self`.
    pub fn merge_toml(&mut self, text: &str, origin: &str) -> Result<(), String> {
        let overlay: toml::Table = toml::from_str(text).map_err(|e| format!("{origin}: {e}"))?;
        let overlay_copy = overlay.clone();
        let base_before = toml::Table::try_from(&*self).map_err(|e| e.to_string())?;
        let sets_model = |k: &str| overlay.get("model").and_then(|m| m.as_table()).is_some_and(|m| m.contains_key(k));
        // The value-axis compressor has K_c = d_v (spec 3.4): a d_v given alone takes K_c along.
        let kc_follows = sets_model("d_v") && !sets_model("state_kernel");
        let given = (sets_model("d_v"), sets_model("v_act"), sets_model("state_kernel"));
        // The settings a variant decides (d_v, v_act, K_c) follow a changed variant unless given
        // with it or changed before (`variant = "baseline"` in --config, then --set model.variant=ddl).
        let before = self.model.clone();
        // train.min_lr is a tenth of train.lr unless given: a new lr takes it along when it was
        // that tenth and is not given with it (else `--set train.lr=3e-4` on a preset of lr 3e-3
        // was refused for the preset's min_lr).
        let sets_train = |k: &str| overlay.get("train").and_then(|m| m.as_table()).is_some_and(|m| m.contains_key(k));
        let min_lr_follows = sets_train("lr")
            && !sets_train("min_lr")
            && (self.train.min_lr == tenth(self.train.lr) || self.train.min_lr == self.train.lr / 10.0);
        // The widths the spec derives from d (F = ⌊8d/3⌋, h_k = max(1, ⌊d/4⌋)) follow a new d
        // unless given with it or changed before (until session 81 they kept the preset's: d 64
        // on the tiny preset ran F = 341, the tiny model's).
        let d = self.model.d_model;
        let mlp_follows =
            sets_model("d_model") && !sets_model("mlp_hidden") && self.model.mlp_hidden == d.saturating_mul(8) / 3;
        let k_mlp_follows =
            sets_model("d_model") && !sets_model("k_mlp_hidden") && self.model.k_mlp_hidden == (d / 4).max(1);
        let mut base = toml::Table::try_from(&*self).map_err(|e| e.to_string())?;
        for (k, v) in overlay {
            match (base.get_mut(&k), v) {
                (Some(toml::Value::Table(bt)), toml::Value::Table(ot)) => {
                    for (k2, v2) in ot {
                        if !bt.contains_key(&k2) {
                            return Err(format!("{origin}: {}", unknown_key(&format!("{k}.{k2}"), &k2, bt)));
                        }
                        bt.insert(k2, v2);
                    }
                }
                // `[[train]]` (an array of tables) for `[train]`: serde read the array as the
                // table's fields in order ("invalid type: map, expected a whole number ≥ 0").
                (Some(toml::Value::Table(_)), toml::Value::Array(a)) if a.iter().all(|x| x.is_table()) => {
                    return Err(format!(
                        "{origin}: [[{k}]] is an array of tables; the settings go in one table: write [{k}] with \
                         single brackets"
                    ));
                }
                (Some(slot), v) => *slot = v,
                // (Not written while empty: a run's config.toml has it only with --init-from.)
                (None, v) if k == "init_from" || k == "init_from_step" => {
                    base.insert(k, v);
                }
                (None, _) => {
                    // A key of a table written at the top: say under which table it goes.
                    let table = ["train", "model"]
                        .into_iter()
                        .find(|t| base.get(*t).and_then(|b| b.as_table()).is_some_and(|b| b.contains_key(&k)));
                    let mut hint =
                        table.map(|t| format!("; {k} goes under [{t}] (or --set {t}.{k}=…)")).unwrap_or_default();
                    // An experiment's spec given as a run's settings (it named the first of its
                    // keys, e.g. beta_batches, as if it were a typo).
                    if ["variants", "seeds"].iter().all(|s| overlay_copy.contains_key(*s)) {
                        hint = format!(
                            "; {origin} is an experiment spec (variants, seeds, steps), not a run's settings: run \
                             it with `ddl experiment --spec {} --out DIR`",
                            crate::shell_word(origin)
                        );
                    }
                    // The closest top-level key, as a table's unknown key gets its closest (it got
                    // none, and the list left out init_from).
                    const TOP: [&str; 6] = ["preset", "corpus", "tokenizer", "data", "data_format", "init_from"];
                    let near =
                        closest(&k, TOP.into_iter()).map(|t| format!(" (did you mean '{t}'?)")).unwrap_or_default();
                    return Err(format!(
                        "{origin}: unknown key '{k}'{near}; expected {}, [model], [train]{hint}",
                        TOP.join(", ")
                    ));
                }
            }
        }
        *self = base.clone().try_into().map_err(|e: toml::de::Error| {
            // Name the key whose value has the wrong type: the first overlay key that alone
            // fails to deserialise over the old config.
            let mut key = None;
            if let Ok(old) = toml::Table::try_from(&*self) {
                'find: for (k, v) in &overlay_copy {
                    let pairs: Vec<(Option<&str>, &toml::Value)> = match v {
                        toml::Value::Table(t) => t.iter().map(|(k2, v2)| (Some(k2.as_str()), v2)).collect(),
                        v => vec![(None, v)],
                    };
                    for (k2, v2) in pairs {
                        let mut probe = old.clone();
                        match (k2, probe.get_mut(k)) {
                            (Some(k2), Some(toml::Value::Table(t))) => {
                                t.insert(k2.to_string(), v2.clone());
                            }
                            _ => {
                                probe.insert(k.clone(), v2.clone());
                            }
                        }
                        if probe.try_into::<RunConfig>().is_err() {
                            key = Some(match k2 {
                                Some(k2) => format!("{k}.{k2} = {v2}"),
                                None => format!("{k} = {v2}"),
                            });
                            break 'find;
                        }
                    }
                }
            }
            let msg = plain_serde_message(e.message());
            // The remedy: the value in the type the key takes now.
            let hint = key
                .as_ref()
                .and_then(|k| {
                    let name = k.split(" = ").next()?;
                    let (table, field) = name.split_once('.').map_or((None, name), |(t, f)| (Some(t), f));
                    let now = match table {
                        Some(t) => base_before.get(t)?.as_table()?.get(field)?.clone(),
                        None => base_before.get(field)?.clone(),
                    };
                    let kind = match &now {
                        toml::Value::Integer(_) => "a whole number",
                        toml::Value::Float(_) => "a number",
                        toml::Value::Boolean(_) => "true or false",
                        toml::Value::String(_) => "a string (quoted in TOML)",
                        _ => return None,
                    };
                    Some(format!(" ({name} takes {kind}, e.g. its current value {now})"))
                })
                .unwrap_or_default();
            match key {
                Some(k) => format!("{origin}: {k}: {msg}{hint}"),
                None => format!("{origin}: {msg}"),
            }
        })?;
        if self.model.variant != before.variant {
            let m = &before;
            let old = ModelConfig::base(m.variant, m.vocab_size, m.d_model, m.n_layers, m.n_heads, m.head_dim);
            let new = ModelConfig::base(self.model.variant, m.vocab_size, m.d_model, m.n_layers, m.n_heads, m.head_dim);
            if !given.0 && before.d_v == old.d_v {
                self.model.d_v = new.d_v;
            }
            if !given.1 && before.v_act == old.v_act {
                self.model.v_act = new.v_act;
            }
            if !given.2 && before.state_kernel == old.state_kernel {
                self.model.state_kernel =
                    if self.model.variant.value_axis() { self.model.d_v } else { new.state_kernel };
            }
        }
        if kc_follows && self.model.variant.value_axis() {
            self.model.state_kernel = self.model.d_v;
        }
        if min_lr_follows {
            self.train.min_lr = tenth(self.train.lr);
        }
        if mlp_follows {
            self.model.mlp_hidden = self.model.d_model.saturating_mul(8) / 3;
        }
        if k_mlp_follows {
            self.model.k_mlp_hidden = (self.model.d_model / 4).max(1);
        }
        Ok(())
    }

    /// Applies `key=value` (`train.lr=3e-4`, `model.d_v=2`, `corpus=...`, `tokenizer=...`; a bare train or
    /// model key such as `lr=3e-4` is looked up in both tables).
    pub fn set(&mut self, kv: &str) -> Result<(), String> {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("--set '{kv}': expected key=value"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() {
            return Err(format!("--set '{kv}': expected key=value, with a key such as train.lr"));
        }
        if v.parse::<f64>().is_ok_and(|x| x.is_infinite()) && !v.to_ascii_lowercase().contains("inf") {
            return Err(format!("--set {k}={v}: too large for a number (at most about 1.8e308)"));
        }
        let base = toml::Table::try_from(&*self).map_err(|e| e.to_string())?;
        let path: Vec<String> = if k.contains('.') {
            k.split('.').map(|s| s.to_string()).collect()
        } else if base.contains_key(k) {
            vec![k.to_string()]
        } else {
            let in_train = base["train"].as_table().is_some_and(|t| t.contains_key(k));
            let in_model = base["model"].as_table().is_some_and(|t| t.contains_key(k));
            match (in_train, in_model) {
                (true, false) => vec!["train".into(), k.into()],
                (false, true) => vec!["model".into(), k.into()],
                (true, true) => return Err(format!("--set '{k}' is ambiguous: write train.{k} or model.{k}")),
                (false, false) => {
                    // Every key with its table, so that a suggestion is a key `--set` takes.
                    let mut all = toml::Table::new();
                    for (name, v) in &base {
                        match v.as_table() {
                            Some(t) => {
                                all.extend(t.keys().map(|k2| (format!("{name}.{k2}"), toml::Value::Boolean(true))))
                            }
                            None => {
                                all.insert(name.clone(), toml::Value::Boolean(true));
                            }
                        }
                    }
                    return Err(format!("--set: {}", unknown_key(k, k, &all)));
                }
            }
        };
        // Parse the value as a TOML literal; bare words are strings.
        let value: toml::Value = toml::from_str::<toml::Table>(&format!("x = {v}"))
            .map(|t| t["x"].clone())
            .unwrap_or_else(|_| toml::Value::String(v.to_string()));
        // (A whole number past what TOML holds would be reported as a string.)
        let digits = v.trim_start_matches(['-', '+']);
        if value.is_str() && digits.len() >= 19 && digits.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!(
                "--set {k}={v}: too large; settings are whole numbers from {} to {}",
                i64::MIN,
                i64::MAX
            ));
        }
        let mut doc = String::new();
        if path.len() == 1 {
            doc.push_str(&format!("{} = {}\n", path[0], value));
        } else if path.len() == 2 {
            doc.push_str(&format!("[{}]\n{} = {}\n", path[0], path[1], value));
        } else {
            return Err(format!("--set: key '{k}' is nested too deeply"));
        }
        self.merge_toml(&doc, &format!("--set {k}"))
    }
}

/// "unknown key 'train.steps'" with the closest known key and where the step count is set.
pub(super) fn unknown_key(full: &str, field: &str, known: &toml::Table) -> String {
    let mut msg = format!("unknown key '{full}'");
    let steps = field == "steps" || field == "max_steps";
    if let Some(k) = closest(field, known.keys().map(|k| k.as_str()).filter(|_| !steps)) {
        msg.push_str(&format!(" (did you mean '{}'?)", full.replace(field, k)));
    }
    if steps {
        msg.push_str("; the steps a run trains are the flag --steps N (the schedule's length is train.decay_steps)");
    }
    let mut keys: Vec<&str> = known.keys().map(|k| k.as_str()).collect();
    keys.sort_unstable();
    msg.push_str(&format!("; known keys here: {}", keys.join(", ")));
    msg
}

/// The known key closest to `field`, if one is near enough to suggest (compared by its last
/// part: `--set` lists keys with their table, `train.lr`).
pub(super) fn closest<'a>(field: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    known
        .map(|k| (k.rsplit('.').next().unwrap_or(k), k))
        .map(|(last, k)| (edit_distance(field, last), k, last))
        .filter(|(dist, _, last)| *dist <= (field.len() / 3).max(1) || last.contains(field) || field.contains(last))
        .map(|(dist, k, _)| (dist, k))
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance (for suggestions).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + (ca != cb) as usize).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// A serde message in the settings' words: serde names Rust types (`expected usize`, `expected
/// struct TrainConfig`); say what the key takes. Shared by `--set`, `--config` and experiment specs.
pub fn plain_serde_message(msg: &str) -> String {
    [
        ("expected usize", "expected a whole number ≥ 0"),
        ("expected u64", "expected a whole number ≥ 0"),
        ("expected u32", "expected a whole number ≥ 0"),
        ("expected i64", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("expected struct TrainConfig", "expected the [train] table (set one of its keys: train.KEY=VALUE)"),
        ("expected struct ModelConfig", "expected the [model] table (set one of its keys: model.KEY=VALUE)"),
        ("expected a sequence", "expected a list in brackets ([1, 2] for numbers, [\"a\", \"b\"] for names)"),
        ("missing field `", "missing key `"),
        // (An enum's values are "variants" to serde; a model's variant is a setting here.)
        ("unknown variant `", "unknown value `"),
    ]
    .iter()
    .fold(msg.to_string(), |m, (rust, plain)| m.replace(rust, plain))
}
