//! STUB (type-checking only; replaced by the real launcher).
#![allow(unused, clippy::all)]
use crate::bench::KernelBench;
use crate::gpu::{Dispatch, Gpu, Result, Tensor, View};

pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}

pub fn forward(
    _gpu: &Gpu,
    _tokens: View,
    _table: View,
    _out: View,
    _n: usize,
    _d: usize,
    _vocab: usize,
) -> Result<Vec<Dispatch>> {
    todo!()
}
pub fn index_len(_n: usize) -> usize {
    todo!()
}
pub fn build_index(_tokens: &[i32], _vocab: usize) -> Result<Vec<u32>> {
    todo!()
}
pub fn backward(
    _gpu: &Gpu,
    _index: View,
    _dout: View,
    _dtable: View,
    _n: usize,
    _d: usize,
    _vocab: usize,
) -> Result<Vec<Dispatch>> {
    todo!()
}
