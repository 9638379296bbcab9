//! Tests of `shaders/shortconv.wgsl` (to be written).
