//! The GPU runtime: adapter choice and limits, tensors, the pipeline cache, command recording,
//! readback and timestamp profiling. It knows nothing of models.

mod compile_check;
mod context;
mod describe;
mod error;
mod kernel;
mod recorder;
mod runtime_dir;
mod tensor;

pub use compile_check::CompileReport;
pub use context::{AdapterSummary, AllocStats, BackendChoice, Gpu, GpuOptions, install_hint};
#[cfg(feature = "native")]
pub use context::{adapter_for_local_rank, enumerate_adapters};
pub use error::GpuError;
pub use kernel::{Binding, BindingKind, Dispatch, Kernel};
pub use recorder::{KernelTime, Op, Profiler, Recorder, timeline};
pub use runtime_dir::use_private_runtime_dir;
pub use tensor::{DType, DeviceBuffer, RangeReader, Readback, Tensor, View, Wait};

/// Runs `f`, a future that never waits (written once for both [`Wait`] modes and given
/// [`Wait::Block`]), to its end on this thread. Panics if it would wait: a blocking read given
/// [`Wait::Await`] is a bug of the caller, not a condition of the device.
pub fn now<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("gpu::now: the future waited; await it (Wait::Await) instead"),
    }
}

/// Result type of the runtime.
pub type Result<T, E = GpuError> = std::result::Result<T, E>;

/// Invocations per workgroup of every 1-D elementwise kernel (`@workgroup_size(256)`).
pub const WG_1D: u32 = 256;

/// Workgroup counts for a 1-D kernel over `n` items with `per_group` items per workgroup, split
/// over x and y so that no dimension exceeds `max_per_dim` (the shader linearises
/// `wid.y * nwg.x + wid.x` and bounds-checks).
pub fn grid_1d(n: u64, per_group: u32, max_per_dim: u32) -> [u32; 3] {
    let groups = n.div_ceil(per_group as u64).max(1);
    let max = max_per_dim.max(1) as u64;
    if groups <= max {
        [groups as u32, 1, 1]
    } else {
        let y = groups.div_ceil(max);
        let x = groups.div_ceil(y);
        [x as u32, y as u32, 1]
    }
}

#[cfg(test)]
mod tests {
    use super::grid_1d;

    #[test]
    fn grid_1d_covers_every_item_within_the_per_dimension_limit() {
        for &(n, per, max) in &[
            (1u64, 256u32, 65535u32),
            (256, 256, 65535),
            (257, 256, 65535),
            (65535 * 256 + 1, 256, 65535),
            (10_000_000_000, 256, 65535),
            (1000, 1, 40),
        ] {
            let g = grid_1d(n, per, max);
            assert!(g[0] <= max && g[1] <= max, "{g:?}");
            assert!(g[0] as u64 * g[1] as u64 * per as u64 >= n, "{n} {g:?}");
        }
    }
}
