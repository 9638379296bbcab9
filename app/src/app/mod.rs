//! The eframe application: model controls, token chips and the panels.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ddl::generate::{SamplerConfig, TokenTrace};
use eframe::egui::{self, Color32, RichText};

use crate::metrics::Metrics;
use crate::panels::{self, Selection, tokens::ChipColour};
use crate::trace::TraceData;
use crate::worker::{Command, Event, ModelInfo, Worker};

mod open;
mod ui;

/// The views of the central area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tab {
    #[default]
    BetaMap,
    Eigen,
    KDirs,
    Writes,
    Lens,
    Interventions,
    Training,
    Experiment,
}

impl Tab {
    pub const ALL: [Tab; 8] = [
        Tab::BetaMap,
        Tab::Eigen,
        Tab::KDirs,
        Tab::Writes,
        Tab::Lens,
        Tab::Interventions,
        Tab::Training,
        Tab::Experiment,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Tab::BetaMap => "β map",
            Tab::Eigen => "Eigenvalue regimes",
            Tab::KDirs => "k directions",
            Tab::Writes => "Write strength",
            Tab::Lens => "Logit lens",
            Tab::Interventions => "Interventions",
            Tab::Training => "Training",
            Tab::Experiment => "Experiment",
        }
    }
}

/// Startup options (the command line).
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub checkpoint: Option<PathBuf>,
    pub run: Option<PathBuf>,
    /// Experiment folders or run folders for the Experiment view (several add up).
    pub experiment: Vec<PathBuf>,
    pub trace: Option<PathBuf>,
    pub prompt: Option<String>,
    /// Automation: generate this many tokens once the checkpoint is loaded.
    pub generate: Option<usize>,
    /// Automation: compare with these interventions instead of generating once.
    pub intervene: Vec<String>,
    /// Their β may leave [0, 2] (`--allow-out-of-range`, as `ddl generate` takes it).
    pub allow_out_of_range: bool,
    /// Automation: save a screenshot here once generation is done.
    pub screenshot: Option<PathBuf>,
    pub exit_after_screenshot: bool,
    pub tab: Option<Tab>,
}

/// What the automation reports to `main` (exit status).
pub type AutoResult = Arc<Mutex<Option<Result<(), String>>>>;

#[derive(Default)]
struct Automation {
    generate: Option<usize>,
    intervene: Vec<String>,
    allow_out_of_range: bool,
    /// The view `--tab` asked for: with `--intervene`, the intervened text is shown there.
    tab: Option<Tab>,
    started: bool,
    done: bool,
    /// The checkpoint given is loading: a picture without `--generate` waits for it (loaded, or
    /// its error, which is the exit status's), not only for the first frames.
    loading: bool,
    screenshot: Option<PathBuf>,
    requested: bool,
    frames_after_done: u32,
    exit: bool,
    failure: Option<String>,
    result: AutoResult,
    t0: Option<web_time::Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Error,
}

/// The in-app file dialog: a path field and a directory browser.
#[derive(Debug, Clone)]
pub struct OpenDialog {
    pub path: String,
}

/// How often the Experiment view's folders are checked for a live process (and read again while
/// one trains there).
pub const EXPERIMENT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

