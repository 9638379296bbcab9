// Batched, strided matrix multiply on cooperative matrices (tensor cores): C[b] = alpha · op(A[b]) ·
// op(B[b]) (+ C[b]) with f16 operands and f32 accumulation, 16×16×16 fragments at subgroup scope
// (`coop_mat16x16<f16, A|B>`, `coop_mat16x16<f32, C>`). The same parameters, layouts and grid as
// `shaders/matmul.wgsl` (part `matmul_params`), the same operand parts (`matmul_{a,b}_*`: A and B
// read as f32, rounded to f16 or stored in f16), so one launcher fills both.
//
// A workgroup is SG invocations (the adapter's subgroup size: the x size of a subgroup-scope
// cooperative-matrix workgroup must be a multiple of it) and owns a BM × BN = 32 × 32 tile of C:
// 2 × 2 accumulator fragments. For each K slice of 16, the invocations stage A's 32 × 16 and B's
// 16 × 32 slice in workgroup memory as f16 (any strides; zeros past the edges), then every
// fragment product runs on the cooperative matrices. At the end the fragments go through
// workgroup memory to C (bounds, alpha, accumulation). Every cooperative operation sits in
// uniform control flow: a workgroup past the grid's end (`live` false) does not return early but
// loads nothing and stores nothing.
//
// Not bit-identical to the other matmul forms (the hardware's summation order); held to the
// float64 product of the f16-rounded operands at an f32-accumulation tolerance. Made only where
// the adapter lists 16×16×16 f16 → f32 and a self-test at device creation passes
// (`src/kernels/matmul/coop.rs`).

const BM: u32 = 32u;
const BN: u32 = 32u;
const BK: u32 = 16u;

@group(0) @binding(3) var<storage, read_write> c: array<f32>;

var<workgroup> As: array<f16, BM * BK>;   // [BM][BK], row-major
var<workgroup> Bs: array<f16, BK * BN>;   // [BK][BN], row-major
var<workgroup> Cs: array<f32, BM * BN>;   // [BM][BN], row-major

@compute @workgroup_size(SG)
fn mm_coop(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let ti = tile_index(wid, nwg);
    let live = ti.w != 0u;
    let row0 = ti.y * BM;
    let col0 = ti.x * BN;
    let a_base = p.a_off + batch_off(ti.z, p.a_bs, p.a_os);
    let b_base = p.b_off + batch_off(ti.z, p.b_bs, p.b_os);
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        for (var e = li; e < BM * BK; e += SG) {
            let gi = row0 + e / BK;
            let gk = k0 + e % BK;
            var v = 0.0;
            if (live && gi < p.m && gk < p.k) { v = lda(a_base + gi * p.a_rs + gk * p.a_cs); }
            As[e] = f16(v);
        }
        for (var e = li; e < BK * BN; e += SG) {
            let gk = k0 + e / BN;
            let gj = col0 + e % BN;
            var v = 0.0;
            if (live && gk < p.k && gj < p.n) { v = ldb(b_base + gk * p.b_rs + gj * p.b_cs); }
            Bs[e] = f16(v);
        }
        workgroupBarrier();
        let a0 = coopLoadT<coop_mat16x16<f16, A>>(&As[0], BK);
        let a1 = coopLoadT<coop_mat16x16<f16, A>>(&As[16u * BK], BK);
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[0], BN);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[16], BN);
        c00 = coopMultiplyAdd(a0, b0, c00);
        c01 = coopMultiplyAdd(a0, b1, c01);
        c10 = coopMultiplyAdd(a1, b0, c10);
        c11 = coopMultiplyAdd(a1, b1, c11);
        workgroupBarrier();
    }
    // (Offsets and stride as lets: naga 30's SPIR-V writer needs the store's arguments emitted
    // before the store.)
    let s = BN;
    let o01 = 16u;
    let o10 = 16u * BN;
    let o11 = 16u * BN + 16u;
    coopStoreT(c00, &Cs[0], s);
    coopStoreT(c01, &Cs[o01], s);
    coopStoreT(c10, &Cs[o10], s);
    coopStoreT(c11, &Cs[o11], s);
    workgroupBarrier();
    let c_base = p.c_off + batch_off(ti.z, p.c_bs, p.c_os);
    for (var e = li; e < BM * BN; e += SG) {
        let gi = row0 + e / BN;
        let gj = col0 + e % BN;
        if (live && gi < p.m && gj < p.n) {
            let idx = c_base + gi * p.c_rs + gj;
            var out = p.alpha * Cs[e];
            if (p.accumulate != 0u) { out = out + c[idx]; }
            c[idx] = out;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `mm_coop4`: the same with 4 × 4 fragments per workgroup (64 × 64 outputs): four times the
// tensor-core work per staged slice (the variant `coop64`; `mm_coop` is the default).

const BM4: u32 = 64u;
const BN4: u32 = 64u;

var<workgroup> As4: array<f16, BM4 * BK>;   // [BM4][BK], row-major
var<workgroup> Bs4: array<f16, BK * BN4>;   // [BK][BN4], row-major
var<workgroup> Cs4: array<f32, BM4 * BN4>;  // [BM4][BN4], row-major

@compute @workgroup_size(SG)
fn mm_coop4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let ti = tile_index(wid, nwg);
    let live = ti.w != 0u;
    let row0 = ti.y * BM4;
    let col0 = ti.x * BN4;
    let a_base = p.a_off + batch_off(ti.z, p.a_bs, p.a_os);
    let b_base = p.b_off + batch_off(ti.z, p.b_bs, p.b_os);
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>();
    var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>();
    var c13 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c22 = coop_mat16x16<f32, C>();
    var c23 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
    var c32 = coop_mat16x16<f32, C>();
    var c33 = coop_mat16x16<f32, C>();
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        for (var e = li; e < BM4 * BK; e += SG) {
            let gi = row0 + e / BK;
            let gk = k0 + e % BK;
            var v = 0.0;
            if (live && gi < p.m && gk < p.k) { v = lda(a_base + gi * p.a_rs + gk * p.a_cs); }
            As4[e] = f16(v);
        }
        for (var e = li; e < BK * BN4; e += SG) {
            let gk = k0 + e / BN4;
            let gj = col0 + e % BN4;
            var v = 0.0;
            if (live && gk < p.k && gj < p.n) { v = ldb(b_base + gk * p.b_rs + gj * p.b_cs); }
            Bs4[e] = f16(v);
        }
        workgroupBarrier();
        let a0 = coopLoadT<coop_mat16x16<f16, A>>(&As4[0u * BK], BK);
        let a1 = coopLoadT<coop_mat16x16<f16, A>>(&As4[16u * BK], BK);
        let a2 = coopLoadT<coop_mat16x16<f16, A>>(&As4[32u * BK], BK);
        let a3 = coopLoadT<coop_mat16x16<f16, A>>(&As4[48u * BK], BK);
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&Bs4[0u], BN4);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&Bs4[16u], BN4);
        let b2 = coopLoadT<coop_mat16x16<f16, B>>(&Bs4[32u], BN4);
        let b3 = coopLoadT<coop_mat16x16<f16, B>>(&Bs4[48u], BN4);
        c00 = coopMultiplyAdd(a0, b0, c00);
        c01 = coopMultiplyAdd(a0, b1, c01);
        c02 = coopMultiplyAdd(a0, b2, c02);
        c03 = coopMultiplyAdd(a0, b3, c03);
        c10 = coopMultiplyAdd(a1, b0, c10);
        c11 = coopMultiplyAdd(a1, b1, c11);
        c12 = coopMultiplyAdd(a1, b2, c12);
        c13 = coopMultiplyAdd(a1, b3, c13);
        c20 = coopMultiplyAdd(a2, b0, c20);
        c21 = coopMultiplyAdd(a2, b1, c21);
        c22 = coopMultiplyAdd(a2, b2, c22);
        c23 = coopMultiplyAdd(a2, b3, c23);
        c30 = coopMultiplyAdd(a3, b0, c30);
        c31 = coopMultiplyAdd(a3, b1, c31);
        c32 = coopMultiplyAdd(a3, b2, c32);
        c33 = coopMultiplyAdd(a3, b3, c33);
        workgroupBarrier();
    }
    let s = BN4;
    let o00 = 0u * BN4 + 0u;
    let o01 = 0u * BN4 + 16u;
    let o02 = 0u * BN4 + 32u;
    let o03 = 0u * BN4 + 48u;
    let o10 = 16u * BN4 + 0u;
    let o11 = 16u * BN4 + 16u;
    let o12 = 16u * BN4 + 32u;
    let o13 = 16u * BN4 + 48u;
    let o20 = 32u * BN4 + 0u;
    let o21 = 32u * BN4 + 16u;
    let o22 = 32u * BN4 + 32u;
    let o23 = 32u * BN4 + 48u;
    let o30 = 48u * BN4 + 0u;
    let o31 = 48u * BN4 + 16u;
    let o32 = 48u * BN4 + 32u;
    let o33 = 48u * BN4 + 48u;
    coopStoreT(c00, &Cs4[o00], s);
    coopStoreT(c01, &Cs4[o01], s);
    coopStoreT(c02, &Cs4[o02], s);
    coopStoreT(c03, &Cs4[o03], s);
    coopStoreT(c10, &Cs4[o10], s);
    coopStoreT(c11, &Cs4[o11], s);
    coopStoreT(c12, &Cs4[o12], s);
    coopStoreT(c13, &Cs4[o13], s);
    coopStoreT(c20, &Cs4[o20], s);
    coopStoreT(c21, &Cs4[o21], s);
    coopStoreT(c22, &Cs4[o22], s);
    coopStoreT(c23, &Cs4[o23], s);
    coopStoreT(c30, &Cs4[o30], s);
    coopStoreT(c31, &Cs4[o31], s);
    coopStoreT(c32, &Cs4[o32], s);
    coopStoreT(c33, &Cs4[o33], s);
    workgroupBarrier();
    let c_base = p.c_off + batch_off(ti.z, p.c_bs, p.c_os);
    for (var e = li; e < BM4 * BN4; e += SG) {
        let gi = row0 + e / BN4;
        let gj = col0 + e % BN4;
        if (live && gi < p.m && gj < p.n) {
            let idx = c_base + gi * p.c_rs + gj;
            var out = p.alpha * Cs4[e];
            if (p.accumulate != 0u) { out = out + c[idx]; }
            c[idx] = out;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `mm_coop128` (variant `coop128`): a 128 × 128 tile of C per workgroup of 8 subgroups, the shape
// of the tensor-core GEMMs that reach the hardware (vk_cooperative_matrix_perf, CUTLASS's
// warp-level kernels) where `mm_coop`'s single subgroup per 32 × 32 tile ran at 2.6 TFLOP/s on an
// H200 (docs/GPU.md, run 3). What changes:
// * 8 subgroups (2 along M × 4 along N), each owning 64 × 32 outputs: 4 × 2 accumulator
//   fragments, 8 products per 6 fragment loads (`mm_coop`: 4 per 4);
// * K slices of 32 staged by all 256 invocations, four elements (a quad) at a time, contiguous
//   in memory along the operand's unit stride (one vec4 load where the launcher found the
//   layout aligned, `params.vec4s`; scalar loads at the edges and for other layouts), each
//   converted to f16 once;
// * the next slice's loads issued into registers before this slice's products, so their latency
//   hides behind the tensor cores (one workgroup-memory buffer, two barriers per slice);
// * padded workgroup-memory rows (40 and 136 halves: 16-byte aligned, fragment loads free of
//   bank conflicts);
// * each subgroup writes its fragments out through its own 16 × 16 scratch (8 KiB in all, where
//   a 128 × 128 f32 staging tile would need 64 KiB).
// Workgroup memory: 10 + 8.5 + 8 KiB. The subgroup of an invocation is taken as
// local_invocation_index / SG (consecutive invocations form a subgroup, as on NVIDIA); the
// self-test at device creation checks the product, and the launcher runs this kernel only with
// subgroups of 32 (256 invocations).

const NSG: u32 = 8u;               // subgroups per workgroup
const QNT: u32 = NSG * SG;         // invocations per workgroup
const QBM: u32 = 128u;
const QBN: u32 = 128u;
const QBK: u32 = 32u;
const QAP: u32 = 40u;              // Qa's row stride (QBK + 8)
const QBP: u32 = 136u;             // Qb's row stride (QBN + 8)
const QPT: u32 = QBM * QBK / 4u / QNT;   // quads of each operand per invocation and slice

var<workgroup> Qa: array<f16, QBM * QAP>;   // [QBM][QAP]: A's slice, row-major
var<workgroup> Qb: array<f16, QBK * QBP>;   // [QBK][QBP]: B's slice, row-major
const QF: u32 = 16u;               // fragment side (frag_write)
var<workgroup> Qc: array<f32, NSG * 256u>;  // one 16 × 16 scratch per subgroup

@compute @workgroup_size(QNT)
fn mm_coop128(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let t = q_tile(wid, nwg, li);
    let live = t.live;
    let row0 = t.row0;
    let col0 = t.col0;
    let sgi = li / SG;
    let am = (sgi / 4u) * 64u;    // the subgroup's first row in the tile
    let bn = (sgi % 4u) * 32u;    // its first column
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
    stage_load(0u, t);
    for (var k0 = 0u; k0 < p.k; k0 += QBK) {
        stage_step(k0, t);
        for (var ks = 0u; ks < QBK; ks += 16u) {
            let oa = am * QAP + ks;
            let ob = ks * QBP + bn;
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&Qa[oa], QAP);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&Qa[oa + 16u * QAP], QAP);
            let a2 = coopLoadT<coop_mat16x16<f16, A>>(&Qa[oa + 32u * QAP], QAP);
            let a3 = coopLoadT<coop_mat16x16<f16, A>>(&Qa[oa + 48u * QAP], QAP);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&Qb[ob], QBP);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&Qb[ob + 16u], QBP);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
        }
    }
    let c_base = t.c_base;
    let lane = li % SG;
    let sc = sgi * 256u;
    let r = row0 + am;
    let q = col0 + bn;
    let s16 = 16u;
    coopStoreT(c00, &Qc[sc], s16);
    frag_write(r, q, sc, lane, c_base, live);
    coopStoreT(c01, &Qc[sc], s16);
    frag_write(r, q + 16u, sc, lane, c_base, live);
    coopStoreT(c10, &Qc[sc], s16);
    frag_write(r + 16u, q, sc, lane, c_base, live);
    coopStoreT(c11, &Qc[sc], s16);
    frag_write(r + 16u, q + 16u, sc, lane, c_base, live);
    coopStoreT(c20, &Qc[sc], s16);
    frag_write(r + 32u, q, sc, lane, c_base, live);
    coopStoreT(c21, &Qc[sc], s16);
    frag_write(r + 32u, q + 16u, sc, lane, c_base, live);
    coopStoreT(c30, &Qc[sc], s16);
    frag_write(r + 48u, q, sc, lane, c_base, live);
    coopStoreT(c31, &Qc[sc], s16);
    frag_write(r + 48u, q + 16u, sc, lane, c_base, live);
}

