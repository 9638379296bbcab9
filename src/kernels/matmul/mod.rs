//! Batched, strided matrix multiply (`shaders/matmul.wgsl`): C = alpha·op(A)·op(B) (+ C).
//!
//! Covers every product a Transformer's forward and backward need: A·B, A·Bᵀ (weights stored
//! `[out, in]`), Aᵀ·B (weight gradients), with accumulation into C for gradient sums, and a
//! batched form (attention heads). Correct for any M, N, K ≥ 1.
//!
//! Tile variants (`shaders::MatmulKey`) all sum each output over K in the same order
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

//!
//! The folder: this file holds the product's description ([`Matmul`], [`Operand`]), its checks
//! and the one-dispatch launcher; `split.rs` the pieces for operands over one binding and
//! split-K; `variants.rs` the tile variants, the heuristic and [`pick`]; `autotune.rs` the
//! measured choices cached on disk.

pub mod autotune;
pub mod coop;
mod split;
mod variants;

pub use split::{GPU_SPLIT_K_TILES, K_PIECES_SCRATCH, KSplit, k_pieces_bound};
pub use variants::*;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::gpu::{Dispatch, Gpu, GpuError, Recorder, Result, Tensor, View, grid_1d};
use crate::kernels::reduce::{align_elems, binding_elems, chunk_too_small, chunks};
pub use crate::shaders::MatmulElem;
use crate::shaders::MatmulKey;

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
    /// Per operand (A, B): the buffer holds A's rows past M (B's columns past N) up to the next
    /// multiple of 4 (a padded activation such as `[tokens, round4(F)]`): vec4 loads along M
    /// (N) may read them, so those layouts keep their vec4 kernels when M (N) is not a multiple
    /// of 4. What is read there only feeds outputs that are never stored (any value, NaN
    /// included). Only for the operand whose buffer has the padding: the other's rows end at M.
    pub pad_reads: [bool; 2],
    /// How A and B are stored and read ([`MatmulElem`]): f32 (the default), f32 rounded to f16
    /// as read, or f16 storage. The half-precision forms need SHADER_F16 and accumulate in f32.
    pub a_elem: MatmulElem,
    pub b_elem: MatmulElem,
    /// The causal structure of an attention product over a whole score matrix ([`Causal`]);
    /// [`Causal::None`] for every other product.
    pub causal: Causal,
}

/// Rows (queries or keys) per granule of a causal attention product ([`Causal`]): a multiple of
/// every tile's rows (at most 128) and K step, so that a tile's rows lie in one granule and its K
/// range ends at multiples of its K steps.
pub const CAUSAL_GRANULE: usize = 128;

/// How a product over a whole causal attention score matrix (form `attention=causal`,
/// [`crate::kernels::attention`]) skips the masked half, in granules of [`CAUSAL_GRANULE`]:
/// the score products leave the tiles past the granule of their last query unwritten, the
/// softmax step writes row i's probabilities up to the end of its granule (zeros past key i),
/// and the products over them sum only what is written. The sums skip exact zeros only.
/// Products with a causal structure run in one dispatch (never cut into pieces, which would
/// move their rows) on the tile kernels (not the cooperative matrices, whose K loops know
/// nothing of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Causal {
    /// An ordinary product.
    #[default]
    None,
    /// C is a score matrix, rows queries and columns keys (S = Q·Kᵀ, dP = dO·Vᵀ): a tile whose
    /// first key lies at or past the end of its last query's granule is skipped.
    Scores,
    /// K runs over keys, rows are queries (O = P·V, dQ = dS·K): a tile sums keys below the end of
    /// its rows' granule.
    KeysToGranuleEnd,
    /// K runs over queries, rows are keys (dV = Pᵀ·dO, dK = dSᵀ·Q): a tile sums queries from the
    /// start of its rows' granule.
    QueriesFromGranule,
}

/// Added to the kernels' `causal` code of a [`Causal::KeysToGranuleEnd`] or
/// [`Causal::QueriesFromGranule`] product under the form `causal_lpt`: the workgroups take its
/// tiles longest first. In such a product a tile's K range grows with its row granule (over
/// keys) or shrinks with it (over queries), 1 to T/128 granules; in the grid's own order (tiles
/// along N, then M, then batch) the longest tiles of the last batches start last, and the
/// dispatch waits for them. Longest first, its end is the longest tile's (list scheduling).
/// small-124m's attention (48 batches of 8 row tiles of 128, about 264 resident workgroups on
/// an H200) counted in granules, with half a granule a tile for its start and stores: 13.0
/// granules in the grid's order against 8.5 longest first and 7.3 if perfectly balanced
/// (`scripts/gpu-check/causal_order.py`).
pub const CAUSAL_LONGEST_FIRST: u32 = 4;

