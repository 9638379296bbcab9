//! Records the commit the engine is built from, and whether the tree had changes, for the
//! experiment runs to carry (`ddl::build_commit`).
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty());
    println!("cargo:rustc-env=DDL_GIT_COMMIT={commit}");
    println!(
        "cargo:rustc-env=DDL_GIT_DIRTY={}",
        match dirty {
            Some(true) => "dirty",
            Some(false) => "clean",
            None => "unknown",
        }
    );
    for p in [".git/HEAD", ".git/index", "src", "shaders", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={p}");
    }
}
