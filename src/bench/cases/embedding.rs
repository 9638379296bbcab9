//! `ddl bench kernels` cases of [`crate::kernels::embedding`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{DType, Gpu, Result, Tensor};
use crate::kernels::embedding::*;

/// Benchmark cases for `ddl bench kernels` at the benchmarked preset's shapes: N = B·T tokens of
/// width d from a vocabulary of V, forward gather and backward scatter-add.
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let s = *shape;
    let (n, d, v) = (s.b * s.t, s.d, s.vocab);
    let Some([fwd_name, bwd_name]) = filter
        .wanted([format!("embedding_forward N={n} d={d} V={v}"), format!("embedding_backward N={n} d={d} V={v}")])
    else {
        return Ok(Vec::new());
    };
    let toks = crate::testing::Rng::new(1).ints(n, v);
    let index = build_index(&toks, v)?;
    let u = index[0] as usize;
    let tokens = Tensor::from_i32(gpu, "tokens", &[n], &toks)?;
    let idx = Tensor::from_u32(gpu, "tok_index", &[index.len()], &index)?;
    let table = Tensor::zeros(gpu, "table", &[v, d], DType::F32)?;
    let out = Tensor::zeros(gpu, "emb", &[n, d], DType::F32)?;
    let mut fwd = forward(gpu, tokens.view(), table.view(), out.view(), n, d, v)?;
    fwd[0].scratch = vec![tokens, table.clone(), out.clone()];
    let mut bwd = backward(gpu, idx.view(), out.view(), table.view(), n, d, v)?;
    bwd[0].scratch = vec![idx, out, table];
    let (nd, ud) = ((n * d) as f64, (u * d) as f64);
    Ok(vec![
        KernelBench {
            name: fwd_name,
            dispatches: fwd,
            flops: 0.0,
            // read the ids and the used table rows, write the output
            bytes: 4.0 * (n as f64 + ud + nd),
        },
        KernelBench {
            name: bwd_name,
            dispatches: bwd,
            // one add per dout element (plus one per touched dtable element)
            flops: nd + ud,
            // read the index and dout, read and write the touched dtable rows
            bytes: 4.0 * (index_len(n) as f64 + nd + 2.0 * ud),
        },
    ])
}
