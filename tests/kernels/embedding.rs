//! Tests of `shaders/embedding.wgsl` (to be written).
