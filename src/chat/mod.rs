//! `ddl chat`: a conversation with a model, one line in, one reply out.
//!
//! The model reads the conversation as one text: each line the user types (with its newline),
//! then the reply, then the next line, … A [`Session`] keeps the KV and conv caches across turns,
//! so a turn prefills only its own line (one batched forward at the current position) and then
//! generates token by token; the replies stream as they are sampled. A reply stops at a blank
//! line, a stop text, the end-of-text token (which the model has then read, as a document
//! boundary) or `max_tokens`. Past the context the window slides as in `ddl generate`: the last
//! half of the conversation is kept and re-prefilled. Each line is encoded on its own (a BPE
//! merge across a turn boundary is not made, as in chat models' templates).
//!
//! Commands: `/reset`, `/set NAME VALUE` for every sampling option ([`ChatSettings::NAMES`]),
//! `/settings`, `/intervene SPEC` (the writes under `ddl generate --intervene`'s interventions,
//! from then on; `/intervene none` ends them), `/undo` (forget the last turn), `/retry` (its line
//! again, with the next turn's seed), `/save FILE` (the conversation as text), `/help`, `/quit`;
//! `//text` sends the line `/text` (a line starting with '/' is otherwise a command).
//! Each reply's seed is the chat's seed plus the turns since it was given (`--seed`, or `/set seed
//! N`, which is the next reply's own).
//!
//! A change that concerns what the model has read (an intervention set or ended, a turn undone)
//! re-reads the conversation in one prefill, its last context of tokens, as the model would read
//! it had it been under these interventions throughout (the replies stay as they were written).
//!
//! Ctrl-C while a reply is written stops it at the next token ([`Session::turn_until`]), its text
//! kept, and the chat goes on; SIGTERM then ends it ([`ChatError::Interrupted`]).

use std::io::{BufRead, Write};

use crate::generate::{Generator, Sampler, SamplerConfig, TokenTrace};
use crate::kernels::delta::BetaMap;
use crate::model::{Interventions, Model};
use crate::tokenizer::Tokenizer;

mod history;
mod lines;
pub use lines::{EditedLines, Lines, PlainLines};
mod save;
use save::{save_path, save_text};
mod settings;
pub use settings::ChatSettings;

/// A chat's failure: reading or writing the terminal, the device, or the trace file.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("chat input/output: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error("writing the trace {path}: {source}")]
    Trace { path: std::path::PathBuf, source: std::io::Error },
    /// `--intervene` the model cannot take (checked against it as the chat opens).
    #[error("{0}")]
    Intervene(String),
    /// SIGTERM while a reply was written: the reply stopped, the trace written, the chat ends
    /// (exit status 143, `crate::train::interrupted_status`).
    #[error("{0}: the chat ended")]
    Interrupted(&'static str),
}

/// One reply of a [`Session`].
#[derive(Debug, Clone)]
pub struct Reply {
    /// The generated tokens (a stop token is not among them).
    pub tokens: Vec<u32>,
    pub text: String,
    /// Tokens this turn prefilled: the line's, or the kept window's when the context slid.
    pub prefilled: usize,
    /// The line's tokens (with its newline) beyond the model's context: its start, not read.
    pub dropped: usize,
    /// Each reply token's score (`logprobs` on), and why the reply ended.
    pub scores: Vec<crate::generate::TokenScore>,
    pub stopped: &'static str,
    /// The reply was stopped before its end ([`Session::turn_until`]'s `stop_now`): what it had
    /// written is kept, in the conversation as on the screen.
    pub interrupted: bool,
}

/// A conversation with its caches: turns prefill only their own tokens.
pub struct Session<'a> {
    model: &'a Model,
    tok: &'a Tokenizer,
    pub settings: ChatSettings,
    generator: Option<Generator<'a>>,
    turn: u64,
    /// The turn whose reply uses `settings.sampler.seed` itself (the chat's first, or the one
    /// after `/set seed`); each turn after it uses the seed plus how many turns later it is.
    seed_turn: u64,
    trace: bool,
    traces: Vec<TokenTrace>,
    /// Per trace: read from a line (true) or written by the model (false).
    read: Vec<bool>,
    /// Per turn traced: where it starts among the traces and how its reply was sampled.
    turns: Vec<crate::generate::TraceTurn>,
    /// The last reply ended without a newline (cut by max_tokens or a stop text): the next line
    /// starts on a new one, as the screen shows it.
    needs_newline: bool,
    /// The interventions every forward runs under, checked against the model: the specs, one β
    /// map per sublayer (`None`: none) and the sublayers writing along the mean k.
    interventions: Interventions,
    beta_maps: Option<Vec<BetaMap>>,
    k_mean: Vec<bool>,
    /// Per turn since the last reset: its line and what undoing it restores.
    marks: Vec<TurnMark>,
}

/// Where a turn started: what [`Session::undo`] goes back to.
#[derive(Debug, Clone)]
struct TurnMark {
    line: String,
    history: usize,
    traces: usize,
    turns: usize,
    needs_newline: bool,
}

