//! Cross-entropy loss with label smoothing and ignored targets (`shaders/loss.wgsl`; spec 4,
//! 11.5, 14.7, 14.8).
//!
//! Forward: per row `lse` (saved for the backward) and the row loss
//! `(1−α)(lse − ℓ[y]) + α(lse − mean_c ℓ[c])`, then the mean over the valid rows and their count,
//! both left on the GPU in `out = [mean, count]`. Backward reads the count from `out[1]` on the
//! GPU, so the two need no host round trip. Targets outside `[0, vocab)` (−1 by convention) are
//! ignored: they count in neither the sum nor the count, and get zero gradient.
//!
//! Logits larger than one storage binding (e.g. N·V·4 > 128 MiB with V = 50304) are bound in
//! aligned chunks of rows; per-row results do not depend on the chunking.

use std::ops::Range;

use crate::gpu::{DType, Dispatch, Gpu, GpuError, Result, Tensor, View, grid_1d};
use crate::kernels::gcd;
use crate::kernels::reduce::{align_elems, binding_elems, check_distinct, check_len, chunk_too_small, chunks};

/// A cross-entropy's sizes: `n` rows of `vocab` logits, label smoothing α (`label_smoothing`).
#[derive(Clone, Copy, Debug)]
pub struct CeShape {
    pub n: usize,
    pub vocab: usize,
    pub label_smoothing: f32,
}

/// A cross-entropy's views: `logits` `[n, vocab]`, `targets` i32 `[n]` (−1 = ignored), `lse`
/// `[n]` and `out` `[2]` = (mean loss over the valid rows, their count as f32) — written by the
/// forward, read by the backward.
#[derive(Clone, Copy)]
pub struct CeIo<'a> {
    pub logits: View<'a>,
    pub targets: View<'a>,
    pub lse: View<'a>,
    pub out: View<'a>,
}

/// Rows one `ce_partials` workgroup sums (`BLOCK` in the shader).
const BLOCK: usize = 4096;

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    vocab: u32,
    row0: u32,
    tpr: u32,
    alpha: f32,
    scale: f32,
    nparts: u32,
    count_only: u32,
}

/// Invocations per row. On GPUs: the largest power of two ≤ V, at most 256 (a team walks the row
/// with stride tpr and combines with a tree). On CPU adapters (llvmpipe) with V ≤
/// [`CPU_ROW_VOCAB`]: 1 — one row per invocation, no tree (a barrier is a coroutine switch
/// there, every workgroup-memory access a loop over the SIMD lanes). The device's forms
/// `ce_rows` (the CPU rule) and `ce_tpr` (a fixed width, kept within [V / CPU_ROW_VOCAB, the
/// team]) choose.
pub fn threads_per_row(gpu: &Gpu, vocab: usize) -> usize {
    let team = (1usize << (usize::BITS - 1 - vocab.leading_zeros())).min(256);
    // A forced width never leaves one invocation more than CPU_ROW_VOCAB logits of a row (the
    // loop-limit hazard below), nor more invocations than the team.
    let least = vocab.div_ceil(CPU_ROW_VOCAB).next_power_of_two().min(team);
    match gpu.forms.ce_threads_per_row {
        Some(t) if t.is_power_of_two() && t <= 256 => t.clamp(least, team.max(least)),
        _ if gpu.forms.ce_one_row_per_invocation && vocab <= CPU_ROW_VOCAB => 1,
        _ => team,
    }
}

/// Largest vocabulary for which CPU adapters give a row to one invocation. Also what keeps one
/// invocation's loops far below llvmpipe's limit of 65 535 loop iterations per invocation (its
/// loop limiter is not reset between sibling loops: forcing one row per invocation at V = 50 304
/// left the second loop of the backward, the zeros of ignored rows, cut short after 15 219
/// iterations).
pub const CPU_ROW_VOCAB: usize = 4096;

