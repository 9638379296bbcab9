//! The inputs of `ddl data prepare` and `--corpus`: text files, folders and JSON Lines documents,
//! read in pieces cut at safe points; a problem placed at its file and line.

use super::*;

/// The input files, in order: files as given, folders' `.txt` and `.jsonl` files (recursively,
/// sorted by path; a folder reached again through a symbolic link — a cycle, or a second way
/// into the same folder — is read once, and so is a file).
pub(super) fn input_files(inputs: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<PathBuf>), DataError> {
    let mut seen = std::collections::HashSet::new();
    let mut walk = |dir: &Path, out: &mut Vec<PathBuf>| walk_dir(dir, out, &mut seen);
    pub(super) fn walk_dir(
        dir: &Path,
        out: &mut Vec<PathBuf>,
        seen: &mut std::collections::HashSet<PathBuf>,
    ) -> Result<(), DataError> {
        if !seen.insert(dir.canonicalize().map_err(io(dir))?) {
            return Ok(());
        }
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(dir).map_err(io(dir))?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk_dir(&p, out, seen)?;
            } else if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("txt") || e.eq_ignore_ascii_case("jsonl")) {
                // (A pipe in a folder blocked the second read, or the first without a writer.)
                if crate::train::data::is_pipe(&p) {
                    return Err(DataError::Pipe(p));
                }
                out.push(p);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    for i in inputs {
        if !i.exists() {
            return Err(match crate::train::data::path_problem(i) {
                Some(crate::train::data::PathProblem::BrokenLink) => DataError::BrokenLinkInput(i.clone()),
                _ => DataError::MissingInput(i.clone()),
            });
        }
        if i.is_dir() {
            let before = files.len();
            walk(i, &mut files)?;
            if files.len() == before {
                return Err(DataError::NoInputFiles(i.clone()));
            }
        } else if crate::train::data::path_problem(i) == Some(crate::train::data::PathProblem::Device) {
            return Err(DataError::Device(i.clone()));
        } else if crate::train::data::is_pipe(i) {
            return Err(DataError::Pipe(i.clone()));
        } else {
            files.push(i.clone());
        }
    }
    // A file reached twice (given twice, or a link beside its target) is read once: read twice,
    // its text would be in both the training and the validation split.
    let mut once = std::collections::HashSet::new();
    let (files, again) = files.into_iter().partition(|p| once.insert(p.canonicalize().unwrap_or_else(|_| p.clone())));
    Ok((files, again))
}

/// A JSON-lines file, by its extension (any case: `G.JSONL`).
pub(crate) fn is_jsonl(p: &Path) -> bool {
    p.extension().is_some_and(|e| e.eq_ignore_ascii_case("jsonl"))
}

/// Where to cut the text read so far into a piece (0: read on): before the last line end (a
/// newline, or `\r\n`) that follows a word (or any character but whitespace and control
/// characters); once `carry` holds `long` bytes without one (a line of megabytes), at the last
/// other [`crate::tokenizer::safe_cut`] (before whitespace that follows a word, between ASCII
/// letters, digits and others) — at either, byte-level BPE gives the tokens of the uncut text —
/// and, in `long` bytes without any, at the last character boundary (the one cut that may change tokens: no merge across it). So
/// a piece holds at most `long` bytes plus one read.
pub(super) fn cut_point(carry: &[u8], long: usize) -> usize {
    use crate::tokenizer::safe_cut;
    let at_line = (1..carry.len()).rev().find(|&i| matches!(carry[i], b'\n' | b'\r') && safe_cut(carry, i));
    if let Some(i) = at_line {
        return i;
    }
    if carry.len() < long {
        return 0;
    }
    let at_space = (1..carry.len()).rev().find(|&i| safe_cut(carry, i));
    at_space.unwrap_or_else(|| (1..carry.len()).rev().find(|&i| carry[i] & 0xC0 != 0x80).unwrap_or(carry.len()))
}

/// Calls `f(piece, starts_document)` for every piece of text of `path`, in order.
pub(super) fn pieces(path: &Path, f: impl FnMut(String, bool) -> Result<(), DataError>) -> Result<(), DataError> {
    pieces_of(path, CHUNK, f)
}

