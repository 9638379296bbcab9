//! The logit lens: rows = the states the model's head can read (after the embedding, after each
//! sublayer's write; the last is the model's output), columns = tokens, colour = the probability
//! the head read on that state gives the token that came ([`ddl::generate::continuation_lens`]),
//! computed on the model thread when asked (a checkpoint is needed; not in a browser).

use eframe::egui::{self, Align2, Color32, FontId, Rect, Sense, Stroke, StrokeKind, pos2, vec2};

use super::Selection;
use crate::colors::magnitude_color;
use crate::trace::{Lens, TraceData, chip_text};

/// What the panel asks of the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    Nothing,
    /// Compute the lens of the text shown.
    Compute,
}

/// The panel: a button to compute (or recompute) the lens where a model is loaded (`can`), the
/// map, and the selected token's column as a table.
pub fn show(ui: &mut egui::Ui, data: &TraceData, sel: &mut Selection, can: Result<(), &str>) -> Ask {
    let mut ask = Ask::Nothing;
    ui.horizontal_wrapped(|ui| {
        ui.strong("Logit lens");
        ui.weak(
            "p of each token under the model's own head read on the state after the embedding and after each \
             sublayer's write (a baseline model's: its residual addition; the last row: the model's output); teacher-forced over the text, the model as trained",
        );
    });
    if data.len() < 2 {
        ui.weak("No text yet: open a checkpoint and generate (the lens needs two tokens or more).");
        return ask;
    }
    let stale = data.lens.as_ref().is_some_and(|l| l.logprob.len() != data.len());
    ui.horizontal(|ui| {
        let label = match (&data.lens, stale) {
            (None, _) => "Compute the lens",
            (Some(_), true) => "Compute again (the text changed)",
            (Some(_), false) => "Compute again",
        };
        match can {
            Ok(()) => {
                if ui.button(label).clicked() {
                    ask = Ask::Compute;
                }
            }
            Err(why) => {
                ui.add_enabled(false, egui::Button::new(label)).on_disabled_hover_text(why);
                ui.weak(why);
            }
        }
    });
    let Some(lens) = data.lens.as_ref().filter(|_| !stale) else {
        return ask;
    };
    legend(ui);
    map(ui, data, lens, sel);
    if let Some(t) = sel.token.filter(|&t| lens.logprob.get(t).is_some_and(|r| !r.is_empty())) {
        ui.separator();
        ui.strong(format!("{}: p at each state", super::token_label(data, t)));
        egui::Grid::new("lens-token").striped(true).num_columns(4).show(ui, |ui| {
            for h in ["state", "p of the token", "rank", "the head's likeliest there"] {
                ui.label(egui::RichText::new(h).strong());
            }
            ui.end_row();
            for (s, name) in lens.states.iter().enumerate() {
                let c = &lens.logprob[t][s];
                ui.label(name.as_str());
                ui.monospace(format!("{:.4}", c.logprob.exp()));
                ui.monospace(c.rank.to_string());
                ui.monospace(format!("“{}” {:.4}", chip_text(&c.top_text), c.top_logprob.exp()));
                ui.end_row();
            }
        });
    }
    ask
}

/// The colour scale of p.
fn legend(ui: &mut egui::Ui) {
    let w = 240.0f32.min(ui.available_width() - 20.0).max(120.0);
    let (resp, painter) = ui.allocate_painter(vec2(w, 30.0), Sense::hover());
    let bar = Rect::from_min_size(resp.rect.min, vec2(w, 12.0));
    let n = 60;
    for i in 0..n {
        let x0 = bar.left() + w * i as f32 / n as f32;
        let x1 = bar.left() + w * (i + 1) as f32 / n as f32;
        painter.rect_filled(
            Rect::from_x_y_ranges(x0..=x1 + 0.5, bar.y_range()),
            0.0,
            magnitude_color((i as f32 + 0.5) / n as f32),
        );
    }
    let (text, font) = (ui.visuals().text_color(), FontId::proportional(11.0));
    painter.text(pos2(bar.left(), bar.bottom() + 2.0), Align2::LEFT_TOP, "p 0", font.clone(), text);
    painter.text(pos2(bar.right(), bar.bottom() + 2.0), Align2::RIGHT_TOP, "1", font, text);
}

