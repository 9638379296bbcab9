//! `ddl chat`'s sampling settings: what `/set`, `/settings` and the command line's options give.

use crate::generate::SamplerConfig;

/// What a chat samples with.
#[derive(Debug, Clone)]
pub struct ChatSettings {
    pub sampler: SamplerConfig,
    /// Tokens per reply at most (≥ 1).
    pub max_tokens: usize,
    /// A reply also stops right after one of these (besides a blank line), also inside a token.
    pub stop: Vec<String>,
    /// After each reply, its tokens' scores with this many alternatives (`None`: no table).
    pub logprobs: Option<usize>,
}

impl ChatSettings {
    /// Every name `/set` takes.
    pub const NAMES: &[&str] =
        &["temperature", "top_k", "top_p", "min_p", "repetition_penalty", "max_tokens", "seed", "stop", "logprobs"];

    /// Fails with a message naming the setting when a value is out of range.
    pub fn validate(&self) -> Result<(), String> {
        self.sampler.validate()?;
        if self.max_tokens == 0 {
            return Err("max_tokens must be at least 1".into());
        }
        Ok(())
    }

    /// `/set NAME VALUE`: the settings with one value changed, or why not. `stop TEXT` adds a
    /// stop text (`\n` a newline, `\t` a tab, `\s` a space, `\\` a backslash; any other escape
    /// is refused), `stop none` clears them.
    pub fn with(&self, name: &str, value: &str) -> Result<ChatSettings, String> {
        let mut next = self.clone();
        // (Setting names in any case, as the commands': `/set TOP_K 5` is `/set top_k 5`.)
        let name = name.to_ascii_lowercase();
        let name = name.as_str();
        // (Spaces around a value are not part of it, except a stop text's own: `/set stop ab `.)
        // (`none` in any case, as `off` and the names: `/set stop NONE` was a stop text "NONE".)
        let none = value.trim().eq_ignore_ascii_case("none");
        let value = if name == "stop" && !none { value } else { value.trim() };
        let bad = |want: &str| format!("{name} {value:?}: expected {want}");
        let number = |want: &str| -> Result<f32, String> {
            let v = value.parse::<f64>().map_err(|_| bad(want))?;
            SamplerConfig::number(v).map_err(|e| format!("{name} {value}: {e}"))
        };
        match name {
            "temperature" => next.sampler.temperature = number("a number ≥ 0 (0 = greedy)")?,
            "top_k" => {
                next.sampler.top_k = value
                    .parse()
                    .map_err(|_| bad(&format!("a whole number from 0 to {} (0 = all tokens)", usize::MAX)))?
            }
            "top_p" => next.sampler.top_p = number("a number in (0, 1]")?,
            "min_p" => next.sampler.min_p = number("a number in [0, 1] (0 = off)")?,
            "repetition_penalty" => next.sampler.repetition_penalty = number("a number > 0 (1 = off)")?,
            "max_tokens" => {
                next.max_tokens = value.parse().map_err(|_| bad(&format!("a whole number from 1 to {}", usize::MAX)))?
            }
            "seed" => {
                next.sampler.seed = value.parse().map_err(|_| bad(&format!("a whole number from 0 to {}", u64::MAX)))?
            }
            "stop" if none => next.stop.clear(),
            "stop" if value.is_empty() => {
                return Err("stop needs a text (`\\s` for a space, or `none` to clear)".into());
            }
            // A shell's empty string typed here: the chat takes the text as typed, quotes and all.
            "stop" if value.trim() == "\"\"" || value.trim() == "''" => {
                return Err(format!(
                    "stop {}: the chat takes a stop text as typed, without quotes (this would stop at two quote \
                     marks): give the text itself (`\\s` for a space), or `none` to clear the stop texts",
                    value.trim()
                ));
            }
            "stop" => next.stop.push(crate::generate::unescape_stop(value).map_err(|e| format!("stop {e}"))?),
            "logprobs" if value.eq_ignore_ascii_case("off") => next.logprobs = None,
            "logprobs" => {
                next.logprobs = Some(value.parse().map_err(|_| {
                    bad("a whole number of alternatives to show (0: only each token's own score), or off")
                })?)
            }
            _ => return Err(format!("unknown setting '{name}' ({})", Self::NAMES.join(", "))),
        }
        // (The range messages name the command line's flags; here the settings' names.)
        next.validate().map_err(|e| {
            [
                ("--temperature", "temperature"),
                ("--top-p", "top_p"),
                ("--min-p", "min_p"),
                ("--repetition-penalty", "repetition_penalty"),
            ]
            .iter()
            .fold(e, |e, (flag, setting)| e.replace(flag, setting))
        })?;
        Ok(next)
    }

