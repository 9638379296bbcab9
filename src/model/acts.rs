//! Activations: every tensor a program binds, allocated once per batch shape (B, T) — the
//! embedding, the states X_0 … X_2L, each sublayer's saves for its backward, the head, the
//! step's statistics and (training programs only) the gradient scratch shared by all layers.
//! [`super::memory_plan`] mirrors these allocations without a device.

use crate::gpu::{DType, Gpu, Result, Tensor};
use crate::kernels::embedding;

use super::model::Model;

/// Index of the first β sum in a program's `stats` (see [`Acts::stats`]).
pub const STATS_BETA: usize = 4;

/// What a program is for: which tensors it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// Forward, backward and optimizer: the gradient scratch too.
    Train,
    /// Forward only (evaluation, β statistics).
    Forward,
    /// Forward only for the loss (evaluation): as `Forward`, with the LM head in slices of
    /// this many rows (0 = all at once), so that the batch's logits never exist at once.
    Loss(usize),
    /// Forward only over a decode cache: f32 states, k stored for the traces.
    Decode,
}

/// Activations of one sublayer (attention or MLP) of one block.
#[derive(Clone)]
pub struct Sub {
    pub kind: SubKind,
    /// Compressed input a [N, d] (expanded variants; otherwise a is the state itself).
    pub a: Option<Tensor>,
    pub c: Tensor,
    pub rstd_c: Tensor,
    /// Sublayer output h [N, d]. In a residual sublayer (the baseline) this is the state after
    /// the sublayer, X_out, itself: X_out starts as a copy of X_in and the sublayer's last
    /// product adds h into it (`residual`), so h is never stored on its own.
    pub h: Tensor,
    /// X_out = X_in + h with h added by the sublayer's last product (the baseline, form
    /// `residual_fused`): `h` is X_out.
    pub residual: bool,
    pub inner: Inner,
    /// Delta-write saves (DDL variants): k `[N, d]`, rnorm `[N]`, beta `[N]`, v `[N, m]`, delta `[N, m]`.
    pub write: Option<WriteSaves>,
    /// v-Map direction branch: q1 = c·W_k1ᵀ, s1 = silu(q1) [N, h_k], kraw [N, d].
    pub dir: Option<(Tensor, Tensor, Tensor)>,
}

impl Sub {
    /// The unnormalised write direction k̃: the direction branch's output (v-Map variants), else
    /// the sublayer output h.
    pub fn kraw(&self) -> &Tensor {
        self.dir.as_ref().map_or(&self.h, |(_, _, kraw)| kraw)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubKind {
    Attn,
    Mlp,
}

impl SubKind {
    pub fn name(self) -> &'static str {
        match self {
            SubKind::Attn => "attn",
            SubKind::Mlp => "mlp",
        }
    }
}

/// The saves of the sublayer's own computation. The variants differ in size (11 tensor handles
/// against 3), which does not matter: a model holds one per sublayer, built once per program.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Inner {
    Attn {
        /// q and k before RoPE: scratch shared by every layer (only the forward reads them).
        q: Tensor,
        k: Tensor,
        v: Tensor,
        qr: Tensor,
        kr: Tensor,
        qn: Tensor,
        kn: Tensor,
        rstd_q: Tensor,
        rstd_k: Tensor,
        o: Tensor,
        lse: Tensor,
    },
    Mlp {
        g1: Tensor,
        g2: Tensor,
        psi: Tensor,
    },
}

/// What a delta write saves for its backward (and, in decode programs, for the traces).
#[derive(Clone)]
pub struct WriteSaves {
    /// k [n, d] in decode programs (for the traces); one unused element in training programs,
    /// whose backward recomputes k = k̃·r.
    pub k: Tensor,
    pub rnorm: Tensor,
    pub beta: Tensor,
    pub v: Tensor,
    pub delta: Tensor,
}

/// Gradient scratch shared by all layers (training programs). (The logits' gradient is written
/// over the logits: `head::backward`.)
#[derive(Clone)]
pub(crate) struct GradScratch {
    pub dzn: Tensor,
    pub dz: Tensor,
    /// ∂X of the current state ping-pongs between these two.
    pub dx: [Tensor; 2],
    pub dh: Tensor,
    pub da: Tensor,
    pub dc: Tensor,
    pub dkraw: Tensor,
    pub ds: Tensor,
    pub dq1: Tensor,
    pub dscratch: Tensor,
    pub do_: Tensor,
    pub dqn: Tensor,
    pub dkn: Tensor,
    pub dv: Tensor,
    pub dqr: Tensor,
    pub dkr: Tensor,
    pub dq: Tensor,
    pub dk: Tensor,
    pub dpsi: Tensor,
    pub dg1: Tensor,
    pub dg2: Tensor,
    pub de: Tensor,
}

