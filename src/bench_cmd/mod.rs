//! `ddl bench …`: the benchmarks' command (the library's `ddl::bench` measures; this parses,
//! checks the settings before the adapter opens, and prints rows as text or JSON lines).

use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::{BenchCmd, DeviceArgs};

mod settings;
use settings::*;
pub(crate) use settings::{bench_config, precision_config};

/// A size given twice is timed once: the first of each, in order.
fn first_of_each(v: &mut Vec<usize>) {
    let mut seen = std::collections::HashSet::new();
    v.retain(|x| seen.insert(*x));
}

/// An `--against-forms` that names no form (empty, or commas only) is refused, and one that no
/// adapter takes (an unknown form, a value out of range): checked against a GPU's defaults with
/// every feature, before the adapter opens (the adapter's own forms check it again).
pub(crate) fn check_against_forms(spec: &str) -> Result<()> {
    if spec.split(',').all(|p| p.trim().is_empty()) {
        anyhow::bail!(
            "--against-forms {spec:?}: no form given; give KEY=VALUE[,KEY=VALUE…] (`ddl info` lists the forms)"
        );
    }
    let all = wgpu::Features::all();
    let mut f = ddl::kernels::forms::Forms::defaults(false, (32, 32), all);
    f.apply(spec, all).map_err(|e| anyhow::anyhow!("--against-forms {spec:?}: {e}"))?;
    Ok(())
}

/// `--against-forms SPEC`: another handle to the device with `SPEC` (`DDL_FORMS` syntax) applied
/// over its forms.
fn forms_handle(gpu: &std::sync::Arc<ddl::gpu::Gpu>, spec: &str) -> Result<std::sync::Arc<ddl::gpu::Gpu>> {
    check_against_forms(spec)?;
    let mut f = gpu.forms.clone();
    f.apply(spec, gpu.features).map_err(|e| anyhow::anyhow!("--against-forms {spec:?}: {e}"))?;
    if f == gpu.forms {
        eprintln!(
            "note: --against-forms {spec:?} gives the forms this run has already (DDL_FORMS or the adapter's \
             defaults): both sides are the same, so the ratio shows only the machine's noise"
        );
    }
    Ok(gpu.with_forms(|x| *x = f))
}

/// The shapes of `preset` at `batch` × `seq` tokens (the preset's own by default) for
/// `ddl bench matmul --preset` and `ddl bench kernels`.
fn bench_shape(preset: &str, batch: Option<usize>, seq: Option<usize>) -> Result<ddl::bench::BenchShape> {
    let t = ddl::train::TrainConfig::preset(preset);
    let (b, s) = (batch.unwrap_or(t.batch_size), seq.unwrap_or(t.seq_len));
    if b == 0 || s == 0 {
        anyhow::bail!("--batch {b} --seq {s}: both must be at least 1");
    }
    Ok(ddl::bench::BenchShape::preset(preset, b, s)?)
}

/// Removes `dir` and the folders above it up to `top` while they are empty (`top` is one of its
/// ancestors, or itself); a folder that holds anything stays, and so do those above it.
fn remove_empty_folders(dir: &std::path::Path, top: &std::path::Path) {
    for d in dir.ancestors() {
        if std::fs::remove_dir(d).is_err() || d == top {
            break;
        }
    }
}

fn print_row(row: &ddl::bench::Row, json: bool) {
    if json {
        println!("{}", row.0);
    } else {
        print!("{}", row.text());
    }
}

/// What `ddl bench` makes before the adapter opens: `bench train`'s settings (its own side's
/// model and training settings, the other side's model) and the base of `bench precision`'s runs.
#[derive(Default)]
pub(crate) struct Prepared {
    train: Option<((ddl::model::ModelConfig, ddl::train::TrainConfig), Option<ddl::model::ModelConfig>)>,
    precision: Option<ddl::train::RunConfig>,
}

