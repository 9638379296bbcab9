//! Causal self-attention of one block: h = W_o · attn(norm(RoPE(W_q c)), norm(RoPE(W_k c)), W_v c)
//! with per-head QK RMSNorm; decode programs append the new keys and values to the cache and
//! attend over everything cached.

use crate::gpu::{Op, Result, Tensor};
use crate::kernels::attention::{self as attn, AttnGrads, AttnIo, AttnShape};
use crate::kernels::matmul::Matmul;
use crate::kernels::{norm, rope};

use super::super::acts::{Inner, Sub};
use super::Rec;

pub(crate) fn forward(r: &mut Rec, l: usize, s: &Sub) -> Result<()> {
    let Inner::Attn { q, k, v, qr, kr, qn, kn, o: out, lse, .. } = &s.inner else { unreachable!("attention sublayer") };
    let (gpu, c) = (r.gpu, r.c);
    let blk = format!("blocks.{l}");
    let n = r.n();
    let (d, dq, hh, hd) = (c.d_model, c.qk_dim(), c.n_heads, c.head_dim);
    r.mm_weight(Matmul::nt(n, dq, d), s.c.view(), &format!("{blk}.attn.wq"), q.view())?;
    r.mm_weight(Matmul::nt(n, dq, d), s.c.view(), &format!("{blk}.attn.wk"), k.view())?;
    r.mm_weight(Matmul::nt(n, dq, d), s.c.view(), &format!("{blk}.attn.wv"), v.view())?;
    let rs = r.rope_shape();
    let table = r.m.rope_table.view();
    r.run(rope::forward(gpu, &rs, table, q.view(), qr.view()))?;
    r.run(rope::forward(gpu, &rs, table, k.view(), kr.view()))?;
    qk_norm_forward(r, l, &s.inner)?;
    let scale = 1.0 / (hd as f32).sqrt();
    if let Some(db) = r.decode {
        // Append the new keys/values to the cache (offsets set per chunk), then attend over
        // everything cached.
        let (kc, vc) = (&db.kcache[l], &db.vcache[l]);
        r.push(Op::Copy { src: kn.clone(), src_off: 0, dst: kc.clone(), dst_off: 0, len: n * dq });
        r.push(Op::Copy { src: v.clone(), src_off: 0, dst: vc.clone(), dst_off: 0, len: n * dq });
        let sh = AttnShape::decode(1, hh, hd, n, n, db.capacity);
        r.run(attn::forward(
            gpu,
            &sh,
            scale,
            AttnIo { q: qn.view(), k: kc.view(), v: vc.view(), out: out.view(), lse: lse.view() },
        ))?;
    } else {
        let sh = r.attn_shape();
        r.run(attn::forward_seq(
            gpu,
            &sh,
            scale,
            AttnIo { q: qn.view(), k: kn.view(), v: v.view(), out: out.view(), lse: lse.view() },
        ))?;
    }
    // (A residual sublayer's h is X_out, which holds X_in: the product adds into it.)
    let wo = Matmul::nt(n, d, dq).accumulate(s.residual);
    r.mm_weight(wo, out.view(), &format!("{blk}.attn.wo"), s.h.view())
}

/// From ∂h: the weight gradients, and ∂c written (or added, `accumulate`) into `g.dc`.
pub(crate) fn backward(r: &mut Rec, l: usize, s: &Sub, dh: &Tensor, accumulate: bool) -> Result<()> {
    let Inner::Attn { v, qr, kr, qn, kn, rstd_q, rstd_k, o: out, lse, .. } = &s.inner else {
        unreachable!("attention sublayer")
    };
    let (gpu, c, g) = (r.gpu, r.c, r.g());
    let blk = format!("blocks.{l}");
    let n = r.n();
    let (d, dq, hh, hd) = (c.d_model, c.qk_dim(), c.n_heads, c.head_dim);
    if r.a.recompute {
        // The QK norms' outputs are in q and k, which later layers overwrote: rebuilt from this
        // layer's rotated q and k, the same bits.
        qk_norm_forward(r, l, &s.inner)?;
    }
    r.mm_half(Matmul::tn(d, dq, n).accumulate(true), dh.view(), out.view(), r.gv(&format!("{blk}.attn.wo")))?;
    r.mm_weight(Matmul::nn(n, dq, d), dh.view(), &format!("{blk}.attn.wo"), g.do_.view())?;
    let scale = 1.0 / (hd as f32).sqrt();
    let sh = r.attn_shape();
    r.run(attn::backward(
        gpu,
        &sh,
        scale,
        AttnIo { q: qn.view(), k: kn.view(), v: v.view(), out: out.view(), lse: lse.view() },
        AttnGrads { dout: g.do_.view(), dq: g.dqn.view(), dk: g.dkn.view(), dv: g.dv.view() },
    ))?;
    for (x, rstd, dy, dx, gain) in [(qr, rstd_q, &g.dqn, &g.dqr, "q_norm"), (kr, rstd_k, &g.dkn, &g.dkr, "k_norm")] {
        let name = format!("{blk}.attn.{gain}.gain");
        r.run(norm::rmsnorm_backward(
            gpu,
            norm::NormGrads {
                x: x.view(),
                gain: r.pv(&name),
                rstd: rstd.view(),
                dy: dy.view(),
                dx: dx.view(),
                dgain: r.gv(&name),
            },
            n * hh,
            hd,
            false,
        ))?;
    }
    let rs = r.rope_shape();
    let table = r.m.rope_table.view();
    r.run(rope::backward(gpu, &rs, table, g.dqr.view(), g.dq.view()))?;
    r.run(rope::backward(gpu, &rs, table, g.dkr.view(), g.dk.view()))?;
    for (dgrad, w) in [(&g.dq, "wq"), (&g.dk, "wk"), (&g.dv, "wv")] {
        r.mm_half(Matmul::tn(dq, d, n).accumulate(true), dgrad.view(), s.c.view(), r.gv(&format!("{blk}.attn.{w}")))?;
    }
    let mut acc = accumulate;
    for (dgrad, w) in [(&g.dq, "wq"), (&g.dk, "wk"), (&g.dv, "wv")] {
        r.mm_weight(Matmul::nn(n, d, dq).accumulate(acc), dgrad.view(), &format!("{blk}.attn.{w}"), g.dc.view())?;
        acc = true;
    }
    Ok(())
}

/// The per-head QK RMSNorms: qn, kn (and their rstd) from the rotated q and k.
fn qk_norm_forward(r: &mut Rec, l: usize, inner: &Inner) -> Result<()> {
    let Inner::Attn { qr, kr, qn, kn, rstd_q, rstd_k, .. } = inner else { unreachable!("attention sublayer") };
    let c = r.c;
    let (rows, hd, eps) = (r.n() * c.n_heads, c.head_dim, c.norm_eps as f32);
    let blk = format!("blocks.{l}");
    for (x, y, rstd, gain) in [(qr, qn, rstd_q, "q_norm"), (kr, kn, rstd_k, "k_norm")] {
        let g = r.pv(&format!("{blk}.attn.{gain}.gain"));
        r.run(norm::rmsnorm_forward(r.gpu, x.view(), g, y.view(), rstd.view(), rows, hd, eps))?;
    }
    Ok(())
}
