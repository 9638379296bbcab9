//! The DDL delta write (`shaders/delta.wgsl`), forward and backward: spec sections 2, 11.1 and
//! 14.4/14.8 (the v-Map variants use the same write with other inputs).
//!
//! Layouts (row-major, N = `n` tokens): the state `x`, `x_out`, `g`, `dx` are `[N, d, m]` with the
//! value index j fastest (element (t, i, j) at `(t·d + i)·m + j`); `kraw`, `a`, `c`, `k` and their
//! gradients are `[N, d]`; `w_beta` `[d]`, `b_beta` `[1]`, `w_v` `[m, d]` (row j holds the weights
//! of u_j), `b_v` `[m]`; per-token traces `rnorm`, `beta` `[N]`, `v`, `delta` `[N, m]`.
//!
//! The per-token kernels spread a token over a segment of invocations (`segment_width`: the
//! power of two covering d on GPUs, one invocation per token on CPU adapters, where the width-1
//! variants `mJs1` have it compiled in) and do every reduction over d in one pass. With one
//! token per invocation and d a multiple of 4 they run the quad entry points ([`quads`]), which
//! load the `[N, d]` operands and the head weights four features at a time (the heads kernel
//! keeps one feature per invocation). The backward leaves per-token ∂z `[N]` and ∂u `[N, m]` in
//! launcher-allocated scratch; the heads kernel (one invocation per feature and chunk of tokens)
//! turns them into ∂c, ∂a and chunk partials of the head gradients, which column sums add in
//! chunk order (deterministic, no atomics).

use crate::gpu::{Dispatch, Gpu, GpuError, Result, Tensor, View, grid_1d};

/// Largest number of value channels `m` with the multi-lane segment layout (a token's reductions
/// over d spread across up to 128 invocations). Any wider state runs one token per invocation
/// ([`segment_width`] returns 1 for it): the general form, correct for every m ≥ 1, its variant
/// (`m{m}s1`) compiled on first use. On a GPU it trades the spread reductions for serial ones
/// per token; the model's other kernels take any m as it is.
pub const SEGMENT_MAX_M: usize = crate::shaders::DELTA_MAX_M;

/// The value activation `v = act(u)` (spec 14.4, config field `v_act`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VAct {
    /// v = 4σ(u), the k-Map default.
    Sigmoid4,
    /// v = σ(u).
    Sigmoid,
    /// v = u.
    Linear,
}

impl VAct {
    fn code(self) -> u32 {
        match self {
            VAct::Sigmoid4 => 0,
            VAct::Sigmoid => 1,
            VAct::Linear => 2,
        }
    }
}

/// Sizes and options of one delta write.
#[derive(Clone, Copy, Debug)]
pub struct DeltaShape {
    /// Tokens (B·T).
    pub n: usize,
    /// Model width.
    pub d: usize,
    /// Value channels d_v ≥ 1 (above [`SEGMENT_MAX_M`]: one token per invocation).
    pub m: usize,
    /// ε_k of the direction normalisation n = sqrt(‖k̃‖² + ε_k²).
    pub k_eps: f32,
    pub v_act: VAct,
    /// X and X' are stored in half precision (`--f16-state`, m = 4 only, needs SHADER_F16):
    /// their views hold n·d·m/2 four-byte elements. Every sum (p = Xᵀk included) stays f32.
    pub state_f16: bool,
    /// The forward's map of β (interventions; [`BetaMap::IDENTITY`] otherwise).
    pub beta: BetaMap,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    d: u32,
    m: u32,
    v_act: u32,
    k_eps: f32,
    chunk: u32,
    seg: u32,
    chunks: u32,
    accumulate_da: u32,
    /// delta_heads: element offsets of the b_β, W_v and b_v blocks of the partials.
    o_bb: u32,
    o_wv: u32,
    o_bv: u32,
    /// delta_heads: row strides of the w_β, b_β, W_v and b_v partials.
    s_wb: u32,
    s_bb: u32,
    s_wv: u32,
    s_bv: u32,
    /// forward: 1 = store k.
    store_k: u32,
    /// forward: β also into column `beta_col` of a `[n, beta_stride]` buffer (stride 0: not).
    beta_col: u32,
    beta_stride: u32,
    /// forward: the β map ([`BetaMap`]).
    beta_scale: f32,
    beta_add: f32,
    beta_lo: f32,
    beta_hi: f32,
    /// forward: the write's factors on kᵀX (erase) and on v (value), 1 unless intervened.
    erase_scale: f32,
    value_scale: f32,
    _pad: [u32; 3],
}

