//! `ddl-web`: the visualizer (`ddl-viz`) in a browser. The engine runs on the page's WebGPU
//! device (wasm32, `ddl` built with `--no-default-features --features web`), the UI is eframe's
//! web runner drawing into a canvas. `make web` builds the static site (`target/web/`): this
//! crate compiled to wasm, its JavaScript glue from `wasm-bindgen`, `static/index.html` and a
//! demo checkpoint. The page's script talks to [`Page`]; the browser test calls
//! [`teacher_forced_logits`] to compare the browser's numbers with the native engine's.
//!
//! Natively this crate is empty.
#![cfg(target_arch = "wasm32")]

use std::cell::RefCell;
use std::rc::Rc;

use ddl_viz::app::{Incoming, Options, Tab, VizApp};
use eframe::egui;
use wasm_bindgen::prelude::*;

/// What the page's script asked for, applied at the next frame.
enum Request {
    Generate { prompt: String, tokens: usize },
    Compare { prompt: String, tokens: usize, specs: Vec<String> },
    Show(Tab),
}

/// Shared between the page's handle and the running app.
#[derive(Default)]
struct Shared {
    requests: Vec<Request>,
    /// The app's state as JSON, refreshed every frame ([`Page::state`]).
    state: String,
    ctx: Option<egui::Context>,
    /// How many of the page's requests a frame has handled (the state's `handled`): a caller
    /// waits for it to pass its own request before reading the state as that request's outcome.
    handled: u64,
    /// How many requests the page has made (what [`Page::generate`] and the like return).
    submitted: u64,
}

/// The page's handle on the visualizer.
#[wasm_bindgen]
pub struct Page {
    runner: eframe::WebRunner,
    incoming: Rc<RefCell<Option<Incoming>>>,
    shared: Rc<RefCell<Shared>>,
}

#[wasm_bindgen]
impl Page {
    #[wasm_bindgen(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Page {
        // eframe's and wgpu's warnings to the browser console.
        let _ = eframe::WebLogger::init(log::LevelFilter::Warn);
        Page {
            runner: eframe::WebRunner::new(),
            incoming: Rc::new(RefCell::new(None)),
            shared: Rc::new(RefCell::new(Shared::default())),
        }
    }

    /// Starts the visualizer in `canvas`; its "Open…" button calls `on_open` (the page's file
    /// picker).
    pub async fn start(&self, canvas: web_sys::HtmlCanvasElement, on_open: js_sys::Function) -> Result<(), JsValue> {
        let (incoming, shared) = (self.incoming.clone(), self.shared.clone());
        self.runner
            .start(
                canvas,
                // The UI through WebGL 2 (every browser, and headless ones composite it); the
                // engine on WebGPU either way.
                eframe::WebOptions { renderer: eframe::Renderer::Glow, ..Default::default() },
                Box::new(move |cc| {
                    let mut app = VizApp::new(Some(cc.egui_ctx.clone()), Options::default());
                    app.open_hook = Some(Box::new(move || {
                        let _ = on_open.call0(&JsValue::NULL);
                    }));
                    *incoming.borrow_mut() = Some(app.incoming());
                    shared.borrow_mut().ctx = Some(cc.egui_ctx.clone());
                    Ok(Box::new(WebApp { app, shared }))
                }),
            )
            .await
    }

    /// Opens a checkpoint from the bytes of its `model.safetensors`; `name` names it in messages.
    pub fn open(&self, name: String, bytes: Vec<u8>) {
        self.push(name, Ok(bytes));
    }

    /// Reports that the checkpoint `name` could not be had (a failed download), in the page.
    pub fn fail(&self, name: String, why: String) {
        self.push(name, Err(why));
    }

    /// Generates `tokens` tokens from `prompt` (as typing the prompt and pressing Generate does).
    /// Returns the request's number: the state's `handled` reaches it in the frame that starts it.
    pub fn generate(&self, prompt: String, tokens: usize) -> f64 {
        self.request(Request::Generate { prompt, tokens })
    }

    /// Generates `tokens` tokens from `prompt` without and with the interventions `specs`
    /// (`block0.attn:beta=0`, `block1.mlp:k=mean`, … as `ddl generate --intervene` takes them) and
    /// shows the Interventions view, as its Compare button does.
    /// Returns the request's number, as [`Page::generate`] does.
    pub fn compare(&self, prompt: String, tokens: usize, specs: Vec<String>) -> f64 {
        self.request(Request::Compare { prompt, tokens, specs })
    }

    /// Shows the view named `tab` (its title: "β map", "Eigenvalue regimes", "k directions",
    /// "Write strength", "Interventions", …); an unknown name is an error naming the views.
    pub fn show(&self, tab: String) -> Result<f64, JsValue> {
        let t = Tab::ALL.into_iter().find(|t| t.name() == tab).ok_or_else(|| {
            let names: Vec<&str> = Tab::ALL.iter().map(|t| t.name()).collect();
            JsValue::from_str(&format!("no view named {tab:?} (the views: {})", names.join(", ")))
        })?;
        Ok(self.request(Request::Show(t)))
    }

    fn request(&self, r: Request) -> f64 {
        let n = {
            let mut s = self.shared.borrow_mut();
            s.requests.push(r);
            s.submitted += 1;
            s.submitted
        };
        self.repaint();
        n as f64
    }

    /// The app's state as JSON: the loaded model, the tokens shown, whether the model is busy,
    /// the status line, the error messages, the central view's rectangle in CSS pixels, the view
    /// shown and the last comparison of the Interventions view.
    pub fn state(&self) -> String {
        self.shared.borrow().state.clone()
    }

    /// Whether the app panicked (the page then shows the message eframe logged).
    pub fn has_panicked(&self) -> bool {
        self.runner.has_panicked()
    }

    fn push(&self, name: String, r: Result<Vec<u8>, String>) {
        match self.incoming.borrow().as_ref() {
            Some(q) => q.lock().unwrap().push((name, r)),
            None => web_sys::console::error_1(&"ddl: open() before start() finished".into()),
        }
        self.repaint();
    }

    fn repaint(&self) {
        if let Some(c) = &self.shared.borrow().ctx {
            c.request_repaint();
        }
    }
}

