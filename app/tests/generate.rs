//! The app with its model thread on a tiny checkpoint: Generate streams tokens into chips, Step
//! adds one, Stop stops; bad checkpoints are messages.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use ddl_viz::app::{Options, VizApp};
use ddl_viz::trace::chip_text;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

fn wait(h: &mut Harness<'_, VizApp>, what: &str, done: impl Fn(&VizApp) -> bool) {
    let t0 = Instant::now();
    loop {
        h.step();
        if done(h.state()) {
            h.run();
            return;
        }
        let errs: Vec<String> = h.state().messages.iter().map(|m| m.1.clone()).collect();
        assert!(t0.elapsed() < Duration::from_secs(120), "timed out waiting for {what}; messages {errs:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The app with its model thread on a fresh tiny checkpoint (in a temporary folder named after
/// `name`), the prompt "First Citizen:", once the model has loaded: (folder, checkpoint, harness).
fn loaded(name: &str) -> (std::path::PathBuf, std::path::PathBuf, Harness<'static, VizApp>) {
    let dir = common::tmpdir(name);
    let ck = common::tiny_checkpoint(&dir);
    let app = VizApp::new(
        None,
        Options { checkpoint: Some(ck.clone()), prompt: Some("First Citizen:".into()), ..Default::default() },
    );
    let mut h =
        Harness::builder().with_size([1280.0, 800.0]).build_ui_state(|ui, app: &mut VizApp| app.ui_root(ui), app);
    wait(&mut h, "the model to load", |a| a.model.is_some() && !a.busy());
    (dir, ck, h)
}

#[test]
fn generate_step_and_errors_with_a_tiny_model() {
    let (dir, ck, mut h) = loaded("gen");
    assert_eq!(h.state().model.as_ref().unwrap().config.n_layers, 2);
    h.state_mut().max_tokens = 6;
    h.get_by_label("Generate").click();
    wait(&mut h, "generation", |a| !a.busy() && a.trace.rows.iter().any(|r| !r.prompt));
    let app = h.state();
    let prompt = app.trace.rows.iter().filter(|r| r.prompt).count();
    let generated = app.trace.len() - prompt;
    assert_eq!(prompt, "First Citizen:".len(), "char tokenizer: one prompt token per character");
    assert!(generated > 0 && generated <= 6, "{generated} tokens generated");
    assert!((0..app.trace.len()).all(|t| app.trace.has(t)), "every token, prompt included, has its writes");
    assert!(app.messages.is_empty(), "{:?}", app.messages);
    // The generated tokens are shown as chips.
    let last = chip_text(&app.trace.rows.last().unwrap().trace.text);
    assert!(h.query_all_by_label(&last).count() > 0, "chip {last:?} shown");
    // Step one token continues the session.
    let n = h.state().trace.len();
    h.get_by_label("Step one token").click();
    wait(&mut h, "one step", |a| !a.busy() && a.trace.len() > n);
    assert_eq!(h.state().trace.len(), n + 1);
    // A long generation stops on Stop.
    h.state_mut().max_tokens = 500;
    h.get_by_label("Generate").click();
    h.step();
    h.state_mut().stop();
    wait(&mut h, "stop", |a| !a.busy() && a.status.starts_with("done"));
    assert!(h.state().trace.len() < prompt + 500);
    // A prompt longer than the context: its last max_seq_len tokens, and a note saying so.
    let cap = h.state().model.as_ref().unwrap().config.max_seq_len;
    let long = "First Citizen:".repeat(cap / 14 + 2);
    (h.state_mut().prompt, h.state_mut().max_tokens) = (long.clone(), 1);
    h.get_by_label("Generate").click();
    wait(&mut h, "a long prompt", |a| !a.busy() && a.status.starts_with("done"));
    let m = &h.state().messages;
    assert!(m.len() == 1 && m[0].1.contains(&format!("{} are left out", long.len() - cap)), "{m:?}");
    assert_eq!(h.state().trace.rows.iter().filter(|r| r.prompt).count(), cap);
    h.state_mut().messages.clear();
    h.state_mut().prompt = "First Citizen:".into();
    // Errors are messages: a missing directory, a corrupt checkpoint, then the good one again.
    h.state_mut().open_checkpoint(&dir.join("nope"));
    wait(&mut h, "an error", |a| !a.messages.is_empty() && !a.busy());
    assert!(h.state().messages.last().unwrap().1.contains("does not exist"), "{:?}", h.state().messages);
    let bad = dir.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("model.safetensors"), b"garbage").unwrap();
    h.state_mut().open_checkpoint(&bad);
    wait(&mut h, "a second error", |a| a.messages.len() >= 2 && !a.busy());
    // (With what to do: it said what was wrong and nothing more.)
    let e = &h.state().messages.last().unwrap().1;
    assert!(e.contains("cannot open the checkpoint") && e.contains("not a valid safetensors file"), "{e}");
    assert!(e.contains("the file is damaged: copy the checkpoint again") && e.contains("or open another"), "{e}");
    // A wrong tokenizer: the checkpoint's tokenizer has more tokens than the model's vocabulary.
    let wrong = dir.join("wrong-tokenizer");
    std::fs::create_dir_all(&wrong).unwrap();
    let bytes = std::fs::read(ck.join("model.safetensors")).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let mut meta = meta.metadata().clone().unwrap();
    let chars: String = (0..300u32).filter_map(|i| char::from_u32(0x100 + i)).collect();
    let big = ddl::tokenizer::Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_corpus(&chars).unwrap());
    meta.insert("tokenizer".into(), big.to_json());
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = st.tensors();
    std::fs::write(wrong.join("model.safetensors"), safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
    h.state_mut().open_checkpoint(&wrong);
    wait(&mut h, "a third error", |a| a.messages.len() >= 3 && !a.busy());
    let m = &h.state().messages.last().unwrap().1;
    assert!(m.contains("tokenizer has") && m.contains("vocabulary"), "{m}");
    // None of them closed the model open before: it is named as staying open and still generates.
    assert!(h.state().messages.iter().all(|(_, m)| m.contains("stays open")), "{:?}", h.state().messages);
    h.state_mut().step_one();
    wait(&mut h, "a step after the errors", |a| !a.busy() && a.trace.rows.iter().any(|r| !r.prompt));
    assert_eq!(h.state().messages.len(), 3, "{:?}", h.state().messages);
    h.state_mut().open_checkpoint(&ck);
    wait(&mut h, "reload", |a| a.status.starts_with("loaded") && !a.busy());
    h.state_mut().step_one();
    wait(&mut h, "a step after reload", |a| !a.busy() && !a.trace.is_empty());
    assert_eq!(h.state().trace.rows.iter().filter(|r| !r.prompt).count(), 1);
}

/// The library's stateful generator: the prompt's traces (prefill rows) agree with a shorter
/// prompt's rows (causal) and with the trace a decoding step records for the same token.
#[test]
fn prompt_traces_agree_with_step_traces() {
    use ddl::generate::{Generator, Sampler, SamplerConfig};
    let dir = common::tmpdir("gentrace");
    let ck = common::tiny_checkpoint(&dir);
    let (model, tok) = ddl::generate::load_for_inference(&ddl::testing::gpu(), &ck).unwrap();
    let ids = tok.encode("First Citizen:").unwrap();
    let greedy = || Sampler::new(SamplerConfig { temperature: 0.0, ..Default::default() });
    let close = |a: &[f32], b: &[f32], what: &str| {
        assert_eq!(a.len(), b.len(), "{what}");
        let err = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        let scale = a.iter().fold(1e-3f32, |m, x| m.max(x.abs()));
        assert!(err <= 1e-3 * scale, "{what}: max error {err} (scale {scale})");
    };
    let mut g = Generator::new(&model, &tok, &ids, greedy(), true).unwrap();
    let full: Vec<_> = g.prompt_traces().to_vec();
    assert_eq!(full.len(), ids.len());
    assert!(full.iter().all(|t| t.beta.len() == 4 && t.k.len() == 4 * 32));
    let step = g.step().unwrap();
    let tr = step.trace.expect("a traced step");
    let mut longer = ids.clone();
    longer.push(step.token);
    let g2 = Generator::new(&model, &tok, &longer, greedy(), true).unwrap();
    let rows = g2.prompt_traces();
    for (i, (a, b)) in full.iter().zip(rows).enumerate() {
        assert_eq!(a.token, b.token);
        close(&a.beta, &b.beta, &format!("β of prompt row {i}"));
        close(&a.k, &b.k, &format!("k of prompt row {i}"));
    }
    let last = rows.last().unwrap();
    close(&tr.beta, &last.beta, "β: step vs prefill");
    close(&tr.k, &last.k, "k: step vs prefill");
    close(&tr.v, &last.v, "v: step vs prefill");
    close(&tr.ktx, &last.ktx, "kᵀX: step vs prefill");
    close(&tr.write, &last.write, "write: step vs prefill");
}

/// A baseline model has no delta writes: the text streams in, the panels say why they are empty.
#[test]
fn a_baseline_model_generates_text_without_traces() {
    let ck = common::tiny_baseline_checkpoint();
    let app = VizApp::new(None, Options { checkpoint: Some(ck), ..Default::default() });
    let mut h =
        Harness::builder().with_size([1280.0, 800.0]).build_ui_state(|ui, app: &mut VizApp| app.ui_root(ui), app);
    wait(&mut h, "the model to load", |a| a.model.is_some() && !a.busy());
    h.state_mut().max_tokens = 3;
    h.get_by_label("Generate").click();
    wait(&mut h, "generation", |a| !a.busy() && a.trace.rows.iter().any(|r| !r.prompt));
    let app = h.state();
    assert!(app.trace.len() > 3 && !app.trace.any_traced());
    assert!(app.messages.iter().any(|m| m.1.contains("no delta writes")), "{:?}", app.messages);
    assert!(h.query_by_label_contains("no delta writes to show").is_some());
    // The header shows no d_v for a baseline (it has no value axis).
    assert!(h.query_by_label_contains("d_v=").is_none());
}

/// `--run DIR` alone opens on its dashboard (it opened on an empty β map); with a checkpoint
/// the views of the model come first, and `--tab` wins either way.
#[test]
fn a_run_alone_opens_on_its_dashboard() {
    use ddl_viz::app::Tab;
    let ck = common::tiny_baseline_checkpoint();
    let app = VizApp::new(None, Options { run: Some(ck.clone()), ..Default::default() });
    assert_eq!(app.tab, Tab::Training);
    let app = VizApp::new(None, Options { run: Some(ck.clone()), tab: Some(Tab::Eigen), ..Default::default() });
    assert_eq!(app.tab, Tab::Eigen);
    let app = VizApp::new(None, Options { run: Some(ck.clone()), checkpoint: Some(ck.clone()), ..Default::default() });
    assert_eq!(app.tab, Tab::BetaMap);
    // A baseline run's dashboard says it logged no β (it showed an empty plot).
    let app = VizApp::new(None, Options { run: Some(ck), ..Default::default() });
    let mut h =
        Harness::builder().with_size([1280.0, 800.0]).build_ui_state(|ui, app: &mut VizApp| app.ui_root(ui), app);
    h.run();
    h.get_by_label_contains("mean β: this run logged none");
}

/// A checkpoint opened after another shows its own run's curves (they showed the first's), none
/// when it has no run; a run opened as one (`--run`, Open…) stays whatever checkpoint comes.
#[test]
fn each_checkpoint_opened_shows_its_own_runs_curves() {
    let (a, b) = (common::tiny_checkpoint(Path::new("")), common::tiny_baseline_checkpoint());
    let lone = common::tmpdir("lone-checkpoint").join("ck");
    std::fs::create_dir_all(&lone).unwrap();
    std::fs::copy(b.join("model.safetensors"), lone.join("model.safetensors")).unwrap();
    let mut app = VizApp::new(None, Options { checkpoint: Some(a.clone()), ..Default::default() });
    let dir = |app: &mut VizApp| {
        settle(app);
        app.metrics.as_ref().map(|m| m.dir.clone())
    };
    assert_eq!(dir(&mut app), Some(a.clone()));
    app.open_checkpoint(&b);
    assert_eq!(dir(&mut app), Some(b.clone()), "the second checkpoint's run");
    app.open_checkpoint(&lone);
    assert_eq!(dir(&mut app), None, "a checkpoint without a run shows no other run's curves");
    app.open_run(&a);
    app.open_checkpoint(&b);
    assert_eq!(dir(&mut app), Some(a.clone()), "a run opened as one stays");
    let mut app = VizApp::new(None, Options { checkpoint: Some(b), run: Some(a.clone()), ..Default::default() });
    assert_eq!(dir(&mut app), Some(a));
}

/// Applies the model thread's events until it is idle.
fn settle(app: &mut VizApp) {
    let t0 = Instant::now();
    while app.busy() {
        assert!(t0.elapsed() < Duration::from_secs(120), "the model thread stays busy");
        std::thread::sleep(Duration::from_millis(10));
    }
    app.poll();
}

/// A checkpoint that does not load leaves the curves shown as it leaves the model: they were
/// replaced by those of its run beside the model still open ("… stays open"), a run's curves
/// under another run's model.
#[test]
fn a_checkpoint_that_does_not_load_leaves_the_curves_shown() {
    let a = common::tiny_checkpoint(Path::new(""));
    let broken = common::tmpdir("broken-run").join("run");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("metrics.jsonl"), "{\"step\":1,\"loss\":4.0}\n").unwrap();
    std::fs::write(broken.join("model.safetensors"), b"cut short").unwrap();
    let mut app = VizApp::new(None, Options { checkpoint: Some(a.clone()), ..Default::default() });
    settle(&mut app);
    assert_eq!(app.metrics.as_ref().map(|m| m.dir.clone()), Some(a.clone()));
    app.open_checkpoint(&broken);
    settle(&mut app);
    let m = &app.messages;
    assert!(m.len() == 1 && m[0].1.contains("cannot open the checkpoint") && m[0].1.contains("stays open"), "{m:?}");
    assert_eq!(app.model.as_ref().map(|m| m.dir.clone()), Some(a.clone()));
    assert_eq!(app.metrics.as_ref().map(|m| m.dir.clone()), Some(a), "the model's run, not the broken one's");
}

/// The Interventions view with the model thread: choose identity for one write, Generate both,
/// and both continuations are shown with the Δ log p of every original token; either side can
/// be shown in the other views.
#[test]
fn the_intervention_flow_generates_both_texts_and_measures_the_change() {
    use ddl_viz::app::Tab;
    use ddl_viz::panels::interventions::Choice;
    let (_, _, mut h) = loaded("intervene");
    h.state_mut().max_tokens = 6;
    h.get_by_label("Interventions").click();
    h.run();
    assert_eq!(h.state().tab, Tab::Interventions);
    // Nothing chosen: the button does nothing.
    h.get_by_label("Generate both").click();
    h.run();
    assert!(!h.state().busy() && h.state().interventions.comparison.is_none());
    // Block 0's MLP chosen (as a click on its β map row selects it) and forced to identity with
    // the view's button.
    h.state_mut().sel.sublayer = 1;
    h.run();
    assert!(h.query_by_label("selected on the β map: block 0 MLP").is_some());
    h.get_by_label("identity").click();
    h.run();
    assert_eq!(h.state().interventions.choices[1], Choice::Identity);
    h.get_by_label("Generate both").click();
    wait(&mut h, "the comparison", |a| !a.busy() && a.interventions.comparison.is_some());
    let c = h.state().interventions.comparison.clone().unwrap();
    assert!(h.state().messages.is_empty(), "{:?}", h.state().messages);
    assert_eq!(c.specs, "block0.mlp:beta=0");
    assert!(!c.original.is_empty() && c.original.len() <= 6 && !c.intervened.is_empty());
    assert_eq!(c.delta_logprob.len(), c.original.len(), "one Δ log p per original token");
    assert!(c.delta_logprob.iter().all(|d| d.is_finite()));
    // The intervened writes really had β = 0 on that sublayer, and only there.
    assert!(c.intervened.iter().chain(&c.prompt_intervened).all(|t| t.beta[1] == 0.0));
    assert!(c.original.iter().all(|t| t.beta[1] > 0.0));
    // The token strip and the other views show the original continuation, and say so.
    let t = &h.state().trace;
    assert_eq!(t.len(), c.prompt.len() + c.original.len());
    assert!(t.rows.iter().filter(|r| !r.prompt).map(|r| r.trace.token).eq(c.original.iter().map(|r| r.token)));
    assert!(h.query_by_label("showing the comparison's original continuation; Generate replaces it").is_some());
    // Both texts are on screen.
    h.run();
    assert!(h.query_by_label("original").is_some());
    assert!(h.query_by_label("with block0.mlp:beta=0").is_some());
    // The intervened side in every view.
    h.get_all_by_label("show in the other views").nth(1).unwrap().click();
    h.run();
    let t = &h.state().trace;
    assert_eq!(t.len(), c.prompt_intervened.len() + c.intervened.len());
    assert!((0..t.len()).all(|i| t.beta(i, 1) == Some(0.0)));
    assert!(
        h.query_by_label("showing the comparison's intervened (block0.mlp:beta=0) continuation; Generate replaces it")
            .is_some()
    );
    // Generate shows its own text, without the note.
    h.state_mut().tab = Tab::BetaMap;
    h.get_by_label("Generate").click();
    wait(&mut h, "generation", |a| !a.busy() && a.shown.is_none() && a.trace.rows.iter().any(|r| !r.prompt));
    assert!(h.query_by_label_contains("Generate replaces it").is_none());
}

/// The trace fixture's file and its tokens.
fn trace_fixture() -> (std::path::PathBuf, Vec<u32>) {
    let file = common::fixture("trace.safetensors");
    let tokens = ddl_viz::trace::TraceData::load(&file).unwrap().rows.iter().map(|r| r.trace.token).collect();
    (file, tokens)
}

/// A trace file opened after generating (or while generating) is the text shown: Step one token
/// starts a new session from the prompt rather than continuing the last one onto the file's
/// tokens, and a generation still running stops without its tokens joining the file's.
#[test]
fn a_trace_opened_is_not_continued_by_the_last_generation() {
    let (_, _, mut h) = loaded("trace-detached");
    let (file, file_tokens) = trace_fixture();
    h.state_mut().max_tokens = 3;
    h.get_by_label("Generate").click();
    wait(&mut h, "generation", |a| !a.busy() && a.trace.rows.iter().any(|r| !r.prompt));
    // (The fixture records no prompt: the prompt on the left stays the one just generated from.)
    h.state_mut().open_trace(&file);
    h.run();
    assert_eq!(h.state().trace.len(), file_tokens.len());
    h.get_by_label("Step one token").click();
    wait(&mut h, "one step", |a| !a.busy() && a.status.starts_with("done"));
    let t = &h.state().trace;
    let prompt = t.rows.iter().filter(|r| r.prompt).count();
    assert_eq!(prompt, "First Citizen:".len(), "a new session from the prompt, not the file's tokens continued");
    assert_eq!(t.len(), prompt + 1);
    // The status counts in words ("1 token(s); 15 tokens" before).
    assert_eq!(h.state().status, format!("done: 1 token generated; the text has {} tokens", prompt + 1));
    assert!(h.state().shown.is_none(), "{:?}", h.state().shown);
    // Opened while the model generates: the generation stops, the file's tokens alone are shown.
    h.state_mut().max_tokens = 500;
    h.get_by_label("Generate").click();
    wait(&mut h, "the first tokens", |a| a.trace.rows.iter().filter(|r| !r.prompt).count() >= 2);
    assert!(h.state().busy());
    h.state_mut().open_trace(&file);
    wait(&mut h, "the generation to stop", |a| !a.busy() && a.status.contains("showing the trace opened"));
    let shown: Vec<u32> = h.state().trace.rows.iter().map(|r| r.trace.token).collect();
    assert_eq!(shown, file_tokens, "the file's tokens and none of the generation's");
    assert!(h.state().status.starts_with("stopped"), "{}", h.state().status);
    assert!(h.state().messages.is_empty(), "{:?}", h.state().messages);
}

/// A trace opened while a comparison (*Generate both*) runs stays the text shown: the comparison
/// stops, and its texts no longer replace the file's when it ends.
#[test]
fn a_trace_opened_during_a_comparison_stays_shown() {
    let (_, _, mut h) = loaded("trace-during-compare");
    let (file, file_tokens) = trace_fixture();
    h.state_mut().max_tokens = 300;
    h.state_mut().compare(vec!["block0.mlp:beta=0".into()]);
    wait(&mut h, "the comparison to start", |a| a.status.starts_with("comparing:"));
    h.state_mut().open_trace(&file);
    wait(&mut h, "the comparison to end", |a| !a.busy() && !a.status.starts_with("comparing:"));
    let shown: Vec<u32> = h.state().trace.rows.iter().map(|r| r.trace.token).collect();
    assert_eq!(shown, file_tokens, "the file's tokens, not a comparison's");
    assert!(h.state().status.contains("showing the trace opened"), "{}", h.state().status);
    assert!(h.state().shown.as_deref().is_some_and(|s| s.starts_with("the trace")), "{:?}", h.state().shown);
    assert!(h.state().messages.is_empty(), "{:?}", h.state().messages);
}

/// A trace written with its prompt and sampling settings opens with them on the left, so that
/// Generate with the model that wrote it writes the same tokens again.
#[test]
fn a_trace_opens_with_its_prompt_and_settings_and_generate_writes_it_again() {
    let (dir, ck, mut h) = loaded("trace-again");
    // (Beyond the sliders' spans and a seed past f64's integers: kept exactly, not clamped.)
    let sampling = ddl::generate::SamplerConfig {
        temperature: 3.0,
        top_k: 100_000,
        top_p: 0.005,
        min_p: 0.75,
        repetition_penalty: 2.5,
        seed: u64::MAX - 2,
    };
    h.state_mut().prompt = "ROMEO:".into();
    h.state_mut().sampling = sampling.clone();
    h.state_mut().max_tokens = 9;
    h.get_by_label("Generate").click();
    wait(&mut h, "generation", |a| !a.busy() && a.trace.rows.iter().any(|r| !r.prompt));
    let app = h.state();
    let generated: Vec<_> = app.trace.rows.iter().filter(|r| !r.prompt).map(|r| r.trace.clone()).collect();
    let cfg = app.model.as_ref().unwrap().config.clone();
    // The trace as `ddl generate --trace` writes it: the generated tokens, the prompt beside them.
    let file = dir.join("again.safetensors");
    let origin = ddl::generate::TraceOrigin {
        interventions: String::new(),
        allow_out_of_range: false,
        prompt: "ROMEO:".into(),
        sampling: Some(sampling.clone()),
        read: Vec::new(),
        turns: Vec::new(),
        chat: false,
    };
    // Every token the model predicted has its score (the prompt's first has none: nothing came
    // before it), the sampled ones among the likeliest where their rank says so.
    let rows = &app.trace.rows;
    assert!(rows[0].trace.score.is_none() && rows[1..].iter().all(|r| r.trace.score.is_some()));
    for r in &rows[1..] {
        let s = r.trace.score.as_ref().unwrap();
        assert!(s.logprob <= 0.0 && s.rank >= 1 && s.top.len() == ddl::generate::TRACE_TOP && s.id == r.trace.token);
        assert_eq!(s.rank <= s.top.len(), s.top.iter().any(|a| a.id == s.id), "{s:?}");
    }
    ddl::generate::write_trace_with(&file, &cfg, &generated, &origin).unwrap();
    // The scores come back from the file (log p in f32).
    let back = ddl_viz::trace::TraceData::load(&file).unwrap();
    for (a, b) in back.rows.iter().zip(&generated) {
        let (x, y) = (a.trace.score.as_ref().unwrap(), b.score.as_ref().unwrap());
        assert!((x.logprob - y.logprob).abs() < 1e-6 && x.rank == y.rank && x.text == y.text, "{x:?} {y:?}");
        assert_eq!(
            x.top.iter().map(|t| (t.id, &t.text)).collect::<Vec<_>>(),
            y.top.iter().map(|t| (t.id, &t.text)).collect::<Vec<_>>()
        );
    }
    // Opened beside the checkpoint in a fresh window with other settings on the command line.
    let app = VizApp::new(None, Options { checkpoint: Some(ck), trace: Some(file.clone()), ..Default::default() });
    let mut h =
        Harness::builder().with_size([1280.0, 800.0]).build_ui_state(|ui, app: &mut VizApp| app.ui_root(ui), app);
    wait(&mut h, "the model to load", |a| a.model.is_some() && !a.busy());
    let a = h.state();
    assert_eq!(a.prompt, "ROMEO:");
    let s = &a.sampling;
    assert_eq!(
        (s.temperature, s.top_k, s.top_p, s.min_p, s.repetition_penalty, s.seed),
        (3.0, 100_000, 0.005, 0.75, 2.5, u64::MAX - 2)
    );
    let seed = (u64::MAX - 2).to_string();
    assert!(h.query_all_by(|n| n.value().as_deref() == Some(seed.as_str())).count() > 0, "the seed shown as it is");
    assert_eq!(a.max_tokens, generated.len());
    assert_eq!(a.trace.len(), generated.len(), "the trace shown until Generate");
    assert!(h.query_by_label(&format!("showing the trace {}; Generate replaces it", file.display())).is_some());
    // Its logit lens reads the tokens after the trace's prompt, as generation gave them: every
    // token has its column (the first too: the prompt predicted it), the output row the trace's
    // own scores.
    h.state_mut().tab = ddl_viz::app::Tab::Lens;
    h.run();
    h.get_by_label("Compute the lens").click();
    wait(&mut h, "the lens", |a| !a.busy() && a.trace.lens.is_some());
    let a = h.state();
    assert!(a.messages.is_empty(), "{:?}", a.messages);
    let lens = a.trace.lens.as_ref().unwrap();
    assert_eq!(lens.logprob.len(), generated.len());
    for (t, (row, g)) in lens.logprob.iter().zip(&generated).enumerate() {
        assert_eq!(row.len(), 5, "token {t}");
        let own = g.score.as_ref().unwrap().logprob;
        assert!(
            (row[4].logprob - own).abs() < 1e-4,
            "token {t}: lens output {} against the trace's {own}",
            row[4].logprob
        );
    }
    h.state_mut().tab = ddl_viz::app::Tab::BetaMap;
    h.get_by_label("Generate").click();
    wait(&mut h, "generation", |a| !a.busy() && a.shown.is_none() && a.trace.rows.iter().any(|r| !r.prompt));
    let again: Vec<u32> = h.state().trace.rows.iter().filter(|r| !r.prompt).map(|r| r.trace.token).collect();
    assert_eq!(again, generated.iter().map(|r| r.token).collect::<Vec<_>>(), "the same tokens again");
    // A prompt given on the command line wins over the trace's.
    let app = VizApp::new(None, Options { trace: Some(file), prompt: Some("JULIET:".into()), ..Default::default() });
    assert_eq!(app.prompt, "JULIET:");
}

/// A trace made with `ddl generate --intervene all:beta*=3 --allow-out-of-range` opens with its
/// specs as given and the flag, and Generate both lets β pass 2 as the trace's writes did; the
/// same trace without the flag shows the scale as a choice and clamps β at 2.
#[test]
fn a_trace_made_with_beta_out_of_range_compares_with_the_flag() {
    use ddl_viz::panels::interventions::Choice;
    let (dir, ck, mut h) = loaded("beyond");
    h.state_mut().max_tokens = 5;
    h.get_by_label("Generate").click();
    wait(&mut h, "generation", |a| !a.busy() && a.trace.rows.iter().any(|r| !r.prompt));
    let app = h.state();
    let rows: Vec<_> = app.trace.rows.iter().filter(|r| !r.prompt).map(|r| r.trace.clone()).collect();
    let cfg = app.model.as_ref().unwrap().config.clone();
    let sampling = app.sampling.clone();
    let beyond = |allow: bool| {
        let file = dir.join(format!("beyond-{allow}.safetensors"));
        let origin = ddl::generate::TraceOrigin {
            interventions: "all:beta*=3".into(),
            allow_out_of_range: allow,
            prompt: "First Citizen:".into(),
            sampling: Some(sampling.clone()),
            read: Vec::new(),
            turns: Vec::new(),
            chat: false,
        };
        ddl::generate::write_trace_with(&file, &cfg, &rows, &origin).unwrap();
        let opts = Options { checkpoint: Some(ck.clone()), trace: Some(file), ..Default::default() };
        let mut h = Harness::builder()
            .with_size([1280.0, 800.0])
            .build_ui_state(|ui, app: &mut VizApp| app.ui_root(ui), VizApp::new(None, opts));
        wait(&mut h, "the model to load", |a| a.model.is_some() && !a.busy());
        h.get_by_label("Interventions").click();
        h.run();
        let st = &h.state().interventions;
        if allow {
            assert_eq!((st.given.clone(), st.allow_out_of_range), (vec!["all:beta*=3".to_string()], true));
            assert!(
                h.query_by_label("(β may leave [0, 2]: --allow-out-of-range)").is_some(),
                "the flag said beside the specs"
            );
        } else {
            assert_eq!((st.given.is_empty(), st.allow_out_of_range), (true, false));
            assert_eq!(st.choices, vec![Choice::Scale(3.0); 2 * cfg.n_layers]);
        }
        h.get_by_label("Generate both").click();
        wait(&mut h, "the comparison", |a| !a.busy() && a.interventions.comparison.is_some());
        assert!(h.state().messages.iter().all(|m| m.0 != ddl_viz::app::Level::Error), "{:?}", h.state().messages);
        let c = h.state().interventions.comparison.clone().unwrap();
        c.intervened.iter().chain(&c.prompt_intervened).flat_map(|t| t.beta.clone()).fold(0f32, f32::max)
    };
    let top = beyond(true);
    assert!(top > 2.0, "β × 3 passes 2 with the flag: largest β {top}");
    let top = beyond(false);
    assert!(top <= 2.0, "β × 3 clamped at 2 without it: largest β {top}");
}

/// `--intervene SPEC --generate N --tab beta`: the comparison runs and the view asked for shows
/// the intervened continuation (the Interventions view is not forced).
#[test]
fn an_intervention_from_the_command_line_shows_in_the_view_asked_for() {
    use ddl_viz::app::Tab;
    let dir = common::tmpdir("intervene-tab");
    let ck = common::tiny_checkpoint(&dir);
    let opts = Options {
        checkpoint: Some(ck),
        prompt: Some("First Citizen:".into()),
        generate: Some(4),
        intervene: vec!["block1.mlp:beta=0".into()],
        tab: Some(Tab::BetaMap),
        ..Default::default()
    };
    let app = VizApp::new(None, opts);
    let mut h =
        Harness::builder().with_size([1280.0, 800.0]).build_ui_state(|ui, app: &mut VizApp| app.ui_root(ui), app);
    wait(&mut h, "the comparison", |a| !a.busy() && a.interventions.comparison.is_some() && !a.trace.is_empty());
    assert_eq!(h.state().tab, Tab::BetaMap);
    let t = &h.state().trace;
    let c = h.state().interventions.comparison.as_ref().unwrap();
    assert_eq!(t.len(), c.prompt_intervened.len() + c.intervened.len());
    assert!((0..t.len()).all(|i| t.beta(i, 3) == Some(0.0) && t.beta(i, 1).is_some_and(|b| b > 0.0)));
}

/// The Logit lens view: disabled without a model; with one, its button computes the lens of the
/// text on the model thread — a row per state (embedding, each sublayer, the last the model's
/// output) and a column per token, the output row the generation's own scores (the trace's log p,
/// teacher-forced in the same contexts) — shown as a map and the selected token's table; a longer
/// text makes it stale until computed again, a new generation drops it.
#[test]
fn the_logit_lens_view_computes_the_texts_lens_on_the_model_thread() {
    let (_dir, _ck, mut h) = loaded("lens");
    h.state_mut().max_tokens = 8;
    h.state_mut().tab = ddl_viz::app::Tab::Lens;
    h.get_by_label("Generate").click();
    wait(&mut h, "generation", |a| !a.busy() && a.trace.rows.iter().any(|r| !r.prompt));
    h.get_by_label("Compute the lens").click();
    wait(&mut h, "the lens", |a| !a.busy() && a.trace.lens.is_some());
    let app = h.state();
    let lens = app.trace.lens.as_ref().unwrap();
    assert_eq!(lens.states, ["embedding", "block0.attn", "block0.mlp", "block1.attn", "block1.mlp"]);
    assert_eq!(lens.logprob.len(), app.trace.len());
    assert!(lens.logprob[0].is_empty(), "nothing predicted the first token");
    for (t, row) in lens.logprob.iter().enumerate().skip(1) {
        assert_eq!(row.len(), 5);
        let own = row[4].logprob;
        if let Some(s) = &app.trace.rows[t].trace.score {
            assert!((own - s.logprob).abs() < 1e-4, "token {t}: lens output {own} against the trace's {}", s.logprob);
        }
        assert!(row.iter().all(|c| c.rank >= 1 && c.logprob <= c.top_logprob + 1e-6), "token {t}: {row:?}");
    }
    assert!(app.messages.is_empty(), "{:?}", app.messages);
    // The selected token's table.
    h.state_mut().sel.token = Some(3);
    h.run();
    h.get_by_label("the head's likeliest there");
    h.get_by_label("Compute again");
    // One more token: stale, said on the button; a new generation drops it.
    h.get_by_label("Step one token").click();
    wait(&mut h, "one step", |a| !a.busy() && a.trace.len() == lens_len(a) + 1);
    h.get_by_label("Compute again (the text changed)");
    h.get_by_label("Generate").click();
    wait(&mut h, "generation", |a| !a.busy() && a.status.starts_with("done"));
    assert!(h.state().trace.lens.is_none());
}

/// A lens that arrives after another text was opened is not that text's: a trace opened while
/// the lens was computed got it as its own (a text of the same length showed another text's
/// lens as computed).
#[test]
fn a_lens_computed_for_a_text_no_longer_shown_is_not_kept() {
    let (_dir, _ck, mut h) = loaded("lens-other-text");
    let file = common::fixture("trace.safetensors");
    let n = ddl_viz::trace::TraceData::load(&file).unwrap().len();
    // A text as long as the trace file's: the prompt's 14 characters and the rest generated.
    h.state_mut().max_tokens = n - "First Citizen:".len();
    h.get_by_label("Generate").click();
    wait(&mut h, "generation", |a| !a.busy() && a.status.starts_with("done"));
    assert_eq!(h.state().trace.len(), n, "the test needs a text of the file's length");
    // Compute, and open the trace before the lens comes back.
    h.state_mut().compute_lens();
    h.state_mut().open_trace(&file);
    wait(&mut h, "the lens", |a| !a.busy() && a.status.starts_with("done: lens"));
    assert_eq!(h.state().trace.len(), n);
    assert!(h.state().trace.lens.is_none(), "the generated text's lens on the file's tokens");
    h.state_mut().tab = ddl_viz::app::Tab::Lens;
    h.run();
    // Computed for the file, it is the file's.
    h.get_by_label("Compute the lens").click();
    wait(&mut h, "the file's lens", |a| !a.busy() && a.trace.lens.is_some());
    assert!(h.state().messages.is_empty(), "{:?}", h.state().messages);
}

fn lens_len(a: &VizApp) -> usize {
    a.trace.lens.as_ref().map_or(0, |l| l.logprob.len())
}

/// Without a model the view says what it needs and its button is disabled.
#[test]
fn the_logit_lens_view_needs_a_checkpoint() {
    let trace = ddl_viz::trace::TraceData::load(&common::fixture("trace.safetensors")).unwrap();
    let mut app = VizApp::with_trace(trace);
    app.tab = ddl_viz::app::Tab::Lens;
    let mut h =
        Harness::builder().with_size([1000.0, 600.0]).build_ui_state(|ui, app: &mut VizApp| app.ui_root(ui), app);
    h.run();
    h.get_by_label_contains("open a checkpoint to compute the lens");
    assert!(h.state().trace.lens.is_none());
}

/// A text written by a model of another shape than the one loaded (a trace opened beside it)
/// is not lensed: the button is disabled and says why.
#[test]
fn the_logit_lens_is_not_computed_for_another_models_text() {
    let (_dir, _ck, mut h) = loaded("lens-other");
    let mut other = ddl_viz::trace::TraceData::new(3, 32, 4);
    for i in 0..4u32 {
        let row = ddl::generate::TokenTrace {
            token: i + 40,
            text: "a".into(),
            beta: vec![1.0; 6],
            k: vec![0.1; 6 * 32],
            v: vec![0.0; 6 * 4],
            ktx: vec![0.0; 6 * 4],
            write: vec![1.0; 6],
            score: None,
        };
        other.push(row, false);
    }
    h.state_mut().trace = other;
    h.state_mut().tab = ddl_viz::app::Tab::Lens;
    h.run();
    h.get_by_label_contains("the text shown was written by another model than the one loaded");
    h.state_mut().compute_lens();
    h.run();
    assert!(!h.state().busy() && h.state().trace.lens.is_none());
    assert!(h.state().messages.iter().any(|m| m.1.contains("another model")), "{:?}", h.state().messages);
}

/// Stop while Generate both runs leaves no comparison of two texts cut at different points: the
/// status says it stopped and nothing was compared.
#[test]
fn stopping_a_comparison_compares_nothing() {
    let (_, _, mut h) = loaded("compare-stop");
    h.state_mut().max_tokens = 400;
    h.state_mut().compare(vec!["block0.mlp:beta=0".into()]);
    h.state_mut().stop();
    wait(&mut h, "the comparison to stop", |a| !a.busy() && a.status.contains("stopped"));
    let a = h.state();
    assert!(a.interventions.comparison.is_none(), "a comparison was shown");
    assert!(a.status.contains("nothing compared"), "{}", a.status);
    assert!(a.messages.is_empty(), "{:?}", a.messages);
}

/// `--checkpoint DIR --screenshot F` without `--generate` takes its picture once the checkpoint
/// has loaded (it was taken five frames after the window opened, before the model was there),
/// and a checkpoint that does not open fails the automation (exit status 1) rather than leaving
/// a picture of "loading…" and success.
#[test]
fn a_screenshot_without_generate_waits_for_the_checkpoint() {
    let dir = common::tmpdir("shot-waits");
    let ck = common::tiny_checkpoint(&dir);
    let bad = dir.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("model.safetensors"), b"garbage").unwrap();
    for (ck, ok) in [(ck, true), (bad, false)] {
        let shot = dir.join(format!("shot-{ok}.png"));
        let opts = Options {
            checkpoint: Some(ck),
            screenshot: Some(shot.clone()),
            exit_after_screenshot: true,
            ..Default::default()
        };
        // (The harness's renderer first: the app's model thread starts loading only then.)
        let mut h = Harness::builder()
            .with_size([800.0, 500.0])
            .wgpu()
            .build_ui_state(|ui, app: &mut VizApp| app.ui_root(ui), VizApp::without_worker());
        *h.state_mut() = VizApp::new(None, opts);
        let result = h.state().auto_result();
        // Frame by frame, as fast as they come (the first ones come long before a model could
        // load; once saved, the window is asked to close at every frame).
        let t0 = Instant::now();
        while result.lock().unwrap().is_none() {
            assert!(t0.elapsed() < Duration::from_secs(120), "no screenshot; messages {:?}", h.state().messages);
            h.step();
        }
        let r = result.lock().unwrap().clone().unwrap();
        if ok {
            assert!(r.is_ok(), "{r:?}");
            assert!(h.state().model.is_some(), "the picture is of the model loaded");
            assert!(shot.is_file());
        } else {
            let e = r.unwrap_err();
            assert!(e.contains("cannot open the checkpoint"), "{e}");
        }
    }
}
