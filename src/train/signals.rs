//! Ctrl-C, SIGTERM and a closed output pipe: the first asks the work to stop at the next safe point
//! (a training run saves its checkpoint); a second one (not the first delivered again) ends at
//! once and removes what was half made (`Scrap`, a run that was starting); the exit status that
//! says which signal it was.

use super::*;

pub(super) static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The signal that interrupted the process when it was not SIGINT (Ctrl-C): SIGTERM (`kill`,
/// `timeout`, Slurm and systemd stopping a job) or, in a training run, SIGPIPE (its output's
/// reader gone: `ddl train … | head`); both stop as cleanly as Ctrl-C does. 0 for Ctrl-C.
pub(super) static SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The signal numbers an interruption comes from (POSIX's, the same on Linux and macOS).
pub(crate) const SIGINT: i32 = 2;

pub(crate) const SIGPIPE: i32 = 13;

pub(crate) const SIGTERM: i32 = 15;

/// The signal that interrupted this process (`SIGINT` for Ctrl-C), or that the rank which was
/// interrupted got in a data-parallel run ([`adopt_signal`]).
pub(crate) fn interrupting_signal() -> i32 {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => SIGINT,
        s => s,
    }
}

/// A data-parallel rank that stops because another rank was interrupted takes that rank's
/// signal, for its messages and exit status.
pub(crate) fn adopt_signal(sig: i32) {
    if sig != SIGINT {
        let _ = SIGNAL.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// The exit status of a process an interruption stopped: 128 + the signal's number, as for a
/// process that signal ended: 130 after Ctrl-C, 143 after SIGTERM, 141 after SIGPIPE.
pub fn interrupted_status() -> i32 {
    128 + interrupting_signal()
}

/// What stopped the process, for its messages: "Ctrl-C", "SIGTERM" or "SIGPIPE (its output's
/// reader is gone)".
pub fn interruption() -> &'static str {
    match interrupting_signal() {
        SIGTERM => "SIGTERM",
        SIGPIPE => "SIGPIPE (the output's reader is gone)",
        _ => "Ctrl-C",
    }
}

/// A Ctrl-C this soon after the first is the same one delivered again (to the process and to its
/// group), not a second.
pub(super) const SECOND_CTRLC_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

/// Whether the process stops cleanly on Ctrl-C ([`install_ctrlc`] was called, or a
/// [`CtrlcScope`] lives: they count); else Ctrl-C ends it at once, as without a handler.
pub(super) static LISTENING: AtomicBool = AtomicBool::new(false);

pub(super) static SCOPES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Installs a Ctrl-C handler that asks the loop to save and stop (once per process).
pub fn install_ctrlc() {
    set_ctrlc_handler();
    LISTENING.store(true, Ordering::SeqCst);
}

/// What Ctrl-C stopping the process at once says, if anything ([`stop_at_once_from_now`]).
pub(super) static AT_ONCE_NOTE: std::sync::Mutex<Option<&'static str>> = std::sync::Mutex::new(None);

/// From now on Ctrl-C (or SIGTERM) ends the process at once, as in a command that never listened,
/// saying `note`: work after a run that keeps nothing half done (`ddl train --sample`'s sample,
/// which polled no interruption, so that the first Ctrl-C was ignored).
pub fn stop_at_once_from_now(note: &'static str) {
    set_ctrlc_handler();
    *AT_ONCE_NOTE.lock().unwrap_or_else(|e| e.into_inner()) = Some(note);
    LISTENING.store(false, Ordering::SeqCst);
}

pub(super) fn set_ctrlc_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if !LISTENING.load(Ordering::SeqCst) && SCOPES.load(Ordering::SeqCst) == 0 {
                // At once, as without a handler, leaving no lock and no folder made for a run
                // still starting ([`StartingRun`]).
                lock::release_all();
                let made: Vec<PathBuf> = std::mem::take(&mut *STARTING.lock().unwrap_or_else(|e| e.into_inner()));
                if !made.is_empty() {
                    for d in &made {
                        let _ = std::fs::remove_dir(d);
                    }
                    eprintln!("\n{} while the run was starting: nothing was trained", interruption());
                } else if let Some(note) = *AT_ONCE_NOTE.lock().unwrap_or_else(|e| e.into_inner()) {
                    eprintln!("\n{}: {note}", interruption());
                }
                std::process::exit(interrupted_status());
            }
            THIS_IS_TERM.store(TERM_NOW.swap(false, Ordering::SeqCst), Ordering::SeqCst);
            if INTERRUPTED.swap(true, Ordering::SeqCst) {
                // The same interruption delivered twice (a terminal, or `timeout`, signals the
                // process and then its group): not a second Ctrl-C.
                if first().is_some_and(|t| t.elapsed() < SECOND_CTRLC_AFTER) {
                    return;
                }
                // Second Ctrl-C: the user insists. What was saved before stays (checkpoints are
                // replaced atomically); the steps since the last checkpoint are not kept, and
                // output still being written is removed.
                eprintln!("\n{}", stop_at_once());
                lock::release_all();
                std::process::exit(interrupted_status());
            } else {
                *FIRST.lock().unwrap_or_else(|e| e.into_inner()) = Some((std::time::Instant::now(), interruption()));
                eprintln!("\n{}: stopping cleanly (Ctrl-C or SIGTERM again stops at once)", interruption());
            }
        });
        // SIGTERM stops as Ctrl-C does: noted, then delivered to the handler above as SIGINT.
        #[cfg(unix)]
        {
            extern "C" fn on_term(sig: libc::c_int) {
                // Async-signal-safe: an atomic store and raise(3).
                SIGNAL.store(sig, Ordering::SeqCst);
                TERM_NOW.store(true, Ordering::SeqCst);
                // SAFETY: raise is async-signal-safe; SIGINT's handler is ctrlc's.
                unsafe {
                    libc::raise(libc::SIGINT);
                }
            }
            // SAFETY: installs a handler that only touches an atomic and raises a signal.
            unsafe {
                libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
            }
        }
    });
}

