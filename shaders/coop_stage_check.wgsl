// `mm_coop128` without cooperative matrices, to check on any adapter (lavapipe has none) all of
// it but the cooperative-matrix operations themselves: the part `coop_staging` that `mm_coop128`
// and `mm_coop8` share, in `mm_coop128`'s loop — the first slice loaded into registers (as f16),
// then per slice: a barrier, the stash into workgroup memory, a barrier, the next slice's loads.
// * `stage_dump`: the fragment products replaced by a copy of the staged slice to `c` (per tile
//   in the grid's order and slice: QBM·QBK values of A's slice, then QBK·QBN of B's); the test
//   compares every staged element with the operands.
// * `soft128`: the products computed by the invocations from the same workgroup-memory offsets
//   the fragment loads read (a 16 × 16 fragment at `&Qa[o]` with stride QAP is Qa[o + r·QAP + t],
//   as `coopLoadT` reads it: row-major), each subgroup's 4 × 2 fragments of 64 × 32 outputs
//   (a "subgroup" here is 32 consecutive invocations, as `mm_coop128` assumes), written out
//   through the same scratch and `frag_write`: a product, tested against float64.

const QBM: u32 = 128u;
const QBN: u32 = 128u;
const QBK: u32 = 32u;
const QAP: u32 = 40u;
const QBP: u32 = 136u;
const QNT: u32 = 256u;
const QPT: u32 = QBM * QBK / 4u / QNT;
const SLICE: u32 = QBM * QBK + QBK * QBN;

const SG: u32 = 32u;               // a logical subgroup (no subgroup operations here)
const NSG: u32 = QNT / SG;
const QF: u32 = 16u;

@group(0) @binding(3) var<storage, read_write> c: array<f32>;

var<workgroup> Qa: array<f16, QBM * QAP>;
var<workgroup> Qb: array<f16, QBK * QBP>;
var<workgroup> Qc: array<f32, NSG * QF * QF>;

@compute @workgroup_size(QNT)
fn stage_dump(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let t = q_tile(wid, nwg, li);
    let live = t.live;
    let row0 = t.row0;
    let col0 = t.col0;
    let nslices = (p.k + QBK - 1u) / QBK;
    let tile = wid.y * nwg.x + wid.x;
    stage_load(0u, t);
    for (var s = 0u; s < nslices; s++) {
        let k0 = s * QBK;
        stage_step(k0, t);
        if (live) {
            let o = (tile * nslices + s) * SLICE;
            for (var e = li; e < QBM * QBK; e += QNT) {
                c[o + e] = f32(Qa[(e / QBK) * QAP + e % QBK]);
            }
            for (var e = li; e < QBK * QBN; e += QNT) {
                c[o + QBM * QBK + e] = f32(Qb[(e / QBN) * QBP + e % QBN]);
            }
        }
    }
}

// The soft kernels' outputs: each subgroup's 4 × 2 fragments (`acc`, laid out as in `soft128`)
// through its scratch and `frag_write`, as `mm_coop128` writes its accumulators.
fn soft_write(t: QTile, am: u32, bn: u32, acc_in: array<f32, 64>) {
    var acc = acc_in;
    let lane = t.li % SG;
    let sc = (t.li / SG) * QF * QF;
    for (var f = 0u; f < 8u; f++) {
        workgroupBarrier();   // the previous fragment's scratch is read out
        for (var i = 0u; i < 8u; i++) {
            Qc[sc + lane + SG * i] = acc[8u * f + i];
        }
        frag_write(t.row0 + am + (f / 2u) * 16u, t.col0 + bn + (f % 2u) * 16u, sc, lane, t.c_base, t.live);
    }
}

@compute @workgroup_size(QNT)
fn soft128(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let t = q_tile(wid, nwg, li);
    let lane = li % SG;
    let am = ((li / SG) / 4u) * 64u;    // the subgroup's first row and column in the tile
    let bn = ((li / SG) % 4u) * 32u;
    // Fragment f = 2·fi + fj, its element e = lane + SG·i (i < 8) in acc[8·f + i].
    var acc: array<f32, 64>;
    stage_load(0u, t);
    for (var k0 = 0u; k0 < p.k; k0 += QBK) {
        stage_step(k0, t);
        for (var ks = 0u; ks < QBK; ks += 16u) {
            let oa = am * QAP + ks;
            let ob = ks * QBP + bn;
            for (var f = 0u; f < 8u; f++) {
                let fa = oa + (f / 2u) * 16u * QAP;   // the A fragment's first element
                let fb = ob + (f % 2u) * 16u;         // the B fragment's
                for (var i = 0u; i < 8u; i++) {
                    let e = lane + SG * i;
                    var s = acc[8u * f + i];
                    for (var t = 0u; t < 16u; t++) {
                        s = fma(f32(Qa[fa + (e / 16u) * QAP + t]), f32(Qb[fb + t * QBP + e % 16u]), s);
                    }
                    acc[8u * f + i] = s;
                }
            }
        }
    }
    soft_write(t, am, bn, acc);
}