/// `(first row, rows)` chunks whose logits fit `max_chunk` elements and start aligned.
fn row_chunks(gpu: &Gpu, op: &str, n: usize, vocab: usize, max_chunk: usize) -> Result<Vec<(usize, usize)>> {
    let max_chunk = max_chunk.min(binding_elems(gpu, 1));
    if n * vocab <= max_chunk {
        return Ok(vec![(0, n)]);
    }
    let a = align_elems(gpu);
    let unit = a / gcd(vocab, a);
    let rows = max_chunk / vocab / unit * unit;
    if rows == 0 {
        return Err(chunk_too_small(
            gpu,
            format!("{op}: {unit} rows of logits (vocab {vocab})"),
            unit * vocab,
            max_chunk,
        ));
    }
    Ok(chunks(n, rows))
}

fn check_common(op: &str, s: &CeShape, io: &CeIo) -> Result<()> {
    let (CeShape { n, vocab, .. }, CeIo { logits, targets, lse, out }) = (*s, io);
    if vocab == 0 || vocab >= 1 << 24 {
        return Err(GpuError::Shape(format!("{op}: vocab must be in [1, 2^24), got {vocab}")));
    }
    check_len(op, "logits", logits, n * vocab, &format!("n {n} × vocab {vocab}"))?;
    check_len(op, "targets", targets, n, &format!("n {n}"))?;
    check_len(op, "lse", lse, n, &format!("n {n}"))?;
    check_len(op, "out", out, 2, "mean loss and valid count")
}

/// Cross-entropy forward ([`CeIo`]): reads `logits` and `targets`; writes `lse` (saved for the
/// backward) and `out` = (mean loss over the valid rows, number of valid rows as f32); all rows
/// ignored → (0, 0). Scratch: per-row losses and per-4096-row partials.
pub fn cross_entropy_forward(gpu: &Gpu, s: &CeShape, io: CeIo) -> Result<Vec<Dispatch>> {
    cross_entropy_forward_chunked(gpu, s, io, usize::MAX)
}

/// [`cross_entropy_forward`] binding at most `max_chunk` logits per dispatch; for testing the
/// row chunking.
#[doc(hidden)]
pub fn cross_entropy_forward_chunked(gpu: &Gpu, s: &CeShape, io: CeIo, max_chunk: usize) -> Result<Vec<Dispatch>> {
    const OP: &str = "cross_entropy_forward";
    check_common(OP, s, &io)?;
    let ce = RowSlices::new(gpu, s)?;
    let mut ds = ce.forward_rows_chunked(gpu, io.logits, io.targets, io.lse, 0..s.n, max_chunk)?;
    ds.extend(ce.finish(gpu, io.targets, io.out)?);
    Ok(ds)
}

/// A cross-entropy over `n` rows computed in slices of rows whose logits need not exist at
/// once (the chunked LM head, `train.head_chunk`): [`RowSlices::count`] first (the backward
/// of a slice reads the valid count), then per slice [`RowSlices::forward_rows`] and, over the
/// same logits, [`RowSlices::backward_rows`], and last [`RowSlices::finish`] for the mean. Each
/// row's lse, loss and gradient are the same bits as [`cross_entropy_forward`] and
/// [`cross_entropy_backward`] over the whole batch give, and so is the mean (the same
/// fixed-order passes over the same row losses). A clone shares the scratch.
#[derive(Clone)]
pub struct RowSlices {
    n: usize,
    vocab: usize,
    alpha: f32,
    tpr: usize,
    nparts: usize,
    /// Per-row losses [n] and per-4096-row partials [2·nparts], kept by every dispatch that
    /// writes or reads them.
    row_loss: Tensor,
    parts: Tensor,
    /// [`RowSlices::with_ranks`]: per row (rank, likeliest token, its log p, entropy) `[n, 4]`.
    ranks: Option<Tensor>,
}

impl RowSlices {
    /// The scratch of a loss of shape `s`.
    pub fn new(gpu: &Gpu, s: &CeShape) -> Result<RowSlices> {
        let CeShape { n, vocab, label_smoothing } = *s;
        if vocab == 0 || vocab >= 1 << 24 {
            return Err(GpuError::Shape(format!("cross entropy: vocab must be in [1, 2^24), got {vocab}")));
        }
        let nparts = n.div_ceil(BLOCK).max(1);
        Ok(RowSlices {
            n,
            vocab,
            alpha: label_smoothing,
            tpr: threads_per_row(gpu, vocab),
            nparts,
            row_loss: Tensor::zeros(gpu, "cross_entropy.row_loss", &[n.max(1)], DType::F32)?,
            parts: Tensor::zeros(gpu, "cross_entropy.partials", &[2 * nparts], DType::F32)?,
            ranks: None,
        })
    }

