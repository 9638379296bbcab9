//! Batched, strided matrix multiply (`shaders/matmul.wgsl`): C = alpha·op(A)·op(B) (+ C).
//!
//! Covers every product a Transformer's forward and backward need: A·B, A·Bᵀ (weights stored
//! `[out, in]`), Aᵀ·B (weight gradients), with accumulation into C for gradient sums, and a
//! batched form (attention heads). Correct for any M, N, K ≥ 1.
//!
//! Tile variants (`shaders::MATMUL_VARIANTS`) all sum each output over K in the same order
//! (`acc = fma(a, b, acc)` for p = 0, 1, …, K−1, then `alpha·acc`), so they give bit-identical
//! results; which one runs is a speed choice made per adapter and shape bucket: a heuristic, or a
//! measurement cached on disk (see [`autotune`]).
//!
//! Two kernel families (see `shaders/matmul.wgsl` and `docs/PERF.md`):
//! - `t16`/`t32`/`t64`: workgroup-memory tiles, the GPU kernel (entry point `matmul`).
//! - `r128`/`c64`/`r32`/`r8`: register blocks streamed straight from the buffers with vec4
//!   loads, no workgroup memory or barriers — the CPU-adapter (llvmpipe) kernels, about 12×
//!   faster there.
//!   One entry point per operand layout ([`Matmul::entry_point`]): `mm_kk` (A·Bᵀ), `mm_kn`
//!   (A·B), `mm_mn` (Aᵀ·B), `mm_mk` (Aᵀ·Bᵀ) when offsets and strides allow vec4 loads, else
//!   `mm_ss` (scalar loads, any strides).
//!
//! Operands larger than one storage binding (the tied LM head: the 50304 × 768 embedding is
//! 154 MB, lavapipe binds at most 128 MiB) go through [`Matmul::bind_split`]: the product is cut
//! along the batch, M and N (and K only when one operand's K extent alone exceeds a binding)
//! into pieces whose operands each fit one aligned sub-view. Splitting along batch, M and N keeps
//! every output's summation order, so the result is bit-identical to the unsplit product; pieces
//! along K accumulate into C one after the other (`C = alpha·A₁B₁ (+C)`, then `C += alpha·A₂B₂`,
//! …), which differs from the unsplit product by float32 rounding of the partial sums only.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::gpu::{Dispatch, Gpu, GpuError, Recorder, Result, Tensor, View, grid_1d};
use crate::kernels::reduce::{align_elems, binding_elems, chunk_too_small, chunks};
use crate::shaders::MATMUL_VARIANTS;

/// Where one matrix operand lives: element (r, c) of batch b is at
/// `offset + b·batch_stride + r·row_stride + c·col_stride` (in elements).
/// Longest sum over K one dispatch runs. The kernels loop over K one term (or one tile row) per
/// iteration, and llvmpipe (lavapipe) stops any shader loop after 65 535 iterations without an
/// error; longer sums (weight gradients over more tokens than that) are split into accumulating
/// pieces by [`Matmul::bind_split`]. A multiple of every tile's K step; on other adapters the
/// extra dispatch per 32 768 terms costs nothing measurable.
pub const MAX_K_PER_DISPATCH: usize = 32768;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operand {
    pub offset: usize,
    pub row_stride: usize,
    pub col_stride: usize,
    pub batch_stride: usize,
}

impl Operand {
    /// A packed row-major `rows × cols` matrix (batches follow each other).
    pub fn row_major(rows: usize, cols: usize) -> Self {
        Operand { offset: 0, row_stride: cols, col_stride: 1, batch_stride: rows * cols }
    }

    /// The transpose of a packed row-major `cols × rows` matrix, seen as `rows × cols`.
    pub fn transposed(rows: usize, cols: usize) -> Self {
        Operand { offset: 0, row_stride: 1, col_stride: rows, batch_stride: rows * cols }
    }

    /// One past the largest element index touched for a `rows × cols` view over `batch` batches.
    pub fn extent(&self, rows: usize, cols: usize, batch: usize) -> usize {
        self.offset + (batch - 1) * self.batch_stride + (rows - 1) * self.row_stride + (cols - 1) * self.col_stride + 1
    }
}

