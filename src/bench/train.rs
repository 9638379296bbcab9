//! Whole-model benchmarks: `ddl bench train` (training steps, alone or alternated with another
//! variant in one process) and `ddl bench generate` (cached decoding against recomputing).

use std::time::Instant;

use serde_json::json;

use super::{Ceiling, Row, ab_blocks, timed};
use crate::gpu::{Gpu, Recorder, Result};
use crate::model::Storage;
use crate::testing::Rng;

/// A bench model's storage: its states in f16 when asked, or implied by f16 precision where the
/// variant has them, and recomputing or not; returns the storage in effect. The precision is set
/// first, as `ddl train` sets it: an adapter without f16 refuses `--precision f16` by its name,
/// not the states it implies (their refusal says to drop `--f16-state`, which was not given).
fn set_numerics(model: &mut crate::model::Model, st: Storage) -> Result<Storage> {
    let f16 = st.state_f16 || (st.precision == crate::model::Precision::F16 && model.cfg.f16_state_support().is_ok());
    model.set_precision(st.precision)?;
    model.set_state_f16(f16)?;
    model.set_recompute(st.recompute);
    model.set_head_chunk(st.head_chunk);
    Ok(Storage { state_f16: f16, ..st })
}

/// The other side's storage of `ddl bench train --against…` when the measured side's is `st`:
/// `--against-forms` (`forms`) compares forms, so the other side keeps the measured side's
/// numerics; `--against VARIANT` alone compares with f32 (`--precision f16 --against ddl`: f16
/// against f32). It recomputes, or chunks the head, only as every side does (`--set
/// train.recompute=true`, `--set train.head_chunk=R`: `all`'s): `--recompute` and `--head-chunk`
/// are the measured side's alone.
pub fn against_storage(st: Storage, forms: bool, all: Storage) -> Storage {
    let numerics = if forms { st } else { Storage::default() };
    Storage { recompute: all.recompute, head_chunk: all.head_chunk, ..numerics }
}

/// A bench step's optimizer: in f16 the gradients carry a training run's initial loss scale,
/// which the program's loss gradient is set to.
fn bench_opt(
    model: &crate::model::Model,
    prog: &crate::model::Program,
    precision: crate::model::Precision,
) -> Result<crate::kernels::adamw::AdamWConfig> {
    let mut opt = crate::kernels::adamw::AdamWConfig::paper(1e-4);
    if precision == crate::model::Precision::F16 {
        let s = crate::train::config::DEFAULT_LOSS_SCALE as f32;
        prog.set_loss_scale(model, s)?;
        opt.grad_scale = s;
    }
    Ok(opt)
}

