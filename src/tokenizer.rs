//! Tokenizers behind one type: a character-level vocabulary built from a corpus, and Hugging Face
//! byte-level BPE (trained here or loaded from a standard `tokenizer.json`). Serialised as JSON
//! inside checkpoints.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainer};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

/// The end-of-text special token of byte-level BPE tokenizers (GPT-2's spelling).
pub const EOT: &str = "<|endoftext|>";

/// Tokens every byte-level BPE vocabulary holds before any merge: 256 bytes and [`EOT`].
pub const BPE_BASE_VOCAB: usize = 256 + 1;

/// Texts longer than this are tokenised in pieces cut where the pre-tokenizer splits anyway.
pub(crate) const CHUNK_BYTES: usize = 64 * 1024;

/// A piece that runs this far past its target size without a place [`safe_cut`] allows (a run
/// of letters, digits or other marks without whitespace: a pasted blob, a line of one repeated
/// word) is cut at the next character boundary, changing the tokens there: Hugging Face's BPE
/// takes memory (≈ 125 bytes a byte) and merge time (quadratic) in a pre-token's length, so one
/// line of 8 MB of letters took 1 GB to encode and hours to train on.
pub(crate) const MAX_RUN_BYTES: usize = 16 * 1024;

/// The text the BPE trainer sees at a time: a run without a safe cut longer than this plus
/// [`MAX_RUN_BYTES`] is cut (so no word it counts is longer than about 32 KB).
const TRAIN_PIECE_BYTES: usize = 16 * 1024;

/// Why text could not be tokenised (or a tokenizer could not be built, read or written).
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("character {ch:?} at byte {pos} is not in the tokenizer's vocabulary of {vocab} characters")]
    Unknown { ch: char, pos: usize, vocab: usize },
    /// A BPE without an unknown token or byte fallback has no token for `ch`: its model drops
    /// it, so the text would lose it without a word.
    #[error(
        "character {ch:?} at byte {pos} has no token in this BPE tokenizer, which has neither an unknown token nor \
         byte fallback, so it would be dropped without a word: take it out of the text, or use a tokenizer that \
         covers it (`ddl tokenizer train` writes a byte-level BPE, which covers every byte)"
    )]
    Dropped { ch: char, pos: usize },
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    OutOfRange { id: u32, vocab: usize },
    #[error("malformed tokenizer JSON: {0}")]
    Json(String),
    #[error("the corpus is empty: a tokenizer needs at least one character to learn from")]
    Empty,
    #[error(
        "--vocab-size {got} is too small for a byte-level BPE: it must be at least {min} \
         (256 byte tokens + {EOT} + at least one merge)"
    )]
    VocabTooSmall { got: usize, min: usize },
    #[error(
        "--vocab-size {got} is larger than a byte-level BPE here may ask for (at most {max}: the trainer reserves \
         memory for every token asked for, and GPT-2's 50,257 or a few hundred thousand are the sizes in use)"
    )]
    VocabTooLarge { got: usize, max: usize },
    #[error(
        "the corpus has no pair of tokens that occurs twice, so the BPE learnt no merge (it would be the 256 bytes \
         and {EOT} alone, which --vocab-size refuses below 258): give a larger corpus"
    )]
    NoMerges,
    #[error("tokenizer file '{0}' does not exist (expected a Hugging Face tokenizer.json)")]
    Missing(PathBuf),
    #[error("cannot read tokenizer file '{path}': {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// A folder that is no run (it holds no model file), given where a tokenizer is read.
    #[error("'{path}' is a folder, neither a tokenizer file nor a run's (it holds no model.safetensors): {remedy}")]
    Folder { path: PathBuf, remedy: String },
    #[error("cannot write tokenizer file '{path}': {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("'{path}' is not a valid tokenizer file (expected a Hugging Face tokenizer.json): {msg}")]
    Malformed { path: PathBuf, msg: String },
    #[error("BPE training failed: {0}")]
    Train(String),
    #[error("the BPE tokenizer failed on the text: {0}")]
    Encode(String),
}

/// A character-level tokenizer: one id per distinct character, in sorted order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharTokenizer {
    pub chars: Vec<char>,
    #[serde(skip)]
    index: HashMap<char, u32>,
    /// The ids of ASCII characters (`u32::MAX`: not in the vocabulary), the fast path of `encode`.
    #[serde(skip)]
    ascii: Vec<u32>,
}

/// The distinct characters of some text, collected piece by piece: ASCII in a table, the rest in
/// a set (a set insert per character was most of `ddl data prepare`'s time on char vocabularies).
pub struct CharSet {
    ascii: [bool; 128],
    other: std::collections::BTreeSet<char>,
}

impl Default for CharSet {
    fn default() -> Self {
        CharSet { ascii: [false; 128], other: Default::default() }
    }
}

impl CharSet {
    pub fn add(&mut self, text: &str) {
        // Bytes below 128 are ASCII characters in UTF-8 (never part of a longer one).
        for b in text.bytes().filter(|b| b.is_ascii()) {
            self.ascii[b as usize] = true;
        }
        if !text.is_ascii() {
            self.other.extend(text.chars().filter(|c| !c.is_ascii()));
        }
    }

    /// The characters, sorted.
    pub fn chars(&self) -> Vec<char> {
        let ascii = (0u8..128).filter(|&b| self.ascii[b as usize]).map(char::from);
        ascii.chain(self.other.iter().copied()).collect()
    }
}

impl CharTokenizer {
    /// The sorted set of characters of `text`.
    pub fn from_corpus(text: &str) -> Result<Self, TokenizerError> {
        let mut set = CharSet::default();
        set.add(text);
        let chars = set.chars();
        if chars.is_empty() {
            return Err(TokenizerError::Empty);
        }
        Ok(Self::from_chars(chars))
    }

