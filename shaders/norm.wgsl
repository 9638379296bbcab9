// RMSNorm with gain (spec 0, 11.5): y = γ ⊙ x·r, r = 1/sqrt(mean(x²) + ε), over the last axis.
//
// Row kernels (forward, dx): a workgroup of 256 invocations is split into teams of `team`
// invocations (a power of two chosen by the launcher from `dim` alone); each team owns one row.
// A lane sums its strided elements sequentially, then the team reduces in workgroup memory with
// a fixed binary tree: the summation order depends only on `dim`, never on timing.
// Grid: 1-D over workgroups of 256/team rows each, split over x and y (wid.y·nwg.x + wid.x).
//
// The vec teams (`*_v`, the form `norm_vec`) load four features at a time, keep a row in
// registers between its passes, and fold the dγ partials into the dx pass (at the end).
//
// dγ (rows can be 16k+): `rmsnorm_dgain_partial` sums fixed chunks of `chunk` rows per column
// into `partial` [chunks, dim]; the launcher adds their column sums (`reduce::col_sum`, chunk
// order) into dgain. No atomics.

struct Params {
    rows: u32,
    dim: u32,
    team: u32,        // invocations per row (power of two, ≤ 256)
    flag: u32,        // backward: 1 = add into dx instead of writing it
    eps: f32,
    chunk: u32,       // dγ pass 1: rows per chunk
    chunks: u32,      // dγ: number of chunks = ceil(rows / chunk)
    _pad: u32,
    // The DDL heads folded into the backward (`*_qh`; zero for every other entry point): value
    // channels m ≤ 4, and where the heads' chunk partials go in `hpart` (offsets and row
    // strides of ∂b_β, ∂W_v, ∂b_v; ∂w_β's rows start at 0), laid out as the delta write's heads
    // kernel lays them out (`delta::HeadLayout`).
    m: u32,
    o_bb: u32,
    o_wv: u32,
    o_bv: u32,
    s_wb: u32,
    s_bb: u32,
    s_wv: u32,
    s_bv: u32,
}

// Invocations per workgroup: 256 in the `team` variant, T1_WG (64) in the teams-of-one
// variants, whose workgroups are one row per invocation: at the `tiny` preset's 768 rows that
// makes 12 workgroups instead of 3, which two worker threads of a CPU adapter share evenly.
const WG: u32 = NORM_WG;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> gain: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(5) var<storage, read> rstd_in: array<f32>;
@group(0) @binding(6) var<storage, read> dy: array<f32>;
@group(0) @binding(7) var<storage, read_write> dx: array<f32>;
@group(0) @binding(8) var<storage, read_write> partial: array<f32>;
// The quad entry points (`*_q`) see x, gain, y, dy, dx as vec4s of four consecutive features.
@group(0) @binding(9) var<storage, read> x4: array<vec4<f32>>;
@group(0) @binding(10) var<storage, read> gain4: array<vec4<f32>>;
@group(0) @binding(11) var<storage, read_write> y4: array<vec4<f32>>;
@group(0) @binding(12) var<storage, read> dy4: array<vec4<f32>>;
@group(0) @binding(13) var<storage, read_write> dx4: array<vec4<f32>>;
@group(0) @binding(14) var<storage, read_write> partial4: array<vec4<f32>>;
// The DDL heads (`*_qh`): ∂z [rows], ∂u [rows, m], w_β [dim], W_v [m, dim], chunk partials.
@group(0) @binding(15) var<storage, read> hdz: array<f32>;
@group(0) @binding(16) var<storage, read> hdu: array<f32>;
@group(0) @binding(17) var<storage, read> w_beta4: array<vec4<f32>>;
@group(0) @binding(18) var<storage, read> w_v4: array<vec4<f32>>;
@group(0) @binding(19) var<storage, read_write> hpart: array<f32>;

var<workgroup> red: array<f32, 256>;

// Invocations per row: compiled in by the `t1` variant (TEAMFIX = 1), else the launcher's.
fn team_w() -> u32 {
    if (TEAMFIX > 0u) { return TEAMFIX; }
    return params.team;
}

// The sum of the team's partials `part`: itself for teams of one, else a tree reduction in
// red[] (every team's sum ends in red[team·k]). Must be called from uniform control flow by the
// whole workgroup.
fn team_sum(part: f32, lid: u32, lane: u32, slot: u32) -> f32 {
    if (team_w() == 1u) { return part; }
    red[lid] = part;
    team_reduce(lid, lane);
    return red[slot * team_w()];
}

