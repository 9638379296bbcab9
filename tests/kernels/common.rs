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
