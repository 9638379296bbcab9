//! Running the grid: the runs not finished yet (one device or several), each run's result, then
//! the report.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::folder::{check_out, same_data_as_trained};
use super::report::write_report;
use super::speed::{measure_speed, speed_rows};
use super::{ExperimentError, ExperimentOptions, ExperimentSpec, RegimeCounts, RunResult, adapter_name, run_name};
use crate::gpu::Gpu;
use crate::model::{Model, Variant};
use crate::train::{RunConfig, Show, TrainOptions, checkpoint, data};

/// Runs what is not finished yet, then writes the report. Returns the report's path, or `None`
/// when the grid was interrupted (Ctrl-C; run again to continue).
pub fn run(gpu: Arc<Gpu>, spec: &ExperimentSpec, opts: &ExperimentOptions) -> Result<Option<PathBuf>, ExperimentError> {
    let out = &opts.out;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExperimentError::Io { path, source }
    };
    std::fs::create_dir_all(out.join("runs")).map_err(io(&out.join("runs")))?;
    // One experiment per folder at a time (its runs are each locked again by training).
    let _lock = crate::train::lock::RunLock::acquire(out)?;
    // The spec a directory was started with is kept; a different spec needs a new directory.
    let spec_path = out.join("experiment.toml");
    let spec_text = toml::to_string(spec).map_err(|e| ExperimentError::Report(e.to_string()))?;
    check_out(spec, out)?;
    // (--report-only reports; the folder keeps the spec its runs were trained by.)
    if !opts.report_only || !spec_path.exists() {
        checkpoint::write_atomic(&spec_path, spec_text.as_bytes()).map_err(io(&spec_path))?;
    }
    let variants = spec.variant_list().map_err(|m| ExperimentError::Spec { path: spec_path.clone(), msg: m })?;
    let total: usize = variants.iter().map(|&v| spec.seeds_of(v).len()).sum();
    if !opts.report_only {
        // Seed-major: after the first seed every variant has one run to compare.
        let mut pending = std::collections::VecDeque::new();
        let mut i = 0;
        for seed in spec.all_seeds() {
            for &v in variants.iter().filter(|&&v| spec.seeds_of(v).contains(&seed)) {
                i += 1;
                let name = run_name(v, seed);
                if result_of(&out.join("runs").join(&name), spec.steps).is_some() {
                    if !opts.quiet {
                        eprintln!("[{i}/{total}] {name}: finished earlier, not re-run");
                    }
                    continue;
                }
                let why = unusable_result(&out.join("runs").join(&name), spec.steps);
                if !why.is_empty() && !opts.quiet {
                    // (A result restored from another grid, or left by a spec of another length.)
                    eprintln!("[{i}/{total}] {name}: trained again{why}");
                }
                pending.push_back((i, v, seed));
            }
        }
        if !pending.is_empty() {
            same_data_as_trained(spec, out, &variants, true)?;
        }
        let devices: Vec<&Arc<Gpu>> = std::iter::once(&gpu).chain(&opts.more_devices).collect();
        let jobs = devices.len().min(pending.len()).max(1);
        if jobs > 1 && crate::kernels::matmul::autotune::enabled() && !pretune(&devices, spec, &pending, opts.quiet) {
            eprintln!(
                "{} while the matmul tiles were measured before the jobs: nothing was trained (the shapes measured \
                 so far are kept)",
                crate::train::interruption()
            );
            return Ok(None);
        }
        // Several runs at once: each its own bar (or its named lines), under a bar of the grid.
        let bars = (jobs > 1).then(indicatif::MultiProgress::new);
        let grid_bar = bars.as_ref().map(|b| {
            let bar = b.add(indicatif::ProgressBar::new(total as u64));
            bar.set_style(
                indicatif::ProgressStyle::with_template("grid [{elapsed_precise}] {pos}/{len} runs finished")
                    .expect("a valid template"),
            );
            bar.set_position((total - pending.len()) as u64);
            bar
        });
        // The time the runs still to train will take, at the pace of those trained so far by this
        // invocation (on every device together): said after each, as the grid has hours to go.
        let (started, trained) = (std::time::Instant::now(), std::sync::atomic::AtomicUsize::new(0));
        let already = total - pending.len();
        let queue = std::sync::Mutex::new(pending);
        let failed = std::sync::Mutex::new(None::<ExperimentError>);
        let interrupted = std::sync::atomic::AtomicBool::new(false);
        // One worker per device: the next unfinished run of the queue, until it is empty, a run
        // fails (the others finish theirs) or training is interrupted.
        let worker = |g: &Arc<Gpu>| {
            use std::sync::atomic::Ordering::SeqCst;
            while failed.lock().unwrap().is_none() && !interrupted.load(SeqCst) {
                let Some((i, v, seed)) = queue.lock().unwrap().pop_front() else { break };
                match train_run(g, spec, opts, (i, total), v, seed, bars.as_ref()) {
                    Ok(true) => {
                        if let Some(b) = &grid_bar {
                            b.inc(1);
                        }
                        let here = trained.fetch_add(1, SeqCst) + 1;
                        let left = total - already - here;
                        if left > 0 && !opts.quiet {
                            let pace = started.elapsed().as_secs_f64() / here as f64;
                            say(
                                bars.as_ref(),
                                format!(
                                    "grid: {} of {total} to train, about {} more at the pace of the {} trained so far",
                                    crate::plural(left, "run"),
                                    crate::train::cache::age(std::time::Duration::from_secs_f64(pace * left as f64)),
                                    crate::plural(here, "run")
                                ),
                            );
                        }
                    }
                    Ok(false) => interrupted.store(true, SeqCst),
                    Err(e) => {
                        failed.lock().unwrap().get_or_insert(e);
                    }
                }
            }
        };
        if jobs == 1 {
            worker(&gpu);
        } else {
            std::thread::scope(|sc| {
                for (j, g) in devices.iter().take(jobs).enumerate() {
                    // Training's stack, as the main thread's (a spawned thread gets 2 MiB).
                    let started = std::thread::Builder::new()
                        .name(format!("experiment-job-{j}"))
                        .stack_size(64 << 20)
                        .spawn_scoped(sc, || worker(g));
                    if let Err(e) = started {
                        // The jobs already started go on; no new run starts.
                        failed.lock().unwrap().get_or_insert(ExperimentError::Report(format!(
                            "--jobs {}: could not start job {} ({e}); try fewer jobs",
                            devices.len(),
                            j + 1
                        )));
                        break;
                    }
                }
            });
        }
        if let Some(b) = &grid_bar {
            b.finish_and_clear();
        }
        if let Some(e) = failed.into_inner().unwrap() {
            return Err(e);
        }
        if interrupted.into_inner() {
            return Ok(None);
        }
        // The spec's ablations of the finished runs (a grid that asks for them later: from the
        // runs' checkpoints, nothing trained again). No run trains now: a second Ctrl-C's message
        // names no checkpoint.
        crate::train::TRAINING.store(false, std::sync::atomic::Ordering::SeqCst);
        if !super::ablation::ablate_runs(&gpu, spec, out, &variants, opts.quiet)? {
            eprintln!(
                "{} during the ablations: the runs ablated so far are kept; run the same command again to ablate the \
                 rest and write the report",
                crate::train::interruption()
            );
            return Ok(None);
        }
    }
    let mut results = Vec::new();
    let mut missing = Vec::new();
    for &v in &variants {
        for seed in spec.seeds_of(v) {
            match result_of(&out.join("runs").join(run_name(v, seed)), spec.steps) {
                Some(r) => results.push(r),
                None => {
                    // Name a result that is there but cannot be used (the run counts as unfinished).
                    let why = unusable_result(&out.join("runs").join(run_name(v, seed)), spec.steps);
                    // (Said here too: the report's line is easy to miss.)
                    if !why.is_empty() && !opts.quiet {
                        eprintln!(
                            "warning: {} is left out of the report{why}; its run counts as unfinished (run without \
                             --report-only to train it again)",
                            run_name(v, seed)
                        );
                    }
                    missing.push(format!("{}{why}", run_name(v, seed)));
                }
            }
        }
    }
    if results.is_empty() {
        return Err(ExperimentError::Report(format!(
            "{}: no finished runs yet (missing: {}); run without --report-only first",
            out.display(),
            missing.join(", ")
        )));
    }
    // The speed section, once every run is finished (again when the grid grew), or when asked for.
    let measured: BTreeSet<String> =
        speed_rows(out).iter().filter_map(|r| r["variant"].as_str().map(str::to_string)).collect();
    let speed_missing = variants.iter().any(|v| *v != Variant::Baseline && !measured.contains(v.name()));
    // (Steps are measured against the baseline's: a grid without it has no speed section.)
    let has_baseline = variants.contains(&Variant::Baseline);
    if opts.speed && !has_baseline {
        return Err(ExperimentError::Report(
            "--speed: the speed section times each variant's step against the baseline's, and this grid has no \
             baseline variant: add \"baseline\" to the spec's variants"
                .into(),
        ));
    }
    let only_baseline = variants.iter().all(|&v| v == Variant::Baseline);
    if opts.speed && only_baseline {
        return Err(ExperimentError::Report(
            "--speed: the speed section times each variant's step against the baseline's, and this grid has only the \
             baseline: add another variant to the spec's variants"
                .into(),
        ));
    }
    if has_baseline && !only_baseline && (opts.speed || (speed_missing && missing.is_empty() && !opts.report_only)) {
        // No run trains now: a second Ctrl-C's message names no checkpoint.
        crate::train::TRAINING.store(false, std::sync::atomic::Ordering::SeqCst);
        if !measure_speed(&gpu, spec, out, opts.quiet)? {
            eprintln!(
                "{} during the speed measurement: every run is finished; run the same command again to measure the \
                 speed and write the report",
                crate::train::interruption()
            );
            return Ok(None);
        }
    }
    let commits: BTreeSet<(&str, &str)> = results.iter().map(|r| (r.commit.as_str(), r.dirty.as_str())).collect();
    if commits.len() > 1 && !opts.quiet {
        let list: Vec<String> = commits.iter().map(|(c, d)| format!("{} ({d})", &c[..c.len().min(12)])).collect();
        eprintln!(
            "warning: the runs of this report were made by different builds of the engine: {}; the report says so",
            list.join(", ")
        );
    }
    let report = write_report(out, spec, &variants, &results, &missing)?;
    Ok(Some(report))
}

