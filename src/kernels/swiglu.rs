//! Launchers for `shaders/swiglu.wgsl` (to be implemented).
