// The DDL delta write (spec sections 2, 11.1, 14.4/14.8), forward and backward, per token.
//
// Forward, for token t with state X ∈ R^{d×m} (row-major, value index j fastest):
//   n = sqrt(‖k̃‖² + ε_k²), k = k̃/n, β = 2σ(w_β·c + b_β), v = act(W_v a + b_v),
//   p = Xᵀk, δ = v − p, X' = X + β k δᵀ.
// Backward, given G = ∂X':
//   g = Gᵀk, ∂X = G − β k gᵀ, ∂v = β g, ∂β = gᵀδ, ∂k = β(Gδ − Xg),
//   ∂k̃ = (∂k − k(kᵀ∂k))/n with kᵀ∂k = β gᵀ(δ − p), p = v − δ (no second reduction),
//   ∂z = ∂β·β(1 − β/2), ∂u = ∂v ⊙ act'(v).
// Per-token ∂z and ∂u go to `dz`/`du`; `delta_heads` (one invocation per feature and chunk of
// tokens, the head weights in registers) turns them into ∂c = ∂z w_β, ∂a (+)= W_vᵀ∂u and chunk
// partials of the head gradients (adding ∂c, ∂a in the per-token kernel was measured slower:
// the weights would be reloaded for every token).
// In the forward, the heads' reductions over d (w_β·c, W_v a) ride along the state's: the same
// pass over the rows, the same reduction (measured 1.9× faster than two matmuls before it).
//
// Compiled once per value width: the variant constant MM is m (any m ≥ 1; above 8 only with seg = 1
// compiled in, whose reduction needs no workgroup memory: REDN = 1), so every loop over the
// values has a constant trip count and its per-lane arrays live in registers; `Row` (from the
// variant) is one state row X[t, i, ·] — a vec4 for m = 4, so a row is one load or store.
//
// Grid: workgroups of WG invocations cut into segments of `seg` invocations (a power of two ≤ WG,
// chosen by the launcher per adapter: on GPUs it covers d, on CPU adapters it is 1 — one token per
// invocation, no reduction across invocations at all); each segment owns one token, so a
// workgroup handles WG/seg tokens (1-D over workgroups, split over x and y:
// group = wid.y·nwg.x + wid.x, token = group·(WG/seg) + lid/seg). Lane `lane` of a segment owns
// rows i = lane, lane + seg, lane + 2·seg, … The first R rows of every lane stay in registers
// between the reduction and the write, so X (forward) and G (backward) are read from memory once
// for them; rows beyond are read again (usually from cache). Every reduction over d: each lane
// sums its rows in increasing i, then runs of 8 lanes, then the run sums, in a fixed order, so
// results are bit-identical run to run for a given seg. No subgroup operations, no atomics.

const WG: u32 = 128u;
const R: u32 = 4u;          // rows per lane kept in registers
const NV: u32 = 2u + 2u * MM;    // values reduced together at most
const RUN: u32 = 8u;        // partials added by one lane in the first step of a reduction

