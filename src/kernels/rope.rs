//! STUB (type-checking only; replaced by the real launcher).
#![allow(unused, clippy::all)]
use crate::bench::KernelBench;
use crate::gpu::{Dispatch, Gpu, Result, Tensor, View};

pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}

pub struct RopeShape {
    pub rows: usize,
    pub seq_len: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub pos0: usize,
}
pub fn table(_gpu: &Gpu, _max_pos: usize, _head_dim: usize, _base: f64) -> Result<Tensor> {
    todo!()
}
pub fn forward(_gpu: &Gpu, _s: &RopeShape, _table: View, _x: View, _y: View) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn backward(_gpu: &Gpu, _s: &RopeShape, _table: View, _dy: View, _dx: View) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn set_pos0(_gpu: &Gpu, _ds: &[Dispatch], _s: &RopeShape) -> Result<()> {
    todo!()
}