    /// A tokenizer whose id `i` is `chars[i]`.
    pub fn from_chars(chars: Vec<char>) -> Self {
        let index: HashMap<char, u32> = chars.iter().enumerate().map(|(i, &c)| (c, i as u32)).collect();
        let ascii = (0u8..128).map(|b| index.get(&char::from(b)).copied().unwrap_or(u32::MAX)).collect();
        CharTokenizer { chars, index, ascii }
    }

    /// The id of `ch`.
    fn id(&self, ch: char) -> Option<u32> {
        match self.ascii.get(ch as usize) {
            Some(&id) if ch.is_ascii() => (id != u32::MAX).then_some(id),
            _ => self.index.get(&ch).copied(),
        }
    }
}

/// Any tokenizer the engine can train with.
#[derive(Debug, Clone)]
pub enum Tokenizer {
    Char(CharTokenizer),
    /// A Hugging Face tokenizer; [`train_bpe`] makes lossless byte-level BPE ones.
    Bpe(Box<HfTokenizer>),
}

impl PartialEq for Tokenizer {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Tokenizer::Char(a), Tokenizer::Char(b)) => a == b,
            (Tokenizer::Bpe(_), Tokenizer::Bpe(_)) => self.to_json() == other.to_json(),
            _ => false,
        }
    }
}

impl Eq for Tokenizer {}

/// The checkpoint format: `{"kind": "char", "chars": ...}` or `{"kind": "bpe", "tokenizer":
/// <the Hugging Face tokenizer.json object>}`.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Stored {
    Char { chars: String },
    Bpe { tokenizer: serde_json::Value },
}

impl Stored {
    fn into_tokenizer(self) -> Result<Tokenizer, String> {
        Ok(match self {
            Stored::Char { chars } => {
                let chars: Vec<char> = chars.chars().collect();
                let mut seen = std::collections::HashSet::new();
                if let Some(c) = chars.iter().find(|&&c| !seen.insert(c)) {
                    return Err(format!("the character tokenizer lists {c:?} twice (each character has one id)"));
                }
                Tokenizer::Char(CharTokenizer::from_chars(chars))
            }
            Stored::Bpe { tokenizer } => {
                let t: HfTokenizer = serde_json::from_value(tokenizer).map_err(|e| e.to_string())?;
                if let Some(p) = hf_problem(&t) {
                    return Err(p);
                }
                Tokenizer::Bpe(Box::new(t))
            }
        })
    }
}

/// The largest vocabulary [`train_bpe`] takes: Hugging Face's trainer reserves memory in
/// proportion to the size asked for (4,294,967,296 asked for 283 GB and aborted the process).
pub const MAX_BPE_VOCAB: usize = 1 << 21;

/// Trains a byte-level BPE (GPT-2 pre-tokenisation, all 256 bytes in the base vocabulary, so any
/// text round-trips exactly) with `vocab_size` tokens at most, [`EOT`] included; merges need a
/// pair seen at least twice, so a small corpus may give fewer tokens.
pub fn train_bpe(corpus_text: &str, vocab_size: usize) -> Result<Tokenizer, TokenizerError> {
    if corpus_text.is_empty() {
        return Err(TokenizerError::Empty);
    }
    train_bpe_pieces(chunks(corpus_text, CHUNK_BYTES).into_iter(), vocab_size)
}

/// [`train_bpe`] on a text given as pieces, in order, cut where `safe_cut` says (the words
/// counted are the whole text's): a corpus read piece by piece is never held whole.
pub fn train_bpe_pieces<S: AsRef<str> + Send>(
    pieces: impl Iterator<Item = S> + Send,
    vocab_size: usize,
) -> Result<Tokenizer, TokenizerError> {
    if vocab_size <= BPE_BASE_VOCAB {
        return Err(TokenizerError::VocabTooSmall { got: vocab_size, min: BPE_BASE_VOCAB + 1 });
    }
    if vocab_size > MAX_BPE_VOCAB {
        return Err(TokenizerError::VocabTooLarge { got: vocab_size, max: MAX_BPE_VOCAB });
    }
    let mut t = HfTokenizer::new(BPE::default());
    t.with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)));
    t.with_post_processor(Some(ByteLevel::default().trim_offsets(false)));
    t.with_decoder(Some(ByteLevel::default()));
    let mut trainer: TrainerWrapper = BpeTrainer::builder()
        .vocab_size(vocab_size)
        .min_frequency(2)
        .show_progress(false)
        .special_tokens(vec![AddedToken::from(EOT, true)])
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build()
        .into();
    // (Each piece again in pieces of about 16 KB cut where the pre-tokenizer splits anyway, so
    // the same words are counted, and past MAX_RUN_BYTES without such a place anywhere.)
    let pieces =
        pieces.flat_map(|p| chunks(p.as_ref(), TRAIN_PIECE_BYTES).into_iter().map(String::from).collect::<Vec<_>>());
    t.train(&mut trainer, pieces).map_err(|e| TokenizerError::Train(e.to_string()))?;
    let tok = Tokenizer::Bpe(Box::new(t));
    if tok.vocab_size() <= BPE_BASE_VOCAB {
        // (The bytes and EOT alone: the tokenizer --vocab-size 257 is refused for.)
        return Err(TokenizerError::NoMerges);
    }
    Ok(tok)
}

