// Deterministic reductions: Σ x² (or Σ x) of a flat buffer, and column sums of a row-major matrix.
//
// Every sum has a fixed order that depends only on the sizes: each invocation adds its elements
// sequentially, then the workgroup combines the invocations with a fixed binary tree in shared
// memory. No atomics, so the same inputs give the same bits run after run.
//
// sum_squares_partial / sum_partial: workgroup g sums the block [g·BLOCK, (g+1)·BLOCK) of `src`
// (BLOCK = 256 · 16 elements, each invocation reading 16 elements 256 apart, so loads coalesce) into
// dst[out_base + g]. The launcher chains them: squares of the input into per-block partials, then
// plain sums of the partials until one value is left. A buffer larger than one binding is bound in
// chunks of whole blocks, each chunk writing its partials at its own `out_base`, so the result does
// not depend on the chunking. `sum_squares_partial4` (n a multiple of 4) reads the same block as
// vec4s: each invocation PER/4 vec4s 256 apart, their components added in order.
//
// col_sum: dst[(out_block0 + blk)·cols + c] (+)= Σ_{r in block blk} src[r·cols + c]. A workgroup
// owns `ct` columns (a power of two ≤ 256) and one block of `rpb` rows; its 256/ct "row lanes" each
// add every (256/ct)-th row of the block, then a tree combines the lanes. The launcher runs it once
// (one block covering all rows, straight into the output) or twice (per-block partials, then one
// block over the partials).
//
// col_sum_seq / col_sum_seq4: the same sums for few rows (the K pieces of a split matmul, a handful
// of chunk partials): one invocation per column (per 4 columns as a vec4 when `cols` is a multiple
// of 4), rows added in order, no workgroup memory and no barriers. The tree above spent ~9
// barriers per workgroup to add 2–6 rows; on llvmpipe a barrier costs more than the loads.

struct Params {
    n: u32,            // sum_*: elements of `src` in this dispatch
    out_base: u32,     // sum_*: index in `dst` of this dispatch's first partial
    rows: u32,         // col_sum: rows of `src` in this dispatch
    cols: u32,         // col_sum: columns
    ct: u32,           // col_sum: columns per workgroup (power of two, ≤ 256)
    rpb: u32,          // col_sum: rows per block
    ctiles: u32,       // col_sum: ceil(cols / ct)
    nblocks: u32,      // col_sum: row blocks in this dispatch
    out_block0: u32,   // col_sum: block index (row of `dst`) of this dispatch's first block
    accumulate: u32,   // col_sum: 1 = add into dst
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
// `src` four elements at a time (`sum_squares_partial4`: n a multiple of 4; `col_sum_seq4`).
@group(0) @binding(3) var<storage, read> src4: array<vec4<f32>>;
// `dst` four elements at a time (`col_sum_seq4`).
@group(0) @binding(4) var<storage, read_write> dst4: array<vec4<f32>>;

const WG: u32 = 256u;
const PER: u32 = 16u;
const BLOCK: u32 = 4096u;   // WG * PER

var<workgroup> sh: array<f32, WG>;

// Sums sh[0..WG) into sh[0] with a fixed tree. Must be called in uniform control flow.
fn tree_sum(lid: u32) {
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h >>= 1u) {
        if (lid < h) {
            sh[lid] += sh[lid + h];
        }
        workgroupBarrier();
    }
}

fn block_sum(g: u32, lid: u32, square: bool) {
    let start = g * BLOCK;
    var acc = 0.0;
    for (var k = 0u; k < PER; k++) {
        let i = start + k * WG + lid;
        if (i < params.n) {
            let x = src[i];
            if (square) {
                acc = fma(x, x, acc);
            } else {
                acc += x;
            }
        }
    }
    block_store(g, lid, acc);
}

// Combines the invocations' sums of block g with the fixed tree into dst[out_base + g].
fn block_store(g: u32, lid: u32, acc: f32) {
    sh[lid] = acc;
    tree_sum(lid);
    if (lid == 0u) {
        dst[params.out_base + g] = sh[0];
    }
}

@compute @workgroup_size(256)
fn sum_squares_partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = wid.y * nwg.x + wid.x;
    // Always write block 0, so that an empty input sums to 0.
    if (g > 0u && g * BLOCK >= params.n) {
        return;
    }
    block_sum(g, lid, true);
}

