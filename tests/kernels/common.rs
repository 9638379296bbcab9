//! Helpers shared by the kernel tests.

#![allow(dead_code)]

pub use ddl::testing::{Rng, assert_close, gpu};

use ddl::gpu::{DType, Gpu, Tensor};

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

/// Records and runs a launcher's dispatches, then waits.
pub fn run(gpu: &Gpu, ds: &[ddl::gpu::Dispatch]) {
    let refs: Vec<&ddl::gpu::Dispatch> = ds.iter().collect();
    gpu.run(&refs).unwrap();
}