/// A matrix product `C[b] (+)= alpha · A[b] · B[b]` with A: M×K, B: K×N, C: M×N.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Matmul {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    pub a: Operand,
    pub b: Operand,
    /// C's `col_stride` must be 1.
    pub c: Operand,
    pub accumulate: bool,
    pub alpha: f32,
    /// A second, outer batch level: `outer` groups of `batch` products, group `o` at element
    /// offsets `o · outer_strides[0]` (A), `[1]` (B), `[2]` (C) added to everything above. For
    /// layouts whose products are not evenly spaced along one stride, e.g. (sequence, head)
    /// pairs of a `[batch, T, heads, hd]` tensor. 1 (and zero strides) for one level.
    pub outer: usize,
    pub outer_strides: [usize; 3],
    /// The buffers hold A's rows past M and B's columns past N up to the next multiple of 4
    /// (a padded activation such as `[tokens, round4(F)]`): vec4 loads along M or N may read
    /// them, so those layouts keep their vec4 kernels when M or N is not a multiple of 4. What
    /// is read there only feeds outputs that are never stored (any value, NaN included).
    pub pad_reads: bool,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    accumulate: u32,
    a_off: u32,
    a_rs: u32,
    a_cs: u32,
    a_bs: u32,
    b_off: u32,
    b_rs: u32,
    b_cs: u32,
    b_bs: u32,
    c_off: u32,
    c_rs: u32,
    c_bs: u32,
    alpha: f32,
    tiles_n: u32,
    tiles_m: u32,
    total: u32,
    _pad: u32,
    nb_in: u32,
    a_os: u32,
    b_os: u32,
    c_os: u32,
}

impl Matmul {
    /// C = A·B, all packed row-major: A `[M, K]`, B `[K, N]`, C `[M, N]`.
    pub fn nn(m: usize, n: usize, k: usize) -> Self {
        Matmul {
            m,
            n,
            k,
            batch: 1,
            a: Operand::row_major(m, k),
            b: Operand::row_major(k, n),
            c: Operand::row_major(m, n),
            accumulate: false,
            alpha: 1.0,
            outer: 1,
            outer_strides: [0; 3],
            pad_reads: false,
        }
    }

    /// C = A·Bᵀ with B stored `[N, K]` (a linear layer with weights `[out, in]`).
    pub fn nt(m: usize, n: usize, k: usize) -> Self {
        Matmul { b: Operand::transposed(k, n), ..Self::nn(m, n, k) }
    }

    /// C = Aᵀ·B with A stored `[K, M]` (a weight gradient: dW = dYᵀ·X).
    pub fn tn(m: usize, n: usize, k: usize) -> Self {
        Matmul { a: Operand::transposed(m, k), ..Self::nn(m, n, k) }
    }

    /// C = Aᵀ·Bᵀ with A stored `[K, M]` and B stored `[N, K]`.
    pub fn tt(m: usize, n: usize, k: usize) -> Self {
        Matmul { a: Operand::transposed(m, k), b: Operand::transposed(k, n), ..Self::nn(m, n, k) }
    }

    /// `batch` independent products; packed operands are laid one after the other.
    pub fn batched(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }

    /// `count` groups of the `batch` products, group `o` shifted by `o · strides` elements in A, B
    /// and C (see [`Matmul::outer`]).
    pub fn outer(mut self, count: usize, strides: [usize; 3]) -> Self {
        self.outer = count;
        self.outer_strides = strides;
        self
    }

    /// Lets the vec4 kernels read A's rows and B's columns up to the next multiple of 4 (see
    /// [`Matmul::pad_reads`]); the views must hold them.
    pub fn pad_reads(mut self, yes: bool) -> Self {
        self.pad_reads = yes;
        self
    }

    /// Elements of A, B and C the product spans from element 0 (one past the last touched;
    /// with `pad_reads`, A's rows (when read along M) and B's columns (along N) rounded up to a
    /// multiple of 4).
    pub fn extents(&self) -> [usize; 3] {
        let o = self.outer.max(1) - 1;
        // Padding is read only by the loads along M (A with unit row stride) or N (B with unit
        // column stride).
        let m = if self.pad_reads && self.a.row_stride == 1 { self.m.next_multiple_of(4) } else { self.m };
        let n = if self.pad_reads && self.b.col_stride == 1 { self.n.next_multiple_of(4) } else { self.n };
        [
            self.a.extent(m, self.k, self.batch) + o * self.outer_strides[0],
            self.b.extent(self.k, n, self.batch) + o * self.outer_strides[1],
            self.c.extent(self.m, self.n, self.batch) + o * self.outer_strides[2],
        ]
    }

    /// Adds into C instead of overwriting it.
    pub fn accumulate(mut self, yes: bool) -> Self {
        self.accumulate = yes;
        self
    }

    /// Scales the product.
    pub fn alpha(mut self, alpha: f32) -> Self {
        self.alpha = alpha;
        self
    }

