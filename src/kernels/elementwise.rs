//! Elementwise helpers (`shaders/elementwise.wgsl`): `y += x` and `x *= alpha` over flat f32
//! buffers of any length, bound in aligned chunks when larger than one storage binding.

use crate::bench::KernelBench;
use crate::gpu::{DType, Dispatch, Gpu, Result, Tensor, View, WG_1D, grid_1d};
use crate::kernels::reduce::{align_elems, binding_elems, check_distinct, check_len, chunks};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    alpha: f32,
    _pad0: u32,
    _pad1: u32,
}

fn launch(
    gpu: &Gpu,
    entry: &str,
    x: Option<View>,
    y: View,
    alpha: f32,
    n: usize,
    max_chunk: usize,
) -> Result<Vec<Dispatch>> {
    let k = gpu.kernel("elementwise", None, entry)?;
    let maxdim = gpu.limits.max_compute_workgroups_per_dimension;
    let q = align_elems(gpu);
    let max_chunk = (max_chunk / q * q).max(q).min(binding_elems(gpu, q));
    chunks(n, max_chunk)
        .into_iter()
        .map(|(start, len)| {
            let p = Params { n: len as u32, alpha, _pad0: 0, _pad1: 0 };
            let mut bufs = vec![("y", y.sub(start, len))];
            if let Some(x) = x {
                bufs.push(("x", x.sub(start, len)));
            }
            k.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &bufs, grid_1d(len as u64, WG_1D, maxdim))
        })
        .collect()
}

/// `y[i] += x[i]` for `i < n`.
pub fn add(gpu: &Gpu, x: View, y: View, n: usize) -> Result<Vec<Dispatch>> {
    add_chunked(gpu, x, y, n, binding_elems(gpu, align_elems(gpu)))
}

/// [`add`] with at most `max_chunk` elements per binding (rounded down to the offset alignment);
/// for testing the chunking.
#[doc(hidden)]
pub fn add_chunked(gpu: &Gpu, x: View, y: View, n: usize, max_chunk: usize) -> Result<Vec<Dispatch>> {
    check_len("add", "x", &x, n, "n")?;
    check_len("add", "y", &y, n, "n")?;
    check_distinct("add", &[("y", y.buffer)], &[("x", x.buffer)])?;
    launch(gpu, "add", Some(x), y, 0.0, n, max_chunk)
}

/// `x[i] *= alpha` for `i < n`, in place.
pub fn scale(gpu: &Gpu, x: View, alpha: f32, n: usize) -> Result<Vec<Dispatch>> {
    scale_chunked(gpu, x, alpha, n, binding_elems(gpu, align_elems(gpu)))
}

/// [`scale`] with at most `max_chunk` elements per binding; for testing the chunking.
#[doc(hidden)]
pub fn scale_chunked(gpu: &Gpu, x: View, alpha: f32, n: usize, max_chunk: usize) -> Result<Vec<Dispatch>> {
    check_len("scale", "x", &x, n, "n")?;
    launch(gpu, "scale", None, x, alpha, n, max_chunk)
}

/// Benchmark cases for `ddl bench kernels`: a residual add and a gradient scale over `[N, d]`.
pub fn bench(gpu: &Gpu) -> Result<Vec<KernelBench>> {
    let s = crate::bench::BENCH_SHAPE;
    let n = s.b * s.t * s.d;
    let x = Tensor::zeros(gpu, "bench.x", &[n], DType::F32)?;
    let y = Tensor::zeros(gpu, "bench.y", &[n], DType::F32)?;
    let mut a = add(gpu, x.view(), y.view(), n)?;
    a[0].scratch.extend([x, y.clone()]);
    let mut sc = scale(gpu, y.view(), 0.5, n)?;
    sc[0].scratch.push(y);
    Ok(vec![
        KernelBench {
            name: format!("add (y += x) N={} d={}", s.b * s.t, s.d),
            dispatches: a,
            flops: n as f64,
            bytes: 12.0 * n as f64,
        },
        KernelBench {
            name: format!("scale (x *= a) N={} d={}", s.b * s.t, s.d),
            dispatches: sc,
            flops: n as f64,
            bytes: 8.0 * n as f64,
        },
    ])
}
