//! The two DDL compressors a = Comp(X) (`shaders/shortconv.wgsl`), forward and backward: the
//! token-axis causal depthwise ShortConv with read vector (spec 3.3, 11.2) and the value-axis CC
//! compressor (spec 3.4, 11.3).
//!
//! Layouts: states `[B, T, d, m]` (= `[N, d, m]`, value index fastest), compressed outputs
//! `[B, T, d]`; token kernel `[d, m, K]` (tap `K−1` = current token), CC kernel `[d, kc]`, read
//! vector `[m]`. A view may be longer than its tensor; only the leading elements are used.
//!
//! Parameter gradients are accumulated (`+=`) deterministically: per-workgroup partial sums over
//! fixed chunks of tokens in launcher-allocated scratch ([`Dispatch::scratch`]), then fixed-order
//! passes over the chunks and over the features. The chunking depends only on the shape, so the
//! same inputs give bit-identical gradients.

use crate::gpu::{DType, Dispatch, Gpu, GpuError, Result, Tensor, View, WG_1D, grid_1d};
use crate::kernels::{gcd, need};
use crate::shaders::ConvKey;

/// Sizes of a token-axis convolution over a batch of sequences: `batch` sequences of `seq`
/// tokens, `d` features, `m` value channels, `kernel` taps.
#[derive(Clone, Copy, Debug)]
pub struct ConvShape {
    pub batch: usize,
    pub seq: usize,
    pub d: usize,
    pub m: usize,
    pub kernel: usize,
    /// The states X are stored in half precision (`--f16-state`: m = 4, windowed kernels, needs
    /// SHADER_F16): views of X then hold n·d·m/2 four-byte elements. Sums stay f32.
    pub state_f16: bool,
}

impl ConvShape {
    /// Number of tokens B·T.
    pub fn tokens(&self) -> usize {
        self.batch * self.seq
    }

    /// Four-byte elements a view of the states X must hold: n·d·m, or half that in f16.
    pub fn state_elems(&self) -> usize {
        let e = self.tokens() * self.d * self.m;
        if self.state_f16 { e / 2 } else { e }
    }

    /// Errors unless every size is at least 1 and every index fits the shaders' u32 arithmetic.
    pub(crate) fn validate(&self, what: &str) -> Result<()> {
        let s = self;
        if s.batch == 0 || s.seq == 0 || s.d == 0 || s.m == 0 || s.kernel == 0 {
            return Err(GpuError::Shape(format!("{what}: every size must be at least 1, got {s:?}")));
        }
        if s.state_f16 && (s.m != 4 || !windowed(s)) {
            return Err(GpuError::Shape(format!(
                "{what}: an f16 state needs m = 4 value channels and K ≤ {WINDOW_K} taps, got m = {}, K = {}",
                s.m, s.kernel
            )));
        }
        let (_, chunks) = chunking_min(s.tokens(), TOKEN_MIN_CHUNK);
        fits_u32(
            what,
            &[
                s.tokens() as u128 * (s.d * s.m) as u128 + s.kernel as u128,
                chunks as u128 * (s.d * s.m * s.kernel) as u128,
            ],
        )
    }
}

/// Sizes of a value-axis (CC) compressor: `n` tokens, `d` features, `m` value channels, `kc` taps.
#[derive(Clone, Copy, Debug)]
pub struct ValueShape {
    pub n: usize,
    pub d: usize,
    pub m: usize,
    pub kc: usize,
}

/// A compressor's backward: what its forward read (the states `x`, κ, ρ), the gradient of its
/// output (`da`), and the gradients it accumulates (`dx`, `dkappa`, `drho`; all `+=`). The
/// token-axis walk ([`token_backward_walk`]) reads x, κ, ρ, ∂a and writes ∂X; its finish
/// ([`token_backward_finish`]) reads κ, ρ and adds into dκ, dρ.
#[derive(Clone, Copy)]
pub struct ConvGrads<'a> {
    pub x: View<'a>,
    pub kappa: View<'a>,
    pub rho: View<'a>,
    pub da: View<'a>,
    pub dx: View<'a>,
    pub dkappa: View<'a>,
    pub drho: View<'a>,
}

/// Uniform parameters shared by every entry point of `shortconv.wgsl` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    seq: u32,
    d: u32,
    m: u32,
    k: u32,
    chunk: u32,
    chunks: u32,
    pi: u32,
    rk: u32,
    _pad: [u32; 3],
}

/// Fewest tokens summed sequentially by one invocation of a partial-sum pass.
const MIN_CHUNK: usize = 32;
/// Most chunks (partial sums per parameter element) of a partial-sum pass.
const MAX_CHUNKS: usize = 256;

/// Fewest tokens per chunk of the token-axis compressor's walks: shorter walks measured faster
/// there (token_forward 7.0 → 3.5 ms at shakespeare-char shapes with 16 instead of 32; 8 was no
/// better), whatever the extra preloads and partial sums cost.
const TOKEN_MIN_CHUNK: usize = 16;

