//! The DDL models: configuration, parameters, and the GPU forward/backward of every variant.
//!
//! - [`config`], [`params`]: the spec's shapes, names and initialisation;
//! - [`model`]: the parameters, gradients and moments on a device;
//! - [`acts`]: what a program allocates (activations, saves, gradient scratch);
//! - `layers`: forward/backward pairs per layer, recorded as bound dispatches;
//! - [`program`]: training and forward-only programs (closed; [`Parts`] choose what runs);
//! - [`decode`]: the forward-only decode program over an explicit cache;
//! - [`memory`]: the analytic memory plan.

pub mod acts;
pub mod config;
pub mod decode;
pub mod intervene;
pub(crate) mod layers;
pub mod memory;
#[allow(clippy::module_inception)]
pub mod model;
pub mod params;
pub mod program;

pub use acts::{Acts, Inner, STATS_BETA, Sub, SubKind, WriteSaves, head_chunk_used};
pub use config::{ConfigError, ModelConfig, VActName, Variant};
pub use decode::{DecodeCache, DecodeProgram};
pub use intervene::{Intervention, InterventionError, Interventions};
pub use layers::Objective;
pub use memory::{
    HEAD_CHUNK_ADVICE, Limits, MemoryPlan, Storage, batch_advice, fit_advice, host_available_bytes, largest_batch,
    largest_fitting_batch, memory_plan, memory_plan_for, memory_plan_with, parse_bytes,
};
pub use model::{Model, Precision};
pub use params::{Init, Layout, ParamSpec};
pub use program::{LensRows, Parts, Program, Scoring, beta_means_of};

/// The optimizer settings of a training step.
pub use crate::kernels::adamw::AdamWConfig;
