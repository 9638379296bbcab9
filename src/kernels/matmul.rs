//! Batched, strided matrix multiply (`shaders/matmul.wgsl`): C = alpha·op(A)·op(B) (+ C).
//!
//! Covers every product a Transformer's forward and backward need: A·B, A·Bᵀ (weights stored
//! `[out, in]`), Aᵀ·B (weight gradients), with accumulation into C for gradient sums, and a
//! batched form (attention heads). Correct for any M, N, K ≥ 1.
//!
//! Tile variants (`shaders::MATMUL_VARIANTS`) all sum each output over K in the same order, so
//! they give bit-identical results; which one runs is a speed choice made per adapter and shape
//! bucket: a heuristic, or a measurement cached on disk (see [`autotune`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::gpu::{Dispatch, Gpu, GpuError, Recorder, Result, Tensor, View};
use crate::shaders::MATMUL_VARIANTS;

/// Where one matrix operand lives: element (r, c) of batch b is at
/// `offset + b·batch_stride + r·row_stride + c·col_stride` (in elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operand {
    pub offset: usize,
    pub row_stride: usize,
    pub col_stride: usize,
    pub batch_stride: usize,
}

impl Operand {
    /// A packed row-major `rows × cols` matrix (batches follow each other).
    pub fn row_major(rows: usize, cols: usize) -> Self {
        Operand { offset: 0, row_stride: cols, col_stride: 1, batch_stride: rows * cols }
    }

    /// The transpose of a packed row-major `cols × rows` matrix, seen as `rows × cols`.
    pub fn transposed(rows: usize, cols: usize) -> Self {
        Operand { offset: 0, row_stride: 1, col_stride: rows, batch_stride: rows * cols }
    }

    /// One past the largest element index touched for a `rows × cols` view over `batch` batches.
    pub fn extent(&self, rows: usize, cols: usize, batch: usize) -> usize {
        self.offset + (batch - 1) * self.batch_stride + (rows - 1) * self.row_stride + (cols - 1) * self.col_stride + 1
    }
}

/// A matrix product `C[b] (+)= alpha · A[b] · B[b]` with A: M×K, B: K×N, C: M×N.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Matmul {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    pub a: Operand,
    pub b: Operand,
    /// C's `col_stride` must be 1.
    pub c: Operand,
    pub accumulate: bool,
    pub alpha: f32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    accumulate: u32,
    a_off: u32,
    a_rs: u32,
    a_cs: u32,
    a_bs: u32,
    b_off: u32,
    b_rs: u32,
    b_cs: u32,
    b_bs: u32,
    c_off: u32,
    c_rs: u32,
    c_bs: u32,
    alpha: f32,
}

impl Matmul {
    /// C = A·B, all packed row-major: A `[M, K]`, B `[K, N]`, C `[M, N]`.
    pub fn nn(m: usize, n: usize, k: usize) -> Self {
        Matmul {
            m,
            n,
            k,
            batch: 1,
            a: Operand::row_major(m, k),
            b: Operand::row_major(k, n),
            c: Operand::row_major(m, n),
            accumulate: false,
            alpha: 1.0,
        }
    }

    /// C = A·Bᵀ with B stored `[N, K]` (a linear layer with weights `[out, in]`).
    pub fn nt(m: usize, n: usize, k: usize) -> Self {
        Matmul { b: Operand::transposed(k, n), ..Self::nn(m, n, k) }
    }

    /// C = Aᵀ·B with A stored `[K, M]` (a weight gradient: dW = dYᵀ·X).
    pub fn tn(m: usize, n: usize, k: usize) -> Self {
        Matmul { a: Operand::transposed(m, k), ..Self::nn(m, n, k) }
    }

    /// C = Aᵀ·Bᵀ with A stored `[K, M]` and B stored `[N, K]`.
    pub fn tt(m: usize, n: usize, k: usize) -> Self {
        Matmul { a: Operand::transposed(m, k), b: Operand::transposed(k, n), ..Self::nn(m, n, k) }
    }

    /// `batch` independent products; packed operands are laid one after the other.
    pub fn batched(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }

    /// Adds into C instead of overwriting it.
    pub fn accumulate(mut self, yes: bool) -> Self {
        self.accumulate = yes;
        self
    }

    /// Scales the product.
    pub fn alpha(mut self, alpha: f32) -> Self {
        self.alpha = alpha;
        self
    }

