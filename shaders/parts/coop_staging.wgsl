// The cooperative-matrix kernels' staging (`mm_coop128` in shaders/matmul_coop.wgsl, `mm_coop8`
// in shaders/matmul_coop8.wgsl): a QBM × QBK slice of A and a QBK × QBN slice of B, four
// elements (a quad) at a time, contiguous along each operand's unit stride (one vec4 load where
// `params.vec4s` says the layout is aligned; scalar loads at the edges and for other layouts),
// into the workgroup arrays `Qa` ([QBM][QAP], row-major) and `Qb` ([QBK][QBP]) as f16. The
// including shader defines the tile (QBM, QBN, QBK), the invocations per workgroup (QNT), the
// quads each stages per operand and slice (QPT = QBM·QBK / 4 / QNT), the padded row strides
// (QAP, QBP) and the arrays; quads are numbered 0 ≤ v < QBM·QBK/4 (= QBK·QBN/4: the kernels' tiles are square).
// `frag_write` takes an accumulator fragment (QF × QF, stored row-major in a subgroup's scratch
// of the array `Qc`) to C; the including shader defines QF, Qc, SG and `c`.

// The next slice's quads of this invocation, in flight while the current one is multiplied, held
// as f16 (half the registers of f32, which decide how many workgroups an SM holds).
var<private> qra: array<vec4<f16>, QPT>;
var<private> qrb: array<vec4<f16>, QPT>;

// A workgroup's tile (its first row and column, its operands' and C's batch offsets, whether it
// has one) and the invocation's index.
struct QTile { row0: u32, col0: u32, a_base: u32, b_base: u32, c_base: u32, live: bool, li: u32 }

// The tile of workgroup `wid` (the grid's order: `tile_index`) and invocation `li`.
fn q_tile(wid: vec3<u32>, nwg: vec3<u32>, li: u32) -> QTile {
    let p = params;
    let ti = tile_index(wid, nwg);
    return QTile(ti.y * QBM, ti.x * QBN, p.a_off + batch_off(ti.z, p.a_bs, p.a_os),
                 p.b_off + batch_off(ti.z, p.b_bs, p.b_os), p.c_off + batch_off(ti.z, p.c_bs, p.c_os),
                 ti.w != 0u, li);
}

// Issues this invocation's loads of the slice at K offset k0 into `qra`/`qrb`.
fn stage_load(k0: u32, t: QTile) {
    for (var i = 0u; i < QPT; i++) {
        qra[i] = a_quad(t.li + i * QNT, k0, t.row0, t.a_base, t.live);
        qrb[i] = b_quad(t.li + i * QNT, k0, t.col0, t.b_base, t.live);
    }
}

// One step of the kernels' K loop, after `stage_load(0u, t)`: the slice at k0 (in registers) into
// `Qa`/`Qb` between two barriers (the first: the previous slice's fragment loads are done), then
// the next slice's loads issued. Called in uniform control flow by every invocation.
fn stage_step(k0: u32, t: QTile) {
    workgroupBarrier();
    for (var i = 0u; i < QPT; i++) {
        a_stash(t.li + i * QNT, qra[i]);
        b_stash(t.li + i * QNT, qrb[i]);
    }
    workgroupBarrier();
    if (k0 + QBK < params.k) {
        stage_load(k0 + QBK, t);
    }
}

// Quad `v` (0 ≤ v < QBM·QBK/4) of A's slice at K offset k0: four consecutive elements along A's
// unit stride (along K when a_cs = 1, else along M), zeros past the edges, as stored (`RawA`: f32
// or f16; `raw_a_h` makes it f16).
fn a_quad_raw(v: u32, k0: u32, row0: u32, base: u32, live: bool) -> RawA {
    let p = params;
    var out = RawA();
    if (p.a_cs == 1u) {
        let gi = row0 + v / (QBK / 4u);
        let gk = k0 + (v % (QBK / 4u)) * 4u;
        let o = base + gi * p.a_rs + gk;
        if (live && gi < p.m) {
            if ((p.vec4s & 1u) != 0u && gk + 3u < p.k) {
                out = lda4_raw(o / 4u);
            } else {
                for (var j = 0u; j < 4u; j++) {
                    if (gk + j < p.k) { out[j] = lda_raw(o + j); }
                }
            }
        }
    } else {
        let gk = k0 + v / (QBM / 4u);
        let gi = row0 + (v % (QBM / 4u)) * 4u;
        let o = base + gi * p.a_rs + gk * p.a_cs;
        if (live && gk < p.k) {
            if ((p.vec4s & 2u) != 0u && gi + 3u < p.m) {
                out = lda4_raw(o / 4u);
            } else {
                for (var j = 0u; j < 4u; j++) {
                    if (gi + j < p.m) { out[j] = lda_raw(o + j * p.a_rs); }
                }
            }
        }
    }
    return out;
}

