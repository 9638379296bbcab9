//! k directions: cosines between sublayers, a PCA of all k, how k turns, largest components.

use eframe::egui::{self, Align2, Color32, FontId, Rect, Sense, Stroke, pos2, vec2};
use egui_plot::{Line, Plot, Points};

use super::Selection;
use crate::colors;
use crate::trace::{TraceData, sublayer_name};

pub fn show(ui: &mut egui::Ui, data: &TraceData, sel: &mut Selection) {
    if super::empty_note(ui, data) {
        return;
    }
    let Some(t) = sel.shown_token(data) else { return };
    let s = data.s();
    let h = ((ui.available_height() - 60.0) * 0.5).clamp(140.0, 340.0);
    ui.columns(2, |cols| {
        let ui = &mut cols[0];
        ui.strong(format!("cos(k_i, k_j) between sublayers, {}", super::token_label(data, t)));
        if let Some(c) = data.k_cosines(t) {
            cosine_matrix(ui, &c, s, h - 20.0);
        }
        let ui = &mut cols[1];
        let (pca, fresh) = data.pca();
        if !fresh {
            ui.ctx().request_repaint_after(std::time::Duration::from_millis(500));
        }
        ui.strong(format!(
            "PCA of all k (tokens × sublayers): {:.0}% + {:.0}% of the variance",
            100.0 * pca.explained[0],
            100.0 * pca.explained[1]
        ));
        let mut items: Vec<(String, Color32)> = (0..s).map(|i| (sublayer_name(i), colors::layer_color(i, s))).collect();
        items.push(("selected token (ring)".into(), Color32::WHITE));
        super::legend_row(ui, &items);
        Plot::new("k-pca").height(h - 44.0).data_aspect(1.0).x_axis_label("PC1").y_axis_label("PC2").show(ui, |p| {
            for i in 0..s {
                let pts: Vec<[f64; 2]> = pca.points.iter().filter(|q| q.1 == i).map(|q| [q.2, q.3]).collect();
                p.points(Points::new(sublayer_name(i), pts).radius(2.5).color(colors::layer_color(i, s)));
            }
            let sel_pts: Vec<[f64; 2]> = pca.points.iter().filter(|q| q.0 == t).map(|q| [q.2, q.3]).collect();
            p.points(Points::new("selected token", sel_pts).radius(6.0).filled(false).color(Color32::WHITE));
        });
    });
    ui.columns(2, |cols| {
        let ui = &mut cols[0];
        ui.strong("How far k turns from one token to the next (degrees)");
        let items: Vec<(String, Color32)> = (0..s).map(|i| (sublayer_name(i), colors::layer_color(i, s))).collect();
        super::legend_row(ui, &items);
        Plot::new("k-turn")
            .height(ui.available_height().max(120.0))
            .include_y(0.0)
            .include_y(90.0)
            // Marks every 10°, 30° and 90° (in tens of that when zoomed far out): the default
            // grid (tens, then hundreds) left a plot of an ordinary height with its 0 alone
            // labelled.
            .y_grid_spacer(egui_plot::uniform_grid_spacer(|g| {
                let span = (g.bounds.1 - g.bounds.0).abs().max(1.0);
                let step = 10f64.max(10f64.powf((span / 20.0).log10().ceil()));
                [step, 3.0 * step, 9.0 * step]
            }))
            .y_axis_label("degrees")
            .x_axis_label("token")
            .show(ui, |p| {
                for i in 0..s {
                    let pts: Vec<[f64; 2]> = data
                        .k_turn(i)
                        .iter()
                        .enumerate()
                        .filter_map(|(tt, a)| a.map(|a| [super::place(tt) as f64, a]))
                        .collect();
                    p.line(Line::new(sublayer_name(i), pts).color(colors::layer_color(i, s)));
                }
                p.vline(egui_plot::VLine::new("selected", super::place(t) as f64).color(Color32::GRAY));
            });
        let ui = &mut cols[1];
        let i = sel.sublayer.min(s.saturating_sub(1));
        ui.strong(format!("Largest |k| components, {} (layer chosen above)", sublayer_name(i)));
        if let Some(k) = data.k(t, i) {
            let mut idx: Vec<usize> = (0..k.len()).collect();
            idx.sort_by(|&a, &b| k[b].abs().total_cmp(&k[a].abs()));
            let mx = k.iter().fold(0.0f32, |m, x| m.max(x.abs())).max(1e-12);
            egui::Grid::new("k-top").striped(true).num_columns(3).show(ui, |ui| {
                ui.strong("feature");
                ui.strong("k value");
                ui.strong("");
                ui.end_row();
                for &j in idx.iter().take(10) {
                    ui.monospace(format!("{j}"));
                    ui.monospace(format!("{:+.4}", k[j]));
                    let (r, painter) = ui.allocate_painter(vec2(120.0, 12.0), Sense::hover());
                    let w = 60.0 * k[j].abs() / mx;
                    let mid = r.rect.center().x;
                    let bar = if k[j] >= 0.0 {
                        Rect::from_x_y_ranges(mid..=mid + w, r.rect.y_range())
                    } else {
                        Rect::from_x_y_ranges(mid - w..=mid, r.rect.y_range())
                    };
                    painter.rect_filled(bar, 1.0, colors::signed_color(if k[j] >= 0.0 { 0.8 } else { -0.8 }));
                    ui.end_row();
                }
            });
        }
    });
}

