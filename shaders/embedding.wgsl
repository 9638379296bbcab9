// Token embedding (spec 4, 11.4): forward gather and deterministic scatter-add backward.
//
// forward: out[r, :] = table[tokens[r], :]; a token id outside [0, vocab) gives a zero row and
// never reads out of bounds. Grid: 1-D over n·d elements (wid.y·nwg.x + wid.x).
//
// Chunked vocabulary (a table larger than one storage binding): one dispatch per chunk of rows
// [v0, v0 + rows), with `table` / `dtable` bound from row v0. A dispatch handles only the ids in
// its chunk (forward: writes nothing for the others; backward: adds nothing for them); the chunk
// with v0 = 0 also writes the zero rows of ids outside [0, vocab). Unchunked: v0 = 0, rows = vocab.
//
// backward: dtable[v, :] += Σ_{r: tokens[r] = v} dout[r, :], summed in increasing r, without
// atomics, from a host-built index (u32 words, see `embedding::build_index`):
//   [0]                      u = number of unique ids
//   [1 .. 1+n)               ids[k], k < u (sorted ascending)
//   [1+n .. 2+2n)            starts[k], k ≤ u: the positions of ids[k] are pos[starts[k] .. starts[k+1])
//   [2+2n .. 2+3n)           pos: token positions sorted stably by id (so increasing r per id)
// One invocation per (slot k, column c) over slots·d with slots = min(n, vocab) ≥ u: the grid
// depends on n, d and vocab only; slots k ≥ u do nothing. Each id's row has exactly one writer.

struct Params {
    n: u32,        // tokens
    d: u32,        // width
    vocab: u32,
    slots: u32,    // backward: min(n, vocab)
    v0: u32,       // first vocabulary row of this dispatch's chunk
    rows: u32,     // rows in the chunk (`table` / `dtable` hold rows·d elements from row v0)
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> tokens: array<i32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> tok_index: array<u32>;
@group(0) @binding(5) var<storage, read> dout: array<f32>;
@group(0) @binding(6) var<storage, read_write> dtable: array<f32>;

@compute @workgroup_size(256)
fn embedding_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    let d = params.d;
    if (i >= params.n * d) {
        return;
    }
    let r = i / d;
    let c = i - r * d;
    let t = tokens[r];
    if (t >= 0 && u32(t) < params.vocab) {
        // u32(t) - v0 wraps to a huge value for ids below the chunk.
        let lr = u32(t) - params.v0;
        if (lr < params.rows) {
            out[i] = table[lr * d + c];
        }
    } else if (params.v0 == 0u) {
        out[i] = 0.0;
    }
}

@compute @workgroup_size(256)
fn embedding_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    let d = params.d;
    let n = params.n;
    if (i >= params.slots * d) {
        return;
    }
    let k = i / d;
    let c = i - k * d;
    let u = min(tok_index[0], params.slots);
    if (k >= u) {
        return;
    }
    let v = tok_index[1u + k];
    let lv = v - params.v0;
    if (v >= params.vocab || lv >= params.rows) {
        return;
    }
    let s0 = tok_index[1u + n + k];
    let s1 = min(tok_index[2u + n + k], n);
    var s = 0.0;
    for (var j = s0; j < s1; j++) {
        let r = tok_index[2u + 2u * n + j];
        if (r < n) {
            s = s + dout[r * d + c];
        }
    }
    dtable[lv * d + c] = dtable[lv * d + c] + s;
}
