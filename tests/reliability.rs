//! Reliability through the real CLI: every bad input is a non-zero exit with a message that names
//! the problem (file, field, expected vs got, what to do) and no panic; faults (kill -9 during a
//! save, non-finite steps, a full disk, an unwritable directory) lose no data.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn tmpdir(name: &str) -> PathBuf {
    ddl::testing::scratch_dir(&format!("rel-{name}"))
}

fn cmd(dir: &Path) -> Command {
    let mut c = ddl::testing::ddl_command(env!("CARGO_BIN_EXE_ddl"), dir);
    c.env_remove("DDL_FAULT_ENOSPC_SAVE");
    c
}

/// `ddl ARGS` in `dir` with `input` on its standard input.
fn piped(dir: &Path, args: &[&str], input: &str) -> Output {
    let mut child = cmd(dir)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs `ddl args` and checks it fails cleanly with every needle in its output.
fn fails(dir: &Path, args: &[&str], needles: &[&str]) -> String {
    let o = cmd(dir).args(args).output().unwrap();
    let t = text(&o);
    assert!(!o.status.success(), "`ddl {}` should fail but succeeded:\n{t}", args.join(" "));
    // 1: our errors; 2: command-line usage errors reported by clap. Never a panic (101) or a signal.
    assert!(matches!(o.status.code(), Some(1 | 2)), "`ddl {}`: exit status {:?}:\n{t}", args.join(" "), o.status);
    assert!(!t.contains("panicked") && !t.contains("RUST_BACKTRACE"), "`ddl {}` panicked:\n{t}", args.join(" "));
    for n in needles {
        assert!(t.contains(n), "`ddl {}`: expected {n:?} in:\n{t}", args.join(" "));
    }
    t
}

/// Runs `ddl args` with the fault `var=value` injected and checks it stops with our error (1), no
/// panic, every needle in its output; returns the output.
fn fails_under(dir: &Path, (var, value): (&str, &str), args: &[&str], needles: &[&str]) -> String {
    let o = cmd(dir).args(args).env(var, value).output().unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "`ddl {}` with {var}={value}:\n{t}", args.join(" "));
    assert!(!t.contains("panicked"), "{t}");
    for n in needles {
        assert!(t.contains(n), "expected {n:?} in: {t}");
    }
    t
}

const SMALL: &[&str] = ddl::testing::SMALL_MODEL_FLAGS;

fn train_args<'a>(corpus: &'a str, out: &'a str, steps: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["train", "--variant", "ddl", "--corpus", corpus, "--out", out, "--steps", steps];
    a.extend_from_slice(SMALL);
    a.extend_from_slice(extra);
    a
}

/// A small trained checkpoint in `dir/ck`.
fn checkpoint(dir: &Path) -> PathBuf {
    let c = ddl::testing::small_corpus(dir);
    let out = dir.join("ck");
    let o = cmd(dir).args(train_args(&c, out.to_str().unwrap(), "2", &[])).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    out
}

type Tensors = Vec<(String, Vec<usize>, Vec<f32>)>;

fn read_st(path: &Path) -> (Tensors, HashMap<String, String>) {
    let bytes = std::fs::read(path).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut t: Tensors = st
        .tensors()
        .into_iter()
        .map(|(n, v)| {
            let data = v.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            (n, v.shape().to_vec(), data)
        })
        .collect();
    t.sort_by(|a, b| a.0.cmp(&b.0));
    (t, meta.metadata().clone().unwrap_or_default())
}

fn write_st(path: &Path, t: &Tensors, meta: HashMap<String, String>) {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = t
        .iter()
        .map(|(n, s, d)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), bytemuck::cast_slice(d))
                    .unwrap(),
            )
        })
        .collect();
    std::fs::write(path, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
}

