// The `…g` register-block variants: invocation 0 of each subgroup loads the A block and
// broadcasts it; the `mm_*_g` entry points run one-dimensional workgroups of DX·DY invocations
// (x = index % DX), since subgroup builtins need a one-dimensional workgroup.
fn sg_m4(m: mat4x4<f32>) -> mat4x4<f32> {
    return mat4x4<f32>(subgroupBroadcast(m[0], 0u), subgroupBroadcast(m[1], 0u),
                       subgroupBroadcast(m[2], 0u), subgroupBroadcast(m[3], 0u));
}
fn sg_ablk(x: Ablk) -> Ablk { return Ablk(sg_m4(x.a0), sg_m4(x.a1), sg_m4(x.a2), sg_m4(x.a3)); }
@compute @workgroup_size(DX * DY)
fn mm_kk_g(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32, @builtin(subgroup_invocation_id) sid: u32) {
    body_kk(wid, nwg, vec3<u32>(li % DX, li / DX, 0u), sid == 0u);
}
@compute @workgroup_size(DX * DY)
fn mm_kn_g(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32, @builtin(subgroup_invocation_id) sid: u32) {
    body_kn(wid, nwg, vec3<u32>(li % DX, li / DX, 0u), sid == 0u);
}
@compute @workgroup_size(DX * DY)
fn mm_mn_g(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32, @builtin(subgroup_invocation_id) sid: u32) {
    body_mn(wid, nwg, vec3<u32>(li % DX, li / DX, 0u), sid == 0u);
}
@compute @workgroup_size(DX * DY)
fn mm_mk_g(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32, @builtin(subgroup_invocation_id) sid: u32) {
    body_mk(wid, nwg, vec3<u32>(li % DX, li / DX, 0u), sid == 0u);
}
