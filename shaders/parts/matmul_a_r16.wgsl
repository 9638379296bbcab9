// Operand A stored in f32 and rounded to half precision as it is read (an f16 operand
// computed in f32 elsewhere), by round_f16 (parts/f16_round.wgsl), not f32(f16(x)).
enable f16;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(4) var<storage, read> a4: array<vec4<f32>>;
fn lda(i: u32) -> f32 { return round_f16(a[i]); }
fn lda4(q: u32) -> vec4<f32> { return round_f16x4(a4[q]); }
// For staging into f16 storage (the cooperative-matrix kernels): the stored f32 values, held
// raw while in flight (`RawA`), then converted by the hardware's conversion, which rounds to the
// nearest f16 (the value stays f16, so nothing folds the rounding away; one instruction per pair
// against round_f16's dozen); their self-tests check it against the rounding above.
alias RawA = vec4<f32>;
fn lda_raw(i: u32) -> f32 { return a[i]; }
fn lda4_raw(q: u32) -> RawA { return a4[q]; }
fn raw_a_h(v: RawA) -> vec4<f16> { return vec4<f16>(v); }
