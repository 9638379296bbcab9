//! Shared test helpers: fixtures and a tiny checkpoint trained at test time.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use ddl::model::Variant;
use ddl::train::{RunConfig, TrainOptions};

pub fn fixture(name: &str) -> PathBuf {
    ddl::testing::package_dir(env!("CARGO_MANIFEST_DIR"), "tests/fixtures").join("tests/fixtures").join(name)
}

pub fn tmpdir(name: &str) -> PathBuf {
    ddl::testing::scratch_dir(&format!("viz-test-{name}"))
}

/// A tiny DDL model (2 blocks, d = 32) trained for a few steps: seconds on lavapipe. Trained once
/// per test process (the tests of a file share it); `_dir` is the calling test's directory.
pub fn tiny_checkpoint(_dir: &Path) -> PathBuf {
    static CK: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    CK.get_or_init(|| train_tiny(&tmpdir("tiny"), Variant::Ddl)).clone()
}

/// The same for the baseline Transformer (no delta writes).
pub fn tiny_baseline_checkpoint() -> PathBuf {
    static CK: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    CK.get_or_init(|| train_tiny(&tmpdir("tiny-baseline"), Variant::Baseline)).clone()
}

fn train_tiny(dir: &Path, variant: Variant) -> PathBuf {
    // Token caches: one directory for the whole process (tests run in parallel).
    static CACHE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(|| {
        let c = tmpdir("cache");
        unsafe { std::env::set_var("DDL_CACHE_DIR", &c) };
        c
    });
    let _ = cache;
    // One training at a time: two runs writing the same token cache entry at once race.
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut r = RunConfig::preset("tiny", variant).unwrap();
    r.corpus = ddl::testing::small_corpus(dir);
    for kv in [
        "model.d_model=32",
        "model.n_layers=2",
        "model.n_heads=2",
        "model.head_dim=16",
        "model.mlp_hidden=85",
        "model.max_seq_len=64",
        "train.batch_size=2",
        "train.seq_len=16",
        "train.eval_every=0",
        "train.eval_batches=1",
        "train.checkpoint_every=0",
        "train.warmup_steps=2",
    ] {
        r.set(kv).unwrap();
    }
    let out = dir.join("run");
    ddl::train::train(
        ddl::testing::gpu(),
        TrainOptions {
            run: r,
            steps: 4,
            out: out.clone(),
            resume: false,
            overwrite: false,
            show: ddl::train::Show::Quiet,
        },
    )
    .unwrap();
    assert!(out.join("model.safetensors").exists());
    out
}
