//! Checkpoints: `model.safetensors` (parameters under the spec's names, with the config, the
//! tokenizer and the step as metadata — readable by Python's `safetensors`) and
//! `optim.safetensors` (AdamW moments and the run state). Every file is written to a temporary
//! name, synced, then renamed, so a crash never leaves a half-written checkpoint.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::model::{Layout, ModelConfig};
use crate::tokenizer::Tokenizer;

pub const MODEL_FILE: &str = "model.safetensors";
pub const OPTIM_FILE: &str = "optim.safetensors";
/// The previous moments, kept only while a save renames its files.
pub const OPTIM_PREV_FILE: &str = "optim.prev.safetensors";
pub const FORMAT: &str = "ddl-checkpoint-1";
/// Newest checkpoint format version this build reads.
pub const VERSION: u32 = 1;

/// A checkpoint that cannot be read, naming the file and the problem.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint directory '{0}' does not exist")]
    MissingDir(PathBuf),
    #[error("checkpoint file '{0}' is missing")]
    MissingFile(PathBuf),
    #[error("cannot read or write '{path}': {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("'{path}' is not a valid safetensors file (truncated or corrupt): {msg}")]
    Corrupt { path: PathBuf, msg: String },
    #[error("'{path}': {msg}")]
    Content { path: PathBuf, msg: String },
}

/// Where [`write_tmp`] puts the bytes of `path` before the rename: unique per process and per
/// write, so threads writing the same file at once do not share a temporary file.
fn tmp_path(path: &Path) -> PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = path.parent().unwrap_or(Path::new("."));
    dir.join(format!(".{}.tmp-{}-{n}", path.file_name().unwrap_or_default().to_string_lossy(), std::process::id()))
}

/// Fault injection for the disk-full test: with `DDL_FAULT_ENOSPC_SAVE=N`, checkpoint saves
/// after the first N of this process fail half-way through a file with "No space left on device".
fn injected_enospc() -> bool {
    static SAVES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let Some(n) = std::env::var("DDL_FAULT_ENOSPC_SAVE").ok().and_then(|v| v.parse::<usize>().ok()) else {
        return false;
    };
    SAVES.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= n
}

