// Operand A stored in f32 and rounded to half precision as it is read (an f16 operand
// computed in f32 elsewhere), by round_f16 (parts/f16_round.wgsl), not f32(f16(x)).
enable f16;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(4) var<storage, read> a4: array<vec4<f32>>;
fn lda(i: u32) -> f32 { return round_f16(a[i]); }
fn lda4(q: u32) -> vec4<f32> { return round_f16x4(a4[q]); }
// For staging into f16 storage (the cooperative-matrix kernels): the conversion rounds to the
// nearest f16 (the hardware's, not folded away: the value stays f16), one instruction against
// round_f16's dozen; their self-test checks it against the rounding above.
fn lda_h(i: u32) -> f16 { return f16(a[i]); }
fn lda4_h(q: u32) -> vec4<f16> { return vec4<f16>(a4[q]); }
