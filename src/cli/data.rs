//! `ddl data`'s and `ddl tokenizer`'s subcommands and their flags.

use super::*;

#[derive(Subcommand)]
pub(crate) enum DataCmd {
    /// Tokenize text files, folders of them (.txt, .jsonl) and JSON-lines files (a `text` field per
    /// line: one document each) into llm.c-format shards: NAME_train_NNNNNN.bin, NAME_val_000000.bin
    /// and meta.json. Streams in constant memory, tokenizes in parallel, puts the end-of-text token
    /// between documents (char tokenizers: a newline).
    Prepare {
        /// `char` (the characters of the inputs), a tokenizer.json, or a run folder (or kept
        /// checkpoint), whose model's tokenizer is used.
        #[arg(long)]
        tokenizer: String,
        /// Output folder (new or empty).
        #[arg(long)]
        out: std::path::PathBuf,
        /// Inputs: text files, folders, .jsonl files.
        #[arg(required = true)]
        inputs: Vec<std::path::PathBuf>,
        /// Validation tokens, taken from the end of the token stream.
        #[arg(long, allow_negative_numbers = true, value_parser = positive, conflicts_with = "val_fraction")]
        val_tokens: Option<usize>,
        /// Validation fraction of the token stream, taken from its end [default: 0.1, as
        /// train.val_fraction].
        #[arg(long, allow_negative_numbers = true, value_parser = fraction)]
        val_fraction: Option<f64>,
        /// Tokens per training shard (at most 2147483647, the count an llm.c header holds).
        #[arg(long, allow_negative_numbers = true, value_parser = shard_tokens, default_value_t = 100_000_000)]
        shard_tokens: usize,
        /// Shard name prefix (NAME_train_000000.bin).
        #[arg(long, default_value = "data")]
        name: String,
    },
    /// What a shard set holds: its shards per split with their tokens, sizes and id widths, the
    /// tokenizer and source its meta.json records, and a sample of its tokens as text; --verify
    /// also checks every shard's SHA-256 against meta.json and every id against the vocabulary.
    Inspect {
        /// A shard folder or a glob of shard files, as `ddl train --data` takes them.
        data: String,
        /// How the files store tokens: llmc (llm.c's shards) or raw-u16 (nanoGPT's train.bin).
        #[arg(long, default_value = "llmc")]
        data_format: String,
        /// Decode and check with this tokenizer (a tokenizer.json, or a run folder for its
        /// model's) instead of meta.json's; shards without a meta.json need it to show text.
        #[arg(long)]
        tokenizer: Option<std::path::PathBuf>,
        /// The split of the sample: train or val.
        #[arg(long, default_value = "train")]
        split: String,
        /// The sample's first token: its position in the split.
        #[arg(long, allow_negative_numbers = true, value_parser = count, default_value_t = 0)]
        at: usize,
        /// Tokens in the sample (0 = none).
        #[arg(long, allow_negative_numbers = true, value_parser = count, default_value_t = 64)]
        sample: usize,
        /// Also read every token: each shard's SHA-256 against meta.json, every id below the
        /// vocabulary, the distinct ids and end-of-text tokens counted (fails naming a problem).
        #[arg(long)]
        verify: bool,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The shard cache of `ddl train --corpus` and `ddl eval --text` (DDL_CACHE_DIR, else
    /// $XDG_CACHE_HOME/ddl or ~/.cache/ddl, folder shards/): each set's corpus, tokenizer, tokens,
    /// size, last use and whether a run can still find it. A run removes the sets of its own corpus that no run can
    /// find again (the corpus edited since); the others stay until pruned.
    #[command(group = clap::ArgGroup::new("removing").args(["prune", "clear"]).multiple(false))]
    Cache {
        /// Remove the stale sets (their corpus or tokenizer file changed since, or the corpus is
        /// gone: no run finds them again) and what killed processes left.
        #[arg(long)]
        prune: bool,
        /// With --prune: also the sets no run has used for this long (30d, 12h, 2w).
        #[arg(
            long,
            value_name = "SPAN",
            requires = "prune",
            conflicts_with = "clear",
            allow_hyphen_values = true,
            value_parser = ddl::train::cache::parse_span
        )]
        unused_for: Option<std::time::Duration>,
        /// Remove every set (the next run on each corpus tokenises it again).
        #[arg(long, conflicts_with = "prune")]
        clear: bool,
        /// With --prune or --clear: list what would be removed, remove nothing.
        #[arg(long, requires = "removing")]
        dry_run: bool,
        /// One JSON object (the listing, or what was removed).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum TokenizerCmd {
    /// Train a byte-level BPE (with <|endoftext|>) and write it as a Hugging Face tokenizer.json.
    Train {
        /// A UTF-8 text file or a directory of .txt files; a JSON-lines file (or a directory that
        /// holds one, or text files in subfolders) is read as `ddl data prepare` reads it: each
        /// line's `text` a document, subfolders included.
        #[arg(long)]
        corpus: std::path::PathBuf,
        /// Vocabulary size, byte tokens and <|endoftext|> included (258 to 2,097,152).
        #[arg(long, allow_negative_numbers = true, value_parser = bpe_vocab_size)]
        vocab_size: usize,
        /// Output file (never one of the corpus's files; an existing file only with --force); a
        /// missing folder is made.
        #[arg(long, default_value = "tokenizer.json")]
        out: std::path::PathBuf,
        /// Replace --out if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Print the token ids of a text.
    Encode {
        /// A tokenizer.json (Hugging Face format), or a run folder (or kept checkpoint), whose
        /// model's tokenizer is used.
        #[arg(long)]
        tokenizer: std::path::PathBuf,
        /// The text to encode, itself (not a file name: `-` reads standard input, e.g. `< file.txt`).
        #[arg(long, allow_hyphen_values = true)]
        text: String,
        /// One token per line: its id, a tab and its text (`\\`, `\t`, `\n`, `\r` escaped, as `ddl
        /// eval --per-token` writes it; a byte-level token that is part of a character shows U+FFFD).
        #[arg(long)]
        pieces: bool,
    },
    /// Print the text of token ids (what `encode` printed): exactly, with a newline after it only
    /// on a terminal.
    Decode {
        /// A tokenizer.json (Hugging Face format), or a run folder (or kept checkpoint), whose
        /// model's tokenizer is used.
        #[arg(long)]
        tokenizer: std::path::PathBuf,
        /// The ids, separated by spaces or commas (`-` reads standard input).
        #[arg(long, allow_hyphen_values = true)]
        ids: String,
    },
}
