//! `ddl`: a wgpu/WGSL engine that trains, runs and explains Deep Delta Learning language models.

#[cfg(feature = "native")]
pub mod bench;
#[cfg(feature = "native")]
pub mod chat;
#[cfg(feature = "native")]
pub mod experiment;
pub mod generate;
#[cfg(feature = "native")]
pub mod golden;
pub mod gpu;
pub mod kernels;
pub mod model;
pub mod presets;
pub mod shaders;
pub mod stats;
pub mod testing;
pub mod tokenizer;
#[cfg(feature = "native")]
pub mod train;
/// Without `native` (the browser): only the checkpoint format, read from bytes in memory.
#[cfg(not(feature = "native"))]
pub mod train {
    pub mod checkpoint;
}

/// The commit this build of the engine was made from, and whether its tree had uncommitted
/// changes ("clean", "dirty" or "unknown" without git).
pub fn build_commit() -> (&'static str, &'static str) {
    (env!("DDL_GIT_COMMIT"), env!("DDL_GIT_DIRTY"))
}
