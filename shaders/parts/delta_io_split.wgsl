// The delta forward's head weights and saves in bindings of their own (`delta.wgsl`'s w_beta,
// b_beta, w_v, b_v, and v_out, delta_out, rnorm_out, beta_out): 15 storage buffers in all.
fn hw_beta(i: u32) -> f32 { return w_beta[i]; }
fn hb_beta() -> f32 { return b_beta[0]; }
fn hw_v(e: u32) -> f32 { return w_v[e]; }
fn hb_v(j: u32) -> f32 { return b_v[j]; }
fn hw_beta4(q: u32) -> vec4<f32> { return w_beta4[q]; }
fn hw_v4(e: u32) -> vec4<f32> { return w_v4[e]; }
fn put_value(t: u32, j: u32, vj: f32, dj: f32) {
    v_out[t * MM + j] = vj;
    delta_out[t * MM + j] = dj;
}
fn put_token(t: u32, rn: f32, bt: f32) {
    rnorm_out[t] = rn;
    beta_out[t] = bt;
}
