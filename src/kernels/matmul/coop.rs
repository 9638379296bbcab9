//! Products on cooperative matrices (tensor cores; `shaders/matmul_coop.wgsl`): f16 operands,
//! f32 accumulation, 16×16×16 fragments at subgroup scope, tiles of 32 × 32 outputs (or 64 × 64:
//! [`VARIANT64`]) per workgroup of one subgroup, or 128 × 128 per workgroup of eight
//! ([`VARIANT128`], self-tested apart; [`VARIANT128V`] the same on another staging); on Metal,
//! 8×8×8 fragments, 64 × 64 per workgroup of four ([`VARIANT8`], `shaders/matmul_coop8.wgsl`). The same [`Matmul`] description, operand forms
//! ([`MatmulElem::R16`], [`MatmulElem::F16`]), strides, batches and accumulation as the other
//! forms; not bit-identical to them (the hardware sums in its own order).
//!
//! Used for f16 products ([`Matmul::is_half`]) where the device can ([`usable`]): the adapter
//! lists 16×16×16 f16 → f32 ([`configuration_offered`]; wgpu 30's experimental
//! `EXPERIMENTAL_COOPERATIVE_MATRIX`: Vulkan with `VK_KHR_cooperative_matrix`, Metal's simdgroup
//! matrices are 8×8: [`VARIANT8`]; not DX12, not the browser), the device enabled the feature,
//! the self-test at device creation ([`self_test`]) matched the f16 tiled kernel, and the form
//! `matmul_coop` is on (off by default: 2.6 TFLOP/s against the f16 tiles' 24 at 4096³ on an
//! H200, docs/GPU.md run 3; its staging, one subgroup loading element by element, starves the
//! tensor cores; [`VARIANT128`] is the rewrite, unmeasured). The autotuner does not time them
//! against the tiles (yet): where usable, they are the pick for every f16 product with M and N
//! of at least 16 (the wide form from 128).

use super::*;
use crate::shaders::CoopKey;

/// The variant name [`pick`] returns and [`Matmul::bind_variant`] accepts for this kernel:
/// 2 × 2 fragments, 32 × 32 outputs per workgroup (entry point `mm_coop`).
pub const VARIANT: &str = "coop";

/// The 4 × 4-fragment form (64 × 64 outputs per workgroup, `mm_coop4`): four times the tensor-core
/// work per staged K slice; timed by `ddl bench matmul`, not picked by default until a GPU says.
pub const VARIANT64: &str = "coop64";

/// Both variants.
pub const VARIANTS: [&str; 2] = [VARIANT, VARIANT64];

/// The wide form (`mm_coop128`): 128 × 128 outputs per workgroup of 8 subgroups of 32, K slices
/// of 32 staged a quad at a time (vec4 loads where aligned) with the next slice's loads in
/// flight during the products: the layout of the tensor-core GEMMs that reach the hardware,
/// written after `coop` ran at 2.6 TFLOP/s on an H200. Not measured on a GPU yet, so it is
/// self-tested apart, the first time it is needed ([`wide_status`]): a failure turns off this
/// variant only. Needs subgroups of 32 (else binding it is an error); products with an operand
/// shorter than one vec4 run on [`VARIANT`].
pub const VARIANT128: &str = "coop128";

/// [`VARIANT128`] on another staging (`mm_coop128v`, part `coop_staging_v`): the next slice's
/// loads held as loaded until after the products, workgroup memory in quads (one 8-byte store
/// each, fragments loaded row- or column-major to match each operand's layout), two buffers and
/// one barrier per slice. Written after [`VARIANT128`] ran at 24–34 TFLOP/s on an H200
/// (docs/GPU.md, run 4), not measured yet: timed by `ddl bench matmul`, never picked; self-tested
/// apart ([`wide_v_status`]). Needs subgroups of 32 and 48 KiB of workgroup memory.
pub const VARIANT128V: &str = "coop128v";

/// [`VARIANT128V`] with the quads in flight held as f16 (`mm_coop128v` compiled with the operand
/// parts `matmul_{a,b}_r16q`: an f32-stored operand's quads converted as they arrive, half the
/// registers of [`VARIANT128V`]'s f32 quads — about 120 a invocation against 135, which may let
/// two workgroups share a multiprocessor; the same f16 values, so the same products bit for
/// bit). Written (session 70) before any GPU run: timed by `ddl bench matmul`, never picked;
/// self-tested apart ([`wide_vq_status`]).
pub const VARIANT128VQ: &str = "coop128vq";

/// [`VARIANT128V`] with two K slices' loads in flight, not one (`mm_coop128v` compiled with
/// `VDEPTH` = 2, part `coop_staging_v`'s `v_ahead`): each slice's loads are issued two slices'
/// products before they are stashed. For a kernel that keeps one workgroup on a multiprocessor
/// anyway (≈ 135 registers an invocation), the second set of quads in registers costs no
/// occupancy. The same products in the same order as [`VARIANT128V`], so the same bits.
/// Written (session 72) before any GPU run: picked only with the forms `matmul_coop_v` and
/// `matmul_coop_v2` on; self-tested apart ([`wide_v2_status`]).
pub const VARIANT128V2: &str = "coop128v2";

/// [`VARIANT128`]'s tiles, subgroups and fragments with no staging (`mm_coop128d`, part
/// `coop_direct`): every fragment loaded straight from the operands' f16 storage, the next K
/// step's in flight during this step's products, no workgroup memory or barrier in the K loop.
/// Only where [`direct_fits`]: both operands stored in f16 ([`MatmulElem::F16`]: `ddl bench
/// matmul --operands f16`; of training's activations only ψ is f16-stored), M, N and K multiples
/// of 16, aligned. Written (session 34) before any GPU run: timed by `ddl bench matmul`, never
/// picked; self-tested apart ([`direct_status`]). Whether it feeds the tensor cores better than
/// [`VARIANT128V`]'s staging decides whether f16-stored activations are worth building.
pub const VARIANT128D: &str = "coop128d";

