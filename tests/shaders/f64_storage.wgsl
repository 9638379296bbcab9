// Valid WGSL for naga (with every capability) that Metal cannot express: 64-bit floats.
@group(0) @binding(0) var<storage, read_write> o: array<f64>;
@compute @workgroup_size(1) fn main() { o[0] = o[0] * 2.0lf; }
