//! The report: the table per variant, the fixed family of paired comparisons with Holm's
//! correction and the sentences they support, the length check, β regimes, speed and plots.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::length::length_section;
use super::speed::speed_section;
use super::{ExperimentError, ExperimentSpec, RunResult};
use crate::model::Variant;
use crate::stats;
use crate::train::{checkpoint, plot};

/// The paper's validation losses (Small 124M, FineWeb-Edu) for reference.
pub fn paper_val_loss(v: Variant) -> Option<f64> {
    match v {
        Variant::Baseline => Some(2.854),
        Variant::DdlV1 => Some(2.848),
        Variant::Ddl => Some(2.835),
        _ => None,
    }
}

/// The paper column for variants without a number: EC/CC are reported between the two DDL rows;
/// the v-Map variants have no Small-scale number.
fn paper_note(v: Variant) -> &'static str {
    match v {
        Variant::DdlV1Vmap | Variant::DdlVmap => "—",
        _ => "between the two DDL rows",
    }
}

fn mean_std(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let s = if x.len() > 1 { (x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt() } else { f64::NAN };
    (m, s)
}

fn pm(m: f64, s: f64) -> String {
    if s.is_finite() { format!("{m:.4} ± {s:.4}") } else { format!("{m:.4}") }
}

/// What a comparison of the report's family asks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Question {
    /// A gap of the paper's ordering: the first variant's loss is higher than the second's.
    PaperGap,
    /// A variant against the baseline (either direction).
    VsBaseline,
    /// v-Map against k-Map at one width (either direction).
    KvMap,
}

/// The report's family of comparisons `(a, b, question)`, each tested as a − b paired by seed,
/// fixed by the spec's variant list before any run: the three gaps of the paper's ordering,
/// every other variant against the baseline, and v-Map against k-Map at d_v = 1 and 4. Holm's
/// correction runs over all of them.
pub fn comparison_family(variants: &[Variant]) -> Vec<(Variant, Variant, Question)> {
    use Variant::*;
    let has = |v: Variant| variants.contains(&v);
    let mut f = Vec::new();
    for (a, b) in [(Baseline, DdlV1), (DdlV1, Ddl), (Baseline, Ddl)] {
        if has(a) && has(b) {
            f.push((a, b, Question::PaperGap));
        }
    }
    for &v in variants {
        if v != Baseline && v != DdlV1 && v != Ddl && has(Baseline) {
            f.push((v, Baseline, Question::VsBaseline));
        }
    }
    for (k, vm) in [(DdlV1, DdlV1Vmap), (Ddl, DdlVmap)] {
        if has(k) && has(vm) {
            f.push((vm, k, Question::KvMap));
        }
    }
    f
}

/// The sentence a comparison's numbers support (Holm-adjusted p at 5 %).
pub fn verdict(q: Question, a: Variant, b: Variant, diff: f64, p_holm: f64) -> String {
    let sig = p_holm < 0.05;
    let at = format!("p {} after Holm", p_text(p_holm));
    match (q, sig) {
        (_, false) => format!("not distinguishable ({at})"),
        (Question::PaperGap, true) if diff > 0.0 => format!("reproduced ({at}, below 0.05)"),
        (Question::PaperGap, true) => format!("reversed: {} lower than {} ({at})", a.name(), b.name()),
        (Question::VsBaseline, true) if diff < 0.0 => format!("lower than the baseline ({at})"),
        (Question::VsBaseline, true) => format!("higher than the baseline ({at})"),
        (Question::KvMap, true) if diff > 0.0 => format!("k-Map better ({at})"),
        (Question::KvMap, true) => format!("v-Map better ({at})"),
    }
}

/// The paired t-test of the final validation losses of `a` − `b` over the seeds both ran.
pub(super) fn paired(results: &[RunResult], a: Variant, b: Variant) -> Option<stats::Paired> {
    paired_on(results, a, b, |r| Some(r.final_val_loss))
}

/// The paired t-test of `key` (a run's number; `None`: the run has none) of `a` − `b` over the
/// seeds both have it for.
fn paired_on(
    results: &[RunResult],
    a: Variant,
    b: Variant,
    key: impl Fn(&RunResult) -> Option<f64>,
) -> Option<stats::Paired> {
    stats::Paired::of(&pairs_on(results, a, b, key))
}

/// The pairs `(a, b)` of `key` over the seeds both variants have it for.
fn pairs_on(results: &[RunResult], a: Variant, b: Variant, key: impl Fn(&RunResult) -> Option<f64>) -> Vec<(f64, f64)> {
    let of = |v: Variant| -> BTreeMap<u64, f64> {
        results.iter().filter(|r| r.variant == v.name()).filter_map(|r| Some((r.seed, key(r)?))).collect()
    };
    let (ra, rb) = (of(a), of(b));
    ra.iter().filter_map(|(s, x)| rb.get(s).map(|y| (*x, *y))).collect()
}

/// The cells "seeds | mean difference" of a comparison too small to test: one seed's difference
/// shown as it is (a pilot's only number), or "< 2" and a blank without any pair.
fn untested_cells(pairs: &[(f64, f64)], decimals: usize) -> String {
    match pairs {
        [(a, b)] => format!("1 | {:+.*}", decimals, a - b),
        _ => "< 2 | ".to_string(),
    }
}

