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
    let (data, _) = ddl::train::data::open_for_run(&run, None).unwrap();
    let mut batches = Vec::new();
    for step in 0..STEPS {
        for micro in 0..MICROS {
            let (x, y) = data.train_batch(t.seed, step, micro, t.batch_size, t.seq_len).unwrap();
            batches.push(serde_json::json!({"step": step, "micro": micro, "x": x, "y": y}));
        }
    }
    let gpu = ddl::testing::gpu();
    let out = dir.join("run");
    let s = ddl::train::train(
        gpu,
        TrainOptions { run, steps: STEPS, out, resume: false, overwrite: false, show: ddl::train::Show::Quiet },
    )
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

fn ddl(dir: &Path) -> std::process::Command {
    ddl::testing::ddl_command(env!("CARGO_BIN_EXE_ddl"), dir)
}

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `ddl data prepare` on TinyShakespeare (char tokens, the default validation fraction) writes
/// shards whose stream, split and batches are the fixture's: `--data` on them trains on exactly
/// what `--corpus` did.
#[test]
fn prepared_shards_give_the_fixture_tokens_and_batches() {
    let dir = tmpdir("prepare");
    let shk = ddl::testing::data_path("assets/tinyshakespeare.txt");
    let out = dir.join("shk");
    let o = ddl(&dir).args(["data", "prepare", "--tokenizer", "char", "--out"]).arg(&out).arg(&shk).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("1003855 training and 111539 validation tokens"), "{}", text(&o));
    let want: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture_path()).unwrap()).unwrap();
    let mut run = fixed_run("unused");
    run.data = out.display().to_string();
    let (data, tok) = ddl::train::data::open_for_run(&run, None).unwrap();
    assert_eq!(tok.vocab_size(), 65);
    assert_eq!(serde_json::json!(data.len()), want["tokens"]);
    assert_eq!(serde_json::json!(data.split), want["split"]);
    assert_eq!(serde_json::json!(digest((0..data.len()).map(|i| data.get(i)))), want["digest"]);
    let t = &run.train;
    for b in want["batches"].as_array().unwrap() {
        let (step, micro) = (b["step"].as_u64().unwrap() as usize, b["micro"].as_u64().unwrap() as usize);
        let (x, y) = data.train_batch(t.seed, step, micro, t.batch_size, t.seq_len).unwrap();
        assert_eq!(
            (serde_json::json!(x), serde_json::json!(y)),
            (b["x"].clone(), b["y"].clone()),
            "step {step} micro {micro}"
        );
    }
    // A non-empty --out is refused; nothing is left beside it.
    let o = ddl(&dir).args(["data", "prepare", "--tokenizer", "char", "--out"]).arg(&out).arg(&shk).output().unwrap();
    assert!(!o.status.success() && text(&o).contains("not empty"), "{}", text(&o));
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("prepare-"))
        .collect();
    assert!(leftovers.is_empty());
}