struct Params {
    n: u32,              // tokens
    d: u32,              // width
    m: u32,              // value channels (= MM)
    v_act: u32,          // 0: v = 4σ(u), 1: v = σ(u), 2: v = u
    k_eps: f32,          // ε_k of the direction normalisation
    chunk: u32,          // delta_heads: tokens per chunk
    seg: u32,            // invocations per token: a power of two ≤ WG
    chunks: u32,         // delta_heads: chunks
    accumulate_da: u32,  // delta_heads: 1 = ∂a is added to da
    o_bb: u32,           // delta_heads: offsets of the b_β, W_v, b_v partials
    o_wv: u32,
    o_bv: u32,
    s_wb: u32,           // delta_heads: row strides (per chunk) of the w_β, b_β, W_v, b_v partials
    s_bb: u32,
    s_wv: u32,
    s_bv: u32,
    store_k: u32,        // `delta_forward`: 1 = store k (traces, decoding; the quad entries: `…k`); the backward recomputes k = k̃·r
    beta_col: u32,       // forward: β_t also into beta_all[t · beta_stride + beta_col] (0 = not)
    beta_stride: u32,
    // forward: β' = clamp(beta_scale · β + beta_add, beta_lo, beta_hi) (interventions while
    // decoding; the identity 1, 0, 0, 2 otherwise, bit-exact for β in [0, 2])
    beta_scale: f32,
    beta_add: f32,
    beta_lo: f32,
    beta_hi: f32,
    // forward: X' = X + β' k (value_scale · v − erase_scale · kᵀX)ᵀ (interventions; 1 and 1
    // otherwise, bit-exact); the saved v and δ are the scaled ones
    erase_scale: f32,
    value_scale: f32,
    _p2: u32,
    _p3: u32,
    _p4: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

// Shared by both passes (read only).
@group(0) @binding(1) var<storage, read> x: array<XRow>;        // [n, d] rows of m
@group(0) @binding(2) var<storage, read> w_beta: array<f32>;   // [d]
@group(0) @binding(3) var<storage, read> w_v: array<f32>;      // [m, d]

// Forward inputs.
@group(0) @binding(4) var<storage, read> kraw: array<f32>;     // [n, d]
@group(0) @binding(5) var<storage, read> a: array<f32>;        // [n, d]
@group(0) @binding(6) var<storage, read> c: array<f32>;        // [n, d]
@group(0) @binding(7) var<storage, read> b_beta: array<f32>;   // [1]
@group(0) @binding(8) var<storage, read> b_v: array<f32>;      // [m]
// Forward outputs. The forward reads the heads and writes v, δ, 1/n, β through the functions of
// a part: `delta_io_split` (these bindings) or `delta_io_packed` (two packed buffers, for adapters
// with fewer than 15 storage buffers per shader stage: WebGPU's default is 8).
@group(0) @binding(9) var<storage, read_write> x_out: array<XRow>;      // [n, d] rows of m
@group(0) @binding(10) var<storage, read_write> k_out: array<f32>;     // [n, d]
@group(0) @binding(11) var<storage, read_write> rnorm_out: array<f32>; // [n]
@group(0) @binding(12) var<storage, read_write> beta_out: array<f32>;  // [n]
@group(0) @binding(13) var<storage, read_write> v_out: array<f32>;     // [n, m]
@group(0) @binding(14) var<storage, read_write> delta_out: array<f32>; // [n, m]
// Every write's β of a model in one [n, writes] buffer (one column sum gives the step's Σ β).
@group(0) @binding(38) var<storage, read_write> beta_all: array<f32>;

// Backward inputs (saved by the forward).
@group(0) @binding(15) var<storage, read> g: array<Row>;       // [n, d] rows = ∂X'
@group(0) @binding(17) var<storage, read> rnorm: array<f32>;   // [n]
@group(0) @binding(18) var<storage, read> beta: array<f32>;    // [n]
@group(0) @binding(19) var<storage, read> v: array<f32>;       // [n, m]
@group(0) @binding(20) var<storage, read> delta: array<f32>;   // [n, m]
// Backward outputs.
@group(0) @binding(21) var<storage, read_write> dx: array<Row>;    // [n, d] rows
@group(0) @binding(22) var<storage, read_write> dkraw: array<f32>; // [n, d]
@group(0) @binding(25) var<storage, read_write> dz: array<f32>;    // [n]
@group(0) @binding(26) var<storage, read_write> du: array<f32>;    // [n, m]

// Heads backward (`delta_heads`): ∂z, ∂u from the backward above (read), ∂a and ∂c out, and the
// per-chunk partial sums of the head gradients (four blocks at the offsets in `params`).
@group(0) @binding(23) var<storage, read_write> da: array<f32>;    // [n, d]
@group(0) @binding(24) var<storage, read_write> dc: array<f32>;    // [n, d]
@group(0) @binding(27) var<storage, read_write> hpart: array<f32>;
@group(0) @binding(29) var<storage, read> du_rows: array<Row>;    // ∂u again, one row per token

// The quad entry points (`*_q`: d a multiple of 4, one token per invocation) see the [n, d] and
// [m, d] operands as vec4s of four consecutive features, so one load or store moves four rows'
// values (a quarter of the memory operations; on CPU adapters, where neighbouring lanes are
// neighbouring tokens, each is still a strided gather: −18 % measured, docs/PERF.md).
@group(0) @binding(30) var<storage, read> kraw4: array<vec4<f32>>;       // [n, d/4]
@group(0) @binding(31) var<storage, read> a4: array<vec4<f32>>;          // [n, d/4]
@group(0) @binding(32) var<storage, read> c4: array<vec4<f32>>;          // [n, d/4]
@group(0) @binding(33) var<storage, read> w_beta4: array<vec4<f32>>;     // [d/4]
@group(0) @binding(34) var<storage, read> w_v4: array<vec4<f32>>;        // [m, d/4]
@group(0) @binding(35) var<storage, read_write> k_out4: array<vec4<f32>>; // [n, d/4]
@group(0) @binding(37) var<storage, read_write> dkraw4: array<vec4<f32>>; // [n, d/4]

// Invocations per token: compiled in (SEGFIX, from the variant) for the one-token-per-invocation
// layout, else the launcher's choice.
fn seg_w() -> u32 {
    if (SEGFIX > 0u) { return SEGFIX; }
    return params.seg;
}

// Reduction buffer: NV rows of WG partial sums (REDN = NV·WG; 1 when SEGFIX = 1, never touched).
var<workgroup> red: array<f32, REDN>;

// Sums part[0..nv) over the `seg` lanes of each segment in a fixed order and gives every lane
// its segment's totals: runs of 8 consecutive partials are added in order (the (value, run)
// pairs spread over the segment's lanes), then each value's run sums in order by one lane, whose
// total every lane reads. Four barriers whatever the width; nothing (no barrier) when seg = 1.
// Must be called by every invocation (uniform control flow: seg is a uniform). (Until session 22
// the run sums went to lanes 0, 1, … one run each with every value, and every lane added every
// value's run sums itself: the same additions in the same order, so the same bits, with 16 × 10
// workgroup-memory loads per lane at seg = 128, m = 4 instead of ≤ 16 + 16 + 10.)
fn segment_sum(part: ptr<function, array<f32, NV>>, nv: u32, lid: u32, lane: u32) {
    let seg = seg_w();
    if (seg == 1u) { return; }
    let head = lid - lane;
    for (var q = 0u; q < NV; q++) {
        if (q < nv) { red[q * WG + lid] = (*part)[q]; }
    }
    workgroupBarrier();
    // Pair e = q·runs + r (value q, run r): run r covers partials [8r, 8r + 8) of the segment;
    // its sum goes to the run's first slot.
    let runs = (seg + RUN - 1u) / RUN;
    for (var e = lane; e < nv * runs; e += seg) {
        let q = e / runs;
        let first = head + (e - q * runs) * RUN;
        let last = min(first + RUN, head + seg);
        var acc = red[q * WG + first];
        for (var i = first + 1u; i < last; i++) { acc += red[q * WG + i]; }
        red[q * WG + first] = acc;
    }
    workgroupBarrier();
    // Value q's total (lane q; lanes take every seg-th value when nv > seg) into the segment's
    // first slot of row q: only this lane touches row q here.
    for (var q = lane; q < nv; q += seg) {
        var acc = red[q * WG + head];
        for (var r = 1u; r < runs; r++) { acc += red[q * WG + head + r * RUN]; }
        red[q * WG + head] = acc;
    }
    workgroupBarrier();
    for (var q = 0u; q < NV; q++) {
        if (q < nv) { (*part)[q] = red[q * WG + head]; }
    }
    // Nobody may overwrite `red` before everyone has read the totals.
    workgroupBarrier();
}

// σ(z) without overflow for large |z|.
fn sigmoid(z: f32) -> f32 {
    if (z >= 0.0) {
        return 1.0 / (1.0 + exp(-z));
    }
    let e = exp(z);
    return e / (1.0 + e);
}

fn value_act(u: f32) -> f32 {
    switch params.v_act {
        case 0u: { return 4.0 * sigmoid(u); }
        case 1u: { return sigmoid(u); }
        default: { return u; }
    }
}

// dv/du written in terms of v alone.
fn value_act_grad(vv: f32) -> f32 {
    switch params.v_act {
        case 0u: { return vv * fma(-0.25, vv, 1.0); }
        case 1u: { return vv * (1.0 - vv); }
        default: { return 1.0; }
    }
}

// The token of this invocation's segment (may be ≥ n in the last workgroup).
fn token_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * (WG / seg_w()) + lid / seg_w();
}

