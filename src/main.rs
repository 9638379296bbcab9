//! The `ddl` command line.

mod bench_cmd;
mod cli;
mod data_cmd;
mod golden_cmd;
mod info_cmd;
mod train_cmd;

use anyhow::{Context, Result};
use clap::Parser;

use cli::*;
use data_cmd::*;
use ddl::gpu::BackendChoice;
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
    if ddl::train::data::is_utf16(&bytes) {
        anyhow::bail!("{what}: standard input: {}, e.g. `iconv -f UTF-16 -t UTF-8 FILE | …`", ddl::train::data::UTF16);
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
            ddl::plural(spec.steps, "step"),
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
            // (A file of only a byte-order mark, which is not text, is said as such: it was "empty".)
            anyhow::bail!(
                "--prompt -: standard input held no text (it was empty, or only a byte-order mark): pipe the prompt \
                 in (… | ddl generate --prompt -)"
            );
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
    // (`--stop` reads `\n` as a newline, `--prompt` takes its text as typed: a prompt of two
    // lines typed so was read as one, a backslash and an n in it, without a word.)
    if !from_stdin && prompt.contains("\\n") && !prompt.contains('\n') {
        eprintln!(
            "note: --prompt holds `\\n` as a backslash and an n, not a newline (a prompt is taken as typed, unlike \
             --stop's text): type the newline itself, e.g. in bash --prompt $'ROMEO:\\nJULIET:', or give the prompt \
             on standard input (--prompt - < FILE)"
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
                 at least {}, or drop --strict-context to keep its last {cap} tokens",
                ids.len(),
                ddl::plural(cut, "token")
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
    // Past the context the window slides, keeping its last half: said before it does (a text
    // that lost its start's context went on without a word).
    let kept = ids.len().min(cap);
    if kept.saturating_add(sa.max_tokens) > cap && sa.max_tokens > 0 {
        eprintln!(
            "note: the prompt's {kept} tokens and --max-tokens {} pass the context of {cap}: from generated token {} on, the \
             window slides, keeping its last {} tokens each time, so the text after that no longer sees what came \
             before them (lower --max-tokens to stay within it)",
            sa.max_tokens,
            cap - kept + 1,
            (cap / 2).max(1)
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
        // (Tokens counted from 1, as the `--logprobs` and `--lens` tables number them.)
        match c.first_difference {
            None => println!("the continuations are identical ({} tokens)", c.original.len()),
            Some(i) => println!(
                "first difference at generated token {}: {:?} (original) vs {:?} (intervened)",
                i + 1,
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
            let at =
                format!("at generated token {} ({:?})", imin + off + 1, text(&c.original[imin + off..imin + off + 1]));
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
            "{}: stopped the generation after {}{of}{no_trace}",
            ddl::train::interruption(),
            ddl::plural(n, "token")
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
    // (Stderr not locked for the whole chat: the Ctrl-C handler's thread writes there, and waited
    // on the lock, so that neither a reply's Ctrl-C note nor a Ctrl-C at the prompt got through.)
    let (mut input, mut log) = (stdin.lock(), stderr);
    let mut plain;
    let lines: &mut dyn ddl::chat::Lines = match edited.as_mut() {
        Some(e) => e,
        None => {
            plain = ddl::chat::PlainLines { input: &mut input, log: &mut log };
            &mut plain
        }
    };
    let mut errlog = std::io::stderr();
    let ran = ddl::chat::run(&model, &tok, settings, lines, &mut stdout.lock(), &mut errlog, &opts);
    if let Err(e) = &ran
        && !matches!(e, ddl::chat::ChatError::Interrupted(_))
    {
        return ran.map_err(Into::into);
    }
    if let Some(p) = trace {
        eprintln!("trace written to {} (+ .json summary)", p.display());
    }
    // (SIGTERM during a reply: said, the trace written; 143 as for a process it ended.)
    ran.map_err(|_| Interrupted.into())
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
