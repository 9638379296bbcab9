//! The training loop as named steps: [`Trainer::open`] makes a new run or resumes one (settings,
//! data, model, programs, the ranks' handshake); then each step is [`Trainer::step`] (the
//! micro-batches, the gradient exchange, AdamW), [`Trainer::log`] (the metrics line and the
//! progress bar) and [`Trainer::after_step`] (the ranks' parameter check, evaluation, the
//! checkpoint); [`Trainer::finish`] evaluates, saves and reports.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::json;

use super::exchange::{CommTimes, DistOptions, backward_with_exchange, handshake, params_in_sync, reduce_gradients};
use super::lock::RunLock;
use super::progress::{Progress, append_line, plot_metrics};
use super::{
    INTERRUPTED, RunConfig, Summary, TrainConfig, TrainError, TrainOptions, adamw_cfg, check_writable, checkpoint,
    claim_for_new_run, collective, data, evaluate_sharded, install_ctrlc, remove_run,
};
use crate::gpu::Gpu;
use crate::model::{AdamWConfig, Model, Objective, Parts, Program};
use crate::tokenizer::Tokenizer;
use crate::train::Collective;

/// One run in progress on one rank.
/// A new run's data and tokenizer (`run`'s paths absolute): its corpus tokenised and cached (or
/// its shards opened) and the splits checked against `train.seq_len`, all CPU work, which `ddl
/// train` does before the adapter opens too ([`super::check_new_run_data`]). Fine-tuning
/// (`--init-from`): the checkpoint's tokenizer encodes the data.
pub(super) fn open_new_run_data(run: &super::RunConfig) -> Result<(data::Dataset, Tokenizer), TrainError> {
    let init = (!run.init_from.is_empty()).then(|| PathBuf::from(&run.init_from));
    let given = init.as_deref().map(checkpoint::saved_tokenizer).transpose()?;
    if let (Some(from), Some(tok)) = (&init, &given) {
        // Another tokenizer named (a file, the shards' meta.json) before the data is read
        // with this one (which met a token id past its vocabulary first).
        data::check_init_tokenizer(run, tok, from)?;
    }
    data::open_for_run(run, given.as_ref()).map_err(|e| match (e, &init) {
        (TrainError::Data(data::DataError::UnknownChar { path, offset, ch, vocab }), Some(from)) => {
            TrainError::Settings(format!(
                "'{}': character {ch:?} at byte {offset} is not among the {vocab} characters of --init-from {}'s \
                 character tokenizer: a character model knows only its corpus's characters (take them out of the \
                 text, or start from a model with a byte-level tokenizer)",
                path.display(),
                from.display()
            ))
        }
        (e, _) => e,
    })
}

pub(super) struct Trainer<'c> {
    /// The run folder's lock (rank 0), released when the run ends.
    _lock: Option<RunLock>,
    gpu: Arc<Gpu>,
    comm: &'c dyn Collective,
    dist: &'c DistOptions,
    /// Where this invocation stops, and whether it resumed.
    pub end: usize,
    out: PathBuf,
    run: RunConfig,
    t: TrainConfig,
    run_toml: String,
    model: Model,
    tok: Tokenizer,
    data: data::Dataset,
    prog: Program,
    eval_prog: Program,
    metrics: PathBuf,
    progress: Progress,
    lead: bool,
    distributed: bool,
    bucket: usize,
    /// This rank's micro-batches of every step.
    micros: Vec<usize>,
    start: usize,
    elapsed0: f64,
    t0: Instant,
    /// Optimizer steps done.
    pub step: usize,
    last_loss: f32,
    val_loss: Option<f64>,
    /// The last evaluation and its step; the best checkpoint so far.
    last_eval: Option<(usize, super::Eval)>,
    best: Option<checkpoint::Best>,
    /// Tokens the final evaluation covered (the whole validation split).
    val_tokens: Option<usize>,
    losses: Vec<f32>,
    interrupted: bool,
    /// Another rank was interrupted: stop after this step.
    stop: bool,
    /// The validation curve's lowest point so far (step, loss) and the evaluations since it
    /// (`train.early_stop`); a resumed run's from its metrics.jsonl.
    eval_best: Option<(usize, f64)>,
    evals_since_best: usize,
    /// `train.early_stop` ended the run at this step.
    stopped_early: Option<super::EarlyStop>,
    /// Steps skipped for a non-finite loss or gradient norm (`train.skip_nonfinite`; not the f16
    /// loss scale's overflow steps).
    skipped_nonfinite: usize,
    comm_sum: CommTimes,
    timed_steps: usize,
    timed_s: f64,
    tok_s: f64,
    last_saved: Option<usize>,
    fault_lost_at: Option<usize>,
    /// `DDL_FAULT_OOM_STEP`: the device reports running out of memory during this step (tests).
    fault_oom_at: Option<usize>,
    /// Dynamic loss scaling (f16 runs).
    loss_scale: Option<checkpoint::LossScale>,
    /// The next step's batches, drawn on a thread during this step.
    prefetched: Option<(usize, Vec<Batch>)>,
    /// The memory plan and how to need less, for an out-of-memory error.
    memory: String,
    /// Resident memory when the run began (after the device was created), and the plan's total.
    rss0: Option<u64>,
    plan_bytes: u64,
    activation_bytes: u64,
    /// Seconds [`Trainer::open`] took, and of them opening the data.
    startup_s: f64,
    data_open_s: f64,
    /// The prepared shards' check against their SHA-256s, running beside the first steps (no
    /// checkpoint is written before it passed).
    shard_check: Option<data::ShardCheck>,
}

/// What one optimizer step computed.
pub(super) struct StepResult {
    lr: f32,
    loss: f32,
    gnorm: f32,
    finite: bool,
    /// The step's last readback (loss, valid targets, Σ g², ·, Σ β per write).
    stats: Vec<f32>,
    /// (wait, exchange) seconds of a data-parallel step.
    comm_s: Option<(f64, f64)>,
    /// Seconds the step waited for its batches (≈ 0 when the previous step drew them ahead).
    data_s: f64,
    /// The loss scale the step used (f16 runs).
    loss_scale: Option<f64>,
}

/// One micro-batch: its input tokens and their targets.
type Batch = (Vec<i32>, Vec<i32>);

/// The batches of every micro-batch this process runs at `step`.
fn step_batches(
    data: &data::Dataset,
    t: &TrainConfig,
    micros: &[usize],
    step: usize,
) -> Result<Vec<Batch>, TrainError> {
    micros
        .iter()
        .map(|&micro| data.train_batch(t.seed, step, micro, t.batch_size, t.seq_len).map_err(TrainError::from))
        .collect()
}

