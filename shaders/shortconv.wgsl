// The two DDL compressors a = Comp(X) (spec 3.3, 3.4) and their backward passes (spec 11.2, 11.3).
//
// Layouts (row-major, spec section 0): states X [N, d, m] with N = B·T tokens and the value index j
// fastest, so channel c = i·m + j; compressed outputs a [N, d].
//
// Token axis (ShortConv, K taps): kappa [d, m, K], tap K−1 multiplies the current token, tap s
// the token t − (K−1) + s of the same sequence (zero before position 0); rho [m].
//   a[n, i] = Σ_j rho_j Σ_s kappa[i, j, s] · X[n − (K−1−s), i, j]
// Value axis (CC, kc taps): kappa [d, kc], rho [m], pi = ⌊(kc−1)/2⌋.
//   a[n, i] = Σ_j Omega[i, j] · X[n, i, j],  Omega[i, j] = Σ_r rho_r · kappa[i, pi + j − r]
//   (terms with pi + j − r outside [0, kc) dropped). Omega is formed per invocation in registers.
//
// Parameter gradients are sums over all tokens. They are computed without atomics in a fixed
// order: each workgroup of a `*_partial` pass sums one chunk of `chunk` consecutive tokens
// sequentially into its own slot of a scratch buffer; a finishing pass adds the chunk partials
// in chunk order and sums the per-feature terms of drho with one workgroup per value channel (a
// fixed strided loop, then a fixed tree): `token_backward_finish` in one dispatch (or, on GPUs,
// the wide finish spread over the grid: `token_finish_groups`, `token_finish_elems`,
// `reduce_drho`), CC in two (`value_backward_finalize`, `reduce_drho`). Every pass indexes its grid as
// `wid.y * nwg.x + wid.x` so that any number of workgroups fits the per-dimension limit.

struct Params {
    n: u32,       // tokens B·T
    seq: u32,     // T (token index within its sequence = n % seq)
    d: u32,       // features
    m: u32,       // value channels
    k: u32,       // taps: K (token axis) or kc (value axis)
    chunk: u32,   // tokens per partial-sum chunk
    chunks: u32,  // number of chunks = ceil(n / chunk)
    pi: u32,      // value axis: left pad ⌊(kc−1)/2⌋
    rk: u32,      // reduce_drho: taps per (i, j) entry of q (K for the token axis, 1 for CC)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<XS>;
@group(0) @binding(2) var<storage, read> kappa: array<f32>;
@group(0) @binding(3) var<storage, read> rho: array<f32>;
@group(0) @binding(4) var<storage, read_write> a: array<f32>;
@group(0) @binding(5) var<storage, read> da: array<f32>;
@group(0) @binding(6) var<storage, read_write> dx: array<f32>;
@group(0) @binding(7) var<storage, read_write> dkappa: array<f32>;
@group(0) @binding(8) var<storage, read_write> drho: array<f32>;
// Scratch: per-chunk partial sums [chunks, m, d, K] (token) or [chunks, d·m] (CC).
@group(0) @binding(9) var<storage, read_write> partial: array<f32>;
// Scratch: per-(i, j[, s]) terms of drho, [d, m, rk].
@group(0) @binding(10) var<storage, read_write> q: array<f32>;
// Scratch (CC): dOmega [d, m].
@group(0) @binding(11) var<storage, read_write> domega: array<f32>;
// The windowed token-axis kernels see X and dx as rows of m (`Row` from the variant, m ≤ 4).
@group(0) @binding(12) var<storage, read> xr: array<XRow>;
@group(0) @binding(13) var<storage, read_write> dxr: array<Row>;
// token_backward_w_de: ∂e [N, d] = Σ_j of the finished state gradient (the
// replication's backward, for the last compressor call of a replicated-embedding model).
@group(0) @binding(14) var<storage, read_write> de: array<f32>;
// The K = 4 walk (`token_backward_w*`) sees kappa [d, m, 4] as one vec4 of taps per (i, j) and
// writes its chunk partials [chunks, m, d, 4] as one vec4 per (chunk, j, i).
@group(0) @binding(15) var<storage, read> kappa4: array<vec4<f32>>;
@group(0) @binding(16) var<storage, read_write> partial4: array<vec4<f32>>;
// The quad kernels (`token_forward_wq`, `token_backward_wq*`): a, ∂a and ∂e as vec4s of four
// consecutive features.
@group(0) @binding(17) var<storage, read_write> a4: array<vec4<f32>>;
@group(0) @binding(18) var<storage, read> da4: array<vec4<f32>>;
@group(0) @binding(19) var<storage, read_write> de4: array<vec4<f32>>;
// `value_backward_partial_wq`: the ∂Ω chunk partials [chunks, d, m] as rows of m.
@group(0) @binding(20) var<storage, read_write> partialr: array<Row>;
// `token_finish_groups`: sums of groups of chunk partials [groups, m, d, K].
@group(0) @binding(21) var<storage, read_write> gpart: array<f32>;

const WG: u32 = 256u;

var<workgroup> red: array<f32, WG>;

// Σ of `acc` over the workgroup's lanes in a fixed tree order. Every lane must call it (uniform
// control flow); every lane gets the total.
fn workgroup_sum(lid: u32, acc: f32) -> f32 {
    red[lid] = acc;
    workgroupBarrier();
    for (var w = WG / 2u; w > 0u; w >>= 1u) {
        if (lid < w) {
            red[lid] += red[lid + w];
        }
        workgroupBarrier();
    }
    return red[0];
}

fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// ---------------------------------------------------------------------------------------------
// Token axis

// One invocation per (n, i).
@compute @workgroup_size(256)
fn token_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let e = group_index(wid, nwg) * WG + lid;
    if (e >= p.n * p.d) { return; }
    let n = e / p.d;
    let i = e - n * p.d;
    let t = n % p.seq;
    let dm = p.d * p.m;
    // Taps s with t − (K−1) + s ≥ 0.
    let s0 = p.k - 1u - min(t, p.k - 1u);
    var acc = 0.0;
    for (var j = 0u; j < p.m; j++) {
        let c = i * p.m + j;
        var xt = 0.0;
        for (var s = s0; s < p.k; s++) {
            xt += kappa[c * p.k + s] * f32(x[(n + s + 1u - p.k) * dm + c]);
        }
        acc += rho[j] * xt;
    }
    a[e] = acc;
}

