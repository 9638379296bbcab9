//! What closes every sublayer: the pre-norm c = RMSNorm(a) that opens it and, after the
//! sublayer's own computation, the delta write X' = X + β k (vᵀ − kᵀX) (DDL variants; v-Map
//! variants take k from a direction MLP of c) or the residual X' = X + h (baseline).
//!
//! The backward of a sublayer starts here and ends here: the write's backward gives ∂h (and the
//! gate's and value head's input gradients), the sublayer's own backward adds its ∂c, and the
//! pre-norm's backward — into which CPU adapters fold the heads' parameter gradients — and the
//! block compressor's backward give ∂X of the state before the sublayer.

use crate::gpu::{Op, Result, Tensor};
use crate::kernels::delta::{self, Heads, Saves, WriteGrads, WriteIn, WriteOut};
use crate::kernels::matmul::Matmul;
use crate::kernels::{elementwise, norm, swiglu};

use super::super::acts::{Sub, SubKind, WriteSaves};
use super::{Rec, attention, compress, mlp};

/// c = RMSNorm(a) of sublayer `si` of block `l`.
pub(crate) fn norm_forward(r: &mut Rec, l: usize, si: usize) -> Result<()> {
    let (a, c) = (r.a, r.c);
    let s = &a.subs[l][si];
    let gain = r.pv(&format!("blocks.{l}.{}_norm.gain", s.kind.name()));
    let ds = norm::rmsnorm_forward(
        r.gpu,
        a.a_tensor(l, si).view(),
        gain,
        s.c.view(),
        s.rstd_c.view(),
        r.n(),
        c.d_model,
        c.norm_eps as f32,
    );
    r.run(ds)
}

/// The v-Map direction branch of sublayer `s` (delta heads `dn`), if it has one: k̃ = W_k2
/// silu(W_k1 c) into its (q1, s1, kraw).
fn direction_forward(r: &mut Rec, s: &Sub, dn: &str) -> Result<()> {
    let Some((q1, s1, kraw)) = &s.dir else { return Ok(()) };
    let (n, d, hk) = (r.n(), r.c.d_model, r.c.k_mlp_hidden);
    r.mm_weight(Matmul::nt(n, hk, d), s.c.view(), &format!("{dn}.w_k1"), q1.view())?;
    r.run(swiglu::forward(r.gpu, q1.view(), r.a.ones.view(), s1.view(), n * hk))?;
    r.mm_weight(Matmul::nt(n, d, hk), s1.view(), &format!("{dn}.w_k2"), kraw.view())
}

/// X_out from X_in and the sublayer's output: the residual (unless the sublayer's last product
/// added it, `Sub::residual`), or the delta write, whose β goes to column `write.0` of the
/// `write.1` columns of `betas`.
pub(crate) fn forward(r: &mut Rec, l: usize, si: usize, write: (usize, usize)) -> Result<()> {
    let (gpu, c, a) = (r.gpu, r.c, r.a);
    let s = &a.subs[l][si];
    let (x_in, x_out) = (&a.xs[2 * l + si], &a.xs[2 * l + si + 1]);
    let (n, d) = (r.n(), c.d_model);
    let dn = format!("blocks.{l}.{}_delta", s.kind.name());
    let Some(w) = &s.write else {
        // Baseline residual: x_out = x_in + h (already there when the sublayer's last product
        // added it: `Sub::residual`).
        if s.residual {
            return Ok(());
        }
        r.push(Op::copy(x_in, x_out));
        return r.run(elementwise::add(gpu, s.h.view(), x_out.view(), n * d));
    };
    direction_forward(r, s, &dn)?;
    let (kraw, a_in) = match &s.dir {
        Some((_, _, kraw)) => (kraw, &s.h),
        None => (&s.h, a.a_tensor(l, si)),
    };
    if let Some(Some(fixed)) = r.k_fixed.map(|f| &f[2 * l + si]) {
        // A `k=mean` intervention: every row of the write's k̃ becomes the fixed direction.
        r.run(elementwise::copy_rows(gpu, fixed.view(), kraw.view(), n, d, 0, d))?;
    }
    let inp = WriteIn { x: x_in.view(), kraw: kraw.view(), a: a_in.view(), c: s.c.view() };
    let out = WriteOut {
        x_out: x_out.view(),
        // k only for decoding's traces: the backward recomputes k̃·r.
        k: r.decode.is_some().then(|| w.k.view()),
        saves: saves(w),
    };
    let mut shape = r.delta_shape();
    if let Some(maps) = r.beta_maps {
        shape.beta = maps[2 * l + si];
    }
    let beta_all = Some((a.betas.view(), write.0, write.1));
    if !gpu.forms.delta_packed {
        return r.run(delta::forward(gpu, &shape, inp, head_views(r, &dn, false), out, beta_all));
    }
    // The packed form (devices with fewer than 15 storage buffers per stage): the heads copied
    // into one buffer before the write, the saves copied out of one after it (shared scratch:
    // the ops run in order).
    let (m, params) = (c.m(), &r.m.params);
    let (hl, [o_bb, o_wv, o_bv]) = delta::packed_heads(d, m);
    let (sl, [o_beta, o_v, o_delta]) = delta::packed_saves(n, m);
    let heads = gpu.shared_scratch("delta.packed_heads", hl)?;
    let packed = gpu.shared_scratch("delta.packed_saves", sl)?;
    for (name, at) in [("w_beta", 0), ("b_beta", o_bb), ("w_v", o_wv), ("b_v", o_bv)] {
        let (src_off, len) = r.m.layout.range(&format!("{dn}.{name}"));
        r.push(Op::Copy { src: params.clone(), src_off, dst: heads.clone(), dst_off: at, len });
    }
    r.run(delta::forward_packed(gpu, &shape, inp, heads.view(), out.x_out, out.k, packed.view(), beta_all))?;
    for (dst, at, len) in [(&w.rnorm, 0, n), (&w.beta, o_beta, n), (&w.v, o_v, n * m), (&w.delta, o_delta, n * m)] {
        r.push(Op::Copy { src: packed.clone(), src_off: at, dst: dst.clone(), dst_off: 0, len });
    }
    Ok(())
}

