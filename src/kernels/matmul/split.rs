//! Products larger than one dispatch or binding: pieces along batch, M, N (bit-identical) and K
//! (accumulated), and split-K for weight gradients with few output tiles.

use super::*;

impl Matmul {
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
        let one = self.k <= MAX_K_PER_DISPATCH && [&a, &b, &c].iter().all(|v| v.len() <= max);
        if self.causal != Causal::None {
            // Pieces would move the rows and K ranges the causal structure is counted in.
            if !one {
                return Err(GpuError::Shape(format!(
                    "causal attention product {}x{}x{} (batch {}): needs one dispatch, with K ≤ {MAX_K_PER_DISPATCH} \
                     and every operand within one binding of {max} elements (A {}, B {}, C {}); \
                     use the blocked attention (DDL_FORMS=attention=blocked:ROWS)",
                    self.m,
                    self.n,
                    self.k,
                    self.batch * self.outer,
                    a.len(),
                    b.len(),
                    c.len()
                )));
            }
            return Ok(vec![self.bind(gpu, a, b, c)?]);
        }
        if one {
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
                out.extend(self.outer_group(o).bind_split_chunked(gpu, a, b, c, max_chunk)?);
            }
            return Ok(out);
        }
        let mut out = Vec::new();
        for p in self.chunk_pieces(gpu, max)? {
            let [(sa, la), (sb, lb), (sc, lc)] = p.words;
            out.push(p.mm.bind(gpu, a.sub(sa, la), b.sub(sb, lb), c.sub(sc, lc))?);
        }
        Ok(out)
    }

    /// The products [`Matmul::bind_split`] binds for this one on `gpu` with operands as long as
    /// their extents ([`Matmul::extents`]; longer views can split sooner), without binding them:
    /// this product where it runs as one dispatch (or split along K, [`Matmul::k_pieces`]), else
    /// its pieces, each as its dispatch sees it (offsets within its operands' narrowed views). So
    /// that `ddl bench matmul --tune` can measure the pieces' variants as a training step's first
    /// use does (the autotuner picks each piece's variant by its own shape).
    pub fn split_products(&self, gpu: &Gpu) -> Result<Vec<Matmul>> {
        let max = binding_elems(gpu, 1);
        let [ea, eb, ec] = self.extents();
        let bytes = [self.a_elem.bytes(), self.b_elem.bytes(), 4];
        // (A view's length in f32 words, as bind_split sees its operands.)
        let words = |e: usize, b: usize| (e * b).div_ceil(4);
        let one = self.k <= MAX_K_PER_DISPATCH
            && [words(ea, bytes[0]), words(eb, bytes[1]), words(ec, bytes[2])].iter().all(|&w| w <= max);
        if self.causal != Causal::None || one {
            return Ok(vec![*self]);
        }
        if self.outer > 1 {
            let mut out = Vec::new();
            for o in 0..self.outer {
                out.extend(self.outer_group(o).split_products(gpu)?);
            }
            return Ok(out);
        }
        Ok(self.chunk_pieces(gpu, max)?.into_iter().map(|p| p.mm).collect())
    }

    /// Outer batch `o` of a two-level product as an ordinary one-level product.
    fn outer_group(&self, o: usize) -> Matmul {
        let sh = |op: Operand, i: usize| Operand { offset: op.offset + o * self.outer_strides[i], ..op };
        Matmul { a: sh(self.a, 0), b: sh(self.b, 1), c: sh(self.c, 2), outer: 1, outer_strides: [0; 3], ..*self }
    }

    /// The pieces of a one-level product whose operands exceed `max` elements per binding (or
    /// whose K exceeds one dispatch's): each piece's product, and the f32 words of A, B and C its
    /// views start at and span.
    fn chunk_pieces(&self, gpu: &Gpu, max: usize) -> Result<Vec<Piece>> {
        let align = align_elems(gpu);
        let [bs, ms, ns, ks] = self.split_sizes(gpu, max)?;
        // Sub-view from the aligned element at or below `off`; the remainder stays in the offset.
        // An f16-stored operand (`per` = 2 elements to a four-byte word, offsets counting f16
        // elements) starts at an aligned word and spans the words its elements occupy.
        let narrow = |op: Operand, off: usize, dims: [usize; 3], per: usize| -> (Operand, (usize, usize)) {
            let start = off / (align * per) * (align * per);
            let op = Operand { offset: off - start, ..op };
            (op, (start / per, op.extent(dims[0], dims[1], dims[2]).div_ceil(per)))
        };
        let mut out = Vec::new();
        for (b0, bt) in chunks(self.batch, bs) {
            for (m0, mc) in chunks(self.m, ms) {
                for (n0, nc) in chunks(self.n, ns) {
                    for (k0, kc) in chunks(self.k, ks) {
                        let (pa, wa) = narrow(
                            self.a,
                            self.a.offset + b0 * self.a.batch_stride + m0 * self.a.row_stride + k0 * self.a.col_stride,
                            [mc, kc, bt],
                            4 / self.a_elem.bytes(),
                        );
                        let (pb, wb) = narrow(
                            self.b,
                            self.b.offset + b0 * self.b.batch_stride + k0 * self.b.row_stride + n0 * self.b.col_stride,
                            [kc, nc, bt],
                            4 / self.b_elem.bytes(),
                        );
                        let (pc, wc) = narrow(
                            self.c,
                            self.c.offset + b0 * self.c.batch_stride + m0 * self.c.row_stride + n0,
                            [mc, nc, bt],
                            1,
                        );
                        let mm = Matmul {
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
                            pad_reads: [false; 2],
                            a_elem: self.a_elem,
                            b_elem: self.b_elem,
                            causal: Causal::None,
                        };
                        out.push(Piece { mm, words: [wa, wb, wc] });
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
    /// The tiles are counted for the [`heuristic`]'s variant, never the autotuner's: the pieces
    /// decide the summation order, and a timing-dependent choice would make results depend on
    /// what was measured (two fixed-seed runs with fresh autotune caches differed in the last
    /// bits before).
    ///
    /// The device's `split_k_tiles` form sets the target (`busy`): on CPU adapters
    /// ⌈busy / tiles⌉ pieces for outputs of at most 2^16 elements; on GPUs ⌊busy / tiles⌋ with the
    /// tiles counted at 128 × 128 (the tile the split, batched product gets), at least 2, for any
    /// output with fewer than busy / 2 such tiles. At most min(K / 128, 32) pieces either way.
    pub fn k_pieces(&self, gpu: &Gpu) -> usize {
        let rule = KSplit::of(gpu);
        if k_pieces_bound(rule, self.m, self.n, self.k) == 0 {
            return 1;
        }
        let packed_c = self.c.row_stride == self.n && self.c.offset == 0;
        if self.batch * self.outer != 1 || !packed_c {
            return 1;
        }
        if !rule.cpu {
            return gpu_pieces(rule.busy, self.m, self.n, self.k);
        }
        let Ok((bm, bn)) = tile(heuristic(gpu, self)) else { return 1 };
        let tiles = self.m.div_ceil(bm) * self.n.div_ceil(bn);
        if tiles >= rule.busy {
            return 1;
        }
        rule.busy.div_ceil(tiles).min(self.k / 128).clamp(1, 32)
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
        if q == 0 || pieces < 2 || self.causal != Causal::None {
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
        // Each operand's dimensions as (index into the sizes, stride), and its elements per
        // four-byte word (2 for an f16-stored operand, whose offsets and strides count halves).
        let ops = [
            ("A", [(0, self.a.batch_stride), (1, self.a.row_stride), (K, self.a.col_stride)], 4 / self.a_elem.bytes()),
            ("B", [(0, self.b.batch_stride), (K, self.b.row_stride), (2, self.b.col_stride)], 4 / self.b_elem.bytes()),
            ("C", [(0, self.c.batch_stride), (1, self.c.row_stride), (2, self.c.col_stride)], 1),
        ];
        // Worst-case elements bound: the misalignment of the start, then first to last element.
        let span = |dims: &[(usize, usize); 3], per: usize, s: &[usize; 4]| {
            align * per + dims.iter().map(|&(i, st)| (s[i] - 1) * st).sum::<usize>()
        };
        let full = [self.batch, self.m, self.n, self.k];
        let mut s = full;
        while let Some(&(name, dims, per)) = ops.iter().find(|(_, dims, per)| span(dims, *per, &s) > max * per) {
            let (dims, max, align) = (&dims, max * per, align * per);
            let span = |dims: &[(usize, usize); 3], s: &[usize; 4]| span(dims, per, s);
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
                    span(dims, &s).div_ceil(per),
                    max / per,
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
}

/// [`Gpu::shared_scratch`] key of the K-pieces scratch ([`Matmul::bind_split_k`]): one buffer for
/// every split product of a device.
pub const K_PIECES_SCRATCH: &str = "matmul.k_pieces";

/// The GPU default of the `split_k_tiles` form: a guess (about two 128 × 128 workgroups per
/// multiprocessor of a 132-multiprocessor card) until a GPU run measures the sweep
/// (`bench-matmul-model-split*` in the GPU check).
pub const GPU_SPLIT_K_TILES: usize = 256;

/// A device's split-K rule ([`Matmul::k_pieces`]): the adapter kind and its `split_k_tiles`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KSplit {
    pub cpu: bool,
    pub busy: usize,
}

impl KSplit {
    /// The rule of `gpu`'s forms.
    pub fn of(gpu: &Gpu) -> KSplit {
        KSplit { cpu: gpu.forms.cpu, busy: gpu.forms.split_k_tiles }
    }

    /// The rules a device-free memory plan covers (it counts the larger scratch of the two, so
    /// that one plan holds on either kind of adapter): a CPU adapter's (whose bound does not
    /// depend on its target, only on its being non-zero), and a GPU's default.
    pub const PLANNED: [KSplit; 2] = [KSplit { cpu: true, busy: 1 }, KSplit { cpu: false, busy: GPU_SPLIT_K_TILES }];
}

/// Pieces of a GPU's split: ⌊busy / tiles⌋ with tiles of 128 × 128, at most min(k / 128, 32);
/// 1 when that is under 2.
fn gpu_pieces(busy: usize, m: usize, n: usize, k: usize) -> usize {
    let tiles = m.div_ceil(128) * n.div_ceil(128);
    let p = (busy / tiles).min(k / 128).min(32);
    if p < 2 { 1 } else { p }
}

/// The most scratch elements ([`Matmul::k_pieces`] pieces × m × n) a packed `[m, n]` product over
/// `k` can ask for under `rule`: 0 where it is never split (k < 512, `split_k_tiles` 0; on CPU
/// adapters m·n > 2^16, on GPUs fewer than two pieces), else the CPU's at most min(k / 128, 32)
/// pieces or the GPU's count. Programs reserve the largest over their weight gradients up front
/// (and memory plans count it), so the products share one buffer.
pub fn k_pieces_bound(rule: KSplit, m: usize, n: usize, k: usize) -> usize {
    if k < 512 || rule.busy == 0 {
        return 0;
    }
    if rule.cpu {
        return if m * n > 1 << 16 { 0 } else { (k / 128).clamp(1, 32) * m * n };
    }
    match gpu_pieces(rule.busy, m, n, k) {
        1 => 0,
        p => p * m * n,
    }
}

/// One piece of a product split across bindings ([`Matmul::chunk_pieces`]): its product and,
/// per operand (A, B, C), the first f32 word and the words of its view.
struct Piece {
    mm: Matmul,
    words: [(usize, usize); 3],
}