// ---------------------------------------------------------------------------------------------
// `mm_coop128v` (variant `coop128v`): `mm_coop128`'s tiles, subgroups and fragments on the staging
// of part `coop_staging_v` (raw loads in flight, quads in workgroup memory, two buffers): per K
// slice of 32, the next slice's loads issued, this slice's 16 fragment products per subgroup, the
// next slice stashed into the other buffer, one barrier. Workgroup memory 40 + 8 KiB (NVIDIA's
// limit is 48). Written (session 31) before any GPU run of it. Its halves apart, the same code
// in a diagnostic mode (bits 16 and 32 of `params.vec4s`, uniform branches): variant
// `coop128v:mma` (16) stages the first slice into both buffers and then runs only the fragment
// loads, products and barriers; `coop128v:stage` (32) runs only the loads, stashes and barriers,
// and the products of the last slice (so every output is written).

@compute @workgroup_size(QNT)
fn mm_coop128v(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let t = q_tile(wid, nwg, li);
    let live = t.live;
    let row0 = t.row0;
    let col0 = t.col0;
    let sgi = li / SG;
    let am = (sgi / 4u) * 64u;    // the subgroup's first row in the tile
    let bn = (sgi % 4u) * 32u;    // its first column
    let ra = p.a_cs == 1u;        // A's slices row-major (quads along K), else column-major
    let rb = p.b_cs == 1u;        // B's row-major (quads along N), else column-major
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
    let only_mma = (p.vec4s & 16u) != 0u;
    let only_stage = (p.vec4s & 32u) != 0u;
    // The K range the tile sums (`v_span`: all of K, a causal product's, or none).
    let span = v_span(wid, nwg);
    let q0 = v_load(span.x, t);
    // With two slices in flight (VDEPTH 2, `coop128v2`): `q1` holds the next slice's quads,
    // loaded an iteration before they are stashed (the first pair together, here), and each
    // iteration issues the loads of the slice after that (`v_ahead`). (Never with the diagnostic
    // halves, which are `coop128v`'s.)
    var q1: VQuads;
    if (VDEPTH == 2u && !only_mma && !only_stage && span.x + QBK < span.y) { q1 = v_load(span.x + QBK, t); }
    v_stash(0u, t, q0);
    if (only_mma) { v_stash(1u, t, q0); }
    workgroupBarrier();
    var buf = 0u;
    // Diagnostic `coop128v:stage`: every slice but the last staged without products, then the
    // loop below from the last.
    var k_first = span.x;
    if (only_stage) {
        for (; k_first + QBK < span.y; k_first += QBK) {
            let qs = v_load(k_first + QBK, t);
            v_stash(1u - buf, t, qs);
            workgroupBarrier();
            buf = 1u - buf;
        }
    }
    for (var k0 = k_first; k0 < span.y; k0 += QBK) {
        let more = k0 + QBK < span.y;
        let stage = more && !only_mma;
        var q: VQuads;
        if (!only_mma) { q = v_ahead(k0, span.y, t); }
        for (var ks = 0u; ks < QBK; ks += 16u) {
            var a0: coop_mat16x16<f16, A>;
            var a1: coop_mat16x16<f16, A>;
            var a2: coop_mat16x16<f16, A>;
            var a3: coop_mat16x16<f16, A>;
            var b0: coop_mat16x16<f16, B>;
            var b1: coop_mat16x16<f16, B>;
            if (ra) {
                a0 = coopLoadT<coop_mat16x16<f16, A>>(&Va[va_off_r(buf, am, ks)], VRA);
                a1 = coopLoadT<coop_mat16x16<f16, A>>(&Va[va_off_r(buf, am + 16u, ks)], VRA);
                a2 = coopLoadT<coop_mat16x16<f16, A>>(&Va[va_off_r(buf, am + 32u, ks)], VRA);
                a3 = coopLoadT<coop_mat16x16<f16, A>>(&Va[va_off_r(buf, am + 48u, ks)], VRA);
            } else {
                a0 = coopLoad<coop_mat16x16<f16, A>>(&Va[va_off_c(buf, am, ks)], VCA);
                a1 = coopLoad<coop_mat16x16<f16, A>>(&Va[va_off_c(buf, am + 16u, ks)], VCA);
                a2 = coopLoad<coop_mat16x16<f16, A>>(&Va[va_off_c(buf, am + 32u, ks)], VCA);
                a3 = coopLoad<coop_mat16x16<f16, A>>(&Va[va_off_c(buf, am + 48u, ks)], VCA);
            }
            if (rb) {
                b0 = coopLoadT<coop_mat16x16<f16, B>>(&Vb[vb_off_r(buf, ks, bn)], VRB);
                b1 = coopLoadT<coop_mat16x16<f16, B>>(&Vb[vb_off_r(buf, ks, bn + 16u)], VRB);
            } else {
                b0 = coopLoad<coop_mat16x16<f16, B>>(&Vb[vb_off_c(buf, ks, bn)], VCB);
                b1 = coopLoad<coop_mat16x16<f16, B>>(&Vb[vb_off_c(buf, ks, bn + 16u)], VCB);
            }
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
        }
        if (stage) {
            if (VDEPTH == 2u) { v_stash(1u - buf, t, q1); q1 = q; } else { v_stash(1u - buf, t, q); }
        }
        workgroupBarrier();
        buf = 1u - buf;
    }
    let c_base = t.c_base;
    let lane = li % SG;
    let sc = sgi * 256u;
    let r = row0 + am;
    let q = col0 + bn;
    let s16 = 16u;
    coopStoreT(c00, &Qc[sc], s16);
    frag_write(r, q, sc, lane, c_base, live);
    coopStoreT(c01, &Qc[sc], s16);
    frag_write(r, q + 16u, sc, lane, c_base, live);
    coopStoreT(c10, &Qc[sc], s16);
    frag_write(r + 16u, q, sc, lane, c_base, live);
    coopStoreT(c11, &Qc[sc], s16);
    frag_write(r + 16u, q + 16u, sc, lane, c_base, live);
    coopStoreT(c20, &Qc[sc], s16);
    frag_write(r + 32u, q, sc, lane, c_base, live);
    coopStoreT(c21, &Qc[sc], s16);
    frag_write(r + 32u, q + 16u, sc, lane, c_base, live);
    coopStoreT(c30, &Qc[sc], s16);
    frag_write(r + 48u, q, sc, lane, c_base, live);
    coopStoreT(c31, &Qc[sc], s16);
    frag_write(r + 48u, q + 16u, sc, lane, c_base, live);
}

