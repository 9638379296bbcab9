//! Byte-level BPE tokenizers: lossless round trips, the end-of-text token, the checkpoint JSON and
//! tokenizer.json files (including one written by Python's `tokenizers`), clear errors, the CLI
//! and the training integration.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use ddl::tokenizer::{EOT, Tokenizer, TokenizerError, train_bpe};

fn tmpdir(name: &str) -> PathBuf {
    ddl::testing::scratch_dir(&format!("test-tok-{name}"))
}

/// The first `n` bytes of TinyShakespeare (cut at a character boundary).
fn shakespeare(n: usize) -> String {
    let text = std::fs::read_to_string(ddl::testing::data_path("assets/tinyshakespeare.txt")).unwrap();
    let n = (0..=n.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap();
    text[..n].to_string()
}

const VOCAB: usize = 512;

/// A BPE of `VOCAB` tokens trained on the first 50 kB of TinyShakespeare (trained once).
fn bpe() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| train_bpe(&shakespeare(50_000), VOCAB).unwrap())
}

fn fixture(name: &str) -> PathBuf {
    ddl::testing::data_path("tests/fixtures").join(name)
}

/// `n` characters drawn from ASCII, controls, Latin-1, combining marks, CJK, emoji and the rest
/// of Unicode (surrogates excluded), from a seed printed on failure.
fn random_text(rng: &mut ddl::testing::Rng, n: usize) -> String {
    let ranges: [(u32, u32); 7] = [
        (0x20, 0x7f),
        (0x00, 0x20),
        (0x80, 0x100),
        (0x300, 0x370),
        (0x4e00, 0x9fff),
        (0x1f300, 0x1fa00),
        (0x0, 0x110000),
    ];
    let mut s = String::new();
    while s.chars().count() < n {
        let (lo, hi) = ranges[rng.int(0, ranges.len())];
        if let Some(c) = char::from_u32(rng.int(lo as usize, hi as usize) as u32) {
            s.push(c);
        }
    }
    s
}

#[test]
fn bpe_round_trips_any_text_exactly() {
    let t = bpe();
    assert_eq!(t.kind(), "bpe");
    assert!(t.vocab_size() > 257 && t.vocab_size() <= VOCAB, "vocab {}", t.vocab_size());
    let fixed = [
        "héllo\tworld\n🙂 漢字",
        "\0\u{1}\u{7}\u{8}\u{1b}[31mred\u{1b}[0m\r\n\u{7f}\u{85}\u{a0}\u{2028}",
        "",
        " ",
        "  leading and trailing  \n\n\n",
        "\u{feff}BOM, e\u{301} (combining), ﷽, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢, 👩‍👩‍👧‍👦 and \u{10ffff}",
        "First Citizen:\nBefore we proceed any further, hear me speak.",
        "a<|endoftext|>b<|endoftext|><|endoftext|>\n",
        "<|endoftext",
    ];
    for text in fixed {
        let ids = t.encode(text).unwrap();
        assert_eq!(t.decode(&ids).unwrap(), text, "ids {ids:?}");
        assert!(ids.iter().all(|&i| (i as usize) < t.vocab_size()));
    }
    let mut rng = ddl::testing::Rng::fresh();
    for _ in 0..20 {
        let text = random_text(&mut rng, 200);
        let ids = t.encode(&text).unwrap();
        assert_eq!(t.decode(&ids).unwrap(), text, "seed {} (DDL_TEST_SEED replays it)", rng.seed);
    }
}

#[test]
fn bpe_compresses_english_and_every_byte_has_a_token() {
    let t = bpe();
    let text = shakespeare(50_000);
    let ids = t.encode(&text).unwrap();
    let bytes_per_token = text.len() as f64 / ids.len() as f64;
    assert!(bytes_per_token > 2.0, "only {bytes_per_token:.2} bytes per token on its own training text");
    // A character never seen in training still costs one token per UTF-8 byte at most.
    assert_eq!(t.encode("🙂").unwrap().len(), 4);
}

