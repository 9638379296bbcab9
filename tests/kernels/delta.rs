//! Tests of `shaders/delta.wgsl` (to be written).
