//! Whether the runs are long enough: the last fifth of the validation curves against half the
//! paired seed spread, and whether the comparisons still move.

use std::collections::BTreeMap;

use super::report::{Question, comparison_family, paired};
use super::{ExperimentSpec, RunResult};
use crate::model::Variant;

/// Whether the runs are long enough: over the last 20 % of the steps the mean validation curve
/// of every variant should change by less than half the paired seed spread (the median standard
/// deviation over seeds of the family's paired differences).
pub(super) fn length_section(spec: &ExperimentSpec, results: &[RunResult], variants: &[Variant]) -> String {
    let mut md = String::from("## Are the runs long enough?\n\n");
    // (Every run diverged: it gave the evaluations' spacing as the reason, and advised more.)
    if results.is_empty() {
        md.push_str("No verdict: every run diverged, so there is no curve to judge.\n\n");
        return md;
    }
    let family = comparison_family(variants);
    let core: Vec<_> = family.iter().filter(|f| f.2 == Question::PaperGap).collect();
    let use_: Vec<_> = if core.is_empty() { family.iter().collect() } else { core };
    let tests: Vec<_> = use_.iter().filter_map(|&&(a, b, _)| paired(results, a, b)).collect();
    // (A pair whose seeds all differ by the same amount has no spread to judge by: half of 0, or
    // of rounding error, called a curve that changed by 0.0000 "more than half the paired
    // spread (0.0000)", not long enough.)
    let spreads = |p: &&crate::stats::Paired| !p.no_spread && p.diff.sd > 0.0;
    let flat = !tests.is_empty() && !tests.iter().any(|p| spreads(&p));
    // (The median of an even count is the mean of the middle two: it took the upper one, the
    // larger of two pairs' spreads.)
    let mut sds: Vec<f64> = tests.iter().filter(spreads).map(|p| p.diff.sd).filter(|s| s.is_finite()).collect();
    let spread = (!sds.is_empty()).then(|| crate::stats::median(&mut sds));
    // The seeds the spread rests on: a standard deviation of 2 seeds (1 degree of freedom) may be
    // several times too large or too small (its 95 % interval spans a factor of 70), too uncertain
    // to call a run long enough by. (Those of the pairs with a spread: a pair without one, on
    // fewer seeds, is not in it, and withheld the verdict of a spread of 3 seeds.)
    let seeds = tests.iter().filter(spreads).map(|p| p.diff.n).min().unwrap_or(0);
    let from = 0.8 * spec.steps as f64;
    let mut rows = Vec::new();
    for &v in variants {
        let rs: Vec<&RunResult> = results.iter().filter(|r| r.variant == v.name()).collect();
        // The mean curve at the evaluations every seed has.
        let mut at: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for r in &rs {
            for &(s, l) in &r.val_curve {
                at.entry(s as u64).or_default().push(l);
            }
        }
        let mean: BTreeMap<u64, f64> = at
            .iter()
            .filter(|(_, ls)| !rs.is_empty() && ls.len() == rs.len())
            .map(|(&s, ls)| (s, ls.iter().sum::<f64>() / ls.len() as f64))
            .collect();
        let Some((start, end)) = last_fifth(mean.keys().copied(), from) else {
            continue;
        };
        rows.push((v, start, end, mean[&start] - mean[&end]));
    }
    if rows.is_empty() {
        md.push_str(&format!(
            "No verdict: judging a curve's end needs an evaluation near step {from:.0} (80 % of the steps) before \
             its last one, and the evaluation nearest it is the last; evaluate more often (`eval_every` under \
             [train]).\n\n"
        ));
        return md;
    }
    let mut table = String::from(
        "Change of the mean validation curve (the windows every evaluation covers) over the last 20 % of the \
         steps:\n\n| variant | from step | to step | decrease |\n|---|---:|---:|---:|\n",
    );
    for (v, a, b, d) in &rows {
        table.push_str(&format!("| {} | {a} | {b} | {d:+.4} |\n", v.name()));
    }
    let Some(spread) = spread else {
        if flat {
            md.push_str(&format!(
                "No paired spread to compare with (every compared pair's seeds differ by the same amount: no \
                 spread), so no verdict. {table}\n"
            ));
            return md;
        }
        // One seed (a pilot): the curves' changes, without a spread to judge them by; or no pair
        // to compare at all (it said "fewer than two seeds of a compared pair" to 5 seeds of one
        // variant).
        let why = if family.is_empty() {
            "the grid holds no compared pair: see Comparisons"
        } else {
            "fewer than two seeds of a compared pair"
        };
        md.push_str(&format!("No paired spread to compare with ({why}), so no verdict. {table}\n"));
        return md;
    };
    // The curve that changes most; a rise (the validation loss going up while the training
    // loss goes down) is overfitting, which longer runs make worse, not better.
    let (worst_variant, worst, rising) = rows
        .iter()
        .max_by(|a, b| a.3.abs().total_cmp(&b.3.abs()))
        .map(|r| (r.0, r.3.abs(), r.3 < 0.0))
        .expect("rows is not empty");
    md.push_str(&format!(
        "Half the paired seed spread: {:.4} (the median over the compared pairs of the standard deviation over \
         seeds of their final differences: {:.4}). {table}",
        spread / 2.0,
        spread
    ));
    // A schedule that decays over the run flattens every curve near its end, long enough or not.
    let decay = spec
        .run_config(variants[0], spec.all_seeds().first().copied().unwrap_or(1))
        .ok()
        .map(|r| (r.train.lr_at(from as usize), r.train.lr_at(spec.steps.saturating_sub(1)), r.train.lr))
        .filter(|&(a, _, peak)| a < 0.5 * peak);
    md.push_str(&format!(
        "\n{}{}\n\n",
        if seeds < 3 {
            // (Either way: a spread of 2 seeds may be far too small, which calls flat curves
            // "not long enough", as well as far too large, which calls moving ones long enough.)
            format!(
                "**No verdict**: {}, but that spread rests on {seeds} seeds per pair, too few to estimate it (the \
                 standard deviation of 2 values may be far too large or far too small: its 95 % interval spans a \
                 factor of about 70); run at least 3 seeds per variant for a verdict.",
                if worst < spread / 2.0 {
                    format!("every curve changes by less than half the paired spread (largest {worst:.4})")
                } else {
                    format!(
                        "the {} curve {} by {worst:.4} over the last 20 %, more than half the paired spread ({:.4})",
                        worst_variant.name(),
                        if rising { "rises" } else { "still changes" },
                        spread / 2.0
                    )
                }
            )
        } else if worst < spread / 2.0 {
            format!(
                "**Long enough**: every curve changes by less than half the paired spread (largest {worst:.4}; the \
                 spread from {seeds} or more seeds per pair)."
            )
        } else if rising {
            format!(
                "**Not settled: overfitting**: the {} curve rises by {worst:.4} over the last 20 %, more than half the \
                 paired spread ({:.4}; the spread from {seeds} or more seeds per pair): its validation loss went up \
                 while it trained, so longer runs would not settle it; a length near the curves' lowest point (or \
                 more data per parameter) would. Which comparisons moved over the last 20 %: below.",
                worst_variant.name(),
                spread / 2.0
            )
        } else {
            format!(
                "**Not long enough**: a curve still changes by {worst:.4}, more than half the paired spread ({:.4}; \
                 the spread from {seeds} or more seeds per pair); longer runs may move the comparisons (which ones \
                 moved over the last 20 %: below).",
                spread / 2.0
            )
        },
        match decay {
            Some((a, b, peak)) => format!(
                " The learning rate over these steps is {a:.2e} to {b:.2e}, below half its peak {peak:.2e} (the \
                 schedule decays over the run): part of any flattening is the schedule's, which slows every curve \
                 at its end whatever the run's length, so a flat end is necessary but not sufficient; how the \
                 comparisons moved says more (below)."
            ),
            None => String::new(),
        }
    ));
    md.push_str(&drift_table(results, &family, from, spread / 2.0, seeds));
    md
}