impl<'a> Session<'a> {
    /// An empty conversation; with `trace`, what every delta write did for every token the
    /// model reads (lines and replies) is kept ([`Session::traces`]).
    pub fn new(model: &'a Model, tok: &'a Tokenizer, settings: ChatSettings, trace: bool) -> Self {
        Session {
            model,
            tok,
            settings,
            generator: None,
            turn: 0,
            seed_turn: 0,
            trace,
            traces: Vec::new(),
            read: Vec::new(),
            turns: Vec::new(),
            needs_newline: false,
            interventions: Interventions::default(),
            beta_maps: None,
            k_mean: Vec::new(),
            marks: Vec::new(),
        }
    }

    /// Forgets the conversation (the next turn starts a new context; the interventions stay).
    pub fn reset(&mut self) {
        self.generator = None;
        self.traces.clear();
        self.read.clear();
        self.turns.clear();
        self.marks.clear();
        self.needs_newline = false;
    }

    /// The interventions the model runs under (empty: none).
    pub fn interventions(&self) -> &Interventions {
        &self.interventions
    }

    /// Runs the model under `iv` from now on (empty: as trained). The conversation so far is
    /// re-read under them (one prefill of its last context of tokens; a `k=mean` direction is the
    /// mean over those tokens, or over the next line's when nothing has been read yet). Returns
    /// the tokens re-read. Interventions the model cannot take (a residual variant, a block it
    /// does not have, a β out of range) and directions that cancel change nothing and say why.
    pub fn set_interventions(&mut self, iv: Interventions) -> Result<usize, ChatTurnError> {
        let cfg = &self.model.cfg;
        let beta_maps = if iv.is_empty() { None } else { Some(iv.maps(cfg)?) };
        let k_mean = iv.k_mean_targets(cfg)?;
        let n = self.history().len();
        let generator = self.reread(n, beta_maps.clone(), &k_mean)?;
        (self.interventions, self.beta_maps, self.k_mean) = (iv, beta_maps, k_mean);
        let read = generator.as_ref().map_or(0, |g| g.history().len().min(self.model.cfg.max_seq_len));
        self.generator = generator;
        Ok(read)
    }

