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
pub mod testing;
pub mod tokenizer;
pub mod train;