/// Whether GPT-2's byte-level pre-tokenizer ends a pre-token at byte `i` of `text` whatever comes
/// before and after: between a character that is neither whitespace nor a control character and
/// a whitespace character (a space, a newline, `\r`, U+3000 …). Its pattern
/// (`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`) has no match
/// that holds both (a match of non-space characters never takes whitespace, and one of
/// whitespace starts after them), and matches are taken from left to right, so the pieces match
/// as the whole text does: cutting there and tokenising the pieces gives exactly its ids — text
/// in any script, with any line ends (`\r\n`, paragraphs indented with U+3000), included. Also
/// between ASCII letters, digits and other ASCII characters, after anything but an apostrophe.
/// (`scripts/safe-cut-check.py` checks both against Hugging Face's pre-tokenizer.)
pub(crate) fn safe_cut(text: &[u8], i: usize) -> bool {
    if i == 0 || i >= text.len() {
        return false;
    }
    // (Control characters are left out before the cut: whether the pattern's `\s` takes
    // U+001C–U+001F, which Unicode's White_Space does not, is the regex engine's choice.)
    let solid = |c: Option<char>| c.is_some_and(|c| !c.is_whitespace() && !c.is_control());
    // The characters ending at `end` and starting at `start` (the text may be cut anywhere).
    let before = |end: usize| {
        let from = (end.saturating_sub(4)..end).find(|&j| text[j] & 0xC0 != 0x80)?;
        std::str::from_utf8(&text[from..end]).ok()?.chars().next_back()
    };
    let after = |start: usize| {
        let to = (start + 1..=(start + 4).min(text.len())).find(|&j| j == text.len() || text[j] & 0xC0 != 0x80)?;
        std::str::from_utf8(&text[start..to]).ok()?.chars().next()
    };
    if solid(before(i)) && after(i).is_some_and(char::is_whitespace) {
        return true;
    }
    // Between two ASCII characters of different classes (letters, digits, others), the first not
    // an apostrophe (`'s`, `'t` … start with one): no alternative of the pattern takes both, so
    // text without whitespace (base64, a URL list) is cut too.
    let class = |b: u8| (b.is_ascii_alphabetic(), b.is_ascii_digit());
    let (b, a) = (text[i - 1], text[i]);
    b.is_ascii_graphic() && a.is_ascii_graphic() && b != b'\'' && class(b) != class(a)
}

/// Pieces of `text` of about `target` bytes or more, cut only where [`safe_cut`] says (before
/// whitespace that follows a word, or between ASCII letters, digits and others), so that
/// tokenising the pieces gives exactly the ids of the whole text — a text of one long line is
/// cut too; a piece that runs [`MAX_RUN_BYTES`] past `target` without such a place is cut at the
/// next character boundary.
pub(crate) fn chunks(text: &str, target: usize) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = target.max(1);
    while i < bytes.len() {
        let hard = i - start >= target.max(1) + MAX_RUN_BYTES && bytes[i] & 0xC0 != 0x80;
        if hard || safe_cut(bytes, i) {
            out.push(&text[start..i]);
            start = i;
            i = start + target.max(1);
        } else {
            i += 1;
        }
    }
    if start < text.len() || out.is_empty() {
        out.push(&text[start..]);
    }
    out
}

/// Whether [`chunks`] cannot change how `t` tokenises: no normaliser, GPT-2 byte-level
/// pre-tokenisation without a prefix space, and no added token holding whitespace (a cut could
/// fall inside it) or taking the whitespace beside it (`lstrip`, `rstrip`: a cut could part them).
fn chunkable(t: &HfTokenizer) -> bool {
    t.get_normalizer().is_none()
        && matches!(t.get_pre_tokenizer(), Some(PreTokenizerWrapper::ByteLevel(b)) if !b.add_prefix_space && b.use_regex)
        && t.get_added_tokens_decoder()
            .values()
            .all(|a| !a.content.chars().any(char::is_whitespace) && !a.lstrip && !a.rstrip)
}

/// Whether `t`'s model drops what it has no token for: a BPE without an unknown token or byte
/// fallback, unless it is byte-level (whose bytes [`hf_problem`] requires all present).
fn drops_unknown(t: &HfTokenizer) -> bool {
    matches!(t.get_model(), tokenizers::ModelWrapper::BPE(b) if b.unk_token.is_none() && !b.byte_fallback)
        && !matches!(t.get_decoder(), Some(tokenizers::DecoderWrapper::ByteLevel(_)))
}

/// The first character of `text` (its byte offset) outside every token's span `spans` (byte
/// offsets in `text`, sorted here) that is not whitespace (a pre-tokeniser may split on
/// whitespace and keep none of it, by design).
fn first_uncovered(text: &str, spans: &mut [(usize, usize)]) -> Option<(usize, char)> {
    spans.sort_unstable();
    let (mut k, mut reach) = (0, 0);
    for (pos, ch) in text.char_indices() {
        while k < spans.len() && spans[k].0 <= pos {
            reach = reach.max(spans[k].1);
            k += 1;
        }
        if pos >= reach && !ch.is_whitespace() {
            return Some((pos, ch));
        }
    }
    None
}

/// The first character of the word (run without whitespace) of `text` around byte `pos` that `t`'s
/// BPE has no token for, neither alone nor as a word's continuation, with its byte offset.
fn first_without_token(t: &HfTokenizer, text: &str, pos: usize) -> Option<(usize, char)> {
    let tokenizers::ModelWrapper::BPE(b) = t.get_model() else { return None };
    let prefix = b.continuing_subword_prefix.clone().unwrap_or_default();
    let vocab = b.get_vocab();
    let start =
        text[..pos].rfind(char::is_whitespace).map_or(0, |i| i + text[i..].chars().next().map_or(1, char::len_utf8));
    text[start..]
        .char_indices()
        .take_while(|(_, c)| !c.is_whitespace())
        .find(|(_, c)| !vocab.contains_key(&c.to_string()) && !vocab.contains_key(&format!("{prefix}{c}")))
        .map(|(i, c)| (start + i, c))
}

