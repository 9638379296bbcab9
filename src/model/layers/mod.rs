//! The model's layers as forward/backward pairs (as llm.c's `train_gpt2.c` pairs
//! `layernorm_forward` with `layernorm_backward`), each recording bound dispatches into a
//! [`Rec`]: the embedding and its expansion ([`embedding`]), the state compressors
//! ([`compress`]), attention ([`attention`]), the MLP ([`mlp`]), the delta write or residual
//! that closes every sublayer ([`write`]) and the head ([`head`]). [`forward`] and [`backward`]
//! walk them in model order; `super::program` turns their op lists into programs.

pub(crate) mod attention;
pub(crate) mod compress;
pub(crate) mod embedding;
pub(crate) mod head;
pub(crate) mod mlp;
pub(crate) mod write;

use crate::gpu::{Dispatch, Gpu, Op, Result, Tensor, View};
use crate::kernels::attention::AttnShape;
use crate::kernels::delta::DeltaShape;
use crate::kernels::matmul::{Matmul, MatmulElem};
use crate::kernels::rope::RopeShape;
use crate::kernels::shortconv::ConvShape;

use super::acts::{Acts, GradScratch, SubKind};
use super::config::ModelConfig;
use super::decode::DecodeBufs;
use super::model::Model;

/// The loss objective a program records: label smoothing α and the gradient scale (1 / micro-
/// batches when several accumulate into one step).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Objective {
    pub label_smoothing: f32,
    pub loss_scale: f32,
}

/// What one recording pass reads: the model, the program's activations, the objective and, for
/// decode programs, the cache windows; and the ops it records.
pub(crate) struct Rec<'a> {
    pub m: &'a Model,
    pub gpu: &'a Gpu,
    pub c: &'a ModelConfig,
    pub a: &'a Acts,
    pub obj: Objective,
    pub decode: Option<&'a DecodeBufs>,
    pub ops: Vec<Op>,
    /// Per delta write recorded by [`forward`]: (block, sublayer, its ops in `ops`).
    pub writes: Vec<(usize, SubKind, std::ops::Range<usize>)>,
    /// Decode programs with interventions: the β map of every sublayer (2l + sublayer).
    pub beta_maps: Option<&'a [crate::kernels::delta::BetaMap]>,
    /// Decode programs with `k=mean` interventions: the fixed k̃ `[d]` of every sublayer that has
    /// one (2l + sublayer).
    pub k_fixed: Option<&'a [Option<Tensor>]>,
    /// A chunked LM head computes the logits' gradient in the forward (a training program's
    /// forward, not an evaluation over its activations): `head::sliced`.
    pub grad_head: bool,
    /// The head's loss scratch (its row losses among it): made by its first recording, shared by
    /// a second one over the same activations (a training program's forward-only head).
    pub head_ce: Option<crate::kernels::loss::RowSlices>,
    /// The head also scores every row ([`crate::kernels::loss::RowSlices::with_ranks`]).
    pub ranks: bool,
    /// A logit lens: the head over every earlier state too, its rows kept here ([`forward`]).
    pub lens: Option<&'a super::program::LensRows>,
}

impl<'a> Rec<'a> {
    pub fn new(m: &'a Model, a: &'a Acts, obj: Objective, decode: Option<&'a DecodeBufs>) -> Rec<'a> {
        Rec {
            m,
            gpu: &m.gpu,
            c: &m.cfg,
            a,
            obj,
            decode,
            ops: Vec::new(),
            writes: Vec::new(),
            beta_maps: None,
            k_fixed: None,
            grad_head: false,
            head_ce: None,
            ranks: false,
            lens: None,
        }
    }

    /// Appends a launcher's dispatches.
    pub fn run(&mut self, ds: Result<Vec<Dispatch>>) -> Result<()> {
        self.ops.extend(ds?.into_iter().map(Op::Run));
        Ok(())
    }

    /// Records a product; operands larger than one storage binding (the tied LM head) are split.
    pub fn mm(&mut self, m: Matmul, a: View, b: View, c: View) -> Result<()> {
        let ds = m.bind_split(self.gpu, a, b, c);
        self.run(ds)
    }

    /// Records a linear layer's product: f16 operands in f16 programs ([`Acts::half`]).
    pub fn mm_half(&mut self, m: Matmul, a: View, b: View, c: View) -> Result<()> {
        self.mm(m.half(self.a.half), a, b, c)
    }

    /// Records a linear layer's product whose B is the weight `w`: in f16 programs read from the
    /// parameters' f16 copy ([`Model::pv16`]), A rounded as read; else as [`Rec::mm_half`].
    pub fn mm_weight(&mut self, m: Matmul, a: View, w: &str, c: View) -> Result<()> {
        if self.a.half
            && let Some((v, off)) = self.m.pv16(w)
        {
            let b = crate::kernels::matmul::Operand { offset: m.b.offset + off, ..m.b };
            let m = Matmul { b, ..m }.b_elem(MatmulElem::F16).half(true);
            return self.mm(m, a, v, c);
        }
        self.mm_half(m, a, self.pv(w), c)
    }

    pub fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Parameter `name`.
    pub fn pv(&self, name: &str) -> View<'a> {
        self.m.pv(name)
    }