/// What the forward does to each token's write before using it: the gate β = 2σ(z) becomes
/// β' = clamp(scale · β + add, lo, hi), and the write X' = X + β' k (value · v − erase · kᵀX)ᵀ
/// takes its two terms with factors (`erase` = 0: nothing of the state along k is removed, a
/// rank-1 addition β' k vᵀ; `value` = 0: the operator (I − β' k kᵀ) X alone). The identity
/// (1, 0, 0, 2; 1, 1) leaves every β ∈ [0, 2] and every write bit-exact; other maps are
/// interventions of forward-only (decoding) programs — the backward assumes the identity.
/// Under a map the saved `v` is the value the write used (value · v) and `delta` its
/// value · v − erase · kᵀX, so traces show the write as it was done.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BetaMap {
    pub scale: f32,
    pub add: f32,
    pub lo: f32,
    pub hi: f32,
    /// The factor on the erased part kᵀX.
    pub erase: f32,
    /// The factor on the written value v.
    pub value: f32,
}

impl BetaMap {
    pub const IDENTITY: BetaMap = BetaMap { scale: 1.0, add: 0.0, lo: 0.0, hi: 2.0, erase: 1.0, value: 1.0 };

    /// β' for β, as the kernel computes it (f32 fused multiply-add, then the clamp).
    pub fn apply(&self, beta: f32) -> f32 {
        self.scale.mul_add(beta, self.add).max(self.lo).min(self.hi)
    }
}

impl Default for BetaMap {
    fn default() -> Self {
        BetaMap::IDENTITY
    }
}

/// Fewest tokens one invocation of the heads kernel walks (one partial sum per chunk): 64
/// measured faster than 32 (and 16: 2×), 128 the same.
const HEADS_MIN_CHUNK: usize = 64;

/// Largest gap (elements) between two head gradients that still shares their column sum.
const HEADS_GAP: usize = 64;

/// Invocations per workgroup of both entry points (`WG` in the shader).
const WG: usize = 128;

impl DeltaShape {
    fn check(&self) -> Result<()> {
        let bad = |s: String| Err(GpuError::Shape(format!("delta write n={} d={} m={}: {s}", self.n, self.d, self.m)));
        if self.n == 0 || self.d == 0 || self.m == 0 {
            return bad("n, d and m must be at least 1".into());
        }
        if self.m > 1 << 16 {
            return bad(format!("m = {} value channels; the kernel supports at most 65536", self.m));
        }
        if !(self.k_eps.is_finite() && self.k_eps >= 0.0) {
            return bad(format!("k_eps must be finite and ≥ 0, got {}", self.k_eps));
        }
        if self.state_f16 && self.m != 4 {
            return bad(format!("an f16 state needs m = 4 value channels, got m = {}", self.m));
        }
        let state = self.n as u128 * self.d as u128 * self.m as u128;
        if state > u32::MAX as u128 {
            return bad(format!("the state has {state} elements, more than 2^32 − 1; split the tokens"));
        }
        Ok(())
    }

    fn params(&self, seg: usize) -> Params {
        Params {
            n: self.n as u32,
            d: self.d as u32,
            m: self.m as u32,
            v_act: self.v_act.code(),
            k_eps: self.k_eps,
            chunk: 0,
            seg: seg as u32,
            chunks: 0,
            accumulate_da: 0,
            o_bb: 0,
            o_wv: 0,
            o_bv: 0,
            s_wb: 0,
            s_bb: 0,
            s_wv: 0,
            s_bv: 0,
            store_k: 1,
            beta_col: 0,
            beta_stride: 0,
            beta_scale: self.beta.scale,
            beta_add: self.beta.add,
            beta_lo: self.beta.lo,
            beta_hi: self.beta.hi,
            erase_scale: self.beta.erase,
            value_scale: self.beta.value,
            _pad: [0; 3],
        }
    }

    /// The shader variant for this value width and segment width (`s1`: seg = 1 compiled in;
    /// `s1g`: also the entry points with subgroup-shared loads, see [`shared_loads`]).
    fn variant(&self, gpu: &Gpu, seg: usize) -> String {
        crate::shaders::DeltaKey {
            m: self.m,
            seg1: seg == 1,
            subgroup: shared_loads(gpu, seg),
            f16: self.state_f16,
            packed: gpu.forms.delta_packed,
        }
        .name()
    }

    /// Four-byte elements a view of X (or X') must hold: n·d·m, or half that in f16.
    pub fn state_elems(&self) -> usize {
        let e = self.n * self.d * self.m;
        if self.state_f16 { e / 2 } else { e }
    }

    fn grid(&self, gpu: &Gpu, seg: usize) -> [u32; 3] {
        grid_1d(self.n as u64, (WG / seg) as u32, gpu.limits.max_compute_workgroups_per_dimension)
    }
}

