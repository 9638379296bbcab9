//! The text as token chips: click selects, colour shows a chosen statistic.

use eframe::egui::{self, Color32, RichText, Stroke};

use super::Selection;
use crate::colors;
use crate::trace::{TraceData, chip_text, regime_index, sublayer_name};

/// What the chips are coloured by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChipColour {
    Plain,
    /// Mean β over the sublayers.
    #[default]
    MeanBeta,
    /// The regime at the selected sublayer.
    Regime,
    /// Total write size, relative to the largest in the text.
    WriteSize,
    /// −log p of the token under the model, relative to the largest in the text.
    Surprise,
}

impl ChipColour {
    pub const ALL: [ChipColour; 5] =
        [ChipColour::Plain, ChipColour::MeanBeta, ChipColour::Regime, ChipColour::WriteSize, ChipColour::Surprise];

    pub fn name(self) -> &'static str {
        match self {
            ChipColour::Plain => "plain",
            ChipColour::MeanBeta => "mean β",
            ChipColour::Regime => "regime at layer",
            ChipColour::WriteSize => "write size",
            ChipColour::Surprise => "surprise (−log p)",
        }
    }
}

/// The colouring controls: statistic and sublayer.
pub fn controls(ui: &mut egui::Ui, data: &TraceData, sel: &mut Selection, colour: &mut ChipColour) {
    ui.horizontal(|ui| {
        let l = ui.label("Colour tokens by");
        egui::ComboBox::from_id_salt("chip-colour")
            .selected_text(colour.name())
            .show_ui(ui, |ui| {
                for c in ChipColour::ALL {
                    ui.selectable_value(colour, c, c.name());
                }
            })
            .response
            .labelled_by(l.id);
        let l = ui.label("layer");
        let s = data.s().max(1);
        sel.sublayer = sel.sublayer.min(s - 1);
        egui::ComboBox::from_id_salt("chip-layer")
            .selected_text(sublayer_name(sel.sublayer))
            .show_ui(ui, |ui| {
                for i in 0..data.s() {
                    ui.selectable_value(&mut sel.sublayer, i, sublayer_name(i));
                }
            })
            .response
            .labelled_by(l.id);
        if let Some(t) = sel.token
            && t < data.len()
        {
            ui.separator();
            ui.label(super::token_label(data, t));
        }
    });
}

/// The background of chip `t`.
pub fn chip_color(data: &TraceData, t: usize, sublayer: usize, colour: ChipColour) -> Option<Color32> {
    match colour {
        ChipColour::Plain => None,
        ChipColour::MeanBeta => data.mean_beta(t).map(colors::beta_color),
        ChipColour::Regime => data.beta(t, sublayer).map(|b| colors::regime_color(regime_index(b))),
        ChipColour::WriteSize => {
            let mx = data.max_total_write();
            data.total_write(t).map(|w| colors::magnitude_color(if mx > 0.0 { w / mx } else { 0.0 }))
        }
        ChipColour::Surprise => {
            let mx = data.max_surprise();
            data.surprise(t).map(|s| colors::magnitude_color(if mx > 0.0 { s / mx } else { 0.0 }))
        }
    }
}

/// The chips; returns whether the selection changed.
pub fn chips(ui: &mut egui::Ui, data: &TraceData, sel: &mut Selection, colour: ChipColour) -> bool {
    let mut changed = false;
    ui.horizontal_wrapped(|ui| {
        ui.spacing_mut().item_spacing = egui::vec2(2.0, 3.0);
        ui.spacing_mut().button_padding = egui::vec2(3.0, 1.0);
        for t in 0..data.len() {
            let r = &data.rows[t];
            let selected = sel.token == Some(t);
            let bg = chip_color(data, t, sel.sublayer, colour);
            let mut text = RichText::new(chip_text(&r.trace.text)).monospace();
            if let Some(bg) = bg {
                text = text.color(colors::text_on(bg));
            }
            if r.prompt {
                text = text.italics();
            }
            let mut b = egui::Button::new(text).selected(selected);
            if let Some(bg) = bg {
                b = b.fill(bg);
            }
            if selected {
                b = b.stroke(Stroke::new(2.0, ui.visuals().strong_text_color()));
            }
            let resp = ui.add(b).on_hover_ui(|ui| {
                ui.label(super::token_label(data, t));
                ui.label(format!("id {}", r.trace.token));
                if let Some(b) = data.mean_beta(t) {
                    ui.label(format!("mean β {b:.3}"));
                }
                if let Some(w) = data.total_write(t) {
                    ui.label(format!("total write {w:.3}"));
                }
                if let Some(s) = &r.trace.score {
                    ui.label(score_line(s));
                    if !s.top.is_empty() {
                        ui.label(likeliest_line(s));
                    }
                }
            });
            if resp.clicked() {
                sel.token = if selected { None } else { Some(t) };
                changed = true;
            }
        }
    });
    changed
}

/// A token's probability under the model, as its chip's tooltip says it.
pub fn score_line(s: &ddl::generate::TokenScore) -> String {
    format!("p {:.4} (log p {:.3}), rank {} under the model", s.logprob.exp(), s.logprob, s.rank)
}

/// The most likely tokens at a token's place, with their probabilities.
pub fn likeliest_line(s: &ddl::generate::TokenScore) -> String {
    let top: Vec<String> = s.top.iter().map(|a| format!("{} {:.3}", chip_text(&a.text), a.logprob.exp())).collect();
    format!("likeliest here: {}", top.join("  "))
}
