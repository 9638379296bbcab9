//! The blocked and causal methods of [`forward_seq`] and [`backward`]: the score matrix by
//! blocks of queries (or whole, causal) through the matmul kernels, the softmax steps by the row
//! kernels of `shaders/attention_rows.wgsl`.

use super::*;

/// How [`forward_seq`] and [`backward`] compute attention on an adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The flash-attention kernels above: tiles through workgroup memory, nothing T×T stored.
    /// The GPU method.
    Tiled,
    /// Blocks of (at most) this many queries: the block's scores S = scale·Q·Kᵀ over the keys it
    /// sees and the products P·V (forward), dO·Vᵀ, Pᵀ·dO, dS·K, dSᵀ·Q (backward) run through the
    /// matmul kernels, with a row kernel (`shaders/attention_rows.wgsl`) for the softmax steps
    /// in between. The block's scores live in a scratch of `batch·heads·rows·keys` floats shared
    /// by every layer ([`Gpu::shared_scratch`]); a block has at most half the queries, so the
    /// whole T×T matrix is never stored. The CPU-adapter method: llvmpipe runs the tiled
    /// kernels' workgroup-memory loads and barriers slowly (docs/PERF.md) and the register-blocked
    /// matmuls fast.
    Blocked(usize),
    /// The blocked method's products over the whole score matrix at once (training shapes:
    /// `q_pos0 = 0`, every key cached is a query's): one dispatch per product, each with the
    /// causal structure in its grid and K loop in granules of [`CAUSAL_GRANULE`] queries / keys
    /// ([`Causal`]: the score products skip the tiles past their rows' granule, the products
    /// over keys stop at the end of their rows' granule, those over queries start at its
    /// start), and one softmax step per pass over every row, which writes row i up to the
    /// end of its granule. 56 % of the score matrix at T = 1024 (blocks of 256: 62.5 %), in a
    /// few big dispatches instead of many small ones. The scratch is the whole matrix
    /// (`batch·heads·T·T` floats, the blocked method's keys): where it (or an operand) exceeds
    /// one storage binding the call runs the blocked method instead, with the adapter's
    /// default block ([`default_block_rows`]). out, lse and dQ are the blocked method's bits
    /// (the sums skip exact zeros only); dK and dV sum every query in one product where the
    /// blocked method adds per-block sums (float32 rounding apart).
    Causal,
}

/// The blocked method's default block: [`BLOCK_ROWS`] queries on CPU adapters,
/// [`GPU_BLOCK_ROWS`] on GPUs (what the causal method falls back to).
pub fn default_block_rows(gpu: &Gpu) -> usize {
    if gpu.forms.cpu { BLOCK_ROWS } else { GPU_BLOCK_ROWS }
}

/// Whether the causal method runs this call: a training shape (no query before the cache's
/// first key, every key seen, no cache padding) and the whole score matrix and every operand
/// within one storage binding, K within one dispatch.
pub(super) fn causal_fits(gpu: &Gpu, s: &AttnShape, views: &[&View]) -> bool {
    let max = crate::kernels::reduce::binding_elems(gpu, 1);
    s.q_pos0 == 0
        && s.kv_len == s.q_len
        && s.kv_stride == s.kv_len
        && s.q_len <= crate::kernels::matmul::MAX_K_PER_DISPATCH
        && causal_scratch_elems(s) <= max
        && views.iter().all(|v| v.len() <= max)
}

/// Queries per block of the blocked method on CPU adapters and for a bare `blocked` form:
/// causal blocks skip the keys no query of theirs sees (at T = 256, 64-query blocks compute
/// 62.5 % of the full score matrix).
pub const BLOCK_ROWS: usize = 64;

/// Queries per block on GPUs. Measured on an H200 (docs/GPU.md, run 2: small-124m's attention,
/// B 8, T 1024, 6 heads of 128, `ddl bench kernels`): forward / backward 5.35 / 17.96 ms tiled,
/// 4.82 / 7.95 blocked:64, 2.10 / 4.08 blocked:128, 1.61 / 3.24 blocked:256 — bigger blocks give
/// the matmuls bigger products at the price of more masked scores.
pub const GPU_BLOCK_ROWS: usize = 256;

/// Most floats of one blocked-method scratch (scores, and their gradient in the backward): 128 MiB,
/// so that small-124m's B 8 × T 1024 fits blocks of 512 queries (25.2 M floats) and B 16 blocks
/// of 256 (64 MiB, until session 32, cut both to 341 and 170 queries). The adapter's binding
/// limit caps it too ([`block_rows`]); a scratch is only as large as its blocks need.
const BLOCK_SCRATCH_ELEMS: usize = 32 << 20;

