//! Sampling and text generation.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::gpu::{Result, Wait, now};
use crate::model::Model;
use crate::tokenizer::Tokenizer;

/// Sampling settings.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// 0 = greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches p (1 = all).
    pub top_p: f32,
    /// Keep the tokens at least this fraction as likely as the most likely one (0 = all): a cut
    /// that follows the model's confidence (min-p sampling).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of the tokens in the context by this (1 =
    /// off): the window the model reads, not tokens a long prompt dropped or a slide let go.
    pub repetition_penalty: f32,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig { temperature: 0.8, top_k: 0, top_p: 1.0, min_p: 0.0, repetition_penalty: 1.0, seed: 0 }
    }
}

impl SamplerConfig {
    /// A sampling number as the settings hold it (f32), or why not: one past f32's range (1e39)
    /// became inf, which the range check said as "got inf", not as the value given (the command
    /// line's flags and chat's `/set` say the value before this).
    pub fn number(v: f64) -> std::result::Result<f32, String> {
        match v as f32 {
            x if x.is_infinite() && v.is_finite() => Err(format!("past the largest value taken ({:e})", f32::MAX)),
            x => Ok(x),
        }
    }

    /// Checks the ranges; the message names the flag.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(format!("--temperature must be a finite number ≥ 0 (0 = greedy), got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!(
                "--top-p must be in (0, 1] (1 = off: every token kept; for the likeliest token alone, --temperature \
                 0), got {}",
                self.top_p
            ));
        }
        if !(self.min_p >= 0.0 && self.min_p <= 1.0) {
            return Err(format!("--min-p must be in [0, 1] (0 = off), got {}", self.min_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(format!(
                "--repetition-penalty must be a finite number > 0 (1 = off), got {}",
                self.repetition_penalty
            ));
        }
        Ok(())
    }
}

