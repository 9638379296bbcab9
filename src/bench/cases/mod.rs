//! The cases of `ddl bench kernels`, one file per kernel module: bound dispatches at a preset's
//! shapes with the FLOPs and bytes they must at least do ([`super::KernelBench`]).

pub mod adamw;
pub mod attention;
pub mod delta;
pub mod elementwise;
pub mod embedding;
pub mod expand;
pub mod loss;
pub mod matmul;
pub mod norm;
pub mod reduce;
pub mod rope;
pub mod shortconv;
pub mod swiglu;