    /// FLOPs of the product (2·M·N·K per batch).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * (self.batch * self.outer) as f64
    }

    /// Bytes that must move at least once: read A and B, write C (and read it when accumulating).
    pub fn min_bytes(&self) -> f64 {
        let c = (self.m * self.n) as f64 * if self.accumulate { 2.0 } else { 1.0 };
        4.0 * (self.batch * self.outer) as f64 * ((self.m * self.k + self.k * self.n) as f64 + c)
    }

    fn check(&self, a: &View, b: &View, c: &View) -> Result<()> {
        let bad = |s: String| {
            Err(GpuError::Shape(format!("matmul {}x{}x{} (batch {}): {s}", self.m, self.n, self.k, self.batch)))
        };
        if self.m == 0 || self.n == 0 || self.k == 0 || self.batch == 0 || self.outer == 0 {
            return bad("every size must be at least 1".into());
        }
        if self.c.col_stride != 1 {
            return bad("C must have unit column stride".into());
        }
        for (name, ext, v) in [("A", self.extents()[0], a), ("B", self.extents()[1], b), ("C", self.extents()[2], c)] {
            let need = ext as u64 * 4;
            if need > v.size {
                return bad(format!("{name} needs {need} bytes of its buffer, the binding has {}", v.size));
            }
            if need / 4 > u32::MAX as u64 {
                return bad(format!("{name} spans more than 2^32 elements; split the product"));
            }
        }
        Ok(())
    }

    /// Binds the product to buffers with the variant picked for this adapter and shape (one
    /// dispatch: the caller keeps K ≤ [`MAX_K_PER_DISPATCH`]; [`Matmul::bind_split`] does it for
    /// any K).
    pub fn bind(&self, gpu: &Gpu, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
        let v = pick(gpu, self);
        self.bind_variant(gpu, v, a, b, c)
    }

    /// [`Matmul::bind`] for operands of any size: one dispatch when every view fits one storage
    /// binding, else the product split into pieces whose operands each fit one (see the module
    /// documentation; bit-identical unless K has to be split).
    pub fn bind_split(&self, gpu: &Gpu, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Vec<Dispatch>> {
        self.bind_split_chunked(gpu, a, b, c, binding_elems(gpu, 1))
    }

    /// [`Matmul::bind_split`] with bindings of at most `max_chunk` elements (and the adapter's
    /// limit); for testing the splitting without huge buffers.
    #[doc(hidden)]
    pub fn bind_split_chunked(
        &self,
        gpu: &Gpu,
        a: View<'_>,
        b: View<'_>,
        c: View<'_>,
        max_chunk: usize,
    ) -> Result<Vec<Dispatch>> {
        self.check(&a, &b, &c)?;
        let max = max_chunk.min(binding_elems(gpu, 1));
        if self.k <= MAX_K_PER_DISPATCH && [&a, &b, &c].iter().all(|v| v.len() <= max) {
            let pieces = self.k_pieces(gpu);
            if pieces > 1 {
                return self.bind_split_k(gpu, pieces, a, b, c);
            }
            return Ok(vec![self.bind(gpu, a, b, c)?]);
        }
        if self.outer > 1 {
            // Split the outer level first: each group is an ordinary one-level product.
            let mut out = Vec::new();
            for o in 0..self.outer {
                let sh = |op: Operand, i: usize| Operand { offset: op.offset + o * self.outer_strides[i], ..op };
                let g = Matmul {
                    a: sh(self.a, 0),
                    b: sh(self.b, 1),
                    c: sh(self.c, 2),
                    outer: 1,
                    outer_strides: [0; 3],
                    ..*self
                };
                out.extend(g.bind_split_chunked(gpu, a, b, c, max_chunk)?);
            }
            return Ok(out);
        }
        let align = align_elems(gpu);
        let [bs, ms, ns, ks] = self.split_sizes(gpu, max)?;
        // Sub-view from the aligned element at or below `off`; the remainder stays in the offset.
        fn narrow<'v>(v: &View<'v>, op: Operand, off: usize, dims: [usize; 3], align: usize) -> (Operand, View<'v>) {
            let start = off / align * align;
            let op = Operand { offset: off - start, ..op };
            (op, v.sub(start, op.extent(dims[0], dims[1], dims[2])))
        }
        let mut out = Vec::new();
        for (b0, bt) in chunks(self.batch, bs) {
            for (m0, mc) in chunks(self.m, ms) {
                for (n0, nc) in chunks(self.n, ns) {
                    for (k0, kc) in chunks(self.k, ks) {
                        let (pa, va) = narrow(
                            &a,
                            self.a,
                            self.a.offset + b0 * self.a.batch_stride + m0 * self.a.row_stride + k0 * self.a.col_stride,
                            [mc, kc, bt],
                            align,
                        );
                        let (pb, vb) = narrow(
                            &b,
                            self.b,
                            self.b.offset + b0 * self.b.batch_stride + k0 * self.b.row_stride + n0 * self.b.col_stride,
                            [kc, nc, bt],
                            align,
                        );
                        let (pc, vc) = narrow(
                            &c,
                            self.c,
                            self.c.offset + b0 * self.c.batch_stride + m0 * self.c.row_stride + n0,
                            [mc, nc, bt],
                            align,
                        );
                        let piece = Matmul {
                            m: mc,
                            n: nc,
                            k: kc,
                            batch: bt,
                            a: pa,
                            b: pb,
                            c: pc,
                            // K pieces after the first add to what the earlier ones wrote.
                            accumulate: self.accumulate || k0 > 0,
                            alpha: self.alpha,
                            outer: 1,
                            outer_strides: [0; 3],
                            // Pieces are cut at aligned sizes from views that only hold them.
                            pad_reads: false,
                        };
                        out.push(piece.bind(gpu, va, vb, vc)?);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Pieces along K for a product with too few output tiles to keep the adapter busy (a
    /// weight gradient of a small head: `[1, d]` or `[m, d]` summed over thousands of tokens ran
    /// in one workgroup): 1 (no split) unless the product is one packed `[M, N]` output with
    /// fewer tiles than the adapter runs at once and K ≥ 512. See [`Matmul::bind_split_k`].
    pub fn k_pieces(&self, gpu: &Gpu) -> usize {
        if k_pieces_bound(self.m, self.n, self.k) == 0 {
            return 1;
        }
        let packed_c = self.c.row_stride == self.n && self.c.offset == 0;
        if self.batch * self.outer != 1 || !packed_c {
            return 1;
        }
        let Ok((bm, bn)) = tile(pick(gpu, self)) else { return 1 };
        let tiles = self.m.div_ceil(bm) * self.n.div_ceil(bn);
        let busy = if gpu.forms.cpu { 2 * gpu.forms.cpu_threads } else { 64 };
        if tiles >= busy {
            return 1;
        }
        busy.div_ceil(tiles).min(self.k / 128).clamp(1, 32)
    }

    /// `pieces` partial products over consecutive K ranges (one batched dispatch, the remainder
    /// of K in a second one that adds into the first partial) into a scratch `[pieces, M, N]`,
    /// then their column sum into C (added when accumulating): a fixed order, bit-identical run
    /// to run; against the unsplit product only float32 rounding of the partial sums differs.
    pub fn bind_split_k(
        &self,
        gpu: &Gpu,
        pieces: usize,
        a: View<'_>,
        b: View<'_>,
        c: View<'_>,
    ) -> Result<Vec<Dispatch>> {
        let (m, n) = (self.m, self.n);
        // K per piece, a multiple of 4 so every piece keeps the vec4 alignment.
        let q = (self.k / pieces) / 4 * 4;
        if q == 0 || pieces < 2 {
            return Ok(vec![self.bind(gpu, a, b, c)?]);
        }
        let rest = self.k - pieces * q;
        // One scratch for every split product of the device (they run one after another).
        let part_t = gpu.shared_scratch(K_PIECES_SCRATCH, pieces * m * n)?;
        let part = part_t.view().sub(0, pieces * m * n);
        let batched = Matmul {
            k: q,
            batch: pieces,
            a: Operand { batch_stride: q * self.a.col_stride, ..self.a },
            b: Operand { batch_stride: q * self.b.row_stride, ..self.b },
            c: Operand::row_major(m, n),
            accumulate: false,
            ..*self
        };
        let mut out = vec![batched.bind(gpu, a, b, part)?];
        if rest > 0 {
            let tail = Matmul {
                k: rest,
                a: Operand { offset: self.a.offset + pieces * q * self.a.col_stride, ..self.a },
                b: Operand { offset: self.b.offset + pieces * q * self.b.row_stride, ..self.b },
                c: Operand::row_major(m, n),
                accumulate: true,
                ..*self
            };
            out.push(tail.bind(gpu, a, b, part)?);
        }
        out.extend(crate::kernels::reduce::col_sum(gpu, part, c, pieces, m * n, self.accumulate)?);
        out[0].scratch.push(part_t);
        Ok(out)
    }

    /// Piece sizes `[batch, M, N, K]` [`Matmul::bind_split_chunked`] uses with bindings of at
    /// most `max_chunk` elements: every operand of every piece spans at most that many elements
    /// from an aligned start. Batch, M and N shrink first (largest span contribution first); K
    /// only when an operand's K extent alone is too large, or K exceeds [`MAX_K_PER_DISPATCH`].
    /// Sizes are multiples of 4 where possible (vec4 loads keep their alignment) and even across
    /// pieces.
    #[doc(hidden)]
    pub fn split_sizes(&self, gpu: &Gpu, max_chunk: usize) -> Result<[usize; 4]> {
        const K: usize = 3;
        let (max, align) = (max_chunk.min(binding_elems(gpu, 1)), align_elems(gpu));
        // Each operand's dimensions as (index into the sizes, stride).
        let ops = [
            ("A", [(0, self.a.batch_stride), (1, self.a.row_stride), (K, self.a.col_stride)]),
            ("B", [(0, self.b.batch_stride), (K, self.b.row_stride), (2, self.b.col_stride)]),
            ("C", [(0, self.c.batch_stride), (1, self.c.row_stride), (2, self.c.col_stride)]),
        ];
        // Worst-case elements bound: the misalignment of the start, then first to last element.
        let span = |dims: &[(usize, usize); 3], s: &[usize; 4]| {
            align + dims.iter().map(|&(i, st)| (s[i] - 1) * st).sum::<usize>()
        };
        let full = [self.batch, self.m, self.n, self.k];
        let mut s = full;
        while let Some((name, dims)) = ops.iter().find(|(_, dims)| span(dims, &s) > max) {
            let k_alone = dims.iter().filter(|d| d.0 == K).map(|&(i, st)| (s[i] - 1) * st).sum::<usize>();
            let shrinkable = |&&(i, st): &&(usize, usize)| s[i] > 1 && st > 0;
            let target = if align + k_alone > max {
                dims.iter().find(|d| d.0 == K)
            } else {
                dims.iter().filter(|d| d.0 != K).filter(shrinkable).max_by_key(|&&(i, st)| (s[i] - 1) * st)
            };
            let Some(&(i, st)) = target.filter(shrinkable) else {
                return Err(chunk_too_small(
                    gpu,
                    format!("matmul {}x{}x{} operand {name} piece", self.m, self.n, self.k),
                    span(dims, &s),
                    max,
                ));
            };
            let rest = span(dims, &s) - (s[i] - 1) * st;
            let mut size = if rest > max { 1 } else { (max - rest) / st + 1 };
            if i != 0 && size >= 4 {
                size = size / 4 * 4;
            }
            s[i] = size.min(s[i] - 1).max(1);
        }
        s[3] = s[3].min(MAX_K_PER_DISPATCH);
        // Even pieces: as many as the sizes need, each as equal as multiples of 4 allow.
        for i in 0..4 {
            let pieces = full[i].div_ceil(s[i]);
            let even = full[i].div_ceil(pieces);
            s[i] = if i != 0 && s[i] >= 4 { even.div_ceil(4) * 4 } else { even }.min(s[i]);
        }
        Ok(s)
    }

    /// Binds with an explicit tile variant (a name from `shaders::MATMUL_VARIANTS`).
    pub fn bind_variant(&self, gpu: &Gpu, variant: &str, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
        self.check(&a, &b, &c)?;
        let (bm, bn) = tile(variant)?;
        if subgroup_variant(variant) && !subgroup_variants(gpu) {
            return Err(GpuError::Shader {
                shader: "matmul".into(),
                reason: format!(
                    "variant '{variant}' needs subgroups of at most 8 invocations of one fixed size; this adapter has {}",
                    if gpu.features.contains(wgpu::Features::SUBGROUP) {
                        format!("{}..{}", gpu.info.subgroup_min_size, gpu.info.subgroup_max_size)
                    } else {
                        "none".to_string()
                    }
                ),
            });
        }
        let entry = self.entry_point(variant)?;
        let (tiles_m, tiles_n) = (self.m.div_ceil(bm), self.n.div_ceil(bn));
        let total = tiles_m as u64 * tiles_n as u64 * (self.batch * self.outer) as u64;
        let max = gpu.limits.max_compute_workgroups_per_dimension;
        if total > max as u64 * max as u64 || total > u32::MAX as u64 {
            return Err(GpuError::Shape(format!(
                "matmul {}x{}x{} (batch {}): {total} tiles of {bm}x{bn} exceed one dispatch",
                self.m, self.n, self.k, self.batch
            )));
        }
        let p = Params {
            m: self.m as u32,
            n: self.n as u32,
            k: self.k as u32,
            accumulate: self.accumulate as u32,
            a_off: self.a.offset as u32,
            a_rs: self.a.row_stride as u32,
            a_cs: self.a.col_stride as u32,
            a_bs: self.a.batch_stride as u32,
            b_off: self.b.offset as u32,
            b_rs: self.b.row_stride as u32,
            b_cs: self.b.col_stride as u32,
            b_bs: self.b.batch_stride as u32,
            c_off: self.c.offset as u32,
            c_rs: self.c.row_stride as u32,
            c_bs: self.c.batch_stride as u32,
            alpha: self.alpha,
            tiles_n: tiles_n as u32,
            tiles_m: tiles_m as u32,
            total: total as u32,
            _pad: 0,
            nb_in: self.batch as u32,
            a_os: self.outer_strides[0] as u32,
            b_os: self.outer_strides[1] as u32,
            c_os: self.outer_strides[2] as u32,
        };
        let kern = gpu.kernel("matmul", Some(variant), entry)?;
        let mut bufs = vec![("a", a), ("b", b), ("c", c)];
        if entry != "matmul" && entry != "mm_ss" {
            // The vec4 entry points read the same buffers four floats at a time.
            bufs.push(("a4", a));
            bufs.push(("b4", b));
        }
        kern.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &bufs, grid_1d(total, 1, max))
    }

    /// The entry point `variant` runs this product with: `matmul` for the workgroup-memory
    /// variants; for the register-block variants, the vec4 entry point matching the operands'
    /// layouts (`mm_kk`, `mm_kn`, `mm_mn`, `mm_mk`) or `mm_ss` when no vec4 form applies.
    pub fn entry_point(&self, variant: &str) -> Result<&'static str> {
        if !direct(variant)? {
            return Ok("matmul");
        }
        // vec4 reads need the operand's offset and batch stride, and the stride between its
        // vec4s, to be multiples of 4. Reading along M or N also needs M or N a multiple of 4
        // (a vec4 never straddles the edge of the product), or room past the edge (`pad_reads`). K ≥ 4 (M, N ≥ 4) also keeps every
        // operand bound as `array<vec4<f32>>` at least one vec4 long, as binding requires.
        let q = |x: usize| x.is_multiple_of(4);
        let outer = |i: usize| self.outer == 1 || q(self.outer_strides[i]);
        let base = |o: &Operand, i: usize| q(o.offset) && (self.batch == 1 || q(o.batch_stride)) && outer(i);
        let k4 = self.k >= 4;
        let a_k = base(&self.a, 0) && k4 && self.a.col_stride == 1 && q(self.a.row_stride);
        let a_m = base(&self.a, 0) && self.a.row_stride == 1 && q(self.a.col_stride) && (q(self.m) || self.pad_reads);
        let b_k = base(&self.b, 1) && k4 && self.b.row_stride == 1 && q(self.b.col_stride);
        let b_n = base(&self.b, 1) && self.b.col_stride == 1 && q(self.b.row_stride) && (q(self.n) || self.pad_reads);
        let g = subgroup_variant(variant);
        Ok(match (a_k, a_m, b_k, b_n) {
            (true, _, true, _) if g => "mm_kk_g",
            (true, _, _, true) if g => "mm_kn_g",
            (_, true, _, true) if g => "mm_mn_g",
            (_, true, true, _) if g => "mm_mk_g",
            (true, _, true, _) => "mm_kk",
            (true, _, _, true) => "mm_kn",
            (_, true, _, true) => "mm_mn",
            (_, true, true, _) => "mm_mk",
            _ => "mm_ss",
        })
    }
}

fn variant_const(variant: &str, name: &str) -> Result<usize> {
    let v = MATMUL_VARIANTS
        .iter()
        .find(|v| v.name == variant)
        .ok_or_else(|| GpuError::Shader { shader: "matmul".into(), reason: format!("no variant '{variant}'") })?;
    v.consts.iter().find(|c| c.0 == name).and_then(|c| c.2.trim_end_matches('u').parse().ok()).ok_or_else(|| {
        GpuError::Shader { shader: "matmul".into(), reason: format!("variant '{variant}' has no constant {name}") }
    })
}

/// Whether a variant is a register-block (`mm_*`, CPU) variant rather than a workgroup-memory one.
pub fn direct(variant: &str) -> Result<bool> {
    Ok(variant_const(variant, "DIRECT")? != 0)
}

/// The BM×BN tile of a variant (outputs per workgroup).
pub fn tile(variant: &str) -> Result<(usize, usize)> {
    Ok((variant_const(variant, "BM")?, variant_const(variant, "BN")?))
}

/// Names of all tile variants.
pub fn variants() -> Vec<&'static str> {
    MATMUL_VARIANTS.iter().map(|v| v.name).collect()
}

/// Whether a variant loads A once per subgroup (`…g`: the register-block tiles with the
/// `mm_*_g` entry points).
pub fn subgroup_variant(variant: &str) -> bool {
    variant.ends_with('g')
}

/// Whether this adapter can run the `…g` variants: it has subgroups, and every subgroup lies
/// within one row of the workgroup (DX = 8 invocations along x, which share their A rows): the
/// subgroup size is fixed and divides 8 (llvmpipe: 8; GPUs with 16–64 are excluded). Subgroups are
/// taken to be runs of consecutive invocation indices, as every Vulkan, Metal and D3D12
/// implementation forms them. The device's `matmul_subgroup` form ([`super::forms::Forms`]:
/// on where the subgroups fit; `DDL_FORMS=matmul_subgroup=0` leaves them out).
pub fn subgroup_variants(gpu: &Gpu) -> bool {
    gpu.features.contains(wgpu::Features::SUBGROUP) && gpu.forms.matmul_subgroup
}

/// The tile variants this adapter can run (the `…g` ones only where [`subgroup_variants`]).
pub fn variants_for(gpu: &Gpu) -> Vec<&'static str> {
    let g = subgroup_variants(gpu);
    variants().into_iter().filter(|v| g || !subgroup_variant(v)).collect()
}

/// Shape bucket for the autotune cache: powers of two of M, N, K and the operand layouts.
fn bucket(mm: &Matmul) -> String {
    let l = |x: usize| (x.max(1) as f64).log2().round() as u32;
    format!("{}x{}x{}|a{}b{}", l(mm.m), l(mm.n), l(mm.k), (mm.a.col_stride == 1) as u8, (mm.b.col_stride == 1) as u8)
}

/// The autotune cache key: adapter, shape bucket, and the variant set the measurement chose
/// from (a choice made before variants were added is measured again).
fn cache_key(gpu: &Gpu, mm: &Matmul) -> String {
    format!("{}|{}|{}", gpu.adapter_key(), bucket(mm), variants_for(gpu).join(","))
}

/// The heuristic choice. On a CPU adapter (llvmpipe, SwiftShader): the register-block variant
/// with the least estimated time — padded work per thread-round over measured efficiency (see
/// `docs/PERF.md`). On a GPU: the biggest workgroup-memory tile that still gives enough
/// workgroups.
pub fn heuristic(gpu: &Gpu, mm: &Matmul) -> &'static str {
    if gpu.forms.cpu {
        let v = cpu_heuristic(mm, gpu.forms.cpu_threads);
        if subgroup_variants(gpu) {
            return match v {
                "r128" => "r128g",
                "c64" => "c64g",
                "r32" => "r32g",
                _ => "r8g",
            };
        }
        return v;
    }
    for v in ["t64", "t32"] {
        let (bm, bn) = tile(v).unwrap();
        let groups = mm.m.div_ceil(bm) * mm.n.div_ceil(bn) * mm.batch * mm.outer;
        if mm.m >= bm / 2 && mm.n >= bn / 2 && groups >= 64 {
            return v;
        }
    }
    "t16"
}