/// A seeded sampler over logits.
pub struct Sampler {
    pub cfg: SamplerConfig,
    rng: ChaCha8Rng,
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        Sampler { cfg, rng }
    }

    /// Picks the next token from `logits`, given the tokens in the context (for the repetition
    /// penalty).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        // (A NaN logit, from activations past float32's range, is never picked: it sorts below
        // every number, where comparing it as equal to all made no order for the sort.)
        let mut l: Vec<f64> = logits.iter().map(|&x| if x.is_nan() { f64::NEG_INFINITY } else { x as f64 }).collect();
        if self.cfg.repetition_penalty != 1.0 {
            let p = self.cfg.repetition_penalty as f64;
            let mut seen = std::collections::HashSet::new();
            for &t in history {
                if (t as usize) < l.len() && seen.insert(t) {
                    let x = &mut l[t as usize];
                    *x = if *x > 0.0 { *x / p } else { *x * p };
                }
            }
        }
        if self.cfg.temperature == 0.0 {
            return l.iter().enumerate().fold((0, f64::MIN), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32;
        }
        let t = self.cfg.temperature as f64;
        let mut idx: Vec<usize> = (0..l.len()).collect();
        idx.sort_by(|&a, &b| l[b].total_cmp(&l[a]));
        if self.cfg.top_k > 0 {
            idx.truncate(self.cfg.top_k.max(1));
        }
        let mx = l[idx[0]];
        let mut probs: Vec<f64> = idx.iter().map(|&i| ((l[i] - mx) / t).exp()).collect();
        let sum: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= sum);
        if self.cfg.min_p > 0.0 {
            // The probabilities are sorted: keep those down to min_p × the largest (at least one).
            let floor = self.cfg.min_p as f64 * probs[0];
            let keep = probs.iter().take_while(|&&p| p >= floor).count().max(1);
            probs.truncate(keep);
            idx.truncate(keep);
            let s: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|p| *p /= s);
        }
        if self.cfg.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = probs.len();
            for (i, p) in probs.iter().enumerate() {
                acc += p;
                if acc >= self.cfg.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep);
            idx.truncate(keep);
            let s: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|p| *p /= s);
        }
        let u: f64 = self.rng.random_range(0.0..1.0);
        let mut acc = 0.0;
        for (p, &i) in probs.iter().zip(&idx) {
            acc += p;
            if u < acc {
                return i as u32;
            }
        }
        *idx.last().unwrap() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beta_outside_0_2_is_in_no_regime() {
        // In range: the paper's three by the thresholds, the ends included.
        for (b, r) in [(0.0, 0), (0.49, 0), (0.5, 1), (1.5, 1), (1.51, 2), (2.0, 2)] {
            assert_eq!(regime_index(b), r, "β = {b}");
            assert!(!outside_range(b), "β = {b}");
        }
        // Outside: amplifying along k (λ = 1−β beyond ±1), not identity or reflection.
        for b in [-1.0, -1e-3, 2.001, 3.0] {
            assert!(outside_range(b), "β = {b}");
            assert_eq!(REGIMES[regime_index(b)], "outside [0, 2]", "β = {b}");
        }
        // The threshold label, which a trace's JSON keeps for its readers, is unchanged.
        assert_eq!((regime(-1.0), regime(3.0)), ("identity", "reflection"));
    }

    /// Logits with NaN among them (activations past float32's range, e.g. under an intervention
    /// with --allow-out-of-range) are sampled without a panic and never give the NaN's token.
    #[test]
    fn a_nan_logit_is_never_sampled() {
        let mut l = vec![f32::NAN; 40];
        l[7] = 0.5;
        l[21] = 0.4;
        for (temperature, top_k, top_p) in [(0.0, 0, 1.0), (1.0, 0, 1.0), (0.8, 5, 0.9), (1.0, 0, 0.5)] {
            let mut s = Sampler::new(SamplerConfig { temperature, top_k, top_p, ..Default::default() });
            for _ in 0..50 {
                let t = s.sample(&l, &[3, 7]);
                assert!(t == 7 || t == 21, "picked {t} (a NaN logit) at T {temperature}, top-k {top_k}, top-p {top_p}");
            }
        }
    }

    #[test]
    fn greedy_picks_the_largest_and_top_k_1_equals_greedy() {
        let l = [0.1, 2.0, -1.0, 1.9];
        let mut s = Sampler::new(SamplerConfig { temperature: 0.0, ..Default::default() });
        assert_eq!(s.sample(&l, &[]), 1);
        let mut s = Sampler::new(SamplerConfig { temperature: 1.0, top_k: 1, ..Default::default() });
        assert_eq!(s.sample(&l, &[]), 1);
        let mut s = Sampler::new(SamplerConfig { temperature: 0.0, repetition_penalty: 10.0, ..Default::default() });
        assert_eq!(s.sample(&l, &[1]), 3, "the penalty demotes a seen token");
        // The range and what its end means: 0 keeps nothing; 1 keeps every token, and greedy
        // decoding is --temperature 0 (a top-p of 0 meant as "the likeliest alone").
        let e = SamplerConfig { top_p: 0.0, ..Default::default() }.validate().unwrap_err();
        assert!(e.contains("(0, 1]") && e.contains("1 = off") && e.contains("--temperature 0"), "{e}");
        assert!(SamplerConfig { min_p: 1.5, ..Default::default() }.validate().is_err());
        assert!(SamplerConfig { temperature: -1.0, ..Default::default() }.validate().is_err());
    }

    /// Min-p keeps the tokens at least min_p × the most likely one's probability (after the
    /// temperature): here p = 0.5, 0.3, 0.15, 0.05 and min_p 0.5 keeps the first two; min_p 1
    /// keeps the most likely alone; min_p 0 draws exactly what no min-p draws.
    /// A character tokenizer of 300 characters (scored texts need one per id).
    fn tok300() -> Tokenizer {
        Tokenizer::Char(crate::tokenizer::CharTokenizer::from_chars(
            (0..300u32).map(|i| char::from_u32(0x100 + i).unwrap()).collect(),
        ))
    }

    #[test]
    fn a_token_is_scored_against_the_models_softmax_with_its_rank_and_the_most_likely() {
        let tok = Tokenizer::Char(crate::tokenizer::CharTokenizer::from_chars("abcde".chars().collect()));
        // Fresh logits each run: an odd vocabulary of five, one tie.
        let mut rng = ChaCha8Rng::seed_from_u64(std::process::id() as u64);
        let mut logits: Vec<f32> = (0..5).map(|_| rng.random_range(-3.0f32..3.0)).collect();
        logits[4] = logits[1];
        let z: f64 = logits.iter().map(|&x| (x as f64).exp()).sum();
        for id in 0..5u32 {
            let s = score_token(&logits, id, 3, &tok);
            let want = (logits[id as usize] as f64).exp() / z;
            assert!((s.logprob.exp() - want).abs() < 1e-12, "{s:?}");
            assert_eq!(s.rank, 1 + logits.iter().filter(|&&x| x > logits[id as usize]).count());
            assert_eq!(s.text, tok.decode(&[id]).unwrap());
            // The top three in order, ties by id; each as probable as its logit says.
            let mut order: Vec<u32> = (0..5).collect();
            order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
            assert_eq!(s.top.iter().map(|a| a.id).collect::<Vec<_>>(), order[..3]);
            for a in &s.top {
                assert!((a.logprob - ((logits[a.id as usize] as f64).exp() / z).ln()).abs() < 1e-12);
            }
        }
        let s = score_token(&logits, 0, 0, &tok);
        assert!(s.top.is_empty() && s.logprob < 0.0);
        assert_eq!(score_token(&logits, 2, 99, &tok).top.len(), 5);
        // A vocabulary of 300 with many ties: the one-pass top-k and the selection agree with a
        // full sort, either side of the switch between them.
        let big: Vec<f32> = (0..300).map(|_| (rng.random_range(0..40) as f32) * 0.25).collect();
        let mut order: Vec<u32> = (0..300).collect();
        order.sort_by(|&a, &b| big[b as usize].total_cmp(&big[a as usize]).then(a.cmp(&b)));
        for n in [1, 7, TOP_BY_INSERTION, TOP_BY_INSERTION + 1, 120, 300] {
            let ids: Vec<u32> = score_token(&big, 5, n, &tok300()).top.iter().map(|a| a.id).collect();
            assert_eq!(ids, order[..n], "top {n}");
        }
    }

    /// `--logprobs N` past the vocabulary shows every token: the header says how many there are
    /// (it said `top 18446744073709551615` over 65 alternatives), and one token is one token.
    #[test]
    fn a_scores_table_heads_the_alternatives_it_shows() {
        let tok = Tokenizer::Char(crate::tokenizer::CharTokenizer::from_chars("abcde".chars().collect()));
        let logits = [0.5f32, -1.0, 2.0, 0.0, 1.0];
        let one = [score_token(&logits, 1, usize::MAX, &tok)];
        assert_eq!(one[0].top.len(), 5);
        let t = scores_table(&one, usize::MAX, "it reached --max-tokens");
        assert!(t.contains(" top 5\n") && !t.contains(&usize::MAX.to_string()), "{t}");
        assert!(t.contains("over 1 token (perplexity"), "{t}");
        let three = score_token(&logits, 1, 3, &tok);
        let t = prompt_scores_table(&[three.clone(), three], 3);
        assert!(t.contains(" top 3\n") && t.contains("over 2 tokens (perplexity"), "{t}");
        assert!(!scores_table(&one, 0, "x").lines().nth(1).unwrap().contains("top"));
    }

    #[test]
    fn min_p_keeps_the_tokens_near_the_most_likely_one() {
        let l: Vec<f32> = [0.5f64, 0.3, 0.15, 0.05].iter().map(|p| p.ln() as f32).collect();
        let draw = |cfg: SamplerConfig| {
            let mut s = Sampler::new(cfg);
            (0..4000).map(|_| s.sample(&l, &[])).collect::<Vec<u32>>()
        };
        let base = SamplerConfig { temperature: 1.0, seed: 7, ..Default::default() };
        let half = draw(SamplerConfig { min_p: 0.5, ..base.clone() });
        let count = |v: &[u32], t: u32| v.iter().filter(|&&x| x == t).count();
        assert_eq!(count(&half, 2) + count(&half, 3), 0);
        // 0.5 / 0.8 of the draws are token 0: 2500 ± 5 standard deviations (≈ 31 each).
        assert!((count(&half, 0) as i64 - 2500).abs() < 155, "{}", count(&half, 0));
        assert!(draw(SamplerConfig { min_p: 1.0, ..base.clone() }).iter().all(|&t| t == 0));
        let all = draw(base.clone());
        assert_eq!(draw(SamplerConfig { min_p: 0.0, ..base.clone() }), all);
        assert!(count(&all, 3) > 0, "without min-p the unlikely token is drawn too");
        // 0.15 ≥ 0.25 × 0.5: min_p 0.25 keeps three.
        let quarter = draw(SamplerConfig { min_p: 0.25, ..base });
        assert!(count(&quarter, 2) > 0 && count(&quarter, 3) == 0);
    }

    /// A stop text is found wherever it ends in the newest piece (inside a token's text, or begun
    /// in earlier pieces), and the piece is kept up to its end; the earliest of several wins.
    #[test]
    fn a_stop_text_ending_inside_a_piece_cuts_the_piece_right_after_it() {
        let st = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // " Marcius" is one piece: "Mar" ends inside it.
        assert_eq!(stop_cut("ROMEO Marcius", 8, &st(&["Mar"])), Some(4));
        assert_eq!(stop_cut("ROMEO Marcius", 8, &st(&["ius"])), Some(8));
        assert_eq!(stop_cut("ROMEO Marcius", 8, &st(&["xyz"])), None);
        // Begun in earlier pieces ("O M" starts in "ROMEO").
        assert_eq!(stop_cut("ROMEO Marcius", 8, &st(&["O Ma"])), Some(3));
        // Wholly in earlier text: not this piece's (it would have stopped earlier).
        assert_eq!(stop_cut("ROMEO Marcius", 8, &st(&["ROM"])), None);
        // The earliest end of several.
        assert_eq!(stop_cut("ab cdef", 5, &st(&["ef", "cd", "x"])), Some(3));
        // Multi-byte characters: cuts at character boundaries, search start moved back to one.
        assert_eq!(stop_cut("né é!", 4, &st(&["é!"])), Some(4));
        assert_eq!(stop_cut("aéb", 1, &st(&["éb"])), Some(1));
        // An empty piece or empty stop texts stop nothing.
        assert_eq!(stop_cut("abc", 0, &st(&["c"])), None);
        assert_eq!(stop_cut("abc", 1, &st(&[""])), None);
        // A blank line (chat's stop) inside a piece of three newlines.
        assert_eq!(stop_cut("hi\n\n\n", 3, &st(&["\n\n"])), Some(2));
    }

    #[test]
    fn stop_texts_are_unescaped_as_typed() {
        for (typed, meant) in [
            ("\\n", "\n"),
            ("END\\n", "END\n"),
            ("a\\tb", "a\tb"),
            ("\\\\n", "\\n"),
            // (A space at either end, which chat's `/set stop` and a shell would trim.)
            ("\\s", " "),
            ("\\sEND\\s", " END "),
            ("\\\\s", "\\s"),
            ("tail\\\\", "tail\\"),
            ("\n", "\n"),
            ("plain", "plain"),
            ("\\\\\\n", "\\\n"),
        ] {
            assert_eq!(unescape_stop(typed).as_deref(), Ok(meant), "{typed:?}");
        }
        // Any other escape, and a lone backslash at the end, are refused with the four there are.
        for (typed, says) in [
            ("\\q", "unknown escape \\q"),
            ("a\\xb", "unknown escape \\x"),
            ("\\\\\\r", "unknown escape \\r"),
            ("tail\\", "ends in a lone backslash"),
            ("\\", "ends in a lone backslash"),
        ] {
            let e = unescape_stop(typed).unwrap_err();
            assert!(e.contains(says) && e.contains(&format!("'{typed}'")), "{typed:?}: {e}");
            assert!(e.contains("\\n (a newline), \\t (a tab), \\s (a space) and \\\\ (a backslash)"), "{e}");
        }
    }

    /// A stop text matches only text the model wrote: not a U+FFFD that a byte-level BPE's decoder
    /// puts for a lone byte (a continuation byte, or a lead byte cut short by the next token),
    /// but a U+FFFD the model wrote as its three bytes; with a character tokenizer every
    /// character is written.
    #[test]
    fn a_stop_text_matches_no_u_fffd_the_model_did_not_write() {
        let tok = crate::tokenizer::train_bpe(&"To be, or not to be: that is the question.\n".repeat(40), 270).unwrap();
        let t = match &tok {
            Tokenizer::Bpe(t) => t,
            Tokenizer::Char(_) => unreachable!("a BPE"),
        };
        // The byte table is the tokenizer's own: every token decodes to its bytes as read here.
        for id in 0..tok.vocab_size() as u32 {
            let token = t.id_to_token(id).unwrap();
            if let Some(b) = token.chars().map(byte_level_byte).collect::<Option<Vec<u8>>>() {
                assert_eq!(String::from_utf8_lossy(&b), tok.decode(&[id]).unwrap(), "id {id} {token:?}");
            }
        }
        let e_acute = tok.encode("é").unwrap(); // C3 A9: two byte tokens (no merge of them)
        let fffd = tok.encode("\u{FFFD}").unwrap(); // EF BF BD, as the model would write it
        assert_eq!((e_acute.len(), fffd.len()), (2, 3));
        let (lead, cont) = (e_acute[0], e_acute[1]);
        let tt = tok.encode("t").unwrap()[0];
        let stops = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // Streams `ids`: per token the cut each stop text list gives, the text and the offsets.
        let run = |ids: &[u32], st: &[String]| {
            let (mut stream, mut un, mut text, mut cuts) = (tok.stream(), Unwritten::default(), String::new(), vec![]);
            for &id in ids {
                let piece = stream.push(id).unwrap();
                un.push(&tok, id, &piece, text.len());
                text.push_str(&piece);
                cuts.push(stop_cut_written(&text, piece.len(), st, un.offsets()));
            }
            (cuts, text, un.offsets().to_vec())
        };
        // A lone continuation byte, then U+FFFD written, then "t".
        let ids: Vec<u32> = [vec![cont], fffd.clone(), vec![tt]].concat();
        let (cuts, text, at) = run(&ids, &stops(&["\u{FFFD}"]));
        assert_eq!((text.as_str(), at.as_slice()), ("\u{FFFD}\u{FFFD}t", &[0][..]));
        assert_eq!(cuts, [None, None, None, Some(3), None], "stops at the written U+FFFD only");
        // A lead byte cut short by "t": the "t" stops, "\u{FFFD}t" does not.
        let (cuts, text, at) = run(&[lead, tt], &stops(&["\u{FFFD}t"]));
        assert_eq!((text.as_str(), at.as_slice(), cuts.as_slice()), ("\u{FFFD}t", &[0][..], &[None, None][..]));
        assert_eq!(run(&[lead, tt], &stops(&["t"])).0, [None, Some(4)]);
        // An incomplete character at the end is held back: nothing to match.
        assert_eq!(run(&[tt, lead], &stops(&["\u{FFFD}"])).0, [None, None]);
        // The first match is unwritten, a later one in the same piece is not: the later one.
        assert_eq!(stop_cut_written("a\u{FFFD}b\u{FFFD}", 8, &stops(&["\u{FFFD}"]), &[1]), Some(8));
        assert_eq!(stop_cut_written("a\u{FFFD}b\u{FFFD}", 8, &stops(&["\u{FFFD}"]), &[1, 5]), None);
        // A character tokenizer's U+FFFD is a character of its vocabulary: written.
        let chars = Tokenizer::Char(crate::tokenizer::CharTokenizer::from_chars(vec!['a', '\u{FFFD}']));
        let mut un = Unwritten::default();
        un.push(&chars, 1, "\u{FFFD}", 1);
        assert!(un.offsets().is_empty());
    }
}

/// A stop text as typed (`--stop`, chat's `/set stop`): `\n` a newline, `\t` a tab, `\s` a
/// space (a lone space, or one at either end, which a command line trims), `\\` one backslash
/// (a newline typed as itself, `--stop $'\n'`, is one too). Any other backslash is refused, naming
/// the escape and the four there are: a `\q` or a trailing `\` taken as it is would be a stop
/// text nobody meant.
pub fn unescape_stop(typed: &str) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(typed.len());
    let mut chars = typed.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next() {
            Some('n') => '\n',
            Some('t') => '\t',
            Some('s') => ' ',
            Some('\\') => '\\',
            Some(other) => {
                return Err(format!(
                    "'{typed}': unknown escape \\{other}; the escapes are \\n (a newline), \\t (a tab), \\s (a \
                     space) and \\\\ (a backslash): write \\\\{other} for a backslash and '{other}'"
                ));
            }
            None => {
                return Err(format!(
                    "'{typed}' ends in a lone backslash; the escapes are \\n (a newline), \\t (a tab), \\s (a \
                     space) and \\\\ (a backslash): write \\\\ at the end for a backslash"
                ));
            }
        });
    }
    Ok(out)
}

