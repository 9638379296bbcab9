//! Tests of `shaders/swiglu.wgsl` (to be written).