/// Every tensor one program binds for batches of `b` sequences of `t` tokens. A clone shares
/// the buffers (a forward-only program over a training program's activations).
#[derive(Clone)]
pub struct Acts {
    pub b: usize,
    pub t: usize,
    /// The states `xs` are stored in half precision ([`Model::set_state_f16`]).
    pub state_f16: bool,
    /// The linear layers' products take f16 operands ([`super::Precision::F16`]).
    pub half: bool,
    /// The MLP's SwiGLU output (`Inner::Mlp::psi`) is stored in f16, two to a four-byte word
    /// (`half` and the form `f16_acts`): only the down projection and its weight gradient read it.
    pub psi_f16: bool,
    /// A training program that recomputes ([`Model::set_recompute`]): every sublayer's c (and a,
    /// expanded) is one shared buffer, every MLP's ψ another, and the QK norms' outputs live in
    /// the pre-RoPE q and k; the backward rebuilds each just before it reads it.
    pub recompute: bool,
    /// Rows of `logits`: B·T, or the slice of a chunked LM head ([`Model::set_head_chunk`],
    /// [`Model::loss_program`]).
    pub head_rows: usize,
    /// Token ids [B, T] (i32) and targets (−1 = ignored).
    pub tokens: Tensor,
    pub targets: Tensor,
    /// Deterministic scatter index of the embedding backward (rebuilt from the tokens).
    pub emb_index: Tensor,
    /// Embedding output e [N, d].
    pub e: Tensor,
    /// States X_0 … X_{2L}, each [N, d, m] (X_0 is `e` itself when not expanded).
    pub xs: Vec<Tensor>,
    /// Per block: (attention, MLP) sublayer activations.
    pub subs: Vec<[Sub; 2]>,
    /// Readout output z (expanded variants; else the last state is z).
    pub z: Option<Tensor>,
    pub zn: Tensor,
    pub rstd_f: Tensor,
    /// The logits `[head_rows, V]`: all rows', or one slice's at a time (a chunked head).
    pub logits: Tensor,
    pub lse: Tensor,
    /// (mean loss, valid targets).
    pub loss_out: Tensor,
    /// Σ g² over all gradients.
    pub norm_sq: Tensor,
    /// (loss, valid targets, Σ g², unused, Σ β of each delta write in sublayer order): the one
    /// small readback of a step.
    pub stats: Tensor,
    /// β of every delta write, `[n, writes]` (column j: the j-th write in sublayer order), summed
    /// over the tokens into `stats` by one column sum.
    pub betas: Tensor,
    /// Ones [N, h_k] (v-Map: silu(q1) is the SwiGLU kernel with a unit up branch).
    pub(crate) ones: Tensor,
    /// Per layer, `mlp.w_down` [d, F] copied into rows of `mlp_stride()` floats (only when F is
    /// not a multiple of 4; else empty): copied by the forward, read again by the backward.
    pub(crate) w_down_rows: Vec<Tensor>,
    /// Training programs: the gradient scratch.
    pub(crate) grads: Option<GradScratch>,
}

impl Acts {
    /// Tokens in one batch.
    pub fn n(&self) -> usize {
        self.b * self.t
    }

    /// The LM head runs in slices of rows ([`Model::set_head_chunk`]).
    pub fn head_chunked(&self) -> bool {
        self.head_rows < self.n()
    }

    /// The state entering the readout / final norm.
    pub fn z_tensor(&self) -> &Tensor {
        self.z.as_ref().unwrap_or_else(|| self.xs.last().unwrap())
    }

    /// The sublayer input `a` (compressed state, or the state itself).
    pub fn a_tensor(&self, block: usize, sub: usize) -> &Tensor {
        self.subs[block][sub].a.as_ref().unwrap_or(&self.xs[2 * block + sub])
    }

