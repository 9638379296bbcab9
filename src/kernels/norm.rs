//! RMSNorm with gain (`shaders/norm.wgsl`, spec 0 and 11.5): `y = γ ⊙ x·r` with
//! `r = 1/sqrt(mean(x²) + ε)` over the last axis (ε added to the mean square), and its backward.
//!
//! Used for the block pre-norms and the final norm (`dim = d`) and for the per-head QK-norm
//! (`rows = N·H`, `dim = h`, the gain shared across heads).
//!
//! Each row is reduced by a team of invocations whose size depends only on the adapter and `dim`
//! ([`team`]), with a fixed tree, so results are bit-identical run after run. The gain gradient is a deterministic
//! two-pass column reduction over rows (chunks of rows into a scratch buffer, then one
//! workgroup per column); the scratch tensor is allocated at bind time and kept in
//! `Dispatch::scratch`.

use crate::gpu::{DType, Dispatch, Gpu, GpuError, Result, Tensor, View, grid_1d};
use crate::shaders::NormKey;

/// Invocations per workgroup of every norm kernel.
const WG: usize = 256;
/// Invocations per workgroup of the teams-of-one variants (`t1`, `t1g`; shaders/norm.wgsl).
const T1_WG: usize = 64;

/// Invocations per workgroup of the variant that runs teams of `team`.
fn wg_of(team: usize) -> usize {
    if team == 1 { T1_WG } else { WG }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    dim: u32,
    team: u32,
    flag: u32,
    eps: f32,
    chunk: u32,
    chunks: u32,
    _pad: u32,
    // The heads of `rmsnorm_backward_heads` (zero elsewhere): m, then the partials' offsets and
    // row strides (`delta::HeadLayout`).
    m: u32,
    o_bb: u32,
    o_wv: u32,
    o_bv: u32,
    s_wb: u32,
    s_bb: u32,
    s_wv: u32,
    s_bv: u32,
}

/// Invocations that reduce one row. On GPUs: a power of two, about `dim/4` (each lane sums ~4
/// elements), at most one workgroup. On CPU adapters (llvmpipe) with many rows (≥
/// [`CPU_ROWS_PER_INVOCATION`]): 1 — one row per invocation, no workgroup-memory tree (a barrier
/// is a coroutine switch there and every workgroup-memory access a loop over the SIMD lanes;
/// docs/PERF-LOG.md); with few rows (decoding: one token) the team, so that a row is not one lane's
/// sequential loop. Depends on the adapter, `rows` and `dim` only, so the summation order does
/// too. The device's forms `norm_rows` (the CPU rule) and `norm_team` (a fixed size) choose.
pub fn team(gpu: &Gpu, rows: usize, dim: usize) -> usize {
    match gpu.forms.norm_team {
        Some(t) if t.is_power_of_two() && t <= WG => t,
        _ if gpu.forms.norm_one_row_per_invocation && rows >= CPU_ROWS_PER_INVOCATION => 1,
        _ => dim.div_ceil(4).next_power_of_two().min(WG),
    }
}

/// Whether the row kernels run their quad entry points (`*_q`: one row per invocation, four
/// features per vec4 load): with teams of one (CPU adapters) when `dim` is a multiple of 4 and
/// every row view starts on a vec4, when the device's `norm_quads` form is on; that form off also
/// turns off the dγ pass's four-columns-per-invocation form (any adapter, dim a multiple of 4).
pub fn quads(gpu: &Gpu, team: usize, dim: usize, views: &[&View]) -> bool {
    team == 1 && dim.is_multiple_of(4) && views.iter().all(|v| v.offset.is_multiple_of(16)) && gpu.forms.norm_quads
}

/// Quads one invocation of the vec teams keeps in registers (`VC` in shaders/norm.wgsl).
const VC: usize = 4;

