//! `ddl-viz`: desktop visualizer for DDL models.

use std::path::PathBuf;

use clap::Parser;
use ddl_viz::app::{Options, Tab, VizApp};
use eframe::egui;

/// Per-layer β, k directions and eigenvalue regimes of a DDL model, live while it generates; and
/// the training dashboard of a run.
#[derive(Parser, Debug)]
#[command(name = "ddl-viz", version)]
struct Args {
    /// A checkpoint directory (the --out of `ddl train`, or one of its kept checkpoints) to load on
    /// the model thread.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// A training run directory (with metrics.jsonl) for the dashboard; followed while it trains.
    #[arg(long)]
    run: Option<PathBuf>,
    /// An experiment folder (`ddl experiment --out DIR`) or run folders for the Experiment view:
    /// every run's validation curve, the mean and band per variant, the final table (repeatable).
    #[arg(long, value_name = "DIR")]
    experiment: Vec<PathBuf>,
    /// A trace file written by `ddl generate --trace FILE` (or `ddl chat --trace FILE`).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// The initial prompt.
    #[arg(long)]
    prompt: Option<String>,
    /// Automation: generate this many tokens as soon as the checkpoint is loaded (at most 10000;
    /// 0 loads it and generates nothing).
    #[arg(long)]
    generate: Option<usize>,
    /// Automation: with --generate, generate with and without this intervention (repeatable;
    /// `ddl generate --intervene`'s specs, e.g. block1.mlp:beta=0) and open the Interventions view
    /// (with --tab another view: the intervened continuation in that view).
    #[arg(long = "intervene", value_name = "SPEC")]
    intervene: Vec<String>,
    /// With --intervene: allow β outside [0, 2] (as `ddl generate --allow-out-of-range`).
    #[arg(long, requires = "intervene")]
    allow_out_of_range: bool,
    /// Automation: save a PNG screenshot of the window once generation is done (without
    /// --generate: once the --checkpoint has loaded, or at once without one).
    #[arg(long)]
    screenshot: Option<PathBuf>,
    /// Automation: close the window after the screenshot (exit status 1 if something failed).
    #[arg(long)]
    exit_after_screenshot: bool,
    /// The view to open: beta, eigen, k, writes, lens, interventions, training, experiment (lens:
    /// with --generate, the text's logit lens computed before the screenshot).
    #[arg(long)]
    tab: Option<String>,
    /// Window width in points (200 to 16384).
    #[arg(long, allow_negative_numbers = true, value_parser = points, default_value_t = 1280.0)]
    width: f32,
    /// Window height in points (200 to 16384).
    #[arg(long, allow_negative_numbers = true, value_parser = points, default_value_t = 820.0)]
    height: f32,
}

/// `--width`, `--height`: a number of points (their range is checked with the other flags), or
/// what they take (not Rust's "invalid float literal").
fn points(s: &str) -> Result<f32, String> {
    s.trim().parse::<f32>().map_err(|_| format!("expected a window size in points (e.g. 1280), got '{s}'"))
}

/// The window's sides in points (`--width`, `--height`).
const MIN_SIDE: f32 = 200.0;
const MAX_SIDE: f32 = 16384.0;
/// The most tokens `--generate` asks for.
const MAX_GENERATE: usize = 10_000;

