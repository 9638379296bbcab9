//! Every WGSL shader of the engine, embedded at compile time, in one list.
//!
//! Pipeline creation and the portability test both read [`ALL`], so a shader that is not in the
//! list cannot be dispatched, and a shader that is in the list is always validated by naga and
//! translated to SPIR-V, MSL and HLSL (`cargo test shaders`).
//!
//! A shader may come in *variants*: the same source compiled with different `const` values
//! (tile sizes, for example) and WGSL parts put in front of it (`shaders/parts/`: the row type of
//! a value width, how the saved state is stored, subgroup loads and the entry points that need
//! them). WGSL allows module-scope declarations in any order, so the source uses the constants
//! and parts without declaring them. Variants are generated from small typed keys
//! ([`DeltaKey`], [`ConvKey`], [`MatmulKey`], [`NormKey`]); a kernel asks for the key's name. All
//! WGSL lives under `shaders/`.

mod check;
mod keys;
pub mod poison;

pub use check::*;
pub use keys::*;

/// One WGSL source file and the variants it is compiled in.
#[derive(Debug, Clone, Copy)]
pub struct Shader {
    /// File stem under `shaders/`, e.g. `"matmul"`.
    pub name: &'static str,
    /// The WGSL text.
    pub source: &'static str,
    /// Every variant (empty when the source stands alone); the portability check compiles each.
    pub variants: fn() -> Vec<Variant>,
    /// Variants made on request by name beyond the list (the delta write's value widths above
    /// [`DELTA_MAX_M`]: any m is a name, `m9s1`, `m33s1g`, …); `None` for an unknown name.
    pub named: fn(&str) -> Option<Variant>,
    /// It uses cooperative matrices: the portability check translates it to SPIR-V and to MSL 2.3
    /// (their first version), not to HLSL, which cannot express them.
    pub coop: bool,
}

/// A named set of module-scope constants and WGSL parts prepended to a shader's source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    pub name: String,
    /// `(name, WGSL type, value)` triples, e.g. `("BM", "u32", "64u")`.
    pub consts: Vec<(&'static str, &'static str, String)>,
    /// WGSL put after the constants, in order (files of `shaders/parts/`).
    pub parts: Vec<&'static str>,
}

/// A shader without variants.
pub fn no_variants() -> Vec<Variant> {
    Vec::new()
}

/// A shader whose variants are exactly its list.
pub fn no_named(_: &str) -> Option<Variant> {
    None
}

macro_rules! shader {
    // A shader without variants whose text starts with a part (`shaders/parts/PART.wgsl`).
    ($name:literal, prelude $part:literal) => {
        Shader {
            name: $name,
            source: concat!(
                include_str!(concat!("../../shaders/parts/", $part, ".wgsl")),
                include_str!(concat!("../../shaders/", $name, ".wgsl"))
            ),
            variants: no_variants,
            named: no_named,
            coop: false,
        }
    };
    ($name:literal) => {
        Shader {
            name: $name,
            source: include_str!(concat!("../../shaders/", $name, ".wgsl")),
            variants: no_variants,
            named: no_named,
            coop: false,
        }
    };
    ($name:literal, $variants:expr) => {
        shader!($name, $variants, no_named)
    };
    ($name:literal, $variants:expr, $named:expr) => {
        Shader {
            name: $name,
            source: include_str!(concat!("../../shaders/", $name, ".wgsl")),
            variants: $variants,
            named: $named,
            coop: false,
        }
    };
    ($name:literal, $variants:expr, $named:expr, coop) => {
        Shader {
            name: $name,
            source: include_str!(concat!("../../shaders/", $name, ".wgsl")),
            variants: $variants,
            named: $named,
            coop: true,
        }
    };
}

macro_rules! part {
    ($name:literal) => {
        include_str!(concat!("../../shaders/parts/", $name, ".wgsl"))
    };
}

