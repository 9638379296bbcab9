//! Causal multi-head attention, flash-attention style (`shaders/attention.wgsl`): spec 3.1 steps
//! 4–5 and the attention backward of 11.5.
//!
//! The inputs are the already RoPE'd and QK-normed queries q̂ and keys k̂, and the values ν:
//! `out_i = Σ_τ softmax_τ(q̂_i·k̂_τ·scale) ν_τ` over the keys query i sees. Nothing of size T×T is
//! ever stored: the forward streams 16-key tiles through workgroup memory with an online softmax
//! (running max and sum in f32) and saves the per-query log-sum-exp; the backward recomputes the
//! probabilities from it. Every kernel uses 64 invocations and ≤ 16 KiB of workgroup memory;
//! head dims above 64 are processed in 64-wide chunks (one workgroup per chunk of the output,
//! the scores recomputed per chunk), so any head_dim ≥ 1 works, h ≤ 64 being the fast case.
//! Deterministic: fixed reduction orders, no atomics.
//!
//! Per adapter ([`method`], the device's `attention` form): whole sequences ([`forward_seq`] and
//! [`backward`]) run by blocks of queries through the matmul kernels ([`Method::Blocked`]: 256 on
//! GPUs, 64 on CPU adapters), over the whole causal score matrix through them
//! ([`Method::Causal`]), or through these tiled kernels ([`Method::Tiled`]); decoding steps run
//! the tiled kernel, or on CPU adapters (≤ 4 queries, head dims ≤ 64) a row kernel
//! (`attn_fwd_rows`); every form is tested against float64 on any adapter.
//!
//! Layouts (row-major, f32):
//! - `q`, `out`, `dout`, `dq`: `[batch, q_len, heads, head_dim]`
//! - `k`, `v`, `dk`, `dv`: `[batch, kv_stride, heads, head_dim]`
//! - `lse`: `[batch, heads, q_len]`, natural log of Σ_τ exp(scores) (scaled scores)
//!
//! Query i sees key τ iff `τ < kv_len` and `τ ≤ q_pos0 + i`. Training: `q_len = kv_len =
//! kv_stride = T`, `q_pos0 = 0`. Decoding with a KV cache of capacity `kv_stride`: `q_len` new
//! tokens, `kv_len` keys written so far (the new ones included), `q_pos0 = kv_len − q_len`;
//! [`set_kv`] moves bound forward dispatches to the next step without rebinding. Cache rows
//! `≥ kv_len` are never read (they may hold anything).

use crate::gpu::{DType, Dispatch, Gpu, GpuError, Result, Tensor, View, WG_1D, grid_1d};
use crate::kernels::matmul::{CAUSAL_GRANULE, Causal, Matmul, MatmulElem, Operand};

mod blocked;
pub use blocked::*;

/// Sizes of one attention call (see the module doc for the layouts and the mask).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnShape {
    pub batch: usize,
    pub heads: usize,
    pub head_dim: usize,
    /// Queries per sequence.
    pub q_len: usize,
    /// Valid keys per sequence.
    pub kv_len: usize,
    /// Rows per sequence in the k/v buffers (≥ kv_len; a KV cache's capacity).
    pub kv_stride: usize,
    /// Absolute position of query 0; query i sees keys τ ≤ q_pos0 + i (and τ < kv_len).
    pub q_pos0: usize,
    /// The blocked form's products take f16 operands (`--precision f16`; accumulation, the
    /// softmax and the statistics stay f32). The tiled kernels ignore it (always f32).
    pub half: bool,
}

impl AttnShape {
    /// The training shape: T queries over the same T keys, causal.
    pub fn training(batch: usize, heads: usize, head_dim: usize, t: usize) -> Self {
        AttnShape { batch, heads, head_dim, q_len: t, kv_len: t, kv_stride: t, q_pos0: 0, half: false }
    }

    /// A decoding step: `q_len` new tokens whose keys are the last of `kv_len` cached ones, in a
    /// cache of `kv_stride` rows per sequence.
    pub fn decode(batch: usize, heads: usize, head_dim: usize, q_len: usize, kv_len: usize, kv_stride: usize) -> Self {
        AttnShape {
            batch,
            heads,
            head_dim,
            q_len,
            kv_len,
            kv_stride,
            q_pos0: kv_len.saturating_sub(q_len),
            half: false,
        }
    }

