// Rotary position embedding, half-split ("NeoX") convention over the full head dim (spec 3.1
// step 2). x, y: [rows, heads, head_dim]; row r (a token) has position pos0 + r % seq_len.
// For i < h/2 with (c, s) = table[pos, i] = (cos φ, sin φ), φ = pos·θ_i:
//   forward:  y[i] = x[i]·c − x[i+h/2]·s,    y[i+h/2] = x[i]·s + x[i+h/2]·c
//   backward: dx[i] = dy[i]·c + dy[i+h/2]·s,  dx[i+h/2] = −dy[i]·s + dy[i+h/2]·c  (rotation by −φ)
// The cos/sin table [max_pos, h/2, 2] is computed on the host in f64: no transcendentals here.
// Bindings: src is x (forward) or dy (backward), dst is y or dx.
// Grid: 1-D over rows·heads·(h/2) pairs, split over x and y (wid.y·nwg.x + wid.x).
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
    return bitcast<f32>(0x7fc00000u);
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
