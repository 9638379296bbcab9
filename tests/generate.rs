//! `ddl generate` and `ddl chat` through the real CLI: what `--json` says matches what is printed,
//! stop texts match only text the model wrote, a chat's seeds follow `/set seed`, and bad input
//! (escapes, counts, a folder that is not a run's, too much standard input, a folder as standard
//! input, characters no one sees) is a clear error, a chat command after spaces is a command, `//x`
//! sends the line `/x`, and Ctrl-C stops a chat's reply, not the chat.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn ddl(dir: &Path) -> Command {
    ddl::testing::ddl_command(env!("CARGO_BIN_EXE_ddl"), dir)
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs `ddl args`, which must succeed; returns its output.
fn ok(dir: &Path, args: &[&str]) -> Output {
    let o = ddl(dir).args(args).output().unwrap();
    assert!(o.status.success(), "`ddl {}`:\n{}", args.join(" "), text(&o));
    o
}

/// Runs `ddl args`, which must fail with our error or clap's (never a panic), every needle in
/// its output; returns the output's text.
fn fails(dir: &Path, args: &[&str], needles: &[&str]) -> String {
    let o = ddl(dir).args(args).output().unwrap();
    let t = text(&o);
    assert!(matches!(o.status.code(), Some(1 | 2)), "`ddl {}`: {:?}\n{t}", args.join(" "), o.status);
    assert!(!t.contains("panicked"), "{t}");
    for n in needles {
        assert!(t.contains(n), "`ddl {}`: expected {n:?} in:\n{t}", args.join(" "));
    }
    t
}

/// A small model with a byte-level BPE of 300 tokens (`ddl tokenizer train`), trained 2 steps:
/// its output is near random, many tokens of several characters and many lone bytes.
fn bpe_run(dir: &Path) -> PathBuf {
    let corpus = ddl::testing::small_corpus(dir);
    let tok = dir.join("tok.json");
    let tok_s = tok.to_str().unwrap();
    ok(dir, &["tokenizer", "train", "--corpus", &corpus, "--vocab-size", "300", "--out", tok_s]);
    let out = dir.join("run");
    let mut a = vec!["train", "--variant", "ddl", "--corpus", &corpus, "--tokenizer", tok_s, "--steps", "2"];
    a.extend_from_slice(ddl::testing::SMALL_MODEL_FLAGS);
    a.extend_from_slice(&["--set", "train.val_max_tokens=512", "--out", out.to_str().unwrap()]);
    ok(dir, &a);
    out
}

/// A small model with a char tokenizer (one token per character), trained 2 steps.
fn char_run(dir: &Path) -> PathBuf {
    let corpus = ddl::testing::small_corpus(dir);
    let out = dir.join("char-run");
    let mut a = vec!["train", "--variant", "ddl", "--corpus", &corpus, "--steps", "2"];
    a.extend_from_slice(ddl::testing::SMALL_MODEL_FLAGS);
    a.extend_from_slice(&["--out", out.to_str().unwrap()]);
    ok(dir, &a);
    out
}

/// Chat's lines `input` through `ddl chat --checkpoint run args`, which must succeed; returns
/// stdout and stderr.
fn chat(dir: &Path, run: &Path, args: &[&str], input: &str) -> (String, String) {
    let (code, out, err) = chat_ending(dir, run, args, input);
    assert!(code == Some(0), "{out}{err}");
    (out, err)
}

/// [`chat`] with its exit status, never a panic.
fn chat_ending(dir: &Path, run: &Path, args: &[&str], input: &str) -> (Option<i32>, String, String) {
    let mut child = ddl(dir)
        .args(["chat", "--checkpoint", run.to_str().unwrap()])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let o = child.wait_with_output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
    assert!(!err.contains("panicked"), "{out}{err}");
    (o.status.code(), out, err)
}

/// The seed of each turn a chat trace records.
fn turn_seeds(trace: &Path) -> Vec<u64> {
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trace.with_extension("json")).unwrap()).unwrap();
    j["turns"].as_array().unwrap().iter().map(|t| t["sampling"]["seed"].as_u64().unwrap()).collect()
}

#[test]
fn json_text_is_the_printed_text_and_stop_texts_match_only_what_the_model_wrote() {
    let dir = ddl::testing::scratch_dir("generate-json");
    let run = bpe_run(&dir);
    let r = run.to_str().unwrap();
    let tok = ddl::train::checkpoint::load(&run, false).unwrap().tokenizer;
    // With a stop text the printed text ends right after it, inside its last token where it ends
    // there: `--json`'s `text` is that text, `tokens` every token sampled (the last whole).
    let mut cut_inside = None;
    for seed in 1..=6 {
        for stop in ["e", "t"] {
            let seed = seed.to_string();
            let base = ["generate", "--checkpoint", r, "--prompt", "ROMEO:", "--max-tokens", "30"];
            let args: Vec<&str> =
                base.iter().copied().chain(["--seed", &seed, "--temperature", "1", "--stop", stop]).collect();
            let printed = String::from_utf8(ok(&dir, &args).stdout).unwrap();
            let json_args: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
            let line: serde_json::Value = serde_json::from_slice(&ok(&dir, &json_args).stdout).unwrap();
            let t = line["text"].as_str().unwrap();
            let newline = if t.ends_with('\n') { "" } else { "\n" };
            assert_eq!(printed, format!("ROMEO:{t}{newline}"), "seed {seed} --stop {stop}: {line}");
            if line["stop"] == "stop_text" {
                assert!(t.ends_with(stop), "{line}");
                let ids: Vec<u32> =
                    line["tokens"].as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect();
                let whole = tok.decode(&ids).unwrap();
                assert!(whole.starts_with(t), "{whole:?} {line}");
                if whole != t && cut_inside.is_none() {
                    cut_inside = Some((args.iter().map(|a| a.to_string()).collect::<Vec<_>>(), printed.clone()));
                }
            }
        }
    }
    let Some((args, printed)) = cut_inside else {
        panic!("no stop text ended inside a token: the test checked nothing that differs")
    };
    // `--compare` shows the continuation as generation printed it too.
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(["--intervene", "all:beta=0", "--compare"]);
    let o = String::from_utf8(ok(&dir, &args).stdout).unwrap();
    assert!(o.starts_with(&format!("--- original ---\n{printed}--- with all:beta=0 ---\n")), "{o}\nvs\n{printed}");

    // `--stop U+FFFD`: the near-random model writes lone bytes, which print as U+FFFD, but it
    // never wrote U+FFFD itself (bytes EF BF BD): nothing stops.
    let o = ok(
        &dir,
        &[
            "generate",
            "--checkpoint",
            r,
            "--prompt",
            "ROMEO:",
            "--max-tokens",
            "30",
            "--temperature",
            "1.5",
            "--samples",
            "8",
            "--seed",
            "1",
            "--stop",
            "\u{FFFD}",
            "--json",
        ],
    );
    let lines: Vec<serde_json::Value> =
        String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 8);
    assert!(lines.iter().any(|l| l["text"].as_str().unwrap().contains('\u{FFFD}')), "no lone byte: {lines:?}");
    for l in &lines {
        assert_ne!(l["stop"], "stop_text", "{l}");
    }
}