/// The documents of a JSON-lines file in order: each non-empty line's `text` field, with the
/// line's number (from 1), until `f` breaks; a line that is not UTF-8 JSON with a string `text`
/// is an error naming the line.
pub(super) fn jsonl_documents(
    path: &Path,
    mut f: impl FnMut(usize, String) -> Result<ControlFlow<()>, DataError>,
) -> Result<(), DataError> {
    let r = std::io::BufReader::new(std::fs::File::open(path).map_err(io(path))?);
    for (n, line) in r.split(b'\n').enumerate() {
        let mut line = String::from_utf8(line.map_err(io(path))?).map_err(|e| DataError::Meta {
            path: path.to_path_buf(),
            msg: format!(
                "line {}: not UTF-8 text (first invalid byte at offset {} of the line); convert the file to UTF-8",
                n + 1,
                e.utf8_error().valid_up_to()
            ),
        })?;
        if line.ends_with('\r') {
            line.pop();
        }
        // A byte-order mark (editors on Windows write one) is not part of the first line's JSON.
        let line = if n == 0 { line.trim_start_matches('\u{feff}').to_string() } else { line };
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| DataError::Meta {
            path: path.to_path_buf(),
            msg: format!(
                "line {}: not JSON ({e}); a JSON Lines file holds one object per line, {{\"text\": \"…\"}}: mend that \
                 line, or give plain text as a .txt file",
                n + 1
            ),
        })?;
        let Some(text) = v.get("text").and_then(|t| t.as_str()) else {
            // What the line holds instead: another type of "text" (a number, null), other
            // fields (a misspelt name), or no object at all.
            let found = match &v {
                serde_json::Value::Object(m) => match m.get("text") {
                    Some(t) => format!("its \"text\" is {}, not a string", json_kind(t)),
                    None if m.is_empty() => "it is an empty object".to_string(),
                    None => format!(
                        "its fields are {}",
                        m.keys().take(8).map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ")
                    ),
                },
                other => format!("it is {}, not an object", json_kind(other)),
            };
            return Err(DataError::Meta {
                path: path.to_path_buf(),
                msg: format!(
                    "line {}: no string field \"text\" ({found}); each line must be {{\"text\": \"…\"}}",
                    n + 1
                ),
            });
        };
        // (A JSON object that gives a field twice reads as its last value: the first document
        // was dropped without a word.)
        if text_fields(&line) > 1 {
            return Err(DataError::Meta {
                path: path.to_path_buf(),
                msg: format!(
                    "line {}: the field \"text\" is given more than once (only the last would be read); keep one \
                     \"text\" per line, a document per line",
                    n + 1
                ),
            });
        }
        if f(n + 1, text.to_string())?.is_break() {
            break;
        }
    }
    Ok(())
}

/// A JSON value's kind, for messages: "a number", "null", "an array" ….
pub(super) fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// How many times a JSON object's line gives the field `text` (at its top level; 0 for a line
/// that is not an object).
pub(super) fn text_fields(line: &str) -> usize {
    struct Count(usize);
    impl<'de> serde::Deserialize<'de> for Count {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Count, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Count;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Count, A::Error> {
                    let mut n = 0;
                    while let Some(key) = map.next_key::<String>()? {
                        n += usize::from(key == "text");
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                    Ok(Count(n))
                }
            }
            d.deserialize_map(V)
        }
    }
    serde_json::from_str::<Count>(line).map_or(0, |c| c.0)
}

/// [`pieces`], reading `chunk` bytes at a time (a line longer than two chunks is cut).
pub(super) fn pieces_of(
    path: &Path,
    chunk: usize,
    mut f: impl FnMut(String, bool) -> Result<(), DataError>,
) -> Result<(), DataError> {
    if is_jsonl(path) {
        return jsonl_documents(path, |_, text| f(text, true).map(|()| ControlFlow::Continue(())));
    }
    let file = std::fs::File::open(path).map_err(io(path))?;
    let mut feed = FileFeed { path, r: utf8_reader(path, file)? };
    text_pieces(&mut feed, chunk, true, f)
}

