//! Deterministic reductions (`shaders/reduce.wgsl`): the sum of squares of a flat buffer (the
//! global gradient norm before clipping) and column sums of a row-major matrix (bias and gain
//! gradients summed over tokens).
//!
//! Both sum in an order fixed by the sizes alone (sequential per invocation, then a fixed tree per
//! workgroup, then the same again over the per-workgroup partials), so results are bit-identical
//! run to run. Buffers larger than the adapter's `max_storage_buffer_binding_size` are bound in
//! aligned chunks; [`sum_squares`] chunks at whole blocks, so its bits do not depend on the
//! chunking either.

use super::gcd;
use crate::gpu::{DType, Dispatch, Gpu, GpuError, Result, Tensor, View, grid_1d};

/// Most rows [`col_sum`] adds with one invocation per column in order (`col_sum_seq*`, no
/// workgroup tree): the K pieces of a split product and other short stacks of partials (16), and
/// on CPU adapters, where a workgroup barrier costs more than a hundred loads, the chunk partials
/// of gain and head gradients too (128: tiny's head sums 1.9–2.6 → 0.8–1.0 ms per step, the dγ
/// sums 0.9–1.2 → 0.5–0.7 ms, docs/PERF-LOG.md): the device's `col_sum_seq` form (0 sends every sum
/// through the tree).
pub fn seq_rows(gpu: &Gpu) -> usize {
    gpu.forms.col_sum_seq_rows
}

/// Whether [`sum_squares`] sums each block (n a multiple of 4) with one invocation in order
/// (`sum_squares_seq4`; CPU adapters, where the workgroup tree's barriers cost more than the
/// block's loads, docs/PERF-LOG.md) rather than with a workgroup and a tree.
/// The device's `sum_squares_seq` form.
pub fn seq_blocks(gpu: &Gpu) -> bool {
    gpu.forms.sum_squares_seq
}

/// Elements one `sum_squares_partial` / `sum_partial` workgroup reduces (`BLOCK` in the shader).
pub const BLOCK: usize = 4096;

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    out_base: u32,
    rows: u32,
    cols: u32,
    ct: u32,
    rpb: u32,
    ctiles: u32,
    nblocks: u32,
    out_block0: u32,
    accumulate: u32,
    _pad0: u32,
    _pad1: u32,
}

/// `min_storage_buffer_offset_alignment` in 4-byte elements: sub-views must start at multiples.
pub(crate) fn align_elems(gpu: &Gpu) -> usize {
    (gpu.limits.min_storage_buffer_offset_alignment as usize / 4).max(1)
}

/// The most 4-byte elements one storage binding may hold, rounded down to a multiple of `quantum`.
pub(crate) fn binding_elems(gpu: &Gpu, quantum: usize) -> usize {
    let max = (gpu.limits.max_storage_buffer_binding_size / 4) as usize;
    // Indices inside a binding are u32 in the shaders.
    let max = max.min(u32::MAX as usize);
    max / quantum * quantum
}

/// `(start, len)` ranges covering `[0, n)` with at most `max` elements each (`max ≥ 1`).
pub(crate) fn chunks(n: usize, max: usize) -> Vec<(usize, usize)> {
    let max = max.max(1);
    (0..n.div_ceil(max)).map(|i| (i * max, max.min(n - i * max))).collect()
}

/// The error for a chunk size too small for the data (or a binding too small for the adapter).
pub(crate) fn chunk_too_small(gpu: &Gpu, what: String, needed: usize, max: usize) -> GpuError {
    GpuError::TooLarge {
        what,
        needed: needed as u64 * 4,
        max: max as u64 * 4,
        limit: "storage binding (chunk)",
        adapter: gpu.info.name.clone(),
    }
}

/// `Err(Shape)` unless the view `name` holds at least `need` elements.
pub(crate) fn check_len(op: &str, name: &str, v: &View, need: usize, what: &str) -> Result<()> {
    if v.len() < need {
        return Err(GpuError::Shape(format!(
            "{op}: '{name}' needs {need} elements ({what}), the view has {}",
            v.len()
        )));
    }
    Ok(())
}

