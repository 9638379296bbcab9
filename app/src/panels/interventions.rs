//! The Interventions view: choose what each sublayer's delta write does (as trained, identity,
//! projection, reflection, a scaled β, the prompt's mean direction, or one of the write's two
//! terms removed: nothing erased, nothing written), generate the prompt's
//! continuation with and without the choice at the same seed, and compare: both texts side by
//! side with the tokens that differ marked, and the change of the log-probability of every token
//! of the original continuation under the interventions as a strip (teacher-forced, as
//! `ddl generate --compare` measures it). Either trace can be shown in the other views.

use ddl::generate::TokenTrace;
use eframe::egui::{self, Color32, RichText, Sense, Stroke, StrokeKind, vec2};

use crate::trace::{chip_text, sublayer_name};

/// The largest factor the scale control takes (β × 4 reaches 2 from 0.5).
const MAX_SCALE: f32 = 4.0;

/// What one sublayer's write does.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Choice {
    #[default]
    AsTrained,
    /// β = 0: the write leaves the state as it is.
    Identity,
    /// β = 1.
    Projection,
    /// β = 2.
    Reflection,
    /// β times this factor (≥ 0).
    Scale(f32),
    /// k fixed to the mean of the sublayer's k over the prompt.
    KMean,
    /// Nothing erased (`erase=0`): X' = X + β k vᵀ, a rank-1 addition.
    NoErase,
    /// Nothing written (`v=0`): X' = (I − β k kᵀ) X, the operator alone.
    NoValue,
}

impl Choice {
    pub const NAMES: [&'static str; 8] = [
        "as trained",
        "identity (β = 0)",
        "projection (β = 1)",
        "reflection (β = 2)",
        "scale β",
        "k = prompt mean",
        "no erase (erase = 0)",
        "no value (v = 0)",
    ];

    fn index(self) -> usize {
        match self {
            Choice::AsTrained => 0,
            Choice::Identity => 1,
            Choice::Projection => 2,
            Choice::Reflection => 3,
            Choice::Scale(_) => 4,
            Choice::KMean => 5,
            Choice::NoErase => 6,
            Choice::NoValue => 7,
        }
    }

    fn from_index(i: usize, scale: f32) -> Choice {
        match i {
            1 => Choice::Identity,
            2 => Choice::Projection,
            3 => Choice::Reflection,
            4 => Choice::Scale(scale),
            5 => Choice::KMean,
            6 => Choice::NoErase,
            7 => Choice::NoValue,
            _ => Choice::AsTrained,
        }
    }

    /// The `--intervene` spec of this choice on sublayer `s` (block-major: attention, MLP), if any.
    pub fn spec(self, s: usize) -> Option<String> {
        let target = format!("block{}.{}", s / 2, if s.is_multiple_of(2) { "attn" } else { "mlp" });
        let action = match self {
            Choice::AsTrained => return None,
            Choice::Identity => "beta=0".to_string(),
            Choice::Projection => "beta=1".to_string(),
            Choice::Reflection => "beta=2".to_string(),
            Choice::Scale(f) => format!("beta*={f}"),
            Choice::KMean => "k=mean".to_string(),
            Choice::NoErase => "erase=0".to_string(),
            Choice::NoValue => "v=0".to_string(),
        };
        Some(format!("{target}:{action}"))
    }
}

/// The two generations of one comparison (what the model thread sends back).
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    /// The interventions, `; `-separated as `ddl generate` writes them.
    pub specs: String,
    /// The prompt's tokens as the model read them without and with the interventions.
    pub prompt: Vec<TokenTrace>,
    pub prompt_intervened: Vec<TokenTrace>,
    pub original: Vec<TokenTrace>,
    pub intervened: Vec<TokenTrace>,
    /// Per original continuation token: log p under the interventions − log p without them.
    pub delta_logprob: Vec<f64>,
}

impl Comparison {
    /// The first generated position where the two continuations differ.
    pub fn first_difference(&self) -> Option<usize> {
        let tokens = |t: &[TokenTrace]| t.iter().map(|r| r.token).collect::<Vec<u32>>();
        ddl::generate::first_difference(&tokens(&self.original), &tokens(&self.intervened))
    }
}

/// The view's state: one choice per sublayer and the last comparison.
#[derive(Debug, Clone, Default)]
pub struct Interventions {
    pub choices: Vec<Choice>,
    /// Specs given (`--intervene`) that the per-sublayer choices cannot show exactly (clamps, β
    /// set to other values, two actions on one sublayer): run as written, after nothing else.
    pub given: Vec<String>,
    /// The specs as given run with β allowed outside [0, 2] (a trace made with `ddl generate
    /// --allow-out-of-range`, or ddl-viz's own flag) where that changes what they do; cleared with
    /// them.
    pub allow_out_of_range: bool,
    /// The factor a newly chosen "scale β" starts with.
    pub scale: f32,
    pub comparison: Option<Comparison>,
}

