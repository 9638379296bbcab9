// Not WGSL that validates: a float assigned to a u32 (the portability check must reject it).
@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }
