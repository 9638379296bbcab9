//! The spec's `ablate`: every delta-write run's final model with each part of each sublayer's
//! write removed in turn (what `ddl eval --ablate` does, on the run's checkpoint over its
//! validation split), kept in the run's `result.json`; and the report's section over seeds: per
//! variant, sublayer and part the mean loss increase with its 95 % t-interval, and whether
//! removing the erased part or the value alone costs more than removing the whole write (paired
//! by seed), each family Holm-corrected.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::report::p_text;
use super::{ExperimentError, ExperimentSpec, RunAblation, RunAblations, RunResult, run_name};
use crate::gpu::Gpu;
use crate::model::Variant;
use crate::stats;
use crate::train::checkpoint;
use crate::train::eval::{Ablate, EvalRequest, EvalSource, Split};
use crate::train::plot;

/// The plot of the section (one row per variant, sublayer and part).
pub(super) const PLOT: &str = "ablations.png";

/// Whether a run's result answers the spec's `ablate` (a baseline run has nothing to ablate).
pub(super) fn ablated(r: &RunResult, parts: &[Ablate], batches: usize) -> bool {
    r.ablations.as_ref().is_some_and(|a| a.cover(parts, batches))
}

/// Ablates every finished delta-write run of the grid that the spec's `ablate` asks for and its
/// `result.json` does not hold yet, from the run's final checkpoint, one after another, and writes
/// each into its result as it finishes. `Ok(false)`: Ctrl-C stopped it between two runs (what
/// was ablated is kept; the same command goes on).
pub(super) fn ablate_runs(
    gpu: &Arc<Gpu>,
    spec: &ExperimentSpec,
    out: &Path,
    variants: &[Variant],
    quiet: bool,
) -> Result<bool, ExperimentError> {
    let parts = spec.ablate_parts().map_err(|msg| ExperimentError::Spec { path: out.join("experiment.toml"), msg })?;
    if parts.is_empty() {
        return Ok(true);
    }
    let mut todo = Vec::new();
    for seed in spec.all_seeds() {
        for &v in variants.iter().filter(|v| v.is_ddl() && spec.seeds_of(**v).contains(&seed)) {
            let dir = out.join("runs").join(run_name(v, seed));
            if let Some(r) = super::grid::result_of(&dir, spec.steps)
                && !ablated(&r, &parts, spec.ablate_batches)
            {
                todo.push((run_name(v, seed), dir, r));
            }
        }
    }
    let n = todo.len();
    for (i, (name, dir, mut r)) in todo.into_iter().enumerate() {
        if crate::train::interrupted() {
            return Ok(false);
        }
        if !dir.join(checkpoint::MODEL_FILE).is_file() {
            // (Results restored without their checkpoints: the report counts them as not ablated.)
            eprintln!(
                "warning: {name} cannot be ablated: '{}' holds no {} (its result was kept without its checkpoint); \
                 the report leaves it out of the ablation section",
                dir.display(),
                checkpoint::MODEL_FILE
            );
            continue;
        }
        // A part added to a spec whose other parts this run holds over the same batches: only
        // the new part is evaluated (the parts held are the same numbers again).
        let held: Vec<RunAblation> = r
            .ablations
            .as_ref()
            .filter(|a| a.batches == spec.ablate_batches)
            .map(|a| a.rows.clone())
            .unwrap_or_default();
        let ask: Vec<Ablate> = parts.iter().copied().filter(|p| !held.iter().any(|h| h.part == *p)).collect();
        if !quiet {
            let asked: Vec<&str> = ask.iter().map(|p| p.name()).collect();
            eprintln!(
                "[{}/{n}] {name}: each sublayer's write without its {} in turn, over {}",
                i + 1,
                asked.join(" / "),
                match spec.ablate_batches {
                    0 => "the whole validation split".to_string(),
                    1 => "the first validation batch".to_string(),
                    b => format!("the first {b} validation batches"),
                }
            );
        }
        let req = EvalRequest {
            source: EvalSource::Run,
            split: Split::Val,
            seq_len: None,
            batch_size: None,
            batches: (spec.ablate_batches > 0).then_some(spec.ablate_batches),
            betas: false,
            against: None,
            head_chunk: None,
            intervene: None,
            ablate: ask.clone(),
            plot: None,
            per_token: None,
            calibration_plot: None,
            lens: false,
            lens_plot: None,
        };
        if std::env::var("DDL_FAULT_INTERRUPT_ABLATION").is_ok_and(|v| v == (i + 1).to_string()) {
            // Fault injection for the tests: Ctrl-C as this run's ablations start.
            crate::train::interrupt_now();
        }
        // `None`: Ctrl-C within the run's passes, which stop at the batch they are on (its
        // result.json is as it was; the same command ablates it again).
        let evaluate = |req: &EvalRequest| match crate::train::eval::evaluate_checkpoint(gpu, &dir, req) {
            Ok(e) => Ok(Some(e)),
            Err(crate::train::TrainError::Interrupted { .. }) => {
                if !quiet {
                    eprintln!("{name}: its ablations were stopped before their end; nothing of them was kept");
                }
                Ok(None)
            }
            Err(source) => Err(ExperimentError::Train { run: name.clone(), source: Box::new(source) }),
        };
        let Some(e) = evaluate(&req)? else { return Ok(false) };
        if e.step != r.steps {
            return Err(ExperimentError::Run {
                run: name.clone(),
                msg: format!(
                    "its checkpoint is of step {}, its result.json of step {}: the ablations would not be of the \
                     model the result describes; train the run again (delete its folder) to ablate it",
                    e.step, r.steps
                ),
            });
        }
        // The rows held join the new ones when they were measured against the same loss (the
        // same model over the same tokens); otherwise (results restored from another adapter)
        // every part is evaluated again.
        let same_base = r.ablations.as_ref().is_some_and(|a| a.loss == e.loss && a.tokens == e.tokens);
        let rows = if held.is_empty() || same_base {
            merge_rows(held, rows_of(&e))
        } else {
            let Some(all) = evaluate(&EvalRequest { ablate: parts.clone(), ..req })? else { return Ok(false) };
            rows_of(&all)
        };
        let top = rows.iter().max_by(|a, b| a.difference.total_cmp(&b.difference)).cloned();
        r.ablations = Some(RunAblations { batches: spec.ablate_batches, tokens: e.tokens, loss: e.loss, rows });
        let path = dir.join("result.json");
        let text = serde_json::to_string_pretty(&r).map_err(|e| ExperimentError::Report(e.to_string()))?;
        checkpoint::write_atomic(&path, text.as_bytes())
            .map_err(|source| ExperimentError::Io { path: path.clone(), source })?;
        if !quiet && let Some(top) = top {
            eprintln!(
                "[{}/{n}] {name}: loss {:.4} as trained; the largest increase {:+.4} without {}'s {}",
                i + 1,
                e.loss,
                top.difference,
                top.sublayer,
                top.part.name()
            );
        }
    }
    Ok(true)
}

/// An evaluation's ablations as a result's rows.
fn rows_of(e: &crate::train::eval::EvalResult) -> Vec<RunAblation> {
    e.ablations
        .iter()
        .map(|a| RunAblation {
            sublayer: a.sublayer.clone(),
            part: a.part,
            loss: a.vs.loss,
            difference: a.vs.difference,
        })
        .collect()
}

/// The rows a run held and those just measured, in the order `ddl eval --ablate` gives them: by
/// sublayer (in the model's order, as measured), then by part.
fn merge_rows(held: Vec<RunAblation>, new: Vec<RunAblation>) -> Vec<RunAblation> {
    let mut order: Vec<String> = Vec::new();
    for r in new.iter().chain(&held) {
        if !order.contains(&r.sublayer) {
            order.push(r.sublayer.clone());
        }
    }
    let mut rows: Vec<RunAblation> = held.into_iter().chain(new).collect();
    rows.sort_by_key(|r| (order.iter().position(|s| *s == r.sublayer), r.part));
    rows
}

/// One tested row: its label, the test over seeds and the Holm-adjusted p.
struct Row {
    variant: Variant,
    sublayer: String,
    part: Ablate,
    test: Option<stats::Paired>,
    p_holm: Option<f64>,
    /// The values a row without a test rests on (one seed's, or none): shown, not tested.
    untested: Vec<f64>,
}

