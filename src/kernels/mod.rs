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
//!   [`grid_1d`](crate::gpu::grid_1d)).

pub mod adamw;
pub mod attention;
pub mod delta;
pub mod elementwise;
pub mod embedding;
pub mod expand;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod reduce;
pub mod rope;
pub mod shortconv;
pub mod swiglu;

/// A per-thread override of a launcher's per-adapter choice (tests run every form through one).
type Override<T> = std::thread::LocalKey<std::cell::Cell<Option<T>>>;

/// Runs `f` with this thread's override `key` set to `v`, then restores the previous value.
fn with_override<T: Copy + 'static, R>(key: &'static Override<T>, v: T, f: impl FnOnce() -> R) -> R {
    let old = key.with(|c| c.replace(Some(v)));
    let out = f();
    key.with(|c| c.set(old));
    out
}

/// An on/off choice of a launcher: this thread's override `key` (the `with_*` helpers of the
/// tests), else the environment variable `env` (`0` = off, anything else = on), else `default`.
fn switch(key: &'static Override<bool>, env: &str, default: bool) -> bool {
    key.with(|c| c.get()).or_else(|| std::env::var(env).ok().map(|v| v != "0")).unwrap_or(default)
}

thread_local! {
    static FORCED_SG_LOADS: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Whether kernels load values that a whole subgroup needs (the same address in every
/// invocation: weights in a loop over features, a token's scalars in a walk over tokens) once
/// per subgroup and broadcast them (`sg_code!` in `shaders.rs`, the `…g` shader variants).
/// Chosen on CPU adapters that have subgroup operations: llvmpipe runs every load as a loop over
/// its 8 SIMD lanes, uniform address or not, while a load made by lane 0 only (a constant mask)
/// plus `subgroupBroadcast` costs a fraction of that (2–3× less for four floats, docs/PERF.md).
/// GPUs broadcast uniform loads in hardware, so they keep the plain loads.
/// `DDL_SUBGROUP_LOADS=0|1` overrides the choice (still only with subgroups).
pub fn subgroup_loads(gpu: &Gpu) -> bool {
    if !gpu.features.contains(wgpu::Features::SUBGROUP) {
        return false;
    }
    switch(&FORCED_SG_LOADS, "DDL_SUBGROUP_LOADS", gpu.info.device_type == wgpu::DeviceType::Cpu)
}

/// Runs `f` with subgroup-shared loads on or off on this thread (still only where the adapter
/// has subgroups): tests compare both forms.
#[doc(hidden)]
pub fn with_subgroup_loads<R>(on: bool, f: impl FnOnce() -> R) -> R {
    with_override(&FORCED_SG_LOADS, on, f)
}

/// A kernel module's benchmark cases at the given shapes.
pub type BenchFn = fn(&Gpu, &crate::bench::BenchShape) -> Result<Vec<crate::bench::KernelBench>>;

/// Every kernel module's benchmark cases, for `ddl bench kernels`.
pub const BENCHES: &[(&str, BenchFn)] = &[
    ("matmul", matmul::bench),
    ("adamw", adamw::bench),
    ("attention", attention::bench),
    ("delta", delta::bench),
    ("elementwise", elementwise::bench),
    ("embedding", embedding::bench),
    ("expand", expand::bench),
    ("loss", loss::bench),
    ("norm", norm::bench),
    ("reduce", reduce::bench),
    ("rope", rope::bench),
    ("shortconv", shortconv::bench),
    ("swiglu", swiglu::bench),
];

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
