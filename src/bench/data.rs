//! `ddl bench data`: the training data path at scale. For a small and a large shard set (the
//! large one ≥ 1 GB by default), made the way users make theirs — synthetic text (lines of the
//! built-in corpus in a seeded random order) through `ddl data prepare` — it reports the
//! preparation's MB/s and peak resident memory, then for each set: opening it, drawing batches
//! straight from the memory-mapped shards (cold pages first), and a short `ddl train --data` run
//! (start-up time, the time each step waited for its batches, peak resident memory against the
//! plan). Start-up and memory should not grow with the set: the shards are mapped, not read.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::Row;
use crate::gpu::Gpu;
use crate::model::Variant;
use crate::train::prepare::{PrepareOptions, ValSplit, prepare};
use crate::train::progress::{reset_peak_rss, rss};
use crate::train::{RunConfig, data};

/// What `ddl bench data` runs.
#[derive(Debug, Clone)]
pub struct DataBench {
    /// Where the sets are made (removed afterwards unless `keep`).
    pub dir: PathBuf,
    /// Shard bytes of the small and the large set (MiB; two bytes per token).
    pub small_mib: usize,
    pub mib: usize,
    /// Training steps per set, and the model they train.
    pub steps: usize,
    pub preset: String,
    pub variant: Variant,
    /// Batches drawn and timed per set outside training.
    pub draws: usize,
    pub keep: bool,
}

const MIB: f64 = 1048576.0;

/// Writes about `bytes` bytes of text to `path`: lines of the built-in corpus in a seeded random
/// order (so the text is not one block repeated).
fn write_text(path: &Path, bytes: u64, seed: u64) -> std::io::Result<()> {
    let corpus = data::embedded_corpus();
    let lines: Vec<&str> = corpus.lines().collect();
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let (mut written, mut x) = (0u64, seed | 1);
    while written < bytes {
        if crate::train::interrupted() {
            let how = format!("interrupted ({})", crate::train::interruption());
            return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, how));
        }
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let line = lines[(x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % lines.len()];
        f.write_all(line.as_bytes())?;
        f.write_all(b"\n")?;
        written += line.len() as u64 + 1;
    }
    f.flush()
}

/// Peak resident bytes added since `rss0` (Linux), in MiB.
fn peak_added_mib(rss0: Option<u64>) -> Option<f64> {
    let (_, peak) = rss()?;
    Some(peak.saturating_sub(rss0?) as f64 / MIB)
}

/// The most disk the benchmark holds at once, in bytes: a set's shards beside its text (half
/// their bytes) while they are made, then beside a run's checkpoint (its parameters and two AdamW
/// moments in f32), the small set and its run too when kept, and 64 MiB to spare.
pub fn disk_needed(o: &DataBench) -> anyhow::Result<u64> {
    let cfg = crate::model::ModelConfig::preset(&o.preset, o.variant)?;
    let checkpoint = 12 * crate::model::Layout::new(&cfg).total as u64;
    // Saturating: a size no disk holds says so (u64::MAX bytes needed) rather than wrapping to a
    // small number that passes the free-space check.
    let mib = |m: usize| (m as u64).saturating_mul(1 << 20);
    let (small, large) = (mib(o.small_mib), mib(o.mib));
    // A set's shards beside its text while they are made, then beside the run's checkpoint (the
    // text is removed before it trains); the small set and its run too when kept.
    let set = |shards: u64| shards.saturating_add((shards / 2).max(checkpoint));
    let kept = if o.keep { small.saturating_add(checkpoint) } else { 0 };
    Ok(set(small).max(kept.saturating_add(set(large))).saturating_add(64 << 20))
}

/// What the benchmark makes in its folder: each set's text, shards and run.
const MADE: [&str; 6] = ["small.txt", "small-shards", "small-run", "large.txt", "large-shards", "large-run"];

