//! Headless training: data, schedule, the loop, evaluation, metrics, plots and checkpoints with
//! exact resume.

pub mod checkpoint;
pub mod collective;
pub mod config;
pub mod data;
#[cfg(feature = "mpi")]
pub mod distributed;
pub mod plot;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde_json::json;

use crate::gpu::Gpu;
use crate::kernels::adamw::AdamWConfig;
use crate::model::{Model, Objective, Parts, Program};
use crate::tokenizer::{CharTokenizer, Tokenizer};

pub use collective::{Collective, Single};
pub use config::{RunConfig, TrainConfig};

/// Why a run stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("output directory '{path}' is not writable: {source}")]
    OutDir { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Config(#[from] crate::model::ConfigError),
    #[error("{0}")]
    Settings(String),
    #[error(transparent)]
    Data(#[from] data::DataError),
    #[error("tokenizer = {setting:?} (expected \"char\" or the path of a tokenizer.json): {source}")]
    Tokenizer { setting: String, source: crate::tokenizer::TokenizerError },
    #[error(transparent)]
    Checkpoint(#[from] checkpoint::CheckpointError),
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error(
        "step {step}: the {what} is not finite ({value}); the run stopped without writing a checkpoint \
         (the last good one is kept). Lower the learning rate, or pass --skip-nonfinite to skip such steps"
    )]
    NonFinite { step: usize, what: &'static str, value: f32 },
    #[error("cannot write '{path}': {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "step {step}: saving the checkpoint failed: {source}. Any earlier checkpoint in '{}' is intact; free \
         disk space or fix the directory's permissions, then continue with `ddl train --resume {}`",
        dir.display(),
        dir.display()
    )]
    Save { step: usize, dir: PathBuf, source: checkpoint::CheckpointError },
    #[error("step {step}: {source}. {kept}")]
    GpuAtStep { step: usize, kept: String, source: crate::gpu::GpuError },
    /// A data-parallel run cannot go on; every rank meets this error at the same point.
    #[error("{msg}")]
    Distributed { rank: usize, size: usize, msg: String },
}

impl TrainError {
    /// Whether every rank of a data-parallel run stops with this error at the same point (a
    /// settings mismatch found at start-up, parameters that diverged, a non-finite step), so
    /// the ranks can wait for each other to report it before the job ends.
    pub fn on_every_rank(&self) -> bool {
        matches!(self, TrainError::Distributed { .. } | TrainError::NonFinite { .. })
    }
}

/// What a finished (or interrupted) run reports.
#[derive(Debug, Clone)]
pub struct Summary {
    pub step: usize,
    pub last_loss: f32,
    pub val_loss: Option<f64>,
    pub tokens_per_s: f64,
    pub interrupted: bool,
    pub losses: Vec<f32>,
}

/// How to run.
pub struct TrainOptions {
    pub run: RunConfig,
    /// Stop after this optimizer step (the schedule's length is `train.decay_steps`).
    pub steps: usize,
    pub out: PathBuf,
    /// Continue from the checkpoint in `out`.
    pub resume: bool,
    /// No progress bar or log lines (tests).
    pub quiet: bool,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Installs a Ctrl-C handler that asks the loop to save and stop (once per process).
pub fn install_ctrlc() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if INTERRUPTED.swap(true, Ordering::SeqCst) {
                // Second Ctrl-C: the user insists.
                std::process::exit(130);
            }
        });
    });
}

fn check_writable(dir: &Path) -> Result<(), TrainError> {
    let err = |source| TrainError::OutDir { path: dir.to_path_buf(), source };
    std::fs::create_dir_all(dir).map_err(err)?;
    let probe = dir.join(format!(".write-test-{}", std::process::id()));
    std::fs::write(&probe, b"ok").map_err(err)?;
    std::fs::remove_file(&probe).map_err(err)?;
    Ok(())
}

fn adamw_cfg(t: &TrainConfig, step: usize) -> AdamWConfig {
    AdamWConfig {
        lr: t.lr_at(step) as f32,
        beta1: t.beta1 as f32,
        beta2: t.beta2 as f32,
        eps: t.eps as f32,
        weight_decay: t.weight_decay as f32,
        grad_clip: t.grad_clip as f32,
        clip_eps: 1e-6,
        step: (step + 1) as u32,
    }
}

