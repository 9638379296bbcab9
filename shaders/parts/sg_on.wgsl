// Loads every invocation of a subgroup needs: invocation 0 loads (`lead`), the broadcast shares
// its value with the subgroup.
fn sg_first(v: f32) -> f32 { return subgroupBroadcast(v, 0u); }
fn sg_first4(v: vec4<f32>) -> vec4<f32> { return subgroupBroadcast(v, 0u); }