    /// The loss's views: the (whole) logits, targets, lse and the loss's `[mean, count]`.
    pub(crate) fn ce_io(&self) -> crate::kernels::loss::CeIo<'_> {
        let (logits, targets, lse, out) =
            (self.logits.view(), self.targets.view(), self.lse.view(), self.loss_out.view());
        crate::kernels::loss::CeIo { logits, targets, lse, out }
    }

    /// Delta writes in sublayer order (block 0 attention, block 0 MLP, block 1 …).
    pub fn writes(&self) -> impl Iterator<Item = &WriteSaves> {
        self.subs.iter().flatten().filter_map(|s| s.write.as_ref())
    }

    pub(crate) fn g(&self) -> &GradScratch {
        self.grads.as_ref().expect("a training program's gradient scratch")
    }

    /// Allocates the activations of `model` for batches of `b` × `t` tokens.
    pub(crate) fn new(model: &Model, b: usize, t: usize, purpose: Purpose) -> Result<Acts> {
        let gpu: &Gpu = &model.gpu;
        let c = &model.cfg;
        let n = b * t;
        let (d, m, dq, f, v, hh) = (c.d_model, c.m(), c.qk_dim(), c.mlp_hidden, c.vocab_size, c.n_heads);
        let hk = c.k_mlp_hidden;
        let keep_k = purpose == Purpose::Decode;
        // MLP activations have rows of a multiple of 4 floats (the vec4 matmul kernels need
        // aligned rows); the padding columns are never stored to, and read only into outputs
        // that are discarded (`Matmul::pad_reads`).
        let f4 = c.mlp_stride();
        let var = c.variant;
        let z = |label: &str, shape: &[usize]| Tensor::zeros(gpu, label, shape, DType::F32);

        let tokens = Tensor::zeros(gpu, "tokens", &[n], DType::I32)?;
        let targets = Tensor::zeros(gpu, "targets", &[n], DType::I32)?;
        let emb_index = Tensor::zeros(gpu, "emb_index", &[embedding::index_len(n)], DType::U32)?;
        let e = z("e", &[n, d])?;
        // f16 states: n·d rows of four halves = n·d·2 four-byte elements.
        let state_f16 = model.state_f16 && purpose != Purpose::Decode;
        let half = model.precision == super::Precision::F16 && purpose != Purpose::Decode;
        let psi_f16 = half && gpu.forms.f16_acts;
        let state = |label: &str| if state_f16 { z(label, &[n, d * m / 2]) } else { z(label, &[n, d, m]) };
        let mut xs = Vec::with_capacity(2 * c.n_layers + 1);
        if var.expanded() {
            xs.push(state("x0")?);
        } else {
            xs.push(e.clone());
        }
        for i in 1..=2 * c.n_layers {
            xs.push(state(&format!("x{i}"))?);
        }
        // Attention's q and k before RoPE are read only by the forward's RoPE (the backward
        // starts from the rotated ones): one pair for every layer.
        let (q_pre, k_pre) = (z("q", &[n, dq])?, z("k", &[n, dq])?);
        // The baseline's residual added by each sublayer's last product (form `residual_fused`).
        let residual = !var.is_ddl() && gpu.forms.residual_fused;
        // Programs without a backward (evaluation, decoding) keep only what is read after the
        // forward per layer — the states and the delta writes' saves (β statistics, traces) —
        // and share one layer's intermediates (a, c, h, attention, MLP, direction branch) among
        // all: each layer's are read only within its own sublayer's forward.
        let share = purpose != Purpose::Train;
        // A training program that recomputes: one c (and a) for every sublayer, one ψ for every
        // MLP, one v-Map direction branch (the QK norms' outputs go to q and k, below).
        let recompute = model.recompute && purpose == Purpose::Train;
        let psi_cols = if psi_f16 { f4 / 2 } else { f4 };
        let one = |label: &str, cols: usize, on: bool| if on { z(label, &[n, cols]).map(Some) } else { Ok(None) };
        let (shared_a, shared_c) = (one("a", d, recompute && var.expanded())?, one("c", d, recompute)?);
        let shared_psi = one("psi", psi_cols, recompute)?;
        // And one v-Map direction branch (q1, s1, k̃) for every sublayer.
        let shared_dir = if recompute && var.vmap() {
            Some((z("q1", &[n, hk])?, z("s1", &[n, hk])?, z("kraw", &[n, d])?))
        } else {
            None
        };
        let or_own = |t: &Option<Tensor>, label: String, cols: usize| match t {
            Some(t) => Ok(t.clone()),
            None => z(&label, &[n, cols]),
        };
        let saves = |p: &str| -> Result<Option<WriteSaves>> {
            if !var.is_ddl() {
                return Ok(None);
            }
            Ok(Some(WriteSaves {
                // k only where the forward stores it: decoding (its traces).
                k: z(&format!("{p}.kdir"), &[if keep_k { n * d } else { 1 }])?,
                rnorm: z(&format!("{p}.rnorm"), &[n])?,
                beta: z(&format!("{p}.beta"), &[n])?,
                v: z(&format!("{p}.vval"), &[n, m])?,
                delta: z(&format!("{p}.delta"), &[n, m])?,
            }))
        };
        let mut subs: Vec<[Sub; 2]> = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            if share && l > 0 {
                let pair = [SubKind::Attn, SubKind::Mlp].map(|kind| {
                    let si = kind as usize;
                    let first = &subs[0][si];
                    let h = if residual { xs[2 * l + si + 1].clone() } else { first.h.clone() };
                    saves(&format!("b{l}.{}", kind.name())).map(|write| Sub { h, write, ..first.clone() })
                });
                let [a, m] = pair;
                subs.push([a?, m?]);
                continue;
            }
            let mk = |kind: SubKind| -> Result<Sub> {
                let p = format!("b{l}.{}", kind.name());
                let inner = match kind {
                    SubKind::Attn => Inner::Attn {
                        q: q_pre.clone(),
                        k: k_pre.clone(),
                        v: z(&format!("{p}.v"), &[n, dq])?,
                        qr: z(&format!("{p}.qr"), &[n, dq])?,
                        kr: z(&format!("{p}.kr"), &[n, dq])?,
                        // (Recomputing: in q and k, which RoPE has read by then.)
                        qn: if recompute { q_pre.clone() } else { z(&format!("{p}.qn"), &[n, dq])? },
                        kn: if recompute { k_pre.clone() } else { z(&format!("{p}.kn"), &[n, dq])? },
                        rstd_q: z(&format!("{p}.rstd_q"), &[n * hh])?,
                        rstd_k: z(&format!("{p}.rstd_k"), &[n * hh])?,
                        o: z(&format!("{p}.o"), &[n, dq])?,
                        lse: z(&format!("{p}.lse"), &[b, hh, t])?,
                    },
                    SubKind::Mlp => Inner::Mlp {
                        g1: z(&format!("{p}.g1"), &[n, f4])?,
                        g2: z(&format!("{p}.g2"), &[n, f4])?,
                        // (f16: n·f4 halves, f4 a multiple of 4, in n·f4/2 words.)
                        psi: or_own(&shared_psi, format!("{p}.psi"), psi_cols)?,
                    },
                };
                Ok(Sub {
                    kind,
                    a: if var.expanded() { Some(or_own(&shared_a, format!("{p}.a"), d)?) } else { None },
                    c: or_own(&shared_c, format!("{p}.c"), d)?,
                    rstd_c: z(&format!("{p}.rstd_c"), &[n])?,
                    // The residual's h is added into X_out by the sublayer's last product.
                    h: if residual { xs[2 * l + kind as usize + 1].clone() } else { z(&format!("{p}.h"), &[n, d])? },
                    residual,
                    inner,
                    write: saves(&p)?,
                    dir: match (&shared_dir, var.vmap()) {
                        (Some(dir), _) => Some(dir.clone()),
                        (None, true) => Some((
                            z(&format!("{p}.q1"), &[n, hk])?,
                            z(&format!("{p}.s1"), &[n, hk])?,
                            z(&format!("{p}.kraw"), &[n, d])?,
                        )),
                        (None, false) => None,
                    },
                })
            };
            subs.push([mk(SubKind::Attn)?, mk(SubKind::Mlp)?]);
        }
        let zt = if var.expanded() { Some(z("z", &[n, d])?) } else { None };
        let zn = z("zn", &[n, d])?;
        let rstd_f = z("rstd_f", &[n])?;
        // A chunked head (training programs) holds one slice of rows at a time.
        let head_rows = head_rows(
            n,
            match purpose {
                Purpose::Train => model.head_chunk,
                Purpose::Loss(chunk) => chunk,
                _ => 0,
            },
        );
        let logits = z("logits", &[head_rows, v])?;
        let lse = z("lse", &[n])?;
        let loss_out = z("loss_out", &[2])?;
        let norm_sq = z("norm_sq", &[1])?;
        // (loss, valid targets, Σ g², ·, then Σ β over the tokens of each delta write).
        let writes = subs.iter().flatten().filter(|s| s.write.is_some()).count();
        let stats = z("stats", &[STATS_BETA + writes])?;
        let betas = z("betas", &[n * writes.max(1)])?;
        let hkn = if var.vmap() { n * hk } else { 1 };
        let ones = Tensor::from_f32(gpu, "ones", &[hkn], &vec![1.0; hkn])?;
        let w_down_rows = if f4 != f {
            (0..c.n_layers).map(|l| z(&format!("b{l}.w_down_rows"), &[d, f4])).collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        let grads = if purpose == Purpose::Train {
            Some(GradScratch {
                dzn: z("dzn", &[n, d])?,
                dz: z("dz", &[n, d])?,
                dx: [z("dxa", &[n, d, m])?, z("dxb", &[n, d, m])?],
                dh: z("dh", &[n, d])?,
                da: z("da", &[n, d])?,
                dc: z("dc", &[n, d])?,
                dkraw: z("dkraw", &[n, d])?,
                ds: z("ds", &[hkn])?,
                dq1: z("dq1", &[hkn])?,
                dscratch: z("dscratch", &[hkn])?,
                do_: z("do", &[n, dq])?,
                dqn: z("dqn", &[n, dq])?,
                dkn: z("dkn", &[n, dq])?,
                dv: z("dv", &[n, dq])?,
                dqr: z("dqr", &[n, dq])?,
                dkr: z("dkr", &[n, dq])?,
                dq: z("dq", &[n, dq])?,
                dk: z("dk", &[n, dq])?,
                dpsi: z("dpsi", &[n, f4])?,
                dg1: z("dg1", &[n, f4])?,
                dg2: z("dg2", &[n, f4])?,
                de: z("de", &[n, d])?,
            })
        } else {
            None
        };
        Ok(Acts {
            b,
            t,
            state_f16,
            half,
            psi_f16,
            recompute,
            head_rows,
            tokens,
            targets,
            emb_index,
            e,
            xs,
            subs,
            z: zt,
            zn,
            rstd_f,
            logits,
            lse,
            loss_out,
            norm_sq,
            stats,
            betas,
            ones,
            w_down_rows,
            grads,
        })
    }

    /// Tokens (and targets, −1 = ignored) for the next run; builds the embedding index too.
    pub(crate) fn check_batch(&self, model: &Model, tokens: &[i32], targets: &[i32]) -> Result<()> {
        let n = self.n();
        if tokens.len() != n || targets.len() != n {
            return Err(crate::gpu::GpuError::Shape(format!(
                "batch of {}×{} needs {n} tokens and targets, got {} and {}",
                self.b,
                self.t,
                tokens.len(),
                targets.len()
            )));
        }
        let v = model.cfg.vocab_size as i32;
        // The embedding gathers rows by id: an id outside the table is refused here, not read.
        if let Some((i, &t)) = tokens.iter().enumerate().find(|(_, t)| **t < 0 || **t >= v) {
            return Err(crate::gpu::GpuError::Shape(format!(
                "token id {t} at position {i} is outside the model's vocabulary [0, {v}): the tokenizer does not \
                 belong to this model (use the checkpoint's own tokenizer)"
            )));
        }
        if let Some((i, &t)) = targets.iter().enumerate().find(|(_, t)| **t < -1 || **t >= v) {
            return Err(crate::gpu::GpuError::Shape(format!(
                "target {t} at position {i} is outside [0, {v}) and is not the ignore index -1"
            )));
        }
        Ok(())
    }

    pub(crate) fn set_batch(&self, model: &Model, tokens: &[i32], targets: &[i32]) -> Result<()> {
        self.check_batch(model, tokens, targets)?;
        let idx = embedding::build_index(tokens, model.cfg.vocab_size)?;
        self.tokens.write_i32(&model.gpu, tokens)?;
        self.targets.write_i32(&model.gpu, targets)?;
        self.emb_index.write_u32(&model.gpu, &idx)?;
        Ok(())
    }
}

/// Rows of the logits a program of `n` tokens holds with the LM head in slices of `chunk` rows
/// (0 = all at once): one slice.
pub(crate) fn head_rows(n: usize, chunk: usize) -> usize {
    if chunk > 0 { chunk.min(n) } else { n }
}

/// The slice a program of `n` tokens runs its LM head in, given `chunk` (0 = all at once): 0
/// where it runs whole, no chunk or one of `n` rows or more (what `bench train` and `ddl info`
/// record and say), else `chunk`.
pub fn head_chunk_used(n: usize, chunk: usize) -> usize {
    if head_rows(n, chunk) < n { chunk } else { 0 }
}