// ---------------------------------------------------------------------------------------------
// `mm_coop128d` (variant `coop128d`): `mm_coop128`'s tiles, subgroups and fragments with no
// staging at all: every subgroup loads its fragments straight from the operands' f16 storage
// (part `coop_direct`: the launcher runs it only where both are stored in f16 and every fragment
// lies in its buffer), the next K step's six fragments issued before this step's eight
// products, no workgroup memory in the K loop and no barriers. The four subgroups sharing A's
// rows (the two sharing B's columns) read the same fragments, which the caches serve. What it
// measures on a GPU: whether the tensor cores are fed without staging where the operands are
// already f16 (`--operands f16`), against `coop128v`'s staged slices. Written (session 34) before
// any GPU run of it; never picked, timed by `ddl bench matmul --variants coop128d`.

@compute @workgroup_size(QNT)
fn mm_coop128d(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let t = q_tile(wid, nwg, li);
    let live = t.live;
    let row0 = t.row0;
    let col0 = t.col0;
    let sgi = li / SG;
    let am = (sgi / 4u) * 64u;    // the subgroup's first row in the tile
    let bn = (sgi % 4u) * 32u;    // its first column
    let ra = p.a_cs == 1u;        // A's fragments row-major (A along K), else column-major
    let rb = p.b_cs == 1u;        // B's row-major (B along N), else column-major
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
    // This K step's fragments (a*, b*) and the next step's, in flight (n*, m*).
    var a0: coop_mat16x16<f16, A>;
    var a1: coop_mat16x16<f16, A>;
    var a2: coop_mat16x16<f16, A>;
    var a3: coop_mat16x16<f16, A>;
    var b0: coop_mat16x16<f16, B>;
    var b1: coop_mat16x16<f16, B>;
    if (ra) {
        a0 = da_load_r(da_frag(t, am, 0u));
        a1 = da_load_r(da_frag(t, am + 16u, 0u));
        a2 = da_load_r(da_frag(t, am + 32u, 0u));
        a3 = da_load_r(da_frag(t, am + 48u, 0u));
    } else {
        a0 = da_load_c(da_frag(t, am, 0u));
        a1 = da_load_c(da_frag(t, am + 16u, 0u));
        a2 = da_load_c(da_frag(t, am + 32u, 0u));
        a3 = da_load_c(da_frag(t, am + 48u, 0u));
    }
    if (rb) {
        b0 = db_load_r(db_frag(t, 0u, bn));
        b1 = db_load_r(db_frag(t, 0u, bn + 16u));
    } else {
        b0 = db_load_c(db_frag(t, 0u, bn));
        b1 = db_load_c(db_frag(t, 0u, bn + 16u));
    }
    for (var k0 = 0u; k0 < p.k; k0 += 16u) {
        // The next step (the last one reloads its own fragments: in bounds, unused).
        let kn = min(k0 + 16u, p.k - 16u);
        var n0: coop_mat16x16<f16, A>;
        var n1: coop_mat16x16<f16, A>;
        var n2: coop_mat16x16<f16, A>;
        var n3: coop_mat16x16<f16, A>;
        var m0: coop_mat16x16<f16, B>;
        var m1: coop_mat16x16<f16, B>;
        if (ra) {
            n0 = da_load_r(da_frag(t, am, kn));
            n1 = da_load_r(da_frag(t, am + 16u, kn));
            n2 = da_load_r(da_frag(t, am + 32u, kn));
            n3 = da_load_r(da_frag(t, am + 48u, kn));
        } else {
            n0 = da_load_c(da_frag(t, am, kn));
            n1 = da_load_c(da_frag(t, am + 16u, kn));
            n2 = da_load_c(da_frag(t, am + 32u, kn));
            n3 = da_load_c(da_frag(t, am + 48u, kn));
        }
        if (rb) {
            m0 = db_load_r(db_frag(t, kn, bn));
            m1 = db_load_r(db_frag(t, kn, bn + 16u));
        } else {
            m0 = db_load_c(db_frag(t, kn, bn));
            m1 = db_load_c(db_frag(t, kn, bn + 16u));
        }
        c00 = coopMultiplyAdd(a0, b0, c00);
        c01 = coopMultiplyAdd(a0, b1, c01);
        c10 = coopMultiplyAdd(a1, b0, c10);
        c11 = coopMultiplyAdd(a1, b1, c11);
        c20 = coopMultiplyAdd(a2, b0, c20);
        c21 = coopMultiplyAdd(a2, b1, c21);
        c30 = coopMultiplyAdd(a3, b0, c30);
        c31 = coopMultiplyAdd(a3, b1, c31);
        a0 = n0;
        a1 = n1;
        a2 = n2;
        a3 = n3;
        b0 = m0;
        b1 = m1;
    }
    let c_base = t.c_base;
    let lane = li % SG;
    let sc = sgi * 256u;
    let r = row0 + am;
    let q = col0 + bn;
    let s16 = 16u;
    coopStoreT(c00, &Qc[sc], s16);
    frag_write(r, q, sc, lane, c_base, live);
    coopStoreT(c01, &Qc[sc], s16);
    frag_write(r, q + 16u, sc, lane, c_base, live);
    coopStoreT(c10, &Qc[sc], s16);
    frag_write(r + 16u, q, sc, lane, c_base, live);
    coopStoreT(c11, &Qc[sc], s16);
    frag_write(r + 16u, q + 16u, sc, lane, c_base, live);
    coopStoreT(c20, &Qc[sc], s16);
    frag_write(r + 32u, q, sc, lane, c_base, live);
    coopStoreT(c21, &Qc[sc], s16);
    frag_write(r + 32u, q + 16u, sc, lane, c_base, live);
    coopStoreT(c30, &Qc[sc], s16);
    frag_write(r + 48u, q, sc, lane, c_base, live);
    coopStoreT(c31, &Qc[sc], s16);
    frag_write(r + 48u, q + 16u, sc, lane, c_base, live);
}