/// The comparisons section: the family, each paired test, Holm's adjustment and the verdicts,
/// then the paper's ordering in one generated sentence; with the rows of its forest plot
/// (`comparisons.png`: each tested difference, its interval, significant after Holm or not).
fn comparisons_section(results: &[RunResult], variants: &[Variant]) -> (String, Vec<plot::Interval>) {
    let family = comparison_family(variants);
    let mut md = String::from("## Comparisons\n\n");
    let mut rows = Vec::new();
    if family.is_empty() {
        // (It said "it needs the baseline or a k-Map/v-Map pair" to a grid of the baseline alone.)
        let names: Vec<&str> = variants.iter().map(|v| v.name()).collect();
        md.push_str(&format!(
            "The grid holds no pair of the report's family, which compares the baseline with each other variant, \
             ddl_v1 with ddl, and each k-Map variant with its v-Map (ddl_v1 with ddl_v1_vmap, ddl with ddl_vmap); \
             this grid's variants: {}.\n\n",
            names.join(", ")
        ));
        return (md, rows);
    }
    let tests: Vec<Option<stats::Paired>> = family.iter().map(|&(a, b, _)| paired(results, a, b)).collect();
    let ps: Vec<f64> = tests.iter().map(|t| t.map(|t| t.p).unwrap_or(1.0)).collect();
    let adjusted = stats::holm(&ps);
    let listed: Vec<String> = family.iter().map(|(a, b, _)| format!("{} − {}", a.name(), b.name())).collect();
    md.push_str(&format!(
        "The family, fixed by the spec's variant list before the runs ({}): {}. Each is the \
         difference of final validation losses paired by seed (the runs of a seed share their batches): \
         its mean, 95 % t-interval (seeds − 1 degrees of freedom), Student's paired t and two-sided p, and \
         p adjusted by Holm's method over the whole family. A verdict needs the adjusted p below 0.05.\n\n",
        crate::plural(family.len(), "comparison"),
        listed.join(", ")
    ));
    md.push_str("| a − b | seeds | mean difference | 95 % interval | t (df) | p | p (Holm) | verdict |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---|\n");
    let mut verdicts = Vec::new();
    // Significant comparisons on 2 seeds (1 degree of freedom): flagged, and said below.
    let mut on_two = Vec::new();
    for (((a, b, q), t), ph) in family.iter().zip(&tests).zip(&adjusted) {
        match t {
            Some(t) => {
                let mut v = verdict(*q, *a, *b, t.diff.mean, *ph);
                if t.diff.n == 2 && *ph < 0.05 {
                    v.push_str(" (2 seeds: see the note below)");
                    on_two.push(format!("{} − {}", a.name(), b.name()));
                }
                md.push_str(&format!(
                    "| {} − {} | {} | {:+.4} | {} | {} ({}) | {} | {} | {v} |\n",
                    a.name(),
                    b.name(),
                    t.diff.n,
                    t.diff.mean,
                    if t.no_spread || t.diff.sd == 0.0 { "no spread".into() } else { interval(t.diff.ci) },
                    if t.no_spread { "—".to_string() } else { format!("{:.2}", t.t) },
                    t.df,
                    p_text(t.p).trim_start_matches("= ").to_string() + if t.no_spread { " (sign test)" } else { "" },
                    p_text(*ph).trim_start_matches("= ")
                ));
                verdicts.push(((*a, *b), (t.diff.mean, *ph)));
                rows.push(plot::Interval {
                    label: format!("{} − {}", a.name(), b.name()),
                    mean: t.diff.mean,
                    lo: if t.no_spread { f64::NAN } else { t.diff.ci.0 },
                    hi: if t.no_spread { f64::NAN } else { t.diff.ci.1 },
                    significant: *ph < 0.05,
                });
            }
            None => md.push_str(&format!(
                "| {} − {} | {} | | | | | too few paired seeds to test |\n",
                a.name(),
                b.name(),
                untested_cells(&pairs_on(results, *a, *b, |r| Some(r.final_val_loss)), 4)
            )),
        }
    }
    md.push('\n');
    md.push_str(&no_spread_notes(&family, &tests, 4, ""));
    md.push_str(&two_seeds_note(&on_two));
    // The paper's ordering baseline > ddl_v1 > ddl: both adjacent gaps must hold.
    let gap = |a: Variant, b: Variant| verdicts.iter().find(|(k, _)| *k == (a, b)).map(|(_, x)| *x);
    if let (Some(g1), Some(g2)) = (gap(Variant::Baseline, Variant::DdlV1), gap(Variant::DdlV1, Variant::Ddl)) {
        let holds = |g: (f64, f64)| g.0 > 0.0 && g.1 < 0.05;
        let reversed = |g: (f64, f64)| g.0 < 0.0 && g.1 < 0.05;
        let sentence = if holds(g1) && holds(g2) {
            "**reproduced**: both gaps are significant at p < 0.05 after Holm, in the paper's direction".to_string()
        } else if reversed(g1) || reversed(g2) {
            "**not reproduced**: at least one gap is significantly reversed".to_string()
        } else if holds(g1) || holds(g2) {
            // One gap holds, the other is not distinguishable: not the whole ordering.
            let said = |g: (f64, f64)| {
                format!(
                    "{:+.4} ({}, p {} after Holm)",
                    g.0,
                    if holds(g) { "holds" } else { "not distinguishable" },
                    p_text(g.1)
                )
            };
            format!(
                "**not reproduced in full**: one gap holds, the other is not distinguishable at this size and number \
                 of seeds: baseline − ddl_v1 {}, ddl_v1 − ddl {}",
                said(g1),
                said(g2)
            )
        } else {
            format!(
                "**not distinguishable** at this size and number of seeds: baseline − ddl_v1 {:+.4} (p {} after Holm), \
                 ddl_v1 − ddl {:+.4} (p {} after Holm)",
                g1.0,
                p_text(g1.1),
                g2.0,
                p_text(g2.1)
            )
        };
        let few = [(Variant::Baseline, Variant::DdlV1), (Variant::DdlV1, Variant::Ddl)]
            .iter()
            .any(|&(a, b)| on_two.contains(&format!("{} − {}", a.name(), b.name())));
        md.push_str(&format!(
            "The paper's ordering (baseline > ddl_v1 > ddl in validation loss; 2.854 > 2.848 > 2.835 at 124M): \
             {sentence}{}.\n\n",
            if few { " (on 2 seeds: see the note above)" } else { "" }
        ));
    }
    if !rows.is_empty() {
        md.push_str(
            "Plot: `comparisons.png` (each difference with its 95 % interval; filled red: significant after Holm, \
             hollow grey: not).\n\n",
        );
    }
    (md, rows)
}

/// The top-1 accuracy section (runs that logged it): per variant the final validation accuracy
/// over seeds, and the loss's family of comparisons on it, paired by seed, with Holm's
/// correction over this family on its own. Empty when no run has an accuracy (results made
/// before it was logged).
fn accuracy_section(results: &[RunResult], variants: &[Variant]) -> String {
    let with: Vec<&RunResult> = results.iter().filter(|r| r.final_val_accuracy.is_some()).collect();
    if with.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "## Top-1 accuracy

",
    );
    let without = results.len() - with.len();
    md.push_str(&format!(
        "The final evaluation's top-1 accuracy: the share of the same validation tokens that were the model's likeliest \
         prediction, in percent{}. Per variant: mean ± sample sd over seeds and the 95 % t-interval of the mean, cut at 0 and \
         100 % where it passes them (an accuracy lies between; the t-interval of a few seeds near either bound \
         does not); then the comparisons above on it (a − b in points, paired by seed; intervals cut at ±100), with \
         Holm's correction over these comparisons on their own. The verdicts of the report rest on the loss; these say whether the accuracy moves with it.\n\n",
        if without > 0 { format!(" ({without} run(s) made before it was logged are left out)") } else { String::new() }
    ));
    md.push_str("| variant | seeds | val accuracy % (mean ± sd) | 95 % interval |\n|---|---:|---:|---:|\n");
    for v in variants {
        let acc: Vec<f64> = with
            .iter()
            .filter(|r| r.variant == v.name())
            .filter_map(|r| r.final_val_accuracy.map(|a| 100.0 * a))
            .collect();
        if acc.is_empty() {
            md.push_str(&format!("| {} | 0 | | |\n", v.name()));
            continue;
        }
        let a = stats::Sample::of(&acc);
        // (An accuracy lies in 0 ..= 100 %: a t-interval past either bound is cut there.)
        let ci = sample_interval(&a, |ci| format!("[{:.2}, {:.2}]", ci.0.max(0.0), ci.1.min(100.0)));
        let sd = if a.sd.is_finite() { format!(" ± {:.2}", a.sd) } else { String::new() };
        md.push_str(&format!("| {} | {} | {:.2}{sd} | {ci} |\n", v.name(), a.n, a.mean));
    }
    md.push('\n');
    let family = comparison_family(variants);
    let tests: Vec<Option<stats::Paired>> =
        family.iter().map(|&(a, b, _)| paired_on(results, a, b, |r| r.final_val_accuracy.map(|x| 100.0 * x))).collect();
    if tests.iter().all(Option::is_none) {
        md.push_str("No pair of the family has two seeds with an accuracy to compare.\n\n");
        return md;
    }
    let ps: Vec<f64> = tests.iter().map(|t| t.map(|t| t.p).unwrap_or(1.0)).collect();
    let adjusted = stats::holm(&ps);
    let mut on_two = Vec::new();
    md.push_str("| a − b | seeds | mean difference (points) | 95 % interval | p | p (Holm) | verdict |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---|\n");
    for (((va, vb, _), t), ph) in family.iter().zip(&tests).zip(&adjusted) {
        let (a, b) = (va.name(), vb.name());
        match t {
            Some(t) => {
                let mut verdict = match (*ph < 0.05, t.diff.mean > 0.0) {
                    (false, _) => format!("not distinguishable (p {} after Holm)", p_text(*ph)),
                    (true, true) => format!("{a} more accurate (p {} after Holm)", p_text(*ph)),
                    (true, false) => format!("{b} more accurate (p {} after Holm)", p_text(*ph)),
                };
                if t.diff.n == 2 && *ph < 0.05 {
                    verdict.push_str(" (2 seeds: see the note below)");
                    on_two.push(format!("{a} − {b}"));
                }
                let ci = t.diff.ci;
                let ci = if t.no_spread || t.diff.sd == 0.0 {
                    "no spread".into()
                } else if ci.0.is_finite() {
                    // (A difference of two accuracies lies in −100 ..= +100 points.)
                    format!("[{:+.2}, {:+.2}]", ci.0.max(-100.0), ci.1.min(100.0))
                } else {
                    "—".into()
                };
                md.push_str(&format!(
                    "| {a} − {b} | {} | {:+.2} | {ci} | {} | {} | {verdict} |\n",
                    t.diff.n,
                    t.diff.mean,
                    p_text(t.p).trim_start_matches("= ").to_string() + if t.no_spread { " (sign test)" } else { "" },
                    p_text(*ph).trim_start_matches("= ")
                ));
            }
            None => md.push_str(&format!(
                "| {a} − {b} | {} | | | | too few paired seeds to test |\n",
                untested_cells(&pairs_on(results, *va, *vb, |r| r.final_val_accuracy.map(|x| 100.0 * x)), 2)
            )),
        }
    }
    md.push('\n');
    md.push_str(&no_spread_notes(&family, &tests, 2, " points"));
    md.push_str(&two_seeds_note(&on_two));
    md
}

