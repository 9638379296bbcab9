//! The logit lens of a continuation (`--lens`) and the comparison of a text with and without
//! interventions (`--compare`): the two continuations, where they part, and Δ log p.

use super::*;

/// One token at one state of a logit lens ([`continuation_lens`]): how the model's own head,
/// read on that state, scores the token (its log p, natural log, and rank: 1 + how many tokens
/// the head found likelier), the head's likeliest token there (the smallest id among ties) with
/// its log p, and the entropy of the head's distribution (nats).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LensScore {
    pub logprob: f64,
    pub rank: usize,
    pub top: u32,
    pub top_text: String,
    pub top_logprob: f64,
    pub entropy: f64,
}

/// What each logit-lens state after the embedding follows, in the lens's headers: a sublayer's
/// delta write, or for the baseline (residual additions, no delta writes) its residual addition.
pub fn lens_step(variant: crate::model::Variant) -> &'static str {
    if variant.is_ddl() { "each sublayer's write" } else { "each sublayer's residual addition" }
}

/// The states a lens reads, in model order: `embedding` (X_0), then the sublayer whose write
/// left each state (`block0.attn`, …; the last one's state is the model's output).
pub fn lens_states(model: &Model) -> Vec<String> {
    std::iter::once("embedding".to_string())
        .chain((0..2 * model.cfg.n_layers).map(crate::model::intervene::sublayer_name))
        .collect()
}

/// The logit lens of `continuation` after `prompt` (`ddl generate --lens`): per continuation
/// token, per state of [`lens_states`], the model's own head (its readout compressor where it
/// has one, final norm, tied embedding) read on that state — the last state's scores are the
/// model's own. Teacher-forced in the contexts generation gave each token ([`teacher_forced`]'s
/// windows), through [`crate::model::Scoring::Lens`], under `beta_maps` when given (the fixed directions
/// of `k=mean` are not supported: the caller refuses them).
pub fn continuation_lens(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    continuation: &[u32],
    beta_maps: Option<&[crate::kernels::delta::BetaMap]>,
) -> Result<Vec<Vec<LensScore>>> {
    if prompt.is_empty() || continuation.is_empty() {
        return Ok(Vec::new());
    }
    let all: Vec<u32> = prompt.iter().chain(continuation).copied().collect();
    let (cap, n, subs) = (model.cfg.max_seq_len, all.len(), 2 * model.cfg.n_layers);
    let text = |id: u32| tok.decode(&[id]).unwrap_or_default();
    let score = |loss: f32, r: &[f32]| LensScore {
        logprob: -(loss as f64),
        rank: r[0] as usize,
        top: r[1] as u32,
        top_text: text(r[1] as u32),
        top_logprob: r[2] as f64,
        entropy: r[3] as f64,
    };
    let mut out = Vec::with_capacity(continuation.len());
    // The windows of `teacher_forced`: [start, last), predicting first ..= last.
    let (mut start, mut first) = (prompt.len().saturating_sub(cap), prompt.len());
    while first < n {
        let last = (start + cap).min(n - 1);
        let t = last - start;
        let tokens: Vec<i32> = all[start..last].iter().map(|&x| x as i32).collect();
        let targets: Vec<i32> = (start + 1..=last).map(|i| if i >= first { all[i] as i32 } else { -1 }).collect();
        // (The head in slices of 256 rows: a window of a large vocabulary never holds all its logits.)
        let p = model.loss_program_with(1, t, if t > 256 { 256 } else { 0 }, beta_maps, crate::model::Scoring::Lens)?;
        p.set_batch(model, &tokens, &targets)?;
        model.eval_loss(&p)?;
        let lens = p.lens().expect("a lens program");
        let (ll, lr) = (lens.loss.read_f32(&model.gpu)?, lens.ranks.read_f32(&model.gpu)?);
        let own_loss = p.row_losses().expect("a loss program").read_f32(&model.gpu)?;
        let own_ranks = p.row_ranks().expect("a ranked program").read_f32(&model.gpu)?;
        for i in first..=last {
            let j = i - 1 - start;
            let mut row: Vec<LensScore> =
                (0..subs).map(|s| score(ll[s * t + j], &lr[4 * (s * t + j)..4 * (s * t + j + 1)])).collect();
            row.push(score(own_loss[j], &own_ranks[4 * j..4 * j + 4]));
            out.push(row);
        }
        first = last + 1;
        if first >= n {
            break;
        }
        start = first - slide_keep(cap);
    }
    Ok(out)
}