// ---------------------------------------------------------------------------------------------
// Diagnostic entry points: `mm_coop`'s two halves timed apart (`ddl bench matmul --variants
// coop,coop:mma,coop:mma-cm,coop:stage`; never picked, their results are not the product). On an
// H200 the whole kernel ran a 4096³ product at 2.6 TFLOP/s (docs/GPU.md, run 3), far below both
// the tensor cores and the f16 tiles' 24: these say which half costs it.
// `mm_coop_mma`: the first K slice staged once, then K / 16 rounds of the four fragment loads and
// products, no staging and no barriers: the cooperative-matrix path alone.
// `mm_coop_mma_cm`: the same with column-major fragment loads (`coopLoad`, not `coopLoadT`):
// whether the transposed loads from workgroup memory are the slow part.
// `mm_coop_stage`: the staging loop with its barriers and one product at the end: the global
// loads, conversions and workgroup-memory stores alone.

fn coop_stage(k0: u32, row0: u32, col0: u32, a_base: u32, b_base: u32, live: bool, li: u32) {
    let p = params;
    for (var e = li; e < BM * BK; e += SG) {
        let gi = row0 + e / BK;
        let gk = k0 + e % BK;
        var v = 0.0;
        if (live && gi < p.m && gk < p.k) { v = lda(a_base + gi * p.a_rs + gk * p.a_cs); }
        As[e] = f16(v);
    }
    for (var e = li; e < BK * BN; e += SG) {
        let gk = k0 + e / BN;
        let gj = col0 + e % BN;
        var v = 0.0;
        if (live && gk < p.k && gj < p.n) { v = ldb(b_base + gk * p.b_rs + gj * p.b_cs); }
        Bs[e] = f16(v);
    }
}

