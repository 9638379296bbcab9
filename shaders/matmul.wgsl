// Batched, strided matrix multiply: C[b] = alpha · op(A[b]) · op(B[b])  (+ C[b] when accumulating).
//
// (With two batch levels, b·a_bs stands for (b % nb_in)·a_bs + (b / nb_in)·a_os; see Params.)
// A is the logical M×K matrix whose element (i, p) lives at a_off + b·a_bs + i·a_rs + p·a_cs, so a
// row-major A (a_rs = K, a_cs = 1) and a transposed one stored K×M (a_rs = 1, a_cs = M) are the
// same kernel. Likewise B is K×N with (p, j) at b_off + b·b_bs + p·b_rs + j·b_cs, and C is a
// row-major M×N at c_off + b·c_bs + i·c_rs + j. All offsets are in elements.
//
// THE SUMMATION ORDER IS PART OF THE CONTRACT. Every entry point computes every output as
//     acc = 0;  for p = 0, 1, …, K−1 in order: acc = fma(A[i,p], B[p,j], acc);  out = alpha·acc
// (then + C when accumulating). So all entry points and all variants give bit-identical results
// on one adapter (the autotuner may switch between them freely), and results are identical run to
// run. (`matmul` rounds K up to its stage depth with zero operands; those steps are exact no-ops,
// see there.) (fma() is whatever the adapter's fma is: fused on GPUs, a multiply and
// an add on llvmpipe; it is the same for every entry point.)
//
// Two families of entry points, chosen per variant (constants from the prelude, see src/shaders.rs):
//
// * `matmul` (DIRECT = 0 variants t16/t32/t64): the classic GPU kernel. A workgroup owns a BM×BN
//   tile of C, each invocation TM×TN outputs spaced WY rows / WX columns apart, K advances BK at a
//   time through workgroup memory. Any strides.
//
// * `mm_*` (DIRECT = 1 variants): no workgroup memory and no barriers. Each invocation keeps a
//   (4·DM)×(4·DN) block of C in registers (DM×DN 4×4 blocks) and streams its rows of A and columns
//   of B straight from the storage buffers, four K steps per iteration, as vec4 loads where the
//   layout allows. Made for CPU adapters (llvmpipe/lavapipe, SwiftShader): there every load is a
//   per-lane scalar loop and a barrier is a coroutine switch, so the cost is the number of
//   loaded components per FMA, (1/(4·DM) + 1/(4·DN)) — big register blocks, no staging. The
//   launcher picks the entry point from the operands' layouts:
//       mm_kk  A rows contiguous along K, B columns contiguous along K   (A·Bᵀ, weights [out, in])
//       mm_kn  A along K, B rows contiguous along N                      (A·B)
//       mm_mn  A contiguous along M, B along N                           (Aᵀ·B, weight gradients)
//       mm_mk  A along M, B along K                                      (Aᵀ·Bᵀ)
//       mm_ss  scalar loads, any strides (unaligned views, odd packed sizes)
//   The vec4 entry points need the vec4-read operand's offset, batch stride and the stride across
//   its vec4s to be multiples of 4, M or N a multiple of 4 for vec4s along M or N, and K ≥ 4 for
//   vec4s along K; the launcher checks. K % 4 last steps use scalar loads. Rows/columns past the edge of C are clamped to the last one when
//   loading and never stored.

// The parameters, their binding and the tile index come from the part `matmul_params`.
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
// The operands come from the parts `matmul_{a,b}_{f32,r16,f16}` (src/shaders.rs): bindings 1 (`a`)
// and 2 (`b`), the same buffers read four elements at a time as 4 (`a4`) and 5 (`b4`, bound only
// by the entry points that use them), and their loads `lda(i)` / `lda4(q)` (`ldb`, `ldb4`), which
// return f32: as stored (f32), rounded to half precision (r16: f32 storage, f16 operands), or
// converted from half-precision storage (f16). Every product of two f16 values is exact in f32, so
// the f16 forms are the f32 kernel on f16-rounded operands, accumulated in f32 in the same order.

// ---------------------------------------------------------------------------------------------
// `matmul`: workgroup-memory tiles (GPU kernel).

const WX: u32 = BN / TN;   // invocations along N
const WY: u32 = BM / TM;   // invocations along M
const NT: u32 = WX * WY;

var<workgroup> As: array<f32, BK * BM>;   // [BK][BM]
var<workgroup> Bs: array<f32, BK * BN>;   // [BK][BN]

