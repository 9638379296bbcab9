//! Programs: the activations of one batch shape and the op lists recorded over them once, then
//! replayed every step (one submit, no allocation, one small readback). A [`Program`] is closed:
//! its users choose which [`Parts`] run, read the statistics and the saves, and never compose op
//! lists by hand.

use crate::gpu::{Dispatch, Op, Readback, Recorder, Result, Tensor};
use crate::kernels::adamw::{self, AdamWConfig};
use crate::kernels::{matmul, reduce};

use super::acts::{Acts, Purpose, STATS_BETA};
use super::layers::{self, Objective, Rec};
use super::memory::k_pieces_scratch_elems;
use super::model::Model;

/// Which parts of a program one submit runs, in this order: zero the gradients, forward,
/// backward (adds this batch's gradients), finish (gradient norm and the step's statistics),
/// optimizer (AdamW).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parts {
    pub zero: bool,
    pub forward: bool,
    pub backward: bool,
    pub finish: bool,
    pub optimizer: bool,
}

impl Parts {
    /// Forward only (evaluation; the loss in the statistics).
    pub const FORWARD: Parts = Parts { zero: false, forward: true, backward: false, finish: false, optimizer: false };
    /// Forward and backward of one batch into zeroed gradients, with the gradient norm.
    pub const GRADIENTS: Parts = Parts { zero: true, forward: true, backward: true, finish: true, optimizer: false };
    /// A whole training step on one batch.
    pub const STEP: Parts = Parts { zero: true, forward: true, backward: true, finish: true, optimizer: true };
    /// The optimizer alone (after gradients were accumulated or exchanged).
    pub const OPTIMIZER: Parts = Parts { zero: false, forward: false, backward: false, finish: false, optimizer: true };
    /// Gradient norm, statistics and the optimizer (after the last micro-batch).
    pub const FINISH_STEP: Parts =
        Parts { zero: false, forward: false, backward: false, finish: true, optimizer: true };
}

/// Everything bound for one batch shape (B, T): activations and the recorded op lists.
pub struct Program {
    acts: Acts,
    zero: Vec<Op>,
    forward: Vec<Op>,
    /// A training program with a chunked head, whose forward computes the logits' gradient
    /// too: the head's range in `forward`, and the head without the gradient, which a
    /// forward-only run (evaluation) records in its place.
    eval_head: Option<(std::ops::Range<usize>, Vec<Op>)>,
    backward: Vec<Op>,
    /// `(end, block)`: after `backward[..end]` no later backward op writes the gradients of
    /// `blocks.{block}.*` (blocks in the order the backward finishes them: last block first).
    backward_blocks: Vec<(usize, usize)>,
    finish: Vec<Op>,
    optimizer: Vec<Dispatch>,
    /// After AdamW in f16: the parameters' f16 copy rewritten from the updated parameters.
    refresh16: Vec<Dispatch>,
    /// The loss objective it was recorded with (its gradient scale is the base of
    /// [`Program::set_loss_scale`]).
    obj: Objective,
    /// `stats`' persistent staging copy, filled in the same submit as the step.
    stats_rb: Readback,
    /// Each token's loss `[B·T]` of the last forward (programs with a loss head).
    row_loss: Option<Tensor>,
    /// [`Scoring::Ranks`]: each token's scores `[B·T, 4]` of the last forward.
    row_ranks: Option<Tensor>,
    /// [`Scoring::Lens`]: the head's rows over every earlier state.
    lens: Option<LensRows>,
    /// The inputs and statistics of an accumulated step's micro-batches (made on first use).
    micro: std::sync::Mutex<Option<MicroInputs>>,
}

/// What a loss program's head measures besides the loss ([`Model::loss_program_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scoring {
    /// The loss (and the row losses) alone.
    Loss,
    /// Also every token's scores: its rank among the logits, the likeliest token, that token's
    /// log p and the entropy ([`Program::row_ranks`]; one more pass over the logits; `ddl
    /// eval`'s accuracy and calibration).
    Ranks,
    /// The scores and a logit lens ([`Program::lens`]): before the model's own head, the same
    /// head over each earlier state X_0 (the embedding) … X_2L−1, its rows kept per state. The
    /// model's loss, row losses and scores are those without the lens, to the bit; the lens
    /// costs 2L more heads per batch.
    Lens,
}

