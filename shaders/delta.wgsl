// The DDL delta write (spec sections 2, 11.1, 14.4/14.8), forward and backward, per token.
//
// Forward, for token t with state X ∈ R^{d×m} (row-major, value index j fastest):
//   n = sqrt(‖k̃‖² + ε_k²), k = k̃/n, β = 2σ(w_β·c + b_β), v = act(W_v a + b_v),
//   p = Xᵀk, δ = v − p, X' = X + β k δᵀ.
// Backward, given G = ∂X':
//   g = Gᵀk, ∂X = G − β k gᵀ, ∂v = β g, ∂β = gᵀδ, ∂k = β(Gδ − Xg),
//   ∂k̃ = (∂k − k(kᵀ∂k))/n, ∂z = ∂β·β(1 − β/2), ∂u = ∂v ⊙ act'(v),
//   ∂c = ∂z w_β, ∂a (+)= W_vᵀ∂u; per-token ∂z and ∂u go to scratch for the parameter sums
//   (done by the launcher with deterministic matmuls).
//
// Grid: workgroups of WG invocations cut into segments of `seg` invocations (a power of two,
// seg = min(WG, next power of two ≥ d), chosen by the launcher); each segment owns one token, so a
// workgroup handles WG/seg tokens (1-D over workgroups, split over x and y:
// group = wid.y·nwg.x + wid.x, token = group·(WG/seg) + lid/seg). Lane `lane` of a segment owns
// rows i = lane, lane + seg, lane + 2·seg, … and reads the m values of each of its rows. The first
// R rows of every lane (all of them while d ≤ R·WG = 512) stay in registers between the reduction
// and the write, so X (forward) and G (backward) are read from memory once; rows beyond are read
// again right after their first read (still correct, usually served from cache). Every reduction
// over d: each lane sums its rows in increasing i, then runs of 8 lanes, then the run sums, in a
// fixed order, so results are bit-identical run to run. No subgroup operations, no atomics.

const WG: u32 = 128u;
const R: u32 = 4u;          // rows per lane kept in registers
const MMAX: u32 = 8u;       // largest m (value channels) supported
const NV: u32 = 18u;        // values reduced together at most: 2 + 2·MMAX
const RUN: u32 = 8u;        // partials added by one lane in the first step of a reduction