/// A paragraph naming the significant comparisons that rest on 2 seeds (`on_two`), and why that
/// is little; empty when there are none.
pub(super) fn two_seeds_note(on_two: &[String]) -> String {
    if on_two.is_empty() {
        return String::new();
    }
    format!(
        "**On 2 seeds:** {}: a verdict there rests on 1 degree of freedom. The spread of two differences may be far \
         smaller (or larger) than the seeds' true spread, and the interval and p lean wholly on that one estimate \
         (and on the differences being normal); the exact sign test of 2 seeds cannot go below p = 0.5. Run at least \
         3 seeds per variant (`seeds` in the spec) before taking it as a result.\n\n",
        on_two.join(", ")
    )
}

/// A paragraph naming the comparisons whose seeds all differ by the same amount (no spread: no
/// t-test nor interval, the sign test's p instead); empty when there are none.
fn no_spread_notes(
    family: &[(Variant, Variant, Question)],
    tests: &[Option<stats::Paired>],
    decimals: usize,
    unit: &str,
) -> String {
    let notes: Vec<String> = family
        .iter()
        .zip(tests)
        .filter_map(|((a, b, _), t)| {
            let t = t.as_ref()?;
            let note = t.no_spread_note(decimals)?;
            Some(format!(
                "{} − {}: {}",
                a.name(),
                b.name(),
                note.replacen(
                    &format!("{:+.*}", decimals, t.diff.mean),
                    &format!("{:+.*}{unit}", decimals, t.diff.mean),
                    1
                )
            ))
        })
        .collect();
    if notes.is_empty() {
        return String::new();
    }
    format!(
        "No spread: {}. Every seed's difference is the same there, so Student's t says nothing (t is infinite); \
         the p given is the exact two-sided sign test's, 2^(1−seeds), and Holm adjusts it with the others.\n\n",
        notes.join("; ")
    )
}

/// "[1, 2, 3]", with the extra seeds of some variants.
fn seeds_text(spec: &ExperimentSpec) -> String {
    let mut t = format!("{:?}", spec.seeds);
    let extra: Vec<String> = spec.extra_seeds.iter().map(|(v, s)| format!("{v} also {s:?}")).collect();
    if !extra.is_empty() {
        t.push_str(&format!(" ({})", extra.join(", ")));
    }
    t
}

/// "= 0.034", or "< 0.001".
pub(super) fn p_text(p: f64) -> String {
    if p < 0.001 { "< 0.001".into() } else { format!("= {p:.3}") }
}

/// The 95 % interval cell of a sample's mean: "—" without one (a single seed), "no spread" where
/// every seed gave the same number (the t-interval [m, m] has no width: it said "[4.0604, 4.0604]"
/// of two runs that both ended at the uniform distribution's loss, as if the mean were known
/// exactly), else `shown(ci)`.
fn sample_interval(s: &stats::Sample, shown: impl Fn((f64, f64)) -> String) -> String {
    if !(s.ci.0.is_finite() && s.ci.1.is_finite()) {
        "—".into()
    } else if s.sd == 0.0 {
        "no spread".into()
    } else {
        shown(s.ci)
    }
}

/// `[lo, hi]` of a difference's interval, signed (blank without one).
fn interval(ci: (f64, f64)) -> String {
    if ci.0.is_finite() && ci.1.is_finite() { format!("[{:+.4}, {:+.4}]", ci.0, ci.1) } else { "—".into() }
}

