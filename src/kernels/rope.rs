//! Launchers for `shaders/rope.wgsl` (to be implemented).
