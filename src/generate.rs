//! Sampling and text generation.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::gpu::Result;
use crate::model::Model;
use crate::tokenizer::Tokenizer;

/// Sampling settings.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// 0 = greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches p (1 = all).
    pub top_p: f32,
    /// Divide positive logits (multiply negative ones) of tokens already seen by this (1 = off).
    pub repetition_penalty: f32,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig { temperature: 0.8, top_k: 0, top_p: 1.0, repetition_penalty: 1.0, seed: 0 }
    }
}

impl SamplerConfig {
    /// Checks the ranges; the message names the flag.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(format!("--temperature must be ≥ 0, got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("--top-p must be in (0, 1], got {}", self.top_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(format!("--repetition-penalty must be > 0, got {}", self.repetition_penalty));
        }
        Ok(())
    }
}

/// A seeded sampler over logits.
pub struct Sampler {
    pub cfg: SamplerConfig,
    rng: ChaCha8Rng,
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        Sampler { cfg, rng }
    }

    /// Picks the next token from `logits`, given the tokens so far (for the repetition penalty).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let mut l: Vec<f64> = logits.iter().map(|&x| x as f64).collect();
        if self.cfg.repetition_penalty != 1.0 {
            let p = self.cfg.repetition_penalty as f64;
            let mut seen = std::collections::HashSet::new();
            for &t in history {
                if (t as usize) < l.len() && seen.insert(t) {
                    let x = &mut l[t as usize];
                    *x = if *x > 0.0 { *x / p } else { *x * p };
                }
            }
        }
        if self.cfg.temperature == 0.0 {
            return l.iter().enumerate().fold((0, f64::MIN), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32;
        }
        let t = self.cfg.temperature as f64;
        let mut idx: Vec<usize> = (0..l.len()).collect();
        idx.sort_by(|&a, &b| l[b].partial_cmp(&l[a]).unwrap_or(std::cmp::Ordering::Equal));
        if self.cfg.top_k > 0 {
            idx.truncate(self.cfg.top_k.max(1));
        }
        let mx = l[idx[0]];
        let mut probs: Vec<f64> = idx.iter().map(|&i| ((l[i] - mx) / t).exp()).collect();
        let sum: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= sum);
        if self.cfg.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = probs.len();
            for (i, p) in probs.iter().enumerate() {
                acc += p;
                if acc >= self.cfg.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep);
            idx.truncate(keep);
            let s: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|p| *p /= s);
        }
        let u: f64 = self.rng.random_range(0.0..1.0);
        let mut acc = 0.0;
        for (p, &i) in probs.iter().zip(&idx) {
            acc += p;
            if u < acc {
                return i as u32;
            }
        }
        *idx.last().unwrap() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_the_largest_and_top_k_1_equals_greedy() {
        let l = [0.1, 2.0, -1.0, 1.9];
        let mut s = Sampler::new(SamplerConfig { temperature: 0.0, ..Default::default() });
        assert_eq!(s.sample(&l, &[]), 1);
        let mut s = Sampler::new(SamplerConfig { temperature: 1.0, top_k: 1, ..Default::default() });
        assert_eq!(s.sample(&l, &[]), 1);
        let mut s = Sampler::new(SamplerConfig { temperature: 0.0, repetition_penalty: 10.0, ..Default::default() });
        assert_eq!(s.sample(&l, &[1]), 3, "the penalty demotes a seen token");
        assert!(SamplerConfig { top_p: 0.0, ..Default::default() }.validate().is_err());
        assert!(SamplerConfig { temperature: -1.0, ..Default::default() }.validate().is_err());
    }
}

/// Options of [`generate`].
#[derive(Debug, Clone)]
pub struct GenOptions {
    pub max_tokens: usize,
    /// Stop when the generated text contains one of these.
    pub stop: Vec<String>,
    /// Stop at this token (e.g. `<|endoftext|>`).
    pub stop_token: Option<u32>,
    /// Record a per-token trace of every delta write.
    pub trace: bool,
}

/// Regime of a gate value: identity (β < 0.5: λ = 1−β > 0.5), reflection (β > 1.5: λ < −0.5),
/// projection in between (λ ≈ 0: the k-component is replaced by v).
pub fn regime(beta: f32) -> &'static str {
    if beta < 0.5 {
        "identity"
    } else if beta > 1.5 {
        "reflection"
    } else {
        "projection"
    }
}