/// Trains run `v`, `seed` of the grid (the `at`-th of its runs, of `of`) on `gpu` (resuming its
/// checkpoint where there is one), then writes its `result.json`. `Ok(false)` when training was
/// interrupted (the checkpoint is saved). With `bars` (other runs are training beside it), its
/// progress is one of those bars on a terminal, else its lines begin with its name.
fn train_run(
    gpu: &Arc<Gpu>,
    spec: &ExperimentSpec,
    opts: &ExperimentOptions,
    (at, of): (usize, usize),
    v: Variant,
    seed: u64,
    bars: Option<&indicatif::MultiProgress>,
) -> Result<bool, ExperimentError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExperimentError::Io { path, source }
    };
    let name = run_name(v, seed);
    let dir = opts.out.join("runs").join(&name);
    let run_cfg = spec.run_config(v, seed).map_err(|msg| ExperimentError::Run { run: name.clone(), msg })?;
    let resume = dir.join(checkpoint::OPTIM_FILE).exists();
    // A checkpoint that does not read (damaged while the grid was stopped) is refused with the
    // grid's remedy before anything is said or opened.
    if resume && let Err(e) = checkpoint::saved_state(&dir) {
        return Err(unreadable_checkpoint(&name, &dir, &e.to_string()));
    }
    if !opts.quiet {
        say(
            bars,
            format!(
                "[{at}/{of}] {name}: {} {} steps -> {}{}",
                match resume {
                    true => match checkpoint::saved_step(&dir) {
                        Ok(step) => format!("resuming at step {step} of"),
                        Err(_) => "resuming,".to_string(),
                    },
                    false => "training".to_string(),
                },
                spec.steps,
                dir.display(),
                if bars.is_some() { " (beside other runs: its bar and lines carry its name)" } else { "" }
            ),
        );
    }
    let show = match bars {
        _ if opts.quiet => Show::Quiet,
        Some(b) => Show::Job { name: name.clone(), bars: b.clone() },
        None => Show::Bar,
    };
    let summary = crate::train::train(
        gpu.clone(),
        TrainOptions {
            run: run_cfg,
            steps: spec.steps,
            out: dir.clone(),
            resume,
            // A run stopped before its first checkpoint starts again.
            overwrite: !resume,
            show,
        },
    )
    .map_err(|source| match source {
        // A checkpoint whose tensors do not read (its metadata did): the grid's remedy, not
        // `ddl train`'s (`--resume KEPT --out NEW` continues it outside the grid).
        crate::train::TrainError::Checkpoint(
            e @ (checkpoint::CheckpointError::Corrupt { .. }
            | checkpoint::CheckpointError::Content { .. }
            | checkpoint::CheckpointError::MissingFile(_)),
        ) if resume => unreadable_checkpoint(&name, &dir, &e.to_string()),
        crate::train::TrainError::Settings(m) if resume && m.starts_with(&format!("--resume {}: ", dir.display())) => {
            unreadable_checkpoint(&name, &dir, &m[format!("--resume {}: ", dir.display()).len()..])
        }
        // (The trainer's remedy names `ddl train`'s flag; a grid takes its settings from the spec.)
        crate::train::TrainError::NonFinite { step, what, value } => ExperimentError::Run {
            run: name.clone(),
            msg: format!(
                "step {step}: the {what} is not finite ({value}); the run stopped without writing a checkpoint. \
                 Lower `lr` under [train] in the spec (a changed spec needs a new --out once runs have trained), or \
                 set `skip_nonfinite = true` under [train] to skip such steps (a run whose final validation loss is \
                 still not finite is then reported as diverged)"
            ),
        },
        source => ExperimentError::Train { run: name.clone(), source: Box::new(source) },
    })?;
    if summary.interrupted {
        say(bars, format!("interrupted during {name}: its checkpoint is saved; run the same command to continue"));
        return Ok(false);
    }
    let result = finish_run(gpu, &dir, v, seed, spec).map_err(|msg| ExperimentError::Run { run: name.clone(), msg })?;
    let path = dir.join("result.json");
    let text = serde_json::to_string_pretty(&result).map_err(|e| ExperimentError::Report(e.to_string()))?;
    checkpoint::write_atomic(&path, text.as_bytes()).map_err(io(&path))?;
    if !opts.quiet {
        let diverged =
            if result.diverged() { " (diverged: listed in the report, left out of its statistics)" } else { "" };
        let skipped = match result.skipped_steps {
            0 => String::new(),
            n => format!(" ({n} of its {} steps skipped as not finite: the report says so)", result.steps),
        };
        say(
            bars,
            format!(
                "[{at}/{of}] {name}: val loss {:.4}{diverged}, train loss {:.4}, {:.0} tok/s{skipped}",
                result.final_val_loss, result.final_train_loss, result.tok_per_s
            ),
        );
    }
    Ok(true)
}

