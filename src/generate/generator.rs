//! The generator: a model's caches fed a prompt and its continuation token by token, each
//! step sampled (or forced), with a per-token trace of every delta write when asked.

use super::*;

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
    /// How likely the model found this token where it stands ([`score_token`] with
    /// [`TRACE_TOP`] alternatives): `None` for the first token of a context (nothing predicted it)
    /// and in traces written before scores were recorded.
    pub score: Option<TokenScore>,
}

/// The alternatives a trace records per token (the most likely tokens at its place).
pub const TRACE_TOP: usize = 5;

/// Reads what every delta write did for the rows `rows` of program `p` into `trs` (one per row):
/// each buffer is read back once for all the rows.
async fn read_traces(
    model: &Model,
    p: &crate::model::DecodeProgram,
    rows: std::ops::Range<usize>,
    trs: &mut [TokenTrace],
    wait: Wait,
) -> Result<()> {
    let (d, m) = (model.cfg.d_model, model.cfg.m());
    let g = &model.gpu;
    for w in p.acts().writes() {
        let beta = w.beta.read_f32_with(g, wait).await?;
        let k = w.k.read_f32_with(g, wait).await?;
        let v = w.v.read_f32_with(g, wait).await?;
        let delta = w.delta.read_f32_with(g, wait).await?;
        for (row, tr) in rows.clone().zip(trs.iter_mut()) {
            let b = beta[row];
            let (vr, dr) = (&v[row * m..(row + 1) * m], &delta[row * m..(row + 1) * m]);
            tr.beta.push(b);
            tr.k.extend_from_slice(&k[row * d..(row + 1) * d]);
            tr.v.extend_from_slice(vr);
            tr.ktx.extend(vr.iter().zip(dr).map(|(a, b)| a - b));
            tr.write.push(b.abs() * dr.iter().map(|x| x * x).sum::<f32>().sqrt());
        }
    }
    Ok(())
}

/// One token of a [`Generator`].
#[derive(Debug, Clone)]
pub struct GenStep {
    pub token: u32,
    /// The text this token completes (empty while a character is split over tokens).
    pub piece: String,
    /// What every delta write did while the model read this token (when tracing).
    pub trace: Option<TokenTrace>,
    /// How likely the model found it ([`Generator::set_scores`]; `None` unless asked).
    pub score: Option<TokenScore>,
}

/// Stateful generation with the KV and conv caches, one token per [`Generator::step`]: the
/// prompt is prefilled in one batched forward by [`Generator::new`]. When the context is full,
/// the last half of the text is kept and re-prefilled (documented behaviour).
pub struct Generator<'a> {
    model: &'a Model,
    tok: &'a Tokenizer,
    cache: crate::model::DecodeCache,
    step_prog: crate::model::DecodeProgram,
    logits: Vec<f32>,
    history: Vec<u32>,
    pub(super) sampler: Sampler,
    pub(super) stream: crate::tokenizer::StreamDecoder<'a>,
    text: String,
    /// The U+FFFD of `text` that stand for no character the model wrote.
    unwritten: Unwritten,
    trace: bool,
    /// Alternatives each sampled token is scored with for its [`GenStep`] (`None`: not scored).
    score_top: Option<usize>,
    prompt_traces: Vec<TokenTrace>,
}

impl<'a> Generator<'a> {
    /// Prefills `prompt` (its last `max_seq_len` tokens when it is longer than the context).
    /// With `trace`, the writes of the prefilled prompt tokens are recorded too
    /// ([`Generator::prompt_traces`]).
    pub fn new(model: &'a Model, tok: &'a Tokenizer, prompt: &[u32], sampler: Sampler, trace: bool) -> Result<Self> {
        Self::with_interventions(model, tok, prompt, sampler, trace, None, &[])
    }

