//! Compute pipelines with explicit bind group layouts, and recorded dispatches.
//!
//! A [`Kernel`] is one entry point of one shader variant. Its bind group layout is built
//! explicitly from naga's reflection of the WGSL: every binding the entry point uses, with
//! `read_only` exactly where the shader declares `var<storage, read>`. Launchers bind buffers by
//! the names the shader gives them, so a binding can never be silently swapped.

use std::sync::Arc;

use wgpu::util::DeviceExt;

use super::tensor::View;
use super::{Gpu, GpuError, Result};

/// How a shader binding is declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindingKind {
    Uniform,
    Storage { read_only: bool },
}

/// One binding of a kernel's group 0.
#[derive(Debug, Clone)]
pub struct Binding {
    pub name: String,
    pub binding: u32,
    pub kind: BindingKind,
}

/// A compiled entry point.
pub struct Kernel {
    /// `shader[variant]::entry`, used in profiles and messages.
    pub name: String,
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    pub bindings: Vec<Binding>,
    pub workgroup_size: [u32; 3],
}

/// A kernel with its buffers and parameters bound, ready to record any number of times.
pub struct Dispatch {
    pub kernel: Arc<Kernel>,
    pub bind_group: wgpu::BindGroup,
    pub workgroups: [u32; 3],
    params: Option<wgpu::Buffer>,
    /// Scratch tensors a launcher allocated for this dispatch (kept alive with it).
    pub scratch: Vec<super::Tensor>,
    /// What the dispatch does for its caller when the kernel's name does not say it (the
    /// blocked attention's products: `attention`); profiles name it `role:kernel`
    /// ([`Dispatch::label`]), so a step's split keeps them apart from the linear layers'.
    pub role: Option<&'static str>,
    /// Its FLOPs where the launcher knows them (every matmul: 2·M·N·K per product), else 0;
    /// profiles report rates from them.
    pub flops: f64,
}

impl std::fmt::Debug for Dispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dispatch({}, workgroups {:?})", self.kernel.name, self.workgroups)
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kernel({}, workgroup {:?})", self.name, self.workgroup_size)
    }
}

impl Dispatch {
    /// The kernel's name, after `role:` where the dispatch has one (profiles, pass labels).
    pub fn label(&self) -> String {
        match self.role {
            Some(r) => format!("{r}:{}", self.kernel.name),
            None => self.kernel.name.clone(),
        }
    }

    /// Replaces the uniform parameters (same size as when bound); ordered before later submits.
    pub fn set_params(&self, gpu: &Gpu, params: &[u8]) {
        if let Some(b) = &self.params {
            gpu.queue.write_buffer(b, 0, params);
        }
    }

    /// Replaces `bytes` of the uniform parameters from byte `offset` (a multiple of 4).
    pub fn set_params_at(&self, gpu: &Gpu, offset: u64, bytes: &[u8]) {
        if let Some(b) = &self.params {
            gpu.queue.write_buffer(b, offset, bytes);
        }
    }
}

pub(crate) fn reflect(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
) -> Result<(Vec<Binding>, [u32; 3]), String> {
    let (idx, ep) = module
        .entry_points
        .iter()
        .enumerate()
        .find(|(_, e)| e.name == entry && e.stage == naga::ShaderStage::Compute)
        .ok_or_else(|| {
            let names: Vec<&str> = module.entry_points.iter().map(|e| e.name.as_str()).collect();
            format!("no compute entry point '{entry}' (has: {})", names.join(", "))
        })?;
    let fi = info.get_entry_point(idx);
    let mut bindings = Vec::new();
    for (h, gv) in module.global_variables.iter() {
        let Some(rb) = &gv.binding else { continue };
        if fi[h].is_empty() {
            continue;
        }
        if rb.group != 0 {
            return Err(format!("binding '{:?}' is in group {}; kernels use group 0 only", gv.name, rb.group));
        }
        let kind = match gv.space {
            naga::AddressSpace::Uniform => BindingKind::Uniform,
            naga::AddressSpace::Storage { access } => {
                BindingKind::Storage { read_only: !access.contains(naga::StorageAccess::STORE) }
            }
            other => {
                return Err(format!("unsupported address space {other:?} for '{:?}'", gv.name));
            }
        };
        bindings.push(Binding { name: gv.name.clone().unwrap_or_default(), binding: rb.binding, kind });
    }
    bindings.sort_by_key(|b| b.binding);
    Ok((bindings, ep.workgroup_size))
}