    /// [`RowSlices::new`] whose forward also scores every row (`ddl eval`): after each slice's
    /// losses, per row the target's rank among the logits (1 + how many are larger or equal at a
    /// smaller id, so that rank 1 is the likeliest token; the vocabulary size for a NaN logit; 0
    /// for an ignored target), the likeliest token (the smallest id among ties), its log-probability
    /// and the entropy of the row's softmax in nats — [`RowSlices::ranks`], one more pass over
    /// the logits.
    pub fn with_ranks(gpu: &Gpu, s: &CeShape) -> Result<RowSlices> {
        let mut ce = RowSlices::new(gpu, s)?;
        ce.ranks = Some(Tensor::zeros(gpu, "cross_entropy.ranks", &[4 * s.n.max(1)], DType::F32)?);
        Ok(ce)
    }

    /// [`RowSlices::with_ranks`]' scores `[n, 4]` as the last forward over each row wrote them:
    /// (rank, likeliest token, its log p, entropy), ids and ranks exact in f32 (< 2^24).
    pub fn ranks(&self) -> Option<&Tensor> {
        self.ranks.as_ref()
    }

    fn shape(&self) -> CeShape {
        CeShape { n: self.n, vocab: self.vocab, label_smoothing: self.alpha }
    }

    fn params(&self) -> Params {
        Params {
            rows: self.n as u32,
            vocab: self.vocab as u32,
            tpr: self.tpr as u32,
            alpha: self.alpha,
            nparts: self.nparts as u32,
            ..Default::default()
        }
    }

    /// Each row's loss `[n]` as the last forward over it wrote it (0 for an ignored target):
    /// what `ddl eval --per-token` reads back.
    pub fn row_loss(&self) -> &Tensor {
        &self.row_loss
    }

    /// Writes `out[1]` = the valid targets among all `n` and `out[0]` = 0.
    pub fn count(&self, gpu: &Gpu, targets: View, out: View) -> Result<Vec<Dispatch>> {
        check_len("cross_entropy_count", "targets", &targets, self.n, &format!("n {}", self.n))?;
        self.reduce(gpu, targets, out, true)
    }

    /// The forward of `rows` (of the loss's n): `logits` holds those rows' logits
    /// (`[rows.len(), vocab]`); writes their lse (into `lse` `[n]` at `rows.start`) and their
    /// losses.
    pub fn forward_rows(
        &self,
        gpu: &Gpu,
        logits: View,
        targets: View,
        lse: View,
        rows: Range<usize>,
    ) -> Result<Vec<Dispatch>> {
        self.forward_rows_chunked(gpu, logits, targets, lse, rows, usize::MAX)
    }

    /// [`RowSlices::forward_rows`] binding at most `max_chunk` logits per dispatch; for testing.
    #[doc(hidden)]
    pub fn forward_rows_chunked(
        &self,
        gpu: &Gpu,
        logits: View,
        targets: View,
        lse: View,
        rows: Range<usize>,
        max_chunk: usize,
    ) -> Result<Vec<Dispatch>> {
        const OP: &str = "cross_entropy_forward";
        check_rows(OP, &self.shape(), &logits, &targets, &lse, &rows)?;
        let (r0, rows) = (rows.start, rows.len());
        check_distinct(OP, &[("lse", lse.buffer)], &[("logits", logits.buffer), ("targets", targets.buffer)])?;
        let maxdim = gpu.limits.max_compute_workgroups_per_dimension;
        let (n, v) = (self.n, self.vocab);
        let rpw = 256 / self.tpr;
        let fwd = gpu.kernel("loss", Some("split"), "ce_forward")?;
        let rank = match &self.ranks {
            Some(t) => Some((gpu.kernel("loss", Some("split"), "ce_ranks")?, t)),
            None => None,
        };
        let mut ds = Vec::new();
        for (c0, cr) in row_chunks(gpu, OP, rows, v, max_chunk)? {
            let p = Params { rows: cr as u32, row0: (r0 + c0) as u32, ..self.params() };
            let mut d = fwd.dispatch(
                gpu,
                Some(bytemuck::bytes_of(&p)),
                &[
                    ("logits", logits.sub(c0 * v, cr * v)),
                    ("targets", targets.sub(0, n)),
                    ("lse_out", lse.sub(0, n)),
                    ("row_loss", self.row_loss.view()),
                ],
                grid_1d(cr as u64, rpw as u32, maxdim),
            )?;
            d.scratch.push(self.row_loss.clone());
            ds.push(d);
            if let Some((k, ranks)) = &rank {
                let mut d = k.dispatch(
                    gpu,
                    Some(bytemuck::bytes_of(&p)),
                    &[
                        ("logits", logits.sub(c0 * v, cr * v)),
                        ("targets", targets.sub(0, n)),
                        ("lse", lse.sub(0, n)),
                        ("row_stats", ranks.view()),
                    ],
                    grid_1d(cr as u64, rpw as u32, maxdim),
                )?;
                d.scratch.push((*ranks).clone());
                ds.push(d);
            }
        }
        Ok(ds)
    }

