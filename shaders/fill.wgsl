// Fill a range of an f32 buffer with one value (given as raw bits, so NaN poisoning works).
// Grid: 1-D over elements, split over x and y so any length fits the 65535-per-dimension limit.

struct Params {
    n: u32,        // elements to write
    offset: u32,   // first element
    bits: u32,     // the f32 value's bit pattern
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn fill(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i < params.n) {
        out[params.offset + i] = bitcast<f32>(params.bits);
    }
}
