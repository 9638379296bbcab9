//! Traces (`--trace`): the safetensors file of every delta write per generated token and its
//! JSON summary, checked before anything is generated.

use super::*;

/// The format name a trace's two files carry (safetensors metadata and the summary's field).
pub const TRACE_FORMAT: &str = "ddl-trace-1";

/// Checks, before anything is generated, that a trace can be written at `path` without
/// destroying anything: its folder exists, the path does not end in `.json` (the summary goes
/// to `path` with the extension `.json`), and each of the two files is absent or an earlier
/// trace (which it replaces). The error names the file, what it holds and the remedy.
pub fn check_trace_path(path: &std::path::Path) -> Result<(), String> {
    let shown = path.display();
    if path.extension().is_some_and(|e| e == "json") {
        return Err(format!(
            "--trace {shown}: the trace's JSON summary is written beside it with the extension .json, \
             so the trace itself cannot end in .json; use e.g. {}",
            path.with_extension("safetensors").display()
        ));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if !dir.is_dir() {
        return Err(format!("--trace {shown}: the folder '{}' does not exist; create it first", dir.display()));
    }
    if let Some(e) = crate::train::checkpoint::kept_refusal("--trace", path) {
        return Err(e);
    }
    let json = path.with_extension("json");
    for (file, is_trace) in [(path, is_trace_file as fn(&std::path::Path) -> bool), (&json, is_trace_summary)] {
        if file.is_dir() {
            return Err(format!("--trace {shown}: '{}' is a folder; give a file name", file.display()));
        }
        if file.exists() && !is_trace(file) {
            return Err(format!(
                "--trace {shown}: '{}' exists and is not a ddl trace, and writing the trace would replace it; \
                 choose another --trace path",
                file.display()
            ));
        }
    }
    // The folder takes the files, under their temporary names too (as long as the writes' own):
    // a read-only folder or a name too long would otherwise fail only after generating.
    for file in [path, json.as_path()] {
        crate::train::checkpoint::probe_writable(file).map_err(|e| {
            format!("--trace {shown}: cannot write '{}' there: {e}; choose a folder that takes files", file.display())
        })?;
    }
    Ok(())
}

/// Whether `path` is a trace's safetensors file (its header's metadata says [`TRACE_FORMAT`]).
fn is_trace_file(path: &std::path::Path) -> bool {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(path) else { return false };
    let mut len = [0u8; 8];
    if f.read_exact(&mut len).is_err() {
        return false;
    }
    let len = u64::from_le_bytes(len);
    if len > 100 << 20 {
        return false;
    }
    let mut header = vec![0u8; len as usize];
    if f.read_exact(&mut header).is_err() {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(&header)
        .is_ok_and(|h| h["__metadata__"]["format"].as_str() == Some(TRACE_FORMAT))
}

/// Whether `path` is a trace's JSON summary.
fn is_trace_summary(path: &std::path::Path) -> bool {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v["format"].as_str() == Some(TRACE_FORMAT))
}

/// Writes a generation trace: `path` (safetensors arrays `beta` [T, S], `lambda` = 1−β,
/// `k` `[T, S, d]`, `v` / `ktx` `[T, S, m]`, `write` `[T, S]`, `tokens` `[T]`, S = 2·L sublayers in block
/// order, attention then MLP) and `path.json` (tokens, text, regimes and per-sublayer counts).
pub fn write_trace(
    path: &std::path::Path,
    cfg: &crate::model::ModelConfig,
    traces: &[TokenTrace],
) -> std::io::Result<()> {
    write_trace_with(path, cfg, traces, &TraceOrigin::default())
}

/// How a traced text was made, recorded in both trace files so that it can be made again.
#[derive(Debug, Clone, Default)]
pub struct TraceOrigin {
    /// The interventions, `; `-separated as [`crate::model::Interventions::describe`] writes them.
    pub interventions: String,
    /// Whether they ran with β allowed outside [0, 2] (`--allow-out-of-range`).
    pub allow_out_of_range: bool,
    /// The text the traced tokens continue (`""` when the traces are the whole text).
    pub prompt: String,
    /// The sampling settings of the traced tokens (their own seed).
    pub sampling: Option<SamplerConfig>,
    /// Per traced token, whether it was read (a prompt's or a chat line's token) rather than
    /// generated; empty: every traced token was generated.
    pub read: Vec<bool>,
    /// A chat's turns (empty elsewhere): where each starts among the traced tokens and the
    /// settings its reply was sampled with (`/set` changes them between turns).
    pub turns: Vec<TraceTurn>,
    /// The trace is a chat's (`ddl chat --trace`): its `turns` are recorded even when none is
    /// left (`[]` after `/undo` of every turn; elsewhere no turns are `null`).
    pub chat: bool,
}

/// One chat turn of a trace: its line's first token and how its reply was made.
#[derive(Debug, Clone)]
pub struct TraceTurn {
    /// Index of the turn's first traced token (its line's).
    pub from_token: usize,
    /// The reply's sampling, with the turn's own seed (the chat's seed plus the turns since it
    /// was given: `--seed`, or the last `/set seed`).
    pub sampling: SamplerConfig,
    pub max_tokens: usize,
    /// Stop texts besides a blank line.
    pub stop: Vec<String>,
    /// The interventions the turn ran under (`/intervene`), `; `-separated; empty: none.
    pub interventions: String,
}

/// [`write_trace`] with how the text was made ([`TraceOrigin`]): written into both files.
pub fn write_trace_with(
    path: &std::path::Path,
    cfg: &crate::model::ModelConfig,
    traces: &[TokenTrace],
    origin: &TraceOrigin,
) -> std::io::Result<()> {
    check_trace_path(path).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
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
    // How likely the model found each token: NaN (and rank 0, id −1) where nothing predicted it.
    let mut arrays = arrays;
    let k = TRACE_TOP;
    let score = |f: &dyn Fn(&TokenScore) -> f32, none: f32| -> Vec<f32> {
        traces.iter().map(|tr| tr.score.as_ref().map_or(none, f)).collect()
    };
    let top = |f: &dyn Fn(&Alternative) -> f32, none: f32| -> Vec<f32> {
        traces
            .iter()
            .flat_map(|tr| {
                let mut row: Vec<f32> = tr.score.as_ref().map_or(Vec::new(), |s| s.top.iter().map(f).collect());
                row.resize(k, none);
                row
            })
            .collect()
    };
    arrays.push(("logprob".into(), vec![t], score(&|s| s.logprob as f32, f32::NAN)));
    arrays.push(("rank".into(), vec![t], score(&|s| s.rank as f32, 0.0)));
    arrays.push(("top_ids".into(), vec![t, k], top(&|a| a.id as f32, -1.0)));
    arrays.push(("top_logprob".into(), vec![t, k], top(&|a| a.logprob as f32, f32::NAN)));
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
    meta.insert("format".to_string(), TRACE_FORMAT.to_string());
    meta.insert("config".to_string(), serde_json::to_string(cfg).unwrap());
    // (f32 settings written as typed: 0.7, not 0.699999988.)
    let short = |x: f32| x.to_string().parse::<f64>().unwrap_or(x as f64);
    let sampling_json = |c: &SamplerConfig| {
        serde_json::json!({"temperature": short(c.temperature), "top_k": c.top_k, "top_p": short(c.top_p),
            "min_p": short(c.min_p), "repetition_penalty": short(c.repetition_penalty), "seed": c.seed})
    };
    let sampling = origin.sampling.as_ref().map(sampling_json);
    let turns = (origin.chat || !origin.turns.is_empty()).then(|| {
        serde_json::Value::Array(
            origin
                .turns
                .iter()
                .map(|t| {
                    serde_json::json!({"from_token": t.from_token, "sampling": sampling_json(&t.sampling),
                        "max_tokens": t.max_tokens, "stop": t.stop, "interventions": t.interventions})
                })
                .collect(),
        )
    });
    meta.insert("interventions".to_string(), origin.interventions.clone());
    if origin.allow_out_of_range {
        meta.insert("allow_out_of_range".to_string(), "true".to_string());
    }
    meta.insert("prompt".to_string(), origin.prompt.clone());
    if let Some(s) = &sampling {
        meta.insert("sampling".to_string(), s.to_string());
    }
    if let Some(t) = &turns {
        meta.insert("turns".to_string(), t.to_string());
    }
    let bytes = safetensors::serialize(views, Some(meta)).map_err(std::io::Error::other)?;
    // [identity, projection, reflection] by the thresholds alone (as before: they sum to the
    // tokens), then how many of those βs lie outside [0, 2].
    let mut counts = vec![[0usize; 4]; s];
    for tr in traces {
        for (i, b) in tr.beta.iter().enumerate() {
            let r = match regime(*b) {
                "identity" => 0,
                "projection" => 1,
                _ => 2,
            };
            counts[i][r] += 1;
            counts[i][3] += outside_range(*b) as usize;
        }
    }
    let summary = serde_json::json!({
        "format": TRACE_FORMAT,
        "interventions": origin.interventions,
        "allow_out_of_range": origin.allow_out_of_range,
        "prompt": origin.prompt,
        "sampling": sampling,
        "turns": turns,
        "regime_thresholds": {"identity": "beta < 0.5", "projection": "0.5 <= beta <= 1.5", "reflection": "beta > 1.5",
            "outside": "beta < 0 or beta > 2: in none of the three regimes (1 - beta is above 1 or below -1: the write \
                amplifies along k); such a beta keeps its side's label in `regime` and `regime_counts`, and is flagged \
                in each token's `outside_range` and counted in `regime_counts`' `outside`"},
        "sublayers": (0..s).map(crate::model::intervene::sublayer_name).collect::<Vec<_>>(),
        "tokens": traces.iter().enumerate().map(|(i, tr)| serde_json::json!({
            "id": tr.token, "text": tr.text, "read": origin.read.get(i).copied().unwrap_or(false),
            "beta": tr.beta, "regime": tr.beta.iter().map(|b| regime(*b)).collect::<Vec<_>>(),
            "outside_range": tr.beta.iter().map(|b| outside_range(*b)).collect::<Vec<_>>(),
            "logprob": tr.score.as_ref().map(|s| s.logprob), "rank": tr.score.as_ref().map(|s| s.rank),
            "top": tr.score.as_ref().map(|s| &s.top), "bytes": tr.score.as_ref().map(|s| &s.bytes),
        })).collect::<Vec<_>>(),
        "regime_counts": counts.iter().map(|c| serde_json::json!({"identity": c[0], "projection": c[1], "reflection": c[2], "outside": c[3]})).collect::<Vec<_>>(),
    });
    let json_path = path.with_extension("json");
    // Both or neither: a full disk while the summary was written left the new arrays beside the
    // earlier trace's summary (or none), a pair that contradicts itself.
    let json = serde_json::to_string_pretty(&summary).map_err(std::io::Error::other)?;
    crate::train::checkpoint::write_all_atomic(&[(path, &bytes), (&json_path, json.as_bytes())])
}
