//! Opening a run: a new one, or one resumed (settings, tokenizer, model and moments, data,
//! programs, the ranks' handshake); and [`tune_for`], the tile measurements a run would make,
//! taken ahead of time (`ddl experiment --jobs`).

use super::*;

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
        crate::train::progress::reset_peak_rss();
        let rss0 = crate::train::progress::rss().map(|r| r.0);
        let t_open = Instant::now();
        // Ctrl-C while the run starts: no lock and no empty folder left (until it listens).
        let _starting = crate::train::StartingRun::new(&out, created && comm.rank() == 0);
        Self::open_in(gpu, opts, comm, dist, rss0)
            .map(|mut t| {
                t.startup_s = t_open.elapsed().as_secs_f64();
                t
            })
            .inspect(|t| crate::train::progress::trace_memory("the run's start", rss0, t.gpu.stats.live()))
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
            // (What killed writers left, or a copy of the folder made while its run trained.)
            let removed = checkpoint::remove_stale_temporaries(&out);
            if !removed.is_empty() {
                let names: Vec<String> =
                    removed.iter().map(|p| p.strip_prefix(&out).unwrap_or(p).display().to_string()).collect();
                eprintln!(
                    "note: removed {} that no live process writes (left by a run that was killed, or copied with \
                     the folder while its run trained): {}",
                    crate::plural(removed.len(), "temporary file"),
                    names.join(", ")
                );
            }
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
                    // (A --config copied from a fine-tune's config.toml may carry one.)
                    run.init_from_step = None;
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
                    // (Recorded: the folder may train on, and `ddl info` says from which step.)
                    run.init_from_step = Some(ck.step);
                    ck.model
                }
            };
            dataset = Some(ds);
            (model, tok, 0, 0.0, None)
        };
        crate::train::progress::trace_memory("the model's creation", rss0, gpu.stats.live());
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
            crate::train::exchange::ranks_share(&t, size, opts.resume).map_err(derr)?;
        }

        if lead && matches!(opts.show, crate::train::Show::Bar) {
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
                "tuned the matmul tiles of {} product shape(s) in {:.0} s; {}",
                tuned.0 - tuned0.0,
                tuned.1 - tuned0.1,
                match crate::kernels::matmul::autotune::kept() {
                    true => "later runs on this adapter reuse them",
                    false => "not kept (the warning above says why): later runs measure again",
                }
            )
        });
        crate::train::progress::trace_memory("the programs' creation", rss0, gpu.stats.live());
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
            crate::train::progress::cut_metrics(&metrics, start)?;
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
        crate::train::TRAINING.store(true, std::sync::atomic::Ordering::SeqCst);
        // (A resumed run, or a branch, starts from its folder's checkpoint of this step.)
        let saved = if opts.resume { start } else { crate::train::NO_STEP };
        crate::train::SAVED_STEP.store(saved, std::sync::atomic::Ordering::SeqCst);
        let progress = Progress::new(if lead { &opts.show } else { &crate::train::Show::Quiet }, start, opts.steps);
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
                crate::train::exchange::all_reduces_per_step(&model, &prog, bucket, dist.overlap_backward),
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
            && let Ok(Some(m)) = crate::train::metrics::Metrics::read(&opts.out)
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
}

/// The model's numerics and memory settings of a run (the variant and shape were validated with
/// the settings; what is left is the adapter).
pub(super) fn configure(model: &mut Model, tr: &TrainConfig, states_f16: bool) -> Result<(), TrainError> {
    model.set_recompute(tr.recompute);
    model.set_head_chunk(tr.head_chunk);
    model
        .set_precision(tr.precision)
        .map_err(|e| TrainError::Settings(format!("train.precision (--precision): {e}")))?;
    model.set_state_f16(states_f16).map_err(|e| TrainError::Settings(format!("train.state_f16 (--f16-state): {e}")))
}

/// What a run's training program minimises: its label smoothing, the micro-batches' mean.
pub(super) fn objective(run: &RunConfig) -> Objective {
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

/// The best checkpoint a resumed run in `out` goes on from: `checkpoints/best/best.json`'s, or,
/// where that record does not read (damaged, edited, deleted) but `best/` holds a checkpoint,
/// its step with the loss `metrics.jsonl` logged there, written back to `best.json` — without
/// it the run's next evaluation replaced `best/`, a better checkpoint, silently. Said either way
/// (`lead`: the process that writes).
pub(super) fn resumed_best(out: &std::path::Path, lead: bool) -> Option<checkpoint::Best> {
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

/// A new run's data and tokenizer (`run`'s paths absolute): its corpus tokenised and cached (or
/// its shards opened) and the splits checked against `train.seq_len`, all CPU work, which `ddl
/// train` does before the adapter opens too ([`crate::train::check_new_run_data`]). Fine-tuning
/// (`--init-from`): the checkpoint's tokenizer encodes the data.
pub(in crate::train) fn open_new_run_data(run: &RunConfig) -> Result<(data::Dataset, Tokenizer), TrainError> {
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
