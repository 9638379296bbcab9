//! Every shader text of the engine through this device's own compiler: [`Gpu::compile_every_shader`].
//!
//! naga validates every variant on every build (`cargo test shaders`), but a device may bring its
//! own WGSL compiler: a browser's (Chrome's Tint, Firefox's naga, Safari's) is stricter in places
//! naga is not, and a kernel whose text it rejects fails only when a user's model first needs it.
//! This check hands each variant to the device as the engine would, reads the compiler's
//! messages, and optionally builds a pipeline for every entry point that fits the device's
//! limits. The browser test runs it in headless Chromium, a kernel test on the native adapter.

use super::Gpu;
use super::kernel::{BindingKind, reflect};

/// What [`Gpu::compile_every_shader`] found.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct CompileReport {
    /// Shader modules the device compiled (one per variant).
    pub modules: usize,
    /// Compute pipelines built (when asked for).
    pub pipelines: usize,
    /// What was not compiled here and why (a feature or a limit the device lacks: the form
    /// table never chooses those on this device).
    pub skipped: Vec<String>,
    /// The compiler's errors, each naming `shader[variant]` (and `::entry` for pipelines).
    pub errors: Vec<String>,
    /// The compiler's warnings.
    pub warnings: Vec<String>,
}

/// naga capabilities of what the device offers beyond every device's WGSL: subgroups and
/// cooperative matrices (f16 is told by its `enable f16;`). A text naga rejects without them
/// needs them.
fn capabilities(features: wgpu::Features) -> naga::valid::Capabilities {
    use naga::valid::Capabilities as C;
    let mut caps = C::all();
    if !features.contains(wgpu::Features::SUBGROUP) {
        caps.remove(C::SUBGROUP | C::SUBGROUP_BARRIER | C::SUBGROUP_VERTEX_STAGE);
    }
    if !features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
        caps.remove(C::COOPERATIVE_MATRIX);
    }
    caps
}

/// Why the entry point `idx` of `module` cannot run within `limits`, if it cannot.
fn exceeds(
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    idx: usize,
    bindings: &[super::Binding],
    wg: [u32; 3],
    limits: &wgpu::Limits,
) -> Option<String> {
    let storage = bindings.iter().filter(|b| matches!(b.kind, BindingKind::Storage { .. })).count() as u32;
    if storage > limits.max_storage_buffers_per_shader_stage {
        return Some(format!("{storage} storage buffers > {}", limits.max_storage_buffers_per_shader_stage));
    }
    let invocations = wg[0] * wg[1] * wg[2];
    if invocations > limits.max_compute_invocations_per_workgroup
        || wg[0] > limits.max_compute_workgroup_size_x
        || wg[1] > limits.max_compute_workgroup_size_y
        || wg[2] > limits.max_compute_workgroup_size_z
    {
        return Some(format!(
            "workgroup {wg:?} > the device's {} invocations ({}, {}, {})",
            limits.max_compute_invocations_per_workgroup,
            limits.max_compute_workgroup_size_x,
            limits.max_compute_workgroup_size_y,
            limits.max_compute_workgroup_size_z
        ));
    }
    let fi = info.get_entry_point(idx);
    let shared: u32 = module
        .global_variables
        .iter()
        .filter(|(h, gv)| gv.space == naga::AddressSpace::WorkGroup && !fi[*h].is_empty())
        .map(|(_, gv)| module.types[gv.ty].inner.size(module.to_ctx()))
        .sum();
    if shared > limits.max_compute_workgroup_storage_size {
        return Some(format!("{shared} B of workgroup memory > {}", limits.max_compute_workgroup_storage_size));
    }
    None
}

impl CompileReport {
    /// Appends `other`'s counts and lines (the per-variant reports, merged in a fixed order).
    fn absorb(&mut self, other: CompileReport) {
        self.modules += other.modules;
        self.pipelines += other.pipelines;
        self.skipped.extend(other.skipped);
        self.errors.extend(other.errors);
        self.warnings.extend(other.warnings);
    }
}