#[test]
fn a_chat_seed_set_is_the_next_replys_and_a_seed_past_u64_is_refused_at_its_turn() {
    let dir = ddl::testing::scratch_dir("generate-chat-seed");
    let run = bpe_run(&dir);
    let trace = dir.join("chat.safetensors");
    let tr = trace.to_str().unwrap();
    let (_, err) = chat(&dir, &run, &["--max-tokens", "3", "--trace", tr], "A\n/set seed 5 \nB\nC\n/settings\n");
    // (The space after the value, which a terminal hides, is not part of it.)
    assert_eq!(turn_seeds(&trace), [0, 5, 6], "{err}");
    assert!(err.contains("(seed = 5: the next reply's seed, each reply after it one more)"), "{err}");
    assert!(err.contains("next reply's seed 7"), "{err}");
    // Set again to the seed it already is: the next reply's again.
    let summary = trace.with_extension("json");
    let input = format!("A\nB\n/set seed 4\nC\n/save {tr}\n/save {}\n", summary.display());
    let (_, err) = chat(&dir, &run, &["--max-tokens", "3", "--trace", tr, "--seed", "4"], &input);
    assert_eq!(turn_seeds(&trace), [4, 5, 4], "{err}");
    // `/save` over the chat's own trace files is refused naming them (not "this chat did not
    // write it"), and they stay traces.
    assert!(err.contains(&format!("{tr} is this chat's --trace file")), "{err}");
    assert!(err.contains(&format!("{} is this chat's --trace summary", summary.display())), "{err}");
    assert_eq!(turn_seeds(&trace), [4, 5, 4], "{err}");
    // The largest seed: its turn, then the next one's would pass 2^64 − 1: refused, said with the
    // remedy, the conversation as it was; `/set seed` goes on.
    let max = u64::MAX.to_string();
    // (The refused line ends the piped chat with status 1, after the rest: see
    // a_piped_chat_with_lines_it_could_not_send_ends_with_an_error.)
    let (code, out, err) =
        chat_ending(&dir, &run, &["--max-tokens", "3", "--trace", tr, "--seed", &max], "A\nB\n/set seed 9\nB\n");
    assert!(err.contains("past 2^64 − 1") && err.contains("/set seed N") && err.contains("as it was"), "{err}");
    assert!(code == Some(1) && err.contains("1 line of standard input could not be sent"), "{err}");
    assert_eq!(turn_seeds(&trace), [u64::MAX, 9], "{out}{err}");
    // A stop text's unknown escape is refused, naming the escapes there are.
    let (_, err) = chat(&dir, &run, &["--max-tokens", "3"], "/set stop \\q\n/set stop a\\\n/settings\n");
    assert!(err.contains("unknown escape \\q") && err.contains("ends in a lone backslash"), "{err}");
    assert!(err.contains("stop []"), "nothing was added: {err}");
    // `/intervene none` with a space after it (a terminal hides it) is `none`, not a spec.
    let (_, err) = chat(&dir, &run, &["--max-tokens", "3"], "/intervene all:beta=0\n/intervene none \n/intervene\n");
    assert!(err.contains("(no interventions: the model as trained; from the next line on)"), "{err}");
    assert!(!err.contains("expected TARGET:ACTION"), "{err}");
    // An empty line (or one of spaces) sends nothing (it was a turn of one newline); command
    // names are taken in any case: `/SETTINGS` lists, `/QUIT` ends the chat before `B`.
    let (_, err) = chat(&dir, &run, &["--max-tokens", "3", "--trace", tr], "A\n\n   \n/SETTINGS\n/QUIT\nB\n");
    assert_eq!(turn_seeds(&trace), [0], "{err}");
    assert!(err.contains("next reply's seed 1") && !err.contains("unknown command"), "{err}");
}