/// The team of the vec form (`norm_vec`: [`rmsnorm_forward`] and [`rmsnorm_backward`] with a
/// row's quads in registers, dx and dγ's partials in one pass) for these rows, or `None` where it
/// does not run: the form off, rows going to one invocation each (the CPU rule of [`team`], or
/// `norm_team=1`), `dim` not a multiple of 4 or above 4·4·256 = 4096, or a view off a 16-byte
/// boundary. The team: the forced `norm_team` where its lanes hold the row (dim/4 ≤ 4·team),
/// else about three quads a lane (at least a whole row or 32 lanes), a power of two ≤ 256.
pub fn vec_team(gpu: &Gpu, rows: usize, dim: usize, views: &[&View]) -> Option<usize> {
    let one_row_each = match gpu.forms.norm_team {
        Some(t) => t == 1,
        None => gpu.forms.norm_one_row_per_invocation && rows >= CPU_ROWS_PER_INVOCATION,
    };
    if !gpu.forms.norm_vec
        || one_row_each
        || !dim.is_multiple_of(4)
        || !views.iter().all(|v| v.offset.is_multiple_of(16))
    {
        return None;
    }
    let dq = dim / 4;
    let t = match gpu.forms.norm_team {
        Some(t) if dq <= VC * t => t,
        _ => dq.div_ceil(3).next_power_of_two().max(dq.next_power_of_two().min(32)).min(WG),
    };
    (dq <= VC * t).then_some(t)
}

/// Rows per chunk of the vec form's one-pass backward, whose teams walk a chunk's rows one after
/// another: 8, so that the walks are short and many (1024 teams at small-124m's 8192 block-norm
/// rows, 6144 at its 49152 QK-norm rows) while the chunk partials add 1/24 to the bytes the pass
/// moves (dim floats per 8 rows against 3·dim per row).
const VEC_CHUNK: usize = 8;

/// Rows from which CPU adapters reduce one row per invocation (enough 8-lane groups for the
/// worker threads).
pub const CPU_ROWS_PER_INVOCATION: usize = 64;

/// Rows per chunk of the first dγ pass: at least 16, and at most 1024 chunks.
fn chunk(rows: usize) -> usize {
    rows.div_ceil(1024).max(16)
}

/// Chunks of rows of the dγ partials (and of the heads' partials in [`rmsnorm_backward_heads`]).
pub(crate) fn dgain_chunks(rows: usize) -> usize {
    rows.div_ceil(chunk(rows))
}

/// Elements of scratch one [`rmsnorm_backward`] keeps (the dγ chunk partials), for memory plans.
pub fn backward_scratch_elems(rows: usize, dim: usize) -> usize {
    rows.div_ceil(chunk(rows).min(VEC_CHUNK)) * dim
}

/// The shader variant for a team size: `t1` has teams of one compiled in.
fn variant(team: u32) -> &'static str {
    if team == 1 { T1 } else { NormKey::Team.name() }
}

/// Teams of one compiled in.
const T1: &str = NormKey::One { subgroup: false }.name();

fn params(gpu: &Gpu, rows: usize, dim: usize, eps: f32, flag: bool) -> Params {
    let chunk = chunk(rows);
    Params {
        rows: rows as u32,
        dim: dim as u32,
        team: team(gpu, rows, dim) as u32,
        flag: flag as u32,
        eps,
        chunk: chunk as u32,
        chunks: rows.div_ceil(chunk) as u32,
        ..bytemuck::Zeroable::zeroed()
    }
}

fn check(what: &str, rows: usize, dim: usize, views: &[(&str, &View, usize)]) -> Result<()> {
    if rows == 0 || dim == 0 {
        return Err(GpuError::Shape(format!("{what}: rows and dim must be at least 1, got rows {rows} dim {dim}")));
    }
    if rows.checked_mul(dim).is_none_or(|n| n > (u32::MAX / 2) as usize) {
        return Err(GpuError::Shape(format!(
            "{what}: rows {rows} × dim {dim} exceeds the 2^31 elements of one dispatch; split it"
        )));
    }
    for (name, v, need) in views {
        super::need(what, name, "", v, *need)?;
    }
    Ok(())
}

/// Workgroups of the row kernels: `256 / team` rows per workgroup, 64 with teams of one.
fn row_grid(gpu: &Gpu, rows: usize, dim: usize) -> [u32; 3] {
    let t = team(gpu, rows, dim);
    grid_1d(rows as u64, (wg_of(t) / t) as u32, gpu.limits.max_compute_workgroups_per_dimension)
}