/// Every check of a bench command that needs no adapter and no file but `--config`: the settings
/// (made as `ddl train` makes them), the flags' values and their conflicts, the shapes of a
/// preset, the kernel forms. `ddl bench` runs them before the adapter opens (an error is not
/// buried under the kernel forms' table), and `DDL_CHECK_ARGS` (the GPU check's local run, from
/// another folder: so not `bench precision`'s --corpus and --out, which [`check_paths`] checks).
pub(crate) fn check_without_adapter(b: &BenchCmd) -> Result<Prepared> {
    let mut p = Prepared::default();
    match b {
        BenchCmd::Matmul { preset: None, batch, seq, .. } if batch.is_some() || seq.is_some() => {
            anyhow::bail!("--batch / --seq size a preset's products (--preset NAME); the square sizes are --sizes N,…");
        }
        BenchCmd::Matmul { preset: Some(p), cases, .. } if cases.join(",") != crate::cli::MATMUL_CASES => {
            anyhow::bail!(
                "--cases {}: with --preset {p} every product of a training step is timed in the form the model \
                 runs it; --cases picks the forms of square --sizes",
                cases.join(",")
            );
        }
        BenchCmd::Matmul { preset, batch, seq, cases, variants, against_forms, .. } => {
            if let Some(bad) = cases.iter().find(|c| !["nn", "nt", "tn"].contains(&c.as_str())) {
                anyhow::bail!("--cases: unknown form '{bad}' (expected nn, nt or tn)");
            }
            ddl::bench::VariantSet::check_names(variants).map_err(anyhow::Error::msg)?;
            if let Some(spec) = against_forms {
                check_against_forms(spec)?;
            }
            if let Some(name) = preset {
                bench_shape(name, *batch, *seq)?;
            }
        }
        BenchCmd::Kernels { preset, batch, seq, filter, .. } => {
            if filter.iter().any(String::is_empty) {
                // (Every name contains "": a comma at the end kept every case.)
                anyhow::bail!(
                    "--filter '{}': an empty name (a comma at the end, or two together) would keep every case; give \
                     names separated by single commas, or leave --filter out to time every case",
                    filter.join(",")
                );
            }
            bench_shape(preset, *batch, *seq)?;
        }
        BenchCmd::Train { preset, variant, config, sets, against, against_forms, batch, seq, f16_state, .. } => {
            // Both sides' settings: the other side is --against's variant, or the same one with
            // --against-forms.
            let (cfg, t) = bench_config(preset, variant, config.as_deref(), sets)?;
            let other = against.as_deref().or(against_forms.as_ref().map(|_| variant.as_str()));
            let other = other.map(|a| bench_config(preset, a, config.as_deref(), sets)).transpose()?;
            if let Some(spec) = against_forms {
                check_against_forms(spec)?;
            }
            // A flag and a --set / --config that give one setting two values: which one was
            // meant is not for the benchmark to guess (`ddl train --seed 1 --set train.seed=2`).
            for (flag, given, key, have) in
                [("--batch", *batch, "train.batch_size", t.batch_size), ("--seq", *seq, "train.seq_len", t.seq_len)]
            {
                if let Some(v) = given.filter(|&v| v != have)
                    && let Some(by) = named_by(config.as_deref(), sets, key)
                {
                    anyhow::bail!("{flag} gives {key} = {v} but {by} gives {key} = {have}: drop one of them");
                }
            }
            let s = seq.unwrap_or(t.seq_len);
            if s > cfg.max_seq_len {
                anyhow::bail!(
                    "--seq {s}: longer than the model's context (model.max_seq_len = {}); pass --seq {} or less, \
                     or raise the context with --set model.max_seq_len={s}",
                    cfg.max_seq_len,
                    cfg.max_seq_len
                );
            }
            if *f16_state && let Err(why) = cfg.f16_state_support() {
                anyhow::bail!("--f16-state: {why}; drop --f16-state (the states stay f32)");
            }
            p.train = Some(((cfg, t), other.map(|(m, _)| m)));
        }
        BenchCmd::Precision { preset, variant, config, sets, seeds, .. } => {
            p.precision = Some(precision_config(preset, variant, config.as_deref(), sets)?);
            ddl::bench::precision::check_seeds(seeds)?;
        }
        BenchCmd::Generate { preset, variant, contexts, .. } => {
            generate_contexts(preset, variant, contexts.clone())?;
        }
        BenchCmd::Data { mib, small_mib, preset, variant, .. } => {
            let v = ddl::model::Variant::parse(variant).map_err(anyhow::Error::msg)?;
            ddl::model::ModelConfig::preset(preset, v)?;
            if small_mib > mib {
                anyhow::bail!(
                    "--small-mib {small_mib} is above --mib {mib}: the small set is the one start-up and memory are \
                     compared against; give a --small-mib of at most --mib"
                );
            }
        }
        BenchCmd::Copy { .. } => {}
    }
    Ok(p)
}

