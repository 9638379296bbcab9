// Rounding an f32 to the nearest f16 value (ties to even), returned as an f32, by integer
// arithmetic. `f32(f16(x))` cannot be trusted for this: NVIDIA's Vulkan compiler folds the pair
// into x (GPU check of 2026-11-27 on an H200: R16 operands were not rounded at all), and WGSL
// lets a conversion of an unrepresentable value round either way. The result is exactly
// representable in f16, so converting it afterwards is exact under any rounding mode.
// NaN and ±inf pass through; magnitudes that round past 65504 become ±inf, as f16 would.
fn round_f16(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    let ax = u & 0x7fffffffu;
    if (ax >= 0x7f800000u) { return x; }
    if (ax < 0x38800000u) {
        // Below 2^-14, f16's subnormals: multiples of 2^-24 (the scalings are exact).
        return round(x * 16777216.0) * 5.9604644775390625e-8;
    }
    let r = (ax + 0x0fffu + ((ax >> 13u) & 1u)) & 0xffffe000u;
    return bitcast<f32>((u & 0x80000000u) | select(r, 0x7f800000u, r >= 0x47800000u));
}
fn round_f16x4(x: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(round_f16(x.x), round_f16(x.y), round_f16(x.z), round_f16(x.w));
}