/// The visualizer with the page's requests and state.
struct WebApp {
    app: VizApp,
    shared: Rc<RefCell<Shared>>,
}

impl eframe::App for WebApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        let requests = std::mem::take(&mut self.shared.borrow_mut().requests);
        self.shared.borrow_mut().handled += requests.len() as u64;
        for r in requests {
            match r {
                Request::Generate { prompt, tokens } => {
                    self.app.prompt = prompt;
                    self.app.max_tokens = tokens;
                    self.app.generate();
                }
                Request::Compare { prompt, tokens, specs } => {
                    self.app.prompt = prompt;
                    self.app.max_tokens = tokens;
                    self.app.tab = Tab::Interventions;
                    self.app.compare(specs);
                }
                Request::Show(t) => self.app.tab = t,
            }
        }
        self.app.ui_root(ui);
        let a = &self.app;
        let rect = a.central_rect.map(|r| [r.min.x, r.min.y, r.max.x, r.max.y]);
        let state = serde_json::json!({
            "model": a.model.as_ref().map(|m| serde_json::json!({
                "name": m.dir.display().to_string(),
                "variant": m.config.variant.to_string(),
                "step": m.step,
                "adapter": m.adapter,
            })),
            "tokens": a.trace.len(),
            "text": a.trace.rows.iter().map(|r| r.trace.text.as_str()).collect::<String>(),
            "generated": a.trace.rows.iter().filter(|r| !r.prompt).count(),
            "busy": a.busy(),
            "status": a.status,
            "errors": a.messages.iter().filter(|(l, _)| *l == ddl_viz::app::Level::Error).map(|(_, m)| m.clone()).collect::<Vec<_>>(),
            "central": rect,
            "tab": a.tab.name(),
            "comparison": a.interventions.comparison.as_ref().map(|c| serde_json::json!({
                "specs": c.specs,
                "original": c.original.iter().map(|t| t.token).collect::<Vec<_>>(),
                "intervened": c.intervened.iter().map(|t| t.token).collect::<Vec<_>>(),
                "delta_logprob": c.delta_logprob,
            })),
            "pixels_per_point": ui.ctx().pixels_per_point(),
            "frame": ui.ctx().cumulative_pass_nr(),
            "handled": self.shared.borrow().handled,
        });
        self.shared.borrow_mut().state = state.to_string();
    }
}

