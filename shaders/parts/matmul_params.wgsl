// The matmul kernels' parameters (`shaders/matmul.wgsl`, `shaders/matmul_coop.wgsl`): the product's
// shape, operand layouts and grid, and the grid's tile index.
struct Params {
    m: u32, n: u32, k: u32, accumulate: u32,
    a_off: u32, a_rs: u32, a_cs: u32, a_bs: u32,
    b_off: u32, b_rs: u32, b_cs: u32, b_bs: u32,
    c_off: u32, c_rs: u32, c_bs: u32, alpha: f32,
    // The grid: tiles_n × tiles_m tiles per batch, `total` in all, linearised over the
    // workgroups' x and y (each at most 65535) in the order n, m, batch.
    tiles_n: u32, tiles_m: u32, total: u32,
    // Which operands the quad-staged kernels (`mm_coop128`, `mm_coop128v`, `mm_coop8`) may read
    // as vec4s (the launcher checks alignment): 1 A along K, 2 A along M, 4 B along N, 8 B along
    // K; 16 and 32: `mm_coop128v`'s diagnostic modes; 64: `mm_coop_mma`'s. Zero for every other kernel.
    vec4s: u32,
    // Two batch levels: batch index z is product z % nb_in of group z / nb_in; a group moves the
    // operands by a_os / b_os / c_os elements (nb_in = the batch count and zero strides when
    // there is one level).
    nb_in: u32, a_os: u32, b_os: u32, c_os: u32,
    // The causal structure of an attention product over a whole T × T score matrix (form
    // `attention=causal`, src/kernels/attention.rs), in granules of `gran` rows / keys
    // (a multiple of every tile's rows and K step): 0 none; 1 C is a score matrix (rows =
    // queries, columns = keys) and the tiles whose first key lies at or past the end of their
    // last query's granule are skipped (left unwritten); 2 the sum runs over keys for rows of
    // queries: a tile sums K up to the end of its rows' granule; 3 the sum runs over queries for
    // rows of keys: a tile sums K from the start of its rows' granule; plus 4 (modes 2 and 3,
    // form `causal_lpt`): the workgroups take the tiles longest first (`tile_index`). `bm` ×
    // `bn` is the launcher's tile (rows × columns of C per workgroup).
    causal: u32, gran: u32, bm: u32, bn: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
// Element offset of batch index z for an operand with batch stride `bs` and group stride `os`.
fn batch_off(z: u32, bs: u32, os: u32) -> u32 {
    return (z % params.nb_in) * bs + (z / params.nb_in) * os;
}

// (tile along N, tile along M, batch, 1 if this workgroup has a tile else 0). A causal score
// product's tiles wholly past their rows' granule have none.
//
// Longest first (`causal` + 4): the tile rows in order of their K ranges' length, each over every
// batch before the next — rows last to first for sums over keys (mode 2), first to last over
// queries (mode 3) — so that the last workgroups to start are the shortest. The same tiles.
fn tile_index(wid: vec3<u32>, nwg: vec3<u32>) -> vec4<u32> {
    let p = params;
    let lin = wid.y * nwg.x + wid.x;
    let r = lin / p.tiles_n;
    let tn = lin % p.tiles_n;
    var tm = r % p.tiles_m;
    var z = r / p.tiles_m;
    let mode = p.causal & 3u;
    if (p.causal >= 4u) {
        let nb = p.total / (p.tiles_n * p.tiles_m);
        let j = min(r / nb, p.tiles_m - 1u);
        z = r % nb;
        tm = select(j, p.tiles_m - 1u - j, mode == 2u);
    }
    var live = lin < p.total;
    if (mode == 1u) {
        let last = min(tm * p.bm + p.bm, p.m) - 1u;
        live = live && tn * p.bn < (last / p.gran + 1u) * p.gran;
    }
    return vec4<u32>(tn, tm, z, select(0u, 1u, live));
}

// The K range [x, y) the tile whose first row is `row0` sums (modes 2 and 3 above; else [0, K)).
// Its ends are multiples of `gran` or K itself, so every kernel's K steps fit them.
fn k_span(row0: u32) -> vec2<u32> {
    let p = params;
    let mode = p.causal & 3u;
    if (mode == 2u) { return vec2<u32>(0u, min(p.k, (row0 / p.gran + 1u) * p.gran)); }
    if (mode == 3u) { return vec2<u32>(min(p.k, (row0 / p.gran) * p.gran), p.k); }
    return vec2<u32>(0u, p.k);
}
