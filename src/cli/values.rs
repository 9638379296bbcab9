//! The flags' value parsers: each refuses a bad value with what it expects.

use super::*;

/// A count that must be at least 1 (`--steps 0`, `--reps 0`, `--batch 0` are refused by the parser
/// with the flag's name).
/// A memory size (`--memory`): `ddl::model::parse_bytes`.
pub(super) fn memory_size(s: &str) -> Result<u64, String> {
    match ddl::model::parse_bytes(s)? {
        b if b < 1 << 20 => {
            // A bare number is bytes; a card's size written without its unit is meant in GB.
            let meant = if s.trim().chars().all(|c| c.is_ascii_digit()) {
                format!(": write the unit, e.g. {0}GB or {0}GiB", s.trim())
            } else {
                " (e.g. 80GB, 24GiB)".into()
            };
            Err(format!("{b} bytes: expected a device's memory, at least 1 MiB{meant}"))
        }
        b => Ok(b),
    }
}

/// A benchmark's repetitions: 1 to 10,000 (more would run for days without a line).
pub(super) fn repetitions(s: &str) -> Result<usize, String> {
    positive_at_most(s, 10_000, |v| format!("{v}: at most 10000 repetitions (nothing is printed until they are done)"))
}

/// `bench train --steps`: 1 to 10000 (a step of small-124m takes seconds on a CPU adapter, and
/// nothing is printed until they are done).
pub(super) fn timed_steps(s: &str) -> Result<usize, String> {
    positive_at_most(s, 10_000, |v| format!("{v}: at most 10000 timed steps (nothing is printed until they are done)"))
}

/// `--peak-tflops`: a positive, finite rate below 10^6 TFLOP/s.
pub(super) fn peak_tflops(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e6 => Ok(v),
        Ok(v) => {
            Err(format!("{v}: expected a rate in TFLOP/s above 0 and below 10^6 (e.g. 67 for an H100 SXM in f32)"))
        }
        Err(_) => Err(format!("expected a number of TFLOP/s (e.g. 67), got '{s}'")),
    }
}

/// `train --epochs`: passes over the training split, above 0 and at most 10^6 (0.5 and 2.5 are
/// fine: the run stops at the step where it has seen that share of the split's tokens).
pub(super) fn epochs(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e6 => Ok(v),
        Ok(v) => Err(format!("{v}: expected a number of passes over the training split above 0 (e.g. 1, 2.5)")),
        Err(_) => Err(format!("'{s}': expected a number of passes over the training split (e.g. 1, 2.5)")),
    }
}

/// `--mpi-timeout`: a number of seconds (its range is checked with the other MPI flags).
pub(super) fn seconds(s: &str) -> Result<f64, String> {
    number(s, "a number of seconds (e.g. 300)")
}

/// `--mpi-bucket-mib`: a size in MiB, 0 for one bucket (its range is checked with the other MPI
/// flags).
pub(super) fn bucket_mib(s: &str) -> Result<f64, String> {
    number(s, "a size in MiB (e.g. 1, or 0 for one bucket)")
}

/// The sampling's numbers (`--temperature`, `--top-p`, `--min-p`, `--repetition-penalty`; their
/// ranges are checked with the sampling's other settings).
pub(super) fn sampling_number(s: &str) -> Result<f32, String> {
    let v = number(s, "a number (e.g. 0.8)")?;
    ddl::generate::SamplerConfig::number(v).map_err(|e| format!("{} is {e}", s.trim()))
}

/// `data prepare --val-fraction`: a share of the tokens (its range is checked by the command).
pub(super) fn fraction(s: &str) -> Result<f64, String> {
    number(s, "a fraction of the tokens (e.g. 0.1)")
}

/// A number, or what the flag `expected` (not Rust's "invalid float literal").
fn number(s: &str, expected: &str) -> Result<f64, String> {
    s.trim().parse::<f64>().map_err(|_| format!("expected {expected}, got '{s}'"))
}

/// `tokenizer train --vocab-size`: a whole number, whose message names the sizes the trainer
/// takes (it refuses those outside them, saying why), not "≥ 0".
pub(super) fn bpe_vocab_size(s: &str) -> Result<usize, String> {
    let (min, max) = (ddl::tokenizer::BPE_BASE_VOCAB + 1, ddl::tokenizer::MAX_BPE_VOCAB);
    count(s).map_err(|e| {
        if e.contains("too large") {
            format!("{s} is too large: a byte-level BPE takes from {min} to {max}")
        } else {
            format!("{} (a byte-level BPE takes from {min} to {max})", e.replace(" ≥ 0", ""))
        }
    })
}

