//! Cached decoding reproduces the full-sequence forward, for every variant: prefill of a prompt
//! (1 token, and prompts shorter than K−1) then one token at a time.

use ddl::golden::Golden;
use ddl::model::{Layout, Model, Scoring};

fn model_from_golden(name: &str) -> (Model, Golden) {
    model_from_golden_file(&ddl::testing::data_path("tests/golden").join(format!("{name}.safetensors")))
}

fn model_from_golden_file(path: &std::path::Path) -> (Model, Golden) {
    let g = Golden::load(path).unwrap();
    (model_of(&g, g.config.clone()), g)
}

/// The golden file's parameters in a model of `config` (the file's, or it with another context
/// length).
fn model_of(g: &Golden, config: ddl::model::ModelConfig) -> Model {
    let layout = Layout::new(&g.config);
    let mut flat = vec![0.0f32; layout.total];
    for (s, &off) in layout.specs.iter().zip(&layout.offsets) {
        flat[off..off + s.len()].copy_from_slice(g.f32(&format!("param.{}", s.name), Some(&s.shape)).unwrap());
    }
    Model::with_params(ddl::testing::gpu(), config, &flat).unwrap()
}

fn check(name: &str) {
    let (model, g) = model_from_golden(name);
    let (b, t, v) = (g.batch, g.seq_len, g.config.vocab_size);
    let tokens = g.i32("input.tokens", &[b, t]).unwrap();
    let want = g.f32("out.logits", Some(&[b, t, v])).unwrap();
    for prefill in [1usize, 2, 5].into_iter().filter(|&p| p <= t) {
        for seq in 0..b {
            let toks: Vec<u32> = tokens[seq * t..(seq + 1) * t].iter().map(|&x| x as u32).collect();
            let mut cache = model.decode_cache().unwrap();
            let mut pre = model.decode_program(&cache, prefill).unwrap();
            let mut got = pre.forward(&model, &toks[..prefill], &mut cache).unwrap();
            let mut step = model.decode_program(&cache, 1).unwrap();
            for &tk in &toks[prefill..] {
                got.extend(step.forward(&model, &[tk], &mut cache).unwrap());
            }
            let w: Vec<f64> = want[seq * t * v..(seq + 1) * t * v].iter().map(|&x| x as f64).collect();
            let r = ddl::testing::compare(&format!("{name} seq {seq} prefill {prefill}"), &got, &w);
            assert!(r.passes(1e-4), "{r}");
            assert_eq!(cache.pos, t);
        }
    }
}

