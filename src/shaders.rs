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
                include_str!(concat!("../shaders/parts/", $part, ".wgsl")),
                include_str!(concat!("../shaders/", $name, ".wgsl"))
            ),
            variants: no_variants,
            named: no_named,
            coop: false,
        }
    };
    ($name:literal) => {
        Shader {
            name: $name,
            source: include_str!(concat!("../shaders/", $name, ".wgsl")),
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
            source: include_str!(concat!("../shaders/", $name, ".wgsl")),
            variants: $variants,
            named: $named,
            coop: false,
        }
    };
    ($name:literal, $variants:expr, $named:expr, coop) => {
        Shader {
            name: $name,
            source: include_str!(concat!("../shaders/", $name, ".wgsl")),
            variants: $variants,
            named: $named,
            coop: true,
        }
    };
}

macro_rules! part {
    ($name:literal) => {
        include_str!(concat!("../shaders/parts/", $name, ".wgsl"))
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
    ("matmul_params", part!("matmul_params")),
    ("f16_round", part!("f16_round")),
    ("coop_enable", part!("coop_enable")),
    ("coop_staging", part!("coop_staging")),
    ("norm_sg_entries", part!("norm_sg_entries")),
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

fn u(v: usize) -> String {
    format!("{v}u")
}

/// Largest value width of the delta-write kernel's listed variants, the widths that also have
/// the multi-lane segment forms. Wider states (any m) get the one-token-per-invocation form
/// (`m{m}s1`, `m{m}s1g`), compiled on first use ([`DeltaKey::parse`]): its per-lane arrays grow
/// with m (registers, spilled to local memory when large) but it needs no workgroup memory, where
/// a segment's reduction buffer of (2 + 2m)·128 floats would pass WebGPU's 16 KiB at m = 8.
pub const DELTA_MAX_M: usize = 8;

/// The widths above [`DELTA_MAX_M`] that the shader list (and so the portability check) holds.
pub const DELTA_WIDE_CHECKED: [usize; 3] = [9, 16, 33];

/// A variant of the delta-write kernel (`shaders/delta.wgsl`): value width `m` (`MM`, the row
/// type of that width: the loops over the m value channels have constant trip counts, registers
/// not stack arrays, and a state row is one load where WGSL allows it); `seg1` compiles in the
/// segment width 1 (one token per invocation, the CPU-adapter layout: the row loops get a
/// constant stride and the cross-lane reduction folds away); `subgroup` (with `seg1`) adds the
/// entry points with subgroup-shared loads, used where [`crate::kernels::subgroup_loads`] says
/// so; `f16` stores the state in half precision (m = 4); `packed`: the forward reads its head
/// weights from one packed buffer and writes its saves to another (9 storage buffers instead of
/// 15, for adapters that allow fewer: a browser's WebGPU; `parts/delta_io_packed.wgsl`). Widths
/// above [`DELTA_MAX_M`] exist only with `seg1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaKey {
    pub m: usize,
    pub seg1: bool,
    pub subgroup: bool,
    pub f16: bool,
    pub packed: bool,
}

impl DeltaKey {
    /// `m4`, `m4s1`, `m4s1g`, `m4s1gh`, `m4s1gp`, …
    pub fn name(&self) -> String {
        let seg = match (self.seg1, self.subgroup) {
            (true, true) => "s1g",
            (true, false) => "s1",
            _ => "",
        };
        format!("m{}{seg}{}{}", self.m, if self.f16 { "h" } else { "" }, if self.packed { "p" } else { "" })
    }

    fn variant(&self) -> Variant {
        let io = part(if self.packed { "delta_io_packed" } else { "delta_io_split" });
        let mut parts = vec![row_part(self.m), state_part(self.f16), sg_part(self.subgroup), io];
        if self.subgroup {
            parts.push(part("delta_sg_entries"));
        }
        // The segment reduction's workgroup buffer: NV·WG floats, none when seg = 1 is compiled in
        // (the reduction returns before touching it; one element keeps the declaration valid).
        let red = if self.seg1 { 1 } else { (2 + 2 * self.m) * 128 };
        Variant {
            name: self.name(),
            consts: vec![("MM", "u32", u(self.m)), ("SEGFIX", "u32", u(self.seg1 as usize)), ("REDN", "u32", u(red))],
            parts,
        }
    }

    /// Every listed variant: m = 1 … 8 with any segment width, with seg = 1, and with seg = 1
    /// and subgroup loads, each split and packed; m = 4 with an f16 state in the same three forms;
    /// the wide widths of [`DELTA_WIDE_CHECKED`] in the two seg = 1 forms (other wide widths:
    /// [`DeltaKey::parse`]).
    pub fn all() -> Vec<DeltaKey> {
        let forms = [(false, false), (true, false), (true, true)];
        let mut out = Vec::new();
        for packed in [false, true] {
            for (seg1, subgroup) in forms {
                for m in 1..=DELTA_MAX_M {
                    out.push(DeltaKey { m, seg1, subgroup, f16: false, packed });
                }
            }
        }
        out.extend(forms.map(|(seg1, subgroup)| DeltaKey { m: 4, seg1, subgroup, f16: true, packed: false }));
        for subgroup in [false, true] {
            out.extend(DELTA_WIDE_CHECKED.map(|m| DeltaKey { m, seg1: true, subgroup, f16: false, packed: false }));
        }
        out
    }

    /// The key a variant name stands for, for any m ≥ 1 (the inverse of [`DeltaKey::name`]);
    /// `None` for a name of no variant (a wide m without `s1`, f16 at m ≠ 4, m = 0, …).
    pub fn parse(name: &str) -> Option<DeltaKey> {
        let rest = name.strip_prefix('m')?;
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let (num, mut tail) = rest.split_at(digits);
        if num.is_empty() || num.starts_with('0') {
            return None;
        }
        let m: usize = num.parse().ok()?;
        let mut take = |p: &str| match tail.strip_prefix(p) {
            Some(t) => {
                tail = t;
                true
            }
            None => false,
        };
        let seg1 = take("s1");
        let subgroup = seg1 && take("g");
        let f16 = take("h");
        let packed = take("p");
        let key = DeltaKey { m, seg1, subgroup, f16, packed };
        let wide_ok = m <= DELTA_MAX_M || seg1;
        (tail.is_empty() && m <= 1 << 16 && wide_ok && (!f16 || m == 4)).then_some(key)
    }
}

fn delta_variants() -> Vec<Variant> {
    DeltaKey::all().iter().map(DeltaKey::variant).collect()
}

fn delta_named(name: &str) -> Option<Variant> {
    DeltaKey::parse(name).map(|k| k.variant())
}

/// A variant of the compressor shader (`shaders/shortconv.wgsl`): the windowed token-axis
/// kernels read state rows of width `m` ≤ 4 as `Row` and keep windows of `KW` token states: 8
/// with K read from the parameters, or with `k4` (K = 4, every preset) 4 with K a constant
/// (`KFIX`), which halves the registers and turns the per-slot tap tests into constants; `f16`:
/// an f16 saved state (m = 4). Every other entry point ignores these and is launched from
/// [`ConvKey::GENERIC`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvKey {
    pub m: usize,
    pub k4: bool,
    pub f16: bool,
}

