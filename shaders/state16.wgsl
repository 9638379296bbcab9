// The f16 saved state (`--f16-state`): X⁰ = replicate(e) written as half-precision rows of m = 4
// (the other state writes and reads are the `…h` variants of delta.wgsl and shortconv.wgsl).
// Needs SHADER_F16; kept in its own file so that adapters without it never compile it.
enable f16;

struct Params {
    count: u32,   // rows [n·d]
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> e: array<f32>;
@group(0) @binding(2) var<storage, read_write> x0h: array<vec4<f16>>;

const WG: u32 = 256u;

// X⁰[t, i, j] = e[t, i] for j < 4, rounded to f16 once.
@compute @workgroup_size(256)
fn replicate_forward4_h(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let o = (wid.y * nwg.x + wid.x) * WG + lid;
    if (o >= params.count) { return; }
    x0h[o] = vec4<f16>(f16(e[o]));
}