/// `ddl train`: a run whose output's reader goes away (`ddl train … | head`, a log reader that
/// died) stops as on Ctrl-C, saving its checkpoint, instead of dying between checkpoints: from
/// the SIGPIPE on, whichever of stdout and stderr lost its reader goes to /dev/null, and it exits
/// with 141. (The write that
/// met the closed pipe fails: the training loop's lines ignore that, [`progress`]; other commands
/// keep the default, ending at once.)
pub fn stop_on_broken_pipe() {
    #[cfg(unix)]
    {
        extern "C" fn on_pipe(sig: libc::c_int) {
            // Async-signal-safe: poll(2), open(2), dup2(2), close(2), an atomic store and raise(3).
            // SAFETY: the calls take a valid C string, a valid pollfd and descriptors this process
            // owns.
            unsafe {
                // Only stdout and stderr are the run's output: another pipe's error is its writer's.
                let broken = |fd: libc::c_int| {
                    let mut p = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
                    libc::poll(&mut p, 1, 0) == 1 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
                };
                let (out, err) = (broken(1), broken(2));
                if !out && !err {
                    return;
                }
                let fd = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
                if fd >= 0 {
                    if out {
                        libc::dup2(fd, 1);
                    }
                    if err {
                        libc::dup2(fd, 2);
                    }
                    libc::close(fd);
                }
                if SIGNAL.load(Ordering::SeqCst) == 0 && !INTERRUPTED.load(Ordering::SeqCst) {
                    SIGNAL.store(sig, Ordering::SeqCst);
                    libc::raise(libc::SIGINT);
                }
            }
        }
        // SAFETY: installs a handler that only makes async-signal-safe calls.
        unsafe {
            libc::signal(libc::SIGPIPE, on_pipe as *const () as libc::sighandler_t);
        }
    }
}

/// What a second Ctrl-C does before the process exits: removes the folders still being written
/// ([`Scrap`]) and says what is left.
pub(super) fn stop_at_once() -> String {
    let scrapped: Vec<PathBuf> = std::mem::take(&mut *SCRAP.lock().unwrap_or_else(|e| e.into_inner()));
    let training = TRAINING.load(Ordering::SeqCst).then(|| {
        let step = |s: usize| (s != NO_STEP).then_some(s);
        (step(SAVED_STEP.load(Ordering::SeqCst)), step(SAVING_STEP.load(Ordering::SeqCst)))
    });
    stop_at_once_with(&second_label(), &scrapped, training)
}

