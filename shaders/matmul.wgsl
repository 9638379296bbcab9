// Batched, strided matrix multiply: C[b] = alpha · op(A[b]) · op(B[b])  (+ C[b] when accumulating).
//
// A is the logical M×K matrix whose element (i, p) lives at a_off + b·a_bs + i·a_rs + p·a_cs, so a
// row-major A (a_rs = K, a_cs = 1) and a transposed one stored K×M (a_rs = 1, a_cs = M) are the
// same kernel. Likewise B is K×N with (p, j) at b_off + b·b_bs + p·b_rs + j·b_cs, and C is a
// row-major M×N at c_off + b·c_bs + i·c_rs + j. All offsets are in elements.
//
// Tiling (constants from the variant prelude, see src/shaders.rs): a workgroup owns a BM×BN tile
// of C, each invocation TM×TN outputs spaced WY rows / WX columns apart (so neighbouring
// invocations read neighbouring shared-memory words). K advances BK at a time through shared
// memory. Out-of-range rows, columns and depths load zeros, so any M, N, K ≥ 1 works. Every output
// is summed over p = 0, 1, …, K−1 in order: results do not depend on the variant's tiling of M, N
// and are identical run to run.

struct Params {
    m: u32, n: u32, k: u32, accumulate: u32,
    a_off: u32, a_rs: u32, a_cs: u32, a_bs: u32,
    b_off: u32, b_rs: u32, b_cs: u32, b_bs: u32,
    c_off: u32, c_rs: u32, c_bs: u32, alpha: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

const WX: u32 = BN / TN;   // invocations along N
const WY: u32 = BM / TM;   // invocations along M
const NT: u32 = WX * WY;

var<workgroup> As: array<f32, BK * BM>;   // [BK][BM]
var<workgroup> Bs: array<f32, BK * BN>;   // [BK][BN]

@compute @workgroup_size(WX, WY, 1)
fn matmul(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let p = params;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let tid = lid.y * WX + lid.x;
    let a_base = p.a_off + wid.z * p.a_bs;
    let b_base = p.b_off + wid.z * p.b_bs;
    // Walk memory contiguously when loading: along K if A's rows are contiguous, else along M.
    let a_k_fast = p.a_cs == 1u;
    let b_n_fast = p.b_cs == 1u;

    var acc: array<f32, TM * TN>;
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        for (var e = tid; e < BM * BK; e += NT) {
            var r: u32;
            var kk: u32;
            if (a_k_fast) { r = e / BK; kk = e % BK; } else { kk = e / BM; r = e % BM; }
            let gi = row0 + r;
            let gk = k0 + kk;
            var v = 0.0;
            if (gi < p.m && gk < p.k) { v = a[a_base + gi * p.a_rs + gk * p.a_cs]; }
            As[kk * BM + r] = v;
        }
        for (var e = tid; e < BK * BN; e += NT) {
            var kk: u32;
            var cc: u32;
            if (b_n_fast) { kk = e / BN; cc = e % BN; } else { cc = e / BK; kk = e % BK; }
            let gk = k0 + kk;
            let gj = col0 + cc;
            var v = 0.0;
            if (gk < p.k && gj < p.n) { v = b[b_base + gk * p.b_rs + gj * p.b_cs]; }
            Bs[kk * BN + cc] = v;
        }
        workgroupBarrier();
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

    let c_base = p.c_off + wid.z * p.c_bs;
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