/// `Err(Shape)` when a buffer one dispatch writes is also bound as another of its buffers: wgpu
/// cannot bind one buffer both read-write and read-only (or twice read-write) in a dispatch.
pub(crate) fn check_distinct(
    op: &str,
    writes: &[(&str, &wgpu::Buffer)],
    reads: &[(&str, &wgpu::Buffer)],
) -> Result<()> {
    for (i, (w, wb)) in writes.iter().enumerate() {
        for (o, ob) in writes[..i].iter().chain(reads) {
            if std::ptr::eq(*wb, *ob) {
                return Err(GpuError::Shape(format!(
                    "{op}: '{w}' and '{o}' are views of the same buffer; a buffer the kernel \
                     writes must be a separate buffer"
                )));
            }
        }
    }
    Ok(())
}

fn dispatch(gpu: &Gpu, entry: &str, p: &Params, src: View, dst: View, wg: [u32; 3]) -> Result<Dispatch> {
    gpu.kernel("reduce", None, entry)?.dispatch(gpu, Some(bytemuck::bytes_of(p)), &[("src", src), ("dst", dst)], wg)
}

/// `out[0]` (written) = Σ x² over the first `n` elements of `x`, deterministically. `x` may be
/// larger than one storage binding. Scratch: one partial per 4096 elements.
pub fn sum_squares(gpu: &Gpu, x: &Tensor, n: usize, out: View) -> Result<Vec<Dispatch>> {
    sum_squares_chunked(gpu, x, n, out, binding_elems(gpu, BLOCK))
}

/// [`sum_squares`] binding `x` in chunks of at most `max_chunk` elements (rounded down to a
/// multiple of [`BLOCK`]); for testing the chunking without a huge buffer.
#[doc(hidden)]
pub fn sum_squares_chunked(gpu: &Gpu, x: &Tensor, n: usize, out: View, max_chunk: usize) -> Result<Vec<Dispatch>> {
    const OP: &str = "sum_squares";
    if n > x.len() {
        return Err(GpuError::Shape(format!("{OP}: '{}' needs {n} elements, the tensor has {}", x.label, x.len())));
    }
    check_len(OP, "out", &out, 1, "one scalar")?;
    check_distinct(OP, &[("out", out.buffer)], &[("x", &x.buffer)])?;
    let max_chunk = (max_chunk / BLOCK * BLOCK).min(binding_elems(gpu, BLOCK));
    if max_chunk == 0 {
        return Err(chunk_too_small(gpu, format!("{OP} chunk"), BLOCK, max_chunk));
    }
    let maxdim = gpu.limits.max_compute_workgroups_per_dimension;
    let nblocks = n.div_ceil(BLOCK).max(1);
    let xv = x.view();
    let out = out.sub(0, 1);
    // Four elements per load where n is a multiple of 4 (chunks start on whole blocks).
    let v4 = n.is_multiple_of(4);
    // On CPU adapters one invocation sums a block in order (no 9-barrier tree per block).
    let seq = v4 && seq_blocks(gpu);
    // One partial per block either way: a workgroup per block, or (in order) 32 blocks per
    // workgroup of one invocation each.
    let partial = |p: &Params, src: View<'_>, dst: View<'_>| -> Result<Dispatch> {
        let per_group = if seq { 32 * BLOCK } else { BLOCK };
        let wg = grid_1d(p.n as u64, per_group as u32, maxdim);
        if seq {
            let k = gpu.kernel("reduce", None, "sum_squares_seq4")?;
            k.dispatch(gpu, Some(bytemuck::bytes_of(p)), &[("src4", src), ("dst", dst)], wg)
        } else if v4 {
            let k = gpu.kernel("reduce", None, "sum_squares_partial4")?;
            k.dispatch(gpu, Some(bytemuck::bytes_of(p)), &[("src4", src), ("dst", dst)], wg)
        } else {
            dispatch(gpu, "sum_squares_partial", p, src, dst, wg)
        }
    };
    if nblocks == 1 {
        let p = Params { n: n as u32, ..Default::default() };
        return Ok(vec![partial(&p, xv.sub(0, n), out)?]);
    }
    let mut ds = Vec::new();
    let partials = Tensor::zeros(gpu, "sum_squares.partials", &[nblocks], DType::F32)?;
    for (start, len) in chunks(n, max_chunk) {
        let p = Params { n: len as u32, out_base: (start / BLOCK) as u32, ..Default::default() };
        let mut d = partial(&p, xv.sub(start, len), partials.view())?;
        d.scratch.push(partials.clone());
        ds.push(d);
    }
    ds.extend(sum_levels(gpu, partials, nblocks, out)?);
    Ok(ds)
}

