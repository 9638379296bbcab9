//! Snapshot tests of every panel, drawn from the fixture trace and metrics (no model needed;
//! rendered with wgpu on the test adapter), and the token selection.

mod common;

use ddl_viz::app::{Tab, VizApp};
use ddl_viz::metrics::Metrics;
use ddl_viz::panels::{self, Selection, tokens::ChipColour};
use ddl_viz::trace::{TraceData, chip_text};
use eframe::egui;
use egui_kittest::kittest::{NodeT, Queryable};
use egui_kittest::{Harness, SnapshotOptions, SnapshotResults};

fn trace() -> TraceData {
    TraceData::load(&common::fixture("trace.safetensors")).expect("the fixture trace loads")
}

/// Same lavapipe on every machine: the default per-pixel tolerance and a handful of pixels.
/// The β map of `data` alone in a window of `size`, drawn once, and where its first cell is.
fn beta_map(data: &TraceData, size: egui::Vec2) -> (Harness<'_, Selection>, egui::Rect) {
    let mut h = Harness::builder().with_size(size).build_ui_state(
        move |ui, sel: &mut Selection| {
            egui::CentralPanel::default().show(ui, |ui| panels::beta_map::show(ui, data, sel));
        },
        Selection::default(),
    );
    h.run();
    let cell0 = h.ctx.data(|d| d.get_temp(panels::beta_map::cell_rect_id())).expect("the map was drawn");
    (h, cell0)
}

fn opts() -> SnapshotOptions {
    SnapshotOptions::new().threshold(0.6).max_failed_pixels(8)
}

fn snap_panel(
    results: &mut SnapshotResults,
    name: &str,
    size: [f32; 2],
    f: impl Fn(&mut egui::Ui, &TraceData, &mut Selection),
) {
    let data = trace();
    let mut sel = Selection { token: Some(7), sublayer: 2 };
    let mut h = Harness::builder().with_size(size).wgpu().build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| f(ui, &data, &mut sel));
    });
    h.run();
    results.add(h.try_snapshot_options(name, &opts()));
}

#[test]
fn fixture_trace_loads_with_texts_and_all_sublayers() {
    let t = trace();
    assert_eq!(t.len(), 48);
    assert_eq!((t.n_layers, t.d, t.m), (2, 32, 4));
    assert!((0..t.len()).all(|i| t.has(i)));
    let text: String = t.rows.iter().map(|r| r.trace.text.as_str()).collect();
    assert!(!text.is_empty());
    // β is in the open interval the gate allows, and the regimes are counted over every token.
    assert!((0..t.len()).all(|i| (0..4).all(|s| t.beta(i, s).is_some_and(|b| b > 0.0 && b < 2.0))));
    assert!(t.regime_counts().iter().all(|c| c.iter().sum::<usize>() == 48));
    // A corrupt trace is an error, not a panic.
    let dir = common::tmpdir("badtrace");
    let bad = dir.join("bad.safetensors");
    std::fs::write(&bad, b"not a trace").unwrap();
    let e = TraceData::load(&bad).unwrap_err();
    assert!(e.contains("not a trace") && e.contains("`ddl generate --trace FILE`"), "the remedy: {e}");
    assert!(TraceData::load(&dir.join("missing.safetensors")).is_err());
    // A trace cut short (a write that stopped, a partial copy) is called damaged, with its length.
    let whole = std::fs::read(common::fixture("trace.safetensors")).unwrap();
    let cut = dir.join("cut.safetensors");
    std::fs::write(&cut, &whole[..whole.len() - 100]).unwrap();
    let e = TraceData::load(&cut).unwrap_err();
    assert!(e.contains("is damaged") && e.contains(&format!("the {} bytes", whole.len())), "{e}");
}

#[test]
fn panel_snapshots() {
    let mut results = SnapshotResults::new();
    snap_panel(&mut results, "beta_map", [900.0, 260.0], panels::beta_map::show);
    snap_panel(&mut results, "eigen", [900.0, 560.0], panels::eigen::show);
    snap_panel(&mut results, "kdirs", [1000.0, 640.0], panels::kdirs::show);
    snap_panel(&mut results, "writes", [900.0, 560.0], panels::writes::show);
    for (name, colour) in [
        ("chips_mean_beta", ChipColour::MeanBeta),
        ("chips_regime", ChipColour::Regime),
        ("chips_write", ChipColour::WriteSize),
    ] {
        snap_panel(&mut results, name, [560.0, 120.0], move |ui, d, s| {
            panels::tokens::chips(ui, d, s, colour);
        });
    }
    // Surprise: the fixture (written before traces held scores) has none; given some, each
    // token's chip is as dark as its −log p against the text's largest (the first has none).
    let mut data = trace();
    assert!(data.surprise(3).is_none() && data.max_surprise() == 0.0);
    for (t, r) in data.rows.iter_mut().enumerate().skip(1) {
        let logprob = -((t * 7 % 11) as f64) * 0.4;
        let id = r.trace.token;
        r.trace.score = Some(ddl::generate::TokenScore {
            id,
            text: r.trace.text.clone(),
            bytes: Vec::new(),
            logprob,
            rank: 1,
            top: Vec::new(),
        });
    }
    assert_eq!((data.surprise(0), data.max_surprise()), (None, 4.0));
    let mut sel = Selection { token: Some(7), sublayer: 2 };
    let mut h = Harness::builder().with_size([560.0, 120.0]).wgpu().build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| {
            panels::tokens::chips(ui, &data, &mut sel, ChipColour::Surprise);
        });
    });
    h.run();
    results.add(h.try_snapshot_options("chips_surprise", &opts()));
    let m = Metrics::open(&common::fixture("run")).unwrap();
    assert!(m.train.len() > 10 && !m.val.is_empty() && m.n_sublayers() == 4);
    let mut h = Harness::builder().with_size([1000.0, 560.0]).wgpu().build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::dashboard::show(ui, Some(&m)));
    });
    h.run();
    results.add(h.try_snapshot_options("dashboard", &opts()));
    // The Interventions view after a comparison: the fixture's tokens as both continuations, the
    // intervened one diverging after 6 tokens, and a Δ log p per original token.
    let data = trace();
    let rows: Vec<_> = data.rows.iter().map(|r| r.trace.clone()).collect();
    let original = rows[14..40].to_vec();
    let mut intervened = original.clone();
    intervened[6..].reverse();
    let delta_logprob = (0..original.len()).map(|i| if i < 6 { 0.0 } else { (i as f64 * 0.7).sin() * 1.5 }).collect();
    let mut st = panels::interventions::Interventions::default();
    st.show_specs(&["block0.mlp:beta=0".into(), "block1.attn:k=mean".into()], 4, false);
    st.comparison = Some(panels::interventions::Comparison {
        specs: "block0.mlp:beta=0; block1.attn:k=mean".into(),
        prompt: rows[..14].to_vec(),
        prompt_intervened: rows[..14].to_vec(),
        original,
        intervened,
        delta_logprob,
    });
    assert_eq!(st.comparison.as_ref().unwrap().first_difference(), Some(6));
    assert_eq!(st.specs(), ["block0.mlp:beta=0", "block1.attn:k=mean"]);
    let mut h = Harness::builder().with_size([1000.0, 420.0]).wgpu().build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::interventions::show(ui, &mut st, 4, true, false, 3));
    });
    h.run();
    results.add(h.try_snapshot_options("interventions", &opts()));
}

