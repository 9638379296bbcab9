//! Token embedding (`shaders/embedding.wgsl`, spec 4 and 11.4): the forward gather
//! `out[r, :] = table[tokens[r], :]` and the scatter-add backward into the (tied) table gradient.
//!
//! The backward is deterministic without atomics: the host builds an index of the batch's token
//! ids ([`build_index`]: positions sorted stably by id, the unique ids, and where each id's
//! positions start), the caller uploads it into a u32 tensor of [`index_len`]`(n)` words, and
//! one invocation per (unique id, column) sums that id's rows of `dout` in increasing position.
//! The dispatch size depends on `n`, `d` and `vocab` only, so bound dispatches can be replayed
//! every step with a freshly uploaded index.
//!
//! A table larger than the adapter's `max_storage_buffer_binding_size` (GPT-2's 50304 × 768
//! floats is 154 MB, lavapipe binds at most 128 MiB) is bound in chunks of whole rows that start
//! at aligned offsets, one dispatch per chunk; each dispatch handles only the ids in its chunk, so
//! every output element and every gradient row is still written by exactly one invocation with the
//! same arithmetic: the results are bit-identical to the unchunked dispatch.

use crate::gpu::{Dispatch, Gpu, GpuError, Result, View, WG_1D, grid_1d};
use crate::kernels::gcd;
use crate::kernels::reduce::{align_elems, binding_elems, chunk_too_small, chunks};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    d: u32,
    vocab: u32,
    slots: u32,
    v0: u32,
    rows: u32,
    _pad0: u32,
    _pad1: u32,
}

fn check(what: &str, n: usize, d: usize, vocab: usize, views: &[(&str, &View, usize)]) -> Result<Params> {
    if n == 0 || d == 0 || vocab == 0 {
        return Err(GpuError::Shape(format!(
            "{what}: n, d and vocab must be at least 1, got n {n} d {d} vocab {vocab}"
        )));
    }
    let lim = (u32::MAX / 2) as usize;
    for (a, b, name) in [(n, d, "n × d"), (vocab, d, "vocab × d")] {
        if a.checked_mul(b).is_none_or(|x| x > lim) {
            return Err(GpuError::Shape(format!(
                "{what}: {name} = {a} × {b} exceeds the 2^31 elements of one dispatch"
            )));
        }
    }
    if index_len(n) > lim {
        return Err(GpuError::Shape(format!("{what}: n {n} is too large")));
    }
    for (name, v, need) in views {
        super::need(what, name, "", v, *need)?;
    }
    Ok(Params {
        n: n as u32,
        d: d as u32,
        vocab: vocab as u32,
        slots: n.min(vocab) as u32,
        v0: 0,
        rows: vocab as u32,
        _pad0: 0,
        _pad1: 0,
    })
}

/// `(first row, rows)` chunks of a `[vocab, d]` table, each at most `max_chunk` elements (and
/// one storage binding) and starting at an element offset the adapter can bind; one chunk when
/// the whole table fits.
fn vocab_chunks(gpu: &Gpu, what: &str, d: usize, vocab: usize, max_chunk: usize) -> Result<Vec<(usize, usize)>> {
    let max = max_chunk.min(binding_elems(gpu, 1));
    if vocab * d <= max {
        return Ok(vec![(0, vocab)]);
    }
    // Chunks start at multiples of `unit` rows, whose offset `unit·d` is a multiple of the alignment.
    let align = align_elems(gpu);
    let unit = align / gcd(d, align);
    let rows = (max / d) / unit * unit;
    if rows == 0 {
        return Err(chunk_too_small(gpu, format!("{what} chunk of {unit} rows × {d} cols"), unit * d, max));
    }
    Ok(chunks(vocab, rows))
}

/// `out[r, :] = table[tokens[r], :]` for `r < n`; tokens i32 `[n]`, table `[vocab, d]`,
/// out `[n, d]`. A token id outside `[0, vocab)` gives a row of zeros (never an out-of-bounds
/// read); the host is expected to have validated the ids.
pub fn forward(
    gpu: &Gpu,
    tokens: View,
    table: View,
    out: View,
    n: usize,
    d: usize,
    vocab: usize,
) -> Result<Vec<Dispatch>> {
    forward_chunked(gpu, tokens, table, out, n, d, vocab, binding_elems(gpu, 1))
}

/// [`forward`] binding the table in chunks of at most `max_chunk` elements (whole rows at
/// aligned offsets); for testing the chunking without a huge table.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn forward_chunked(
    gpu: &Gpu,
    tokens: View,
    table: View,
    out: View,
    n: usize,
    d: usize,
    vocab: usize,
    max_chunk: usize,
) -> Result<Vec<Dispatch>> {
    let p = check(
        "embedding forward",
        n,
        d,
        vocab,
        &[("tokens", &tokens, n), ("table", &table, vocab * d), ("out", &out, n * d)],
    )?;
    let k = gpu.kernel("embedding", None, "embedding_forward")?;
    let wg = grid_1d((n * d) as u64, WG_1D, gpu.limits.max_compute_workgroups_per_dimension);
    vocab_chunks(gpu, "embedding forward table", d, vocab, max_chunk)?
        .into_iter()
        .map(|(v0, rows)| {
            let p = Params { v0: v0 as u32, rows: rows as u32, ..p };
            let table = table.sub(v0 * d, rows * d);
            k.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &[("tokens", tokens), ("table", table), ("out", out)], wg)
        })
        .collect()
}

