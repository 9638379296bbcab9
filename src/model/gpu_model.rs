//! The model on the GPU: parameters in flat buffers, activations allocated once per (B, T), and
//! the forward, backward and optimizer of every variant recorded as programs of bound dispatches
//! that are replayed each step (one submit, no allocation, one small readback).

use std::sync::Arc;

use crate::gpu::{DType, Dispatch, Gpu, Op, Readback, Recorder, Result, Tensor, View};
use crate::kernels::attention::AttnShape;
use crate::kernels::delta::{DeltaShape, VAct};
use crate::kernels::matmul::{Matmul, Operand};
use crate::kernels::rope::RopeShape;
use crate::kernels::shortconv::ConvShape;
use crate::kernels::{
    adamw, attention, delta, elementwise, embedding, expand, loss, norm, reduce, rope, shortconv, swiglu,
};

use super::config::{ModelConfig, VActName};
pub use super::decode::DecodeBufs;
use super::params::Layout;

/// Parameters, gradients and AdamW moments of one model on one device.
pub struct Model {
    pub gpu: Arc<Gpu>,
    pub cfg: ModelConfig,
    pub layout: Layout,
    /// Flat parameter buffer (see [`Layout`]).
    pub params: Tensor,
    pub grads: Tensor,
    pub adam_m: Tensor,
    pub adam_v: Tensor,
    /// Per-64-element decay flags (u32).
    pub decay_mask: Tensor,
    /// RoPE cos/sin table for positions `0..max_seq_len`.
    pub rope_table: Tensor,
    /// Training and evaluation programs store the expanded states X in half precision
    /// ([`Model::set_state_f16`]); decoding programs always keep them in f32.
    pub state_f16: bool,
}

/// The optimizer settings of a training step.
pub use crate::kernels::adamw::AdamWConfig;

impl Model {
    /// A model with parameters initialised from `seed` (spec section 5).
    pub fn new(gpu: Arc<Gpu>, cfg: ModelConfig, seed: u64) -> Result<Model> {
        let layout = Layout::new(&cfg);
        let init = layout.init(seed);
        Self::with_params(gpu, cfg, &init)
    }

    /// A model with the given flat parameters (length `Layout::new(&cfg).total`).
    pub fn with_params(gpu: Arc<Gpu>, cfg: ModelConfig, flat: &[f32]) -> Result<Model> {
        let layout = Layout::new(&cfg);
        let n = layout.total;
        if flat.len() != n {
            return Err(crate::gpu::GpuError::Shape(format!(
                "flat parameters have {} elements, the layout of this config needs {n}",
                flat.len()
            )));
        }
        let params = Tensor::from_f32(&gpu, "params", &[n], flat)?;
        let grads = Tensor::zeros(&gpu, "grads", &[n], DType::F32)?;
        let adam_m = Tensor::zeros(&gpu, "adam.m", &[n], DType::F32)?;
        let adam_v = Tensor::zeros(&gpu, "adam.v", &[n], DType::F32)?;
        let mask = adamw::decay_mask(n, &layout.decay_ranges());
        let decay_mask = Tensor::from_u32(&gpu, "decay_mask", &[mask.len()], &mask)?;
        let rope_table = rope::table(&gpu, cfg.max_seq_len.max(1), cfg.head_dim, cfg.rope_base)?;
        Ok(Model { gpu, cfg, layout, params, grads, adam_m, adam_v, decay_mask, rope_table, state_f16: false })
    }

    /// Stores the expanded states X of later training / evaluation programs in half precision
    /// (`--f16-state`): half the activation memory of the states and half their bytes moved, with
    /// every sum, the gate, the projection p = Xᵀk and the write's coefficient still in f32 (spec
    /// 10.3). Supported for the token-axis variants with replicated embeddings (`ddl`,
    /// `ddl_vmap`) at d_v = 4 on adapters with SHADER_F16 (not OpenGL).
    pub fn set_state_f16(&mut self, on: bool) -> Result<()> {
        if on {
            let bad = |why: String| Err(crate::gpu::GpuError::Shape(format!("f16 state: {why}")));
            self.cfg.f16_state_support().or_else(bad)?;
            if !self.gpu.features.contains(wgpu::Features::SHADER_F16) {
                return bad(format!("adapter '{}' has no SHADER_F16", self.gpu.info.name));
            }
            if self.gpu.info.backend == wgpu::Backend::Gl {
                return bad("not supported on the OpenGL backend".into());
            }
        }
        self.state_f16 = on;
        Ok(())
    }

    fn pv(&self, name: &str) -> View<'_> {
        let (o, n) = self.layout.range(name);
        self.params.view().sub(o, n)
    }

    fn gv(&self, name: &str) -> View<'_> {
        let (o, n) = self.layout.range(name);
        self.grads.view().sub(o, n)
    }

    /// The flat parameters on the host.
    pub fn read_params(&self) -> Result<Vec<f32>> {
        self.params.read_f32(&self.gpu)
    }

    /// One named tensor (parameters or gradients) on the host.
    pub fn read_named(&self, flat: &Tensor, name: &str) -> Result<Vec<f32>> {
        let (o, n) = self.layout.range(name);
        let all = flat.read_f32(&self.gpu)?;
        Ok(all[o..o + n].to_vec())
    }

    fn v_act(&self) -> VAct {
        match self.cfg.v_act {
            VActName::Sigmoid4 => VAct::Sigmoid4,
            VActName::Sigmoid => VAct::Sigmoid,
            VActName::Linear => VAct::Linear,
        }
    }
}