/// The error of run `name` of the grid, in `dir`, whose checkpoint does not read (`problem`).
fn unreadable_checkpoint(name: &str, dir: &Path, problem: &str) -> ExperimentError {
    // (A kept checkpoint named by the trainer continues the run outside the grid only.)
    let problem = problem.split("; its kept checkpoint").next().unwrap_or(problem);
    ExperimentError::Run {
        run: name.to_string(),
        msg: format!("its checkpoint does not read ({problem}), so the grid cannot resume it: {}", train_again(dir)),
    }
}

/// What to do with a grid run that cannot be resumed: it is trained again.
fn train_again(dir: &Path) -> String {
    format!(
        "move '{}' out of the grid (or delete it) and run the same command, which trains the run again from step 0",
        dir.display()
    )
}

/// Before `--jobs` start: every pending variant's matmul tiles measured on one device of each
/// adapter (the others of that adapter share its cache entries), so that no tile is timed while
/// another job trains on the same machine (which would disturb both: the measurement and the
/// run's step times). A variant whose programs cannot be built here is left to its run, which
/// says why. `false`: Ctrl-C stopped it (after the variant being measured).
fn pretune(
    devices: &[&Arc<Gpu>],
    spec: &ExperimentSpec,
    pending: &std::collections::VecDeque<(usize, Variant, u64)>,
    quiet: bool,
) -> bool {
    // Ctrl-C stops after the variant in hand (each measured shape is in the cache already).
    let _ctrlc = crate::train::CtrlcScope::new();
    let mut adapters = BTreeSet::new();
    let mut variants: Vec<(Variant, u64)> = Vec::new();
    for &(_, v, seed) in pending {
        if !variants.iter().any(|(w, _)| *w == v) {
            variants.push((v, seed));
        }
    }
    let (mut shapes, mut secs) = (0, 0.0);
    for g in devices.iter().filter(|g| adapters.insert(adapter_name(g))) {
        for &(v, seed) in &variants {
            if crate::train::interrupted() {
                return false;
            }
            let Ok(run) = spec.run_config(v, seed) else { continue };
            if let Ok((n, s)) = crate::train::tune_for((*g).clone(), &run) {
                shapes += n;
                secs += s;
            }
        }
    }
    if shapes > 0 && !quiet {
        eprintln!(
            "tuned the matmul tiles of {shapes} product shape(s) for the {} variant(s) in {secs:.0} s, before the jobs \
             start",
            variants.len()
        );
    }
    !crate::train::interrupted()
}