impl Causal {
    fn code(self) -> u32 {
        match self {
            Causal::None => 0,
            Causal::Scores => 1,
            Causal::KeysToGranuleEnd => 2,
            Causal::QueriesFromGranule => 3,
        }
    }
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
    vec4s: u32,
    nb_in: u32,
    a_os: u32,
    b_os: u32,
    c_os: u32,
    causal: u32,
    gran: u32,
    bm: u32,
    bn: u32,
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
            pad_reads: [false; 2],
            a_elem: MatmulElem::F32,
            b_elem: MatmulElem::F32,
            causal: Causal::None,
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

    /// Lets the vec4 kernels read A's rows up to the next multiple of 4 (see
    /// [`Matmul::pad_reads`]); A's view must hold them.
    pub fn pad_a(mut self, yes: bool) -> Self {
        self.pad_reads[0] = yes;
        self
    }

    /// Lets the vec4 kernels read B's columns up to the next multiple of 4 (see
    /// [`Matmul::pad_reads`]); B's view must hold them.
    pub fn pad_b(mut self, yes: bool) -> Self {
        self.pad_reads[1] = yes;
        self
    }

    /// Elements of A, B and C the product spans from element 0 (one past the last touched;
    /// with `pad_reads`, A's rows (when read along M) and B's columns (along N) rounded up to a
    /// multiple of 4).
    pub fn extents(&self) -> [usize; 3] {
        let o = self.outer.max(1) - 1;
        // Padding is read only by the loads along M (A with unit row stride) or N (B with unit
        // column stride).
        let m = if self.pad_reads[0] && self.a.row_stride == 1 { self.m.next_multiple_of(4) } else { self.m };
        let n = if self.pad_reads[1] && self.b.col_stride == 1 { self.n.next_multiple_of(4) } else { self.n };
        [
            self.a.extent(m, self.k, self.batch) + o * self.outer_strides[0],
            self.b.extent(self.k, n, self.batch) + o * self.outer_strides[1],
            self.c.extent(self.m, self.n, self.batch) + o * self.outer_strides[2],
        ]
    }

    /// Reads A and B as `a` and `b` ([`MatmulElem`]).
    pub fn elems(mut self, a: MatmulElem, b: MatmulElem) -> Self {
        self.a_elem = a;
        self.b_elem = b;
        self
    }

    /// f16 operands when `half` (an f32-stored one rounded to half precision as read, an
    /// f16-stored one as stored), else unchanged: the f16 compute of the linear layers
    /// (`--precision f16`).
    pub fn half(self, half: bool) -> Self {
        let r16 = |e: MatmulElem| if e == MatmulElem::F32 { MatmulElem::R16 } else { e };
        if half { self.elems(r16(self.a_elem), r16(self.b_elem)) } else { self }
    }

    /// Reads A as `e` (B unchanged).
    pub fn a_elem(self, e: MatmulElem) -> Self {
        let b = self.b_elem;
        self.elems(e, b)
    }

    /// Reads B as `e` (A unchanged).
    pub fn b_elem(self, e: MatmulElem) -> Self {
        let a = self.a_elem;
        self.elems(a, e)
    }

    /// Whether either operand is read in half precision.
    pub fn is_half(&self) -> bool {
        self.a_elem.half() || self.b_elem.half()
    }