#[test]
fn cached_decoding_matches_the_full_forward_baseline() {
    check("baseline");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl_v1() {
    check("ddl_v1");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl() {
    check("ddl");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl_ec() {
    check("ddl_ec");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl_cc() {
    check("ddl_cc");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl_ccec() {
    check("ddl_ccec");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl_v1_vmap() {
    check("ddl_v1_vmap");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl_vmap() {
    check("ddl_vmap");
}

#[test]
fn cached_decoding_matches_for_odd_shapes() {
    // H·h ≠ d, d_v = 3, K_s = 5 > T, K_e = 2.
    for v in ["odd/ddl", "odd/ddl_ec", "odd/ddl_vmap", "odd/ddl_ccec"] {
        check(v);
    }
}

#[test]
fn cached_decoding_matches_for_a_value_width_above_eight() {
    // d_v = 9: one token per invocation in the delta write, conv caches of 9-wide rows.
    for v in ["wide/ddl", "wide/ddl_ec", "wide/ddl_cc", "wide/ddl_ccec", "wide/ddl_vmap"] {
        check(v);
    }
}

/// Chunks of several tokens at a position past 0 (a chat's later turns): prefill 2, a chunk of 3,
/// then single tokens, against the full forward.
#[test]
fn chunked_prefill_at_later_positions_matches_the_full_forward() {
    for name in ["baseline", "ddl", "ddl_cc", "ddl_ccec", "ddl_vmap", "odd/ddl_ec", "wide/ddl"] {
        let (model, g) = model_from_golden(name);
        let (b, t, v) = (g.batch, g.seq_len, g.config.vocab_size);
        let tokens = g.i32("input.tokens", &[b, t]).unwrap();
        let want = g.f32("out.logits", Some(&[b, t, v])).unwrap();
        let toks: Vec<u32> = tokens[..t].iter().map(|&x| x as u32).collect();
        let mut cache = model.decode_cache().unwrap();
        let mut got = Vec::new();
        let mut at = 0;
        for len in [2usize, 3, 1, 1, 1, 1, 1, 1, 1] {
            let len = len.min(t - at);
            if len == 0 {
                break;
            }
            let mut p = model.decode_program(&cache, len).unwrap();
            got.extend(p.forward(&model, &toks[at..at + len], &mut cache).unwrap());
            at += len;
        }
        assert_eq!(at, t, "{name}");
        let w: Vec<f64> = want[..t * v].iter().map(|&x| x as f64).collect();
        let r = ddl::testing::compare(&format!("{name} chunked"), &got, &w);
        assert!(r.passes(1e-4), "{r}");
    }
}

#[test]
fn a_full_context_is_a_clear_error() {
    let (model, _) = model_from_golden("ddl");
    let mut cache = model.decode_cache().unwrap();
    cache.pos = cache.capacity;
    let mut p = model.decode_program(&cache, 1).unwrap();
    let e = p.forward(&model, &[0], &mut cache).unwrap_err().to_string();
    assert!(e.contains("context is full"), "{e}");
}

#[test]
fn an_awaited_decode_gives_the_blocking_decodes_logits() {
    // The awaitable readback (for a browser's event loop) returns the same bits as the blocking
    // one, and advances the cache the same way.
    let (model, g) = model_from_golden("ddl_ccec");
    let toks: Vec<u32> = g.i32("input.tokens", &[g.batch, g.seq_len]).unwrap()[..4].iter().map(|&x| x as u32).collect();
    let run = |awaited: bool| {
        let mut cache = model.decode_cache().unwrap();
        let mut pre = model.decode_program(&cache, 3).unwrap();
        let mut step = model.decode_program(&cache, 1).unwrap();
        let mut out = Vec::new();
        if awaited {
            out.extend(pollster::block_on(pre.forward_async(&model, &toks[..3], &mut cache)).unwrap());
            out.extend(pollster::block_on(step.forward_async(&model, &toks[3..], &mut cache)).unwrap());
        } else {
            out.extend(pre.forward(&model, &toks[..3], &mut cache).unwrap());
            out.extend(step.forward(&model, &toks[3..], &mut cache).unwrap());
        }
        (out, cache.pos)
    };
    let (blocking, awaited) = (run(false), run(true));
    assert_eq!(blocking.1, 4);
    assert_eq!(awaited.1, 4);
    assert_eq!(blocking.0.len(), 4 * g.config.vocab_size);
    assert!(blocking.0.iter().zip(&awaited.0).all(|(a, b)| a.to_bits() == b.to_bits()), "awaited logits differ");
}

#[test]
fn a_decode_program_lists_its_delta_writes_and_refuses_another_cache() {
    let (model, _) = model_from_golden("ddl");
    let cache = model.decode_cache().unwrap();
    let mut p = model.decode_program(&cache, 1).unwrap();
    // One entry per sublayer, in sublayer order, each with the ops that record its write.
    let writes: Vec<_> = p.write_ops().map(|(l, k, ops)| (l, k, ops.len())).collect();
    let want: Vec<_> =
        (0..model.cfg.n_layers).flat_map(|l| [(l, ddl::model::SubKind::Attn), (l, ddl::model::SubKind::Mlp)]).collect();
    assert_eq!(writes.iter().map(|w| (w.0, w.1)).collect::<Vec<_>>(), want);
    assert!(writes.iter().all(|w| w.2 >= 1), "{writes:?}");
    let mut other = model.decode_cache().unwrap();
    let e = p.forward(&model, &[0], &mut other).unwrap_err().to_string();
    assert!(e.contains("another cache"), "{e}");
    // The baseline has no delta writes to override.
    let (base, _) = model_from_golden("baseline");
    let bc = base.decode_cache().unwrap();
    assert_eq!(base.decode_program(&bc, 1).unwrap().write_ops().count(), 0);
}

/// Logits of `toks` decoded in one prefill with `maps` (None: the model's own gates), and the β
/// of every write.
fn decode_with(model: &Model, toks: &[u32], maps: Option<Vec<ddl::kernels::delta::BetaMap>>) -> (Vec<f32>, Vec<f32>) {
    let mut cache = model.decode_cache().unwrap();
    cache.beta_maps = maps;
    let mut p = model.decode_program(&cache, toks.len()).unwrap();
    let logits = p.forward(model, toks, &mut cache).unwrap();
    let betas = p.acts().betas.read_f32(&model.gpu).unwrap();
    (logits, betas)
}

#[test]
fn interventions_map_beta_in_the_decode_path_and_beta_zero_everywhere_bypasses_every_block() {
    use ddl::kernels::delta::BetaMap;
    for name in ["ddl", "ddl_cc"] {
        let (model, g) = model_from_golden(name);
        let t = g.seq_len;
        let toks: Vec<u32> = g.i32("input.tokens", &[g.batch, t]).unwrap()[..t].iter().map(|&x| x as u32).collect();
        let subs = 2 * g.config.n_layers;
        let (base, base_beta) = decode_with(&model, &toks, None);
        // The identity maps are the model's own gates, bit for bit.
        let (same, _) = decode_with(&model, &toks, Some(vec![BetaMap::IDENTITY; subs]));
        assert_eq!(same, base, "{name}: identity maps changed the logits");
        // Block 0's MLP set to a projection: its β is 1 at every token, the others unchanged.
        let iv = ddl::model::Interventions::parse(&["block0.mlp:beta=1".into()], false).unwrap();
        let (proj, beta) = decode_with(&model, &toks, Some(iv.maps(&g.config).unwrap()));
        for tk in 0..t {
            for s in 0..subs {
                let (got, orig) = (beta[tk * subs + s], base_beta[tk * subs + s]);
                if s == 1 {
                    assert_eq!(got, 1.0, "{name}: token {tk}");
                } else if s == 0 {
                    assert_eq!(got, orig, "{name}: block 0 attention is before the intervention");
                }
            }
        }
        assert_ne!(proj, base, "{name}: the intervention changed nothing");
        // β = 0 everywhere: every delta write is the identity, so the logits do not depend on any
        // block's parameters: perturbing all of them changes nothing.
        let zero = ddl::model::Interventions::parse(&["all:beta=0".into()], false).unwrap().maps(&g.config).unwrap();
        let (z, zb) = decode_with(&model, &toks, Some(zero.clone()));
        assert!(zb.iter().all(|&b| b == 0.0), "{name}");
        let layout = Layout::new(&g.config);
        let mut flat = model.read_params().unwrap();
        for (s, &off) in layout.specs.iter().zip(&layout.offsets) {
            if s.name.starts_with("blocks.") {
                flat[off..off + s.len()].iter_mut().for_each(|x| *x = *x * 1.5 + 0.01);
            }
        }
        let other = Model::with_params(model.gpu.clone(), g.config.clone(), &flat).unwrap();
        let (z2, _) = decode_with(&other, &toks, Some(zero));
        assert_eq!(z, z2, "{name}: with β = 0 everywhere the blocks' parameters must not matter");
        let (b2, _) = decode_with(&other, &toks, None);
        assert_ne!(b2, base, "{name}: the perturbation must matter without the intervention");
    }
}

#[test]
fn the_writes_terms_reach_the_decode_path() {
    // `erase=0` and `v=0` on one sublayer together leave its state as it is: the logits of β = 0
    // there, bit for bit; either alone changes the logits, another way than β = 0; factors of 1
    // are the model as trained.
    let maps = |g: &Golden, specs: &[&str]| {
        let specs: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
        Some(ddl::model::Interventions::parse(&specs, false).unwrap().maps(&g.config).unwrap())
    };
    for name in ["ddl", "ddl_cc"] {
        let (model, g) = model_from_golden(name);
        let t = g.seq_len;
        let toks: Vec<u32> = g.i32("input.tokens", &[g.batch, t]).unwrap()[..t].iter().map(|&x| x as u32).collect();
        let (base, base_beta) = decode_with(&model, &toks, None);
        let (ones, _) = decode_with(&model, &toks, maps(&g, &["all:erase*=1", "all:v*=1"]));
        assert_eq!(ones, base, "{name}: factors of 1 changed the logits");
        let (zero, _) = decode_with(&model, &toks, maps(&g, &["block0.mlp:beta=0"]));
        let (none, beta) = decode_with(&model, &toks, maps(&g, &["block0.mlp:erase=0", "block0.mlp:v=0"]));
        assert_eq!(none, zero, "{name}: nothing erased and nothing written is the identity");
        // (Block 0's gates as trained; later ones read the changed state.)
        let subs = 2 * g.config.n_layers;
        let first = |b: &[f32]| b.chunks(subs).map(|r| r[..2].to_vec()).collect::<Vec<_>>();
        assert_eq!(first(&beta), first(&base_beta), "{name}: β as trained");
        for spec in ["block0.mlp:erase=0", "block0.mlp:v=0"] {
            let (one, _) = decode_with(&model, &toks, maps(&g, &[spec]));
            assert!(one != base && one != zero, "{name} {spec}: changed nothing, or removed the whole write");
        }
    }
}

#[test]
fn compare_with_identity_maps_changes_nothing_and_a_real_intervention_is_measured() {
    use ddl::generate::{GenOptions, SamplerConfig, compare, continuation_logprobs};
    use ddl::kernels::delta::BetaMap;
    let (model, g) = model_from_golden("ddl");
    let tok = ddl::tokenizer::Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_chars(
        (0..g.config.vocab_size as u32).map(|i| char::from_u32(0x4e00 + i).unwrap()).collect(),
    ));
    let prompt: Vec<u32> =
        g.i32("input.tokens", &[g.batch, g.seq_len]).unwrap()[..3].iter().map(|&x| x as u32).collect();
    let opts = GenOptions {
        max_tokens: 5,
        stop: Vec::new(),
        stop_token: None,
        trace: false,
        beta_maps: None,
        k_mean: Vec::new(),
    };
    let sampler = SamplerConfig { seed: 7, ..SamplerConfig::default() };
    let subs = 2 * g.config.n_layers;
    // The identity maps: the same continuation, and every Δ log p exactly 0.
    let c = compare(&model, &tok, &prompt, &opts, &sampler, vec![BetaMap::IDENTITY; subs], &[]).unwrap();
    assert_eq!(c.original, c.intervened);
    assert_eq!(c.first_difference, None);
    assert_eq!(c.delta_logprob.len(), 5);
    assert!(c.delta_logprob.iter().all(|&d| d == 0.0), "{:?}", c.delta_logprob);
    // Teacher-forced log-probabilities are those of the full forward's logits.
    let lp = continuation_logprobs(&model, &prompt, &c.original, None, &[]).unwrap();
    assert!(lp.iter().all(|&x| x <= 0.0 && x.is_finite()), "{lp:?}");
    // Every write a reflection: the original continuation's log-probabilities change.
    let iv = ddl::model::Interventions::parse(&["all:beta=2".into()], false).unwrap();
    let c = compare(&model, &tok, &prompt, &opts, &sampler, iv.maps(&g.config).unwrap(), &[]).unwrap();
    assert!(c.delta_logprob.iter().any(|&d| d.abs() > 1e-4), "{:?}", c.delta_logprob);
}

/// Teacher-forced log-probabilities are those generation itself had, token by token, also past
/// the context (a context of 5: generation slides to its last half, and so does the measure).
#[test]
fn teacher_forced_log_probabilities_follow_generation_past_the_context() {
    use ddl::generate::{Generator, Sampler, SamplerConfig, continuation_logprobs};
    for cap in [5usize, 1] {
        let g = Golden::load(&ddl::testing::data_path("tests/golden").join("ddl.safetensors")).unwrap();
        let mut cfg = g.config.clone();
        cfg.max_seq_len = cap;
        let layout = Layout::new(&cfg);
        let mut flat = vec![0.0f32; layout.total];
        for (s, &off) in layout.specs.iter().zip(&layout.offsets) {
            flat[off..off + s.len()].copy_from_slice(g.f32(&format!("param.{}", s.name), Some(&s.shape)).unwrap());
        }
        let model = Model::with_params(ddl::testing::gpu(), cfg.clone(), &flat).unwrap();
        let tok = ddl::tokenizer::Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_chars(
            (0..cfg.vocab_size as u32).map(|i| char::from_u32(0x4e00 + i).unwrap()).collect(),
        ));
        let prompt: Vec<u32> =
            g.i32("input.tokens", &[g.batch, g.seq_len]).unwrap()[..3].iter().map(|&x| x as u32).collect();
        let sampler = Sampler::new(SamplerConfig { seed: 11, ..SamplerConfig::default() });
        let mut generator = Generator::new(&model, &tok, &prompt, sampler, false).unwrap();
        let (mut tokens, mut had) = (Vec::new(), Vec::new());
        for _ in 0..17 {
            let row: Vec<f64> = generator.logits().iter().map(|&x| x as f64).collect();
            let t = generator.step().unwrap().token;
            let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + row.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
            had.push(row[t as usize] - lse);
            tokens.push(t);
        }
        let lp = continuation_logprobs(&model, &prompt, &tokens, None, &[]).unwrap();
        assert_eq!(lp.len(), tokens.len(), "context {cap}: one value per token");
        for (i, (a, b)) in lp.iter().zip(&had).enumerate() {
            assert!((a - b).abs() <= 1e-4, "context {cap}, token {i}: teacher-forced {a} against generation's {b}");
        }
    }
}

#[test]
fn k_mean_writes_along_the_prompts_mean_direction_from_the_prefill_on() {
    // The plain write, the v-Map direction MLP's k, and the expanded state with compressors.
    for variant in ["ddl", "ddl_vmap", "ddl_ccec"] {
        k_mean_case(variant);
    }
}

fn k_mean_case(variant: &str) {
    use ddl::generate::{GenOptions, Generator, Sampler, SamplerConfig, compare};
    let (model, g) = model_from_golden(variant);
    let tok = ddl::tokenizer::Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_chars(
        (0..g.config.vocab_size as u32).map(|i| char::from_u32(0x4e00 + i).unwrap()).collect(),
    ));
    let n = g.seq_len.min(6);
    let prompt: Vec<u32> =
        g.i32("input.tokens", &[g.batch, g.seq_len]).unwrap()[..n].iter().map(|&x| x as u32).collect();
    let iv = ddl::model::Interventions::parse(&["block1.attn:k=mean".into()], false).unwrap();
    let (targets, maps) = (iv.k_mean_targets(&g.config).unwrap(), iv.maps(&g.config).unwrap());
    let (d, target) = (g.config.d_model, 2);
    let sampler = || Sampler::new(SamplerConfig { seed: 3, ..SamplerConfig::default() });
    // The model's own unit k of block 1's attention over the prompt, averaged and renormalised.
    let plain = Generator::new(&model, &tok, &prompt, sampler(), true).unwrap();
    let mut mean = vec![0.0f64; d];
    for tr in plain.prompt_traces() {
        mean.iter_mut().zip(&tr.k[target * d..(target + 1) * d]).for_each(|(m, &x)| *m += x as f64);
    }
    let norm = mean.iter().map(|x| x * x).sum::<f64>().sqrt();
    let mean: Vec<f64> = mean.iter().map(|x| x / norm).collect();
    let differs = plain
        .prompt_traces()
        .iter()
        .any(|tr| tr.k[target * d..(target + 1) * d].iter().zip(&mean).any(|(&x, &m)| (x as f64 - m).abs() > 1e-3));
    assert!(differs, "the prompt's directions are all the same: the test would not see the replacement");
    // Under the intervention every token's k of that sublayer is the mean, prompt and generated;
    // the sublayers before it are untouched bit for bit (the prompt's tokens).
    let mut steered =
        Generator::with_interventions(&model, &tok, &prompt, sampler(), true, Some(maps.clone()), &targets).unwrap();
    let check = |tr: &ddl::generate::TokenTrace, what: &str| {
        let k = &tr.k[target * d..(target + 1) * d];
        let err = k.iter().zip(&mean).map(|(&x, &m)| (x as f64 - m).abs()).fold(0.0, f64::max);
        assert!(err < 1e-5, "{variant} {what}: k of block 1 attn is {err:.2e} from the prompt's mean direction");
    };
    for (i, (tr, pt)) in steered.prompt_traces().iter().zip(plain.prompt_traces()).enumerate() {
        check(tr, &format!("prompt token {i}"));
        assert_eq!(tr.k[..target * d], pt.k[..target * d], "prompt token {i}: sublayers before the intervened one");
    }
    for i in 0..4 {
        check(&steered.step().unwrap().trace.unwrap(), &format!("generated token {i}"));
    }
    // Its effect is measured like any intervention's.
    let opts = GenOptions {
        max_tokens: 4,
        stop: Vec::new(),
        stop_token: None,
        trace: false,
        beta_maps: None,
        k_mean: Vec::new(),
    };
    let s = SamplerConfig { seed: 3, ..SamplerConfig::default() };
    let c = compare(&model, &tok, &prompt, &opts, &s, maps, &targets).unwrap();
    assert!(c.delta_logprob.iter().any(|&x| x.abs() > 1e-6), "{:?}", c.delta_logprob);
}

/// One override golden: its name, specs, model, golden and write maps.
type Override = (String, Vec<String>, Model, Golden, Vec<ddl::kernels::delta::BetaMap>);

/// The override goldens (tests/golden/override: the public set's ddl and ddl_cc models with β
/// set on chosen sublayers, by scripts/make_override_goldens.py from the PyTorch float64
/// reference).
fn override_goldens() -> Vec<Override> {
    let dir = ddl::testing::data_path("tests/golden/override");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).collect();
    files.sort();
    assert_eq!(files.len(), 6, "{files:?}");
    files
        .into_iter()
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            let bytes = std::fs::read(&path).unwrap();
            let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
            let specs: Vec<String> =
                meta.metadata().as_ref().unwrap()["interventions"].split("; ").map(String::from).collect();
            let (model, g) = model_from_golden_file(&path);
            let maps = ddl::model::Interventions::parse(&specs, false).unwrap().maps(&g.config).unwrap();
            (name, specs, model, g, maps)
        })
        .collect()
}

#[test]
fn interventions_match_the_reference_models_override_goldens() {
    // tests/golden/override: the public set's ddl and ddl_cc models with β set to 0, 1 or 2 on
    // chosen sublayers, made by scripts/make_override_goldens.py from the PyTorch float64
    // reference. The decode path with the same `--intervene` specs gives their logits and β.
    for (name, specs, model, g, maps) in override_goldens() {
        let (b, t, v) = (g.batch, g.seq_len, g.config.vocab_size);
        let tokens = g.i32("input.tokens", &[b, t]).unwrap();
        let want = g.f32("out.logits", Some(&[b, t, v])).unwrap();
        for seq in 0..b {
            let toks: Vec<u32> = tokens[seq * t..(seq + 1) * t].iter().map(|&x| x as u32).collect();
            let (got, betas) = decode_with(&model, &toks, Some(maps.clone()));
            let w: Vec<f64> = want[seq * t * v..(seq + 1) * t * v].iter().map(|&x| x as f64).collect();
            let r = ddl::testing::compare(&format!("{name} {specs:?} seq {seq}"), &got, &w);
            assert!(r.passes(1e-4), "{r}");
            let subs = 2 * g.config.n_layers;
            for s in 0..subs {
                let key = format!("trace.blocks.{}.{}.beta", s / 2, if s % 2 == 0 { "attn" } else { "mlp" });
                let wb = g.f32(&key, Some(&[b, t])).unwrap();
                for tk in 0..t {
                    let (x, y) = (betas[tk * subs + s], wb[seq * t + tk]);
                    assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{name} {key} token {tk}: {x} vs {y}");
                }
            }
        }
    }
}

#[test]
fn an_evaluation_under_interventions_gives_the_override_goldens_loss() {
    // `ddl eval --intervene`'s program (a loss program with the write maps) against the PyTorch
    // float64 loss of the override goldens, the LM head whole and in slices; without the maps,
    // the model's own loss differs (the intervention is felt).
    for (name, specs, model, g, maps) in override_goldens() {
        let (b, t) = (g.batch, g.seq_len);
        let (tokens, targets) = (g.i32("input.tokens", &[b, t]).unwrap(), g.i32("input.targets", &[b, t]).unwrap());
        let want = g.f32("out.loss", Some(&[1])).unwrap()[0] as f64;
        let loss = |maps: Option<&[ddl::kernels::delta::BetaMap]>, chunk: usize| {
            let p = model.loss_program_with(b, t, chunk, maps, Scoring::Loss).unwrap();
            p.set_batch(&model, tokens, targets).unwrap();
            model.eval_loss(&p).unwrap().0 as f64
        };
        let mut err = 0f64;
        for chunk in [0, 5] {
            let got = loss(Some(&maps), chunk);
            assert!((got - want).abs() <= 1e-4 * want.abs(), "{name} {specs:?} head {chunk}: {got} vs {want}");
            err = err.max((got - want).abs());
        }
        let own = loss(None, 0);
        assert!((own - want).abs() > 3.0 * err, "{name}: the model's own loss {own} is as close to {want}");
    }
}

#[test]
fn an_awaited_generator_gives_the_blocking_generators_tokens_and_traces() {
    // The browser's generator (every device read awaited) and the CLI's (blocking) are one code
    // path: same tokens, same trace bits, with interventions (k = mean, a β override), a chat
    // turn fed in, and the context slid when it fills.
    use ddl::generate::{Generator, Sampler, SamplerConfig, TokenTrace};
    let g = Golden::load(&ddl::testing::data_path("tests/golden/ddl_ccec.safetensors")).unwrap();
    // A context of 12 tokens, so that it fills after a few steps (the file's 1024 took 2 × 1024
    // traced steps, 21 s on lavapipe).
    let model = model_of(&g, ddl::model::ModelConfig { max_seq_len: 12, ..g.config.clone() });
    let tok = ddl::tokenizer::Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_chars(
        (0..g.config.vocab_size as u32).map(|i| char::from_u32(0x4e00 + i).unwrap()).collect(),
    ));
    let toks: Vec<u32> = g.i32("input.tokens", &[g.batch, g.seq_len]).unwrap().iter().map(|&x| x as u32).collect();
    let prompt = &toks[..3];
    let iv =
        ddl::model::Interventions::parse(&["block1.attn:k=mean".into(), "block0.mlp:beta=0.5".into()], false).unwrap();
    let (targets, maps) = (iv.k_mean_targets(&g.config).unwrap(), iv.maps(&g.config).unwrap());
    let cap = model.cfg.max_seq_len;
    let sampler = || Sampler::new(SamplerConfig { seed: 11, temperature: 1.0, ..SamplerConfig::default() });
    type Run = (Vec<TokenTrace>, Vec<(u32, TokenTrace)>, Vec<TokenTrace>);
    let blocking = || -> Run {
        let mut gen_ =
            Generator::with_interventions(&model, &tok, prompt, sampler(), true, Some(maps.clone()), &targets).unwrap();
        let pt = gen_.prompt_traces().to_vec();
        let mut steps = Vec::new();
        for _ in 0..2 {
            let s = gen_.step().unwrap();
            steps.push((s.token, s.trace.unwrap()));
        }
        let (_, fed) = gen_.feed(&toks[3..5]).unwrap();
        // Past the context: the slide re-prefills.
        for _ in 0..cap {
            let s = gen_.step().unwrap();
            steps.push((s.token, s.trace.unwrap()));
        }
        (pt, steps, fed)
    };
    let awaited = || -> Run {
        pollster::block_on(async {
            let mut gen_ = Generator::with_interventions_async(
                &model,
                &tok,
                prompt,
                sampler(),
                true,
                Some(maps.clone()),
                &targets,
            )
            .await
            .unwrap();
            let pt = gen_.prompt_traces().to_vec();
            let mut steps = Vec::new();
            for _ in 0..2 {
                let s = gen_.step_async().await.unwrap();
                steps.push((s.token, s.trace.unwrap()));
            }
            let (_, fed) = gen_.feed_async(&toks[3..5]).await.unwrap();
            for _ in 0..cap {
                let s = gen_.step_async().await.unwrap();
                steps.push((s.token, s.trace.unwrap()));
            }
            (pt, steps, fed)
        })
    };
    let (a, b) = (blocking(), awaited());
    let bits = |t: &TokenTrace| -> Vec<u32> {
        [&t.beta, &t.k, &t.v, &t.ktx, &t.write].iter().flat_map(|v| v.iter().map(|x| x.to_bits())).collect()
    };
    assert_eq!(a.0.len(), prompt.len());
    assert!(!a.0[0].beta.is_empty(), "no trace was read");
    assert_eq!(a.0.iter().map(bits).collect::<Vec<_>>(), b.0.iter().map(bits).collect::<Vec<_>>(), "prompt traces");
    assert_eq!(a.1.len(), b.1.len());
    for (i, ((ta, ra), (tb, rb))) in a.1.iter().zip(&b.1).enumerate() {
        assert_eq!(ta, tb, "token {i}");
        assert_eq!(bits(ra), bits(rb), "trace of token {i}");
    }
    assert_eq!(a.2.iter().map(bits).collect::<Vec<_>>(), b.2.iter().map(bits).collect::<Vec<_>>(), "fed traces");
}