/// The CPU choice: each variant's time is estimated as (rounds of `threads` workgroups) × (tile
/// outputs) ÷ (its measured throughput relative to `r128` on llvmpipe). Smaller tiles win when
/// the big tile would be mostly padding or leave threads idle.
fn cpu_heuristic(mm: &Matmul, threads: usize) -> &'static str {
    let mut best = ("r128", f64::INFINITY);
    for (v, eff) in [("r128", 1.0), ("c64", 0.8), ("r32", 0.95), ("r8", 0.85)] {
        let (bm, bn) = tile(v).unwrap();
        let groups = mm.m.div_ceil(bm) * mm.n.div_ceil(bn) * mm.batch * mm.outer;
        let cost = groups.div_ceil(threads) as f64 * (bm * bn) as f64 / eff;
        if cost < best.1 {
            best = (v, cost);
        }
    }
    best.0
}

/// Autotune state: measured choices per (adapter, bucket), persisted as JSON.
pub mod autotune {
    use super::*;

    static ENABLED: OnceLock<Mutex<bool>> = OnceLock::new();
    static CACHE: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();

    /// Turns measuring on or off for this process (off by default: the heuristic and earlier
    /// measurements are used). The CLI enables it for training and benchmarks.
    pub fn set_enabled(on: bool) {
        *ENABLED.get_or_init(|| Mutex::new(false)).lock().unwrap() = on;
    }