/// Diagnostic variants (`ddl bench matmul --variants coop,coop:mma,coop:stage` only: never
/// picked, never in `--variants all`, their results are not the product): `coop`'s
/// cooperative-matrix half alone (one staged slice, then K / 16 rounds of fragment loads and
/// products; `coop:mma-cm` with column-major fragment loads) and its staging half alone (the
/// loads, conversions and barriers, one product); `coop:mma-b`, `coop:mma` with a barrier per
/// iteration so that its fragment loads cannot leave the loop; the same halves of [`VARIANT128V`]
/// (`coop128v:mma`: fragment loads, products and the barrier per slice from two buffers staged
/// once; `coop128v:stage`: the loads, stashes and barriers, one product at the end).
pub const DIAGNOSTIC: [&str; 6] =
    ["coop:mma", "coop:mma-cm", "coop:mma-b", "coop:stage", "coop128v:mma", "coop128v:stage"];

/// The diagnostic halves of [`VARIANT128V`]: its kernel in a diagnostic mode (bits of the
/// parameters' `vec4s`, see `mm_coop128v`).
const DIAGNOSTIC128V: [(&str, u32); 2] = [("coop128v:mma", 16), ("coop128v:stage", 32)];

/// The 8 × 8 form (`shaders/matmul_coop8.wgsl`, `mm_coop8`): Metal's simdgroup matrices, where
/// the adapter lists 8×8×8 f16 → f32 (Apple GPUs) and no 16 × 16. 64 × 64 outputs per workgroup
/// of 4 subgroups of 32, the staging of [`VARIANT128`]; self-tested the first time it is needed
/// ([`status8`]). Products with an operand shorter than one vec4 run on the f16 tiles. Validated
/// by naga and translated to MSL; not yet run on an Apple GPU.
pub const VARIANT8: &str = "coop8";

/// The cooperative-matrix variants that run causal attention products ([`super::Causal`]):
/// [`VARIANT128V`]'s K loop runs the tile's `k_span` (its slices of 32 lie within a granule of
/// 128) and its grid skips the score products' tiles past their granule, as the tiles' do.
/// Products with an operand shorter than one vec4, which the others hand to [`VARIANT`], are
/// refused there.
pub const CAUSAL: [&str; 3] = [VARIANT128V, VARIANT128VQ, VARIANT128V2];

/// Every cooperative-matrix variant the engine has (the diagnostic halves aside).
pub const ALL: [&str; 8] =
    [VARIANT, VARIANT64, VARIANT128, VARIANT128V, VARIANT128VQ, VARIANT128V2, VARIANT128D, VARIANT8];

/// The tile of C one workgroup of `variant` computes, its entry point and the diagnostic mode it
/// runs in (bits of the parameters' `vec4s`: 64 puts a barrier in `mm_coop_mma`'s loop) — the
/// one-subgroup kernels and their diagnostic halves; the quad-staged ones: [`dispatch_quads`].
fn shape(variant: &str) -> ((usize, usize), &'static str, u32) {
    match variant {
        VARIANT64 => ((64, 64), "mm_coop4", 0),
        "coop:mma" => ((32, 32), "mm_coop_mma", 0),
        "coop:mma-cm" => ((32, 32), "mm_coop_mma_cm", 0),
        "coop:mma-b" => ((32, 32), "mm_coop_mma", 64),
        "coop:stage" => ((32, 32), "mm_coop_stage", 0),
        _ => ((32, 32), "mm_coop", 0),
    }
}

/// Whether the adapter lists the configuration the 16 × 16 kernels use: M = N = K = 16, A and B
/// f16, C and the result f32.
pub fn configuration_offered(adapter: &wgpu::Adapter) -> bool {
    offers(adapter, 16)
}

/// Whether the adapter lists the 8 × 8 kernel's configuration: M = N = K = 8, f16 → f32.
pub fn configuration8_offered(adapter: &wgpu::Adapter) -> bool {
    offers(adapter, 8)
}

fn offers(adapter: &wgpu::Adapter, size: u32) -> bool {
    use wgpu::CooperativeScalarType as T;
    adapter.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        && adapter
            .cooperative_matrix_properties()
            .iter()
            .any(|c| (c.m_size, c.n_size, c.k_size) == (size, size, size) && c.ab_type == T::F16 && c.cr_type == T::F32)
}

/// Whether the device can compile the cooperative-matrix shader `name` (`matmul_coop`: 16 × 16
/// fragments, `matmul_coop8`: 8 × 8): the feature is enabled and the adapter lists its
/// configuration. The compile check skips the others.
pub fn shader_offered(gpu: &Gpu, name: &str) -> bool {
    gpu.features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        && match name {
            "matmul_coop8" => configuration8_offered(&gpu.adapter),
            _ => configuration_offered(&gpu.adapter),
        }
}

/// Whether f16 products run on cooperative matrices on this device (see the module docs).
pub fn usable(gpu: &Gpu) -> bool {
    gpu.coop.is_ok() && gpu.forms.matmul_coop
}

/// Whether the wide form [`VARIANT128`] runs here: [`usable`], subgroups of 32, and its own
/// self-test passed.
pub fn wide_usable(gpu: &Gpu) -> bool {
    usable(gpu) && wide_status(gpu).is_ok()
}