/// Which characters U+FFFD of a generation's text the model did not write: those its tokenizer's
/// decoder put for bytes that form no character (a lone byte token, a character cut short). A
/// stop text matches only text the model wrote, so such a U+FFFD never matches one
/// ([`stop_cut_written`]). Exact for a character tokenizer (each character is one the model
/// wrote) and a byte-level BPE (the token's bytes are decoded here as its stream decodes them);
/// another decoder's U+FFFD cannot be told from a written one, and none of them is taken as
/// written.
#[derive(Debug, Clone, Default)]
pub struct Unwritten {
    /// Byte-level BPE: the bytes of an incomplete character held back, as the stream holds them.
    held: Vec<u8>,
    /// Byte offsets in the text of the U+FFFD the model did not write.
    at: Vec<usize>,
}

impl Unwritten {
    /// Takes the `piece` of text that token `id` completed, appended to a text of `offset`
    /// bytes: the U+FFFD in it that stand for no character are noted.
    pub fn push(&mut self, tok: &Tokenizer, id: u32, piece: &str, offset: usize) {
        let fffd = |s: &str| s.match_indices(char::REPLACEMENT_CHARACTER).map(|(i, _)| i).collect::<Vec<_>>();
        match tok {
            Tokenizer::Char(_) => {}
            Tokenizer::Bpe(t) if matches!(t.get_decoder(), Some(tokenizers::DecoderWrapper::ByteLevel(_))) => {
                let Some(token) = t.id_to_token(id) else { return };
                // As the stream decoder does: every character to its byte, or (an added token)
                // the token's UTF-8 as it is.
                match token.chars().map(byte_level_byte).collect::<Option<Vec<u8>>>() {
                    Some(b) => self.held.extend(b),
                    None => self.held.extend(token.as_bytes()),
                }
                let (mut text, mut substituted) = (String::new(), Vec::new());
                loop {
                    match std::str::from_utf8(&self.held) {
                        Ok(s) => {
                            text.push_str(s);
                            self.held.clear();
                            break;
                        }
                        Err(e) => {
                            let valid = e.valid_up_to();
                            text.push_str(std::str::from_utf8(&self.held[..valid]).expect("valid prefix"));
                            let Some(n) = e.error_len() else {
                                self.held.drain(..valid);
                                break;
                            };
                            substituted.push(text.len());
                            text.push(char::REPLACEMENT_CHARACTER);
                            self.held.drain(..valid + n);
                        }
                    }
                }
                // (The same bytes as the stream's; should the two ever differ, no U+FFFD of the
                // piece is taken as written.)
                let at = if text == piece { substituted } else { fffd(piece) };
                self.at.extend(at.into_iter().map(|i| offset + i));
            }
            Tokenizer::Bpe(_) => self.at.extend(fffd(piece).into_iter().map(|i| offset + i)),
        }
    }

    /// Byte offsets in the text of the U+FFFD the model did not write.
    pub fn offsets(&self) -> &[usize] {
        &self.at
    }
}

/// The byte a character of a byte-level BPE token stands for (GPT-2's table: the printable bytes
/// stand for themselves, the others in order for U+0100, U+0101, …), `None` for another character.
fn byte_level_byte(c: char) -> Option<u8> {
    let printable = |b: u32| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
    let u = c as u32;
    if u <= 0xFF {
        return printable(u).then_some(u as u8);
    }
    let n = (u - 0x100) as usize;
    (0u32..=0xFF).filter(|&b| !printable(b)).nth(n).map(|b| b as u8)
}

/// Where a stop text ends in the newest piece of generated text: `text` is the generated text
/// with that piece (its last `piece_len` bytes) at its end. Returns how many bytes of the piece
/// to keep, up to and including the end of the earliest stop text that ends in it, or `None`
/// when none does. A stop text may begin in earlier pieces and end inside this one (a BPE token
/// holds several characters: `Mar` ends inside ` Marcius`).
pub fn stop_cut(text: &str, piece_len: usize, stops: &[String]) -> Option<usize> {
    stop_cut_written(text, piece_len, stops, &[])
}

/// [`stop_cut`] where the U+FFFD at the byte offsets `unwritten` (sorted) stand for no character
/// the model wrote ([`Unwritten`]): a stop text that would match one of them does not match there.
pub fn stop_cut_written(text: &str, piece_len: usize, stops: &[String], unwritten: &[usize]) -> Option<usize> {
    let start = text.len().checked_sub(piece_len)?;
    stops
        .iter()
        .filter(|st| !st.is_empty())
        .filter_map(|st| {
            // Only a match that ends in the piece: one ending before it would have stopped an
            // earlier piece.
            let mut from = start.saturating_sub(st.len() - 1);
            while !text.is_char_boundary(from) {
                from -= 1;
            }
            loop {
                let at = text[from..].find(st.as_str())? + from;
                let end = at + st.len();
                if end <= start {
                    from = at + text[at..].chars().next().map_or(1, char::len_utf8);
                    continue;
                }
                // (The first unwritten U+FFFD at or after `at`: inside the match or not.)
                let i = unwritten.partition_point(|&u| u < at);
                if unwritten.get(i).is_some_and(|&u| u < end) {
                    from = at + text[at..].chars().next().map_or(1, char::len_utf8);
                    continue;
                }
                return Some(end - start);
            }
        })
        .min()
}

/// Options of [`generate`].
#[derive(Debug, Clone)]
pub struct GenOptions {
    pub max_tokens: usize,
    /// Stop when the generated text contains one of these.
    pub stop: Vec<String>,
    /// Stop at this token (e.g. `<|endoftext|>`).
    pub stop_token: Option<u32>,
    /// Record a per-token trace of every delta write.
    pub trace: bool,
    /// Interventions: one β map per sublayer (`None`: the model's own gates).
    pub beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
    /// Interventions: the sublayers whose write direction is replaced by the prompt's mean k
    /// ([`crate::model::Interventions::k_mean_targets`]; empty: none).
    pub k_mean: Vec<bool>,
}

/// The fixed directions of `k=mean` interventions for a cache: for each sublayer in `targets`,
/// the mean of its unit k over the tokens of `prompt` (its last `max_seq_len`), renormalised to
/// unit length, read from one prefill under `beta_maps` without any direction replaced. Empty
/// when no sublayer is a target. A mean of zero length (directions that cancel) is refused.
pub fn mean_k_directions(
    model: &Model,
    prompt: &[u32],
    beta_maps: &Option<Vec<crate::kernels::delta::BetaMap>>,
    targets: &[bool],
) -> Result<Vec<Option<crate::gpu::Tensor>>> {
    now(mean_k_directions_with(model, prompt, beta_maps, targets, Wait::Block))
}

/// [`mean_k_directions`], waiting for the device as `wait` says.
pub async fn mean_k_directions_with(
    model: &Model,
    prompt: &[u32],
    beta_maps: &Option<Vec<crate::kernels::delta::BetaMap>>,
    targets: &[bool],
    wait: Wait,
) -> Result<Vec<Option<crate::gpu::Tensor>>> {
    if !targets.iter().any(|&t| t) {
        return Ok(Vec::new());
    }
    let (cap, d) = (model.cfg.max_seq_len, model.cfg.d_model);
    let keep = &prompt[prompt.len().saturating_sub(cap)..];
    if keep.is_empty() {
        return Err(crate::gpu::GpuError::Shape("k=mean needs a prompt of at least one token".into()));
    }
    let mut cache = model.decode_cache()?;
    cache.beta_maps = beta_maps.clone();
    let mut p = model.decode_program(&cache, keep.len())?;
    p.forward_with(model, keep, &mut cache, wait).await?;
    let mut out = Vec::with_capacity(targets.len());
    for (i, w) in p.acts().writes().enumerate() {
        if !targets.get(i).copied().unwrap_or(false) {
            out.push(None);
            continue;
        }
        let k = w.k.read_f32_with(&model.gpu, wait).await?;
        let mut mean = vec![0.0f64; d];
        for row in k.chunks(d).take(keep.len()) {
            mean.iter_mut().zip(row).for_each(|(m, &x)| *m += x as f64);
        }
        let norm = mean.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm.is_nan() || norm <= 1e-12 {
            return Err(crate::gpu::GpuError::Shape(format!(
                "k=mean on sublayer {} (block {} {}): the prompt's directions cancel (mean of length {norm:.1e}); use \
                 a longer prompt or another sublayer",
                i,
                i / 2,
                if i % 2 == 0 { "attn" } else { "mlp" }
            )));
        }
        let unit: Vec<f32> = mean.iter().map(|x| (x / norm) as f32).collect();
        out.push(Some(crate::gpu::Tensor::from_f32(&model.gpu, &format!("k_fixed{i}"), &[d], &unit)?));
    }
    Ok(out)
}

/// The regimes a write's β can be in, by [`regime_index`]: the paper's three, and a fourth for β
/// outside [0, 2] (reachable only with `--allow-out-of-range` interventions), where λ = 1−β is
/// above 1 or below −1: the write amplifies the k-component, none of the three.
pub const REGIMES: [&str; 4] = ["identity", "projection", "reflection", "outside [0, 2]"];

/// β is outside [0, 2]: λ = 1−β lies outside [−1, 1], so the write amplifies along k rather than
/// keeping (identity), replacing (projection) or reflecting (reflection) the k-component (a NaN is
/// in no regime either).
pub fn outside_range(beta: f32) -> bool {
    !(0.0..=2.0).contains(&beta)
}

/// The index in [`REGIMES`] of a gate value: 3 when [`outside_range`], else that of [`regime`].
pub fn regime_index(beta: f32) -> usize {
    if outside_range(beta) {
        return 3;
    }
    match regime(beta) {
        "identity" => 0,
        "projection" => 1,
        _ => 2,
    }
}

/// Regime of a gate value by the thresholds alone: identity (β < 0.5: λ = 1−β > 0.5), reflection
/// (β > 1.5: λ < −0.5), projection in between (λ ≈ 0: the k-component is replaced by v). It does
/// not look at the range: β outside [0, 2] ([`outside_range`]) gets the label of its side (what a
/// trace's JSON `regime` records, for its readers), though it is in none of the three regimes;
/// [`regime_index`] tells it apart.
pub fn regime(beta: f32) -> &'static str {
    if beta < 0.5 {
        "identity"
    } else if beta > 1.5 {
        "reflection"
    } else {
        "projection"
    }
}

/// What every delta write did for one generated token.
#[derive(Debug, Clone, Default)]
pub struct TokenTrace {
    pub token: u32,
    pub text: String,
    /// Per sublayer (block-major, attention then MLP): β.
    pub beta: Vec<f32>,
    /// Unit directions k [sublayers × d].
    pub k: Vec<f32>,
    /// Written values v [sublayers × m].
    pub v: Vec<f32>,
    /// kᵀX, what the write erases [sublayers × m].
    pub ktx: Vec<f32>,
    /// ‖β (v − kᵀX)‖, the size of the write.
    pub write: Vec<f32>,
    /// How likely the model found this token where it stands ([`score_token`] with
    /// [`TRACE_TOP`] alternatives): `None` for the first token of a context (nothing predicted it)
    /// and in traces written before scores were recorded.
    pub score: Option<TokenScore>,
}