/// The method of this device: its `attention` form ([`crate::kernels::forms::Forms`]): blocks of
/// [`BLOCK_ROWS`] queries on CPU adapters, of [`GPU_BLOCK_ROWS`] on GPUs
/// (`DDL_FORMS=attention=tiled|blocked:ROWS`).
pub fn method(gpu: &Gpu) -> Method {
    gpu.forms.attention
}

/// Keys the last query sees: the score matrices' width.
fn keys_seen(s: &AttnShape) -> usize {
    s.kv_len.min(s.q_pos0 + s.q_len)
}

/// Row stride of the block scratch (a multiple of 4 for vec4 rows).
fn ldk(s: &AttnShape) -> usize {
    keys_seen(s).div_ceil(4) * 4
}

/// Queries per block: at most `rows`, and at most half the queries (rounded up), so the whole
/// q_len × keys score matrix is never stored (two blocks at least whenever q_len ≥ 2).
fn rows_cap(s: &AttnShape, rows: usize) -> usize {
    rows.min(s.q_len.div_ceil(2)).max(1)
}

/// Queries per block for the blocked method (see [`rows_cap`]), so that one scratch fits
/// [`BLOCK_SCRATCH_ELEMS`] and one storage binding; `None` when not even one query per block
/// fits (the caller falls back to the tiled kernels).
pub(super) fn block_rows(gpu: &Gpu, s: &AttnShape, rows: usize) -> Option<usize> {
    let per_row = s.batch * s.heads * ldk(s);
    let cap = BLOCK_SCRATCH_ELEMS.min((gpu.limits.max_storage_buffer_binding_size / 4) as usize);
    let nq = rows_cap(s, rows).min(cap / per_row);
    (nq > 0).then_some(nq)
}

/// Scratch elements one blocked call uses per buffer: for the memory plan.
pub fn block_scratch_elems(s: &AttnShape, rows: usize) -> usize {
    let per_row = s.batch * s.heads * ldk(s);
    rows_cap(s, rows).min(BLOCK_SCRATCH_ELEMS / per_row.max(1)) * per_row
}

/// Scratch elements per buffer of the causal method ([`Method::Causal`]): the whole score matrix.
pub fn causal_scratch_elems(s: &AttnShape) -> usize {
    s.batch * s.heads * s.q_len * ldk(s)
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RowParams {
    heads: u32,
    nq: u32,
    i0: u32,
    q_len: u32,
    q_pos0: u32,
    kv_len: u32,
    ldk: u32,
    total: u32,
    scale: f32,
    nk4: u32,
    team: u32,
    gran: u32,
}

/// How one call of the blocked method cuts the queries: blocks of at most this many, or the
/// whole score matrix with the causal structure in its products ([`Method::Causal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Blocks {
    Of(usize),
    Causal,
}

impl Blocks {
    /// Queries per block.
    fn rows(self, s: &AttnShape) -> usize {
        match self {
            Blocks::Of(nq) => nq,
            Blocks::Causal => s.q_len,
        }
    }

    /// The causal structure of a product of this kind (none for blocks, which cut the
    /// structure into their own shapes).
    fn causal(self, c: Causal) -> Causal {
        if self == Blocks::Causal { c } else { Causal::None }
    }

    /// The softmax step's granule (0: a block's rows all end at its keys).
    fn granule(self) -> usize {
        if self == Blocks::Causal { CAUSAL_GRANULE } else { 0 }
    }
}

/// The blocks: (first query, queries, keys they see), in query order.
fn blocks(s: &AttnShape, nq: usize) -> Vec<(usize, usize, usize)> {
    (0..s.q_len)
        .step_by(nq)
        .map(|i0| {
            let n = nq.min(s.q_len - i0);
            (i0, n, s.kv_len.min(s.q_pos0 + i0 + n))
        })
        .collect()
}

/// Operands of the products of sequence 0 (batch = heads); the sequences are the products'
/// outer batch level ([`Matmul::outer`], strides from [`Ops::outer`]).
struct Ops {
    /// Rows i0.. of a `[batch, q_len, heads, hd]` tensor (q, dout, out, dq), K or N along hd.
    qrows: Operand,
    /// A `[batch, kv_stride, heads, hd]` tensor (k, v, dk, dv), rows τ, columns along hd.
    kvrows: Operand,
    /// The same, transposed (hd × keys), for the score products.
    kvcols: Operand,
    /// The block scratch `[heads, n, ldk]` of sequence b.
    srows: Operand,
    /// The same, transposed (keys × queries).
    scols: Operand,
}

