// The RMSNorm heads-backward row kernel with subgroup-shared weight loads (variant `t1g`).
@compute @workgroup_size(WG)
fn rmsnorm_backward_dx_qhg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {
    backward_dx_qh(wid, nwg, lid, sid == 0u);
}