    /// FLOPs of the product (2·M·N·K per batch).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.batch as f64
    }

    /// Bytes that must move at least once: read A and B, write C (and read it when accumulating).
    pub fn min_bytes(&self) -> f64 {
        let c = (self.m * self.n) as f64 * if self.accumulate { 2.0 } else { 1.0 };
        4.0 * self.batch as f64 * ((self.m * self.k + self.k * self.n) as f64 + c)
    }

    fn check(&self, a: &View, b: &View, c: &View) -> Result<()> {
        let bad = |s: String| {
            Err(GpuError::Shape(format!("matmul {}x{}x{} (batch {}): {s}", self.m, self.n, self.k, self.batch)))
        };
        if self.m == 0 || self.n == 0 || self.k == 0 || self.batch == 0 {
            return bad("every size must be at least 1".into());
        }
        if self.c.col_stride != 1 {
            return bad("C must have unit column stride".into());
        }
        for (name, op, rows, cols, v) in
            [("A", &self.a, self.m, self.k, a), ("B", &self.b, self.k, self.n, b), ("C", &self.c, self.m, self.n, c)]
        {
            let need = op.extent(rows, cols, self.batch) as u64 * 4;
            if need > v.size {
                return bad(format!("{name} needs {need} bytes of its buffer, the binding has {}", v.size));
            }
            if need / 4 > u32::MAX as u64 {
                return bad(format!("{name} spans more than 2^32 elements; split the product"));
            }
        }
        Ok(())
    }

    /// Binds the product to buffers with the variant picked for this adapter and shape.
    pub fn bind(&self, gpu: &Gpu, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
        let v = pick(gpu, self);
        self.bind_variant(gpu, v, a, b, c)
    }

    /// Binds with an explicit tile variant (a name from `shaders::MATMUL_VARIANTS`).
    pub fn bind_variant(&self, gpu: &Gpu, variant: &str, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
        self.check(&a, &b, &c)?;
        let (bm, bn) = tile(variant)?;
        let p = Params {
            m: self.m as u32,
            n: self.n as u32,
            k: self.k as u32,
            accumulate: self.accumulate as u32,
            a_off: self.a.offset as u32,
            a_rs: self.a.row_stride as u32,
            a_cs: self.a.col_stride as u32,
            a_bs: self.a.batch_stride as u32,
            b_off: self.b.offset as u32,
            b_rs: self.b.row_stride as u32,
            b_cs: self.b.col_stride as u32,
            b_bs: self.b.batch_stride as u32,
            c_off: self.c.offset as u32,
            c_rs: self.c.row_stride as u32,
            c_bs: self.c.batch_stride as u32,
            alpha: self.alpha,
        };
        let wg = [self.n.div_ceil(bn) as u32, self.m.div_ceil(bm) as u32, self.batch as u32];
        let kern = gpu.kernel("matmul", Some(variant), "matmul")?;
        kern.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &[("a", a), ("b", b), ("c", c)], wg)
    }
}

/// The BM×BN tile of a variant.
pub fn tile(variant: &str) -> Result<(usize, usize)> {
    let v = MATMUL_VARIANTS
        .iter()
        .find(|v| v.name == variant)
        .ok_or_else(|| GpuError::Shader { shader: "matmul".into(), reason: format!("no variant '{variant}'") })?;
    let get = |n: &str| -> usize {
        v.consts.iter().find(|c| c.0 == n).map(|c| c.2.trim_end_matches('u').parse().unwrap()).unwrap()
    };
    Ok((get("BM"), get("BN")))
}

/// Names of all tile variants.
pub fn variants() -> Vec<&'static str> {
    MATMUL_VARIANTS.iter().map(|v| v.name).collect()
}

/// Shape bucket for the autotune cache: powers of two of M, N, K and the operand layouts.
fn bucket(mm: &Matmul) -> String {
    let l = |x: usize| (x.max(1) as f64).log2().round() as u32;
    format!("{}x{}x{}|a{}b{}", l(mm.m), l(mm.n), l(mm.k), (mm.a.col_stride == 1) as u8, (mm.b.col_stride == 1) as u8)
}

/// The heuristic choice: the biggest tile that still gives the adapter enough workgroups.
pub fn heuristic(gpu: &Gpu, mm: &Matmul) -> &'static str {
    let parallel = gpu.info.device_type != wgpu::DeviceType::Cpu;
    let want_groups = if parallel { 64 } else { 8 };
    for v in ["t64", "t32"] {
        let (bm, bn) = tile(v).unwrap();
        let groups = mm.m.div_ceil(bm) * mm.n.div_ceil(bn) * mm.batch;
        if mm.m >= bm / 2 && mm.n >= bn / 2 && groups >= want_groups {
            return v;
        }
    }
    "t16"
}

/// Autotune state: measured choices per (adapter, bucket), persisted as JSON.
pub mod autotune {
    use super::*;

    static ENABLED: OnceLock<Mutex<bool>> = OnceLock::new();
    static CACHE: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();

    /// Turns measuring on or off for this process (off by default: the heuristic and earlier
    /// measurements are used). The CLI enables it for training and benchmarks.
    pub fn set_enabled(on: bool) {
        *ENABLED.get_or_init(|| Mutex::new(false)).lock().unwrap() = on;
    }

    pub fn enabled() -> bool {
        *ENABLED.get_or_init(|| Mutex::new(false)).lock().unwrap()
    }

    /// `$DDL_CACHE_DIR`, else `$XDG_CACHE_HOME/ddl`, else `~/.cache/ddl`.
    pub fn cache_path() -> Option<PathBuf> {
        let dir = if let Ok(d) = std::env::var("DDL_CACHE_DIR") {
            PathBuf::from(d)
        } else if let Ok(d) = std::env::var("XDG_CACHE_HOME") {
            PathBuf::from(d).join("ddl")
        } else {
            PathBuf::from(std::env::var("HOME").ok()?).join(".cache").join("ddl")
        };
        Some(dir.join("matmul-autotune.json"))
    }

