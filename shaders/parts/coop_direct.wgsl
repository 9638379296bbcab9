// The fragments of `mm_coop128d` (variant `coop128d`, shaders/matmul_coop.wgsl; `soft128d` in
// shaders/coop_stage_check.wgsl reads them without cooperative matrices): 16 × 16 fragments
// loaded straight from the operands' f16 storage, no workgroup staging and no barriers in the K
// loop. The launcher runs it only where every fragment lies in its buffer: both operands stored
// in f16, M, N and K multiples of 16, a unit stride per operand, and the offsets and the other
// strides multiples of 8 halves (16 bytes: what a cooperative-matrix load from memory needs).
// A fragment past M (N) — the last tile's, or a workgroup past the grid's end — is read from
// the last whole one instead and feeds only outputs `frag_write` never stores.

// `vec2(first element, stride)` of A's fragment at the tile's rows r.. (r a multiple of 16) and
// K columns k..: row-major (loaded with `coopLoadT`) when A runs along K (a_cs = 1), else
// column-major (`coopLoad`).
fn da_frag(t: QTile, r: u32, k: u32) -> vec2<u32> {
    let p = params;
    let base = select(p.a_off, t.a_base, t.live);
    let i = min(t.row0 + r, p.m - 16u);
    if (p.a_cs == 1u) { return vec2<u32>(base + i * p.a_rs + k, p.a_rs); }
    return vec2<u32>(base + k * p.a_cs + i, p.a_cs);
}

// B's fragment at K rows k.. and the tile's columns c..: row-major when B runs along N
// (b_cs = 1), else column-major.
fn db_frag(t: QTile, k: u32, c: u32) -> vec2<u32> {
    let p = params;
    let base = select(p.b_off, t.b_base, t.live);
    let j = min(t.col0 + c, p.n - 16u);
    if (p.b_cs == 1u) { return vec2<u32>(base + k * p.b_rs + j, p.b_rs); }
    return vec2<u32>(base + j * p.b_cs + k, p.b_cs);
}