// Adds row i (element ti) of a token to the forward's sums: part[0] += k̃_i², part[1] +=
// w_β[i] c_i, part[2 + j] += W_v[j, i] a_i, part[2 + MM + j] += k̃_i X[i, j]. Returns X[i, ·].
fn forward_row(ti: u32, i: u32, kt: f32, part: ptr<function, array<f32, NV>>) -> Row {
    let d = params.d;
    let ai = a[ti];
    (*part)[0] = fma(kt, kt, (*part)[0]);
    (*part)[1] = fma(hw_beta(i), c[ti], (*part)[1]);
    for (var j = 0u; j < MM; j++) { (*part)[2u + j] = fma(hw_v(j * d + i), ai, (*part)[2u + j]); }
    var xr = xin(x[ti]);
    for (var j = 0u; j < MM; j++) { (*part)[2u + MM + j] = fma(kt, xr[j], (*part)[2u + MM + j]); }
    return xr;
}

// A token's forward from its sums over d (part, laid out as in `delta_forward`): returns 1/n and
// sets coef = β δ; `store` (one lane per token) writes the saved traces v, δ, 1/n and β.
fn token_forward(t: u32, part: array<f32, NV>, store: bool, coef: ptr<function, array<f32, MM>>) -> f32 {
    var pt = part;
    let rn = 1.0 / sqrt(fma(params.k_eps, params.k_eps, pt[0]));
    let bt = clamp(fma(params.beta_scale, 2.0 * sigmoid(pt[1] + hb_beta()), params.beta_add), params.beta_lo, params.beta_hi);
    for (var j = 0u; j < MM; j++) {
        let vj = value_act(pt[2u + j] + hb_v(j)) * params.value_scale;
        let dj = fma(-pt[2u + MM + j] * params.erase_scale, rn, vj);
        (*coef)[j] = bt * dj;
        if (store) { put_value(t, j, vj, dj); }
    }
    if (store) {
        put_token(t, rn, bt);
        if (params.beta_stride != 0u) { beta_all[t * params.beta_stride + params.beta_col] = bt; }
    }
    return rn;
}