/// The parts (`shaders/parts/*.wgsl`), by file stem.
pub const PARTS: &[(&str, &str)] = &[
    ("row1", part!("row1")),
    ("row2", part!("row2")),
    ("row3", part!("row3")),
    ("row4", part!("row4")),
    ("row_wide", part!("row_wide")),
    ("state_f32", part!("state_f32")),
    ("state_f16", part!("state_f16")),
    ("sg_on", part!("sg_on")),
    ("sg_off", part!("sg_off")),
    ("delta_sg_entries", part!("delta_sg_entries")),
    ("delta_io_split", part!("delta_io_split")),
    ("delta_io_packed", part!("delta_io_packed")),
    ("matmul_sg_on", part!("matmul_sg_on")),
    ("matmul_sg_off", part!("matmul_sg_off")),
    ("matmul_a_f32", part!("matmul_a_f32")),
    ("matmul_a_r16", part!("matmul_a_r16")),
    ("matmul_a_f16", part!("matmul_a_f16")),
    ("matmul_b_f32", part!("matmul_b_f32")),
    ("matmul_b_r16", part!("matmul_b_r16")),
    ("matmul_b_f16", part!("matmul_b_f16")),
    ("matmul_a_r16q", part!("matmul_a_r16q")),
    ("matmul_b_r16q", part!("matmul_b_r16q")),
    ("matmul_params", part!("matmul_params")),
    ("f16_round", part!("f16_round")),
    ("coop_enable", part!("coop_enable")),
    ("coop_staging", part!("coop_staging")),
    ("coop_staging_v", part!("coop_staging_v")),
    ("coop_direct", part!("coop_direct")),
    ("loss_split", part!("loss_split")),
    ("loss_inplace", part!("loss_inplace")),
    ("coop_direct_hh", part!("coop_direct_hh")),
    ("coop_direct_none", part!("coop_direct_none")),
    ("norm_sg_entries", part!("norm_sg_entries")),
    ("attn_rows_f32", part!("attn_rows_f32")),
    ("attn_rows_f16", part!("attn_rows_f16")),
];

fn part(name: &str) -> &'static str {
    PARTS.iter().find(|p| p.0 == name).map(|p| p.1).expect("a part listed in PARTS")
}

/// The row type of value width `m` (`Row`, `row4`, `from4`): vectors where WGSL has an
/// array-stride match (m = 2, 4: one vector load per row), arrays otherwise.
fn row_part(m: usize) -> &'static str {
    match m {
        1 => part("row1"),
        2 => part("row2"),
        3 => part("row3"),
        4 => part("row4"),
        _ => part("row_wide"),
    }
}

/// How a kernel stores the *saved state* X: as computed (f32), or (m = 4 only, needs
/// SHADER_F16) in half precision with every sum and product still in f32 (the float32 islands of
/// spec 10.3 stay f32: p = Xᵀk is accumulated in f32 from the converted rows).
fn state_part(f16: bool) -> &'static str {
    part(if f16 { "state_f16" } else { "state_f32" })
}

/// Loads of values that every invocation of a subgroup needs (the same address in all of them):
/// the kernel passes `lead` = "this invocation loads" to its body, and `sg_first`/`sg_first4` give
/// the lead's value to the whole subgroup. On: the lead is invocation 0 of each subgroup
/// (`subgroup_invocation_id` = 0, which needs an entry point of the variant) and
/// `subgroupBroadcast(·, 0)` shares the value — correct for any subgroup size as long as the
/// address is the same in every invocation of the subgroup and all of them are active; on
/// llvmpipe, where every load is a loop over the 8 SIMD lanes, a load by lane 0 (a constant
/// mask) plus the broadcast measured 8× cheaper than every lane loading (docs/PERF.md). Off (no
/// subgroup operations in the text, for adapters without them): every invocation loads.
fn sg_part(on: bool) -> &'static str {
    part(if on { "sg_on" } else { "sg_off" })
}

