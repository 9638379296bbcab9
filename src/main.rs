//! The `ddl` command line.

mod bench_cmd;
mod cli;
mod train_cmd;

use anyhow::{Context, Result};
use clap::Parser;

use cli::*;
use ddl::gpu::BackendChoice;

fn main() {
    // Output piped into a reader that stops early (`ddl ... | head`) ends the process quietly, as
    // with other command-line tools, instead of a panic in `print!` on the broken pipe.
    #[cfg(unix)]
    // SAFETY: restores the default disposition of one signal before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Before any thread or wgpu call: no "XDG_RUNTIME_DIR is invalid" lines from the driver.
    ddl::gpu::use_private_runtime_dir();
    if let Err(e) = check_env() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        if e.downcast_ref::<Interrupted>().is_some() {
            // Saved and said so; 130 as for a program Ctrl-C ended (143 after SIGTERM), so that a
            // script stops here.
            std::process::exit(ddl::train::interrupted_status());
        }
        // Ctrl-C while a corpus was tokenised (by any command that needed its shard cache).
        use ddl::train::{TrainError, data::DataError};
        let cache = |d: &DataError| matches!(d, DataError::CacheInterrupted(_));
        if e.downcast_ref::<TrainError>().is_some_and(|t| matches!(t, TrainError::Data(d) if cache(d)))
            || e.downcast_ref::<DataError>().is_some_and(cache)
        {
            eprintln!("{}", error_text(&e));
            std::process::exit(ddl::train::interrupted_status());
        }
        eprintln!("error: {}", error_text(&e));
        std::process::exit(1);
    }
}

/// The environment variables the command line reads in place of its flags, checked in their own
/// names (clap would name the flag): an empty one is no setting (as an empty `DDL_CACHE_DIR` is).
fn check_env() -> Result<(), String> {
    for var in ["DDL_BACKEND", "DDL_ADAPTER", "DDL_NO_AUTOTUNE"] {
        if std::env::var_os(var).is_some_and(|v| v.is_empty()) {
            // SAFETY: before any thread of this process exists (only the runtime-dir setup ran).
            unsafe { std::env::remove_var(var) };
        }
    }
    // (A flag given wins over its variable, which is then not read.)
    let flag = |f: &str| std::env::args().any(|a| a == f || a.starts_with(&format!("{f}=")));
    if let Some(v) = std::env::var_os("DDL_NO_AUTOTUNE").filter(|_| !flag("--no-autotune")) {
        let v = v.to_string_lossy().to_ascii_lowercase();
        if !["1", "0", "true", "false", "yes", "no", "on", "off", "y", "n", "t", "f"].contains(&v.as_str()) {
            return Err(format!(
                "DDL_NO_AUTOTUNE={v}: expected 1 (or true, yes, on) to skip measuring matmul tiles, 0 (or false, no, \
                 off) to measure; set it to one of those or unset it"
            ));
        }
    }
    if let Some(v) = std::env::var_os("DDL_BACKEND").filter(|_| !flag("--backend")) {
        let v = v.to_string_lossy();
        BackendChoice::parse(&v).map_err(|e| format!("DDL_BACKEND={v}: {e}; set it to one of those or unset it"))?;
    }
    Ok(())
}

/// Standard input as text, refused past `cap` bytes (a pipe from /dev/zero would never end),
/// the refusal giving `remedy`.
fn read_stdin_capped(what: &str, cap: u64, remedy: &str) -> Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(cap + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("{what}: reading standard input"))?;
    if bytes.len() as u64 > cap {
        anyhow::bail!("{what}: standard input gave more than {} MiB; {remedy}", cap >> 20);
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{what}: standard input is not UTF-8 text (first invalid byte at offset {}): convert it (e.g. `iconv -f \
             LATIN1 -t UTF-8`)",
            e.utf8_error().valid_up_to()
        )
    })?;
    // A file's byte-order mark (Windows editors write one) is not text, as a corpus's is not: it
    // was an unknown character to a char model and three tokens to a BPE.
    Ok(text.strip_prefix('\u{feff}').map(str::to_string).unwrap_or(text))
}

/// A command that Ctrl-C stopped after saving its work (exit status 130).
#[derive(Debug)]
pub(crate) struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// The error and its causes on one line, each cause once: our error types already include their
/// source's text in their message, so a cause whose text is already there is not repeated.
fn error_text(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg
}

fn run(cli: Cli) -> Result<()> {
    if std::env::var_os("DDL_CHECK_ARGS").is_some() {
        return check_args(&cli);
    }
    match cli.cmd {
        Cmd::Info { checkpoint: Some(dir), json, .. } if ddl::train::curves::is_experiment(&dir) => {
            let info = ddl::experiment::status::describe(&dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                print!("{}", info.text());
            }
            Ok(())
        }
        Cmd::Info { checkpoint: Some(dir), json, .. } => {
            let info = ddl::train::describe::describe(&dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                print!("{}", info.text());
            }
            Ok(())
        }
        Cmd::Info {
            preset,
            variant,
            sets,
            batch,
            seq,
            f16_state,
            precision,
            recompute,
            head_chunk,
            memory,
            json,
            ..
        } => match preset {
            Some(p) => {
                let cfg = info_config(&p, &variant, &sets)?;
                let asked = ddl::model::Storage {
                    state_f16: f16_state,
                    precision,
                    recompute,
                    head_chunk,
                    ..Default::default()
                };
                let mut plan = info_model(&cli.device, &p, &cfg, &sets, batch, seq, asked, json)?;
                if let Some(bytes) = memory {
                    plan["fit"] = info_fit(&p, &cfg, seq, head_chunk, bytes, json)?;
                }
                if json {
                    println!("{}", serde_json::to_string_pretty(&plan)?);
                }
                Ok(())
            }
            None => info(&cli.device, json),
        },
        Cmd::Bench(b) => bench_cmd::bench(&cli.device, b),
        Cmd::Tokenizer(t) => tokenizer(t),
        Cmd::Data(d) => data_cmd(d),
        Cmd::Golden { files, quiet, f16_state, precision, head_chunk } => {
            let st = ddl::model::Storage { state_f16: f16_state, precision, head_chunk, ..Default::default() };
            golden(&cli.device, &golden_files(&files)?, quiet, st)
        }
        Cmd::Train(a) => train_cmd::train(&cli.device, a),
        Cmd::Eval(a) => eval(&cli.device, a),
        Cmd::Plot { runs, out, metric, x, smooth, json } => {
            use ddl::train::curves::{Metric, PlotOptions, XAxis, ends_text, plot_runs};
            let metric = Metric::parse(&metric).map_err(|e| anyhow::anyhow!("--metric: {e}"))?;
            let x = XAxis::parse(&x).map_err(|e| anyhow::anyhow!("--x: {e}"))?;
            let ends = plot_runs(&PlotOptions { runs, out: out.clone(), metric, x, smooth })?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "out": out,
                        "runs": ends.runs,
                        "groups": ends.groups,
                        "left_out": ends.left_out,
                        "unreadable": ends.unreadable,
                    }))?
                );
            } else {
                print!("{}", ends_text(&ends));
                println!("wrote {}", out.display());
            }
            Ok(())
        }
        Cmd::Experiment { spec, out, report_only, speed, dry_run, jobs } => {
            experiment(&cli.device, &spec, &out, report_only, speed, dry_run, jobs)
        }
        Cmd::Generate {
            checkpoint,
            prompt,
            sampling,
            trace,
            strict_context,
            intervene,
            allow_out_of_range,
            compare,
            samples,
            logprobs,
            score_prompt,
            lens,
            json,
        } => {
            let iv = ddl::model::Interventions::parse(&intervene, allow_out_of_range)?;
            for note in iv.notes() {
                eprintln!("{note}");
            }
            if compare && iv.is_empty() {
                anyhow::bail!("--compare compares a generation with and without --intervene SPEC: give at least one");
            }
            if compare && trace.is_some() {
                anyhow::bail!(
                    "--compare writes no trace: drop --trace, or run the intervened generation alone to trace it"
                );
            }
            if samples > 1 {
                check_samples(samples, &sampling, trace.is_some(), compare)?;
            }
            let how = GenerateHow {
                trace: trace.as_deref(),
                strict_context,
                interventions: &iv,
                compare,
                samples,
                logprobs,
                score_prompt,
                lens,
                json,
                stop_cleanly: true,
            };
            generate_cmd(&cli.device, &checkpoint, &prompt, &sampling, how)
        }
        Cmd::Chat { checkpoint, sampling, trace, intervene, allow_out_of_range, logprobs } => {
            let iv = ddl::model::Interventions::parse(&intervene, allow_out_of_range)?;
            for note in iv.notes() {
                eprintln!("{note}");
            }
            let opts = ddl::chat::ChatOptions { trace: trace.as_deref(), interventions: iv };
            chat(&cli.device, &checkpoint, sampling, logprobs, opts)
        }
    }
}

