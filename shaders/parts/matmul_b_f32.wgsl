// Operand B stored and read in f32.
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(5) var<storage, read> b4: array<vec4<f32>>;
fn ldb(i: u32) -> f32 { return b[i]; }
fn ldb4(q: u32) -> vec4<f32> { return b4[q]; }