/// The cross-entropy shader's two variants: `split` (the backward's gradient in its own buffer)
/// and `inplace` (written over the logits; training programs, `kernels::loss`).
fn loss_variants() -> Vec<Variant> {
    ["split", "inplace"]
        .into_iter()
        .map(|v| Variant {
            name: v.into(),
            consts: vec![],
            parts: vec![part(if v == "split" { "loss_split" } else { "loss_inplace" })],
        })
        .collect()
}

/// The blocked attention's softmax steps (`attention_rows`): `f32` writes P and dS over the
/// scores and dP, `h` stores them in f16 buffers of their own (form `attn_p16`, `--precision f16`).
fn attention_rows_variants() -> Vec<Variant> {
    vec![
        Variant { name: "f32".into(), consts: vec![], parts: vec![part("attn_rows_f32")] },
        Variant { name: "h".into(), consts: vec![], parts: vec![part("f16_round"), part("attn_rows_f16")] },
    ]
}

fn u(v: usize) -> String {
    format!("{v}u")
}

/// Every shader of the engine.
pub const ALL: &[Shader] = &[
    shader!("fill"),
    shader!("matmul", matmul_variants, matmul_named),
    shader!("matmul_coop", coop_variants, coop_named, coop),
    shader!("matmul_coop8", coop_variants, coop_named, coop),
    shader!("coop_stage_check", stage_check_variants),
    shader!("elementwise", prelude "f16_round"),
    shader!("reduce"),
    shader!("embedding"),
    shader!("norm", norm_variants),
    shader!("rope"),
    shader!("attention"),
    shader!("attention_rows", attention_rows_variants),
    shader!("swiglu", prelude "f16_round"),
    shader!("loss", loss_variants),
    shader!("delta", delta_variants, delta_named),
    shader!("shortconv", shortconv_variants),
    shader!("expand"),
    shader!("state16"),
    shader!("adamw"),
];

/// Looks a shader up by name.
pub fn get(name: &str) -> Option<&'static Shader> {
    ALL.iter().find(|s| s.name == name)
}

impl Shader {
    /// The variants of this shader.
    pub fn variants(&self) -> Vec<Variant> {
        (self.variants)()
    }

    /// The WGSL text of one variant (`None` = the plain source, only for shaders without
    /// variants).
    pub fn text(&self, variant: Option<&str>) -> Result<String, String> {
        let variants = self.variants();
        match (variant, variants.is_empty()) {
            (None, true) => Ok(self.source.to_string()),
            (None, false) => {
                Err(format!("shader '{}' needs a variant, one of: {}", self.name, self.variant_names().join(", ")))
            }
            (Some(v), _) => {
                let var = variants.into_iter().find(|x| x.name == v).or_else(|| (self.named)(v)).ok_or_else(|| {
                    format!("shader '{}' has no variant '{}' (has: {})", self.name, v, self.variant_names().join(", "))
                })?;
                Ok(var.text(self.source))
            }
        }
    }

    /// Names of the variants (empty for a plain shader).
    pub fn variant_names(&self) -> Vec<String> {
        self.variants().into_iter().map(|v| v.name).collect()
    }

    /// Every compilable text of this shader: `(variant name or "", WGSL)`.
    pub fn all_texts(&self) -> Vec<(String, String)> {
        let variants = self.variants();
        if variants.is_empty() {
            vec![(String::new(), self.source.to_string())]
        } else {
            variants.iter().map(|v| (v.name.clone(), v.text(self.source))).collect()
        }
    }
}