/// What every delta write did for one generated token.
#[derive(Debug, Clone, Default)]
pub struct TokenTrace {
    pub token: u32,
    pub text: String,
    /// Per sublayer (block-major, attention then MLP): β.
    pub beta: Vec<f32>,
    /// Unit directions k [sublayers × d].
    pub k: Vec<f32>,
    /// Written values v [sublayers × m].
    pub v: Vec<f32>,
    /// kᵀX, what the write erases [sublayers × m].
    pub ktx: Vec<f32>,
    /// ‖β (v − kᵀX)‖, the size of the write.
    pub write: Vec<f32>,
}

fn read_trace(model: &Model, p: &crate::model::Program, row: usize, tr: &mut TokenTrace) -> Result<()> {
    let (d, m) = (model.cfg.d_model, model.cfg.m());
    for blk in &p.subs {
        for s in blk {
            let Some(w) = &s.write else { continue };
            let beta = w.beta.read_f32(&model.gpu)?[row];
            let k = w.k.read_f32(&model.gpu)?;
            let v = w.v.read_f32(&model.gpu)?;
            let delta = w.delta.read_f32(&model.gpu)?;
            let (vr, dr) = (&v[row * m..(row + 1) * m], &delta[row * m..(row + 1) * m]);
            tr.beta.push(beta);
            tr.k.extend_from_slice(&k[row * d..(row + 1) * d]);
            tr.v.extend_from_slice(vr);
            tr.ktx.extend(vr.iter().zip(dr).map(|(a, b)| a - b));
            tr.write.push(beta.abs() * dr.iter().map(|x| x * x).sum::<f32>().sqrt());
        }
    }
    Ok(())
}

/// Generates with the KV and conv caches: the prompt is prefilled in one batched forward, then
/// one token per step. When the context is full, the last half of the text is kept and
/// re-prefilled (documented behaviour). Returns the new tokens and, if asked, their traces.
pub fn generate(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenOptions,
    sampler: &mut Sampler,
    mut on_token: impl FnMut(&str),
) -> Result<(Vec<u32>, Vec<TokenTrace>)> {
    let cap = model.cfg.max_seq_len;
    let v = model.cfg.vocab_size;
    let mut history: Vec<u32> = prompt.to_vec();
    let mut cache = model.decode_cache()?;
    let mut out = Vec::new();
    let mut traces = Vec::new();
    let mut text = String::new();
    let mut step_prog = model.decode_program(&cache, 1)?;
    // Prefill the prompt (its last `cap` tokens when it is longer than the context).
    let keep = &history[history.len().saturating_sub(cap)..];
    if keep.is_empty() {
        return Err(crate::gpu::GpuError::Shape("generation needs a prompt of at least one token".into()));
    }
    let mut pre = model.decode_program(&cache, keep.len())?;
    let first = model.decode(&mut pre, &mut cache, keep)?;
    let mut logits = first[(keep.len() - 1) * v..].to_vec();
    // Byte-level BPE can split a character over tokens: stream whole characters only.
    let mut stream = tok.stream();
    for _ in 0..opts.max_tokens {
        let next = sampler.sample(&logits, &history);
        history.push(next);
        out.push(next);
        let piece = stream.push(next).unwrap_or_default();
        text.push_str(&piece);
        if opts.trace {
            traces.push(TokenTrace { token: next, text: piece.clone(), ..Default::default() });
        }
        on_token(&piece);
        if opts.stop_token == Some(next) || opts.stop.iter().any(|s| !s.is_empty() && text.ends_with(s.as_str())) {
            break;
        }
        if cache.pos + 1 > cap {
            // Slide: keep the last half of the context and re-prefill it.
            let keep_from = history.len() - cap / 2;
            let kept: Vec<u32> = history[keep_from..].to_vec();
            cache = model.decode_cache()?;
            let mut p = model.decode_program(&cache, kept.len())?;
            let l = model.decode(&mut p, &mut cache, &kept)?;
            logits = l[(kept.len() - 1) * v..].to_vec();
            step_prog = model.decode_program(&cache, 1)?;
            continue;
        }
        logits = model.decode(&mut step_prog, &mut cache, &[next])?;
        if opts.trace {
            let tr = traces.last_mut().unwrap();
            read_trace(model, &step_prog, 0, tr)?;
        }
    }
    if let Ok(rest) = stream.finish() {
        if !rest.is_empty() {
            on_token(&rest);
        }
    }
    Ok((out, traces))
}