/// Mean validation loss over the fixed evaluation batches (label smoothing off).
pub fn evaluate(model: &Model, prog: &Program, data: &data::Dataset, t: &TrainConfig) -> Result<f64, TrainError> {
    evaluate_sharded(model, prog, data, t, &Single)
}

/// [`evaluate`] with the batches shared out over the ranks of `comm` (batch i on rank i mod N)
/// and the sums reduced: every rank gets the same value.
pub fn evaluate_sharded(
    model: &Model,
    prog: &Program,
    data: &data::Dataset,
    t: &TrainConfig,
    comm: &dyn Collective,
) -> Result<f64, TrainError> {
    let mut sum = 0.0f64;
    let mut count = 0.0f64;
    for i in (comm.rank()..t.eval_batches).step_by(comm.size()) {
        let (x, y) = data.val_batch(t.seed, i, prog.b(), prog.t());
        prog.set_batch(model, &x, &y)?;
        let (loss, n) = model.eval_loss(prog)?;
        sum += loss as f64 * n as f64;
        count += n as f64;
    }
    if comm.is_distributed() {
        let mut sc = [sum, count];
        comm.all_reduce_sum_f64(&mut sc, "validation loss");
        (sum, count) = (sc[0], sc[1]);
    }
    Ok(if count > 0.0 { sum / count } else { f64::NAN })
}

/// Mean β of every sublayer (DDL variants) of the last forward pass of `prog`.
pub fn beta_means(model: &Model, prog: &Program) -> Result<Vec<f64>, TrainError> {
    let mut out = Vec::new();
    for w in prog.acts().writes() {
        let b = w.beta.read_f32(&model.gpu)?;
        out.push(b.iter().map(|&x| x as f64).sum::<f64>() / b.len().max(1) as f64);
    }
    Ok(out)
}

fn append_line(path: &Path, line: &serde_json::Value) -> Result<(), TrainError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| TrainError::Io { path: path.to_path_buf(), source })?;
    writeln!(f, "{line}").map_err(|source| TrainError::Io { path: path.to_path_buf(), source })
}

/// Reads `metrics.jsonl` back into the loss plot.
pub fn plot_metrics(dir: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).map_err(|e| e.to_string())?;
    let mut train = Vec::new();
    let mut val = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let step = v["step"].as_f64().unwrap_or(0.0);
        if let Some(l) = v["val_loss"].as_f64() {
            val.push((step, l));
        } else if let Some(l) = v["loss"].as_f64() {
            train.push((step, l));
        }
    }
    plot::line_plot(
        &dir.join("loss.png"),
        "loss",
        "step",
        "cross-entropy (nats)",
        &[
            plot::Series { name: "train".into(), points: train },
            plot::Series { name: "validation".into(), points: val },
        ],
    )
}

struct Progress {
    bar: Option<indicatif::ProgressBar>,
    plain: bool,
}