/// The bind group layout entries of `bindings` (every one visible to compute).
fn layout_entries(bindings: &[Binding]) -> Vec<wgpu::BindGroupLayoutEntry> {
    bindings
        .iter()
        .map(|b| wgpu::BindGroupLayoutEntry {
            binding: b.binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: match b.kind {
                    BindingKind::Uniform => wgpu::BufferBindingType::Uniform,
                    BindingKind::Storage { read_only } => wgpu::BufferBindingType::Storage { read_only },
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect()
}

impl Gpu {
    /// The bind group layout of `bindings` and the compute pipeline of `module`'s `entry` over it
    /// (labelled `label`), its workgroup memory zeroed by wgpu as the form `wg_zero` says: what
    /// [`Gpu::kernel`] caches and [`Gpu::compile_every_shader`] checks. Errors go to the caller's
    /// error scope.
    pub(crate) fn build_pipeline(
        &self,
        label: &str,
        bindings: &[Binding],
        module: &wgpu::ShaderModule,
        entry: &str,
    ) -> (wgpu::ComputePipeline, wgpu::BindGroupLayout) {
        let layout = self.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(label),
            entries: &layout_entries(bindings),
        });
        let pl = self.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(label),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(label),
            layout: Some(&pl),
            module,
            entry_point: Some(entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                zero_initialize_workgroup_memory: self.forms.wg_zero,
                ..Default::default()
            },
            cache: None,
        });
        (pipeline, layout)
    }

    /// The WGSL a module of the engine's shader `text` is made from: as it is, or with its
    /// workgroup memory poisoned at each workgroup's start (the test form `wg_poison`).
    pub(crate) fn module_text(&self, label: &str, text: String) -> std::result::Result<String, String> {
        if self.forms.wg_poison { crate::shaders::poison::poisoned(label, &text) } else { Ok(text) }
    }

    /// A shader module of the engine's own WGSL: with wgpu's runtime checks, or (`checks`
    /// false, `Forms::checks`) without its index clamps and loop counters.
    pub(crate) fn shader_module(&self, label: &str, text: String, checks: bool) -> wgpu::ShaderModule {
        let desc = wgpu::ShaderModuleDescriptor { label: Some(label), source: wgpu::ShaderSource::Wgsl(text.into()) };
        if checks {
            return self.device.create_shader_module(desc);
        }
        let mut rc = wgpu::ShaderRuntimeChecks::checked();
        rc.bounds_checks = false;
        rc.force_loop_bounding = false;
        // SAFETY: the text is the engine's own (src/shaders/), not user input. Without bounds
        // checks wgpu still bounds buffer accesses where the driver does so itself (Vulkan's
        // robust buffer access) and drops naga's clamps of array indices: every kernel keeps its
        // workgroup, private and function array indices in range by construction (clamped loads,
        // guarded stores), which the kernel tests check against float64 with this form on. Every
        // loop is bounded by its parameters (counts the launchers validate), so none is infinite.
        unsafe { self.device.create_shader_module_trusted(desc, rc) }
    }

    /// The kernel for `entry` of `shader` (variant `variant`), compiled once per device.
    pub fn kernel(&self, shader: &str, variant: Option<&str>, entry: &str) -> Result<Arc<Kernel>> {
        // Modules without wgpu's runtime checks are other pipelines (`Forms::checks`: handles
        // made with `with_forms` share the cache).
        let checks = self.forms.checks(shader);
        let key = format!("{shader}[{}]::{entry}", variant.unwrap_or(""));
        // So are pipelines without zeroed workgroup memory, and poisoned ones.
        let cache_key = format!(
            "{key}{}{}{}",
            if checks { "" } else { " unchecked" },
            if self.forms.wg_zero { "" } else { " nozero" },
            if self.forms.wg_poison { " poison" } else { "" }
        );
        if let Some(k) = self.pipelines.lock().unwrap().get(&cache_key) {
            return Ok(k.clone());
        }
        let err = |reason: String| GpuError::Shader { shader: key.clone(), reason };
        let sh = crate::shaders::get(shader).ok_or_else(|| err("not in shaders::ALL".into()))?;
        let text = self.module_text(&key, sh.text(variant).map_err(err)?).map_err(err)?;
        let (module, info) = crate::shaders::validate(&key, &text).map_err(err)?;
        let (bindings, workgroup_size) = reflect(&module, &info, entry).map_err(err)?;

        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let sm = self.shader_module(&key, text, checks);
        let (pipeline, layout) = self.build_pipeline(&key, &bindings, &sm, entry);
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(err(format!("pipeline creation failed: {e}")));
        }
        // A browser cannot block on the scope: its error joins the device's, which the next
        // `check` (every readback's) reports.
        #[cfg(target_arch = "wasm32")]
        {
            let sink = self.errors.clone();
            let name = key.clone();
            // Popped now (scopes must be popped in reverse order of their pushes), awaited later.
            let popped = scope.pop();
            wasm_bindgen_futures::spawn_local(async move {
                if let Some(e) = popped.await
                    && let Ok(mut v) = sink.lock()
                {
                    v.push(format!("creating kernel '{name}' (or a command before it) failed: {e}"));
                }
            });
        }
        let k = Arc::new(Kernel { name: key.clone(), pipeline, layout, bindings, workgroup_size });
        self.pipelines.lock().unwrap().insert(cache_key, k.clone());
        Ok(k)
    }
}

