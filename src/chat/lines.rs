//! Where the chat's lines come from: a line editor on a terminal (history, editing), plain lines
//! from a pipe, each line capped in length.

use super::history::History;
use super::*;

/// Where a chat's lines come from: a line editor on a terminal, or any reader.
pub trait Lines {
    /// The next line without its newline, or `None` at the end of the input.
    fn next_line(&mut self, prompt: &str) -> std::io::Result<Option<String>>;
    /// Whether a person types the lines (a terminal): a line refused can be typed again; from a
    /// pipe or a file it is skipped.
    fn typed(&self) -> bool {
        false
    }
}

/// Lines from a reader (a pipe, a file, a test): the prompt goes to `log`.
pub struct PlainLines<'a> {
    pub input: &'a mut dyn BufRead,
    pub log: &'a mut dyn Write,
    /// The bytes read so far.
    read: u64,
}

impl<'a> PlainLines<'a> {
    pub fn new(input: &'a mut dyn BufRead, log: &'a mut dyn Write) -> Self {
        PlainLines { input, log, read: 0 }
    }
}

impl Lines for PlainLines<'_> {
    fn next_line(&mut self, prompt: &str) -> std::io::Result<Option<String>> {
        write!(self.log, "{prompt}")?;
        self.log.flush()?;
        let Some(bytes) = read_line_capped(self.input, LINE_CAP)? else {
            // The end of the input: the prompt's line ends (a shell's prompt starts on its own).
            writeln!(self.log)?;
            return Ok(None);
        };
        // (UTF-16, Notepad's "Unicode": every line after the first was NUL characters, sent as text;
        // without a byte-order mark, every line. A line of it may start at an odd byte.)
        let odd = self.read % 2 == 1;
        self.read += bytes.len() as u64;
        if let Some(enc) = crate::train::data::utf16_encoding_at(&bytes, odd) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "standard input: {}, e.g. `iconv -f {enc} -t UTF-8 FILE | ddl chat …`",
                    crate::train::data::utf16_said(enc)
                ),
            ));
        }
        // A line that is not UTF-8 is one bad line, not the end of the chat: its invalid bytes
        // become U+FFFD, which the tokenizer then reports as a character it does not know.
        let line = String::from_utf8(bytes).unwrap_or_else(|e| {
            let _ = writeln!(self.log, "(this line is not UTF-8: its invalid bytes are shown as U+FFFD)");
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        });
        // (A file saved by a Windows editor starts with a byte-order mark, which is not text: it
        // was a character the char model lacks, which no one sees in the line.)
        Ok(Some(line.trim_start_matches('\u{feff}').trim_end_matches(['\n', '\r']).to_string()))
    }
}

/// The longest line a chat reads from a pipe or file (a pipe from /dev/zero would never end
/// one), as `ddl generate --prompt -` caps standard input.
pub(super) const LINE_CAP: u64 = 256 << 20;

/// One line of `input` (with its newline), `None` at the end; a line of more than `cap` bytes
/// is an error (the chat ends).
pub(super) fn read_line_capped(input: &mut dyn BufRead, cap: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    let mut line = std::io::Read::take(input, cap + 1);
    // (`ddl chat < DIR` was "chat input/output: Is a directory (os error 21)" alone.)
    let folder = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::IsADirectory => std::io::Error::new(
            e.kind(),
            "standard input is a folder, not lines of text: redirect a file (`< FILE`) or pipe the lines in",
        ),
        _ => e,
    };
    if line.read_until(b'\n', &mut bytes).map_err(folder)? == 0 {
        return Ok(None);
    }
    if bytes.len() as u64 > cap && bytes.last() != Some(&b'\n') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "a line of the input is longer than {} MiB: a chat reads it line by line (and the model only the \
                 last max_seq_len tokens of a line); give shorter lines, or score a long text with `ddl eval \
                 --checkpoint DIR --text FILE`",
                cap >> 20
            ),
        ));
    }
    Ok(Some(bytes))
}

/// Lines from a terminal through rustyline: editing, history (↑/↓, kept in `history` across
/// chats when given, [`History`]), Ctrl-C clears the line, Ctrl-D ends the chat.
pub struct EditedLines {
    pub(super) editor: rustyline::DefaultEditor,
    pub(super) history: Option<History>,
}

impl EditedLines {
    /// The editor, its history loaded from `history`; a history that cannot be written is said
    /// on stderr (once: here, or at the first line that cannot be added).
    pub fn new(history: Option<std::path::PathBuf>) -> Result<Self, String> {
        let mut editor = rustyline::DefaultEditor::new().map_err(|e| format!("line editor: {e}"))?;
        if let Some(h) = &history {
            let _ = editor.load_history(h);
        }
        let history = history.and_then(|h| History::open(&h).inspect_err(|note| eprintln!("{note}")).ok());
        Ok(EditedLines { editor, history })
    }
}

impl Lines for EditedLines {
    fn typed(&self) -> bool {
        true
    }

    fn next_line(&mut self, prompt: &str) -> std::io::Result<Option<String>> {
        use rustyline::error::ReadlineError;
        loop {
            match self.editor.readline(prompt) {
                Ok(line) => {
                    if !line.trim().is_empty() {
                        let _ = self.editor.add_history_entry(line.as_str());
                        // (Added to the file under a lock, the file replaced whole: two chats at
                        // once tore it, rustyline's save truncating it and writing its own lines.)
                        if let Some(Err(note)) = self.history.as_mut().map(|h| h.add(&line)) {
                            eprintln!("{note}");
                        }
                    }
                    return Ok(Some(line));
                }
                Err(ReadlineError::Interrupted) => continue,
                Err(ReadlineError::Eof) => {
                    // (Ctrl-D: the prompt's line ends, as a shell's prompt starts on its own.)
                    println!();
                    return Ok(None);
                }
                Err(ReadlineError::Io(e)) => return Err(e),
                Err(e) => return Err(std::io::Error::other(e.to_string())),
            }
        }
    }
}