// Tree-reduces red[] within each team of `team` lanes; every team's sum ends in red[team·k].
// Must be called from uniform control flow by the whole workgroup.
fn team_reduce(lid: u32, lane: u32) {
    workgroupBarrier();
    var s = team_w() / 2u;
    loop {
        if (s == 0u) {
            break;
        }
        if (lane < s) {
            red[lid] = red[lid] + red[lid + s];
        }
        workgroupBarrier();
        s = s / 2u;
    }
}

@compute @workgroup_size(WG)
fn rmsnorm_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let team = team_w();
    let dim = params.dim;
    let slot = lid / team;
    let lane = lid - slot * team;
    let row = (wid.y * nwg.x + wid.x) * (WG / team) + slot;
    let valid = row < params.rows;
    let base = row * dim;

    var ss = 0.0;
    if (valid) {
        for (var i = lane; i < dim; i += team) {
            let v = x[base + i];
            ss = ss + v * v;
        }
    }
    let total = team_sum(ss, lid, lane, slot);
    let r = 1.0 / sqrt(total / f32(dim) + params.eps);
    if (valid) {
        if (lane == 0u) {
            rstd[row] = r;
        }
        for (var i = lane; i < dim; i += team) {
            y[base + i] = gain[i] * (x[base + i] * r);
        }
    }
}

// dx = r(γ ⊙ dy) − (r³/D)·x·Σ_i x_i γ_i dy_i   (written, or added when params.flag = 1)
@compute @workgroup_size(WG)
fn rmsnorm_backward_dx(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let team = team_w();
    let dim = params.dim;
    let slot = lid / team;
    let lane = lid - slot * team;
    let row = (wid.y * nwg.x + wid.x) * (WG / team) + slot;
    let valid = row < params.rows;
    let base = row * dim;

    var s = 0.0;
    if (valid) {
        for (var i = lane; i < dim; i += team) {
            s = s + x[base + i] * (gain[i] * dy[base + i]);
        }
    }
    let total = team_sum(s, lid, lane, slot);
    if (valid) {
        let r = rstd_in[row];
        let c = (r * r * r / f32(dim)) * total;
        for (var i = lane; i < dim; i += team) {
            let g = r * (gain[i] * dy[base + i]) - c * x[base + i];
            if (params.flag == 1u) {
                dx[base + i] = dx[base + i] + g;
            } else {
                dx[base + i] = g;
            }
        }
    }
}

// Pass 1 of dγ: partial[c, i] = Σ_{rows of chunk c, in order} dy·x·r. 1-D grid over chunks·dim.
@compute @workgroup_size(WG)
fn rmsnorm_dgain_partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let item = (wid.y * nwg.x + wid.x) * WG + lid;
    let dim = params.dim;
    if (item >= params.chunks * dim) {
        return;
    }
    let c = item / dim;
    let i = item - c * dim;
    let r0 = c * params.chunk;
    let r1 = min(r0 + params.chunk, params.rows);
    var s = 0.0;
    for (var r = r0; r < r1; r++) {
        s = s + (dy[r * dim + i] * x[r * dim + i]) * rstd_in[r];
    }
    partial[item] = s;
}

// ---------------------------------------------------------------------------------------------
// Quads: one row per invocation (teams of one, the CPU-adapter layout) with dim a multiple of 4,
// four features per load (on llvmpipe a load is a loop over the SIMD lanes, so a vec4 moves four
// floats for about the price of two scalar loads). Each row's sums add the elements one by one
// in increasing i, as the `t1` loops do, so the results are the same bits.