// dx[n, c] += rho_j Σ_s kappa[c, s] · da[n + K−1−s, i] (same sequence only). One invocation per
// (n, c).
@compute @workgroup_size(256)
fn token_backward_dx(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let dm = p.d * p.m;
    let e = group_index(wid, nwg) * WG + lid;
    if (e >= p.n * dm) { return; }
    let n = e / dm;
    let c = e - n * dm;
    let i = c / p.m;
    let j = c - i * p.m;
    let t = n % p.seq;
    // Taps s with t + K−1−s ≤ seq−1, i.e. s ≥ t + K − seq.
    let s0 = max(t + p.k, p.seq) - p.seq;
    var g = 0.0;
    for (var s = s0; s < p.k; s++) {
        g += kappa[c * p.k + s] * da[(n + p.k - 1u - s) * p.d + i];
    }
    dx[e] = dx[e] + rho[j] * g;
}

// partial[chunk, j, i, s] = Σ_{n in chunk} da[n, i] · X[n − (K−1−s), i, j] (the token-axis
// partials are laid out value channel first, so `token_backward_finish` reads each channel's
// contiguously), c = i·m + j. Workgroup = (channel tile,
// tap s, chunk), channel tile fastest; one invocation per channel, tokens in order.
@compute @workgroup_size(256)
fn token_backward_partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let dm = p.d * p.m;
    let tiles = (dm + WG - 1u) / WG;
    let g = group_index(wid, nwg);
    if (g >= tiles * p.k * p.chunks) { return; }
    let tile = g % tiles;
    let rest = g / tiles;
    let s = rest % p.k;
    let ch = rest / p.k;
    let c = tile * WG + lid;
    if (c >= dm) { return; }
    let i = c / p.m;
    let lag = p.k - 1u - s;
    let n0 = ch * p.chunk;
    let n1 = min(n0 + p.chunk, p.n);
    var t = n0 % p.seq;
    var acc = 0.0;
    for (var n = n0; n < n1; n++) {
        if (t >= lag) {
            acc += da[n * p.d + i] * f32(x[(n - lag) * dm + c]);
        }
        t += 1u;
        if (t == p.seq) { t = 0u; }
    }
    partial[(ch * dm + (c - i * p.m) * p.d + i) * p.k + s] = acc;
}

// Per value channel j (one workgroup each), over the pairs (i, s) in the order e = lid,
// lid + WG, … of e = i·K + s: P[c, s] = Σ_chunks partial[chunk, j, i, s] (chunk order; channel
// j's partials are contiguous) with c = i·m + j;
// dkappa[c, s] += rho_j · P; drho[j] += Σ_{i,s} kappa[c, s] · P, each lane's terms in order,
// then a fixed tree over the lanes (the order `reduce_drho` adds the same terms in for CC).
@compute @workgroup_size(256)
fn token_backward_finish(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let j = group_index(wid, nwg);
    if (j >= p.m) { return; }
    let dmk = p.d * p.m * p.k;
    let rj = rho[j];
    var acc = 0.0;
    for (var e = lid; e < p.d * p.k; e += WG) {
        let i = e / p.k;
        let f = (i * p.m + j) * p.k + (e - i * p.k);
        let pj = j * p.d * p.k + e;
        var sum = 0.0;
        for (var ch = 0u; ch < p.chunks; ch++) {
            sum += partial[ch * dmk + pj];
        }
        dkappa[f] = dkappa[f] + rj * sum;
        acc += kappa[f] * sum;
    }
    let total_j = workgroup_sum(lid, acc);
    if (lid == 0u) {
        drho[j] = drho[j] + total_j;
    }
}

// The wide finish (form `conv_finish_wide`, GPUs): the same sums as `token_backward_finish`
// spread over the whole grid instead of one workgroup per value channel (which kept m of a GPU's
// multiprocessors busy, each lane adding thousands of partials one after another). Up to three
// dispatches, each a fixed order:
//   `token_finish_groups`: one invocation per (group g, element u) of the flat [m, d, K] index
//     u = j·d·K + i·K + s: gpart[g, u] = Σ_{chunk rows r of group g} partial[r, u], rows in order
//     (groups of `chunk` rows; `chunks` rows in all). Skipped when the rows are few (one group).
//   `token_finish_elems`: one invocation per element u: P = Σ_r partial[r, u] over the `chunks`
//     rows of its input (the group sums, or the chunk partials themselves), in order;
//     dkappa[f] += ρ_j·P and q[f] = κ[f]·P with f = (i·m + j)·K + s.
//   `reduce_drho` (rk = K) adds q in the order `token_backward_finish` adds its terms.
@compute @workgroup_size(256)
fn token_finish_groups(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let mdk = p.d * p.m * p.k;
    let e = group_index(wid, nwg) * WG + lid;
    let groups = (p.chunks + p.chunk - 1u) / p.chunk;
    if (e >= groups * mdk) { return; }
    let g = e / mdk;
    let u = e - g * mdk;
    let r0 = g * p.chunk;
    let r1 = min(r0 + p.chunk, p.chunks);
    var sum = 0.0;
    for (var r = r0; r < r1; r++) {
        sum += partial[r * mdk + u];
    }
    gpart[e] = sum;
}

