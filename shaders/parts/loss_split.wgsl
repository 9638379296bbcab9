// The cross-entropy shader's logits read-only, its backward's gradient in a buffer of its own.
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(9) var<storage, read_write> dlogits: array<f32>;
fn put_dl(i: u32, v: f32) { dlogits[i] = v; }
