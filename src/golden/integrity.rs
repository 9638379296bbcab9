//! A golden file's self-consistency: what it must hold whatever the engine computes (finite values,
//! tokens in the vocabulary, shapes, the loss from the logits, one AdamW step, the traces' exact
//! relations), so that a damaged file is said to be damaged, not taken for a parity failure.

use super::*;

impl Golden {
    /// What the file must hold whatever the engine computes (golden README 3 and 4): finite
    /// values, tokens and targets in the vocabulary, a parameter's gradient and step-1 value of
    /// its shape, `train.*[0]` = `out.*`, the gradients' norm = `out.grad_norm`, the loss the
    /// cross-entropy of the logits, `step1.param` = one AdamW step from `param` with `grad`, and
    /// the traces' relations ([`Golden::trace_relations`]). A file that breaks one is damaged (a copy cut short, bytes overwritten): said as that, not
    /// as a parity failure of the engine. (Checks whose tensors are absent are left to the
    /// comparison, which names what is missing.)
    pub(super) fn integrity(&self) -> Result<(), String> {
        let get = |n: &str| match self.tensors.get(n) {
            Some((s, Data::F32(v))) => Some((s.as_slice(), v.as_slice())),
            _ => None,
        };
        let mut names: Vec<&String> = self.tensors.keys().collect();
        names.sort();
        for name in &names {
            if let (s, Data::F32(v)) = &self.tensors[*name] {
                let bad = v.iter().filter(|x| !x.is_finite()).count();
                if bad > 0 {
                    return Err(format!(
                        "tensor '{name}' {s:?} holds {bad} of {} values that are not finite (NaN or ±inf), which \
                         the reference never writes",
                        v.len()
                    ));
                }
            }
        }
        let v = self.config.vocab_size as i64;
        for (name, ignore) in [("input.tokens", false), ("input.targets", true)] {
            if let Some((_, Data::I32(ids))) = self.tensors.get(name)
                && let Some(bad) = ids.iter().find(|&&t| !((0..v).contains(&(t as i64)) || (ignore && t == -1)))
            {
                let also = if ignore { " or -1 (ignored)" } else { "" };
                return Err(format!(
                    "tensor '{name}' holds {bad}, not a token id of the vocabulary of {v} (0 to {}){also}",
                    v - 1
                ));
            }
        }
        for p in &self.params {
            let Some((shape, _)) = get(&format!("param.{p}")) else { continue };
            for other in [format!("grad.{p}"), format!("step1.param.{p}")] {
                if let Some((s, _)) = get(&other)
                    && s != shape
                {
                    return Err(format!(
                        "tensor '{other}' has shape {s:?}, but 'param.{p}' has {shape:?}: they must agree"
                    ));
                }
            }
        }
        let rel = |a: f64, b: f64| (a - b).abs() / b.abs().max(f64::MIN_POSITIVE);
        let scalar = |n: &str, i: usize| get(n).and_then(|(_, v)| v.get(i)).map(|&x| x as f64);
        for (first, out) in [("train.losses", "out.loss"), ("train.grad_norms", "out.grad_norm")] {
            if let (Some(a), Some(b)) = (scalar(first, 0), scalar(out, 0))
                && rel(a, b) > 1e-6
            {
                return Err(format!("'{first}[0]' is {a}, '{out}' {b}: both are the loss before the first step"));
            }
        }
        // The gradients' global norm.
        let grads: Option<Vec<&[f32]>> = self.params.iter().map(|p| get(&format!("grad.{p}")).map(|g| g.1)).collect();
        if let (Some(grads), Some(norm)) = (grads, scalar("out.grad_norm", 0)) {
            let ours = grads.iter().flat_map(|g| g.iter()).map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
            if rel(ours, norm) > 1e-4 {
                return Err(format!(
                    "the norm of its 'grad.*' tensors is {ours:.6e}, but 'out.grad_norm' is {norm:.6e}: one of them was \
                     changed"
                ));
            }
        }
        // The loss: the (label-smoothed) cross-entropy of the logits at the targets ≠ -1.
        if let (Some((_, logits)), Some((_, Data::I32(targets))), Some(loss)) =
            (get("out.logits"), self.tensors.get("input.targets"), scalar("out.loss", 0))
            && self.config.vocab_size > 0
            && logits.len() == targets.len() * self.config.vocab_size
        {
            let (vs, alpha) = (self.config.vocab_size, self.config.label_smoothing);
            let (mut sum, mut n) = (0.0f64, 0usize);
            for (row, &t) in logits.chunks_exact(vs).zip(targets) {
                if t < 0 {
                    continue;
                }
                let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
                let lse = max + row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
                let mean = row.iter().map(|&x| lse - x as f64).sum::<f64>() / vs as f64;
                sum += (1.0 - alpha) * (lse - row[t as usize] as f64) + alpha * mean;
                n += 1;
            }
            if n > 0 && rel(sum / n as f64, loss) > 1e-4 {
                return Err(format!(
                    "the cross-entropy of its 'out.logits' at 'input.targets' is {:.6}, but 'out.loss' is {loss:.6}: \
                     one of them was changed",
                    sum / n as f64
                ));
            }
        }
        // Step 1 of AdamW (README 4): θ₁ = θ·(1 − lr·wd if decayed) − lr·ĝ/(|ĝ| + eps), ĝ the
        // clipped gradient (the bias corrections cancel at t = 1).
        if let Some(norm) = scalar("out.grad_norm", 0) {
            let o = &self.opt;
            let clip = (o.grad_clip / (norm + o.clip_norm_eps)).min(1.0);
            for p in &self.params {
                let (Some((_, p0)), Some((_, g)), Some((_, p1))) =
                    (get(&format!("param.{p}")), get(&format!("grad.{p}")), get(&format!("step1.param.{p}")))
                else {
                    continue;
                };
                let decay = if o.decayed.contains(p) { 1.0 - o.lr * o.weight_decay } else { 1.0 };
                let (mut err, mut size) = (0.0f64, 0.0f64);
                for ((&a, &g), &b) in p0.iter().zip(g).zip(p1) {
                    let gc = g as f64 * clip;
                    let want = a as f64 * decay - o.lr * gc / (gc.abs() + o.eps);
                    // (Against the update's size, with a floor of the f32 spacing of θ.)
                    err += (b as f64 - want).powi(2);
                    size += (b as f64 - a as f64).powi(2) + (1e-6 * a as f64).powi(2);
                }
                if err.sqrt() > 1e-2 * size.sqrt().max(f64::MIN_POSITIVE) {
                    return Err(format!(
                        "'step1.param.{p}' is not one AdamW step from 'param.{p}' with 'grad.{p}' and the file's \
                         optimizer settings (relative error {:.2e} of the update): one of them was changed",
                        err.sqrt() / size.sqrt().max(f64::MIN_POSITIVE)
                    ));
                }
            }
        }
        self.trace_relations()
    }

