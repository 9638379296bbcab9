//! The tokenizer a prepared set is made with: characters of the inputs, or byte-level BPE trained
//! on their documents, with a progress bar.

use super::*;

/// The char tokenizer of the inputs: every character they hold, and the newline that separates
/// documents.
pub(super) fn char_tokenizer(files: &[PathBuf]) -> Result<Tokenizer, DataError> {
    let mut set = crate::tokenizer::CharSet::default();
    set.add("\n");
    for f in files {
        pieces(f, |t, _| {
            set.add(&t);
            Ok(())
        })?;
    }
    Ok(Tokenizer::Char(CharTokenizer::from_chars(set.chars())))
}

/// Whether `path` is a JSON-lines file, or a folder that holds one or text files in subfolders
/// (at any depth): text that `ddl tokenizer train` reads as `ddl data prepare` does, document by
/// document. (A `--corpus` folder is its own .txt files: the subfolders' were left out without a
/// word, and the shards `data prepare` made of the same folder held text the tokenizer never saw.)
pub fn has_documents(path: &Path) -> bool {
    if !path.is_dir() {
        return is_jsonl(path);
    }
    input_files(&[path.to_path_buf()])
        .is_ok_and(|(files, _)| files.iter().any(|f| is_jsonl(f) || f.parent() != Some(path)))
}

/// A byte-level BPE of `vocab_size` tokens trained on the documents of `inputs` as `ddl data
/// prepare` reads them (a text file whole, each JSON line's `text` field, a folder's `.txt` and
/// `.jsonl` files in order), read in pieces on a thread of their own while the trainer counts
/// them: the text is never held whole. Returns it with the bytes of text read and the tokens it
/// makes of them (a second read, on every core). `bar`: both reads' progress on a terminal.
pub fn train_bpe_on_documents(
    inputs: &[PathBuf],
    vocab_size: usize,
    bar: bool,
) -> Result<(Tokenizer, u64, usize), DataError> {
    let (files, _) = input_files(inputs)?;
    let file_bytes: u64 = files.iter().map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0)).sum();
    let shown = TrainingBar::new(bar, file_bytes, vocab_size);
    let (tx, rx) = std::sync::mpsc::sync_channel::<String>(256);
    let (read, trained) = std::thread::scope(|s| {
        let files = &files;
        let reader = s.spawn(move || {
            let mut read = 0u64;
            for f in files {
                pieces(f, |t, _| {
                    if crate::train::interrupted() {
                        return Err(DataError::Interrupted);
                    }
                    read += t.len() as u64;
                    for piece in crate::tokenizer::chunks(&t, crate::tokenizer::CHUNK_BYTES) {
                        tx.send(piece.to_string()).map_err(|_| DataError::Interrupted)?;
                    }
                    Ok(())
                })?;
            }
            Ok::<u64, DataError>(read)
        });
        let trained = crate::tokenizer::train_bpe_pieces(shown.taken(rx), vocab_size);
        (reader.join().expect("the document reader panicked"), trained)
    });
    shown.done();
    let tok = match (read, trained) {
        (Ok(0), _) => return Err(DataError::Empty(inputs.first().cloned().unwrap_or_default())),
        (Err(e), Ok(_) | Err(crate::tokenizer::TokenizerError::NoMerges)) => return Err(e),
        (_, Err(e)) => return Err(e.into()),
        (Ok(_), Ok(tok)) => tok,
    };
    let mut enc = Encoder::new(&tok, &[], None, file_bytes, bar);
    for f in &files {
        pieces(f, |t, starts| enc.push(t, starts))?;
    }
    let bytes = enc.read;
    let tokens = enc.finish()?.tokens;
    Ok((tok, bytes, tokens))
}

/// `ddl tokenizer train`'s progress on a terminal (nothing elsewhere, and nothing without `on`):
/// the corpus's bytes as the trainer counts its words, then the merges it learns (minutes of a
/// large corpus were silent).
pub(super) struct TrainingBar(pub(super) Option<indicatif::ProgressBar>, pub(super) usize);

impl TrainingBar {
    pub(super) fn new(on: bool, bytes: u64, vocab_size: usize) -> TrainingBar {
        let bar = on.then(|| {
            let b = indicatif::ProgressBar::new(bytes);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg} eta {eta}",
                )
                .expect("a valid template"),
            );
            b.set_message("counting the corpus's words");
            b
        });
        TrainingBar(bar, vocab_size)
    }

    /// The pieces of `rx` as the trainer takes them, counted on the bar; once they end, the
    /// merges.
    pub(super) fn taken(&self, rx: std::sync::mpsc::Receiver<String>) -> impl Iterator<Item = String> + Send + '_ {
        rx.into_iter()
            .inspect(|p| {
                if let Some(b) = &self.0 {
                    b.inc(p.len() as u64);
                }
            })
            .chain(std::iter::from_fn(|| {
                self.merging();
                None
            }))
    }

    /// The corpus is read: the merges are learnt, for a time no count measures.
    pub(super) fn merging(&self) {
        if let Some(b) = &self.0 {
            b.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("a valid template"),
            );
            b.set_message(format!("learning the merges (up to {} tokens)", self.1));
            b.enable_steady_tick(std::time::Duration::from_millis(250));
        }
    }

    pub(super) fn done(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