// C's 32 × 32 tile from the fragments staged in Cs (bounds, alpha, accumulation).
fn coop_write(row0: u32, col0: u32, c_base: u32, live: bool, li: u32) {
    let p = params;
    for (var e = li; e < BM * BN; e += SG) {
        let gi = row0 + e / BN;
        let gj = col0 + e % BN;
        if (live && gi < p.m && gj < p.n) {
            let idx = c_base + gi * p.c_rs + gj;
            var out = p.alpha * Cs[e];
            if (p.accumulate != 0u) { out = out + c[idx]; }
            c[idx] = out;
        }
    }
}

@compute @workgroup_size(SG)
fn mm_coop_mma(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let ti = tile_index(wid, nwg);
    let live = ti.w != 0u;
    let row0 = ti.y * BM;
    let col0 = ti.x * BN;
    let a_base = p.a_off + batch_off(ti.z, p.a_bs, p.a_os);
    let b_base = p.b_off + batch_off(ti.z, p.b_bs, p.b_os);
    coop_stage(0u, row0, col0, a_base, b_base, live, li);
    workgroupBarrier();
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        let a0 = coopLoadT<coop_mat16x16<f16, A>>(&As[0], BK);
        let a1 = coopLoadT<coop_mat16x16<f16, A>>(&As[16u * BK], BK);
        let b0 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[0], BN);
        let b1 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[16], BN);
        c00 = coopMultiplyAdd(a0, b0, c00);
        c01 = coopMultiplyAdd(a0, b1, c01);
        c10 = coopMultiplyAdd(a1, b0, c10);
        c11 = coopMultiplyAdd(a1, b1, c11);
        // `coop:mma-b` (bit 64 of `vec4s`): a barrier in each iteration keeps the fragment loads
        // in the loop (without it a compiler may load the four fragments once): fragment loads
        // from constant offsets and the products; against `coop128v:mma` (offsets from the
        // subgroup index), whether the driver's loads care.
        if ((p.vec4s & 64u) != 0u) { workgroupBarrier(); }
    }
    let s = BN;
    let o01 = 16u;
    let o10 = 16u * BN;
    let o11 = 16u * BN + 16u;
    coopStoreT(c00, &Cs[0], s);
    coopStoreT(c01, &Cs[o01], s);
    coopStoreT(c10, &Cs[o10], s);
    coopStoreT(c11, &Cs[o11], s);
    workgroupBarrier();
    coop_write(row0, col0, p.c_off + batch_off(ti.z, p.c_bs, p.c_os), live, li);
}