/// RMSNorm forward: `y = gain ⊙ x·r` per row, `rstd[row] = r` saved for the backward.
/// `x`, `y`: `[rows, dim]`; `gain`: `[dim]`; `rstd`: `[rows]`.
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_forward(
    gpu: &Gpu,
    x: View,
    gain: View,
    y: View,
    rstd: View,
    rows: usize,
    dim: usize,
    eps: f32,
) -> Result<Vec<Dispatch>> {
    let n = rows.saturating_mul(dim);
    check("rmsnorm forward", rows, dim, &[("x", &x, n), ("gain", &gain, dim), ("y", &y, n), ("rstd", &rstd, rows)])?;
    let p = params(gpu, rows, dim, eps, false);
    if let Some(t) = vec_team(gpu, rows, dim, &[&x, &gain, &y]) {
        let p = Params { team: t as u32, ..p };
        let k = gpu.kernel("norm", Some(NormKey::Team.name()), "rmsnorm_forward_v")?;
        return Ok(vec![k.dispatch(
            gpu,
            Some(bytemuck::bytes_of(&p)),
            &[("x4", x.sub(0, n)), ("gain4", gain.sub(0, dim)), ("y4", y.sub(0, n)), ("rstd", rstd)],
            grid_1d(rows as u64, (WG / t) as u32, gpu.limits.max_compute_workgroups_per_dimension),
        )?]);
    }
    if quads(gpu, p.team as usize, dim, &[&x, &gain, &y]) {
        let k = gpu.kernel("norm", Some(T1), "rmsnorm_forward_q")?;
        return Ok(vec![k.dispatch(
            gpu,
            Some(bytemuck::bytes_of(&p)),
            &[("x4", x.sub(0, n)), ("gain4", gain.sub(0, dim)), ("y4", y.sub(0, n)), ("rstd", rstd)],
            row_grid(gpu, rows, dim),
        )?]);
    }
    let k = gpu.kernel("norm", Some(variant(p.team)), "rmsnorm_forward")?;
    Ok(vec![k.dispatch(
        gpu,
        Some(bytemuck::bytes_of(&p)),
        &[("x", x), ("gain", gain), ("y", y), ("rstd", rstd)],
        row_grid(gpu, rows, dim),
    )?])
}

/// The tensors of an RMSNorm backward: the forward's input `x` `[rows, dim]`, `gain` `[dim]`
/// and saved `rstd` `[rows]`, the output's gradient `dy` (read), `dx` (written, or added) and
/// `dgain` (added into).
#[derive(Clone, Copy)]
pub struct NormGrads<'a> {
    pub x: View<'a>,
    pub gain: View<'a>,
    pub rstd: View<'a>,
    pub dy: View<'a>,
    pub dx: View<'a>,
    pub dgain: View<'a>,
}

impl<'a> NormGrads<'a> {
    /// Each tensor's name, view and element count at `rows` × `dim`, as [`check`] takes them.
    fn needs(&self, rows: usize, dim: usize) -> Vec<(&'static str, &View<'a>, usize)> {
        let n = rows.saturating_mul(dim);
        vec![
            ("x", &self.x, n),
            ("gain", &self.gain, dim),
            ("rstd", &self.rstd, rows),
            ("dy", &self.dy, n),
            ("dx", &self.dx, n),
            ("dgain", &self.dgain, dim),
        ]
    }
}

