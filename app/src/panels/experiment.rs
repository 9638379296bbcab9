//! The experiment view: every run's validation curve on one plot (thin, coloured by variant),
//! each variant's mean (thick) and min–max band over its seeds, and the final validation loss per
//! variant and per run.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{Line, Plot, Polygon};

use crate::experiment::{Experiment, FinalFrom};
use ddl::plural;

/// A variant's colour (the palette of the sublayers, one hue per variant).
pub fn variant_color(i: usize, n: usize) -> Color32 {
    crate::colors::layer_color(i, n.max(2))
}

pub fn show(ui: &mut egui::Ui, e: Option<&Experiment>) {
    let Some(e) = e else {
        ui.weak(
            "No experiment open: use Open… and choose an experiment folder (the --out of `ddl experiment`) or a folder of \
             training runs, or start with --experiment DIR.",
        );
        return;
    };
    let variants = e.variants();
    let n = variants.len();
    let name = e.dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    ui.horizontal_wrapped(|ui| {
        ui.strong(format!("Experiment: {name}")).on_hover_text(e.dir.display().to_string());
        ui.label(format!("{}, {}", plural(e.runs.len(), "run"), plural(n, "variant")));
        if e.following {
            let every = crate::app::EXPERIMENT_EVERY.as_secs();
            ui.colored_label(Color32::from_rgb(120, 200, 120), format!("running now: read again every {every} s"));
        }
        if !e.skipped.is_empty() {
            ui.colored_label(Color32::from_rgb(230, 160, 60), format!("{} folder(s) skipped", e.skipped.len()))
                .on_hover_text(e.skipped.join("\n"));
        }
    });
    let items: Vec<(String, Color32)> =
        variants.iter().enumerate().map(|(i, v)| (v.clone(), variant_color(i, n))).collect();
    super::legend_row(ui, &items);
    ui.weak("thin: each run; thick: the variant's mean; band: its seeds' min to max (at steps every run logged)");
    // The table below keeps its rows in view: a row per variant, heading, notes.
    let h = (ui.available_height() - 110.0 - 24.0 * (n as f32 + 1.0)).max(160.0);
    // Steps from 0 (runs evaluated once would otherwise span a fraction of a step).
    Plot::new("experiment-val")
        .height(h)
        .include_x(0.0)
        .x_axis_label("step")
        .y_axis_label("validation loss (periodic subset)")
        .show(ui, |p| {
            for (i, v) in variants.iter().enumerate() {
                let c = variant_color(i, n);
                let band = e.band(v);
                // The band as one trapezoid per interval (plot polygons are filled as convex).
                for w in band.windows(2) {
                    let (a, b) = (w[0], w[1]);
                    let quad = vec![[a.0, a.3], [b.0, b.3], [b.0, b.2], [a.0, a.2]];
                    p.polygon(
                        Polygon::new(format!("{v} band"), quad)
                            .fill_color(c.gamma_multiply(0.15))
                            .stroke(egui::Stroke::NONE),
                    );
                }
                for r in e.runs.iter().filter(|r| &r.variant == v) {
                    let pts: Vec<[f64; 2]> = r.val.iter().filter(|p| p.1.is_finite()).map(|&(s, l)| [s, l]).collect();
                    p.line(Line::new(r.name.clone(), pts).color(c.gamma_multiply(0.55)).width(1.0));
                }
                let mean: Vec<[f64; 2]> = band.iter().map(|b| [b.0, b.1]).collect();
                // (A mean of one evaluation is a point, which a line does not draw.)
                if mean.len() == 1 {
                    p.points(egui_plot::Points::new(format!("{v} mean"), mean.clone()).radius(4.0).color(c));
                }
                p.line(Line::new(format!("{v} mean"), mean).color(c).width(2.5));
            }
        });
    ui.separator();
    ui.strong("Final validation loss");
    match e.mixed() {
        Some(why) => {
            ui.colored_label(
                Color32::from_rgb(230, 160, 60),
                format!("Not comparable as one table: {why}. Open runs of one experiment together."),
            );
        }
        None => {
            let tokens: Vec<u64> = e.runs.iter().filter_map(|r| r.val_tokens).collect();
            let from = e.runs.first().map(|r| r.final_from).unwrap_or(FinalFrom::None);
            match tokens.first() {
                Some(t) => ui.weak(format!("each final loss over {t} validation tokens (result.json)")),
                None => ui.weak(format!("each final loss from {}", from.describe())),
            };
        }
    }
    // (Scrolled where the window is too small for every row.)
    egui::ScrollArea::vertical().id_salt("experiment-table-scroll").show(ui, |ui| {
        let summary = e.summary();
        // (A column of top-1 accuracies where some run logged one.)
        let acc = summary.iter().any(|s| s.accuracy.is_some());
        egui::Grid::new("experiment-table").striped(true).num_columns(6 + acc as usize).show(ui, |ui| {
            for h in ["variant", "runs", "mean", "sd", "min", "max"] {
                ui.label(RichText::new(h).strong());
            }
            if acc {
                ui.label(RichText::new("top-1 accuracy (runs)").strong());
            }
            ui.end_row();
            for s in summary {
                let i = variants.iter().position(|v| *v == s.variant).unwrap_or(0);
                ui.colored_label(variant_color(i, n), &s.variant);
                ui.label(s.runs.to_string());
                ui.monospace(format!("{:.4}", s.mean));
                // (One run has no spread to state.)
                ui.monospace(if s.runs > 1 { format!("{:.4}", s.sd) } else { "—".to_string() });
                for x in [s.min, s.max] {
                    ui.monospace(format!("{x:.4}"));
                }
                if acc {
                    ui.monospace(match s.accuracy {
                        Some((1, m, _)) => format!("{:.2} % (1)", 100.0 * m),
                        Some((k, m, sd)) => format!("{:.2} ± {:.2} % ({k})", 100.0 * m, 100.0 * sd),
                        None => "—".to_string(),
                    });
                }
                ui.end_row();
            }
        });
        let diverged: Vec<&str> = e.diverged().iter().map(|r| r.name.as_str()).collect();
        if !diverged.is_empty() {
            ui.colored_label(
                Color32::from_rgb(230, 160, 60),
                format!(
                    "Left out of the table, diverged (a final validation loss that is not a finite number): {}",
                    diverged.join(", ")
                ),
            );
        }
        let skipped: Vec<String> = e
            .with_skipped_steps()
            .iter()
            .map(|r| {
                let of = r.steps.map(|s| format!(" of {s}")).unwrap_or_default();
                let diverged = if r.final_val.is_some_and(|f| !f.is_finite()) { ", diverged" } else { "" };
                format!("{} ({}{of}{diverged})", r.name, r.skipped_steps)
            })
            .collect();
        if !skipped.is_empty() {
            ui.colored_label(
                Color32::from_rgb(230, 160, 60),
                format!(
                    "Runs with skipped steps (a loss or gradient that was not finite, skipped by `skip_nonfinite`: \
                     no update at those steps; those that did not diverge are in the table, trained for fewer \
                     updates than the others): {}",
                    skipped.join(", ")
                ),
            );
        }
        ui.weak("The experiment's report (report.md, `ddl experiment --report-only`) gives the paired statistics.");
    });
}
