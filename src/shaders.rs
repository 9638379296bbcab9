//! Every WGSL shader of the engine, embedded at compile time, in one list.
//!
//! Pipeline creation and the portability test both read [`ALL`], so a shader that is not in the
//! list cannot be dispatched, and a shader that is in the list is always validated by naga and
//! translated to SPIR-V, MSL and HLSL (`cargo test shaders`).
//!
//! A shader may come in *variants*: the same source compiled with different `const` values
//! (tile sizes, for example). A variant is a prelude of `const NAME: TYPE = VALUE;` lines put in
//! front of the source; WGSL allows module-scope declarations in any order, so the source uses
//! the constants without declaring them.

/// One WGSL source file and the variants it is compiled in.
#[derive(Debug, Clone, Copy)]
pub struct Shader {
    /// File stem under `shaders/`, e.g. `"matmul"`.
    pub name: &'static str,
    /// The WGSL text.
    pub source: &'static str,
    /// Named constant sets; empty when the source stands alone.
    pub variants: &'static [Variant],
}

/// A named set of module-scope constants prepended to a shader's source.
#[derive(Debug, Clone, Copy)]
pub struct Variant {
    pub name: &'static str,
    /// `(name, WGSL type, value)` triples, e.g. `("BM", "u32", "64u")`.
    pub consts: &'static [(&'static str, &'static str, &'static str)],
    /// Further module-scope WGSL put after the constants (type aliases, small helpers), or "".
    pub code: &'static str,
}

macro_rules! shader {
    ($name:literal) => {
        Shader { name: $name, source: include_str!(concat!("../shaders/", $name, ".wgsl")), variants: &[] }
    };
    ($name:literal, $variants:expr) => {
        Shader { name: $name, source: include_str!(concat!("../shaders/", $name, ".wgsl")), variants: $variants }
    };
}

/// One row of a `[.., m]` state as a WGSL type (`Row`): vectors where WGSL has an array-stride
/// match (m = 2, 4: one vector load per row), arrays otherwise. `row4`/`from4` convert rows of
/// m ≤ 4 to and from a `vec4<f32>` (zeros beyond m).
macro_rules! row_code {
    (1) => {
        "alias Row = array<f32, 1>;\n\
         fn row4(r: Row) -> vec4<f32> { return vec4<f32>(r[0], 0.0, 0.0, 0.0); }\n\
         fn from4(v: vec4<f32>) -> Row { return Row(v.x); }\n"
    };
    (2) => {
        "alias Row = vec2<f32>;\n\
         fn row4(r: Row) -> vec4<f32> { return vec4<f32>(r, 0.0, 0.0); }\n\
         fn from4(v: vec4<f32>) -> Row { return v.xy; }\n"
    };
    (3) => {
        "alias Row = array<f32, 3>;\n\
         fn row4(r: Row) -> vec4<f32> { return vec4<f32>(r[0], r[1], r[2], 0.0); }\n\
         fn from4(v: vec4<f32>) -> Row { return Row(v.x, v.y, v.z); }\n"
    };
    (4) => {
        "alias Row = vec4<f32>;\n\
         fn row4(r: Row) -> vec4<f32> { return r; }\n\
         fn from4(v: vec4<f32>) -> Row { return v; }\n"
    };
    (wide) => {
        "alias Row = array<f32, MM>;\n"
    };
}

/// How a kernel stores the *saved state* X (`x`, `x_out` of the delta write; `x`, `xr` of the
/// compressor): `XRow` / `XS` are its row and element types and `xin` / `xout` convert a row to and
/// from `Row`. `f32`: X is stored as computed. `f16` (m = 4 only, needs SHADER_F16): X is stored in
/// half precision, every sum and product still in f32 (the float32 islands of spec 10.3 stay
/// f32: p = Xᵀk is accumulated in f32 from the converted rows).
macro_rules! state_code {
    (f32) => {
        "alias XRow = Row;\n\
         alias XS = f32;\n\
         fn xin(r: XRow) -> Row { return r; }\n\
         fn xout(r: Row) -> XRow { return r; }\n"
    };
    (f16) => {
        "enable f16;\n\
         alias XRow = vec4<f16>;\n\
         alias XS = f16;\n\
         fn xin(r: XRow) -> Row { return Row(r); }\n\
         fn xout(r: Row) -> XRow { return XRow(r); }\n"
    };
}

