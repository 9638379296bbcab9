//! Data-parallel training across processes with MPI (the `mpi` cargo feature): one process per
//! adapter, launched by `mpirun`; gradients are summed through host memory with `MPI_Allreduce`.
//!
//! A watchdog thread turns a collective that makes no progress for `timeout` (a dead or hung
//! rank that the launcher did not notice) into a clear error and a non-zero exit, which makes
//! `mpirun` end the whole job instead of hanging.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use super::collective::Collective;

/// Exit status of a rank whose watchdog fired.
pub const WATCHDOG_EXIT: i32 = 75;

#[derive(Default)]
struct Watch {
    /// The collective in progress and when it began.
    current: Mutex<Option<(Instant, String)>>,
    step: AtomicUsize,
    /// Steps begun in this process.
    steps_begun: AtomicUsize,
}

/// The MPI world: this process's rank, the rank count, its rank among the processes of its
/// machine (to pick an adapter), and the watchdog.
pub struct Mpi {
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    local_rank: usize,
    local_size: usize,
    host: String,
    watch: Arc<Watch>,
    // Finalizes MPI when dropped (after `world`).
    _universe: Universe,
}

/// Seconds for the watchdog's message: three significant digits below 100 s, whole seconds above.
fn seconds(s: f64) -> String {
    let decimals = if s >= 100.0 || s <= 0.0 { 0 } else { (2.0 - s.log10().floor()).clamp(0.0, 6.0) as usize };
    format!("{s:.decimals$} s")
}

impl Mpi {
    /// Initialises MPI (MPI calls are made from the calling thread only) and starts the watchdog,
    /// which ends the process when one collective waits longer than `timeout` — 10 × `timeout`
    /// until the first step is done, since ranks compile pipelines and may tune matmuls at
    /// different speeds before it.
    pub fn init(timeout: Duration) -> Result<Mpi, String> {
        let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Funneled)
            .ok_or_else(|| "MPI was already initialised in this process".to_string())?;
        if threading < mpi::Threading::Funneled {
            return Err(format!(
                "the MPI library offers thread level {threading:?}; ddl needs at least Funneled \
                 (a helper thread reads gradients from the GPU while the main thread communicates)"
            ));
        }
        let world = universe.world();
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        let local = world.split_shared(world.rank());
        let (local_rank, local_size) = (local.rank() as usize, local.size() as usize);
        let host = mpi::environment::processor_name().unwrap_or_else(|_| "?".into());
        let watch = Arc::new(Watch::default());
        let w = watch.clone();
        let tag = format!("rank {rank}/{size} ({host})");
        std::thread::Builder::new()
            .name("mpi-watchdog".into())
            .spawn(move || {
                let tick = (timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
                loop {
                    std::thread::sleep(tick);
                    let limit =
                        if w.steps_begun.load(Ordering::Relaxed) <= 1 { timeout.saturating_mul(10) } else { timeout };
                    let stuck = w.current.lock().unwrap().as_ref().and_then(|(t0, what)| {
                        (t0.elapsed() > limit).then(|| (what.clone(), t0.elapsed().as_secs_f64()))
                    });
                    if let Some((what, secs)) = stuck {
                        eprintln!(
                            "error: {tag}: step {}: the collective '{what}' made no progress for {} \
                             (limit {}, from --mpi-timeout): another rank has probably died or hangs. \
                             Exiting so that mpirun ends the job.",
                            w.step.load(Ordering::Relaxed) + 1,
                            seconds(secs),
                            seconds(limit.as_secs_f64())
                        );
                        super::lock::release_all();
                        std::process::exit(WATCHDOG_EXIT);
                    }
                }
            })
            .map_err(|e| format!("cannot start the MPI watchdog thread: {e}"))?;
        Ok(Mpi { world, rank, size, local_rank, local_size, host, watch, _universe: universe })
    }

    /// This process's index among the ranks on its machine.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// The number of ranks on this machine.
    pub fn local_size(&self) -> usize {
        self.local_size
    }

    /// The machine's name as MPI reports it.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Ends every rank of the job (`MPI_Abort`) after this one reported an error: other ranks may
    /// be waiting in a collective this rank will never enter, so a normal exit could hang.
    pub fn abort(&self, code: i32) -> ! {
        super::lock::release_all();
        self.world.abort(code)
    }

    fn guarded<R>(&self, what: &str, f: impl FnOnce() -> R) -> R {
        *self.watch.current.lock().unwrap() = Some((Instant::now(), what.to_string()));
        let r = f();
        *self.watch.current.lock().unwrap() = None;
        r
    }
}