    /// Elements of q / out / dout / dq.
    pub fn q_elems(&self) -> usize {
        self.batch * self.q_len * self.heads * self.head_dim
    }

    /// Elements of k / v / dk / dv.
    pub fn kv_elems(&self) -> usize {
        self.batch * self.kv_stride * self.heads * self.head_dim
    }

    /// Elements of lse.
    pub fn lse_elems(&self) -> usize {
        self.batch * self.heads * self.q_len
    }

    /// Number of (query, key) pairs that are not masked, over all sequences and heads.
    pub fn visible_pairs(&self) -> f64 {
        let per: usize = (0..self.q_len).map(|i| (self.q_pos0 + i + 1).min(self.kv_len)).sum();
        (per * self.batch * self.heads) as f64
    }

    fn check(&self, what: &str) -> Result<()> {
        let bad = |m: String| Err(GpuError::Shape(format!("attention {what}: {m} ({self:?})")));
        if self.batch == 0 || self.heads == 0 || self.head_dim == 0 || self.q_len == 0 || self.kv_len == 0 {
            return bad("batch, heads, head_dim, q_len and kv_len must all be at least 1".into());
        }
        if self.kv_stride < self.kv_len {
            return bad(format!("kv_stride {} is smaller than kv_len {}", self.kv_stride, self.kv_len));
        }
        let big = self.q_elems().max(self.kv_elems()) as u64;
        if big > u32::MAX as u64 || self.q_pos0 as u64 + self.q_len as u64 > u32::MAX as u64 {
            return bad("tensors must have fewer than 2^32 elements".into());
        }
        let groups =
            (self.batch * self.heads * self.chunks()) as u64 * self.q_len.max(self.kv_stride).div_ceil(16) as u64;
        if groups > u32::MAX as u64 {
            return bad("more than 2^32 workgroups".into());
        }
        Ok(())
    }

    fn chunks(&self) -> usize {
        self.head_dim.div_ceil(DC)
    }
}

/// The tensors of one attention call: the queries, keys and values read, and the forward's
/// outputs `out` and `lse` (the backward reads them); layouts in the module doc.
#[derive(Clone, Copy)]
pub struct AttnIo<'a> {
    pub q: View<'a>,
    pub k: View<'a>,
    pub v: View<'a>,
    pub out: View<'a>,
    pub lse: View<'a>,
}

/// The backward's gradients: `dout`, the gradient of `out` (read), and `dq`, `dk`, `dv`
/// (written).
#[derive(Clone, Copy)]
pub struct AttnGrads<'a> {
    pub dout: View<'a>,
    pub dq: View<'a>,
    pub dk: View<'a>,
    pub dv: View<'a>,
}

/// Head-dim chunk of the shader (the outputs of one workgroup).
const DC: usize = 64;
/// Queries per workgroup of the forward (`F_BQ` in the shader) and of the dq pass (`Q_BQ`).
const F_BQ: usize = 16;
const Q_BQ: usize = 16;
/// Keys per workgroup of the dk/dv pass (`KV_BK`).
const KV_BK: usize = 16;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    batch: u32,
    heads: u32,
    hd: u32,
    q_len: u32,
    kv_len: u32,
    kv_stride: u32,
    q_pos0: u32,
    nch: u32,
    nblk: u32,
    total: u32,
    scale: f32,
    _pad: u32,
}

fn params(s: &AttnShape, scale: f32, nblk: usize, total: usize) -> Params {
    Params {
        batch: s.batch as u32,
        heads: s.heads as u32,
        hd: s.head_dim as u32,
        q_len: s.q_len as u32,
        kv_len: s.kv_len as u32,
        kv_stride: s.kv_stride as u32,
        q_pos0: s.q_pos0 as u32,
        nch: s.chunks() as u32,
        nblk: nblk as u32,
        total: total as u32,
        scale,
        _pad: 0,
    }
}

fn need(what: &str, name: &str, v: &View, n: usize, layout: &str) -> Result<()> {
    super::need(&format!("attention {what}"), name, layout, v, n)
}

/// Shape and view checks of a forward call (`out` and `lse` as the forward writes them).
fn check_forward(w: &str, s: &AttnShape, views: [&View; 5]) -> Result<()> {
    s.check(w)?;
    let ql = "[batch, q_len, heads, head_dim]";
    let kl = "[batch, kv_stride, heads, head_dim]";
    let [q, k, v, out, lse] = views;
    need(w, "q", q, s.q_elems(), ql)?;
    need(w, "k", k, s.kv_elems(), kl)?;
    need(w, "v", v, s.kv_elems(), kl)?;
    need(w, "out", out, s.q_elems(), ql)?;
    need(w, "lse", lse, s.lse_elems(), "[batch, heads, q_len]")
}

