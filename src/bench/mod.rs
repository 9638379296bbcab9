//! Benchmarks behind `ddl bench ...`. Each result is a row for humans or a JSON line for scripts.

mod cases;
pub mod data;
mod matmul_rows;
pub mod precision;
mod text;
mod train;

use std::time::Instant;

use serde_json::json;

use crate::gpu::{DType, Gpu, Recorder, Result, Tensor};
use crate::kernels::matmul::{self, Matmul};
use crate::testing::Rng;

pub use matmul_rows::*;
pub use train::{against_storage, generate_rows, train_compare_rows, train_rows};

/// One measurement.
#[derive(Debug, Clone)]
pub struct Row(pub serde_json::Value);

/// Median of the per-run kernel times (ms) of dispatches that run one after another (one
/// submission): the sum of their kernel times, median of `reps` after a warm-up ([`steady_ms`]).
pub fn time_dispatches(gpu: &Gpu, ds: &[&crate::gpu::Dispatch], reps: usize) -> Result<f64> {
    Ok(steady_ms(gpu, ds, reps)?.0)
}

/// GPU time of one run of `ds` (ms), median of `reps`, and the runs per repetition: after a
/// warm-up, each repetition records `ds` k times back to back in one submission (k such that a
/// repetition holds ≥ [`STEADY_MS`] of kernel time, at most 16; 1 for runs that long already,
/// e.g. most cases on a CPU adapter) and takes the kernel times' sum over k. A short dispatch
/// submitted alone measured 2–5× slower on an H200 than the same dispatch inside a training step
/// (GPU run 3, docs/GPU.md: the delta write 1.157 against 0.235 ms, RMSNorm 0.160 against
/// 0.036); back to back it runs as in the step. Without timestamps: wall time per run.
pub fn steady_ms(gpu: &Gpu, ds: &[&crate::gpu::Dispatch], reps: usize) -> Result<(f64, usize)> {
    gpu.run(ds)?;
    let once = |k: usize| -> Result<f64> {
        let mut r = Recorder::profiled(gpu);
        let t0 = Instant::now();
        for _ in 0..k {
            r.record(ds);
        }
        let kt = r.submit()?;
        let total =
            if kt.is_empty() { t0.elapsed().as_secs_f64() * 1e3 } else { kt.iter().map(|k| k.ns).sum::<f64>() / 1e6 };
        Ok(total / k as f64)
    };
    let k = runs_per_rep(once(1)?);
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        t.push(once(k)?);
    }
    Ok((crate::stats::median(&mut t), k))
}

/// Kernel time a repetition of [`steady_ms`] holds at least (ms).
pub const STEADY_MS: f64 = 2.0;

/// Runs per repetition of [`steady_ms`] for a case whose single run took `first_ms`: enough to
/// hold [`STEADY_MS`], at most 16; 1 for a run that long already (or an unusable time).
pub fn runs_per_rep(first_ms: f64) -> usize {
    if first_ms > 0.0 && first_ms < STEADY_MS { ((STEADY_MS / first_ms).ceil() as usize).clamp(1, 16) } else { 1 }
}