/// Runs `write` on the temporary file of `path`; on failure removes it.
fn with_tmp(path: &Path, write: impl FnOnce(&Path) -> std::io::Result<()>) -> std::io::Result<PathBuf> {
    let tmp = tmp_path(path);
    match write(&tmp) {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Writes `bytes` into the temporary file of `path` and syncs it; on failure removes it.
fn write_tmp(path: &Path, bytes: &[u8], fail: bool) -> std::io::Result<PathBuf> {
    with_tmp(path, |tmp| {
        let mut f = std::fs::File::create(tmp)?;
        if fail {
            f.write_all(&bytes[..bytes.len() / 2])?;
            return Err(std::io::Error::from_raw_os_error(28));
        }
        f.write_all(bytes)?;
        f.sync_all()
    })
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Writes `bytes` to `path` atomically (temp file in the same directory, fsync, rename): a
/// crash or a full disk leaves either the old file or the new one, never a torn one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = write_tmp(path, bytes, false)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    sync_dir(path.parent().unwrap_or(Path::new(".")));
    Ok(())
}

/// Removes temporary files left in a run directory by writers that were killed (not ours).
pub fn remove_stale_tmp(dir: &Path) {
    let ours = format!(".tmp-{}-", std::process::id());
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let ours_kind = [MODEL_FILE, OPTIM_FILE, "config.toml"].iter().any(|f| name.starts_with(&format!(".{f}.tmp-")));
        if ours_kind && !name.contains(&ours) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Serialises tensors straight into the temporary file of `path` (no copy of the whole file in
/// memory) and syncs it; on failure (or an injected full disk, which leaves half a file as a full
/// disk would) removes it.
fn write_tmp_tensors(
    path: &Path,
    named: Vec<(String, Vec<usize>, &[f32])>,
    meta: HashMap<String, String>,
    fail: bool,
) -> std::io::Result<PathBuf> {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = named
        .into_iter()
        .map(|(n, shape, data)| {
            (
                n,
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, bytemuck::cast_slice(data))
                    .unwrap(),
            )
        })
        .collect();
    with_tmp(path, |tmp| {
        safetensors::serialize_to_file(views, Some(meta), tmp).map_err(std::io::Error::other)?;
        let f = std::fs::OpenOptions::new().write(true).open(tmp)?;
        if fail {
            let len = f.metadata()?.len();
            f.set_len(len / 2)?;
            return Err(std::io::Error::from_raw_os_error(28));
        }
        f.sync_all()
    })
}

/// The run state saved beside the moments.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunState {
    /// Optimizer steps completed.
    pub step: usize,
    /// Wall-clock seconds trained so far.
    pub elapsed: f64,
}

/// Saves parameters (and, when given, the moments and run state) into `dir`.
pub fn save(
    dir: &Path,
    cfg: &ModelConfig,
    tok: &Tokenizer,
    layout: &Layout,
    params: &[f32],
    moments: Option<(&[f32], &[f32], &RunState, &str)>,
) -> Result<(), CheckpointError> {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
        move |source| CheckpointError::Io { path: path.to_path_buf(), source }
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let step = moments.map(|m| m.2.step).unwrap_or(0);
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), FORMAT.to_string());
    meta.insert("version".to_string(), VERSION.to_string());
    meta.insert("config".to_string(), serde_json::to_string(cfg).unwrap());
    meta.insert("tokenizer".to_string(), tok.to_json());
    meta.insert("step".to_string(), step.to_string());
    // Views into the flat buffers (no copy of the tensors before serialising them).
    fn named<'a>(layout: &Layout, flat: &'a [f32], prefix: &str) -> Vec<(String, Vec<usize>, &'a [f32])> {
        layout
            .specs
            .iter()
            .zip(&layout.offsets)
            .map(|(s, &o)| (format!("{prefix}{}", s.name), s.shape.clone(), &flat[o..o + s.len()]))
            .collect()
    }
    remove_stale_tmp(dir);
    let mp = dir.join(MODEL_FILE);
    let Some((m, v, state, run_cfg)) = moments else {
        let tmp = write_tmp_tensors(&mp, named(layout, params, ""), meta, false).map_err(io(&mp))?;
        return std::fs::rename(&tmp, &mp)
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })
            .map(|()| sync_dir(dir))
            .map_err(io(&mp));
    };
    let mut om = meta.clone();
    om.insert("state".to_string(), serde_json::to_string(state).unwrap());
    om.insert("run_config".to_string(), run_cfg.to_string());
    let mut t = named(layout, m, "adam.m.");
    t.extend(named(layout, v, "adam.v."));

    let op = dir.join(OPTIM_FILE);
    let prev = dir.join(OPTIM_PREV_FILE);
    // Both new files are complete on disk before anything is replaced (a full disk stops here
    // with the old checkpoint untouched). Then the renames keep a consistent (model, moments)
    // pair loadable at every instant: the old moments move to optim.prev first, so a crash
    // between the renames leaves the old model with its moments in optim.prev (`load` picks the
    // moments file whose step matches the model's).
    let fail = injected_enospc();
    let tmp_o = write_tmp_tensors(&op, t, om, false).map_err(io(&op))?;
    let tmp_m = match write_tmp_tensors(&mp, named(layout, params, ""), meta, fail) {
        Ok(t) => t,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp_o);
            return Err(io(&mp)(e));
        }
    };
    let renames = || -> std::io::Result<()> {
        if op.exists() {
            std::fs::rename(&op, &prev)?;
        }
        std::fs::rename(&tmp_o, &op)?;
        std::fs::rename(&tmp_m, &mp)?;
        sync_dir(dir);
        let _ = std::fs::remove_file(&prev);
        Ok(())
    };
    renames().map_err(|e| {
        let _ = std::fs::remove_file(&tmp_o);
        let _ = std::fs::remove_file(&tmp_m);
        io(dir)(e)
    })
}

/// A loaded checkpoint.
pub struct Loaded {
    pub config: ModelConfig,
    pub tokenizer: Tokenizer,
    pub step: usize,
    /// Flat parameters in the layout of `config`.
    pub params: Vec<f32>,
    /// Flat moments and the run state, when `optim.safetensors` was read.
    pub optim: Option<(Vec<f32>, Vec<f32>, RunState, String)>,
}