/// Activations of one sublayer (attention or MLP) of one block.
pub struct Sub {
    pub kind: SubKind,
    /// Compressed input a [N, d] (expanded variants; otherwise a is the state itself).
    pub a: Option<Tensor>,
    pub c: Tensor,
    pub rstd_c: Tensor,
    /// Sublayer output h [N, d].
    pub h: Tensor,
    pub inner: Inner,
    /// Delta-write saves (DDL variants): k [N, d], rnorm [N], beta [N], v [N, m], delta [N, m].
    pub write: Option<WriteSaves>,
    /// v-Map direction branch: q1 = c·W_k1ᵀ, s1 = silu(q1) [N, h_k], kraw [N, d].
    pub dir: Option<(Tensor, Tensor, Tensor)>,
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

pub enum Inner {
    Attn {
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

pub struct WriteSaves {
    /// k [n, d] in decode programs (for the traces); one unused element in training programs,
    /// whose backward recomputes k = k̃·r.
    pub k: Tensor,
    pub rnorm: Tensor,
    pub beta: Tensor,
    pub v: Tensor,
    pub delta: Tensor,
}

/// Gradient scratch shared by all layers.
struct Grads {
    dlogits: Tensor,
    dzn: Tensor,
    dz: Tensor,
    dx: [Tensor; 2],
    dh: Tensor,
    da: Tensor,
    dc: Tensor,
    dkraw: Tensor,
    ds: Tensor,
    dq1: Tensor,
    dscratch: Tensor,
    ones: Tensor,
    do_: Tensor,
    dqn: Tensor,
    dkn: Tensor,
    dv: Tensor,
    dqr: Tensor,
    dkr: Tensor,
    dq: Tensor,
    dk: Tensor,
    dpsi: Tensor,
    dg1: Tensor,
    dg2: Tensor,
    /// Per layer, `mlp.w_down` [d, F] copied into rows of `mlp_stride()` floats (only when F is
    /// not a multiple of 4; else empty): copied by the forward, read again by the backward.
    w_down_rows: Vec<Tensor>,
    de: Tensor,
}

/// Everything bound for one batch shape (B, T): activations and the recorded programs.
pub struct Program {
    pub b: usize,
    pub t: usize,
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
    pub logits: Tensor,
    pub lse: Tensor,
    /// (mean loss, valid targets).
    pub loss_out: Tensor,
    /// Σ g² over all gradients.
    pub norm_sq: Tensor,
    /// (loss, valid targets, Σ g², unused, Σ β of each delta write in sublayer order): the one
    /// small readback of a training step.
    pub stats: Tensor,
    /// β of every delta write, `[n, writes]` (column j: the j-th write in sublayer order), summed
    /// over the tokens into `stats` by one column sum.
    betas: Tensor,
    /// `stats`' persistent staging copy, filled in the same submit as the step.
    pub stats_rb: Readback,
    /// Decode programs: `logits`' persistent staging copy, filled in the same submit as the
    /// token's forward (no second submit, no allocation per token).
    pub logits_rb: Option<Readback>,
    /// Zeroes the gradient buffer (once per optimizer step, before the first micro-batch).
    pub zero: Vec<Op>,
    pub forward: Vec<Op>,
    /// Adds this batch's gradients into the gradient buffer.
    pub backward: Vec<Op>,
    /// `(end, block)`: after `backward[..end]` no later backward op writes the gradients of
    /// `blocks.{block}.*` (blocks in the order the backward finishes them: last block first).
    pub backward_blocks: Vec<(usize, usize)>,
    /// Gradient norm and the step's statistics into `stats` (after the last micro-batch).
    pub finish: Vec<Op>,
    pub optimizer: Vec<Dispatch>,
    /// Loss objective: label smoothing α and the gradient scale (1 / micro-batches).
    pub label_smoothing: f32,
    pub loss_scale: f32,
    /// Cached decoding: windows and cache views of a decode chunk program (None for training).
    pub decode: Option<DecodeBufs>,
    /// The states `xs` are stored in half precision ([`Model::set_state_f16`]).
    pub state_f16: bool,
    _grads: Grads,
}

impl Program {
    fn n(&self) -> usize {
        self.b * self.t
    }

    /// The state entering the readout / final norm.
    pub fn z_tensor(&self) -> &Tensor {
        self.z.as_ref().unwrap_or_else(|| self.xs.last().unwrap())
    }

    /// The sublayer input `a` (compressed state, or the state itself).
    pub fn a_tensor(&self, block: usize, sub: usize) -> &Tensor {
        self.subs[block][sub].a.as_ref().unwrap_or(&self.xs[2 * block + sub])
    }

    /// Tokens (and targets, −1 = ignored) for the next run; builds the embedding index too.
    pub fn set_batch(&self, model: &Model, tokens: &[i32], targets: &[i32]) -> Result<()> {
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
        if let Some((i, &t)) = targets.iter().enumerate().find(|(_, t)| **t < -1 || **t >= v) {
            return Err(crate::gpu::GpuError::Shape(format!(
                "target {t} at position {i} is outside [0, {v}) and is not the ignore index -1"
            )));
        }
        let idx = embedding::build_index(tokens, model.cfg.vocab_size)?;
        self.tokens.write_i32(&model.gpu, tokens)?;
        self.targets.write_i32(&model.gpu, targets)?;
        self.emb_index.write_u32(&model.gpu, &idx)?;
        Ok(())
    }
}

fn run(ops: &mut Vec<Op>, ds: Result<Vec<Dispatch>>) -> Result<()> {
    ops.extend(ds?.into_iter().map(Op::Run));
    Ok(())
}

/// Records a product; operands larger than one storage binding (the tied LM head) are split.
fn mm(ops: &mut Vec<Op>, gpu: &Gpu, m: Matmul, a: View, b: View, c: View) -> Result<()> {
    run(ops, m.bind_split(gpu, a, b, c))
}

impl Model {
    /// Allocates activations for batches of `b` sequences of `t` tokens and records the
    /// forward, backward and optimizer programs, with the config's training objective.
    pub fn program(&self, b: usize, t: usize, opt: &AdamWConfig) -> Result<Program> {
        self.program_with(b, t, opt, self.cfg.label_smoothing as f32, 1.0)
    }

    /// As [`Model::program`] with an explicit label smoothing (0 for evaluation) and gradient
    /// scale (1/k when k micro-batches accumulate into one step).
    pub fn program_with(
        &self,
        b: usize,
        t: usize,
        opt: &AdamWConfig,
        label_smoothing: f32,
        loss_scale: f32,
    ) -> Result<Program> {
        self.program_inner(b, t, opt, label_smoothing, loss_scale, None)
    }

    fn program_inner(
        &self,
        b: usize,
        t: usize,
        opt: &AdamWConfig,
        label_smoothing: f32,
        loss_scale: f32,
        decode: Option<super::decode::DecodeBufs>,
    ) -> Result<Program> {
        let gpu = &*self.gpu;
        let c = &self.cfg;
        if t > c.max_seq_len {
            return Err(crate::gpu::GpuError::Shape(format!(
                "sequence length {t} exceeds the model's max_seq_len {}",
                c.max_seq_len
            )));
        }
        let n = b * t;
        let (d, m, dq, f, v, hh) = (c.d_model, c.m(), c.qk_dim(), c.mlp_hidden, c.vocab_size, c.n_heads);
        let hk = c.k_mlp_hidden;
        let keep_k = decode.is_some();
        // The weight gradients' K-pieces scratch at its largest before any product asks for it,
        // so that one buffer serves them all (the plan counts it).
        let kp = k_pieces_scratch_elems(&self.layout, n);
        if kp > 0 {
            gpu.shared_scratch(crate::kernels::matmul::K_PIECES_SCRATCH, kp)?;
        }
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
        let state_f16 = self.state_f16 && decode.is_none();
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
        let mut subs = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            let mk = |kind: SubKind| -> Result<Sub> {
                let p = format!("b{l}.{}", kind.name());
                let inner = match kind {
                    SubKind::Attn => Inner::Attn {
                        q: z(&format!("{p}.q"), &[n, dq])?,
                        k: z(&format!("{p}.k"), &[n, dq])?,
                        v: z(&format!("{p}.v"), &[n, dq])?,
                        qr: z(&format!("{p}.qr"), &[n, dq])?,
                        kr: z(&format!("{p}.kr"), &[n, dq])?,
                        qn: z(&format!("{p}.qn"), &[n, dq])?,
                        kn: z(&format!("{p}.kn"), &[n, dq])?,
                        rstd_q: z(&format!("{p}.rstd_q"), &[n * hh])?,
                        rstd_k: z(&format!("{p}.rstd_k"), &[n * hh])?,
                        o: z(&format!("{p}.o"), &[n, dq])?,
                        lse: z(&format!("{p}.lse"), &[b, hh, t])?,
                    },
                    SubKind::Mlp => Inner::Mlp {
                        g1: z(&format!("{p}.g1"), &[n, f4])?,
                        g2: z(&format!("{p}.g2"), &[n, f4])?,
                        psi: z(&format!("{p}.psi"), &[n, f4])?,
                    },
                };
                Ok(Sub {
                    kind,
                    a: if var.expanded() { Some(z(&format!("{p}.a"), &[n, d])?) } else { None },
                    c: z(&format!("{p}.c"), &[n, d])?,
                    rstd_c: z(&format!("{p}.rstd_c"), &[n])?,
                    h: z(&format!("{p}.h"), &[n, d])?,
                    inner,
                    write: if var.is_ddl() {
                        Some(WriteSaves {
                            // k only where the forward stores it: decoding (its traces).
                            k: z(&format!("{p}.kdir"), &[if keep_k { n * d } else { 1 }])?,
                            rnorm: z(&format!("{p}.rnorm"), &[n])?,
                            beta: z(&format!("{p}.beta"), &[n])?,
                            v: z(&format!("{p}.vval"), &[n, m])?,
                            delta: z(&format!("{p}.delta"), &[n, m])?,
                        })
                    } else {
                        None
                    },
                    dir: if var.vmap() {
                        Some((
                            z(&format!("{p}.q1"), &[n, hk])?,
                            z(&format!("{p}.s1"), &[n, hk])?,
                            z(&format!("{p}.kraw"), &[n, d])?,
                        ))
                    } else {
                        None
                    },
                })
            };
            subs.push([mk(SubKind::Attn)?, mk(SubKind::Mlp)?]);
        }
        let zt = if var.expanded() { Some(z("z", &[n, d])?) } else { None };
        let zn = z("zn", &[n, d])?;
        let rstd_f = z("rstd_f", &[n])?;
        let logits = z("logits", &[n, v])?;
        let lse = z("lse", &[n])?;
        let loss_out = z("loss_out", &[2])?;
        let norm_sq = z("norm_sq", &[1])?;
        // (loss, valid targets, Σ g², ·, then Σ β over the tokens of each delta write).
        let writes = subs.iter().flatten().filter(|s| s.write.is_some()).count();
        let stats = z("stats", &[STATS_BETA + writes])?;
        let betas = z("betas", &[n * writes.max(1)])?;
        let hkn = if var.vmap() { n * hk } else { 1 };
        let ones = Tensor::from_f32(gpu, "ones", &[hkn], &vec![1.0; hkn])?;
        let g = Grads {
            dlogits: z("dlogits", &[n, v])?,
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
            ones,
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
            w_down_rows: if f4 != f {
                (0..c.n_layers).map(|l| z(&format!("b{l}.w_down_rows"), &[d, f4])).collect::<Result<_>>()?
            } else {
                Vec::new()
            },
            de: z("de", &[n, d])?,
        };

        let logits_rb = decode.as_ref().map(|_| Readback::new(&self.gpu, &logits));
        let mut p = Program {
            b,
            t,
            state_f16,
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
            stats_rb: Readback::new(&self.gpu, &stats),
            logits_rb,
            stats,
            betas,
            zero: vec![Op::Zero(self.grads.clone())],
            forward: Vec::new(),
            backward: Vec::new(),
            backward_blocks: Vec::new(),
            finish: Vec::new(),
            optimizer: Vec::new(),
            label_smoothing,
            loss_scale,
            decode,
            _grads: g,
        };
        p.forward = self.record_forward(&p)?;
        if p.decode.is_none() {
            p.forward.extend(self.record_beta_sums(&p)?);
            (p.backward, p.backward_blocks) = self.record_backward(&p)?;
            p.finish = self.record_finish(&p)?;
            p.optimizer = self.record_optimizer(&p, opt)?;
        }
        Ok(p)
    }

    /// A forward-only program over `q` tokens of one sequence bound to a decode cache.
    pub(crate) fn program_decode(
        &self,
        q: usize,
        opt: &AdamWConfig,
        bufs: super::decode::DecodeBufs,
    ) -> Result<Program> {
        self.program_inner(1, q, opt, 0.0, 1.0, Some(bufs))
    }

    fn conv_shape(&self, p: &Program, kernel: usize) -> ConvShape {
        ConvShape { batch: p.b, seq: p.t, d: self.cfg.d_model, m: self.cfg.m(), kernel, state_f16: p.state_f16 }
    }

    fn compress_fwd(
        &self,
        ops: &mut Vec<Op>,
        p: &Program,
        prefix: &str,
        boundary: usize,
        x: &Tensor,
        a: &Tensor,
    ) -> Result<()> {
        let gpu = &*self.gpu;
        let c = &self.cfg;
        let (kappa, rho) = (self.pv(&format!("{prefix}.kernel")), self.pv(&format!("{prefix}.read")));
        if let (Some(db), false) = (&p.decode, c.variant.value_axis()) {
            // Decoding: the compressor sees the last K−1 states of the cache, then the new ones.
            let (hist, xwin, awin) = (&db.hist[boundary], &db.xwin[boundary], &db.awin[boundary]);
            let k1 = c.state_kernel - 1;
            let (dm, n) = (c.d_model * c.m(), p.n());
            ops.push(Op::Copy { src: hist.clone(), src_off: 0, dst: xwin.clone(), dst_off: 0, len: k1 * dm });
            ops.push(Op::Copy { src: x.clone(), src_off: 0, dst: xwin.clone(), dst_off: k1 * dm, len: n * dm });
            let cs =
                ConvShape { batch: 1, seq: k1 + n, d: c.d_model, m: c.m(), kernel: c.state_kernel, state_f16: false };
            run(ops, shortconv::token_forward(gpu, &cs, xwin.view(), kappa, rho, awin.view()))?;
            ops.push(Op::Copy {
                src: awin.clone(),
                src_off: k1 * c.d_model,
                dst: a.clone(),
                dst_off: 0,
                len: n * c.d_model,
            });
            ops.push(Op::Copy { src: xwin.clone(), src_off: n * dm, dst: hist.clone(), dst_off: 0, len: k1 * dm });
            return Ok(());
        }
        if c.variant.value_axis() {
            run(
                ops,
                shortconv::value_forward(gpu, p.n(), c.d_model, c.m(), c.state_kernel, x.view(), kappa, rho, a.view()),
            )
        } else {
            run(ops, shortconv::token_forward(gpu, &self.conv_shape(p, c.state_kernel), x.view(), kappa, rho, a.view()))
        }
    }

    /// `shared`: a block's token-axis compressor, whose two calls (MLP side first) write slots 0
    /// and 1 of one buffer of chunk partials, summed once by the second call (`None`: the readout,
    /// or the value-axis kind, on its own). `de`: the last call of a replicated-embedding model
    /// writes the embedding's gradient Σ_j ∂X directly (`shortconv::sums_into_de`).
    #[allow(clippy::too_many_arguments)]
    fn compress_bwd(
        &self,
        ops: &mut Vec<Op>,
        p: &Program,
        prefix: &str,
        x: &Tensor,
        da: &Tensor,
        dx: &Tensor,
        shared: Option<(&Tensor, usize)>,
        de: Option<&Tensor>,
    ) -> Result<()> {
        let gpu = &*self.gpu;
        let c = &self.cfg;
        let (kappa, rho) = (self.pv(&format!("{prefix}.kernel")), self.pv(&format!("{prefix}.read")));
        let (dkappa, drho) = (self.gv(&format!("{prefix}.kernel")), self.gv(&format!("{prefix}.read")));
        if c.variant.value_axis() {
            run(
                ops,
                shortconv::value_backward(
                    gpu,
                    p.n(),
                    c.d_model,
                    c.m(),
                    c.state_kernel,
                    x.view(),
                    kappa,
                    rho,
                    da.view(),
                    dx.view(),
                    dkappa,
                    drho,
                ),
            )
        } else if let Some((part, slot)) = shared {
            let cs = self.conv_shape(p, c.state_kernel);
            let mut walk = shortconv::token_backward_walk(
                gpu,
                &cs,
                x.view(),
                kappa,
                rho,
                da.view(),
                dx.view(),
                shortconv::token_partial_slot(gpu, &cs, part, slot),
                de.map_or(shortconv::WalkOut::AddToDx, |t| shortconv::WalkOut::SumIntoDe(t.view())),
            )?;
            walk.last_mut().expect("at least one pass").scratch.push(part.clone());
            if slot == 1 {
                walk.push(shortconv::token_backward_finish(gpu, &cs, kappa, rho, dkappa, drho, part, 2)?);
            }
            run(ops, Ok(walk))
        } else {
            run(
                ops,
                shortconv::token_backward(
                    gpu,
                    &self.conv_shape(p, c.state_kernel),
                    x.view(),
                    kappa,
                    rho,
                    da.view(),
                    dx.view(),
                    dkappa,
                    drho,
                ),
            )
        }
    }

    /// `mlp.w_down` of layer `l` with rows of `mlp_stride()` floats: the parameter itself when F
    /// is a multiple of 4, else the program's padded copy of that layer, which the forward
    /// (`copy`) refreshes so the forward and the backward after it see the current weights.
    fn w_down_rows<'a>(&'a self, ops: &mut Vec<Op>, p: &'a Program, l: usize, copy: bool) -> Result<View<'a>> {
        let w = self.pv(&format!("blocks.{l}.mlp.w_down"));
        let Some(rows) = p._grads.w_down_rows.get(l) else { return Ok(w) };
        if copy {
            let (d, f) = (self.cfg.d_model, self.cfg.mlp_hidden);
            run(ops, elementwise::copy_rows(&self.gpu, w, rows.view(), d, f, f, self.cfg.mlp_stride()))?;
        }
        Ok(rows.view())
    }

    fn rope_shape(&self, p: &Program) -> RopeShape {
        RopeShape { rows: p.n(), seq_len: p.t, heads: self.cfg.n_heads, head_dim: self.cfg.head_dim, pos0: 0 }
    }

    fn attn_shape(&self, p: &Program) -> AttnShape {
        AttnShape {
            batch: p.b,
            heads: self.cfg.n_heads,
            head_dim: self.cfg.head_dim,
            q_len: p.t,
            kv_len: p.t,
            kv_stride: p.t,
            q_pos0: 0,
        }
    }

    fn delta_shape(&self, p: &Program) -> DeltaShape {
        DeltaShape {
            n: p.n(),
            d: self.cfg.d_model,
            m: self.cfg.m(),
            k_eps: self.cfg.k_eps as f32,
            v_act: self.v_act(),
            state_f16: p.state_f16,
        }
    }

    fn record_forward(&self, p: &Program) -> Result<Vec<Op>> {
        let gpu = &*self.gpu;
        let c = &self.cfg;
        let var = c.variant;
        let n = p.n();
        let (d, dq, f, hh, hd, hk) = (c.d_model, c.qk_dim(), c.mlp_hidden, c.n_heads, c.head_dim, c.k_mlp_hidden);
        let eps = c.norm_eps as f32;
        let mut ops = Vec::new();
        let o = &mut ops;
        // Delta writes in sublayer order: each stores its β in its column of `p.betas`.
        let writes = p.subs.iter().flatten().filter(|s| s.write.is_some()).count();
        let mut write_j = 0;

        run(o, embedding::forward(gpu, p.tokens.view(), self.pv("tok_emb"), p.e.view(), n, d, c.vocab_size))?;
        if var.expanded() {
            if let (true, Some(db)) = (var.ec(), &p.decode) {
                // Decoding: the expansion sees the last K_e−1 embeddings of the cache.
                let (eh, ew, xw) = (db.ehist.as_ref().unwrap(), db.ewin.as_ref().unwrap(), db.x0win.as_ref().unwrap());
                let k1 = c.embed_kernel - 1;
                let dm = d * c.m();
                o.push(Op::Copy { src: eh.clone(), src_off: 0, dst: ew.clone(), dst_off: 0, len: k1 * d });
                o.push(Op::Copy { src: p.e.clone(), src_off: 0, dst: ew.clone(), dst_off: k1 * d, len: n * d });
                let cs = ConvShape { batch: 1, seq: k1 + n, d, m: c.m(), kernel: c.embed_kernel, state_f16: false };
                run(o, expand::ec_forward(gpu, &cs, ew.view(), self.pv("embed_expand.kernel"), xw.view()))?;
                o.push(Op::Copy { src: xw.clone(), src_off: k1 * dm, dst: p.xs[0].clone(), dst_off: 0, len: n * dm });
                o.push(Op::Copy { src: ew.clone(), src_off: n * d, dst: eh.clone(), dst_off: 0, len: k1 * d });
            } else if var.ec() {
                run(
                    o,
                    expand::ec_forward(
                        gpu,
                        &self.conv_shape(p, c.embed_kernel),
                        p.e.view(),
                        self.pv("embed_expand.kernel"),
                        p.xs[0].view(),
                    ),
                )?;
            } else if p.state_f16 {
                run(o, expand::replicate_forward_f16(gpu, n, d, p.e.view(), p.xs[0].view()))?;
            } else {
                run(o, expand::replicate_forward(gpu, n, d, c.m(), p.e.view(), p.xs[0].view()))?;
            }
        }
        for l in 0..c.n_layers {
            let blk = format!("blocks.{l}");
            for si in 0..2 {
                let s = &p.subs[l][si];
                let x_in = &p.xs[2 * l + si];
                let x_out = &p.xs[2 * l + si + 1];
                let sname = s.kind.name();
                if let Some(a) = &s.a {
                    self.compress_fwd(o, p, &format!("{blk}.compress"), 2 * l + si, x_in, a)?;
                }
                let a = p.a_tensor(l, si);
                let norm_name = format!("{blk}.{sname}_norm.gain");
                run(
                    o,
                    norm::rmsnorm_forward(gpu, a.view(), self.pv(&norm_name), s.c.view(), s.rstd_c.view(), n, d, eps),
                )?;
                match &s.inner {
                    Inner::Attn { q, k, v, qr, kr, qn, kn, rstd_q, rstd_k, o: out, lse } => {
                        mm(o, gpu, Matmul::nt(n, dq, d), s.c.view(), self.pv(&format!("{blk}.attn.wq")), q.view())?;
                        mm(o, gpu, Matmul::nt(n, dq, d), s.c.view(), self.pv(&format!("{blk}.attn.wk")), k.view())?;
                        mm(o, gpu, Matmul::nt(n, dq, d), s.c.view(), self.pv(&format!("{blk}.attn.wv")), v.view())?;
                        let rs = self.rope_shape(p);
                        run(o, rope::forward(gpu, &rs, self.rope_table.view(), q.view(), qr.view()))?;
                        run(o, rope::forward(gpu, &rs, self.rope_table.view(), k.view(), kr.view()))?;
                        run(
                            o,
                            norm::rmsnorm_forward(
                                gpu,
                                qr.view(),
                                self.pv(&format!("{blk}.attn.q_norm.gain")),
                                qn.view(),
                                rstd_q.view(),
                                n * hh,
                                hd,
                                eps,
                            ),
                        )?;
                        run(
                            o,
                            norm::rmsnorm_forward(
                                gpu,
                                kr.view(),
                                self.pv(&format!("{blk}.attn.k_norm.gain")),
                                kn.view(),
                                rstd_k.view(),
                                n * hh,
                                hd,
                                eps,
                            ),
                        )?;
                        let scale = 1.0 / (hd as f32).sqrt();
                        if let Some(db) = &p.decode {
                            // Append the new keys/values to the cache (offsets set per chunk), then
                            // attend over everything cached.
                            let (kc, vc) = (&db.kcache[l], &db.vcache[l]);
                            o.push(Op::Copy { src: kn.clone(), src_off: 0, dst: kc.clone(), dst_off: 0, len: n * dq });
                            o.push(Op::Copy { src: v.clone(), src_off: 0, dst: vc.clone(), dst_off: 0, len: n * dq });
                            let s = AttnShape {
                                batch: 1,
                                heads: hh,
                                head_dim: hd,
                                q_len: n,
                                kv_len: n,
                                kv_stride: db.capacity,
                                q_pos0: 0,
                            };
                            run(
                                o,
                                attention::forward(
                                    gpu,
                                    &s,
                                    scale,
                                    qn.view(),
                                    kc.view(),
                                    vc.view(),
                                    out.view(),
                                    lse.view(),
                                ),
                            )?;
                        } else {
                            run(
                                o,
                                attention::forward_seq(
                                    gpu,
                                    &self.attn_shape(p),
                                    scale,
                                    qn.view(),
                                    kn.view(),
                                    v.view(),
                                    out.view(),
                                    lse.view(),
                                ),
                            )?;
                        }
                        mm(o, gpu, Matmul::nt(n, d, dq), out.view(), self.pv(&format!("{blk}.attn.wo")), s.h.view())?;
                    }
                    Inner::Mlp { g1, g2, psi } => {
                        let f4 = c.mlp_stride();
                        let up = Matmul { c: Operand::row_major(n, f4), ..Matmul::nt(n, f, d) };
                        mm(o, gpu, up, s.c.view(), self.pv(&format!("{blk}.mlp.w_gate")), g1.view())?;
                        mm(o, gpu, up, s.c.view(), self.pv(&format!("{blk}.mlp.w_up")), g2.view())?;
                        run(o, swiglu::forward(gpu, g1.view(), g2.view(), psi.view(), n * f4))?;
                        let w_down = self.w_down_rows(o, p, l, true)?;
                        let down = Matmul {
                            a: Operand::row_major(n, f4),
                            b: Operand::transposed(f4, d),
                            ..Matmul::nt(n, d, f)
                        };
                        mm(o, gpu, down, psi.view(), w_down, s.h.view())?;
                    }
                }
                let dn = format!("{blk}.{sname}_delta");
                match &s.write {
                    None => {
                        // Baseline residual: x_out = x_in + h.
                        o.push(Op::copy(x_in, x_out));
                        run(o, elementwise::add(gpu, s.h.view(), x_out.view(), n * d))?;
                    }
                    Some(w) => {
                        let (kraw, a_in) = match &s.dir {
                            Some((q1, s1, kraw)) => {
                                mm(
                                    o,
                                    gpu,
                                    Matmul::nt(n, hk, d),
                                    s.c.view(),
                                    self.pv(&format!("{dn}.w_k1")),
                                    q1.view(),
                                )?;
                                run(o, swiglu::forward(gpu, q1.view(), p._grads.ones.view(), s1.view(), n * hk))?;
                                mm(
                                    o,
                                    gpu,
                                    Matmul::nt(n, d, hk),
                                    s1.view(),
                                    self.pv(&format!("{dn}.w_k2")),
                                    kraw.view(),
                                )?;
                                (kraw, &s.h)
                            }
                            None => (&s.h, a),
                        };
                        run(
                            o,
                            delta::forward(
                                gpu,
                                &self.delta_shape(p),
                                x_in.view(),
                                kraw.view(),
                                a_in.view(),
                                s.c.view(),
                                self.pv(&format!("{dn}.w_beta")),
                                self.pv(&format!("{dn}.b_beta")),
                                self.pv(&format!("{dn}.w_v")),
                                self.pv(&format!("{dn}.b_v")),
                                x_out.view(),
                                // k only for decoding's traces: the backward recomputes k̃·r.
                                p.decode.is_some().then(|| w.k.view()),
                                w.rnorm.view(),
                                w.beta.view(),
                                w.v.view(),
                                w.delta.view(),
                                Some((p.betas.view(), write_j, writes)),
                            ),
                        )?;
                        write_j += 1;
                    }
                }
            }
        }
        if let Some(zt) = &p.z {
            self.compress_fwd(o, p, "readout", 2 * c.n_layers, p.xs.last().unwrap(), zt)?;
        }
        let z_in = p.z_tensor();
        run(
            o,
            norm::rmsnorm_forward(
                gpu,
                z_in.view(),
                self.pv("final_norm.gain"),
                p.zn.view(),
                p.rstd_f.view(),
                n,
                d,
                eps,
            ),
        )?;
        mm(o, gpu, Matmul::nt(n, c.vocab_size, d), p.zn.view(), self.pv("tok_emb"), p.logits.view())?;
        run(
            o,
            loss::cross_entropy_forward(
                gpu,
                p.logits.view(),
                p.targets.view(),
                p.lse.view(),
                p.loss_out.view(),
                n,
                c.vocab_size,
                p.label_smoothing,
            ),
        )?;
        ops.push(Op::Copy { src: p.loss_out.clone(), src_off: 0, dst: p.stats.clone(), dst_off: 0, len: 2 });
        Ok(ops)
    }

    /// Sublayer backward given dh: writes (or adds, `accumulate`) the input gradient into dc.
    fn sublayer_bwd(
        &self,
        o: &mut Vec<Op>,
        p: &Program,
        l: usize,
        s: &Sub,
        dh: &Tensor,
        accumulate: bool,
    ) -> Result<()> {
        let gpu = &*self.gpu;
        let c = &self.cfg;
        let g = &p._grads;
        let n = p.n();
        let (d, dq, f, hh, hd) = (c.d_model, c.qk_dim(), c.mlp_hidden, c.n_heads, c.head_dim);
        let blk = format!("blocks.{l}");
        match &s.inner {
            Inner::Attn { v, qr, kr, qn, kn, rstd_q, rstd_k, o: out, lse, .. } => {
                mm(
                    o,
                    gpu,
                    Matmul::tn(d, dq, n).accumulate(true),
                    dh.view(),
                    out.view(),
                    self.gv(&format!("{blk}.attn.wo")),
                )?;
                mm(o, gpu, Matmul::nn(n, dq, d), dh.view(), self.pv(&format!("{blk}.attn.wo")), g.do_.view())?;
                let scale = 1.0 / (hd as f32).sqrt();
                run(
                    o,
                    attention::backward(
                        gpu,
                        &self.attn_shape(p),
                        scale,
                        qn.view(),
                        kn.view(),
                        v.view(),
                        out.view(),
                        lse.view(),
                        g.do_.view(),
                        g.dqn.view(),
                        g.dkn.view(),
                        g.dv.view(),
                    ),
                )?;
                run(
                    o,
                    norm::rmsnorm_backward(
                        gpu,
                        qr.view(),
                        self.pv(&format!("{blk}.attn.q_norm.gain")),
                        rstd_q.view(),
                        g.dqn.view(),
                        g.dqr.view(),
                        self.gv(&format!("{blk}.attn.q_norm.gain")),
                        n * hh,
                        hd,
                        false,
                    ),
                )?;
                run(
                    o,
                    norm::rmsnorm_backward(
                        gpu,
                        kr.view(),
                        self.pv(&format!("{blk}.attn.k_norm.gain")),
                        rstd_k.view(),
                        g.dkn.view(),
                        g.dkr.view(),
                        self.gv(&format!("{blk}.attn.k_norm.gain")),
                        n * hh,
                        hd,
                        false,
                    ),
                )?;
                let rs = self.rope_shape(p);
                run(o, rope::backward(gpu, &rs, self.rope_table.view(), g.dqr.view(), g.dq.view()))?;
                run(o, rope::backward(gpu, &rs, self.rope_table.view(), g.dkr.view(), g.dk.view()))?;
                for (dgrad, w) in [(&g.dq, "wq"), (&g.dk, "wk"), (&g.dv, "wv")] {
                    mm(
                        o,
                        gpu,
                        Matmul::tn(dq, d, n).accumulate(true),
                        dgrad.view(),
                        s.c.view(),
                        self.gv(&format!("{blk}.attn.{w}")),
                    )?;
                }
                let mut acc = accumulate;
                for (dgrad, w) in [(&g.dq, "wq"), (&g.dk, "wk"), (&g.dv, "wv")] {
                    mm(
                        o,
                        gpu,
                        Matmul::nn(n, d, dq).accumulate(acc),
                        dgrad.view(),
                        self.pv(&format!("{blk}.attn.{w}")),
                        g.dc.view(),
                    )?;
                    acc = true;
                }
            }
            Inner::Mlp { g1, g2, psi } => {
                // Activations in rows of f4 floats (see `ModelConfig::mlp_stride`).
                let f4 = c.mlp_stride();
                let dw_down = Matmul { b: Operand::row_major(n, f4), ..Matmul::tn(d, f, n) };
                mm(
                    o,
                    gpu,
                    dw_down.pad_reads(true).accumulate(true),
                    dh.view(),
                    psi.view(),
                    self.gv(&format!("{blk}.mlp.w_down")),
                )?;
                let w_down = self.w_down_rows(o, p, l, false)?;
                let dpsi = Matmul { b: Operand::row_major(d, f4), c: Operand::row_major(n, f4), ..Matmul::nn(n, f, d) };
                mm(o, gpu, dpsi.pad_reads(true), dh.view(), w_down, g.dpsi.view())?;
                run(o, swiglu::backward(gpu, g1.view(), g2.view(), g.dpsi.view(), g.dg1.view(), g.dg2.view(), n * f4))?;
                let dw =
                    Matmul { a: Operand::transposed(f4, n), ..Matmul::tn(f, d, n) }.pad_reads(true).accumulate(true);
                mm(o, gpu, dw, g.dg1.view(), s.c.view(), self.gv(&format!("{blk}.mlp.w_gate")))?;
                mm(o, gpu, dw, g.dg2.view(), s.c.view(), self.gv(&format!("{blk}.mlp.w_up")))?;
                let dc = Matmul { a: Operand::row_major(n, f4), ..Matmul::nn(n, d, f) };
                mm(
                    o,
                    gpu,
                    dc.accumulate(accumulate),
                    g.dg1.view(),
                    self.pv(&format!("{blk}.mlp.w_gate")),
                    g.dc.view(),
                )?;
                mm(o, gpu, dc.accumulate(true), g.dg2.view(), self.pv(&format!("{blk}.mlp.w_up")), g.dc.view())?;
            }
        }
        Ok(())
    }

    fn record_backward(&self, p: &Program) -> Result<(Vec<Op>, Vec<(usize, usize)>)> {
        let gpu = &*self.gpu;
        let c = &self.cfg;
        let var = c.variant;
        let g = &p._grads;
        let n = p.n();
        let (d, hk) = (c.d_model, c.k_mlp_hidden);
        let mut ops = Vec::new();
        let mut blocks_done = Vec::new();
        let o = &mut ops;

        // Head: cross-entropy → logits → tied embedding and final norm.
        run(
            o,
            loss::cross_entropy_backward(
                gpu,
                p.logits.view(),
                p.targets.view(),
                p.lse.view(),
                p.loss_out.view(),
                g.dlogits.view(),
                n,
                c.vocab_size,
                p.label_smoothing,
                p.loss_scale,
            ),
        )?;
        mm(o, gpu, Matmul::tn(c.vocab_size, d, n).accumulate(true), g.dlogits.view(), p.zn.view(), self.gv("tok_emb"))?;
        mm(o, gpu, Matmul::nn(n, d, c.vocab_size), g.dlogits.view(), self.pv("tok_emb"), g.dzn.view())?;
        // dX (the gradient of the current state) ping-pongs between two buffers.
        let mut cur = 0usize;
        if var.expanded() {
            run(
                o,
                norm::rmsnorm_backward(
                    gpu,
                    p.z_tensor().view(),
                    self.pv("final_norm.gain"),
                    p.rstd_f.view(),
                    g.dzn.view(),
                    g.dz.view(),
                    self.gv("final_norm.gain"),
                    n,
                    d,
                    false,
                ),
            )?;
            // The readout's gradient starts the state's: written by the one-walk kernel, else
            // added into a zeroed ∂X.
            let cs = self.conv_shape(p, c.state_kernel);
            if !var.value_axis() && shortconv::sums_into_de(gpu, &cs) {
                let (kappa, rho) = (self.pv("readout.kernel"), self.pv("readout.read"));
                let (dkappa, drho) = (self.gv("readout.kernel"), self.gv("readout.read"));
                run(
                    o,
                    shortconv::token_backward_out(
                        gpu,
                        &cs,
                        p.xs.last().unwrap().view(),
                        kappa,
                        rho,
                        g.dz.view(),
                        g.dx[cur].view(),
                        dkappa,
                        drho,
                        shortconv::WalkOut::WriteDx,
                    ),
                )?;
            } else {
                o.push(Op::Zero(g.dx[cur].clone()));
                self.compress_bwd(o, p, "readout", p.xs.last().unwrap(), &g.dz, &g.dx[cur], None, None)?;
            }
        } else {
            run(
                o,
                norm::rmsnorm_backward(
                    gpu,
                    p.z_tensor().view(),
                    self.pv("final_norm.gain"),
                    p.rstd_f.view(),
                    g.dzn.view(),
                    g.dx[cur].view(),
                    self.gv("final_norm.gain"),
                    n,
                    d,
                    false,
                ),
            )?;
        }

        // Replicated embedding: the last compressor call writes ∂e = Σ_j ∂X⁰ itself.
        let fuse_rep = var.expanded()
            && !var.ec()
            && !var.value_axis()
            && shortconv::sums_into_de(gpu, &self.conv_shape(p, c.state_kernel));
        for l in (0..c.n_layers).rev() {
            let blk = format!("blocks.{l}");
            // The block's compressor: both calls' chunk partials in one buffer, one finish.
            let shared = if var.expanded() && !var.value_axis() {
                Some(shortconv::token_partials(gpu, &self.conv_shape(p, c.state_kernel), 2)?)
            } else {
                None
            };
            for si in (0..2).rev() {
                let s = &p.subs[l][si];
                let x_in = &p.xs[2 * l + si];
                let a = p.a_tensor(l, si);
                let sname = s.kind.name();
                let norm_name = format!("{blk}.{sname}_norm.gain");
                let dn = format!("{blk}.{sname}_delta");
                match &s.write {
                    None => {
                        // Baseline: dh = dX; dX += RMSNorm backward of the sublayer's input grad.
                        let dxc = &g.dx[cur];
                        self.sublayer_bwd(o, p, l, s, dxc, false)?;
                        run(
                            o,
                            norm::rmsnorm_backward(
                                gpu,
                                a.view(),
                                self.pv(&norm_name),
                                s.rstd_c.view(),
                                g.dc.view(),
                                dxc.view(),
                                self.gv(&norm_name),
                                n,
                                d,
                                true,
                            ),
                        )?;
                    }
                    Some(w) => {
                        let (dxc, dxn) = (&g.dx[cur], &g.dx[1 - cur]);
                        // The block compressor's backward from ∂a (`g.da`) into ∂X (expanded variants).
                        let block_compress = |o: &mut Vec<Op>| {
                            self.compress_bwd(
                                o,
                                p,
                                &format!("{blk}.compress"),
                                x_in,
                                &g.da,
                                dxn,
                                shared.as_ref().map(|t| (t, 1 - si)),
                                (fuse_rep && l == 0 && si == 0).then_some(&g.de),
                            )
                        };
                        let vmap = s.dir.is_some();
                        let (kraw, a_in, dkraw_buf, da_buf) = match &s.dir {
                            Some((_, _, kraw)) => (kraw, &s.h, &g.dkraw, &g.dh),
                            None => (&s.h, a, &g.dh, &g.da),
                        };
                        // CPU adapters: the heads' backward goes into the norm backward below.
                        let (w_beta, w_v) = (self.pv(&format!("{dn}.w_beta")), self.pv(&format!("{dn}.w_v")));
                        let fold = !vmap
                            && norm::folds_heads(
                                gpu,
                                n,
                                d,
                                c.m(),
                                &[
                                    &a.view(),
                                    &self.pv(&norm_name),
                                    &g.dc.view(),
                                    &g.da.view(),
                                    &dxn.view(),
                                    &w_beta,
                                    &w_v,
                                ],
                            );
                        let mut heads = None;
                        if fold {
                            let (main, hdz, hdu) = delta::backward_write(
                                gpu,
                                &self.delta_shape(p),
                                dxc.view(),
                                x_in.view(),
                                kraw.view(),
                                w.rnorm.view(),
                                w.beta.view(),
                                w.v.view(),
                                w.delta.view(),
                                dxn.view(),
                                dkraw_buf.view(),
                            )?;
                            run(o, Ok(vec![main]))?;
                            heads = Some((hdz, hdu));
                        } else {
                            run(
                                o,
                                delta::backward(
                                    gpu,
                                    &self.delta_shape(p),
                                    dxc.view(),
                                    x_in.view(),
                                    kraw.view(),
                                    w.rnorm.view(),
                                    w.beta.view(),
                                    w.v.view(),
                                    w.delta.view(),
                                    a_in.view(),
                                    s.c.view(),
                                    w_beta,
                                    w_v,
                                    dxn.view(),
                                    dkraw_buf.view(),
                                    da_buf.view(),
                                    g.dc.view(),
                                    self.gv(&format!("{dn}.w_beta")),
                                    self.gv(&format!("{dn}.b_beta")),
                                    self.gv(&format!("{dn}.w_v")),
                                    self.gv(&format!("{dn}.b_v")),
                                    false,
                                ),
                            )?;
                        }
                        if let Some((q1, s1, _)) = &s.dir {
                            // Direction branch: kraw = W_k2 silu(W_k1 c).
                            mm(
                                o,
                                gpu,
                                Matmul::tn(d, hk, n).accumulate(true),
                                g.dkraw.view(),
                                s1.view(),
                                self.gv(&format!("{dn}.w_k2")),
                            )?;
                            mm(
                                o,
                                gpu,
                                Matmul::nn(n, hk, d),
                                g.dkraw.view(),
                                self.pv(&format!("{dn}.w_k2")),
                                g.ds.view(),
                            )?;
                            run(
                                o,
                                swiglu::backward(
                                    gpu,
                                    q1.view(),
                                    g.ones.view(),
                                    g.ds.view(),
                                    g.dq1.view(),
                                    g.dscratch.view(),
                                    n * hk,
                                ),
                            )?;
                            mm(
                                o,
                                gpu,
                                Matmul::tn(hk, d, n).accumulate(true),
                                g.dq1.view(),
                                s.c.view(),
                                self.gv(&format!("{dn}.w_k1")),
                            )?;
                            mm(
                                o,
                                gpu,
                                Matmul::nn(n, d, hk).accumulate(true),
                                g.dq1.view(),
                                self.pv(&format!("{dn}.w_k1")),
                                g.dc.view(),
                            )?;
                        }
                        // The sublayer's input gradient adds to the gate's (and direction MLP's) dc
                        // (or starts dc when the norm backward takes the heads in).
                        self.sublayer_bwd(o, p, l, s, &g.dh, heads.is_none())?;
                        if vmap {
                            if var.expanded() {
                                run(
                                    o,
                                    norm::rmsnorm_backward(
                                        gpu,
                                        a.view(),
                                        self.pv(&norm_name),
                                        s.rstd_c.view(),
                                        g.dc.view(),
                                        g.da.view(),
                                        self.gv(&norm_name),
                                        n,
                                        d,
                                        false,
                                    ),
                                )?;
                                block_compress(o)?;
                            } else {
                                run(
                                    o,
                                    norm::rmsnorm_backward(
                                        gpu,
                                        a.view(),
                                        self.pv(&norm_name),
                                        s.rstd_c.view(),
                                        g.dc.view(),
                                        dxn.view(),
                                        self.gv(&norm_name),
                                        n,
                                        d,
                                        true,
                                    ),
                                )?;
                            }
                        } else if let Some((hdz, hdu)) = &heads {
                            // ∂c = dc + ∂z w_β, ∂a = its norm backward + W_vᵀ∂u, and the heads'
                            // parameter gradients, in the norm's two passes.
                            let terms = norm::HeadTerms {
                                m: c.m(),
                                dz: hdz.view(),
                                du: hdu.view(),
                                w_beta,
                                w_v,
                                dw_beta: self.gv(&format!("{dn}.w_beta")),
                                db_beta: self.gv(&format!("{dn}.b_beta")),
                                dw_v: self.gv(&format!("{dn}.w_v")),
                                db_v: self.gv(&format!("{dn}.b_v")),
                            };
                            // d_v = 1 (the state is [N, d]): straight into the state's gradient.
                            let (da_out, add) = if var.expanded() { (&g.da, false) } else { (dxn, true) };
                            run(
                                o,
                                norm::rmsnorm_backward_heads(
                                    gpu,
                                    a.view(),
                                    self.pv(&norm_name),
                                    s.rstd_c.view(),
                                    g.dc.view(),
                                    da_out.view(),
                                    self.gv(&norm_name),
                                    n,
                                    d,
                                    add,
                                    &terms,
                                ),
                            )?;
                            if var.expanded() {
                                block_compress(o)?;
                            }
                        } else {
                            // da holds the value head's W_vᵀ∂u; add the norm's input gradient.
                            run(
                                o,
                                norm::rmsnorm_backward(
                                    gpu,
                                    a.view(),
                                    self.pv(&norm_name),
                                    s.rstd_c.view(),
                                    g.dc.view(),
                                    g.da.view(),
                                    self.gv(&norm_name),
                                    n,
                                    d,
                                    true,
                                ),
                            )?;
                            if var.expanded() {
                                block_compress(o)?;
                            } else {
                                run(o, elementwise::add(gpu, g.da.view(), dxn.view(), n * d))?;
                            }
                        }
                        cur = 1 - cur;
                    }
                }
            }
            blocks_done.push((o.len(), l));
        }
        // Embedding: through the expansion, then scatter-add into the tied table.
        let de = if var.expanded() {
            if var.ec() {
                run(
                    o,
                    expand::ec_backward(
                        gpu,
                        &self.conv_shape(p, c.embed_kernel),
                        p.e.view(),
                        self.pv("embed_expand.kernel"),
                        g.dx[cur].view(),
                        g.de.view(),
                        self.gv("embed_expand.kernel"),
                    ),
                )?;
            } else {
                if !fuse_rep {
                    run(o, expand::replicate_backward(gpu, n, d, c.m(), g.dx[cur].view(), g.de.view()))?;
                }
            }
            &g.de
        } else {
            &g.dx[cur]
        };
        run(o, embedding::backward(gpu, p.emb_index.view(), de.view(), self.gv("tok_emb"), n, d, c.vocab_size))?;
        Ok((ops, blocks_done))
    }

    /// Σ β over the tokens of every delta write into `stats[STATS_BETA..]`, at the end of the
    /// forward: the metrics get each sublayer's mean β from the step's one readback.
    fn record_beta_sums(&self, p: &Program) -> Result<Vec<Op>> {
        let mut ops = Vec::new();
        let n = p.b * p.t;
        let writes = p.subs.iter().flatten().filter(|s| s.write.is_some()).count();
        if writes == 0 {
            return Ok(ops);
        }
        // The forward put each write's β in a column of `betas`: one column sum for all of them.
        let sums = Tensor::zeros(&self.gpu, "beta_sums", &[writes], crate::gpu::DType::F32)?;
        run(&mut ops, reduce::col_sum(&self.gpu, p.betas.view(), sums.view(), n, writes, false))?;
        ops.push(Op::Copy { src: sums, src_off: 0, dst: p.stats.clone(), dst_off: STATS_BETA, len: writes });
        Ok(ops)
    }

    fn record_finish(&self, p: &Program) -> Result<Vec<Op>> {
        let mut ops = Vec::new();
        run(&mut ops, reduce::sum_squares(&self.gpu, &self.grads, self.layout.total, p.norm_sq.view()))?;
        ops.push(Op::Copy { src: p.norm_sq.clone(), src_off: 0, dst: p.stats.clone(), dst_off: 2, len: 1 });
        Ok(ops)
    }

    fn record_optimizer(&self, p: &Program, opt: &AdamWConfig) -> Result<Vec<Dispatch>> {
        adamw::step(
            &self.gpu,
            &self.params,
            &self.grads,
            &self.adam_m,
            &self.adam_v,
            self.decay_mask.view(),
            p.norm_sq.view(),
            self.layout.total,
            opt,
        )
    }

    /// Updates the per-step optimizer values (learning rate, step number).
    pub fn set_optimizer_step(&self, p: &Program, opt: &AdamWConfig) -> Result<()> {
        adamw::set_step(&self.gpu, &p.optimizer, opt)
    }

    /// Records program parts and optionally the optimizer into one recording.
    fn record(&self, parts: &[&[Op]], optimizer: Option<&[Dispatch]>) -> Recorder<'_> {
        let mut r = Recorder::new(&self.gpu);
        for ops in parts {
            r.ops(ops);
        }
        if let Some(ds) = optimizer {
            let refs: Vec<&Dispatch> = ds.iter().collect();
            r.record(&refs);
        }
        r
    }

