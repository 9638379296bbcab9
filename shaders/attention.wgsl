// Causal multi-head attention, flash-attention style: softmax(q̂·k̂ᵀ·scale, causal)·V, forward and
// backward, without ever storing the T×T score matrix.
//
// Layouts (row-major, offsets in elements):
//   q, out, dout, dq, o_saved : [batch, q_len, heads, hd]
//   k, v, dk, dv              : [batch, kv_stride, heads, hd]   (rows ≥ kv_len are never read)
//   lse, lse_saved, delta     : [batch, heads, q_len]
// Query i (0-based within q) sees key τ iff τ < kv_len and τ ≤ q_pos0 + i. Every query sees key 0,
// so every softmax row has at least one term.
//
// The head dimension is processed in chunks of DC = 64: the score dot products loop over all
// chunks, and each workgroup writes the outputs of one chunk ("pass", `nch` = ⌈hd/64⌉ passes).
// When hd ≤ 64 (one chunk) every tile is staged exactly once. All reductions run in a fixed
// sequential order and there are no atomics: results are bit-identical run to run.
//
// Work items (all entry points): the workgroup index g = wid.y·nwg.x + wid.x (grids are split
// over x and y for the 65535-per-dimension limit) is decoded as
//   pass = g % nch, block = (g / nch) % nblk, head, batch;
// groups with g ≥ total exit at once (uniformly).
//
// Entry points (64 invocations each except attn_bwd_d):
//   attn_fwd       one group per 16 queries × pass; loops over 16-key tiles with an online
//                  softmax; writes out and (pass 0) lse.
//   attn_bwd_d     delta[b,h,i] = dout_i · out_i (one invocation per query row).
//   attn_bwd_dq    one group per 16 queries × pass; loops over 8-key tiles; recomputes
//                  P = exp(s − lse) and dS = P ⊙ (dout·vᵀ − delta); dq = scale · dS·K.
//   attn_bwd_dkdv  one group per 16 keys × pass; loops over 8-query tiles; dv = Pᵀ·dout,
//                  dk = scale · dSᵀ·Q. Keys no query sees (τ ≥ kv_len) get zeros.
//
// Tiles are staged in workgroup memory as rows of 16 vec4 (one 64-dim chunk) plus one vec4 of
// padding (row stride RS = 17), so that the 4 lanes of a row group read distinct banks. Each
// invocation is one of 4 lanes of a row (query or key): in the score phase lane l owns the
// columns l, l+4, … of the tile (a vec4 / vec2 of scores), in the accumulation phase the vec4
// columns l, l+4, l+8, l+12 of the chunk (dims 4·(l+4i) … 4·(l+4i)+3).