/// Loads of values that every invocation of a subgroup needs (the same address in all of them):
/// the kernel passes `lead` = "this invocation loads" to its body, and `sg_first`/`sg_first4` give
/// the lead's value to the whole subgroup. `on`: the lead is invocation 0 of each subgroup
/// (`subgroup_invocation_id` = 0, which needs an entry point of the variant: `delta_sg_entries!`)
/// and `subgroupBroadcast(·, 0)` shares the value — correct for any subgroup size as long as the
/// address is the same in every invocation of the subgroup and all of them are active; on
/// llvmpipe, where every load is a loop over the 8 SIMD lanes, a load by lane 0 (a constant
/// mask) plus the broadcast measured 8× cheaper than every lane loading (docs/PERF.md). `off`
/// (no subgroup operations in the text, for adapters without them): every invocation loads.
macro_rules! sg_code {
    (on) => {
        "fn sg_first(v: f32) -> f32 { return subgroupBroadcast(v, 0u); }\n\
         fn sg_first4(v: vec4<f32>) -> vec4<f32> { return subgroupBroadcast(v, 0u); }\n"
    };
    (off) => {
        "fn sg_first(v: f32) -> f32 { return v; }\n\
         fn sg_first4(v: vec4<f32>) -> vec4<f32> { return v; }\n"
    };
}

/// The delta shader's entry points with subgroup-shared loads (`…g` variants only).
macro_rules! delta_sg_entries {
    () => {
        "@compute @workgroup_size(128)\n\
         fn delta_forward_qg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n\
             @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {\n\
             forward_q(wid, nwg, lid, sid == 0u, false);\n\
         }\n\
         @compute @workgroup_size(128)\n\
         fn delta_forward_qgk(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n\
             @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {\n\
             forward_q(wid, nwg, lid, sid == 0u, true);\n\
         }\n\
         @compute @workgroup_size(128)\n\
         fn delta_heads_g(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n\
             @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {\n\
             heads(wid, nwg, lid, sid == 0u);\n\
         }\n"
    };
}

/// The name of the `DELTA_VARIANTS` / `SHORTCONV_VARIANTS` variant for value width `m`.
pub fn width_variant(m: usize) -> String {
    format!("m{m}")
}