/// `--samples N` (N > 1) against the settings that make it pointless or ambiguous, before the
/// adapter opens.
fn check_samples(samples: usize, sa: &SamplingArgs, trace: bool, compare: bool) -> Result<()> {
    if sa.temperature == 0.0 {
        anyhow::bail!(
            "--samples {samples} with --temperature 0: greedy decoding gives the same text every time; raise \
             --temperature (e.g. 0.8) or drop --samples"
        );
    }
    if trace {
        anyhow::bail!("--samples {samples} with --trace: a trace holds one generation; drop --samples, or --trace");
    }
    if compare {
        anyhow::bail!(
            "--samples {samples} with --compare: a comparison is one generation with and without the interventions; \
             drop --samples (give --seed to compare another sample)"
        );
    }
    if sa.seed.checked_add(samples as u64 - 1).is_none() {
        anyhow::bail!(
            "--seed {} --samples {samples}: the samples' seeds (--seed, --seed + 1, …) pass 2^64 − 1; give a \
             --seed of at most {}",
            sa.seed,
            u64::MAX - (samples as u64 - 1)
        );
    }
    Ok(())
}

/// `DDL_CHECK_ARGS=1 ddl …`: the command line parsed and its kernel forms checked (`DDL_FORMS`,
/// `--against-forms`, against a GPU's defaults with every feature), a bench command's settings
/// made and its flags checked as `ddl bench` checks them before its adapter opens, then nothing
/// run and no adapter opened: the GPU check's local run checks so every command it will run on a
/// device (a typo there costs device minutes).
fn check_args(cli: &Cli) -> Result<()> {
    let all = wgpu::Features::all();
    let forms = |what: &str, spec: &str| -> Result<()> {
        let mut f = ddl::kernels::forms::Forms::defaults(false, (32, 32), all);
        f.apply(spec, all).map_err(|e| anyhow::anyhow!("{what} {spec:?}: {e}"))
    };
    if let Ok(spec) = std::env::var("DDL_FORMS") {
        forms("DDL_FORMS", &spec)?;
    }
    if let Cmd::Bench(b) = &cli.cmd {
        // What `ddl bench` checks before its adapter opens (settings, flags, --against-forms).
        bench_cmd::check_without_adapter(b)?;
    }
    println!("ddl: the command line and its forms are valid (DDL_CHECK_ARGS is set: nothing run)");
    Ok(())
}

fn tokenizer(cmd: TokenizerCmd) -> Result<()> {
    match cmd {
        TokenizerCmd::Train { corpus, vocab_size, out, force } => {
            train_cmd::refuse_inside_kept("--out", &out)?;
            refuse_pipe("--corpus", &corpus, "`ddl tokenizer train` reads its corpus twice (to train, then to count)")?;
            check_tokenizer_out(&corpus, &out, force)?;
            // The corpus is read in pieces (a corpus of gigabytes is never held whole), twice:
            // to train, then to count the tokens.
            let t0 = std::time::Instant::now();
            // JSON lines (a file, or in a folder): their documents' text, as `ddl data prepare`
            // reads them; else the text of the file or the folder's .txt files.
            // (Each read's progress on a terminal: minutes of a large corpus were silent.)
            let (tok, bytes, n) = if ddl::train::prepare::has_documents(&corpus) {
                ddl::train::prepare::train_bpe_on_documents(std::slice::from_ref(&corpus), vocab_size, true)?
            } else {
                let tok = ddl::train::data::train_corpus_bpe(&corpus, vocab_size, true)?;
                let (bytes, n) = ddl::train::data::corpus_token_count(&corpus, &tok, true)?;
                (tok, bytes, n)
            };
            let secs = t0.elapsed().as_secs_f64();
            if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty() && !d.is_dir()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("--out {}: cannot make the folder '{}'", out.display(), dir.display()))?;
            }
            // (Without --force never over a file made meanwhile: two trainers racing to one --out.)
            tok.save_as(&out, force)?;
            let short = if tok.vocab_size() < vocab_size {
                // (A merge needs a pair seen at least twice: a small corpus runs out of them.)
                "; the corpus has no more pairs of tokens that occur twice to merge"
            } else {
                ""
            };
            println!("trained in {secs:.1} s: vocab size {} (asked for {vocab_size}{short})", tok.vocab_size());
            println!(
                "compression: {:.3} bytes per token ({bytes} bytes -> {n} tokens)",
                bytes as f64 / n.max(1) as f64
            );
            println!("wrote {}", out.display());
        }
        TokenizerCmd::Encode { tokenizer, text, pieces } => {
            let tok = tokenizer_for(&tokenizer)?;
            let text = if text == "-" {
                read_stdin_capped(
                    "--text -",
                    1 << 30,
                    "encode it in pieces, or tokenize a corpus with `ddl data prepare`, which streams files of any size",
                )?
            } else {
                text
            };
            let ids = tok.encode(&text).map_err(|e| match e {
                ddl::tokenizer::TokenizerError::Unknown { .. } => anyhow::anyhow!(
                    "--text: {e}; the tokenizer of {} cannot encode it: leave that character out, or use a \
                     tokenizer made from a corpus that has it",
                    tokenizer.display()
                ),
                e => anyhow::anyhow!("--text: {e}"),
            })?;
            if pieces {
                let mut out = String::new();
                for &id in &ids {
                    let text = ddl::train::eval::tsv_field(&tok.decode(&[id]).unwrap_or_default());
                    out.push_str(&format!("{id}\t{text}\n"));
                }
                print!("{out}");
            } else {
                println!("{}", ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(" "));
            }
        }
        TokenizerCmd::Decode { tokenizer, ids } => {
            use std::io::{IsTerminal, Write};
            let tok = tokenizer_for(&tokenizer)?;
            let ids = if ids == "-" { read_stdin_capped("--ids -", 1 << 30, "decode the ids in pieces")? } else { ids };
            let ids = parse_ids(&ids, tok.vocab_size()).map_err(|e| anyhow::anyhow!("--ids: {e}"))?;
            let text = tok.decode(&ids).map_err(|e| anyhow::anyhow!("--ids: {e}"))?;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            if std::io::stdout().is_terminal() && !text.ends_with('\n') {
                writeln!(out)?;
            }
            out.flush()?;
        }
    }
    Ok(())
}

/// `--tokenizer` of `ddl tokenizer encode` and `decode`: a tokenizer.json or a run's.
fn tokenizer_for(path: &std::path::Path) -> Result<ddl::tokenizer::Tokenizer> {
    if path.as_os_str() == "char" {
        anyhow::bail!(
            "--tokenizer char: a character tokenizer is made from a corpus (`ddl train` and `ddl data prepare` build \
             one); give a tokenizer.json, or a run folder for its model's tokenizer"
        );
    }
    Ok(ddl::train::load_tokenizer(path)?)
}

/// Token ids separated by spaces or commas, each below `vocab`.
fn parse_ids(text: &str, vocab: usize) -> std::result::Result<Vec<u32>, String> {
    let words: Vec<&str> = text.split(|c: char| c.is_whitespace() || c == ',').filter(|w| !w.is_empty()).collect();
    if words.is_empty() {
        return Err(
            "no ids: give token ids separated by spaces or commas (as `ddl tokenizer encode` prints them)".into()
        );
    }
    words
        .iter()
        .enumerate()
        .map(|(i, w)| match w.parse::<u64>() {
            Ok(id) if (id as u128) < vocab as u128 => Ok(id as u32),
            Ok(id) => Err(format!(
                "id {id} (the {} of the ids) is outside the tokenizer's vocabulary of {vocab} (ids 0 to {})",
                ordinal(i + 1),
                vocab - 1
            )),
            Err(_) => Err(format!(
                "'{w}' (the {} of the ids) is not a token id: expected whole numbers from 0 to {}, separated by \
                 spaces or commas",
                ordinal(i + 1),
                vocab.saturating_sub(1)
            )),
        })
        .collect()
}

/// 1st, 2nd, 3rd, 4th, … 11th, 12th, 13th, 21st.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// `ddl tokenizer train --out`: not the corpus (or one of its files), not a folder, and not an
/// existing file unless `force`; its folder exists or can be made. Checked before the (long)
/// training.
fn check_tokenizer_out(corpus: &std::path::Path, out: &std::path::Path, force: bool) -> Result<()> {
    let shown = out.display();
    if ddl::train::data::path_problem(out) == Some(ddl::train::data::PathProblem::BrokenLink) {
        anyhow::bail!(
            "--out {shown} is a symbolic link that leads nowhere (its target is missing, or the links loop); give \
             a file name, or remove the link"
        );
    }
    if out.is_dir() {
        anyhow::bail!(
            "--out {shown} is a folder; give the tokenizer's file name, e.g. {}",
            out.join("tokenizer.json").display()
        );
    }
    // A missing folder is made after the training, as `ddl data prepare` makes its --out's; one
    // that cannot be (a file in its place) is refused now.
    let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if let Some(file) = ddl::train::data::file_in_the_way(dir) {
        anyhow::bail!(
            "--out {shown}: '{}' is a file, so the folder '{}' cannot be made; choose another --out",
            file.display(),
            dir.display()
        );
    }
    if let (Ok(o), Ok(c)) = (out.canonicalize(), corpus.canonicalize())
        && (o == c || (c.is_dir() && o.starts_with(&c) && o.extension().is_some_and(|e| e == "txt")))
    {
        anyhow::bail!(
            "--out {shown} is the corpus (--corpus {}): writing the tokenizer would destroy it; choose another --out",
            corpus.display()
        );
    }
    // (The write renames a new file over the path: a device or a pipe would become a plain file.)
    if let Ok(m) = std::fs::metadata(out)
        && !m.is_file()
    {
        anyhow::bail!("--out {shown} is not a regular file (a device, a pipe or a socket): give a file name");
    }
    if out.exists() && !force {
        anyhow::bail!("--out {shown} exists: pass --force to replace it, or choose another --out");
    }
    // A folder that takes no file (read-only, a name too long, a file system such as /proc) is
    // said before the training, not after it: minutes on a large corpus. Where the folder is
    // still to be made, its nearest existing one is tried.
    let (probe, made) = match dir.ancestors().find(|a| a.as_os_str().is_empty() || a.is_dir()) {
        Some(a) if a == dir => (out.to_path_buf(), None),
        Some(a) => {
            let a = if a.as_os_str().is_empty() { std::path::Path::new(".") } else { a };
            (a.join(".ddl-probe"), Some(a))
        }
        None => (out.to_path_buf(), None),
    };
    if let Err(e) = ddl::train::checkpoint::probe_writable(&probe) {
        let place = match made {
            Some(a) => format!("the folder '{}' cannot be made in '{}'", dir.display(), a.display()),
            None => format!("no file can be written under that name in '{}'", dir.display()),
        };
        anyhow::bail!("--out {shown}: {place} ({e}); choose another --out, or make that folder writable");
    }
    Ok(())
}

