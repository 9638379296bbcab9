// Input expansion X⁰ from the token embeddings e (spec 3.5) and its backward (spec 11.4).
//
// Layouts (row-major): e [N, d] with N = B·T tokens; X⁰ [N, d, m] with the value index j fastest,
// channel c = i·m + j. EC kernel ekernel [d, m, K]: tap K−1 multiplies the current token, tap s the
// token t − (K−1) + s of the same sequence (zero before position 0).
//   EC:        x0[n, i, j] = Σ_s ekernel[i, j, s] · e[n − (K−1−s), i]
//   replicate: x0[n, i, j] = e[n, i]
//
// dekernel is a sum over all tokens, computed without atomics in a fixed order: each workgroup of
// `ec_backward_partial` sums one chunk of `chunk` consecutive tokens sequentially into its own
// scratch slot, and `ec_backward_finalize` adds the chunk partials in chunk order. Every pass
// indexes its grid as `wid.y * nwg.x + wid.x`, so any number of workgroups fits.

struct Params {
    n: u32,       // tokens B·T
    seq: u32,     // T (token index within its sequence = n % seq)
    d: u32,       // features
    m: u32,       // value channels
    k: u32,       // EC taps
    chunk: u32,   // tokens per partial-sum chunk
    chunks: u32,  // number of chunks = ceil(n / chunk)
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> e: array<f32>;
@group(0) @binding(2) var<storage, read> ekernel: array<f32>;
@group(0) @binding(3) var<storage, read_write> x0: array<f32>;
@group(0) @binding(4) var<storage, read> g: array<f32>;
@group(0) @binding(5) var<storage, read_write> de: array<f32>;
@group(0) @binding(6) var<storage, read_write> dekernel: array<f32>;
// Scratch: per-chunk partial sums of dekernel, [chunks, d·m, K].
@group(0) @binding(7) var<storage, read_write> partial: array<f32>;
// Replication with m = 4: a state row as one vec4.
@group(0) @binding(8) var<storage, read_write> x04: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read> g4: array<vec4<f32>>;

const WG: u32 = 256u;

fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// One invocation per (n, c).
@compute @workgroup_size(256)
fn ec_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let dm = p.d * p.m;
    let o = group_index(wid, nwg) * WG + lid;
    if (o >= p.n * dm) { return; }
    let n = o / dm;
    let c = o - n * dm;
    let i = c / p.m;
    let t = n % p.seq;
    let s0 = p.k - 1u - min(t, p.k - 1u);   // taps with t − (K−1) + s ≥ 0
    var acc = 0.0;
    for (var s = s0; s < p.k; s++) {
        acc += ekernel[c * p.k + s] * e[(n + s + 1u - p.k) * p.d + i];
    }
    x0[o] = acc;
}

// de[n, i] = Σ_j Σ_s ekernel[i, j, s] · g[n + K−1−s, i, j] (same sequence only). One invocation
// per (n, i).
@compute @workgroup_size(256)
fn ec_backward_de(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let dm = p.d * p.m;
    let o = group_index(wid, nwg) * WG + lid;
    if (o >= p.n * p.d) { return; }
    let n = o / p.d;
    let i = o - n * p.d;
    let t = n % p.seq;
    let s0 = max(t + p.k, p.seq) - p.seq;   // taps with t + K−1−s ≤ seq−1
    var acc = 0.0;
    for (var j = 0u; j < p.m; j++) {
        let c = i * p.m + j;
        for (var s = s0; s < p.k; s++) {
            acc += ekernel[c * p.k + s] * g[(n + p.k - 1u - s) * dm + c];
        }
    }
    de[o] = acc;
}

// partial[chunk, c, s] = Σ_{n in chunk} g[n, c] · e[n − (K−1−s), i]. Workgroup = (channel tile,
// tap s, chunk), channel tile fastest; one invocation per channel, tokens in order.
@compute @workgroup_size(256)
fn ec_backward_partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let dm = p.d * p.m;
    let tiles = (dm + WG - 1u) / WG;
    let gi = group_index(wid, nwg);
    if (gi >= tiles * p.k * p.chunks) { return; }
    let tile = gi % tiles;
    let rest = gi / tiles;
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
            acc += g[n * dm + c] * e[(n - lag) * p.d + i];
        }
        t += 1u;
        if (t == p.seq) { t = 0u; }
    }
    partial[(ch * dm + c) * p.k + s] = acc;
}

// dekernel[c, s] += Σ_chunks partial[chunk, c, s], chunks in order. One invocation per (c, s).
@compute @workgroup_size(256)
fn ec_backward_finalize(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let dmk = p.d * p.m * p.k;
    let o = group_index(wid, nwg) * WG + lid;
    if (o >= dmk) { return; }
    var sum = 0.0;
    for (var ch = 0u; ch < p.chunks; ch++) {
        sum += partial[ch * dmk + o];
    }
    dekernel[o] = dekernel[o] + sum;
}

// x0[n, i, j] = e[n, i]. One invocation per (n, i).
@compute @workgroup_size(256)
fn replicate_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let o = group_index(wid, nwg) * WG + lid;
    if (o >= p.n * p.d) { return; }
    // One invocation per (n, i): one load, m stores (no per-element division by m).
    let v = e[o];
    let base = o * p.m;
    for (var j = 0u; j < p.m; j++) {
        x0[base + j] = v;
    }
}

// de[n, i] = Σ_j g[n, i, j]. One invocation per (n, i).
@compute @workgroup_size(256)
fn replicate_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let o = group_index(wid, nwg) * WG + lid;
    if (o >= p.n * p.d) { return; }
    let base = o * p.m;
    var acc = 0.0;
    for (var j = 0u; j < p.m; j++) {
        acc += g[base + j];
    }
    de[o] = acc;
}

// replicate_forward / replicate_backward for m = 4: one vec4 store / load per row, the same sum
// order (j = 0, 1, 2, 3).
@compute @workgroup_size(256)
fn replicate_forward4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let o = group_index(wid, nwg) * WG + lid;
    if (o >= p.n * p.d) { return; }
    x04[o] = vec4<f32>(e[o]);
}

@compute @workgroup_size(256)
fn replicate_backward4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let o = group_index(wid, nwg) * WG + lid;
    if (o >= p.n * p.d) { return; }
    let r = g4[o];
    var acc = 0.0;
    acc += r.x;
    acc += r.y;
    acc += r.z;
    acc += r.w;
    de[o] = acc;
}
