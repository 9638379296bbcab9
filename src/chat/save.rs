//! `/save FILE`: where the file is, and the conversation written there whole or not at all.

/// `/save FILE`'s file as typed: without the spaces after it (a terminal hides them), and `~/`
/// the home folder, quotes around it taken off, as a shell reads it.
pub(super) fn save_path(rest: &str) -> std::path::PathBuf {
    let rest = rest.trim_end();
    // (`/save "my chat.txt"` made a file whose name held the quotes; inside them `~` is a name.)
    for q in ['"', '\''] {
        if let Some(inner) = rest.strip_prefix(q).and_then(|r| r.strip_suffix(q)).filter(|i| !i.is_empty()) {
            return std::path::PathBuf::from(inner);
        }
    }
    match (rest.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(under), Some(home)) => std::path::Path::new(&home).join(under),
        _ => std::path::PathBuf::from(rest),
    }
}

/// `/save FILE`: the conversation's text into `path` (whole, or not at all). An existing file
/// is replaced only when `again` (this chat saved it before); returns the characters written.
pub(super) fn save_text(path: &std::path::Path, text: &str, again: bool) -> Result<usize, String> {
    let shown = path.display();
    if text.is_empty() {
        return Err("nothing to save: the conversation is empty (since the start or the last /reset)".into());
    }
    if path.is_dir() {
        return Err(format!("{shown} is a folder: give a file name, e.g. {}", path.join("chat.txt").display()));
    }
    if path.exists() && !again {
        return Err(format!(
            "{shown} exists and this chat did not write it: give another name, or remove it first (it is not replaced)"
        ));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if !parent.is_dir() {
        return Err(format!("{shown}: the folder {} does not exist", parent.display()));
    }
    crate::train::checkpoint::write_atomic(path, text.as_bytes()).map_err(|e| format!("writing {shown}: {e}"))?;
    Ok(text.chars().count())
}
