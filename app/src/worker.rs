//! The model worker: the GPU device, the model and the generation session live here; the UI
//! talks to it through channels and never waits on the GPU. On the desktop it is a thread whose
//! device reads block; in a browser, an async task on the page's event loop whose device reads
//! are awaited — one code path ([`run`]), told which by a [`Wait`].

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};

use ddl::generate::{GenStep, Generator, Sampler, SamplerConfig, TokenTrace};
use ddl::gpu::Wait;
use ddl::model::ModelConfig;
use eframe::egui;

/// What the UI asks of the model thread.
#[derive(Debug, Clone)]
pub enum Command {
    /// Load a checkpoint directory.
    Load(PathBuf),
    /// Load a checkpoint from the bytes of its `model.safetensors` (a file opened or dropped in a
    /// browser, or downloaded); `name` names it in messages.
    LoadBytes { name: String, bytes: Arc<Vec<u8>> },
    /// Start from `prompt` (prefill) and generate up to `max_tokens` tokens (until Stop).
    Generate { prompt: String, sampling: SamplerConfig, max_tokens: usize },
    /// One more token of the current session, or a new session from `prompt` and its first token.
    Step { prompt: String, sampling: SamplerConfig, fresh: bool },
    /// Generate `prompt`'s continuation without and with the interventions `specs` (same
    /// sampler seed) and measure the change (the Interventions view).
    /// (`allow_out_of_range`: β may leave [0, 2], as `ddl generate --allow-out-of-range`.)
    Compare { prompt: String, sampling: SamplerConfig, max_tokens: usize, specs: Vec<String>, allow_out_of_range: bool },
    /// The logit lens of these tokens (the text shown), teacher-forced from the first, or after
    /// `prompt` when the text continues one that is not shown (a trace file's).
    Lens { prompt: Option<String>, tokens: Vec<u32> },
}

/// A loaded model.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub dir: PathBuf,
    pub config: ModelConfig,
    pub step: usize,
    pub vocab: usize,
    pub adapter: String,
}

/// What the model thread reports.
#[derive(Debug, Clone)]
pub enum Event {
    /// Loading the checkpoint at this path (or of this name).
    Loading(PathBuf),
    Loaded(ModelInfo),
    /// A new session started: the prompt's tokens with their traces.
    Started {
        prompt: Vec<TokenTrace>,
    },
    Token(GenStep),
    /// How far a longer piece of work (a comparison) has come, for the status line.
    Progress(String),
    /// Something the user should know (a note under the views), e.g. a prompt cut to the context.
    Note(String),
    /// A comparison finished.
    Compared(crate::panels::interventions::Comparison),
    /// A logit lens finished.
    Lens(crate::trace::Lens),
    /// Generation ended (max tokens, stopped, end of text).
    Done {
        reason: String,
    },
    Error(String),
}

/// The UI's handle on the model thread.
pub struct Worker {
    tx: Option<Outbox>,
    #[cfg(not(target_arch = "wasm32"))]
    thread: Option<std::thread::JoinHandle<()>>,
    pub rx: Receiver<Event>,
    stop: Arc<AtomicBool>,
    busy: Arc<AtomicBool>,
}

