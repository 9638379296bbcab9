//! Statistics of the experiment report: a mean with its 95 % t-interval, Student's paired t-test
//! (two-sided) and Holm's step-down correction of a family of p-values.

use statrs::distribution::{ContinuousCDF, StudentsT};

/// The 1 − α/2 quantile of Student's t with `df` degrees of freedom (NaN for df < 1).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    match StudentsT::new(0.0, 1.0, df) {
        Ok(t) if df >= 1.0 => t.inverse_cdf(p),
        _ => f64::NAN,
    }
}

/// Two-sided p-value of a t statistic with `df` degrees of freedom.
pub fn two_sided_p(t: f64, df: f64) -> f64 {
    match StudentsT::new(0.0, 1.0, df) {
        Ok(d) if df >= 1.0 && t.is_finite() => (2.0 * (1.0 - d.cdf(t.abs()))).clamp(0.0, 1.0),
        _ => f64::NAN,
    }
}

/// A sample's mean, standard deviation (n − 1) and 95 % t-interval of the mean.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub n: usize,
    pub mean: f64,
    pub sd: f64,
    /// 95 % interval of the mean (NaN ends for n < 2).
    pub ci: (f64, f64),
}

impl Sample {
    pub fn of(x: &[f64]) -> Sample {
        let n = x.len();
        let mean = x.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 {
            (x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n as f64 - 1.0)).sqrt()
        } else {
            f64::NAN
        };
        let half = t_quantile(0.975, n as f64 - 1.0) * sd / (n as f64).sqrt();
        Sample { n, mean, sd, ci: (mean - half, mean + half) }
    }
}

/// Student's paired t-test of `a − b` over the pairs both have.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    /// The differences a − b: their mean, sd and 95 % interval (df = pairs − 1).
    pub diff: Sample,
    pub t: f64,
    pub df: f64,
    /// Two-sided p-value: Student's t's, or where `no_spread` the exact sign test's.
    pub p: f64,
    /// Every difference is the same and not zero (e.g. accuracies over a few batches that differ
    /// by the same count): the sample has no spread, so t is ±∞ and says nothing. `p` is then
    /// the exact two-sided sign test's, 2^(1−n) (all n differences on one side), not 0, and the
    /// interval [d, d] is no interval: reports say "no spread" instead.
    pub no_spread: bool,
}

impl Paired {
    /// The test of the pairs `(a_i, b_i)`; `None` without at least two pairs.
    pub fn of(pairs: &[(f64, f64)]) -> Option<Paired> {
        if pairs.len() < 2 {
            return None;
        }
        let d: Vec<f64> = pairs.iter().map(|(a, b)| a - b).collect();
        let diff = Sample::of(&d);
        let df = (d.len() - 1) as f64;
        let se = diff.sd / (d.len() as f64).sqrt();
        // Identical differences: no difference at all (t 0, p 1), or no spread: the sign alone
        // (t infinite; p of the sign test, every one of n differences on the same side).
        // (A spread of rounding error counts as none: 0.31 − 0.30 and 0.11 − 0.10 differ in the
        // last bit, which would make t about 1e15.)
        let no_spread = diff.mean != 0.0 && diff.sd <= 1e-9 * diff.mean.abs();
        let t = if no_spread {
            diff.mean.signum() * f64::INFINITY
        } else if se > 0.0 {
            diff.mean / se
        } else {
            0.0
        };
        let p = if no_spread { sign_test_p(d.len()) } else { two_sided_p(t, df) };
        Some(Paired { diff, t, df, p, no_spread })
    }

    /// What a report says of a test without spread (`None` for an ordinary t-test): "all 3
    /// differences are +0.0100 (no spread: no t-test nor interval; sign test p = 0.250)".
    pub fn no_spread_note(&self, decimals: usize) -> Option<String> {
        self.no_spread.then(|| {
            format!(
                "all {} differences are {:+.*} (no spread: no t-test nor interval; exact sign test p = {:.3})",
                self.diff.n, decimals, self.diff.mean, self.p
            )
        })
    }
}

/// The exact two-sided sign test's p-value when all `n` differences fall on one side:
/// 2 · 2^(−n), at most 1.
pub fn sign_test_p(n: usize) -> f64 {
    (2.0 * 0.5f64.powi(n.min(2000) as i32)).min(1.0)
}

/// The median of `x` (NaN when it is empty, or holds a NaN): the middle value of an odd count,
/// the mean of the middle two of an even one (not the upper of them, which some measurements
/// took, a bias upwards of half the middle gap). Sorts `x` (NaNs last).
pub fn median(x: &mut [f64]) -> f64 {
    x.sort_by(f64::total_cmp);
    if x.is_empty() || x.iter().any(|v| v.is_nan()) {
        return f64::NAN;
    }
    let n = x.len();
    if n % 2 == 1 { x[n / 2] } else { 0.5 * (x[n / 2 - 1] + x[n / 2]) }
}

