//! STUB (type-checking only; replaced by the real launcher).
#![allow(unused, clippy::all)]
use crate::bench::KernelBench;
use crate::gpu::{Dispatch, Gpu, Result, Tensor, View};

pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}

use crate::kernels::shortconv::ConvShape;
pub fn ec_forward(_gpu: &Gpu, _s: &ConvShape, _e: View, _ekernel: View, _x0: View) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn ec_backward(
    _gpu: &Gpu,
    _s: &ConvShape,
    _e: View,
    _ekernel: View,
    _g: View,
    _de: View,
    _dekernel: View,
) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn replicate_forward(_gpu: &Gpu, _n: usize, _d: usize, _m: usize, _e: View, _x0: View) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn replicate_backward(_gpu: &Gpu, _n: usize, _d: usize, _m: usize, _g: View, _de: View) -> Result<Vec<Dispatch>> {
    todo!()
}
