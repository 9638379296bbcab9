//! `ddl bench kernels` cases of [`crate::kernels::shortconv`].

use crate::bench::{BenchShape, CaseFilter, KernelBench};
use crate::gpu::{DType, Gpu, Result, Tensor};
use crate::kernels::shortconv::*;

/// Benchmark cases for `ddl bench kernels` at the given [`BenchShape`](crate::bench::BenchShape): both compressors, forward and
/// backward (CC with kc = m).
pub fn cases(gpu: &Gpu, shape: &BenchShape, filter: &CaseFilter) -> Result<Vec<KernelBench>> {
    let b = *shape;
    let s = ConvShape { batch: b.b, seq: b.t, d: b.d, m: b.m, kernel: b.kernel, state_f16: false };
    let (n, d, m, k) = (s.tokens(), s.d, s.m, s.kernel);
    let (nf, dmf, ndf, kf) = (n as f64, (d * m) as f64, (n * d) as f64, k as f64);
    let state = nf * dmf;
    let shape = format!("B={} T={} d={d} m={m}", b.b, b.t);
    // The token axis with the state in f16 (`--f16-state`) too, where the adapter has SHADER_F16.
    let f16 = m == 4 && gpu.features.contains(wgpu::Features::SHADER_F16);
    let mut names = vec![
        format!("shortconv token_forward {shape} K={k}"),
        format!("shortconv token_backward {shape} K={k}"),
        format!("shortconv value_forward {shape} kc={m}"),
        format!("shortconv value_backward {shape} kc={m}"),
    ];
    if f16 {
        names.extend([
            format!("shortconv token_forward {shape} K={k} f16 state"),
            format!("shortconv token_backward {shape} K={k} f16 state"),
        ]);
    }
    if !filter.wants(&names) {
        return Ok(Vec::new());
    }
    let mut names = names.into_iter();
    let mut name = || names.next().expect("a name per case");
    let t = |label: &str, elems: usize| scratch(gpu, label, elems);
    let x = t("x", n * d * m)?;
    let kt = t("kappa", d * m * k)?;
    let kv = t("kappa_cc", d * m)?;
    let rho = t("rho", m)?;
    let a = t("a", n * d)?;
    let da = t("da", n * d)?;
    let dx = t("dx", n * d * m)?;
    let dkt = t("dkappa", d * m * k)?;
    let dkv = t("dkappa_cc", d * m)?;
    let drho = t("drho", m)?;
    let keep = [
        x.clone(),
        kt.clone(),
        kv.clone(),
        rho.clone(),
        a.clone(),
        da.clone(),
        dx.clone(),
        dkt.clone(),
        dkv.clone(),
        drho.clone(),
    ];
    let vs = ValueShape { n, d, m, kc: m };
    // The backward's views: the states, κ and dκ vary (token or CC kernel, f32 or f16 state).
    let grads = |x, kappa, dkappa| ConvGrads {
        x,
        kappa,
        rho: rho.view(),
        da: da.view(),
        dx: dx.view(),
        dkappa,
        drho: drho.view(),
    };
    let mut out = vec![
        KernelBench {
            name: name(),
            dispatches: token_forward(gpu, &s, x.view(), kt.view(), rho.view(), a.view())?,
            // Σ_s κ·X per channel, then the ρ-weighted sum over j.
            flops: 2.0 * state * kf + 2.0 * state,
            bytes: 4.0 * (state + dmf * kf + ndf),
        },
        KernelBench {
            name: name(),
            dispatches: token_backward(gpu, &s, grads(x.view(), kt.view(), dkt.view()))?,
            // dx: K taps + scale + add; P: K taps; finalize and drho are O(d·m·K).
            flops: 2.0 * state * kf + 2.0 * state + 2.0 * state * kf,
            // Read X, da, dx; write dx; read+write dkappa.
            bytes: 4.0 * (3.0 * state + ndf + 2.0 * dmf * kf),
        },
        KernelBench {
            name: name(),
            dispatches: value_forward(gpu, &vs, x.view(), kv.view(), rho.view(), a.view())?,
            flops: 2.0 * state,
            bytes: 4.0 * (state + ndf + dmf),
        },
        KernelBench {
            name: name(),
            dispatches: value_backward(gpu, &vs, grads(x.view(), kv.view(), dkv.view()))?,
            // dx += da·Ω and ∂Ω += da·X per state element.
            flops: 4.0 * state,
            bytes: 4.0 * (3.0 * state + ndf + 2.0 * dmf),
        },
    ];
    if f16 {
        let s = ConvShape { state_f16: true, ..s };
        let x16 = t("x_f16", s.state_elems())?;
        let mut f = token_forward(gpu, &s, x16.view(), kt.view(), rho.view(), a.view())?;
        let mut bk = token_backward(gpu, &s, grads(x16.view(), kt.view(), dkt.view()))?;
        f[0].scratch.push(x16.clone());
        bk[0].scratch.push(x16);
        out.push(KernelBench {
            name: name(),
            dispatches: f,
            flops: 2.0 * state * kf + 2.0 * state,
            bytes: 2.0 * state + 4.0 * (dmf * kf + ndf),
        });
        out.push(KernelBench {
            name: name(),
            dispatches: bk,
            flops: 2.0 * state * kf + 2.0 * state + 2.0 * state * kf,
            bytes: 2.0 * state + 4.0 * (2.0 * state + ndf + 2.0 * dmf * kf),
        });
    }
    for case in &mut out {
        case.dispatches[0].scratch.extend(keep.iter().cloned());
    }
    Ok(out)
}

fn scratch(gpu: &Gpu, label: &str, elems: usize) -> Result<Tensor> {
    Tensor::zeros(gpu, label, &[elems], DType::F32)
}
