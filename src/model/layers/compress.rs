//! The state compressors (expanded variants): a = ShortConv(X) before each sublayer and z before
//! the readout, along the token axis (causal, K_s taps) or the value axis.

use crate::gpu::{Op, Result, Tensor};
use crate::kernels::shortconv::{self, ConvGrads, ConvShape, ValueShape};

use super::Rec;

/// a = compress(X) with the compressor `prefix` (`blocks.{l}.compress` or `readout`); decode
/// programs see the cache's last K_s−1 states at `boundary` before the new ones.
pub(crate) fn forward(r: &mut Rec, prefix: &str, boundary: usize, x: &Tensor, a: &Tensor) -> Result<()> {
    let c = r.c;
    let (kappa, rho) = (r.pv(&format!("{prefix}.kernel")), r.pv(&format!("{prefix}.read")));
    if let (Some(db), false) = (r.decode, c.variant.value_axis()) {
        // Decoding: the compressor sees the last K−1 states of the cache, then the new ones.
        let (hist, xwin, awin) = (&db.hist[boundary], &db.xwin[boundary], &db.awin[boundary]);
        let k1 = c.state_kernel - 1;
        let (dm, n) = (c.d_model * c.m(), r.n());
        r.push(Op::Copy { src: hist.clone(), src_off: 0, dst: xwin.clone(), dst_off: 0, len: k1 * dm });
        r.push(Op::Copy { src: x.clone(), src_off: 0, dst: xwin.clone(), dst_off: k1 * dm, len: n * dm });
        let cs = ConvShape { batch: 1, seq: k1 + n, d: c.d_model, m: c.m(), kernel: c.state_kernel, state_f16: false };
        r.run(shortconv::token_forward(r.gpu, &cs, xwin.view(), kappa, rho, awin.view()))?;
        r.push(Op::Copy { src: awin.clone(), src_off: k1 * c.d_model, dst: a.clone(), dst_off: 0, len: n * c.d_model });
        r.push(Op::Copy { src: xwin.clone(), src_off: n * dm, dst: hist.clone(), dst_off: 0, len: k1 * dm });
        return Ok(());
    }
    if c.variant.value_axis() {
        let vs = ValueShape { n: r.n(), d: c.d_model, m: c.m(), kc: c.state_kernel };
        r.run(shortconv::value_forward(r.gpu, &vs, x.view(), kappa, rho, a.view()))
    } else {
        r.run(shortconv::token_forward(r.gpu, &r.conv_shape(c.state_kernel), x.view(), kappa, rho, a.view()))
    }
}

/// One buffer for a block's two token-axis compressor calls' chunk partials (`None` for the
/// value-axis kind and unexpanded variants).
pub(crate) fn block_partials(r: &Rec) -> Result<Option<Tensor>> {
    let var = r.c.variant;
    if var.expanded() && !var.value_axis() {
        Ok(Some(shortconv::token_partials(r.gpu, &r.conv_shape(r.c.state_kernel), 2)?))
    } else {
        Ok(None)
    }
}

/// ∂X += compress'(∂a) and the compressor's parameter gradients.
///
/// `shared`: a block's token-axis compressor, whose two calls (MLP side first) write slots 0
/// and 1 of one buffer of chunk partials, summed once by the second call (`None`: the readout,
/// or the value-axis kind, on its own). `de`: the last call of a replicated-embedding model
/// writes the embedding's gradient Σ_j ∂X directly (`shortconv::sums_into_de`).
pub(crate) fn backward(
    r: &mut Rec,
    prefix: &str,
    x: &Tensor,
    da: &Tensor,
    dx: &Tensor,
    shared: Option<(&Tensor, usize)>,
    de: Option<&Tensor>,
) -> Result<()> {
    let gpu = r.gpu;
    let c = r.c;
    let (kappa, rho) = (r.pv(&format!("{prefix}.kernel")), r.pv(&format!("{prefix}.read")));
    let (dkappa, drho) = (r.gv(&format!("{prefix}.kernel")), r.gv(&format!("{prefix}.read")));
    let g = ConvGrads { x: x.view(), kappa, rho, da: da.view(), dx: dx.view(), dkappa, drho };
    if c.variant.value_axis() {
        let vs = ValueShape { n: r.n(), d: c.d_model, m: c.m(), kc: c.state_kernel };
        r.run(shortconv::value_backward(gpu, &vs, g))
    } else if let Some((part, slot)) = shared {
        let cs = r.conv_shape(c.state_kernel);
        let slot_view = shortconv::token_partial_slot(gpu, &cs, part, slot);
        let out = de.map_or(shortconv::WalkOut::AddToDx, |t| shortconv::WalkOut::SumIntoDe(t.view()));
        let mut walk = shortconv::token_backward_walk(gpu, &cs, g, slot_view, out)?;
        walk.last_mut().expect("at least one pass").scratch.push(part.clone());
        if slot == 1 {
            walk.extend(shortconv::token_backward_finish(gpu, &cs, g, part, 2)?);
        }
        r.run(Ok(walk))
    } else {
        r.run(shortconv::token_backward(gpu, &r.conv_shape(c.state_kernel), g))
    }
}
