//! `ddl bench kernels` cases of [`crate::kernels::swiglu`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{DType, Gpu, Result, Tensor};
use crate::kernels::swiglu::*;

/// Benchmark cases for `ddl bench kernels` at the benchmarked preset's shapes: n = N·F.
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let s = *shape;
    let n = s.b * s.t * s.f;
    let Some([fwd_name, bwd_name]) = filter.wanted([format!("swiglu_forward n={n}"), format!("swiglu_backward n={n}")])
    else {
        return Ok(Vec::new());
    };
    let t = |label: &str| Tensor::zeros(gpu, label, &[n], DType::F32);
    let (gate, up, out) = (t("gate")?, t("up")?, t("out")?);
    let (dout, dgate, dup) = (t("dout")?, t("dgate")?, t("dup")?);
    let mut fwd = forward(gpu, gate.view(), up.view(), out.view(), n)?;
    fwd[0].scratch = vec![gate.clone(), up.clone(), out];
    let mut bwd = backward(gpu, gate.view(), up.view(), dout.view(), dgate.view(), dup.view(), n)?;
    bwd[0].scratch = vec![gate, up, dout, dgate, dup];
    let nf = n as f64;
    Ok(vec![
        KernelBench {
            name: fwd_name,
            dispatches: fwd,
            // exp, 1 + e, divide, g·σ, ·up (the |g| and select are not counted).
            flops: 5.0 * nf,
            bytes: 4.0 * 3.0 * nf,
        },
        KernelBench {
            name: bwd_name,
            dispatches: bwd,
            // exp, 1 + e, two divides, g·σ, dy·silu, g·(1−σ), 1 + …, σ·(…), dy·u, product.
            flops: 11.0 * nf,
            bytes: 4.0 * 5.0 * nf,
        },
    ])
}