// Quad `v` of B's slice: along N when b_cs = 1, else along K.
fn b_quad_raw(v: u32, k0: u32, col0: u32, base: u32, live: bool) -> RawB {
    let p = params;
    var out = RawB();
    if (p.b_cs == 1u) {
        let gk = k0 + v / (QBN / 4u);
        let gj = col0 + (v % (QBN / 4u)) * 4u;
        let o = base + gk * p.b_rs + gj;
        if (live && gk < p.k) {
            if ((p.vec4s & 4u) != 0u && gj + 3u < p.n) {
                out = ldb4_raw(o / 4u);
            } else {
                for (var j = 0u; j < 4u; j++) {
                    if (gj + j < p.n) { out[j] = ldb_raw(o + j); }
                }
            }
        }
    } else {
        let gj = col0 + v / (QBK / 4u);
        let gk = k0 + (v % (QBK / 4u)) * 4u;
        let o = base + gk * p.b_rs + gj * p.b_cs;
        if (live && gj < p.n) {
            if ((p.vec4s & 8u) != 0u && gk + 3u < p.k) {
                out = ldb4_raw(o / 4u);
            } else {
                for (var j = 0u; j < 4u; j++) {
                    if (gk + j < p.k) { out[j] = ldb_raw(o + j * p.b_rs); }
                }
            }
        }
    }
    return out;
}

// The same quads as f16 (converted as they arrive: `mm_coop128`, `mm_coop8`).
fn a_quad(v: u32, k0: u32, row0: u32, base: u32, live: bool) -> vec4<f16> {
    return raw_a_h(a_quad_raw(v, k0, row0, base, live));
}

fn b_quad(v: u32, k0: u32, col0: u32, base: u32, live: bool) -> vec4<f16> {
    return raw_b_h(b_quad_raw(v, k0, col0, base, live));
}

// Quad `v` into workgroup memory.
fn a_stash(v: u32, h: vec4<f16>) {
    if (params.a_cs == 1u) {
        let o = (v / (QBK / 4u)) * QAP + (v % (QBK / 4u)) * 4u;
        Qa[o] = h.x; Qa[o + 1u] = h.y; Qa[o + 2u] = h.z; Qa[o + 3u] = h.w;
    } else {
        let o = (v % (QBM / 4u)) * 4u * QAP + v / (QBM / 4u);
        Qa[o] = h.x; Qa[o + QAP] = h.y; Qa[o + 2u * QAP] = h.z; Qa[o + 3u * QAP] = h.w;
    }
}

fn b_stash(v: u32, h: vec4<f16>) {
    if (params.b_cs == 1u) {
        let o = (v / (QBN / 4u)) * QBP + (v % (QBN / 4u)) * 4u;
        Qb[o] = h.x; Qb[o + 1u] = h.y; Qb[o + 2u] = h.z; Qb[o + 3u] = h.w;
    } else {
        let o = (v % (QBK / 4u)) * 4u * QBP + v / (QBK / 4u);
        Qb[o] = h.x; Qb[o + QBP] = h.y; Qb[o + 2u * QBP] = h.z; Qb[o + 3u * QBP] = h.w;
    }
}

// One accumulator fragment (rows r0.., columns c0.. of C), just stored in the subgroup's scratch
// at `sc` (QF × QF, row-major), to C: bounds, alpha, accumulation. Called in uniform control flow
// by every subgroup (the barriers); the fragment stays in the entry point (no cooperative matrix
// crosses a function boundary).
fn frag_write(r0: u32, c0: u32, sc: u32, lane: u32, c_base: u32, live: bool) {
    let p = params;
    workgroupBarrier();
    for (var e = lane; e < QF * QF; e += SG) {
        let gi = r0 + e / QF;
        let gj = c0 + e % QF;
        if (live && gi < p.m && gj < p.n) {
            let idx = c_base + gi * p.c_rs + gj;
            var out = p.alpha * Qc[sc + e];
            if (p.accumulate != 0u) { out = out + c[idx]; }
            c[idx] = out;
        }
    }
    workgroupBarrier();
}