fn info(dev: &DeviceArgs, json: bool) -> Result<()> {
    let backend = dev.backend.as_deref().map(BackendChoice::parse).transpose()?;
    let adapters = ddl::gpu::enumerate_adapters(backend);
    if json {
        let gpu = dev.open().context("opening the GPU")?;
        let list: Vec<serde_json::Value> = adapters
            .iter()
            .map(|a| {
                serde_json::json!({
                    "index": a.index,
                    "name": a.info.name,
                    "backend": format!("{:?}", a.info.backend),
                    "device_type": format!("{:?}", a.info.device_type),
                    "driver": a.info.driver,
                })
            })
            .collect();
        let out = serde_json::json!({"adapters": list, "chosen": gpu.to_json()});
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("adapters found: {}", adapters.len());
    for a in &adapters {
        println!("  {a}");
    }
    let gpu = dev.open().context("opening the GPU")?;
    println!("\nchosen:");
    print!("{}", gpu.describe());
    Ok(())
}

fn experiment(
    dev: &DeviceArgs,
    spec_path: &std::path::Path,
    out: &std::path::Path,
    report_only: bool,
    speed: bool,
    dry_run: bool,
    jobs: usize,
) -> Result<()> {
    use ddl::experiment::{ExperimentOptions, ExperimentSpec, run_name};
    if let Some(n) = train_cmd::launched_ranks().filter(|&n| n > 1) {
        // N copies of the grid into one folder: all but one were refused as "in use", naming no
        // cause, and mpirun then stopped the one that trained.
        anyhow::bail!(
            "started as one of {n} MPI processes (mpirun -n {n}): `ddl experiment` has no data-parallel mode, and \
             each process would run the whole grid into the same --out; run it without mpirun (--jobs N trains N of \
             its runs side by side), or train one run data-parallel with `mpirun -n {n} ddl train … --distributed mpi`"
        );
    }
    train_cmd::refuse_inside_kept("--out", out)?;
    let spec = ExperimentSpec::load(spec_path)?;
    let variants = spec.variant_list().map_err(anyhow::Error::msg)?;
    if dry_run {
        // What the real run would refuse, it refuses here too: another process working in --out,
        // another spec's runs in it, or a corpus edited since its runs trained.
        ddl::train::lock::refuse_if_held(out)?;
        ddl::experiment::check_out(&spec, out)?;
        if ddl::experiment::runs_to_do(&spec, out).map_err(anyhow::Error::msg)? > 0 {
            ddl::experiment::same_data_as_trained(&spec, out, &variants, false)?;
        }
        let total: usize = variants.iter().map(|&v| spec.seeds_of(v).len()).sum();
        let mut states = Vec::new();
        for seed in spec.all_seeds() {
            for &v in variants.iter().filter(|&&v| spec.seeds_of(v).contains(&seed)) {
                states.push(ddl::experiment::run_state(&spec, out, v, seed));
            }
        }
        let finished = states.iter().filter(|s| s.starts_with("finished")).count();
        let new = states.iter().filter(|s| s.starts_with("new")).count();
        println!(
            "{total} runs of {} steps, preset {} ({} in {}: {finished} finished, {} to resume, {new} new):",
            spec.steps,
            spec.preset,
            // (Runs restored into a folder without the spec are an experiment's too.)
            if out.join("experiment.toml").exists() || out.join("runs").is_dir() {
                "an experiment"
            } else {
                "a new experiment"
            },
            out.display(),
            total - finished - new
        );
        let mut state = states.iter();
        for seed in spec.all_seeds() {
            for &v in variants.iter().filter(|&&v| spec.seeds_of(v).contains(&seed)) {
                let run = spec.run_config(v, seed).map_err(anyhow::Error::msg)?;
                let mut m = run.model.clone();
                if run.tokenizer == "char" {
                    let path = std::path::Path::new(&run.corpus);
                    m.vocab_size = ddl::train::data::corpus_char_tokenizer(path)?.vocab_size();
                }
                println!(
                    "  {:<20} {:>10} params  batch {}x{}  lr {}  {}",
                    run_name(v, seed),
                    ddl::model::Layout::new(&m).count(),
                    run.train.batch_size,
                    run.train.seq_len,
                    run.train.lr,
                    state.next().map(String::as_str).unwrap_or("")
                );
            }
        }
        return Ok(());
    }
    if report_only && !out.join("experiment.toml").exists() && !out.join("runs").is_dir() {
        anyhow::bail!(
            "--report-only: '{}' holds no experiment (no experiment.toml, no runs/) to report on; run the spec into \
             it first (the same command without --report-only), or restore its runs (scripts/experiment-runs.sh)",
            out.display()
        );
    }
    // What would refuse the grid refuses it before devices open and anything is said: another
    // process working in --out (the grid takes the lock itself), another spec's runs in it.
    ddl::train::lock::refuse_if_held(out)?;
    ddl::experiment::check_out(&spec, out)?;
    let gpu = dev.open().context("opening the GPU")?;
    ddl::kernels::matmul::autotune::set_enabled(!dev.no_autotune);
    eprintln!("experiment {} on {} ({:?}) -> {}", spec_path.display(), gpu.info.name, gpu.info.backend, out.display());
    // `--jobs N`: N − 1 more devices of the same adapter, one run on each (no more devices than
    // runs left to train: each holds a driver's worth of memory).
    let to_do = ddl::experiment::runs_to_do(&spec, out).map_err(anyhow::Error::msg)?;
    let asked = jobs;
    let jobs = jobs.min(to_do.max(1));
    let more_devices = if report_only {
        Vec::new()
    } else {
        (1..jobs)
            .map(|j| dev.open().with_context(|| format!("opening device {} of --jobs {jobs}", j + 1)))
            .collect::<Result<Vec<_>>>()?
    };
    if jobs > 1 && !report_only {
        let capped =
            if asked > jobs { format!(" (of {asked}: {to_do} runs are left to train)") } else { String::new() };
        eprintln!("--jobs {jobs}{capped}: up to {jobs} runs at once, each on its own device of {}", gpu.info.name);
    }
    let opts = ExperimentOptions { out: out.to_path_buf(), report_only, speed, quiet: false, more_devices };
    match ddl::experiment::run(gpu, &spec, &opts)? {
        Some(report) => {
            println!("{}", std::fs::read_to_string(&report).unwrap_or_default());
            println!("report: {}", report.display());
        }
        None => {
            // (What was stopped, and what it kept, is said above: a run's checkpoint, the tiles
            // measured, the finished runs.)
            println!("interrupted: run the same command again to continue");
            return Err(Interrupted.into());
        }
    }
    Ok(())
}

fn eval(dev: &DeviceArgs, a: EvalArgs) -> Result<()> {
    let (dir, json) = (a.checkpoint.clone(), a.json);
    let req = a.request()?;
    if let Some(iv) = &req.intervene {
        for note in iv.notes() {
            eprintln!("{note}");
        }
    }
    let gpu = dev.open().context("opening the GPU")?;
    let r = ddl::train::eval::evaluate_checkpoint(&gpu, &dir, &req)?;
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!("{}", r.line());
    }
    Ok(())
}

/// How `ddl generate` runs besides the prompt and sampling: a trace, the context rule, the
/// interventions (and `--compare`), the number of samples.
pub(crate) struct GenerateHow<'a> {
    pub(crate) trace: Option<&'a std::path::Path>,
    pub(crate) strict_context: bool,
    pub(crate) interventions: &'a ddl::model::Interventions,
    pub(crate) compare: bool,
    pub(crate) samples: usize,
    /// Score each generated token with this many alternatives (`--logprobs`).
    pub(crate) logprobs: Option<usize>,
    /// Score the prompt's tokens too (`--score-prompt`).
    pub(crate) score_prompt: bool,
    /// A logit lens of each continuation (`--lens`).
    pub(crate) lens: bool,
    /// One JSON line per continuation instead of streamed text.
    pub(crate) json: bool,
    /// Ctrl-C stops a continuation at the next token, its text kept (`ddl generate`); else it
    /// ends the process at once (`ddl train --sample`'s sample, whose note says the run was saved).
    pub(crate) stop_cleanly: bool,
}

