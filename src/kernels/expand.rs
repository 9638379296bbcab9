//! Launchers for `shaders/expand.wgsl` (to be implemented).