/// Memory bandwidth in GB/s (bytes read plus bytes written), median of `reps` after a warm-up,
/// two ways: `kernel_gb_per_s`, a kernel's pass over `mib` MiB in place (`x *= a`, timed with
/// GPU timestamps where the adapter has them), and `dma_gb_per_s`, a buffer-to-buffer copy
/// (`copy_buffer_to_buffer`, timed on the host around submit and wait, so it includes one
/// submission's overhead). `gb_per_s`, the larger, is the floor of `ddl bench kernels`. The first H100
/// run measured the copy alone at 0.81 TB/s where AdamW moved 3.0 TB/s: the copy command is not
/// what kernels get.
pub fn copy_bandwidth(gpu: &Gpu, mib: usize, reps: usize) -> Result<Row> {
    let n = mib * 1024 * 1024 / 4;
    let a = Tensor::from_f32(gpu, "copy.src", &[n], &Rng::new(5).uniform(n, -1.0, 1.0))?;
    let b = Tensor::zeros(gpu, "copy.dst", &[n], DType::F32)?;
    let median = |mut t: Vec<f64>| crate::stats::median(&mut t);
    let mut dma = Vec::new();
    for i in 0..reps.max(1) + 1 {
        let mut r = Recorder::new(gpu);
        r.copy(&a, &b);
        let t0 = Instant::now();
        r.submit()?;
        gpu.wait()?;
        if i > 0 {
            dma.push(t0.elapsed().as_secs_f64());
        }
    }
    // The pass multiplies by 1: the data stays finite whatever the repetitions.
    let pass = crate::kernels::elementwise::scale(gpu, b.view(), 1.0, n)?;
    let mut kern = Vec::new();
    for i in 0..reps.max(1) + 1 {
        let mut r = Recorder::profiled(gpu);
        let t0 = Instant::now();
        r.record(&pass.iter().collect::<Vec<_>>());
        let kt = r.submit()?;
        let host = t0.elapsed().as_secs_f64();
        let ns: f64 = kt.iter().map(|k| k.ns).sum();
        if i > 0 {
            kern.push(if kt.is_empty() { host } else { ns / 1e9 });
        }
    }
    let bytes = 2.0 * (n * 4) as f64;
    let (s, d) = (median(kern), median(dma));
    Ok(Row(json!({
        "bench": "copy", "mib": mib, "gb_per_s": bytes / s.min(d) / 1e9,
        "kernel_ms": s * 1e3, "kernel_gb_per_s": bytes / s / 1e9,
        "dma_ms": d * 1e3, "dma_gb_per_s": bytes / d / 1e9,
    })))
}

/// Every kernel module's cases at `shape` that `filter` keeps (a module builds only the groups
/// of cases it wants). A module whose cases cannot run at these shapes on this adapter (a tensor over
/// its storage binding, say) gets a `kernel_error` row and the others still run; returns the
/// modules that failed and how many cases the filter kept. `floors` (the copy bandwidth in GB/s
/// and the FLOP ceiling in GFLOP/s) is called once, before the first case the filter keeps is
/// timed, so a filter that keeps nothing measures nothing.
pub fn all_kernel_rows(
    gpu: &Gpu,
    shape: &BenchShape,
    filter: &CaseFilter,
    reps: usize,
    mut floors: impl FnMut() -> Result<(f64, f64)>,
    mut emit: impl FnMut(Row),
) -> Result<(Vec<&'static str>, usize)> {
    let (mut failed, mut kept) = (Vec::new(), 0);
    let mut measured: Option<(f64, f64)> = None;
    for (module, f) in BENCHES {
        let cases =
            f(gpu, shape, filter).map(|cases| cases.into_iter().filter(|c| filter.keeps(&c.name)).collect::<Vec<_>>());
        let run = cases.and_then(|cases| {
            if cases.is_empty() {
                return Ok(());
            }
            kept += cases.len();
            let (gbs, gflops) = match measured {
                Some(m) => m,
                None => *measured.insert(floors()?),
            };
            kernel_rows(gpu, module, cases, reps, gbs, gflops, &mut emit)
        });
        if let Err(e) = run {
            if measured.is_none() && kept > 0 {
                // The floors themselves could not be measured: nothing else can run either.
                return Err(e);
            }
            emit(Row(json!({"bench": "kernel_error", "module": module, "error": e.to_string()})));
            failed.push(*module);
        }
    }
    Ok((failed, kept))
}

/// What [`ab_blocks`] measured: each side's median and best time, the median of the blocks'
/// ratios (B over A) with its distribution-free 95 % interval ([`median_ci95`]; `None` under 6
/// blocks), and the lowest and highest block ratio.
#[derive(Debug, Clone, PartialEq)]
pub struct AbBlocks {
    pub a_median: f64,
    pub b_median: f64,
    pub a_best: f64,
    pub b_best: f64,
    pub ratio_median: f64,
    pub ratio_ci95: Option<(f64, f64)>,
    pub ratio_min: f64,
    pub ratio_max: f64,
    pub blocks: usize,
}