/// Fewest tokens per chunk of the one-walk backward (K = 4, m ≤ 4: [`sums_into_de`]): half the
/// chunk partials of 16-token walks, so half the finish's loads. On CPU adapters the walk runs
/// in quads ([`conv_quads`]) or as a sweep ([`walk_sweep`]), which keep its reads local whatever
/// the walk length: with the sweep, walks and finish together measured 20–26 → 18–19.5 ms per
/// tiny step and 232–237 → 206–215 ms per shakespeare-char step with 32 instead of 16, and with
/// quads 14–21 ms against 15–31 ms (docs/PERF-LOG.md, session 12).
const ONE_WALK_CHUNK: usize = 32;

/// Fewest tokens per chunk of the backward's partial sums for shape `s`.
fn walk_chunk(gpu: &Gpu, s: &ConvShape) -> usize {
    if sums_into_de(gpu, s) { ONE_WALK_CHUNK } else { TOKEN_MIN_CHUNK }
}

/// Whether the windowed forward and the one-walk backward run in quads (`token_forward_wq`,
/// `token_backward_wq*`: one invocation per four consecutive features, ∂a, a and ∂e as vec4s):
/// where the device's `conv_quads` form is on (CPU adapters) and d is a multiple of 4. There a
/// SIMD batch walks its chunk's tokens one state row apart, and quads make it read 32 features'
/// rows per step instead of 8 (probe: the walk 3.0–3.3 → 1.2–1.4 ms, the forward −15 to −25 %;
/// docs/PERF-LOG.md, session 12). GPUs keep one feature per invocation (neighbouring invocations
/// read neighbouring memory).
pub fn conv_quads(gpu: &Gpu, s: &ConvShape) -> bool {
    quads_for_width(gpu, s.d)
}

/// [`conv_quads`] for width `d` (either compressor axis).
fn quads_for_width(gpu: &Gpu, d: usize) -> bool {
    d.is_multiple_of(4) && gpu.forms.conv_quads
}

/// Whether the one-walk backward ([`token_backward_walk`]), where it does not run in quads
/// ([`conv_quads`]: d not a multiple of 4, or quads turned off), runs as a sweep
/// (`token_backward_w*_s`: a workgroup barrier after every token step, so that a step's rows are
/// read in memory order): the device's `conv_sweep` form. On CPU adapters (llvmpipe runs each
/// SIMD batch's whole walk before the next one unless a barrier switches them, so without the
/// barrier every batch strides through the chunk's tokens and misses the cache on each row:
/// −30 % per walk with the barrier, docs/PERF-LOG.md); GPUs keep the barrier-free walk, whose
/// neighbouring invocations already read neighbouring memory.
pub fn walk_sweep(gpu: &Gpu) -> bool {
    gpu.forms.conv_sweep
}

/// Whether the windowed walks that run one feature per invocation without the sweep (the GPU
/// layout: `token_forward_w`, the one-walk backward) load four tokens' rows before computing and
/// storing them (`token_forward_wb`, `token_backward_wb*`): the device's `conv_batch` form, off
/// until a GPU measures it. In the plain walks each load follows the previous token's store, an
/// order a driver that cannot prove the bindings distinct must keep: one token's loads in flight
/// per invocation. The same sums in the same order, so the same bits.
pub fn walk_batch(gpu: &Gpu) -> bool {
    gpu.forms.conv_batch
}

/// Fewest tokens one invocation of the windowed forward walks: the device's `conv_fwd_chunk`
/// form, 16 on every adapter. The forward has no partial sums, so a longer walk only saves window
/// preloads (K − 1 state rows per walk), but on CPU adapters a SIMD batch strides through its
/// walk's tokens one state row apart, and with 64-token walks the rows that the next batch needs
/// were evicted first: 64 measured 10–35 % slower than 16 in the training step (tiny,
/// shakespeare-char; docs/PERF-LOG.md, session 12).
fn forward_chunk(gpu: &Gpu) -> usize {
    gpu.forms.conv_forward_chunk.max(1)
}

/// `(chunk, chunks)`: tokens per chunk and number of chunks for a reduction over `n` tokens.
/// Depends on `n` only (determinism).
pub(crate) fn chunking(n: usize) -> (usize, usize) {
    chunking_min(n, MIN_CHUNK)
}

/// [`chunking`] with at least `min_chunk` tokens per chunk.
pub(crate) fn chunking_min(n: usize, min_chunk: usize) -> (usize, usize) {
    let chunks = n.div_ceil(min_chunk).clamp(1, MAX_CHUNKS);
    let chunk = n.div_ceil(chunks).max(1);
    (chunk, n.div_ceil(chunk).max(1))
}