impl Kernel {
    /// Binds buffers by their WGSL names and the uniform `params` (if the kernel has one).
    pub fn dispatch(
        self: &Arc<Self>,
        gpu: &Gpu,
        params: Option<&[u8]>,
        buffers: &[(&str, View<'_>)],
        workgroups: [u32; 3],
    ) -> Result<Dispatch> {
        let err = |reason: String| GpuError::Binding { kernel: self.name.clone(), reason };
        let max = gpu.limits.max_compute_workgroups_per_dimension;
        if workgroups.iter().any(|&w| w > max) {
            return Err(err(format!("workgroups {workgroups:?} exceed the adapter's {max} per dimension")));
        }
        for (name, _) in buffers {
            if !self.bindings.iter().any(|b| b.name == *name) {
                let names: Vec<&str> = self.bindings.iter().map(|b| b.name.as_str()).collect();
                return Err(err(format!("no binding named '{name}' (has: {})", names.join(", "))));
            }
        }
        let mut params_buf = None;
        let mut entries = Vec::with_capacity(self.bindings.len());
        for b in &self.bindings {
            match b.kind {
                BindingKind::Uniform => {
                    let data = params.ok_or_else(|| err(format!("uniform '{}' needs params", b.name)))?;
                    gpu.stats.buffer();
                    params_buf = Some(gpu.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                        label: Some(&self.name),
                        contents: data,
                        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    }));
                }
                BindingKind::Storage { .. } => {
                    let (_, v) = buffers
                        .iter()
                        .find(|(n, _)| *n == b.name)
                        .ok_or_else(|| err(format!("binding '{}' was not given a buffer", b.name)))?;
                    if v.size > gpu.limits.max_storage_buffer_binding_size {
                        return Err(GpuError::TooLarge {
                            what: format!("binding '{}' of kernel '{}'", b.name, self.name),
                            needed: v.size,
                            max: gpu.limits.max_storage_buffer_binding_size,
                            limit: "storage binding",
                            adapter: gpu.info.name.clone(),
                        });
                    }
                    let align = gpu.limits.min_storage_buffer_offset_alignment as u64;
                    if v.offset % align != 0 {
                        return Err(err(format!(
                            "binding '{}' starts at byte {} which is not a multiple of {align}",
                            b.name, v.offset
                        )));
                    }
                }
            }
        }
        for b in &self.bindings {
            let resource = match b.kind {
                BindingKind::Uniform => params_buf.as_ref().unwrap().as_entire_binding(),
                BindingKind::Storage { .. } => {
                    let (_, v) = buffers.iter().find(|(n, _)| *n == b.name).unwrap();
                    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: v.buffer,
                        offset: v.offset,
                        size: std::num::NonZeroU64::new(v.size),
                    })
                }
            };
            entries.push(wgpu::BindGroupEntry { binding: b.binding, resource });
        }
        gpu.stats.bind_group();
        let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(&self.name),
            layout: &self.layout,
            entries: &entries,
        });
        Ok(Dispatch {
            kernel: self.clone(),
            bind_group,
            workgroups,
            params: params_buf,
            scratch: Vec::new(),
            role: None,
            flops: 0.0,
        })
    }
}
