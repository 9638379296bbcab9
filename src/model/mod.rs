//! The DDL models: configuration, parameters, and the GPU forward/backward of every variant.

pub mod config;
pub mod params;

pub use config::{ConfigError, ModelConfig, VActName, Variant};
pub use params::{Init, Layout, ParamSpec};
pub mod gpu_model;
pub use gpu_model::{MemoryPlan, Model, Program, memory_plan, memory_plan_with};
pub mod decode;
pub use decode::DecodeCache;
