//! Launchers for `shaders/norm.wgsl` (to be implemented).
