//! Tests of `shaders/attention.wgsl` (to be written).