/// Times two sides in `blocks` blocks of four in the order A B B A (`time(0)` times A, `time(1)`
/// B), so that a drift of the machine's speed that is linear over a block cancels in its ratio
/// (B₁ + B₂) / (A₁ + A₂).
pub fn ab_blocks(blocks: usize, mut time: impl FnMut(usize) -> Result<f64>) -> Result<AbBlocks> {
    let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..blocks.max(1) {
        let mut t = [0.0; 4];
        for (k, who) in [0, 1, 1, 0].into_iter().enumerate() {
            t[k] = time(who)?;
            if who == 0 { &mut a } else { &mut b }.push(t[k]);
        }
        ratios.push((t[1] + t[2]) / (t[0] + t[3]));
    }
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(|x, y| x.total_cmp(y));
        v
    };
    let median = |v: &[f64]| crate::stats::median(&mut v.to_vec());
    let (a, b, r) = (sorted(a), sorted(b), sorted(ratios));
    Ok(AbBlocks {
        a_median: median(&a),
        b_median: median(&b),
        a_best: a[0],
        b_best: b[0],
        ratio_median: median(&r),
        ratio_ci95: median_ci95(&r),
        ratio_min: r[0],
        ratio_max: r[r.len() - 1],
        blocks: r.len(),
    })
}

/// Which kernel cases a module builds (`ddl bench kernels --filter`, `--list`). A module asks
/// before it allocates a group of cases (tensors shared by a forward and its backward), with
/// names made from the shapes alone, so a filter builds only the groups it times and a listing
/// builds nothing. Every name asked about is recorded, in order.
pub struct CaseFilter<'a> {
    patterns: &'a [String],
    list: bool,
    seen: std::cell::RefCell<Vec<String>>,
}

impl<'a> CaseFilter<'a> {
    /// Every case whose name contains one of `patterns` (all of them when it is empty).
    pub fn new(patterns: &'a [String]) -> Self {
        CaseFilter { patterns, list: false, seen: Default::default() }
    }

    /// Every case, built.
    pub fn all() -> Self {
        Self::new(&[])
    }

    /// No case built: only the names recorded ([`CaseFilter::names`]).
    pub fn list() -> Self {
        CaseFilter { patterns: &[], list: true, seen: Default::default() }
    }

    /// Whether a case of this name is kept (without recording it).
    pub fn keeps(&self, name: &str) -> bool {
        !self.list && (self.patterns.is_empty() || self.patterns.iter().any(|p| name.contains(p.as_str())))
    }

    /// Whether a group of cases with these names is to be built: one of them is kept. Records
    /// the names.
    pub fn wants<S: AsRef<str>>(&self, names: &[S]) -> bool {
        self.seen.borrow_mut().extend(names.iter().map(|n| n.as_ref().to_string()));
        names.iter().any(|n| self.keeps(n.as_ref()))
    }

    /// [`CaseFilter::wants`] for a group of `N` names: the names back when it is to be built
    /// (`let Some([fwd, bwd]) = filter.wanted([..]) else { continue };`).
    pub fn wanted<const N: usize>(&self, names: [String; N]) -> Option<[String; N]> {
        self.wants(&names).then_some(names)
    }

    /// The names asked about so far, in order.
    pub fn names(&self) -> Vec<String> {
        self.seen.borrow().clone()
    }
}

/// One kernel benchmark case: bound dispatches plus the work they must do at minimum.
pub struct KernelBench {
    /// e.g. `"rmsnorm_forward N=2048 d=384"`.
    pub name: String,
    pub dispatches: Vec<crate::gpu::Dispatch>,
    /// Floating-point operations (0 for pure data movement).
    pub flops: f64,
    /// Bytes that must be read and written at least once.
    pub bytes: f64,
}

/// The shapes kernel benchmarks run at (`ddl bench kernels --preset P`): B·T tokens, width,
/// heads, head size, MLP hidden, vocabulary, value channels, compressor kernel size, and the
/// parameter count (AdamW's step).
#[derive(Debug, Clone, Copy)]
pub struct BenchShape {
    pub b: usize,
    pub t: usize,
    pub d: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub f: usize,
    pub vocab: usize,
    pub m: usize,
    pub kernel: usize,
    pub params: usize,
}

/// The `shakespeare-char` shapes (batch 8 × 256 tokens), the default of `ddl bench kernels`.
pub const BENCH_SHAPE: BenchShape = BenchShape {
    b: 8,
    t: 256,
    d: 384,
    heads: 6,
    head_dim: 64,
    f: 1024,
    vocab: 65,
    m: 4,
    kernel: 4,
    params: 10_700_000,
};