/// Sums the first `m` values of `cur` into `out[0]`, one level of partials at a time.
fn sum_levels(gpu: &Gpu, mut cur: Tensor, mut m: usize, out: View) -> Result<Vec<Dispatch>> {
    let maxdim = gpu.limits.max_compute_workgroups_per_dimension;
    let mut ds = Vec::new();
    loop {
        let next = m.div_ceil(BLOCK);
        let p = Params { n: m as u32, ..Default::default() };
        let wg = grid_1d(m as u64, BLOCK as u32, maxdim);
        if next == 1 {
            let mut d = dispatch(gpu, "sum_partial", &p, cur.view().sub(0, m), out, wg)?;
            d.scratch.push(cur);
            ds.push(d);
            return Ok(ds);
        }
        let t = Tensor::zeros(gpu, "sum.partials", &[next], DType::F32)?;
        let mut d = dispatch(gpu, "sum_partial", &p, cur.view().sub(0, m), t.view(), wg)?;
        d.scratch.extend([cur, t.clone()]);
        ds.push(d);
        cur = t;
        m = next;
    }
}

/// The operand checks of the column sums: `x` holds `[rows, cols]`, `out` `cols`, and they are
/// different buffers. Returns rows · cols.
fn check_col_sum(op: &str, x: &View, out: &View, rows: usize, cols: usize) -> Result<usize> {
    let total = rows * cols;
    check_len(op, "x", x, total, &format!("rows {rows} × cols {cols}"))?;
    check_len(op, "out", out, cols, &format!("cols {cols}"))?;
    check_distinct(op, &[("out", out.buffer)], &[("x", x.buffer)])?;
    Ok(total)
}

/// `out[c]` (written, or added to when `accumulate`) = Σ_r x[r, c] for a row-major
/// `[rows, cols]` matrix, in a fixed order. One dispatch for up to a few thousand rows (in row
/// order per column for up to [`seq_rows`] rows, else a workgroup tree), two (per-block partials,
/// then their sum) beyond; `x` may exceed one storage binding.
pub fn col_sum(gpu: &Gpu, x: View, out: View, rows: usize, cols: usize, accumulate: bool) -> Result<Vec<Dispatch>> {
    col_sum_chunked(gpu, x, out, rows, cols, accumulate, binding_elems(gpu, 1))
}