@compute @workgroup_size(256)
fn token_finish_elems(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let dk = p.d * p.k;
    let mdk = dk * p.m;
    let u = group_index(wid, nwg) * WG + lid;
    if (u >= mdk) { return; }
    let j = u / dk;
    let e = u - j * dk;
    let i = e / p.k;
    let f = (i * p.m + j) * p.k + (e - i * p.k);
    var sum = 0.0;
    for (var r = 0u; r < p.chunks; r++) {
        sum += partial[r * mdk + u];
    }
    dkappa[f] = dkappa[f] + rho[j] * sum;
    q[f] = kappa[f] * sum;
}

// drho[j] += Σ_i Σ_{s < rk} q[i, j, s]. One workgroup per j.
@compute @workgroup_size(256)
fn reduce_drho(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let j = group_index(wid, nwg);
    if (j >= p.m) { return; }
    let row = p.m * p.rk;
    let total = p.d * p.rk;
    var acc = 0.0;
    for (var e = lid; e < total; e += WG) {
        let i = e / p.rk;
        let s = e - i * p.rk;
        acc += q[i * row + j * p.rk + s];
    }
    let total_j = workgroup_sum(lid, acc);
    if (lid == 0u) {
        drho[j] = drho[j] + total_j;
    }
}

// ---------------------------------------------------------------------------------------------
// Token axis, windowed (m ≤ 4 = MM of the variant, K ≤ KW): one invocation per (feature i, chunk
// of tokens) walks its chunk in order, keeping the last KW token states of feature i as vec4s
// (value j in component j) in a sliding window, so X and ∂a are read once per token instead of
// once per tap. Window slot KW−1 is the current token, slot KW−1−lag the token `lag` back (zero
// before the sequence start); slots with lag ≥ K are skipped. Every loop over slots has a
// constant trip count (the K bound is a uniform branch inside), so the windows live in
// registers: with K as the loop bound they went to the stack and the forward took 2.5× longer.
// Invocation e: i = e % d, chunk = e / d (features fastest: neighbouring invocations read
// neighbouring memory).

// KW (window slots, 8 or 4 ≥ K) and KFIX (K when compiled in, else 0) come from the variant.

// K of the windowed loops: a constant in the K = 4 variant, so the per-slot tests fold away.
fn taps_k() -> u32 {
    if (KFIX > 0u) { return KFIX; }
    return params.k;
}

// X[n, i, 0..m) as a vec4 (zeros beyond m): one row load.
fn load_x4(n: u32, i: u32) -> vec4<f32> {
    return row4(xin(xr[n * params.d + i]));
}

// kappa[i, 0..m, tap] as a vec4 (zeros beyond m).
fn load_kappa4(i: u32, tap: u32) -> vec4<f32> {
    let p = params;
    let b = i * p.m * p.k + tap;
    var v = vec4<f32>(kappa[b], 0.0, 0.0, 0.0);
    if (p.m > 1u) { v.y = kappa[b + p.k]; }
    if (p.m > 2u) { v.z = kappa[b + 2u * p.k]; }
    if (p.m > 3u) { v.w = kappa[b + 3u * p.k]; }
    return v;
}

fn load_rho4() -> vec4<f32> {
    let p = params;
    var v = vec4<f32>(rho[0], 0.0, 0.0, 0.0);
    if (p.m > 1u) { v.y = rho[1]; }
    if (p.m > 2u) { v.z = rho[2]; }
    if (p.m > 3u) { v.w = rho[3]; }
    return v;
}

// taps[lag] = ρ ⊙ κ[i, ·, K−1−lag], the weight of the state `lag` tokens back (lag < K).
fn taps4(i: u32) -> array<vec4<f32>, KW> {
    let p = params;
    let r4 = load_rho4();
    var taps: array<vec4<f32>, KW>;
    for (var lag = 0u; lag < KW; lag++) {
        if (lag < p.k) { taps[lag] = r4 * load_kappa4(i, p.k - 1u - lag); }
    }
    return taps;
}

// The window of feature i just before token n0 (tokens n0 − lag of the same sequence, lag < K).
fn preload_x4(n0: u32, i: u32) -> array<vec4<f32>, KW> {
    let p = params;
    let t0 = n0 % p.seq;
    var w: array<vec4<f32>, KW>;
    // The walk shifts the window before it loads token n0: the token `lag` back goes to slot
    // KW − lag now, to land in slot KW − 1 − lag.
    for (var s = 1u; s < KW; s++) {
        let lag = KW - s;
        if (lag < p.k && lag <= t0) { w[s] = load_x4(n0 - lag, i); }
    }
    return w;
}

// Moves feature i's window to token n, the t-th of its sequence: cleared at a sequence start,
// shifted one slot, X[n] loaded into the last slot.
fn window_step(w: ptr<function, array<vec4<f32>, KW>>, n: u32, i: u32, t: u32) {
    window_push(w, load_x4(n, i), t);
}

// `window_step` with the token's state row `xv` already loaded.
fn window_push(w: ptr<function, array<vec4<f32>, KW>>, xv: vec4<f32>, t: u32) {
    if (t == 0u) {
        for (var s = 0u; s < KW; s++) { (*w)[s] = vec4<f32>(); }
    }
    for (var s = 0u; s < KW - 1u; s++) { (*w)[s] = (*w)[s + 1u]; }
    (*w)[KW - 1u] = xv;
}

@compute @workgroup_size(256)
fn token_forward_w(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    forward_walk(wid, nwg, lid, false);
}

