//! Tests of `shaders/expand.wgsl` (to be written).