/// The whole window showing the fixture trace (the picture in docs/VISUALIZER.md).
#[test]
fn app_snapshots_and_clicking_a_token_selects_it() {
    let mut app = VizApp::with_trace(trace());
    app.metrics = Some(Metrics::open(&common::fixture("run")).unwrap());
    let mut h = Harness::builder()
        .with_size([1280.0, 800.0])
        .wgpu()
        .build_ui_state(|ui, app: &mut VizApp| app.ui_root(ui), app);
    h.run();
    assert_eq!(h.state().sel.token, None);
    // Click the 6th token's chip (the n-th chip with that text).
    let t = 5;
    let label = chip_text(&h.state().trace.rows[t].trace.text);
    let nth = h.state().trace.rows[..t].iter().filter(|r| chip_text(&r.trace.text) == label).count();
    h.get_all_by_label(&label).nth(nth).expect("the chip is shown").click();
    h.run();
    assert_eq!(h.state().sel.token, Some(t), "clicking a chip selects its token");
    h.remove_cursor();
    h.run();
    let mut results = SnapshotResults::new();
    results.add(h.try_snapshot_options("app_beta_map", &opts()));
    // Clicking it again clears the selection.
    h.get_all_by_label(&label).nth(nth).unwrap().click();
    h.run();
    assert_eq!(h.state().sel.token, None);
    h.get_all_by_label(&label).nth(nth).unwrap().click();
    h.run();
    // The arrow keys move the selection.
    h.key_press(egui::Key::ArrowRight);
    h.run();
    assert_eq!(h.state().sel.token, Some(t + 1));
    h.key_press(egui::Key::ArrowLeft);
    h.run();
    assert_eq!(h.state().sel.token, Some(t));
    for (tab, name) in [(Tab::KDirs, "app_kdirs"), (Tab::Training, "app_training")] {
        h.get_by_label(tab.name()).click();
        h.run();
        assert_eq!(h.state().tab, tab);
        h.remove_cursor();
        h.run();
        results.add(h.try_snapshot_options(name, &opts()));
    }
    // Without a model, Generate is disabled and the panel says why nothing runs.
    h.state_mut().generate();
    h.run();
    assert!(h.state().messages.iter().any(|(_, m)| m.contains("open a checkpoint")));
}

#[test]
fn hovering_the_beta_map_shows_the_cell_and_clicking_selects_its_token() {
    let data = trace();
    let (mut h, cell0) = beta_map(&data, egui::vec2(900.0, 300.0));
    let (t, s) = (9, 3);
    let p = cell0.center() + egui::vec2(cell0.width() * t as f32, cell0.height() * s as f32);
    h.hover_at(p);
    h.run();
    let b = trace().beta(t, s).unwrap();
    let tip = h.get_by_label_contains("1−β");
    let text = tip.accesskit_node().label().or(tip.accesskit_node().value()).unwrap_or_default().to_string();
    assert!(text.contains(&format!("β = {b:.4}")) && text.contains(&format!("{:.4}", 1.0 - b)), "{text}");
    assert!(h.query_by_label_contains("block 1 MLP").is_some(), "the tooltip names the sublayer");
    h.event(egui::Event::PointerButton {
        pos: p,
        button: egui::PointerButton::Primary,
        pressed: true,
        modifiers: Default::default(),
    });
    h.event(egui::Event::PointerButton {
        pos: p,
        button: egui::PointerButton::Primary,
        pressed: false,
        modifiers: Default::default(),
    });
    h.run();
    assert_eq!(h.state().token, Some(t));
    assert_eq!(h.state().sublayer, s, "the click selects the cell's sublayer too (for the Interventions view)");
}

/// A trace of 12 tokens of a model of `blocks` blocks (d 2, d_v 1), β of sublayer i `beta(i)`.
fn many_blocks(blocks: usize, beta: impl Fn(usize) -> f32) -> TraceData {
    let s = 2 * blocks;
    let mut data = TraceData::new(blocks, 2, 1);
    for t in 0..12 {
        data.push(
            ddl::generate::TokenTrace {
                token: t,
                text: "a".into(),
                beta: (0..s).map(&beta).collect(),
                k: vec![1.0; 2 * s],
                v: vec![0.5; s],
                ktx: vec![0.25; s],
                write: vec![0.1; s],
                score: None,
            },
            false,
        );
    }
    data
}

/// The β map of a model of many blocks (rows at least 10 points high, taller than the panel)
/// scrolls down to its last sublayer: its rows below the window could not be reached.
#[test]
fn the_beta_map_of_many_blocks_scrolls_to_its_last_sublayer() {
    let blocks = 24;
    let s = 2 * blocks;
    let data = many_blocks(blocks, |i| if i + 1 == s { 1.875 } else { 1.0 });
    let size = egui::vec2(900.0, 400.0);
    let (mut h, cell0) = beta_map(&data, size);
    let last_row = |cell0: egui::Rect| cell0.center() + egui::vec2(0.0, cell0.height() * (s - 1) as f32);
    assert!(last_row(cell0).y > size.y, "the test needs a map taller than the window");
    // The wheel over the map, downwards.
    h.hover_at(cell0.center());
    for _ in 0..20 {
        h.event(egui::Event::MouseWheel {
            unit: egui::MouseWheelUnit::Point,
            delta: egui::vec2(0.0, -200.0),
            phase: egui::TouchPhase::Move,
            source: egui::MouseWheelSource::Unknown,
            modifiers: Default::default(),
        });
        // (A tooltip over the map keeps repainting: a fixed number of frames.)
        h.run_steps(8);
    }
    let cell0: egui::Rect = h.ctx.data(|d| d.get_temp(panels::beta_map::cell_rect_id())).unwrap();
    let p = last_row(cell0);
    assert!(p.y < size.y, "the last sublayer's row is still below the window: at y = {}", p.y);
    h.hover_at(p);
    h.run_steps(8);
    assert!(h.query_by_label_contains("β = 1.8750").is_some(), "the last row's cell is hovered");
    assert!(h.query_by_label_contains("block 23 MLP").is_some());
}

/// The β map of a model of many blocks labels every n-th row where its rows are shorter than a
/// line of text (a tick marks them; the hover names every cell): the labels of 10-point rows
/// overlapped each other. (Names up to "block 119 attn" fit the label column.)
#[test]
fn the_beta_map_of_many_blocks_labels_its_rows_without_overlap() {
    let blocks = 120;
    let s = 2 * blocks;
    let data = many_blocks(blocks, |_| 1.0);
    let (h, cell0) = beta_map(&data, egui::vec2(900.0, 400.0));
    let labels: Vec<egui::Rect> =
        h.ctx.data(|d| d.get_temp(panels::row_labels_id("beta"))).expect("the map drew its row labels");
    assert!(cell0.height() < labels[0].height(), "the test needs rows shorter than their labels");
    assert!(labels.len() > 1 && labels.len() < s, "every n-th row is labelled: {} of {s}", labels.len());
    for pair in labels.windows(2) {
        assert!(!pair[0].intersects(pair[1]), "row labels overlap: {:?} and {:?}", pair[0], pair[1]);
    }
    for r in &labels {
        assert!(r.right() < cell0.left(), "a row label runs into the cells: {r:?}, cells from x = {}", cell0.left());
    }
}

/// A traced write whose β is not a finite number (a model whose numbers overflow, generating
/// live) is named as such: the β map's hover said "no trace for this token" and the eigenvalue
/// and write strength tables left its row out.
#[test]
fn a_beta_that_is_not_finite_is_named_not_called_untraced() {
    let mut data = TraceData::new(1, 2, 1);
    for t in 0..3 {
        data.push(
            ddl::generate::TokenTrace {
                token: t,
                text: "a".into(),
                beta: vec![if t == 1 { f32::NAN } else { 0.25 }, 1.0],
                k: vec![1.0, 0.0, 0.0, 1.0],
                v: vec![0.5; 2],
                ktx: vec![0.25; 2],
                write: vec![0.1; 2],
                score: None,
            },
            false,
        );
    }
    assert!(data.has(1) && data.beta(1, 0).is_none());
    let (mut h, cell0) = beta_map(&data, egui::vec2(900.0, 300.0));
    h.hover_at(cell0.center() + egui::vec2(cell0.width(), 0.0));
    h.run_steps(8);
    assert!(h.query_by_label_contains("β is not a finite number").is_some());
    assert!(h.query_by_label_contains("no trace for this token").is_none());
    // The eigenvalue table of that token: its row, marked.
    let sel = Selection { token: Some(1), sublayer: 0 };
    let h = Harness::builder().with_size([1000.0, 700.0]).build_ui_state(
        |ui, sel: &mut Selection| {
            egui::CentralPanel::default().show(ui, |ui| panels::eigen::show(ui, &data, sel));
        },
        sel.clone(),
    );
    h.get_by_label("not finite");
    // The write strength table too.
    let h = Harness::builder().with_size([1000.0, 700.0]).build_ui_state(
        |ui, sel: &mut Selection| {
            egui::CentralPanel::default().show(ui, |ui| panels::writes::show(ui, &data, sel));
        },
        sel,
    );
    h.get_by_label("not finite");
}