/// Elements of scratch one token-axis backward ([`token_backward`]) keeps with the default forms
/// (`conv_k4` on): the chunk partials, and the wide finish's sums (`finish_scratch_elems` of a
/// block's two calls: what a GPU keeps; a CPU adapter's finish keeps none), for memory plans.
pub fn token_backward_scratch_elems(s: &ConvShape) -> usize {
    let chunk = if windowed(s) && s.kernel == 4 { ONE_WALK_CHUNK } else { TOKEN_MIN_CHUNK };
    let (_, chunks) = chunking_min(s.tokens(), chunk);
    partial_elems(s, chunk) + finish_scratch_elems(s, 2 * chunks)
}

/// Rows of chunk partials one invocation of the wide finish's first pass adds
/// (`token_finish_groups`); with at most this many rows in all it is skipped.
const FINISH_GROUP_ROWS: usize = 32;

/// Groups of rows of the wide finish over `rows` rows of chunk partials (1: no group pass).
fn finish_groups(rows: usize) -> usize {
    if rows <= FINISH_GROUP_ROWS { 1 } else { rows.div_ceil(FINISH_GROUP_ROWS) }
}

/// Scratch of the wide finish over `rows` rows of chunk partials: the group sums (when there is
/// more than one group) and the drho terms q `[d, m, K]`.
fn finish_scratch_elems(s: &ConvShape, rows: usize) -> usize {
    let g = finish_groups(rows);
    (if g > 1 { g } else { 0 } + 1) * s.d * s.m * s.kernel
}

/// The chunk partials of a token-axis backward of `s` on `gpu`.
fn token_partial_elems(gpu: &Gpu, s: &ConvShape) -> usize {
    partial_elems(s, walk_chunk(gpu, s))
}

fn partial_elems(s: &ConvShape, chunk: usize) -> usize {
    let (_, chunks) = chunking_min(s.tokens(), chunk);
    chunks * s.d * s.m * s.kernel
}

/// Elements of scratch one value-axis backward ([`value_backward`]) keeps.
pub fn value_backward_scratch_elems(n: usize, d: usize, m: usize) -> usize {
    let (_, chunks) = chunking(n);
    (chunks + 2) * d * m
}

/// Errors when an index the shaders compute could overflow u32.
pub(crate) fn fits_u32(what: &str, extents: &[u128]) -> Result<()> {
    for &e in extents {
        if e >= u32::MAX as u128 {
            return Err(GpuError::Shape(format!(
                "{what}: {e} elements exceed the 2^32 indexable by the shader; split the batch"
            )));
        }
    }
    Ok(())
}

