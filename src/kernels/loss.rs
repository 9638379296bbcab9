//! STUB (type-checking only; replaced by the real launcher).
#![allow(unused, clippy::all)]
use crate::bench::KernelBench;
use crate::gpu::{Dispatch, Gpu, Result, Tensor, View};

pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}

pub fn cross_entropy_forward(
    _gpu: &Gpu,
    _logits: View,
    _targets: View,
    _lse: View,
    _out: View,
    _n: usize,
    _vocab: usize,
    _label_smoothing: f32,
) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn cross_entropy_backward(
    _gpu: &Gpu,
    _logits: View,
    _targets: View,
    _lse: View,
    _out: View,
    _dlogits: View,
    _n: usize,
    _vocab: usize,
    _label_smoothing: f32,
    _scale: f32,
) -> Result<Vec<Dispatch>> {
    todo!()
}