/// A logit lens's rows ([`Scoring::Lens`]): the head (readout compressor in the expanded
/// variants, final norm, tied embedding, loss and scores) over each state X_0 … X_2L−1 that a
/// sublayer's write leaves, as the model's own head reads X_2L.
pub struct LensRows {
    /// Each token's loss per state: `[2L, B·T]`, state s's rows at s·B·T (0 where the target is
    /// ignored), as [`Program::row_losses`].
    pub loss: Tensor,
    /// Each token's scores per state: `[2L, B·T, 4]`, as [`Program::row_ranks`].
    pub ranks: Tensor,
}

/// Every micro-batch of an accumulated step, uploaded at once: tokens, targets and embedding
/// indices side by side, copied into the program's inputs before each micro-batch's pass, and a
/// slot of statistics per micro-batch, read back once.
struct MicroInputs {
    k: usize,
    tokens: Tensor,
    targets: Tensor,
    index: Tensor,
    stats: Tensor,
    stats_rb: Readback,
}

impl Model {
    /// A training program for batches of `b` sequences of `t` tokens, with the config's
    /// objective: activations, forward, backward, finish and optimizer.
    pub fn program(&self, b: usize, t: usize, opt: &AdamWConfig) -> Result<Program> {
        let obj = Objective { label_smoothing: self.cfg.label_smoothing as f32, loss_scale: 1.0 };
        self.program_with(b, t, opt, obj)
    }

    /// [`Model::program`] with an explicit objective (the gradient scale is 1/k when k
    /// micro-batches accumulate into one step).
    pub fn program_with(&self, b: usize, t: usize, opt: &AdamWConfig, obj: Objective) -> Result<Program> {
        Program::new(self, b, t, Some(opt), obj, Purpose::Train, None, false, false)
    }

    /// A forward-only program (evaluation, β statistics): no gradient scratch, no optimizer,
    /// no label smoothing.
    pub fn forward_program(&self, b: usize, t: usize) -> Result<Program> {
        Program::new(
            self,
            b,
            t,
            None,
            Objective { label_smoothing: 0.0, loss_scale: 1.0 },
            Purpose::Forward,
            None,
            false,
            false,
        )
    }

    /// [`Model::forward_program`] for the loss alone (`ddl eval`): the LM head in slices of
    /// `head_chunk` rows (0 = all at once; as [`Model::set_head_chunk`] slices a training
    /// program's), so that it never holds the batch's logits — the same loss, to the bit, in
    /// one slice's logits instead of B·T rows'; its [`Program::logits`] hold the last slice.
    pub fn loss_program(&self, b: usize, t: usize, head_chunk: usize) -> Result<Program> {
        self.loss_program_with(b, t, head_chunk, None, Scoring::Loss)
    }

    /// [`Model::loss_program`] with interventions on the writes: the map of every sublayer
    /// (2l + sublayer, [`crate::model::Interventions::maps`]) in its delta write's uniform, as
    /// decoding takes them (`ddl eval --intervene`, `--ablate`; None: the model as trained), and
    /// what its head measures besides the loss ([`Scoring`]).
    pub fn loss_program_with(
        &self,
        b: usize,
        t: usize,
        head_chunk: usize,
        maps: Option<&[crate::kernels::delta::BetaMap]>,
        scoring: Scoring,
    ) -> Result<Program> {
        let obj = Objective { label_smoothing: 0.0, loss_scale: 1.0 };
        if let Some(m) = maps
            && m.len() != 2 * self.cfg.n_layers
        {
            return Err(crate::gpu::GpuError::Shape(format!(
                "{} write maps for a model of {} sublayers",
                m.len(),
                2 * self.cfg.n_layers
            )));
        }
        let (ranks, lens) = match scoring {
            Scoring::Loss => (false, false),
            Scoring::Ranks => (true, false),
            Scoring::Lens => (true, true),
        };
        Program::new(self, b, t, None, obj, Purpose::Loss(head_chunk), maps, ranks, lens)
    }

    /// A forward-only program (no label smoothing) over the activations of `train`: it allocates
    /// nothing but its tokens' scores ([`Program::row_ranks`], for the validation accuracy), so
    /// evaluation during training needs no second set of activations. Its runs overwrite
    /// `train`'s activations (a training step recomputes them from its batch).
    pub fn forward_program_sharing(&self, train: &Program) -> Result<Program> {
        let obj = Objective { label_smoothing: 0.0, loss_scale: 1.0 };
        Program::build(self, train.acts.clone(), None, obj, None, true, false)
    }