/// Why a Hugging Face tokenizer cannot serve a model, or `None`: every id from 0 to the largest
/// names exactly one token (a hole is a row of the model no text gives and a sampled id nothing
/// decodes; two tokens on one id cannot both decode), and a byte-level BPE without an unknown
/// token has a token for each of the 256 bytes (else text holding a missing byte loses it
/// without a word: the BPE drops what it cannot encode).
fn hf_problem(t: &HfTokenizer) -> Option<String> {
    let vocab = t.get_vocab(true);
    if vocab.is_empty() {
        return Some(
            "it has no tokens (an empty vocabulary), so it can encode no text: give a trained tokenizer, or train one \
             (`ddl tokenizer train --corpus FILE --vocab-size N --out tok.json`)"
                .into(),
        );
    }
    let mut by_id: HashMap<u32, Vec<&str>> = HashMap::new();
    for (tok, &id) in &vocab {
        by_id.entry(id).or_default().push(tok);
    }
    let mut shared: Vec<(u32, Vec<&str>)> =
        by_id.iter().filter(|(_, v)| v.len() > 1).map(|(&i, v)| (i, v.clone())).collect();
    if let Some((id, mut toks)) = shared.drain(..).min_by_key(|(i, _)| *i) {
        toks.sort();
        return Some(format!(
            "tokens {} share the id {id} (each id names one token); give each its own id",
            toks.iter().take(4).map(|t| format!("{t:?}")).collect::<Vec<_>>().join(", ")
        ));
    }
    let unk = match t.get_model() {
        tokenizers::ModelWrapper::BPE(b) => b.unk_token.is_some() || b.byte_fallback,
        _ => true,
    };
    if !unk && matches!(t.get_decoder(), Some(tokenizers::DecoderWrapper::ByteLevel(_))) {
        let mut missing: Vec<u8> =
            byte_level_bytes().iter().filter(|(c, _)| !vocab.contains_key(&c.to_string())).map(|(_, &b)| b).collect();
        missing.sort();
        if !missing.is_empty() {
            let shown: Vec<String> = missing.iter().take(8).map(|b| format!("0x{b:02x}")).collect();
            return Some(format!(
                "a byte-level BPE without tokens for {} of the 256 bytes ({}{}) and without an unknown token: \
                 text holding them would lose them silently; train it with every byte in its base vocabulary \
                 (`ddl tokenizer train` does)",
                missing.len(),
                shown.join(", "),
                if missing.len() > 8 { ", …" } else { "" }
            ));
        }
    }
    let size = vocab.values().max().map_or(0, |&m| m as usize + 1);
    let holes: Vec<usize> = (0..size).filter(|i| !by_id.contains_key(&(*i as u32))).collect();
    if let Some(first) = holes.first() {
        return Some(format!(
            "{} of the ids 0 to {} name{} no token (the first: {first}): a model row no text gives and an id \
             nothing decodes; number the tokens without gaps",
            holes.len(),
            size - 1,
            if holes.len() == 1 { "s" } else { "" }
        ));
    }
    None
}

