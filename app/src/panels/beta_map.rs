//! The β map: rows = sublayers, columns = tokens (their text underneath, the index on hover),
//! colour over (0, 2); it fills its panel, and scrolls where the rows or columns do not fit.

use eframe::egui::{self, Align2, Color32, FontId, Rect, Sense, Stroke, StrokeKind, pos2, vec2};

use super::Selection;
use crate::colors::{self, beta_color};
use crate::trace::{TraceData, chip_text, regime_index, sublayer_name};

/// The β colour scale with the three regimes named.
pub fn legend(ui: &mut egui::Ui) {
    let w = 320.0f32.min(ui.available_width() - 20.0).max(120.0);
    let (resp, painter) = ui.allocate_painter(vec2(w, 34.0), Sense::hover());
    let r = resp.rect;
    let bar = Rect::from_min_size(r.min, vec2(w, 12.0));
    let n = 80;
    for i in 0..n {
        let x0 = bar.left() + w * i as f32 / n as f32;
        let x1 = bar.left() + w * (i + 1) as f32 / n as f32;
        let b = 2.0 * (i as f32 + 0.5) / n as f32;
        painter.rect_filled(Rect::from_x_y_ranges(x0..=x1 + 0.5, bar.y_range()), 0.0, beta_color(b));
    }
    let text = ui.visuals().text_color();
    let font = FontId::proportional(11.0);
    for (b, label) in [(0.0, "0 identity"), (1.0, "1 projection"), (2.0, "2 reflection")] {
        let x = bar.left() + w * b / 2.0;
        painter.line_segment([pos2(x, bar.bottom()), pos2(x, bar.bottom() + 4.0)], Stroke::new(1.0, text));
        let align = if b == 0.0 {
            Align2::LEFT_TOP
        } else if b == 2.0 {
            Align2::RIGHT_TOP
        } else {
            Align2::CENTER_TOP
        };
        painter.text(pos2(x, bar.bottom() + 5.0), align, label, font.clone(), text);
    }
    for b in [0.5f32, 1.5] {
        let x = bar.left() + w * b / 2.0;
        painter.line_segment([pos2(x, bar.top()), pos2(x, bar.bottom())], Stroke::new(1.0, Color32::from_gray(20)));
    }
    resp.on_hover_text("β: 0 keeps the state (identity, λ = 1−β ≈ 1), 1 replaces the k-component by v (projection, λ ≈ 0), 2 reflects it (λ ≈ −1). Marks at 0.5 and 1.5 are the regime thresholds. A β outside [0, 2] (an --allow-out-of-range intervention) amplifies along k (λ beyond ±1), none of the three: it shows in its nearer end's colour and its hover says \"outside [0, 2]\".");
}