/// Documents: files of a folder and JSON lines, separated by the end-of-text token; shards split
/// at --shard-tokens; the validation split from the end; parallel tokenisation gives the tokens
/// of one sequential encoding.
#[test]
fn documents_from_folders_and_json_lines_are_separated_by_the_end_of_text_token() {
    let dir = tmpdir("docs");
    let corpus = ddl::testing::small_corpus(&dir);
    let bpe = dir.join("bpe.json");
    let o = ddl(&dir)
        .args(["tokenizer", "train", "--corpus", &corpus, "--vocab-size", "300", "--out"])
        .arg(&bpe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let inputs = dir.join("in");
    std::fs::create_dir_all(inputs.join("sub")).unwrap();
    // Byte-order marks (as Windows editors write them) are not text: a.txt and c.jsonl start with one.
    std::fs::write(inputs.join("a.txt"), "\u{feff}First document.\nSecond line.\n").unwrap();
    std::fs::write(inputs.join("sub/b.txt"), "Another file.").unwrap();
    std::fs::write(inputs.join("c.jsonl"), "\u{feff}{\"text\": \"one\"}\n\n{\"text\": \"two\", \"id\": 7}\n").unwrap();
    let out = dir.join("shards");
    let o = ddl(&dir)
        .args(["data", "prepare", "--tokenizer"])
        .arg(&bpe)
        .args(["--val-tokens", "5", "--shard-tokens", "8", "--name", "mix", "--out"])
        .arg(&out)
        .arg(&inputs)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("4 documents"), "{}", text(&o));
    let tok = ddl::tokenizer::Tokenizer::load(&bpe).unwrap();
    let eot = tok.eot_id().unwrap();
    // Sorted paths: a.txt, c.jsonl (two documents), sub/b.txt.
    let mut want = Vec::new();
    for (i, d) in ["First document.\nSecond line.\n", "one", "two", "Another file."].iter().enumerate() {
        if i > 0 {
            want.push(eot);
        }
        want.extend(tok.encode(d).unwrap());
    }
    let mut run = fixed_run("unused");
    run.data = out.display().to_string();
    run.set("train.seq_len=2").unwrap();
    let (data, _) = ddl::train::data::open_for_run(&run, None).unwrap();
    assert_eq!((0..data.len()).map(|i| data.get(i)).collect::<Vec<_>>(), want);
    assert_eq!(data.val.len(), 5);
    assert!(data.train.shards.iter().all(|s| s.len() <= 8) && data.train.shards.len() >= 2);
    assert!(out.join("mix_train_000000.bin").exists() && out.join("mix_val_000000.bin").exists());
    // `ddl data inspect`: the set's shards, tokenizer and a sample, and --verify's pass over it.
    let inspect = |args: &[&str]| ddl(&dir).args(["data", "inspect"]).args(args).output().unwrap();
    let o = inspect(&[out.to_str().unwrap(), "--verify", "--at", "1", "--sample", "4", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((j["meta"].as_bool(), j["tokenizer"]["kind"].as_str()), (Some(true), Some("bpe")));
    assert_eq!(j["tokenizer"]["vocab_size"].as_u64(), Some(tok.vocab_size() as u64));
    let (n, nt) = (want.len(), want.len() - 5);
    assert_eq!((j["splits"][0]["tokens"].as_u64(), j["splits"][1]["tokens"].as_u64()), (Some(nt as u64), Some(5)));
    assert_eq!(j["splits"][0]["shards"].as_array().unwrap().len(), data.train.shards.len());
    assert_eq!(j["sample"]["ids"], serde_json::json!(want[1..5]));
    assert_eq!(j["sample"]["text"].as_str(), Some(tok.decode(&want[1..5]).unwrap().as_str()));
    for (i, part) in [&want[..nt], &want[nt..n]].into_iter().enumerate() {
        let v = &j["verified"]["splits"][i];
        let distinct: std::collections::BTreeSet<_> = part.iter().collect();
        assert_eq!(v["distinct"].as_u64(), Some(distinct.len() as u64), "{v}");
        assert_eq!(v["max_id"].as_u64(), part.iter().max().map(|&m| m as u64), "{v}");
        assert_eq!(v["end_of_text"].as_u64(), Some(part.iter().filter(|&&t| t == eot).count() as u64), "{v}");
    }
    assert_eq!(j["verified"]["digests"].as_bool(), Some(true));
    let o = inspect(&[out.to_str().unwrap(), "--verify"]);
    let t = text(&o);
    for want in [
        "made by `ddl data prepare` (meta.json)",
        "tokenizer: bpe",
        "mix_train_000000.bin  8 tokens",
        "every shard's SHA-256 matches meta.json",
        "sample: train split, tokens 0..36 of 36:",
    ] {
        assert!(o.status.success() && t.contains(want), "{want:?} not in:\n{t}");
    }
    // A position past the split, a split the glob has no shard of: said, with what to do.
    let o = inspect(&[out.to_str().unwrap(), "--split", "val", "--at", "5"]);
    assert!(!o.status.success() && text(&o).contains("--at 5: the val split holds 5 tokens"), "{}", text(&o));
    let glob = format!("{}/*train*.bin", out.display());
    let o = inspect(&[&glob, "--split", "val"]);
    assert!(!o.status.success() && text(&o).contains("holds no validation tokens"), "{}", text(&o));
    // A changed shard fails --verify naming it.
    let changed = dir.join("changed");
    std::fs::create_dir_all(&changed).unwrap();
    for e in std::fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, changed.join(p.file_name().unwrap())).unwrap();
    }
    let mut bytes = std::fs::read(changed.join("mix_val_000000.bin")).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(changed.join("mix_val_000000.bin"), &bytes).unwrap();
    let o = inspect(&[changed.to_str().unwrap(), "--verify"]);
    assert!(!o.status.success() && text(&o).contains("mix_val_000000.bin: its SHA-256 differs"), "{}", text(&o));
    // Headerless files without meta.json: ids without text unless --tokenizer, whose vocabulary
    // --verify holds every id to (the first one outside named with its file and place).
    let raw = dir.join("raw");
    std::fs::create_dir_all(&raw).unwrap();
    let u16s = |ids: &[u16]| ids.iter().flat_map(|i| i.to_le_bytes()).collect::<Vec<u8>>();
    std::fs::write(raw.join("train.bin"), u16s(&[want[0] as u16, want[1] as u16, 60000])).unwrap();
    std::fs::write(raw.join("val.bin"), u16s(&[want[0] as u16])).unwrap();
    let o = inspect(&[raw.to_str().unwrap(), "--data-format", "raw-u16", "--sample", "2"]);
    let t = text(&o);
    assert!(o.status.success() && t.contains("no meta.json") && t.contains(&format!("{} {}", want[0], want[1])), "{t}");
    let o = inspect(&[
        raw.to_str().unwrap(),
        "--data-format",
        "raw-u16",
        "--sample",
        "2",
        "--tokenizer",
        bpe.to_str().unwrap(),
    ]);
    assert!(o.status.success() && text(&o).contains(&tok.decode(&want[..2]).unwrap()), "{}", text(&o));
    let o =
        inspect(&[raw.to_str().unwrap(), "--data-format", "raw-u16", "--verify", "--tokenizer", bpe.to_str().unwrap()]);
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains("train.bin': token 2 is 60000, outside the tokenizer's vocabulary"),
        "{t}"
    );
    let o = inspect(&[raw.to_str().unwrap(), "--data-format", "raw-u16", "--tokenizer", bpe.to_str().unwrap()]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("token 2 of the train split is 60000, outside the tokenizer's"), "{t}");
    // A val.bin of no token is said as no use for training (it was listed as "0 tokens" alone).
    std::fs::write(raw.join("val.bin"), b"").unwrap();
    let o = inspect(&[raw.to_str().unwrap(), "--data-format", "raw-u16", "--sample", "0"]);
    let t = text(&o);
    assert!(o.status.success() && t.contains("the val split's shards hold no token"), "{t}");
    // A JSON line without a text field names the file and line.
    std::fs::write(inputs.join("c.jsonl"), "{\"text\": \"one\"}\n{\"body\": \"two\"}\n").unwrap();
    let o = ddl(&dir)
        .args(["data", "prepare", "--tokenizer"])
        .arg(&bpe)
        .arg("--out")
        .arg(dir.join("bad"))
        .arg(&inputs)
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o).contains("c.jsonl") && text(&o).contains("line 2"), "{}", text(&o));
    assert!(!dir.join("bad").exists());
    // Inputs that are not there, hold nothing, or are not UTF-8: named, nothing written.
    let empty = dir.join("empty-folder");
    std::fs::create_dir_all(&empty).unwrap();
    let latin = dir.join("latin1.txt");
    std::fs::write(&latin, b"caf\xe9\n").unwrap();
    let latin_lines = dir.join("latin1.jsonl");
    std::fs::write(&latin_lines, b"{\"text\": \"ok\"}\n{\"text\": \"caf\xe9\"}\n").unwrap();
    for (input, needle) in [
        (dir.join("missing.txt"), "input"),
        (empty.clone(), "holds no .txt or .jsonl files"),
        (latin.clone(), "is not UTF-8 text (first invalid byte at offset 3)"),
        (latin_lines.clone(), "line 2: not UTF-8 text (first invalid byte at offset 13 of the line)"),
    ] {
        let o = ddl(&dir)
            .args(["data", "prepare", "--tokenizer", "char", "--out"])
            .arg(dir.join("bad"))
            .arg(&input)
            .output()
            .unwrap();
        let t = text(&o);
        assert!(
            o.status.code() == Some(1)
                && t.contains(needle)
                && t.contains(input.file_name().unwrap().to_str().unwrap()),
            "{t}"
        );
        assert!(!dir.join("bad").exists());
    }
    // A tokenizer without an end-of-text token that drops newlines (WordPiece on whitespace):
    // the documents meet with nothing between them, which is said, and meta.json says so too.
    let wordpiece = dir.join("wordpiece.json");
    std::fs::write(
        &wordpiece,
        r###"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
            "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,
            "decoder":{"type":"WordPiece","prefix":"##","cleanup":true},
            "model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##",
                     "max_input_chars_per_word":100,"vocab":{"[UNK]":0,"one":1,"two":2}}}"###,
    )
    .unwrap();
    let lines = dir.join("two.jsonl");
    std::fs::write(&lines, "{\"text\": \"one two\"}\n{\"text\": \"two one one\"}\n").unwrap();
    let o = ddl(&dir)
        .args(["data", "prepare", "--val-tokens", "1", "--tokenizer"])
        .arg(&wordpiece)
        .arg("--out")
        .arg(dir.join("joined"))
        .arg(&lines)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("documents follow each other with nothing between them"), "{}", text(&o));
    let meta = std::fs::read_to_string(dir.join("joined/meta.json")).unwrap();
    assert!(meta.contains("separated by nothing"), "{meta}");
    // A JSON-lines file as a training corpus would be read JSON syntax and all: refused, pointing
    // to data prepare.
    let o = ddl(&dir).args(["train", "--steps", "1", "--out", "jl-run", "--corpus"]).arg(&lines).output().unwrap();
    assert!(!o.status.success() && text(&o).contains("is a JSON-lines file"), "{}", text(&o));
    assert!(!dir.join("jl-run").exists());
    // `ddl tokenizer train` reads its documents (their `text` fields), as data prepare does,
    // whatever the case of its extension, alone or in a folder: the tokenizer trained on the
    // documents' text itself (paragraphs as documents, joined by a newline in the text file).
    let corpus = std::fs::read_to_string(ddl::testing::small_corpus(&dir)).unwrap();
    let paragraphs: Vec<&str> = corpus.split("\n\n").filter(|p| !p.trim().is_empty()).collect();
    let docs = dir.join("docs/UPPER.JSONL");
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    let json: Vec<String> = paragraphs.iter().map(|p| serde_json::json!({ "text": p }).to_string()).collect();
    std::fs::write(&docs, json.join("\n") + "\n").unwrap();
    let plain = dir.join("paragraphs.txt");
    std::fs::write(&plain, paragraphs.join("\n")).unwrap();
    let bpe = |corpus: &Path, out: &str| {
        let o = ddl(&dir)
            .args(["tokenizer", "train", "--vocab-size", "300", "--corpus"])
            .arg(corpus)
            .arg("--out")
            .arg(dir.join(out))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        (text(&o), ddl::tokenizer::Tokenizer::load(&dir.join(out)).unwrap())
    };
    let (said, from_docs) = bpe(&docs, "t-docs.json");
    let (_, from_text) = bpe(&plain, "t-text.json");
    let (_, from_folder) = bpe(&dir.join("docs"), "t-folder.json");
    assert_eq!(from_docs.vocab_size(), 300);
    assert!(from_docs == from_text && from_folder == from_docs, "the documents' text, not their JSON");
    let bytes: usize = paragraphs.iter().map(|p| p.len()).sum();
    assert!(said.contains(&format!("({bytes} bytes -> ")), "{said}");
    // A folder's subfolders are read too, as `data prepare` reads them (their text was left out).
    std::fs::create_dir_all(dir.join("nested/sub")).unwrap();
    std::fs::write(dir.join("nested/top.txt"), paragraphs[0]).unwrap();
    std::fs::copy(&plain, dir.join("nested/sub/more.txt")).unwrap();
    let (said, _) = bpe(&dir.join("nested"), "t-nested.json");
    let both = paragraphs[0].len() + std::fs::metadata(&plain).unwrap().len() as usize;
    assert!(said.contains(&format!("({both} bytes -> ")), "{said}");
    let upper = dir.join("UPPER.JSONL");
    std::fs::copy(&lines, &upper).unwrap();
    let o = ddl(&dir)
        .args(["data", "prepare", "--tokenizer", "char", "--out"])
        .arg(dir.join("upper"))
        .arg(&upper)
        .output()
        .unwrap();
    assert!(o.status.success() && text(&o).contains("2 documents"), "{}", text(&o));
    // A file given twice is read once (in both splits its text would leak), and that is said.
    let o = ddl(&dir)
        .args(["data", "prepare", "--tokenizer", "char", "--out"])
        .arg(dir.join("twice"))
        .arg(&lines)
        .arg(&lines)
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success() && t.contains("2 documents") && t.contains("two.jsonl' reached a second time"), "{t}");
    // A character the given character tokenizer lacks: in a JSON-lines file, its line and the
    // byte in that line's text (the byte was counted over all the documents' text), with a
    // remedy for preparing data (not a resumed run's).
    let chars = dir.join("chars.json");
    ddl::tokenizer::Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_corpus("one tw\n").unwrap())
        .save(&chars)
        .unwrap();
    let odd = dir.join("odd.jsonl");
    std::fs::write(&odd, "{\"text\": \"one two\"}\n\n{\"text\": \"two one\"}\n{\"text\": \"one!\"}\n").unwrap();
    let o = ddl(&dir)
        .args(["data", "prepare", "--tokenizer"])
        .arg(&chars)
        .arg("--out")
        .arg(dir.join("odd"))
        .arg(&odd)
        .output()
        .unwrap();
    let t = text(&o);
    assert!(!o.status.success() && t.contains("odd.jsonl': line 4: character '!' at byte 3 of its text"), "{t}");
    assert!(t.contains("--tokenizer char") && !t.contains("resumed"), "{t}");
    assert!(!dir.join("odd").exists(), "{t}");
}