// The forward walk of feature i over one chunk of tokens; `batched`: CB tokens' rows loaded
// before their outputs are computed and stored (`token_forward_wb`, see CB).
fn forward_walk(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, batched: bool) {
    let p = params;
    let e = group_index(wid, nwg) * WG + lid;
    if (e >= p.d * p.chunks) { return; }
    let i = e % p.d;
    let n0 = (e / p.d) * p.chunk;
    let n1 = min(n0 + p.chunk, p.n);
    var kw = taps4(i);
    var w = preload_x4(n0, i);
    var t = n0 % p.seq;
    if (batched) {
        for (var nb = n0; nb < n1; nb += CB) {
            var xs: array<vec4<f32>, CB>;
            for (var q = 0u; q < CB; q++) { xs[q] = load_x4(min(nb + q, n1 - 1u), i); }
            for (var q = 0u; q < CB; q++) {
                if (nb + q < n1) {
                    window_push(&w, xs[q], t);
                    a[(nb + q) * p.d + i] = window_out(kw, w);
                    t += 1u;
                    if (t == p.seq) { t = 0u; }
                }
            }
        }
        return;
    }
    for (var n = n0; n < n1; n++) {
        window_step(&w, n, i, t);
        a[n * p.d + i] = window_out(kw, w);
        t += 1u;
        if (t == p.seq) { t = 0u; }
    }
}

// Tokens whose loads the batched walks (`token_forward_wb`, `token_backward_wb*`: the device's
// `conv_batch` form) issue together. In the plain walks each token's loads follow the previous
// token's store, and a compiler that cannot prove two bindings distinct (Vulkan lets them alias)
// must keep that order, so an invocation has one token's loads in flight at a time; the batched
// walks load CB tokens' rows (clamped to the chunk's last token) before computing and storing
// them. The same arithmetic in the same order: the same bits as the plain walks.
const CB: u32 = 4u;

// `token_forward_w`, batched.
@compute @workgroup_size(256)
fn token_forward_wb(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    forward_walk(wid, nwg, lid, true);
}

// One output of the forward walks: Σ over the window's slots of taps ⊙ states, then over j.
fn window_out(kw: array<vec4<f32>, KW>, w: array<vec4<f32>, KW>) -> f32 {
    var taps = kw;
    var win = w;
    var acc = vec4<f32>();
    for (var s = 0u; s < KW; s++) {
        if (s + taps_k() >= KW) { acc = fma(taps[KW - 1u - s], win[s], acc); }
    }
    return acc.x + acc.y + acc.z + acc.w;
}

// `token_forward_w` in quads (CPU adapters, d a multiple of 4; see `backward_walk_q`): one
// invocation per four consecutive features and chunk, a[n, i0..i0+4) stored as one vec4.
@compute @workgroup_size(64)
fn token_forward_wq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let dq = p.d / 4u;
    let e = quad_index(wid, nwg, lid);
    if (e >= dq * p.chunks) { return; }
    let iq = e % dq;
    let i0 = 4u * iq;
    let n0 = (e / dq) * p.chunk;
    let n1 = min(n0 + p.chunk, p.n);
    let kw0 = taps4(i0);
    let kw1 = taps4(i0 + 1u);
    let kw2 = taps4(i0 + 2u);
    let kw3 = taps4(i0 + 3u);
    var w0 = preload_x4(n0, i0);
    var w1 = preload_x4(n0, i0 + 1u);
    var w2 = preload_x4(n0, i0 + 2u);
    var w3 = preload_x4(n0, i0 + 3u);
    var t = n0 % p.seq;
    for (var n = n0; n < n1; n++) {
        window_step(&w0, n, i0, t);
        window_step(&w1, n, i0 + 1u, t);
        window_step(&w2, n, i0 + 2u, t);
        window_step(&w3, n, i0 + 3u, t);
        a4[n * dq + iq] = vec4<f32>(window_out(kw0, w0), window_out(kw1, w1), window_out(kw2, w2), window_out(kw3, w3));
        t += 1u;
        if (t == p.seq) { t = 0u; }
    }
}

// dx[n, i, j] += Σ_lead ρ_j κ[i, j, K−1−lead] · ∂a[n + lead, i] (same sequence), walking the chunk
// backwards with a window of the next K values of ∂a (slot lead).
@compute @workgroup_size(256)
fn token_backward_dx_w(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let e = group_index(wid, nwg) * WG + lid;
    if (e >= p.d * p.chunks) { return; }
    let i = e % p.d;
    let n0 = (e / p.d) * p.chunk;
    let n1 = min(n0 + p.chunk, p.n);
    var kw = taps4(i);
    // Window just after the chunk: ∂a at n1 − 1 + lead for 1 ≤ lead < K, same sequence only, one
    // slot early (the walk shifts before it loads).
    let tl = (n1 - 1u) % p.seq;
    var w: array<f32, KW>;
    for (var lead = 1u; lead < KW; lead++) {
        if (lead < p.k && tl + lead < p.seq) { w[lead - 1u] = da[(n1 - 1u + lead) * p.d + i]; }
    }
    var t = tl;
    for (var n = n1; n > n0; n--) {
        let nn = n - 1u;
        // The last token of a sequence: nothing after it counts.
        if (t == p.seq - 1u) {
            for (var s = 0u; s < KW; s++) { w[s] = 0.0; }
        }
        for (var s = KW - 1u; s > 0u; s--) { w[s] = w[s - 1u]; }
        w[0] = da[nn * p.d + i];
        var g = vec4<f32>();
        for (var lead = 0u; lead < KW; lead++) {
            if (lead < taps_k()) { g = fma(kw[lead], vec4<f32>(w[lead]), g); }
        }
        let b = nn * p.d + i;
        dxr[b] = from4(row4(dxr[b]) + g);
        if (t == 0u) { t = p.seq; }
        t -= 1u;
    }
}

// partial[chunk, j, i, K−1−lag] = v[j] for the value channels j < m: one chunk's sums of the
// tap `lag` tokens back.
fn store_partial(ch: u32, i: u32, lag: u32, v: vec4<f32>) {
    let p = params;
    let b = (ch * p.d * p.m + i) * p.k + (p.k - 1u - lag);
    let js = p.d * p.k;
    partial[b] = v.x;
    if (p.m > 1u) { partial[b + js] = v.y; }
    if (p.m > 2u) { partial[b + 2u * js] = v.z; }
    if (p.m > 3u) { partial[b + 3u * js] = v.w; }
}