/// The last fifth of a curve: its evaluation step nearest `from` (80 % of the steps) and its last
/// one, ascending `steps`; `None` without two distinct steps.
fn last_fifth(steps: impl Iterator<Item = u64>, from: f64) -> Option<(u64, u64)> {
    let steps: Vec<u64> = steps.collect();
    let end = *steps.last()?;
    let start = *steps.iter().min_by(|x, y| (**x as f64 - from).abs().total_cmp(&(**y as f64 - from).abs()))?;
    (start < end).then_some((start, end))
}

/// How each comparison of the family moved over the last 20 % of the steps: the mean paired
/// difference a − b on the evaluation subset at the evaluation nearest 80 % of the steps and at
/// the last one both curves of every paired seed have, against half the paired spread. Where the
/// curves still fall but fall together, a comparison can be steady though the runs are not long
/// enough; where it moves, its final verdict may not hold at another length.
fn drift_table(
    results: &[RunResult],
    family: &[(Variant, Variant, Question)],
    from: f64,
    half: f64,
    seeds: usize,
) -> String {
    let curve = |v: Variant, seed: u64| -> Option<BTreeMap<u64, f64>> {
        results
            .iter()
            .find(|r| r.variant == v.name() && r.seed == seed)
            .map(|r| r.val_curve.iter().map(|&(s, l)| (s as u64, l)).collect())
    };
    let mut rows = Vec::new();
    for &(a, b, _) in family {
        let seeds: Vec<u64> = results.iter().filter(|r| r.variant == a.name()).map(|r| r.seed).collect();
        let pairs: Vec<(BTreeMap<u64, f64>, BTreeMap<u64, f64>)> =
            seeds.iter().filter_map(|&s| Some((curve(a, s)?, curve(b, s)?))).collect();
        if pairs.is_empty() {
            continue;
        }
        // The evaluation steps every curve of the pairs has.
        let common = pairs[0]
            .0
            .keys()
            .copied()
            .filter(|s| pairs.iter().all(|(ca, cb)| ca.contains_key(s) && cb.contains_key(s)));
        let Some((start, end)) = last_fifth(common, from) else {
            continue;
        };
        let mean_at = |s: u64| pairs.iter().map(|(ca, cb)| ca[&s] - cb[&s]).sum::<f64>() / pairs.len() as f64;
        let (d0, d1) = (mean_at(start), mean_at(end));
        rows.push(format!(
            "| {} − {} | {} | {start} | {d0:+.4} | {end} | {d1:+.4} | {:+.4} | {} |\n",
            a.name(),
            b.name(),
            pairs.len(),
            d1 - d0,
            if (d1 - d0).abs() < half { "steady" } else { "moves" }
        ));
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut md = format!(
        "Do the comparisons still move? Each comparison's mean paired difference on the evaluation subset \
         (not the whole split of the table above) at the start and the end of the last 20 % of the steps; \
         \"steady\" when it changed by less than half the paired spread ({half:.4}{}):\n\n\
         | a − b | seeds | from step | difference | to step | difference | change | |\n|---|---:|---:|---:|---:|---:|---:|---|\n",
        if seeds < 3 { format!("; a spread of {seeds} seeds per pair, a rough yardstick") } else { String::new() }
    );
    for r in rows {
        md.push_str(&r);
    }
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::test_support::{result, spec};

    #[test]
    fn the_length_check_compares_the_last_fifth_of_the_curves_with_half_the_paired_spread() {
        let s = spec("").unwrap(); // 20 steps, baseline and ddl, seeds 1 and 2
        let variants = s.variant_list().unwrap();
        // Paired differences baseline − ddl: 0.05 and 0.07 → sd 0.01414, half 0.00707.
        let mk = |drop: f64| -> Vec<RunResult> {
            [("baseline", 1, 2.20), ("baseline", 2, 2.22), ("ddl", 1, 2.15), ("ddl", 2, 2.15)]
                .iter()
                .map(|&(v, seed, l)| RunResult {
                    val_curve: vec![(8.0, l + 0.3), (16.0, l + drop), (20.0, l)],
                    ..result(v, seed, l, "abc")
                })
                .collect()
        };
        // Flat ends, but a spread of 2 seeds: no verdict.
        let md = length_section(&s, &mk(0.002), &variants);
        assert!(md.contains("Half the paired seed spread: 0.0071") && md.contains("**No verdict**"), "{md}");
        assert!(md.contains("rests on 2 seeds") && !md.contains("**Long enough**"), "{md}");
        // A third seed (differences 0.05, 0.07, 0.06: sd 0.01, half 0.005): long enough, with the
        // schedule's part said.
        let mut s3 = spec("").unwrap();
        s3.seeds = vec![1, 2, 3];
        let third = |mut rs: Vec<RunResult>| {
            for (v, l) in [("baseline", 2.21), ("ddl", 2.15)] {
                let mut curve = rs.iter().find(|r| r.variant == v).unwrap().val_curve.clone();
                let shift = l - curve[2].1;
                curve.iter_mut().for_each(|p| p.1 += shift);
                rs.push(RunResult { val_curve: curve, ..result(v, 3, l, "abc") });
            }
            rs
        };
        let three = |s: &crate::experiment::ExperimentSpec| length_section(s, &third(mk(0.002)), &variants);
        let md = three(&s3);
        assert!(md.contains("Half the paired seed spread: 0.0050") && md.contains("**Long enough**"), "{md}");
        assert!(md.contains("below half its peak"), "the cosine schedule's low end is said: {md}");
        assert!(md.contains("| ddl | 16 | 20 | +0.0020 |"), "{md}");
        // Both curves fell by the same 0.002: baseline − ddl is 0.06 at steps 16 and 20.
        assert!(md.contains("| baseline − ddl | 3 | 16 | +0.0600 | 20 | +0.0600 | +0.0000 | steady |"), "{md}");
        // A curve still falling 0.03 (more than half the spread): on 2 seeds no verdict, the
        // numbers and why (a spread of 2 seeds may be far too small), on 3 not long enough.
        let md = length_section(&s, &mk(0.03), &variants);
        assert!(md.contains("curve still changes by 0.0300 over the last 20 %, more than half the paired spread (0.0071), but that spread rests on 2 seeds"), "{md}");
        assert!(md.contains("**No verdict**: the ") && !md.contains("Not long enough"), "{md}");
        assert!(md.contains("a spread of 2 seeds per pair, a rough yardstick"), "{md}");
        let md = length_section(&s3, &third(mk(0.03)), &variants);
        assert!(md.contains("**Not long enough**: a curve still changes by 0.0300"), "{md}");
        // Still falling 0.03, but together: the comparison is steady.
        assert!(md.contains("| +0.0600 | +0.0000 | steady |") && !md.contains("rough yardstick"), "{md}");
        // The baseline falls 0.03 over the last fifth, ddl 0.002: the difference moves by −0.028.
        let mut moving = mk(0.002);
        for r in moving.iter_mut().filter(|r| r.variant == "baseline") {
            r.val_curve[1].1 += 0.028;
        }
        let md = length_section(&s, &moving, &variants);
        assert!(md.contains("| baseline − ddl | 2 | 16 | +0.0880 | 20 | +0.0600 | -0.0280 | moves |"), "{md}");
        // A curve that rises over the last fifth overfits: the verdict says so instead of asking
        // for longer runs.
        let mut rising = mk(0.002);
        for r in rising.iter_mut().filter(|r| r.variant == "ddl") {
            r.val_curve[1].1 -= 0.022;
        }
        let md = length_section(&s3, &third(rising.clone()), &variants);
        assert!(md.contains("| ddl | 16 | 20 | -0.0200 |"), "{md}");
        assert!(md.contains("**Not settled: overfitting**: the ddl curve rises by 0.0200"), "{md}");
        assert!(!md.contains("Not long enough") && !md.contains("**Long enough**"), "{md}");
        // (On 2 seeds: the rise, without a verdict.)
        let md = length_section(&s, &rising, &variants);
        assert!(md.contains("**No verdict**: the ddl curve rises by 0.0200") && !md.contains("Not settled"), "{md}");
        // One seed: no spread and no verdict, but the curves' changes still.
        let one: Vec<RunResult> = mk(0.002).into_iter().filter(|r| r.seed == 1).collect();
        let md = length_section(&s, &one, &variants);
        assert!(md.contains("No paired spread") && md.contains("no verdict"), "{md}");
        assert!(md.contains("(fewer than two seeds of a compared pair)"), "{md}");
        // Seeds of one variant, no pair to compare: that is why, not the seeds.
        let alone: Vec<RunResult> = mk(0.002).into_iter().filter(|r| r.variant == "ddl").collect();
        let md = length_section(&s, &alone, &[Variant::Ddl]);
        assert!(
            md.contains("No paired spread to compare with (the grid holds no compared pair: see Comparisons)"),
            "{md}"
        );
        assert!(md.contains("| ddl | 16 | 20 | +0.0020 |") && !md.contains("Long enough"), "{md}");
        // Every run diverged (the report passes only the runs that converged): said as the reason.
        let md = length_section(&s, &[], &variants);
        assert!(md.contains("No verdict: every run diverged") && !md.contains("eval_every"), "{md}");
        // Seeds that differ by the same amount (or not at all, runs collapsed alike): no spread
        // to judge by, so no verdict (it said a curve changing by 0.0000 changed "more than half
        // the paired spread (0.0000)", not long enough).
        for ddl in [2.15, 2.20] {
            let flat: Vec<RunResult> = [("baseline", 1, 2.20), ("baseline", 2, 2.20), ("ddl", 1, ddl), ("ddl", 2, ddl)]
                .iter()
                .map(|&(v, seed, l)| RunResult {
                    val_curve: vec![(8.0, l), (16.0, l), (20.0, l)],
                    ..result(v, seed, l, "abc")
                })
                .collect();
            let md = length_section(&s, &flat, &variants);
            assert!(
                md.contains("No paired spread to compare with (every compared pair's seeds differ by the same amount"),
                "{md}"
            );
            assert!(!md.contains("Not long enough") && !md.contains("Long enough") && !md.contains("Half the"), "{md}");
        }
    }

    /// The seeds the spread rests on are those of the pairs that have a spread: a pair whose 2
    /// seeds differ by the same amount (no spread, not in the median) withheld the verdict that
    /// a 3-seed pair's spread supports, as "rests on 2 seeds".
    #[test]
    fn the_seeds_of_the_spread_are_those_of_the_pairs_with_one() {
        let mut s = spec("").unwrap();
        s.variants = vec!["baseline".into(), "ddl_ec".into(), "ddl_cc".into()];
        s.seeds = vec![1, 2];
        s.extra_seeds = [("baseline".to_string(), vec![3]), ("ddl_ec".to_string(), vec![3])].into_iter().collect();
        let variants = s.variant_list().unwrap();
        // ddl_ec − baseline: −0.10, −0.08, −0.06 (3 seeds, sd 0.02, half 0.01); ddl_cc − baseline:
        // −0.05 twice (2 seeds, no spread). Every curve falls 0.002 over the last fifth.
        let mut results = Vec::new();
        for (seed, ec, cc) in [(1, 2.10, Some(2.15)), (2, 2.12, Some(2.15)), (3, 2.14, None)] {
            for (v, l) in [("baseline", Some(2.20)), ("ddl_ec", Some(ec)), ("ddl_cc", cc)] {
                let Some(l) = l else { continue };
                results.push(RunResult {
                    val_curve: vec![(8.0, l + 0.3), (16.0, l + 0.002), (20.0, l)],
                    ..result(v, seed, l, "abc")
                });
            }
        }
        let md = length_section(&s, &results, &variants);
        assert!(md.contains("Half the paired seed spread: 0.0100") && md.contains("**Long enough**"), "{md}");
        assert!(md.contains("the spread from 3 or more seeds per pair") && !md.contains("rests on 2 seeds"), "{md}");
    }

    /// The paired spread of an even number of compared pairs is the mean of the middle two
    /// standard deviations: it took the upper one (of two pairs, the larger spread), so a curve
    /// still falling by more than half the median spread was called long enough.
    #[test]
    fn the_spread_of_two_pairs_is_their_median_not_the_larger() {
        let mut s = spec("").unwrap();
        s.variants = vec!["baseline".into(), "ddl_ec".into(), "ddl_cc".into()];
        s.seeds = vec![1, 2, 3];
        let variants = s.variant_list().unwrap();
        // No paper gap: the family is ddl_ec − baseline (differences −0.10, −0.08, −0.06: sd 0.02)
        // and ddl_cc − baseline (−0.10, −0.04, +0.02: sd 0.06); their median 0.04, half 0.02.
        let mut results = Vec::new();
        for (seed, ec, cc) in [(1, 2.10, 2.10), (2, 2.12, 2.16), (3, 2.14, 2.22)] {
            for (v, l) in [("baseline", 2.20), ("ddl_ec", ec), ("ddl_cc", cc)] {
                results.push(RunResult {
                    val_curve: vec![(8.0, l + 0.3), (16.0, l + 0.025), (20.0, l)],
                    ..result(v, seed, l, "abc")
                });
            }
        }
        let md = length_section(&s, &results, &variants);
        assert!(
            md.contains("Half the paired seed spread: 0.0200")
                && md.contains("seeds of their final differences: 0.0400)"),
            "{md}"
        );
        // Every curve falls 0.025 over the last fifth: more than half the median spread.
        assert!(md.contains("**Not long enough**: a curve still changes by 0.0250"), "{md}");
    }
}
