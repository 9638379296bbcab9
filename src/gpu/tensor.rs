//! Device buffers with a shape and an element type.

use std::sync::Arc;

use wgpu::util::DeviceExt;

use super::{Gpu, GpuError, Result};

/// Element type of a tensor. All are 4 bytes wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    F32,
    I32,
    U32,
}

impl DType {
    pub fn size(self) -> u64 {
        4
    }
}

/// A device buffer that counts itself in the device's [`super::AllocStats`] while it lives.
pub struct DeviceBuffer {
    buffer: wgpu::Buffer,
    stats: Arc<super::AllocStats>,
}

impl DeviceBuffer {
    fn new(gpu: &Gpu, buffer: wgpu::Buffer) -> Self {
        gpu.stats.tensor_alloc(buffer.size());
        DeviceBuffer { buffer, stats: gpu.stats.clone() }
    }
}

impl std::ops::Deref for DeviceBuffer {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        &self.buffer
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        self.stats.tensor_free(self.buffer.size());
    }
}

/// A device buffer holding a row-major tensor.
#[derive(Clone)]
pub struct Tensor {
    pub buffer: Arc<DeviceBuffer>,
    pub shape: Vec<usize>,
    pub dtype: DType,
    pub label: String,
}

/// A byte range of a buffer, as bound to a shader.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub buffer: &'a wgpu::Buffer,
    pub offset: u64,
    pub size: u64,
}

impl<'a> View<'a> {
    /// Elements `[offset, offset + len)` (4-byte elements) of this view. The byte offset must be
    /// a multiple of the adapter's `min_storage_buffer_offset_alignment` when bound (checked at
    /// bind time); the flat parameter layout aligns every tensor to 256 bytes.
    pub fn sub(&self, offset: usize, len: usize) -> View<'a> {
        let off = offset as u64 * 4;
        let size = (len.max(1) as u64) * 4;
        assert!(
            off + size <= self.size,
            "sub-view [{offset}, {offset}+{len}) overruns a view of {} elements",
            self.size / 4
        );
        View { buffer: self.buffer, offset: self.offset + off, size }
    }

    /// The longest prefix of whole vec4s (16-byte units) of this view, for a binding declared
    /// `array<vec4<f32>>`.
    pub fn vec4s(&self) -> View<'a> {
        self.sub(0, self.len() / 4 * 4)
    }

    /// Number of 4-byte elements.
    pub fn len(&self) -> usize {
        (self.size / 4) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor('{}', {:?}, {:?})", self.label, self.shape, self.dtype)
    }
}

const USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

impl Tensor {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size of the data in bytes.
    pub fn bytes(&self) -> u64 {
        self.len() as u64 * self.dtype.size()
    }