fn ops(s: &AttnShape, i0: usize, n: usize, ldk: usize) -> Ops {
    let (hd, rs) = (s.head_dim, s.heads * s.head_dim);
    let q_off = i0 * rs;
    let kv_off = 0;
    let s_off = 0;
    Ops {
        qrows: Operand { offset: q_off, row_stride: rs, col_stride: 1, batch_stride: hd },
        kvrows: Operand { offset: kv_off, row_stride: rs, col_stride: 1, batch_stride: hd },
        kvcols: Operand { offset: kv_off, row_stride: 1, col_stride: rs, batch_stride: hd },
        srows: Operand { offset: s_off, row_stride: ldk, col_stride: 1, batch_stride: n * ldk },
        scols: Operand { offset: s_off, row_stride: 1, col_stride: ldk, batch_stride: n * ldk },
    }
}

/// Element strides between sequences of the q-like tensors, the k/v-like ones and the block
/// scratch.
fn seq_strides(s: &AttnShape, n: usize, ldk: usize) -> (usize, usize, usize) {
    let rs = s.heads * s.head_dim;
    (s.q_len * rs, s.kv_stride * rs, s.heads * n * ldk)
}

/// The product `a·b → c` for every (sequence, head): heads are the batch, sequences the outer
/// level; `which` names the kind of tensor each operand is ('q', 'k' or 's').
fn product(
    s: &AttnShape,
    (n_blk, ldk): (usize, usize),
    (m, n, k): (usize, usize, usize),
    (a, b, c): (Operand, Operand, Operand),
    which: [char; 3],
) -> Matmul {
    let (qs, ks, ss) = seq_strides(s, n_blk, ldk);
    let st = |w: char| match w {
        'q' => qs,
        'k' => ks,
        _ => ss,
    };
    Matmul {
        m,
        n,
        k,
        batch: s.heads,
        a,
        b,
        c,
        accumulate: false,
        alpha: 1.0,
        outer: s.batch,
        outer_strides: [st(which[0]), st(which[1]), st(which[2])],
        pad_reads: [false; 2],
        a_elem: Default::default(),
        b_elem: Default::default(),
        causal: Causal::None,
    }
    .half(s.half)
}

/// Invocations per row of the blocked method's softmax steps: the device's `attn_team` form (0:
/// one invocation per row, `rows_fwd`/`rows_bwd`; N: a team of N, `*_team`).
pub fn row_team(gpu: &Gpu) -> usize {
    gpu.forms.attention_row_team
}

/// Whether the blocked method stores P and dS in f16 (form `attn_p16`, for `--precision f16`,
/// whose products read them as f16 operands either way: the same bits): the products then read
/// them as f16-stored operands (cut into binding-sized pieces like f32 ones where an operand
/// exceeds one binding).
fn p16(gpu: &Gpu, s: &AttnShape) -> bool {
    s.half && gpu.forms.attn_p16
}

/// The f16 block scratch (`[batch, heads, nq, ldk]` f16 elements, in f32 words) named `key`.
fn half_scratch(gpu: &Gpu, key: &str, elems: usize) -> Result<Tensor> {
    gpu.shared_scratch(key, elems.div_ceil(2))
}

