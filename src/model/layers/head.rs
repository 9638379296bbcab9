//! The head: the readout compressor (expanded variants) z = compress(X_2L), the final RMSNorm,
//! the tied LM head logits = norm(z) Eᵀ and the cross-entropy loss (with label smoothing);
//! the loss and its count go to the program's `stats`.

use crate::gpu::{Op, Result};
use crate::kernels::matmul::Matmul;
use crate::kernels::{loss, norm, shortconv};

use super::{Rec, compress};

pub(crate) fn forward(r: &mut Rec) -> Result<()> {
    let (gpu, c, a) = (r.gpu, r.c, r.a);
    let (n, d, v) = (r.n(), c.d_model, c.vocab_size);
    if let Some(zt) = &a.z {
        compress::forward(r, "readout", 2 * c.n_layers, a.xs.last().unwrap(), zt)?;
    }
    let gain = r.pv("final_norm.gain");
    r.run(norm::rmsnorm_forward(
        gpu,
        a.z_tensor().view(),
        gain,
        a.zn.view(),
        a.rstd_f.view(),
        n,
        d,
        c.norm_eps as f32,
    ))?;
    r.mm(Matmul::nt(n, v, d), a.zn.view(), r.pv("tok_emb"), a.logits.view())?;
    let ls = r.obj.label_smoothing;
    r.run(loss::cross_entropy_forward(
        gpu,
        a.logits.view(),
        a.targets.view(),
        a.lse.view(),
        a.loss_out.view(),
        n,
        v,
        ls,
    ))?;
    r.push(Op::Copy { src: a.loss_out.clone(), src_off: 0, dst: a.stats.clone(), dst_off: 0, len: 2 });
    Ok(())
}

/// Cross-entropy → logits → tied embedding and final norm → readout: writes ∂X_2L into
/// `g.dx[0]` and returns 0 (the buffer that holds the state's gradient).
pub(crate) fn backward(r: &mut Rec) -> Result<usize> {
    let (gpu, c, a, g) = (r.gpu, r.c, r.a, r.g());
    let var = c.variant;
    let (n, d, v) = (r.n(), c.d_model, c.vocab_size);
    // The logits' gradient is written over the logits (nothing reads them after this): one
    // [N, V] buffer less, the largest of a model with a big vocabulary.
    let dlogits = &a.logits;
    r.run(loss::cross_entropy_backward(
        gpu,
        a.logits.view(),
        a.targets.view(),
        a.lse.view(),
        a.loss_out.view(),
        dlogits.view(),
        n,
        v,
        r.obj.label_smoothing,
        r.obj.loss_scale,
    ))?;
    r.mm(Matmul::tn(v, d, n).accumulate(true), dlogits.view(), a.zn.view(), r.gv("tok_emb"))?;
    r.mm(Matmul::nn(n, d, v), dlogits.view(), r.pv("tok_emb"), g.dzn.view())?;
    // ∂X (the gradient of the current state) ping-pongs between two buffers; it starts in 0.
    let cur = 0usize;
    let final_norm = |r: &mut Rec, dx: &crate::gpu::Tensor| {
        let ds = norm::rmsnorm_backward(
            gpu,
            a.z_tensor().view(),
            r.pv("final_norm.gain"),
            a.rstd_f.view(),
            g.dzn.view(),
            dx.view(),
            r.gv("final_norm.gain"),
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
        r.run(shortconv::token_backward_out(
            gpu,
            &cs,
            a.xs.last().unwrap().view(),
            kappa,
            rho,
            g.dz.view(),
            g.dx[cur].view(),
            dkappa,
            drho,
            shortconv::WalkOut::WriteDx,
        ))?;
    } else {
        r.push(Op::Zero(g.dx[cur].clone()));
        compress::backward(r, "readout", a.xs.last().unwrap(), &g.dz, &g.dx[cur], None, None)?;
    }
    Ok(cur)
}