fn read_file(path: &Path) -> Result<Vec<u8>, CheckpointError> {
    if !path.exists() {
        return Err(CheckpointError::MissingFile(path.to_path_buf()));
    }
    std::fs::read(path).map_err(|source| CheckpointError::Io { path: path.to_path_buf(), source })
}

fn parse_tensors(
    path: &Path,
    bytes: &[u8],
    layout: &Layout,
    prefix: &str,
    cfg: &ModelConfig,
) -> Result<Vec<f32>, CheckpointError> {
    let content = |msg: String| CheckpointError::Content { path: path.to_path_buf(), msg };
    // Tensors that do not fit the config: say which config they were checked against.
    let cfg_note = format!(
        "; the metadata config is variant {}, d_model {}, n_layers {}, d_v {}: the tensors were written for a \
         different model (or the config was edited)",
        cfg.variant, cfg.d_model, cfg.n_layers, cfg.d_v
    );
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| CheckpointError::Corrupt { path: path.to_path_buf(), msg: e.to_string() })?;
    // Names, shapes and dtypes first: only a file that holds every tensor of the config (so at
    // least as many bytes as the parameters need) gets the parameter buffer allocated.
    let mut expected: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut views = Vec::with_capacity(layout.specs.len());
    for s in &layout.specs {
        let name = format!("{prefix}{}", s.name);
        expected.insert(name.clone());
        let t = st.tensor(&name).map_err(|_| content(format!("tensor '{name}' is missing{cfg_note}")))?;
        if t.shape() != s.shape.as_slice() {
            return Err(content(format!(
                "tensor '{name}' has shape {:?}, the config needs {:?}{cfg_note}",
                t.shape(),
                s.shape
            )));
        }
        if t.dtype() != safetensors::Dtype::F32 {
            return Err(content(format!("tensor '{name}' has dtype {:?}, expected F32", t.dtype())));
        }
        views.push((name, t));
    }
    let mut extra: Vec<String> =
        st.names().into_iter().filter(|n| !expected.contains(*n)).map(|s| s.to_string()).collect();
    if !extra.is_empty() {
        extra.sort();
        return Err(content(format!("unknown tensor(s) for this model: {}{cfg_note}", extra.join(", "))));
    }
    let mut out = vec![0.0f32; layout.total];
    for ((name, t), (s, &o)) in views.iter().zip(layout.specs.iter().zip(&layout.offsets)) {
        let dst = &mut out[o..o + s.len()];
        for (d, c) in dst.iter_mut().zip(t.data().chunks_exact(4)) {
            *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        if let Some(i) = dst.iter().position(|x| !x.is_finite()) {
            return Err(content(format!("tensor '{name}' holds a non-finite value ({}) at element {i}", dst[i])));
        }
    }
    Ok(out)
}

fn metadata(path: &Path, bytes: &[u8]) -> Result<HashMap<String, String>, CheckpointError> {
    let (_, m) = safetensors::SafeTensors::read_metadata(bytes)
        .map_err(|e| CheckpointError::Corrupt { path: path.to_path_buf(), msg: e.to_string() })?;
    let md = m.metadata().clone().unwrap_or_default();
    let content = |msg: String| CheckpointError::Content { path: path.to_path_buf(), msg };
    match md.get("format").map(|s| s.as_str()) {
        Some(FORMAT) => {}
        Some(f) => return Err(content(format!("format '{f}' is not a ddl checkpoint ('{FORMAT}')"))),
        None => return Err(content("no 'format' metadata: not a ddl checkpoint".into())),
    }
    let version: u32 = md.get("version").and_then(|v| v.parse().ok()).unwrap_or(1);
    if version > VERSION {
        return Err(content(format!(
            "checkpoint format version {version} is newer than this build reads ({VERSION}); upgrade ddl"
        )));
    }
    Ok(md)
}

