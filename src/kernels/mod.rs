//! One launcher module per shader: typed arguments, shape checks, dispatch sizes.

pub mod matmul;

use crate::gpu::{Dispatch, Gpu, GpuError, Result, Tensor, WG_1D, grid_1d};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FillParams {
    n: u32,
    offset: u32,
    bits: u32,
    _pad: u32,
}

/// Fills elements `[offset, offset + n)` of an f32 (or any 4-byte) tensor with `value`.
pub fn fill(gpu: &Gpu, t: &Tensor, offset: usize, n: usize, value: f32) -> Result<Dispatch> {
    if offset + n > t.len() {
        return Err(GpuError::Shape(format!(
            "fill of {n} elements at {offset} overruns tensor '{}' of {} elements",
            t.label,
            t.len()
        )));
    }
    let k = gpu.kernel("fill", None, "fill")?;
    let p = FillParams {
        n: n as u32,
        offset: offset as u32,
        bits: value.to_bits(),
        _pad: 0,
    };
    k.dispatch(
        gpu,
        Some(bytemuck::bytes_of(&p)),
        &[("out", t.view())],
        grid_1d(
            n as u64,
            WG_1D,
            gpu.limits.max_compute_workgroups_per_dimension,
        ),
    )
}

/// Overwrites a whole tensor with NaN and waits: tests poison outputs so that an element a
/// kernel forgets to write cannot pass as a stale correct value.
pub fn poison(gpu: &Gpu, t: &Tensor) -> Result<()> {
    let d = fill(gpu, t, 0, t.len(), f32::NAN)?;
    gpu.run(&[&d])
}
