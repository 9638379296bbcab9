//! Input expansion X⁰ from the token embeddings (`shaders/expand.wgsl`), forward and backward:
//! the EC token-axis convolution e → X⁰ (spec 3.5, 11.4) and plain replication.
//!
//! Layouts: embeddings `[B, T, d]` (= `[N, d]`), states `[B, T, d, m]` (value index fastest), EC
//! kernel `[d, m, K]` (tap `K−1` = current token). A view may be longer than its tensor; only the
//! leading elements are used.
//!
//! `dekernel` is accumulated deterministically: per-workgroup partial sums over fixed chunks of
//! tokens in launcher-allocated scratch ([`Dispatch::scratch`]), then a fixed-order sum over the
//! chunks.

pub use super::shortconv::ConvShape;

use super::need;
use super::shortconv::{chunking, fits_u32, launch};
use crate::gpu::{DType, Dispatch, Gpu, GpuError, Result, Tensor, View, WG_1D};

/// Uniform parameters shared by every entry point of `expand.wgsl` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    seq: u32,
    d: u32,
    m: u32,
    k: u32,
    chunk: u32,
    chunks: u32,
    _pad: u32,
}

fn params(n: usize, seq: usize, d: usize, m: usize, k: usize) -> Params {
    let (chunk, chunks) = chunking(n);
    Params {
        n: n as u32,
        seq: seq as u32,
        d: d as u32,
        m: m as u32,
        k: k as u32,
        chunk: chunk as u32,
        chunks: chunks as u32,
        _pad: 0,
    }
}

/// EC forward (spec 3.5): `x0[b,t,i,j] = Σ_{s<K} E[i,j,s]·e[b, t−(K−1)+s, i]`, zero before
/// position 0.
///
/// `e` `[B, T, d]`, `ekernel` `[d, m, K]`; `x0` `[B, T, d, m]` is written.
pub fn ec_forward(gpu: &Gpu, s: &ConvShape, e: View, ekernel: View, x0: View) -> Result<Vec<Dispatch>> {
    let what = "expand::ec_forward";
    s.validate(what)?;
    if s.state_f16 {
        return Err(GpuError::Shape(format!(
            "{what}: the EC expansion writes an f32 state; an f16 state is not supported"
        )));
    }
    let n = s.tokens();
    let (d, m, k) = (s.d, s.m, s.kernel);
    need(what, "e", "[B, T, d]", &e, n * d)?;
    need(what, "ekernel", "[d, m, K]", &ekernel, d * m * k)?;
    need(what, "x0", "[B, T, d, m]", &x0, n * d * m)?;
    let p = params(n, s.seq, d, m, k);
    Ok(vec![launch(
        gpu,
        "expand",
        "ec_forward",
        bytemuck::bytes_of(&p),
        &[("e", e), ("ekernel", ekernel), ("x0", x0)],
        n * d * m,
    )?])
}

/// EC backward (spec 11.4), with `g` = ∂X⁰ `[B, T, d, m]`:
/// - `de[b,τ,i] = Σ_j Σ_s E[i,j,s]·g[b, τ+K−1−s, i, j]` (terms beyond T−1 dropped), **written**;
/// - `dekernel[i,j,s] += Σ_{b,t} g[b,t,i,j]·e[b, t−K+1+s, i]`, **accumulated**.
///
/// Elements of scratch one [`ec_backward`] keeps (the chunk partials), for memory plans.
pub fn ec_backward_scratch_elems(s: &ConvShape) -> usize {
    let (_, chunks) = chunking(s.tokens());
    chunks * s.d * s.m * s.kernel
}