/// Refuses a `--dir` that is not a folder, or that already holds one of the names the benchmark
/// makes there (and replaces, then removes): an earlier `--keep` run's sets, or files of the
/// user's that happen to share a name.
pub fn check_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!("--dir {}: is a file, not a folder; give a folder (new, or one of yours)", dir.display());
    }
    let there: Vec<&str> = MADE.iter().copied().filter(|m| dir.join(m).symlink_metadata().is_ok()).collect();
    if !there.is_empty() {
        anyhow::bail!(
            "--dir {}: already holds {} (an earlier `ddl bench data --keep` leaves its sets there), which the \
             benchmark would replace and then remove; move or remove {}, or give another --dir",
            dir.display(),
            there.join(", "),
            if there.len() == 1 { "it" } else { "them" }
        );
    }
    Ok(())
}

/// Runs the benchmark, one row per measurement. The sets it makes in `o.dir` (their text,
/// shards and runs, and the folder and those above it when it made them) are removed afterwards
/// unless `o.keep`, and whenever it stops early (an error, Ctrl-C: [`crate::train::interrupted`]);
/// a `--dir` that already holds a name it makes is refused first ([`check_dir`]).
pub fn data_rows(gpu: &Arc<Gpu>, o: &DataBench, mut emit: impl FnMut(Row)) -> anyhow::Result<()> {
    use anyhow::Context;
    check_dir(&o.dir)?;
    // The folder and those above it that this run makes, deepest first.
    let made_dirs = crate::train::data::missing_folders(&o.dir);
    std::fs::create_dir_all(&o.dir).with_context(|| format!("creating --dir {}", o.dir.display()))?;
    let sets = [("small", o.small_mib), ("large", o.mib)];
    let remove_made = |set: &str| {
        let _ = std::fs::remove_file(o.dir.join(format!("{set}.txt")));
        let _ = std::fs::remove_dir_all(o.dir.join(format!("{set}-shards")));
        let _ = std::fs::remove_dir_all(o.dir.join(format!("{set}-run")));
    };
    let mut made = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        let need = disk_needed(o)?;
        if let Some(free) = crate::train::checkpoint::free_bytes(&o.dir)
            && free < need
        {
            anyhow::bail!(
                "--dir {}: {} MiB free, and the benchmark needs about {} MiB at once (text beside its shards, a \
                 run's checkpoint); lower --mib (or --small-mib), or give a --dir with more space",
                o.dir.display(),
                free >> 20,
                need.div_ceil(1 << 20)
            );
        }
        for (set, mib) in sets {
            made.push(set);
            let shards = make_set(o, set, mib, &mut emit)?;
            time_draws(o, set, &shards, &mut emit)?;
            train_on(gpu, o, set, &shards, &mut emit)?;
            if !o.keep {
                remove_made(set);
            }
        }
        Ok(())
    })();
    let stopped = result.is_err() || crate::train::interrupted();
    if !o.keep || stopped {
        for set in &made {
            remove_made(set);
        }
    }
    if !o.keep || stopped {
        for d in &made_dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
    result
}

/// Synthetic text of half `mib` MiB through `ddl data prepare` (char tokens: two bytes of shard
/// per byte of text); returns the shard folder.
fn make_set(o: &DataBench, set: &str, mib: usize, emit: &mut impl FnMut(Row)) -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    let text = o.dir.join(format!("{set}.txt"));
    let out = o.dir.join(format!("{set}-shards"));
    let _ = std::fs::remove_dir_all(&out);
    let t0 = Instant::now();
    write_text(&text, (mib as u64) << 19, 7 + mib as u64).with_context(|| format!("writing {}", text.display()))?;
    let text_s = t0.elapsed().as_secs_f64();
    reset_peak_rss();
    let rss0 = rss().map(|r| r.0);
    let p = prepare(&PrepareOptions {
        tokenizer: "char".into(),
        out: out.clone(),
        inputs: vec![text.clone()],
        val: ValSplit::Fraction(0.01),
        shard_tokens: 100_000_000,
        name: "bench".into(),
        quiet: true,
    });
    let _ = std::fs::remove_file(&text);
    let p = p?;
    let shard_bytes: u64 = p.files.iter().map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0)).sum();
    emit(Row(json!({
        "bench": "data_prepare",
        "set": set,
        "text_mb": p.bytes as f64 / 1e6,
        "text_write_s": text_s,
        "shard_mb": shard_bytes as f64 / 1e6,
        "shards": p.files.len(),
        "tokens": p.train_tokens + p.val_tokens,
        "seconds": p.seconds,
        "mb_per_s": p.bytes as f64 / 1e6 / p.seconds,
        "tokens_per_s": (p.train_tokens + p.val_tokens) as f64 / p.seconds,
        "peak_rss_added_mib": peak_added_mib(rss0),
    })));
    Ok(out)
}