/// `ddl bench train`: tokens per second of full training steps (forward, backward, norm, AdamW)
/// on random tokens, with the per-kernel time split of one profiled step, the model storing its
/// activations as `st` says (f16 states, precision, recomputing: [`Storage`]); MFU against
/// `peak_tflops` when given, else against the engine's best matmul rate measured now
/// ([`Ceiling`]).
#[allow(clippy::too_many_arguments)]
pub fn train_rows(
    gpu: &std::sync::Arc<Gpu>,
    cfg: &crate::model::ModelConfig,
    batch: usize,
    seq: usize,
    steps: usize,
    list_dispatches: bool,
    st: Storage,
    peak_tflops: Option<f64>,
    mut emit: impl FnMut(Row),
) -> Result<()> {
    use crate::gpu::Op;
    let mut model = crate::model::Model::new(gpu.clone(), cfg.clone(), 1)?;
    let st = set_numerics(&mut model, st)?.on(gpu);
    let (state_f16, precision) = (st.state_f16, st.precision);
    let prog = model.program(batch, seq, &crate::kernels::adamw::AdamWConfig::paper(1e-4))?;
    let opt = bench_opt(&model, &prog, precision)?;
    let mut rng = Rng::new(7);
    let n = batch * seq;
    let x = rng.ints(n, cfg.vocab_size);
    let y = rng.ints(n, cfg.vocab_size);
    prog.set_batch(&model, &x, &y)?;
    // Warm-up (pipelines, autotune); its loss is the loss at initialisation.
    let (loss_init, _) = model.train_step(&prog, &opt)?;
    let mut times = Vec::new();
    let mut loss_last = loss_init;
    let allocs0 = gpu.stats.allocations();
    let (submits0, maps0) = gpu.stats.submits_and_maps();
    let mut cpu_times = Vec::new();
    for s in 0..steps.max(1) {
        let o = crate::kernels::adamw::AdamWConfig { step: s as u32 + 2, ..opt };
        let ((loss, _), wall, cpu) = timed(|| model.train_step(&prog, &o))?;
        loss_last = loss;
        times.push(wall);
        cpu_times.extend(cpu);
    }
    let cpu_step_ms = (!cpu_times.is_empty()).then(|| crate::stats::median(&mut cpu_times));
    let allocs_per_step = (gpu.stats.allocations() - allocs0) as f64 / steps.max(1) as f64;
    // Counted by the runtime over the timed steps: queue submits and mapped readbacks.
    let (submits1, maps1) = gpu.stats.submits_and_maps();
    let submits_per_step = (submits1 - submits0) as f64 / steps.max(1) as f64;
    let readbacks_per_step = (maps1 - maps0) as f64 / steps.max(1) as f64;
    // Every tensor alive since the device was opened: model, moments, program, scratch.
    let peak_bytes = gpu.stats.peak();
    let plan = crate::model::memory_plan_for(cfg, batch, seq, st);
    // (`median` sorts `times`: the best is then the first.)
    let step_ms = crate::stats::median(&mut times);
    let best_ms = times[0];
    // One profiled step for the split (per kernel, summed over dispatches of the same kernel).
    let mut r = Recorder::profiled(gpu);
    prog.record(&mut r, crate::model::Parts::STEP);
    let dispatches = r.dispatches;
    let kt = r.submit()?;
    let mut split: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
    // FLOPs per key where the dispatches carry them (the matmuls): the split's rates.
    let mut split_gflop: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
    for k in &kt {
        let base =
            k.name.split('[').next().unwrap_or(&k.name).to_string() + "::" + k.name.rsplit("::").next().unwrap_or("");
        *split.entry(base.clone()).or_default() += k.ns / 1e6;
        if k.flops > 0.0 {
            *split_gflop.entry(base).or_default() += k.flops / 1e9;
        }
    }
    let split_tflops: std::collections::BTreeMap<&String, f64> =
        split_gflop.iter().filter(|(k, _)| split[*k] > 0.0).map(|(k, g)| (k, g / split[k])).collect();
    let total: f64 = split.values().sum();
    // The profiled step's GPU timeline: span and idle time between dispatches (GPU timestamps).
    let (span_ms, idle_ms) = match crate::gpu::timeline(&kt) {
        Some((span, idle)) => (json!(span / 1e6), json!(idle / 1e6)),
        None => (json!(null), json!(null)),
    };
    // Every matmul dispatch, the attention's products (`attention:matmul::…`) included.
    let matmul_ms: f64 = split.iter().filter(|(k, _)| without_role(k).starts_with("matmul")).map(|(_, v)| v).sum();
    let zero_ops = prog
        .zero_ops()
        .iter()
        .chain(prog.forward_ops())
        .chain(prog.backward_ops())
        .chain(prog.finish_ops())
        .filter(|o| !matches!(o, Op::Run(_)))
        .count();
    let params = model.layout.count() as f64;
    // 6·N·P for the dense part (the usual estimate), attention scores excluded.
    let flops = 6.0 * params * n as f64;
    let ceiling = Ceiling::measure_or(gpu, peak_tflops)?;
    let mfu = flops / step_ms / 1e6 / ceiling.gflop_per_s;
    emit(Row(json!({
        "bench": "train", "variant": cfg.variant.name(), "d": cfg.d_model, "layers": cfg.n_layers,
        "batch": batch, "seq": seq, "params": params, "step_ms": step_ms,
        "precision": precision.name(), "state_f16": state_f16, "recompute": st.recompute,
        "head_chunk": st.head_chunk,
        "tok_per_s": n as f64 / (step_ms / 1e3), "model_gflop_per_s": flops / step_ms / 1e6,
        "matmul_share": if total > 0.0 { matmul_ms / total } else { 0.0 },
        "dispatches_per_step": dispatches, "transfers_per_step": zero_ops,
        "submits_per_step": submits_per_step, "readbacks_per_step": readbacks_per_step, "profiled_ms": total, "best_step_ms": best_ms,
        "mfu": mfu, "ceiling": ceiling.kind(), "ceiling_gflop_per_s": ceiling.gflop_per_s,
        "ceiling_up_to": ceiling.measured_up_to,
        "allocs_per_step": allocs_per_step, "peak_bytes": peak_bytes, "plan_bytes": plan.total(),
        "activation_plan_bytes": plan.activation_bytes,
        "peak_over_plan": peak_bytes as f64 / plan.total() as f64,
        // The same batch every step: the loss at initialisation, then after `steps` AdamW updates.
        "steps": steps.max(1), "loss_init": loss_init, "loss_last": loss_last,
        // Median CPU time of the process per step (all threads; null where not measurable).
        "cpu_step_ms": cpu_step_ms,
        "split_ms": split,
        // TFLOP/s of the split's keys whose dispatches know their FLOPs (the products, the
        // attention's `attention:matmul::…` apart), and those GFLOP.
        "split_tflop_per_s": split_tflops, "split_gflop": split_gflop,
        // GPU timestamps only (else null): first start to last end of the profiled step, and the
        // gaps between dispatches in it (one compute pass per dispatch while profiling).
        "gpu_span_ms": span_ms, "gpu_idle_ms": idle_ms,
    })));
    if list_dispatches {
        for (i, k) in kt.iter().enumerate() {
            emit(Row(
                json!({"bench": "train_dispatch", "index": i, "kernel": k.name, "workgroups": k.workgroups, "ms": k.ns / 1e6,
                       "gflop": (k.flops > 0.0).then_some(k.flops / 1e9),
                       "start_ms": k.start_ns.map(|s| s / 1e6)}),
            ));
        }
    }
    Ok(())
}