/// The table `ddl generate --lens` prints after a continuation: per token (numbered from 1) its
/// probability under the head at each state, `*` where it was the head's likeliest there; `step`
/// is what the states follow ([`lens_step`]).
pub fn lens_table(states: &[String], step: &str, tokens: &[u32], lens: &[Vec<LensScore>], tok: &Tokenizer) -> String {
    let mut rows: Vec<Vec<String>> =
        vec![["#".to_string(), "token".to_string()].into_iter().chain(states.iter().cloned()).collect()];
    for (i, (id, row)) in tokens.iter().zip(lens).enumerate() {
        let mut r = vec![(i + 1).to_string(), format!("{:?}", tok.decode(&[*id]).unwrap_or_default())];
        r.extend(row.iter().map(|s| format!("{:.4}{}", s.logprob.exp(), if s.rank == 1 { "*" } else { " " })));
        rows.push(r);
    }
    let cols = rows[0].len();
    let mut out = format!(
        "--- logit lens: p of each token under the model's head read on the state after the embedding and after \
         {step} (teacher-forced, in the contexts generation gave it; * the head's likeliest there; the last column \
         is the model's own) ---\n",
    );
    out.push_str(&aligned(&rows, &[1]));
    if !lens.is_empty() {
        // Mean log p per state over the tokens.
        let means: Vec<String> = (0..cols - 2)
            .map(|s| format!("{:.4}", lens.iter().map(|r| r[s].logprob).sum::<f64>() / lens.len() as f64))
            .collect();
        out.push_str(&format!("mean log p per state ({} tokens): {}\n", lens.len(), means.join("  ")));
    }
    out
}

/// Per token of `continuation`: its log-probability under the interventions (`beta_maps`,
/// `k_mean`) minus without them, both teacher-forced ([`continuation_logprobs`]).
pub fn delta_logprobs(
    model: &Model,
    prompt: &[u32],
    continuation: &[u32],
    beta_maps: Vec<crate::kernels::delta::BetaMap>,
    k_mean: &[bool],
) -> Result<Vec<f64>> {
    now(delta_logprobs_with(model, prompt, continuation, beta_maps, k_mean, Wait::Block))
}

/// [`delta_logprobs`], waiting for the device as `wait` says.
pub async fn delta_logprobs_with(
    model: &Model,
    prompt: &[u32],
    continuation: &[u32],
    beta_maps: Vec<crate::kernels::delta::BetaMap>,
    k_mean: &[bool],
    wait: Wait,
) -> Result<Vec<f64>> {
    let base = continuation_logprobs_with(model, prompt, continuation, None, &[], wait).await?;
    let with = continuation_logprobs_with(model, prompt, continuation, Some(beta_maps), k_mean, wait).await?;
    Ok(with.iter().zip(&base).map(|(a, b)| a - b).collect())
}

/// The first position where two token sequences differ (one ending before the other counts),
/// `None` when they are equal.
pub fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y).or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

/// What `--compare` measures: the continuation without and with the interventions (same prompt,
/// same sampler seed), where they first differ, and the change of the log-probability of each
/// token of the original continuation under the interventions (teacher-forced).
#[derive(Debug, Clone)]
pub struct Comparison {
    pub original: Vec<u32>,
    pub intervened: Vec<u32>,
    /// Each continuation's text as generation streams it (cut right after a stop text, even
    /// inside its last token).
    pub original_text: String,
    pub intervened_text: String,
    /// Index of the first generated token that differs (`None`: identical).
    pub first_difference: Option<usize>,
    /// Per original continuation token: log p under the interventions − log p without them.
    pub delta_logprob: Vec<f64>,
}

/// Generates `prompt`'s continuation twice — as the model is, and under `beta_maps` — with
/// samplers of the same settings and seed, and measures the difference ([`Comparison`]).
pub fn compare(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenOptions,
    sampler: &SamplerConfig,
    beta_maps: Vec<crate::kernels::delta::BetaMap>,
    k_mean: &[bool],
) -> Result<Comparison> {
    let run = |maps: Option<Vec<crate::kernels::delta::BetaMap>>, k_mean: &[bool]| -> Result<(Vec<u32>, String)> {
        let o = GenOptions { beta_maps: maps, k_mean: k_mean.to_vec(), trace: false, ..opts.clone() };
        let mut s = Sampler::new(sampler.clone());
        let mut text = String::new();
        Ok((generate(model, tok, prompt, &o, &mut s, |t| text.push_str(t))?.0, text))
    };
    let (original, original_text) = run(None, &[])?;
    let (intervened, intervened_text) = run(Some(beta_maps.clone()), k_mean)?;
    let first_difference = first_difference(&original, &intervened);
    let delta_logprob = delta_logprobs(model, prompt, &original, beta_maps, k_mean)?;
    Ok(Comparison { original, intervened, original_text, intervened_text, first_difference, delta_logprob })
}
