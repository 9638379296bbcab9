//! Command recording: many dispatches into one encoder and one submit, with optional per-kernel
//! timing (GPU timestamps when the adapter has them, else one submit per kernel timed on the host).

use std::time::Instant;

use super::kernel::Dispatch;
use super::tensor::{Tensor, read_mapped};
use super::{Gpu, Result};

/// Time spent in one recorded dispatch.
#[derive(Debug, Clone)]
pub struct KernelTime {
    pub name: String,
    /// The dispatch's workgroup counts (x, y, z).
    pub workgroups: [u32; 3],
    /// The dispatch's FLOPs where its launcher knows them (the matmuls), else 0.
    pub flops: f64,
    pub ns: f64,
    /// With GPU timestamps: when the dispatch began, in ns after the first dispatch of the
    /// recording began (so gaps between dispatches show the GPU's idle time); `None` when timed
    /// on the host.
    pub start_ns: Option<f64>,
}

impl KernelTime {
    /// The record of dispatch `d` (its label, workgroups and FLOPs), not timed yet.
    fn of(d: &Dispatch) -> Self {
        KernelTime { name: d.label(), workgroups: d.workgroups, flops: d.flops, ns: 0.0, start_ns: None }
    }
}

/// The GPU timeline of a profiled recording: `(span, idle)` in ns — from the first dispatch's
/// start to the latest end, and the sum of the gaps between one dispatch's end and the next
/// one's start — or `None` without GPU timestamps. (Profiling gives each dispatch its own compute
/// pass, so the gaps include pass boundaries an unprofiled recording does not have: an upper
/// bound on its idle time.)
pub fn timeline(times: &[KernelTime]) -> Option<(f64, f64)> {
    let first = times.first()?.start_ns?;
    let mut idle = 0.0;
    let mut end = first;
    for k in times {
        let start = k.start_ns?;
        if start > end {
            idle += start - end;
        }
        end = end.max(start + k.ns);
    }
    Some((end - first, idle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(start: Option<f64>, ns: f64) -> KernelTime {
        KernelTime { name: "k".into(), workgroups: [1, 1, 1], flops: 0.0, ns, start_ns: start }
    }

    #[test]
    fn the_timeline_adds_the_gaps_between_dispatches_and_spans_to_the_latest_end() {
        // 0–10, idle 5, 15–20, then 18–28 overlapping the one before (no gap), idle 2, 30–31.
        let t = [k(Some(0.0), 10.0), k(Some(15.0), 5.0), k(Some(18.0), 10.0), k(Some(30.0), 1.0)];
        assert_eq!(timeline(&t), Some((31.0, 7.0)));
        // A long dispatch ending after the next ones: the span runs to its end.
        assert_eq!(timeline(&[k(Some(0.0), 50.0), k(Some(5.0), 1.0)]), Some((50.0, 0.0)));
        // Host-clock times (no starts) and empty recordings have no timeline.
        assert_eq!(timeline(&[k(None, 3.0)]), None);
        assert_eq!(timeline(&[k(Some(0.0), 3.0), k(None, 1.0)]), None);
        assert_eq!(timeline(&[]), None);
    }
}

/// How kernels are timed in a profiled recording.
pub enum Profiler {
    /// GPU timestamps around each dispatch's compute pass.
    /// (`names`: each dispatch's record, its times filled in at the submit.)
    Timestamps { sets: Vec<wgpu::QuerySet>, used: u32, names: Vec<KernelTime> },
    /// No timestamp support: every dispatch is its own submit, timed on the host after a wait.
    HostClock { times: Vec<KernelTime> },
}

const QUERIES_PER_SET: u32 = 512;

/// Records dispatches into one command encoder.
pub struct Recorder<'g> {
    gpu: &'g Gpu,
    encoder: Option<wgpu::CommandEncoder>,
    profiler: Option<Profiler>,
    /// Number of compute dispatches recorded.
    pub dispatches: usize,
}

impl<'g> Recorder<'g> {
    pub fn new(gpu: &'g Gpu) -> Self {
        Recorder {
            gpu,
            encoder: Some(gpu.device.create_command_encoder(&Default::default())),
            profiler: None,
            dispatches: 0,
        }
    }

    /// A recorder that times every dispatch (see [`Profiler`]).
    pub fn profiled(gpu: &'g Gpu) -> Self {
        let mut r = Self::new(gpu);
        r.profiler = Some(if gpu.has_timestamps() {
            Profiler::Timestamps { sets: Vec::new(), used: 0, names: Vec::new() }
        } else {
            Profiler::HostClock { times: Vec::new() }
        });
        r
    }

    /// The underlying encoder, for copies and clears between dispatches.
    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.encoder.as_mut().expect("recorder already submitted")
    }

    /// Records dispatches in order. Without profiling they share one compute pass (wgpu inserts
    /// the barriers between dependent dispatches).
    pub fn record(&mut self, ds: &[&Dispatch]) {
        if ds.is_empty() {
            return;
        }
        self.dispatches += ds.len();
        match &mut self.profiler {
            None => {
                let enc = self.encoder.as_mut().expect("recorder already submitted");
                let mut pass = enc.begin_compute_pass(&Default::default());
                for d in ds {
                    pass.set_pipeline(&d.kernel.pipeline);
                    pass.set_bind_group(0, &d.bind_group, &[]);
                    let [x, y, z] = d.workgroups;
                    pass.dispatch_workgroups(x, y, z);
                }
            }
            Some(Profiler::Timestamps { sets, used, names }) => {
                for d in ds {
                    if *used % QUERIES_PER_SET == 0 && (*used / QUERIES_PER_SET) as usize == sets.len() {
                        sets.push(self.gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                            label: Some("profiler"),
                            ty: wgpu::QueryType::Timestamp,
                            count: QUERIES_PER_SET,
                        }));
                    }
                    let set = &sets[(*used / QUERIES_PER_SET) as usize];
                    let i = *used % QUERIES_PER_SET;
                    let enc = self.encoder.as_mut().expect("recorder already submitted");
                    let rec = KernelTime::of(d);
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some(&rec.name),
                        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                            query_set: set,
                            beginning_of_pass_write_index: Some(i),
                            end_of_pass_write_index: Some(i + 1),
                        }),
                    });
                    pass.set_pipeline(&d.kernel.pipeline);
                    pass.set_bind_group(0, &d.bind_group, &[]);
                    let [x, y, z] = d.workgroups;
                    pass.dispatch_workgroups(x, y, z);
                    drop(pass);
                    *used += 2;
                    names.push(rec);
                }
            }
            Some(Profiler::HostClock { .. }) => {
                for d in ds {
                    // Flush what was recorded before, then time this dispatch alone.
                    let enc = self.encoder.take().unwrap();
                    self.gpu.stats.submitted();
                    self.gpu.queue.submit([enc.finish()]);
                    let _ = self.gpu.wait();
                    let mut enc = self.gpu.device.create_command_encoder(&Default::default());
                    {
                        let mut pass = enc.begin_compute_pass(&Default::default());
                        pass.set_pipeline(&d.kernel.pipeline);
                        pass.set_bind_group(0, &d.bind_group, &[]);
                        let [x, y, z] = d.workgroups;
                        pass.dispatch_workgroups(x, y, z);
                    }
                    let t0 = Instant::now();
                    self.gpu.stats.submitted();
                    self.gpu.queue.submit([enc.finish()]);
                    let _ = self.gpu.wait();
                    let ns = t0.elapsed().as_nanos() as f64;
                    if let Some(Profiler::HostClock { times }) = &mut self.profiler {
                        times.push(KernelTime { ns, ..KernelTime::of(d) });
                    }
                    self.encoder = Some(self.gpu.device.create_command_encoder(&Default::default()));
                }
            }
        }
    }

    /// Records a buffer-to-buffer copy of a whole tensor.
    pub fn copy(&mut self, src: &Tensor, dst: &Tensor) {
        let n = src.bytes().min(dst.bytes());
        self.encoder().copy_buffer_to_buffer(&src.buffer, 0, &dst.buffer, 0, n);
    }

    /// Copies the readback's tensor into its staging buffer in this recording; after
    /// [`Recorder::submit`], [`super::Readback::read_f32`] returns the copied values.
    pub fn read_into(&mut self, rb: &super::Readback) {
        let n = rb.src.buffer.size();
        self.encoder().copy_buffer_to_buffer(&rb.src.buffer, 0, &rb.staging, 0, n);
    }

    /// Records a zero fill of a whole tensor.
    pub fn zero(&mut self, t: &Tensor) {
        let size = t.buffer.size();
        self.encoder().clear_buffer(&t.buffer, 0, Some(size));
    }

    /// Submits everything recorded (one queue submit) and returns without waiting, unless
    /// profiling, in which case it waits and returns the per-dispatch times.
    pub fn submit(mut self) -> Result<Vec<KernelTime>> {
        let gpu = self.gpu;
        let mut enc = self.encoder.take().expect("recorder already submitted");
        match self.profiler.take() {
            None => {
                gpu.stats.submitted();
                gpu.queue.submit([enc.finish()]);
                gpu.check()?;
                Ok(Vec::new())
            }
            Some(Profiler::HostClock { times }) => {
                gpu.stats.submitted();
                gpu.queue.submit([enc.finish()]);
                gpu.wait()?;
                Ok(times)
            }
            Some(Profiler::Timestamps { sets, used, names }) => {
                let bytes = used as u64 * 8;
                if bytes == 0 {
                    gpu.stats.submitted();
                    gpu.queue.submit([enc.finish()]);
                    gpu.wait()?;
                    return Ok(Vec::new());
                }
                gpu.stats.buffer();
                gpu.stats.buffer();
                let resolve = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("timestamps"),
                    size: bytes,
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                });
                let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("timestamps-readback"),
                    size: bytes,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                for (si, set) in sets.iter().enumerate() {
                    let start = si as u32 * QUERIES_PER_SET;
                    let n = (used - start).min(QUERIES_PER_SET);
                    enc.resolve_query_set(set, 0..n, &resolve, start as u64 * 8);
                }
                enc.copy_buffer_to_buffer(&resolve, 0, &staging, 0, bytes);
                gpu.stats.submitted();
                gpu.queue.submit([enc.finish()]);
                let words = read_mapped(gpu, &staging, "timestamps")?;
                let ticks: &[u64] = bytemuck::cast_slice(&words);
                let period = gpu.queue.get_timestamp_period() as f64;
                Ok(names
                    .into_iter()
                    .enumerate()
                    .map(|(i, k)| KernelTime {
                        ns: ticks[2 * i + 1].saturating_sub(ticks[2 * i]) as f64 * period,
                        start_ns: Some(ticks[2 * i].saturating_sub(ticks[0]) as f64 * period),
                        ..k
                    })
                    .collect())
            }
        }
    }
}

