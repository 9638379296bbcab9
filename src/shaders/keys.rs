//! The typed keys of the shaders' variants: the delta write's value widths and state forms, the
//! compressor's, the matmul's tiles and operand forms, the cooperative-matrix kernels' and
//! RMSNorm's; each names its variant and says which constants and parts it puts in front.

use super::{Variant, part, row_part, sg_part, state_part, u};

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

pub(super) fn delta_variants() -> Vec<Variant> {
    DeltaKey::all().iter().map(DeltaKey::variant).collect()
}

pub(super) fn delta_named(name: &str) -> Option<Variant> {
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

pub(super) fn shortconv_variants() -> Vec<Variant> {
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
    /// Staged tiles only: each subgroup of 32 invocations computes a 4 × 8 block of the
    /// invocation grid (CUTLASS's warp tiles) instead of two of its rows of 16 (`WT` = 1 in the
    /// shader): per K step a subgroup reads 4 + 8 vec4s of the stages where two rows read 2 + 16,
    /// a third less workgroup-memory traffic. The same outputs summed in the same order.
    pub warp_tiles: bool,
}

const fn tile(
    name: &'static str,
    [bm, bn, bk, tm, tn]: [usize; 5],
    direct: bool,
    [dx, dy, dm, dn]: [usize; 4],
    subgroup_name: Option<&'static str>,
) -> MatmulTile {
    MatmulTile { name, bm, bn, bk, tm, tn, direct, dx, dy, dm, dn, subgroup_name, staged: false, warp_tiles: false }
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
        warp_tiles: false,
    }
}

/// A staged tile whose subgroups compute 4 × 8 blocks of invocations ([`MatmulTile::warp_tiles`]).
const fn staged_warp(name: &'static str, dm: usize, dn: usize, bk: usize) -> MatmulTile {
    MatmulTile { name, warp_tiles: true, ..staged(name, dm, dn, bk) }
}

impl MatmulTile {
    /// Workgroup memory of the staged entry points (two stages of A and B slices), in bytes.
    pub const fn staged_bytes(&self) -> usize {
        2 * self.bk * (self.bm / 4 + self.bn / 4) * 16
    }
}

/// Every matmul tile.
pub const MATMUL_TILES: [MatmulTile; 13] = [
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
    // `w128` with CUTLASS's warp tiles: a third less workgroup-memory traffic per K step
    // (docs/GPU.md, "Prediction for the staged tiles' halves"); the autotuner weighs it.
    staged_warp("w128w", 2, 2, 8),
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
            ("WT", t.warp_tiles as usize),
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

pub(super) fn matmul_variants() -> Vec<Variant> {
    MatmulKey::listed().iter().map(MatmulKey::variant).collect()
}

pub(super) fn matmul_named(name: &str) -> Option<Variant> {
    MatmulKey::parse(name).map(|k| k.variant())
}

/// A variant of the cooperative-matrix matmul (`shaders/matmul_coop.wgsl`): workgroups of `sg`
/// invocations (the adapter's subgroup size, a power of two in 8 ..= 128) and how A and B are
/// stored and read (both f16 operands: [`MatmulElem::R16`] or [`MatmulElem::F16`]); with `q16`
/// an f32-stored ([`MatmulElem::R16`]) operand's quads in flight are held as f16, converted as
/// they arrive (parts `matmul_{a,b}_r16q`, variant `coop128vq`), where without it they stay f32
/// until stashed; with `depth2` `mm_coop128v` keeps two slices' loads in flight, not one
/// (`VDEPTH` = 2, variant `coop128v2`). Named `s32_rr`, `s32_rh`, `s64_hh`, `s32_rhq`, `s32_rh2`, …
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoopKey {
    pub sg: usize,
    pub a: MatmulElem,
    pub b: MatmulElem,
    pub q16: bool,
    pub depth2: bool,
}

impl CoopKey {
    pub fn name(&self) -> String {
        format!("s{}_{}", self.sg, staging_name(self.a, self.b, self.q16, self.depth2))
    }

    pub fn parse(name: &str) -> Option<CoopKey> {
        let (sg, ops) = name.strip_prefix('s')?.split_once('_')?;
        let sg: usize = sg.parse().ok()?;
        let (ops, depth2) = match ops.strip_suffix('2') {
            Some(o) => (o, true),
            None => (ops, false),
        };
        let (ops, q16) = match ops.strip_suffix('q') {
            Some(o) => (o, true),
            None => (ops, false),
        };
        let mut cs = ops.chars();
        let (a, b) = (MatmulElem::from_code(cs.next()?)?, MatmulElem::from_code(cs.next()?)?);
        let ok = cs.next().is_none() && sg.is_power_of_two() && (8..=128).contains(&sg) && a.half() && b.half();
        ok.then_some(CoopKey { sg, a, b, q16, depth2 })
    }

    fn variant(&self) -> Variant {
        Variant {
            name: self.name(),
            consts: vec![("SG", "u32", u(self.sg)), ("VDEPTH", "u32", u(1 + self.depth2 as usize))],
            parts: vec![
                part("coop_enable"),
                part("coop_staging"),
                part("coop_staging_v"),
                part("coop_direct"),
                part("matmul_params"),
                part("f16_round"),
                staged_part(self.a, 'a', self.q16),
                staged_part(self.b, 'b', self.q16),
                // `mm_coop128d`'s fragment loads need A and B stored in f16; stubs elsewhere.
                part(if self.a == MatmulElem::F16 && self.b == MatmulElem::F16 {
                    "coop_direct_hh"
                } else {
                    "coop_direct_none"
                }),
            ],
        }
    }

    /// The listed variants: 32-wide (NVIDIA) with every pair of f16 operand forms, 64-wide (AMD),
    /// and 32-wide with f16 quads in flight, or with two slices in flight, for the pairs the
    /// benchmark and training use (`rr`, `rh`).
    pub fn all() -> Vec<CoopKey> {
        let (r, h) = (MatmulElem::R16, MatmulElem::F16);
        let key = |sg, a, b| CoopKey { sg, a, b, q16: false, depth2: false };
        let mut out: Vec<CoopKey> = [(r, r), (r, h), (h, r), (h, h)].map(|(a, b)| key(32, a, b)).into();
        out.push(key(64, r, h));
        out.extend([(r, r), (r, h)].map(|(a, b)| CoopKey { q16: true, ..key(32, a, b) }));
        out.extend([(r, r), (r, h)].map(|(a, b)| CoopKey { depth2: true, ..key(32, a, b) }));
        out
    }
}

/// The part of an operand stored as `e` for the cooperative-matrix staging: with `q16` an
/// f32-stored one's quads become f16 as they arrive (`matmul_{a,b}_r16q`).
fn staged_part(e: MatmulElem, operand: char, q16: bool) -> &'static str {
    if q16 && e == MatmulElem::R16 { part(&format!("matmul_{operand}_r16q")) } else { e.part(operand) }
}