// partial[chunk, j, i, s] = Σ_{n in chunk} ∂a[n, i] · X[n − (K−1−s), i, j]: the same sums as
// `token_backward_partial`, every tap from one pass over the chunk.
@compute @workgroup_size(256)
fn token_backward_partial_w(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let e = group_index(wid, nwg) * WG + lid;
    if (e >= p.d * p.chunks) { return; }
    let i = e % p.d;
    let ch = e / p.d;
    let n0 = ch * p.chunk;
    let n1 = min(n0 + p.chunk, p.n);
    var w = preload_x4(n0, i);
    var acc: array<vec4<f32>, KW>;
    var t = n0 % p.seq;
    for (var n = n0; n < n1; n++) {
        window_step(&w, n, i, t);
        let g = vec4<f32>(da[n * p.d + i]);
        for (var s = 0u; s < KW; s++) {
            if (s + taps_k() >= KW) { acc[s] = fma(g, w[s], acc[s]); }
        }
        t += 1u;
        if (t == p.seq) { t = 0u; }
    }
    for (var s = 0u; s < KW; s++) {
        let lag = KW - 1u - s;
        if (lag < p.k) { store_partial(ch, i, lag, acc[s]); }
    }
}

// Both backward sums in one forward walk, for the K = KW variant (KFIX = KW): with the ∂a
// window dw[q] = ∂a[n + q] (counted only where token n + q lies in token n's sequence),
//   ∂X[n] += Σ_lead ρ ⊙ κ[i, ·, K−1−lead] · dw[lead]   (the sums of `token_backward_dx_w`),
//   acc[lag] += dw[lag] · X[n]                          (= Σ ∂a[n′]·X[n′ − lag] over n′ = n + lag),
// so each token needs one X row, one ∂a value (K−1 ahead) and the ∂X row, and no X window.
// A chunk's partials hold the terms whose X token is in the chunk (those of `partial_w` hold the
// terms whose ∂a token is); the sums over all chunks are the same terms.
//
// Where the state gradient goes is a constant of each entry point (`mode`: 0 adds the walk's
// terms into ∂X, 1 writes Σ_j of ∂X plus them into `de`, 2 writes them into ∂X), and the window
// holds ∂a as stored (index clamped to the last token) with the sequence test applied to the
// value: no load or store in the loop is conditional. (llvmpipe runs a conditional load or store
// as a loop over the SIMD lanes whether or not any lane takes it.)
@compute @workgroup_size(256)
fn token_backward_w(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_walk(wid, nwg, lid, 0u, WALK_PLAIN);
}

@compute @workgroup_size(256)
fn token_backward_w_de(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_walk(wid, nwg, lid, 1u, WALK_PLAIN);
}

@compute @workgroup_size(256)
fn token_backward_w_write(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_walk(wid, nwg, lid, 2u, WALK_PLAIN);
}

// `taps4` for K = 4 (KW = 4): κ[i, j, 0..4) loaded as one vec4 per value channel; the same
// products.
fn taps4_q(i: u32) -> array<vec4<f32>, KW> {
    var r4 = vec4<f32>();
    var rows: array<vec4<f32>, 4>;
    for (var j = 0u; j < MM; j++) {
        r4[j] = rho[j];
        rows[j] = kappa4[i * MM + j];
    }
    var taps: array<vec4<f32>, KW>;
    for (var lag = 0u; lag < 4u; lag++) {
        let s = 3u - lag;
        taps[lag] = r4 * vec4<f32>(rows[0][s], rows[1][s], rows[2][s], rows[3][s]);
    }
    return taps;
}

// Token n of a backward walk (feature i, the t-th token of its sequence): shifts the ∂a window to
// tokens n..n+K−1, adds the token's terms to the chunk sums `acc` and puts its state gradient
// where `mode` says.
fn walk_token(n: u32, i: u32, t: u32, kw: array<vec4<f32>, KW>, dw: ptr<function, array<f32, KW>>,
              acc: ptr<function, array<vec4<f32>, KW>>, mode: u32) {
    let p = params;
    var taps = kw;
    for (var q = 0u; q + 1u < KW; q++) { (*dw)[q] = (*dw)[q + 1u]; }
    (*dw)[KW - 1u] = da[min(n + KW - 1u, p.n - 1u) * p.d + i];
    let b = n * p.d + i;
    var row = walk_feature(taps, *dw, t, row4(xin(xr[b])), acc);
    if (mode != 2u) { row += row4(dxr[b]); }
    walk_put(b, row, mode);
}

// A token's finished state-gradient row `row` (element b) where `mode` says: Σ_j into ∂e (1),
// else into ∂X.
fn walk_put(b: u32, row: vec4<f32>, mode: u32) {
    if (mode == 1u) {
        de[b] = sum_j(row);
    } else {
        dxr[b] = from4(row);
    }
}

// The walk's layouts (`backward_walk`'s `form`): plain, a workgroup barrier after every token
// step (`conv_sweep`), and batched loads (`conv_batch`, see CB).
const WALK_PLAIN: u32 = 0u;
const WALK_SWEEP: u32 = 1u;
const WALK_BATCH: u32 = 2u;

// One feature's terms of a token in the backward walks, from its ∂a window dw (slot lead = token
// n + lead) and its state row xv: adds dw[lead]·xv to the chunk sums acc[lead] and returns the
// walk's ∂X terms Σ_lead taps[lead]·dw[lead].
fn walk_feature(kw: array<vec4<f32>, KW>, dw: array<f32, KW>, t: u32, xv: vec4<f32>,
                acc: ptr<function, array<vec4<f32>, KW>>) -> vec4<f32> {
    var taps = kw;
    var win = dw;
    var gx = vec4<f32>();
    for (var lead = 0u; lead < KW; lead++) {
        // Token n + lead counts while it is in token n's sequence (sequences are whole, so
        // it is then also below N).
        let g = vec4<f32>(select(0.0, win[lead], t + lead < params.seq));
        gx = fma(taps[lead], g, gx);
        (*acc)[lead] = fma(g, xv, (*acc)[lead]);
    }
    return gx;
}