impl Progress {
    fn new(quiet: bool, start: usize, end: usize) -> Progress {
        if quiet {
            return Progress { bar: None, plain: false };
        }
        if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(end as u64);
            bar.set_position(start as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} step {pos}/{len} {msg} eta {eta}",
                )
                .unwrap(),
            );
            Progress { bar: Some(bar), plain: false }
        } else {
            Progress { bar: None, plain: true }
        }
    }

    fn update(&self, step: usize, msg: String, log: bool) {
        if let Some(b) = &self.bar {
            b.set_position(step as u64);
            b.set_message(msg);
        } else if self.plain && log {
            eprintln!("step {step} {msg}");
        }
    }

    fn println(&self, s: String) {
        if let Some(b) = &self.bar {
            b.println(s);
        } else if self.plain {
            eprintln!("{s}");
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// The tokenizer a run's `tokenizer` setting names: `"char"` builds one from the corpus text,
/// anything else is the path of a tokenizer.json.
pub fn build_tokenizer(setting: &str, corpus_text: &str) -> Result<Tokenizer, TrainError> {
    if setting == "char" {
        return Ok(Tokenizer::Char(CharTokenizer::from_corpus(corpus_text).map_err(data::DataError::from)?));
    }
    Tokenizer::load(Path::new(setting)).map_err(|source| TrainError::Tokenizer { setting: setting.to_string(), source })
}

/// How a data-parallel run exchanges gradients (ignored by a single process).
#[derive(Debug, Clone)]
pub struct DistOptions {
    /// Gradients travel in buckets of this many MiB: bucket i + 1 is read back from the GPU (on a
    /// helper thread) while bucket i is all-reduced and written back. 0 = one bucket, no overlap.
    pub bucket_mib: f64,
    /// Also overlap with the backward pass: the last micro-batch's backward is submitted block by
    /// block, and each block's gradients are all-reduced while the GPU computes the next block.
    pub overlap_backward: bool,
}

impl Default for DistOptions {
    fn default() -> Self {
        DistOptions { bucket_mib: 1.0, overlap_backward: false }
    }
}

impl DistOptions {
    /// Elements per bucket for a model of `total` parameters.
    pub fn bucket_elems(&self, total: usize) -> usize {
        if self.bucket_mib > 0.0 {
            ((self.bucket_mib * (1 << 20) as f64 / 4.0) as usize).clamp(1, total.max(1))
        } else {
            total.max(1)
        }
    }
}

/// Wall times of one step's gradient exchange, in seconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommTimes {
    /// Waiting for the slowest rank to finish its micro-batches (a barrier before the exchange,
    /// so that `allreduce` measures the transfer, not the load imbalance).
    pub wait: f64,
    /// The exchange after the barrier as the step sees it (what it adds to the step).
    pub total: f64,
    /// Reading gradients back from the GPU (on the helper thread when bucketed).
    pub readback: f64,
    /// Inside `MPI_Allreduce`.
    pub allreduce: f64,
    /// Queueing the summed gradients back to the GPU.
    pub write: f64,
}

impl std::ops::AddAssign for CommTimes {
    fn add_assign(&mut self, o: CommTimes) {
        self.wait += o.wait;
        self.total += o.total;
        self.readback += o.readback;
        self.allreduce += o.allreduce;
        self.write += o.write;
    }
}

/// Replaces every rank's gradients by their sum over the ranks, bucket by bucket.
fn reduce_gradients(model: &Model, comm: &dyn Collective, bucket: usize) -> Result<CommTimes, TrainError> {
    let tb = Instant::now();
    comm.barrier("gradient exchange (waiting for every rank's micro-batches)");
    let mut times = CommTimes { wait: tb.elapsed().as_secs_f64(), ..CommTimes::default() };
    let t0 = Instant::now();
    let total = model.layout.total;
    let ranges: Vec<(usize, usize)> = (0..total).step_by(bucket.max(1)).map(|o| (o, bucket.min(total - o))).collect();
    let mut recv = Vec::new();
    let mut exchange = |offset: usize, send: &[f32], times: &mut CommTimes| -> Result<(), TrainError> {
        recv.resize(send.len(), 0.0);
        let ta = Instant::now();
        comm.all_reduce_sum_f32(send, &mut recv, "gradient all-reduce");
        times.allreduce += ta.elapsed().as_secs_f64();
        let tw = Instant::now();
        model.grads.write_f32_range(&model.gpu, offset, &recv)?;
        times.write += tw.elapsed().as_secs_f64();
        Ok(())
    };
    if ranges.len() <= 1 {
        let tr = Instant::now();
        let send = model.grads.read_f32_range(&model.gpu, 0, total)?;
        times.readback += tr.elapsed().as_secs_f64();
        exchange(0, &send, &mut times)?;
    } else {
        type Bucket = Result<(Vec<f32>, f64), crate::gpu::GpuError>;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Bucket>(1);
        let ranges = &ranges;
        std::thread::scope(|s| -> Result<(), TrainError> {
            // Owned here so that an early return drops it and the reader stops.
            let rx = rx;
            s.spawn(move || {
                for &(o, n) in ranges {
                    let tr = Instant::now();
                    let r = model.grads.read_f32_range(&model.gpu, o, n).map(|v| (v, tr.elapsed().as_secs_f64()));
                    let failed = r.is_err();
                    if tx.send(r).is_err() || failed {
                        break;
                    }
                }
            });
            for &(o, _) in ranges {
                let (send, secs) = rx.recv().map_err(|_| {
                    TrainError::Settings("the gradient readback thread stopped unexpectedly".to_string())
                })??;
                times.readback += secs;
                exchange(o, &send, &mut times)?;
            }
            Ok(())
        })?;
    }
    times.total = t0.elapsed().as_secs_f64();
    Ok(times)
}

/// All-reduces (sum) `send` in pieces of `bucket` elements and queues the result into the
/// gradients at `offset`.
fn exchange_range(
    model: &Model,
    comm: &dyn Collective,
    bucket: usize,
    offset: usize,
    send: &[f32],
    times: &mut CommTimes,
) -> Result<(), TrainError> {
    let mut recv = vec![0.0f32; send.len().min(bucket.max(1))];
    for (i, piece) in send.chunks(bucket.max(1)).enumerate() {
        let r = &mut recv[..piece.len()];
        let ta = Instant::now();
        comm.all_reduce_sum_f32(piece, r, "gradient all-reduce");
        times.allreduce += ta.elapsed().as_secs_f64();
        let tw = Instant::now();
        model.grads.write_f32_range(&model.gpu, offset + i * bucket.max(1), r)?;
        times.write += tw.elapsed().as_secs_f64();
    }
    Ok(())
}

/// The last micro-batch of a rank with the gradient exchange overlapping its backward pass:
/// zeroing (`zero`: on a rank's first micro-batch), forward and the backward up to the end of the
/// last block are submitted, then each later block's backward is submitted before the previous
/// block's gradients — complete by then — are all-reduced, so the GPU computes while MPI
/// communicates. The parameters outside the blocks (embedding, final norm, ...) are exchanged
/// after the embedding backward.
fn backward_with_exchange(
    model: &Model,
    prog: &Program,
    zero: bool,
    comm: &dyn Collective,
    bucket: usize,
) -> Result<CommTimes, TrainError> {
    let mut times = CommTimes::default();
    let mut pending: Option<(usize, Vec<f32>)> = None;
    let mut covered = Vec::new();
    // Zeroing (on a rank's only micro-batch) and the forward go with the first segment.
    let mut head: Vec<&[crate::gpu::Op]> = Vec::new();
    if zero {
        head.push(prog.zero_ops());
    }
    head.push(prog.forward_ops());
    for (seg, block) in prog.backward_segments() {
        let mut r = crate::gpu::Recorder::new(&model.gpu);
        for ops in head.drain(..).chain([seg]) {
            r.ops(ops);
        }
        r.submit()?;
        if let Some((off, send)) = pending.take() {
            exchange_range(model, comm, bucket, off, &send, &mut times)?;
        }
        let Some((off, len)) = block.and_then(|l| model.layout.block_range(l)) else { continue };
        let tr = Instant::now();
        pending = Some((off, model.grads.read_f32_range(&model.gpu, off, len)?));
        times.readback += tr.elapsed().as_secs_f64();
        covered.push((off, len));
    }
    // What the blocks do not cover: embedding, expansion, readout, final norm.
    covered.sort();
    let mut rest = Vec::new();
    let mut at = 0;
    for &(off, len) in &covered {
        if off > at {
            rest.push((at, off - at));
        }
        at = at.max(off + len);
    }
    if at < model.layout.total {
        rest.push((at, model.layout.total - at));
    }
    for (off, len) in rest {
        let tr = Instant::now();
        let send = model.grads.read_f32_range(&model.gpu, off, len)?;
        times.readback += tr.elapsed().as_secs_f64();
        exchange_range(model, comm, bucket, off, &send, &mut times)?;
    }
    // Readbacks here include waiting for the GPU to finish each block: only the communication
    // is counted as exchange time (compare step times to see what the overlap gains).
    times.total = times.allreduce + times.write;
    Ok(times)
}

/// Compares every rank's values of the settings that must agree (exchanged at start-up), and
/// names what differs on every rank.
#[allow(clippy::too_many_arguments)]
fn handshake(
    comm: &dyn Collective,
    run_toml: &str,
    params: usize,
    tokens: usize,
    corpus_key: &str,
    start: usize,
    steps: usize,
    bucket: usize,
    overlap_backward: bool,
    params_digest: u64,
) -> Result<(), String> {
    let names = [
        "the run config digest",
        "the parameter count",
        "the corpus token count",
        "the corpus digest (text and tokenizer)",
        "the start step (checkpoint)",
        "--steps",
        "the gradient bucket (--mpi-bucket-mib, in elements)",
        "the overlap with the backward pass (--mpi-overlap)",
        "the initial parameter digest",
    ];
    let mine = [
        collective::digest64(run_toml.as_bytes()),
        params as u64,
        tokens as u64,
        collective::digest64(corpus_key.as_bytes()),
        start as u64,
        steps as u64,
        bucket as u64,
        overlap_backward as u64,
        params_digest,
    ];
    let k = mine.len();
    let all = comm.all_gather_u64(&mine, "start-up handshake");
    let (rank, size) = (comm.rank(), comm.size());
    let mut problems = Vec::new();
    let config_differs: Vec<usize> = (1..size).filter(|&r| all[r * k] != all[0]).collect();
    if !config_differs.is_empty() {
        let mut theirs = run_toml.as_bytes().to_vec();
        comm.broadcast_bytes(&mut theirs, "start-up config exchange");
        let msg = format!("the run config of rank(s) {config_differs:?} differs from rank 0's");
        if config_differs.contains(&rank) {
            let diff = collective::toml_diff(run_toml, &String::from_utf8_lossy(&theirs), 6);
            problems.push(format!("{msg}; here: {}", diff.join(", ")));
        } else {
            problems.push(format!("{msg} (the differing settings are printed by those ranks)"));
        }
    }
    for (f, name) in names.iter().enumerate().skip(1) {
        if config_differs.is_empty() || f != names.len() - 1 {
            let values: Vec<u64> = (0..size).map(|r| all[r * k + f]).collect();
            if values.iter().any(|&v| v != values[0]) {
                let shown: Vec<String> = values.iter().enumerate().map(|(r, v)| format!("rank {r}: {v}")).collect();
                problems.push(format!("{name} differs ({})", shown.join(", ")));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the ranks were started with different settings, so data-parallel training cannot start: {}",
            problems.join("; ")
        ))
    }
}

/// Every rank's parameter digest; an error when they are not all equal.
fn params_in_sync(model: &Model, comm: &dyn Collective, step: usize) -> Result<Vec<u64>, TrainError> {
    let d = collective::digest_f32(&model.read_params()?);
    let all = comm.all_gather_u64(&[d], "parameter digest check");
    if all.iter().any(|&x| x != all[0]) {
        let shown: Vec<String> = all.iter().enumerate().map(|(r, x)| format!("rank {r}: {x:016x}")).collect();
        return Err(TrainError::Distributed {
            rank: comm.rank(),
            size: comm.size(),
            msg: format!(
                "after step {step} the parameters are no longer identical on all ranks ({}); \
                 the all-reduce did not give every rank the same sum",
                shown.join(", ")
            ),
        });
    }
    Ok(all)
}

/// Trains (or resumes) a model and writes everything into `opts.out`.
pub fn train(gpu: Arc<Gpu>, opts: TrainOptions) -> Result<Summary, TrainError> {
    train_with(gpu, opts, &Single, &DistOptions::default())
}

/// [`train`] as one rank of a data-parallel run: the micro-batches of each global batch
/// (`batch_size × grad_accum` sequences, the same a single process draws) are shared out over the
/// ranks (micro-batch m on rank m mod N), the gradients summed with `comm`, and every rank applies
/// the same AdamW step. Rank 0 alone writes config, metrics, plots and checkpoints.
pub fn train_with(
    gpu: Arc<Gpu>,
    opts: TrainOptions,
    comm: &dyn Collective,
    dist: &DistOptions,
) -> Result<Summary, TrainError> {
    let (rank, size) = (comm.rank(), comm.size());
    let lead = rank == 0;
    let distributed = comm.is_distributed();
    let derr = |msg: String| TrainError::Distributed { rank, size, msg };
    let out = opts.out.clone();
    if lead {
        check_writable(&out)?;
        checkpoint::remove_stale_tmp(&out);
    }
    let mut run = opts.run.clone();
    let (mut model, tok, start, elapsed0) = if opts.resume {
        let ck = checkpoint::load(&out, true)?;
        let (m, v, state, run_cfg) = ck.optim.expect("loaded with optimizer state");
        if !run_cfg.is_empty() {
            let saved: RunConfig = toml::from_str(&run_cfg).map_err(|e| {
                TrainError::Settings(format!(
                    "{}: the saved run config is invalid: {e}",
                    out.join(checkpoint::OPTIM_FILE).display()
                ))
            })?;
            // The saved settings, except the one flag that may change between invocations.
            let skip = run.train.skip_nonfinite;
            run = saved;
            run.train.skip_nonfinite |= skip;
        }
        if run.model != ck.config {
            return Err(TrainError::Settings(format!(
                "{}: the checkpoint's model config differs from its run config",
                out.display()
            )));
        }
        let model = Model::with_params(gpu.clone(), ck.config.clone(), &ck.params)?;
        model.adam_m.write_f32(&gpu, &m)?;
        model.adam_v.write_f32(&gpu, &v)?;
        (model, ck.tokenizer, state.step, state.elapsed)
    } else {
        // Settings first: a bad value is reported before the corpus is read and tokenised.
        run.validate()?;
        let text = data::read_corpus(Path::new(&run.corpus))?;
        let tok = build_tokenizer(&run.tokenizer, &text)?;
        run.model.vocab_size = tok.vocab_size();
        run.validate()?;
        let model = Model::new(gpu.clone(), run.model.clone(), run.train.seed)?;
        (model, tok, 0, 0.0)
    };
    run.validate()?;
    // (The variant and shape were validated with the settings; what is left is the adapter.)
    model
        .set_state_f16(run.train.state_f16)
        .map_err(|e| TrainError::Settings(format!("train.state_f16 (--f16-state): {e}")))?;
    let t = run.train.clone();
    let run_toml = toml::to_string(&run).map_err(|e| TrainError::Settings(e.to_string()))?;
    if lead {
        let cfg_path = out.join("config.toml");
        checkpoint::write_atomic(&cfg_path, run_toml.as_bytes())
            .map_err(|source| TrainError::Io { path: cfg_path, source })?;
    }

    let text = data::read_corpus(Path::new(&run.corpus))?;
    let tokens = data::tokens_cached(&text, &tok)?;
    let data = data::Dataset::new(tokens, t.val_fraction, t.seq_len)?;

    let bucket = dist.bucket_elems(model.layout.total);
    if distributed {
        let digest = collective::digest_f32(&model.read_params()?);
        // The token cache is named by a digest of the corpus text and the tokenizer.
        let corpus_key = data.tokens.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        handshake(
            comm,
            &run_toml,
            model.layout.total,
            data.tokens.len(),
            &corpus_key,
            start,
            opts.steps,
            bucket,
            dist.overlap_backward,
            digest,
        )
        .map_err(derr)?;
        if !t.grad_accum.is_multiple_of(size) {
            return Err(derr(format!(
                "train.grad_accum = {} is not a multiple of the {size} ranks: each global batch (batch_size × \
                 grad_accum = {} sequences, as one process would draw them) is shared out by micro-batches, rank r \
                 taking micro-batches r, r + {size}, …; set --set train.grad_accum={} (or another multiple of {size})",
                t.grad_accum,
                t.batch_size * t.grad_accum,
                t.grad_accum.div_ceil(size) * size
            )));
        }
    }

    let opt0 = adamw_cfg(&t, start);
    // Activations that do not fit the adapter: say which settings make them smaller.
    let hint = |e: crate::gpu::GpuError| match e {
        crate::gpu::GpuError::TooLarge { .. } => TrainError::Settings(format!(
            "{e}. The activations of a batch of {} × {} tokens do not fit this adapter: lower \
             train.batch_size or train.seq_len (train.grad_accum keeps the global batch)",
            t.batch_size, t.seq_len
        )),
        e => TrainError::Gpu(e),
    };
    let prog = model
        .program_with(
            t.batch_size,
            t.seq_len,
            &opt0,
            Objective { label_smoothing: run.model.label_smoothing as f32, loss_scale: 1.0 / t.grad_accum as f32 },
        )
        .map_err(hint)?;
    let eval_prog = model.forward_program(t.batch_size, t.seq_len).map_err(hint)?;
    let metrics = out.join("metrics.jsonl");
    if lead && !opts.resume {
        let _ = std::fs::remove_file(&metrics);
    }
    install_ctrlc();
    let progress = Progress::new(opts.quiet || !lead, start, opts.steps);
    if distributed {
        progress.println(format!(
            "data-parallel over {}: each rank computes {} of the {} micro-batches of a step; {:.2} MB of gradients \
             all-reduced per step in {} bucket(s)",
            comm.describe(),
            t.grad_accum / size,
            t.grad_accum,
            4.0 * model.layout.total as f64 / 1e6,
            model.layout.total.div_ceil(bucket)
        ));
    }
    let tokens_per_step = (t.batch_size * t.seq_len * t.grad_accum) as f64;
    let t0 = Instant::now();
    let mut last_loss = f32::NAN;
    let mut val_loss = None;
    let mut losses = Vec::new();
    let mut step = start;
    let mut interrupted = false;
    let save = |model: &Model, step: usize, elapsed: f64| -> Result<(), TrainError> {
        if !lead {
            return Ok(());
        }
        let p = model.read_params()?;
        let m = model.adam_m.read_f32(&model.gpu)?;
        let v = model.adam_v.read_f32(&model.gpu)?;
        let state = checkpoint::RunState { step, elapsed };
        checkpoint::save(&out, &model.cfg, &tok, &model.layout, &p, Some((&m, &v, &state, &run_toml)))
            .map_err(|source| TrainError::Save { step, dir: out.clone(), source })
    };
    let append = |line: &serde_json::Value| if lead { append_line(&metrics, line) } else { Ok(()) };
    // This rank's micro-batches of every step.
    let micros: Vec<usize> = (rank..t.grad_accum).step_by(size).collect();
    let mut comm_sum = CommTimes::default();
    let (mut timed_steps, mut timed_s) = (0usize, 0.0f64);
    let mut stop = false;
    let mut tok_s = 0.0;
    let mut last_saved = opts.resume.then_some(start);
    let fault_lost_at: Option<usize> = std::env::var("DDL_FAULT_DEVICE_LOST_STEP").ok().and_then(|v| v.parse().ok());
    // A GPU failure during a step (device lost, out of memory): say which step, and what is kept.
    let at_step = |step: usize, saved: Option<usize>| {
        let out = out.clone();
        move |source: crate::gpu::GpuError| TrainError::GpuAtStep {
            step,
            kept: match saved {
                Some(s) => format!(
                    "The checkpoint of step {s} in '{}' is intact: `ddl train --resume {}` continues from it",
                    out.display(),
                    out.display()
                ),
                None => "No checkpoint had been written yet".to_string(),
            },
            source,
        }
    };
    while step < opts.steps {
        if stop || (!distributed && INTERRUPTED.load(Ordering::SeqCst)) {
            interrupted = true;
            break;
        }
        comm.set_step(step);
        let ts = Instant::now();
        let opt = adamw_cfg(&t, step);
        // One submit per micro-batch. A single process finishes with its last one: the gradient
        // norm and AdamW, which skips its update on the GPU when the norm is not finite (so a bad
        // step never reaches the parameters). Ranks first sum their gradients.
        if fault_lost_at == Some(step + 1) {
            gpu.simulate_device_loss();
        }
        let ctx = at_step(step + 1, last_saved);
        model.set_optimizer_step(&prog, &opt).map_err(ctx.clone())?;
        let mut loss_sum = 0.0f64;
        let mut exchanged = None;
        // (loss, valid targets, Σ g²) of the step's last submit.
        let mut stats = Vec::new();
        for (i, &micro) in micros.iter().enumerate() {
            let (x, y) = data.train_batch(t.seed, step, micro, t.batch_size, t.seq_len);
            prog.set_batch(&model, &x, &y).map_err(ctx.clone())?;
            let last = i + 1 == micros.len();
            stats = if distributed && last && dist.overlap_backward {
                exchanged = Some(backward_with_exchange(&model, &prog, i == 0, comm, bucket)?);
                prog.stats().read_f32(&gpu).map_err(ctx.clone())?
            } else {
                let optimize = last && !distributed;
                // One submit per micro-batch, its statistics read back in the same submit.
                let parts =
                    Parts { zero: i == 0, forward: true, backward: true, finish: optimize, optimizer: optimize };
                prog.run(&model, parts).map_err(ctx.clone())?
            };
            loss_sum += stats[0] as f64;
        }
        let mut comm_s = None;
        if distributed {
            let c = match exchanged {
                Some(c) => c,
                None => reduce_gradients(&model, comm, bucket)?,
            };
            let mut red = [loss_sum, if INTERRUPTED.load(Ordering::SeqCst) { 1.0 } else { 0.0 }];
            comm.all_reduce_sum_f64(&mut red, "loss all-reduce");
            loss_sum = red[0];
            stop = red[1] > 0.0;
            stats = prog.run(&model, Parts::FINISH_STEP).map_err(ctx.clone())?;
            comm_s = Some((c.wait, c.total));
            if step > start {
                comm_sum += c;
            }
        }
        // The step's loss: the mean of its micro-batches' mean losses (what the gradient is of).
        let loss = (loss_sum / t.grad_accum as f64) as f32;
        // A non-finite norm² is reported as it is (NaN.max(0) would read as 0).
        let gnorm = if stats[2].is_finite() { stats[2].max(0.0).sqrt() } else { stats[2] };
        let finite = loss.is_finite() && stats[2].is_finite();
        if !finite && !t.skip_nonfinite {
            progress.finish();
            let (what, value) = if loss.is_finite() { ("gradient norm", gnorm) } else { ("loss", loss) };
            return Err(TrainError::NonFinite { step: step + 1, what, value });
        }
        step += 1;
        last_loss = loss;
        losses.push(loss);
        let dt = ts.elapsed().as_secs_f64();
        if step > start + 1 {
            (timed_steps, timed_s) = (timed_steps + 1, timed_s + dt);
        }
        tok_s = tokens_per_step / dt.max(1e-9);
        let log = step % t.log_every == 0 || step == opts.steps;
        let mut line = json!({
            "step": step, "lr": opt.lr, "loss": loss, "grad_norm": gnorm, "tok_per_s": tok_s,
            "elapsed": elapsed0 + t0.elapsed().as_secs_f64(), "skipped": !finite,
        });
        if let Some((wait, exchange)) = comm_s {
            line["comm_wait_s"] = json!(wait);
            line["comm_s"] = json!(exchange);
        }
        if lead && run.model.variant.is_ddl() {
            // Every step, from the step's one readback (the last micro-batch's forward).
            line["beta_mean"] = json!(crate::model::beta_means_of(&stats, prog.b() * prog.t()));
        }
        append(&line)?;
        progress.update(step, format!("loss {loss:.4} |g| {gnorm:.3} lr {:.2e} {tok_s:.0} tok/s", opt.lr), log);
        let checkpoint_now = t.checkpoint_every > 0 && step % t.checkpoint_every == 0 && step < opts.steps;
        if distributed && (step == start + 1 || checkpoint_now) {
            params_in_sync(&model, comm, step)?;
        }
        if t.eval_every > 0 && step % t.eval_every == 0 && step < opts.steps {
            let vl = evaluate_sharded(&model, &eval_prog, &data, &t, comm)?;
            val_loss = Some(vl);
            append(&json!({"step": step, "val_loss": vl, "val_ppl": vl.exp()}))?;
            progress.println(format!("step {step}: val loss {vl:.4} (perplexity {:.2})", vl.exp()));
            if lead && let Err(e) = plot_metrics(&out) {
                progress.println(format!("warning: could not write the loss plot: {e}"));
            }
        }
        if checkpoint_now {
            save(&model, step, elapsed0 + t0.elapsed().as_secs_f64())?;
            last_saved = Some(step);
        }
    }
    progress.finish();
    if !interrupted && step > start {
        let vl = evaluate_sharded(&model, &eval_prog, &data, &t, comm)?;
        val_loss = Some(vl);
        append(&json!({"step": step, "val_loss": vl, "val_ppl": vl.exp()}))?;
    }
    save(&model, step, elapsed0 + t0.elapsed().as_secs_f64())?;
    if distributed {
        let digests = params_in_sync(&model, comm, step)?;
        if lead {
            let n = timed_steps.max(1) as f64;
            let report = json!({
                "ranks": size,
                "transport": comm.describe(),
                "step": step,
                "params_digest_by_rank": digests.iter().map(|d| format!("{d:016x}")).collect::<Vec<_>>(),
                "allreduce_bytes_per_step": 4 * model.layout.total,
                "bucket_elems": bucket,
                "overlap_backward": dist.overlap_backward,
                "buckets_per_step": model.layout.total.div_ceil(bucket),
                "timed_steps": timed_steps,
                "mean_step_s": timed_s / n,
                "mean_wait_s": comm_sum.wait / n,
                "mean_exchange_s": comm_sum.total / n,
                "mean_readback_s": comm_sum.readback / n,
                "mean_allreduce_s": comm_sum.allreduce / n,
                "mean_write_s": comm_sum.write / n,
                "exchange_share_of_step": if timed_s > 0.0 { comm_sum.total / timed_s } else { 0.0 },
            });
            let path = out.join("distributed.json");
            let text = serde_json::to_string_pretty(&report).map_err(|e| TrainError::Settings(e.to_string()))?;
            checkpoint::write_atomic(&path, text.as_bytes()).map_err(|source| TrainError::Io { path, source })?;
        }
    }
    if lead && let Err(e) = plot_metrics(&out) {
        eprintln!("warning: could not write the loss plot: {e}");
    }
    Ok(Summary { step, last_loss, val_loss, tokens_per_s: tok_s, interrupted, losses })
}
