// Operand B stored in f32 and rounded to half precision as it is read (an f16 operand
// computed in f32 elsewhere), by round_f16 (parts/f16_round.wgsl), not f32(f16(x)).
enable f16;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(5) var<storage, read> b4: array<vec4<f32>>;
fn ldb(i: u32) -> f32 { return round_f16(b[i]); }
fn ldb4(q: u32) -> vec4<f32> { return round_f16x4(b4[q]); }
// For staging into f16 storage: see parts/matmul_a_r16.wgsl.
fn ldb_h(i: u32) -> f16 { return f16(b[i]); }
fn ldb4_h(q: u32) -> vec4<f16> { return vec4<f16>(b4[q]); }