pub struct VizApp {
    worker: Option<Worker>,
    pub model: Option<ModelInfo>,
    pub trace: TraceData,
    pub sel: Selection,
    pub chip_colour: ChipColour,
    pub prompt: String,
    pub sampling: SamplerConfig,
    pub max_tokens: usize,
    pub tab: Tab,
    pub metrics: Option<Metrics>,
    /// The curves shown are those of the checkpoint opened (its run's), not of a run opened as
    /// one (`--run`, Open…): the next checkpoint's replace them.
    metrics_of_checkpoint: bool,
    /// A checkpoint being loaded and its run's folder (if it has one): its curves replace those
    /// shown once it has loaded (one that fails to load leaves them, as it leaves the model).
    pending_curves: Option<(PathBuf, Option<PathBuf>)>,
    /// The tokens whose logit lens the model thread computes: the lens is the text's only while
    /// the text shown is still those tokens (a trace opened meanwhile is another text).
    lens_of: Option<Vec<u32>>,
    /// A comparison (*Generate both*) is running: its texts replace the text shown when done.
    comparing: bool,
    /// The runs of the Experiment view.
    pub experiment: Option<crate::experiment::Experiment>,
    /// When the Experiment view's folders were last checked for a live process (whether one
    /// trained there then is the experiment's `following`: one more reading after it ends).
    experiment_checked: Option<web_time::Instant>,
    pub messages: Vec<(Level, String)>,
    pub status: String,
    pub dialog: Option<OpenDialog>,
    /// The Interventions view: per-sublayer choices and the last comparison.
    pub interventions: panels::interventions::Interventions,
    /// What the token strip shows when it is not the model's last generation (a trace file, one
    /// side of a comparison), said above the tokens.
    pub shown: Option<String>,
    /// The seed field's text while it is edited (the seed itself is set when it reads as a u64).
    seed_text: Option<String>,
    session_prompt: Option<String>,
    /// When the running generation started and how many tokens it has produced.
    gen_started: Option<(web_time::Instant, usize)>,
    /// A trace file was opened over the running generation (which is stopped): its last tokens,
    /// still on their way, are not the text shown and are dropped until the next one starts.
    detached: bool,
    auto: Automation,
    /// What "Open…" does instead of the in-app path dialog (a browser's file picker).
    pub open_hook: Option<Box<dyn Fn()>>,
    /// Checkpoint bytes that arrived outside a frame (a browser's file picker, a download, a
    /// dropped file read asynchronously), opened at the next frame: (name, bytes or why not).
    incoming: Incoming,
    /// Where the central view was drawn last frame, in points (a browser test's screenshot
    /// looks inside it).
    pub central_rect: Option<egui::Rect>,
}

/// A queue of checkpoint bytes for [`VizApp`]: (name, the bytes of its `model.safetensors` or the
/// reason they could not be read).
pub type Incoming = Arc<Mutex<Vec<(String, Result<Vec<u8>, String>)>>>;

impl VizApp {
    /// An app with a model thread (repainting `ctx` on its events), opening what `opts` names.
    pub fn new(ctx: Option<egui::Context>, opts: Options) -> Self {
        let mut app = Self::without_worker();
        app.worker = Some(Worker::spawn(ctx));
        if let Some(p) = &opts.prompt {
            app.prompt = p.clone();
        }
        app.auto.generate = opts.generate;
        app.auto.intervene = opts.intervene.clone();
        app.auto.allow_out_of_range = opts.allow_out_of_range;
        app.auto.tab = opts.tab;
        app.auto.screenshot = opts.screenshot.clone();
        app.auto.exit = opts.exit_after_screenshot;
        app.auto.t0 = Some(web_time::Instant::now());
        if let Some(t) = opts.tab {
            app.tab = t;
        }
        if let Some(dir) = &opts.checkpoint {
            app.auto.loading = true;
            app.open_checkpoint(dir);
        }
        if let Some(dir) = &opts.run {
            app.open_run(dir);
            // A run alone (no checkpoint, trace or experiment to show): its dashboard.
            if opts.checkpoint.is_none() && opts.trace.is_none() && opts.experiment.is_empty() {
                app.tab = Tab::Training;
            }
        }
        // Every folder given as one experiment (a folder without runs is skipped, named).
        if !opts.experiment.is_empty() {
            match crate::experiment::Experiment::open_all(&opts.experiment) {
                Ok(e) => app.show_experiment(e),
                Err(e) => app.error(e),
            }
        }
        if let Some(f) = &opts.trace {
            app.open_trace(f);
            // A prompt given wins over the trace's.
            if let Some(p) = &opts.prompt {
                app.prompt = p.clone();
            }
        }
        // An explicit --tab wins over the view an opened experiment switched to.
        if let Some(t) = opts.tab {
            app.tab = t;
        }
        app
    }

    /// An app without a model thread (for showing traces, and tests).
    pub fn without_worker() -> Self {
        VizApp {
            worker: None,
            model: None,
            trace: TraceData::default(),
            sel: Selection::default(),
            chip_colour: ChipColour::default(),
            prompt: "First Citizen:".into(),
            sampling: SamplerConfig { temperature: 0.8, top_k: 40, top_p: 0.95, ..Default::default() },
            max_tokens: 64,
            tab: Tab::default(),
            metrics: None,
            metrics_of_checkpoint: false,
            pending_curves: None,
            lens_of: None,
            comparing: false,
            experiment: None,
            experiment_checked: None,
            messages: Vec::new(),
            status: String::new(),
            dialog: None,
            interventions: Default::default(),
            shown: None,
            seed_text: None,
            session_prompt: None,
            gen_started: None,
            detached: false,
            auto: Automation::default(),
            open_hook: None,
            incoming: Incoming::default(),
            central_rect: None,
        }
    }

