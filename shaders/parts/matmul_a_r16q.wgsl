// Operand A stored in f32 and rounded to half precision as it is read (as part `matmul_a_r16`),
// for the cooperative-matrix staging with its quads in flight held as f16 (variant `coop128vq`:
// `RawA` is f16, converted by the hardware's conversion as each quad arrives — half the
// registers of `matmul_a_r16`'s f32 quads, the same f16 values).
enable f16;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(4) var<storage, read> a4: array<vec4<f32>>;
fn lda(i: u32) -> f32 { return round_f16(a[i]); }
fn lda4(q: u32) -> vec4<f32> { return round_f16x4(a4[q]); }
alias RawA = vec4<f16>;
fn lda_raw(i: u32) -> f16 { return f16(a[i]); }
fn lda4_raw(q: u32) -> RawA { return vec4<f16>(a4[q]); }
fn raw_a_h(v: RawA) -> vec4<f16> { return v; }
