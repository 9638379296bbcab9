//! Rotary position embedding (`shaders/rope.wgsl`, spec 3.1 step 2): half-split ("NeoX")
//! convention over the full head dim. `x` is `[rows, heads, head_dim]`; row `r` (one token) has
//! position `pos0 + r % seq_len`.
//!
//! The cos/sin table is computed once on the host in f64 ([`table`]) and read by the shader, so
//! no angle is evaluated in f32 on the GPU (GPU sin/cos are inaccurate for large angles).
//! Forward and backward read one tensor and write another (they may not alias: wgpu forbids
//! binding a buffer read-only and read-write in one dispatch).

use crate::gpu::{DType, Dispatch, Gpu, GpuError, Result, Tensor, View, WG_1D, grid_1d};

/// The shape of a RoPE application. `x` is `[rows, heads, head_dim]`; row `r` has position
/// `pos0 + r % seq_len` (training: rows = B·T, seq_len = T, pos0 = 0; decoding: seq_len = the
/// new tokens per sequence, pos0 = the cache length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RopeShape {
    pub rows: usize,
    pub seq_len: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub pos0: usize,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    pairs: u32,
    half: u32,
    heads: u32,
    seq_len: u32,
    pos0: u32,
    _pad: [u32; 3],
}

/// The cos/sin table `[max_pos, head_dim/2, 2]`: `(cos φ, sin φ)` with `φ = t·θ_i`,
/// `θ_i = base^(−2i/head_dim)`, computed in f64 and rounded once to f32.
pub fn table(gpu: &Gpu, max_pos: usize, head_dim: usize, base: f64) -> Result<Tensor> {
    if max_pos == 0 || head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(GpuError::Shape(format!(
            "rope table: max_pos must be ≥ 1 and head_dim even and ≥ 2, got max_pos {max_pos} \
             head_dim {head_dim}"
        )));
    }
    if max_pos.checked_mul(head_dim).is_none_or(|n| n > (u32::MAX / 2) as usize) {
        return Err(GpuError::Shape(format!(
            "rope table: max_pos {max_pos} × head_dim {head_dim} exceeds 2^31 elements"
        )));
    }
    let half = head_dim / 2;
    let theta: Vec<f64> = (0..half).map(|i| base.powf(-((2 * i) as f64) / head_dim as f64)).collect();
    let mut data = Vec::with_capacity(max_pos * head_dim);
    for t in 0..max_pos {
        for &th in &theta {
            let phi = t as f64 * th;
            data.push(phi.cos() as f32);
            data.push(phi.sin() as f32);
        }
    }
    Tensor::from_f32(gpu, "rope.table", &[max_pos, half, 2], &data)
}

/// Checks the shape alone (not the buffers) and builds the uniform parameters.
fn shape_params(what: &str, s: &RopeShape) -> Result<Params> {
    let bad = |m: String| Err(GpuError::Shape(format!("{what}: {m} (shape {s:?})")));
    if s.rows == 0 || s.seq_len == 0 || s.heads == 0 || s.head_dim == 0 {
        return bad("rows, seq_len, heads and head_dim must be at least 1".into());
    }
    if !s.head_dim.is_multiple_of(2) {
        return bad(format!("head_dim {} is odd; half-split RoPE needs an even head dim", s.head_dim));
    }
    let n = s.rows.checked_mul(s.heads).and_then(|v| v.checked_mul(s.head_dim));
    if n.is_none_or(|n| n > (u32::MAX / 2) as usize) || s.pos0 + s.seq_len > u32::MAX as usize {
        return bad("more than 2^31 elements in one dispatch; split it".into());
    }
    Ok(Params {
        pairs: (s.rows * s.heads * s.head_dim / 2) as u32,
        half: (s.head_dim / 2) as u32,
        heads: s.heads as u32,
        seq_len: s.seq_len as u32,
        pos0: s.pos0 as u32,
        _pad: [0; 3],
    })
}

/// Whether the vec4 entry points (`*4`: four pairs of one head per invocation) apply: the
/// device's `rope_vec4` form, h/2 a multiple of 4 and every view starting on a vec4.
pub fn vec4(gpu: &Gpu, head_dim: usize, views: &[&View]) -> bool {
    gpu.forms.rope_vec4 && head_dim.is_multiple_of(8) && views.iter().all(|v| v.offset.is_multiple_of(16))
}

fn grid(gpu: &Gpu, p: &Params) -> [u32; 3] {
    grid_1d(p.pairs as u64, WG_1D, gpu.limits.max_compute_workgroups_per_dimension)
}

