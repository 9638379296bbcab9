//! `ddl golden`: parity with the PyTorch float64 golden files (format `ddl-golden-1`, see
//! `tests/golden/README.md`). The model is rebuilt from the file's metadata alone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::gpu::Gpu;
use crate::kernels::adamw::AdamWConfig;
use crate::model::{Layout, Model, ModelConfig, Parts, Precision};
use crate::testing::compare;

mod integrity;

/// A malformed or unsupported golden file.
#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    #[error("{path}: cannot read: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "{path}: not a valid safetensors file (truncated, corrupt, or another kind of file): {msg}; nothing was \
         checked (this is not a parity failure): {REMEDY}"
    )]
    Format { path: PathBuf, msg: String },
    /// A file that reads but contradicts itself (values a reference never writes, quantities that
    /// disagree with each other): damaged, not a parity result.
    #[error("{path}: the file is damaged: {msg}; nothing was checked (this is not a parity failure): {REMEDY}")]
    Damaged { path: PathBuf, msg: String },
    #[error("{path}: {msg}")]
    Content { path: PathBuf, msg: String },
    #[error("{path}: the GPU failed: {source}")]
    Gpu { path: PathBuf, source: crate::gpu::GpuError },
}

/// What to do with a damaged golden file.
const REMEDY: &str = "copy it again from the set it came from (the repository's tests/golden/, or the shared set, \
                      e.g. ../shared/golden/)";

/// What to say of a golden file given that does not exist: the closest name among the golden
/// files of its folder (a variant's name mistyped: `ddll.safetensors`) and the files there, or
/// that the folder itself is missing; what to give instead.
pub fn missing_file(path: &Path) -> String {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut there: Vec<String> = std::fs::read_dir(parent)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "safetensors"))
                .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    there.sort();
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let mut msg = format!("golden file '{}' does not exist", path.display());
    if !parent.is_dir() {
        msg.push_str(&format!(
            ", nor does its folder '{}'; give golden files (e.g. tests/golden/*.safetensors) or a folder of them",
            parent.display()
        ));
        return msg;
    }
    if there.is_empty() {
        msg.push_str(&format!(
            " (and '{}' holds no .safetensors files); give golden files (e.g. tests/golden/*.safetensors) or a \
             folder of them",
            parent.display()
        ));
        return msg;
    }
    let near = there
        .iter()
        .map(|t| (crate::train::config::edit_distance(&stem, t), t))
        .filter(|(d, _)| *d <= (stem.chars().count() / 3).max(1))
        .min();
    if let Some((_, t)) = near {
        msg.push_str(&format!(" (did you mean '{}'?)", parent.join(format!("{t}.safetensors")).display()));
    }
    msg.push_str(&format!(
        "; the golden files in '{}': {} (give them by name, or the folder for all of them)",
        parent.display(),
        there.join(", ")
    ));
    msg
}

/// Tensor data of a golden file.
#[derive(Debug, Clone)]
pub enum Data {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

/// The optimizer settings recorded in a file.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct GoldenOpt {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub grad_clip: f64,
    pub clip_norm_eps: f64,
    pub decayed: Vec<String>,
}

