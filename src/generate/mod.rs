//! Sampling and text generation.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::gpu::{Result, Wait, now};
use crate::model::Model;
use crate::tokenizer::Tokenizer;

mod generator;
mod lens;
mod score;
mod stop;
mod trace;

pub use generator::*;
pub use lens::*;
pub use score::*;
pub use stop::*;
pub use trace::*;

/// Sampling settings.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// 0 = greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches p (1 = all).
    pub top_p: f32,
    /// Keep the tokens at least this fraction as likely as the most likely one (0 = all): a cut
    /// that follows the model's confidence (min-p sampling).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of the tokens in the context by this (1 =
    /// off): the window the model reads, not tokens a long prompt dropped or a slide let go.
    pub repetition_penalty: f32,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig { temperature: 0.8, top_k: 0, top_p: 1.0, min_p: 0.0, repetition_penalty: 1.0, seed: 0 }
    }
}

impl SamplerConfig {
    /// A sampling number as the settings hold it (f32), or why not: one past f32's range (1e39)
    /// became inf, which the range check said as "got inf", not as the value given (the command
    /// line's flags and chat's `/set` say the value before this).
    pub fn number(v: f64) -> std::result::Result<f32, String> {
        match v as f32 {
            x if x.is_infinite() && v.is_finite() => Err(format!("past the largest value taken ({:e})", f32::MAX)),
            x => Ok(x),
        }
    }

    /// Checks the ranges; the message names the flag.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(format!("--temperature must be a finite number ≥ 0 (0 = greedy), got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!(
                "--top-p must be in (0, 1] (1 = off: every token kept; for the likeliest token alone, --temperature \
                 0), got {}",
                self.top_p
            ));
        }
        if !(self.min_p >= 0.0 && self.min_p <= 1.0) {
            return Err(format!("--min-p must be in [0, 1] (0 = off), got {}", self.min_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(format!(
                "--repetition-penalty must be a finite number > 0 (1 = off), got {}",
                self.repetition_penalty
            ));
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

    /// Picks the next token from `logits`, given the tokens in the context (for the repetition
    /// penalty).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        // (A NaN logit, from activations past float32's range, is never picked: it sorts below
        // every number, where comparing it as equal to all made no order for the sort.)
        let mut l: Vec<f64> = logits.iter().map(|&x| if x.is_nan() { f64::NEG_INFINITY } else { x as f64 }).collect();
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
        idx.sort_by(|&a, &b| l[b].total_cmp(&l[a]));
        if self.cfg.top_k > 0 {
            idx.truncate(self.cfg.top_k.max(1));
        }
        let mx = l[idx[0]];
        let mut probs: Vec<f64> = idx.iter().map(|&i| ((l[i] - mx) / t).exp()).collect();
        let sum: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= sum);
        if self.cfg.min_p > 0.0 {
            // The probabilities are sorted: keep those down to min_p × the largest (at least one).
            let floor = self.cfg.min_p as f64 * probs[0];
            let keep = probs.iter().take_while(|&&p| p >= floor).count().max(1);
            probs.truncate(keep);
            idx.truncate(keep);
            let s: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|p| *p /= s);
        }
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
    /// Interventions: one β map per sublayer (`None`: the model's own gates).
    pub beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
    /// Interventions: the sublayers whose write direction is replaced by the prompt's mean k
    /// ([`crate::model::Interventions::k_mean_targets`]; empty: none).
    pub k_mean: Vec<bool>,
}

/// The fixed directions of `k=mean` interventions for a cache: for each sublayer in `targets`,
/// the mean of its unit k over the tokens of `prompt` (its last `max_seq_len`), renormalised to
/// unit length, read from one prefill under `beta_maps` without any direction replaced. Empty
/// when no sublayer is a target. A mean of zero length (directions that cancel) is refused.
pub fn mean_k_directions(
    model: &Model,
    prompt: &[u32],
    beta_maps: &Option<Vec<crate::kernels::delta::BetaMap>>,
    targets: &[bool],
) -> Result<Vec<Option<crate::gpu::Tensor>>> {
    now(mean_k_directions_with(model, prompt, beta_maps, targets, Wait::Block))
}

