//! Opening what the window shows: a checkpoint, a run's curves, an experiment's runs (followed
//! while a live process trains there), a trace, and files dropped on the window or given as
//! bytes (the browser's picker and downloads).

use super::*;

impl VizApp {
    pub fn open_checkpoint(&mut self, dir: &Path) {
        match &self.worker {
            Some(w) => {
                w.send(Command::Load(dir.to_path_buf()));
                self.status = format!("loading {}…", dir.display());
            }
            None => self.error("no model thread in this view"),
        }
        // A run directory is also a checkpoint: its training curves are shown too, once it has
        // loaded (a kept checkpoint, RUN/checkpoints/NAME: its run's).
        let run = if dir.join("metrics.jsonl").exists() {
            Some(dir.to_path_buf())
        } else {
            dir.parent()
                .filter(|p| p.file_name().is_some_and(|n| n == "checkpoints"))
                .and_then(Path::parent)
                .filter(|r| r.join("metrics.jsonl").is_file())
                .map(Path::to_path_buf)
        };
        self.pending_curves = Some((dir.to_path_buf(), run));
    }

    /// The curves of the checkpoint `dir` just loaded (those of a run opened as one stay; those
    /// of an earlier checkpoint go).
    pub(super) fn show_checkpoint_curves(&mut self, dir: &Path) {
        let Some((_, run)) = self.pending_curves.take_if(|(d, _)| d == dir) else { return };
        if self.metrics.is_none() || self.metrics_of_checkpoint {
            self.metrics = None;
            if let Some(run) = run {
                self.open_run(&run);
                self.metrics_of_checkpoint = self.metrics.is_some();
            }
        }
    }

    /// Opens a checkpoint from the bytes of its `model.safetensors` (a browser's file, a
    /// download, a dropped file); `name` names it in messages.
    pub fn open_bytes(&mut self, name: &str, bytes: Vec<u8>) {
        match &self.worker {
            Some(w) => {
                w.send(Command::LoadBytes { name: name.to_string(), bytes: Arc::new(bytes) });
                self.status = format!("loading {name}…");
            }
            None => self.error("no model thread in this view"),
        }
    }

    /// Opens what was dropped on the window: a checkpoint's `model.safetensors` (bytes in a
    /// browser, a path on the desktop), a checkpoint or run folder, or a trace file.
    pub(super) fn open_dropped(&mut self, files: Vec<egui::DroppedFileHandle>, ctx: &egui::Context) {
        for f in files {
            // A browser reads the file asynchronously: its bytes join the queue of the next frames.
            #[cfg(target_arch = "wasm32")]
            {
                let (queue, ctx) = (self.incoming.clone(), ctx.clone());
                wasm_bindgen_futures::spawn_local(async move {
                    let name = f.path().display().to_string();
                    let r = f.bytes_async().await;
                    queue.lock().unwrap().push((name, r));
                    ctx.request_repaint();
                });
            }
            #[cfg(not(target_arch = "wasm32"))]
            {
                let _ = ctx;
                let p = f.path().to_path_buf();
                let model_file = p.file_name().is_some_and(|n| n == ddl::train::checkpoint::MODEL_FILE);
                let dir = if model_file { p.parent().map(Path::to_path_buf).unwrap_or_default() } else { p.clone() };
                let kind = classify(&dir);
                if kind.checkpoint {
                    self.open_checkpoint(&dir);
                } else if kind.trace {
                    self.open_trace(&dir);
                } else if kind.run {
                    self.open_run_view(&dir);
                } else {
                    self.error(format!(
                        "{}: not a checkpoint (a folder with model.safetensors, or that file), a run or a trace file",
                        p.display()
                    ));
                }
            }
        }
    }

    /// The queue whose checkpoint bytes the next frame opens (a browser page's file picker and
    /// downloads push to it).
    pub fn incoming(&self) -> Incoming {
        self.incoming.clone()
    }

    pub fn open_run(&mut self, dir: &Path) {
        match Metrics::open(dir) {
            Ok(m) => {
                self.status = format!("following {}", m.path().display());
                self.metrics = Some(m);
                self.metrics_of_checkpoint = false;
            }
            Err(e) => self.error(e),
        }
    }

