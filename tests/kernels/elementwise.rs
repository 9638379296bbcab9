//! Tests of `shaders/elementwise.wgsl` (to be written).
