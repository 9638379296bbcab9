//! The cases of `ddl bench kernels`, one file per kernel module: bound dispatches at a preset's
//! shapes with the FLOPs and bytes they must at least do ([`super::KernelBench`]).

pub mod adamw;
pub mod attention;
pub mod delta;
pub mod elementwise;
pub mod embedding;
pub mod expand;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod reduce;
pub mod rope;
pub mod shortconv;
pub mod swiglu;

use crate::gpu::{Gpu, Result, Tensor};

/// A tensor of `n` normal draws, its size checked against the adapter before the host data is
/// drawn (a shape past the adapter is an error, not an allocation of gigabytes that aborts).
pub(crate) fn normal(gpu: &Gpu, rng: &mut crate::testing::Rng, label: &str, n: usize) -> Result<Tensor> {
    gpu.check_buffer_size(&format!("tensor '{label}' [{n}]"), n as u64 * 4)?;
    Tensor::from_f32(gpu, label, &[n], &rng.normal(n, 1.0))
}