impl Gpu {
    /// Compiles every variant of every shader of [`crate::shaders::ALL`] with this device's
    /// compiler and, with `pipelines`, builds every entry point that fits the device's limits;
    /// variants that need a feature the device lacks are skipped (named in the report). Awaited:
    /// a browser answers compilation messages asynchronously (natively the answers are ready at
    /// once, so [`super::now`] can run it).
    ///
    /// Natively the variants are compiled on one thread per core (a driver such as NVIDIA's
    /// compiles each pipeline for ≈ 0.1 s, ≈ 1300 of them one after another outlasted the GPU
    /// check's stage; wgpu's error scopes are per thread, so each thread reads its own errors).
    /// The report lists its lines in the same order either way.
    pub async fn compile_every_shader(&self, pipelines: bool) -> CompileReport {
        let mut r = CompileReport::default();
        let mut work = Vec::new();
        for sh in crate::shaders::ALL {
            if sh.coop && !crate::kernels::matmul::coop::shader_offered(self, sh.name) {
                // A cooperative-matrix configuration the adapter does not list (Metal's 8 × 8 on
                // a Vulkan GPU, or none at all): its driver need not compile it.
                for (variant, _) in sh.all_texts() {
                    r.skipped.push(format!(
                        "{}[{variant}]: needs a cooperative-matrix configuration this adapter does not list",
                        sh.name
                    ));
                }
                continue;
            }
            for (variant, text) in sh.all_texts() {
                work.push((format!("{}[{variant}]", sh.name), text));
            }
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let threads = std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(1, 32);
            let next = std::sync::atomic::AtomicUsize::new(0);
            let mut parts: Vec<(usize, CompileReport)> = std::thread::scope(|sc| {
                let workers: Vec<_> = (0..threads.min(work.len()))
                    .map(|_| {
                        sc.spawn(|| {
                            let mut done = Vec::new();
                            loop {
                                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                let Some((name, text)) = work.get(i) else { break };
                                done.push((i, super::now(self.compile_variant(name, text, pipelines))));
                            }
                            done
                        })
                    })
                    .collect();
                workers.into_iter().flat_map(|w| w.join().expect("a shader compile thread panicked")).collect()
            });
            parts.sort_by_key(|(i, _)| *i);
            for (_, part) in parts {
                r.absorb(part);
            }
        }
        #[cfg(target_arch = "wasm32")]
        for (name, text) in &work {
            let part = self.compile_variant(name, text, pipelines).await;
            r.absorb(part);
        }
        r
    }

    /// One variant (`name` = `shader[variant]`, its WGSL `text`) through the device's compiler,
    /// and its entry points into pipelines with `pipelines`: what [`Gpu::compile_every_shader`]
    /// does for each.
    async fn compile_variant(&self, name: &str, text: &str, pipelines: bool) -> CompileReport {
        let mut r = CompileReport::default();
        let text = match self.module_text(name, text.to_string()) {
            Ok(t) => t,
            Err(e) => {
                r.errors.push(format!("wg_poison: {e}"));
                return r;
            }
        };
        let text = text.as_str();
        let (module, info) = match crate::shaders::validate(name, text) {
            Ok(m) => m,
            Err(e) => {
                r.errors.push(format!("naga: {e}"));
                return r;
            }
        };
        if text.lines().any(|l| l.trim() == "enable f16;") && !self.features.contains(wgpu::Features::SHADER_F16) {
            r.skipped.push(format!("{name}: needs SHADER_F16"));
            return r;
        }
        let strict = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities(self.features))
            .validate(&module);
        if let Err(e) = strict {
            let why = e.as_inner().to_string();
            r.skipped.push(format!("{name}: needs subgroups or cooperative matrices ({why})"));
            return r;
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let shader = name.split('[').next().unwrap_or(name);
        let sm = self.shader_module(name, text.to_string(), self.forms.checks(shader));
        let popped = scope.pop();
        let messages = sm.get_compilation_info().await.messages;
        let error = popped.await;
        for m in messages {
            let at = m.location.map(|l| format!(" at line {}:{}", l.line_number, l.line_position));
            let line = format!("{name}{}: {}", at.unwrap_or_default(), m.message);
            match m.message_type {
                wgpu::CompilationMessageType::Error => r.errors.push(line),
                wgpu::CompilationMessageType::Warning => r.warnings.push(line),
                wgpu::CompilationMessageType::Info => {}
            }
        }
        if let Some(e) = error {
            r.errors.push(format!("{name}: {e}"));
            return r;
        }
        r.modules += 1;
        if !pipelines {
            return r;
        }
        for (idx, ep) in module.entry_points.iter().enumerate() {
            let entry = format!("{name}::{}", ep.name);
            let (bindings, wg) = match reflect(&module, &info, &ep.name) {
                Ok(b) => b,
                Err(e) => {
                    r.errors.push(format!("{entry}: {e}"));
                    continue;
                }
            };
            if let Some(why) = exceeds(&module, &info, idx, &bindings, wg, &self.limits) {
                r.skipped.push(format!("{entry}: {why}"));
                continue;
            }
            let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
            let _pipeline = self.build_pipeline(&entry, &bindings, &sm, &ep.name);
            match scope.pop().await {
                Some(e) => r.errors.push(format!("{entry}: {e}")),
                None => r.pipelines += 1,
            }
        }
        r
    }
}
