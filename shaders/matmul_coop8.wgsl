// Batched, strided matrix multiply on 8 × 8 cooperative matrices: Metal's simdgroup matrices
// (Apple GPUs; wgpu 30 lists 8×8×8 f16 → f32 there, and no 16 × 16), the counterpart of
// `shaders/matmul_coop.wgsl`'s 16 × 16 kernels (Vulkan). The same parameters, layouts, grid and
// operand parts (`matmul_params`, `matmul_{a,b}_*`), the staging of `mm_coop128`
// (part `coop_staging`); f16 operands, f32 accumulation. A separate module: Metal has no
// 16 × 16 simdgroup matrices, so the 16 × 16 types must not appear in what it compiles.
//
// `mm_coop8` (variant `coop8`): a 64 × 64 tile of C per workgroup of 4 subgroups (2 × 2), each
// owning 32 × 32 outputs as 4 × 4 accumulator fragments; K slices of 32 staged a quad at a time
// with the next slice's loads in flight (held as f16); each subgroup writes its fragments out
// through its own 8 × 8 scratch. Workgroup memory: 5 + 4.5 + 1 KiB. The subgroup of an
// invocation is local_invocation_index / SG (Apple's simdgroups are consecutive); made only where
// the adapter lists 8×8×8 f16 → f32, and a self-test against the f16 tiled kernel passes the
// first time it is needed (`src/kernels/matmul/coop.rs`). Validated by naga and translated to
// MSL here; not yet run on an Apple GPU.

const NSG8: u32 = 4u;              // subgroups per workgroup
const QNT: u32 = NSG8 * SG;        // invocations per workgroup
const QBM: u32 = 64u;
const QBN: u32 = 64u;
const QBK: u32 = 32u;
const QAP: u32 = 40u;              // Qa's row stride (QBK + 8)
const QBP: u32 = 72u;              // Qb's row stride (QBN + 8)
const QPT: u32 = QBM * QBK / 4u / QNT;   // quads of each operand per invocation and slice

@group(0) @binding(3) var<storage, read_write> c: array<f32>;

var<workgroup> Qa: array<f16, QBM * QAP>;   // [QBM][QAP]: A's slice, row-major
var<workgroup> Qb: array<f16, QBK * QBP>;   // [QBK][QBP]: B's slice, row-major
var<workgroup> Qc: array<f32, NSG8 * 64u>;  // one 8 × 8 scratch per subgroup
const QF: u32 = 8u;                // fragment side (frag_write)

@compute @workgroup_size(QNT)
fn mm_coop8(
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
    let am = (sgi / 2u) * 32u;    // the subgroup's first row in the tile
    let bn = (sgi % 2u) * 32u;    // its first column
    var c00 = coop_mat8x8<f32, C>();
    var c01 = coop_mat8x8<f32, C>();
    var c02 = coop_mat8x8<f32, C>();
    var c03 = coop_mat8x8<f32, C>();
    var c10 = coop_mat8x8<f32, C>();
    var c11 = coop_mat8x8<f32, C>();
    var c12 = coop_mat8x8<f32, C>();
    var c13 = coop_mat8x8<f32, C>();
    var c20 = coop_mat8x8<f32, C>();
    var c21 = coop_mat8x8<f32, C>();
    var c22 = coop_mat8x8<f32, C>();
    var c23 = coop_mat8x8<f32, C>();
    var c30 = coop_mat8x8<f32, C>();
    var c31 = coop_mat8x8<f32, C>();
    var c32 = coop_mat8x8<f32, C>();
    var c33 = coop_mat8x8<f32, C>();
    stage_load(0u, t);
    for (var k0 = 0u; k0 < p.k; k0 += QBK) {
        stage_step(k0, t);
        for (var ks = 0u; ks < QBK; ks += 8u) {
            let oa = am * QAP + ks;
            let ob = ks * QBP + bn;
            let a0 = coopLoadT<coop_mat8x8<f16, A>>(&Qa[oa + 0u * QAP], QAP);
            let a1 = coopLoadT<coop_mat8x8<f16, A>>(&Qa[oa + 8u * QAP], QAP);
            let a2 = coopLoadT<coop_mat8x8<f16, A>>(&Qa[oa + 16u * QAP], QAP);
            let a3 = coopLoadT<coop_mat8x8<f16, A>>(&Qa[oa + 24u * QAP], QAP);
            let b0 = coopLoadT<coop_mat8x8<f16, B>>(&Qb[ob + 0u], QBP);
            let b1 = coopLoadT<coop_mat8x8<f16, B>>(&Qb[ob + 8u], QBP);
            let b2 = coopLoadT<coop_mat8x8<f16, B>>(&Qb[ob + 16u], QBP);
            let b3 = coopLoadT<coop_mat8x8<f16, B>>(&Qb[ob + 24u], QBP);
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
        }
    }
    let c_base = t.c_base;
    let lane = li % SG;
    let sc = sgi * 64u;
    let r = row0 + am;
    let q = col0 + bn;
    let s8 = 8u;
    coopStoreT(c00, &Qc[sc], s8);
    frag_write(r + 0u, q + 0u, sc, lane, c_base, live);
    coopStoreT(c01, &Qc[sc], s8);
    frag_write(r + 0u, q + 8u, sc, lane, c_base, live);
    coopStoreT(c02, &Qc[sc], s8);
    frag_write(r + 0u, q + 16u, sc, lane, c_base, live);
    coopStoreT(c03, &Qc[sc], s8);
    frag_write(r + 0u, q + 24u, sc, lane, c_base, live);
    coopStoreT(c10, &Qc[sc], s8);
    frag_write(r + 8u, q + 0u, sc, lane, c_base, live);
    coopStoreT(c11, &Qc[sc], s8);
    frag_write(r + 8u, q + 8u, sc, lane, c_base, live);
    coopStoreT(c12, &Qc[sc], s8);
    frag_write(r + 8u, q + 16u, sc, lane, c_base, live);
    coopStoreT(c13, &Qc[sc], s8);
    frag_write(r + 8u, q + 24u, sc, lane, c_base, live);
    coopStoreT(c20, &Qc[sc], s8);
    frag_write(r + 16u, q + 0u, sc, lane, c_base, live);
    coopStoreT(c21, &Qc[sc], s8);
    frag_write(r + 16u, q + 8u, sc, lane, c_base, live);
    coopStoreT(c22, &Qc[sc], s8);
    frag_write(r + 16u, q + 16u, sc, lane, c_base, live);
    coopStoreT(c23, &Qc[sc], s8);
    frag_write(r + 16u, q + 24u, sc, lane, c_base, live);
    coopStoreT(c30, &Qc[sc], s8);
    frag_write(r + 24u, q + 0u, sc, lane, c_base, live);
    coopStoreT(c31, &Qc[sc], s8);
    frag_write(r + 24u, q + 8u, sc, lane, c_base, live);
    coopStoreT(c32, &Qc[sc], s8);
    frag_write(r + 24u, q + 16u, sc, lane, c_base, live);
    coopStoreT(c33, &Qc[sc], s8);
    frag_write(r + 24u, q + 24u, sc, lane, c_base, live);
}
