//! Helpers shared by the kernel tests.

#![allow(dead_code)]

pub use ddl::gpu::Gpu;
pub use ddl::testing::{Rng, assert_close, gpu};

use ddl::gpu::{DType, Tensor};

/// An output tensor filled with NaN, so unwritten elements fail the comparison.
pub fn poisoned(gpu: &Gpu, label: &str, shape: &[usize]) -> Tensor {
    let t = Tensor::zeros(gpu, label, shape, DType::F32).unwrap();
    ddl::kernels::poison(gpu, &t).unwrap();
    t
}

/// Uploads f32 data as a 1-D tensor.
pub fn upload(gpu: &Gpu, label: &str, data: &[f32]) -> Tensor {
    Tensor::from_f32(gpu, label, &[data.len()], data).unwrap()
}

/// Central finite-difference check of a CPU backward: for a scalar function `f(x)` and its
/// claimed gradient `grad` at `x`, probes `probes` random coordinates and returns the worst
/// relative error |fd − grad| / max(|fd|, |grad|, floor).
pub fn fd_check(f: &mut dyn FnMut(&[f64]) -> f64, x: &[f64], grad: &[f64], probes: usize, rng: &mut Rng) -> f64 {
    let mut worst = 0.0f64;
    let mut xp = x.to_vec();
    let scale = grad.iter().fold(0.0f64, |m, g| m.max(g.abs())).max(1e-12);
    for _ in 0..probes {
        let i = rng.int(0, x.len());
        let h = 1e-6 * x[i].abs().max(1.0);
        xp[i] = x[i] + h;
        let fp = f(&xp);
        xp[i] = x[i] - h;
        let fm = f(&xp);
        xp[i] = x[i];
        let fd = (fp - fm) / (2.0 * h);
        let err = (fd - grad[i]).abs() / fd.abs().max(grad[i].abs()).max(1e-3 * scale);
        worst = worst.max(err);
    }
    worst
}

/// Downloads a tensor as f32.
pub fn read(gpu: &Gpu, t: &Tensor) -> Vec<f32> {
    t.read_f32(gpu).unwrap()
}

/// Whether two outputs are the same bits (and the same length).
pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Records and runs a launcher's dispatches, then waits.
pub fn run(gpu: &Gpu, ds: &[ddl::gpu::Dispatch]) {
    let refs: Vec<&ddl::gpu::Dispatch> = ds.iter().collect();
    gpu.run(&refs).unwrap();
}

/// Each value rounded to the nearest f16 (what an f16 state holds), back as f32.
pub fn f16_round(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect()
}

/// Every multiple of 2^-30 in (−2^-13, 2^-13): all of f16's subnormals (multiples of 2^-24
/// below 2^-14) with 63 values between each pair, so every tie between two of them (to even,
/// both signs), ±0 and the first normals. llvmpipe once compiled `round()` in the subnormal
/// rounding so that some ties went away from zero and −0 lost its sign, in some shaders only.
pub fn f16_subnormal_grid() -> Vec<f32> {
    (-(1i32 << 17) + 1..1 << 17).map(|k| k as f32 * 2f32.powi(-30)).chain([-0.0]).collect()
}

/// Values packed two f16 per four-byte element (little-endian: element 2i in the low half), the
/// layout of an f16 state buffer; uploaded with [`upload`] as raw bits.
pub fn f16_pack(v: &[f32]) -> Vec<f32> {
    assert!(v.len().is_multiple_of(2), "an f16 buffer holds pairs");
    v.chunks(2)
        .map(|p| {
            let lo = half::f16::from_f32(p[0]).to_bits() as u32;
            let hi = half::f16::from_f32(p[1]).to_bits() as u32;
            f32::from_bits(lo | hi << 16)
        })
        .collect()
}

/// The inverse of [`f16_pack`]: two f32 per four-byte element.
pub fn f16_unpack(raw: &[f32]) -> Vec<f32> {
    raw.iter()
        .flat_map(|w| {
            let b = w.to_bits();
            [half::f16::from_bits(b as u16).to_f32(), half::f16::from_bits((b >> 16) as u16).to_f32()]
        })
        .collect()
}

/// An f16 output buffer of `halves` values, every one an f16 NaN (so unwritten halves fail).
pub fn poisoned_f16(gpu: &Gpu, label: &str, halves: usize) -> Tensor {
    let nan2 = f32::from_bits(0x7e00_7e00);
    upload(gpu, label, &vec![nan2; halves.div_ceil(2)])
}

/// Whether `got` is within `tol` of `want` in L2 norm relative to the L2 norm of `scale` (the
/// same sums over absolute values): for outputs that cancel to much less than their terms, whose
/// f32 rounding is that of the terms. Callers fall back to their usual comparison (which reports
/// the details) when this is false.
pub fn within_scale(got: &[f32], want: &[f64], scale: &[f64], tol: f64) -> bool {
    let err = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).powi(2)).sum::<f64>().sqrt();
    let s = scale.iter().map(|x| x * x).sum::<f64>().sqrt();
    got.len() == want.len() && got.iter().all(|g| g.is_finite()) && err <= tol * s
}

/// Absolute values, as f64 (the inputs of a scale reference, see [`within_scale`]).
pub fn abs64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|x| x.abs() as f64).collect()
}

/// The test device, which must have SHADER_F16 (the f16-state tests fail without it rather than
/// pass without testing anything).
pub fn f16_gpu() -> std::sync::Arc<Gpu> {
    let gpu = gpu();
    assert!(
        gpu.features.contains(wgpu::Features::SHADER_F16),
        "adapter {} has no SHADER_F16, which the f16-state tests need",
        gpu.info.name
    );
    gpu
}

/// Runs `f` on a handle to the same device whose kernel forms `change` sets (every form of a
/// kernel is tested on any adapter this way).
pub fn with_forms<R>(gpu: &Gpu, change: impl FnOnce(&mut ddl::kernels::forms::Forms), f: impl FnOnce(&Gpu) -> R) -> R {
    let g = gpu.with_forms(change);
    f(&g)
}
