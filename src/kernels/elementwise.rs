//! Elementwise helpers (`shaders/elementwise.wgsl`): `y += x` and `x *= alpha` over flat f32
//! buffers of any length, bound in aligned chunks when larger than one storage binding, and a
//! strided row copy.

use crate::gpu::{Dispatch, Gpu, Result, View, WG_1D, grid_1d};
use crate::kernels::reduce::{align_elems, binding_elems, check_distinct, check_len, chunks};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    alpha: f32,
    cols: u32,
    xs: u32,
    ys: u32,
    x_off: u32,
    y_off: u32,
    _pad: u32,
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
            let p = Params { n: len as u32, alpha, cols: 1, xs: 1, ys: 1, x_off: 0, y_off: 0, _pad: 0 };
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

/// `y[r·y_stride + c] = x[r·x_stride + c]` for `r < rows`, `c < cols`: a row-major matrix into
/// a buffer with another row stride (elements of `y` between rows are left as they are);
/// `x_stride` 0 copies x's one row to every row of y. Matrices larger than one storage binding
/// are copied in row chunks.
pub fn copy_rows(
    gpu: &Gpu,
    x: View,
    y: View,
    rows: usize,
    cols: usize,
    x_stride: usize,
    y_stride: usize,
) -> Result<Vec<Dispatch>> {
    copy_rows_chunked(gpu, x, y, rows, cols, x_stride, y_stride, binding_elems(gpu, 1))
}

/// [`copy_rows`] with bindings of at most `max_chunk` elements; for testing the chunking.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn copy_rows_chunked(
    gpu: &Gpu,
    x: View,
    y: View,
    rows: usize,
    cols: usize,
    x_stride: usize,
    y_stride: usize,
    max_chunk: usize,
) -> Result<Vec<Dispatch>> {
    if rows == 0 || cols == 0 || (x_stride < cols && x_stride != 0) || y_stride < cols {
        return Err(crate::gpu::GpuError::Shape(format!(
            "copy_rows: {rows}x{cols} with row strides {x_stride} (x) and {y_stride} (y): every size must be ≥ 1, \
             y's stride ≥ cols and x's ≥ cols or 0 (one row copied to every row)"
        )));
    }
    check_len("copy_rows", "x", &x, (rows - 1) * x_stride + cols, "(rows−1)·x_stride + cols")?;
    check_len("copy_rows", "y", &y, (rows - 1) * y_stride + cols, "(rows−1)·y_stride + cols")?;
    check_distinct("copy_rows", &[("y", y.buffer)], &[("x", x.buffer)])?;
    let k = gpu.kernel("elementwise", None, "copy_rows")?;
    let (align, max) = (align_elems(gpu), max_chunk.min(binding_elems(gpu, 1)));
    // Rows per dispatch: both sub-views (from an aligned start at or below the first row) fit.
    let stride = x_stride.max(y_stride);
    if align + cols > max {
        return Err(crate::kernels::reduce::chunk_too_small(
            gpu,
            format!("copy_rows row of {cols}"),
            align + cols,
            max,
        ));
    }
    let per = ((max - align - cols) / stride + 1).min(rows).min(u32::MAX as usize / cols);
    let maxdim = gpu.limits.max_compute_workgroups_per_dimension;
    chunks(rows, per)
        .into_iter()
        .map(|(r0, rc)| {
            let (xo, yo) = (r0 * x_stride, r0 * y_stride);
            let (xa, ya) = (xo / align * align, yo / align * align);
            let xv = x.sub(xa, xo - xa + (rc - 1) * x_stride + cols);
            let yv = y.sub(ya, yo - ya + (rc - 1) * y_stride + cols);
            let n = rc * cols;
            let p = Params {
                n: n as u32,
                alpha: 0.0,
                cols: cols as u32,
                xs: x_stride as u32,
                ys: y_stride as u32,
                x_off: (xo - xa) as u32,
                y_off: (yo - ya) as u32,
                _pad: 0,
            };
            k.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &[("y", yv), ("x", xv)], grid_1d(n as u64, WG_1D, maxdim))
        })
        .collect()
}

/// `y` (u32 words, two f16 each: element 2i in the low half) = `x[..n]` rounded to f16: the
/// parameters' f16 copy of `--precision f16` ([`crate::model::Model::set_precision`]). Bound in
/// aligned chunks when larger than one storage binding.
pub fn pack_f16(gpu: &Gpu, x: View, y: View, n: usize) -> Result<Vec<Dispatch>> {
    pack_f16_chunked(gpu, x, y, n, binding_elems(gpu, align_elems(gpu)))
}

/// [`pack_f16`] with at most `max_chunk` words per binding; for testing the chunking.
#[doc(hidden)]
pub fn pack_f16_chunked(gpu: &Gpu, x: View, y: View, n: usize, max_chunk: usize) -> Result<Vec<Dispatch>> {
    const OP: &str = "pack_f16";
    check_len(OP, "x", &x, n, "n")?;
    check_len(OP, "y", &y, n.div_ceil(2), "ceil(n / 2) words")?;
    check_distinct(OP, &[("y", y.buffer)], &[("x", x.buffer)])?;
    let k = gpu.kernel("elementwise", None, "pack_f16")?;
    let maxdim = gpu.limits.max_compute_workgroups_per_dimension;
    let q = align_elems(gpu);
    // Chunks of whole words whose x part (twice as long) fits a binding too.
    let max_chunk = (max_chunk.min(binding_elems(gpu, q) / 2) / q * q).max(q);
    chunks(n.div_ceil(2), max_chunk)
        .into_iter()
        .map(|(start, words)| {
            let elems = (n - 2 * start).min(2 * words);
            let p = Params { n: elems as u32, alpha: 0.0, cols: 1, xs: 1, ys: 1, x_off: 0, y_off: 0, _pad: 0 };
            let bufs = [("x", x.sub(2 * start, elems)), ("yu", y.sub(start, words))];
            k.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &bufs, grid_1d(words as u64, WG_1D, maxdim))
        })
        .collect()
}
