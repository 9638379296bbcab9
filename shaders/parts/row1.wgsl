// One row of a [.., m] state as a WGSL type (`Row`), m = 1; `row4`/`from4` convert rows of
// m ≤ 4 to and from a vec4<f32> (zeros beyond m). Prepended to variants by src/shaders.rs.
alias Row = array<f32, 1>;
fn row4(r: Row) -> vec4<f32> { return vec4<f32>(r[0], 0.0, 0.0, 0.0); }
fn from4(v: vec4<f32>) -> Row { return Row(v.x); }