impl ConvKey {
    /// The variant the per-element kernels are launched from (they do not use its `Row`).
    pub const GENERIC: ConvKey = ConvKey { m: 1, k4: false, f16: false };

    /// `m4`, `m4k4`, `m4k4h`, …
    pub fn name(&self) -> String {
        format!("m{}{}{}", self.m, if self.k4 { "k4" } else { "" }, if self.f16 { "h" } else { "" })
    }

    fn variant(&self) -> Variant {
        let (kw, kfix) = if self.k4 { (4, 4) } else { (8, 0) };
        Variant {
            name: self.name(),
            consts: vec![("MM", "u32", u(self.m)), ("KW", "u32", u(kw)), ("KFIX", "u32", u(kfix))],
            parts: vec![row_part(self.m), state_part(self.f16)],
        }
    }

    /// m = 1 … 4 with K from the parameters and with K = 4; m = 4 with an f16 state, both ways.
    pub fn all() -> Vec<ConvKey> {
        let mut out = Vec::new();
        for k4 in [false, true] {
            for m in 1..=4 {
                out.push(ConvKey { m, k4, f16: false });
            }
        }
        out.extend([false, true].map(|k4| ConvKey { m: 4, k4, f16: true }));
        out
    }
}

fn shortconv_variants() -> Vec<Variant> {
    ConvKey::all().iter().map(ConvKey::variant).collect()
}