/// A loaded golden file.
pub struct Golden {
    pub path: PathBuf,
    pub config: ModelConfig,
    pub opt: GoldenOpt,
    pub steps: usize,
    pub params: Vec<String>,
    pub batch: usize,
    pub seq_len: usize,
    pub tensors: HashMap<String, (Vec<usize>, Data)>,
    /// The `--intervene` specs the reference ran with (`tests/golden/override/`: checked by the
    /// decode tests against the engine's interventions), empty for a plain model.
    pub interventions: String,
    /// The tensors a check has read (`unread` names the others).
    read: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Golden {
    /// Reads and checks a golden file.
    pub fn load(path: &Path) -> Result<Golden, GoldenError> {
        let bytes = std::fs::read(path).map_err(|source| GoldenError::Io { path: path.to_path_buf(), source })?;
        Self::parse(path, &bytes)
    }

    /// Parses the bytes of a golden file (`path` names it in errors).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Golden, GoldenError> {
        let p = path.to_path_buf();
        let content = |msg: String| GoldenError::Content { path: p.clone(), msg };
        let damaged = |msg: String| GoldenError::Damaged { path: p.clone(), msg };
        let st = safetensors::SafeTensors::deserialize(bytes)
            .map_err(|e| GoldenError::Format { path: p.clone(), msg: e.to_string() })?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(bytes)
            .map_err(|e| GoldenError::Format { path: p.clone(), msg: e.to_string() })?;
        let md = meta.metadata().clone().ok_or_else(|| content("no __metadata__ in the header".into()))?;
        let get = |k: &str| md.get(k).cloned().ok_or_else(|| content(format!("metadata key '{k}' is missing")));
        let format = get("format")?;
        if format == crate::train::checkpoint::FORMAT {
            return Err(content(
                "a ddl checkpoint's model file, not a golden file: `ddl golden` checks the engine against PyTorch's \
                 golden files (tests/golden/*.safetensors); a checkpoint is evaluated with `ddl eval --checkpoint DIR`"
                    .into(),
            ));
        }
        if format != "ddl-golden-1" {
            return Err(content(format!("unsupported format '{format}' (this build reads 'ddl-golden-1')")));
        }
        let cfg_json: serde_json::Value = serde_json::from_str(&get("config")?)
            .map_err(|e| damaged(format!("metadata 'config' is not JSON: {e}")))?;
        let config = ModelConfig::from_golden_json(&cfg_json).map_err(|e| content(e.to_string()))?;
        let batch = cfg_json["batch"].as_u64().ok_or_else(|| content("config field 'batch' missing".into()))? as usize;
        let seq_len =
            cfg_json["seq_len"].as_u64().ok_or_else(|| content("config field 'seq_len' missing".into()))? as usize;
        let opt: GoldenOpt =
            serde_json::from_str(&get("optimizer")?).map_err(|e| damaged(format!("metadata 'optimizer': {e}")))?;
        let steps: usize = get("steps")?.trim().parse().map_err(|e| damaged(format!("metadata 'steps': {e}")))?;
        let params: Vec<String> =
            serde_json::from_str(&get("params")?).map_err(|e| damaged(format!("metadata 'params': {e}")))?;
        let mut tensors = HashMap::new();
        for (name, view) in st.tensors() {
            let shape = view.shape().to_vec();
            let data = view.data();
            let d = match view.dtype() {
                safetensors::Dtype::F32 => {
                    Data::F32(data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
                }
                safetensors::Dtype::I32 => {
                    Data::I32(data.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
                }
                other => {
                    return Err(content(format!("tensor '{name}' has dtype {other:?}; expected F32 or I32")));
                }
            };
            tensors.insert(name, (shape, d));
        }
        let interventions = md.get("interventions").cloned().unwrap_or_default();
        let g = Golden {
            path: p.clone(),
            config,
            opt,
            steps,
            params,
            batch,
            seq_len,
            tensors,
            interventions,
            read: Default::default(),
        };
        g.integrity().map_err(damaged)?;
        Ok(g)
    }

    /// A tensor the check needs that is missing, or of another shape or dtype than the file's
    /// own config gives: the file is damaged (or of another format), not the engine wrong.
    fn err(&self, msg: String) -> GoldenError {
        GoldenError::Damaged { path: self.path.clone(), msg }
    }

    /// An f32 tensor with its expected shape checked.
    pub fn f32(&self, name: &str, shape: Option<&[usize]>) -> Result<&[f32], GoldenError> {
        self.mark(name);
        match self.tensors.get(name) {
            Some((s, Data::F32(v))) => {
                if let Some(want) = shape
                    && s != want
                {
                    return Err(self.err(format!("tensor '{name}' has shape {s:?}, expected {want:?}")));
                }
                Ok(v)
            }
            Some(_) => Err(self.err(format!("tensor '{name}' is not F32"))),
            None => Err(self.err(format!("tensor '{name}' is missing"))),
        }
    }

    pub fn i32(&self, name: &str, shape: &[usize]) -> Result<&[i32], GoldenError> {
        self.mark(name);
        match self.tensors.get(name) {
            Some((s, Data::I32(v))) if s == shape => Ok(v),
            Some((s, d)) => {
                let dtype = if matches!(d, Data::I32(_)) { "I32" } else { "F32" };
                Err(self.err(format!("tensor '{name}' must be I32 {shape:?}, found {dtype} {s:?}")))
            }
            None => Err(self.err(format!("tensor '{name}' is missing"))),
        }
    }

    fn mark(&self, name: &str) {
        self.read.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string());
    }

    /// The file's tensors no check has read so far, sorted: after a check, those it could not
    /// compare (a newer reference's quantities this build does not know).
    pub fn unread(&self) -> Vec<String> {
        let read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<String> = self.tensors.keys().filter(|k| !read.contains(*k)).cloned().collect();
        v.sort();
        v
    }
}

/// One compared quantity.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: String,
    pub rel_l2: f64,
    pub max_abs: f64,
    pub tol: f64,
    pub pass: bool,
    pub note: String,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<44} {:>10.3e} {:>10.3e} {:>8.0e}  {}{}",
            self.name,
            self.rel_l2,
            self.max_abs,
            self.tol,
            if self.pass { "pass" } else { "FAIL" },
            if self.note.is_empty() { String::new() } else { format!("  {}", self.note) }
        )
    }
}

fn row(name: &str, got: &[f32], want: &[f32], tol: f64) -> Row {
    let w: Vec<f64> = want.iter().map(|&x| x as f64).collect();
    let r = compare(name, got, &w);
    Row { name: name.to_string(), rel_l2: r.rel_l2, max_abs: r.max_abs, tol, pass: r.passes(tol), note: String::new() }
}

