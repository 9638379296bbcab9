//! `ddl chat`: a conversation with a model, one line in, one reply out. The context is the whole
//! conversation so far (prompt lines and replies); a reply stops at a blank line, a stop text,
//! the end-of-text token or `max_tokens`. Commands: `/reset`, `/set NAME VALUE` (temperature,
//! top_k, top_p, max_tokens, seed), `/quit`.

use std::io::{BufRead, Write};

use crate::generate::{GenOptions, Sampler, SamplerConfig, generate};
use crate::model::Model;
use crate::tokenizer::Tokenizer;

/// What a chat samples with.
#[derive(Debug, Clone)]
pub struct ChatSettings {
    pub sampler: SamplerConfig,
    /// Tokens per reply at most (≥ 1).
    pub max_tokens: usize,
    /// A reply also stops when it ends with one of these (besides a blank line).
    pub stop: Vec<String>,
}

impl ChatSettings {
    /// Fails with a message naming the setting when a value is out of range.
    pub fn validate(&self) -> Result<(), String> {
        self.sampler.validate()?;
        if self.max_tokens == 0 {
            return Err("max_tokens must be at least 1".into());
        }
        Ok(())
    }

    /// `/set NAME VALUE`: the settings with one value changed, or why not.
    pub fn with(&self, name: &str, value: &str) -> Result<ChatSettings, String> {
        let mut next = self.clone();
        let bad = |e: &dyn std::fmt::Display| format!("{name} {value}: {e}");
        match name {
            "temperature" => next.sampler.temperature = value.parse().map_err(|e| bad(&e))?,
            "top_k" => next.sampler.top_k = value.parse().map_err(|e| bad(&e))?,
            "top_p" => next.sampler.top_p = value.parse().map_err(|e| bad(&e))?,
            "max_tokens" => next.max_tokens = value.parse().map_err(|e| bad(&e))?,
            "seed" => next.sampler.seed = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown setting '{name}' (temperature, top_k, top_p, max_tokens, seed)")),
        }
        next.validate()?;
        Ok(next)
    }
}

/// A chat's failure: reading or writing the terminal, or the device.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("chat input/output: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
}

/// Runs a chat until `/quit` or the end of `input`: replies go to `out`, the prompt marker,
/// notes and errors about a line (a bad command, text the tokenizer cannot encode) to `log`.
pub fn run(
    model: &Model,
    tok: &Tokenizer,
    mut settings: ChatSettings,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    log: &mut dyn Write,
) -> Result<(), ChatError> {
    let mut context = String::new();
    let mut turn = 0u64;
    loop {
        write!(log, "> ")?;
        log.flush()?;
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end_matches(['\n', '\r']).to_string();
        if let Some(cmd) = line.strip_prefix('/') {
            let parts: Vec<&str> = cmd.split_whitespace().collect();
            match parts.as_slice() {
                ["quit"] | ["exit"] => break,
                ["reset"] => {
                    context.clear();
                    writeln!(log, "(context cleared)")?;
                }
                ["set", name, value] => match settings.with(name, value) {
                    Ok(next) => {
                        settings = next;
                        writeln!(log, "({name} = {value})")?;
                    }
                    Err(e) => writeln!(log, "error: {e}")?,
                },
                _ => writeln!(log, "unknown command '/{cmd}' (try /reset, /set temperature 0.7, /quit)")?,
            }
            continue;
        }
        let before = context.len();
        context.push_str(&line);
        context.push('\n');
        let ids = match tok.encode(&context) {
            Ok(ids) => ids,
            Err(e) => {
                writeln!(log, "error: {e}")?;
                context.truncate(before);
                continue;
            }
        };
        let mut cfg = settings.sampler.clone();
        cfg.seed = cfg.seed.wrapping_add(turn);
        turn += 1;
        let mut sampler = Sampler::new(cfg);
        let mut stop = settings.stop.clone();
        stop.push("\n\n".into());
        let opts = GenOptions { max_tokens: settings.max_tokens, stop, stop_token: tok.eot_id(), trace: false };
        let mut io = Ok(());
        let (reply, _) = generate(model, tok, &ids, &opts, &mut sampler, |t| {
            if io.is_ok() {
                io = write!(out, "{t}").and_then(|_| out.flush());
            }
        })?;
        io?;
        writeln!(out)?;
        context.push_str(&tok.decode(&reply).unwrap_or_default());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> ChatSettings {
        ChatSettings { sampler: SamplerConfig::default(), max_tokens: 20, stop: Vec::new() }
    }

    #[test]
    fn set_changes_one_value_and_refuses_bad_ones() {
        let s = base().with("temperature", "0.3").unwrap();
        assert_eq!(s.sampler.temperature, 0.3);
        assert_eq!(base().with("max_tokens", "7").unwrap().max_tokens, 7);
        assert_eq!(base().with("seed", "9").unwrap().sampler.seed, 9);
        let e = base().with("colour", "red").unwrap_err();
        assert!(e.contains("unknown setting 'colour'"), "{e}");
        let e = base().with("top_p", "often").unwrap_err();
        assert!(e.starts_with("top_p often:"), "{e}");
        assert!(base().with("max_tokens", "0").unwrap_err().contains("max_tokens"));
        assert!(base().with("temperature", "-1").is_err());
    }
}
