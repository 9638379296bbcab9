//! STUB (type-checking only; replaced by the real launcher).
#![allow(unused, clippy::all)]
use crate::bench::KernelBench;
use crate::gpu::{Dispatch, Gpu, Result, Tensor, View};

pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}

#[derive(Clone, Copy, Debug)]
pub struct AdamWConfig {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    pub grad_clip: f32,
    pub clip_eps: f32,
    pub step: u32,
}
pub fn step(
    _gpu: &Gpu,
    _params: &Tensor,
    _grads: &Tensor,
    _m: &Tensor,
    _v: &Tensor,
    _decay_mask: View,
    _norm_sq: View,
    _n: usize,
    _cfg: &AdamWConfig,
) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn set_step(_gpu: &Gpu, _ds: &[Dispatch], _cfg: &AdamWConfig) -> Result<()> {
    todo!()
}
pub fn decay_mask(_n: usize, _decayed: &[(usize, usize)]) -> Vec<u32> {
    todo!()
}