/// Structural checks (golden README 5.1): names and shapes from the config, and the init scale.
pub fn structural(g: &Golden) -> Result<Vec<Row>, GoldenError> {
    let layout = Layout::new(&g.config);
    let mut rows = Vec::new();
    let names: Vec<&str> = layout.specs.iter().map(|s| s.name.as_str()).collect();
    let same_names = names == g.params.iter().map(|s| s.as_str()).collect::<Vec<_>>();
    let mut shape_msg = String::new();
    for s in &layout.specs {
        let name = format!("param.{}", s.name);
        g.mark(&name);
        match g.tensors.get(&name) {
            Some((shape, _)) if *shape == s.shape => {}
            Some((shape, _)) => {
                shape_msg = format!("param.{} has shape {shape:?}, the config builds {:?}", s.name, s.shape)
            }
            None => shape_msg = format!("param.{} is missing", s.name),
        }
    }
    let note = if !same_names {
        format!(
            "parameter names differ: file {:?} … vs built {:?} …",
            &g.params[..g.params.len().min(3)],
            &names[..names.len().min(3)]
        )
    } else {
        shape_msg.clone()
    };
    let ok = same_names && shape_msg.is_empty();
    rows.push(Row { name: "structure: names and shapes".into(), rel_l2: 0.0, max_abs: 0.0, tol: 0.0, pass: ok, note });
    if !ok {
        return Ok(rows);
    }
    // Init scale per group of N(0, σ²) tensors (block index removed from the name).
    let own = layout.init(0x5eed);
    let mut groups: HashMap<String, (f64, f64, usize)> = HashMap::new();
    for (s, &off) in layout.specs.iter().zip(&layout.offsets) {
        if !matches!(s.init, crate::model::Init::Normal(_)) {
            continue;
        }
        let key = s.name.split('.').filter(|p| p.parse::<usize>().is_err()).collect::<Vec<_>>().join(".");
        let stored = g.f32(&format!("param.{}", s.name), None)?;
        let e = groups.entry(key).or_default();
        e.0 += own[off..off + s.len()].iter().map(|x| (*x as f64).powi(2)).sum::<f64>();
        e.1 += stored.iter().map(|x| (*x as f64).powi(2)).sum::<f64>();
        e.2 += s.len();
    }
    let mut keys: Vec<_> = groups.keys().cloned().collect();
    keys.sort();
    for k in keys {
        let (a, b, n) = groups[&k];
        let r = (a / n as f64).sqrt() / ((b / n as f64).sqrt() / 2f64.sqrt());
        let worst = r.max(1.0 / r);
        rows.push(Row {
            name: format!("init scale: {k}"),
            rel_l2: worst,
            max_abs: r,
            tol: 3.0,
            pass: worst <= 3.0,
            note: String::new(),
        });
    }
    Ok(rows)
}

/// Runs forward, backward and the recorded AdamW steps and compares everything.
pub fn check(gpu: &Arc<Gpu>, g: &Golden) -> Result<Vec<Row>, GoldenError> {
    check_with(gpu, g, false)
}

/// Relative-L2 tolerances with the expanded states stored in half precision (`--f16-state`):
/// the states are rounded to 11 significant bits (relative error ≤ 2⁻¹¹ ≈ 4.9e-4 per element)
/// at every write, and that rounding reaches every output. Forward values, gradients, parameters
/// and losses: [`F16_STATE_TOL`]. The first AdamW update is ≈ lr·sign(g) elementwise, so the
/// gradient elements smaller than that rounding flip their update's sign: those rows get
/// [`F16_STATE_UPDATE_TOL`], and the gradient norms of the later steps (which see those updates)
/// [`F16_STATE_LATER_NORM_TOL`].
pub const F16_STATE_TOL: f64 = 2e-2;
pub const F16_STATE_UPDATE_TOL: f64 = 0.3;
pub const F16_STATE_LATER_NORM_TOL: f64 = 0.1;

/// Forward values, gradients, parameters and losses at `--precision f16`: the operands of every
/// linear layer are rounded to 11 significant bits too (activations and weights forward, the
/// gradients backward), three roundings per product on top of the states', and small sums that
/// cancel (a bias gradient: one scalar over every token) keep the relative error of their terms.
/// The worst rows of the golden files measured 1.5e-2 to 2.5e-2 (`grad.blocks.0.attn_delta.b_beta` of ddl;
/// `cargo test --release --test golden golden_f16_precision -- --nocapture` prints each file's
/// worst). Updates and later gradient norms as for the f16 state.
pub const F16_PRECISION_TOL: f64 = 5e-2;

/// The tolerance of row `name` in an f16-state check (see [`F16_STATE_TOL`]).
pub fn f16_state_tol(name: &str) -> f64 {
    f16_tol(name, F16_STATE_TOL)
}

/// [`f16_state_tol`] with `base` for the rows that are neither updates nor later norms.
fn f16_tol(name: &str, base: f64) -> f64 {
    if name.starts_with("step1.update.") {
        F16_STATE_UPDATE_TOL
    } else if name.starts_with("train.grad_norms[") && name != "train.grad_norms[0]" {
        F16_STATE_LATER_NORM_TOL
    } else {
        base
    }
}

/// [`check`], with the model's expanded states stored in half precision when `state_f16`
/// ([`Model::set_state_f16`]), at the tolerances of [`f16_state_tol`].
pub fn check_with(gpu: &Arc<Gpu>, g: &Golden, state_f16: bool) -> Result<Vec<Row>, GoldenError> {
    check_precision(gpu, g, state_f16, Precision::F32)
}

