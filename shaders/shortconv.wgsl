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
// sequentially into its own slot of a scratch buffer; a `*_finalize` pass adds the chunk partials
// in chunk order; `reduce_drho` sums the per-feature terms of drho with one workgroup per value
// channel (a fixed strided loop, then a fixed tree). Every pass indexes its grid as
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
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> kappa: array<f32>;
@group(0) @binding(3) var<storage, read> rho: array<f32>;
@group(0) @binding(4) var<storage, read_write> a: array<f32>;
@group(0) @binding(5) var<storage, read> da: array<f32>;
@group(0) @binding(6) var<storage, read_write> dx: array<f32>;
@group(0) @binding(7) var<storage, read_write> dkappa: array<f32>;
@group(0) @binding(8) var<storage, read_write> drho: array<f32>;
// Scratch: per-chunk partial sums [chunks, d·m, K] (token) or [chunks, d·m] (CC).
@group(0) @binding(9) var<storage, read_write> partial: array<f32>;
// Scratch: per-(i, j[, s]) terms of drho, [d, m, rk].
@group(0) @binding(10) var<storage, read_write> q: array<f32>;
// Scratch (CC): dOmega [d, m].
@group(0) @binding(11) var<storage, read_write> domega: array<f32>;

const WG: u32 = 256u;

var<workgroup> red: array<f32, WG>;

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
            xt += kappa[c * p.k + s] * x[(n + s + 1u - p.k) * dm + c];
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

// partial[chunk, c, s] = Σ_{n in chunk} da[n, i] · X[n − (K−1−s), c]. Workgroup = (channel tile,
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
            acc += da[n * p.d + i] * x[(n - lag) * dm + c];
        }
        t += 1u;
        if (t == p.seq) { t = 0u; }
    }
    partial[(ch * dm + c) * p.k + s] = acc;
}

// P[c, s] = Σ_chunks partial; dkappa[c, s] += rho_j · P; q[c, s] = kappa[c, s] · P (its sum over
// (i, s) is drho[j]). One invocation per (c, s).
@compute @workgroup_size(256)
fn token_backward_finalize(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let dm = p.d * p.m;
    let e = group_index(wid, nwg) * WG + lid;
    if (e >= dm * p.k) { return; }
    let c = e / p.k;
    let j = c % p.m;
    var sum = 0.0;
    for (var ch = 0u; ch < p.chunks; ch++) {
        sum += partial[ch * dm * p.k + e];
    }
    dkappa[e] = dkappa[e] + rho[j] * sum;
    q[e] = kappa[e] * sum;
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
    red[lid] = acc;
    workgroupBarrier();
    for (var w = WG / 2u; w > 0u; w >>= 1u) {
        if (lid < w) {
            red[lid] += red[lid + w];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        drho[j] = drho[j] + red[0];
    }
}

// ---------------------------------------------------------------------------------------------
// Value axis (CC)

// Omega[i, j] = Σ_r rho_r · kappa[i, pi + j − r], only r with 0 ≤ pi + j − r < kc.
fn omega(i: u32, j: u32) -> f32 {
    let p = params;
    let top = p.pi + j;                       // kappa index for r = 0
    let r0 = max(top + 1u, p.k) - p.k;        // smallest r with top − r < kc
    let r1 = min(p.m, top + 1u);              // one past the largest r with top − r ≥ 0
    var w = 0.0;
    for (var r = r0; r < r1; r++) {
        w += rho[r] * kappa[i * p.k + top - r];
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
        acc += omega(i, j) * x[base + j];
    }
    a[e] = acc;
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
        acc += gi * x[o];
        dx[o] = dx[o] + gi * w;
    }
    partial[ch * dm + c] = acc;
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
                sum += rho[r] * domega[row + jp - p.pi];
            }
        }
        dkappa[i * p.k + qq] = dkappa[i * p.k + qq] + sum;
    }
    for (var r = 0u; r < p.m; r++) {
        var sum = 0.0;
        for (var j = 0u; j < p.m; j++) {
            let top = p.pi + j;
            if (top >= r && top - r < p.k) {
                sum += domega[row + j] * kappa[i * p.k + top - r];
            }
        }
        q[row + r] = sum;
    }
}