/// A prepared folder that lost a shard meta.json lists (deleted, moved): `ddl data inspect
/// --verify` fails naming it (it said "every shard's SHA-256 matches meta.json" when a whole
/// split was gone), a plain inspection notes it, and `ddl train --data` names it instead of
/// advising `ddl data prepare --val-tokens N`, as if the set had never had a validation shard.
#[test]
fn a_shard_that_meta_json_lists_and_the_folder_lacks_is_named() {
    let dir = tmpdir("missing-listed");
    let corpus = ddl::testing::small_corpus(&dir);
    let set = dir.join("set");
    let o = ddl(&dir)
        .args(["data", "prepare", "--tokenizer", "char", "--shard-tokens", "5000", "--out"])
        .arg(&set)
        .arg(&corpus)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    for gone in ["data_val_000000.bin", "data_train_000000.bin"] {
        let d = dir.join(format!("without-{gone}"));
        std::fs::create_dir_all(&d).unwrap();
        for e in std::fs::read_dir(&set).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().unwrap() != gone {
                std::fs::copy(&p, d.join(p.file_name().unwrap())).unwrap();
            }
        }
        let inspect = |verify: bool| {
            let mut c = ddl(&dir);
            c.args(["data", "inspect"]).arg(&d);
            if verify {
                c.arg("--verify");
            }
            c.output().unwrap()
        };
        let o = inspect(true);
        let t = text(&o);
        assert!(!o.status.success() && t.contains(gone) && t.contains("lists this shard, which is missing"), "{t}");
        assert!(!t.contains("matches meta.json"), "{t}");
        let o = inspect(false);
        let t = text(&o);
        assert!(o.status.success() && t.contains(gone) && t.contains("which is missing"), "{t}");
        let o = ddl(&dir)
            .args(["train", "--steps", "1", "--set", "train.seq_len=16", "--out"])
            .arg(dir.join("run"))
            .arg("--data")
            .arg(&d)
            .output()
            .unwrap();
        let t = text(&o);
        assert!(!o.status.success() && t.contains(gone) && t.contains("lists this shard, which is missing"), "{t}");
        assert!(!t.contains("--val-tokens") && !dir.join("run").exists(), "{t}");
    }
}