impl BenchShape {
    /// The shapes of a preset's `ddl` model (d_v of the preset; 4 where the preset has fewer
    /// value channels, so that the state kernels have a state) at `batch` × `seq` tokens.
    pub fn preset(preset: &str, batch: usize, seq: usize) -> std::result::Result<Self, crate::model::ConfigError> {
        let cfg = crate::model::ModelConfig::preset(preset, crate::model::Variant::Ddl)?;
        Ok(BenchShape {
            b: batch,
            t: seq,
            d: cfg.d_model,
            heads: cfg.n_heads,
            head_dim: cfg.head_dim,
            f: cfg.mlp_hidden,
            vocab: cfg.vocab_size,
            m: cfg.m().max(1),
            kernel: cfg.state_kernel,
            params: crate::model::Layout::new(&cfg).total,
        })
    }
}

/// The FLOP rate MFU and the compute floors of `ddl bench kernels` divide by: the engine's own
/// best square matmul rate measured now ([`matmul_rate`]), or a peak the user states
/// (`--peak-tflops`: the card's datasheet rate, a denominator that does not move between runs
/// and that other frameworks' MFU use too).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ceiling {
    /// GFLOP/s.
    pub gflop_per_s: f64,
    /// The largest square size measured (the rate is the best of them), `None` for a stated peak.
    pub measured_up_to: Option<usize>,
}

impl Ceiling {
    /// `peak_tflops` when given (nothing is measured), else the engine's best matmul rate.
    pub fn measure_or(gpu: &Gpu, peak_tflops: Option<f64>) -> Result<Ceiling> {
        Ok(match peak_tflops {
            Some(t) => Ceiling { gflop_per_s: t * 1e3, measured_up_to: None },
            None => {
                let (gflop_per_s, n) = matmul_rate(gpu)?;
                Ceiling { gflop_per_s, measured_up_to: Some(n) }
            }
        })
    }

    /// `"measured"` or `"stated"` (the JSON rows' `ceiling`).
    pub fn kind(&self) -> &'static str {
        if self.measured_up_to.is_some() { "measured" } else { "stated" }
    }

    /// What the rate is, for the text output: "the engine's best square matmul rate, 41.3
    /// GFLOP/s (f32, up to 1024³, measured now; …: --peak-tflops for a fixed one)" or "the stated
    /// peak, 67.0 TFLOP/s (--peak-tflops)".
    pub fn describe(&self) -> String {
        match self.measured_up_to {
            Some(n) => format!(
                "the engine's best square matmul rate, {} (f32, up to {n}³, measured now; it varies between runs on \
                 a busy machine: --peak-tflops for a fixed one)",
                rate_text(self.gflop_per_s)
            ),
            None => format!("the stated peak, {} (--peak-tflops)", rate_text(self.gflop_per_s)),
        }
    }

    /// The JSON rows' fields: `ceiling` (measured or stated), `ceiling_gflop_per_s` and
    /// `ceiling_up_to` (the largest square size measured; null for a stated peak).
    pub fn json(&self) -> serde_json::Value {
        json!({"bench": "ceiling", "ceiling": self.kind(), "ceiling_gflop_per_s": self.gflop_per_s,
               "ceiling_up_to": self.measured_up_to})
    }
}

/// A FLOP rate in GFLOP/s as text: TFLOP/s from 1000 GFLOP/s on.
fn rate_text(gflop_per_s: f64) -> String {
    if gflop_per_s >= 1e3 { format!("{:.1} TFLOP/s", gflop_per_s / 1e3) } else { format!("{gflop_per_s:.1} GFLOP/s") }
}