/// RMSNorm backward from the saved `rstd`:
/// `dx = r(γ⊙dy) − (r³/D)·x·Σ_i x_i γ_i dy_i` (written, or added when `accumulate_dx`), and
/// `dgain[i] += Σ_rows dy·x·r` (always accumulates, fixed-order reduction over rows).
///
/// Three dispatches: dx, the dγ chunk partials (a `[chunks, dim]` scratch), their column sums;
/// two with the vec teams ([`vec_team`]), whose one pass writes dx and the partials.
///
/// Conditioning: dx removes from `r·γ⊙dy` its component along `x` up to a factor `ε r²`; when
/// `γ⊙dy` is nearly parallel to `x` and `mean(x²) ≫ ε` (always the case for `dim = 1`, where
/// `dx = r γ dy · ε r²`) the result is a small difference of large terms and f32 (including the
/// f32 `rstd` this function receives) keeps only ~`7 − log10(mean(x²)/ε)` digits.
pub fn rmsnorm_backward(
    gpu: &Gpu,
    t: NormGrads<'_>,
    rows: usize,
    dim: usize,
    accumulate_dx: bool,
) -> Result<Vec<Dispatch>> {
    check("rmsnorm backward", rows, dim, &t.needs(rows, dim))?;
    let NormGrads { x, gain, rstd, dy, dx, dgain } = t;
    let n = rows.saturating_mul(dim);
    let p = params(gpu, rows, dim, 0.0, accumulate_dx);
    let pb = bytemuck::bytes_of(&p);
    let max = gpu.limits.max_compute_workgroups_per_dimension;

    if let Some(t) = vec_team(gpu, rows, dim, &[&x, &gain, &dy, &dx]) {
        // One pass for dx and dγ's chunk partials, then their column sums.
        let chunk = VEC_CHUNK;
        let chunks = rows.div_ceil(chunk);
        let p = Params { team: t as u32, chunk: chunk as u32, chunks: chunks as u32, ..p };
        let partial = Tensor::zeros(gpu, "rmsnorm.dgain_partial", &[chunks, dim], DType::F32)?;
        let d1 = gpu.kernel("norm", Some(NormKey::Team.name()), "rmsnorm_backward_v")?.dispatch(
            gpu,
            Some(bytemuck::bytes_of(&p)),
            &[
                ("x4", x.sub(0, n)),
                ("gain4", gain.sub(0, dim)),
                ("rstd_in", rstd),
                ("dy4", dy.sub(0, n)),
                ("dx4", dx.sub(0, n)),
                ("partial4", partial.view()),
            ],
            grid_1d(chunks as u64, (WG / t) as u32, max),
        )?;
        return with_dgain_sums(gpu, vec![d1], partial, dgain, chunks, dim);
    }

    let d_dx = if quads(gpu, p.team as usize, dim, &[&x, &gain, &dy, &dx]) {
        gpu.kernel("norm", Some(T1), "rmsnorm_backward_dx_q")?.dispatch(
            gpu,
            Some(pb),
            &[
                ("x4", x.sub(0, n)),
                ("gain4", gain.sub(0, dim)),
                ("rstd_in", rstd),
                ("dy4", dy.sub(0, n)),
                ("dx4", dx.sub(0, n)),
            ],
            row_grid(gpu, rows, dim),
        )?
    } else {
        gpu.kernel("norm", Some(variant(p.team)), "rmsnorm_backward_dx")?.dispatch(
            gpu,
            Some(pb),
            &[("x", x), ("gain", gain), ("rstd_in", rstd), ("dy", dy), ("dx", dx)],
            row_grid(gpu, rows, dim),
        )?
    };

    let chunks = p.chunks as usize;
    let partial = Tensor::zeros(gpu, "rmsnorm.dgain_partial", &[chunks, dim], DType::F32)?;
    // Four columns per invocation where dim is a multiple of 4 (same sums, same order).
    let d1 = if quads(gpu, 1, dim, &[&x, &dy]) {
        gpu.kernel("norm", Some(NormKey::Team.name()), "rmsnorm_dgain_partial_q")?.dispatch(
            gpu,
            Some(pb),
            &[("x4", x.sub(0, n)), ("rstd_in", rstd), ("dy4", dy.sub(0, n)), ("partial4", partial.view())],
            grid_1d((chunks * dim / 4) as u64, WG as u32, max),
        )?
    } else {
        gpu.kernel("norm", Some(NormKey::Team.name()), "rmsnorm_dgain_partial")?.dispatch(
            gpu,
            Some(pb),
            &[("x", x), ("rstd_in", rstd), ("dy", dy), ("partial", partial.view())],
            grid_1d((chunks * dim) as u64, WG as u32, max),
        )?
    };
    // dγ += the chunks' column sums, in chunk order (a one-workgroup-per-column tree reduction
    // took 0.3-0.6 ms per norm on CPU adapters; the column sum ≈ 0.05).
    with_dgain_sums(gpu, vec![d_dx, d1], partial, dgain, chunks, dim)
}

