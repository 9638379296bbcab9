//! Headless training: data, schedule, the loop, evaluation, metrics, plots and checkpoints with
//! exact resume.

pub mod checkpoint;
pub mod config;
pub mod data;
pub mod plot;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde_json::json;

use crate::gpu::Gpu;
use crate::kernels::adamw::AdamWConfig;
use crate::model::{Model, Program};
use crate::tokenizer::{CharTokenizer, Tokenizer};

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
    let mut sum = 0.0f64;
    let mut count = 0.0f64;
    for i in 0..t.eval_batches {
        let (x, y) = data.val_batch(t.seed, i, prog.b, prog.t);
        prog.set_batch(model, &x, &y)?;
        let (loss, n) = model.eval_loss(prog)?;
        sum += loss as f64 * n as f64;
        count += n as f64;
    }
    Ok(if count > 0.0 { sum / count } else { f64::NAN })
}

/// Mean β of every sublayer (DDL variants) of the last forward pass of `prog`.
pub fn beta_means(model: &Model, prog: &Program) -> Result<Vec<f64>, TrainError> {
    let mut out = Vec::new();
    for blk in &prog.subs {
        for s in blk {
            if let Some(w) = &s.write {
                let b = w.beta.read_f32(&model.gpu)?;
                out.push(b.iter().map(|&x| x as f64).sum::<f64>() / b.len().max(1) as f64);
            }
        }
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

/// Trains (or resumes) a model and writes everything into `opts.out`.
pub fn train(gpu: Arc<Gpu>, opts: TrainOptions) -> Result<Summary, TrainError> {
    let out = opts.out.clone();
    check_writable(&out)?;
    checkpoint::remove_stale_tmp(&out);
    let mut run = opts.run.clone();
    let (model, tok, start, elapsed0) = if opts.resume {
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
    let t = run.train.clone();
    let run_toml = toml::to_string(&run).map_err(|e| TrainError::Settings(e.to_string()))?;
    let cfg_path = out.join("config.toml");
    checkpoint::write_atomic(&cfg_path, run_toml.as_bytes())
        .map_err(|source| TrainError::Io { path: cfg_path, source })?;

    let text = data::read_corpus(Path::new(&run.corpus))?;
    let tokens = data::tokens_cached(&text, &tok)?;
    let data = data::Dataset::new(tokens, t.val_fraction, t.seq_len)?;

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
        .program_with(t.batch_size, t.seq_len, &opt0, run.model.label_smoothing as f32, 1.0 / t.grad_accum as f32)
        .map_err(hint)?;
    let eval_prog = model.program_with(t.batch_size, t.seq_len, &opt0, 0.0, 1.0).map_err(hint)?;
    let metrics = out.join("metrics.jsonl");
    if !opts.resume {
        let _ = std::fs::remove_file(&metrics);
    }
    install_ctrlc();
    let progress = Progress::new(opts.quiet, start, opts.steps);
    let tokens_per_step = (t.batch_size * t.seq_len * t.grad_accum) as f64;
    let t0 = Instant::now();
    let mut last_loss = f32::NAN;
    let mut val_loss = None;
    let mut losses = Vec::new();
    let mut step = start;
    let mut interrupted = false;
    let save = |model: &Model, step: usize, elapsed: f64| -> Result<(), TrainError> {
        let p = model.read_params()?;
        let m = model.adam_m.read_f32(&model.gpu)?;
        let v = model.adam_v.read_f32(&model.gpu)?;
        let state = checkpoint::RunState { step, elapsed };
        checkpoint::save(&out, &model.cfg, &tok, &model.layout, &p, Some((&m, &v, &state, &run_toml)))
            .map_err(|source| TrainError::Save { step, dir: out.clone(), source })
    };
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
        if INTERRUPTED.load(Ordering::SeqCst) {
            interrupted = true;
            break;
        }
        let ts = Instant::now();
        let opt = adamw_cfg(&t, step);
        // One submit per micro-batch; the last one also runs AdamW, which skips its update on the
        // GPU when the gradient norm is not finite (so a bad step never reaches the parameters).
        if fault_lost_at == Some(step + 1) {
            gpu.simulate_device_loss();
        }
        let ctx = at_step(step + 1, last_saved);
        model.set_optimizer_step(&prog, &opt).map_err(ctx.clone())?;
        for micro in 0..t.grad_accum {
            let (x, y) = data.train_batch(t.seed, step, micro, t.batch_size, t.seq_len);
            prog.set_batch(&model, &x, &y).map_err(ctx.clone())?;
            let first: &[crate::gpu::Op] = if micro == 0 { &prog.zero } else { &[] };
            let last = micro + 1 == t.grad_accum;
            let finish: &[crate::gpu::Op] = if last { &prog.finish } else { &[] };
            model
                .run(&[first, &prog.forward, &prog.backward, finish], if last { Some(&prog.optimizer) } else { None })
                .map_err(ctx.clone())?;
        }
        let stats = prog.stats.read_f32(&gpu).map_err(ctx)?;
        // A non-finite norm² is reported as it is (NaN.max(0) would read as 0).
        let gnorm = if stats[2].is_finite() { stats[2].max(0.0).sqrt() } else { stats[2] };
        let loss = stats[0];
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
        tok_s = tokens_per_step / dt.max(1e-9);
        let log = step % t.log_every == 0 || step == opts.steps;
        let mut line = json!({
            "step": step, "lr": opt.lr, "loss": loss, "grad_norm": gnorm, "tok_per_s": tok_s,
            "elapsed": elapsed0 + t0.elapsed().as_secs_f64(), "skipped": !finite,
        });
        if log && run.model.variant.is_ddl() {
            line["beta_mean"] = json!(beta_means(&model, &prog)?);
        }
        append_line(&metrics, &line)?;
        progress.update(step, format!("loss {loss:.4} |g| {gnorm:.3} lr {:.2e} {tok_s:.0} tok/s", opt.lr), log);
        if t.eval_every > 0 && step % t.eval_every == 0 && step < opts.steps {
            let vl = evaluate(&model, &eval_prog, &data, &t)?;
            val_loss = Some(vl);
            append_line(&metrics, &json!({"step": step, "val_loss": vl, "val_ppl": vl.exp()}))?;
            progress.println(format!("step {step}: val loss {vl:.4} (perplexity {:.2})", vl.exp()));
            if let Err(e) = plot_metrics(&out) {
                progress.println(format!("warning: could not write the loss plot: {e}"));
            }
        }
        if t.checkpoint_every > 0 && step % t.checkpoint_every == 0 && step < opts.steps {
            save(&model, step, elapsed0 + t0.elapsed().as_secs_f64())?;
            last_saved = Some(step);
        }
    }
    progress.finish();
    if !interrupted && step > start {
        let vl = evaluate(&model, &eval_prog, &data, &t)?;
        val_loss = Some(vl);
        append_line(&metrics, &json!({"step": step, "val_loss": vl, "val_ppl": vl.exp()}))?;
    }
    save(&model, step, elapsed0 + t0.elapsed().as_secs_f64())?;
    if let Err(e) = plot_metrics(&out) {
        eprintln!("warning: could not write the loss plot: {e}");
    }
    Ok(Summary { step, last_loss, val_loss, tokens_per_s: tok_s, interrupted, losses })
}