// A token's backward terms from g = Gᵀk: β g, δ, β, 1/n and kᵀ∂k = β gᵀ(δ − p) (p = v − δ from the
// forward, so kᵀ∂k needs no reduction of its own); `store` (one lane per token) writes ∂z and ∂u.
struct TokenBackward {
    gb: array<f32, MM>,
    dl: array<f32, MM>,
    bt: f32,
    rn: f32,
    kdk: f32,
}

fn token_backward(t: u32, gs_in: array<f32, MM>, store: bool) -> TokenBackward {
    var gs = gs_in;
    var o: TokenBackward;
    o.bt = beta[t];
    o.rn = rnorm[t];
    var dbeta = 0.0;
    var gp = 0.0;               // gᵀp
    for (var j = 0u; j < MM; j++) {
        o.gb[j] = o.bt * gs[j];
        o.dl[j] = delta[t * MM + j];
        dbeta = fma(gs[j], o.dl[j], dbeta);
        gp = fma(gs[j], v[t * MM + j] - o.dl[j], gp);
    }
    o.kdk = o.bt * (dbeta - gp);
    if (store) {
        dz[t] = dbeta * o.bt * fma(-0.5, o.bt, 1.0);
        for (var j = 0u; j < MM; j++) { du[t * MM + j] = o.gb[j] * value_act_grad(v[t * MM + j]); }
    }
    return o;
}

