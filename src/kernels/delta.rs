//! STUB (type-checking only; replaced by the real launcher).
#![allow(unused, clippy::all)]
use crate::bench::KernelBench;
use crate::gpu::{Dispatch, Gpu, Result, Tensor, View};

pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VAct {
    Sigmoid4,
    Sigmoid,
    Linear,
}
#[derive(Clone, Copy, Debug)]
pub struct DeltaShape {
    pub n: usize,
    pub d: usize,
    pub m: usize,
    pub k_eps: f32,
    pub v_act: VAct,
}
pub fn forward(
    _gpu: &Gpu,
    _s: &DeltaShape,
    _x: View,
    _kraw: View,
    _a: View,
    _c: View,
    _w_beta: View,
    _b_beta: View,
    _w_v: View,
    _b_v: View,
    _x_out: View,
    _k: View,
    _rnorm: View,
    _beta: View,
    _v: View,
    _delta: View,
) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn backward(
    _gpu: &Gpu,
    _s: &DeltaShape,
    _g: View,
    _x: View,
    _k: View,
    _rnorm: View,
    _beta: View,
    _v: View,
    _delta: View,
    _a: View,
    _c: View,
    _w_beta: View,
    _w_v: View,
    _dx: View,
    _dkraw: View,
    _da: View,
    _dc: View,
    _dw_beta: View,
    _db_beta: View,
    _dw_v: View,
    _db_v: View,
    _accumulate_da: bool,
) -> Result<Vec<Dispatch>> {
    todo!()
}