/// The alternatives a trace records per token (the most likely tokens at its place).
pub const TRACE_TOP: usize = 5;

/// Reads what every delta write did for the rows `rows` of program `p` into `trs` (one per row):
/// each buffer is read back once for all the rows.
async fn read_traces(
    model: &Model,
    p: &crate::model::DecodeProgram,
    rows: std::ops::Range<usize>,
    trs: &mut [TokenTrace],
    wait: Wait,
) -> Result<()> {
    let (d, m) = (model.cfg.d_model, model.cfg.m());
    let g = &model.gpu;
    for w in p.acts().writes() {
        let beta = w.beta.read_f32_with(g, wait).await?;
        let k = w.k.read_f32_with(g, wait).await?;
        let v = w.v.read_f32_with(g, wait).await?;
        let delta = w.delta.read_f32_with(g, wait).await?;
        for (row, tr) in rows.clone().zip(trs.iter_mut()) {
            let b = beta[row];
            let (vr, dr) = (&v[row * m..(row + 1) * m], &delta[row * m..(row + 1) * m]);
            tr.beta.push(b);
            tr.k.extend_from_slice(&k[row * d..(row + 1) * d]);
            tr.v.extend_from_slice(vr);
            tr.ktx.extend(vr.iter().zip(dr).map(|(a, b)| a - b));
            tr.write.push(b.abs() * dr.iter().map(|x| x * x).sum::<f32>().sqrt());
        }
    }
    Ok(())
}

/// One token of a [`Generator`].
#[derive(Debug, Clone)]
pub struct GenStep {
    pub token: u32,
    /// The text this token completes (empty while a character is split over tokens).
    pub piece: String,
    /// What every delta write did while the model read this token (when tracing).
    pub trace: Option<TokenTrace>,
    /// How likely the model found it ([`Generator::set_scores`]; `None` unless asked).
    pub score: Option<TokenScore>,
}

/// Stateful generation with the KV and conv caches, one token per [`Generator::step`]: the
/// prompt is prefilled in one batched forward by [`Generator::new`]. When the context is full,
/// the last half of the text is kept and re-prefilled (documented behaviour).
pub struct Generator<'a> {
    model: &'a Model,
    tok: &'a Tokenizer,
    cache: crate::model::DecodeCache,
    step_prog: crate::model::DecodeProgram,
    logits: Vec<f32>,
    history: Vec<u32>,
    sampler: Sampler,
    stream: crate::tokenizer::StreamDecoder<'a>,
    text: String,
    /// The U+FFFD of `text` that stand for no character the model wrote.
    unwritten: Unwritten,
    trace: bool,
    /// Alternatives each sampled token is scored with for its [`GenStep`] (`None`: not scored).
    score_top: Option<usize>,
    prompt_traces: Vec<TokenTrace>,
}

impl<'a> Generator<'a> {
    /// Prefills `prompt` (its last `max_seq_len` tokens when it is longer than the context).
    /// With `trace`, the writes of the prefilled prompt tokens are recorded too
    /// ([`Generator::prompt_traces`]).
    pub fn new(model: &'a Model, tok: &'a Tokenizer, prompt: &[u32], sampler: Sampler, trace: bool) -> Result<Self> {
        Self::with_interventions(model, tok, prompt, sampler, trace, None, &[])
    }

    /// [`Generator::new`] under interventions: every decode program of this generation applies
    /// `beta_maps` (one per sublayer, [`crate::model::Interventions::maps`]), and the sublayers in
    /// `k_mean` write along the prompt's mean direction ([`mean_k_directions`]) from the prefill on.
    pub fn with_interventions(
        model: &'a Model,
        tok: &'a Tokenizer,
        prompt: &[u32],
        sampler: Sampler,
        trace: bool,
        beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
        k_mean: &[bool],
    ) -> Result<Self> {
        now(Self::open(model, tok, prompt, sampler, trace, beta_maps, k_mean, Wait::Block))
    }

    /// [`Generator::new`] whose device reads are awaited (a browser; an async task natively).
    pub async fn new_async(
        model: &'a Model,
        tok: &'a Tokenizer,
        prompt: &[u32],
        sampler: Sampler,
        trace: bool,
    ) -> Result<Self> {
        Self::open(model, tok, prompt, sampler, trace, None, &[], Wait::Await).await
    }

    /// [`Generator::with_interventions`] whose device reads are awaited.
    pub async fn with_interventions_async(
        model: &'a Model,
        tok: &'a Tokenizer,
        prompt: &[u32],
        sampler: Sampler,
        trace: bool,
        beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
        k_mean: &[bool],
    ) -> Result<Self> {
        Self::open(model, tok, prompt, sampler, trace, beta_maps, k_mean, Wait::Await).await
    }

    /// [`Generator::with_interventions`] waiting for the device as `wait` says: code written once
    /// for a thread that may block and for a browser that must await.
    #[allow(clippy::too_many_arguments)]
    pub async fn open(
        model: &'a Model,
        tok: &'a Tokenizer,
        prompt: &[u32],
        sampler: Sampler,
        trace: bool,
        beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
        k_mean: &[bool],
        wait: Wait,
    ) -> Result<Self> {
        let k_fixed = mean_k_directions_with(model, prompt, &beta_maps, k_mean, wait).await?;
        let cap = model.cfg.max_seq_len;
        let v = model.cfg.vocab_size;
        let keep = &prompt[prompt.len().saturating_sub(cap)..];
        if keep.is_empty() {
            return Err(crate::gpu::GpuError::Shape("generation needs a prompt of at least one token".into()));
        }
        let mut cache = model.decode_cache()?;
        cache.beta_maps = beta_maps;
        cache.k_fixed = k_fixed;
        let step_prog = model.decode_program(&cache, 1)?;
        let mut pre = model.decode_program(&cache, keep.len())?;
        let first = pre.forward_with(model, keep, &mut cache, wait).await?;
        let logits = first[(keep.len() - 1) * v..].to_vec();
        let mut prompt_traces = Vec::new();
        if trace {
            let mut st = tok.stream();
            prompt_traces = keep
                .iter()
                .enumerate()
                .map(|(i, &t)| TokenTrace {
                    token: t,
                    text: st.push(t).unwrap_or_default(),
                    // (Token i as predicted after the ones before it: the prefill's row i − 1.)
                    score: (i > 0).then(|| score_token(&first[(i - 1) * v..i * v], t, TRACE_TOP, tok)),
                    ..Default::default()
                })
                .collect();
            if model.cfg.variant.is_ddl() {
                read_traces(model, &pre, 0..keep.len(), &mut prompt_traces, wait).await?;
            }
        }
        Ok(Generator {
            model,
            tok,
            cache,
            step_prog,
            logits,
            history: prompt.to_vec(),
            sampler,
            // Byte-level BPE can split a character over tokens: stream whole characters only.
            stream: tok.stream(),
            text: String::new(),
            unwritten: Unwritten::default(),
            trace,
            score_top: None,
            prompt_traces,
        })
    }

    /// An empty cache for a re-prefill, with this generation's interventions.
    fn fresh_cache(&mut self) -> Result<()> {
        let (maps, fixed) = (self.cache.beta_maps.take(), std::mem::take(&mut self.cache.k_fixed));
        self.cache = self.model.decode_cache()?;
        (self.cache.beta_maps, self.cache.k_fixed) = (maps, fixed);
        Ok(())
    }

    /// The traces of the prefilled prompt tokens (empty unless tracing).
    pub fn prompt_traces(&self) -> &[TokenTrace] {
        &self.prompt_traces
    }

    /// Reads more tokens into the caches (a chat's next turn): only these are prefilled, in one
    /// batched forward at the current position, so the model sees the whole history as if it had
    /// been one prompt. Past the context, the last half of it (and at least the new tokens, at
    /// most a context) is kept and re-prefilled, as [`Generator::step`] slides. Returns how many
    /// tokens were prefilled and, when tracing, the new tokens' traces.
    pub fn feed(&mut self, tokens: &[u32]) -> Result<(usize, Vec<TokenTrace>)> {
        now(self.feed_with(tokens, Wait::Block))
    }

    /// [`Generator::feed`] whose device reads are awaited.
    pub async fn feed_async(&mut self, tokens: &[u32]) -> Result<(usize, Vec<TokenTrace>)> {
        self.feed_with(tokens, Wait::Await).await
    }

    /// [`Generator::feed`], waiting for the device as `wait` says.
    pub async fn feed_with(&mut self, tokens: &[u32], wait: Wait) -> Result<(usize, Vec<TokenTrace>)> {
        let model = self.model;
        let (cap, v) = (model.cfg.max_seq_len, model.cfg.vocab_size);
        if tokens.is_empty() {
            return Ok((0, Vec::new()));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= v) {
            return Err(crate::gpu::GpuError::Shape(format!(
                "token id {bad} is outside the model's vocabulary of {v}"
            )));
        }
        self.history.extend_from_slice(tokens);
        let (run, fresh): (Vec<u32>, bool) = if self.cache.pos + tokens.len() > cap {
            let keep = (cap / 2).max(tokens.len()).min(cap);
            (self.history[self.history.len() - keep..].to_vec(), true)
        } else {
            (tokens.to_vec(), false)
        };
        if fresh {
            self.fresh_cache()?;
        }
        let mut p = model.decode_program(&self.cache, run.len())?;
        let l = p.forward_with(model, &run, &mut self.cache, wait).await?;
        // The prediction the first new token answers: the logits after the history before it.
        let before = std::mem::replace(&mut self.logits, l[(run.len() - 1) * v..].to_vec());
        if fresh {
            self.step_prog = model.decode_program(&self.cache, 1)?;
        }
        let mut traces = Vec::new();
        if self.trace {
            let mut st = self.tok.stream();
            // New token j is the run's row r = j + (run − tokens); r − 1 predicted it.
            let off = run.len() as isize - tokens.len() as isize;
            traces = tokens
                .iter()
                .enumerate()
                .map(|(j, &t)| {
                    let r = j as isize + off;
                    let logits = if r >= 1 {
                        Some(&l[(r as usize - 1) * v..r as usize * v])
                    } else {
                        (j == 0).then_some(&before[..])
                    };
                    TokenTrace {
                        token: t,
                        text: st.push(t).unwrap_or_default(),
                        score: logits.map(|x| score_token(x, t, TRACE_TOP, self.tok)),
                        ..Default::default()
                    }
                })
                .collect();
            let n = tokens.len().min(run.len());
            if model.cfg.variant.is_ddl() {
                read_traces(model, &p, run.len() - n..run.len(), &mut traces[tokens.len() - n..], wait).await?;
            }
            // The tokens beyond the context were not read: no trace, as for a prompt's (their
            // text was decoded above, so the rest's pieces are whole).
            traces.drain(..tokens.len() - n);
        }
        Ok((run.len(), traces))
    }