    /// [`Generator::new`] under interventions: every decode program of this generation applies
    /// `beta_maps` (one per sublayer, [`crate::model::Interventions::maps`]), and the sublayers in
    /// `k_mean` write along the prompt's mean direction ([`mean_k_directions`]) from the prefill on.
    pub fn with_interventions(
        model: &'a Model,
        tok: &'a Tokenizer,
        prompt: &[u32],
        sampler: Sampler,
        trace: bool,
        beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
        k_mean: &[bool],
    ) -> Result<Self> {
        now(Self::open(model, tok, prompt, sampler, trace, beta_maps, k_mean, Wait::Block))
    }

    /// [`Generator::new`] whose device reads are awaited (a browser; an async task natively).
    pub async fn new_async(
        model: &'a Model,
        tok: &'a Tokenizer,
        prompt: &[u32],
        sampler: Sampler,
        trace: bool,
    ) -> Result<Self> {
        Self::open(model, tok, prompt, sampler, trace, None, &[], Wait::Await).await
    }

    /// [`Generator::with_interventions`] whose device reads are awaited.
    pub async fn with_interventions_async(
        model: &'a Model,
        tok: &'a Tokenizer,
        prompt: &[u32],
        sampler: Sampler,
        trace: bool,
        beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
        k_mean: &[bool],
    ) -> Result<Self> {
        Self::open(model, tok, prompt, sampler, trace, beta_maps, k_mean, Wait::Await).await
    }

    /// [`Generator::with_interventions`] waiting for the device as `wait` says: code written once
    /// for a thread that may block and for a browser that must await.
    #[allow(clippy::too_many_arguments)]
    pub async fn open(
        model: &'a Model,
        tok: &'a Tokenizer,
        prompt: &[u32],
        sampler: Sampler,
        trace: bool,
        beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
        k_mean: &[bool],
        wait: Wait,
    ) -> Result<Self> {
        let k_fixed = mean_k_directions_with(model, prompt, &beta_maps, k_mean, wait).await?;
        let cap = model.cfg.max_seq_len;
        let v = model.cfg.vocab_size;
        let keep = &prompt[prompt.len().saturating_sub(cap)..];
        if keep.is_empty() {
            return Err(crate::gpu::GpuError::Shape("generation needs a prompt of at least one token".into()));
        }
        let mut cache = model.decode_cache()?;
        cache.beta_maps = beta_maps;
        cache.k_fixed = k_fixed;
        let step_prog = model.decode_program(&cache, 1)?;
        let mut pre = model.decode_program(&cache, keep.len())?;
        let first = pre.forward_with(model, keep, &mut cache, wait).await?;
        let logits = first[(keep.len() - 1) * v..].to_vec();
        let mut prompt_traces = Vec::new();
        if trace {
            let mut st = tok.stream();
            prompt_traces = keep
                .iter()
                .enumerate()
                .map(|(i, &t)| TokenTrace {
                    token: t,
                    text: st.push(t).unwrap_or_default(),
                    // (Token i as predicted after the ones before it: the prefill's row i − 1.)
                    score: (i > 0).then(|| score_token(&first[(i - 1) * v..i * v], t, TRACE_TOP, tok)),
                    ..Default::default()
                })
                .collect();
            if model.cfg.variant.is_ddl() {
                read_traces(model, &pre, 0..keep.len(), &mut prompt_traces, wait).await?;
            }
        }
        Ok(Generator {
            model,
            tok,
            cache,
            step_prog,
            logits,
            history: prompt.to_vec(),
            sampler,
            // Byte-level BPE can split a character over tokens: stream whole characters only.
            stream: tok.stream(),
            text: String::new(),
            unwritten: Unwritten::default(),
            trace,
            score_top: None,
            prompt_traces,
        })
    }

    /// An empty cache for a re-prefill, with this generation's interventions.
    fn fresh_cache(&mut self) -> Result<()> {
        let (maps, fixed) = (self.cache.beta_maps.take(), std::mem::take(&mut self.cache.k_fixed));
        self.cache = self.model.decode_cache()?;
        (self.cache.beta_maps, self.cache.k_fixed) = (maps, fixed);
        Ok(())
    }

    /// The traces of the prefilled prompt tokens (empty unless tracing).
    pub fn prompt_traces(&self) -> &[TokenTrace] {
        &self.prompt_traces
    }