/// The backward's `passes`, the last of which writes dγ's chunk partials `partial`
/// (`[chunks, dim]`), then the partials' column sums added into `dgain` in chunk order; the
/// partials kept alive by their writer and their first reader.
fn with_dgain_sums(
    gpu: &Gpu,
    mut passes: Vec<Dispatch>,
    partial: Tensor,
    dgain: View,
    chunks: usize,
    dim: usize,
) -> Result<Vec<Dispatch>> {
    let mut sums = crate::kernels::reduce::col_sum(gpu, partial.view(), dgain, chunks, dim, true)?;
    passes.last_mut().expect("a pass writes the partials").scratch.push(partial.clone());
    sums[0].scratch.push(partial);
    passes.extend(sums);
    Ok(passes)
}

/// A delta write's gate and value heads, whose backward [`rmsnorm_backward_heads`] folds into the
/// norm backward of the sublayer's input: the write's per-token `dz` `[rows]` and `du`
/// `[rows, m]` (`delta::backward_write`), the weights `w_beta` `[dim]`, `w_v` `[m, dim]`, and
/// the gradients the heads add into.
pub struct HeadTerms<'a> {
    pub m: usize,
    pub dz: View<'a>,
    pub du: View<'a>,
    pub w_beta: View<'a>,
    pub w_v: View<'a>,
    pub dw_beta: View<'a>,
    pub db_beta: View<'a>,
    pub dw_v: View<'a>,
    pub db_v: View<'a>,
}

/// Whether a model folds its delta writes' heads into the norm backward
/// ([`rmsnorm_backward_heads`]) for `rows` rows of `dim` features and `m` value channels: where
/// that backward runs its quad kernels (CPU adapters, `dim` a multiple of 4, teams of one) and
/// m ≤ 4. There the heads kernel's own pass over (token, feature), two loads and two stores per
/// element, costs more than the few extra loads of the norm's passes (docs/PERF-LOG.md).
/// The device's `norm_heads` form (and `norm_quads`) off turns it off.
/// `views`: those the quad kernels read as vec4s (x, gain, dy, dx, w_β, W_v), which must start on
/// 16-byte boundaries.
pub fn folds_heads(gpu: &Gpu, rows: usize, dim: usize, m: usize, views: &[&View]) -> bool {
    (1..=4).contains(&m)
        && views.iter().all(|v| v.offset.is_multiple_of(16))
        && team(gpu, rows, dim) == 1
        && dim.is_multiple_of(4)
        && gpu.limits.max_storage_buffers_per_shader_stage >= 9
        && gpu.forms.norm_quads
        && gpu.forms.norm_heads
}

