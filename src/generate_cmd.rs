//! `ddl generate` and `ddl chat`: the checkpoint opened, the prompt read and checked, the
//! sampling's settings, then the text streamed (or a conversation held) with the library's
//! generator; the notes a user needs before the text (a prompt cut to the context, a slide past
//! it, a stop text that can never come).

use anyhow::{Context, Result};

use crate::cli::*;
use crate::{Interrupted, read_stdin_capped};

/// `--samples N` (N > 1) against the settings that make it pointless or ambiguous, before the
/// adapter opens.
pub(crate) fn check_samples(samples: usize, sa: &SamplingArgs, trace: bool, compare: bool) -> Result<()> {
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
    /// The flag that gave the length, for notes: `--max-tokens` (`ddl generate`) or `--sample`
    /// (`ddl train --sample N`).
    pub(crate) length_flag: &'static str,
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
        length_flag,
    } = how;
    let s = sa.sampler()?;
    let from_stdin = prompt == "-";
    // (What a prompt that long can mean: generation reads its last context of tokens.)
    let too_long = "generation reads only the prompt's last max_seq_len tokens (the model's context; `ddl info \
                    --checkpoint DIR` gives it): pipe in its end, e.g. `tail -n 1000 FILE | ddl generate … --prompt -`; \
                    to score a long text, `ddl eval --checkpoint DIR --text FILE --per-token OUT.tsv`";
    if !from_stdin {
        crate::note_a_file_name("--prompt", prompt);
    }
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
    // (A BPE read a prompt's `\r` as text, which its corpus may never have held, without a word:
    // said, as a char model's refusal says it.)
    if prompt.contains("\r\n") && tok.kind() != "char" {
        eprintln!(
            "note: the prompt has Windows line ends, \\r\\n: the model reads each \\r as text (convert them for \
             the text it was trained on, e.g. `tr -d '\\r'`)"
        );
    }
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
            "note: the prompt's {} and {length_flag} {} pass the context of {cap}: from generated token {} on, the \
             window slides, keeping its last {} tokens each time, so the text after that no longer sees what came \
             before them (lower {length_flag} to stay within it)",
            ddl::plural(kept, "token"),
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

pub(crate) fn chat(
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
    let piped = edited.is_none();
    let mut plain;
    let lines: &mut dyn ddl::chat::Lines = match edited.as_mut() {
        Some(e) => e,
        None => {
            plain = ddl::chat::PlainLines::new(&mut input, &mut log);
            &mut plain
        }
    };
    let mut errlog = std::io::stderr();
    let ran = ddl::chat::run(&model, &tok, settings, lines, &mut stdout.lock(), &mut errlog, &opts);
    if let Err(e) = &ran
        && !matches!(e, ddl::chat::ChatError::Interrupted(_))
    {
        return ran.map(|_| ()).map_err(Into::into);
    }
    if let Some(p) = trace {
        eprintln!("trace written to {} (+ .json summary)", p.display());
    }
    // (SIGTERM during a reply: said, the trace written; 143 as for a process it ended.)
    let refused = ran.map_err(|_| Interrupted)?;
    // Lines a pipe gave that never reached the model end the chat with status 1: a script that
    // pipes a conversation in saw only its replies and status 0, as if every line had been said.
    if piped && refused > 0 {
        anyhow::bail!(
            "{} of standard input could not be sent to the model (each said above, `error:`): the chat went on \
             without them; correct them in the input",
            ddl::plural(refused, "line")
        );
    }
    Ok(())
}
