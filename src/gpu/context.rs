//! Adapter choice and device creation.

const DEVICE_LOST: &str = "the GPU device was lost";
const OUT_OF_MEMORY: &str = "the GPU ran out of memory";

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::kernel::Kernel;
use super::{GpuError, Result};

/// Which graphics API to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    Vulkan,
    Metal,
    Dx12,
    Gl,
}

impl BackendChoice {
    /// Parses `vulkan`, `metal`, `dx12` or `gl` (case-insensitive).
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "vulkan" | "vk" => Ok(Self::Vulkan),
            "metal" | "mtl" => Ok(Self::Metal),
            "dx12" | "d3d12" => Ok(Self::Dx12),
            "gl" | "gles" | "opengl" => Ok(Self::Gl),
            _ => Err(GpuError::UnknownBackend(s.to_string())),
        }
    }

    #[cfg(feature = "native")]
    fn backends(self) -> wgpu::Backends {
        match self {
            Self::Vulkan => wgpu::Backends::VULKAN,
            Self::Metal => wgpu::Backends::METAL,
            Self::Dx12 => wgpu::Backends::DX12,
            Self::Gl => wgpu::Backends::GL,
        }
    }
}

/// How to pick the adapter. Empty fields mean "best available".
#[derive(Debug, Clone, Default)]
pub struct GpuOptions {
    /// Restrict to one backend.
    pub backend: Option<BackendChoice>,
    /// An adapter index (as listed by `ddl info`) or a case-insensitive name substring.
    pub adapter: Option<String>,
}

impl GpuOptions {
    /// Options from `DDL_BACKEND` and `DDL_ADAPTER`.
    pub fn from_env() -> Result<Self> {
        let backend = match std::env::var("DDL_BACKEND") {
            Ok(s) if !s.is_empty() => Some(BackendChoice::parse(&s)?),
            _ => None,
        };
        let adapter = std::env::var("DDL_ADAPTER").ok().filter(|s| !s.is_empty());
        Ok(Self { backend, adapter })
    }
}

/// What `ddl info` shows of one adapter.
#[derive(Debug, Clone)]
pub struct AdapterSummary {
    pub index: usize,
    pub info: wgpu::AdapterInfo,
}

impl std::fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}] {} ({:?}, {:?}, driver: {} {})",
            self.index,
            self.info.name,
            self.info.backend,
            self.info.device_type,
            self.info.driver,
            self.info.driver_info
        )
    }
}

