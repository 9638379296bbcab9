//! The gradient exchange of a data-parallel run: buckets all-reduced while the next one is read
//! back, optionally overlapped with the backward pass block by block; the ranks' start-up
//! handshake and parameter checks.

use std::time::Instant;

use super::{Collective, TrainError, collective};
use crate::model::{Model, Program};

/// How a data-parallel run exchanges gradients (ignored by a single process).
#[derive(Debug, Clone)]
pub struct DistOptions {
    /// Gradients travel in buckets of this many MiB: bucket i + 1 is read back from the GPU (on a
    /// helper thread) while bucket i is all-reduced and written back. 0 = one bucket, no overlap.
    pub bucket_mib: f64,
    /// Also overlap with the backward pass: the last micro-batch's backward is submitted block by
    /// block, and each block's gradients are all-reduced while the GPU computes the next block.
    pub overlap_backward: bool,
}

impl Default for DistOptions {
    fn default() -> Self {
        DistOptions { bucket_mib: 1.0, overlap_backward: false }
    }
}

impl DistOptions {
    /// Elements per bucket for a model of `total` parameters.
    pub fn bucket_elems(&self, total: usize) -> usize {
        if self.bucket_mib > 0.0 {
            ((self.bucket_mib * (1 << 20) as f64 / 4.0) as usize).clamp(1, total.max(1))
        } else {
            total.max(1)
        }
    }
}

/// Wall times of one step's gradient exchange, in seconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommTimes {
    /// Waiting for the slowest rank to finish its micro-batches (a barrier before the exchange,
    /// so that `allreduce` measures the transfer, not the load imbalance).
    pub wait: f64,
    /// The exchange after the barrier as the step sees it (what it adds to the step).
    pub total: f64,
    /// Reading gradients back from the GPU (on the helper thread when bucketed).
    pub readback: f64,
    /// Inside `MPI_Allreduce`.
    pub allreduce: f64,
    /// Queueing the summed gradients back to the GPU.
    pub write: f64,
}

impl std::ops::AddAssign for CommTimes {
    fn add_assign(&mut self, o: CommTimes) {
        self.wait += o.wait;
        self.total += o.total;
        self.readback += o.readback;
        self.allreduce += o.allreduce;
        self.write += o.write;
    }
}

/// Replaces every rank's gradients by their sum over the ranks, bucket by bucket.
pub(super) fn reduce_gradients(model: &Model, comm: &dyn Collective, bucket: usize) -> Result<CommTimes, TrainError> {
    let tb = Instant::now();
    comm.barrier("gradient exchange (waiting for every rank's micro-batches)");
    let mut times = CommTimes { wait: tb.elapsed().as_secs_f64(), ..CommTimes::default() };
    let t0 = Instant::now();
    let total = model.layout.total;
    let ranges: Vec<(usize, usize)> = (0..total).step_by(bucket.max(1)).map(|o| (o, bucket.min(total - o))).collect();
    let mut recv = Vec::new();
    let mut exchange = |offset: usize, send: &[f32], times: &mut CommTimes| -> Result<(), TrainError> {
        recv.resize(send.len(), 0.0);
        let ta = Instant::now();
        comm.all_reduce_sum_f32(send, &mut recv, "gradient all-reduce");
        times.allreduce += ta.elapsed().as_secs_f64();
        let tw = Instant::now();
        model.grads.write_f32_range(&model.gpu, offset, &recv)?;
        times.write += tw.elapsed().as_secs_f64();
        Ok(())
    };
    if ranges.len() <= 1 {
        let tr = Instant::now();
        let send = model.grads.read_f32_range(&model.gpu, 0, total)?;
        times.readback += tr.elapsed().as_secs_f64();
        exchange(0, &send, &mut times)?;
    } else {
        type Bucket = Result<(Vec<f32>, f64), crate::gpu::GpuError>;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Bucket>(1);
        let ranges = &ranges;
        std::thread::scope(|s| -> Result<(), TrainError> {
            // Owned here so that an early return drops it and the reader stops.
            let rx = rx;
            s.spawn(move || {
                for &(o, n) in ranges {
                    let tr = Instant::now();
                    let r = model.grads.read_f32_range(&model.gpu, o, n).map(|v| (v, tr.elapsed().as_secs_f64()));
                    let failed = r.is_err();
                    if tx.send(r).is_err() || failed {
                        break;
                    }
                }
            });
            for &(o, _) in ranges {
                let (send, secs) = rx.recv().map_err(|_| {
                    TrainError::Settings("the gradient readback thread stopped unexpectedly".to_string())
                })??;
                times.readback += secs;
                exchange(o, &send, &mut times)?;
            }
            Ok(())
        })?;
    }
    times.total = t0.elapsed().as_secs_f64();
    Ok(times)
}

