//! Tests of `shaders/rope.wgsl` (to be written).
