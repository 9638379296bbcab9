//! `ddl bench kernels` cases of [`crate::kernels::attention`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{DType, Gpu, Result, Tensor};
use crate::kernels::attention::*;

/// Benchmark cases for `ddl bench kernels` at the benchmarked preset's shapes: the training forward
/// and backward (B, T, H, h of the preset; shakespeare-char's B 8, T 256, H 6, h 64 by default)
/// and one decoding step against a full cache of T keys.
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let b = *shape;
    let z = |label: &str, n: usize| Tensor::zeros(gpu, label, &[n], DType::F32);
    // Inputs random, never zeros (a GPU can run zeros faster than real data).
    let rng = std::cell::RefCell::new(crate::testing::Rng::new(0xa77e));
    let r = |label: &str, n: usize| super::normal(gpu, &mut rng.borrow_mut(), label, n);
    let scale = 1.0 / (b.head_dim as f32).sqrt();
    let mut cases = Vec::new();

    // The adapter's method first, then the other one for comparison (tiled, or blocks of
    // queries), and the causal method unless chosen; where the adapter has SHADER_F16, the
    // blocked method with f16 operands (`--precision f16`) too, with P and dS stored in f16
    // (form `attn_p16`, "p16") and written over the f32 scores ("r16"), and the causal method
    // with P and dS in f16.
    let chosen = method(gpu);
    let other = if chosen == Method::Tiled { Method::Blocked(BLOCK_ROWS) } else { Method::Tiled };
    let blocked = match (chosen, other) {
        (Method::Blocked(_), _) => chosen,
        (_, Method::Blocked(_)) => other,
        _ => Method::Blocked(default_block_rows(gpu)),
    };
    let mut forms = vec![(chosen, false, false), (other, false, false)];
    if chosen != Method::Causal {
        forms.push((Method::Causal, false, false));
    }
    if gpu.features.contains(wgpu::Features::SHADER_F16) {
        forms.extend([(blocked, true, true), (blocked, true, false), (Method::Causal, true, true)]);
    }
    for (m, half, p16) in forms {
        let f16 = if !half { String::new() } else { format!(" f16 {}", if p16 { "p16" } else { "r16" }) };
        let tag = match m {
            Method::Tiled => "tiled".to_string(),
            Method::Blocked(r) => format!("blocked{r}{f16}"),
            Method::Causal => format!("causal{f16}"),
        };
        let s = AttnShape { half, ..AttnShape::training(b.b, b.heads, b.head_dim, b.t) };
        let shape = format!("B{} T{} H{} h{}", s.batch, s.q_len, s.heads, s.head_dim);
        let Some([fwd_name, bwd_name]) =
            filter.wanted([format!("attention_forward[{tag}] {shape}"), format!("attention_backward[{tag}] {shape}")])
        else {
            continue;
        };
        let (q, k, v) = (r("q", s.q_elems())?, r("k", s.kv_elems())?, r("v", s.kv_elems())?);
        let (out, lse) = (z("out", s.q_elems())?, z("lse", s.lse_elems())?);
        let (dout, dq) = (r("dout", s.q_elems())?, z("dq", s.q_elems())?);
        let (dk, dv) = (z("dk", s.kv_elems())?, z("dv", s.kv_elems())?);
        let gm = gpu.with_forms(|f| {
            f.attention = m;
            f.attn_p16 = p16;
        });
        let gpu = &*gm;
        let mut fwd = forward_seq(
            gpu,
            &s,
            scale,
            AttnIo { q: q.view(), k: k.view(), v: v.view(), out: out.view(), lse: lse.view() },
        )?;
        fwd[0].scratch.extend([q.clone(), k.clone(), v.clone(), out.clone(), lse.clone()]);
        cases.push(KernelBench { name: fwd_name, dispatches: fwd, flops: forward_flops(&s), bytes: forward_bytes(&s) });
        let mut bwd = backward(
            gpu,
            &s,
            scale,
            AttnIo { q: q.view(), k: k.view(), v: v.view(), out: out.view(), lse: lse.view() },
            AttnGrads { dout: dout.view(), dq: dq.view(), dk: dk.view(), dv: dv.view() },
        )?;
        bwd[0].scratch.extend([q, k, v, out, lse, dout, dq, dk, dv]);
        cases.push(KernelBench {
            name: bwd_name,
            dispatches: bwd,
            flops: backward_flops(&s),
            bytes: backward_bytes(&s),
        });
    }

    // One generated token per sequence against a full cache of T keys.
    let s = AttnShape::decode(b.b, b.heads, b.head_dim, 1, b.t, b.t);
    let name = format!("attention_decode B{} q1 kv{} H{} h{}", s.batch, s.kv_len, s.heads, s.head_dim);
    if !filter.wants(&[&name]) {
        return Ok(cases);
    }
    let (q, k, v) = (r("q", s.q_elems())?, r("k", s.kv_elems())?, r("v", s.kv_elems())?);
    let (out, lse) = (z("out", s.q_elems())?, z("lse", s.lse_elems())?);
    let mut dec =
        forward(gpu, &s, scale, AttnIo { q: q.view(), k: k.view(), v: v.view(), out: out.view(), lse: lse.view() })?;
    dec[0].scratch = vec![q, k, v, out, lse];
    cases.push(KernelBench { name, dispatches: dec, flops: forward_flops(&s), bytes: forward_bytes(&s) });
    Ok(cases)
}