/// Whether [`VARIANT128`] can run on this device: cooperative matrices usable by the engine
/// ([`Gpu::coop`]), subgroups of 32, 256 invocations per workgroup, and its self-test
/// ([`self_test_wide`]) passed — run here the first time it is asked (not at device creation:
/// an untested kernel must not stand between a user and every other command), with a one-line
/// note when it fails.
pub fn wide_status(gpu: &Gpu) -> std::result::Result<(), String> {
    gpu.coop.clone()?;
    wide_ready(gpu)?;
    tested_once(gpu, &gpu.coop_wide, VARIANT128, || self_test_wide(gpu))
}

/// A form's self-test verdict, `test` run the first time it is asked (kept in `cell`, shared by
/// the device's clones), with a one-line note when it fails.
fn tested_once(
    gpu: &Gpu,
    cell: &std::sync::OnceLock<std::result::Result<(), String>>,
    form: &str,
    test: impl FnOnce() -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    cell.get_or_init(|| {
        let r = test();
        if let Err(why) = &r {
            eprintln!("note: the cooperative-matrix form {form} is off on '{}': {why}", gpu.info.name);
        }
        r
    })
    .clone()
}

/// Whether [`VARIANT128V`] can run on this device: [`wide_status`]'s conditions, 48 KiB of
/// workgroup memory, and its own self-test (the same products, run the first time it is asked,
/// with a one-line note when it fails).
pub fn wide_v_status(gpu: &Gpu) -> std::result::Result<(), String> {
    wide_v_ready(gpu)?;
    tested_once(gpu, &gpu.coop_wide_v, VARIANT128V, || self_test_wide_of(gpu, VARIANT128V))
}

/// Whether [`VARIANT128VQ`] can run on this device: [`wide_v_status`]'s conditions and its own
/// self-test (the same products).
pub fn wide_vq_status(gpu: &Gpu) -> std::result::Result<(), String> {
    wide_v_ready(gpu)?;
    tested_once(gpu, &gpu.coop_wide_vq, VARIANT128VQ, || self_test_wide_of(gpu, VARIANT128VQ))
}

/// Whether [`VARIANT128V2`] can run on this device: [`wide_v_status`]'s conditions and its own
/// self-test (the same products).
pub fn wide_v2_status(gpu: &Gpu) -> std::result::Result<(), String> {
    wide_v_ready(gpu)?;
    tested_once(gpu, &gpu.coop_wide_v2, VARIANT128V2, || self_test_wide_of(gpu, VARIANT128V2))
}

/// Whether [`VARIANT128V2`] runs here: [`usable`] and [`wide_v2_status`].
pub fn wide_v2_usable(gpu: &Gpu) -> bool {
    usable(gpu) && wide_v2_status(gpu).is_ok()
}

/// Whether [`VARIANT128V`] runs here: [`usable`] and [`wide_v_status`].
pub fn wide_v_usable(gpu: &Gpu) -> bool {
    usable(gpu) && wide_v_status(gpu).is_ok()
}

/// Whether [`VARIANT128D`] can run on this device: the wide forms' conditions (cooperative
/// matrices usable by the engine, subgroups of 32, 256 invocations per workgroup) and its own
/// self-test (products in every layout with ragged tiles, a batch, accumulation and operands
/// past f16's range; run the first time it is asked, with a one-line note when it fails).
pub fn direct_status(gpu: &Gpu) -> std::result::Result<(), String> {
    wide_ready(gpu)?;
    tested_once(gpu, &gpu.coop_direct, VARIANT128D, || self_test_direct(gpu))
}

/// Whether [`VARIANT128D`] runs here: [`usable`] and [`direct_status`].
pub fn direct_usable(gpu: &Gpu) -> bool {
    usable(gpu) && direct_status(gpu).is_ok()
}

/// Why [`VARIANT128D`] cannot run `mm` (`None`: it can): it loads every 16 × 16 fragment straight
/// from the operands, so both must be stored in f16, M, N and K be multiples of 16 (a fragment
/// past the edge would read outside its operand), each operand have a unit stride, and its
/// offset, other stride and batch strides be multiples of 8 halves (a cooperative-matrix load
/// from memory needs 16-byte alignment).
pub fn direct_fits(mm: &Matmul) -> Option<String> {
    if mm.a_elem != MatmulElem::F16 || mm.b_elem != MatmulElem::F16 {
        return Some(format!(
            "needs both operands stored in f16 (--operands f16), got {:?} and {:?}",
            mm.a_elem, mm.b_elem
        ));
    }
    if ![mm.m, mm.n, mm.k].iter().all(|&x| x >= 16 && x.is_multiple_of(16)) {
        return Some(format!("needs M, N and K multiples of 16, got {}x{}x{}", mm.m, mm.n, mm.k));
    }
    let e = |x: usize| x.is_multiple_of(8);
    let outer = |i: usize| mm.outer == 1 || e(mm.outer_strides[i]);
    let fits = |o: &Operand, i: usize| {
        let unit = (o.col_stride == 1 && e(o.row_stride)) || (o.row_stride == 1 && e(o.col_stride));
        unit && e(o.offset) && (mm.batch == 1 || e(o.batch_stride)) && outer(i)
    };
    if !fits(&mm.a, 0) || !fits(&mm.b, 1) {
        return Some(
            "needs each operand contiguous along one dimension, with its offset and other strides multiples of 8"
                .into(),
        );
    }
    None
}

/// Whether [`VARIANT8`] can run on this device: the feature enabled, 8×8×8 f16 → f32 listed,
/// subgroups of 32, and its self-test passed (run the first time it is asked, as
/// [`wide_status`]).
pub fn status8(gpu: &Gpu) -> std::result::Result<(), String> {
    ready8(gpu)?;
    tested_once(gpu, &gpu.coop8, VARIANT8, || self_test_8(gpu))
}

/// Whether f16 products run on the 8 × 8 form here: form `matmul_coop` on and [`status8`].
pub fn usable8(gpu: &Gpu) -> bool {
    gpu.forms.matmul_coop && !usable(gpu) && status8(gpu).is_ok()
}