#[test]
fn bad_generation_input_is_a_clear_error_with_a_remedy_that_works() {
    let dir = ddl::testing::scratch_dir("generate-bad");
    let run = bpe_run(&dir);
    let r = run.to_str().unwrap();
    let g = |extra: &[&str], needles: &[&str]| {
        let a: Vec<&str> =
            ["generate", "--checkpoint", r, "--prompt", "hi"].iter().copied().chain(extra.iter().copied()).collect();
        fails(&dir, &a, needles)
    };
    // --max-tokens takes 1 and more: its message says so for a negative number too.
    let e = g(&["--max-tokens", "-1"], &["--max-tokens", "≥ 1", "not a negative one"]);
    assert!(!e.contains("≥ 0"), "{e}");
    g(&["--max-tokens", "0"], &["--max-tokens", "at least 1"]);
    // Unknown escapes in a stop text, and a trailing backslash.
    g(&["--stop", "\\q"], &["--stop '\\q': unknown escape \\q", "\\n (a newline)", "\\\\ (a backslash)"]);
    g(&["--stop", "end\\"], &["--stop 'end\\'", "lone backslash"]);
    fails(&dir, &["chat", "--checkpoint", r, "--stop", "\\x"], &["--stop '\\x': unknown escape \\x"]);

    // An experiment's folder for a run: said, with its runs.
    let exp = dir.join("exp");
    let runs = exp.join("runs");
    for name in ["ddl-seed1", "ddl-seed2"] {
        std::fs::create_dir_all(runs.join(name)).unwrap();
        for f in ["model.safetensors", "config.toml"] {
            std::fs::copy(run.join(f), runs.join(name).join(f)).unwrap();
        }
    }
    std::fs::write(exp.join("experiment.toml"), "").unwrap();
    let want = format!("'{}' is an experiment's folder: its runs are in '{}'", exp.display(), runs.display());
    let e = runs.join("ddl-seed1").display().to_string();
    for cmd in ["generate", "chat"] {
        let mut a = vec![cmd, "--checkpoint", exp.to_str().unwrap()];
        if cmd == "generate" {
            a.extend(["--prompt", "hi"]);
        }
        fails(&dir, &a, &[&want, "(ddl-seed1, ddl-seed2)", &format!("e.g. '{e}'")]);
    }
    // One whose runs have no checkpoint yet.
    let empty = dir.join("exp2");
    std::fs::create_dir_all(empty.join("runs")).unwrap();
    fails(
        &dir,
        &["generate", "--checkpoint", empty.to_str().unwrap(), "--prompt", "hi"],
        &["is an experiment's folder", "no run in its runs/ has a checkpoint yet", "runs/NAME"],
    );

    // More than 256 MiB on standard input: the remedy says what generation reads of a prompt.
    let mut child = ddl(&dir)
        .args(["generate", "--checkpoint", r, "--prompt", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let block = vec![b'a'; 1 << 20];
        // (It stops reading past the cap: the pipe then breaks.)
        for _ in 0..257 {
            if stdin.write_all(&block).is_err() {
                break;
            }
        }
    });
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    for n in ["more than 256 MiB", "last max_seq_len tokens", "tail -n", "ddl eval"] {
        assert!(t.contains(n), "expected {n:?} in {t}");
    }
    assert!(!t.contains("give a file instead"), "--prompt takes no file: {t}");
}