/// An open device on the chosen adapter, with the pipeline cache. Cheap to share (`Arc<Gpu>`); a
/// clone is another handle to the same device (device, queue, pipelines, scratch and counters
/// shared), which [`Gpu::with_forms`] uses.
#[derive(Clone)]
pub struct Gpu {
    pub adapter: wgpu::Adapter,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    /// The limits the device was opened with: the adapter's own.
    pub limits: wgpu::Limits,
    /// The optional features that were enabled (those of TIMESTAMP_QUERY, SHADER_F16, SUBGROUP
    /// that the adapter has).
    pub features: wgpu::Features,
    /// Every adapter that was found, for messages and `ddl info`.
    pub all_adapters: Vec<AdapterSummary>,
    /// Which form each kernel takes on this device (`DDL_FORMS` overrides; [`Gpu::with_forms`]).
    pub forms: crate::kernels::forms::Forms,
    /// Cooperative-matrix matmuls on this device: `Ok` when the adapter lists 16×16×16 f16 → f32,
    /// the feature is enabled and the self-test at device creation passed
    /// ([`crate::kernels::matmul::coop`]); else why not.
    pub coop: std::result::Result<(), String>,
    /// The wide cooperative-matrix form's self-test (`coop128`), run the first time the form is
    /// needed ([`crate::kernels::matmul::coop::wide_status`]), never at device creation: a kernel
    /// not yet run on a GPU must not stand between a user and every other command. Shared by
    /// the clones.
    pub(crate) coop_wide: Arc<std::sync::OnceLock<std::result::Result<(), String>>>,
    /// The same for the form `coop128v` ([`crate::kernels::matmul::coop::wide_v_status`]).
    pub(crate) coop_wide_v: Arc<std::sync::OnceLock<std::result::Result<(), String>>>,
    /// The same for the form `coop128vq` ([`crate::kernels::matmul::coop::wide_vq_status`]).
    pub(crate) coop_wide_vq: Arc<std::sync::OnceLock<std::result::Result<(), String>>>,
    /// The same for the form `coop128v2` ([`crate::kernels::matmul::coop::wide_v2_status`]).
    pub(crate) coop_wide_v2: Arc<std::sync::OnceLock<std::result::Result<(), String>>>,
    /// The same for the form `coop128d` ([`crate::kernels::matmul::coop::direct_status`]).
    pub(crate) coop_direct: Arc<std::sync::OnceLock<std::result::Result<(), String>>>,
    /// The 8 × 8 form's self-test (`coop8`, Metal), run the first time it is needed
    /// ([`crate::kernels::matmul::coop::status8`]).
    pub(crate) coop8: Arc<std::sync::OnceLock<std::result::Result<(), String>>>,
    pub(crate) pipelines: Arc<Mutex<HashMap<String, Arc<Kernel>>>>,
    /// Scratch tensors shared by every dispatch that names the same key (see [`Gpu::shared_scratch`]).
    scratch: Arc<Mutex<HashMap<String, super::Tensor>>>,
    pub(crate) errors: Arc<Mutex<Vec<String>>>,
    /// Device allocations made through this runtime (buffers, bind groups, tensor bytes).
    pub stats: Arc<AllocStats>,
}

/// Counters of what the runtime allocated on the device: every buffer (tensors, uniforms,
/// staging), every bind group, and the bytes of live tensors with their peak. Benchmarks read
/// them to show that a training step allocates nothing and how close memory stays to the plan.
#[derive(Debug, Default)]
pub struct AllocStats {
    pub buffers: std::sync::atomic::AtomicU64,
    pub bind_groups: std::sync::atomic::AtomicU64,
    pub live_bytes: std::sync::atomic::AtomicU64,
    pub peak_bytes: std::sync::atomic::AtomicU64,
    /// The largest tensor allocated since the device was opened (or the last
    /// [`AllocStats::reset_peak`]), in bytes: what the memory plan's largest buffer predicts.
    pub largest_bytes: std::sync::atomic::AtomicU64,
    /// Queue submits made through the runtime.
    pub submits: std::sync::atomic::AtomicU64,
    /// Buffers mapped for reading (readbacks).
    pub maps: std::sync::atomic::AtomicU64,
}

impl AllocStats {
    /// Buffers plus bind groups created so far.
    pub fn allocations(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        self.buffers.load(Relaxed) + self.bind_groups.load(Relaxed)
    }

    /// Counts one queue submit.
    pub(crate) fn submitted(&self) {
        self.submits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Queue submits and readback maps so far.
    pub fn submits_and_maps(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.submits.load(Relaxed), self.maps.load(Relaxed))
    }

