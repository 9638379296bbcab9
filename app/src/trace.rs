//! The in-memory trace: what every delta write did for every token of the text, from live
//! generation or from a trace file written by `ddl generate --trace`.

use std::cell::RefCell;
use std::path::Path;

use ddl::generate::TokenTrace;

/// One token of the text and, for DDL models, its writes.
#[derive(Debug, Clone)]
pub struct Row {
    pub trace: TokenTrace,
    /// Part of the prompt (prefilled) rather than generated.
    pub prompt: bool,
}

/// A 2-D PCA projection of all k vectors (cached; recomputed when the trace grows).
#[derive(Debug, Clone, Default)]
pub struct Pca {
    /// (token, sublayer, x, y) per k vector.
    pub points: Vec<(usize, usize, f64, f64)>,
    /// Fraction of the variance the two components explain.
    pub explained: [f64; 2],
}

/// The logit lens of a text ([`ddl::generate::continuation_lens`] from its first token, or after
/// a trace file's prompt): the states' names and, per token, one score per state (none for a
/// first token that nothing predicted).
#[derive(Debug, Clone, Default)]
pub struct Lens {
    pub states: Vec<String>,
    pub logprob: Vec<Vec<ddl::generate::LensScore>>,
}

/// All the tokens of a text with their traces.
#[derive(Debug, Default)]
pub struct TraceData {
    pub n_layers: usize,
    /// Model width d (length of every k).
    pub d: usize,
    /// Value width d_v (length of every v and k^T X).
    pub m: usize,
    pub rows: Vec<Row>,
    /// What a reader should know about a trace file (how it was made, what is missing).
    pub notes: Vec<String>,
    /// The prompt a trace file's tokens continue (its summary's `prompt`; written by `ddl
    /// generate --trace` since it records one).
    pub prompt: Option<String>,
    /// The sampling settings its tokens were drawn with (its summary's `sampling`).
    pub sampling: Option<ddl::generate::SamplerConfig>,
    /// The interventions its tokens were generated under (its summary's `interventions`, the
    /// specs `; `-separated).
    pub interventions: Option<String>,
    /// They ran with β allowed outside [0, 2] (`ddl generate --allow-out-of-range`).
    pub allow_out_of_range: bool,
    /// A chat's turns (its summary's `turns`, `ddl chat --trace`): where each starts and how its
    /// reply was sampled; empty for one generation.
    pub turns: Vec<ddl::generate::TraceTurn>,
    /// The logit lens of the text, when computed (the Logit lens view; stale once the text
    /// changes length).
    pub lens: Option<Lens>,
    pca: RefCell<Option<(usize, web_time::Instant, Pca)>>,
}

/// `path` is not a folder, as a trace is a file (`ddl-viz --trace` checks this before its window
/// opens; [`TraceData::load`] too): else what to give.
pub fn check_trace_path(path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!(
            "{} is a folder: a trace is the .safetensors file `ddl generate --trace FILE` wrote (a run folder \
             opens as a checkpoint: --checkpoint DIR, or Open…)",
            path.display()
        ));
    }
    Ok(())
}

impl TraceData {
    pub fn new(n_layers: usize, d: usize, m: usize) -> Self {
        TraceData { n_layers, d, m, ..Default::default() }
    }