/// A tile configuration of the matmul kernel (`shaders/matmul.wgsl`; `docs/PERF-LOG.md` has the
/// measurements behind them). Every tile computes every output in the same order, so they give
/// bit-identical results.
///
/// - `t16`, `t32`, `t64` (`direct = false`): the workgroup-memory kernel for GPUs. `bm×bn`
///   outputs per workgroup, `tm×tn` per invocation, `bk` the depth of one shared-memory stage.
/// - `r128`, `c64`, `r32`, `r8` (`direct`): the register-block kernels for CPU adapters
///   (llvmpipe): `dx×dy` invocations, each `4·dm × 4·dn` outputs, so `bm = 4·dm·dy` and
///   `bn = 4·dn·dx`. Their `bk`, `tm`, `tn` only keep the module's workgroup-memory entry point
///   well-formed (it is never launched with them). `dx` is 8: llvmpipe runs 8 invocations along
///   x as one SIMD vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulTile {
    pub name: &'static str,
    pub bm: usize,
    pub bn: usize,
    pub bk: usize,
    pub tm: usize,
    pub tn: usize,
    pub direct: bool,
    pub dx: usize,
    pub dy: usize,
    pub dm: usize,
    pub dn: usize,
    /// The name of its A-broadcast (`…g`) variant: register-block tiles only.
    pub subgroup_name: Option<&'static str>,
    /// Workgroup-memory stages feeding register blocks (`w128`, `w64`: the `wm_*` entry points,
    /// 16 × 16 invocations of `dm × dn` 4×4 blocks spaced 64 apart, so `bm = 64·dm`,
    /// `bn = 64·dn`; `dx = dy = 16` make the `mm_ss` fallback the same tile).
    pub staged: bool,
}

const fn tile(
    name: &'static str,
    [bm, bn, bk, tm, tn]: [usize; 5],
    direct: bool,
    [dx, dy, dm, dn]: [usize; 4],
    subgroup_name: Option<&'static str>,
) -> MatmulTile {
    MatmulTile { name, bm, bn, bk, tm, tn, direct, dx, dy, dm, dn, subgroup_name, staged: false }
}

/// A staged tile (see [`MatmulTile::staged`]): `dm × dn` blocks per invocation, K slices of `bk`
/// (at most 512 vec4s of an operand per slice: two load slots per invocation).
const fn staged(name: &'static str, dm: usize, dn: usize, bk: usize) -> MatmulTile {
    let (bm, bn) = (64 * dm, 64 * dn);
    assert!(bk.is_multiple_of(4) && bk * bm / 4 <= 512 && bk * bn / 4 <= 512);
    MatmulTile {
        name,
        bm,
        bn,
        bk,
        tm: bm / 16,
        tn: bn / 16,
        direct: false,
        dx: 16,
        dy: 16,
        dm,
        dn,
        subgroup_name: None,
        staged: true,
    }
}

impl MatmulTile {
    /// Workgroup memory of the staged entry points (two stages of A and B slices), in bytes.
    pub const fn staged_bytes(&self) -> usize {
        2 * self.bk * (self.bm / 4 + self.bn / 4) * 16
    }
}

/// Every matmul tile.
pub const MATMUL_TILES: [MatmulTile; 12] = [
    tile("t16", [16, 16, 16, 1, 1], false, [8, 1, 1, 1], None),
    tile("t32", [32, 32, 16, 2, 2], false, [8, 1, 1, 1], None),
    tile("t64", [64, 64, 16, 4, 4], false, [8, 1, 1, 1], None),
    tile("r128", [128, 128, 8, 8, 8], true, [8, 8, 4, 4], Some("r128g")),
    tile("c64", [128, 64, 8, 8, 4], true, [8, 8, 4, 2], Some("c64g")),
    tile("r32", [32, 128, 8, 2, 8], true, [8, 2, 4, 4], Some("r32g")),
    tile("r8", [8, 128, 8, 1, 8], true, [8, 1, 2, 4], Some("r8g")),
    staged("w128", 2, 2, 8),
    staged("w128k16", 2, 2, 16),
    staged("w64", 1, 1, 8),
    // Half-width tiles: twice the workgroups of `w128` where its grid leaves the card's last
    // wave mostly empty (8192 × 768 products: 384 tiles of 128² for ≈ 264 resident workgroups on
    // an H200); the autotuner weighs them against `w128`.
    staged("w128x64", 2, 1, 8),
    staged("w64x128", 1, 2, 8),
];