/// Per variant, sublayer and part: the values over the seeds that hold it, as (seed, value).
type Table = BTreeMap<(usize, String, Ablate), Vec<(u64, f64)>>;

/// The section of the report (empty when the spec asks for no ablation) and its plot's rows.
pub(super) fn section(
    spec: &ExperimentSpec,
    results: &[RunResult],
    variants: &[Variant],
) -> (String, Vec<plot::Interval>) {
    let Ok(parts) = spec.ablate_parts() else { return (String::new(), Vec::new()) };
    if parts.is_empty() {
        return (String::new(), Vec::new());
    }
    let mut md = String::from("## What each part of the write carries (ablations)\n\n");
    let ddl: Vec<(usize, Variant)> = variants.iter().copied().enumerate().filter(|(_, v)| v.is_ddl()).collect();
    let runs: Vec<&RunResult> = results.iter().filter(|r| ddl.iter().any(|(_, v)| v.name() == r.variant)).collect();
    let done: Vec<&RunResult> = runs.iter().copied().filter(|r| ablated(r, &parts, spec.ablate_batches)).collect();
    let words: Vec<String> = parts.iter().map(|p| format!("`{}`", p.words())).collect();
    let tokens: Vec<usize> = done.iter().filter_map(|r| r.ablations.as_ref().map(|a| a.tokens)).collect();
    let over = match (spec.ablate_batches, tokens.iter().min(), tokens.iter().max()) {
        (_, Some(a), Some(b)) if a != b => {
            format!("the validation split ({a} to {b} tokens: they differ between runs)")
        }
        (0, Some(a), _) => format!("the whole validation split ({a} tokens, the same windows for every run)"),
        (1, Some(a), _) => format!("the validation split's first batch ({a} tokens, the same for every run)"),
        (b, Some(a), _) => format!("the validation split's first {b} batches ({a} tokens, the same for every run)"),
        _ => "the validation split".to_string(),
    };
    md.push_str(&format!(
        "At the end of each run of a delta-write variant, every sublayer's write X' = X + β k (vᵀ − kᵀX) was \
         removed in part, one sublayer and part at a time, and the model evaluated over {over}: {}. Each value \
         below is ablated − as trained in nats per token (positive: the part carries something the model uses), \
         per variant, sublayer and part: its mean over seeds, the 95 % t-interval (seeds − 1 degrees of freedom), \
         Student's one-sample t and two-sided p against 0, and p adjusted by Holm's method over the whole table \
         (the family: the spec's delta-write variants × their sublayers × the parts `ablate` names, fixed before \
         the runs).\n\n",
        words.join("; ")
    ));
    let missing: Vec<String> = runs
        .iter()
        .filter(|r| !ablated(r, &parts, spec.ablate_batches))
        .map(|r| format!("{}-seed{}", r.variant, r.seed))
        .collect();
    if !missing.is_empty() {
        md.push_str(&format!(
            "**Not ablated yet (left out of this section):** {}; run the experiment without --report-only to ablate \
             them from their checkpoints.\n\n",
            missing.join(", ")
        ));
    }
    if done.is_empty() {
        return (md, Vec::new());
    }
    // The values, and the sublayers in model order (block by block, attention then MLP).
    let mut table: Table = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for r in &done {
        let vi = ddl.iter().find(|(_, v)| v.name() == r.variant).map(|(i, _)| *i).unwrap_or(0);
        for a in r.ablations.iter().flat_map(|a| &a.rows).filter(|a| parts.contains(&a.part)) {
            if !order.contains(&a.sublayer) {
                order.push(a.sublayer.clone());
            }
            table.entry((vi, a.sublayer.clone(), a.part)).or_default().push((r.seed, a.difference));
        }
    }
    order.sort_by_key(|s| sublayer_index(s));
    let mut rows: Vec<Row> = Vec::new();
    for &(vi, v) in &ddl {
        for s in &order {
            for &part in &parts {
                if let Some(values) = table.get(&(vi, s.clone(), part)) {
                    let pairs: Vec<(f64, f64)> = values.iter().map(|&(_, d)| (d, 0.0)).collect();
                    rows.push(Row {
                        variant: v,
                        sublayer: s.clone(),
                        part,
                        test: stats::Paired::of(&pairs),
                        p_holm: None,
                        untested: pairs.iter().map(|p| p.0 - p.1).collect(),
                    });
                }
            }
        }
    }
    holm_into(&mut rows);
    md.push_str(
        "| variant | sublayer | removed | seeds | mean increase | 95 % interval | t (df) | p | p (Holm) | verdict |\n",
    );
    md.push_str("|---|---|---|---:|---:|---:|---:|---:|---:|---|\n");
    let mut forest = Vec::new();
    for r in &rows {
        md.push_str(&format!(
            "| {} | {} | {} | {}\n",
            r.variant.name(),
            r.sublayer,
            r.part.action(),
            test_cells(r, |up| { if up { "raises the loss" } else { "lowers the loss" } })
        ));
        if let Some(t) = r.test {
            forest.push(plot::Interval {
                label: format!("{} {} {}", r.variant.name(), r.sublayer, r.part.action()),
                mean: t.diff.mean,
                lo: if t.no_spread { f64::NAN } else { t.diff.ci.0 },
                hi: if t.no_spread { f64::NAN } else { t.diff.ci.1 },
                significant: r.p_holm.is_some_and(|p| p < 0.05),
            });
        }
    }
    md.push('\n');
    // Removing one part against removing the whole write, paired by seed.
    let mut versus: Vec<Row> = Vec::new();
    if parts.contains(&Ablate::Write) {
        for &(vi, v) in &ddl {
            for s in &order {
                let Some(whole) = table.get(&(vi, s.clone(), Ablate::Write)) else { continue };
                for &part in parts.iter().filter(|p| **p != Ablate::Write) {
                    let Some(values) = table.get(&(vi, s.clone(), part)) else { continue };
                    let pairs: Vec<(f64, f64)> = values
                        .iter()
                        .filter_map(|&(seed, d)| whole.iter().find(|w| w.0 == seed).map(|w| (d, w.1)))
                        .collect();
                    versus.push(Row {
                        variant: v,
                        sublayer: s.clone(),
                        part,
                        test: stats::Paired::of(&pairs),
                        p_holm: None,
                        untested: pairs.iter().map(|p| p.0 - p.1).collect(),
                    });
                }
            }
        }
    }
    if !versus.is_empty() {
        holm_into(&mut versus);
        md.push_str(
            "Removing one part against removing the whole write: the difference of the two ablated losses (part \
             removed − whole write removed), paired by seed; Holm over this table (its own family: each \
             variant's sublayers × the parts other than the write). Positive: the model loses more without that \
             part alone than without the write.\n\n",
        );
        md.push_str("| variant | sublayer | part − write | seeds | mean difference | 95 % interval | t (df) | p | p (Holm) | verdict |\n");
        md.push_str("|---|---|---|---:|---:|---:|---:|---:|---:|---|\n");
        for r in &versus {
            md.push_str(&format!(
                "| {} | {} | {} − write=0 | {}\n",
                r.variant.name(),
                r.sublayer,
                r.part.action(),
                test_cells(r, |up| if up {
                    "costs more than the whole write"
                } else {
                    "costs less than the whole write"
                })
            ));
        }
        md.push('\n');
    }
    // Significant rows that rest on 2 seeds (1 degree of freedom): named, and why that is little.
    let on_two: Vec<String> = rows
        .iter()
        .chain(&versus)
        .filter(|r| r.test.is_some_and(|t| t.diff.n == 2) && r.p_holm.is_some_and(|p| p < 0.05))
        .map(|r| {
            let what = if versus.iter().any(|v| std::ptr::eq(v, r)) {
                format!("{} − write=0", r.part.action())
            } else {
                r.part.action().to_string()
            };
            format!("{} {} {what}", r.variant.name(), r.sublayer)
        })
        .collect();
    md.push_str(&super::report::two_seeds_note(&on_two));
    // What the numbers support, in sentences per variant.
    let sig =
        |r: &Row, up: bool| r.p_holm.is_some_and(|p| p < 0.05) && r.test.is_some_and(|t| (t.diff.mean > 0.0) == up);
    for &(_, v) in &ddl {
        let own: Vec<&Row> = rows.iter().filter(|r| r.variant == v).collect();
        if own.is_empty() {
            continue;
        }
        // (One seed: nothing was tested, so "significantly in 0 of N sublayers" would read as a
        // finding.)
        if own.iter().all(|r| r.test.is_none()) {
            let n = own.iter().map(|r| r.untested.len()).max().unwrap_or(0);
            md.push_str(&format!(
                "**{}** ({}): too few seeds to test (a test needs at least 2 seeds); the table gives each value, \
                 which says nothing of its spread over seeds.\n\n",
                v.name(),
                crate::plural(n, "seed")
            ));
            continue;
        }
        let mut said = Vec::new();
        for &part in &parts {
            let of: Vec<&&Row> = own.iter().filter(|r| r.part == part).collect();
            let up: Vec<&str> = of.iter().filter(|r| sig(r, true)).map(|r| r.sublayer.as_str()).collect();
            let down: Vec<&str> = of.iter().filter(|r| sig(r, false)).map(|r| r.sublayer.as_str()).collect();
            let what = match part {
                Ablate::Write => "the whole write",
                Ablate::Erase => "the erased part",
                Ablate::Value => "the value",
            };
            let mut s = format!(
                "removing {what} raises the loss significantly in {} of {} sublayers{}",
                up.len(),
                of.len(),
                if up.is_empty() || up.len() == of.len() { String::new() } else { format!(" ({})", up.join(", ")) }
            );
            if !down.is_empty() {
                s.push_str(&format!(" and lowers it in {}", down.join(", ")));
            }
            said.push(s);
        }
        for part in [Ablate::Erase, Ablate::Value] {
            let of: Vec<&Row> = versus.iter().filter(|r| r.variant == v && r.part == part).collect();
            if of.is_empty() {
                continue;
            }
            let more: Vec<String> = of
                .iter()
                .filter(|r| sig(r, true))
                .map(|r| match r.test {
                    Some(t) => format!(
                        "{} ({:+.4}, p {} after Holm)",
                        r.sublayer,
                        t.diff.mean,
                        p_text(r.p_holm.unwrap_or(1.0))
                    ),
                    None => r.sublayer.clone(),
                })
                .collect();
            let less = of.iter().filter(|r| sig(r, false)).count();
            said.push(format!(
                "{} alone costs more than the whole write in {} of {} sublayers{}{}",
                part.action(),
                more.len(),
                of.len(),
                if more.is_empty() { String::new() } else { format!(": {}", more.join(", ")) },
                if less > 0 { format!(" (less in {less})") } else { String::new() }
            ));
        }
        md.push_str(&format!(
            "**{}** ({} seeds): {}.\n\n",
            v.name(),
            own.iter().filter_map(|r| r.test.map(|t| t.diff.n)).max().unwrap_or(1),
            said.join("; ")
        ));
    }
    // (No row with an interval: no plot is drawn, so none is named.)
    if !forest.is_empty() {
        md.push_str(&format!(
            "Plot: `{PLOT}` (each mean increase with its 95 % interval over seeds; filled red: significant after \
             Holm, hollow grey: not).\n\n"
        ));
    }
    (md, forest)
}

