// SwiGLU gating (spec 3.2, 11.5): out = silu(gate) ⊙ up, and its backward.
// Grid: 1-D over elements, split over x and y (the launcher uses grid_1d); one element per
// invocation (the `*4` entry points: four, as vec4s, with the same arithmetic per element). The sigmoid is computed from e = exp(−|g|) ∈ (0, 1], so neither σ(g) nor 1 − σ(g)
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
// The same tensors four elements at a time (the `*4` entry points: n a multiple of 4).
@group(0) @binding(7) var<storage, read> gate4: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read> up4: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> out4: array<vec4<f32>>;
@group(0) @binding(10) var<storage, read> dout4: array<vec4<f32>>;
@group(0) @binding(11) var<storage, read_write> dgate4: array<vec4<f32>>;
@group(0) @binding(12) var<storage, read_write> dup4: array<vec4<f32>>;
// The forward's output stored in half precision (`swiglu_forward4_h`, `--precision f16`): four
// f16 values per vec2 of words, element 4i in the low half of word 2i. Rounded to nearest even
// by `round_f16` (part f16_round, in front of this file) before packing, so the packing is
// exact: the same f16 values a product reading the f32 output as f16 operands sees.
@group(0) @binding(13) var<storage, read_write> outh: array<vec2<u32>>;

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

// `sigmoid_pair` of four values: (σ(g), 1 − σ(g)) per component, the same operations.
struct Pair4 {
    s: vec4<f32>,
    t: vec4<f32>,
}

fn sigmoid_pair4(g: vec4<f32>) -> Pair4 {
    let e = exp(-abs(g));
    let a = 1.0 / (1.0 + e);
    let b = e / (1.0 + e);
    let pos = g >= vec4<f32>(0.0);
    return Pair4(select(b, a, pos), select(a, b, pos));
}

// silu(gate) ⊙ up of quad i (`swiglu_forward4`, `swiglu_forward4_h`).
fn swiglu4(i: u32) -> vec4<f32> {
    let g = gate4[i];
    let s = sigmoid_pair4(g);
    return (g * s.s) * up4[i];
}

@compute @workgroup_size(256)
fn swiglu_forward4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= params.n / 4u) {
        return;
    }
    out4[i] = swiglu4(i);
}

// `swiglu_forward4` with its output rounded to f16 and packed (`outh`).
@compute @workgroup_size(256)
fn swiglu_forward4_h(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= params.n / 4u) {
        return;
    }
    let o = round_f16x4(swiglu4(i));
    outh[i] = vec2<u32>(pack2x16float(o.xy), pack2x16float(o.zw));
}

@compute @workgroup_size(256)
fn swiglu_backward4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= params.n / 4u) {
        return;
    }
    let g = gate4[i];
    let u = up4[i];
    let dy = dout4[i];
    let s = sigmoid_pair4(g);
    dup4[i] = dy * (g * s.s);
    dgate4[i] = (dy * u) * (s.s * (1.0 + g * s.t));
}