/// [`col_sum`] binding `x` in chunks of at most `max_chunk` elements; for testing the chunking.
#[doc(hidden)]
pub fn col_sum_chunked(
    gpu: &Gpu,
    x: View,
    out: View,
    rows: usize,
    cols: usize,
    accumulate: bool,
    max_chunk: usize,
) -> Result<Vec<Dispatch>> {
    const OP: &str = "col_sum";
    let total = check_col_sum(OP, &x, &out, rows, cols)?;
    if cols == 0 {
        return Ok(Vec::new());
    }
    let max_chunk = max_chunk.min(binding_elems(gpu, 1));
    let maxdim = gpu.limits.max_compute_workgroups_per_dimension;
    let ct = cols.next_power_of_two().min(64);
    let lanes = 256 / ct;
    let ctiles = cols.div_ceil(ct);
    let out = out.sub(0, cols);
    let base = Params {
        rows: rows as u32,
        cols: cols as u32,
        ct: ct as u32,
        ctiles: ctiles as u32,
        nblocks: 1,
        accumulate: accumulate as u32,
        ..Default::default()
    };
    if rows <= seq_rows(gpu) && total <= max_chunk {
        // Few rows, many columns: one invocation per column (or vec4 of columns), no tree.
        return col_sum_in_order(gpu, x, out, rows, cols, accumulate);
    }
    if rows <= lanes * 32 && total <= max_chunk {
        let p = Params { rpb: rows.max(1) as u32, ..base };
        let wg = grid_1d(ctiles as u64, 1, maxdim);
        return Ok(vec![dispatch(gpu, "col_sum", &p, x.sub(0, total), out, wg)?]);
    }
    // Blocks of `rpb` rows (at least 16 rows per lane, at most ~256 blocks), then one block over
    // the partials. When chunking, a chunk is whole blocks that start at aligned offsets.
    let mut rpb = (lanes * 16).max(rows.div_ceil(256));
    let chunk_rows = if total <= max_chunk {
        rows
    } else {
        let unit = align_elems(gpu) / gcd(cols, align_elems(gpu));
        rpb = rpb.div_ceil(unit) * unit;
        (max_chunk / cols) / rpb * rpb
    };
    if chunk_rows == 0 {
        return Err(chunk_too_small(gpu, format!("{OP} chunk of {rpb} rows × {cols} cols"), rpb * cols, max_chunk));
    }
    let nblocks = rows.div_ceil(rpb);
    if nblocks * cols > binding_elems(gpu, 1) {
        return Err(chunk_too_small(
            gpu,
            format!("{OP} partials [{nblocks}, {cols}]"),
            nblocks * cols,
            binding_elems(gpu, 1),
        ));
    }
    let partials = Tensor::zeros(gpu, "col_sum.partials", &[nblocks * cols], DType::F32)?;
    let mut ds = Vec::new();
    for (r0, cr) in chunks(rows, chunk_rows) {
        let nb = cr.div_ceil(rpb);
        let p = Params {
            rows: cr as u32,
            rpb: rpb as u32,
            nblocks: nb as u32,
            out_block0: (r0 / rpb) as u32,
            accumulate: 0,
            ..base
        };
        let wg = grid_1d((ctiles * nb) as u64, 1, maxdim);
        let mut d = dispatch(gpu, "col_sum", &p, x.sub(r0 * cols, cr * cols), partials.view(), wg)?;
        d.scratch.push(partials.clone());
        ds.push(d);
    }
    let p = Params { rows: nblocks as u32, rpb: nblocks as u32, ..base };
    let wg = grid_1d(ctiles as u64, 1, maxdim);
    let mut d = dispatch(gpu, "col_sum", &p, partials.view(), out, wg)?;
    d.scratch.push(partials);
    ds.push(d);
    Ok(ds)
}

/// `out[c]` (+)= Σ_r x[r·cols + c] added in row order (r = 0, 1, …, from 0.0; then `+ out[c]` when
/// accumulating): one invocation per column, or per 4 columns as a vec4 when `cols % 4 == 0`, no
/// workgroup memory. The same bits as a sequential loop over the rows; for any number of rows,
/// but each invocation walks all of them, so [`col_sum`] uses it for few rows only. `x` must fit
/// one storage binding.
pub fn col_sum_in_order(
    gpu: &Gpu,
    x: View,
    out: View,
    rows: usize,
    cols: usize,
    accumulate: bool,
) -> Result<Vec<Dispatch>> {
    const OP: &str = "col_sum_in_order";
    let total = check_col_sum(OP, &x, &out, rows, cols)?;
    if cols == 0 {
        return Ok(Vec::new());
    }
    if total > binding_elems(gpu, 1) {
        return Err(chunk_too_small(gpu, format!("{OP} of {rows} rows × {cols} cols"), total, binding_elems(gpu, 1)));
    }
    let p = Params { rows: rows as u32, cols: cols as u32, accumulate: accumulate as u32, ..Default::default() };
    let vec4 = cols.is_multiple_of(4);
    let (entry, n) = if vec4 { ("col_sum_seq4", cols / 4) } else { ("col_sum_seq", cols) };
    let wg = grid_1d(n.div_ceil(64) as u64, 1, gpu.limits.max_compute_workgroups_per_dimension);
    let (src, dst) = if vec4 { ("src4", "dst4") } else { ("src", "dst") };
    let k = gpu.kernel("reduce", None, entry)?;
    Ok(vec![k.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &[(src, x.sub(0, total)), (dst, out.sub(0, cols))], wg)?])
}
