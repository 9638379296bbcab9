//! `ddl bench kernels` cases of [`crate::kernels::adamw`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{DType, Gpu, Result, Tensor};
use crate::kernels::adamw::*;

/// Benchmark case for `ddl bench kernels`: one step over the parameters of the benchmarked model.
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let n = shape.params;
    let name = format!("adamw_step n={n} (clip, decay half)");
    if !filter.wants(&[&name]) {
        return Ok(Vec::new());
    }
    let t = |label: &str| Tensor::zeros(gpu, label, &[n], DType::F32);
    let (p, g, m, v) = (t("bench.params")?, t("bench.grads")?, t("bench.m")?, t("bench.v")?);
    let mask = Tensor::from_u32(gpu, "bench.mask", &[n.div_ceil(64)], &decay_mask(n, &[(0, n / 2)]))?;
    let norm = Tensor::from_f32(gpu, "bench.norm_sq", &[1], &[4.0])?;
    let cfg = AdamWConfig::paper(1e-3);
    let b = AdamWBufs { params: &p, grads: &g, m: &m, v: &v, decay_mask: mask.view(), norm_sq: norm.view() };
    let mut ds = step(gpu, &b, n, &cfg)?;
    ds[0].scratch.extend([p, g, m, v, mask, norm]);
    Ok(vec![KernelBench {
        name,
        dispatches: ds,
        // clip 1, decay 1, m 3, v 4, update 5
        flops: 14.0 * n as f64,
        // read θ, g, m, v; write θ, m, v; the mask
        bytes: 28.0 * n as f64 + 4.0 * n.div_ceil(64) as f64,
    }])
}
