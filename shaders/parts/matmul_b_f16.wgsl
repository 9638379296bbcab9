// Operand B stored in half precision (offsets and strides count f16 elements; SHADER_F16).
enable f16;
@group(0) @binding(2) var<storage, read> b: array<f16>;
@group(0) @binding(5) var<storage, read> b4: array<vec4<f16>>;
fn ldb(i: u32) -> f32 { return f32(b[i]); }
fn ldb4(q: u32) -> vec4<f32> { return vec4<f32>(b4[q]); }
// For staging into f16 storage: the stored values (`RawB`: already f16).
alias RawB = vec4<f16>;
fn ldb_raw(i: u32) -> f16 { return b[i]; }
fn ldb4_raw(q: u32) -> RawB { return b4[q]; }
fn raw_b_h(v: RawB) -> vec4<f16> { return v; }