#[test]
fn the_open_dialog_opens_a_trace_and_reports_bad_paths() {
    let mut app = VizApp::without_worker();
    app.dialog = Some(ddl_viz::app::OpenDialog { path: common::fixture("trace.safetensors").display().to_string() });
    let mut h =
        Harness::builder().with_size([1280.0, 800.0]).build_ui_state(|ui, app: &mut VizApp| app.ui_root(ui), app);
    h.run();
    // The trace is a file: only "Open trace" is enabled.
    h.get_by_label("Open trace").click();
    h.run();
    assert_eq!(h.state().trace.len(), 48);
    assert!(h.state().dialog.is_none(), "the dialog closes after opening");
    // The fixtures directory lists the run and the trace.
    h.state_mut().dialog = Some(ddl_viz::app::OpenDialog { path: common::fixture("").display().to_string() });
    h.run();
    assert!(h.query_by_label_contains("run/  [run]").is_some());
    assert!(h.query_by_label_contains("trace.safetensors  [trace]").is_some());
    h.get_by_label_contains("run/  [run]").click();
    h.run();
    h.get_by_label("Open run").click();
    h.run();
    assert!(h.state().metrics.as_ref().is_some_and(|m| m.train.len() > 10));
    h.state_mut().open_run(std::path::Path::new("/nonexistent/run"));
    h.state_mut().open_trace(std::path::Path::new("/nonexistent/trace.safetensors"));
    h.run();
    let msgs: Vec<&str> = h.state().messages.iter().map(|m| m.1.as_str()).collect();
    assert!(msgs.len() == 2 && msgs[0].contains("does not exist") && msgs[1].contains("cannot read"), "{msgs:?}");
}

/// A run opened with the dialog's *Open run* shows its dashboard (the view stayed on the β map,
/// the curves out of sight, where an experiment opened switches to its view); one that does not
/// open leaves the view as it was.
#[test]
fn opening_a_run_shows_its_dashboard() {
    let mut app = VizApp::with_trace(trace());
    app.dialog = Some(ddl_viz::app::OpenDialog { path: common::fixture("run").display().to_string() });
    let mut h =
        Harness::builder().with_size([1280.0, 800.0]).build_ui_state(|ui, app: &mut VizApp| app.ui_root(ui), app);
    h.run();
    assert_eq!(h.state().tab, Tab::BetaMap);
    h.get_by_label("Open run").click();
    h.run();
    assert!(h.state().metrics.is_some());
    assert_eq!(h.state().tab, Tab::Training);
    h.get_by_label_contains("steps logged");
    // A folder that is not a run: the dialog does not offer it, and the view stays.
    h.state_mut().tab = Tab::Eigen;
    h.state_mut().dialog = Some(ddl_viz::app::OpenDialog { path: common::fixture("").display().to_string() });
    h.run();
    assert!(h.get_by_label("Open run").accesskit_node().is_disabled());
    assert_eq!(h.state().tab, Tab::Eigen);
}

/// The message area shows the latest four messages and counts the others (a fifth error was
/// hidden without a word until one above it was dismissed).
#[test]
fn messages_beyond_the_four_shown_are_counted() {
    let mut app = VizApp::without_worker();
    for i in 0..6 {
        app.error(format!("error number {i}"));
    }
    let mut h =
        Harness::builder().with_size([1280.0, 800.0]).build_ui_state(|ui, app: &mut VizApp| app.ui_root(ui), app);
    h.run();
    assert!(h.query_by_label("error number 5").is_some() && h.query_by_label("error number 1").is_none());
    h.get_by_label("2 earlier message(s): dismiss these (x) to read them");
    // Dismissing the latest shows the one before the four.
    h.get_all_by_label("x").next().unwrap().click();
    h.run();
    assert!(h.query_by_label("error number 5").is_none() && h.query_by_label("error number 1").is_some());
    h.get_by_label("1 earlier message(s): dismiss these (x) to read them");
}

/// The Experiment view from an experiment folder of three variants × three seeds (synthetic
/// curves written as `ddl experiment` lays them out), opened through the app.
#[test]
fn experiment_view_snapshot() {
    // A fixed folder name: the view's heading shows it.
    let dir = common::tmpdir("experiment").join("pilot");
    for (vi, v) in ["baseline", "ddl_v1", "ddl"].iter().enumerate() {
        for seed in 1..=3u32 {
            let run = dir.join("runs").join(format!("{v}-seed{seed}"));
            std::fs::create_dir_all(&run).unwrap();
            let curve = |step: f64| {
                1.55 + 1.1 * (-step / 250.0).exp() - 0.02 * vi as f64 + 0.008 * ((seed * 7 + vi as u32) % 5) as f64
            };
            let mut lines = String::new();
            for k in 1..=16 {
                let step = 50.0 * k as f64;
                lines.push_str(&format!("{{\"step\":{step},\"loss\":{}}}\n", curve(step) - 0.1));
                lines.push_str(&format!("{{\"step\":{step},\"val_loss\":{}}}\n", curve(step)));
            }
            std::fs::write(run.join("metrics.jsonl"), lines).unwrap();
            std::fs::write(
                run.join("result.json"),
                format!(
                    "{{\"variant\":\"{v}\",\"seed\":{seed},\"final_val_loss\":{},\"val_tokens\":111104}}",
                    curve(800.0) - 0.01
                ),
            )
            .unwrap();
        }
    }
    let mut app = VizApp::without_worker();
    app.open_experiment(&dir, false);
    assert!(app.messages.is_empty(), "{:?}", app.messages);
    assert_eq!(app.tab, Tab::Experiment);
    let e = app.experiment.as_ref().unwrap();
    assert_eq!((e.runs.len(), e.variants().len()), (9, 3));
    assert_eq!(e.summary()[2].runs, 3);
    // A folder without runs is a message, and the open experiment stays.
    app.open_experiment(&dir.join("runs/ddl-seed1/none"), false);
    assert!(app.messages.last().unwrap().1.contains("does not exist"));
    assert_eq!(app.experiment.as_ref().unwrap().runs.len(), 9);
    let e = app.experiment.take().unwrap();
    let mut h = Harness::builder().with_size([900.0, 560.0]).wgpu().build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::experiment::show(ui, Some(&e)));
    });
    h.run();
    let mut results = SnapshotResults::new();
    results.add(h.try_snapshot_options("experiment", &opts()));
}

/// `--intervene` specs become the per-sublayer choices when each is one of them; specs the
/// choices cannot show exactly (a clamp, two actions on one sublayer) run as given.
#[test]
fn given_interventions_are_shown_as_choices_or_kept_as_written() {
    use panels::interventions::{Choice, Interventions};
    let mut st = Interventions::default();
    st.show_specs(&["all:beta*=0.5".into(), "block0.attn:k=mean".into()], 4, false);
    // (`all` touched block0.attn first: two actions on one sublayer.)
    assert_eq!(st.choices, vec![Choice::AsTrained; 4]);
    assert_eq!(st.specs(), ["all:beta*=0.5", "block0.attn:k=mean"]);
    st.show_specs(&["block1:write=0".into(), "block0.attn:k=mean".into()], 4, false);
    assert!(st.given.is_empty());
    assert_eq!(st.choices, [Choice::KMean, Choice::AsTrained, Choice::Identity, Choice::Identity]);
    assert_eq!(st.specs(), ["block0.attn:k=mean", "block1.attn:beta=0", "block1.mlp:beta=0"]);
    // The write's terms removed: choices of their own.
    st.show_specs(&["block1.mlp:v=0".into(), "block0:erase=0".into()], 4, false);
    assert_eq!(st.choices, [Choice::NoErase, Choice::NoErase, Choice::AsTrained, Choice::NoValue]);
    assert_eq!(st.specs(), ["block0.attn:erase=0", "block0.mlp:erase=0", "block1.mlp:v=0"]);
    // A factor above the control's 4 runs as given, not as 4.
    for kept in [
        &["all:beta<=1"][..],
        &["block0.mlp:beta=1.5"],
        &["block0.attn:k=mean", "all:write=0"],
        &["block0.attn:beta*=5"],
        &["block0.attn:erase*=0.5"],
    ] {
        let specs: Vec<String> = kept.iter().map(|s| s.to_string()).collect();
        st.show_specs(&specs, 4, false);
        assert_eq!(st.specs(), specs, "{kept:?}");
        assert_eq!(st.choices, vec![Choice::AsTrained; 4], "kept as written, not shown as choices: {kept:?}");
        assert!(!st.allow_out_of_range);
    }
    // With β allowed outside [0, 2] (a trace made with --allow-out-of-range): specs that do
    // something else then run as given with the flag (a scale above 1 passes 2, a β beyond the
    // range); specs the flag does not change are still shown as choices, without it.
    for needs in [&["all:beta*=3"][..], &["block0.mlp:beta=-0.5"], &["block1:beta>=2.5"], &["all:beta<=-1"]] {
        let specs: Vec<String> = needs.iter().map(|s| s.to_string()).collect();
        st.show_specs(&specs, 4, true);
        assert_eq!((st.given.clone(), st.allow_out_of_range), (specs, true), "{needs:?}");
        assert_eq!(st.choices, vec![Choice::AsTrained; 4]);
    }
    st.show_specs(&["all:beta*=3".into()], 4, false);
    assert_eq!((st.choices.clone(), st.allow_out_of_range), (vec![Choice::Scale(3.0); 4], false), "clamped at 2");
    for same in [&["all:beta*=0.5"][..], &["block0.mlp:beta=2", "block1.attn:k=mean"], &["all:beta<=3"]] {
        let specs: Vec<String> = same.iter().map(|s| s.to_string()).collect();
        st.show_specs(&specs, 4, false);
        let without = (st.choices.clone(), st.specs());
        st.show_specs(&specs, 4, true);
        assert!(!st.allow_out_of_range, "{same:?}: the flag changes nothing");
        assert_eq!((st.choices.clone(), st.specs()), without, "{same:?}");
    }
}