/// A shard written by hand here (llm.c's header, uint16 tokens, a vocabulary of 50,257 as GPT-2's)
/// trains through `ddl train --data` with the tokenizer given by --tokenizer; then the problems:
/// a truncated shard, a wrong magic, a token id beyond the vocabulary, meta.json naming another
/// tokenizer, and a headerless file are errors naming the file.
#[test]
fn hand_written_llmc_shards_train_and_bad_shards_are_clear_errors() {
    let dir = tmpdir("llmc");
    // A word-level tokenizer of 50,257 tokens (GPT-2's vocabulary size).
    let vocab: serde_json::Map<String, serde_json::Value> =
        (0..50_257).map(|i| (format!("w{i}"), serde_json::json!(i))).collect();
    let tok_json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"}
    });
    let tok = dir.join("wl.json");
    std::fs::write(&tok, tok_json.to_string()).unwrap();
    let shard = |path: &Path, magic: i32, count: i32, tokens: &[u16]| {
        let mut b = Vec::new();
        for w in [magic, 1, count] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.resize(1024, 0);
        for t in tokens {
            b.extend_from_slice(&t.to_le_bytes());
        }
        std::fs::write(path, b).unwrap();
    };
    let data = dir.join("fw");
    std::fs::create_dir_all(&data).unwrap();
    let toks: Vec<u16> = (0..3000u32).map(|i| ((i * 7919) % 50_257) as u16).collect();
    shard(&data.join("fw_val_000000.bin"), 20240520, 300, &toks[..300]);
    shard(&data.join("fw_train_000001.bin"), 20240520, 1500, &toks[300..1800]);
    shard(&data.join("fw_train_000002.bin"), 20240520, 1200, &toks[1800..]);
    let small = [
        "--set",
        "model.d_model=16",
        "--set",
        "model.n_layers=1",
        "--set",
        "model.n_heads=2",
        "--set",
        "model.head_dim=8",
        "--set",
        "model.mlp_hidden=32",
        "--set",
        "train.batch_size=2",
        "--set",
        "train.seq_len=16",
        "--set",
        "train.eval_batches=1",
    ];
    let train = |data: &Path, out: &str, extra: &[&str]| {
        let mut c = ddl(&dir);
        c.args(["train", "--variant", "ddl", "--steps", "2", "--data"]).arg(data).arg("--out").arg(dir.join(out));
        c.args(small).args(extra);
        c.output().unwrap()
    };
    let o = train(&data, "run", &["--tokenizer", tok.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("validation loss") && text(&o).contains("288 tokens"), "{}", text(&o));
    let cfg = std::fs::read_to_string(dir.join("run/config.toml")).unwrap();
    assert!(cfg.contains("vocab_size = 50257") && cfg.contains("data = "), "{cfg}");
    // It read no corpus, and its config.toml says so (it named the default corpus).
    assert!(cfg.contains("corpus = \"\""), "{cfg}");
    // The dry run shows that file as the run wrote it (it showed the default corpus).
    let o = train(&data, "run-dry", &["--tokenizer", tok.to_str().unwrap(), "--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let shown = text(&o);
    let shown = shown.split_once("settings (config.toml):\n").map(|(_, s)| s).unwrap_or_else(|| panic!("{shown}"));
    assert_eq!(shown.trim_end(), cfg.trim_end());
    assert!(!dir.join("run-dry").exists());
    // Resume checks the data cheaply: a changed shard is refused, the original resumes.
    let resume = |extra: &[&str]| {
        let mut c = ddl(&dir);
        c.args(["train", "--resume"]).arg(dir.join("run")).args(["--steps", "3"]).args(extra);
        c.output().unwrap()
    };
    let orig = std::fs::read(data.join("fw_train_000002.bin")).unwrap();
    let other: Vec<u16> = toks[1800..].iter().map(|t| (t + 1) % 50_257).collect();
    shard(&data.join("fw_train_000002.bin"), 20240520, 1200, &other);
    let o = resume(&[]);
    assert!(!o.status.success() && text(&o).contains("data changed since this run started"), "{}", text(&o));
    std::fs::write(data.join("fw_train_000002.bin"), orig).unwrap();
    let o = resume(&[]);
    assert!(o.status.success(), "{}", text(&o));
    // Without a tokenizer for shards that have no meta.json: say which to pass.
    let o = train(&data, "r0", &[]);
    assert!(!o.status.success() && text(&o).contains("--tokenizer FILE"), "{}", text(&o));
    let bad = |name: &str, f: &dyn Fn(&Path), needles: &[&str]| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        for e in std::fs::read_dir(&data).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
        }
        f(&d);
        let o = train(&d, &format!("{name}-run"), &["--tokenizer", tok.to_str().unwrap()]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{name}: {t}");
        for n in needles {
            assert!(t.contains(n), "{name}: expected {n:?} in {t}");
        }
        assert!(!t.contains("panicked"), "{t}");
        assert!(!dir.join(format!("{name}-run")).exists(), "{name}: a refused run left its folder");
    };
    bad(
        "truncated",
        &|d| shard(&d.join("fw_train_000002.bin"), 20240520, 1200, &toks[1800..2000]),
        &["fw_train_000002.bin", "says 1200 tokens but the file holds 200"],
    );
    bad(
        "magic",
        &|d| shard(&d.join("fw_train_000001.bin"), 1234, 1500, &toks[300..1800]),
        &["fw_train_000001.bin", "magic 1234", "raw-u16"],
    );
    bad(
        "vocab",
        &|d| shard(&d.join("fw_val_000000.bin"), 20240520, 300, &[60_000u16; 300]),
        &["fw_val_000000.bin", "60000", "vocabulary of 50257"],
    );
    // A meta.json as `ddl data prepare` writes it, with edits.
    let meta_with = |d: &Path, edit: &dyn Fn(&mut serde_json::Value)| {
        let other = ddl::tokenizer::Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_corpus("abc").unwrap());
        let listed = |file: &str, tokens: usize| serde_json::json!({"file": file, "tokens": tokens, "sha256": "0"});
        let mut meta = serde_json::json!({"format": "x", "tokenizer": other.to_json(), "vocab_size": 3,
            "train_tokens": 2700, "val_tokens": 300, "shards": [listed("fw_val_000000.bin", 300),
            listed("fw_train_000001.bin", 1500), listed("fw_train_000002.bin", 1200)]});
        edit(&mut meta);
        std::fs::write(d.join("meta.json"), meta.to_string()).unwrap();
    };
    bad("meta", &|d| meta_with(d, &|_| {}), &["meta.json", "another tokenizer", "vocabulary 3"]);
    // A meta.json that does not describe its shards (edited by hand): named before anything trains.
    bad(
        "meta-split",
        &|d| meta_with(d, &|m| m["train_tokens"] = serde_json::json!(2000)),
        &["meta.json", "train_tokens is 2000", "prepare the data again"],
    );
    bad(
        "meta-shard",
        &|d| {
            meta_with(d, &|m| {
                m["shards"][1]["tokens"] = serde_json::json!(1000);
                m["train_tokens"] = serde_json::json!(2200);
            })
        },
        &["meta.json", "1000 tokens for fw_train_000001.bin, whose header says 1500"],
    );
    bad(
        "meta-vocab",
        &|d| meta_with(d, &|m| m["vocab_size"] = serde_json::json!(100)),
        &["meta.json", "vocab_size is 100 but its tokenizer has 3"],
    );
    bad(
        "meta-broken",
        &|d| std::fs::write(d.join("meta.json"), "{").unwrap(),
        &["meta.json", "does not read", "prepare the data again", "remove"],
    );
    // A headerless uint16 file is read only with --data-format raw-u16.
    let raw = dir.join("raw");
    std::fs::create_dir_all(&raw).unwrap();
    let bytes = |t: &[u16]| t.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    std::fs::write(raw.join("train.bin"), bytes(&toks[300..])).unwrap();
    std::fs::write(raw.join("val.bin"), bytes(&toks[..300])).unwrap();
    let o = train(&raw, "raw-run", &["--tokenizer", tok.to_str().unwrap(), "--data-format", "raw-u16"]);
    assert!(o.status.success(), "{}", text(&o));
    // raw-u16 on a folder of llm.c shards: says what raw-u16 reads, and which format they are.
    let o = train(&data, "raw-llmc", &["--tokenizer", tok.to_str().unwrap(), "--data-format", "raw-u16"]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("no train.bin") && t.contains("drop --data-format raw-u16"), "{t}");
}