/// What the user asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Generate with and without these specs.
    Compare(Vec<String>),
    /// Show the original (false) or the intervened (true) trace in the other views.
    Show(bool),
}

impl Interventions {
    /// The specs of the current choices, in sublayer order.
    pub fn specs(&self) -> Vec<String> {
        if !self.given.is_empty() {
            return self.given.clone();
        }
        self.choices.iter().enumerate().filter_map(|(s, c)| c.spec(s)).collect()
    }

    /// Shows `specs` as the choices of a model of `sublayers` sublayers when every one of them is
    /// one choice on the sublayers it names (`all`, `blockN`, `blockN.attn|mlp` with β = 0, 1, 2,
    /// β×S, write=0, k=mean, erase=0 or v=0) and no sublayer gets two; otherwise keeps them as written
    /// ([`Interventions::given`]), so that what runs is exactly what was given. Specs that do
    /// something else with β allowed outside [0, 2] (`allow_out_of_range`: a β set beyond it, a
    /// scale above 1) are kept as written with that flag.
    pub fn show_specs(&mut self, specs: &[String], sublayers: usize, allow_out_of_range: bool) {
        use ddl::model::intervene::{Action as A, Target};
        self.choices = vec![Choice::AsTrained; sublayers];
        self.given.clear();
        self.allow_out_of_range = false;
        if allow_out_of_range && ddl::model::Interventions::parse(specs, true).is_ok_and(|iv| iv.need_out_of_range()) {
            self.given = specs.to_vec();
            self.allow_out_of_range = true;
            return;
        }
        let mut exact = true;
        for spec in specs {
            let Ok(i) = ddl::model::Intervention::parse(spec) else {
                exact = false;
                continue;
            };
            let c = match i.action {
                A::Set(0.0) => Some(Choice::Identity),
                A::Set(1.0) => Some(Choice::Projection),
                A::Set(2.0) => Some(Choice::Reflection),
                // (A factor the control cannot hold, above its 4, stays as given.)
                A::Scale(f) if f <= MAX_SCALE => Some(Choice::Scale(f)),
                A::KMean => Some(Choice::KMean),
                A::Erase(0.0) => Some(Choice::NoErase),
                A::Value(0.0) => Some(Choice::NoValue),
                _ => None,
            };
            let touched: Vec<usize> = (0..sublayers)
                .filter(|&s| match i.target {
                    Target::All => true,
                    Target::Block(b) => s / 2 == b,
                    Target::Sub(b, kind) => s / 2 == b && (s % 2 == 1) == (kind == ddl::model::SubKind::Mlp),
                })
                .collect();
            match c {
                Some(c) if !touched.is_empty() && touched.iter().all(|&s| self.choices[s] == Choice::AsTrained) => {
                    touched.iter().for_each(|&s| self.choices[s] = c);
                }
                _ => exact = false,
            }
        }
        if !exact {
            self.choices = vec![Choice::AsTrained; sublayers];
            self.given = specs.to_vec();
        }
    }

    /// Sets sublayer `s`'s choice (growing the list to `s + 1` if needed).
    pub fn set(&mut self, s: usize, c: Choice) {
        if self.choices.len() <= s {
            self.choices.resize(s + 1, Choice::AsTrained);
        }
        self.choices[s] = c;
    }
}

