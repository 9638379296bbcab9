//! AdamW with global-norm gradient clipping (`shaders/adamw.wgsl`), over the flat parameter
//! buffer and its gradient and moment buffers (same layout, every tensor aligned to 64
//! elements).
//!
//! The update is the golden README's (section 4) and `torch.optim.AdamW`'s: decoupled decay
//! applied first, bias corrections computed on the host in f64. The clipping factor
//! `min(1, grad_clip / (sqrt(norm_sq) + clip_eps))` is computed on the GPU from the Σ g² that
//! [`sum_squares`](crate::kernels::reduce::sum_squares) wrote, so a training step needs no host
//! round trip. The step's dispatches are bound once; [`set_step`] rewrites their learning rate
//! and bias corrections each step.

use crate::gpu::{Dispatch, Gpu, GpuError, Result, Tensor, View, WG_1D, grid_1d};
use crate::kernels::reduce::{binding_elems, check_distinct, check_len, chunks};

/// Optimizer settings and the (1-based) step number the bias corrections use.
#[derive(Clone, Copy, Debug)]
pub struct AdamWConfig {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// Max global gradient norm; 0 = no clipping.
    pub grad_clip: f32,
    /// Added to the norm before dividing (torch's `clip_grad_norm_` uses 1e-6).
    pub clip_eps: f32,
    /// 1-based.
    pub step: u32,
    /// The factor the gradients carry (dynamic loss scaling's S; 1 = none): the update uses
    /// grads / S, and the clipping norm is that of grads / S. A power of two keeps the
    /// unscaling exact.
    pub grad_scale: f32,
}

