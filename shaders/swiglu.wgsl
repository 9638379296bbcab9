// SwiGLU gating (spec 3.2, 11.5): out = silu(gate) ⊙ up, and its backward.
// Grid: 1-D over elements, split over x and y (the launcher uses grid_1d); one element per
// invocation. The sigmoid is computed from e = exp(−|g|) ∈ (0, 1], so neither σ(g) nor 1 − σ(g)
// overflows or cancels for large |g|.

struct Params {
    n: u32,        // elements
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> dout: array<f32>;
@group(0) @binding(5) var<storage, read_write> dgate: array<f32>;
@group(0) @binding(6) var<storage, read_write> dup: array<f32>;

// (σ(g), 1 − σ(g)), both accurate for any finite g.
fn sigmoid_pair(g: f32) -> vec2<f32> {
    let e = exp(-abs(g));
    let a = 1.0 / (1.0 + e);   // σ(|g|)
    let b = e / (1.0 + e);     // 1 − σ(|g|) = σ(−|g|)
    if (g >= 0.0) {
        return vec2<f32>(a, b);
    }
    return vec2<f32>(b, a);
}

@compute @workgroup_size(256)
fn swiglu_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= params.n) {
        return;
    }
    let g = gate[i];
    let s = sigmoid_pair(g);
    out[i] = (g * s.x) * up[i];
}

@compute @workgroup_size(256)
fn swiglu_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= params.n) {
        return;
    }
    let g = gate[i];
    let u = up[i];
    let dy = dout[i];
    let s = sigmoid_pair(g);
    // dup = dy · silu(g);  dgate = dy · u · σ(g) · (1 + g · (1 − σ(g)))
    dup[i] = dy * (g * s.x);
    dgate[i] = (dy * u) * (s.x * (1.0 + g * s.y));
}