/// Invocations per token. On GPUs: the power of two that covers d, at most a workgroup (narrow
/// states put several tokens in one workgroup), so a token's reductions over d are spread over
/// many lanes. On CPU adapters (llvmpipe): 1 — a barrier is a coroutine switch and every
/// workgroup-memory access a loop over the SIMD lanes there, so one token per invocation with no
/// cross-invocation reduction is 4–5× faster (docs/PERF-LOG.md) — when there are enough tokens
/// (`n` ≥ [`crate::kernels::norm::CPU_ROWS_PER_INVOCATION`]) to fill the SIMD lanes and worker
/// threads; a decoding step's one token keeps the wide segment. The device's forms
/// `delta_rows` (the CPU rule) and `delta_seg` (a fixed width, capped at d's power of two) choose.
///
/// States wider than [`SEGMENT_MAX_M`] value channels always get 1 (their only form).
pub fn segment_width(gpu: &Gpu, n: usize, d: usize, m: usize) -> usize {
    if m > SEGMENT_MAX_M {
        return 1;
    }
    let one_per_token = gpu.forms.delta_one_token_per_invocation && n >= crate::kernels::norm::CPU_ROWS_PER_INVOCATION;
    let choice = match gpu.forms.delta_segment {
        Some(s) if s.is_power_of_two() && s <= WG => s,
        _ if one_per_token => 1,
        _ => WG,
    };
    d.next_power_of_two().min(choice)
}

/// Whether the delta kernels run their quad entry points (`*_q`: one token per invocation, four
/// features per load): on the one-token-per-invocation layout (`seg` = 1, CPU adapters) when d is
/// a multiple of 4 and the device's `delta_quads` form is on.
pub fn quads(gpu: &Gpu, seg: usize, d: usize) -> bool {
    seg == 1 && d.is_multiple_of(4) && gpu.forms.delta_quads
}

/// Whether the one-token-per-invocation layout (`seg` = 1) loads what a whole subgroup shares
/// once per subgroup ([`crate::kernels::subgroup_loads`]): the quad forward's head weights
/// (`delta_forward_qg`) and the heads kernel's ∂z_t, ∂u_t (`delta_heads_g`).
fn shared_loads(gpu: &Gpu, seg: usize) -> bool {
    seg == 1 && crate::kernels::subgroup_loads(gpu)
}

/// Fails unless `view` holds at least `need` elements.
fn need(op: &str, name: &str, view: &View, need: usize) -> Result<()> {
    super::need(&format!("delta {op}"), name, "", view, need)
}

/// Fails when a written view shares its buffer with a read view (wgpu forbids binding a buffer
/// read-only and read-write in one dispatch) or overlaps another written view.
fn check_aliasing(op: &str, reads: &[(&str, &View)], writes: &[(&str, &View)]) -> Result<()> {
    for (wn, w) in writes {
        for (rn, r) in reads {
            if w.buffer == r.buffer {
                return Err(GpuError::Shape(format!(
                    "delta {op}: output '{wn}' shares a buffer with input '{rn}'; \
                     outputs must be separate buffers"
                )));
            }
        }
    }
    for (i, (an, a)) in writes.iter().enumerate() {
        for (bn, b) in &writes[i + 1..] {
            if a.buffer == b.buffer && a.offset < b.offset + b.size && b.offset < a.offset + a.size {
                return Err(GpuError::Shape(format!("delta {op}: outputs '{an}' and '{bn}' overlap")));
            }
        }
    }
    Ok(())
}

/// The forward's per-token inputs: the state X, the unnormalised direction k̃, the value head's
/// input a and the gate's input c.
#[derive(Clone, Copy)]
pub struct WriteIn<'a> {
    pub x: View<'a>,
    pub kraw: View<'a>,
    pub a: View<'a>,
    pub c: View<'a>,
}

/// The gate and value heads w_β `[d]`, b_β `[1]`, W_v `[m, d]`, b_v `[m]` (or their gradients).
#[derive(Clone, Copy)]
pub struct Heads<'a> {
    pub w_beta: View<'a>,
    pub b_beta: View<'a>,
    pub w_v: View<'a>,
    pub b_v: View<'a>,
}

/// What the forward saves for the backward: r = 1/‖k̃‖ `[n]`, β `[n]`, v `[n, m]`, δ = v − kᵀX `[n, m]`.
#[derive(Clone, Copy)]
pub struct Saves<'a> {
    pub rnorm: View<'a>,
    pub beta: View<'a>,
    pub v: View<'a>,
    pub delta: View<'a>,
}

/// What the forward writes: X' [n, d, m], the saves, and k [n, d] when given (traces and
/// decoding; training passes `None`: the backward recomputes k = k̃·r).
#[derive(Clone, Copy)]
pub struct WriteOut<'a> {
    pub x_out: View<'a>,
    pub k: Option<View<'a>>,
    pub saves: Saves<'a>,
}

