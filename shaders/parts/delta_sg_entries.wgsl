// The delta shader's entry points with subgroup-shared loads (the `…s1g` variants only).
@compute @workgroup_size(128)
fn delta_forward_qg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {
    forward_q(wid, nwg, lid, sid == 0u, false);
}
@compute @workgroup_size(128)
fn delta_forward_qgk(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {
    forward_q(wid, nwg, lid, sid == 0u, true);
}
@compute @workgroup_size(128)
fn delta_heads_g(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {
    heads(wid, nwg, lid, sid == 0u);
}
