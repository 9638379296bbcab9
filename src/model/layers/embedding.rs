//! The token embedding e = E[x] and, for expanded variants, its expansion into the first state
//! X_0 (replicated into the m value columns, or the EC causal convolution); the backward
//! scatter-adds ∂e into the tied embedding table.

use crate::gpu::{Op, Result};
use crate::kernels::shortconv::{self, ConvShape};
use crate::kernels::{embedding, expand};

use super::Rec;

pub(crate) fn forward(r: &mut Rec) -> Result<()> {
    let (gpu, c, a) = (r.gpu, r.c, r.a);
    let var = c.variant;
    let (n, d) = (r.n(), c.d_model);
    r.run(embedding::forward(gpu, a.tokens.view(), r.pv("tok_emb"), a.e.view(), n, d, c.vocab_size))?;
    if !var.expanded() {
        return Ok(());
    }
    if let (true, Some(db)) = (var.ec(), r.decode) {
        // Decoding: the expansion sees the last K_e−1 embeddings of the cache.
        let (eh, ew, xw) = (db.ehist.as_ref().unwrap(), db.ewin.as_ref().unwrap(), db.x0win.as_ref().unwrap());
        let k1 = c.embed_kernel - 1;
        let dm = d * c.m();
        r.push(Op::Copy { src: eh.clone(), src_off: 0, dst: ew.clone(), dst_off: 0, len: k1 * d });
        r.push(Op::Copy { src: a.e.clone(), src_off: 0, dst: ew.clone(), dst_off: k1 * d, len: n * d });
        let cs = ConvShape { batch: 1, seq: k1 + n, d, m: c.m(), kernel: c.embed_kernel, state_f16: false };
        r.run(expand::ec_forward(gpu, &cs, ew.view(), r.pv("embed_expand.kernel"), xw.view()))?;
        r.push(Op::Copy { src: xw.clone(), src_off: k1 * dm, dst: a.xs[0].clone(), dst_off: 0, len: n * dm });
        r.push(Op::Copy { src: ew.clone(), src_off: n * d, dst: eh.clone(), dst_off: 0, len: k1 * d });
        Ok(())
    } else if var.ec() {
        let cs = r.conv_shape(c.embed_kernel);
        r.run(expand::ec_forward(gpu, &cs, a.e.view(), r.pv("embed_expand.kernel"), a.xs[0].view()))
    } else if a.state_f16 {
        r.run(expand::replicate_forward_f16(gpu, n, d, a.e.view(), a.xs[0].view()))
    } else {
        r.run(expand::replicate_forward(gpu, n, d, c.m(), a.e.view(), a.xs[0].view()))
    }
}

/// Replicated embedding: the last compressor call of the backward writes ∂e = Σ_j ∂X⁰ itself
/// (block 0's attention-side compressor), so the replication's backward is not recorded.
pub(crate) fn fuses_into_compressor(r: &Rec) -> bool {
    let var = r.c.variant;
    var.expanded() && !var.ec() && !var.value_axis() && shortconv::sums_into_de(r.gpu, &r.conv_shape(r.c.state_kernel))
}

/// From ∂X_0 (`g.dx[cur]`): through the expansion, then scatter-add into the tied table.
pub(crate) fn backward(r: &mut Rec, cur: usize, fused: bool) -> Result<()> {
    let (gpu, c, a, g) = (r.gpu, r.c, r.a, r.g());
    let var = c.variant;
    let (n, d) = (r.n(), c.d_model);
    let de = if var.expanded() {
        if var.ec() {
            let cs = r.conv_shape(c.embed_kernel);
            r.run(expand::ec_backward(
                gpu,
                &cs,
                a.e.view(),
                r.pv("embed_expand.kernel"),
                g.dx[cur].view(),
                g.de.view(),
                r.gv("embed_expand.kernel"),
            ))?;
        } else if !fused {
            r.run(expand::replicate_backward(gpu, n, d, c.m(), g.dx[cur].view(), g.de.view()))?;
        }
        &g.de
    } else {
        &g.dx[cur]
    };
    r.run(embedding::backward(gpu, a.emb_index.view(), de.view(), r.gv("tok_emb"), n, d, c.vocab_size))
}
