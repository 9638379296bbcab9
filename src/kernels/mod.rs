//! One launcher module per shader: typed arguments, shape checks, dispatch sizes.
//!
//! Conventions (every launcher follows them):
//! - A launcher takes the device, [`View`](crate::gpu::View)s of its buffers and the sizes, checks
//!   the shapes (an error naming the tensor and the expected vs actual size, never a panic) and
//!   returns `Vec<Dispatch>`: bound work that the caller records, in order, as often as it likes.
//!   Launchers never submit. Scratch memory a launcher needs is allocated at bind time and kept
//!   in `Dispatch::scratch`.
//! - Row-major layouts, named as in the spec: `[N, d]` with N = B·T tokens, states `[N, d, m]`.
//! - Gradients of parameters are *added* into their buffers when the doc says `+=` (shared
//!   parameters and the tied embedding receive several contributions); the caller zeroes the
//!   gradient buffer once per step.
//! - Deterministic: no float atomics; every reduction has a fixed order, so the same inputs give
//!   bit-identical outputs on the same adapter.
//! - Within one dispatch a buffer is never bound both read-only and read-write (wgpu forbids it):
//!   activations are separate tensors; parameters (read) and gradients (written) are separate
//!   flat buffers.
//! - Correct for any sizes ≥ 1 and any number of workgroups (1-D grids use
//!   [`crate::gpu::grid_1d`]).

pub mod adamw;
pub mod attention;
pub mod delta;
pub mod elementwise;
pub mod embedding;
pub mod expand;
pub mod forms;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod reduce;
pub mod rope;
pub mod shortconv;
pub mod swiglu;

/// Whether kernels load values that a whole subgroup needs (the same address in every
/// invocation: weights in a loop over features, a token's scalars in a walk over tokens) once
/// per subgroup and broadcast them (the `sg_on` part, `sg_part` in `src/shaders/mod.rs`, the `…g` shader variants): the
/// device's `subgroup_loads` form ([`forms::Forms`]; CPU adapters with subgroups, where llvmpipe
/// runs every load as a loop over its 8 SIMD lanes, uniform address or not, while a load made by
/// lane 0 only plus `subgroupBroadcast` costs a fraction of that, 2–3× less for four floats,
/// docs/PERF.md; GPUs broadcast uniform loads in hardware), and only with subgroups.
pub fn subgroup_loads(gpu: &Gpu) -> bool {
    gpu.features.contains(wgpu::Features::SUBGROUP) && gpu.forms.subgroup_loads
}

use crate::gpu::{Dispatch, Gpu, GpuError, Result, Tensor, WG_1D, grid_1d};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FillParams {
    n: u32,
    offset: u32,
    bits: u32,
    _pad: u32,
}

/// Fails unless `view` holds at least `elems` elements, with an error naming the call (`what`),
/// the tensor, its layout (`shape`, may be empty) and both sizes. The launchers' shared check.
pub(crate) fn need(what: &str, name: &str, shape: &str, view: &crate::gpu::View, elems: usize) -> Result<()> {
    if view.len() < elems {
        let shape = if shape.is_empty() { String::new() } else { format!(" {shape}") };
        return Err(GpuError::Shape(format!(
            "{what}: '{name}'{shape} needs {elems} elements, the view has {}",
            view.len()
        )));
    }
    Ok(())
}

/// Greatest common divisor (chunk and alignment arithmetic).
pub(crate) fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
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
    let p = FillParams { n: n as u32, offset: offset as u32, bits: value.to_bits(), _pad: 0 };
    k.dispatch(
        gpu,
        Some(bytemuck::bytes_of(&p)),
        &[("out", t.view())],
        grid_1d(n as u64, WG_1D, gpu.limits.max_compute_workgroups_per_dimension),
    )
}

/// Overwrites a whole tensor with NaN and waits: tests poison outputs so that an element a
/// kernel forgets to write cannot pass as a stale correct value.
pub fn poison(gpu: &Gpu, t: &Tensor) -> Result<()> {
    let d = fill(gpu, t, 0, t.len(), f32::NAN)?;
    gpu.run(&[&d])
}
