use thiserror::Error;

/// Everything the runtime can fail with. Messages name the problem and what to do.
#[derive(Debug, Error)]
pub enum GpuError {
    #[error("no GPU adapter found{backends}. {hint}")]
    NoAdapter { backends: String, hint: String },

    #[error("no adapter matches '{requested}'. Adapters found:\n{available}{hint}")]
    AdapterNotFound { requested: String, available: String, hint: String },

    #[error("unknown backend '{0}': expected one of vulkan, metal, dx12, gl")]
    UnknownBackend(String),

    #[error("could not open the device on adapter '{adapter}': {reason}")]
    RequestDevice { adapter: String, reason: String },

    #[error(
        "{what} needs {needed} bytes but the adapter '{adapter}' allows at most {max} bytes per \
         {limit}"
    )]
    TooLarge { what: String, needed: u64, max: u64, limit: &'static str, adapter: String },

    #[error("shader '{shader}': {reason}")]
    Shader { shader: String, reason: String },

    #[error("kernel '{kernel}': {reason}")]
    Binding { kernel: String, reason: String },

    #[error("reading back '{what}' failed: {reason}")]
    Readback { what: String, reason: String },

    #[error("the GPU reported an error: {0}")]
    Device(String),

    #[error(
        "{0}. Nothing more can run on this device: restart the program (a training run continues from its \
         last checkpoint with `ddl train --resume DIR`)"
    )]
    DeviceLost(String),

    #[error("{0}. Lower the batch size or sequence length, or use a smaller model")]
    OutOfMemory(String),

    #[error("shape error: {0}")]
    Shape(String),

    /// What this adapter (or model) cannot do, with the remedy.
    #[error("{0}")]
    Unsupported(String),

    #[error("{0}. Fix or unset DDL_FORMS (`ddl info` lists the kernel forms and their keys)")]
    Forms(String),
}