/// The heatmap; clicking a column selects that token.
pub fn show(ui: &mut egui::Ui, data: &TraceData, sel: &mut Selection) {
    ui.horizontal_wrapped(|ui| {
        ui.strong("β per sublayer and token");
        ui.weak("(hover a cell for details, click to select the token and the sublayer)");
    });
    legend(ui);
    if super::empty_note(ui, data) {
        return;
    }
    let s = data.s();
    let t_n = data.len();
    let names: Vec<String> = (0..s).map(sublayer_name).collect();
    let label_w = 78.0;
    let text_h = 18.0;
    let avail = (ui.available_width() - label_w - 8.0).max(50.0);
    // Columns share the width (at least 5 px: longer texts scroll); rows the height.
    let cw = (avail / t_n as f32).max(5.0);
    let ch = ((ui.available_height() - text_h - 24.0) / s as f32).clamp(10.0, 80.0);
    // (Both ways: a long text scrolls sideways, a model of many blocks — rows at least 10 points
    // high — down to its last sublayer.)
    egui::ScrollArea::both().id_salt("beta-map-scroll").show(ui, |ui| {
        let size = vec2(label_w + cw * t_n as f32 + 4.0, ch * s as f32 + text_h + 4.0);
        let (resp, painter) = ui.allocate_painter(size, Sense::click());
        let origin = resp.rect.min + vec2(label_w, 0.0);
        let text = ui.visuals().text_color();
        let labels = super::row_labels(ui, &painter, resp.rect.left(), origin, ch, &names);
        ui.data_mut(|d| d.insert_temp(super::row_labels_id("beta"), labels));
        for t in 0..t_n {
            for i in 0..s {
                let cell = Rect::from_min_size(origin + vec2(cw * t as f32, ch * i as f32), vec2(cw, ch));
                let c = data.beta(t, i).map(beta_color).unwrap_or(Color32::from_gray(60));
                painter.rect_filled(cell.shrink(0.5), 0.0, c);
            }
            if data.rows[t].prompt && (t + 1 == t_n || !data.rows[t + 1].prompt) {
                // The end of the prompt.
                let x = origin.x + cw * (t + 1) as f32;
                painter.line_segment(
                    [pos2(x, origin.y - 1.0), pos2(x, origin.y + ch * s as f32 + 1.0)],
                    Stroke::new(2.0, text),
                );
            }
        }
        // The tokens' text under their columns (every token when the columns are wide enough
        // for a character or two, else every n-th, marked with a tick); the index is on hover.
        let mono = FontId::monospace(11.0);
        let char_w = ui.fonts_mut(|f| f.glyph_width(&mono, 'm')).max(1.0);
        let every = ((2.0 * char_w / cw).ceil() as usize).max(1);
        let fits = ((cw * every as f32 - 2.0) / char_w).floor().max(1.0) as usize;
        let y0 = origin.y + ch * s as f32 + 2.0;
        for t in (0..t_n).step_by(every) {
            let x = origin.x + cw * (t as f32 + 0.5);
            let full = chip_text(&data.rows[t].trace.text);
            let shown: String = if full.chars().count() > fits {
                full.chars().take(fits.saturating_sub(1).max(1)).chain(['…']).collect()
            } else {
                full
            };
            if every > 1 {
                painter.line_segment([pos2(x, y0 - 2.0), pos2(x, y0)], Stroke::new(1.0, text));
            }
            painter.text(pos2(x, y0), Align2::CENTER_TOP, shown, mono.clone(), text);
        }
        if let Some(t) = sel.token.filter(|&t| t < t_n) {
            let col = Rect::from_min_size(origin + vec2(cw * t as f32, 0.0), vec2(cw, ch * s as f32));
            painter.rect_stroke(col, 0.0, Stroke::new(2.0, ui.visuals().strong_text_color()), StrokeKind::Outside);
        }
        // The first cell's rectangle, for tests that hover or click a given cell.
        ui.data_mut(|d| d.insert_temp(cell_rect_id(), Rect::from_min_size(origin, vec2(cw, ch))));
        let cell_at = super::grid_cell(origin, vec2(cw, ch), t_n, s);
        let hovered = resp.hover_pos().and_then(cell_at);
        if resp.clicked()
            && let Some((t, i)) = resp.interact_pointer_pos().and_then(cell_at)
        {
            // The token, and the sublayer (for the per-layer views and the Interventions view).
            sel.token = Some(t);
            sel.sublayer = i;
        }
        if let Some((t, i)) = hovered {
            resp.on_hover_ui_at_pointer(|ui| {
                ui.label(super::token_label(data, t));
                ui.label(sublayer_name(i));
                match data.beta(t, i) {
                    Some(b) => {
                        ui.label(format!("β = {b:.4}    1−β = {:.4}", 1.0 - b));
                        ui.label(format!("regime: {}", colors::REGIMES[regime_index(b)]));
                    }
                    // (A traced write whose β overflowed: the model's numbers, not a missing trace.)
                    None if data.has(t) => {
                        ui.label("β is not a finite number (NaN or infinite: the model's numbers overflowed)");
                    }
                    None => {
                        ui.label("no trace for this token");
                    }
                }
            });
        }
    });
}

/// Where [`show`] keeps the rectangle of its cell (token 0, sublayer 0) in the context's temp data.
pub fn cell_rect_id() -> egui::Id {
    egui::Id::unique("ddl-viz-beta-map-cell0")
}