    /// The product's causal structure ([`Causal`]).
    pub fn causal(mut self, c: Causal) -> Self {
        self.causal = c;
        self
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
        let c = 4.0 * (self.m * self.n) as f64 * if self.accumulate { 2.0 } else { 1.0 };
        let (ea, eb) = (self.a_elem.bytes() as f64, self.b_elem.bytes() as f64);
        (self.batch * self.outer) as f64 * ((self.m * self.k) as f64 * ea + (self.k * self.n) as f64 * eb + c)
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
        let [ea, eb, ec] = self.extents();
        let bytes = [self.a_elem.bytes(), self.b_elem.bytes(), 4];
        for (i, (name, ext, v)) in [("A", ea, a), ("B", eb, b), ("C", ec, c)].into_iter().enumerate() {
            let need = ext as u64 * bytes[i] as u64;
            if need > v.size {
                return bad(format!("{name} needs {need} bytes of its buffer, the binding has {}", v.size));
            }
            if ext as u64 > u32::MAX as u64 {
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

    /// Binds with an explicit tile variant (a `shaders::MatmulKey` name); the dispatch carries
    /// the product's FLOPs ([`Dispatch::flops`]).
    pub fn bind_variant(&self, gpu: &Gpu, variant: &str, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
        let mut d = self.bind_variant_inner(gpu, variant, a, b, c)?;
        d.flops = self.flops();
        Ok(d)
    }

    fn bind_variant_inner(&self, gpu: &Gpu, variant: &str, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
        self.check(&a, &b, &c)?;
        // A staged tile's diagnostic half: its tile, its own entry point.
        let (half_name, diagnostic) = (variant, staged_diagnostic(variant));
        let variant = diagnostic.map_or(variant, |d| d.0);
        let coop = coop::ALL.contains(&variant) || coop::DIAGNOSTIC.contains(&variant);
        // Causal products: the tile variants whose rows divide the granule, and the wide
        // cooperative-matrix kernel on coop128v's staging (128 rows, K slices of 32 within a
        // granule), whose K loop runs `k_span` as the tiles' do.
        let causal_ok =
            if coop { coop::CAUSAL.contains(&variant) } else { CAUSAL_GRANULE.is_multiple_of(tile(variant)?.0) };
        if self.causal != Causal::None && !causal_ok {
            return Err(GpuError::Shader {
                shader: "matmul".into(),
                reason: format!(
                    "a causal attention product ({:?}) runs on the tile variants whose rows divide {CAUSAL_GRANULE} \
                     and on {}, not '{variant}'",
                    self.causal,
                    coop::CAUSAL.join(", ")
                ),
            });
        }
        if coop {
            return coop::bind(self, gpu, variant, a, b, c);
        }
        let (bm, bn) = tile(variant)?;
        if subgroup_variant(variant) && !subgroup_variants(gpu) {
            return Err(GpuError::Shader {
                shader: "matmul".into(),
                // (The forms' word only where the adapter's subgroups would fit: where they do
                // not, the forms leave the variants out for that reason.)
                reason: if !crate::kernels::forms::subgroups_fit_matmul(
                    (gpu.info.subgroup_min_size, gpu.info.subgroup_max_size),
                    gpu.features,
                ) {
                    format!(
                        "variant '{variant}' needs subgroups of at most 8 invocations of one fixed size; this adapter has {}",
                        if gpu.features.contains(wgpu::Features::SUBGROUP) {
                            format!("{}..{}", gpu.info.subgroup_min_size, gpu.info.subgroup_max_size)
                        } else {
                            "none".to_string()
                        }
                    )
                } else {
                    format!(
                        "variant '{variant}' is one of the …g variants, which these kernel forms leave out \
                         (matmul_subgroup=off): choose another variant, or leave matmul_subgroup on"
                    )
                },
            });
        }
        let mut entry = self.entry_point(variant)?;
        if let Some((_, half)) = diagnostic {
            if let Some(reason) = self.diagnostic_unfit(half_name)? {
                return Err(GpuError::Shader { shader: "matmul".into(), reason });
            }
            entry = half;
        }
        let shader_variant = if self.is_half() {
            if !gpu.features.contains(wgpu::Features::SHADER_F16) {
                return Err(GpuError::Shader {
                    shader: "matmul".into(),
                    reason: "f16 operands need SHADER_F16, which this adapter does not offer; use --precision f32"
                        .into(),
                });
            }
            std::borrow::Cow::Owned(key(variant)?.with_elems(self.a_elem, self.b_elem).variant_name())
        } else {
            std::borrow::Cow::Borrowed(variant)
        };
        let (p, total) = self.grid(gpu, bm, bn)?;
        let kern = gpu.kernel("matmul", Some(&shader_variant), entry)?;
        let mut bufs = vec![("a", a), ("b", b), ("c", c)];
        if entry != "matmul" && entry != "mm_ss" {
            // The vec4 entry points read the same buffers four floats at a time.
            bufs.push(("a4", a));
            bufs.push(("b4", b));
        }
        kern.dispatch(
            gpu,
            Some(bytemuck::bytes_of(&p)),
            &bufs,
            grid_1d(total, 1, gpu.limits.max_compute_workgroups_per_dimension),
        )
    }

    /// The kernels' uniform parameters for a grid of `bm × bn` tiles of C (every matmul kernel:
    /// the tiles and the cooperative matrices), and the number of tiles; an error when they
    /// exceed one dispatch.
    fn grid(&self, gpu: &Gpu, bm: usize, bn: usize) -> Result<(Params, u64)> {
        let (tiles_m, tiles_n) = (self.m.div_ceil(bm), self.n.div_ceil(bn));
        let total = tiles_m as u64 * tiles_n as u64 * (self.batch * self.outer) as u64;
        let max = gpu.limits.max_compute_workgroups_per_dimension as u64;
        if total > max * max || total > u32::MAX as u64 {
            return Err(GpuError::Shape(format!(
                "matmul {}x{}x{} (batch {}): {total} tiles of {bm}x{bn} exceed one dispatch",
                self.m, self.n, self.k, self.batch
            )));
        }
        Ok((self.params(gpu, (tiles_m, tiles_n), (bm, bn), total), total))
    }

    /// The kernels' `causal` parameter for this product on `gpu`: its [`Causal`] kind's code,
    /// plus [`CAUSAL_LONGEST_FIRST`] where the form `causal_lpt` orders its tiles.
    pub fn causal_code(&self, gpu: &Gpu) -> u32 {
        let ragged = matches!(self.causal, Causal::KeysToGranuleEnd | Causal::QueriesFromGranule);
        self.causal.code() | if ragged && gpu.forms.causal_lpt { CAUSAL_LONGEST_FIRST } else { 0 }
    }

    fn params(&self, gpu: &Gpu, (tiles_m, tiles_n): (usize, usize), (bm, bn): (usize, usize), total: u64) -> Params {
        Params {
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
            vec4s: 0,
            nb_in: self.batch as u32,
            a_os: self.outer_strides[0] as u32,
            b_os: self.outer_strides[1] as u32,
            c_os: self.outer_strides[2] as u32,
            causal: self.causal_code(gpu),
            gran: if self.causal == Causal::None { 0 } else { CAUSAL_GRANULE as u32 },
            bm: bm as u32,
            bn: bn as u32,
        }
    }

    /// Where four consecutive elements of an operand along its unit stride that start at a
    /// multiple of 4 (along K or M of A, K or N of B) sit at a multiple of 4 elements in
    /// every batch, so that one vec4 load reads them: `[A along K, A along M, B along K,
    /// B along N]`. (Whether the four exist, at the edges, is the kernel's to check.)
    fn aligned_quads(&self) -> [bool; 4] {
        let q = |x: usize| x.is_multiple_of(4);
        let outer = |i: usize| self.outer == 1 || q(self.outer_strides[i]);
        let base = |o: &Operand, i: usize| q(o.offset) && (self.batch == 1 || q(o.batch_stride)) && outer(i);
        [
            base(&self.a, 0) && self.a.col_stride == 1 && q(self.a.row_stride),
            base(&self.a, 0) && self.a.row_stride == 1 && q(self.a.col_stride),
            base(&self.b, 1) && self.b.row_stride == 1 && q(self.b.col_stride),
            base(&self.b, 1) && self.b.col_stride == 1 && q(self.b.row_stride),
        ]
    }

    /// Why the staged tile's diagnostic half `variant` ([`STAGED_DIAGNOSTIC`]) cannot run this
    /// product (it runs products whose operands both lie along K, not causal ones), or `None`
    /// where it can or `variant` is no diagnostic half.
    pub fn diagnostic_unfit(&self, variant: &str) -> Result<Option<String>> {
        let Some((tile, _)) = staged_diagnostic(variant) else { return Ok(None) };
        let entry = self.entry_point(tile)?;
        Ok((entry != "wm_kk" || self.causal != Causal::None).then(|| {
            format!(
                "the diagnostic half '{variant}' runs products whose operands both lie along K \
                 (bench matmul --cases nt), not this one (entry point {entry}{})",
                if self.causal == Causal::None { "" } else { ", causal" }
            )
        }))
    }

    /// The entry point `variant` runs this product with: `matmul` for the workgroup-memory
    /// variants `t*`; for the register-block variants, the vec4 entry point matching the
    /// operands' layouts (`mm_kk`, `mm_kn`, `mm_mn`, `mm_mk`) or `mm_ss` when no vec4 form
    /// applies; for the staged variants `w*` likewise `wm_kk` … `wm_mk`, else `mm_ss`.
    pub fn entry_point(&self, variant: &str) -> Result<&'static str> {
        let tile = MatmulKey::parse(variant)
            .ok_or_else(|| GpuError::Shader { shader: "matmul".into(), reason: format!("no variant '{variant}'") })?
            .tile;
        if !tile.direct && !tile.staged {
            return Ok("matmul");
        }
        // vec4 reads need the operand's offset and batch stride, and the stride between its
        // vec4s, to be multiples of 4. Reading along M or N also needs M or N a multiple of 4
        // (a vec4 never straddles the edge of the product), or room past the edge (`pad_reads`). K ≥ 4 (M, N ≥ 4) also keeps every
        // operand bound as `array<vec4<f32>>` at least one vec4 long, as binding requires.
        let q = |x: usize| x.is_multiple_of(4);
        let k4 = self.k >= 4;
        let [a_k, a_m, b_k, b_n] = self.aligned_quads();
        let a_k = a_k && k4;
        let a_m = a_m && (q(self.m) || self.pad_reads[0]);
        let b_k = b_k && k4;
        let b_n = b_n && (q(self.n) || self.pad_reads[1]);
        let g = subgroup_variant(variant);
        if tile.staged {
            // No scalar staged form: `mm_ss` with the same constants covers the same tile.
            return Ok(match (a_k, a_m, b_k, b_n) {
                (true, _, true, _) => "wm_kk",
                (true, _, _, true) => "wm_kn",
                (_, true, _, true) => "wm_mn",
                (_, true, true, _) => "wm_mk",
                _ => "mm_ss",
            });
        }
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
