//! `ddl train --distributed mpi`: the flags checked, the ranks launched under `mpirun` (with the
//! `mpi` feature; without it, a clear refusal).

use super::*;

#[cfg(not(feature = "mpi"))]
pub(super) fn train_mpi(
    _dev: &DeviceArgs,
    a: &TrainArgs,
    _run: ddl::train::RunConfig,
    _out: std::path::PathBuf,
    _resume: bool,
) -> Result<()> {
    check_mpi_flags(a)
}

/// `--distributed mpi`'s own flags, checked before anything else of the run is looked at.
#[cfg(not(feature = "mpi"))]
pub(super) fn check_mpi_flags(_a: &TrainArgs) -> Result<()> {
    anyhow::bail!(
        "--distributed mpi: this ddl was built without MPI support; rebuild with --features mpi \
         (`cargo build --release --features mpi`; needs an MPI library and libclang, on Debian/Ubuntu \
         `apt-get install libopenmpi-dev openmpi-bin libclang-dev`)"
    )
}

/// `--distributed mpi`'s own flags, checked before the run is looked at (a finished run is said
/// to be finished only once they are right).
#[cfg(feature = "mpi")]
pub(super) fn check_mpi_flags(a: &TrainArgs) -> Result<()> {
    if !(a.mpi_timeout > 0.0 && a.mpi_timeout <= MAX_MPI_TIMEOUT) {
        anyhow::bail!(
            "--mpi-timeout {}: expected a number of seconds > 0 and at most {MAX_MPI_TIMEOUT} (11.6 days; a hung \
             peer is found after this long)",
            a.mpi_timeout
        );
    }
    if !(a.mpi_bucket_mib >= 0.0 && a.mpi_bucket_mib.is_finite()) {
        anyhow::bail!("--mpi-bucket-mib {}: expected a size in MiB ≥ 0", a.mpi_bucket_mib);
    }
    Ok(())
}

/// The longest `--mpi-timeout`, in seconds (ten times it is the limit before the first step).
#[cfg(feature = "mpi")]
pub(super) const MAX_MPI_TIMEOUT: f64 = 1e6;

/// One rank of `mpirun -n N ddl train ... --distributed mpi` ([`ddl::train::distributed::run_rank`]:
/// an error on any rank is printed with the rank and ends the whole job).
#[cfg(feature = "mpi")]
pub(super) fn train_mpi(
    dev: &DeviceArgs,
    a: &TrainArgs,
    run: ddl::train::RunConfig,
    out: std::path::PathBuf,
    resume: bool,
) -> Result<()> {
    use ddl::train::distributed::{RankOptions, run_rank};
    use ddl::train::{DistOptions, Show, TrainOptions};
    check_mpi_flags(a)?;
    let opts = RankOptions {
        timeout: std::time::Duration::from_secs_f64(a.mpi_timeout),
        backend: dev.backend.as_deref().map(BackendChoice::parse).transpose()?,
        adapter: dev.adapter.clone(),
        autotune: !dev.no_autotune,
        train: TrainOptions {
            run,
            steps: a.steps.unwrap_or(200),
            out: out.clone(),
            resume,
            overwrite: a.overwrite,
            show: Show::Bar,
        },
        dist: DistOptions { bucket_mib: a.mpi_bucket_mib, overlap_backward: a.mpi_overlap == MpiOverlap::Backward },
    };
    let interrupted =
        run_rank(opts, |summary| report_training(dev, a, &out, summary).map_err(|e| format!("{e:#}").into()))
            .map_err(anyhow::Error::msg)?;
    if interrupted {
        // Saved; every rank exits as a process that signal stopped (130 Ctrl-C, 143 SIGTERM), as
        // one process does, so that mpirun and a script see the run did not finish.
        return Err(crate::Interrupted.into());
    }
    Ok(())
}