/// A line of the grid's own: above the runs' bars while they are drawn (`--jobs` on a terminal),
/// else on stderr.
fn say(bars: Option<&indicatif::MultiProgress>, line: String) {
    use std::io::IsTerminal;
    match bars {
        Some(b) if std::io::stderr().is_terminal() => {
            let _ = b.println(line);
        }
        _ => eprintln!("{line}"),
    }
}

/// How many of the spec's runs `out` does not hold finished (what `--jobs` can share out).
pub fn runs_to_do(spec: &ExperimentSpec, out: &Path) -> Result<usize, String> {
    let variants = spec.variant_list()?;
    Ok(spec
        .all_seeds()
        .into_iter()
        .flat_map(|seed| variants.iter().filter(move |&&v| spec.seeds_of(v).contains(&seed)).map(move |&v| (v, seed)))
        .filter(|&(v, seed)| result_of(&out.join("runs").join(run_name(v, seed)), spec.steps).is_none())
        .count())
}

/// What the grid's folder holds of a run: "finished" (or "finished, to ablate": the spec's
/// ablations are not in its result yet), "resumes at step N" (a checkpoint), or
/// "new"; the last two followed by " (its result.json …)" where one is there that the grid will
/// not use.
pub fn run_state(spec: &ExperimentSpec, out: &Path, v: Variant, seed: u64) -> String {
    let dir = out.join("runs").join(run_name(v, seed));
    // (A run a live process trains now: not "new", nor one to continue.)
    if let Some((pid, host)) = crate::train::lock::holder(&dir) {
        return format!("training now (process {pid} on {host})");
    }
    if let Some(r) = result_of(&dir, spec.steps) {
        // (A spec that asks for ablations the result does not hold yet: made from its checkpoint.)
        let parts = spec.ablate_parts().unwrap_or_default();
        if v.is_ddl() && !parts.is_empty() && !super::ablation::ablated(&r, &parts, spec.ablate_batches) {
            return "finished, to ablate".into();
        }
        return "finished".into();
    }
    // (A result.json there that the grid will not use: why, beside the state.)
    let why = unusable_result(&dir, spec.steps);
    if dir.join(checkpoint::OPTIM_FILE).exists() {
        return match checkpoint::saved_state(&dir).and_then(|_| checkpoint::saved_step(&dir)) {
            Ok(step) => format!("resumes at step {step}{why}"),
            // (It said "resumes from its checkpoint", and the grid then failed on it.)
            Err(_) => "checkpoint does not read (move the folder out to train it again)".into(),
        };
    }
    format!("new{why}")
}