/// Whether any cooperative-matrix form runs f16 products here.
pub fn any_usable(gpu: &Gpu) -> bool {
    usable(gpu) || usable8(gpu)
}

/// The cooperative-matrix variants that run here: [`VARIANTS`] where [`usable`] (and
/// [`VARIANT128`] where [`wide_usable`]), else [`VARIANT8`] where [`usable8`].
pub fn variants_here(gpu: &Gpu) -> Vec<&'static str> {
    let mut v = Vec::new();
    if usable(gpu) {
        v.extend(VARIANTS);
        if wide_usable(gpu) {
            v.push(VARIANT128);
        }
        if wide_v_usable(gpu) {
            v.push(VARIANT128V);
        }
        if wide_vq_status(gpu).is_ok() {
            v.push(VARIANT128VQ);
        }
        if wide_v2_status(gpu).is_ok() {
            v.push(VARIANT128V2);
        }
        if direct_usable(gpu) {
            v.push(VARIANT128D);
        }
    } else if usable8(gpu) {
        v.push(VARIANT8);
    }
    v
}

/// Why [`usable`] is false (for messages), or `None`.
pub fn why_not(gpu: &Gpu) -> Option<String> {
    match &gpu.coop {
        Err(e) => Some(e.clone()),
        Ok(()) if !gpu.forms.matmul_coop => {
            Some("the self-test passed, but form matmul_coop is off (the default: slower than the f16 tiles on an H200, docs/GPU.md; DDL_FORMS=matmul_coop=1 turns it on)".into())
        }
        Ok(()) => None,
    }
}

/// The workgroup width: the adapter's largest subgroup (a subgroup-scope cooperative-matrix
/// workgroup's x size must be a multiple of the subgroup size; with a smaller one, several
/// subgroups compute the same fragments and store the same values).
fn width(gpu: &Gpu) -> usize {
    let sg = gpu.info.subgroup_max_size as usize;
    if sg.is_power_of_two() && (8..=128).contains(&sg) { sg } else { 32 }
}

/// Binds `mm` (f16 operands: an f32 one is read rounded, as [`MatmulElem::R16`]) to `variant`
/// ([`ALL`]).
pub(super) fn bind(mm: &Matmul, gpu: &Gpu, variant: &str, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
    bind_checked(mm, gpu, variant, a, b, c, true)
}

/// [`bind`]; `checked` false skips [`VARIANT128`]'s self-test (the self-test's own products).
fn bind_checked(
    mm: &Matmul,
    gpu: &Gpu,
    variant: &str,
    a: View<'_>,
    b: View<'_>,
    c: View<'_>,
    checked: bool,
) -> Result<Dispatch> {
    if variant == VARIANT8 {
        return bind8(mm, gpu, a, b, c, checked);
    }
    if gpu.coop.is_err() {
        return Err(GpuError::Shader {
            shader: "matmul_coop".into(),
            reason: format!("cooperative matrices are not usable here: {}", why_not(gpu).unwrap_or_default()),
        });
    }
    let key = CoopKey { sg: width(gpu), a: half(mm.a_elem), b: half(mm.b_elem), q16: false, depth2: false };
    if variant == VARIANT128 {
        if let Err(why) = if checked { wide_status(gpu) } else { wide_ready(gpu) } {
            return Err(GpuError::Shader {
                shader: "matmul_coop".into(),
                reason: format!("variant {VARIANT128}: {why}"),
            });
        }
        if shorter_than_a_quad(&key, &a, &b) {
            // A product of a few elements: the 32 × 32 kernel.
            return bind_checked(mm, gpu, VARIANT, a, b, c, checked);
        }
        return dispatch_quads(mm, gpu, "matmul_coop", &key.name(), "mm_coop128", 128, 0, a, b, c);
    }
    if variant == VARIANT128D {
        let ok = if checked { direct_status(gpu) } else { wide_ready(gpu) };
        if let Some(why) = ok.err().or_else(|| direct_fits(mm)) {
            return Err(GpuError::Shader { shader: "matmul_coop".into(), reason: format!("variant {variant}: {why}") });
        }
        return dispatch_plain(mm, gpu, "matmul_coop", &key.name(), "mm_coop128d", (128, 128), 0, a, b, c);
    }
    let diagnostic = DIAGNOSTIC128V.iter().find(|d| d.0 == variant);
    if variant == VARIANT128V || variant == VARIANT128VQ || variant == VARIANT128V2 || diagnostic.is_some() {
        // (The diagnostic halves do not compute the product: no self-test for them; coop128vq,
        // the same kernel on the `q16` operand parts, and coop128v2, with two slices in flight,
        // have their own.)
        let (q16, depth2) = (variant == VARIANT128VQ, variant == VARIANT128V2);
        let ok = if !checked || diagnostic.is_some() {
            wide_v_ready(gpu)
        } else if q16 {
            wide_vq_status(gpu)
        } else if depth2 {
            wide_v2_status(gpu)
        } else {
            wide_v_status(gpu)
        };
        if let Err(why) = ok {
            return Err(GpuError::Shader { shader: "matmul_coop".into(), reason: format!("variant {variant}: {why}") });
        }
        if shorter_than_a_quad(&key, &a, &b) {
            if mm.causal != super::Causal::None {
                return Err(GpuError::Shader {
                    shader: "matmul_coop".into(),
                    reason: format!(
                        "variant {variant}: a causal attention product ({:?}) with an operand shorter than one \
                         vec4 runs on the tile variants, not on the 32 x 32 kernel this variant hands it to",
                        mm.causal
                    ),
                });
            }
            return bind_checked(mm, gpu, VARIANT, a, b, c, checked);
        }
        let key = CoopKey { q16, depth2, ..key };
        let mode = diagnostic.map_or(0, |d| d.1);
        return dispatch_quads(mm, gpu, "matmul_coop", &key.name(), "mm_coop128v", 128, mode, a, b, c);
    }
    let (tile, entry, mode) = shape(variant);
    dispatch_plain(mm, gpu, "matmul_coop", &key.name(), entry, tile, mode, a, b, c)
}