/// Writes a generation trace: `path` (safetensors arrays `beta` [T, S], `lambda` = 1−β,
/// `k` [T, S, d], `v` / `ktx` [T, S, m], `write` [T, S], `tokens` [T], S = 2·L sublayers in block
/// order, attention then MLP) and `path.json` (tokens, text, regimes and per-sublayer counts).
pub fn write_trace(
    path: &std::path::Path,
    cfg: &crate::model::ModelConfig,
    traces: &[TokenTrace],
) -> std::io::Result<()> {
    let t = traces.len();
    let s = if cfg.variant.is_ddl() { 2 * cfg.n_layers } else { 0 };
    let (d, m) = (cfg.d_model, cfg.m());
    let cat = |f: &dyn Fn(&TokenTrace) -> &Vec<f32>, per: usize| -> Vec<f32> {
        traces
            .iter()
            .flat_map(|tr| {
                let v = f(tr);
                let mut v = v.clone();
                v.resize(s * per, f32::NAN);
                v
            })
            .collect()
    };
    let beta = cat(&|tr| &tr.beta, 1);
    let lambda: Vec<f32> = beta.iter().map(|b| 1.0 - b).collect();
    let tokens: Vec<f32> = traces.iter().map(|tr| tr.token as f32).collect();
    let arrays: Vec<(String, Vec<usize>, Vec<f32>)> = vec![
        ("beta".into(), vec![t, s], beta.clone()),
        ("lambda".into(), vec![t, s], lambda),
        ("k".into(), vec![t, s, d], cat(&|tr| &tr.k, d)),
        ("v".into(), vec![t, s, m], cat(&|tr| &tr.v, m)),
        ("ktx".into(), vec![t, s, m], cat(&|tr| &tr.ktx, m)),
        ("write".into(), vec![t, s], cat(&|tr| &tr.write, 1)),
        ("tokens".into(), vec![t], tokens),
    ];
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = arrays
        .iter()
        .map(|(n, shape, data)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(
                    safetensors::Dtype::F32,
                    shape.clone(),
                    bytemuck::cast_slice(data),
                )
                .unwrap(),
            )
        })
        .collect();
    let mut meta = std::collections::HashMap::new();
    meta.insert("format".to_string(), "ddl-trace-1".to_string());
    meta.insert("config".to_string(), serde_json::to_string(cfg).unwrap());
    let bytes = safetensors::serialize(views, Some(meta)).map_err(std::io::Error::other)?;
    crate::train::checkpoint::write_atomic(path, &bytes)?;
    let mut counts = vec![[0usize; 3]; s];
    for tr in traces {
        for (i, b) in tr.beta.iter().enumerate() {
            let r = match regime(*b) {
                "identity" => 0,
                "projection" => 1,
                _ => 2,
            };
            counts[i][r] += 1;
        }
    }
    let summary = serde_json::json!({
        "format": "ddl-trace-1",
        "regime_thresholds": {"identity": "beta < 0.5", "projection": "0.5 <= beta <= 1.5", "reflection": "beta > 1.5"},
        "sublayers": (0..s).map(|i| format!("blocks.{}.{}", i / 2, if i % 2 == 0 { "attn" } else { "mlp" })).collect::<Vec<_>>(),
        "tokens": traces.iter().map(|tr| serde_json::json!({
            "id": tr.token, "text": tr.text,
            "beta": tr.beta, "regime": tr.beta.iter().map(|b| regime(*b)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "regime_counts": counts.iter().map(|c| serde_json::json!({"identity": c[0], "projection": c[1], "reflection": c[2]})).collect::<Vec<_>>(),
    });
    let json_path = path.with_extension("json");
    crate::train::checkpoint::write_atomic(&json_path, serde_json::to_string_pretty(&summary).unwrap().as_bytes())
}
