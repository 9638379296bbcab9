//! `ddl bench kernels` cases of [`crate::kernels::elementwise`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{DType, Gpu, Result, Tensor};
use crate::kernels::elementwise::*;

/// Benchmark cases for `ddl bench kernels`: a residual add and a gradient scale over `[N, d]`.
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let s = *shape;
    let n = s.b * s.t * s.d;
    let Some([add_name, scale_name]) = filter.wanted([
        format!("add (y += x) N={} d={}", s.b * s.t, s.d),
        format!("scale (x *= a) N={} d={}", s.b * s.t, s.d),
    ]) else {
        return Ok(Vec::new());
    };
    let x = Tensor::zeros(gpu, "bench.x", &[n], DType::F32)?;
    let y = Tensor::zeros(gpu, "bench.y", &[n], DType::F32)?;
    let mut a = add(gpu, x.view(), y.view(), n)?;
    a[0].scratch.extend([x, y.clone()]);
    let mut sc = scale(gpu, y.view(), 0.5, n)?;
    sc[0].scratch.push(y);
    Ok(vec![
        KernelBench { name: add_name, dispatches: a, flops: n as f64, bytes: 12.0 * n as f64 },
        KernelBench { name: scale_name, dispatches: sc, flops: n as f64, bytes: 8.0 * n as f64 },
    ])
}
