//! STUB (type-checking only; replaced by the real launcher).
#![allow(unused, clippy::all)]
use crate::bench::KernelBench;
use crate::gpu::{Dispatch, Gpu, Result, Tensor, View};

pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}

pub fn rmsnorm_forward(
    _gpu: &Gpu,
    _x: View,
    _gain: View,
    _y: View,
    _rstd: View,
    _rows: usize,
    _dim: usize,
    _eps: f32,
) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn rmsnorm_backward(
    _gpu: &Gpu,
    _x: View,
    _gain: View,
    _rstd: View,
    _dy: View,
    _dx: View,
    _dgain: View,
    _rows: usize,
    _dim: usize,
    _accumulate_dx: bool,
) -> Result<Vec<Dispatch>> {
    todo!()
}
