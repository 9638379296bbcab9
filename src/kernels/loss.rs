//! Launchers for `shaders/loss.wgsl` (to be implemented).
