//! Benchmarks behind `ddl bench ...`. Each result is a row for humans or a JSON line for scripts.

use std::time::Instant;

use serde_json::json;

use crate::gpu::{DType, Gpu, Recorder, Result, Tensor};
use crate::kernels::matmul::{self, Matmul};
use crate::testing::Rng;

/// One measurement.
#[derive(Debug, Clone)]
pub struct Row(pub serde_json::Value);

/// Median of the per-run kernel times (ms) of `d`, after one warm-up run.
pub fn time_dispatch(gpu: &Gpu, d: &crate::gpu::Dispatch, reps: usize) -> Result<f64> {
    gpu.run(&[d])?;
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let mut r = Recorder::profiled(gpu);
        let t0 = Instant::now();
        r.record(&[d]);
        let kt = r.submit()?;
        t.push(kt.first().map(|k| k.ns / 1e6).unwrap_or(t0.elapsed().as_secs_f64() * 1e3));
    }
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Ok(t[t.len() / 2])
}

/// Host-timed buffer copy bandwidth in GB/s (read + write bytes counted), median of `reps`.
pub fn copy_bandwidth(gpu: &Gpu, mib: usize, reps: usize) -> Result<Row> {
    let n = mib * 1024 * 1024 / 4;
    let a = Tensor::zeros(gpu, "copy.src", &[n], DType::F32)?;
    let b = Tensor::zeros(gpu, "copy.dst", &[n], DType::F32)?;
    let mut t = Vec::new();
    for i in 0..reps.max(1) + 1 {
        let mut r = Recorder::new(gpu);
        r.copy(&a, &b);
        let t0 = Instant::now();
        r.submit()?;
        gpu.wait()?;
        if i > 0 {
            t.push(t0.elapsed().as_secs_f64());
        }
    }
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let s = t[t.len() / 2];
    let bytes = 2.0 * (n * 4) as f64;
    Ok(Row(json!({"bench": "copy", "mib": mib, "ms": s * 1e3, "gb_per_s": bytes / s / 1e9})))
}

/// The matmul forms benchmarked: (name, constructor).
pub const MATMUL_CASES: &[(&str, fn(usize, usize, usize) -> Matmul)] =
    &[("nn", Matmul::nn), ("nt", Matmul::nt), ("tn", Matmul::tn)];

/// GFLOP/s of every matmul form and tile variant at square sizes, plus the variant [`matmul::pick`]
/// would use (`"auto"`).
pub fn matmul_rows(gpu: &Gpu, sizes: &[usize], cases: &[&str], reps: usize, mut emit: impl FnMut(Row)) -> Result<()> {
    let mut rng = Rng::new(1);
    for &s in sizes {
        let a = Tensor::from_f32(gpu, "a", &[s * s], &rng.uniform(s * s, -1.0, 1.0))?;
        let b = Tensor::from_f32(gpu, "b", &[s * s], &rng.uniform(s * s, -1.0, 1.0))?;
        let c = Tensor::zeros(gpu, "c", &[s * s], DType::F32)?;
        for (name, ctor) in MATMUL_CASES.iter().filter(|(n, _)| cases.contains(n)) {
            let mm = ctor(s, s, s);
            let auto = matmul::pick(gpu, &mm);
            for v in matmul::variants() {
                let d = mm.bind_variant(gpu, v, a.view(), b.view(), c.view())?;
                let ms = time_dispatch(gpu, &d, reps)?;
                emit(Row(json!({
                    "bench": "matmul", "case": name, "m": s, "n": s, "k": s, "variant": v,
                    "auto": v == auto, "ms": ms, "gflop_per_s": mm.flops() / ms / 1e6,
                    "flop": mm.flops(), "bytes": mm.min_bytes(),
                })));
            }
        }
    }
    Ok(())
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

/// Shapes of the `shakespeare-char` preset used by kernel benchmarks: B·T tokens, width, heads,
/// head size, MLP hidden, vocabulary, value channels.
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
}

pub const BENCH_SHAPE: BenchShape =
    BenchShape { b: 8, t: 256, d: 384, heads: 6, head_dim: 64, f: 1024, vocab: 65, m: 4, kernel: 4 };

/// Times each case (median of `reps` after a warm-up) and reports achieved rates against the
/// adapter's copy bandwidth `copy_gbs` (GB/s).
pub fn kernel_rows(
    gpu: &Gpu,
    cases: Vec<KernelBench>,
    reps: usize,
    copy_gbs: f64,
    mut emit: impl FnMut(Row),
) -> Result<()> {
    for c in cases {
        let refs: Vec<&crate::gpu::Dispatch> = c.dispatches.iter().collect();
        gpu.run(&refs)?;
        let mut t = Vec::new();
        for _ in 0..reps.max(1) {
            let mut r = Recorder::profiled(gpu);
            r.record(&refs);
            let kt = r.submit()?;
            t.push(kt.iter().map(|k| k.ns).sum::<f64>() / 1e6);
        }
        t.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let ms = t[t.len() / 2];
        let floor_ms = c.bytes / (copy_gbs * 1e9) * 1e3;
        emit(Row(json!({
            "bench": "kernel", "name": c.name, "ms": ms, "flop": c.flops, "bytes": c.bytes,
            "gflop_per_s": c.flops / ms / 1e6, "gb_per_s": c.bytes / ms / 1e6,
            "byte_floor_ms": floor_ms, "of_floor": floor_ms / ms,
        })));
    }
    Ok(())
}
