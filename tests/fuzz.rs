//! Fuzzing (proptest) of the three readers of untrusted files: the checkpoint loader, the config
//! parsers (run config TOML and experiment specs) and the golden-file reader. Each starts from a
//! valid file and applies random mutations — bit flips, byte writes, truncation, insertions,
//! deletions, and structure-aware edits that rewrite a number inside a safetensors JSON header
//! (keeping the header's length prefix right, so the parsers get past the first checks). The
//! property: the reader returns `Ok` or an error, never panics, and what it accepts is sane.
//!
//! The test command runs a few hundred cases per target; a fuzzing campaign runs many more:
//!   DDL_FUZZ_CASES=1000000 cargo test --test fuzz -- --test-threads 3
//! (see docs/FUZZING.md; not `--release`, whose profile turns the overflow checks off, and an
//! overflow is one of the panics a campaign looks for: the golden reader's was one).

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use ddl::model::{Layout, ModelConfig, Variant};
use ddl::tokenizer::{CharTokenizer, Tokenizer};
use ddl::train::{RunConfig, checkpoint};

/// The cases per target: `DDL_FUZZ_CASES` where set, else `default`. A value that is not a
/// count stops the test with a message ("1e6" or "1_000_000" ran the few hundred default cases
/// as if it were a campaign).
fn cases(default: u32) -> u32 {
    let set = std::env::var("DDL_FUZZ_CASES").ok();
    cases_from(set.as_deref(), default).unwrap_or_else(|e| panic!("{e}"))
}

/// [`cases`] from the variable's value (`None`: not set).
fn cases_from(set: Option<&str>, default: u32) -> Result<u32, String> {
    match set.map(|v| (v, v.trim().parse::<u32>())) {
        None => Ok(default),
        Some((_, Ok(n))) if n > 0 => Ok(n),
        Some((v, _)) => Err(format!(
            "DDL_FUZZ_CASES={v}: expected a whole number of cases per target from 1 to {} (digits only, \
             e.g. DDL_FUZZ_CASES=1000000), or unset it for this target's default {default}",
            u32::MAX
        )),
    }
}

#[test]
fn a_case_count_that_is_not_a_count_is_refused() {
    assert_eq!(cases_from(None, 400), Ok(400));
    assert_eq!(cases_from(Some("1000000"), 400), Ok(1_000_000));
    for bad in ["1e6", "1_000_000", "0", "-5", "", "lots", "5000000000"] {
        let e = cases_from(Some(bad), 400).unwrap_err();
        assert!(e.contains(&format!("DDL_FUZZ_CASES={bad}:")) && e.contains("e.g. DDL_FUZZ_CASES=1000000"), "{e}");
    }
}

