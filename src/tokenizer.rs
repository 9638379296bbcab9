//! Tokenizers behind one type: a character-level vocabulary built from a corpus, and (in the
//! generation issue) Hugging Face byte-level BPE. Serialised as JSON inside checkpoints.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Why text could not be tokenised (or a tokenizer could not be read).
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("character {ch:?} at byte {pos} is not in the tokenizer's vocabulary of {vocab} characters")]
    Unknown { ch: char, pos: usize, vocab: usize },
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    OutOfRange { id: u32, vocab: usize },
    #[error("malformed tokenizer JSON: {0}")]
    Json(String),
    #[error("the corpus is empty: a character tokenizer needs at least one character")]
    Empty,
}

/// A character-level tokenizer: one id per distinct character, in sorted order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CharTokenizer {
    pub chars: Vec<char>,
    #[serde(skip)]
    index: HashMap<char, u32>,
}

impl CharTokenizer {
    /// The sorted set of characters of `text`.
    pub fn from_corpus(text: &str) -> Result<Self, TokenizerError> {
        let mut chars: Vec<char> = text.chars().collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        chars.dedup();
        if chars.is_empty() {
            return Err(TokenizerError::Empty);
        }
        Ok(Self::from_chars(chars))
    }

    pub fn from_chars(chars: Vec<char>) -> Self {
        let index = chars.iter().enumerate().map(|(i, &c)| (c, i as u32)).collect();
        CharTokenizer { chars, index }
    }
}

/// Any tokenizer the engine can train with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tokenizer {
    Char(CharTokenizer),
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Stored {
    Char { chars: String },
}

impl Tokenizer {
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Char(c) => c.chars.len(),
        }
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        match self {
            Tokenizer::Char(c) => text
                .char_indices()
                .map(|(pos, ch)| {
                    c.index.get(&ch).copied().ok_or(TokenizerError::Unknown { ch, pos, vocab: c.chars.len() })
                })
                .collect(),
        }
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        match self {
            Tokenizer::Char(c) => ids
                .iter()
                .map(|&id| {
                    c.chars.get(id as usize).copied().ok_or(TokenizerError::OutOfRange { id, vocab: c.chars.len() })
                })
                .collect(),
        }
    }

    /// JSON stored in checkpoints.
    pub fn to_json(&self) -> String {
        let s = match self {
            Tokenizer::Char(c) => Stored::Char { chars: c.chars.iter().collect() },
        };
        serde_json::to_string(&s).expect("serialisable")
    }

    pub fn from_json(s: &str) -> Result<Self, TokenizerError> {
        let st: Stored = serde_json::from_str(s).map_err(|e| TokenizerError::Json(e.to_string()))?;
        Ok(match st {
            Stored::Char { chars } => Tokenizer::Char(CharTokenizer::from_chars(chars.chars().collect())),
        })
    }

    /// Short identity of the tokenizer (for cache keys).
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let h = sha2::Sha256::digest(self.to_json().as_bytes());
        h.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
