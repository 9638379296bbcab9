//! The analytic memory of training a model at (B, T), without a device: it mirrors what
//! [`super::Model::program`] allocates (`super::acts`) and the scratch its launchers keep.

use crate::kernels::attention::{self, AttnShape};
use crate::kernels::matmul::KSplit;
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
    /// The largest single buffer (name, bytes): what one buffer of the adapter must hold
    /// (`max_buffer_size`). The parameters are one buffer (and so are their gradients and each
    /// AdamW moment).
    pub largest: (String, u64),
    /// The largest buffer a training step's kernels bind whole (name, bytes): the states'
    /// gradient or the MLP's hidden layer. One storage binding of the adapter must hold it (the logits, the
    /// parameters and elementwise passes are bound in pieces where larger).
    pub largest_bound: (String, u64),
    /// The f16 copy of the parameters that `--precision f16` reads its weights from (0 in f32).
    pub half_param_bytes: u64,
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
            ("f16 weight copy", self.half_param_bytes),
            ("activations", self.activation_bytes),
            ("gradient scratch", self.grad_scratch_bytes),
            ("total", self.total()),
        ] {
            s += &format!("  {name:<18} {bytes:>14}  ({:.1} MiB)\n", mib(bytes));
        }
        s + &format!("largest single buffer: {} bytes ({})\n", self.largest.1, self.largest.0)
    }

    /// The plan as `ddl info --preset --json` writes it: the parts of [`MemoryPlan::text`] in
    /// bytes, and the largest buffer and the largest bound whole, each with its name.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "params": self.params,
            "bytes": {
                "parameters": self.param_bytes,
                "gradients": self.param_bytes,
                "adamw_moments": 2 * self.param_bytes,
                "f16_weight_copy": self.half_param_bytes,
                "activations": self.activation_bytes,
                "gradient_scratch": self.grad_scratch_bytes,
                "total": self.total(),
            },
            "largest_buffer": {"name": self.largest.0, "bytes": self.largest.1},
            "largest_bound_whole": {"name": self.largest_bound.0, "bytes": self.largest_bound.1},
        })
    }

    /// Parameters, gradients, two moments, activations and scratch.
    pub fn total(&self) -> u64 {
        4 * self.param_bytes + self.half_param_bytes + self.activation_bytes + self.grad_scratch_bytes
    }

    /// One line: the total and its parts, for errors.
    pub fn summary(&self) -> String {
        format!(
            "{} bytes ({:.1} MiB: parameters, gradients and AdamW moments {}, activations {}, gradient scratch {}; \
             largest buffer '{}' {} bytes)",
            self.total(),
            self.total() as f64 / 1048576.0,
            4 * self.param_bytes,
            self.activation_bytes,
            self.grad_scratch_bytes,
            self.largest.0,
            self.largest.1
        )
    }

    /// Why the plan does not fit what the adapter reports, or `None` when it does.
    pub fn misfit(&self, limits: &Limits) -> Option<String> {
        if self.largest.1 > limits.max_buffer {
            return Some(format!(
                "its largest buffer, '{}', needs {} bytes but the adapter allows at most {} bytes per buffer",
                self.largest.0, self.largest.1, limits.max_buffer
            ));
        }
        if self.largest_bound.1 > limits.max_binding {
            return Some(format!(
                "'{}' needs {} bytes and its kernels bind it whole, but one storage binding of the adapter holds at \
                 most {} bytes",
                self.largest_bound.0, self.largest_bound.1, limits.max_binding
            ));
        }
        if let Some(avail) = limits.host_available
            && self.total() > avail
        {
            return Some(format!(
                "it needs {} bytes in all and this CPU adapter's memory is the host's, of which {} bytes are \
                 available",
                self.total(),
                avail
            ));
        }
        None
    }
}

/// What the adapter reports that a plan must fit (wgpu has no free-memory query): its largest
/// buffer, its largest storage binding (what [`MemoryPlan::largest_bound`] must fit) and, for CPU
/// adapters, whose memory is the host's, the host's available memory.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_buffer: u64,
    pub max_binding: u64,
    pub host_available: Option<u64>,
}