fn quad_row(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

@compute @workgroup_size(WG)
fn rmsnorm_forward_q(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = quad_row(wid, nwg, lid);
    if (row >= params.rows) { return; }
    let dq = params.dim / 4u;
    let base = row * dq;
    var ss = 0.0;
    for (var q = 0u; q < dq; q++) {
        let v = x4[base + q];
        ss = ss + v.x * v.x;
        ss = ss + v.y * v.y;
        ss = ss + v.z * v.z;
        ss = ss + v.w * v.w;
    }
    let r = 1.0 / sqrt(ss / f32(params.dim) + params.eps);
    rstd[row] = r;
    for (var q = 0u; q < dq; q++) {
        y4[base + q] = gain4[q] * (x4[base + q] * r);
    }
}

@compute @workgroup_size(WG)
fn rmsnorm_backward_dx_q(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = quad_row(wid, nwg, lid);
    if (row >= params.rows) { return; }
    let dq = params.dim / 4u;
    let base = row * dq;
    var s = 0.0;
    for (var q = 0u; q < dq; q++) {
        let xv = x4[base + q];
        let gd = gain4[q] * dy4[base + q];
        s = s + xv.x * gd.x;
        s = s + xv.y * gd.y;
        s = s + xv.z * gd.z;
        s = s + xv.w * gd.w;
    }
    let r = rstd_in[row];
    let c = (r * r * r / f32(params.dim)) * s;
    for (var q = 0u; q < dq; q++) {
        let g = r * (gain4[q] * dy4[base + q]) - c * x4[base + q];
        if (params.flag == 1u) {
            dx4[base + q] = dx4[base + q] + g;
        } else {
            dx4[base + q] = g;
        }
    }
}

// Pass 1 of dγ for dim a multiple of 4: four columns per invocation, each summed over the chunk's
// rows in order as in `rmsnorm_dgain_partial` (the same bits). 1-D grid over chunks·dim/4.
@compute @workgroup_size(WG)
fn rmsnorm_dgain_partial_q(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let item = (wid.y * nwg.x + wid.x) * WG + lid;
    let dq = params.dim / 4u;
    if (item >= params.chunks * dq) {
        return;
    }
    let c = item / dq;
    let i = item - c * dq;
    let r0 = c * params.chunk;
    let r1 = min(r0 + params.chunk, params.rows);
    var s = vec4<f32>();
    for (var r = r0; r < r1; r++) {
        s = s + (dy4[r * dq + i] * x4[r * dq + i]) * rstd_in[r];
    }
    partial4[item] = s;
}

// ---------------------------------------------------------------------------------------------
// The DDL heads folded into the block norm's backward (quads only; `norm::rmsnorm_backward_heads`).
// A delta write's gate z = w_β·c + b_β and value u = W_v a + b_v read the norm's output c and
// input a, so with the write's per-token ∂z_t and ∂u_t (spec 11.1):
//   ∂c_t  = dy_t + ∂z_t w_β               (dy: the sublayer's input gradient)
//   ∂a_t  = RMSNorm backward of ∂c_t + W_vᵀ ∂u_t
//   ∂w_β += Σ_t ∂z_t c_t,  ∂b_β += Σ_t ∂z_t,  ∂W_v += Σ_t ∂u_t a_tᵀ,  ∂b_v += Σ_t ∂u_t,
// with c_t = γ ⊙ (a_t·r_t) recomputed with the forward's operations (the same bits). The norm's
// passes load a and dy anyway, and w_β, W_v (per feature) are uniform loads in the row kernel,
// ∂z_t, ∂u_t (per token) in the column kernel: the heads' own pass over (token, feature) (two
// loads and two stores per element) and its column sums are gone.

// ∂u_t[0..m) as a vec4 (zeros beyond m).
fn head_du(row: u32) -> vec4<f32> {
    let b = row * params.m;
    var u = vec4<f32>(hdu[b], 0.0, 0.0, 0.0);
    if (params.m > 1u) { u.y = hdu[b + 1u]; }
    if (params.m > 2u) { u.z = hdu[b + 2u]; }
    if (params.m > 3u) { u.w = hdu[b + 3u]; }
    return u;
}

@compute @workgroup_size(WG)
fn rmsnorm_backward_dx_qh(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    backward_dx_qh(wid, nwg, lid, true);
}

// w_β and W_v at quad q (the same for every row): loaded by every invocation (`lead` true) or,
// in the `t1g` variant's entry point, by each subgroup's first invocation and broadcast
// (`sg_first4`; llvmpipe runs a load as a loop over its SIMD lanes, uniform address or not).
fn head_w4(lead: bool, i: u32) -> vec4<f32> {
    var w = vec4<f32>();
    if (lead) { w = w_beta4[i]; }
    return sg_first4(w);
}

fn head_wv4(lead: bool, i: u32) -> vec4<f32> {
    var w = vec4<f32>();
    if (lead) { w = w_v4[i]; }
    return sg_first4(w);
}

// Invocations past the last row compute the last row and store nothing (the subgroup
// broadcasts need every invocation of the subgroup).
fn backward_dx_qh(wid: vec3<u32>, nwg: vec3<u32>, lid: u32, lead: bool) {
    let row_grid = quad_row(wid, nwg, lid);
    let live = row_grid < params.rows;
    let row = min(row_grid, params.rows - 1u);
    let dq = params.dim / 4u;
    let base = row * dq;
    let dz = hdz[row];
    let du = head_du(row);
    var s = 0.0;
    for (var q = 0u; q < dq; q++) {
        let xv = x4[base + q];
        let gd = gain4[q] * fma(vec4<f32>(dz), head_w4(lead, q), dy4[base + q]);
        s = s + xv.x * gd.x;
        s = s + xv.y * gd.y;
        s = s + xv.z * gd.z;
        s = s + xv.w * gd.w;
    }
    let r = rstd_in[row];
    let c = (r * r * r / f32(params.dim)) * s;
    for (var q = 0u; q < dq; q++) {
        var g = r * (gain4[q] * fma(vec4<f32>(dz), head_w4(lead, q), dy4[base + q])) - c * x4[base + q];
        for (var j = 0u; j < 4u; j++) {
            if (j < params.m) { g = fma(vec4<f32>(du[j]), head_wv4(lead, j * dq + q), g); }
        }
        if (live) {
            if (params.flag == 1u) {
                dx4[base + q] = dx4[base + q] + g;
            } else {
                dx4[base + q] = g;
            }
        }
    }
}

// dγ's chunk partials as `rmsnorm_dgain_partial_q` (with ∂c = dy + ∂z w_β), and the heads'
// chunk partials of the same chunk and four features. Items: chunk c, quad i < dq, at
// c·dq + i. A row's r, ∂z and ∂u are the same in every
// invocation of a chunk but each invocation loads them itself: the subgroup-shared form of these
// loads (the first invocation of a subgroup loading, `subgroupBroadcast` sharing) came out wrong
// on llvmpipe (Mesa 22.3.6, LLVM 15) on an AVX-512 host with 4- and 8-lane subgroups while the
// same code with its broadcast vector's components in another order was right: a miscompile,
// docs/TESTING.md "Other subgroup sizes"; the row kernel above keeps its shared weight loads.
@compute @workgroup_size(WG)
fn rmsnorm_dgain_partial_qh(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let item = (wid.y * nwg.x + wid.x) * WG + lid;
    let dq = params.dim / 4u;
    let c = item / dq;
    if (c >= params.chunks) {
        return;
    }
    let i = item - c * dq;
    let r0 = c * params.chunk;
    let r1 = min(r0 + params.chunk, params.rows);
    let wb = w_beta4[i];
    let gq = gain4[i];
    var s = vec4<f32>();
    var s_wb = vec4<f32>();
    var s_bb = 0.0;
    var s_wv: array<vec4<f32>, 4>;
    var s_bv = vec4<f32>();
    for (var r = r0; r < r1; r++) {
        let xv = x4[r * dq + i];
        let rr = rstd_in[r];
        let dz = hdz[r];
        let du = head_du(r);
        s = s + (fma(vec4<f32>(dz), wb, dy4[r * dq + i]) * xv) * rr;
        s_wb = fma(vec4<f32>(dz), gq * (xv * rr), s_wb);
        s_bb += dz;
        for (var j = 0u; j < 4u; j++) {
            s_wv[j] = fma(vec4<f32>(du[j]), xv, s_wv[j]);
        }
        s_bv += du;
    }
    partial4[c * dq + i] = s;
    let e0 = 4u * i;
    let pw = c * params.s_wb + e0;
    for (var e = 0u; e < 4u; e++) { hpart[pw + e] = s_wb[e]; }
    for (var j = 0u; j < 4u; j++) {
        if (j < params.m) {
            let pv = params.o_wv + c * params.s_wv + j * params.dim + e0;
            for (var e = 0u; e < 4u; e++) { hpart[pv + e] = s_wv[j][e]; }
        }
    }
    if (i == 0u) {
        hpart[params.o_bb + c * params.s_bb] = s_bb;
        for (var j = 0u; j < 4u; j++) {
            if (j < params.m) { hpart[params.o_bv + c * params.s_bv + j] = s_bv[j]; }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Vec teams (the GPU form `norm_vec`; `team` variant): dim a multiple of 4, teams of
// params.team invocations (a power of two), lane `lane` of a team owning the quads
// q = lane + j·team, j < VC. A row's quads are loaded once and kept in registers between the
// passes (the team kernels above load each element twice and one float at a time).
// The launcher picks a team with dim/4 ≤ VC·team.
const VC: u32 = 4u;

// y = γ ⊙ x·r, one row per team.
@compute @workgroup_size(WG)
fn rmsnorm_forward_v(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let team = params.team;
    let dq = params.dim / 4u;
    let slot = lid / team;
    let lane = lid - slot * team;
    let row = (wid.y * nwg.x + wid.x) * (WG / team) + slot;
    let valid = row < params.rows;
    let base = row * dq;
    var xs: array<vec4<f32>, VC>;
    var ss = 0.0;
    for (var j = 0u; j < VC; j++) {
        let q = lane + j * team;
        if (valid && q < dq) {
            let v = x4[base + q];
            xs[j] = v;
            ss = ss + v.x * v.x;
            ss = ss + v.y * v.y;
            ss = ss + v.z * v.z;
            ss = ss + v.w * v.w;
        }
    }
    let total = team_sum(ss, lid, lane, slot);
    let r = 1.0 / sqrt(total / f32(params.dim) + params.eps);
    if (valid) {
        if (lane == 0u) {
            rstd[row] = r;
        }
        for (var j = 0u; j < VC; j++) {
            let q = lane + j * team;
            if (q < dq) {
                y4[base + q] = gain4[q] * (xs[j] * r);
            }
        }
    }
}

// The backward in one pass: each team walks the `chunk` rows of one chunk in order, writing (or
// adding, params.flag = 1) dx per row as `rmsnorm_backward_dx` does and summing the chunk's dγ
// partials dy·x·r per quad in its registers (`rmsnorm_dgain_partial_q`'s sums), stored at the
// end: x and dy are read once for both.
@compute @workgroup_size(WG)
fn rmsnorm_backward_v(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let team = params.team;
    let dq = params.dim / 4u;
    let slot = lid / team;
    let lane = lid - slot * team;
    let c = (wid.y * nwg.x + wid.x) * (WG / team) + slot;
    let live = c < params.chunks;
    let r0 = c * params.chunk;
    var gq: array<vec4<f32>, VC>;
    var acc: array<vec4<f32>, VC>;
    for (var j = 0u; j < VC; j++) {
        let q = lane + j * team;
        if (live && q < dq) {
            gq[j] = gain4[q];
        }
    }
    // The same trip count in every team (the reductions' barriers); rows past the end idle.
    for (var i = 0u; i < params.chunk; i++) {
        let row = r0 + i;
        let valid = live && row < params.rows;
        let base = row * dq;
        var r = 0.0;
        if (valid) {
            r = rstd_in[row];
        }
        var xs: array<vec4<f32>, VC>;
        var gd: array<vec4<f32>, VC>;
        var s = 0.0;
        for (var j = 0u; j < VC; j++) {
            let q = lane + j * team;
            if (valid && q < dq) {
                let xv = x4[base + q];
                let dyv = dy4[base + q];
                let g = gq[j] * dyv;
                xs[j] = xv;
                gd[j] = g;
                s = s + xv.x * g.x;
                s = s + xv.y * g.y;
                s = s + xv.z * g.z;
                s = s + xv.w * g.w;
                acc[j] = acc[j] + (dyv * xv) * r;
            }
        }
        let total = team_sum(s, lid, lane, slot);
        if (valid) {
            let cr = (r * r * r / f32(params.dim)) * total;
            for (var j = 0u; j < VC; j++) {
                let q = lane + j * team;
                if (q < dq) {
                    let g = r * gd[j] - cr * xs[j];
                    if (params.flag == 1u) {
                        dx4[base + q] = dx4[base + q] + g;
                    } else {
                        dx4[base + q] = g;
                    }
                }
            }
        }
        // The next row's partials overwrite red[]: every lane has read this row's total.
        workgroupBarrier();
    }
    if (live) {
        for (var j = 0u; j < VC; j++) {
            let q = lane + j * team;
            if (q < dq) {
                partial4[c * dq + q] = acc[j];
            }
        }
    }
}
