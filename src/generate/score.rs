//! The scores of tokens (`--logprobs`, `--score-prompt`): each one's log-probability, rank and
//! the likeliest alternatives, their tables, and generation with them.

use super::*;

/// One of the most likely tokens at a position: its id, its text and its log-probability.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Alternative {
    pub id: u32,
    /// As [`TokenScore::text`]: "�" where the token is part of a character.
    pub text: String,
    /// As [`TokenScore::bytes`].
    pub bytes: Vec<u8>,
    pub logprob: f64,
}

/// A generated token as the model saw it: its log-probability under the model's distribution
/// (the logits' softmax at temperature 1, before the sampler's penalty and filters), its rank
/// there (1: the most likely), and the `top` most likely tokens at its position.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TokenScore {
    pub id: u32,
    /// The token's text alone, "�" for bytes that are not a whole character (a byte-level BPE
    /// splits a character over tokens; the text they make together is whole).
    pub text: String,
    /// The token's bytes ([`Tokenizer::token_raw_bytes`]), as OpenAI's `logprobs` give them:
    /// where `text` has "�", these say which bytes the token stands for.
    pub bytes: Vec<u8>,
    pub logprob: f64,
    pub rank: usize,
    pub top: Vec<Alternative>,
}

/// Up to this many alternatives, [`score_token`] keeps them in one pass over the logits.
pub(super) const TOP_BY_INSERTION: usize = 32;

/// Scores token `id` against `logits` (natural logs, in f64), with the `top` most likely tokens
/// (ties by id) and their texts as `tok` decodes each alone.
pub fn score_token(logits: &[f32], id: u32, top: usize, tok: &Tokenizer) -> TokenScore {
    let mx = logits.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let lse = mx + logits.iter().map(|&x| (x as f64 - mx).exp()).sum::<f64>().ln();
    let own = logits[id as usize];
    let rank = 1 + logits.iter().filter(|&&x| x > own).count();
    let by = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]).then(a.cmp(b));
    let n = top.min(logits.len());
    let idx = if n <= TOP_BY_INSERTION {
        // One pass keeping the n best in order (ties by id: the earlier id stays ahead), without
        // an index of the whole vocabulary.
        let mut best: Vec<u32> = Vec::with_capacity(n + 1);
        for i in 0..logits.len() as u32 {
            if best.len() == n && (n == 0 || by(&i, &best[n - 1]).is_ge()) {
                continue;
            }
            let at = best.partition_point(|b| by(b, &i).is_lt());
            best.insert(at, i);
            best.truncate(n);
        }
        best
    } else {
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        if n < idx.len() {
            idx.select_nth_unstable_by(n - 1, by);
        }
        idx.truncate(n);
        idx.sort_by(by);
        idx
    };
    let text = |i: u32| tok.decode(&[i]).unwrap_or_default();
    let bytes = |i: u32| tok.token_raw_bytes(i).unwrap_or_default();
    TokenScore {
        id,
        text: text(id),
        bytes: bytes(id),
        logprob: own as f64 - lse,
        rank,
        top: idx
            .into_iter()
            .map(|i| Alternative { id: i, text: text(i), bytes: bytes(i), logprob: logits[i as usize] as f64 - lse })
            .collect(),
    }
}

/// The table `--logprobs N` prints after a text (`ddl generate`, chat's `/set logprobs N`): each
/// token's log-probability, probability and rank under the model, and the `n` most likely tokens
/// at its place; then the mean and the perplexity it amounts to, and `stopped` (why the text
/// ended).
pub fn scores_table(scores: &[TokenScore], n: usize, stopped: &str) -> String {
    table_of_scores(
        scores,
        n,
        "log-probabilities under the model (temperature 1, before the sampling's filters)",
        1,
        Some(stopped),
    )
}

/// The table `--score-prompt` prints before the continuations: [`prompt_scores`] as
/// [`scores_table`] shows a continuation's, numbered by the tokens' places in the prompt (the
/// first, predicted by nothing, has no row).
pub fn prompt_scores_table(scores: &[TokenScore], n: usize) -> String {
    table_of_scores(
        scores,
        n,
        "the prompt's log-probabilities under the model (each token after the ones before it)",
        2,
        None,
    )
}

