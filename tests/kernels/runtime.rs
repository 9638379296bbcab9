//! The runtime itself: fills, poisoning, readback, errors, grids larger than one dimension.

use super::common::*;
use ddl::gpu::{DType, GpuError, Tensor};

#[test]
fn poison_fills_every_element_with_nan_and_fill_writes_only_its_range() {
    let gpu = gpu();
    let t = Tensor::from_f32(&gpu, "t", &[1000], &vec![1.0; 1000]).unwrap();
    ddl::kernels::poison(&gpu, &t).unwrap();
    assert!(t.read_f32(&gpu).unwrap().iter().all(|v| v.is_nan()));
    let d = ddl::kernels::fill(&gpu, &t, 10, 20, 3.5).unwrap();
    gpu.run(&[&d]).unwrap();
    let v = t.read_f32(&gpu).unwrap();
    assert!(v[..10].iter().all(|x| x.is_nan()) && v[30..].iter().all(|x| x.is_nan()));
    assert!(v[10..30].iter().all(|&x| x == 3.5));
}

#[test]
fn a_one_dimensional_grid_larger_than_65535_workgroups_reaches_every_element() {
    let gpu = gpu();
    let n = 65535 * 256 + 777;
    let t = Tensor::zeros(&gpu, "big", &[n], DType::F32).unwrap();
    let d = ddl::kernels::fill(&gpu, &t, 0, n, 2.0).unwrap();
    assert!(d.workgroups[1] > 1, "grid {:?} should use y", d.workgroups);
    gpu.run(&[&d]).unwrap();
    let v = t.read_f32(&gpu).unwrap();
    let bad = v.iter().position(|&x| x != 2.0);
    assert!(bad.is_none(), "element {bad:?} not written");
}

#[test]
fn upload_and_readback_round_trip_exactly() {
    let gpu = gpu();
    let mut rng = Rng::fresh();
    let x = rng.normal(4097, 3.0);
    let t = upload(&gpu, "x", &x);
    assert_eq!(t.read_f32(&gpu).unwrap(), x, "seed {}", rng.seed);
    let i = rng.ints(33, 1000);
    let ti = Tensor::from_i32(&gpu, "i", &[33], &i).unwrap();
    assert_eq!(ti.read_i32(&gpu).unwrap(), i);
}