impl Worker {
    /// Starts the thread; `ctx` (when given) is repainted whenever an event is sent.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn spawn(ctx: Option<egui::Context>) -> Worker {
        let (tx, crx) = channel();
        let (etx, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let busy = Arc::new(AtomicBool::new(false));
        let (s, b) = (stop.clone(), busy.clone());
        let thread = std::thread::Builder::new()
            .name("ddl-model".into())
            .spawn(move || {
                let out = Out { tx: etx, ctx };
                let mut inbox = Inbox(crx);
                // Blocking reads never leave the future pending: run it to its end here. A crash
                // (a bug) loses the model, not the thread: the commands after it are served
                // (they went nowhere, so a reload did nothing and the status said loading).
                loop {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        ddl::gpu::now(run(&mut inbox, &out, &s, &b, Wait::Block))
                    }));
                    b.store(false, Ordering::SeqCst);
                    if r.is_ok() {
                        break;
                    }
                    out.send(Event::Error(
                        "the model thread crashed (see stderr) and lost the model: open the checkpoint again".into(),
                    ));
                }
            })
            .expect("spawning the model thread");
        Worker { tx: Some(Outbox(tx)), thread: Some(thread), rx, stop, busy }
    }

    /// Starts the model task on the page's event loop (a browser has one thread); `ctx` is
    /// repainted whenever an event is sent.
    #[cfg(target_arch = "wasm32")]
    pub fn spawn(ctx: Option<egui::Context>) -> Worker {
        let mailbox = std::rc::Rc::new(std::cell::RefCell::new(Mailbox::default()));
        let (etx, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let busy = Arc::new(AtomicBool::new(false));
        let (s, b) = (stop.clone(), busy.clone());
        let mut inbox = Inbox(mailbox.clone());
        wasm_bindgen_futures::spawn_local(async move {
            let out = Out { tx: etx, ctx };
            run(&mut inbox, &out, &s, &b, Wait::Await).await;
            b.store(false, Ordering::SeqCst);
        });
        Worker { tx: Some(Outbox(mailbox)), rx, stop, busy }
    }

    pub fn send(&self, cmd: Command) {
        match cmd {
            // A new checkpoint ends a running generation first.
            Command::Load(_) | Command::LoadBytes { .. } => self.stop.store(true, Ordering::SeqCst),
            Command::Generate { .. } | Command::Step { .. } | Command::Compare { .. } | Command::Lens { .. } => {
                self.stop.store(false, Ordering::SeqCst)
            }
        }
        self.busy.store(true, Ordering::SeqCst);
        if self.tx.as_ref().is_none_or(|tx| !tx.send(cmd)) {
            self.busy.store(false, Ordering::SeqCst);
        }
    }

    /// Asks a running generation to stop after the current token.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Whether the thread is loading or generating.
    pub fn busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst)
    }
}

impl Drop for Worker {
    /// Stops a generation, closes the channel and waits for the thread to release the GPU (so
    /// the device is not torn down by the process exit under a running thread).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(tx) = self.tx.take() {
            tx.close();
        }
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Out {
    tx: Sender<Event>,
    ctx: Option<egui::Context>,
}

/// How often streamed events (tokens, progress) redraw the window at most. A redraw per token
/// would starve the model where the page is drawn in software (the browser's SwiftShader shares
/// the CPU and the GPU queue with the model: 0.46 tok/s with a redraw per token and a spinner);
/// ten a second reads as live.
pub const STREAM_REPAINT: std::time::Duration = std::time::Duration::from_millis(100);

impl Out {
    fn send(&self, e: Event) {
        let streamed = matches!(e, Event::Token(_) | Event::Progress(_));
        let _ = self.tx.send(e);
        if let Some(c) = &self.ctx {
            if streamed {
                // Coalesced: egui keeps the earliest pending request, so a burst draws once.
                c.request_repaint_after(STREAM_REPAINT);
            } else {
                c.request_repaint();
            }
        }
    }
}

/// The UI's end of the command channel.
#[cfg(not(target_arch = "wasm32"))]
struct Outbox(Sender<Command>);
/// The worker's end of the command channel.
#[cfg(not(target_arch = "wasm32"))]
struct Inbox(Receiver<Command>);

#[cfg(not(target_arch = "wasm32"))]
impl Outbox {
    fn send(&self, cmd: Command) -> bool {
        self.0.send(cmd).is_ok()
    }
    fn close(self) {}
}

#[cfg(not(target_arch = "wasm32"))]
impl Inbox {
    /// The next command (blocking the thread); `None` once the UI is gone.
    async fn recv(&mut self) -> Option<Command> {
        self.0.recv().ok()
    }
}

/// A browser's command queue: the page's one thread sends and the model task awaits.
#[cfg(target_arch = "wasm32")]
#[derive(Default)]
struct Mailbox {
    queue: std::collections::VecDeque<Command>,
    waker: Option<std::task::Waker>,
    closed: bool,
}
#[cfg(target_arch = "wasm32")]
struct Outbox(std::rc::Rc<std::cell::RefCell<Mailbox>>);
#[cfg(target_arch = "wasm32")]
struct Inbox(std::rc::Rc<std::cell::RefCell<Mailbox>>);

#[cfg(target_arch = "wasm32")]
impl Outbox {
    fn send(&self, cmd: Command) -> bool {
        let mut m = self.0.borrow_mut();
        m.queue.push_back(cmd);
        if let Some(w) = m.waker.take() {
            w.wake();
        }
        !m.closed
    }
    fn close(self) {
        let mut m = self.0.borrow_mut();
        m.closed = true;
        if let Some(w) = m.waker.take() {
            w.wake();
        }
    }
}