/// All-reduces (sum) `send` in pieces of `bucket` elements and queues the result into the
/// gradients at `offset`.
fn exchange_range(
    model: &Model,
    comm: &dyn Collective,
    bucket: usize,
    offset: usize,
    send: &[f32],
    times: &mut CommTimes,
) -> Result<(), TrainError> {
    let mut recv = vec![0.0f32; send.len().min(bucket.max(1))];
    for (i, piece) in send.chunks(bucket.max(1)).enumerate() {
        let r = &mut recv[..piece.len()];
        let ta = Instant::now();
        comm.all_reduce_sum_f32(piece, r, "gradient all-reduce");
        times.allreduce += ta.elapsed().as_secs_f64();
        let tw = Instant::now();
        model.grads.write_f32_range(&model.gpu, offset + i * bucket.max(1), r)?;
        times.write += tw.elapsed().as_secs_f64();
    }
    Ok(())
}

/// The last micro-batch of a rank with the gradient exchange overlapping its backward pass:
/// zeroing (`zero`: on a rank's first micro-batch), forward and the backward up to the end of the
/// last block are submitted, then each later block's backward is submitted before the previous
/// block's gradients — complete by then — are all-reduced, so the GPU computes while MPI
/// communicates. The parameters outside the blocks (embedding, final norm, ...) are exchanged
/// after the embedding backward.
pub(super) fn backward_with_exchange(
    model: &Model,
    prog: &Program,
    zero: bool,
    comm: &dyn Collective,
    bucket: usize,
) -> Result<CommTimes, TrainError> {
    let mut times = CommTimes::default();
    let mut pending: Option<(usize, Vec<f32>)> = None;
    let mut covered = Vec::new();
    // Zeroing (on a rank's only micro-batch) and the forward go with the first segment.
    let mut head: Vec<&[crate::gpu::Op]> = Vec::new();
    if zero {
        head.push(prog.zero_ops());
    }
    head.push(prog.forward_ops());
    for (seg, block) in prog.backward_segments() {
        let mut r = crate::gpu::Recorder::new(&model.gpu);
        for ops in head.drain(..).chain([seg]) {
            r.ops(ops);
        }
        r.submit()?;
        if let Some((off, send)) = pending.take() {
            exchange_range(model, comm, bucket, off, &send, &mut times)?;
        }
        let Some((off, len)) = block.and_then(|l| model.layout.block_range(l)) else { continue };
        let tr = Instant::now();
        pending = Some((off, model.grads.read_f32_range(&model.gpu, off, len)?));
        times.readback += tr.elapsed().as_secs_f64();
        covered.push((off, len));
    }
    for (off, len) in uncovered(covered, model.layout.total) {
        let tr = Instant::now();
        let send = model.grads.read_f32_range(&model.gpu, off, len)?;
        times.readback += tr.elapsed().as_secs_f64();
        exchange_range(model, comm, bucket, off, &send, &mut times)?;
    }
    // Readbacks here include waiting for the GPU to finish each block: only the communication
    // is counted as exchange time (compare step times to see what the overlap gains).
    times.total = times.allreduce + times.write;
    Ok(times)
}

/// The parameter ranges of `0..total` outside `covered` (the blocks' ranges): embedding,
/// expansion, readout, final norm.
fn uncovered(mut covered: Vec<(usize, usize)>, total: usize) -> Vec<(usize, usize)> {
    covered.sort();
    let mut rest = Vec::new();
    let mut at = 0;
    for &(off, len) in &covered {
        if off > at {
            rest.push((at, off - at));
        }
        at = at.max(off + len);
    }
    if at < total {
        rest.push((at, total - at));
    }
    rest
}

