//! `ddl bench kernels` cases of [`crate::kernels::matmul`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{Gpu, Result, Tensor};
use crate::kernels::matmul::*;

/// Benchmark cases for `ddl bench kernels`: the products of one training step of the benchmarked preset.
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let s = *shape;
    let n = s.b * s.t;
    let dq = s.heads * s.head_dim;
    let mut out = Vec::new();
    for (name, mm) in [
        ("qkv_proj (x·Wᵀ)", Matmul::nt(n, dq, s.d)),
        ("mlp_up (x·Wᵀ)", Matmul::nt(n, s.f, s.d)),
        ("mlp_down_dx (dy·W)", Matmul::nn(n, s.f, s.d)),
        ("mlp_down_dw (dyᵀ·x)", Matmul::tn(s.d, s.f, n)),
    ] {
        let v = pick(gpu, &mm);
        let name = format!("matmul {name} {}x{}x{} [{v} {}]", mm.m, mm.n, mm.k, mm.entry_point(v)?);
        if !filter.wants(&[&name]) {
            continue;
        }
        let a = Tensor::zeros(gpu, "a", &[mm.a.extent(mm.m, mm.k, 1)], crate::gpu::DType::F32)?;
        let b = Tensor::zeros(gpu, "b", &[mm.b.extent(mm.k, mm.n, 1)], crate::gpu::DType::F32)?;
        let c = Tensor::zeros(gpu, "c", &[mm.c.extent(mm.m, mm.n, 1)], crate::gpu::DType::F32)?;
        let mut d = mm.bind_variant(gpu, v, a.view(), b.view(), c.view())?;
        d.scratch = vec![a, b, c];
        out.push(KernelBench { name, dispatches: vec![d], flops: mm.flops(), bytes: mm.min_bytes() });
    }
    Ok(out)
}
