// One row of a [.., m] state, m = 4: a vector (one load per row).
alias Row = vec4<f32>;
fn row4(r: Row) -> vec4<f32> { return r; }
fn from4(v: vec4<f32>) -> Row { return v; }