pub(crate) fn generate_cmd(
    dev: &DeviceArgs,
    dir: &std::path::Path,
    prompt: &str,
    sa: &SamplingArgs,
    how: GenerateHow,
) -> Result<()> {
    use std::io::Write;
    let GenerateHow {
        trace,
        strict_context,
        interventions,
        compare,
        samples,
        logprobs,
        score_prompt,
        lens,
        json,
        stop_cleanly,
    } = how;
    let s = sa.sampler()?;
    let from_stdin = prompt == "-";
    // (What a prompt that long can mean: generation reads its last context of tokens.)
    let too_long = "generation reads only the prompt's last max_seq_len tokens (the model's context; `ddl info \
                    --checkpoint DIR` gives it): pipe in its end, e.g. `tail -n 1000 FILE | ddl generate … --prompt -`; \
                    to score a long text, `ddl eval --checkpoint DIR --text FILE --per-token OUT.tsv`";
    let prompt = if from_stdin { read_stdin_capped("--prompt -", 256 << 20, too_long)? } else { prompt.to_string() };
    if prompt.is_empty() {
        if from_stdin {
            anyhow::bail!("--prompt -: standard input was empty: pipe the prompt in (… | ddl generate --prompt -)");
        }
        anyhow::bail!("--prompt is empty: give at least one token of text");
    }
    if let Some(t) = trace {
        ddl::generate::check_trace_path(t).map_err(anyhow::Error::msg)?;
    }
    let gpu = dev.open().context("opening the GPU")?;
    let (model, tok) = ddl::generate::load_for_inference(&gpu, dir)?;
    // The interventions checked against the model before anything is printed.
    let beta_maps = if interventions.is_empty() { None } else { Some(interventions.maps(&model.cfg)?) };
    let k_mean = interventions.k_mean_targets(&model.cfg)?;
    if lens && let Some(i) = interventions.list.iter().find(|i| i.action == ddl::model::intervene::Action::KMean) {
        anyhow::bail!(
            "--lens with --intervene '{}': the lens reads the model through its evaluation program, which cannot \
             fix a write's direction to the prompt's mean k; drop --lens, or give β or term specs (beta=V, write=0, \
             erase=0, v=0, …)",
            i.spec
        );
    }
    if trace.is_some() && !model.cfg.variant.is_ddl() {
        eprintln!(
            "note: the {} variant has residual additions, not delta writes: the trace holds the tokens only (no β, \
             k or v)",
            model.cfg.variant
        );
    }
    let ids = tok.encode(&prompt).map_err(|e| {
        let crlf = if prompt.contains('\r') && tok.kind() == "char" {
            " (the prompt has Windows line ends, \\r\\n: convert them, e.g. `tr -d '\\r'`)"
        } else {
            ""
        };
        anyhow::anyhow!(
            "--prompt: {e}; the checkpoint's {} tokenizer cannot encode it: leave that character out{crlf}",
            tok.kind()
        )
    })?;
    let cap = model.cfg.max_seq_len;
    if ids.len() > cap {
        let cut = ids.len() - cap;
        if strict_context {
            anyhow::bail!(
                "--prompt has {} tokens, more than the model's context of {cap} (--strict-context): shorten it by \
                 at least {cut} token{}, or drop --strict-context to keep its last {cap} tokens",
                ids.len(),
                if cut == 1 { "" } else { "s" }
            );
        }
        let dropped = tok.decode(&ids[..cut]).unwrap_or_default();
        let shown: String = dropped.chars().take(60).collect();
        let more = if dropped.chars().count() > 60 { "…" } else { "" };
        let (tokens, are) = if cut == 1 { ("token", "is") } else { ("tokens", "are") };
        eprintln!(
            "note: the prompt has {} tokens, more than the context of {cap}; only its last part is used: the first \
             {cut} {tokens} ({shown:?}{more}) {are} dropped (--strict-context refuses such prompts)",
            ids.len()
        );
    }
    let stops = sa.stops()?;
    note_unreachable_stops(&tok, &stops);
    let opts = ddl::generate::GenOptions {
        max_tokens: sa.max_tokens,
        stop: stops,
        stop_token: tok.eot_id(),
        trace: trace.is_some(),
        beta_maps,
        k_mean,
    };
    if compare {
        let maps = opts.beta_maps.clone().expect("--compare needs interventions");
        let c = ddl::generate::compare(&model, &tok, &ids, &opts, &s, maps, &opts.k_mean)?;
        let text = |t: &[u32]| tok.decode(t).unwrap_or_default();
        // (Each text ends its line: no blank line after one that ends in a newline.)
        let line = |t: String| if t.ends_with('\n') { t } else { t + "\n" };
        // (The texts as generation printed them: cut right after a stop text.)
        print!("--- original ---\n{}", line(format!("{prompt}{}", c.original_text)));
        print!("--- with {} ---\n{}", interventions.describe(), line(format!("{prompt}{}", c.intervened_text)));
        println!("---");
        match c.first_difference {
            None => println!("the continuations are identical ({} tokens)", c.original.len()),
            Some(i) => println!(
                "first difference at generated token {i}: {:?} (original) vs {:?} (intervened)",
                c.original.get(i).map(|&t| text(&[t])).unwrap_or_else(|| "(end)".into()),
                c.intervened.get(i).map(|&t| text(&[t])).unwrap_or_else(|| "(end)".into())
            ),
        }
        let d = &c.delta_logprob;
        if !d.is_empty() {
            let mean = d.iter().sum::<f64>() / d.len() as f64;
            let (imin, min) =
                d.iter().enumerate().fold((0, f64::INFINITY), |a, (i, &x)| if x < a.1 { (i, x) } else { a });
            let off = c.original.len() - d.len();
            let at = format!("at token {} ({:?})", imin + off, text(&c.original[imin + off..imin + off + 1]));
            let extreme = if min < 0.0 {
                format!("largest drop {min:+.4} {at}")
            } else {
                format!("no token's log-probability fell (the smallest change {min:+.4} {at})")
            };
            println!(
                "log-probability of the original continuation under the interventions (teacher-forced, each token \
                 in the context generation gave it): mean Δ {mean:+.4} nats per token over {} tokens; {extreme}",
                d.len(),
            );
            let per: Vec<String> = d.iter().map(|x| format!("{x:+.3}")).collect();
            println!("Δ log p per token: {}", per.join(" "));
        }
        return Ok(());
    }
    // The prompt's own tokens, scored once (the same for every sample).
    let prompt_scores = match logprobs.filter(|_| score_prompt) {
        Some(n) => {
            let scores = ddl::generate::prompt_scores(&model, &tok, &ids, n, opts.beta_maps.clone(), &opts.k_mean)?;
            if !json {
                print!("{}", ddl::generate::prompt_scores_table(&scores, n));
            }
            Some(scores)
        }
        None => None,
    };
    let mut traces = Vec::new();
    // Ctrl-C (or SIGTERM) while a continuation is generated stops it at the next token, its text
    // kept (it ended the process at once, without a word): the sample it cut and its tokens.
    let mut stopped = None;
    let stop_now: &dyn Fn() -> bool = &ddl::train::interrupted;
    for i in 0..samples as u64 {
        // Each sample is what its seed gives alone (a fresh sampler, the prompt's caches anew).
        let cfg = ddl::generate::SamplerConfig { seed: s.seed + i, ..s.clone() };
        let seed = cfg.seed;
        let mut sampler = ddl::generate::Sampler::new(cfg);
        if json {
            // The text as it would be printed: cut right after a stop text, even inside the last
            // token (which `tokens` holds whole).
            let mut text = String::new();
            let g = {
                let _ctrlc = stop_cleanly.then(ddl::train::CtrlcScope::new);
                ddl::generate::generate_scored_until(
                    &model,
                    &tok,
                    &ids,
                    &opts,
                    &mut sampler,
                    logprobs,
                    stop_now,
                    |t| text.push_str(t),
                )?
            };
            let cut = g.stop == ddl::generate::Stop::Interrupted;
            let mut line = serde_json::json!({
                "sample": i + 1,
                "seed": seed,
                "prompt": prompt,
                "prompt_tokens": ids.len().min(cap),
                "text": text,
                "tokens": g.tokens,
                "stop": g.stop,
            });
            if logprobs.is_some() {
                line["logprobs"] = serde_json::to_value(&g.scores)?;
            }
            if let Some(p) = &prompt_scores {
                line["prompt_logprobs"] = serde_json::to_value(p)?;
            }
            if lens && !cut {
                let rows = ddl::generate::continuation_lens(&model, &tok, &ids, &g.tokens, opts.beta_maps.as_deref())?;
                line["lens"] = serde_json::json!({ "states": ddl::generate::lens_states(&model), "tokens": rows });
            }
            println!("{line}");
            traces = g.traces;
            if cut {
                stopped = Some((i, g.tokens.len()));
                break;
            }
            continue;
        }
        if samples > 1 {
            println!("--- sample {} of {samples} (--seed {seed}) ---", i + 1);
        }
        print!("{prompt}");
        // The text ends its line: a newline after it unless it ends in one (`--stop '\n'`).
        let mut at_line_start = prompt.is_empty() || prompt.ends_with('\n');
        let g = {
            let _ctrlc = stop_cleanly.then(ddl::train::CtrlcScope::new);
            ddl::generate::generate_scored_until(&model, &tok, &ids, &opts, &mut sampler, logprobs, stop_now, |t| {
                print!("{t}");
                if !t.is_empty() {
                    at_line_start = t.ends_with('\n');
                }
                let _ = std::io::stdout().flush();
            })?
        };
        if !at_line_start {
            println!();
        }
        let cut = g.stop == ddl::generate::Stop::Interrupted;
        if let Some(n) = logprobs {
            let why = match g.stop {
                ddl::generate::Stop::Length => "it reached --max-tokens".to_string(),
                ddl::generate::Stop::StopText => "it reached a --stop text".to_string(),
                ddl::generate::Stop::EndOfText => "the model ended the text (its end-of-text token)".to_string(),
                ddl::generate::Stop::Interrupted => format!("{} stopped it", ddl::train::interruption()),
            };
            print!("{}", ddl::generate::scores_table(&g.scores, n, &why));
        }
        if cut {
            traces = g.traces;
            stopped = Some((i, g.tokens.len()));
            break;
        }
        if lens {
            let rows = ddl::generate::continuation_lens(&model, &tok, &ids, &g.tokens, opts.beta_maps.as_deref())?;
            print!(
                "{}",
                ddl::generate::lens_table(
                    &ddl::generate::lens_states(&model),
                    ddl::generate::lens_step(model.cfg.variant),
                    &g.tokens,
                    &rows,
                    &tok
                )
            );
        }
        traces = g.traces;
    }
    if let Some((i, n)) = stopped {
        let _ = std::io::stdout().flush();
        let of = if samples > 1 {
            format!(" of sample {} of {samples} (the samples after it were not generated)", i + 1)
        } else {
            String::new()
        };
        // A trace holds a whole generation: none is written (an earlier one there stays).
        let no_trace = if trace.is_some() { "; no trace written (an earlier one there is left as it was)" } else { "" };
        eprintln!(
            "{}: stopped the generation after {n} token{}{of}{no_trace}",
            ddl::train::interruption(),
            if n == 1 { "" } else { "s" }
        );
        return Err(Interrupted.into());
    }
    if let Some(path) = trace {
        ddl::generate::write_trace_with(
            path,
            &model.cfg,
            &traces,
            &ddl::generate::TraceOrigin {
                interventions: interventions.describe(),
                allow_out_of_range: interventions.allow_out_of_range && !interventions.is_empty(),
                prompt: prompt.clone(),
                // (--trace takes one sample: its seed is --seed.)
                sampling: Some(s.clone()),
                read: Vec::new(),
                turns: Vec::new(),
                chat: false,
            },
        )
        .with_context(|| format!("writing the trace {}", path.display()))?;
        eprintln!("trace written to {} (+ .json summary)", path.display());
    }
    Ok(())
}