/// [`check_forward`] plus the gradient views of a backward call.
fn check_backward(s: &AttnShape, fwd: [&View; 5], grads: [&View; 4]) -> Result<()> {
    let w = "backward";
    check_forward(w, s, fwd)?;
    let ql = "[batch, q_len, heads, head_dim]";
    let kl = "[batch, kv_stride, heads, head_dim]";
    let [dout, dq, dk, dv] = grads;
    need(w, "dout", dout, s.q_elems(), ql)?;
    need(w, "dq", dq, s.q_elems(), ql)?;
    need(w, "dk", dk, s.kv_elems(), kl)?;
    need(w, "dv", dv, s.kv_elems(), kl)
}

/// Queries up to which [`forward`] uses the row kernel on CPU adapters (decoding steps).
pub const ROWS_KERNEL_MAX_QUERIES: usize = 4;

/// Whether [`forward`] runs `attn_fwd_rows` (one invocation per query row, no workgroup memory):
/// on adapters with the `attn_rows` form (CPU adapters), for a few queries (decoding) and head
/// dims ≤ 64. Else the tiled flash kernel.
fn rows_kernel(gpu: &Gpu, s: &AttnShape) -> bool {
    gpu.forms.attention_rows && s.q_len <= ROWS_KERNEL_MAX_QUERIES && s.head_dim <= DC
}

/// Forward work: (blocks, workgroups). The tiled kernel: blocks of F_BQ queries × head-dim chunks,
/// per (batch, head); the row kernel: one invocation per (batch, query, head) row.
fn forward_work(gpu: &Gpu, s: &AttnShape) -> (usize, usize) {
    if rows_kernel(gpu, s) {
        let rows = s.batch * s.q_len * s.heads;
        return (1, rows);
    }
    let nblk = s.q_len.div_ceil(F_BQ);
    (nblk, s.batch * s.heads * nblk * s.chunks())
}

/// Rows up to which the row kernel splits each row's keys over a workgroup of 8 invocations
/// (`attn_fwd_split4`): a decoding step's few rows would otherwise all run in one SIMD group on one
/// worker thread.
pub const SPLIT_ROWS_MAX: usize = 32;

/// Whether [`forward`] runs `attn_fwd_split4`: the row kernel's case with vec4 rows (head dim a
/// multiple of 4) and at most [`SPLIT_ROWS_MAX`] rows.
fn split_kernel(gpu: &Gpu, s: &AttnShape) -> bool {
    rows_kernel(gpu, s) && s.head_dim.is_multiple_of(4) && s.batch * s.q_len * s.heads <= SPLIT_ROWS_MAX
}

/// The grid of [`forward`]: one workgroup per work item (tiled), 64 rows per workgroup (row
/// kernel) or one row per workgroup (split row kernel).
fn fwd_groups(gpu: &Gpu, s: &AttnShape, total: usize) -> [u32; 3] {
    let per = if rows_kernel(gpu, s) && !split_kernel(gpu, s) { 64 } else { 1 };
    grid_1d(total as u64, per, gpu.limits.max_compute_workgroups_per_dimension)
}

fn groups(gpu: &Gpu, total: usize) -> [u32; 3] {
    grid_1d(total as u64, 1, gpu.limits.max_compute_workgroups_per_dimension)
}