pub(super) fn coop_variants() -> Vec<Variant> {
    CoopKey::all().iter().map(CoopKey::variant).collect()
}

pub(super) fn coop_named(name: &str) -> Option<Variant> {
    CoopKey::parse(name).map(|k| k.variant())
}

/// The operand forms and staging flags of a cooperative-matrix variant, as its name ends
/// (`rh`, `rrq`, `hh2`, …): [`CoopKey::name`] after the subgroup width, and the staging check's
/// variants ([`stage_check_variants`]) whole, so that the two name a staging alike.
pub fn staging_name(a: MatmulElem, b: MatmulElem, q16: bool, depth2: bool) -> String {
    format!("{}{}{}{}", a.code(), b.code(), if q16 { "q" } else { "" }, if depth2 { "2" } else { "" })
}

/// The variants of the staging check (`shaders/coop_stage_check.wgsl`): the cooperative-matrix
/// kernels' staging without cooperative matrices, one per pair of f16 operand forms (`rr`, `rh`,
/// `hr`, `hh`).
pub(super) fn stage_check_variants() -> Vec<Variant> {
    let (r, h) = (MatmulElem::R16, MatmulElem::F16);
    let plain = [(r, r), (r, h), (h, r), (h, h)].map(|(a, b)| (a, b, false, false));
    // (… with f16 quads in flight, `rrq`, `rhq`, `hrq`: `coop128vq`'s staging; with two slices
    // in flight, `rr2`, `rh2`, `hr2`, `hh2`: `coop128v2`'s.)
    let q16 = [(r, r), (r, h), (h, r)].map(|(a, b)| (a, b, true, false));
    let depth2 = plain.map(|(a, b, _, _)| (a, b, false, true));
    plain
        .into_iter()
        .chain(q16)
        .chain(depth2)
        .map(|(a, b, q, d2)| Variant {
            name: staging_name(a, b, q, d2),
            consts: vec![("VDEPTH", "u32", u(1 + d2 as usize))],
            parts: vec![
                part("coop_staging"),
                part("coop_staging_v"),
                part("coop_direct"),
                part("matmul_params"),
                part("f16_round"),
                staged_part(a, 'a', q),
                staged_part(b, 'b', q),
            ],
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

pub(super) fn norm_variants() -> Vec<Variant> {
    NormKey::all().iter().map(NormKey::variant).collect()
}