fn bind(
    gpu: &Gpu,
    what: &str,
    entry: &str,
    s: &RopeShape,
    table: View,
    src: (&str, View),
    dst: (&str, View),
) -> Result<Vec<Dispatch>> {
    let p = shape_params(what, s)?;
    let n = s.rows * s.heads * s.head_dim;
    let max_pos = table.len() / s.head_dim;
    if s.pos0 + s.seq_len > max_pos {
        return Err(GpuError::Shape(format!(
            "{what}: positions up to pos0 {} + seq_len {} = {} but the table holds {max_pos} \
             positions ({} elements for head_dim {})",
            s.pos0,
            s.seq_len,
            s.pos0 + s.seq_len,
            table.len(),
            s.head_dim
        )));
    }
    for (name, v) in [src, dst] {
        if v.len() < n {
            return Err(GpuError::Shape(format!(
                "{what}: tensor '{name}' needs rows {} × heads {} × head_dim {} = {n} elements, \
                 the view has {}",
                s.rows,
                s.heads,
                s.head_dim,
                v.len()
            )));
        }
    }
    let mut d = if vec4(gpu, s.head_dim, &[&table, &src.1, &dst.1]) {
        // Views of whole vec4s (lengths checked above).
        gpu.kernel("rope", None, &format!("{entry}4"))?.dispatch(
            gpu,
            Some(bytemuck::bytes_of(&p)),
            &[("table4", table.vec4s()), ("src4", src.1.sub(0, n)), ("dst4", dst.1.sub(0, n))],
            grid_1d((p.pairs / 4) as u64, WG_1D, gpu.limits.max_compute_workgroups_per_dimension),
        )?
    } else {
        gpu.kernel("rope", None, entry)?.dispatch(
            gpu,
            Some(bytemuck::bytes_of(&p)),
            &[("table", table), ("src", src.1), ("dst", dst.1)],
            grid(gpu, &p),
        )?
    };
    // What set_pos0 must check against, kept with the dispatch (a 1-element marker tensor).
    let mark = format!("{MARK}{} {} {} {} {max_pos}", s.rows, s.seq_len, s.heads, s.head_dim);
    d.scratch.push(Tensor::zeros(gpu, &mark, &[1], DType::U32)?);
    Ok(vec![d])
}

/// Label prefix of the marker tensor that records a RoPE dispatch's bound shape:
/// `rows seq_len heads head_dim max_pos`.
const MARK: &str = "rope.bound: ";

/// The bound `(shape without pos0, max_pos)` of a dispatch made by this module.
fn bound(d: &Dispatch) -> Option<(RopeShape, usize)> {
    let t = d.scratch.iter().find(|t| t.label.starts_with(MARK))?;
    let v: Vec<usize> = t.label[MARK.len()..].split(' ').map(|x| x.parse().ok()).collect::<Option<_>>()?;
    let [rows, seq_len, heads, head_dim, max_pos] = v[..] else {
        return None;
    };
    Some((RopeShape { rows, seq_len, heads, head_dim, pos0: 0 }, max_pos))
}

/// `y = RoPE(x)`: `y[i] = x[i] cos φ − x[i+h/2] sin φ`, `y[i+h/2] = x[i] sin φ + x[i+h/2] cos φ`
/// per head, `φ` of the row's position. `table` from [`table`] with the same head dim.
pub fn forward(gpu: &Gpu, s: &RopeShape, table: View, x: View, y: View) -> Result<Vec<Dispatch>> {
    bind(gpu, "rope forward", "rope_forward", s, table, ("x", x), ("y", y))
}

/// `dx = RoPE⁻¹(dy)`: the rotation by −φ (the transpose of the forward).
pub fn backward(gpu: &Gpu, s: &RopeShape, table: View, dy: View, dx: View) -> Result<Vec<Dispatch>> {
    bind(gpu, "rope backward", "rope_backward", s, table, ("dy", dy), ("dx", dx))
}

/// Rewrites the uniform parameters of dispatches made by [`forward`] / [`backward`] for a new
/// `s.pos0` (incremental decoding), without rebinding. The other fields of `s` must be those the
/// dispatches were made with, and `pos0 + seq_len` must stay within the bound table (both
/// checked; nothing is rewritten on error). The new parameters take effect for work submitted
/// after this call.
pub fn set_pos0(gpu: &Gpu, ds: &[Dispatch], s: &RopeShape) -> Result<()> {
    let p = shape_params("rope set_pos0", s)?;
    for d in ds {
        let name = &d.kernel.name;
        let Some((b, max_pos)) = bound(d).filter(|_| name.starts_with("rope[")) else {
            return Err(GpuError::Shape(format!("rope set_pos0: dispatch of kernel '{name}' is not a RoPE dispatch")));
        };
        if (b.rows, b.seq_len, b.heads, b.head_dim) != (s.rows, s.seq_len, s.heads, s.head_dim) {
            return Err(GpuError::Shape(format!(
                "rope set_pos0: dispatch '{name}' was bound for rows {} seq_len {} heads {} \
                 head_dim {}, got {s:?}; only pos0 may change",
                b.rows, b.seq_len, b.heads, b.head_dim
            )));
        }
        if s.pos0 + s.seq_len > max_pos {
            return Err(GpuError::Shape(format!(
                "rope set_pos0: positions up to pos0 {} + seq_len {} = {} but the table holds \
                 {max_pos} positions",
                s.pos0,
                s.seq_len,
                s.pos0 + s.seq_len
            )));
        }
    }
    for d in ds {
        d.set_params(gpu, bytemuck::bytes_of(&p));
    }
    Ok(())
}