/// The sublayer's own backward from ∂h into `g.dc`.
fn inner_backward(r: &mut Rec, l: usize, si: usize, dh: &Tensor, accumulate: bool) -> Result<()> {
    let s = &r.a.subs[l][si];
    match s.kind {
        SubKind::Attn => attention::backward(r, l, s, dh, accumulate),
        SubKind::Mlp => mlp::backward(r, l, s, dh, accumulate),
    }
}

/// The backward of sublayer `si` of block `l`, from ∂X_out in `g.dx[cur]`; returns where ∂X_in
/// is (`cur` for the residual, which adds into it; the other buffer after a delta write).
/// `shared`: the block compressor's chunk partials; `into_de`: this compressor call writes the
/// embedding's gradient (see `embedding::fuses_into_compressor`).
pub(crate) fn backward(
    r: &mut Rec,
    l: usize,
    si: usize,
    cur: usize,
    shared: Option<&Tensor>,
    into_de: bool,
) -> Result<usize> {
    let (gpu, c, a, g) = (r.gpu, r.c, r.a, r.g());
    let var = c.variant;
    let s = &a.subs[l][si];
    let x_in = &a.xs[2 * l + si];
    let a_t = a.a_tensor(l, si);
    let (n, d, hk) = (r.n(), c.d_model, c.k_mlp_hidden);
    let blk = format!("blocks.{l}");
    let sname = s.kind.name();
    let norm_name = format!("{blk}.{sname}_norm.gain");
    let dn = format!("{blk}.{sname}_delta");
    if a.recompute {
        // a and c (and the direction branch) are one buffer for every sublayer: rebuilt from this
        // sublayer's X_in by the forward's own kernels, the same bits (and the norm's rstd again).
        if let Some(sa) = &s.a {
            compress::forward(r, &format!("{blk}.compress"), 2 * l + si, x_in, sa)?;
        }
        norm_forward(r, l, si)?;
        // And the v-Map direction branch (one q1, s1, k̃ for every sublayer) from that c.
        direction_forward(r, s, &dn)?;
    }
    let Some(w) = &s.write else {
        // Baseline: dh = dX; dX += RMSNorm backward of the sublayer's input grad.
        let dxc = &g.dx[cur];
        inner_backward(r, l, si, dxc, false)?;
        r.run(norm::rmsnorm_backward(
            gpu,
            norm::NormGrads {
                x: a_t.view(),
                gain: r.pv(&norm_name),
                rstd: s.rstd_c.view(),
                dy: g.dc.view(),
                dx: dxc.view(),
                dgain: r.gv(&norm_name),
            },
            n,
            d,
            true,
        ))?;
        return Ok(cur);
    };
    let (dxc, dxn) = (&g.dx[cur], &g.dx[1 - cur]);
    // The block compressor's backward from ∂a (`g.da`) into ∂X (expanded variants).
    let block_compress = |r: &mut Rec| {
        compress::backward(
            r,
            &format!("{blk}.compress"),
            x_in,
            &g.da,
            dxn,
            shared.map(|t| (t, 1 - si)),
            into_de.then_some(&g.de),
        )
    };
    let vmap = s.dir.is_some();
    let (kraw, a_in, dkraw_buf, da_buf) = match &s.dir {
        Some((_, _, kraw)) => (kraw, &s.h, &g.dkraw, &g.dh),
        None => (&s.h, a_t, &g.dh, &g.da),
    };
    // CPU adapters: the heads' backward goes into the norm backward below.
    // The heads' parameters and gradients.
    let (hp, hg) = (head_views(r, &dn, false), head_views(r, &dn, true));
    let fold = !vmap
        && norm::folds_heads(
            gpu,
            n,
            d,
            c.m(),
            &[&a_t.view(), &r.pv(&norm_name), &g.dc.view(), &g.da.view(), &dxn.view(), &hp.w_beta, &hp.w_v],
        );
    let mut heads = None;
    if fold {
        let (main, hdz, hdu) = delta::backward_write(
            gpu,
            &r.delta_shape(),
            dxc.view(),
            x_in.view(),
            kraw.view(),
            saves(w),
            dxn.view(),
            dkraw_buf.view(),
        )?;
        r.run(Ok(vec![main]))?;
        heads = Some((hdz, hdu));
    } else {
        let inp = WriteIn { x: x_in.view(), kraw: kraw.view(), a: a_in.view(), c: s.c.view() };
        let out = WriteGrads { dx: dxn.view(), dkraw: dkraw_buf.view(), da: da_buf.view(), dc: g.dc.view() };
        let ds = delta::backward(gpu, &r.delta_shape(), dxc.view(), inp, hp, saves(w), out, hg, false);
        r.run(ds)?;
    }
    if let Some((q1, s1, _)) = &s.dir {
        // Direction branch: kraw = W_k2 silu(W_k1 c).
        r.mm_half(Matmul::tn(d, hk, n).accumulate(true), g.dkraw.view(), s1.view(), r.gv(&format!("{dn}.w_k2")))?;
        r.mm_weight(Matmul::nn(n, hk, d), g.dkraw.view(), &format!("{dn}.w_k2"), g.ds.view())?;
        r.run(swiglu::backward(gpu, q1.view(), a.ones.view(), g.ds.view(), g.dq1.view(), g.dscratch.view(), n * hk))?;
        r.mm_half(Matmul::tn(hk, d, n).accumulate(true), g.dq1.view(), s.c.view(), r.gv(&format!("{dn}.w_k1")))?;
        r.mm_weight(Matmul::nn(n, d, hk).accumulate(true), g.dq1.view(), &format!("{dn}.w_k1"), g.dc.view())?;
    }
    // The sublayer's input gradient adds to the gate's (and direction MLP's) dc (or starts dc
    // when the norm backward takes the heads in).
    inner_backward(r, l, si, &g.dh, heads.is_none())?;
    let norm_back = |r: &mut Rec, dx: &Tensor, add: bool| {
        let ds = norm::rmsnorm_backward(
            gpu,
            norm::NormGrads {
                x: a_t.view(),
                gain: r.pv(&norm_name),
                rstd: s.rstd_c.view(),
                dy: g.dc.view(),
                dx: dx.view(),
                dgain: r.gv(&norm_name),
            },
            n,
            d,
            add,
        );
        r.run(ds)
    };
    if vmap {
        if var.expanded() {
            norm_back(r, &g.da, false)?;
            block_compress(r)?;
        } else {
            norm_back(r, dxn, true)?;
        }
    } else if let Some((hdz, hdu)) = &heads {
        // ∂c = dc + ∂z w_β, ∂a = its norm backward + W_vᵀ∂u, and the heads' parameter
        // gradients, in the norm's two passes.
        let terms = norm::HeadTerms {
            m: c.m(),
            dz: hdz.view(),
            du: hdu.view(),
            w_beta: hp.w_beta,
            w_v: hp.w_v,
            dw_beta: hg.w_beta,
            db_beta: hg.b_beta,
            dw_v: hg.w_v,
            db_v: hg.b_v,
        };
        // d_v = 1 (the state is [N, d]): straight into the state's gradient.
        let (da_out, add) = if var.expanded() { (&g.da, false) } else { (dxn, true) };
        r.run(norm::rmsnorm_backward_heads(
            gpu,
            norm::NormGrads {
                x: a_t.view(),
                gain: r.pv(&norm_name),
                rstd: s.rstd_c.view(),
                dy: g.dc.view(),
                dx: da_out.view(),
                dgain: r.gv(&norm_name),
            },
            n,
            d,
            add,
            &terms,
        ))?;
        if var.expanded() {
            block_compress(r)?;
        }
    } else {
        // da holds the value head's W_vᵀ∂u; add the norm's input gradient.
        norm_back(r, &g.da, true)?;
        if var.expanded() {
            block_compress(r)?;
        } else {
            r.run(elementwise::add(gpu, g.da.view(), dxn.view(), n * d))?;
        }
    }
    Ok(1 - cur)
}

/// The delta write's heads `{dn}.w_beta`, `b_beta`, `w_v`, `b_v` (their gradients with `grad`).
fn head_views<'a>(r: &Rec<'a>, dn: &str, grad: bool) -> Heads<'a> {
    let v = |name: &str| if grad { r.gv(&format!("{dn}.{name}")) } else { r.pv(&format!("{dn}.{name}")) };
    Heads { w_beta: v("w_beta"), b_beta: v("b_beta"), w_v: v("w_v"), b_v: v("b_v") }
}

fn saves(w: &WriteSaves) -> Saves<'_> {
    Saves { rnorm: w.rnorm.view(), beta: w.beta.view(), v: w.v.view(), delta: w.delta.view() }
}