/// Why a run's `result.json` that is there cannot be used, said as " (its result.json …)"; empty
/// when there is none or it can be used.
fn unusable_result(dir: &Path, steps: usize) -> String {
    match std::fs::read_to_string(dir.join("result.json")).map(|t| serde_json::from_str::<RunResult>(&t)) {
        Ok(Err(e)) => format!(" (its result.json is unreadable: {e})"),
        Ok(Ok(r)) if r.steps != steps => format!(" (its result.json is of {} steps, the spec's {steps})", r.steps),
        _ => String::new(),
    }
}

/// The result of a finished run, if `dir` holds one for `steps` steps.
pub(super) fn result_of(dir: &Path, steps: usize) -> Option<RunResult> {
    let text = std::fs::read_to_string(dir.join("result.json")).ok()?;
    let r: RunResult = serde_json::from_str(&text).ok()?;
    (r.steps == steps).then_some(r)
}

/// A file of run `dir` (`metrics.jsonl`, `config.toml`) read right after the run trained: one
/// that does not read was changed while the grid ran, and the error says what running the
/// command again does with the run. (Without config.toml the grid resumes the run from its
/// checkpoint, which writes it again; without metrics.jsonl it resumes too, makes up the final
/// evaluation alone into a new one and is refused as having no training rows, so the run is
/// trained again.)
fn read_after_training(dir: &Path, file: &str) -> Result<String, String> {
    let p = dir.join(file);
    std::fs::read_to_string(&p).map_err(|e| {
        let remedy = if file == "config.toml" {
            "run the same command again: the grid resumes the run from its checkpoint, which writes config.toml \
             again (without a checkpoint it trains the run again from step 0)"
                .to_string()
        } else {
            format!("the training's losses and speed are in it: {}", train_again(dir))
        };
        format!(
            "{}: cannot be read right after the run trained ({e}): the run's folder was changed while the experiment \
             ran; {remedy}",
            p.display()
        )
    })
}

