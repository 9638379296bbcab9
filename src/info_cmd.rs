//! `ddl info`: the adapters and their forms, and a model's parameters, memory plan and the batch
//! that fits a card.

use super::*;

pub(super) fn info(dev: &DeviceArgs, json: bool) -> Result<()> {
    let backend = dev.backend.as_deref().map(BackendChoice::parse).transpose()?;
    let adapters = ddl::gpu::enumerate_adapters(backend);
    if json {
        let gpu = dev.open().context("opening the GPU")?;
        let list: Vec<serde_json::Value> = adapters
            .iter()
            .map(|a| {
                serde_json::json!({
                    "index": a.index,
                    "name": a.info.name,
                    "backend": format!("{:?}", a.info.backend),
                    "device_type": format!("{:?}", a.info.device_type),
                    "driver": a.info.driver,
                })
            })
            .collect();
        let out = serde_json::json!({"adapters": list, "chosen": gpu.to_json()});
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("adapters found: {}", adapters.len());
    for a in &adapters {
        println!("  {a}");
    }
    let gpu = dev.open().context("opening the GPU")?;
    println!("\nchosen:");
    print!("{}", gpu.describe());
    Ok(())
}

/// The model `ddl info --preset P --variant V --set KEY=VALUE …` plans: the preset's for the
/// variant with the model settings `sets` over it, checked as `ddl train` checks them. The run's
/// own settings are this command's flags (--batch, --seq, --f16-state, --precision, --recompute,
/// --head-chunk), so a `--set` of one is refused naming its flag, and one that does not change the
/// memory (train.lr) is refused as ignored.
pub(super) fn info_config(preset: &str, variant: &str, sets: &[String]) -> Result<ddl::model::ModelConfig> {
    let v = ddl::model::Variant::parse(variant).map_err(anyhow::Error::msg)?;
    let mut run = ddl::train::RunConfig::preset(preset, v)?;
    for kv in sets {
        let key = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k).trim();
        // (An unknown key, or a value of the wrong kind, is reported as `ddl train` reports it.)
        run.set(kv).map_err(anyhow::Error::msg)?;
        let model = serde_json::to_value(&run.model)?;
        let field = key.strip_prefix("model.").unwrap_or(key);
        if field == "variant" {
            anyhow::bail!(
                "--set {kv}: name the variant to plan with --variant (--variant {})",
                kv.split_once('=').map_or("", |(_, v)| v.trim())
            );
        }
        if key.starts_with("model.") || (!key.contains('.') && model.get(key).is_some()) {
            continue;
        }
        let flag = match key.strip_prefix("train.").unwrap_or(key) {
            "batch_size" => Some("--batch N"),
            "seq_len" => Some("--seq T"),
            "state_f16" => Some("--f16-state"),
            "precision" => Some("--precision f16"),
            "recompute" => Some("--recompute"),
            "head_chunk" => Some("--head-chunk ROWS"),
            _ => None,
        };
        match flag {
            Some(flag) => anyhow::bail!(
                "--set {kv}: `ddl info --preset` takes the run's batch, length and storage from its flags; give {flag} instead"
            ),
            None => anyhow::bail!(
                "--set {kv}: the memory plan depends on the model and on --batch, --seq, --f16-state, --precision, \
                 --recompute and --head-chunk only, so {key} would be ignored; drop it (`ddl info --preset` takes \
                 model settings with --set: model.d_model, model.d_v, model.n_heads ...)"
            ),
        }
    }
    run.model.validate().map_err(|mut e| {
        // (This command has no --config file: the remedy names --set alone.)
        if e.remedy == ddl::model::ConfigError::new(&e.key, "", "").remedy {
            e.remedy = format!("change it with --set {}=VALUE", e.key);
        }
        anyhow::Error::from(e)
    })?;
    Ok(run.model)
}