/// [`rmsnorm_backward`] of a delta write's sublayer input with the write's heads folded in (spec
/// 11.1): with ∂c = `dy` + ∂z_t·w_β, writes (or adds, `accumulate_dx`) `dx` = the norm's
/// backward of ∂c plus W_vᵀ∂u_t, adds dγ of ∂c into `dgain`, and adds the head gradients
/// ∂w_β += Σ_t ∂z_t c_t (c recomputed as the forward computes it), ∂b_β += Σ_t ∂z_t,
/// ∂W_v += Σ_t ∂u_t x_tᵀ, ∂b_v += Σ_t ∂u_t. So `dy` holds the sublayer's input gradient only
/// and `dx` needs no W_vᵀ∂u beforehand. Needs [`folds_heads`] (an error otherwise). Dispatches:
/// the row pass, the column pass (dγ's and the heads' chunk partials), their column sums.
pub fn rmsnorm_backward_heads(
    gpu: &Gpu,
    t: NormGrads<'_>,
    rows: usize,
    dim: usize,
    accumulate_dx: bool,
    h: &HeadTerms,
) -> Result<Vec<Dispatch>> {
    let m = h.m;
    let mut needs = t.needs(rows, dim);
    needs.extend([
        ("dz", &h.dz, rows),
        ("du", &h.du, rows * m),
        ("w_beta", &h.w_beta, dim),
        ("w_v", &h.w_v, m * dim),
        ("dw_beta", &h.dw_beta, dim),
        ("db_beta", &h.db_beta, 1),
        ("dw_v", &h.dw_v, m * dim),
        ("db_v", &h.db_v, m),
    ]);
    check("rmsnorm backward with heads", rows, dim, &needs)?;
    let NormGrads { x, gain, rstd, dy, dx, dgain } = t;
    let n = rows.saturating_mul(dim);
    if !folds_heads(gpu, rows, dim, m, &[&x, &gain, &dy, &dx, &h.w_beta, &h.w_v]) {
        return Err(GpuError::Shape(format!(
            "rmsnorm backward with heads: needs the quad kernels (a CPU adapter, dim a multiple of 4, \
             rows ≥ {CPU_ROWS_PER_INVOCATION}, views on 16-byte boundaries) and 1 ≤ m ≤ 4; got rows {rows}, \
             dim {dim}, m {m}"
        )));
    }
    let chunks = dgain_chunks(rows);
    let lay = super::delta::HeadLayout::new(
        gpu,
        [(&h.dw_beta, dim), (&h.db_beta, 1), (&h.dw_v, m * dim), (&h.db_v, m)],
        chunks,
    );
    let [_, o_bb, o_wv, o_bv] = lay.offs.map(|x| x as u32);
    let [s_wb, s_bb, s_wv, s_bv] = lay.strides.map(|x| x as u32);
    let p =
        Params { m: m as u32, o_bb, o_wv, o_bv, s_wb, s_bb, s_wv, s_bv, ..params(gpu, rows, dim, 0.0, accumulate_dx) };
    let pb = bytemuck::bytes_of(&p);
    let max = gpu.limits.max_compute_workgroups_per_dimension;
    // Subgroup-shared loads: the weights in the row pass (`kernels::subgroup_loads`; the
    // workgroup a whole number of subgroups, so that every subgroup is full). The column pass
    // loads each row's r, ∂z, ∂u in every invocation (its subgroup-shared form was miscompiled by
    // llvmpipe: `shaders/norm.wgsl`, `rmsnorm_dgain_partial_qh`).
    let sgs = gpu.info.subgroup_max_size.max(1);
    let sg = super::subgroup_loads(gpu) && (T1_WG as u32).is_multiple_of(sgs);
    let (var, entry) = if sg {
        (NormKey::One { subgroup: true }.name(), "rmsnorm_backward_dx_qhg")
    } else {
        (T1, "rmsnorm_backward_dx_qh")
    };
    let d_dx = gpu.kernel("norm", Some(var), entry)?.dispatch(
        gpu,
        Some(pb),
        &[
            ("x4", x.sub(0, n)),
            ("gain4", gain.sub(0, dim)),
            ("rstd_in", rstd),
            ("dy4", dy.sub(0, n)),
            ("dx4", dx.sub(0, n)),
            ("hdz", h.dz),
            ("hdu", h.du),
            ("w_beta4", h.w_beta.sub(0, dim)),
            ("w_v4", h.w_v.sub(0, m * dim)),
        ],
        row_grid(gpu, rows, dim),
    )?;
    let partial = Tensor::zeros(gpu, "rmsnorm.dgain_partial", &[chunks, dim], DType::F32)?;
    let hpart = Tensor::zeros(gpu, "rmsnorm.heads_partial", &[lay.len], DType::F32)?;
    let mut d1 = gpu.kernel("norm", Some(T1), "rmsnorm_dgain_partial_qh")?.dispatch(
        gpu,
        Some(pb),
        &[
            ("x4", x.sub(0, n)),
            ("gain4", gain.sub(0, dim)),
            ("rstd_in", rstd),
            ("dy4", dy.sub(0, n)),
            ("partial4", partial.view()),
            ("hdz", h.dz),
            ("hdu", h.du),
            ("w_beta4", h.w_beta.sub(0, dim)),
            ("hpart", hpart.view()),
        ],
        grid_1d((chunks * (dim / 4)) as u64, T1_WG as u32, max),
    )?;
    let mut heads = lay.col_sums(gpu, &hpart)?;
    d1.scratch.push(hpart.clone());
    if let Some(first) = heads.first_mut() {
        first.scratch.push(hpart);
    }
    let mut out = with_dgain_sums(gpu, vec![d_dx, d1], partial, dgain, chunks, dim)?;
    out.extend(heads);
    Ok(out)
}