#[test]
fn endoftext_is_one_id_and_decodes_back() {
    let t = bpe();
    let eot = t.eot_id().expect("a trained BPE has <|endoftext|>");
    assert_eq!(t.encode(EOT).unwrap(), [eot]);
    let ids = t.encode("The end.<|endoftext|>Once upon").unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == eot).count(), 1);
    assert_eq!(t.decode(&[eot]).unwrap(), EOT);
    let char_tok = Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_corpus("abc").unwrap());
    assert_eq!(char_tok.eot_id(), None);
}

#[test]
fn training_is_deterministic_and_the_vocab_size_is_respected() {
    let text = shakespeare(50_000);
    let a = train_bpe(&text, 300).unwrap();
    let b = train_bpe(&text, 300).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.fingerprint(), b.fingerprint());
    assert_eq!(a.vocab_size(), 300);
    assert_ne!(a.fingerprint(), bpe().fingerprint());
    // A corpus too small to fill the vocabulary gives fewer tokens, never more.
    let tiny = train_bpe("abab abab", 1000).unwrap();
    assert!(tiny.vocab_size() > 257 && tiny.vocab_size() < 300, "{}", tiny.vocab_size());
    assert_eq!(tiny.decode(&tiny.encode("abab, 漢字").unwrap()).unwrap(), "abab, 漢字");
}