fn v16(data: &[u8; 16]) -> safetensors::tensor::TensorView<'_> {
    safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4], data).unwrap()
}

/// A trace whose tensors do not agree (another writer's, or a damaged one: here one token fewer
/// than the writes) is named with the shapes it has and those a trace has, and what to do: the
/// message was "inconsistent tensor shapes", with nothing to go on. So is one that lacks a tensor
/// or holds one of another type ("tensor 'k' is missing", "… is not F32", without a remedy).
#[test]
fn a_trace_whose_shapes_disagree_says_what_they_are_and_must_be() {
    let dir = common::tmpdir("trace-shapes");
    let bytes = std::fs::read(common::fixture("trace.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let short = vec![0u8; 47 * 4];
    let tensors: Vec<(String, safetensors::tensor::TensorView)> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| match n.as_str() {
            "tokens" => (n.to_string(), safetensors::tensor::TensorView::new(t.dtype(), vec![47], &short).unwrap()),
            _ => (n.to_string(), t),
        })
        .collect();
    let f = dir.join("short.safetensors");
    std::fs::write(&f, safetensors::serialize(tensors, None).unwrap()).unwrap();
    let e = TraceData::load(&f).unwrap_err();
    assert!(e.starts_with(&f.display().to_string()), "{e}");
    assert!(e.contains("beta [48, 4]") && e.contains("tokens 47 values") && e.contains("tokens T)"), "{e}");
    assert!(e.contains("write it again"), "{e}");
    // A tensor missing, or of another type: named, with what a trace holds and what to do.
    for (name, what) in [("k", "tensor 'k' is missing"), ("write", "tensor 'write' is I32, not F32")] {
        let tensors: Vec<(String, safetensors::tensor::TensorView)> = st
            .tensors()
            .into_iter()
            .filter(|(n, _)| name != "k" || n != "k")
            .map(|(n, t)| match n.as_str() {
                "write" if name == "write" => (
                    n.to_string(),
                    safetensors::tensor::TensorView::new(safetensors::Dtype::I32, t.shape().to_vec(), t.data())
                        .unwrap(),
                ),
                _ => (n.to_string(), t),
            })
            .collect();
        std::fs::write(&f, safetensors::serialize(tensors, None).unwrap()).unwrap();
        let e = TraceData::load(&f).unwrap_err();
        assert!(e.contains(what) && e.contains("all F32; write it again"), "{e}");
    }
}

/// A trace of another format version, a trace's JSON summary and a model's parameters opened as
/// traces are messages that say what to open instead.
#[test]
fn wrong_files_opened_as_traces_say_what_they_are() {
    let dir = common::tmpdir("trace-kinds");
    let bytes = std::fs::read(common::fixture("trace.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let tensors: Vec<(String, safetensors::tensor::TensorView)> =
        st.tensors().into_iter().map(|(n, t)| (n.to_string(), t)).collect();
    let future = dir.join("future.safetensors");
    let meta = std::collections::HashMap::from([("format".to_string(), "ddl-trace-99".to_string())]);
    std::fs::write(&future, safetensors::serialize(tensors.clone(), Some(meta)).unwrap()).unwrap();
    let e = TraceData::load(&future).unwrap_err();
    assert!(e.contains("ddl-trace-99") && e.contains(ddl::generate::TRACE_FORMAT), "{e}");
    let current = dir.join("t.safetensors");
    let meta = std::collections::HashMap::from([("format".to_string(), ddl::generate::TRACE_FORMAT.to_string())]);
    std::fs::write(&current, safetensors::serialize(tensors, Some(meta)).unwrap()).unwrap();
    // Without its summary the tokens are ids, said so; the fixture (with one) has no notes.
    let t = TraceData::load(&current).unwrap();
    assert_eq!(t.len(), trace().len());
    assert!(t.notes.len() == 1 && t.notes[0].contains("ids") && t.notes[0].contains("missing"), "{:?}", t.notes);
    assert!(t.rows[0].trace.text.starts_with('#'));
    assert!(trace().notes.is_empty(), "{:?}", trace().notes);
    std::fs::write(dir.join("t.json"), "{\"format\":\"ddl-trace-1\"}").unwrap();
    let e = TraceData::load(&dir.join("t.json")).unwrap_err();
    assert!(e.contains("summary") && e.contains("t.safetensors"), "{e}");
    let notes = TraceData::load(&current).unwrap().notes;
    assert!(notes.len() == 1 && notes[0].contains("do not match"), "{notes:?}");
    // A text generated under an intervention says so.
    let mut summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::fixture("trace.json")).unwrap()).unwrap();
    summary["interventions"] = "block1.mlp:beta=0".into();
    std::fs::write(dir.join("t.json"), summary.to_string()).unwrap();
    let notes = TraceData::load(&current).unwrap().notes;
    assert!(notes.len() == 1 && notes[0].contains("under the intervention block1.mlp:beta=0"), "{notes:?}");
    // Opened in the app, the Interventions view has it chosen (Generate both compares it).
    summary["interventions"] = "block1.mlp:beta=0; block0.attn:k=mean".into();
    std::fs::write(dir.join("t.json"), summary.to_string()).unwrap();
    let mut app = VizApp::without_worker();
    app.open_trace(&current);
    use panels::interventions::Choice;
    assert_eq!(app.interventions.choices, [Choice::KMean, Choice::AsTrained, Choice::AsTrained, Choice::Identity]);
    assert_eq!(app.interventions.specs(), ["block0.attn:k=mean", "block1.mlp:beta=0"]);
    // A token that is part of a character (a byte-level BPE's lone byte: its text alone "�")
    // shows its bytes from the summary, as `--logprobs` does; a whole one its text.
    summary["tokens"][1]["text"] = "\u{FFFD}".into();
    summary["tokens"][1]["bytes"] = serde_json::json!([0xE2, 0x80]);
    summary["tokens"][2]["bytes"] = serde_json::json!(summary["tokens"][2]["text"].as_str().unwrap().as_bytes());
    std::fs::write(dir.join("t.json"), summary.to_string()).unwrap();
    let t = TraceData::load(&current).unwrap();
    assert_eq!(t.rows[1].trace.text, "\\xE2\\x80");
    assert_eq!(t.rows[2].trace.text, summary["tokens"][2]["text"].as_str().unwrap());
    // Another safetensors file (an optimizer's moments) is named as not a trace.
    let optim = dir.join("optim.safetensors");
    std::fs::write(&optim, safetensors::serialize(vec![("m".to_string(), v16(&[0u8; 16]))], None).unwrap()).unwrap();
    let e = TraceData::load(&optim).unwrap_err();
    assert!(e.contains("not a trace") && e.contains("ddl generate --trace"), "{e}");
    let data = [0u8; 16];
    let model = dir.join("model.safetensors");
    let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4], &data).unwrap();
    std::fs::write(&model, safetensors::serialize(vec![("blocks.0.attn.wq".to_string(), v)], None).unwrap()).unwrap();
    let e = TraceData::load(&model).unwrap_err();
    assert!(e.contains("--checkpoint"), "{e}");
}