    /// A generator that has read the conversation's first `upto` tokens (their last context)
    /// under these interventions; `None` for none. Refused when a `k=mean` direction cancels.
    fn reread(
        &self,
        upto: usize,
        beta_maps: Option<Vec<BetaMap>>,
        k_mean: &[bool],
    ) -> Result<Option<Generator<'a>>, ChatTurnError> {
        if upto == 0 {
            return Ok(None);
        }
        let history = &self.history()[..upto];
        let sampler = Sampler::new(self.sampling());
        match Generator::with_interventions(self.model, self.tok, history, sampler, self.trace, beta_maps, k_mean) {
            Ok(g) => Ok(Some(g)),
            // (The one refusal a prefill gives: a mean direction of zero length.)
            Err(crate::gpu::GpuError::Shape(msg)) => Err(ChatTurnError::Refused(msg)),
            Err(e) => Err(e.into()),
        }
    }

    /// Forgets the last turn (its line and its reply): the model re-reads the conversation before
    /// it (its last context of tokens). Returns the turn's line, `None` when there is no turn.
    /// The turn count goes on, so the same line sent again draws a new reply (`/retry`).
    pub fn undo(&mut self) -> Result<Option<String>, ChatTurnError> {
        let Some(mark) = self.marks.last().cloned() else { return Ok(None) };
        let generator = self.reread(mark.history, self.beta_maps.clone(), &self.k_mean.clone())?;
        self.generator = generator;
        self.marks.pop();
        self.traces.truncate(mark.traces);
        self.read.truncate(mark.traces);
        self.turns.truncate(mark.turns);
        self.needs_newline = mark.needs_newline;
        Ok(Some(mark.line))
    }

    /// The conversation as the model read it since the last reset: every line and reply.
    pub fn text(&self) -> String {
        self.tok.decode(self.history()).unwrap_or_default()
    }

    /// Every token the model has read, in order (lines, replies, a sampled stop token).
    pub fn history(&self) -> &[u32] {
        self.generator.as_ref().map_or(&[], |g| g.history())
    }

    /// The model's prediction for the next token (its logits after the conversation, in the
    /// context it has now); empty before the first turn.
    pub fn logits(&self) -> &[f32] {
        self.generator.as_ref().map_or(&[], |g| g.logits())
    }

    /// The traces of every token read so far (empty unless tracing).
    pub fn traces(&self) -> &[TokenTrace] {
        &self.traces
    }

    /// Per trace of [`Session::traces`]: whether the token was read from a line (not written).
    pub fn read(&self) -> &[bool] {
        &self.read
    }

    /// Per traced turn of the conversation (since the last reset): where it starts among
    /// [`Session::traces`] and the settings its reply was sampled with (empty unless tracing).
    pub fn turns(&self) -> &[crate::generate::TraceTurn] {
        &self.turns
    }

    /// `/set NAME VALUE` ([`ChatSettings::with`]): a seed set is the next reply's own, the
    /// following ones' the seed plus 1, 2, … Nothing changes when the value is refused.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        self.settings = self.settings.with(name, value)?;
        // (In any case, as `with` takes it: `/set SEED 5` drew the next reply with 5 + the turns.)
        if name.eq_ignore_ascii_case("seed") {
            self.seed_turn = self.turn;
        }
        Ok(())
    }

    /// The seed of the next reply: the chat's seed (`--seed`, or the last `/set seed`) plus the
    /// turns since it was set, so that turns do not repeat each other's draws and a conversation
    /// replays exactly; refused where that passes 2^64 − 1.
    pub fn next_seed(&self) -> Result<u64, String> {
        let (seed, later) = (self.settings.sampler.seed, self.turn - self.seed_turn);
        seed.checked_add(later).ok_or_else(|| {
            format!(
                "this reply's seed would be {seed} + {later}, past 2^64 − 1 (each reply's seed is one more than the \
                 last's): /set seed N (then N is the next reply's) and send the line again"
            )
        })
    }

    /// The sampling of the next turn: the settings with the next reply's seed ([`Session::next_seed`];
    /// past 2^64 − 1 the settings' own, which [`Session::turn`] refuses before sampling).
    fn sampling(&self) -> SamplerConfig {
        let mut cfg = self.settings.sampler.clone();
        cfg.seed = self.next_seed().unwrap_or(cfg.seed);
        cfg
    }

    /// One turn: reads `line` and a newline (after a newline of its own when the last reply
    /// ended without one, as the screen shows it), then generates the reply, handing each piece
    /// of text to `on_piece` as it is sampled. A line the tokenizer cannot encode changes nothing.
    pub fn turn(&mut self, line: &str, on_piece: impl FnMut(&str)) -> Result<Reply, ChatTurnError> {
        self.turn_until(line, &|| false, on_piece)
    }

    /// [`Session::turn`], its reply stopping before the next token once `stop_now` says so
    /// (Ctrl-C): the tokens written so far stay, read by the model, as a reply cut by
    /// `max_tokens` would ([`Reply::interrupted`]).
    pub fn turn_until(
        &mut self,
        line: &str,
        stop_now: &dyn Fn() -> bool,
        mut on_piece: impl FnMut(&str),
    ) -> Result<Reply, ChatTurnError> {
        let lead = if self.needs_newline && self.generator.is_some() { "\n" } else { "" };
        let ids = self.tok.encode(&format!("{lead}{line}\n")).map_err(|e| ChatTurnError::Encode(e.to_string()))?;
        self.next_seed().map_err(ChatTurnError::Refused)?;
        let sampling = self.sampling();
        let sampler = Sampler::new(sampling.clone());
        self.turn += 1;
        self.marks.push(TurnMark {
            line: line.to_string(),
            history: self.history().len(),
            traces: self.traces.len(),
            turns: self.turns.len(),
            needs_newline: self.needs_newline,
        });
        if self.trace {
            self.turns.push(crate::generate::TraceTurn {
                from_token: self.traces.len(),
                sampling,
                max_tokens: self.settings.max_tokens,
                stop: self.settings.stop.clone(),
                interventions: self.interventions.describe(),
            });
        }
        let prefilled = match &mut self.generator {
            Some(g) => {
                g.set_sampler(sampler);
                let (n, traces) = g.feed(&ids)?;
                self.read.extend(std::iter::repeat_n(true, traces.len()));
                self.traces.extend(traces);
                n
            }
            None => {
                let g = match Generator::with_interventions(
                    self.model,
                    self.tok,
                    &ids,
                    sampler,
                    self.trace,
                    self.beta_maps.clone(),
                    &self.k_mean,
                ) {
                    Ok(g) => g,
                    Err(crate::gpu::GpuError::Shape(msg)) => {
                        // (k=mean over a first line whose directions cancel: nothing was read.)
                        if let Some(mark) = self.marks.pop() {
                            self.turns.truncate(mark.turns);
                        }
                        self.turn -= 1;
                        return Err(ChatTurnError::Refused(msg));
                    }
                    Err(e) => return Err(e.into()),
                };
                self.traces.extend_from_slice(g.prompt_traces());
                self.read.extend(std::iter::repeat_n(true, g.prompt_traces().len()));
                let n = ids.len().min(self.model.cfg.max_seq_len);
                self.generator = Some(g);
                n
            }
        };
        let g = self.generator.as_mut().expect("a generator after the first turn");
        let (max_tokens, stop_token) = (self.settings.max_tokens, self.tok.eot_id());
        let mut tokens = Vec::new();
        let mut text = String::new();
        let mut ended_by_token = false;
        let stops: Vec<String> =
            std::iter::once("\n\n".to_string()).chain(self.settings.stop.iter().cloned()).collect();
        let mut cut = false;
        let mut scores = Vec::new();
        g.set_scores(self.settings.logprobs);
        let mut interrupted = false;
        for _ in 0..max_tokens {
            if stop_now() {
                interrupted = true;
                break;
            }
            let s = g.step()?;
            if stop_token != Some(s.token) {
                scores.extend(s.score);
            }
            if let Some(tr) = s.trace {
                self.traces.push(tr);
                self.read.push(false);
            }
            if stop_token == Some(s.token) {
                ended_by_token = true;
                break;
            }
            tokens.push(s.token);
            // A blank line or a stop text ends the reply right after it, even inside the
            // token's text (the model has read the whole token).
            if let Some(keep) = g.stop_cut(s.piece.len(), &stops) {
                text.push_str(&s.piece[..keep]);
                on_piece(&s.piece[..keep]);
                cut = true;
                break;
            }
            text.push_str(&s.piece);
            on_piece(&s.piece);
        }
        let rest = g.end_reply();
        if !rest.is_empty() && !cut {
            text.push_str(&rest);
            on_piece(&rest);
        }
        // (After an end-of-text token the next line starts a new document anyway.)
        self.needs_newline = !ended_by_token && !text.is_empty() && !text.ends_with('\n');
        let dropped = ids.len().saturating_sub(self.model.cfg.max_seq_len);
        let stopped = if ended_by_token {
            "the model ended the text (its end-of-text token)"
        } else if cut {
            "a blank line or a stop text"
        } else if interrupted {
            "it was interrupted"
        } else {
            // (The setting's name in chat: `/set max_tokens N`, `--max-tokens`.)
            "it reached max_tokens"
        };
        Ok(Reply { tokens, text, prefilled, dropped, scores, stopped, interrupted })
    }
}

