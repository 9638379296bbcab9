//! The training dashboard of a run directory.

use eframe::egui::{self, Color32};
use egui_plot::{HLine, Line, Plot};

use crate::colors;
use crate::metrics::Metrics;
use crate::trace::sublayer_name;

/// A series as a line, with a point where it has one value only: a line of one point is a dot
/// of its width (a run that has logged one step showed plots that looked empty).
fn line(p: &mut egui_plot::PlotUi<'_>, name: &str, pts: Vec<[f64; 2]>, c: Color32) {
    if pts.len() == 1 {
        p.points(egui_plot::Points::new(name, pts.clone()).radius(3.0).color(c));
    }
    p.line(Line::new(name, pts).color(c));
}

/// The step axis of the Training plots: labelled down to 30 points apart (egui_plot's default,
/// 60, left out every step label but "0" of a plot made narrower by its wider value labels —
/// the learning rate's "0.01" — at 900 × 700).
fn step_axis() -> egui_plot::AxisHints<'static> {
    egui_plot::AxisHints::new_x().label("step").label_spacing(30.0..=60.0)
}

/// Seconds as the heading gives them: "48 s", "4 min 12 s", "2 h 05 min".
fn span(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

pub fn show(ui: &mut egui::Ui, m: Option<&Metrics>) {
    let Some(m) = m else {
        ui.weak(
            "No run open: use Open… and choose a run directory (the --out of `ddl train`), or start with --run DIR.",
        );
        return;
    };
    let last = m.train.last();
    ui.horizontal_wrapped(|ui| {
        // The directory's name (the full path on hover): snapshots stay the same wherever the
        // repository is checked out.
        let name =
            m.dir.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| m.dir.display().to_string());
        ui.strong(format!("Run: {name}")).on_hover_text(m.dir.display().to_string());
        // (The top-1 accuracy beside the losses where the run logged it.)
        let acc_at = |step: f64| {
            m.val_accuracy.iter().rev().find(|a| a.0 == step).map(|a| format!(", top-1 {:.2} %", 100.0 * a.1))
        };
        ui.label(format!(
            "{} logged{}{}{}{}",
            ddl::plural(m.train.len(), "step"),
            // (A loss that was not a finite number is logged as null: said, not left out.)
            last.map(|r| match r.loss {
                Some(l) => format!(", last loss {l:.4}"),
                None => ", last loss not a finite number".to_string(),
            })
            .unwrap_or_default(),
            // The last step's speed and the training time so far (over every invocation: a resumed
            // run goes on from its checkpoint's).
            last.map(|r| {
                let speed =
                    r.tok_per_s.filter(|t| t.is_finite()).map(|t| format!(", {t:.0} tok/s")).unwrap_or_default();
                let time = r.elapsed.filter(|e| e.is_finite()).map(|e| format!(", {} of training", span(e)));
                speed + &time.unwrap_or_default()
            })
            .unwrap_or_default(),
            m.val
                .last()
                .map(|v| format!(
                    ", val loss {:.4}{} at step {} (periodic subset)",
                    v.1,
                    acc_at(v.0).unwrap_or_default(),
                    v.0
                ))
                .unwrap_or_default(),
            m.full
                .map(|f| format!(
                    ", final {:.4}{} over the whole split",
                    f.1,
                    m.full_accuracy.map(|a| format!(", top-1 {:.2} %", 100.0 * a)).unwrap_or_default()
                ))
                .unwrap_or_default(),
        ));
        // (Nothing where the folder does not say: a run killed, one that stopped on an error.)
        if let Some(state) = &m.state {
            let mut words = state.describe(&m.dir);
            // (How far, while it trains: the step it goes to was on disk only from its first
            // checkpoint.)
            if let Some(p) = m.progress() {
                words += &format!(": step {} of {}", p.step, p.target);
                if let Some(left) = p.left_s.filter(|l| l.is_finite() && *l > 0.0) {
                    words += &format!(", about {} left", span(left));
                }
            }
            match state {
                crate::metrics::RunState::Training => ui.colored_label(Color32::from_rgb(120, 200, 120), words),
                crate::metrics::RunState::Interrupted { .. } => {
                    ui.colored_label(Color32::from_rgb(230, 160, 60), words)
                }
                _ => ui.label(words),
            };
        }
        let not_finite = m.train.iter().filter(|r| r.loss.is_none_or(|l| !l.is_finite())).count();
        if not_finite > 0 {
            ui.colored_label(
                Color32::from_rgb(230, 160, 60),
                format!(
                    "{not_finite} step(s) with a loss that is not a finite number (NaN or infinite: gaps in the curve)"
                ),
            )
            .on_hover_text(
                "metrics.jsonl has null for their loss (the loss overflowed; a run with train.skip_nonfinite skips \
                 such steps, one without stops at the first)",
            );
        }
        if m.bad_lines > 0 {
            ui.colored_label(Color32::from_rgb(230, 160, 60), format!("{} unreadable line(s) skipped", m.bad_lines));
        }
    });
    if m.train.is_empty() && m.val.is_empty() {
        ui.weak("metrics.jsonl has no rows yet; waiting for the run to log.");
        return;
    }
    let h = ((ui.available_height() - 100.0) * 0.5).max(120.0);
    let (train_c, val_c) = (Color32::from_rgb(90, 160, 240), Color32::from_rgb(240, 140, 60));
    let (lr_c, g_c) = (Color32::from_rgb(150, 200, 120), Color32::from_rgb(200, 120, 220));
    let group = egui::Id::unique("dash-steps");
    let series = |f: &dyn Fn(&crate::metrics::TrainRow) -> Option<f64>| -> Vec<[f64; 2]> {
        m.train.iter().filter_map(|r| f(r).filter(|v| v.is_finite()).map(|v| [r.step, v])).collect()
    };
    ui.columns(2, |cols| {
        super::legend_row(
            &mut cols[0],
            &[("train loss".into(), train_c), ("val loss (periodic subset)".into(), val_c)],
        );
        super::legend_row(&mut cols[1], &[("learning rate".into(), lr_c)]);
        Plot::new("dash-loss")
            .height(h)
            .link_axis(group, [true, false])
            .custom_x_axes(vec![step_axis()])
            .y_axis_label("loss")
            .show(&mut cols[0], |p| {
                line(p, "train loss", series(&|r| r.loss), train_c);
                // (An evaluation that overflowed — NaN — is a gap; the header names it.)
                let v: Vec<[f64; 2]> = m.val.iter().filter(|p| p.1.is_finite()).map(|&(s, l)| [s, l]).collect();
                p.line(Line::new("val loss", v.clone()).color(val_c).width(2.0));
                p.points(egui_plot::Points::new("val loss", v).radius(3.0).color(val_c));
            });
        Plot::new("dash-lr")
            .height(h)
            .link_axis(group, [true, false])
            .include_y(0.0)
            .custom_x_axes(vec![step_axis()])
            .y_axis_label("learning rate")
            .show(&mut cols[1], |p| {
                line(p, "learning rate", series(&|r| r.lr), lr_c);
            });
    });
    let s = m.n_sublayers();
    ui.columns(2, |cols| {
        super::legend_row(&mut cols[0], &[("grad norm".into(), g_c)]);
        let mut items: Vec<(String, Color32)> = (0..s).map(|i| (sublayer_name(i), colors::layer_color(i, s))).collect();
        if s > 0 {
            items.push(("regime thresholds 0.5, 1.5".into(), Color32::from_gray(120)));
            super::legend_row(&mut cols[1], &items);
        }
        Plot::new("dash-gnorm")
            .height(h)
            .link_axis(group, [true, false])
            .include_y(0.0)
            .custom_x_axes(vec![step_axis()])
            .y_axis_label("|g|")
            .show(&mut cols[0], |p| {
                line(p, "grad norm", series(&|r| r.grad_norm), g_c);
            });
        if s == 0 {
            cols[1].weak("mean β: this run logged none (a baseline model has no delta writes).");
            return;
        }
        Plot::new("dash-beta")
            .height(h)
            .link_axis(group, [true, false])
            .include_y(0.0)
            .include_y(2.0)
            .custom_x_axes(vec![step_axis()])
            .y_axis_label("mean β")
            .show(&mut cols[1], |p| {
                p.hline(HLine::new("regime thresholds", 0.5).color(Color32::from_gray(120)));
                p.hline(HLine::new("regime thresholds", 1.5).color(Color32::from_gray(120)));
                for i in 0..s {
                    let pts: Vec<[f64; 2]> = m
                        .train
                        .iter()
                        .filter_map(|r| {
                            r.beta_mean.as_ref().and_then(|b| b.get(i)).filter(|v| v.is_finite()).map(|&v| [r.step, v])
                        })
                        .collect();
                    line(p, &sublayer_name(i), pts, colors::layer_color(i, s));
                }
            });
    });
}