/// A count that may be 0 (`--head-chunk 0`: off); a negative one said as such.
pub(super) fn count(s: &str) -> Result<usize, String> {
    whole_u64(s).and_then(|v| usize::try_from(v).map_err(|_| format!("{s} is too large (at most {})", usize::MAX)))
}

/// A whole number ≥ 0 (64 bits), with a message for a negative one, one too large and anything
/// else (not Rust's "invalid digit found in string").
pub(super) fn whole_u64(s: &str) -> Result<u64, String> {
    let t = s.trim();
    match t.parse::<u64>() {
        Ok(v) => Ok(v),
        Err(_) if t.strip_prefix('-').is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())) => {
            Err(format!("{s}: a whole number ≥ 0 is expected, not a negative one"))
        }
        Err(_) if !t.is_empty() && t.trim_start_matches('+').bytes().all(|b| b.is_ascii_digit()) => {
            Err(format!("{s} is too large (at most {})", u64::MAX))
        }
        Err(_) => Err(format!("expected a whole number ≥ 0, got '{s}'")),
    }
}

/// `train --tokens`: a token count ≥ 1 as people write one (`ddl::train::cache::parse_count`).
pub(super) fn token_count(s: &str) -> Result<u64, String> {
    ddl::train::cache::parse_count(s)
}

/// `bench generate --contexts`: a context to time one token at holds it and one before (≥ 2).
pub(super) fn context_length(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(v) if v >= 2 => Ok(v),
        Ok(v) => Err(format!("{v} is too short (at least 2: the token and one before it)")),
        Err(_) => Err(format!("expected a whole number ≥ 2, got '{s}'")),
    }
}

pub(super) fn positive(s: &str) -> Result<usize, String> {
    match count(s).map_err(|e| e.replace("≥ 0", "≥ 1"))? {
        0 => Err("must be at least 1".into()),
        v => Ok(v),
    }
}

/// A batch size or sequence length: 1 to 2^24, as `train.batch_size` and `train.seq_len` allow.
pub(super) fn sizes_up_to_2_24(s: &str) -> Result<usize, String> {
    positive_at_most(s, 1 << 24, |v| {
        format!("at most 2^24 = 16777216 (as train.batch_size and train.seq_len), got {v}")
    })
}

/// A count from 1 to `max`; `over(value)` says the bound, for a number above it and for one too
/// large even for 64 bits (which says the flag's own limit, not u64's).
pub(super) fn positive_at_most(s: &str, max: usize, over: impl Fn(&str) -> String) -> Result<usize, String> {
    match positive(s) {
        Ok(v) if v > max => Err(over(&v.to_string())),
        Ok(v) => Ok(v),
        Err(e) if e.contains("too large") => Err(over(s.trim())),
        Err(e) => Err(e),
    }
}

/// `bench data --mib`, `--small-mib`: 1 MiB to 1 TiB of shards (the disk check sizes what it makes
/// from this; more than a disk holds is refused there, with the space it needs).
pub(super) fn shard_mib(s: &str) -> Result<usize, String> {
    positive_at_most(s, 1 << 20, |v| format!("{v}: at most 1048576 MiB (1 TiB) of shards"))
}

/// `data prepare --shard-tokens`: 1 to 2^31 − 1, what an llm.c shard's header (a signed 32-bit
/// count) can say; a shard past it had its count wrapped.
pub(super) fn shard_tokens(s: &str) -> Result<usize, String> {
    positive_at_most(s, i32::MAX as usize, |v| {
        format!("{v}: at most 2147483647 tokens per shard (an llm.c shard's header counts them in 32 bits)")
    })
}

/// `bench kernels --filter`'s names, without the spaces around them (`rope, swiglu` was refused:
/// no case's name contains " swiglu").
pub(super) fn filter_name(s: &str) -> Result<String, String> {
    Ok(s.trim().to_string())
}

/// A model variant's name (`--variant`, `--against`), checked where clap names the flag.
pub(super) fn variant_name(s: &str) -> Result<String, String> {
    ddl::model::Variant::parse(s.trim()).map(|v| v.name().to_string())
}

/// A run's seed: what its settings file (TOML, 64-bit signed integers) can hold.
pub(super) fn run_seed(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(v) if v <= i64::MAX as u64 => Ok(v),
        _ => Err(format!("expected a whole number from 0 to {} (what a run's config.toml holds), got '{s}'", i64::MAX)),
    }
}

/// `f32` or `f16` (`--precision`).
pub(super) fn precision(s: &str) -> Result<ddl::model::Precision, String> {
    ddl::model::Precision::parse(s.trim())
}
