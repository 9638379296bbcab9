//! STUB (type-checking only; replaced by the real launcher).
#![allow(unused, clippy::all)]
use crate::bench::KernelBench;
use crate::gpu::{Dispatch, Gpu, Result, Tensor, View};

pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}

pub struct AttnShape {
    pub batch: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub q_len: usize,
    pub kv_len: usize,
    pub kv_stride: usize,
    pub q_pos0: usize,
}
pub fn forward(
    _gpu: &Gpu,
    _s: &AttnShape,
    _scale: f32,
    _q: View,
    _k: View,
    _v: View,
    _out: View,
    _lse: View,
) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn set_kv(_gpu: &Gpu, _ds: &[Dispatch], _s: &AttnShape, _scale: f32) -> Result<()> {
    todo!()
}
pub fn backward(
    _gpu: &Gpu,
    _s: &AttnShape,
    _scale: f32,
    _q: View,
    _k: View,
    _v: View,
    _out: View,
    _lse: View,
    _dout: View,
    _dq: View,
    _dk: View,
    _dv: View,
) -> Result<Vec<Dispatch>> {
    todo!()
}
