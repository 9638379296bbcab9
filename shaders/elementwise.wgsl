// Elementwise helpers on flat f32 buffers: y += x (gradient and residual sums), y *= alpha, and
// a strided row copy (a matrix into a buffer with another row stride).
// Grid: 1-D over elements, 256 per workgroup, split over x and y so any length fits the
// 65535-per-dimension limit (the launcher binds buffers larger than one binding in chunks).

struct Params {
    n: u32,        // elements in this dispatch
    alpha: f32,    // scale: the factor
    cols: u32,     // copy_rows: columns per row
    xs: u32,       // copy_rows: row stride of x
    ys: u32,       // copy_rows: row stride of y
    x_off: u32,    // copy_rows: first element of x (within the bound chunk)
    y_off: u32,    // copy_rows: first element of y
    _pad0: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
// pack_f16's output: two f16 per word (element 2i in the low half).
@group(0) @binding(3) var<storage, read_write> yu: array<u32>;

// y[i] += x[i]
@compute @workgroup_size(256)
fn add(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i < params.n) {
        y[i] = y[i] + x[i];
    }
}

// y[i] *= alpha (in place; the launcher's `x` is bound as `y`)
@compute @workgroup_size(256)
fn scale(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i < params.n) {
        y[i] = y[i] * params.alpha;
    }
}

// y[r·ys + c] = x[r·xs + c] for element i = r·cols + c < n (a row-major matrix into another
// row stride, e.g. a weight into a copy whose rows are padded to a multiple of 4).
@compute @workgroup_size(256)
fn copy_rows(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (i < params.n) {
        let r = i / params.cols;
        let c = i - r * params.cols;
        y[params.y_off + r * params.ys + c] = x[params.x_off + r * params.xs + c];
    }
}

// yu[i] = (f16(x[2i]), f16(x[2i + 1])) packed, for the n elements of x (an odd n's last word pairs
// x[n − 1] with 0): the f16 copy of the parameters that f16 products read their weights from.
// pack2x16float needs no f16 support in the shader; round_f16 (parts/f16_round.wgsl, this
// shader's prelude) rounds to nearest first, so the copy holds the bits that R16 operands read
// whatever rounding the adapter's conversion does.
@compute @workgroup_size(256)
fn pack_f16(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid;
    if (2u * i < params.n) {
        let hi = select(0.0, x[2u * i + 1u], 2u * i + 1u < params.n);
        yu[i] = pack2x16float(vec2<f32>(round_f16(x[2u * i]), round_f16(hi)));
    }
}