/// The softmax step `entry` (`rows_fwd` or `rows_bwd`) over the block of queries i0..i0+n, which
/// sees `nk` keys, in the device's form ([`row_team`]); P and dS go over `s` and `g`, or, when
/// `bind` has `ph` (and `gh`), into those f16 buffers (variant `h`, [`p16`]). Each row is written
/// up to the block's keys, or, with a granule `gran` > 0 ([`Method::Causal`]), up to the end of
/// its own granule of queries.
fn rows_dispatch(
    gpu: &Gpu,
    entry: &str,
    s: &AttnShape,
    scale: f32,
    (i0, n, nk): (usize, usize, usize),
    (ldk, gran): (usize, usize),
    bind: &[(&str, View<'_>)],
) -> Result<Dispatch> {
    let total = s.batch * s.heads * n;
    let team = row_team(gpu);
    let p = RowParams {
        heads: s.heads as u32,
        nq: n as u32,
        i0: i0 as u32,
        q_len: s.q_len as u32,
        q_pos0: s.q_pos0 as u32,
        kv_len: s.kv_len as u32,
        ldk: ldk as u32,
        total: total as u32,
        scale,
        nk4: nk.div_ceil(4) as u32,
        team: team as u32,
        gran: gran as u32,
    };
    // Rows per workgroup: 64 of one invocation each, or ROW_TEAM_WG / team.
    let (entry, rows_per_group) = match ROW_TEAM_WG.checked_div(team) {
        None => (entry.to_string(), 64),
        Some(rows) => (format!("{entry}_team"), rows),
    };
    let variant = if bind.iter().any(|(name, _)| *name == "ph") { "h" } else { "f32" };
    gpu.kernel("attention_rows", Some(variant), &entry)?.dispatch(
        gpu,
        Some(bytemuck::bytes_of(&p)),
        bind,
        grid_1d(total as u64, rows_per_group as u32, gpu.limits.max_compute_workgroups_per_dimension),
    )
}

/// Invocations per workgroup of the team forms (`TWG` in `shaders/attention_rows.wgsl`): the
/// largest `attn_team`.
pub const ROW_TEAM_WG: usize = 128;

/// The forward for whole sequences (training, full recompute): by the adapter's [`method`]
/// (tiled kernels, or blocks of queries through the matmul kernels). Same outputs as
/// [`forward`]; decoding programs use [`forward`] itself, whose single dispatch [`set_kv`]
/// moves.
pub fn forward_seq(gpu: &Gpu, s: &AttnShape, scale: f32, io: AttnIo<'_>) -> Result<Vec<Dispatch>> {
    let AttnIo { q, k, v, out, lse } = io;
    let rows = match method(gpu) {
        Method::Tiled => None,
        Method::Blocked(rows) => Some(rows),
        Method::Causal if causal_fits(gpu, s, &[&q, &k, &v, &out]) => {
            check_forward("forward", s, [&q, &k, &v, &out, &lse])?;
            return forward_blocked(gpu, s, scale, Blocks::Causal, io);
        }
        Method::Causal => Some(default_block_rows(gpu)),
    };
    if let Some(rows) = rows {
        check_forward("forward", s, [&q, &k, &v, &out, &lse])?;
        if let Some(nq) = block_rows(gpu, s, rows) {
            return forward_blocked(gpu, s, scale, Blocks::Of(nq), io);
        }
    }
    forward(gpu, s, scale, io)
}

fn forward_blocked(gpu: &Gpu, s: &AttnShape, scale: f32, cut: Blocks, io: AttnIo<'_>) -> Result<Vec<Dispatch>> {
    let AttnIo { q, k, v, out, lse } = io;
    let (hh, hd, ldk, nq) = (s.heads, s.head_dim, ldk(s), cut.rows(s));
    let elems = s.batch * hh * nq * ldk;
    let sc = gpu.shared_scratch("attention.blocked.s", elems)?;
    // P for the value product: over the scores, or in f16 (`attn_p16`).
    let ph = if p16(gpu, s) { Some(half_scratch(gpu, "attention.blocked.p16", elems)?) } else { None };
    let mut ds = Vec::new();
    for (i0, n, nk) in blocks(s, nq) {
        let o = ops(s, i0, n, ldk);
        let blk = (n, ldk);
        let scores = product(s, blk, (n, nk, hd), (o.qrows, o.kvcols, o.srows), ['q', 'k', 's'])
            .causal(cut.causal(Causal::Scores));
        ds.extend(Matmul { alpha: scale, ..scores }.bind_split(gpu, q, k, sc.view())?);
        let mut bind = vec![("s", sc.view()), ("lse", lse)];
        bind.extend(ph.as_ref().map(|p| ("ph", p.view())));
        ds.push(rows_dispatch(gpu, "rows_fwd", s, scale, (i0, n, nk), (ldk, cut.granule()), &bind)?);
        let pv = product(s, blk, (n, hd, nk), (o.srows, o.kvrows, o.qrows), ['s', 'k', 'q'])
            .causal(cut.causal(Causal::KeysToGranuleEnd));
        match &ph {
            Some(p) => ds.extend(pv.a_elem(MatmulElem::F16).bind_split(gpu, p.view(), v, out)?),
            None => ds.extend(pv.bind_split(gpu, sc.view(), v, out)?),
        }
    }
    ds[0].scratch.push(sc);
    ds[0].scratch.extend(ph);
    Ok(products_tagged(ds))
}

/// The blocked method's dispatches with its products' role set (`attention`: a profile keeps
/// them apart from the linear layers' products, which run the same kernels); the softmax steps
/// are named by their own kernel.
fn products_tagged(mut ds: Vec<Dispatch>) -> Vec<Dispatch> {
    for d in ds.iter_mut().filter(|d| !d.kernel.name.starts_with("attention_rows")) {
        d.role = Some("attention");
    }
    ds
}

/// The blocked backward (`kv_stride = kv_len`, every key seen by the last query; [`backward`]
/// checked the views). Blocks run last
/// to first: the last one sees every key and writes all of dk and dv; the earlier ones add into
/// the rows they see.
pub(super) fn backward_blocked(
    gpu: &Gpu,
    s: &AttnShape,
    scale: f32,
    cut: Blocks,
    io: AttnIo<'_>,
    g: AttnGrads<'_>,
) -> Result<Vec<Dispatch>> {
    // (out is not read: the softmax step sums dP ⊙ P over each row's keys, which a block holds
    // whole, where the tiled backward takes dout · out.)
    let AttnIo { q, k, v, lse, .. } = io;
    let AttnGrads { dout, dq, dk, dv } = g;
    let (hh, hd, ldk, nq) = (s.heads, s.head_dim, ldk(s), cut.rows(s));
    let elems = s.batch * hh * nq * ldk;
    let sc = gpu.shared_scratch("attention.blocked.s", elems)?;
    let gs = gpu.shared_scratch("attention.blocked.ds", elems)?;
    // P and dS for the products: over the scores and dP, or in f16 (`attn_p16`).
    let half = if p16(gpu, s) {
        Some((half_scratch(gpu, "attention.blocked.p16", elems)?, half_scratch(gpu, "attention.blocked.ds16", elems)?))
    } else {
        None
    };
    let mut ds = Vec::new();
    for &(i0, n, nk) in blocks(s, nq).iter().rev() {
        let first = ds.is_empty();
        let o = ops(s, i0, n, ldk);
        let blk = (n, ldk);
        let scores = product(s, blk, (n, nk, hd), (o.qrows, o.kvcols, o.srows), ['q', 'k', 's'])
            .causal(cut.causal(Causal::Scores));
        ds.extend(Matmul { alpha: scale, ..scores }.bind_split(gpu, q, k, sc.view())?);
        ds.extend(scores.bind_split(gpu, dout, v, gs.view())?);
        let mut bind = vec![("s", sc.view()), ("g", gs.view()), ("lse_saved", lse)];
        bind.extend(half.iter().flat_map(|(p, g)| [("ph", p.view()), ("gh", g.view())]));
        ds.push(rows_dispatch(gpu, "rows_bwd", s, scale, (i0, n, nk), (ldk, cut.granule()), &bind)?);
        // dV (+)= Pᵀ·dO and dK (+)= dSᵀ·Q (the same shapes), then dQ = dS·K: P and dS read from
        // where the softmax step put them.
        let tq = product(s, blk, (nk, hd, n), (o.scols, o.qrows, o.kvrows), ['s', 'q', 'k'])
            .accumulate(!first)
            .causal(cut.causal(Causal::QueriesFromGranule));
        let dqp = product(s, blk, (n, hd, nk), (o.srows, o.kvrows, o.qrows), ['s', 'k', 'q'])
            .causal(cut.causal(Causal::KeysToGranuleEnd));
        let (tq, dqp, p, g) = match &half {
            Some((p, g)) => (tq.a_elem(MatmulElem::F16), dqp.a_elem(MatmulElem::F16), p.view(), g.view()),
            None => (tq, dqp, sc.view(), gs.view()),
        };
        ds.extend(tq.bind_split(gpu, p, dout, dv)?);
        ds.extend(tq.bind_split(gpu, g, q, dk)?);
        ds.extend(dqp.bind_split(gpu, g, k, dq)?);
    }
    ds[0].scratch.extend([sc, gs]);
    ds[0].scratch.extend(half.into_iter().flat_map(|(p, g)| [p, g]));
    Ok(products_tagged(ds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_never_cover_the_whole_score_matrix_and_see_only_their_keys() {
        for t in [2, 3, 17, 64, 65, 256, 1024] {
            let s = AttnShape::training(2, 3, 8, t);
            let nq = rows_cap(&s, BLOCK_ROWS);
            assert!(nq < t, "T {t}: a block of {nq} queries is the whole T×T matrix");
            let bl = blocks(&s, nq);
            assert_eq!(bl.iter().map(|b| b.1).sum::<usize>(), t, "T {t}: blocks must cover every query once");
            for &(i0, n, nk) in &bl {
                assert_eq!(nk, i0 + n, "T {t}: causal block at {i0} sees keys < {}", i0 + n);
            }
        }
        assert_eq!(rows_cap(&AttnShape::training(1, 1, 8, 1), BLOCK_ROWS), 1);
        assert_eq!(rows_cap(&AttnShape::training(1, 1, 8, 1000), BLOCK_ROWS), BLOCK_ROWS);
    }
}