    /// An app showing `trace` (no model).
    pub fn with_trace(trace: TraceData) -> Self {
        let mut a = Self::without_worker();
        a.trace = trace;
        a
    }

    /// The handle on which `main` learns how the automation ended.
    pub fn auto_result(&self) -> AutoResult {
        self.auto.result.clone()
    }

    pub fn error(&mut self, msg: impl Into<String>) {
        let msg = msg.into();
        if self.auto.screenshot.is_some() && self.auto.failure.is_none() {
            self.auto.failure = Some(msg.clone());
        }
        self.messages.push((Level::Error, msg));
    }

    pub fn busy(&self) -> bool {
        self.worker.as_ref().is_some_and(|w| w.busy())
    }

    fn send(&mut self, cmd: Command) {
        if let Some(w) = &self.worker {
            w.send(cmd);
        } else {
            self.error("no model thread in this view");
        }
    }

    /// Starts generating from the prompt.
    pub fn generate(&mut self) {
        if self.model.is_none() {
            self.error("open a checkpoint first (Open… or --checkpoint DIR)");
            return;
        }
        self.session_prompt = Some(self.prompt.clone());
        self.sel.token = None;
        self.send(Command::Generate {
            prompt: self.prompt.clone(),
            sampling: self.sampling.clone(),
            max_tokens: self.max_tokens,
        });
        self.status = "generating…".into();
    }

    /// Computes the logit lens of the text shown (on the model thread).
    pub fn compute_lens(&mut self) {
        if self.model.is_none() {
            self.error("open a checkpoint first (Open… or --checkpoint DIR)");
            return;
        }
        if let Some(why) = self.lens_mismatch() {
            self.error(why);
            return;
        }
        let tokens: Vec<u32> = self.trace.rows.iter().map(|r| r.trace.token).collect();
        // A trace file of `ddl generate --trace` holds the generated tokens, its prompt as text:
        // the lens reads them in the context generation gave them, the prompt first.
        let t = &self.trace;
        let prompt = t.prompt.clone().filter(|p| !p.is_empty() && t.rows.iter().all(|r| !r.prompt));
        self.lens_of = Some(tokens.clone());
        self.send(Command::Lens { prompt, tokens });
        self.status = "computing the logit lens…".into();
    }