    /// An uninitialised (zeroed by wgpu) tensor.
    pub fn zeros(gpu: &Gpu, label: &str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        // Zero-length buffers cannot be bound: keep at least one element.
        let bytes = (n.max(1) as u64) * dtype.size();
        gpu.check_buffer_size(&format!("tensor '{label}' {shape:?}"), bytes)?;
        let buffer = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage: USAGE,
            mapped_at_creation: false,
        });
        let buffer = Arc::new(DeviceBuffer::new(gpu, buffer));
        Ok(Tensor { buffer, shape: shape.to_vec(), dtype, label: label.to_string() })
    }

    fn from_bytes(gpu: &Gpu, label: &str, shape: &[usize], dtype: DType, data: &[u8]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if data.len() as u64 != n as u64 * dtype.size() {
            return Err(GpuError::Shape(format!(
                "tensor '{label}': shape {shape:?} needs {n} elements, got {}",
                data.len() / 4
            )));
        }
        if n == 0 {
            return Self::zeros(gpu, label, shape, dtype);
        }
        gpu.check_buffer_size(&format!("tensor '{label}' {shape:?}"), data.len() as u64)?;
        let buffer = gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: data,
            usage: USAGE,
        });
        let buffer = Arc::new(DeviceBuffer::new(gpu, buffer));
        Ok(Tensor { buffer, shape: shape.to_vec(), dtype, label: label.to_string() })
    }

    /// Uploads f32 data.
    pub fn from_f32(gpu: &Gpu, label: &str, shape: &[usize], data: &[f32]) -> Result<Tensor> {
        Self::from_bytes(gpu, label, shape, DType::F32, bytemuck::cast_slice(data))
    }

    /// Uploads i32 data.
    pub fn from_i32(gpu: &Gpu, label: &str, shape: &[usize], data: &[i32]) -> Result<Tensor> {
        Self::from_bytes(gpu, label, shape, DType::I32, bytemuck::cast_slice(data))
    }

    /// Uploads u32 data.
    pub fn from_u32(gpu: &Gpu, label: &str, shape: &[usize], data: &[u32]) -> Result<Tensor> {
        Self::from_bytes(gpu, label, shape, DType::U32, bytemuck::cast_slice(data))
    }

    /// Overwrites the contents from the host (queued; ordered before later submits).
    pub fn write_f32(&self, gpu: &Gpu, data: &[f32]) -> Result<()> {
        self.write_bytes(gpu, bytemuck::cast_slice(data))
    }

    pub fn write_u32(&self, gpu: &Gpu, data: &[u32]) -> Result<()> {
        self.write_bytes(gpu, bytemuck::cast_slice(data))
    }

    pub fn write_i32(&self, gpu: &Gpu, data: &[i32]) -> Result<()> {
        self.write_bytes(gpu, bytemuck::cast_slice(data))
    }

    fn write_bytes(&self, gpu: &Gpu, data: &[u8]) -> Result<()> {
        if data.len() as u64 != self.bytes() {
            return Err(GpuError::Shape(format!(
                "writing {} elements into tensor '{}' of shape {:?}",
                data.len() / 4,
                self.label,
                self.shape
            )));
        }
        if !data.is_empty() {
            gpu.queue.write_buffer(&self.buffer, 0, data);
        }
        Ok(())
    }

    /// The whole tensor as a binding.
    pub fn view(&self) -> View<'_> {
        View { buffer: &self.buffer, offset: 0, size: self.buffer.size() }
    }

    /// Copies the contents to the host as raw 32-bit words (waits for all submitted work).
    fn read_words(&self, gpu: &Gpu) -> Result<Vec<u32>> {
        super::now(self.read_words_with(gpu, Wait::Block))
    }

    /// [`Tensor::read_words`], waiting as `wait` says.
    async fn read_words_with(&self, gpu: &Gpu, wait: Wait) -> Result<Vec<u32>> {
        let bytes = self.bytes();
        if bytes == 0 {
            return Ok(Vec::new());
        }
        let staging = staging_buffer(gpu, bytes);
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&self.buffer, 0, &staging, 0, bytes);
        gpu.stats.submitted();
        gpu.queue.submit([enc.finish()]);
        match wait {
            Wait::Block => read_mapped(gpu, &staging, &self.label),
            Wait::Await => read_mapped_async(gpu, &staging, &self.label).await,
        }
    }

    /// Reads an f32 tensor back.
    pub fn read_f32(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        Ok(bytemuck::cast_vec(self.read_words(gpu)?))
    }

    /// [`Tensor::read_f32`], waiting for the device as `wait` says (awaited in a browser).
    pub async fn read_f32_with(&self, gpu: &Gpu, wait: Wait) -> Result<Vec<f32>> {
        Ok(bytemuck::cast_vec(self.read_words_with(gpu, wait).await?))
    }

    /// Reads `len` f32 elements starting at element `offset` (waits for all submitted work).
    pub fn read_f32_range(&self, gpu: &Gpu, offset: usize, len: usize) -> Result<Vec<f32>> {
        self.check_range(offset, len)?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let bytes = 4 * len as u64;
        let staging = staging_buffer(gpu, bytes);
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&self.buffer, 4 * offset as u64, &staging, 0, bytes);
        gpu.stats.submitted();
        gpu.queue.submit([enc.finish()]);
        Ok(bytemuck::cast_vec(read_mapped(gpu, &staging, &self.label)?))
    }

    /// A reader of ranges of this tensor through one reused staging buffer of `cap` elements:
    /// streaming a large buffer to a file holds `cap` elements on the host, not the buffer.
    pub fn range_reader<'a>(&'a self, gpu: &'a Gpu, cap: usize) -> RangeReader<'a> {
        let cap = cap.clamp(1, self.len().max(1));
        RangeReader { gpu, src: self, staging: staging_buffer(gpu, 4 * cap as u64), cap }
    }

    /// Overwrites `data.len()` f32 elements starting at element `offset` (queued; ordered before
    /// later submits).
    pub fn write_f32_range(&self, gpu: &Gpu, offset: usize, data: &[f32]) -> Result<()> {
        self.check_range(offset, data.len())?;
        if !data.is_empty() {
            gpu.queue.write_buffer(&self.buffer, 4 * offset as u64, bytemuck::cast_slice(data));
        }
        Ok(())
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        let n = self.len();
        if offset.checked_add(len).is_none_or(|end| end > n) {
            return Err(GpuError::Shape(format!(
                "range of {len} elements at {offset} is outside tensor '{}' of {n} elements",
                self.label
            )));
        }
        Ok(())
    }

    /// Reads an i32 tensor back.
    pub fn read_i32(&self, gpu: &Gpu) -> Result<Vec<i32>> {
        Ok(bytemuck::cast_vec(self.read_words(gpu)?))
    }
}