    /// Scores every token [`Generator::step`] samples from now on ([`GenStep::score`], with `top`
    /// alternatives), or none (`None`).
    pub fn set_scores(&mut self, top: Option<usize>) {
        self.score_top = top;
    }

    /// Samples with `sampler` from now on (a chat's changed settings or next turn's seed).
    pub fn set_sampler(&mut self, sampler: Sampler) {
        self.sampler = sampler;
    }

    /// Ends a reply: the text the stream decoder still holds back (an incomplete character), and
    /// the generated text starts afresh (the caches and history stay).
    pub fn end_reply(&mut self) -> String {
        let rest = std::mem::replace(&mut self.stream, self.tok.stream()).finish().unwrap_or_default();
        self.text.clear();
        self.unwritten = Unwritten::default();
        rest
    }

    /// The prompt and every token generated so far.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    /// How many of the history's last tokens the model reads now (its context, after the
    /// slides): what [`Generator::logits`] predicts from and the repetition penalty covers.
    pub fn context_len(&self) -> usize {
        self.cache.pos
    }

    /// The logits the next [`Generator::step`] samples from (the model's prediction after the
    /// history, in the context it has now).
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// The text generated so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Where a stop text ends in the newest piece of the text generated so far, `piece_len` bytes
    /// ([`stop_cut`]), matching only text the model wrote: not a U+FFFD its tokenizer put for
    /// bytes that form no character ([`Unwritten`]).
    pub fn stop_cut(&self, piece_len: usize, stops: &[String]) -> Option<usize> {
        stop_cut_written(&self.text, piece_len, stops, self.unwritten.offsets())
    }

    /// Samples the next token and feeds it to the model (so its trace, and the logits of the
    /// token after it, are ready).
    pub fn step(&mut self) -> Result<GenStep> {
        now(self.step_with(Wait::Block))
    }

    /// [`Generator::step`] whose device reads are awaited.
    pub async fn step_async(&mut self) -> Result<GenStep> {
        self.step_with(Wait::Await).await
    }

    /// [`Generator::step`], waiting for the device as `wait` says.
    pub async fn step_with(&mut self, wait: Wait) -> Result<GenStep> {
        let model = self.model;
        let (cap, v) = (model.cfg.max_seq_len, model.cfg.vocab_size);
        // (The repetition penalty covers the context the model reads, not the tokens a long
        // prompt dropped or a slide let go.)
        let window = &self.history[self.history.len() - self.context_len().min(self.history.len())..];
        let next = self.sampler.sample(&self.logits, window);
        // Scored once, from the logits it was sampled from, for the trace and the caller.
        let scored =
            self.score_top.max(self.trace.then_some(TRACE_TOP)).map(|n| score_token(&self.logits, next, n, self.tok));
        let cut = |n: usize| {
            scored.clone().map(|mut s| {
                s.top.truncate(n);
                s
            })
        };
        let (score, step_score) = (cut(TRACE_TOP), self.score_top.and_then(cut));
        if self.stream.fresh() {
            // The text so far as the first new token's context (a WordPiece `##` joins it).
            self.stream.prime(&self.history);
        }
        self.history.push(next);
        let piece = self.stream.push(next).unwrap_or_default();
        self.unwritten.push(self.tok, next, &piece, self.text.len());
        self.text.push_str(&piece);
        let mut trace =
            self.trace.then(|| TokenTrace { token: next, text: piece.clone(), score, ..Default::default() });
        let ddl = model.cfg.variant.is_ddl();
        if self.cache.pos + 1 > cap {
            // Slide: keep the last half of the context (this token included) and re-prefill it.
            let keep_from = self.history.len() - slide_keep(cap);
            let kept: Vec<u32> = self.history[keep_from..].to_vec();
            self.fresh_cache()?;
            let mut p = model.decode_program(&self.cache, kept.len())?;
            let l = p.forward_with(model, &kept, &mut self.cache, wait).await?;
            self.logits = l[(kept.len() - 1) * v..].to_vec();
            self.step_prog = model.decode_program(&self.cache, 1)?;
            if let (Some(tr), true) = (trace.as_mut(), ddl) {
                read_traces(model, &p, kept.len() - 1..kept.len(), std::slice::from_mut(tr), wait).await?;
            }
        } else {
            self.logits = self.step_prog.forward_with(model, &[next], &mut self.cache, wait).await?;
            if let (Some(tr), true) = (trace.as_mut(), ddl) {
                read_traces(model, &self.step_prog, 0..1, std::slice::from_mut(tr), wait).await?;
            }
        }
        Ok(GenStep { token: next, piece, trace, score: step_score })
    }

    /// Whatever text the stream decoder still holds back (an incomplete character).
    pub fn finish(self) -> String {
        self.stream.finish().unwrap_or_default()
    }
}

/// One of the most likely tokens at a position: its id, its text and its log-probability.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Alternative {
    pub id: u32,
    pub text: String,
    pub logprob: f64,
}

/// A generated token as the model saw it: its log-probability under the model's distribution
/// (the logits' softmax at temperature 1, before the sampler's penalty and filters), its rank
/// there (1: the most likely), and the `top` most likely tokens at its position.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TokenScore {
    pub id: u32,
    pub text: String,
    pub logprob: f64,
    pub rank: usize,
    pub top: Vec<Alternative>,
}

/// Up to this many alternatives, [`score_token`] keeps them in one pass over the logits.
const TOP_BY_INSERTION: usize = 32;

/// Scores token `id` against `logits` (natural logs, in f64), with the `top` most likely tokens
/// (ties by id) and their texts as `tok` decodes each alone.
pub fn score_token(logits: &[f32], id: u32, top: usize, tok: &Tokenizer) -> TokenScore {
    let mx = logits.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let lse = mx + logits.iter().map(|&x| (x as f64 - mx).exp()).sum::<f64>().ln();
    let own = logits[id as usize];
    let rank = 1 + logits.iter().filter(|&&x| x > own).count();
    let by = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]).then(a.cmp(b));
    let n = top.min(logits.len());
    let idx = if n <= TOP_BY_INSERTION {
        // One pass keeping the n best in order (ties by id: the earlier id stays ahead), without
        // an index of the whole vocabulary.
        let mut best: Vec<u32> = Vec::with_capacity(n + 1);
        for i in 0..logits.len() as u32 {
            if best.len() == n && (n == 0 || by(&i, &best[n - 1]).is_ge()) {
                continue;
            }
            let at = best.partition_point(|b| by(b, &i).is_lt());
            best.insert(at, i);
            best.truncate(n);
        }
        best
    } else {
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        if n < idx.len() {
            idx.select_nth_unstable_by(n - 1, by);
        }
        idx.truncate(n);
        idx.sort_by(by);
        idx
    };
    let text = |i: u32| tok.decode(&[i]).unwrap_or_default();
    TokenScore {
        id,
        text: text(id),
        logprob: own as f64 - lse,
        rank,
        top: idx
            .into_iter()
            .map(|i| Alternative { id: i, text: text(i), logprob: logits[i as usize] as f64 - lse })
            .collect(),
    }
}

/// The table `--logprobs N` prints after a text (`ddl generate`, chat's `/set logprobs N`): each
/// token's log-probability, probability and rank under the model, and the `n` most likely tokens
/// at its place; then the mean and the perplexity it amounts to, and `stopped` (why the text
/// ended).
pub fn scores_table(scores: &[TokenScore], n: usize, stopped: &str) -> String {
    table_of_scores(
        scores,
        n,
        "log-probabilities under the model (temperature 1, before the sampling's filters)",
        1,
        Some(stopped),
    )
}

/// The table `--score-prompt` prints before the continuations: [`prompt_scores`] as
/// [`scores_table`] shows a continuation's, numbered by the tokens' places in the prompt (the
/// first, predicted by nothing, has no row).
pub fn prompt_scores_table(scores: &[TokenScore], n: usize) -> String {
    table_of_scores(
        scores,
        n,
        "the prompt's log-probabilities under the model (each token after the ones before it)",
        2,
        None,
    )
}

/// A table of scores under `title`, rows numbered from `first`, ending with the mean and, for a
/// continuation, why it `stopped`.
fn table_of_scores(scores: &[TokenScore], n: usize, title: &str, first: usize, stopped: Option<&str>) -> String {
    let shown = |t: &str| format!("{t:?}");
    let cols = if n == 0 { 5 } else { 6 };
    // (N past the vocabulary shows every token: as many as there are.)
    let n = scores.iter().map(|s| s.top.len()).max().map_or(n, |most| n.min(most));
    let mut rows: Vec<Vec<String>> =
        vec![vec!["#".into(), "token".into(), "log p".into(), "p".into(), "rank".into(), format!("top {n}")]];
    for (i, s) in scores.iter().enumerate() {
        let top: Vec<String> = s.top.iter().map(|a| format!("{} {:.3}", shown(&a.text), a.logprob.exp())).collect();
        rows.push(vec![
            (i + first).to_string(),
            shown(&s.text),
            format!("{:.4}", s.logprob),
            format!("{:.4}", s.logprob.exp()),
            s.rank.to_string(),
            top.join("  "),
        ]);
    }
    rows.iter_mut().for_each(|r| r.truncate(cols));
    let mut out = format!("--- {title} ---\n");
    out.push_str(&aligned(&rows, &[1, 5]));
    match (scores.is_empty(), stopped) {
        (true, Some(stopped)) => out.push_str(&format!("no token generated: {stopped}\n")),
        (true, None) => out.push_str("no token to score: the prompt is one token, which nothing predicts\n"),
        (false, _) => {
            let mean = scores.iter().map(|s| s.logprob).sum::<f64>() / scores.len() as f64;
            out.push_str(&format!(
                "mean log p {mean:.4} over {} (perplexity {:.3})",
                crate::plural(scores.len(), "token"),
                (-mean).exp()
            ));
            if let Some(stopped) = stopped {
                out.push_str(&format!("; stopped: {stopped}"));
            }
            out.push('\n');
        }
    }
    out
}