impl<'c> Trainer<'c> {
    /// A new run, or the run in `opts.out` resumed: its settings, tokenizer, model and moments,
    /// the data, the training and evaluation programs; ranks compare their settings first.
    /// A run that fails to start leaves nothing behind: no `config.toml` (written only once
    /// the settings, data and programs are known to work), and no empty `--out` folder it made.
    pub fn open(
        gpu: Arc<Gpu>,
        opts: TrainOptions,
        comm: &'c dyn Collective,
        dist: &'c DistOptions,
    ) -> Result<Trainer<'c>, TrainError> {
        let created = !opts.out.exists();
        let out = opts.out.clone();
        // Resident memory from here on (the device exists): what the run itself adds.
        super::progress::reset_peak_rss();
        let rss0 = super::progress::rss().map(|r| r.0);
        let t_open = Instant::now();
        // Ctrl-C while the run starts: no lock and no empty folder left (until it listens).
        let _starting = super::StartingRun::new(&out, created && comm.rank() == 0);
        Self::open_in(gpu, opts, comm, dist, rss0)
            .map(|mut t| {
                t.startup_s = t_open.elapsed().as_secs_f64();
                t
            })
            .inspect(|t| super::progress::trace_memory("the run's start", rss0, t.gpu.stats.live()))
            .inspect_err(|_| {
                if created {
                    // Only when empty (the lock is gone with the failed attempt).
                    let _ = std::fs::remove_dir(&out);
                }
            })
    }

    fn open_in(
        gpu: Arc<Gpu>,
        opts: TrainOptions,
        comm: &'c dyn Collective,
        dist: &'c DistOptions,
        rss0: Option<u64>,
    ) -> Result<Trainer<'c>, TrainError> {
        let (rank, size) = (comm.rank(), comm.size());
        let lead = rank == 0;
        let distributed = comm.is_distributed();
        let derr = |msg: String| TrainError::Distributed { rank, size, msg };
        let out = opts.out.clone();
        // One process per run folder (rank 0 of a data-parallel run), and a folder that holds
        // a run is only continued (--resume) or replaced (--overwrite).
        let (mut lock, mut replaces) = (None, false);
        if lead {
            check_writable(&out)?;
            lock = Some(RunLock::acquire(&out)?);
            if let Some(s) = std::env::var("DDL_FAULT_SLOW_START").ok().and_then(|v| v.parse::<u64>().ok()) {
                // Fault injection for the tests: a start-up this many seconds long (an autotune, a
                // large corpus), for a Ctrl-C to arrive during it.
                std::thread::sleep(std::time::Duration::from_secs(s));
            }
            if !opts.resume {
                replaces = claim_for_new_run(&out, opts.overwrite)?;
            }
            checkpoint::remove_stale_tmp(&out);
        }
        let mut run = opts.run.clone();
        let mut dataset = None;
        let mut data_open_s = 0.0;
        let (mut model, tok, start, elapsed0, saved_scale) = if opts.resume {
            let ck = checkpoint::load_to_device(&out, gpu.clone(), true).map_err(|e| {
                // A damaged checkpoint: where the run can continue from, if it keeps another.
                match (&e, checkpoint::kept_remedy_for(&out, checkpoint::suspect_files(&e))) {
                    (
                        checkpoint::CheckpointError::Corrupt { .. }
                        | checkpoint::CheckpointError::Content { .. }
                        | checkpoint::CheckpointError::MissingFile(_),
                        Some(kept),
                    ) => TrainError::Settings(format!("--resume {}: {e}; {kept}", out.display())),
                    _ => e.into(),
                }
            })?;
            let (state, run_cfg) = ck.optim.expect("loaded with optimizer state");
            if !run_cfg.is_empty() {
                let saved: RunConfig = toml::from_str(&run_cfg).map_err(|e| {
                    TrainError::Settings(format!(
                        "{}: the saved run config is invalid: {e}",
                        out.join(checkpoint::OPTIM_FILE).display()
                    ))
                })?;
                // The saved settings, except those that may change between invocations (memory, and
                // what a bad step does: not the results). The caller's run holds the saved values
                // unless it was given others (`ddl train --resume` starts from them), so these are
                // taken as they come, also to turn one off (`--set train.recompute=false`).
                let (skip, recompute, chunk, early) =
                    (run.train.skip_nonfinite, run.train.recompute, run.train.head_chunk, run.train.early_stop);
                // Where its data is now (a corpus or shard folder moved since, given anew with
                // --corpus/--data): the tokens, not the path, are checked against data.json below.
                let (corpus, data) = (std::mem::take(&mut run.corpus), std::mem::take(&mut run.data));
                run = saved;
                (run.train.skip_nonfinite, run.train.recompute, run.train.head_chunk, run.train.early_stop) =
                    (skip, recompute, chunk, early);
                if !corpus.is_empty() || !data.is_empty() {
                    (run.corpus, run.data) = (corpus, data);
                    run.absolute_paths();
                }
            }
            if run.model != ck.model.cfg {
                return Err(TrainError::Settings(format!(
                    "{}: the checkpoint's model config differs from its run config",
                    out.display()
                )));
            }
            // A run trains on with its checkpoint's tokenizer: a tokenizer file changed (or gone)
            // since is said, not silently passed over.
            if run.tokenizer != "char" && run.data.is_empty() {
                let now = crate::tokenizer::Tokenizer::load(std::path::Path::new(&run.tokenizer));
                if !matches!(&now, Ok(t) if *t == ck.tokenizer) {
                    eprintln!(
                        "note: the run trains on with its checkpoint's tokenizer; its tokenizer file {} {}",
                        run.tokenizer,
                        match now {
                            Err(e) => format!("cannot be used now ({e})"),
                            Ok(_) => "has changed since".into(),
                        }
                    );
                }
            }
            (ck.model, ck.tokenizer, state.step, state.elapsed, state.loss_scale)
        } else {
            // Paths that work from any directory; settings first: a bad value is reported before
            // the corpus is read and tokenised.
            run.absolute_paths();
            run.validate()?;
            let init = (!run.init_from.is_empty()).then(|| PathBuf::from(&run.init_from));
            let td = Instant::now();
            let (ds, tok) = open_new_run_data(&run)?;
            data_open_s = td.elapsed().as_secs_f64();
            let model = match &init {
                None => {
                    run.model.vocab_size = tok.vocab_size();
                    run.validate()?;
                    Model::new(gpu.clone(), run.model.clone(), run.train.seed)?
                }
                Some(from) => {
                    // (With the fine-tune's own settings that fix no parameter: α, the context.)
                    let ck = checkpoint::load_to_device_as(from, gpu.clone(), false, Some(&run.model))?;
                    if ck.model.cfg != run.model {
                        return Err(TrainError::Settings(format!(
                            "--init-from {}: its model changed since the settings were read from it",
                            from.display()
                        )));
                    }
                    run.validate()?;
                    ck.model
                }
            };
            dataset = Some(ds);
            (model, tok, 0, 0.0, None)
        };
        super::progress::trace_memory("the model's creation", rss0, gpu.stats.live());
        run.validate()?;
        // The memory plan against what the adapter reports (largest buffer; a CPU adapter's host
        // memory), before any program is allocated or anything written.
        let tr = &run.train;
        let storage = tr.storage(&run.model).on(&gpu);
        let states_f16 = storage.state_f16;
        let limits = crate::model::Limits::of(&gpu);
        if let Some(advice) =
            crate::model::fit_advice(&run.model, tr.batch_size, tr.seq_len, tr.grad_accum, storage, &limits)
        {
            return Err(TrainError::Settings(format!("adapter '{}': {advice}", gpu.info.name)));
        }
        if lead && let Some(free) = checkpoint::free_bytes(&out) {
            // A disk without room for a checkpoint is said now, not at the first save.
            let (need, p, m) = checkpoint::save_bytes(model.layout.total, &tok);
            if free < need {
                let mb = |b: u64| format!("{:.1} MB", b as f64 / 1e6);
                return Err(TrainError::Settings(format!(
                    "--out '{}': its disk has {} free, and saving a checkpoint of this model needs {} (the \
                     parameters {} and AdamW's two moments {}, written whole beside the previous checkpoint before \
                     it is replaced): free space there, or choose an --out on another disk",
                    out.display(),
                    mb(free),
                    mb(need),
                    mb(p),
                    mb(m)
                )));
            }
        }
        // (A resumed run's data is opened here, before its "training … resuming" line: a
        // missing or changed corpus is refused without one.)
        let mut data = match dataset {
            Some(d) => d,
            None => {
                let td = Instant::now();
                let d = data::open_for_run(&run, Some(&tok))?.0;
                data_open_s = td.elapsed().as_secs_f64();
                d
            }
        };
        // Prepared shards are checked against their digests beside training; a data-parallel
        // run's ranks, which must stop at the same step, check theirs before the first.
        let mut shard_check = data::ShardCheck::start(&run)?;
        if distributed && let Some(c) = shard_check.take() {
            c.wait()?;
        }
        // What the run trains on, cheaply identified (cache key or the shards' fingerprint, the
        // split sizes): a resumed run must see the same data.
        let data_id = data::data_record(&data, &run);
        let data_path = out.join("data.json");
        if opts.resume {
            let remedy = "Resume with the data it started with, or start a new run with --out";
            if lead && !data_path.exists() {
                // (Runs older than the record have none; a deleted one is the way past a changed
                // data check: either way it is said, not passed over.)
                eprintln!(
                    "note: {} is missing, so the data cannot be checked against what this run trained on; it \
                     continues on the data given now, which is recorded anew",
                    data_path.display()
                );
            }
            data::check_data_record(&out, &data_id, "resume", remedy)?;
            if !distributed {
                // The report of an earlier data-parallel part would describe a run this one
                // continues in one process.
                let _ = std::fs::remove_file(out.join("distributed.json"));
            }
        }
        // (Only now, the data checked: a refused resume leaves the cache's older sets alone.)
        data.settle(&run.corpus);

        let plan = crate::model::memory_plan_for(&run.model, tr.batch_size, tr.seq_len, storage);
        configure(&mut model, tr, states_f16)?;
        let loss_scale = (tr.precision == crate::model::Precision::F16)
            .then(|| saved_scale.unwrap_or_else(|| checkpoint::LossScale::new(tr.loss_scale)));
        let t = run.train.clone();
        let run_toml = run.settings_toml().map_err(|e| TrainError::Settings(e.to_string()))?;

        let bucket = dist.bucket_elems(model.layout.total);
        if distributed {
            let digest = collective::digest_f32(&model.read_params()?);
            // The shard set is named by its cache key (corpus) or fingerprint (--data).
            let corpus_key = data.key.clone();
            handshake(
                comm,
                &run_toml,
                model.layout.total,
                data.len(),
                &corpus_key,
                start,
                opts.steps,
                bucket,
                dist.overlap_backward,
                &out.display().to_string(),
                crate::kernels::matmul::autotune::enabled(),
                digest,
            )
            .map_err(derr)?;
            super::exchange::ranks_share(&t, size, opts.resume).map_err(derr)?;
        }

        if lead && matches!(opts.show, super::Show::Bar) {
            // Once the folder is this run's, its data, model and memory plan are ready and a
            // data-parallel run's ranks agree (a run refused before is named without a "training").
            let from = match (opts.resume, run.init_from.as_str()) {
                (false, f) if !f.is_empty() => {
                    let step = checkpoint::saved_step(std::path::Path::new(f)).unwrap_or(0);
                    let changed = checkpoint::saved_config(std::path::Path::new(f))
                        .map(|from| from.fine_tune_changes(&run.model))
                        .unwrap_or_default();
                    let changed =
                        if changed.is_empty() { String::new() } else { format!("; changed: {}", changed.join(", ")) };
                    format!(", starting from the parameters of {f} (step {step}){changed}")
                }
                (true, _) => format!(", resuming at step {start} of {}", opts.steps),
                _ => String::new(),
            };
            eprintln!(
                "training {} ({}) on {} ({:?}) -> {}{from}",
                run.model.variant,
                run.preset,
                gpu.info.name,
                gpu.info.backend,
                out.display()
            );
        }

        let opt0 = adamw_cfg(&t, start);
        // Activations that do not fit the adapter: say which settings make them smaller.
        let hint = |e: crate::gpu::GpuError| match e {
            crate::gpu::GpuError::TooLarge { needed, max, .. } => {
                // The activations grow with the batch: the batch at which this one would fit.
                let b = (t.batch_size as u128 * max as u128 / needed.max(1) as u128) as usize;
                let fix = if b >= 1 {
                    format!("{} or train.seq_len", crate::model::batch_advice(b, t.batch_size * t.grad_accum))
                } else {
                    "lower train.batch_size to 1 and train.seq_len, or make the model smaller".to_string()
                };
                TrainError::Settings(format!(
                    "{e}. The activations of a batch of {} × {} tokens do not fit this adapter: {fix}",
                    t.batch_size, t.seq_len
                ))
            }
            e => TrainError::Gpu(e),
        };
        let objective = objective(&run);
        let tuned0 = crate::kernels::matmul::autotune::tuned();
        let build = || model.program_with(t.batch_size, t.seq_len, &opt0, objective).map_err(hint);
        let prog = if distributed && crate::kernels::matmul::autotune::enabled() {
            // Ranks that measured matmul tiles at once would disturb each other's timings where
            // they share an adapter (and measure the same thing N times where they do not): rank
            // 0 builds its program first, measuring what its cache lacks, and the others take its
            // choices (keyed by adapter name: a rank on another kind of adapter measures its own).
            let (prog, mut tuned) = match lead {
                true => (Some(build()?), crate::kernels::matmul::autotune::snapshot()),
                false => (None, Vec::new()),
            };
            comm.broadcast_bytes(&mut tuned, "rank 0's matmul tile measurements");
            match prog {
                Some(p) => p,
                None => {
                    crate::kernels::matmul::autotune::adopt(&tuned);
                    build()?
                }
            }
        } else {
            build()?
        };
        // Evaluation runs over the training program's activations: no second set.
        let eval_prog = model.forward_program_sharing(&prog).map_err(hint)?;
        // The first use's cost said when it is over (minutes on a CPU adapter, with one
        // line before it), once the progress shows (a job's line carries its name).
        let tuned = crate::kernels::matmul::autotune::tuned();
        let tuned_line = (tuned.0 > tuned0.0).then(|| {
            format!(
                "tuned the matmul tiles of {} product shape(s) in {:.0} s; later runs on this adapter reuse them",
                tuned.0 - tuned0.0,
                tuned.1 - tuned0.1
            )
        });
        super::progress::trace_memory("the programs' creation", rss0, gpu.stats.live());
        let metrics = out.join("metrics.jsonl");
        if replaces {
            // --overwrite: the old run goes only now that the new one is known to start.
            remove_run(&out)?;
        }
        if lead && !opts.resume {
            let _ = std::fs::remove_file(&metrics);
        }
        // The loss and speed of the step resumed at (the summary of an invocation that trains
        // nothing and only makes up the final evaluation reports them).
        let (mut last_loss, mut tok_s) = (f32::NAN, 0.0);
        if lead && opts.resume {
            // Lines logged after the checkpoint (a run stopped between saves) would repeat.
            super::progress::cut_metrics(&metrics, start)?;
            if let Some(row) = std::fs::read_to_string(&metrics).ok().and_then(|text| {
                text.lines()
                    .rev()
                    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                    .find(|j| j["step"].as_u64() == Some(start as u64) && j["loss"].is_number())
            }) {
                last_loss = row["loss"].as_f64().unwrap_or(f64::NAN) as f32;
                tok_s = row["tok_per_s"].as_f64().unwrap_or(0.0);
            }
        }
        if lead {
            // The resolved settings, once they are known to work here.
            let cfg_path = out.join("config.toml");
            checkpoint::write_atomic(&cfg_path, run_toml.as_bytes())
                .map_err(|source| TrainError::Io { path: cfg_path, source })?;
            let text = serde_json::to_string_pretty(&data_id).expect("serialisable");
            checkpoint::write_atomic(&data_path, text.as_bytes())
                .map_err(|source| TrainError::Io { path: data_path.clone(), source })?;
        }
        install_ctrlc();
        super::TRAINING.store(true, std::sync::atomic::Ordering::SeqCst);
        // (A resumed run, or a branch, starts from its folder's checkpoint of this step.)
        let saved = if opts.resume { start } else { super::NO_STEP };
        super::SAVED_STEP.store(saved, std::sync::atomic::Ordering::SeqCst);
        let progress = Progress::new(if lead { &opts.show } else { &super::Show::Quiet }, start, opts.steps);
        if let Some(line) = tuned_line {
            progress.println(line);
        }
        if distributed {
            progress.println(format!(
                "data-parallel over {}: each rank computes {} of the {} micro-batches of a step; {:.2} MB of gradients \
                 all-reduced per step in {} piece(s){}",
                comm.describe(),
                t.grad_accum / size,
                t.grad_accum,
                4.0 * model.layout.total as f64 / 1e6,
                super::exchange::all_reduces_per_step(&model, &prog, bucket, dist.overlap_backward),
                if dist.overlap_backward { ", block by block beside the backward" } else { "" }
            ));
        }
        let micros: Vec<usize> = (rank..t.grad_accum).step_by(size).collect();
        let fault_lost_at = std::env::var("DDL_FAULT_DEVICE_LOST_STEP").ok().and_then(|v| v.parse().ok());
        let fault_oom_at = std::env::var("DDL_FAULT_OOM_STEP").ok().and_then(|v| v.parse().ok());
        let f16_hint = if !t.state_f16 && run.model.f16_state_support().is_ok() {
            ", or --f16-state (half-precision states)"
        } else {
            ""
        };
        let recompute_hint = if t.recompute {
            ""
        } else {
            ", or --recompute (the same results in less memory: `ddl train --resume DIR --recompute` continues a run so)"
        };
        let chunk_hint = if t.head_chunk > 0 {
            String::new()
        } else {
            let r = crate::model::HEAD_CHUNK_ADVICE;
            format!(", or --head-chunk {r} (the LM head's logits {r} rows at a time)")
        };
        let memory = format!(
            "This run's memory plan at a batch of {} × {} tokens is {}. To need less: lower train.batch_size \
             (train.grad_accum keeps the global batch){f16_hint}{recompute_hint}{chunk_hint}",
            t.batch_size,
            t.seq_len,
            plan.summary()
        );
        // The validation curve so far (a resumed run's, up to its step): where it was lowest, and
        // the evaluations since (train.early_stop counts on from there).
        let (mut eval_best, mut evals_since_best) = (None::<(usize, f64)>, 0);
        if opts.resume
            && let Ok(Some(m)) = super::metrics::Metrics::read(&opts.out)
        {
            // One evaluation per step: a run that ended at a step with a periodic evaluation (an
            // early stop) logged its final one there too.
            let mut seen = None;
            for &(s, l) in m.val.iter().filter(|p| p.0 as usize <= start) {
                if seen.replace(s) == Some(s) {
                    continue;
                }
                if improves(eval_best, l) {
                    (eval_best, evals_since_best) = (Some((s as usize, l)), 0);
                } else {
                    evals_since_best += 1;
                }
            }
        }
        Ok(Trainer {
            _lock: lock,
            gpu,
            comm,
            dist,
            end: opts.steps,
            out,
            run,
            t,
            run_toml,
            model,
            tok,
            data,
            prog,
            eval_prog,
            metrics,
            progress,
            lead,
            distributed,
            bucket,
            micros,
            start,
            elapsed0,
            t0: Instant::now(),
            step: start,
            last_loss,
            val_loss: None,
            last_eval: None,
            best: if opts.resume { resumed_best(&opts.out, lead) } else { None },
            val_tokens: None,
            losses: Vec::new(),
            interrupted: false,
            stop: false,
            eval_best,
            evals_since_best,
            stopped_early: None,
            skipped_nonfinite: 0,
            comm_sum: CommTimes::default(),
            timed_steps: 0,
            timed_s: 0.0,
            tok_s,
            last_saved: opts.resume.then_some(start),
            fault_lost_at,
            fault_oom_at,
            prefetched: None,
            loss_scale,
            memory,
            rss0,
            plan_bytes: plan.total(),
            activation_bytes: plan.activation_bytes,
            startup_s: 0.0,
            data_open_s,
            shard_check,
        })
    }

    /// Whether to stop before the next step (Ctrl-C here, or on any rank of a data-parallel run);
    /// marks the run interrupted.
    pub fn interrupted(&mut self) -> bool {
        if self.stop || (!self.distributed && INTERRUPTED.load(Ordering::SeqCst)) {
            self.interrupted = true;
        }
        self.interrupted
    }

    /// The shards' check: its verdict if it has finished (`wait`: waits for it). A failed check
    /// says that nothing was saved on those shards.
    fn shards_checked(&mut self, wait: bool) -> Result<(), TrainError> {
        if !wait && !self.shard_check.as_ref().is_some_and(data::ShardCheck::finished) {
            return Ok(());
        }
        let Some(c) = self.shard_check.take() else { return Ok(()) };
        c.wait().map_err(|e| match e {
            data::DataError::Meta { path, msg } => data::DataError::Meta {
                path,
                msg: format!(
                    "{msg}. Found by the check that runs beside training (at step {}); no checkpoint was written on \
                     these shards{}",
                    self.step,
                    if self.start > 0 {
                        format!(
                            " (its checkpoint of step {} is kept: `ddl train --resume` once the shards are right)",
                            self.start
                        )
                    } else {
                        " (`--overwrite` starts the run again once the shards are right)".to_string()
                    }
                ),
            },
            e => e,
        })?;
        Ok(())
    }

    /// A GPU failure during step `step` (device lost, out of memory): says which step, and what
    /// is kept.
    fn at_step(&self, step: usize) -> impl Fn(crate::gpu::GpuError) -> TrainError + Clone + use<> {
        let (out, saved, memory) = (self.out.clone(), self.last_saved, self.memory.clone());
        move |source: crate::gpu::GpuError| {
            let kept = match saved {
                Some(s) => format!(
                    "The checkpoint of step {s} in '{}' is intact: `ddl train --resume {}` continues from it",
                    out.display(),
                    out.display()
                ),
                None => "No checkpoint had been written yet".to_string(),
            };
            match source {
                crate::gpu::GpuError::OutOfMemory(detail) => {
                    TrainError::OutOfMemoryAtStep { step, detail, memory: memory.clone(), kept }
                }
                source => TrainError::GpuAtStep { step, kept, source },
            }
        }
    }

    /// One optimizer step. A single process runs it in one submit: every micro-batch's forward
    /// and backward, the gradient norm and AdamW, which skips its update on the GPU when the norm
    /// is not finite (so a bad step never reaches the parameters). Ranks run one submit per
    /// micro-batch and sum their gradients before the norm and AdamW.
    pub fn step(&mut self) -> Result<StepResult, TrainError> {
        let (t, step) = (&self.t, self.step);
        self.comm.set_step(step);
        let ts = Instant::now();
        // AdamW counts the steps it applied: an f16 step skipped for overflow is not one.
        let skipped = self.loss_scale.map_or(0, |s| s.skipped);
        let scale = self.loss_scale.map(|s| s.scale);
        let opt = AdamWConfig {
            step: (step + 1 - skipped) as u32,
            grad_scale: scale.unwrap_or(1.0) as f32,
            ..adamw_cfg(t, step)
        };
        if let Some(s) = scale {
            self.prog.set_loss_scale(&self.model, s as f32).map_err(self.at_step(step + 1))?;
        }
        if self.fault_lost_at == Some(step + 1) {
            self.gpu.simulate_device_loss();
        }
        if self.fault_oom_at == Some(step + 1) {
            self.gpu.simulate_out_of_memory("the activations of a batch", self.activation_bytes);
        }
        let ctx = self.at_step(step + 1);
        let (model, prog) = (&self.model, &self.prog);
        model.set_optimizer_step(prog, &opt).map_err(ctx.clone())?;
        // The step's batches (drawn on a thread during the step before: they depend only on
        // seed, step and micro-batch), and the next step's drawn meanwhile.
        let td = Instant::now();
        let batches = match self.prefetched.take() {
            Some((s, b)) if s == step => b,
            _ => step_batches(&self.data, t, &self.micros, step)?,
        };
        let data_s = td.elapsed().as_secs_f64();
        let (data, micros, end) = (&self.data, &self.micros, self.end);
        let (distributed, overlap) = (self.distributed, self.dist.overlap_backward);
        let (comm, bucket) = (self.comm, self.bucket);
        let (ran, next) = std::thread::scope(|sc| {
            let next = (step + 1 < end).then(|| sc.spawn(move || step_batches(data, t, micros, step + 1)));
            let ran = (|| -> Result<(f64, Vec<f32>, Option<CommTimes>), TrainError> {
                if !distributed {
                    // The whole step in one submit: every micro-batch's inputs uploaded once,
                    // their forward and backward passes, the norm and AdamW; one readback.
                    let all = prog.run_accumulated(model, &batches, true).map_err(ctx.clone())?;
                    let loss_sum = all.iter().map(|s| s[0] as f64).sum();
                    return Ok((loss_sum, all.last().cloned().unwrap_or_default(), None));
                }
                // A data-parallel rank: its micro-batches' forward and backward passes in one
                // submit (the last one's backward in segments interleaved with the gradient
                // exchange when overlapping); the exchange and AdamW follow below.
                let split = if overlap { batches.len() - 1 } else { batches.len() };
                let (head, last) = batches.split_at(split);
                let (mut loss_sum, mut stats) = (0.0, Vec::new());
                if !head.is_empty() {
                    let all = prog.run_accumulated(model, head, false).map_err(ctx.clone())?;
                    loss_sum += all.iter().map(|s| s[0] as f64).sum::<f64>();
                    stats = all.last().cloned().unwrap_or_default();
                }
                let mut exchanged = None;
                if let Some((x, y)) = last.first() {
                    prog.set_batch(model, x, y).map_err(ctx.clone())?;
                    exchanged = Some(backward_with_exchange(model, prog, head.is_empty(), comm, bucket)?);
                    stats = prog.stats().read_f32(&model.gpu).map_err(ctx.clone())?;
                    loss_sum += stats[0] as f64;
                }
                Ok((loss_sum, stats, exchanged))
            })();
            (ran, next.map(|h| h.join().expect("the batch thread panicked")))
        });
        // (Σ micro-batch losses, the statistics of the last submit — loss, valid targets, Σ g² —,
        // the exchange's times when it overlapped the backward).
        let (mut loss_sum, mut stats, exchanged) = ran?;
        if let Some(next) = next {
            self.prefetched = Some((step + 1, next?));
        }
        let mut comm_s = None;
        if self.distributed {
            let c = match exchanged {
                Some(c) => c,
                None => reduce_gradients(model, self.comm, self.bucket)?,
            };
            // With the loss: how many ranks Ctrl-C, SIGTERM or a closed pipe interrupted (every
            // rank then stops after this step, saying and exiting with that signal: SIGTERM first).
            let sig = if INTERRUPTED.load(Ordering::SeqCst) { super::interrupting_signal() } else { 0 };
            let by = |s: i32| if sig == s { 1.0 } else { 0.0 };
            let mut red = [loss_sum, by(super::SIGTERM), by(super::SIGINT), by(super::SIGPIPE)];
            self.comm.all_reduce_sum_f64(&mut red, "loss all-reduce");
            loss_sum = red[0];
            self.stop = red[1..].iter().any(|&n| n > 0.0);
            if self.stop && sig == 0 {
                let first =
                    [super::SIGTERM, super::SIGINT, super::SIGPIPE].into_iter().zip(&red[1..]).find(|(_, n)| **n > 0.0);
                super::adopt_signal(first.map_or(super::SIGINT, |(s, _)| s));
            }
            stats = prog.run(model, Parts::FINISH_STEP).map_err(ctx.clone())?;
            comm_s = Some((c.wait, c.total));
            if step > self.start {
                self.comm_sum += c;
            }
        }
        // The step's loss: the mean of its micro-batches' mean losses (what the gradient is of).
        let loss = (loss_sum / t.grad_accum as f64) as f32;
        // A non-finite norm² is reported as it is (NaN.max(0) would read as 0); the gradients
        // carry the loss scale.
        let gnorm = if stats[2].is_finite() { stats[2].max(0.0).sqrt() / opt.grad_scale } else { stats[2] };
        let finite = loss.is_finite() && stats[2].is_finite();
        if let Some(ls) = &mut self.loss_scale
            && loss.is_finite()
        {
            // An f16 step whose gradients overflowed: AdamW skipped it on the GPU; halve the scale.
            ls.update(finite, t.loss_scale_growth);
            if ls.scale < checkpoint::LossScale::MIN {
                self.progress.finish();
                return Err(TrainError::NonFinite {
                    step: step + 1,
                    what: "gradient norm (at every loss scale)",
                    value: gnorm,
                });
            }
        }
        if !finite && (self.loss_scale.is_none() || !loss.is_finite()) {
            let (what, value) = if loss.is_finite() { ("gradient norm", gnorm) } else { ("loss", loss) };
            if !t.skip_nonfinite {
                self.progress.finish();
                return Err(TrainError::NonFinite { step: step + 1, what, value });
            }
            // Said, not only logged: the first few, then their count at the end.
            self.skipped_nonfinite += 1;
            if self.lead && self.skipped_nonfinite <= 3 {
                self.progress.println(format!(
                    "step {}: the {what} is {value}; the step is skipped (train.skip_nonfinite){}",
                    step + 1,
                    if self.skipped_nonfinite == 3 { "; further ones are counted at the end" } else { "" }
                ));
            }
        }
        self.step += 1;
        self.last_loss = loss;
        self.losses.push(loss);
        let dt = ts.elapsed().as_secs_f64();
        if self.step > self.start + 1 {
            (self.timed_steps, self.timed_s) = (self.timed_steps + 1, self.timed_s + dt);
        }
        let tokens_per_step = (t.batch_size * t.seq_len * t.grad_accum) as f64;
        self.tok_s = tokens_per_step / dt.max(1e-9);
        Ok(StepResult { lr: opt.lr, loss, gnorm, finite, stats, comm_s, data_s, loss_scale: scale })
    }

    fn append(&self, line: &serde_json::Value) -> Result<(), TrainError> {
        if self.lead { append_line(&self.metrics, line) } else { Ok(()) }
    }

    fn elapsed(&self) -> f64 {
        self.elapsed0 + self.t0.elapsed().as_secs_f64()
    }

    /// The step's metrics line (every step) and the progress bar (log lines every `log_every`).
    pub fn log(&self, s: &StepResult) -> Result<(), TrainError> {
        let (step, tok_s) = (self.step, self.tok_s);
        let log = step % self.t.log_every == 0 || step == self.end;
        let mut line = json!({
            "step": step, "lr": s.lr, "loss": s.loss, "grad_norm": s.gnorm, "tok_per_s": tok_s,
            "elapsed": self.elapsed(), "skipped": !s.finite, "data_ms": s.data_s * 1e3,
        });
        if let Some(scale) = s.loss_scale {
            line["loss_scale"] = json!(scale);
        }
        if let Some((wait, exchange)) = s.comm_s {
            line["comm_wait_s"] = json!(wait);
            line["comm_s"] = json!(exchange);
        }
        if self.lead && self.run.model.variant.is_ddl() {
            // Every step, from the step's one readback (the last micro-batch's forward).
            line["beta_mean"] = json!(crate::model::beta_means_of(&s.stats, self.prog.b() * self.prog.t()));
        }
        self.append(&line)?;
        let mut msg = format!("loss {:.4} |g| {:.3} lr {:.2e} {tok_s:.0} tok/s", s.loss, s.gnorm, s.lr);
        if let Some(scale) = s.loss_scale {
            let skipped = self.loss_scale.map_or(0, |l| l.skipped);
            msg += &format!(" loss scale 2^{} ({skipped} skipped)", scale.log2());
        }
        self.progress.update(step, msg, log);
        Ok(())
    }

    /// After a step: the ranks' parameter check (first step, checkpoints), an evaluation every
    /// `eval_every` steps, a checkpoint every `checkpoint_every` steps.
    pub fn after_step(&mut self) -> Result<(), TrainError> {
        self.shards_checked(false)?;
        let (t, step) = (&self.t, self.step);
        if step <= self.start + 2 {
            super::progress::trace_memory(&format!("step {step}"), self.rss0, self.gpu.stats.live());
        }
        let checkpoint_now = t.checkpoint_every > 0 && step % t.checkpoint_every == 0 && step < self.end;
        if self.distributed && (step == self.start + 1 || checkpoint_now) {
            params_in_sync(&self.model, self.comm, step)?;
        }
        if t.eval_every > 0 && step % t.eval_every == 0 && step < self.end {
            let e = self.evaluate(super::EvalSpan::Periodic, false)?.expect("a periodic evaluation runs to its end");
            self.progress.println(format!(
                "step {step}: val loss {:.4} (perplexity {:.2}, {} tokens)",
                e.loss,
                e.loss.exp(),
                e.tokens
            ));
            if self.lead
                && let Err(e) = plot_metrics(&self.out)
            {
                self.progress.println(format!("warning: could not write the loss plot of {}: {e}", self.out.display()));
            }
            // train.early_stop: the same decision on every rank (they share one evaluation).
            if improves(self.eval_best, e.loss) {
                (self.eval_best, self.evals_since_best) = (Some((step, e.loss)), 0);
            } else {
                self.evals_since_best += 1;
            }
            if let Some((best_step, best_loss)) = self.eval_best
                && self.t.early_stop > 0
                && self.evals_since_best >= self.t.early_stop
            {
                let stop = super::EarlyStop {
                    step,
                    best_step,
                    best_loss,
                    evaluations: self.evals_since_best,
                    planned: self.end,
                };
                self.progress.println(stop.to_string());
                self.stopped_early = Some(stop);
                // The run ends here as at its last step: checkpoint (its target this step), final
                // evaluation.
                self.end = step;
            }
        }
        if checkpoint_now {
            self.save()?;
            self.last_saved = Some(step);
        }
        Ok(())
    }

    /// The validation loss (shared out over the ranks), logged with the tokens it covers.
    /// An evaluation of `span`, logged; `None` when Ctrl-C stopped it (`stoppable`: the final
    /// one, of a single process), which logs nothing.
    fn evaluate(&mut self, span: super::EvalSpan, stoppable: bool) -> Result<Option<super::Eval>, TrainError> {
        let e = {
            let (progress, mut shown) = (&self.progress, 0);
            let tick = &mut |k: super::Tick<'_>| {
                progress.eval_tick(&k, &mut shown);
                !(stoppable && INTERRUPTED.load(Ordering::SeqCst))
            };
            evaluate_sharded(&self.model, &self.eval_prog, &self.data, &self.t, span, self.comm, tick)?
        };
        if !e.complete {
            return Ok(None);
        }
        super::progress::trace_memory(
            &format!("evaluation after step {}", self.step),
            self.rss0,
            self.gpu.stats.live(),
        );
        self.val_loss = Some(e.loss);
        self.last_eval = Some((self.step, e));
        let full = span == super::EvalSpan::Full;
        let mut row = json!({"step": self.step, "val_loss": e.loss, "val_ppl": e.loss.exp(), "val_tokens": e.tokens, "val_full": full});
        let finite = |x: f64| x.is_finite().then_some(x);
        if let Some(a) = finite(e.accuracy) {
            row["val_accuracy"] = json!(a);
        }
        if full {
            // The part over the windows every evaluation covers: the curve's end point.
            row["val_subset_loss"] = json!(e.subset.0);
            row["val_subset_tokens"] = json!(e.subset.1);
            if let Some(a) = finite(e.subset_accuracy) {
                row["val_subset_accuracy"] = json!(a);
            }
        }
        self.append(&row)?;
        Ok(Some(e))
    }

    /// What a failed save leaves, and how to go on (the folder may be gone, or hold no
    /// checkpoint yet).
    fn kept_after_failed_save(&self) -> String {
        let out = self.out.display();
        match self.last_saved {
            _ if !self.out.is_dir() => format!("The run folder '{out}' no longer exists: nothing of the run is left"),
            Some(s) => format!(
                "The checkpoint of step {s} in '{out}' is intact; free disk space or fix the folder's permissions, \
                 then continue with `ddl train --resume {out}`"
            ),
            None => format!(
                "No checkpoint had been written yet; free disk space or fix the folder's permissions, then start \
                 the run again (`ddl train … --out {out} --overwrite`)"
            ),
        }
    }

    /// The checkpoint of the current step (rank 0), and whether it is the best so far.
    fn save(&mut self) -> Result<(), TrainError> {
        if !self.lead {
            return Ok(());
        }
        self.shards_checked(false)?;
        if self.shard_check.is_some() {
            self.progress
                .println("checking the shards against meta.json's SHA-256s before the first checkpoint …".into());
            self.shards_checked(true)?;
        }
        let step = self.step;
        let state =
            checkpoint::RunState { step, elapsed: self.elapsed(), loss_scale: self.loss_scale, target: Some(self.end) };
        let kept = self.kept_after_failed_save();
        let err = |source| TrainError::Save { step, kept: kept.clone(), source };
        // (What a second Ctrl-C says is left: the save under way, the last checkpoint.)
        use std::sync::atomic::Ordering::SeqCst;
        super::SAVING_STEP.store(step, SeqCst);
        let saved = checkpoint::save_model(&self.out, &self.model, &self.tok, &state, &self.run_toml);
        super::SAVING_STEP.store(super::NO_STEP, SeqCst);
        saved.map_err(err)?;
        super::SAVED_STEP.store(step, SeqCst);
        // The step's checkpoint is in the run folder now: a failure to keep its copy (or mark
        // it best) leaves this step's, not the one before (which the message said).
        self.last_saved = Some(step);
        let out = self.out.display();
        let kept = format!(
            "The checkpoint of step {step} itself is saved in '{out}' (what failed is its copy under checkpoints/); \
             free disk space or fix the folder's permissions, then continue with `ddl train --resume {out}`"
        );
        checkpoint::keep_step(&self.out, step, self.t.checkpoint_keep).map_err(|source| TrainError::Save {
            step,
            kept: kept.clone(),
            source,
        })?;
        self.mark_best()
    }

    /// Marks the current step's kept checkpoint as the best when its evaluation beats the best's
    /// (rank 0; after [`Trainer::save`] of the step).
    fn mark_best(&mut self) -> Result<(), TrainError> {
        if !self.lead {
            return Ok(());
        }
        let step = self.step;
        let kept = self.kept_after_failed_save();
        let err = |source| TrainError::Save { step, kept: kept.clone(), source };
        // The best by the validation loss over the subset every evaluation covers.
        if let Some((at, e)) = self.last_eval
            && at == step
            && e.subset.1 > 0
            && improves(self.best.as_ref().map(|b| (b.step, b.val_loss)), e.subset.0)
        {
            let best = checkpoint::Best { step, val_loss: e.subset.0, val_tokens: e.subset.1 };
            checkpoint::mark_best(&self.out, &best).map_err(err)?;
            self.best = Some(best);
        }
        super::progress::trace_memory(&format!("the checkpoint of step {step}"), self.rss0, self.gpu.stats.live());
        Ok(())
    }

    /// The checkpoint, the last evaluation (unless interrupted; Ctrl-C stops it) and whether
    /// it makes the checkpoint the best, the data-parallel report and the loss plot. The
    /// checkpoint comes first: a failed or interrupted evaluation loses no steps.
    pub fn finish(mut self) -> Result<Summary, TrainError> {
        self.progress.finish();
        let step = self.step;
        if self.last_saved != Some(step) {
            // (A resumed run that trained nothing has this step's checkpoint already, with the
            // target of the invocation that saved it.)
            self.save()?;
        }
        if std::env::var_os("DDL_FAULT_INTERRUPT_FINAL_EVAL").is_some() {
            // Fault injection for the tests: Ctrl-C as the final evaluation starts.
            super::interrupt_now();
        }
        // The final evaluation: after training, or of a run resumed at its last step whose final
        // evaluation an interrupt stopped (nothing trained, but its result was never logged).
        let evaluate =
            step > self.start || (!self.distributed && super::final_evaluation_row(&self.out, step).is_none());
        if !self.interrupted && evaluate {
            match self.evaluate(super::EvalSpan::Full, !self.distributed)? {
                Some(e) => {
                    self.val_tokens = Some(e.tokens);
                    self.mark_best()?;
                }
                None => self.interrupted = true,
            }
        }
        if self.distributed {
            let digests = params_in_sync(&self.model, self.comm, step)?;
            // (An invocation that trained nothing, a resume at or past --steps, keeps the report of
            // the one that did: its own would hold no step and zero times.)
            if self.lead && step > self.start {
                self.write_distributed_report(&digests)?;
            }
        }
        if self.lead
            && let Err(e) = plot_metrics(&self.out)
        {
            eprintln!("warning: could not write the loss plot of {}: {e}", self.out.display());
        }
        let summary = Summary {
            step,
            target: self.end,
            last_loss: self.last_loss,
            val_loss: self.val_loss,
            best: self.best.clone(),
            startup_s: self.startup_s,
            data_open_s: self.data_open_s,
            val_tokens: self.val_tokens,
            val_whole: {
                let t = self.prog.t();
                super::eval_windows(&self.data, &self.t, super::EvalSpan::Full, 1, t) == self.data.val_windows(t)
            },
            tokens_per_s: self.tok_s,
            interrupted: self.interrupted,
            stopped_early: self.stopped_early,
            skipped_nonfinite: self.skipped_nonfinite,
            memory: self
                .rss0
                .zip(super::progress::rss())
                .map(|(r0, (_, peak))| (peak.saturating_sub(r0), self.plan_bytes)),
            host_device_memory: self.gpu.forms.cpu,
            losses: self.losses,
        };
        // (An invocation that trained nothing keeps the summary of the one that did, unless it
        // made up that one's final evaluation.)
        if self.lead && (step > self.start || (evaluate && self.val_tokens.is_some())) {
            let path = self.out.join("summary.json");
            let text = serde_json::to_string_pretty(&summary.to_json()).expect("serialisable");
            checkpoint::write_atomic(&path, text.as_bytes()).map_err(|source| TrainError::Io { path, source })?;
        }
        Ok(summary)
    }

    /// `distributed.json`: ranks, parameter digests, bytes and mean times of the exchange.
    fn write_distributed_report(&self, digests: &[u64]) -> Result<(), TrainError> {
        let (total, bucket, c) = (self.model.layout.total, self.bucket, &self.comm_sum);
        let (timed_steps, timed_s) = (self.timed_steps, self.timed_s);
        let n = timed_steps.max(1) as f64;
        let report = json!({
            "ranks": self.comm.size(),
            "transport": self.comm.describe(),
            "step": self.step,
            "params_digest_by_rank": digests.iter().map(|d| format!("{d:016x}")).collect::<Vec<_>>(),
            "allreduce_bytes_per_step": 4 * total,
            "bucket_elems": bucket,
            "overlap_backward": self.dist.overlap_backward,
            "buckets_per_step": super::exchange::all_reduces_per_step(&self.model, &self.prog, bucket, self.dist.overlap_backward),
            "timed_steps": timed_steps,
            "mean_step_s": timed_s / n,
            "mean_wait_s": c.wait / n,
            "mean_exchange_s": c.total / n,
            "mean_readback_s": c.readback / n,
            "mean_allreduce_s": c.allreduce / n,
            "mean_write_s": c.write / n,
            "exchange_share_of_step": if timed_s > 0.0 { c.total / timed_s } else { 0.0 },
        });
        let path = self.out.join("distributed.json");
        let text = serde_json::to_string_pretty(&report).map_err(|e| TrainError::Settings(e.to_string()))?;
        checkpoint::write_atomic(&path, text.as_bytes()).map_err(|source| TrainError::Io { path, source })
    }
}