@compute @workgroup_size(128)
fn delta_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let seg = seg_w();
    let lane = lid & (seg - 1u);
    let t = token_index(wid, nwg, lid);
    // Segments past the last token idle, but take part in the barriers.
    let live = t < params.n;
    let d = params.d;

    // part[0] = ‖k̃‖², part[1] = w_β·c, part[2 + j] = (W_v a)_j, part[2 + MM + j] = (Xᵀk̃)_j
    var part: array<f32, NV>;
    var xc: array<Row, R>;              // cached X rows
    var kc: array<f32, R>;              // cached k̃
    if (live) {
        for (var r = 0u; r < R; r++) {
            let i = lane + r * seg;
            if (i < d) {
                let ti = t * d + i;
                kc[r] = kraw[ti];
                xc[r] = forward_row(ti, i, kc[r], &part);
            }
        }
        for (var i = lane + R * seg; i < d; i += seg) {
            let ti = t * d + i;
            _ = forward_row(ti, i, kraw[ti], &part);
        }
    }
    segment_sum(&part, NV, lid, lane);
    if (!live) { return; }

    var coef: array<f32, MM>;   // β δ_j
    let rn = token_forward(t, part, lane == 0u, &coef);

    for (var r = 0u; r < R; r++) {
        let i = lane + r * seg;
        if (i < d) { write_row(t * d + i, kc[r] * rn, coef, xc[r]); }
    }
    for (var i = lane + R * seg; i < d; i += seg) {
        let ti = t * d + i;
        write_row(ti, kraw[ti] * rn, coef, xin(x[ti]));
    }
}

// Row ti of the outputs: k_i and X'[i, ·] = X[i, ·] + k_i (β δ).
fn write_row(ti: u32, ki: f32, coef: array<f32, MM>, xr_in: Row) {
    if (params.store_k != 0u) { k_out[ti] = ki; }
    write_x_row(ti, ki, coef, xr_in);
}

// X'[i, ·] = X[i, ·] + k_i (β δ) for row ti.
fn write_x_row(ti: u32, ki: f32, coef: array<f32, MM>, xr_in: Row) {
    var xr = xr_in;
    var cf = coef;
    var nr: Row;
    for (var j = 0u; j < MM; j++) { nr[j] = fma(ki, cf[j], xr[j]); }
    x_out[ti] = xout(nr);
}

// Adds k_i G[i, ·] (element ti) to part[0..MM) (g = Gᵀk); returns G[i, ·].
fn gk_row(ti: u32, ki: f32, part: ptr<function, array<f32, NV>>) -> Row {
    var gr = g[ti];
    for (var j = 0u; j < MM; j++) { (*part)[j] = fma(ki, gr[j], (*part)[j]); }
    return gr;
}

// Row ti of the backward: writes ∂X[i, ·] = G[i, ·] − k_i β g and returns ∂k_i = β(Gδ − Xg)_i.
fn backward_row(ti: u32, ki: f32, g_in: Row, bt: f32, gs_in: array<f32, MM>, gb_in: array<f32, MM>,
                dl_in: array<f32, MM>) -> f32 {
    var gr = g_in;
    var gs = gs_in;
    var gb = gb_in;
    var dl = dl_in;
    var xr = xin(x[ti]);
    var nr: Row;
    var gd = 0.0;    // (G δ)_i
    var xg = 0.0;    // (X g)_i
    for (var j = 0u; j < MM; j++) {
        gd = fma(gr[j], dl[j], gd);
        xg = fma(xr[j], gs[j], xg);
        nr[j] = fma(-ki, gb[j], gr[j]);
    }
    dx[ti] = nr;
    return bt * (gd - xg);
}