/// `ddl bench train --against V`: the training steps of `cfg` and of `against` alternated in one
/// process, in blocks of four in the order A B B A (A = `against`), so that a drift of the
/// machine's speed that is linear over a block cancels in the block's ratio
/// (B₁ + B₂) / (A₁ + A₂). Reports both variants' best and median step, the ratio of the best
/// steps, and the median, lowest and highest block ratio. Each side trains its own model on its
/// own random batch (the same tokens for both), exactly as `train_rows` times it, `cfg` stored as
/// `st` says and `against` as `against_st` (so `--variant ddl --f16-state --against ddl`
/// compares the two storages, `--recompute --against ddl` recomputing against keeping).
/// `against_gpu` (a handle to the same device with other forms, and the `DDL_FORMS`-style text
/// that made it: `--against-forms`) runs the `against` side with those forms.
#[allow(clippy::too_many_arguments)]
pub fn train_compare_rows(
    gpu: &std::sync::Arc<Gpu>,
    against_gpu: Option<(&std::sync::Arc<Gpu>, &str)>,
    cfg: &crate::model::ModelConfig,
    against: &crate::model::ModelConfig,
    batch: usize,
    seq: usize,
    blocks: usize,
    st: Storage,
    against_st: Storage,
    mut emit: impl FnMut(Row),
) -> Result<()> {
    struct Side {
        model: crate::model::Model,
        prog: crate::model::Program,
        opt: crate::kernels::adamw::AdamWConfig,
        step: u32,
        // Loss and gradient norm of every step, as bits.
        losses: Vec<[u32; 2]>,
    }
    let mut rng = Rng::new(7);
    let n = batch * seq;
    let x = rng.ints(n, cfg.vocab_size.min(against.vocab_size));
    let y = rng.ints(n, cfg.vocab_size.min(against.vocab_size));
    let mut sides = Vec::new();
    let ga = against_gpu.map_or(gpu, |(g, _)| g);
    let mut stored = Vec::new();
    for (g, c, st) in [(ga, against, against_st), (gpu, cfg, st)] {
        let mut model = crate::model::Model::new(g.clone(), c.clone(), 1)?;
        stored.push(set_numerics(&mut model, st)?);
        let prog = model.program(batch, seq, &crate::kernels::adamw::AdamWConfig::paper(1e-4))?;
        let opt = bench_opt(&model, &prog, st.precision)?;
        prog.set_batch(&model, &x, &y)?;
        // Warm-up (pipelines, autotune).
        let (l, g) = model.train_step(&prog, &opt)?;
        let losses = vec![[l.to_bits(), g.to_bits()]];
        sides.push(Side { model, prog, opt, step: 2, losses });
    }
    // Process CPU time of every step in the order they ran (all threads), where the platform
    // measures it; replayed through the same blocks for its ratios.
    let mut cpu_seq = Vec::new();
    let wall = ab_blocks(blocks, |who| {
        // Where Ctrl-C stops cleanly (`ddl experiment`'s speed section), it stops the blocks.
        if crate::train::interrupted() {
            return Err(crate::gpu::GpuError::Unsupported("interrupted".into()));
        }
        let s = &mut sides[who];
        let o = crate::kernels::adamw::AdamWConfig { step: s.step, ..s.opt };
        let ((l, g), wall, cpu) = timed(|| s.model.train_step(&s.prog, &o))?;
        s.losses.push([l.to_bits(), g.to_bits()]);
        s.step += 1;
        cpu_seq.extend(cpu);
        Ok(wall)
    })?;
    let cpu = if cpu_seq.len() == 4 * wall.blocks {
        let mut replay = cpu_seq.into_iter();
        Some(ab_blocks(wall.blocks, |_| Ok(replay.next().unwrap_or(f64::NAN)))?)
    } else {
        None
    };
    let (sa, sb) = (stored[0], stored[1]);
    emit(Row(json!({
        "bench": "train_compare", "variant": cfg.variant.name(), "against": against.variant.name(),
        "against_forms": against_gpu.map(|(_, spec)| spec),
        // Where both sides train the same model in the same numerics (only the forms differ):
        // whether every step's loss and gradient norm came out the same bits on both (forms that
        // promise the same bits, checked on the device that ran them); else null.
        // (Recomputing changes where activations live, not their bits; another head chunk sums
        // the embedding's gradient in other slices.)
        "losses_identical": (cfg == against
            && (sa.state_f16, sa.precision, sa.head_chunk) == (sb.state_f16, sb.precision, sb.head_chunk))
            .then(|| sides[0].losses == sides[1].losses),
        "precision": sb.precision.name(), "state_f16": sb.state_f16, "recompute": sb.recompute,
        "against_precision": sa.precision.name(), "against_state_f16": sa.state_f16,
        "against_recompute": sa.recompute, "head_chunk": sb.head_chunk, "against_head_chunk": sa.head_chunk,
        "d": cfg.d_model, "layers": cfg.n_layers, "batch": batch, "seq": seq, "blocks": wall.blocks,
        "best_step_ms": wall.b_best, "against_best_step_ms": wall.a_best,
        "median_step_ms": wall.b_median, "against_median_step_ms": wall.a_median,
        "ratio_best": wall.b_best / wall.a_best, "ratio_median_block": wall.ratio_median,
        "ratio_min_block": wall.ratio_min, "ratio_max_block": wall.ratio_max,
        "ratio_median_ci95": wall.ratio_ci95.map(|(lo, hi)| [lo, hi]),
        "cpu_ratio_median_block": cpu.as_ref().map(|c| c.ratio_median),
        "cpu_ratio_best": cpu.as_ref().map(|c| c.b_best / c.a_best),
        "cpu_median_step_ms": cpu.as_ref().map(|c| c.b_median),
        "against_cpu_median_step_ms": cpu.as_ref().map(|c| c.a_median),
    })));
    Ok(())
}

