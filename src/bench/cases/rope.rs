//! `ddl bench kernels` cases of [`crate::kernels::rope`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{DType, Gpu, Result, Tensor};
use crate::kernels::rope::*;

/// Benchmark cases for `ddl bench kernels` at the benchmarked preset's shapes: q `[N, H, h]`.
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let b = *shape;
    let s = RopeShape { rows: b.b * b.t, seq_len: b.t, heads: b.heads, head_dim: b.head_dim, pos0: 0 };
    let n = s.rows * s.heads * s.head_dim;
    let name = |e: &str| format!("rope_{e} q [N={}, H={}, h={}]", s.rows, s.heads, s.head_dim);
    if !filter.wants(&[name("forward"), name("backward")]) {
        return Ok(Vec::new());
    }
    let tab = table(gpu, b.t, b.head_dim, 10000.0)?;
    let x = Tensor::zeros(gpu, "q", &[n], DType::F32)?;
    let y = Tensor::zeros(gpu, "q_rot", &[n], DType::F32)?;
    let mut fwd = forward(gpu, &s, tab.view(), x.view(), y.view())?;
    fwd[0].scratch = vec![tab.clone(), x.clone(), y.clone()];
    let mut bwd = backward(gpu, &s, tab.view(), y.view(), x.view())?;
    bwd[0].scratch = vec![tab, y, x];
    // 4 multiplies and 2 adds per pair = 3 per element; read x and the T·h table, write y.
    let flops = 3.0 * n as f64;
    let bytes = 4.0 * (2.0 * n as f64 + (s.seq_len * s.head_dim) as f64);
    Ok(vec![
        KernelBench { name: name("forward"), dispatches: fwd, flops, bytes },
        KernelBench { name: name("backward"), dispatches: bwd, flops, bytes },
    ])
}