@compute @workgroup_size(128)
fn delta_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let seg = seg_w();
    let lane = lid & (seg - 1u);
    let t = token_index(wid, nwg, lid);
    // Segments past the last token idle, but take part in the barriers.
    let live = t < params.n;
    let d = params.d;

    // Phase A: g = Gᵀk, with k = k̃·r recomputed as the forward computed it (the same bits).
    let rn = rnorm[min(t, params.n - 1u)];
    var part: array<f32, NV>;
    var gc: array<Row, R>;              // cached G rows
    var kc: array<f32, R>;              // cached k
    if (live) {
        for (var r = 0u; r < R; r++) {
            let i = lane + r * seg;
            if (i < d) {
                let ti = t * d + i;
                kc[r] = kraw[ti] * rn;
                gc[r] = gk_row(ti, kc[r], &part);
            }
        }
        for (var i = lane + R * seg; i < d; i += seg) {
            let ti = t * d + i;
            _ = gk_row(ti, kraw[ti] * rn, &part);
        }
    }
    segment_sum(&part, MM, lid, lane);

    // Phase B: ∂X, ∂k = β(Gδ − Xg) and ∂k̃ = (∂k − k (kᵀ∂k)) / n per row. kᵀ∂k needs no pass of
    // its own: kᵀ∂k = β(kᵀGδ − kᵀXg) = β(gᵀδ − gᵀp), with p = Xᵀk = v − δ from the forward.
    if (!live) { return; }
    var gs: array<f32, MM>;     // g
    for (var j = 0u; j < MM; j++) { gs[j] = part[j]; }
    let tb = token_backward(t, gs, lane == 0u);
    for (var r = 0u; r < R; r++) {
        let i = lane + r * seg;
        if (i < d) {
            let dk = backward_row(t * d + i, kc[r], gc[r], tb.bt, gs, tb.gb, tb.dl);
            dkraw[t * d + i] = fma(-kc[r], tb.kdk, dk) * tb.rn;
        }
    }
    for (var i = lane + R * seg; i < d; i += seg) {
        let ti = t * d + i;
        let ki = kraw[ti] * rn;
        let dk = backward_row(ti, ki, g[ti], tb.bt, gs, tb.gb, tb.dl);
        dkraw[ti] = fma(-ki, tb.kdk, dk) * tb.rn;
    }
}

// The heads' backward, one invocation per (feature i, chunk of tokens), tokens in order:
//   ∂c[t, i] = ∂z_t w_β[i],   ∂a[t, i] (+)= Σ_j W_v[j, i] ∂u_t[j],
// and the chunk's sums of ∂w_β[i] (Σ ∂z_t c[t, i]), ∂W_v[j, i] (Σ ∂u_t[j] a[t, i]) and, in the
// invocations of feature 0, ∂b_β (Σ ∂z_t) and ∂b_v[j] (Σ ∂u_t[j]). w_β[i] and W_v[·, i] stay in
// registers for the whole chunk. A workgroup covers WG features of one chunk (grid: feature
// tiles fastest, then chunks), so every invocation of a workgroup walks the same tokens and ∂z_t,
// ∂u_t are loaded once per subgroup in the `g` variants. Partials (`hpart`) per chunk: w_β [d],
// b_β, W_v [m·d] (column j·d + i), b_v [m], at the offsets and row strides in `params`: either
// four blocks, or two — rows [w_β | b_β] and [W_v | b_v] — when each pair of gradients is
// contiguous in the gradient buffer; the launcher's column sums add the chunks in order (no
// atomics, bit-identical run to run).
@compute @workgroup_size(128)
fn delta_heads(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    heads(wid, nwg, lid, true);
}