/// A table of scores under `title`, rows numbered from `first`, ending with the mean and, for a
/// continuation, why it `stopped`.
fn table_of_scores(scores: &[TokenScore], n: usize, title: &str, first: usize, stopped: Option<&str>) -> String {
    let cols = if n == 0 { 5 } else { 6 };
    // (N past the vocabulary shows every token: as many as there are.)
    let n = scores.iter().map(|s| s.top.len()).max().map_or(n, |most| n.min(most));
    let mut rows: Vec<Vec<String>> =
        vec![vec!["#".into(), "token".into(), "log p".into(), "p".into(), "rank".into(), format!("top {n}")]];
    for (i, s) in scores.iter().enumerate() {
        let top: Vec<String> =
            s.top.iter().map(|a| format!("{} {:.3}", shown_token(&a.text, &a.bytes), a.logprob.exp())).collect();
        rows.push(vec![
            (i + first).to_string(),
            shown_token(&s.text, &s.bytes),
            format!("{:.4}", s.logprob),
            format!("{:.4}", s.logprob.exp()),
            s.rank.to_string(),
            top.join("  "),
        ]);
    }
    rows.iter_mut().for_each(|r| r.truncate(cols));
    let mut out = format!("--- {title} ---\n");
    out.push_str(&aligned(&rows, &[1, 5]));
    match (scores.is_empty(), stopped) {
        (true, Some(stopped)) => out.push_str(&format!("no token generated: {stopped}\n")),
        (true, None) => out.push_str("no token to score: the prompt is one token, which nothing predicts\n"),
        (false, _) => {
            let mean = scores.iter().map(|s| s.logprob).sum::<f64>() / scores.len() as f64;
            out.push_str(&format!(
                "mean log p {mean:.4} over {} (perplexity {:.3})",
                crate::plural(scores.len(), "token"),
                (-mean).exp()
            ));
            if let Some(stopped) = stopped {
                out.push_str(&format!("; stopped: {stopped}"));
            }
            out.push('\n');
        }
    }
    out
}

/// A token as a table shows it: its text quoted with Rust's escapes (`"\n"`), and where its
/// bytes are not whole characters (a byte-level BPE's piece of one), those bytes as `\xE2`
/// (its text alone, "�", said neither which bytes nor that they were not the character U+FFFD).
/// A token whose bytes are unknown (`bytes` empty, as in a trace made before they were
/// recorded) shows its text.
pub fn shown_token(text: &str, bytes: &[u8]) -> String {
    if bytes.is_empty() || std::str::from_utf8(bytes).is_ok() {
        return format!("{text:?}");
    }
    let mut out = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            // (As `{:?}` shows a string: a double quote escaped, a single quote not.)
            match c {
                '\'' => out.push(c),
                c => out.extend(c.escape_debug()),
            }
        }
        out.extend(chunk.invalid().iter().map(|b| format!("\\x{b:02X}")));
    }
    out.push('"');
    out
}

