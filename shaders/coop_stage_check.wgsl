// The cooperative-matrix kernels' staging, run where there are no cooperative matrices (lavapipe):
// the part `coop_staging` that `mm_coop128` and `mm_coop8` share, in `mm_coop128`'s loop — the
// first slice loaded into registers (as f16), then per slice: a barrier, the stash into workgroup
// memory, a barrier, the next slice's loads — with the fragment products replaced by a copy of
// the staged slice to `c`. tests/kernels/matmul.rs compares every staged element of every tile
// and slice with the operands (vec4 and scalar loads, every layout, edges, tails, batches).
// Not a product: `c` receives, per tile (in the grid's order) and slice, QBM·QBK values of A's
// slice then QBK·QBN of B's.

const QBM: u32 = 128u;
const QBN: u32 = 128u;
const QBK: u32 = 32u;
const QAP: u32 = 40u;
const QBP: u32 = 136u;
const NT: u32 = 256u;
const QPT: u32 = QBM * QBK / 4u / NT;
const SLICE: u32 = QBM * QBK + QBK * QBN;

@group(0) @binding(3) var<storage, read_write> c: array<f32>;

var<workgroup> Qa: array<f16, QBM * QAP>;
var<workgroup> Qb: array<f16, QBK * QBP>;

@compute @workgroup_size(NT)
fn stage_dump(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let p = params;
    let ti = tile_index(wid, nwg);
    let live = ti.w != 0u;
    let row0 = ti.y * QBM;
    let col0 = ti.x * QBN;
    let a_base = p.a_off + batch_off(ti.z, p.a_bs, p.a_os);
    let b_base = p.b_off + batch_off(ti.z, p.b_bs, p.b_os);
    let nslices = (p.k + QBK - 1u) / QBK;
    let tile = wid.y * nwg.x + wid.x;
    var ra: array<vec4<f16>, QPT>;
    var rb: array<vec4<f16>, QPT>;
    for (var i = 0u; i < QPT; i++) {
        ra[i] = vec4<f16>(a_quad(li + i * NT, 0u, row0, a_base, live));
        rb[i] = vec4<f16>(b_quad(li + i * NT, 0u, col0, b_base, live));
    }
    for (var s = 0u; s < nslices; s++) {
        let k0 = s * QBK;
        workgroupBarrier();
        for (var i = 0u; i < QPT; i++) {
            a_stash(li + i * NT, ra[i]);
            b_stash(li + i * NT, rb[i]);
        }
        workgroupBarrier();
        if (k0 + QBK < p.k) {
            for (var i = 0u; i < QPT; i++) {
                ra[i] = vec4<f16>(a_quad(li + i * NT, k0 + QBK, row0, a_base, live));
                rb[i] = vec4<f16>(b_quad(li + i * NT, k0 + QBK, col0, b_base, live));
            }
        }
        if (live) {
            let o = (tile * nslices + s) * SLICE;
            for (var e = li; e < QBM * QBK; e += NT) {
                c[o + e] = f32(Qa[(e / QBK) * QAP + e % QBK]);
            }
            for (var e = li; e < QBK * QBN; e += NT) {
                c[o + QBM * QBK + e] = f32(Qb[(e / QBN) * QBP + e % QBN]);
            }
        }
    }
}
