//! The panels: pure functions over a [`TraceData`] (or [`Metrics`]) and the selection, so tests
//! can draw them from fixture traces without a model.

pub mod beta_map;
pub mod dashboard;
pub mod eigen;
pub mod experiment;
pub mod interventions;
pub mod kdirs;
pub mod lens;
pub mod tokens;
pub mod writes;

use crate::trace::TraceData;

/// What the user selected.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// The selected token (index into the text), if any.
    pub token: Option<usize>,
    /// The sublayer for per-layer views (chip regime colours, k components).
    pub sublayer: usize,
}

impl Selection {
    /// The token the per-token panels show: the selected one if it has a trace, else the last
    /// traced token.
    pub fn shown_token(&self, data: &TraceData) -> Option<usize> {
        self.token.filter(|&t| data.has(t)).or_else(|| (0..data.len()).rev().find(|&t| data.has(t)))
    }
}

/// A line telling why a panel is empty.
pub(crate) fn empty_note(ui: &mut eframe::egui::Ui, data: &TraceData) -> bool {
    if data.is_empty() {
        ui.weak("No tokens yet: Generate (with a checkpoint; Open… one if none is loaded), or open a trace file.");
        return true;
    }
    if !data.any_traced() {
        ui.weak("This model has no delta writes to show (a baseline model, or no traced token yet).");
        return true;
    }
    false
}

/// The cell (column, row) of a heat map under a point: cells of `cell` size from `origin`,
/// `cols` × `rows` of them (the β map's and the lens map's tokens × rows); `None` outside.
pub(crate) fn grid_cell(
    origin: eframe::egui::Pos2,
    cell: eframe::egui::Vec2,
    cols: usize,
    rows: usize,
) -> impl Fn(eframe::egui::Pos2) -> Option<(usize, usize)> + Copy {
    move |p| {
        let (x, y) = (p.x - origin.x, p.y - origin.y);
        if x < 0.0 || y < 0.0 {
            return None;
        }
        let (c, r) = ((x / cell.x) as usize, (y / cell.y) as usize);
        (c < cols && r < rows).then_some((c, r))
    }
}

/// Axis labels for a plot whose integer coordinates 0..s are sublayers ("block 0 attn",
/// "block 0 MLP", …): blank between them and outside the range.
pub(crate) fn sublayer_ticks(s: usize) -> impl Fn(egui_plot::GridMark, &std::ops::RangeInclusive<f64>) -> String {
    move |m, _| {
        let v = m.value.round();
        if (m.value - v).abs() < 1e-6 && v >= 0.0 && (v as usize) < s {
            crate::trace::sublayer_name(v as usize)
        } else {
            String::new()
        }
    }
}

/// [`sublayer_ticks`] for an x axis: the name on two lines ("block 0" over "attn"), narrow
/// enough that every sublayer of a few blocks keeps its label.
pub(crate) fn sublayer_ticks_x(s: usize) -> impl Fn(egui_plot::GridMark, &std::ops::RangeInclusive<f64>) -> String {
    let one = sublayer_ticks(s);
    move |m, r| one(m, r).replacen(" attn", "\nattn", 1).replacen(" MLP", "\nMLP", 1)
}