/// Holm's adjustment over the rows that have a test.
fn holm_into(rows: &mut [Row]) {
    let ps: Vec<f64> = rows.iter().filter_map(|r| r.test.map(|t| t.p)).collect();
    let mut adjusted = stats::holm(&ps).into_iter();
    for r in rows.iter_mut().filter(|r| r.test.is_some()) {
        r.p_holm = adjusted.next();
    }
}

/// A row's cells from its seed count on: the mean, interval, t, p, Holm's p and the verdict
/// (`words(up)`: what a significant difference says, up when positive).
fn test_cells(r: &Row, words: impl Fn(bool) -> &'static str) -> String {
    match (r.test, r.p_holm) {
        (Some(t), Some(ph)) => {
            let verdict = if ph < 0.05 && t.diff.n == 2 {
                // (1 degree of freedom: flagged, and the note below the tables says why.)
                format!("{} (p {} after Holm; 2 seeds: see the note below)", words(t.diff.mean > 0.0), p_text(ph))
            } else if ph < 0.05 {
                format!("{} (p {} after Holm)", words(t.diff.mean > 0.0), p_text(ph))
            } else {
                format!("not distinguishable (p {} after Holm)", p_text(ph))
            };
            // No spread (every seed's difference the same): no interval nor t, the sign test's p.
            let (ci, tt, sign) = if t.no_spread {
                ("no spread".to_string(), "—".to_string(), " (sign test)")
            } else if t.diff.sd == 0.0 {
                // (No difference at any seed: t = 0 and p = 1, but an interval [0, 0] of no width
                // would say the mean is known to be exactly 0.)
                ("no spread".to_string(), format!("{:.2}", t.t), "")
            } else {
                (format!("[{:+.4}, {:+.4}]", t.diff.ci.0, t.diff.ci.1), format!("{:.2}", t.t), "")
            };
            format!(
                "{} | {:+.4} | {ci} | {tt} ({}) | {}{sign} | {} | {verdict} |",
                t.diff.n,
                t.diff.mean,
                t.df,
                p_text(t.p).trim_start_matches("= "),
                p_text(ph).trim_start_matches("= ")
            )
        }
        // (One seed's value shown as it is: no interval, no test.)
        _ => match r.untested[..] {
            [d] => format!("1 | {d:+.4} | | | | | too few seeds to test |"),
            _ => "< 2 | | | | | | too few seeds to test |".to_string(),
        },
    }
}

