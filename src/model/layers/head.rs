//! The head: the readout compressor (expanded variants) z = compress(X_2L), the final RMSNorm,
//! the tied LM head logits = norm(z) Eᵀ and the cross-entropy loss (with label smoothing);
//! the loss and its count go to the program's `stats`. A chunked head (training programs with
//! [`crate::model::Model::set_head_chunk`]) computes logits, loss and the logits' gradient in
//! slices of rows in the forward ([`sliced`]); its backward starts at the final norm. In f16
//! programs the head's products take f16 operands (form `head_f16`; the logits and the loss stay
//! float32).

use crate::gpu::{Op, Result, View};
use crate::kernels::matmul::Matmul;
use crate::kernels::reduce::chunks;
use crate::kernels::{loss, norm, shortconv};

use super::{Rec, compress};

pub(crate) fn forward(r: &mut Rec) -> Result<()> {
    let a = r.a;
    forward_from(r, a.xs.last().unwrap())
}

/// The head over the state `x` (the model's own: the last state X_2L; a logit lens: an earlier
/// one, [`super::forward`]), into the head's buffers: z (expanded variants), zn, the logits, the
/// row losses (and scores) and the loss.
pub(crate) fn forward_from(r: &mut Rec, x: &crate::gpu::Tensor) -> Result<()> {
    let (gpu, c, a) = (r.gpu, r.c, r.a);
    let (n, d, v) = (r.n(), c.d_model, c.vocab_size);
    if let Some(zt) = &a.z {
        compress::forward(r, "readout", 2 * c.n_layers, x, zt)?;
    }
    let gain = r.pv("final_norm.gain");
    r.run(norm::rmsnorm_forward(
        gpu,
        a.z.as_ref().unwrap_or(x).view(),
        gain,
        a.zn.view(),
        a.rstd_f.view(),
        n,
        d,
        c.norm_eps as f32,
    ))?;
    if a.head_chunked() {
        return sliced(r);
    }
    by_emb(r, Matmul::nt(n, v, d), a.zn.view(), a.logits.view())?;
    // (`cross_entropy_forward`'s dispatches, with its row losses kept for the program.)
    let ce = row_slices(r)?;
    let io = a.ce_io();
    r.run(ce.forward_rows(gpu, io.logits, io.targets, io.lse, 0..n))?;
    r.run(ce.finish(gpu, io.targets, io.out))?;
    r.push(Op::Copy { src: a.loss_out.clone(), src_off: 0, dst: a.stats.clone(), dst_off: 0, len: 2 });
    Ok(())
}

/// The head in slices of `head_rows` rows, one buffer of logits for all: per slice its logits
/// zn[rows] Eᵀ and its rows' losses and, in a training program's forward ([`Rec::grad_head`]),
/// the logits' gradient written over them, its share of ∂E (added to the tied embedding's
/// gradient) and its rows of ∂zn, before the next slice overwrites the logits. The valid count
/// is taken before the first slice (each slice's gradient divides by it) and the mean after the
/// last. Every row's loss and gradient are the unsliced head's bits; ∂E adds the slices'
/// products in order.
fn sliced(r: &mut Rec) -> Result<()> {
    let (gpu, c, a) = (r.gpu, r.c, r.a);
    let (n, d, v, rows) = (r.n(), c.d_model, c.vocab_size, a.head_rows);
    let ce = row_slices(r)?;
    let (targets, lse, out) = (a.targets.view(), a.lse.view(), a.loss_out.view());
    if r.grad_head {
        r.run(ce.count(gpu, targets, out))?;
    }
    for (r0, rr) in chunks(n, rows) {
        let logits = a.logits.view().sub(0, rr * v);
        let mut head = Matmul::nt(rr, v, d);
        head.a.offset = r0 * d;
        by_emb(r, head, a.zn.view(), logits)?;
        r.run(ce.forward_rows(gpu, logits, targets, lse, r0..r0 + rr))?;
        if r.grad_head {
            let io = loss::CeIo { logits, ..a.ce_io() };
            r.run(ce.backward_rows(gpu, io, logits, r0..r0 + rr, r.obj.loss_scale))?;
            let mut de = Matmul::tn(v, d, rr).accumulate(true);
            de.b.offset = r0 * d;
            head_mm(r, de, logits, a.zn.view(), r.gv("tok_emb"))?;
            let mut dzn = Matmul::nn(rr, d, v);
            dzn.c.offset = r0 * d;
            by_emb(r, dzn, logits, r.g().dzn.view())?;
        }
    }
    r.run(ce.finish(gpu, targets, out))?;
    r.push(Op::Copy { src: a.loss_out.clone(), src_off: 0, dst: a.stats.clone(), dst_off: 0, len: 2 });
    Ok(())
}

