//! The portability check: naga validates each variant's WGSL and translates it to SPIR-V, MSL and
//! HLSL (no GPU needed).

use super::Shader;

/// Parses and validates WGSL with naga, returning the module and its analysis.
pub fn validate(label: &str, wgsl: &str) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(wgsl)
        .map_err(|e| format!("{label}: WGSL parse error:\n{}", e.emit_to_string(wgsl)))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| format!("{label}: naga validation error:\n{}", e.emit_to_string(wgsl)))?;
    Ok((module, info))
}

/// Translates a validated module to SPIR-V (Vulkan), MSL (Metal) and HLSL (DX12): the portability
/// check that runs without any GPU.
pub fn translate_all(label: &str, module: &naga::Module, info: &naga::valid::ModuleInfo) -> Result<(), String> {
    translate(label, module, info, false)
}

/// [`translate_all`]; a cooperative-matrix shader ([`Shader::coop`]) to SPIR-V and MSL 2.3 only.
pub fn translate(label: &str, module: &naga::Module, info: &naga::valid::ModuleInfo, coop: bool) -> Result<(), String> {
    use naga::back::{hlsl, msl, spv};
    spv::write_vec(module, info, &spv::Options::default(), None)
        .map_err(|e| format!("{label}: SPIR-V translation failed: {e}"))?;
    let mopts =
        if coop { msl::Options { lang_version: (2, 3), ..Default::default() } } else { msl::Options::default() };
    msl::write_string(module, info, &mopts, &msl::PipelineOptions::default())
        .map_err(|e| format!("{label}: MSL translation failed: {e}"))?;
    if coop {
        return Ok(());
    }
    let mut out = String::new();
    let opts = hlsl::Options { shader_model: hlsl::ShaderModel::V6_0, ..Default::default() };
    hlsl::Writer::new(&mut out, &opts, &hlsl::PipelineOptions::default())
        .write(module, info, None)
        .map_err(|e| format!("{label}: HLSL translation failed: {e}"))?;
    Ok(())
}

/// [`translate_all`], with a back end's panic (naga's writers assert on some constructs, e.g.
/// 64-bit floats in MSL) reported as a failure of that shader instead of aborting the check.
pub fn translate_all_caught(
    label: &str,
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    coop: bool,
) -> Result<(), String> {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| translate(label, module, info, coop)));
    std::panic::set_hook(prev);
    match r {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("{label}: a back end (SPIR-V/MSL/HLSL) could not translate it: {msg}"))
        }
    }
}

/// The storage buffers each entry point of a validated module uses (what counts against an
/// adapter's `max_storage_buffers_per_shader_stage`: 8 by WebGPU's default, 10 on Chrome's
/// SwiftShader), by entry point name.
pub fn storage_buffers_per_entry(module: &naga::Module, info: &naga::valid::ModuleInfo) -> Vec<(String, usize)> {
    module
        .entry_points
        .iter()
        .enumerate()
        .map(|(i, ep)| {
            let fi = info.get_entry_point(i);
            let n = module
                .global_variables
                .iter()
                .filter(|(h, g)| matches!(g.space, naga::AddressSpace::Storage { .. }) && !fi[*h].is_empty())
                .count();
            (ep.name.clone(), n)
        })
        .collect()
}

/// Validates and translates every variant of every shader; returns all failures.
pub fn check_all(shaders: &[Shader]) -> Vec<String> {
    let mut errors = Vec::new();
    for sh in shaders {
        for (variant, text) in sh.all_texts() {
            let label = if variant.is_empty() {
                format!("shaders/{}.wgsl", sh.name)
            } else {
                format!("shaders/{}.wgsl [{}]", sh.name, variant)
            };
            match validate(&label, &text) {
                Ok((m, i)) => {
                    if let Err(e) = translate_all_caught(&label, &m, &i, sh.coop) {
                        errors.push(e)
                    }
                }
                Err(e) => errors.push(e),
            }
        }
    }
    errors
}