/// Why one turn failed: the line (the conversation goes on) or the device (it ends).
#[derive(Debug, thiserror::Error)]
pub enum ChatTurnError {
    #[error("{0}")]
    Encode(String),
    /// A `k=mean` whose directions cancel: nothing changed.
    #[error("{0}")]
    Refused(String),
    /// An intervention the model cannot take: nothing changed.
    #[error(transparent)]
    Intervention(#[from] crate::model::intervene::InterventionError),
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
}

const HELP: &str = "commands: /reset (forget the conversation), /undo (forget the last turn), /retry (the last \
                    line again, a new reply), /set NAME VALUE (temperature, top_k, top_p, min_p, repetition_penalty, \
                    max_tokens, seed N (the next reply's seed), stop TEXT | stop none; \\n \\t \\s \\\\ in TEXT: newline, \
                    tab, space, backslash; logprobs N | logprobs off: a table of each reply's tokens under the \
                    model), /settings, \
                    /intervene SPEC (e.g. block1.mlp:beta=0; several separated by spaces or `;`; /intervene none \
                    ends them, /intervene alone lists them), /save FILE (the conversation as text), /help, /quit; an empty line sends \
                    nothing; to send a line starting with '/', write '//…' (//x sends /x)";

/// How a chat runs besides its sampling: the trace file, the interventions it starts under.
#[derive(Debug, Clone, Default)]
pub struct ChatOptions<'p> {
    /// Write the traces of the whole conversation here after every turn (`ddl generate
    /// --trace`'s format: safetensors and a `.json` summary).
    pub trace: Option<&'p std::path::Path>,
    /// The interventions of the first turn on (`ddl chat --intervene`); `/intervene` changes them.
    pub interventions: Interventions,
}

/// The specs of `/intervene`'s words: `;`-separated, and within a part words that each hold a
/// `:` are specs of their own (`block1.mlp:beta=0 all:erase=0`; `block1 . mlp:beta=0` is one).
fn intervene_specs(words: &str) -> Vec<String> {
    words
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .flat_map(|part| {
            let w: Vec<&str> = part.split_whitespace().collect();
            if w.len() > 1 && w.iter().all(|x| x.contains(':')) {
                w.into_iter().map(String::from).collect()
            } else {
                vec![part.to_string()]
            }
        })
        .collect()
}

/// A refused intervention as `/intervene` says it (the flag's name and its remedy are the chat's).
fn in_chat(e: &ChatTurnError) -> String {
    match e {
        ChatTurnError::Intervention(e) => {
            let msg = match e.msg.split_once("; give each its own --intervene") {
                // (Several specs go in one line here, each whole: `all:erase=0,v=0` is two.)
                Some((what, _)) => {
                    format!("{what}; write each spec whole, separated by `;` (e.g. /intervene all:erase=0; all:v=0)")
                }
                None => e.msg.replace("pass --allow-out-of-range", "start the chat with --allow-out-of-range"),
            };
            format!("/intervene '{}': {msg}", e.spec)
        }
        e => e.to_string(),
    }
}

