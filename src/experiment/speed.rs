//! The report's speed section: each variant's step against the baseline's, in one process.

use std::path::Path;
use std::sync::Arc;

use super::grid::result_of;
use super::{ExperimentError, ExperimentSpec, run_name};
use crate::gpu::Gpu;
use crate::model::Variant;
use crate::train::{RunConfig, checkpoint};

/// The file of the report's speed section in the experiment's folder.
pub const SPEED_FILE: &str = "speed.jsonl";
/// Blocks (A B B A) per variant in the speed section: 12 give the median ratio's 95 % interval.
pub const SPEED_BLOCKS: usize = 12;

/// The speed section: each variant's training step against the baseline's at the grid's model and
/// batch (the config its first finished run saved), the two alternated in one process
/// ([`crate::bench::train_compare_rows`], what `ddl bench train --against baseline` runs), written
/// to `OUT/speed.jsonl` with the adapter and the engine's commit. Not the grid's wall clock: its
/// runs share a machine with whatever else runs. Needs a finished baseline run.
pub fn measure_speed(gpu: &Arc<Gpu>, spec: &ExperimentSpec, out: &Path, quiet: bool) -> Result<bool, ExperimentError> {
    // Ctrl-C stops it after the step in hand (nothing is written then: `false`).
    let _ctrlc = crate::train::CtrlcScope::new();
    let variants =
        spec.variant_list().map_err(|m| ExperimentError::Spec { path: out.join("experiment.toml"), msg: m })?;
    let saved = |v: Variant| saved_config(spec, out, v);
    let base = saved(Variant::Baseline)?;
    let (batch, seq) = (base.train.batch_size, base.train.seq_len);
    let (commit, dirty) = crate::build_commit();
    let mut text = String::new();
    for &v in variants.iter().filter(|&&v| v != Variant::Baseline) {
        let cfg = saved(v)?;
        if !quiet {
            eprintln!("speed: {} against baseline, {SPEED_BLOCKS} blocks of 4 steps at {batch} × {seq}", v.name());
        }
        let mut row = None;
        let row_done = crate::bench::train_compare_rows(
            gpu,
            None,
            &cfg.model,
            &base.model,
            batch,
            seq,
            SPEED_BLOCKS,
            crate::model::Storage::default(),
            crate::model::Storage::default(),
            |r| row = Some(r.0),
        )
        .map_err(|e| ExperimentError::Report(format!("speed: {} against baseline: {e:#}", v.name())));
        if crate::train::interrupted() {
            return Ok(false);
        }
        row_done?;
        let mut row = row.ok_or_else(|| ExperimentError::Report("speed: the benchmark gave no row".into()))?;
        row["adapter"] = serde_json::json!(gpu.info.name);
        row["commit"] = serde_json::json!(commit);
        row["dirty"] = serde_json::json!(dirty);
        text.push_str(&format!("{row}\n"));
    }
    let path = out.join(SPEED_FILE);
    checkpoint::write_atomic(&path, text.as_bytes()).map_err(|source| ExperimentError::Io { path, source })?;
    Ok(true)
}

/// The settings a finished run of `v` saved (its first seed's that finished): the model and batch
/// the speed section measures.
fn saved_config(spec: &ExperimentSpec, out: &Path, v: Variant) -> Result<RunConfig, ExperimentError> {
    let seeds = spec.seeds_of(v);
    let seed = seeds.iter().copied().find(|&s| result_of(&out.join("runs").join(run_name(v, s)), spec.steps).is_some());
    let Some(seed) = seed else {
        // (It said "speed: ddl has no finished run to measure", not which runs nor what to do.)
        let runs: Vec<String> = seeds.iter().map(|&s| run_name(v, s)).collect();
        return Err(ExperimentError::Report(format!(
            "--speed: {} has no finished run to measure (none of {} has a result.json of {} steps under {}); \
             run the experiment without --report-only to train them, then measure, or leave out --speed",
            v.name(),
            runs.join(", "),
            spec.steps,
            out.join("runs").display()
        )));
    };
    let path = out.join("runs").join(run_name(v, seed)).join("config.toml");
    let text = std::fs::read_to_string(&path).map_err(|source| ExperimentError::Io { path: path.clone(), source })?;
    toml::from_str(&text).map_err(|e| ExperimentError::Report(format!("speed: {}: {e}", path.display())))
}