#[cfg(target_arch = "wasm32")]
impl Inbox {
    /// The next command (awaited); `None` once the UI is gone.
    async fn recv(&mut self) -> Option<Command> {
        std::future::poll_fn(|cx| {
            let mut m = self.0.borrow_mut();
            if let Some(c) = m.queue.pop_front() {
                return std::task::Poll::Ready(Some(c));
            }
            if m.closed {
                return std::task::Poll::Ready(None);
            }
            m.waker = Some(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await
    }
}

/// The device for the model: the adapter `DDL_BACKEND`/`DDL_ADAPTER` choose on the desktop, the
/// browser's WebGPU adapter on the web.
async fn open_gpu() -> Result<Arc<ddl::gpu::Gpu>, String> {
    #[cfg(not(target_arch = "wasm32"))]
    let g = ddl::gpu::GpuOptions::from_env()
        .map_err(|e| e.to_string())
        .and_then(|o| ddl::gpu::Gpu::new(&o).map_err(|e| format!("no GPU adapter for the model could be opened: {e}")));
    #[cfg(target_arch = "wasm32")]
    let g = ddl::gpu::Gpu::browser().await.map_err(|e| format!("no WebGPU adapter for the model could be opened: {e}"));
    g
}

/// What to load: a checkpoint directory or the bytes of a `model.safetensors`.
enum Source {
    Dir(PathBuf),
    Bytes { name: String, bytes: Arc<Vec<u8>> },
}

impl Source {
    fn path(&self) -> PathBuf {
        match self {
            Source::Dir(d) => d.clone(),
            Source::Bytes { name, .. } => PathBuf::from(name),
        }
    }

    fn load(&self, g: &Arc<ddl::gpu::Gpu>) -> Result<(ddl::model::Model, ddl::tokenizer::Tokenizer, usize), String> {
        match self {
            Source::Dir(dir) => ddl::train::checkpoint::load(dir, false)
                .map_err(|e| {
                    use ddl::train::checkpoint::CheckpointError;
                    // A model file that does not read: the run's kept checkpoint that reads, where
                    // it has one, as `ddl generate` names it; else what to do (it said what was
                    // wrong and nothing more).
                    // (Native only: a browser opens no folders.)
                    #[cfg(not(target_arch = "wasm32"))]
                    let e = ddl::train::checkpoint::with_kept_for_reading(dir, "--checkpoint", e);
                    let kept = e.to_string().contains(") reads: give --checkpoint");
                    // An experiment folder given as a checkpoint: say where it goes.
                    let hint = if dir.join("runs").is_dir() || dir.join("experiment.toml").is_file() {
                        format!(" ({})", crate::experiment::experiment_as_checkpoint(dir))
                    } else if matches!(e, CheckpointError::Corrupt { .. }) && !kept {
                        "; the file is damaged: copy the checkpoint again from where it came from, or open another \
                         (Open…, or --checkpoint DIR)"
                            .to_string()
                    } else {
                        String::new()
                    };
                    format!("{e}{hint}")
                })
                .and_then(|ck| {
                    let m = ddl::model::Model::with_params(g.clone(), ck.config.clone(), &ck.params);
                    m.map(|m| (m, ck.tokenizer, ck.step)).map_err(|e| e.to_string())
                }),
            Source::Bytes { name, bytes } => {
                ddl::generate::load_for_inference_from_bytes(g, name, bytes).map_err(|e| format!("{e:#}"))
            }
        }
    }
}

/// A checkpoint the worker has open.
struct Open {
    model: ddl::model::Model,
    tok: ddl::tokenizer::Tokenizer,
    name: PathBuf,
}

async fn run(rx: &mut Inbox, out: &Out, stop: &AtomicBool, busy: &AtomicBool, wait: Wait) {
    let mut gpu = None;
    let mut open: Option<Open> = None;
    let mut next_load: Option<Source> = None;
    loop {
        if let Some(src) = next_load.take() {
            // A checkpoint that cannot be opened leaves the one open before it open.
            match load(src, &mut gpu, out).await {
                Ok(o) => open = Some(o),
                Err(e) => {
                    let kept = match &open {
                        Some(o) => format!("; {} stays open", o.name.display()),
                        None => String::new(),
                    };
                    out.send(Event::Error(format!("{e}{kept}")));
                }
            }
            busy.store(false, Ordering::SeqCst);
        }
        let Some(o) = &open else {
            match rx.recv().await {
                Some(Command::Load(d)) => next_load = Some(Source::Dir(d)),
                Some(Command::LoadBytes { name, bytes }) => next_load = Some(Source::Bytes { name, bytes }),
                Some(_cmd) => {
                    #[cfg(test)]
                    if matches!(&_cmd, Command::Generate { prompt, .. } if prompt == tests::CRASH) {
                        panic!("the crash a test asked for");
                    }
                    out.send(Event::Error("no model is loaded: open a checkpoint first".into()));
                    busy.store(false, Ordering::SeqCst);
                }
                None => return,
            }
            continue;
        };
        next_load = serve(o, rx, out, stop, busy, wait).await;
        if next_load.is_none() {
            return;
        }
    }
}

/// Opens `src` on the worker's device (opened first when it is not yet) and tells the UI.
async fn load(src: Source, gpu: &mut Option<Arc<ddl::gpu::Gpu>>, out: &Out) -> Result<Open, String> {
    let name = src.path();
    out.send(Event::Loading(name.clone()));
    if gpu.is_none() {
        *gpu = Some(open_gpu().await?);
    }
    let g = gpu.as_ref().unwrap();
    let (model, tok, step) = src.load(g).map_err(|e| format!("cannot open the checkpoint {}: {e}", name.display()))?;
    out.send(Event::Loaded(ModelInfo {
        dir: name.clone(),
        config: model.cfg.clone(),
        step,
        vocab: tok.vocab_size(),
        adapter: g.info.name.clone(),
    }));
    Ok(Open { model, tok, name })
}

/// Serves generation commands on the open checkpoint until the UI asks for another (returned)
/// or goes away (`None`).
async fn serve(
    o: &Open,
    rx: &mut Inbox,
    out: &Out,
    stop: &AtomicBool,
    busy: &AtomicBool,
    wait: Wait,
) -> Option<Source> {
    let (model, tok) = (&o.model, &o.tok);
    let mut session: Option<Generator<'_>> = None;
    while let Some(cmd) = rx.recv().await {
        let (prompt, sampling, max, fresh) = match cmd {
            Command::Load(d) => {
                return Some(Source::Dir(d));
            }
            Command::LoadBytes { name, bytes } => {
                return Some(Source::Bytes { name, bytes });
            }
            Command::Compare { prompt, sampling, max_tokens, specs, allow_out_of_range } => {
                // The comparison's own generators; the interactive session starts afresh.
                session = None;
                match compare(model, tok, &prompt, sampling, max_tokens, &specs, allow_out_of_range, stop, out, wait)
                    .await
                {
                    Ok(Some(c)) => {
                        let n = c.original.len();
                        out.send(Event::Compared(c));
                        out.send(Event::Done { reason: format!("compared {}", ddl::plural(n, "token")) });
                    }
                    Ok(None) => out.send(Event::Done { reason: COMPARISON_STOPPED.into() }),
                    Err(e) => {
                        out.send(Event::Error(e));
                        out.send(Event::Done { reason: "error".into() });
                    }
                }
                busy.store(false, Ordering::SeqCst);
                continue;
            }
            Command::Lens { prompt, tokens } => {
                match lens(model, tok, prompt.as_deref(), &tokens, wait) {
                    Ok(l) => {
                        out.send(Event::Lens(l));
                        out.send(Event::Done { reason: format!("lens of {}", ddl::plural(tokens.len(), "token")) });
                    }
                    Err(e) => {
                        out.send(Event::Error(e));
                        out.send(Event::Done { reason: "error".into() });
                    }
                }
                busy.store(false, Ordering::SeqCst);
                continue;
            }
            Command::Generate { prompt, sampling, max_tokens } => (prompt, sampling, max_tokens, true),
            Command::Step { prompt, sampling, fresh } => (prompt, sampling, 1, fresh || session.is_none()),
        };
        if fresh {
            session = None;
            if let Err(e) = sampling.validate() {
                out.send(Event::Error(e));
                busy.store(false, Ordering::SeqCst);
                continue;
            }
            let ids = match tok.encode(&prompt) {
                Ok(ids) if !ids.is_empty() => ids,
                Ok(_) => {
                    out.send(Event::Error("the prompt is empty: type some text first".into()));
                    busy.store(false, Ordering::SeqCst);
                    continue;
                }
                Err(e) => {
                    out.send(Event::Error(format!("the tokenizer cannot encode the prompt: {e}")));
                    busy.store(false, Ordering::SeqCst);
                    continue;
                }
            };
            if let Some(n) = prompt_cut(ids.len(), model.cfg.max_seq_len) {
                out.send(Event::Note(n));
            }
            match Generator::open(model, tok, &ids, Sampler::new(sampling), true, None, &[], wait).await {
                Ok(g) => {
                    out.send(Event::Started { prompt: g.prompt_traces().to_vec() });
                    session = Some(g);
                }
                Err(e) => {
                    out.send(Event::Error(format!("prefill failed: {e}")));
                    busy.store(false, Ordering::SeqCst);
                    continue;
                }
            }
        }
        let g = session.as_mut().unwrap();
        let eot = tok.eot_id();
        let mut reason = format!("{} generated", ddl::plural(max, "token"));
        for _ in 0..max {
            if stop.load(Ordering::SeqCst) {
                reason = "stopped".into();
                break;
            }
            match g.step_with(wait).await {
                Ok(s) => {
                    let end = eot == Some(s.token);
                    out.send(Event::Token(s));
                    if end {
                        reason = "end of text".into();
                        break;
                    }
                }
                Err(e) => {
                    out.send(Event::Error(format!("generation failed: {e}")));
                    session = None;
                    reason = "error".into();
                    break;
                }
            }
        }
        busy.store(false, Ordering::SeqCst);
        out.send(Event::Done { reason });
    }
    None
}

/// The logit lens of `tokens` from the first on (the desktop's blocking device reads only).
fn lens(
    model: &ddl::model::Model,
    tok: &ddl::tokenizer::Tokenizer,
    prompt: Option<&str>,
    tokens: &[u32],
    wait: Wait,
) -> Result<crate::trace::Lens, String> {
    if wait == Wait::Await {
        return Err(
            "the logit lens runs in the desktop app (`ddl-viz`), or from the command line: ddl generate --lens, \
                    ddl eval --lens"
                .into(),
        );
    }
    let vocab = model.cfg.vocab_size;
    if let Some(&id) = tokens.iter().find(|&&id| id as usize >= vocab) {
        return Err(format!(
            "the text shown holds token {id}, outside this model's vocabulary of {vocab}: it was written with \
             another tokenizer; Generate with this model first"
        ));
    }
    let prompt = match prompt {
        Some(p) => tok.encode(p).map_err(|e| format!("the tokenizer cannot encode the trace's prompt: {e}"))?,
        None => Vec::new(),
    };
    let logprob = if prompt.is_empty() {
        if tokens.len() < 2 {
            return Err("the logit lens needs a text of two tokens or more".into());
        }
        let rows = ddl::generate::continuation_lens(model, tok, &tokens[..1], &tokens[1..], None)
            .map_err(|e| format!("the logit lens failed: {e}"))?;
        // (The first token: nothing predicted it.)
        std::iter::once(Vec::new()).chain(rows).collect()
    } else {
        // Every token shown continues the prompt: each has its column.
        ddl::generate::continuation_lens(model, tok, &prompt, tokens, None)
            .map_err(|e| format!("the logit lens failed: {e}"))?
    };
    Ok(crate::trace::Lens { states: ddl::generate::lens_states(model), logprob })
}

/// The note for a prompt of `n` tokens longer than the model's context `cap` (which keeps its
/// last `cap` tokens), or `None` when it fits.
pub fn prompt_cut(n: usize, cap: usize) -> Option<String> {
    (n > cap).then(|| {
        format!(
            "the prompt has {n} tokens, more than the model's context of {cap}: its first {} are left out (the model \
             sees and the views show its last {cap})",
            n - cap
        )
    })
}

/// Why a comparison ended without one: Stop came before both continuations were written (two
/// texts cut at different points would show differences Stop made, not the interventions).
pub const COMPARISON_STOPPED: &str = "comparison stopped before both continuations were written: nothing compared";

/// Generates `prompt`'s continuation as the model is and under `specs` (the same sampler settings
/// and seed, traced), and the per-token change of the original continuation's log-probability
/// under the interventions (teacher-forced), as `ddl generate --compare` does; `None` when Stop
/// came before both were written.
#[allow(clippy::too_many_arguments)]
async fn compare(
    model: &ddl::model::Model,
    tok: &ddl::tokenizer::Tokenizer,
    prompt: &str,
    sampling: SamplerConfig,
    max_tokens: usize,
    specs: &[String],
    allow_out_of_range: bool,
    stop: &AtomicBool,
    out: &Out,
    wait: Wait,
) -> Result<Option<crate::panels::interventions::Comparison>, String> {
    sampling.validate()?;
    let iv = ddl::model::Interventions::parse(specs, allow_out_of_range).map_err(|e| e.to_string())?;
    let maps = iv.maps(&model.cfg).map_err(|e| e.to_string())?;
    let k_mean = iv.k_mean_targets(&model.cfg).map_err(|e| e.to_string())?;
    let ids = tok.encode(prompt).map_err(|e| format!("the tokenizer cannot encode the prompt: {e}"))?;
    if let Some(n) = prompt_cut(ids.len(), model.cfg.max_seq_len) {
        out.send(Event::Note(n));
    }
    if ids.is_empty() {
        return Err("the prompt is empty: type some text first".into());
    }
    let eot = tok.eot_id();
    let run = async |side: &str, maps: Option<Vec<ddl::kernels::delta::BetaMap>>, k: &[bool]| -> Result<_, String> {
        let mut g = Generator::open(model, tok, &ids, Sampler::new(sampling.clone()), true, maps, k, wait)
            .await
            .map_err(|e| format!("prefill failed: {e}"))?;
        let mut steps = Vec::new();
        for i in 0..max_tokens {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            out.send(Event::Progress(format!("comparing: the {side} continuation, token {}/{max_tokens}…", i + 1)));
            let s = g.step_with(wait).await.map_err(|e| format!("generation failed: {e}"))?;
            if eot == Some(s.token) {
                break;
            }
            steps.push(s.trace.unwrap_or(TokenTrace { token: s.token, text: s.piece, ..Default::default() }));
        }
        Ok((g.prompt_traces().to_vec(), steps))
    };
    let (prompt_t, original) = run("original", None, &[]).await?;
    if stop.load(Ordering::SeqCst) {
        return Ok(None);
    }
    let (prompt_i, intervened) = run("intervened", Some(maps.clone()), &k_mean).await?;
    if stop.load(Ordering::SeqCst) {
        return Ok(None);
    }
    out.send(Event::Progress("comparing: scoring the original continuation under the interventions…".into()));
    let cont: Vec<u32> = original.iter().map(|t| t.token).collect();
    let delta_logprob = ddl::generate::delta_logprobs_with(model, &ids, &cont, maps, &k_mean, wait)
        .await
        .map_err(|e| format!("scoring failed: {e}"))?;
    Ok(Some(crate::panels::interventions::Comparison {
        specs: iv.describe(),
        prompt: prompt_t,
        prompt_intervened: prompt_i,
        original,
        intervened,
        delta_logprob,
    }))
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    /// A prompt that makes the model thread panic (a stand-in for a bug).
    pub(super) const CRASH: &str = "\u{0}crash for the test";

    /// The next event within a minute.
    fn next(w: &Worker) -> Event {
        w.rx.recv_timeout(std::time::Duration::from_secs(60)).expect("an event from the model thread")
    }

    fn generate(prompt: &str) -> Command {
        Command::Generate { prompt: prompt.into(), sampling: SamplerConfig::default(), max_tokens: 1 }
    }

    /// A crash of the model thread is said, and the thread serves the commands after it (it was
    /// gone: a reload or a generation after it went nowhere, without a word).
    #[test]
    fn the_model_thread_serves_commands_after_a_crash() {
        let w = Worker::spawn(None);
        w.send(generate(CRASH));
        match next(&w) {
            Event::Error(e) => assert!(e.contains("crashed") && e.contains("open the checkpoint again"), "{e}"),
            e => panic!("expected the crash's message, got {e:?}"),
        }
        w.send(generate("a"));
        match next(&w) {
            Event::Error(e) => assert!(e.contains("no model is loaded"), "{e}"),
            e => panic!("expected the thread's answer, got {e:?}"),
        }
    }
}