// Σ_j of a state-gradient row in the order of `replicate_backward4` (zeros beyond m add nothing).
fn sum_j(row: vec4<f32>) -> f32 {
    var sj = 0.0;
    sj += row.x;
    sj += row.y;
    sj += row.z;
    sj += row.w;
    return sj;
}

// partial[ch, j, i, K−1−lag] = acc[lag][j]: one vec4 per value channel.
fn walk_store(ch: u32, i: u32, acc: array<vec4<f32>, KW>) {
    var a = acc;
    for (var j = 0u; j < MM; j++) {
        partial4[(ch * MM + j) * params.d + i] = vec4<f32>(a[3][j], a[2][j], a[1][j], a[0][j]);
    }
}

// `sweep` (the `_s` entry points, CPU adapters without quads): a workgroup barrier after every
// token step, so that the workgroup's SIMD batches (on llvmpipe each runs its invocations' whole
// loop before the next batch starts, unless a barrier switches them) take the step's rows one
// after the other: the rows of a token are read in memory order instead of each batch striding
// through the chunk's tokens 16·d·m bytes apart (a cache miss per row and array; the walk spent
// half its time on the first load of a row). Every invocation runs every step (a barrier needs
// uniform control flow): invocations past the last feature and chunk, and steps past the end of
// a short last chunk, do nothing (and wait). The same sums in the same order either way.
fn backward_walk(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, mode: u32, form: u32) {
    let p = params;
    let e0 = group_index(wid, nwg) * WG + lid;
    let live = e0 < p.d * p.chunks;
    let e = min(e0, p.d * p.chunks - 1u);
    let i = e % p.d;
    let ch = e / p.d;
    let n0 = ch * p.chunk;
    let n1 = min(n0 + p.chunk, p.n);
    let kw = taps4_q(i);
    var acc: array<vec4<f32>, KW>;
    // After the shift at token n, dw[q] = ∂a[min(n + q, N − 1)]; before the first shift,
    // dw[q + 1] holds ∂a[n0 + q].
    var dw: array<f32, KW>;
    for (var q = 0u; q + 1u < KW; q++) { dw[q + 1u] = da[min(n0 + q, p.n - 1u) * p.d + i]; }
    var t = n0 % p.seq;
    if (form == WALK_BATCH) {
        // ∂a, X and (unless written) ∂X of CB tokens loaded, then the tokens' terms in order, as
        // `walk_token` computes them.
        for (var s0 = 0u; s0 < p.chunk; s0 += CB) {
            var das: array<f32, CB>;
            var xs: array<vec4<f32>, CB>;
            var gs: array<vec4<f32>, CB>;
            for (var q = 0u; q < CB; q++) {
                let n = min(n0 + s0 + q, n1 - 1u);
                das[q] = da[min(n + KW - 1u, p.n - 1u) * p.d + i];
                xs[q] = row4(xin(xr[n * p.d + i]));
                if (mode != 2u) { gs[q] = row4(dxr[n * p.d + i]); }
            }
            for (var q = 0u; q < CB; q++) {
                let n = n0 + s0 + q;
                if (live && n < n1) {
                    for (var r = 0u; r + 1u < KW; r++) { dw[r] = dw[r + 1u]; }
                    dw[KW - 1u] = das[q];
                    var row = walk_feature(kw, dw, t, xs[q], &acc);
                    if (mode != 2u) { row += gs[q]; }
                    walk_put(n * p.d + i, row, mode);
                    t += 1u;
                    if (t == p.seq) { t = 0u; }
                }
            }
        }
    } else {
        for (var step = 0u; step < p.chunk; step++) {
            let n = n0 + step;
            if (live && n < n1) {
                walk_token(n, i, t, kw, &dw, &acc, mode);
                t += 1u;
                if (t == p.seq) { t = 0u; }
            }
            if (form == WALK_SWEEP) { workgroupBarrier(); }
        }
    }
    if (live) { walk_store(ch, i, acc); }
}

@compute @workgroup_size(256)
fn token_backward_wb(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_walk(wid, nwg, lid, 0u, WALK_BATCH);
}

@compute @workgroup_size(256)
fn token_backward_wb_de(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_walk(wid, nwg, lid, 1u, WALK_BATCH);
}

@compute @workgroup_size(256)
fn token_backward_wb_write(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_walk(wid, nwg, lid, 2u, WALK_BATCH);
}

@compute @workgroup_size(256)
fn token_backward_w_s(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_walk(wid, nwg, lid, 0u, WALK_SWEEP);
}

@compute @workgroup_size(256)
fn token_backward_w_de_s(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_walk(wid, nwg, lid, 1u, WALK_SWEEP);
}

@compute @workgroup_size(256)
fn token_backward_w_write_s(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_walk(wid, nwg, lid, 2u, WALK_SWEEP);
}

// The one-walk backward in quads (CPU adapters, d a multiple of 4: the `…_wq` entry points, and
// `token_forward_wq`): one invocation per four consecutive features i0..i0+4 and chunk, ∂a and ∂e
// moved as vec4s of the four features, the state rows one per feature as before; the same sums in
// the same order as `backward_walk`, so the same bits. On llvmpipe every SIMD batch runs its whole
// walk before the next batch starts, striding through the chunk's tokens one state row
// (d·m·4 bytes) apart: with one feature per invocation a batch read 8 features' rows (128 bytes)
// per token step and missed the cache on nearly every row; with quads it reads 32 features'
// rows (512 bytes) per step, and ∂a, ∂e take one memory operation per four features. Probe at
// tiny's shape: 3.0–3.3 ms per walk → 1.2–1.4 ms (docs/PERF.md, session 12). Workgroups of 64.
const WGQ: u32 = 64u;

fn quad_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WGQ + lid;
}

