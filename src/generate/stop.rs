//! Stop texts: as typed (`--stop`, chat's `/set stop`), and where a text generated so far
//! reaches one (what a byte-level tokenizer has not yet written counted).

use super::*;

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
pub(super) fn byte_level_byte(c: char) -> Option<u8> {
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
