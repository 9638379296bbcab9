//! The SwiGLU MLP of one block: h = W_down (silu(W_gate c) ⊙ W_up c). Its activations have rows
//! of `mlp_stride()` floats (a multiple of 4, for the vec4 matmul kernels).

use crate::gpu::{Result, Tensor, View};
use crate::kernels::matmul::{Matmul, MatmulElem, Operand};
use crate::kernels::{elementwise, swiglu};

use super::super::acts::{Inner, Sub};
use super::Rec;

pub(crate) fn forward(r: &mut Rec, l: usize, s: &Sub) -> Result<()> {
    let Inner::Mlp { g1, g2, psi } = &s.inner else { unreachable!("MLP sublayer") };
    let c = r.c;
    let blk = format!("blocks.{l}");
    let (n, d, f, f4) = (r.n(), c.d_model, c.mlp_hidden, c.mlp_stride());
    let up = Matmul { c: Operand::row_major(n, f4), ..Matmul::nt(n, f, d) };
    r.mm_weight(up, s.c.view(), &format!("{blk}.mlp.w_gate"), g1.view())?;
    r.mm_weight(up, s.c.view(), &format!("{blk}.mlp.w_up"), g2.view())?;
    // (A residual sublayer's h is X_out, which holds X_in: the product adds into it.)
    let down = Matmul { a: Operand::row_major(n, f4), b: Operand::transposed(f4, d), ..Matmul::nt(n, d, f) }
        .accumulate(s.residual);
    // In f16 programs ψ is stored in f16 (`Acts::psi_f16`): the same values the products would
    // read from the f32 output, half the bytes.
    psi_forward(r, g1, g2, psi)?;
    let down = if r.a.psi_f16 { down.a_elem(MatmulElem::F16) } else { down };
    if r.a.w_down_rows.get(l).is_none() {
        return r.mm_weight(down, psi.view(), &format!("{blk}.mlp.w_down"), s.h.view());
    }
    let w_down = w_down_rows(r, l, true)?;
    r.mm_half(down, psi.view(), w_down, s.h.view())
}

/// From ∂h: the weight gradients, and ∂c written (or added, `accumulate`) into `g.dc`.
pub(crate) fn backward(r: &mut Rec, l: usize, s: &Sub, dh: &Tensor, accumulate: bool) -> Result<()> {
    let Inner::Mlp { g1, g2, psi } = &s.inner else { unreachable!("MLP sublayer") };
    let (gpu, c, g) = (r.gpu, r.c, r.g());
    let blk = format!("blocks.{l}");
    let (n, d, f, f4) = (r.n(), c.d_model, c.mlp_hidden, c.mlp_stride());
    if r.a.recompute {
        // ψ is one buffer for every layer: rebuilt from this layer's g1 and g2, the same bits.
        psi_forward(r, g1, g2, psi)?;
    }
    let dw_down = Matmul { b: Operand::row_major(n, f4), ..Matmul::tn(d, f, n) };
    let dw_down = if r.a.psi_f16 { dw_down.b_elem(MatmulElem::F16) } else { dw_down };
    r.mm_half(dw_down.pad_b(true).accumulate(true), dh.view(), psi.view(), r.gv(&format!("{blk}.mlp.w_down")))?;
    let dpsi = Matmul { b: Operand::row_major(d, f4), c: Operand::row_major(n, f4), ..Matmul::nn(n, f, d) };
    if r.a.w_down_rows.get(l).is_none() {
        r.mm_weight(dpsi.pad_b(true), dh.view(), &format!("{blk}.mlp.w_down"), g.dpsi.view())?;
    } else {
        let w_down = w_down_rows(r, l, false)?;
        r.mm_half(dpsi.pad_b(true), dh.view(), w_down, g.dpsi.view())?;
    }
    r.run(swiglu::backward(gpu, g1.view(), g2.view(), g.dpsi.view(), g.dg1.view(), g.dg2.view(), n * f4))?;
    let dw = Matmul { a: Operand::transposed(f4, n), ..Matmul::tn(f, d, n) }.pad_a(true).accumulate(true);
    r.mm_half(dw, g.dg1.view(), s.c.view(), r.gv(&format!("{blk}.mlp.w_gate")))?;
    r.mm_half(dw, g.dg2.view(), s.c.view(), r.gv(&format!("{blk}.mlp.w_up")))?;
    let dc = Matmul { a: Operand::row_major(n, f4), ..Matmul::nn(n, d, f) };
    r.mm_weight(dc.accumulate(accumulate), g.dg1.view(), &format!("{blk}.mlp.w_gate"), g.dc.view())?;
    r.mm_weight(dc.accumulate(true), g.dg2.view(), &format!("{blk}.mlp.w_up"), g.dc.view())
}

/// ψ = silu(g1) ⊙ g2 (f16-stored in f16 programs: `Acts::psi_f16`).
fn psi_forward(r: &mut Rec, g1: &Tensor, g2: &Tensor, psi: &Tensor) -> Result<()> {
    let n = r.n() * r.c.mlp_stride();
    let ds = if r.a.psi_f16 {
        swiglu::forward_f16(r.gpu, g1.view(), g2.view(), psi.view(), n)
    } else {
        swiglu::forward(r.gpu, g1.view(), g2.view(), psi.view(), n)
    };
    r.run(ds)
}

/// `mlp.w_down` of layer `l` with rows of `mlp_stride()` floats: the parameter itself when F
/// is a multiple of 4, else the program's padded copy of that layer, which the forward
/// (`copy`) refreshes so the forward and the backward after it see the current weights.
fn w_down_rows<'a>(r: &mut Rec<'a>, l: usize, copy: bool) -> Result<View<'a>> {
    let w = r.pv(&format!("blocks.{l}.mlp.w_down"));
    let Some(rows) = r.a.w_down_rows.get(l) else { return Ok(w) };
    if copy {
        let (d, f) = (r.c.d_model, r.c.mlp_hidden);
        r.run(elementwise::copy_rows(r.gpu, w, rows.view(), d, f, f, r.c.mlp_stride()))?;
    }
    Ok(rows.view())
}