    /// Reads more tokens into the caches (a chat's next turn): only these are prefilled, in one
    /// batched forward at the current position, so the model sees the whole history as if it had
    /// been one prompt. Past the context, the last half of it (and at least the new tokens, at
    /// most a context) is kept and re-prefilled, as [`Generator::step`] slides. Returns how many
    /// tokens were prefilled and, when tracing, the new tokens' traces.
    pub fn feed(&mut self, tokens: &[u32]) -> Result<(usize, Vec<TokenTrace>)> {
        now(self.feed_with(tokens, Wait::Block))
    }

    /// [`Generator::feed`] whose device reads are awaited.
    pub async fn feed_async(&mut self, tokens: &[u32]) -> Result<(usize, Vec<TokenTrace>)> {
        self.feed_with(tokens, Wait::Await).await
    }

    /// [`Generator::feed`], waiting for the device as `wait` says.
    pub async fn feed_with(&mut self, tokens: &[u32], wait: Wait) -> Result<(usize, Vec<TokenTrace>)> {
        let model = self.model;
        let (cap, v) = (model.cfg.max_seq_len, model.cfg.vocab_size);
        if tokens.is_empty() {
            return Ok((0, Vec::new()));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= v) {
            return Err(crate::gpu::GpuError::Shape(format!(
                "token id {bad} is outside the model's vocabulary of {v}"
            )));
        }
        self.history.extend_from_slice(tokens);
        let (run, fresh): (Vec<u32>, bool) = if self.cache.pos + tokens.len() > cap {
            let keep = (cap / 2).max(tokens.len()).min(cap);
            (self.history[self.history.len() - keep..].to_vec(), true)
        } else {
            (tokens.to_vec(), false)
        };
        if fresh {
            self.fresh_cache()?;
        }
        let mut p = model.decode_program(&self.cache, run.len())?;
        let l = p.forward_with(model, &run, &mut self.cache, wait).await?;
        // The prediction the first new token answers: the logits after the history before it.
        let before = std::mem::replace(&mut self.logits, l[(run.len() - 1) * v..].to_vec());
        if fresh {
            self.step_prog = model.decode_program(&self.cache, 1)?;
        }
        let mut traces = Vec::new();
        if self.trace {
            let mut st = self.tok.stream();
            // New token j is the run's row r = j + (run − tokens); r − 1 predicted it.
            let off = run.len() as isize - tokens.len() as isize;
            traces = tokens
                .iter()
                .enumerate()
                .map(|(j, &t)| {
                    let r = j as isize + off;
                    let logits = if r >= 1 {
                        Some(&l[(r as usize - 1) * v..r as usize * v])
                    } else {
                        (j == 0).then_some(&before[..])
                    };
                    TokenTrace {
                        token: t,
                        text: st.push(t).unwrap_or_default(),
                        score: logits.map(|x| score_token(x, t, TRACE_TOP, self.tok)),
                        ..Default::default()
                    }
                })
                .collect();
            let n = tokens.len().min(run.len());
            if model.cfg.variant.is_ddl() {
                read_traces(model, &p, run.len() - n..run.len(), &mut traces[tokens.len() - n..], wait).await?;
            }
            // The tokens beyond the context were not read: no trace, as for a prompt's (their
            // text was decoded above, so the rest's pieces are whole).
            traces.drain(..tokens.len() - n);
        }
        Ok((run.len(), traces))
    }

    /// Scores every token [`Generator::step`] samples from now on ([`GenStep::score`], with `top`
    /// alternatives), or none (`None`).
    pub fn set_scores(&mut self, top: Option<usize>) {
        self.score_top = top;
    }

    /// Samples with `sampler` from now on (a chat's changed settings or next turn's seed).
    pub fn set_sampler(&mut self, sampler: Sampler) {
        self.sampler = sampler;
    }

    /// Ends a reply: the text the stream decoder still holds back (an incomplete character), and
    /// the generated text starts afresh (the caches and history stay).
    pub fn end_reply(&mut self) -> String {
        let rest = std::mem::replace(&mut self.stream, self.tok.stream()).finish().unwrap_or_default();
        self.text.clear();
        self.unwritten = Unwritten::default();
        rest
    }