/// `bench data`'s --dir ([`ddl::bench::data::check_dir`]) and `bench precision`'s folders, before
/// the adapter opens: its runs go into --out's subfolders (not inside a run's kept checkpoints,
/// which are pruned; not into a run's own folder), and train on --corpus, which must be there (the
/// default's copy in the binary stands in for it outside the repository).
fn check_paths(b: &BenchCmd) -> Result<()> {
    if let BenchCmd::Data { dir: Some(dir), .. } = b {
        return ddl::bench::data::check_dir(dir);
    }
    let BenchCmd::Precision { out, corpus, .. } = b else {
        return Ok(());
    };
    crate::train_cmd::refuse_inside_kept("--out", out)?;
    // A file where the runs' folder (or one above it) would be made: said before the adapter
    // opens, as the first run's folder would say it after.
    if let Some(file) = ddl::train::data::file_in_the_way(out) {
        anyhow::bail!(
            "--out '{}': '{}' is a file, so the runs' folder cannot be made there; choose another --out",
            out.display(),
            file.display()
        );
    }
    let trained = ddl::train::trained_files(out);
    if !trained.is_empty() {
        anyhow::bail!(
            "--out '{}' holds a training run ({}): bench precision trains its runs in subfolders of a \
             folder of its own; choose another --out",
            out.display(),
            trained.join(", ")
        );
    }
    use ddl::train::data::{DataError, PathProblem, path_problem};
    let path = std::path::PathBuf::from(corpus);
    let problem = match path_problem(&path) {
        None => return Ok(()),
        // The default corpus, not in this folder: the runs read the copy built into the binary.
        Some(PathProblem::Missing) if corpus == ddl::train::data::DEFAULT_CORPUS => return Ok(()),
        Some(PathProblem::Missing) => DataError::Missing(path),
        Some(PathProblem::BrokenLink) => DataError::BrokenLink(path),
        Some(PathProblem::Device) => DataError::Device(path),
    };
    let here = match std::env::current_dir() {
        Ok(d) if problem.to_string().contains("does not exist") && Path::new(corpus).is_relative() => {
            format!(" (looked for from {})", d.display())
        }
        _ => String::new(),
    };
    anyhow::bail!("--corpus {corpus}{here}: {problem}")
}

/// What the benchmark needs of the adapter, checked as it opens, before the kernel forms are
/// printed or anything runs: f16 shaders (SHADER_F16, not on OpenGL) for `bench precision`'s f16
/// runs, `bench train --precision f16` / `--f16-state` and `bench matmul --operands` in f16.
fn check_adapter(gpu: &ddl::gpu::Gpu, b: &BenchCmd) -> Result<()> {
    let name = &gpu.info.name;
    let no_f16 = if !gpu.features.contains(wgpu::Features::SHADER_F16) {
        format!("adapter '{name}' has no SHADER_F16 (half-precision shaders)")
    } else if gpu.info.backend == wgpu::Backend::Gl {
        format!("adapter '{name}' is on the OpenGL backend, where f16 is not supported")
    } else {
        return Ok(());
    };
    let elsewhere = "an adapter with it (e.g. --backend vulkan; `ddl info` lists the adapters)";
    match b {
        BenchCmd::Precision { .. } => anyhow::bail!(
            "bench precision: {no_f16}, which its f16 runs need (each seed trains in f32 and in f16): choose {elsewhere}"
        ),
        BenchCmd::Train { precision: ddl::model::Precision::F16, .. } => {
            anyhow::bail!("--precision f16: {no_f16}; use --precision f32, or {elsewhere}")
        }
        BenchCmd::Train { f16_state: true, .. } => {
            anyhow::bail!("--f16-state: {no_f16}; drop --f16-state (the states stay f32), or use {elsewhere}")
        }
        BenchCmd::Matmul { operands, .. }
            if operands != "f32" && !gpu.features.contains(wgpu::Features::SHADER_F16) =>
        {
            anyhow::bail!("--operands {operands}: {no_f16}; use --operands f32, or {elsewhere}")
        }
        _ => Ok(()),
    }
}

