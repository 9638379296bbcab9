//! The data path against a fixture recorded from the text path before shards existed
//! (`tests/fixtures/data-path.json`, made by `cargo test --test data -- --ignored record`
//! at commit 4301958's data code): the token ids of the first training batches of a fixed-seed
//! run on the default corpus, the token count and split, a digest of the whole token stream, and
//! the first losses of a short run. The shard-based path must reproduce them.

use std::path::{Path, PathBuf};

use ddl::model::Variant;
use ddl::train::{RunConfig, TrainOptions};

fn fixture_path() -> PathBuf {
    ddl::testing::data_path("tests/fixtures/data-path.json")
}

fn tmpdir(name: &str) -> PathBuf {
    ddl::testing::scratch_dir(&format!("data-{name}"))
}

/// The fixed run: the default corpus (TinyShakespeare), char tokens, the tiny preset's
/// validation fraction, a small model.
fn fixed_run(corpus: &str) -> RunConfig {
    let mut r = RunConfig::preset("tiny", Variant::Ddl).unwrap();
    r.corpus = corpus.to_string();
    for kv in [
        "model.d_model=32",
        "model.n_layers=1",
        "model.n_heads=2",
        "model.head_dim=16",
        "model.mlp_hidden=85",
        "train.batch_size=4",
        "train.seq_len=32",
        "train.eval_every=0",
        "train.eval_batches=2",
        "train.checkpoint_every=0",
        "train.warmup_steps=2",
        "train.seed=1337",
    ] {
        r.set(kv).unwrap();
    }
    r
}

const STEPS: usize = 3;
const MICROS: usize = 2;

fn digest(ids: impl Iterator<Item = u32>) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for id in ids {
        h.update(id.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// What the data path gives today: (count, split, digest, batches [step][micro] = (x, y)).
fn observe(dir: &Path) -> serde_json::Value {
    unsafe { std::env::set_var("DDL_CACHE_DIR", dir.join("cache")) };
    let corpus = ddl::testing::data_path("assets/tinyshakespeare.txt").display().to_string();
    let run = fixed_run(&corpus);
    let t = &run.train;
    let data = ddl::train::data::open_for_run(&run).unwrap();
    let mut batches = Vec::new();
    for step in 0..STEPS {
        for micro in 0..MICROS {
            let (x, y) = data.train_batch(t.seed, step, micro, t.batch_size, t.seq_len);
            batches.push(serde_json::json!({"step": step, "micro": micro, "x": x, "y": y}));
        }
    }
    let gpu = ddl::testing::gpu();
    let out = dir.join("run");
    let s =
        ddl::train::train(gpu, TrainOptions { run, steps: STEPS, out, resume: false, overwrite: false, quiet: true })
            .unwrap();
    serde_json::json!({
        "tokens": data.len(),
        "split": data.split,
        "digest": digest((0..data.len()).map(|i| data.get(i))),
        "batches": batches,
        "losses": s.losses,
    })
}

#[test]
#[ignore = "records the fixture; run once with the data path it describes"]
fn record() {
    let v = observe(&tmpdir("record"));
    std::fs::write(fixture_path(), serde_json::to_string(&v).unwrap()).unwrap();
}

#[test]
fn the_data_path_reproduces_the_recorded_fixture() {
    let want: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture_path()).unwrap()).unwrap();
    let got = observe(&tmpdir("fixture"));
    for k in ["tokens", "split", "digest", "batches"] {
        assert_eq!(got[k], want[k], "{k} differs from the recorded text path");
    }
    let (g, w) = (got["losses"].as_array().unwrap(), want["losses"].as_array().unwrap());
    assert_eq!(g.len(), w.len());
    for (i, (a, b)) in g.iter().zip(w).enumerate() {
        let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
        assert!((a - b).abs() <= 1e-4 * b.abs(), "loss {i}: {a} vs recorded {b}");
    }
}