/// The loss's scratch (its row losses among it): made by the head's first recording, shared by
/// a second one over the same activations (a training program's forward-only head), and kept in
/// [`Rec::head_ce`] for the program ([`crate::model::Program::row_losses`]).
fn row_slices(r: &mut Rec) -> Result<loss::RowSlices> {
    let ce = match &r.head_ce {
        Some(ce) => ce.clone(),
        None if r.ranks => loss::RowSlices::with_ranks(r.gpu, &ce_shape(r))?,
        None => loss::RowSlices::new(r.gpu, &ce_shape(r))?,
    };
    r.head_ce = Some(ce.clone());
    Ok(ce)
}

/// The loss's sizes: a row per token, the vocabulary, the objective's label smoothing.
fn ce_shape(r: &Rec) -> loss::CeShape {
    loss::CeShape { n: r.n(), vocab: r.c.vocab_size, label_smoothing: r.obj.label_smoothing }
}

/// Whether the head's products take f16 operands: f16 programs with the form `head_f16` (the
/// logits, their gradient and the loss stay float32).
fn half(r: &Rec) -> bool {
    r.a.half && r.gpu.forms.head_f16
}

/// A head product whose B is the tied embedding E (logits = zn·Eᵀ, ∂zn = ∂logits·E): in f16
/// read from the parameters' f16 copy with A rounded as read ([`Rec::mm_weight`]), else f32.
fn by_emb(r: &mut Rec, m: Matmul, a: View, c: View) -> Result<()> {
    if half(r) { r.mm_weight(m, a, "tok_emb", c) } else { r.mm(m, a, r.pv("tok_emb"), c) }
}

/// The head's other product (∂E += ∂logitsᵀ·zn): f16 operands in f16, else f32.
fn head_mm(r: &mut Rec, m: Matmul, a: View, b: View, c: View) -> Result<()> {
    r.mm(m.half(half(r)), a, b, c)
}

/// Cross-entropy → logits → tied embedding and final norm → readout: writes ∂X_2L into
/// `g.dx[0]` and returns 0 (the buffer that holds the state's gradient).
pub(crate) fn backward(r: &mut Rec) -> Result<usize> {
    let (gpu, c, a, g) = (r.gpu, r.c, r.a, r.g());
    let var = c.variant;
    let (n, d, v) = (r.n(), c.d_model, c.vocab_size);
    // (A chunked head's forward left ∂zn and its share of ∂E.)
    if !a.head_chunked() {
        // The logits' gradient is written over the logits (nothing reads them after this): one
        // [N, V] buffer less, the largest of a model with a big vocabulary.
        let dlogits = &a.logits;
        r.run(loss::cross_entropy_backward(gpu, &ce_shape(r), a.ce_io(), dlogits.view(), r.obj.loss_scale))?;
        head_mm(r, Matmul::tn(v, d, n).accumulate(true), dlogits.view(), a.zn.view(), r.gv("tok_emb"))?;
        by_emb(r, Matmul::nn(n, d, v), dlogits.view(), g.dzn.view())?;
    }
    // ∂X (the gradient of the current state) ping-pongs between two buffers; it starts in 0.
    let cur = 0usize;
    let final_norm = |r: &mut Rec, dx: &crate::gpu::Tensor| {
        let ds = norm::rmsnorm_backward(
            gpu,
            norm::NormGrads {
                x: a.z_tensor().view(),
                gain: r.pv("final_norm.gain"),
                rstd: a.rstd_f.view(),
                dy: g.dzn.view(),
                dx: dx.view(),
                dgain: r.gv("final_norm.gain"),
            },
            n,
            d,
            false,
        );
        r.run(ds)
    };
    if !var.expanded() {
        final_norm(r, &g.dx[cur])?;
        return Ok(cur);
    }
    final_norm(r, &g.dz)?;
    // The readout's gradient starts the state's: written by the one-walk kernel, else added
    // into a zeroed ∂X.
    let cs = r.conv_shape(c.state_kernel);
    if !var.value_axis() && shortconv::sums_into_de(gpu, &cs) {
        let (kappa, rho) = (r.pv("readout.kernel"), r.pv("readout.read"));
        let (dkappa, drho) = (r.gv("readout.kernel"), r.gv("readout.read"));
        let grads = shortconv::ConvGrads {
            x: a.xs.last().unwrap().view(),
            kappa,
            rho,
            da: g.dz.view(),
            dx: g.dx[cur].view(),
            dkappa,
            drho,
        };
        r.run(shortconv::token_backward_out(gpu, &cs, grads, shortconv::WalkOut::WriteDx))?;
    } else {
        r.push(Op::Zero(g.dx[cur].clone()));
        compress::backward(r, "readout", a.xs.last().unwrap(), &g.dz, &g.dx[cur], None, None)?;
    }
    Ok(cur)
}
