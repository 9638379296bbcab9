//! What the window draws: the top bar, the messages, the generation controls, the central view of
//! the chosen tab, and the open-file dialog.

use super::*;

impl VizApp {
    /// The whole window.
    pub fn ui_root(&mut self, ui: &mut egui::Ui) {
        self.poll();
        let ctx = ui.ctx().clone();
        let dropped = ctx.input(|i| i.raw.dropped_files.clone());
        if !dropped.is_empty() {
            self.open_dropped(dropped, &ctx);
        }
        let arrived = std::mem::take(&mut *self.incoming.lock().unwrap());
        for (name, r) in arrived {
            match r {
                Ok(bytes) => self.open_bytes(&name, bytes),
                Err(e) => self.error(format!("cannot read {name}: {e}")),
            }
        }
        if let Some(m) = &mut self.metrics {
            match m.poll_every(std::time::Duration::from_secs(1)) {
                Ok(_) => {}
                Err(e) => {
                    let e = format!("run {}: {e}", m.dir.display());
                    self.metrics = None;
                    self.error(e);
                }
            }
            ctx.request_repaint_after(std::time::Duration::from_secs(1));
        }
        if self.experiment.is_some() {
            if self.experiment_checked.is_none_or(|t| t.elapsed() >= EXPERIMENT_EVERY) {
                self.follow_experiment();
            }
            ctx.request_repaint_after(EXPERIMENT_EVERY);
        }
        if self.busy() {
            // The worker's events redraw the window; this only notices a quiet worker finishing.
            ctx.request_repaint_after(std::time::Duration::from_millis(500));
        }
        egui::Panel::top("top-bar").show(ui, |ui| self.top_bar(ui));
        if !self.messages.is_empty() || !self.status.is_empty() {
            egui::Panel::bottom("messages").show(ui, |ui| self.messages_ui(ui));
        }
        egui::Panel::left("generation").resizable(true).default_size(250.0).show(ui, |ui| self.generation_ui(ui));
        egui::CentralPanel::default().show(ui, |ui| self.central(ui));
        self.dialog_ui(&ctx);
        self.automation(&ctx);
    }

