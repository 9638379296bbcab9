// Causal attention by blocks of queries (the `Blocked` method of src/kernels/attention.rs): the
// score and value products run through the matmul kernels, one block of queries at a time; these
// two kernels are the softmax steps between them, one invocation per (batch, head, query) row of
// the block's score matrix.
//
// Layouts:
//   s, g        : [batch, heads, nq, ldk] scores of the block's nq queries against its nk keys
//                 (ldk ≥ nk, a multiple of 4; read as vec4 rows)
//   lse         : [batch, heads, q_len]
// Query i of the block (absolute query i0 + i) sees keys τ < lim = min(kv_len, q_pos0 + i0 + i + 1)
// (lim ≥ 1 always). Columns lim ≤ τ < ldk are written as zeros.
//
// Every sum runs over τ = 0, 1, … in order in one invocation: bit-identical run to run.

struct Params {
    heads: u32,
    nq: u32,        // queries in the block
    i0: u32,        // the block's first query (within q)
    q_len: u32,
    q_pos0: u32,
    kv_len: u32,
    ldk: u32,       // row stride of s and g (multiple of 4)
    total: u32,     // rows: batch · heads · nq
    scale: f32,     // softmax scale (the backward's dS is written times it)
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> s: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> g: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> lse: array<f32>;
@group(0) @binding(4) var<storage, read> lse_saved: array<f32>;

const NEG: f32 = -1.0e30;

struct Row {
    valid: bool,
    base: u32,      // vec4 index of the row's first element
    lim: u32,       // keys the query sees
    li: u32,        // index into lse
}

fn row_of(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> Row {
    let p = params;
    let r = (wid.y * nwg.x + wid.x) * 64u + lid;
    var row: Row;
    row.valid = r < p.total;
    let bh = r / p.nq;
    let i = r % p.nq;
    row.base = r * (p.ldk / 4u);
    row.lim = min(p.kv_len, p.q_pos0 + p.i0 + i + 1u);
    row.li = bh * p.q_len + p.i0 + i;
    return row;
}

// Lanes of vec4 block j (elements 4j … 4j+3) that the query sees.
fn seen(j: u32, lim: u32) -> vec4<bool> {
    return vec4<u32>(4u * j) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(lim);
}

// Forward: s holds the scaled scores; it is overwritten with P = exp(s − lse) (0 where masked),
// and lse = max + log Σ exp(s − max) is written.
@compute @workgroup_size(64)
fn rows_fwd(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = row_of(wid, nwg, lid);
    if (!row.valid) { return; }
    let nv = (row.lim + 3u) / 4u;
    var m = vec4<f32>(NEG);
    for (var j = 0u; j < nv; j++) {
        m = max(m, select(vec4<f32>(NEG), s[row.base + j], seen(j, row.lim)));
    }
    let mx = max(max(m.x, m.y), max(m.z, m.w));
    var l = 0.0;
    for (var j = 0u; j < nv; j++) {
        let e = select(vec4<f32>(), exp(s[row.base + j] - mx), seen(j, row.lim));
        l += e.x;
        l += e.y;
        l += e.z;
        l += e.w;
    }
    let ls = mx + log(l);
    lse[row.li] = ls;
    for (var j = 0u; j < nv; j++) {
        s[row.base + j] = select(vec4<f32>(), exp(s[row.base + j] - ls), seen(j, row.lim));
    }
    for (var j = nv; j < params.ldk / 4u; j++) {
        s[row.base + j] = vec4<f32>();
    }
}

// Backward: s holds the scaled scores, g = dP = dout·vᵀ. Writes P = exp(s − lse) into s and
// dS·scale = P ⊙ (dP − δ)·scale into g, with δ = Σ_τ P_τ dP_τ (= dout·out; summed from P and dP so
// that a query that sees one key, P = 1, gets dP − δ = 0 exactly).
@compute @workgroup_size(64)
fn rows_bwd(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = row_of(wid, nwg, lid);
    if (!row.valid) { return; }
    let scale = vec4<f32>(params.scale);
    let nv = (row.lim + 3u) / 4u;
    let ls = lse_saved[row.li];
    var dl = 0.0;
    for (var j = 0u; j < nv; j++) {
        let pr = select(vec4<f32>(), exp(s[row.base + j] - ls), seen(j, row.lim));
        s[row.base + j] = pr;
        let t = pr * g[row.base + j];
        dl += t.x;
        dl += t.y;
        dl += t.z;
        dl += t.w;
    }
    for (var j = 0u; j < nv; j++) {
        let ds = s[row.base + j] * (g[row.base + j] - vec4<f32>(dl)) * scale;
        g[row.base + j] = select(vec4<f32>(), ds, seen(j, row.lim));
    }
    for (var j = nv; j < params.ldk / 4u; j++) {
        s[row.base + j] = vec4<f32>();
        g[row.base + j] = vec4<f32>();
    }
}