/// A plot whose x coordinates 0..s are sublayers, with every sublayer named under its bars: a
/// mark at each one and labels kept down to 30 points apart in the small font (egui_plot hides
/// x labels closer than 60 points, which left only the first of 8 sublayers named in a
/// 1000-point window).
pub(crate) fn sublayer_x_axis(plot: egui_plot::Plot<'_>, s: usize) -> egui_plot::Plot<'_> {
    let hints = small_labels(egui_plot::AxisHints::new_x().formatter(sublayer_ticks_x(s)), 30.0);
    plot.custom_x_axes(vec![hints]).x_grid_spacer(sublayer_marks(s))
}

/// [`sublayer_x_axis`] for a y axis (one line per name, kept down to 12 points apart): every
/// sublayer named beside its row in a short plot (a small window).
pub(crate) fn sublayer_y_axis(plot: egui_plot::Plot<'_>, s: usize) -> egui_plot::Plot<'_> {
    let hints = small_labels(egui_plot::AxisHints::new_y().formatter(sublayer_ticks(s)), 12.0);
    plot.custom_y_axes(vec![hints]).y_grid_spacer(sublayer_marks(s))
}

/// An axis's labels in the small font, shown down to `min` points apart (full strength from
/// 1.5 × that).
fn small_labels(hints: egui_plot::AxisHints<'_>, min: f32) -> egui_plot::AxisHints<'_> {
    hints
        .label_spacing(min..=1.5 * min)
        .tick_label_font(eframe::egui::TextStyle::Small.resolve(&eframe::egui::Style::default()))
}

/// A grid mark at each sublayer 0..s within the plot's bounds.
fn sublayer_marks(s: usize) -> impl Fn(egui_plot::GridInput) -> Vec<egui_plot::GridMark> {
    move |input| {
        let (lo, hi) = input.bounds;
        (0..s)
            .map(|i| i as f64)
            .filter(|v| (lo..=hi).contains(v))
            .map(|value| egui_plot::GridMark { value, step_size: 1.0 })
            .collect()
    }
}

/// A plot's legend as a row above it (wrapping), so that it never covers the data: a colour
/// swatch and the series' name per entry.
/// Each entry is one piece: a row too narrow for it moves it whole to the next line (never
/// "block 3" on one line and "attn" on the next).
pub(crate) fn legend_row(ui: &mut eframe::egui::Ui, items: &[(String, eframe::egui::Color32)]) {
    use eframe::egui::{Align2, Rect, Sense, TextStyle, vec2};
    ui.horizontal_wrapped(|ui| {
        ui.spacing_mut().item_spacing.x = 12.0;
        let font = TextStyle::Small.resolve(ui.style());
        let text = ui.visuals().text_color();
        for (name, color) in items {
            let galley = ui.painter().layout_no_wrap(name.clone(), font.clone(), text);
            let size = vec2(16.0 + galley.size().x, galley.size().y.max(12.0));
            let (r, resp) = ui.allocate_exact_size(size, Sense::hover());
            resp.widget_info(|| eframe::egui::WidgetInfo::labeled(eframe::egui::Role::Label, true, name));
            let swatch = Rect::from_center_size(r.left_center() + vec2(6.0, 0.0), vec2(10.0, 4.0));
            ui.painter().rect_filled(swatch, 1.0, *color);
            let at = Align2::LEFT_CENTER.align_size_within_rect(galley.size(), r.with_min_x(r.left() + 16.0)).min;
            ui.painter().galley(at, galley, text);
        }
    });
}

/// A token's place as a person reads it: counted from 1, the first token being token 1 (as
/// `ddl generate`'s tables number them); `i` is its index from 0. Every heading, tooltip, note
/// and plot axis of the app that names a token's position says this.
pub fn place(i: usize) -> usize {
    i + 1
}

/// "token 12 “abc”" for headings: row `t` (from 0) as its [`place`] and its text.
pub fn token_label(data: &TraceData, t: usize) -> String {
    let r = &data.rows[t];
    let what = match (data.turn_of(t), r.prompt) {
        (Some(i), true) => format!(" (turn {}, read)", i + 1),
        (Some(i), false) => format!(" (turn {}, reply)", i + 1),
        (None, true) => " (prompt)".to_string(),
        (None, false) => String::new(),
    };
    format!("token {} “{}”{what}", place(t), crate::trace::chip_text(&r.trace.text))
}

/// A heat map's row labels, from `left` to `origin` (rows `ch` high from `origin.y`): one per
/// row where the rows are as high as a line of text, else every n-th with a tick (a model of
/// many blocks: its rows are shorter than the labels; the hover names every cell).
/// Returns the rectangles of the labels drawn (for tests: they must not overlap).
pub(crate) fn row_labels(
    ui: &eframe::egui::Ui,
    painter: &eframe::egui::Painter,
    left: f32,
    origin: eframe::egui::Pos2,
    ch: f32,
    names: &[String],
) -> Vec<eframe::egui::Rect> {
    use eframe::egui::{Align2, FontId, Stroke, pos2};
    let font = FontId::proportional(11.0);
    let text = ui.visuals().text_color();
    let line_h = ui.fonts_mut(|f| f.row_height(&font));
    let every = row_label_every(ch, line_h);
    let mut drawn = Vec::new();
    for (i, name) in names.iter().enumerate().step_by(every) {
        let y = origin.y + ch * (i as f32 + 0.5);
        drawn.push(painter.text(pos2(left + 2.0, y), Align2::LEFT_CENTER, name, font.clone(), text));
        if every > 1 {
            // A tick at the labelled row.
            painter.line_segment([pos2(origin.x - 4.0, y), pos2(origin.x - 1.0, y)], Stroke::new(1.0, text));
        }
    }
    drawn
}

/// Every how many rows of `ch` points a label of `line_h` points fits without overlapping.
pub(crate) fn row_label_every(ch: f32, line_h: f32) -> usize {
    ((line_h / ch.max(1.0)).ceil() as usize).max(1)
}

/// Where the β map and the lens map keep their drawn row labels' rectangles (for tests).
pub fn row_labels_id(map: &str) -> eframe::egui::Id {
    eframe::egui::Id::unique(("ddl-viz-row-labels", map))
}

/// The width a plot's table beside it needs (the Eigenvalue regimes' and Write strength's five
/// columns), in points.
pub(crate) const TABLE_W: f32 = 380.0;

/// A plot (`left`) and its table (`right`) side by side: the table the width it needs,
/// `table_w` (at most 60 % of the row), the plot the rest. (Two equal columns cut a table wider
/// than half the row off at the panel's edge.)
pub(crate) fn beside_table(
    ui: &mut eframe::egui::Ui,
    table_w: f32,
    left: impl FnOnce(&mut eframe::egui::Ui),
    right: impl FnOnce(&mut eframe::egui::Ui),
) {
    let gap = ui.spacing().item_spacing.x;
    let total = ui.available_width();
    let plot_w = (total - table_w.min(total * 0.6) - gap).max(0.0);
    ui.horizontal_top(|ui| {
        ui.vertical(|ui| {
            ui.set_width(plot_w);
            left(ui)
        });
        ui.vertical(|ui| {
            ui.set_width(ui.available_width());
            right(ui)
        });
    });
}