/// The backward's input gradients ∂X [n, d, m], ∂k̃ [n, d], ∂a [n, d], ∂c [n, d].
#[derive(Clone, Copy)]
pub struct WriteGrads<'a> {
    pub dx: View<'a>,
    pub dkraw: View<'a>,
    pub da: View<'a>,
    pub dc: View<'a>,
}

/// The delta write, per token: n = sqrt(‖k̃‖² + ε_k²), k = k̃/n, β = 2σ(w_β·c + b_β),
/// v = act(W_v a + b_v), p = Xᵀk, δ = v − p, X' = X + β k δᵀ.
///
/// Writes `x_out` (X') and the saved traces `rnorm` (1/n), `beta`, `v`, `delta`, and `k` when
/// given (traces and decoding; training passes `None`: the backward needs only k̃ and r). Every
/// output must be a buffer separate from the inputs (inputs may share buffers among themselves).
/// `beta_all`: also store β in column `.1` of the `.2` columns of this view (the program's β of
/// every write, summed over the tokens for the step's statistics). One dispatch.
pub fn forward(
    gpu: &Gpu,
    s: &DeltaShape,
    inp: WriteIn,
    heads: Heads,
    out: WriteOut,
    beta_all: Option<(View, usize, usize)>,
) -> Result<Vec<Dispatch>> {
    if gpu.forms.delta_packed {
        return Err(GpuError::Shape(
            "delta forward: this device takes the packed form (delta_packed): call forward_packed".into(),
        ));
    }
    let WriteOut { x_out, k, saves } = out;
    forward_with(gpu, s, inp, Io::Split(heads, saves), x_out, k, beta_all)
}

/// Storage buffers the split forward binds ([`forward`]); devices that allow fewer per shader
/// stage get the packed form ([`forward_packed`], 9).
pub const SPLIT_FORWARD_STORAGE_BUFFERS: u32 = 15;

/// Elements of the packed heads of [`forward_packed`]: `[w_β (d) | b_β (1) | W_v (m·d) | b_v (m)]`,
/// with the offsets of b_β, W_v and b_v.
pub fn packed_heads(d: usize, m: usize) -> (usize, [usize; 3]) {
    (d + 1 + m * d + m, [d, d + 1, d + 1 + m * d])
}

/// Elements of the packed saves of [`forward_packed`]: `[1/n (n) | β (n) | v (n·m) | δ (n·m)]`,
/// with the offsets of β, v and δ.
pub fn packed_saves(n: usize, m: usize) -> (usize, [usize; 3]) {
    (2 * n + 2 * n * m, [n, 2 * n, 2 * n + n * m])
}

/// [`forward`] with the head weights read from one buffer `heads` and the saves written to one
/// buffer `saves` (layouts: [`packed_heads`], [`packed_saves`]): 9 storage buffers instead of
/// 15, the form of devices that allow fewer (a browser's WebGPU: `gpu.forms.delta_packed`). The
/// caller copies the heads in and the saves out (`model::layers::write`). Same sums in the same
/// order as the split form: the same bits.
#[allow(clippy::too_many_arguments)]
pub fn forward_packed(
    gpu: &Gpu,
    s: &DeltaShape,
    inp: WriteIn,
    heads: View,
    x_out: View,
    k: Option<View>,
    saves: View,
    beta_all: Option<(View, usize, usize)>,
) -> Result<Vec<Dispatch>> {
    if !gpu.forms.delta_packed {
        return Err(GpuError::Shape(
            "delta forward_packed: this device's form table has delta_packed off (DDL_FORMS=delta_packed=1)".into(),
        ));
    }
    forward_with(gpu, s, inp, Io::Packed { heads, saves }, x_out, k, beta_all)
}

/// Where the forward's head weights come from and its saves go.
enum Io<'a> {
    Split(Heads<'a>, Saves<'a>),
    Packed { heads: View<'a>, saves: View<'a> },
}

