// The cross-entropy backward writing the gradient over the logits: each invocation overwrites
// only the logits it reads, after its row's sums (the renormalisation pass ends at a barrier).
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;
fn put_dl(i: u32, v: f32) { logits[i] = v; }
