//! Checkpoints: `model.safetensors` (parameters under the spec's names, with the config, the
//! tokenizer and the step as metadata — readable by Python's `safetensors`) and
//! `optim.safetensors` (AdamW moments and the run state). Every file is written to a temporary
//! name, synced, then renamed, so a crash never leaves a half-written checkpoint.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::gpu::{Gpu, Tensor};
use crate::model::{Layout, ModelConfig};
use crate::tokenizer::Tokenizer;

pub const MODEL_FILE: &str = "model.safetensors";
pub const OPTIM_FILE: &str = "optim.safetensors";
/// The previous moments, kept only while a save renames its files.
pub const OPTIM_PREV_FILE: &str = "optim.prev.safetensors";
pub const FORMAT: &str = "ddl-checkpoint-1";
/// Newest checkpoint format version this build reads.
pub const VERSION: u32 = 1;
/// The metadata key of the CRC-32 of a file's tensor data (all bytes after the header), as eight
/// hexadecimal digits; files of builds before it have none (and are not checked).
pub const DATA_CRC: &str = "data_crc32";

/// A checkpoint that cannot be read, naming the file and the problem.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(
        "checkpoint folder '{0}' does not exist: give a run's folder (`ddl train --out`, or one of its checkpoints/ \
         folders)"
    )]
    MissingDir(PathBuf),
    #[error("'{0}' is a file, not a checkpoint folder: give the run's folder (the one that holds model.safetensors)")]
    NotADir(PathBuf),
    #[error("checkpoint file '{0}' is missing{runs}", runs = runs_inside(.0))]
    MissingFile(PathBuf),
    #[error("cannot read or write '{path}': {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("'{path}' is not a valid safetensors file (truncated or corrupt): {msg}")]
    Corrupt { path: PathBuf, msg: String },
    #[error("'{path}': {msg}")]
    Content { path: PathBuf, msg: String },
    #[error("'{path}': the device failed while the checkpoint was loaded into it: {source}")]
    Device { path: PathBuf, source: Box<crate::gpu::GpuError> },
}

