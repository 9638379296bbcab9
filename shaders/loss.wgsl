// Cross-entropy with label smoothing and ignored targets (spec 4, 11.5, 14.7, 14.8).
//
// Row t (logits ℓ [V], target y; y outside [0, V), e.g. −1, is ignored):
//   lse  = log Σ_c exp ℓ_c
//   loss = (1 − α)·(lse − ℓ_y) + α·(lse − mean_c ℓ_c)
//   ∂ℓ_c = scale · (softmax_c − (1 − α)·[c = y] − α/V) / N_valid      (0 for ignored rows)
//
// Layout: one row is handled by `tpr` invocations (a power of two ≤ 256 chosen from V by the
// launcher), so a 256-invocation workgroup holds 256/tpr rows: V = 65 packs 4 rows per
// workgroup, V = 50304 uses all 256 invocations on one row. Each invocation walks its row with
// stride tpr keeping an online (max, Σ exp) pair, then a fixed tree combines the pairs. Rows are
// linearised over the 2-D grid (wid.y · nwg.x + wid.x). Logits larger than one storage binding
// are bound in chunks of rows; `row0` is the chunk's first row in the small per-row buffers.
//
// Numerics: everything is computed relative to the row max M (lse − ℓ_y = log S − (ℓ_y − M)), and
// the smoothing mean relative to the row's first logit, so logits of ±1e4 lose nothing. The
// backward uses the saved lse: exp(ℓ − lse) is off by the rounding of lse, a relative 2^−24·|lse|
// (< 4e−6 for |lse| < 64). Rows with |lse| ≥ 64 are renormalised (one more pass over the row:
// p = exp(ℓ − lse) / Σ exp(ℓ − lse)), which removes that error exactly.
//
// The mean over rows is two fixed-order passes: ce_partials sums blocks of 4096 rows (loss and
// valid count), ce_finish sums the partials in one workgroup and writes out = (mean, count).
// A loss computed in slices of rows with each slice's backward right after its forward (the
// chunked LM head) counts first: the same two passes with `count_only`, out = (0, count).
//
// ce_ranks (evaluation only, after ce_forward over the same rows, reading its lse) writes four
// numbers per row into row_stats: the target's rank 1 + #{c : ℓ_c > ℓ_y, or ℓ_c = ℓ_y and c < y}
// (ties ordered as the likeliest token's, so that rank 1 is that token; the vocabulary size when
// ℓ_y is NaN, a diverged model's; 0 for an ignored row), the likeliest token argmax_c ℓ_c (the
// smallest c among ties), its log-probability and
// the entropy of the row's softmax in nats. With the forward's lse as a shift l (not trusted to
// the last bit: the entropy's derivative in it is 1 − H, so a rounding of 2e−5 in an lse of 13
// would move an entropy of 10 by 2e−4): Z = Σ exp(ℓ − l) and A = Σ exp(ℓ − l)·(l − ℓ) give
// H = A / Z + log Z and log p_top = ℓ_top − l − log Z exactly (A's terms are ≥ 0 up to l's
// rounding: no cancellation). Ranks and ids are below 2^24 (the launcher's vocabulary bound), so
// f32 holds them exactly.

struct Params {
    rows: u32,     // rows in this dispatch (ce_partials, ce_finish: all n rows)
    vocab: u32,
    row0: u32,     // first row of this chunk in targets / lse / row_loss
    tpr: u32,      // invocations per row: a power of two ≤ 256
    alpha: f32,    // label smoothing
    scale: f32,    // backward: factor on the gradient
    nparts: u32,   // ce_partials, ce_finish: number of partials
    count_only: u32, // ce_partials: 1 = count the valid targets only (row_loss not read; the
                     // mean becomes 0): the count a row slice's backward reads before any loss
}

@group(0) @binding(0) var<uniform> params: Params;
// Binding 1 (`logits`) and the backward's output (`put_dl`) come from the variant's part:
// `loss_split` (the gradient in its own buffer, binding 9) or `loss_inplace` (written over the
// logits, which only the backward reads after the forward: training saves the [N, V] buffer).
@group(0) @binding(2) var<storage, read> targets: array<i32>;
@group(0) @binding(3) var<storage, read_write> lse_out: array<f32>;
@group(0) @binding(4) var<storage, read_write> row_loss: array<f32>;
@group(0) @binding(5) var<storage, read_write> partials: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read> lse: array<f32>;
@group(0) @binding(8) var<storage, read> stats: array<f32>;
@group(0) @binding(10) var<storage, read_write> row_stats: array<f32>;

const WG: u32 = 256u;
const PER: u32 = 16u;
const BLOCK: u32 = 4096u;          // rows per ce_partials workgroup (WG · PER)
const NEG_BIG: f32 = -3.0e38;      // "−∞" for the running max of an invocation with no element
const RENORM_LSE: f32 = 64.0;
const SUM_BLOCK: u32 = 64u;        // ce_ranks: terms per partial sum

var<workgroup> sh_a: array<f32, WG>;
var<workgroup> sh_b: array<f32, WG>;
var<workgroup> sh_c: array<f32, WG>;
var<workgroup> sh_u: array<u32, WG>;
var<workgroup> sh_v: array<u32, WG>;
var<workgroup> sh_flag: f32;