    /// Number of sublayers S = 2·L (block-major: attention then MLP).
    pub fn s(&self) -> usize {
        2 * self.n_layers
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn clear(&mut self) {
        self.rows.clear();
        self.lens = None;
        *self.pca.borrow_mut() = None;
    }

    pub fn push(&mut self, trace: TokenTrace, prompt: bool) {
        self.rows.push(Row { trace, prompt });
    }

    /// The chat turn token `t` belongs to (0-based; `None` outside a chat's trace).
    pub fn turn_of(&self, t: usize) -> Option<usize> {
        self.turns.iter().rposition(|x| x.from_token <= t)
    }

    /// Whether token `t` has a full trace (not a baseline model, not a token whose write was skipped).
    pub fn has(&self, t: usize) -> bool {
        self.rows.get(t).is_some_and(|r| r.trace.beta.len() == self.s() && self.s() > 0)
    }

    /// Whether any token has a trace.
    pub fn any_traced(&self) -> bool {
        (0..self.len()).any(|t| self.has(t))
    }

    pub fn beta(&self, t: usize, s: usize) -> Option<f32> {
        self.has(t).then(|| self.rows[t].trace.beta[s]).filter(|b| b.is_finite())
    }

    pub fn k(&self, t: usize, s: usize) -> Option<&[f32]> {
        let d = self.d;
        self.has(t).then(|| &self.rows[t].trace.k[s * d..(s + 1) * d])
    }

    pub fn v(&self, t: usize, s: usize) -> Option<&[f32]> {
        let m = self.m;
        self.has(t).then(|| &self.rows[t].trace.v[s * m..(s + 1) * m])
    }

    pub fn ktx(&self, t: usize, s: usize) -> Option<&[f32]> {
        let m = self.m;
        self.has(t).then(|| &self.rows[t].trace.ktx[s * m..(s + 1) * m])
    }

    /// (`None` where it is not a finite number, as for β: a plot leaves a gap there.)
    pub fn write(&self, t: usize, s: usize) -> Option<f32> {
        self.has(t).then(|| self.rows[t].trace.write[s]).filter(|w| w.is_finite())
    }

    /// Mean β over the sublayers of token `t` (`None` when one is not finite).
    pub fn mean_beta(&self, t: usize) -> Option<f32> {
        self.has(t).then(|| self.rows[t].trace.beta.iter().sum::<f32>() / self.s() as f32).filter(|b| b.is_finite())
    }

    /// Total write size of token `t` (sum over sublayers; `None` when one is not finite).
    pub fn total_write(&self, t: usize) -> Option<f32> {
        self.has(t).then(|| self.rows[t].trace.write.iter().sum::<f32>()).filter(|w| w.is_finite())
    }

    /// Display name of sublayer `s`.
    pub fn sublayer_name(&self, s: usize) -> String {
        sublayer_name(s)
    }

    /// How surprised the model was by token `t`: −log p of it where it stands (nats; `None` for
    /// the first token of a context and traces without scores).
    pub fn surprise(&self, t: usize) -> Option<f32> {
        self.rows.get(t)?.trace.score.as_ref().map(|s| -s.logprob as f32)
    }

    /// Largest surprise over the tokens (for normalising colours).
    pub fn max_surprise(&self) -> f32 {
        (0..self.len()).filter_map(|t| self.surprise(t)).fold(0.0, f32::max)
    }

    /// Largest total write over the tokens (for normalising colours).
    pub fn max_total_write(&self) -> f32 {
        (0..self.len()).filter_map(|t| self.total_write(t)).fold(0.0, f32::max)
    }

    /// Regime counts per sublayer over the whole text: [identity, projection, reflection,
    /// outside [0, 2]] (each β in one).
    pub fn regime_counts(&self) -> Vec<[usize; 4]> {
        let mut c = vec![[0usize; 4]; self.s()];
        for t in 0..self.len() {
            for (s, c) in c.iter_mut().enumerate() {
                if let Some(b) = self.beta(t, s) {
                    c[regime_index(b)] += 1;
                }
            }
        }
        c
    }

    /// How far k turns from one token to the next, per sublayer: the angle in degrees between
    /// the lines of k_t and k_{t−1} (k and −k give the same write direction). `None` where a
    /// token has no trace.
    pub fn k_turn(&self, s: usize) -> Vec<Option<f64>> {
        (0..self.len())
            .map(|t| {
                if t == 0 {
                    return None;
                }
                let (a, b) = (self.k(t - 1, s)?, self.k(t, s)?);
                // (A k that is not finite: a gap, not a turn of 0°.)
                let c = cosine(a, b);
                c.is_finite().then(|| c.abs().min(1.0).acos().to_degrees())
            })
            .collect()
    }

    /// Cosine similarity between the k of every pair of sublayers, for token `t` (S×S, row-major).
    pub fn k_cosines(&self, t: usize) -> Option<Vec<f64>> {
        let s = self.s();
        if !self.has(t) {
            return None;
        }
        let mut out = vec![0.0; s * s];
        for i in 0..s {
            for j in 0..s {
                out[i * s + j] = cosine(self.k(t, i)?, self.k(t, j)?);
            }
        }
        Some(out)
    }

    /// The two principal components of all k vectors (tokens × sublayers), cached. While tokens
    /// stream in it is recomputed at most twice a second (then `false`: the picture is of fewer
    /// tokens than the text has; ask for a repaint).
    pub fn pca(&self) -> (Pca, bool) {
        if let Some((n, at, p)) = &*self.pca.borrow() {
            if *n == self.len() {
                return (p.clone(), true);
            }
            if at.elapsed() < std::time::Duration::from_millis(500) {
                return (p.clone(), false);
            }
        }
        let p = self.compute_pca();
        *self.pca.borrow_mut() = Some((self.len(), web_time::Instant::now(), p.clone()));
        (p, true)
    }

    fn compute_pca(&self) -> Pca {
        let d = self.d;
        let mut ids = Vec::new();
        let mut x: Vec<f64> = Vec::new();
        for t in 0..self.len() {
            for s in 0..self.s() {
                if let Some(k) = self.k(t, s)
                    && k.iter().all(|v| v.is_finite())
                {
                    ids.push((t, s));
                    x.extend(k.iter().map(|&v| v as f64));
                }
            }
        }
        let n = ids.len();
        if n < 2 || d == 0 {
            return Pca { points: ids.iter().map(|&(t, s)| (t, s, 0.0, 0.0)).collect(), explained: [0.0; 2] };
        }
        let mut mean = vec![0.0; d];
        for r in x.chunks(d) {
            mean.iter_mut().zip(r).for_each(|(m, v)| *m += v / n as f64);
        }
        for r in x.chunks_mut(d) {
            r.iter_mut().zip(&mean).for_each(|(v, m)| *v -= m);
        }
        // Fit on at most ~3000 vectors (a stride through the text), project all of them.
        let stride = n.div_ceil(3000).max(1);
        let fit = || x.chunks(d).step_by(stride);
        let total: f64 = fit().flatten().map(|v| v * v).sum::<f64>();
        // Power iteration on the covariance through the data (O(n·d) per iteration), with
        // deflation against the first component for the second.
        let mut comps: Vec<Vec<f64>> = Vec::new();
        let mut explained = [0.0; 2];
        for (c, explained) in explained.iter_mut().enumerate() {
            let mut v: Vec<f64> = (0..d).map(|i| ((i * 7919 + c * 104729) % 97) as f64 / 97.0 - 0.5).collect();
            let mut lambda = 0.0;
            for _ in 0..60 {
                for p in &comps {
                    let dot: f64 = v.iter().zip(p).map(|(a, b)| a * b).sum();
                    v.iter_mut().zip(p).for_each(|(a, b)| *a -= dot * b);
                }
                let norm = v.iter().map(|a| a * a).sum::<f64>().sqrt();
                if norm < 1e-300 {
                    break;
                }
                v.iter_mut().for_each(|a| *a /= norm);
                let mut w = vec![0.0; d];
                for r in fit() {
                    let proj: f64 = r.iter().zip(&v).map(|(a, b)| a * b).sum();
                    w.iter_mut().zip(r).for_each(|(w, a)| *w += proj * a);
                }
                lambda = v.iter().zip(&w).map(|(a, b)| a * b).sum();
                v = w;
            }
            for p in &comps {
                let dot: f64 = v.iter().zip(p).map(|(a, b)| a * b).sum();
                v.iter_mut().zip(p).for_each(|(a, b)| *a -= dot * b);
            }
            let norm = v.iter().map(|a| a * a).sum::<f64>().sqrt().max(1e-300);
            v.iter_mut().for_each(|a| *a /= norm);
            *explained = if total > 0.0 { lambda / total } else { 0.0 };
            comps.push(v);
        }
        let points = ids
            .iter()
            .zip(x.chunks(d))
            .map(|(&(t, s), r)| {
                let px: f64 = r.iter().zip(&comps[0]).map(|(a, b)| a * b).sum();
                let py: f64 = r.iter().zip(&comps[1]).map(|(a, b)| a * b).sum();
                (t, s, px, py)
            })
            .collect();
        Pca { points, explained }
    }

    /// Reads a trace written by `ddl generate --trace FILE` (FILE and its `.json` summary, which
    /// holds the token texts; without it tokens show as their ids).
    pub fn load(path: &Path) -> Result<TraceData, String> {
        check_trace_path(path)?;
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| {
            // `ddl generate --trace F.safetensors` writes F.json beside it: the summary, not the trace.
            let sibling = path.with_extension("safetensors");
            if path.extension().is_some_and(|x| x == "json") && sibling.is_file() {
                format!("{} is the trace's summary; the trace is {}", path.display(), sibling.display())
            } else if matches!(e, safetensors::SafeTensorError::MetadataIncompleteBuffer) {
                // (A safetensors header whose tensors do not end where the file does.)
                format!(
                    "{} is damaged: it does not hold the {} bytes its header describes (cut short by a write that \
                     stopped, or a partial copy); write it again with `ddl generate --trace`",
                    path.display(),
                    declared_len(&bytes).map(|n| n.to_string()).unwrap_or_else(|| "tensor".into())
                )
            } else {
                format!(
                    "{} is not a trace (safetensors): {e}; a trace is the .safetensors file `ddl generate --trace FILE` \
                     (or `ddl chat --trace FILE`) writes",
                    path.display()
                )
            }
        })?;
        // A trace of another format version is refused (older traces without the name load).
        if let Ok((_, meta)) = safetensors::SafeTensors::read_metadata(&bytes)
            && let Some(format) = meta.metadata().as_ref().and_then(|m| m.get("format"))
            && format.starts_with("ddl-trace-")
            && format != ddl::generate::TRACE_FORMAT
        {
            return Err(format!(
                "{}: a trace of format {format}; this ddl-viz reads {} (open it with the ddl-viz of the ddl that wrote it)",
                path.display(),
                ddl::generate::TRACE_FORMAT
            ));
        }
        if st.tensor("beta").is_err() && st.names().iter().any(|n| n.starts_with("blocks.") || n.contains("embed")) {
            return Err(format!(
                "{} holds a model's parameters, not a trace: open its folder as a checkpoint (--checkpoint DIR, or \
                 Open… on a run folder)",
                path.display()
            ));
        }
        if st.tensor("beta").is_err() {
            return Err(format!(
                "{} is not a trace: it holds no tensor 'beta' (a trace is the .safetensors file `ddl generate --trace \
                 FILE` writes: beta, k, v, ktx, write and tokens)",
                path.display()
            ));
        }
        // (A trace holds beta, k, v, ktx, write and tokens, all F32: one that does not was written
        // by something else, or damaged.)
        const REMEDY: &str = "a trace as `ddl generate --trace` writes it holds beta, k, v, ktx, write and tokens, \
                              all F32; write it again";
        let get = |name: &str| -> Result<(Vec<usize>, Vec<f32>), String> {
            let t = st.tensor(name).map_err(|_| format!("{}: tensor '{name}' is missing: {REMEDY}", path.display()))?;
            if t.dtype() != safetensors::Dtype::F32 {
                return Err(format!("{}: tensor '{name}' is {:?}, not F32: {REMEDY}", path.display(), t.dtype()));
            }
            let data = t.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            Ok((t.shape().to_vec(), data))
        };
        let (bs, beta) = get("beta")?;
        let (ks, k) = get("k")?;
        let (vs, v) = get("v")?;
        let (_, ktx) = get("ktx")?;
        let (_, write) = get("write")?;
        let (_, tokens) = get("tokens")?;
        // (What the shapes are and what they must be: a trace of another writer, or a damaged one.)
        let bad = || {
            format!(
                "{}: the tensors' shapes do not agree (beta {bs:?}, k {ks:?}, v {vs:?}, ktx {} values, write {} \
                 values, tokens {} values; a trace of T tokens and S sublayers, S even, has beta [T, S], k [T, S, d], \
                 v [T, S, d_v], ktx T·S·d_v values, write T·S and tokens T): not a trace as `ddl generate --trace` \
                 writes it; write it again",
                path.display(),
                ktx.len(),
                write.len(),
                tokens.len()
            )
        };
        if bs.len() != 2 || ks.len() != 3 || vs.len() != 3 {
            return Err(bad());
        }
        let (t, s, d, m) = (bs[0], bs[1], ks[2], vs[2]);
        if s % 2 != 0
            || ks[..2] != [t, s]
            || vs[..2] != [t, s]
            || tokens.len() != t
            || k.len() != t * s * d
            || v.len() != t * s * m
            || ktx.len() != t * s * m
            || write.len() != t * s
        {
            return Err(bad());
        }
        // The summary beside the trace: the tokens' text and how the text was generated.
        let summary_path = path.with_extension("json");
        let summary = std::fs::read_to_string(&summary_path)
            .map_err(|e| if e.kind() == std::io::ErrorKind::NotFound { "missing".to_string() } else { e.to_string() })
            .and_then(|j| serde_json::from_str::<serde_json::Value>(&j).map_err(|e| format!("not JSON ({e})")));
        // Tokens read rather than generated (a chat's lines), shown as the prompt's are.
        let read: Vec<bool> = summary
            .as_ref()
            .ok()
            .and_then(|j| j["tokens"].as_array().map(|a| a.iter().map(|x| x["read"] == true).collect()))
            .unwrap_or_default();
        // (A token that is part of a character, a byte-level BPE's lone byte, shows its bytes,
        // `\xE2`, where its text alone is "�": from the summary's `bytes`, where it has them.)
        let token_text = |x: &serde_json::Value| -> String {
            let text = x["text"].as_str().unwrap_or("");
            let bytes = summary_bytes(x);
            match std::str::from_utf8(&bytes) {
                Err(_) if !bytes.is_empty() => {
                    let shown = ddl::generate::shown_token(text, &bytes);
                    shown[1..shown.len() - 1].to_string()
                }
                _ => text.to_string(),
            }
        };
        let texts: Vec<String> = summary
            .as_ref()
            .ok()
            .and_then(|j| j["tokens"].as_array().map(|a| a.iter().map(token_text).collect()))
            .unwrap_or_default();
        let mut data = TraceData::new(s / 2, d, m);
        if texts.len() != t {
            let why = match &summary {
                Err(e) => e.clone(),
                Ok(_) => format!("its tokens do not match the trace's {t}"),
            };
            data.notes.push(format!(
                "tokens shown as ids (#N): the trace's summary {} (written beside it by `ddl generate --trace`) is {why}",
                summary_path.display()
            ));
        }
        data.prompt =
            summary.as_ref().ok().and_then(|j| j["prompt"].as_str()).filter(|s| !s.is_empty()).map(String::from);
        let sampler = |s: &serde_json::Value| {
            Some(ddl::generate::SamplerConfig {
                temperature: s["temperature"].as_f64()? as f32,
                top_k: s["top_k"].as_u64()? as usize,
                top_p: s["top_p"].as_f64()? as f32,
                // (Traces before min-p have none: off.)
                min_p: s["min_p"].as_f64().unwrap_or(0.0) as f32,
                repetition_penalty: s["repetition_penalty"].as_f64()? as f32,
                seed: s["seed"].as_u64()?,
            })
            .filter(|c| c.validate().is_ok())
        };
        data.sampling = summary.as_ref().ok().and_then(|j| sampler(&j["sampling"]));
        if let Some(turns) = summary.as_ref().ok().and_then(|j| j["turns"].as_array()).filter(|a| !a.is_empty()) {
            let parsed: Option<Vec<ddl::generate::TraceTurn>> = turns
                .iter()
                .map(|x| {
                    Some(ddl::generate::TraceTurn {
                        from_token: x["from_token"].as_u64()? as usize,
                        sampling: sampler(&x["sampling"])?,
                        max_tokens: x["max_tokens"].as_u64()? as usize,
                        stop: x["stop"]
                            .as_array()?
                            .iter()
                            .map(|s| s.as_str().map(String::from))
                            .collect::<Option<_>>()?,
                        // (Traces written before chats had interventions have none.)
                        interventions: x["interventions"].as_str().unwrap_or_default().to_string(),
                    })
                })
                .collect();
            // Each turn starts inside the trace and after the one before.
            match parsed.filter(|p| {
                p.windows(2).all(|w| w[0].from_token < w[1].from_token) && p.iter().all(|x| x.from_token < t)
            }) {
                Some(p) => {
                    data.notes.push(describe_turns(&p));
                    data.turns = p;
                }
                None => data.notes.push(format!(
                    "the chat's turns in {} are not readable (each needs from_token inside the trace and after the \
                     one before, sampling, max_tokens and stop): its tokens are shown without them",
                    summary_path.display()
                )),
            }
        }
        if let Some(iv) = summary.as_ref().ok().and_then(|j| j["interventions"].as_str()).filter(|s| !s.is_empty()) {
            data.allow_out_of_range =
                summary.as_ref().ok().and_then(|j| j["allow_out_of_range"].as_bool()).unwrap_or(false);
            let allowed =
                if data.allow_out_of_range { " with β allowed outside [0, 2] (--allow-out-of-range)" } else { "" };
            data.notes.push(format!(
                "this text was generated under the intervention {iv}{allowed} (`ddl generate --intervene`): the writes \
                 shown are the intervened model's; the Interventions view has it chosen, so Generate both there \
                 compares it with the model as trained"
            ));
            data.interventions = Some(iv.to_string());
        }
        // How likely the model found each token (traces before scores were recorded have none).
        let n_top = ddl::generate::TRACE_TOP;
        let optional = |name: &str, len: usize| get(name).ok().map(|x| x.1).filter(|x| x.len() == len);
        let (logprob, rank) = (optional("logprob", t), optional("rank", t));
        let (top_ids, top_lp) = (optional("top_ids", t * n_top), optional("top_logprob", t * n_top));
        // (Each alternative's text and bytes; traces made before the bytes were recorded have none.)
        let top_texts = |i: usize| -> Vec<(String, Vec<u8>)> {
            summary
                .as_ref()
                .ok()
                .and_then(|j| j["tokens"][i]["top"].as_array().cloned())
                .map(|a| {
                    a.iter().map(|x| (x["text"].as_str().unwrap_or_default().to_string(), summary_bytes(x))).collect()
                })
                .unwrap_or_default()
        };
        let score_of = |i: usize, id: u32| -> Option<ddl::generate::TokenScore> {
            let (lp, rank) = (logprob.as_ref()?[i], rank.as_ref()?[i]);
            if !lp.is_finite() || rank < 1.0 {
                return None;
            }
            let alt_texts = top_texts(i);
            let top = match (&top_ids, &top_lp) {
                (Some(ids), Some(lps)) => (0..n_top)
                    .filter(|&j| ids[i * n_top + j] >= 0.0 && lps[i * n_top + j].is_finite())
                    .map(|j| {
                        let a = ids[i * n_top + j] as u32;
                        let (text, bytes) = alt_texts.get(j).cloned().unwrap_or_else(|| (format!("#{a}"), Vec::new()));
                        ddl::generate::Alternative { id: a, text, bytes, logprob: lps[i * n_top + j] as f64 }
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let text = texts.get(i).cloned().unwrap_or_else(|| format!("#{id}"));
            // (The token's bytes: its text, read above, shows them where they are part of a character.)
            Some(ddl::generate::TokenScore {
                id,
                text,
                bytes: Vec::new(),
                logprob: lp as f64,
                rank: rank as usize,
                top,
            })
        };
        for i in 0..t {
            let traced = (0..s).all(|j| beta[i * s + j].is_finite());
            let slice = |a: &[f32], w: usize| if traced { a[i * s * w..(i + 1) * s * w].to_vec() } else { Vec::new() };
            let id = tokens[i] as u32;
            data.push(
                TokenTrace {
                    token: id,
                    text: texts.get(i).cloned().unwrap_or_else(|| format!("#{id}")),
                    beta: slice(&beta, 1),
                    k: slice(&k, d),
                    v: slice(&v, m),
                    ktx: slice(&ktx, m),
                    write: slice(&write, 1),
                    score: score_of(i, id),
                },
                texts.len() == t && read.get(i) == Some(&true),
            );
        }
        Ok(data)
    }
}

/// One line per chat turn: where it starts and how its reply was sampled.
fn describe_turns(turns: &[ddl::generate::TraceTurn]) -> String {
    const SHOWN: usize = 12;
    let mut lines: Vec<String> = turns
        .iter()
        .take(SHOWN)
        .enumerate()
        .map(|(i, x)| {
            let s = &x.sampling;
            let stop = if x.stop.is_empty() { String::new() } else { format!(", stop {:?}", x.stop) };
            let under = if x.interventions.is_empty() { String::new() } else { format!(", under {}", x.interventions) };
            format!(
                "turn {} from token {}: temperature {}, top_k {}, top_p {}, min_p {}, repetition penalty {}, seed {}, at most {} \
                 tokens{stop}{under}",
                i + 1,
                crate::panels::place(x.from_token),
                s.temperature,
                s.top_k,
                s.top_p,
                s.min_p,
                s.repetition_penalty,
                s.seed,
                x.max_tokens
            )
        })
        .collect();
    if turns.len() > SHOWN {
        lines.push(format!("… and {} more (all in the trace's summary, its `turns`)", turns.len() - SHOWN));
    }
    format!(
        "a chat of {} (`ddl chat --trace`): each line's tokens are shown as read (italic), the replies as \
         written; each reply's sampling:\n{}",
        ddl::plural(turns.len(), "turn"),
        lines.join("\n")
    )
}

/// The length a safetensors file's header declares (8 + header + its tensors' bytes), for the
/// message about a file that is cut short; `None` when the header itself does not read.
fn declared_len(bytes: &[u8]) -> Option<usize> {
    let n = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(bytes.get(8..8usize.checked_add(n)?)?).ok()?;
    let end = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .filter_map(|(_, t)| t["data_offsets"][1].as_u64())
        .max()
        .unwrap_or(0);
    Some(8 + n + end as usize)
}

/// Display name of sublayer `s` (block-major: attention then MLP).
pub fn sublayer_name(s: usize) -> String {
    format!("block {} {}", s / 2, if s.is_multiple_of(2) { "attn" } else { "MLP" })
}

/// Short name of sublayer `s`.
pub fn sublayer_short(s: usize) -> String {
    format!("{}{}", s / 2, if s.is_multiple_of(2) { "a" } else { "m" })
}

/// 0 = identity, 1 = projection, 2 = reflection (the thresholds of [`ddl::generate::regime`]),
/// 3 = outside [0, 2] (β an `--allow-out-of-range` intervention set: none of the three).
pub fn regime_index(beta: f32) -> usize {
    ddl::generate::regime_index(beta)
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += x as f64 * x as f64;
        bb += y as f64 * y as f64;
    }
    if aa == 0.0 || bb == 0.0 { 0.0 } else { ab / (aa.sqrt() * bb.sqrt()) }
}

pub fn norm(a: &[f32]) -> f64 {
    a.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt()
}

/// A token's (or an alternative's) `bytes` in a trace's summary; none in a trace made before they
/// were recorded.
fn summary_bytes(x: &serde_json::Value) -> Vec<u8> {
    x["bytes"].as_array().map_or(Vec::new(), |b| b.iter().filter_map(|b| b.as_u64()).map(|b| b as u8).collect())
}

/// How a token's text shows on a chip: whitespace made visible.
pub fn chip_text(text: &str) -> String {
    if text.is_empty() {
        return "''".into();
    }
    text.replace('\n', "\\n").replace('\t', "\\t").replace(' ', "·")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(beta: Vec<f32>, k: Vec<f32>) -> TokenTrace {
        let s = beta.len();
        TokenTrace {
            token: 1,
            text: "a".into(),
            beta,
            k,
            v: vec![0.0; s],
            ktx: vec![0.0; s],
            write: vec![1.0; s],
            score: None,
        }
    }

    #[test]
    fn beta_outside_0_2_counts_apart_from_the_three_regimes() {
        // β an --allow-out-of-range intervention set: −1 is no identity, 3 no reflection.
        let mut t = TraceData::new(1, 2, 1);
        t.push(row(vec![0.1, 1.0], vec![1.0, 0.0, 0.0, 1.0]), true);
        t.push(row(vec![-1.0, 3.0], vec![1.0, 0.0, 0.0, 1.0]), false);
        assert_eq!(t.regime_counts(), vec![[1, 0, 0, 1], [0, 1, 0, 1]]);
        assert_eq!((regime_index(-1.0), regime_index(3.0), regime_index(2.0)), (3, 3, 2));
        assert_eq!(crate::colors::REGIMES[3], "outside [0, 2]");
        assert_ne!(crate::colors::regime_color(3), crate::colors::regime_color(0));
        assert_ne!(crate::colors::regime_color(3), crate::colors::regime_color(2));
    }

    #[test]
    fn regimes_turns_and_pca() {
        let mut t = TraceData::new(1, 2, 1);
        t.push(row(vec![0.1, 1.0], vec![1.0, 0.0, 0.0, 1.0]), true);
        t.push(row(vec![1.9, 1.2], vec![0.0, 1.0, 0.0, -1.0]), false);
        t.push(TokenTrace::default(), false);
        assert_eq!(t.regime_counts(), vec![[1, 0, 1, 0], [0, 2, 0, 0]]);
        let turn = t.k_turn(0);
        assert_eq!(turn[0], None);
        assert!((turn[1].unwrap() - 90.0).abs() < 1e-9);
        assert_eq!(turn[2], None);
        assert!(t.k_turn(1)[1].unwrap().abs() < 1e-9, "k and −k are the same line");
        let c = t.k_cosines(0).unwrap();
        assert!((c[0] - 1.0).abs() < 1e-12 && c[1].abs() < 1e-12);
        let (p, fresh) = t.pca();
        assert!(fresh);
        assert_eq!(p.points.len(), 4);
        assert!(p.explained[0] >= p.explained[1] && p.explained[0] > 0.0);
        assert!(!t.has(2) && t.mean_beta(2).is_none());
        assert_eq!(chip_text(" a\n"), "·a\\n");
    }

    /// A write or k that is not a finite number is a gap where it stands, and leaves every
    /// other token's numbers (and the colour scale they share) as they are.
    #[test]
    fn values_that_are_not_finite_are_gaps() {
        let mut t = TraceData::new(1, 2, 1);
        t.push(row(vec![0.5, 1.0], vec![1.0, 0.0, 0.0, 1.0]), false);
        let mut bad = row(vec![0.5, 1.0], vec![f32::NAN, 0.0, 0.0, 1.0]);
        bad.write = vec![f32::INFINITY, 2.0];
        t.push(bad, false);
        let mut nan = row(vec![0.5, 1.0], vec![1.0, 0.0, 0.0, 1.0]);
        nan.write = vec![0.5, f32::NAN];
        t.push(nan, false);
        t.push(row(vec![0.5, 1.0], vec![0.0, 1.0, 0.0, 1.0]), false);
        assert_eq!((t.write(1, 0), t.write(1, 1), t.write(2, 1)), (None, Some(2.0), None));
        assert_eq!((t.total_write(0), t.total_write(1), t.total_write(2)), (Some(2.0), None, None));
        assert_eq!(t.max_total_write(), 2.0);
        // (k of sublayer 0 is NaN at token 1: no turn into it nor out of it.)
        let turn = t.k_turn(0);
        assert_eq!(turn[1..3], [None, None]);
        assert!((turn[3].unwrap() - 90.0).abs() < 1e-9);
        let mut b = row(vec![f32::NAN, 1.0], vec![1.0, 0.0, 0.0, 1.0]);
        b.write = vec![1.0, 1.0];
        t.push(b, false);
        assert_eq!((t.mean_beta(3), t.mean_beta(4)), (Some(0.75), None));
    }
}