    pub(super) fn top_bar(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            ui.heading("ddl-viz");
            if ui.button("Open…").on_hover_text("Open a checkpoint, a training run or a trace file").clicked() {
                if let Some(hook) = &self.open_hook {
                    hook();
                    return;
                }
                let start = self
                    .model
                    .as_ref()
                    .map(|m| m.dir.clone())
                    .or_else(|| std::env::current_dir().ok())
                    .unwrap_or_default();
                self.dialog = Some(OpenDialog { path: start.display().to_string() });
            }
            ui.separator();
            match &self.model {
                Some(m) => {
                    let c = &m.config;
                    // (A baseline has no value axis: no d_v to show.)
                    let dv = if c.variant.is_ddl() { format!(" d_v={}", c.m()) } else { String::new() };
                    ui.label(format!(
                        "{} · {} · d={} L={}{dv} · vocab {} · step {}",
                        m.dir.display(),
                        c.variant,
                        c.d_model,
                        c.n_layers,
                        m.vocab,
                        m.step
                    ))
                    .on_hover_text(format!("model thread on {}", m.adapter));
                }
                None => {
                    ui.weak("no model loaded");
                }
            }
        });
    }

    pub(super) fn messages_ui(&mut self, ui: &mut egui::Ui) {
        let mut remove = None;
        for (i, (lvl, m)) in self.messages.iter().enumerate().rev().take(4) {
            ui.horizontal(|ui| {
                let (icon, c) = match lvl {
                    Level::Error => ("error:", Color32::from_rgb(240, 90, 80)),
                    Level::Info => ("note:", Color32::from_rgb(120, 170, 240)),
                };
                if ui.small_button("x").on_hover_text("dismiss").clicked() {
                    remove = Some(i);
                }
                ui.colored_label(c, RichText::new(icon).strong());
                // (Wrapped within the window: a long note is read whole, not cut at its edge.)
                ui.add(egui::Label::new(m).wrap());
            });
        }
        // (The latest four are shown: the others are counted, not hidden without a word.)
        let earlier = self.messages.len().saturating_sub(4);
        if earlier > 0 {
            ui.weak(format!("{earlier} earlier message(s): dismiss these (x) to read them"));
        }
        if let Some(i) = remove {
            self.messages.remove(i);
        }
        if !self.status.is_empty() {
            ui.weak(&self.status);
        }
    }

    pub(super) fn generation_ui(&mut self, ui: &mut egui::Ui) {
        ui.strong("Prompt");
        let l = ui.label("text to continue");
        ui.add(egui::TextEdit::multiline(&mut self.prompt).desired_rows(4).desired_width(f32::INFINITY))
            .labelled_by(l.id);
        let busy = self.busy();
        let has_model = self.model.is_some();
        ui.horizontal(|ui| {
            if ui.add_enabled(has_model && !busy, egui::Button::new("Generate")).clicked() {
                self.generate();
            }
            if ui.add_enabled(busy, egui::Button::new("Stop")).clicked() {
                self.stop();
            }
            if ui.add_enabled(has_model && !busy, egui::Button::new("Step one token")).clicked() {
                self.step_one();
            }
        });
        if busy {
            // A static label, not a spinner: a spinner redraws every frame, which costs the
            // model its speed where the window is drawn in software (see worker::STREAM_REPAINT).
            ui.label(format!(
                "working… {} so far",
                ddl::plural(self.trace.rows.iter().filter(|r| !r.prompt).count(), "token")
            ));
        }
        ui.separator();
        ui.strong("Sampling");
        let s = &mut self.sampling;
        // The sliders span the usual values; a value beyond them (typed in the number, or from a
        // trace: `ddl generate --temperature 3`) is kept as it is, and checked below.
        let free = egui::SliderClamping::Never;
        ui.add(egui::Slider::new(&mut s.temperature, 0.0..=2.0).clamping(free).text("temperature"))
            .on_hover_text("0 = greedy");
        ui.add(egui::Slider::new(&mut s.top_k, 0..=200).clamping(free).text("top-k")).on_hover_text("0 = all tokens");
        ui.add(egui::Slider::new(&mut s.top_p, 0.01..=1.0).clamping(free).text("top-p"));
        ui.add(egui::Slider::new(&mut s.min_p, 0.0..=0.5).clamping(free).text("min-p"))
            .on_hover_text("keep the tokens at least this fraction as likely as the most likely one; 0 = off");
        ui.add(egui::Slider::new(&mut s.repetition_penalty, 1.0..=2.0).clamping(free).text("repetition"))
            .on_hover_text("repetition penalty: 1 = off; above 1, tokens already in the text are less likely");
        // (Up to 512, or what --generate asked for.)
        let top = self.max_tokens.max(512);
        ui.add(egui::Slider::new(&mut self.max_tokens, 1..=top).text("max tokens"));
        ui.horizontal(|ui| {
            let l = ui.label("seed");
            // A text field, not a number dragger: every u64 exactly (a dragger's f64 rounds
            // seeds above 2^53, and the seed shown would not be the seed used).
            let mut text = self.seed_text.clone().unwrap_or_else(|| s.seed.to_string());
            let r = ui.add(egui::TextEdit::singleline(&mut text).desired_width(150.0)).labelled_by(l.id);
            if r.changed() {
                if let Ok(v) = text.trim().parse::<u64>() {
                    s.seed = v;
                }
                self.seed_text = Some(text.clone());
            }
            if !r.has_focus() {
                self.seed_text = None;
            }
            if text.trim().parse::<u64>().is_err() {
                ui.colored_label(Color32::from_rgb(240, 90, 80), "a whole number from 0")
                    .on_hover_text(format!("the seed used is {}", s.seed));
            }
        });
        if let Err(e) = s.validate() {
            ui.colored_label(Color32::from_rgb(240, 90, 80), e);
        }
    }

    pub(super) fn central(&mut self, ui: &mut egui::Ui) {
        self.central_rect = Some(ui.max_rect());
        // ← / → move the selection when no text field has the keyboard.
        if !self.trace.is_empty() && ui.ctx().memory(|m| m.focused().is_none()) {
            let (left, right) =
                ui.input(|i| (i.key_pressed(egui::Key::ArrowLeft), i.key_pressed(egui::Key::ArrowRight)));
            let last = self.trace.len() - 1;
            if right {
                self.sel.token = Some(self.sel.token.map_or(0, |t| (t + 1).min(last)));
            }
            if left {
                self.sel.token = Some(self.sel.token.map_or(last, |t| t.saturating_sub(1)));
            }
        }
        panels::tokens::controls(ui, &self.trace, &mut self.sel, &mut self.chip_colour);
        if let Some(s) = &self.shown
            && !self.trace.is_empty()
        {
            let then = if self.model.is_some() { "; Generate replaces it" } else { "" };
            ui.add(egui::Label::new(egui::RichText::new(format!("showing {s}{then}")).weak()).wrap());
        }
        egui::ScrollArea::vertical().id_salt("chips").max_height(130.0).auto_shrink([false, true]).show(ui, |ui| {
            if self.trace.is_empty() {
                ui.weak(
                    "The text appears here as tokens while it is generated; click a token (or use the arrow keys) to select it.",
                );
            }
            panels::tokens::chips(ui, &self.trace, &mut self.sel, self.chip_colour);
        });
        ui.separator();
        ui.horizontal_wrapped(|ui| {
            for t in Tab::ALL {
                ui.selectable_value(&mut self.tab, t, t.name());
            }
        });
        ui.separator();
        match self.tab {
            Tab::BetaMap => panels::beta_map::show(ui, &self.trace, &mut self.sel),
            Tab::Eigen => panels::eigen::show(ui, &self.trace, &mut self.sel),
            Tab::KDirs => panels::kdirs::show(ui, &self.trace, &mut self.sel),
            Tab::Writes => panels::writes::show(ui, &self.trace, &mut self.sel),
            Tab::Lens => {
                let can = if cfg!(target_arch = "wasm32") {
                    Err("the lens runs in the desktop app (ddl-viz), or with ddl generate --lens / ddl eval --lens")
                } else if self.model.is_none() {
                    Err("open a checkpoint to compute the lens (Open… or --checkpoint DIR)")
                } else if self.busy() {
                    Err("the model is busy: wait for it or Stop")
                } else if let Some(why) = self.lens_mismatch() {
                    Err(why)
                } else {
                    Ok(())
                };
                let ask = egui::ScrollArea::vertical()
                    .id_salt("lens")
                    .show(ui, |ui| panels::lens::show(ui, &self.trace, &mut self.sel, can))
                    .inner;
                if ask == panels::lens::Ask::Compute {
                    self.compute_lens();
                }
            }
            Tab::Interventions => {
                let (s, ddl) =
                    self.model.as_ref().map_or((0, false), |m| (2 * m.config.n_layers, m.config.variant.is_ddl()));
                let busy = self.busy();
                let action = egui::ScrollArea::vertical()
                    .id_salt("interventions")
                    .show(ui, |ui| {
                        panels::interventions::show(ui, &mut self.interventions, s, ddl, busy, self.sel.sublayer)
                    })
                    .inner;
                match action {
                    Some(panels::interventions::Action::Compare(specs)) => self.compare(specs),
                    Some(panels::interventions::Action::Show(i)) => self.show_compared(i),
                    None => {}
                }
            }
            Tab::Training => panels::dashboard::show(ui, self.metrics.as_ref()),
            Tab::Experiment => panels::experiment::show(ui, self.experiment.as_ref()),
        }
    }

    pub(super) fn dialog_ui(&mut self, ctx: &egui::Context) {
        let Some(mut d) = self.dialog.take() else { return };
        let mut open = true;
        let mut action: Option<(u8, PathBuf)> = None;
        egui::Window::new("Open…").open(&mut open).default_size([520.0, 420.0]).show(ctx, |ui| {
            ui.horizontal(|ui| {
                let l = ui.label("path");
                ui.add(egui::TextEdit::singleline(&mut d.path).desired_width(380.0)).labelled_by(l.id);
                if ui.button("Up").clicked()
                    && let Some(p) = Path::new(&d.path).parent()
                {
                    d.path = p.display().to_string();
                }
            });
            let p = PathBuf::from(&d.path);
            let kind = classify(&p);
            ui.horizontal(|ui| {
                if ui.add_enabled(kind.checkpoint, egui::Button::new("Open checkpoint")).clicked() {
                    action = Some((0, p.clone()));
                }
                if ui.add_enabled(kind.run, egui::Button::new("Open run")).clicked() {
                    action = Some((1, p.clone()));
                }
                if ui.add_enabled(kind.trace, egui::Button::new("Open trace")).clicked() {
                    action = Some((2, p.clone()));
                }
                if ui
                    .add_enabled(kind.experiment, egui::Button::new("Open experiment"))
                    .on_hover_text("the validation curves of every run in this folder (or this run) on one plot")
                    .clicked()
                {
                    action = Some((3, p.clone()));
                }
            });
            ui.separator();
            let dir = if p.is_dir() { p.clone() } else { p.parent().map(Path::to_path_buf).unwrap_or_default() };
            match std::fs::read_dir(&dir) {
                Ok(rd) => {
                    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
                    entries.sort();
                    egui::ScrollArea::vertical().id_salt("open-list").max_height(300.0).show(ui, |ui| {
                        for e in entries {
                            let name = e.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
                            if name.starts_with('.') {
                                continue;
                            }
                            let k = classify(&e);
                            if !e.is_dir() && !k.trace {
                                continue;
                            }
                            let mut tags = Vec::new();
                            if k.checkpoint {
                                tags.push("checkpoint");
                            }
                            if k.run {
                                tags.push("run");
                            }
                            if k.trace {
                                tags.push("trace");
                            }
                            let label = format!(
                                "{}{}  {}",
                                name,
                                if e.is_dir() { "/" } else { "" },
                                if tags.is_empty() { String::new() } else { format!("[{}]", tags.join(", ")) }
                            );
                            if ui.selectable_label(false, label).clicked() {
                                d.path = e.display().to_string();
                            }
                        }
                    });
                }
                Err(e) => {
                    ui.colored_label(Color32::from_rgb(240, 90, 80), format!("cannot list {}: {e}", dir.display()));
                }
            }
        });
        match action {
            Some((0, p)) => self.open_checkpoint(&p),
            Some((1, p)) => self.open_run_view(&p),
            Some((3, p)) => self.open_experiment(&p, false),
            Some((_, p)) => self.open_trace(&p),
            None => {
                if open {
                    self.dialog = Some(d);
                }
            }
        }
    }
}