fn forward_with(
    gpu: &Gpu,
    s: &DeltaShape,
    inp: WriteIn,
    io: Io,
    x_out: View,
    k: Option<View>,
    beta_all: Option<(View, usize, usize)>,
) -> Result<Vec<Dispatch>> {
    s.check()?;
    let WriteIn { x, kraw, a, c } = inp;
    let (n, d, m) = (s.n, s.d, s.m);
    // Without `k` (training: the backward recomputes k = k̃·r) the kernel stores nothing there,
    // nor without `beta_all`; their bindings get four-element stand-ins.
    let stand_in = |on: bool, label: &str| -> Result<Option<Tensor>> {
        Ok(if on { None } else { Some(Tensor::zeros(gpu, label, &[4], crate::gpu::DType::F32)?) })
    };
    let (k_unused, b_unused) =
        (stand_in(k.is_some(), "delta.k_unused")?, stand_in(beta_all.is_some(), "delta.beta_unused")?);
    let store_k = k.is_some();
    let k = k.unwrap_or_else(|| k_unused.as_ref().expect("a stand-in").view());
    let (beta_all, beta_col, beta_stride) = match beta_all {
        Some((view, col, stride)) => {
            if col >= stride {
                return Err(GpuError::Shape(format!("delta forward: β column {col} of {stride}")));
            }
            need("forward", "beta_all", &view, n * stride)?;
            (view, col, stride)
        }
        None => (b_unused.as_ref().expect("a stand-in").view(), 0, 0),
    };
    let mut reads = vec![("x", &x, s.state_elems()), ("kraw", &kraw, n * d), ("a", &a, n * d), ("c", &c, n * d)];
    let mut writes = vec![("x_out", &x_out, s.state_elems()), ("k", &k, if store_k { n * d } else { 1 })];
    match &io {
        Io::Split(Heads { w_beta, b_beta, w_v, b_v }, Saves { rnorm, beta, v, delta }) => {
            reads.extend([("w_beta", w_beta, d), ("b_beta", b_beta, 1), ("w_v", w_v, m * d), ("b_v", b_v, m)]);
            writes.extend([("rnorm", rnorm, n), ("beta", beta, n), ("v", v, n * m), ("delta", delta, n * m)]);
        }
        Io::Packed { heads, saves } => {
            reads.push(("heads", heads, packed_heads(d, m).0));
            writes.push(("saves", saves, packed_saves(n, m).0));
        }
    }
    for (name, view, len) in reads.iter().chain(&writes) {
        need("forward", name, view, *len)?;
    }
    let rp: Vec<(&str, &View)> = reads.iter().map(|(nm, vw, _)| (*nm, *vw)).collect();
    let wp: Vec<(&str, &View)> = writes.iter().map(|(nm, vw, _)| (*nm, *vw)).collect();
    check_aliasing("forward", &rp, &wp)?;
    let seg = segment_width(gpu, n, d, m);
    let q = quads(gpu, seg, d);
    let entry = match (q, shared_loads(gpu, seg), store_k) {
        (true, true, false) => "delta_forward_qg",
        (true, true, true) => "delta_forward_qgk",
        (true, false, false) => "delta_forward_q",
        (true, false, true) => "delta_forward_qk",
        _ => "delta_forward",
    };
    let kern = gpu.kernel("delta", Some(&s.variant(gpu, seg)), entry)?;
    let p =
        Params { store_k: store_k as u32, beta_col: beta_col as u32, beta_stride: beta_stride as u32, ..s.params(seg) };
    let mut binds = vec![
        ("x", x),
        (if q { "kraw4" } else { "kraw" }, kraw),
        (if q { "a4" } else { "a" }, a),
        (if q { "c4" } else { "c" }, c),
        ("x_out", x_out),
        (if q { "k_out4" } else { "k_out" }, k),
        ("beta_all", beta_all),
    ];
    match io {
        Io::Split(Heads { w_beta, b_beta, w_v, b_v }, Saves { rnorm, beta, v, delta }) => binds.extend([
            (if q { "w_beta4" } else { "w_beta" }, w_beta),
            (if q { "w_v4" } else { "w_v" }, w_v),
            ("b_beta", b_beta),
            ("b_v", b_v),
            ("rnorm_out", rnorm),
            ("beta_out", beta),
            ("v_out", v),
            ("delta_out", delta),
        ]),
        Io::Packed { heads, saves } => binds.extend([("heads_in", heads), ("saves_out", saves)]),
    }
    let mut main = kern.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &binds, s.grid(gpu, seg))?;
    main.scratch.extend(k_unused.into_iter().chain(b_unused));
    Ok(vec![main])
}

