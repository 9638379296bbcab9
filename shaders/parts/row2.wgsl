// One row of a [.., m] state, m = 2: a vector (one load per row).
alias Row = vec2<f32>;
fn row4(r: Row) -> vec4<f32> { return vec4<f32>(r, 0.0, 0.0); }
fn from4(v: vec4<f32>) -> Row { return v.xy; }