    /// Opens a run as the user asked for it (Open run, a dropped run folder): its dashboard is
    /// shown, as an experiment opened is (the view stayed where it was, the curves out of sight).
    pub(super) fn open_run_view(&mut self, dir: &Path) {
        self.open_run(dir);
        if self.metrics.as_ref().is_some_and(|m| m.dir == dir) {
            self.tab = Tab::Training;
        }
    }

    /// Opens an experiment folder (or a folder of runs, or one run) in the Experiment view;
    /// `add`: beside the runs already shown.
    pub fn open_experiment(&mut self, dir: &Path, add: bool) {
        match crate::experiment::Experiment::open(dir) {
            Ok(e) => {
                let e = match (add, self.experiment.take()) {
                    (true, Some(mut old)) => {
                        old.merge(e);
                        old
                    }
                    (_, _) => e,
                };
                self.show_experiment(e);
            }
            Err(e) => self.error(e),
        }
    }

    /// Follows the Experiment view's folders while a live process trains there (`ddl experiment`,
    /// `ddl train`): reads them again — new runs, points and results — and once more after it ends.
    /// Called every [`EXPERIMENT_EVERY`] by the window; returns whether it read them again.
    pub fn follow_experiment(&mut self) -> bool {
        let Some(e) = &self.experiment else { return false };
        let live = e.live();
        let was = e.following;
        self.experiment_checked = Some(web_time::Instant::now());
        if !(live || was) {
            return false;
        }
        let again = e.reload();
        let read = again.is_some();
        if let Some(again) = again {
            self.experiment = Some(again);
        }
        if let Some(e) = &mut self.experiment {
            e.following = live;
        }
        read
    }

    pub(super) fn show_experiment(&mut self, e: crate::experiment::Experiment) {
        let n = e.runs.len();
        self.status = format!("experiment: {}", ddl::plural(n, "run"));
        self.experiment = Some(e);
        self.experiment_checked = None;
        self.tab = Tab::Experiment;
    }

    pub fn open_trace(&mut self, file: &Path) {
        match TraceData::load(file) {
            Ok(t) => {
                self.status = format!("trace {} ({} tokens)", file.display(), t.len());
                for n in &t.notes {
                    self.messages.push((Level::Info, n.clone()));
                }
                // The trace's prompt and sampling settings on the left, so that Generate with the
                // model that wrote it writes the same text again.
                if let Some(p) = &t.prompt {
                    self.prompt = p.clone();
                }
                if let Some(s) = &t.sampling {
                    self.sampling = s.clone();
                    self.max_tokens = t.len().max(1);
                }
                if let Some(iv) = &t.interventions {
                    let specs: Vec<String> = iv.split("; ").map(String::from).collect();
                    self.interventions.show_specs(&specs, t.s(), t.allow_out_of_range);
                }
                // What Generate will and will not do with it.
                let how = match (&t.sampling, &t.interventions) {
                    (None, _) if !t.turns.is_empty() => format!(
                        " (a chat of {}: Generate writes one continuation of the prompt on the left, not the \
                         chat again)",
                        ddl::plural(t.turns.len(), "turn")
                    ),
                    (None, _) => {
                        " (its prompt and sampling settings are not recorded: Generate does not write it again)"
                            .to_string()
                    }
                    (Some(_), Some(iv)) => format!(
                        " (generated under {iv}: Generate writes the model as trained, Generate both in the \
                         Interventions view compares the two)"
                    ),
                    (Some(_), None) => String::new(),
                };
                self.shown = Some(format!("the trace {}{how}", file.display()));
                self.trace = t;
                self.sel = Selection::default();
                // The text is the file's now: Step one token starts a new session from the
                // prompt (it continued the last one, onto the file's tokens), and a generation
                // still running stops, its tokens kept out of the file's, as does a comparison,
                // whose texts would replace the file's (a checkpoint loading beside the trace,
                // `--checkpoint` with `--trace`, goes on).
                self.session_prompt = None;
                if self.busy() && (self.gen_started.is_some() || self.comparing) {
                    self.stop();
                    self.detached = true;
                }
            }
            Err(e) => self.error(e),
        }
    }
}