    pub fn enabled() -> bool {
        *ENABLED.get_or_init(|| Mutex::new(false)).lock().unwrap()
    }

    /// `$DDL_CACHE_DIR`, else `$XDG_CACHE_HOME/ddl`, else `~/.cache/ddl`.
    pub fn cache_path() -> Option<PathBuf> {
        let dir = if let Ok(d) = std::env::var("DDL_CACHE_DIR") {
            PathBuf::from(d)
        } else if let Ok(d) = std::env::var("XDG_CACHE_HOME") {
            PathBuf::from(d).join("ddl")
        } else {
            PathBuf::from(std::env::var("HOME").ok()?).join(".cache").join("ddl")
        };
        Some(dir.join("matmul-autotune.json"))
    }

    pub(super) fn cache() -> &'static Mutex<HashMap<String, String>> {
        CACHE.get_or_init(|| {
            let map = cache_path()
                .and_then(|p| std::fs::read_to_string(p).ok())
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or_default();
            Mutex::new(map)
        })
    }

    pub(super) fn save() {
        let Some(path) = cache_path() else { return };
        let map = cache().lock().unwrap().clone();
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        // Atomic replace: a crash never leaves a half-written cache.
        let tmp = path.with_extension("json.tmp");
        if std::fs::write(&tmp, serde_json::to_string_pretty(&map).unwrap_or_default()).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }

    /// Times every variant on scratch buffers of this shape and returns `(variant, ms)`, fastest
    /// first. The heuristic's choice is timed first; a variant whose first timed run takes more
    /// than 3× the best median so far is not repeated (the other kernel family is 10–50× slower
    /// on some adapters, and repeating it would make tuning cost minutes).
    pub fn measure(gpu: &Gpu, mm: &Matmul, reps: usize) -> Result<Vec<(&'static str, f64)>> {
        let [ea, eb, ec] = mm.extents();
        let a = Tensor::zeros(gpu, "tune.a", &[ea], crate::gpu::DType::F32)?;
        let b = Tensor::zeros(gpu, "tune.b", &[eb], crate::gpu::DType::F32)?;
        let c = Tensor::zeros(gpu, "tune.c", &[ec], crate::gpu::DType::F32)?;
        let first = heuristic(gpu, mm);
        let mut order = vec![first];
        order.extend(variants_for(gpu).into_iter().filter(|v| *v != first));
        let mut out: Vec<(&'static str, f64)> = Vec::new();
        let mut best = f64::INFINITY;
        for v in order {
            let d = mm.bind_variant(gpu, v, a.view(), b.view(), c.view())?;
            gpu.run(&[&d])?; // warm-up (pipeline compile, caches)
            let time_once = || -> Result<f64> {
                let mut r = Recorder::profiled(gpu);
                let t0 = Instant::now();
                r.record(&[&d]);
                let kt = r.submit()?;
                Ok(kt.first().map(|k| k.ns / 1e6).unwrap_or(t0.elapsed().as_secs_f64() * 1e3))
            };
            let mut times = vec![time_once()?];
            if times[0] <= 3.0 * best {
                for _ in 1..reps.max(1) {
                    times.push(time_once()?);
                }
            }
            times.sort_by(|x, y| x.partial_cmp(y).unwrap());
            let med = times[times.len() / 2];
            best = best.min(med);
            out.push((v, med));
        }
        out.sort_by(|x, y| x.1.partial_cmp(&y.1).unwrap());
        Ok(out)
    }

    /// Measures this shape's bucket now (regardless of [`enabled`]) and stores the winner.
    pub fn tune(gpu: &Gpu, mm: &Matmul) -> Result<&'static str> {
        let best = measure(gpu, mm, 3)?[0].0;
        let key = cache_key(gpu, mm);
        cache().lock().unwrap().insert(key, best.to_string());
        save();
        Ok(best)
    }
}

