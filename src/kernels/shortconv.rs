//! Launchers for `shaders/shortconv.wgsl` (to be implemented).