// `soft128v`: `mm_coop128v` (part `coop_staging_v`: raw loads in flight, quads in two buffers,
// one barrier per slice) with its fragment products done by the invocations from the same
// offsets and strides its fragment loads use, read as the cooperative-matrix loads read them
// (strides in quads: element (r, c) of a row-major fragment whose first quad is F with stride S
// is component c % 4 of quad F + r·S + c / 4; of a column-major one, component r % 4 of quad
// F + c·S + r / 4). Its workgroup memory is `mm_coop128v`'s, 48 KiB: past the 32 KiB lavapipe
// lists, which neither lavapipe nor wgpu 30 enforces (this is a test of the arithmetic, never a
// kernel the engine runs).

// Element (r, c) (an M row, a K column) of A's fragment `f` (`va_frag`).
fn va_elem(f: vec2<u32>, r: u32, c: u32) -> f32 {
    if (params.a_cs == 1u) { return f32(Va[f.x + r * f.y + c / 4u][c % 4u]); }
    return f32(Va[f.x + c * f.y + r / 4u][r % 4u]);
}

// Element (r, c) (a K row, an N column) of B's fragment `f` (`vb_frag`).
fn vb_elem(f: vec2<u32>, r: u32, c: u32) -> f32 {
    if (params.b_cs == 1u) { return f32(Vb[f.x + r * f.y + c / 4u][c % 4u]); }
    return f32(Vb[f.x + c * f.y + r / 4u][r % 4u]);
}

@compute @workgroup_size(QNT)
fn soft128v(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let t = q_tile(wid, nwg, li);
    let lane = li % SG;
    let am = ((li / SG) / 4u) * 64u;    // the subgroup's first row and column in the tile
    let bn = ((li / SG) % 4u) * 32u;
    // Fragment f = 2·fi + fj, its element e = lane + SG·i (i < 8) in acc[8·f + i].
    var acc: array<f32, 64>;
    let span = v_span(wid, nwg);
    let q0 = v_load(span.x, t);
    // (Two slices in flight with VDEPTH 2, as `mm_coop128v` keeps them.)
    var q1: VQuads;
    if (VDEPTH == 2u && span.x + QBK < span.y) { q1 = v_load(span.x + QBK, t); }
    v_stash(0u, t, q0);
    workgroupBarrier();
    var buf = 0u;
    for (var k0 = span.x; k0 < span.y; k0 += QBK) {
        let more = k0 + QBK < span.y;
        let q = v_ahead(k0, span.y, t);
        for (var ks = 0u; ks < QBK; ks += 16u) {
            for (var f = 0u; f < 8u; f++) {
                let fa = va_frag(buf, am + (f / 2u) * 16u, ks);
                let fb = vb_frag(buf, ks, bn + (f % 2u) * 16u);
                for (var i = 0u; i < 8u; i++) {
                    let e = lane + SG * i;
                    var s = acc[8u * f + i];
                    for (var u = 0u; u < 16u; u++) {
                        s = fma(va_elem(fa, e / 16u, u), vb_elem(fb, u, e % 16u), s);
                    }
                    acc[8u * f + i] = s;
                }
            }
        }
        if (more) {
            if (VDEPTH == 2u) { v_stash(1u - buf, t, q1); q1 = q; } else { v_stash(1u - buf, t, q); }
        }
        workgroupBarrier();
        buf = 1u - buf;
    }
    soft_write(t, am, bn, acc);
}

// `soft128d`: `mm_coop128d` (part `coop_direct`: fragments straight from the operands, no
// staging) with its fragment products done by the invocations from the same first elements and
// strides its fragment loads use (element (r, c) of a row-major fragment whose first element is
// F with stride S is F + r·S + c; of a column-major one, F + c·S + r), read through the operand
// parts (`lda`, `ldb`), and its output path. The launcher's conditions as for `mm_coop128d`.

// Element (r, c) (an M row, a K column) of A's fragment `f` (`da_frag`).
fn da_elem(f: vec2<u32>, r: u32, c: u32) -> f32 {
    if (params.a_cs == 1u) { return lda(f.x + r * f.y + c); }
    return lda(f.x + c * f.y + r);
}

// Element (r, c) (a K row, an N column) of B's fragment `f` (`db_frag`).
fn db_elem(f: vec2<u32>, r: u32, c: u32) -> f32 {
    if (params.b_cs == 1u) { return ldb(f.x + r * f.y + c); }
    return ldb(f.x + c * f.y + r);
}

@compute @workgroup_size(QNT)
fn soft128d(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let t = q_tile(wid, nwg, li);
    let lane = li % SG;
    let am = ((li / SG) / 4u) * 64u;    // the subgroup's first row and column in the tile
    let bn = ((li / SG) % 4u) * 32u;
    // Fragment f = 2·fi + fj, its element e = lane + SG·i (i < 8) in acc[8·f + i].
    var acc: array<f32, 64>;
    for (var k0 = 0u; k0 < p.k; k0 += 16u) {
        for (var f = 0u; f < 8u; f++) {
            let fa = da_frag(t, am + (f / 2u) * 16u, k0);
            let fb = db_frag(t, k0, bn + (f % 2u) * 16u);
            for (var i = 0u; i < 8u; i++) {
                let e = lane + SG * i;
                var s = acc[8u * f + i];
                for (var u = 0u; u < 16u; u++) {
                    s = fma(da_elem(fa, e / 16u, u), db_elem(fb, u, e % 16u), s);
                }
                acc[8u * f + i] = s;
            }
        }
    }
    soft_write(t, am, bn, acc);
}