/// How a matmul operand is stored and read (`shaders/parts/matmul_{a,b}_*.wgsl`). Every form
/// returns f32 to the same accumulation, so `R16` and `F16` are the f32 kernel on f16-rounded
/// operands (a product of two f16 values is exact in f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MatmulElem {
    /// Stored and read as f32.
    #[default]
    F32,
    /// Stored as f32, rounded to f16 as it is read: an f16 operand whose producer writes f32.
    R16,
    /// Stored as f16 (offsets and strides count f16 elements).
    F16,
}

impl MatmulElem {
    /// `f`, `r`, `h`: the letters of a variant name's operand suffix.
    pub fn code(self) -> char {
        match self {
            MatmulElem::F32 => 'f',
            MatmulElem::R16 => 'r',
            MatmulElem::F16 => 'h',
        }
    }

    fn from_code(c: char) -> Option<MatmulElem> {
        [MatmulElem::F32, MatmulElem::R16, MatmulElem::F16].into_iter().find(|e| e.code() == c)
    }

    /// Bytes per stored element.
    pub fn bytes(self) -> usize {
        if self == MatmulElem::F16 { 2 } else { 4 }
    }

    /// Whether the operand is an f16 operand (rounded or stored): needs SHADER_F16.
    pub fn half(self) -> bool {
        self != MatmulElem::F32
    }

    fn part(self, operand: char) -> &'static str {
        let stem = match self {
            MatmulElem::F32 => "f32",
            MatmulElem::R16 => "r16",
            MatmulElem::F16 => "f16",
        };
        part(&format!("matmul_{operand}_{stem}"))
    }
}

/// A matmul variant: a tile, and for the register-block tiles optionally the A-block broadcast
/// (`…g`: invocation 0 of each subgroup loads A and broadcasts it, through the `mm_*_g` entry
/// points, which need one-dimensional workgroups of DX·DY invocations, x = index % DX); and how
/// each operand is stored and read ([`MatmulElem`]; f32 unless the name ends in `_` and two
/// letters, e.g. `w128_rh`: A rounded to f16, B stored in f16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulKey {
    pub tile: MatmulTile,
    pub subgroup: bool,
    pub a: MatmulElem,
    pub b: MatmulElem,
}

impl MatmulKey {
    /// The tile variant's name: `t64`, `r128`, `r128g`, … (without the operand suffix; the
    /// autotuner and the heuristic choose among these).
    pub fn name(&self) -> &'static str {
        match (self.subgroup, self.tile.subgroup_name) {
            (true, Some(g)) => g,
            _ => self.tile.name,
        }
    }

    /// The shader variant's name: [`MatmulKey::name`], then `_` and the operands' letters
    /// unless both are f32.
    pub fn variant_name(&self) -> String {
        if self.a == MatmulElem::F32 && self.b == MatmulElem::F32 {
            self.name().to_string()
        } else {
            format!("{}_{}{}", self.name(), self.a.code(), self.b.code())
        }
    }

    /// The key of a variant name (with or without the operand suffix).
    pub fn parse(name: &str) -> Option<MatmulKey> {
        let (base, ops) = match name.split_once('_') {
            Some((b, o)) => {
                let mut cs = o.chars();
                let (a, b2) = (MatmulElem::from_code(cs.next()?)?, MatmulElem::from_code(cs.next()?)?);
                if cs.next().is_some() || (a == MatmulElem::F32 && b2 == MatmulElem::F32) {
                    return None;
                }
                (b, (a, b2))
            }
            None => (name, (MatmulElem::F32, MatmulElem::F32)),
        };
        let k = MatmulKey::all().into_iter().find(|k| k.name() == base)?;
        Some(k.with_elems(ops.0, ops.1))
    }

    /// The same tile with operands stored and read as `a` and `b`.
    pub fn with_elems(self, a: MatmulElem, b: MatmulElem) -> MatmulKey {
        MatmulKey { a, b, ..self }
    }

    fn variant(&self) -> Variant {
        let t = &self.tile;
        let consts = [
            ("BM", t.bm),
            ("BN", t.bn),
            ("BK", t.bk),
            ("TM", t.tm),
            ("TN", t.tn),
            ("DIRECT", t.direct as usize),
            ("DX", t.dx),
            ("DY", t.dy),
            ("DM", t.dm),
            ("DN", t.dn),
        ];
        Variant {
            name: self.variant_name(),
            consts: consts.iter().map(|&(n, v)| (n, "u32", u(v))).collect(),
            parts: vec![
                part("matmul_params"),
                part("f16_round"),
                self.a.part('a'),
                self.b.part('b'),
                part(if self.subgroup { "matmul_sg_on" } else { "matmul_sg_off" }),
            ],
        }
    }

    /// Every tile with f32 operands, then the register-block tiles with the broadcast.
    pub fn all() -> Vec<MatmulKey> {
        let f = MatmulElem::F32;
        let plain = MATMUL_TILES.iter().map(|&tile| MatmulKey { tile, subgroup: false, a: f, b: f });
        let sg = MATMUL_TILES.iter().filter(|t| t.subgroup_name.is_some()).map(|&tile| MatmulKey {
            tile,
            subgroup: true,
            a: f,
            b: f,
        });
        plain.chain(sg).collect()
    }

    /// What the shader list (and so the portability check) holds: [`MatmulKey::all`], and each
    /// of them with A rounded and B stored in f16 and the other way round, so every operand part
    /// is compiled with every tile; other combinations are made on request by name.
    pub fn listed() -> Vec<MatmulKey> {
        let (r, h) = (MatmulElem::R16, MatmulElem::F16);
        let all = MatmulKey::all();
        let mut out = all.clone();
        out.extend(all.iter().map(|k| k.with_elems(r, h)));
        out.extend(all.iter().map(|k| k.with_elems(h, r)));
        out
    }
}