    /// Why the lens of the text shown cannot be computed with the model loaded: a trace written
    /// by a model of another shape (its token ids need not be this model's).
    fn lens_mismatch(&self) -> Option<&'static str> {
        let (t, c) = (&self.trace, &self.model.as_ref()?.config);
        ((t.n_layers, t.d, t.m) != (c.n_layers, c.d_model, c.m())).then_some(
            "the text shown was written by another model than the one loaded: open that model's checkpoint, or \
             Generate with this one",
        )
    }

    /// One more token (a new session when the prompt changed).
    pub fn step_one(&mut self) {
        if self.model.is_none() {
            self.error("open a checkpoint first (Open… or --checkpoint DIR)");
            return;
        }
        let fresh = self.session_prompt.as_deref() != Some(self.prompt.as_str());
        self.session_prompt = Some(self.prompt.clone());
        self.send(Command::Step { prompt: self.prompt.clone(), sampling: self.sampling.clone(), fresh });
    }

    /// Generates the prompt's continuation without and with `specs` (the Interventions view).
    pub fn compare(&mut self, specs: Vec<String>) {
        if self.model.is_none() {
            self.error("open a checkpoint first (Open… or --checkpoint DIR)");
            return;
        }
        self.session_prompt = None;
        self.comparing = true;
        // (The flag goes with the specs as given: the view's own choices keep β in [0, 2].)
        let allow_out_of_range = self.interventions.allow_out_of_range && specs == self.interventions.given;
        self.send(Command::Compare {
            prompt: self.prompt.clone(),
            sampling: self.sampling.clone(),
            max_tokens: self.max_tokens,
            specs,
            allow_out_of_range,
        });
        self.status = "generating with and without the interventions…".into();
    }

    /// Shows one side of the last comparison (the intervened one if `intervened`) in every view.
    pub fn show_compared(&mut self, intervened: bool) {
        let (Some(c), Some(m)) = (&self.interventions.comparison, &self.model) else { return };
        let (prompt, generated) =
            if intervened { (&c.prompt_intervened, &c.intervened) } else { (&c.prompt, &c.original) };
        let mut t = TraceData::new(m.config.n_layers, m.config.d_model, m.config.m());
        prompt.iter().for_each(|r| t.push(r.clone(), true));
        generated.iter().for_each(|r| t.push(r.clone(), false));
        self.trace = t;
        self.sel = Selection::default();
        let side = if intervened { format!("intervened ({})", c.specs) } else { "original".into() };
        self.status = format!("showing the {side} continuation in every view");
        self.shown = Some(format!("the comparison's {side} continuation"));
    }

    pub fn stop(&mut self) {
        if let Some(w) = &self.worker {
            w.stop();
        }
    }

    /// Applies the model thread's events.
    pub fn poll(&mut self) {
        let Some(w) = &self.worker else { return };
        let events: Vec<Event> = w.rx.try_iter().collect();
        for e in events {
            match e {
                Event::Loading(d) => self.status = format!("loading {}…", d.display()),
                Event::Loaded(info) => {
                    // (First: the status line says what loaded, not the run's curves followed.)
                    self.show_checkpoint_curves(&info.dir);
                    let c = &info.config;
                    // A trace opened with --trace stays until the model generates (a model of
                    // another shape says so); otherwise the model starts with an empty one.
                    let t = &self.trace;
                    let keep = !t.is_empty() && self.auto.generate.is_none();
                    if keep && (t.n_layers, t.d, t.m) != (c.n_layers, c.d_model, c.m()) {
                        self.messages.push((
                            Level::Info,
                            format!(
                                "the trace shown was written by another model ({}, d = {}, d_v = {}) than {} \
                                 ({}, d = {}, d_v = {}); generating replaces it",
                                ddl::plural(t.n_layers, "block"),
                                t.d,
                                t.m,
                                info.dir.display(),
                                ddl::plural(c.n_layers, "block"),
                                c.d_model,
                                c.m()
                            ),
                        ));
                    }
                    if !keep {
                        self.trace = TraceData::new(c.n_layers, c.d_model, c.m());
                        self.sel = Selection::default();
                        self.shown = None;
                    }
                    self.session_prompt = None;
                    self.status = if keep {
                        format!("loaded {} (step {}); showing the trace opened", info.dir.display(), info.step)
                    } else {
                        format!("loaded {} (step {})", info.dir.display(), info.step)
                    };
                    if !c.variant.is_ddl() {
                        self.messages.push((
                            Level::Info,
                            format!(
                                "{} is a {} model: it has no delta writes, so only the text is shown",
                                info.dir.display(),
                                c.variant
                            ),
                        ));
                    }
                    self.model = Some(info);
                    self.auto.loading = false;
                    if let (Some(_), false) = (self.auto.generate, self.auto.started) {
                        self.auto.started = true;
                        self.max_tokens = self.auto.generate.unwrap_or(self.max_tokens);
                        if self.auto.intervene.is_empty() {
                            self.generate();
                        } else {
                            let specs = self.auto.intervene.clone();
                            let allow = self.auto.allow_out_of_range;
                            self.interventions.show_specs(
                                &specs,
                                2 * self.model.as_ref().unwrap().config.n_layers,
                                allow,
                            );
                            self.tab = self.auto.tab.unwrap_or(Tab::Interventions);
                            // (As the view lists them: the same order on both lines.)
                            self.compare(self.interventions.specs());
                        }
                    }
                }
                Event::Started { prompt } => {
                    self.detached = false;
                    self.gen_started = Some((web_time::Instant::now(), 0));
                    self.shown = None;
                    self.trace.clear();
                    for t in prompt {
                        self.trace.push(t, true);
                    }
                }
                Event::Token(_) if self.detached => {}
                Event::Token(s) => {
                    let tr = s.trace.unwrap_or(TokenTrace { token: s.token, text: s.piece, ..Default::default() });
                    self.trace.push(tr, false);
                    let (t0, n) = self.gen_started.get_or_insert((web_time::Instant::now(), 0));
                    *n += 1;
                    let rate = *n as f64 / t0.elapsed().as_secs_f64().max(1e-3);
                    self.status = format!("generating… {}, {rate:.1} tokens/s", ddl::plural(*n, "token"));
                }
                Event::Progress(p) => self.status = p,
                Event::Note(n) => self.messages.push((Level::Info, n)),
                Event::Lens(l) => {
                    // (The lens of a text no longer shown is dropped: the button offers this one's.)
                    let of = self.lens_of.take();
                    if of.is_some_and(|of| of.iter().eq(self.trace.rows.iter().map(|r| &r.trace.token))) {
                        self.trace.lens = Some(l);
                        self.status = "logit lens computed".into();
                    }
                }
                Event::Compared(c) => {
                    self.interventions.comparison = Some(c);
                    // `--intervene … --tab beta` (any view but Interventions): the intervened
                    // continuation in that view, as *show in the other views* does.
                    // (Only the comparison the command line asked for, not later ones.)
                    // Otherwise the original continuation, so that the token strip and the other
                    // views show what was compared rather than nothing or an older text.
                    // (Not over a trace file opened meanwhile: the view keeps the comparison.)
                    let auto_tab =
                        self.auto.started && !self.auto.done && self.auto.tab.is_some_and(|t| t != Tab::Interventions);
                    if !self.detached {
                        self.show_compared(auto_tab);
                    }
                }
                Event::Done { reason } => {
                    self.gen_started = None;
                    self.comparing = false;
                    self.status = if std::mem::take(&mut self.detached) {
                        format!("{reason}: showing the trace opened ({})", ddl::plural(self.trace.len(), "token"))
                    } else if reason.starts_with("compared") {
                        format!("done: {reason} with and without the interventions")
                    } else if reason == crate::worker::COMPARISON_STOPPED {
                        reason.clone()
                    } else {
                        format!("done: {reason}; the text has {}", ddl::plural(self.trace.len(), "token"))
                    };
                    if self.auto.started {
                        // `--tab lens`: the text's lens once it is generated, then the picture.
                        let lens = self.auto.tab == Some(Tab::Lens) && !reason.starts_with("lens") && reason != "error";
                        if lens && self.trace.len() >= 2 && self.trace.lens.is_none() {
                            self.compute_lens();
                        } else {
                            self.auto.done = true;
                        }
                    }
                }
                Event::Error(e) => {
                    self.status = "error".into();
                    self.auto.loading = false;
                    self.error(e);
                    if self.auto.screenshot.is_some() {
                        self.auto.done = true;
                    }
                }
            }
        }
    }

    fn automation(&mut self, ctx: &egui::Context) {
        let Some(path) = self.auto.screenshot.clone() else { return };
        // No tooltips in pictures: the pointer of a virtual display rests in the window.
        ctx.all_styles_mut(|s| s.interaction.tooltip_delay = 1.0e9);
        let timed_out = self.auto.t0.is_some_and(|t| t.elapsed().as_secs() > 300);
        if timed_out && self.auto.failure.is_none() {
            let what = if self.auto.loading { "the checkpoint to load" } else { "generation" };
            self.auto.failure = Some(format!("timed out waiting for {what}"));
        }
        let ready = self.auto.done
            || timed_out
            || (self.auto.generate.is_none() && self.auto.t0.is_some() && !self.auto.loading);
        if !ready || self.auto.requested {
            if self.auto.requested && self.auto.exit && self.auto.result.lock().unwrap().is_some() {
                ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            }
            return;
        }
        // Let the last tokens lay out before the picture.
        self.auto.frames_after_done += 1;
        if self.auto.frames_after_done < 5 {
            ctx.request_repaint();
            return;
        }
        self.auto.requested = true;
        let result = self.auto.result.clone();
        let failure = self.auto.failure.clone();
        let c2 = ctx.clone();
        ctx.request_screenshot(move |img| {
            let r = save_png(&img, &path).and(match failure {
                Some(f) => Err(f),
                None => Ok(()),
            });
            *result.lock().unwrap() = Some(r);
            c2.request_repaint();
        });
    }
}