    /// Updates the per-step optimizer values (learning rate, step number).
    pub fn set_optimizer_step(&self, p: &Program, opt: &AdamWConfig) -> Result<()> {
        adamw::set_step(&self.gpu, &p.optimizer, opt)
    }

    /// Forward, backward and gradient norm without an optimizer step (gradients left in
    /// `grads`); returns (loss, grad norm).
    pub fn forward_backward(&self, p: &Program) -> Result<(f32, f32)> {
        let s = p.run(self, Parts::GRADIENTS)?;
        Ok((s[0], s[2].max(0.0).sqrt()))
    }

    /// Forward only; returns (mean loss, valid targets).
    pub fn eval_loss(&self, p: &Program) -> Result<(f32, f32)> {
        let s = p.run(self, Parts::FORWARD)?;
        Ok((s[0], s[1]))
    }

    /// One training step with a single batch (already set with [`Program::set_batch`]):
    /// forward, backward, norm and AdamW in one submit that also copies the statistics to the
    /// host; returns (loss, grad norm before clipping).
    pub fn train_step(&self, p: &Program, opt: &AdamWConfig) -> Result<(f32, f32)> {
        self.set_optimizer_step(p, opt)?;
        let s = p.run(self, Parts::STEP)?;
        Ok((s[0], s[2].max(0.0).sqrt()))
    }
}

impl Program {
    #[allow(clippy::too_many_arguments)]
    fn new(
        model: &Model,
        b: usize,
        t: usize,
        opt: Option<&AdamWConfig>,
        obj: Objective,
        purpose: Purpose,
        maps: Option<&[crate::kernels::delta::BetaMap]>,
        ranks: bool,
        lens: bool,
    ) -> Result<Program> {
        let c = &model.cfg;
        if t > c.max_seq_len {
            return Err(crate::gpu::GpuError::Shape(format!(
                "sequence length {t} exceeds the model's max_seq_len {}",
                c.max_seq_len
            )));
        }
        // The weight gradients' K-pieces scratch at its largest before any product asks for it,
        // so that one buffer serves them all (the plan counts it).
        let kp = k_pieces_scratch_elems(&model.layout, b * t, &[matmul::KSplit::of(&model.gpu)]);
        if kp > 0 {
            model.gpu.shared_scratch(matmul::K_PIECES_SCRATCH, kp)?;
        }
        let acts = Acts::new(model, b, t, purpose)?;
        Program::build(model, acts, opt, obj, maps, ranks, lens)
    }

    /// Records the program's ops over `acts`.
    fn build(
        model: &Model,
        acts: Acts,
        opt: Option<&AdamWConfig>,
        obj: Objective,
        maps: Option<&[crate::kernels::delta::BetaMap]>,
        ranks: bool,
        lens: bool,
    ) -> Result<Program> {
        // (The backward assumes the model's own writes: maps only in forward-only programs.)
        debug_assert!(maps.is_none() || opt.is_none());
        // (The lens reuses the head's scratch before the model's head: forward-only programs.)
        debug_assert!(!lens || opt.is_none());
        let lens = match lens {
            true => {
                let (s, n) = (2 * model.cfg.n_layers, acts.n());
                let gpu = &model.gpu;
                Some(LensRows {
                    loss: Tensor::zeros(gpu, "lens.loss", &[s, n], crate::gpu::DType::F32)?,
                    ranks: Tensor::zeros(gpu, "lens.ranks", &[s, n, 4], crate::gpu::DType::F32)?,
                })
            }
            false => None,
        };
        let mut r = Rec::new(model, &acts, obj, None);
        r.beta_maps = maps;
        r.ranks = ranks || lens.is_some();
        r.lens = lens.as_ref();
        r.grad_head = opt.is_some() && acts.head_chunked();
        let head_at = layers::forward(&mut r)?;
        let head = head_at..r.ops.len();
        let row_loss = r.head_ce.as_ref().map(|ce| ce.row_loss().clone());
        let row_ranks = r.head_ce.as_ref().and_then(|ce| ce.ranks().cloned());
        r.ops.extend(beta_sums(model, &acts)?);
        let forward = std::mem::take(&mut r.ops);
        let eval_head = if r.grad_head {
            let mut e = Rec::new(model, &acts, obj, None);
            e.head_ce = r.head_ce.take();
            layers::head::forward(&mut e)?;
            Some((head, e.ops))
        } else {
            None
        };
        let (mut backward, mut backward_blocks, mut finish, mut optimizer) = Default::default();
        if let Some(opt) = opt {
            backward_blocks = layers::backward(&mut r)?;
            backward = std::mem::take(&mut r.ops);
            finish = finish_ops(model, &acts)?;
            optimizer = adamw::step(
                &model.gpu,
                &adamw::AdamWBufs {
                    params: &model.params,
                    grads: &model.grads,
                    m: &model.adam_m,
                    v: &model.adam_v,
                    decay_mask: model.decay_mask.view(),
                    norm_sq: acts.norm_sq.view(),
                },
                model.layout.total,
                opt,
            )?;
        }
        let refresh16 = match (&model.params16, opt.is_some()) {
            (Some(t), true) => {
                crate::kernels::elementwise::pack_f16(&model.gpu, model.params.view(), t.view(), model.layout.total)?
            }
            _ => Vec::new(),
        };
        let zero = if opt.is_some() { vec![Op::Zero(model.grads.clone())] } else { Vec::new() };
        let stats_rb = Readback::new(&model.gpu, &acts.stats);
        Ok(Program {
            acts,
            zero,
            forward,
            eval_head,
            backward,
            backward_blocks,
            finish,
            optimizer,
            refresh16,
            obj,
            stats_rb,
            row_loss,
            row_ranks,
            lens,
            micro: std::sync::Mutex::new(None),
        })
    }

