//! STUB (type-checking only; replaced by the real launcher).
#![allow(unused, clippy::all)]
use crate::bench::KernelBench;
use crate::gpu::{Dispatch, Gpu, Result, Tensor, View};

pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}

#[derive(Clone, Copy, Debug)]
pub struct ConvShape {
    pub batch: usize,
    pub seq: usize,
    pub d: usize,
    pub m: usize,
    pub kernel: usize,
}
pub fn token_forward(
    _gpu: &Gpu,
    _s: &ConvShape,
    _x: View,
    _kappa: View,
    _rho: View,
    _a: View,
) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn token_backward(
    _gpu: &Gpu,
    _s: &ConvShape,
    _x: View,
    _kappa: View,
    _rho: View,
    _da: View,
    _dx: View,
    _dkappa: View,
    _drho: View,
) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn value_forward(
    _gpu: &Gpu,
    _n: usize,
    _d: usize,
    _m: usize,
    _kc: usize,
    _x: View,
    _kappa: View,
    _rho: View,
    _a: View,
) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn value_backward(
    _gpu: &Gpu,
    _n: usize,
    _d: usize,
    _m: usize,
    _kc: usize,
    _x: View,
    _kappa: View,
    _rho: View,
    _da: View,
    _dx: View,
    _dkappa: View,
    _drho: View,
) -> Result<Vec<Dispatch>> {
    todo!()
}
