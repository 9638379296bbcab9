//! Launchers for `shaders/delta.wgsl` (to be implemented).
