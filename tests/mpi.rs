//! Data-parallel training with MPI (`cargo test -p ddl --features mpi --test mpi`; needs
//! `mpirun` on the PATH, e.g. Debian's `openmpi-bin`): two ranks on one machine (both on the same
//! adapter) against one process with the same global batch, resume, and failures that must end
//! the job with a clear error instead of hanging.
#![cfg(feature = "mpi")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const DDL: &str = env!("CARGO_BIN_EXE_ddl");

/// The tests run one after another: each starts several processes that share the machine's
/// cores (and, with lavapipe, the adapter is those cores too).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn tmpdir(name: &str) -> PathBuf {
    ddl::testing::scratch_dir(&format!("mpi-test-{name}"))
}

/// `ddl train` arguments of a model small enough to train in seconds on lavapipe; the global
/// batch is 2 micro-batches of 2 sequences.
fn train_args(corpus: &str, steps: usize) -> Vec<String> {
    let mut a: Vec<String> =
        ["train", "--preset", "tiny", "--variant", "ddl", "--corpus", corpus].iter().map(|s| s.to_string()).collect();
    a.extend(["--steps".to_string(), steps.to_string()]);
    for kv in [
        "model.d_model=32",
        "model.n_layers=1",
        "model.n_heads=2",
        "model.head_dim=16",
        "model.mlp_hidden=85",
        "train.batch_size=2",
        "train.seq_len=16",
        "train.grad_accum=2",
        "train.eval_every=0",
        "train.eval_batches=3",
        "train.checkpoint_every=0",
        "train.warmup_steps=2",
    ] {
        a.extend(["--set".to_string(), kv.to_string()]);
    }
    a
}

/// `mpirun` with the settings that work in a container as root: root allowed, more ranks than
/// cores allowed, ranks yield the CPU while they wait (the adapters here are CPU threads too).
fn mpirun(dir: &Path) -> Command {
    let mut c = Command::new("mpirun");
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .env("OMPI_MCA_mpi_yield_when_idle", "1")
        .env("DDL_CACHE_DIR", dir.join("cache"))
        .current_dir(dir);
    c
}

/// Runs `cmd`, killing it after `limit`; returns its output and whether it finished in time.
fn run_limited(mut cmd: Command, limit: Duration) -> (Output, bool) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("cannot start the command");
    let t0 = Instant::now();
    let mut in_time = true;
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            in_time = false;
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (child.wait_with_output().unwrap(), in_time)
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The training losses of `metrics.jsonl`, in order.
fn losses(run: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter_map(|v| v.get("loss").and_then(|l| l.as_f64()))
        .collect()
}

fn mpirun_available() -> bool {
    let ok = Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("mpirun not found: skipping (install openmpi-bin, or run scripts/setup.sh)");
    }
    ok
}

/// Relative tolerance between the losses of one process and of 2 ranks. The ranks compute the
/// same sequences with the same kernels; only the order of the float32 gradient sums differs
/// (single process: accumulated on the GPU micro-batch after micro-batch; ranks: per-rank sums
/// added by MPI), which moves the parameters by a few ulps per step.
const LOSS_RTOL: f64 = 1e-5;

