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

mod files;
mod kept;
mod read;
use files::*;
pub use files::{
    free_bytes, probe_writable, remove_stale_temporaries, remove_stale_tmp, stale_temporaries, write_all_atomic,
    write_atomic, write_new_atomic,
};
pub use kept::{
    BEST_DIR, BEST_FILE, Best, KEPT_DIR, inside_kept, keep_step, kept_refusal, kept_run_of, kept_steps, mark_best,
    read_best, step_dir_name,
};
#[cfg(feature = "native")]
pub use kept::{kept_remedy_for, with_kept_for_reading, with_remedy_for_reading};
pub use read::parse_model;
use read::*;

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
    #[error("'{0}' is a file, not a checkpoint folder: {give}", give = folder_of_file(.0))]
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

/// The disk a save of a run's checkpoint needs beside what is there (both new files are written
/// whole before the old ones go): the parameters and AdamW's two moments in f32, the tokenizer in
/// both files' metadata, and 1 MiB for the rest of it. Returns (needed, parameters, moments).
pub fn save_bytes(params: usize, tok: &Tokenizer) -> (u64, u64, u64) {
    let (p, m) = (4 * params as u64, 8 * params as u64);
    (p + m + 2 * tok.to_json().len() as u64 + (1 << 20), p, m)
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

/// What to give for a file given as a checkpoint: the folder that holds it where it is one of a
/// checkpoint's files (`RUN/model.safetensors`, as `ls` shows it), else a run's folder.
fn folder_of_file(file: &Path) -> String {
    let own = [MODEL_FILE, "optim.safetensors", "config.toml", "data.json", "metrics.jsonl"];
    match file.parent() {
        Some(dir)
            if file.file_name().is_some_and(|n| own.iter().any(|f| n == *f)) && dir.join(MODEL_FILE).is_file() =>
        {
            let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
            format!("give the folder that holds it, '{}'", dir.display())
        }
        _ => "give the run's folder (the one that holds model.safetensors)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint's own file given for its folder names the folder to give (it said "the run's
    /// folder" without naming it).
    #[test]
    fn a_checkpoints_file_given_for_its_folder_names_the_folder() {
        let root = crate::testing::scratch_dir("checkpoint-file-given");
        std::fs::write(root.join(MODEL_FILE), "").unwrap();
        std::fs::write(root.join("notes.txt"), "").unwrap();
        let e = CheckpointError::NotADir(root.join(MODEL_FILE)).to_string();
        assert!(e.contains(&format!("give the folder that holds it, '{}'", root.display())), "{e}");
        let e = CheckpointError::NotADir(root.join("notes.txt")).to_string();
        assert!(e.contains("give the run's folder (the one that holds model.safetensors)"), "{e}");
        std::fs::remove_dir_all(&root).ok();
    }

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
        // With kept checkpoints in it: they are named as the run's checkpoints, not as runs.
        let kept = run.join(KEPT_DIR).join("step-00000002");
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::write(kept.join(MODEL_FILE), "").unwrap();
        let e = missing_in(&run.join(KEPT_DIR));
        assert!(
            e.contains(&format!("holds the kept checkpoints of the run in '{}' (step-00000002)", run.display())),
            "{e}"
        );
        assert!(e.contains("or the run's folder") && !e.contains("holds runs"), "{e}");
        std::fs::remove_dir_all(&kept).unwrap();

        // A live process of this host holds the folder (this process's own lock counts as stale).
        let lock = format!("1 {}\n", super::super::lock::host_name());
        std::fs::write(run.join(super::super::lock::LOCK_FILE), lock).unwrap();
        let e = missing_in(&run);
        assert!(e.contains("a run is training in") && !e.contains("--overwrite"), "{e}");
    }
}
