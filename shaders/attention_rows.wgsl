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
// (lim ≥ 1 always). Columns lim ≤ τ < 4·nk4 are written as zeros: the block's products read its
// nk keys (4·nk4 rounded up to whole vec4s); the columns beyond, up to ldk (the widest block's
// keys), are never read and keep whatever they held (until session 32 they were zeroed too: at
// T = 1024 in blocks of 256 a third of the forward's writes). The causal method (one block of
// every query, `gran` > 0) writes each row up to the end of its own granule of `gran` queries
// instead, min(kv_len, (⌊(q_pos0 + i0 + i) / gran⌋ + 1)·gran) keys: what its products read.
//
// Two forms of each kernel: one invocation per row (`rows_fwd`, `rows_bwd`: every sum over
// τ = 0, 1, … in order; the CPU adapters' form) and a team of `team` invocations per row
// (`*_team`, below). Both are bit-identical run to run; they differ from each other in the order
// of their sums (an ulp or so of lse).
//
// Where P and dS go is the variant's part in front of this file (`put_p`, `put_ds`, `p_again`):
// over s and g (`f32`, parts/attn_rows_f32.wgsl), or into f16 buffers of their own (`h`,
// parts/attn_rows_f16.wgsl: form `attn_p16` under `--precision f16`, whose products read P and dS
// as f16 operands anyway), leaving s and g as they were. Every sum is the same in both.

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
    nk4: u32,       // vec4s of a row the block's products read: ceil(nk / 4)
    team: u32,      // invocations per row of the team forms (a power of two ≤ TWG)
    gran: u32,      // the causal method's granule (0: every row ends at the block's nk4)
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
    nk4: u32,       // vec4s of the row the products read (written, zeros past lim)
}

fn row_of(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> Row {
    return row_at((wid.y * nwg.x + wid.x) * 64u + lid);
}

// Row r of the block's batch · heads · nq rows.
fn row_at(r: u32) -> Row {
    let p = params;
    var row: Row;
    row.valid = r < p.total;
    let bh = r / p.nq;
    let i = r % p.nq;
    row.base = r * (p.ldk / 4u);
    row.lim = min(p.kv_len, p.q_pos0 + p.i0 + i + 1u);
    row.li = bh * p.q_len + p.i0 + i;
    let gend = min(p.kv_len, ((p.q_pos0 + p.i0 + i) / max(p.gran, 1u) + 1u) * p.gran);
    row.nk4 = select(p.nk4, (gend + 3u) / 4u, p.gran > 0u);
    return row;
}

// acc + v.x + v.y + v.z + v.w, added in that order.
fn add4(acc: f32, v: vec4<f32>) -> f32 {
    return acc + v.x + v.y + v.z + v.w;
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
        l = add4(l, e);
    }
    let ls = mx + log(l);
    lse[row.li] = ls;
    for (var j = 0u; j < nv; j++) {
        put_p(row.base + j, select(vec4<f32>(), exp(s[row.base + j] - ls), seen(j, row.lim)));
    }
    for (var j = nv; j < row.nk4; j++) {
        put_p(row.base + j, vec4<f32>());
    }
}

// Backward: s holds the scaled scores, g = dP = dout·vᵀ. Writes P = exp(s − lse) into s and
// dS·scale = P ⊙ (dP − δ)·scale into g, with δ = Σ_τ P_τ dP_τ (= dout·out; summed from P and dP so
// that a query that sees one key, P = 1, gets dP − δ = 0 exactly).
// The lanes of a row's last vec4 past the keys it sees are masked out of δ by `select`, not by
// P = 0: dP there may lie past the block's keys, where the product wrote nothing and the scratch
// holds what an earlier use left — NaN or ±inf after an overflowed f16 step, and 0 · inf is NaN
// (until session 32 it was `P · dP`; `blocked_attention_reads_no_stale_scratch_columns`).
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
        put_p(row.base + j, pr);
        let t = select(vec4<f32>(), pr * g[row.base + j], seen(j, row.lim));
        dl = add4(dl, t);
    }
    for (var j = 0u; j < nv; j++) {
        let ds = p_again(row.base + j, j, row.lim, ls) * (g[row.base + j] - vec4<f32>(dl)) * scale;
        put_ds(row.base + j, select(vec4<f32>(), ds, seen(j, row.lim)));
    }
    for (var j = nv; j < row.nk4; j++) {
        put_p(row.base + j, vec4<f32>());
        put_ds(row.base + j, vec4<f32>());
    }
}

// ---------------------------------------------------------------------------------------------
// The team forms (`DDL_FORMS=attn_team=N`): `team` invocations per row, TWG / team rows per
// workgroup. Lane `lane` takes the row's vec4s j = lane, lane + team, lane + 2·team, … so that
// neighbouring invocations read neighbouring addresses — the one-invocation kernels above have
// the 64 invocations of a workgroup walk 64 rows ldk floats apart, which on a GPU makes every
// load a gather of scattered 16-byte pieces (16–23 % of the copy bandwidth on an H200: GPU run
// 3, docs/GPU.md). A lane keeps its first TC vec4s in registers from the read pass to the write
// pass (rows up to 4 · TC · team keys are read once); the rest is read again. The row's max and
// sums: each lane's own in order of j (components x, y, z, w), then a fixed tree over the team
// in workgroup memory: bit-identical run to run.

const TWG: u32 = 128u;      // invocations per workgroup
const TC: u32 = 8u;         // vec4s a lane keeps in registers

var<workgroup> red: array<f32, TWG>;