/// A `bench train` side's memory plan (`cfg` at `batch` × `seq`, stored as `st` with the f16
/// states its precision implies, as the benchmark's model stores them) against what the adapter
/// reports, as `ddl train` checks a run's: a plan that does not fit is refused with the largest
/// batch that does.
fn check_bench_memory(
    gpu: &ddl::gpu::Gpu,
    cfg: &ddl::model::ModelConfig,
    batch: usize,
    seq: usize,
    st: ddl::model::Storage,
) -> Result<()> {
    let implied = st.precision == ddl::model::Precision::F16 && cfg.f16_state_support().is_ok();
    let st = ddl::model::Storage { state_f16: st.state_f16 || implied, ..st }.on(gpu);
    let limits = ddl::model::Limits::of(gpu);
    let plan = ddl::model::memory_plan_for(cfg, batch, seq, st);
    let Some(why) = plan.misfit(&limits) else {
        return Ok(());
    };
    let largest = ddl::model::largest_fitting_batch(cfg, seq, st, &limits);
    let fix = if largest > 0 {
        format!("pass --batch {largest} or less (at most {largest} sequences of {seq} tokens fit)")
    } else {
        format!("even one sequence does not fit: lower --seq (now {seq}), or make the model smaller (--set model.…)")
    };
    anyhow::bail!(
        "bench train ({}): adapter '{}': the memory plan of a batch of {batch} × {seq} tokens is {}; {why}. To fit: {fix}",
        cfg.variant.name(),
        gpu.info.name,
        plan.summary()
    )
}

/// `bench generate`'s model and contexts: `--contexts` (each once, in order), or those of 64 and
/// 256 the model's context holds, else its context.
fn generate_contexts(
    preset: &str,
    variant: &str,
    contexts: Option<Vec<usize>>,
) -> Result<(ddl::model::ModelConfig, Vec<usize>)> {
    let v = ddl::model::Variant::parse(variant).map_err(anyhow::Error::msg)?;
    let cfg = ddl::model::ModelConfig::preset(preset, v)?;
    let cap = cfg.max_seq_len;
    let mut contexts = contexts.unwrap_or_else(|| {
        let fit: Vec<usize> = [64, 256].into_iter().filter(|&c| c <= cap).collect();
        if fit.is_empty() { vec![cap] } else { fit }
    });
    first_of_each(&mut contexts);
    if let Some(bad) = contexts.iter().find(|&&c| c < 2) {
        anyhow::bail!("--contexts: {bad} is too short (at least 2)");
    }
    if let Some(bad) = contexts.iter().find(|&&c| c > cap) {
        anyhow::bail!(
            "--contexts: {bad} is longer than the model's context (model.max_seq_len = {cap} for {preset}): \
             generation slides its window before that; give contexts up to {cap}"
        );
    }
    Ok((cfg, contexts))
}