/// `out = softmax(q·kᵀ·scale, causal)·v` and the per-query log-sum-exp `lse`. One dispatch; the
/// workgroup count depends only on batch, heads, q_len (and head_dim), so [`set_kv`] can move it
/// to another kv_len / q_pos0.
pub fn forward(gpu: &Gpu, s: &AttnShape, scale: f32, io: AttnIo<'_>) -> Result<Vec<Dispatch>> {
    let AttnIo { q, k, v, out, lse } = io;
    check_forward("forward", s, [&q, &k, &v, &out, &lse])?;
    let (nblk, total) = forward_work(gpu, s);
    let p = params(s, scale, nblk, total);
    let rows = rows_kernel(gpu, s);
    // The row kernel with vec4 rows: head dim a multiple of 4, every view on a vec4 boundary.
    let rows4 = rows && s.head_dim.is_multiple_of(4) && [&q, &k, &v, &out].iter().all(|x| x.offset.is_multiple_of(16));
    if split_kernel(gpu, s) && !rows4 {
        // (Unreachable for bindable views: they start on the adapter's storage offset alignment.)
        return Err(GpuError::Shape(
            "attention forward: the split row kernel needs q, k, v, out on 16-byte boundaries".into(),
        ));
    }
    let d = if rows4 {
        let entry = if split_kernel(gpu, s) { "attn_fwd_split4" } else { "attn_fwd_rows4" };
        gpu.kernel("attention", None, entry)?.dispatch(
            gpu,
            Some(bytemuck::bytes_of(&p)),
            &[("q4", q.vec4s()), ("k4", k.vec4s()), ("v4", v.vec4s()), ("out4", out.vec4s()), ("lse", lse)],
            fwd_groups(gpu, s, total),
        )?
    } else {
        gpu.kernel("attention", None, if rows { "attn_fwd_rows" } else { "attn_fwd" })?.dispatch(
            gpu,
            Some(bytemuck::bytes_of(&p)),
            &[("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)],
            fwd_groups(gpu, s, total),
        )?
    };
    Ok(vec![d])
}

/// Whether `d` is a dispatch of [`forward`] (any of its entry points), which [`set_kv`] can move.
pub fn is_forward(d: &Dispatch) -> bool {
    ["::attn_fwd", "::attn_fwd_rows", "::attn_fwd_rows4", "::attn_fwd_split4"]
        .iter()
        .any(|e| d.kernel.name.ends_with(e))
}

/// Rewrites the parameters of [`forward`]'s dispatches for a new `kv_len` / `q_pos0` (and
/// `scale`). batch, heads, head_dim, q_len and kv_stride must be those the dispatches were bound
/// with (the buffers are the same). Takes effect for submits after this call.
pub fn set_kv(gpu: &Gpu, ds: &[Dispatch], s: &AttnShape, scale: f32) -> Result<()> {
    s.check("set_kv")?;
    let (nblk, total) = forward_work(gpu, s);
    let [d] = ds else {
        return Err(GpuError::Shape(format!(
            "attention set_kv: expected the one dispatch of attention::forward, got {}",
            ds.len()
        )));
    };
    if !is_forward(d) {
        return Err(GpuError::Shape(format!(
            "attention set_kv: {} is not an attention forward dispatch",
            d.kernel.name
        )));
    }
    if d.workgroups != fwd_groups(gpu, s, total) {
        return Err(GpuError::Shape(format!(
            "attention set_kv: the dispatch was bound for another batch/heads/head_dim/q_len \
             ({:?} workgroups, {s:?} needs {:?})",
            d.workgroups,
            fwd_groups(gpu, s, total)
        )));
    }
    let p = params(s, scale, nblk, total);
    d.set_params(gpu, bytemuck::bytes_of(&p));
    Ok(())
}

/// Gradients of [`forward`] (or [`forward_seq`]): `dq`, `dk`, `dv` are written (not accumulated);
/// rows of dk/dv at `τ ≥ kv_len` (cache padding) get zeros. `out` and `lse` are the forward's
/// outputs, `dout` the gradient of `out`. Works for every shape the forward accepts (training:
/// q_pos0 = 0, q_len = kv_len), by the adapter's [`method`]: the blocked method where it is chosen
/// and the shape allows it (every key seen by some query, no cache padding), else the tiled
/// kernels.
pub fn backward(gpu: &Gpu, s: &AttnShape, scale: f32, io: AttnIo<'_>, g: AttnGrads<'_>) -> Result<Vec<Dispatch>> {
    let AttnIo { q, k, v, out, lse } = io;
    let AttnGrads { dout, dq, dk, dv } = g;
    let rows = match method(gpu) {
        Method::Tiled => None,
        Method::Blocked(rows) => Some(rows),
        Method::Causal if causal_fits(gpu, s, &[&q, &k, &v, &dout, &dq, &dk, &dv]) => {
            check_backward(s, [&q, &k, &v, &out, &lse], [&dout, &dq, &dk, &dv])?;
            return backward_blocked(gpu, s, scale, Blocks::Causal, io, g);
        }
        Method::Causal => Some(default_block_rows(gpu)),
    };
    if let Some(rows) = rows
        && s.kv_stride == s.kv_len
        && s.q_pos0 + s.q_len >= s.kv_len
    {
        check_backward(s, [&q, &k, &v, &out, &lse], [&dout, &dq, &dk, &dv])?;
        if let Some(nq) = block_rows(gpu, s, rows) {
            return backward_blocked(gpu, s, scale, Blocks::Of(nq), io, g);
        }
    }
    backward_tiled(gpu, s, scale, io, g)
}

/// The tiled backward: three dispatches: delta = rowwise dout·out into a `[batch, heads, q_len]`
/// scratch, then dq (loop over keys per query block) and dk/dv (loop over queries per key block).
pub fn backward_tiled(gpu: &Gpu, s: &AttnShape, scale: f32, io: AttnIo<'_>, g: AttnGrads<'_>) -> Result<Vec<Dispatch>> {
    let AttnIo { q, k, v, out, lse } = io;
    let AttnGrads { dout, dq, dk, dv } = g;
    check_backward(s, [&q, &k, &v, &out, &lse], [&dout, &dq, &dk, &dv])?;

    let delta = Tensor::zeros(gpu, "attention.delta", &[s.batch, s.heads, s.q_len], DType::F32)?;
    let max = gpu.limits.max_compute_workgroups_per_dimension;

    let rows = s.batch * s.q_len * s.heads;
    let p_d = params(s, scale, 1, rows);
    let mut d_delta = gpu.kernel("attention", None, "attn_bwd_d")?.dispatch(
        gpu,
        Some(bytemuck::bytes_of(&p_d)),
        &[("o_saved", out), ("dout", dout), ("delta", delta.view())],
        grid_1d(rows as u64, WG_1D, max),
    )?;

    let nq = s.q_len.div_ceil(Q_BQ);
    let total_q = s.batch * s.heads * nq * s.chunks();
    let p_q = params(s, scale, nq, total_q);
    let mut d_dq = gpu.kernel("attention", None, "attn_bwd_dq")?.dispatch(
        gpu,
        Some(bytemuck::bytes_of(&p_q)),
        &[("q", q), ("k", k), ("v", v), ("lse_saved", lse), ("dout", dout), ("delta_saved", delta.view()), ("dq", dq)],
        groups(gpu, total_q),
    )?;

    let nk = s.kv_stride.div_ceil(KV_BK);
    let total_k = s.batch * s.heads * nk * s.chunks();
    let p_k = params(s, scale, nk, total_k);
    let mut d_dkdv = gpu.kernel("attention", None, "attn_bwd_dkdv")?.dispatch(
        gpu,
        Some(bytemuck::bytes_of(&p_k)),
        &[
            ("q", q),
            ("k", k),
            ("v", v),
            ("lse_saved", lse),
            ("dout", dout),
            ("delta_saved", delta.view()),
            ("dk", dk),
            ("dv", dv),
        ],
        groups(gpu, total_k),
    )?;
    d_delta.scratch.push(delta.clone());
    d_dq.scratch.push(delta.clone());
    d_dkdv.scratch.push(delta);
    Ok(vec![d_delta, d_dq, d_dkdv])
}

/// FLOPs of the forward: two products (q·kᵀ, P·v) over the visible (query, key) pairs, which is
/// the causal half 2·2·B·H·T²·h/2 for training (up to the diagonal).
pub fn forward_flops(s: &AttnShape) -> f64 {
    2.0 * 2.0 * s.visible_pairs() * s.head_dim as f64
}

/// FLOPs of the backward: five products over the visible pairs (q·kᵀ recomputed, dout·vᵀ,
/// dS·k, dSᵀ·q, Pᵀ·dout), the usual flash-attention count (2.5× the forward).
pub fn backward_flops(s: &AttnShape) -> f64 {
    2.0 * 5.0 * s.visible_pairs() * s.head_dim as f64
}

/// Minimum bytes of the forward: read q, k, v (valid rows), write out and lse.
pub fn forward_bytes(s: &AttnShape) -> f64 {
    let kv = s.batch * s.kv_len * s.heads * s.head_dim;
    4.0 * (2 * s.q_elems() + 2 * kv + s.lse_elems()) as f64
}

/// Minimum bytes of the backward: read q, k, v, out, dout, lse; write dq, dk, dv.
pub fn backward_bytes(s: &AttnShape) -> f64 {
    let kv = s.batch * s.kv_stride * s.heads * s.head_dim;
    4.0 * (4 * s.q_elems() + 4 * kv + s.lse_elems()) as f64
}