// The team's maximum of `v`, given to every lane. Called by every invocation of the workgroup
// (team is a uniform: the barriers are in uniform control flow).
fn team_max(v: f32, lid: u32, lane: u32, team: u32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var h = team / 2u; h > 0u; h = h / 2u) {
        if (lane < h) { red[lid] = max(red[lid], red[lid + h]); }
        workgroupBarrier();
    }
    let r = red[lid - lane];
    workgroupBarrier();
    return r;
}

// The team's sum of `v` (pairs added in a fixed tree), given to every lane; as team_max.
fn team_sum(v: f32, lid: u32, lane: u32, team: u32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var h = team / 2u; h > 0u; h = h / 2u) {
        if (lane < h) { red[lid] = red[lid] + red[lid + h]; }
        workgroupBarrier();
    }
    let r = red[lid - lane];
    workgroupBarrier();
    return r;
}

// This invocation's place in the team forms: its row, its lane in the row's team and the vec4s
// of the row the query sees (0 for rows past the last one, which read nothing but take part in
// the reductions). (The team size itself the kernels read from `params` where they use it: a
// value passed through here would count as non-uniform to a browser's uniformity analysis, and
// the reductions' barriers need it uniform.)
struct TeamRow {
    row: Row,
    lane: u32,
    nv: u32,
}

fn team_row(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> TeamRow {
    let team = params.team;
    let row = row_at((wid.y * nwg.x + wid.x) * (TWG / team) + lid / team);
    return TeamRow(row, lid & (team - 1u), select(0u, (row.lim + 3u) / 4u, row.valid));
}

// `rows_fwd` by teams.
@compute @workgroup_size(128)
fn rows_fwd_team(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let team = params.team;
    let tr = team_row(wid, nwg, lid);
    let row = tr.row;
    let lane = tr.lane;
    let nv = tr.nv;
    var c: array<vec4<f32>, TC>;
    var m = vec4<f32>(NEG);
    for (var r = 0u; r < TC; r++) {
        let j = lane + r * team;
        if (j < nv) {
            c[r] = select(vec4<f32>(NEG), s[row.base + j], seen(j, row.lim));
            m = max(m, c[r]);
        }
    }
    for (var j = lane + TC * team; j < nv; j += team) {
        m = max(m, select(vec4<f32>(NEG), s[row.base + j], seen(j, row.lim)));
    }
    let mx = team_max(max(max(m.x, m.y), max(m.z, m.w)), lid, lane, team);
    var l = 0.0;
    for (var r = 0u; r < TC; r++) {
        let j = lane + r * team;
        if (j < nv) {
            let e = select(vec4<f32>(), exp(c[r] - mx), seen(j, row.lim));
            l = add4(l, e);
        }
    }
    for (var j = lane + TC * team; j < nv; j += team) {
        let e = select(vec4<f32>(), exp(s[row.base + j] - mx), seen(j, row.lim));
        l = add4(l, e);
    }
    let ls = mx + log(team_sum(l, lid, lane, team));
    if (!row.valid) { return; }
    if (lane == 0u) { lse[row.li] = ls; }
    for (var r = 0u; r < TC; r++) {
        let j = lane + r * team;
        if (j < nv) { put_p(row.base + j, select(vec4<f32>(), exp(c[r] - ls), seen(j, row.lim))); }
    }
    for (var j = lane + TC * team; j < nv; j += team) {
        put_p(row.base + j, select(vec4<f32>(), exp(s[row.base + j] - ls), seen(j, row.lim)));
    }
    for (var j = nv + lane; j < row.nk4; j += team) {
        put_p(row.base + j, vec4<f32>());
    }
}

// `rows_bwd` by teams: P is written back into s in the read pass, dS into g in the write pass.
@compute @workgroup_size(128)
fn rows_bwd_team(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let team = params.team;
    let tr = team_row(wid, nwg, lid);
    let row = tr.row;
    let lane = tr.lane;
    let nv = tr.nv;
    var ls = 0.0;
    if (row.valid) { ls = lse_saved[row.li]; }
    var cp: array<vec4<f32>, TC>;
    var cg: array<vec4<f32>, TC>;
    var dl = 0.0;
    for (var r = 0u; r < TC; r++) {
        let j = lane + r * team;
        if (j < nv) {
            cp[r] = select(vec4<f32>(), exp(s[row.base + j] - ls), seen(j, row.lim));
            cg[r] = g[row.base + j];
            put_p(row.base + j, cp[r]);
            let t = select(vec4<f32>(), cp[r] * cg[r], seen(j, row.lim));
            dl = add4(dl, t);
        }
    }
    for (var j = lane + TC * team; j < nv; j += team) {
        let pr = select(vec4<f32>(), exp(s[row.base + j] - ls), seen(j, row.lim));
        put_p(row.base + j, pr);
        let t = select(vec4<f32>(), pr * g[row.base + j], seen(j, row.lim));
        dl = add4(dl, t);
    }
    dl = team_sum(dl, lid, lane, team);
    if (!row.valid) { return; }
    let scale = vec4<f32>(params.scale);
    for (var r = 0u; r < TC; r++) {
        let j = lane + r * team;
        if (j < nv) { put_ds(row.base + j, select(vec4<f32>(), cp[r] * (cg[r] - vec4<f32>(dl)) * scale, seen(j, row.lim))); }
    }
    for (var j = lane + TC * team; j < nv; j += team) {
        let ds = p_again(row.base + j, j, row.lim, ls) * (g[row.base + j] - vec4<f32>(dl)) * scale;
        put_ds(row.base + j, select(vec4<f32>(), ds, seen(j, row.lim)));
    }
    for (var j = nv + lane; j < row.nk4; j += team) {
        put_p(row.base + j, vec4<f32>());
        put_ds(row.base + j, vec4<f32>());
    }
}