fn backward_walk_q(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, mode: u32) {
    let p = params;
    let dq = p.d / 4u;
    let e = quad_index(wid, nwg, lid);
    if (e >= dq * p.chunks) { return; }
    let iq = e % dq;
    let i0 = 4u * iq;
    let ch = e / dq;
    let n0 = ch * p.chunk;
    let n1 = min(n0 + p.chunk, p.n);
    let kw0 = taps4_q(i0);
    let kw1 = taps4_q(i0 + 1u);
    let kw2 = taps4_q(i0 + 2u);
    let kw3 = taps4_q(i0 + 3u);
    var acc0: array<vec4<f32>, KW>;
    var acc1: array<vec4<f32>, KW>;
    var acc2: array<vec4<f32>, KW>;
    var acc3: array<vec4<f32>, KW>;
    // dw[q] = the ∂a quad of token min(n + q, N − 1) after the shift at token n.
    var dw: array<vec4<f32>, KW>;
    for (var q = 0u; q + 1u < KW; q++) { dw[q + 1u] = da4[min(n0 + q, p.n - 1u) * dq + iq]; }
    var t = n0 % p.seq;
    for (var n = n0; n < n1; n++) {
        for (var q = 0u; q + 1u < KW; q++) { dw[q] = dw[q + 1u]; }
        dw[KW - 1u] = da4[min(n + KW - 1u, p.n - 1u) * dq + iq];
        // Each feature's ∂a window.
        var f0: array<f32, KW>;
        var f1: array<f32, KW>;
        var f2: array<f32, KW>;
        var f3: array<f32, KW>;
        for (var q = 0u; q < KW; q++) {
            f0[q] = dw[q].x;
            f1[q] = dw[q].y;
            f2[q] = dw[q].z;
            f3[q] = dw[q].w;
        }
        let b = n * p.d + i0;
        var r0 = walk_feature(kw0, f0, t, row4(xin(xr[b])), &acc0);
        var r1 = walk_feature(kw1, f1, t, row4(xin(xr[b + 1u])), &acc1);
        var r2 = walk_feature(kw2, f2, t, row4(xin(xr[b + 2u])), &acc2);
        var r3 = walk_feature(kw3, f3, t, row4(xin(xr[b + 3u])), &acc3);
        if (mode != 2u) {
            r0 += row4(dxr[b]);
            r1 += row4(dxr[b + 1u]);
            r2 += row4(dxr[b + 2u]);
            r3 += row4(dxr[b + 3u]);
        }
        if (mode == 1u) {
            de4[n * dq + iq] = vec4<f32>(sum_j(r0), sum_j(r1), sum_j(r2), sum_j(r3));
        } else {
            dxr[b] = from4(r0);
            dxr[b + 1u] = from4(r1);
            dxr[b + 2u] = from4(r2);
            dxr[b + 3u] = from4(r3);
        }
        t += 1u;
        if (t == p.seq) { t = 0u; }
    }
    walk_store(ch, i0, acc0);
    walk_store(ch, i0 + 1u, acc1);
    walk_store(ch, i0 + 2u, acc2);
    walk_store(ch, i0 + 3u, acc3);
}

@compute @workgroup_size(64)
fn token_backward_wq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_walk_q(wid, nwg, lid, 0u);
}

@compute @workgroup_size(64)
fn token_backward_wq_de(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_walk_q(wid, nwg, lid, 1u);
}

@compute @workgroup_size(64)
fn token_backward_wq_write(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_walk_q(wid, nwg, lid, 2u);
}

// ---------------------------------------------------------------------------------------------
// Value axis (CC)
//
// Every product that feeds a sum here is an explicit fma: the plain kernels and their quad forms
// must give the same bits, and a driver may contract `a * b + c` wherever it likes (without
// wgpu's index clamps NVIDIA did so in one form and not the other: 1 ulp, GPU run 4).

// Omega[i, j] = Σ_r rho_r · kappa[i, pi + j − r], only r with 0 ≤ pi + j − r < kc.
fn omega(i: u32, j: u32) -> f32 {
    let p = params;
    let top = p.pi + j;                       // kappa index for r = 0
    let r0 = max(top + 1u, p.k) - p.k;        // smallest r with top − r < kc
    let r1 = min(p.m, top + 1u);              // one past the largest r with top − r ≥ 0
    var w = 0.0;
    for (var r = r0; r < r1; r++) {
        w = fma(rho[r], kappa[i * p.k + top - r], w);
    }
    return w;
}

// One invocation per (n, i).
@compute @workgroup_size(256)
fn value_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let e = group_index(wid, nwg) * WG + lid;
    if (e >= p.n * p.d) { return; }
    let i = e % p.d;
    let base = e * p.m;                       // = n·d·m + i·m
    var acc = 0.0;
    for (var j = 0u; j < p.m; j++) {
        acc = fma(omega(i, j), f32(x[base + j]), acc);
    }
    a[e] = acc;
}

// Ω[i, 0..m) as a vec4 (zeros beyond m; the `mJ` variants, m ≤ 4).
fn omega4(i: u32) -> vec4<f32> {
    var w = vec4<f32>();
    for (var j = 0u; j < MM; j++) { w[j] = omega(i, j); }
    return w;
}

// a = Σ_j Ω[i, j]·X[n, i, j] in `value_forward`'s order.
fn value_out(om: vec4<f32>, xv: vec4<f32>) -> f32 {
    var acc = 0.0;
    for (var j = 0u; j < MM; j++) { acc = fma(om[j], xv[j], acc); }
    return acc;
}

