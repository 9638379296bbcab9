// The saved state X stored in half precision (m = 4, SHADER_F16); every sum and product stays
// f32 (the float32 islands of spec 10.3).
enable f16;
alias XRow = vec4<f16>;
alias XS = f16;
fn xin(r: XRow) -> Row { return Row(r); }
fn xout(r: Row) -> XRow { return XRow(r); }
