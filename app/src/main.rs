//! `ddl-viz`: desktop visualizer for DDL models. Placeholder window until the visualizer issue.

fn main() -> eframe::Result<()> {
    let options = eframe::NativeOptions::default();
    eframe::run_native("ddl-viz", options, Box::new(|_cc| Ok(Box::new(Placeholder))))
}

struct Placeholder;

impl eframe::App for Placeholder {
    fn ui(&mut self, ui: &mut eframe::egui::Ui, _frame: &mut eframe::Frame) {
        ui.heading("ddl-viz");
        ui.label("The Deep Delta Learning visualizer is not built yet.");
    }
}