/// Value widths of the delta-write kernel (`shaders/delta.wgsl`): variant `mJ` has `MM = J` and
/// the row type of that width, so the loops over the m value channels have constant trip counts
/// (registers, not stack arrays) and a state row is one load where WGSL allows it. `mJs1` compiles
/// in the segment width 1 (one token per invocation, the CPU-adapter layout): the row loops get a
/// constant stride and the cross-lane reduction folds away. `mJs1g` adds the entry points with
/// subgroup-shared loads (`sg_code!`, `delta_sg_entries!`), used where
/// [`crate::kernels::subgroup_loads`] says so.
pub const DELTA_VARIANTS: &[Variant] = &[
    Variant {
        name: "m1",
        consts: &[("MM", "u32", "1u"), ("SEGFIX", "u32", "0u")],
        code: concat!(row_code!(1), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m2",
        consts: &[("MM", "u32", "2u"), ("SEGFIX", "u32", "0u")],
        code: concat!(row_code!(2), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m3",
        consts: &[("MM", "u32", "3u"), ("SEGFIX", "u32", "0u")],
        code: concat!(row_code!(3), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m4",
        consts: &[("MM", "u32", "4u"), ("SEGFIX", "u32", "0u")],
        code: concat!(row_code!(4), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m5",
        consts: &[("MM", "u32", "5u"), ("SEGFIX", "u32", "0u")],
        code: concat!(row_code!(wide), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m6",
        consts: &[("MM", "u32", "6u"), ("SEGFIX", "u32", "0u")],
        code: concat!(row_code!(wide), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m7",
        consts: &[("MM", "u32", "7u"), ("SEGFIX", "u32", "0u")],
        code: concat!(row_code!(wide), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m8",
        consts: &[("MM", "u32", "8u"), ("SEGFIX", "u32", "0u")],
        code: concat!(row_code!(wide), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m1s1",
        consts: &[("MM", "u32", "1u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(1), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m2s1",
        consts: &[("MM", "u32", "2u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(2), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m3s1",
        consts: &[("MM", "u32", "3u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(3), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m4s1",
        consts: &[("MM", "u32", "4u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(4), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m5s1",
        consts: &[("MM", "u32", "5u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(wide), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m6s1",
        consts: &[("MM", "u32", "6u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(wide), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m7s1",
        consts: &[("MM", "u32", "7u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(wide), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m8s1",
        consts: &[("MM", "u32", "8u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(wide), state_code!(f32), sg_code!(off)),
    },
    Variant {
        name: "m1s1g",
        consts: &[("MM", "u32", "1u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(1), state_code!(f32), sg_code!(on), delta_sg_entries!()),
    },
    Variant {
        name: "m2s1g",
        consts: &[("MM", "u32", "2u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(2), state_code!(f32), sg_code!(on), delta_sg_entries!()),
    },
    Variant {
        name: "m3s1g",
        consts: &[("MM", "u32", "3u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(3), state_code!(f32), sg_code!(on), delta_sg_entries!()),
    },
    Variant {
        name: "m4s1g",
        consts: &[("MM", "u32", "4u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(4), state_code!(f32), sg_code!(on), delta_sg_entries!()),
    },
    Variant {
        name: "m5s1g",
        consts: &[("MM", "u32", "5u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(wide), state_code!(f32), sg_code!(on), delta_sg_entries!()),
    },
    Variant {
        name: "m6s1g",
        consts: &[("MM", "u32", "6u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(wide), state_code!(f32), sg_code!(on), delta_sg_entries!()),
    },
    Variant {
        name: "m7s1g",
        consts: &[("MM", "u32", "7u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(wide), state_code!(f32), sg_code!(on), delta_sg_entries!()),
    },
    Variant {
        name: "m8s1g",
        consts: &[("MM", "u32", "8u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(wide), state_code!(f32), sg_code!(on), delta_sg_entries!()),
    },
    // f16 saved state (`state_code!(f16)`): the m = 4 layouts.
    Variant {
        name: "m4h",
        consts: &[("MM", "u32", "4u"), ("SEGFIX", "u32", "0u")],
        code: concat!(row_code!(4), state_code!(f16), sg_code!(off)),
    },
    Variant {
        name: "m4s1h",
        consts: &[("MM", "u32", "4u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(4), state_code!(f16), sg_code!(off)),
    },
    Variant {
        name: "m4s1gh",
        consts: &[("MM", "u32", "4u"), ("SEGFIX", "u32", "1u")],
        code: concat!(row_code!(4), state_code!(f16), sg_code!(on), delta_sg_entries!()),
    },
];

/// Variants of the compressor shader (`shaders/shortconv.wgsl`): the windowed token-axis kernels
/// read state rows of width m ≤ 4 as `Row` (variant `mJ`) and keep windows of `KW` token states:
/// 8 with K read from the parameters, or in `mJk4` (K = 4, every preset) 4 with K a constant
/// (`KFIX`), which halves the registers and turns the per-slot tap tests into constants. Every
/// other entry point ignores these and is launched from `m1`.
pub const SHORTCONV_VARIANTS: &[Variant] = &[
    Variant {
        name: "m1",
        consts: &[("MM", "u32", "1u"), ("KW", "u32", "8u"), ("KFIX", "u32", "0u")],
        code: concat!(row_code!(1), state_code!(f32)),
    },
    Variant {
        name: "m2",
        consts: &[("MM", "u32", "2u"), ("KW", "u32", "8u"), ("KFIX", "u32", "0u")],
        code: concat!(row_code!(2), state_code!(f32)),
    },
    Variant {
        name: "m3",
        consts: &[("MM", "u32", "3u"), ("KW", "u32", "8u"), ("KFIX", "u32", "0u")],
        code: concat!(row_code!(3), state_code!(f32)),
    },
    Variant {
        name: "m4",
        consts: &[("MM", "u32", "4u"), ("KW", "u32", "8u"), ("KFIX", "u32", "0u")],
        code: concat!(row_code!(4), state_code!(f32)),
    },
    Variant {
        name: "m1k4",
        consts: &[("MM", "u32", "1u"), ("KW", "u32", "4u"), ("KFIX", "u32", "4u")],
        code: concat!(row_code!(1), state_code!(f32)),
    },
    Variant {
        name: "m2k4",
        consts: &[("MM", "u32", "2u"), ("KW", "u32", "4u"), ("KFIX", "u32", "4u")],
        code: concat!(row_code!(2), state_code!(f32)),
    },
    Variant {
        name: "m3k4",
        consts: &[("MM", "u32", "3u"), ("KW", "u32", "4u"), ("KFIX", "u32", "4u")],
        code: concat!(row_code!(3), state_code!(f32)),
    },
    Variant {
        name: "m4k4",
        consts: &[("MM", "u32", "4u"), ("KW", "u32", "4u"), ("KFIX", "u32", "4u")],
        code: concat!(row_code!(4), state_code!(f32)),
    },
    // f16 saved state (`state_code!(f16)`), m = 4.
    Variant {
        name: "m4h",
        consts: &[("MM", "u32", "4u"), ("KW", "u32", "8u"), ("KFIX", "u32", "0u")],
        code: concat!(row_code!(4), state_code!(f16)),
    },
    Variant {
        name: "m4k4h",
        consts: &[("MM", "u32", "4u"), ("KW", "u32", "4u"), ("KFIX", "u32", "4u")],
        code: concat!(row_code!(4), state_code!(f16)),
    },
];

/// The matmul shader's A-block broadcast (`sg_ablk`, see `shaders/matmul.wgsl`): `off` returns
/// the block; `on` (the `…g` register-block variants) broadcasts invocation 0's block to its
/// subgroup and adds the `mm_*_g` entry points, which make invocation 0 of each subgroup the one
/// that loads A (one-dimensional workgroups of DX·DY invocations, x = index % DX: subgroup
/// builtins need a one-dimensional workgroup).
macro_rules! matmul_sg {
    (off) => {
        "fn sg_ablk(x: Ablk) -> Ablk { return x; }\n"
    };
    (on) => {
        "fn sg_m4(m: mat4x4<f32>) -> mat4x4<f32> {\n\
             return mat4x4<f32>(subgroupBroadcast(m[0], 0u), subgroupBroadcast(m[1], 0u),\n\
                                subgroupBroadcast(m[2], 0u), subgroupBroadcast(m[3], 0u));\n\
         }\n\
         fn sg_ablk(x: Ablk) -> Ablk { return Ablk(sg_m4(x.a0), sg_m4(x.a1), sg_m4(x.a2), sg_m4(x.a3)); }\n\
         @compute @workgroup_size(DX * DY)\n\
         fn mm_kk_g(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n\
             @builtin(local_invocation_index) li: u32, @builtin(subgroup_invocation_id) sid: u32) {\n\
             body_kk(wid, nwg, vec3<u32>(li % DX, li / DX, 0u), sid == 0u);\n\
         }\n\
         @compute @workgroup_size(DX * DY)\n\
         fn mm_kn_g(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n\
             @builtin(local_invocation_index) li: u32, @builtin(subgroup_invocation_id) sid: u32) {\n\
             body_kn(wid, nwg, vec3<u32>(li % DX, li / DX, 0u), sid == 0u);\n\
         }\n\
         @compute @workgroup_size(DX * DY)\n\
         fn mm_mn_g(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n\
             @builtin(local_invocation_index) li: u32, @builtin(subgroup_invocation_id) sid: u32) {\n\
             body_mn(wid, nwg, vec3<u32>(li % DX, li / DX, 0u), sid == 0u);\n\
         }\n\
         @compute @workgroup_size(DX * DY)\n\
         fn mm_mk_g(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n\
             @builtin(local_invocation_index) li: u32, @builtin(subgroup_invocation_id) sid: u32) {\n\
             body_mk(wid, nwg, vec3<u32>(li % DX, li / DX, 0u), sid == 0u);\n\
         }\n"
    };
}

// The constants of the matmul variants (MATMUL_VARIANTS).
const MM_T16: &[(&str, &str, &str)] = &[
    ("BM", "u32", "16u"),
    ("BN", "u32", "16u"),
    ("BK", "u32", "16u"),
    ("TM", "u32", "1u"),
    ("TN", "u32", "1u"),
    ("DIRECT", "u32", "0u"),
    ("DX", "u32", "8u"),
    ("DY", "u32", "1u"),
    ("DM", "u32", "1u"),
    ("DN", "u32", "1u"),
];
const MM_T32: &[(&str, &str, &str)] = &[
    ("BM", "u32", "32u"),
    ("BN", "u32", "32u"),
    ("BK", "u32", "16u"),
    ("TM", "u32", "2u"),
    ("TN", "u32", "2u"),
    ("DIRECT", "u32", "0u"),
    ("DX", "u32", "8u"),
    ("DY", "u32", "1u"),
    ("DM", "u32", "1u"),
    ("DN", "u32", "1u"),
];
const MM_T64: &[(&str, &str, &str)] = &[
    ("BM", "u32", "64u"),
    ("BN", "u32", "64u"),
    ("BK", "u32", "16u"),
    ("TM", "u32", "4u"),
    ("TN", "u32", "4u"),
    ("DIRECT", "u32", "0u"),
    ("DX", "u32", "8u"),
    ("DY", "u32", "1u"),
    ("DM", "u32", "1u"),
    ("DN", "u32", "1u"),
];
const MM_R128: &[(&str, &str, &str)] = &[
    ("BM", "u32", "128u"),
    ("BN", "u32", "128u"),
    ("BK", "u32", "8u"),
    ("TM", "u32", "8u"),
    ("TN", "u32", "8u"),
    ("DIRECT", "u32", "1u"),
    ("DX", "u32", "8u"),
    ("DY", "u32", "8u"),
    ("DM", "u32", "4u"),
    ("DN", "u32", "4u"),
];
const MM_C64: &[(&str, &str, &str)] = &[
    ("BM", "u32", "128u"),
    ("BN", "u32", "64u"),
    ("BK", "u32", "8u"),
    ("TM", "u32", "8u"),
    ("TN", "u32", "4u"),
    ("DIRECT", "u32", "1u"),
    ("DX", "u32", "8u"),
    ("DY", "u32", "8u"),
    ("DM", "u32", "4u"),
    ("DN", "u32", "2u"),
];
const MM_R32: &[(&str, &str, &str)] = &[
    ("BM", "u32", "32u"),
    ("BN", "u32", "128u"),
    ("BK", "u32", "8u"),
    ("TM", "u32", "2u"),
    ("TN", "u32", "8u"),
    ("DIRECT", "u32", "1u"),
    ("DX", "u32", "8u"),
    ("DY", "u32", "2u"),
    ("DM", "u32", "4u"),
    ("DN", "u32", "4u"),
];
const MM_R8: &[(&str, &str, &str)] = &[
    ("BM", "u32", "8u"),
    ("BN", "u32", "128u"),
    ("BK", "u32", "8u"),
    ("TM", "u32", "1u"),
    ("TN", "u32", "8u"),
    ("DIRECT", "u32", "1u"),
    ("DX", "u32", "8u"),
    ("DY", "u32", "1u"),
    ("DM", "u32", "2u"),
    ("DN", "u32", "4u"),
];

/// Tile configurations of the matmul kernel (`shaders/matmul.wgsl`; `docs/PERF-LOG.md` has the
/// measurements behind them). Every variant computes every output in the same order, so they
/// give bit-identical results.
///
/// - `t16`, `t32`, `t64` (`DIRECT = 0`): the workgroup-memory kernel for GPUs. `BM×BN` outputs
///   per workgroup, `TM×TN` per invocation, `BK` the depth of one shared-memory stage.
/// - `r128`, `c64`, `r32`, `r8` (`DIRECT = 1`): the register-block kernels for CPU adapters
///   (llvmpipe): `DX×DY` invocations, each `4·DM × 4·DN` outputs, so `BM = 4·DM·DY` and
///   `BN = 4·DN·DX`. Their `BK`, `TM`, `TN` only keep the module's workgroup-memory entry point
///   well-formed (it is never launched with them). `DX` is 8: llvmpipe runs 8 invocations along
///   x as one SIMD vector.
pub const MATMUL_VARIANTS: &[Variant] = &[
    Variant { name: "t16", consts: MM_T16, code: matmul_sg!(off) },
    Variant { name: "t32", consts: MM_T32, code: matmul_sg!(off) },
    Variant { name: "t64", consts: MM_T64, code: matmul_sg!(off) },
    Variant { name: "r128", consts: MM_R128, code: matmul_sg!(off) },
    Variant { name: "c64", consts: MM_C64, code: matmul_sg!(off) },
    Variant { name: "r32", consts: MM_R32, code: matmul_sg!(off) },
    Variant { name: "r8", consts: MM_R8, code: matmul_sg!(off) },
    Variant { name: "r128g", consts: MM_R128, code: matmul_sg!(on) },
    Variant { name: "c64g", consts: MM_C64, code: matmul_sg!(on) },
    Variant { name: "r32g", consts: MM_R32, code: matmul_sg!(on) },
    Variant { name: "r8g", consts: MM_R8, code: matmul_sg!(on) },
];

/// Variants of the RMSNorm shader (`shaders/norm.wgsl`): `team` reads the team size from the
/// parameters; `t1` compiles in teams of one invocation (one row per invocation, the CPU-adapter
/// layout), so the row loops have a constant stride and the team reduction folds away.
pub const NORM_VARIANTS: &[Variant] = &[
    Variant { name: "team", consts: &[("TEAMFIX", "u32", "0u"), ("NORM_WG", "u32", "256u")], code: sg_code!(off) },
    Variant { name: "t1", consts: &[("TEAMFIX", "u32", "1u"), ("NORM_WG", "u32", "64u")], code: sg_code!(off) },
    // Teams of one with the subgroup-shared weight loads of the heads' backward.
    Variant {
        name: "t1g",
        consts: &[("TEAMFIX", "u32", "1u"), ("NORM_WG", "u32", "64u")],
        code: concat!(
            sg_code!(on),
            "@compute @workgroup_size(WG)\n\
             fn rmsnorm_backward_dx_qhg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n\
                 @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {\n\
                 backward_dx_qh(wid, nwg, lid, sid == 0u);\n\
             }\n\
             @compute @workgroup_size(WG)\n\
             fn rmsnorm_dgain_partial_qhg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n\
                 @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {\n\
                 dgain_partial_qh(wid, nwg, lid, sid == 0u);\n\
             }\n"
        ),
    },
];

/// Every shader of the engine.
pub const ALL: &[Shader] = &[
    shader!("fill"),
    shader!("matmul", MATMUL_VARIANTS),
    shader!("elementwise"),
    shader!("reduce"),
    shader!("embedding"),
    shader!("norm", NORM_VARIANTS),
    shader!("rope"),
    shader!("attention"),
    shader!("attention_rows"),
    shader!("swiglu"),
    shader!("loss"),
    shader!("delta", DELTA_VARIANTS),
    shader!("shortconv", SHORTCONV_VARIANTS),
    shader!("expand"),
    shader!("state16"),
    shader!("adamw"),
];

/// Looks a shader up by name.
pub fn get(name: &str) -> Option<&'static Shader> {
    ALL.iter().find(|s| s.name == name)
}

impl Shader {
    /// The WGSL text of one variant (`None` = the plain source, only for shaders without
    /// variants).
    pub fn text(&self, variant: Option<&str>) -> Result<String, String> {
        match (variant, self.variants.is_empty()) {
            (None, true) => Ok(self.source.to_string()),
            (None, false) => {
                Err(format!("shader '{}' needs a variant, one of: {}", self.name, self.variant_names().join(", ")))
            }
            (Some(v), _) => {
                let var = self.variants.iter().find(|x| x.name == v).ok_or_else(|| {
                    format!("shader '{}' has no variant '{}' (has: {})", self.name, v, self.variant_names().join(", "))
                })?;
                // Enable directives (`enable f16;`) must come before every declaration.
                let mut s = String::new();
                for line in var.code.lines().filter(|l| l.starts_with("enable ")) {
                    s.push_str(line);
                    s.push('\n');
                }
                for (n, t, val) in var.consts {
                    s.push_str(&format!("const {n}: {t} = {val};\n"));
                }
                for line in var.code.lines().filter(|l| !l.starts_with("enable ")) {
                    s.push_str(line);
                    s.push('\n');
                }
                s.push_str(self.source);
                Ok(s)
            }
        }
    }

    /// Names of the variants (empty for a plain shader).
    pub fn variant_names(&self) -> Vec<&'static str> {
        self.variants.iter().map(|v| v.name).collect()
    }

    /// Every compilable text of this shader: `(variant name or "", WGSL)`.
    pub fn all_texts(&self) -> Vec<(&'static str, String)> {
        if self.variants.is_empty() {
            vec![("", self.source.to_string())]
        } else {
            self.variants.iter().map(|v| (v.name, self.text(Some(v.name)).expect("listed variant"))).collect()
        }
    }
}

/// Parses and validates WGSL with naga, returning the module and its analysis.
pub fn validate(label: &str, wgsl: &str) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(wgsl)
        .map_err(|e| format!("{label}: WGSL parse error:\n{}", e.emit_to_string(wgsl)))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| format!("{label}: naga validation error:\n{}", e.emit_to_string(wgsl)))?;
    Ok((module, info))
}

/// Translates a validated module to SPIR-V (Vulkan), MSL (Metal) and HLSL (DX12): the portability
/// check that runs without any GPU.
pub fn translate_all(label: &str, module: &naga::Module, info: &naga::valid::ModuleInfo) -> Result<(), String> {
    use naga::back::{hlsl, msl, spv};
    spv::write_vec(module, info, &spv::Options::default(), None)
        .map_err(|e| format!("{label}: SPIR-V translation failed: {e}"))?;
    msl::write_string(module, info, &msl::Options::default(), &msl::PipelineOptions::default())
        .map_err(|e| format!("{label}: MSL translation failed: {e}"))?;
    let mut out = String::new();
    let opts = hlsl::Options { shader_model: hlsl::ShaderModel::V6_0, ..Default::default() };
    hlsl::Writer::new(&mut out, &opts, &hlsl::PipelineOptions::default())
        .write(module, info, None)
        .map_err(|e| format!("{label}: HLSL translation failed: {e}"))?;
    Ok(())
}

/// [`translate_all`], with a back end's panic (naga's writers assert on some constructs, e.g.
/// 64-bit floats in MSL) reported as a failure of that shader instead of aborting the check.
pub fn translate_all_caught(label: &str, module: &naga::Module, info: &naga::valid::ModuleInfo) -> Result<(), String> {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| translate_all(label, module, info)));
    std::panic::set_hook(prev);
    match r {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("{label}: a back end (SPIR-V/MSL/HLSL) could not translate it: {msg}"))
        }
    }
}

/// Validates and translates every variant of every shader; returns all failures.
pub fn check_all(shaders: &[Shader]) -> Vec<String> {
    let mut errors = Vec::new();
    for sh in shaders {
        for (variant, text) in sh.all_texts() {
            let label = if variant.is_empty() {
                format!("shaders/{}.wgsl", sh.name)
            } else {
                format!("shaders/{}.wgsl [{}]", sh.name, variant)
            };
            match validate(&label, &text) {
                Ok((m, i)) => {
                    if let Err(e) = translate_all_caught(&label, &m, &i) {
                        errors.push(e)
                    }
                }
                Err(e) => errors.push(e),
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shader_validates_and_translates_to_spirv_msl_hlsl() {
        let errors = check_all(ALL);
        assert!(errors.is_empty(), "{}", errors.join("\n\n"));
    }

    #[test]
    fn every_shader_file_is_registered() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders");
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "wgsl") {
                let stem = p.file_stem().unwrap().to_str().unwrap();
                assert!(get(stem).is_some(), "shaders/{stem}.wgsl is not in shaders::ALL");
            }
        }
    }

    #[test]
    fn the_portability_check_rejects_a_shader_that_does_not_translate() {
        // A parse error, a type error, and a construct naga accepts but a back end may not are
        // all failures: the check is only useful if it can fail.
        let bad = [
            Shader { name: "bad_parse", source: "fn main( {", variants: &[] },
            Shader {
                name: "bad_type",
                source: "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }",
                variants: &[],
            },
        ];
        let errs = check_all(&bad);
        assert_eq!(errs.len(), 2, "{errs:?}");
        // Valid WGSL for naga (with every capability) that Metal cannot express: 64-bit floats.
        let metal_only_fails = Shader {
            name: "f64_storage",
            source: "@group(0) @binding(0) var<storage, read_write> o: array<f64>;\n\
                     @compute @workgroup_size(1) fn main() { o[0] = o[0] * 2.0lf; }",
            variants: &[],
        };
        let errs = check_all(&[metal_only_fails]);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("f64_storage"), "{}", errs[0]);
    }

    #[test]
    fn variants_prepend_their_constants() {
        let s = get("matmul").unwrap();
        let t = s.text(Some("t64")).unwrap();
        assert!(t.starts_with("const BM: u32 = 64u;"));
        assert!(s.text(None).is_err());
        assert!(s.text(Some("nope")).is_err());
    }
}