/// `ddl info --preset P [--set …]`: the memory plan of training the model `cfg` (P's, or the
/// shape its --set gives) at P's batch (or --batch × --seq), the activations stored as `asked`
/// says (f16 precision implies f16 states as `ddl train` does). Printed as text unless `json`; returned as JSON either way (the same facts).
#[allow(clippy::too_many_arguments)]
pub(super) fn info_model(
    dev: &DeviceArgs,
    preset: &str,
    cfg: &ddl::model::ModelConfig,
    sets: &[String],
    batch: Option<usize>,
    seq: Option<usize>,
    asked: ddl::model::Storage,
    json: bool,
) -> Result<serde_json::Value> {
    let mut notes = Vec::new();
    let (cfg, v) = (cfg.clone(), cfg.variant);
    let mut t = ddl::train::TrainConfig::preset(preset);
    let (b, s) = (batch.unwrap_or(t.batch_size), seq.unwrap_or(t.seq_len));
    // f16 precision implies f16 states where the variant has them (as `ddl train` does).
    (t.state_f16, t.precision, t.recompute, t.head_chunk) =
        (asked.state_f16, asked.precision, asked.recompute, asked.head_chunk);
    // The checks `ddl train` makes of these settings (context length, f16 states, precision).
    (t.batch_size, t.seq_len) = (b, s);
    // (In this command's words: `ddl info` takes --batch and --seq, not --set.)
    t.validate(&cfg).map_err(|e| match e.key.as_str() {
        "train.seq_len" if seq.is_none() => anyhow::anyhow!(
            "the preset's sequence length {s}: {}; give a --seq of at most {}, or a longer context with --set model.max_seq_len={s}",
            e.expected,
            cfg.max_seq_len
        ),
        "train.seq_len" => anyhow::anyhow!("--seq {s}: {}; give a --seq of at most {}", e.expected, cfg.max_seq_len),
        "train.batch_size" => anyhow::anyhow!("--batch {b}: {}; give a smaller --batch", e.expected),
        _ => anyhow::anyhow!("{e}"),
    })?;
    if (b as u128) * (s as u128) * (cfg.vocab_size as u128).max(cfg.d_model as u128 * 64) * 16 > u64::MAX as u128 {
        anyhow::bail!("--batch {b} × --seq {s}: too many tokens to plan; give a smaller --batch");
    }
    let mut st = t.storage(&cfg);
    if st.head_chunk >= b * s {
        // (A slice of all the batch's rows is the whole head: the plan and its label say so.)
        notes.push(format!(
            "--head-chunk {} covers all {} rows of B {b} × T {s}: the LM head runs whole",
            st.head_chunk,
            b * s
        ));
        st.head_chunk = 0;
    }
    // The adapter the plan is compared with: one asked for (--backend, --adapter) must be there,
    // as for every other command (a wrong one left the comparison out without a word); with none
    // asked for, the plan stands alone where no adapter is found.
    let gpu = match dev.open() {
        Ok(gpu) => Some(gpu),
        Err(e) if dev.backend.is_some() || dev.adapter.is_some() => return Err(e),
        Err(_) => None,
    };
    let plan = ddl::model::memory_plan_for(&cfg, b, s, st);
    // What `ddl train` would refuse on this adapter: a buffer over its largest, a state over one
    // storage binding (bound whole), or, on a CPU adapter, more than the host has.
    // (fits, what the text says)
    let verdict = gpu.as_ref().map(|gpu| {
        let limits = ddl::model::Limits::of(gpu);
        let binding = gpu.limits.max_storage_buffer_binding_size;
        if let Some(why) = plan.misfit(&limits) {
            // (The advice restates why, with the plan's total, and says what fits.)
            let advice = ddl::model::fit_advice(&cfg, b, s, 1, st, &limits).unwrap_or(why);
            (false, format!("does not fit this adapter ({}): {advice}", gpu.info.name))
        } else if plan.largest.1 > binding {
            let line = format!(
                "note: '{}' ({} bytes) is over this adapter's storage binding ({binding} bytes): the kernels bind it in pieces",
                plan.largest.0, plan.largest.1
            );
            (true, line)
        } else {
            (true, format!("fits this adapter's buffers ({})", gpu.info.name))
        }
    });
    if !json {
        for n in &notes {
            println!("note: {n}");
        }
        let with = if sets.is_empty() { String::new() } else { format!(" with --set {}", sets.join(" --set ")) };
        println!(
            "preset {preset}{with}, variant {v}{}: V {} d {} L {} H {} h {} F {} d_v {}",
            st.label(),
            cfg.vocab_size,
            cfg.d_model,
            cfg.n_layers,
            cfg.n_heads,
            cfg.head_dim,
            cfg.mlp_hidden,
            cfg.m()
        );
        print!("{}", plan.text(b, s));
        if let Some((_, line)) = &verdict {
            println!("{line}");
        }
    }
    let adapter = match (&gpu, &verdict) {
        (Some(gpu), Some((fits, line))) => serde_json::json!({
            "name": gpu.info.name,
            "backend": format!("{:?}", gpu.info.backend),
            "fits": fits,
            "says": line,
        }),
        _ => serde_json::Value::Null,
    };
    Ok(serde_json::json!({
        "preset": preset,
        "sets": sets,
        "variant": v.name(),
        "storage": {
            "precision": st.precision.name(),
            "f16_state": st.state_f16,
            "recompute": st.recompute,
            "head_chunk": st.head_chunk,
        },
        "model": {
            "vocab_size": cfg.vocab_size,
            "d_model": cfg.d_model,
            "n_layers": cfg.n_layers,
            "n_heads": cfg.n_heads,
            "head_dim": cfg.head_dim,
            "mlp_hidden": cfg.mlp_hidden,
            "d_v": cfg.m(),
        },
        "batch": b,
        "seq": s,
        "notes": notes,
        "plan": plan.json(),
        "adapter": adapter,
    }))
}

