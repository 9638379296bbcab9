//! `ddl-viz`: a desktop visualizer for Deep Delta Learning models (egui/eframe). The model runs on
//! a worker thread ([`worker`]); the panels ([`panels`]) are pure functions over a [`trace::TraceData`].

pub mod app;
pub mod colors;
pub mod experiment;
pub mod metrics;
pub mod panels;
pub mod trace;
pub mod worker;

/// "1 run", "3 runs": a count and its noun, plural where it is not 1.
pub fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}