/// When the first interruption came and its name ([`interruption`] then): a delivery within
/// [`SECOND_CTRLC_AFTER`] of it is the same one, and the second's message names both. `None`
/// before the first, and again after [`clear_interruption`].
pub(super) static FIRST: std::sync::Mutex<Option<(std::time::Instant, &'static str)>> = std::sync::Mutex::new(None);

fn first() -> Option<std::time::Instant> {
    FIRST.lock().unwrap_or_else(|e| e.into_inner()).map(|(t, _)| t)
}

/// Set by the SIGTERM handler before it raises SIGINT: the delivery the Ctrl-C handler sees next
/// is a SIGTERM (a plain SIGINT leaves it unset).
pub(super) static TERM_NOW: AtomicBool = AtomicBool::new(false);

/// What the interruption being handled is (read once per delivery: [`TERM_NOW`]).
pub(super) static THIS_IS_TERM: AtomicBool = AtomicBool::new(false);

/// "second Ctrl-C", or "SIGTERM after Ctrl-C" when the two differ (the message said "second
/// SIGTERM" after a Ctrl-C and a SIGTERM).
pub(super) fn second_label() -> String {
    let second = if THIS_IS_TERM.load(Ordering::SeqCst) { "SIGTERM" } else { "Ctrl-C" };
    let first = FIRST.lock().unwrap_or_else(|e| e.into_inner()).map(|(_, name)| name);
    label_of(first.unwrap_or(second), second)
}

pub(super) fn label_of(first: &str, second: &str) -> String {
    if first == second { format!("second {second}") } else { format!("{second} after {first}") }
}

/// [`stop_at_once`] for these folders and, when a run is training, the step of its last
/// checkpoint and the step whose checkpoint is being saved (if any).
pub(super) fn stop_at_once_with(
    label: &str,
    scrapped: &[PathBuf],
    training: Option<(Option<usize>, Option<usize>)>,
) -> String {
    for dir in scrapped {
        let _ = std::fs::remove_dir_all(dir);
    }
    if let Some((saved, saving)) = training {
        let stopped = match saving {
            Some(s) => format!("stopped at once, without finishing the save of step {s}"),
            None => "stopped at once".into(),
        };
        let left = match saved {
            Some(s) => format!("the checkpoint of step {s} is intact (`--resume` continues from it)"),
            None => "no checkpoint had been saved yet: nothing to resume (start the run again)".into(),
        };
        format!("{label}: {stopped}; {left}")
    } else if scrapped.is_empty() {
        format!("{label}: stopped at once")
    } else {
        let list: Vec<String> = scrapped.iter().map(|p| format!("'{}'", p.display())).collect();
        format!("{label}: stopped at once; removed the unfinished {}", list.join(", "))
    }
}

/// A training run is in progress in this process (its checkpoint is what a second Ctrl-C
/// leaves): says so in the second Ctrl-C's message.
pub(crate) static TRAINING: AtomicBool = AtomicBool::new(false);

/// The step of the training run's last complete checkpoint ([`NO_STEP`]: none yet).
pub(crate) static SAVED_STEP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(NO_STEP);

/// The step whose checkpoint is being saved ([`NO_STEP`]: none is).
pub(crate) static SAVING_STEP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(NO_STEP);

pub(crate) const NO_STEP: usize = usize::MAX;

/// The `--out` folders made for runs still starting (no step trained, nothing but their lock
/// in them), removed when Ctrl-C ends the process then.
pub(super) static STARTING: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// A run starting in `dir`, a folder it made: Ctrl-C before the run listens for it (the handler
/// is installed now) ends the process at once, removing the folder if it holds nothing else,
/// and the run's lock.
pub(crate) struct StartingRun(Option<PathBuf>);

impl StartingRun {
    pub(crate) fn new(dir: &Path, made: bool) -> StartingRun {
        set_ctrlc_handler();
        if made {
            STARTING.lock().unwrap_or_else(|e| e.into_inner()).push(dir.to_path_buf());
        }
        StartingRun(made.then(|| dir.to_path_buf()))
    }
}

impl Drop for StartingRun {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            STARTING.lock().unwrap_or_else(|e| e.into_inner()).retain(|p| p != d);
        }
    }
}

/// Folders being written that a second Ctrl-C removes before the process exits (the first
/// stops cleanly and their writer removes them): `ddl data prepare`'s output, a shard set being
/// made in the cache.
pub(super) static SCRAP: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// A folder being written, removed if the process is stopped at once (a second Ctrl-C) while
/// this lives.
pub struct Scrap(PathBuf);

impl Scrap {
    pub fn new(dir: &Path) -> Scrap {
        SCRAP.lock().unwrap_or_else(|e| e.into_inner()).push(dir.to_path_buf());
        Scrap(dir.to_path_buf())
    }
}

impl Drop for Scrap {
    fn drop(&mut self) {
        SCRAP.lock().unwrap_or_else(|e| e.into_inner()).retain(|p| p != &self.0);
    }
}

/// Ctrl-C stops cleanly (sets [`interrupted`]) while this lives: work that cleans up after
/// itself, in a command that otherwise ends at once on Ctrl-C (`ddl eval` making a corpus's
/// shard cache).
pub struct CtrlcScope(());

impl CtrlcScope {
    pub fn new() -> Self {
        set_ctrlc_handler();
        SCOPES.fetch_add(1, Ordering::SeqCst);
        CtrlcScope(())
    }
}

impl Default for CtrlcScope {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for CtrlcScope {
    fn drop(&mut self) {
        SCOPES.fetch_sub(1, Ordering::SeqCst);
    }
}

/// As if Ctrl-C had been pressed now, where the process stops cleanly on it (fault injection
/// for the tests).
pub(crate) fn interrupt_now() {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Whether Ctrl-C was pressed since [`install_ctrlc`] (or since [`clear_interruption`]).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Forgets a Ctrl-C that has been handled by stopping one piece of work, the process going on
/// (`ddl chat`'s reply, after which the chat returns to its prompt): the next Ctrl-C is a first
/// one again, stopping cleanly, and a second after it ends the process as before. Only Ctrl-C is
/// forgotten: after SIGTERM or SIGPIPE the process must end, and this does nothing. Commands
/// that stop for good on an interruption (training, `ddl generate`) never call it.
pub fn clear_interruption() {
    if SIGNAL.load(Ordering::SeqCst) != 0 {
        return;
    }
    // (The time first, so that a Ctrl-C coming once the flag is down is timed afresh.)
    *FIRST.lock().unwrap_or_else(|e| e.into_inner()) = None;
    THIS_IS_TERM.store(false, Ordering::SeqCst);
    INTERRUPTED.store(false, Ordering::SeqCst);
}
