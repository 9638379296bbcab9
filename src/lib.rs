//! `ddl`: a wgpu/WGSL engine that trains, runs and explains Deep Delta Learning language models.

pub mod bench;
pub mod chat;
pub mod experiment;
pub mod generate;
pub mod golden;
pub mod gpu;
pub mod kernels;
pub mod model;
pub mod presets;
pub mod shaders;
pub mod stats;
pub mod testing;
pub mod tokenizer;
pub mod train;

/// The commit this build of the engine was made from, and whether its tree had uncommitted
/// changes ("clean", "dirty" or "unknown" without git).
pub fn build_commit() -> (&'static str, &'static str) {
    (env!("DDL_GIT_COMMIT"), env!("DDL_GIT_DIRTY"))
}
