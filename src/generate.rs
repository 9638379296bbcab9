//! Sampling and text generation.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::gpu::Result;
use crate::kernels::adamw::AdamWConfig;
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

/// Generates by recomputing the full forward over the last `max_seq_len` tokens for each new
/// token (no cache); `on_token` receives each token's text as it is produced.
pub fn generate_recompute(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    max_tokens: usize,
    sampler: &mut Sampler,
    mut on_token: impl FnMut(&str),
) -> Result<Vec<u32>> {
    let t = model.cfg.max_seq_len;
    let opt = AdamWConfig {
        lr: 0.0,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.0,
        grad_clip: 0.0,
        clip_eps: 1e-6,
        step: 1,
    };
    let prog = model.program_with(1, t, &opt, 0.0, 1.0)?;
    let v = model.cfg.vocab_size;
    let mut ids: Vec<u32> = prompt.to_vec();
    let mut out = Vec::new();
    for _ in 0..max_tokens {
        let start = ids.len().saturating_sub(t);
        let window = &ids[start..];
        let mut x: Vec<i32> = window.iter().map(|&i| i as i32).collect();
        let last = x.len().max(1) - 1;
        x.resize(t, 0);
        let y = vec![-1i32; t];
        prog.set_batch(model, &x, &y)?;
        model.run(&[&prog.forward], None)?;
        let logits = prog.logits.read_f32(&model.gpu)?;
        let next = sampler.sample(&logits[last * v..(last + 1) * v], &ids);
        ids.push(next);
        out.push(next);
        if let Ok(s) = tok.decode(&[next]) {
            on_token(&s);
        }
    }
    Ok(out)
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
