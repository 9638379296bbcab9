//! Tests of `shaders/loss.wgsl` (to be written).
