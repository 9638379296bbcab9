//! The analytic memory of training a model at (B, T), without a device: it mirrors what
//! [`super::Model::program`] allocates (`super::acts`) and the scratch its launchers keep.

use crate::kernels::attention::{self, AttnShape};
use crate::kernels::shortconv::{self, ConvShape};
use crate::kernels::{delta, expand, norm};

use super::config::ModelConfig;
use super::params::Layout;

/// The analytic memory of training a model at (B, T), in bytes.
#[derive(Debug, Clone)]
pub struct MemoryPlan {
    pub params: usize,
    /// One flat buffer (parameters; gradients and each moment are the same size).
    pub param_bytes: u64,
    /// Activations kept for the backward (every tensor a training `Program` allocates).
    pub activation_bytes: u64,
    /// Gradient scratch shared by all layers (with the blocked attention's score blocks).
    pub grad_scratch_bytes: u64,
    /// The largest single tensor (name, bytes).
    pub largest: (String, u64),
}

impl MemoryPlan {
    /// The plan as `ddl info --preset` prints it for a batch of `b` × `t` tokens: the parameter
    /// count, bytes per part with the total, and the largest tensor.
    pub fn text(&self, b: usize, t: usize) -> String {
        let mib = |x: u64| x as f64 / (1024.0 * 1024.0);
        let mut s = format!("parameters: {}\nmemory plan at B {b}, T {t} (bytes):\n", self.params);
        for (name, bytes) in [
            ("parameters", self.param_bytes),
            ("gradients", self.param_bytes),
            ("AdamW moments", 2 * self.param_bytes),
            ("activations", self.activation_bytes),
            ("gradient scratch", self.grad_scratch_bytes),
            ("total", self.total()),
        ] {
            s += &format!("  {name:<18} {bytes:>14}  ({:.1} MiB)\n", mib(bytes));
        }
        s + &format!("largest single tensor: {} bytes ({})\n", self.largest.1, self.largest.0)
    }

    /// Parameters, gradients, two moments, activations and scratch.
    pub fn total(&self) -> u64 {
        4 * self.param_bytes + self.activation_bytes + self.grad_scratch_bytes
    }
}

/// Scratch the launchers of one training program keep for its backward (chunk partials of the
/// parameter sums: RMSNorm dγ, the delta write's heads, the compressors, the EC expansion).
fn launcher_scratch(c: &ModelConfig, b: usize, t: usize) -> u64 {
    let (n, l, d, m) = (b * t, c.n_layers, c.d_model, c.m());
    let var = c.variant;
    // Block norms (two per layer and the final one), QK norms (two per layer).
    let mut e = (2 * l + 1) * norm::backward_scratch_elems(n, d)
        + 2 * l * norm::backward_scratch_elems(n * c.n_heads, c.head_dim);
    if var.is_ddl() {
        e += 2 * l * delta::backward_scratch_elems(n, d, m);
    }
    if var.expanded() {
        let calls = 2 * l + 1;
        e += calls
            * if var.value_axis() {
                shortconv::value_backward_scratch_elems(n, d, m)
            } else {
                shortconv::token_backward_scratch_elems(&ConvShape {
                    batch: b,
                    seq: t,
                    d,
                    m,
                    kernel: c.state_kernel,
                    state_f16: false,
                })
            };
        if var.ec() {
            e += expand::ec_backward_scratch_elems(&ConvShape {
                batch: b,
                seq: t,
                d,
                m,
                kernel: c.embed_kernel,
                state_f16: false,
            });
        }
    }
    e as u64
}

/// Elements of the K-pieces scratch the split weight-gradient products of a program over `n`
/// tokens share: the largest [`crate::kernels::matmul::k_pieces_bound`] over the 2-D parameters
/// (their gradients are `[rows, cols]` products summed over the tokens).
pub(crate) fn k_pieces_scratch_elems(layout: &Layout, n: usize) -> usize {
    layout
        .specs
        .iter()
        .filter(|s| s.shape.len() == 2)
        .map(|s| crate::kernels::matmul::k_pieces_bound(s.shape[0], s.shape[1], n))
        .max()
        .unwrap_or(0)
}

/// Computes the memory plan of [`Model::program`] without a device (mirrors its allocations).
pub fn memory_plan(c: &ModelConfig, b: usize, t: usize) -> MemoryPlan {
    memory_plan_with(c, b, t, false)
}

/// [`memory_plan`] with the expanded states stored in half precision or not
/// ([`Model::set_state_f16`]).
pub fn memory_plan_with(c: &ModelConfig, b: usize, t: usize, state_f16: bool) -> MemoryPlan {
    let layout = Layout::new(c);
    let n = (b * t) as u64;
    let (d, m, dq, f, v, hh, hk) = (
        c.d_model as u64,
        c.m() as u64,
        c.qk_dim() as u64,
        c.mlp_hidden as u64,
        c.vocab_size as u64,
        c.n_heads as u64,
        c.k_mlp_hidden as u64,
    );
    let l = c.n_layers as u64;
    let var = c.variant;
    let mut acts = 3 * n + n * d; // tokens, targets, index (≈), e
    // The states X_1 … X_2L (and X_0 when expanded): half the four-byte elements in f16.
    let states = 2 * l * n * d * m + if var.expanded() { n * d * m } else { 0 };
    acts += if state_f16 { states / 2 } else { states };
    let attn = 7 * n * dq + 2 * n * hh + n * dq + n * hh;
    let f4 = c.mlp_stride() as u64;
    let mlp = 3 * n * f4;
    let per_sub = if var.expanded() { n * d } else { 0 }
        + 2 * n * d
        + n
        + if var.is_ddl() { 1 + 2 * n + 2 * n * m } else { 0 }
        + if var.vmap() { 2 * n * hk + n * d } else { 0 };
    acts += l * (attn + mlp + 2 * per_sub);
    acts += if var.expanded() { n * d } else { 0 } + n * d + n + n * v + n + 8;
    let hkn = if var.vmap() { n * hk } else { 1 };
    // The blocked attention's two block scratches (CPU adapters; shared by all layers).
    let attn_s = AttnShape::training(b, c.n_heads, c.head_dim, t);
    let attn_blocks = 2 * attention::block_scratch_elems(&attn_s, attention::BLOCK_ROWS) as u64;
    let scratch = n * v
        + 2 * n * d
        + 2 * n * d * m
        + 4 * n * d
        + 4 * hkn
        + 8 * n * dq
        + 3 * n * f4
        + n * d
        + attn_blocks
        + if var.is_ddl() { 2 * l * (n + 1) } else { 0 } // every write's β, and their sums
        + if f4 != f { l * d * f4 } else { 0 }
        + launcher_scratch(c, b, t)
        + k_pieces_scratch_elems(&layout, b * t) as u64;
    let mut largest = ("logits".to_string(), 4 * n * v);
    for s in &layout.specs {
        let bytes = 4 * s.len() as u64;
        if bytes > largest.1 {
            largest = (s.name.clone(), bytes);
        }
    }
    MemoryPlan {
        params: layout.count(),
        param_bytes: 4 * layout.total as u64,
        activation_bytes: 4 * acts,
        grad_scratch_bytes: 4 * scratch,
        largest,
    }
}