/// [`mean_k_directions`], waiting for the device as `wait` says.
pub async fn mean_k_directions_with(
    model: &Model,
    prompt: &[u32],
    beta_maps: &Option<Vec<crate::kernels::delta::BetaMap>>,
    targets: &[bool],
    wait: Wait,
) -> Result<Vec<Option<crate::gpu::Tensor>>> {
    if !targets.iter().any(|&t| t) {
        return Ok(Vec::new());
    }
    let (cap, d) = (model.cfg.max_seq_len, model.cfg.d_model);
    let keep = &prompt[prompt.len().saturating_sub(cap)..];
    if keep.is_empty() {
        return Err(crate::gpu::GpuError::Shape("k=mean needs a prompt of at least one token".into()));
    }
    let mut cache = model.decode_cache()?;
    cache.beta_maps = beta_maps.clone();
    let mut p = model.decode_program(&cache, keep.len())?;
    p.forward_with(model, keep, &mut cache, wait).await?;
    let mut out = Vec::with_capacity(targets.len());
    for (i, w) in p.acts().writes().enumerate() {
        if !targets.get(i).copied().unwrap_or(false) {
            out.push(None);
            continue;
        }
        let k = w.k.read_f32_with(&model.gpu, wait).await?;
        let mut mean = vec![0.0f64; d];
        for row in k.chunks(d).take(keep.len()) {
            mean.iter_mut().zip(row).for_each(|(m, &x)| *m += x as f64);
        }
        let norm = mean.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm.is_nan() || norm <= 1e-12 {
            return Err(crate::gpu::GpuError::Shape(format!(
                "k=mean on sublayer {} (block {} {}): the prompt's directions cancel (mean of length {norm:.1e}); use \
                 a longer prompt or another sublayer",
                i,
                i / 2,
                if i % 2 == 0 { "attn" } else { "mlp" }
            )));
        }
        let unit: Vec<f32> = mean.iter().map(|x| (x / norm) as f32).collect();
        out.push(Some(crate::gpu::Tensor::from_f32(&model.gpu, &format!("k_fixed{i}"), &[d], &unit)?));
    }
    Ok(out)
}

/// The regimes a write's β can be in, by [`regime_index`]: the paper's three, and a fourth for β
/// outside [0, 2] (reachable only with `--allow-out-of-range` interventions), where λ = 1−β is
/// above 1 or below −1: the write amplifies the k-component, none of the three.
pub const REGIMES: [&str; 4] = ["identity", "projection", "reflection", "outside [0, 2]"];

/// β is outside [0, 2]: λ = 1−β lies outside [−1, 1], so the write amplifies along k rather than
/// keeping (identity), replacing (projection) or reflecting (reflection) the k-component (a NaN is
/// in no regime either).
pub fn outside_range(beta: f32) -> bool {
    !(0.0..=2.0).contains(&beta)
}

/// The index in [`REGIMES`] of a gate value: 3 when [`outside_range`], else that of [`regime`].
pub fn regime_index(beta: f32) -> usize {
    if outside_range(beta) {
        return 3;
    }
    match regime(beta) {
        "identity" => 0,
        "projection" => 1,
        _ => 2,
    }
}

/// Regime of a gate value by the thresholds alone: identity (β < 0.5: λ = 1−β > 0.5), reflection
/// (β > 1.5: λ < −0.5), projection in between (λ ≈ 0: the k-component is replaced by v). It does
/// not look at the range: β outside [0, 2] ([`outside_range`]) gets the label of its side (what a
/// trace's JSON `regime` records, for its readers), though it is in none of the three regimes;
/// [`regime_index`] tells it apart.
pub fn regime(beta: f32) -> &'static str {
    if beta < 0.5 {
        "identity"
    } else if beta > 1.5 {
        "reflection"
    } else {
        "projection"
    }
}

/// How many tokens a full context keeps when generation slides: its last half (at least one).
fn slide_keep(cap: usize) -> usize {
    (cap / 2).max(1)
}

/// Loads a checkpoint directory for inference (no optimizer state): the model on `gpu` and its
/// tokenizer.
#[cfg(feature = "native")]
pub fn load_for_inference(
    gpu: &std::sync::Arc<crate::gpu::Gpu>,
    dir: &std::path::Path,
) -> anyhow::Result<(Model, Tokenizer)> {
    use crate::train::checkpoint;
    let ck = checkpoint::load_to_device(dir, gpu.clone(), false)
        .map_err(|e| checkpoint::with_remedy_for_reading(dir, "--checkpoint", e))?;
    // (Before anything is printed: a context whose caches this adapter cannot hold.)
    ck.model.check_decode_cache()?;
    Ok((ck.model, ck.tokenizer))
}

