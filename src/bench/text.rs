//! The text form of benchmark rows (`ddl bench` without `--json`).

use std::fmt::Write;

use super::Row;

impl Row {
    /// One or more lines for a person (`--json` prints the row itself).
    pub fn text(&self) -> String {
        let mut out = String::new();
        let v = &self.0;
        let _ = match v["bench"].as_str() {
            Some("matmul") if v.get("skipped").is_some() => writeln!(
                out,
                "{:<26} {:>6}x{:<6}x{:<6} {}skipped: {}",
                matmul_case(v),
                v["m"],
                v["n"],
                v["k"],
                v["variant"].as_str().map(|x| format!("{x:<14} ")).unwrap_or_default(),
                v["skipped"].as_str().unwrap_or("")
            ),
            Some("matmul") => writeln!(
                out,
                "{:<26} {:>6}x{:<6}x{:<6} {:<14} {:>10.3} ms {:>9.2} GFLOP/s{}{}",
                matmul_case(v),
                v["m"],
                v["n"],
                v["k"],
                v["variant"].as_str().unwrap_or(""),
                v["ms"].as_f64().unwrap_or(0.0),
                v["gflop_per_s"].as_f64().unwrap_or(0.0),
                match (v["against_forms"].as_str(), v["against_ms"].as_f64()) {
                    (Some(spec), Some(ms)) => format!(
                        "; with {spec}: {ms:.3} ms, ratio {:.3} median of {}{}",
                        v["ratio_median_block"].as_f64().unwrap_or(f64::NAN),
                        blocks(&v["blocks"]),
                        match (v["ratio_median_ci95"][0].as_f64(), v["ratio_median_ci95"][1].as_f64()) {
                            (Some(lo), Some(hi)) => format!(" (95 % interval {lo:.3}–{hi:.3})"),
                            _ => String::new(),
                        }
                    ),
                    _ => String::new(),
                },
                if v["auto"].as_bool() == Some(true) {
                    "  <- auto"
                } else if v["split"].as_bool() == Some(true) {
                    "  <- the model's (split along K)"
                } else {
                    ""
                }
            ),
            Some("matmul_tune") => writeln!(
                out,
                "tuned {}{} {}x{}x{}: {}",
                v["case"].as_str().unwrap_or(""),
                v["piece"].as_u64().map_or(String::new(), |i| format!(" (piece {i})")),
                v["m"],
                v["n"],
                v["k"],
                v["variant"].as_str().unwrap_or("")
            ),
            Some("kernel_error") => writeln!(
                out,
                "{}: could not run at these shapes: {}",
                v["module"].as_str().unwrap_or(""),
                v["error"].as_str().unwrap_or("")
            ),
            Some("precision_run") => writeln!(
                out,
                "{} {} seed {}: {} steps, val loss {:.4} ({} tokens), {:.0} tok/s",
                v["variant"].as_str().unwrap_or(""),
                v["precision"].as_str().unwrap_or(""),
                v["seed"],
                v["steps"],
                v["val_loss"].as_f64().unwrap_or(f64::NAN),
                v["val_tokens"],
                v["tok_per_s"].as_f64().unwrap_or(f64::NAN),
            ),
            Some("precision") => writeln!(
                out,
                "f32 {:.4} ± {:.4}, f16 {:.4} ± {:.4} (mean ± sd over seeds {})\n{}",
                v["f32_mean"].as_f64().unwrap_or(f64::NAN),
                v["f32_sd"].as_f64().unwrap_or(f64::NAN),
                v["f16_mean"].as_f64().unwrap_or(f64::NAN),
                v["f16_sd"].as_f64().unwrap_or(f64::NAN),
                v["seeds"],
                v["verdict"].as_str().unwrap_or("")
            ),
            Some("data_prepare") => writeln!(
                out,
                "{:<5} prepare: {:.1} MB of text -> {} shard(s), {:.1} MB, {} tokens in {:.1} s ({:.1} MB/s, {:.2} M tokens/s); peak resident +{}",
                v["set"].as_str().unwrap_or(""),
                v["text_mb"].as_f64().unwrap_or(0.0),
                v["shards"],
                v["shard_mb"].as_f64().unwrap_or(0.0),
                v["tokens"],
                v["seconds"].as_f64().unwrap_or(0.0),
                v["mb_per_s"].as_f64().unwrap_or(0.0),
                v["tokens_per_s"].as_f64().unwrap_or(0.0) / 1e6,
                mib_text(&v["peak_rss_added_mib"])
            ),
            Some("data_draw") => writeln!(
                out,
                "{:<5} draw:    opened {} training tokens in {:.3} s; {} batches of {} tokens: {:.3} ms mean, {:.3} median, {:.3} max; peak resident +{}",
                v["set"].as_str().unwrap_or(""),
                v["train_tokens"],
                v["open_s"].as_f64().unwrap_or(0.0),
                v["draws"],
                v["batch_tokens"],
                v["draw_ms_mean"].as_f64().unwrap_or(0.0),
                v["draw_ms_median"].as_f64().unwrap_or(0.0),
                v["draw_ms_max"].as_f64().unwrap_or(0.0),
                mib_text(&v["peak_rss_added_mib"])
            ),
            Some("data_train") => writeln!(
                out,
                "{:<5} train:   {} steps; start-up {:.2} s (data {:.3} s); waited for batches {:.3} ms at the first step, {} (mean {:.3}); {:.0} tok/s; peak resident +{} (plan {})",
                v["set"].as_str().unwrap_or(""),
                v["steps"],
                v["startup_s"].as_f64().unwrap_or(0.0),
                v["data_open_s"].as_f64().unwrap_or(0.0),
                v["data_ms_first"].as_f64().unwrap_or(0.0),
                match v["data_ms_max_after_first"].as_f64() {
                    Some(ms) => format!("then at most {ms:.3} ms"),
                    None => "no step after it".into(),
                },
                v["data_ms_mean"].as_f64().unwrap_or(0.0),
                v["tokens_per_s"].as_f64().unwrap_or(0.0),
                mib_text(&v["peak_rss_added_mib"]),
                mib_text(&v["plan_mib"])
            ),
            Some("copy") => writeln!(
                out,
                "copy {} MiB (read+write): {:.3} ms, {:.2} GB/s by a kernel pass; {:.3} ms, {:.2} GB/s by a buffer copy",
                v["mib"],
                v["kernel_ms"].as_f64().unwrap_or(0.0),
                v["kernel_gb_per_s"].as_f64().unwrap_or(0.0),
                v["dma_ms"].as_f64().unwrap_or(0.0),
                v["dma_gb_per_s"].as_f64().unwrap_or(0.0)
            ),
            Some("kernel") => writeln!(
                out,
                "{:<52} {:>10.3} {:>10.2} {:>10.2} {:>7.1}% {:>7}",
                v["name"].as_str().unwrap_or(""),
                v["ms"].as_f64().unwrap_or(0.0),
                v["gflop_per_s"].as_f64().unwrap_or(0.0),
                v["gb_per_s"].as_f64().unwrap_or(0.0),
                100.0 * v["of_floor"].as_f64().unwrap_or(0.0),
                v["bound"].as_str().unwrap_or("")
            ),
            Some("train_dispatch") => {
                let ms = v["ms"].as_f64().unwrap_or(0.0);
                // A product's rate from its FLOPs (matmul dispatches carry them).
                let rate = match v["gflop"].as_f64() {
                    Some(g) if ms > 0.0 => format!(" {}", rate_words(g / ms)),
                    _ => String::new(),
                };
                writeln!(
                    out,
                    "{:>5} {:<44} {:>16} {ms:>9.3} ms{rate}",
                    v["index"],
                    v["kernel"].as_str().unwrap_or(""),
                    format!("{}", v["workgroups"]),
                )
            }
            Some("train_compare") => writeln!(
                out,
                "{}{} vs {}{}{} d={} L={} B={} T={}, {} (A B B A): step ratio {:.3} median of blocks ({}range {:.3}–{:.3}), \
                 {:.3} best to best ({:.1} vs {:.1} ms; medians {:.1} vs {:.1} ms){}{}",
                v["variant"].as_str().unwrap_or(""),
                numerics(v, ""),
                v["against"].as_str().unwrap_or(""),
                numerics(v, "against_"),
                v["against_forms"].as_str().map(|f| format!(" with {f}")).unwrap_or_default(),
                v["d"],
                v["layers"],
                v["batch"],
                v["seq"],
                blocks(&v["blocks"]),
                v["ratio_median_block"].as_f64().unwrap_or(f64::NAN),
                match (v["ratio_median_ci95"][0].as_f64(), v["ratio_median_ci95"][1].as_f64()) {
                    (Some(lo), Some(hi)) => format!("95 % interval of the median {lo:.3}–{hi:.3}; "),
                    _ => String::new(),
                },
                v["ratio_min_block"].as_f64().unwrap_or(f64::NAN),
                v["ratio_max_block"].as_f64().unwrap_or(f64::NAN),
                v["ratio_best"].as_f64().unwrap_or(f64::NAN),
                v["best_step_ms"].as_f64().unwrap_or(f64::NAN),
                v["against_best_step_ms"].as_f64().unwrap_or(f64::NAN),
                v["median_step_ms"].as_f64().unwrap_or(f64::NAN),
                v["against_median_step_ms"].as_f64().unwrap_or(f64::NAN),
                match (v["cpu_ratio_median_block"].as_f64(), v["cpu_ratio_best"].as_f64()) {
                    (Some(m), Some(b)) => format!(
                        "; process CPU time: ratio {m:.3} median of blocks, {b:.3} best to best (medians {:.1} vs {:.1} ms)",
                        v["cpu_median_step_ms"].as_f64().unwrap_or(f64::NAN),
                        v["against_cpu_median_step_ms"].as_f64().unwrap_or(f64::NAN)
                    ),
                    _ => String::new(),
                },
                match v["losses_identical"].as_bool() {
                    Some(true) => "; every step's loss and gradient norm the same bits on both sides".to_string(),
                    Some(false) => "; the two sides' losses differ (these forms do not give the same bits)".to_string(),
                    None => String::new(),
                },
            ),
            Some("train") => {
                let _ = writeln!(
                    out,
                    "{}{} d={} L={} B={} T={}: {:.1} tok/s, {:.1} ms/step, {:.2} model GFLOP/s, matmul {:.0}% of kernel time, {} dispatches, loss {:.4} at init, {:.4} after {} AdamW step(s) on that batch",
                    v["variant"].as_str().unwrap_or(""),
                    numerics(v, ""),
                    v["d"],
                    v["layers"],
                    v["batch"],
                    v["seq"],
                    v["tok_per_s"].as_f64().unwrap_or(0.0),
                    v["step_ms"].as_f64().unwrap_or(0.0),
                    v["model_gflop_per_s"].as_f64().unwrap_or(0.0),
                    100.0 * v["matmul_share"].as_f64().unwrap_or(0.0),
                    v["dispatches_per_step"],
                    v["loss_init"].as_f64().unwrap_or(f64::NAN),
                    v["loss_last"].as_f64().unwrap_or(f64::NAN),
                    v["steps"]
                );
                let mib = |k: &str| v[k].as_f64().unwrap_or(0.0) / (1 << 20) as f64;
                let _ = writeln!(
                    out,
                    "    best step {:.1} ms; MFU {:.0}% of {}; {:.1} submits, \
                     {:.1} readbacks, {:.1} allocations per step; peak device memory {:.1} MiB = {:.2}× the plan ({:.1} MiB, activations {:.1} MiB)",
                    v["best_step_ms"].as_f64().unwrap_or(0.0),
                    100.0 * v["mfu"].as_f64().unwrap_or(0.0),
                    super::Ceiling {
                        gflop_per_s: v["ceiling_gflop_per_s"].as_f64().unwrap_or(f64::NAN),
                        measured_up_to: v["ceiling_up_to"].as_u64().map(|n| n as usize),
                    }
                    .describe(),
                    v["submits_per_step"].as_f64().unwrap_or(f64::NAN),
                    v["readbacks_per_step"].as_f64().unwrap_or(f64::NAN),
                    v["allocs_per_step"].as_f64().unwrap_or(f64::NAN),
                    mib("peak_bytes"),
                    v["peak_over_plan"].as_f64().unwrap_or(f64::NAN),
                    mib("plan_bytes"),
                    mib("activation_plan_bytes"),
                );
                if let (Some(span), Some(idle)) = (v["gpu_span_ms"].as_f64(), v["gpu_idle_ms"].as_f64()) {
                    let _ = writeln!(
                        out,
                        "    profiled step on the GPU: {span:.1} ms from the first dispatch's start to the last end, \
                         {:.1} ms of kernels, {idle:.1} ms idle between dispatches ({:.0}%; one compute pass per \
                         dispatch while profiling, so an upper bound)",
                        v["profiled_ms"].as_f64().unwrap_or(f64::NAN),
                        if span > 0.0 { 100.0 * idle / span } else { 0.0 },
                    );
                }
                if let Some(split) = v["split_ms"].as_object() {
                    let mut items: Vec<(&String, f64)> =
                        split.iter().map(|(k, x)| (k, x.as_f64().unwrap_or(0.0))).collect();
                    items.sort_by(|a, b| b.1.total_cmp(&a.1));
                    // The products' rates where the dispatches carry their FLOPs.
                    let rates = v["split_tflop_per_s"].as_object();
                    for (k, ms) in items {
                        let _ = match rates.and_then(|r| r.get(k.as_str())).and_then(|r| r.as_f64()) {
                            Some(r) => writeln!(out, "    {k:<40} {ms:>10.2} ms {}", rate_words(r)),
                            None => writeln!(out, "    {k:<40} {ms:>10.2} ms"),
                        };
                    }
                }
                Ok(())
            }
            Some("generate") => writeln!(
                out,
                "{} context {}: cached {:.2} ms/token ({:.1} tok/s), recompute {:.2} ms/token ({:.1} tok/s) ({:.1}x; medians \
                 after a warm-up), fastest runs {:.2} vs {:.2} ms ({:.1}x)",
                v["variant"].as_str().unwrap_or(""),
                v["context"],
                v["cached_ms_per_token"].as_f64().unwrap_or(0.0),
                v["cached_tok_per_s"].as_f64().unwrap_or(0.0),
                v["recompute_ms_per_token"].as_f64().unwrap_or(0.0),
                v["recompute_tok_per_s"].as_f64().unwrap_or(0.0),
                v["speedup"].as_f64().unwrap_or(0.0),
                v["cached_best_ms"].as_f64().unwrap_or(0.0),
                v["recompute_best_ms"].as_f64().unwrap_or(0.0),
                v["speedup_best"].as_f64().unwrap_or(0.0)
            ),
            _ => writeln!(out, "{v}"),
        };
        out
    }
}