#[test]
fn a_buffer_larger_than_the_adapter_allows_is_a_clear_error() {
    let gpu = gpu();
    let too_many = (gpu.limits.max_buffer_size / 4 + 1) as usize;
    let err = Tensor::zeros(&gpu, "huge", &[too_many], DType::F32).unwrap_err();
    assert!(matches!(err, GpuError::TooLarge { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("huge") && msg.contains("allows at most"), "{msg}");
}

#[test]
fn binding_a_wrong_name_or_missing_buffer_is_an_error_not_a_panic() {
    let gpu = gpu();
    let t = Tensor::zeros(&gpu, "t", &[4], DType::F32).unwrap();
    let k = gpu.kernel("fill", None, "fill").unwrap();
    let p = [4u32, 0, 0, 0];
    let e = k.dispatch(&gpu, Some(bytemuck::cast_slice(&p)), &[("nope", t.view())], [1, 1, 1]);
    assert!(e.unwrap_err().to_string().contains("no binding named 'nope'"));
    let e = k.dispatch(&gpu, Some(bytemuck::cast_slice(&p)), &[], [1, 1, 1]);
    assert!(e.unwrap_err().to_string().contains("was not given a buffer"));
    let e = gpu.kernel("no_such_shader", None, "main");
    assert!(e.is_err());
}

#[test]
fn the_bind_group_layout_marks_inputs_read_only() {
    let gpu = gpu();
    let k = gpu.kernel("matmul", Some("t16"), "matmul").unwrap();
    let ro: Vec<(String, bool)> = k
        .bindings
        .iter()
        .filter_map(|b| match b.kind {
            ddl::gpu::BindingKind::Storage { read_only } => Some((b.name.clone(), read_only)),
            _ => None,
        })
        .collect();
    assert_eq!(ro, vec![("a".into(), true), ("b".into(), true), ("c".into(), false)]);
}

#[test]
fn profiled_recording_reports_one_time_per_dispatch() {
    let gpu = gpu();
    let t = Tensor::zeros(&gpu, "t", &[1 << 16], DType::F32).unwrap();
    let d1 = ddl::kernels::fill(&gpu, &t, 0, 1 << 16, 1.0).unwrap();
    let d2 = ddl::kernels::fill(&gpu, &t, 0, 1 << 15, 2.0).unwrap();
    let mut r = ddl::gpu::Recorder::profiled(&gpu);
    r.record(&[&d1, &d2]);
    let times = r.submit().unwrap();
    assert_eq!(times.len(), 2);
    assert!(times.iter().all(|t| t.ns.is_finite() && t.ns >= 0.0 && t.name.contains("fill")));
    let v = t.read_f32(&gpu).unwrap();
    assert_eq!((v[0], v[(1 << 15) + 1]), (2.0, 1.0), "dispatch order must be kept");
}

/// Every shader variant through the device's own compiler, every entry point that fits its
/// limits built into a pipeline (the browser test runs the same check with Chrome's compiler).
#[test]
fn every_shader_variant_compiles_and_every_fitting_entry_point_builds_on_this_device() {
    let g = gpu();
    let r = ddl::gpu::now(g.compile_every_shader(true));
    assert!(r.errors.is_empty(), "the device's compiler rejected:\n{}", r.errors.join("\n"));
    let texts: usize = ddl::shaders::ALL.iter().map(|s| s.all_texts().len()).sum();
    // Only what the device lacks may be skipped: the cooperative-matrix shaders whose
    // configuration it does not list (all of them where it has none).
    let coop: usize = ddl::shaders::ALL
        .iter()
        .filter(|s| s.coop && !ddl::kernels::matmul::coop::shader_offered(&g, s.name))
        .map(|s| s.all_texts().len())
        .sum();
    assert_eq!(r.modules, texts - coop, "skipped: {:?}", r.skipped);
    assert!(r.pipelines > 1000, "only {} pipelines built; skipped: {:?}", r.pipelines, r.skipped);
    eprintln!("{} modules, {} pipelines, {} skipped", r.modules, r.pipelines, r.skipped.len());
}

/// The test form `wg_poison` (`ddl::shaders::poison`) on this driver: a kernel that reads
/// workgroup memory it has not written reads NaN, where wgpu's zeroing (`wg_zero`) gives 0.
#[test]
fn poisoned_workgroup_memory_reads_nan_where_a_kernel_has_not_written() {
    let gpu = gpu();
    const SRC: &str = "
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
var<workgroup> w: array<f32, 64>;
var<workgroup> v: array<vec4<f32>, 16>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) li: u32) {
    if (li < 32u) { w[li] = 1.0; }
    if (li < 8u) { v[li] = vec4<f32>(2.0); }
    workgroupBarrier();
    out[li] = w[li];
    out[64u + li] = v[li / 4u][li % 4u];
}";
    let run = |text: &str, zero: bool| -> Vec<f32> {
        let t = Tensor::from_f32(&gpu, "out", &[128], &[7.0; 128]).unwrap();
        let d = &gpu.device;
        let m = d.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(text.into()),
        });
        let p = d.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &m,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions {
                zero_initialize_workgroup_memory: zero,
                ..Default::default()
            },
            cache: None,
        });
        let bg = d.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &p.get_bind_group_layout(0),
            entries: &[wgpu::BindGroupEntry { binding: 0, resource: t.view().buffer.as_entire_binding() }],
        });
        let mut enc = d.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&p);
            pass.set_bind_group(0, &bg, &[]);
            pass.dispatch_workgroups(1, 1, 1);
        }
        gpu.queue.submit([enc.finish()]);
        t.read_f32(&gpu).unwrap()
    };
    let poisoned = ddl::shaders::poison::poisoned("test", SRC).unwrap();
    let p = run(&poisoned, false);
    assert!(p[..32].iter().all(|&x| x == 1.0) && p[64..96].iter().all(|&x| x == 2.0), "{p:?}");
    assert!(p[32..64].iter().chain(&p[96..]).all(|x| x.is_nan()), "unwritten elements must read NaN: {p:?}");
    let z = run(SRC, true);
    assert!(z[32..64].iter().chain(&z[96..]).all(|&x| x == 0.0), "wgpu's zeroing: {z:?}");
}
