//! `ddl golden`: parity with the PyTorch float64 golden files, the files given or found in folders.

use super::*;

/// The golden files given: a folder stands for its `*.safetensors` (not its subfolders').
pub(super) fn golden_files(given: &[std::path::PathBuf]) -> Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for g in given {
        refuse_pipe("golden", g, "a golden file is read whole, by name")?;
        // (A name mistyped is said before the adapter opens, with the names there.)
        if !g.exists() {
            anyhow::bail!("{}", ddl::golden::missing_file(g));
        }
        if !g.is_dir() {
            files.push(g.clone());
            continue;
        }
        let entries = std::fs::read_dir(g).with_context(|| format!("listing {}", g.display()))?;
        let mut inside: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        if inside.is_empty() {
            anyhow::bail!(
                "{}: a folder without .safetensors files; give golden files (e.g. tests/golden/*.safetensors)",
                g.display()
            );
        }
        inside.sort();
        files.extend(inside);
    }
    // A file given twice (by name and through its folder, or two spellings) is checked once, as
    // `ddl data prepare` reads an input once (it was checked, and reported, again).
    let mut seen = std::collections::HashSet::new();
    let mut again = Vec::new();
    files.retain(|f| {
        let first = seen.insert(f.canonicalize().unwrap_or_else(|_| f.clone()));
        if !first {
            again.push(f.display().to_string());
        }
        first
    });
    if !again.is_empty() {
        eprintln!("note: {} given more than once: checked once", again.join(", "));
    }
    Ok(files)
}

pub(super) fn golden(
    dev: &DeviceArgs,
    files: &[std::path::PathBuf],
    quiet: bool,
    st: ddl::model::Storage,
) -> Result<()> {
    // Every file read and checked first: the adapter opens only where one is to be compared (a
    // damaged file, or only skipped ones, are said without it).
    let loaded: Vec<_> = files.iter().map(|f| (f, ddl::golden::Golden::load(f))).collect();
    let compared = |g: &ddl::golden::Golden| {
        g.interventions.is_empty() && !(st.state_f16 && g.config.f16_state_support().is_err())
    };
    let gpu = if loaded.iter().any(|(_, g)| g.as_ref().is_ok_and(compared)) {
        Some(dev.open().context("opening the GPU")?)
    } else {
        None
    };
    let (mut failed_files, mut unchecked, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for (f, g) in loaded {
        let g = match g {
            Ok(g) => g,
            Err(e) => {
                eprintln!("error: {e}");
                unchecked.push(f.display().to_string());
                continue;
            }
        };
        // `--f16-state` checks the files whose model can store f16 states (d_v = 4 of ddl and
        // ddl_vmap); the others of a glob are skipped, and named.
        if st.state_f16
            && let Err(why) = g.config.f16_state_support()
        {
            eprintln!("skipped {}: {why}", f.display());
            skipped.push(format!("{} ({why})", f.display()));
            continue;
        }
        let result = if let (true, Some(gpu)) = (g.interventions.is_empty(), &gpu) {
            ddl::golden::check_stored(gpu, &g, st).map(|rows| (g, rows))
        } else {
            Err(ddl::golden::GoldenError::Content {
                path: f.clone(),
                msg: format!(
                    "made with β interventions ({}), which `ddl golden` does not apply: the decode tests check \
                     these files (cargo test --test decode); give it the plain golden files",
                    g.interventions
                ),
            })
        };
        match result {
            Err(e) => {
                eprintln!("error: {e}");
                unchecked.push(f.display().to_string());
            }
            Ok((g, rows)) => {
                let fails = rows.iter().filter(|r| !r.pass).count();
                print!("{}", ddl::golden::report(f, &g, &rows, quiet));
                if fails > 0 {
                    failed_files.push(f.display().to_string());
                }
            }
        }
    }
    if skipped.len() == files.len() {
        anyhow::bail!(
            "--f16-state: no file given has a model that stores f16 states (variant ddl or ddl_vmap, d_v = 4): {}",
            skipped.join("; ")
        );
    }
    if !skipped.is_empty() {
        eprintln!("--f16-state: {} of {} files skipped (their models have no f16 states)", skipped.len(), files.len());
    }
    match (failed_files.is_empty(), unchecked.is_empty()) {
        (true, true) => Ok(()),
        (false, true) => anyhow::bail!("golden parity failed for: {}", failed_files.join(", ")),
        (true, false) => anyhow::bail!("could not be checked: {}", unchecked.join(", ")),
        (false, false) => anyhow::bail!(
            "golden parity failed for: {}; could not be checked: {}",
            failed_files.join(", "),
            unchecked.join(", ")
        ),
    }
}