    /// Runs program parts (and optionally the optimizer) in one submit and waits.
    pub fn run(&self, parts: &[&[Op]], optimizer: Option<&[Dispatch]>) -> Result<()> {
        self.record(parts, optimizer).submit()?;
        self.gpu.wait()
    }

    /// [`Model::run`] that also copies the program's `stats` to the host in the same submit
    /// (no second submit, no allocation) and returns them: (loss, valid targets, Σ g², ·).
    pub fn run_read(&self, p: &Program, parts: &[&[Op]], optimizer: Option<&[Dispatch]>) -> Result<Vec<f32>> {
        let mut r = self.record(parts, optimizer);
        r.read_into(&p.stats_rb);
        r.submit()?;
        p.stats_rb.read_f32(&self.gpu)
    }

    /// Forward, backward and gradient norm without an optimizer step (gradients left in
    /// `grads`); returns (loss, grad norm).
    pub fn forward_backward(&self, p: &Program) -> Result<(f32, f32)> {
        let s = self.run_read(p, &[&p.zero, &p.forward, &p.backward, &p.finish], None)?;
        Ok((s[0], s[2].max(0.0).sqrt()))
    }

    /// Forward only; returns (mean loss, valid targets).
    pub fn eval_loss(&self, p: &Program) -> Result<(f32, f32)> {
        let s = self.run_read(p, &[&p.forward], None)?;
        Ok((s[0], s[1]))
    }

    /// One training step with a single batch (already set with [`Program::set_batch`]):
    /// forward, backward, norm and AdamW in one submit that also copies the statistics to the
    /// host; returns (loss, grad norm before clipping).
    pub fn train_step(&self, p: &Program, opt: &AdamWConfig) -> Result<(f32, f32)> {
        self.set_optimizer_step(p, opt)?;
        let s = self.run_read(p, &[&p.zero, &p.forward, &p.backward, &p.finish], Some(&p.optimizer))?;
        Ok((s[0], s[2].max(0.0).sqrt()))
    }
}

/// Index of the first β sum in a training program's `stats` (see [`Program::stats`]).
pub const STATS_BETA: usize = 4;

/// Mean β of every delta write (sublayer order) from a training step's statistics
/// ([`Model::run_read`]'s result) for a program of `tokens` tokens; empty for the baseline.
pub fn beta_means_of(stats: &[f32], tokens: usize) -> Vec<f64> {
    stats.iter().skip(STATS_BETA).map(|&s| s as f64 / tokens.max(1) as f64).collect()
}

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
fn k_pieces_scratch_elems(layout: &Layout, n: usize) -> usize {
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