/// The error for a checkpoint path that is not a folder: missing, or a file.
fn not_a_folder(dir: &Path) -> CheckpointError {
    if dir.exists() {
        CheckpointError::NotADir(dir.to_path_buf())
    } else {
        CheckpointError::MissingDir(dir.to_path_buf())
    }
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

/// Bytes an unprivileged writer may still write in the file system holding `dir` (Unix), or
/// `None` where that is not known. `DDL_FAULT_FREE_BYTES=N` pretends N (fault injection for the
/// tests).
pub fn free_bytes(dir: &Path) -> Option<u64> {
    if let Some(n) = std::env::var("DDL_FAULT_FREE_BYTES").ok().and_then(|v| v.parse::<u64>().ok()) {
        return Some(n);
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: `statvfs` fills the zeroed struct from a NUL-terminated path.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return None;
        }
        Some(st.f_bavail as u64 * st.f_frsize as u64)
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

/// The disk a save of a run's checkpoint needs beside what is there (both new files are written
/// whole before the old ones go): the parameters and AdamW's two moments in f32, the tokenizer in
/// both files' metadata, and 1 MiB for the rest of it. Returns (needed, parameters, moments).
pub fn save_bytes(params: usize, tok: &Tokenizer) -> (u64, u64, u64) {
    let (p, m) = (4 * params as u64, 8 * params as u64);
    (p + m + 2 * tok.to_json().len() as u64 + (1 << 20), p, m)
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
    commit_tmp(&write_tmp(path, bytes, false)?, path)
}

/// Writes several files that belong together (a trace and its JSON summary) so that a full disk
/// or an unwritable name leaves every one as it was: all are written whole to temporary files
/// first, then renamed into place (a rename takes no space). A failure removes the temporary
/// files. (`DDL_FAULT_ENOSPC_SAVE=N` fails the writes after the first N of this process.)
pub fn write_all_atomic(files: &[(&Path, &[u8])]) -> std::io::Result<()> {
    let mut tmps: Vec<PathBuf> = Vec::new();
    for (path, bytes) in files {
        match write_tmp(path, bytes, injected_enospc()) {
            Ok(t) => tmps.push(t),
            Err(e) => {
                for t in &tmps {
                    let _ = std::fs::remove_file(t);
                }
                return Err(e);
            }
        }
    }
    let mut result = Ok(());
    for (tmp, (path, _)) in tmps.iter().zip(files) {
        if result.is_ok() {
            result = commit_tmp(tmp, path);
        } else {
            let _ = std::fs::remove_file(tmp);
        }
    }
    result
}

/// [`write_atomic`] that never replaces: the complete temporary file is linked to `path`, which
/// fails if `path` exists (another process's file made meanwhile stays as it is).
pub fn write_new_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = write_tmp(path, bytes, false)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    linked?;
    sync_dir(path.parent().unwrap_or(Path::new(".")));
    Ok(())
}

/// Renames a complete temporary file onto `path` and syncs the folder; on failure removes it.
fn commit_tmp(tmp: &Path, path: &Path) -> std::io::Result<()> {
    std::fs::rename(tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(tmp);
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

/// The values of one flat buffer (parameters or a moment) being saved: a host slice, or a tensor
/// on the device read back in pieces, so the host never holds a whole copy of it.
#[derive(Clone, Copy)]
pub enum Flat<'a> {
    Host(&'a [f32]),
    Device(&'a Gpu, &'a Tensor),
}

/// Elements per piece when a device buffer is streamed to or from a file (1 MiB).
const PIECE: usize = 1 << 18;

/// Serves ranges of a [`Flat`]: a host slice directly, a device tensor from pieces of at most
/// [`PIECE`] elements read in order through one staging buffer.
enum Pieces<'a> {
    Host(&'a [f32]),
    Device {
        reader: crate::gpu::RangeReader<'a>,
        total: usize,
        /// The piece held: its first element and its values.
        at: usize,
        buf: Vec<f32>,
    },
}

impl<'a> Pieces<'a> {
    fn new(flat: Flat<'a>) -> Self {
        match flat {
            Flat::Host(s) => Pieces::Host(s),
            Flat::Device(gpu, t) => {
                Pieces::Device { reader: t.range_reader(gpu, PIECE), total: t.len(), at: 0, buf: Vec::new() }
            }
        }
    }

    /// Passes elements `offset .. offset + len` to `sink`, in one or more slices.
    fn stream(
        &mut self,
        offset: usize,
        len: usize,
        sink: &mut dyn FnMut(&[f32]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let (reader, total, at, buf) = match self {
            Pieces::Host(s) => return sink(&s[offset..offset + len]),
            Pieces::Device { reader, total, at, buf } => (reader, *total, at, buf),
        };
        let (mut i, end) = (offset, offset + len);
        while i < end {
            if !(*at <= i && i < *at + buf.len()) {
                let n = reader.cap().min(total - i);
                reader.read(i, n, buf).map_err(std::io::Error::other)?;
                *at = i;
            }
            let stop = end.min(*at + buf.len());
            sink(&buf[i - *at..stop - *at])?;
            i = stop;
        }
        Ok(())
    }
}

/// One tensor of a file being written: its name, shape, the flat buffer it lives in and where.
type Entry<'a> = (String, Vec<usize>, usize, usize);

/// Writes a safetensors file (F32 tensors, `meta` as its metadata) into the temporary file of
/// `path`, streaming each tensor from its flat buffer (`flats[entry.2]` at element `entry.3`), and
/// syncs it: the host holds one piece of a device buffer at a time, never a copy of the file. On
/// failure (or an injected full disk, which leaves half a file as a full disk would) removes it.
fn write_tmp_flat(
    path: &Path,
    entries: &[Entry<'_>],
    flats: &[Flat<'_>],
    meta: HashMap<String, String>,
    fail: bool,
) -> std::io::Result<PathBuf> {
    // The header as the safetensors format has it: its byte length (u64, little-endian), then
    // JSON naming each tensor's dtype, shape and byte range of the data that follows, padded
    // with spaces so that the data starts 8-byte aligned.
    let mut meta = meta;
    // The tensor data's CRC-32, known once the data is written: a placeholder of its length now,
    // replaced in place below (a byte changed later on disk or in a copy is then found on load).
    if cfg!(feature = "native") {
        meta.insert(DATA_CRC.to_string(), "00000000".to_string());
    }
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!(meta));
    let mut at = 0usize;
    for (name, shape, _, _) in entries {
        let bytes = 4 * shape.iter().product::<usize>();
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [at, at + bytes]}),
        );
        at += bytes;
    }
    let mut head = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
    // Where the placeholder's digits are in the file (never missing; if they were, the file goes
    // without a checksum rather than with a wrong one).
    let crc_at = {
        let key = format!("\"{DATA_CRC}\":\"00000000\"");
        head.windows(key.len()).position(|w| w == key.as_bytes()).map(|i| 8 + i + key.len() - 9)
    };
    if crc_at.is_none() && meta.remove(DATA_CRC).is_some() {
        header.insert("__metadata__".into(), serde_json::json!(meta));
        head = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
    }
    head.resize(head.len().next_multiple_of(8), b' ');
    #[cfg(feature = "native")]
    let mut sum = 0u32;
    with_tmp(path, |tmp| {
        let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(tmp)?);
        f.write_all(&(head.len() as u64).to_le_bytes())?;
        f.write_all(&head)?;
        // The pieces of the buffer being written (one buffer's at a time).
        let mut pieces: Option<(usize, Pieces<'_>)> = None;
        for (_name, shape, which, offset) in entries {
            #[cfg(feature = "native")]
            let mut crc = tensor_crc(_name);
            let n = shape.iter().product::<usize>();
            if pieces.as_ref().is_none_or(|p| p.0 != *which) {
                drop(pieces.take()); // the previous buffer's staging goes before the next one's
                pieces = Some((*which, Pieces::new(flats[*which])));
            }
            let (_, pieces) = pieces.as_mut().expect("set above");
            pieces.stream(*offset, n, &mut |vals| {
                if cfg!(target_endian = "little") {
                    #[cfg(feature = "native")]
                    crc.update(bytemuck::cast_slice(vals));
                    f.write_all(bytemuck::cast_slice(vals))
                } else {
                    vals.iter().try_for_each(|v| {
                        #[cfg(feature = "native")]
                        crc.update(&v.to_le_bytes());
                        f.write_all(&v.to_le_bytes())
                    })
                }
            })?;
            #[cfg(feature = "native")]
            {
                sum = sum.wrapping_add(crc.finalize());
            }
        }
        let f = f.into_inner().map_err(|e| e.into_error())?;
        #[cfg(feature = "native")]
        if let Some(at) = crc_at {
            use std::io::{Seek, SeekFrom};
            (&f).seek(SeekFrom::Start(at as u64))?;
            (&f).write_all(format!("{sum:08x}").as_bytes())?;
        }
        #[cfg(not(feature = "native"))]
        let _ = crc_at;
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
    /// Dynamic loss scaling's state (f16 runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<LossScale>,
    /// The step the invocation that saved this was to stop after (`--steps`): where a later
    /// `--resume` without `--steps` goes on to. (Older checkpoints lack it.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<usize>,
}

/// Dynamic loss scaling (f16 runs): the loss gradient is multiplied by `scale` so that small
/// gradients survive f16 operands; AdamW divides it out. A step whose gradients overflow
/// (a non-finite norm) is skipped on the GPU and halves the scale; `growth` clean steps in a row
/// double it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LossScale {
    /// The scale the next step uses (a power of two).
    pub scale: f64,
    /// Clean steps since the scale last changed.
    pub clean: usize,
    /// Steps skipped for overflow so far (AdamW's step count is the applied steps).
    pub skipped: usize,
}

impl LossScale {
    /// The largest scale: 2^24 (growth stops there).
    pub const MAX: f64 = 16_777_216.0;
    /// Below this the gradients overflow f16 even unscaled: the run stops.
    pub const MIN: f64 = 1.0 / 16_777_216.0;

    pub fn new(scale: f64) -> LossScale {
        LossScale { scale, clean: 0, skipped: 0 }
    }

    /// After a step: `finite` = its gradients were usable.
    pub fn update(&mut self, finite: bool, growth: usize) {
        if finite {
            self.clean += 1;
            if self.clean >= growth {
                self.scale = (self.scale * 2.0).min(Self::MAX.max(self.scale));
                self.clean = 0;
            }
        } else {
            self.scale /= 2.0;
            self.clean = 0;
            self.skipped += 1;
        }
    }
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
    let moments = moments.map(|(m, v, s, r)| (Flat::Host(m), Flat::Host(v), s, r));
    save_flat(dir, cfg, tok, layout, Flat::Host(params), moments)
}

/// Saves the checkpoint of a model on the device (parameters, moments and run state) into `dir`,
/// streaming each buffer to its file in pieces: the host holds one piece, not the model.
pub fn save_model(
    dir: &Path,
    model: &crate::model::Model,
    tok: &Tokenizer,
    state: &RunState,
    run_cfg: &str,
) -> Result<(), CheckpointError> {
    let g = &*model.gpu;
    let moments = Some((Flat::Device(g, &model.adam_m), Flat::Device(g, &model.adam_v), state, run_cfg));
    save_flat(dir, &model.cfg, tok, &model.layout, Flat::Device(g, &model.params), moments)
}

/// [`save`] from either host slices or device buffers.
pub fn save_flat(
    dir: &Path,
    cfg: &ModelConfig,
    tok: &Tokenizer,
    layout: &Layout,
    params: Flat<'_>,
    moments: Option<(Flat<'_>, Flat<'_>, &RunState, &str)>,
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
    // Each tensor of `layout` in flat buffer `which`, named with `prefix`.
    fn entries<'a>(layout: &Layout, which: usize, prefix: &str) -> Vec<Entry<'a>> {
        layout
            .specs
            .iter()
            .zip(&layout.offsets)
            .map(|(s, &o)| (format!("{prefix}{}", s.name), s.shape.clone(), which, o))
            .collect()
    }
    remove_stale_tmp(dir);
    let mp = dir.join(MODEL_FILE);
    let Some((m, v, state, run_cfg)) = moments else {
        let tmp = write_tmp_flat(&mp, &entries(layout, 0, ""), &[params], meta, false).map_err(io(&mp))?;
        return commit_tmp(&tmp, &mp).map_err(io(&mp));
    };
    let mut om = meta.clone();
    om.insert("state".to_string(), serde_json::to_string(state).unwrap());
    om.insert("run_config".to_string(), run_cfg.to_string());
    let mut t = entries(layout, 0, "adam.m.");
    t.extend(entries(layout, 1, "adam.v."));

    let op = dir.join(OPTIM_FILE);
    let prev = dir.join(OPTIM_PREV_FILE);
    // Both new files are complete on disk before anything is replaced (a full disk stops here
    // with the old checkpoint untouched). Then the renames keep a consistent (model, moments)
    // pair loadable at every instant: the old moments move to optim.prev first, so a crash
    // between the renames leaves the old model with its moments in optim.prev (`load` picks the
    // moments file whose step matches the model's).
    let fail = injected_enospc();
    let tmp_o = write_tmp_flat(&op, &t, &[m, v], om, false).map_err(io(&op))?;
    let tmp_m = match write_tmp_flat(&mp, &entries(layout, 0, ""), &[params], meta, fail) {
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

/// For a missing `model.safetensors`: the folders beside it that hold one (a folder of runs
/// given for a run), said with the remedy; empty otherwise.
fn runs_inside(missing: &Path) -> String {
    if missing.file_name().is_none_or(|n| n != MODEL_FILE) {
        return String::new();
    }
    let mut dir = missing.parent().unwrap_or(Path::new(".")).to_path_buf();
    // An experiment's folder (`ddl experiment --out`): its runs are in its `runs/`.
    // (As `curves::is_experiment` tells one, which the browser's build leaves out.)
    let experiment = dir.join("runs").is_dir() && !dir.join("metrics.jsonl").exists();
    if experiment {
        dir = dir.join("runs");
    }
    let mut runs: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join(MODEL_FILE).is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if runs.is_empty() {
        return match experiment {
            true => format!(
                "; '{}' is an experiment's folder, and no run in its runs/ has a checkpoint yet: give a run's folder \
                 ({}) once it has one",
                dir.parent().unwrap_or(&dir).display(),
                dir.join("NAME").display()
            ),
            false => not_a_run(&dir),
        };
    }
    runs.sort();
    const SHOWN: usize = 5;
    let more = if runs.len() > SHOWN { format!(" and {} more", runs.len() - SHOWN) } else { String::new() };
    runs.truncate(SHOWN);
    let holds = match experiment {
        true => format!(
            "'{}' is an experiment's folder: its runs are in '{}'",
            dir.parent().unwrap_or(&dir).display(),
            dir.display()
        ),
        false => format!("'{}' holds runs in its folders", dir.display()),
    };
    format!("; {holds} ({}{more}): give one of them, e.g. '{}'", runs.join(", "), dir.join(&runs[0]).display())
}

/// The remedy for a folder that holds no checkpoint and no run with one: what the folder is where
/// that is plain (token shards, a run that saved nothing, a kept-checkpoints folder), else what to
/// give instead.
fn not_a_run(dir: &Path) -> String {
    let shown = dir.display();
    if dir.join("meta.json").is_file() {
        return format!(
            "; '{shown}' holds token shards (meta.json), not a model: train on them with `ddl train --data {shown}`, or \
             evaluate a run on them with `ddl eval --checkpoint RUN --data {shown}`"
        );
    }
    // (Before its first log line a run's folder may hold only the lock.)
    #[cfg(feature = "native")]
    if let Some((pid, host)) = super::lock::holder(dir) {
        return format!(
            "; a run is training in '{shown}' now (process {pid} on {host}) and has saved no checkpoint yet: wait for \
             its first one (train.checkpoint_every steps, or its end; Ctrl-C saves one)"
        );
    }
    if is_run(dir) {
        return format!(
            "; '{shown}' is a run that saved no checkpoint (it stopped before its first, train.checkpoint_every \
             steps): train it again with `ddl train --out {shown} --overwrite`"
        );
    }
    if dir.file_name().is_some_and(|n| n == KEPT_DIR) {
        return format!(
            "; '{shown}' is a run's folder of kept checkpoints, and none is in it: give the run's folder ('{}')",
            dir.parent().unwrap_or(dir).display()
        );
    }
    "; give a run's folder (`ddl train --out`, the one that holds model.safetensors) or one of its kept checkpoints \
     (checkpoints/step-NNNNNNNN, checkpoints/best)"
        .into()
}

fn read_file(path: &Path) -> Result<Vec<u8>, CheckpointError> {
    if !path.exists() {
        return Err(CheckpointError::MissingFile(path.to_path_buf()));
    }
    std::fs::read(path).map_err(|source| CheckpointError::Io { path: path.to_path_buf(), source })
}

/// The tensors of `st` for each prefix (in `layout`'s order) after checking names, shapes and
/// dtypes against `layout`, and that nothing else is in the file; `cfg` names the config they were
/// checked against in the errors of a model file.
fn check_tensors<'b>(
    path: &Path,
    st: &safetensors::SafeTensors<'b>,
    layout: &Layout,
    prefixes: &[&str],
    cfg: Option<&ModelConfig>,
) -> Result<Vec<Vec<(String, safetensors::tensor::TensorView<'b>)>>, CheckpointError> {
    let content = |msg: String| CheckpointError::Content { path: path.to_path_buf(), msg };
    // Tensors that do not fit the config: say which config they were checked against.
    let cfg_note = cfg
        .map(|cfg| {
            format!(
                "; the metadata config is variant {}, d_model {}, n_layers {}, d_v {}: the tensors were written for a \
                 different model (or the config was edited)",
                cfg.variant, cfg.d_model, cfg.n_layers, cfg.d_v
            )
        })
        .unwrap_or_default();
    let mut expected: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut all = Vec::with_capacity(prefixes.len());
    for prefix in prefixes {
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
        all.push(views);
    }
    let mut extra: Vec<String> =
        st.names().into_iter().filter(|n| !expected.contains(*n)).map(|s| s.to_string()).collect();
    if !extra.is_empty() {
        extra.sort();
        return Err(content(format!("unknown tensor(s) for this model: {}{cfg_note}", extra.join(", "))));
    }
    Ok(all)
}

/// A tensor's CRC-32 hasher, started with its name: [`DATA_CRC`] is the wrapping sum of every
/// tensor's CRC-32 of its name and data, whatever order the file stores them in.
#[cfg(feature = "native")]
fn tensor_crc(name: &str) -> crc32fast::Hasher {
    let mut h = crc32fast::Hasher::new();
    h.update(name.as_bytes());
    h
}

/// Checks the tensors of a checkpoint file (`bytes`) against the CRC-32 its header records
/// ([`DATA_CRC`]; a file without one passes; the device loads hash as they upload, through
/// [`check_crc_sum`]). A mismatch is a byte changed since the file was written: a disk, a copy
/// or an edit damaged it.
#[cfg(feature = "native")]
fn check_data_crc(
    path: &Path,
    bytes: &[u8],
    views: &[&(String, safetensors::tensor::TensorView<'_>)],
) -> Result<(), CheckpointError> {
    let mut sum = 0u32;
    for (name, t) in views {
        let mut h = tensor_crc(name);
        h.update(t.data());
        sum = sum.wrapping_add(h.finalize());
    }
    check_crc_sum(path, bytes, sum)
}

/// Compares the CRC sum of a file's tensors (`sum`, however it was hashed) with the one its
/// header records ([`DATA_CRC`]; a file without one passes).
#[cfg(feature = "native")]
fn check_crc_sum(path: &Path, bytes: &[u8], sum: u32) -> Result<(), CheckpointError> {
    let (_, m) = safetensors::SafeTensors::read_metadata(bytes)
        .map_err(|e| CheckpointError::Corrupt { path: path.to_path_buf(), msg: e.to_string() })?;
    let Some(want) = m.metadata().as_ref().and_then(|md| md.get(DATA_CRC)).cloned() else { return Ok(()) };
    let got = format!("{sum:08x}");
    if !want.eq_ignore_ascii_case(&got) {
        return Err(CheckpointError::Corrupt {
            path: path.to_path_buf(),
            msg: format!(
                "its tensors do not match the checksum its header records ({DATA_CRC} {want}, the tensors give \
                 {got}): bytes changed after the file was written (a damaged disk or copy, or an edit)"
            ),
        });
    }
    Ok(())
}

fn deserialize<'b>(path: &Path, bytes: &'b [u8]) -> Result<safetensors::SafeTensors<'b>, CheckpointError> {
    safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| CheckpointError::Corrupt { path: path.to_path_buf(), msg: e.to_string() })
}

/// Decodes little-endian f32 bytes into `out` (same length in elements); the index of the first
/// non-finite value, if any.
fn decode_f32(bytes: &[u8], out: &mut [f32]) -> Option<usize> {
    for (d, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    out.iter().position(|x| !x.is_finite())
}

/// Copies checked tensors into a flat buffer at their layout offsets, refusing non-finite values.
fn copy_tensors(
    path: &Path,
    views: &[(String, safetensors::tensor::TensorView<'_>)],
    layout: &Layout,
    out: &mut [f32],
) -> Result<(), CheckpointError> {
    for ((name, t), (s, &o)) in views.iter().zip(layout.specs.iter().zip(&layout.offsets)) {
        let dst = &mut out[o..o + s.len()];
        if let Some(i) = decode_f32(t.data(), dst) {
            return Err(non_finite(path, name, i, dst[i]));
        }
    }
    Ok(())
}

fn non_finite(path: &Path, name: &str, i: usize, x: f32) -> CheckpointError {
    CheckpointError::Content {
        path: path.to_path_buf(),
        msg: format!("tensor '{name}' holds a non-finite value ({x}) at element {i}"),
    }
}

fn parse_tensors(
    path: &Path,
    bytes: &[u8],
    layout: &Layout,
    prefix: &str,
    cfg: &ModelConfig,
) -> Result<Vec<f32>, CheckpointError> {
    let st = deserialize(path, bytes)?;
    // Names, shapes and dtypes first: only a file that holds every tensor of the config (so at
    // least as many bytes as the parameters need) gets the parameter buffer allocated.
    let views = check_tensors(path, &st, layout, &[prefix], Some(cfg))?.remove(0);
    let mut out = vec![0.0f32; layout.total];
    copy_tensors(path, &views, layout, &mut out)?;
    #[cfg(feature = "native")]
    check_data_crc(path, bytes, &views.iter().collect::<Vec<_>>())?;
    Ok(out)
}

/// Uploads checked tensors from the memory-mapped file `map` to their layout offsets in `dst`, in
/// pieces, refusing non-finite values: the host holds a piece at a time, and the file's pages are
/// let go of as they are passed (they would otherwise count as this process's memory).
#[cfg(feature = "native")]
fn upload_tensors(
    path: &Path,
    map: &memmap2::Mmap,
    views: &[(String, safetensors::tensor::TensorView<'_>)],
    layout: &Layout,
    gpu: &Gpu,
    dst: &Tensor,
) -> Result<u32, CheckpointError> {
    let device =
        |source: crate::gpu::GpuError| CheckpointError::Device { path: path.to_path_buf(), source: Box::new(source) };
    let mut piece = vec![0.0f32; PIECE];
    let mut queued = 0usize;
    // The data's CRC sum ([`DATA_CRC`]), hashed in the same pass as the upload.
    let mut sum = 0u32;
    for ((name, t), (s, &o)) in views.iter().zip(layout.specs.iter().zip(&layout.offsets)) {
        let data = t.data();
        let mut crc = tensor_crc(name);
        for (k, chunk) in data.chunks(4 * PIECE).enumerate() {
            crc.update(chunk);
            let vals = &mut piece[..chunk.len() / 4];
            if let Some(i) = decode_f32(chunk, vals) {
                return Err(non_finite(path, name, k * PIECE + i, vals[i]));
            }
            dst.write_f32_range(gpu, o + k * PIECE, vals).map_err(device)?;
            queued += chunk.len();
            // Queued writes hold a staging copy until the next submit: flush every few pieces.
            if queued >= 16 * PIECE {
                gpu.queue.submit([]);
                gpu.wait().map_err(device)?;
                queued = 0;
            }
            forget_pages(map, chunk);
        }
        sum = sum.wrapping_add(crc.finalize());
        debug_assert_eq!(data.len(), 4 * s.len());
    }
    gpu.queue.submit([]);
    gpu.wait().map_err(device)?;
    Ok(sum)
}

/// Drops the pages of `part` (a slice of `map`) from this process's resident memory.
#[cfg(feature = "native")]
fn forget_pages(map: &memmap2::Mmap, part: &[u8]) {
    let start = part.as_ptr() as usize - map.as_ptr() as usize;
    super::shards::forget_mapped(map, start, start + part.len(), 4096);
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
    // (Missing in the first checkpoints: version 1.)
    let version: u32 = match md.get("version") {
        None => 1,
        Some(v) => v.trim().parse().map_err(|_| {
            content(format!("metadata 'version' = {v:?} is not a whole number: the file is damaged or not ddl's"))
        })?,
    };
    if version > VERSION {
        return Err(content(format!(
            "checkpoint format version {version} is newer than this build reads ({VERSION}); upgrade ddl"
        )));
    }
    Ok(md)
}

/// The config, tokenizer and step in the metadata of a `model.safetensors` (`mp` names it in
/// errors), checked.
fn model_meta(mp: &Path, bytes: &[u8]) -> Result<(ModelConfig, Tokenizer, usize), CheckpointError> {
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
    // A character model's vocabulary is its characters: an id without one would be sampled and
    // dropped from the text without a word.
    if matches!(tokenizer, Tokenizer::Char(_)) && tokenizer.vocab_size() != config.vocab_size {
        return Err(content(
            mp,
            format!(
                "the character tokenizer has {} characters but the model's vocabulary is {} (a character model's \
                 vocabulary is its characters; ids without one would be dropped from generated text)",
                tokenizer.vocab_size(),
                config.vocab_size
            ),
        ));
    }
    let step: usize = match md.get("step") {
        None => 0,
        Some(s) => s
            .trim()
            .parse()
            .map_err(|_| content(mp, format!("metadata 'step' = {s:?} is not a whole number: the file is damaged")))?,
    };
    Ok((config, tokenizer, step))
}

/// Parses the bytes of a `model.safetensors` (`mp` names it in errors): config, tokenizer, step
/// and the flat parameters.
pub fn parse_model(mp: &Path, bytes: &[u8]) -> Result<(ModelConfig, Tokenizer, usize, Vec<f32>), CheckpointError> {
    let (config, tokenizer, step) = model_meta(mp, bytes)?;
    let layout = Layout::new(&config);
    let params = parse_tensors(mp, bytes, &layout, "", &config)?;
    Ok((config, tokenizer, step, params))
}

/// A checkpoint read into a model on the device ([`load_to_device`]).
pub struct OnDevice {
    pub model: crate::model::Model,
    pub tokenizer: Tokenizer,
    pub step: usize,
    /// The run state and the saved run settings, when the moments were read.
    pub optim: Option<(RunState, String)>,
}

#[cfg(feature = "native")]
fn map_file(path: &Path) -> Result<memmap2::Mmap, CheckpointError> {
    let io = |source| CheckpointError::Io { path: path.to_path_buf(), source };
    let f = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => CheckpointError::MissingFile(path.to_path_buf()),
        _ => io(e),
    })?;
    // SAFETY: checkpoint files are replaced by rename, never written in place, so the mapped file
    // does not change under the map while it is read.
    unsafe { memmap2::Mmap::map(&f) }.map_err(io)
}

/// Loads `dir`'s checkpoint straight into a new model on `gpu` (and its AdamW moments when
/// `with_optim`), with the checks of [`load`]: each tensor goes from the memory-mapped file to its
/// place in the device buffer in pieces, so the host never holds a copy of the parameters or the
/// moments (what [`load`] and `Model::with_params` need).
#[cfg(feature = "native")]
pub fn load_to_device(dir: &Path, gpu: std::sync::Arc<Gpu>, with_optim: bool) -> Result<OnDevice, CheckpointError> {
    load_to_device_as(dir, gpu, with_optim, None)
}

/// [`load_to_device`], the model built with `model`'s settings that fix no parameter
/// ([`crate::model::ModelConfig::FINE_TUNE_SETTINGS`]: a fine-tune's label smoothing and
/// context) in place of the saved ones; every other setting stays the checkpoint's.
#[cfg(feature = "native")]
pub fn load_to_device_as(
    dir: &Path,
    gpu: std::sync::Arc<Gpu>,
    with_optim: bool,
    model: Option<&crate::model::ModelConfig>,
) -> Result<OnDevice, CheckpointError> {
    if !dir.is_dir() {
        return Err(not_a_folder(dir));
    }
    let mp = dir.join(MODEL_FILE);
    let (model, tokenizer, step, layout) = {
        let map = map_file(&mp)?;
        let (config, tokenizer, step) = model_meta(&mp, &map)?;
        let layout = Layout::new(&config);
        let st = deserialize(&mp, &map)?;
        let views = check_tensors(&mp, &st, &layout, &[""], Some(&config))?.remove(0);
        let config = match model {
            Some(m) => config.with_fine_tune_settings_of(m),
            None => config,
        };
        let model = crate::model::Model::zeroed(gpu.clone(), config)
            .map_err(|source| CheckpointError::Device { path: mp.clone(), source: Box::new(source) })?;
        let sum = upload_tensors(&mp, &map, &views, &layout, &gpu, &model.params)?;
        check_crc_sum(&mp, &map, sum)?;
        (model, tokenizer, step, layout)
    };
    let optim = if with_optim {
        let (op, map, om, state) = open_optim(dir, step, map_file)?;
        let st = deserialize(&op, &map)?;
        let mut both = check_tensors(&op, &st, &layout, &["adam.m.", "adam.v."], None)?;
        let v = both.pop().expect("two prefixes");
        let m = both.pop().expect("two prefixes");
        let sum = upload_tensors(&op, &map, &m, &layout, &gpu, &model.adam_m)?.wrapping_add(upload_tensors(
            &op,
            &map,
            &v,
            &layout,
            &gpu,
            &model.adam_v,
        )?);
        check_crc_sum(&op, &map, sum)?;
        Some((state, om.get("run_config").cloned().unwrap_or_default()))
    } else {
        None
    };
    Ok(OnDevice { model, tokenizer, step, optim })
}

/// The run settings (`config.toml`'s TOML) saved in `dir`'s checkpoint — what `--resume`
/// continues with — read from the files' metadata without loading a tensor. Empty for a
/// checkpoint saved without them.
#[cfg(feature = "native")]
pub fn saved_run_config(dir: &Path) -> Result<String, CheckpointError> {
    let step = saved_step(dir)?;
    let (_, _, om, _) = open_optim(dir, step, map_file)?;
    Ok(om.get("run_config").cloned().unwrap_or_default())
}

/// The run folder whose kept checkpoint `path` is (`RUN/checkpoints/NAME`, however spelled:
/// relative, through `.` or `..`, or a symbolic link; a folder not made yet by its parent), if
/// it is one.
pub fn kept_run_of(path: &Path) -> Option<PathBuf> {
    let real = resolved(path)?;
    let kept = real.parent()?;
    (kept.file_name()? == KEPT_DIR).then(|| kept.parent().map(Path::to_path_buf)).flatten()
}

/// `path` absolute and resolved (`.`, `..`, symbolic links) as far as it exists, with the parts
/// not made yet appended.
fn resolved(path: &Path) -> Option<PathBuf> {
    let mut base = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir().ok()?.join(path) };
    let mut rest = Vec::new();
    loop {
        if let Ok(r) = base.canonicalize() {
            return Some(rest.iter().rev().fold(r, |p: PathBuf, c: &std::ffi::OsString| p.join(c)));
        }
        rest.push(base.file_name()?.to_os_string());
        base = base.parent()?.to_path_buf();
    }
}

/// Refuses an output `path` (given as `flag`) inside a run's `checkpoints/` folder, at any depth
/// ([`inside_kept`]): the error text, naming the run; `None` elsewhere.
pub fn kept_refusal(flag: &str, path: &Path) -> Option<String> {
    inside_kept(path).map(|run| {
        format!(
            "{flag} {}: inside the kept checkpoints of the run in '{}' (its checkpoints/ folder belongs to that \
             run, which removes old checkpoints with everything in them); choose a folder outside it",
            path.display(),
            run.display()
        )
    })
}

/// Whether `path`'s folder takes a file under the temporary name its atomic write would use
/// (made and removed at once): a read-only folder or a name too long is found before the work
/// whose result goes there, not after it.
pub fn probe_writable(path: &Path) -> std::io::Result<()> {
    let probe = tmp_path(path);
    std::fs::File::create(&probe)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The run whose `checkpoints/` folder `path` lies in, at any depth (however spelled; parts not
/// made yet are allowed): the run prunes and replaces what is there, so no output goes inside.
pub fn inside_kept(path: &Path) -> Option<PathBuf> {
    resolved(path)?.ancestors().find_map(|a| {
        let run = a.parent()?;
        (a.file_name()? == KEPT_DIR && is_run(run)).then(|| run.to_path_buf())
    })
}

/// Whether `dir` is a run's folder: it holds a run's settings, metrics or checkpoint.
pub fn is_run(dir: &Path) -> bool {
    ["config.toml", "metrics.jsonl", MODEL_FILE].iter().any(|f| dir.join(f).is_file())
}

/// The step of `dir`'s checkpoint, from its model file's metadata.
#[cfg(feature = "native")]
pub fn saved_step(dir: &Path) -> Result<usize, CheckpointError> {
    Ok(saved_model_meta(dir)?.2)
}

/// The tokenizer saved with `dir`'s checkpoint (its model file's metadata; the tensors are not
/// read).
#[cfg(feature = "native")]
pub fn saved_tokenizer(dir: &Path) -> Result<Tokenizer, CheckpointError> {
    Ok(saved_model_meta(dir)?.1)
}

/// The model config saved with `dir`'s checkpoint (its model file's metadata; the tensors are
/// not read).
#[cfg(feature = "native")]
pub fn saved_config(dir: &Path) -> Result<ModelConfig, CheckpointError> {
    Ok(saved_model_meta(dir)?.0)
}

/// The config, tokenizer and step of `dir`'s model file (its metadata, by memory map).
#[cfg(feature = "native")]
fn saved_model_meta(dir: &Path) -> Result<(ModelConfig, Tokenizer, usize), CheckpointError> {
    if !dir.is_dir() {
        return Err(not_a_folder(dir));
    }
    let mp = dir.join(MODEL_FILE);
    model_meta(&mp, &map_file(&mp)?)
}

/// The run state saved with `dir`'s checkpoint (its moments file's metadata; the tensors are not
/// read).
#[cfg(feature = "native")]
pub fn saved_state(dir: &Path) -> Result<RunState, CheckpointError> {
    let step = saved_step(dir)?;
    Ok(open_optim(dir, step, map_file)?.3)
}

/// Where a run whose own checkpoint is missing or does not read can continue from, said as a
/// remedy: the newest of its kept checkpoints (`checkpoints/step-N`, newest first, then
/// `checkpoints/best`) whose files read (their metadata and run state, the step of both) and are
/// not the run's files named in `suspect`, those that may be damaged (kept files are hard links
/// of the run's, so a file damaged in place is damaged there too; `[]`: the run's files are
/// missing, not damaged; [`suspect_files`] names them from an error). `None` when it keeps none
/// that reads.
#[cfg(feature = "native")]
pub fn kept_remedy_for(run: &Path, suspect: &[&str]) -> Option<String> {
    let (usable, step) = kept_that_reads(run, suspect)?;
    Some(format!(
        "its kept checkpoint {} (step {step}) reads: `ddl train --resume {} --out NEW` continues from it in a new \
         folder",
        usable.display(),
        usable.display()
    ))
}

/// The newest kept checkpoint of `run` (then its best) that reads and shares none of the files
/// `suspect` with the run's own, with its step.
#[cfg(feature = "native")]
fn kept_that_reads(run: &Path, suspect: &[&str]) -> Option<(PathBuf, usize)> {
    let kept = run.join(KEPT_DIR);
    let mut dirs: Vec<PathBuf> = kept_steps(run).into_iter().rev().map(|s| kept.join(step_dir_name(s))).collect();
    dirs.push(kept.join(BEST_DIR));
    let shares = |d: &Path| suspect.iter().any(|f| same_file(&d.join(f), &run.join(f)));
    let usable = dirs.into_iter().find(|d| !shares(d) && saved_state(d).is_ok())?;
    let step = saved_step(&usable).ok()?;
    Some((usable, step))
}

/// A model that does not load for evaluation or generation (`e`, from `run`'s `model.safetensors`
/// damaged or missing), with the kept checkpoint that reads, if any, named as the one to give
/// instead (`flag`: `--checkpoint`, `--against`).
#[cfg(feature = "native")]
pub fn with_kept_for_reading(run: &Path, flag: &str, e: CheckpointError) -> CheckpointError {
    let model = |p: &Path| p.file_name().is_some_and(|n| n == MODEL_FILE);
    // (A run training in the folder that has saved no checkpoint yet: the missing file's message
    // says so, with when there will be one.)
    let Some((kept, step)) = (match &e {
        CheckpointError::Corrupt { path, .. }
        | CheckpointError::Content { path, .. }
        | CheckpointError::MissingFile(path)
            if model(path) =>
        {
            kept_that_reads(run, &[MODEL_FILE])
        }
        _ => None,
    }) else {
        return e;
    };
    let but =
        format!("; but its kept checkpoint {} (step {step}) reads: give {flag} {}", kept.display(), kept.display());
    match e {
        CheckpointError::Corrupt { path, msg } => CheckpointError::Corrupt { path, msg: msg + &but },
        CheckpointError::Content { path, msg } => CheckpointError::Content { path, msg: msg + &but },
        CheckpointError::MissingFile(path) => {
            CheckpointError::Content { path, msg: format!("the file is missing{but}") }
        }
        e => e,
    }
}

/// The files of a checkpoint that `e` shows damaged (the one it names, when it is the model's or
/// the moments' file; else both): what [`kept_remedy_for`] must not share.
pub fn suspect_files(e: &CheckpointError) -> &'static [&'static str] {
    let path = match e {
        CheckpointError::Corrupt { path, .. }
        | CheckpointError::Content { path, .. }
        | CheckpointError::Io { path, .. } => path,
        CheckpointError::MissingFile(_) => return &[],
        _ => return &[MODEL_FILE, OPTIM_FILE],
    };
    match path.file_name().and_then(|n| n.to_str()) {
        Some(MODEL_FILE) => &[MODEL_FILE],
        Some(OPTIM_FILE) => &[OPTIM_FILE],
        _ => &[MODEL_FILE, OPTIM_FILE],
    }
}

/// Whether `a` and `b` are the same file (hard links of one); false where either is missing (or
/// off Unix, where it is not known).
#[cfg(feature = "native")]
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        false
    }
}

/// Loads `dir/model.safetensors` (and `optim.safetensors` when `with_optim`).
pub fn load(dir: &Path, with_optim: bool) -> Result<Loaded, CheckpointError> {
    if !dir.is_dir() {
        return Err(not_a_folder(dir));
    }
    let mp = dir.join(MODEL_FILE);
    let bytes = read_file(&mp)?;
    let (config, tokenizer, step, params) = parse_model(&mp, &bytes)?;
    let layout = Layout::new(&config);
    let optim = if with_optim {
        let (op, ob, om, state) = open_optim(dir, step, read_file)?;
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

/// A moments file: its path, its bytes (read or mapped), its metadata and run state.
type OptimFile<B> = (PathBuf, B, HashMap<String, String>, RunState);

/// The moments file of `dir` that holds `step`, opened with `open`: `optim.safetensors`, or —
/// after a save interrupted between its renames — `optim.prev.safetensors`.
fn open_optim<B: AsRef<[u8]>>(
    dir: &Path,
    step: usize,
    open: impl Fn(&Path) -> Result<B, CheckpointError>,
) -> Result<OptimFile<B>, CheckpointError> {
    let read = |op: PathBuf| -> Result<OptimFile<B>, CheckpointError> {
        let bytes = open(&op)?;
        let (om, state) = optim_meta(&op, bytes.as_ref(), step)?;
        Ok((op, bytes, om, state))
    };
    let prev = dir.join(OPTIM_PREV_FILE);
    match read(dir.join(OPTIM_FILE)) {
        Ok(x) => Ok(x),
        Err(e) if prev.exists() => read(prev).map_err(|_| e),
        Err(e) => Err(e),
    }
}

/// The metadata and run state of a moments file's bytes, checked to hold `step`.
fn optim_meta(op: &Path, bytes: &[u8], step: usize) -> Result<(HashMap<String, String>, RunState), CheckpointError> {
    let content = |p: &Path, msg: String| CheckpointError::Content { path: p.to_path_buf(), msg };
    let om = metadata(op, bytes)?;
    let state: RunState = serde_json::from_str(om.get("state").map(|s| s.as_str()).unwrap_or(""))
        .map_err(|e| content(op, format!("metadata 'state' is invalid: {e}")))?;
    if state.step != step {
        return Err(content(op, format!("holds step {} but model.safetensors holds step {step}", state.step)));
    }
    Ok((om, state))
}

fn parse_two(path: &Path, bytes: &[u8], layout: &Layout, m: &mut [f32], v: &mut [f32]) -> Result<(), CheckpointError> {
    let st = deserialize(path, bytes)?;
    let both = check_tensors(path, &st, layout, &["adam.m.", "adam.v."], None)?;
    copy_tensors(path, &both[0], layout, m)?;
    copy_tensors(path, &both[1], layout, v)?;
    #[cfg(feature = "native")]
    check_data_crc(path, bytes, &both.iter().flatten().collect::<Vec<_>>())?;
    Ok(())
}

/// The folder of a run's kept checkpoints.
pub const KEPT_DIR: &str = "checkpoints";
/// The best checkpoint's folder inside [`KEPT_DIR`] and its record there.
pub const BEST_DIR: &str = "best";
pub const BEST_FILE: &str = "best.json";
/// A run's small files copied into each kept checkpoint, so that it is a run folder of its own
/// (`ddl eval`, `ddl generate` and `--resume` take it).
const RUN_FILES: [&str; 2] = ["config.toml", "data.json"];

/// The best checkpoint's record (`checkpoints/best/best.json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Best {
    pub step: usize,
    /// Validation loss over the periodic subset (the windows every evaluation covers).
    pub val_loss: f64,
    /// Tokens of that subset.
    pub val_tokens: usize,
}

/// The name of step `step`'s kept checkpoint folder.
pub fn step_dir_name(step: usize) -> String {
    format!("step-{step:08}")
}

/// A hard link of `src` at `dst` (the file is not copied: the run folder's own checkpoint files
/// are replaced by rename at the next save, so the link keeps this version); a copy where the file
/// system has no hard links.
fn link_or_copy(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::hard_link(src, dst).or_else(|_| std::fs::copy(src, dst).map(|_| ()))
}

/// Fills a new folder `tmp` with the checkpoint at the top of `run` (model and moments linked,
/// the run's small files copied), then renames it to `dst`, replacing what was there.
fn snapshot(run: &Path, tmp: &Path, dst: &Path, extra: Option<(&str, &[u8])>) -> std::io::Result<()> {
    let _ = std::fs::remove_dir_all(tmp);
    std::fs::create_dir_all(tmp)?;
    let fill = || -> std::io::Result<()> {
        for f in [MODEL_FILE, OPTIM_FILE] {
            link_or_copy(&run.join(f), &tmp.join(f))?;
        }
        for f in RUN_FILES {
            if run.join(f).exists() {
                std::fs::copy(run.join(f), tmp.join(f))?;
            }
        }
        if let Some((name, bytes)) = extra {
            std::fs::write(tmp.join(name), bytes)?;
        }
        sync_dir(tmp);
        // Replace `dst` by renames only: the old folder moves aside first, then goes.
        let old = PathBuf::from(format!("{}.old", tmp.display()));
        if dst.exists() {
            std::fs::rename(dst, &old)?;
        }
        std::fs::rename(tmp, dst)?;
        let _ = std::fs::remove_dir_all(&old);
        sync_dir(dst.parent().unwrap_or(Path::new(".")));
        Ok(())
    };
    fill().inspect_err(|_| {
        let _ = std::fs::remove_dir_all(tmp);
    })
}

/// Temporary folders of [`snapshot`] left by killed writers (not this process's).
fn remove_stale_snapshots(kept: &Path) {
    let ours = format!(".tmp-{}", std::process::id());
    let Ok(entries) = std::fs::read_dir(kept) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with('.') && name.contains(".tmp-") && !name.contains(&ours) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The steps of the kept checkpoints of `run`, oldest first.
pub fn kept_steps(run: &Path) -> Vec<usize> {
    let mut steps: Vec<usize> = std::fs::read_dir(run.join(KEPT_DIR))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("step-")?.parse().ok())
        .collect();
    steps.sort_unstable();
    steps
}

/// Keeps the checkpoint just saved at the top of `run` (step `step`) as
/// `checkpoints/step-NNNNNNNN/` and removes the kept ones beyond the newest `keep` (`keep = 0`:
/// none kept, and earlier ones removed). Kept files are hard links where the file system allows:
/// a kept checkpoint costs disk space only once the run folder's own files have moved on.
pub fn keep_step(run: &Path, step: usize, keep: usize) -> Result<(), CheckpointError> {
    let kept = run.join(KEPT_DIR);
    let io = |source| CheckpointError::Io { path: kept.clone(), source };
    if keep > 0 {
        std::fs::create_dir_all(&kept).map_err(io)?;
        remove_stale_snapshots(&kept);
        let name = step_dir_name(step);
        let tmp = kept.join(format!(".{name}.tmp-{}", std::process::id()));
        snapshot(run, &tmp, &kept.join(&name), None).map_err(io)?;
    }
    let steps = kept_steps(run);
    for s in &steps[..steps.len().saturating_sub(keep)] {
        std::fs::remove_dir_all(kept.join(step_dir_name(*s))).map_err(io)?;
    }
    Ok(())
}

/// The best checkpoint's record, when `run` has one.
pub fn read_best(run: &Path) -> Option<Best> {
    let text = std::fs::read_to_string(run.join(KEPT_DIR).join(BEST_DIR).join(BEST_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Makes the checkpoint at the top of `run` the best one: `checkpoints/best/` (linked as
/// [`keep_step`] does) with `best.json` recording its step and validation loss.
pub fn mark_best(run: &Path, best: &Best) -> Result<(), CheckpointError> {
    let kept = run.join(KEPT_DIR);
    let io = |source| CheckpointError::Io { path: kept.join(BEST_DIR), source };
    std::fs::create_dir_all(&kept).map_err(io)?;
    remove_stale_snapshots(&kept);
    let tmp = kept.join(format!(".{BEST_DIR}.tmp-{}", std::process::id()));
    let record = serde_json::to_vec_pretty(best).map_err(|e| io(std::io::Error::other(e)))?;
    snapshot(run, &tmp, &kept.join(BEST_DIR), Some((BEST_FILE, &record))).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message for a folder without a checkpoint, as `ddl eval/generate/info --checkpoint DIR` print it.
    fn missing_in(dir: &Path) -> String {
        CheckpointError::MissingFile(dir.join(MODEL_FILE)).to_string()
    }

    /// A folder that is not a run gets a remedy that says what it is (token shards, a run that
    /// saved nothing yet or is training, the kept-checkpoints folder) or what to give instead; the
    /// message named the missing file alone before.
    #[test]
    fn a_folder_without_a_checkpoint_says_what_it_is_and_what_to_give() {
        let root = crate::testing::scratch_dir("checkpoint-not-a-run");
        let plain = root.join("notes");
        std::fs::create_dir_all(&plain).unwrap();
        let e = missing_in(&plain);
        assert!(e.contains("is missing; give a run's folder (`ddl train --out`"), "{e}");

        let shards = root.join("shards");
        std::fs::create_dir_all(&shards).unwrap();
        std::fs::write(shards.join("meta.json"), "{}").unwrap();
        let e = missing_in(&shards);
        assert!(e.contains("holds token shards (meta.json)") && e.contains("ddl train --data"), "{e}");

        let run = root.join("run");
        std::fs::create_dir_all(run.join(KEPT_DIR)).unwrap();
        std::fs::write(run.join("metrics.jsonl"), "").unwrap();
        let e = missing_in(&run);
        assert!(e.contains("saved no checkpoint") && e.contains("--overwrite"), "{e}");
        let e = missing_in(&run.join(KEPT_DIR));
        assert!(e.contains("kept checkpoints, and none is in it") && e.contains(&run.display().to_string()), "{e}");

        // A live process of this host holds the folder (this process's own lock counts as stale).
        let lock = format!("1 {}\n", super::super::lock::host_name());
        std::fs::write(run.join(super::super::lock::LOCK_FILE), lock).unwrap();
        let e = missing_in(&run);
        assert!(e.contains("a run is training in") && !e.contains("--overwrite"), "{e}");
    }
}
