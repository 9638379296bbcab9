// Operand A stored in half precision (offsets and strides count f16 elements; SHADER_F16).
enable f16;
@group(0) @binding(1) var<storage, read> a: array<f16>;
@group(0) @binding(4) var<storage, read> a4: array<vec4<f16>>;
fn lda(i: u32) -> f32 { return f32(a[i]); }
fn lda4(q: u32) -> vec4<f32> { return vec4<f32>(a4[q]); }
// For staging into f16 storage: the stored values (`RawA`: already f16).
alias RawA = vec4<f16>;
fn lda_raw(i: u32) -> f16 { return a[i]; }
fn lda4_raw(q: u32) -> RawA { return a4[q]; }
fn raw_a_h(v: RawA) -> vec4<f16> { return v; }