impl AdamWConfig {
    /// The paper's optimizer settings (section 9.1: β (0.9, 0.95), ε 1e-8, weight decay 0.1,
    /// clipping at 1.0) with learning rate `lr`, at step 1.
    pub const fn paper(lr: f32) -> Self {
        AdamWConfig {
            lr,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            grad_clip: 1.0,
            clip_eps: 1e-6,
            step: 1,
            grad_scale: 1.0,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    /// The config-dependent prefix ([`CFG_FLOATS`] floats) that [`set_step`] rewrites.
    cfg: [f32; CFG_FLOATS],
    n: u32,
    _pad: [u32; 4],
}

/// step_size, bc2_sqrt, decay, beta1, beta2, 1−beta1, 1−beta2, eps, grad_clip, clip_eps,
/// inv_scale.
const CFG_FLOATS: usize = 11;

/// The uniform prefix for `cfg`: bias corrections and the decay factor computed in f64.
fn cfg_floats(cfg: &AdamWConfig) -> Result<[f32; CFG_FLOATS]> {
    if cfg.step == 0 {
        return Err(GpuError::Shape(
            "adamw: step is 1-based (the bias corrections divide by 1 − β^step), got 0".into(),
        ));
    }
    let t = cfg.step as f64;
    let (lr, b1, b2) = (cfg.lr as f64, cfg.beta1 as f64, cfg.beta2 as f64);
    let bc1 = 1.0 - b1.powf(t);
    let bc2 = 1.0 - b2.powf(t);
    if !(cfg.grad_scale.is_finite() && cfg.grad_scale > 0.0) {
        return Err(GpuError::Shape(format!("adamw: grad_scale must be finite and > 0, got {}", cfg.grad_scale)));
    }
    if !(bc1 > 0.0 && bc2 > 0.0) {
        return Err(GpuError::Shape(format!(
            "adamw: betas must be in [0, 1), got beta1 {} beta2 {}",
            cfg.beta1, cfg.beta2
        )));
    }
    Ok([
        (lr / bc1) as f32,
        bc2.sqrt() as f32,
        (1.0 - lr * cfg.weight_decay as f64) as f32,
        cfg.beta1,
        cfg.beta2,
        (1.0 - b1) as f32,
        (1.0 - b2) as f32,
        cfg.eps,
        cfg.grad_clip,
        cfg.clip_eps,
        (1.0 / cfg.grad_scale as f64) as f32,
    ])
}

/// The buffers one AdamW step reads and writes: `params` (updated in place), `grads` (read), the
/// moments `m` and `v` (updated), `decay_mask` (u32 `[ceil(n/64)]`: element e is decayed iff
/// `decay_mask[e / 64] != 0`, see [`decay_mask`]) and `norm_sq[0]` = Σ grads² (read on the GPU for
/// the clipping factor).
#[derive(Clone, Copy)]
pub struct AdamWBufs<'a> {
    pub params: &'a Tensor,
    pub grads: &'a Tensor,
    pub m: &'a Tensor,
    pub v: &'a Tensor,
    pub decay_mask: View<'a>,
    pub norm_sq: View<'a>,
}

/// One AdamW step over the first `n` elements of the buffers `b`. Buffers larger than one storage
/// binding are bound in chunks.
pub fn step(gpu: &Gpu, b: &AdamWBufs, n: usize, cfg: &AdamWConfig) -> Result<Vec<Dispatch>> {
    // The mask's sub-view starts at chunk_start / 64 words: chunk starts are multiples of
    // 16 · alignment elements so that both it and the f32 sub-views are aligned.
    let quantum = 16 * gpu.limits.min_storage_buffer_offset_alignment as usize;
    step_chunked(gpu, b, n, cfg, binding_elems(gpu, quantum))
}

/// [`step`] with at most `max_chunk` elements per binding (rounded down to a multiple of
/// 16 · `min_storage_buffer_offset_alignment`, 4096 on most adapters); for testing the chunking.
#[doc(hidden)]
pub fn step_chunked(gpu: &Gpu, b: &AdamWBufs, n: usize, cfg: &AdamWConfig, max_chunk: usize) -> Result<Vec<Dispatch>> {
    const OP: &str = "adamw";
    let AdamWBufs { params, grads, m, v, decay_mask, norm_sq } = *b;
    let cfg = cfg_floats(cfg)?;
    for (name, t) in [("params", params), ("grads", grads), ("m", m), ("v", v)] {
        if t.len() < n {
            return Err(GpuError::Shape(format!("{OP}: '{name}' needs {n} elements (n), the tensor has {}", t.len())));
        }
    }
    check_len(OP, "decay_mask", &decay_mask, n.div_ceil(64), "ceil(n / 64) words")?;
    check_len(OP, "norm_sq", &norm_sq, 1, "one scalar")?;
    check_distinct(
        OP,
        &[("params", &params.buffer), ("m", &m.buffer), ("v", &v.buffer)],
        &[("grads", &grads.buffer), ("decay_mask", decay_mask.buffer), ("norm_sq", norm_sq.buffer)],
    )?;
    let quantum = 16 * gpu.limits.min_storage_buffer_offset_alignment as usize;
    let max_chunk = (max_chunk / quantum * quantum).max(quantum).min(binding_elems(gpu, quantum));
    let maxdim = gpu.limits.max_compute_workgroups_per_dimension;
    chunks(n, max_chunk)
        .into_iter()
        .map(|(start, len)| {
            let p = Params { cfg, n: len as u32, _pad: [0; 4] };
            let (mask, norm) = (decay_mask.sub(start / 64, len.div_ceil(64)), norm_sq.sub(0, 1));
            let (pv, gv, mv, vv) = (
                params.view().sub(start, len),
                grads.view().sub(start, len),
                m.view().sub(start, len),
                v.view().sub(start, len),
            );
            if vec4(gpu, len) {
                // Four elements per invocation (chunk starts are multiples of 16·alignment).
                gpu.kernel("adamw", None, "adamw_step4")?.dispatch(
                    gpu,
                    Some(bytemuck::bytes_of(&p)),
                    &[
                        ("param4", pv),
                        ("grad4", gv),
                        ("exp_avg4", mv),
                        ("exp_avg_sq4", vv),
                        ("decay_mask", mask),
                        ("norm_sq", norm),
                    ],
                    grid_1d((len / 4) as u64, WG_1D, maxdim),
                )
            } else {
                gpu.kernel("adamw", None, "adamw_step")?.dispatch(
                    gpu,
                    Some(bytemuck::bytes_of(&p)),
                    &[
                        ("param", pv),
                        ("grad", gv),
                        ("exp_avg", mv),
                        ("exp_avg_sq", vv),
                        ("decay_mask", mask),
                        ("norm_sq", norm),
                    ],
                    grid_1d(len as u64, WG_1D, maxdim),
                )
            }
        })
        .collect()
}

/// Whether a chunk of `len` elements runs `adamw_step4` (four elements per invocation): the
/// device's `adamw_vec4` form and `len` a multiple of 4 (the model's layout pads every tensor to
/// 64). The same bits as the scalar form.
pub fn vec4(gpu: &Gpu, len: usize) -> bool {
    len.is_multiple_of(4) && gpu.forms.adamw_vec4
}

/// Rewrites the learning rate, step and bias corrections (the whole config) in the uniform
/// parameters of dispatches made by [`step`]: no rebinding, no allocation. Ordered before the
/// next submit.
pub fn set_step(gpu: &Gpu, ds: &[Dispatch], cfg: &AdamWConfig) -> Result<()> {
    let floats = cfg_floats(cfg)?;
    for d in ds {
        if !d.kernel.name.ends_with("::adamw_step") && !d.kernel.name.ends_with("::adamw_step4") {
            return Err(GpuError::Shape(format!(
                "adamw::set_step: dispatch '{}' was not made by adamw::step",
                d.kernel.name
            )));
        }
    }
    for d in ds {
        d.set_params(gpu, bytemuck::cast_slice(&floats));
    }
    Ok(())
}

/// The decay mask for a flat buffer of `n` elements: word `e / 64` is 1 for every element `e`
/// in one of the `(offset, len)` ranges, 0 elsewhere. Offsets must be multiples of 64 (the flat
/// parameter layout aligns every tensor to 64 elements) and ranges must lie inside `n`.
pub fn decay_mask(n: usize, decayed: &[(usize, usize)]) -> Vec<u32> {
    let mut mask = vec![0u32; n.div_ceil(64)];
    for &(off, len) in decayed {
        assert!(off % 64 == 0, "decay_mask: range at offset {off} is not aligned to 64 elements");
        assert!(off + len <= n, "decay_mask: range [{off}, {}) overruns the {n} elements", off + len);
        for w in &mut mask[off / 64..(off + len).div_ceil(64)] {
            *w = 1;
        }
    }
    mask
}