    /// One line per setting, for `/settings`.
    pub fn describe(&self) -> String {
        let s = &self.sampler;
        let stops: Vec<String> = self.stop.iter().map(|x| format!("{x:?}")).collect();
        format!(
            "temperature {} · top_k {} · top_p {} · min_p {} · repetition_penalty {} · max_tokens {} · seed {} · stop [{}] \
             (and a blank line) · logprobs {}",
            s.temperature,
            s.top_k,
            s.top_p,
            s.min_p,
            s.repetition_penalty,
            self.max_tokens,
            s.seed,
            stops.join(", "),
            self.logprobs.map_or("off".to_string(), |n| n.to_string())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> ChatSettings {
        ChatSettings { sampler: SamplerConfig::default(), max_tokens: 20, stop: Vec::new(), logprobs: None }
    }

    #[test]
    fn set_changes_one_value_and_refuses_bad_ones() {
        let s = base().with("temperature", "0.3").unwrap();
        assert_eq!(s.sampler.temperature, 0.3);
        assert_eq!(base().with("max_tokens", "7").unwrap().max_tokens, 7);
        assert_eq!(base().with("seed", "9").unwrap().sampler.seed, 9);
        assert_eq!(base().with("top_k", "5").unwrap().sampler.top_k, 5);
        assert_eq!(base().with("top_p", "0.5").unwrap().sampler.top_p, 0.5);
        assert_eq!(base().with("repetition_penalty", "1.3").unwrap().sampler.repetition_penalty, 1.3);
        let s = base().with("stop", "END\\n").unwrap().with("stop", "###").unwrap();
        assert_eq!(s.stop, vec!["END\n".to_string(), "###".to_string()]);
        assert!(s.with("stop", "none").unwrap().stop.is_empty());
        // A lone space, which the line trims, typed as `\s`.
        assert_eq!(base().with("stop", "\\s").unwrap().stop, [" "]);
        assert!(base().with("stop", "").unwrap_err().contains("\\s"));
        // A shell's empty string is not a stop text of two quote marks.
        for q in ["\"\"", "''", " \"\" "] {
            let e = base().with("stop", q).unwrap_err();
            assert!(e.contains("without quotes") && e.contains("none"), "{q}: {e}");
        }
        // Any other escape is refused, naming it and the four there are.
        let e = base().with("stop", "\\q").unwrap_err();
        assert!(e.starts_with("stop '\\q': unknown escape \\q") && e.contains("\\s (a space)"), "{e}");
        assert!(base().with("stop", "a\\").unwrap_err().contains("lone backslash"));
        assert!(s.describe().contains("\"###\"") && s.describe().contains("max_tokens 20"));
        // Setting names in any case, as the commands' names (`/SET TOP_K 5`).
        assert_eq!(base().with("TOP_K", "5").unwrap().sampler.top_k, 5);
        assert_eq!(base().with("Stop", "\\s").unwrap().stop, [" "]);
        let e = base().with("colour", "red").unwrap_err();
        assert!(e.contains("unknown setting 'colour'") && e.contains("repetition_penalty"), "{e}");
        let e = base().with("top_p", "often").unwrap_err();
        assert!(e.starts_with("top_p \"often\": expected a number in (0, 1]"), "{e}");
        let e = base().with("top_k", "-1").unwrap_err();
        assert!(e.contains("expected a whole number") && !e.contains("invalid digit"), "{e}");
        // A number past the range names the range, not only "≥ 0".
        let e = base().with("seed", "18446744073709551616").unwrap_err();
        assert!(e.contains("from 0 to 18446744073709551615"), "{e}");
        assert!(base().with("max_tokens", "0").unwrap_err().contains("max_tokens"));
        // A value past f32's range is said as given (it was "got inf"); `off` in any case.
        let e = base().with("temperature", "1e39").unwrap_err();
        assert!(e.starts_with("temperature 1e39: past the largest value taken"), "{e}");
        assert_eq!(base().with("logprobs", "3").unwrap().with("logprobs", "OFF").unwrap().logprobs, None);
        let e = base().with("temperature", "-1").unwrap_err();
        assert!(
            e.starts_with("temperature must be") && !e.contains("--"),
            "the chat names its setting, not a flag: {e}"
        );
        assert!(base().with("repetition_penalty", "0").is_err());
        assert_eq!(base().with("min_p", "0.1").unwrap().sampler.min_p, 0.1);
        let e = base().with("min_p", "2").unwrap_err();
        assert!(e.starts_with("min_p must be in [0, 1]"), "{e}");
        let s = base().with("logprobs", "3").unwrap();
        assert!(s.logprobs == Some(3) && s.describe().contains("logprobs 3"));
        assert!(s.with("logprobs", "off").unwrap().logprobs.is_none() && base().describe().contains("logprobs off"));
        assert!(base().with("logprobs", "-1").unwrap_err().contains("or off"));
        // A value's spaces around it (a line typed `/set top_k 5 `) are not part of it; a stop
        // text keeps its own, but `none` and `off` are the words.
        assert_eq!(base().with("top_k", "5 ").unwrap().sampler.top_k, 5);
        assert_eq!(base().with("temperature", "0.5\t").unwrap().sampler.temperature, 0.5);
        assert_eq!(base().with("seed", " 7 ").unwrap().sampler.seed, 7);
        assert_eq!(base().with("logprobs", "2 ").unwrap().logprobs, Some(2));
        assert!(base().with("logprobs", "3").unwrap().with("logprobs", "off ").unwrap().logprobs.is_none());
        assert_eq!(base().with("stop", "ab ").unwrap().stop, ["ab "]);
        assert!(base().with("stop", "x").unwrap().with("stop", "none ").unwrap().stop.is_empty());
        let e = base().with("top_k", "x ").unwrap_err();
        assert!(e.starts_with("top_k \"x\": expected"), "{e}");
        // Every name is settable.
        for n in ChatSettings::NAMES {
            let v = match *n {
                "stop" => "x",
                "top_p" | "min_p" | "temperature" | "repetition_penalty" => "0.9",
                _ => "3",
            };
            base().with(n, v).unwrap_or_else(|e| panic!("{n}: {e}"));
        }
    }
}
