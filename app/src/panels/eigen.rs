//! Eigenvalue regimes: λ = 1−β per sublayer for the selected token, and regime counts over the text.

use eframe::egui::{self, RichText};
use egui_plot::{Axis, Bar, BarChart, Plot, Points, Span};

use super::Selection;
use crate::colors::{REGIMES, regime_color};
use crate::trace::{TraceData, regime_index, sublayer_name};

pub fn show(ui: &mut egui::Ui, data: &TraceData, sel: &mut Selection) {
    if super::empty_note(ui, data) {
        return;
    }
    let Some(t) = sel.shown_token(data) else { return };
    let s = data.s();
    ui.horizontal(|ui| {
        ui.strong(format!("Eigenvalues of the delta operator for {}", super::token_label(data, t)));
    });
    ui.label(format!(
        "A = I − β k k^T has eigenvalue λ = 1−β along k; the other d−1 = {} eigenvalues stay 1, so det A = 1−β. \
         On the state X (d × d_v) A acts on each of its d_v = {} columns: the determinant of that map of X is (1−β)^{}.",
        data.d.saturating_sub(1),
        data.m,
        data.m
    ));
    let h = (ui.available_height() * 0.5).clamp(140.0, 320.0);
    super::beside_table(
        ui,
        super::TABLE_W,
        |ui| {
            let plot = Plot::new("eigen-lambda")
                .height(h)
                .include_x(-1.0)
                .include_x(1.0)
                .include_y(-0.5)
                .include_y(s as f64 - 0.5)
                .allow_zoom(false)
                .allow_drag(false)
                .allow_scroll(false)
                .x_axis_label("λ = 1 − β");
            super::sublayer_y_axis(plot, s).show(ui, |p| {
                for (r, range) in [(2usize, -1.0..=-0.5), (1, -0.5..=0.5), (0, 0.5..=1.0)] {
                    p.span(Span::new(REGIMES[r], range).axis(Axis::X).fill(regime_color(r).gamma_multiply(0.18)));
                }
                for i in 0..s {
                    if let Some(b) = data.beta(t, i) {
                        let lam = 1.0 - b as f64;
                        p.points(
                            Points::new(sublayer_name(i), vec![[lam, i as f64]])
                                .radius(5.0)
                                .color(regime_color(regime_index(b))),
                        );
                    }
                }
            });
        },
        |ui| {
            egui::ScrollArea::both().id_salt("eigen-table").max_height(h).show(ui, |ui| {
                egui::Grid::new("eigen-grid").striped(true).num_columns(5).show(ui, |ui| {
                    for head in ["sublayer", "β", "λ = 1−β", "det on X = λ^d_v", "regime"] {
                        ui.strong(head);
                    }
                    ui.end_row();
                    for i in 0..s {
                        let Some(b) = data.beta(t, i) else {
                            // (A β that overflowed: its row says so rather than missing.)
                            ui.label(sublayer_name(i));
                            ui.monospace("not finite");
                            ui.end_row();
                            continue;
                        };
                        let lam = 1.0 - b as f64;
                        ui.label(sublayer_name(i));
                        ui.monospace(format!("{b:.4}"));
                        ui.monospace(format!("{lam:+.4}"));
                        ui.monospace(format!("{:+.3e}", lam.powi(data.m as i32)));
                        let r = regime_index(b);
                        ui.label(RichText::new(REGIMES[r]).color(regime_color(r)).strong());
                        ui.end_row();
                    }
                });
            });
        },
    );
    ui.separator();
    ui.strong(format!("Regimes over the whole text ({} tokens)", data.len()));
    let counts = data.regime_counts();
    let mut charts: Vec<BarChart> = Vec::new();
    // (The fourth, β outside [0, 2], only where an --allow-out-of-range intervention put one.)
    let shown: Vec<usize> = (0..REGIMES.len()).filter(|&r| r < 3 || counts.iter().any(|c| c[r] > 0)).collect();
    for &r in &shown {
        let bars: Vec<Bar> =
            (0..s).map(|i| Bar::new(i as f64, counts[i][r] as f64).name(sublayer_name(i)).width(0.7)).collect();
        let mut c = BarChart::new(REGIMES[r], bars).color(regime_color(r));
        let below: Vec<&BarChart> = charts.iter().collect();
        if !below.is_empty() {
            c = c.stack_on(&below);
        }
        charts.push(c);
    }
    let items: Vec<(String, egui::Color32)> =
        shown.iter().map(|&r| (REGIMES[r].to_string(), regime_color(r))).collect();
    super::legend_row(ui, &items);
    let plot = Plot::new("eigen-counts")
        .height(ui.available_height().max(120.0))
        .allow_zoom(false)
        .allow_drag(false)
        .allow_scroll(false)
        .include_y(0.0)
        // (Every bar whole: the first and last sublayer's bars reach half a unit past them.)
        .include_x(-0.5)
        .include_x(s as f64 - 0.5)
        .y_axis_label("tokens");
    super::sublayer_x_axis(plot, s).show(ui, |p| {
        for c in charts {
            p.bar_chart(c);
        }
    });
}
