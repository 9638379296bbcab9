// RMSNorm with gain (spec 0, 11.5): y = γ ⊙ x·r, r = 1/sqrt(mean(x²) + ε), over the last axis.
//
// Row kernels (forward, dx): a workgroup of 256 invocations is split into teams of `team`
// invocations (a power of two chosen by the launcher from `dim` alone); each team owns one row.
// A lane sums its strided elements sequentially, then the team reduces in workgroup memory with
// a fixed binary tree: the summation order depends only on `dim`, never on timing.
// Grid: 1-D over workgroups of 256/team rows each, split over x and y (wid.y·nwg.x + wid.x).
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
}

const WG: u32 = 256u;

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

@compute @workgroup_size(256)
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
@compute @workgroup_size(256)
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
@compute @workgroup_size(256)
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

@compute @workgroup_size(256)
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

@compute @workgroup_size(256)
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
@compute @workgroup_size(256)
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