/// Writes `report.md`, `val_loss.png` and `beta_regimes.png`; returns the report's path.
pub(super) fn write_report(
    out: &Path,
    spec: &ExperimentSpec,
    variants: &[Variant],
    all: &[RunResult],
    missing: &[String],
) -> Result<PathBuf, ExperimentError> {
    // Runs that diverged (a final validation loss that is not finite) are listed, said, and left
    // out of every mean, interval and test: those are then of the runs that converged.
    let kept: Vec<RunResult> = all.iter().filter(|r| !r.diverged()).cloned().collect();
    let diverged: Vec<String> =
        all.iter().filter(|r| r.diverged()).map(|r| format!("{}-seed{}", r.variant, r.seed)).collect();
    let results = &kept[..];
    let by_variant: BTreeMap<usize, Vec<&RunResult>> = variants
        .iter()
        .enumerate()
        .map(|(i, v)| (i, results.iter().filter(|r| r.variant == v.name()).collect()))
        .collect();
    let mut md = String::new();
    let title = if spec.name.is_empty() { "experiment".to_string() } else { spec.name.clone() };
    md.push_str(&format!("# Experiment: {title}\n\n"));
    if !spec.description.is_empty() {
        md.push_str(&format!("{}\n\n", spec.description.trim()));
    }
    let any = all[0].clone();
    let val_tokens: BTreeSet<usize> = all.iter().map(|r| r.val_tokens).collect();
    let val_what = match (val_tokens.len(), val_tokens.first()) {
        (1, Some(&0)) => "the run's last evaluation (results made before the whole-split evaluation)".to_string(),
        (1, Some(&n)) => {
            // train.val_max_tokens cut the split when the evaluation reached it (a split shorter
            // than the cap gives fewer tokens than the cap).
            let cap = spec.train.get("val_max_tokens").and_then(|v| v.as_integer()).unwrap_or(0);
            if cap > 0 && n as i64 >= cap {
                format!(
                    "the validation split's first {n} tokens at the end of the run (train.val_max_tokens = {cap}; \
                     the same for every run)"
                )
            } else {
                format!("the whole validation split at the end of the run ({n} tokens, the same for every run)")
            }
        }
        _ => format!("the final evaluation; token counts differ between runs: {val_tokens:?}"),
    };
    md.push_str(&format!(
        "Preset `{}`, {} steps per run ({} tokens{}), seeds {}; every run of one seed sees the same \
         batches in the same order. Train loss is the mean over the last tenth of the steps; val \
         loss is measured over {val_what}. Per variant: mean, sample standard deviation over seeds \
         and the 95 % t-interval of the mean. Speed: its own section, measured in one process.\n\n",
        spec.preset,
        spec.steps,
        any.tokens,
        // (How the spec gave the length, where not in steps.)
        match (spec.tokens, spec.epochs) {
            (Some(t), _) => format!("; `tokens = {}`", crate::train::cache::count(t)),
            (_, Some(e)) => format!("; `epochs = {e}`: passes over the training split"),
            _ => String::new(),
        },
        seeds_text(spec),
    ));
    // Which build made the runs.
    let commits: BTreeSet<(String, String)> = all.iter().map(|r| (r.commit.clone(), r.dirty.clone())).collect();
    let commit_text: Vec<String> = commits
        .iter()
        .map(|(c, d)| if c.is_empty() { "unrecorded".to_string() } else { format!("{} ({d})", &c[..c.len().min(12)]) })
        .collect();
    md.push_str(&format!("Engine: {}.\n\n", commit_text.join(", ")));
    if commits.len() > 1 {
        md.push_str("**Warning: these runs were made by different builds of the engine.**\n\n");
    }
    // Which data: every run's data.json names the tokens it trained on (a grid resumed after its
    // corpus was edited, by a version that did not check, mixes texts).
    let data: BTreeSet<String> = all
        .iter()
        .filter_map(|r| {
            let path =
                out.join("runs").join(super::run_name(Variant::parse(&r.variant).ok()?, r.seed)).join("data.json");
            let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
            Some(format!("{} ({} train tokens)", v["key"].as_str()?, v["train_tokens"]))
        })
        .collect();
    if data.len() > 1 {
        md.push_str(&format!(
            "**Warning: these runs trained on different data ({}: the corpus changed while the grid ran); their \
             comparisons pair runs on different texts.**\n\n",
            data.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    // Which adapters trained them (runs made before it was recorded: "unrecorded").
    let mut adapters: BTreeMap<&str, usize> = BTreeMap::new();
    for r in all {
        *adapters.entry(if r.adapter.is_empty() { "unrecorded" } else { r.adapter.as_str() }).or_default() += 1;
    }
    let adapter_text: Vec<String> =
        adapters.iter().map(|(a, n)| format!("{a}: {}", crate::plural(*n, "run"))).collect();
    md.push_str(&format!("Adapter: {}.\n\n", adapter_text.join("; ")));
    if adapters.keys().filter(|a| **a != "unrecorded").count() > 1 {
        md.push_str(
            "**Warning: these runs were trained on different adapters, whose kernel forms round differently.**\n\n",
        );
    }
    if !missing.is_empty() {
        md.push_str(&format!("**Unfinished runs (not in the table):** {}\n\n", missing.join(", ")));
    }
    if !diverged.is_empty() {
        md.push_str(&format!(
            "**Diverged runs (final validation loss not finite; listed under Runs, left out of every mean, interval \
             and test below, which are therefore those of the runs that converged):** {}. A lower `lr` under \
             [train] (in a new --out) trains them again.\n\n",
            diverged.join(", ")
        ));
    }
    // Runs that finished with steps skipped (`skip_nonfinite`): fewer updates than the steps the
    // report names, which nothing said (a run whose every step after the first was skipped stood
    // in the table as one trained for all of them).
    let skipped: Vec<String> = all
        .iter()
        .filter(|r| r.skipped_steps > 0)
        .map(|r| {
            let diverged = if r.diverged() { ", diverged" } else { "" };
            format!("{}-seed{} ({} of {}{diverged})", r.variant, r.seed, r.skipped_steps, r.steps)
        })
        .collect();
    if !skipped.is_empty() {
        md.push_str(&format!(
            "**Runs with skipped steps (a loss or gradient that was not finite, skipped by `skip_nonfinite` under \
             [train]: no update at those steps; those that did not diverge are in the statistics below, as \
             trained for fewer updates than the others):** {}. A lower `lr` under [train] (in a new --out) trains them without.\n\n",
            skipped.join(", ")
        ));
    }
    md.push_str("| variant | params | seeds | train loss | val loss (mean ± sd) | 95 % interval | val perplexity | paper val loss (Small 124M) |\n");
    md.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (i, v) in variants.iter().enumerate() {
        let rs = &by_variant[&i];
        if rs.is_empty() {
            md.push_str(&format!("| {} | | 0 | | | | | |\n", v.name()));
            continue;
        }
        let tl: Vec<f64> = rs.iter().map(|r| r.final_train_loss).collect();
        let vl: Vec<f64> = rs.iter().map(|r| r.final_val_loss).collect();
        let (t, val) = (stats::Sample::of(&tl), stats::Sample::of(&vl));
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {:.2} | {} |\n",
            v.name(),
            rs[0].params,
            rs.len(),
            pm(t.mean, t.sd),
            pm(val.mean, val.sd),
            // (A variant's own mean, not a difference: no sign.)
            sample_interval(&val, |ci| format!("[{:.4}, {:.4}]", ci.0, ci.1)),
            val.mean.exp(),
            paper_val_loss(*v).map(|x| format!("{x:.3}")).unwrap_or_else(|| paper_note(*v).into()),
        ));
    }
    md.push('\n');
    let (comparisons, forest) = comparisons_section(results, variants);
    md.push_str(&comparisons);
    md.push_str(&accuracy_section(results, variants));
    md.push_str(&length_section(spec, results, variants));
    // β regimes.
    let ddl_rows: Vec<(Variant, Vec<[f64; 3]>, Vec<f64>)> = variants
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_ddl())
        .filter_map(|(i, v)| {
            // (The runs with a count and a mean β per sublayer of the model: a result.json edited
            // or cut short is left out here, not read past its end.)
            let n_sub = by_variant[&i].iter().map(|r| r.regimes.len()).max()?;
            let rs: Vec<&&RunResult> =
                by_variant[&i].iter().filter(|r| r.regimes.len() == n_sub && r.beta_mean.len() == n_sub).collect();
            if n_sub == 0 {
                return None;
            }
            let mut shares = vec![[0.0; 3]; n_sub];
            let mut beta = vec![0.0; n_sub];
            for r in &rs {
                for s in 0..n_sub {
                    let tot = r.regimes[s].iter().sum::<u64>().max(1) as f64;
                    for (share, &count) in shares[s].iter_mut().zip(&r.regimes[s]) {
                        *share += count as f64 / tot / rs.len() as f64;
                    }
                    beta[s] += r.beta_mean[s] / rs.len() as f64;
                }
            }
            Some((*v, shares, beta))
        })
        .collect();
    if !ddl_rows.is_empty() {
        md.push_str("## β regimes at the end of training\n\n");
        // The tokens each run counted (a sublayer's counts add up to them): `beta_batches` is a
        // cap, which a short validation split does not reach.
        let counted: BTreeSet<u64> = results
            .iter()
            .filter_map(|r| r.regimes.first())
            .map(|c| c.iter().sum::<u64>())
            .filter(|&n| n > 0)
            .collect();
        let tokens = match (counted.first(), counted.last()) {
            (Some(a), Some(b)) if a != b => format!("{a} to {b} "),
            (Some(a), _) => format!("{a} "),
            _ => String::new(),
        };
        md.push_str(&format!(
            "Share of {tokens}validation tokens (the first {} batches of the validation split, or all of it where it \
             has fewer) whose gate β is identity-like (β < 0.5, λ = 1−β > 0.5), a \
             projection (0.5 ≤ β ≤ 1.5) or reflection-like (β > 1.5), per sublayer (block i: attention `iA`, MLP \
             `iM`), averaged over seeds, with the mean β. Plot: `beta_regimes.png`.\n\n",
            spec.beta_batches
        ));
        md.push_str(
            "| variant | sublayer | identity | projection | reflection | mean β |\n|---|---|---:|---:|---:|---:|\n",
        );
        for (v, shares, beta) in &ddl_rows {
            for (s, sh) in shares.iter().enumerate() {
                md.push_str(&format!(
                    "| {} | {}{} | {:.0}% | {:.0}% | {:.0}% | {:.3} |\n",
                    v.name(),
                    s / 2,
                    if s % 2 == 0 { "A" } else { "M" },
                    sh[0] * 100.0,
                    sh[1] * 100.0,
                    sh[2] * 100.0,
                    beta[s]
                ));
            }
        }
        md.push('\n');
    }
    let (ablations, ablation_rows) = super::ablation::section(spec, results, variants);
    md.push_str(&ablations);
    if variants.iter().all(|&v| v == Variant::Baseline) {
        md.push_str(
            "## Speed\n\nNot measured: the section times each variant's step against the baseline's, and this grid \
             has no variant besides the baseline.\n\n",
        );
    } else if variants.contains(&Variant::Baseline) {
        md.push_str(&speed_section(out, variants));
    } else {
        md.push_str(
            "## Speed\n\nNot measured: the section times each variant's step against the baseline's, and this grid \
             has no baseline variant.\n\n",
        );
    }
    // (The accuracy column where some run logged it.)
    let accuracy = all.iter().any(|r| r.final_val_accuracy.is_some());
    md.push_str(&format!(
        "## Runs\n\nTheir tok/s and wall time are those of a machine shared with other work: not a speed \
         measurement (see Speed).\n\n| run | val loss |{} train loss | tok/s | wall time |\n|---|---:|{}---:|---:|---:|\n",
        if accuracy { " val accuracy |" } else { "" },
        if accuracy { "---:|" } else { "" }
    ));
    for r in all {
        let acc = match (accuracy, r.final_val_accuracy) {
            (false, _) => String::new(),
            (true, Some(a)) => format!(" {:.2} % |", 100.0 * a),
            (true, None) => " |".into(),
        };
        let val =
            if r.diverged() { format!("{} (diverged)", r.final_val_loss) } else { format!("{:.4}", r.final_val_loss) };
        md.push_str(&format!(
            "| {}-seed{} | {val} |{acc} {:.4} | {:.0} | {:.0} s |\n",
            r.variant, r.seed, r.final_train_loss, r.tok_per_s, r.elapsed_s
        ));
    }
    let total_s: f64 = all.iter().map(|r| r.elapsed_s).filter(|s| s.is_finite()).sum();
    // (Seconds for a grid of short runs, where "0.0 min" said nothing.)
    let total = if total_s < 60.0 { format!("{total_s:.1} s") } else { format!("{:.1} min", total_s / 60.0) };
    md.push_str(&format!(
        "\nTotal training time {total}. Plots: {}{}{}{}.\n",
        if results.is_empty() { "none (every run diverged)" } else { "`val_loss.png`" },
        if forest.is_empty() { "" } else { ", `comparisons.png`" },
        if ddl_rows.is_empty() { "" } else { ", `beta_regimes.png`" },
        if ablation_rows.is_empty() { String::new() } else { format!(", `{}`", super::ablation::PLOT) }
    ));

    // A plot that cannot be written (a folder at its path, a full disk): which file, and what to
    // do (it said "Is a directory (os error 21)" alone).
    let plot_error = |name: &str| {
        let path = out.join(name);
        move |e: String| {
            ExperimentError::Report(format!(
                "cannot write the plot '{}': {e}; report.md was not written either. Move what is at that path \
                 away (or free disk space), then run the same command with --report-only",
                path.display()
            ))
        }
    };
    // Validation-loss curves: mean over seeds with a min–max band.
    let mut bands = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let rs = &by_variant[&i];
        if rs.is_empty() {
            continue;
        }
        let mut at: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
        for r in rs {
            for &(s, l) in &r.val_curve {
                at.entry(s as u64).or_default().push(l);
            }
        }
        let pts = at
            .iter()
            .filter(|(_, ls)| ls.len() == rs.len())
            .map(|(&s, ls)| {
                let (m, _) = mean_std(ls);
                let lo = ls.iter().cloned().fold(f64::INFINITY, f64::min);
                let hi = ls.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                (s as f64, m, lo, hi)
            })
            .collect();
        bands.push(plot::Band { name: v.name().to_string(), points: pts });
    }
    if bands.iter().flat_map(|b| &b.points).all(|p| !p.1.is_finite()) {
        // (Every run diverged: no curve to draw, nor an earlier report's to keep.)
        let _ = std::fs::remove_file(out.join("val_loss.png"));
    } else {
        plot::band_plot(
            &out.join("val_loss.png"),
            &format!("validation loss ({title}): mean over seeds, band = min..max"),
            "step",
            "cross-entropy (nats)",
            &bands,
        )
        .map_err(plot_error("val_loss.png"))?;
    }
    let panels: Vec<plot::RegimePanel> = ddl_rows
        .iter()
        .map(|(v, shares, _)| plot::RegimePanel {
            name: v.name().to_string(),
            labels: (0..shares.len()).map(|s| format!("{}{}", s / 2, if s % 2 == 0 { "A" } else { "M" })).collect(),
            shares: shares.clone(),
        })
        .collect();
    if !panels.is_empty() {
        plot::regime_plot(&out.join("beta_regimes.png"), "β regimes per sublayer on validation text", &panels)
            .map_err(plot_error("beta_regimes.png"))?;
    } else {
        // (An earlier report's plot would sit beside a report that has no such section.)
        let _ = std::fs::remove_file(out.join("beta_regimes.png"));
    }
    if forest.is_empty() {
        let _ = std::fs::remove_file(out.join("comparisons.png"));
    } else {
        plot::interval_plot(
            &out.join("comparisons.png"),
            "paired differences of final validation loss (a − b, nats): mean and 95 % interval",
            "a − b (nats); > 0: b lower",
            &forest,
        )
        .map_err(plot_error("comparisons.png"))?;
    }
    if ablation_rows.is_empty() {
        let _ = std::fs::remove_file(out.join(super::ablation::PLOT));
    } else {
        plot::interval_plot(
            &out.join(super::ablation::PLOT),
            "one part of a write removed: ablated − as trained, mean over seeds, 95 % interval",
            "ablated − as trained (nats per token); > 0: the model used what was removed",
            &ablation_rows,
        )
        .map_err(plot_error(super::ablation::PLOT))?;
    }
    let path = out.join("report.md");
    checkpoint::write_atomic(&path, md.as_bytes())
        .map_err(|source| ExperimentError::Io { path: path.clone(), source })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::test_support::{result, spec};

    fn report(names: &[&str], seeds: u64, loss: impl Fn(&str, u64) -> f64, commit: impl Fn(u64) -> String) -> String {
        let s = ExperimentSpec {
            variants: names.iter().map(|v| v.to_string()).collect(),
            seeds: (1..=seeds).collect(),
            ..spec("").unwrap()
        };
        let variants = s.variant_list().unwrap();
        let results: Vec<RunResult> = names
            .iter()
            .flat_map(|v| (1..=seeds).map(move |seed| (v, seed)))
            .map(|(v, seed)| result(v, seed, loss(v, seed), &commit(seed)))
            .collect();
        // (One folder per call: tests run in parallel, some with the same number of seeds.)
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ddl-report-test-{}-{seeds}-{call}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = write_report(&dir, &s, &variants, &results, &[]).unwrap();
        let md = std::fs::read_to_string(path).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        md
    }

    #[test]
    fn the_report_names_only_the_plots_it_wrote() {
        // The baseline alone: no β regimes and no comparisons, so neither plot is named.
        let md = report(&["baseline"], 2, |_, seed| 2.2 + seed as f64 / 100.0, |_| "abc".into());
        assert!(md.contains("Plots: `val_loss.png`.\n"), "{md}");
        // Why there are no comparisons, in this grid's terms (a grid of the baseline alone was
        // told it "needs the baseline").
        assert!(
            md.contains("compares the baseline with each other variant")
                && md.contains("this grid's variants: baseline."),
            "{md}"
        );
        let md = report(
            &["baseline", "ddl"],
            2,
            |v, seed| if v == "ddl" { 2.1 } else { 2.2 } + seed as f64 / 1e3,
            |_| "abc".into(),
        );
        // (The fixtures' runs counted no β regimes: no regime plot either.)
        assert!(md.contains("Plots: `val_loss.png`, `comparisons.png`.\n"), "{md}");
    }

    /// A run that diverged (final validation loss NaN) is listed and named, and left out of the
    /// means and tests, which say over how many seeds they are; every run diverged: a report
    /// without a curve, not an error. A run's β counts cut short are left out of the β table
    /// (they were read past their end).
    #[test]
    fn diverged_runs_are_named_and_left_out_of_the_statistics() {
        let md = report(
            &["baseline", "ddl"],
            3,
            |v, seed| if v == "ddl" && seed == 2 { f64::NAN } else { 2.2 + seed as f64 / 100.0 },
            |_| "abc".into(),
        );
        assert!(
            md.contains("**Diverged runs (final validation loss not finite;") && md.contains(":** ddl-seed2."),
            "{md}"
        );
        assert!(row(&md, "ddl").contains("| 2 |"), "two seeds in ddl's row: {}", row(&md, "ddl"));
        assert!(row(&md, "baseline − ddl").contains("| 2 |"), "two pairs: {}", row(&md, "baseline − ddl"));
        assert!(row(&md, "ddl-seed2").contains("| NaN (diverged) |"), "{}", row(&md, "ddl-seed2"));
        assert!(!md.contains("NaN ±") && !md.contains("[NaN"), "{md}");
        let md = report(&["baseline", "ddl"], 2, |_, _| f64::NAN, |_| "abc".into());
        assert!(md.contains("Plots: none (every run diverged).") && md.contains("| ddl | | 0 |"), "{md}");
        // β counts: one run's cut short.
        let s = ExperimentSpec { variants: vec!["ddl".into()], ..spec("").unwrap() };
        let variants = s.variant_list().unwrap();
        let mut results: Vec<RunResult> = (1..=2).map(|seed| result("ddl", seed, 2.0, "abc")).collect();
        results[0].regimes = vec![[1, 2, 3], [3, 2, 1]];
        results[0].beta_mean = vec![1.0, 0.5];
        let dir = std::env::temp_dir().join(format!("ddl-report-test-regimes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let md = std::fs::read_to_string(write_report(&dir, &s, &variants, &results, &[]).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert!(md.contains("| ddl | 0A | 17% | 33% | 50% | 1.000 |"), "{md}");
    }

    /// A run's result with numbers that are not finite is written (JSON null) and read back.
    #[test]
    fn a_diverged_runs_result_reads_back() {
        let mut r = result("ddl", 1, f64::NAN, "abc");
        (r.final_train_loss, r.tok_per_s, r.val_curve, r.beta_mean) =
            (f64::NAN, f64::INFINITY, vec![(10.0, f64::NAN)], vec![f64::NAN, 1.0]);
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"final_val_loss\":null"), "{text}");
        let back: RunResult = serde_json::from_str(&text).unwrap();
        assert!(back.diverged() && back.final_train_loss.is_nan() && back.tok_per_s.is_nan());
        assert!(back.val_curve[0].0 == 10.0 && back.val_curve[0].1.is_nan());
        assert!(back.beta_mean[0].is_nan() && back.beta_mean[1] == 1.0);
    }

    fn row(md: &str, pair: &str) -> String {
        md.lines().find(|l| l.starts_with(&format!("| {pair} |"))).unwrap_or_default().to_string()
    }

    #[test]
    fn the_report_tests_its_fixed_family_and_writes_what_the_numbers_support() {
        let names = ["baseline", "ddl_v1", "ddl_v1_vmap", "ddl", "ddl_vmap", "ddl_cc"];
        // Five seeds. baseline − ddl_v1: +0.05 with ±0.005 wobble (significant); ddl_v1 − ddl:
        // differences of both signs (not distinguishable); v-Map worse than k-Map at d_v = 1 by
        // 0.12 on every seed (significant, k-Map better); ddl_cc 0.03 above the baseline but
        // noisy; ddl_vmap equal to ddl.
        let wob = |seed: u64| [0.0, 0.005, -0.005, 0.003, -0.003][seed as usize - 1];
        let loss = |v: &str, seed: u64| match v {
            "baseline" => 2.20 + wob(seed),
            "ddl_v1" => 2.15,
            "ddl_v1_vmap" => 2.27 + wob(seed) / 5.0,
            "ddl" => 2.15 + [0.02, -0.03, 0.01, -0.01, 0.02][seed as usize - 1],
            "ddl_vmap" => 2.15 + [0.02, -0.03, 0.01, -0.01, 0.02][seed as usize - 1],
            _ => 2.23 + [0.1, -0.1, 0.05, -0.04, 0.0][seed as usize - 1],
        };
        let md = report(&names, 5, loss, |_| "abc".into());
        // The family: 3 gaps, ddl_v1_vmap, ddl_vmap and ddl_cc against the baseline, 2 k/v pairs.
        assert!(md.contains("(8 comparisons)"), "{md}");
        // The verdict says the threshold and the p once ("reproduced at p < 0.05 after Holm (p <
        // 0.001 after Holm)" said it twice).
        assert!(
            row(&md, "baseline − ddl_v1").ends_with("| reproduced (p < 0.001 after Holm, below 0.05) |"),
            "{}",
            row(&md, "baseline − ddl_v1")
        );
        assert_eq!(
            verdict(Question::PaperGap, Variant::DdlV1, Variant::Ddl, 0.1, 0.019),
            "reproduced (p = 0.019 after Holm, below 0.05)"
        );
        assert!(row(&md, "ddl_v1 − ddl").contains("not distinguishable"), "{}", row(&md, "ddl_v1 − ddl"));
        assert!(row(&md, "ddl_v1_vmap − ddl_v1").contains("k-Map better"), "{}", row(&md, "ddl_v1_vmap − ddl_v1"));
        assert!(row(&md, "ddl_vmap − ddl").contains("not distinguishable"));
        assert!(row(&md, "ddl_cc − baseline").contains("not distinguishable"), "{}", row(&md, "ddl_cc − baseline"));
        // baseline − ddl_v1 = +0.05 with sd of the wobble (0.0042): t ≈ 26.5 at df 4.
        assert!(row(&md, "baseline − ddl_v1").contains("| 5 | +0.0500 |"), "{}", row(&md, "baseline − ddl_v1"));
        // One gap holds, the other is not distinguishable: not the whole ordering (it said "not
        // distinguishable", as of two gaps neither of which holds).
        assert!(
            md.contains(
                "The paper's ordering (baseline > ddl_v1 > ddl in validation loss; 2.854 > 2.848 > 2.835 at 124M): \
                 **not reproduced in full**: one gap holds, the other is not distinguishable at this size and number of \
                 seeds: baseline − ddl_v1 +0.0500 (holds, p "
            ),
            "{md}"
        );
        assert!(md.contains("ddl_v1 − ddl -0.0020 (not distinguishable, p = 1.000 after Holm)."), "{md}");
        assert!(!md.contains("Warning: these runs were made by different builds"));
        assert!(md.contains("Adapter: llvmpipe (Vulkan): 30 runs.") && !md.contains("different adapters"), "{md}");
        // The paper has no Small-scale number for v-Map.
        let vmap = md.lines().find(|l| l.starts_with("| ddl_vmap |")).unwrap();
        assert!(vmap.ends_with("| — |"), "{vmap}");
        // A reversal is called one; runs of different builds are flagged.
        let md = report(
            &["baseline", "ddl_v1", "ddl"],
            3,
            |v, s| match v {
                "baseline" => 2.0 + 0.001 * s as f64,
                "ddl_v1" => 2.1,
                _ => 2.05 - 0.002 * s as f64,
            },
            |s| format!("c{s}"),
        );
        assert!(row(&md, "baseline − ddl_v1").contains("reversed"), "{}", row(&md, "baseline − ddl_v1"));
        assert!(md.contains("**not reproduced**"), "{md}");
        assert!(md.contains("Warning: these runs were made by different builds"), "{md}");
    }

    #[test]
    fn the_report_names_the_adapters_that_trained_its_runs_and_flags_a_mix() {
        let s = spec("").unwrap(); // baseline and ddl, seeds 1 and 2
        let variants = s.variant_list().unwrap();
        let md_of = |adapters: [&str; 4]| {
            let results: Vec<RunResult> = [("baseline", 1), ("baseline", 2), ("ddl", 1), ("ddl", 2)]
                .iter()
                .zip(adapters)
                .map(|(&(v, seed), a)| RunResult {
                    adapter: a.to_string(),
                    ..result(v, seed, 2.0 + seed as f64 / 100.0, "abc")
                })
                .collect();
            let dir =
                std::env::temp_dir().join(format!("ddl-adapter-test-{}-{}", std::process::id(), adapters.join("")));
            std::fs::create_dir_all(&dir).unwrap();
            let md = std::fs::read_to_string(write_report(&dir, &s, &variants, &results, &[]).unwrap()).unwrap();
            std::fs::remove_dir_all(&dir).ok();
            md
        };
        // Older results without the field count as unrecorded, which is no mix.
        let md = md_of(["", "", "NVIDIA H200 (Vulkan)", "NVIDIA H200 (Vulkan)"]);
        assert!(md.contains("Adapter: NVIDIA H200 (Vulkan): 2 runs; unrecorded: 2 runs."), "{md}");
        assert!(!md.contains("different adapters"), "{md}");
        let md = md_of(["llvmpipe (Vulkan)", "llvmpipe (Vulkan)", "llvmpipe (Vulkan)", "NVIDIA H200 (Vulkan)"]);
        assert!(md.contains("Adapter: NVIDIA H200 (Vulkan): 1 run; llvmpipe (Vulkan): 3 runs."), "{md}");
        assert!(md.contains("**Warning: these runs were trained on different adapters"), "{md}");
        // A result.json written before the field existed still reads.
        let old: RunResult = serde_json::from_str(
            r#"{"variant":"ddl","seed":1,"params":1,"steps":1,"tokens":1,"final_train_loss":1,"final_val_loss":1,
                "val_curve":[],"tok_per_s":1,"elapsed_s":1,"regimes":[],"beta_mean":[]}"#,
        )
        .unwrap();
        assert_eq!(old.adapter, "");
    }

    /// The accuracy section against values worked by hand; none for results made before the
    /// accuracy was logged, and runs without one left out and counted.
    #[test]
    fn the_report_compares_the_final_accuracies_paired_by_seed() {
        let s = spec("").unwrap(); // baseline and ddl, seeds 1 and 2
        let variants = s.variant_list().unwrap();
        let md_of = |acc: [Option<f64>; 6]| {
            let mut s3 = s.clone();
            s3.seeds = vec![1, 2, 3];
            let runs = [("baseline", 1), ("baseline", 2), ("baseline", 3), ("ddl", 1), ("ddl", 2), ("ddl", 3)];
            let results: Vec<RunResult> = runs
                .iter()
                .zip(acc)
                .map(|(&(v, seed), a)| RunResult {
                    final_val_accuracy: a,
                    ..result(v, seed, 2.0 + seed as f64 / 100.0, "abc")
                })
                .collect();
            let tag: String = acc.iter().map(|a| a.map_or("n".into(), |a| format!("{a}"))).collect();
            let dir = std::env::temp_dir().join(format!("ddl-acc-test-{}-{tag}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let md = std::fs::read_to_string(write_report(&dir, &s3, &variants, &results, &[]).unwrap()).unwrap();
            std::fs::remove_dir_all(&dir).ok();
            md
        };
        let md = md_of([None; 6]);
        assert!(!md.contains("accuracy"), "{md}");
        // baseline 40, 42, 44 % (mean 42, sd 2: t(0.975, 2) · 2/√3 = 4.968); ddl 45, 46, 47: paired
        // differences baseline − ddl −5, −4, −3: mean −4, sd 1, se 0.57735, t = −6.928 (df 2),
        // two-sided p = 0.0202; Holm over one comparison leaves it.
        let md = md_of([0.40, 0.42, 0.44, 0.45, 0.46, 0.47].map(Some));
        assert!(md.contains("## Top-1 accuracy"), "{md}");
        assert!(md.contains("| baseline | 3 | 42.00 ± 2.00 | [37.03, 46.97] |"), "{md}");
        assert!(md.contains("| ddl | 3 | 46.00 ± 1.00 | [43.52, 48.48] |"), "{md}");
        assert!(md.contains("| baseline − ddl | 3 | -4.00 | [-6.48, -1.52] | 0.020 | 0.020 | ddl more accurate (p = 0.020 after Holm) |"), "{md}");
        assert!(md.contains("| baseline-seed2 | 2.0200 | 42.00 % |"), "the runs table: {md}");
        // A run without one: left out, said, and its seed unpaired.
        let md = md_of([Some(0.40), Some(0.42), None, Some(0.45), Some(0.46), Some(0.47)]);
        assert!(md.contains("1 run(s) made before it was logged are left out"), "{md}");
        assert!(md.contains("| baseline | 2 | 41.00 ± 1.41 |") && md.contains("| baseline − ddl | 2 |"), "{md}");
        assert!(md.contains("| baseline-seed3 | 2.0300 | |"), "{md}");
        // Every seed 5 points apart: no spread, so no interval nor t-test; the sign test's p over
        // three seeds (0.25), not p = 0 and "ddl more accurate".
        let md = md_of([0.40, 0.42, 0.44, 0.45, 0.47, 0.49].map(Some));
        assert!(
            md.contains("| baseline − ddl | 3 | -5.00 | no spread | 0.250 (sign test) | 0.250 | not distinguishable (p = 0.250 after Holm) |"),
            "{md}"
        );
        assert!(md.contains("No spread: baseline − ddl: all 3 differences are -5.00 points (no spread: no t-test nor interval; exact sign test p = 0.250)."), "{md}");
        // The losses' comparison the same way (the fixture's losses are 2.0 + seed/100 for both).
        assert!(md.contains("| baseline − ddl | 3 | +0.0000 |"), "{md}");
    }

    /// A plot that cannot be written names its file and what to do: a folder at `val_loss.png`
    /// said "Is a directory (os error 21)" and nothing else.
    #[test]
    fn a_plot_that_cannot_be_written_is_named() {
        let s = spec("").unwrap();
        let variants = s.variant_list().unwrap();
        let results: Vec<RunResult> = [("baseline", 1), ("baseline", 2), ("ddl", 1), ("ddl", 2)]
            .iter()
            .map(|&(v, seed)| result(v, seed, 2.0 + seed as f64 / 100.0, "abc"))
            .collect();
        let dir = crate::testing::scratch_dir("report-plot-in-the-way");
        std::fs::create_dir_all(dir.join("val_loss.png").join("inside")).unwrap();
        let e = write_report(&dir, &s, &variants, &results, &[]).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).ok();
        assert!(e.starts_with(&format!("cannot write the plot '{}'", dir.join("val_loss.png").display())), "{e}");
        assert!(e.contains("report.md was not written either") && e.contains("--report-only"), "{e}");
    }

    /// A variant's own mean has an interval without a sign ("[2.1952, 2.2448]"): it was written as
    /// a difference's, "[+2.1952, +2.2448]"; the differences keep theirs.
    #[test]
    fn a_variants_own_interval_is_not_signed_like_a_difference() {
        let md = report(
            &["baseline", "ddl"],
            3,
            |v, seed| if v == "ddl" { 2.1 + seed as f64 / 1e3 } else { 2.2 + seed as f64 / 100.0 },
            |_| "abc".into(),
        );
        // baseline 2.21, 2.22, 2.23: mean 2.22, sd 0.01, half-width 4.302653 · 0.01/√3 = 0.024842.
        assert!(row(&md, "baseline").contains("| 2.2200 ± 0.0100 | [2.1952, 2.2448] |"), "{}", row(&md, "baseline"));
        assert!(!md.contains("[+2."), "{md}");
        assert!(row(&md, "baseline − ddl").contains("| [+"), "{}", row(&md, "baseline − ddl"));
    }

    /// Accuracies near 0 or 100 % over a few seeds: the t-interval passes the bound (it said
    /// "[-2.99, 5.19]" of accuracies that cannot be below 0); now cut there, and the method says so.
    #[test]
    fn accuracy_intervals_stay_within_their_bounds() {
        let s = ExperimentSpec { seeds: vec![1, 2, 3], ..spec("").unwrap() };
        let variants = s.variant_list().unwrap();
        // baseline 0.1, 0.2, 3.0 %: mean 1.1, sd 1.6462, t-interval [-2.99, 5.19]; ddl 99.9, 99.8,
        // 97.0 %: [94.81, 102.99]; baseline − ddl −99.8, −99.6, −94.0: mean −97.8, [−105.98, −89.62].
        let results: Vec<RunResult> = [("baseline", [0.001, 0.002, 0.030]), ("ddl", [0.999, 0.998, 0.970])]
            .iter()
            .flat_map(|&(v, acc)| {
                (1..=3u64).map(move |seed| RunResult {
                    final_val_accuracy: Some(acc[seed as usize - 1]),
                    ..result(v, seed, 2.0 + seed as f64 / 100.0, "abc")
                })
            })
            .collect();
        let md = written_report("report-acc-bounds", &s, &variants, &results);
        let accuracy = md.split("## Top-1 accuracy").nth(1).unwrap();
        assert!(accuracy.contains("| baseline | 3 | 1.10 ± 1.65 | [0.00, 5.19] |"), "{accuracy}");
        assert!(accuracy.contains("| ddl | 3 | 98.90 ± 1.65 | [94.81, 100.00] |"), "{accuracy}");
        assert!(accuracy.contains("| baseline − ddl | 3 | -97.80 | [-100.00, -89.62] |"), "{accuracy}");
        assert!(accuracy.contains("cut at 0 and 100 %"), "{accuracy}");
        assert!(
            !accuracy.contains("[-2.99") && !accuracy.contains("102.99") && !accuracy.contains("-105.98"),
            "{accuracy}"
        );
    }

    /// Seeds whose losses differ by the same amount: "no spread" and the sign test's p in the
    /// comparisons table, a note under it, and no verdict from t = ∞.
    #[test]
    fn a_comparison_without_spread_gets_the_sign_test() {
        let md = report(
            &["baseline", "ddl"],
            3,
            |v, seed| if v == "ddl" { 2.1 } else { 2.2 } + seed as f64 / 1e3,
            |_| "abc".into(),
        );
        assert!(
            md.contains("| baseline − ddl | 3 | +0.1000 | no spread | — (2) | 0.250 (sign test) | 0.250 | not distinguishable (p = 0.250 after Holm) |"),
            "{md}"
        );
        assert!(md.contains("No spread: baseline − ddl: all 3 differences are +0.1000 (no spread"), "{md}");
        assert!(!md.contains("| inf") && !md.contains("NaN"), "{md}");
    }

    /// Seeds that all end at the same loss (two runs collapsed to the uniform distribution, both
    /// variants alike) give no interval: the t-interval [m, m] of no width was shown as if the mean
    /// were known exactly, for the losses, the accuracies and a difference of zero.
    #[test]
    fn identical_losses_claim_no_interval() {
        let s = ExperimentSpec { seeds: vec![1, 2], ..spec("").unwrap() };
        let variants = s.variant_list().unwrap();
        let results: Vec<RunResult> = ["baseline", "ddl"]
            .iter()
            .flat_map(|v| (1..=2).map(move |seed| (*v, seed)))
            .map(|(v, seed)| RunResult { final_val_accuracy: Some(0.0444), ..result(v, seed, 4.0604, "abc") })
            .collect();
        let md = written_report("report-identical", &s, &variants, &results);
        let line = |start: &str| md.lines().find(|l| l.starts_with(start)).unwrap_or_default().to_string();
        for v in ["baseline", "ddl"] {
            let r = line(&format!("| {v} | 1000 |"));
            assert!(r.contains("| 4.0604 ± 0.0000 | no spread |"), "{r}");
            let r = line(&format!("| {v} | 2 | 4.44 "));
            assert!(r.contains("| 4.44 ± 0.00 | no spread |"), "{r}");
        }
        assert!(line("| baseline − ddl | 2 | +0.0000 |").contains("| no spread |"), "{md}");
        assert!(line("| baseline − ddl | 2 | +0.00 |").contains("| no spread |"), "{md}");
        assert!(!md.contains("[4.0604") && !md.contains("[+4.0604") && !md.contains("[4.44"), "{md}");
        assert!(!md.contains("[+0.0000, +0.0000]") && !md.contains("[+0.00, +0.00]"), "{md}");
        assert!(line("| baseline − ddl | 2 | +0.0000 |").contains("not distinguishable"), "{md}");
    }

    /// Runs that finished with steps skipped for a loss or gradient that was not finite
    /// (`skip_nonfinite`) are named with how many: nothing said that a run had made fewer updates
    /// than the steps the report names.
    #[test]
    fn runs_with_skipped_steps_are_named() {
        let s = spec("").unwrap();
        let variants = s.variant_list().unwrap();
        let mut results: Vec<RunResult> = ["baseline", "ddl"]
            .iter()
            .flat_map(|v| (1..=2).map(move |seed| (*v, seed)))
            .map(|(v, seed)| result(v, seed, 2.0 + seed as f64 / 100.0, "abc"))
            .collect();
        let md = written_report("report-unskipped", &s, &variants, &results);
        assert!(!md.contains("skipped steps"), "{md}");
        results[0].skipped_steps = 17;
        let md = written_report("report-skipped", &s, &variants, &results);
        assert!(md.contains("**Runs with skipped steps (") && md.contains(":** baseline-seed1 (17 of 20)."), "{md}");
        results[1].skipped_steps = 3;
        results[1].final_val_loss = f64::NAN;
        let md = written_report("report-skipped-diverged", &s, &variants, &results);
        assert!(md.contains(":** baseline-seed1 (17 of 20), baseline-seed2 (3 of 20, diverged)."), "{md}");
        let back: RunResult = serde_json::from_str(&serde_json::to_string(&results[0]).unwrap()).unwrap();
        assert_eq!(back.skipped_steps, 17);
    }

    /// A verdict on 2 seeds (1 degree of freedom) is flagged and its weakness said: two
    /// differences that happen to be close give a tiny p (t in the thousands), and no sign test
    /// of 2 seeds goes below 0.5.
    /// The report `write_report` writes of `results`, in a scratch folder named `tag`.
    fn written_report(tag: &str, s: &ExperimentSpec, variants: &[Variant], results: &[RunResult]) -> String {
        let dir = crate::testing::scratch_dir(tag);
        let md = std::fs::read_to_string(write_report(&dir, s, variants, results, &[]).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        md
    }

    #[test]
    fn a_verdict_on_two_seeds_says_how_little_it_rests_on() {
        let md = report(
            &["baseline", "ddl"],
            2,
            |v, seed| if v == "ddl" { 2.1 - seed as f64 / 1e4 } else { 2.2 },
            |_| "abc".into(),
        );
        let r = row(&md, "baseline − ddl");
        assert!(r.contains("lower than") || r.contains("reversed") || r.contains("reproduced"), "{r}");
        assert!(r.contains("2 seeds: see the note below"), "{r}");
        assert!(md.contains("**On 2 seeds:** baseline − ddl"), "{md}");
        assert!(md.contains("at least 3 seeds"), "{md}");
        // The accuracy's comparisons the same way (their own table and note).
        let acc = |seed: u64, v: &str| if v == "ddl" { 0.40 + seed as f64 / 1e3 } else { 0.30 };
        let s = ExperimentSpec { seeds: vec![1, 2], ..spec("").unwrap() };
        let variants = s.variant_list().unwrap();
        let results: Vec<RunResult> = [("baseline", 1), ("baseline", 2), ("ddl", 1), ("ddl", 2)]
            .iter()
            .map(|&(v, seed)| RunResult { final_val_accuracy: Some(acc(seed, v)), ..result(v, seed, 2.0, "abc") })
            .collect();
        let md = written_report("ddl-two-seeds-acc", &s, &variants, &results);
        let accuracy = md.split("## Top-1 accuracy").nth(1).unwrap();
        assert!(
            accuracy.contains("ddl more accurate") && accuracy.contains("(2 seeds: see the note below)"),
            "{accuracy}"
        );
        assert!(accuracy.contains("**On 2 seeds:** baseline − ddl"), "{accuracy}");
        // Three seeds: no such note.
        let md = report(
            &["baseline", "ddl"],
            3,
            |v, seed| if v == "ddl" { 2.1 - seed as f64 / 1e4 } else { 2.2 },
            |_| "abc".into(),
        );
        assert!(!md.contains("On 2 seeds") && !md.contains("see the note below"), "{md}");
    }

    /// One seed (a pilot): each comparison's one difference is shown, untested (it was "< 2" and
    /// blank cells, the pilot's only number hidden).
    #[test]
    fn a_one_seed_comparison_shows_its_difference_untested() {
        let s = ExperimentSpec { seeds: vec![1], ..spec("").unwrap() };
        let variants = s.variant_list().unwrap();
        let results: Vec<RunResult> = [("baseline", 2.2, 0.30), ("ddl", 2.1, 0.35)]
            .iter()
            .map(|&(v, loss, acc)| RunResult { final_val_accuracy: Some(acc), ..result(v, 1, loss, "abc") })
            .collect();
        let md = written_report("ddl-one-seed-test", &s, &variants, &results);
        assert!(md.contains("| baseline − ddl | 1 | +0.1000 | | | | | too few paired seeds to test |"), "{md}");
        // (The accuracy's table is left out when no pair has two seeds; where another pair has
        // them, a one-seed row is shown the same way.)
        assert!(md.contains("No pair of the family has two seeds with an accuracy to compare."), "{md}");
        assert!(!md.contains("comparisons.png"), "{md}");
    }

    /// The β section says how many tokens it counted: `beta_batches` larger than the validation
    /// split was said as that many batches ("1000 batches") though the split had far fewer.
    #[test]
    fn the_beta_section_says_the_tokens_it_counted() {
        let s = ExperimentSpec { variants: vec!["ddl".into()], beta_batches: 1000, ..spec("").unwrap() };
        let variants = s.variant_list().unwrap();
        let results: Vec<RunResult> = (1..=2)
            .map(|seed| RunResult {
                regimes: vec![[10, 50, 4], [0, 64, 0]],
                beta_mean: vec![1.0, 1.0],
                ..result("ddl", seed, 2.0 + seed as f64 / 100.0, "abc")
            })
            .collect();
        let md = written_report("ddl-beta-tokens-test", &s, &variants, &results);
        assert!(md.contains("Share of 64 validation tokens (the first 1000 batches"), "{md}");
        assert!(!md.contains("(1000 batches)"), "{md}");
    }

    /// A final evaluation cut by `train.val_max_tokens` is not called the whole validation split.
    #[test]
    fn the_report_says_when_the_validation_split_was_cut() {
        let md_of = |extra: &str, val_tokens: usize| {
            let s = spec(extra).unwrap();
            let variants = s.variant_list().unwrap();
            let results: Vec<RunResult> = [("baseline", 1), ("baseline", 2), ("ddl", 1), ("ddl", 2)]
                .iter()
                .map(|&(v, seed)| RunResult { val_tokens, ..result(v, seed, 2.0 + seed as f64 / 100.0, "abc") })
                .collect();
            let dir = std::env::temp_dir().join(format!("ddl-cut-test-{}-{val_tokens}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let md = std::fs::read_to_string(write_report(&dir, &s, &variants, &results, &[]).unwrap()).unwrap();
            std::fs::remove_dir_all(&dir).ok();
            md
        };
        let md = md_of("[train]\nval_max_tokens = 4096\n", 4096);
        assert!(md.contains("the validation split's first 4096 tokens") && !md.contains("whole validation"), "{md}");
        // A split shorter than the cap is evaluated whole.
        let md = md_of("[train]\nval_max_tokens = 100000\n", 2048);
        assert!(md.contains("the whole validation split at the end of the run (2048 tokens"), "{md}");
        let md = md_of("", 4096);
        assert!(md.contains("the whole validation split at the end of the run (4096 tokens"), "{md}");
    }
}