fn runner(default: u32) -> TestRunner {
    TestRunner::new(Config { cases: cases(default), failure_persistence: None, ..Config::default() })
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Set(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    /// Replace the n-th number of the safetensors JSON header with this one.
    HeaderNumber(usize, u64),
    /// Replace the n-th number of a text file with this one.
    TextNumber(usize, i64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(p, b)| Mutation::Flip(p, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Mutation::Set(p, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..16)).prop_map(|(p, b)| Mutation::Insert(p, b)),
        (any::<usize>(), 1usize..64).prop_map(|(p, n)| Mutation::Delete(p, n)),
        (any::<usize>(), prop_oneof![0u64..4, 0u64..100_000, any::<u64>()])
            .prop_map(|(i, v)| Mutation::HeaderNumber(i, v)),
        (any::<usize>(), prop_oneof![-2i64..4, any::<i64>()]).prop_map(|(i, v)| Mutation::TextNumber(i, v)),
    ]
}

/// Byte ranges of the ASCII digit runs of `s`.
fn numbers(s: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if s[i].is_ascii_digit() {
            let j = s[i..].iter().position(|c| !c.is_ascii_digit()).map_or(s.len(), |k| i + k);
            out.push((i, j));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

fn apply(seed: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for m in muts {
        let n = b.len().max(1);
        match m {
            Mutation::Flip(p, bit) => {
                if !b.is_empty() {
                    b[p % n] ^= 1 << bit;
                }
            }
            Mutation::Set(p, v) => {
                if !b.is_empty() {
                    b[p % n] = *v;
                }
            }
            Mutation::Truncate(p) => b.truncate(p % n),
            Mutation::Insert(p, bytes) => {
                let at = p % (b.len() + 1);
                b.splice(at..at, bytes.iter().copied());
            }
            Mutation::Delete(p, len) => {
                if !b.is_empty() {
                    let at = p % n;
                    let end = (at + len).min(b.len());
                    b.drain(at..end);
                }
            }
            Mutation::HeaderNumber(i, v) => {
                if b.len() < 8 {
                    continue;
                }
                let hl = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
                if hl == 0 || 8 + hl > b.len() {
                    continue;
                }
                let header = b[8..8 + hl].to_vec();
                let nums = numbers(&header);
                if nums.is_empty() {
                    continue;
                }
                let (s, e) = nums[i % nums.len()];
                let mut h = header[..s].to_vec();
                h.extend_from_slice(v.to_string().as_bytes());
                h.extend_from_slice(&header[e..]);
                let mut out = (h.len() as u64).to_le_bytes().to_vec();
                out.extend_from_slice(&h);
                out.extend_from_slice(&b[8 + hl..]);
                b = out;
            }
            Mutation::TextNumber(i, v) => {
                let nums = numbers(&b);
                if nums.is_empty() {
                    continue;
                }
                let (s, e) = nums[i % nums.len()];
                let rep = v.to_string();
                b.splice(s..e, rep.bytes());
            }
        }
    }
    b
}

fn muts() -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec(mutation(), 1..5)
}

/// A valid small checkpoint's model.safetensors (a d_v = 3 ddl_ec model, so the header has
/// tensors of every rank).
fn checkpoint_seed() -> Vec<u8> {
    let mut cfg = ModelConfig::preset("tiny", Variant::DdlEc).unwrap();
    cfg.d_model = 8;
    cfg.n_layers = 1;
    cfg.n_heads = 2;
    cfg.head_dim = 4;
    cfg.mlp_hidden = 12;
    cfg.d_v = 3;
    let tok = Tokenizer::Char(CharTokenizer::from_corpus("abcdefgh ij\n").unwrap());
    cfg.vocab_size = tok.vocab_size();
    let layout = Layout::new(&cfg);
    let params = layout.init(1);
    let dir = std::env::temp_dir().join(format!("ddl-fuzz-seed-{}", std::process::id()));
    checkpoint::save(&dir, &cfg, &tok, &layout, &params, None).unwrap();
    let b = std::fs::read(dir.join(checkpoint::MODEL_FILE)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    b
}

#[test]
fn fuzz_the_checkpoint_loader() {
    let seed = checkpoint_seed();
    if let Err(e) = checkpoint::parse_model(Path::new("seed"), &seed) {
        panic!("the seed must load: {e}");
    }
    runner(400)
        .run(&muts(), |m| {
            let bytes = apply(&seed, &m);
            if let Ok((cfg, tok, _, params)) = checkpoint::parse_model(Path::new("fuzz/model.safetensors"), &bytes) {
                let layout = Layout::new(&cfg);
                prop_assert_eq!(params.len(), layout.total);
                prop_assert!(params.iter().all(|x| x.is_finite()));
                prop_assert!(tok.vocab_size() <= cfg.vocab_size);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_the_config_parsers() {
    let base = RunConfig::preset("tiny", Variant::Ddl).unwrap();
    let seed = toml::to_string(&base).unwrap().into_bytes();
    let spec_seed = std::fs::read(ddl::testing::data_path("experiments/shakespeare.toml")).unwrap();
    runner(400)
        .run(&(muts(), muts()), |(m1, m2)| {
            let text = String::from_utf8_lossy(&apply(&seed, &m1)).to_string();
            let mut run = base.clone();
            if run.merge_toml(&text, "fuzz.toml").is_ok() {
                // Accepted settings either validate or give a named error; neither panics.
                let _ = run.validate();
                let _ = toml::to_string(&run);
            }
            let spec = String::from_utf8_lossy(&apply(&spec_seed, &m2)).to_string();
            if let Ok(s) = ddl::experiment::ExperimentSpec::parse(&spec, Path::new("fuzz-spec.toml")) {
                prop_assert!(!s.variants.is_empty() && !s.seeds.is_empty() && s.steps > 0);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_the_golden_reader() {
    let seed = std::fs::read(ddl::testing::data_path("tests/golden/ddl_v1.safetensors")).unwrap();
    assert!(ddl::golden::Golden::parse(Path::new("seed"), &seed).is_ok(), "the seed must load");
    runner(150)
        .run(&muts(), |m| {
            let bytes = apply(&seed, &m);
            let _ = ddl::golden::Golden::parse(Path::new("fuzz.safetensors"), &bytes);
            Ok(())
        })
        .unwrap();
}