@compute @workgroup_size(256)
fn sum_squares_partial4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = wid.y * nwg.x + wid.x;
    if (g > 0u && g * BLOCK >= params.n) {
        return;
    }
    let start = g * (BLOCK / 4u);
    let n4 = params.n / 4u;
    var acc = 0.0;
    for (var k = 0u; k < PER / 4u; k++) {
        let i = start + k * WG + lid;
        if (i < n4) {
            let x = src4[i];
            acc = fma(x.x, x.x, acc);
            acc = fma(x.y, x.y, acc);
            acc = fma(x.z, x.z, acc);
            acc = fma(x.w, x.w, acc);
        }
    }
    block_store(g, lid, acc);
}

@compute @workgroup_size(256)
fn sum_partial(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = wid.y * nwg.x + wid.x;
    if (g > 0u && g * BLOCK >= params.n) {
        return;
    }
    block_sum(g, lid, false);
}

@compute @workgroup_size(256)
fn col_sum(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let g = wid.y * nwg.x + wid.x;
    let tile = g % p.ctiles;
    let blk = g / p.ctiles;
    if (blk >= p.nblocks) {
        return;
    }
    let lanes = WG / p.ct;
    let cl = lid % p.ct;      // column within the tile
    let lane = lid / p.ct;    // row lane
    let c = tile * p.ct + cl;
    let r0 = blk * p.rpb;
    let r1 = min(p.rows, r0 + p.rpb);
    var acc = 0.0;
    if (c < p.cols) {
        for (var r = r0 + lane; r < r1; r += lanes) {
            acc += src[r * p.cols + c];
        }
    }
    sh[lid] = acc;   // lid = lane·ct + cl
    workgroupBarrier();
    for (var h = lanes / 2u; h > 0u; h >>= 1u) {
        if (lane < h) {
            sh[lid] += sh[lid + h * p.ct];
        }
        workgroupBarrier();
    }
    if (lane == 0u && c < p.cols) {
        let o = (p.out_block0 + blk) * p.cols + c;
        var v = sh[cl];
        if (p.accumulate != 0u) {
            v += dst[o];
        }
        dst[o] = v;
    }
}

@compute @workgroup_size(64)
fn col_sum_seq(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let c = (wid.y * nwg.x + wid.x) * 64u + lid;
    if (c >= p.cols) {
        return;
    }
    var acc = 0.0;
    for (var r = 0u; r < p.rows; r++) {
        acc += src[r * p.cols + c];
    }
    if (p.accumulate != 0u) {
        acc += dst[c];
    }
    dst[c] = acc;
}

@compute @workgroup_size(64)
fn col_sum_seq4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let c = (wid.y * nwg.x + wid.x) * 64u + lid;
    let c4 = p.cols / 4u;
    if (c >= c4) {
        return;
    }
    var acc = vec4<f32>();
    for (var r = 0u; r < p.rows; r++) {
        acc += src4[r * c4 + c];
    }
    if (p.accumulate != 0u) {
        acc += dst4[c];
    }
    dst4[c] = acc;
}

// sum_squares_seq4 (CPU adapters): dst[out_base + g] = Σ x² over block g, the block's vec4s added
// in order by one invocation (components x, y, z, w in order) — no workgroup tree. One partial per
// BLOCK elements as in `sum_squares_partial4`, so chunking keeps the bits. n a multiple of 4.
@compute @workgroup_size(32)
fn sum_squares_seq4(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = (wid.y * nwg.x + wid.x) * 32u + lid;
    // Always write block 0, so that an empty input sums to 0.
    if (g > 0u && g * BLOCK >= params.n) {
        return;
    }
    let n4 = params.n / 4u;
    let start = g * (BLOCK / 4u);
    let end = min(start + BLOCK / 4u, n4);
    var acc = 0.0;
    for (var i = start; i < end; i++) {
        let x = src4[i];
        acc = fma(x.x, x.x, acc);
        acc = fma(x.y, x.y, acc);
        acc = fma(x.z, x.z, acc);
        acc = fma(x.w, x.w, acc);
    }
    dst[params.out_base + g] = acc;
}
