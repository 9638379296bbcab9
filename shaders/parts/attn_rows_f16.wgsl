// The softmax steps' outputs stored in half precision (`attention_rows`, variant `h`: the
// blocked attention under `--precision f16`, form `attn_p16`): P into `ph`, dS into `gh`, laid
// out as `s` and `g` (element e of the block scratch is f16 element e: four per vec2 of words,
// element 4i in the low half of word 2i), while `s` keeps the scores and `g` dP. Each value is
// rounded to nearest even by `round_f16` (part f16_round, in front) before packing, so the
// packing is exact: the f16 values the products would read, as f16 operands, from the f32
// outputs of variant `f32` — the same bits downstream, half the bytes written and read.
@group(0) @binding(5) var<storage, read_write> ph: array<vec2<u32>>;
@group(0) @binding(6) var<storage, read_write> gh: array<vec2<u32>>;
fn pack_h4(v: vec4<f32>) -> vec2<u32> {
    let o = round_f16x4(v);
    return vec2<u32>(pack2x16float(o.xy), pack2x16float(o.zw));
}
fn put_p(i: u32, v: vec4<f32>) { ph[i] = pack_h4(v); }
fn put_ds(i: u32, v: vec4<f32>) { gh[i] = pack_h4(v); }
// P of vec4 i (row vec4 j of a row that sees `lim` keys), computed again from the scores in `s`
// as put_p's caller did (the same expression, so the same f32 value variant `f32` reads back).
fn p_again(i: u32, j: u32, lim: u32, ls: f32) -> vec4<f32> {
    return select(vec4<f32>(), exp(s[i] - ls), seen(j, lim));
}