/// The `--set` settings of the benchmark's runs (on `o`'s preset): no evaluation or checkpoint
/// during the steps, a log line per step, a final evaluation of four batches.
fn bench_settings(o: &DataBench) -> Vec<String> {
    let t = crate::train::TrainConfig::preset(&o.preset);
    vec![
        "train.eval_every=0".into(),
        "train.checkpoint_every=0".into(),
        "train.checkpoint_keep=0".into(),
        "train.log_every=1".into(),
        format!("train.val_max_tokens={}", 4 * t.batch_size * t.seq_len),
    ]
}

/// A run of `o`'s preset and variant on the shards in `shards`, with [`bench_settings`].
fn run_config(o: &DataBench, shards: &Path) -> anyhow::Result<RunConfig> {
    let mut run = RunConfig::preset(&o.preset, o.variant)?;
    run.data = shards.to_string_lossy().into_owned();
    for kv in bench_settings(o) {
        run.set(&kv).map_err(anyhow::Error::msg)?;
    }
    Ok(run)
}

/// Opens the set and draws `o.draws` batches at steps spread over the whole stream, timed one
/// by one (the first touches of their pages are reads from the file or the page cache).
fn time_draws(o: &DataBench, set: &str, shards: &Path, emit: &mut impl FnMut(Row)) -> anyhow::Result<()> {
    let run = run_config(o, shards)?;
    reset_peak_rss();
    let rss0 = rss().map(|r| r.0);
    let t0 = Instant::now();
    let (ds, _) = data::open_for_run(&run, None)?;
    let open_s = t0.elapsed().as_secs_f64();
    let t = &run.train;
    let steps_in_set = (ds.split / (t.batch_size * t.seq_len)).max(1);
    let mut ms = Vec::with_capacity(o.draws);
    for i in 0..o.draws.max(1) {
        let step = (i * 7919 * steps_in_set / o.draws.max(1)) % steps_in_set;
        let t1 = Instant::now();
        let (x, _) = ds.train_batch(t.seed, step, 0, t.batch_size, t.seq_len)?;
        ms.push(t1.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(x);
    }
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    let median = crate::stats::median(&mut ms); // (sorts `ms`)
    emit(Row(json!({
        "bench": "data_draw",
        "set": set,
        "train_tokens": ds.split,
        "open_s": open_s,
        "batch_tokens": t.batch_size * t.seq_len,
        "draws": ms.len(),
        "draw_ms_mean": mean,
        "draw_ms_median": median,
        "draw_ms_max": ms[ms.len() - 1],
        "peak_rss_added_mib": peak_added_mib(rss0),
    })));
    Ok(())
}

/// Runs `cmd` to its end with its output collected, as `Command::output` does, but passes an
/// interruption of this process on: a Ctrl-C at a terminal reaches both processes, while a
/// SIGTERM sent to this one alone (`kill`, a job scheduler) would otherwise leave the training run
/// going after the benchmark stopped. The run gets SIGTERM (it stops cleanly; a signal it already
/// had within half a second counts as the same one), and this waits for it to end.
fn run_passing_interruptions(
    mut cmd: std::process::Command,
) -> std::io::Result<(std::process::ExitStatus, Vec<u8>, Vec<u8>)> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    fn drain<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    }
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let mut passed_on = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if crate::train::interrupted() && !passed_on {
            passed_on = true;
            #[cfg(unix)]
            // SAFETY: kill(2) on the pid of a child not yet waited for (it cannot have been reused).
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            #[cfg(not(unix))]
            let _ = child.kill();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Ok((status, out.join().unwrap_or_default(), err.join().unwrap_or_default()))
}

