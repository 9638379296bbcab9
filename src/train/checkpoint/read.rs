//! Reading a checkpoint's files: the checks of format, CRCs, shapes and values, each failure naming
//! the file and the remedy, and the tensors parsed into host memory or uploaded to a device.

use super::*;

/// For a missing `model.safetensors`: the folders beside it that hold one (a folder of runs
/// given for a run), said with the remedy; empty otherwise.
pub(super) fn runs_inside(missing: &Path) -> String {
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
    pub(super) const SHOWN: usize = 5;
    let more = if runs.len() > SHOWN { format!(" and {} more", runs.len() - SHOWN) } else { String::new() };
    runs.truncate(SHOWN);
    let holds = match experiment {
        true => format!(
            "'{}' is an experiment's folder: its runs are in '{}'",
            dir.parent().unwrap_or(&dir).display(),
            dir.display()
        ),
        // A run's checkpoints/ holds checkpoints, not runs (it said "holds runs in its folders").
        false if dir.file_name().is_some_and(|n| n == KEPT_DIR) && dir.parent().is_some_and(is_run) => {
            let run = dir.parent().unwrap_or(&dir).display().to_string();
            return format!(
                "; '{}' holds the kept checkpoints of the run in '{run}' ({}{more}): give one of them, e.g. '{}', or \
                 the run's folder '{run}' for its latest",
                dir.display(),
                runs.join(", "),
                dir.join(&runs[0]).display()
            );
        }
        false => format!("'{}' holds runs in its folders", dir.display()),
    };
    format!("; {holds} ({}{more}): give one of them, e.g. '{}'", runs.join(", "), dir.join(&runs[0]).display())
}

/// The remedy for a folder that holds no checkpoint and no run with one: what the folder is where
/// that is plain (token shards, a run that saved nothing, a kept-checkpoints folder), else what to
/// give instead.
pub(super) fn not_a_run(dir: &Path) -> String {
    let shown = dir.display();
    if dir.join("meta.json").is_file() {
        return format!(
            "; '{shown}' holds token shards (meta.json), not a model: train on them with `ddl train --data {word}`, or \
             evaluate a run on them with `ddl eval --checkpoint RUN --data {word}`",
            word = crate::shell_word(dir)
        );
    }
    // (Before its first log line a run's folder may hold only the lock.)
    #[cfg(feature = "native")]
    if let Some((pid, host)) = crate::train::lock::holder(dir) {
        return format!(
            "; a run is training in '{shown}' now (process {pid} on {host}) and has saved no checkpoint yet: wait for \
             its first one (train.checkpoint_every steps, or its end; Ctrl-C saves one)"
        );
    }
    if is_run(dir) {
        return format!(
            "; '{shown}' is a run that saved no checkpoint (it stopped before its first, train.checkpoint_every \
             steps): train it again with `ddl train --out {} --overwrite`",
            crate::shell_word(dir)
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

pub(super) fn read_file(path: &Path) -> Result<Vec<u8>, CheckpointError> {
    if !path.exists() {
        return Err(CheckpointError::MissingFile(path.to_path_buf()));
    }
    std::fs::read(path).map_err(|source| CheckpointError::Io { path: path.to_path_buf(), source })
}

/// The tensors of `st` for each prefix (in `layout`'s order) after checking names, shapes and
/// dtypes against `layout`, and that nothing else is in the file; `cfg` names the config they were
/// checked against in the errors of a model file.
pub(super) fn check_tensors<'b>(
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
pub(super) fn tensor_crc(name: &str) -> crc32fast::Hasher {
    let mut h = crc32fast::Hasher::new();
    h.update(name.as_bytes());
    h
}

/// Checks the tensors of a checkpoint file (`bytes`) against the CRC-32 its header records
/// ([`DATA_CRC`]; a file without one passes; the device loads hash as they upload, through
/// [`check_crc_sum`]). A mismatch is a byte changed since the file was written: a disk, a copy
/// or an edit damaged it.
#[cfg(feature = "native")]
pub(super) fn check_data_crc(
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
pub(super) fn check_crc_sum(path: &Path, bytes: &[u8], sum: u32) -> Result<(), CheckpointError> {
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

pub(super) fn deserialize<'b>(path: &Path, bytes: &'b [u8]) -> Result<safetensors::SafeTensors<'b>, CheckpointError> {
    safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| CheckpointError::Corrupt { path: path.to_path_buf(), msg: e.to_string() })
}

/// Decodes little-endian f32 bytes into `out` (same length in elements); the index of the first
/// non-finite value, if any.
pub(super) fn decode_f32(bytes: &[u8], out: &mut [f32]) -> Option<usize> {
    for (d, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    out.iter().position(|x| !x.is_finite())
}

/// Copies checked tensors into a flat buffer at their layout offsets, refusing non-finite values.
pub(super) fn copy_tensors(
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

pub(super) fn non_finite(path: &Path, name: &str, i: usize, x: f32) -> CheckpointError {
    CheckpointError::Content {
        path: path.to_path_buf(),
        msg: format!("tensor '{name}' holds a non-finite value ({x}) at element {i}"),
    }
}

pub(super) fn parse_tensors(
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
pub(super) fn upload_tensors(
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
pub(super) fn forget_pages(map: &memmap2::Mmap, part: &[u8]) {
    let start = part.as_ptr() as usize - map.as_ptr() as usize;
    crate::train::shards::forget_mapped(map, start, start + part.len(), 4096);
}

pub(super) fn metadata(path: &Path, bytes: &[u8]) -> Result<HashMap<String, String>, CheckpointError> {
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
pub(super) fn model_meta(mp: &Path, bytes: &[u8]) -> Result<(ModelConfig, Tokenizer, usize), CheckpointError> {
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