/// [`check_with`] at `precision` (`ddl golden --precision f16`): f16 operands in the linear
/// layers ([`Model::set_precision`]) and f16 states where the variant has them, at the
/// tolerances of [`f16_state_tol`] (both round to 11 significant bits; the gradients carry no
/// loss scale here).
pub fn check_precision(
    gpu: &Arc<Gpu>,
    g: &Golden,
    state_f16: bool,
    precision: Precision,
) -> Result<Vec<Row>, GoldenError> {
    check_stored(gpu, g, crate::model::Storage { state_f16, precision, ..Default::default() })
}

/// [`check_precision`] with the training program storing its activations as `st` says: its
/// f16 states and precision as there, and its LM head in slices of `st.head_chunk` rows
/// (`ddl golden --head-chunk R`; [`Model::set_head_chunk`]) at the same tolerances, with a row
/// that checks the slices ran, the logits read from a forward program (a sliced head holds one
/// slice) and the loss of a forward-only run over the training program's activations (the
/// evaluation's sliced head) checked too. (`st.recompute` changes nothing here: recomputing
/// gives the same bits, which tests/train.rs checks.)
pub fn check_stored(gpu: &Arc<Gpu>, g: &Golden, st: crate::model::Storage) -> Result<Vec<Row>, GoldenError> {
    let (state_f16, precision) = (st.state_f16, st.precision);
    let half = precision == Precision::F16;
    if state_f16 && let Err(why) = g.config.f16_state_support() {
        return Err(GoldenError::Content {
            path: g.path.clone(),
            msg: format!("--f16-state: {why}; run --f16-state on the files of those variants (d_v = 4)"),
        });
    }
    let state_f16 = state_f16 || (half && g.config.f16_state_support().is_ok());
    let loose = state_f16 || half;
    let base = if half { F16_PRECISION_TOL } else { F16_STATE_TOL };
    let row = |name: &str, got: &[f32], want: &[f32], tol: f64| {
        row(name, got, want, if loose { f16_tol(name, base) } else { tol })
    };
    let mut rows = structural(g)?;
    if !rows[0].pass {
        return Ok(rows);
    }
    let gpu_err = |source| GoldenError::Gpu { path: g.path.clone(), source };
    let cfg = g.config.clone();
    let layout = Layout::new(&cfg);
    let mut flat = vec![0.0f32; layout.total];
    for (s, &off) in layout.specs.iter().zip(&layout.offsets) {
        let v = g.f32(&format!("param.{}", s.name), Some(&s.shape))?;
        flat[off..off + s.len()].copy_from_slice(v);
    }
    let (b, t) = (g.batch, g.seq_len);
    let tokens = g.i32("input.tokens", &[b, t])?;
    let targets = g.i32("input.targets", &[b, t])?;
    let mut model = Model::with_params(gpu.clone(), cfg.clone(), &flat).map_err(gpu_err)?;
    // (The precision first, as ddl train sets them: on an adapter without f16 its refusal names
    // --precision, not --f16-state.)
    model.set_precision(precision).map_err(gpu_err)?;
    model.set_state_f16(state_f16).map_err(gpu_err)?;
    model.set_head_chunk(st.head_chunk);
    // The file's decayed list must be what our ≥2-D rule gives.
    let ours: Vec<&str> = layout.specs.iter().filter(|s| s.decay).map(|s| s.name.as_str()).collect();
    let theirs: Vec<&str> = g.opt.decayed.iter().map(|s| s.as_str()).collect();
    let mut a = ours.clone();
    a.sort();
    let mut bb = theirs.clone();
    bb.sort();
    rows.push(Row {
        name: "optimizer: decayed tensors".into(),
        rel_l2: 0.0,
        max_abs: 0.0,
        tol: 0.0,
        pass: a == bb,
        note: if a == bb { String::new() } else { format!("file decays {theirs:?}, we decay {ours:?}") },
    });
    let mut opt = AdamWConfig {
        lr: g.opt.lr as f32,
        beta1: g.opt.beta1 as f32,
        beta2: g.opt.beta2 as f32,
        eps: g.opt.eps as f32,
        weight_decay: g.opt.weight_decay as f32,
        grad_clip: g.opt.grad_clip as f32,
        clip_eps: g.opt.clip_norm_eps as f32,
        step: 1,
        grad_scale: 1.0,
    };
    let prog = model.program(b, t, &opt).map_err(gpu_err)?;
    prog.set_batch(&model, tokens, targets).map_err(gpu_err)?;
    let rd = |t: &crate::gpu::Tensor| t.read_f32(gpu).map_err(gpu_err);
    // The logits after the forward alone (the backward writes their gradient over them).
    let forward_stats = prog.run(&model, Parts::FORWARD).map_err(gpu_err)?;
    let sliced = prog.acts().head_chunked();
    let logits = if sliced {
        // (The training program holds one slice's logits: a forward program has them all.)
        let fp = model.forward_program(b, t).map_err(gpu_err)?;
        fp.set_batch(&model, tokens, targets).map_err(gpu_err)?;
        fp.run(&model, Parts::FORWARD).map_err(gpu_err)?;
        rd(fp.logits())?
    } else {
        rd(prog.logits())?
    };
    prog.run(&model, Parts::GRADIENTS).map_err(gpu_err)?;

    let (v, d, m) = (cfg.vocab_size, cfg.d_model, cfg.m());
    if st.head_chunk > 0 {
        let (n, rows_per) = (b * t, prog.acts().head_rows);
        let slices = n.div_ceil(rows_per);
        let want = st.head_chunk.min(n);
        rows.push(Row {
            name: format!("head: {slices} slices of {rows_per} rows"),
            rel_l2: 0.0,
            max_abs: 0.0,
            tol: 0.0,
            pass: rows_per == want && sliced == (want < n),
            note: if rows_per == want { String::new() } else { format!("asked for slices of {want} rows") },
        });
        if sliced {
            let want_loss = g.f32("out.loss", Some(&[1]))?;
            rows.push(row("out.loss (forward only, sliced)", &forward_stats[..1], want_loss, 1e-4));
        }
    }
    rows.push(row("out.logits", &logits, g.f32("out.logits", Some(&[b, t, v]))?, 1e-4));
    let stats = rd(prog.stats())?;
    rows.push(row("out.loss", &stats[..1], g.f32("out.loss", Some(&[1]))?, 1e-4));
    rows.push(row("out.grad_norm", &[stats[2].max(0.0).sqrt()], g.f32("out.grad_norm", Some(&[1]))?, 1e-4));
    let grads = rd(&model.grads)?;
    for (s, &off) in layout.specs.iter().zip(&layout.offsets) {
        let name = format!("grad.{}", s.name);
        rows.push(row(&name, &grads[off..off + s.len()], g.f32(&name, Some(&s.shape))?, 1e-3));
    }
    // Traces.
    for l in 0..cfg.n_layers {
        for (si, sn) in ["attn", "mlp"].iter().enumerate() {
            let sub = &prog.acts().subs[l][si];
            let pre = format!("trace.blocks.{l}.{sn}");
            rows.push(row(
                &format!("{pre}.a"),
                &rd(prog.acts().a_tensor(l, si))?,
                g.f32(&format!("{pre}.a"), Some(&[b, t, d]))?,
                1e-4,
            ));
            // A residual sublayer adds h into X_out (`Sub::residual`): h = X_out − X_in, which
            // differs from the product by X_out's rounding only (an ulp of |X| against 1e-4 of |h|).
            let h = if sub.residual {
                let (x_in, x_out) = (rd(&prog.acts().xs[2 * l + si])?, rd(&prog.acts().xs[2 * l + si + 1])?);
                x_out.iter().zip(&x_in).map(|(o, i)| o - i).collect()
            } else {
                rd(&sub.h)?
            };
            rows.push(row(&format!("{pre}.h"), &h, g.f32(&format!("{pre}.h"), Some(&[b, t, d]))?, 1e-4));
            if let Some(w) = &sub.write {
                rows.push(row(
                    &format!("{pre}.beta"),
                    &rd(&w.beta)?,
                    g.f32(&format!("{pre}.beta"), Some(&[b, t]))?,
                    1e-4,
                ));
                // Training programs do not store k (the backward recomputes it): k = k̃·r, the
                // forward's own f32 product, from the saved k̃ and r.
                let kraw = rd(sub.kraw())?;
                let rn = rd(&w.rnorm)?;
                let k: Vec<f32> = kraw.iter().enumerate().map(|(e, &v)| v * rn[e / d]).collect();
                rows.push(row(&format!("{pre}.k"), &k, g.f32(&format!("{pre}.k"), Some(&[b, t, d]))?, 1e-4));
                rows.push(row(&format!("{pre}.v"), &rd(&w.v)?, g.f32(&format!("{pre}.v"), Some(&[b, t, m]))?, 1e-4));
            }
            if let Some((_, _, kraw)) = &sub.dir {
                rows.push(row(
                    &format!("{pre}.k_raw"),
                    &rd(kraw)?,
                    g.f32(&format!("{pre}.k_raw"), Some(&[b, t, d]))?,
                    1e-4,
                ));
            }
        }
    }
    rows.push(row("trace.final.z", &rd(prog.acts().z_tensor())?, g.f32("trace.final.z", Some(&[b, t, d]))?, 1e-4));

    // Optimizer steps: step 1 from the state above, then forward+backward+step.
    let want_losses = g.f32("train.losses", Some(&[g.steps]))?.to_vec();
    let want_norms = g.f32("train.grad_norms", Some(&[g.steps]))?.to_vec();
    let mut losses = vec![stats[0]];
    let mut norms = vec![stats[2].max(0.0).sqrt()];
    for step in 1..=g.steps {
        opt.step = step as u32;
        model.set_optimizer_step(&prog, &opt).map_err(gpu_err)?;
        prog.run(&model, Parts::OPTIMIZER).map_err(gpu_err)?;
        if step == 1 {
            let p1 = rd(&model.params)?;
            for (s, &off) in layout.specs.iter().zip(&layout.offsets) {
                let name = format!("step1.param.{}", s.name);
                let want = g.f32(&name, Some(&s.shape))?;
                let got_u: Vec<f32> = p1[off..off + s.len()].iter().zip(&flat[off..]).map(|(a, b)| a - b).collect();
                let p0 = g.f32(&format!("param.{}", s.name), None)?;
                let want_u: Vec<f32> = want.iter().zip(p0).map(|(a, b)| a - b).collect();
                let uname = format!("step1.update.{}", s.name);
                let mut prow = row(&name, &p1[off..off + s.len()], want, 1e-3);
                if loose {
                    // The parameter after the step is the exact initial one plus the update, so its
                    // error is the update's: it may reach the update's tolerance in proportion to
                    // the update's size (a tensor initialised near zero is mostly its update).
                    let l2 = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
                    let share = l2(&want_u) / l2(want).max(f64::MIN_POSITIVE);
                    prow.tol = prow.tol.max(f16_tol(&uname, base) * share);
                    prow.pass = prow.rel_l2 <= prow.tol;
                }
                rows.push(prow);
                rows.push(row(&uname, &got_u, &want_u, 1e-3));
            }
        }
        if step < g.steps {
            prog.run(&model, Parts::GRADIENTS).map_err(gpu_err)?;
            let s = rd(prog.stats())?;
            losses.push(s[0]);
            norms.push(s[2].max(0.0).sqrt());
        }
    }
    for (i, (gl, wl)) in losses.iter().zip(&want_losses).enumerate() {
        rows.push(row(&format!("train.losses[{i}]"), &[*gl], &[*wl], 1e-4));
    }
    for (i, (gn, wn)) in norms.iter().zip(&want_norms).enumerate() {
        rows.push(row(&format!("train.grad_norms[{i}]"), &[*gn], &[*wn], 1e-3));
    }
    Ok(rows)
}