/// Reads ranges of a tensor through one staging buffer ([`Tensor::range_reader`]).
pub struct RangeReader<'a> {
    gpu: &'a Gpu,
    src: &'a Tensor,
    staging: wgpu::Buffer,
    cap: usize,
}

impl RangeReader<'_> {
    /// Most elements one [`RangeReader::read`] returns.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Replaces `out` with the `len ≤ cap` f32 elements at element `offset` (waits for all
    /// submitted work).
    pub fn read(&self, offset: usize, len: usize, out: &mut Vec<f32>) -> Result<()> {
        self.src.check_range(offset, len)?;
        out.clear();
        if len == 0 {
            return Ok(());
        }
        if len > self.cap {
            return Err(GpuError::Shape(format!(
                "a read of {len} elements of '{}' exceeds its reader's {} elements",
                self.src.label, self.cap
            )));
        }
        let (gpu, bytes) = (self.gpu, 4 * len as u64);
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&self.src.buffer, 4 * offset as u64, &self.staging, 0, bytes);
        gpu.stats.submitted();
        gpu.queue.submit([enc.finish()]);
        gpu.stats.maps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        self.staging.map_async(wgpu::MapMode::Read, ..bytes, move |r| {
            let _ = tx.send(r);
        });
        gpu.wait()?;
        let what = &self.src.label;
        let err = |e: &dyn std::fmt::Display| GpuError::Readback { what: what.to_string(), reason: e.to_string() };
        rx.recv().map_err(|e| err(&e))?.map_err(|e| err(&e))?;
        {
            let view = self.staging.get_mapped_range(..bytes).map_err(|e| err(&e))?;
            out.extend_from_slice(bytemuck::cast_slice::<u8, f32>(&view));
        }
        self.staging.unmap();
        Ok(())
    }
}