fn matmul_variants() -> Vec<Variant> {
    MatmulKey::listed().iter().map(MatmulKey::variant).collect()
}

fn matmul_named(name: &str) -> Option<Variant> {
    MatmulKey::parse(name).map(|k| k.variant())
}

/// A variant of the cooperative-matrix matmul (`shaders/matmul_coop.wgsl`): workgroups of `sg`
/// invocations (the adapter's subgroup size, a power of two in 8 ..= 128) and how A and B are
/// stored and read (both f16 operands: [`MatmulElem::R16`] or [`MatmulElem::F16`]). Named
/// `s32_rr`, `s32_rh`, `s64_hh`, …
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoopKey {
    pub sg: usize,
    pub a: MatmulElem,
    pub b: MatmulElem,
}

impl CoopKey {
    pub fn name(&self) -> String {
        format!("s{}_{}{}", self.sg, self.a.code(), self.b.code())
    }

    pub fn parse(name: &str) -> Option<CoopKey> {
        let (sg, ops) = name.strip_prefix('s')?.split_once('_')?;
        let sg: usize = sg.parse().ok()?;
        let mut cs = ops.chars();
        let (a, b) = (MatmulElem::from_code(cs.next()?)?, MatmulElem::from_code(cs.next()?)?);
        let ok = cs.next().is_none() && sg.is_power_of_two() && (8..=128).contains(&sg) && a.half() && b.half();
        ok.then_some(CoopKey { sg, a, b })
    }

    fn variant(&self) -> Variant {
        Variant {
            name: self.name(),
            consts: vec![("SG", "u32", u(self.sg))],
            parts: vec![
                part("coop_enable"),
                part("coop_staging"),
                part("matmul_params"),
                part("f16_round"),
                self.a.part('a'),
                self.b.part('b'),
            ],
        }
    }

    /// The listed variants: 32-wide (NVIDIA) with every pair of f16 operand forms, 64-wide (AMD).
    pub fn all() -> Vec<CoopKey> {
        let (r, h) = (MatmulElem::R16, MatmulElem::F16);
        let mut out: Vec<CoopKey> = [(r, r), (r, h), (h, r), (h, h)].map(|(a, b)| CoopKey { sg: 32, a, b }).into();
        out.push(CoopKey { sg: 64, a: r, b: h });
        out
    }
}

fn coop_variants() -> Vec<Variant> {
    CoopKey::all().iter().map(CoopKey::variant).collect()
}

fn coop_named(name: &str) -> Option<Variant> {
    CoopKey::parse(name).map(|k| k.variant())
}

/// The variants of the staging check (`shaders/coop_stage_check.wgsl`): the cooperative-matrix
/// kernels' staging without cooperative matrices, one per pair of f16 operand forms (`rr`, `rh`,
/// `hr`, `hh`).
fn stage_check_variants() -> Vec<Variant> {
    let (r, h) = (MatmulElem::R16, MatmulElem::F16);
    [(r, r), (r, h), (h, r), (h, h)]
        .into_iter()
        .map(|(a, b)| Variant {
            name: format!("{}{}", a.code(), b.code()),
            consts: vec![],
            parts: vec![part("coop_staging"), part("matmul_params"), part("f16_round"), a.part('a'), b.part('b')],
        })
        .collect()
}

