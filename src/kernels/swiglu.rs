//! STUB (type-checking only; replaced by the real launcher).
#![allow(unused, clippy::all)]
use crate::bench::KernelBench;
use crate::gpu::{Dispatch, Gpu, Result, Tensor, View};

pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}

pub fn forward(_gpu: &Gpu, _gate: View, _up: View, _out: View, _n: usize) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn backward(
    _gpu: &Gpu,
    _gate: View,
    _up: View,
    _dout: View,
    _dgate: View,
    _dup: View,
    _n: usize,
) -> Result<Vec<Dispatch>> {
    todo!()
}