/// The engine's own best matmul rate on this adapter in GFLOP/s (the MFU denominator and the
/// compute floor of `ddl bench kernels` unless `--peak-tflops` states one) and the largest size
/// measured: square f32 products A·B and A·Bᵀ with the variants the runtime picks, the fastest of
/// 5 runs each (the least disturbed: this is a ceiling), at 1024³ and, while a product takes
/// under 20 ms (a GPU, where 1024³ is launch-bound: 2.5 TFLOP/s on the H200 against 31 at
/// 2048³), at 2048³ and 4096³ too.
pub fn matmul_rate(gpu: &Gpu) -> Result<(f64, usize)> {
    use crate::kernels::matmul::Matmul;
    let mut best = 0.0f64;
    let mut up_to = 0;
    for n in [1024usize, 2048, 4096] {
        up_to = n;
        let a = crate::gpu::Tensor::from_f32(gpu, "rate.a", &[n, n], &Rng::new(3).normal(n * n, 1.0))?;
        let c = crate::gpu::Tensor::zeros(gpu, "rate.c", &[n, n], crate::gpu::DType::F32)?;
        let mut slowest_best_ms = 0.0f64;
        for mm in [Matmul::nn(n, n, n), Matmul::nt(n, n, n)] {
            let d = mm.bind(gpu, a.view(), a.view(), c.view())?;
            gpu.run(&[&d])?;
            let mut fastest = f64::INFINITY;
            for _ in 0..5 {
                let mut r = Recorder::profiled(gpu);
                let t0 = Instant::now();
                r.record(&[&d]);
                let kt = r.submit()?;
                let ms = kt.first().map(|k| k.ns / 1e6).unwrap_or(t0.elapsed().as_secs_f64() * 1e3);
                fastest = fastest.min(ms);
                best = best.max(mm.flops() / ms / 1e6);
            }
            slowest_best_ms = slowest_best_ms.max(fastest);
        }
        if slowest_best_ms >= 20.0 {
            break;
        }
    }
    Ok((best, up_to))
}

/// Times each case (median of `reps` after a warm-up, short cases run back to back:
/// [`steady_ms`]) and reports achieved rates against the
/// floor its work implies on this adapter: the larger of its bytes at the copy bandwidth
/// `copy_gbs` (GB/s) and its FLOPs at the engine's matmul rate `matmul_gflops`.
pub fn kernel_rows(
    gpu: &Gpu,
    module: &str,
    cases: Vec<KernelBench>,
    reps: usize,
    copy_gbs: f64,
    matmul_gflops: f64,
    mut emit: impl FnMut(Row),
) -> Result<()> {
    for c in cases {
        let refs: Vec<&crate::gpu::Dispatch> = c.dispatches.iter().collect();
        let (ms, runs) = steady_ms(gpu, &refs, reps)?;
        let byte_floor_ms = c.bytes / (copy_gbs * 1e9) * 1e3;
        let flop_floor_ms = c.flops / (matmul_gflops * 1e9) * 1e3;
        let floor_ms = byte_floor_ms.max(flop_floor_ms);
        emit(Row(json!({
            "bench": "kernel", "module": module, "name": c.name, "ms": ms, "flop": c.flops, "bytes": c.bytes,
            "gflop_per_s": c.flops / ms / 1e6, "gb_per_s": c.bytes / ms / 1e6,
            "byte_floor_ms": byte_floor_ms, "flop_floor_ms": flop_floor_ms, "floor_ms": floor_ms,
            "bound": if flop_floor_ms > byte_floor_ms { "flops" } else { "bytes" },
            "of_floor": floor_ms / ms, "runs_per_rep": runs,
        })));
    }
    Ok(())
}

/// CPU time used so far by the whole process (every thread, so on a CPU adapter such as llvmpipe
/// also the adapter's worker threads), in ms; `None` where the platform has no such clock. On a
/// shared virtual machine it leaves out the time other tenants take from this one (steal), which
/// wall-clock steps include, so ratios of it are steadier there. On a GPU adapter it counts only
/// the host side, so the benchmarks report it beside wall time, never instead of it.
pub fn process_cpu_ms() -> Option<f64> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime only writes the one timespec it is given.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Runs `f` and returns its result with the wall time and (where measurable) the process CPU
/// time it took, both in ms.
fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64, Option<f64>)> {
    let (t0, c0) = (Instant::now(), process_cpu_ms());
    let out = f()?;
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    let cpu = c0.zip(process_cpu_ms()).map(|(c0, c1)| c1 - c0);
    Ok((out, wall, cpu))
}

/// A distribution-free 95 % confidence interval for the median of the ascending `sorted` values
/// (order statistics: [x₍ₖ₎, x₍ₙ₋ₖ₊₁₎] with the largest k whose two binomial(n, ½) tails
/// P(X < k) sum to at most 5 %), or `None` for fewer than 6 values (no such k). No assumption
/// about the distribution of the block ratios, which has long tails on a noisy machine.
pub fn median_ci95(sorted: &[f64]) -> Option<(f64, f64)> {
    let n = sorted.len();
    // P(X ≤ j) for X ~ binomial(n, ½), by the running binomial coefficient (in f64: n ≤ ~1000).
    let mut best = None;
    let (mut coef, mut cdf) = (1.0f64, 0.0f64);
    let total = 2f64.powi(n as i32);
    for j in 0..n {
        cdf += coef / total;
        coef = coef * (n - j) as f64 / (j + 1) as f64;
        // With k = j + 1: the interval misses the median with probability 2·P(X ≤ j).
        if 2.0 * cdf <= 0.05 {
            best = Some(j + 1);
        } else {
            break;
        }
    }
    best.map(|k| (sorted[k - 1], sorted[n - k]))
}