/// The map; clicking a column selects the token.
fn map(ui: &mut egui::Ui, data: &TraceData, lens: &Lens, sel: &mut Selection) {
    let (rows, t_n) = (lens.states.len(), lens.logprob.len());
    let (label_w, text_h) = (86.0, 18.0);
    let avail = (ui.available_width() - label_w - 8.0).max(50.0);
    let cw = (avail / t_n as f32).max(5.0);
    let ch = ((ui.available_height() * 0.6 - text_h - 24.0) / rows as f32).clamp(10.0, 60.0);
    egui::ScrollArea::horizontal().id_salt("lens-map-scroll").show(ui, |ui| {
        let size = vec2(label_w + cw * t_n as f32 + 4.0, ch * rows as f32 + text_h + 4.0);
        let (resp, painter) = ui.allocate_painter(size, Sense::click());
        let origin = resp.rect.min + vec2(label_w, 0.0);
        let text = ui.visuals().text_color();
        let labels = super::row_labels(ui, &painter, resp.rect.left(), origin, ch, &lens.states);
        ui.data_mut(|d| d.insert_temp(super::row_labels_id("lens"), labels));
        for (t, row) in lens.logprob.iter().enumerate() {
            for i in 0..rows {
                let cell = Rect::from_min_size(origin + vec2(cw * t as f32, ch * i as f32), vec2(cw, ch));
                // (The first token: nothing predicted it.)
                let c = row.get(i).map_or(Color32::from_gray(60), |c| magnitude_color(c.logprob.exp() as f32));
                painter.rect_filled(cell.shrink(0.5), 0.0, c);
            }
        }
        let mono = FontId::monospace(11.0);
        let char_w = ui.fonts_mut(|f| f.glyph_width(&mono, 'm')).max(1.0);
        let every = ((2.0 * char_w / cw).ceil() as usize).max(1);
        let y0 = origin.y + ch * rows as f32 + 2.0;
        for t in (0..t_n.min(data.len())).step_by(every) {
            let x = origin.x + cw * (t as f32 + 0.5);
            let shown: String = chip_text(&data.rows[t].trace.text).chars().take(2).collect();
            painter.text(pos2(x, y0), Align2::CENTER_TOP, shown, mono.clone(), text);
        }
        if let Some(t) = sel.token.filter(|&t| t < t_n) {
            let col = Rect::from_min_size(origin + vec2(cw * t as f32, 0.0), vec2(cw, ch * rows as f32));
            painter.rect_stroke(col, 0.0, Stroke::new(2.0, ui.visuals().strong_text_color()), StrokeKind::Outside);
        }
        let cell_at = super::grid_cell(origin, vec2(cw, ch), t_n, rows);
        if resp.clicked()
            && let Some((t, _)) = resp.interact_pointer_pos().and_then(cell_at)
        {
            sel.token = Some(t);
        }
        if let Some((t, i)) = resp.hover_pos().and_then(cell_at) {
            resp.on_hover_ui_at_pointer(|ui| {
                ui.label(super::token_label(data, t));
                ui.label(&lens.states[i]);
                match lens.logprob[t].get(i) {
                    Some(c) => {
                        ui.label(format!("p = {:.4} (rank {})", c.logprob.exp(), c.rank));
                        ui.label(format!(
                            "the head's likeliest: “{}” {:.4}",
                            chip_text(&c.top_text),
                            c.top_logprob.exp()
                        ));
                    }
                    None => {
                        ui.label("the text's first token: nothing predicted it");
                    }
                }
            });
        }
    });
}
