//! Tests of `shaders/norm.wgsl` (to be written).