/// How an f16 product reads an operand: an f32 one rounded as it is read ([`MatmulElem::R16`]).
fn half(e: MatmulElem) -> MatmulElem {
    if e == MatmulElem::F32 { MatmulElem::R16 } else { e }
}

/// Whether an operand is shorter than one vec4 (the quad-staged kernels bind `a4`/`b4` as
/// arrays of vec4s, at least one long).
fn shorter_than_a_quad(key: &CoopKey, a: &View<'_>, b: &View<'_>) -> bool {
    let quad_bytes = |e: MatmulElem| if e == MatmulElem::F16 { 8 } else { 16 };
    a.size < quad_bytes(key.a) || b.size < quad_bytes(key.b)
}

/// Dispatches a quad-staged kernel (part `coop_staging`: `mm_coop128`, `mm_coop8`, the staging
/// check) on `tile × tile` tiles: the parameters with the vec4 layouts the operands allow
/// (`vec4s`, with `mode`: a diagnostic mode's bits, 16 and up, else 0), `a4`/`b4` bound to the
/// operands.
#[allow(clippy::too_many_arguments)]
fn dispatch_quads(
    mm: &Matmul,
    gpu: &Gpu,
    shader: &str,
    variant: &str,
    entry: &str,
    tile: usize,
    mode: u32,
    a: View<'_>,
    b: View<'_>,
    c: View<'_>,
) -> Result<Dispatch> {
    let (mut p, total) = mm.grid(gpu, tile, tile)?;
    let [a_k, a_m, b_k, b_n] = mm.aligned_quads();
    p.vec4s = a_k as u32 | (a_m as u32) << 1 | (b_n as u32) << 2 | (b_k as u32) << 3 | mode;
    let kern = gpu.kernel(shader, Some(variant), entry)?;
    let max = gpu.limits.max_compute_workgroups_per_dimension;
    let bufs = [("a", a), ("b", b), ("c", c), ("a4", a), ("b4", b)];
    kern.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &bufs, grid_1d(total, 1, max))
}

/// The staging check (`shaders/coop_stage_check.wgsl`): `mm`'s operands staged tile by tile
/// and slice by slice exactly as [`VARIANT128`] stages them, copied to `out` (per tile in the
/// grid's order and per K slice of 32: A's 128 × 32 slice, then B's 32 × 128, f16 values as
/// f32). Runs without cooperative matrices, so the tests check the staging on any adapter.
/// `out` holds [`stage_check_len`] values.
#[doc(hidden)]
pub fn stage_check(mm: &Matmul, gpu: &Gpu, a: View<'_>, b: View<'_>, out: View<'_>) -> Result<Dispatch> {
    let need = 4 * stage_check_len(mm) as u64;
    if out.size < need {
        return Err(GpuError::Shape(format!("stage_check: out holds {} bytes, needs {need}", out.size)));
    }
    bind_check(mm, gpu, "stage_dump", a, b, out)
}

/// `mm` computed by [`VARIANT128`]'s staging, tiling, fragment offsets and output path with the
/// fragment products done by the invocations (`soft128` in `shaders/coop_stage_check.wgsl`): the
/// whole kernel but its cooperative-matrix operations, on any adapter with SHADER_F16.
#[doc(hidden)]
pub fn soft_check(mm: &Matmul, gpu: &Gpu, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
    bind_check(mm, gpu, "soft128", a, b, c)
}

/// [`soft_check`] for [`VARIANT128V`] (`soft128v`: its staging, buffers, fragment offsets and
/// strides, the fragment loads' reading of them, and its output path).
#[doc(hidden)]
pub fn soft_check_v(mm: &Matmul, gpu: &Gpu, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
    bind_check(mm, gpu, "soft128v", a, b, c)
}

/// [`soft_check_v`] for [`VARIANT128VQ`] (`soft128v` with f16 quads in flight: the operand parts
/// `matmul_{a,b}_r16q`; an operand pair without an f32-stored one is [`soft_check_v`]'s).
#[doc(hidden)]
pub fn soft_check_vq(mm: &Matmul, gpu: &Gpu, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
    bind_check_q(mm, gpu, "soft128v", (true, false), a, b, c)
}

/// [`soft_check_v`] for [`VARIANT128V2`] (`soft128v` with two slices' loads in flight).
#[doc(hidden)]
pub fn soft_check_v2(mm: &Matmul, gpu: &Gpu, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
    bind_check_q(mm, gpu, "soft128v", (false, true), a, b, c)
}

/// [`soft_check`] for [`VARIANT128D`] (`soft128d`: its fragments' first elements and strides read
/// straight from the operands, and its output path); `mm` must be one [`direct_fits`] allows.
#[doc(hidden)]
pub fn soft_check_d(mm: &Matmul, gpu: &Gpu, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
    if let Some(why) = direct_fits(mm) {
        return Err(GpuError::Shape(format!("soft128d: {why}")));
    }
    dispatch_plain(mm, gpu, "coop_stage_check", "hh", "soft128d", (128, 128), 0, a, b, c)
}