#[test]
fn checkpoint_json_and_tokenizer_json_files_round_trip() {
    let t = bpe();
    let json = t.to_json();
    assert!(json.starts_with(r#"{"kind":"bpe","tokenizer":{"#), "{}", &json[..80]);
    let back = Tokenizer::from_json(&json).unwrap();
    assert_eq!(&back, t);
    assert_eq!(back.fingerprint(), t.fingerprint());
    let text = "héllo\tworld\n🙂 漢字<|endoftext|>";
    assert_eq!(back.encode(text).unwrap(), t.encode(text).unwrap());

    let dir = tmpdir("files");
    let f = dir.join("tokenizer.json");
    t.save(&f).unwrap();
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert_eq!(saved["model"]["type"], "BPE", "save writes a plain Hugging Face tokenizer.json");
    assert!(saved.get("kind").is_none());
    let loaded = Tokenizer::load(&f).unwrap();
    assert_eq!(&loaded, t);
    assert_eq!(loaded.eot_id(), t.eot_id());

    // A character tokenizer saves in the checkpoint format and loads back too.
    let c = Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_corpus("hello\n").unwrap());
    c.save(&dir.join("char.json")).unwrap();
    assert_eq!(Tokenizer::load(&dir.join("char.json")).unwrap(), c);
}

#[test]
fn a_tokenizer_json_from_python_tokenizers_loads_and_encodes_as_python_does() {
    // Written by Python `tokenizers` 0.23 (BPE, ByteLevel pre-tokenizer and decoder, 320 tokens,
    // trained on the first 20 kB of TinyShakespeare); the ids are what Python's encode gave.
    let t = Tokenizer::load(&fixture("python-bytelevel-bpe.json")).unwrap();
    assert_eq!(t.vocab_size(), 320);
    assert_eq!(t.eot_id(), Some(0));
    let cases: [(&str, &[u32]); 2] = [
        (
            "First Citizen:\nBefore we proceed any further, hear me speak.",
            &[
                38, 291, 290, 311, 267, 73, 90, 269, 26, 199, 34, 69, 70, 79, 262, 263, 69, 284, 82, 79, 318, 306, 260,
                78, 89, 278, 85, 82, 84, 258, 82, 12, 292, 283, 268, 69, 264, 80, 69, 65, 75, 14,
            ],
        ),
        (
            "héllo\tworld\n🙂 漢字<|endoftext|>",
            &[72, 128, 103, 271, 79, 198, 87, 275, 316, 199, 173, 254, 248, 225, 221, 163, 121, 96, 162, 256, 246, 0],
        ),
    ];
    for (text, want) in cases {
        let ids = t.encode(text).unwrap();
        assert_eq!(ids, want, "{text:?}");
        assert_eq!(t.decode(&ids).unwrap(), text);
    }
    // Trained here on the same text, the merges come out the same as Python's.
    let ours = train_bpe(&shakespeare(20_000), 320).unwrap();
    assert_eq!(ours.encode(cases[0].0).unwrap(), cases[0].1);
}

#[test]
fn bad_files_and_settings_are_clear_errors() {
    let dir = tmpdir("bad");
    let missing = dir.join("nope.json");
    let e = Tokenizer::load(&missing).unwrap_err();
    assert!(matches!(e, TokenizerError::Missing(_)), "{e:?}");
    assert!(e.to_string().contains("nope.json") && e.to_string().contains("does not exist"), "{e}");

    for (name, content, says) in [
        ("notjson.json", "First Citizen: not JSON", "not JSON"),
        ("truncated.json", &bpe().to_json()[..500], "not JSON"),
        ("nomodel.json", "{\"version\": \"1.0\"}", "odel"),
        ("badkind.json", "{\"kind\": \"wordpiece\"}", "wordpiece"),
    ] {
        let f = dir.join(name);
        std::fs::write(&f, content).unwrap();
        let e = Tokenizer::load(&f).unwrap_err().to_string();
        assert!(e.contains(name) && e.contains("not a valid tokenizer file") && e.contains(says), "{e}");
    }
    assert!(matches!(Tokenizer::from_json("{\"kind\":\"bpe\",\"tokenizer\":{}}"), Err(TokenizerError::Json(_))));

    for v in [0, 256, 257] {
        let e = train_bpe("some text", v).unwrap_err();
        assert!(matches!(e, TokenizerError::VocabTooSmall { got, min: 258 } if got == v), "{e:?}");
        assert!(e.to_string().contains(&format!("--vocab-size {v} is too small")), "{e}");
    }
    assert!(matches!(train_bpe("", 300), Err(TokenizerError::Empty)));
    // A size too large is refused before the trainer reserves memory for it (4,294,967,296
    // aborted the process asking for 283 GB).
    for v in [ddl::tokenizer::MAX_BPE_VOCAB + 1, 1 << 32] {
        let e = train_bpe("some text", v).unwrap_err();
        assert!(matches!(e, TokenizerError::VocabTooLarge { got, .. } if got == v), "{e:?}");
        assert!(e.to_string().contains("at most 2097152"), "{e}");
    }

    // A vocabulary that cannot serve a model: two tokens on one id, ids without a token, a
    // byte-level BPE missing a byte (whose text would be dropped without a word).
    let good = dir.join("good.json");
    bpe().save(&good).unwrap();
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&good).unwrap()).unwrap();
    let vocab = json["model"]["vocab"].as_object().unwrap();
    let merged = vocab.iter().find(|(_, id)| id.as_u64() == Some(300)).unwrap().0.clone();
    for (name, edit, says) in [
        ("shared.json", (merged.clone(), Some(5)), "share the id 5"),
        ("holes.json", (merged.clone(), Some(VOCAB as u64 + 50)), "name no token (the first: 300)"),
        ("nobyte.json", ("Ā".to_string(), None), "without tokens for 1 of the 256 bytes (0x00)"),
    ] {
        let mut j = json.clone();
        let v = j["model"]["vocab"].as_object_mut().unwrap();
        match edit.1 {
            Some(id) => v.insert(edit.0, id.into()),
            None => v.remove(&edit.0),
        };
        let f = dir.join(name);
        std::fs::write(&f, j.to_string()).unwrap();
        let e = Tokenizer::load(&f).unwrap_err().to_string();
        assert!(e.contains(name) && e.contains(says), "{e}");
    }

    // No tokens at all: said as such (it was a model.vocab_size = 0 whose remedy `ddl train`
    // refuses).
    let empty = dir.join("empty-vocab.json");
    std::fs::write(&empty, r#"{"model":{"type":"BPE","vocab":{},"merges":[]}}"#).unwrap();
    let e = Tokenizer::load(&empty).unwrap_err().to_string();
    assert!(e.contains("empty-vocab.json") && e.contains("no tokens") && e.contains("ddl tokenizer train"), "{e}");

    let e = bpe().decode(&[1, VOCAB as u32 + 7]).unwrap_err();
    assert!(matches!(e, TokenizerError::OutOfRange { id, .. } if id == VOCAB as u32 + 7), "{e:?}");
}