/// A `--stop` text the checkpoint's tokenizer cannot produce (a character a char model lacks)
/// never stops the text: said, so that a long output is not a surprise.
fn note_unreachable_stops(tok: &ddl::tokenizer::Tokenizer, stops: &[String]) {
    for stop in stops.iter().filter(|s| !s.is_empty()) {
        if let Err(e) = tok.encode(stop) {
            eprintln!("note: --stop {stop:?} can never be generated ({e}): it will not stop the text");
        }
    }
}

fn chat(
    dev: &DeviceArgs,
    dir: &std::path::Path,
    sa: SamplingArgs,
    logprobs: Option<usize>,
    opts: ddl::chat::ChatOptions,
) -> Result<()> {
    use std::io::IsTerminal;
    let settings =
        ddl::chat::ChatSettings { sampler: sa.sampler()?, max_tokens: sa.max_tokens, stop: sa.stops()?, logprobs };
    let trace = opts.trace;
    if let Some(t) = trace {
        ddl::generate::check_trace_path(t).map_err(anyhow::Error::msg)?;
    }
    let gpu = dev.open().context("opening the GPU")?;
    let (model, tok) = ddl::generate::load_for_inference(&gpu, dir)?;
    // The interventions checked against the model before the chat opens.
    if !opts.interventions.is_empty() {
        opts.interventions.maps(&model.cfg)?;
    }
    note_unreachable_stops(&tok, &settings.stop);
    eprintln!(
        "chat with {} ({} parameters, context {} tokens). /help lists the commands; Ctrl-D or /quit ends",
        dir.display(),
        model.layout.count(),
        model.cfg.max_seq_len
    );
    let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    // A terminal gets line editing and history; a pipe or file is read line by line.
    let mut edited = None;
    if stdin.is_terminal() {
        let history = ddl::cache_dir().join("chat-history.txt");
        match ddl::chat::EditedLines::new(Some(history)) {
            Ok(e) => edited = Some(e),
            Err(e) => eprintln!("({e}; reading plain lines)"),
        }
    }
    let (mut input, mut log) = (stdin.lock(), stderr.lock());
    let mut plain;
    let lines: &mut dyn ddl::chat::Lines = match edited.as_mut() {
        Some(e) => e,
        None => {
            plain = ddl::chat::PlainLines { input: &mut input, log: &mut log };
            &mut plain
        }
    };
    let mut errlog = std::io::stderr();
    ddl::chat::run(&model, &tok, settings, lines, &mut stdout.lock(), &mut errlog, &opts)?;
    if let Some(p) = trace {
        eprintln!("trace written to {} (+ .json summary)", p.display());
    }
    Ok(())
}

fn data_cmd(d: DataCmd) -> Result<()> {
    use ddl::train::prepare::{PrepareOptions, ValSplit, prepare};
    let (tokenizer, out, inputs, val_tokens, val_fraction, shard_tokens, name) = match d {
        DataCmd::Prepare { tokenizer, out, inputs, val_tokens, val_fraction, shard_tokens, name } => {
            (tokenizer, out, inputs, val_tokens, val_fraction, shard_tokens, name)
        }
        DataCmd::Inspect { data, data_format, tokenizer, split, at, sample, verify, json } => {
            return inspect_cmd(data, data_format, tokenizer, split, at, sample, verify, json);
        }
        DataCmd::Cache { prune, unused_for, clear, dry_run, json } => {
            return cache_cmd(prune || clear, ddl::train::cache::Prune { all: clear, unused_for, dry_run }, json);
        }
    };
    train_cmd::refuse_inside_kept("--out", &out)?;
    let val = match (val_tokens, val_fraction) {
        (Some(n), _) => ValSplit::Tokens(n),
        (None, f) => ValSplit::Fraction(f.unwrap_or(0.1)),
    };
    let opts = PrepareOptions { tokenizer, out: out.clone(), inputs, val, shard_tokens, name, quiet: false };
    let p = match prepare(&opts) {
        // Stopped by Ctrl-C, leaving nothing: said so, and 130 as `ddl train` exits.
        Err(ddl::train::TrainError::Data(e @ ddl::train::data::DataError::Interrupted)) => {
            eprintln!("{e}");
            return Err(Interrupted.into());
        }
        r => r?,
    };
    println!(
        "{} document{}{}, {:.1} MB of text -> {} training and {} validation tokens in {:.1} s ({:.1} MB/s, {:.2} M tokens/s)",
        p.documents,
        if p.documents == 1 { "" } else { "s" },
        match p.empty {
            0 => String::new(),
            1 => " (1 without text skipped)".to_string(),
            n => format!(" ({n} without text skipped)"),
        },
        p.bytes as f64 / 1e6,
        p.train_tokens,
        p.val_tokens,
        p.seconds,
        p.bytes as f64 / 1e6 / p.seconds.max(1e-9),
        (p.train_tokens + p.val_tokens) as f64 / 1e6 / p.seconds.max(1e-9)
    );
    for f in &p.files {
        println!("  {}", f.display());
    }
    println!("train on it with: ddl train --data {} ...", out.display());
    Ok(())
}

/// `ddl data inspect`: what a shard set holds.
#[allow(clippy::too_many_arguments)]
fn inspect_cmd(
    data: String,
    data_format: String,
    tokenizer: Option<std::path::PathBuf>,
    split: String,
    at: usize,
    sample: usize,
    verify: bool,
    json: bool,
) -> Result<()> {
    use ddl::train::inspect::{InspectOptions, Split, inspect};
    use std::io::IsTerminal;
    let format = ddl::train::shards::Format::parse(&data_format).map_err(|e| anyhow::anyhow!("--data-format: {e}"))?;
    let split = Split::parse(&split).map_err(|e| anyhow::anyhow!("--split: {e}"))?;
    let tokenizer = match tokenizer {
        Some(p) => {
            Some((tokenizer_for(&p).with_context(|| format!("--tokenizer {}", p.display()))?, p.display().to_string()))
        }
        None => None,
    };
    let progress = std::io::stderr().is_terminal();
    let info = inspect(&InspectOptions { data, format, tokenizer, split, at, sample, verify, progress })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        print!("{}", info.text());
    }
    Ok(())
}

