//! `ddl bench kernels` cases of [`crate::kernels::loss`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{DType, Gpu, Result, Tensor};
use crate::kernels::loss::*;

/// Benchmark cases for `ddl bench kernels`: forward and backward at the benchmarked preset's
/// head (N = B·T, its V) and, for a preset with a smaller vocabulary, at N = 512 and GPT-2's
/// V = 50304 too (named so: its shape is the same whatever the preset).
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let s = *shape;
    let mut out = Vec::new();
    let mut shapes = vec![(s.b * s.t, s.vocab, "")];
    if s.vocab < 50304 {
        shapes.push((512, 50304, " GPT-2 vocabulary"));
    }
    for (n, vocab, label) in shapes {
        let Some([fwd_name, bwd_name]) = filter.wanted([
            format!("cross_entropy_forward N={n} V={vocab} (α=0.1){label}"),
            format!("cross_entropy_backward N={n} V={vocab} (α=0.1){label}"),
        ]) else {
            continue;
        };
        let logits = Tensor::zeros(gpu, "bench.logits", &[n * vocab], DType::F32)?;
        let targets: Vec<i32> = (0..n).map(|i| (i % vocab) as i32).collect();
        let targets = Tensor::from_i32(gpu, "bench.targets", &[n], &targets)?;
        let lse = Tensor::zeros(gpu, "bench.lse", &[n], DType::F32)?;
        let stats = Tensor::zeros(gpu, "bench.out", &[2], DType::F32)?;
        let dlogits = Tensor::zeros(gpu, "bench.dlogits", &[n * vocab], DType::F32)?;
        let ce = CeShape { n, vocab, label_smoothing: 0.1 };
        let io = CeIo { logits: logits.view(), targets: targets.view(), lse: lse.view(), out: stats.view() };
        let mut f = cross_entropy_forward(gpu, &ce, io)?;
        let mut b = cross_entropy_backward(gpu, &ce, io, dlogits.view(), 1.0)?;
        let nv = (n * vocab) as f64;
        f[0].scratch.extend([logits.clone(), targets.clone(), lse.clone(), stats.clone()]);
        b[0].scratch.extend([logits, targets, lse, stats, dlogits]);
        out.push(KernelBench {
            name: fwd_name,
            dispatches: f,
            // compare, exp, multiply-add, shifted sum per logit
            flops: 5.0 * nv,
            // logits, targets, lse, out
            bytes: 4.0 * (nv + 2.0 * n as f64 + 2.0),
        });
        out.push(KernelBench {
            name: bwd_name,
            dispatches: b,
            // subtract, exp, subtract twice, multiply
            flops: 5.0 * nv,
            // read logits, write dlogits, targets, lse
            bytes: 4.0 * (2.0 * nv + 2.0 * n as f64 + 2.0),
        });
    }
    Ok(out)
}
