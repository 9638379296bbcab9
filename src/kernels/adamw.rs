//! Launchers for `shaders/adamw.wgsl` (to be implemented).