/// Reads a finished run's metrics and counts its β regimes on validation text.
fn finish_run(gpu: &Arc<Gpu>, dir: &Path, v: Variant, seed: u64, spec: &ExperimentSpec) -> Result<RunResult, String> {
    let metrics_path = dir.join("metrics.jsonl");
    let text = read_after_training(dir, "metrics.jsonl")?;
    let m = crate::train::metrics::Metrics::parse(&text);
    let mut tps: Vec<f64> = m.train.iter().filter_map(|r| r.tok_per_s).collect();
    let elapsed = m.train.iter().filter_map(|r| r.elapsed).fold(0.0f64, f64::max);
    // The final evaluation over the whole validation split (its step, loss and tokens).
    let (val_curve, full) = (m.val.clone(), m.full);
    let ck = checkpoint::load(dir, false).map_err(|e| e.to_string())?;
    // Every step writes a row: none for a trained run means its metrics.jsonl went (resumed, the
    // run made up its final evaluation into a new one), and the result would have no training
    // loss or speed (NaN in the report, without a word).
    if m.train.is_empty() && ck.step > 0 {
        return Err(format!(
            "{}: no training step's row, though the run trained {} steps (the file was removed or replaced since): \
             its training loss and speed are gone; {}",
            metrics_path.display(),
            ck.step,
            train_again(dir)
        ));
    }
    // The final evaluation of the final step: never a periodic one in its place (an interrupt
    // stops the final evaluation; resuming the run makes it up).
    let (final_val_loss, val_tokens) = match full {
        Some((step, loss, tokens)) if step == ck.step => (loss, tokens),
        _ => {
            return Err(format!(
                "{}: no final evaluation of step {} (over the whole validation split); resume the run \
                 (run the same command again) to make it",
                metrics_path.display(),
                ck.step
            ));
        }
    };
    let final_train_loss = m.final_train_loss().unwrap_or(f64::NAN);
    // The median over the logged steps (NaN without any).
    let tok_per_s = crate::stats::median(&mut tps);

    let run: RunConfig = {
        let p = dir.join("config.toml");
        let t = read_after_training(dir, "config.toml")?;
        toml::from_str(&t).map_err(|e| format!("{}: {e}", p.display()))?
    };
    let t = &run.train;
    let (regimes, beta_mean) = beta_regimes(gpu, &ck, &run, spec.beta_batches)?;
    Ok(RunResult {
        variant: v.name().to_string(),
        seed,
        params: crate::model::Layout::new(&ck.config).count(),
        steps: ck.step,
        tokens: (ck.step * t.batch_size * t.seq_len * t.grad_accum) as u64,
        final_train_loss,
        final_val_loss,
        final_val_accuracy: m.full_accuracy,
        val_curve,
        tok_per_s,
        elapsed_s: elapsed,
        regimes,
        beta_mean,
        val_tokens,
        commit: crate::build_commit().0.to_string(),
        dirty: crate::build_commit().1.to_string(),
        adapter: adapter_name(gpu),
        ablations: None,
        skipped_steps: m.train.iter().filter(|r| r.skipped_nonfinite).count(),
    })
}