/// A legend narrower than its entries moves each entry whole to the next line: every entry's
/// name stays on one line ("block 1 attn" never split after "block 1").
#[test]
fn legend_entries_wrap_whole() {
    let m = Metrics::open(&common::fixture("run")).unwrap();
    for width in [420.0, 560.0, 700.0] {
        let mut h = Harness::builder().with_size([width, 500.0]).build_ui(|ui| {
            egui::CentralPanel::default().show(ui, |ui| panels::dashboard::show(ui, Some(&m)));
        });
        h.run();
        let names = ["block 0 attn", "block 0 MLP", "block 1 attn", "block 1 MLP", "regime thresholds 0.5, 1.5"];
        let rows: Vec<f32> = names
            .iter()
            .map(|n| {
                let r = h.get_by_label(n).rect();
                assert!(r.height() < 20.0, "{n} at width {width}: {r:?} (broken across lines)");
                r.top()
            })
            .collect();
        // At these widths the five entries take more than one line, so some moved down whole.
        assert!(rows.iter().any(|&y| y > rows[0] + 5.0), "width {width}: one legend line {rows:?}");
    }
}

/// A comparison whose interventions change nothing says so (as `ddl generate --compare` does)
/// rather than naming a "largest drop" of +0.000 over a colour scale of ±0.000; a long text's
/// Δ log p strip wraps into rows within the view.
#[test]
fn the_delta_strip_says_when_nothing_changed_and_wraps_long_texts() {
    let data = trace();
    let rows: Vec<_> = data.rows.iter().map(|r| r.trace.clone()).collect();
    let comparison = |n: usize, delta: f64| panels::interventions::Comparison {
        specs: "all:beta*=1".into(),
        prompt: rows[..4].to_vec(),
        prompt_intervened: rows[..4].to_vec(),
        original: rows.iter().cycle().take(n).cloned().collect(),
        intervened: rows.iter().cycle().take(n).cloned().collect(),
        delta_logprob: (0..n).map(|i| delta * (i as f64 * 0.3).sin()).collect(),
    };
    let mut st = panels::interventions::Interventions { comparison: Some(comparison(20, 0.0)), ..Default::default() };
    let mut h = Harness::builder().with_size([700.0, 900.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::interventions::show(ui, &mut st, 4, true, false, 0));
    });
    h.run();
    assert!(h.query_by_label_contains("no token's log-probability fell").is_some());
    assert!(h.query_by_label_contains("the interventions change nothing here").is_some());
    assert!(h.query_by_label_contains("0 in the middle").is_none(), "no colour scale for Δ = 0");
    drop(h);
    // 400 tokens in 700 points: the strip wraps (its rows stay inside the window) and has its scale.
    let mut st = panels::interventions::Interventions { comparison: Some(comparison(400, 2.0)), ..Default::default() };
    let mut h = Harness::builder().with_size([700.0, 1400.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::interventions::show(ui, &mut st, 4, true, false, 0));
    });
    h.run();
    assert!(
        h.query_by_label_contains("largest drop -2.000").is_some()
            || h.query_by_label_contains("largest drop -1.99").is_some()
    );
    let strip = h.get_by_label("Δ log p per token").rect();
    assert!(strip.right() <= 700.0 && strip.height() > 3.0 * 22.0, "{strip:?}");
    assert!(h.query_by_label_contains("0 in the middle").is_some(), "the colour scale");
}

/// Wherever the app names a token's position it counts from 1, as `ddl generate`'s tables do,
/// and names the token: a comparison's first difference (it said "first differ at generated
/// token 1" of the second token, counted from 0, which a reader takes as the first), its largest
/// drop, a continuation that ends first, a chip's heading.
#[test]
fn token_positions_are_counted_from_1_and_name_the_token() {
    let data = trace();
    let rows: Vec<_> = data.rows.iter().map(|r| r.trace.clone()).collect();
    let original = rows[4..10].to_vec();
    let mut intervened = original.clone();
    intervened[1] = rows.iter().find(|r| r.text != original[1].text).expect("another token").clone();
    let comparison = |intervened: Vec<_>| panels::interventions::Comparison {
        specs: "all:beta=0".into(),
        prompt: rows[..4].to_vec(),
        prompt_intervened: rows[..4].to_vec(),
        original: original.clone(),
        intervened,
        delta_logprob: vec![0.1, -0.5, -2.0, 0.3, 0.0, 0.2],
    };
    let text = |t: &ddl::generate::TokenTrace| chip_text(&t.text);
    let mut st =
        panels::interventions::Interventions { comparison: Some(comparison(intervened.clone())), ..Default::default() };
    let mut h = Harness::builder().with_size([900.0, 700.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::interventions::show(ui, &mut st, 4, true, false, 0));
    });
    h.run();
    let first = format!(
        "The continuations first differ at generated token 2: “{}” in the original, “{}” with the interventions.",
        text(&original[1]),
        text(&intervened[1])
    );
    assert!(h.query_by_label(&first).is_some(), "wanted {first}");
    let largest = format!("largest drop -2.000 at generated token 3 “{}”", text(&original[2]));
    assert!(h.query_by_label_contains(&largest).is_some(), "wanted {largest}");
    drop(h);
    // An intervened continuation that ends after its first token differs at the second.
    let mut st = panels::interventions::Interventions {
        comparison: Some(comparison(original[..1].to_vec())),
        ..Default::default()
    };
    let mut h = Harness::builder().with_size([900.0, 700.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::interventions::show(ui, &mut st, 4, true, false, 0));
    });
    h.run();
    let first = format!(
        "The continuations first differ at generated token 2: “{}” in the original, the end of the text with the \
         interventions.",
        text(&original[1])
    );
    assert!(h.query_by_label(&first).is_some(), "wanted {first}");
    drop(h);
    // The headings of the per-token views: the trace's first token is token 1.
    assert!(
        panels::token_label(&data, 0).starts_with(&format!("token 1 “{}”", text(&rows[0]))),
        "{}",
        panels::token_label(&data, 0)
    );
    assert!(panels::token_label(&data, 5).starts_with(&format!("token 6 “{}”", text(&rows[5]))));
}

/// A chat's trace tells the tokens read from its lines from those the model wrote: opened, the
/// read ones are shown as a prompt's (italic), the written ones as generated.
#[test]
fn a_traces_read_tokens_open_as_prompt_tokens() {
    let dir = common::tmpdir("read-trace");
    let data = trace();
    let rows: Vec<_> = data.rows.iter().take(10).map(|r| r.trace.clone()).collect();
    let cfg: ddl::model::ModelConfig = {
        let bytes = std::fs::read(common::fixture("trace.safetensors")).unwrap();
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        serde_json::from_str(&meta.metadata().as_ref().unwrap()["config"]).unwrap()
    };
    let read: Vec<bool> = (0..10).map(|i| i < 4 || i == 7).collect();
    let file = dir.join("chat.safetensors");
    let origin = ddl::generate::TraceOrigin { read: read.clone(), ..Default::default() };
    ddl::generate::write_trace_with(&file, &cfg, &rows, &origin).unwrap();
    let t = TraceData::load(&file).unwrap();
    assert_eq!(t.rows.iter().map(|r| r.prompt).collect::<Vec<_>>(), read);
    assert!(t.turns.is_empty() && t.turn_of(5).is_none(), "no turns recorded, none shown");
    // A chat whose every turn was undone records `"turns": []` (it was null); both read as no turns.
    let chat = ddl::generate::TraceOrigin { read: read.clone(), chat: true, ..Default::default() };
    ddl::generate::write_trace_with(&file, &cfg, &rows, &chat).unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file.with_extension("json")).unwrap()).unwrap();
    assert_eq!(summary["turns"], serde_json::json!([]));
    let t = TraceData::load(&file).unwrap();
    assert!(t.turns.is_empty() && !t.notes.iter().any(|n| n.contains("turns")), "{:?}", t.notes);
    ddl::generate::write_trace_with(&file, &cfg, &rows, &origin).unwrap();
    assert!(TraceData::load(&file).unwrap().turns.is_empty(), "null: no turns");
    // Without the summary (tokens shown as ids) nothing is claimed read.
    std::fs::remove_file(file.with_extension("json")).unwrap();
    assert!(TraceData::load(&file).unwrap().rows.iter().all(|r| !r.prompt));
}