/// `ddl golden`'s report of one file: the config line, a row per tensor (only the failures with
/// `quiet`) and the count.
pub fn report(path: &Path, g: &Golden, rows: &[Row], quiet: bool) -> String {
    let c = &g.config;
    let mut s = format!(
        "== {} (variant {}, V {}, d {}, L {}, H {}, h {}, d_v {}, B {}, T {})\n",
        path.display(),
        c.variant,
        c.vocab_size,
        c.d_model,
        c.n_layers,
        c.n_heads,
        c.head_dim,
        c.d_v,
        g.batch,
        g.seq_len
    );
    let shown: Vec<&Row> = rows.iter().filter(|r| !quiet || !r.pass).collect();
    if !shown.is_empty() {
        // `--quiet` with every row passing: no header over an empty table.
        s += &format!("{:<44} {:>10} {:>10} {:>8}  result\n", "tensor", "rel_l2", "max_abs", "tol");
    }
    for r in shown {
        s += &format!("{r}\n");
    }
    let fails = rows.iter().filter(|r| !r.pass).count();
    let unread = g.unread();
    if !unread.is_empty() {
        // A newer reference's quantities: said, not silently passed over.
        const SHOWN: usize = 8;
        let more = if unread.len() > SHOWN { format!(" and {} more", unread.len() - SHOWN) } else { String::new() };
        s += &format!(
            "note: {} of the file's {} tensors not compared (this build does not know them): {}{more}\n",
            unread.len(),
            g.tensors.len(),
            unread[..unread.len().min(SHOWN)].join(", ")
        );
    }
    s + &format!("{}: {} compared, {} failed\n\n", path.display(), rows.len(), fails)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every golden file of the repository's sets, at any depth.
    fn all_golden_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                all_golden_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "safetensors") {
                out.push(p);
            }
        }
    }

    /// `bytes` of a safetensors file with each tensor passed through `f` (name, dtype, shape, data).
    fn rewritten(
        bytes: &[u8],
        mut f: impl FnMut(&str, &mut safetensors::Dtype, &mut Vec<usize>, &mut Vec<u8>),
    ) -> Vec<u8> {
        let st = safetensors::SafeTensors::deserialize(bytes).unwrap();
        let (_, meta) = safetensors::SafeTensors::read_metadata(bytes).unwrap();
        let mut owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> =
            st.tensors().into_iter().map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec())).collect();
        for (n, d, s, b) in &mut owned {
            f(n, d, s, b);
        }
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = owned
            .iter()
            .map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        safetensors::serialize(views, meta.metadata().clone()).unwrap()
    }

    /// A damaged golden file — bytes overwritten or zeroed, a shape or dtype changed, a value
    /// edited, a token out of the vocabulary, the file cut short — is said to be damaged, naming
    /// the file, the tensor and what to do, before any comparison: it was a table of FAIL rows
    /// and "golden parity failed", as if the engine were wrong. Every file of the repository's
    /// sets passes the same checks.
    #[test]
    fn a_damaged_golden_file_is_said_to_be_damaged_not_a_parity_failure() {
        let mut files = Vec::new();
        all_golden_files(&crate::testing::data_path("tests/golden"), &mut files);
        assert!(files.len() >= 40, "{files:?}");
        for f in &files {
            if let Err(e) = Golden::load(f) {
                panic!("a golden file of the repository is refused: {e}");
            }
        }
        let path = crate::testing::data_path("tests/golden/ddl.safetensors");
        let good = std::fs::read(&path).unwrap();
        let damaged = |bytes: &[u8], needles: &[&str]| {
            let e = Golden::parse(Path::new("dmg.safetensors"), bytes).err().expect("a damaged file must be refused");
            let t = e.to_string();
            assert!(t.starts_with("dmg.safetensors: "), "{t}");
            assert!(t.contains("copy it again") && t.contains("tests/golden"), "{t}");
            assert!(t.contains("not a parity failure"), "{t}");
            for n in needles {
                assert!(t.contains(n), "expected {n:?} in: {t}");
            }
        };
        let f32s = |b: &mut Vec<u8>, f: &dyn Fn(usize, f32) -> f32| {
            for (i, c) in b.chunks_exact_mut(4).enumerate() {
                let x = f(i, f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                c.copy_from_slice(&x.to_le_bytes());
            }
        };
        // Bytes overwritten (0xff: NaN) in a gradient.
        let b = rewritten(&good, |n, _, _, b| {
            if n == "grad.blocks.0.attn.wq" {
                b[40..80].fill(0xff);
            }
        });
        damaged(&b, &["the file is damaged", "'grad.blocks.0.attn.wq'", "not finite"]);
        // A parameter zeroed (a copy with a hole): its step-1 value is no AdamW step from it.
        let b = rewritten(&good, |n, _, _, b| {
            if n == "param.blocks.1.mlp.w_up" {
                b.fill(0);
            }
        });
        damaged(&b, &["'step1.param.blocks.1.mlp.w_up' is not one AdamW step"]);
        // A gradient scaled: its norm is no longer out.grad_norm.
        let b = rewritten(&good, |n, _, _, b| {
            if n == "grad.tok_emb" {
                f32s(b, &|_, x| 2.0 * x);
            }
        });
        damaged(&b, &["'out.grad_norm'"]);
        // A logit changed: the loss is not their cross-entropy.
        let b = rewritten(&good, |n, _, _, b| {
            if n == "out.logits" {
                f32s(b, &|i, x| if i % 7 == 0 { x + 3.0 } else { x });
            }
        });
        damaged(&b, &["cross-entropy of its 'out.logits'", "'out.loss'"]);
        // The first recorded loss changed.
        let b = rewritten(&good, |n, _, _, b| {
            if n == "train.losses" {
                f32s(b, &|i, x| if i == 0 { x * 1.01 } else { x });
            }
        });
        damaged(&b, &["'train.losses[0]'", "'out.loss'"]);
        // A token out of the vocabulary.
        let b = rewritten(&good, |n, _, _, b| {
            if n == "input.tokens" {
                b[..4].copy_from_slice(&1000i32.to_le_bytes());
            }
        });
        damaged(&b, &["'input.tokens' holds 1000", "vocabulary of 67"]);
        // A parameter's shape transposed in the header.
        let b = rewritten(&good, |n, _, s, _| {
            if n == "param.tok_emb" {
                s.reverse();
            }
        });
        damaged(&b, &["'grad.tok_emb' has shape [67, 32], but 'param.tok_emb' has [32, 67]"]);
        // The tokens stored as F32.
        let b = rewritten(&good, |n, d, _, _| {
            if n == "input.tokens" {
                *d = safetensors::Dtype::F32;
            }
        });
        let g = Golden::parse(Path::new("dmg.safetensors"), &b).unwrap();
        let e = g.i32("input.tokens", &[g.batch, g.seq_len]).unwrap_err().to_string();
        assert!(e.contains("must be I32 [2, 9], found F32 [2, 9]") && e.contains("copy it again"), "{e}");
        // Cut short.
        damaged(&good[..good.len() - 1000], &["not a valid safetensors file"]);
    }

    /// A trace tensor overwritten with other plausible values — finite, of the right shape and
    /// range (another token's values, another sublayer's gates) — is said to be damaged through
    /// the relations the traces obey with each other and with the parameters and logits: it
    /// loaded, and its rows failed as if the engine computed them wrong.
    #[test]
    fn a_trace_tensor_overwritten_with_plausible_values_is_said_to_be_damaged() {
        let load = |variant: &str| {
            std::fs::read(crate::testing::data_path(&format!("tests/golden/{variant}.safetensors"))).unwrap()
        };
        // The file `variant` with tensor `name` turned into `f(tensor's f32s, the other tensors)`.
        let edited = |variant: &str, name: &str, f: &dyn Fn(Vec<f32>) -> Vec<f32>| {
            rewritten(&load(variant), |n, _, _, b| {
                if n == name {
                    let v: Vec<f32> = b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                    let v = f(v);
                    *b = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                }
            })
        };
        // Another token's row in each place: the same values, shifted by a row of `width`.
        let shifted = |width: usize| {
            move |v: Vec<f32>| {
                let mut v = v;
                v.rotate_left(width);
                v
            }
        };
        let damaged = |bytes: &[u8], needles: &[&str]| {
            let e = Golden::parse(Path::new("dmg.safetensors"), bytes).err().expect("a damaged file must be refused");
            let t = e.to_string();
            assert!(t.contains("the file is damaged") && t.contains("not a parity failure"), "{t}");
            assert!(t.contains("copy it again"), "{t}");
            for n in needles {
                assert!(t.contains(n), "expected {n:?} in: {t}");
            }
        };
        let d = 32;
        // The gates: another token's β (all in (0, 2)).
        damaged(
            &edited("ddl", "trace.blocks.1.attn.beta", &shifted(1)),
            &["'trace.blocks.1.attn.beta' is not 2σ(w_β·c + b_β) of c = RMSNorm('trace.blocks.1.attn.a')"],
        );
        // A file run with interventions: the gates it left alone, and the one it set (β = 0).
        let file = "override/ddl_block1mlp_beta0";
        damaged(&edited(file, "trace.blocks.0.attn.beta", &shifted(1)), &["'trace.blocks.0.attn.beta' is not 2σ"]);
        damaged(
            &edited(file, "trace.blocks.1.mlp.beta", &|v| v.iter().map(|_| 0.5).collect()),
            &[
                "'trace.blocks.1.mlp.beta' is not 2σ(w_β·c + b_β) of c = RMSNorm('trace.blocks.1.mlp.a') under the file's",
            ],
        );
        // The direction: another token's unit k.
        damaged(&edited("ddl", "trace.blocks.0.mlp.k", &shifted(d)), &["'trace.blocks.0.mlp.k' is not"]);
        // The raw direction k̃ = h of a k-Map file (another token's row; one row scaled by 3,
        // which keeps its k: the attention computed from a says so), and the compressed input a.
        let attn_h = "'trace.blocks.0.attn.h' is not the attention of RMSNorm('trace.blocks.0.attn.a')";
        damaged(&edited("ddl", "trace.blocks.0.attn.h", &shifted(d)), &[attn_h]);
        damaged(
            &edited("ddl", "trace.blocks.0.attn.h", &|v| {
                v.iter().enumerate().map(|(i, x)| if (5 * d..6 * d).contains(&i) { 3.0 * x } else { *x }).collect()
            }),
            &[attn_h],
        );
        damaged(&edited("ddl_cc", "trace.blocks.1.mlp.a", &shifted(d)), &["RMSNorm('trace.blocks.1.mlp.a')"]);
        // The values, moved a little (still in (0, 4)).
        damaged(
            &edited("ddl", "trace.blocks.0.attn.v", &|v| v.iter().map(|x| x * 0.97 + 0.05).collect()),
            &["'trace.blocks.0.attn.v' is not act(W_v 'trace.blocks.0.attn.a' + b_v) with act = sigmoid4"],
        );
        // v-Map: k_raw (its k and the MLP on c), h (the attention) and v (from h).
        damaged(&edited("ddl_vmap", "trace.blocks.0.mlp.k_raw", &shifted(d)), &["'trace.blocks.0.mlp.k"]);
        damaged(
            &edited("ddl_vmap", "trace.blocks.1.attn.h", &shifted(d)),
            &["'trace.blocks.1.attn.h' is not the attention"],
        );
        damaged(
            &edited("ddl_vmap", "trace.blocks.1.attn.v", &|v| v.iter().map(|x| x * 0.97 + 0.01).collect()),
            &["'trace.blocks.1.attn.v' is not act(W_v 'trace.blocks.1.attn.h' + b_v)"],
        );
        // The baseline's residual: the attention's h, the next a, and the final z.
        damaged(
            &edited("baseline", "trace.blocks.1.attn.h", &shifted(d)),
            &["'trace.blocks.1.attn.h' is not the attention"],
        );
        damaged(
            &edited("baseline", "trace.blocks.0.mlp.a", &shifted(d)),
            &["'trace.blocks.0.mlp.a' is not 'trace.blocks.0.attn.a' + 'trace.blocks.0.attn.h'"],
        );
        damaged(
            &edited("baseline", "trace.blocks.1.mlp.h", &|v| v.iter().map(|x| x * 1.05).collect()),
            &["'trace.blocks.1.mlp.h' is not the MLP"],
        );
        damaged(
            &edited("ddl_v1", "trace.blocks.1.attn.a", &shifted(d)),
            &["'trace.blocks.1.attn.a' is not 'trace.blocks.0.mlp.a' after its delta write"],
        );
        // The final state: its logits through the final norm and the head.
        damaged(
            &edited("ddl_ec", "trace.final.z", &shifted(d)),
            &["'trace.final.z' does not give 'out.logits' through the final RMSNorm"],
        );
    }

    /// A golden file that does not exist — a variant's name mistyped — names the closest file
    /// of its folder and the files there (it was "cannot read: No such file or directory (os
    /// error 2)", after the adapter opened).
    #[test]
    fn a_missing_golden_file_names_the_closest_one_and_the_files_there() {
        let dir = crate::testing::scratch_dir("golden-missing");
        for v in ["ddl", "ddl_cc", "baseline"] {
            std::fs::write(dir.join(format!("{v}.safetensors")), b"x").unwrap();
        }
        let e = missing_file(&dir.join("ddll.safetensors"));
        assert!(e.contains("ddll.safetensors' does not exist"), "{e}");
        assert!(e.contains(&format!("did you mean '{}'", dir.join("ddl.safetensors").display())), "{e}");
        assert!(e.contains("baseline, ddl, ddl_cc"), "{e}");
        let e = missing_file(&dir.join("gpt2.safetensors"));
        assert!(!e.contains("did you mean") && e.contains("baseline, ddl, ddl_cc"), "{e}");
        let e = missing_file(&dir.join("nowhere/ddl.safetensors"));
        assert!(e.contains("does not exist, nor does its folder"), "{e}");
        std::fs::create_dir_all(dir.join("empty")).unwrap();
        let e = missing_file(&dir.join("empty/ddl.safetensors"));
        assert!(e.contains("does not exist") && e.contains("holds no .safetensors files"), "{e}");
    }
}