/// Ctrl-C while a chat's reply is written stops that reply at the next token (it ended the whole
/// chat at once, without a word, its trace lost): what was written stays, in the conversation as
/// on the screen, a line says so, and the chat goes on at its prompt (the next turn replies, the
/// trace holds both); Ctrl-C at the prompt then ends the chat (130), as it did. SIGTERM during a
/// reply stops it the same way and ends the chat, its trace written, with 143.
#[test]
fn ctrl_c_during_a_chat_reply_stops_the_reply_and_the_chat_goes_on() {
    use std::io::{BufRead, Read, Write};
    let dir = ddl::testing::scratch_dir("generate-chat-ctrl-c");
    let run = char_run(&dir);
    let signal = |child: &std::process::Child, sig: &str| {
        assert!(Command::new("kill").args([sig, &child.id().to_string()]).status().unwrap().success());
    };
    for (sig, status, name) in [("-INT", 130, "Ctrl-C"), ("-TERM", 143, "SIGTERM")] {
        let trace = dir.join(format!("chat{sig}.safetensors"));
        let saved = dir.join(format!("chat{sig}.txt"));
        let mut child = ddl(&dir)
            .args(["chat", "--checkpoint", run.to_str().unwrap(), "--max-tokens", "1000000", "--trace"])
            .arg(&trace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        // Stderr's lines as they come (the prompts' "> " before them), and all of them at the end.
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let errs = std::thread::spawn(move || {
            let mut all = String::new();
            for l in std::io::BufReader::new(stderr).lines() {
                let l = l.unwrap();
                all.push_str(&l);
                all.push('\n');
                let _ = tx.send(l);
            }
            all
        });
        let wait_for = |needle: &str| loop {
            match rx.recv_timeout(std::time::Duration::from_secs(600)) {
                Ok(l) if l.contains(needle) => return l,
                Ok(_) => {}
                Err(e) => panic!("no line with {needle:?} on stderr ({e})"),
            }
        };
        // Some of the reply, then the signal.
        stdin.write_all(b"To be\n").unwrap();
        let mut got = vec![0u8; 12];
        stdout.read_exact(&mut got).unwrap();
        signal(&child, sig);
        let said = wait_for("stopped the reply after");
        assert!(said.starts_with(&format!("{name}: stopped the reply after ")), "{said}");
        let n: usize = said.split("after ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        assert!(n >= 12, "{said}: at least the 12 characters read");
        if name == "Ctrl-C" {
            assert!(said.contains("kept in the conversation"), "{said}");
            // The chat goes on: a setting, a turn, the conversation saved; then Ctrl-C at the
            // prompt ends it.
            let save = format!("/set max_tokens 3\nHi\n/save {}\n", saved.display());
            stdin.write_all(save.as_bytes()).unwrap();
            wait_for("(saved the conversation");
            signal(&child, sig);
        } else {
            assert!(said.ends_with("; the chat ends"), "{said}");
        }
        let rest = std::thread::spawn(move || {
            let mut rest = Vec::new();
            stdout.read_to_end(&mut rest).unwrap();
            rest
        });
        let o = child.wait().unwrap();
        drop(stdin);
        got.extend(rest.join().unwrap());
        let (out, err) = (String::from_utf8(got).unwrap(), errs.join().unwrap());
        assert_eq!(o.code(), Some(status), "{out}{err}");
        assert!(!err.contains("panicked"), "{err}");
        // The reply as printed: its n characters (a char model's tokens), then a newline unless
        // it ended in one.
        let reply: String = out.chars().take(n).collect();
        let lead = if reply.ends_with('\n') { "" } else { "\n" };
        assert!(out.starts_with(&format!("{reply}{lead}")), "{out:?}");
        if name == "Ctrl-C" {
            // The conversation holds the cut reply as shown, and the next turn after it.
            let text = std::fs::read_to_string(&saved).unwrap();
            assert!(text.starts_with(&format!("To be\n{reply}{lead}Hi\n")), "{text:?} vs {out:?}");
            assert_eq!(turn_seeds(&trace), [0, 1], "{err}");
        } else {
            assert!(err.contains("trace written to"), "{err}");
            assert_eq!(turn_seeds(&trace), [0], "{err}");
        }
    }
}

/// A chat command after spaces or a tab (a paste's indent) is a command, in any case: `  /quit`
/// was sent to the model as a line (a char model refused its '/'), the chat going on.
#[test]
fn a_chat_command_after_spaces_or_a_tab_is_a_command() {
    let dir = ddl::testing::scratch_dir("generate-chat-indented");
    let run = char_run(&dir);
    let trace = dir.join("chat.safetensors");
    let tr = trace.to_str().unwrap();
    let (_, err) = chat(&dir, &run, &["--max-tokens", "3", "--trace", tr], "A\n  /SETTINGS \n\t/quit\nB\n");
    assert_eq!(turn_seeds(&trace), [0], "{err}");
    assert!(err.contains("next reply's seed 1") && !err.contains("not in the tokenizer's vocabulary"), "{err}");
}

/// A token's bytes as `--json`'s `logprobs` give them (`bytes`, as OpenAI's).
fn bytes_of(score: &serde_json::Value) -> Vec<u8> {
    let b = score["bytes"].as_array().unwrap_or_else(|| panic!("no bytes: {score}"));
    b.iter().map(|b| u8::try_from(b.as_u64().unwrap()).unwrap()).collect()
}

/// A token that is part of a character (a byte-level BPE splits one over tokens): `--json`'s
/// `logprobs` keep its `text` ("�") and add its `bytes`, as OpenAI's do, the tokens' bytes making
/// the text; the table shows those bytes (`"\xE2"`), not "�", which said neither which bytes nor
/// that they were not the character U+FFFD.
#[test]
fn logprobs_show_the_bytes_of_a_token_that_is_part_of_a_character() {
    let dir = ddl::testing::scratch_dir("generate-logprobs-bytes");
    let run = bpe_run(&dir);
    let r = run.to_str().unwrap();
    let mut split = 0;
    for seed in 1..=4 {
        let seed = seed.to_string();
        let args = ["generate", "--checkpoint", r, "--prompt", "ROMEO:", "--max-tokens", "30"];
        let args: Vec<&str> =
            args.iter().copied().chain(["--temperature", "1.5", "--seed", &seed, "--logprobs", "2"]).collect();
        let json_args: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
        let j: serde_json::Value = serde_json::from_slice(&ok(&dir, &json_args).stdout).unwrap();
        let printed = String::from_utf8(ok(&dir, &args).stdout).unwrap();
        let lines: Vec<&str> = printed.lines().collect();
        let head = lines.iter().position(|l| l.starts_with("--- log-probabilities")).expect(&printed);
        let mut all = Vec::new();
        for (i, s) in j["logprobs"].as_array().unwrap().iter().enumerate() {
            let bytes = bytes_of(s);
            assert_eq!(s["text"].as_str().unwrap(), String::from_utf8_lossy(&bytes), "{s}");
            for a in s["top"].as_array().unwrap() {
                assert_eq!(a["text"].as_str().unwrap(), String::from_utf8_lossy(&bytes_of(a)), "{a}");
            }
            // Row i of the table: its number, then the token as shown.
            let row = lines[head + 2 + i].trim_start().strip_prefix(&format!("{}  ", i + 1)).expect(&printed);
            let shown = ddl::generate::shown_token(s["text"].as_str().unwrap(), &bytes);
            assert!(row.starts_with(&format!("{shown} ")), "{shown} in {row:?}");
            if std::str::from_utf8(&bytes).is_err() {
                split += 1;
                assert!(shown.contains("\\x") && !shown.contains('\u{FFFD}'), "{shown}");
            }
            all.extend(bytes);
        }
        assert_eq!(String::from_utf8_lossy(&all), j["text"].as_str().unwrap(), "{j}");
    }
    assert!(split > 0, "no token part of a character in 4 samples");
}

/// `//text` sends the line `/text` (as IRC clients do): a line starting with '/' was always a
/// command, and an unknown one refused, so no such line could be sent. The refusal and `/help`
/// say how.
#[test]
fn a_double_slash_sends_a_line_starting_with_a_slash() {
    let dir = ddl::testing::scratch_dir("generate-chat-slash");
    let run = bpe_run(&dir);
    let saved = dir.join("chat.txt");
    let input = format!("//etc/hosts is a file\n/etc/hosts\n/help\n/save {}\n", saved.display());
    let (_, err) = chat(&dir, &run, &["--max-tokens", "3"], &input);
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.starts_with("/etc/hosts is a file\n"), "{text:?}\n{err}");
    assert!(!text.contains("//") && !err.contains("unknown command '//"), "{text:?}\n{err}");
    assert!(
        err.contains("unknown command '/etc/hosts': to send a line starting with '/', write '//…' (//etc/hosts sends"),
        "{err}"
    );
    let help = err
        .lines()
        .map(|l| l.trim_start_matches("> "))
        .find(|l| l.starts_with("commands:"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(help.contains("to send a line starting with '/', write '//…'"), "{help}");
}

/// A setting named in capitals is that setting in everything it does: `/set SEED 5` made the next
/// reply's seed 5 plus the turns before it (the seed's rule compared the name as typed), and
/// `/set STOP X` said "(STOP = X)", not the stop texts now in force; `/set stop NONE` clears
/// them (it added the stop text "NONE"); `/intervene none extra` says that none takes nothing
/// after it (it was the spec syntax's generic message).
#[test]
fn a_setting_named_in_capitals_is_that_setting() {
    let dir = ddl::testing::scratch_dir("generate-chat-capitals");
    let run = char_run(&dir);
    let trace = dir.join("chat.safetensors");
    let tr = trace.to_str().unwrap();
    let (_, err) = chat(
        &dir,
        &run,
        &["--max-tokens", "3", "--trace", tr],
        "A\nB\n/set SEED 5\nC\n/set stop X\n/Set Stop NONE\n/intervene NONE extra\n",
    );
    assert_eq!(turn_seeds(&trace), [0, 1, 5], "{err}");
    assert!(err.contains("(seed = 5: the next reply's seed"), "{err}");
    assert!(err.contains("(stop texts: [\"X\"], and a blank line)"), "{err}");
    assert!(err.contains("(stop texts: [], and a blank line)"), "{err}");
    assert!(err.contains("/intervene none takes nothing after it (got 'extra')"), "{err}");
}

/// `--prompt 'A\nB'` is said to hold a backslash and an n, not a newline, as `--stop '\n'` would
/// read it (the prompt was read as typed without a word; a char model then refused the `\`).
#[test]
fn a_prompt_with_a_typed_backslash_n_is_said_to_hold_no_newline() {
    let dir = ddl::testing::scratch_dir("generate-backslash-n");
    let run = char_run(&dir);
    let r = run.to_str().unwrap();
    let said = "note: --prompt holds `\\n` as a backslash and an n, not a newline";
    fails(&dir, &["generate", "--checkpoint", r, "--prompt", "A\\nB"], &[said, "--prompt $'ROMEO:\\nJULIET:'"]);
    let o = ok(&dir, &["generate", "--checkpoint", r, "--prompt", "A\nB", "--max-tokens", "2"]);
    assert!(!text(&o).contains(said), "{}", text(&o));
}

/// UTF-16 without a byte-order mark (`iconv -t UTF-16LE`: valid UTF-8, a NUL beside every
/// letter) is said to be UTF-16 with the `iconv -f` that converts it, little- or big-endian, by
/// `eval --text` (a file or a pipe), `generate --prompt -` and a chat: a byte-level model read it
/// as it was, NULs and all. And UTF-16 piped into `eval --text /dev/stdin` is said from the bytes
/// read (the remedy was LATIN1's: a pipe cannot be read again to look at its start).
#[test]
fn utf16_without_a_mark_or_through_a_pipe_is_said_to_be_utf16() {
    let dir = ddl::testing::scratch_dir("generate-utf16-no-mark");
    let run = bpe_run(&dir);
    let r = run.to_str().unwrap();
    let text16 = "ROMEO: what light through yonder window breaks?\nJULIET: ay me\n".repeat(40);
    let le: Vec<u8> = text16.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
    let be: Vec<u8> = text16.encode_utf16().flat_map(|u| u.to_be_bytes()).collect();
    let bom: Vec<u8> = [0xff, 0xfe].into_iter().chain(le.iter().copied()).collect();
    let file = dir.join("le.txt");
    std::fs::write(&file, &le).unwrap();
    let f = file.to_str().unwrap();
    let mut wrong = Vec::new();
    for (args, input, enc) in [
        (vec!["eval", "--checkpoint", r, "--text", f], &le, "UTF-16LE"),
        (vec!["eval", "--checkpoint", r, "--text", "/dev/stdin"], &be, "UTF-16BE"),
        (vec!["eval", "--checkpoint", r, "--text", "/dev/stdin"], &bom, "UTF-16"),
        (vec!["generate", "--checkpoint", r, "--prompt", "-", "--max-tokens", "2"], &le, "UTF-16LE"),
        (vec!["chat", "--checkpoint", r], &le, "UTF-16LE"),
        (vec!["chat", "--checkpoint", r], &be, "UTF-16BE"),
    ] {
        let mut child =
            ddl(&dir).args(&args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        {
            use std::io::Write;
            // (A reader that stops early closes the pipe: not this test's concern.)
            let _ = child.stdin.take().unwrap().write_all(input);
        }
        let o = child.wait_with_output().unwrap();
        let t = text(&o);
        if o.status.code() != Some(1)
            || !t.contains("it is UTF-16 text")
            || !t.contains(&format!("iconv -f {enc} -t UTF-8"))
            || t.contains("LATIN1")
        {
            wrong.push(format!("{args:?}: {t}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A chat read from a pipe whose lines the model could not be given (characters a char model
/// lacks: an emoji, an accent, a control character, a NUL) goes on with the others and then ends
/// with status 1, saying how many (it ended with 0: a script saw only the replies); one whose
/// lines all reached the model ends with 0.
#[test]
fn a_piped_chat_with_lines_it_could_not_send_ends_with_an_error() {
    let dir = ddl::testing::scratch_dir("generate-chat-refused");
    let run = char_run(&dir);
    let trace = dir.join("chat.safetensors");
    let tr = trace.to_str().unwrap();
    let (code, out, err) =
        chat_ending(&dir, &run, &["--max-tokens", "2", "--trace", tr], "A\nB \u{1f389}\ncaf\u{e9}\nC\u{1}\0D\nE\n");
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("error: character '🎉'") && err.contains("error: character 'é'"), "{err}");
    assert!(err.contains("3 lines of standard input could not be sent to the model"), "{err}");
    // (Each said as skipped: "type it again" is for a terminal.)
    assert!(err.contains("the line is skipped (correct it in the input)") && !err.contains("type it again"), "{err}");
    // The lines around them were replied to, a turn each, and the trace written.
    assert_eq!(turn_seeds(&trace).len(), 2, "{err}");
    let (code, _, err) = chat_ending(&dir, &run, &["--max-tokens", "2"], "A\nE\n");
    assert_eq!(code, Some(0), "{err}");
}

/// A `--prompt` or `tokenizer encode --text` that is the name of a file here is said to be read as
/// its name, with `- < FILE` for the file's text (the name was tokenised without a word: `--prompt
/// corpus.txt` generated after its 10 characters); a prompt that names no file is not.
#[test]
fn a_prompt_that_names_a_file_is_said_to_be_read_as_its_name() {
    let dir = ddl::testing::scratch_dir("generate-prompt-file-name");
    let run = char_run(&dir);
    let r = run.to_str().unwrap();
    let said = "is the text itself, not a file's name: 'corpus.txt' (a file here) is read as 10 characters";
    for (args, flag) in [
        (vec!["generate", "--checkpoint", r, "--prompt", "corpus.txt", "--max-tokens", "2"], "--prompt"),
        (vec!["tokenizer", "encode", "--tokenizer", r, "--text", "corpus.txt"], "--text"),
    ] {
        let o = ddl(&dir).args(&args).current_dir(&dir).output().unwrap();
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert!(t.contains(&format!("note: {flag} {said}")) && t.contains(&format!("{flag} - < corpus.txt")), "{t}");
    }
    let o = ok(&dir, &["generate", "--checkpoint", r, "--prompt", "ROMEO.txt", "--max-tokens", "2"]);
    assert!(!text(&o).contains("not a file's name"), "{}", text(&o));
}

/// A text cached by `eval --text` is checked for UTF-16 each time it is evaluated, not only when
/// it is tokenised: a file cached before that check existed (UTF-16 without a byte-order mark,
/// valid UTF-8 to a reader that does not look) was evaluated from its cached tokens unchecked.
/// Such a cache is made here by writing UTF-16 of the same size and modification time over a
/// cached text (the cache's key is what `stat` tells), and the cached set is removed.
#[test]
fn a_text_cached_before_the_utf16_check_is_checked_when_read_from_the_cache() {
    let dir = ddl::testing::scratch_dir("generate-utf16-cached");
    let run = bpe_run(&dir);
    let r = run.to_str().unwrap();
    let corpus = std::fs::read_to_string(ddl::testing::small_corpus(&dir)).unwrap();
    let file = dir.join("text.txt");
    std::fs::write(&file, &corpus[..4000]).unwrap();
    let f = file.to_str().unwrap();
    ok(&dir, &["eval", "--checkpoint", r, "--text", f]);
    let cached = |d: &Path| std::fs::read_dir(d.join("shards")).map(|e| e.count()).unwrap_or(0);
    let cache = dir.join("cache");
    let before = cached(&cache);
    assert!(before > 0, "no set cached under {}", cache.display());
    let when = std::fs::metadata(&file).unwrap().modified().unwrap();
    let le: Vec<u8> = corpus[..2000].encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
    assert_eq!(le.len(), 4000);
    std::fs::write(&file, &le).unwrap();
    std::fs::File::options().write(true).open(&file).unwrap().set_modified(when).unwrap();
    fails(&dir, &["eval", "--checkpoint", r, "--text", f], &["it is UTF-16 text", "iconv -f UTF-16LE -t UTF-8"]);
    assert_eq!(cached(&cache), before - 1, "the set of the UTF-16 text is removed");
}

/// A BPE prompt with Windows line ends is said to hold them, the `\r` read as text (it was kept
/// without a word; a char model refuses the `\r` with the same remedy); one without them is not.
#[test]
fn a_bpe_prompt_with_windows_line_ends_is_said() {
    let dir = ddl::testing::scratch_dir("generate-bpe-crlf");
    let run = bpe_run(&dir);
    let r = run.to_str().unwrap();
    let said = "note: the prompt has Windows line ends";
    let o = ok(&dir, &["generate", "--checkpoint", r, "--prompt", "ROMEO:\r\nJULIET:", "--max-tokens", "2"]);
    assert!(text(&o).contains(said) && text(&o).contains("tr -d '\\r'"), "{}", text(&o));
    let o = ok(&dir, &["generate", "--checkpoint", r, "--prompt", "ROMEO:\nJULIET:", "--max-tokens", "2"]);
    assert!(!text(&o).contains(said), "{}", text(&o));
}

/// A folder as standard input (`< DIR`) is said with what to give (it was the system's "Is a
/// directory (os error 21)" alone), and `--prompt -` or `--text -` on a terminal says it waits
/// for the text and how to end it (it waited without a word, as if it hung).
#[test]
fn standard_input_that_is_a_folder_or_a_terminal_is_said() {
    let dir = ddl::testing::scratch_dir("generate-stdin-kinds");
    let run = char_run(&dir);
    let r = run.to_str().unwrap();
    let mut wrong = Vec::new();
    for (args, want) in [
        (vec!["generate", "--checkpoint", r, "--prompt", "-"], "--prompt -: standard input is a folder, not text"),
        (vec!["chat", "--checkpoint", r], "standard input is a folder, not lines of text"),
    ] {
        let o = ddl(&dir).args(&args).stdin(std::fs::File::open(&dir).unwrap()).output().unwrap();
        let t = text(&o);
        if o.status.code() != Some(1) || !t.contains(want) || !t.contains("redirect a file (`< FILE`)") {
            wrong.push(t);
        }
    }
    #[cfg(unix)]
    {
        use std::io::{BufRead, Write};
        use std::os::fd::FromRawFd;
        use std::ptr::null_mut;
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty writes two new file descriptors, each then owned by one File.
        assert_eq!(unsafe { libc::openpty(&mut master, &mut slave, null_mut(), null_mut(), null_mut()) }, 0);
        let (mut master, slave) = unsafe { (std::fs::File::from_raw_fd(master), std::fs::File::from_raw_fd(slave)) };
        let mut child = ddl(&dir)
            .args(["tokenizer", "encode", "--tokenizer", r, "--text", "-"])
            .stdin(slave)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // (A line and Ctrl-D, typed at once: the terminal holds them until they are read.)
        master.write_all(b"AB\n\x04").unwrap();
        let (mut said, mut stderr) = (String::new(), std::io::BufReader::new(child.stderr.take().unwrap()));
        stderr.read_line(&mut said).unwrap();
        if !said.contains("--text -: reading standard input: type the text, then Ctrl-D") {
            wrong.push(said);
        }
        let o = child.wait_with_output().unwrap();
        drop((stderr, master));
        assert!(o.status.success() && !o.stdout.is_empty(), "{}", text(&o));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// `ddl eval --text` of a text whose characters a char model lacks names Windows line ends and
/// a byte-order mark, which no one sees in the text, with a command that removes them, and
/// `--text -` points to `/dev/stdin` (it said "'-' does not exist"), and a link to nothing is
/// said to be one as `--text`'s (it said "corpus").
#[test]
fn eval_text_names_characters_no_one_sees_and_standard_input() {
    let dir = ddl::testing::scratch_dir("generate-eval-unseen");
    let run = char_run(&dir);
    let corpus = std::fs::read_to_string(ddl::testing::small_corpus(&dir)).unwrap();
    let crlf = dir.join("crlf.txt");
    std::fs::write(&crlf, corpus[..2000].replace('\n', "\r\n")).unwrap();
    let bom = dir.join("bom.txt");
    std::fs::write(&bom, format!("\u{feff}{}", &corpus[..2000])).unwrap();
    let mut wrong = Vec::new();
    for (text_path, needles) in [
        (crlf.to_str().unwrap(), &["character '\\r'", "Windows line ends", "tr -d '\\r'"][..]),
        (
            bom.to_str().unwrap(),
            &["character '\\u{feff}' at byte 0", "a byte-order mark", "sed -i '1s/^\\xEF\\xBB\\xBF//'"],
        ),
        ("-", &["does not read standard input", "--text /dev/stdin"]),
    ] {
        let o = ddl(&dir).args(["eval", "--checkpoint", run.to_str().unwrap(), "--text", text_path]).output().unwrap();
        let t = text(&o);
        if o.status.code() != Some(1) || t.contains("panicked") || !needles.iter().all(|n| t.contains(n)) {
            wrong.push(t);
        }
    }
    // A link to nothing is said as `--text`'s (it was "corpus '…' is a symbolic link …").
    #[cfg(unix)]
    {
        let link = dir.join("link.txt");
        std::os::unix::fs::symlink("gone.txt", &link).unwrap();
        let o =
            ddl(&dir).args(["eval", "--checkpoint", run.to_str().unwrap(), "--text", link.to_str().unwrap()]).output();
        let t = text(&o.unwrap());
        if !t.contains(&format!("--text '{}' is a symbolic link that leads nowhere", link.display()))
            || t.contains("corpus")
        {
            wrong.push(t);
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// UTF-16 text (a file Windows' Notepad saved as "Unicode", PowerShell's `>`) is said to be
/// UTF-16 with `iconv -f UTF-16` as the remedy, by `eval --text`, `generate --prompt -` and a chat
/// reading it: the remedy was `iconv -f LATIN1`, which makes it a text of NUL characters, and a
/// chat sent every line after the first (valid UTF-8, NULs between the letters) to the model.
#[test]
fn utf16_text_is_said_to_be_utf16_with_its_conversion() {
    let dir = ddl::testing::scratch_dir("generate-utf16");
    let run = char_run(&dir);
    let r = run.to_str().unwrap();
    let mut utf16 = vec![0xff, 0xfe];
    utf16.extend("ROMEO:\nJULIET:\n".encode_utf16().flat_map(|u| u.to_le_bytes()));
    let file = dir.join("notepad.txt");
    std::fs::write(&file, &utf16).unwrap();
    let mut wrong = Vec::new();
    for args in [
        vec!["eval", "--checkpoint", r, "--text", file.to_str().unwrap()],
        vec!["generate", "--checkpoint", r, "--prompt", "-"],
        vec!["chat", "--checkpoint", r],
    ] {
        let o = ddl(&dir).args(&args).stdin(std::fs::File::open(&file).unwrap()).output().unwrap();
        let t = text(&o);
        if o.status.code() != Some(1)
            || !t.contains("it is UTF-16 text")
            || !t.contains("iconv -f UTF-16 -t UTF-8")
            || t.contains("LATIN1")
        {
            wrong.push(t);
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The history of chats on a terminal (`DDL_CACHE_DIR/chat-history.txt`, ↑/↓ across chats): two
/// chats at once keep every line of both, the file whole in the line editor's format (each saved
/// its own lines over the file, truncating it first: the other chat's lines were lost, a longer
/// file's tail left behind a shorter one); a cache that cannot be written is said once, with why
/// and what to do (the history was silently not kept).
#[cfg(unix)]
#[test]
fn chat_history_keeps_two_chats_lines_and_says_when_it_cannot_be_kept() {
    use std::io::{BufRead, Read, Write};
    use std::time::{Duration, Instant};
    let dir = ddl::testing::scratch_dir("generate-chat-history");
    let run = char_run(&dir);
    // A chat on a terminal (a pseudo-terminal's other end kept by the test) with `cache` as its
    // cache folder; returns it, the terminal (its master end and a copy of the chat's end, whose
    // modes say when the line editor reads) and its stderr's lines once the chat has started.
    let start = |cache: &Path| {
        use std::os::fd::FromRawFd;
        use std::ptr::null_mut;
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty writes two new file descriptors, each then owned by one File.
        assert_eq!(unsafe { libc::openpty(&mut master, &mut slave, null_mut(), null_mut(), null_mut()) }, 0);
        let (master, slave) = unsafe { (std::fs::File::from_raw_fd(master), std::fs::File::from_raw_fd(slave)) };
        let tty = slave.try_clone().unwrap();
        let mut child = ddl(&dir)
            .args(["chat", "--checkpoint", run.to_str().unwrap(), "--max-tokens", "1"])
            .env("DDL_CACHE_DIR", cache)
            .stdin(slave)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        stderr.read_line(&mut first).unwrap();
        assert!(first.starts_with("chat with "), "{first}");
        (child, (master, tty), stderr)
    };
    type Chat = (std::process::Child, (std::fs::File, std::fs::File), std::io::BufReader<std::process::ChildStderr>);
    // Waits until the line editor reads the terminal (raw mode: ICANON off): a line typed before
    // may be dropped (the test typed after fixed pauses, and on a loaded machine lines, or a
    // `/quit`, were lost and the test failed or hung).
    let reading = |tty: &std::fs::File| {
        use std::os::fd::AsRawFd;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            // SAFETY: termios is plain data; tcgetattr fills it for an open terminal.
            let mut t: libc::termios = unsafe { std::mem::zeroed() };
            assert_eq!(unsafe { libc::tcgetattr(tty.as_raw_fd(), &mut t) }, 0);
            if t.c_lflag & libc::ICANON == 0 {
                return;
            }
            assert!(Instant::now() < deadline, "the chat's line editor did not read the terminal within 120 s");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let type_line = |chat: &mut Chat, line: &str| {
        reading(&chat.1.1);
        chat.1.0.write_all(format!("{line}\n").as_bytes()).unwrap();
    };
    // The chat's end, within 120 s (killed and failed after: it never hangs the suite).
    let end = |(mut child, tty, mut stderr): Chat| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the chat did not end within 120 s of its /quit");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut err = String::new();
        stderr.read_to_string(&mut err).unwrap();
        assert!(child.wait().unwrap().success(), "{err}");
        drop(tty);
        err
    };
    // Until `line` is in the history file (added as the editor returns it).
    let cache = dir.join("chat-cache");
    let history = cache.join("chat-history.txt");
    let added = |line: &str| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !std::fs::read_to_string(&history).is_ok_and(|t| t.lines().any(|l| l == line)) {
            assert!(Instant::now() < deadline, "'{line}' was not added to {} within 120 s", history.display());
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // Both chats started (each has read the history as it was: none), then lines typed to both
    // in turn, each chat adding its line to the file while the other holds it too.
    let mut chats = [start(&cache), start(&cache)];
    let lines = |who: usize| (0..30).map(move |i| format!("/set seed {}", who * 1000 + i));
    for (a, b) in lines(0).zip(lines(1)) {
        type_line(&mut chats[0], &a);
        type_line(&mut chats[1], &b);
        added(&a);
        added(&b);
    }
    for chat in &mut chats {
        type_line(chat, "/quit");
    }
    for chat in chats {
        let err = end(chat);
        assert!(!err.contains("will not be kept"), "{err}");
    }
    let text = std::fs::read_to_string(&history).unwrap();
    assert!(text.starts_with("#V2\n"), "{text}");
    // (Each chat's `/quit` too, the second left out where it follows the first, as the editor does.)
    let mut got: Vec<&str> = text.lines().skip(1).filter(|l| *l != "/quit").collect();
    got.sort_unstable();
    let mut want: Vec<String> = lines(0).chain(lines(1)).collect();
    want.sort_unstable();
    assert_eq!(got, want, "{text}");
    // A cache folder that is a file: said once, at the start, with the file in the way.
    let file = dir.join("cache-file");
    std::fs::write(&file, "x").unwrap();
    let mut chat = start(&file);
    for line in ["/set seed 1", "/set seed 2", "/quit"] {
        type_line(&mut chat, line);
        // (The editor leaves raw mode as it returns the line; the next is typed once it reads again.)
        std::thread::sleep(Duration::from_millis(200));
    }
    let err = end(chat);
    let note = format!("'{}' is a file, not a folder", file.display());
    assert_eq!(err.matches("will not be kept in its history").count(), 1, "{err}");
    assert!(err.contains(&note) && err.contains("set DDL_CACHE_DIR to a folder you can write"), "{err}");
}