/// A copy of checkpoint `src` named `name`, with its model file changed by `f`.
fn mutated(src: &Path, name: &str, f: impl FnOnce(&mut Tensors, &mut HashMap<String, String>)) -> PathBuf {
    let dst = src.parent().unwrap().join(name);
    std::fs::create_dir_all(&dst).unwrap();
    // The run folder's files (not its kept checkpoints).
    for e in std::fs::read_dir(src).unwrap().flatten().filter(|e| e.path().is_file()) {
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    let (mut t, mut meta) = read_st(&src.join("model.safetensors"));
    f(&mut t, &mut meta);
    write_st(&dst.join("model.safetensors"), &t, meta);
    dst
}

fn gen_args(ck: &Path) -> Vec<String> {
    ["generate", "--checkpoint", ck.to_str().unwrap(), "--prompt", "To be", "--max-tokens", "2"]
        .map(String::from)
        .to_vec()
}

fn fails_gen(dir: &Path, ck: &Path, needles: &[&str]) -> String {
    let a = gen_args(ck);
    let a: Vec<&str> = a.iter().map(|s| s.as_str()).collect();
    fails(dir, &a, needles)
}

#[test]
fn checkpoint_problems_are_clear_errors() {
    let dir = tmpdir("ckpt");
    let ck = checkpoint(&dir);
    // The untouched checkpoint works (so each failure below is the mutation's doing).
    let a = gen_args(&ck);
    let o = cmd(&dir).args(&a).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // Evaluated where the shard cache cannot be written (a read-only home, DDL_CACHE_DIR at a
    // file): the cache's remedy alone, not "restore the data the run trained on" (it is there).
    let cache_file = dir.join("cache-file");
    std::fs::write(&cache_file, "x").unwrap();
    let o = cmd(&dir).args(["eval", "--checkpoint", ck.to_str().unwrap()]).env("DDL_CACHE_DIR", &cache_file).output();
    let t = text(&o.unwrap());
    assert!(t.contains("set DDL_CACHE_DIR to a writable folder") && !t.contains("restore the data"), "{t}");

    fails_gen(&dir, &dir.join("nope"), &["nope", "does not exist: give a run's folder (`ddl train --out`"]);
    fails_gen(
        &dir,
        &ck.join("model.safetensors"),
        &["model.safetensors", "is a file", "give the folder that holds it"],
    );
    // As --init-from: the remedy said once (it was said twice, in two parentheses).
    let small = ddl::testing::small_corpus(&dir);
    let out = dir.join("init-out").display().to_string();
    for bad in [dir.join("nope"), ck.join("model.safetensors")] {
        let bad = bad.display().to_string();
        let a = ["train", "--init-from", &bad, "--corpus", &small, "--out", &out, "--steps", "1"];
        let e = fails(&dir, &a, &["--init-from", "give"]);
        assert_eq!(e.matches("give").count(), 1, "{e}");
    }
    // Given to `ddl golden`, a checkpoint is said to be one, with the command that takes it.
    let model = ck.join("model.safetensors");
    fails(&dir, &["golden", model.to_str().unwrap()], &["a ddl checkpoint's model file", "ddl eval --checkpoint"]);
    let m = mutated(&ck, "missing-file", |_, _| {});
    std::fs::remove_file(m.join("model.safetensors")).unwrap();
    fails_gen(&dir, &m, &["model.safetensors", "missing"]);
    // A folder of runs given for a run: the runs in it are named.
    let e = fails_gen(&dir, &dir, &["missing", "holds runs in its folders", "give one of them"]);
    let name = ck.file_name().unwrap().to_string_lossy().into_owned();
    assert!(e.contains(&name) && !e.contains("missing-file,") && !e.contains("missing-file)"), "{e}");
    let m = mutated(&ck, "truncated", |_, _| {});
    let b = std::fs::read(m.join("model.safetensors")).unwrap();
    std::fs::write(m.join("model.safetensors"), &b[..b.len() * 2 / 3]).unwrap();
    // With no kept checkpoint to give instead, what to do (it said only what was wrong).
    let remedy = "the file is damaged: copy the checkpoint again from where it came from, or give --checkpoint another";
    fails_gen(&dir, &m, &["model.safetensors", "truncated or corrupt", remedy]);
    fails(&dir, &["info", "--checkpoint", m.to_str().unwrap()], &["model.safetensors", "truncated or corrupt", remedy]);
    let m = mutated(&ck, "header", |_, _| {});
    let mut b = std::fs::read(m.join("model.safetensors")).unwrap();
    b[8..40].copy_from_slice(&[b'#'; 32]);
    std::fs::write(m.join("model.safetensors"), &b).unwrap();
    fails_gen(&dir, &m, &["model.safetensors", "not a valid safetensors", remedy]);
    let m = mutated(&ck, "shape", |t, _| {
        let e = t.iter_mut().find(|x| x.0 == "final_norm.gain" || x.0.ends_with("norm.gain")).unwrap();
        e.1 = vec![e.2.len() - 1];
        e.2.pop();
    });
    fails_gen(&dir, &m, &["model.safetensors", "has shape", "the config needs"]);
    let m = mutated(&ck, "missing-tensor", |t, _| {
        t.retain(|x| x.0 != "tok_emb");
    });
    fails_gen(&dir, &m, &["tensor 'tok_emb' is missing", "variant ddl"]);
    let m = mutated(&ck, "extra", |t, _| t.push(("blocks.7.mystery".into(), vec![2], vec![0.0, 1.0])));
    fails_gen(&dir, &m, &["unknown tensor(s)", "blocks.7.mystery"]);
    let m = mutated(&ck, "variant", |_, meta| {
        let c = meta.get_mut("config").unwrap();
        *c = c.replace("\"variant\":\"ddl\"", "\"variant\":\"ddl_cc\"");
        assert!(c.contains("ddl_cc"), "{c}");
    });
    fails_gen(&dir, &m, &["model.safetensors", "variant ddl_cc", "different model"]);
    let m = mutated(&ck, "nan", |t, _| {
        let e = t.iter_mut().find(|x| x.0 == "tok_emb").unwrap();
        e.2[5] = f32::NAN;
    });
    fails_gen(&dir, &m, &["tok_emb", "non-finite", "element 5"]);
    let m = mutated(&ck, "version", |_, meta| {
        meta.insert("version".into(), "99".into());
    });
    fails_gen(&dir, &m, &["version 99", "newer", "upgrade"]);
    let m = mutated(&ck, "version-x", |_, meta| {
        meta.insert("version".into(), "x".into());
    });
    fails_gen(&dir, &m, &["metadata 'version' = \"x\" is not a whole number"]);
    let m = mutated(&ck, "step-x", |_, meta| {
        meta.insert("step".into(), "seven".into());
    });
    fails_gen(&dir, &m, &["model.safetensors", "metadata 'step' = \"seven\" is not a whole number"]);
    // A character tokenizer with fewer characters than the model's vocabulary (ids without one
    // would be sampled and dropped from the text).
    let m = mutated(&ck, "few-chars", |_, meta| {
        let t = meta.get_mut("tokenizer").unwrap();
        let mut tok: serde_json::Value = serde_json::from_str(t).unwrap();
        let chars = tok["chars"].as_str().unwrap().chars().skip(1).collect::<String>();
        tok["chars"] = chars.into();
        *t = tok.to_string();
    });
    fails_gen(&dir, &m, &["model.safetensors", "the character tokenizer has", "a character model's vocabulary"]);
    let m = mutated(&ck, "format", |_, meta| {
        meta.insert("format".into(), "something-else".into());
    });
    fails_gen(&dir, &m, &["something-else", "not a ddl checkpoint"]);
    // A bit flipped in a tensor's data (a damaged disk or copy; the value stays finite): found by
    // the checksum the header records, naming the file, on the device path (generate, eval,
    // --resume's moments) and the host path (`checkpoint::load`); it loaded silently before.
    let flip = |file: &Path| {
        let mut b = std::fs::read(file).unwrap();
        let at = b.len() - 4; // the lowest byte of the last float
        b[at] ^= 0x01;
        std::fs::write(file, &b).unwrap();
    };
    let m = mutated(&ck, "flipped", |_, meta| assert!(meta.contains_key("data_crc32"), "{meta:?}"));
    flip(&m.join("model.safetensors"));
    let needles = ["model.safetensors", "do not match the checksum its header records", "damaged disk or copy"];
    fails_gen(&dir, &m, &needles);
    fails(&dir, &["eval", "--checkpoint", m.to_str().unwrap(), "--batches", "1"], &needles);
    let e = ddl::train::checkpoint::load(&m, false).err().expect("a flipped model file is refused").to_string();
    assert!(e.contains("do not match the checksum"), "{e}");
    let m = mutated(&ck, "flipped-moments", |_, _| {});
    flip(&m.join("optim.safetensors"));
    let needles = ["optim.safetensors", "do not match the checksum its header records"];
    fails(&dir, &["train", "--resume", m.to_str().unwrap(), "--steps", "3"], &needles);
    let e = ddl::train::checkpoint::load(&m, true).err().expect("a flipped moments file is refused").to_string();
    assert!(e.contains("optim.safetensors") && e.contains("do not match the checksum"), "{e}");
    // A file without the checksum (an earlier build's) loads as before.
    let m = mutated(&ck, "no-checksum", |_, meta| assert!(meta.remove("data_crc32").is_some()));
    let o = cmd(&dir).args(gen_args(&m)).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // Resuming needs the moments too: a missing or mismatched optim file is named.
    let m = mutated(&ck, "no-optim", |_, _| {});
    std::fs::remove_file(m.join("optim.safetensors")).unwrap();
    fails(&dir, &["train", "--resume", m.to_str().unwrap(), "--steps", "3"], &["no optim.safetensors", "--init-from"]);
    let m = mutated(&ck, "step", |_, meta| {
        meta.insert("step".into(), "7".into());
    });
    fails(&dir, &["train", "--resume", m.to_str().unwrap(), "--steps", "9"], &["holds step 2", "holds step 7"]);
}

#[test]
fn config_problems_are_clear_errors() {
    let dir = tmpdir("config");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("o").display().to_string();
    // Counts on the command line: a negative one, one too large, a non-number, each said as such
    // (clap's "unexpected argument '-1'" and Rust's "invalid digit found in string" before).
    fails(&dir, &["train", "--out", &out, "--steps", "-1"], &["--steps", "-1: a whole number ≥ 1", "not a negative"]);
    fails(&dir, &["train", "--out", &out, "--sample", "-2"], &["--sample", "not a negative one"]);
    fails(&dir, &["train", "--out", &out, "--head-chunk", "99999999999999999999"], &["is too large (at most"]);
    fails(&dir, &["generate", "--checkpoint", &out, "--seed", "x1"], &["expected a whole number ≥ 0, got 'x1'"]);
    fails(&dir, &["tokenizer", "train", "--corpus", &c, "--out", &out, "--vocab-size", "-300"], &["not a negative"]);
    // A link to nothing as the tokenizer's --out: named as one (it read "File exists (os error 17)").
    #[cfg(unix)]
    {
        let link = dir.join("dangling.json");
        std::os::unix::fs::symlink(dir.join("nowhere/x.json"), &link).unwrap();
        let args = ["tokenizer", "train", "--corpus", &c, "--out", link.to_str().unwrap(), "--vocab-size", "300"];
        fails(&dir, &args, &["dangling.json", "leads nowhere"]);
    }
    let t = |extra: &[&str], needles: &[&str]| {
        let mut a = vec!["train", "--corpus", &c, "--out", &out, "--steps", "1"];
        a.extend_from_slice(extra);
        fails(&dir, &a, needles);
        // Refused before anything is created: no run folder, no config.toml.
        assert!(!Path::new(&out).exists(), "`{}` left {out} behind", a.join(" "));
    };
    // Out of range: the full key, the value given, the allowed range and the remedy.
    t(&["--set", "train.nope=1"], &["unknown key 'train.nope'", "known keys here", "warmup_steps"]);
    t(&["--set", "train.batch_size=-1"], &["train.batch_size = -1", "expected a whole number ≥ 0"]);
    t(
        &["--set", "train.batch_size=1.5"],
        &["floating point `1.5`, expected a whole number ≥ 0", "takes a whole number"],
    );
    t(&["--set", "train=1"], &["expected the [train] table", "train.KEY=VALUE"]);
    t(&["--set", "data_format=xx"], &["data_format = \"xx\"", "expected llmc or raw-u16"]);
    // A --config file's problems in the file's words: a preset it names, bytes that are not
    // UTF-8 (where), an integer beyond TOML's.
    let file = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let huge = file("huge.toml", b"preset = \"huge\"\n");
    t(&["--config", &huge], &["--config", "preset = \"huge\"", "write one of them there"]);
    let latin = file("latin1.toml", b"preset = \"tiny\"\n# caf\xe9\n");
    t(&["--config", &latin], &["not UTF-8", "byte 21", "save the file as UTF-8"]);
    let big = file("big.toml", b"[train]\nbatch_size = 99999999999999999999\n");
    t(&["--config", &big], &["at most 9223372036854775807"]);
    // A value out of its range is named with the file it came from (not when --set gives it).
    let zero = file("zero.toml", b"[train]\nbatch_size = 0\nlr = 3e-3\n");
    t(&["--config", &zero], &["zero.toml: train.batch_size = 0", "1 ..= 2^24"]);
    let four = file("four.toml", b"[train]\nbatch_size = 4\n");
    let e = fails(
        &dir,
        &["train", "--corpus", &c, "--out", &out, "--config", &four, "--set", "train.batch_size=0"],
        &["train.batch_size = 0"],
    );
    // (The error is the --set's, not the file's; the note above it says the --set replaced it.)
    let error = e.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    assert!(error.contains("train.batch_size = 0") && !error.contains("four.toml"), "{e}");
    // A --set over the file's value wins, and says so (it replaced it without a word); a --set of
    // a key the file does not give, or of its own value, says nothing.
    let o = cmd(&dir)
        .args(["train", "--corpus", &c, "--out", &out, "--steps", "1", "--dry-run", "--config", &four])
        .args(["--set", "train.batch_size=2", "--set", "lr=1e-3", "--set", "train.batch_size=2"])
        .output()
        .unwrap();
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    let note = format!("note: --set train.batch_size=2 replaces train.batch_size = 4 of --config {four}");
    assert_eq!(said.matches(&note).count(), 1, "{said}");
    assert!(said.contains("batch_size = 2") && !said.contains("replaces train.lr"), "{said}");
    // A flag and a --set or --config that give one setting different values are refused, also
    // when the --set or the file gives the default (the flag won without a word).
    t(&["--precision", "f16", "--set", "train.precision=f32"], &["--precision gives", "--set gives", "drop one"]);
    t(&["--seed", "5", "--set", "seed=1337"], &["--seed gives train.seed = 5", "--set gives train.seed = 1337"]);
    t(&["--recompute", "--set", "train.recompute=false"], &["--recompute gives"]);
    let f32_file = file("f32.toml", b"[train]\nprecision = \"f32\"\n");
    t(&["--precision", "f16", "--config", &f32_file], &["--config gives", "--set train.precision=VALUE"]);
    // The same values agree.
    let o = cmd(&dir)
        .args(["train", "--corpus", &c, "--out", &out, "--steps", "1", "--dry-run", "--seed", "1337"])
        .args(["--set", "train.seed=1337"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // The dry run of a --steps past what u64 tokens hold says so (its token count wrapped).
    let o = cmd(&dir)
        .args(["train", "--corpus", &c, "--out", &out, "--dry-run", "--steps", "18446744073709551615"])
        .output()
        .unwrap();
    assert!(o.status.success() && text(&o).contains("tokens a step: more than 18"), "{}", text(&o));
    // A golden folder stands for its files; one without any is said so.
    let empty = dir.join("no-goldens");
    std::fs::create_dir_all(&empty).unwrap();
    fails(&dir, &["golden", empty.to_str().unwrap()], &["no-goldens", "without .safetensors"]);
    // --out a file; `ddl info`'s plan flags checked as `ddl train` checks them, and only with a preset.
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    fails(&dir, &["train", "--corpus", &c, "--out", file.to_str().unwrap(), "--steps", "1"], &["a-file", "is a file"]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
    // A folder as --tokenizer: a run's names where its tokenizer is and how to use it (it read
    // "Is a directory (os error 21)"); another folder asks for the file.
    let run_dir = dir.join("a-run");
    std::fs::create_dir_all(&run_dir).unwrap();
    std::fs::write(run_dir.join("model.safetensors"), b"").unwrap();
    let tok_fails = |tok: &std::path::Path, want: &[&str]| {
        let args: [&str; 9] =
            ["train", "--corpus", &c, "--out", &out, "--steps", "1", "--tokenizer", tok.to_str().unwrap()];
        fails(&dir, &args, want);
    };
    tok_fails(&run_dir, &["a run's folder", "--init-from", "ddl data prepare --tokenizer"]);
    let plain = dir.join("a-folder");
    std::fs::create_dir_all(&plain).unwrap();
    tok_fails(&plain, &["a folder", "tokenizer.json"]);
    fails(&dir, &["info", "--preset", "tiny", "--variant", "baseline", "--f16-state"], &["state_f16", "baseline"]);
    fails(&dir, &["info", "--preset", "tiny", "--batch", "18446744073709551615"], &["batch_size"]);
    fails(&dir, &["info", "--batch", "4"], &["--preset"]);
    let golden = ddl::testing::data_path("tests/golden/baseline.safetensors");
    fails(&dir, &["golden", "--f16-state", golden.to_str().unwrap()], &["--f16-state", "got baseline"]);
    let with_interventions = ddl::testing::data_path("tests/golden/override/ddl_all_beta1.safetensors");
    fails(&dir, &["golden", with_interventions.to_str().unwrap()], &["β interventions (all:beta=1)", "--test decode"]);
    t(&["--set", "train.steps=9"], &["unknown key 'train.steps'", "--steps N"]);
    t(&["--set", "model.dv=2"], &["did you mean 'model.d_v'?"]);
    t(&["--seed", "18446744073709551615"], &["--seed", "from 0 to 9223372036854775807"]);
    t(
        &["--set", "train.seed=9223372036854775808"],
        &["train.seed=9223372036854775808", "too large", "9223372036854775807"],
    );
    t(&["--set", "train.batch_size=\"many\""], &["batch_size"]);
    t(&["--set", "model.d_v=0"], &["model.d_v = 0", "1 ..= 1024", "--set model.d_v=VALUE", "[model]"]);
    t(&["--variant", "ddl_v1", "--set", "model.d_v=4"], &["model.d_v = 4", "ddl_v1 has d_v = 1", "drop the setting"]);
    t(&["--set", "model.n_heads=0"], &["model.n_heads = 0", "1 ..= 4096", "--set model.n_heads=VALUE"]);
    t(&["--set", "model.head_dim=0"], &["model.head_dim = 0", "1 ..= 16384"]);
    t(&["--set", "model.head_dim=15"], &["model.head_dim = 15", "even"]);
    t(&["--set", "model.state_kernel=0"], &["model.state_kernel = 0", "1 ..= 4096", "--set model.state_kernel=VALUE"]);
    t(&["--variant", "ddl_ec", "--set", "model.embed_kernel=0"], &["model.embed_kernel = 0", "1 ..= 4096"]);
    t(
        &["--variant", "ddl_cc", "--set", "model.state_kernel=2"],
        &["model.state_kernel = 2", "K_c = d_v = 4", "--set model.state_kernel=4"],
    );
    t(&["--set", "model.beta_init=3"], &["model.beta_init = 3", "[0, 2]"]);
    t(&["--set", "train.lr=-1"], &["train.lr = -1", "≥ 0", "--set train.lr=VALUE"]);
    t(&["--set", "train.batch_size=0"], &["train.batch_size = 0", "1 ..= 2^24"]);
    t(&["--set", "train.grad_accum=0"], &["train.grad_accum = 0", "1 ..= 2^24"]);
    t(
        &["--set", "train.seq_len=128"],
        &["train.seq_len = 128", "model.max_seq_len = 64", "--set model.max_seq_len=128"],
    );
    t(
        &["--set", "train.warmup_steps=5000", "--set", "train.decay_steps=10"],
        &["train.decay_steps = 10", "warmup_steps = 5000", "--set train.decay_steps=5000"],
    );
    fails(&dir, &["train", "--corpus", &c, "--out", &out, "--steps", "0"], &["--steps", "at least 1"]);
    assert!(!Path::new(&out).exists());
    t(&["--variant", "ddl_x"], &["for '--variant <VARIANT>'", "unknown variant 'ddl_x'", "baseline"]);
    t(&["--variant", "baseline", "--f16-state"], &["train.state_f16", "ddl or ddl_vmap", "baseline"]);
    t(&["--f16-state", "--set", "model.d_v=3"], &["train.state_f16", "d_v = 4, got 3"]);
    t(&["--preset", "gigantic"], &["unknown preset 'gigantic'", "one of tiny", "--preset NAME"]);
    t(&["--set", "model.vocab_size=5"], &["--set model.vocab_size=5", "from the tokenizer", "--vocab-size N"]);
    fails(&dir, &["train", "--corpus", &c, "--out", &out, "--steps=-1"], &["--steps", "-1"]);
    // A batch whose activations exceed the adapter's buffer limit: how much, and what to lower.
    t(&["--set", "train.batch_size=100000"], &["memory plan of a batch of 100000", "bytes", "--set train.batch_size="]);
    // Past the host check (pretending a huge host), the adapter's per-binding limit, met when
    // the programs are recorded: the binding, its bytes, the limit and the batch that fits.
    let o = cmd(&dir)
        .args(["train", "--corpus", &c, "--out", &out, "--steps", "1", "--set", "train.batch_size=100000"])
        .env("DDL_FAULT_HOST_MEMORY", "1000000000000000")
        .output()
        .unwrap();
    let text_ = text(&o);
    assert_eq!(o.status.code(), Some(1), "{text_}");
    for n in ["bytes", "allows at most", "lower train.batch_size to", "grad_accum"] {
        assert!(text_.contains(n), "expected {n:?} in {text_}");
    }
    assert!(!Path::new(&out).exists(), "{out} left behind");
    let cfg = dir.join("run.toml");
    std::fs::write(&cfg, "[train]\nlr = \"fast\"\n").unwrap();
    t(&["--config", cfg.to_str().unwrap()], &["run.toml", "lr"]);
    std::fs::write(&cfg, "[trian]\nlr = 1.0\n").unwrap();
    t(&["--config", cfg.to_str().unwrap()], &["run.toml", "unknown key 'trian'"]);
    t(&["--config", dir.join("none.toml").to_str().unwrap()], &["none.toml: no such file", "a TOML file"]);
    // Not TOML (a text file given by mistake): the parser's place and words, and what to give.
    std::fs::write(&cfg, "First Citizen:\nBefore we proceed\n").unwrap();
    t(&["--config", cfg.to_str().unwrap()], &["run.toml: TOML parse error at line 1", "a TOML file of [model] and"]);
    fails(
        &dir,
        &["bench", "train", "--config", cfg.to_str().unwrap()],
        &["run.toml: TOML parse error", "mend the line shown, or give such a file"],
    );
    // A folder given as --config (a run's, whose settings file is inside) says so and names the
    // file (it was "Is a directory (os error 21)").
    let folder = dir.join("a-run");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("config.toml"), "[train]\nlr = 1e-3\n").unwrap();
    let inside = folder.join("config.toml").display().to_string();
    t(&["--config", folder.to_str().unwrap()], &["a folder, not a settings file", &inside]);
    // A NaN from the file is named with the file, as other values out of range are (NaN equals
    // nothing, so it was said without the file).
    std::fs::write(&cfg, "[train]\nlr = nan\n").unwrap();
    t(&["--config", cfg.to_str().unwrap()], &["run.toml: train.lr = NaN", "finite number"]);
    // The vocabulary in a config file is refused as --set's is (it was silently replaced).
    let voc = dir.join("voc.toml");
    std::fs::write(&voc, "[model]\nvocab_size = 100\n").unwrap();
    t(&["--config", voc.to_str().unwrap()], &["voc.toml", "vocab_size = 100", "from the tokenizer"]);
    // Resuming keeps the run's settings: changing the variant or a setting is refused, not ignored.
    let ck = checkpoint(&dir);
    let r = ck.to_str().unwrap();
    fails(
        &dir,
        &["train", "--resume", r, "--variant", "ddl_cc", "--steps", "3"],
        &["model.variant", "saved \"ddl\"", "given \"ddl_cc\""],
    );
    // Another variant's own defaults are said as following from it (the baseline's d_v of 0 was
    // listed as if given).
    let base = dir.join("base.toml");
    std::fs::write(&base, "[model]\nvariant = \"baseline\"\n").unwrap();
    let t_ = fails(
        &dir,
        &["train", "--resume", r, "--config", base.to_str().unwrap(), "--steps", "3"],
        &["change 1 setting(s)", "model.variant: saved \"ddl\", given \"baseline\" (and with it model.d_v 4 → 0)"],
    );
    assert!(!t_.contains("model.d_v: saved"), "{t_}");
    fails(&dir, &["train", "--resume", r, "--config", voc.to_str().unwrap(), "--steps", "3"], &["vocab_size = 100"]);
    // --init-from with a [model] table: refused by name, not as a --variant nobody gave.
    let t_ = fails(
        &dir,
        &["train", "--init-from", r, "--config", base.to_str().unwrap(), "--steps", "1", "--out", "ft"],
        &["base.toml", "a [model] table changes the model", "--init-from"],
    );
    assert!(!t_.contains("--variant"), "{t_}");
    // --init-from its own --out (or a checkpoint inside it) with --overwrite: refused, the run kept.
    let model_before = std::fs::read(Path::new(r).join("model.safetensors")).unwrap();
    let kept = Path::new(r).join("checkpoints");
    let inside = std::fs::read_dir(&kept).unwrap().next().unwrap().unwrap().path();
    for src in [r.to_string(), inside.display().to_string()] {
        fails(
            &dir,
            &["train", "--init-from", &src, "--steps", "1", "--out", r, "--overwrite"],
            &["would replace the run it starts from", "choose another --out"],
        );
    }
    assert_eq!(std::fs::read(Path::new(r).join("model.safetensors")).unwrap(), model_before);
    fails(
        &dir,
        &["train", "--resume", r, "--set", "train.lr=1", "--steps", "3"],
        &["change 1 setting(s)", "train.lr: saved 0.003, given 1.0 (and with it train.min_lr 0.0003 → 0.1)", "--out"],
    );
    // A min_lr given too is a setting of its own.
    fails(
        &dir,
        &["train", "--resume", r, "--set", "train.lr=1", "--set", "train.min_lr=0.5", "--steps", "3"],
        &["change 2 setting(s)", "train.min_lr: saved 0.0003, given 0.5"],
    );
    // An edited config.toml is said (the saved settings are the run's), and only then.
    let cfg_path = Path::new(r).join("config.toml");
    let cfg_text = std::fs::read_to_string(&cfg_path).unwrap();
    std::fs::write(&cfg_path, cfg_text.replace("lr = 0.003", "lr = 0.01")).unwrap();
    let t_ = fails(&dir, &["train", "--resume", r, "--set", "train.lr=1", "--steps", "3"], &["change 1 setting(s)"]);
    assert!(
        t_.contains("config.toml differs from the settings saved") && t_.contains("train.lr 0.01 there, 0.003 saved"),
        "{t_}"
    );
    std::fs::write(&cfg_path, &cfg_text).unwrap();
    let t_ = fails(&dir, &["train", "--resume", r, "--set", "train.lr=1", "--steps", "3"], &["change 1 setting(s)"]);
    assert!(!t_.contains("differs from the settings saved"), "{t_}");
    // A config.toml that no longer reads: info and eval say so and go on with the settings saved
    // with the checkpoint (info said nothing, eval refused without a remedy), and resume says so
    // and writes the file again (it did so without a word).
    let broken = mutated(&ck, "broken-config", |_, _| {});
    std::fs::write(broken.join("config.toml"), format!("{cfg_text}garbage = = \n")).unwrap();
    let b = broken.to_str().unwrap();
    for args in [&["info", "--checkpoint", b][..], &["eval", "--checkpoint", b, "--batches", "1"][..]] {
        let o = cmd(&dir).args(args).output().unwrap();
        let t_ = text(&o);
        assert!(o.status.success() && t_.contains("config.toml does not read as a run's settings"), "{args:?}: {t_}");
        assert!(t_.contains("saved with the checkpoint"), "{args:?}: {t_}");
    }
    let o = cmd(&dir).args(["train", "--resume", b, "--steps", "3"]).output().unwrap();
    let t_ = text(&o);
    assert!(o.status.success() && t_.contains("does not read as a run's settings"), "{t_}");
    let again = std::fs::read_to_string(broken.join("config.toml")).unwrap();
    assert!(toml::from_str::<ddl::train::RunConfig>(&again).is_ok() && !again.contains("garbage"), "{again}");
    // Repeating the run's own flags is fine.
    let c2 = c.clone();
    let mut a = train_args(&c2, r, "3", &[]);
    a[5] = "--resume";
    let o = cmd(&dir).args(&a).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // A run's own config.toml is a --config for a new run: its vocab_size is the tokenizer's (it
    // was refused as given), its init_from the checkpoint it started from, with that checkpoint's
    // [model] table (refused as changing the model).
    let at = |name: &str| dir.join(name).display().to_string();
    let again = |cfg: &Path, name: &str| {
        let o = cmd(&dir)
            .args(["train", "--config", cfg.to_str().unwrap(), "--steps", "1", "--no-autotune", "--out", &at(name)])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        std::fs::read_to_string(dir.join(name).join("config.toml")).unwrap()
    };
    let no_steps = |t: &str| t.lines().filter(|l| !l.starts_with("steps")).collect::<Vec<_>>().join("\n");
    assert_eq!(no_steps(&again(&cfg_path, "same")), no_steps(&cfg_text));
    let o = cmd(&dir)
        .args(["train", "--init-from", r, "--corpus", &c, "--steps", "1", "--no-autotune", "--out", &at("ft1")])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let ft1 = dir.join("ft1/config.toml");
    let ft1_text = std::fs::read_to_string(&ft1).unwrap();
    assert!(ft1_text.contains("init_from = "), "{ft1_text}");
    assert_eq!(no_steps(&again(&ft1, "ft2")), no_steps(&ft1_text));
    let edited = dir.join("ft-edited.toml");
    std::fs::write(&edited, ft1_text.replace("d_model = 32", "d_model = 24")).unwrap();
    fails(
        &dir,
        &["train", "--config", edited.to_str().unwrap(), "--steps", "1", "--out", &at("ft3")],
        &["a [model] table changes the model (d_model = 24 where the checkpoint has 32)"],
    );
    fails(
        &dir,
        &["train", "--config", ft1.to_str().unwrap(), "--init-from", &at("same"), "--steps", "1", "--out", &at("ft3")],
        &["same and --config", "name different checkpoints"],
    );
    let voc = dir.join("voc2.toml");
    let vocab = cfg_text.lines().find(|l| l.starts_with("vocab_size")).unwrap().to_string();
    std::fs::write(&voc, cfg_text.replace(&vocab, "vocab_size = 7")).unwrap();
    fails(
        &dir,
        &["train", "--config", voc.to_str().unwrap(), "--steps", "1", "--out", &at("ft3")],
        &["vocab_size = 7", "but the run's tokenizer", "has"],
    );
    fails(
        &dir,
        &["train", "--resume", r, "--config", voc.to_str().unwrap(), "--steps", "3"],
        &["vocab_size = 7", "which it keeps"],
    );
    assert!(!dir.join("ft3").exists());
}

/// A resumed run's corpus moved: given anew with `--corpus`, the run continues there when its
/// tokens are those of `data.json` (another text is refused by them, not by its path).
#[test]
fn a_resumed_run_follows_its_corpus_where_it_moved() {
    let dir = tmpdir("moved");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let o = cmd(&dir).args(train_args(&c, out.to_str().unwrap(), "2", &[])).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let moved = dir.join("moved.txt");
    std::fs::rename(&c, &moved).unwrap();
    let resume = |steps: &str, extra: &[&str]| {
        let mut a = vec!["train", "--resume", out.to_str().unwrap(), "--steps", steps];
        a.extend_from_slice(extra);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let args = resume("3", &[]);
    fails(&dir, &args.iter().map(String::as_str).collect::<Vec<_>>(), &["does not exist", "pass --corpus PATH"]);
    let o = cmd(&dir).args(resume("3", &["--corpus", moved.to_str().unwrap()])).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(ddl::train::checkpoint::saved_step(&out).unwrap(), 3);
    let cfg = std::fs::read_to_string(out.join("config.toml")).unwrap();
    assert!(cfg.contains(&format!("corpus = \"{}\"", moved.display())), "{cfg}");
    let other = dir.join("other.txt");
    let mut shorter = std::fs::read_to_string(&moved).unwrap();
    shorter.truncate(shorter.len() * 9 / 10);
    std::fs::write(&other, shorter).unwrap();
    let args = resume("4", &["--corpus", other.to_str().unwrap()]);
    fails(&dir, &args.iter().map(String::as_str).collect::<Vec<_>>(), &["data changed since this run started"]);
    assert_eq!(ddl::train::checkpoint::saved_step(&out).unwrap(), 3);
}

#[test]
fn corpus_problems_are_clear_errors() {
    let dir = tmpdir("corpus");
    let out = dir.join("o").display().to_string();
    let t = |corpus: &str, needles: &[&str]| {
        let mut a = vec!["train", "--corpus", corpus, "--out", &out, "--steps", "1"];
        a.extend_from_slice(SMALL);
        fails(&dir, &a, needles)
    };
    t("/nonexistent/x.txt", &["/nonexistent/x.txt", "does not exist"]);
    // A shard's header counts its tokens in 32 bits: a larger --shard-tokens wrapped the count of
    // a shard past 2^31 tokens (now refused as the flag is read; 2^31 − 1 is taken).
    let args = ["data", "prepare", "--tokenizer", "char", "--out", &out, "--shard-tokens", "2147483648", "x.txt"];
    fails(&dir, &args, &["--shard-tokens", "2147483648: at most 2147483647 tokens per shard", "32 bits"]);
    // Not a number: what --val-fraction takes (it was Rust's "invalid float literal").
    let args = ["data", "prepare", "--tokenizer", "char", "--out", &out, "--val-fraction", "tenth", "x.txt"];
    fails(&dir, &args, &["--val-fraction", "expected a fraction of the tokens (e.g. 0.1), got 'tenth'"]);
    let corpus = ddl::testing::small_corpus(&dir);
    let o = cmd(&dir)
        .args(["data", "prepare", "--tokenizer", "char", "--out", &out, "--shard-tokens", "2147483647", &corpus])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    std::fs::remove_dir_all(&out).unwrap();
    // A device never ends (/dev/zero would fill memory): refused before the adapter opens.
    if Path::new("/dev/zero").exists() {
        let e = t("/dev/zero", &["/dev/zero", "a device"]);
        assert!(!e.contains("training"), "{e}");
        fails(&dir, &["data", "prepare", "--tokenizer", "char", "--out", &out, "/dev/zero"], &["a device"]);
    }
    // A link to nothing is named as such (not "does not exist"), as corpus and as --out.
    #[cfg(unix)]
    {
        let dangling = dir.join("dangling.txt");
        let _ = std::fs::remove_file(&dangling);
        std::os::unix::fs::symlink("nowhere.txt", &dangling).unwrap();
        t(dangling.to_str().unwrap(), &["dangling.txt", "symbolic link that leads nowhere"]);
        let out_link = dir.join("out-link");
        let _ = std::fs::remove_file(&out_link);
        std::os::unix::fs::symlink("no-such-folder", &out_link).unwrap();
        let small = ddl::testing::small_corpus(&dir);
        let mut a = vec!["train", "--corpus", &small, "--out", out_link.to_str().unwrap(), "--steps", "1"];
        a.extend_from_slice(SMALL);
        fails(&dir, &a, &["out-link", "symbolic link that leads nowhere"]);
        std::fs::remove_file(&out_link).unwrap();
    }
    // A shard cache that cannot be written says which and how to choose another.
    let not_a_dir = dir.join("cache-file");
    std::fs::write(&not_a_dir, "x").unwrap();
    let mut a = vec!["train", "--corpus", "PLACEHOLDER", "--out", &out, "--steps", "1"];
    let small = ddl::testing::small_corpus(&dir);
    a[2] = &small;
    a.extend_from_slice(SMALL);
    let o = cmd(&dir).args(&a).env("DDL_CACHE_DIR", &not_a_dir).output().unwrap();
    assert!(!o.status.success() && text(&o).contains("set DDL_CACHE_DIR to a writable folder"), "{}", text(&o));
    // ... naming the file in the way (the OS's "Not a directory" named none).
    let in_the_way = format!("'{}' is a file, not a folder", not_a_dir.display());
    assert!(text(&o).contains(&in_the_way) && !text(&o).contains("os error"), "{}", text(&o));
    let o = cmd(&dir).args(["data", "cache"]).env("DDL_CACHE_DIR", &not_a_dir).output().unwrap();
    assert!(!o.status.success() && text(&o).contains(&in_the_way), "{}", text(&o));
    // A file reached twice (given twice, a link beside its target) is read once.
    let twice = dir.join("twice");
    std::fs::create_dir_all(&twice).unwrap();
    std::fs::write(twice.join("a.txt"), "To be, or not to be\n".repeat(50)).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("a.txt", twice.join("b.txt")).unwrap();
    let a = twice.join("a.txt").display().to_string();
    let tw = twice.display().to_string();
    let prepared = dir.join("prepared").display().to_string();
    let o = cmd(&dir).args(["data", "prepare", "--tokenizer", "char", "--out", &prepared, &tw, &a]).output().unwrap();
    assert!(o.status.success() && text(&o).contains("1 document,"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&prepared);
    let p = dir.join("empty.txt");
    std::fs::write(&p, "").unwrap();
    t(p.to_str().unwrap(), &["empty.txt", "empty"]);
    // An empty corpus is said before the adapter opens (an adapter not there is never asked for),
    // with --distributed mpi too (before MPI starts and the ranks open theirs).
    let mut a = vec!["train", "--corpus", p.to_str().unwrap(), "--out", &out, "--steps", "1"];
    a.extend(["--adapter", "no-such-adapter"]);
    let e = fails(&dir, &a, &["--corpus", "empty.txt: the file is empty (0 bytes)", "give a text file"]);
    assert!(!e.contains("no-such-adapter"), "{e}");
    if cfg!(feature = "mpi") {
        a.extend(["--distributed", "mpi"]);
        let e = fails(&dir, &a, &["empty.txt: the file is empty (0 bytes)"]);
        assert!(!e.contains("no-such-adapter") && !e.contains("rank 0"), "{e}");
    }
    let p = dir.join("short.txt");
    std::fs::write(&p, "To be, or not to be").unwrap();
    t(p.to_str().unwrap(), &["fewer than one sequence", "seq_len"]);
    let p = dir.join("tiny.txt");
    std::fs::write(&p, "hi\n").unwrap();
    let e = t(p.to_str().unwrap(), &["--corpus", "tiny.txt", "too little text"]);
    assert!(!e.contains("ddl/shards"), "the message names the cache, not the corpus: {e}");
    // Too short for a split (tokenising is CPU work): said before the adapter opens, as an empty
    // file is (an adapter not there is never asked for), and --out is not made.
    for (name, said) in [("tiny.txt", "too little text"), ("short.txt", "fewer than one sequence")] {
        let f = dir.join(name).display().to_string();
        let _ = std::fs::remove_dir_all(&out);
        let mut a = vec!["train", "--corpus", &f, "--out", &out, "--steps", "1", "--adapter", "no-such-adapter"];
        a.extend_from_slice(SMALL);
        let e = fails(&dir, &a, &[name, said]);
        assert!(!e.contains("no-such-adapter") && !Path::new(&out).exists(), "{e}");
        if cfg!(feature = "mpi") {
            a.extend(["--distributed", "mpi"]);
            let e = fails(&dir, &a, &[name, said]);
            assert!(!e.contains("no-such-adapter") && !e.contains("rank 0"), "{e}");
        }
    }
    let p = dir.join("latin1.txt");
    std::fs::write(&p, b"caf\xe9 au lait").unwrap();
    t(p.to_str().unwrap(), &["latin1.txt", "not UTF-8", "offset 3"]);
    let d = dir.join("no-txt");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("notes.md"), "# notes").unwrap();
    t(d.to_str().unwrap(), &["no-txt", "no .txt files"]);
    // A --config file's relative paths are taken from the current directory; one that exists
    // only beside the file is named. Refused before the adapter opens: no "training …" line.
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("text.txt"), std::fs::read(ddl::testing::small_corpus(&dir)).unwrap()).unwrap();
    std::fs::write(sub.join("c.toml"), "corpus = \"text.txt\"\n").unwrap();
    let config = sub.join("c.toml").display().to_string();
    let e = fails(&dir, &["train", "--config", &config, "--out", &out], &["corpus = \"text.txt\"", "sub/text.txt"]);
    assert!(!e.contains("training"), "a refused run said it was training: {e}");
    std::fs::write(sub.join("t.toml"), "tokenizer = \"tok.json\"\n").unwrap();
    let config = sub.join("t.toml").display().to_string();
    fails(&dir, &["train", "--config", &config, "--out", &out], &["tokenizer = \"tok.json\"", "does not exist"]);
    // A misspelt top-level key: its closest named, and init_from among those listed (a table's
    // key got its closest; these got none, and the list left init_from out).
    std::fs::write(sub.join("typo.toml"), "crpus = \"text.txt\"\n").unwrap();
    let config = sub.join("typo.toml").display().to_string();
    let e =
        fails(&dir, &["train", "--config", &config, "--out", &out], &["unknown key 'crpus' (did you mean 'corpus'?)"]);
    assert!(e.contains("data_format, init_from, [model], [train]"), "{e}");
    // `--set init_from=…` and `--set preset=…` name the flag that gives them (init_from was an
    // unknown key, though config.toml and --config hold it).
    for (kv, flag) in [
        ("init_from=run", "--init-from DIR"),
        ("preset=tiny", "--preset NAME"),
        ("init_from_step=3", "what a fine-tune records"),
    ] {
        fails(&dir, &["train", "--set", kv, "--out", &out, "--dry-run"], &[&format!("--set {kv}: "), flag]);
    }
    // `init_from` too (it was said as `--init-from ../run`, a flag not given, without the file).
    std::fs::create_dir_all(dir.join("run")).unwrap();
    std::fs::write(sub.join("i.toml"), "init_from = \"../run\"\n").unwrap();
    std::fs::write(dir.join("i.toml"), "init_from = \"no-such-run\"\n").unwrap();
    for (config, needles) in [
        (
            "sub/i.toml",
            ["--config sub/i.toml: init_from = \"../run\" does not exist", "write init_from = \"sub/../run\""],
        ),
        ("i.toml", ["--config i.toml: init_from = \"no-such-run\": no such checkpoint folder", "drop the line"]),
    ] {
        let o = cmd(&dir).current_dir(&dir).args(["train", "--config", config, "--out", "o", "--dry-run"]).output();
        let e = text(&o.unwrap());
        assert!(needles.iter().all(|n| e.contains(n)) && !e.contains("--init-from"), "{config}: {e}");
    }
    // None of these runs started: they left no --out folder behind.
    assert!(!dir.join("o").exists(), "a run that never started left {:?}", names(&dir.join("o")));
}

#[test]
fn tokenizer_problems_are_clear_errors() {
    let dir = tmpdir("tok");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("o").display().to_string();
    let t = |tok: &str, needles: &[&str]| {
        let mut a = vec!["train", "--corpus", &c, "--out", &out, "--steps", "1", "--tokenizer", tok];
        a.extend_from_slice(SMALL);
        fails(&dir, &a, needles)
    };
    t("/nonexistent/tok.json", &["/nonexistent/tok.json", "does not exist"]);
    let p = dir.join("bad.json");
    std::fs::write(&p, "{ this is not json").unwrap();
    t(p.to_str().unwrap(), &["bad.json"]);
    fails(&dir, &["tokenizer", "encode", "--tokenizer", p.to_str().unwrap(), "--text", "x"], &["bad.json"]);
    fails(
        &dir,
        &["tokenizer", "encode", "--tokenizer", "char", "--text", "x"],
        &["--tokenizer char", "tokenizer.json"],
    );
    let dup = dir.join("dup.json");
    std::fs::write(&dup, r#"{"kind": "char", "chars": "abca"}"#).unwrap();
    fails(
        &dir,
        &["tokenizer", "encode", "--tokenizer", dup.to_str().unwrap(), "--text", "a"],
        &["dup.json", "'a' twice"],
    );
    // A folder that is no run (a downloaded model's, say) is said as such, with the tokenizer.json
    // it holds as the remedy (it was "Is a directory (os error 21)"), by every command taking one.
    let folder = dir.join("downloaded");
    std::fs::create_dir_all(&folder).unwrap();
    let f = folder.to_str().unwrap();
    let shards = dir.join("folder-shards");
    let remedy = &["downloaded' is a folder", "no model.safetensors", "give a tokenizer.json", "or a run folder"];
    fails(&dir, &["tokenizer", "encode", "--tokenizer", f, "--text", "x"], remedy);
    fails(&dir, &["tokenizer", "decode", "--tokenizer", f, "--ids", "1"], remedy);
    fails(&dir, &["data", "prepare", "--tokenizer", f, "--out", shards.to_str().unwrap(), &c], remedy);
    assert!(!shards.exists(), "data prepare left its --out");
    std::fs::copy(&dup, folder.join("tokenizer.json")).unwrap();
    let t =
        fails(&dir, &["tokenizer", "encode", "--tokenizer", f, "--text", "x"], &["give the tokenizer.json it holds"]);
    assert!(t.contains(&folder.join("tokenizer.json").display().to_string()) && !t.contains("os error"), "{t}");
    // A BPE without an unknown token or byte fallback drops what it has no token for: refused
    // naming the character (and the file, for data prepare), nothing written.
    let lossy = dir.join("lossy.json");
    std::fs::write(
        &lossy,
        r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
        "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
        "model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,
        "end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,
        "vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}"#,
    )
    .unwrap();
    let l = lossy.to_str().unwrap();
    let o = cmd(&dir).args(["tokenizer", "encode", "--tokenizer", l, "--text", "ab ba"]).output().unwrap();
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "2 1 0", "{}", text(&o));
    // Piped text that starts with a byte-order mark is encoded without it, as `generate --prompt
    // -` and a corpus take it (the mark was refused as a character this tokenizer lacks).
    let o = piped(&dir, &["tokenizer", "encode", "--tokenizer", l, "--text", "-"], "\u{feff}ab ba");
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "2 1 0", "{}", text(&o));
    fails(
        &dir,
        &["tokenizer", "encode", "--tokenizer", l, "--text", "ab cab"],
        &["'c' at byte 3", "neither an unknown token nor byte fallback", "ddl tokenizer train"],
    );
    let abc = dir.join("abc.txt");
    std::fs::write(&abc, "ab ba ab\nab\tba\nabba c").unwrap();
    let lossy_out = dir.join("lossy-shards");
    fails(
        &dir,
        &["data", "prepare", "--tokenizer", l, "--out", lossy_out.to_str().unwrap(), abc.to_str().unwrap()],
        &["abc.txt", "'c' at byte 20", "dropped"],
    );
    assert!(!lossy_out.exists(), "a refused preparation left its --out");
    // A checkpoint whose tokenizer has more tokens than the model's vocabulary (its ids would
    // index outside the embedding).
    let ck = checkpoint(&dir);
    let bpe = dir.join("bpe.json");
    let o = cmd(&dir)
        .args(["tokenizer", "train", "--corpus", &c, "--vocab-size", "300", "--out", bpe.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // Shards made with it: `--tokenizer char` (which means "the shards' own" with --data, the
    // default) given for them is refused rather than ignored.
    let shards = dir.join("bpe-shards").display().to_string();
    let o = cmd(&dir)
        .args(["data", "prepare", "--tokenizer", bpe.to_str().unwrap(), "--out", &shards, &c])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let mut a = vec!["train", "--data", &shards, "--out", &out, "--steps", "1", "--tokenizer", "char"];
    a.extend_from_slice(SMALL);
    fails(&dir, &a, &["--tokenizer char", "bpe tokenizer of 300 tokens", "drop --tokenizer"]);
    // `--text -` reads standard input, as `generate --prompt -` does.
    let encode = |t: &str| {
        let mut c = cmd(&dir);
        c.args(["tokenizer", "encode", "--tokenizer", bpe.to_str().unwrap(), "--text", t]);
        c
    };
    let mut child =
        encode("-").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"First Citizen").unwrap();
    let piped = child.wait_with_output().unwrap();
    let direct = encode("First Citizen").output().unwrap();
    assert!(piped.status.success() && direct.status.success(), "{}", text(&piped));
    assert_eq!(piped.stdout, direct.stdout);
    let big = std::fs::read_to_string(&bpe).unwrap();
    let m = mutated(&ck, "big-vocab", |_, meta| {
        let json = format!(r#"{{"kind":"bpe","tokenizer":{big}}}"#);
        let old = meta.insert("tokenizer".into(), json);
        assert!(old.is_some());
    });
    fails_gen(&dir, &m, &["model.safetensors", "the tokenizer has 300 tokens but the model's vocabulary is"]);
}

#[test]
fn generation_problems_are_clear_errors() {
    let dir = tmpdir("gen");
    let ck = checkpoint(&dir);
    let k = ck.to_str().unwrap();
    let g = |extra: &[&str], needles: &[&str]| {
        let mut a = vec!["generate", "--checkpoint", k];
        a.extend_from_slice(extra);
        fails(&dir, &a, needles)
    };
    // A full disk while a trace is written: neither file of an earlier trace there changes (the
    // new arrays were left beside the earlier trace's summary, a pair that contradicts itself),
    // and no temporary file stays.
    let tr = dir.join("pair.safetensors");
    let traced = |seed: &str, fault: Option<&str>| {
        let mut a = gen_args(&ck);
        a.extend(["--seed", seed, "--trace", tr.to_str().unwrap()].map(String::from));
        let mut c = cmd(&dir);
        if let Some(n) = fault {
            c.env("DDL_FAULT_ENOSPC_SAVE", n);
        }
        c.args(&a).output().unwrap()
    };
    let o = traced("1", None);
    assert!(o.status.success(), "{}", text(&o));
    let pair = || (std::fs::read(&tr).unwrap(), std::fs::read(tr.with_extension("json")).unwrap());
    let before = pair();
    let o = traced("2", Some("1"));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("writing the trace") && text(&o).contains("No space left"), "{}", text(&o));
    assert!(pair() == before, "a trace write that failed changed the earlier trace's files");
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    g(&["--prompt", ""], &["--prompt is empty"]);
    g(&["--prompt", "-"], &["--prompt -", "standard input held no text"]);
    // Only a byte-order mark (dropped: it is not text) was said to be "empty".
    let mut child = cmd(&dir)
        .args(["generate", "--checkpoint", k, "--prompt", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), "\u{feff}".as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    let t = text(&o);
    assert!(o.status.code() == Some(1) && t.contains("held no text (it was empty, or only a byte-order mark)"), "{t}");
    g(&["--prompt", "ROMEO:\r\n"], &["Windows line ends", "tr -d"]);
    g(&["--prompt", "hi", "--max-tokens", "0"], &["--max-tokens", "at least 1"]);
    g(&["--prompt", "hi", "--temperature=-0.5"], &["--temperature", "-0.5"]);
    // A negative number after a space is the flag's value (clap would call it an unknown flag).
    g(&["--prompt", "hi", "--temperature", "-1"], &["--temperature must be a finite number ≥ 0", "got -1"]);
    g(&["--prompt", "hi", "--temperature", "inf"], &["--temperature must be a finite number ≥ 0", "got inf"]);
    // Past f32's range: said as given (it was "got inf").
    g(&["--prompt", "hi", "--temperature", "1e39"], &["--temperature", "1e39 is past the largest value taken"]);
    // Not a number: what the flag takes (it was Rust's "invalid float literal").
    for flag in ["--temperature", "--top-p", "--min-p", "--repetition-penalty"] {
        g(&["--prompt", "hi", flag, "warm"], &[flag, "expected a number (e.g. 0.8), got 'warm'"]);
    }
    g(
        &["--prompt", "hi", "--repetition-penalty", "-2"],
        &["--repetition-penalty must be a finite number > 0", "got -2"],
    );
    g(&["--prompt", "hi", "--stop", ""], &["--stop", "must not be empty"]);
    g(&["--prompt", "hi€"], &["--prompt", "'€'", "leave that character out"]);
    g(&["--prompt", "hi", "--top-p", "0"], &["--top-p", "(0, 1]", "got 0"]);
    g(&["--prompt", "hi", "--top-p", "1.5"], &["--top-p", "1.5"]);
    g(&["--prompt", "hi", "--temperature", "nan"], &["--temperature"]);
    // Characters the char-level tokenizer never saw are named.
    g(&["--prompt", "日本"], &["日"]);
    // A factor written past f32's range is named as such (not "inf").
    g(&["--prompt", "hi", "--intervene", "all:beta*=1e40"], &["1e40 is beyond the largest float32"]);
    // A stop text the char tokenizer cannot produce: generation goes on, and says the stop
    // cannot happen.
    let o = cmd(&dir)
        .args(["generate", "--checkpoint", k, "--prompt", "hi", "--max-tokens", "2", "--stop", "é"])
        .output()
        .unwrap();
    assert!(o.status.success() && text(&o).contains("can never be generated"), "{}", text(&o));
    // `--stop '\n'` is a newline, as in chat (it was a backslash and an n, which the char model
    // cannot write); the text stops after it and ends its line once (no blank line after it).
    let o = cmd(&dir)
        .args(["generate", "--checkpoint", k, "--prompt", "hi", "--max-tokens", "400", "--stop", "\\n", "--seed", "3"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success() && !text(&o).contains("can never be generated"), "{}", text(&o));
    assert!(out.ends_with('\n') && !out.ends_with("\n\n") && out.matches('\n').count() == 1, "{out:?}");
    // A prompt longer than the context is documented behaviour, not an error: its last part is
    // used (with a note) and generation proceeds.
    let long = "To be, or not to be: that is the question. ".repeat(4);
    let o = cmd(&dir).args(["generate", "--checkpoint", k, "--prompt", &long, "--max-tokens", "3"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("more than the context of 64"), "{}", text(&o));
    // It says what was cut; --strict-context refuses such a prompt instead.
    assert!(text(&o).contains("tokens (\"To be, or not to be"), "{}", text(&o));
    // ... and that generation slides past the context from its first token (a prompt and
    // --max-tokens within the context say nothing of it: the --stop runs above).
    assert!(text(&o).contains("--max-tokens 3 pass the context of 64: from generated token 1 on"), "{}", text(&o));
    let o = cmd(&dir).args(["generate", "--checkpoint", k, "--prompt", "hi", "--max-tokens", "62"]).output().unwrap();
    assert!(o.status.success() && !text(&o).contains("pass the context"), "{}", text(&o));
    let o = cmd(&dir).args(["generate", "--checkpoint", k, "--prompt", "hi", "--max-tokens", "63"]).output().unwrap();
    let said = "the prompt's 2 tokens and --max-tokens 63 pass the context of 64: from generated token 63 on, the \
                window slides, keeping its last 32 tokens";
    assert!(o.status.success() && text(&o).contains(said), "{}", text(&o));
    // One token over: "the first 1 token (\"T\") is dropped" (it said "1 tokens … are dropped").
    let o =
        cmd(&dir).args(["generate", "--checkpoint", k, "--prompt", &long[..65], "--max-tokens", "1"]).output().unwrap();
    assert!(text(&o).contains("the first 1 token (\"T\") is dropped"), "{}", text(&o));
    fails(
        &dir,
        &["generate", "--checkpoint", k, "--prompt", &long, "--max-tokens", "3", "--strict-context"],
        &["--strict-context", "more than the model's context of 64", "shorten it by at least"],
    );
    // A prompt file that starts with a byte-order mark (as Windows editors save it) is its text:
    // the mark was a character the char model lacks ("'\u{feff}' … leave that character out",
    // a character no one sees), and a BPE's three tokens in front of the prompt.
    let args = ["generate", "--checkpoint", k, "--prompt", "-", "--max-tokens", "2", "--temperature", "0"];
    let o = piped(&dir, &args, "\u{feff}ROMEO:");
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("ROMEO:"), "{}", text(&o));
}

#[test]
fn device_problems_are_clear_errors() {
    let dir = tmpdir("device");
    fails(&dir, &["--backend", "metal", "info"], &["no adapter matches", "Metal", "Adapters found"]);
    fails(&dir, &["--backend", "quantum", "info"], &["unknown backend 'quantum'", "vulkan"]);
    // Every index past the end is an error, also one whose digits appear in an adapter's name
    // (llvmpipe's "LLVM 15.0.6" contains 1, 5, 0, 6).
    for i in ["5", "6", "7", "15", "99"] {
        fails(&dir, &["--adapter", i, "info"], &[&format!("no adapter matches '{i}'"), "[0]"]);
    }
    fails(&dir, &["--adapter", "no-such-gpu", "info"], &["no-such-gpu", "Adapters found"]);
    // ... also where the adapter only annotates the output (a model's memory plan).
    fails(&dir, &["--adapter", "7", "info", "--preset", "tiny"], &["no adapter matches '7'"]);
    fails(&dir, &["--backend", "metal", "info", "--preset", "tiny"], &["no adapter matches", "Metal"]);
    // The variables standing for flags are named as themselves; an empty one is no setting, and
    // a flag given wins over its variable.
    let with_env = |k: &str, v: &str, args: &[&str]| cmd(&dir).env(k, v).args(args).output().unwrap();
    for (k, v, needle) in
        [("DDL_NO_AUTOTUNE", "bogus", "DDL_NO_AUTOTUNE=bogus: expected 1"), ("DDL_BACKEND", "zz", "DDL_BACKEND=zz")]
    {
        let o = with_env(k, v, &["info"]);
        assert!(o.status.code() == Some(2) && text(&o).contains(needle) && !text(&o).contains("'--"), "{}", text(&o));
        assert!(with_env(k, "", &["info"]).status.success(), "{k} empty: {}", text(&with_env(k, "", &["info"])));
    }
    assert!(with_env("DDL_BACKEND", "zz", &["--backend", "vulkan", "info"]).status.success());
    // An adapter asked for by the environment is named as such; an empty name is refused.
    let o = with_env("DDL_ADAPTER", "no-such-adapter", &["info"]);
    assert!(
        !o.status.success() && text(&o).contains("by the environment (DDL_ADAPTER=no-such-adapter)"),
        "{}",
        text(&o)
    );
    // A backend that is no adapter's here (Metal, off macOS), from the environment, likewise.
    if !cfg!(target_os = "macos") {
        let o = with_env("DDL_BACKEND", "metal", &["info"]);
        assert!(!o.status.success() && text(&o).contains("by the environment (DDL_BACKEND=metal)"), "{}", text(&o));
    }
    fails(&dir, &["--adapter", "", "info"], &["--adapter ''", "an adapter index or a name substring"]);
    // Negative values are the flag's error, not "unexpected argument".
    fails(&dir, &["info", "--preset", "tiny", "--head-chunk", "-1"], &["--head-chunk", "not a negative one"]);
    fails(&dir, &["info", "--preset", "tiny", "--memory", "-5GB"], &["--memory", "'-5GB' is not a memory size"]);
    // With a backend, indices count its adapters: an index `info` gives another backend's
    // adapter is said to count only this one's (where this machine has adapters of two).
    let count = |args: &[&str]| {
        let t = text(&cmd(&dir).args(args).output().unwrap());
        t.lines().filter(|l| l.trim_start().starts_with('[')).count()
    };
    let (every, vulkan) = (count(&["info"]), count(&["--backend", "vulkan", "info"]));
    if every > vulkan {
        let i = vulkan.to_string();
        fails(&dir, &["--backend", "vulkan", "--adapter", &i, "info"], &["indices count that backend's adapters only"]);
    }
    // `info --json`: the text's facts as one object (the adapter, limits, forms of the text).
    let o = cmd(&dir).args(["--backend", "vulkan", "info", "--json"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let described = text(&cmd(&dir).args(["--backend", "vulkan", "info"]).output().unwrap());
    let chosen = &v["chosen"];
    assert!(described.contains(&format!("adapter:   {}", chosen["adapter"].as_str().unwrap())), "{v}");
    assert_eq!(chosen["backend"], "Vulkan");
    let binding = chosen["limits"]["max_storage_buffer_binding_size"].as_u64().unwrap();
    assert!(described.contains(&format!("max_storage_buffer_binding_size    {binding}")), "{described}");
    assert!(chosen["forms"]["attention"].is_string() && chosen["forms"].get("bench").is_none(), "{v}");
    assert!(chosen["cooperative_forms"]["cooperative-matrix matmuls"].as_str().unwrap().starts_with("off ("), "{v}");
    assert!(v["adapters"].as_array().is_some_and(|a| !a.is_empty()), "{v}");
    // With --preset, the plan and the adapter's verdict (on lavapipe: it fits).
    let o = cmd(&dir).args(["--backend", "vulkan", "info", "--json", "--preset", "tiny"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["preset"].as_str(), v["variant"].as_str()), (Some("tiny"), Some("ddl")), "{v}");
    assert_eq!(v["adapter"]["name"], chosen["adapter"], "{v}");
    assert_eq!(v["adapter"]["fits"], true, "{v}");
    assert!(v["plan"]["bytes"]["total"].as_u64().unwrap() > 0 && v.get("fit").is_none(), "{v}");
    // MPI's options without --distributed, and info's in its own words.
    fails(&dir, &["train", "--preset", "tiny", "--mpi-timeout", "5", "--out", "x"], &["--distributed"]);
    // Their values in their own words (they were Rust's "invalid float literal"), and a dry run
    // refuses what the run would (it planned a `--mpi-bucket-mib -1` run the run then refused).
    let mpi = ["train", "--preset", "tiny", "--out", "x", "--distributed", "mpi"];
    fails(&dir, &[&mpi[..], &["--mpi-bucket-mib", "abc"]].concat(), &["--mpi-bucket-mib", "expected a size in MiB"]);
    fails(&dir, &[&mpi[..], &["--mpi-timeout", "5s"]].concat(), &["--mpi-timeout", "expected a number of seconds"]);
    let dry = [&mpi[..], &["--dry-run", "--mpi-bucket-mib", "-1"]].concat();
    if cfg!(feature = "mpi") {
        fails(&dir, &dry, &["--mpi-bucket-mib -1: expected a size in MiB ≥ 0"]);
    } else {
        fails(&dir, &dry, &["built without MPI support"]);
    }
    assert!(!dir.join("x").exists());
    fails(&dir, &["info", "--preset", "tiny", "--seq", "100000"], &["--seq 100000", "at most 64"]);
    fails(&dir, &["info", "--preset", "tiny", "--memory", "0.4"], &["at least 1 MiB"]);
    fails(&dir, &["info", "--preset", "tiny", "--memory", "80"], &["80 bytes", "write the unit, e.g. 80GB or 80GiB"]);
    fails(&dir, &["info", "--preset", "tiny", "--memory", "80G"], &["G alone is ambiguous", "80GB", "80GiB"]);
    let o = cmd(&dir).args(["info", "--preset", "tiny", "--memory", "50MB"]).output().unwrap();
    assert!(o.status.success() && text(&o).contains("MiB)") && !text(&o).contains("0.0 GiB"), "{}", text(&o));
    // A --head-chunk of more rows than a row's largest batch has: that row runs the head whole,
    // said there and recorded as 0 (it was "slices of R rows" alone, and R in the JSON).
    let fit = |chunk: &str, json: bool| {
        let mut a = vec!["info", "--preset", "tiny", "--memory", "50MB", "--head-chunk", chunk];
        if json {
            a.push("--json");
        }
        let o = cmd(&dir).args(&a).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let t = fit("100000000", false);
    let rows: Vec<&str> = t.lines().filter(|l| l.contains("tokens a micro-batch")).collect();
    assert!(!rows.is_empty() && rows.iter().all(|l| l.contains("the LM head whole")), "{t}");
    let v: serde_json::Value = serde_json::from_str(&fit("100000000", true)).unwrap();
    let rows = v["fit"]["rows"].as_array().unwrap();
    assert!(!rows.is_empty() && rows.iter().all(|r| r["head_chunk"] == 0), "{v}");
    let t = fit("1", false);
    assert!(!t.contains("the LM head whole") && t.contains("slices of 1 rows"), "{t}");
    // No Vulkan driver at all: the message says how to install one.
    let o = cmd(&dir)
        .args(["--backend", "vulkan", "info"])
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
        .output()
        .unwrap();
    let t = text(&o);
    assert!(!o.status.success() && !t.contains("panicked"), "{t}");
    // Whichever way it is reported (no adapter at all, or adapters of other backends only), the
    // platform's install hint is in it, word for word.
    assert!(t.contains(&ddl::gpu::install_hint()), "{t}");
    if std::fs::read_to_string("/etc/os-release").is_ok_and(|r| r.contains("ID=debian") || r.contains("ubuntu")) {
        assert!(t.contains("`sudo apt-get install mesa-vulkan-drivers libvulkan1`"), "{t}");
    }
}

#[test]
fn bench_problems_are_clear_errors() {
    let dir = tmpdir("bench");
    fails(&dir, &["bench", "matmul", "--variants", "t999"], &["--variants", "'t999'", "expected all or auto alone"]);
    fails(&dir, &["bench", "matmul", "--preset", "gpt-9"], &["unknown preset 'gpt-9'"]);
    fails(&dir, &["bench", "matmul", "--preset", "tiny", "--sizes", "64"], &["--sizes", "--preset"]);
    fails(&dir, &["bench", "matmul", "--batch", "2"], &["--preset"]);
    // `--tune` with a cache it cannot write is refused before it measures (it measured, warned
    // and exited 0, its measurements lost).
    let file = dir.join("a-file");
    std::fs::write(&file, "").unwrap();
    let o = cmd(&dir)
        .args(["bench", "matmul", "--sizes", "8", "--tune"])
        .env("DDL_CACHE_DIR", file.join("cache"))
        .output()
        .unwrap();
    let t = text(&o);
    assert!(!o.status.success() && t.contains("--tune stores its measurements in"), "{t}");
    assert!(t.contains("set DDL_CACHE_DIR to a writable folder") && !t.contains("GFLOP"), "{t}");
    assert!(t.contains(&format!("'{}' is a file, not a folder", file.display())) && !t.contains("os error"), "{t}");
    // Sizes past what the adapter can hold (and past usize's arithmetic): refused, not a panic.
    for size in ["4294967296", "18446744073709551615"] {
        fails(&dir, &["bench", "matmul", "--sizes", size], &["--sizes", size, "choose sizes up to"]);
    }
    for mib in ["30000", "17592186044416", "18446744073709551615"] {
        fails(&dir, &["bench", "copy", "--mib", mib], &["--mib", mib, "or less"]);
    }
    fails(&dir, &["bench", "kernels", "--preset", "tiny", "--batch", "0"], &["--batch", "must be at least 1"]);
    fails(&dir, &["bench", "kernels", "--preset", "gpt-9"], &["unknown preset 'gpt-9'"]);
    // A filter that keeps nothing is refused before the floors are measured (seconds on lavapipe).
    let t = fails(
        &dir,
        &["bench", "kernels", "--preset", "tiny", "--batch", "1", "--reps", "1", "--filter", "zzzz", "--json"],
        &["--filter zzzz", "no kernel case"],
    );
    assert!(!t.contains("\"copy\"") && !t.contains("\"ceiling\""), "floors measured for nothing: {t}");
    assert!(t.contains("bench kernels --list"), "{t}");
    fails(&dir, &["bench", "kernels", "--list", "--filter", "zzzz"], &["--filter zzzz", "no kernel case"]);
    // One name of several that keeps nothing (a typo) is refused too, not the others timed alone;
    // an empty name (a comma at the end) kept every case.
    fails(
        &dir,
        &["bench", "kernels", "--list", "--filter", "rmsnorm_,rmsnrom"],
        &["--filter rmsnorm_,rmsnrom", "no kernel case's name contains 'rmsnrom'", "--list"],
    );
    for f in ["rmsnorm_,", "rmsnorm_,,rope", ""] {
        fails(&dir, &["bench", "kernels", "--list", "--filter", f], &[&format!("--filter '{f}'"), "empty name"]);
    }
    fails(&dir, &["bench", "kernels", "--list", "--reps", "3"], &["--list", "--reps"]);
    // Spaces after the commas are not part of the names (" rope" matched no case).
    let o = cmd(&dir).args(["bench", "kernels", "--preset", "tiny", "--list", "--filter", "rmsnorm_, rope "]).output();
    let t = text(&o.unwrap());
    assert!(t.contains("rmsnorm_forward") && t.contains("rope_forward") && !t.contains("error"), "{t}");
    // `--list` names the cases the filter keeps, timing none.
    let o = cmd(&dir)
        .args(["bench", "kernels", "--preset", "tiny", "--list", "--filter", "rmsnorm_", "--json"])
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let cases: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["bench"] == "kernel_case")
        .collect();
    assert_eq!(cases.len(), 4, "{t}");
    assert!(cases.iter().all(|v| v["module"] == "norm" && v["name"].as_str().unwrap().starts_with("rmsnorm_")), "{t}");
    assert!(!t.contains("\"copy\"") && !t.contains("\"kernel\""), "something timed: {t}");
    fails(&dir, &["bench", "kernels", "--peak-tflops", "-1"], &["--peak-tflops", "above 0"]);
    fails(&dir, &["bench", "train", "--peak-tflops", "inf"], &["--peak-tflops", "above 0"]);
    fails(&dir, &["bench", "train", "--steps", "10001"], &["--steps", "at most 10000"]);
    // Settings the A/B comparison does not use are refused by clap, not ignored.
    fails(
        &dir,
        &["bench", "train", "--against", "baseline", "--peak-tflops", "67"],
        &["--peak-tflops", "cannot be used"],
    );
    fails(
        &dir,
        &["bench", "train", "--against-forms", "split_k_tiles=0", "--dispatches"],
        &["--dispatches", "cannot be used"],
    );
    fails(&dir, &["bench", "train", "--preset", "tiny", "--seq", "100000"], &["--seq 100000", "max_seq_len = 64"]);
    // bench train takes the model's shapes as `ddl train` does, with its checks.
    fails(&dir, &["bench", "train", "--set", "model.widht=3"], &["--set model.widht", "unknown key"]);
    fails(&dir, &["bench", "train", "--set", "model.n_layers=0"], &["model.n_layers = 0", "expected an integer"]);
    fails(&dir, &["bench", "train", "--variant", "baseline", "--set", "model.variant=ddl"], &["--variant"]);
    // Settings bench train does not use are refused, not ignored (it timed as if they were not
    // there); seeds given twice, a small set above the large one, contexts past the model's,
    // shapes past the adapter (an abort while drawing host data before) and a disk too small.
    fails(
        &dir,
        &["bench", "train", "--set", "train.lr=0"],
        &["--set train.lr=0", "would be ignored", "drop that --set"],
    );
    // ... naming the setting given, not those that follow it (train.min_lr follows train.lr).
    fails(&dir, &["bench", "train", "--set", "train.lr=0.01"], &["so train.lr would be ignored"]);
    // A run's config.toml (its corpus, its optimizer settings): refused with what to give instead.
    let run_config = dir.join("run-config.toml");
    std::fs::write(&run_config, "corpus = \"c.txt\"\n[model]\nd_model = 64\n[train]\nlr = 0.01\n").unwrap();
    fails(
        &dir,
        &["bench", "train", "--config", run_config.to_str().unwrap()],
        &["train.lr", "corpus would be ignored", "leave the others out of the file", "[model] table"],
    );
    fails(&dir, &["bench", "train", "--set", "train.precision=f16"], &["train.precision", "give --precision"]);
    // Named, even at the value it has: `--precision f16 --set train.precision=f32` ran f16.
    fails(&dir, &["bench", "train", "--set", "train.precision=f32"], &["train.precision", "give --precision"]);
    // A flag and a --set / --config that give one setting two values: refused (it ran the
    // flag's), as `ddl train --seed 1 --set train.seed=2` is; the same value twice is taken.
    for (flag, v, key, set) in [("--batch", "2", "train.batch_size", "3"), ("--seq", "32", "train.seq_len", "16")] {
        let t = fails(
            &dir,
            &["bench", "train", "--steps", "1", flag, v, "--set", &format!("{key}={set}")],
            &[&format!("{flag} gives {key} = {v} but --set gives {key} = {set}: drop one of them")],
        );
        assert!(!t.contains("kernel forms"), "refused before the adapter opens: {t}");
    }
    let batch3 = dir.join("batch3.toml");
    std::fs::write(&batch3, "[train]\nbatch_size = 3\n").unwrap();
    let b3 = batch3.to_str().unwrap();
    fails(&dir, &["bench", "train", "--config", b3, "--batch", "2"], &["--config gives train.batch_size = 3"]);
    fails(&dir, &["bench", "train", "--set", "batch_size=3", "--batch", "2"], &["--set gives train.batch_size = 3"]);
    let o = cmd(&dir).args(["bench", "train", "--config", b3, "--batch", "3"]).env("DDL_CHECK_ARGS", "1").output();
    assert!(o.as_ref().unwrap().status.success(), "{}", text(&o.unwrap()));
    // Arguments wrong without an adapter are refused before it opens (not after ~45 lines of the
    // kernel forms' table).
    for (args, says) in [
        (&["bench", "matmul", "--sizes", "64", "--cases", "xx"][..], "--cases: unknown form 'xx'"),
        (&["bench", "matmul", "--sizes", "64", "--variants", "nonsense"], "--variants: 'nonsense'"),
        (&["bench", "matmul", "--sizes", "64", "--against-forms", "garbage=1"], "unknown form 'garbage'"),
        (&["bench", "kernels", "--preset", "nope"], "unknown preset 'nope'"),
        (&["bench", "train", "--seq", "100"], "--seq 100: longer than the model's context (model.max_seq_len = 64)"),
        (&["bench", "train", "--variant", "baseline", "--f16-state"], "--f16-state: f16 states need variant ddl"),
        (&["bench", "precision", "--seeds", "1"], "--seeds: at least two seeds"),
        (&["bench", "precision", "--seeds", "1,1", "--steps", "1"], "seed 1 is given twice"),
        (&["bench", "data", "--mib", "1", "--small-mib", "2"], "--small-mib 2 is above --mib 1"),
    ] {
        let t = fails(&dir, args, &[says]);
        assert!(!t.contains("kernel forms"), "{args:?}: refused only after the adapter opened: {t}");
    }
    // bench precision's runs take --config / --set over the preset, except what it sets itself:
    // refused where a --set names it, even at the value it has (the benchmark's replaced it).
    for (set, says) in [
        ("train.seed=3", "give --seeds"),
        ("seed=3", "give --seeds"),
        ("train.precision=f16", "each seed trains once in f32 and once in f16"),
        ("train.precision=f32", "each seed trains once in f32 and once in f16"),
        ("train.state_f16=true", "f32 states"),
        ("train.state_f16=false", "f32 states"),
        ("train.warmup_steps=7", "a tenth of --steps"),
        ("corpus=x.txt", "give --corpus"),
    ] {
        let key = set.split('=').next().unwrap();
        let key = if key.contains('.') || key == "corpus" { key.to_string() } else { format!("train.{key}") };
        fails(&dir, &["bench", "precision", "--steps", "1", "--set", set], &[&format!("--set {set}"), &key, says]);
    }
    // And where --config names it.
    let seeded = dir.join("seeded.toml");
    std::fs::write(&seeded, "[train]\nseed = 1337\n").unwrap();
    let t = fails(
        &dir,
        &["bench", "precision", "--steps", "1", "--config", seeded.to_str().unwrap()],
        &["--config", "bench precision sets train.seed", "--seeds"],
    );
    assert_eq!(ddl::train::TrainConfig::preset("tiny").seed, 1337, "the preset's own seed, named: {t}");
    // A corpus that is not there is refused before the adapter opens, and --out is not made.
    let out = dir.join("prec-out");
    let t = fails(
        &dir,
        &["bench", "precision", "--steps", "1", "--corpus", "/nonexist", "--out", out.to_str().unwrap()],
        &["--corpus /nonexist", "corpus '/nonexist' does not exist"],
    );
    assert!(!t.contains("kernel forms") && !out.exists(), "{t}");
    // One that fails as its first run reads it: the --out folders the benchmark made are removed.
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let nested = dir.join("made/by/bench");
    let mut args = vec!["bench", "precision", "--steps", "1", "--seeds", "1,2", "--corpus", empty.to_str().unwrap()];
    args.extend(["--out", nested.to_str().unwrap()]);
    args.extend(SMALL);
    fails(&dir, &args, &["empty.txt' is empty", "give a text file, or a folder of .txt files, that holds some"]);
    // As tokenizer train says it (it said "corpus '…' is empty" alone).
    let args = ["tokenizer", "train", "--corpus", empty.to_str().unwrap(), "--vocab-size", "300", "--out", "t.json"];
    fails(&dir, &args, &["empty.txt' is empty", "give a text file"]);
    assert!(!dir.join("t.json").exists());
    assert!(!dir.join("made").exists(), "an empty --out made by the benchmark is left");
    // f16 needs SHADER_F16, which OpenGL (llvmpipe) lacks: said as the adapter opens, before a run
    // (bench precision trained its f32 run first, and said to use --precision, which it has
    // not), naming the flag given (--precision f16 implies f16 states: their refusal said to
    // drop --f16-state).
    let gl = ["--backend", "gl", "bench"];
    let o = cmd(&dir).args(gl).args(["copy", "--mib", "1", "--reps", "1"]).output().unwrap();
    if text(&o).contains("no adapter matches") {
        eprintln!("no OpenGL adapter here: the SHADER_F16 refusals are not checked");
    } else {
        let pg = dir.join("prec-gl");
        let mut args =
            [&gl[..], &["precision", "--steps", "1", "--seeds", "1,2", "--out", pg.to_str().unwrap()]].concat();
        args.extend(SMALL);
        let t =
            fails(&dir, &args, &["bench precision: adapter", "has no SHADER_F16", "its f16 runs", "--backend vulkan"]);
        assert!(!t.contains("--precision f32") && !t.contains("kernel forms") && !pg.exists(), "{t}");
        // (bench train takes the model's settings.)
        let mut args = [&gl[..], &["train", "--steps", "1", "--precision", "f16"]].concat();
        args.extend(&SMALL[..10]);
        let t = fails(&dir, &args, &["--precision f16: adapter", "has no SHADER_F16", "use --precision f32"]);
        assert!(!t.contains("--f16-state") && !t.contains("kernel forms"), "{t}");
        let mut args = [&gl[..], &["train", "--steps", "1", "--f16-state"]].concat();
        args.extend(&SMALL[..10]);
        fails(&dir, &args, &["--f16-state: adapter", "has no SHADER_F16", "drop --f16-state"]);
    }
    fails(&dir, &["bench", "precision", "--set", "model.n_layers=0"], &["model.n_layers = 0", "expected an integer"]);
    fails(&dir, &["bench", "precision", "--variant", "baseline", "--set", "model.variant=ddl"], &["--variant only"]);
    // Its runs go into --out's subfolders: not a run's folder, not inside its kept checkpoints.
    let run = dir.join("a-run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("metrics.jsonl"), "{\"step\":1,\"loss\":4.0}\n").unwrap();
    let r = run.to_str().unwrap();
    fails(&dir, &["bench", "precision", "--steps", "1", "--out", r], &["holds a training run (metrics.jsonl)"]);
    let kept = run.join("checkpoints/mine").display().to_string();
    fails(&dir, &["bench", "precision", "--steps", "1", "--out", &kept], &["inside the kept checkpoints"]);
    assert_eq!(names(&run), ["metrics.jsonl"]);
    // A file as --out, or above it: refused before the adapter opens (it was after the forms).
    let m = run.join("metrics.jsonl").display().to_string();
    for out in [m.clone(), format!("{m}/deeper")] {
        let t = fails(&dir, &["bench", "precision", "--steps", "1", "--out", &out], &[&format!("'{m}' is a file")]);
        assert!(!t.contains("kernel forms"), "{t}");
    }
    fails(&dir, &["bench", "matmul", "--sizes", "32", "--against-forms", ","], &["no form given"]);
    fails(&dir, &["bench", "matmul", "--sizes", "32", "--batch", "4"], &["--batch / --seq size a preset's"]);
    fails(&dir, &["bench", "matmul", "--preset", "tiny", "--cases", "nn"], &["--cases nn: with --preset tiny"]);
    fails(&dir, &["bench", "data", "--mib", "1", "--small-mib", "2"], &["--small-mib 2 is above --mib 1"]);
    // A size past any disk (its bytes wrapped to a few MiB and passed the free-space check) and a
    // count past 64 bits are refused with the flag's own bound, not u64's.
    fails(&dir, &["bench", "data", "--mib", "17592186044416"], &["--mib", "at most 1048576 MiB"]);
    fails(&dir, &["bench", "data", "--small-mib", "0"], &["--small-mib", "at least 1"]);
    let huge = "99999999999999999999999";
    fails(&dir, &["bench", "copy", "--reps", huge], &["--reps", &format!("{huge}: at most 10000 repetitions")]);
    fails(&dir, &["bench", "train", "--steps", huge], &["--steps", "at most 10000 timed steps"]);
    // A negative count in the flag's words (clap said "unexpected argument '-1' found").
    fails(
        &dir,
        &["bench", "train", "--steps", "-1"],
        &["--steps", "-1: a whole number ≥ 1 is expected, not a negative one"],
    );
    fails(
        &dir,
        &["bench", "kernels", "--reps", "-2"],
        &["--reps", "-2: a whole number ≥ 1 is expected, not a negative one"],
    );
    let t = fails(&dir, &["bench", "train", "--batch", huge], &["--batch", "at most 2^24"]);
    assert!(!t.contains("18446744073709551615"), "{t}");
    fails(
        &dir,
        &["bench", "generate", "--preset", "tiny", "--contexts", "65"],
        &["--contexts: 65", "max_seq_len = 64"],
    );
    let t = fails(
        &dir,
        &["bench", "kernels", "--filter", "attention_decode,rope", "--batch", "4096", "--seq", "4096", "--reps", "1"],
        &[
            "attention: could not run at these shapes",
            "rope: could not",
            "could not run at these shapes (above): give a smaller --batch or --seq (now B 4096 × T 4096)",
        ],
    );
    assert!(!t.contains("memory allocation") && !t.contains("backtrace"), "{t}");
    let made = dir.join("bench-data/deeper");
    let t =
        fails(&dir, &["bench", "data", "--mib", "1048576", "--dir", made.to_str().unwrap()], &["--dir", "MiB free"]);
    assert!(!dir.join("bench-data").exists(), "the folders it made are removed: {t}");
    // Sets an earlier --keep run left in a --dir, and files of the user's named as the benchmark
    // names its own, are refused before the adapter opens (a run replaced, then removed them).
    let kept = dir.join("bench-kept/small-shards");
    std::fs::create_dir_all(&kept).unwrap();
    std::fs::write(kept.join("marker"), "earlier").unwrap();
    let bench_kept = dir.join("bench-kept");
    std::fs::write(bench_kept.join("large.txt"), "my notes").unwrap();
    let t = fails(
        &dir,
        &["bench", "data", "--mib", "1", "--small-mib", "1", "--dir", bench_kept.to_str().unwrap()],
        &["--dir", "already holds small-shards, large.txt", "move or remove them, or give another --dir"],
    );
    assert!(!t.contains("kernel forms"), "refused before the adapter opens: {t}");
    assert!(kept.join("marker").exists(), "an earlier run's set was removed");
    assert_eq!(std::fs::read_to_string(bench_kept.join("large.txt")).unwrap(), "my notes");
    let file = bench_kept.join("large.txt");
    fails(&dir, &["bench", "data", "--dir", file.to_str().unwrap()], &["large.txt: is a file, not a folder"]);
    let t = fails(&dir, &["bench", "train", "--config", "no-such.toml"], &["--config", "no-such.toml"]);
    assert!(!t.contains("kernel forms"), "a bad setting is refused before the adapter opens: {t}");
    let args = ["--set", "model.d_model=32", "--set", "model.n_layers=1", "--set", "train.batch_size=3", "--seq", "16"];
    let o = cmd(&dir)
        .args(["bench", "train", "--no-autotune", "--variant", "baseline", "--steps", "1"])
        .args(args)
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success() && t.contains("baseline d=32 L=1 B=3 T=16:"), "{t}");
    let o = cmd(&dir)
        .args([
            "bench",
            "train",
            "--no-autotune",
            "--variant",
            "ddl",
            "--against",
            "baseline",
            "--steps",
            "1",
            "--json",
        ])
        .args(args)
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success() && t.contains("\"d\":32,") && t.contains("\"layers\":1,"), "{t}");
    // JSON lines start with the adapter and the kernel forms (the text says them in headers).
    let first: Vec<serde_json::Value> =
        String::from_utf8_lossy(&o.stdout).lines().take(2).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!((first[0]["bench"].as_str(), first[1]["bench"].as_str()), (Some("adapter"), Some("forms")), "{t}");
    assert!(first[0]["name"].as_str().is_some_and(|n| !n.is_empty()), "{t}");
    fails(&dir, &["bench", "copy", "--reps", "100000"], &["at most 10000 repetitions"]);
}

#[test]
fn bench_precision_trains_on_the_built_in_corpus_outside_the_repository() {
    // Its default --corpus, assets/tinyshakespeare.txt, is also in the binary (as `ddl train`'s):
    // from a folder without it the runs train on that copy (it was refused as missing).
    let dir = tmpdir("bench-prec-default");
    assert!(!dir.join(ddl::train::data::DEFAULT_CORPUS).exists());
    let mut args = vec!["bench", "precision", "--steps", "1", "--seeds", "1,2", "--out", "prec", "--json"];
    args.extend(SMALL);
    args.extend(["--set", "train.val_max_tokens=64"]);
    // (Run in that folder: the test's own working directory is the repository, which has the file.)
    let o = cmd(&dir).current_dir(&dir).args(&args).output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(t.matches(r#""bench":"precision_run""#).count(), 4, "{t}");
    assert!(dir.join("prec/ddl-f16-seed2/model.safetensors").is_file(), "the runs are in the folder: {t}");
    assert!(t.contains(r#""bench":"precision","#), "{t}");
}

/// Outputs never replace files they do not own: a trace refuses a path (or its `.json`
/// sibling) that holds something else, a folder that does not exist, a name ending in .json, and
/// replaces an earlier trace; `tokenizer train` refuses its own corpus and an existing file
/// without `--force`, makes a missing folder and refuses one under a file; `data prepare` refuses a file as `--out`, a name that is a path, reads a
/// folder reached again through a symbolic link once, and removes what a killed run left.
/// The sweep of 2026-12-06: problems `ddl golden`, `ddl bench train` and `ddl tokenizer train`
/// met late or said without a remedy are said before the work, with what to do.
#[test]
fn problems_found_late_are_said_before_the_work() {
    let dir = tmpdir("late");
    // A golden file's name mistyped: the closest file of its folder and the files there (it was
    // "cannot read: No such file or directory (os error 2)").
    let golden = ddl::testing::data_path("tests/golden");
    let typo = golden.join("ddll.safetensors");
    fails(
        &dir,
        &["golden", typo.to_str().unwrap()],
        &["does not exist", &format!("did you mean '{}'", golden.join("ddl.safetensors").display()), "ddl_vmap"],
    );
    // A batch past the adapter: the memory plan and the batch that fits (it was the first
    // buffer too large, "tensor 'e' … needs … bytes", without a remedy).
    fails(
        &dir,
        &["bench", "train", "--preset", "tiny", "--batch", "100000", "--steps", "1"],
        &["the memory plan of a batch of 100000 × 64 tokens", "To fit: pass --batch", "or less"],
    );
    // A tokenizer's --out that cannot be written: said before the corpus is trained on (it was
    // after: minutes on a large corpus, here the tiny corpus's own error came first).
    let tiny = dir.join("tiny.txt");
    std::fs::write(&tiny, "ab").unwrap();
    let long = dir.join(format!("{}.json", "t".repeat(300)));
    let t = fails(
        &dir,
        &[
            "tokenizer",
            "train",
            "--corpus",
            tiny.to_str().unwrap(),
            "--vocab-size",
            "300",
            "--out",
            long.to_str().unwrap(),
        ],
        &["--out", "no file can be written under that name", "choose another --out"],
    );
    assert!(!t.contains("learnt no merge"), "trained before the --out was checked: {t}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "the probe left a file");
}

/// `ddl bench train --head-chunk R` with R at least the batch's rows runs the head whole: said,
/// and its row records `head_chunk` 0 (it recorded R, and printed "head chunk R", a slicing that
/// never happened); a chunk below the rows is recorded as given.
#[test]
fn bench_train_records_the_head_chunk_it_ran() {
    let dir = tmpdir("bench-chunk");
    let bench = |chunk: &str| {
        let a = ["bench", "train", "--preset", "tiny", "--batch", "1", "--seq", "8", "--steps", "1"];
        let o = cmd(&dir).args(a).args(["--peak-tflops", "1", "--head-chunk", chunk, "--json"]).output().unwrap();
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        let row = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["bench"] == "train")
            .unwrap_or_else(|| panic!("no train row in: {t}"));
        (t, row)
    };
    let (t, row) = bench("100");
    assert!(t.contains("--head-chunk 100 covers all 8 rows of B 1 × T 8: the LM head runs whole"), "{t}");
    assert_eq!(row["head_chunk"], 0, "{row}");
    let (t, row) = bench("3");
    assert!(!t.contains("runs whole"), "{t}");
    assert_eq!(row["head_chunk"], 3, "{row}");
}

/// The keys `ddl eval --json` writes only with some flags are named in docs/TRAINING.md and in
/// `ddl eval --help` (`ablate_plot` was in neither's list; `calibration_plot` and `lens_plot` were
/// missing from the help).
#[test]
fn the_eval_json_keys_that_flags_add_are_documented() {
    let dir = tmpdir("eval-keys");
    let o = cmd(&dir).args(["eval", "--help"]).output().unwrap();
    let help = text(&o).split_whitespace().collect::<Vec<_>>().join(" ");
    let docs = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/TRAINING.md")).unwrap();
    for key in ["ablate_plot", "calibration_plot", "lens_plot", "per_token", "ablations", "intervened", "against"] {
        assert!(docs.contains(&format!("`{key}`")), "docs/TRAINING.md does not name `{key}`");
        assert!(help.contains(key), "`ddl eval --help` does not name {key}:\n{help}");
    }
}

/// A golden file damaged after it was copied (bytes overwritten, here with NaNs) is said to be
/// damaged, with the tensor and the remedy, as a file that could not be checked: it was a table
/// of FAIL rows and "golden parity failed", as if the engine were wrong.
#[test]
fn a_damaged_golden_file_is_not_reported_as_a_parity_failure() {
    let dir = tmpdir("golden-damaged");
    let mut bytes = std::fs::read(ddl::testing::data_path("tests/golden/ddl.safetensors")).unwrap();
    let at = bytes.len() - 2000;
    bytes[at..at + 64].fill(0xff);
    let f = dir.join("ddl.safetensors");
    std::fs::write(&f, &bytes).unwrap();
    // (Said before the adapter opens: with no file to compare, an adapter not there is never asked for.)
    let t = fails(
        &dir,
        &["golden", f.to_str().unwrap(), "--adapter", "no-such-adapter"],
        &["the file is damaged", "not finite", "not a parity failure", "copy it again", "could not be checked"],
    );
    assert!(!t.contains("parity failed") && !t.contains("FAIL") && !t.contains("no-such-adapter"), "{t}");
}

#[test]
fn outputs_never_replace_files_they_do_not_own() {
    let dir = tmpdir("outputs");
    let c = ddl::testing::small_corpus(&dir);
    // A pipe (or a device) is not a file to replace, even with --force.
    let fifo = dir.join("fifo");
    if Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        let f = fifo.to_str().unwrap();
        fails(
            &dir,
            &["tokenizer", "train", "--corpus", &c, "--vocab-size", "300", "--out", f, "--force"],
            &["not a regular file"],
        );
        assert!(std::fs::symlink_metadata(&fifo).is_ok_and(|m| !m.is_file()), "the pipe became a file");
        // Read from: refused where the command reads it twice or by name (a pipe without a
        // writer blocked them), not waited on.
        let out = dir.join("from-pipe").display().to_string();
        fails(&dir, &["data", "prepare", "--tokenizer", "char", "--out", &out, f], &["a pipe", "more than once"]);
        fails(&dir, &["tokenizer", "train", "--corpus", f, "--vocab-size", "300", "--out", &out], &["a pipe", "twice"]);
        fails(&dir, &["golden", f], &["a pipe", "read whole"]);
        // In a folder too.
        let piped = dir.join("piped");
        std::fs::create_dir_all(&piped).unwrap();
        assert!(Command::new("mkfifo").arg(piped.join("b.txt")).status().unwrap().success());
        let p = piped.to_str().unwrap();
        fails(&dir, &["data", "prepare", "--tokenizer", "char", "--out", &out, p], &["b.txt' is a pipe"]);
        assert!(!Path::new(&out).exists());
    }
    let keep = dir.join("model.safetensors");
    std::fs::write(&keep, b"not a trace").unwrap();
    let data = dir.join("data.json");
    std::fs::write(&data, b"{\"format\": \"something else\"}").unwrap();
    let check = |p: &Path| ddl::generate::check_trace_path(p);
    let e = check(&keep).unwrap_err();
    assert!(e.contains("model.safetensors") && e.contains("is not a ddl trace"), "{e}");
    let e = check(&dir.join("data")).unwrap_err();
    assert!(e.contains("data.json") && e.contains("is not a ddl trace"), "{e}");
    // A name the folder cannot take (with the write's temporary suffix) is refused up front.
    let e = check(&dir.join(format!("{}.safetensors", "a".repeat(245)))).unwrap_err();
    assert!(e.contains("cannot write") && e.contains("choose a folder that takes files"), "{e}");
    let e = check(&dir.join("t.json")).unwrap_err();
    assert!(e.contains("cannot end in .json") && e.contains("t.safetensors"), "{e}");
    let e = check(&dir.join("nodir/t.safetensors")).unwrap_err();
    assert!(e.contains("does not exist"), "{e}");
    assert_eq!(std::fs::read(&keep).unwrap(), b"not a trace");
    // An earlier trace is replaced (written by the library, as generate and chat do).
    let t = dir.join("t.safetensors");
    let cfg = ddl::model::ModelConfig::preset("tiny", ddl::model::Variant::Ddl).unwrap();
    ddl::generate::write_trace(&t, &cfg, &[]).unwrap();
    check(&t).unwrap();
    ddl::generate::write_trace(&t, &cfg, &[]).unwrap();
    assert!(ddl::generate::write_trace(&keep, &cfg, &[]).is_err());
    assert_eq!(std::fs::read(&keep).unwrap(), b"not a trace");

    // tokenizer train: never the corpus, an existing file only with --force.
    let corpus_before = std::fs::read(&c).unwrap();
    let tok = |out: &str, force: bool| {
        let mut a = vec!["tokenizer", "train", "--corpus", &c, "--vocab-size", "300", "--out", out];
        if force {
            a.push("--force");
        }
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    fn refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    fails(&dir, &refs(&tok(&c, true)), &["is the corpus", "choose another --out"]);
    assert_eq!(std::fs::read(&c).unwrap(), corpus_before);
    let tk = dir.join("tk.json").display().to_string();
    assert!(cmd(&dir).args(refs(&tok(&tk, false))).output().unwrap().status.success());
    fails(&dir, &refs(&tok(&tk, false)), &["tk.json", "exists", "--force"]);
    assert!(cmd(&dir).args(refs(&tok(&tk, true))).output().unwrap().status.success());
    // A missing folder is made (as data prepare makes its --out's); one under a file is refused
    // before the training, naming the file.
    let nested = dir.join("made/here/tk.json");
    assert!(cmd(&dir).args(refs(&tok(nested.to_str().unwrap(), false))).output().unwrap().status.success());
    assert!(ddl::train::load_tokenizer(&nested).is_ok());
    let under_file = format!("{c}/sub/tk.json");
    fails(&dir, &refs(&tok(&under_file, false)), &["is a file", "cannot be made", "choose another --out"]);

    // data prepare: --out a file, --name a path, a symbolic-link cycle, a killed run's leftovers.
    let prep = |out: &Path, extra: &[&str], input: &Path| {
        let mut c = cmd(&dir);
        c.args(["data", "prepare", "--tokenizer", "char", "--out"]).arg(out).args(extra).arg(input);
        c.output().unwrap()
    };
    let o = prep(Path::new(&c), &[], Path::new(&c));
    assert!(!o.status.success() && text(&o).contains("is a file"), "{}", text(&o));
    // A folder nothing can be made in (as root, permissions would not stop it: /proc) is named
    // as --out's, not as the temporary folder's bare path.
    if Path::new("/proc/self").is_dir() {
        let o = prep(Path::new("/proc/ddl-out"), &[], Path::new(&c));
        let t = text(&o);
        assert!(
            !o.status.success() && t.contains("--out /proc/ddl-out: cannot make") && t.contains("temporary"),
            "{t}"
        );
    }
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let o = prep(&dir.join("from-empty"), &[], &empty);
    assert!(
        !o.status.success() && text(&o).contains("empty.txt") && text(&o).contains("too little text"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read(&c).unwrap(), corpus_before);
    for name in ["a/b", "", ".hidden"] {
        let o = prep(&dir.join("named"), &["--name", name], Path::new(&c));
        assert!(!o.status.success() && text(&o).contains("--name"), "{name:?}: {}", text(&o));
    }
    // A name whose shards `ddl train --data` would read as both splits (my_val_train_000000.bin):
    // refused, naming the marker (it wrote a set that neither verified nor trained).
    for (name, marker) in [("my_val", "\"_val_\""), ("x_train", "\"_train_\""), ("a_val_b", "\"_val_\"")] {
        let o = prep(&dir.join("named"), &["--name", name], Path::new(&c));
        assert!(!o.status.success() && text(&o).contains(marker), "{name:?}: {}", text(&o));
        assert!(!dir.join("named").exists(), "{name:?}");
    }
    let o = prep(&dir.join("named-ok"), &["--name", "my-val"], Path::new(&c));
    assert!(o.status.success(), "{}", text(&o));
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    std::fs::copy(&c, tree.join("a.txt")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("..", tree.join("sub/up")).unwrap();
    // What a run killed mid-way leaves (pid 0x7ffffff0 exists nowhere) is removed; another
    // out's leftovers are not touched.
    let stale = dir.join(".shards.prepare-2147483632");
    let other = dir.join(".other.prepare-2147483632");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let o = prep(&dir.join("shards"), &[], &tree);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("1 document,"), "the cycle was followed: {}", text(&o));
    assert!(!stale.exists(), "a killed run's temporary folder was left");
    assert!(other.exists());
}

/// `ddl eval` of a run's own data refuses data that changed since the run trained on it (its
/// `data.json`), names a corpus that is gone with the remedies that exist for eval, and `--data`
/// refuses a shard whose digest differs from its `meta.json`.
#[test]
fn eval_refuses_data_that_changed_since_it_was_trained_or_prepared() {
    let dir = tmpdir("eval-data");
    let ck = checkpoint(&dir);
    let corpus = dir.join("corpus.txt");
    let original = std::fs::read_to_string(&corpus).unwrap();
    let eval = |extra: &[&str]| {
        let mut a = vec!["eval", "--checkpoint", ck.to_str().unwrap()];
        a.extend_from_slice(extra);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    fn refs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    assert!(cmd(&dir).args(eval(&[])).output().unwrap().status.success());
    std::fs::write(&corpus, original.replace("the", "eht")).unwrap();
    fails(&dir, &refs(&eval(&[])), &["data.json", "changed since this run started", "--text"]);
    std::fs::remove_file(&corpus).unwrap();
    let t = fails(&dir, &refs(&eval(&[])), &["corpus.txt", "does not exist", "--text FILE"]);
    assert!(!t.contains("--corpus"), "eval has no --corpus: {t}");
    std::fs::write(&corpus, &original).unwrap();
    assert!(cmd(&dir).args(eval(&[])).output().unwrap().status.success(), "the restored corpus was refused");
    // A run on the default corpus, evaluated from a folder with its own assets/tinyshakespeare.txt:
    // the message says which file was read (the name resolves against the current folder).
    let default = dir.join("ck-default");
    std::fs::create_dir_all(&default).unwrap();
    for e in std::fs::read_dir(&ck).unwrap().flatten().filter(|e| e.path().is_file()) {
        std::fs::copy(e.path(), default.join(e.file_name())).unwrap();
    }
    let cfg = std::fs::read_to_string(default.join("config.toml")).unwrap();
    let line = cfg.lines().find(|l| l.starts_with("corpus = ")).unwrap();
    std::fs::write(default.join("config.toml"), cfg.replace(line, "corpus = \"assets/tinyshakespeare.txt\"")).unwrap();
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(elsewhere.join("assets")).unwrap();
    std::fs::write(elsewhere.join("assets/tinyshakespeare.txt"), original.replace("the", "eht")).unwrap();
    let o = cmd(&dir).current_dir(&elsewhere).args(["eval", "--checkpoint"]).arg(&default).output().unwrap();
    let t = text(&o);
    assert!(!o.status.success() && t.contains("changed since this run started"), "{t}");
    assert!(t.contains("elsewhere/assets/tinyshakespeare.txt: the name resolves against the current folder"), "{t}");
    // Shards changed after `ddl data prepare`.
    let shards = dir.join("shards");
    let o = cmd(&dir)
        .args(["data", "prepare", "--tokenizer", "char", "--out", shards.to_str().unwrap(), corpus.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let val = shards.join("data_val_000000.bin");
    let mut bytes = std::fs::read(&val).unwrap();
    let at = bytes.len() - 2;
    bytes[at] ^= 1;
    std::fs::write(&val, bytes).unwrap();
    fails(&dir, &refs(&eval(&["--data", shards.to_str().unwrap()])), &["data_val_000000.bin", "SHA-256", "meta.json"]);
    // Training on them: the check beside the first steps stops the run before any checkpoint.
    let run = dir.join("on-damaged");
    let mut a = vec!["train", "--variant", "ddl", "--data", shards.to_str().unwrap(), "--out", run.to_str().unwrap()];
    a.extend_from_slice(&["--steps", "3"]);
    a.extend_from_slice(SMALL);
    let t = fails(&dir, &a, &["data_val_000000.bin", "SHA-256", "no checkpoint was written on these shards"]);
    assert!(
        !run.join("model.safetensors").exists() && !run.join("checkpoints").exists(),
        "saved on damaged shards: {t}"
    );
    // And on the shards as prepared it trains.
    std::fs::remove_dir_all(&shards).unwrap();
    let o = cmd(&dir)
        .args(["data", "prepare", "--tokenizer", "char", "--out", shards.to_str().unwrap(), corpus.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = cmd(&dir).args(&a).arg("--overwrite").output().unwrap();
    assert!(o.status.success() && run.join("model.safetensors").exists(), "{}", text(&o));
    // A folder of several shards: one gone (its tokens would be left out), or one added.
    std::fs::remove_dir_all(&shards).unwrap();
    let o = cmd(&dir)
        .args(["data", "prepare", "--tokenizer", "char", "--shard-tokens", "4000", "--out", shards.to_str().unwrap()])
        .arg(&corpus)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let second = shards.join("data_train_000001.bin");
    let bytes = std::fs::read(&second).unwrap();
    std::fs::remove_file(&second).unwrap();
    let overwrite: Vec<&str> = a.iter().copied().chain(["--overwrite"]).collect();
    fails(&dir, &overwrite, &["data_train_000001.bin", "lists this shard, which is missing"]);
    fails(&dir, &refs(&eval(&["--data", shards.to_str().unwrap(), "--split", "train"])), &["which is missing"]);
    std::fs::write(&second, &bytes).unwrap();
    std::fs::write(shards.join("data_train_000099.bin"), &bytes).unwrap();
    fails(&dir, &overwrite, &["data_train_000099.bin", "not a shard"]);
    std::fs::remove_file(shards.join("data_train_000099.bin")).unwrap();
    let o = cmd(&dir).args(&overwrite).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

/// `ddl eval` of a run's own `--data` checks what it reads against meta.json's SHA-256s:
/// `data.json`'s fingerprint covers only a shard's first and last MiB, so a change in the middle
/// of a larger shard was evaluated as if nothing had happened.
#[test]
fn eval_of_a_runs_own_shards_checks_what_it_reads() {
    let dir = tmpdir("eval-own-shards");
    let small = std::fs::read_to_string(ddl::testing::small_corpus(&dir)).unwrap();
    let corpus = dir.join("big.txt");
    std::fs::write(&corpus, small.repeat(4_000_000 / small.len() + 1)).unwrap();
    let shards = dir.join("shards");
    let o = cmd(&dir)
        .args(["data", "prepare", "--tokenizer", "char", "--val-tokens", "1500000", "--out"])
        .arg(&shards)
        .arg(&corpus)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let run = dir.join("run");
    let mut a = vec!["train", "--variant", "ddl", "--data", shards.to_str().unwrap(), "--out", run.to_str().unwrap()];
    a.extend_from_slice(&["--steps", "2", "--set", "train.val_max_tokens=64"]);
    a.extend_from_slice(SMALL);
    let o = cmd(&dir).args(&a).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let eval = |split: &str| {
        let r = run.to_str().unwrap().to_string();
        ["eval", "--checkpoint", &r, "--batches", "1", "--split", split].map(String::from)
    };
    let flip = |p: &Path| {
        let good = std::fs::read(p).unwrap();
        assert!(good.len() > 5 << 19, "{} is too small to change between its ends", p.display());
        let mut bad = good.clone();
        bad[good.len() / 2] ^= 1;
        std::fs::write(p, &bad).unwrap();
        good
    };
    for (split, shard) in [("val", "data_val_000000.bin"), ("train", "data_train_000000.bin")] {
        let e = eval(split);
        let e: Vec<&str> = e.iter().map(String::as_str).collect();
        assert!(cmd(&dir).args(&e).output().unwrap().status.success());
        let good = flip(&shards.join(shard));
        fails(&dir, &e, &[shard, "SHA-256"]);
        std::fs::write(shards.join(shard), good).unwrap();
    }
}

/// Names of the files in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| r.flatten().map(|e| e.file_name().to_string_lossy().to_string()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn kill_9_during_checkpoint_writes_never_loses_the_checkpoint() {
    let dir = tmpdir("kill");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let o = out.to_str().unwrap();
    // A bigger model (the tiny preset, ~10 MB per checkpoint) saved after every step, so the
    // saves take a good share of the time.
    let args = |steps: &'static str| -> Vec<String> {
        ["train", "--variant", "ddl", "--corpus", &c, "--out", o, "--steps", steps]
            .into_iter()
            .map(String::from)
            .chain(
                [
                    "--set",
                    "train.batch_size=1",
                    "--set",
                    "train.seq_len=8",
                    "--set",
                    "train.checkpoint_every=1",
                    "--set",
                    "train.eval_batches=1",
                ]
                .map(String::from),
            )
            .collect()
    };
    let first = cmd(&dir).args(args("2")).output().unwrap();
    assert!(first.status.success(), "{}", text(&first));
    let mut hits = 0;
    let mut kills = 0;
    let deadline = Instant::now() + Duration::from_secs(150);
    while hits < 3 && kills < 25 && Instant::now() < deadline {
        let mut resume = cmd(&dir);
        resume.args(["train", "--resume", o, "--steps", "1000000"]);
        let mut child = resume.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
        // Wait for a save in progress (a temporary checkpoint file), then kill -9.
        let t0 = Instant::now();
        let mut hit = false;
        while t0.elapsed() < Duration::from_secs(20) {
            if names(&out).iter().any(|n| n.contains("safetensors.tmp-") || n.contains("prev")) {
                hit = true;
                break;
            }
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
        hits += hit as usize;
        // Whatever moment the kill hit, a consistent checkpoint loads, with its moments.
        let ck = ddl::train::checkpoint::load(&out, true)
            .unwrap_or_else(|e| panic!("after kill {kills} (files {:?}): {e}", names(&out)));
        assert!(ck.step >= 2 && ck.optim.is_some(), "after kill {kills}: step {}", ck.step);
    }
    assert!(hits >= 1, "no kill landed during a save in {kills} tries (files: {:?})", names(&out));
    // And the run resumes from there and finishes.
    let step = ddl::train::checkpoint::load(&out, false).unwrap().step;
    let target = (step + 2).to_string();
    let r = cmd(&dir).args(["train", "--resume", o, "--steps", &target]).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
    assert_eq!(ddl::train::checkpoint::load(&out, true).unwrap().step, step + 2);
    assert!(!names(&out).iter().any(|n| n.contains(".tmp-")), "stale temporary files: {:?}", names(&out));
}

#[test]
fn a_non_finite_step_stops_the_run_or_is_skipped_and_no_checkpoint_is_corrupted() {
    let dir = tmpdir("nan");
    let c = ddl::testing::small_corpus(&dir);
    // A learning rate of 1e4 without clipping makes the loss overflow within a few steps.
    let diverge = ["--set", "train.lr=1e4", "--set", "train.grad_clip=0", "--set", "train.warmup_steps=1"];
    let every = ["--set", "train.checkpoint_every=1", "--set", "train.log_every=1"];
    let out = dir.join("stop");
    let mut extra: Vec<&str> = diverge.to_vec();
    extra.extend_from_slice(&every);
    let a = train_args(&c, out.to_str().unwrap(), "8", &extra);
    let e = fails(&dir, &a, &["not finite", "the last one saved before, if any, is kept", "--skip-nonfinite"]);
    let bad: usize = e.split("step ").filter_map(|s| s.split(':').next()?.trim().parse().ok()).last().unwrap();
    assert!(bad >= 2, "{e}");
    // The checkpoint on disk is the last good step, loads (no NaN in it) and resumes.
    let ck = ddl::train::checkpoint::load(&out, true).unwrap();
    assert_eq!(ck.step, bad - 1, "{e}");
    let lines = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert!(!lines.contains(&format!("\"step\":{bad},")), "the failed step must not be logged as done");

    // --skip-nonfinite: such steps are skipped (logged as skipped), the run finishes, and the
    // saved parameters are finite.
    let out2 = dir.join("skip");
    let mut extra: Vec<&str> = diverge.to_vec();
    extra.extend_from_slice(&every);
    extra.push("--skip-nonfinite");
    let a = train_args(&c, out2.to_str().unwrap(), "8", &extra);
    let o = cmd(&dir).args(&a).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let lines = std::fs::read_to_string(out2.join("metrics.jsonl")).unwrap();
    let skipped = lines.lines().filter(|l| l.contains("\"skipped\":true")).count();
    assert!(skipped >= 1, "{lines}");
    // Said on the console (it was only logged), and counted in summary.json.
    let said = text(&o);
    let counted = format!("{skipped} of 8 steps skipped for a non-finite loss or gradient norm");
    assert!(said.contains("is skipped (train.skip_nonfinite)") && said.contains(&counted), "{said}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out2.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["skipped_nonfinite"].as_u64(), Some(skipped as u64));
    let ck = ddl::train::checkpoint::load(&out2, true).unwrap();
    assert_eq!(ck.step, 8);
    assert!(ck.params.iter().all(|x| x.is_finite()));
}

#[test]
fn a_full_disk_or_an_unwritable_directory_is_a_clear_error_and_keeps_the_last_checkpoint() {
    let dir = tmpdir("disk");
    let c = ddl::testing::small_corpus(&dir);
    // Not writable: the output path runs through a regular file (fails before training starts,
    // even as root, where permission bits would not stop us).
    std::fs::write(dir.join("file"), "x").unwrap();
    let bad = dir.join("file").join("run");
    let a = train_args(&c, bad.to_str().unwrap(), "2", &[]);
    fails(&dir, &a, &["file' is a file, so the run's folder cannot be made there"]);
    // A disk without room for one checkpoint (injected: 100 kB free; the model's checkpoint is
    // about 1 MB and more): refused before training, naming both sizes, no folder left.
    let small = dir.join("small-disk");
    let a = train_args(&c, small.to_str().unwrap(), "2", &[]);
    let needles = ["small-disk", "its disk has 0.1 MB free", "saving a checkpoint of this model needs", "another disk"];
    let t = fails_under(&dir, ("DDL_FAULT_FREE_BYTES", "100000"), &a, &needles);
    assert!(!t.contains("training ddl"), "refused after the training line: {t}");
    assert!(!small.exists(), "the refused run left its folder");
    // A full disk during a save (injected: the checkpoint saves after the first one fail half-way
    // through a file with ENOSPC): the run stops with a clear error and the previous checkpoint stays loadable.
    let out = dir.join("run");
    let a = train_args(&c, out.to_str().unwrap(), "6", &["--set", "train.checkpoint_every=1"]);
    let o = cmd(&dir).args(&a).env("DDL_FAULT_ENOSPC_SAVE", "1").output().unwrap();
    let t = text(&o);
    assert!(!o.status.success() && !t.contains("panicked"), "{t}");
    for n in ["step 2", "saving the checkpoint failed", "No space left on device", "checkpoint of step 1", "--resume"] {
        assert!(t.contains(n), "expected {n:?} in: {t}");
    }
    let ck = ddl::train::checkpoint::load(&out, true).unwrap();
    assert_eq!(ck.step, 1);
    assert!(!names(&out).iter().any(|n| n.contains(".tmp-")), "temporary files left: {:?}", names(&out));
    let r = cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--steps", "3"]).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
    // The step's checkpoint saved but its copy under checkpoints/ not (a file in the folder's
    // place): the message names that step as saved, not the one before, and it resumes there.
    std::fs::remove_dir_all(out.join("checkpoints")).unwrap();
    std::fs::write(out.join("checkpoints"), "x").unwrap();
    let r = cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--steps", "5"]).output().unwrap();
    let t = text(&r);
    assert!(!r.status.success() && t.contains("step 4: saving the checkpoint failed"), "{t}");
    assert!(t.contains("The checkpoint of step 4 itself is saved") && !t.contains("step 3 in"), "{t}");
    assert_eq!(ddl::train::checkpoint::load(&out, true).unwrap().step, 4);
}

#[test]
fn a_lost_device_is_a_clear_error_and_keeps_the_last_checkpoint() {
    let dir = tmpdir("lost");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let a = train_args(&c, out.to_str().unwrap(), "6", &["--set", "train.checkpoint_every=1"]);
    // Injected: the device is destroyed (as a driver reset would lose it) before step 3 runs.
    let needles = ["step 3", "device was lost", "checkpoint of step 2", "--resume"];
    fails_under(&dir, ("DDL_FAULT_DEVICE_LOST_STEP", "3"), &a, &needles);
    assert_eq!(ddl::train::checkpoint::load(&out, true).unwrap().step, 2);
    let r = cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--steps", "4"]).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
}

/// A run stopped between checkpoints logged steps its checkpoint does not hold: resuming cuts
/// metrics.jsonl back to the checkpoint's step, so every step appears once, in order.
#[test]
fn resuming_cuts_the_metrics_back_to_the_checkpoint() {
    let dir = tmpdir("cut");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let extra = ["--set", "train.checkpoint_every=2", "--set", "train.log_every=1"];
    let a = train_args(&c, out.to_str().unwrap(), "6", &extra);
    let o = cmd(&dir).args(&a).env("DDL_FAULT_DEVICE_LOST_STEP", "4").output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let steps = |m: &str| -> Vec<u64> {
        m.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v.get("loss").is_some())
            .filter_map(|v| v["step"].as_u64())
            .collect()
    };
    let before = steps(&std::fs::read_to_string(out.join("metrics.jsonl")).unwrap());
    assert_eq!(before, vec![1, 2, 3], "the stopped run logged step 3 after its checkpoint of step 2");
    // A line torn by a crash mid-write (no newline): dropped, not glued onto the next one.
    let m = out.join("metrics.jsonl");
    let mut torn = std::fs::read(&m).unwrap();
    torn.extend_from_slice(b"{\"step\":3,\"loss\":4.1");
    std::fs::write(&m, torn).unwrap();
    let r = cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--steps", "5"]).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
    assert!(!text(&r).contains("note: "), "a torn last line is a crash's, dropped without a word: {}", text(&r));
    let text_after = std::fs::read_to_string(&m).unwrap();
    assert_eq!(steps(&text_after), vec![1, 2, 3, 4, 5]);
    for l in text_after.lines() {
        assert!(serde_json::from_str::<serde_json::Value>(l).is_ok(), "a line that is not JSON: {l}");
    }
    // What the curves lose is said (it was dropped silently): a line in the middle that does not
    // read (an edit), and a metrics.jsonl that is gone, whose curves then start at the checkpoint.
    let mut lines: Vec<String> = text_after.lines().map(String::from).collect();
    lines[1] = "{\"step\": 2, \"loss\": oops".into();
    std::fs::write(&m, lines.join("\n") + "\n").unwrap();
    let r = cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--steps", "6"]).output().unwrap();
    let t = text(&r);
    assert!(r.status.success() && t.contains("metrics.jsonl: dropped 1 line(s)") && t.contains("(line 2)"), "{t}");
    assert_eq!(steps(&std::fs::read_to_string(&m).unwrap()), vec![1, 3, 4, 5, 6]);
    std::fs::remove_file(&m).unwrap();
    let r = cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--steps", "7"]).output().unwrap();
    let t = text(&r);
    assert!(r.status.success() && t.contains("metrics.jsonl is missing") && t.contains("start there"), "{t}");
    assert_eq!(steps(&std::fs::read_to_string(&m).unwrap()), vec![7]);
}

/// A run whose `checkpoints/best/best.json` does not read (damaged, edited) resumes with the
/// best taken from `best/`'s step and the loss metrics.jsonl logged there, said, and the record
/// written again: it went on with no best, so its next evaluation replaced `best/` whatever
/// its loss, silently.
#[test]
fn a_damaged_best_record_is_recovered_from_the_metrics_when_the_run_resumes() {
    let dir = tmpdir("best-record");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let extra = ["--set", "train.checkpoint_every=2", "--set", "train.eval_every=2"];
    let o = cmd(&dir).args(train_args(&c, out.to_str().unwrap(), "4", &extra)).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let record = out.join("checkpoints/best/best.json");
    let read = || -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap() };
    let old = read();
    // `ddl info` says a record that is missing or damaged (it said nothing), and the remedy.
    let info = || {
        let o = cmd(&dir).args(["info", "--checkpoint", out.to_str().unwrap()]).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        text(&o)
    };
    assert!(!info().contains("best.json"), "{}", info());
    std::fs::remove_file(&record).unwrap();
    let t = info();
    assert!(t.contains("best.json is missing") && t.contains("`ddl train --resume"), "{t}");
    std::fs::write(&record, "{\"step\": 4, \"val_lo").unwrap();
    let t = info();
    assert!(t.contains("best.json does not read (") && t.contains("writes it again"), "{t}");
    let r = cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--steps", "5"]).output().unwrap();
    let t = text(&r);
    assert!(r.status.success(), "{t}");
    assert!(t.contains("best.json does not read: the best checkpoint is taken as its step"), "{t}");
    let new = read();
    let (old_loss, new_loss) = (old["val_loss"].as_f64().unwrap(), new["val_loss"].as_f64().unwrap());
    assert!(new == old || (new["step"] == 5 && new_loss < old_loss), "best {old} became {new}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["best"], new, "{summary}");
    assert!(!info().contains("best.json"), "{}", info());
}

/// Ctrl-C during the final evaluation stops it: the run's checkpoint (saved before it) holds
/// the last step, no partial validation row is logged, and the summary says interrupted.
#[test]
fn ctrl_c_during_the_final_evaluation_stops_it_and_keeps_the_last_step() {
    let dir = tmpdir("final-eval");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let a = train_args(&c, out.to_str().unwrap(), "2", &["--set", "train.eval_every=0"]);
    let o = cmd(&dir).args(&a).env("DDL_FAULT_INTERRUPT_FINAL_EVAL", "1").output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    // The message says how the evaluation is made up (it said where the checkpoint was only).
    let made_up =
        format!("the final evaluation was not made: `ddl train --resume {}` makes it up", ddl::shell_word(&out));
    assert!(text(&o).contains(&made_up), "{}", text(&o));
    assert_eq!(ddl::train::checkpoint::load(&out, false).unwrap().step, 2);
    let m = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert!(!m.contains("val_loss"), "a stopped evaluation was logged:\n{m}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["interrupted"], true, "{summary}");
    // Without the interruption the same run ends with its validation row.
    let out2 = dir.join("run2");
    let a = train_args(&c, out2.to_str().unwrap(), "2", &["--set", "train.eval_every=0"]);
    let o = cmd(&dir).args(&a).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let m2 = std::fs::read_to_string(out2.join("metrics.jsonl")).unwrap();
    assert!(m2.contains("val_loss"));
    // Resuming the stopped run at its last step makes up its final evaluation (nothing trained):
    // the same row as the uninterrupted run's, and its summary completed.
    let o = cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--steps", "2"]).output().unwrap();
    let t = text(&o);
    assert!(
        o.status.success() && t.contains("final evaluation, stopped before or missing from metrics.jsonl, is done now"),
        "{t}"
    );
    let full = |m: &str| m.lines().find(|l| l.contains("\"val_full\":true")).map(str::to_string);
    let m = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert_eq!(full(&m), full(&m2), "the made-up evaluation differs from the uninterrupted run's");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["interrupted"], false, "{summary}");
    assert!(summary["val_tokens"].as_u64().is_some_and(|n| n > 0) && summary["train_loss"].is_number(), "{summary}");
    // Once made, a further resume has nothing to do; without --steps a resume continues to the
    // --steps the run was last given (not the default 200), and where that is not recorded says so.
    // A finished run says its results without opening the device (an adapter that does not
    // exist is never asked for) and writes nothing.
    let files = |d: &Path| -> Vec<(String, std::time::SystemTime)> {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().modified().unwrap()))
            .collect();
        v.sort();
        v
    };
    let before = files(&out);
    let o =
        cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--adapter", "no-such-adapter"]).output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("nothing to train: the run finished at step 2 (--steps 2)") && t.contains("validation loss"),
        "{t}"
    );
    assert!(!t.contains("no-such-adapter") && !t.contains("training ddl"), "{t}");
    assert_eq!(files(&out), before, "a finished run's folder changed");
    // So does a data-parallel one (`--distributed mpi`): said before MPI starts and the ranks
    // open their adapters (it opened them first, and an adapter not there was the error); its own
    // flags are checked first.
    let mpi = ["train", "--resume", out.to_str().unwrap(), "--adapter", "no-such-adapter", "--distributed", "mpi"];
    if cfg!(feature = "mpi") {
        let o = cmd(&dir).args(mpi).output().unwrap();
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert!(t.contains("nothing to train: the run finished at step 2 (--steps 2)"), "{t}");
        assert!(!t.contains("no-such-adapter") && !t.contains("rank 0"), "{t}");
        assert_eq!(files(&out), before, "a finished run's folder changed");
        let mut bad = mpi.to_vec();
        bad.extend(["--mpi-timeout", "0"]);
        fails(&dir, &bad, &["--mpi-timeout 0", "expected a number of seconds > 0"]);
    } else {
        fails(&dir, &mpi, &["built without MPI support"]);
    }
    // Below its step, or continued in a copy at its step: said, nothing copied or written.
    let o = cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--steps", "1"]).output().unwrap();
    assert!(o.status.success() && text(&o).contains("the run is at step 2, past --steps 1"), "{}", text(&o));
    let copy = dir.join("copy");
    let o =
        cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--out", copy.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success() && text(&o).contains("nothing was copied"), "{}", text(&o));
    assert!(!copy.exists());
    // --sample: the results, then a sample of the run's model.
    let o = cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--sample", "3"]).output().unwrap();
    assert!(o.status.success() && text(&o).contains("--- sample ---"), "{}", text(&o));
    assert_eq!(files(&out), before, "a finished run's folder changed");
    let o = cmd(&dir).args(["train", "--resume", out.to_str().unwrap()]).output().unwrap();
    assert!(text(&o).contains("nothing to train") && text(&o).contains("(--steps 2)"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(out.join("metrics.jsonl")).unwrap(), m);
    // (The target is the checkpoint's: a summary.json that is gone changes nothing.)
    // (Its results then come from metrics.jsonl's final evaluation, said so.)
    std::fs::remove_file(out.join("summary.json")).unwrap();
    let o = cmd(&dir).args(["train", "--resume", out.to_str().unwrap()]).output().unwrap();
    assert!(text(&o).contains("nothing to train") && text(&o).contains("(--steps 2)"), "{}", text(&o));
    assert!(
        text(&o).contains("metrics.jsonl's final evaluation") && text(&o).contains("validation loss"),
        "{}",
        text(&o)
    );
    // A checkpoint saved before the target was recorded asks for --steps.
    let optim = out.join("optim.safetensors");
    let (t, mut meta) = read_st(&optim);
    let mut state: serde_json::Value = serde_json::from_str(&meta["state"]).unwrap();
    assert_eq!(state["target"], 2, "{state}");
    state.as_object_mut().unwrap().remove("target");
    meta.insert("state".into(), state.to_string());
    write_st(&optim, &t, meta);
    fails(&dir, &["train", "--resume", out.to_str().unwrap()], &["does not record the --steps", "pass --steps N"]);
}

/// A finished run whose metrics.jsonl ends in a torn final-evaluation line while summary.json
/// holds that evaluation (a copy cut short) was "nothing to train" for `--resume`, which kept the
/// torn line, and `ddl plot` sent it to `--resume`: the resume now makes the evaluation again
/// (nothing trained), the same row as before, and the curves have it.
#[test]
fn a_finished_run_whose_metrics_lost_the_final_evaluation_makes_it_again_on_resume() {
    let dir = tmpdir("torn-final-eval");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let a = train_args(&c, out.to_str().unwrap(), "2", &["--set", "train.eval_every=0"]);
    let o = cmd(&dir).args(&a).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let metrics = out.join("metrics.jsonl");
    let whole = std::fs::read_to_string(&metrics).unwrap();
    let summary = |p: &Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p.join("summary.json")).unwrap()).unwrap()
    };
    let before = summary(&out);
    let last = whole.trim_end().lines().last().unwrap();
    assert!(last.contains("\"val_full\":true"), "{whole}");
    // The final row cut in the middle (no newline): the copy's metrics.jsonl.
    std::fs::write(&metrics, &whole[..whole.len() - last.len() / 2 - 1]).unwrap();
    let plot = dir.join("loss.png");
    let o = cmd(&dir).args(["plot", out.to_str().unwrap(), "--out", plot.to_str().unwrap()]).output().unwrap();
    assert!(
        text(&o).contains("its summary.json holds the final one") && text(&o).contains("makes it again"),
        "{}",
        text(&o)
    );
    let o = cmd(&dir).args(["train", "--resume", out.to_str().unwrap()]).output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("lacks the final evaluation of step 2 that summary.json holds") && t.contains("made again"),
        "{t}"
    );
    assert!(t.contains("its final evaluation, stopped before or missing from metrics.jsonl, is done now"), "{t}");
    assert!(!t.contains("nothing to train"), "{t}");
    let again = std::fs::read_to_string(&metrics).unwrap();
    assert_eq!(again, whole, "the made-again evaluation is not the row that was lost");
    let after = summary(&out);
    for key in ["step", "val_loss", "val_tokens", "train_loss", "interrupted"] {
        assert_eq!(after[key], before[key], "summary.json's {key}: {after} against {before}");
    }
    let o = cmd(&dir).args(["plot", out.to_str().unwrap(), "--out", plot.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success() && plot.exists(), "{}", text(&o));
    // Then it is finished as before: nothing to train, nothing written.
    let o = cmd(&dir).args(["train", "--resume", out.to_str().unwrap()]).output().unwrap();
    assert!(text(&o).contains("nothing to train: the run finished at step 2"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&metrics).unwrap(), whole);
}

#[test]
fn running_out_of_memory_is_a_clear_error_with_the_plan_and_keeps_the_last_checkpoint() {
    let dir = tmpdir("oom");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let a = train_args(&c, out.to_str().unwrap(), "6", &["--set", "train.checkpoint_every=1"]);
    // Injected: the driver reports running out of memory during step 3.
    let needles = [
        "step 3",
        "ran out of memory",
        "allocating",
        "memory plan at a batch of 2 × 16 tokens",
        "activations",
        "lower train.batch_size",
        "--f16-state",
        "--recompute",
        "checkpoint of step 2",
        "--resume",
    ];
    fails_under(&dir, ("DDL_FAULT_OOM_STEP", "3"), &a, &needles);
    assert_eq!(ddl::train::checkpoint::load(&out, true).unwrap().step, 2);
    let r = cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--steps", "4"]).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
}

#[test]
fn a_memory_plan_beyond_what_the_adapter_reports_is_refused_before_training_with_a_batch_that_fits() {
    let dir = tmpdir("plan");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    // A CPU adapter's memory is the host's: pretend the host has 1 MB available.
    let a = train_args(&c, out.to_str().unwrap(), "2", &["--set", "train.batch_size=64"]);
    let needles =
        ["memory plan of a batch of 64 × 16 tokens", "1000000 bytes are available", "--set train.batch_size="];
    let t = fails_under(&dir, ("DDL_FAULT_HOST_MEMORY", "1000000"), &a, &needles);
    assert!(t.contains("grad_accum"), "{t}");
    assert!(!out.exists(), "a refused run left {} behind", out.display());
    // The suggested batch trains, with the suggested accumulation, whose global batch is as said.
    let number = |after: &str| -> usize {
        t.split(after).nth(1).unwrap().split(|ch: char| !ch.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    let (b, accum) = (number("--set train.batch_size="), number("--set train.grad_accum="));
    if t.contains("keeps the global batch of 64 sequences") {
        assert_eq!(b * accum, 64, "{t}");
    } else {
        assert!(t.contains(&format!("gives a global batch of {} sequences", b * accum)), "{t}");
    }
    let (set_b, set_a) = (format!("train.batch_size={b}"), format!("train.grad_accum={accum}"));
    let mut a = train_args(&c, out.to_str().unwrap(), "1", &[]);
    a.extend(["--set", &set_b, "--set", &set_a]);
    let o = cmd(&dir).args(&a).env("DDL_FAULT_HOST_MEMORY", "1000000").output().unwrap();
    assert!(o.status.success(), "batch {b} × {accum}: {}", text(&o));

    // `ddl info --preset` says the same of this adapter: over the host's memory, with the batch
    // that fits; a state gradient over one storage binding (bound whole), with the largest
    // batch whose gradient fits one; and that a plan fits.
    let info = |batch: usize, host: &str| {
        let b = batch.to_string();
        let o = cmd(&dir)
            .args(["info", "--preset", "tiny", "--variant", "ddl", "--batch", &b])
            .env("DDL_FAULT_HOST_MEMORY", host)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        text(&o)
    };
    let t = info(64, "150000000");
    assert!(t.contains("does not fit this adapter") && t.contains("--set train.batch_size="), "{t}");
    let binding = ddl::testing::gpu().limits.max_storage_buffer_binding_size;
    let per_seq = 4 * 64 * 128 * 4; // tiny: T 64, d 128, d_v 4, f32
    let over = (binding / per_seq + 1) as usize;
    let t = info(over, "1000000000000000");
    let most = format!("lower train.batch_size to {} or less", binding / per_seq);
    assert!(t.contains("'dxa (the states' gradient)'") && t.contains("bind it whole") && t.contains(&most), "{t}");
    // Half-precision states and recomputing leave that gradient as large: not offered (they were,
    // as "then fits", when the host's memory was short too).
    assert!(!t.contains("--f16-state") && !t.contains("--recompute"), "{t}");
    let t = info(4, "1000000000000000");
    assert!(t.contains("fits this adapter's buffers") && t.contains("largest single buffer"), "{t}");
}

/// A new run in a folder that holds no run but files of the names a run writes (a settings
/// file, a copied summary): refused naming them, nothing replaced, unless --overwrite; what a
/// run that stopped before its first step left (config.toml beside its data.json) is its own.
#[test]
fn a_new_run_never_replaces_files_of_a_folder_that_holds_no_run() {
    let dir = tmpdir("not-a-run");
    let ck = checkpoint(&dir);
    let c = ddl::testing::small_corpus(&dir);
    let mine = dir.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    let settings = "# my settings\n[train]\nlr = 0.002\n";
    std::fs::write(mine.join("config.toml"), settings).unwrap();
    std::fs::write(mine.join("summary.json"), "{\"mine\": true}").unwrap();
    let m = mine.to_str().unwrap();
    let cfg = mine.join("config.toml").display().to_string();
    let e = fails(
        &dir,
        &train_args(&c, m, "1", &["--config", &cfg]),
        &["holds config.toml, summary.json but no run", "--config belongs outside", "--overwrite"],
    );
    assert!(!e.contains("training"), "{e}");
    assert_eq!(std::fs::read_to_string(mine.join("config.toml")).unwrap(), settings);
    assert_eq!(std::fs::read_to_string(mine.join("summary.json")).unwrap(), "{\"mine\": true}");
    assert_eq!(names(&mine), ["config.toml", "summary.json"], "the refused run left files");
    // Continuing a copy into it: refused as a folder not empty (no --overwrite advice, which
    // a copy does not take).
    let e = fails(&dir, &["train", "--resume", ck.to_str().unwrap(), "--out", m, "--steps", "3"], &["not empty"]);
    assert!(!e.contains("--overwrite"), "{e}");
    // --overwrite replaces them.
    let r = cmd(&dir).args(train_args(&c, m, "1", &["--overwrite"])).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
    assert!(!std::fs::read_to_string(mine.join("config.toml")).unwrap().contains("my settings"));
    // Its config.toml and data.json beside kept checkpoints, its own files gone: a run to
    // continue from them, said, not removed.
    for f in ["metrics.jsonl", "model.safetensors", "optim.safetensors", "summary.json", "loss.png"] {
        let _ = std::fs::remove_file(mine.join(f));
    }
    assert!(mine.join("checkpoints").is_dir());
    fails(
        &dir,
        &train_args(&c, m, "1", &[]),
        &["holds a run (data.json, config.toml)", "kept checkpoint", "step-00000001"],
    );
    assert!(mine.join("checkpoints").is_dir(), "the kept checkpoints were removed");
    // A run that stopped before its first step (its config.toml and data.json, no metrics, no
    // checkpoint): a new run takes the folder without --overwrite.
    std::fs::remove_dir_all(mine.join("checkpoints")).unwrap();
    let r = cmd(&dir).args(train_args(&c, m, "1", &[])).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
    assert!(mine.join("metrics.jsonl").exists());
}

#[test]
fn a_run_folder_is_neither_overwritten_nor_shared_by_accident() {
    let dir = tmpdir("claim");
    let ck = checkpoint(&dir);
    let c = ddl::testing::small_corpus(&dir);
    let o = ck.to_str().unwrap();
    let before: Vec<Vec<u8>> =
        ["metrics.jsonl", "model.safetensors"].iter().map(|f| std::fs::read(ck.join(f)).unwrap()).collect();
    // A new run on a folder that holds one: refused, nothing touched.
    let e = fails(&dir, &train_args(&c, o, "1", &[]), &["holds a run", "--resume", "--overwrite", "metrics.jsonl"]);
    assert!(!e.contains("training"), "a refused run said it was training: {e}");
    let after: Vec<Vec<u8>> =
        ["metrics.jsonl", "model.safetensors"].iter().map(|f| std::fs::read(ck.join(f)).unwrap()).collect();
    assert!(before == after, "the refused run changed the folder's files");
    assert!(!ck.join(ddl::train::lock::LOCK_FILE).exists(), "a refused run left its lock behind");
    // --overwrite and --resume contradict each other.
    fails(&dir, &["train", "--resume", o, "--overwrite", "--steps", "3"], &["--overwrite", "--resume"]);
    // A folder another live process trains in (PID 1 always runs on Linux): refused with its
    // PID and host, for a resume as for a new run.
    let lock = ck.join(ddl::train::lock::LOCK_FILE);
    if Path::new("/proc/1").exists() {
        std::fs::write(&lock, format!("1 {}\n", ddl::train::lock::host_name())).unwrap();
        fails(&dir, &["train", "--resume", o, "--steps", "3"], &["in use by process 1 on", ".ddl-lock"]);
        let mut over = train_args(&c, o, "1", &[]);
        over.push("--overwrite");
        fails(&dir, &over, &["in use by process 1 on"]);
        assert_eq!(std::fs::read(ck.join("metrics.jsonl")).unwrap(), before[0], "a locked folder was written");
        std::fs::remove_file(&lock).unwrap();
        // A run still before its first checkpoint: it is training, not stopped (no --overwrite
        // advice).
        let young = dir.join("young");
        std::fs::create_dir_all(&young).unwrap();
        std::fs::write(young.join("metrics.jsonl"), "{\"step\":1,\"loss\":4.0}\n").unwrap();
        std::fs::write(young.join(ddl::train::lock::LOCK_FILE), format!("1 {}\n", ddl::train::lock::host_name()))
            .unwrap();
        let e = fails(&dir, &["train", "--resume", young.to_str().unwrap()], &["training in it now", "process 1"]);
        assert!(!e.contains("--overwrite"), "{e}");
    }
    // A lock left by a process that is gone (kill -9) is taken over.
    std::fs::write(&lock, format!("{} {}\n", u32::MAX - 7, ddl::train::lock::host_name())).unwrap();
    let r = cmd(&dir).args(["train", "--resume", o, "--steps", "3"]).output().unwrap();
    assert!(r.status.success(), "a stale lock stopped the resume:\n{}", text(&r));
    assert!(!lock.exists(), "the run's lock stays after it finished");
    // --overwrite with a new run that cannot start (no such corpus, a corpus too short for one
    // sequence): the old run stays, every file of it.
    let kept: Vec<Vec<u8>> =
        ["metrics.jsonl", "model.safetensors"].iter().map(|f| std::fs::read(ck.join(f)).unwrap()).collect();
    let missing = dir.join("no-such-corpus.txt").display().to_string();
    let mut over = train_args(&missing, o, "1", &[]);
    over.push("--overwrite");
    fails(&dir, &over, &["no-such-corpus.txt"]);
    let short = dir.join("short.txt");
    std::fs::write(&short, "a few words").unwrap();
    let short = short.display().to_string();
    let mut over = train_args(&short, o, "1", &[]);
    over.push("--overwrite");
    fails(&dir, &over, &["short.txt"]);
    let now: Vec<Vec<u8>> =
        ["metrics.jsonl", "model.safetensors"].iter().map(|f| std::fs::read(ck.join(f)).unwrap()).collect();
    assert!(kept == now, "a replacement that failed to start removed the run it would replace");
    // --overwrite replaces the run: a fresh 1-step run, its own metrics only.
    let mut over = train_args(&c, o, "1", &[]);
    over.push("--overwrite");
    let r = cmd(&dir).args(&over).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
    let metrics = std::fs::read_to_string(ck.join("metrics.jsonl")).unwrap();
    assert!(metrics.lines().next().unwrap().contains("\"step\":1"), "{metrics}");
    assert_eq!(metrics.lines().filter(|l| l.contains("\"loss\"")).count(), 1, "{metrics}");
    assert_eq!(ddl::train::checkpoint::load(&ck, false).unwrap().step, 1);
}

/// `--resume` starts from the settings saved in the checkpoint: flags that repeat them pass (no
/// preset defaults compared), flags that change them (precision, f16 states, variant) are refused
/// by name. A kept checkpoint is continued only into a new folder (`--out`), which gets a copy of
/// it and its run's metrics and trains on bit-exactly as the run itself does, leaving the kept
/// one untouched. A run without a checkpoint says so; a flag and a --set or a --config that
/// disagree are refused, and a --config's preset is the one trained.
#[test]
fn resuming_keeps_the_saved_settings_and_continues_kept_checkpoints_in_a_new_folder() {
    let dir = tmpdir("resume");
    let ck = checkpoint(&dir);
    let c = ddl::testing::small_corpus(&dir);
    let o = ck.to_str().unwrap();
    fails(&dir, &["train", "--resume", o, "--steps", "3", "--precision", "f16"], &["train.precision", "\"f32\""]);
    fails(&dir, &["train", "--resume", o, "--steps", "3", "--f16-state"], &["train.state_f16"]);
    fails(&dir, &["train", "--resume", o, "--steps", "3", "--variant", "baseline"], &["model.variant"]);
    fails(&dir, &["train", "--resume", o, "--steps", "3", "--preset", "small-124m"], &["--preset", "tiny"]);
    let kept = ck.join("checkpoints/step-00000002");
    let k = kept.to_str().unwrap();
    let kept_model = std::fs::read(kept.join("model.safetensors")).unwrap();
    fails(&dir, &["train", "--resume", k, "--steps", "3"], &["kept checkpoint", "--out"]);
    // The copy goes into a folder: a file given as --out is said to be one; --set changes are
    // refused for the copy too, saying how settings change (a new run).
    let file = dir.join("a-file-out");
    std::fs::write(&file, "x").unwrap();
    fails(&dir, &["train", "--resume", k, "--out", file.to_str().unwrap(), "--steps", "3"], &["is a file"]);
    let b = dir.join("branch-set").display().to_string();
    let e = fails(&dir, &["train", "--resume", k, "--out", &b, "--set", "train.lr=0.1"], &["train.lr", "new run"]);
    assert!(e.contains("without --resume"), "{e}");
    // However it is spelled: from inside the run's checkpoints/ folder, or as `.` from inside it.
    for (cwd, name) in [(ck.join("checkpoints"), "step-00000002"), (kept.clone(), ".")] {
        let o = cmd(&dir).current_dir(&cwd).args(["train", "--resume", name, "--steps", "3"]).output().unwrap();
        assert!(
            !o.status.success() && text(&o).contains("kept checkpoint"),
            "{name} in {}: {}",
            cwd.display(),
            text(&o)
        );
    }
    // Nor does a new run go into a run's checkpoints/ folder.
    let into = kept.to_str().unwrap();
    fails(&dir, &train_args(&c, into, "1", &["--overwrite"]), &["kept checkpoint", "outside"]);
    assert_eq!(std::fs::read(kept.join("model.safetensors")).unwrap(), kept_model);
    // Nor anything else, at any depth (the run prunes its kept checkpoints with what is in them).
    let deep = |p: &str| kept.join(p).display().to_string();
    let (d1, d2, d3, d4) =
        (deep("mine/run"), ck.join("checkpoints/mine").display().to_string(), deep("dp"), deep("t.json"));
    for args in [
        train_args(&c, &d1, "1", &[]),
        vec!["train", "--resume", o, "--out", &d2, "--steps", "3"],
        vec!["data", "prepare", "--tokenizer", "char", "--out", &d3, &c],
        vec!["tokenizer", "train", "--corpus", &c, "--vocab-size", "300", "--out", &d4],
    ] {
        fails(&dir, &args, &["inside the kept checkpoints", "outside"]);
    }
    assert!(!kept.join("mine").exists() && !ck.join("checkpoints/mine").exists() && !kept.join("dp").exists());
    let branch = dir.join("branch");
    // The source's files read-only (a run kept safe): the copy is the branch's own, writable.
    #[cfg(unix)]
    for e in std::fs::read_dir(&kept).unwrap().flatten().filter(|e| e.path().is_file()) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o444)).unwrap();
    }
    let r =
        cmd(&dir).args(["train", "--resume", k, "--out", branch.to_str().unwrap(), "--steps", "3"]).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode();
        for f in ["model.safetensors", "config.toml", "metrics.jsonl"] {
            assert!(mode(&branch.join(f)) & 0o200 != 0, "{f} of the branch is read-only: {:o}", mode(&branch.join(f)));
        }
        assert_eq!(mode(&kept.join("model.safetensors")) & 0o777, 0o444, "the source's mode changed");
    }
    assert_eq!(std::fs::read(kept.join("model.safetensors")).unwrap(), kept_model, "the kept checkpoint changed");
    // The run itself, resumed with flags that repeat its settings, takes the same step 3.
    let r = cmd(&dir).args(["train", "--resume", o, "--steps", "3", "--set", "train.eval_batches=1"]).output().unwrap();
    assert!(r.status.success(), "flags that repeat the saved settings were refused: {}", text(&r));
    let loss3 = |d: &Path| {
        let m = std::fs::read_to_string(d.join("metrics.jsonl")).unwrap();
        let line = m.lines().find(|l| l.contains("\"step\":3,") && l.contains("\"loss\"")).map(String::from);
        line.unwrap_or_else(|| panic!("no step 3 in {}:\n{m}", d.display()))
    };
    let (a, b) = (loss3(&ck), loss3(&branch));
    let num = |l: &str| l.split("\"loss\":").nth(1).unwrap().split(',').next().unwrap().to_string();
    assert_eq!(num(&a), num(&b), "the branch's step 3 differs from the run's");
    let m = std::fs::read_to_string(branch.join("metrics.jsonl")).unwrap();
    assert!(m.contains("\"step\":1,"), "the branch lacks its run's metrics before the checkpoint:\n{m}");
    // The best checkpoint so far came along: both continued runs mark the same best.
    let best = |d: &Path| std::fs::read_to_string(d.join("checkpoints/best/best.json")).unwrap();
    assert_eq!(best(&ck), best(&branch));
    // A run whose data.json is gone continues, saying its data cannot be checked, and records it anew.
    std::fs::remove_file(branch.join("data.json")).unwrap();
    let r = cmd(&dir).args(["train", "--resume", branch.to_str().unwrap(), "--steps", "4"]).output().unwrap();
    let t = text(&r);
    assert!(r.status.success() && t.contains("data.json is missing") && t.contains("cannot be checked"), "{t}");
    assert!(branch.join("data.json").exists());
    // A copy goes only into a new or empty folder; a failed start removes the copy.
    let bs = branch.to_str().unwrap();
    // (Its remedy is another folder, not --overwrite, which --resume refuses.)
    let e =
        fails(&dir, &["train", "--resume", o, "--out", bs, "--steps", "4"], &["holds a run", "choose another --out"]);
    assert!(!e.contains("--overwrite"), "{e}");
    let gone = dir.join("gone");
    std::fs::write(dir.join("data.json.bak"), std::fs::read(ck.join("data.json")).unwrap()).unwrap();
    std::fs::write(ck.join("data.json"), "{").unwrap();
    fails(
        &dir,
        &["train", "--resume", o, "--out", gone.to_str().unwrap(), "--steps", "4"],
        &["data.json", "malformed"],
    );
    assert!(!gone.exists(), "a copy that could not start was left");
    std::fs::write(ck.join("data.json"), std::fs::read(dir.join("data.json.bak")).unwrap()).unwrap();
    // A folder with metrics and no checkpoint (a run stopped before its first save).
    let early = dir.join("early");
    std::fs::create_dir_all(&early).unwrap();
    std::fs::write(early.join("metrics.jsonl"), "{\"step\":1}\n").unwrap();
    let e = early.to_str().unwrap();
    fails(&dir, &train_args(&c, e, "1", &[]), &["before its first checkpoint", "--overwrite"]);
    fails(&dir, &["train", "--resume", e, "--steps", "2"], &["before its first checkpoint", "--overwrite"]);
    fails(&dir, &["train", "--resume", dir.join("nothere").to_str().unwrap()], &["nothere", "no such folder"]);
    fails(&dir, &["train", "--resume", &c, "--steps", "2"], &["corpus.txt", "a file, not a run folder"]);
    // A flag and a --set (or a --config) of one setting that disagree; a --config's preset.
    let x = dir.join("x");
    let xs = x.to_str().unwrap();
    fails(&dir, &train_args(&c, xs, "1", &["--set", "model.variant=baseline"]), &["--variant", "baseline"]);
    fails(&dir, &train_args(&c, xs, "1", &["--seed", "7", "--set", "train.seed=9"]), &["--seed"]);
    fails(&dir, &train_args(&c, xs, "1", &["--set", "corpus=/elsewhere.txt"]), &["--corpus", "drop one"]);
    fails(&dir, &train_args(&c, xs, "1", &["--set", "preset=small-124m"]), &["--set preset", "--preset NAME"]);
    let cfg = dir.join("preset.toml");
    std::fs::write(&cfg, "preset = \"no-such-preset\"\n").unwrap();
    fails(&dir, &train_args(&c, xs, "1", &["--config", cfg.to_str().unwrap()]), &["no-such-preset"]);
    fails(&dir, &train_args(&c, xs, "1", &["--config", cfg.to_str().unwrap(), "--preset", "tiny"]), &["contradicts"]);
    assert!(!x.exists(), "a refused run left its folder");
}

#[test]
fn first_use_is_quiet_about_the_driver_and_says_when_it_tunes() {
    let dir = tmpdir("firstuse");
    // No runtime directory in the environment: the driver prints nothing about it.
    let o = cmd(&dir).arg("info").env_remove("XDG_RUNTIME_DIR").output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("XDG_RUNTIME_DIR"), "{}", text(&o));
    // A first training run on a fresh cache says once that it tunes the matmul tiles, and where
    // the choices go; --no-autotune does not tune. (`tuning`: the other tests' runs do not.)
    let tuning = |dir: &Path| {
        let mut c = cmd(dir);
        c.env("DDL_NO_AUTOTUNE", "0");
        c
    };
    let c = ddl::testing::small_corpus(&dir);
    let a = dir.join("a");
    let o = tuning(&dir)
        .args(train_args(&c, a.to_str().unwrap(), "1", &["--sample", "4"]))
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(t.matches("tuning matmul tiles").count(), 1, "{t}");
    assert!(t.contains("matmul-autotune.json") && t.contains("--no-autotune"), "{t}");
    // ... and when it is done, with what it took.
    assert_eq!(t.matches("tuned the matmul tiles of ").count(), 1, "{t}");
    assert!(!t.contains("XDG_RUNTIME_DIR"), "{t}");
    // --sample's decode measures no tiles (as `ddl generate`, which never tunes): the cache holds
    // the training's shapes alone, those of the same run without --sample (it held the decode's
    // too, tuned after "--- sample ---").
    let keys = |d: &Path| {
        let j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("cache").join("matmul-autotune.json")).unwrap())
                .unwrap();
        j.as_object().unwrap().keys().cloned().collect::<Vec<_>>()
    };
    let plain = tmpdir("firstuse-nosample");
    let o = tuning(&plain).args(train_args(&c, plain.join("p").to_str().unwrap(), "1", &[])).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let (with, without) = (keys(&dir), keys(&plain));
    let extra: Vec<_> = with.iter().filter(|k| !without.contains(k)).collect();
    assert!(extra.is_empty() && with.len() == without.len(), "--sample tuned {extra:?}");
    let fresh = tmpdir("firstuse-notune");
    let b = fresh.join("b");
    // (The flag wins over DDL_NO_AUTOTUNE=0.)
    let o = tuning(&fresh).args(train_args(&c, b.to_str().unwrap(), "1", &["--no-autotune"])).output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(!t.contains("tuning matmul tiles"), "{t}");
    assert!(!fresh.join("cache").join("matmul-autotune.json").exists(), "--no-autotune measured and cached tiles");
    // The same for every command through the environment.
    let env = tmpdir("firstuse-notune-env");
    let e = env.join("e");
    let o = cmd(&env).args(train_args(&c, e.to_str().unwrap(), "1", &[])).env("DDL_NO_AUTOTUNE", "1").output().unwrap();
    let t = text(&o);
    assert!(o.status.success() && !t.contains("tuning matmul tiles"), "{t}");
    assert!(!env.join("cache").join("matmul-autotune.json").exists(), "DDL_NO_AUTOTUNE=1 measured and cached tiles");
    // Measurements that cannot be cached are said so (the run goes on); an unreadable cache is
    // noted and replaced.
    let ro = tmpdir("firstuse-unwritable");
    std::fs::create_dir_all(ro.join("cache").join("matmul-autotune.json")).unwrap();
    let o = tuning(&ro).args(train_args(&c, ro.join("r").to_str().unwrap(), "1", &[])).output().unwrap();
    let t = text(&o);
    assert!(o.status.success() && t.contains("cannot write the matmul tile measurements"), "{t}");
    // ... and the line that ends the tuning does not promise that later runs reuse them.
    assert!(t.contains("not kept (the warning above says why)") && !t.contains("later runs on this adapter"), "{t}");
    let bad = tmpdir("firstuse-garbage");
    std::fs::create_dir_all(bad.join("cache")).unwrap();
    std::fs::write(bad.join("cache").join("matmul-autotune.json"), "{garbage").unwrap();
    let o = tuning(&bad).args(train_args(&c, bad.join("r").to_str().unwrap(), "1", &[])).output().unwrap();
    let t = text(&o);
    assert!(o.status.success() && t.contains("do not read") && t.contains("they replace it"), "{t}");
    let cached = std::fs::read_to_string(bad.join("cache").join("matmul-autotune.json")).unwrap();
    assert!(serde_json::from_str::<serde_json::Value>(&cached).is_ok(), "{cached}");
}

#[test]
fn the_setup_script_refuses_a_rust_older_than_the_crate_needs_and_says_how_to_update() {
    let dir = tmpdir("setup-rust");
    let setup = ddl::testing::data_path("scripts/setup.sh");
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let run = |version: &str| {
        let fake = dir.join("rustc");
        std::fs::write(&fake, format!("#!/bin/sh\necho \"rustc {version} (0000000 2020-01-01)\"\n")).unwrap();
        std::process::Command::new("chmod").arg("755").arg(&fake).status().unwrap();
        Command::new("bash").arg(&setup).env("PATH", &path).env("DDL_SETUP_ONLY", "rust").output().unwrap()
    };
    let old = run("1.80.1");
    let t = text(&old);
    assert!(!old.status.success(), "{t}");
    assert!(t.contains("Rust 1.80.1 is installed") && t.contains("rustup update stable"), "{t}");
    let need = std::fs::read_to_string(ddl::testing::data_path("Cargo.toml")).unwrap();
    let need = need.lines().find_map(|l| l.strip_prefix("rust-version = ")).unwrap().trim_matches('"').to_string();
    assert!(t.contains(&format!("needs Rust {need} or newer")), "{t}");
    let new = run("99.0.0");
    assert!(new.status.success(), "{}", text(&new));
}

/// docs/HOUSE.md's scripts say why they stop: a binary that is a folder, a PAIRS that is not a
/// count, and a ddl command that fails (its own message shown). They stopped with no word (a
/// failing `ddl train` in house-digests.sh), ran a folder, or printed a ratio of 0 over "1
/// pairs" and exited 0.
#[test]
fn the_house_scripts_name_a_bad_binary_a_bad_count_and_a_failing_command() {
    let dir = tmpdir("house-scripts");
    let ddl = env!("CARGO_BIN_EXE_ddl");
    let script = |name: &str, args: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new("bash");
        c.arg(ddl::testing::data_path(&format!("scripts/{name}"))).args(args).current_dir(&dir);
        c.env("DDL_CACHE_DIR", dir.join("cache")).env("XDG_RUNTIME_DIR", &dir);
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        assert!(!o.status.success(), "{name} {args:?} succeeded: {}", text(&o));
        text(&o)
    };
    let folder = dir.display().to_string();
    let t = script("ab-train.sh", &[&folder, &folder, "tiny"], &[]);
    assert!(t.contains(&format!("ab-train: {folder} is not an executable file")), "{t}");
    let t = script("ab-train.sh", &[ddl, ddl, "tiny", "0"], &[]);
    assert!(t.contains("PAIRS '0': expected a whole number ≥ 1"), "{t}");
    let t = script("ab-train.sh", &[ddl, ddl, "no-such-preset", "2"], &[]);
    assert!(t.contains("gave no step time") && t.contains("unknown preset 'no-such-preset'"), "{t}");
    let t = script("house-digests.sh", &[&folder], &[]);
    assert!(t.contains(&format!("house-digests: {folder} is not an executable file")), "{t}");
    let t = script("house-digests.sh", &[ddl], &[("VARIANTS", "no_such_variant")]);
    assert!(t.contains("train --preset tiny --variant no_such_variant") && t.contains("failed:"), "{t}");
    assert!(t.contains("unknown variant 'no_such_variant'"), "{t}");
}

/// `scripts/setup.sh --help` prints its usage (the targets and the settings) and installs
/// nothing; a flag it does not take, as `--dry-run`, is refused with the variable that does it.
#[test]
fn the_setup_script_answers_help_and_points_a_wrong_flag_to_its_settings() {
    let setup = ddl::testing::data_path("scripts/setup.sh");
    let o = Command::new("bash").arg(&setup).arg("--help").env("DDL_SETUP_DRY_RUN", "1").output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for want in ["scripts/setup.sh demo", "scripts/setup.sh test", "DDL_SETUP_DRY_RUN=1", "DDL_SETUP_MPI=0"] {
        assert!(t.contains(want), "--help lacks {want}: {t}");
    }
    assert!(!t.contains("setup: ") && !t.contains("set -euo"), "{t}");
    let o = Command::new("bash").arg(&setup).arg("--dry-run").output().unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("unknown target '--dry-run'") && t.contains("DDL_SETUP_DRY_RUN=1") && t.contains("--help"),
        "{t}"
    );
}

/// `scripts/web.sh` says why it stops on stderr, nothing on stdout (it printed its errors to
/// stdout, where a caller reads the site's path).
#[test]
fn the_web_script_says_its_errors_on_stderr() {
    let script = ddl::testing::data_path("scripts/web.sh");
    let o = Command::new("bash").arg(&script).env("DDL_WEB_PROFILE", "fast").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(o.stdout.is_empty() && err.contains("DDL_WEB_PROFILE=fast: expected web"), "{}", text(&o));
}

/// The GPU check's `run.sh` refuses a flag given without its value, naming what it takes (it
/// stopped on bash's "$2: unbound variable"), and, run from `scripts/gpu-check/` instead of a
/// bundle, says to build the bundle (it stopped on xz's "bin/*.xz: No such file"); a
/// GRID_RUNS or GRID_PARTIAL that is no folder, or a GRID_JOBS that is no count, is refused
/// before anything runs.
#[test]
fn the_gpu_check_script_names_a_flag_without_its_value_and_runs_only_from_a_bundle() {
    let script = ddl::testing::data_path("scripts/gpu-check/run.sh");
    let run = |args: &[&str]| Command::new("bash").arg(&script).args(args).output().unwrap();
    for (flag, want) in [("--budget", "a number of seconds"), ("--stages", "info, golden"), ("--forms", "DDL_FORMS")] {
        let o = run(&["--local", flag]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{t}");
        assert!(t.contains(&format!("run.sh: {flag} needs a value")) && t.contains(want), "{t}");
        assert!(!t.contains("unbound variable"), "{t}");
    }
    // The experiment stage's folders and job count, before anything runs (a misnamed GRID_RUNS
    // trained the grid from step 0 and passed).
    for (var, value, want) in [
        ("GRID_RUNS", "/no/such/grid-runs", "GRID_RUNS=/no/such/grid-runs: no such folder"),
        ("GRID_PARTIAL", "/no/such/grid-partial", "e.g. GRID_PARTIAL=gpu-bundle/grid/grid-partial"),
        ("GRID_JOBS", "eight", "GRID_JOBS=eight is not a number of runs"),
    ] {
        let o = Command::new("bash")
            .arg(&script)
            .args(["--local", "--stages", "info,experiment"])
            .env(var, value)
            .output()
            .unwrap();
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{t}");
        assert!(t.contains(want), "{t}");
    }
    let out = tmpdir("gpu-check-outside-a-bundle");
    let o = run(&["--local", "--stages", "info", "--out", out.join("o").to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("no bin/ddl.xz beside this script") && t.contains("make gpu-bundle"), "{t}");
    assert!(!out.join("o").exists(), "nothing is written before the refusal");
}

/// The calls docs/GPU.md's "Next run" prepares for the next session with a device name only
/// commands and stages `run.sh` has (a command renamed or dropped since would cost a device
/// call that runs the info stage alone): each call's `--stages` and `--only` pass the script's
/// own check, which comes before it looks for the bundle.
#[test]
fn the_next_gpu_runs_calls_name_commands_the_check_has() {
    let doc = std::fs::read_to_string(ddl::testing::data_path("docs/GPU.md")).unwrap();
    let start = doc.find("### Next run").expect("docs/GPU.md has its \"Next run\"");
    let section = &doc[start..];
    let section = &section[..section[4..].find("\n##").map_or(section.len(), |i| i + 4)];
    let script = ddl::testing::data_path("scripts/gpu-check/run.sh");
    let out = tmpdir("gpu-next-run");
    let mut calls = 0;
    for line in section.lines().filter(|l| l.contains("gpu-bundle/run.sh")) {
        let value = |flag: &str| -> Option<String> {
            let rest = &line[line.find(&format!("{flag} "))? + flag.len() + 1..];
            Some(match rest.strip_prefix('\'') {
                Some(q) => q[..q.find('\'').unwrap()].to_string(),
                None => rest.split_whitespace().next().unwrap().to_string(),
            })
        };
        let mut args = vec!["--local".to_string(), "--out".into(), out.join("o").display().to_string()];
        for flag in ["--stages", "--only"] {
            if let Some(v) = value(flag) {
                args.extend([flag.to_string(), v]);
            }
        }
        let o = Command::new("bash").arg(&script).args(&args).output().unwrap();
        let t = text(&o);
        assert!(t.contains("no bin/ddl.xz beside this script"), "docs/GPU.md \"Next run\": {line}\n{t}");
        calls += 1;
    }
    assert!(calls >= 2, "{calls} calls found in docs/GPU.md's \"Next run\"");
}

/// The scripts that read a GPU check's results (docs/GPU.md) answer a missing file or one that is
/// no archive with its name and what they expect, in one line, never a traceback (roofline.py and
/// step_budget.py raised FileNotFoundError; a README given for an archive got tarfile's line per
/// compression it tried); verdicts.py names an option it does not take and a run it has no
/// predictions for.
#[test]
fn the_gpu_results_scripts_name_a_file_that_is_not_a_results_archive() {
    let readme = ddl::testing::data_path("README.md");
    for script in ["verdicts.py", "roofline.py", "step_budget.py", "state_split.py", "products.py"] {
        let path = ddl::testing::data_path(&format!("scripts/gpu-check/{script}"));
        for (arg, why) in [("/no/such/results.tar.gz", "No such file"), (readme.to_str().unwrap(), "not a tar archive")]
        {
            let o = Command::new("python3").arg(&path).arg(arg).output().expect("running python3");
            let t = text(&o);
            assert!(!o.status.success(), "{script} {arg}: {t}");
            assert!(!t.contains("Traceback") && !t.contains("- method"), "{script} {arg}: {t}");
            assert!(
                t.contains(&format!("{script}: cannot read {arg}: "))
                    && t.contains(why)
                    && t.contains("results*.tar.gz"),
                "{script} {arg}: {t}"
            );
        }
    }
    // verdicts.py: a misspelt option was dropped without a word, and a run without predictions
    // printed an empty table ("0 of 0 predictions of run 9 shown").
    let verdicts = ddl::testing::data_path("scripts/gpu-check/verdicts.py");
    let results = ddl::testing::data_path("docs/gpu-runs/2026-11-28-h200-d/results-1.tar.gz");
    for (flags, want) in [
        (&["--al"][..], "verdicts.py: unknown option '--al' (expected --run N, --all"),
        (
            &["--run", "9"][..],
            "verdicts.py: --run 9: no prediction of this page is for run 9 (runs with predictions: 4,",
        ),
    ] {
        let o = Command::new("python3").arg(&verdicts).arg(&results).args(flags).output().expect("running python3");
        let t = text(&o);
        assert!(!o.status.success() && t.contains(want) && !t.contains("Traceback"), "{flags:?}: {t}");
    }
    let o = Command::new("python3").arg(&verdicts).arg(&results).args(["--run", "4"]).output().unwrap();
    assert!(o.status.success() && text(&o).contains("predictions of run 4 shown"), "{}", text(&o));
}

/// The GPU check's summary of a `--only` selection on lavapipe (a bundle of this build's `ddl`
/// and run.sh): the bench stage's row says every selected command ran (it listed
/// "bench-gpu-args: not selected;" as the stage's only detail, and that under Numbers), and the
/// generate line ends with its numbers (it ended in "; "), the info row's plan without ddl
/// info's indent.
#[test]
fn the_gpu_check_summary_leaves_out_what_only_did_not_select() {
    let dir = tmpdir("gpu-check-summary");
    let bundle = dir.join("bundle");
    std::fs::create_dir_all(bundle.join("bin")).unwrap();
    std::fs::copy(ddl::testing::data_path("scripts/gpu-check/run.sh"), bundle.join("run.sh")).unwrap();
    let xz = Command::new("xz")
        .args(["-0", "-c", env!("CARGO_BIN_EXE_ddl")])
        .stdout(std::fs::File::create(bundle.join("bin/ddl.xz")).unwrap())
        .status()
        .expect("running xz (scripts/setup.sh bundle installs it)");
    assert!(xz.success());
    let out = dir.join("out");
    let o = Command::new("bash")
        .arg(bundle.join("run.sh"))
        .args(["--local", "--stages", "info,bench", "--only", "bench-copy,bench-generate", "--out"])
        .arg(&out)
        .current_dir(ddl::testing::data_root())
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap_or_default();
    assert!(o.status.success(), "{}\n{summary}", text(&o));
    assert!(summary.contains(" | every command selected ran; numbers below |"), "{summary}");
    assert!(!summary.contains("bench-gpu-args") && !summary.contains("not selected"), "{summary}");
    // (The plan's total was written "plan:  total": ddl info's indent kept.)
    assert!(summary.contains("; plan: total "), "{summary}");
    let generate = summary.lines().find(|l| l.starts_with("- generate: context 8: ")).unwrap_or_default();
    assert!(generate.ends_with(" recomputed"), "{summary}");
}

#[test]
fn training_and_evaluation_work_from_any_directory() {
    let dir = tmpdir("anywhere");
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    // The default corpus without the repository in the current directory: the binary's copy.
    let a = dir.join("a");
    let mut args = vec!["train", "--variant", "ddl", "--out", a.to_str().unwrap(), "--steps", "1"];
    args.extend_from_slice(SMALL);
    let o = cmd(&dir).args(&args).current_dir(&elsewhere).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let cfg = std::fs::read_to_string(a.join("config.toml")).unwrap();
    assert!(cfg.contains("corpus = \"assets/tinyshakespeare.txt\""), "{cfg}");
    // A corpus named relative to the current directory is stored absolute, so the run is
    // evaluated (and resumed) from another directory.
    let c = ddl::testing::small_corpus(&dir);
    std::fs::copy(&c, dir.join("mine.txt")).unwrap();
    let b = dir.join("b");
    let mut args = vec!["train", "--variant", "ddl", "--corpus", "mine.txt", "--out", b.to_str().unwrap()];
    args.extend_from_slice(&["--steps", "1"]);
    args.extend_from_slice(SMALL);
    let o = cmd(&dir).args(&args).current_dir(&dir).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let cfg = std::fs::read_to_string(b.join("config.toml")).unwrap();
    let want = std::fs::canonicalize(dir.join("mine.txt")).unwrap();
    assert!(cfg.contains(&format!("corpus = \"{}\"", want.display())), "{cfg}");
    let o = cmd(&dir).args(["eval", "--checkpoint", b.to_str().unwrap()]).current_dir(&elsewhere).output().unwrap();
    assert!(o.status.success() && text(&o).contains("validation loss"), "{}", text(&o));
    // Resuming with the same relative flag from its directory is not a change of settings.
    let mut args = vec!["train", "--resume", b.to_str().unwrap(), "--corpus", "mine.txt", "--steps", "2"];
    args.extend_from_slice(SMALL);
    let o = cmd(&dir).args(&args).current_dir(&dir).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

/// `scripts/setup.sh TARGET` installs per target and platform only what is missing (the table of
/// docs/SETUP.md), checked in its dry-run mode with tools pretended missing.
#[test]
fn the_setup_script_installs_per_target_and_platform_only_what_is_missing() {
    let setup = ddl::testing::data_path("scripts/setup.sh");
    let run = |target: &str, missing: &str, os: Option<&str>| {
        let mut c = Command::new("bash");
        c.arg(&setup).arg(target).env("DDL_SETUP_DRY_RUN", "1").env("DDL_SETUP_PRETEND_MISSING", missing);
        c.env_remove("DDL_SETUP_MPI").env_remove("DDL_SETUP_XVFB").env_remove("DDL_SETUP_WASM");
        c.env_remove("DDL_SETUP_PLATFORMS");
        if let Some(os) = os {
            c.env("DDL_SETUP_OS", os);
        }
        let o = c.output().unwrap();
        let t = text(&o);
        assert!(o.status.success(), "setup.sh {target}: {t}");
        t
    };
    let whole = run;
    let run = |target: &str, missing: &str, os: Option<&str>| {
        whole(target, missing, os).lines().last().unwrap_or("").to_string()
    };
    let all = "vulkan,xvfb,mpi,xz,binutils";
    let vk = "mesa-vulkan-drivers libvulkan1";
    let has_apt = Command::new("sh").args(["-c", "command -v apt-get"]).output().unwrap().status.success();
    if has_apt {
        assert!(run("demo", all, None).ends_with(&format!("would install: {vk}")), "{}", run("demo", all, None));
        assert!(run("bundle", all, None).ends_with(&format!("would install: {vk} xz-utils binutils")));
        let t = run("test", all, None);
        let chromium = if Path::new("/usr/bin/chromium").exists() { "" } else { " chromium" };
        assert!(
            t.ends_with(&format!(
                "would install: {vk} xz-utils binutils xvfb libopenmpi-dev openmpi-bin libclang-dev{chromium}"
            )),
            "{t}"
        );
        // Chromium for the browser test: `test` only.
        assert!(run("test", "chromium", None).ends_with("chromium"));
        assert!(!run("bundle", "chromium", None).contains("chromium"));
        // Only what is missing: a machine with a driver gets no driver for the demo.
        assert!(run("demo", "xvfb,mpi", None).ends_with("would install: nothing"));
        assert!(run("test", "mpi", None).contains("libopenmpi-dev") && !run("test", "mpi", None).contains(vk));
    }
    // The browser build's Rust target: for `test` only, and only when it is missing.
    let wasm = "would add the Rust target wasm32-unknown-unknown";
    assert!(whole("test", "wasm", None).contains(wasm), "{}", whole("test", "wasm", None));
    assert!(!whole("bundle", "wasm", None).contains(wasm));
    let has_wasm = Command::new("sh")
        .args(["-c", "rustup target list --installed | grep -q wasm32-unknown-unknown"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_wasm {
        assert!(!whole("test", "", None).contains(wasm));
    }
    // The Windows and macOS compile check's Rust targets: likewise.
    let platforms = "would add the Rust targets x86_64-pc-windows-msvc aarch64-apple-darwin";
    assert!(whole("test", "platforms", None).contains(platforms), "{}", whole("test", "platforms", None));
    assert!(!whole("bundle", "platforms", None).contains("windows"));
    let has_platforms = Command::new("sh")
        .args(["-c", "t=$(rustup target list --installed) && echo \"$t\" | grep -q windows-msvc && echo \"$t\" | grep -q aarch64-apple-darwin"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_platforms {
        assert!(!whole("test", "", None).contains("windows"));
    }
    for target in ["demo", "bundle", "test"] {
        let t = run(target, all, Some("Darwin"));
        assert!(t.contains("nothing to install"), "{target} on macOS: {t}");
    }
    let o = Command::new("bash").arg(&setup).arg("everything").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("expected demo, bundle or test"));
}

#[test]
fn checkpoints_keep_the_newest_n_and_the_best_by_validation_loss_as_run_folders() {
    let dir = tmpdir("keep");
    let c = ddl::testing::small_corpus(&dir);
    let out = dir.join("run");
    let every = ["--set", "train.checkpoint_every=1", "--set", "train.eval_every=1", "--set", "train.lr=0.02"];
    let o = cmd(&dir).args(train_args(&c, out.to_str().unwrap(), "5", &every)).output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let kept = out.join("checkpoints");
    // The newest two (default train.checkpoint_keep = 2), each a run folder of its own.
    assert_eq!(names(&kept), ["best", "step-00000004", "step-00000005"], "{t}");
    for (s, name) in [(4, "step-00000004"), (5, "step-00000005")] {
        let k = kept.join(name);
        assert_eq!(names(&k), ["config.toml", "data.json", "model.safetensors", "optim.safetensors"]);
        assert_eq!(ddl::train::checkpoint::load(&k, true).unwrap().step, s);
        let e = cmd(&dir).args(["eval", "--checkpoint", k.to_str().unwrap()]).output().unwrap();
        assert!(e.status.success() && text(&e).contains("validation loss"), "{}", text(&e));
    }
    // The newest is the run folder's own files, linked, not copied (the same inode where that
    // can be asked; the same bytes everywhere).
    for f in ["model.safetensors", "optim.safetensors"] {
        let (a, b) = (out.join(f), kept.join("step-00000005").join(f));
        assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(), "{f} differs from the run folder's");
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let (a, b) = (std::fs::metadata(a).unwrap(), std::fs::metadata(b).unwrap());
            assert_eq!(a.ino(), b.ino(), "{f} is not a hard link of the run folder's file");
        }
    }
    // The best: the lowest of the validation losses over the subset every evaluation covers
    // (the periodic rows of metrics.jsonl, steps 1-4; the final evaluation's subset is its first
    // batch, the same windows).
    let best: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(kept.join("best/best.json")).unwrap()).unwrap();
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| r.get("val_loss").is_some() && r["val_full"] == false)
        .collect();
    assert_eq!(rows.len(), 4, "periodic evaluations at steps 1-4");
    let min = rows.iter().map(|r| r["val_loss"].as_f64().unwrap()).fold(f64::INFINITY, f64::min);
    let bl = best["val_loss"].as_f64().unwrap();
    assert!(bl <= min + 1e-12, "best {bl} vs the lowest periodic loss {min}");
    let bs = best["step"].as_u64().unwrap() as usize;
    if bs < 5 {
        let row = rows.iter().find(|r| r["step"] == bs).unwrap();
        assert_eq!(row["val_loss"].as_f64().unwrap(), bl);
    }
    assert_eq!(ddl::train::checkpoint::load(&kept.join("best"), false).unwrap().step, bs);
    assert!(t.contains(&format!("best checkpoint: step {bs}")), "{t}");
    // `ddl info --checkpoint`: what the run, a kept checkpoint and the best hold, from their
    // files (no device).
    let info = |p: &Path, json: bool| {
        let mut c = cmd(&dir);
        c.args(["info", "--checkpoint"]).arg(p);
        if json {
            c.arg("--json");
        }
        c.output().unwrap()
    };
    let o = info(&out, false);
    let it = text(&o);
    assert!(o.status.success(), "{it}");
    for want in [
        ": a run folder, its checkpoint at step 5".to_string(),
        "model: ddl, V ".into(),
        " d 32 L 1 H 2 h 16 F 85 d_v 4".into(),
        "tokenizer: char".into(),
        // (B 2 × T 16: 32 tokens a step.)
        "trained: 5 steps, 160 tokens (32 a step)".into(),
        "settings: B 2 × T 16, lr 0.02".into(),
        "training memory plan: ".into(),
        // The command that explains the plan: this run's shape, batch and length.
        "(`ddl info --preset tiny --variant ddl --set model.d_model=32 ".into(),
        " --batch 2 --seq 16` explains it)".into(),
        "data: --corpus ".into(),
        "losses at this step: train ".into(),
        format!("best: step {bs}, validation loss {bl:.4}"),
        "kept checkpoints at steps 4, 5".into(),
        "files: model.safetensors ".into(),
    ] {
        assert!(it.contains(&want), "{want:?} not in:\n{it}");
    }
    // Losses logged as null (a diverged or skipped step): said so (the line was left empty).
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    let mut nulled: serde_json::Value = serde_json::from_str(&summary).unwrap();
    (nulled["train_loss"], nulled["val_loss"]) = (serde_json::Value::Null, serde_json::Value::Null);
    std::fs::write(out.join("summary.json"), nulled.to_string()).unwrap();
    let it = text(&info(&out, false));
    assert!(it.contains("losses at this step: none that is a finite number"), "{it}");
    std::fs::write(out.join("summary.json"), summary).unwrap();
    let o = info(&kept.join("step-00000004"), false);
    let it = text(&o);
    assert!(o.status.success() && it.contains(": a kept checkpoint of the run ") && it.contains("step 4"), "{it}");
    assert!(it.contains("trained: 4 steps, 128 tokens") && !it.contains("losses at this step"), "{it}");
    let o = info(&kept.join("best"), false);
    let it = text(&o);
    assert!(o.status.success() && it.contains(&format!(": the best checkpoint of the run {}", out.display())), "{it}");
    let o = info(&out, true);
    assert!(o.status.success(), "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (j["kind"].as_str(), j["step"].as_u64(), j["tokens_per_step"].as_u64()),
        (Some("run"), Some(5), Some(32))
    );
    assert_eq!(j["kept"], serde_json::json!([4, 5]));
    assert_eq!(j["best"]["step"].as_u64(), Some(bs as u64));
    assert_eq!(j["model"]["d_model"].as_u64(), Some(32));
    let cfg = ddl::train::checkpoint::saved_config(&out).unwrap();
    assert_eq!(j["parameters"].as_u64(), Some(ddl::model::params::Layout::new(&cfg).count() as u64));
    // A model-only checkpoint (no moments) says what it is good for; a missing folder is named.
    let only = dir.join("model-only");
    std::fs::create_dir_all(&only).unwrap();
    std::fs::copy(out.join("model.safetensors"), only.join("model.safetensors")).unwrap();
    let o = info(&only, false);
    let it = text(&o);
    assert!(o.status.success() && it.contains("no moments file") && it.contains("--init-from"), "{it}");
    let o = info(&dir.join("nowhere"), false);
    assert!(!o.status.success() && text(&o).contains("nowhere"), "{}", text(&o));
    // Resumed, the run goes on keeping the newest two; train.checkpoint_keep=0 keeps none.
    let r = cmd(&dir).args(["train", "--resume", out.to_str().unwrap(), "--steps", "6"]).output().unwrap();
    assert!(r.status.success(), "{}", text(&r));
    assert_eq!(names(&kept), ["best", "step-00000005", "step-00000006"]);
    // The run's checkpoint damaged in place (so its kept link step-6 too): --resume names the
    // newest kept checkpoint that reads, and the branch it advises continues.
    let model = out.join("model.safetensors");
    let len = std::fs::metadata(&model).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&model).unwrap().set_len(len / 2).unwrap();
    let resume = ["train", "--resume", out.to_str().unwrap(), "--steps", "7"];
    let e = fails(&dir, &resume, &["step-00000005", "--out NEW"]);
    assert!(!e.contains("step-00000006") || cfg!(not(unix)), "{e}");
    // Generation and evaluation of it name the kept checkpoint that reads, as --checkpoint.
    let o = out.to_str().unwrap();
    let give = "step-00000005 (step 5) reads: give --checkpoint";
    fails(
        &dir,
        &["generate", "--checkpoint", o, "--prompt", "To", "--max-tokens", "2"],
        &["truncated or corrupt", give],
    );
    fails(&dir, &["eval", "--checkpoint", o, "--text", &c], &["model.safetensors", give]);
    // A new run into it is not told to resume it (which fails) but where it can continue.
    let e = fails(
        &dir,
        &train_args(&c, out.to_str().unwrap(), "2", &[]),
        &["does not read", "step-00000005", "--overwrite"],
    );
    assert!(!e.contains("continues it"), "{e}");
    // Gone: not "stopped before its first checkpoint", and no advice to --overwrite it away.
    std::fs::remove_file(&model).unwrap();
    let e = fails(&dir, &resume, &["no model.safetensors", "step-00000005 (step 5)", "--out NEW"]);
    assert!(!e.contains("first checkpoint") && !e.contains("start it again"), "{e}");
    fails(
        &dir,
        &["generate", "--checkpoint", o, "--prompt", "To", "--max-tokens", "2"],
        &["the file is missing", give],
    );
    fails(&dir, &train_args(&c, out.to_str().unwrap(), "2", &[]), &["is gone", "step-00000005", "kept checkpoints"]);
    let branch = dir.join("branch");
    let k5 = kept.join("step-00000005");
    let r = cmd(&dir)
        .args(["train", "--resume", k5.to_str().unwrap(), "--out", branch.to_str().unwrap(), "--steps", "6"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", text(&r));
    assert_eq!(ddl::train::checkpoint::load(&branch, false).unwrap().step, 6);
    // Its moments file gone, the model intact: the kept checkpoint of the same step (sharing the
    // model, with its own moments) continues it; --init-from is the other way.
    std::fs::remove_file(branch.join("optim.safetensors")).unwrap();
    let e = fails(
        &dir,
        &["train", "--resume", branch.to_str().unwrap(), "--steps", "7"],
        &["no optim.safetensors", "step-00000006 (step 6) reads", "--init-from"],
    );
    assert!(!e.contains("model-only"), "{e}");
    let out0 = dir.join("run0");
    let none = ["--set", "train.checkpoint_every=1", "--set", "train.checkpoint_keep=0"];
    let o = cmd(&dir).args(train_args(&c, out0.to_str().unwrap(), "2", &none)).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(names(&out0.join("checkpoints")), ["best"]);
}

#[test]
fn interventions_through_the_cli_generate_record_their_spec_and_refuse_bad_ones() {
    let dir = tmpdir("intervene");
    let ck = checkpoint(&dir); // a ddl model of one block
    let run = |extra: &[&str]| {
        let mut a = gen_args(&ck);
        a.extend(["--seed", "5"].map(String::from));
        a.extend(extra.iter().map(|s| s.to_string()));
        cmd(&dir).args(&a).output().unwrap()
    };
    let trace = dir.join("iv.safetensors");
    let o =
        run(&["--intervene", "block0.mlp:beta=0", "--intervene", "all:beta<=1", "--trace", trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trace.with_extension("json")).unwrap()).unwrap();
    assert_eq!(summary["interventions"], "block0.mlp:beta=0; all:beta<=1");
    // How the text was made, so that it can be made again: the prompt and the sampling settings.
    assert_eq!(summary["prompt"], "To be");
    assert_eq!(summary["sampling"]["seed"], 5);
    assert_eq!(summary["sampling"]["temperature"], 0.8, "{}", summary["sampling"]);
    for tk in summary["tokens"].as_array().unwrap() {
        let b = tk["beta"].as_array().unwrap();
        assert!(b[0].as_f64().unwrap() <= 1.0 && b[1].as_f64().unwrap() == 0.0, "{tk}");
    }
    let (_, meta) = read_st(&trace);
    assert_eq!(meta["interventions"], "block0.mlp:beta=0; all:beta<=1");
    assert_eq!(meta["prompt"], "To be");
    assert!(meta["sampling"].contains("\"seed\":5"), "{}", meta["sampling"]);
    assert_eq!((summary["allow_out_of_range"].as_bool(), meta.get("allow_out_of_range")), (Some(false), None));
    // β allowed out of range: recorded in both files, and the βs passed 2.
    let o = run(&["--intervene", "all:beta*=3", "--allow-out-of-range", "--trace", trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trace.with_extension("json")).unwrap()).unwrap();
    assert_eq!(summary["allow_out_of_range"], true);
    assert_eq!(read_st(&trace).1["allow_out_of_range"], "true");
    let top = summary["tokens"].as_array().unwrap().iter().flat_map(|t| t["beta"].as_array().unwrap().clone());
    assert!(top.filter_map(|b| b.as_f64()).fold(0.0, f64::max) > 2.0, "{summary}");
    // A β past 2 amplifies along k (λ = 1−β < −1): flagged outside [0, 2] and counted apart, its
    // threshold label kept in `regime` for the summary's readers.
    let mut outside = 0;
    for tk in summary["tokens"].as_array().unwrap() {
        for (s, b) in tk["beta"].as_array().unwrap().iter().enumerate() {
            let b = b.as_f64().unwrap();
            let flagged = tk["outside_range"][s].as_bool().unwrap_or_else(|| panic!("no outside_range in {tk}"));
            assert_eq!(flagged, !(0.0..=2.0).contains(&b), "{tk}");
            outside += flagged as u64;
            if b > 2.0 {
                assert_eq!(tk["regime"][s], "reflection", "{tk}");
            }
        }
    }
    let counted: u64 =
        summary["regime_counts"].as_array().unwrap().iter().map(|c| c["outside"].as_u64().unwrap()).sum();
    assert!(outside > 0 && counted == outside, "{outside} flagged, {counted} counted: {summary}");
    assert!(summary["regime_thresholds"]["outside"].as_str().unwrap().contains("beta > 2"), "{summary}");
    // The write's terms: the trace holds the write as done (v = 0 written; kᵀX = 0 erased).
    for (spec, array) in [("block0.mlp:v=0", "v"), ("block0.mlp:erase=0", "ktx")] {
        let o = run(&["--intervene", spec, "--trace", trace.to_str().unwrap()]);
        assert!(o.status.success(), "{spec}: {}", text(&o));
        let (t, _) = read_st(&trace);
        let (_, shape, data) = t.iter().find(|(n, _, _)| n == array).unwrap();
        let (s, m) = (shape[1], shape[2]);
        let sub = |i: usize| data.chunks(m).skip(i).step_by(s).flatten().copied().collect::<Vec<f32>>();
        assert!(sub(1).iter().all(|&x| x == 0.0), "{spec}: {array} of block0.mlp {:?}", sub(1));
        assert!(sub(0).iter().any(|&x| x != 0.0), "{spec}: block0.attn as trained");
    }
    // Bad specs: nothing generated, a message naming the spec and the fix.
    for (spec, needles) in [
        ("block3.mlp:beta=0", &["block3.mlp:beta=0", "block 3 (the model has blocks 0 to 0)"][..]),
        ("block0.ffn:beta=0", &["'ffn' is neither attn nor mlp"][..]),
        ("all:beta=3", &["outside [0, 2]", "--allow-out-of-range"][..]),
    ] {
        let o = run(&["--intervene", spec]);
        let t = text(&o);
        assert!(!o.status.success() && !t.contains("panicked"), "{spec}: {t}");
        for n in needles {
            assert!(t.contains(n), "{spec}: expected {n:?} in {t}");
        }
        assert!(!String::from_utf8_lossy(&o.stdout).contains("To be"), "{spec}: generated before refusing: {t}");
    }
    assert!(run(&["--intervene", "all:beta=3", "--allow-out-of-range"]).status.success());
    // The fixed direction and the zeroed write through the CLI, recorded like the others.
    let o = run(&["--intervene", "block0.attn:k=mean", "--intervene", "block0.mlp:write=0", "--compare"]);
    let t = text(&o);
    assert!(o.status.success() && t.contains("--- with block0.attn:k=mean; block0.mlp:write=0 ---"), "{t}");
    let o = run(&["--intervene", "block0.attn:k=first"]);
    assert!(!o.status.success() && text(&o).contains("k=mean"), "{}", text(&o));
    // --compare: both continuations, where they differ, Δ log p per original token.
    let o = run(&["--intervene", "all:beta=2", "--compare"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for n in [
        "--- original ---",
        "--- with all:beta=2 ---",
        "log-probability of the original continuation",
        "Δ log p per token: ",
    ] {
        assert!(t.contains(n), "expected {n:?} in {t}");
    }
    let per = t.lines().find_map(|l| l.strip_prefix("Δ log p per token: ")).unwrap();
    assert_eq!(per.split_whitespace().count(), 2, "one per generated token (--max-tokens 2): {t}");
    // Tokens are counted from 1, as the --logprobs tables number them: the largest drop (or the
    // smallest change) is named at its place in that list (it said "at token 0" of the first).
    let per: Vec<f64> = per.split_whitespace().map(|x| x.parse().unwrap()).collect();
    let least = per.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(
        (0..per.len()).any(|i| per[i] == least && t.contains(&format!(" at generated token {} (", i + 1))),
        "the least Δ {least} at its place counted from 1: {t}"
    );
    if let Some(at) = t.split("first difference at generated token ").nth(1) {
        let n: usize = at.split(':').next().unwrap().parse().unwrap();
        assert!((1..=2).contains(&n), "counted from 1, of 2 tokens: {t}");
    }
    fails(
        &dir,
        &["generate", "--checkpoint", ck.to_str().unwrap(), "--prompt", "To", "--compare"],
        &["--intervene SPEC"],
    );
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // `ddl ... | head -1`: the reader goes away; the process must not panic on the broken pipe.
    let dir = tmpdir("pipe");
    let spec = dir.join("s.toml");
    // 1,400 lines of the dry run: more than a pipe holds, so the writer meets the closed pipe.
    let seeds: Vec<String> = (1..=700).map(|s| s.to_string()).collect();
    let body =
        format!("preset = \"tiny\"\nvariants = [\"baseline\", \"ddl\"]\nseeds = [{}]\nsteps = 5\n", seeds.join(", "));
    std::fs::write(&spec, body).unwrap();
    let out = format!("ddl experiment --spec {} --out {} --dry-run", spec.display(), dir.join("o").display());
    let sh = format!("{} {} | head -c 1 > /dev/null", env!("CARGO_BIN_EXE_ddl"), out.trim_start_matches("ddl "));
    let o = Command::new("bash")
        .args(["-o", "pipefail", "-c", &sh])
        .env("DDL_CACHE_DIR", dir.join("cache"))
        .env("DDL_NO_AUTOTUNE", "1")
        .output()
        .unwrap();
    let t = text(&o);
    assert!(!t.contains("panicked") && !t.contains("Broken pipe"), "{t}");
}

/// `DDL_CHECK_ARGS=1` (what the GPU check's local run does with every device-run command): the
/// command line parsed, the forms of `DDL_FORMS` and `--against-forms` and `bench train`'s
/// settings checked, nothing run and no adapter opened (an adapter that does not exist is never
/// looked for); a bad form, variant or flag is refused with its name.
#[test]
fn check_args_validates_a_command_without_running_it() {
    let dir = tmpdir("check-args");
    let check = |forms: Option<&str>, args: &[&str]| {
        let mut c = cmd(&dir);
        c.env("DDL_CHECK_ARGS", "1").env("DDL_ADAPTER", "no-such-adapter").args(args);
        match forms {
            Some(f) => c.env("DDL_FORMS", f),
            None => c.env_remove("DDL_FORMS"),
        };
        c.output().unwrap()
    };
    let train = ["bench", "train", "--preset", "small-124m", "--variant", "baseline", "--batch", "8", "--steps", "6"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> { [&train[..], extra].concat() };
    let o = check(Some("shader_checks=0,attn_team=32"), &with(&["--against-forms", "residual_fused=0", "--json"]));
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("nothing run"), "{}", text(&o));
    // The diagnostic halves are names `--variants` takes.
    let o = check(
        None,
        &["bench", "matmul", "--sizes", "64", "--cases", "nt", "--variants", "w128,w128:mma,w128w:stage,coop:mma"],
    );
    assert!(o.status.success(), "{}", text(&o));
    for (forms, args, needle) in [
        (Some("shader_checks=2"), with(&[]), "DDL_FORMS \"shader_checks=2\""),
        (None, with(&["--against-forms", "residual_fusd=0"]), "unknown form 'residual_fusd'"),
        (None, vec!["bench", "train", "--preset", "small-124m", "--variant", "basline"], "unknown variant 'basline'"),
        (None, with(&["--against", "nope"]), "for '--against <VARIANT>': unknown variant 'nope'"),
        (None, with(&["--batchh", "8"]), "--batchh"),
        (None, vec!["bench", "matmul", "--sizes", "64", "--against-forms", "attn_team=3"], "attn_team"),
        (
            None,
            vec!["bench", "matmul", "--sizes", "64", "--variants", "w128,w128:mmma"],
            "'w128:mmma' is not a tile variant",
        ),
    ] {
        let o = check(forms, &args);
        let t = text(&o);
        assert!(!o.status.success(), "{args:?} should be refused:\n{t}");
        assert!(matches!(o.status.code(), Some(1 | 2)) && !t.contains("panicked"), "{args:?}: {:?}\n{t}", o.status);
        assert!(t.contains(needle), "{args:?}: expected {needle:?} in:\n{t}");
        assert!(!t.contains("no-such-adapter"), "{args:?}: an adapter was looked for:\n{t}");
    }
}

/// README.md and every page under docs/ (docs/experiments/*/README.md among them), sorted.
fn doc_pages() -> Vec<PathBuf> {
    let root = ddl::testing::data_root();
    let mut pages = vec![root.join("README.md")];
    let mut folders = vec![root.join("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|x| x == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

/// Every `ddl …` command the README and docs/ (its subfolders too: an experiment's README shows
/// the command that regenerates its report) show in a shell block (```sh, or one without a
/// language) is one the CLI takes: parsed, its kernel forms and `bench train` settings checked,
/// nothing run (`DDL_CHECK_ARGS`). A flag renamed or dropped since a page was written fails here
/// with the page and line. Lines continued with `\` are joined; a `#` comment, a redirection or
/// a pipe ends the command; lines with `...` placeholders are left out.
#[test]
fn the_commands_the_docs_show_are_ones_the_cli_takes() {
    let pages = doc_pages();
    let dir = tmpdir("doc-commands");
    let (mut checked, mut refused) = (0, Vec::new());
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let mut shell = None::<bool>;
        let mut lines = text.lines().enumerate();
        while let Some((i, line)) = lines.next() {
            if let Some(lang) = line.strip_prefix("```") {
                shell = match shell {
                    Some(_) => None,
                    None => Some(matches!(lang.trim(), "" | "sh" | "bash" | "console")),
                };
                continue;
            }
            if shell != Some(true) || !line.trim_start().starts_with("ddl ") {
                continue;
            }
            let mut command = line.trim().to_string();
            while command.ends_with('\\') {
                command.pop();
                command.push_str(lines.next().map_or("", |l| l.1.trim()));
            }
            let words = shlex::split(&uncommented(&command))
                .unwrap_or_else(|| panic!("{}:{}: unbalanced quotes: {command}", page.display(), i + 1));
            let words: Vec<String> = words
                .into_iter()
                .take_while(|w| !["<", ">", "|", "&&", ";", "2>&1"].contains(&w.as_str()) && !w.starts_with(['<', '>']))
                .collect();
            if words.iter().any(|w| w.contains("...") || w.contains('…')) {
                continue;
            }
            checked += 1;
            let o = cmd(&dir).args(&words[1..]).env("DDL_CHECK_ARGS", "1").output().unwrap();
            if !o.status.success() {
                let why =
                    String::from_utf8_lossy(&o.stderr).lines().find(|l| !l.trim().is_empty()).unwrap_or("").to_string();
                refused.push(format!("{}:{}: {command}\n    {why}", page.display(), i + 1));
            }
        }
    }
    assert!(
        refused.is_empty(),
        "{} of {checked} commands in the docs are refused:\n{}",
        refused.len(),
        refused.join("\n")
    );
    assert!(checked >= 80, "only {checked} commands found: the pages' shell blocks moved?");
}

/// Every relative link in README.md and docs/**/*.md names a file that exists, and every
/// `#anchor` (on a page or on the same page) names a heading or an `<a id>` there, slugged
/// as GitHub slugs it. A section renamed or a file moved in the house's split broke links
/// no test saw.
#[test]
fn the_links_in_the_docs_resolve() {
    let pages = doc_pages();
    let (mut checked, mut broken) = (0, Vec::new());
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (line, target) in markdown_links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = target.split_once('#').map_or((target.as_str(), None), |(f, a)| (f, Some(a)));
            let file = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            if !file.exists() {
                broken.push(format!("{}:{line}: {target}: no file {}", page.display(), file.display()));
            } else if let Some(anchor) = anchor.filter(|_| file.extension().is_some_and(|x| x == "md"))
                && !markdown_anchors(&std::fs::read_to_string(&file).unwrap()).contains(anchor)
            {
                broken.push(format!("{}:{line}: {target}: no heading #{anchor} in {}", page.display(), file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "{} of {checked} links in the docs are broken:\n{}", broken.len(), broken.join("\n"));
    assert!(checked >= 50, "only {checked} relative links found: the link parser missed them?");
}

/// The markdown lines outside code fences, with their 1-based numbers.
fn markdown_prose(text: &str) -> Vec<(usize, &str)> {
    let mut fence = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        } else if !fence {
            out.push((i + 1, line));
        }
    }
    out
}

/// The targets of `[text](target)` links and `[name]: target` definitions, outside code.
fn markdown_links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in markdown_prose(text) {
        let mut prose = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                prose.push_str(part);
            }
        }
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            out.push((n, target.trim_matches(['<', '>']).to_string()));
        }
        if let Some(def) = prose.trim_start().strip_prefix('[')
            && let Some((_, target)) = def.split_once("]: ")
        {
            out.push((n, target.split_whitespace().next().unwrap_or("").to_string()));
        }
    }
    out.retain(|(_, t)| !t.is_empty());
    out
}

/// The anchors a page has: its headings slugged as GitHub slugs them (lower case, punctuation
/// but `-` and `_` dropped, spaces to `-`, a repeat gets `-1`, `-2`), and its `<a id="...">`.
fn markdown_anchors(text: &str) -> std::collections::HashSet<String> {
    let mut anchors = std::collections::HashSet::new();
    let mut seen = HashMap::<String, usize>::new();
    for (_, line) in markdown_prose(text) {
        let hashes = line.len() - line.trim_start_matches('#').len();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let title = line[hashes..].trim().trim_end_matches('#').trim();
            let slug: String = title
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
                .flat_map(char::to_lowercase)
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            let n = seen.entry(slug.clone()).or_default();
            anchors.insert(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
            *n += 1;
        }
        for attr in ["<a id=\"", "<a name=\""] {
            for (at, _) in line.match_indices(attr) {
                let id = &line[at + attr.len()..];
                anchors.insert(id[..id.find('"').unwrap_or(id.len())].to_string());
            }
        }
    }
    anchors
}

/// `line` without its `#` comment (a `#` that starts a word outside quotes).
fn uncommented(line: &str) -> String {
    let (mut quote, mut prev) = (None, ' ');
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => return line[..i].to_string(),
            _ => {}
        }
        prev = c;
    }
    line.to_string()
}

/// A folder a live run trains in that has saved no checkpoint yet: `eval`, `info --checkpoint`
/// and `generate` say so and when there will be one (they said only that model.safetensors was
/// missing, where `train --resume` said why).
#[test]
fn a_folder_a_run_trains_in_before_its_first_checkpoint_is_said_so() {
    if !Path::new("/proc/1").exists() {
        panic!("this test needs /proc (PID 1 stands for a live run's process)");
    }
    let dir = tmpdir("live-run");
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join(ddl::train::lock::LOCK_FILE), format!("1 {}\n", ddl::train::lock::host_name())).unwrap();
    let r = run.to_str().unwrap();
    for args in [
        &["eval", "--checkpoint", r][..],
        &["info", "--checkpoint", r][..],
        &["generate", "--checkpoint", r, "--prompt", "a", "--max-tokens", "1"][..],
    ] {
        let t = fails(&dir, args, &["a run is training in", "process 1 on", "has saved no checkpoint yet"]);
        assert!(t.contains("wait for its first one"), "{args:?}: {t}");
    }
}

/// `--data` shards too short for one sequence (the training split, or the validation split) are
/// refused before the adapter opens, as a `--corpus` too short is (an adapter not there is never
/// asked for), with the message the run gave once the adapter had opened; `--out` is not made.
#[test]
fn data_shards_too_short_are_refused_before_the_adapter_opens() {
    let dir = tmpdir("short-shards");
    let file = dir.join("short.txt");
    std::fs::write(&file, "To be, or not to be, that is the question\n").unwrap();
    let shards = dir.join("shards").display().to_string();
    let o = cmd(&dir).args(["data", "prepare", "--tokenizer", "char", "--out", &shards]).arg(&file).output().unwrap();
    assert!(o.status.success() && text(&o).contains("38 training and 4 validation tokens"), "{}", text(&o));
    let out = dir.join("run").display().to_string();
    for (seq_len, said) in [
        ("train.seq_len=16", "the validation split has 4 token(s), fewer than one sequence of 17 (seq_len + 1)"),
        ("train.seq_len=40", "the train split has 38 token(s), fewer than one sequence of 41 (seq_len + 1)"),
    ] {
        let mut a = vec!["train", "--data", &shards, "--out", &out, "--steps", "1", "--adapter", "no-such-adapter"];
        a.extend_from_slice(SMALL);
        a.extend(["--set", seq_len]);
        let e = fails(&dir, &a, &[&format!("--data {shards}: {said}")]);
        assert!(!e.contains("no-such-adapter") && !Path::new(&out).exists(), "{e}");
        if cfg!(feature = "mpi") {
            a.extend(["--distributed", "mpi"]);
            let e = fails(&dir, &a, &[said]);
            assert!(!e.contains("no-such-adapter") && !e.contains("rank 0"), "{e}");
        }
    }
}

/// An argument that is not UTF-8 (a folder named in Latin-1) with `DDL_NO_AUTOTUNE` or
/// `DDL_BACKEND` set: a path flag takes it and a text flag is refused by the parser, as without
/// the variables; the check of whether a flag overrides its variable panicked ("called
/// `Result::unwrap()` on an `Err` value") on reading such an argument.
#[cfg(unix)]
#[test]
fn an_argument_that_is_not_utf8_is_no_panic_with_the_flag_variables_set() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tmpdir("not-utf8-arg");
    let latin1 = dir.join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    for (k, v) in [("DDL_NO_AUTOTUNE", "1"), ("DDL_BACKEND", "vulkan")] {
        let o = cmd(&dir).env(k, v).args(["generate", "--prompt", "a", "--checkpoint"]).arg(&latin1).output().unwrap();
        let t = text(&o);
        assert!(o.status.code() == Some(1) && t.contains("does not exist") && !t.contains("panicked"), "{k}: {t}");
        let bad = std::ffi::OsStr::from_bytes(b"caf\xe9");
        let o = cmd(&dir).env(k, v).args(["generate", "--checkpoint", "x", "--prompt"]).arg(bad).output().unwrap();
        let t = text(&o);
        assert!(o.status.code() == Some(2) && t.contains("invalid UTF-8") && !t.contains("panicked"), "{k}: {t}");
    }
}

/// A path that starts with `-` given as it is (`--checkpoint -run`) was clap's "unexpected
/// argument '-r'" alone: the arguments that name a file or folder here are said with the remedy
/// (`./-run`, or after `--`); a flag that names none is clap's error as before.
#[test]
fn a_path_that_starts_with_a_hyphen_is_said_with_its_remedy() {
    let dir = tmpdir("hyphen-path");
    std::fs::create_dir_all(dir.join("-run")).unwrap();
    let run = |args: &[&str]| {
        let o = cmd(&dir).current_dir(&dir).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        text(&o)
    };
    for args in [&["info", "--checkpoint", "-run"][..], &["generate", "--checkpoint", "-run", "--prompt", "A"]] {
        let t = run(args);
        assert!(t.contains("unexpected argument") && t.contains("'-run' is a file or folder here"), "{t}");
        assert!(t.contains("write it as ./-run") && t.contains("-- -run"), "{t}");
    }
    let t = run(&["info", "--checkpoint", "-nothing"]);
    assert!(t.contains("unexpected argument") && !t.contains("file or folder here"), "{t}");
}

/// A run folder whose run was killed (then moved, or copied while it trained) keeps its lock and
/// its writers' temporary files: `info --checkpoint` says the lock is stale and why (it said
/// nothing) and names the temporary files; `--resume` takes the lock over and removes them, each
/// with a note (they stayed, and a copy's snapshot folders until its next kept checkpoint), and
/// leaves another command's temporary file (a trace's) as it is.
#[test]
fn a_stale_lock_and_temporary_files_are_said_and_resume_clears_them() {
    let dir = tmpdir("stale-lock-temporaries");
    let run = checkpoint(&dir);
    let r = run.to_str().unwrap();
    let host = ddl::train::lock::host_name();
    let lock = run.join(".ddl-lock");
    let dead = 4_000_000; // past any Linux PID
    std::fs::write(&lock, format!("{dead} {host}\n")).unwrap();
    let stale = [".summary.json.tmp-4000000-0", ".tmp-loss.png", "checkpoints/.step-00000002.tmp-4000000"];
    for s in &stale[..2] {
        std::fs::write(run.join(s), "half").unwrap();
    }
    std::fs::create_dir_all(run.join(stale[2])).unwrap();
    let trace = run.join(".trace.tsv.tmp-4000000-0");
    std::fs::write(&trace, "not the run's").unwrap();
    let o = cmd(&dir).args(["info", "--checkpoint", r]).output().unwrap();
    let t = text(&o);
    assert!(o.status.success() && !t.contains("training now"), "{t}");
    assert!(t.contains("is stale") && t.contains(&format!("process {dead} on {host} is gone")), "{t}");
    assert!(stale.iter().all(|s| t.contains(s)) && !t.contains(".trace.tsv"), "{t}");
    let o = cmd(&dir).args(["train", "--resume", r, "--steps", "3"]).output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("took over the stale lock") && t.contains("removed 3 temporary files"), "{t}");
    assert!(stale.iter().all(|s| !run.join(s).exists()) && trace.exists() && !lock.exists(), "{t}");
    // A lock copied with its folder from a run that trains elsewhere (this live process's PID).
    std::fs::write(&lock, format!("{} {host} 1 dir=1:1\n", std::process::id())).unwrap();
    let t = text(&cmd(&dir).args(["info", "--checkpoint", r]).output().unwrap());
    assert!(
        t.contains("is stale") && t.contains("came with a copy of the folder") && !t.contains("training now"),
        "{t}"
    );
    // The lock's own temporary file copied from a run taking its lock elsewhere (a live PID, its
    // text naming the folder it was made in) or left by a killed one: named, and removed by the
    // next lock; one made in this folder by a live process is not.
    let copied_new = run.join(format!(".ddl-lock.new-{}", std::process::id()));
    std::fs::write(&copied_new, format!("{} {host} 1 dir=1:1\n", std::process::id())).unwrap();
    let dead_stale = run.join(format!(".ddl-lock.stale-{dead}"));
    std::fs::write(&dead_stale, format!("{dead} {host}\n")).unwrap();
    let t = text(&cmd(&dir).args(["info", "--checkpoint", r]).output().unwrap());
    assert!(t.contains(".ddl-lock.new-") && t.contains(&format!(".ddl-lock.stale-{dead}")), "{t}");
    let o = cmd(&dir).args(["train", "--resume", r, "--steps", "4"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!copied_new.exists() && !dead_stale.exists(), "{}", text(&o));
}
