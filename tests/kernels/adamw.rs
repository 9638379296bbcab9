//! Tests of `shaders/adamw.wgsl` (to be written).
