//! STUB (type-checking only; replaced by the real launcher).
#![allow(unused, clippy::all)]
use crate::bench::KernelBench;
use crate::gpu::{Dispatch, Gpu, Result, Tensor, View};

pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}

pub fn sum_squares(_gpu: &Gpu, _x: &Tensor, _n: usize, _out: View) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn col_sum(
    _gpu: &Gpu,
    _x: View,
    _out: View,
    _rows: usize,
    _cols: usize,
    _accumulate: bool,
) -> Result<Vec<Dispatch>> {
    todo!()
}