/// Loads a checkpoint for inference from the bytes of its `model.safetensors` (a file opened in
/// a browser, or downloaded): the model on `gpu`, its tokenizer and training step. `name` names
/// the file in errors.
pub fn load_for_inference_from_bytes(
    gpu: &std::sync::Arc<crate::gpu::Gpu>,
    name: &str,
    bytes: &[u8],
) -> anyhow::Result<(Model, Tokenizer, usize)> {
    let (config, tokenizer, step, params) = crate::train::checkpoint::parse_model(std::path::Path::new(name), bytes)?;
    let model = Model::with_params(gpu.clone(), config, &params)?;
    model.check_decode_cache()?;
    Ok((model, tokenizer, step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beta_outside_0_2_is_in_no_regime() {
        // In range: the paper's three by the thresholds, the ends included.
        for (b, r) in [(0.0, 0), (0.49, 0), (0.5, 1), (1.5, 1), (1.51, 2), (2.0, 2)] {
            assert_eq!(regime_index(b), r, "β = {b}");
            assert!(!outside_range(b), "β = {b}");
        }
        // Outside: amplifying along k (λ = 1−β beyond ±1), not identity or reflection.
        for b in [-1.0, -1e-3, 2.001, 3.0] {
            assert!(outside_range(b), "β = {b}");
            assert_eq!(REGIMES[regime_index(b)], "outside [0, 2]", "β = {b}");
        }
        // The threshold label, which a trace's JSON keeps for its readers, is unchanged.
        assert_eq!((regime(-1.0), regime(3.0)), ("identity", "reflection"));
    }

    /// Logits with NaN among them (activations past float32's range, e.g. under an intervention
    /// with --allow-out-of-range) are sampled without a panic and never give the NaN's token.
    #[test]
    fn a_nan_logit_is_never_sampled() {
        let mut l = vec![f32::NAN; 40];
        l[7] = 0.5;
        l[21] = 0.4;
        for (temperature, top_k, top_p) in [(0.0, 0, 1.0), (1.0, 0, 1.0), (0.8, 5, 0.9), (1.0, 0, 0.5)] {
            let mut s = Sampler::new(SamplerConfig { temperature, top_k, top_p, ..Default::default() });
            for _ in 0..50 {
                let t = s.sample(&l, &[3, 7]);
                assert!(t == 7 || t == 21, "picked {t} (a NaN logit) at T {temperature}, top-k {top_k}, top-p {top_p}");
            }
        }
    }

    #[test]
    fn greedy_picks_the_largest_and_top_k_1_equals_greedy() {
        let l = [0.1, 2.0, -1.0, 1.9];
        let mut s = Sampler::new(SamplerConfig { temperature: 0.0, ..Default::default() });
        assert_eq!(s.sample(&l, &[]), 1);
        let mut s = Sampler::new(SamplerConfig { temperature: 1.0, top_k: 1, ..Default::default() });
        assert_eq!(s.sample(&l, &[]), 1);
        let mut s = Sampler::new(SamplerConfig { temperature: 0.0, repetition_penalty: 10.0, ..Default::default() });
        assert_eq!(s.sample(&l, &[1]), 3, "the penalty demotes a seen token");
        // The range and what its end means: 0 keeps nothing; 1 keeps every token, and greedy
        // decoding is --temperature 0 (a top-p of 0 meant as "the likeliest alone").
        let e = SamplerConfig { top_p: 0.0, ..Default::default() }.validate().unwrap_err();
        assert!(e.contains("(0, 1]") && e.contains("1 = off") && e.contains("--temperature 0"), "{e}");
        assert!(SamplerConfig { min_p: 1.5, ..Default::default() }.validate().is_err());
        assert!(SamplerConfig { temperature: -1.0, ..Default::default() }.validate().is_err());
    }

    /// Min-p keeps the tokens at least min_p × the most likely one's probability (after the
    /// temperature): here p = 0.5, 0.3, 0.15, 0.05 and min_p 0.5 keeps the first two; min_p 1
    /// keeps the most likely alone; min_p 0 draws exactly what no min-p draws.
    /// A character tokenizer of 300 characters (scored texts need one per id).
    fn tok300() -> Tokenizer {
        Tokenizer::Char(crate::tokenizer::CharTokenizer::from_chars(
            (0..300u32).map(|i| char::from_u32(0x100 + i).unwrap()).collect(),
        ))
    }

    #[test]
    fn a_token_is_scored_against_the_models_softmax_with_its_rank_and_the_most_likely() {
        let tok = Tokenizer::Char(crate::tokenizer::CharTokenizer::from_chars("abcde".chars().collect()));
        // Fresh logits each run: an odd vocabulary of five, one tie.
        let mut rng = ChaCha8Rng::seed_from_u64(std::process::id() as u64);
        let mut logits: Vec<f32> = (0..5).map(|_| rng.random_range(-3.0f32..3.0)).collect();
        logits[4] = logits[1];
        let z: f64 = logits.iter().map(|&x| (x as f64).exp()).sum();
        for id in 0..5u32 {
            let s = score_token(&logits, id, 3, &tok);
            let want = (logits[id as usize] as f64).exp() / z;
            assert!((s.logprob.exp() - want).abs() < 1e-12, "{s:?}");
            assert_eq!(s.rank, 1 + logits.iter().filter(|&&x| x > logits[id as usize]).count());
            assert_eq!(s.text, tok.decode(&[id]).unwrap());
            // The top three in order, ties by id; each as probable as its logit says.
            let mut order: Vec<u32> = (0..5).collect();
            order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
            assert_eq!(s.top.iter().map(|a| a.id).collect::<Vec<_>>(), order[..3]);
            for a in &s.top {
                assert!((a.logprob - ((logits[a.id as usize] as f64).exp() / z).ln()).abs() < 1e-12);
            }
        }
        let s = score_token(&logits, 0, 0, &tok);
        assert!(s.top.is_empty() && s.logprob < 0.0);
        assert_eq!(score_token(&logits, 2, 99, &tok).top.len(), 5);
        // A vocabulary of 300 with many ties: the one-pass top-k and the selection agree with a
        // full sort, either side of the switch between them.
        let big: Vec<f32> = (0..300).map(|_| (rng.random_range(0..40) as f32) * 0.25).collect();
        let mut order: Vec<u32> = (0..300).collect();
        order.sort_by(|&a, &b| big[b as usize].total_cmp(&big[a as usize]).then(a.cmp(&b)));
        for n in [1, 7, TOP_BY_INSERTION, TOP_BY_INSERTION + 1, 120, 300] {
            let ids: Vec<u32> = score_token(&big, 5, n, &tok300()).top.iter().map(|a| a.id).collect();
            assert_eq!(ids, order[..n], "top {n}");
        }
    }

    /// `--logprobs N` past the vocabulary shows every token: the header says how many there are
    /// (it said `top 18446744073709551615` over 65 alternatives), and one token is one token.
    #[test]
    fn a_scores_table_heads_the_alternatives_it_shows() {
        let tok = Tokenizer::Char(crate::tokenizer::CharTokenizer::from_chars("abcde".chars().collect()));
        let logits = [0.5f32, -1.0, 2.0, 0.0, 1.0];
        let one = [score_token(&logits, 1, usize::MAX, &tok)];
        assert_eq!(one[0].top.len(), 5);
        let t = scores_table(&one, usize::MAX, "it reached --max-tokens");
        assert!(t.contains(" top 5\n") && !t.contains(&usize::MAX.to_string()), "{t}");
        assert!(t.contains("over 1 token (perplexity"), "{t}");
        let three = score_token(&logits, 1, 3, &tok);
        let t = prompt_scores_table(&[three.clone(), three], 3);
        assert!(t.contains(" top 3\n") && t.contains("over 2 tokens (perplexity"), "{t}");
        assert!(!scores_table(&one, 0, "x").lines().nth(1).unwrap().contains("top"));
    }

    #[test]
    fn min_p_keeps_the_tokens_near_the_most_likely_one() {
        let l: Vec<f32> = [0.5f64, 0.3, 0.15, 0.05].iter().map(|p| p.ln() as f32).collect();
        let draw = |cfg: SamplerConfig| {
            let mut s = Sampler::new(cfg);
            (0..4000).map(|_| s.sample(&l, &[])).collect::<Vec<u32>>()
        };
        let base = SamplerConfig { temperature: 1.0, seed: 7, ..Default::default() };
        let half = draw(SamplerConfig { min_p: 0.5, ..base.clone() });
        let count = |v: &[u32], t: u32| v.iter().filter(|&&x| x == t).count();
        assert_eq!(count(&half, 2) + count(&half, 3), 0);
        // 0.5 / 0.8 of the draws are token 0: 2500 ± 5 standard deviations (≈ 31 each).
        assert!((count(&half, 0) as i64 - 2500).abs() < 155, "{}", count(&half, 0));
        assert!(draw(SamplerConfig { min_p: 1.0, ..base.clone() }).iter().all(|&t| t == 0));
        let all = draw(base.clone());
        assert_eq!(draw(SamplerConfig { min_p: 0.0, ..base.clone() }), all);
        assert!(count(&all, 3) > 0, "without min-p the unlikely token is drawn too");
        // 0.15 ≥ 0.25 × 0.5: min_p 0.25 keeps three.
        let quarter = draw(SamplerConfig { min_p: 0.25, ..base });
        assert!(count(&quarter, 2) > 0 && count(&quarter, 3) == 0);
    }

    /// A stop text is found wherever it ends in the newest piece (inside a token's text, or begun
    /// in earlier pieces), and the piece is kept up to its end; the earliest of several wins.
    #[test]
    fn a_stop_text_ending_inside_a_piece_cuts_the_piece_right_after_it() {
        let st = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // " Marcius" is one piece: "Mar" ends inside it.
        assert_eq!(stop_cut("ROMEO Marcius", 8, &st(&["Mar"])), Some(4));
        assert_eq!(stop_cut("ROMEO Marcius", 8, &st(&["ius"])), Some(8));
        assert_eq!(stop_cut("ROMEO Marcius", 8, &st(&["xyz"])), None);
        // Begun in earlier pieces ("O M" starts in "ROMEO").
        assert_eq!(stop_cut("ROMEO Marcius", 8, &st(&["O Ma"])), Some(3));
        // Wholly in earlier text: not this piece's (it would have stopped earlier).
        assert_eq!(stop_cut("ROMEO Marcius", 8, &st(&["ROM"])), None);
        // The earliest end of several.
        assert_eq!(stop_cut("ab cdef", 5, &st(&["ef", "cd", "x"])), Some(3));
        // Multi-byte characters: cuts at character boundaries, search start moved back to one.
        assert_eq!(stop_cut("né é!", 4, &st(&["é!"])), Some(4));
        assert_eq!(stop_cut("aéb", 1, &st(&["éb"])), Some(1));
        // An empty piece or empty stop texts stop nothing.
        assert_eq!(stop_cut("abc", 0, &st(&["c"])), None);
        assert_eq!(stop_cut("abc", 1, &st(&[""])), None);
        // A blank line (chat's stop) inside a piece of three newlines.
        assert_eq!(stop_cut("hi\n\n\n", 3, &st(&["\n\n"])), Some(2));
    }

    #[test]
    fn stop_texts_are_unescaped_as_typed() {
        for (typed, meant) in [
            ("\\n", "\n"),
            ("END\\n", "END\n"),
            ("a\\tb", "a\tb"),
            ("\\\\n", "\\n"),
            // (A space at either end, which chat's `/set stop` and a shell would trim.)
            ("\\s", " "),
            ("\\sEND\\s", " END "),
            ("\\\\s", "\\s"),
            ("tail\\\\", "tail\\"),
            ("\n", "\n"),
            ("plain", "plain"),
            ("\\\\\\n", "\\\n"),
        ] {
            assert_eq!(unescape_stop(typed).as_deref(), Ok(meant), "{typed:?}");
        }
        // Any other escape, and a lone backslash at the end, are refused with the four there are.
        for (typed, says) in [
            ("\\q", "unknown escape \\q"),
            ("a\\xb", "unknown escape \\x"),
            ("\\\\\\r", "unknown escape \\r"),
            ("tail\\", "ends in a lone backslash"),
            ("\\", "ends in a lone backslash"),
        ] {
            let e = unescape_stop(typed).unwrap_err();
            assert!(e.contains(says) && e.contains(&format!("'{typed}'")), "{typed:?}: {e}");
            assert!(e.contains("\\n (a newline), \\t (a tab), \\s (a space) and \\\\ (a backslash)"), "{e}");
        }
    }

    /// A stop text matches only text the model wrote: not a U+FFFD that a byte-level BPE's decoder
    /// puts for a lone byte (a continuation byte, or a lead byte cut short by the next token),
    /// but a U+FFFD the model wrote as its three bytes; with a character tokenizer every
    /// character is written.
    #[test]
    fn a_stop_text_matches_no_u_fffd_the_model_did_not_write() {
        let tok = crate::tokenizer::train_bpe(&"To be, or not to be: that is the question.\n".repeat(40), 270).unwrap();
        let t = match &tok {
            Tokenizer::Bpe(t) => t,
            Tokenizer::Char(_) => unreachable!("a BPE"),
        };
        // The byte table is the tokenizer's own: every token decodes to its bytes as read here.
        for id in 0..tok.vocab_size() as u32 {
            let token = t.id_to_token(id).unwrap();
            if let Some(b) = token.chars().map(byte_level_byte).collect::<Option<Vec<u8>>>() {
                assert_eq!(String::from_utf8_lossy(&b), tok.decode(&[id]).unwrap(), "id {id} {token:?}");
            }
        }
        let e_acute = tok.encode("é").unwrap(); // C3 A9: two byte tokens (no merge of them)
        let fffd = tok.encode("\u{FFFD}").unwrap(); // EF BF BD, as the model would write it
        assert_eq!((e_acute.len(), fffd.len()), (2, 3));
        let (lead, cont) = (e_acute[0], e_acute[1]);
        let tt = tok.encode("t").unwrap()[0];
        let stops = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // Streams `ids`: per token the cut each stop text list gives, the text and the offsets.
        let run = |ids: &[u32], st: &[String]| {
            let (mut stream, mut un, mut text, mut cuts) = (tok.stream(), Unwritten::default(), String::new(), vec![]);
            for &id in ids {
                let piece = stream.push(id).unwrap();
                un.push(&tok, id, &piece, text.len());
                text.push_str(&piece);
                cuts.push(stop_cut_written(&text, piece.len(), st, un.offsets()));
            }
            (cuts, text, un.offsets().to_vec())
        };
        // A lone continuation byte, then U+FFFD written, then "t".
        let ids: Vec<u32> = [vec![cont], fffd.clone(), vec![tt]].concat();
        let (cuts, text, at) = run(&ids, &stops(&["\u{FFFD}"]));
        assert_eq!((text.as_str(), at.as_slice()), ("\u{FFFD}\u{FFFD}t", &[0][..]));
        assert_eq!(cuts, [None, None, None, Some(3), None], "stops at the written U+FFFD only");
        // A lead byte cut short by "t": the "t" stops, "\u{FFFD}t" does not.
        let (cuts, text, at) = run(&[lead, tt], &stops(&["\u{FFFD}t"]));
        assert_eq!((text.as_str(), at.as_slice(), cuts.as_slice()), ("\u{FFFD}t", &[0][..], &[None, None][..]));
        assert_eq!(run(&[lead, tt], &stops(&["t"])).0, [None, Some(4)]);
        // An incomplete character at the end is held back: nothing to match.
        assert_eq!(run(&[tt, lead], &stops(&["\u{FFFD}"])).0, [None, None]);
        // The first match is unwritten, a later one in the same piece is not: the later one.
        assert_eq!(stop_cut_written("a\u{FFFD}b\u{FFFD}", 8, &stops(&["\u{FFFD}"]), &[1]), Some(8));
        assert_eq!(stop_cut_written("a\u{FFFD}b\u{FFFD}", 8, &stops(&["\u{FFFD}"]), &[1, 5]), None);
        // A character tokenizer's U+FFFD is a character of its vocabulary: written.
        let chars = Tokenizer::Char(crate::tokenizer::CharTokenizer::from_chars(vec!['a', '\u{FFFD}']));
        let mut un = Unwritten::default();
        un.push(&chars, 1, "\u{FFFD}", 1);
        assert!(un.offsets().is_empty());
    }
}