impl Collective for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32], what: &str) {
        assert_eq!(send.len(), recv.len(), "all_reduce_sum_f32: buffer lengths differ");
        // MPI counts are C ints: reduce in pieces of at most 2^30 elements.
        const PIECE: usize = 1 << 30;
        for (s, r) in send.chunks(PIECE).zip(recv.chunks_mut(PIECE)) {
            self.guarded(what, || self.world.all_reduce_into(s, r, SystemOperation::sum()));
        }
    }

    fn all_reduce_sum_f64(&self, buf: &mut [f64], what: &str) {
        let send = buf.to_vec();
        self.guarded(what, || self.world.all_reduce_into(&send[..], buf, SystemOperation::sum()));
    }

    fn all_gather_u64(&self, values: &[u64], what: &str) -> Vec<u64> {
        let mut out = vec![0u64; values.len() * self.size];
        self.guarded(what, || self.world.all_gather_into(values, &mut out[..]));
        out
    }

    fn broadcast_bytes(&self, buf: &mut Vec<u8>, what: &str) {
        let root = self.world.process_at_rank(0);
        let mut len = [buf.len() as u64];
        self.guarded(what, || root.broadcast_into(&mut len[..]));
        buf.resize(len[0] as usize, 0);
        self.guarded(what, || root.broadcast_into(&mut buf[..]));
    }

    fn barrier(&self, what: &str) {
        self.guarded(what, || self.world.barrier());
    }

    fn set_step(&self, step: usize) {
        self.watch.step.store(step, Ordering::Relaxed);
        self.watch.steps_begun.fetch_add(1, Ordering::Relaxed);
    }

    fn describe(&self) -> String {
        let lib = mpi::environment::library_version().unwrap_or_default();
        // "Open MPI v4.1.4, package: ..." -> "Open MPI v4.1.4"
        let lib = lib.trim_end_matches('\0').split([',', '\n']).next().unwrap_or("").trim().to_string();
        format!("MPI ({lib}), {} ranks", self.size)
    }
}

/// One rank of `mpirun -n N ddl train ... --distributed mpi`.
pub struct RankOptions {
    /// The watchdog's limit for one collective.
    pub timeout: Duration,
    pub backend: Option<crate::gpu::BackendChoice>,
    /// The adapter every rank drives (`--adapter`); by default the rank's local rank modulo the
    /// adapters of the best kind.
    pub adapter: Option<String>,
    /// Measure matmul tiles on first use (`--no-autotune`: no).
    pub autotune: bool,
    pub train: super::TrainOptions,
    pub dist: super::DistOptions,
}

/// Runs this process as one rank: starts MPI, opens its adapter, trains, and lets rank 0
/// `report` the summary once every rank has finished (the others do not wait for the report in a
/// collective: `--sample N` may take longer than `--mpi-timeout`). Any error is printed with the
/// rank and host and ends the whole job (`MPI_Abort`, this function does not return then): the
/// other ranks may be waiting in a collective. Returns whether an interruption (Ctrl-C, SIGTERM
/// on any rank) stopped the run (saved: the caller exits as a process that signal stopped), and
/// `Err` only when MPI itself cannot start.
pub fn run_rank(
    opts: RankOptions,
    report: impl FnOnce(&super::Summary) -> Result<(), Box<dyn std::error::Error + Send + Sync>>,
) -> Result<bool, String> {
    type BoxError = Box<dyn std::error::Error + Send + Sync>;
    let mpi = Mpi::init(opts.timeout).map_err(|e| format!("starting MPI: {e}"))?;
    let tag = format!("rank {}/{} ({})", mpi.rank(), mpi.size(), mpi.host());
    let result = (|| -> Result<super::Summary, BoxError> {
        let adapter = match &opts.adapter {
            Some(sel) => sel.clone(),
            None => crate::gpu::adapter_for_local_rank(opts.backend, mpi.local_rank())
                .map(|i| i.to_string())
                .ok_or("no adapter found (see `ddl info`)")?,
        };
        let gpu =
            crate::gpu::Gpu::new(&crate::gpu::GpuOptions { backend: opts.backend, adapter: Some(adapter.clone()) })
                .map_err(|e| format!("opening the GPU: {e}"))?;
        // One write, so that the ranks' lines do not interleave.
        let line = format!(
            "{tag}: local rank {} of {} drives adapter {adapter}: {} ({:?})\n",
            mpi.local_rank(),
            mpi.local_size(),
            gpu.info.name,
            gpu.info.backend
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        if mpi.size() == 1 {
            eprintln!(
                "note: --distributed mpi with one rank (not started by `mpirun -n N`): this trains as one process \
                 does, and writes no distributed.json"
            );
        }
        crate::kernels::matmul::autotune::set_enabled(opts.autotune);
        Ok(super::train_with(gpu, opts.train, &mpi, &opts.dist)?)
    })();
    // One write, so that mpirun does not interleave it with other ranks' output.
    let say = |e: &BoxError| {
        let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("error: {tag}: {e}\n").as_bytes());
    };
    match result {
        Ok(summary) => {
            // Ranks finish together, so a rank that leaves first is not mistaken for a failure;
            // then rank 0 reports (and samples), outside any collective the others wait in. An
            // interrupted run's report (one line) comes before: the others then exit with the
            // signal's status, which makes mpirun end the job.
            let report_first = summary.interrupted;
            if !report_first {
                mpi.barrier("finish");
            }
            if mpi.rank() == 0
                && let Err(e) = report(&summary)
            {
                say(&e);
                mpi.abort(1)
            }
            if report_first {
                mpi.barrier("finish");
            }
            Ok(summary.interrupted)
        }
        Err(e) => {
            say(&e);
            if e.downcast_ref::<super::TrainError>().is_some_and(|e| e.on_every_rank()) {
                // Every rank reports this error: let them all print it before the job ends.
                mpi.barrier("error report");
            }
            mpi.abort(1)
        }
    }
}
