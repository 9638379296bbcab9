// The staging of `mm_coop128v` (shaders/matmul_coop.wgsl; `soft128v` in
// shaders/coop_stage_check.wgsl runs it without cooperative matrices): the quads of part
// `coop_staging` (`a_quad_raw`, `b_quad_raw`), with three changes against `mm_coop128`'s, each
// a suspect for its 24–34 TFLOP/s on an H200 (docs/GPU.md, run 4), and a fourth after run 5:
// * the next slice's quads wait in registers as loaded (`RawA`/`RawB`: f32 for an f32-stored
//   operand) and become f16 only when stashed, after the fragment products: converting them as
//   they arrive can make every invocation wait for its loads before its products;
// * workgroup memory holds quads (`vec4<f16>`: one 8-byte store per quad, where `mm_coop128` makes
//   four 2-byte ones), each operand's slice laid out along its quads — A [QBM][QBK] when its
//   quads run along K (a_cs = 1), else [QBK][QBM]; B [QBK][QBN] when along N, else [QBN][QBK] —
//   rows padded by 8 halves (16 bytes: fragment loads free of bank conflicts), the fragments
//   loaded row-major (`coopLoadT`) or column-major (`coopLoad`) to match, strides in quads;
// * two buffers: the products read one while the stash fills the other, one barrier per slice;
// * (session 70) the quads in flight in named registers, not arrays filled by loops, and a slice
//   that lies whole inside its operand loaded as bare vec4s (see `VQuads`).
// * (session 72) with VDEPTH 2 (`coop128v2`) two slices' loads in flight, not one (`v_ahead`).
// Workgroup memory: 2 · (10 + 10) KiB, plus the including shader's 8 KiB output scratch.

const VRA: u32 = (QBK + 8u) / 4u;   // quads per row of A laid out [QBM][QBK] (quads along K)
const VCA: u32 = (QBM + 8u) / 4u;   // … of A laid out [QBK][QBM] (quads along M)
const VRB: u32 = (QBN + 8u) / 4u;   // … of B laid out [QBK][QBN] (quads along N)
const VCB: u32 = (QBK + 8u) / 4u;   // … of B laid out [QBN][QBK] (quads along K)
const VBUFA: u32 = max(QBM * VRA, QBK * VCA);   // quads per buffer of A (either layout)
const VBUFB: u32 = max(QBK * VRB, QBN * VCB);

var<workgroup> Va: array<vec4<f16>, 2u * VBUFA>;
var<workgroup> Vb: array<vec4<f16>, 2u * VBUFB>;

// The next slice's quads of this invocation, in flight, as loaded: named registers, returned
// by `v_load` and passed to `v_stash` (at most four quads per operand: QPT is 4 with subgroups
// of 32, 2 with 64). Until session 70 they were private arrays filled and drained by loops over
// QPT; on an H200 `coop128v`'s staging alone ran at 38–41 TFLOP/s (1.26 TB/s, run 5), about four
// serialised load round trips a slice — what a driver that keeps such arrays in local memory
// (each load's value stored there before the next load issues) would give.
struct VQuads { a0: RawA, a1: RawA, a2: RawA, a3: RawA, b0: RawB, b1: RawB, b2: RawB, b3: RawB }
const_assert QPT == 1u || QPT == 2u || QPT == 4u;

// The first element of quad `v` of A's slice at K offset k0 (as `a_quad_raw` numbers quads).
fn a_quad_at(v: u32, k0: u32, t: QTile) -> u32 {
    let p = params;
    if (p.a_cs == 1u) {
        return t.a_base + (t.row0 + v / (QBK / 4u)) * p.a_rs + k0 + (v % (QBK / 4u)) * 4u;
    }
    return t.a_base + (t.row0 + (v % (QBM / 4u)) * 4u) * p.a_rs + (k0 + v / (QBM / 4u)) * p.a_cs;
}

// … of B's (as `b_quad_raw` numbers them).
fn b_quad_at(v: u32, k0: u32, t: QTile) -> u32 {
    let p = params;
    if (p.b_cs == 1u) {
        return t.b_base + (k0 + v / (QBN / 4u)) * p.b_rs + t.col0 + (v % (QBN / 4u)) * 4u;
    }
    return t.b_base + (k0 + (v % (QBK / 4u)) * 4u) * p.b_rs + (t.col0 + v / (QBK / 4u)) * p.b_cs;
}