/// The rows of `OUT/speed.jsonl` (none when it is missing).
pub(super) fn speed_rows(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join(SPEED_FILE))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The speed section of the report from `OUT/speed.jsonl`, or why there is none.
pub(super) fn speed_section(out: &Path, variants: &[Variant]) -> String {
    let mut md = String::from("## Speed\n\n");
    // (Rows of variants the spec no longer lists, measured when it did, are not this report's.)
    let rows: Vec<serde_json::Value> = speed_rows(out)
        .into_iter()
        .filter(|r| r["variant"].as_str().is_none_or(|n| variants.iter().any(|v| v.name() == n)))
        .collect();
    let Some(first) = rows.first() else {
        md.push_str(
            "Not measured yet: the experiment measures it once its runs are finished (`ddl experiment … --speed` \
             measures it now).\n\n",
        );
        return md;
    };
    let commit = first["commit"].as_str().unwrap_or("");
    md.push_str(&format!(
        "Each variant's training step against the baseline's at this grid's model and batch ({} × {}), the two \
         alternated in one process in blocks of four steps (baseline, variant, variant, baseline; what `ddl bench \
         train --against baseline` does), measured after the runs on {} by engine {} ({}): median step, and the \
         median over blocks of the block's time ratio with its distribution-free 95 % interval. Not the runs' \
         wall clock, which depends on what else ran on the machine.\n\n",
        first["batch"],
        first["seq"],
        first["adapter"].as_str().unwrap_or("?"),
        &commit[..commit.len().min(12)],
        first["dirty"].as_str().unwrap_or("?"),
    ));
    md.push_str("| variant | step (ms) | baseline step (ms) | time ÷ baseline time | 95 % interval | blocks |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|\n");
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    for r in &rows {
        let ci = r["ratio_median_ci95"]
            .as_array()
            // (Two ends, or none: a file edited or cut short has no interval, not a panic.)
            .and_then(|c| match &c[..] {
                [lo, hi] => Some(format!("[{:.3}, {:.3}]", f(lo), f(hi))),
                _ => None,
            })
            .unwrap_or_else(|| "n/a".into());
        md.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.3} | {ci} | {} |\n",
            r["variant"].as_str().unwrap_or("?"),
            f(&r["median_step_ms"]),
            f(&r["against_median_step_ms"]),
            f(&r["ratio_median_block"]),
            r["blocks"]
        ));
    }
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A variant without a finished run names its runs, where they were looked for and what to
    /// do (it said "speed: ddl has no finished run to measure").
    #[test]
    fn a_variant_without_a_finished_run_says_which_runs_and_what_to_do() {
        let dir = crate::testing::scratch_dir("speed-unfinished");
        let s = crate::experiment::test_support::spec("").unwrap();
        let e = saved_config(&s, &dir, Variant::Ddl).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).ok();
        assert!(e.starts_with("--speed: ddl has no finished run to measure (none of ddl-seed1, ddl-seed2"), "{e}");
        assert!(e.contains("of 20 steps under") && e.contains("without --report-only"), "{e}");
    }

    /// A speed.jsonl edited or cut short (an interval of fewer than two ends, fields missing) is
    /// reported with what it holds, not a panic (the interval's ends were indexed).
    #[test]
    fn a_damaged_speed_file_does_not_panic_the_report() {
        let dir = crate::testing::scratch_dir("speed-damaged");
        std::fs::write(
            dir.join(SPEED_FILE),
            "{\"variant\":\"ddl\",\"ratio_median_ci95\":[],\"median_step_ms\":2.0}\n\
             {\"variant\":\"ddl_v1\",\"ratio_median_ci95\":[1.1]}\n",
        )
        .unwrap();
        let md = speed_section(&dir, &[Variant::Baseline, Variant::Ddl, Variant::DdlV1]);
        assert!(md.contains("| ddl | 2.00 |") && md.contains("| ddl_v1 |"), "{md}");
        assert_eq!(md.matches("| n/a |").count(), 2, "{md}");
        // A variant the spec no longer lists (a grid shrunk since its speed was measured): not
        // in the report's speed table, as in none of its others.
        let md = speed_section(&dir, &[Variant::Baseline, Variant::Ddl]);
        assert!(md.contains("| ddl | 2.00 |") && !md.contains("| ddl_v1 |"), "{md}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