/// Rows of cells as lines of columns two spaces apart, each as wide as its widest cell: the
/// columns in `left` aligned left, the others right; trailing spaces cut.
fn aligned(rows: &[Vec<String>], left: &[usize]) -> String {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = (0..cols)
            .map(|c| match left.contains(&c) {
                true => format!("{:<w$}", r[c], w = widths[c]),
                false => format!("{:>w$}", r[c], w = widths[c]),
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// It generated `max_tokens` tokens.
    Length,
    /// Its text came to a stop text (`--stop`).
    StopText,
    /// The model generated the end-of-text token (neither shown nor returned).
    EndOfText,
    /// The caller asked it to stop ([`generate_scored_until`]: Ctrl-C in `ddl generate`).
    Interrupted,
}

/// What [`generate_scored`] generated.
#[derive(Debug, Clone)]
pub struct Generated {
    pub tokens: Vec<u32>,
    /// The generated tokens' traces, when asked.
    pub traces: Vec<TokenTrace>,
    /// Each generated token's score, when asked (`top` alternatives each).
    pub scores: Vec<TokenScore>,
    pub stop: Stop,
}

/// Generates with the KV and conv caches (through a [`Generator`]): the prompt is prefilled in
/// one batched forward, then one token per step. When the context is full, the last half of the
/// text is kept and re-prefilled (documented behaviour). Returns the new tokens and, if asked,
/// their traces (generated tokens only; see [`Generator::prompt_traces`] for the prompt's).
pub fn generate(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenOptions,
    sampler: &mut Sampler,
    on_token: impl FnMut(&str),
) -> Result<(Vec<u32>, Vec<TokenTrace>)> {
    let g = generate_scored(model, tok, prompt, opts, sampler, None, on_token)?;
    Ok((g.tokens, g.traces))
}

/// [`generate`], scoring each generated token ([`score_token`]) with `top` alternatives when
/// `top` is given, and saying why it stopped.
pub fn generate_scored(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenOptions,
    sampler: &mut Sampler,
    top: Option<usize>,
    on_token: impl FnMut(&str),
) -> Result<Generated> {
    generate_scored_until(model, tok, prompt, opts, sampler, top, &|| false, on_token)
}

/// [`generate_scored`], stopping before the next token once `stop_now` says so ([`Stop::Interrupted`];
/// what was generated is kept, its last character finished as at any end).
#[allow(clippy::too_many_arguments)]
pub fn generate_scored_until(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenOptions,
    sampler: &mut Sampler,
    top: Option<usize>,
    stop_now: &dyn Fn() -> bool,
    mut on_token: impl FnMut(&str),
) -> Result<Generated> {
    let owned = std::mem::replace(sampler, Sampler::new(sampler.cfg.clone()));
    let mut g =
        Generator::with_interventions(model, tok, prompt, owned, opts.trace, opts.beta_maps.clone(), &opts.k_mean)?;
    g.set_scores(top);
    let mut out = Generated { tokens: Vec::new(), traces: Vec::new(), scores: Vec::new(), stop: Stop::Length };
    for _ in 0..opts.max_tokens {
        if stop_now() {
            out.stop = Stop::Interrupted;
            break;
        }
        let s = g.step()?;
        // The stop token ends the text: it is neither shown nor returned.
        if opts.stop_token == Some(s.token) {
            out.stop = Stop::EndOfText;
            break;
        }
        out.tokens.push(s.token);
        out.scores.extend(s.score);
        if let Some(t) = s.trace {
            out.traces.push(t);
        }
        // A stop text ends the text right after it, even inside the token's text.
        if let Some(keep) = g.stop_cut(s.piece.len(), &opts.stop) {
            on_token(&s.piece[..keep]);
            *sampler = g.sampler;
            out.stop = Stop::StopText;
            return Ok(out);
        }
        on_token(&s.piece);
    }
    let rest = if out.tokens.is_empty() {
        String::new()
    } else {
        std::mem::replace(&mut g.stream, tok.stream()).finish().unwrap_or_default()
    };
    *sampler = g.sampler;
    if !rest.is_empty() {
        on_token(&rest);
    }
    Ok(out)
}

/// One timed generation, the same procedure natively and in a browser (the browser-vs-native
/// speed benchmark, `make bench-web`): prefills `prompt` (not timed), then generates `n` tokens
/// greedily, each read back with its trace when `trace` (as the visualizer generates). `clock`
/// gives milliseconds (`Instant` natively, `performance.now()` in a page). Returns the tokens and
/// the milliseconds the `n` steps took.
pub async fn timed_generation(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
    trace: bool,
    wait: Wait,
    clock: &dyn Fn() -> f64,
) -> Result<(Vec<u32>, f64)> {
    let greedy = Sampler::new(SamplerConfig { temperature: 0.0, ..Default::default() });
    let mut g = Generator::open(model, tok, prompt, greedy, trace, None, &[], wait).await?;
    let mut out = Vec::with_capacity(n);
    let t0 = clock();
    for _ in 0..n {
        out.push(g.step_with(wait).await?.token);
    }
    Ok((out, clock() - t0))
}

/// Log-probabilities (natural log) the model gives each token of `continuation` after `prompt`,
/// teacher-forced, under `beta_maps` when given and with the `k_mean` sublayers' directions
/// fixed to the prompt's mean (as generation fixes them). One value per continuation token, each
/// in the context generation gave it: the prompt's last `max_seq_len` tokens, then, whenever the
/// context is full, its last half ([`Generator::step`]'s slide) — one forward per such window.
pub fn continuation_logprobs(
    model: &Model,
    prompt: &[u32],
    continuation: &[u32],
    beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
    k_mean: &[bool],
) -> Result<Vec<f64>> {
    now(continuation_logprobs_with(model, prompt, continuation, beta_maps, k_mean, Wait::Block))
}

/// [`continuation_logprobs`], waiting for the device as `wait` says.
pub async fn continuation_logprobs_with(
    model: &Model,
    prompt: &[u32],
    continuation: &[u32],
    beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
    k_mean: &[bool],
    wait: Wait,
) -> Result<Vec<f64>> {
    if prompt.is_empty() || continuation.is_empty() {
        return Ok(Vec::new());
    }
    let k_fixed = mean_k_directions_with(model, prompt, &beta_maps, k_mean, wait).await?;
    let all: Vec<u32> = prompt.iter().chain(continuation).copied().collect();
    let mut out = Vec::with_capacity(continuation.len());
    teacher_forced(model, &all, prompt.len(), beta_maps, k_fixed, wait, |row, id| {
        let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
        let lse = max + row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
        out.push(row[id as usize] as f64 - lse);
    })
    .await?;
    Ok(out)
}

/// Scores every token of `prompt` after the first as the model predicts it from the ones before
/// it ([`score_token`] with `top` alternatives), teacher-forced in the contexts generation would
/// give a continuation ([`continuation_logprobs`]' windows), under `beta_maps` and with the
/// `k_mean` sublayers' directions fixed to the whole prompt's mean, as its generation fixes them
/// (`ddl generate --logprobs N --score-prompt`). One score per token from the second on.
pub fn prompt_scores(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    top: usize,
    beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
    k_mean: &[bool],
) -> Result<Vec<TokenScore>> {
    now(async {
        if prompt.len() < 2 {
            return Ok(Vec::new());
        }
        let k_fixed = mean_k_directions_with(model, prompt, &beta_maps, k_mean, Wait::Block).await?;
        let mut out = Vec::with_capacity(prompt.len() - 1);
        teacher_forced(model, prompt, 1, beta_maps, k_fixed, Wait::Block, |row, id| {
            out.push(score_token(row, id, top, tok))
        })
        .await?;
        Ok(out)
    })
}

/// Runs `all` through the model teacher-forced and calls `each(logits, token)` for every token
/// from `first` on, in order, with the logits that predicted it: the context generation would
/// give it — the last `max_seq_len` tokens before `first`, then, whenever the context is full,
/// its last half ([`Generator::step`]'s slide) — one forward per such window.
async fn teacher_forced(
    model: &Model,
    all: &[u32],
    first: usize,
    beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
    k_fixed: Vec<Option<crate::gpu::Tensor>>,
    wait: Wait,
    mut each: impl FnMut(&[f32], u32),
) -> Result<()> {
    let (cap, v) = (model.cfg.max_seq_len, model.cfg.vocab_size);
    let n = all.len();
    // A window [start, last): its positions predict tokens start + 1 ..= last; generation
    // predicts `first ..= last` in it (the earlier ones belong to the window before).
    let (mut start, mut first) = (first.saturating_sub(cap), first);
    while first < n {
        let last = (start + cap).min(n - 1);
        let window = &all[start..last];
        let mut cache = model.decode_cache()?;
        cache.beta_maps = beta_maps.clone();
        cache.k_fixed = k_fixed.clone();
        let mut p = model.decode_program(&cache, window.len())?;
        let logits = p.forward_with(model, window, &mut cache, wait).await?;
        for i in first..=last {
            each(&logits[(i - 1 - start) * v..(i - start) * v], all[i]);
        }
        first = last + 1;
        if first >= n {
            break;
        }
        start = first - slide_keep(cap);
    }
    Ok(())
}

/// One token at one state of a logit lens ([`continuation_lens`]): how the model's own head,
/// read on that state, scores the token (its log p, natural log, and rank: 1 + how many tokens
/// the head found likelier), the head's likeliest token there (the smallest id among ties) with
/// its log p, and the entropy of the head's distribution (nats).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LensScore {
    pub logprob: f64,
    pub rank: usize,
    pub top: u32,
    pub top_text: String,
    pub top_logprob: f64,
    pub entropy: f64,
}

/// What each logit-lens state after the embedding follows, in the lens's headers: a sublayer's
/// delta write, or for the baseline (residual additions, no delta writes) its residual addition.
pub fn lens_step(variant: crate::model::Variant) -> &'static str {
    if variant.is_ddl() { "each sublayer's write" } else { "each sublayer's residual addition" }
}

/// The states a lens reads, in model order: `embedding` (X_0), then the sublayer whose write
/// left each state (`block0.attn`, …; the last one's state is the model's output).
pub fn lens_states(model: &Model) -> Vec<String> {
    std::iter::once("embedding".to_string())
        .chain((0..2 * model.cfg.n_layers).map(crate::model::intervene::sublayer_name))
        .collect()
}

