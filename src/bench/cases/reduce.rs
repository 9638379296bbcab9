//! `ddl bench kernels` cases of [`crate::kernels::reduce`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{DType, Gpu, Result, Tensor};
use crate::kernels::reduce::*;

/// Benchmark cases for `ddl bench kernels`: the gradient norm over a 10.7M-parameter model and
/// the column sums of a gain gradient `[N, d]` and a value-bias gradient `[N, m]`.
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let s = *shape;
    let n_tok = s.b * s.t;
    let mut out = Vec::new();

    let n = 10_700_000;
    let name = format!("sum_squares n={n}");
    if filter.wants(&[&name]) {
        let x = Tensor::zeros(gpu, "bench.grads", &[n], DType::F32)?;
        let o = Tensor::zeros(gpu, "bench.norm_sq", &[1], DType::F32)?;
        let mut ds = sum_squares(gpu, &x, n, o.view())?;
        ds[0].scratch.extend([x, o]);
        out.push(KernelBench { name, dispatches: ds, flops: 2.0 * n as f64, bytes: 4.0 * n as f64 });
    }

    for cols in [s.d, s.m] {
        let name = format!("col_sum rows={n_tok} cols={cols} (+=)");
        if !filter.wants(&[&name]) {
            continue;
        }
        let x = Tensor::zeros(gpu, "bench.x", &[n_tok * cols], DType::F32)?;
        let o = Tensor::zeros(gpu, "bench.out", &[cols], DType::F32)?;
        let mut ds = col_sum(gpu, x.view(), o.view(), n_tok, cols, true)?;
        ds[0].scratch.extend([x, o]);
        out.push(KernelBench {
            name,
            dispatches: ds,
            flops: (n_tok * cols) as f64,
            bytes: 4.0 * (n_tok * cols + 2 * cols) as f64,
        });
    }
    Ok(out)
}