// Whether the slice at k0 of A (`v_a_whole`) or B lies whole inside its operand, along a layout
// with vec4 loads: then every quad is one vec4 load, no bounds (a branch uniform across the
// workgroup); else `a_quad_raw`'s per-quad bounds and scalar loads.
fn v_a_whole(k0: u32, t: QTile) -> bool {
    let p = params;
    let vec4s = (p.vec4s & select(2u, 1u, p.a_cs == 1u)) != 0u;
    return t.live && vec4s && k0 + QBK <= p.k && t.row0 + QBM <= p.m;
}

fn v_b_whole(k0: u32, t: QTile) -> bool {
    let p = params;
    let vec4s = (p.vec4s & select(8u, 4u, p.b_cs == 1u)) != 0u;
    return t.live && vec4s && k0 + QBK <= p.k && t.col0 + QBN <= p.n;
}

// The K range [x, y) workgroup `wid`'s tile sums: all of K, or a causal attention product's
// (`k_span`: ends at multiples of the granule, 128, or at K, so every slice of QBK lies within
// it); none for a workgroup without a tile (a causal score product's tiles past their granule),
// which then writes nothing. Uniform across the workgroup (from `wid` and the parameters alone),
// so the K loops over it keep their barriers and cooperative-matrix operations in uniform
// control flow (not a return: naga wants those operations where no return precedes them).
fn v_span(wid: vec3<u32>, nwg: vec3<u32>) -> vec2<u32> {
    let ti = tile_index(wid, nwg);
    return select(vec2<u32>(0u), k_span(ti.y * QBM), ti.w != 0u);
}

// Issues this invocation's loads of the slice at K offset k0 (nothing uses them until `v_stash`).
fn v_load(k0: u32, t: QTile) -> VQuads {
    var q: VQuads;
    let v = t.li;
    if (v_a_whole(k0, t)) {
        q.a0 = lda4_raw(a_quad_at(v, k0, t) / 4u);
        if (QPT > 1u) { q.a1 = lda4_raw(a_quad_at(v + QNT, k0, t) / 4u); }
        if (QPT > 2u) {
            q.a2 = lda4_raw(a_quad_at(v + 2u * QNT, k0, t) / 4u);
            q.a3 = lda4_raw(a_quad_at(v + 3u * QNT, k0, t) / 4u);
        }
    } else {
        q.a0 = a_quad_raw(v, k0, t.row0, t.a_base, t.live);
        if (QPT > 1u) { q.a1 = a_quad_raw(v + QNT, k0, t.row0, t.a_base, t.live); }
        if (QPT > 2u) {
            q.a2 = a_quad_raw(v + 2u * QNT, k0, t.row0, t.a_base, t.live);
            q.a3 = a_quad_raw(v + 3u * QNT, k0, t.row0, t.a_base, t.live);
        }
    }
    if (v_b_whole(k0, t)) {
        q.b0 = ldb4_raw(b_quad_at(v, k0, t) / 4u);
        if (QPT > 1u) { q.b1 = ldb4_raw(b_quad_at(v + QNT, k0, t) / 4u); }
        if (QPT > 2u) {
            q.b2 = ldb4_raw(b_quad_at(v + 2u * QNT, k0, t) / 4u);
            q.b3 = ldb4_raw(b_quad_at(v + 3u * QNT, k0, t) / 4u);
        }
    } else {
        q.b0 = b_quad_raw(v, k0, t.col0, t.b_base, t.live);
        if (QPT > 1u) { q.b1 = b_quad_raw(v + QNT, k0, t.col0, t.b_base, t.live); }
        if (QPT > 2u) {
            q.b2 = b_quad_raw(v + 2u * QNT, k0, t.col0, t.b_base, t.live);
            q.b3 = b_quad_raw(v + 3u * QNT, k0, t.col0, t.b_base, t.live);
        }
    }
    return q;
}

