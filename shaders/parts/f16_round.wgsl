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
        // Below 2^-14, f16's subnormals: multiples q · 2^-24 of 2^-24. |x| · 2^24 is the 24-bit
        // significand m shifted right by s = 126 − E (E the biased exponent, s ≥ 14), rounded to
        // nearest even by integers too: llvmpipe compiled `round(x · 2^24)` rounding some ties
        // away from zero, and losing −0's sign, in some shaders and not in others. Below 2^-25
        // (E < 102, f32 subnormals included) everything rounds to ±0.
        let e = ax >> 23u;
        var q = 0u;
        if (e >= 102u) {
            let m = (ax & 0x007fffffu) | 0x00800000u;
            let s = 126u - e;
            q = m >> s;
            let rem = m & ((1u << s) - 1u);
            let half = 1u << (s - 1u);
            q += select(0u, 1u, rem > half || (rem == half && (q & 1u) == 1u));
        }
        // q ≤ 1024: the product is exact, and a normal f32.
        return bitcast<f32>((u & 0x80000000u) | bitcast<u32>(f32(q) * 5.9604644775390625e-8));
    }
    let r = (ax + 0x0fffu + ((ax >> 13u) & 1u)) & 0xffffe000u;
    return bitcast<f32>((u & 0x80000000u) | select(r, 0x7f800000u, r >= 0x47800000u));
}
fn round_f16x4(x: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(round_f16(x.x), round_f16(x.y), round_f16(x.z), round_f16(x.w));
}