impl Variant {
    /// Enable directives of the parts (`enable f16;`, which must come before every declaration),
    /// the constants, the rest of the parts, then `source`.
    fn text(&self, source: &str) -> String {
        let mut s = String::new();
        let lines = || self.parts.iter().flat_map(|p| p.lines());
        let mut enables: Vec<&str> = lines().filter(|l| l.starts_with("enable ")).collect();
        enables.sort();
        enables.dedup();
        for line in enables {
            s.push_str(line);
            s.push('\n');
        }
        for (n, t, val) in &self.consts {
            s.push_str(&format!("const {n}: {t} = {val};\n"));
        }
        for line in lines().filter(|l| !l.starts_with("enable ")) {
            s.push_str(line);
            s.push('\n');
        }
        s.push_str(source);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shader_validates_and_translates_to_spirv_msl_hlsl() {
        let errors = check_all(ALL);
        assert!(errors.is_empty(), "{}", errors.join("\n\n"));
    }

    /// The split delta forward binds the storage buffers `SPLIT_FORWARD_STORAGE_BUFFERS` says
    /// (which turns the packed form on below it), and the packed forward fits a browser's WebGPU
    /// (10 on Chrome's SwiftShader) in every layout and width.
    #[test]
    fn the_packed_delta_forward_fits_a_browsers_storage_buffer_limit() {
        let split = crate::kernels::delta::SPLIT_FORWARD_STORAGE_BUFFERS as usize;
        let mut seen = 0;
        for key in DeltaKey::all().into_iter().filter(|k| !k.f16) {
            let text = get("delta").unwrap().text(Some(&key.name())).unwrap();
            let (m, i) = validate(&key.name(), &text).unwrap();
            for (entry, n) in storage_buffers_per_entry(&m, &i) {
                if !entry.starts_with("delta_forward") {
                    continue;
                }
                seen += 1;
                if key.packed {
                    assert!(n <= 9, "{} {entry}: {n} storage buffers", key.name());
                } else {
                    assert_eq!(n, split, "{} {entry}", key.name());
                }
            }
        }
        assert!(seen > 20, "only {seen} forward entry points checked");
    }

    #[test]
    fn every_shader_file_is_registered() {
        let dir = crate::testing::data_path("shaders");
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
            Shader { name: "bad_parse", source: "fn main( {", variants: no_variants, named: no_named, coop: false },
            Shader {
                name: "bad_type",
                source: include_str!("../../tests/shaders/bad_type.wgsl"),
                variants: no_variants,
                named: no_named,
                coop: false,
            },
        ];
        let errs = check_all(&bad);
        assert_eq!(errs.len(), 2, "{errs:?}");
        // Valid WGSL for naga (with every capability) that Metal cannot express: 64-bit floats.
        let metal_only_fails = Shader {
            name: "f64_storage",
            source: include_str!("../../tests/shaders/f64_storage.wgsl"),
            variants: no_variants,
            named: no_named,
            coop: false,
        };
        let errs = check_all(&[metal_only_fails]);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("f64_storage"), "{}", errs[0]);
    }

    #[test]
    fn every_part_file_is_listed_and_used() {
        let dir = crate::testing::data_path("shaders/parts");
        let mut used: Vec<&str> = Vec::new();
        for sh in ALL {
            for v in sh.variants() {
                used.extend(v.parts);
            }
        }
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            let stem = p.file_stem().unwrap().to_str().unwrap().to_string();
            let text = PARTS.iter().find(|x| x.0 == stem).map(|x| x.1);
            let text = text.unwrap_or_else(|| panic!("shaders/parts/{stem}.wgsl is not in shaders::PARTS"));
            assert!(used.contains(&text), "shaders/parts/{stem}.wgsl is used by no variant");
        }
    }

    #[test]
    fn keys_name_distinct_variants_and_parse_back() {
        for (shader, names) in [
            ("delta", DeltaKey::all().iter().map(|k| k.name()).collect::<Vec<_>>()),
            ("shortconv", ConvKey::all().iter().map(|k| k.name()).collect()),
            ("matmul", MatmulKey::listed().iter().map(|k| k.variant_name()).collect()),
            ("norm", NormKey::all().iter().map(|k| k.name().to_string()).collect()),
        ] {
            let mut sorted = names.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), names.len(), "{shader}: two keys share a name");
            assert_eq!(get(shader).unwrap().variant_names(), names);
        }
        for k in MatmulKey::all() {
            assert_eq!(MatmulKey::parse(k.name()), Some(k));
            assert_eq!(k.subgroup, k.name().ends_with('g'));
        }
        // Operand suffixes: any pair but f32·f32 (which has no suffix), on any tile.
        use MatmulElem::{F16, F32, R16};
        for k in MatmulKey::all() {
            for (a, b) in [(F32, R16), (R16, R16), (F16, F32), (F16, F16), (R16, F16)] {
                let e = k.with_elems(a, b);
                assert_eq!(MatmulKey::parse(&e.variant_name()), Some(e), "{}", e.variant_name());
            }
        }
        assert_eq!(MatmulKey::parse("w128_rh").map(|k| (k.a, k.b)), Some((R16, F16)));
        for bad in ["w128_ff", "w128_r", "w128_rhh", "w128_xr", "w12_rr", "_rr"] {
            assert_eq!(MatmulKey::parse(bad), None, "{bad}");
        }
        // Two f16 parts: one enable directive, first.
        let t = get("matmul").unwrap().text(Some("c64_hr")).unwrap();
        assert!(t.starts_with("enable f16;\nconst BM: u32 = 128u;"), "{}", &t[..60]);
        assert_eq!(t.matches("enable f16;").count(), 1);
        // The cooperative-matrix keys: f16 quads in flight (`q`), two slices in flight (`2`).
        for k in CoopKey::all() {
            assert_eq!(CoopKey::parse(&k.name()), Some(k), "{}", k.name());
        }
        let k = CoopKey::parse("s32_rhq2").unwrap();
        assert!(k.q16 && k.depth2 && (k.a, k.b) == (R16, F16) && k.sg == 32, "{k:?}");
        assert_eq!(CoopKey::parse("s32_rh2").map(|k| (k.q16, k.depth2)), Some((false, true)));
        for bad in ["s32_rh2q", "s32_rh22", "s32_ff", "s24_rr", "s32_r2"] {
            assert_eq!(CoopKey::parse(bad), None, "{bad}");
        }
        let t = get("matmul_coop").unwrap().text(Some("s32_rr2")).unwrap();
        assert!(t.contains("const VDEPTH: u32 = 2u;"), "{}", &t[..200]);
        assert_eq!(DeltaKey { m: 4, seg1: true, subgroup: true, f16: true, packed: false }.name(), "m4s1gh");
        assert_eq!(DeltaKey { m: 2, seg1: true, subgroup: false, f16: false, packed: true }.name(), "m2s1p");
        for k in DeltaKey::all() {
            assert_eq!(DeltaKey::parse(&k.name()), Some(k), "{}", k.name());
        }
        // Any width has the seg = 1 forms, made on request; the multi-lane form and f16 do not.
        let wide = DeltaKey { m: 57, seg1: true, subgroup: true, f16: false, packed: false };
        assert_eq!(DeltaKey::parse("m57s1g"), Some(wide));
        for bad in ["m57", "m9h", "m8s1h", "m0s1", "m", "m4x", "m04s1", "x4", "m4s1gg", "m4hs1"] {
            assert_eq!(DeltaKey::parse(bad), None, "{bad}");
        }
        let t = get("delta").unwrap().text(Some("m57s1")).unwrap();
        assert!(t.starts_with("const MM: u32 = 57u;\nconst SEGFIX: u32 = 1u;\nconst REDN: u32 = 1u;"), "{}", &t[..80]);
        assert!(get("delta").unwrap().text(Some("m57")).is_err());
        assert_eq!(ConvKey { m: 4, k4: true, f16: true }.name(), "m4k4h");
        // The f16 part's enable directive comes first.
        let t = get("delta").unwrap().text(Some("m4s1h")).unwrap();
        assert!(t.starts_with("enable f16;\nconst MM: u32 = 4u;"), "{}", &t[..60]);
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
