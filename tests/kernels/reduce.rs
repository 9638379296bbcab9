//! Tests of `shaders/reduce.wgsl` (to be written).