#[test]
fn a_logit_lens_reads_each_state_as_the_model_with_every_later_write_off() {
    // `ddl eval --lens`'s program: the head over X_0 … X_2L−1 before the model's own. State s's
    // rows equal the model's own rows with every write from sublayer s on switched off (β = 0:
    // X' = X, so the head reads X_s) — to the bit, losses and scores — and the baseline's block
    // boundaries equal the model cut after that block; the model's own loss, rows and scores are
    // the program's without the lens, to the bit; the LM head whole and in slices.
    use ddl::model::Interventions;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for name in ["baseline", "ddl_v1", "ddl", "ddl_ec", "ddl_cc", "ddl_ccec", "ddl_v1_vmap", "ddl_vmap"] {
        let (model, g) = model_from_golden(name);
        let (b, t) = (g.batch, g.seq_len);
        let (tokens, targets) = (g.i32("input.tokens", &[b, t]).unwrap(), g.i32("input.targets", &[b, t]).unwrap());
        let (n, subs) = (b * t, 2 * g.config.n_layers);
        // (loss, row losses, row scores) of a ranked loss program.
        let run = |model: &Model, maps: Option<&[ddl::kernels::delta::BetaMap]>, chunk: usize| {
            let p = model.loss_program_with(b, t, chunk, maps, Scoring::Ranks).unwrap();
            p.set_batch(model, tokens, targets).unwrap();
            let loss = model.eval_loss(&p).unwrap().0;
            let rows = p.row_losses().unwrap().read_f32(&model.gpu).unwrap();
            (loss, rows, p.row_ranks().unwrap().read_f32(&model.gpu).unwrap())
        };
        for chunk in [0, 5] {
            let p = model.loss_program_with(b, t, chunk, None, Scoring::Lens).unwrap();
            p.set_batch(&model, tokens, targets).unwrap();
            let loss = model.eval_loss(&p).unwrap().0;
            let lens = p.lens().unwrap();
            let (ll, lr) = (lens.loss.read_f32(&model.gpu).unwrap(), lens.ranks.read_f32(&model.gpu).unwrap());
            assert_eq!((ll.len(), lr.len()), (subs * n, 4 * subs * n));
            let own = run(&model, None, chunk);
            assert_eq!(loss.to_bits(), own.0.to_bits(), "{name} head {chunk}: the model's loss");
            assert_eq!(bits(&p.row_losses().unwrap().read_f32(&model.gpu).unwrap()), bits(&own.1), "{name}");
            assert_eq!(bits(&p.row_ranks().unwrap().read_f32(&model.gpu).unwrap()), bits(&own.2), "{name}");
            for s in 0..subs {
                let (rows, ranks) = (&ll[s * n..(s + 1) * n], &lr[4 * s * n..4 * (s + 1) * n]);
                assert!(rows.iter().all(|x| x.is_finite()) && rows != &own.1[..], "{name} state {s}: {rows:?}");
                let want = if model.cfg.variant.is_ddl() {
                    let specs: Vec<String> =
                        (s..subs).map(|i| format!("{}:write=0", ddl::model::intervene::sublayer_name(i))).collect();
                    let maps = Interventions::parse(&specs, false).unwrap().maps(&model.cfg).unwrap();
                    run(&model, Some(&maps), chunk)
                } else if s % 2 == 0 && s > 0 {
                    // The baseline's state after block s/2 − 1: the model of its first s/2 blocks.
                    let mut cfg = g.config.clone();
                    cfg.n_layers = s / 2;
                    run(&cut_model(&g, &cfg), None, chunk)
                } else {
                    continue;
                };
                assert_eq!(bits(rows), bits(&want.1), "{name} head {chunk} state {s}: row losses");
                assert_eq!(bits(ranks), bits(&want.2), "{name} head {chunk} state {s}: scores");
            }
        }
    }
}

