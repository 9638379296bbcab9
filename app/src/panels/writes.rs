//! Write strength per sublayer: |β (v − k^T X)|, what is erased (k^T X) and written (v).

use eframe::egui;
use egui_plot::{Bar, BarChart, Line, Plot};

use super::Selection;
use crate::colors;
use crate::trace::{TraceData, norm, sublayer_name};

pub fn show(ui: &mut egui::Ui, data: &TraceData, sel: &mut Selection) {
    if super::empty_note(ui, data) {
        return;
    }
    let Some(t) = sel.shown_token(data) else { return };
    let s = data.s();
    ui.strong(format!("Writes of {}", super::token_label(data, t)));
    ui.label("Each sublayer erases k^T X (the state's component along k) and writes v there, scaled by β: the update is β·k·(v − k^T X)^T.");
    let h = (ui.available_height() * 0.5).clamp(140.0, 320.0);
    let (write_c, erased_c, written_c) = (
        egui::Color32::from_rgb(240, 190, 60),
        egui::Color32::from_rgb(90, 140, 230),
        egui::Color32::from_rgb(90, 190, 110),
    );
    super::beside_table(
        ui,
        super::TABLE_W,
        |ui| {
            let mk = |name: &str, off: f64, f: &dyn Fn(usize) -> Option<f64>, c: egui::Color32| {
                let bars =
                    (0..s).filter_map(|i| f(i).map(|v| Bar::new(i as f64 + off, v).width(0.25).name(sublayer_name(i))));
                BarChart::new(name, bars.collect()).color(c)
            };
            let names = ["write |β(v − k^T X)|", "erased |k^T X|", "written |v|"];
            let write = mk(names[0], -0.27, &|i| data.write(t, i).map(|x| x as f64), write_c);
            let erased = mk(names[1], 0.0, &|i| data.ktx(t, i).map(norm), erased_c);
            let written = mk(names[2], 0.27, &|i| data.v(t, i).map(norm), written_c);
            let items: Vec<(String, egui::Color32)> =
                names.iter().zip([write_c, erased_c, written_c]).map(|(n, c)| (n.to_string(), c)).collect();
            super::legend_row(ui, &items);
            let plot = Plot::new("writes-bars")
                .height(h)
                .include_y(0.0)
                .allow_zoom(false)
                .allow_drag(false)
                .allow_scroll(false);
            super::sublayer_x_axis(plot, s).show(ui, |p| {
                p.bar_chart(write);
                p.bar_chart(erased);
                p.bar_chart(written);
            });
        },
        |ui| {
            egui::ScrollArea::both().id_salt("writes-table").max_height(h).show(ui, |ui| {
                egui::Grid::new("writes-grid").striped(true).num_columns(5).show(ui, |ui| {
                    for head in ["sublayer", "β", "write", "|k^T X| erased", "|v| written"] {
                        ui.strong(head);
                    }
                    ui.end_row();
                    // (A β or write that overflowed: its row says so rather than missing.)
                    let num =
                        |x: Option<f32>, digits: usize| x.map_or("not finite".to_string(), |x| format!("{x:.digits$}"));
                    for i in 0..s {
                        let (Some(e), Some(v)) = (data.ktx(t, i), data.v(t, i)) else {
                            continue;
                        };
                        ui.label(sublayer_name(i));
                        ui.monospace(num(data.beta(t, i), 3));
                        ui.monospace(num(data.write(t, i), 4));
                        ui.monospace(format!("{:.4}", norm(e)));
                        ui.monospace(format!("{:.4}", norm(v)));
                        ui.end_row();
                    }
                });
            });
        },
    );
    ui.separator();
    ui.strong("Write size over the text, per sublayer");
    let items: Vec<(String, egui::Color32)> = (0..s).map(|i| (sublayer_name(i), colors::layer_color(i, s))).collect();
    super::legend_row(ui, &items);
    Plot::new("writes-over-text").height(ui.available_height().max(120.0)).include_y(0.0).x_axis_label("token").show(
        ui,
        |p| {
            for i in 0..s {
                let pts: Vec<[f64; 2]> = (0..data.len())
                    .filter_map(|tt| data.write(tt, i).map(|w| [super::place(tt) as f64, w as f64]))
                    .collect();
                p.line(Line::new(sublayer_name(i), pts).color(colors::layer_color(i, s)));
            }
            p.vline(egui_plot::VLine::new("selected", super::place(t) as f64).color(egui::Color32::GRAY));
        },
    );
}