/// The paths given exist and are of the kind their flag takes (before the window opens: a
/// typo is a usage error, not a window with a message; a wrong kind was said in the window). A
/// corrupt file is the window's to report.
fn check_paths(a: &Args) -> Result<(), String> {
    let missing = |flag: &str, p: &std::path::Path| {
        let what = if std::fs::symlink_metadata(p).is_ok() { "is a link to nothing" } else { "does not exist" };
        // What the flag takes: what to give instead.
        let want = match flag {
            "--checkpoint" => {
                "give a checkpoint folder (the --out folder of `ddl train`, or one of its checkpoints/ folders)"
            }
            "--run" => "give a training run's folder (the --out folder of `ddl train`, with its metrics.jsonl)",
            "--experiment" => "give an experiment folder (the --out folder of `ddl experiment`) or run folders",
            _ => "give a trace file written by `ddl generate --trace FILE`",
        };
        format!("{flag} {}: {what}; {want}", p.display())
    };
    if let Some(d) = &a.checkpoint {
        if !d.exists() {
            return Err(missing("--checkpoint", d));
        }
        let model = ddl::train::checkpoint::MODEL_FILE;
        if !d.is_dir() {
            return Err(format!("--checkpoint {}", ddl::train::checkpoint::CheckpointError::NotADir(d.clone())));
        }
        if !d.join(model).exists() {
            let hint = if d.join("metrics.jsonl").is_file() {
                format!(
                    ": a run that has not saved a checkpoint yet? --run {} follows its training curves meanwhile",
                    d.display()
                )
            } else if d.join("runs").is_dir() || d.join("experiment.toml").is_file() {
                // (The window's loader says the same of an experiment folder opened there.)
                format!(": {}", ddl_viz::experiment::experiment_as_checkpoint(d))
            } else {
                " (a checkpoint is the --out folder of `ddl train`, or one of its checkpoints/ folders)".to_string()
            };
            return Err(format!("--checkpoint {}: the folder holds no {model}{hint}", d.display()));
        }
    }
    for (flag, p) in [("--trace", &a.trace), ("--run", &a.run)] {
        if let Some(p) = p
            && !p.exists()
        {
            return Err(missing(flag, p));
        }
    }
    if let Some(e) = a.experiment.iter().find(|e| !e.exists()) {
        return Err(missing("--experiment", e));
    }
    // Of the wrong kind (a folder as the trace, a file or a folder without curves as the run, a
    // file as an experiment), said as the window would have said it once open.
    let kind = |flag: &str, r: Result<(), String>| r.map_err(|e| format!("{flag}: {e}"));
    if let Some(t) = &a.trace {
        kind("--trace", ddl_viz::trace::check_trace_path(t))?;
    }
    if let Some(r) = &a.run {
        kind("--run", ddl_viz::metrics::check_run_dir(r))?;
    }
    for e in &a.experiment {
        kind("--experiment", ddl_viz::experiment::check_experiment_path(e))?;
    }
    Ok(())
}

/// winit's words without the place in its own source it names ("os error at
/// /root/.cargo/registry/…/mod.rs:788: Failed to open connection to X server" → "os error:
/// Failed to open connection to X server"): a path on the machine that built ddl-viz.
fn without_source_place(e: &str) -> String {
    let Some(at) = e.find(" at ") else { return e.to_string() };
    let rest = &e[at + 4..];
    let Some(rs) = rest.find(".rs:") else { return e.to_string() };
    let after = rest[rs + 4..].trim_start_matches(|c: char| c.is_ascii_digit());
    match after.strip_prefix(": ") {
        Some(words) => format!("{}: {words}", &e[..at]),
        None => e.to_string(),
    }
}