/// A kernel module's benchmark cases at the given shapes: those [`CaseFilter::wants`] (a module
/// may return others of a group it built; [`all_kernel_rows`] drops them).
pub type BenchFn = fn(&Gpu, &BenchShape, &CaseFilter) -> Result<Vec<KernelBench>>;

/// Every kernel case's module and name at `shape`, nothing built (`ddl bench kernels --list`).
pub fn kernel_case_names(gpu: &Gpu, shape: &BenchShape) -> Result<Vec<(&'static str, String)>> {
    let mut out = Vec::new();
    for (module, f) in BENCHES {
        let list = CaseFilter::list();
        let built = f(gpu, shape, &list)?;
        debug_assert!(built.is_empty(), "{module} built cases for a listing");
        out.extend(list.names().into_iter().map(|n| (*module, n)));
    }
    Ok(out)
}

/// Every kernel module's benchmark cases, for `ddl bench kernels` (`src/bench/<kernel>.rs`; the
/// kernel modules themselves only launch).
pub const BENCHES: &[(&str, BenchFn)] = &[
    ("matmul", cases::matmul::cases),
    ("adamw", cases::adamw::cases),
    ("attention", cases::attention::cases),
    ("delta", cases::delta::cases),
    ("elementwise", cases::elementwise::cases),
    ("embedding", cases::embedding::cases),
    ("expand", cases::expand::cases),
    ("loss", cases::loss::cases),
    ("norm", cases::norm::cases),
    ("reduce", cases::reduce::cases),
    ("rope", cases::rope::cases),
    ("shortconv", cases::shortconv::cases),
    ("swiglu", cases::swiglu::cases),
];

#[cfg(test)]
mod tests {
    use super::{ab_blocks, median_ci95};

    #[test]
    fn a_b_blocks_cancel_a_linear_drift_and_report_the_ratio_of_b_over_a() {
        // A takes 2 units, B 3, on a machine that slows by 10 % of the first call per call.
        let mut call = 0.0;
        let ab = ab_blocks(7, |who| {
            let t = [2.0, 3.0][who] * (1.0 + 0.1 * call);
            call += 1.0;
            Ok(t)
        })
        .unwrap();
        assert_eq!(ab.blocks, 7);
        assert!((ab.ratio_median - 1.5).abs() < 1e-12, "{ab:?}");
        let (lo, hi) = ab.ratio_ci95.unwrap();
        assert!((lo - 1.5).abs() < 1e-12 && (hi - 1.5).abs() < 1e-12, "{ab:?}");
        // The medians are of the drifting raw times: B's above 3, A's above 2.
        assert!(ab.b_median > 3.0 && ab.a_median > 2.0 && ab.b_median / ab.a_median > 1.0, "{ab:?}");
        // Under 6 blocks there is no interval; an error stops the blocks.
        assert!(ab_blocks(5, |_| Ok(1.0)).unwrap().ratio_ci95.is_none());
        assert!(ab_blocks(3, |_| Err(crate::gpu::GpuError::Forms("x".into()))).is_err());
    }

    #[test]
    fn the_median_interval_uses_the_binomial_order_statistics() {
        let v: Vec<f64> = (1..=30).map(f64::from).collect();
        // n = 30: P(X ≤ 9) = 0.0214 (two tails 0.043), P(X ≤ 10) = 0.0494: k = 10.
        assert_eq!(median_ci95(&v), Some((10.0, 21.0)));
        let v: Vec<f64> = (1..=6).map(f64::from).collect();
        // n = 6: P(X ≤ 0) = 1/64, two tails 0.031: the whole range.
        assert_eq!(median_ci95(&v), Some((1.0, 6.0)));
        let v: Vec<f64> = (1..=5).map(f64::from).collect();
        assert_eq!(median_ci95(&v), None);
        assert_eq!(median_ci95(&[]), None);
    }
}