/// Maps a MAP_READ buffer, waits, and copies it out.
/// A host-mappable buffer for reading `bytes` back (counted as an allocation).
pub(crate) fn staging_buffer(gpu: &Gpu, bytes: u64) -> wgpu::Buffer {
    gpu.stats.buffer();
    gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: bytes,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

/// A tensor's persistent host-readable copy: a training step records the copy into its own
/// submit ([`super::Recorder::read_into`]) and maps it afterwards, so reading a few words back
/// costs neither a second submit nor an allocation.
pub struct Readback {
    pub(crate) staging: wgpu::Buffer,
    pub(crate) src: Tensor,
}

impl Readback {
    pub fn new(gpu: &Gpu, src: &Tensor) -> Readback {
        Readback { staging: staging_buffer(gpu, src.buffer.size()), src: src.clone() }
    }

    /// The words copied by the last submitted recording (waits for it).
    pub fn read_f32(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        let words = read_mapped(gpu, &self.staging, &self.src.label)?;
        Ok(bytemuck::cast_slice(&words[..self.src.len()]).to_vec())
    }

    /// [`Readback::read_f32`] that can be awaited instead of blocking the thread: the future
    /// completes when the mapping does. On native backends it polls the device without waiting
    /// each time it is polled (and asks to be polled again); on WebGPU the browser's event loop
    /// completes the mapping.
    pub async fn read_f32_async(&self, gpu: &Gpu) -> Result<Vec<f32>> {
        let words = read_mapped_async(gpu, &self.staging, &self.src.label).await?;
        Ok(bytemuck::cast_slice(&words[..self.src.len()]).to_vec())
    }

    /// [`Readback::read_f32`] or [`Readback::read_f32_async`], as `wait` says.
    pub async fn read_f32_with(&self, gpu: &Gpu, wait: Wait) -> Result<Vec<f32>> {
        match wait {
            Wait::Block => self.read_f32(gpu),
            Wait::Await => self.read_f32_async(gpu).await,
        }
    }
}

/// How a readback waits for the device: blocking the thread (native, the default everywhere in
/// the CLI) or awaited (a browser, whose event loop completes the mapping; an async task
/// natively). Code written once as `async fn …(wait: Wait)` serves both: with `Block` its future
/// finishes at its first poll, so [`crate::gpu::now`] runs it without an executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Block,
    Await,
}

/// The mapping's outcome and the task to wake when it arrives.
#[derive(Default)]
struct MapState {
    done: Option<std::result::Result<(), wgpu::BufferAsyncError>>,
    waker: Option<std::task::Waker>,
}

/// Resolves when the staging buffer's `map_async` callback has run.
struct MapWait<'g> {
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    gpu: &'g Gpu,
    state: Arc<std::sync::Mutex<MapState>>,
}

impl std::future::Future for MapWait<'_> {
    type Output = Result<std::result::Result<(), wgpu::BufferAsyncError>>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        // Native backends run map callbacks inside `Device::poll`: check once, without waiting.
        #[cfg(not(target_arch = "wasm32"))]
        if let Err(e) = self.gpu.device.poll(wgpu::PollType::Poll) {
            // A lost device makes the poll fail too: report the cause the callback recorded.
            let err = self.gpu.check().err().unwrap_or_else(|| GpuError::Device(e.to_string()));
            return std::task::Poll::Ready(Err(err));
        }
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = s.done.take() {
            return std::task::Poll::Ready(Ok(r));
        }
        s.waker = Some(cx.waker().clone());
        // Nothing else drives a native device: ask the executor to poll again.
        #[cfg(not(target_arch = "wasm32"))]
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

pub(crate) async fn read_mapped_async(gpu: &Gpu, staging: &wgpu::Buffer, what: &str) -> Result<Vec<u32>> {
    gpu.stats.maps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let state = Arc::new(std::sync::Mutex::new(MapState::default()));
    let cb = state.clone();
    staging.map_async(wgpu::MapMode::Read, .., move |r| {
        let mut s = cb.lock().unwrap_or_else(|e| e.into_inner());
        s.done = Some(r);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    });
    let mapped = MapWait { gpu, state }.await?;
    gpu.check()?;
    copy_mapped(staging, what, mapped)
}

pub(crate) fn read_mapped(gpu: &Gpu, staging: &wgpu::Buffer, what: &str) -> Result<Vec<u32>> {
    gpu.stats.maps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (tx, rx) = std::sync::mpsc::channel();
    staging.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    gpu.wait()?;
    let mapped = rx.recv().map_err(|e| GpuError::Readback { what: what.to_string(), reason: e.to_string() })?;
    copy_mapped(staging, what, mapped)
}

/// The words of a staging buffer whose mapping ended with `mapped`, then unmapped.
fn copy_mapped(
    staging: &wgpu::Buffer,
    what: &str,
    mapped: std::result::Result<(), wgpu::BufferAsyncError>,
) -> Result<Vec<u32>> {
    let err = |e: &dyn std::fmt::Display| GpuError::Readback { what: what.to_string(), reason: e.to_string() };
    mapped.map_err(|e| err(&e))?;
    let out = {
        let view = staging.get_mapped_range(..).map_err(|e| err(&e))?;
        bytemuck::cast_slice::<u8, u32>(&view).to_vec()
    };
    staging.unmap();
    Ok(out)
}