/// `ddl data cache`: the shard cache listed, or pruned (`remove`).
fn cache_cmd(remove: bool, p: ddl::train::cache::Prune, json: bool) -> Result<()> {
    use ddl::train::cache::{State, age, count, list, prune, reason, size};
    let root = ddl::cache_dir().join("shards");
    let unreadable = |e: std::io::Error| {
        anyhow::anyhow!(
            "the shard cache '{}' cannot be listed ({e}): it is DDL_CACHE_DIR's (else $XDG_CACHE_HOME/ddl's or \
             ~/.cache/ddl's) folder shards/; point DDL_CACHE_DIR at a folder",
            root.display()
        )
    };
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    if remove {
        let out = prune(&root, &p).map_err(unreadable)?;
        if json {
            println!("{}", serde_json::json!({ "root": root, "dry_run": p.dry_run, "removed": out }));
        } else {
            let now = std::time::SystemTime::now();
            let verb = if p.dry_run { "would remove" } else { "removed" };
            for s in &out.sets {
                println!(
                    "{verb} {}  {}  {}  ({})",
                    s.key,
                    s.corpus(),
                    size(s.bytes),
                    reason(s, &p, now).unwrap_or_default()
                );
            }
            for d in &out.leftovers {
                println!("{verb} {}  (left by a process that was killed)", d.display());
            }
            println!(
                "{} {} set{} and {} leftover{}: {} ({})",
                if p.dry_run { "would free" } else { "freed" },
                out.sets.len(),
                plural(out.sets.len()),
                out.leftovers.len(),
                plural(out.leftovers.len()),
                size(out.bytes),
                root.display()
            );
        }
        if !out.failed.is_empty() {
            let what: Vec<String> = out.failed.iter().map(|(d, e)| format!("{}: {e}", d.display())).collect();
            anyhow::bail!(
                "could not remove {} folder(s) of the shard cache: {} (remove them by hand, or check the cache's \
                 permissions)",
                out.failed.len(),
                what.join("; ")
            );
        }
        return Ok(());
    }
    let l = list(&root).map_err(unreadable)?;
    if json {
        println!("{}", serde_json::to_string(&l)?);
        return Ok(());
    }
    println!("shard cache of `ddl train --corpus` and `ddl eval --text`: {}", root.display());
    if l.sets.is_empty() && l.leftovers.is_empty() {
        println!("(empty{})", if root.exists() { "" } else { ": no set made yet" });
    } else {
        let now = std::time::SystemTime::now();
        let rows: Vec<[String; 8]> = l
            .sets
            .iter()
            .map(|s| {
                let tokens = match (s.train_tokens, s.val_tokens) {
                    (Some(t), Some(v)) => count((t + v) as u64),
                    _ => "?".into(),
                };
                let val = match &s.record {
                    Some(r) if r.val_fraction == 0.0 => "-".to_string(),
                    Some(r) => format!("{}", r.val_fraction),
                    None => "?".into(),
                };
                let used = s
                    .last_used
                    .and_then(|t| now.duration_since(t).ok())
                    .map(|d| format!("{} ago", age(d)))
                    .unwrap_or_else(|| "?".into());
                [s.key.clone(), s.corpus(), s.tokenizer(), val, tokens, size(s.bytes), used, s.state.describe().into()]
            })
            .collect();
        let head = ["set", "corpus", "tokenizer", "val", "tokens", "size", "last used", "state"].map(String::from);
        let widths: Vec<usize> =
            (0..8).map(|i| rows.iter().chain([&head]).map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
        for r in [&head].into_iter().chain(&rows) {
            let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            println!("{}", cells.join("  ").trim_end());
        }
        let stale: Vec<_> = l.sets.iter().filter(|s| s.state.stale()).collect();
        let left: u64 = l.leftovers.iter().map(|l| l.1).sum();
        println!(
            "{} set{}, {} in all (val: the validation fraction)",
            l.sets.len(),
            plural(l.sets.len()),
            size(l.bytes)
        );
        if !stale.is_empty() || !l.leftovers.is_empty() {
            println!(
                "{} stale set{} ({}) and {} leftover{} of killed processes ({}): `ddl data cache --prune` removes them",
                stale.len(),
                plural(stale.len()),
                size(stale.iter().map(|s| s.bytes).sum()),
                l.leftovers.len(),
                plural(l.leftovers.len()),
                size(left)
            );
        }
        let unrecorded = l.sets.iter().filter(|s| s.state == State::Unrecorded).count();
        if unrecorded > 0 {
            println!(
                "{unrecorded} set{} made by an earlier ddl, whose settings are not recorded (a run that uses one \
                 records it): `ddl data cache --prune --unused-for 30d` removes those unused for 30 days",
                plural(unrecorded)
            );
        }
        let damaged: Vec<_> = l.sets.iter().filter(|s| s.state == State::RecordDamaged).collect();
        if !damaged.is_empty() {
            let files: Vec<String> =
                damaged.iter().map(|s| s.dir.join(ddl::train::cache::RECORD_FILE).display().to_string()).collect();
            println!(
                "{} set{} whose record does not read (damaged or edited: {}), so their settings are not known: a run \
                 with their settings finds them and writes the record again; `ddl data cache --prune --unused-for \
                 30d` removes those unused for 30 days, `ddl data cache --clear` every set",
                damaged.len(),
                plural(damaged.len()),
                files.join(", ")
            );
        }
    }
    if l.in_progress > 0 {
        println!("{} set(s) being made or removed by a running process", l.in_progress);
    }
    if !l.others.is_empty() {
        let names: Vec<String> = l.others.iter().map(|p| p.display().to_string()).collect();
        println!("not the cache's (names that are not a set's), left alone: {}", names.join(", "));
    }
    Ok(())
}

/// Refuses `path` when it is a pipe: `what` says why the command cannot read it there (a pipe
/// without a writer blocked it, and one read twice blocked the second read).
fn refuse_pipe(flag: &str, path: &std::path::Path, what: &str) -> Result<()> {
    if ddl::train::data::is_pipe(path) {
        anyhow::bail!(
            "{flag} {}: a pipe, which can be read only once as it comes, and {what}; save what it gives to a file \
             first (e.g. `… > text.txt`) and give that",
            path.display()
        );
    }
    Ok(())
}

/// The golden files given: a folder stands for its `*.safetensors` (not its subfolders').
fn golden_files(given: &[std::path::PathBuf]) -> Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for g in given {
        refuse_pipe("golden", g, "a golden file is read whole, by name")?;
        // (A name mistyped is said before the adapter opens, with the names there.)
        if !g.exists() {
            anyhow::bail!("{}", ddl::golden::missing_file(g));
        }
        if !g.is_dir() {
            files.push(g.clone());
            continue;
        }
        let entries = std::fs::read_dir(g).with_context(|| format!("listing {}", g.display()))?;
        let mut inside: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        if inside.is_empty() {
            anyhow::bail!(
                "{}: a folder without .safetensors files; give golden files (e.g. tests/golden/*.safetensors)",
                g.display()
            );
        }
        inside.sort();
        files.extend(inside);
    }
    // A file given twice (by name and through its folder, or two spellings) is checked once, as
    // `ddl data prepare` reads an input once (it was checked, and reported, again).
    let mut seen = std::collections::HashSet::new();
    let mut again = Vec::new();
    files.retain(|f| {
        let first = seen.insert(f.canonicalize().unwrap_or_else(|_| f.clone()));
        if !first {
            again.push(f.display().to_string());
        }
        first
    });
    if !again.is_empty() {
        eprintln!("note: {} given more than once: checked once", again.join(", "));
    }
    Ok(files)
}