struct Params {
    batch: u32,
    heads: u32,
    hd: u32,        // head dim
    q_len: u32,
    kv_len: u32,
    kv_stride: u32,
    q_pos0: u32,
    nch: u32,       // ⌈hd / DC⌉: head-dim chunks = passes
    nblk: u32,      // query blocks (fwd, dq) or key blocks (dkdv)
    total: u32,     // work groups (or rows, for attn_bwd_d)
    scale: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> lse: array<f32>;
@group(0) @binding(6) var<storage, read> o_saved: array<f32>;
@group(0) @binding(7) var<storage, read> lse_saved: array<f32>;
@group(0) @binding(8) var<storage, read> dout: array<f32>;
@group(0) @binding(9) var<storage, read_write> delta: array<f32>;
@group(0) @binding(10) var<storage, read> delta_saved: array<f32>;
@group(0) @binding(11) var<storage, read_write> dq: array<f32>;
@group(0) @binding(12) var<storage, read_write> dk: array<f32>;
@group(0) @binding(13) var<storage, read_write> dv: array<f32>;
// q, k, v, out as vec4s (`attn_fwd_rows4`: head dim a multiple of 4).
@group(0) @binding(14) var<storage, read> q4: array<vec4<f32>>;
@group(0) @binding(15) var<storage, read> k4: array<vec4<f32>>;
@group(0) @binding(16) var<storage, read> v4: array<vec4<f32>>;
@group(0) @binding(17) var<storage, read_write> out4: array<vec4<f32>>;

const DC: u32 = 64u;          // head-dim chunk = 16 vec4
const RS: u32 = 17u;          // vec4 row stride of staged tiles (16 + 1 padding)
const NEG: f32 = -1.0e30;     // "minus infinity" for masked scores (finite: no inf arithmetic)

// Workgroup memory shared by the entry points (each carves its own regions below):
// 952 vec4 + 272 f32 = 16320 bytes.
var<workgroup> sm4: array<vec4<f32>, 952>;
var<workgroup> sf: array<f32, 272>;

// Staging: rows [r0, r0 + rows) (zeros at and beyond rlim) and dims [c0, c0 + DC) (zeros at and
// beyond cw) of one head of a token-major tensor into sm4[off + r·RS + column]. `base` is the
// element of (token 0, dim 0) of the head, `ts` the stride between tokens.
fn stage_q(off: u32, base: u32, ts: u32, r0: u32, rows: u32, rlim: u32, c0: u32, cw: u32,
           tid: u32) {
    for (var e = tid; e < rows * 16u; e += 64u) {
        let r = e / 16u;
        let d = (e % 16u) * 4u;
        var x = vec4<f32>();
        if (r0 + r < rlim) {
            let src = base + (r0 + r) * ts + c0 + d;
            if (d < cw) { x.x = q[src]; }
            if (d + 1u < cw) { x.y = q[src + 1u]; }
            if (d + 2u < cw) { x.z = q[src + 2u]; }
            if (d + 3u < cw) { x.w = q[src + 3u]; }
        }
        sm4[off + r * RS + e % 16u] = x;
    }
}

fn stage_k(off: u32, base: u32, ts: u32, r0: u32, rows: u32, rlim: u32, c0: u32, cw: u32,
           tid: u32) {
    for (var e = tid; e < rows * 16u; e += 64u) {
        let r = e / 16u;
        let d = (e % 16u) * 4u;
        var x = vec4<f32>();
        if (r0 + r < rlim) {
            let src = base + (r0 + r) * ts + c0 + d;
            if (d < cw) { x.x = k[src]; }
            if (d + 1u < cw) { x.y = k[src + 1u]; }
            if (d + 2u < cw) { x.z = k[src + 2u]; }
            if (d + 3u < cw) { x.w = k[src + 3u]; }
        }
        sm4[off + r * RS + e % 16u] = x;
    }
}

fn stage_v(off: u32, base: u32, ts: u32, r0: u32, rows: u32, rlim: u32, c0: u32, cw: u32,
           tid: u32) {
    for (var e = tid; e < rows * 16u; e += 64u) {
        let r = e / 16u;
        let d = (e % 16u) * 4u;
        var x = vec4<f32>();
        if (r0 + r < rlim) {
            let src = base + (r0 + r) * ts + c0 + d;
            if (d < cw) { x.x = v[src]; }
            if (d + 1u < cw) { x.y = v[src + 1u]; }
            if (d + 2u < cw) { x.z = v[src + 2u]; }
            if (d + 3u < cw) { x.w = v[src + 3u]; }
        }
        sm4[off + r * RS + e % 16u] = x;
    }
}

fn stage_dout(off: u32, base: u32, ts: u32, r0: u32, rows: u32, rlim: u32, c0: u32, cw: u32,
              tid: u32) {
    for (var e = tid; e < rows * 16u; e += 64u) {
        let r = e / 16u;
        let d = (e % 16u) * 4u;
        var x = vec4<f32>();
        if (r0 + r < rlim) {
            let src = base + (r0 + r) * ts + c0 + d;
            if (d < cw) { x.x = dout[src]; }
            if (d + 1u < cw) { x.y = dout[src + 1u]; }
            if (d + 2u < cw) { x.z = dout[src + 2u]; }
            if (d + 3u < cw) { x.w = dout[src + 3u]; }
        }
        sm4[off + r * RS + e % 16u] = x;
    }
}

// Writes the 16 dims a lane accumulated (vec4 columns lane + 4i) of one row, dims < pw only.
fn put_out(row: u32, lane: u32, pw: u32, a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>,
           a3: vec4<f32>) {
    let a = array<vec4<f32>, 4>(a0, a1, a2, a3);
    for (var i = 0u; i < 4u; i++) {
        let d0 = 4u * (lane + 4u * i);
        for (var e = 0u; e < 4u; e++) {
            if (d0 + e < pw) { out[row + d0 + e] = a[i][e]; }
        }
    }
}

fn put_dq(row: u32, lane: u32, pw: u32, a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>,
          a3: vec4<f32>) {
    let a = array<vec4<f32>, 4>(a0, a1, a2, a3);
    for (var i = 0u; i < 4u; i++) {
        let d0 = 4u * (lane + 4u * i);
        for (var e = 0u; e < 4u; e++) {
            if (d0 + e < pw) { dq[row + d0 + e] = a[i][e]; }
        }
    }
}

fn put_dk(row: u32, lane: u32, pw: u32, a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>,
          a3: vec4<f32>) {
    let a = array<vec4<f32>, 4>(a0, a1, a2, a3);
    for (var i = 0u; i < 4u; i++) {
        let d0 = 4u * (lane + 4u * i);
        for (var e = 0u; e < 4u; e++) {
            if (d0 + e < pw) { dk[row + d0 + e] = a[i][e]; }
        }
    }
}

fn put_dv(row: u32, lane: u32, pw: u32, a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>,
          a3: vec4<f32>) {
    let a = array<vec4<f32>, 4>(a0, a1, a2, a3);
    for (var i = 0u; i < 4u; i++) {
        let d0 = 4u * (lane + 4u * i);
        for (var e = 0u; e < 4u; e++) {
            if (d0 + e < pw) { dv[row + d0 + e] = a[i][e]; }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Forward. 64 invocations = 16 queries (qi) × 4 lanes; lane l scores keys t0 + l + 4j (j < 4).
// With one head-dim chunk the tile loop has two barriers: K of the next tile is staged while the
// current one is being reduced, and each lane recomputes the 16 probabilities of its row itself
// (4× redundant exps instead of a third barrier).

const F_BQ: u32 = 16u;
const F_BK: u32 = 16u;
const F_Q: u32 = 0u;        // sm4: Q chunk  [16 q][RS]
const F_K: u32 = 272u;      // sm4: K chunk  [16 k][RS]
const F_V: u32 = 544u;      // sm4: V chunk  [16 k][RS]   (ends at 816)
const F_S: u32 = 0u;        // sf: scores    [16 q][17]   (ends at 272)

@compute @workgroup_size(64)
fn attn_fwd(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let p = params;
    let g = wid.y * nwg.x + wid.x;
    if (g >= p.total) { return; }
    let pc = g % p.nch;
    let r = g / p.nch;
    let blk = p.nblk - 1u - r % p.nblk;     // the longest (last) query blocks start first
    let bh = r / p.nblk;
    let head = bh % p.heads;
    let b = bh / p.heads;

    let qi = tid / 4u;
    let lane = tid % 4u;
    let q0 = blk * F_BQ;
    let iq = q0 + qi;
    let ts = p.heads * p.hd;                               // elements between tokens
    let q_base = (b * p.q_len * p.heads + head) * p.hd;
    let kv_base = (b * p.kv_stride * p.heads + head) * p.hd;
    let q_last = min(q0 + F_BQ, p.q_len) - 1u;
    let kend = min(p.kv_len, p.q_pos0 + q_last + 1u);     // keys any query of the block sees
    let single = p.nch == 1u;
    let dpass = pc * DC;
    let pw = min(DC, p.hd - dpass);
    let lim = min(p.kv_len, p.q_pos0 + iq + 1u);          // this query sees keys < lim

    if (single) {
        stage_q(F_Q, q_base, ts, q0, F_BQ, p.q_len, 0u, p.hd, tid);
        stage_k(F_K, kv_base, ts, 0u, F_BK, p.kv_len, 0u, p.hd, tid);
    }

    var m_run = NEG;
    var l_run = 0.0;
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    let qrow = F_Q + qi * RS;
    let krow = F_K + lane * RS;
    let srow = F_S + qi * 17u;
    for (var t0 = 0u; t0 < kend; t0 += F_BK) {
        // (1) K(t0) is staged; every lane is done with the previous tile's V and scores.
        workgroupBarrier();
        if (single) { stage_v(F_V, kv_base, ts, t0, F_BK, p.kv_len, 0u, p.hd, tid); }
        var s = vec4<f32>();
        for (var c = 0u; c < p.nch; c++) {
            let c0 = c * DC;
            let cw = min(DC, p.hd - c0);
            if (!single) {
                stage_q(F_Q, q_base, ts, q0, F_BQ, p.q_len, c0, cw, tid);
                stage_k(F_K, kv_base, ts, t0, F_BK, p.kv_len, c0, cw, tid);
                workgroupBarrier();
            }
            for (var cc = 0u; cc < (cw + 3u) / 4u; cc++) {
                let qv = sm4[qrow + cc];
                s.x += dot(qv, sm4[krow + cc]);
                s.y += dot(qv, sm4[krow + 4u * RS + cc]);
                s.z += dot(qv, sm4[krow + 8u * RS + cc]);
                s.w += dot(qv, sm4[krow + 12u * RS + cc]);
            }
            if (!single) { workgroupBarrier(); }
        }
        let tau = vec4<u32>(t0 + lane) + vec4<u32>(0u, 4u, 8u, 12u);
        let valid = (tau < vec4<u32>(lim)) & vec4<bool>(iq < p.q_len);
        let ms = select(vec4<f32>(NEG), s * p.scale, valid);
        sf[srow + lane] = ms.x;
        sf[srow + lane + 4u] = ms.y;
        sf[srow + lane + 8u] = ms.z;
        sf[srow + lane + 12u] = ms.w;
        if (!single) { stage_v(F_V, kv_base, ts, t0, F_BK, p.kv_len, dpass, pw, tid); }
        // (2) Scores and V(t0) are visible; every lane is done reading K(t0).
        workgroupBarrier();
        if (single && t0 + F_BK < kend) {
            stage_k(F_K, kv_base, ts, t0 + F_BK, F_BK, p.kv_len, 0u, p.hd, tid);
        }

        // Online softmax over the row's 16 scores; the 4 lanes of a row compute the same values
        // in the same order. Masked scores are NEG: exp underflows to exactly 0.
        var mt = NEG;
        for (var j = 0u; j < F_BK; j++) { mt = max(mt, sf[srow + j]); }
        let m_new = max(m_run, mt);
        let alpha = exp(m_run - m_new);
        acc0 *= alpha;
        acc1 *= alpha;
        acc2 *= alpha;
        acc3 *= alpha;
        var ls = 0.0;
        for (var j = 0u; j < F_BK; j++) {
            let pj = exp(sf[srow + j] - m_new);
            ls += pj;
            let vb = F_V + j * RS + lane;
            acc0 = fma(vec4<f32>(pj), sm4[vb], acc0);
            acc1 = fma(vec4<f32>(pj), sm4[vb + 4u], acc1);
            acc2 = fma(vec4<f32>(pj), sm4[vb + 8u], acc2);
            acc3 = fma(vec4<f32>(pj), sm4[vb + 12u], acc3);
        }
        l_run = l_run * alpha + ls;
        m_run = m_new;
    }

    if (iq < p.q_len) {
        let l = vec4<f32>(l_run);
        put_out(q_base + iq * ts + dpass, lane, pw, acc0 / l, acc1 / l, acc2 / l, acc3 / l);
        if (pc == 0u && lane == 0u) {
            lse[(b * p.heads + head) * p.q_len + iq] = m_run + log(l_run);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Backward, step 1: delta = rowwise dout · out, one invocation per (batch, query, head) row.

@compute @workgroup_size(256)
fn attn_bwd_d(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let row = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (row >= p.total) { return; }
    let head = row % p.heads;
    let bi = row / p.heads;
    let i = bi % p.q_len;
    let b = bi / p.q_len;
    let base = row * p.hd;
    // Summed as the dq and dk/dv kernels sum dP = dout·v (4-wide dots in dimension order): where a
    // row sees one key, out = v exactly, so dP − delta is exactly 0 as in exact arithmetic (and the
    // q/k gradients of that row are 0, not rounding noise that AdamW would amplify to a full step).
    var s = 0.0;
    for (var d = 0u; d < p.hd; d += 4u) {
        var a = vec4<f32>();
        var o = vec4<f32>();
        a.x = dout[base + d];
        o.x = o_saved[base + d];
        if (d + 1u < p.hd) { a.y = dout[base + d + 1u]; o.y = o_saved[base + d + 1u]; }
        if (d + 2u < p.hd) { a.z = dout[base + d + 2u]; o.z = o_saved[base + d + 2u]; }
        if (d + 3u < p.hd) { a.w = dout[base + d + 3u]; o.w = o_saved[base + d + 3u]; }
        s += dot(a, o);
    }
    delta[(b * p.heads + head) * p.q_len + i] = s;
}

// ------------------------------------------------------------------------------------------------
// Backward, dq. 64 invocations = 16 queries (qi) × 4 lanes; lane l scores keys t0 + l, t0 + l + 4.
// With one head-dim chunk the tile loop has two barriers: K is double-buffered (the dq update of
// tile t reads K(t) while K(t+1) and V(t+1) are staged).

const Q_BQ: u32 = 16u;
const Q_BK: u32 = 8u;
const Q_Q: u32 = 0u;        // sm4: Q chunk      [16 q][RS]
const Q_DO: u32 = 272u;     // sm4: dout chunk   [16 q][RS]
const Q_V: u32 = 544u;      // sm4: V chunk      [8 k][RS]
const Q_K: u32 = 680u;      // sm4: K chunk ×2   [2][8 k][RS]   (ends at 952)
const Q_DS: u32 = 0u;       // sf: dS            [16 q][9]      (ends at 144)

@compute @workgroup_size(64)
fn attn_bwd_dq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let p = params;
    let g = wid.y * nwg.x + wid.x;
    if (g >= p.total) { return; }
    let pc = g % p.nch;
    let r = g / p.nch;
    let blk = p.nblk - 1u - r % p.nblk;
    let bh = r / p.nblk;
    let head = bh % p.heads;
    let b = bh / p.heads;

    let qi = tid / 4u;
    let lane = tid % 4u;
    let q0 = blk * Q_BQ;
    let iq = q0 + qi;
    let ts = p.heads * p.hd;
    let q_base = (b * p.q_len * p.heads + head) * p.hd;
    let kv_base = (b * p.kv_stride * p.heads + head) * p.hd;
    let q_last = min(q0 + Q_BQ, p.q_len) - 1u;
    let kend = min(p.kv_len, p.q_pos0 + q_last + 1u);
    let single = p.nch == 1u;
    let dpass = pc * DC;
    let pw = min(DC, p.hd - dpass);
    let lim = min(p.kv_len, p.q_pos0 + iq + 1u);

    var lq = 0.0;
    var dl = 0.0;
    if (iq < p.q_len) {
        let si = (b * p.heads + head) * p.q_len + iq;
        lq = lse_saved[si];
        dl = delta_saved[si];
    }
    if (single) {
        stage_q(Q_Q, q_base, ts, q0, Q_BQ, p.q_len, 0u, p.hd, tid);
        stage_dout(Q_DO, q_base, ts, q0, Q_BQ, p.q_len, 0u, p.hd, tid);
        stage_k(Q_K, kv_base, ts, 0u, Q_BK, p.kv_len, 0u, p.hd, tid);
        stage_v(Q_V, kv_base, ts, 0u, Q_BK, p.kv_len, 0u, p.hd, tid);
    }

    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    let qrow = Q_Q + qi * RS;
    let orow = Q_DO + qi * RS;
    let vrow = Q_V + lane * RS;
    var kbuf = Q_K;                         // the K buffer of the current tile
    for (var t0 = 0u; t0 < kend; t0 += Q_BK) {
        // (1) K(t0) and V(t0) are staged; every lane is done with the previous dq update.
        workgroupBarrier();
        let krow = kbuf + lane * RS;
        var s = vec2<f32>();
        var dp = vec2<f32>();
        for (var c = 0u; c < p.nch; c++) {
            let c0 = c * DC;
            let cw = min(DC, p.hd - c0);
            if (!single) {
                stage_q(Q_Q, q_base, ts, q0, Q_BQ, p.q_len, c0, cw, tid);
                stage_dout(Q_DO, q_base, ts, q0, Q_BQ, p.q_len, c0, cw, tid);
                stage_k(kbuf, kv_base, ts, t0, Q_BK, p.kv_len, c0, cw, tid);
                stage_v(Q_V, kv_base, ts, t0, Q_BK, p.kv_len, c0, cw, tid);
                workgroupBarrier();
            }
            for (var cc = 0u; cc < (cw + 3u) / 4u; cc++) {
                let qv = sm4[qrow + cc];
                let ov = sm4[orow + cc];
                s.x += dot(qv, sm4[krow + cc]);
                s.y += dot(qv, sm4[krow + 4u * RS + cc]);
                dp.x += dot(ov, sm4[vrow + cc]);
                dp.y += dot(ov, sm4[vrow + 4u * RS + cc]);
            }
            if (!single) { workgroupBarrier(); }
        }
        let tau = vec2<u32>(t0 + lane) + vec2<u32>(0u, 4u);
        let valid = (tau < vec2<u32>(lim)) & vec2<bool>(iq < p.q_len);
        let pr = select(vec2<f32>(0.0), exp(s * p.scale - lq), valid);
        let ds = pr * (dp - dl);
        sf[Q_DS + qi * 9u + lane] = ds.x;
        sf[Q_DS + qi * 9u + lane + 4u] = ds.y;
        if (!single) { stage_k(kbuf, kv_base, ts, t0, Q_BK, p.kv_len, dpass, pw, tid); }
        // (2) dS is visible; every lane is done reading V(t0) and scoring against K(t0).
        workgroupBarrier();
        let knext = Q_K + Q_K + 136u - kbuf;
        if (single && t0 + Q_BK < kend) {
            stage_k(knext, kv_base, ts, t0 + Q_BK, Q_BK, p.kv_len, 0u, p.hd, tid);
            stage_v(Q_V, kv_base, ts, t0 + Q_BK, Q_BK, p.kv_len, 0u, p.hd, tid);
        }

        for (var j = 0u; j < Q_BK; j++) {
            let dsj = vec4<f32>(sf[Q_DS + qi * 9u + j]);
            let kb = kbuf + j * RS + lane;
            acc0 = fma(dsj, sm4[kb], acc0);
            acc1 = fma(dsj, sm4[kb + 4u], acc1);
            acc2 = fma(dsj, sm4[kb + 8u], acc2);
            acc3 = fma(dsj, sm4[kb + 12u], acc3);
        }
        if (single) { kbuf = knext; }
    }

    if (iq < p.q_len) {
        let sc = p.scale;
        put_dq(q_base + iq * ts + dpass, lane, pw, acc0 * sc, acc1 * sc, acc2 * sc, acc3 * sc);
    }
}

// ------------------------------------------------------------------------------------------------
// Backward, dk and dv. 64 invocations = 16 keys (kj) × 4 lanes; lane l scores queries t0 + l and
// t0 + l + 4 of the tile.

const KV_BK: u32 = 16u;
const KV_BQ: u32 = 8u;
const KV_K: u32 = 0u;       // sm4: K chunk    [16 k][RS]
const KV_V: u32 = 272u;     // sm4: V chunk    [16 k][RS]
const KV_Q: u32 = 544u;     // sm4: Q chunk    [8 q][RS]
const KV_DO: u32 = 680u;    // sm4: dout chunk [8 q][RS]   (ends at 816)
const KV_P: u32 = 0u;       // sf: P           [8 q][17]
const KV_DS: u32 = 136u;    // sf: dS          [8 q][17]   (ends at 272)

@compute @workgroup_size(64)
fn attn_bwd_dkdv(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
) {
    let p = params;
    let g = wid.y * nwg.x + wid.x;
    if (g >= p.total) { return; }
    let pc = g % p.nch;
    let r = g / p.nch;
    let blk = r % p.nblk;                   // the first key blocks see the most queries
    let bh = r / p.nblk;
    let head = bh % p.heads;
    let b = bh / p.heads;

    let kj = tid / 4u;
    let lane = tid % 4u;
    let k0 = blk * KV_BK;
    let tau = k0 + kj;
    let ts = p.heads * p.hd;
    let q_base = (b * p.q_len * p.heads + head) * p.hd;
    let kv_base = (b * p.kv_stride * p.heads + head) * p.hd;
    let l_base = (b * p.heads + head) * p.q_len;
    let single = p.nch == 1u;
    let dpass = pc * DC;
    let pw = min(DC, p.hd - dpass);

    // First query that sees key k0: i ≥ k0 − q_pos0. No query sees keys ≥ kv_len.
    var tstart = 0u;
    if (k0 > p.q_pos0) { tstart = ((k0 - p.q_pos0) / KV_BQ) * KV_BQ; }
    if (k0 >= p.kv_len) { tstart = p.q_len; }

    if (single) {
        stage_k(KV_K, kv_base, ts, k0, KV_BK, p.kv_len, 0u, p.hd, tid);
        stage_v(KV_V, kv_base, ts, k0, KV_BK, p.kv_len, 0u, p.hd, tid);
    }

    var dk0 = vec4<f32>();
    var dk1 = vec4<f32>();
    var dk2 = vec4<f32>();
    var dk3 = vec4<f32>();
    var dv0 = vec4<f32>();
    var dv1 = vec4<f32>();
    var dv2 = vec4<f32>();
    var dv3 = vec4<f32>();
    let krow = KV_K + kj * RS;
    let vrow = KV_V + kj * RS;
    let qrow = KV_Q + lane * RS;
    let orow = KV_DO + lane * RS;
    for (var t0 = tstart; t0 < p.q_len; t0 += KV_BQ) {
        var s = vec2<f32>();
        var dp = vec2<f32>();
        for (var c = 0u; c < p.nch; c++) {
            let c0 = c * DC;
            let cw = min(DC, p.hd - c0);
            if (!single) {
                stage_k(KV_K, kv_base, ts, k0, KV_BK, p.kv_len, c0, cw, tid);
                stage_v(KV_V, kv_base, ts, k0, KV_BK, p.kv_len, c0, cw, tid);
            }
            stage_q(KV_Q, q_base, ts, t0, KV_BQ, p.q_len, c0, cw, tid);
            stage_dout(KV_DO, q_base, ts, t0, KV_BQ, p.q_len, c0, cw, tid);
            workgroupBarrier();
            for (var cc = 0u; cc < (cw + 3u) / 4u; cc++) {
                let kv = sm4[krow + cc];
                let vv = sm4[vrow + cc];
                s.x += dot(sm4[qrow + cc], kv);
                s.y += dot(sm4[qrow + 4u * RS + cc], kv);
                dp.x += dot(sm4[orow + cc], vv);
                dp.y += dot(sm4[orow + 4u * RS + cc], vv);
            }
            if (!single) { workgroupBarrier(); }
        }
        let iq = vec2<u32>(t0 + lane) + vec2<u32>(0u, 4u);
        let valid = (iq < vec2<u32>(p.q_len)) & (vec2<u32>(tau) < vec2<u32>(p.kv_len))
            & (vec2<u32>(tau) <= vec2<u32>(p.q_pos0) + iq);
        var lq = vec2<f32>();
        var dl = vec2<f32>();
        if (iq.x < p.q_len) {
            lq.x = lse_saved[l_base + iq.x];
            dl.x = delta_saved[l_base + iq.x];
        }
        if (iq.y < p.q_len) {
            lq.y = lse_saved[l_base + iq.y];
            dl.y = delta_saved[l_base + iq.y];
        }
        let pr = select(vec2<f32>(0.0), exp(s * p.scale - lq), valid);
        let ds = pr * (dp - dl);
        sf[KV_P + lane * 17u + kj] = pr.x;
        sf[KV_P + (lane + 4u) * 17u + kj] = pr.y;
        sf[KV_DS + lane * 17u + kj] = ds.x;
        sf[KV_DS + (lane + 4u) * 17u + kj] = ds.y;
        if (!single) {
            stage_q(KV_Q, q_base, ts, t0, KV_BQ, p.q_len, dpass, pw, tid);
            stage_dout(KV_DO, q_base, ts, t0, KV_BQ, p.q_len, dpass, pw, tid);
        }
        workgroupBarrier();

        for (var j = 0u; j < KV_BQ; j++) {
            let pj = vec4<f32>(sf[KV_P + j * 17u + kj]);
            let dsj = vec4<f32>(sf[KV_DS + j * 17u + kj]);
            let qb = KV_Q + j * RS + lane;
            let ob = KV_DO + j * RS + lane;
            dv0 = fma(pj, sm4[ob], dv0);
            dv1 = fma(pj, sm4[ob + 4u], dv1);
            dv2 = fma(pj, sm4[ob + 8u], dv2);
            dv3 = fma(pj, sm4[ob + 12u], dv3);
            dk0 = fma(dsj, sm4[qb], dk0);
            dk1 = fma(dsj, sm4[qb + 4u], dk1);
            dk2 = fma(dsj, sm4[qb + 8u], dk2);
            dk3 = fma(dsj, sm4[qb + 12u], dk3);
        }
        workgroupBarrier();
    }

    if (tau < p.kv_stride) {
        let row = kv_base + tau * ts + dpass;
        let sc = p.scale;
        put_dk(row, lane, pw, dk0 * sc, dk1 * sc, dk2 * sc, dk3 * sc);
        put_dv(row, lane, pw, dv0, dv1, dv2, dv3);
    }
}

// ------------------------------------------------------------------------------------------------
// Forward for a few queries (decoding) on CPU adapters: one invocation per (batch, query, head)
// row, no workgroup memory and no barriers. The query row and the output accumulator live in
// registers as 16 vec4 (head dims ≤ 64; the launcher checks); keys are visited in order with an
// online softmax. Same outputs as attn_fwd (out and lse), summed in a fixed order.

@compute @workgroup_size(64)
fn attn_fwd_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let r = (wid.y * nwg.x + wid.x) * 64u + lid;
    if (r >= p.total) { return; }
    let head = r % p.heads;
    let bi = r / p.heads;
    let i = bi % p.q_len;
    let b = bi / p.q_len;
    let ts = p.heads * p.hd;
    let qrow = (b * p.q_len + i) * ts + head * p.hd;
    let kv_base = (b * p.kv_stride * p.heads + head) * p.hd;
    let lim = min(p.kv_len, p.q_pos0 + i + 1u);
    var qv: array<vec4<f32>, 16>;
    var acc: array<vec4<f32>, 16>;
    for (var c = 0u; c < 16u; c++) {
        var x = vec4<f32>();
        let d = 4u * c;
        if (d < p.hd) { x.x = q[qrow + d]; }
        if (d + 1u < p.hd) { x.y = q[qrow + d + 1u]; }
        if (d + 2u < p.hd) { x.z = q[qrow + d + 2u]; }
        if (d + 3u < p.hd) { x.w = q[qrow + d + 3u]; }
        qv[c] = x;
        acc[c] = vec4<f32>();
    }
    var m_run = NEG;
    var l_run = 0.0;
    for (var t = 0u; t < lim; t++) {
        let kr = kv_base + t * ts;
        var s = 0.0;
        for (var c = 0u; c < 16u; c++) {
            var x = vec4<f32>();
            let d = 4u * c;
            if (d < p.hd) { x.x = k[kr + d]; }
            if (d + 1u < p.hd) { x.y = k[kr + d + 1u]; }
            if (d + 2u < p.hd) { x.z = k[kr + d + 2u]; }
            if (d + 3u < p.hd) { x.w = k[kr + d + 3u]; }
            s += dot(qv[c], x);
        }
        let sc = s * p.scale;
        let m_new = max(m_run, sc);
        let alpha = exp(m_run - m_new);
        let pj = exp(sc - m_new);
        for (var c = 0u; c < 16u; c++) {
            var x = vec4<f32>();
            let d = 4u * c;
            if (d < p.hd) { x.x = v[kr + d]; }
            if (d + 1u < p.hd) { x.y = v[kr + d + 1u]; }
            if (d + 2u < p.hd) { x.z = v[kr + d + 2u]; }
            if (d + 3u < p.hd) { x.w = v[kr + d + 3u]; }
            acc[c] = fma(vec4<f32>(pj), x, acc[c] * alpha);
        }
        l_run = l_run * alpha + pj;
        m_run = m_new;
    }
    for (var c = 0u; c < 16u; c++) {
        let y = acc[c] / vec4<f32>(l_run);
        let d = 4u * c;
        if (d < p.hd) { out[qrow + d] = y.x; }
        if (d + 1u < p.hd) { out[qrow + d + 1u] = y.y; }
        if (d + 2u < p.hd) { out[qrow + d + 2u] = y.z; }
        if (d + 3u < p.hd) { out[qrow + d + 3u] = y.w; }
    }
    lse[(b * p.heads + head) * p.q_len + i] = m_run + log(l_run);
}

// attn_fwd_rows for a head dim that is a multiple of 4 (rows on vec4 boundaries): each row of q,
// k, v and out is hd/4 vec4 loads instead of hd scalar ones; the same sums in the same order.

// Where row r (= (batch, query, head)) of a decoding forward lives, in vec4 units.
struct Row4 {
    hq: u32,        // head dim / 4
    ts: u32,        // vec4s per token row of q / k / v
    qrow: u32,      // first vec4 of the query row (and of its output row)
    kv_base: u32,   // first vec4 of key / value 0 of the row's head
    lim: u32,       // keys the query sees
    li: u32,        // index into lse
}

fn row4_of(r: u32) -> Row4 {
    let p = params;
    let head = r % p.heads;
    let bi = r / p.heads;
    let i = bi % p.q_len;
    let b = bi / p.q_len;
    var o: Row4;
    o.hq = p.hd / 4u;
    o.ts = p.heads * o.hq;
    o.qrow = (b * p.q_len + i) * o.ts + head * o.hq;
    o.kv_base = (b * p.kv_stride * p.heads + head) * o.hq;
    o.lim = min(p.kv_len, p.q_pos0 + i + 1u);
    o.li = (b * p.heads + head) * p.q_len + i;
    return o;
}

// An online softmax over some of a row's keys: running max, Σ exp and the weighted values.
struct Part4 {
    m: f32,
    l: f32,
    acc: array<vec4<f32>, 16>,
}

// The row's keys t0, t0 + step, … in order (none when t0 ≥ lim: m = NEG, l = 0, acc = 0).
fn row4_keys(w: Row4, t0: u32, step: u32) -> Part4 {
    let p = params;
    var qv: array<vec4<f32>, 16>;
    var o: Part4;
    for (var c = 0u; c < 16u; c++) {
        if (c < w.hq) { qv[c] = q4[w.qrow + c]; }
        o.acc[c] = vec4<f32>();
    }
    o.m = NEG;
    o.l = 0.0;
    for (var t = t0; t < w.lim; t += step) {
        let kr = w.kv_base + t * w.ts;
        var s = 0.0;
        for (var c = 0u; c < 16u; c++) {
            if (c < w.hq) { s += dot(qv[c], k4[kr + c]); }
        }
        let sc = s * p.scale;
        let m_new = max(o.m, sc);
        let alpha = exp(o.m - m_new);
        let pj = exp(sc - m_new);
        for (var c = 0u; c < 16u; c++) {
            if (c < w.hq) { o.acc[c] = fma(vec4<f32>(pj), v4[kr + c], o.acc[c] * alpha); }
        }
        o.l = o.l * alpha + pj;
        o.m = m_new;
    }
    return o;
}

// out = acc / l and lse = m + log l of row w.
fn row4_store(w: Row4, acc_in: array<vec4<f32>, 16>, m: f32, l: f32) {
    var acc = acc_in;
    for (var c = 0u; c < 16u; c++) {
        if (c < w.hq) { out4[w.qrow + c] = acc[c] / vec4<f32>(l); }
    }
    lse[w.li] = m + log(l);
}

@compute @workgroup_size(64)
fn attn_fwd_rows4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let r = (wid.y * nwg.x + wid.x) * 64u + lid;
    if (r >= params.total) { return; }
    let w = row4_of(r);
    let o = row4_keys(w, 0u, 1u);
    row4_store(w, o.acc, o.m, o.l);
}

// Decoding with few rows (a handful of heads × ≤ 4 queries): attn_fwd_rows4 would run every row in
// one SIMD group on one worker thread. Here each row is a workgroup of SPLIT invocations that
// take its keys in turn (t ≡ lane mod SPLIT), each with its own online softmax (`row4_keys`), and
// lane 0 merges the SPLIT partial states in lane order through workgroup memory (one barrier).
const SPLIT: u32 = 8u;
var<workgroup> sp_m: array<f32, SPLIT>;
var<workgroup> sp_l: array<f32, SPLIT>;
var<workgroup> sp_acc: array<vec4<f32>, 128>;   // SPLIT × 16 vec4

@compute @workgroup_size(8)
fn attn_fwd_split4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let r = wid.y * nwg.x + wid.x;
    if (r >= params.total) { return; }      // the whole workgroup: uniform
    let w = row4_of(r);
    let o = row4_keys(w, lid, SPLIT);
    sp_m[lid] = o.m;
    sp_l[lid] = o.l;
    for (var c = 0u; c < 16u; c++) { sp_acc[lid * 16u + c] = o.acc[c]; }
    workgroupBarrier();
    if (lid != 0u) { return; }
    // Lane 0 holds key 0 (every query sees it), so the merged maximum is finite; a lane without
    // keys (m = NEG, l = 0, acc = 0) adds nothing.
    var mx = NEG;
    for (var j = 0u; j < SPLIT; j++) { mx = max(mx, sp_m[j]); }
    var l = 0.0;
    var acc: array<vec4<f32>, 16>;
    for (var j = 0u; j < SPLIT; j++) {
        let f = exp(sp_m[j] - mx);
        l += sp_l[j] * f;
        for (var c = 0u; c < 16u; c++) { acc[c] = fma(sp_acc[j * 16u + c], vec4<f32>(f), acc[c]); }
    }
    row4_store(w, acc, mx, l);
}
