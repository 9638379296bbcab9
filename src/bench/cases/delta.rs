//! `ddl bench kernels` cases of [`crate::kernels::delta`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{Gpu, Result, Tensor};
use crate::kernels::delta::*;
use crate::testing::Rng;

/// Benchmark cases for `ddl bench kernels` at the benchmarked preset's shapes: forward and
/// backward for m = 4 and m = 1.
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let mut out = Vec::new();
    let mut rng = Rng::new(7);
    let n = shape.b * shape.t;
    let d = shape.d;
    // m = 4 with the state in f32 and, where the adapter has SHADER_F16, in f16; and m = 1.
    let f16 = gpu.features.contains(wgpu::Features::SHADER_F16);
    let cases = [(shape.m, false), (shape.m, true), (1, false)];
    for (m, state_f16) in cases.into_iter().filter(|&(m, h)| !h || (f16 && m == 4)) {
        let s = DeltaShape { n, d, m, k_eps: 1e-5, v_act: VAct::Sigmoid4, state_f16, beta: Default::default() };
        let state = if state_f16 { " f16 state" } else { "" };
        let Some([fwd_name, bwd_name]) = filter.wanted([
            format!("delta_forward N={n} d={d} m={m}{state}"),
            format!("delta_backward N={n} d={d} m={m}{state}"),
        ]) else {
            continue;
        };
        // An f16 state: n·d·m halves of small normal values (the f32 bits of a normal draw would
        // hold f16 NaNs and subnormals); its size checked before they are drawn, as
        // [`super::normal`] checks the others.
        let x = if state_f16 {
            let bytes = s.state_elems() as u64 * 4;
            gpu.check_buffer_size(&format!("tensor 'x' [{}]", s.state_elems()), bytes)?;
            let bits: Vec<f32> = rng
                .normal(s.state_elems(), 1.0)
                .iter()
                .map(|v| {
                    let h = |b: u32| (0x3800 | (b & 0x83ff)) & 0xffff; // ±[0.5, 1)
                    f32::from_bits(h(v.to_bits()) | h(v.to_bits() >> 13) << 16)
                })
                .collect();
            Tensor::from_f32(gpu, "x", &[bits.len()], &bits)?
        } else {
            super::normal(gpu, &mut rng, "x", n * d * m)?
        };
        let mut t = |label: &str, len: usize| super::normal(gpu, &mut rng, label, len);
        let kraw = t("kraw", n * d)?;
        let a = t("a", n * d)?;
        let c = t("c", n * d)?;
        let w_beta = t("w_beta", d)?;
        let b_beta = t("b_beta", 1)?;
        let w_v = t("w_v", m * d)?;
        let b_v = t("b_v", m)?;
        let g = t("g", n * d * m)?;
        let zeros = |label: &str, len: usize| Tensor::zeros(gpu, label, &[len], crate::gpu::DType::F32);
        let x_out = zeros("x_out", s.state_elems())?;
        let rnorm = zeros("rnorm", n)?;
        let beta = zeros("beta", n)?;
        let v = zeros("v", n * m)?;
        let delta = zeros("delta", n * m)?;
        let dx = zeros("dx", n * d * m)?;
        let dkraw = zeros("dkraw", n * d)?;
        let da = zeros("da", n * d)?;
        let dc = zeros("dc", n * d)?;
        let dw_beta = zeros("dw_beta", d)?;
        let db_beta = zeros("db_beta", 1)?;
        let dw_v = zeros("dw_v", m * d)?;
        let db_v = zeros("db_v", m)?;

        let inp = WriteIn { x: x.view(), kraw: kraw.view(), a: a.view(), c: c.view() };
        let heads = Heads { w_beta: w_beta.view(), b_beta: b_beta.view(), w_v: w_v.view(), b_v: b_v.view() };
        let saves = Saves { rnorm: rnorm.view(), beta: beta.view(), v: v.view(), delta: delta.view() };
        // As training runs it: no k (the backward recomputes it).
        let wout = WriteOut { x_out: x_out.view(), k: None, saves };
        let mut fwd = forward(gpu, &s, inp, heads, wout, None)?;
        // Realistic saved values for the backward.
        gpu.run(&fwd.iter().collect::<Vec<_>>())?;
        let grads = WriteGrads { dx: dx.view(), dkraw: dkraw.view(), da: da.view(), dc: dc.view() };
        let dheads = Heads { w_beta: dw_beta.view(), b_beta: db_beta.view(), w_v: dw_v.view(), b_v: db_v.view() };
        let bwd = backward(gpu, &s, g.view(), inp, heads, saves, grads, dheads, false)?;
        let mut bwd = bwd;
        // Keep every tensor alive with the dispatches that use it.
        fwd[0].scratch.extend([
            x.clone(),
            kraw.clone(),
            a.clone(),
            c.clone(),
            w_beta.clone(),
            b_beta,
            w_v.clone(),
            b_v,
            x_out,
        ]);
        bwd[0].scratch.extend([
            g, x, kraw, rnorm, beta, v, delta, a, c, w_beta, w_v, dx, dkraw, da, dc, dw_beta, db_beta, dw_v, db_v,
        ]);
        out.push(KernelBench { name: fwd_name, dispatches: fwd, flops: forward_flops(&s), bytes: forward_bytes(&s) });
        out.push(KernelBench {
            name: bwd_name,
            dispatches: bwd,
            flops: backward_flops(&s),
            bytes: backward_bytes(&s, false),
        });
    }
    Ok(out)
}