/// The per-token part of [`backward`] alone: `dx`, `dkraw`, and ∂z `[n]`, ∂u `[n, m]` returned as
/// new tensors, for a caller that folds the heads into the norm backward that follows
/// (`norm::rmsnorm_backward_heads`, CPU adapters): then `dc` gets no ∂z·w_β and `da` no W_vᵀ∂u
/// from here. One dispatch (∂z and ∂u kept in its scratch too).
#[allow(clippy::too_many_arguments)]
pub fn backward_write(
    gpu: &Gpu,
    s: &DeltaShape,
    g: View,
    x: View,
    kraw: View,
    saves: Saves,
    dx: View,
    dkraw: View,
) -> Result<(Dispatch, Tensor, Tensor)> {
    s.check()?;
    let Saves { rnorm, beta, v, delta } = saves;
    let (n, d, m) = (s.n, s.d, s.m);
    let reads = [
        ("g", &g, n * d * m),
        ("x", &x, s.state_elems()),
        ("kraw", &kraw, n * d),
        ("rnorm", &rnorm, n),
        ("beta", &beta, n),
        ("v", &v, n * m),
        ("delta", &delta, n * m),
    ];
    let writes = [("dx", &dx, n * d * m), ("dkraw", &dkraw, n * d)];
    for (name, view, len) in reads.iter().chain(&writes) {
        need("backward", name, view, *len)?;
    }
    check_aliasing("backward", &reads.map(|(nm, vw, _)| (nm, vw)), &writes.map(|(nm, vw, _)| (nm, vw)))?;
    let dz = Tensor::zeros(gpu, "delta.dz", &[n], crate::gpu::DType::F32)?;
    let du = Tensor::zeros(gpu, "delta.du", &[n, m], crate::gpu::DType::F32)?;

    let seg = segment_width(gpu, n, d, m);
    let quad = quads(gpu, seg, d);
    let entry = if quad { "delta_backward_q" } else { "delta_backward" };
    let kern = gpu.kernel("delta", Some(&s.variant(gpu, seg)), entry)?;
    let p = s.params(seg);
    let mut main = kern.dispatch(
        gpu,
        Some(bytemuck::bytes_of(&p)),
        &[
            ("g", g),
            ("x", x),
            (if quad { "kraw4" } else { "kraw" }, kraw),
            ("rnorm", rnorm),
            ("beta", beta),
            ("v", v),
            ("delta", delta),
            ("dx", dx),
            (if quad { "dkraw4" } else { "dkraw" }, dkraw),
            ("dz", dz.view()),
            ("du", du.view()),
        ],
        s.grid(gpu, seg),
    )?;
    main.scratch = vec![dz.clone(), du.clone()];
    Ok((main, dz, du))
}

