// Operand B stored in f32 and rounded to half precision as it is read (an f16 operand
// computed in f32 elsewhere), by round_f16 (parts/f16_round.wgsl), not f32(f16(x)).
enable f16;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(5) var<storage, read> b4: array<vec4<f32>>;
fn ldb(i: u32) -> f32 { return round_f16(b[i]); }
fn ldb4(q: u32) -> vec4<f32> { return round_f16x4(b4[q]); }
// For staging into f16 storage (the cooperative-matrix kernels): the stored f32 values, held
// raw while in flight (`RawB`), then converted by the hardware's conversion, which rounds to the
// nearest f16 (the value stays f16, so nothing folds the rounding away; one instruction per pair
// against round_f16's dozen); their self-tests check it against the rounding above.
alias RawB = vec4<f32>;
fn ldb_raw(i: u32) -> f32 { return b[i]; }
fn ldb4_raw(q: u32) -> RawB { return b4[q]; }
fn raw_b_h(v: RawB) -> vec4<f16> { return vec4<f16>(v); }