struct Params {
    n: u32,              // tokens
    d: u32,              // width
    m: u32,              // value channels, 1 ..= MMAX
    v_act: u32,          // 0: v = 4σ(u), 1: v = σ(u), 2: v = u
    k_eps: f32,          // ε_k of the direction normalisation
    accumulate_da: u32,  // backward: 1 = da += W_vᵀ∂u, 0 = da = W_vᵀ∂u
    seg: u32,            // invocations per token: a power of two ≤ WG
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

// Shared by both passes (read only).
@group(0) @binding(1) var<storage, read> x: array<f32>;        // [n, d, m]
@group(0) @binding(2) var<storage, read> w_beta: array<f32>;   // [d]
@group(0) @binding(3) var<storage, read> w_v: array<f32>;      // [m, d]

// Forward inputs.
@group(0) @binding(4) var<storage, read> kraw: array<f32>;     // [n, d]
@group(0) @binding(5) var<storage, read> a: array<f32>;        // [n, d]
@group(0) @binding(6) var<storage, read> c: array<f32>;        // [n, d]
@group(0) @binding(7) var<storage, read> b_beta: array<f32>;   // [1]
@group(0) @binding(8) var<storage, read> b_v: array<f32>;      // [m]
// Forward outputs.
@group(0) @binding(9) var<storage, read_write> x_out: array<f32>;      // [n, d, m]
@group(0) @binding(10) var<storage, read_write> k_out: array<f32>;     // [n, d]
@group(0) @binding(11) var<storage, read_write> rnorm_out: array<f32>; // [n]
@group(0) @binding(12) var<storage, read_write> beta_out: array<f32>;  // [n]
@group(0) @binding(13) var<storage, read_write> v_out: array<f32>;     // [n, m]
@group(0) @binding(14) var<storage, read_write> delta_out: array<f32>; // [n, m]

// Backward inputs (saved by the forward).
@group(0) @binding(15) var<storage, read> g: array<f32>;       // [n, d, m] = ∂X'
@group(0) @binding(16) var<storage, read> k: array<f32>;       // [n, d]
@group(0) @binding(17) var<storage, read> rnorm: array<f32>;   // [n]
@group(0) @binding(18) var<storage, read> beta: array<f32>;    // [n]
@group(0) @binding(19) var<storage, read> v: array<f32>;       // [n, m]
@group(0) @binding(20) var<storage, read> delta: array<f32>;   // [n, m]
// Backward outputs.
@group(0) @binding(21) var<storage, read_write> dx: array<f32>;    // [n, d, m]
@group(0) @binding(22) var<storage, read_write> dkraw: array<f32>; // [n, d]
@group(0) @binding(23) var<storage, read_write> da: array<f32>;    // [n, d]
@group(0) @binding(24) var<storage, read_write> dc: array<f32>;    // [n, d]
@group(0) @binding(25) var<storage, read_write> dz: array<f32>;    // [n]    scratch
@group(0) @binding(26) var<storage, read_write> du: array<f32>;    // [n, m] scratch

// Reduction buffer: NV rows of WG partial sums (9 KiB).
var<workgroup> red: array<f32, NV * WG>;

// Sums part[0..nv) over the `seg` lanes of each segment in a fixed order and gives every lane
// its segment's totals: lanes 0, 1, … first add runs of 8 consecutive partials in order, then
// every lane adds the run sums in order (all lanes the same sums, so they agree bit for bit).
// Three barriers whatever the width. Must be called by every invocation (uniform control flow).
fn segment_sum(part: ptr<function, array<f32, NV>>, nv: u32, lid: u32, lane: u32) {
    let seg = params.seg;
    let head = lid - lane;
    for (var q = 0u; q < NV; q++) {
        if (q < nv) { red[q * WG + lid] = (*part)[q]; }
    }
    workgroupBarrier();
    // Run `lane` covers partials [8·lane, 8·lane + 8) of the segment; its sum goes to the first.
    let runs = (seg + RUN - 1u) / RUN;
    if (lane < runs) {
        let first = head + lane * RUN;
        let last = min(first + RUN, head + seg);
        for (var q = 0u; q < NV; q++) {
            if (q < nv) {
                var acc = red[q * WG + first];
                for (var e = first + 1u; e < last; e++) { acc += red[q * WG + e]; }
                red[q * WG + first] = acc;
            }
        }
    }
    workgroupBarrier();
    for (var q = 0u; q < NV; q++) {
        if (q < nv) {
            var acc = red[q * WG + head];
            for (var r = 1u; r < runs; r++) { acc += red[q * WG + head + r * RUN]; }
            (*part)[q] = acc;
        }
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
        case 0u: { return vv * (1.0 - 0.25 * vv); }
        case 1u: { return vv * (1.0 - vv); }
        default: { return 1.0; }
    }
}

// The token of this invocation's segment (may be ≥ n in the last workgroup).
fn token_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * (WG / params.seg) + lid / params.seg;
}

// Forward partial sums of row i of token t: ‖k̃‖², w_β·c, W_v a (m values), Xᵀk̃ (m values).
// Returns k̃_i; stores X[i, 0..m) in xrow.
fn forward_row(t: u32, i: u32, part: ptr<function, array<f32, NV>>,
               xrow: ptr<function, array<f32, MMAX>>) -> f32 {
    let d = params.d;
    let m = params.m;
    let ti = t * d + i;
    let kt = kraw[ti];
    let ai = a[ti];
    (*part)[0] = fma(kt, kt, (*part)[0]);
    (*part)[1] = fma(w_beta[i], c[ti], (*part)[1]);
    let xb = ti * m;
    for (var j = 0u; j < MMAX; j++) {
        if (j < m) {
            let xv = x[xb + j];
            (*xrow)[j] = xv;
            (*part)[2u + j] = fma(w_v[j * d + i], ai, (*part)[2u + j]);
            (*part)[2u + MMAX + j] = fma(kt, xv, (*part)[2u + MMAX + j]);
        }
    }
    return kt;
}

// Writes k_i and X'[i, ·] = X[i, ·] + k_i (β δ).
fn forward_write(t: u32, i: u32, kt: f32, rn: f32, coef: ptr<function, array<f32, MMAX>>,
                 xrow: ptr<function, array<f32, MMAX>>) {
    let ti = t * params.d + i;
    let m = params.m;
    let ki = kt * rn;
    k_out[ti] = ki;
    let xb = ti * m;
    for (var j = 0u; j < MMAX; j++) {
        if (j < m) { x_out[xb + j] = fma(ki, (*coef)[j], (*xrow)[j]); }
    }
}