/// Rows of cells as lines of columns two spaces apart, each as wide as its widest cell: the
/// columns in `left` aligned left, the others right; trailing spaces cut.
pub(super) fn aligned(rows: &[Vec<String>], left: &[usize]) -> String {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = (0..cols)
            .map(|c| match left.contains(&c) {
                true => format!("{:<w$}", r[c], w = widths[c]),
                false => format!("{:>w$}", r[c], w = widths[c]),
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// It generated `max_tokens` tokens.
    Length,
    /// Its text came to a stop text (`--stop`).
    StopText,
    /// The model generated the end-of-text token (neither shown nor returned).
    EndOfText,
    /// The caller asked it to stop ([`generate_scored_until`]: Ctrl-C in `ddl generate`).
    Interrupted,
}

/// What [`generate_scored`] generated.
#[derive(Debug, Clone)]
pub struct Generated {
    pub tokens: Vec<u32>,
    /// The generated tokens' traces, when asked.
    pub traces: Vec<TokenTrace>,
    /// Each generated token's score, when asked (`top` alternatives each).
    pub scores: Vec<TokenScore>,
    pub stop: Stop,
}

/// Generates with the KV and conv caches (through a [`Generator`]): the prompt is prefilled in
/// one batched forward, then one token per step. When the context is full, the last half of the
/// text is kept and re-prefilled (documented behaviour). Returns the new tokens and, if asked,
/// their traces (generated tokens only; see [`Generator::prompt_traces`] for the prompt's).
pub fn generate(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenOptions,
    sampler: &mut Sampler,
    on_token: impl FnMut(&str),
) -> Result<(Vec<u32>, Vec<TokenTrace>)> {
    let g = generate_scored(model, tok, prompt, opts, sampler, None, on_token)?;
    Ok((g.tokens, g.traces))
}

/// [`generate`], scoring each generated token ([`score_token`]) with `top` alternatives when
/// `top` is given, and saying why it stopped.
pub fn generate_scored(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenOptions,
    sampler: &mut Sampler,
    top: Option<usize>,
    on_token: impl FnMut(&str),
) -> Result<Generated> {
    generate_scored_until(model, tok, prompt, opts, sampler, top, &|| false, on_token)
}

/// [`generate_scored`], stopping before the next token once `stop_now` says so ([`Stop::Interrupted`];
/// what was generated is kept, its last character finished as at any end).
#[allow(clippy::too_many_arguments)]
pub fn generate_scored_until(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenOptions,
    sampler: &mut Sampler,
    top: Option<usize>,
    stop_now: &dyn Fn() -> bool,
    mut on_token: impl FnMut(&str),
) -> Result<Generated> {
    let owned = std::mem::replace(sampler, Sampler::new(sampler.cfg.clone()));
    let mut g =
        Generator::with_interventions(model, tok, prompt, owned, opts.trace, opts.beta_maps.clone(), &opts.k_mean)?;
    g.set_scores(top);
    let mut out = Generated { tokens: Vec::new(), traces: Vec::new(), scores: Vec::new(), stop: Stop::Length };
    for _ in 0..opts.max_tokens {
        if stop_now() {
            out.stop = Stop::Interrupted;
            break;
        }
        let s = g.step()?;
        // The stop token ends the text: it is neither shown nor returned.
        if opts.stop_token == Some(s.token) {
            out.stop = Stop::EndOfText;
            break;
        }
        out.tokens.push(s.token);
        out.scores.extend(s.score);
        if let Some(t) = s.trace {
            out.traces.push(t);
        }
        // A stop text ends the text right after it, even inside the token's text.
        if let Some(keep) = g.stop_cut(s.piece.len(), &opts.stop) {
            on_token(&s.piece[..keep]);
            *sampler = g.sampler;
            out.stop = Stop::StopText;
            return Ok(out);
        }
        on_token(&s.piece);
    }
    let rest = if out.tokens.is_empty() {
        String::new()
    } else {
        std::mem::replace(&mut g.stream, tok.stream()).finish().unwrap_or_default()
    };
    *sampler = g.sampler;
    if !rest.is_empty() {
        on_token(&rest);
    }
    Ok(out)
}

/// One timed generation, the same procedure natively and in a browser (the browser-vs-native
/// speed benchmark, `make bench-web`): prefills `prompt` (not timed), then generates `n` tokens
/// greedily, each read back with its trace when `trace` (as the visualizer generates). `clock`
/// gives milliseconds (`Instant` natively, `performance.now()` in a page). Returns the tokens and
/// the milliseconds the `n` steps took.
pub async fn timed_generation(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
    trace: bool,
    wait: Wait,
    clock: &dyn Fn() -> f64,
) -> Result<(Vec<u32>, f64)> {
    let greedy = Sampler::new(SamplerConfig { temperature: 0.0, ..Default::default() });
    let mut g = Generator::open(model, tok, prompt, greedy, trace, None, &[], wait).await?;
    let mut out = Vec::with_capacity(n);
    let t0 = clock();
    for _ in 0..n {
        out.push(g.step_with(wait).await?.token);
    }
    Ok((out, clock() - t0))
}

/// Log-probabilities (natural log) the model gives each token of `continuation` after `prompt`,
/// teacher-forced, under `beta_maps` when given and with the `k_mean` sublayers' directions
/// fixed to the prompt's mean (as generation fixes them). One value per continuation token, each
/// in the context generation gave it: the prompt's last `max_seq_len` tokens, then, whenever the
/// context is full, its last half ([`Generator::step`]'s slide) — one forward per such window.
pub fn continuation_logprobs(
    model: &Model,
    prompt: &[u32],
    continuation: &[u32],
    beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
    k_mean: &[bool],
) -> Result<Vec<f64>> {
    now(continuation_logprobs_with(model, prompt, continuation, beta_maps, k_mean, Wait::Block))
}

/// [`continuation_logprobs`], waiting for the device as `wait` says.
pub async fn continuation_logprobs_with(
    model: &Model,
    prompt: &[u32],
    continuation: &[u32],
    beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
    k_mean: &[bool],
    wait: Wait,
) -> Result<Vec<f64>> {
    if prompt.is_empty() || continuation.is_empty() {
        return Ok(Vec::new());
    }
    let k_fixed = mean_k_directions_with(model, prompt, &beta_maps, k_mean, wait).await?;
    let all: Vec<u32> = prompt.iter().chain(continuation).copied().collect();
    let mut out = Vec::with_capacity(continuation.len());
    teacher_forced(model, &all, prompt.len(), beta_maps, k_fixed, wait, |row, id| {
        let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
        let lse = max + row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
        out.push(row[id as usize] as f64 - lse);
    })
    .await?;
    Ok(out)
}

/// Scores every token of `prompt` after the first as the model predicts it from the ones before
/// it ([`score_token`] with `top` alternatives), teacher-forced in the contexts generation would
/// give a continuation ([`continuation_logprobs`]' windows), under `beta_maps` and with the
/// `k_mean` sublayers' directions fixed to the whole prompt's mean, as its generation fixes them
/// (`ddl generate --logprobs N --score-prompt`). One score per token from the second on.
pub fn prompt_scores(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    top: usize,
    beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
    k_mean: &[bool],
) -> Result<Vec<TokenScore>> {
    now(async {
        if prompt.len() < 2 {
            return Ok(Vec::new());
        }
        let k_fixed = mean_k_directions_with(model, prompt, &beta_maps, k_mean, Wait::Block).await?;
        let mut out = Vec::with_capacity(prompt.len() - 1);
        teacher_forced(model, prompt, 1, beta_maps, k_fixed, Wait::Block, |row, id| {
            out.push(score_token(row, id, top, tok))
        })
        .await?;
        Ok(out)
    })
}

/// Runs `all` through the model teacher-forced and calls `each(logits, token)` for every token
/// from `first` on, in order, with the logits that predicted it: the context generation would
/// give it — the last `max_seq_len` tokens before `first`, then, whenever the context is full,
/// its last half ([`Generator::step`]'s slide) — one forward per such window.
async fn teacher_forced(
    model: &Model,
    all: &[u32],
    first: usize,
    beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
    k_fixed: Vec<Option<crate::gpu::Tensor>>,
    wait: Wait,
    mut each: impl FnMut(&[f32], u32),
) -> Result<()> {
    let (cap, v) = (model.cfg.max_seq_len, model.cfg.vocab_size);
    let n = all.len();
    // A window [start, last): its positions predict tokens start + 1 ..= last; generation
    // predicts `first ..= last` in it (the earlier ones belong to the window before).
    let (mut start, mut first) = (first.saturating_sub(cap), first);
    while first < n {
        let last = (start + cap).min(n - 1);
        let window = &all[start..last];
        let mut cache = model.decode_cache()?;
        cache.beta_maps = beta_maps.clone();
        cache.k_fixed = k_fixed.clone();
        let mut p = model.decode_program(&cache, window.len())?;
        let logits = p.forward_with(model, window, &mut cache, wait).await?;
        for i in first..=last {
            each(&logits[(i - 1 - start) * v..(i - start) * v], all[i]);
        }
        first = last + 1;
        if first >= n {
            break;
        }
        start = first - slide_keep(cap);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_that_is_part_of_a_character_shows_its_bytes() {
        // A lone byte of '—' (E2 80 94), and a space with the next two: not "�".
        assert_eq!(shown_token("\u{FFFD}", &[0xE2]), r#""\xE2""#);
        assert_eq!(shown_token(" \u{FFFD}", &[b' ', 0xE2, 0x80]), r#"" \xE2\x80""#);
        assert_eq!(shown_token("\u{FFFD}\"", &[0x94, b'"']), r#""\x94\"""#);
        // Whole characters as `{:?}` shows them, U+FFFD itself too; no bytes known: the text.
        assert_eq!(shown_token("a'\n", b"a'\n"), r#""a'\n""#);
        assert_eq!(shown_token("—", "—".as_bytes()), "\"—\"");
        assert_eq!(shown_token("\u{FFFD}", "\u{FFFD}".as_bytes()), "\"\u{FFFD}\"");
        assert_eq!(shown_token("x", &[]), "\"x\"");
    }
}
