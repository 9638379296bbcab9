//! `ddl`: a wgpu/WGSL engine that trains, runs and explains Deep Delta Learning language models.

#[cfg(feature = "native")]
pub mod bench;
#[cfg(feature = "native")]
pub mod chat;
#[cfg(feature = "native")]
pub mod experiment;
pub mod generate;
#[cfg(feature = "native")]
pub mod golden;
pub mod gpu;
pub mod kernels;
pub mod model;
pub mod presets;
pub mod shaders;
pub mod stats;
pub mod testing;
pub mod tokenizer;
#[cfg(feature = "native")]
pub mod train;
/// Without `native` (the browser): only the checkpoint format, read from bytes in memory.
#[cfg(not(feature = "native"))]
pub mod train {
    pub mod checkpoint;
    pub mod metrics;
}

/// A count and its noun, the noun plural where the count is not 1: "1 run", "3 runs", "0 tokens".
pub fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// A path as one word of a command to copy into a shell: quoted where it holds spaces, quotes or
/// other characters a shell takes apart (`'runs/ré sumé'`), and `./`-prefixed where it starts
/// with `-`, which a command line would take for a flag.
pub fn shell_word(path: impl AsRef<std::path::Path>) -> String {
    let s = path.as_ref().display().to_string();
    let s = if s.starts_with('-') { format!("./{s}") } else { s };
    let plain = |c: char| c.is_alphanumeric() || "_@%+=:,./-".contains(c);
    match !s.is_empty() && s.chars().all(plain) {
        true => s,
        false => format!("'{}'", s.replace('\'', r"'\''")),
    }
}

/// The commit this build of the engine was made from, and whether its tree had uncommitted
/// changes ("clean", "dirty" or "unknown" without git).
pub fn build_commit() -> (&'static str, &'static str) {
    (env!("DDL_GIT_COMMIT"), env!("DDL_GIT_DIRTY"))
}

/// The cache directory (autotune measurements, the `--corpus` shard sets): `$DDL_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/ddl`, else `~/.cache/ddl` (else the temporary folder's `ddl`); an empty
/// variable is no setting, as for XDG's.
pub fn cache_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(d) = std::env::var_os("DDL_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("ddl");
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".cache/ddl"))
        .unwrap_or_else(|| std::env::temp_dir().join("ddl"))
}

/// Why `path` could not be made or written, in words: where one of the folders above it is a
/// file ("'/x/cache' is a file, not a folder": what `DDL_CACHE_DIR` at a file gives), that; else
/// the error itself (the OS's "File exists" or "Not a directory" named neither).
pub fn why_not_written(path: &std::path::Path, e: &std::io::Error) -> String {
    let file = path.ancestors().skip(1).find(|a| !a.as_os_str().is_empty() && a.exists() && !a.is_dir());
    match file {
        Some(f) => format!("'{}' is a file, not a folder", f.display()),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn plural_gives_the_count_and_its_noun() {
        assert_eq!(super::plural(1, "token"), "1 token");
        assert_eq!(super::plural(0, "token"), "0 tokens");
        assert_eq!(super::plural(3, "stale set"), "3 stale sets");
    }

    /// `DDL_CACHE_DIR` at a file: the file is named (the OS said "File exists" or "Not a
    /// directory", naming neither); any other error is said as it is.
    #[test]
    fn why_not_written_names_the_file_in_the_way() {
        let dir = crate::testing::scratch_dir("why-not-written");
        let file = dir.join("cache");
        std::fs::write(&file, b"x").unwrap();
        let path = file.join("shards/set");
        let e = std::fs::create_dir_all(&path).unwrap_err();
        let why = super::why_not_written(&path, &e);
        assert_eq!(why, format!("'{}' is a file, not a folder", file.display()));
        let other = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(super::why_not_written(&dir.join("a/b"), &other), other.to_string());
    }

    /// The commands that messages give run as printed when pasted into a shell: a run folder
    /// `runs/ré sumé` was said as `ddl train --resume runs/ré sumé` (two arguments).
    #[test]
    fn a_path_in_a_command_is_one_shell_word() {
        use super::shell_word;
        assert_eq!(shell_word("runs/a"), "runs/a");
        assert_eq!(shell_word("/tmp/runs/résumé-2,b=1"), "/tmp/runs/résumé-2,b=1");
        assert_eq!(shell_word("runs/ré sumé"), "'runs/ré sumé'");
        assert_eq!(shell_word("it's $HOME"), r"'it'\''s $HOME'");
        assert_eq!(shell_word("-a"), "./-a");
        assert_eq!(shell_word("-a b"), "'./-a b'");
        assert_eq!(shell_word(""), "''");
    }
}