    /// The prompt and every token generated so far.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    /// How many of the history's last tokens the model reads now (its context, after the
    /// slides): what [`Generator::logits`] predicts from and the repetition penalty covers.
    pub fn context_len(&self) -> usize {
        self.cache.pos
    }

    /// The logits the next [`Generator::step`] samples from (the model's prediction after the
    /// history, in the context it has now).
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// The text generated so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Where a stop text ends in the newest piece of the text generated so far, `piece_len` bytes
    /// ([`stop_cut`]), matching only text the model wrote: not a U+FFFD its tokenizer put for
    /// bytes that form no character ([`Unwritten`]).
    pub fn stop_cut(&self, piece_len: usize, stops: &[String]) -> Option<usize> {
        stop_cut_written(&self.text, piece_len, stops, self.unwritten.offsets())
    }

    /// Samples the next token and feeds it to the model (so its trace, and the logits of the
    /// token after it, are ready).
    pub fn step(&mut self) -> Result<GenStep> {
        now(self.step_with(Wait::Block))
    }

    /// [`Generator::step`] whose device reads are awaited.
    pub async fn step_async(&mut self) -> Result<GenStep> {
        self.step_with(Wait::Await).await
    }

    /// [`Generator::step`], waiting for the device as `wait` says.
    pub async fn step_with(&mut self, wait: Wait) -> Result<GenStep> {
        let model = self.model;
        let (cap, v) = (model.cfg.max_seq_len, model.cfg.vocab_size);
        // (The repetition penalty covers the context the model reads, not the tokens a long
        // prompt dropped or a slide let go.)
        let window = &self.history[self.history.len() - self.context_len().min(self.history.len())..];
        let next = self.sampler.sample(&self.logits, window);
        // Scored once, from the logits it was sampled from, for the trace and the caller.
        let scored =
            self.score_top.max(self.trace.then_some(TRACE_TOP)).map(|n| score_token(&self.logits, next, n, self.tok));
        let cut = |n: usize| {
            scored.clone().map(|mut s| {
                s.top.truncate(n);
                s
            })
        };
        let (score, step_score) = (cut(TRACE_TOP), self.score_top.and_then(cut));
        if self.stream.fresh() {
            // The text so far as the first new token's context (a WordPiece `##` joins it).
            self.stream.prime(&self.history);
        }
        self.history.push(next);
        let piece = self.stream.push(next).unwrap_or_default();
        self.unwritten.push(self.tok, next, &piece, self.text.len());
        self.text.push_str(&piece);
        let mut trace =
            self.trace.then(|| TokenTrace { token: next, text: piece.clone(), score, ..Default::default() });
        let ddl = model.cfg.variant.is_ddl();
        if self.cache.pos + 1 > cap {
            // Slide: keep the last half of the context (this token included) and re-prefill it.
            let keep_from = self.history.len() - slide_keep(cap);
            let kept: Vec<u32> = self.history[keep_from..].to_vec();
            self.fresh_cache()?;
            let mut p = model.decode_program(&self.cache, kept.len())?;
            let l = p.forward_with(model, &kept, &mut self.cache, wait).await?;
            self.logits = l[(kept.len() - 1) * v..].to_vec();
            self.step_prog = model.decode_program(&self.cache, 1)?;
            if let (Some(tr), true) = (trace.as_mut(), ddl) {
                read_traces(model, &p, kept.len() - 1..kept.len(), std::slice::from_mut(tr), wait).await?;
            }
        } else {
            self.logits = self.step_prog.forward_with(model, &[next], &mut self.cache, wait).await?;
            if let (Some(tr), true) = (trace.as_mut(), ddl) {
                read_traces(model, &self.step_prog, 0..1, std::slice::from_mut(tr), wait).await?;
            }
        }
        Ok(GenStep { token: next, piece, trace, score: step_score })
    }

    /// Whatever text the stream decoder still holds back (an incomplete character).
    pub fn finish(self) -> String {
        self.stream.finish().unwrap_or_default()
    }
}