@compute @workgroup_size(SG)
fn mm_coop_mma_cm(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let ti = tile_index(wid, nwg);
    let live = ti.w != 0u;
    let row0 = ti.y * BM;
    let col0 = ti.x * BN;
    let a_base = p.a_off + batch_off(ti.z, p.a_bs, p.a_os);
    let b_base = p.b_off + batch_off(ti.z, p.b_bs, p.b_os);
    coop_stage(0u, row0, col0, a_base, b_base, live, li);
    workgroupBarrier();
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        let a0 = coopLoad<coop_mat16x16<f16, A>>(&As[0], BK);
        let a1 = coopLoad<coop_mat16x16<f16, A>>(&As[16u * BK], BK);
        let b0 = coopLoad<coop_mat16x16<f16, B>>(&Bs[0], BN);
        let b1 = coopLoad<coop_mat16x16<f16, B>>(&Bs[16], BN);
        c00 = coopMultiplyAdd(a0, b0, c00);
        c01 = coopMultiplyAdd(a0, b1, c01);
        c10 = coopMultiplyAdd(a1, b0, c10);
        c11 = coopMultiplyAdd(a1, b1, c11);
    }
    let s = BN;
    let o01 = 16u;
    let o10 = 16u * BN;
    let o11 = 16u * BN + 16u;
    coopStoreT(c00, &Cs[0], s);
    coopStoreT(c01, &Cs[o01], s);
    coopStoreT(c10, &Cs[o10], s);
    coopStoreT(c11, &Cs[o11], s);
    workgroupBarrier();
    coop_write(row0, col0, p.c_off + batch_off(ti.z, p.c_bs, p.c_os), live, li);
}