/// An S×S matrix painted over [−1, 1] with values written in the cells when they fit.
fn cosine_matrix(ui: &mut egui::Ui, c: &[f64], s: usize, h: f32) {
    let (label, top) = (76.0, 58.0);
    let side = (h.min(ui.available_width() - 110.0) - top).max(40.0);
    let cell = side / s as f32;
    let (resp, painter) = ui.allocate_painter(vec2(side + label + 50.0, side + top), Sense::hover());
    let o = resp.rect.min + vec2(label, top);
    let text = ui.visuals().text_color();
    let font = FontId::proportional(10.0);
    for i in 0..s {
        painter.text(
            pos2(o.x - 3.0, o.y + cell * (i as f32 + 0.5)),
            Align2::RIGHT_CENTER,
            sublayer_name(i),
            font.clone(),
            text,
        );
        // Column names slanted upwards from the top edge, so that long names fit narrow cells.
        let galley = painter.layout_no_wrap(sublayer_name(i), font.clone(), text);
        let at = pos2(o.x + cell * (i as f32 + 0.5) - 2.0, o.y - 4.0);
        painter.add(egui::epaint::TextShape::new(at, galley, text).with_angle(-std::f32::consts::FRAC_PI_4));
        for j in 0..s {
            let r = Rect::from_min_size(o + vec2(cell * j as f32, cell * i as f32), vec2(cell, cell));
            let col = colors::signed_color(c[i * s + j]);
            painter.rect_filled(r.shrink(0.5), 0.0, col);
            if cell >= 30.0 {
                painter.text(
                    r.center(),
                    Align2::CENTER_CENTER,
                    format!("{:.2}", c[i * s + j]),
                    font.clone(),
                    colors::text_on(col),
                );
            }
        }
    }
    // Scale: −1 … 1.
    let sx = o.x + side + 12.0;
    let n = 40;
    for k in 0..n {
        let y0 = o.y + side * k as f32 / n as f32;
        let v = 1.0 - 2.0 * (k as f64 + 0.5) / n as f64;
        painter.rect_filled(
            Rect::from_x_y_ranges(sx..=sx + 10.0, y0..=y0 + side / n as f32 + 0.5),
            0.0,
            colors::signed_color(v),
        );
    }
    painter.text(pos2(sx + 13.0, o.y), Align2::LEFT_TOP, "+1", font.clone(), text);
    painter.text(pos2(sx + 13.0, o.y + side / 2.0), Align2::LEFT_CENTER, "0", font.clone(), text);
    painter.text(pos2(sx + 13.0, o.y + side), Align2::LEFT_BOTTOM, "−1", font, text);
    painter.rect_stroke(
        Rect::from_min_size(o, vec2(side, side)),
        0.0,
        Stroke::new(1.0, text),
        egui::StrokeKind::Outside,
    );
    if let Some(p) = resp.hover_pos() {
        let (x, y) = (p.x - o.x, p.y - o.y);
        if x >= 0.0 && y >= 0.0 {
            let (j, i) = ((x / cell) as usize, (y / cell) as usize);
            if i < s && j < s {
                resp.on_hover_text_at_pointer(format!(
                    "cos(k {}, k {}) = {:+.4}",
                    sublayer_name(i),
                    sublayer_name(j),
                    c[i * s + j]
                ));
            }
        }
    }
}
