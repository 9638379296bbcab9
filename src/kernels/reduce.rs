//! Launchers for `shaders/reduce.wgsl` (to be implemented).