struct Kind {
    checkpoint: bool,
    run: bool,
    trace: bool,
    /// An experiment folder (`runs/`) or a folder holding run folders, or a run.
    experiment: bool,
}

fn classify(p: &Path) -> Kind {
    let is_trace = p.is_file()
        && p.extension().is_some_and(|e| e == "safetensors")
        && !p
            .file_name()
            .is_some_and(|n| n == ddl::train::checkpoint::MODEL_FILE || n == ddl::train::checkpoint::OPTIM_FILE);
    Kind {
        checkpoint: p.join(ddl::train::checkpoint::MODEL_FILE).is_file(),
        run: p.join("metrics.jsonl").is_file(),
        trace: is_trace,
        experiment: crate::experiment::is_run(p)
            || p.join("runs").is_dir()
            || std::fs::read_dir(p).is_ok_and(|rd| rd.flatten().any(|e| crate::experiment::is_run(&e.path()))),
    }
}

/// Writes a screenshot as PNG, atomically (a failed write leaves what was there).
pub fn save_png(img: &egui::ColorImage, path: &Path) -> Result<(), String> {
    let [w, h] = img.size;
    let mut buf = Vec::with_capacity(w * h * 4);
    for c in &img.pixels {
        buf.extend_from_slice(&c.to_srgba_unmultiplied());
    }
    let im = image::RgbaImage::from_raw(w as u32, h as u32, buf).ok_or("screenshot has the wrong size")?;
    let err = |e: &dyn std::fmt::Display| format!("cannot write the screenshot {}: {e}", path.display());
    let mut png = std::io::Cursor::new(Vec::new());
    im.write_to(&mut png, image::ImageFormat::Png).map_err(|e| err(&e))?;
    ddl::train::checkpoint::write_atomic(path, png.get_ref()).map_err(|e| err(&e))
}