fn main() -> std::process::ExitCode {
    // Before any thread or wgpu call: no "XDG_RUNTIME_DIR is invalid" lines from the driver.
    ddl::gpu::use_private_runtime_dir();
    let a = Args::parse();
    let tab = match a.tab.as_deref() {
        None => None,
        Some("beta") => Some(Tab::BetaMap),
        Some("eigen") => Some(Tab::Eigen),
        Some("k") => Some(Tab::KDirs),
        Some("writes") => Some(Tab::Writes),
        Some("lens") => Some(Tab::Lens),
        Some("interventions") => Some(Tab::Interventions),
        Some("training") => Some(Tab::Training),
        Some("experiment") => Some(Tab::Experiment),
        Some(t) => {
            eprintln!("error: unknown --tab {t} (beta, eigen, k, writes, lens, interventions, training, experiment)");
            return std::process::ExitCode::from(2);
        }
    };
    if a.generate.is_some() && a.checkpoint.is_none() {
        eprintln!("error: --generate needs --checkpoint DIR");
        return std::process::ExitCode::from(2);
    }
    if a.exit_after_screenshot && a.screenshot.is_none() {
        eprintln!(
            "error: --exit-after-screenshot needs --screenshot FILE.png (without one the window would stay open)"
        );
        return std::process::ExitCode::from(2);
    }
    if let Some(p) = &a.screenshot
        && let Err(e) = ddl_viz::app::check_screenshot_path(p)
    {
        eprintln!("error: {e}");
        return std::process::ExitCode::from(2);
    }
    for (flag, v) in [("--width", a.width), ("--height", a.height)] {
        if !(MIN_SIDE..=MAX_SIDE).contains(&v) {
            eprintln!("error: {flag} {v}: expected a window size in points from {MIN_SIDE} to {MAX_SIDE}");
            return std::process::ExitCode::from(2);
        }
    }
    if let Some(n) = a.generate
        && n > MAX_GENERATE
    {
        eprintln!(
            "error: --generate {n}: at most {MAX_GENERATE} tokens (the views keep every token's writes); \
             `ddl generate --max-tokens N` writes longer texts"
        );
        return std::process::ExitCode::from(2);
    }
    // The specs, and their blocks against the checkpoint's model when its metadata reads (an
    // unreadable checkpoint is the window's to report).
    let checked = ddl::model::Interventions::parse(&a.intervene, a.allow_out_of_range).and_then(|ivs| {
        match a.checkpoint.as_deref().map(ddl::train::checkpoint::saved_config) {
            Some(Ok(cfg)) => ivs.maps(&cfg).and(ivs.k_mean_targets(&cfg)).map(|_| ()),
            _ => Ok(()),
        }
    });
    if let Err(e) = checked {
        eprintln!("error: {e}");
        return std::process::ExitCode::from(2);
    }
    // (After the specs: a malformed one is named first.)
    if !a.intervene.is_empty() && a.generate.is_none() {
        eprintln!("error: --intervene needs --generate N (the comparison's length) and --checkpoint DIR");
        return std::process::ExitCode::from(2);
    }
    if let Err(e) = check_paths(&a) {
        eprintln!("error: {e}");
        return std::process::ExitCode::from(2);
    }
    if a.generate.is_some() && a.prompt.as_deref().is_some_and(|p| p.is_empty()) {
        eprintln!("error: --prompt is empty: give the text to continue, e.g. --prompt \"First Citizen:\"");
        return std::process::ExitCode::from(2);
    }
    // A prompt the checkpoint's tokenizer cannot encode (a character a char model never saw), as
    // `ddl generate` says it, before the window (the tokenizer is in the model file's metadata; an
    // unreadable checkpoint is the window's to report).
    if a.generate.is_some()
        && let (Some(prompt), Some(ck)) = (a.prompt.as_deref(), a.checkpoint.as_deref())
        && let Ok(tok) = ddl::train::checkpoint::saved_tokenizer(ck)
        && let Err(e) = tok.encode(prompt)
    {
        eprintln!(
            "error: --prompt: {e}; the checkpoint's {} tokenizer cannot encode it: leave that character out",
            tok.kind()
        );
        return std::process::ExitCode::from(2);
    }
    let opts = Options {
        checkpoint: a.checkpoint,
        run: a.run,
        experiment: a.experiment,
        trace: a.trace,
        prompt: a.prompt,
        generate: a.generate,
        intervene: a.intervene,
        allow_out_of_range: a.allow_out_of_range,
        screenshot: a.screenshot,
        exit_after_screenshot: a.exit_after_screenshot,
        tab,
    };
    let native = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default().with_title("ddl-viz").with_inner_size([a.width, a.height]),
        ..Default::default()
    };
    let result = std::sync::Arc::new(std::sync::Mutex::new(None));
    let r2 = result.clone();
    let run = eframe::run_native(
        "ddl-viz",
        native,
        Box::new(move |cc| {
            let app = VizApp::new(Some(cc.egui_ctx.clone()), opts);
            *r2.lock().unwrap() = Some(app.auto_result());
            Ok(Box::new(app))
        }),
    );
    if let Err(e) = run {
        let e = e.to_string();
        // (winit's message names its own source file; the remedy is what a user needs.)
        let set = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty()).map(|s| format!("{v}={s}"));
        let displays: Vec<String> = ["DISPLAY", "WAYLAND_DISPLAY"].into_iter().filter_map(set).collect();
        let why = if e.contains("DISPLAY") {
            Some("no display (neither DISPLAY nor WAYLAND_DISPLAY is set)".to_string())
        } else if e.contains("X server") || e.to_lowercase().contains("wayland") {
            // A display named that does not answer: a stale DISPLAY, an ssh session without X.
            Some(format!("the display ({}) does not answer", displays.join(", ")))
        } else {
            None
        };
        if let Some(why) = why {
            eprintln!(
                "error: the window could not be opened: {why}. Run ddl-viz in a desktop session, or under a \
                 virtual display for screenshots: xvfb-run -a ddl-viz … (winit: {})",
                without_source_place(&e)
            );
        } else {
            eprintln!("error: the window could not be opened: {e}");
        }
        return std::process::ExitCode::FAILURE;
    }
    let auto = result.lock().unwrap().clone();
    match auto.and_then(|r| r.lock().unwrap().clone()) {
        Some(Err(e)) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
        _ => std::process::ExitCode::SUCCESS,
    }
}
