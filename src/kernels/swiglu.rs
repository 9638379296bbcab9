//! SwiGLU gating (`shaders/swiglu.wgsl`, spec 3.2 and 11.5): `out = silu(gate) ⊙ up` over `n`
//! elements, and its backward. The projections around it are matmuls.
//!
//! The sigmoid is evaluated from `exp(−|g|)`, so both σ(g) and 1 − σ(g) are accurate and
//! finite for any finite gate value (no overflow for large |g|).

use crate::gpu::{Dispatch, Gpu, GpuError, Result, View, WG_1D, grid_1d};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    _pad: [u32; 3],
}

fn check(what: &str, n: usize, views: &[(&str, &View)]) -> Result<Params> {
    if n == 0 {
        return Err(GpuError::Shape(format!("{what}: n must be at least 1, got 0")));
    }
    if n > (u32::MAX / 2) as usize {
        return Err(GpuError::Shape(format!(
            "{what}: n = {n} elements exceeds the 2^31 limit of one dispatch; split it"
        )));
    }
    for (name, v) in views {
        super::need(what, name, "", v, n)?;
    }
    Ok(Params { n: n as u32, _pad: [0; 3] })
}

/// Whether the vec4 entry points (`*4`, four elements per invocation) apply: the device's
/// `swiglu_vec4` form, n a multiple of 4 and every view starting on a vec4.
pub fn vec4(gpu: &Gpu, n: usize, views: &[&View]) -> bool {
    gpu.forms.swiglu_vec4 && n.is_multiple_of(4) && views.iter().all(|v| v.offset.is_multiple_of(16))
}

/// `out = silu(gate) ⊙ up` over `n` elements (`gate`, `up`, `out`: `[n]`).
pub fn forward(gpu: &Gpu, gate: View, up: View, out: View, n: usize) -> Result<Vec<Dispatch>> {
    let p = check("swiglu forward", n, &[("gate", &gate), ("up", &up), ("out", &out)])?;
    if vec4(gpu, n, &[&gate, &up, &out]) {
        let k = gpu.kernel("swiglu", None, "swiglu_forward4")?;
        let wg = grid_1d((n / 4) as u64, WG_1D, gpu.limits.max_compute_workgroups_per_dimension);
        let b = [("gate4", gate.sub(0, n)), ("up4", up.sub(0, n)), ("out4", out.sub(0, n))];
        return Ok(vec![k.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &b, wg)?]);
    }
    let k = gpu.kernel("swiglu", None, "swiglu_forward")?;
    let wg = grid_1d(n as u64, WG_1D, gpu.limits.max_compute_workgroups_per_dimension);
    Ok(vec![k.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &[("gate", gate), ("up", up), ("out", out)], wg)?])
}

/// [`forward`] with `out` stored in half precision (`--precision f16`'s SwiGLU output, which
/// only the down projection and its weight gradient read, as f16 operands): each value rounded
/// to the nearest f16 (ties to even) and packed two to a four-byte word, element 2i in the low
/// half — the f16 values those products read from [`forward`]'s f32 output. `n` a multiple of 4,
/// `gate` and `up` on a vec4, `out` (`n / 2` words) on 8 bytes.
pub fn forward_f16(gpu: &Gpu, gate: View, up: View, out: View, n: usize) -> Result<Vec<Dispatch>> {
    let what = "swiglu forward (f16 output)";
    let p = check(what, n, &[("gate", &gate), ("up", &up)])?;
    super::need(what, "out", "", &out, n / 2)?;
    if !n.is_multiple_of(4)
        || !gate.offset.is_multiple_of(16)
        || !up.offset.is_multiple_of(16)
        || !out.offset.is_multiple_of(8)
    {
        return Err(GpuError::Shape(format!(
            "{what}: n = {n} must be a multiple of 4, gate and up start on 16 bytes and out on 8 (offsets {}, {}, {})",
            gate.offset, up.offset, out.offset
        )));
    }
    let k = gpu.kernel("swiglu", None, "swiglu_forward4_h")?;
    let wg = grid_1d((n / 4) as u64, WG_1D, gpu.limits.max_compute_workgroups_per_dimension);
    let b = [("gate4", gate.sub(0, n)), ("up4", up.sub(0, n)), ("outh", out.sub(0, n / 2))];
    Ok(vec![k.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &b, wg)?])
}

/// Backward of [`forward`]: `dup = dout ⊙ silu(gate)`,
/// `dgate = dout ⊙ up ⊙ σ(gate)(1 + gate(1 − σ(gate)))`. Both are written (not accumulated).
pub fn backward(
    gpu: &Gpu,
    gate: View,
    up: View,
    dout: View,
    dgate: View,
    dup: View,
    n: usize,
) -> Result<Vec<Dispatch>> {
    let p = check(
        "swiglu backward",
        n,
        &[("gate", &gate), ("up", &up), ("dout", &dout), ("dgate", &dgate), ("dup", &dup)],
    )?;
    if vec4(gpu, n, &[&gate, &up, &dout, &dgate, &dup]) {
        let k = gpu.kernel("swiglu", None, "swiglu_backward4")?;
        let wg = grid_1d((n / 4) as u64, WG_1D, gpu.limits.max_compute_workgroups_per_dimension);
        let b = [
            ("gate4", gate.sub(0, n)),
            ("up4", up.sub(0, n)),
            ("dout4", dout.sub(0, n)),
            ("dgate4", dgate.sub(0, n)),
            ("dup4", dup.sub(0, n)),
        ];
        return Ok(vec![k.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &b, wg)?]);
    }
    let k = gpu.kernel("swiglu", None, "swiglu_backward")?;
    let wg = grid_1d(n as u64, WG_1D, gpu.limits.max_compute_workgroups_per_dimension);
    Ok(vec![k.dispatch(
        gpu,
        Some(bytemuck::bytes_of(&p)),
        &[("gate", gate), ("up", up), ("dout", dout), ("dgate", dgate), ("dup", dup)],
        wg,
    )?])
}