impl Gpu {
    /// Records and submits dispatches in one go, then waits for them.
    pub fn run(&self, ds: &[&Dispatch]) -> Result<()> {
        let mut r = Recorder::new(self);
        r.record(ds);
        r.submit()?;
        self.wait()
    }
}

/// One step of a recorded program: a dispatch, or a transfer that needs the encoder.
#[derive(Debug)]
pub enum Op {
    Run(Dispatch),
    /// Zero a whole tensor (no binding-size limit).
    Zero(Tensor),
    /// Copy `len` elements from `src[src_off..]` to `dst[dst_off..]`.
    Copy {
        src: Tensor,
        src_off: usize,
        dst: Tensor,
        dst_off: usize,
        len: usize,
    },
}

impl Op {
    /// Copies a whole tensor.
    pub fn copy(src: &Tensor, dst: &Tensor) -> Op {
        Op::Copy { src: src.clone(), src_off: 0, dst: dst.clone(), dst_off: 0, len: src.len().min(dst.len()) }
    }
}

impl Recorder<'_> {
    /// Records a program: runs of dispatches share a compute pass; transfers go between passes.
    pub fn ops(&mut self, ops: &[Op]) {
        let mut run: Vec<&Dispatch> = Vec::new();
        for op in ops {
            match op {
                Op::Run(d) => run.push(d),
                Op::Zero(t) => {
                    self.record(&run);
                    run.clear();
                    self.zero(t);
                }
                Op::Copy { src, src_off, dst, dst_off, len } => {
                    self.record(&run);
                    run.clear();
                    if *len > 0 {
                        self.encoder().copy_buffer_to_buffer(
                            &src.buffer,
                            *src_off as u64 * 4,
                            &dst.buffer,
                            *dst_off as u64 * 4,
                            *len as u64 * 4,
                        );
                    }
                }
            }
        }
        self.record(&run);
    }
}