fn valid_target(y: i32) -> bool {
    return y >= 0 && u32(y) < params.vocab;
}

@compute @workgroup_size(256)
fn ce_forward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let tpr = p.tpr;
    let rpw = WG / tpr;
    let g = wid.y * nwg.x + wid.x;
    if (g * rpw >= p.rows) {
        return;
    }
    let seg = lid / tpr;
    let lane = lid % tpr;
    let r = g * rpw + seg;
    let live = r < p.rows;
    let base = r * p.vocab;

    var m = NEG_BIG;   // running max
    var s = 0.0;       // Σ exp(ℓ − m)
    var d = 0.0;       // Σ (ℓ − ℓ_0)
    if (live) {
        let l0 = logits[base];
        for (var c = lane; c < p.vocab; c += tpr) {
            let x = logits[base + c];
            if (x > m) {
                s = s * exp(m - x) + 1.0;
                m = x;
            } else {
                s += exp(x - m);
            }
            d += x - l0;
        }
    }
    sh_a[lid] = m;
    sh_b[lid] = s;
    sh_c[lid] = d;
    workgroupBarrier();
    for (var h = tpr / 2u; h > 0u; h >>= 1u) {
        if (lane < h) {
            let m1 = sh_a[lid];
            let m2 = sh_a[lid + h];
            let mm = max(m1, m2);
            sh_b[lid] = sh_b[lid] * exp(m1 - mm) + sh_b[lid + h] * exp(m2 - mm);
            sh_a[lid] = mm;
            sh_c[lid] += sh_c[lid + h];
        }
        workgroupBarrier();
    }
    if (live && lane == 0u) {
        let mx = sh_a[lid];
        let log_s = log(sh_b[lid]);
        let row = p.row0 + r;
        lse_out[row] = mx + log_s;
        let y = targets[row];
        var loss = 0.0;
        if (valid_target(y)) {
            let nll = log_s - (logits[base + u32(y)] - mx);
            loss = nll;
            if (p.alpha != 0.0) {
                // lse − mean ℓ = log S + (M − ℓ_0) − mean(ℓ − ℓ_0)
                let uniform_ce = log_s + (mx - logits[base]) - sh_c[lid] / f32(p.vocab);
                loss = (1.0 - p.alpha) * nll + p.alpha * uniform_ce;
            }
        }
        row_loss[row] = loss;
    }
}

