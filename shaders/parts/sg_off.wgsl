// No subgroup operations (adapters without them): every invocation loads.
fn sg_first(v: f32) -> f32 { return v; }
fn sg_first4(v: vec4<f32>) -> vec4<f32> { return v; }