// The heads of invocation `lid`'s feature and chunk; `lead` as in `forward_q` (the shared values
// are ∂z_t and ∂u_t). Invocations past the last feature walk the last one and store nothing.
fn heads(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, lead: bool) {
    let d = params.d;
    let tiles = (d + WG - 1u) / WG;
    let grp = wid.y * nwg.x + wid.x;
    if (grp >= tiles * params.chunks) { return; }
    let ch = grp / tiles;
    let i_grid = (grp - ch * tiles) * WG + lid;
    let live = i_grid < d;
    let i = min(i_grid, d - 1u);
    let n0 = ch * params.chunk;
    let n1 = min(n0 + params.chunk, params.n);
    let wb = w_beta[i];
    var wv: array<f32, MM>;
    for (var j = 0u; j < MM; j++) { wv[j] = w_v[j * d + i]; }
    var s_wb = 0.0;
    var s_bb = 0.0;
    var s_wv: array<f32, MM>;
    var s_bv: array<f32, MM>;
    for (var t = n0; t < n1; t++) {
        let ti = t * d + i;
        // ∂z_t and ∂u_t: the same for every invocation of the workgroup.
        var dzt = 0.0;
        var dur: Row;
        if (lead) {
            dzt = dz[t];
            dur = du_rows[t];
        }
        dzt = sg_first(dzt);
        let ai = a[ti];
        let ci = c[ti];
        var acc = 0.0;
        for (var j = 0u; j < MM; j++) {
            let duj = sg_first(dur[j]);
            acc = fma(duj, wv[j], acc);
            s_wv[j] = fma(duj, ai, s_wv[j]);
            s_bv[j] += duj;
        }
        if (live) {
            dc[ti] = dzt * wb;
            if (params.accumulate_da != 0u) { acc += da[ti]; }
            da[ti] = acc;
        }
        s_wb = fma(dzt, ci, s_wb);
        s_bb += dzt;
    }
    if (!live) { return; }
    hpart[ch * params.s_wb + i] = s_wb;
    for (var j = 0u; j < MM; j++) { hpart[params.o_wv + ch * params.s_wv + j * d + i] = s_wv[j]; }
    if (i == 0u) {
        hpart[params.o_bb + ch * params.s_bb] = s_bb;
        for (var j = 0u; j < MM; j++) { hpart[params.o_bv + ch * params.s_bv + j] = s_bv[j]; }
    }
}

// ---------------------------------------------------------------------------------------------
// Quads: the per-token forward and backward for one token per invocation (the SEGFIX = 1
// variants) with d a multiple of 4, four features per step: k̃, a, c, k, ∂k̃ and the head weights
// move as vec4s (the state rows stay one `Row` per feature). Same formulas and outputs as above,
// the sums over d feature by feature as an fma each (`dot_acc`, `quad_dot`). Every product that
// feeds a sum in this file is an explicit fma: a driver may contract `a * b + c` wherever it
// likes, and without wgpu's index clamps NVIDIA did so differently in `delta_forward_q` and
// `delta_forward_qk` (X' 3.7e-6 apart, GPU run 4), which must give the same bits.

// acc + p·q as four fmas in feature order (not `dot`, whose order and contraction the driver
// picks: the entry points that store k and those that do not must give the same bits).
fn dot_acc(acc: f32, p: vec4<f32>, q: vec4<f32>) -> f32 {
    return fma(p.w, q.w, fma(p.z, q.z, fma(p.y, q.y, fma(p.x, q.x, acc))));
}

// part[j] += Σ_r k_r R_r[j] over a quad's four rows R_0..R_3 (X in the forward, G in the
// backward; the writes reload them: caching rows in registers measured no faster).
fn quad_dot(part: ptr<function, array<f32, MM>>, kq: vec4<f32>, r0_in: Row, r1_in: Row, r2_in: Row, r3_in: Row) {
    var r0 = r0_in;
    var r1 = r1_in;
    var r2 = r2_in;
    var r3 = r3_in;
    for (var j = 0u; j < MM; j++) {
        (*part)[j] = fma(kq.w, r3[j], fma(kq.z, r2[j], fma(kq.y, r1[j], fma(kq.x, r0[j], (*part)[j]))));
    }
}

@compute @workgroup_size(128)
fn delta_forward_q(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    forward_q(wid, nwg, lid, true, false);
}

// `delta_forward_q` that also stores k (decoding's traces).
@compute @workgroup_size(128)
fn delta_forward_qk(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    forward_q(wid, nwg, lid, true, true);
}