/// The model's numerics and memory settings of a run (the variant and shape were validated with
/// the settings; what is left is the adapter).
fn configure(model: &mut Model, tr: &TrainConfig, states_f16: bool) -> Result<(), TrainError> {
    model.set_recompute(tr.recompute);
    model.set_head_chunk(tr.head_chunk);
    model
        .set_precision(tr.precision)
        .map_err(|e| TrainError::Settings(format!("train.precision (--precision): {e}")))?;
    model.set_state_f16(states_f16).map_err(|e| TrainError::Settings(format!("train.state_f16 (--f16-state): {e}")))
}

/// What a run's training program minimises: its label smoothing, the micro-batches' mean.
fn objective(run: &RunConfig) -> Objective {
    Objective { label_smoothing: run.model.label_smoothing as f32, loss_scale: 1.0 / run.train.grad_accum as f32 }
}

/// Measures the matmul tiles a new run of `run`'s settings would measure when it builds its
/// programs (what its cache lacks, as the run itself would: the same model, batch, precision and
/// memory settings), then frees what it built; no run folder is touched. `ddl experiment --jobs`
/// does this for every variant before its jobs start, so that no tile is timed beside a run that
/// trains. Returns the product shapes measured and the seconds that took.
pub fn tune_for(gpu: Arc<Gpu>, run: &RunConfig) -> Result<(usize, f64), TrainError> {
    let mut run = run.clone();
    run.absolute_paths();
    run.validate()?;
    let (_, tok) = data::open_for_run(&run, None)?;
    run.model.vocab_size = tok.vocab_size();
    run.validate()?;
    let tr = &run.train;
    let storage = tr.storage(&run.model).on(&gpu);
    let mut model = Model::new(gpu.clone(), run.model.clone(), tr.seed)?;
    configure(&mut model, tr, storage.state_f16)?;
    let before = crate::kernels::matmul::autotune::tuned();
    let prog = model.program_with(tr.batch_size, tr.seq_len, &adamw_cfg(tr, 0), objective(&run))?;
    model.forward_program_sharing(&prog)?;
    let after = crate::kernels::matmul::autotune::tuned();
    Ok((after.0 - before.0, after.1 - before.1))
}