/// A variant of the RMSNorm shader (`shaders/norm.wgsl`): `team` reads the team size from the
/// parameters; `t1` compiles in teams of one invocation (one row per invocation, the CPU-adapter
/// layout), so the row loops have a constant stride and the team reduction folds away; `t1g`
/// adds the heads backward's entry points with subgroup-shared weight loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormKey {
    Team,
    One { subgroup: bool },
}

impl NormKey {
    pub const fn name(&self) -> &'static str {
        match self {
            NormKey::Team => "team",
            NormKey::One { subgroup: false } => "t1",
            NormKey::One { subgroup: true } => "t1g",
        }
    }

    fn variant(&self) -> Variant {
        let (teamfix, wg, sg) = match self {
            NormKey::Team => (0, 256, false),
            NormKey::One { subgroup } => (1, 64, *subgroup),
        };
        let mut parts = vec![sg_part(sg)];
        if sg {
            parts.push(part("norm_sg_entries"));
        }
        Variant {
            name: self.name().to_string(),
            consts: vec![("TEAMFIX", "u32", u(teamfix)), ("NORM_WG", "u32", u(wg))],
            parts,
        }
    }

    pub fn all() -> Vec<NormKey> {
        vec![NormKey::Team, NormKey::One { subgroup: false }, NormKey::One { subgroup: true }]
    }
}

fn norm_variants() -> Vec<Variant> {
    NormKey::all().iter().map(NormKey::variant).collect()
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
    shader!("attention_rows"),
    shader!("swiglu"),
    shader!("loss"),
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
    translate(label, module, info, false)
}

/// [`translate_all`]; a cooperative-matrix shader ([`Shader::coop`]) to SPIR-V and MSL 2.3 only.
pub fn translate(label: &str, module: &naga::Module, info: &naga::valid::ModuleInfo, coop: bool) -> Result<(), String> {
    use naga::back::{hlsl, msl, spv};
    spv::write_vec(module, info, &spv::Options::default(), None)
        .map_err(|e| format!("{label}: SPIR-V translation failed: {e}"))?;
    let mopts =
        if coop { msl::Options { lang_version: (2, 3), ..Default::default() } } else { msl::Options::default() };
    msl::write_string(module, info, &mopts, &msl::PipelineOptions::default())
        .map_err(|e| format!("{label}: MSL translation failed: {e}"))?;
    if coop {
        return Ok(());
    }
    let mut out = String::new();
    let opts = hlsl::Options { shader_model: hlsl::ShaderModel::V6_0, ..Default::default() };
    hlsl::Writer::new(&mut out, &opts, &hlsl::PipelineOptions::default())
        .write(module, info, None)
        .map_err(|e| format!("{label}: HLSL translation failed: {e}"))?;
    Ok(())
}

/// [`translate_all`], with a back end's panic (naga's writers assert on some constructs, e.g.
/// 64-bit floats in MSL) reported as a failure of that shader instead of aborting the check.
pub fn translate_all_caught(
    label: &str,
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    coop: bool,
) -> Result<(), String> {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| translate(label, module, info, coop)));
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

/// The storage buffers each entry point of a validated module uses (what counts against an
/// adapter's `max_storage_buffers_per_shader_stage`: 8 by WebGPU's default, 10 on Chrome's
/// SwiftShader), by entry point name.
pub fn storage_buffers_per_entry(module: &naga::Module, info: &naga::valid::ModuleInfo) -> Vec<(String, usize)> {
    module
        .entry_points
        .iter()
        .enumerate()
        .map(|(i, ep)| {
            let fi = info.get_entry_point(i);
            let n = module
                .global_variables
                .iter()
                .filter(|(h, g)| matches!(g.space, naga::AddressSpace::Storage { .. }) && !fi[*h].is_empty())
                .count();
            (ep.name.clone(), n)
        })
        .collect()
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
                    if let Err(e) = translate_all_caught(&label, &m, &i, sh.coop) {
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
            Shader { name: "bad_parse", source: "fn main( {", variants: no_variants, named: no_named, coop: false },
            Shader {
                name: "bad_type",
                source: include_str!("../tests/shaders/bad_type.wgsl"),
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
            source: include_str!("../tests/shaders/f64_storage.wgsl"),
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
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/parts");
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