/// Runs a chat until `/quit` or the end of the input: replies stream to `out` token by token,
/// notes and errors about a line (a bad command, text the tokenizer cannot encode) go to `log`.
/// With `opts.trace`, the traces of the whole conversation are written there after every turn
/// (and after `/undo`). Returns how many lines it could not send to the model (text the
/// tokenizer cannot encode, a turn refused), each said as it came: a chat read from a pipe ends
/// with an error for them, where a script would not see them.
pub fn run(
    model: &Model,
    tok: &Tokenizer,
    settings: ChatSettings,
    lines: &mut dyn Lines,
    out: &mut dyn Write,
    log: &mut dyn Write,
    opts: &ChatOptions,
) -> Result<usize, ChatError> {
    let trace = opts.trace;
    let mut session = Session::new(model, tok, settings, trace.is_some());
    if !opts.interventions.is_empty() {
        match session.set_interventions(opts.interventions.clone()) {
            Ok(_) => writeln!(log, "(under {})", opts.interventions.describe())?,
            Err(ChatTurnError::Gpu(e)) => return Err(e.into()),
            Err(e) => return Err(ChatError::Intervene(e.to_string())),
        }
    }
    let write_trace = |session: &Session| -> Result<(), ChatError> {
        let Some(path) = trace else { return Ok(()) };
        let origin = crate::generate::TraceOrigin {
            read: session.read().to_vec(),
            turns: session.turns().to_vec(),
            // (One set of interventions for the whole trace: said at its top, as generate does.)
            interventions: match session.turns() {
                [first, rest @ ..] if rest.iter().all(|t| t.interventions == first.interventions) => {
                    first.interventions.clone()
                }
                _ => String::new(),
            },
            allow_out_of_range: session.interventions().allow_out_of_range,
            chat: true,
            ..Default::default()
        };
        crate::generate::write_trace_with(path, &model.cfg, session.traces(), &origin)
            .map_err(|source| ChatError::Trace { path: path.to_path_buf(), source })
    };
    // The files `/save` wrote: saved again without a question (others are not replaced).
    let mut saved: Vec<std::path::PathBuf> = Vec::new();
    let mut refused = 0;
    while let Some(line) = lines.next_line("> ")? {
        // An empty line (or only spaces) sends nothing: the prompt again, as a shell does. (It
        // was a turn of one newline, which a stray Enter sent; a reply ends at a blank line.)
        if line.trim().is_empty() {
            continue;
        }
        let mut say = None;
        // (A command after spaces, a tab or a pasted indent is a command: `  /quit` was sent to the
        // model as a line, the chat going on.)
        // (`//text` sends the line `/text`, as IRC clients do: a line starting with '/' was
        // always a command, and an unknown one refused.)
        if line.trim_start().starts_with("//") {
            say = Some(line.replacen('/', "", 1));
        } else if let Some(cmd) = line.trim_start().strip_prefix('/') {
            // (Extra spaces between the words are not part of them; a stop text keeps its own.)
            let cmd = cmd.trim_start();
            let (name, rest) = cmd.split_once(char::is_whitespace).unwrap_or((cmd, ""));
            let rest = rest.trim_start();
            let parts: Vec<&str> = match rest.split_once(char::is_whitespace) {
                Some((key, value)) => vec![key, value.trim_start()],
                None if rest.is_empty() => vec![],
                None => vec![rest],
            };
            // (Command names in any case: `/QUIT` is `/quit`.)
            let name = name.trim().to_ascii_lowercase();
            match (name.as_str(), parts.as_slice()) {
                (bare @ ("quit" | "exit" | "reset" | "settings" | "help" | "undo" | "retry"), [_, ..]) => {
                    // (Not run with the words after it ignored: `/reset now` may mean something else.)
                    writeln!(log, "/{bare} takes nothing after it (got '{rest}'): type /{bare} alone")?
                }
                ("quit" | "exit", _) => break,
                ("reset", _) => {
                    session.reset();
                    writeln!(log, "(context cleared)")?;
                }
                ("settings", _) => {
                    let iv = match session.interventions().describe() {
                        d if d.is_empty() => "none".to_string(),
                        d => d,
                    };
                    let next = session.next_seed().map_or_else(|_| "past 2^64 − 1".to_string(), |s| s.to_string());
                    writeln!(log, "({} · next reply's seed {next} · interventions: {iv})", session.settings.describe())?
                }
                ("help", _) => writeln!(log, "{HELP}")?,
                ("set", [key, value]) => match session.set(key, value) {
                    Ok(()) => {
                        let key = key.to_ascii_lowercase();
                        if key == "stop" {
                            // (`stop TEXT` adds to the list: the list is what holds now.)
                            let stops: Vec<String> = session.settings.stop.iter().map(|x| format!("{x:?}")).collect();
                            writeln!(log, "(stop texts: [{}], and a blank line)", stops.join(", "))?;
                            // (As `--stop` says of one: a character a char model lacks.)
                            if let Some(stop) = session.settings.stop.last()
                                && let Err(e) = tok.encode(stop)
                            {
                                writeln!(
                                    log,
                                    "note: stop {stop:?} can never be generated ({e}): it will not stop a reply"
                                )?;
                            }
                        } else if key == "seed" {
                            let value = value.trim();
                            writeln!(log, "(seed = {value}: the next reply's seed, each reply after it one more)")?;
                        } else {
                            writeln!(log, "({key} = {})", value.trim())?;
                        }
                    }
                    Err(e) => writeln!(log, "error: {e}")?,
                },
                ("set", _) => writeln!(log, "usage: /set NAME VALUE, NAME one of {}", ChatSettings::NAMES.join(", "))?,
                ("intervene", []) => match session.interventions().describe() {
                    d if d.is_empty() => writeln!(log, "(no interventions: the model as trained)")?,
                    d => writeln!(log, "(interventions: {d})")?,
                },
                ("intervene", _) => {
                    // (The flag the chat was started with: it held only where --intervene was
                    // given too, so `ddl chat --allow-out-of-range` alone refused /intervene
                    // beta=3, telling to start the chat with the flag it had.)
                    let allow = opts.interventions.allow_out_of_range || session.interventions().allow_out_of_range;
                    // (`none` with spaces after it is `none`: the specs split at spaces anyway.)
                    let first = rest.split_whitespace().next().unwrap_or("");
                    let next = if rest.trim_end().eq_ignore_ascii_case("none") {
                        Ok(Interventions { list: Vec::new(), allow_out_of_range: allow })
                    } else if first.eq_ignore_ascii_case("none") {
                        // (It was the spec syntax's generic message.)
                        let more = rest.trim_end()[first.len()..].trim_start();
                        let msg = format!("none takes nothing after it (got '{more}'): type /intervene none alone");
                        writeln!(log, "error: /intervene {msg} to end the interventions (nothing changed)")?;
                        continue;
                    } else {
                        Interventions::parse(&intervene_specs(rest), allow).map(|add| {
                            let mut list = session.interventions().list.clone();
                            list.extend(add.list);
                            Interventions { list, allow_out_of_range: allow }
                        })
                    };
                    match next.map_err(ChatTurnError::from) {
                        Err(e) => writeln!(log, "error: {} (nothing changed)", in_chat(&e))?,
                        Ok(iv) if iv == *session.interventions() => {
                            writeln!(log, "(no change: the interventions are already these)")?
                        }
                        Ok(iv) => {
                            let notes = iv.notes();
                            match session.set_interventions(iv) {
                                Ok(n) => {
                                    for note in notes {
                                        writeln!(log, "{note}")?;
                                    }
                                    let what = match session.interventions().describe() {
                                        d if d.is_empty() => "no interventions: the model as trained".to_string(),
                                        d => format!("interventions: {d}"),
                                    };
                                    let when = match n {
                                        0 => "from the next line on".to_string(),
                                        n if session.interventions().is_empty() => {
                                            format!("the conversation's last {n} tokens re-read as trained")
                                        }
                                        n => format!("the conversation's last {n} tokens re-read under them"),
                                    };
                                    writeln!(log, "({what}; {when})")?;
                                }
                                Err(ChatTurnError::Gpu(e)) => return Err(e.into()),
                                Err(e) => writeln!(log, "error: {} (nothing changed)", in_chat(&e))?,
                            }
                        }
                    }
                }
                (bare @ ("undo" | "retry"), _) => match session.undo() {
                    Ok(None) => writeln!(log, "(nothing to {bare}: no turn since the start or the last /reset)")?,
                    Ok(Some(undone)) => {
                        write_trace(&session)?;
                        if bare == "retry" {
                            writeln!(log, "(again: {undone:?})")?;
                            say = Some(undone);
                        } else {
                            writeln!(log, "(undone: {undone:?} and its reply)")?;
                        }
                    }
                    Err(ChatTurnError::Gpu(e)) => return Err(e.into()),
                    Err(e) => writeln!(log, "error: {e} (nothing changed)")?,
                },
                ("save", []) => {
                    writeln!(log, "usage: /save FILE (the conversation since the start or the last /reset)")?
                }
                ("save", _) => {
                    let path = save_path(rest);
                    // (Not over this chat's own trace, which it rewrites after every turn.)
                    let own = trace.and_then(|t| {
                        if path == t { Some("file") } else { (path == t.with_extension("json")).then_some("summary") }
                    });
                    let saving = match own {
                        Some(what) => Err(format!(
                            "{} is this chat's --trace {what}, rewritten after every turn: give another name",
                            path.display()
                        )),
                        None => save_text(&path, &session.text(), saved.contains(&path)),
                    };
                    match saving {
                        Ok(n) => {
                            writeln!(log, "(saved the conversation, {n} characters, to {})", path.display())?;
                            saved.push(path);
                        }
                        Err(e) => writeln!(log, "error: {e}")?,
                    }
                }
                _ => writeln!(
                    log,
                    "unknown command '/{cmd}': to send a line starting with '/', write '//…' (//{cmd} sends /{cmd}) \
                     ({HELP})"
                )?,
            }
            if say.is_none() {
                continue;
            }
        }
        let line = say.unwrap_or(line);
        // A line longer than the context: said before the reply (which reads only its end).
        let cap = model.cfg.max_seq_len;
        if let Ok(ids) = tok.encode(&format!("{line}\n"))
            && ids.len() > cap
        {
            writeln!(
                log,
                "(that line is {} tokens, more than the model's context of {cap}: it reads the last {cap}, not the \
                 first {})",
                ids.len(),
                ids.len() - cap
            )?;
        }
        let mut io = Ok(());
        // Ctrl-C (or SIGTERM) while the reply is written stops it at the next token, its text
        // kept (it ended the whole chat at once, without a word, its trace lost); at the prompt
        // no handler listens: Ctrl-C ends the chat there, as it did.
        let reply = {
            let _ctrlc = crate::train::CtrlcScope::new();
            session.turn_until(&line, &crate::train::interrupted, |piece| {
                if io.is_ok() {
                    io = write!(out, "{piece}").and_then(|_| out.flush());
                }
            })
        };
        // A Ctrl-C is forgotten once its reply stopped (the next is a first again); SIGTERM ends
        // the chat after this turn. (One that came after the reply's last token stopped nothing.)
        let by = crate::train::interruption();
        crate::train::clear_interruption();
        let ended = crate::train::interrupted();
        io?;
        let answered = match reply {
            Ok(r) => {
                if !r.text.ends_with('\n') {
                    writeln!(out)?;
                }
                if let Some(n) = session.settings.logprobs {
                    let why = if r.interrupted { format!("{by} stopped it") } else { r.stopped.to_string() };
                    write!(out, "{}", crate::generate::scores_table(&r.scores, n, &why))?;
                }
                if r.interrupted {
                    let next = if ended {
                        "; the chat ends"
                    } else {
                        " (kept in the conversation; Ctrl-D or /quit ends the chat)"
                    };
                    writeln!(log, "{by}: stopped the reply after {}{next}", crate::plural(r.tokens.len(), "token"))?;
                }
                true
            }
            Err(ChatTurnError::Encode(e)) => {
                refused += 1;
                let then = if lines.typed() {
                    "type it again without that character"
                } else {
                    "the line is skipped (correct it in the input)"
                };
                writeln!(
                    log,
                    "error: {e}; the checkpoint's {} tokenizer cannot encode this line: {then} (the conversation is \
                     as it was)",
                    tok.kind()
                )?;
                false
            }
            Err(e @ (ChatTurnError::Refused(_) | ChatTurnError::Intervention(_))) => {
                refused += 1;
                writeln!(log, "error: {} (the conversation is as it was)", in_chat(&e))?;
                false
            }
            Err(ChatTurnError::Gpu(e)) => return Err(e.into()),
        };
        if answered {
            write_trace(&session)?;
        }
        if ended {
            return Err(ChatError::Interrupted(by));
        }
    }
    Ok(refused)
}