fn golden(dev: &DeviceArgs, files: &[std::path::PathBuf], quiet: bool, st: ddl::model::Storage) -> Result<()> {
    // Every file read and checked first: the adapter opens only where one is to be compared (a
    // damaged file, or only skipped ones, are said without it).
    let loaded: Vec<_> = files.iter().map(|f| (f, ddl::golden::Golden::load(f))).collect();
    let compared = |g: &ddl::golden::Golden| {
        g.interventions.is_empty() && !(st.state_f16 && g.config.f16_state_support().is_err())
    };
    let gpu = if loaded.iter().any(|(_, g)| g.as_ref().is_ok_and(compared)) {
        Some(dev.open().context("opening the GPU")?)
    } else {
        None
    };
    let (mut failed_files, mut unchecked, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for (f, g) in loaded {
        let g = match g {
            Ok(g) => g,
            Err(e) => {
                eprintln!("error: {e}");
                unchecked.push(f.display().to_string());
                continue;
            }
        };
        // `--f16-state` checks the files whose model can store f16 states (d_v = 4 of ddl and
        // ddl_vmap); the others of a glob are skipped, and named.
        if st.state_f16
            && let Err(why) = g.config.f16_state_support()
        {
            eprintln!("skipped {}: {why}", f.display());
            skipped.push(format!("{} ({why})", f.display()));
            continue;
        }
        let result = if let (true, Some(gpu)) = (g.interventions.is_empty(), &gpu) {
            ddl::golden::check_stored(gpu, &g, st).map(|rows| (g, rows))
        } else {
            Err(ddl::golden::GoldenError::Content {
                path: f.clone(),
                msg: format!(
                    "made with β interventions ({}), which `ddl golden` does not apply: the decode tests check \
                     these files (cargo test --test decode); give it the plain golden files",
                    g.interventions
                ),
            })
        };
        match result {
            Err(e) => {
                eprintln!("error: {e}");
                unchecked.push(f.display().to_string());
            }
            Ok((g, rows)) => {
                let fails = rows.iter().filter(|r| !r.pass).count();
                print!("{}", ddl::golden::report(f, &g, &rows, quiet));
                if fails > 0 {
                    failed_files.push(f.display().to_string());
                }
            }
        }
    }
    if skipped.len() == files.len() {
        anyhow::bail!(
            "--f16-state: no file given has a model that stores f16 states (variant ddl or ddl_vmap, d_v = 4): {}",
            skipped.join("; ")
        );
    }
    if !skipped.is_empty() {
        eprintln!("--f16-state: {} of {} files skipped (their models have no f16 states)", skipped.len(), files.len());
    }
    match (failed_files.is_empty(), unchecked.is_empty()) {
        (true, true) => Ok(()),
        (false, true) => anyhow::bail!("golden parity failed for: {}", failed_files.join(", ")),
        (true, false) => anyhow::bail!("could not be checked: {}", unchecked.join(", ")),
        (false, false) => anyhow::bail!(
            "golden parity failed for: {}; could not be checked: {}",
            failed_files.join(", "),
            unchecked.join(", ")
        ),
    }
}

/// The model `ddl info --preset P --variant V --set KEY=VALUE …` plans: the preset's for the
/// variant with the model settings `sets` over it, checked as `ddl train` checks them. The run's
/// own settings are this command's flags (--batch, --seq, --f16-state, --precision, --recompute,
/// --head-chunk), so a `--set` of one is refused naming its flag, and one that does not change the
/// memory (train.lr) is refused as ignored.
fn info_config(preset: &str, variant: &str, sets: &[String]) -> Result<ddl::model::ModelConfig> {
    let v = ddl::model::Variant::parse(variant).map_err(anyhow::Error::msg)?;
    let mut run = ddl::train::RunConfig::preset(preset, v)?;
    for kv in sets {
        let key = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k).trim();
        // (An unknown key, or a value of the wrong kind, is reported as `ddl train` reports it.)
        run.set(kv).map_err(anyhow::Error::msg)?;
        let model = serde_json::to_value(&run.model)?;
        let field = key.strip_prefix("model.").unwrap_or(key);
        if field == "variant" {
            anyhow::bail!(
                "--set {kv}: name the variant to plan with --variant (--variant {})",
                kv.split_once('=').map_or("", |(_, v)| v.trim())
            );
        }
        if key.starts_with("model.") || (!key.contains('.') && model.get(key).is_some()) {
            continue;
        }
        let flag = match key.strip_prefix("train.").unwrap_or(key) {
            "batch_size" => Some("--batch N"),
            "seq_len" => Some("--seq T"),
            "state_f16" => Some("--f16-state"),
            "precision" => Some("--precision f16"),
            "recompute" => Some("--recompute"),
            "head_chunk" => Some("--head-chunk ROWS"),
            _ => None,
        };
        match flag {
            Some(flag) => anyhow::bail!(
                "--set {kv}: `ddl info --preset` takes the run's batch, length and storage from its flags; give {flag} instead"
            ),
            None => anyhow::bail!(
                "--set {kv}: the memory plan depends on the model and on --batch, --seq, --f16-state, --precision, \
                 --recompute and --head-chunk only, so {key} would be ignored; drop it (`ddl info --preset` takes \
                 model settings with --set: model.d_model, model.d_v, model.n_heads ...)"
            ),
        }
    }
    run.model.validate().map_err(|mut e| {
        // (This command has no --config file: the remedy names --set alone.)
        if e.remedy == ddl::model::ConfigError::new(&e.key, "", "").remedy {
            e.remedy = format!("change it with --set {}=VALUE", e.key);
        }
        anyhow::Error::from(e)
    })?;
    Ok(run.model)
}

/// `ddl info --preset P [--set …]`: the memory plan of training the model `cfg` (P's, or the
/// shape its --set gives) at P's batch (or --batch × --seq), the activations stored as `asked`
/// says (f16 precision implies f16 states as `ddl train` does). Printed as text unless `json`; returned as JSON either way (the same facts).
#[allow(clippy::too_many_arguments)]
fn info_model(
    dev: &DeviceArgs,
    preset: &str,
    cfg: &ddl::model::ModelConfig,
    sets: &[String],
    batch: Option<usize>,
    seq: Option<usize>,
    asked: ddl::model::Storage,
    json: bool,
) -> Result<serde_json::Value> {
    let mut notes = Vec::new();
    let (cfg, v) = (cfg.clone(), cfg.variant);
    let mut t = ddl::train::TrainConfig::preset(preset);
    let (b, s) = (batch.unwrap_or(t.batch_size), seq.unwrap_or(t.seq_len));
    // f16 precision implies f16 states where the variant has them (as `ddl train` does).
    (t.state_f16, t.precision, t.recompute, t.head_chunk) =
        (asked.state_f16, asked.precision, asked.recompute, asked.head_chunk);
    // The checks `ddl train` makes of these settings (context length, f16 states, precision).
    (t.batch_size, t.seq_len) = (b, s);
    // (In this command's words: `ddl info` takes --batch and --seq, not --set.)
    t.validate(&cfg).map_err(|e| match e.key.as_str() {
        "train.seq_len" if seq.is_none() => anyhow::anyhow!(
            "the preset's sequence length {s}: {}; give a --seq of at most {}, or a longer context with --set model.max_seq_len={s}",
            e.expected,
            cfg.max_seq_len
        ),
        "train.seq_len" => anyhow::anyhow!("--seq {s}: {}; give a --seq of at most {}", e.expected, cfg.max_seq_len),
        "train.batch_size" => anyhow::anyhow!("--batch {b}: {}; give a smaller --batch", e.expected),
        _ => anyhow::anyhow!("{e}"),
    })?;
    if (b as u128) * (s as u128) * (cfg.vocab_size as u128).max(cfg.d_model as u128 * 64) * 16 > u64::MAX as u128 {
        anyhow::bail!("--batch {b} × --seq {s}: too many tokens to plan; give a smaller --batch");
    }
    let mut st = t.storage(&cfg);
    if st.head_chunk >= b * s {
        // (A slice of all the batch's rows is the whole head: the plan and its label say so.)
        notes.push(format!(
            "--head-chunk {} covers all {} rows of B {b} × T {s}: the LM head runs whole",
            st.head_chunk,
            b * s
        ));
        st.head_chunk = 0;
    }
    // The adapter the plan is compared with: one asked for (--backend, --adapter) must be there,
    // as for every other command (a wrong one left the comparison out without a word); with none
    // asked for, the plan stands alone where no adapter is found.
    let gpu = match dev.open() {
        Ok(gpu) => Some(gpu),
        Err(e) if dev.backend.is_some() || dev.adapter.is_some() => return Err(e),
        Err(_) => None,
    };
    let plan = ddl::model::memory_plan_for(&cfg, b, s, st);
    // What `ddl train` would refuse on this adapter: a buffer over its largest, a state over one
    // storage binding (bound whole), or, on a CPU adapter, more than the host has.
    // (fits, what the text says)
    let verdict = gpu.as_ref().map(|gpu| {
        let limits = ddl::model::Limits::of(gpu);
        let binding = gpu.limits.max_storage_buffer_binding_size;
        if let Some(why) = plan.misfit(&limits) {
            // (The advice restates why, with the plan's total, and says what fits.)
            let advice = ddl::model::fit_advice(&cfg, b, s, 1, st, &limits).unwrap_or(why);
            (false, format!("does not fit this adapter ({}): {advice}", gpu.info.name))
        } else if plan.largest.1 > binding {
            let line = format!(
                "note: '{}' ({} bytes) is over this adapter's storage binding ({binding} bytes): the kernels bind it in pieces",
                plan.largest.0, plan.largest.1
            );
            (true, line)
        } else {
            (true, format!("fits this adapter's buffers ({})", gpu.info.name))
        }
    });
    if !json {
        for n in &notes {
            println!("note: {n}");
        }
        let with = if sets.is_empty() { String::new() } else { format!(" with --set {}", sets.join(" --set ")) };
        println!(
            "preset {preset}{with}, variant {v}{}: V {} d {} L {} H {} h {} F {} d_v {}",
            st.label(),
            cfg.vocab_size,
            cfg.d_model,
            cfg.n_layers,
            cfg.n_heads,
            cfg.head_dim,
            cfg.mlp_hidden,
            cfg.m()
        );
        print!("{}", plan.text(b, s));
        if let Some((_, line)) = &verdict {
            println!("{line}");
        }
    }
    let adapter = match (&gpu, &verdict) {
        (Some(gpu), Some((fits, line))) => serde_json::json!({
            "name": gpu.info.name,
            "backend": format!("{:?}", gpu.info.backend),
            "fits": fits,
            "says": line,
        }),
        _ => serde_json::Value::Null,
    };
    Ok(serde_json::json!({
        "preset": preset,
        "sets": sets,
        "variant": v.name(),
        "storage": {
            "precision": st.precision.name(),
            "f16_state": st.state_f16,
            "recompute": st.recompute,
            "head_chunk": st.head_chunk,
        },
        "model": {
            "vocab_size": cfg.vocab_size,
            "d_model": cfg.d_model,
            "n_layers": cfg.n_layers,
            "n_heads": cfg.n_heads,
            "head_dim": cfg.head_dim,
            "mlp_hidden": cfg.mlp_hidden,
            "d_v": cfg.m(),
        },
        "batch": b,
        "seq": s,
        "notes": notes,
        "plan": plan.json(),
        "adapter": adapter,
    }))
}