    /// `out` = (mean loss over the valid rows, their count) from every row's loss (after the
    /// forward of all rows).
    pub fn finish(&self, gpu: &Gpu, targets: View, out: View) -> Result<Vec<Dispatch>> {
        check_len("cross_entropy_finish", "targets", &targets, self.n, &format!("n {}", self.n))?;
        self.reduce(gpu, targets, out, false)
    }

    fn reduce(&self, gpu: &Gpu, targets: View, out: View, count_only: bool) -> Result<Vec<Dispatch>> {
        check_len("cross_entropy", "out", &out, 2, "mean loss and valid count")?;
        let maxdim = gpu.limits.max_compute_workgroups_per_dimension;
        let p = Params { count_only: count_only as u32, ..self.params() };
        let targets = targets.sub(0, self.n);
        let mut d = gpu.kernel("loss", Some("split"), "ce_partials")?.dispatch(
            gpu,
            Some(bytemuck::bytes_of(&p)),
            &[("row_loss", self.row_loss.view()), ("targets", targets), ("partials", self.parts.view())],
            grid_1d(self.nparts as u64, 1, maxdim),
        )?;
        d.scratch.extend([self.row_loss.clone(), self.parts.clone()]);
        let mut f = gpu.kernel("loss", Some("split"), "ce_finish")?.dispatch(
            gpu,
            Some(bytemuck::bytes_of(&p)),
            &[("partials", self.parts.view()), ("out", out.sub(0, 2))],
            [1, 1, 1],
        )?;
        f.scratch.push(self.parts.clone());
        Ok(vec![d, f])
    }

    /// The backward of `rows` (as [`cross_entropy_backward`] writes them): `io.logits` and
    /// `dlogits` hold those rows (`[rows.len(), vocab]`; `dlogits` may be `io.logits` itself,
    /// written over), `io.out` the count [`RowSlices::count`] or the forward left.
    pub fn backward_rows(
        &self,
        gpu: &Gpu,
        io: CeIo,
        dlogits: View,
        rows: Range<usize>,
        scale: f32,
    ) -> Result<Vec<Dispatch>> {
        backward_rows(gpu, &self.shape(), io, dlogits, rows, scale, usize::MAX)
    }
}

