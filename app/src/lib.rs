//! `ddl-viz`: a desktop visualizer for Deep Delta Learning models (egui/eframe). The model runs on
//! a worker thread ([`worker`]); the panels ([`panels`]) are pure functions over a [`trace::TraceData`].

pub mod app;
pub mod colors;
pub mod experiment;
pub mod metrics;
pub mod panels;
pub mod trace;
pub mod worker;