#[test]
fn a_run_builds_a_char_tokenizer_or_loads_the_named_file() {
    use ddl::train::build_tokenizer;
    let dir = tmpdir("run");
    assert_eq!(build_tokenizer("char", "abca").unwrap().vocab_size(), 3);
    let f = dir.join("tokenizer.json");
    bpe().save(&f).unwrap();
    assert_eq!(&build_tokenizer(f.to_str().unwrap(), "ignored").unwrap(), bpe());
    let e = build_tokenizer(dir.join("missing.json").to_str().unwrap(), "x").unwrap_err().to_string();
    assert!(e.contains("tokenizer = ") && e.contains("missing.json") && e.contains("does not exist"), "{e}");
    std::fs::write(dir.join("bad.json"), "{").unwrap();
    let e = build_tokenizer(dir.join("bad.json").to_str().unwrap(), "x").unwrap_err().to_string();
    assert!(e.contains("bad.json") && e.contains("not JSON"), "{e}");
}

/// A resumed run trains on with its checkpoint's tokenizer; a tokenizer file changed or gone
/// since is said (it was passed over in silence, with a note that blamed the corpus).
#[test]
fn a_resumed_run_says_its_tokenizer_file_changed() {
    let dir = tmpdir("resume-changed");
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, shakespeare(20_000)).unwrap();
    let tok = dir.join("tok.json");
    bpe().save(&tok).unwrap();
    let out = dir.join("run");
    let ddl = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_ddl"))
            .current_dir(&dir)
            .env("DDL_CACHE_DIR", dir.join("cache"))
            .args(["--no-autotune", "train"])
            .args(args)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{args:?}: {e}");
        e
    };
    let small = ["--set", "model.d_model=32", "--set", "model.n_layers=1", "--set", "model.n_heads=2"];
    let mut first = vec!["--preset", "tiny", "--steps", "1", "--corpus", corpus.to_str().unwrap()];
    first.extend(["--tokenizer", tok.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    first.extend(["--set", "model.head_dim=16", "--set", "train.batch_size=2", "--set", "train.eval_batches=1"]);
    first.extend(small);
    let e = ddl(&first);
    assert!(!e.contains("trains on with its checkpoint's tokenizer"), "{e}");
    train_bpe(&shakespeare(8_000), 300).unwrap().save(&tok).unwrap();
    let e = ddl(&["--resume", out.to_str().unwrap(), "--steps", "2"]);
    assert!(e.contains("trains on with its checkpoint's tokenizer") && e.contains("has changed since"), "{e}");
    std::fs::remove_file(&tok).unwrap();
    let e = ddl(&["--resume", out.to_str().unwrap(), "--steps", "3"]);
    assert!(e.contains("cannot be used now") && e.contains("does not exist"), "{e}");
    // The run's own tokenizer, its file gone: a run folder stands for its model's tokenizer
    // (`tokenizer encode`, `data prepare`).
    let o = Command::new(env!("CARGO_BIN_EXE_ddl"))
        .args(["tokenizer", "encode", "--text", "ROMEO: hi", "--tokenizer"])
        .arg(&out)
        .output()
        .unwrap();
    let ids: Vec<u32> = bpe().encode("ROMEO: hi").unwrap();
    let want = ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(" ");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), want, "{}", String::from_utf8_lossy(&o.stderr));
    let shards = dir.join("shards");
    let o = Command::new(env!("CARGO_BIN_EXE_ddl"))
        .args(["data", "prepare", "--tokenizer", out.to_str().unwrap(), "--out", shards.to_str().unwrap()])
        .arg(&corpus)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let meta = std::fs::read_to_string(shards.join("meta.json")).unwrap();
    assert!(
        meta.contains(&format!("\"vocab_size\": {VOCAB}")) || meta.contains(&format!("\"vocab_size\":{VOCAB}")),
        "{meta}"
    );
}

