// The saved state X stored as computed: `XRow` / `XS` are its row and element types, `xin` /
// `xout` convert a row to and from `Row`.
alias XRow = Row;
alias XS = f32;
fn xin(r: XRow) -> Row { return r; }
fn xout(r: Row) -> XRow { return r; }