/// `ddl bench generate`: per-token latency of cached decoding vs recomputing the whole context.
pub fn generate_rows(
    gpu: &std::sync::Arc<Gpu>,
    cfg: &crate::model::ModelConfig,
    contexts: &[usize],
    reps: usize,
    mut emit: impl FnMut(Row),
) -> Result<()> {
    for &ctx in contexts {
        let mut c = cfg.clone();
        c.max_seq_len = c.max_seq_len.max(ctx + 1);
        let model = crate::model::Model::new(gpu.clone(), c.clone(), 1)?;
        let mut rng = Rng::new(3);
        let toks: Vec<u32> = rng.ints(ctx, c.vocab_size).into_iter().map(|t| t as u32).collect();
        // Cached: prefill ctx−1 tokens, then time single-token steps.
        let mut cache = model.decode_cache()?;
        let mut pre = model.decode_program(&cache, ctx - 1)?;
        pre.forward(&model, &toks[..ctx - 1], &mut cache)?;
        let mut step = model.decode_program(&cache, 1)?;
        // Warm-up (pipelines, first mapping), not timed.
        step.forward(&model, &[toks[ctx - 1]], &mut cache)?;
        cache.pos -= 1;
        let mut cached = Vec::new();
        for r in 0..reps.max(1) {
            let t0 = Instant::now();
            step.forward(&model, &[toks[ctx - 1]], &mut cache)?;
            cached.push(t0.elapsed().as_secs_f64() * 1e3);
            cache.pos -= 1; // decode the same position again
            let _ = r;
        }
        // Recompute: a full forward over the context for one new token.
        let prog = model.forward_program(1, ctx)?;
        let x: Vec<i32> = toks.iter().map(|&t| t as i32).collect();
        prog.set_batch(&model, &x, &vec![-1; ctx])?;
        prog.run(&model, crate::model::Parts::FORWARD)?;
        let mut full = Vec::new();
        for _ in 0..reps.max(1) {
            let t0 = Instant::now();
            prog.run(&model, crate::model::Parts::FORWARD)?;
            prog.logits().read_f32(gpu)?;
            full.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        let (cm, fm) = (crate::stats::median(&mut cached), crate::stats::median(&mut full));
        // Medians, and the fastest (least disturbed) run of each: on a shared machine a single
        // decoding step (hundreds of small dispatches) varies by 1.5× from run to run.
        emit(Row(json!({
            "bench": "generate", "variant": c.variant.name(), "context": ctx,
            "cached_ms_per_token": cm, "recompute_ms_per_token": fm, "speedup": fm / cm,
            "cached_tok_per_s": 1e3 / cm, "recompute_tok_per_s": 1e3 / fm,
            "cached_best_ms": cached[0], "recompute_best_ms": full[0], "speedup_best": full[0] / cached[0],
        })));
    }
    Ok(())
}

/// A split key without its dispatch role (`attention:matmul::wm_kk` → `matmul::wm_kk`;
/// [`crate::gpu::Dispatch::label`]).
fn without_role(key: &str) -> &str {
    match key.split_once(':') {
        Some((_, rest)) if !rest.starts_with(':') => rest,
        _ => key,
    }
}