/// Counts, per sublayer, the validation tokens whose β falls in each regime (and the mean β).
/// The validation batches are the first windows of the validation split, the same text for every
/// run of the grid.
pub fn beta_regimes(
    gpu: &Arc<Gpu>,
    ck: &checkpoint::Loaded,
    run: &RunConfig,
    batches: usize,
) -> Result<(RegimeCounts, Vec<f64>), String> {
    if !ck.config.variant.is_ddl() {
        return Ok((Vec::new(), Vec::new()));
    }
    let model = Model::with_params(gpu.clone(), ck.config.clone(), &ck.params).map_err(|e| e.to_string())?;
    let (ds, _) = data::open_for_run(run, Some(&ck.tokenizer)).map_err(|e| e.to_string())?;
    // The first `batches` batches of the validation windows, through the evaluation's own loop;
    // its tick reads each batch's β (a last batch past the split's end: its padding rows left out).
    let t = crate::train::TrainConfig { eval_batches: batches, ..run.train.clone() };
    let span = crate::train::EvalSpan::Periodic;
    let windows = crate::train::eval_windows(&ds, &t, span, t.batch_size, t.seq_len);
    let prog = model.forward_program(t.batch_size, t.seq_len).map_err(|e| e.to_string())?;
    let mut tally = crate::train::eval::BetaTally::default();
    let mut failed = None;
    crate::train::evaluate_sharded(&model, &prog, &ds, &t, span, &crate::train::Single, &mut |k| {
        let rows = (windows - (k.done - 1) * t.batch_size).min(t.batch_size);
        if failed.is_none()
            && let Err(e) = tally.add(&model, &prog, rows)
        {
            failed = Some(e);
        }
        true
    })
    .map_err(|e| e.to_string())?;
    if let Some(e) = failed {
        return Err(e.to_string());
    }
    let means = tally.means();
    Ok((tally.counts, means))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::test_support::spec;

    /// A run's metrics.jsonl or config.toml that does not read right after it trained (its folder
    /// changed while the grid ran) is named with what happened and what to do, per file: it was
    /// "PATH: No such file or directory (os error 2)" alone.
    #[test]
    fn a_run_file_gone_after_training_gets_a_remedy() {
        let dir = crate::testing::scratch_dir("run-file-gone").join("runs").join("ddl-seed1");
        std::fs::create_dir_all(&dir).unwrap();
        let e = read_after_training(&dir, "metrics.jsonl").unwrap_err();
        let path = dir.join("metrics.jsonl").display().to_string();
        assert!(e.starts_with(&format!("{path}: cannot be read right after the run trained (")), "{e}");
        assert!(e.contains("os error 2") && e.contains("changed while the experiment ran"), "{e}");
        // (Run again as it is, the grid resumes the run without its training's metrics.)
        assert!(e.contains(&format!("move '{}' out of the grid", dir.display())), "{e}");
        assert!(e.contains("trains the run again from step 0"), "{e}");
        let e = read_after_training(&dir, "config.toml").unwrap_err();
        assert!(e.contains("changed while the experiment ran"), "{e}");
        assert!(e.contains("run the same command again") && e.contains("writes config.toml again"), "{e}");
        std::fs::write(dir.join("config.toml"), "x = 1").unwrap();
        assert_eq!(read_after_training(&dir, "config.toml").unwrap(), "x = 1");
    }

    /// A run whose result.json is there but not usable (of another length, or unreadable) says
    /// why in its state: `ddl info` and --dry-run called it "new" beside the file, and only the
    /// grid itself said it trains it again.
    #[test]
    fn a_runs_state_names_a_result_it_cannot_use() {
        let s = spec("").unwrap(); // 20 steps
        let out = crate::testing::scratch_dir("run-state-result");
        let dir = out.join("runs").join(run_name(Variant::Ddl, 1));
        std::fs::create_dir_all(&dir).unwrap();
        let r = crate::experiment::test_support::result("ddl", 1, 2.0, "abc");
        let other = RunResult { steps: 99, ..r.clone() };
        std::fs::write(dir.join("result.json"), serde_json::to_string(&other).unwrap()).unwrap();
        let state = run_state(&s, &out, Variant::Ddl, 1);
        assert_eq!(state, "new (its result.json is of 99 steps, the spec's 20)");
        std::fs::write(dir.join("result.json"), "{").unwrap();
        assert!(run_state(&s, &out, Variant::Ddl, 1).starts_with("new (its result.json is unreadable: "));
        std::fs::write(dir.join("result.json"), serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(run_state(&s, &out, Variant::Ddl, 1), "finished");
        assert_eq!(run_state(&s, &out, Variant::Baseline, 1), "new");
        std::fs::remove_dir_all(&out).ok();
    }
}