#[test]
fn the_cli_trains_a_tokenizer_file_that_loads_and_encodes() {
    let dir = tmpdir("cli");
    let corpus = dir.join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    let text = shakespeare(50_000);
    let (a, b) = text.split_at(text[..25_000].rfind('\n').unwrap() + 1);
    std::fs::write(corpus.join("a.txt"), a).unwrap();
    std::fs::write(corpus.join("b.txt"), b).unwrap();
    let out = dir.join("tok.json");
    let o = Command::new(env!("CARGO_BIN_EXE_ddl"))
        .args(["tokenizer", "train", "--vocab-size", "400", "--corpus"])
        .arg(&corpus)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{so}\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(so.contains("vocab size 400") && so.contains("bytes per token"), "{so}");
    let t = Tokenizer::load(&out).unwrap();
    assert_eq!(t.vocab_size(), 400);

    let o = Command::new(env!("CARGO_BIN_EXE_ddl"))
        .args(["tokenizer", "encode", "--text", "héllo\t🙂<|endoftext|>", "--tokenizer"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ids: Vec<u32> = String::from_utf8_lossy(&o.stdout).split_whitespace().map(|s| s.parse().unwrap()).collect();
    assert_eq!(ids, t.encode("héllo\t🙂<|endoftext|>").unwrap());

    // Decoded back exactly (no newline added off a terminal), from the flag or standard input,
    // ids separated by spaces or commas.
    let run = |args: &[&str], stdin: &str| {
        use std::io::Write;
        let mut c = Command::new(env!("CARGO_BIN_EXE_ddl"));
        c.args(args).arg("--tokenizer").arg(&out);
        c.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let spaced = ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(" ");
    let commas = ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    for (args, stdin) in
        [(["tokenizer", "decode", "--ids", &commas], ""), (["tokenizer", "decode", "--ids", "-"], &*spaced)]
    {
        let o = run(&args, stdin);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(String::from_utf8(o.stdout).unwrap(), "héllo\t🙂<|endoftext|>");
    }
    let bad = |ids: &str, want: &str| {
        let o = run(&["tokenizer", "decode", "--ids", ids], "");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && e.contains(want) && o.stdout.is_empty(), "{ids}: {e}");
    };
    bad("1 2 400", "id 400 (the 3rd of the ids) is outside the tokenizer's vocabulary of 400 (ids 0 to 399)");
    bad("1, x", "'x' (the 2nd of the ids) is not a token id: expected whole numbers from 0 to 399");
    bad(" ,", "no ids");
    // One token per line with its text, escaped as `ddl eval --per-token` writes it; a token that
    // is part of a character shows U+FFFD.
    let o = run(&["tokenizer", "encode", "--pieces", "--text", "héllo\t🙂<|endoftext|>"], "");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<(u32, String)> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (id, text) = l.split_once('\t').unwrap();
            (id.parse().unwrap(), text.to_string())
        })
        .collect();
    assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), ids);
    for (id, text) in &rows {
        let want = t.decode(&[*id]).unwrap().replace('\\', "\\\\").replace('\t', "\\t");
        assert_eq!(text, &want, "token {id}");
    }
    assert!(rows.iter().any(|r| r.1.contains("\\t")), "the tab escaped: {rows:?}");
    assert_eq!(rows.last().unwrap().1, "<|endoftext|>");

    // Standard input that is not UTF-8, or past the cap (a sparse file: nothing written): the
    // remedies fit a flag that takes text or ids, not a file name.
    let from = |args: &[&str], stdin: std::process::Stdio| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ddl"));
        c.args(args).arg("--tokenizer").arg(&out).stdin(stdin);
        let o = c.output().unwrap();
        assert!(!o.status.success(), "{args:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    std::fs::write(dir.join("latin1.txt"), b"caf\xe9").unwrap();
    let e = from(&["tokenizer", "encode", "--text", "-"], std::fs::File::open(dir.join("latin1.txt")).unwrap().into());
    assert!(e.contains("--text -: standard input is not UTF-8 text (first invalid byte at offset 3)"), "{e}");
    assert!(e.contains("iconv -f LATIN1 -t UTF-8"), "{e}");
    let big = dir.join("big.txt");
    std::fs::File::create(&big).unwrap().set_len((1 << 30) + 1).unwrap();
    for (flag, remedy) in [("--text", "ddl data prepare"), ("--ids", "in pieces")] {
        let cmd = if flag == "--text" { "encode" } else { "decode" };
        let e = from(&["tokenizer", cmd, flag, "-"], std::fs::File::open(&big).unwrap().into());
        assert!(e.contains("more than 1024 MiB") && e.contains(remedy), "{e}");
        assert!(!e.contains("give a file instead"), "{flag} takes no file: {e}");
    }
    std::fs::remove_file(&big).unwrap();

    let o = Command::new(env!("CARGO_BIN_EXE_ddl"))
        .args(["tokenizer", "train", "--vocab-size", "100", "--corpus"])
        .arg(&corpus)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("--vocab-size 100 is too small"), "{e}");
    // A value that is no whole number names the range the trainer takes, not "≥ 0".
    for v in ["3e2", "-5"] {
        let o = Command::new(env!("CARGO_BIN_EXE_ddl"))
            .args(["tokenizer", "train", "--vocab-size", v, "--corpus"])
            .arg(&corpus)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && e.contains("from 258 to 2097152") && !e.contains("≥ 0"), "{v}: {e}");
    }
}