/// Backward of [`forward`] (spec 11.1, 14.8) given `g` = ∂X', the forward's inputs `x`, `kraw`,
/// `a`, `c`, the weights `w_beta`, `w_v` and its saved `rnorm`, `beta`, `v`, `delta`: k = k̃·r is
/// recomputed as the forward computed it (the same bits), so the forward need not store k.
///
/// Writes `dx` = G − β k gᵀ (g = Gᵀk), `dkraw` = ∂k̃, `dc` = ∂z·w_β and `da` = W_vᵀ∂u (added into
/// `da` when `accumulate_da`). Adds the parameter gradients: `dw_beta` += Σ_t ∂z_t c_t,
/// `db_beta` += Σ_t ∂z_t, `dw_v` += Σ_t ∂u_t a_tᵀ, `db_v` += Σ_t ∂u_t. Every output must be a
/// buffer separate from the inputs (`dx` ≠ `g`). Dispatches: the per-token kernel (∂X, ∂k̃ and
/// the per-token ∂z `[n]`, ∂u `[n, m]` into scratch), the heads kernel (one invocation per
/// feature and chunk of tokens: ∂c, ∂a and chunk partials of the four head gradients, weights
/// in registers; it replaced two matmuls and two products over the tokens), and the column sums
/// of the chunk partials in chunk order: two when b_β follows w_β and b_v follows W_v in one
/// buffer (the model's layout when d is a multiple of 64), else four.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    gpu: &Gpu,
    s: &DeltaShape,
    g: View,
    inp: WriteIn,
    heads: Heads,
    saves: Saves,
    out: WriteGrads,
    dheads: Heads,
    accumulate_da: bool,
) -> Result<Vec<Dispatch>> {
    s.check()?;
    let (WriteIn { x, kraw, a, c }, Heads { w_beta, w_v, .. }) = (inp, heads);
    let Saves { rnorm, beta, v, delta } = saves;
    let WriteGrads { dx, dkraw, da, dc } = out;
    let Heads { w_beta: dw_beta, b_beta: db_beta, w_v: dw_v, b_v: db_v } = dheads;
    let (n, d, m) = (s.n, s.d, s.m);
    let reads = [
        ("g", &g, n * d * m),
        ("x", &x, s.state_elems()),
        ("kraw", &kraw, n * d),
        ("rnorm", &rnorm, n),
        ("beta", &beta, n),
        ("v", &v, n * m),
        ("delta", &delta, n * m),
        ("a", &a, n * d),
        ("c", &c, n * d),
        ("w_beta", &w_beta, d),
        ("w_v", &w_v, m * d),
    ];
    let writes = [
        ("dx", &dx, n * d * m),
        ("dkraw", &dkraw, n * d),
        ("da", &da, n * d),
        ("dc", &dc, n * d),
        ("dw_beta", &dw_beta, d),
        ("db_beta", &db_beta, 1),
        ("dw_v", &dw_v, m * d),
        ("db_v", &db_v, m),
    ];
    for (name, view, len) in reads.iter().chain(&writes) {
        need("backward", name, view, *len)?;
    }
    check_aliasing("backward", &reads.map(|(nm, vw, _)| (nm, vw)), &writes.map(|(nm, vw, _)| (nm, vw)))?;

    let (main, dz, du) = backward_write(gpu, s, g, x, kraw, saves, dx, dkraw)?;
    let p = s.params(segment_width(gpu, n, d, m));
    // The heads: ∂c, ∂a and per-chunk partial sums of the head gradients in one pass over
    // (feature, chunk of tokens), then the chunks' column sums into the gradients.
    let (chunk, chunks) = crate::kernels::shortconv::chunking_min(n, HEADS_MIN_CHUNK);
    let lay = HeadLayout::new(gpu, [(&dw_beta, d), (&db_beta, 1), (&dw_v, m * d), (&db_v, m)], chunks);
    let hpart = Tensor::zeros(gpu, "delta.heads_partial", &[lay.len], crate::gpu::DType::F32)?;
    let [o_wb, o_bb, o_wv, o_bv] = lay.offs.map(|x| x as u32);
    let [s_wb, s_bb, s_wv, s_bv] = lay.strides.map(|x| x as u32);
    debug_assert_eq!(o_wb, 0);
    let hparams = Params {
        chunk: chunk as u32,
        chunks: chunks as u32,
        accumulate_da: accumulate_da as u32,
        o_bb,
        o_wv,
        o_bv,
        s_wb,
        s_bb,
        s_wv,
        s_bv,
        ..p
    };
    // (A quad form of the heads, four features per invocation, measured slower: tiny the same,
    // shakespeare-char 45 → 57 ms per step.)
    let heads_entry = if shared_loads(gpu, 1) { "delta_heads_g" } else { "delta_heads" };
    let heads = gpu.kernel("delta", Some(&s.variant(gpu, 1)), heads_entry)?.dispatch(
        gpu,
        Some(bytemuck::bytes_of(&hparams)),
        &[
            ("a", a),
            ("c", c),
            ("w_beta", w_beta),
            ("w_v", w_v),
            ("dz", dz.view()),
            ("du_rows", du.view()),
            ("da", da),
            ("dc", dc),
            ("hpart", hpart.view()),
        ],
        // Workgroups of WG features of one chunk: feature tiles fastest, then chunks.
        grid_1d((d.div_ceil(WG) * WG * chunks) as u64, WG as u32, gpu.limits.max_compute_workgroups_per_dimension),
    )?;
    let mut out = vec![main, heads];
    out.extend(lay.col_sums(gpu, &hpart)?);
    out[1].scratch.push(hpart);
    Ok(out)
}

/// Where the heads' chunk partials of ∂w_β [d], ∂b_β, ∂W_v [m·d], ∂b_v [m] lie in one scratch
/// buffer of `chunks` rows, and the column sums that add them into the gradients. Gradients that
/// lie in order in one buffer, each starting less than `HEADS_GAP` elements after the previous
/// one ends (the model's layout: alignment padding between them), form a run: one row per chunk
/// laid out like the buffer, one column sum for the whole run (the gap columns of the partials
/// stay zero, so what lies between the gradients gets + 0). Runs start at offsets a storage
/// binding may start at; the run of ∂w_β at 0. Used by the heads kernel and by the norm backward
/// that folds the heads in (`norm::rmsnorm_backward_heads`).
pub(crate) struct HeadLayout<'a> {
    /// Offset of each gradient's row in the partials (∂w_β: 0) and the row stride of its run.
    pub offs: [usize; 4],
    pub strides: [usize; 4],
    /// Per run: its first gradient's view, its width in elements, its offset in the partials.
    runs: Vec<(View<'a>, usize, usize)>,
    chunks: usize,
    /// Elements of the partials.
    pub len: usize,
}

