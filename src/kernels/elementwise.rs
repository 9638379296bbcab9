//! Launchers for `shaders/elementwise.wgsl` (to be implemented).