/// "12.3 MiB", or "n/a" off Linux.
/// A matmul row's case with its operands where they are not f32 (`--operands`: "nt (rh)").
fn matmul_case(v: &serde_json::Value) -> String {
    let case = v["case"].as_str().unwrap_or("");
    match v["operands"].as_str() {
        Some(o) if o != "ff" => format!("{case} ({o})"),
        _ => case.to_string(),
    }
}

/// A rate given in TFLOP/s, right-aligned: in GFLOP/s below 1 TFLOP/s (a CPU adapter's products
/// would read 0.00 or 0.01 TFLOP/s).
fn rate_words(tflops: f64) -> String {
    if tflops < 1.0 { format!("{:>8.2} GFLOP/s", tflops * 1e3) } else { format!("{tflops:>8.2} TFLOP/s") }
}

fn mib_text(v: &serde_json::Value) -> String {
    v.as_f64().map(|m| format!("{m:.1} MiB")).unwrap_or_else(|| "n/a".into())
}

/// A side's storage in a line (`prefix` "" or "against_"): " (f16)" for `--precision f16`,
/// " (f16 states)" for `--f16-state` alone, ", recompute" added for `--recompute` (" (recompute)"
/// alone), ", head chunk R" for `--head-chunk R`, nothing for f32 that keeps its activations.
fn numerics(v: &serde_json::Value, prefix: &str) -> String {
    let mut parts = Vec::new();
    match (v[format!("{prefix}precision")].as_str(), v[format!("{prefix}state_f16")].as_bool()) {
        (Some("f16"), _) => parts.push("f16".to_string()),
        (_, Some(true)) => parts.push("f16 states".to_string()),
        _ => {}
    }
    if v[format!("{prefix}recompute")].as_bool() == Some(true) {
        parts.push("recompute".to_string());
    }
    if let Some(r) = v[format!("{prefix}head_chunk")].as_u64().filter(|&r| r > 0) {
        parts.push(format!("head chunk {r}"));
    }
    if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(", ")) }
}