#[cfg(test)]
mod tests {
    use super::lines::{LINE_CAP, read_line_capped};
    use super::*;

    #[test]
    fn a_line_that_is_not_utf8_is_one_bad_line_not_the_end_of_the_input() {
        let mut input = std::io::Cursor::new(b"first\n\xff\xff bad\nnext\n".to_vec());
        let mut log = Vec::new();
        let mut lines = PlainLines::new(&mut input, &mut log);
        let got: Vec<String> = std::iter::from_fn(|| lines.next_line("> ").unwrap()).collect();
        assert_eq!(got, ["first", "\u{fffd}\u{fffd} bad", "next"]);
        let log = String::from_utf8(log).unwrap();
        assert!(log.contains("not UTF-8"), "{log}");
        // The end of the input ends the last prompt's line.
        assert!(log.ends_with("> \n"), "{log:?}");
    }

    /// A line from a pipe or file is capped (a pipe from /dev/zero would never end one, and the
    /// chat grew without bound): past the cap the chat ends with a message, as `generate
    /// --prompt -` refuses standard input past its cap.
    #[test]
    fn a_line_past_the_cap_is_refused_not_read_without_end() {
        let read = |text: &[u8]| read_line_capped(&mut std::io::Cursor::new(text.to_vec()), 4);
        assert_eq!(read(b"ab\ncd").unwrap(), Some(b"ab\n".to_vec()));
        assert_eq!(read(b"abcd\n").unwrap(), Some(b"abcd\n".to_vec()));
        assert_eq!(read(b"abcd").unwrap(), Some(b"abcd".to_vec()));
        assert_eq!(read(b"").unwrap(), None);
        let e = read(b"abcde\n").unwrap_err().to_string();
        assert!(e.contains("longer than") && e.contains("ddl eval"), "{e}");
        const { assert!(LINE_CAP >= 1 << 20) };
    }