impl Tokenizer {
    /// Number of token ids (the model's vocabulary must be at least this).
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Char(c) => c.chars.len(),
            Tokenizer::Bpe(t) => t.get_vocab(true).values().max().map_or(0, |&m| m as usize + 1),
        }
    }

    /// Whether a text cut where `safe_cut` says tokenises to the ids of the whole text: always
    /// for characters; for a BPE, GPT-2's byte-level pre-tokenisation without a prefix space and
    /// without a normaliser (not, e.g., SentencePiece's Metaspace).
    pub fn cuts_exactly(&self) -> bool {
        match self {
            Tokenizer::Char(_) => true,
            Tokenizer::Bpe(t) => chunkable(t),
        }
    }

    /// `"char"` or `"bpe"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Tokenizer::Char(_) => "char",
            Tokenizer::Bpe(_) => "bpe",
        }
    }

    /// The id of [`EOT`] (None for character tokenizers and BPE files without it).
    pub fn eot_id(&self) -> Option<u32> {
        match self {
            Tokenizer::Char(_) => None,
            Tokenizer::Bpe(t) => t.token_to_id(EOT),
        }
    }

    /// Token ids of `text`; for BPE, special tokens written in the text (such as [`EOT`]) become
    /// their single id, and nothing is added around the text.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        match self {
            Tokenizer::Char(c) => text
                .char_indices()
                .map(|(pos, ch)| c.id(ch).ok_or(TokenizerError::Unknown { ch, pos, vocab: c.chars.len() }))
                .collect(),
            Tokenizer::Bpe(t) => {
                let err = |e: tokenizers::Error| TokenizerError::Encode(e.to_string());
                // (A tokenizer that may drop characters encodes with byte offsets, to find them.)
                let check = drops_unknown(t);
                let (pieces, encs) = if text.len() > CHUNK_BYTES && chunkable(t) {
                    let pieces = chunks(text, CHUNK_BYTES);
                    let encs = if check {
                        t.encode_batch(pieces.clone(), false)
                    } else {
                        t.encode_batch_fast(pieces.clone(), false)
                    };
                    (pieces, encs.map_err(err)?)
                } else {
                    let enc = if check { t.encode(text, false) } else { t.encode_fast(text, false) };
                    (vec![text], vec![enc.map_err(err)?])
                };
                if check {
                    // (Each piece is a slice of `text`: its offsets move by where it starts.)
                    let at = |p: &str| p.as_ptr() as usize - text.as_ptr() as usize;
                    let mut spans: Vec<(usize, usize)> = pieces
                        .iter()
                        .zip(&encs)
                        .flat_map(|(p, e)| e.get_offsets().iter().map(move |&(a, b)| (at(p) + a, at(p) + b)))
                        .collect();
                    if let Some((pos, ch)) = first_uncovered(text, &mut spans) {
                        // (The model counts a word's offsets over the characters it keeps, so
                        // the gap shows at the word's end: the character without a token is
                        // looked for in the word.)
                        let (pos, ch) = first_without_token(t, text, pos).unwrap_or((pos, ch));
                        return Err(TokenizerError::Dropped { ch, pos });
                    }
                }
                Ok(encs.iter().flat_map(|e| e.get_ids().iter().copied()).collect())
            }
        }
    }

    /// The text of `ids` (special tokens included); every id must be in the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        match self {
            Tokenizer::Char(c) => ids
                .iter()
                .map(|&id| {
                    c.chars.get(id as usize).copied().ok_or(TokenizerError::OutOfRange { id, vocab: c.chars.len() })
                })
                .collect(),
            Tokenizer::Bpe(t) => {
                if let Some(&id) = ids.iter().find(|&&id| t.id_to_token(id).is_none()) {
                    return Err(TokenizerError::OutOfRange { id, vocab: self.vocab_size() });
                }
                t.decode(ids, false).map_err(|e| TokenizerError::Encode(e.to_string()))
            }
        }
    }

    /// The bytes one token stands for, as the text it adds when decoded among others: a
    /// byte-level BPE's token may be a lone byte of a character (its text alone is "�"); every
    /// other token's bytes are its decoded text's UTF-8. (OpenAI's `logprobs` give these as
    /// `bytes`.) Every id must be in the vocabulary.
    pub fn token_raw_bytes(&self, id: u32) -> Result<Vec<u8>, TokenizerError> {
        if let Tokenizer::Bpe(t) = self
            && matches!(t.get_decoder(), Some(tokenizers::DecoderWrapper::ByteLevel(_)))
            && let Some(piece) = t.id_to_token(id)
        {
            // As the byte-level decoder does: each character its byte, or if some character has
            // none (an added token), the token's UTF-8 as it is.
            let table = byte_level_bytes();
            if let Some(b) = piece.chars().map(|c| table.get(&c).copied()).collect::<Option<Vec<u8>>>() {
                return Ok(b);
            }
        }
        Ok(self.decode(&[id])?.into_bytes())
    }

    /// The bytes of text each token id stands for, indexed by id, where that is exact: a character
    /// tokenizer's characters in UTF-8; a byte-level BPE's bytes (every base token one byte, a
    /// merge the sum of its parts), its special tokens (such as [`EOT`]) none. `None` for other
    /// Hugging Face tokenizers, whose decoders may add, join or strip text (bits per byte is then
    /// not defined by the tokens alone).
    pub fn token_bytes(&self) -> Option<Vec<u32>> {
        match self {
            Tokenizer::Char(c) => Some(c.chars.iter().map(|ch| ch.len_utf8() as u32).collect()),
            Tokenizer::Bpe(t) => {
                use tokenizers::DecoderWrapper;
                if t.get_normalizer().is_some() || !matches!(t.get_decoder(), Some(DecoderWrapper::ByteLevel(_))) {
                    return None;
                }
                let bytes = byte_level_bytes();
                let added = t.get_added_tokens_decoder();
                let mut out = vec![0u32; self.vocab_size()];
                for (id, n) in out.iter_mut().enumerate() {
                    let id = id as u32;
                    if let Some(a) = added.get(&id) {
                        *n = if a.special { 0 } else { a.content.len() as u32 };
                    } else if let Some(s) = t.id_to_token(id) {
                        // Each character of a byte-level token names one byte.
                        if !s.chars().all(|ch| bytes.contains_key(&ch)) {
                            return None;
                        }
                        *n = s.chars().count() as u32;
                    }
                }
                Some(out)
            }
        }
    }

    /// JSON stored in checkpoints (tagged with `kind`; BPE embeds the Hugging Face tokenizer.json).
    pub fn to_json(&self) -> String {
        match self {
            Tokenizer::Char(c) => {
                serde_json::to_string(&Stored::Char { chars: c.chars.iter().collect() }).expect("serialisable")
            }
            Tokenizer::Bpe(t) => {
                format!(r#"{{"kind":"bpe","tokenizer":{}}}"#, t.to_string(false).expect("serialisable"))
            }
        }
    }

    /// Reads what [`Tokenizer::to_json`] wrote.
    pub fn from_json(s: &str) -> Result<Self, TokenizerError> {
        let st: Stored = serde_json::from_str(s).map_err(|e| TokenizerError::Json(e.to_string()))?;
        st.into_tokenizer().map_err(TokenizerError::Json)
    }

    /// Reads a Hugging Face `tokenizer.json` (as Python's `tokenizers` or [`Tokenizer::save`]
    /// writes it), or a tokenizer in the checkpoint format of [`Tokenizer::to_json`].
    pub fn load(path: &Path) -> Result<Self, TokenizerError> {
        let text = std::fs::read_to_string(path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => TokenizerError::Missing(path.to_path_buf()),
            _ => TokenizerError::Read { path: path.to_path_buf(), source },
        })?;
        let malformed = |msg: String| TokenizerError::Malformed { path: path.to_path_buf(), msg };
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| malformed(format!("not JSON: {e}")))?;
        if v.get("kind").is_some() {
            let st: Stored = serde_json::from_value(v).map_err(|e| malformed(e.to_string()))?;
            st.into_tokenizer().map_err(malformed)
        } else {
            let t: HfTokenizer = serde_json::from_value(v).map_err(|e| malformed(e.to_string()))?;
            if let Some(p) = hf_problem(&t) {
                return Err(malformed(p));
            }
            Ok(Tokenizer::Bpe(Box::new(t)))
        }
    }

    /// Writes the tokenizer for [`Tokenizer::load`]: BPE as a Hugging Face `tokenizer.json`
    /// (loadable by Python's `tokenizers`), a character tokenizer in the checkpoint format.
    pub fn save(&self, path: &Path) -> Result<(), TokenizerError> {
        self.save_as(path, true)
    }

    /// [`Tokenizer::save`], or with `replace` false never over an existing file (one made
    /// meanwhile by another process is an error, not replaced).
    pub fn save_as(&self, path: &Path, replace: bool) -> Result<(), TokenizerError> {
        let text = match self {
            Tokenizer::Char(_) => self.to_json(),
            Tokenizer::Bpe(t) => t.to_string(true).expect("serialisable"),
        };
        // Whole or not at all: a temporary file renamed over `path` (an interrupted write
        // leaves the earlier file as it was).
        let write =
            if replace { crate::train::checkpoint::write_atomic } else { crate::train::checkpoint::write_new_atomic };
        write(path, text.as_bytes()).map_err(|source| TokenizerError::Write { path: path.to_path_buf(), source })
    }

    /// How `other` differs from this tokenizer, for messages: for two character tokenizers the
    /// characters only one of them has, else their kinds and vocabulary sizes.
    pub fn difference(&self, other: &Tokenizer) -> String {
        match (self, other) {
            (Tokenizer::Char(a), Tokenizer::Char(b)) => {
                // (At most 8 shown, then how many more.)
                let only = |x: &CharTokenizer, y: &CharTokenizer| -> String {
                    let all: Vec<String> =
                        x.chars.iter().filter(|c| !y.chars.contains(c)).map(|c| format!("{c:?}")).collect();
                    match all.len() {
                        0 => "none".into(),
                        n if n <= 8 => all.join(" "),
                        n => format!("{} … ({n} in all)", all[..8].join(" ")),
                    }
                };
                if a.chars.len() == b.chars.len() && only(a, b) == "none" {
                    return "the same characters in another order".into();
                }
                format!("characters only in the first: {}; only in the second: {}", only(a, b), only(b, a))
            }
            _ if self.kind() == other.kind() && self.vocab_size() == other.vocab_size() => format!(
                "two {}s of vocabulary {}, with other tokens, merges or settings",
                self.kind(),
                self.vocab_size()
            ),
            _ => format!(
                "{} of vocabulary {} against {} of vocabulary {}",
                self.kind(),
                self.vocab_size(),
                other.kind(),
                other.vocab_size()
            ),
        }
    }

    /// A decoder for ids produced one at a time (generation).
    pub fn stream(&self) -> StreamDecoder<'_> {
        StreamDecoder { tok: self, bytes: Vec::new(), ids: Vec::new(), pending: 0, prefix: String::new(), fresh: true }
    }

    /// Short identity of the tokenizer (for cache keys).
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let h = sha2::Sha256::digest(self.to_json().as_bytes());
        h.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }
}