/// `blockI.attn` → 2I, `blockI.mlp` → 2I + 1 (other names last).
fn sublayer_index(s: &str) -> usize {
    let Some((block, kind)) = s.strip_prefix("block").and_then(|r| r.split_once('.')) else { return usize::MAX };
    block.parse::<usize>().map_or(usize::MAX, |b| 2 * b + usize::from(kind != "attn"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::test_support::{result, spec};

    fn with(v: &str, seed: u64, rows: &[(&str, Ablate, f64)]) -> RunResult {
        RunResult {
            ablations: Some(RunAblations {
                batches: 0,
                tokens: 4096,
                loss: 2.0,
                rows: rows
                    .iter()
                    .map(|&(s, part, d)| RunAblation { sublayer: s.into(), part, loss: 2.0 + d, difference: d })
                    .collect(),
            }),
            ..result(v, seed, 2.0, "abc")
        }
    }

    /// The section's statistics against values worked by hand, its verdicts, the runs it could
    /// not use, and the plot's rows.
    #[test]
    fn the_ablation_section_tests_each_part_over_seeds_against_values_by_hand() {
        let s = spec("ablate = [\"v\", \"write\", \"erase\"]\n").unwrap();
        let variants = s.variant_list().unwrap();
        // ddl, seeds 1-3. block0.mlp write: 0.10, 0.12, 0.14 → mean 0.12, sd 0.02, se 0.011547,
        // t = 10.392 (df 2), half-width t(0.975, 2) · se = 4.3027 · 0.011547 = 0.04968, two-sided
        // p (df 2: 1 − |t| / √(t² + 2)) = 1 − 10.392 / 10.488 = 0.00913.
        // Holm over the table's 6 rows: that p is the smallest but one, 5 · 0.00913 = 0.0457:
        // significant. erase: 0.2000, 0.2001, 0.2002 (t ≈ 3466, p ≈ 1e-7: significant after
        // Holm); erase − write: 0.1000, 0.0801, 0.0602, mean 0.0801. v: 0.05, −0.05, 0.00 → mean
        // 0, t = 0, p = 1. block0.attn: 0.01, 0.02, 0.03 for every part (t = 3.46, p = 0.074).
        let rows = |seed: u64| {
            let i = seed as f64 - 1.0;
            vec![
                ("block0.mlp", Ablate::Write, 0.10 + 0.02 * i),
                ("block0.mlp", Ablate::Erase, 0.20 + 0.0001 * i),
                ("block0.mlp", Ablate::Value, [0.05, -0.05, 0.0][seed as usize - 1]),
                ("block0.attn", Ablate::Write, 0.01 * seed as f64),
                ("block0.attn", Ablate::Erase, 0.01 * seed as f64),
                ("block0.attn", Ablate::Value, 0.01 * seed as f64),
            ]
        };
        let mut results: Vec<RunResult> = (1..=3).map(|seed| with("ddl", seed, &rows(seed))).collect();
        // The baseline has nothing to ablate; a ddl run without ablations is named.
        results.push(result("baseline", 1, 2.1, "abc"));
        let mut s4 = result("ddl", 4, 2.0, "abc");
        s4.ablations = None;
        results.push(s4);
        let (md, forest) = section(&s, &results, &variants);
        let line = |needle: &str| md.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle}: {md}"));
        let w = line("| ddl | block0.mlp | write=0 |");
        assert!(w.contains("| 3 | +0.1200 | [+0.0703, +0.1697] | 10.39 (2) | 0.009 | 0.046 | raises the loss (p = 0.046 after Holm) |"), "{w}");
        let e = line("| ddl | block0.mlp | erase=0 |");
        assert!(e.contains("| < 0.001 | < 0.001 | raises the loss (p < 0.001 after Holm) |"), "{e}");
        let a = line("| ddl | block0.attn | v=0 |");
        assert!(a.contains("| +0.0200 |") && a.contains("3.46 (2) | 0.074 |"), "{a}");
        let v = line("| ddl | block0.mlp | v=0 |");
        assert!(v.contains("| +0.0000 |") && v.contains("0.00 (2) | 1.000 | 1.000 | not distinguishable"), "{v}");
        let e = line("| ddl | block0.mlp | erase=0 − write=0 |");
        assert!(e.contains("| 3 | +0.0801 |"), "{e}");
        // Rows in model order: block0.attn before block0.mlp; write, erase, v within a sublayer.
        let at = |n: &str| md.find(n).unwrap();
        assert!(at("| ddl | block0.attn | write=0 |") < at("| ddl | block0.mlp | write=0 |"), "{md}");
        assert!(at("| ddl | block0.mlp | write=0 |") < at("| ddl | block0.mlp | erase=0 |"), "{md}");
        assert!(at("| ddl | block0.mlp | erase=0 |") < at("| ddl | block0.mlp | v=0 |"), "{md}");
        // Holm over the 6 rows: the smallest p (block0.mlp write, 0.009... or the attn rows with
        // t = 1.73...) adjusted upwards; every Holm p at least the raw one.
        for l in md.lines().filter(|l| l.starts_with("| ddl |")) {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let (p, ph) = (cells[8].trim_start_matches("< "), cells[9].trim_start_matches("< "));
            if let (Ok(p), Ok(ph)) = (p.parse::<f64>(), ph.parse::<f64>()) {
                assert!(ph >= p, "{l}");
            }
        }
        assert!(md.contains("**Not ablated yet (left out of this section):** ddl-seed4"), "{md}");
        assert!(!md.contains("baseline-seed1"), "the baseline is not a run to ablate: {md}");
        let said = line("**ddl** (3 seeds)");
        assert!(
            said.contains("removing the erased part raises the loss significantly in 1 of 2 sublayers (block0.mlp)"),
            "{said}"
        );
        assert!(
            said.contains("removing the whole write raises the loss significantly in 1 of 2 sublayers (block0.mlp)"),
            "{said}"
        );
        assert!(said.contains("erase=0 alone costs more than the whole write in"), "{said}");
        assert!(md.contains("4096 tokens"), "{md}");
        assert_eq!(forest.len(), 6);
        let f = forest.iter().find(|f| f.label == "ddl block0.mlp write=0").unwrap();
        assert!((f.mean - 0.12).abs() < 1e-12 && (f.lo - 0.0703).abs() < 1e-4 && f.significant);
        assert!(forest.iter().find(|f| f.label == "ddl block0.mlp erase=0").unwrap().significant);
        // Without `ablate`, no section; with it but one seed, the rows say so.
        let plain = spec("").unwrap();
        assert!(section(&plain, &results, &variants).0.is_empty());
        let (md1, f1) = section(&s, &results[..1], &variants);
        assert!(md1.contains("too few seeds to test") && f1.is_empty(), "{md1}");
        // One seed: no sentence of "significantly in 0 of 2 sublayers" (nothing was tested), its
        // values shown, and no plot named (the report writes none without an interval).
        assert!(!md1.contains("significantly") && !md1.contains("ablations.png"), "{md1}");
        assert!(md1.contains("**ddl** (1 seed): too few seeds to test"), "{md1}");
        let w = md1.lines().find(|l| l.starts_with("| ddl | block0.mlp | write=0 |")).unwrap();
        assert!(w.contains("| 1 | +0.1000 |"), "{w}");
    }

    /// A part whose removal changes nothing at any seed: no interval of no width ("[+0.0000,
    /// +0.0000]", as if the mean were known exactly), and no verdict.
    #[test]
    fn an_ablation_that_changes_nothing_claims_no_interval() {
        let s = spec("ablate = [\"write\"]\n").unwrap();
        let variants = s.variant_list().unwrap();
        let results: Vec<RunResult> =
            (1..=2).map(|seed| with("ddl", seed, &[("block0.mlp", Ablate::Write, 0.0)])).collect();
        let (md, _) = section(&s, &results, &variants);
        let w = md.lines().find(|l| l.starts_with("| ddl | block0.mlp | write=0 |")).unwrap_or_default();
        assert!(w.contains("| 2 | +0.0000 | no spread |") && w.contains("not distinguishable"), "{w}: {md}");
        assert!(!md.contains("[+0.0000, +0.0000]"), "{md}");
    }

    /// A verdict on 2 seeds (1 degree of freedom) is flagged and its weakness said, as the
    /// comparisons' are: two increases that happen to be close gave "raises the loss (p < 0.001
    /// after Holm)" without a word.
    #[test]
    fn an_ablation_verdict_on_two_seeds_says_how_little_it_rests_on() {
        let s = spec("ablate = [\"write\", \"erase\"]\n").unwrap();
        let variants = s.variant_list().unwrap();
        // write: 0.1000 and 0.1001 (t ≈ 2001, p ≈ 3e-4); erase − write: +0.1000 and +0.1002.
        let results: Vec<RunResult> = (1..=2)
            .map(|seed| {
                let i = seed as f64 - 1.0;
                with(
                    "ddl",
                    seed,
                    &[("block0.mlp", Ablate::Write, 0.1 + 1e-4 * i), ("block0.mlp", Ablate::Erase, 0.2 + 3e-4 * i)],
                )
            })
            .collect();
        let (md, _) = section(&s, &results, &variants);
        let w = md.lines().find(|l| l.starts_with("| ddl | block0.mlp | write=0 |")).unwrap_or_default();
        assert!(w.contains("raises the loss (p < 0.001 after Holm; 2 seeds: see the note below) |"), "{w}: {md}");
        assert!(
            md.contains("**On 2 seeds:** ddl block0.mlp write=0, ddl block0.mlp erase=0, ddl block0.mlp erase=0 − write=0: a verdict there rests on 1 degree of freedom"),
            "{md}"
        );
        // Three seeds: no such note.
        let mut three = results.clone();
        three.push(with("ddl", 3, &[("block0.mlp", Ablate::Write, 0.1002), ("block0.mlp", Ablate::Erase, 0.2006)]));
        let (md, _) = section(&s, &three, &variants);
        assert!(!md.contains("On 2 seeds") && !md.contains("see the note below"), "{md}");
    }

    #[test]
    fn ablate_in_a_spec_is_checked() {
        assert!(spec("ablate = [\"write\", \"erase\", \"v\"]\n").is_ok());
        let e = spec("ablate = [\"beta\"]\n").unwrap_err();
        assert!(e.contains("ablate: 'beta' is not a part of a write") && e.contains("\"erase\""), "{e}");
        let e = spec("ablate = [\"v\", \"v\"]\n").unwrap_err();
        assert!(e.contains("\"v\" appears twice"), "{e}");
        let e = spec("ablate_batches = 3\n").unwrap_err();
        assert!(e.contains("ablate_batches = 3: there is nothing to ablate"), "{e}");
        let e = spec("ablate = [\"write\"]\n").map(|_| ()).and_then(|_| {
            let t = "preset = \"tiny\"\nvariants = [\"baseline\"]\nseeds = [1]\nsteps = 5\nablate = [\"write\"]\n";
            let s: ExperimentSpec = toml::from_str(t).map_err(|e| e.to_string())?;
            s.check()
        });
        assert!(e.unwrap_err().contains("no variant of the spec has delta writes"));
        assert_eq!(sublayer_index("block3.mlp"), 7);
        assert_eq!(sublayer_index("block0.attn"), 0);
    }
}
