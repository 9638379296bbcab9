// Rotary position embedding, half-split ("NeoX") convention over the full head dim (spec 3.1
// step 2). x, y: [rows, heads, head_dim]; row r (a token) has position pos0 + r % seq_len.
// For i < h/2 with (c, s) = table[pos, i] = (cos φ, sin φ), φ = pos·θ_i:
//   forward:  y[i] = x[i]·c − x[i+h/2]·s,    y[i+h/2] = x[i]·s + x[i+h/2]·c
//   backward: dx[i] = dy[i]·c + dy[i+h/2]·s,  dx[i+h/2] = −dy[i]·s + dy[i+h/2]·c  (rotation by −φ)
// The cos/sin table [max_pos, h/2, 2] is computed on the host in f64: no transcendentals here.
// Bindings: src is x (forward) or dy (backward), dst is y or dx.
// Grid: 1-D over rows·heads·(h/2) pairs, split over x and y (wid.y·nwg.x + wid.x); the `*4`
// entry points (h/2 a multiple of 4) take four consecutive pairs of one head per invocation as
// vec4s, with the same operations per element.
// A position beyond the table (only possible after a bad `set_pos0`) writes NaN, never reads
// out of bounds.

struct Params {
    pairs: u32,      // rows·heads·half
    half: u32,       // head_dim / 2
    heads: u32,
    seq_len: u32,
    pos0: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read> src: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;
// The same buffers as vec4s, for the `*4` entry points (four pairs per invocation).
@group(0) @binding(4) var<storage, read> table4: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> src4: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> dst4: array<vec4<f32>>;

// (cos φ, sin φ, 1) for pair `item`, or z = 0 when its position lies outside the table.
fn angle(item: u32) -> vec3<f32> {
    let half = params.half;
    let rh = item / half;
    let i = item - rh * half;
    let row = rh / params.heads;
    let pos = params.pos0 + row % params.seq_len;
    let t = (pos * half + i) * 2u;
    if (t + 1u >= arrayLength(&table)) {
        return vec3<f32>(0.0, 0.0, 0.0);
    }
    return vec3<f32>(table[t], table[t + 1u], 1.0);
}

fn nan() -> f32 {
    // Through a variable: a constant NaN is an error in WGSL (Chrome's compiler refuses it).
    var bits = 0x7fc00000u;
    return bitcast<f32>(bits);
}

@compute @workgroup_size(256)
fn rope_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let item = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (item >= params.pairs) {
        return;
    }
    let half = params.half;
    let rh = item / half;
    let i = item - rh * half;
    let a = rh * 2u * half + i;
    let b = a + half;
    let cs = angle(item);
    if (cs.z < 0.5) {
        dst[a] = nan();
        dst[b] = nan();
        return;
    }
    let x0 = src[a];
    let x1 = src[b];
    dst[a] = x0 * cs.x - x1 * cs.y;
    dst[b] = x0 * cs.y + x1 * cs.x;
}

// Same bindings: src holds dy, dst receives dx.
@compute @workgroup_size(256)
fn rope_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let item = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (item >= params.pairs) {
        return;
    }
    let half = params.half;
    let rh = item / half;
    let i = item - rh * half;
    let a = rh * 2u * half + i;
    let b = a + half;
    let cs = angle(item);
    if (cs.z < 0.5) {
        dst[a] = nan();
        dst[b] = nan();
        return;
    }
    let d0 = src[a];
    let d1 = src[b];
    dst[a] = d0 * cs.x + d1 * cs.y;
    dst[b] = d1 * cs.x - d0 * cs.y;
}

// Four consecutive pairs i..i+3 of one head (h/2 a multiple of 4), item4 = its index among
// rows·heads·(h/2)/4: forward (rotation by φ) or backward (by −φ).
fn rope4(item4: u32, backward: bool) {
    let hq = params.half / 4u;
    let rh = item4 / hq;
    let iq = item4 - rh * hq;
    let row = rh / params.heads;
    let pos = params.pos0 + row % params.seq_len;
    let t = (pos * params.half + iq * 4u) / 2u;   // vec4 index of (c_i, s_i, c_i+1, s_i+1)
    let a = rh * 2u * hq + iq;
    let b = a + hq;
    if (t + 2u > arrayLength(&table4)) {
        dst4[a] = vec4<f32>(nan());
        dst4[b] = vec4<f32>(nan());
        return;
    }
    let t0 = table4[t];
    let t1 = table4[t + 1u];
    let c = vec4<f32>(t0.x, t0.z, t1.x, t1.z);
    let sn = vec4<f32>(t0.y, t0.w, t1.y, t1.w);
    let x0 = src4[a];
    let x1 = src4[b];
    if (backward) {
        dst4[a] = x0 * c + x1 * sn;
        dst4[b] = x1 * c - x0 * sn;
    } else {
        dst4[a] = x0 * c - x1 * sn;
        dst4[b] = x0 * sn + x1 * c;
    }
}

@compute @workgroup_size(256)
fn rope_forward4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let item4 = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (item4 >= params.pairs / 4u) {
        return;
    }
    rope4(item4, false);
}

@compute @workgroup_size(256)
fn rope_backward4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let item4 = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (item4 >= params.pairs / 4u) {
        return;
    }
    rope4(item4, true);
}