/// The variant used for a product: a cached measurement for this adapter and shape bucket,
/// a fresh measurement when autotuning is enabled, else the heuristic.
pub fn pick(gpu: &Gpu, mm: &Matmul) -> &'static str {
    let key = cache_key(gpu, mm);
    if let Some(v) = autotune::cache().lock().unwrap().get(&key)
        && let Some(name) = variants_for(gpu).into_iter().find(|n| n == v)
    {
        return name;
    }
    if autotune::enabled()
        && let Ok(v) = autotune::tune(gpu, mm)
    {
        return v;
    }
    heuristic(gpu, mm)
}

/// [`Gpu::shared_scratch`] key of the K-pieces scratch ([`Matmul::bind_split_k`]): one buffer for
/// every split product of a device.
pub const K_PIECES_SCRATCH: &str = "matmul.k_pieces";

/// The most scratch elements ([`Matmul::k_pieces`] pieces × m × n) a packed `[m, n]` product over
/// `k` can ask for: 0 where it is never split (k < 512 or m·n > 2^16), else at most
/// min(k / 128, 32) pieces. Programs reserve the largest over their weight gradients up front
/// (and memory plans count it), so the products share one buffer.
pub fn k_pieces_bound(m: usize, n: usize, k: usize) -> usize {
    if k < 512 || m * n > 1 << 16 { 0 } else { (k / 128).clamp(1, 32) * m * n }
}