/// A chat's trace with its turns (`ddl chat --trace`): each token knows its turn, each turn's
/// sampling is shown, the window says Generate does not replay the chat; turns that do not fit
/// the trace are reported, not trusted.
#[test]
fn a_chat_traces_turns_open_with_their_sampling() {
    let dir = common::tmpdir("chat-turns");
    let data = trace();
    let rows: Vec<_> = data.rows.iter().take(10).map(|r| r.trace.clone()).collect();
    let cfg: ddl::model::ModelConfig = {
        let bytes = std::fs::read(common::fixture("trace.safetensors")).unwrap();
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        serde_json::from_str(&meta.metadata().as_ref().unwrap()["config"]).unwrap()
    };
    let sampling = |temperature: f32, seed: u64| ddl::generate::SamplerConfig {
        temperature,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.0,
        repetition_penalty: 1.0,
        seed,
    };
    let turn = |from_token: usize, temperature: f32, seed: u64, stop: Vec<String>| ddl::generate::TraceTurn {
        from_token,
        sampling: sampling(temperature, seed),
        max_tokens: 3,
        stop,
        interventions: String::new(),
    };
    // Turn 1: line 0..2, reply 2..4; turn 2: line 4..7, reply 7..10 (after `/set temperature 0.5`
    // and `/intervene block0.mlp:beta=0`).
    let read: Vec<bool> = (0..10).map(|i| i < 2 || (4..7).contains(&i)).collect();
    let turns = vec![
        turn(0, 0.8, 8, vec![]),
        ddl::generate::TraceTurn { interventions: "block0.mlp:beta=0".into(), ..turn(4, 0.5, 9, vec!["END".into()]) },
    ];
    let file = dir.join("chat.safetensors");
    let origin = ddl::generate::TraceOrigin { read: read.clone(), turns, ..Default::default() };
    ddl::generate::write_trace_with(&file, &cfg, &rows, &origin).unwrap();
    let t = TraceData::load(&file).unwrap();
    assert_eq!(t.rows.iter().map(|r| r.prompt).collect::<Vec<_>>(), read);
    assert_eq!(t.turns.len(), 2);
    assert_eq!((t.turns[1].from_token, t.turns[1].sampling.temperature, t.turns[1].sampling.seed), (4, 0.5, 9));
    assert_eq!(t.turns[1].stop, vec!["END".to_string()]);
    assert_eq!((0..10).map(|i| t.turn_of(i)).collect::<Vec<_>>(), [vec![Some(0); 4], vec![Some(1); 6]].concat());
    let note = t.notes.iter().find(|n| n.starts_with("a chat of 2 turns")).expect("the turns described");
    assert!(
        note.contains("turn 1 from token 1: temperature 0.8")
            && note.contains("seed 9, at most 3 tokens, stop [\"END\"], under block0.mlp:beta=0"),
        "{note}"
    );
    assert_eq!(t.turns[1].interventions, "block0.mlp:beta=0");
    assert!(!note.contains("8, at most 3 tokens, under"), "turn 1 ran as trained: {note}");
    // Opened in the window: the status says what Generate does with it; the notes are shown.
    let app = VizApp::new(None, ddl_viz::app::Options { trace: Some(file.clone()), ..Default::default() });
    let shown = app.shown.clone().unwrap_or_default();
    assert!(shown.contains("a chat of 2 turns: Generate writes one continuation"), "{shown}");
    assert!(app.messages.iter().any(|(_, m)| m.starts_with("a chat of 2 turns")));
    // The headings and tooltips name the token's turn and part.
    let label = |i: usize| panels::token_label(&t, i);
    assert_eq!(label(1), format!("token 2 “{}” (turn 1, read)", chip_text(&t.rows[1].trace.text)));
    assert!(label(3).ends_with("(turn 1, reply)") && label(5).ends_with("(turn 2, read)"));
    assert!(label(8).ends_with("(turn 2, reply)"), "{}", label(8));
    // A trace written before chats had interventions (no `interventions` per turn) still reads.
    let summary = file.with_extension("json");
    let mut j: serde_json::Value = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    let old = j.clone();
    for t in j["turns"].as_array_mut().unwrap() {
        t.as_object_mut().unwrap().remove("interventions");
    }
    std::fs::write(&summary, serde_json::to_vec(&j).unwrap()).unwrap();
    let t = TraceData::load(&file).unwrap();
    assert_eq!(t.turns.len(), 2);
    assert!(t.turns.iter().all(|x| x.interventions.is_empty()));
    let mut j = old;
    // A turn past the trace's end: reported, and the tokens shown without turns.
    j["turns"][1]["from_token"] = 10.into();
    std::fs::write(&summary, serde_json::to_vec(&j).unwrap()).unwrap();
    let t = TraceData::load(&file).unwrap();
    assert!(t.turns.is_empty());
    assert!(t.notes.iter().any(|n| n.contains("turns") && n.contains("not readable")), "{:?}", t.notes);
}

/// A run that diverged (`ddl experiment` writes its final loss as null) is named and left out
/// of the Experiment table, as the experiment's report does: it took the run's last periodic
/// evaluation instead, declared the table's losses "measured differently" and counted that loss.
#[test]
fn a_diverged_run_is_left_out_of_the_experiment_table_and_named() {
    let exp = common::tmpdir("diverged").join("exp");
    for (seed, loss) in [(1, "1.5"), (2, "1.7"), (3, "null")] {
        let d = exp.join("runs").join(format!("ddl-seed{seed}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("metrics.jsonl"), "{\"step\":10,\"val_loss\":2.0}\n").unwrap();
        std::fs::write(
            d.join("result.json"),
            format!("{{\"variant\":\"ddl\",\"seed\":{seed},\"final_val_loss\":{loss},\"val_tokens\":100}}"),
        )
        .unwrap();
    }
    let e = ddl_viz::experiment::Experiment::open(&exp).unwrap();
    assert_eq!(e.mixed(), None, "every final loss is result.json's");
    let s = e.summary();
    assert!(s.len() == 1 && s[0].runs == 2 && (s[0].mean - 1.6).abs() < 1e-12, "{s:?}");
    let h = Harness::builder().with_size([900.0, 560.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::experiment::show(ui, Some(&e)));
    });
    h.get_by_label("1.6000");
    h.get_by_label_contains(
        "Left out of the table, diverged (a final validation loss that is not a finite number): ddl-seed3",
    );
    assert!(h.query_by_label_contains("Not comparable").is_none());
}

/// Runs that skipped steps (`skip_nonfinite`: `result.json`'s `skipped_steps`, or the steps a run
/// without one logs as skipped) are named under the Experiment table with how many, as the report
/// and `ddl info` name them: the view showed them as runs trained for all their steps.
#[test]
fn runs_with_skipped_steps_are_named_in_the_experiment_view() {
    let exp = common::tmpdir("skipped-steps").join("exp");
    for (seed, loss, skipped) in [(1, "1.5", 0), (2, "1.7", 17), (3, "null", 3)] {
        let d = exp.join("runs").join(format!("ddl-seed{seed}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("metrics.jsonl"), "{\"step\":10,\"val_loss\":2.0}\n").unwrap();
        std::fs::write(
            d.join("result.json"),
            format!(
                "{{\"variant\":\"ddl\",\"seed\":{seed},\"steps\":20,\"final_val_loss\":{loss},\"val_tokens\":100,\
                 \"skipped_steps\":{skipped}}}"
            ),
        )
        .unwrap();
    }
    // A run folder without a result: the steps its metrics.jsonl logs as skipped.
    let d = exp.join("runs").join("baseline-seed1");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("metrics.jsonl"),
        "{\"step\":1,\"loss\":4.0}\n{\"step\":2,\"loss\":null,\"grad_norm\":null,\"skipped\":true}\n\
         {\"step\":3,\"loss\":3.9}\n{\"step\":3,\"val_loss\":3.8}\n",
    )
    .unwrap();
    let e = ddl_viz::experiment::Experiment::open(&exp).unwrap();
    let named: Vec<(&str, u64)> = e.with_skipped_steps().iter().map(|r| (r.name.as_str(), r.skipped_steps)).collect();
    assert_eq!(named, [("baseline-seed1", 1), ("ddl-seed2", 17), ("ddl-seed3", 3)]);
    let h = Harness::builder().with_size([900.0, 560.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::experiment::show(ui, Some(&e)));
    });
    h.get_by_label_contains("Runs with skipped steps (a loss or gradient that was not finite");
    h.get_by_label_contains(": baseline-seed1 (1 of 3), ddl-seed2 (17 of 20), ddl-seed3 (3 of 20, diverged)");
    // None skipped: no such line.
    for seed in 2..=3 {
        let p = exp.join("runs").join(format!("ddl-seed{seed}")).join("result.json");
        let t = std::fs::read_to_string(&p).unwrap().replace("\"skipped_steps\":17", "\"skipped_steps\":0");
        std::fs::write(&p, t.replace("\"skipped_steps\":3", "\"skipped_steps\":0")).unwrap();
    }
    std::fs::remove_dir_all(&d).unwrap();
    let e = ddl_viz::experiment::Experiment::open(&exp).unwrap();
    assert!(e.with_skipped_steps().is_empty());
    let h = Harness::builder().with_size([900.0, 560.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::experiment::show(ui, Some(&e)));
    });
    assert!(h.query_by_label_contains("skipped steps").is_none());
}