/// The logit lens of `continuation` after `prompt` (`ddl generate --lens`): per continuation
/// token, per state of [`lens_states`], the model's own head (its readout compressor where it
/// has one, final norm, tied embedding) read on that state — the last state's scores are the
/// model's own. Teacher-forced in the contexts generation gave each token ([`teacher_forced`]'s
/// windows), through [`crate::model::Scoring::Lens`], under `beta_maps` when given (the fixed directions
/// of `k=mean` are not supported: the caller refuses them).
pub fn continuation_lens(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    continuation: &[u32],
    beta_maps: Option<&[crate::kernels::delta::BetaMap]>,
) -> Result<Vec<Vec<LensScore>>> {
    if prompt.is_empty() || continuation.is_empty() {
        return Ok(Vec::new());
    }
    let all: Vec<u32> = prompt.iter().chain(continuation).copied().collect();
    let (cap, n, subs) = (model.cfg.max_seq_len, all.len(), 2 * model.cfg.n_layers);
    let text = |id: u32| tok.decode(&[id]).unwrap_or_default();
    let score = |loss: f32, r: &[f32]| LensScore {
        logprob: -(loss as f64),
        rank: r[0] as usize,
        top: r[1] as u32,
        top_text: text(r[1] as u32),
        top_logprob: r[2] as f64,
        entropy: r[3] as f64,
    };
    let mut out = Vec::with_capacity(continuation.len());
    // The windows of `teacher_forced`: [start, last), predicting first ..= last.
    let (mut start, mut first) = (prompt.len().saturating_sub(cap), prompt.len());
    while first < n {
        let last = (start + cap).min(n - 1);
        let t = last - start;
        let tokens: Vec<i32> = all[start..last].iter().map(|&x| x as i32).collect();
        let targets: Vec<i32> = (start + 1..=last).map(|i| if i >= first { all[i] as i32 } else { -1 }).collect();
        // (The head in slices of 256 rows: a window of a large vocabulary never holds all its logits.)
        let p = model.loss_program_with(1, t, if t > 256 { 256 } else { 0 }, beta_maps, crate::model::Scoring::Lens)?;
        p.set_batch(model, &tokens, &targets)?;
        model.eval_loss(&p)?;
        let lens = p.lens().expect("a lens program");
        let (ll, lr) = (lens.loss.read_f32(&model.gpu)?, lens.ranks.read_f32(&model.gpu)?);
        let own_loss = p.row_losses().expect("a loss program").read_f32(&model.gpu)?;
        let own_ranks = p.row_ranks().expect("a ranked program").read_f32(&model.gpu)?;
        for i in first..=last {
            let j = i - 1 - start;
            let mut row: Vec<LensScore> =
                (0..subs).map(|s| score(ll[s * t + j], &lr[4 * (s * t + j)..4 * (s * t + j + 1)])).collect();
            row.push(score(own_loss[j], &own_ranks[4 * j..4 * j + 4]));
            out.push(row);
        }
        first = last + 1;
        if first >= n {
            break;
        }
        start = first - slide_keep(cap);
    }
    Ok(out)
}

/// The table `ddl generate --lens` prints after a continuation: per token (numbered from 1) its
/// probability under the head at each state, `*` where it was the head's likeliest there; `step`
/// is what the states follow ([`lens_step`]).
pub fn lens_table(states: &[String], step: &str, tokens: &[u32], lens: &[Vec<LensScore>], tok: &Tokenizer) -> String {
    let mut rows: Vec<Vec<String>> =
        vec![["#".to_string(), "token".to_string()].into_iter().chain(states.iter().cloned()).collect()];
    for (i, (id, row)) in tokens.iter().zip(lens).enumerate() {
        let mut r = vec![(i + 1).to_string(), format!("{:?}", tok.decode(&[*id]).unwrap_or_default())];
        r.extend(row.iter().map(|s| format!("{:.4}{}", s.logprob.exp(), if s.rank == 1 { "*" } else { " " })));
        rows.push(r);
    }
    let cols = rows[0].len();
    let mut out = format!(
        "--- logit lens: p of each token under the model's head read on the state after the embedding and after \
         {step} (teacher-forced, in the contexts generation gave it; * the head's likeliest there; the last column \
         is the model's own) ---\n",
    );
    out.push_str(&aligned(&rows, &[1]));
    if !lens.is_empty() {
        // Mean log p per state over the tokens.
        let means: Vec<String> = (0..cols - 2)
            .map(|s| format!("{:.4}", lens.iter().map(|r| r[s].logprob).sum::<f64>() / lens.len() as f64))
            .collect();
        out.push_str(&format!("mean log p per state ({} tokens): {}\n", lens.len(), means.join("  ")));
    }
    out
}

/// How many tokens a full context keeps when generation slides: its last half (at least one).
fn slide_keep(cap: usize) -> usize {
    (cap / 2).max(1)
}

/// Per token of `continuation`: its log-probability under the interventions (`beta_maps`,
/// `k_mean`) minus without them, both teacher-forced ([`continuation_logprobs`]).
pub fn delta_logprobs(
    model: &Model,
    prompt: &[u32],
    continuation: &[u32],
    beta_maps: Vec<crate::kernels::delta::BetaMap>,
    k_mean: &[bool],
) -> Result<Vec<f64>> {
    now(delta_logprobs_with(model, prompt, continuation, beta_maps, k_mean, Wait::Block))
}

/// [`delta_logprobs`], waiting for the device as `wait` says.
pub async fn delta_logprobs_with(
    model: &Model,
    prompt: &[u32],
    continuation: &[u32],
    beta_maps: Vec<crate::kernels::delta::BetaMap>,
    k_mean: &[bool],
    wait: Wait,
) -> Result<Vec<f64>> {
    let base = continuation_logprobs_with(model, prompt, continuation, None, &[], wait).await?;
    let with = continuation_logprobs_with(model, prompt, continuation, Some(beta_maps), k_mean, wait).await?;
    Ok(with.iter().zip(&base).map(|(a, b)| a - b).collect())
}

/// The first position where two token sequences differ (one ending before the other counts),
/// `None` when they are equal.
pub fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y).or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

/// What `--compare` measures: the continuation without and with the interventions (same prompt,
/// same sampler seed), where they first differ, and the change of the log-probability of each
/// token of the original continuation under the interventions (teacher-forced).
#[derive(Debug, Clone)]
pub struct Comparison {
    pub original: Vec<u32>,
    pub intervened: Vec<u32>,
    /// Each continuation's text as generation streams it (cut right after a stop text, even
    /// inside its last token).
    pub original_text: String,
    pub intervened_text: String,
    /// Index of the first generated token that differs (`None`: identical).
    pub first_difference: Option<usize>,
    /// Per original continuation token: log p under the interventions − log p without them.
    pub delta_logprob: Vec<f64>,
}

/// Generates `prompt`'s continuation twice — as the model is, and under `beta_maps` — with
/// samplers of the same settings and seed, and measures the difference ([`Comparison`]).
pub fn compare(
    model: &Model,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenOptions,
    sampler: &SamplerConfig,
    beta_maps: Vec<crate::kernels::delta::BetaMap>,
    k_mean: &[bool],
) -> Result<Comparison> {
    let run = |maps: Option<Vec<crate::kernels::delta::BetaMap>>, k_mean: &[bool]| -> Result<(Vec<u32>, String)> {
        let o = GenOptions { beta_maps: maps, k_mean: k_mean.to_vec(), trace: false, ..opts.clone() };
        let mut s = Sampler::new(sampler.clone());
        let mut text = String::new();
        Ok((generate(model, tok, prompt, &o, &mut s, |t| text.push_str(t))?.0, text))
    };
    let (original, original_text) = run(None, &[])?;
    let (intervened, intervened_text) = run(Some(beta_maps.clone()), k_mean)?;
    let first_difference = first_difference(&original, &intervened);
    let delta_logprob = delta_logprobs(model, prompt, &original, beta_maps, k_mean)?;
    Ok(Comparison { original, intervened, original_text, intervened_text, first_difference, delta_logprob })
}

/// Loads a checkpoint directory for inference (no optimizer state): the model on `gpu` and its
/// tokenizer.
#[cfg(feature = "native")]
pub fn load_for_inference(
    gpu: &std::sync::Arc<crate::gpu::Gpu>,
    dir: &std::path::Path,
) -> anyhow::Result<(Model, Tokenizer)> {
    use crate::train::checkpoint;
    let ck = checkpoint::load_to_device(dir, gpu.clone(), false)
        .map_err(|e| checkpoint::with_remedy_for_reading(dir, "--checkpoint", e))?;
    // (Before anything is printed: a context whose caches this adapter cannot hold.)
    ck.model.check_decode_cache()?;
    Ok((ck.model, ck.tokenizer))
}

/// Loads a checkpoint for inference from the bytes of its `model.safetensors` (a file opened in
/// a browser, or downloaded): the model on `gpu`, its tokenizer and training step. `name` names
/// the file in errors.
pub fn load_for_inference_from_bytes(
    gpu: &std::sync::Arc<crate::gpu::Gpu>,
    name: &str,
    bytes: &[u8],
) -> anyhow::Result<(Model, Tokenizer, usize)> {
    let (config, tokenizer, step, params) = crate::train::checkpoint::parse_model(std::path::Path::new(name), bytes)?;
    let model = Model::with_params(gpu.clone(), config, &params)?;
    model.check_decode_cache()?;
    Ok((model, tokenizer, step))
}

/// The format name a trace's two files carry (safetensors metadata and the summary's field).
pub const TRACE_FORMAT: &str = "ddl-trace-1";

