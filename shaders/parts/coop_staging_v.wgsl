// The staging of `mm_coop128v` (shaders/matmul_coop.wgsl; `soft128v` in
// shaders/coop_stage_check.wgsl runs it without cooperative matrices): the quads of part
// `coop_staging` (`a_quad_raw`, `b_quad_raw`), with three changes against `mm_coop128`'s, each
// a suspect for its 24–34 TFLOP/s on an H200 (docs/GPU.md, run 4):
// * the next slice's quads wait in registers as loaded (`RawA`/`RawB`: f32 for an f32-stored
//   operand) and become f16 only when stashed, after the fragment products: converting them as
//   they arrive can make every invocation wait for its loads before its products;
// * workgroup memory holds quads (`vec4<f16>`: one 8-byte store per quad, where `mm_coop128` makes
//   four 2-byte ones), each operand's slice laid out along its quads — A [QBM][QBK] when its
//   quads run along K (a_cs = 1), else [QBK][QBM]; B [QBK][QBN] when along N, else [QBN][QBK] —
//   rows padded by 8 halves (16 bytes: fragment loads free of bank conflicts), the fragments
//   loaded row-major (`coopLoadT`) or column-major (`coopLoad`) to match, strides in quads;
// * two buffers: the products read one while the stash fills the other, one barrier per slice.
// Workgroup memory: 2 · (10 + 10) KiB, plus the including shader's 8 KiB output scratch.

const VRA: u32 = (QBK + 8u) / 4u;   // quads per row of A laid out [QBM][QBK] (quads along K)
const VCA: u32 = (QBM + 8u) / 4u;   // … of A laid out [QBK][QBM] (quads along M)
const VRB: u32 = (QBN + 8u) / 4u;   // … of B laid out [QBK][QBN] (quads along N)
const VCB: u32 = (QBK + 8u) / 4u;   // … of B laid out [QBN][QBK] (quads along K)
const VBUFA: u32 = max(QBM * VRA, QBK * VCA);   // quads per buffer of A (either layout)
const VBUFB: u32 = max(QBK * VRB, QBN * VCB);

var<workgroup> Va: array<vec4<f16>, 2u * VBUFA>;
var<workgroup> Vb: array<vec4<f16>, 2u * VBUFB>;

// The next slice's quads of this invocation, in flight, as loaded.
var<private> vra: array<RawA, QPT>;
var<private> vrb: array<RawB, QPT>;

// Issues this invocation's loads of the slice at K offset k0 into `vra`/`vrb` (nothing uses them
// until `v_stash`).
fn v_load(k0: u32, t: QTile) {
    for (var i = 0u; i < QPT; i++) {
        vra[i] = a_quad_raw(t.li + i * QNT, k0, t.row0, t.a_base, t.live);
        vrb[i] = b_quad_raw(t.li + i * QNT, k0, t.col0, t.b_base, t.live);
    }
}

// The quads in flight, as f16, into buffer `buf` (0 or 1).
fn v_stash(buf: u32, t: QTile) {
    for (var i = 0u; i < QPT; i++) {
        let v = t.li + i * QNT;
        Va[buf * VBUFA + va_slot(v)] = raw_a_h(vra[i]);
        Vb[buf * VBUFB + vb_slot(v)] = raw_b_h(vrb[i]);
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