/// Whether an evaluation's `loss` beats the best so far (`train.early_stop`, the best checkpoint):
/// one that is not a finite number (an evaluation that overflowed) never does, so that it
/// cannot stand as a best no later evaluation beats.
fn improves(best: Option<(usize, f64)>, loss: f64) -> bool {
    loss.is_finite() && best.is_none_or(|(_, b)| loss < b)
}

/// The best checkpoint a resumed run in `out` goes on from: `checkpoints/best/best.json`'s, or,
/// where that record does not read (damaged, edited, deleted) but `best/` holds a checkpoint,
/// its step with the loss `metrics.jsonl` logged there, written back to `best.json` — without
/// it the run's next evaluation replaced `best/`, a better checkpoint, silently. Said either way
/// (`lead`: the process that writes).
fn resumed_best(out: &std::path::Path, lead: bool) -> Option<checkpoint::Best> {
    if let Some(b) = checkpoint::read_best(out) {
        return Some(b);
    }
    let dir = out.join(checkpoint::KEPT_DIR).join(checkpoint::BEST_DIR);
    let record = dir.join(checkpoint::BEST_FILE);
    let step = checkpoint::saved_step(&dir).ok()?;
    let logged = std::fs::read_to_string(out.join("metrics.jsonl")).ok().and_then(|text| {
        text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).find_map(|j| {
            if j["step"].as_u64() != Some(step as u64) {
                return None;
            }
            let (loss, tokens) = if j["val_full"].as_bool() == Some(true) {
                (j["val_subset_loss"].as_f64()?, j["val_subset_tokens"].as_u64()?)
            } else {
                (j["val_loss"].as_f64()?, j["val_tokens"].as_u64()?)
            };
            Some(checkpoint::Best { step, val_loss: loss, val_tokens: tokens as usize })
        })
    });
    if lead {
        match &logged {
            Some(b) => {
                eprintln!(
                    "note: {} does not read: the best checkpoint is taken as its step {step}, validation loss {:.4} \
                     (metrics.jsonl), and the record written again",
                    record.display(),
                    b.val_loss
                );
                if let Ok(text) = serde_json::to_vec_pretty(b) {
                    let _ = checkpoint::write_atomic(&record, &text);
                }
            }
            None => eprintln!(
                "note: {} does not read and metrics.jsonl has no evaluation of its step {step}: the run's next \
                 evaluation replaces {} whatever its loss",
                record.display(),
                dir.display()
            ),
        }
    }
    logged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_evaluation_that_is_not_finite_is_never_the_best() {
        assert!(improves(None, 3.0) && improves(Some((1, 3.0)), 2.5) && !improves(Some((1, 3.0)), 3.0));
        assert!(!improves(None, f64::NAN) && !improves(Some((1, 3.0)), f64::NAN));
        assert!(!improves(None, f64::INFINITY) && !improves(Some((1, 3.0)), f64::NEG_INFINITY));
    }
}