/// Holm's step-down adjusted p-values (same order as `p`): the k-th smallest (k from 0) times
/// (m − k), made non-decreasing in that order and capped at 1. Reject at level α where the
/// adjusted value is below α; the family-wise error rate is then at most α.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p[i].total_cmp(&p[j]));
    let mut out = vec![f64::NAN; m];
    let mut running = 0.0f64;
    for (k, &i) in order.iter().enumerate() {
        running = running.max(((m - k) as f64 * p[i]).min(1.0));
        out[i] = running;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn a_paired_test_matches_the_values_worked_by_hand() {
        // Differences 0.03, 0.02, 0.04: mean 0.03, sd 0.01, se 0.01/√3 = 0.0057735, t = √27 =
        // 5.196152, df 2. For df = 2 the t CDF is 1/2 + t / (2√(2 + t²)), so the two-sided p is
        // 1 − t/√(2 + t²) = 1 − √27/√29 = 0.035099; t(0.975, 2) = 4.302653 gives the interval
        // 0.03 ± 0.024841.
        let p = Paired::of(&[(2.13, 2.10), (2.12, 2.10), (2.15, 2.11)]).unwrap();
        assert!(close(p.diff.mean, 0.03, 1e-12) && close(p.diff.sd, 0.01, 1e-12), "{p:?}");
        assert!(close(p.t, 27f64.sqrt(), 1e-9) && p.df == 2.0, "{p:?}");
        assert!(close(p.p, 1.0 - (27f64 / 29.0).sqrt(), 1e-9), "{p:?}");
        assert!(close(p.p, 0.035099, 1e-6), "{p:?}");
        assert!(close(p.diff.ci.0, 0.03 - 0.024841, 1e-6) && close(p.diff.ci.1, 0.03 + 0.024841, 1e-6), "{p:?}");
        // The example: t = 2.3 at df 2 is p ≈ 0.148 (1 − 2.3/√7.29 = 0.148148).
        assert!(close(two_sided_p(2.3, 2.0), 1.0 - 2.3 / 7.29f64.sqrt(), 1e-9));
        // Five seeds: t(0.975, 4) = 2.776445 (tables).
        assert!(close(t_quantile(0.975, 4.0), 2.776445, 1e-6));
        // The sign follows a − b; fewer than two pairs is no test.
        assert!(Paired::of(&[(1.0, 2.0), (1.1, 2.0), (0.9, 2.05)]).unwrap().t < 0.0);
        assert!(Paired::of(&[(1.0, 2.0)]).is_none());
    }

    #[test]
    fn differences_without_spread_get_the_sign_test_not_p_zero() {
        // Two batches whose accuracies differ by the same 1/64: the t statistic is infinite, but
        // two differences on one side are p = 0.5 by the sign test, nothing like p = 0.
        let p = Paired::of(&[(0.5, 0.5 - 1.0 / 64.0), (0.25, 0.25 - 1.0 / 64.0)]).unwrap();
        assert!(p.no_spread && p.t == f64::INFINITY && p.p == 0.5, "{p:?}");
        assert_eq!(
            p.no_spread_note(4).unwrap(),
            "all 2 differences are +0.0156 (no spread: no t-test nor interval; exact sign test p = 0.500)"
        );
        // Six seeds the same amount lower: 2/64 = 0.03125, below 5 %.
        let six: Vec<(f64, f64)> = (0..6).map(|i| (i as f64, i as f64 + 0.5)).collect();
        let p = Paired::of(&six).unwrap();
        assert!(p.no_spread && p.t == f64::NEG_INFINITY && (p.p - 0.03125).abs() < 1e-15, "{p:?}");
        // Differences equal but for rounding (accuracies over 100 tokens) are no spread either.
        let p = Paired::of(&[(0.31, 0.30), (0.11, 0.10), (0.52, 0.51)]).unwrap();
        assert!(p.no_spread && p.p == 0.25, "{p:?}");
        // No difference at all is no evidence either way, and not "no spread".
        let p = Paired::of(&[(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]).unwrap();
        assert!(!p.no_spread && p.t == 0.0 && p.p == 1.0 && p.no_spread_note(4).is_none(), "{p:?}");
        // An ordinary sample is no such case.
        assert!(!Paired::of(&[(2.13, 2.10), (2.12, 2.10)]).unwrap().no_spread);
        assert_eq!(sign_test_p(1), 1.0);
        assert!(sign_test_p(100_000) == 0.0 || sign_test_p(100_000) < 1e-300);
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5, "not the upper middle 3");
        assert_eq!(median(&mut [5.0]), 5.0);
        assert_eq!(median(&mut [1.0, 9.0]), 5.0);
        assert!(median(&mut []).is_nan() && median(&mut [1.0, f64::NAN]).is_nan());
    }

    #[test]
    fn holm_adjusts_step_down_and_keeps_the_order() {
        // m = 4, sorted 0.01, 0.03, 0.04, 0.2: × 4, 3, 2, 1 = 0.04, 0.09, 0.08 → 0.09 (monotone), 0.2.
        let a = holm(&[0.01, 0.04, 0.03, 0.2]);
        let want = [0.04, 0.09, 0.09, 0.2];
        for (x, y) in a.iter().zip(want) {
            assert!(close(*x, y, 1e-12), "{a:?}");
        }
        // Capped at 1.
        assert_eq!(holm(&[0.6, 0.7]), vec![1.0, 1.0]);
    }

    #[test]
    fn a_sample_has_the_t_interval_of_its_mean() {
        // 2.0, 2.2, 2.4: mean 2.2, sd 0.2, half-width 4.302653 × 0.2/√3 = 0.496827.
        let s = Sample::of(&[2.0, 2.2, 2.4]);
        assert!(close(s.mean, 2.2, 1e-12) && close(s.sd, 0.2, 1e-12));
        assert!(close(s.ci.1 - s.mean, 0.496827, 1e-6), "{s:?}");
        assert!(Sample::of(&[1.0]).ci.0.is_nan());
    }
}