/// "1 block", "6 blocks".
fn blocks(n: &serde_json::Value) -> String {
    match n.as_u64() {
        Some(1) => "1 block".into(),
        _ => format!("{n} blocks"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_read_as_text_and_unknown_rows_as_their_json() {
        let copy = Row(json!({"bench": "copy", "mib": 64, "kernel_ms": 2.5, "kernel_gb_per_s": 53.7, "dma_ms": 5.0,
            "dma_gb_per_s": 26.85, "gb_per_s": 53.7}));
        assert_eq!(
            copy.text(),
            "copy 64 MiB (read+write): 2.500 ms, 53.70 GB/s by a kernel pass; 5.000 ms, 26.85 GB/s by a buffer copy\n"
        );
        let mm = Row(json!({"bench": "matmul", "case": "qkv", "m": 8, "n": 16, "k": 32, "variant": "t16",
            "ms": 1.0, "gflop_per_s": 2.0, "auto": true}));
        let t = mm.text();
        let half = Row(json!({"bench": "matmul", "case": "nt", "m": 8, "n": 16, "k": 32, "variant": "t16",
            "ms": 1.0, "gflop_per_s": 2.0, "operands": "rh"}));
        assert!(half.text().starts_with("nt (rh) "), "{}", half.text());
        assert!(!t.contains("(ff)"), "{t}");
        assert!(t.starts_with("qkv") && t.contains("8x16") && t.contains("<- auto"), "{t}");
        let train = Row(json!({"bench": "train", "variant": "ddl", "split_ms": {"a": 1.0, "b": 3.0}}));
        let t = train.text();
        assert_eq!(t.lines().count(), 4, "{t}");
        assert!(t.lines().nth(2).unwrap().trim_start().starts_with('b'), "the split is sorted by time: {t}");
        assert!(t.starts_with("ddl d="), "{t}");
        // A product's rate beside its time where the split has its FLOPs.
        let train = Row(
            json!({"bench": "train", "variant": "ddl", "split_ms": {"attention:matmul::wm_kk": 2.0, "norm::x": 1.0},
            "split_tflop_per_s": {"attention:matmul::wm_kk": 25.0}}),
        );
        let t = train.text();
        assert!(t.contains("attention:matmul::wm_kk") && t.contains("2.00 ms    25.00 TFLOP/s"), "{t}");
        assert!(t.lines().any(|l| l.contains("norm::x") && !l.contains("TFLOP/s")), "{t}");
        let d = |g: serde_json::Value| {
            Row(json!({"bench": "train_dispatch", "index": 3, "kernel": "matmul[w128]::wm_kk", "workgroups": [4, 1, 1],
                "ms": 0.5, "gflop": g}))
            .text()
        };
        assert!(d(json!(10.0)).trim_end().ends_with("0.500 ms    20.00 TFLOP/s"), "{}", d(json!(10.0)));
        // Below 1 TFLOP/s (a CPU adapter's products) in GFLOP/s, not 0.01 TFLOP/s.
        assert_eq!(rate_words(0.0123), "   12.30 GFLOP/s");
        assert_eq!(rate_words(1.5), "    1.50 TFLOP/s");
        assert!(d(json!(null)).trim_end().ends_with("0.500 ms"), "{}", d(json!(null)));
        // The storage of each side: precision, f16 states, recomputing.
        let st = |p: &str, f16: bool, rc: bool| json!({"precision": p, "state_f16": f16, "recompute": rc});
        let t = Row(json!({"bench": "train", "variant": "ddl", "precision": "f16", "recompute": true})).text();
        assert!(t.starts_with("ddl (f16, recompute) d="), "{t}");
        for (v, want) in [
            (st("f32", false, false), ""),
            (st("f16", true, false), " (f16)"),
            (st("f32", true, true), " (f16 states, recompute)"),
            (st("f32", false, true), " (recompute)"),
        ] {
            assert_eq!(numerics(&v, ""), want, "{v}");
        }
        let cmp = json!({"against_precision": "f32", "against_state_f16": false, "against_recompute": true});
        assert_eq!(numerics(&cmp, "against_"), " (recompute)");
        let cmp = json!({"head_chunk": 1024, "against_head_chunk": 0, "recompute": true});
        assert_eq!(
            (numerics(&cmp, ""), numerics(&cmp, "against_")),
            (" (recompute, head chunk 1024)".into(), String::new())
        );
        let generate = Row(json!({"bench": "generate", "variant": "ddl", "context": 64, "cached_ms_per_token": 20.0,
            "cached_tok_per_s": 50.0, "recompute_ms_per_token": 80.0, "recompute_tok_per_s": 12.5, "speedup": 4.0}));
        let t = generate.text();
        assert!(t.contains("cached 20.00 ms/token (50.0 tok/s)") && t.contains("(12.5 tok/s)"), "{t}");
        let other = Row(json!({"bench": "forms", "x": 1}));
        assert_eq!(other.text(), "{\"bench\":\"forms\",\"x\":1}\n");
    }
}