/// The view for a model of `sublayers` sublayers (`ddl`: whether it has delta writes; `busy`:
/// the model thread is working).
pub fn show(
    ui: &mut egui::Ui,
    st: &mut Interventions,
    sublayers: usize,
    ddl: bool,
    busy: bool,
    selected: usize,
) -> Option<Action> {
    let mut action = None;
    ui.horizontal_wrapped(|ui| {
        ui.strong("Interventions");
        ui.weak("(choose what each write does, then generate the prompt with and without it at the same seed)");
    });
    if sublayers == 0 {
        ui.weak("No model loaded: open a DDL checkpoint (--checkpoint DIR, or Open…) to intervene on its writes.");
        return None;
    }
    if !ddl {
        ui.weak(
            "This is a baseline model: it has residual additions, no writes to intervene on. Open a DDL checkpoint.",
        );
        return None;
    }
    if st.choices.len() != sublayers {
        st.choices.resize(sublayers, Choice::AsTrained);
    }
    if !st.given.is_empty() {
        // Specs the choices cannot show: run as given until cleared.
        ui.horizontal_wrapped(|ui| {
            ui.label(format!("as given: {}", st.given.join("; ")));
            if st.allow_out_of_range {
                ui.weak("(β may leave [0, 2]: --allow-out-of-range)");
            }
            if ui.small_button("clear").on_hover_text("choose per sublayer instead").clicked() {
                st.given.clear();
                st.allow_out_of_range = false;
            }
        });
    }
    if st.scale <= 0.0 {
        st.scale = 0.5;
    }
    let before = st.choices.clone();
    // The sublayer chosen on the β map (a click on its row), with the common choices at hand.
    let sel = selected.min(sublayers - 1);
    ui.horizontal_wrapped(|ui| {
        ui.label(format!("selected on the β map: {}", sublayer_name(sel)));
        for (name, c) in [
            ("identity", Choice::Identity),
            ("projection", Choice::Projection),
            ("reflection", Choice::Reflection),
            ("k = prompt mean", Choice::KMean),
            ("no erase", Choice::NoErase),
            ("no value", Choice::NoValue),
            ("as trained", Choice::AsTrained),
        ] {
            if ui.small_button(name).on_hover_text(format!("{}: {}", sublayer_name(sel), name)).clicked() {
                st.set(sel, c);
            }
        }
    });
    egui::Grid::new("interventions-grid").num_columns(3).show(ui, |ui| {
        for s in 0..sublayers {
            let l = ui.label(sublayer_name(s));
            let mut i = st.choices[s].index();
            egui::ComboBox::from_id_salt(("intervention", s))
                .width(150.0)
                .selected_text(Choice::NAMES[i])
                .show_ui(ui, |ui| {
                    for (j, name) in Choice::NAMES.iter().enumerate() {
                        ui.selectable_value(&mut i, j, *name);
                    }
                })
                .response
                .labelled_by(l.id);
            let scale = if let Choice::Scale(f) = st.choices[s] { f } else { st.scale };
            st.choices[s] = Choice::from_index(i, scale);
            if let Choice::Scale(f) = &mut st.choices[s] {
                ui.add(egui::DragValue::new(f).range(0.0..=MAX_SCALE).speed(0.01).prefix("× "));
            } else {
                ui.label("");
            }
            ui.end_row();
        }
    });
    if st.choices != before {
        // A choice made here replaces the specs as given.
        st.given.clear();
        st.allow_out_of_range = false;
    }
    let specs = st.specs();
    ui.horizontal_wrapped(|ui| {
        let go = ui.add_enabled(!busy && !specs.is_empty(), egui::Button::new("Generate both"));
        if go.clicked() {
            action = Some(Action::Compare(specs.clone()));
        }
        go.on_disabled_hover_text(if busy { "the model is busy" } else { "choose an intervention first" });
        if ui.button("Reset all").clicked() {
            st.choices.iter_mut().for_each(|c| *c = Choice::AsTrained);
            st.given.clear();
            st.allow_out_of_range = false;
        }
        ui.weak(if specs.is_empty() { "no interventions".to_string() } else { specs.join("; ") });
    });
    ui.separator();
    let Some(c) = &st.comparison else {
        ui.weak("No comparison yet: the prompt and sampling settings on the left are used.");
        return action;
    };
    let first = c.first_difference();
    ui.label(match first {
        None => format!("The continuations are identical ({} tokens).", c.original.len()),
        Some(i) => {
            let at = |t: &[TokenTrace]| {
                t.get(i).map_or("the end of the text".to_string(), |t| format!("“{}”", chip_text(&t.text)))
            };
            format!(
                "The continuations first differ at generated token {}: {} in the original, {} with the interventions.",
                super::place(i),
                at(&c.original),
                at(&c.intervened)
            )
        }
    });
    ui.columns(2, |cols| {
        for (k, ui) in cols.iter_mut().enumerate() {
            let (title, tokens, other) = if k == 0 {
                ("original".to_string(), &c.original, &c.intervened)
            } else {
                (format!("with {}", c.specs), &c.intervened, &c.original)
            };
            ui.horizontal_wrapped(|ui| {
                ui.strong(title);
                if ui.small_button("show in the other views").clicked() {
                    action = Some(Action::Show(k == 1));
                }
            });
            text_chips(ui, tokens, other);
        }
    });
    ui.separator();
    delta_strip(ui, c);
    action
}

/// The continuation as chips; a chip whose token differs from the other continuation's at the
/// same position (or has none there) is marked.
fn text_chips(ui: &mut egui::Ui, tokens: &[TokenTrace], other: &[TokenTrace]) {
    ui.horizontal_wrapped(|ui| {
        ui.spacing_mut().item_spacing = vec2(1.0, 2.0);
        for (i, t) in tokens.iter().enumerate() {
            let differs = other.get(i).is_none_or(|o| o.token != t.token);
            let text = RichText::new(chip_text(&t.text)).monospace();
            let chip = if differs {
                egui::Label::new(text.color(Color32::WHITE).background_color(Color32::from_rgb(170, 60, 60)))
            } else {
                egui::Label::new(text)
            };
            ui.add(chip).on_hover_text(format!(
                "generated token {}{}",
                super::place(i),
                if differs { ": differs from the other continuation" } else { "" }
            ));
        }
    });
}