/// A size in GiB with one decimal, or in MiB below 1 GiB (where GiB would say 0.0).
pub(super) fn size_words(bytes: u64) -> String {
    let gib = bytes as f64 / (1u64 << 30) as f64;
    if gib >= 1.0 { format!("{gib:.1} GiB") } else { format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64) }
}

/// `ddl info --preset P --memory SIZE`: the largest batch whose training plan fits `bytes`, for
/// each way of storing the activations the variant allows.
/// Printed as text unless `json`; returned as JSON either way.
pub(super) fn info_fit(
    preset: &str,
    cfg: &ddl::model::ModelConfig,
    seq: Option<usize>,
    head_chunk: usize,
    bytes: u64,
    json: bool,
) -> Result<serde_json::Value> {
    use ddl::model::{Precision, Storage};
    let t = seq.unwrap_or(ddl::train::TrainConfig::preset(preset).seq_len);
    let chunk = if head_chunk > 0 { format!(", the LM head in slices of {head_chunk} rows") } else { String::new() };
    if !json {
        println!(
            "largest batch of {t}-token sequences whose plan fits {bytes} bytes ({}{chunk}; the plan counts \
             parameters, gradients, moments, activations and scratch, not the driver's own):",
            size_words(bytes)
        );
    }
    // Each as `ddl train` would store it (f16 precision implies f16 states where the variant has them).
    let storage = |state_f16: bool, precision: Precision| {
        let mut tc = ddl::train::TrainConfig::preset(preset);
        (tc.state_f16, tc.precision, tc.head_chunk) = (state_f16, precision, head_chunk);
        tc.storage(cfg)
    };
    let mut rows: Vec<(&str, Storage)> = vec![("f32", storage(false, Precision::F32))];
    if cfg.f16_state_support().is_ok() {
        rows.push(("--f16-state", storage(true, Precision::F32)));
    }
    rows.push(("--precision f16", storage(false, Precision::F16)));
    let rows: Vec<(String, Storage)> = rows
        .into_iter()
        .flat_map(|(name, st)| {
            [(name.to_string(), st), (format!("{name} --recompute"), Storage { recompute: true, ..st })]
        })
        .collect();
    let mut out = Vec::new();
    for (name, st) in rows {
        let b = ddl::model::largest_batch(cfg, t, st, bytes);
        let plan = ddl::model::memory_plan_for(cfg, b.max(1), t, st);
        // A batch of at most --head-chunk rows runs the head whole: said per row, and its chunk
        // recorded as 0 (the header's "slices of R rows" holds for the larger batches only).
        let used = ddl::model::head_chunk_used(b.max(1) * t, head_chunk);
        let whole = head_chunk > 0 && used == 0;
        if json {
            // (The plan of one sequence where none fits: what it would need.)
            out.push(serde_json::json!({
                "storage": name,
                "precision": st.precision.name(),
                "f16_state": st.state_f16,
                "recompute": st.recompute,
                "head_chunk": used,
                "batch": b,
                "tokens": b * t,
                "plan_bytes": plan.total(),
            }));
        } else {
            let note = if whole {
                format!(", the LM head whole: {} rows ≤ --head-chunk", b.max(1) * t)
            } else {
                String::new()
            };
            if b == 0 {
                println!("  {name:<30} none (one sequence needs {}{note})", size_words(plan.total()));
            } else {
                println!("  {name:<30} B {b:>5}  ({} tokens a micro-batch, {}{note})", b * t, size_words(plan.total()));
            }
        }
    }
    Ok(serde_json::json!({"memory_bytes": bytes, "seq": t, "head_chunk": head_chunk, "rows": out}))
}