    /// Gradient of parameter `name`.
    pub fn gv(&self, name: &str) -> View<'a> {
        self.m.gv(name)
    }

    /// The training program's gradient scratch.
    pub fn g(&self) -> &'a GradScratch {
        self.a.g()
    }

    pub fn n(&self) -> usize {
        self.a.n()
    }

    pub fn conv_shape(&self, kernel: usize) -> ConvShape {
        ConvShape {
            batch: self.a.b,
            seq: self.a.t,
            d: self.c.d_model,
            m: self.c.m(),
            kernel,
            state_f16: self.a.state_f16,
        }
    }

    pub fn rope_shape(&self) -> RopeShape {
        RopeShape { rows: self.n(), seq_len: self.a.t, heads: self.c.n_heads, head_dim: self.c.head_dim, pos0: 0 }
    }

    pub fn attn_shape(&self) -> AttnShape {
        AttnShape {
            batch: self.a.b,
            heads: self.c.n_heads,
            head_dim: self.c.head_dim,
            q_len: self.a.t,
            kv_len: self.a.t,
            kv_stride: self.a.t,
            q_pos0: 0,
            half: self.a.half,
        }
    }

    pub fn delta_shape(&self) -> DeltaShape {
        DeltaShape {
            n: self.n(),
            d: self.c.d_model,
            m: self.c.m(),
            k_eps: self.c.k_eps as f32,
            v_act: self.m.v_act(),
            state_f16: self.a.state_f16,
            beta: crate::kernels::delta::BetaMap::IDENTITY,
        }
    }
}

/// The whole forward: embedding, every block's two sublayers, head and loss. Returns where the
/// head's ops start in `r.ops`.
pub(crate) fn forward(r: &mut Rec) -> Result<usize> {
    let a = r.a;
    embedding::forward(r)?;
    // Delta writes in sublayer order: each stores its β in its column of `betas`.
    let writes = a.writes().count();
    let mut write_j = 0;
    for l in 0..r.c.n_layers {
        for si in 0..2 {
            let s = &a.subs[l][si];
            if let Some(sa) = &s.a {
                compress::forward(r, &format!("blocks.{l}.compress"), 2 * l + si, &a.xs[2 * l + si], sa)?;
            }
            write::norm_forward(r, l, si)?;
            if s.residual {
                // X_out = X_in, to which the sublayer's last product adds h.
                r.push(Op::copy(&a.xs[2 * l + si], &a.xs[2 * l + si + 1]));
            }
            match s.kind {
                SubKind::Attn => attention::forward(r, l, s)?,
                SubKind::Mlp => mlp::forward(r, l, s)?,
            }
            let start = r.ops.len();
            write::forward(r, l, si, (write_j, writes))?;
            if s.write.is_some() {
                r.writes.push((l, s.kind, start..r.ops.len()));
                write_j += 1;
            }
        }
    }
    if let Some(lens) = r.lens {
        // The logit lens: the head over X_0 … X_2L−1 in turn, each one's row losses and scores
        // copied out before the next overwrites them; the model's own head last, so that its
        // buffers (the program's loss, row losses and scores) hold the model's output.
        let n = r.n();
        for s in 0..2 * r.c.n_layers {
            head::forward_from(r, &a.xs[s])?;
            let ce = r.head_ce.clone().expect("the head's loss scratch");
            r.push(Op::Copy { src: ce.row_loss().clone(), src_off: 0, dst: lens.loss.clone(), dst_off: s * n, len: n });
            if let Some(ranks) = ce.ranks() {
                let dst = lens.ranks.clone();
                r.push(Op::Copy { src: ranks.clone(), src_off: 0, dst, dst_off: 4 * s * n, len: 4 * n });
            }
        }
    }
    let head_at = r.ops.len();
    head::forward(r)?;
    Ok(head_at)
}

/// The whole backward from the loss: head, blocks from the last, embedding. Returns the block
/// boundaries: `(end, block)` where no op after `ops[..end]` writes the gradients of
/// `blocks.{block}.*`.
pub(crate) fn backward(r: &mut Rec) -> Result<Vec<(usize, usize)>> {
    let mut cur = head::backward(r)?;
    let mut blocks_done = Vec::new();
    let fuse_rep = embedding::fuses_into_compressor(r);
    for l in (0..r.c.n_layers).rev() {
        // The block's compressor: both calls' chunk partials in one buffer, one finish.
        let shared = compress::block_partials(r)?;
        for si in (0..2).rev() {
            cur = write::backward(r, l, si, cur, shared.as_ref(), fuse_rep && l == 0 && si == 0)?;
        }
        blocks_done.push((r.ops.len(), l));
    }
    embedding::backward(r, cur, fuse_rep)?;
    Ok(blocks_done)
}