#[test]
fn a_stream_decoder_emits_only_whole_characters_and_loses_nothing() {
    let t = bpe();
    let text = "🙂 漢字, héllo\u{fffd}\u{fffd}漢 wörld 👩‍👩‍👧‍👦<|endoftext|>🙂";
    let ids = t.encode(text).unwrap();
    let mut one_by_one: Vec<String> = ids.iter().map(|&id| t.decode(&[id]).unwrap()).collect();
    assert!(one_by_one.concat().len() > text.len(), "single-token decoding should split characters");
    let mut s = t.stream();
    one_by_one = ids.iter().map(|&id| s.push(id).unwrap()).collect();
    assert_eq!(s.finish().unwrap(), "");
    assert_eq!(one_by_one.concat(), text);
    // An incomplete character at the end comes out as U+FFFD, as `decode` writes it.
    let mut s = t.stream();
    let cut = t.encode("🙂").unwrap();
    let head: String = cut[..2].iter().map(|&id| s.push(id).unwrap()).collect();
    assert_eq!((head.as_str(), s.finish().unwrap()), ("", t.decode(&cut[..2]).unwrap()));
    let char_tok = Tokenizer::Char(ddl::tokenizer::CharTokenizer::from_corpus("ab").unwrap());
    let mut s = char_tok.stream();
    assert_eq!((s.push(1).unwrap(), s.push(0).unwrap()), ("b".to_string(), "a".to_string()));
}

/// Decoders that join or strip by the neighbour (WordPiece's `##`, Metaspace's `▁`): a stream
/// primed with the text before it emits what decoding the whole text adds, token by token.
#[test]
fn a_stream_of_a_wordpiece_or_metaspace_tokenizer_decodes_as_the_whole_text_does() {
    let dir = tmpdir("stream-decoders");
    let wordpiece = r###"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
        "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,
        "decoder":{"type":"WordPiece","prefix":"##","cleanup":true},
        "model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":100,
                 "vocab":{"[UNK]":0,"hi":1,"##ink":2,"the":3,"##re":4,"a":5,"th":6}}}"###;
    let metaspace = r###"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
        "pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true},
        "post_processor":null,
        "decoder":{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true},
        "model":{"type":"Unigram","unk_id":0,"byte_fallback":false,
                 "vocab":[["<unk>",0.0],["▁hi",-1.0],["▁the",-1.0],["re",-2.0],["▁a",-1.5],["ink",-2.0],["▁th",-3.0]]}}"###;
    for (name, json, text) in
        [("wordpiece", wordpiece, "hi hiink there a there"), ("metaspace", metaspace, "hi there a hiink the")]
    {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, json).unwrap();
        let t = Tokenizer::load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ids = t.encode(text).unwrap();
        assert!(ids.len() >= 6 && !ids.contains(&0), "{name}: {ids:?}");
        let whole = t.decode(&ids).unwrap();
        for split in 1..ids.len() {
            let before = t.decode(&ids[..split]).unwrap();
            let mut s = t.stream();
            s.prime(&ids[..split]);
            let mut out: String = ids[split..].iter().map(|&id| s.push(id).unwrap()).collect();
            out += &s.finish().unwrap();
            assert_eq!(format!("{before}{out}"), whole, "{name}, split at {split}");
        }
    }
}