@compute @workgroup_size(WX, WY, 1)
fn matmul(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let p = params;
    let ti = tile_index(wid, nwg);
    if (ti.w == 0u) { return; }
    let row0 = ti.y * BM;
    let col0 = ti.x * BN;
    let tid = lid.y * WX + lid.x;
    let a_base = p.a_off + batch_off(ti.z, p.a_bs, p.a_os);
    let b_base = p.b_off + batch_off(ti.z, p.b_bs, p.b_os);
    // Walk memory contiguously when loading: along K if A's rows are contiguous, else along M.
    let a_k_fast = p.a_cs == 1u;
    let b_n_fast = p.b_cs == 1u;

    var acc: array<f32, TM * TN>;
    let ks = k_span(row0);
    for (var k0 = ks.x; k0 < ks.y; k0 += BK) {
        for (var e = tid; e < BM * BK; e += NT) {
            var r: u32;
            var kk: u32;
            if (a_k_fast) { r = e / BK; kk = e % BK; } else { kk = e / BM; r = e % BM; }
            let gi = row0 + r;
            let gk = k0 + kk;
            var v = 0.0;
            if (gi < p.m && gk < p.k) { v = lda(a_base + gi * p.a_rs + gk * p.a_cs); }
            As[kk * BM + r] = v;
        }
        for (var e = tid; e < BK * BN; e += NT) {
            var kk: u32;
            var cc: u32;
            if (b_n_fast) { kk = e / BN; cc = e % BN; } else { cc = e / BK; kk = e % BK; }
            let gk = k0 + kk;
            let gj = col0 + cc;
            var v = 0.0;
            if (gk < p.k && gj < p.n) { v = ldb(b_base + gk * p.b_rs + gj * p.b_cs); }
            Bs[kk * BN + cc] = v;
        }
        workgroupBarrier();
        // Past K both operands are zero-padded, and acc + 0·0 = acc exactly (acc starts at +0.0
        // and a sum that starts at +0.0 is never -0.0), so the padded steps of the last stage
        // leave the K-step result bit for bit unchanged.
        for (var kk = 0u; kk < BK; kk++) {
            var af: array<f32, TM>;
            var bf: array<f32, TN>;
            for (var i = 0u; i < TM; i++) { af[i] = As[kk * BM + lid.y + i * WY]; }
            for (var j = 0u; j < TN; j++) { bf[j] = Bs[kk * BN + lid.x + j * WX]; }
            for (var i = 0u; i < TM; i++) {
                for (var j = 0u; j < TN; j++) {
                    acc[i * TN + j] = fma(af[i], bf[j], acc[i * TN + j]);
                }
            }
        }
        workgroupBarrier();
    }

    let c_base = p.c_off + batch_off(ti.z, p.c_bs, p.c_os);
    for (var i = 0u; i < TM; i++) {
        let gi = row0 + lid.y + i * WY;
        for (var j = 0u; j < TN; j++) {
            let gj = col0 + lid.x + j * WX;
            if (gi < p.m && gj < p.n) {
                let idx = c_base + gi * p.c_rs + gj;
                var v = p.alpha * acc[i * TN + j];
                if (p.accumulate != 0u) { v += c[idx]; }
                c[idx] = v;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// `mm_*`: register blocks streamed from the buffers (CPU kernels).
//
// An invocation owns rows row0 + 4·I + i and columns col0 + 4·J + j (I < DM, J < DN, i, j < 4).
// Block (I, J) of its accumulators is a mat4x4 whose column i is row i's four outputs. For one
// group of four K steps, an A block is a mat4x4 whose column i holds row i's four A values (one
// per step) and a B block one whose column s holds the four B values of step s. Blocks beyond
// DM/DN are dead code: the conditions are constants, so compilers drop them.

struct Acc {
    c00: mat4x4<f32>, c01: mat4x4<f32>, c02: mat4x4<f32>, c03: mat4x4<f32>,
    c10: mat4x4<f32>, c11: mat4x4<f32>, c12: mat4x4<f32>, c13: mat4x4<f32>,
    c20: mat4x4<f32>, c21: mat4x4<f32>, c22: mat4x4<f32>, c23: mat4x4<f32>,
    c30: mat4x4<f32>, c31: mat4x4<f32>, c32: mat4x4<f32>, c33: mat4x4<f32>,
}

// Four row blocks of A (or index vectors for them).
struct Ablk { a0: mat4x4<f32>, a1: mat4x4<f32>, a2: mat4x4<f32>, a3: mat4x4<f32> }
struct Idx { i0: vec4<u32>, i1: vec4<u32>, i2: vec4<u32>, i3: vec4<u32> }

// Where one invocation works.
struct Tile { row0: u32, col0: u32, abase: u32, bbase: u32, cbase: u32 }

fn tile_of(ti: vec4<u32>, lid: vec3<u32>) -> Tile {
    let p = params;
    return Tile(
        ti.y * (DY * DM * 4u) + lid.y * (DM * 4u),
        ti.x * (DX * DN * 4u) + lid.x * (DN * 4u),
        p.a_off + batch_off(ti.z, p.a_bs, p.a_os),
        p.b_off + batch_off(ti.z, p.b_bs, p.b_os),
        p.c_off + batch_off(ti.z, p.c_bs, p.c_os));
}

// The four K steps of one block, in order: r[i] += a[i][s] · b[s] for s = 0, 1, 2, 3.
fn upd(c: mat4x4<f32>, a: mat4x4<f32>, b: mat4x4<f32>) -> mat4x4<f32> {
    var r = c;
    r[0] = fma(vec4(a[0].x), b[0], r[0]); r[0] = fma(vec4(a[0].y), b[1], r[0]);
    r[0] = fma(vec4(a[0].z), b[2], r[0]); r[0] = fma(vec4(a[0].w), b[3], r[0]);
    r[1] = fma(vec4(a[1].x), b[0], r[1]); r[1] = fma(vec4(a[1].y), b[1], r[1]);
    r[1] = fma(vec4(a[1].z), b[2], r[1]); r[1] = fma(vec4(a[1].w), b[3], r[1]);
    r[2] = fma(vec4(a[2].x), b[0], r[2]); r[2] = fma(vec4(a[2].y), b[1], r[2]);
    r[2] = fma(vec4(a[2].z), b[2], r[2]); r[2] = fma(vec4(a[2].w), b[3], r[2]);
    r[3] = fma(vec4(a[3].x), b[0], r[3]); r[3] = fma(vec4(a[3].y), b[1], r[3]);
    r[3] = fma(vec4(a[3].z), b[2], r[3]); r[3] = fma(vec4(a[3].w), b[3], r[3]);
    return r;
}

// One K step (the K % 4 tail): r[i] += a[i] · b.
fn upd1(c: mat4x4<f32>, a: vec4<f32>, b: vec4<f32>) -> mat4x4<f32> {
    var r = c;
    r[0] = fma(vec4(a.x), b, r[0]);
    r[1] = fma(vec4(a.y), b, r[1]);
    r[2] = fma(vec4(a.z), b, r[2]);
    r[3] = fma(vec4(a.w), b, r[3]);
    return r;
}

// Column block J of the accumulators takes B block `bj` (A blocks in `ab`).
fn col0(acc: ptr<function, Acc>, ab: Ablk, bj: mat4x4<f32>) {
    (*acc).c00 = upd((*acc).c00, ab.a0, bj);
    if (DM > 1u) { (*acc).c10 = upd((*acc).c10, ab.a1, bj); }
    if (DM > 2u) { (*acc).c20 = upd((*acc).c20, ab.a2, bj); }
    if (DM > 3u) { (*acc).c30 = upd((*acc).c30, ab.a3, bj); }
}
fn col1(acc: ptr<function, Acc>, ab: Ablk, bj: mat4x4<f32>) {
    (*acc).c01 = upd((*acc).c01, ab.a0, bj);
    if (DM > 1u) { (*acc).c11 = upd((*acc).c11, ab.a1, bj); }
    if (DM > 2u) { (*acc).c21 = upd((*acc).c21, ab.a2, bj); }
    if (DM > 3u) { (*acc).c31 = upd((*acc).c31, ab.a3, bj); }
}
fn col2(acc: ptr<function, Acc>, ab: Ablk, bj: mat4x4<f32>) {
    (*acc).c02 = upd((*acc).c02, ab.a0, bj);
    if (DM > 1u) { (*acc).c12 = upd((*acc).c12, ab.a1, bj); }
    if (DM > 2u) { (*acc).c22 = upd((*acc).c22, ab.a2, bj); }
    if (DM > 3u) { (*acc).c32 = upd((*acc).c32, ab.a3, bj); }
}
fn col3(acc: ptr<function, Acc>, ab: Ablk, bj: mat4x4<f32>) {
    (*acc).c03 = upd((*acc).c03, ab.a0, bj);
    if (DM > 1u) { (*acc).c13 = upd((*acc).c13, ab.a1, bj); }
    if (DM > 2u) { (*acc).c23 = upd((*acc).c23, ab.a2, bj); }
    if (DM > 3u) { (*acc).c33 = upd((*acc).c33, ab.a3, bj); }
}

// Element offsets of rows r0..r0+3 (clamped to `last`) with stride `rs`, plus `base`.
fn offs(base: u32, r0: u32, rs: u32, last: u32) -> vec4<u32> {
    return vec4<u32>(
        base + min(r0, last) * rs, base + min(r0 + 1u, last) * rs,
        base + min(r0 + 2u, last) * rs, base + min(r0 + 3u, last) * rs);
}

// Offsets of the DM row blocks of A along its row stride (or of DN column blocks of B along its
// column stride), in elements.
fn a_rows(t: Tile) -> Idx {
    let p = params;
    return Idx(offs(t.abase, t.row0, p.a_rs, p.m - 1u), offs(t.abase, t.row0 + 4u, p.a_rs, p.m - 1u),
               offs(t.abase, t.row0 + 8u, p.a_rs, p.m - 1u), offs(t.abase, t.row0 + 12u, p.a_rs, p.m - 1u));
}
fn b_cols(t: Tile) -> Idx {
    let p = params;
    return Idx(offs(t.bbase, t.col0, p.b_cs, p.n - 1u), offs(t.bbase, t.col0 + 4u, p.b_cs, p.n - 1u),
               offs(t.bbase, t.col0 + 8u, p.b_cs, p.n - 1u), offs(t.bbase, t.col0 + 12u, p.b_cs, p.n - 1u));
}
// Element offsets → vec4 indices (the offsets are multiples of 4 for the vec4 loads).
fn quarter(x: Idx) -> Idx {
    return Idx(x.i0 / 4u, x.i1 / 4u, x.i2 / 4u, x.i3 / 4u);
}

// Element offsets of the first of four rows of each A row block (M a multiple of 4, or the
// operand padded to one: blocks past the edge are clamped to the last whole one), and likewise
// for B's column blocks.
fn a_groups(t: Tile) -> vec4<u32> {
    let p = params;
    let last = ((p.m + 3u) & ~3u) - 4u;
    return t.abase + vec4<u32>(min(t.row0, last), min(t.row0 + 4u, last),
                               min(t.row0 + 8u, last), min(t.row0 + 12u, last)) * p.a_rs;
}
fn b_groups(t: Tile) -> vec4<u32> {
    let p = params;
    let last = ((p.n + 3u) & ~3u) - 4u;
    return t.bbase + vec4<u32>(min(t.col0, last), min(t.col0 + 4u, last),
                               min(t.col0 + 8u, last), min(t.col0 + 12u, last)) * p.b_cs;
}

// Loads of one block for K steps k..k+3. `o` holds element offsets (multiples of 4 for the vec4
// forms); `s` is the stride between consecutive K steps in elements.
// Along K, contiguous: one vec4 per row of A / column of B; `o` are vec4 indices, q = k / 4.
fn lda_k4(o: vec4<u32>, q: u32) -> mat4x4<f32> {
    return mat4x4<f32>(lda4(o.x + q), lda4(o.y + q), lda4(o.z + q), lda4(o.w + q));
}
fn ldb_k4(o: vec4<u32>, q: u32) -> mat4x4<f32> {
    return transpose(mat4x4<f32>(ldb4(o.x + q), ldb4(o.y + q), ldb4(o.z + q), ldb4(o.w + q)));
}
// Four consecutive rows of A / columns of B contiguous (starting at element g): one vec4 per K
// step.
fn lda_x4(g: u32, k: u32, s: u32) -> mat4x4<f32> {
    let o = g + k * s;
    return transpose(mat4x4<f32>(lda4(o / 4u), lda4((o + s) / 4u), lda4((o + 2u * s) / 4u), lda4((o + 3u * s) / 4u)));
}
fn ldb_x4(g: u32, k: u32, s: u32) -> mat4x4<f32> {
    let o = g + k * s;
    return mat4x4<f32>(ldb4(o / 4u), ldb4((o + s) / 4u), ldb4((o + 2u * s) / 4u), ldb4((o + 3u * s) / 4u));
}
// Scalar loads, any strides.
fn lda_s(o: vec4<u32>, k: u32, s: u32) -> mat4x4<f32> {
    let k0 = k * s;
    let k1 = k0 + s;
    let k2 = k1 + s;
    let k3 = k2 + s;
    return mat4x4<f32>(
        vec4(lda(o.x + k0), lda(o.x + k1), lda(o.x + k2), lda(o.x + k3)),
        vec4(lda(o.y + k0), lda(o.y + k1), lda(o.y + k2), lda(o.y + k3)),
        vec4(lda(o.z + k0), lda(o.z + k1), lda(o.z + k2), lda(o.z + k3)),
        vec4(lda(o.w + k0), lda(o.w + k1), lda(o.w + k2), lda(o.w + k3)));
}
fn ldb_s(o: vec4<u32>, k: u32, s: u32) -> mat4x4<f32> {
    let k0 = k * s;
    let k1 = k0 + s;
    let k2 = k1 + s;
    let k3 = k2 + s;
    return mat4x4<f32>(
        vec4(ldb(o.x + k0), ldb(o.y + k0), ldb(o.z + k0), ldb(o.w + k0)),
        vec4(ldb(o.x + k1), ldb(o.y + k1), ldb(o.z + k1), ldb(o.w + k1)),
        vec4(ldb(o.x + k2), ldb(o.y + k2), ldb(o.z + k2), ldb(o.w + k2)),
        vec4(ldb(o.x + k3), ldb(o.y + k3), ldb(o.z + k3), ldb(o.w + k3)));
}

// The last K % 4 steps of the tile's sum (below `k_to`), scalar loads (any layout), in order.
fn tail(acc: ptr<function, Acc>, t: Tile, k_from: u32, k_to: u32) {
    let p = params;
    let ar = a_rows(t);
    let bc = b_cols(t);
    for (var k = k_from; k < k_to; k++) {
        let ka = k * p.a_cs;
        let kb = k * p.b_rs;
        let a0 = vec4(lda(ar.i0.x + ka), lda(ar.i0.y + ka), lda(ar.i0.z + ka), lda(ar.i0.w + ka));
        let a1 = vec4(lda(ar.i1.x + ka), lda(ar.i1.y + ka), lda(ar.i1.z + ka), lda(ar.i1.w + ka));
        let a2 = vec4(lda(ar.i2.x + ka), lda(ar.i2.y + ka), lda(ar.i2.z + ka), lda(ar.i2.w + ka));
        let a3 = vec4(lda(ar.i3.x + ka), lda(ar.i3.y + ka), lda(ar.i3.z + ka), lda(ar.i3.w + ka));
        let b0 = vec4(ldb(bc.i0.x + kb), ldb(bc.i0.y + kb), ldb(bc.i0.z + kb), ldb(bc.i0.w + kb));
        (*acc).c00 = upd1((*acc).c00, a0, b0);
        if (DM > 1u) { (*acc).c10 = upd1((*acc).c10, a1, b0); }
        if (DM > 2u) { (*acc).c20 = upd1((*acc).c20, a2, b0); }
        if (DM > 3u) { (*acc).c30 = upd1((*acc).c30, a3, b0); }
        if (DN > 1u) {
            let b1 = vec4(ldb(bc.i1.x + kb), ldb(bc.i1.y + kb), ldb(bc.i1.z + kb), ldb(bc.i1.w + kb));
            (*acc).c01 = upd1((*acc).c01, a0, b1);
            if (DM > 1u) { (*acc).c11 = upd1((*acc).c11, a1, b1); }
            if (DM > 2u) { (*acc).c21 = upd1((*acc).c21, a2, b1); }
            if (DM > 3u) { (*acc).c31 = upd1((*acc).c31, a3, b1); }
        }
        if (DN > 2u) {
            let b2 = vec4(ldb(bc.i2.x + kb), ldb(bc.i2.y + kb), ldb(bc.i2.z + kb), ldb(bc.i2.w + kb));
            (*acc).c02 = upd1((*acc).c02, a0, b2);
            if (DM > 1u) { (*acc).c12 = upd1((*acc).c12, a1, b2); }
            if (DM > 2u) { (*acc).c22 = upd1((*acc).c22, a2, b2); }
            if (DM > 3u) { (*acc).c32 = upd1((*acc).c32, a3, b2); }
        }
        if (DN > 3u) {
            let b3 = vec4(ldb(bc.i3.x + kb), ldb(bc.i3.y + kb), ldb(bc.i3.z + kb), ldb(bc.i3.w + kb));
            (*acc).c03 = upd1((*acc).c03, a0, b3);
            if (DM > 1u) { (*acc).c13 = upd1((*acc).c13, a1, b3); }
            if (DM > 2u) { (*acc).c23 = upd1((*acc).c23, a2, b3); }
            if (DM > 3u) { (*acc).c33 = upd1((*acc).c33, a3, b3); }
        }
    }
}

// Writes alpha·v (+ C) to row `row`, columns `col`..`col`+3 (those inside C).
fn put4(t: Tile, row: u32, col: u32, v: vec4<f32>) {
    let p = params;
    if (row >= p.m) { return; }
    let base = t.cbase + row * p.c_rs + col;
    var x = p.alpha * v;
    if (p.accumulate != 0u) {
        if (col < p.n) { x.x += c[base]; }
        if (col + 1u < p.n) { x.y += c[base + 1u]; }
        if (col + 2u < p.n) { x.z += c[base + 2u]; }
        if (col + 3u < p.n) { x.w += c[base + 3u]; }
    }
    if (col < p.n) { c[base] = x.x; }
    if (col + 1u < p.n) { c[base + 1u] = x.y; }
    if (col + 2u < p.n) { c[base + 2u] = x.z; }
    if (col + 3u < p.n) { c[base + 3u] = x.w; }
}

// Writes block rows t.row0 + r .. + 3, columns t.col0 + j .. + 3.
fn put(t: Tile, r: u32, j: u32, m: mat4x4<f32>) {
    put4(t, t.row0 + r, t.col0 + j, m[0]);
    put4(t, t.row0 + r + 1u, t.col0 + j, m[1]);
    put4(t, t.row0 + r + 2u, t.col0 + j, m[2]);
    put4(t, t.row0 + r + 3u, t.col0 + j, m[3]);
}

fn store(t: Tile, acc: Acc) {
    put(t, 0u, 0u, acc.c00);
    if (DN > 1u) { put(t, 0u, 4u, acc.c01); }
    if (DN > 2u) { put(t, 0u, 8u, acc.c02); }
    if (DN > 3u) { put(t, 0u, 12u, acc.c03); }
    if (DM > 1u) {
        put(t, 4u, 0u, acc.c10);
        if (DN > 1u) { put(t, 4u, 4u, acc.c11); }
        if (DN > 2u) { put(t, 4u, 8u, acc.c12); }
        if (DN > 3u) { put(t, 4u, 12u, acc.c13); }
    }
    if (DM > 2u) {
        put(t, 8u, 0u, acc.c20);
        if (DN > 1u) { put(t, 8u, 4u, acc.c21); }
        if (DN > 2u) { put(t, 8u, 8u, acc.c22); }
        if (DN > 3u) { put(t, 8u, 12u, acc.c23); }
    }
    if (DM > 3u) {
        put(t, 12u, 0u, acc.c30);
        if (DN > 1u) { put(t, 12u, 4u, acc.c31); }
        if (DN > 2u) { put(t, 12u, 8u, acc.c32); }
        if (DN > 3u) { put(t, 12u, 12u, acc.c33); }
    }
}

// The entry points differ only in how a group of four K steps is loaded. Each loads all of A's
// row blocks, then one B column block at a time (fewest values live at once). A's row blocks are
// the same for every invocation with the same lid.y (the same rows): in the `…g` variants (CPU
// adapters whose subgroups are DX invocations of one lid.y or fewer) invocation 0 of each
// subgroup loads them (`lead`) and `sg_ablk` broadcasts them, through the `mm_*_g` entry points
// the variant adds; elsewhere `lead` is true and `sg_ablk` returns its argument.

@compute @workgroup_size(DX, DY, 1)
fn mm_kk(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
    body_kk(wid, nwg, lid, true);
}

fn body_kk(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>, lead: bool) {
    let p = params;
    let ti = tile_index(wid, nwg);
    if (ti.w == 0u) { return; }
    let t = tile_of(ti, lid);
    let ar = quarter(a_rows(t));
    let bc = quarter(b_cols(t));
    var acc: Acc;
    let ks = k_span(ti.y * p.bm);
    let nq = ks.y / 4u;
    for (var q = ks.x / 4u; q < nq; q++) {
        var ab: Ablk;
        if (lead) {
            ab.a0 = lda_k4(ar.i0, q);
            if (DM > 1u) { ab.a1 = lda_k4(ar.i1, q); }
            if (DM > 2u) { ab.a2 = lda_k4(ar.i2, q); }
            if (DM > 3u) { ab.a3 = lda_k4(ar.i3, q); }
        }
        ab = sg_ablk(ab);
        col0(&acc, ab, ldb_k4(bc.i0, q));
        if (DN > 1u) { col1(&acc, ab, ldb_k4(bc.i1, q)); }
        if (DN > 2u) { col2(&acc, ab, ldb_k4(bc.i2, q)); }
        if (DN > 3u) { col3(&acc, ab, ldb_k4(bc.i3, q)); }
    }
    tail(&acc, t, nq * 4u, ks.y);
    store(t, acc);
}

@compute @workgroup_size(DX, DY, 1)
fn mm_kn(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
    body_kn(wid, nwg, lid, true);
}

fn body_kn(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>, lead: bool) {
    let p = params;
    let ti = tile_index(wid, nwg);
    if (ti.w == 0u) { return; }
    let t = tile_of(ti, lid);
    let ar = quarter(a_rows(t));
    let bg = b_groups(t);
    var acc: Acc;
    let ks = k_span(ti.y * p.bm);
    let nq = ks.y / 4u;
    for (var q = ks.x / 4u; q < nq; q++) {
        let k = q * 4u;
        var ab: Ablk;
        if (lead) {
            ab.a0 = lda_k4(ar.i0, q);
            if (DM > 1u) { ab.a1 = lda_k4(ar.i1, q); }
            if (DM > 2u) { ab.a2 = lda_k4(ar.i2, q); }
            if (DM > 3u) { ab.a3 = lda_k4(ar.i3, q); }
        }
        ab = sg_ablk(ab);
        col0(&acc, ab, ldb_x4(bg.x, k, p.b_rs));
        if (DN > 1u) { col1(&acc, ab, ldb_x4(bg.y, k, p.b_rs)); }
        if (DN > 2u) { col2(&acc, ab, ldb_x4(bg.z, k, p.b_rs)); }
        if (DN > 3u) { col3(&acc, ab, ldb_x4(bg.w, k, p.b_rs)); }
    }
    tail(&acc, t, nq * 4u, ks.y);
    store(t, acc);
}

@compute @workgroup_size(DX, DY, 1)
fn mm_mn(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
    body_mn(wid, nwg, lid, true);
}

fn body_mn(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>, lead: bool) {
    let p = params;
    let ti = tile_index(wid, nwg);
    if (ti.w == 0u) { return; }
    let t = tile_of(ti, lid);
    let ag = a_groups(t);
    let bg = b_groups(t);
    var acc: Acc;
    let ks = k_span(ti.y * p.bm);
    let k4 = ks.y & ~3u;
    for (var k = ks.x; k < k4; k += 4u) {
        var ab: Ablk;
        if (lead) {
            ab.a0 = lda_x4(ag.x, k, p.a_cs);
            if (DM > 1u) { ab.a1 = lda_x4(ag.y, k, p.a_cs); }
            if (DM > 2u) { ab.a2 = lda_x4(ag.z, k, p.a_cs); }
            if (DM > 3u) { ab.a3 = lda_x4(ag.w, k, p.a_cs); }
        }
        ab = sg_ablk(ab);
        col0(&acc, ab, ldb_x4(bg.x, k, p.b_rs));
        if (DN > 1u) { col1(&acc, ab, ldb_x4(bg.y, k, p.b_rs)); }
        if (DN > 2u) { col2(&acc, ab, ldb_x4(bg.z, k, p.b_rs)); }
        if (DN > 3u) { col3(&acc, ab, ldb_x4(bg.w, k, p.b_rs)); }
    }
    tail(&acc, t, k4, ks.y);
    store(t, acc);
}

@compute @workgroup_size(DX, DY, 1)
fn mm_mk(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
    body_mk(wid, nwg, lid, true);
}

fn body_mk(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>, lead: bool) {
    let p = params;
    let ti = tile_index(wid, nwg);
    if (ti.w == 0u) { return; }
    let t = tile_of(ti, lid);
    let ag = a_groups(t);
    let bc = quarter(b_cols(t));
    var acc: Acc;
    let ks = k_span(ti.y * p.bm);
    let nq = ks.y / 4u;
    for (var q = ks.x / 4u; q < nq; q++) {
        let k = q * 4u;
        var ab: Ablk;
        if (lead) {
            ab.a0 = lda_x4(ag.x, k, p.a_cs);
            if (DM > 1u) { ab.a1 = lda_x4(ag.y, k, p.a_cs); }
            if (DM > 2u) { ab.a2 = lda_x4(ag.z, k, p.a_cs); }
            if (DM > 3u) { ab.a3 = lda_x4(ag.w, k, p.a_cs); }
        }
        ab = sg_ablk(ab);
        col0(&acc, ab, ldb_k4(bc.i0, q));
        if (DN > 1u) { col1(&acc, ab, ldb_k4(bc.i1, q)); }
        if (DN > 2u) { col2(&acc, ab, ldb_k4(bc.i2, q)); }
        if (DN > 3u) { col3(&acc, ab, ldb_k4(bc.i3, q)); }
    }
    tail(&acc, t, nq * 4u, ks.y);
    store(t, acc);
}

@compute @workgroup_size(DX, DY, 1)
fn mm_ss(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) {
    let p = params;
    let ti = tile_index(wid, nwg);
    if (ti.w == 0u) { return; }
    let t = tile_of(ti, lid);
    let ar = a_rows(t);
    let bc = b_cols(t);
    var acc: Acc;
    let ks = k_span(ti.y * p.bm);
    let k4 = ks.y & ~3u;
    for (var k = ks.x; k < k4; k += 4u) {
        var ab: Ablk;
        ab.a0 = lda_s(ar.i0, k, p.a_cs);
        if (DM > 1u) { ab.a1 = lda_s(ar.i1, k, p.a_cs); }
        if (DM > 2u) { ab.a2 = lda_s(ar.i2, k, p.a_cs); }
        if (DM > 3u) { ab.a3 = lda_s(ar.i3, k, p.a_cs); }
        col0(&acc, ab, ldb_s(bc.i0, k, p.b_rs));
        if (DN > 1u) { col1(&acc, ab, ldb_s(bc.i1, k, p.b_rs)); }
        if (DN > 2u) { col2(&acc, ab, ldb_s(bc.i2, k, p.b_rs)); }
        if (DN > 3u) { col3(&acc, ab, ldb_s(bc.i3, k, p.b_rs)); }
    }
    tail(&acc, t, k4, ks.y);
    store(t, acc);
}

// ---------------------------------------------------------------------------------------------
// `wm_*`: workgroup-memory stages with register blocks (the staged variants w128, w128k16, w64;
// the GPU kernel). 16×16 invocations; invocation (tx, ty) owns DM×DN blocks of 4×4 outputs, block
// (I, J) at rows 64·I + 4·ty + i and columns 64·J + 4·tx + j of the BM×BN tile (BM = 64·DM,
// BN = 64·DN). K advances BK (8 or 16) steps at a time through two stages of workgroup memory: while
// one stage is read, the next K slice is loaded from the buffers into registers and stored into
// the other stage, so one barrier per slice suffices. Both stages hold each slice as
// [k][rows / 4] vec4s (A) and [k][columns / 4] vec4s (B), read four outputs' operands per load.
//
// A slice is loaded with vec4s along K or along M/N as the entry point's layout allows (the
// `mm_*` entry points' layout checks; a layout with no vec4 form runs `mm_ss`, whose constants
// DX = DY = 16, DM, DN give the same BM×BN tile); the last slice, when BK does not divide K,
// uses scalar loads, which give zero past K. Steps past K then add 0·0 to every
// accumulator, which leaves it bit for bit unchanged (see `matmul`), so every output is still
// acc = fma(A[i,p], B[p,j], acc) for p = 0 … K−1 in order: bit-identical to every other variant.

const WA: u32 = BM / 4u;               // vec4s per K step of an A slice
const WB: u32 = BN / 4u;               // … and of a B slice
// Load slots per invocation and operand: a slice of BK K steps is BK·WA vec4s of A (BK·WB of B)
// over 256 invocations; at most 2 (the tiles in src/shaders.rs keep BK·BM/4 ≤ 512).
const WSLOTS: u32 = (BK * max(WA, WB) + 255u) / 256u;
var<workgroup> Wa: array<vec4<f32>, 2u * BK * (BM / 4u)>;
var<workgroup> Wb: array<vec4<f32>, 2u * BK * (BN / 4u)>;

// Mode of an operand's loads: 0 vec4s along K, 1 vec4s along M (A) or N (B), 2 scalars.
// Slot e (< BK·WA for A) of a slice starting at k0. Mode 0: row e / WQ, K steps 4·(e % WQ) …+3
// (WQ = BK / 4 vec4s per row: neighbouring invocations read one row's slice together, whole
// 32-byte sectors, where spreading them over rows, as before session 24, read half sectors —
// on an H200 the products with more mode-0 operands ran slower: tn 50.4 %, nn 47.6 %, nt 46.4 %
// of peak). Modes 1, 2: K step e / WA, rows 4·(e % WA) …+3 (clamped to the last row / the last
// whole vec4).
const WQ: u32 = BK / 4u;
fn wm_load_a(mode: u32, base: u32, row0: u32, k0: u32, e: u32) -> vec4<f32> {
    let p = params;
    if (mode == 0u) {
        let r = min(row0 + e / WQ, p.m - 1u);
        return lda4((base + r * p.a_rs) / 4u + k0 / 4u + e % WQ);
    }
    let k = k0 + e / WA;
    let r = row0 + 4u * (e % WA);
    if (mode == 1u) {
        let last = ((p.m + 3u) & ~3u) - 4u;
        return lda4((base + k * p.a_cs + min(r, last)) / 4u);
    }
    if (k >= p.k) { return vec4<f32>(0.0); }
    let o = base + k * p.a_cs;
    let l = p.m - 1u;
    return vec4<f32>(lda(o + min(r, l) * p.a_rs), lda(o + min(r + 1u, l) * p.a_rs),
                     lda(o + min(r + 2u, l) * p.a_rs), lda(o + min(r + 3u, l) * p.a_rs));
}
fn wm_load_b(mode: u32, base: u32, col0: u32, k0: u32, e: u32) -> vec4<f32> {
    let p = params;
    if (mode == 0u) {
        let c = min(col0 + e / WQ, p.n - 1u);
        return ldb4((base + c * p.b_cs) / 4u + k0 / 4u + e % WQ);
    }
    let k = k0 + e / WB;
    let c = col0 + 4u * (e % WB);
    if (mode == 1u) {
        let last = ((p.n + 3u) & ~3u) - 4u;
        return ldb4((base + k * p.b_rs + min(c, last)) / 4u);
    }
    if (k >= p.k) { return vec4<f32>(0.0); }
    let o = base + k * p.b_rs;
    let l = p.n - 1u;
    return vec4<f32>(ldb(o + min(c, l) * p.b_cs), ldb(o + min(c + 1u, l) * p.b_cs),
                     ldb(o + min(c + 2u, l) * p.b_cs), ldb(o + min(c + 3u, l) * p.b_cs));
}
// Stores slot e's values into stage `s` (mode 0: four K steps of one row; else one K step of
// four rows).
fn wm_store_a(mode: u32, s: u32, e: u32, v: vec4<f32>) {
    let o = s * BK * WA;
    if (mode == 0u) {
        let r = e / WQ;
        let k = 4u * (e % WQ);
        Wa[o + k * WA + r / 4u][r % 4u] = v.x;
        Wa[o + (k + 1u) * WA + r / 4u][r % 4u] = v.y;
        Wa[o + (k + 2u) * WA + r / 4u][r % 4u] = v.z;
        Wa[o + (k + 3u) * WA + r / 4u][r % 4u] = v.w;
    } else {
        Wa[o + e] = v;
    }
}
fn wm_store_b(mode: u32, s: u32, e: u32, v: vec4<f32>) {
    let o = s * BK * WB;
    if (mode == 0u) {
        let c = e / WQ;
        let k = 4u * (e % WQ);
        Wb[o + k * WB + c / 4u][c % 4u] = v.x;
        Wb[o + (k + 1u) * WB + c / 4u][c % 4u] = v.y;
        Wb[o + (k + 2u) * WB + c / 4u][c % 4u] = v.z;
        Wb[o + (k + 3u) * WB + c / 4u][c % 4u] = v.w;
    } else {
        Wb[o + e] = v;
    }
}

// One slice's loads into registers (slots tid and tid + 256), and their stores into a stage.
struct WRegs { a0: vec4<f32>, a1: vec4<f32>, b0: vec4<f32>, b1: vec4<f32> }
fn wm_load(t: Tile, ma: u32, mb: u32, k0: u32, e: u32) -> WRegs {
    var r: WRegs;
    if (e < BK * WA) { r.a0 = wm_load_a(ma, t.abase, t.row0, k0, e); }
    if (e < BK * WB) { r.b0 = wm_load_b(mb, t.bbase, t.col0, k0, e); }
    if (WSLOTS > 1u) {
        if (e + 256u < BK * WA) { r.a1 = wm_load_a(ma, t.abase, t.row0, k0, e + 256u); }
        if (e + 256u < BK * WB) { r.b1 = wm_load_b(mb, t.bbase, t.col0, k0, e + 256u); }
    }
    return r;
}
fn wm_store(r: WRegs, ma: u32, mb: u32, s: u32, e: u32) {
    if (e < BK * WA) { wm_store_a(ma, s, e, r.a0); }
    if (e < BK * WB) { wm_store_b(mb, s, e, r.b0); }
    if (WSLOTS > 1u) {
        if (e + 256u < BK * WA) { wm_store_a(ma, s, e + 256u, r.a1); }
        if (e + 256u < BK * WB) { wm_store_b(mb, s, e + 256u, r.b1); }
    }
}

// `diag`: 0 the product; the diagnostic halves (`wm_kk_mma`, `wm_kk_stage`, `wm_kk_fma`, below)
// 1, 2 and 3.
fn wm_body(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>, am: u32, bmode: u32, diag: u32) {
    let p = params;
    let ti = tile_index(wid, nwg);
    if (ti.w == 0u) { return; }
    let t = Tile(ti.y * BM, ti.x * BN,
                 p.a_off + batch_off(ti.z, p.a_bs, p.a_os),
                 p.b_off + batch_off(ti.z, p.b_bs, p.b_os),
                 p.c_off + batch_off(ti.z, p.c_bs, p.c_os));
    let e = lid.y * 16u + lid.x;
    // The invocation's place (tx, ty) in the 16 × 16 grid of 4 × 4 blocks: lid itself (a
    // subgroup of 32 holds two rows of 16), or with WT (variant `w128w`) subgroup e / 32 holds
    // the 4 × 8 block of rows 4·(w / 2) … +3 and columns 8·(w % 2) … +7 (CUTLASS's warp tiles:
    // per K step its lanes read 4 + 8 distinct vec4s of the stages, not 2 + 16).
    var tx = lid.x;
    var ty = lid.y;
    if (WT == 1u) {
        let w = e / 32u;
        let l = e % 32u;
        tx = (w % 2u) * 8u + l % 8u;
        ty = (w / 2u) * 4u + l / 8u;
    }
    // The slices the tile sums: [s0, nslices) (all of K but for causal products, whose ends
    // are multiples of BK or K itself).
    let ks = k_span(t.row0);
    let s0 = ks.x / BK;
    let nfull = ks.y / BK;
    let nslices = (ks.y + BK - 1u) / BK;
    var c00: mat4x4<f32>; var c01: mat4x4<f32>; var c10: mat4x4<f32>; var c11: mat4x4<f32>;
    // The first slice into its stage.
    {
        let full = nfull > s0;
        let ma = select(2u, am, full);
        let mb = select(2u, bmode, full);
        let r0 = wm_load(t, ma, mb, s0 * BK, e);
        wm_store(r0, ma, mb, s0 % 2u, e);
        // (The arithmetic alone reads both stages: both hold the first slice.)
        if (diag == 1u || diag == 3u) { wm_store(r0, ma, mb, (s0 + 1u) % 2u, e); }
    }
    workgroupBarrier();
    for (var s = s0; s < nslices; s++) {
        // The next slice's loads go out before this slice's arithmetic.
        let next = s + 1u < nslices && diag != 1u && diag != 3u;
        let full = s + 1u < nfull;
        let ma = select(2u, am, full);
        let mb = select(2u, bmode, full);
        var regs: WRegs;
        if (next) { regs = wm_load(t, ma, mb, (s + 1u) * BK, e); }
        let oa = (s % 2u) * BK * WA;
        let ob = (s % 2u) * BK * WB;
        // (The staging alone computes the last slice only, so that every output is written.)
        if (diag == 3u && s + 1u < nslices) {
            // (The FMAs alone: the slice's first K step's operands, read once, for all BK steps.)
            let a0 = Wa[oa + ty];
            let b0 = Wb[ob + tx];
            var a1 = a0;
            var b1 = b0;
            if (DM > 1u) { a1 = Wa[oa + 16u + ty]; }
            if (DN > 1u) { b1 = Wb[ob + 16u + tx]; }
            for (var kk = 0u; kk < BK; kk++) {
                c00 = upd1(c00, a0, b0);
                if (DN > 1u) { c01 = upd1(c01, a0, b1); }
                if (DM > 1u) { c10 = upd1(c10, a1, b0); }
                if (DM > 1u && DN > 1u) { c11 = upd1(c11, a1, b1); }
            }
        } else if (diag != 2u || s + 1u == nslices) {
            for (var kk = 0u; kk < BK; kk++) {
                let a0 = Wa[oa + kk * WA + ty];
                let b0 = Wb[ob + kk * WB + tx];
                c00 = upd1(c00, a0, b0);
                if (DN > 1u) {
                    let b1 = Wb[ob + kk * WB + 16u + tx];
                    c01 = upd1(c01, a0, b1);
                    if (DM > 1u) {
                        let a1 = Wa[oa + kk * WA + 16u + ty];
                        c10 = upd1(c10, a1, b0);
                        c11 = upd1(c11, a1, b1);
                    }
                } else if (DM > 1u) {
                    let a1 = Wa[oa + kk * WA + 16u + ty];
                    c10 = upd1(c10, a1, b0);
                }
            }
        }
        if (next) { wm_store(regs, ma, mb, (s + 1u) % 2u, e); }
        workgroupBarrier();
    }
    let r = 4u * ty;
    let cl = 4u * tx;
    put(t, r, cl, c00);
    if (DN > 1u) { put(t, r, 64u + cl, c01); }
    if (DM > 1u) {
        put(t, 64u + r, cl, c10);
        if (DN > 1u) { put(t, 64u + r, 64u + cl, c11); }
    }
}

@compute @workgroup_size(16, 16, 1)
fn wm_kk(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) { wm_body(wid, nwg, lid, 0u, 0u, 0u); }
@compute @workgroup_size(16, 16, 1)
fn wm_kn(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) { wm_body(wid, nwg, lid, 0u, 1u, 0u); }
@compute @workgroup_size(16, 16, 1)
fn wm_mn(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) { wm_body(wid, nwg, lid, 1u, 1u, 0u); }
@compute @workgroup_size(16, 16, 1)
fn wm_mk(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_id) lid: vec3<u32>) { wm_body(wid, nwg, lid, 1u, 0u, 0u); }

// The diagnostic halves of the staged tiles (variants `w128:mma`, `w128:stage`, any staged tile;
// `ddl bench matmul --cases nt` only: never picked, their results are not the product past one
// K slice), for products whose operands both lie along K (`wm_kk`): where the kernel's time
// goes on a GPU. `_mma`: the first slice staged into both stages, then every slice's
// workgroup-memory reads, FMAs and barrier without loads or stores; `_stage`: every slice's
// loads, stores and barrier, the arithmetic of the last slice only. With K ≤ BK (one slice)
// both compute the product, bit for bit. `_fma` (session 70): `_mma` without the workgroup-memory
// reads: every slice but the last runs its BK steps' FMAs on the operands of its first step,
// read once; the last slice is the product's (so with K ≤ BK it is the product, bit for bit).
// `_mma` against `_fma`: the loop's reads and addressing against its FMAs.
@compute @workgroup_size(16, 16, 1)
fn wm_kk_mma(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_id) lid: vec3<u32>) { wm_body(wid, nwg, lid, 0u, 0u, 1u); }
@compute @workgroup_size(16, 16, 1)
fn wm_kk_stage(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_id) lid: vec3<u32>) { wm_body(wid, nwg, lid, 0u, 0u, 2u); }
@compute @workgroup_size(16, 16, 1)
fn wm_kk_fma(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_id) lid: vec3<u32>) { wm_body(wid, nwg, lid, 0u, 0u, 3u); }