/// A size in GiB with one decimal, or in MiB below 1 GiB (where GiB would say 0.0).
fn size_words(bytes: u64) -> String {
    let gib = bytes as f64 / (1u64 << 30) as f64;
    if gib >= 1.0 { format!("{gib:.1} GiB") } else { format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64) }
}

/// `ddl info --preset P --memory SIZE`: the largest batch whose training plan fits `bytes`, for
/// each way of storing the activations the variant allows.
/// Printed as text unless `json`; returned as JSON either way.
fn info_fit(
    preset: &str,
    cfg: &ddl::model::ModelConfig,
    seq: Option<usize>,
    head_chunk: usize,
    bytes: u64,
    json: bool,
) -> Result<serde_json::Value> {
    use ddl::model::{Precision, Storage};
    let t = seq.unwrap_or(ddl::train::TrainConfig::preset(preset).seq_len);
    let chunk = if head_chunk > 0 { format!(", the LM head in slices of {head_chunk} rows") } else { String::new() };
    if !json {
        println!(
            "largest batch of {t}-token sequences whose plan fits {bytes} bytes ({}{chunk}; the plan counts \
             parameters, gradients, moments, activations and scratch, not the driver's own):",
            size_words(bytes)
        );
    }
    // Each as `ddl train` would store it (f16 precision implies f16 states where the variant has them).
    let storage = |state_f16: bool, precision: Precision| {
        let mut tc = ddl::train::TrainConfig::preset(preset);
        (tc.state_f16, tc.precision, tc.head_chunk) = (state_f16, precision, head_chunk);
        tc.storage(cfg)
    };
    let mut rows: Vec<(&str, Storage)> = vec![("f32", storage(false, Precision::F32))];
    if cfg.f16_state_support().is_ok() {
        rows.push(("--f16-state", storage(true, Precision::F32)));
    }
    rows.push(("--precision f16", storage(false, Precision::F16)));
    let rows: Vec<(String, Storage)> = rows
        .into_iter()
        .flat_map(|(name, st)| {
            [(name.to_string(), st), (format!("{name} --recompute"), Storage { recompute: true, ..st })]
        })
        .collect();
    let mut out = Vec::new();
    for (name, st) in rows {
        let b = ddl::model::largest_batch(cfg, t, st, bytes);
        let plan = ddl::model::memory_plan_for(cfg, b.max(1), t, st);
        // A batch of at most --head-chunk rows runs the head whole: said per row, and its chunk
        // recorded as 0 (the header's "slices of R rows" holds for the larger batches only).
        let used = ddl::model::head_chunk_used(b.max(1) * t, head_chunk);
        let whole = head_chunk > 0 && used == 0;
        if json {
            // (The plan of one sequence where none fits: what it would need.)
            out.push(serde_json::json!({
                "storage": name,
                "precision": st.precision.name(),
                "f16_state": st.state_f16,
                "recompute": st.recompute,
                "head_chunk": used,
                "batch": b,
                "tokens": b * t,
                "plan_bytes": plan.total(),
            }));
        } else {
            let note = if whole {
                format!(", the LM head whole: {} rows ≤ --head-chunk", b.max(1) * t)
            } else {
                String::new()
            };
            if b == 0 {
                println!("  {name:<30} none (one sequence needs {}{note})", size_words(plan.total()));
            } else {
                println!("  {name:<30} B {b:>5}  ({} tokens a micro-batch, {}{note})", b * t, size_words(plan.total()));
            }
        }
    }
    Ok(serde_json::json!({"memory_bytes": bytes, "seq": t, "head_chunk": head_chunk, "rows": out}))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// A golden file given twice — by name and through its folder — is checked once (it was
    /// checked and reported twice).
    #[test]
    fn a_golden_file_given_twice_is_checked_once() {
        let dir = ddl::testing::scratch_dir("golden-twice");
        for v in ["a", "b"] {
            std::fs::write(dir.join(format!("{v}.safetensors")), b"x").unwrap();
        }
        let a = dir.join("a.safetensors");
        let files = super::golden_files(&[a.clone(), dir.clone(), dir.join(".").join("a.safetensors")]).unwrap();
        assert_eq!(files, vec![a, dir.join("b.safetensors")]);
    }

    #[test]
    fn every_command_and_flag_has_help_text() {
        fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
            if path != "ddl" && c.get_about().is_none() {
                missing.push(format!("`{path}` (the command)"));
            }
            for a in c.get_arguments().filter(|a| !a.is_hide_set()) {
                let id = a.get_id().as_str();
                if id != "help" && id != "version" && a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("`{path}` {id}"));
                }
            }
            for s in c.get_subcommands() {
                walk(s, &format!("{path} {}", s.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "ddl", &mut missing);
        assert!(missing.is_empty(), "without help text: {}", missing.join(", "));
    }

    /// `--help` answers on every command and subcommand, before any required argument is
    /// missed or the command runs (`ddl data cache --help` must not list, let alone clear, the
    /// cache): an attempt to hide the global device flags from some commands' help broke it.
    #[test]
    fn help_answers_on_every_command() {
        use clap::CommandFactory;
        fn walk(c: &clap::Command, path: &mut Vec<String>, seen: &mut usize) {
            for flag in ["--help", "-h"] {
                let mut args = vec!["ddl".to_string()];
                args.extend(path.iter().cloned());
                args.push(flag.into());
                let e = match super::Cli::command().try_get_matches_from(&args) {
                    Ok(_) => panic!("{args:?} ran instead of showing help"),
                    Err(e) => e,
                };
                assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp, "{args:?}: {e}");
                *seen += 1;
            }
            for s in c.get_subcommands().filter(|s| s.get_name() != "help") {
                path.push(s.get_name().to_string());
                walk(s, path, seen);
                path.pop();
            }
        }
        let mut seen = 0;
        walk(&super::Cli::command(), &mut Vec::new(), &mut seen);
        assert!(seen > 20, "{seen}");
    }

    /// Free text that starts with `-` is a value, not a flag: a prompt `- item`, a stop text `---`
    /// (a Markdown rule), a text to encode `-x`, ids `-1` (then refused by the ids' own message,
    /// not clap's "unexpected argument"). Clap refused them all, naming no remedy.
    #[test]
    fn text_values_may_start_with_a_hyphen() {
        use clap::CommandFactory;
        let parse = |args: &[&str]| {
            let mut all = vec!["ddl"];
            all.extend_from_slice(args);
            super::Cli::command().try_get_matches_from(&all).unwrap_or_else(|e| panic!("{args:?}: {e}"))
        };
        let sub = |m: &clap::ArgMatches, path: &[&str], id: &str| -> Vec<String> {
            let m = path.iter().fold(m.clone(), |m, p| m.subcommand_matches(p).unwrap().clone());
            m.get_many::<String>(id).unwrap().cloned().collect()
        };
        let m = parse(&["generate", "--checkpoint", "r", "--prompt", "- item", "--stop", "---", "--stop", "-"]);
        assert_eq!(sub(&m, &["generate"], "prompt"), ["- item"]);
        assert_eq!(sub(&m, &["generate"], "stop"), ["---", "-"]);
        let m = parse(&["chat", "--checkpoint", "r", "--stop", "--"]);
        assert_eq!(sub(&m, &["chat"], "stop"), ["--"]);
        let m = parse(&["tokenizer", "encode", "--tokenizer", "t", "--text", "-x y"]);
        assert_eq!(sub(&m, &["tokenizer", "encode"], "text"), ["-x y"]);
        let m = parse(&["tokenizer", "decode", "--tokenizer", "t", "--ids", "-1 2"]);
        assert_eq!(sub(&m, &["tokenizer", "decode"], "ids"), ["-1 2"]);
        // (`-` alone still reads standard input, as before.)
        let m = parse(&["generate", "--checkpoint", "r", "--prompt", "-"]);
        assert_eq!(sub(&m, &["generate"], "prompt"), ["-"]);
    }

    #[test]
    fn the_top_level_help_lists_every_command_under_a_task() {
        let mut cmd = super::Cli::command();
        let help = cmd.render_help().to_string();
        for task in ["Train and compare:", "Generate:", "Check and measure:", "Tools:", "Options:", "--no-autotune"] {
            assert!(help.contains(task), "{task:?} missing from:\n{help}");
        }
        for sub in cmd.get_subcommands() {
            let line = format!("\n  {:<12}", sub.get_name());
            assert!(help.contains(&line), "`ddl --help` does not list `{}`:\n{help}", sub.get_name());
        }
    }
}