#[test]
fn a_run_with_a_bpe_tokenizer_trains_checkpoints_and_resumes() {
    use ddl::train::{RunConfig, TrainOptions};
    let dir = tmpdir("train");
    unsafe { std::env::set_var("DDL_CACHE_DIR", dir.join("cache")) };
    let corpus = dir.join("corpus.txt");
    std::fs::write(&corpus, shakespeare(30_000)).unwrap();
    let tok_file = dir.join("tokenizer.json");
    bpe().save(&tok_file).unwrap();
    let mut run = RunConfig::preset("tiny", ddl::model::Variant::Baseline).unwrap();
    run.corpus = corpus.display().to_string();
    run.set(&format!("tokenizer={}", tok_file.display())).unwrap();
    for kv in [
        "model.d_model=32",
        "model.n_layers=1",
        "model.n_heads=2",
        "model.head_dim=16",
        "model.mlp_hidden=85",
        "train.batch_size=2",
        "train.seq_len=16",
        "train.eval_every=0",
        "train.eval_batches=2",
        "train.checkpoint_every=0",
    ] {
        run.set(kv).unwrap();
    }
    let out = dir.join("run");
    let gpu = ddl::testing::gpu();
    let opts = |steps, resume| TrainOptions {
        run: run.clone(),
        steps,
        out: out.clone(),
        resume,
        overwrite: false,
        show: ddl::train::Show::Quiet,
    };
    let first = ddl::train::train(gpu.clone(), opts(2, false)).unwrap();
    let ck = ddl::train::checkpoint::load(&out, false).unwrap();
    assert_eq!(&ck.tokenizer, bpe());
    assert_eq!(ck.config.vocab_size, bpe().vocab_size());
    assert!(first.last_loss.is_finite() && (first.last_loss - (VOCAB as f32).ln()).abs() < 1.0, "{first:?}");
    let cfg = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(cfg.contains("tokenizer = ") && cfg.contains("tokenizer.json"), "{cfg}");
    let second = ddl::train::train(gpu.clone(), opts(3, true)).unwrap();
    assert_eq!(second.step, 3);
    // A stop text that ends inside a token's text stops there, the text cut right after it.
    let (model, tok) = ddl::generate::load_for_inference(&gpu, &out).unwrap();
    let prompt = tok.encode("ROMEO:").unwrap();
    let greedy = ddl::generate::SamplerConfig { temperature: 0.0, ..Default::default() };
    let mut opts = ddl::generate::GenOptions {
        max_tokens: 30,
        stop: Vec::new(),
        stop_token: None,
        trace: false,
        beta_maps: None,
        k_mean: Vec::new(),
    };
    let run_gen = |opts: &ddl::generate::GenOptions| {
        let mut pieces = Vec::new();
        let mut sampler = ddl::generate::Sampler::new(greedy.clone());
        ddl::generate::generate(&model, &tok, &prompt, opts, &mut sampler, |p| pieces.push(p.to_string())).unwrap();
        pieces
    };
    let pieces = run_gen(&opts);
    let i = pieces.iter().position(|p| p.chars().count() >= 2).expect("a token of several characters");
    let before: String = pieces[..i].concat();
    let first = pieces[i].chars().next().unwrap();
    // (The whole text up to the token's first character: its first occurrence ends there.)
    let stop = format!("{before}{first}");
    opts.stop = vec![stop.clone()];
    assert_eq!(run_gen(&opts).concat(), stop, "pieces {pieces:?}");
}

/// Saving without replacing (tokenizer train without --force) never writes over a file that
/// appeared meanwhile, and leaves no temporary file.
#[test]
fn saving_without_replace_keeps_a_file_made_meanwhile() {
    let dir = tmpdir("no-replace");
    let f = dir.join("tok.json");
    bpe().save_as(&f, false).unwrap();
    let first = std::fs::read(&f).unwrap();
    std::fs::write(&f, "someone else's").unwrap();
    let e = bpe().save_as(&f, false).unwrap_err().to_string();
    assert!(e.contains("tok.json"), "{e}");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "someone else's");
    bpe().save_as(&f, true).unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), first);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left.len(), 1, "{left:?}");
}
