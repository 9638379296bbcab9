//! `ddl bench kernels` cases of [`crate::kernels::norm`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{DType, Gpu, Result, Tensor};
use crate::kernels::norm::*;

/// Benchmark cases for `ddl bench kernels` at the benchmarked preset's shapes: the block norm
/// (rows N, dim d) and the QK-norm (rows N·H, dim h), forward and backward.
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let s = *shape;
    let n = s.b * s.t;
    let mut out = Vec::new();
    for (label, rows, dim) in [("block", n, s.d), ("qk", n * s.heads, s.head_dim)] {
        let Some([fwd_name, bwd_name]) = filter.wanted([
            format!("rmsnorm_forward {label} rows={rows} dim={dim}"),
            format!("rmsnorm_backward {label} rows={rows} dim={dim}"),
        ]) else {
            continue;
        };
        let t = |l: &str, len: usize| Tensor::zeros(gpu, l, &[len], DType::F32);
        let (x, y, dy, dx) = (t("x", rows * dim)?, t("y", rows * dim)?, t("dy", rows * dim)?, t("dx", rows * dim)?);
        let (gain, dgain, rstd) = (t("gain", dim)?, t("dgain", dim)?, t("rstd", rows)?);
        let mut fwd = rmsnorm_forward(gpu, x.view(), gain.view(), y.view(), rstd.view(), rows, dim, 1e-5)?;
        fwd[0].scratch = vec![x.clone(), gain.clone(), y, rstd.clone()];
        let mut bwd = rmsnorm_backward(
            gpu,
            NormGrads {
                x: x.view(),
                gain: gain.view(),
                rstd: rstd.view(),
                dy: dy.view(),
                dx: dx.view(),
                dgain: dgain.view(),
            },
            rows,
            dim,
            false,
        )?;
        bwd[0].scratch = vec![x, gain, rstd, dy, dx, dgain];
        let (r, e) = (rows as f64, (rows * dim) as f64);
        out.push(KernelBench {
            name: fwd_name,
            dispatches: fwd,
            // x² and sum (2), γ·(x·r) (2) per element; mean, +ε, sqrt, divide per row.
            flops: 4.0 * e + 4.0 * r,
            // read x, gain; write y, rstd
            bytes: 4.0 * (2.0 * e + dim as f64 + r),
        });
        out.push(KernelBench {
            name: bwd_name,
            dispatches: bwd,
            // Σ xγdy (3), dx (4), dγ terms and sums (3) per element.
            flops: 10.0 * e + 5.0 * r,
            // read x, dy, gain, rstd; write dx; read and write dgain
            bytes: 4.0 * (3.0 * e + 3.0 * dim as f64 + r),
        });
    }
    Ok(out)
}