    /// Multiplies the loss gradient of later runs by `scale` (dynamic loss scaling: the
    /// gradients then carry `scale`, which [`AdamWConfig::grad_scale`] divides out), on top of the
    /// objective's own scale (1 / micro-batches). Rewrites a uniform; ordered before the next
    /// submit.
    pub fn set_loss_scale(&self, model: &Model, scale: f32) -> Result<()> {
        // (A chunked head's loss backward is in the forward.)
        let ds: Vec<&Dispatch> = self
            .forward
            .iter()
            .chain(&self.backward)
            .filter_map(|op| if let Op::Run(d) = op { Some(d) } else { None })
            .collect();
        let n = crate::kernels::loss::set_backward_scale(&model.gpu, &ds, self.obj.loss_scale * scale);
        if n == 0 && self.trains() {
            return Err(crate::gpu::GpuError::Shape("set_loss_scale: the program has no loss backward".into()));
        }
        Ok(())
    }

    /// Sequences per batch.
    pub fn b(&self) -> usize {
        self.acts.b
    }

    /// Tokens per sequence.
    pub fn t(&self) -> usize {
        self.acts.t
    }

    /// Whether the program has a backward and an optimizer (a training program).
    pub fn trains(&self) -> bool {
        !self.optimizer.is_empty()
    }

    /// Tokens (and targets, −1 = ignored) for the next run; builds the embedding index too.
    pub fn set_batch(&self, model: &Model, tokens: &[i32], targets: &[i32]) -> Result<()> {
        self.acts.set_batch(model, tokens, targets)
    }

    /// Each token's loss (nats, label smoothing included; 0 where the target is ignored) as the
    /// last forward wrote it: `[B·T]`, row b·T + t the loss of predicting window b's token
    /// t + 1. `None` for a program without a loss head.
    pub fn row_losses(&self) -> Option<&Tensor> {
        self.row_loss.as_ref()
    }

    /// Each token's scores as the last forward of a [`Scoring::Ranks`] program wrote them:
    /// `[B·T, 4]`, per row (the target's rank among the logits — 1 + how many are larger, 0 where
    /// the target is ignored —, the likeliest token, its log p, the entropy in nats), row b·T + t
    /// for window b's token t + 1. `None` for other programs.
    pub fn row_ranks(&self) -> Option<&Tensor> {
        self.row_ranks.as_ref()
    }

    /// The logit lens's rows of the last forward of a [`Scoring::Lens`] program (`None` for other
    /// programs).
    pub fn lens(&self) -> Option<&LensRows> {
        self.lens.as_ref()
    }

    /// The activations and saves of the last run (β traces, golden comparisons).
    pub fn acts(&self) -> &Acts {
        &self.acts
    }

    /// (loss, valid targets, Σ g², ·, Σ β of each delta write in sublayer order).
    pub fn stats(&self) -> &Tensor {
        &self.acts.stats
    }