// The loads the K-loop iteration at k0 issues (uniform across the workgroup): the slice
// VDEPTH slices ahead, where it lies in the span (ending at `end`), else none. With VDEPTH 1
// (`coop128v`) the next slice, stashed after this iteration's products; with VDEPTH 2
// (`coop128v2`) the one after, stashed an iteration later (the kernels keep it in `q1`
// meanwhile), so each slice's loads have two slices' products to arrive in, not one. A kernel
// that runs one workgroup per multiprocessor anyway (`coop128v`'s ≈ 135 registers an
// invocation) pays nothing in occupancy for the second set of registers.
fn v_ahead(k0: u32, end: u32, t: QTile) -> VQuads {
    var q: VQuads;
    let k = k0 + VDEPTH * QBK;
    if (k < end) { q = v_load(k, t); }
    return q;
}

// The quads in flight, as f16, into buffer `buf` (0 or 1).
fn v_stash(buf: u32, t: QTile, q: VQuads) {
    let v = t.li;
    let oa = buf * VBUFA;
    let ob = buf * VBUFB;
    Va[oa + va_slot(v)] = raw_a_h(q.a0);
    Vb[ob + vb_slot(v)] = raw_b_h(q.b0);
    if (QPT > 1u) {
        Va[oa + va_slot(v + QNT)] = raw_a_h(q.a1);
        Vb[ob + vb_slot(v + QNT)] = raw_b_h(q.b1);
    }
    if (QPT > 2u) {
        Va[oa + va_slot(v + 2u * QNT)] = raw_a_h(q.a2);
        Vb[ob + vb_slot(v + 2u * QNT)] = raw_b_h(q.b2);
        Va[oa + va_slot(v + 3u * QNT)] = raw_a_h(q.a3);
        Vb[ob + vb_slot(v + 3u * QNT)] = raw_b_h(q.b3);
    }
}

// Where quad `v` of A's slice goes in a buffer: row v / (QBK/4) (an M index), quad v % (QBK/4)
// along K when a_cs = 1; else row v / (QBM/4) (a K index), quad v % (QBM/4) along M.
fn va_slot(v: u32) -> u32 {
    if (params.a_cs == 1u) { return (v / (QBK / 4u)) * VRA + v % (QBK / 4u); }
    return (v / (QBM / 4u)) * VCA + v % (QBM / 4u);
}

// B's: row v / (QBN/4) (a K index), quad along N when b_cs = 1; else row v / (QBK/4) (an N
// index), quad along K.
fn vb_slot(v: u32) -> u32 {
    if (params.b_cs == 1u) { return (v / (QBN / 4u)) * VRB + v % (QBN / 4u); }
    return (v / (QBK / 4u)) * VCB + v % (QBK / 4u);
}

// The first quad of A's 16 × 16 fragment (rows r.., K columns ks.. of the slice, r and ks
// multiples of 16) in buffer `buf`: laid out [QBM][QBK] (`_r`: loaded row-major, stride VRA) or
// [QBK][QBM] (`_c`: column-major, stride VCA; the fragment's 16 rows are 4 consecutive quads).
// The kernel calls the one its layout needs with the stride as a constant (what a driver needs
// to see to load fragments whole); `va_frag` picks by the layout (the soft check).
fn va_off_r(buf: u32, r: u32, ks: u32) -> u32 { return buf * VBUFA + r * VRA + ks / 4u; }
fn va_off_c(buf: u32, r: u32, ks: u32) -> u32 { return buf * VBUFA + ks * VCA + r / 4u; }

// B's fragment (K rows ks.., columns c..): [QBK][QBN] (`_r`, stride VRB) or [QBN][QBK] (`_c`,
// stride VCB).
fn vb_off_r(buf: u32, ks: u32, c: u32) -> u32 { return buf * VBUFB + ks * VRB + c / 4u; }
fn vb_off_c(buf: u32, ks: u32, c: u32) -> u32 { return buf * VBUFB + c * VCB + ks / 4u; }

// `vec2(first quad, stride)` of A's and B's fragments in this product's layouts.
fn va_frag(buf: u32, r: u32, ks: u32) -> vec2<u32> {
    if (params.a_cs == 1u) { return vec2<u32>(va_off_r(buf, r, ks), VRA); }
    return vec2<u32>(va_off_c(buf, r, ks), VCA);
}

fn vb_frag(buf: u32, ks: u32, c: u32) -> vec2<u32> {
    if (params.b_cs == 1u) { return vec2<u32>(vb_off_r(buf, ks, c), VRB); }
    return vec2<u32>(vb_off_c(buf, ks, c), VCB);
}
