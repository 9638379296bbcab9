// The softmax steps' outputs in place (`attention_rows`, variant `f32`): P over the scores in
// `s`, dS over dP in `g`, each as computed; the products read them from there.
fn put_p(i: u32, v: vec4<f32>) { s[i] = v; }
fn put_ds(i: u32, v: vec4<f32>) { g[i] = v; }
// P of vec4 i (row vec4 j of a row that sees `lim` keys) once put_p wrote it: read back.
fn p_again(i: u32, j: u32, lim: u32, ls: f32) -> vec4<f32> { return s[i]; }