    /// The relations the reference's traces obey among themselves and with the parameters and
    /// logits of the same file (spec 2, 3.2, 4, 14.2–14.4), each computed here in float64 from
    /// the stored float32 values: k = k̃/√(‖k̃‖² + ε_k²) with k̃ = `h` (k-Map) or `k_raw` (v-Map);
    /// β = 2σ(w_β·c + b_β) and (v-Map) k̃ = W_k2 silu(W_k1 c), c = RMSNorm(`a`)·γ; v = act(W_v ·
    /// (`a` for k-Map, `h` for v-Map) + b_v); the MLP's `h` from its `a`; where the state is the
    /// residual x (`baseline`, `ddl_v1`, `ddl_v1_vmap`) the first `a` = the embedding of the
    /// tokens, each next `a` = the previous one after its sublayer's write (x + h, or
    /// x + β(v − k·x)k) and `final.z` the last; and `out.logits` = W_E · RMSNorm(`final.z`)·γ_f.
    /// Every trace tensor takes part in one, so a trace tensor overwritten with other plausible
    /// values breaks one and is said to be damaged. (The reference's values, computed in float64
    /// and rounded once, meet each to about 1e-7; `TRACE_TOL` leaves room, a changed tensor
    /// misses by orders more.) The attention's `h` is checked against the attention of
    /// RMSNorm(`a`) computed here (spec 3.1: RoPE, QK-RMSNorm, causal softmax, W_o), so a row of
    /// a k-Map `h` scaled by a positive factor, whose direction alone the write uses, is seen too.
    /// In files run with interventions the gate is checked as they set it (`BetaMap::apply`).
    pub(super) fn trace_relations(&self) -> Result<(), String> {
        const TRACE_TOL: f64 = 1e-5;
        // ‖got − want‖ / ‖want‖.
        let rel_l2 = |got: &[f32], want: &[f64]| {
            let (mut num, mut den) = (0.0f64, 0.0f64);
            for (&g, &w) in got.iter().zip(want) {
                num += (g as f64 - w).powi(2);
                den += w * w;
            }
            (num / den.max(f64::MIN_POSITIVE)).sqrt()
        };
        let cfg = &self.config;
        let (d, m, n) = (cfg.d_model, cfg.d_v.max(1), self.batch * self.seq_len);
        let get = |name: &str, len: usize| match self.tensors.get(name) {
            Some((_, Data::F32(v))) if v.len() == len => Some(v.as_slice()),
            _ => None,
        };
        let check = |name: &str, want: &[f64], what: &str| -> Result<(), String> {
            let Some(got) = get(name, want.len()) else { return Ok(()) };
            let rel = rel_l2(got, want);
            if rel > TRACE_TOL {
                return Err(format!(
                    "'{name}' is not {what} (relative L2 difference {rel:.2e}; the reference's own values agree to \
                     {TRACE_TOL:.0e}): one of them was changed"
                ));
            }
            Ok(())
        };
        // RMSNorm rows of x with the gain γ.
        let norm = |x: &[f32], gain: &[f32]| -> Vec<f64> {
            let mut out = Vec::with_capacity(x.len());
            for r in x.chunks_exact(d) {
                let ms = r.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / d as f64;
                let s = 1.0 / (ms + cfg.norm_eps).sqrt();
                out.extend(r.iter().zip(gain).map(|(&v, &g)| v as f64 * s * g as f64));
            }
            out
        };
        let silu = |x: f64| x / (1.0 + (-x).exp());
        let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
        let f64s = |x: &[f32]| x.iter().map(|&v| v as f64).collect::<Vec<f64>>();
        // The gate after the file's interventions (`beta=V`, `beta*=S`, clamps), one map per
        // sublayer; none to check where its metadata does not parse as intervention specs.
        let beta_maps = if self.interventions.is_empty() {
            Some(vec![crate::kernels::delta::BetaMap::IDENTITY; 2 * cfg.n_layers])
        } else {
            let specs: Vec<String> = self.interventions.split(';').map(|s| s.trim().to_string()).collect();
            crate::model::Interventions::parse(&specs, false).and_then(|iv| iv.maps(cfg)).ok()
        };
        let residual = !cfg.variant.expanded();
        let mut x: Option<Vec<f64>> = None;
        if residual
            && let (Some(emb), Some((_, Data::I32(tokens)))) =
                (get("param.tok_emb", cfg.vocab_size * d), self.tensors.get("input.tokens"))
            && tokens.iter().all(|&t| (0..cfg.vocab_size as i64).contains(&(t as i64)))
        {
            x = Some(tokens.iter().flat_map(|&t| f64s(&emb[t as usize * d..(t as usize + 1) * d])).collect());
        }
        let mut x_from = "the embedding of 'input.tokens' (rows of 'param.tok_emb')".to_string();
        for l in 0..cfg.n_layers {
            for (s, gain) in [("attn", "attn_norm"), ("mlp", "mlp_norm")] {
                let pre = format!("trace.blocks.{l}.{s}");
                let par = |p: &str, len: usize| get(&format!("param.blocks.{l}.{p}"), len);
                let a = get(&format!("{pre}.a"), n * d);
                if let (Some(x), Some(_)) = (&x, a) {
                    check(&format!("{pre}.a"), x, &x_from)?;
                }
                let (Some(a), Some(h), Some(gain)) =
                    (a, get(&format!("{pre}.h"), n * d), par(&format!("{gain}.gain"), d))
                else {
                    x = None;
                    continue;
                };
                let c = norm(a, gain);
                let f = cfg.mlp_hidden;
                if s == "mlp"
                    && let (Some(wg), Some(wu), Some(wd)) =
                        (par("mlp.w_gate", f * d), par("mlp.w_up", f * d), par("mlp.w_down", d * f))
                {
                    let hid: Vec<f64> =
                        matvec(wg, &c, d).iter().zip(matvec(wu, &c, d)).map(|(&g, u)| silu(g) * u).collect();
                    check(
                        &format!("{pre}.h"),
                        &matvec(wd, &hid, f),
                        &format!("the MLP of RMSNorm('{pre}.a') (W_down(silu(W_gate c) ⊙ W_up c))"),
                    )?;
                }
                let hq = cfg.n_heads * cfg.head_dim;
                if s == "attn"
                    && let (Some(wq), Some(wr), Some(wn), Some(wo), Some(gq), Some(gk)) = (
                        par("attn.wq", hq * d),
                        par("attn.wk", hq * d),
                        par("attn.wv", hq * d),
                        par("attn.wo", d * hq),
                        par("attn.q_norm.gain", cfg.head_dim),
                        par("attn.k_norm.gain", cfg.head_dim),
                    )
                {
                    check(
                        &format!("{pre}.h"),
                        &attention(cfg, self.seq_len, &c, [wq, wr, wn, wo], [gq, gk]),
                        &format!(
                            "the attention of RMSNorm('{pre}.a') (W_o of softmax(q̂·k̂/√h) causal over W_ν c, q̂ and k̂ \
                             rotated and RMS-normed)"
                        ),
                    )?;
                }
                if !cfg.variant.is_ddl() {
                    x = Some(a.iter().zip(h).map(|(&a, &h)| a as f64 + h as f64).collect());
                    x_from = format!("'{pre}.a' + '{pre}.h' (the residual after that sublayer)");
                    continue;
                }
                let dp = |p: &str, len: usize| par(&format!("{s}_delta.{p}"), len);
                let kraw_name = if cfg.variant.vmap() { format!("{pre}.k_raw") } else { format!("{pre}.h") };
                if let Some(kr) = get(&kraw_name, n * d) {
                    let k: Vec<f64> = kr
                        .chunks_exact(d)
                        .flat_map(|r| {
                            let nrm = (r.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() + cfg.k_eps.powi(2)).sqrt();
                            r.iter().map(move |&v| v as f64 / nrm)
                        })
                        .collect();
                    check(&format!("{pre}.k"), &k, &format!("'{kraw_name}' / √(‖'{kraw_name}'‖² + ε_k²)"))?;
                }
                let hk = cfg.k_mlp_hidden;
                if cfg.variant.vmap()
                    && let (Some(w1), Some(w2)) = (dp("w_k1", hk * d), dp("w_k2", d * hk))
                {
                    let s1: Vec<f64> = matvec(w1, &c, d).into_iter().map(silu).collect();
                    check(
                        &format!("{pre}.k_raw"),
                        &matvec(w2, &s1, hk),
                        &format!("W_k2 silu(W_k1 c) of c = RMSNorm('{pre}.a')"),
                    )?;
                }
                if let (Some(maps), Some(wb), Some(bb)) = (&beta_maps, dp("w_beta", d), dp("b_beta", 1)) {
                    let map = maps[2 * l + usize::from(s == "mlp")];
                    let beta: Vec<f64> = matvec(wb, &c, d)
                        .into_iter()
                        .map(|z| map.apply((2.0 * sigmoid(z + bb[0] as f64)) as f32) as f64)
                        .collect();
                    let what = if map == crate::kernels::delta::BetaMap::IDENTITY {
                        format!("2σ(w_β·c + b_β) of c = RMSNorm('{pre}.a')")
                    } else {
                        format!("2σ(w_β·c + b_β) of c = RMSNorm('{pre}.a') under the file's interventions")
                    };
                    check(&format!("{pre}.beta"), &beta, &what)?;
                }
                let (vin, vname) = if cfg.variant.vmap() { (h, "h") } else { (a, "a") };
                let act = match cfg.v_act {
                    crate::model::VActName::Sigmoid4 => "sigmoid4",
                    crate::model::VActName::Sigmoid => "sigmoid",
                    crate::model::VActName::Linear => "linear",
                };
                if let (Some(wv), Some(bv)) = (dp("w_v", m * d), dp("b_v", m)) {
                    let u = matvec(wv, &f64s(vin), d);
                    let v: Vec<f64> = u
                        .iter()
                        .enumerate()
                        .map(|(i, &u)| {
                            let u = u + bv[i % m] as f64;
                            match cfg.v_act {
                                crate::model::VActName::Sigmoid4 => 4.0 * sigmoid(u),
                                crate::model::VActName::Sigmoid => sigmoid(u),
                                crate::model::VActName::Linear => u,
                            }
                        })
                        .collect();
                    check(&format!("{pre}.v"), &v, &format!("act(W_v '{pre}.{vname}' + b_v) with act = {act}"))?;
                }
                // The residual's write x + β(v − k·x)k (m = 1), with the stored β, k, v.
                x = match (
                    residual,
                    get(&format!("{pre}.beta"), n),
                    get(&format!("{pre}.k"), n * d),
                    get(&format!("{pre}.v"), n),
                ) {
                    (true, Some(beta), Some(k), Some(v)) => {
                        let mut out = Vec::with_capacity(n * d);
                        for (i, (xr, kr)) in a.chunks_exact(d).zip(k.chunks_exact(d)).enumerate() {
                            let p = xr.iter().zip(kr).map(|(&x, &k)| x as f64 * k as f64).sum::<f64>();
                            let coef = beta[i] as f64 * (v[i] as f64 - p);
                            out.extend(xr.iter().zip(kr).map(|(&x, &k)| x as f64 + coef * k as f64));
                        }
                        x_from = format!("'{pre}.a' after its delta write x + β(v − k·x)k (with its β, k, v)");
                        Some(out)
                    }
                    _ => None,
                };
            }
        }
        if let Some(x) = &x
            && get("trace.final.z", n * d).is_some()
        {
            check("trace.final.z", x, &x_from)?;
        }
        if let (Some(z), Some(gain), Some(emb)) =
            (get("trace.final.z", n * d), get("param.final_norm.gain", d), get("param.tok_emb", cfg.vocab_size * d))
        {
            let logits = matvec(emb, &norm(z, gain), d);
            if let Some(stored) = get("out.logits", logits.len()) {
                // (Said of the trace: the logits agree with the loss, checked above.)
                let rel = rel_l2(stored, &logits);
                if rel > TRACE_TOL {
                    return Err(format!(
                        "'trace.final.z' does not give 'out.logits' through the final RMSNorm and the tied head \
                         (W_E · RMSNorm(z)·γ_f; relative L2 difference {rel:.2e}, the reference's own values agree \
                         to {TRACE_TOL:.0e}): one of them was changed"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// y = W x per row, W [rows_out, cols] row-major, x rows of `cols`.
fn matvec(w: &[f32], x: &[f64], cols: usize) -> Vec<f64> {
    let out_rows = w.len() / cols;
    let mut y = Vec::with_capacity(x.len() / cols * out_rows);
    for r in x.chunks_exact(cols) {
        y.extend(w.chunks_exact(cols).map(|wr| wr.iter().zip(r).map(|(&a, &b)| a as f64 * b).sum::<f64>()));
    }
    y
}

/// Causal self-attention of spec 3.1 in float64 over rows `c` [B·T, d] (T = `seq`, positions from
/// 0 in each sequence): q = W_q c, r = W_r c, ν = W_ν c split into heads; RoPE (half-split, base
/// `rope_base`) on q and r, then RMSNorm per head with the gains γ_q, γ_k; softmax(q̂·k̂/√h) over
/// τ ≤ t; the heads' outputs concatenated and projected by W_o. `w` = [W_q, W_r, W_ν, W_o].
fn attention(cfg: &crate::model::ModelConfig, seq: usize, c: &[f64], w: [&[f32]; 4], gain: [&[f32]; 2]) -> Vec<f64> {
    let (d, heads, hd) = (cfg.d_model, cfg.n_heads, cfg.head_dim);
    let (width, half) = (heads * hd, hd / 2);
    let [wq, wr, wn, wo] = w;
    let (mut q, mut r, nu) = (matvec(wq, c, d), matvec(wr, c, d), matvec(wn, c, d));
    let theta: Vec<f64> = (0..half).map(|i| cfg.rope_base.powf(-((2 * i) as f64) / hd as f64)).collect();
    for (x, g) in [(&mut q, gain[0]), (&mut r, gain[1])] {
        for (row, xr) in x.chunks_exact_mut(width).enumerate() {
            let t = (row % seq) as f64;
            for head in xr.chunks_exact_mut(hd) {
                for (i, &th) in theta.iter().enumerate() {
                    let (sin, cos) = (t * th).sin_cos();
                    let (a, b) = (head[i], head[i + half]);
                    head[i] = a * cos - b * sin;
                    head[i + half] = a * sin + b * cos;
                }
                let ms = head.iter().map(|v| v * v).sum::<f64>() / hd as f64;
                let s = 1.0 / (ms + cfg.norm_eps).sqrt();
                for (v, &g) in head.iter_mut().zip(g) {
                    *v *= s * g as f64;
                }
            }
        }
    }
    let scale = 1.0 / (hd as f64).sqrt();
    let mut o = vec![0.0f64; c.len() / d * width];
    for start in (0..c.len() / d).step_by(seq) {
        for e in 0..heads {
            // Row `row` of the sequence, head e's columns.
            let at = |row: usize| (start + row) * width + e * hd..(start + row) * width + (e + 1) * hd;
            for t in 0..seq {
                let qt = &q[at(t)];
                let s: Vec<f64> =
                    (0..=t).map(|u| qt.iter().zip(&r[at(u)]).map(|(a, b)| a * b).sum::<f64>() * scale).collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = s.iter().map(|v| (v - max).exp()).collect();
                let sum: f64 = p.iter().sum();
                let range = at(t);
                for (u, pu) in p.iter().enumerate() {
                    for (ov, nv) in o[range.clone()].iter_mut().zip(&nu[at(u)]) {
                        *ov += pu / sum * nv;
                    }
                }
            }
        }
    }
    matvec(wo, &o, width)
}