/// `ddl train --data` for `o.steps` steps, as a child process of its own (the current executable,
/// or `DDL_BIN`) on the same adapter: its start-up, the time each step waited for its batches and
/// its peak resident memory are what a user's run sees (`summary.json`, `metrics.jsonl`).
fn train_on(gpu: &Arc<Gpu>, o: &DataBench, set: &str, shards: &Path, emit: &mut impl FnMut(Row)) -> anyhow::Result<()> {
    use anyhow::Context;
    let out = o.dir.join(format!("{set}-run"));
    let _ = std::fs::remove_dir_all(&out);
    let exe = match std::env::var_os("DDL_BIN") {
        Some(b) => PathBuf::from(b),
        None => std::env::current_exe().context("finding the ddl executable (set DDL_BIN)")?,
    };
    let sets = bench_settings(o);
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(["train", "--preset", &o.preset, "--variant", o.variant.name(), "--steps", &o.steps.to_string()])
        .arg("--data")
        .arg(shards)
        .arg("--out")
        .arg(&out)
        // The same adapter (by name, on its backend: GL and Vulkan may both list llvmpipe) and
        // the same --no-autotune.
        .env("DDL_ADAPTER", &gpu.info.name)
        .env("DDL_BACKEND", format!("{:?}", gpu.info.backend).to_ascii_lowercase())
        .env("DDL_NO_AUTOTUNE", if crate::kernels::matmul::autotune::enabled() { "0" } else { "1" });
    for kv in &sets {
        cmd.args(["--set", kv]);
    }
    let (status, stdout, stderr) =
        run_passing_interruptions(cmd).with_context(|| format!("running {}", exe.display()))?;
    if crate::train::interrupted() {
        anyhow::bail!("interrupted ({}) during the training run on the {set} set", crate::train::interruption());
    }
    if !status.success() {
        anyhow::bail!(
            "the training run on the {set} set failed: {}{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
    }
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).with_context(|| format!("reading {}", out.display()))?,
    )?;
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let data_ms: Vec<f64> = rows.iter().filter_map(|r| r["data_ms"].as_f64()).collect();
    let n = data_ms.len().max(1) as f64;
    // The first step has no prefetched batches; the others were drawn during the step before.
    // (None with one step: no step after the first.)
    let later = data_ms.iter().skip(1).copied().reduce(f64::max);
    let mib = |k: &str| summary[k].as_f64().map(|b| b / MIB);
    emit(Row(json!({
        "bench": "data_train",
        "set": set,
        "steps": summary["step"],
        "startup_s": summary["startup_s"],
        "data_open_s": summary["data_open_s"],
        "data_ms_first": data_ms.first(),
        "data_ms_mean": data_ms.iter().sum::<f64>() / n,
        "data_ms_max_after_first": later,
        "tokens_per_s": summary["tokens_per_s"],
        "peak_rss_added_mib": mib("peak_resident_added_bytes"),
        "plan_mib": mib("memory_plan_bytes"),
    })));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_no_disk_holds_needs_more_than_any_disk_has() {
        // (MiB << 20 wrapped for 2^44 MiB to a few MiB, which passed the free-space check and
        // wrote text without end.)
        let o = |mib: usize, keep| DataBench {
            dir: PathBuf::from("unused"),
            small_mib: 1,
            mib,
            steps: 1,
            preset: "tiny".into(),
            variant: Variant::Ddl,
            draws: 1,
            keep,
        };
        for keep in [false, true] {
            assert_eq!(disk_needed(&o(1 << 44, keep)).unwrap(), u64::MAX);
            assert_eq!(disk_needed(&o(usize::MAX, keep)).unwrap(), u64::MAX);
            let small = disk_needed(&o(16, keep)).unwrap();
            assert!(small > 16 << 20 && small < 1 << 30, "{small}");
        }
    }
}