impl<'a> HeadLayout<'a> {
    /// The layout of `chunks` rows of partials for the gradients `grads` (view, elements).
    pub fn new(gpu: &Gpu, grads: [(&View<'a>, usize); 4], chunks: usize) -> Self {
        let q = crate::kernels::reduce::align_elems(gpu);
        // Runs as (first, one past the last) gradient index.
        let mut runs: Vec<(usize, usize)> = vec![(0, 1)];
        for t in 1..grads.len() {
            let ((prev, plen), (cur, _)) = (grads[t - 1], grads[t]);
            let end = prev.offset + 4 * plen as u64;
            let near = cur.buffer == prev.buffer && cur.offset >= end && cur.offset - end < 4 * HEADS_GAP as u64;
            if near && (cur.offset - end).is_multiple_of(4) {
                runs.last_mut().expect("a first run").1 = t + 1;
            } else {
                runs.push((t, t + 1));
            }
        }
        let (mut offs, mut strides) = ([0usize; 4], [0usize; 4]);
        let mut at = Vec::new();
        let mut len = 0usize;
        for &(r0, r1) in &runs {
            let (first, last) = (grads[r0], grads[r1 - 1]);
            let width = ((last.0.offset - first.0.offset) / 4) as usize + last.1;
            let base = len.next_multiple_of(q);
            for t in r0..r1 {
                offs[t] = base + ((grads[t].0.offset - first.0.offset) / 4) as usize;
                strides[t] = width;
            }
            at.push((*first.0, width, base));
            len = base + chunks * width;
        }
        HeadLayout { offs, strides, runs: at, chunks, len }
    }

    /// Adds the chunks' column sums of `hpart` into the gradients, in chunk order.
    pub fn col_sums(&self, gpu: &Gpu, hpart: &Tensor) -> Result<Vec<Dispatch>> {
        let (hv, chunks) = (hpart.view(), self.chunks);
        let mut out = Vec::new();
        for (first, width, base) in &self.runs {
            let dst = View { buffer: first.buffer, offset: first.offset, size: 4 * *width as u64 };
            out.extend(crate::kernels::reduce::col_sum(gpu, hv.sub(*base, chunks * width), dst, chunks, *width, true)?);
        }
        Ok(out)
    }
}

/// Elements of scratch one [`backward`] keeps (∂z, ∂u and the heads' chunk partials), for memory
/// plans: exact for head gradients laid out like the model's (w_β, b_β, W_v, b_v in one buffer,
/// each at the next 64-element boundary after the previous one, or right after it), an upper
/// bound for other layouts with offsets aligned to at most 64 elements.
pub fn backward_scratch_elems(n: usize, d: usize, m: usize) -> usize {
    // The heads kernel's chunks, or the norm's where it takes the heads in (the larger count).
    let (_, chunks) = crate::kernels::shortconv::chunking_min(n, HEADS_MIN_CHUNK);
    let chunks = chunks.max(crate::kernels::norm::dgain_chunks(n));
    let a = |x: usize| x.next_multiple_of(64);
    let width = a(a(d) + 1) + a(m * d) + m;
    n * (1 + m) + chunks * width
}

/// FLOPs of [`forward`]: four reductions over d (2d + 2d + 2md + 2md), k = k̃/n (d) and the
/// rank-1 update (2md), per token.
pub fn forward_flops(s: &DeltaShape) -> f64 {
    let (n, d, m) = (s.n as f64, s.d as f64, s.m as f64);
    n * (5.0 * d + 6.0 * m * d)
}

/// Bytes [`forward`] must move: read X, write X', read k̃, a, c, write k, the weights once and
/// the per-token traces.
pub fn forward_bytes(s: &DeltaShape) -> f64 {
    let (n, d, m) = (s.n as f64, s.d as f64, s.m as f64);
    let xb = if s.state_f16 { 2.0 } else { 4.0 };
    xb * 2.0 * n * d * m + 4.0 * (4.0 * n * d + d * (1.0 + m) + 1.0 + m + n * (2.0 + 2.0 * m))
}

/// FLOPs of [`backward`]: per token Gᵀk, ∂X, Gδ, Xg, W_vᵀ∂u (2md each), kᵀ∂k, ∂k̃, ∂c
/// (~7d); over tokens the parameter sums (2nd(1 + m) + 2n(1 + m)).
pub fn backward_flops(s: &DeltaShape) -> f64 {
    let (n, d, m) = (s.n as f64, s.d as f64, s.m as f64);
    n * (10.0 * m * d + 7.0 * d) + 2.0 * n * (d + 1.0) * (1.0 + m)
}

/// Bytes [`backward`] must move: read G and X, write ∂X; read k, a, c, write ∂k̃, ∂a, ∂c; the
/// per-token traces; the weights once; the parameter gradients read and written once
/// (not counting the scratch round trip).
pub fn backward_bytes(s: &DeltaShape, accumulate_da: bool) -> f64 {
    let (n, d, m) = (s.n as f64, s.d as f64, s.m as f64);
    let da = if accumulate_da { 2.0 } else { 1.0 };
    let xb = if s.state_f16 { 2.0 } else { 4.0 };
    xb * n * d * m
        + 4.0
            * (2.0 * n * d * m
                + (5.0 + da) * n * d
                + n * (2.0 + 2.0 * m)
                + d * (1.0 + m)
                + 2.0 * (d * (1.0 + m) + 1.0 + m))
}
