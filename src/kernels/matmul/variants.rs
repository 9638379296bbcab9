//! The tile variants: their constants, which ones an adapter runs, the heuristic choice and the
//! pick (the autotuner's measurement where there is one).

use super::*;

pub(super) fn key(variant: &str) -> Result<MatmulKey> {
    MatmulKey::parse(variant)
        .ok_or_else(|| GpuError::Shader { shader: "matmul".into(), reason: format!("no variant '{variant}'") })
}

/// Whether a variant is a register-block (`mm_*`, CPU) variant rather than a workgroup-memory one.
pub fn direct(variant: &str) -> Result<bool> {
    Ok(key(variant)?.tile.direct)
}

/// The BM×BN tile of a variant (outputs per workgroup).
pub fn tile(variant: &str) -> Result<(usize, usize)> {
    let t = key(variant)?.tile;
    Ok((t.bm, t.bn))
}

/// Names of all tile variants.
pub fn variants() -> Vec<&'static str> {
    MatmulKey::all().iter().map(MatmulKey::name).collect()
}

/// The diagnostic halves of the staged tiles (`ddl bench matmul --variants w128,w128:mma,w128:stage`
/// only: never picked, never in `--variants all`; their results are not the product past one K
/// slice): `TILE:mma`, the kernel's workgroup-memory reads, FMAs and barriers with its first K
/// slice staged once (no loads or stores in the loop); `TILE:stage`, its loads, stores and
/// barriers with the arithmetic of the last slice only; `TILE:fma`, `TILE:mma` without the
/// workgroup-memory reads (each slice's FMAs on its first K step's operands, the last slice the
/// product's). Where the staged kernel's time goes on a GPU (`shaders/matmul.wgsl`,
/// `wm_kk_mma` / `wm_kk_stage` / `wm_kk_fma`): products whose operands both lie along K
/// (`--cases nt`: A·Bᵀ, the model's forward products); with K ≤ the tile's K slice each computes
/// the product, bit for bit.
pub const STAGED_DIAGNOSTIC: [&str; 18] = [
    "w128:mma",
    "w128:stage",
    "w128:fma",
    "w128k16:mma",
    "w128k16:stage",
    "w128k16:fma",
    "w64:mma",
    "w64:stage",
    "w64:fma",
    "w128x64:mma",
    "w128x64:stage",
    "w128x64:fma",
    "w64x128:mma",
    "w64x128:stage",
    "w64x128:fma",
    "w128w:mma",
    "w128w:stage",
    "w128w:fma",
];

/// A staged diagnostic half's tile variant and entry point (see [`STAGED_DIAGNOSTIC`]).
pub fn staged_diagnostic(variant: &str) -> Option<(&'static str, &'static str)> {
    let (tile, half) = STAGED_DIAGNOSTIC.iter().find(|d| **d == variant)?.split_once(':')?;
    let entry = match half {
        "mma" => "wm_kk_mma",
        "fma" => "wm_kk_fma",
        _ => "wm_kk_stage",
    };
    Some((tile, entry))
}

/// The staged diagnostic halves of the tiles this adapter runs.
pub fn staged_diagnostics_for(gpu: &Gpu) -> Vec<&'static str> {
    let tiles = variants_for(gpu);
    STAGED_DIAGNOSTIC.into_iter().filter(|d| staged_diagnostic(d).is_some_and(|(t, _)| tiles.contains(&t))).collect()
}

/// Whether a variant loads A once per subgroup (`…g`: the register-block tiles with the
/// `mm_*_g` entry points).
pub fn subgroup_variant(variant: &str) -> bool {
    MatmulKey::parse(variant).is_some_and(|k| k.subgroup)
}

/// Whether this adapter can run the `…g` variants: it has subgroups, and every subgroup lies
/// within one row of the workgroup (DX = 8 invocations along x, which share their A rows): the
/// subgroup size is fixed and divides 8 (llvmpipe: 8; GPUs with 16–64 are excluded). Subgroups are
/// taken to be runs of consecutive invocation indices, as every Vulkan, Metal and D3D12
/// implementation forms them. The device's `matmul_subgroup` form ([`crate::kernels::forms::Forms`]:
/// on where the subgroups fit; `DDL_FORMS=matmul_subgroup=0` leaves them out).
pub fn subgroup_variants(gpu: &Gpu) -> bool {
    gpu.features.contains(wgpu::Features::SUBGROUP) && gpu.forms.matmul_subgroup
}