/// Why `--screenshot PATH` cannot be written, checked before the window opens: a name without
/// `.png`, a missing folder, or an existing file that is not a PNG image (only an earlier
/// screenshot is replaced).
pub fn check_screenshot_path(path: &Path) -> Result<(), String> {
    let png = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if !png {
        return Err(format!(
            "--screenshot {}: the screenshot is a PNG image; give a name ending in .png",
            path.display()
        ));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        let what = if dir.exists() { "is a file, not a folder" } else { "does not exist" };
        return Err(format!(
            "--screenshot {}: {} {what}; create the folder first, or name a .png in an existing one",
            path.display(),
            dir.display()
        ));
    }
    if path.is_dir() {
        return Err(format!("--screenshot {}: a folder; give a file name ending in .png", path.display()));
    }
    // The folder takes a file (a read-only one would fail only after generating).
    let probe = dir.join(format!(".ddl-viz-write-test-{}", std::process::id()));
    match std::fs::write(&probe, b"") {
        Ok(()) => {
            let _ = std::fs::remove_file(&probe);
        }
        Err(e) => {
            return Err(format!("--screenshot {}: cannot write in {}: {e}", path.display(), dir.display()));
        }
    }
    if path.exists() {
        let mut head = [0u8; 8];
        let is_png = std::fs::File::open(path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
            .is_ok_and(|()| head == *b"\x89PNG\r\n\x1a\n");
        if !is_png {
            return Err(format!(
                "--screenshot {}: the file exists and is not a PNG image (a screenshot replaces only an earlier \
                 one); choose another name or remove it",
                path.display()
            ));
        }
    }
    Ok(())
}

impl eframe::App for VizApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.ui_root(ui);
    }

    /// Until a `--screenshot` is saved, the pointer is not the window's: a virtual display's
    /// pointer rests where the window happens to lie (on a small screen, over a plot, whose hover
    /// line and highlight would be in the picture). After it, input is as usual.
    fn raw_input_hook(&mut self, _ctx: &egui::Context, raw_input: &mut egui::RawInput) {
        if self.auto.screenshot.is_some() && self.auto.result.lock().unwrap().is_none() {
            raw_input.events.retain(|e| {
                !matches!(
                    e,
                    egui::Event::PointerMoved(_)
                        | egui::Event::MouseMoved(_)
                        | egui::Event::PointerButton { .. }
                        | egui::Event::MouseWheel { .. }
                )
            });
        }
    }
}
