// Operand A stored and read in f32.
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(4) var<storage, read> a4: array<vec4<f32>>;
fn lda(i: u32) -> f32 { return a[i]; }
fn lda4(q: u32) -> vec4<f32> { return a4[q]; }