/// The logits `[T, V]` (row-major) of `tokens` read teacher-forced by the checkpoint `bytes` (its
/// `model.safetensors`) on the browser's WebGPU device: one batched forward through the decode
/// path the visualizer generates with. The browser test compares them with the native engine's.
#[wasm_bindgen]
pub async fn teacher_forced_logits(bytes: Vec<u8>, tokens: Vec<u32>) -> Result<Vec<f32>, JsValue> {
    let err = |e: &dyn std::fmt::Display| JsValue::from_str(&e.to_string());
    let gpu = ddl::gpu::Gpu::browser().await.map_err(|e| err(&e))?;
    let (model, _, _) =
        ddl::generate::load_for_inference_from_bytes(&gpu, "checkpoint", &bytes).map_err(|e| err(&e))?;
    let mut cache = model.decode_cache().map_err(|e| err(&e))?;
    let mut p = model.decode_program(&cache, tokens.len()).map_err(|e| err(&e))?;
    let logits = p.forward_async(&model, &tokens, &mut cache).await.map_err(|e| err(&e))?;
    // Errors the browser reports asynchronously (pipeline validation): give them a moment.
    sleep_ms(200).await;
    gpu.check().map_err(|e| err(&e))?;
    Ok(logits)
}

/// Every shader variant of the engine through the browser's own WGSL compiler (Chrome's Tint,
/// …), and with `pipelines` every entry point that fits the browser's limits built:
/// [`ddl::gpu::Gpu::compile_every_shader`] on the page's WebGPU device. Returns its report as
/// JSON (`modules`, `pipelines`, `skipped`, `errors`, `warnings`, `adapter`).
#[wasm_bindgen]
pub async fn compile_every_shader(pipelines: bool) -> Result<String, JsValue> {
    let gpu = ddl::gpu::Gpu::browser().await.map_err(|e| JsValue::from_str(&e.to_string()))?;
    let r = gpu.compile_every_shader(pipelines).await;
    let mut v = serde_json::to_value(&r).map_err(|e| JsValue::from_str(&e.to_string()))?;
    v["features"] = format!("{:?}", gpu.features).into();
    Ok(v.to_string())
}

/// The checkpoint the speed benchmark generates with, loaded once by [`speed_open`].
struct SpeedModel {
    gpu: std::sync::Arc<ddl::gpu::Gpu>,
    model: ddl::model::Model,
    tok: ddl::tokenizer::Tokenizer,
}

thread_local! {
    static SPEED: RefCell<Option<Rc<SpeedModel>>> = const { RefCell::new(None) };
}

/// Loads the checkpoint `bytes` on the browser's WebGPU device for [`speed_run`] (the
/// browser-vs-native generation benchmark, `make bench-web`); returns the adapter's name.
#[wasm_bindgen]
pub async fn speed_open(bytes: Vec<u8>) -> Result<String, JsValue> {
    let err = |e: &dyn std::fmt::Display| JsValue::from_str(&e.to_string());
    let gpu = ddl::gpu::Gpu::browser().await.map_err(|e| err(&e))?;
    let (model, tok, _) =
        ddl::generate::load_for_inference_from_bytes(&gpu, "checkpoint", &bytes).map_err(|e| err(&e))?;
    let i = gpu.adapter.get_info();
    let adapter = format!("{} ({:?}, {})", i.name, i.backend, i.driver);
    SPEED.with(|s| *s.borrow_mut() = Some(Rc::new(SpeedModel { gpu, model, tok })));
    Ok(adapter)
}

/// One timed generation of `tokens` tokens after `prompt` with the model of [`speed_open`]:
/// [`ddl::generate::timed_generation`], the procedure the native side runs, timed by
/// `performance.now()`. Returns JSON `{"ms": …, "tokens": […]}`.
#[wasm_bindgen]
pub async fn speed_run(prompt: Vec<u32>, tokens: usize, trace: bool) -> Result<String, JsValue> {
    let err = |e: &dyn std::fmt::Display| JsValue::from_str(&e.to_string());
    let m = SPEED.with(|s| s.borrow().clone()).ok_or_else(|| JsValue::from_str("speed_run before speed_open"))?;
    let perf =
        web_sys::window().and_then(|w| w.performance()).ok_or_else(|| JsValue::from_str("no performance clock"))?;
    let clock = move || perf.now();
    let (out, ms) =
        ddl::generate::timed_generation(&m.model, &m.tok, &prompt, tokens, trace, ddl::gpu::Wait::Await, &clock)
            .await
            .map_err(|e| err(&e))?;
    m.gpu.check().map_err(|e| err(&e))?;
    Ok(serde_json::json!({ "ms": ms, "tokens": out }).to_string())
}

/// Resolves after `ms` milliseconds (the page's timer).
async fn sleep_ms(ms: i32) {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(p).await;
}