/// A model of the golden's parameters under `cfg` (fewer blocks: the first ones).
fn cut_model(g: &Golden, cfg: &ddl::model::ModelConfig) -> Model {
    let layout = Layout::new(cfg);
    let mut flat = vec![0.0f32; layout.total];
    for (s, &off) in layout.specs.iter().zip(&layout.offsets) {
        flat[off..off + s.len()].copy_from_slice(g.f32(&format!("param.{}", s.name), Some(&s.shape)).unwrap());
    }
    Model::with_params(ddl::testing::gpu(), cfg.clone(), &flat).unwrap()
}

/// `--repetition-penalty` penalises the tokens in the context, the window the model reads (as
/// its help says), not every token of the history: a token only in a prompt's dropped part (or
/// slid out) is not penalised. It penalised the whole history, so a prompt past the context
/// changed what its window alone gives, and every step walked the whole prompt.
#[test]
fn the_repetition_penalty_covers_the_context_not_the_dropped_tokens() {
    use ddl::generate::{Generator, Sampler, SamplerConfig};
    let g = Golden::load(&ddl::testing::data_path("tests/golden").join("ddl.safetensors")).unwrap();
    let mut cfg = g.config.clone();
    cfg.max_seq_len = 4;
    let model = model_of(&g, cfg.clone());
    let tok = ddl::tokenizer::Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_chars(
        (0..cfg.vocab_size as u32).map(|i| char::from_u32(0x4e00 + i).unwrap()).collect(),
    ));
    let window: Vec<u32> =
        g.i32("input.tokens", &[g.batch, g.seq_len]).unwrap()[..4].iter().map(|&x| x as u32).collect();
    let p = 1e6f64;
    let sampler =
        || Sampler::new(SamplerConfig { temperature: 0.0, repetition_penalty: p as f32, ..Default::default() });
    // The greedy pick over the logits with `seen` penalised, as the sampler documents it.
    let pick = |logits: &[f32], seen: &[u32]| -> u32 {
        let l: Vec<f64> = logits
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let x = x as f64;
                if seen.contains(&(i as u32)) { if x > 0.0 { x / p } else { x * p } } else { x }
            })
            .collect();
        (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as u32
    };
    let mut alone = Generator::new(&model, &tok, &window, sampler(), false).unwrap();
    let logits = alone.logits().to_vec();
    let want = pick(&logits, &window);
    assert_eq!(alone.step().unwrap().token, want);
    // The same window after a dropped token that is the window's greedy pick: not penalised.
    let prompt: Vec<u32> = std::iter::once(want).chain(window.iter().copied()).collect();
    let mut long = Generator::new(&model, &tok, &prompt, sampler(), false).unwrap();
    assert_eq!(long.logits(), &logits[..], "the same window read");
    assert_ne!(pick(&logits, &prompt), want, "the dropped token must matter for the test to tell");
    assert_eq!(long.step().unwrap().token, want, "a dropped prompt token was penalised");
    // Past the slides too: every step's pick penalises only the window it reads.
    let mut generator = Generator::new(&model, &tok, &window, sampler(), false).unwrap();
    for i in 0..12 {
        let (logits, h) = (generator.logits().to_vec(), generator.history().to_vec());
        let pos = generator.context_len();
        let t = generator.step().unwrap().token;
        assert_eq!(t, pick(&logits, &h[h.len() - pos..]), "step {i}");
    }
}