/// The tile variants this adapter can run (the `…g` ones only where [`subgroup_variants`]; the
/// staged ones whose workgroup memory fits the adapter's limit: `w128k16` needs 32 KiB, more
/// than WebGPU's default 16).
pub fn variants_for(gpu: &Gpu) -> Vec<&'static str> {
    let g = subgroup_variants(gpu);
    let room = gpu.limits.max_compute_workgroup_storage_size as usize;
    MatmulKey::all()
        .into_iter()
        .filter(|k| (g || !k.subgroup) && (!k.tile.staged || k.tile.staged_bytes() <= room))
        .map(|k| k.name())
        .collect()
}

/// Shape bucket for the autotune cache: powers of two of M, N, K and the operand layouts.
pub(super) fn bucket(mm: &Matmul) -> String {
    let l = |x: usize| (x.max(1) as f64).log2().round() as u32;
    let elems = if mm.is_half() { format!("|{}{}", mm.a_elem.code(), mm.b_elem.code()) } else { String::new() };
    // A causal attention product does less work than its shape says: measured apart.
    let causal = if mm.causal == Causal::None { String::new() } else { format!("|{:?}", mm.causal) };
    format!(
        "{}x{}x{}|a{}b{}{elems}{causal}",
        l(mm.m),
        l(mm.n),
        l(mm.k),
        (mm.a.col_stride == 1) as u8,
        (mm.b.col_stride == 1) as u8
    )
}

/// The autotune cache key: adapter, shape bucket, and the variant set the measurement chose
/// from (a choice made before variants were added is measured again).
pub(super) fn cache_key(gpu: &Gpu, mm: &Matmul) -> String {
    format!("{}|{}|{}", gpu.adapter_key(), bucket(mm), variants_for(gpu).join(","))
}

/// The heuristic choice. On a CPU adapter (llvmpipe, SwiftShader): the register-block variant
/// with the least estimated time — padded work per thread-round over measured efficiency (see
/// `docs/PERF-LOG.md`). On a GPU: the biggest staged tile (`w128`, `w64`) that still gives a
/// workgroup per multiprocessor or so (132 on an H100), else the register blocks `c64`, and `r8`
/// for a few rows (decoding). The first H100 run (docs/GPU.md) measured the `t*` tiles at
/// 0.3–0.7 TFLOP/s and `c64` at 26–29 at 2048³–4096³.
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
    for v in ["w128", "w64"] {
        let (bm, bn) = tile(v).unwrap();
        let groups = mm.m.div_ceil(bm) * mm.n.div_ceil(bn) * mm.batch * mm.outer;
        if mm.m >= bm / 2 && mm.n >= bn / 2 && groups >= 128 {
            return v;
        }
    }
    if mm.m < 16 { "r8" } else { "c64" }
}

/// The CPU choice: each variant's time is estimated as (rounds of `threads` workgroups) × (tile
/// outputs) ÷ (its measured throughput relative to `r128` on llvmpipe). Smaller tiles win when
/// the big tile would be mostly padding or leave threads idle.
pub(super) fn cpu_heuristic(mm: &Matmul, threads: usize) -> &'static str {
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

/// The variant used for a product: a cached measurement for this adapter and shape bucket,
/// a fresh measurement when autotuning is enabled, else the heuristic.
pub fn pick(gpu: &Gpu, mm: &Matmul) -> &'static str {
    // Of the cooperative-matrix kernels only coop128v's K loop knows the causal structure
    // ([`Causal`], [`coop::CAUSAL`]).
    let coop_ok = mm.causal == Causal::None;
    if mm.is_half() && mm.m >= 16 && mm.n >= 16 && coop::usable(gpu) {
        // The wide form where the product fills its 128 × 128 tiles (the form is off by default:
        // slower than the f16 tiles on an H200 so far), on coop128v's staging with the form
        // `matmul_coop_v`.
        let wide = mm.m >= 128 && mm.n >= 128;
        if wide && gpu.forms.matmul_coop_v && coop::wide_v_usable(gpu) {
            // (Two slices in flight with `matmul_coop_v2`.)
            if gpu.forms.matmul_coop_v2 && coop::wide_v2_usable(gpu) {
                return coop::VARIANT128V2;
            }
            return coop::VARIANT128V;
        }
        if coop_ok {
            return if wide && coop::wide_usable(gpu) { coop::VARIANT128 } else { coop::VARIANT };
        }
    }
    if coop_ok && mm.is_half() && mm.m >= 16 && mm.n >= 16 && coop::usable8(gpu) {
        return coop::VARIANT8;
    }
    let key = cache_key(gpu, mm);
    if let Some(v) = autotune::cache().lock().unwrap().get(&key)
        && let Some(name) = variants_for(gpu).into_iter().find(|n| n == v)
    {
        return name;
    }
    if autotune::enabled() {
        autotune::announce();
        if let Ok(v) = autotune::tune(gpu, mm) {
            return v;
        }
    }
    heuristic(gpu, mm)
}