/// Bytes of text, read on by [`text_pieces`]; its errors name the file.
pub(super) trait Feed {
    /// Like [`Read::read`]: 0 at the end.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, DataError>;
    /// The error for bytes that are not UTF-8 at `offset` of the text read.
    fn not_utf8(&self, offset: usize) -> DataError;
}

pub(super) struct FileFeed<'a, R> {
    pub(super) path: &'a Path,
    pub(super) r: R,
}

impl<R: Read> Feed for FileFeed<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, DataError> {
        self.r.read(buf).map_err(io(self.path))
    }
    fn not_utf8(&self, offset: usize) -> DataError {
        DataError::NotUtf8 { path: self.path.to_path_buf(), offset }
    }
}

/// A buffered reader of a text file, refused when its first bytes are UTF-16 (without a
/// byte-order mark it is valid UTF-8 to a reader that does not look, read by a byte-level model
/// as it was; with one, the remedy was LATIN1's where the file is a pipe).
pub(super) fn utf8_reader<R: Read>(path: &Path, r: R) -> Result<std::io::BufReader<R>, DataError> {
    let mut r = std::io::BufReader::with_capacity(1 << 20, r);
    // (The first read's bytes, left in the buffer for the text: a pipe's first piece.)
    match crate::train::data::utf16_encoding(std::io::BufRead::fill_buf(&mut r).map_err(io(path))?) {
        Some(enc) => Err(DataError::Utf16 { path: path.to_path_buf(), enc }),
        None => Ok(r),
    }
}

/// A part of a `--corpus`: a file, or the built-in text.
#[derive(Debug, Clone)]
pub(crate) enum CorpusPart {
    File(PathBuf),
    Text(&'static str),
}

/// A `--corpus`'s parts read as one text, joined by newlines ([`crate::train::data::read_corpus`]'s text).
pub(super) struct CorpusFeed<'a> {
    pub(super) parts: &'a [CorpusPart],
    /// The part being read, and where in the text each part opened so far starts.
    pub(super) cur: Option<Box<dyn Read + 'a>>,
    pub(super) starts: Vec<usize>,
    /// Whether the newline before part `starts.len()` was given.
    pub(super) joined: bool,
    pub(super) pos: usize,
}

impl<'a> CorpusFeed<'a> {
    pub(super) fn new(parts: &'a [CorpusPart]) -> Self {
        CorpusFeed { parts, cur: None, starts: Vec::new(), joined: false, pos: 0 }
    }

    pub(super) fn path(&self, i: usize) -> PathBuf {
        match &self.parts[i] {
            CorpusPart::File(p) => p.clone(),
            CorpusPart::Text(_) => PathBuf::from(crate::train::data::DEFAULT_CORPUS),
        }
    }
}

impl Feed for CorpusFeed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, DataError> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if let Some(r) = self.cur.as_mut() {
                let at = self.starts.len() - 1;
                let n = r.read(buf).map_err(|source| DataError::Io { path: self.path(at), source })?;
                if n > 0 {
                    self.pos += n;
                    return Ok(n);
                }
                self.cur = None;
            }
            let next = self.starts.len();
            if next == self.parts.len() {
                return Ok(0);
            }
            // (As `read_corpus`: no newline before the first text, an empty first file's
            // neither.)
            if next > 0 && !self.joined && self.pos > 0 {
                self.joined = true;
                buf[0] = b'\n';
                self.pos += 1;
                return Ok(1);
            }
            self.joined = false;
            self.cur = Some(match &self.parts[next] {
                CorpusPart::File(p) => Box::new(utf8_reader(p, std::fs::File::open(p).map_err(io(p))?)?),
                CorpusPart::Text(t) => Box::new(t.as_bytes()),
            });
            self.starts.push(self.pos);
        }
    }

    fn not_utf8(&self, offset: usize) -> DataError {
        let i = self.starts.iter().rposition(|&s| s <= offset).unwrap_or(0);
        DataError::NotUtf8 { path: self.path(i), offset: offset - self.starts.get(i).copied().unwrap_or(0) }
    }
}