@compute @workgroup_size(SG)
fn mm_coop_stage(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let ti = tile_index(wid, nwg);
    let live = ti.w != 0u;
    let row0 = ti.y * BM;
    let col0 = ti.x * BN;
    let a_base = p.a_off + batch_off(ti.z, p.a_bs, p.a_os);
    let b_base = p.b_off + batch_off(ti.z, p.b_bs, p.b_os);
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        coop_stage(k0, row0, col0, a_base, b_base, live, li);
        workgroupBarrier();
        workgroupBarrier();
    }
    // Every fragment of Cs written (the product of the last slice, zeros), so C is too.
    var c00 = coop_mat16x16<f32, C>();
    let z = coop_mat16x16<f32, C>();
    let a0 = coopLoadT<coop_mat16x16<f16, A>>(&As[0], BK);
    let b0 = coopLoadT<coop_mat16x16<f16, B>>(&Bs[0], BN);
    c00 = coopMultiplyAdd(a0, b0, c00);
    let s = BN;
    let o01 = 16u;
    let o10 = 16u * BN;
    let o11 = 16u * BN + 16u;
    coopStoreT(c00, &Cs[0], s);
    coopStoreT(z, &Cs[o01], s);
    coopStoreT(z, &Cs[o10], s);
    coopStoreT(z, &Cs[o11], s);
    workgroupBarrier();
    coop_write(row0, col0, p.c_off + batch_off(ti.z, p.c_bs, p.c_os), live, li);
}
