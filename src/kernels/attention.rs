//! Launchers for `shaders/attention.wgsl` (to be implemented).