    pub(super) fn cache() -> &'static Mutex<HashMap<String, String>> {
        CACHE.get_or_init(|| {
            let map = cache_path()
                .and_then(|p| std::fs::read_to_string(p).ok())
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or_default();
            Mutex::new(map)
        })
    }

    pub(super) fn save() {
        let Some(path) = cache_path() else { return };
        let map = cache().lock().unwrap().clone();
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        // Atomic replace: a crash never leaves a half-written cache.
        let tmp = path.with_extension("json.tmp");
        if std::fs::write(&tmp, serde_json::to_string_pretty(&map).unwrap_or_default()).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }

    /// Times every variant on scratch buffers of this shape and returns `(variant, ms)`, fastest
    /// first.
    pub fn measure(gpu: &Gpu, mm: &Matmul, reps: usize) -> Result<Vec<(&'static str, f64)>> {
        let a = Tensor::zeros(gpu, "tune.a", &[mm.a.extent(mm.m, mm.k, mm.batch)], crate::gpu::DType::F32)?;
        let b = Tensor::zeros(gpu, "tune.b", &[mm.b.extent(mm.k, mm.n, mm.batch)], crate::gpu::DType::F32)?;
        let c = Tensor::zeros(gpu, "tune.c", &[mm.c.extent(mm.m, mm.n, mm.batch)], crate::gpu::DType::F32)?;
        let mut out = Vec::new();
        for v in variants() {
            let d = mm.bind_variant(gpu, v, a.view(), b.view(), c.view())?;
            gpu.run(&[&d])?; // warm-up (pipeline compile, caches)
            let mut times = Vec::new();
            for _ in 0..reps.max(1) {
                let mut r = Recorder::profiled(gpu);
                let t0 = Instant::now();
                r.record(&[&d]);
                let kt = r.submit()?;
                let ms = kt.first().map(|k| k.ns / 1e6).unwrap_or(t0.elapsed().as_secs_f64() * 1e3);
                times.push(ms);
            }
            times.sort_by(|x, y| x.partial_cmp(y).unwrap());
            out.push((v, times[times.len() / 2]));
        }
        out.sort_by(|x, y| x.1.partial_cmp(&y.1).unwrap());
        Ok(out)
    }

    /// Measures this shape's bucket now (regardless of [`enabled`]) and stores the winner.
    pub fn tune(gpu: &Gpu, mm: &Matmul) -> Result<&'static str> {
        let best = measure(gpu, mm, 3)?[0].0;
        let key = format!("{}|{}", gpu.adapter_key(), bucket(mm));
        cache().lock().unwrap().insert(key, best.to_string());
        save();
        Ok(best)
    }
}

/// The variant used for a product: a cached measurement for this adapter and shape bucket,
/// a fresh measurement when autotuning is enabled, else the heuristic.
pub fn pick(gpu: &Gpu, mm: &Matmul) -> &'static str {
    let key = format!("{}|{}", gpu.adapter_key(), bucket(mm));
    if let Some(v) = autotune::cache().lock().unwrap().get(&key) {
        if let Some(name) = variants().into_iter().find(|n| n == v) {
            return name;
        }
    }
    if autotune::enabled() {
        if let Ok(v) = autotune::tune(gpu, mm) {
            return v;
        }
    }
    heuristic(gpu, mm)
}

/// Benchmark cases for `ddl bench kernels`: the products of one `shakespeare-char` training step.
pub fn bench(gpu: &Gpu) -> Result<Vec<crate::bench::KernelBench>> {
    let s = crate::bench::BENCH_SHAPE;
    let n = s.b * s.t;
    let dq = s.heads * s.head_dim;
    let mut out = Vec::new();
    for (name, mm) in [
        ("qkv_proj (x·Wᵀ)", Matmul::nt(n, dq, s.d)),
        ("mlp_up (x·Wᵀ)", Matmul::nt(n, s.f, s.d)),
        ("mlp_down_dx (dy·W)", Matmul::nn(n, s.f, s.d)),
        ("mlp_down_dw (dyᵀ·x)", Matmul::tn(s.d, s.f, n)),
    ] {
        let a = Tensor::zeros(gpu, "a", &[mm.a.extent(mm.m, mm.k, 1)], crate::gpu::DType::F32)?;
        let b = Tensor::zeros(gpu, "b", &[mm.b.extent(mm.k, mm.n, 1)], crate::gpu::DType::F32)?;
        let c = Tensor::zeros(gpu, "c", &[mm.c.extent(mm.m, mm.n, 1)], crate::gpu::DType::F32)?;
        let mut d = mm.bind(gpu, a.view(), b.view(), c.view())?;
        d.scratch = vec![a, b, c];
        out.push(crate::bench::KernelBench {
            name: format!("matmul {name} {}x{}x{} [{}]", mm.m, mm.n, mm.k, pick(gpu, &mm)),
            dispatches: vec![d],
            flops: mm.flops(),
            bytes: mm.min_bytes(),
        });
    }
    Ok(out)
}