/// Dispatches a kernel that binds only `a`, `b` and `c` (no vec4 views: the one-subgroup kernels
/// and their diagnostic halves, [`VARIANT128D`] and its soft check) on `tile` tiles, with `mode`
/// in the parameters' `vec4s` (a diagnostic mode's bits, else 0).
#[allow(clippy::too_many_arguments)]
fn dispatch_plain(
    mm: &Matmul,
    gpu: &Gpu,
    shader: &str,
    variant: &str,
    entry: &str,
    tile: (usize, usize),
    mode: u32,
    a: View<'_>,
    b: View<'_>,
    c: View<'_>,
) -> Result<Dispatch> {
    let (mut p, total) = mm.grid(gpu, tile.0, tile.1)?;
    p.vec4s = mode;
    let kern = gpu.kernel(shader, Some(variant), entry)?;
    let max = gpu.limits.max_compute_workgroups_per_dimension;
    kern.dispatch(gpu, Some(bytemuck::bytes_of(&p)), &[("a", a), ("b", b), ("c", c)], grid_1d(total, 1, max))
}

fn bind_check(mm: &Matmul, gpu: &Gpu, entry: &str, a: View<'_>, b: View<'_>, c: View<'_>) -> Result<Dispatch> {
    bind_check_q(mm, gpu, entry, (false, false), a, b, c)
}

/// [`bind_check`] on the staging check's variant for `mm`'s operand forms (`rh`, …), with
/// `(q16, depth2)`: `q16` the one holding an f32-stored operand's quads as f16 (`rhq`, …; a pair
/// without one has none), `depth2` the one with two slices in flight (`rh2`, …).
fn bind_check_q(
    mm: &Matmul,
    gpu: &Gpu,
    entry: &str,
    (q16, depth2): (bool, bool),
    a: View<'_>,
    b: View<'_>,
    c: View<'_>,
) -> Result<Dispatch> {
    let (ea, eb) = (half(mm.a_elem), half(mm.b_elem));
    let q = q16 && (ea == MatmulElem::R16 || eb == MatmulElem::R16);
    let variant = crate::shaders::staging_name(ea, eb, q, depth2);
    dispatch_quads(mm, gpu, "coop_stage_check", &variant, entry, 128, 0, a, b, c)
}

/// The f32 values [`stage_check`] writes for `mm`: per 128 × 128 tile and K slice of 32, the two
/// staged slices.
#[doc(hidden)]
pub fn stage_check_len(mm: &Matmul) -> usize {
    mm.m.div_ceil(128) * mm.n.div_ceil(128) * mm.batch * mm.outer * mm.k.div_ceil(32) * (128 * 32 * 2)
}

/// [`VARIANT8`]'s binding (its own module, `matmul_coop8`).
fn bind8(mm: &Matmul, gpu: &Gpu, a: View<'_>, b: View<'_>, c: View<'_>, checked: bool) -> Result<Dispatch> {
    if let Err(why) = if checked { status8(gpu) } else { ready8(gpu) } {
        return Err(GpuError::Shader {
            shader: "matmul_coop8".into(),
            reason: format!("8x8 cooperative matrices are not usable here: {why}"),
        });
    }
    let key = CoopKey { sg: 32, a: half(mm.a_elem), b: half(mm.b_elem), q16: false, depth2: false };
    if shorter_than_a_quad(&key, &a, &b) {
        // A product of a few elements: the f16 tiles.
        return mm.bind_variant(gpu, heuristic(gpu, mm), a, b, c);
    }
    dispatch_quads(mm, gpu, "matmul_coop8", &key.name(), "mm_coop8", 64, 0, a, b, c)
}

/// Whether this device can run [`VARIANT8`] at all (before its self-test).
fn ready8(gpu: &Gpu) -> std::result::Result<(), String> {
    if !gpu.features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
        return Err(format!("adapter '{}': the cooperative-matrix feature is not enabled", gpu.info.name));
    }
    if !configuration8_offered(&gpu.adapter) {
        return Err(format!("adapter '{}' lists no 8x8x8 f16 -> f32 cooperative-matrix configuration", gpu.info.name));
    }
    if gpu.info.subgroup_max_size != 32 || gpu.limits.max_compute_invocations_per_workgroup < 128 {
        return Err(format!(
            "needs subgroups of 32 and 128 invocations per workgroup; this adapter has subgroups of {} and allows {}",
            gpu.info.subgroup_max_size, gpu.limits.max_compute_invocations_per_workgroup
        ));
    }
    Ok(())
}

/// Whether this device can run [`VARIANT128`] at all (before its self-test): subgroups of 32
/// and 256 invocations per workgroup.
fn wide_ready(gpu: &Gpu) -> std::result::Result<(), String> {
    gpu.coop.clone()?;
    if width(gpu) != 32 {
        return Err(format!("needs subgroups of 32 invocations; this adapter's are {}", gpu.info.subgroup_max_size));
    }
    if gpu.limits.max_compute_invocations_per_workgroup < 256 {
        return Err(format!(
            "needs 256 invocations per workgroup; this device allows {}",
            gpu.limits.max_compute_invocations_per_workgroup
        ));
    }
    Ok(())
}

/// [`wide_ready`] and the workgroup memory [`VARIANT128V`] declares (two buffers of each operand's
/// slice and the output scratch: 48 KiB).
fn wide_v_ready(gpu: &Gpu) -> std::result::Result<(), String> {
    wide_ready(gpu)?;
    const NEED: u32 = 48 * 1024;
    if gpu.limits.max_compute_workgroup_storage_size < NEED {
        return Err(format!(
            "needs {NEED} bytes of workgroup memory; this device allows {}",
            gpu.limits.max_compute_workgroup_storage_size
        ));
    }
    Ok(())
}