/// Checks, before anything is generated, that a trace can be written at `path` without
/// destroying anything: its folder exists, the path does not end in `.json` (the summary goes
/// to `path` with the extension `.json`), and each of the two files is absent or an earlier
/// trace (which it replaces). The error names the file, what it holds and the remedy.
pub fn check_trace_path(path: &std::path::Path) -> Result<(), String> {
    let shown = path.display();
    if path.extension().is_some_and(|e| e == "json") {
        return Err(format!(
            "--trace {shown}: the trace's JSON summary is written beside it with the extension .json, \
             so the trace itself cannot end in .json; use e.g. {}",
            path.with_extension("safetensors").display()
        ));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if !dir.is_dir() {
        return Err(format!("--trace {shown}: the folder '{}' does not exist; create it first", dir.display()));
    }
    if let Some(e) = crate::train::checkpoint::kept_refusal("--trace", path) {
        return Err(e);
    }
    let json = path.with_extension("json");
    for (file, is_trace) in [(path, is_trace_file as fn(&std::path::Path) -> bool), (&json, is_trace_summary)] {
        if file.is_dir() {
            return Err(format!("--trace {shown}: '{}' is a folder; give a file name", file.display()));
        }
        if file.exists() && !is_trace(file) {
            return Err(format!(
                "--trace {shown}: '{}' exists and is not a ddl trace, and writing the trace would replace it; \
                 choose another --trace path",
                file.display()
            ));
        }
    }
    // The folder takes the files, under their temporary names too (as long as the writes' own):
    // a read-only folder or a name too long would otherwise fail only after generating.
    for file in [path, json.as_path()] {
        crate::train::checkpoint::probe_writable(file).map_err(|e| {
            format!("--trace {shown}: cannot write '{}' there: {e}; choose a folder that takes files", file.display())
        })?;
    }
    Ok(())
}

/// Whether `path` is a trace's safetensors file (its header's metadata says [`TRACE_FORMAT`]).
fn is_trace_file(path: &std::path::Path) -> bool {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(path) else { return false };
    let mut len = [0u8; 8];
    if f.read_exact(&mut len).is_err() {
        return false;
    }
    let len = u64::from_le_bytes(len);
    if len > 100 << 20 {
        return false;
    }
    let mut header = vec![0u8; len as usize];
    if f.read_exact(&mut header).is_err() {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(&header)
        .is_ok_and(|h| h["__metadata__"]["format"].as_str() == Some(TRACE_FORMAT))
}

/// Whether `path` is a trace's JSON summary.
fn is_trace_summary(path: &std::path::Path) -> bool {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v["format"].as_str() == Some(TRACE_FORMAT))
}

/// Writes a generation trace: `path` (safetensors arrays `beta` [T, S], `lambda` = 1−β,
/// `k` `[T, S, d]`, `v` / `ktx` `[T, S, m]`, `write` `[T, S]`, `tokens` `[T]`, S = 2·L sublayers in block
/// order, attention then MLP) and `path.json` (tokens, text, regimes and per-sublayer counts).
pub fn write_trace(
    path: &std::path::Path,
    cfg: &crate::model::ModelConfig,
    traces: &[TokenTrace],
) -> std::io::Result<()> {
    write_trace_with(path, cfg, traces, &TraceOrigin::default())
}

/// How a traced text was made, recorded in both trace files so that it can be made again.
#[derive(Debug, Clone, Default)]
pub struct TraceOrigin {
    /// The interventions, `; `-separated as [`crate::model::Interventions::describe`] writes them.
    pub interventions: String,
    /// Whether they ran with β allowed outside [0, 2] (`--allow-out-of-range`).
    pub allow_out_of_range: bool,
    /// The text the traced tokens continue (`""` when the traces are the whole text).
    pub prompt: String,
    /// The sampling settings of the traced tokens (their own seed).
    pub sampling: Option<SamplerConfig>,
    /// Per traced token, whether it was read (a prompt's or a chat line's token) rather than
    /// generated; empty: every traced token was generated.
    pub read: Vec<bool>,
    /// A chat's turns (empty elsewhere): where each starts among the traced tokens and the
    /// settings its reply was sampled with (`/set` changes them between turns).
    pub turns: Vec<TraceTurn>,
    /// The trace is a chat's (`ddl chat --trace`): its `turns` are recorded even when none is
    /// left (`[]` after `/undo` of every turn; elsewhere no turns are `null`).
    pub chat: bool,
}

/// One chat turn of a trace: its line's first token and how its reply was made.
#[derive(Debug, Clone)]
pub struct TraceTurn {
    /// Index of the turn's first traced token (its line's).
    pub from_token: usize,
    /// The reply's sampling, with the turn's own seed (the chat's seed plus the turns since it
    /// was given: `--seed`, or the last `/set seed`).
    pub sampling: SamplerConfig,
    pub max_tokens: usize,
    /// Stop texts besides a blank line.
    pub stop: Vec<String>,
    /// The interventions the turn ran under (`/intervene`), `; `-separated; empty: none.
    pub interventions: String,
}

/// [`write_trace`] with how the text was made ([`TraceOrigin`]): written into both files.
pub fn write_trace_with(
    path: &std::path::Path,
    cfg: &crate::model::ModelConfig,
    traces: &[TokenTrace],
    origin: &TraceOrigin,
) -> std::io::Result<()> {
    check_trace_path(path).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let t = traces.len();
    let s = if cfg.variant.is_ddl() { 2 * cfg.n_layers } else { 0 };
    let (d, m) = (cfg.d_model, cfg.m());
    let cat = |f: &dyn Fn(&TokenTrace) -> &Vec<f32>, per: usize| -> Vec<f32> {
        traces
            .iter()
            .flat_map(|tr| {
                let v = f(tr);
                let mut v = v.clone();
                v.resize(s * per, f32::NAN);
                v
            })
            .collect()
    };
    let beta = cat(&|tr| &tr.beta, 1);
    let lambda: Vec<f32> = beta.iter().map(|b| 1.0 - b).collect();
    let tokens: Vec<f32> = traces.iter().map(|tr| tr.token as f32).collect();
    let arrays: Vec<(String, Vec<usize>, Vec<f32>)> = vec![
        ("beta".into(), vec![t, s], beta.clone()),
        ("lambda".into(), vec![t, s], lambda),
        ("k".into(), vec![t, s, d], cat(&|tr| &tr.k, d)),
        ("v".into(), vec![t, s, m], cat(&|tr| &tr.v, m)),
        ("ktx".into(), vec![t, s, m], cat(&|tr| &tr.ktx, m)),
        ("write".into(), vec![t, s], cat(&|tr| &tr.write, 1)),
        ("tokens".into(), vec![t], tokens),
    ];
    // How likely the model found each token: NaN (and rank 0, id −1) where nothing predicted it.
    let mut arrays = arrays;
    let k = TRACE_TOP;
    let score = |f: &dyn Fn(&TokenScore) -> f32, none: f32| -> Vec<f32> {
        traces.iter().map(|tr| tr.score.as_ref().map_or(none, f)).collect()
    };
    let top = |f: &dyn Fn(&Alternative) -> f32, none: f32| -> Vec<f32> {
        traces
            .iter()
            .flat_map(|tr| {
                let mut row: Vec<f32> = tr.score.as_ref().map_or(Vec::new(), |s| s.top.iter().map(f).collect());
                row.resize(k, none);
                row
            })
            .collect()
    };
    arrays.push(("logprob".into(), vec![t], score(&|s| s.logprob as f32, f32::NAN)));
    arrays.push(("rank".into(), vec![t], score(&|s| s.rank as f32, 0.0)));
    arrays.push(("top_ids".into(), vec![t, k], top(&|a| a.id as f32, -1.0)));
    arrays.push(("top_logprob".into(), vec![t, k], top(&|a| a.logprob as f32, f32::NAN)));
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = arrays
        .iter()
        .map(|(n, shape, data)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(
                    safetensors::Dtype::F32,
                    shape.clone(),
                    bytemuck::cast_slice(data),
                )
                .unwrap(),
            )
        })
        .collect();
    let mut meta = std::collections::HashMap::new();
    meta.insert("format".to_string(), TRACE_FORMAT.to_string());
    meta.insert("config".to_string(), serde_json::to_string(cfg).unwrap());
    // (f32 settings written as typed: 0.7, not 0.699999988.)
    let short = |x: f32| x.to_string().parse::<f64>().unwrap_or(x as f64);
    let sampling_json = |c: &SamplerConfig| {
        serde_json::json!({"temperature": short(c.temperature), "top_k": c.top_k, "top_p": short(c.top_p),
            "min_p": short(c.min_p), "repetition_penalty": short(c.repetition_penalty), "seed": c.seed})
    };
    let sampling = origin.sampling.as_ref().map(sampling_json);
    let turns = (origin.chat || !origin.turns.is_empty()).then(|| {
        serde_json::Value::Array(
            origin
                .turns
                .iter()
                .map(|t| {
                    serde_json::json!({"from_token": t.from_token, "sampling": sampling_json(&t.sampling),
                        "max_tokens": t.max_tokens, "stop": t.stop, "interventions": t.interventions})
                })
                .collect(),
        )
    });
    meta.insert("interventions".to_string(), origin.interventions.clone());
    if origin.allow_out_of_range {
        meta.insert("allow_out_of_range".to_string(), "true".to_string());
    }
    meta.insert("prompt".to_string(), origin.prompt.clone());
    if let Some(s) = &sampling {
        meta.insert("sampling".to_string(), s.to_string());
    }
    if let Some(t) = &turns {
        meta.insert("turns".to_string(), t.to_string());
    }
    let bytes = safetensors::serialize(views, Some(meta)).map_err(std::io::Error::other)?;
    // [identity, projection, reflection] by the thresholds alone (as before: they sum to the
    // tokens), then how many of those βs lie outside [0, 2].
    let mut counts = vec![[0usize; 4]; s];
    for tr in traces {
        for (i, b) in tr.beta.iter().enumerate() {
            let r = match regime(*b) {
                "identity" => 0,
                "projection" => 1,
                _ => 2,
            };
            counts[i][r] += 1;
            counts[i][3] += outside_range(*b) as usize;
        }
    }
    let summary = serde_json::json!({
        "format": TRACE_FORMAT,
        "interventions": origin.interventions,
        "allow_out_of_range": origin.allow_out_of_range,
        "prompt": origin.prompt,
        "sampling": sampling,
        "turns": turns,
        "regime_thresholds": {"identity": "beta < 0.5", "projection": "0.5 <= beta <= 1.5", "reflection": "beta > 1.5",
            "outside": "beta < 0 or beta > 2: in none of the three regimes (1 - beta is above 1 or below -1: the write \
                amplifies along k); such a beta keeps its side's label in `regime` and `regime_counts`, and is flagged \
                in each token's `outside_range` and counted in `regime_counts`' `outside`"},
        "sublayers": (0..s).map(crate::model::intervene::sublayer_name).collect::<Vec<_>>(),
        "tokens": traces.iter().enumerate().map(|(i, tr)| serde_json::json!({
            "id": tr.token, "text": tr.text, "read": origin.read.get(i).copied().unwrap_or(false),
            "beta": tr.beta, "regime": tr.beta.iter().map(|b| regime(*b)).collect::<Vec<_>>(),
            "outside_range": tr.beta.iter().map(|b| outside_range(*b)).collect::<Vec<_>>(),
            "logprob": tr.score.as_ref().map(|s| s.logprob), "rank": tr.score.as_ref().map(|s| s.rank),
            "top": tr.score.as_ref().map(|s| &s.top),
        })).collect::<Vec<_>>(),
        "regime_counts": counts.iter().map(|c| serde_json::json!({"identity": c[0], "projection": c[1], "reflection": c[2], "outside": c[3]})).collect::<Vec<_>>(),
    });
    let json_path = path.with_extension("json");
    // Both or neither: a full disk while the summary was written left the new arrays beside the
    // earlier trace's summary (or none), a pair that contradicts itself.
    let json = serde_json::to_string_pretty(&summary).map_err(std::io::Error::other)?;
    crate::train::checkpoint::write_all_atomic(&[(path, &bytes), (&json_path, json.as_bytes())])
}