/// `ddl data cache` lists the shard sets `--corpus` made (corpus, state) and removes them on
/// request; a run on an edited corpus removes its earlier set and says so; bad flags are clear
/// errors.
#[test]
fn the_corpus_cache_is_listed_and_pruned_from_the_command_line() {
    let dir = tmpdir("cache-cli");
    let corpus = ddl::testing::small_corpus(&dir);
    let run = |args: &[&str]| {
        let o = ddl(&dir).args(args).output().unwrap();
        (o.status.success(), text(&o))
    };
    let (ok, out) = run(&["data", "cache"]);
    assert!(ok && out.contains("(empty: no set made yet)"), "{out}");
    let train = |name: &str| {
        let mut args = vec!["train", "--preset", "tiny", "--variant", "baseline", "--steps", "1", "--corpus", &corpus];
        for kv in ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "train.batch_size=2", "train.seq_len=16"]
        {
            args.extend(["--set", kv]);
        }
        let out = dir.join(name);
        let out = out.to_str().unwrap().to_string();
        let o = ddl(&dir).args(&args).args(["--no-autotune", "--out", &out]).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        text(&o)
    };
    train("r1");
    let (ok, out) = run(&["data", "cache"]);
    let canonical = std::fs::canonicalize(&corpus).unwrap().display().to_string();
    assert!(ok && out.contains(&canonical) && out.contains("current") && out.contains("1 set,"), "{out}");
    let (_, json) = run(&["data", "cache", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["sets"][0]["state"], "current", "{json}");
    assert_eq!(v["sets"][0]["record"]["corpus"], canonical.as_str(), "{json}");
    // The run's data.json names the set it trained on.
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("r1/data.json")).unwrap()).unwrap();
    assert_eq!(rec["folder"], v["sets"][0]["dir"], "{rec}");

    // The corpus edited: a resume is refused (other tokens) and leaves the earlier set in the
    // cache (it removed it before its data check); the next run's set replaces it.
    std::fs::write(&corpus, std::fs::read_to_string(&corpus).unwrap() + "\nMore.\n").unwrap();
    let r1 = dir.join("r1");
    let (ok, out) = run(&["train", "--resume", r1.to_str().unwrap(), "--steps", "2", "--no-autotune"]);
    assert!(!ok && out.contains("data changed since this run started"), "{out}");
    assert!(!out.contains("removed"), "{out}");
    let (_, out) = run(&["data", "cache"]);
    assert!(out.contains("2 sets,") && out.contains("stale"), "{out}");
    let said = train("r2");
    assert!(said.contains("removed 1 cached shard set of an earlier version"), "{said}");
    let (_, out) = run(&["data", "cache"]);
    assert!(out.contains("1 set,") && !out.contains("stale"), "{out}");
    // A damaged record is said as damaged, naming the file and the remedies (it was listed as
    // an earlier version's set).
    let (_, json) = run(&["data", "cache", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let record = Path::new(v["sets"][0]["dir"].as_str().unwrap()).join("cache.json");
    std::fs::write(&record, "{\"corpus\": ").unwrap();
    let (ok, out) = run(&["data", "cache"]);
    assert!(
        ok && out.contains("record damaged (cache.json does not read)")
            && !out.contains("older ddl")
            && out.contains(&record.display().to_string())
            && out.contains("a run with their settings finds them and writes the record again")
            && out.contains("`ddl data cache --clear`"),
        "{out}"
    );
    let (_, json) = run(&["data", "cache", "--json"]);
    assert!(json.contains("\"state\":\"record_damaged\""), "{json}");

    // Removing: a dry run keeps, --clear removes.
    let (ok, out) = run(&["data", "cache", "--clear", "--dry-run"]);
    assert!(ok && out.contains("would remove") && out.contains("would free 1 set"), "{out}");
    assert!(run(&["data", "cache"]).1.contains("1 set,"));
    let (ok, out) = run(&["data", "cache", "--clear"]);
    assert!(ok && out.contains("freed 1 set"), "{out}");
    assert!(run(&["data", "cache"]).1.contains("(empty)"));

    // A resumed run whose corpus is gone: restore it, or give it where it is now (`--corpus`,
    // its tokens checked against data.json).
    let aside = dir.join("corpus.aside");
    std::fs::rename(&corpus, &aside).unwrap();
    let r1 = dir.join("r1");
    let (ok, out) = run(&["train", "--resume", r1.to_str().unwrap(), "--steps", "2", "--no-autotune"]);
    assert!(
        !ok && out.contains("the run's corpus") && out.contains("restore it") && out.contains("pass --corpus PATH"),
        "{out}"
    );
    std::fs::rename(&aside, &corpus).unwrap();
    // A validation fraction that leaves no training token: said in the settings' words.
    let (ok, out) = run(&[
        "train",
        "--preset",
        "tiny",
        "--steps",
        "1",
        "--corpus",
        &corpus,
        "--set",
        "train.val_fraction=0.99999",
        "--out",
        dir.join("r3").to_str().unwrap(),
    ]);
    assert!(!ok && out.contains("leaves no token for training") && !out.contains("--data"), "{out}");

    // Bad flags.
    for (args, says) in [
        (&["data", "cache", "--dry-run"][..], "<--prune|--clear>"),
        (&["data", "cache", "--prune", "--unused-for", "-1d"][..], "non-negative"),
        (&["data", "cache", "--prune", "--unused-for", "99999999999999999999d"][..], "too long"),
        (&["data", "cache", "--clear", "--unused-for", "1d"][..], "cannot be used with"),
        (&["data", "cache", "--prune", "--unused-for", "3x"][..], "expected a number with a unit"),
        (&["data", "cache", "--unused-for", "30d"][..], "--prune"),
        (&["data", "cache", "--prune", "--clear"][..], "cannot be used with"),
    ] {
        let (ok, out) = run(args);
        assert!(!ok && out.contains(says), "{args:?}: {out}");
    }
}

/// `ddl data prepare` reads files only: outside a checkout, the built-in corpus's name (which
/// `ddl train --corpus`, `ddl eval --text` and `ddl tokenizer train` take there) is a missing
/// input whose message says so and what to give; another missing input says to check its path.
#[test]
fn a_missing_input_named_as_the_built_in_corpus_says_where_that_name_is_read() {
    let dir = tmpdir("missing-input");
    let prepare = |input: &str| {
        let o = ddl(&dir)
            .current_dir(&dir)
            .args(["data", "prepare", "--tokenizer", "char", "--out", "d", input])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{}", text(&o));
        text(&o)
    };
    let e = prepare("assets/tinyshakespeare.txt");
    assert!(
        e.contains("input 'assets/tinyshakespeare.txt' does not exist")
            && e.contains("built-in TinyShakespeare")
            && e.contains("ddl train --corpus")
            && e.contains("give the file's path"),
        "{e}"
    );
    let e = prepare("nothing.txt");
    assert!(e.contains("check the path, relative to the current folder") && !e.contains("built-in"), "{e}");
    // A link to nothing is said as one (it was "does not exist", while `ls` lists it).
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink("gone.txt", dir.join("link.txt")).unwrap();
        let e = prepare("link.txt");
        assert!(
            e.contains("input 'link.txt' is a symbolic link that leads nowhere") && !e.contains("not exist"),
            "{e}"
        );
    }
    assert!(!dir.join("d").exists(), "nothing made");
}