/// A run that has logged one step (one that has just started training) draws its values: a line
/// of one point was a dot of the line's width, so every plot looked empty under "1 step logged".
#[test]
fn a_run_of_one_step_draws_its_values() {
    let run = common::tmpdir("one-step").join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("metrics.jsonl"),
        "{\"step\":1,\"loss\":4.0,\"lr\":0.001,\"grad_norm\":1.5,\"beta_mean\":[0.5,1.0]}\n",
    )
    .unwrap();
    let m = Metrics::open(&run).unwrap();
    let mut h = Harness::builder().with_size([1000.0, 600.0]).wgpu().build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::dashboard::show(ui, Some(&m)));
    });
    h.run();
    let img = h.render().unwrap();
    let ppp = h.ctx.pixels_per_point();
    // Pixels of a series' colour below its legend entry (whose swatch has that colour too).
    let drawn = |name: &str, c: egui::Color32| {
        let below = (h.get_by_label(name).rect().bottom() + 4.0) * ppp;
        let near = |p: &image::Rgba<u8>| (0..3).all(|i| (p.0[i] as i32 - [c.r(), c.g(), c.b()][i] as i32).abs() <= 4);
        img.enumerate_pixels().filter(|(_, y, p)| *y as f32 > below && near(p)).count()
    };
    for (name, c) in [
        ("train loss", egui::Color32::from_rgb(90, 160, 240)),
        ("learning rate", egui::Color32::from_rgb(150, 200, 120)),
        ("grad norm", egui::Color32::from_rgb(200, 120, 220)),
        ("block 0 attn", ddl_viz::colors::layer_color(0, 2)),
    ] {
        let n = drawn(name, c);
        assert!(n >= 10, "{name}: {n} pixels of its colour in its plot");
    }
}

/// A run whose loss was not a finite number at some steps (logged as null, as `ddl train
/// --skip-nonfinite` writes them) says so in its header: the last loss as not finite and how many
/// steps are gaps (the header dropped the last loss without a word and the gaps went unexplained).
#[test]
fn the_dashboard_names_losses_that_are_not_finite() {
    let run = common::tmpdir("nan-losses").join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("metrics.jsonl"),
        "{\"step\":1,\"loss\":4.0,\"lr\":0.001,\"grad_norm\":1.0,\"skipped\":false}\n\
         {\"step\":2,\"loss\":null,\"lr\":0.001,\"grad_norm\":null,\"skipped\":true}\n\
         {\"step\":3,\"loss\":null,\"lr\":0.001,\"grad_norm\":null,\"skipped\":true}\n",
    )
    .unwrap();
    let m = Metrics::open(&run).unwrap();
    let h = Harness::builder().with_size([1000.0, 500.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::dashboard::show(ui, Some(&m)));
    });
    h.get_by_label_contains("3 steps logged, last loss not a finite number");
    h.get_by_label_contains("2 step(s) with a loss that is not a finite number");
    // A run whose losses are all finite has neither.
    std::fs::write(run.join("metrics.jsonl"), "{\"step\":1,\"loss\":4.0}\n").unwrap();
    let m = Metrics::open(&run).unwrap();
    let h = Harness::builder().with_size([1000.0, 500.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::dashboard::show(ui, Some(&m)));
    });
    h.get_by_label_contains("1 step logged, last loss 4.0000");
    assert!(h.query_by_label_contains("not a finite number").is_none());
}

/// Top-1 accuracies where runs logged them: the dashboard's heading gives the periodic and the
/// final evaluation's beside their losses; the Experiment table a column of each variant's mean ±
/// sd over the runs that have one (results made before it was logged: "—"), and none at all
/// when no run has one.
#[test]
fn accuracies_show_where_runs_logged_them() {
    let dir = common::tmpdir("accuracies");
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("metrics.jsonl"),
        "{\"step\":1,\"loss\":4.0}\n{\"step\":1,\"val_loss\":3.9,\"val_accuracy\":0.125}\n\
         {\"step\":2,\"loss\":3.0}\n{\"step\":2,\"val_loss\":3.5,\"val_full\":true,\"val_subset_loss\":3.4,\
         \"val_accuracy\":0.3,\"val_subset_accuracy\":0.3125}\n",
    )
    .unwrap();
    let m = Metrics::open(&run).unwrap();
    let h = Harness::builder().with_size([1000.0, 500.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::dashboard::show(ui, Some(&m)));
    });
    h.get_by_label_contains("val loss 3.4000, top-1 31.25 % at step 2 (periodic subset)");
    h.get_by_label_contains("final 3.5000, top-1 30.00 % over the whole split");
    // An experiment: baseline 40, 42, 44 % (mean 42, sd 2); ddl one run with 45 %, one without.
    let exp = dir.join("exp");
    for (name, loss, acc) in [
        ("baseline-seed1", 1.9, Some(0.40)),
        ("baseline-seed2", 1.8, Some(0.42)),
        ("baseline-seed3", 1.7, Some(0.44)),
        ("ddl-seed1", 1.6, Some(0.45)),
        ("ddl-seed2", 1.5, None),
    ] {
        let d = exp.join("runs").join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("metrics.jsonl"), "{\"step\":10,\"val_loss\":2.0}\n").unwrap();
        let (v, s) = name.rsplit_once("-seed").unwrap();
        let acc = acc.map(|a| format!(",\"final_val_accuracy\":{a}")).unwrap_or_default();
        std::fs::write(
            d.join("result.json"),
            format!("{{\"variant\":\"{v}\",\"seed\":{s},\"final_val_loss\":{loss},\"val_tokens\":100{acc}}}"),
        )
        .unwrap();
    }
    let e = ddl_viz::experiment::Experiment::open(&exp).unwrap();
    let s = e.summary();
    let (k, mean, sd) = s[0].accuracy.unwrap();
    assert!(k == 3 && (mean - 0.42).abs() < 1e-12 && (sd - 0.02).abs() < 1e-12, "{s:?}");
    assert_eq!((s[1].runs, s[1].accuracy.map(|a| a.0)), (2, Some(1)), "{s:?}");
    let h = Harness::builder().with_size([900.0, 560.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::experiment::show(ui, Some(&e)));
    });
    h.get_by_label("top-1 accuracy (runs)");
    h.get_by_label("42.00 ± 2.00 % (3)");
    h.get_by_label("45.00 % (1)");
    // No run with one: no column.
    for d in std::fs::read_dir(exp.join("runs")).unwrap().flatten() {
        let p = d.path().join("result.json");
        let t = std::fs::read_to_string(&p).unwrap();
        let t = t.split(",\"final_val_accuracy\"").next().unwrap().trim_end_matches('}').to_string() + "}";
        std::fs::write(&p, t).unwrap();
    }
    let e = ddl_viz::experiment::Experiment::open(&exp).unwrap();
    assert!(e.summary().iter().all(|s| s.accuracy.is_none()));
    let h = Harness::builder().with_size([900.0, 560.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::experiment::show(ui, Some(&e)));
    });
    assert!(h.query_by_label("top-1 accuracy (runs)").is_none());
}