// `value_forward` in quads (CPU adapters, d a multiple of 4, m ≤ 4; see `backward_walk_q`): one
// invocation per four consecutive features and chunk of tokens, Ω of its four features formed
// once (`value_forward` forms it again for every token, m·kc loads), each token's four state rows
// loaded and its four outputs stored as one vec4. The same sums, the same bits.
@compute @workgroup_size(64)
fn value_forward_wq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let dq = p.d / 4u;
    let e = quad_index(wid, nwg, lid);
    if (e >= dq * p.chunks) { return; }
    let iq = e % dq;
    let i0 = 4u * iq;
    let n0 = (e / dq) * p.chunk;
    let n1 = min(n0 + p.chunk, p.n);
    let om0 = omega4(i0);
    let om1 = omega4(i0 + 1u);
    let om2 = omega4(i0 + 2u);
    let om3 = omega4(i0 + 3u);
    for (var n = n0; n < n1; n++) {
        let b = n * p.d + i0;
        a4[n * dq + iq] = vec4<f32>(
            value_out(om0, row4(xin(xr[b]))),
            value_out(om1, row4(xin(xr[b + 1u]))),
            value_out(om2, row4(xin(xr[b + 2u]))),
            value_out(om3, row4(xin(xr[b + 3u]))),
        );
    }
}

// dx[n, c] += da[n, i] · Omega[c]; partial[chunk, c] = Σ_{n in chunk} da[n, i] · X[n, c].
// Workgroup = (channel tile, chunk), channel tile fastest; one invocation per channel, tokens in
// order. X, da and dx are each read once.
@compute @workgroup_size(256)
fn value_backward_partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let dm = p.d * p.m;
    let tiles = (dm + WG - 1u) / WG;
    let g = group_index(wid, nwg);
    if (g >= tiles * p.chunks) { return; }
    let tile = g % tiles;
    let ch = g / tiles;
    let c = tile * WG + lid;
    if (c >= dm) { return; }
    let i = c / p.m;
    let w = omega(i, c - i * p.m);
    let n0 = ch * p.chunk;
    let n1 = min(n0 + p.chunk, p.n);
    var acc = 0.0;
    for (var n = n0; n < n1; n++) {
        let gi = da[n * p.d + i];
        let o = n * dm + c;
        acc = fma(gi, f32(x[o]), acc);
        dx[o] = fma(gi, w, dx[o]);
    }
    partial[ch * dm + c] = acc;
}

// `value_backward_partial` in quads (CPU adapters, d a multiple of 4, m ≤ 4; see
// `backward_walk_q`): one invocation per four consecutive features and chunk, ∂a as a vec4 of the
// four features, the state and ∂X rows one per feature, Ω formed once; the same sums in the same
// order (the same bits), and the same chunks, so `value_backward_finalize` is unchanged.
@compute @workgroup_size(64)
fn value_backward_partial_wq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let dq = p.d / 4u;
    let e = quad_index(wid, nwg, lid);
    if (e >= dq * p.chunks) { return; }
    let iq = e % dq;
    let i0 = 4u * iq;
    let ch = e / dq;
    let n0 = ch * p.chunk;
    let n1 = min(n0 + p.chunk, p.n);
    let om0 = omega4(i0);
    let om1 = omega4(i0 + 1u);
    let om2 = omega4(i0 + 2u);
    let om3 = omega4(i0 + 3u);
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    for (var n = n0; n < n1; n++) {
        let g = da4[n * dq + iq];
        let b = n * p.d + i0;
        acc0 = fma(vec4<f32>(g.x), row4(xin(xr[b])), acc0);
        acc1 = fma(vec4<f32>(g.y), row4(xin(xr[b + 1u])), acc1);
        acc2 = fma(vec4<f32>(g.z), row4(xin(xr[b + 2u])), acc2);
        acc3 = fma(vec4<f32>(g.w), row4(xin(xr[b + 3u])), acc3);
        dxr[b] = from4(fma(vec4<f32>(g.x), om0, row4(dxr[b])));
        dxr[b + 1u] = from4(fma(vec4<f32>(g.y), om1, row4(dxr[b + 1u])));
        dxr[b + 2u] = from4(fma(vec4<f32>(g.z), om2, row4(dxr[b + 2u])));
        dxr[b + 3u] = from4(fma(vec4<f32>(g.w), om3, row4(dxr[b + 3u])));
    }
    let r = ch * p.d + i0;
    partialr[r] = from4(acc0);
    partialr[r + 1u] = from4(acc1);
    partialr[r + 2u] = from4(acc2);
    partialr[r + 3u] = from4(acc3);
}

// Per feature i: dOmega[i, j] = Σ_chunks partial; dkappa[i, q] += Σ_r rho_r dOmega[i, q − pi + r];
// q[i, r] = Σ_j dOmega[i, j] · kappa[i, pi + j − r] (its sum over i is drho[r]).
@compute @workgroup_size(256)
fn value_backward_finalize(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let i = group_index(wid, nwg) * WG + lid;
    if (i >= p.d) { return; }
    let dm = p.d * p.m;
    let row = i * p.m;
    for (var j = 0u; j < p.m; j++) {
        var sum = 0.0;
        for (var ch = 0u; ch < p.chunks; ch++) {
            sum += partial[ch * dm + row + j];
        }
        domega[row + j] = sum;
    }
    // kappa tap qq gets dOmega[i, j] rho_r for every pair with pi + j − r = qq, i.e. j = qq − pi + r.
    for (var qq = 0u; qq < p.k; qq++) {
        var sum = 0.0;
        for (var r = 0u; r < p.m; r++) {
            let jp = qq + r;                  // j + pi
            if (jp >= p.pi && jp - p.pi < p.m) {
                sum = fma(rho[r], domega[row + jp - p.pi], sum);
            }
        }
        dkappa[i * p.k + qq] = dkappa[i * p.k + qq] + sum;
    }
    for (var r = 0u; r < p.m; r++) {
        var sum = 0.0;
        for (var j = 0u; j < p.m; j++) {
            let top = p.pi + j;
            if (top >= r && top - r < p.k) {
                sum = fma(domega[row + j], kappa[i * p.k + top - r], sum);
            }
        }
        q[row + r] = sum;
    }
}