/// Binds `entry` of `shader` over `threads` invocations (1-D grid of 256-wide workgroups).
pub(crate) fn launch(
    gpu: &Gpu,
    shader: &str,
    entry: &str,
    params: &[u8],
    buffers: &[(&str, View<'_>)],
    threads: usize,
) -> Result<Dispatch> {
    launch_variant(gpu, shader, None, entry, params, buffers, threads, WG_1D)
}

/// [`launch`] from a shader variant, in workgroups of `wg` invocations (the entry point's size).
#[allow(clippy::too_many_arguments)]
fn launch_variant(
    gpu: &Gpu,
    shader: &str,
    variant: Option<&str>,
    entry: &str,
    params: &[u8],
    buffers: &[(&str, View<'_>)],
    threads: usize,
    wg: u32,
) -> Result<Dispatch> {
    let k = gpu.kernel(shader, variant, entry)?;
    let grid = grid_1d(threads as u64, wg, gpu.limits.max_compute_workgroups_per_dimension);
    k.dispatch(gpu, Some(params), buffers, grid)
}

/// [`conv`] for the quad entry points (workgroups of `WGQ` = 64 invocations).
fn conv_q(
    gpu: &Gpu,
    variant: &str,
    entry: &str,
    pb: &[u8],
    bufs: &[(&str, View<'_>)],
    threads: usize,
) -> Result<Dispatch> {
    launch_variant(gpu, "shortconv", Some(variant), entry, pb, bufs, threads, WGQ)
}

/// Invocations per workgroup of the quad entry points (`WGQ` in the shader).
const WGQ: u32 = 64;

fn scratch(gpu: &Gpu, label: &str, elems: usize) -> Result<Tensor> {
    Tensor::zeros(gpu, label, &[elems], DType::F32)
}

/// Token-axis compressor forward (spec 3.3):
/// `a[b,t,i] = Σ_j ρ_j Σ_{s<K} κ[i,j,s]·X[b, t−(K−1)+s, i, j]`, zero before position 0.
///
/// `x` `[B, T, d, m]`, `kappa` `[d, m, K]`, `rho` `[m]`; `a` `[B, T, d]` is written. Correct for
/// any T ≥ 1 (T < K included: decoding runs it on a window of the last states).
pub fn token_forward(gpu: &Gpu, s: &ConvShape, x: View, kappa: View, rho: View, a: View) -> Result<Vec<Dispatch>> {
    let what = "shortconv::token_forward";
    s.validate(what)?;
    let n = s.tokens();
    let (d, m, k) = (s.d, s.m, s.kernel);
    need(what, "x", "[B, T, d, m]", &x, s.state_elems())?;
    need(what, "kappa", "[d, m, K]", &kappa, d * m * k)?;
    need(what, "rho", "[m]", &rho, m)?;
    need(what, "a", "[B, T, d]", &a, n * d)?;
    let (chunk, chunks) = chunking_min(n, forward_chunk(gpu));
    let p = Params { chunk: chunk as u32, chunks: chunks as u32, ..token_params(gpu, s) };
    let pb = bytemuck::bytes_of(&p);
    let disp = if windowed(s) && conv_quads(gpu, s) {
        let bufs = [("xr", x), ("kappa", kappa), ("rho", rho), ("a4", a)];
        conv_q(gpu, &window_variant(gpu, s), "token_forward_wq", pb, &bufs, d / 4 * p.chunks as usize)?
    } else if windowed(s) {
        let v = window_variant(gpu, s);
        let bufs = [("xr", x), ("kappa", kappa), ("rho", rho), ("a", a)];
        let entry = if walk_batch(gpu) { "token_forward_wb" } else { "token_forward_w" };
        conv(gpu, &v, entry, pb, &bufs, d * p.chunks as usize)?
    } else {
        let bufs = [("x", x), ("kappa", kappa), ("rho", rho), ("a", a)];
        conv(gpu, &generic(), "token_forward", pb, &bufs, n * d)?
    };
    Ok(vec![disp])
}

/// `drho[j] += Σ q[·, j, ·]`: one workgroup per value channel.
fn drho_dispatch(gpu: &Gpu, pb: &[u8], drho: View, q: &Tensor, m: usize) -> Result<Dispatch> {
    let bufs = [("drho", drho), ("q", q.view())];
    conv(gpu, &generic(), "reduce_drho", pb, &bufs, m * WG_1D as usize)
}

/// The shader variant the per-element kernels are launched from (they do not use its `Row`).
fn generic() -> String {
    ConvKey::GENERIC.name()
}

/// The shader variant of the windowed kernels for `s`: rows of m, and a window of 4 token states
/// with K = 4 compiled in when K = 4 (else 8 slots, K from the parameters). The form
/// `conv_k4=0` forces the general variant (for measurements).
/// An f16 state adds `h` (the `…h` variants).
fn window_variant(gpu: &Gpu, s: &ConvShape) -> String {
    ConvKey { m: s.m, k4: window_k4(gpu, s), f16: s.state_f16 }.name()
}

/// Whether the windowed kernels of `s` have K = 4 compiled in (K = 4 and the device's `conv_k4`
/// form).
fn window_k4(gpu: &Gpu, s: &ConvShape) -> bool {
    s.kernel == 4 && gpu.forms.conv_k4
}

/// Binds `entry` of the compressor shader, variant `variant`, over `threads` invocations.
fn conv(
    gpu: &Gpu,
    variant: &str,
    entry: &str,
    pb: &[u8],
    bufs: &[(&str, View<'_>)],
    threads: usize,
) -> Result<Dispatch> {
    launch_variant(gpu, "shortconv", Some(variant), entry, pb, bufs, threads, WG_1D)
}

/// Largest m and K of the windowed token-axis kernels (`*_w` in the shader: the state of a
/// feature as one vec4, a window of 8 tokens). Other shapes use the per-element kernels.
const WINDOW_M: usize = 4;
const WINDOW_K: usize = 8;

/// Whether the token-axis compressor of `s` runs the windowed kernels, which read X and ∂a once
/// per token instead of once per tap (3–8× fewer loads; docs/PERF-LOG.md).
pub fn windowed(s: &ConvShape) -> bool {
    s.m <= WINDOW_M && s.kernel <= WINDOW_K
}

/// Where [`token_backward_walk`] puts the state gradient.
pub enum WalkOut<'a> {
    /// Added into `dx` (which holds the rest of the state's gradient).
    AddToDx,
    /// `de[b,t,i]` = Σ_j (dx + the compressor's gradient)`[b,t,i,j]`, `dx` left as it was: the
    /// backward of a replicated embedding (`expand::replicate_backward`) fused into the last call.
    SumIntoDe(View<'a>),
    /// Written into `dx` (nothing read from it: the readout's call, the first into a fresh ∂X).
    WriteDx,
}

/// Whether [`token_backward_walk`] can write Σ_j of the state gradient (`de`), or write `dx`
/// without reading it: the one-walk kernel (windowed, K = 4 compiled in).
pub fn sums_into_de(gpu: &Gpu, s: &ConvShape) -> bool {
    windowed(s) && window_k4(gpu, s)
}

fn token_params(gpu: &Gpu, s: &ConvShape) -> Params {
    let (chunk, chunks) = chunking_min(s.tokens(), walk_chunk(gpu, s));
    Params {
        n: s.tokens() as u32,
        seq: s.seq as u32,
        d: s.d as u32,
        m: s.m as u32,
        k: s.kernel as u32,
        chunk: chunk as u32,
        chunks: chunks as u32,
        pi: 0,
        rk: s.kernel as u32,
        _pad: [0; 3],
    }
}

/// Token-axis compressor backward (spec 11.2), all three outputs **accumulated**:
/// - `dx[b,τ,i,j] += Σ_s κ[i,j,s]·ρ_j·da[b, τ+K−1−s, i]` (terms beyond T−1 dropped),
/// - `dkappa[i,j,s] += Σ_{b,t} ρ_j·da[b,t,i]·X[b, t−K+1+s, i, j]`,
/// - `drho[j] += Σ_{b,t,i} da[b,t,i]·X̃[b,t,i,j]`, evaluated as `Σ_{i,s} κ[i,j,s]·P[i,j,s]` with
///   `P[i,j,s] = Σ_{b,t} da[b,t,i]·X[b,t−K+1+s,i,j]` (the same sum regrouped; X̃ is not stored).
///
/// Three dispatches: dx; per-chunk partials of P (scratch `[chunks, m, d, K]`); the chunk sums
/// into dkappa and the drho sums (one workgroup per j). With K = 4 (every preset) dx and the
/// partials come from one walk: two dispatches.
pub fn token_backward(gpu: &Gpu, s: &ConvShape, g: ConvGrads) -> Result<Vec<Dispatch>> {
    token_backward_out(gpu, s, g, WalkOut::AddToDx)
}

/// [`token_backward`] with the state gradient put where `out` says ([`WalkOut`]).
pub fn token_backward_out(gpu: &Gpu, s: &ConvShape, g: ConvGrads, out: WalkOut) -> Result<Vec<Dispatch>> {
    let what = "shortconv::token_backward";
    s.validate(what)?;
    need(what, "dkappa", "[d, m, K]", &g.dkappa, s.d * s.m * s.kernel)?;
    need(what, "drho", "[m]", &g.drho, s.m)?;
    let partial = token_partials(gpu, s, 1)?;
    let mut out = token_backward_walk(gpu, s, g, partial.view(), out)?;
    out.last_mut().expect("at least one pass").scratch.push(partial.clone());
    out.extend(token_backward_finish(gpu, s, g, &partial, 1)?);
    Ok(out)
}

/// The first part of [`token_backward`]: adds into `dx` and writes this call's chunk partials of
/// P (`[chunks, m, d, K]`, [`token_backward_scratch_elems`] elements) into `partial`. Calls that
/// share κ and ρ (a block's two compressor calls) can write consecutive slots of one buffer and
/// have [`token_backward_finish`] add all of them at once.
///
/// `out`: where the state gradient goes ([`WalkOut`]; the last two only where
/// [`sums_into_de`] holds). `g.dkappa` and `g.drho` are not touched here.
pub fn token_backward_walk(
    gpu: &Gpu,
    s: &ConvShape,
    g: ConvGrads,
    partial: View,
    out: WalkOut,
) -> Result<Vec<Dispatch>> {
    let ConvGrads { x, kappa, rho, da, dx, .. } = g;
    let adds = matches!(out, WalkOut::AddToDx);
    // The entry points of each layout: plain, quads, batched; the sweep is the plain one + `_s`.
    let (de, entry, entry_q, entry_b) = match out {
        WalkOut::AddToDx => (None, "token_backward_w", "token_backward_wq", "token_backward_wb"),
        WalkOut::SumIntoDe(de) => (Some(de), "token_backward_w_de", "token_backward_wq_de", "token_backward_wb_de"),
        WalkOut::WriteDx => (None, "token_backward_w_write", "token_backward_wq_write", "token_backward_wb_write"),
    };
    let what = "shortconv::token_backward";
    s.validate(what)?;
    let n = s.tokens();
    let (d, m, k) = (s.d, s.m, s.kernel);
    let dm = d * m;
    need(what, "x", "[B, T, d, m]", &x, s.state_elems())?;
    need(what, "kappa", "[d, m, K]", &kappa, dm * k)?;
    need(what, "rho", "[m]", &rho, m)?;
    need(what, "da", "[B, T, d]", &da, n * d)?;
    need(what, "dx", "[B, T, d, m]", &dx, n * dm)?;
    need(what, "partial", "[chunks, m, d, K]", &partial, token_partial_elems(gpu, s))?;
    if !adds && !sums_into_de(gpu, s) {
        return Err(GpuError::Shape(format!(
            "{what}: writing dx or Σ_j into de needs the one-walk kernel (m ≤ 4, K = 4), got {s:?}"
        )));
    }
    if let Some(de) = &de {
        need(what, "de", "[B, T, d]", de, n * d)?;
    }
    let p = token_params(gpu, s);
    let pb = bytemuck::bytes_of(&p);
    let chunks = p.chunks as usize;
    // ∂X and the chunk partials of P: one walk with K = 4 compiled in (`token_backward_w`:
    // 12-25 % faster than two walks; a first fusion that kept both windows was slower, see
    // docs/PERF-LOG.md), else two passes (windowed or per element).
    Ok(if sums_into_de(gpu, s) {
        // `de` is bound either way (the entry point uses it); a stand-in of one vec4 when unused.
        let unused = match de {
            Some(_) => None,
            None => Some(scratch(gpu, "shortconv.de_unused", 4)?),
        };
        let de = de.unwrap_or_else(|| unused.as_ref().expect("a stand-in").view());
        // The quad entry points see ∂a and ∂e as vec4s (bindings `da4`, `de4`).
        let quads = conv_quads(gpu, s);
        let (da_at, de_at) = if quads { ("da4", "de4") } else { ("da", "de") };
        let bufs =
            [("kappa4", kappa), ("rho", rho), (da_at, da), ("dxr", dx), ("xr", x), ("partial4", partial), (de_at, de)];
        let mut walk = if quads {
            conv_q(gpu, &window_variant(gpu, s), entry_q, pb, &bufs, d / 4 * chunks)?
        } else {
            let entry = if walk_sweep(gpu) {
                format!("{entry}_s")
            } else if walk_batch(gpu) {
                entry_b.to_string()
            } else {
                entry.to_string()
            };
            conv(gpu, &window_variant(gpu, s), &entry, pb, &bufs, d * chunks)?
        };
        walk.scratch.extend(unused.clone());
        vec![walk]
    } else if windowed(s) && (gpu.info.backend != wgpu::Backend::Gl || window_k4(gpu, s)) {
        // (Not on OpenGL with the 8-slot window: there its backward walks give wrong ∂X on
        // Mesa 22.3's llvmpipe — the same WGSL is right on Vulkan, and the per-element kernels
        // are right on both; tests/kernels/shortconv.rs checks whichever path runs.)
        let v = window_variant(gpu, s);
        let bufs = [("kappa", kappa), ("rho", rho), ("da", da), ("dxr", dx)];
        let d_dx = conv(gpu, &v, "token_backward_dx_w", pb, &bufs, d * chunks)?;
        let bufs = [("xr", x), ("da", da), ("partial", partial)];
        vec![d_dx, conv(gpu, &v, "token_backward_partial_w", pb, &bufs, d * chunks)?]
    } else if s.state_f16 {
        return Err(GpuError::Shape(format!(
            "{what}: an f16 state needs the windowed kernels, which this adapter's backend ({:?}) does not run for K = {k}",
            gpu.info.backend
        )));
    } else {
        let bufs = [("kappa", kappa), ("rho", rho), ("da", da), ("dx", dx)];
        let d_dx = conv(gpu, &generic(), "token_backward_dx", pb, &bufs, n * dm)?;
        let bufs = [("x", x), ("da", da), ("partial", partial)];
        let threads = dm.div_ceil(WG_1D as usize) * k * chunks * WG_1D as usize;
        vec![d_dx, conv(gpu, &generic(), "token_backward_partial", pb, &bufs, threads)?]
    })
}

/// Chunk rows of one slot of [`token_partials`]: the walk's chunks, rounded up so that every
/// slot starts where a storage binding may start (the extra rows stay zero).
fn slot_chunks(gpu: &Gpu, s: &ConvShape) -> usize {
    let (_, chunks) = chunking_min(s.tokens(), walk_chunk(gpu, s));
    let row = s.d * s.m * s.kernel;
    let q = crate::kernels::reduce::align_elems(gpu);
    let step = q / gcd(q, row);
    chunks.next_multiple_of(step)
}

/// Zeroed chunk partials for `calls` calls of one compressor (same shape, κ and ρ: a block's
/// two): slot `c` is [`token_partial_slot`]`(…, c)`; [`token_backward_finish`] sums all slots.
pub fn token_partials(gpu: &Gpu, s: &ConvShape, calls: usize) -> Result<Tensor> {
    scratch(gpu, "shortconv.token.partial", calls * slot_chunks(gpu, s) * s.d * s.m * s.kernel)
}

/// Slot `c` of [`token_partials`], for [`token_backward_walk`].
pub fn token_partial_slot<'a>(gpu: &Gpu, s: &ConvShape, partial: &'a Tensor, c: usize) -> View<'a> {
    let len = slot_chunks(gpu, s) * s.d * s.m * s.kernel;
    partial.view().sub(c * len, len)
}

/// The last part of [`token_backward`]: the sums over the `calls` slots of [`token_partials`]
/// (written by [`token_backward_walk`] with the same shape, κ and ρ), in slot and chunk order,
/// into `dkappa` (+= ρ_j·P) and `drho` (+= Σ_{i,s} κ·P). Keeps `partial` alive.
///
/// Two forms, each deterministic (they round differently: the wide one adds the rows in groups):
/// one workgroup per value channel, each lane adding every chunk row of its elements in turn
/// (`token_backward_finish`: one dispatch, m workgroups — CPU adapters, where a few long-running
/// workgroups suit the worker threads), or, where the device's `conv_finish_wide` form is on
/// (GPUs), the same sums spread over the grid: group sums of `FINISH_GROUP_ROWS` rows
/// (`token_finish_groups`, skipped for few rows), one invocation per kernel element
/// (`token_finish_elems`: dkappa and the drho terms), then `reduce_drho` — two or three
/// dispatches. Of `g`, only κ, ρ, dκ and dρ are used.
pub fn token_backward_finish(
    gpu: &Gpu,
    s: &ConvShape,
    g: ConvGrads,
    partial: &Tensor,
    calls: usize,
) -> Result<Vec<Dispatch>> {
    let ConvGrads { kappa, rho, dkappa, drho, .. } = g;
    let what = "shortconv::token_backward";
    let (dm, k) = (s.d * s.m, s.kernel);
    need(what, "dkappa", "[d, m, K]", &dkappa, dm * k)?;
    need(what, "drho", "[m]", &drho, s.m)?;
    let rows = calls * slot_chunks(gpu, s);
    need(what, "partial", "[calls, chunks, m, d, K]", &partial.view(), rows * dm * k)?;
    let p = Params { chunks: rows as u32, ..token_params(gpu, s) };
    if !gpu.forms.conv_finish_wide {
        let mut d_fin = conv(
            gpu,
            &generic(),
            "token_backward_finish",
            bytemuck::bytes_of(&p),
            &[("kappa", kappa), ("rho", rho), ("dkappa", dkappa), ("drho", drho), ("partial", partial.view())],
            s.m * WG_1D as usize,
        )?;
        d_fin.scratch.push(partial.clone());
        return Ok(vec![d_fin]);
    }
    let mdk = dm * k;
    let groups = finish_groups(rows);
    let mut out = Vec::with_capacity(3);
    // The rows the element pass adds: the group sums, or the chunk partials themselves.
    let summed = if groups > 1 {
        let gpart = scratch(gpu, "shortconv.finish.groups", groups * mdk)?;
        let pg = Params { chunk: FINISH_GROUP_ROWS as u32, ..p };
        let mut d_g = conv(
            gpu,
            &generic(),
            "token_finish_groups",
            bytemuck::bytes_of(&pg),
            &[("partial", partial.view()), ("gpart", gpart.view())],
            groups * mdk,
        )?;
        d_g.scratch.push(partial.clone());
        out.push(d_g);
        (gpart, groups)
    } else {
        (partial.clone(), rows)
    };
    let q = scratch(gpu, "shortconv.finish.q", mdk)?;
    let pe = Params { chunks: summed.1 as u32, ..p };
    let mut d_e = conv(
        gpu,
        &generic(),
        "token_finish_elems",
        bytemuck::bytes_of(&pe),
        &[("kappa", kappa), ("rho", rho), ("dkappa", dkappa), ("partial", summed.0.view()), ("q", q.view())],
        mdk,
    )?;
    d_e.scratch.push(summed.0.clone());
    out.push(d_e);
    let mut d_r = conv(
        gpu,
        &generic(),
        "reduce_drho",
        bytemuck::bytes_of(&p),
        &[("q", q.view()), ("drho", drho)],
        s.m * WG_1D as usize,
    )?;
    d_r.scratch.push(q);
    out.push(d_r);
    Ok(out)
}

fn value_params(n: usize, d: usize, m: usize, kc: usize) -> Params {
    let (chunk, chunks) = chunking(n);
    Params {
        n: n as u32,
        seq: n as u32,
        d: d as u32,
        m: m as u32,
        k: kc as u32,
        chunk: chunk as u32,
        chunks: chunks as u32,
        pi: ((kc - 1) / 2) as u32,
        rk: 1,
        _pad: [0; 3],
    }
}

fn value_validate(what: &str, vs: &ValueShape) -> Result<()> {
    let ValueShape { n, d, m, kc } = *vs;
    if n == 0 || d == 0 || m == 0 || kc == 0 {
        return Err(GpuError::Shape(format!("{what}: every size must be at least 1, got n={n} d={d} m={m} kc={kc}")));
    }
    let (_, chunks) = chunking(n);
    fits_u32(what, &[n as u128 * (d * m) as u128, chunks as u128 * (d * m) as u128, (d * kc) as u128])
}

/// Value-axis (CC) compressor forward (spec 3.4), per token:
/// `a[i] = Σ_j Ω[i,j]·X[i,j]`, `Ω[i,j] = Σ_{r<m} ρ_r·κ[i, π+j−r]`, `π = ⌊(kc−1)/2⌋`, terms
/// with `π+j−r ∉ [0, kc)` dropped.
///
/// `x` `[n, d, m]`, `kappa` `[d, kc]`, `rho` `[m]`; `a` `[n, d]` is written. Any kc ≥ 1 (the
/// reference configurations have kc = m).
pub fn value_forward(gpu: &Gpu, vs: &ValueShape, x: View, kappa: View, rho: View, a: View) -> Result<Vec<Dispatch>> {
    let what = "shortconv::value_forward";
    value_validate(what, vs)?;
    let ValueShape { n, d, m, kc } = *vs;
    need(what, "x", "[n, d, m]", &x, n * d * m)?;
    need(what, "kappa", "[d, kc]", &kappa, d * kc)?;
    need(what, "rho", "[m]", &rho, m)?;
    need(what, "a", "[n, d]", &a, n * d)?;
    let p = value_params(n, d, m, kc);
    // CPU adapters: quads of features walking chunks of tokens, Ω formed once per quad (m ≤ 4).
    if value_quads(gpu, d, m) {
        let (chunk, chunks) = chunking_min(n, forward_chunk(gpu));
        let p = Params { chunk: chunk as u32, chunks: chunks as u32, ..p };
        let bufs = [("xr", x), ("kappa", kappa), ("rho", rho), ("a4", a)];
        return Ok(vec![conv_q(
            gpu,
            &ConvKey { m, k4: false, f16: false }.name(),
            "value_forward_wq",
            bytemuck::bytes_of(&p),
            &bufs,
            d / 4 * chunks,
        )?]);
    }
    Ok(vec![conv(
        gpu,
        &generic(),
        "value_forward",
        bytemuck::bytes_of(&p),
        &[("x", x), ("kappa", kappa), ("rho", rho), ("a", a)],
        n * d,
    )?])
}

/// Whether the CC compressor's forward and its backward's first pass run in quads
/// (`value_forward_wq`, `value_backward_partial_wq`): [`conv_quads`] and m ≤ 4 (a state row is
/// one `Row`).
fn value_quads(gpu: &Gpu, d: usize, m: usize) -> bool {
    m <= WINDOW_M && quads_for_width(gpu, d)
}

/// Value-axis (CC) compressor backward (spec 11.3), all three outputs **accumulated**:
/// `dx[n,i,j] += da[n,i]·Ω[i,j]`; with `∂Ω[i,j] = Σ_n da[n,i]·X[n,i,j]`:
/// `dkappa[i,q] += Σ_r ρ_r·∂Ω[i, q−π+r]`, `drho[r] += Σ_{i,j} ∂Ω[i,j]·κ[i, π+j−r]`.
///
/// Three dispatches: dx together with per-chunk partials of ∂Ω (one pass over X, da, dx;
/// scratch `[chunks, d, m]`); per feature, the chunk sum (scratch ∂Ω `[d, m]`), dkappa and the
/// drho terms (scratch `[d, m]`); one workgroup per r for drho.
pub fn value_backward(gpu: &Gpu, vs: &ValueShape, g: ConvGrads) -> Result<Vec<Dispatch>> {
    let what = "shortconv::value_backward";
    value_validate(what, vs)?;
    let ValueShape { n, d, m, kc } = *vs;
    let ConvGrads { x, kappa, rho, da, dx, dkappa, drho } = g;
    let dm = d * m;
    need(what, "x", "[n, d, m]", &x, n * dm)?;
    need(what, "kappa", "[d, kc]", &kappa, d * kc)?;
    need(what, "rho", "[m]", &rho, m)?;
    need(what, "da", "[n, d]", &da, n * d)?;
    need(what, "dx", "[n, d, m]", &dx, n * dm)?;
    need(what, "dkappa", "[d, kc]", &dkappa, d * kc)?;
    need(what, "drho", "[m]", &drho, m)?;
    let p = value_params(n, d, m, kc);
    let pb = bytemuck::bytes_of(&p);
    let chunks = p.chunks as usize;
    let partial = scratch(gpu, "shortconv.value.partial", chunks * dm)?;
    let domega = scratch(gpu, "shortconv.value.domega", dm)?;
    let q = scratch(gpu, "shortconv.value.q", dm)?;

    // CPU adapters: quads of features (m ≤ 4), as the forward.
    let mut d_part = if value_quads(gpu, d, m) {
        let bufs = [("xr", x), ("kappa", kappa), ("rho", rho), ("da4", da), ("dxr", dx), ("partialr", partial.view())];
        conv_q(
            gpu,
            &ConvKey { m, k4: false, f16: false }.name(),
            "value_backward_partial_wq",
            pb,
            &bufs,
            d / 4 * chunks,
        )?
    } else {
        conv(
            gpu,
            &generic(),
            "value_backward_partial",
            pb,
            &[("x", x), ("kappa", kappa), ("rho", rho), ("da", da), ("dx", dx), ("partial", partial.view())],
            dm.div_ceil(WG_1D as usize) * chunks * WG_1D as usize,
        )?
    };
    let mut d_fin = conv(
        gpu,
        &generic(),
        "value_backward_finalize",
        pb,
        &[
            ("kappa", kappa),
            ("rho", rho),
            ("dkappa", dkappa),
            ("partial", partial.view()),
            ("q", q.view()),
            ("domega", domega.view()),
        ],
        d,
    )?;
    let mut d_rho = drho_dispatch(gpu, pb, drho, &q, m)?;
    d_part.scratch.push(partial.clone());
    d_fin.scratch.extend([partial, domega, q.clone()]);
    d_rho.scratch.push(q);
    Ok(vec![d_part, d_fin, d_rho])
}