/// How many all-reduces a step's gradient exchange makes: the gradients in buckets of `bucket`
/// elements, or with `overlap` (the backward block by block) each block's range and each range
/// outside the blocks in such buckets.
pub(super) fn all_reduces_per_step(model: &Model, prog: &Program, bucket: usize, overlap: bool) -> usize {
    let (total, b) = (model.layout.total, bucket.max(1));
    if !overlap {
        return total.div_ceil(b);
    }
    let blocks: Vec<(usize, usize)> = prog
        .backward_segments()
        .into_iter()
        .filter_map(|(_, block)| block.and_then(|l| model.layout.block_range(l)))
        .collect();
    let rest = uncovered(blocks.clone(), total);
    blocks.iter().chain(&rest).map(|&(_, len)| len.div_ceil(b)).sum()
}

/// Whether `ranks` processes can share the global batch of `t` (`batch_size × grad_accum`
/// sequences, as one process draws them) by micro-batches, rank r taking micro-batches r, r + N,
/// …: `train.grad_accum` must be a multiple of the rank count. The error names the setting, the
/// rank count and what to change (`resume`: the run keeps its saved grad_accum, so the rank count).
pub fn ranks_share(t: &super::TrainConfig, ranks: usize, resume: bool) -> Result<(), String> {
    let (accum, size) = (t.grad_accum, ranks.max(1));
    if accum.is_multiple_of(size) {
        return Ok(());
    }
    // A resumed run keeps its saved grad_accum: the rank counts that divide it.
    let remedy = if resume {
        let fit: Vec<String> = (1..=accum).filter(|n| accum.is_multiple_of(*n)).map(|n| n.to_string()).collect();
        format!(
            "the run resumes with its saved train.grad_accum, so resume it with a number of ranks that divides {accum} \
             (mpirun -n {})",
            fit.join(", -n ")
        )
    } else {
        format!("set --set train.grad_accum={} (or another multiple of {size})", accum.div_ceil(size) * size)
    };
    Err(format!(
        "train.grad_accum = {accum} is not a multiple of the {size} ranks: each global batch (batch_size × grad_accum = \
         {} sequences, as one process would draw them) is shared out by micro-batches, rank r taking micro-batches r, \
         r + {size}, …; {remedy}",
        t.batch_size * accum,
    ))
}

/// Compares every rank's values of the settings that must agree (exchanged at start-up), and
/// names what differs on every rank.
#[allow(clippy::too_many_arguments)]
pub(super) fn handshake(
    comm: &dyn Collective,
    run_toml: &str,
    params: usize,
    tokens: usize,
    corpus_key: &str,
    start: usize,
    steps: usize,
    bucket: usize,
    overlap_backward: bool,
    out: &str,
    autotune: bool,
    params_digest: u64,
) -> Result<(), String> {
    let names = [
        "the run config digest",
        "the parameter count",
        "the corpus token count",
        "the corpus digest (text and tokenizer)",
        "the start step (checkpoint)",
        "--steps",
        "the gradient bucket (--mpi-bucket-mib, in elements)",
        "the overlap with the backward pass (--mpi-overlap)",
        "the run folder (--out)",
        "the matmul tile measurement (--no-autotune, DDL_NO_AUTOTUNE)",
        "the initial parameter digest",
    ];
    // How a field's values are shown: digests in hex, the overlap by name; the run folder by
    // each rank itself (only its digest travels).
    const DIGESTS: [usize; 3] = [0, 3, 10];
    const OVERLAP: usize = 7;
    const OUT: usize = 8;
    // (Rank 0 measures and the others take its choices, in a collective only the ranks that
    // measure enter: one without measurements went on to the first step's.)
    const AUTOTUNE: usize = 9;
    let mine = [
        collective::digest64(run_toml.as_bytes()),
        params as u64,
        tokens as u64,
        collective::digest64(corpus_key.as_bytes()),
        start as u64,
        steps as u64,
        bucket as u64,
        overlap_backward as u64,
        collective::digest64(out.as_bytes()),
        autotune as u64,
        params_digest,
    ];
    let k = mine.len();
    let all = comm.all_gather_u64(&mine, "start-up handshake");
    let (rank, size) = (comm.rank(), comm.size());
    let mut problems = Vec::new();
    let config_differs: Vec<usize> = (1..size).filter(|&r| all[r * k] != all[0]).collect();
    if !config_differs.is_empty() {
        let mut theirs = run_toml.as_bytes().to_vec();
        comm.broadcast_bytes(&mut theirs, "start-up config exchange");
        let msg = format!("the run config of rank(s) {config_differs:?} differs from rank 0's");
        if config_differs.contains(&rank) {
            let diff = collective::toml_diff(run_toml, &String::from_utf8_lossy(&theirs), 6);
            problems.push(format!("{msg}; here: {}", diff.join(", ")));
        } else {
            problems.push(format!("{msg} (the differing settings are printed by those ranks)"));
        }
    }
    for (f, name) in names.iter().enumerate().skip(1) {
        if config_differs.is_empty() || f != names.len() - 1 {
            let values: Vec<u64> = (0..size).map(|r| all[r * k + f]).collect();
            if values.iter().any(|&v| v != values[0]) {
                if f == OUT {
                    problems.push(format!(
                        "{name} differs between the ranks (here '{out}'): give every rank the same folder (on a \
                         file system they share)"
                    ));
                    continue;
                }
                let show = |v: u64| match f {
                    OVERLAP => (if v == 1 { "backward" } else { "readback" }).to_string(),
                    AUTOTUNE => (if v == 1 { "on" } else { "off" }).to_string(),
                    f if DIGESTS.contains(&f) => format!("{v:016x}"),
                    _ => v.to_string(),
                };
                let shown: Vec<String> =
                    values.iter().enumerate().map(|(r, &v)| format!("rank {r}: {}", show(v))).collect();
                let remedy = match f {
                    AUTOTUNE => {
                        ": give --no-autotune to every rank or to none (DDL_NO_AUTOTUNE set in the environment of \
                         some machines only does this)"
                    }
                    _ => "",
                };
                problems.push(format!("{name} differs ({}){remedy}", shown.join(", ")));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the ranks were started with different settings, so data-parallel training cannot start: {}",
            problems.join("; ")
        ))
    }
}