    /// The logits [B·T, V] of the last forward (after a forward-only run: a training program's
    /// backward writes their gradient over them). A chunked head's hold the last slice's rows
    /// only ([`Acts::head_rows`]).
    pub fn logits(&self) -> &Tensor {
        &self.acts.logits
    }

    /// Zeroes the gradient buffer (once per optimizer step, before the first micro-batch).
    pub fn zero_ops(&self) -> &[Op] {
        &self.zero
    }

    pub fn forward_ops(&self) -> &[Op] {
        &self.forward
    }

    /// Adds this batch's gradients into the gradient buffer.
    pub fn backward_ops(&self) -> &[Op] {
        &self.backward
    }

    /// The backward cut where blocks' gradients are final, for overlapping their exchange with
    /// the rest of the backward: `(ops, block)` in order (last block first), then the rest with
    /// `None` (embedding, expansion).
    pub fn backward_segments(&self) -> Vec<(&[Op], Option<usize>)> {
        let mut out = Vec::with_capacity(self.backward_blocks.len() + 1);
        let mut start = 0;
        for &(end, l) in &self.backward_blocks {
            out.push((&self.backward[start..end], Some(l)));
            start = end;
        }
        out.push((&self.backward[start..], None));
        out
    }

    /// Gradient norm and the step's statistics into `stats` (after the last micro-batch).
    pub fn finish_ops(&self) -> &[Op] {
        &self.finish
    }

    pub fn optimizer(&self) -> &[Dispatch] {
        &self.optimizer
    }

    /// Records `parts` into `r` (e.g. a profiled recorder).
    pub fn record(&self, r: &mut Recorder, parts: Parts) {
        if parts.zero {
            r.ops(&self.zero);
        }
        match (&self.eval_head, parts.forward, parts.backward) {
            // A forward without its backward leaves the gradients alone.
            (Some((at, head)), true, false) => {
                r.ops(&self.forward[..at.start]);
                r.ops(head);
                r.ops(&self.forward[at.end..]);
            }
            (_, true, _) => r.ops(&self.forward),
            _ => {}
        }
        if parts.backward {
            r.ops(&self.backward);
        }
        if parts.finish {
            r.ops(&self.finish);
        }
        if parts.optimizer {
            let refs: Vec<&Dispatch> = self.optimizer.iter().chain(&self.refresh16).collect();
            r.record(&refs);
        }
    }

    /// Runs `parts` in one submit that also copies `stats` to the host (no second submit, no
    /// allocation) and returns them: (loss, valid targets, Σ g², ·, Σ β per write).
    pub fn run(&self, model: &Model, parts: Parts) -> Result<Vec<f32>> {
        if !self.trains() && (parts.backward || parts.finish || parts.optimizer || parts.zero) {
            return Err(crate::gpu::GpuError::Shape(
                "a forward-only program has no backward, finish or optimizer: make it with Model::program".into(),
            ));
        }
        let mut r = Recorder::new(&model.gpu);
        self.record(&mut r, parts);
        r.read_into(&self.stats_rb);
        r.submit()?;
        self.stats_rb.read_f32(&model.gpu)
    }
}