#[test]
fn two_ranks_match_one_process_keep_identical_parameters_and_resume_exactly() {
    let _serial = serial();
    if !mpirun_available() {
        return;
    }
    let dir = tmpdir("match");
    let c = ddl::testing::small_corpus(&dir);
    let limit = Duration::from_secs(240);
    let ranks = |steps: usize, extra: &[&str]| {
        let mut m = mpirun(&dir);
        m.args(["-n", "2", DDL]).args(train_args(&c, steps)).args(["--distributed", "mpi", "--mpi-timeout", "60"]);
        m.args(extra);
        let (o, in_time) = run_limited(m, limit);
        assert!(in_time && o.status.success(), "mpirun -n 2 {extra:?}: {}", show(&o));
        o
    };
    // The ranks first, on a fresh matmul tile cache: rank 0 measures, rank 1 takes its choices
    // instead of timing the same adapter at the same time (which disturbed both measurements).
    assert!(!dir.join("cache/matmul-autotune.json").exists());
    let o = ranks(6, &["--out", "ranks"]);
    let err = String::from_utf8_lossy(&o.stderr);
    for r in 0..2 {
        assert!(err.contains(&format!("rank {r}/2")) && err.contains("drives adapter"), "rank {r} adapter line: {err}");
    }
    assert_eq!(err.matches("tuning matmul tiles").count(), 1, "one rank measures: {err}");
    // Then one process, on the cache the ranks filled: both runs use the same kernels.
    let mut single = Command::new(DDL);
    single.args(train_args(&c, 6)).args(["--out", "single"]).env("DDL_CACHE_DIR", dir.join("cache")).current_dir(&dir);
    let (o, in_time) = run_limited(single, limit);
    assert!(in_time && o.status.success(), "single process: {}", show(&o));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("tuning matmul tiles"), "{}", show(&o));

    let a = losses(&dir.join("single"));
    let b = losses(&dir.join("ranks"));
    // Rank 0 alone writes metrics: six lines, not twelve.
    assert_eq!((a.len(), b.len()), (6, 6), "single {a:?} ranks {b:?}");
    // The first step starts from the same parameters: the same sequences give the same loss.
    assert_eq!(a[0], b[0], "step 1 must see the same global batch: single {a:?} ranks {b:?}");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= LOSS_RTOL * x.abs(), "step {}: single {x} vs 2 ranks {y} (rtol {LOSS_RTOL})", i + 1);
    }
    // (docs/TRAINING.md quotes this line: `-- --nocapture two_ranks_match`.)
    let largest = a.iter().zip(&b).map(|(x, y)| (x - y).abs() / x.abs()).fold(0.0, f64::max);
    eprintln!(
        "2 ranks against one process: the largest relative loss difference in {} steps is {largest:.1e}",
        a.len()
    );
    assert!(b[5] < b[0], "the loss did not go down: {b:?}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("ranks/distributed.json")).unwrap()).unwrap();
    let digests = report["params_digest_by_rank"].as_array().unwrap();
    assert_eq!(digests.len(), 2, "{report}");
    assert_eq!(digests[0], digests[1], "parameters differ between the ranks: {report}");
    assert_eq!(report["allreduce_bytes_per_step"].as_u64().unwrap() % 4, 0);
    // The run's first line says how many all-reduces a step makes, as the report counts them.
    let pieces = |err: &str| -> u64 {
        let at = err.find(" piece(s)").unwrap_or_else(|| panic!("no piece count: {err}"));
        err[..at].rsplit(' ').next().unwrap().parse().unwrap()
    };
    let plain = report["buckets_per_step"].as_u64().unwrap();
    assert_eq!(pieces(&err), plain, "{err}");

    // The exchange overlapped with the backward pass (block by block) gives the same result.
    let o = ranks(6, &["--out", "overlapped", "--mpi-overlap", "backward"]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("piece(s), block by block beside the backward"), "{err}");
    let o = losses(&dir.join("overlapped"));
    assert_eq!(o.len(), 6, "{o:?}");
    assert_eq!(a[0], o[0], "step 1, --mpi-overlap backward: single {a:?} ranks {o:?}");
    for (i, (x, y)) in a.iter().zip(&o).enumerate() {
        assert!((x - y).abs() <= LOSS_RTOL * x.abs(), "step {}, --mpi-overlap backward: {x} vs {y}", i + 1);
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("overlapped/distributed.json")).unwrap()).unwrap();
    assert_eq!(report["overlap_backward"], true, "{report}");
    // Each block's gradients go in their own all-reduce (the line said 1 bucket).
    let overlapped = report["buckets_per_step"].as_u64().unwrap();
    assert!(overlapped > plain && pieces(&err) == overlapped, "{overlapped} vs {plain}: {err}");
    let digests = report["params_digest_by_rank"].as_array().unwrap();
    assert_eq!(digests[0], digests[1], "--mpi-overlap backward: parameters differ between the ranks: {report}");

    // Two micro-batches per rank (train.grad_accum=4 on 2 ranks): each rank runs its micro-batches'
    // forward and backward passes in one submit (or the last one's backward interleaved with the
    // exchange) and equals one process accumulating all four.
    let four = ["--set", "train.grad_accum=4"];
    let mut single4 = Command::new(DDL);
    single4.args(train_args(&c, 4)).args(four).args(["--out", "single4"]);
    single4.env("DDL_CACHE_DIR", dir.join("cache")).current_dir(&dir);
    let (o, in_time) = run_limited(single4, limit);
    assert!(in_time && o.status.success(), "single process, 4 micro-batches: {}", show(&o));
    let a4 = losses(&dir.join("single4"));
    for (out, extra) in [("ranks4", &[][..]), ("overlapped4", &["--mpi-overlap", "backward"][..])] {
        let mut args = vec!["--out", out];
        args.extend(four);
        args.extend(extra);
        ranks(4, &args);
        let r4 = losses(&dir.join(out));
        assert_eq!(r4.len(), 4, "{out}: {r4:?}");
        assert_eq!(a4[0], r4[0], "step 1, {out}: single {a4:?} ranks {r4:?}");
        for (i, (x, y)) in a4.iter().zip(&r4).enumerate() {
            assert!((x - y).abs() <= LOSS_RTOL * x.abs(), "step {}, {out}: single {x} vs 2 ranks {y}", i + 1);
        }
    }

    // Resume: 3 steps, then on to 6 from the checkpoint, gives the uninterrupted losses exactly.
    ranks(3, &["--out", "resumed"]);
    ranks(6, &["--resume", "resumed"]);
    let r = losses(&dir.join("resumed"));
    assert_eq!(r, b, "resumed 2-rank run vs uninterrupted 2-rank run");
    // Resumed again at its last step: nothing to train, and the report of the steps trained is
    // kept (it was replaced by one of no step and zero times).
    let report = || std::fs::read_to_string(dir.join("resumed/distributed.json")).unwrap();
    let trained = report();
    let o = ranks(6, &["--resume", "resumed"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("nothing to train"), "{}", show(&o));
    assert_eq!(report(), trained, "a resume that trained nothing rewrote distributed.json");
    // Its metrics.jsonl cut in the final evaluation's row (a copy cut short): the ranks make it
    // again together, nothing trained (it was "nothing to train", keeping the torn line).
    let metrics = dir.join("resumed/metrics.jsonl");
    let whole = std::fs::read_to_string(&metrics).unwrap();
    let last = whole.trim_end().lines().last().unwrap();
    assert!(last.contains("\"val_full\":true"), "{whole}");
    std::fs::write(&metrics, &whole[..whole.len() - last.len() / 2 - 1]).unwrap();
    let o = ranks(6, &["--resume", "resumed"]);
    assert!(
        show(&o).contains("lacks the final evaluation of step 6") && !show(&o).contains("nothing to train"),
        "{}",
        show(&o)
    );
    assert_eq!(std::fs::read_to_string(&metrics).unwrap(), whole, "the ranks' evaluation is not the row that was lost");
    assert_eq!(report(), trained, "a resume that trained nothing rewrote distributed.json");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ranks_with_different_settings_all_fail_clearly_without_hanging() {
    let _serial = serial();
    if !mpirun_available() {
        return;
    }
    let dir = tmpdir("mismatch");
    let c = ddl::testing::small_corpus(&dir);
    // MPMD: rank 1 is given another learning rate.
    let mut m = mpirun(&dir);
    m.args(["-n", "1", DDL]).args(train_args(&c, 4)).args(["--distributed", "mpi", "--out", "run"]);
    m.args([":", "-n", "1", DDL]).args(train_args(&c, 4));
    m.args(["--set", "train.lr=0.002", "--distributed", "mpi", "--out", "run"]);
    let (o, in_time) = run_limited(m, Duration::from_secs(120));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(in_time, "mpirun did not end within 120 s: {}", show(&o));
    assert!(!o.status.success(), "{}", show(&o));
    for r in 0..2 {
        assert!(
            err.contains(&format!("error: rank {r}/2")) && err.contains("started with different settings"),
            "rank {r} must report the mismatch: {err}"
        );
    }
    assert!(err.contains("train.lr = 0.002 here, 0.003 on rank 0"), "the differing setting must be named: {err}");
    // A refused start does not first say it is training.
    assert!(!err.contains("training ddl"), "{err}");
    // A global batch the ranks cannot share: the setting, the rank count and a value that works
    // are named, and nothing was said to train or left behind.
    let mut m = mpirun(&dir);
    m.args(["-n", "2", DDL]).args(train_args(&c, 4));
    m.args(["--set", "train.grad_accum=3", "--distributed", "mpi", "--out", "odd"]);
    let (o, in_time) = run_limited(m, Duration::from_secs(120));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(in_time && !o.status.success(), "{}", show(&o));
    assert!(
        err.contains("train.grad_accum = 3 is not a multiple of the 2 ranks") && err.contains("train.grad_accum=4"),
        "{err}"
    );
    assert!(!err.contains("training ddl") && !dir.join("odd").exists(), "{err}");
    // (Said before MPI starts: no adapter was opened, no data read, for a setting.)
    assert!(!err.contains("drives adapter"), "{err}");
    // Tile measurements off on rank 0 only (--no-autotune, or DDL_NO_AUTOTUNE in one machine's
    // environment): refused at start-up, where rank 1 waited for rank 0's measurements until its
    // watchdog fired (10 × --mpi-timeout, 50 minutes by default) and named no cause.
    let mut m = mpirun(&dir);
    m.args(["-n", "1", DDL, "--no-autotune"]).args(train_args(&c, 4));
    m.args(["--distributed", "mpi", "--mpi-timeout", "2", "--out", "tiles"]);
    m.args([":", "-n", "1", DDL]).args(train_args(&c, 4));
    m.args(["--distributed", "mpi", "--mpi-timeout", "2", "--out", "tiles"]);
    let (o, in_time) = run_limited(m, Duration::from_secs(120));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(in_time && !o.status.success(), "{}", show(&o));
    assert!(
        err.contains("the matmul tile measurement (--no-autotune, DDL_NO_AUTOTUNE) differs (rank 0: off, rank 1: on)")
            && !err.contains("made no progress"),
        "{err}"
    );
    // The same settings into different run folders: refused too (only rank 0 writes, so rank 1's
    // folder would silently stay empty and its --resume find nothing).
    let mut m = mpirun(&dir);
    m.args(["-n", "1", DDL]).args(train_args(&c, 4)).args(["--distributed", "mpi", "--out", "run-a"]);
    m.args([":", "-n", "1", DDL]).args(train_args(&c, 4)).args(["--distributed", "mpi", "--out", "run-b"]);
    let (o, in_time) = run_limited(m, Duration::from_secs(120));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(in_time && !o.status.success(), "{}", show(&o));
    assert!(err.contains("the run folder (--out) differs") && err.contains("run-b'"), "{err}");
    // Two processes started by mpirun without --distributed mpi: refused with the flag named (one
    // trained and the other said the folder was in use).
    let mut m = mpirun(&dir);
    m.args(["-n", "2", DDL]).args(train_args(&c, 4)).args(["--out", "plain"]);
    let (o, in_time) = run_limited(m, Duration::from_secs(120));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(in_time && !o.status.success(), "{}", show(&o));
    assert!(err.contains("without --distributed mpi") && !dir.join("plain").exists(), "{err}");
    // `ddl experiment` under mpirun (it has no data-parallel mode): refused as such, not one
    // process running the grid while the other says the folder is in use.
    let spec = dir.join("grid.toml");
    let text =
        format!("name = \"g\"\npreset = \"tiny\"\nvariants = [\"ddl\"]\nseeds = [1]\nsteps = 2\ncorpus = {c:?}\n");
    std::fs::write(&spec, text).unwrap();
    let mut m = mpirun(&dir);
    m.args(["-n", "2", DDL, "experiment", "--spec"]).arg(&spec).args(["--out", "grid"]);
    let (o, in_time) = run_limited(m, Duration::from_secs(120));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(in_time && !o.status.success(), "{}", show(&o));
    assert!(err.contains("`ddl experiment` has no data-parallel mode") && !err.contains("in use"), "{err}");
    assert!(!dir.join("grid").exists(), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--dry-run` under mpirun: every process makes it, the first one prints it, and a global batch
/// the ranks cannot share is refused there as the run refuses it (the dry run said nothing of the
/// ranks and exited 0, and printed its plan once per rank).
#[test]
fn a_dry_run_under_mpirun_checks_the_rank_count_and_prints_once() {
    let _serial = serial();
    if !mpirun_available() {
        return;
    }
    let dir = tmpdir("dry-run");
    let c = ddl::testing::small_corpus(&dir);
    let dry = |accum: &str| {
        let mut m = mpirun(&dir);
        m.args(["-n", "2", DDL]).args(train_args(&c, 4)).args(["--set", accum]);
        m.args(["--distributed", "mpi", "--out", "run", "--dry-run"]);
        let (o, in_time) = run_limited(m, Duration::from_secs(120));
        assert!(in_time, "{}", show(&o));
        o
    };
    let o = dry("train.grad_accum=2");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.matches("dry run (nothing trained").count() == 1, "{}", show(&o));
    let o = dry("train.grad_accum=3");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(!o.status.success(), "{}", show(&o));
    assert!(
        out.contains("it would not start: train.grad_accum = 3 is not a multiple of the 2 ranks")
            && err.contains("--set train.grad_accum=4"),
        "{}",
        show(&o)
    );
    assert!(!dir.join("run").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rank 0's report after training (here `--sample`, longer than `--mpi-timeout`) comes once every
/// rank has finished: the other rank waited for it in a collective, whose watchdog ended the job
/// as failed and cut the sample off.
#[test]
fn a_sample_longer_than_the_mpi_timeout_ends_the_job_as_finished() {
    let _serial = serial();
    if !mpirun_available() {
        return;
    }
    let dir = tmpdir("sample");
    let c = ddl::testing::small_corpus(&dir);
    let mut m = mpirun(&dir);
    m.env("DDL_NO_AUTOTUNE", "1");
    m.args(["-n", "2", DDL]).args(train_args(&c, 2));
    // (1200 tokens take 4 to 5 s on lavapipe on 2 cores.)
    m.args(["--distributed", "mpi", "--mpi-timeout", "2", "--out", "run", "--sample", "1200"]);
    let (o, in_time) = run_limited(m, Duration::from_secs(120));
    assert!(in_time && o.status.success(), "{}", show(&o));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("made no progress"), "{}", show(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

fn rank_pid(mpirun_pid: u32, rank: usize) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{mpirun_pid}/task/{mpirun_pid}/children")).ok()?;
    children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).find(|p| {
        std::fs::read(format!("/proc/{p}/environ"))
            .is_ok_and(|e| e.split(|&b| b == 0).any(|kv| kv == format!("OMPI_COMM_WORLD_RANK={rank}").as_bytes()))
    })
}

/// Starts a long 2-rank run, waits until it trains, sends `signal` to rank 1 and returns how long
/// mpirun took to end afterwards, its output and the folder (whose `run` is the run's; the caller
/// removes it).
fn signal_rank_1(name: &str, signal: &str) -> (Duration, Output, PathBuf) {
    let dir = tmpdir(name);
    let c = ddl::testing::small_corpus(&dir);
    let mut m = mpirun(&dir);
    // No tile measurements: rank 1 would wait for rank 0's in a collective, longer than this
    // test's short --mpi-timeout allows before the first step (10 × 5 s) on a slow machine.
    m.env("DDL_NO_AUTOTUNE", "1");
    m.args(["-n", "2", DDL]).args(train_args(&c, 1_000_000));
    m.args(["--distributed", "mpi", "--mpi-timeout", "5", "--out", "run"]);
    let mut child = m.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let metrics = dir.join("run/metrics.jsonl");
    let t0 = Instant::now();
    while std::fs::read_to_string(&metrics).map_or(0, |s| s.lines().count()) < 5 {
        if t0.elapsed() > Duration::from_secs(240) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("the 2-rank run did not start training: {}", show(&child.wait_with_output().unwrap()));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let pid = rank_pid(child.id(), 1).expect("rank 1 is not a child of mpirun");
    let ok = Command::new("kill").args([signal, &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill {signal} {pid}");
    let t1 = Instant::now();
    while child.try_wait().unwrap().is_none() && t1.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let waited = t1.elapsed();
    if child.try_wait().unwrap().is_none() {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        let _ = child.kill();
    }
    let o = child.wait_with_output().unwrap();
    (waited, o, dir)
}

#[test]
fn a_rank_that_dies_or_hangs_ends_the_job_with_an_error() {
    let _serial = serial();
    if !mpirun_available() {
        return;
    }
    // Killed: Open MPI notices the exit and ends the job.
    let (waited, o, dir) = signal_rank_1("killed", "-KILL");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(waited < Duration::from_secs(60), "mpirun still running {waited:?} after rank 1 was killed");
    assert!(!o.status.success(), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("rank 1") && err.contains("signal 9"), "mpirun should name the dead rank: {err}");
    // Hung (stopped): nothing tells Open MPI, so rank 0's watchdog (--mpi-timeout 5) reports it.
    let (waited, o, dir) = signal_rank_1("stopped", "-STOP");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(waited < Duration::from_secs(60), "mpirun still running {waited:?} after rank 1 stopped");
    assert!(!o.status.success(), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("error: rank 0/2") && err.contains("made no progress for"),
        "rank 0 should report the hung peer: {err}"
    );
    // SIGTERM to one rank (a scheduler stopping a job): every rank stops after the step, rank 0
    // saves and says which signal, and the job does not end as if it had finished (it exited 0).
    let (waited, o, dir) = signal_rank_1("terminated", "-TERM");
    assert!(waited < Duration::from_secs(60), "mpirun still running {waited:?} after rank 1's SIGTERM");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "an interrupted run must not exit 0: {}", show(&o));
    assert!(err.contains("interrupted (SIGTERM) at step") && !err.contains("(Ctrl-C)"), "{err}");
    let ck = ddl::train::checkpoint::load(&dir.join("run"), true).expect("rank 0 saved the checkpoint");
    assert!(ck.step >= 5, "checkpoint at step {}", ck.step);
    let _ = std::fs::remove_dir_all(&dir);
}