/// Turns ids arriving one at a time into text, holding back a character whose UTF-8 bytes are
/// split across tokens (byte-level BPE does that) until it is complete.
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    /// Byte-level BPE: bytes not yet emitted (an incomplete character).
    bytes: Vec<u8>,
    /// Other Hugging Face decoders: the last ids (a few already emitted, for their context, and
    /// those not yet emitted).
    ids: Vec<u32>,
    /// Other Hugging Face decoders: how many of `ids` (the last) are not yet emitted.
    pending: usize,
    /// Other Hugging Face decoders: the text of `ids` already emitted.
    prefix: String,
    /// Nothing pushed or primed yet.
    fresh: bool,
}

/// Ids a non-byte-level stream keeps as context: enough for a decoder that joins or strips by
/// the neighbour (WordPiece's `##`, Metaspace's `▁`, a character split over byte tokens).
const STREAM_CONTEXT: usize = 8;

/// GPT-2's byte-to-character table reversed: printable bytes stand for themselves, the other
/// bytes for U+0100, U+0101, ... in byte order.
fn byte_level_bytes() -> &'static HashMap<char, u8> {
    static M: std::sync::OnceLock<HashMap<char, u8>> = std::sync::OnceLock::new();
    M.get_or_init(|| {
        let mut next = 0x100;
        (0..=255u8)
            .map(|b| {
                if matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF) {
                    (b as char, b)
                } else {
                    next += 1;
                    (char::from_u32(next - 1).expect("below U+0200"), b)
                }
            })
            .collect()
    })
}

