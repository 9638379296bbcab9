//! The `ddl` command line.

mod bench_cmd;
mod cli;
mod data_cmd;
mod generate_cmd;
mod golden_cmd;
mod info_cmd;
mod train_cmd;

use anyhow::{Context, Result};
use clap::Parser;

use cli::*;
use data_cmd::*;
use ddl::gpu::BackendChoice;
use generate_cmd::*;
use golden_cmd::*;
use info_cmd::*;

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
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        // (A path that starts with `-`, `--checkpoint -run`, was clap's "unexpected argument
        // '-r'" alone: the paths among the arguments that exist here are said with the remedy.)
        if e.use_stderr() {
            let _ = e.print();
            for note in hyphen_paths(std::env::args_os().skip(1)) {
                eprintln!("{note}");
            }
            std::process::exit(e.exit_code());
        }
        e.exit()
    });
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
    // (A flag given wins over its variable, which is then not read. The arguments as the system
    // gives them: `env::args` panicked on one that is not UTF-8, a folder's name in Latin-1, which
    // a path flag takes and clap refuses for a text flag.)
    let flag =
        |f: &str| std::env::args_os().any(|a| a.to_str().is_some_and(|a| a == f || a.starts_with(&format!("{f}="))));
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
    use std::io::{IsTerminal, Read};
    // (On a terminal it waited for the end of input without a word, as if it hung.)
    if std::io::stdin().is_terminal() {
        eprintln!("{what}: reading standard input: type the text, then Ctrl-D on a line of its own to end it");
    }
    let mut bytes = Vec::new();
    std::io::stdin().take(cap + 1).read_to_end(&mut bytes).map_err(|e| match e.kind() {
        // (`< DIR`: it was "Is a directory (os error 21)" alone.)
        std::io::ErrorKind::IsADirectory => anyhow::anyhow!(
            "{what}: standard input is a folder, not text: redirect a file (`< FILE`) or pipe the text in"
        ),
        _ => anyhow::Error::new(e).context(format!("{what}: reading standard input")),
    })?;
    if bytes.len() as u64 > cap {
        anyhow::bail!("{what}: standard input gave more than {} MiB; {remedy}", cap >> 20);
    }
    if let Some(enc) = ddl::train::data::utf16_encoding(&bytes) {
        anyhow::bail!(
            "{what}: standard input: {}, e.g. `iconv -f {enc} -t UTF-8 FILE | …`",
            ddl::train::data::utf16_said(enc)
        );
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

/// Says when a text given on the command line (`flag`, e.g. `--prompt`) is the name of a file
/// here: it is taken as the text itself, its name tokenised without a word (`--prompt story.txt`
/// generated after the 9 characters of the name), where `--flag - < FILE` gives the file's text.
fn note_a_file_name(flag: &str, text: &str) {
    if !text.contains('\n') && !text.trim().is_empty() && std::path::Path::new(text).is_file() {
        eprintln!(
            "note: {flag} is the text itself, not a file's name: '{text}' (a file here) is read as {} characters; to \
             give the file's text, use {flag} - < {}",
            text.chars().count(),
            ddl::shell_word(std::path::Path::new(text))
        );
    }
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
                length_flag: "--max-tokens",
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

/// A note for each argument that starts with `-` and names a file or folder here (a path clap
/// took for a flag): write it `./-run`, or after `--` where the command takes paths there.
fn hyphen_paths(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<String> {
    args.filter(|a| a.as_encoded_bytes().starts_with(b"-") && a.len() > 1 && std::path::Path::new(a).exists())
        .map(|a| {
            let a = a.to_string_lossy();
            format!(
                "note: '{a}' is a file or folder here, which clap took for a flag: write it as {} (or after `--`, \
                 where the command takes its paths as arguments: `ddl plot --out x.png -- {a}`)",
                ddl::shell_word(&*a)
            )
        })
        .collect()
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
            "{} of {}, preset {} ({} in {}: {finished} finished, {} to resume, {new} new):",
            ddl::plural(total, "run"),
            spec.length_words(),
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
