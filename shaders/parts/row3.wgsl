// One row of a [.., m] state, m = 3: an array (vec3 has the stride of a vec4).
alias Row = array<f32, 3>;
fn row4(r: Row) -> vec4<f32> { return vec4<f32>(r[0], r[1], r[2], 0.0); }
fn from4(v: vec4<f32>) -> Row { return Row(v.x, v.y, v.z); }