impl Program {
    /// One optimizer step over several micro-batches (gradient accumulation) in **one submit**:
    /// the micro-batches' tokens, targets and embedding indices are uploaded once, then for each
    /// micro-batch a copy into the program's inputs, its forward and backward (the gradients
    /// add up; zeroed before the first), its statistics copied into its own slot; after the last
    /// the gradient norm and, with `optimize`, AdamW. One readback returns every micro-batch's
    /// statistics (the last one's carries Σ g²). The program's objective should scale the loss
    /// by 1/k ([`Model::program_with`]). Without `optimize` only the forward and backward passes
    /// run (a data-parallel rank exchanges the gradients before the norm and AdamW).
    pub fn run_accumulated(
        &self,
        model: &Model,
        batches: &[(Vec<i32>, Vec<i32>)],
        optimize: bool,
    ) -> Result<Vec<Vec<f32>>> {
        if !self.trains() {
            return Err(crate::gpu::GpuError::Shape("accumulation needs a training program (Model::program)".into()));
        }
        let k = batches.len();
        if k == 0 {
            return Err(crate::gpu::GpuError::Shape("an accumulated step needs at least one micro-batch".into()));
        }
        let gpu = &model.gpu;
        let n = self.acts.n();
        let il = crate::kernels::embedding::index_len(n);
        let sl = self.acts.stats.len();
        let mut guard = self.micro.lock().unwrap_or_else(|p| p.into_inner());
        if guard.as_ref().is_none_or(|m| m.k != k) {
            use crate::gpu::DType;
            let stats = Tensor::zeros(gpu, "micro.stats", &[k * sl], DType::F32)?;
            *guard = Some(MicroInputs {
                k,
                tokens: Tensor::zeros(gpu, "micro.tokens", &[k * n], DType::I32)?,
                targets: Tensor::zeros(gpu, "micro.targets", &[k * n], DType::I32)?,
                index: Tensor::zeros(gpu, "micro.index", &[k * il], DType::U32)?,
                stats_rb: Readback::new(gpu, &stats),
                stats,
            });
        }
        let mi = guard.as_ref().expect("made above");
        let (mut tokens, mut targets, mut index) =
            (Vec::with_capacity(k * n), Vec::with_capacity(k * n), Vec::with_capacity(k * il));
        for (x, y) in batches {
            // The same checks as one batch (ids in the vocabulary, targets or −1).
            self.acts.check_batch(model, x, y)?;
            index.extend(crate::kernels::embedding::build_index(x, model.cfg.vocab_size)?);
            tokens.extend_from_slice(x);
            targets.extend_from_slice(y);
        }
        mi.tokens.write_i32(gpu, &tokens)?;
        mi.targets.write_i32(gpu, &targets)?;
        mi.index.write_u32(gpu, &index)?;
        let a = &self.acts;
        let mut r = Recorder::new(gpu);
        for i in 0..k {
            r.ops(&[
                Op::Copy { src: mi.tokens.clone(), src_off: i * n, dst: a.tokens.clone(), dst_off: 0, len: n },
                Op::Copy { src: mi.targets.clone(), src_off: i * n, dst: a.targets.clone(), dst_off: 0, len: n },
                Op::Copy { src: mi.index.clone(), src_off: i * il, dst: a.emb_index.clone(), dst_off: 0, len: il },
            ]);
            let last = i + 1 == k;
            let parts = Parts {
                zero: i == 0,
                forward: true,
                backward: true,
                finish: last && optimize,
                optimizer: last && optimize,
            };
            self.record(&mut r, parts);
            r.ops(&[Op::Copy { src: a.stats.clone(), src_off: 0, dst: mi.stats.clone(), dst_off: i * sl, len: sl }]);
        }
        r.read_into(&mi.stats_rb);
        r.submit()?;
        let all = mi.stats_rb.read_f32(gpu)?;
        Ok(all.chunks(sl).map(|c| c.to_vec()).collect())
    }
}

/// Σ β over the tokens of every delta write into `stats[STATS_BETA..]`, at the end of the
/// forward: the metrics get each sublayer's mean β from the step's one readback.
fn beta_sums(model: &Model, a: &Acts) -> Result<Vec<Op>> {
    let mut ops = Vec::new();
    let writes = a.writes().count();
    if writes == 0 {
        return Ok(ops);
    }
    // The forward put each write's β in a column of `betas`: one column sum for all of them.
    let sums = Tensor::zeros(&model.gpu, "beta_sums", &[writes], crate::gpu::DType::F32)?;
    ops.extend(
        reduce::col_sum(&model.gpu, a.betas.view(), sums.view(), a.n(), writes, false)?.into_iter().map(Op::Run),
    );
    ops.push(Op::Copy { src: sums, src_off: 0, dst: a.stats.clone(), dst_off: STATS_BETA, len: writes });
    Ok(ops)
}

fn finish_ops(model: &Model, a: &Acts) -> Result<Vec<Op>> {
    let mut ops: Vec<Op> = reduce::sum_squares(&model.gpu, &model.grads, model.layout.total, a.norm_sq.view())?
        .into_iter()
        .map(Op::Run)
        .collect();
    ops.push(Op::Copy { src: a.norm_sq.clone(), src_off: 0, dst: a.stats.clone(), dst_off: 2, len: 1 });
    Ok(ops)
}

/// Mean β of every delta write (sublayer order) from a program's statistics ([`Program::run`]'s
/// result) for a program of `tokens` tokens; empty for the baseline.
pub fn beta_means_of(stats: &[f32], tokens: usize) -> Vec<f64> {
    stats.iter().skip(STATS_BETA).map(|&s| s as f64 / tokens.max(1) as f64).collect()
}