    /// UTF-16 lines (a file Notepad saved as "Unicode") end the chat saying what they are and how
    /// to convert them: the first line was "not UTF-8", the next ones (NUL characters between the
    /// letters: valid UTF-8) were sent to the model as they were.
    #[test]
    fn utf16_input_is_said_not_read_as_lines() {
        let mut input = std::io::Cursor::new(b"\xff\xfeh\0i\0\n\0h\0o\0\n\0".to_vec());
        let mut log = Vec::new();
        let mut lines = PlainLines::new(&mut input, &mut log);
        let e = lines.next_line("> ").unwrap_err().to_string();
        assert!(e.contains("it is UTF-16 text") && e.contains("iconv -f UTF-16 -t UTF-8"), "{e}");
        // Without the mark (every line was sent to the model), after an empty line too (its NUL
        // starts the next line: the bytes read before a line tell which UTF-16 it is).
        for (bytes, enc) in
            [(&b"\n\0h\0i\0\n\0"[..], "UTF-16LE"), (b"\0\n\0h\0i\0\n", "UTF-16BE"), (b"h\0i\0\n\0", "UTF-16LE")]
        {
            let mut input = std::io::Cursor::new(bytes.to_vec());
            let mut lines = PlainLines::new(&mut input, &mut log);
            let mut e = lines.next_line("> ");
            while let Ok(Some(_)) = e {
                e = lines.next_line("> ");
            }
            let e = e.unwrap_err().to_string();
            assert!(e.contains(&format!("iconv -f {enc} -t UTF-8")), "{bytes:?}: {e}");
        }
    }