/// Every rank's parameter digest; an error when they are not all equal.
pub(super) fn params_in_sync(model: &Model, comm: &dyn Collective, step: usize) -> Result<Vec<u64>, TrainError> {
    let d = collective::digest_f32(&model.read_params()?);
    let all = comm.all_gather_u64(&[d], "parameter digest check");
    if all.iter().any(|&x| x != all[0]) {
        let shown: Vec<String> = all.iter().enumerate().map(|(r, x)| format!("rank {r}: {x:016x}")).collect();
        return Err(TrainError::Distributed {
            rank: comm.rank(),
            size: comm.size(),
            msg: format!(
                "after step {step} the parameters are no longer identical on all ranks ({}): the ranks \
                 computed the same step differently — ranks on different GPU models or drivers (each rank's \
                 first line names its adapter; run every rank on the same model and driver), or an all-reduce \
                 that did not give every rank the same sum (the MPI library or its network)",
                shown.join(", ")
            ),
        });
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ranks whose parameter digests differ.
    struct Drifted;
    impl Collective for Drifted {
        fn rank(&self) -> usize {
            0
        }
        fn size(&self) -> usize {
            2
        }
        fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32], _what: &str) {
            recv.copy_from_slice(send)
        }
        fn all_reduce_sum_f64(&self, _buf: &mut [f64], _what: &str) {}
        fn all_gather_u64(&self, values: &[u64], _what: &str) -> Vec<u64> {
            vec![values[0], values[0] ^ 1]
        }
        fn broadcast_bytes(&self, _buf: &mut Vec<u8>, _what: &str) {}
        fn barrier(&self, _what: &str) {}
        fn describe(&self) -> String {
            "2 drifted ranks".into()
        }
    }

    /// Ranks whose parameters drift apart name both causes, the likelier first: ranks on
    /// different GPU models or drivers (float results may differ from the same sums) — it blamed
    /// the all-reduce alone.
    #[test]
    fn parameters_that_drift_apart_name_different_adapters_first() {
        let mut cfg = crate::model::ModelConfig::preset("tiny", crate::model::Variant::Ddl).unwrap();
        (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.head_dim, cfg.mlp_hidden) = (32, 1, 2, 16, 85);
        let model = Model::new(crate::testing::gpu(), cfg, 1).unwrap();
        let e = params_in_sync(&model, &Drifted, 3).unwrap_err().to_string();
        assert!(e.contains("after step 3 the parameters are no longer identical"), "{e}");
        assert!(e.contains("different GPU models or drivers") && e.contains("names its adapter"), "{e}");
        assert!(e.contains("all-reduce"), "{e}");
        assert!(params_in_sync(&model, &crate::train::collective::Single, 3).is_ok());
    }
}
