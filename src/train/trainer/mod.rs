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

mod open;
pub(super) use open::open_new_run_data;
pub use open::tune_for;

/// One run in progress on one rank.
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
                    crate::shell_word(&out)
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
            "steps_target": self.end,
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
        let (out, word) = (self.out.display(), crate::shell_word(&self.out));
        match self.last_saved {
            _ if !self.out.is_dir() => format!(
                "The run folder '{out}' no longer exists (moved or removed while the run trained): what it held went \
                 with it; where it was moved, `ddl train --resume NEW_PLACE` continues the run"
            ),
            Some(s) => format!(
                "The checkpoint of step {s} in '{out}' is intact; free disk space or fix the folder's permissions, \
                 then continue with `ddl train --resume {word}`"
            ),
            None => format!(
                "No checkpoint had been written yet; free disk space or fix the folder's permissions, then start \
                 the run again (`ddl train … --out {word} --overwrite`)"
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
        let (out, word) = (self.out.display(), crate::shell_word(&self.out));
        let kept = format!(
            "The checkpoint of step {step} itself is saved in '{out}' (what failed is its copy under checkpoints/); \
             free disk space or fix the folder's permissions, then continue with `ddl train --resume {word}`"
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
        // evaluation an interrupt stopped, or whose metrics.jsonl lost it (nothing trained, but
        // its result is not logged). Rank 0's file decides for every rank (they evaluate together).
        let mut missing = vec![u8::from(step == self.start && super::final_evaluation_row(&self.out, step).is_none())];
        if self.distributed && step == self.start {
            self.comm.broadcast_bytes(&mut missing, "whether the final evaluation is logged");
        }
        let evaluate = step > self.start || missing.first() == Some(&1);
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

/// Whether an evaluation's `loss` beats the best so far (`train.early_stop`, the best checkpoint):
/// one that is not a finite number (an evaluation that overflowed) never does, so that it
/// cannot stand as a best no later evaluation beats.
fn improves(best: Option<(usize, f64)>, loss: f64) -> bool {
    loss.is_finite() && best.is_none_or(|(_, b)| loss < b)
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
