//! STUB (type-checking only; replaced by the real launcher).
#![allow(unused, clippy::all)]
use crate::bench::KernelBench;
use crate::gpu::{Dispatch, Gpu, Result, Tensor, View};

pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}

pub fn add(_gpu: &Gpu, _x: View, _y: View, _n: usize) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn scale(_gpu: &Gpu, _x: View, _alpha: f32, _n: usize) -> Result<Vec<Dispatch>> {
    todo!()
}
