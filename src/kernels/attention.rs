//! Launchers for `shaders/attention.wgsl` (to be implemented).

use crate::bench::KernelBench;
use crate::gpu::{Gpu, Result};

/// Benchmark cases for `ddl bench kernels` at the `shakespeare-char` shapes.
pub fn bench(_gpu: &Gpu) -> Result<Vec<KernelBench>> {
    Ok(Vec::new())
}