    /// Lines piped from a file drop a byte-order mark (the first line of a file a Windows editor
    /// saved), and their line ends.
    #[test]
    fn piped_lines_drop_a_byte_order_mark() {
        let mut input = std::io::Cursor::new("\u{feff}ROMEO:\r\nhi\n".as_bytes().to_vec());
        let mut log = Vec::new();
        let mut lines = PlainLines::new(&mut input, &mut log);
        assert_eq!(lines.next_line("> ").unwrap().as_deref(), Some("ROMEO:"));
        assert_eq!(lines.next_line("> ").unwrap().as_deref(), Some("hi"));
        assert_eq!(lines.next_line("> ").unwrap(), None);
    }

    #[test]
    fn intervene_takes_specs_separated_by_spaces_or_semicolons() {
        let specs = |w: &str| intervene_specs(w);
        assert_eq!(specs("block1.mlp:beta=0"), ["block1.mlp:beta=0"]);
        assert_eq!(specs("block1.mlp:beta=0 all:erase=0"), ["block1.mlp:beta=0", "all:erase=0"]);
        assert_eq!(specs(" block1.mlp:beta=0 ;all:erase=0; "), ["block1.mlp:beta=0", "all:erase=0"]);
        // Spaces inside one spec (which its parser takes) keep it whole.
        assert_eq!(specs("block1 . mlp:beta=0"), ["block1 . mlp:beta=0"]);
        assert_eq!(specs("block1 . mlp:beta=0; all:k=mean"), ["block1 . mlp:beta=0", "all:k=mean"]);
        assert!(specs(" ; ").is_empty());
    }

    /// `/intervene`'s refusals give the chat's remedy: several specs in one line, separated by
    /// `;` (they said to give each its own `--intervene`, a flag of the command line).
    #[test]
    fn intervene_refusals_give_the_chats_remedy() {
        for spec in ["all:erase=0,v=0", "all:beta=0,block0.mlp:v=0", "all:beta=0 block0 . mlp:v=0"] {
            let e = Interventions::parse(&intervene_specs(spec), false).unwrap_err();
            let said = in_chat(&ChatTurnError::from(e));
            assert!(said.starts_with(&format!("/intervene '{spec}': ")), "{said}");
            assert!(said.contains("separated by `;`") && !said.contains("--intervene"), "{said}");
        }
        let msg = "β = 3 is outside [0, 2]; pass --allow-out-of-range to use it anyway".to_string();
        let e = crate::model::intervene::InterventionError { spec: "all:beta=3".into(), msg };
        assert!(in_chat(&ChatTurnError::from(e)).contains("; start the chat with --allow-out-of-range"));
    }

    #[test]
    fn save_writes_the_text_and_replaces_only_its_own_file() {
        let dir = std::env::temp_dir().join(format!("ddl-chat-save-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.txt");
        let _ = std::fs::remove_file(&f);
        assert_eq!(save_text(&f, "héllo\n", false), Ok(6));
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "héllo\n");
        let e = save_text(&f, "other", false).unwrap_err();
        assert!(e.contains("exists") && e.contains("not replaced"), "{e}");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "héllo\n");
        assert_eq!(save_text(&f, "again", true), Ok(5));
        assert!(save_text(&dir, "x", false).unwrap_err().contains("is a folder"));
        assert!(save_text(&dir.join("no/c.txt"), "x", false).unwrap_err().contains("does not exist"));
        assert!(save_text(&dir.join("d.txt"), "", false).unwrap_err().contains("nothing to save"));
        assert!(!dir.join("d.txt").exists());
        std::fs::remove_dir_all(&dir).unwrap();
        // The file name as typed: spaces after it are not part of it (a terminal hides them),
        // and `~/` is the home folder, as in a shell.
        assert_eq!(save_path("c.txt \t"), std::path::Path::new("c.txt"));
        assert_eq!(save_path("my chat.txt"), std::path::Path::new("my chat.txt"));
        if let Some(home) = std::env::var_os("HOME") {
            assert_eq!(save_path("~/c.txt"), std::path::Path::new(&home).join("c.txt"));
        }
        assert_eq!(save_path("~c.txt"), std::path::Path::new("~c.txt"));
        // Quotes around it are taken off, as a shell takes them (the file's name held them).
        assert_eq!(save_path("\"my chat.txt\" "), std::path::Path::new("my chat.txt"));
        assert_eq!(save_path("'c.txt'"), std::path::Path::new("c.txt"));
        assert_eq!(save_path("\"~/c.txt\""), std::path::Path::new("~/c.txt"));
        assert_eq!(save_path("\"c.txt'"), std::path::Path::new("\"c.txt'"));
    }
}