pub(crate) fn bench(dev: &DeviceArgs, b: BenchCmd) -> Result<()> {
    // Everything that can be checked without the adapter is, before it opens (as `ddl train`
    // does); then what the benchmark needs of it, before anything is printed.
    let Prepared { train: train_configs, precision: mut precision_base } = check_without_adapter(&b)?;
    check_paths(&b)?;
    let gpu = dev.open().context("opening the GPU")?;
    check_adapter(&gpu, &b)?;
    // Every benchmark says which kernel forms it measured.
    let json = match &b {
        BenchCmd::Matmul { json, .. }
        | BenchCmd::Kernels { json, .. }
        | BenchCmd::Train { json, .. }
        | BenchCmd::Generate { json, .. }
        | BenchCmd::Data { json, .. }
        | BenchCmd::Precision { json, .. }
        | BenchCmd::Copy { json, .. } => *json,
    };
    if json {
        // The adapter first (the text forms say it in their headers), then the forms.
        let i = &gpu.info;
        println!(
            "{}",
            serde_json::json!({
                "bench": "adapter", "name": i.name, "backend": format!("{:?}", i.backend),
                "driver": i.driver, "driver_info": i.driver_info, "device_type": format!("{:?}", i.device_type),
            })
        );
        println!("{}", gpu.forms.to_json());
    } else {
        print!("{}", gpu.forms.describe());
    }
    match b {
        BenchCmd::Matmul {
            mut sizes,
            cases,
            preset,
            batch,
            seq,
            variants,
            reps,
            tune,
            operands,
            against_forms,
            json,
        } => {
            first_of_each(&mut sizes);
            // `--tune` is for its stored measurements: a cache it cannot write is said before it
            // measures (it measured, warned and exited 0, storing nothing).
            if tune && let Some(path) = ddl::kernels::matmul::autotune::cache_path() {
                let dir = path.parent().unwrap_or(std::path::Path::new("."));
                let made = std::fs::create_dir_all(dir);
                if let Err(e) = made.and_then(|()| ddl::train::checkpoint::probe_writable(&path)) {
                    anyhow::bail!(
                        "--tune stores its measurements in {}, which cannot be written ({}): set DDL_CACHE_DIR to a \
                         writable folder",
                        path.display(),
                        ddl::why_not_written(&path, &e)
                    );
                }
            }
            if !json {
                println!(
                    "adapter: {} ({:?}), timing: {}",
                    gpu.info.name,
                    gpu.info.backend,
                    if gpu.has_timestamps() { "GPU timestamps" } else { "host clock" }
                );
            }
            if let Some(bad) = sizes.iter().find(|&&s| s == 0) {
                anyhow::bail!("--sizes: {bad} is not a valid size (must be ≥ 1)");
            }
            let max = gpu.limits.max_buffer_size;
            if let Some(&bad) =
                sizes.iter().find(|&&s| s.checked_mul(s).and_then(|e| e.checked_mul(4)).is_none_or(|b| b as u64 > max))
            {
                anyhow::bail!(
                    "--sizes: {bad}: one {bad} × {bad} f32 matrix is larger than adapter '{}' can hold in a buffer \
                     ({max} bytes); choose sizes up to {}",
                    gpu.info.name,
                    ((max / 4) as f64).sqrt() as u64
                );
            }
            let variants = ddl::bench::VariantSet::parse(&variants, &gpu).map_err(anyhow::Error::msg)?;
            use ddl::kernels::matmul::MatmulElem::{F16, F32, R16};
            let (ea, eb) = match operands.as_str() {
                "r16" => (R16, R16),
                "f16" => (F16, F16),
                "rh" => (R16, F16),
                _ => (F32, F32),
            };
            let products = match &preset {
                Some(p) => {
                    let shape = bench_shape(p, batch, seq)?;
                    ddl::bench::model_matmuls(
                        shape.b * shape.t,
                        shape.d,
                        shape.heads * shape.head_dim,
                        shape.f,
                        shape.vocab,
                    )
                }
                None => {
                    let cases: Vec<&str> = cases.iter().map(|s| s.as_str()).collect();
                    ddl::bench::square_matmuls(&sizes, &cases)
                }
            };
            let products: Vec<_> = products.into_iter().map(|(n, mm)| (n, mm.elems(ea, eb))).collect();
            if tune {
                ddl::bench::tune_rows(&gpu, &products, |r| print_row(&r, json))?;
            }
            let other = against_forms.as_deref().map(|spec| forms_handle(&gpu, spec)).transpose()?;
            let against = other.as_deref().zip(against_forms.as_deref());
            ddl::bench::matmul_rows_against(&gpu, against, &products, &variants, reps, |r| print_row(&r, json))?;
        }
        BenchCmd::Kernels { filter, list, preset, batch, seq, reps, peak_tflops, json } => {
            let shape = bench_shape(&preset, batch, seq)?;
            let keep = ddl::bench::CaseFilter::new(&filter);
            let nothing_kept = || {
                anyhow::anyhow!(
                    "--filter {}: no kernel case's name contains it (names such as 'rmsnorm_forward block \
                     rows=… dim=…' or 'delta_forward …'; `ddl bench kernels --list` names them all)",
                    filter.join(",")
                )
            };
            // Every name given keeps a case: a typo among several would leave the others timed alone.
            let names = ddl::bench::kernel_case_names(&gpu, &shape)?;
            let unmatched: Vec<String> = filter
                .iter()
                .filter(|p| !names.iter().any(|(_, n)| n.contains(p.as_str())))
                .map(|p| format!("'{p}'"))
                .collect();
            if !filter.is_empty() && unmatched.len() == filter.len() {
                return Err(nothing_kept());
            }
            if !unmatched.is_empty() {
                anyhow::bail!(
                    "--filter {}: no kernel case's name contains {}, though the other names keep cases: fix or drop \
                     it (`ddl bench kernels --list` names them all)",
                    filter.join(","),
                    unmatched.join(" or ")
                );
            }
            if list {
                let names: Vec<_> = names.into_iter().filter(|(_, n)| keep.keeps(n)).collect();
                if names.is_empty() {
                    return Err(nothing_kept());
                }
                if !json {
                    println!(
                        "{} kernel cases at the shapes of {preset}, B {} × T {}, on {} ({:?}):",
                        names.len(),
                        shape.b,
                        shape.t,
                        gpu.info.name,
                        gpu.info.backend
                    );
                }
                for (module, name) in names {
                    if json {
                        println!("{}", serde_json::json!({"bench": "kernel_case", "module": module, "name": name}));
                    } else {
                        println!("  {module:<12} {name}");
                    }
                }
                return Ok(());
            }
            // The floors are measured when the first case the filter keeps is about to run.
            let floors = || -> ddl::gpu::Result<(f64, f64)> {
                let copy = ddl::bench::copy_bandwidth(&gpu, 64, 3)?;
                let gbs = copy.0["gb_per_s"].as_f64().unwrap_or(1.0);
                let ceiling = ddl::bench::Ceiling::measure_or(&gpu, peak_tflops)?;
                if !json {
                    println!(
                        "adapter: {} ({:?}); shapes of {preset} at B {} × T {}; floors: bytes at the copy \
                         bandwidth {gbs:.2} GB/s, FLOPs at {} (the larger one is each kernel's floor)",
                        gpu.info.name,
                        gpu.info.backend,
                        shape.b,
                        shape.t,
                        ceiling.describe()
                    );
                    println!(
                        "{:<52} {:>10} {:>10} {:>10} {:>8} {:>7}",
                        "kernel", "ms", "GFLOP/s", "GB/s", "floor%", "bound"
                    );
                } else {
                    print_row(&copy, true);
                    print_row(&ddl::bench::Row(ceiling.json()), true);
                }
                Ok((gbs, ceiling.gflop_per_s))
            };
            let (failed, kept) =
                ddl::bench::all_kernel_rows(&gpu, &shape, &keep, reps, floors, |r| print_row(&r, json))?;
            if kept == 0 && failed.is_empty() && !filter.is_empty() {
                return Err(nothing_kept());
            }
            if !failed.is_empty() {
                anyhow::bail!(
                    "the benchmarks of {} could not run at these shapes (above): give a smaller --batch or --seq \
                     (now B {} × T {}), or leave them out with --filter",
                    failed.join(", "),
                    shape.b,
                    shape.t
                );
            }
        }
        BenchCmd::Train {
            steps,
            batch,
            seq,
            dispatches,
            peak_tflops,
            against_forms,
            f16_state,
            precision,
            recompute,
            head_chunk,
            json,
            ..
        } => {
            let ((cfg, t), against_cfg) = train_configs.expect("made above for bench train");
            ddl::kernels::matmul::autotune::set_enabled(!dev.no_autotune);
            // (--seq within the model's context: checked before the adapter opened.)
            let (b, seq) = (batch.unwrap_or(t.batch_size), seq.unwrap_or(t.seq_len));
            let other = against_forms.as_deref().map(|spec| forms_handle(&gpu, spec)).transpose()?;
            // `--set train.recompute=true` (or `train.head_chunk=R`) holds for both sides,
            // `--recompute` (`--head-chunk R`) for the measured one.
            // A slice of all the batch's rows or more is the whole head: said, and recorded and
            // printed as that (it was recorded as given, a chunk that never sliced anything).
            let rows = b * seq;
            let given = if head_chunk > 0 { head_chunk } else { t.head_chunk };
            if given >= rows {
                let name = if head_chunk > 0 { "--head-chunk" } else { "train.head_chunk =" };
                eprintln!("note: {name} {given} covers all {rows} rows of B {b} × T {seq}: the LM head runs whole");
            }
            let used = |r: usize| ddl::model::head_chunk_used(rows, r);
            let all =
                ddl::model::Storage { recompute: t.recompute, head_chunk: used(t.head_chunk), ..Default::default() };
            let head_chunk = used(given);
            let st = ddl::model::Storage {
                state_f16: f16_state,
                precision,
                recompute: recompute || t.recompute,
                head_chunk,
                ..Default::default()
            };
            // Each side's memory plan against the adapter, before a model is made (a batch past
            // it failed on the first buffer too large, naming an internal tensor and no remedy).
            let against_st = ddl::bench::against_storage(st, other.is_some(), all);
            check_bench_memory(&gpu, &cfg, b, seq, st)?;
            if let Some(ca) = &against_cfg {
                check_bench_memory(&gpu, ca, b, seq, against_st)?;
            }
            match against_cfg {
                Some(ca) => {
                    let og = other.as_ref().zip(against_forms.as_deref());
                    ddl::bench::train_compare_rows(&gpu, og, &cfg, &ca, b, seq, steps, st, against_st, |r| {
                        print_row(&r, json)
                    })?;
                }
                None => ddl::bench::train_rows(&gpu, &cfg, b, seq, steps, dispatches, st, peak_tflops, |r| {
                    print_row(&r, json)
                })?,
            }
        }
        BenchCmd::Precision { steps, seeds, corpus, out, json, .. } => {
            let base = precision_base.take().expect("made before the adapter opened");
            let b = ddl::bench::precision::PrecisionBench { base, corpus, steps, seeds, out };
            // The folders of --out this benchmark makes (its first run makes them) are removed
            // again if it stops before a run is kept in them.
            let made = b.out.ancestors().take_while(|d| !d.as_os_str().is_empty() && !d.exists()).last();
            let made = made.map(std::path::Path::to_path_buf);
            let result = ddl::bench::precision::precision_rows(&gpu, &b, |r| print_row(&r, json));
            if (result.is_err() || ddl::train::interrupted())
                && let Some(top) = &made
            {
                remove_empty_folders(&b.out, top);
            }
            if ddl::train::interrupted() {
                eprintln!(
                    "bench precision: interrupted ({}); the finished runs in {} are kept, and the same command \
                     continues with the others",
                    ddl::train::interruption(),
                    b.out.display()
                );
                return Err(crate::Interrupted.into());
            }
            result?;
        }
        BenchCmd::Generate { preset, variant, contexts, reps, json } => {
            let (cfg, contexts) = generate_contexts(&preset, &variant, contexts)?;
            ddl::bench::generate_rows(&gpu, &cfg, &contexts, reps, |r| print_row(&r, json))?;
        }
        BenchCmd::Data { mib, small_mib, dir, keep, steps, preset, variant, draws, json } => {
            // (The preset, the variant and the sizes: checked before the adapter opened.)
            let variant = ddl::model::Variant::parse(&variant).map_err(anyhow::Error::msg)?;
            ddl::kernels::matmul::autotune::set_enabled(!dev.no_autotune);
            let dir =
                dir.unwrap_or_else(|| std::env::temp_dir().join(format!("ddl-bench-data-{}", std::process::id())));
            if !json {
                println!(
                    "adapter: {} ({:?}); sets of {small_mib} and {mib} MiB of shards in {}; {steps} steps of {preset} {} each",
                    gpu.info.name,
                    gpu.info.backend,
                    dir.display(),
                    variant.name()
                );
            }
            let o = ddl::bench::data::DataBench { dir, small_mib, mib, steps, preset, variant, draws, keep };
            // Ctrl-C stops it cleanly: what it made is removed, and it exits with 130.
            let _ctrlc = ddl::train::CtrlcScope::new();
            let result = ddl::bench::data::data_rows(&gpu, &o, |r| print_row(&r, json));
            if ddl::train::interrupted() {
                eprintln!(
                    "bench data: interrupted ({}); what it had made in {} is removed",
                    ddl::train::interruption(),
                    o.dir.display()
                );
                return Err(crate::Interrupted.into());
            }
            result?;
        }
        BenchCmd::Copy { mib, reps, json } => {
            let max = gpu.limits.max_buffer_size.min(gpu.limits.max_storage_buffer_binding_size);
            if mib.checked_mul(1 << 20).is_none_or(|b| b as u64 > max) {
                anyhow::bail!(
                    "--mib {mib}: larger than adapter '{}' binds in one buffer ({} MiB); choose --mib {} or less",
                    gpu.info.name,
                    max >> 20,
                    max >> 20
                );
            }
            let r = ddl::bench::copy_bandwidth(&gpu, mib, reps)?;
            print_row(&r, json);
        }
    }
    Ok(())
}