// Sums sh_b (f32) and sh_u (u32) over the workgroup into element 0 with a fixed tree.
fn tree_sum2(lid: u32) {
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h >>= 1u) {
        if (lid < h) {
            sh_b[lid] += sh_b[lid + h];
            sh_u[lid] += sh_u[lid + h];
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(256)
fn ce_partials(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let g = wid.y * nwg.x + wid.x;
    if (g >= p.nparts) {
        return;
    }
    var s = 0.0;
    var c = 0u;
    for (var k = 0u; k < PER; k++) {
        let i = g * BLOCK + k * WG + lid;
        if (i < p.rows) {
            if (p.count_only == 0u) {
                s += row_loss[i];
            }
            if (valid_target(targets[i])) {
                c += 1u;
            }
        }
    }
    sh_b[lid] = s;
    sh_u[lid] = c;
    tree_sum2(lid);
    if (lid == 0u) {
        partials[2u * g] = sh_b[0];
        partials[2u * g + 1u] = f32(sh_u[0]);   // ≤ 4096: exact
    }
}

@compute @workgroup_size(256)
fn ce_finish(@builtin(local_invocation_index) lid: u32) {
    let p = params;
    var s = 0.0;
    var c = 0u;
    for (var i = lid; i < p.nparts; i += WG) {
        s += partials[2u * i];
        c += u32(partials[2u * i + 1u]);
    }
    sh_b[lid] = s;
    sh_u[lid] = c;
    tree_sum2(lid);
    if (lid == 0u) {
        let cnt = sh_u[0];
        var mean = 0.0;
        if (cnt > 0u) {
            mean = sh_b[0] / f32(cnt);
        }
        out[0] = mean;
        out[1] = f32(cnt);
    }
}

@compute @workgroup_size(256)
fn ce_backward(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let tpr = p.tpr;
    let rpw = WG / tpr;
    let g = wid.y * nwg.x + wid.x;
    if (g * rpw >= p.rows) {
        return;
    }
    let seg = lid / tpr;
    let lane = lid % tpr;
    let r = g * rpw + seg;
    let live = r < p.rows;
    let base = r * p.vocab;

    let cnt = stats[1];
    var l = 0.0;
    var y = -1;
    if (live) {
        l = lse[p.row0 + r];
        y = targets[p.row0 + r];
    }
    let valid = live && cnt > 0.0 && valid_target(y);
    let renorm = valid && abs(l) >= RENORM_LSE;

    // Whether any row of the workgroup is renormalised, as a uniform value for the barriers.
    sh_a[lid] = select(0.0, 1.0, renorm);
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h >>= 1u) {
        if (lid < h) {
            sh_a[lid] = max(sh_a[lid], sh_a[lid + h]);
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        sh_flag = sh_a[0];
    }
    let any_renorm = workgroupUniformLoad(&sh_flag);

    var inv = 1.0;
    if (any_renorm != 0.0) {
        var t = 0.0;
        if (renorm) {
            for (var c = lane; c < p.vocab; c += tpr) {
                t += exp(logits[base + c] - l);
            }
        }
        sh_b[lid] = t;
        workgroupBarrier();
        for (var h = tpr / 2u; h > 0u; h >>= 1u) {
            if (lane < h) {
                sh_b[lid] += sh_b[lid + h];
            }
            workgroupBarrier();
        }
        if (renorm) {
            inv = 1.0 / sh_b[seg * tpr];
        }
    }

    if (live) {
        var k = 0.0;
        var yy = 0xffffffffu;
        if (valid) {
            k = p.scale / cnt;
            yy = u32(y);
        }
        let alpha_v = p.alpha / f32(p.vocab);
        let on = 1.0 - p.alpha;
        if (valid) {
            for (var c = lane; c < p.vocab; c += tpr) {
                let pr = exp(logits[base + c] - l) * inv;
                put_dl(base + c, k * (pr - alpha_v - select(0.0, on, c == yy)));
            }
        } else {
            for (var c = lane; c < p.vocab; c += tpr) {
                put_dl(base + c, 0.0);
            }
        }
    }
}

@compute @workgroup_size(256)
fn ce_ranks(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let p = params;
    let tpr = p.tpr;
    let rpw = WG / tpr;
    let g = wid.y * nwg.x + wid.x;
    if (g * rpw >= p.rows) {
        return;
    }
    let seg = lid / tpr;
    let lane = lid % tpr;
    let r = g * rpw + seg;
    let live = r < p.rows;
    let base = r * p.vocab;
    let row = p.row0 + r;

    var y = -1;
    var l = 0.0;
    if (live) {
        y = targets[row];
        l = lse[row];
    }
    let valid = live && valid_target(y);
    var own = 0.0;
    var yc = 0u;
    if (valid) {
        yc = u32(y);
        own = logits[base + yc];
    }
    var above = 0u;            // logits above the target's
    var best = NEG_BIG;        // the invocation's largest logit and its first column
    var best_c = 0xffffffffu;
    // Z = Σ exp(ℓ − l) and A = Σ exp(ℓ − l)·(l − ℓ), summed in blocks of SUM_BLOCK terms whose
    // sums are then added: an invocation of a row of 50 304 logits in 16 invocations sums 3 144
    // terms, which one running f32 sum gets wrong by 1e−5 of Z (more for a row of equal logits),
    // an error the entropy amplifies by H − 1. (Compensated summation would be undone: Mesa
    // simplifies (a + b) − a to b.)
    var z = 0.0;
    var h = 0.0;
    if (live) {
        for (var c0 = lane; c0 < p.vocab; c0 += tpr * SUM_BLOCK) {
            var zb = 0.0;
            var hb = 0.0;
            for (var j = 0u; j < SUM_BLOCK; j++) {
                let c = c0 + j * tpr;
                if (c >= p.vocab) {
                    break;
                }
                let x = logits[base + c];
                if (x > own || (x == own && c < yc)) {
                    above += 1u;
                }
                if (x > best) {
                    best = x;
                    best_c = c;
                }
                let e = exp(x - l);
                zb += e;
                hb += e * (l - x);
            }
            z += zb;
            h += hb;
        }
    }
    sh_a[lid] = best;
    sh_v[lid] = best_c;
    sh_u[lid] = above;
    sh_b[lid] = h;
    sh_c[lid] = z;
    workgroupBarrier();
    for (var k = tpr / 2u; k > 0u; k >>= 1u) {
        if (lane < k) {
            let b2 = sh_a[lid + k];
            let c2 = sh_v[lid + k];
            if (b2 > sh_a[lid] || (b2 == sh_a[lid] && c2 < sh_v[lid])) {
                sh_a[lid] = b2;
                sh_v[lid] = c2;
            }
            sh_u[lid] += sh_u[lid + k];
            sh_b[lid] += sh_b[lid + k];
            sh_c[lid] += sh_c[lid + k];
        }
        workgroupBarrier();
    }
    if (live && lane == 0u) {
        let log_z = log(sh_c[lid]);
        var rank = 0.0;
        if (valid) {
            rank = f32(sh_u[lid] + 1u);
            // (A NaN compares false with everything: its rank would read 1. Tested on its bits,
            // which no compiler's no-NaN assumption folds.)
            if ((bitcast<u32>(own) & 0x7fffffffu) > 0x7f800000u) {
                rank = f32(p.vocab);
            }
        }
        row_stats[4u * row] = rank;
        row_stats[4u * row + 1u] = f32(sh_v[lid]);
        row_stats[4u * row + 2u] = sh_a[lid] - l - log_z;
        row_stats[4u * row + 3u] = sh_b[lid] / sh_c[lid] + log_z;
    }
}