@compute @workgroup_size(128)
fn delta_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let seg = params.seg;
    let lane = lid & (seg - 1u);
    let t = token_index(wid, nwg, lid);
    // Segments past the last token idle, but take part in the barriers.
    let live = t < params.n;
    let d = params.d;
    let m = params.m;

    var part: array<f32, NV>;
    var xc: array<f32, R * MMAX>;   // cached X rows
    var kc: array<f32, R>;          // cached k̃
    var xrow: array<f32, MMAX>;
    if (live) {
        for (var r = 0u; r < R; r++) {
            let i = lane + r * seg;
            if (i < d) {
                kc[r] = forward_row(t, i, &part, &xrow);
                for (var j = 0u; j < MMAX; j++) { xc[r * MMAX + j] = xrow[j]; }
            }
        }
        for (var i = lane + R * seg; i < d; i += seg) {
            _ = forward_row(t, i, &part, &xrow);
        }
    }
    segment_sum(&part, 2u + MMAX + m, lid, lane);
    if (!live) { return; }

    let rn = 1.0 / sqrt(part[0] + params.k_eps * params.k_eps);
    let z = part[1] + b_beta[0];
    let bt = 2.0 * sigmoid(z);
    var coef: array<f32, MMAX>;   // β δ_j
    for (var j = 0u; j < MMAX; j++) {
        if (j < m) {
            let vj = value_act(part[2u + j] + b_v[j]);
            let dj = vj - part[2u + MMAX + j] * rn;
            coef[j] = bt * dj;
            if (lane == 0u) {
                v_out[t * m + j] = vj;
                delta_out[t * m + j] = dj;
            }
        }
    }
    if (lane == 0u) {
        rnorm_out[t] = rn;
        beta_out[t] = bt;
    }

    for (var r = 0u; r < R; r++) {
        let i = lane + r * seg;
        if (i < d) {
            for (var j = 0u; j < MMAX; j++) { xrow[j] = xc[r * MMAX + j]; }
            forward_write(t, i, kc[r], rn, &coef, &xrow);
        }
    }
    for (var i = lane + R * seg; i < d; i += seg) {
        let kt = kraw[t * d + i];
        let xb = (t * d + i) * m;
        for (var j = 0u; j < MMAX; j++) {
            if (j < m) { xrow[j] = x[xb + j]; }
        }
        forward_write(t, i, kt, rn, &coef, &xrow);
    }
}

// Backward phase A for row i: reads k_i and G[i, ·], adds k_i G[i, j] to part[j].
fn backward_row_a(t: u32, i: u32, part: ptr<function, array<f32, NV>>,
                  grow: ptr<function, array<f32, MMAX>>) -> f32 {
    let m = params.m;
    let ti = t * params.d + i;
    let ki = k[ti];
    let gb = ti * m;
    for (var j = 0u; j < MMAX; j++) {
        if (j < m) {
            let gij = g[gb + j];
            (*grow)[j] = gij;
            (*part)[j] = fma(ki, gij, (*part)[j]);
        }
    }
    return ki;
}

// Backward phase B for row i: writes ∂X[i, ·], ∂c_i, ∂a_i and returns ∂k_i = β(Gδ − Xg)_i.
// gs = g (Gᵀk), dl = δ, dus = ∂u (all per token).
fn backward_row_b(t: u32, i: u32, ki: f32, bt: f32, dzt: f32,
                  grow: ptr<function, array<f32, MMAX>>,
                  gs: ptr<function, array<f32, MMAX>>,
                  dl: ptr<function, array<f32, MMAX>>,
                  dus: ptr<function, array<f32, MMAX>>) -> f32 {
    let d = params.d;
    let m = params.m;
    let ti = t * d + i;
    let xb = ti * m;
    var gd = 0.0;    // (G δ)_i
    var xg = 0.0;    // (X g)_i
    var wu = 0.0;    // (W_vᵀ ∂u)_i
    let bk = bt * ki;
    for (var j = 0u; j < MMAX; j++) {
        if (j < m) {
            let gij = (*grow)[j];
            gd = fma(gij, (*dl)[j], gd);
            xg = fma(x[xb + j], (*gs)[j], xg);
            dx[xb + j] = gij - bk * (*gs)[j];
            wu = fma(w_v[j * d + i], (*dus)[j], wu);
        }
    }
    dc[ti] = dzt * w_beta[i];
    if (params.accumulate_da != 0u) {
        da[ti] = da[ti] + wu;
    } else {
        da[ti] = wu;
    }
    return bt * (gd - xg);
}