impl StreamDecoder<'_> {
    /// Nothing has been pushed or primed yet.
    pub fn fresh(&self) -> bool {
        self.fresh
    }

    /// Gives the stream the ids before its first one (the prompt, the conversation so far), whose
    /// text is not emitted: decoders that join or strip by the neighbour (WordPiece's `##`,
    /// Metaspace's word-initial `▁`) then decode the first new token as the whole text would.
    /// Only non-byte-level Hugging Face decoders need it; for the others it does nothing.
    pub fn prime(&mut self, context: &[u32]) {
        self.fresh = false;
        if self.byte_level().is_some() || matches!(self.tok, Tokenizer::Char(_)) {
            return;
        }
        let ids = &context[context.len().saturating_sub(STREAM_CONTEXT)..];
        if let Ok(text) = self.tok.decode(ids) {
            (self.ids, self.prefix) = (ids.to_vec(), text);
        }
    }

    fn byte_level(&self) -> Option<&HfTokenizer> {
        match self.tok {
            Tokenizer::Bpe(t) if matches!(t.get_decoder(), Some(tokenizers::DecoderWrapper::ByteLevel(_))) => Some(t),
            _ => None,
        }
    }

    /// The text that `id` completes (empty while a character is still incomplete).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.fresh = false;
        if let Tokenizer::Char(_) = self.tok {
            return self.tok.decode(&[id]);
        }
        let Some(t) = self.byte_level() else {
            // Other decoders: the text the ids give with their context, less what the context
            // gave (a decoder may join, strip or add by the neighbour); while the text ends in an
            // incomplete character, wait (at most 4 tokens: a character has at most 4 bytes and
            // every token at least one).
            self.ids.push(id);
            self.pending += 1;
            let s = self.tok.decode(&self.ids)?;
            if s.ends_with(char::REPLACEMENT_CHARACTER) && self.pending < 4 {
                return Ok(String::new());
            }
            let out = self.new_text(&s)?;
            let keep = self.ids.len().saturating_sub(STREAM_CONTEXT);
            self.ids.drain(..keep);
            self.prefix = self.tok.decode(&self.ids)?;
            return Ok(out);
        };
        let piece = t.id_to_token(id).ok_or(TokenizerError::OutOfRange { id, vocab: self.tok.vocab_size() })?;
        // As the byte-level decoder does: map every character to its byte, or if some character
        // has none (an added token), take the token's UTF-8 as it is.
        let table = byte_level_bytes();
        match piece.chars().map(|c| table.get(&c).copied()).collect::<Option<Vec<u8>>>() {
            Some(b) => self.bytes.extend(b),
            None => self.bytes.extend(piece.as_bytes()),
        }
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.bytes) {
                Ok(s) => {
                    out.push_str(s);
                    self.bytes.clear();
                    return Ok(out);
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.bytes[..valid]).expect("valid prefix"));
                    match e.error_len() {
                        // Incomplete at the end: keep it for the next token.
                        None => {
                            self.bytes.drain(..valid);
                            return Ok(out);
                        }
                        // Bytes that can never form a character: U+FFFD, as `decode` writes.
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.bytes.drain(..valid + n);
                        }
                    }
                }
            }
        }
    }

    /// `s`, the text of `ids`, less the text already emitted; or, where the decoder rewrote that
    /// text, the pending ids' own text.
    fn new_text(&mut self, s: &str) -> Result<String, TokenizerError> {
        let pending = std::mem::take(&mut self.pending);
        match s.strip_prefix(self.prefix.as_str()) {
            Some(rest) => Ok(rest.to_string()),
            None => self.tok.decode(&self.ids[self.ids.len() - pending..]),
        }
    }

    /// Whatever is still held back (incomplete bytes as U+FFFD).
    pub fn finish(mut self) -> Result<String, TokenizerError> {
        if self.bytes.is_empty() {
            if self.pending == 0 {
                return Ok(String::new());
            }
            let s = self.tok.decode(&self.ids)?;
            self.new_text(&s)
        } else {
            Ok(String::from_utf8_lossy(&self.bytes).into_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_difference_names_the_characters_one_tokenizer_lacks() {
        let a = Tokenizer::Char(CharTokenizer::from_chars("abZ".chars().collect()));
        let b = Tokenizer::Char(CharTokenizer::from_chars("ab€".chars().collect()));
        assert_eq!(a.difference(&b), "characters only in the first: 'Z'; only in the second: '€'");
        let c = Tokenizer::Char(CharTokenizer::from_chars("baZ".chars().collect()));
        assert_eq!(a.difference(&c), "the same characters in another order");
        // Past 8: the first 8, then how many in all.
        let many = Tokenizer::Char(CharTokenizer::from_chars("abcdefghijkl".chars().collect()));
        let few = Tokenizer::Char(CharTokenizer::from_chars("ab".chars().collect()));
        assert_eq!(
            many.difference(&few),
            "characters only in the first: 'c' 'd' 'e' 'f' 'g' 'h' 'i' 'j' … (10 in all); only in the second: none"
        );
        let bad = Tokenizer::from_json(r#"{"kind": "char", "chars": "aba"}"#).unwrap_err().to_string();
        assert!(bad.contains("'a' twice"), "{bad}");
    }

    #[test]
    fn char_tokenizer_round_trips_and_names_unknown_characters() {
        let t = Tokenizer::Char(CharTokenizer::from_corpus("hello world\n").unwrap());
        let ids = t.encode("hello\nworld").unwrap();
        assert_eq!(t.decode(&ids).unwrap(), "hello\nworld");
        let e = t.encode("hex").unwrap_err().to_string();
        assert!(e.contains("'x'") && e.contains("byte 2"), "{e}");
        let back = Tokenizer::from_json(&t.to_json()).unwrap();
        assert_eq!(back, t);
        assert!(Tokenizer::from_json("{\"kind\": 3}").is_err());
        assert_eq!(t.eot_id(), None);
    }

    #[test]
    fn the_char_checkpoint_format_is_unchanged() {
        let t = Tokenizer::Char(CharTokenizer::from_corpus("ba\n").unwrap());
        assert_eq!(t.to_json(), r#"{"kind":"char","chars":"\nab"}"#);
        assert_eq!(Tokenizer::from_json(r#"{"kind":"char","chars":"\nab"}"#).unwrap(), t);
    }

    #[test]
    fn the_byte_table_is_gpt2s_byte_level_alphabet() {
        let ours: std::collections::HashSet<char> = byte_level_bytes().keys().copied().collect();
        assert_eq!(ours, ByteLevel::alphabet().into_iter().collect());
        assert_eq!((byte_level_bytes()[&'Ġ'], byte_level_bytes()[&'Ċ'], byte_level_bytes()[&'A']), (b' ', b'\n', b'A'));
    }

    #[test]
    fn chunks_cut_only_before_whitespace_after_a_word_and_cover_the_text() {
        let text = "ab\ncd\n\nef\n gh\nij";
        let c = chunks(text, 1);
        assert_eq!(c.concat(), text);
        assert_eq!(c, ["ab", "\ncd", "\n\nef", "\n gh", "\nij"]);
        assert_eq!(chunks("", 4), [""]);
        // One line: before spaces that follow a word (not inside a run of whitespace).
        assert_eq!(chunks("no newline at all", 2), ["no", " newline", " at", " all"]);
        assert_eq!(chunks("a  b c\t d", 1), ["a", "  b", " c", "\t d"]);
        // A line ending in a space: before the space (" \n" is one pre-token, never parted).
        assert_eq!(chunks("ab \ncd\nef", 1), ["ab", " \ncd", "\nef"]);
        assert_eq!(chunks("é\nü\n漢\n字", 1), ["é", "\nü", "\n漢", "\n字"]);
        assert_eq!(chunks("é ü 漢字", 1), ["é", " ü", " 漢字"]);
        // Windows line ends and U+3000 indents: before the line end.
        assert_eq!(chunks("甲。\r\n\u{3000}乙。\r\n丙", 1), ["甲。", "\r\n\u{3000}乙。", "\r\n丙"]);
        // Not after a control character.
        assert_eq!(chunks("a\u{1c} b", 1), ["a\u{1c} b"]);
        // Between ASCII letters, digits and others, not after an apostrophe.
        assert_eq!(chunks("ab12+/x'sy", 1), ["ab", "12", "+/", "x", "'sy"]);
    }

    #[test]
    fn chunked_bpe_encoding_equals_encoding_the_whole_text() {
        let text = "First Citizen:\nBefore we proceed any further, hear me speak. \n\nAll:\nSpeak,  speak.\n  \tx\n";
        let tok = train_bpe(&text.repeat(20), 300).unwrap();
        let Tokenizer::Bpe(t) = &tok else { unreachable!() };
        assert!(chunkable(t));
        let big = text.repeat(50);
        let whole = t.encode_fast(big.as_str(), false).unwrap().get_ids().to_vec();
        let pieces: Vec<u32> = chunks(&big, 100).iter().flat_map(|c| tok.encode(c).unwrap()).collect();
        assert_eq!(pieces, whole);
        let huge = big.repeat(30);
        assert!(huge.len() > CHUNK_BYTES);
        assert_eq!(tok.encode(&huge).unwrap(), t.encode_fast(huge.as_str(), false).unwrap().get_ids());
        // One long line (newlines as spaces) is cut at its spaces, to the same ids.
        let line = huge.replace('\n', " ");
        assert!(chunks(&line, CHUNK_BYTES).len() > 1);
        assert_eq!(tok.encode(&line).unwrap(), t.encode_fast(line.as_str(), false).unwrap().get_ids());
        // A run without any safe cut (one word of 200 KB): cut every MAX_RUN_BYTES past the
        // target, at character boundaries; the pieces are the text.
        let word = "añb".repeat(200_000 / 4);
        let c = chunks(&word, CHUNK_BYTES);
        assert!(c.len() >= 2 && c.iter().all(|p| p.len() <= CHUNK_BYTES + MAX_RUN_BYTES + 4), "{}", c.len());
        assert_eq!(c.concat(), word);
    }

    /// Training on one line of letters (whose one pre-token took time growing with the square
    /// of its length: 46 s at 400 KB, hours at 8 MB) gives a tokenizer that round-trips it.
    #[test]
    fn training_on_a_long_run_of_letters_round_trips_it() {
        let line = "abcdefghij".repeat(40_000);
        let tok = train_bpe(&line, 300).unwrap();
        assert_eq!(tok.decode(&tok.encode(&line).unwrap()).unwrap(), line);
    }

    /// A corpus without a pair that occurs twice teaches no merge: refused, as --vocab-size 257 is
    /// (and the message says so).
    #[test]
    fn a_corpus_that_teaches_no_merge_is_refused() {
        let e = train_bpe("abc", 300).unwrap_err();
        assert!(matches!(e, TokenizerError::NoMerges));
        // (The message said "as --vocab-size 257 would", a size that is refused itself.)
        let e = e.to_string();
        assert!(e.contains("which --vocab-size refuses below 258") && !e.contains("257 would"), "{e}");
        assert!(matches!(train_bpe("abab", 300), Ok(t) if t.vocab_size() > BPE_BASE_VOCAB));
    }

    /// A BPE without an unknown token or byte fallback drops what it has no token for: its
    /// encoding is refused naming the first such character (whitespace its pre-tokeniser
    /// leaves out is not one); with an unknown token it encodes.
    #[test]
    fn a_bpe_that_would_drop_a_character_names_it() {
        let json = |unk: &str| {
            format!(
                r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
                "pre_tokenizer":{{"type":"Whitespace"}},"post_processor":null,"decoder":null,
                "model":{{"type":"BPE","dropout":null,"unk_token":{unk},"continuing_subword_prefix":null,
                "end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,
                "vocab":{{"a":0,"b":1,"ab":2,"<unk>":3}},"merges":["a b"]}}}}"#
            )
        };
        let lossy = Tokenizer::Bpe(Box::new(serde_json::from_str(&json("null")).unwrap()));
        assert_eq!(lossy.encode("ab  ab\nba").unwrap(), [2, 2, 1, 0]);
        match lossy.encode("ab é ab ab c") {
            Err(TokenizerError::Dropped { ch: 'é', pos: 3 }) => {}
            other => panic!("expected é at byte 3 dropped, got {other:?}"),
        }
        match lossy.encode("abab\tabc") {
            Err(TokenizerError::Dropped { ch: 'c', pos: 7 }) => {}
            other => panic!("expected c at byte 7 dropped, got {other:?}"),
        }
        // Inside a word (whose offsets the model counts over the characters it keeps).
        match lossy.encode("ab\nbaxab ab") {
            Err(TokenizerError::Dropped { ch: 'x', pos: 5 }) => {}
            other => panic!("expected x at byte 5 dropped, got {other:?}"),
        }
        let with_unk = Tokenizer::Bpe(Box::new(serde_json::from_str(&json(r#""<unk>""#)).unwrap()));
        assert_eq!(with_unk.encode("ab c").unwrap(), [2, 3]);
    }

    /// The byte table sums to the text's UTF-8 length over any encoding of it (what bits per byte
    /// divides by), special tokens counting none; a decoder that is not byte-level gives no table.
    #[test]
    fn token_bytes_add_up_to_the_texts_bytes() {
        let text = "Fïrst Citizen:\nBefore we proceed — any further, hear me speak. 漢字\n\nAll:\nSpeak, speak.\n";
        let sum = |t: &Tokenizer, s: &str| -> u64 {
            let table = t.token_bytes().expect("an exact table");
            t.encode(s).unwrap().iter().map(|&i| table[i as usize] as u64).sum()
        };
        let c = Tokenizer::Char(CharTokenizer::from_corpus(text).unwrap());
        assert_eq!(sum(&c, text), text.len() as u64);
        let b = train_bpe(&text.repeat(20), 300).unwrap();
        assert!(b.vocab_size() > BPE_BASE_VOCAB, "merges were learnt");
        assert_eq!(sum(&b, text), text.len() as u64);
        let with_eot = format!("{text}{EOT}{text}");
        assert_eq!(sum(&b, &with_eot), 2 * text.len() as u64, "EOT stands for no bytes");
        let Tokenizer::Bpe(mut hf) = b else { unreachable!() };
        hf.with_decoder(Some(tokenizers::decoders::strip::Strip::new(' ', 1, 0)));
        assert!(Tokenizer::Bpe(hf).token_bytes().is_none());
    }
}
