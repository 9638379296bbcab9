//! `ddl bench kernels` cases of [`crate::kernels::expand`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{DType, Gpu, Result, Tensor};
use crate::kernels::expand::*;

/// Benchmark cases for `ddl bench kernels` at the given [`BenchShape`](crate::bench::BenchShape): EC and replication, forward and
/// backward.
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let b = *shape;
    let s = ConvShape { batch: b.b, seq: b.t, d: b.d, m: b.m, kernel: b.kernel, state_f16: false };
    let (n, d, m, k) = (s.tokens(), s.d, s.m, s.kernel);
    let (ndf, dmf, kf) = (n as f64 * d as f64, (d * m) as f64, k as f64);
    let state = n as f64 * dmf;
    let shape = format!("B={} T={} d={d} m={m}", b.b, b.t);
    let Some([ec_fwd, ec_bwd, rep_fwd, rep_bwd]) = filter.wanted([
        format!("expand ec_forward {shape} K={k}"),
        format!("expand ec_backward {shape} K={k}"),
        format!("expand replicate_forward {shape}"),
        format!("expand replicate_backward {shape}"),
    ]) else {
        return Ok(Vec::new());
    };
    let t = |label: &str, elems: usize| Tensor::zeros(gpu, label, &[elems], DType::F32);
    let e = t("e", n * d)?;
    let ek = t("ekernel", d * m * k)?;
    let x0 = t("x0", n * d * m)?;
    let g = t("g", n * d * m)?;
    let de = t("de", n * d)?;
    let dek = t("dekernel", d * m * k)?;
    let keep = [e.clone(), ek.clone(), x0.clone(), g.clone(), de.clone(), dek.clone()];
    let mut out = vec![
        KernelBench {
            name: ec_fwd,
            dispatches: ec_forward(gpu, &s, e.view(), ek.view(), x0.view())?,
            flops: 2.0 * state * kf,
            bytes: 4.0 * (ndf + dmf * kf + state),
        },
        KernelBench {
            name: ec_bwd,
            dispatches: ec_backward(gpu, &s, e.view(), ek.view(), g.view(), de.view(), dek.view())?,
            // de: K taps per state element; dekernel: K taps per state element.
            flops: 4.0 * state * kf,
            // Read g and e, write de, read+write dekernel, read ekernel.
            bytes: 4.0 * (state + 2.0 * ndf + 3.0 * dmf * kf),
        },
        KernelBench {
            name: rep_fwd,
            dispatches: replicate_forward(gpu, n, d, m, e.view(), x0.view())?,
            flops: 0.0,
            bytes: 4.0 * (ndf + state),
        },
        KernelBench {
            name: rep_bwd,
            dispatches: replicate_backward(gpu, n, d, m, g.view(), de.view())?,
            flops: state,
            bytes: 4.0 * (state + ndf),
        },
    ];
    for case in &mut out {
        case.dispatches[0].scratch.extend(keep.iter().cloned());
    }
    Ok(out)
}