// The quad forward of invocation `lid`'s token. `lead`: this invocation loads the values its
// whole subgroup shares (the head weights; `sg_first4` hands them out): every invocation in
// `delta_forward_q`, invocation 0 of each subgroup in the `g` variants' `delta_forward_qg`.
// Invocations past the last token run the sums of the last token (they take part in the shared
// loads, so invocation 0 of a subgroup is never missing) and store nothing. `store_k`: also
// store k, a constant of each entry point (`…k`) rather than a parameter, so that the training
// forward has no conditional store in its loop (llvmpipe runs one as a loop over the SIMD lanes
// even when no lane stores).
fn forward_q(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, lead: bool, store_k: bool) {
    let t_grid = token_index(wid, nwg, lid);
    let live = t_grid < params.n;
    let t = min(t_grid, params.n - 1u);
    let d = params.d;
    let dq = d / 4u;
    // The sums of `delta_forward`: part[0] = ‖k̃‖², part[1] = w_β·c, part[2 + j] = (W_v a)_j,
    // part[2 + MM + j] = (Xᵀk̃)_j.
    var part: array<f32, NV>;
    var ps: array<f32, MM>;
    for (var q = 0u; q < dq; q++) {
        let tq = t * dq + q;
        let kq = kraw4[tq];
        let aq = a4[tq];
        // The head weights of quad q, the same for every token: loaded by the subgroup's lead
        // invocation in the `g` variants.
        var wb = vec4<f32>();
        var wv: array<vec4<f32>, MM>;
        if (lead) {
            wb = hw_beta4(q);
            for (var j = 0u; j < MM; j++) { wv[j] = hw_v4(j * dq + q); }
        }
        part[0] = dot_acc(part[0], kq, kq);
        part[1] = dot_acc(part[1], sg_first4(wb), c4[tq]);
        for (var j = 0u; j < MM; j++) { part[2u + j] = dot_acc(part[2u + j], sg_first4(wv[j]), aq); }
        let b = t * d + 4u * q;
        quad_dot(&ps, kq, xin(x[b]), xin(x[b + 1u]), xin(x[b + 2u]), xin(x[b + 3u]));
    }
    if (!live) { return; }
    for (var j = 0u; j < MM; j++) { part[2u + MM + j] = ps[j]; }
    var coef: array<f32, MM>;   // β δ_j
    let rn = token_forward(t, part, true, &coef);
    for (var q = 0u; q < dq; q++) {
        let tq = t * dq + q;
        let kq = kraw4[tq] * rn;
        let b = t * d + 4u * q;
        for (var r = 0u; r < 4u; r++) { write_x_row(b + r, kq[r], coef, xin(x[b + r])); }
    }
    // k in a loop of its own, after the writes: the loop that writes X' is then the same code in
    // both entry points. With k stored inside it, NVIDIA's compiler (wgpu's index clamps off)
    // rounded X' differently in the two, 7e-6 apart after every sum was an explicit fma (GPU
    // run 5).
    if (store_k) {
        for (var q = 0u; q < dq; q++) { k_out4[t * dq + q] = kraw4[t * dq + q] * rn; }
    }
}

@compute @workgroup_size(128)
fn delta_backward_q(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let t = token_index(wid, nwg, lid);
    if (t >= params.n) { return; }
    let d = params.d;
    let dq = d / 4u;
    var gs: array<f32, MM>;     // g = Gᵀk, k = k̃·r as the forward computed it
    let rn = rnorm[t];
    for (var q = 0u; q < dq; q++) {
        let b = t * d + 4u * q;
        quad_dot(&gs, kraw4[t * dq + q] * rn, g[b], g[b + 1u], g[b + 2u], g[b + 3u]);
    }
    let tb = token_backward(t, gs, true);
    for (var q = 0u; q < dq; q++) {
        let tq = t * dq + q;
        let kq = kraw4[tq] * rn;
        let b = t * d + 4u * q;
        let dk = vec4<f32>(
            backward_row(b, kq.x, g[b], tb.bt, gs, tb.gb, tb.dl),
            backward_row(b + 1u, kq.y, g[b + 1u], tb.bt, gs, tb.gb, tb.dl),
            backward_row(b + 2u, kq.z, g[b + 2u], tb.bt, gs, tb.gb, tb.dl),
            backward_row(b + 3u, kq.w, g[b + 3u], tb.bt, gs, tb.gb, tb.dl),
        );
        dkraw4[tq] = fma(-kq, vec4<f32>(tb.kdk), dk) * tb.rn;
    }
}
