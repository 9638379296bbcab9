// One AdamW step with global-norm gradient clipping, over flat buffers (golden README section 4):
//   scale = min(1, grad_clip / (sqrt(norm_sq) + clip_eps))     (1 when grad_clip = 0)
//   g = grad · scale
//   θ = θ · (1 − lr·wd)                         only where decay_mask[i / 64] != 0 (decoupled)
//   m = β1·m + (1 − β1)·g ;  v = β2·v + (1 − β2)·g²
//   θ = θ − step_size · m / (sqrt(v) / bc2_sqrt + eps)
// with step_size = lr / (1 − β1^t) and bc2_sqrt = sqrt(1 − β2^t) computed on the host in f64.
// `norm_sq` is Σ g² over all parameters, written on the GPU by reduce::sum_squares, so no host
// round trip is needed. Grid: 1-D over elements, 256 per workgroup, split over x and y.

struct Params {
    // Everything up to clip_eps depends only on the config and step: set_step rewrites it.
    step_size: f32,
    bc2_sqrt: f32,
    decay: f32,           // 1 − lr·weight_decay
    beta1: f32,
    beta2: f32,
    one_minus_beta1: f32,
    one_minus_beta2: f32,
    eps: f32,
    grad_clip: f32,       // 0 = no clipping
    clip_eps: f32,
    inv_scale: f32,       // 1 / the factor the gradients carry (dynamic loss scaling; 1 = none)
    n: u32,               // elements in this dispatch (chunk)
    _pad0: u32, _pad1: u32, _pad2: u32, _pad3: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> param: array<f32>;
@group(0) @binding(2) var<storage, read> grad: array<f32>;
@group(0) @binding(3) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(4) var<storage, read_write> exp_avg_sq: array<f32>;
@group(0) @binding(5) var<storage, read> decay_mask: array<u32>;
@group(0) @binding(6) var<storage, read> norm_sq: array<f32>;
// The same four buffers four elements at a time (`adamw_step4`: a chunk of a multiple of 4).
@group(0) @binding(7) var<storage, read_write> param4: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read> grad4: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> exp_avg4: array<vec4<f32>>;
@group(0) @binding(10) var<storage, read_write> exp_avg_sq4: array<vec4<f32>>;

// The factor the stored gradients are multiplied by: the unscaling 1/S (gradients carry the loss
// scale S) times the clipping factor min(1, grad_clip / (‖g‖/S + clip_eps)) (1 without
// clipping); −1 when the gradient norm is not finite (an overflow: the step must change nothing).
// With S = 1 both products by inv_scale are exact, so the unscaled path keeps its bits.
fn clip_factor() -> f32 {
    let ns = norm_sq[0];
    if ((bitcast<u32>(ns) & 0x7f800000u) == 0x7f800000u) {
        return -1.0;
    }
    if (params.grad_clip > 0.0) {
        return min(1.0, params.grad_clip / (sqrt(ns) * params.inv_scale + params.clip_eps)) * params.inv_scale;
    }
    return params.inv_scale;
}

@compute @workgroup_size(256)
fn adamw_step(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= p.n) {
        return;
    }
    // A non-finite gradient norm (inf or NaN: exponent bits all ones) means this step's gradients
    // are unusable: leave parameters and moments untouched, so no corrupt state is ever written.
    let clip = clip_factor();
    if (clip < 0.0) {
        return;
    }
    let g = grad[i] * clip;
    var theta = param[i];
    if (decay_mask[i / 64u] != 0u) {
        theta = theta * p.decay;
    }
    let m = p.beta1 * exp_avg[i] + p.one_minus_beta1 * g;
    let v = p.beta2 * exp_avg_sq[i] + p.one_minus_beta2 * (g * g);
    theta = theta - p.step_size * (m / (sqrt(v) / p.bc2_sqrt + p.eps));
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = theta;
}

// adamw_step for four consecutive elements per invocation (the chunk's length a multiple of 4):
// the same operations per element, so the same bits. The four share their decay-mask word (words
// cover 64 elements, chunks start on word boundaries).
@compute @workgroup_size(256)
fn adamw_step4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i >= p.n / 4u) {
        return;
    }
    let clip = clip_factor();
    if (clip < 0.0) {
        return;
    }
    let g = grad4[i] * clip;
    var theta = param4[i];
    if (decay_mask[i / 16u] != 0u) {
        theta = theta * p.decay;
    }
    let m = p.beta1 * exp_avg4[i] + p.one_minus_beta1 * g;
    let v = p.beta2 * exp_avg_sq4[i] + p.one_minus_beta2 * (g * g);
    theta = theta - p.step_size * (m / (sqrt(v) / p.bc2_sqrt + p.eps));
    exp_avg4[i] = m;
    exp_avg_sq4[i] = v;
    param4[i] = theta;
}
