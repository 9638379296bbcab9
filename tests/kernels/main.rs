//! GPU kernel tests: every kernel against a float64 CPU reference on fresh random inputs.
//! Runs on whatever adapter `ddl info` would pick (lavapipe on CI); fails when there is none.

mod common;
mod runtime;

mod adamw;
mod attention;
mod chunked_model;
mod delta;
mod elementwise;
mod embedding;
mod expand;
mod loss;
mod matmul;
mod norm;
mod reduce;
mod rope;
mod shortconv;
mod swiglu;