@compute @workgroup_size(128)
fn delta_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let seg = params.seg;
    let lane = lid & (seg - 1u);
    let t = token_index(wid, nwg, lid);
    // Segments past the last token idle, but take part in the barriers.
    let live = t < params.n;
    let d = params.d;
    let m = params.m;

    // Phase A: g = Gᵀk.
    var part: array<f32, NV>;
    var gc: array<f32, R * MMAX>;   // cached G rows
    var kc: array<f32, R>;          // cached k
    var grow: array<f32, MMAX>;
    if (live) {
        for (var r = 0u; r < R; r++) {
            let i = lane + r * seg;
            if (i < d) {
                kc[r] = backward_row_a(t, i, &part, &grow);
                for (var j = 0u; j < MMAX; j++) { gc[r * MMAX + j] = grow[j]; }
            }
        }
        for (var i = lane + R * seg; i < d; i += seg) {
            _ = backward_row_a(t, i, &part, &grow);
        }
    }
    segment_sum(&part, m, lid, lane);

    // Per-token scalars: ∂β = gᵀδ, ∂z, ∂u.
    var bt = 0.0;
    var rn = 0.0;
    var gs: array<f32, MMAX>;
    var dl: array<f32, MMAX>;
    var dus: array<f32, MMAX>;
    var dzt = 0.0;
    // Phase B: ∂X, ∂c, ∂a, ∂k and kᵀ∂k. Uncached rows park ∂k in dkraw until phase C.
    var part2: array<f32, NV>;
    var dkc: array<f32, R>;
    if (live) {
        bt = beta[t];
        rn = rnorm[t];
        var dbeta = 0.0;
        for (var j = 0u; j < MMAX; j++) {
            if (j < m) {
                gs[j] = part[j];
                dl[j] = delta[t * m + j];
                dbeta = fma(gs[j], dl[j], dbeta);
            }
        }
        for (var j = 0u; j < MMAX; j++) {
            if (j < m) { dus[j] = (bt * gs[j]) * value_act_grad(v[t * m + j]); }
        }
        dzt = dbeta * bt * (1.0 - 0.5 * bt);
        if (lane == 0u) {
            dz[t] = dzt;
            for (var j = 0u; j < MMAX; j++) {
                if (j < m) { du[t * m + j] = dus[j]; }
            }
        }

        for (var r = 0u; r < R; r++) {
            let i = lane + r * seg;
            if (i < d) {
                for (var j = 0u; j < MMAX; j++) { grow[j] = gc[r * MMAX + j]; }
                let dk = backward_row_b(t, i, kc[r], bt, dzt, &grow, &gs, &dl, &dus);
                dkc[r] = dk;
                part2[0] = fma(kc[r], dk, part2[0]);
            }
        }
        for (var i = lane + R * seg; i < d; i += seg) {
            let ki = k[t * d + i];
            let gb = (t * d + i) * m;
            for (var j = 0u; j < MMAX; j++) {
                if (j < m) { grow[j] = g[gb + j]; }
            }
            let dk = backward_row_b(t, i, ki, bt, dzt, &grow, &gs, &dl, &dus);
            dkraw[t * d + i] = dk;
            part2[0] = fma(ki, dk, part2[0]);
        }
    }
    segment_sum(&part2, 1u, lid, lane);
    if (!live) { return; }
    let kdk = part2[0];

    // Phase C: ∂k̃ = (∂k − k (kᵀ∂k)) / n.
    for (var r = 0u; r < R; r++) {
        let i = lane + r * seg;
        if (i < d) {
            dkraw[t * d + i] = (dkc[r] - kc[r] * kdk) * rn;
        }
    }
    for (var i = lane + R * seg; i < d; i += seg) {
        let ti = t * d + i;
        dkraw[ti] = (dkraw[ti] - k[ti] * kdk) * rn;
    }
}