/// Text with NUL bytes (a binary file named .txt, a log a crash left zeros in) is said, naming
/// the file, by `data prepare` (char or byte-level: it was tokenised without a word, a char
/// vocabulary gaining '\0') and by `train --corpus` as it tokenises the corpus; clean text is not.
#[test]
fn text_with_nul_bytes_is_said_when_it_is_tokenised() {
    let dir = tmpdir("nul-bytes");
    let corpus = std::fs::read_to_string(ddl::testing::small_corpus(&dir)).unwrap();
    let zeros = dir.join("crashed.txt");
    std::fs::write(&zeros, format!("{}{}", &corpus[..3000], "\0".repeat(4096))).unwrap();
    let clean = dir.join("clean.txt");
    std::fs::write(&clean, &corpus[..3000]).unwrap();
    let said = "holds NUL bytes, which text does not";
    let prepare = |input: &Path, out: &str| {
        let o = ddl(&dir)
            .args(["data", "prepare", "--tokenizer", "char", "--out", dir.join(out).to_str().unwrap()])
            .arg(input)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        text(&o)
    };
    let t = prepare(&zeros, "z");
    assert!(t.contains(&format!("note: '{}' {said}", zeros.display())) && t.contains("tr -d '\\000'"), "{t}");
    assert!(!prepare(&clean, "c").contains(said));
    let mut a = vec!["train", "--variant", "ddl", "--corpus", zeros.to_str().unwrap(), "--steps", "1"];
    a.extend_from_slice(ddl::testing::SMALL_MODEL_FLAGS);
    let out = dir.join("run");
    a.extend(["--out", out.to_str().unwrap()]);
    let o = ddl(&dir).args(&a).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(&format!("note: --corpus {} {said}", zeros.display())), "{}", text(&o));
}