/// Words of the backward index for a batch of `n` tokens: `3n + 2` (fixed for a given `n`).
///
/// Layout: `[0]` the number `u` of unique ids; `[1, 1+n)` the unique ids ascending (first `u`
/// used); `[1+n, 2+2n)` row starts (`u + 1` used: id `k`'s positions are
/// `pos[starts[k]..starts[k+1]]`); `[2+2n, 2+3n)` the positions sorted stably by id.
pub fn index_len(n: usize) -> usize {
    3 * n + 2
}

/// Builds the backward index of a batch (see [`index_len`] for the layout). Fails with
/// `GpuError::Shape` naming the position, the id and the vocabulary when an id is outside
/// `[0, vocab)`.
pub fn build_index(tokens: &[i32], vocab: usize) -> Result<Vec<u32>> {
    let n = tokens.len();
    if n > (u32::MAX / 4) as usize {
        return Err(GpuError::Shape(format!("embedding index: {n} tokens is too many for one index")));
    }
    for (r, &t) in tokens.iter().enumerate() {
        if t < 0 || t as usize >= vocab {
            return Err(GpuError::Shape(format!(
                "embedding index: token id {t} at position {r} is outside the vocabulary \
                 [0, {vocab})"
            )));
        }
    }
    let mut pos: Vec<u32> = (0..n as u32).collect();
    // Stable: positions of one id stay in increasing order.
    pos.sort_by_key(|&r| tokens[r as usize]);
    let mut idx = vec![0u32; index_len(n)];
    let (ids_at, starts_at, pos_at) = (1, 1 + n, 2 + 2 * n);
    let mut u = 0;
    for (j, &r) in pos.iter().enumerate() {
        let t = tokens[r as usize] as u32;
        if u == 0 || idx[ids_at + u - 1] != t {
            idx[ids_at + u] = t;
            idx[starts_at + u] = j as u32;
            u += 1;
        }
    }
    for s in &mut idx[starts_at + u..pos_at] {
        *s = n as u32;
    }
    idx[0] = u as u32;
    idx[pos_at..].copy_from_slice(&pos);
    Ok(idx)
}

/// `dtable[v, :] += Σ_{r: tokens[r] = v} dout[r, :]`, summed in increasing `r`; rows of ids
/// not in the batch are untouched. Always accumulates (the tied LM head writes `dtable` first).
/// `index`: u32 `[index_len(n)]` from [`build_index`]; `dout` `[n, d]`; `dtable` `[vocab, d]`.
/// The dispatch size depends on `n`, `d` and `vocab` only (the number of unique ids is read
/// from the index on the GPU).
pub fn backward(
    gpu: &Gpu,
    index: View,
    dout: View,
    dtable: View,
    n: usize,
    d: usize,
    vocab: usize,
) -> Result<Vec<Dispatch>> {
    backward_chunked(gpu, index, dout, dtable, n, d, vocab, binding_elems(gpu, 1))
}

/// [`backward`] binding `dtable` in chunks of at most `max_chunk` elements (whole rows at
/// aligned offsets); for testing the chunking without a huge table. Every chunk's dispatch runs
/// over all `slots` (the ids are on the GPU) and skips the ids outside its rows.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn backward_chunked(
    gpu: &Gpu,
    index: View,
    dout: View,
    dtable: View,
    n: usize,
    d: usize,
    vocab: usize,
    max_chunk: usize,
) -> Result<Vec<Dispatch>> {
    let p = check(
        "embedding backward",
        n,
        d,
        vocab,
        &[("index", &index, index_len(n)), ("dout", &dout, n * d), ("dtable", &dtable, vocab * d)],
    )?;
    let k = gpu.kernel("embedding", None, "embedding_backward")?;
    let wg = grid_1d(p.slots as u64 * d as u64, WG_1D, gpu.limits.max_compute_workgroups_per_dimension);
    vocab_chunks(gpu, "embedding backward dtable", d, vocab, max_chunk)?
        .into_iter()
        .map(|(v0, rows)| {
            let p = Params { v0: v0 as u32, rows: rows as u32, ..p };
            let dtable = dtable.sub(v0 * d, rows * d);
            k.dispatch(
                gpu,
                Some(bytemuck::bytes_of(&p)),
                &[("tok_index", index), ("dout", dout), ("dtable", dtable)],
                wg,
            )
        })
        .collect()
}