/// The Δ log p strip's colours at the largest |Δ|: less likely, more likely under the interventions.
pub const DROP: Color32 = Color32::from_rgb(221, 71, 61);
pub const RISE: Color32 = Color32::from_rgb(71, 191, 111);

/// Δ log p per original token as coloured cells (red: less likely under the interventions, green:
/// more), with the mean and the largest drop.
fn delta_strip(ui: &mut egui::Ui, c: &Comparison) {
    let d = &c.delta_logprob;
    if d.is_empty() {
        ui.weak("No Δ log p: the continuation is empty or does not fit the context.");
        return;
    }
    let mean = d.iter().sum::<f64>() / d.len() as f64;
    let (imin, min) = d.iter().enumerate().fold((0, f64::INFINITY), |a, (i, &x)| if x < a.1 { (i, x) } else { a });
    // (As `ddl generate --compare` says it.)
    let token = |i: usize| c.original.get(i).map(|t| format!(" “{}”", chip_text(&t.text))).unwrap_or_default();
    let at = format!("at generated token {}{}", super::place(imin), token(imin));
    let extreme = if min < 0.0 {
        format!("largest drop {min:+.3} {at}")
    } else {
        format!("no token's log-probability fell (the smallest change {min:+.3} {at})")
    };
    ui.label(format!(
        "Δ log p of the original continuation under the interventions: mean {mean:+.3} nats per token, {extreme}"
    ));
    let largest = d.iter().fold(0f64, |m, x| m.max(x.abs()));
    let scale = largest.max(1e-6);
    // Cells of 6 to 24 points, in as many rows as the text needs (a long text wraps rather than
    // running past the window).
    let n = d.len();
    let avail = (ui.available_width() - 4.0).max(24.0);
    let cw = (avail / n as f32).clamp(6.0, 24.0);
    let per_row = ((avail / cw) as usize).clamp(1, n);
    let (rh, rows) = (22.0, n.div_ceil(per_row));
    let (resp, painter) = ui.allocate_painter(vec2(cw * per_row as f32 + 2.0, rh * rows as f32), Sense::hover());
    resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Image, true, "Δ log p per token"));
    let cell = |i: usize| {
        let at = vec2(cw * (i % per_row) as f32, rh * (i / per_row) as f32);
        egui::Rect::from_min_size(resp.rect.min + at, vec2(cw, 20.0))
    };
    let first = c.first_difference();
    for (i, &x) in d.iter().enumerate() {
        let r = cell(i);
        painter.rect_filled(r.shrink(0.5), 0.0, shade((x / scale) as f32));
        if first == Some(i) {
            painter.rect_stroke(r, 0.0, Stroke::new(2.0, Color32::WHITE), StrokeKind::Inside);
        }
    }
    if let Some(p) = resp.hover_pos() {
        let rel = p - resp.rect.min;
        let i = (rel.y / rh) as usize * per_row + ((rel.x / cw) as usize).min(per_row - 1);
        if i < n {
            resp.on_hover_text(format!("generated token {}{}: Δ log p = {:+.4}", super::place(i), token(i), d[i]));
        }
    }
    if largest < 5e-4 {
        ui.weak("every token's Δ log p is 0 at this precision: the interventions change nothing here");
    } else {
        delta_scale(ui, scale);
    }
}

/// The colour of a Δ log p at `x` of the largest |Δ| (−1 … 1): grey at 0, towards [`DROP`] or
/// [`RISE`] with √|x|.
fn shade(x: f32) -> Color32 {
    Color32::from_gray(40).lerp_to_gamma(if x < 0.0 { DROP } else { RISE }, x.abs().sqrt())
}

/// The strip's colour scale: −`scale` (full red) through 0 to +`scale` (full green) nats, the
/// colour's strength growing with √|Δ| as the cells' does.
fn delta_scale(ui: &mut egui::Ui, scale: f64) {
    ui.horizontal_wrapped(|ui| {
        ui.weak(format!("{:+.3}", -scale));
        let (w, h, n) = (160.0, 10.0, 32);
        let (rect, _) = ui.allocate_exact_size(vec2(w, h), Sense::hover());
        let painter = ui.painter_at(rect);
        for j in 0..n {
            // The cell's centre on [−1, 1].
            let x = (j as f32 + 0.5) / n as f32 * 2.0 - 1.0;
            let r = egui::Rect::from_min_size(rect.min + vec2(w * j as f32 / n as f32, 0.0), vec2(w / n as f32, h));
            painter.rect_filled(r, 0.0, shade(x));
        }
        ui.weak(format!("{:+.3} nats", scale));
        ui.weak("(0 in the middle; red: less likely under the interventions)");
    });
}
