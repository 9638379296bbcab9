//! Launchers for `shaders/embedding.wgsl` (to be implemented).
