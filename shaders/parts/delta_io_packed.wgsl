// The delta forward's head weights and saves packed into two buffers, for adapters with fewer
// storage buffers per shader stage than the split form's 15 (WebGPU's default is 8, Chrome's
// SwiftShader grants 10): 9 in all. The launcher's caller copies the heads in and the saves out
// (`model::layers::write`).
//   heads_in  = [w_β (d) | b_β (1) | W_v (m·d, row-major) | b_v (m)]
//   saves_out = [1/n (n) | β (n) | v (n·m) | δ (n·m)]
@group(0) @binding(39) var<storage, read> heads_in: array<f32>;
@group(0) @binding(40) var<storage, read_write> saves_out: array<f32>;

fn hw_beta(i: u32) -> f32 { return heads_in[i]; }
fn hb_beta() -> f32 { return heads_in[params.d]; }
fn hw_v(e: u32) -> f32 { return heads_in[params.d + 1u + e]; }
fn hb_v(j: u32) -> f32 { return heads_in[params.d + 1u + MM * params.d + j]; }
fn hw_beta4(q: u32) -> vec4<f32> {
    let b = 4u * q;
    return vec4<f32>(heads_in[b], heads_in[b + 1u], heads_in[b + 2u], heads_in[b + 3u]);
}
// Quad e of W_v seen as [m, d/4] vec4s: elements 4e … 4e + 3.
fn hw_v4(e: u32) -> vec4<f32> {
    let b = params.d + 1u + 4u * e;
    return vec4<f32>(heads_in[b], heads_in[b + 1u], heads_in[b + 2u], heads_in[b + 3u]);
}
fn put_value(t: u32, j: u32, vj: f32, dj: f32) {
    let n = params.n;
    saves_out[2u * n + t * MM + j] = vj;
    saves_out[2u * n + n * MM + t * MM + j] = dj;
}
fn put_token(t: u32, rn: f32, bt: f32) {
    saves_out[t] = rn;
    saves_out[params.n + t] = bt;
}