/// Runs a small product with edges in every direction, a K tail, a batch and accumulation on the
/// cooperative matrices (both variants) and on the f16 tiled kernel (the same rounded operands);
/// `Err` with the difference when they disagree by more than f32 accumulation allows (relative
/// L2 1e-4), or when a kernel does not build or run.
pub fn self_test(gpu: &Gpu) -> std::result::Result<(), String> {
    let nt = Matmul::nt(80, 48, 72).batched(2).elems(MatmulElem::R16, MatmulElem::R16).alpha(0.5).accumulate(true);
    for v in VARIANTS {
        self_test_variant(gpu, v, nt).map_err(|e| format!("{v}: {e}"))?;
    }
    Ok(())
}

/// [`VARIANT128`]'s self-test (after [`self_test`] passed): the same small product, and larger
/// ones with whole tiles, ragged edges, a K tail, vec4 and scalar staging of both operands in
/// each of its layouts (A along K or M, B along N or K), f16 storage and a batch; then one with
/// operands past f16's range (`overflow_case`). Its staging converts f32-stored operands to
/// f16 with the hardware's conversion, which WGSL lets round either way: this test, against the
/// tiled kernel's rounding to nearest even, is what holds it to that (a conversion rounding
/// towards zero differs by ≈ 8e-4, relative L2, on its products).
pub fn self_test_wide(gpu: &Gpu) -> std::result::Result<(), String> {
    self_test_wide_of(gpu, VARIANT128)
}

/// [`self_test_wide`] for `variant` ([`VARIANT128`], [`VARIANT128V`], [`VARIANT128VQ`] or
/// [`VARIANT128V2`]).
fn self_test_wide_of(gpu: &Gpu, variant: &str) -> std::result::Result<(), String> {
    for mm in wide_cases() {
        self_test_variant(gpu, variant, mm).map_err(|e| format!("{variant} {}x{}x{}: {e}", mm.m, mm.n, mm.k))?;
    }
    let mm = overflow_case();
    self_test_spiked(gpu, variant, mm, true)
        .map_err(|e| format!("{variant} {}x{}x{} with operands past f16's range: {e}", mm.m, mm.n, mm.k))
}

/// [`VARIANT128D`]'s self-test: products [`direct_fits`] allows in each layout (A along K or M, B
/// along N or K), with tiles cut by the edges, a batch, alpha, accumulation, and then operands
/// past f16's range (stored as ±inf, as the tiled kernel reads them).
fn self_test_direct(gpu: &Gpu) -> std::result::Result<(), String> {
    let v = VARIANT128D;
    for mm in direct_cases() {
        self_test_variant(gpu, v, mm).map_err(|e| format!("{v} {}x{}x{}: {e}", mm.m, mm.n, mm.k))?;
    }
    let mm = Matmul::nt(144, 160, 48).elems(MatmulElem::F16, MatmulElem::F16);
    self_test_spiked(gpu, v, mm, true)
        .map_err(|e| format!("{v} {}x{}x{} with operands past f16's range: {e}", mm.m, mm.n, mm.k))
}

/// The products of [`self_test_direct`] (and of the soft check's test): every layout, ragged
/// tiles along M and N, one K step and several, a batch with accumulation.
#[doc(hidden)]
pub fn direct_cases() -> [Matmul; 5] {
    let h = MatmulElem::F16;
    [
        Matmul::nt(144, 48, 80).batched(2).elems(h, h).alpha(0.5).accumulate(true),
        Matmul::nn(272, 208, 96).elems(h, h),
        Matmul::tn(128, 144, 16).elems(h, h).accumulate(true),
        Matmul::tt(160, 256, 64).batched(2).elems(h, h).alpha(-2.0),
        Matmul::nt(16, 400, 32).elems(h, h),
    ]
}

/// A product whose f32-stored operands hold values past f16's range: the staging's conversion
/// must make them ±inf as the tiled kernel's rounding does (dynamic loss scaling finds overflow
/// by the infinities and NaNs it leaves in the gradients).
fn overflow_case() -> Matmul {
    Matmul::nt(136, 130, 70).elems(MatmulElem::R16, MatmulElem::R16)
}

fn wide_cases() -> [Matmul; 5] {
    let (r, h) = (MatmulElem::R16, MatmulElem::F16);
    [
        Matmul::nt(80, 48, 72).batched(2).elems(r, r).alpha(0.5).accumulate(true),
        Matmul::nt(260, 200, 100).elems(r, h),
        Matmul::nn(136, 260, 70).elems(h, r).accumulate(true),
        Matmul::tn(200, 136, 66).batched(2).elems(r, r),
        Matmul::tt(130, 129, 37).elems(h, h).alpha(-2.0),
    ]
}

/// [`VARIANT8`]'s self-test: the products of [`self_test_wide`]'s (every layout, edges, tails,
/// f16 storage, a batch).
fn self_test_8(gpu: &Gpu) -> std::result::Result<(), String> {
    for mm in wide_cases() {
        self_test_variant(gpu, VARIANT8, mm).map_err(|e| format!("{VARIANT8} {}x{}x{}: {e}", mm.m, mm.n, mm.k))?;
    }
    let mm = overflow_case();
    self_test_spiked(gpu, VARIANT8, mm, true)
        .map_err(|e| format!("{VARIANT8} {}x{}x{} with operands past f16's range: {e}", mm.m, mm.n, mm.k))
}

fn self_test_variant(gpu: &Gpu, variant: &str, mm: Matmul) -> std::result::Result<(), String> {
    self_test_spiked(gpu, variant, mm, false)
}