impl Limits {
    /// The limits of an opened device.
    pub fn of(gpu: &crate::gpu::Gpu) -> Limits {
        Limits {
            max_buffer: gpu.limits.max_buffer_size,
            max_binding: gpu.limits.max_storage_buffer_binding_size,
            host_available: if gpu.forms.cpu { host_available_bytes() } else { None },
        }
    }
}

/// The host's available memory (`MemAvailable` of /proc/meminfo; `None` elsewhere).
/// `DDL_FAULT_HOST_MEMORY=BYTES` pretends the host has that much (tests).
pub fn host_available_bytes() -> Option<u64> {
    if let Some(v) = std::env::var("DDL_FAULT_HOST_MEMORY").ok().and_then(|v| v.parse().ok()) {
        return Some(v);
    }
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// How a training run of `c` at `batch` × `seq`, stored as `st` says, can fit `limits` when its
/// plan does not: the largest batch that fits (with the gradient accumulation that keeps the
/// global batch), f16 states where the variant has them, and recomputing. `None` when it
/// already fits.
pub fn fit_advice(
    c: &ModelConfig,
    batch: usize,
    seq: usize,
    grad_accum: usize,
    st: Storage,
    limits: &Limits,
) -> Option<String> {
    let plan = memory_plan_for(c, batch, seq, st);
    let why = plan.misfit(limits)?;
    // What is advised fits with a margin where the limit moves (the host's available memory):
    // the advice is followed a moment later, beside other processes.
    // (The other fixes say "this batch then fits": at the limit itself.)
    let margin = Limits { host_available: limits.host_available.map(|a| a / 10 * 9), ..*limits };
    let fits = |b: usize, st: Storage| memory_plan_for(c, b, seq, st).misfit(limits).is_none();
    let mut fixes = Vec::new();
    let lo = largest_fitting(|b| memory_plan_for(c, b, seq, st).misfit(&margin).is_none());
    if lo > 0 {
        fixes.push(batch_advice(lo, batch * grad_accum));
    } else {
        fixes.push(format!(
            "even one sequence does not fit: lower train.batch_size to 1 and train.seq_len (now {seq}), or make the \
             model smaller"
        ));
    }
    // What else makes this batch fit, alone or together.
    let f16 = !st.state_f16 && c.f16_state_support().is_ok();
    let with = |state_f16: bool, recompute: bool| Storage { state_f16, recompute, ..st };
    if f16 && fits(batch, with(true, st.recompute)) {
        fixes.push("or pass --f16-state (half-precision states: this batch then fits)".into());
    }
    let chunked = Storage { head_chunk: HEAD_CHUNK_ADVICE, ..st };
    if st.head_chunk == 0 && batch * seq > HEAD_CHUNK_ADVICE && fits(batch, chunked) {
        fixes.push(format!(
            "or pass --head-chunk {HEAD_CHUNK_ADVICE} (train.head_chunk: the LM head's logits {HEAD_CHUNK_ADVICE} rows at a \
             time instead of all {}; this batch then fits)",
            batch * seq
        ));
    }
    if !st.recompute && fits(batch, with(st.state_f16, true)) {
        fixes.push(
            "or pass --recompute (train.recompute: the backward rebuilds c, a, the QK norms and ψ instead of \
             keeping them per layer; the same results, this batch then fits)"
                .into(),
        );
    } else if f16 && !st.recompute && !fits(batch, with(true, false)) && fits(batch, with(true, true)) {
        fixes.push("or pass --f16-state and --recompute together (this batch then fits)".into());
    }
    Some(format!(
        "the memory plan of a batch of {batch} × {seq} tokens is {}; {why}. To fit: {}",
        plan.summary(),
        fixes.join(", ")
    ))
}

/// The largest batch of `seq`-token sequences whose training plan, stored as `st` says, fits
/// `limits` with a tenth of the host's available memory to spare (as [`fit_advice`] advises);
/// 0 when not even one sequence fits.
pub fn largest_fitting_batch(c: &ModelConfig, seq: usize, st: Storage, limits: &Limits) -> usize {
    let margin = Limits { host_available: limits.host_available.map(|a| a / 10 * 9), ..*limits };
    largest_fitting(|b| memory_plan_for(c, b, seq, st).misfit(&margin).is_none())
}

/// "lower train.batch_size to `largest` or less …" for a run whose micro-batch must be at most
/// `largest` sequences and whose global batch is `global`: with the `train.grad_accum` that keeps
/// it, exactly where a batch not much smaller than `largest` divides it (that batch then named
/// beside the largest), else the nearest above.
pub fn batch_advice(largest: usize, global: usize) -> String {
    let exact =
        (largest.div_ceil(2).max(largest.saturating_sub(4096))..=largest).rev().find(|b| global.is_multiple_of(*b));
    let b = exact.unwrap_or(largest);
    let accum = global.div_ceil(b);
    let keeps = if b * accum == global {
        format!("keeps the global batch of {global} sequences")
    } else {
        format!("gives a global batch of {} sequences, near the {global} of now", b * accum)
    };
    let how = format!("--set train.batch_size={b}; --set train.grad_accum={accum} {keeps}");
    if b < largest {
        format!("lower train.batch_size to {largest} or less (at most {largest} fit; {how})")
    } else {
        format!("lower train.batch_size to {b} or less ({how})")
    }
}

/// The head chunk `fit_advice` suggests: 1024 rows of logits at a time (206 MB at V = 50304).
pub const HEAD_CHUNK_ADVICE: usize = 1024;

/// The largest batch of `t`-token sequences whose training plan, stored as `st` says, totals at
/// most `bytes` (0 when not even one sequence fits). Plans grow with the batch: a bisection.
pub fn largest_batch(c: &ModelConfig, t: usize, st: Storage, bytes: u64) -> usize {
    largest_fitting(|b| memory_plan_for(c, b, t, st).total() <= bytes)
}

/// The largest batch for which `fits` holds, `fits` being true up to some batch and false
/// after it (plans grow with the batch): doubling, then a bisection; 0 when 1 does not fit.
fn largest_fitting(fits: impl Fn(usize) -> bool) -> usize {
    if !fits(1) {
        return 0;
    }
    let (mut lo, mut hi) = (1usize, 2usize);
    while fits(hi) {
        lo = hi;
        hi *= 2;
        if hi > 1 << 30 {
            return lo;
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) { lo = mid } else { hi = mid }
    }
    lo
}

/// A memory size as people write it: bytes (`8e10`, `80000000000`), or a number with a decimal
/// (`kB`, `MB`, `GB`, `TB`) or binary (`KiB`, `MiB`, `GiB`, `TiB`) unit, case-insensitive, a
/// space allowed before the unit. The error names the value and the forms allowed.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|ch: char| ch.is_ascii_alphabetic() && ch != 'e' && ch != 'E').unwrap_or(t.len());
    let (num, unit) = (t[..split].trim(), t[split..].trim());
    let scale: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        u @ ("k" | "m" | "g" | "t") => {
            // (A letter alone could mean either: said, not guessed.)
            let u = u.to_ascii_uppercase();
            return Err(format!(
                "'{text}': {u} alone is ambiguous: write {num}{u}B (powers of 10) or {num}{u}iB (of 2)"
            ));
        }
        _ => f64::NAN,
    };
    match num.parse::<f64>() {
        Ok(x) if x > 0.0 && x.is_finite() && scale.is_finite() && x * scale < 1e18 => Ok((x * scale) as u64),
        Ok(x) if x > 0.0 && scale.is_finite() => Err(format!(
            "'{text}' is too large a memory size (at most 1e18 bytes, an exabyte; a card has 24 to 192 GB)"
        )),
        _ => Err(format!(
            "'{text}' is not a memory size: expected a positive number of bytes with an optional unit, such as \
             80GB, 141GiB, 24 GiB or 8e10"
        )),
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
/// tokens share under the split rules `rules`: the largest
/// [`crate::kernels::matmul::k_pieces_bound`] over the 2-D parameters (their gradients are
/// `[rows, cols]` products summed over the tokens).
pub(crate) fn k_pieces_scratch_elems(layout: &Layout, n: usize, rules: &[KSplit]) -> usize {
    layout
        .specs
        .iter()
        .filter(|s| s.shape.len() == 2)
        .flat_map(|s| rules.iter().map(|&r| crate::kernels::matmul::k_pieces_bound(r, s.shape[0], s.shape[1], n)))
        .max()
        .unwrap_or(0)
}

/// Computes the memory plan of [`crate::model::Model::program`] without a device (mirrors its allocations).
pub fn memory_plan(c: &ModelConfig, b: usize, t: usize) -> MemoryPlan {
    memory_plan_with(c, b, t, false)
}

/// [`memory_plan`] with the expanded states stored in half precision or not
/// ([`crate::model::Model::set_state_f16`]).
pub fn memory_plan_with(c: &ModelConfig, b: usize, t: usize, state_f16: bool) -> MemoryPlan {
    memory_plan_for(c, b, t, Storage::states(state_f16))
}

/// How a training program stores its activations: what moves the memory plan besides the model
/// and the batch's shape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Storage {
    /// The expanded states in half precision ([`super::Model::set_state_f16`]).
    pub state_f16: bool,
    /// f16 adds the parameters' f16 copy ([`super::Model::set_precision`]) and stores the MLP's
    /// SwiGLU output in f16 (form `f16_acts`).
    pub precision: super::Precision,
    /// One buffer for every layer's c, a, QK-norm outputs and ψ, rebuilt in the backward
    /// ([`super::Model::set_recompute`]).
    pub recompute: bool,
    /// The LM head in slices of this many rows, 0 = all at once
    /// ([`super::Model::set_head_chunk`]): the logits of one slice instead of the batch's.
    pub head_chunk: usize,
    /// The attention's scratch holds the whole score matrix (the device's form
    /// `attention=causal`, [`crate::kernels::attention::Method::Causal`]) rather than blocks of
    /// queries; [`Storage::on`] sets it from a device.
    pub whole_attention: bool,
}

