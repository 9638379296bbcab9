// Operand B stored in f32 and rounded to half precision as it is read (as part `matmul_b_r16`),
// for the cooperative-matrix staging with its quads in flight held as f16 (variant `coop128vq`:
// `RawB` is f16, converted by the hardware's conversion as each quad arrives — half the
// registers of `matmul_b_r16`'s f32 quads, the same f16 values).
enable f16;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(5) var<storage, read> b4: array<vec4<f32>>;
fn ldb(i: u32) -> f32 { return round_f16(b[i]); }
fn ldb4(q: u32) -> vec4<f32> { return round_f16x4(b4[q]); }
alias RawB = vec4<f16>;
fn ldb_raw(i: u32) -> f16 { return f16(b[i]); }
fn ldb4_raw(q: u32) -> RawB { return vec4<f16>(b4[q]); }
fn raw_b_h(v: RawB) -> vec4<f16> { return v; }