/// Parses the bytes of a `model.safetensors` (`mp` names it in errors): config, tokenizer, step
/// and the flat parameters.
pub fn parse_model(mp: &Path, bytes: &[u8]) -> Result<(ModelConfig, Tokenizer, usize, Vec<f32>), CheckpointError> {
    let content = |p: &Path, msg: String| CheckpointError::Content { path: p.to_path_buf(), msg };
    let md = metadata(mp, bytes)?;
    let cfg_s = md.get("config").ok_or_else(|| content(mp, "metadata 'config' is missing".into()))?;
    let config: ModelConfig =
        serde_json::from_str(cfg_s).map_err(|e| content(mp, format!("metadata 'config' is invalid: {e}")))?;
    config.validate().map_err(|e| content(mp, e.to_string()))?;
    let tokenizer =
        Tokenizer::from_json(md.get("tokenizer").ok_or_else(|| content(mp, "metadata 'tokenizer' is missing".into()))?)
            .map_err(|e| content(mp, e.to_string()))?;
    if tokenizer.vocab_size() > config.vocab_size {
        return Err(content(
            mp,
            format!(
                "the tokenizer has {} tokens but the model's vocabulary is {}",
                tokenizer.vocab_size(),
                config.vocab_size
            ),
        ));
    }
    let step: usize = md.get("step").and_then(|s| s.parse().ok()).unwrap_or(0);
    let layout = Layout::new(&config);
    let params = parse_tensors(mp, bytes, &layout, "", &config)?;
    Ok((config, tokenizer, step, params))
}

/// Loads `dir/model.safetensors` (and `optim.safetensors` when `with_optim`).
pub fn load(dir: &Path, with_optim: bool) -> Result<Loaded, CheckpointError> {
    if !dir.is_dir() {
        return Err(CheckpointError::MissingDir(dir.to_path_buf()));
    }
    let mp = dir.join(MODEL_FILE);
    let bytes = read_file(&mp)?;
    let (config, tokenizer, step, params) = parse_model(&mp, &bytes)?;
    let layout = Layout::new(&config);
    let optim = if with_optim {
        let op = dir.join(OPTIM_FILE);
        let prev = dir.join(OPTIM_PREV_FILE);
        // A save interrupted between its renames leaves the moments of the model's step in
        // optim.prev: take whichever file matches the model.
        let (op, ob, om, state) = match read_optim(&op, step) {
            Ok(x) => x,
            Err(e) if prev.exists() => read_optim(&prev, step).map_err(|_| e)?,
            Err(e) => return Err(e),
        };
        let run_cfg = om.get("run_config").cloned().unwrap_or_default();
        let mut m = vec![0.0f32; layout.total];
        let mut v = vec![0.0f32; layout.total];
        parse_two(&op, &ob, &layout, &mut m, &mut v)?;
        Some((m, v, state, run_cfg))
    } else {
        None
    };
    Ok(Loaded { config, tokenizer, step, params, optim })
}

type OptimFile = (PathBuf, Vec<u8>, HashMap<String, String>, RunState);

/// Reads a moments file and checks it holds `step`.
fn read_optim(op: &Path, step: usize) -> Result<OptimFile, CheckpointError> {
    let content = |p: &Path, msg: String| CheckpointError::Content { path: p.to_path_buf(), msg };
    let ob = read_file(op)?;
    let om = metadata(op, &ob)?;
    let state: RunState = serde_json::from_str(om.get("state").map(|s| s.as_str()).unwrap_or(""))
        .map_err(|e| content(op, format!("metadata 'state' is invalid: {e}")))?;
    if state.step != step {
        return Err(content(op, format!("holds step {} but model.safetensors holds step {step}", state.step)));
    }
    Ok((op.to_path_buf(), ob, om, state))
}

fn parse_two(path: &Path, bytes: &[u8], layout: &Layout, m: &mut [f32], v: &mut [f32]) -> Result<(), CheckpointError> {
    let content = |msg: String| CheckpointError::Content { path: path.to_path_buf(), msg };
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| CheckpointError::Corrupt { path: path.to_path_buf(), msg: e.to_string() })?;
    for (prefix, out) in [("adam.m.", m), ("adam.v.", v)] {
        for (s, &o) in layout.specs.iter().zip(&layout.offsets) {
            let name = format!("{prefix}{}", s.name);
            let t = st.tensor(&name).map_err(|_| content(format!("tensor '{name}' is missing")))?;
            if t.shape() != s.shape.as_slice() {
                return Err(content(format!("tensor '{name}' has shape {:?}, expected {:?}", t.shape(), s.shape)));
            }
            if t.dtype() != safetensors::Dtype::F32 {
                return Err(content(format!("tensor '{name}' has dtype {:?}, expected F32", t.dtype())));
            }
            for (d, c) in out[o..o + s.len()].iter_mut().zip(t.data().chunks_exact(4)) {
                *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
    }
    Ok(())
}