/// The Training and Experiment views head their folder as "Run: NAME" / "Experiment: NAME":
/// a run folder named `run` was headed "Run run" (and an experiment folder named `experiment`
/// "Experiment experiment").
#[test]
fn the_training_and_experiment_views_head_their_folder_by_name() {
    let dir = common::tmpdir("headings");
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("metrics.jsonl"), "{\"step\":1,\"loss\":4.0}\n").unwrap();
    let m = Metrics::open(&run).unwrap();
    let h = Harness::builder().with_size([1000.0, 500.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::dashboard::show(ui, Some(&m)));
    });
    h.get_by_label("Run: run");
    assert!(h.query_by_label("Run run").is_none());
    let exp = dir.join("experiment");
    let one = exp.join("runs").join("ddl-seed1");
    std::fs::create_dir_all(&one).unwrap();
    std::fs::write(one.join("metrics.jsonl"), "{\"step\":1,\"loss\":4.0}\n").unwrap();
    let e = ddl_viz::experiment::Experiment::open(&exp).unwrap();
    let h = Harness::builder().with_size([900.0, 560.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::experiment::show(ui, Some(&e)));
    });
    h.get_by_label("Experiment: experiment");
}

/// Every text `shape` paints.
fn painted_texts(shape: &egui::Shape, out: &mut Vec<String>) {
    match shape {
        egui::Shape::Text(t) => out.push(t.galley.text().to_string()),
        egui::Shape::Vec(v) => v.iter().for_each(|s| painted_texts(s, out)),
        _ => {}
    }
}

/// The k-turn plot's angle axis is labelled in a window of ordinary size: at 900 × 700 it
/// showed only "0" (its grid of tens was too dense to label, the next, hundreds, past 90°), a
/// plot in degrees without a scale.
#[test]
fn the_k_turn_plot_labels_its_angles_in_a_small_window() {
    let data = trace();
    // (Fewer than 60 tokens: a "60" or "90" drawn is the angle axis's, not the token axis's.)
    assert!(data.len() < 60, "{}", data.len());
    let mut sel = Selection { token: Some(7), sublayer: 0 };
    let mut h = Harness::builder().with_size([650.0, 560.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::kdirs::show(ui, &data, &mut sel));
    });
    h.run();
    let mut texts = Vec::new();
    for s in &h.output().shapes {
        painted_texts(&s.shape, &mut texts);
    }
    for label in ["60", "90", "degrees"] {
        assert!(texts.iter().any(|t| t == label), "no {label:?} among {texts:?}");
    }
}

/// The tables beside the Eigenvalue regimes and Write strength plots show all their columns in a
/// window of ordinary size (at 900 × 700 the last column was cut off at the panel's edge — "ide",
/// "ref", "|v| writt" — the two halves being equal however wide the table).
#[test]
fn the_eigen_and_writes_tables_show_their_last_column_in_a_narrow_panel() {
    let data = trace();
    let width = 650.0;
    for (view, last) in [("eigen", "regime"), ("writes", "|v| written")] {
        let mut sel = Selection { token: Some(7), sublayer: 0 };
        let h = Harness::builder().with_size([width, 560.0]).build_ui(|ui| {
            egui::CentralPanel::default().show(ui, |ui| match view {
                "eigen" => panels::eigen::show(ui, &data, &mut sel),
                _ => panels::writes::show(ui, &data, &mut sel),
            });
        });
        let r = h.get_by_label(last).rect();
        assert!(r.right() <= width, "{view}: the column {last:?} ends at {} in a panel {width} wide", r.right());
    }
}

/// Each of the Training view's four plots labels its step axis in a window of ordinary size
/// (at 900 × 700 the learning rate's showed only "0": its own "step" labels were left out).
#[test]
fn every_training_plot_labels_its_steps_in_a_narrow_panel() {
    let m = Metrics::open(&common::fixture("run")).unwrap();
    let mut h = Harness::builder().with_size([650.0, 560.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::dashboard::show(ui, Some(&m)));
    });
    h.run();
    let mut texts = Vec::new();
    for s in &h.output().shapes {
        painted_texts(&s.shape, &mut texts);
    }
    let n = |label: &str| texts.iter().filter(|t| *t == label).count();
    assert_eq!(n("step"), 4, "{texts:?}");
    assert_eq!(n("200"), 4, "every plot's step axis: {texts:?}");
}

/// An experiment that a live process runs (`ddl experiment` holds its folder's lock) is read
/// again as it grows: a new run, a run's new points and its result appear (the view kept what it
/// read when opened); once the process has ended, it is read once more, then left alone.
#[test]
fn the_experiment_view_follows_a_grid_that_is_running() {
    let exp = common::tmpdir("follow").join("exp");
    let run = |name: &str, lines: &str| {
        let d = exp.join("runs").join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("metrics.jsonl"), lines).unwrap();
        d
    };
    run("ddl-seed1", "{\"step\":10,\"val_loss\":2.0}\n");
    let mut app = VizApp::with_trace(trace());
    app.open_experiment(&exp, false);
    assert_eq!(app.experiment.as_ref().unwrap().runs.len(), 1);
    // At rest: nothing read again.
    assert!(!app.follow_experiment());
    // Running (a lock of another host is never taken for a stale one): the second run and the
    // first one's new point are read.
    let lock = exp.join(ddl::train::lock::LOCK_FILE);
    std::fs::write(&lock, "1 another-host").unwrap();
    run("baseline-seed1", "{\"step\":10,\"val_loss\":2.2}\n");
    run("ddl-seed1", "{\"step\":10,\"val_loss\":2.0}\n{\"step\":20,\"val_loss\":1.8}\n");
    assert!(app.follow_experiment());
    let e = app.experiment.as_ref().unwrap();
    assert_eq!(e.runs.len(), 2);
    let first = e.runs.iter().find(|r| r.name == "ddl-seed1").unwrap();
    assert_eq!(first.val.last(), Some(&(20.0, 1.8)));
    // The view says it follows a running grid.
    assert!(e.following);
    let shown = e.clone();
    let h = Harness::builder().with_size([900.0, 560.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::experiment::show(ui, Some(&shown)));
    });
    h.get_by_label("running now: read again every 5 s");
    // Ended: read once more (the last result), then not again.
    std::fs::remove_file(&lock).unwrap();
    std::fs::write(
        exp.join("runs/ddl-seed1/result.json"),
        "{\"variant\":\"ddl\",\"seed\":1,\"final_val_loss\":1.75,\"val_tokens\":100}",
    )
    .unwrap();
    assert!(app.follow_experiment());
    let first = app.experiment.as_ref().unwrap().runs.iter().find(|r| r.name == "ddl-seed1").unwrap().clone();
    assert_eq!(first.final_val, Some(1.75));
    assert!(!app.experiment.as_ref().unwrap().following);
    assert!(!app.follow_experiment());
}

/// The Training view's heading gives the last step's speed and the training time so far (from
/// the run's own log), and what the run is doing where its folder says: here, stopped by Ctrl-C
/// with the command that goes on (summary.json at the last step logged).
#[test]
fn the_training_heading_gives_speed_time_and_state() {
    let run = common::tmpdir("speed").join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("metrics.jsonl"),
        "{\"step\":1,\"loss\":4.0,\"tok_per_s\":900.4,\"elapsed\":1.0}\n\
         {\"step\":2,\"loss\":3.9,\"tok_per_s\":1118.4,\"elapsed\":252.4}\n",
    )
    .unwrap();
    std::fs::write(run.join("summary.json"), "{\"step\":2,\"steps_target\":30,\"interrupted\":true}").unwrap();
    let m = Metrics::open(&run).unwrap();
    let h = Harness::builder().with_size([1200.0, 500.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::dashboard::show(ui, Some(&m)));
    });
    h.get_by_label_contains("last loss 3.9000, 1118 tok/s, 4 min 12 s of training");
    h.get_by_label_contains("stopped at step 2 of 30: `ddl train --resume");
    // Training now (a live process's lock): how far and the time left at its pace, from the
    // rows' target (it was on disk only from the first checkpoint).
    std::fs::remove_file(run.join("summary.json")).unwrap();
    std::fs::write(
        run.join("metrics.jsonl"),
        "{\"step\":1,\"loss\":4.0,\"elapsed\":1.0,\"steps_target\":300}\n\
         {\"step\":11,\"loss\":3.9,\"elapsed\":21.0,\"steps_target\":300}\n",
    )
    .unwrap();
    std::fs::write(run.join(ddl::train::lock::LOCK_FILE), "1 another-host").unwrap();
    let m = Metrics::open(&run).unwrap();
    let h = Harness::builder().with_size([1200.0, 500.0]).build_ui(|ui| {
        egui::CentralPanel::default().show(ui, |ui| panels::dashboard::show(ui, Some(&m)));
    });
    h.get_by_label_contains("training now: step 11 of 300, about 9 min 38 s left");
}
