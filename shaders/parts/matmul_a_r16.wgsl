// Operand A stored in f32 and rounded to half precision as it is read (an f16 operand
// computed in f32 elsewhere; SHADER_F16).
enable f16;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(4) var<storage, read> a4: array<vec4<f32>>;
fn lda(i: u32) -> f32 { return f32(f16(a[i])); }
fn lda4(q: u32) -> vec4<f32> { return vec4<f32>(vec4<f16>(a4[q])); }