    /// Bytes of tensors alive now.
    pub fn live(&self) -> u64 {
        self.live_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Most tensor bytes alive at once since the device was opened (or the last
    /// [`AllocStats::reset_peak`]).
    pub fn peak(&self) -> u64 {
        self.peak_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The largest tensor allocated since the device was opened (or the last
    /// [`AllocStats::reset_peak`]), in bytes.
    pub fn largest(&self) -> u64 {
        self.largest_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Starts a new peak from the bytes alive now (and a new largest tensor from none).
    pub fn reset_peak(&self) {
        self.peak_bytes.store(self.live(), std::sync::atomic::Ordering::Relaxed);
        self.largest_bytes.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn buffer(&self) {
        self.buffers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn bind_group(&self) {
        self.bind_groups.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn tensor_alloc(&self, bytes: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.buffer();
        let now = self.live_bytes.fetch_add(bytes, Relaxed) + bytes;
        self.peak_bytes.fetch_max(now, Relaxed);
        self.largest_bytes.fetch_max(bytes, Relaxed);
    }

    pub(crate) fn tensor_free(&self, bytes: u64) {
        self.live_bytes.fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(feature = "native")]
fn rank(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let ty = crate::kernels::forms::device_preference(info.device_type);
    let be = match info.backend {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 2,
        wgpu::Backend::Gl => 1,
        _ => 0,
    };
    (ty, be)
}

/// Lists the adapters of the given backends (all when `None`).
#[cfg(feature = "native")]
pub(crate) fn enumerate(backend: Option<BackendChoice>) -> Vec<wgpu::Adapter> {
    let backends = backend.map(|b| b.backends()).unwrap_or(wgpu::Backends::all());
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    // The same shaders in debug and release builds: wgpu's debug builds add DEBUG, which puts
    // debug information into the SPIR-V, and llvmpipe compiled some kernels differently with it
    // (the f16 rounding's ties, docs/TESTING.md), so the debug test binaries tested other code
    // than `ddl` runs. WGPU_DEBUG=1 asks for it (shader debugging, captures); WGPU_VALIDATION
    // as wgpu reads it.
    desc.flags = (desc.flags - wgpu::InstanceFlags::DEBUG).with_env();
    desc.backends = backends;
    let instance = wgpu::Instance::new(desc);
    pollster::block_on(instance.enumerate_adapters(backends))
}

/// How to get an adapter on this platform: the install command of a Vulkan driver (Linux, by
/// distribution family from `/etc/os-release`), or what macOS and Windows need.
pub fn install_hint() -> String {
    if cfg!(target_os = "macos") {
        return "Metal needs no install: update macOS (Metal 2 or newer) if no adapter is found".into();
    }
    if cfg!(target_os = "windows") {
        return "DX12 needs no install: update the GPU driver (or Windows) if no adapter is found".into();
    }
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let family = release
        .lines()
        .filter(|l| l.starts_with("ID=") || l.starts_with("ID_LIKE="))
        .flat_map(|l| l.split_once('=').map(|(_, v)| v.trim_matches('"').to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    let has = |id: &str| family.split_whitespace().any(|w| w == id);
    let cmd = if has("debian") || has("ubuntu") {
        "sudo apt-get install mesa-vulkan-drivers libvulkan1"
    } else if has("fedora") || has("rhel") || has("centos") {
        "sudo dnf install mesa-vulkan-drivers vulkan-loader"
    } else if has("arch") {
        "sudo pacman -S vulkan-swrast vulkan-icd-loader"
    } else if has("opensuse") || has("suse") {
        "sudo zypper install libvulkan1 libvulkan_lvp"
    } else if has("alpine") {
        "sudo apk add mesa-vulkan-swrast vulkan-loader"
    } else {
        return "Install a Vulkan driver: your GPU vendor's, or Mesa's software driver lavapipe with the Vulkan \
                loader (`make setup` does it on Debian/Ubuntu)"
            .into();
    };
    format!(
        "Install a Vulkan driver: without a GPU, `{cmd}` gives Mesa's software driver lavapipe (`make setup` \
         does it on Debian/Ubuntu); with a GPU, its vendor's driver"
    )
}

impl Gpu {
    /// Opens the best adapter, or the one `opts` names, with its own limits.
    #[cfg(feature = "native")]
    pub fn new(opts: &GpuOptions) -> Result<Arc<Gpu>> {
        let adapters = enumerate(opts.backend);
        let all: Vec<AdapterSummary> =
            adapters.iter().enumerate().map(|(index, a)| AdapterSummary { index, info: a.get_info() }).collect();
        let listing = || {
            if all.is_empty() {
                "  (none)".to_string()
            } else {
                all.iter().map(|a| format!("  {a}")).collect::<Vec<_>>().join("\n")
            }
        };
        if adapters.is_empty() {
            let backends = match opts.backend {
                Some(b) => format!(" for backend {b:?}"),
                None => String::new(),
            };
            if let Some(backend) = opts.backend {
                // Another backend may have adapters: say so rather than suggest a driver install.
                let others = enumerate(None);
                if !others.is_empty() {
                    let list = others
                        .iter()
                        .enumerate()
                        .map(|(index, a)| format!("  {}", AdapterSummary { index, info: a.get_info() }))
                        .collect::<Vec<_>>()
                        .join("\n");
                    let hint = match opts.backend {
                        Some(BackendChoice::Vulkan) => format!("\nFor a Vulkan adapter: {}", install_hint()),
                        _ => String::new(),
                    };
                    return Err(GpuError::AdapterNotFound {
                        requested: format!("backend {backend:?}"),
                        available: list,
                        hint,
                    });
                }
            }
            return Err(GpuError::NoAdapter { backends, hint: install_hint() });
        }
        let chosen = match &opts.adapter {
            Some(sel) => {
                // A number is an index and nothing else: `--adapter 5` with two adapters is an
                // error, not the first adapter whose name happens to contain "5".
                let found = match sel.trim().parse::<usize>() {
                    Ok(i) => (i < adapters.len()).then_some(i),
                    Err(_) => {
                        let s = sel.to_ascii_lowercase();
                        all.iter().position(|a| a.info.name.to_ascii_lowercase().contains(&s))
                    }
                };
                // (With a backend, indices count its adapters only, not those `ddl info` lists
                // without one: said when the number is an index there.)
                let hint = match (opts.backend, sel.trim().parse::<usize>()) {
                    (Some(b), Ok(i)) if i < enumerate(None).len() => {
                        let name = format!("{b:?}").to_ascii_lowercase();
                        format!(
                            "\nWith --backend {name}, the indices count that backend's adapters only (those listed \
                             above); `ddl info` without --backend numbers every backend's"
                        )
                    }
                    _ => String::new(),
                };
                found.ok_or_else(|| GpuError::AdapterNotFound { requested: sel.clone(), available: listing(), hint })?
            }
            None => (0..adapters.len()).max_by_key(|&i| (rank(&all[i].info), std::cmp::Reverse(i))).unwrap(),
        };
        let adapter = adapters.into_iter().nth(chosen).unwrap();
        Self::from_adapter(adapter, all)
    }

    /// Opens the browser's WebGPU adapter with the limits and optional features it grants;
    /// awaited, since a browser cannot block. Asks for the high-performance adapter first, then
    /// for any, then for the browser's fallback (software) adapter: some browsers answer the
    /// first question with none (Chromium's SwiftShader does).
    #[cfg(target_arch = "wasm32")]
    pub async fn browser() -> Result<Arc<Gpu>> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::BROWSER_WEBGPU;
        let instance = wgpu::Instance::new(desc);
        let asks = [
            (wgpu::PowerPreference::HighPerformance, false),
            (wgpu::PowerPreference::None, false),
            (wgpu::PowerPreference::None, true),
        ];
        let mut last = String::new();
        let mut found = None;
        for (power_preference, force_fallback_adapter) in asks {
            let opts = wgpu::RequestAdapterOptions { power_preference, force_fallback_adapter, ..Default::default() };
            match instance.request_adapter(&opts).await {
                Ok(a) => {
                    found = Some(a);
                    break;
                }
                Err(e) => last = e.to_string(),
            }
        }
        let adapter = found.ok_or_else(|| GpuError::NoAdapter {
            backends: " for WebGPU".into(),
            // wgpu's own text lists every native back end as "not requested": only its WebGPU
            // part says anything here.
            hint: format!(
                "The browser offered none ({}). Use a browser with WebGPU (Chrome or Edge 113+, Firefox \
                 141+, Safari 26+), or enable it (chrome://flags/#enable-unsafe-webgpu; on Linux also \
                 chrome://flags/#enable-vulkan)",
                last.rsplit([';', ',']).next().unwrap_or(&last).trim()
            ),
        })?;
        let all = vec![AdapterSummary { index: 0, info: adapter.get_info() }];
        let limits = adapter.limits();
        Ok(Arc::new(Self::open_async(adapter, all, limits).await?))
    }

    /// Opens a device on a given adapter with the adapter's limits and optional features.
    #[cfg(feature = "native")]
    pub fn from_adapter(adapter: wgpu::Adapter, all_adapters: Vec<AdapterSummary>) -> Result<Arc<Gpu>> {
        let limits = adapter.limits();
        Self::from_adapter_limits(adapter, all_adapters, limits)
    }

    /// A second device on this adapter whose storage bindings hold at most `bytes` (a multiple
    /// of 4, at most the adapter's limit): runs the chunked paths of every kernel on small data,
    /// for testing.
    #[doc(hidden)]
    #[cfg(feature = "native")]
    pub fn with_max_storage_binding(&self, bytes: u64) -> Result<Arc<Gpu>> {
        let limits = wgpu::Limits {
            max_storage_buffer_binding_size: bytes.min(self.limits.max_storage_buffer_binding_size) / 4 * 4,
            ..self.limits.clone()
        };
        let mut g = Self::open(self.adapter.clone(), self.all_adapters.clone(), limits)?;
        g.forms = self.forms.clone();
        Ok(Arc::new(g))
    }

    #[cfg(feature = "native")]
    fn from_adapter_limits(
        adapter: wgpu::Adapter,
        all_adapters: Vec<AdapterSummary>,
        limits: wgpu::Limits,
    ) -> Result<Arc<Gpu>> {
        Ok(Arc::new(Self::open(adapter, all_adapters, limits)?))
    }

    #[cfg(feature = "native")]
    fn open(adapter: wgpu::Adapter, all_adapters: Vec<AdapterSummary>, limits: wgpu::Limits) -> Result<Gpu> {
        pollster::block_on(Self::open_async(adapter, all_adapters, limits))
    }

    async fn open_async(
        adapter: wgpu::Adapter,
        all_adapters: Vec<AdapterSummary>,
        limits: wgpu::Limits,
    ) -> Result<Gpu> {
        let info = adapter.get_info();
        let wanted = wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS
            | wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP;
        let mut features = adapter.features() & wanted;
        // Cooperative matrices (experimental in wgpu 30) where the adapter lists the one
        // configuration the engine's kernel uses; DDL_NO_COOP=1 leaves the feature off.
        let coop_feature = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        let coop_offered = crate::kernels::matmul::coop::configuration_offered(&adapter);
        let coop8_offered = crate::kernels::matmul::coop::configuration8_offered(&adapter);
        let no_coop = std::env::var("DDL_NO_COOP").is_ok_and(|v| v == "1");
        if (coop_offered || coop8_offered) && !no_coop && adapter.features().contains(coop_feature) {
            features |= coop_feature;
        }
        let desc = wgpu::DeviceDescriptor {
            label: Some("ddl"),
            required_features: features,
            required_limits: limits.clone(),
            // SAFETY: wgpu's experimental cooperative-matrix feature; the engine's kernel is used
            // only after its self-test against the f16 tiled kernel passes on this device.
            experimental_features: if features.contains(coop_feature) {
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            },
            ..Default::default()
        };
        let (device, queue) = adapter
            .request_device(&desc)
            .await
            .map_err(|e| GpuError::RequestDevice { adapter: info.name.clone(), reason: e.to_string() })?;
        // Validation errors are collected instead of panicking; `check` turns them into errors.
        let errors = Arc::new(Mutex::new(Vec::new()));
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let msg = match &e {
                wgpu::Error::OutOfMemory { .. } => format!("{OUT_OF_MEMORY}: {e}"),
                _ => e.to_string(),
            };
            if let Ok(mut v) = sink.lock() {
                v.push(msg);
            }
        }));
        // A lost device (driver reset, GPU removed, or `destroy`) is reported by `check`.
        let lost_sink = errors.clone();
        device.set_device_lost_callback(move |reason, msg| {
            if let Ok(mut v) = lost_sink.lock() {
                let detail = if msg.trim().is_empty() { String::new() } else { format!(": {}", msg.trim()) };
                v.push(format!("{DEVICE_LOST} (reason: {reason:?}{detail})"));
            }
        });
        let mut forms = crate::kernels::forms::Forms::from_env(&info, features).map_err(GpuError::Forms)?;
        // The split delta forward binds 15 storage buffers: where the device allows fewer, the
        // packed form is the one that runs at all.
        if limits.max_storage_buffers_per_shader_stage < crate::kernels::delta::SPLIT_FORWARD_STORAGE_BUFFERS {
            forms.delta_packed = true;
        }
        let coop = if no_coop {
            Err("DDL_NO_COOP=1".to_string())
        } else if !coop_offered {
            Err(format!("adapter '{}' lists no 16x16x16 f16 -> f32 cooperative-matrix configuration", info.name))
        } else if !features.contains(coop_feature) {
            Err("the cooperative-matrix feature could not be enabled".to_string())
        } else {
            Ok(())
        };
        let mut g = Gpu {
            adapter,
            device,
            queue,
            info,
            limits,
            features,
            all_adapters,
            forms,
            pipelines: Arc::new(Mutex::new(HashMap::new())),
            scratch: Arc::new(Mutex::new(HashMap::new())),
            errors,
            stats: Arc::new(AllocStats::default()),
            coop_wide: Arc::new(std::sync::OnceLock::new()),
            coop_wide_v: Arc::new(std::sync::OnceLock::new()),
            coop_wide_vq: Arc::new(std::sync::OnceLock::new()),
            coop_wide_v2: Arc::new(std::sync::OnceLock::new()),
            coop_direct: Arc::new(std::sync::OnceLock::new()),
            coop8: Arc::new(std::sync::OnceLock::new()),
            coop,
        };
        if g.coop.is_ok() {
            // The self-test: a small product against the f16 tiled kernel; a failure turns the
            // form off with a one-line note.
            g.coop = crate::kernels::matmul::coop::self_test(&g);
            if let Err(why) = &g.coop {
                eprintln!("note: cooperative-matrix matmuls are off on '{}': {why}", g.info.name);
            }
        }
        Ok(g)
    }

    /// A handle to the same device whose launchers take the forms `change` makes of this one's
    /// (tests run every form of a kernel on any adapter; benchmarks compare forms). It shares the
    /// device, queue, pipelines, scratch and counters.
    pub fn with_forms(&self, change: impl FnOnce(&mut crate::kernels::forms::Forms)) -> Arc<Gpu> {
        let mut g = self.clone();
        change(&mut g.forms);
        Arc::new(g)
    }

    /// A scratch tensor of at least `elems` f32 elements shared by every caller that names `key`:
    /// for launchers whose intermediate results live only within their own dispatches (written
    /// and consumed before the launcher's last dispatch ends), so that one buffer serves every
    /// layer of a model instead of one per call. Dispatches on one queue run in order, so the
    /// users never overlap. A request larger than the current tensor replaces it with a larger
    /// one (dispatches bound to the old one keep it alive).
    pub fn shared_scratch(&self, key: &str, elems: usize) -> Result<super::Tensor> {
        let mut map = self.scratch.lock().unwrap();
        if let Some(t) = map.get(key)
            && t.len() >= elems
        {
            return Ok(t.clone());
        }
        let t = super::Tensor::zeros(self, key, &[elems], super::DType::F32)?;
        map.insert(key.to_string(), t.clone());
        Ok(t)
    }

    /// Returns the errors the device reported since the last check, if any (a lost device or an
    /// out-of-memory error as their own kinds).
    pub fn check(&self) -> Result<()> {
        let mut errs = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if errs.is_empty() {
            return Ok(());
        }
        let all = errs.join("\n");
        errs.clear();
        if all.contains(DEVICE_LOST) {
            Err(GpuError::DeviceLost(all))
        } else if all.contains(OUT_OF_MEMORY) {
            Err(GpuError::OutOfMemory(all))
        } else {
            Err(GpuError::Device(all))
        }
    }

    /// Blocks until all submitted work has finished, then reports device errors.
    pub fn wait(&self) -> Result<()> {
        let polled = self.device.poll(wgpu::PollType::wait_indefinitely());
        // A lost device makes the poll fail too: report the cause the callback recorded first.
        self.check()?;
        polled.map_err(|e| GpuError::Device(e.to_string()))?;
        Ok(())
    }

    /// Whether GPU timestamps can be written between compute passes.
    pub fn has_timestamps(&self) -> bool {
        self.features.contains(wgpu::Features::TIMESTAMP_QUERY)
    }

    /// A short string that identifies the adapter and driver (for caches keyed per adapter).
    pub fn adapter_key(&self) -> String {
        format!(
            "{}|{:?}|{:x}:{:x}|{}",
            self.info.name, self.info.backend, self.info.vendor, self.info.device, self.info.driver_info
        )
    }

    /// Fails with a clear message when a buffer of `bytes` would not fit this adapter.
    pub fn check_buffer_size(&self, what: &str, bytes: u64) -> Result<()> {
        if bytes > self.limits.max_buffer_size {
            return Err(GpuError::TooLarge {
                what: what.to_string(),
                needed: bytes,
                max: self.limits.max_buffer_size,
                limit: "buffer",
                adapter: self.info.name.clone(),
            });
        }
        Ok(())
    }

    /// Fault injection for tests: destroys the device, as a driver reset would lose it.
    pub fn simulate_device_loss(&self) {
        self.device.destroy();
    }

    /// Fault injection for tests: the device reports running out of memory while allocating
    /// `bytes` for `what`, exactly as the uncaptured-error handler records a driver's
    /// out-of-memory error; the next [`Gpu::check`] or [`Gpu::wait`] returns
    /// [`GpuError::OutOfMemory`].
    pub fn simulate_out_of_memory(&self, what: &str, bytes: u64) {
        let mut errs = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        errs.push(format!("{OUT_OF_MEMORY}: allocating {bytes} bytes for {what} failed (injected)"));
    }
}

/// Every adapter of the given backends (all when `None`), as `ddl info` lists them.
#[cfg(feature = "native")]
pub fn enumerate_adapters(backend: Option<BackendChoice>) -> Vec<AdapterSummary> {
    enumerate(backend).iter().enumerate().map(|(index, a)| AdapterSummary { index, info: a.get_info() }).collect()
}

/// The adapter (index as `ddl info` lists them) that the process with this rank among a
/// machine's ranks drives by default: the adapters of the best kind found (discrete GPUs when
/// there are any, else integrated, ... CPU), taken in turn — local rank modulo their count.
#[cfg(feature = "native")]
pub fn adapter_for_local_rank(backend: Option<BackendChoice>, local_rank: usize) -> Option<usize> {
    let all = enumerate_adapters(backend);
    let best = all.iter().map(|a| rank(&a.info)).max()?;
    let kind: Vec<usize> = all.iter().filter(|a| rank(&a.info) == best).map(|a| a.index).collect();
    Some(kind[local_rank % kind.len()])
}