/// [`self_test_variant`], with `spikes`: a few operand values past f16's range (±1e6 in A, 7e4
/// in B), and the outputs compared as classes first (finite, +inf, −inf, NaN: a sum holding
/// infinities of both signs is NaN in any order, so the classes do not depend on the order of
/// accumulation), then the finite ones by relative L2.
fn self_test_spiked(gpu: &Gpu, variant: &str, mm: Matmul, spikes: bool) -> std::result::Result<(), String> {
    let run = || -> Result<(Vec<f32>, Vec<f32>)> {
        let [ea, eb, ec] = mm.extents();
        let mut rng = crate::testing::Rng::new(0xc00b);
        let (mut av, mut bv) = (rng.uniform(ea, -1.0, 1.0), rng.uniform(eb, -1.0, 1.0));
        if spikes {
            for (n, i) in [5, ea / 2 + 1, ea - 3].into_iter().enumerate() {
                av[i] = if n % 2 == 0 { 1e6 } else { -1e6 };
            }
            bv[17] = 7e4;
        }
        let a = operand(gpu, "coop.a", &av, mm.a_elem)?;
        let b = operand(gpu, "coop.b", &bv, mm.b_elem)?;
        let c0 = rng.uniform(ec, -1.0, 1.0);
        let (c1, c2) = (Tensor::from_f32(gpu, "coop.c1", &[ec], &c0)?, Tensor::from_f32(gpu, "coop.c2", &[ec], &c0)?);
        let d1 = bind_checked(&mm, gpu, variant, a.view(), b.view(), c1.view(), false)?;
        let d2 = mm.bind_variant(gpu, heuristic(gpu, &mm), a.view(), b.view(), c2.view())?;
        gpu.run(&[&d1, &d2])?;
        Ok((c1.read_f32(gpu)?, c2.read_f32(gpu)?))
    };
    match run() {
        Ok((x, y)) => compare_to_tiled(&x, &y, spikes),
        Err(e) => Err(format!("the self-test product failed: {e}")),
    }
}

/// The self-test's verdict on a cooperative-matrix product `x` against the tiled kernel's `y`:
/// the same class (finite, +inf, −inf, NaN) everywhere, then relative L2 ≤ 1e-4 over the finite
/// outputs (f32 accumulation in another order; one f16 rounding more or less on the operands
/// shows as 2e-4–8e-4). The reference must have non-finite outputs exactly when `spikes`.
fn compare_to_tiled(x: &[f32], y: &[f32], spikes: bool) -> std::result::Result<(), String> {
    let class = |v: f32| {
        if v.is_nan() {
            3
        } else if v.is_infinite() {
            1 + (v < 0.0) as u8
        } else {
            0
        }
    };
    let odd = x.iter().zip(y).filter(|(p, q)| class(**p) != class(**q)).count();
    if odd > 0 || x.len() != y.len() {
        return Err(format!(
            "the self-test product's infinities and NaNs are not where the f16 tiled kernel's are ({odd} of {} outputs)",
            y.len()
        ));
    }
    let infinities = y.iter().filter(|q| !q.is_finite()).count();
    if spikes != (infinities > 0) {
        return Err(format!(
            "the self-test's reference has {infinities} non-finite outputs (operands past f16's range: {spikes})"
        ));
    }
    let finite = || x.iter().zip(y).filter(|(_, q)| q.is_finite());
    let num: f64 = finite().map(|(p, q)| (*p as f64 - *q as f64).powi(2)).sum();
    let den: f64 = finite().map(|(_, q)| (*q as f64).powi(2)).sum();
    match (num / den).sqrt() {
        e if e <= 1e-4 => Ok(()),
        e => Err(format!("the self-test product differs from the f16 tiled kernel by {e:.2e} (relative L2)")),
    }
}

/// An operand stored as `elem` stores it: f32 values, or (f16 storage) their f16 bits two to a
/// word, padded to whole vec4s, packed on the device (`pack_f16`).
fn operand(gpu: &Gpu, label: &str, v: &[f32], elem: MatmulElem) -> Result<Tensor> {
    let x = Tensor::from_f32(gpu, label, &[v.len()], v)?;
    if elem != MatmulElem::F16 {
        return Ok(x);
    }
    let y = Tensor::zeros(gpu, label, &[v.len().div_ceil(8) * 4], crate::gpu::DType::F32)?;
    let ds = crate::kernels::elementwise::pack_f16(gpu, x.view(), y.view(), v.len())?;
    gpu.run(&ds.iter().collect::<Vec<_>>())?;
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::compare_to_tiled;

    #[test]
    fn the_self_test_compares_infinities_and_nans_by_place_and_the_rest_by_relative_l2() {
        let (inf, nan) = (f32::INFINITY, f32::NAN);
        let y = [1.0, -2.0, inf, -inf, nan, 3.0];
        // The same classes, finite values within f32 accumulation differences.
        assert!(compare_to_tiled(&[1.0, -2.00001, inf, -inf, nan, 3.0], &y, true).is_ok());
        // An infinity of the other sign, a NaN for an infinity, an infinity for a finite value.
        for x in [[1.0, -2.0, -inf, -inf, nan, 3.0], [1.0, -2.0, inf, nan, nan, 3.0], [1.0, inf, inf, -inf, nan, 3.0]] {
            let e = compare_to_tiled(&x, &y, true).unwrap_err();
            assert!(e.contains("not where") && e.contains("1 of 6"), "{e}");
        }
        // One f16 rounding on the finite outputs (2^-11 relative) is too much.
        let e = compare_to_tiled(&[1.0005, -2.001, inf, -inf, nan, 3.0015], &y, true).unwrap_err();
        assert!(e.contains("relative L2"), "{e}");
        // Spikes must give the reference infinities; no spikes must not.
        assert!(compare_to_tiled(&[1.0, 2.0], &[1.0, 2.0], true).unwrap_err().contains("0 non-finite"));
        assert!(compare_to_tiled(&[1.0, inf], &[1.0, inf], false).unwrap_err().contains("1 non-finite"));
        assert!(compare_to_tiled(&[1.0, 2.0], &[1.0, 2.0], false).is_ok());
    }
}
