//! What `ddl train` prints when a run ends: where its results are, the losses and speed, and a
//! sample from the trained model.

use super::*;

/// The run's `train.checkpoint_every`, as its config.toml says (`?` where it does not read).
pub(super) fn checkpoint_every_of(out: &std::path::Path) -> String {
    ddl::train::RunConfig::read_file(out)
        .and_then(Result::ok)
        .map_or_else(|| "?".to_string(), |c| c.train.checkpoint_every.to_string())
}

/// A run's results: the final validation loss, the best checkpoint and the loss plot.
pub(super) fn print_results(out: &std::path::Path, summary: &ddl::train::Summary) {
    if let Some(v) = summary.val_loss {
        let over = match (summary.val_tokens, summary.val_whole) {
            (Some(n), true) => format!(", over the whole validation split: {n} tokens"),
            (Some(n), false) => format!(", over the validation split's first {n} tokens: train.val_max_tokens"),
            (None, _) => String::new(),
        };
        println!("validation loss {v:.4} (perplexity {:.2}{over})", v.exp());
    }
    if let Some(b) = &summary.best {
        println!(
            "best checkpoint: step {} (validation loss {:.4} over the {} tokens every evaluation covers) in {}",
            b.step,
            b.val_loss,
            b.val_tokens,
            out.join(ddl::train::checkpoint::KEPT_DIR).join(ddl::train::checkpoint::BEST_DIR).display()
        );
    }
    if out.join("loss.png").exists() {
        println!("loss plot: {}", out.join("loss.png").display());
    }
}

pub(super) fn report_training(
    dev: &DeviceArgs,
    a: &TrainArgs,
    out: &std::path::Path,
    summary: &ddl::train::Summary,
) -> Result<()> {
    if summary.interrupted {
        // With the command that goes on (it said where the checkpoint was, not how to continue);
        // at the last step the final evaluation was stopped (or not begun), which it makes up.
        let resume = match a.distributed {
            Some(_) => format!("`mpirun -n N ddl train --resume {} --distributed mpi`", ddl::shell_word(out)),
            None => format!("`ddl train --resume {}`", ddl::shell_word(out)),
        };
        let then = if summary.step >= summary.target {
            format!("the final evaluation was not made: {resume} makes it up")
        } else {
            format!("{resume} continues it to step {}", summary.target)
        };
        eprintln!(
            "interrupted ({}) at step {}: checkpoint saved in {}; {then}",
            ddl::train::interruption(),
            summary.step,
            out.display()
        );
        return Ok(());
    }
    if summary.losses.is_empty() && summary.val_tokens.is_some() {
        println!(
            "the run is at step {} already (--steps {}): its final evaluation, stopped before or missing from metrics.jsonl, is done now",
            summary.step, summary.target
        );
    } else if summary.losses.is_empty() {
        println!(
            "nothing to train: the run is at step {} already (--steps {}); pass a larger --steps to continue it",
            summary.step, summary.target
        );
    } else {
        println!("step {}: train loss {:.4}", summary.step, summary.last_loss);
    }
    if summary.skipped_nonfinite > 0 {
        println!(
            "{} of {} steps skipped for a non-finite loss or gradient norm (train.skip_nonfinite; metrics.jsonl marks \
             them \"skipped\": true): a lower train.lr or train.grad_clip may keep them finite",
            summary.skipped_nonfinite,
            summary.losses.len()
        );
    }
    print_results(out, summary);
    // Early stopping's lowest point is kept only where it fell on a checkpoint step.
    if let Some(stop) = &summary.stopped_early
        && summary.best.as_ref().is_none_or(|b| b.step != stop.best_step)
    {
        println!(
            "note: the validation curve was lowest at step {}, which is no checkpoint step (train.checkpoint_every = \
             {}), so its parameters are not kept{}; with train.checkpoint_every = train.eval_every every evaluated \
             step is saved and the best of them kept",
            stop.best_step,
            checkpoint_every_of(out),
            summary.best.as_ref().map(|b| format!(" (the best checkpoint is step {}'s)", b.step)).unwrap_or_default()
        );
    }
    if let Some((peak, plan)) = summary.memory {
        let mib = |b: u64| b as f64 / 1048576.0;
        if summary.host_device_memory {
            println!(
                "memory: peak resident +{:.1} MiB after the device was created: the model's buffers (plan {:.1} \
                 MiB) and the CPU driver's compiled kernels and workspace",
                mib(peak),
                mib(plan)
            );
        } else {
            println!(
                "host memory: peak resident +{:.1} MiB after the device was created (the model's {:.1} MiB plan is \
                 on the GPU)",
                mib(peak),
                mib(plan)
            );
        }
    }
    print_sample(dev, out, a.sample)
}

/// `--sample N`: N tokens of the run's model after a newline (nothing for 0).
pub(super) fn print_sample(dev: &DeviceArgs, out: &std::path::Path, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // (The run is saved: Ctrl-C now stops the sample at once, saying so; `ddl generate` stops
    // at the next token instead, keeping its text: GenerateHow::stop_cleanly.)
    ddl::train::stop_at_once_from_now("stopped the sample (the run was saved before it)");
    // The sample runs as `ddl generate` would: on the tiles measured so far and the heuristic,
    // measuring none (training turned measuring on; the decode's shapes would be tuned here,
    // seconds of notes after "--- sample ---" on a fresh cache).
    ddl::kernels::matmul::autotune::set_enabled(false);
    println!("--- sample ---");
    let s = SamplingArgs {
        max_tokens: n,
        temperature: 0.8,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        repetition_penalty: 1.0,
        seed: 0,
        stop: Vec::new(),
    };
    let how = crate::GenerateHow {
        trace: None,
        strict_context: false,
        interventions: &Default::default(),
        compare: false,
        samples: 1,
        logprobs: None,
        score_prompt: false,
        lens: false,
        json: false,
        stop_cleanly: false,
        length_flag: "--sample",
    };
    crate::generate_cmd(dev, out, "\n", &s, how)?;
    println!();
    Ok(())
}