/// Three dispatches: de; per-chunk partials of dekernel (scratch `[chunks, d, m, K]`); the
/// chunk sum added into dekernel.
pub fn ec_backward(
    gpu: &Gpu,
    s: &ConvShape,
    e: View,
    ekernel: View,
    g: View,
    de: View,
    dekernel: View,
) -> Result<Vec<Dispatch>> {
    let what = "expand::ec_backward";
    s.validate(what)?;
    let n = s.tokens();
    let (d, m, k) = (s.d, s.m, s.kernel);
    let dm = d * m;
    need(what, "e", "[B, T, d]", &e, n * d)?;
    need(what, "ekernel", "[d, m, K]", &ekernel, dm * k)?;
    need(what, "g", "[B, T, d, m]", &g, n * dm)?;
    need(what, "de", "[B, T, d]", &de, n * d)?;
    need(what, "dekernel", "[d, m, K]", &dekernel, dm * k)?;
    let p = params(n, s.seq, d, m, k);
    let pb = bytemuck::bytes_of(&p);
    let chunks = p.chunks as usize;
    let partial = Tensor::zeros(gpu, "expand.ec.partial", &[chunks * dm * k], DType::F32)?;
    let d_de = launch(gpu, "expand", "ec_backward_de", pb, &[("ekernel", ekernel), ("g", g), ("de", de)], n * d)?;
    let mut d_part = launch(
        gpu,
        "expand",
        "ec_backward_partial",
        pb,
        &[("e", e), ("g", g), ("partial", partial.view())],
        dm.div_ceil(WG_1D as usize) * k * chunks * WG_1D as usize,
    )?;
    let mut d_fin = launch(
        gpu,
        "expand",
        "ec_backward_finalize",
        pb,
        &[("dekernel", dekernel), ("partial", partial.view())],
        dm * k,
    )?;
    d_part.scratch.push(partial.clone());
    d_fin.scratch.push(partial);
    Ok(vec![d_de, d_part, d_fin])
}

fn replicate_validate(what: &str, n: usize, d: usize, m: usize) -> Result<()> {
    if n == 0 || d == 0 || m == 0 {
        return Err(GpuError::Shape(format!("{what}: every size must be at least 1, got n={n} d={d} m={m}")));
    }
    fits_u32(what, &[n as u128 * (d * m) as u128])
}

/// Replication forward: `x0[t,i,j] = e[t,i]`. `e` `[n, d]`; `x0` `[n, d, m]` is written.
pub fn replicate_forward(gpu: &Gpu, n: usize, d: usize, m: usize, e: View, x0: View) -> Result<Vec<Dispatch>> {
    let what = "expand::replicate_forward";
    replicate_validate(what, n, d, m)?;
    need(what, "e", "[n, d]", &e, n * d)?;
    need(what, "x0", "[n, d, m]", &x0, n * d * m)?;
    let p = params(n, n, d, m, 1);
    if m == 4 && x0.offset.is_multiple_of(16) {
        // One vec4 store per row.
        let b = [("e", e), ("x04", x0.sub(0, n * d * m))];
        return Ok(vec![launch(gpu, "expand", "replicate_forward4", bytemuck::bytes_of(&p), &b, n * d)?]);
    }
    Ok(vec![launch(gpu, "expand", "replicate_forward", bytemuck::bytes_of(&p), &[("e", e), ("x0", x0)], n * d)?])
}

/// [`replicate_forward`] for m = 4 into a half-precision state (`--f16-state`, needs
/// SHADER_F16): `x0` holds n·d rows of four f16 (n·d·2 four-byte elements).
pub fn replicate_forward_f16(gpu: &Gpu, n: usize, d: usize, e: View, x0: View) -> Result<Vec<Dispatch>> {
    let what = "expand::replicate_forward_f16";
    replicate_validate(what, n, d, 4)?;
    need(what, "e", "[n, d]", &e, n * d)?;
    need(what, "x0", "[n, d, 4] in f16", &x0, n * d * 2)?;
    #[repr(C)]
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    struct P16 {
        count: u32,
        _pad: [u32; 3],
    }
    let p = P16 { count: (n * d) as u32, _pad: [0; 3] };
    let b = [("e", e), ("x0h", x0.sub(0, n * d * 2))];
    Ok(vec![launch(gpu, "state16", "replicate_forward4_h", bytemuck::bytes_of(&p), &b, n * d)?])
}

/// Replication backward: `de[t,i] = Σ_j g[t,i,j]` (j in order). `g` `[n, d, m]`; `de` `[n, d]` is
/// written.
pub fn replicate_backward(gpu: &Gpu, n: usize, d: usize, m: usize, g: View, de: View) -> Result<Vec<Dispatch>> {
    let what = "expand::replicate_backward";
    replicate_validate(what, n, d, m)?;
    need(what, "g", "[n, d, m]", &g, n * d * m)?;
    need(what, "de", "[n, d]", &de, n * d)?;
    let p = params(n, n, d, m, 1);
    if m == 4 && g.offset.is_multiple_of(16) {
        // One vec4 load per row, summed in the same order.
        let b = [("g4", g.sub(0, n * d * m)), ("de", de)];
        return Ok(vec![launch(gpu, "expand", "replicate_backward4", bytemuck::bytes_of(&p), &b, n * d)?]);
    }
    Ok(vec![launch(gpu, "expand", "replicate_backward", bytemuck::bytes_of(&p), &[("g", g), ("de", de)], n * d)?])
}