impl Storage {
    /// This storage on `gpu`: with its attention form's scratch ([`Storage::whole_attention`]).
    pub fn on(self, gpu: &crate::gpu::Gpu) -> Storage {
        Storage { whole_attention: gpu.forms.attention == attention::Method::Causal, ..self }
    }

    /// f32 with f16 states or not (the plans before `--precision` and `--recompute`).
    pub fn states(state_f16: bool) -> Storage {
        Storage { state_f16, ..Storage::default() }
    }

    /// What `ddl info` and `ddl train` print of it: "" for the default, else e.g.
    /// " (f16, f16 states, recompute)".
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if self.precision == super::Precision::F16 {
            parts.push("f16".to_string());
        }
        if self.state_f16 {
            parts.push("f16 states".to_string());
        }
        if self.recompute {
            parts.push("recompute".to_string());
        }
        if self.head_chunk > 0 {
            parts.push(format!("head chunk {}", self.head_chunk));
        }
        if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(", ")) }
    }
}

/// The memory plan of a training program of `c` at `b` × `t` that stores its activations as
/// `st` says.
pub fn memory_plan_for(c: &ModelConfig, b: usize, t: usize, st: Storage) -> MemoryPlan {
    let (state_f16, precision) = (st.state_f16, st.precision);
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
    let rc = st.recompute;
    // v, the rotated and normed q and k (recomputing: the normed ones in q and k), their rstd, o
    // and lse per layer; q and k before RoPE once (shared by the layers, below).
    let attn = if rc { 3 } else { 5 } * n * dq + 2 * n * hh + n * dq + n * hh;
    let f4 = c.mlp_stride() as u64;
    // g1, g2 and ψ; in f16 ψ is stored in f16 (the form `f16_acts`, on by default); recomputing,
    // one ψ for all layers (below).
    let psi = if precision == super::Precision::F16 { n * f4 / 2 } else { n * f4 };
    let mlp = 2 * n * f4 + if rc { 0 } else { psi };
    // a (expanded) and c (recomputing: once, below), h (the residual's h is X_out itself), rstd,
    // the write's saves, the v-Map direction branch (recomputing: once, below).
    let ac = if var.expanded() { 2 * n * d } else { n * d };
    let dir = if var.vmap() { 2 * n * hk + n * d } else { 0 };
    let per_sub = if rc { 0 } else { ac + dir }
        + if var.is_ddl() { n * d } else { 0 }
        + n
        + if var.is_ddl() { 1 + 2 * n + 2 * n * m } else { 0 };
    // Recomputing: one c (and a), ψ and v-Map direction branch for all sublayers.
    acts += l * (attn + mlp + 2 * per_sub) + 2 * n * dq + if rc { ac + psi + dir } else { 0 };
    // The logits: a chunked head's one slice of rows.
    let head_rows = super::acts::head_rows(n as usize, st.head_chunk) as u64;
    acts += if var.expanded() { n * d } else { 0 } + n * d + n + head_rows * v + n + 8;
    let hkn = if var.vmap() { n * hk } else { 1 };
    // The blocked attention's two block scratches (shared by all layers), at the larger of the
    // CPU and GPU block sizes, so that one plan holds on either; the whole score matrix with the
    // causal form (or its blocks, where it falls back to them: the larger).
    let attn_s = AttnShape::training(b, c.n_heads, c.head_dim, t);
    let rows = attention::BLOCK_ROWS.max(attention::GPU_BLOCK_ROWS);
    let mut block = attention::block_scratch_elems(&attn_s, rows);
    if st.whole_attention {
        block = block.max(attention::causal_scratch_elems(&attn_s));
    }
    // In f16, P and dS in f16 besides (form `attn_p16`, on by default): one more scratch's bytes.
    let attn_blocks = if precision == super::Precision::F16 { 3 } else { 2 } * block as u64;
    // (The logits' gradient is written over the logits: no [N, V] scratch.)
    let scratch = 2 * n * d
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
        + k_pieces_scratch_elems(&layout, b * t, &KSplit::PLANNED) as u64;
    // The largest buffer among the parameters (one buffer), the activations (as `Acts::new`
    // labels them) and the scratches: what one buffer of the adapter must hold. The state's
    // gradient (f32 also with f16 states) is at least as large as a state, and bound whole.
    // So is the MLP's hidden layer (SwiGLU's operands); the attention's scratch is sized to fit
    // one binding.
    let (dx, hidden) = (
        ("dxa (the states' gradient)".to_string(), 4 * n * d * m),
        ("b0.mlp.g1 (the MLP's hidden layer)".to_string(), 4 * n * f4),
    );
    let largest_bound = if hidden.1 > dx.1 { hidden } else { dx };
    let mut largest = ("logits".to_string(), 4 * head_rows * v);
    for (name, bytes) in [
        (format!("params (all {} parameters)", layout.count()), 4 * layout.total as u64),
        largest_bound.clone(),
        ("attention scratch".to_string(), 4 * block as u64),
    ] {
        if bytes > largest.1 {
            largest = (name, bytes);
        }
    }
    MemoryPlan {
        params: layout.count(),
        param_bytes: 4 * layout.total as u64,
        activation_bytes: 4 * acts,
        grad_scratch_bytes: 4 * scratch,
        largest,
        largest_bound,
        half_param_bytes: if precision == super::Precision::F16 { 4 * layout.total.div_ceil(2) as u64 } else { 0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_advice_keeps_the_global_batch_where_a_divisor_is_near_and_says_so_where_not() {
        // 64 sequences, at most 7 a micro-batch: 4 × 16 keeps 64 exactly.
        let a = batch_advice(7, 64);
        assert!(a.contains("batch_size=4; --set train.grad_accum=16 keeps the global batch of 64"), "{a}");
        // The largest that fits is named too, not only the divisor.
        assert!(a.starts_with("lower train.batch_size to 7 or less (at most 7 fit; --set"), "{a}");
        let a = batch_advice(8, 64);
        assert!(a.starts_with("lower train.batch_size to 8 or less (--set train.batch_size=8; --set"), "{a}");
        // 16777216 at most 4584: 4096 × 4096.
        assert!(batch_advice(4584, 1 << 24).contains("batch_size=4096; --set train.grad_accum=4096 keeps"));
        // A prime global batch: the largest batch, the global batch it gives said as such.
        let a = batch_advice(10, 97);
        assert!(a.contains("batch_size=10; --set train.grad_accum=10 gives a global batch of 100"), "{a}");
    }
    use crate::model::{Precision, Variant};

    #[test]
    fn fit_advice_names_the_largest_batch_that_fits_and_f16_states_where_they_help() {
        let c = ModelConfig::preset("tiny", Variant::Ddl).unwrap();
        let (b, t) = (64, 128);
        let plan = memory_plan(&c, b, t);
        let roomy = Limits { max_buffer: u64::MAX, max_binding: u64::MAX, host_available: Some(plan.total()) };
        let st = |state_f16: bool| Storage::states(state_f16);
        assert_eq!(fit_advice(&c, b, t, 1, st(false), &roomy), None);
        // A host with two thirds of the plan: the advice's batch fits with a tenth to spare (the
        // host's available memory moves), the largest such batch that divides the global batch.
        let tight = Limits { max_buffer: u64::MAX, max_binding: u64::MAX, host_available: Some(plan.total() * 2 / 3) };
        let advice = fit_advice(&c, b, t, 2, st(false), &tight).expect("must not fit");
        let fit_b: usize =
            advice.split("--set train.batch_size=").nth(1).unwrap().split(';').next().unwrap().parse().unwrap();
        let spare = Limits { host_available: Some(plan.total() * 2 / 3 / 10 * 9), ..tight };
        assert!(memory_plan(&c, fit_b, t).misfit(&spare).is_none(), "{advice}");
        let larger = (fit_b + 1..=128).find(|d| 128 % d == 0).unwrap();
        assert!(memory_plan(&c, larger, t).misfit(&spare).is_some(), "{advice}");
        // The global batch 64 × 2 kept exactly.
        assert!(
            advice.contains(&format!("train.grad_accum={} keeps the global batch of 128", 128 / fit_b)),
            "{advice}"
        );
        assert!(advice.contains("available") && advice.contains(&plan.total().to_string()), "{advice}");
        // ddl at d_v = 4 has f16 states: offered when they make this batch fit.
        let f16 = memory_plan_with(&c, b, t, true).total();
        let just = Limits { max_buffer: u64::MAX, max_binding: u64::MAX, host_available: Some(f16) };
        assert!(fit_advice(&c, b, t, 1, st(false), &just).unwrap().contains("--f16-state"));
        let base = ModelConfig::preset("tiny", Variant::Baseline).unwrap();
        let small = Limits {
            max_buffer: u64::MAX,
            max_binding: u64::MAX,
            host_available: Some(memory_plan(&base, b, t).total() - 1),
        };
        assert!(!fit_advice(&base, b, t, 1, st(false), &small).unwrap().contains("--f16-state"));
        // Recomputing, where it makes this batch fit; with f16 states when only both together do.
        let rc = |state_f16: bool| Storage { state_f16, recompute: true, ..Storage::default() };
        let (plan_rc, plan_both) =
            (memory_plan_for(&c, b, t, rc(false)).total(), memory_plan_for(&c, b, t, rc(true)).total());
        assert!(plan_both < plan_rc.min(f16) && plan_rc < plan.total());
        let room = |bytes: u64| Limits { max_buffer: u64::MAX, max_binding: u64::MAX, host_available: Some(bytes) };
        let advice = fit_advice(&c, b, t, 1, st(false), &room(plan_rc)).unwrap();
        assert!(advice.contains("or pass --recompute"), "{advice}");
        assert_eq!(fit_advice(&c, b, t, 1, rc(false), &room(plan_rc)), None);
        let advice = fit_advice(&c, b, t, 1, st(false), &room(plan_both)).unwrap();
        assert!(advice.contains("--f16-state and --recompute together"), "{advice}");
        // (Already recomputing: not offered again.)
        assert!(!fit_advice(&c, b, t, 1, rc(false), &room(plan_both)).unwrap().contains("--recompute"));
        // The per-buffer limit: the largest tensor named; nothing fits at all.
        let nothing = Limits { max_buffer: 16, max_binding: u64::MAX, host_available: None };
        let advice = fit_advice(&c, b, t, 1, st(false), &nothing).unwrap();
        assert!(
            advice.contains("allows at most 16 bytes per buffer") && advice.contains("even one sequence"),
            "{advice}"
        );
    }

    #[test]
    fn fit_advice_keeps_the_state_gradient_within_one_storage_binding() {
        // The states' gradient is bound whole and is f32 with f16 states too: neither --f16-state
        // nor --recompute shrinks it, so neither is offered; the batch advised fits the binding
        // (and the host, which here is the other limit too).
        let c = ModelConfig::preset("tiny", Variant::Ddl).unwrap();
        let (b, t) = (64, 64);
        let st = Storage::states(false);
        let plan = memory_plan_for(&c, b, t, st);
        assert!(plan.largest_bound.0.starts_with("dxa"), "{:?}", plan.largest_bound);
        let binding = plan.largest_bound.1 / 2 - 1;
        for host in [None, Some(plan.total() - 1)] {
            let limits = Limits { max_buffer: u64::MAX, max_binding: binding, host_available: host };
            let why = plan.misfit(&limits).unwrap();
            if host.is_none() {
                assert!(why.contains("bind it whole") && why.contains(&binding.to_string()), "{why}");
            }
            let advice = fit_advice(&c, b, t, 1, st, &limits).unwrap();
            assert!(!advice.contains("--f16-state") && !advice.contains("--recompute"), "{advice}");
            let fit_b: usize =
                advice.split("train.batch_size to ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
            assert_eq!(fit_b, b / 2 - 1, "{advice}");
            assert!(memory_plan_for(&c, fit_b, t, st).misfit(&limits).is_none(), "{advice}");
        }
        // Within the binding, it fits.
        let roomy = Limits { max_buffer: u64::MAX, max_binding: plan.largest_bound.1, host_available: None };
        assert_eq!(fit_advice(&c, b, t, 1, st, &roomy), None);
    }

    #[test]
    fn the_largest_batch_is_the_last_whose_plan_fits_and_sizes_read_as_people_write_them() {
        let c = ModelConfig::preset("small-124m", Variant::Ddl).unwrap();
        for st in [Storage::default(), Storage { recompute: true, ..Storage::default() }] {
            for bytes in [80_000_000_000u64, 24 << 30, 7_000_000_000] {
                let b = largest_batch(&c, 1024, st, bytes);
                assert!(b >= 1 && memory_plan_for(&c, b, 1024, st).total() <= bytes, "{st:?} {bytes}: {b}");
                assert!(memory_plan_for(&c, b + 1, 1024, st).total() > bytes, "{st:?} {bytes}: {b}");
            }
        }
        // Recomputing fits more; nothing fits in a megabyte.
        let rc = Storage { recompute: true, ..Storage::default() };
        assert!(largest_batch(&c, 1024, rc, 80 << 30) > largest_batch(&c, 1024, Storage::default(), 80 << 30));
        assert_eq!(largest_batch(&c, 1024, Storage::default(), 1 << 20), 0);
        for (text, want) in [
            ("80GB", 80_000_000_000u64),
            ("141 GiB", 141 << 30),
            ("24gib", 24 << 30),
            ("8e10", 80_000_000_000),
            ("1.5 TB", 1_500_000_000_000),
            ("512MiB", 512 << 20),
            ("4096", 4096),
        ] {
            assert_eq!(parse_bytes(text), Ok(want), "{text}");
        }
        let e = parse_bytes("80G").unwrap_err();
        assert!(e.contains("'80G'") && e.contains("80GB") && e.contains("80GiB"), "{e}");
        for bad in ["", "80XB", "-3GB", "0", "GB", "eighty"] {
            let e = parse_bytes(bad).unwrap_err();
            assert!(e.contains(&format!("'{bad}'")) && e.contains("80GB"), "{bad}: {e}");
        }
        for big in ["1e30", "1e30GB", "1e400"] {
            let e = parse_bytes(big).unwrap_err();
            assert!(e.contains(&format!("'{big}'")) && e.contains("too large"), "{big}: {e}");
        }
    }

    #[test]
    fn a_sliced_head_plans_one_slice_of_logits_and_is_advised_where_it_makes_the_batch_fit() {
        // small-124m baseline at 8 × 1024: the logits [8192, 50304] are the largest tensor; in
        // slices of 1024 rows they are [1024, 50304].
        let c = ModelConfig::preset("small-124m", Variant::Baseline).unwrap();
        let v = c.vocab_size as u64;
        let chunk = |head_chunk: usize| Storage { head_chunk, ..Storage::default() };
        let (whole, sliced) = (memory_plan_for(&c, 8, 1024, chunk(0)), memory_plan_for(&c, 8, 1024, chunk(1024)));
        assert_eq!(whole.activation_bytes - sliced.activation_bytes, 4 * (8192 - 1024) * v);
        // Unsliced, the logits are the largest buffer; in slices, the parameters' one buffer.
        assert_eq!(whole.largest, ("logits".to_string(), 4 * 8192 * v));
        let params = 4 * Layout::new(&c).total as u64;
        assert!(sliced.largest.0.starts_with("params (all ") && sliced.largest.1 == params, "{:?}", sliced.largest);
        assert!(params > 4 * 1024 * v);
        assert_eq!(sliced.grad_scratch_bytes, whole.grad_scratch_bytes);
        // A chunk of at least the batch's rows plans as no chunk.
        assert_eq!(memory_plan_for(&c, 8, 1024, chunk(8192)).total(), whole.total());
        assert_eq!(memory_plan_for(&c, 1, 512, chunk(1024)).total(), memory_plan_for(&c, 1, 512, chunk(0)).total());
        assert_eq!(Storage { recompute: true, ..chunk(1024) }.label(), " (recompute, head chunk 1024)");
        // Advised where it makes this batch fit; not when the run already slices, nor for a
        // batch of at most 1024 tokens.
        let room = Limits { max_buffer: u64::MAX, max_binding: u64::MAX, host_available: Some(sliced.total()) };
        let advice = fit_advice(&c, 8, 1024, 1, chunk(0), &room).unwrap();
        assert!(advice.contains("or pass --head-chunk 1024 (train.head_chunk"), "{advice}");
        assert_eq!(fit_advice(&c, 8, 1024, 1, chunk(1024), &room), None);
        let one = memory_plan_for(&c, 1, 1024, chunk(0)).total();
        let tight = Limits { max_buffer: u64::MAX, max_binding: u64::MAX, host_available: Some(one - 1) };
        assert!(!fit_advice(&c, 1, 1024, 1, chunk(0), &tight).unwrap().contains("--head-chunk"));
        // It fits more sequences on a card.
        assert!(largest_batch(&c, 1024, chunk(1024), 80 << 30) > largest_batch(&c, 1024, chunk(0), 80 << 30));
    }

    #[test]
    fn the_f16_plan_adds_the_weight_copy_and_the_f16_attention_blocks_and_halves_the_swiglu_output() {
        // small-124m at 8 × 1024: ψ is [8192, 2048] per layer, 12 layers; in f16 it is stored in
        // f16 (form f16_acts), 2 bytes an element fewer; the parameters' f16 copy is added, and
        // the blocked attention's P and dS blocks in f16 (form attn_p16): one f32 block's bytes.
        let c = ModelConfig::preset("small-124m", Variant::Baseline).unwrap();
        let (p32, p16) = (
            memory_plan_for(&c, 8, 1024, Storage::default()),
            memory_plan_for(&c, 8, 1024, Storage { precision: Precision::F16, ..Storage::default() }),
        );
        assert_eq!(p32.activation_bytes - p16.activation_bytes, 12 * 8192 * 2048 * 2);
        assert_eq!((p32.half_param_bytes, p16.half_param_bytes), (0, (p32.param_bytes / 4).div_ceil(2) * 4));
        let s = AttnShape::training(8, c.n_heads, c.head_dim, 1024);
        let block = attention::block_scratch_elems(&s, attention::BLOCK_ROWS.max(attention::GPU_BLOCK_ROWS)) as u64;
        assert_eq!(block, 8 * 6 * 256 * 1024, "6 heads, blocks of 256 queries over up to 1024 keys");
        assert_eq!(p16.grad_scratch_bytes - p32.grad_scratch_bytes, 4 * block);
        // The causal form's scratch is the whole score matrix: two f32 buffers of 4× a block.
        let whole = memory_plan_for(&c, 8, 1024, Storage { whole_attention: true, ..Storage::default() });
        assert_eq!(whole.grad_scratch_bytes - p32.grad_scratch_bytes, 2 * 4 * (4 * block - block));
    }
}