/// Calls `f(piece, first)` for the pieces of `feed`'s text, cut at [`cut_point`]s, `chunk` bytes
/// read at a time; `bom`: a byte-order mark that starts the text is dropped.
pub(super) fn text_pieces(
    feed: &mut impl Feed,
    chunk: usize,
    bom: bool,
    mut f: impl FnMut(String, bool) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let mut carry: Vec<u8> = Vec::new();
    let mut offset = 0usize;
    let mut first = true;
    loop {
        let mut buf = vec![0u8; chunk];
        let mut got = 0;
        while got < buf.len() {
            let n = feed.read(&mut buf[got..])?;
            if n == 0 {
                break;
            }
            got += n;
        }
        buf.truncate(got);
        let end = got == 0;
        carry.extend_from_slice(&buf);
        let cut = if end { carry.len() } else { cut_point(&carry, 2 * chunk) };
        if cut > 0 {
            let rest = carry.split_off(cut);
            let text = String::from_utf8(std::mem::replace(&mut carry, rest))
                .map_err(|e| feed.not_utf8(offset + e.utf8_error().valid_up_to()))?;
            offset += cut;
            // A text file's byte-order mark is not text.
            let text =
                if first && bom { text.strip_prefix('\u{feff}').map(String::from).unwrap_or(text) } else { text };
            f(text, first)?;
            first = false;
        }
        if end {
            break;
        }
    }
    if first {
        // An empty file is an empty document (which `ddl data prepare` skips: [`Encoder::push`]).
        f(String::new(), true)?;
    }
    Ok(())
}

/// An unknown character's error placed in its file: `pos`, its offset in the text pushed, is
/// taken to the last of `starts` (where each file's text starts in it) at or before it.
pub(super) fn placed(e: DataError, starts: &[(usize, PathBuf)]) -> DataError {
    use crate::tokenizer::TokenizerError;
    let file = |pos: usize| starts.iter().rev().find(|(s, _)| *s <= pos).cloned().unwrap_or_default();
    match e {
        DataError::Tokenize(TokenizerError::Unknown { ch, pos, vocab }) => {
            let (start, path) = file(pos);
            DataError::UnknownChar { path, offset: pos - start, ch, vocab }
        }
        DataError::Tokenize(TokenizerError::Dropped { ch, pos }) => {
            let (start, path) = file(pos);
            DataError::DroppedChar { path, line: None, offset: pos - start, ch }
        }
        e => e,
    }
}

/// [`placed`] for `ddl data prepare`'s inputs: a JSON-lines file's text is its documents' `text`
/// fields, so the line and the byte in that text are given; the remedy is one for preparing data.
pub(super) fn placed_input(e: DataError, starts: &[(usize, PathBuf)]) -> DataError {
    let line_of = |path: &Path, offset: usize| if is_jsonl(path) { jsonl_place(path, offset) } else { None };
    match placed(e, starts) {
        DataError::UnknownChar { path, offset, ch, vocab } => {
            let line = line_of(&path, offset);
            DataError::UnknownCharInInput { path, line, offset: line.map_or(offset, |(_, b)| b), ch, vocab }
        }
        DataError::DroppedChar { path, offset, ch, .. } => {
            let line = line_of(&path, offset);
            DataError::DroppedChar { path, line, offset: line.map_or(offset, |(_, b)| b), ch }
        }
        other => other,
    }
}

/// The line of a JSON-lines file whose `text` holds byte `offset` of the documents' text (the
/// non-empty lines' `text` fields one after the other), and the byte in that text.
pub(super) fn jsonl_place(path: &Path, offset: usize) -> Option<(usize, usize)> {
    let (mut at, mut found) = (0, None);
    jsonl_documents(path, |line, text| {
        if offset < at + text.len() {
            found = Some((line, offset - at));
            return Ok(ControlFlow::Break(()));
        }
        at += text.len();
        Ok(ControlFlow::Continue(()))
    })
    .ok()?;
    found
}
