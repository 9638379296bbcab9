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
}

@group(0) @binding(0) var<uniform> params: Params;
// Element offset of batch index z for an operand with batch stride `bs` and group stride `os`.
fn batch_off(z: u32, bs: u32, os: u32) -> u32 {
    return (z % params.nb_in) * bs + (z / params.nb_in) * os;
}

// (tile along N, tile along M, batch, 1 if this workgroup has a tile else 0).
fn tile_index(wid: vec3<u32>, nwg: vec3<u32>) -> vec4<u32> {
    let p = params;
    let lin = wid.y * nwg.x + wid.x;
    let r = lin / p.tiles_n;
    return vec4<u32>(lin % p.tiles_n, r % p.tiles_m, r / p.tiles_m, select(0u, 1u, lin < p.total));
}