/// The backward of `rows` of a loss of shape `s` ([`RowSlices::backward_rows`]), binding at most
/// `max_chunk` logits per dispatch.
fn backward_rows(
    gpu: &Gpu,
    s: &CeShape,
    io: CeIo,
    dlogits: View,
    rows: Range<usize>,
    scale: f32,
    max_chunk: usize,
) -> Result<Vec<Dispatch>> {
    const OP: &str = "cross_entropy_backward";
    let (CeShape { n, vocab: v, label_smoothing }, CeIo { logits, targets, lse, out }) = (*s, io);
    check_rows(OP, s, &logits, &targets, &lse, &rows)?;
    let (r0, rows) = (rows.start, rows.len());
    check_len(OP, "out", &out, 2, "mean loss and valid count")?;
    check_len(OP, "dlogits", &dlogits, rows * v, &format!("rows {rows} × vocab {v}"))?;
    let inplace = std::ptr::eq(dlogits.buffer, logits.buffer) && dlogits.offset == logits.offset;
    // (In place, the logits are the output itself; every other input must be apart from it.)
    let reads: Vec<_> = (!inplace)
        .then_some(("logits", logits.buffer))
        .into_iter()
        .chain([("targets", targets.buffer), ("lse", lse.buffer), ("out", out.buffer)])
        .collect();
    check_distinct(OP, &[("dlogits", dlogits.buffer)], &reads)?;
    let maxdim = gpu.limits.max_compute_workgroups_per_dimension;
    let tpr = threads_per_row(gpu, v);
    let rpw = 256 / tpr;
    let k = gpu.kernel("loss", Some(if inplace { "inplace" } else { "split" }), "ce_backward")?;
    row_chunks(gpu, OP, rows, v, max_chunk)?
        .into_iter()
        .map(|(c0, cr)| {
            let p = Params {
                rows: cr as u32,
                vocab: v as u32,
                row0: (r0 + c0) as u32,
                tpr: tpr as u32,
                alpha: label_smoothing,
                scale,
                ..Default::default()
            };
            let mut bufs = vec![
                ("logits", logits.sub(c0 * v, cr * v)),
                ("targets", targets.sub(0, n)),
                ("lse", lse.sub(0, n)),
                ("stats", out.sub(0, 2)),
            ];
            if !inplace {
                bufs.push(("dlogits", dlogits.sub(c0 * v, cr * v)));
            }
            k.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &bufs, grid_1d(cr as u64, rpw as u32, maxdim))
        })
        .collect()
}

/// `rows` within a loss of shape `s`: the slice's logits and the whole loss's targets and lse.
/// (The vocabulary itself was checked by `RowSlices::new` or `check_common`.)
fn check_rows(op: &str, s: &CeShape, logits: &View, targets: &View, lse: &View, rows: &Range<usize>) -> Result<()> {
    let (n, vocab) = (s.n, s.vocab);
    if rows.is_empty() || rows.end > n {
        return Err(GpuError::Shape(format!("{op}: rows {}..{} outside the loss's {n} rows", rows.start, rows.end)));
    }
    let rows = rows.len();
    check_len(op, "logits", logits, rows * vocab, &format!("rows {rows} × vocab {vocab}"))?;
    check_len(op, "targets", targets, n, &format!("n {n}"))?;
    check_len(op, "lse", lse, n, &format!("n {n}"))
}

/// Cross-entropy backward: `dlogits` `[n, vocab]` (written) =
/// `scale·(softmax − (1−α)·onehot(y) − α/V) / n_valid` for valid rows, 0 for ignored rows, with
/// `n_valid = out[1]` read on the GPU (0 → all zeros). `io.lse` and `io.out` are the forward's.
/// `dlogits` may be `io.logits` itself (the same view): the gradient is then written over the
/// logits (variant `inplace`, what training programs do: the same values, one [n, V] buffer
/// less); any other overlap with an input is refused.
pub fn cross_entropy_backward(gpu: &Gpu, s: &CeShape, io: CeIo, dlogits: View, scale: f32) -> Result<Vec<Dispatch>> {
    cross_entropy_backward_chunked(gpu, s, io, dlogits, scale, usize::MAX)
}

/// Rewrites the gradient scale of dispatches made by [`cross_entropy_backward`] (the loss
/// scale of mixed-precision training changes between steps): no rebinding; ordered before the
/// next submit. Other dispatches in `ds` are left alone; returns how many were rewritten.
pub fn set_backward_scale(gpu: &Gpu, ds: &[&Dispatch], scale: f32) -> usize {
    let at = std::mem::offset_of!(Params, scale) as u64;
    let mut n = 0;
    for d in ds.iter().filter(|d| d.kernel.name.ends_with("::ce_backward")) {
        d.set_params_at(gpu, at, bytemuck::bytes_of(&scale));
        n += 1;
    }
    n
}

/// [`cross_entropy_backward`] binding at most `max_chunk` logits per dispatch; for testing.
#[doc(hidden)]
pub fn cross_entropy_backward_chunked(
    gpu: &Gpu,
    s: &CeShape,
    io: CeIo,
    dlogits: View,
    scale: f32,
    max_chunk: usize,
) -> Result<Vec<Dispatch>> {
    check_common("cross_entropy_backward", s, &io)?;
    backward_rows(gpu, s, io, dlogits, 0..s.n, scale, max_chunk)
}
