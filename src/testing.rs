//! Support for kernel tests and numerical comparisons: a shared device, seeded random inputs and
//! relative-L2 reports against float64 references. Used by `tests/`, `ddl golden` and benches.

#[cfg(feature = "native")]
use std::sync::{Arc, OnceLock};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

#[cfg(feature = "native")]
use crate::gpu::{Gpu, GpuOptions};

/// The device shared by all tests of a process (chosen like the CLI: `DDL_BACKEND`,
/// `DDL_ADAPTER`). Panics, failing the test, when there is no adapter: a GPU test never skips.
#[cfg(feature = "native")]
pub fn gpu() -> Arc<Gpu> {
    static GPU: OnceLock<Arc<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| {
        let opts = GpuOptions::from_env().unwrap_or_else(|e| panic!("{e}"));
        match Gpu::new(&opts) {
            Ok(g) => g,
            Err(e) => panic!("GPU tests need an adapter and none could be opened: {e}"),
        }
    })
    .clone()
}

/// The folder that holds the tests' data (`tests/golden/`, `tests/fixtures/`, `assets/`), so
/// that test binaries run away from the source tree (the GPU check's bundle runs them on another
/// machine): `DDL_TEST_DATA` when set, else the working directory when it has `tests/golden/`,
/// else [`package_dir`]. Panics, failing the test, with the remedy when `DDL_TEST_DATA` names a
/// folder without `tests/golden/`.
pub fn data_root() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(d) = std::env::var_os("DDL_TEST_DATA").filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        assert!(
            d.join("tests/golden").is_dir(),
            "DDL_TEST_DATA={}: no tests/golden/ in that folder; point it at a checkout of the \
             repository or an unpacked GPU-check bundle, or unset it",
            d.display()
        );
        return d;
    }
    if let Ok(cwd) = std::env::current_dir()
        && cwd.join("tests/golden").is_dir()
    {
        return cwd;
    }
    package_dir(env!("CARGO_MANIFEST_DIR"), "tests/golden")
}

/// A test binary's package folder: the one `cargo test` names at run time (`CARGO_MANIFEST_DIR`
/// in the environment; right also when the checkout moved after the build, or the target
/// folder is shared by checkouts at other paths) where it holds `marker`, else `built`, the
/// binary's own `env!("CARGO_MANIFEST_DIR")`. (The app's and the browser's tests use it too.)
pub fn package_dir(built: &str, marker: &str) -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .filter(|d| d.join(marker).exists())
        .unwrap_or_else(|| built.into())
}

/// A file or folder of the tests' data under [`data_root`], e.g. `data_path("tests/golden/ddl.safetensors")`.
pub fn data_path(rel: &str) -> std::path::PathBuf {
    data_root().join(rel)
}

/// The seed of a test: `DDL_TEST_SEED` when set (to replay a failure), else fresh per run.
pub fn seed() -> u64 {
    if let Some(s) = std::env::var("DDL_TEST_SEED").ok().and_then(|s| s.parse().ok()) {
        return s;
    }
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    // Mix in a counter so tests started in the same nanosecond still differ.
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (t.as_nanos() as u64) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A seeded generator of test data.
pub struct Rng {
    pub seed: u64,
    inner: ChaCha8Rng,
}

impl Rng {
    /// A generator with a fresh seed (see [`seed`]).
    pub fn fresh() -> Self {
        Self::new(seed())
    }

    pub fn new(seed: u64) -> Self {
        Rng { seed, inner: ChaCha8Rng::seed_from_u64(seed) }
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn uniform(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.inner.random_range(lo..hi)).collect()
    }

    /// `n` values from N(0, std²).
    pub fn normal(&mut self, n: usize, std: f32) -> Vec<f32> {
        let d = Normal::new(0.0f32, std).unwrap();
        (0..n).map(|_| d.sample(&mut self.inner)).collect()
    }

    /// An integer in `[lo, hi)`.
    pub fn int(&mut self, lo: usize, hi: usize) -> usize {
        self.inner.random_range(lo..hi)
    }

    /// `n` integers in `[0, hi)`.
    pub fn ints(&mut self, n: usize, hi: usize) -> Vec<i32> {
        (0..n).map(|_| self.inner.random_range(0..hi) as i32).collect()
    }
}

/// How close a float32 result is to a float64 reference.
#[derive(Debug, Clone)]
pub struct Report {
    pub name: String,
    pub n: usize,
    /// ‖got − want‖₂ / ‖want‖₂ (NaN if any element is not finite).
    pub rel_l2: f64,
    pub max_abs: f64,
    /// The worst elements: `(index, got, want)`.
    pub worst: Vec<(usize, f32, f64)>,
    pub non_finite: usize,
}

impl Report {
    pub fn passes(&self, tol: f64) -> bool {
        // Written so that NaN fails.
        self.non_finite == 0 && self.rel_l2 <= tol
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: n={} rel_l2={:.3e} max_abs={:.3e}", self.name, self.n, self.rel_l2, self.max_abs)?;
        if self.non_finite > 0 {
            write!(f, " NON-FINITE={}", self.non_finite)?;
        }
        if !self.worst.is_empty() {
            write!(f, "\n  worst elements (index: got vs want):")?;
            for (i, g, w) in &self.worst {
                write!(f, "\n    [{i}]: {g:e} vs {w:e}")?;
            }
        }
        Ok(())
    }
}

/// Compares `got` with the reference `want`.
pub fn compare(name: &str, got: &[f32], want: &[f64]) -> Report {
    assert_eq!(got.len(), want.len(), "{name}: got {} elements, reference has {}", got.len(), want.len());
    let mut num = 0.0f64;
    let mut den = 0.0f64;
    let mut max_abs = 0.0f64;
    let mut non_finite = 0;
    let mut errs: Vec<(f64, usize)> = Vec::with_capacity(got.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if !g.is_finite() {
            non_finite += 1;
            errs.push((f64::INFINITY, i));
            continue;
        }
        let e = g as f64 - w;
        num += e * e;
        den += w * w;
        max_abs = max_abs.max(e.abs());
        errs.push((e.abs(), i));
    }
    let rel_l2 = if non_finite > 0 {
        f64::NAN
    } else if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    };
    errs.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));
    let worst = errs.iter().take(5).map(|&(_, i)| (i, got[i], want[i])).collect();
    Report { name: name.to_string(), n: got.len(), rel_l2, max_abs, worst, non_finite }
}

/// Asserts relative L2 error ≤ `tol`, printing the report and the seed on failure.
#[track_caller]
pub fn assert_close(name: &str, got: &[f32], want: &[f64], tol: f64, seed: u64) {
    let r = compare(name, got, want);
    if !r.passes(tol) {
        let first = first_mismatches(got, want, tol, 5);
        let list: String = first.iter().map(|(i, g, w)| format!("\n    [{i}]: {g:e} vs {w:e}")).collect();
        panic!(
            "{r}\n  first mismatches (error above tolerance × the reference's RMS, or not finite):{list}\n  \
             tolerance {tol:e} exceeded; replay with DDL_TEST_SEED={seed}"
        );
    }
}

/// The first `count` elements (in index order) that are not finite or whose error exceeds
/// `tol` times the reference's root mean square: where a wrong result starts.
pub fn first_mismatches(got: &[f32], want: &[f64], tol: f64, count: usize) -> Vec<(usize, f32, f64)> {
    let rms = (want.iter().map(|w| w * w).sum::<f64>() / want.len().max(1) as f64).sqrt();
    let bound = tol * if rms > 0.0 { rms } else { 1.0 };
    got.iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| !g.is_finite() || (**g as f64 - **w).abs() > bound)
        .take(count)
        .map(|(i, (&g, &w))| (i, g, w))
        .collect()
}

/// Widens to f64.
pub fn f64s(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// A fresh, empty directory `$TMPDIR/ddl-tests/{pid}/{name}` for one test. A test process's
/// folder is removed when the process exits, unless a test in it failed (then it stays to be
/// looked at, until a later test process finds its process gone and removes it): a `make test`
/// leaves nothing behind (it left a few hundred MB a run in `$TMPDIR` before).
pub fn scratch_dir(name: &str) -> std::path::PathBuf {
    let d = scratch_root().join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create a test directory under the temp dir");
    d
}

/// Set when a test of this process panics: its scratch folder is kept.
static FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// This test process's scratch folder, `$TMPDIR/ddl-tests/{pid}`, once made.
static ROOT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// [`ROOT`]: the first call removes the folders of test processes that are gone and arranges for
/// this one's removal at exit.
fn scratch_root() -> &'static std::path::Path {
    ROOT.get_or_init(|| {
        let parent = std::env::temp_dir().join("ddl-tests");
        #[cfg(feature = "native")]
        crate::train::prepare::remove_dead_writers(&parent, |name| Some(name));
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            FAILED.store(true, std::sync::atomic::Ordering::Relaxed);
            previous(info)
        }));
        #[cfg(unix)]
        {
            extern "C" fn remove_at_exit() {
                if !FAILED.load(std::sync::atomic::Ordering::Relaxed)
                    && let Some(root) = ROOT.get()
                {
                    let _ = std::fs::remove_dir_all(root);
                }
            }
            // SAFETY: `atexit` registers a plain function without arguments, called once at exit.
            unsafe { libc::atexit(remove_at_exit) };
        }
        parent.join(std::process::id().to_string())
    })
}

/// The `ddl` binary `exe` (a test's `env!("CARGO_BIN_EXE_ddl")`) as the CLI tests run it: its
/// cache folder (matmul tile choices, token caches) `dir/cache`, and no matmul tiles measured
/// (`DDL_NO_AUTOTUNE=1`: the heuristic's tiles). On lavapipe a fresh cache's measurements took
/// ≈ 50 s of every test's first training run (a 3-step `tiny` run: 72 s tuning, 22 s not), most
/// of the CLI tests' time; every tile variant is tested against float64 by the kernel suite, and
/// the tests of tuning itself ask for it back with `DDL_NO_AUTOTUNE=0`.
pub fn ddl_command(exe: &str, dir: &std::path::Path) -> std::process::Command {
    let mut c = std::process::Command::new(exe);
    c.env("DDL_CACHE_DIR", dir.join("cache")).env("DDL_NO_AUTOTUNE", "1");
    c
}

/// `ddl train` flags of a model that trains a step in well under a second on lavapipe
/// (d 32, one block, B 2 × T 16, one evaluation batch).
pub const SMALL_MODEL_FLAGS: &[&str] = &[
    "--set",
    "model.d_model=32",
    "--set",
    "model.n_layers=1",
    "--set",
    "model.n_heads=2",
    "--set",
    "model.head_dim=16",
    "--set",
    "model.mlp_hidden=85",
    "--set",
    "train.batch_size=2",
    "--set",
    "train.seq_len=16",
    "--set",
    "train.eval_batches=1",
];

/// Writes the first 20,000 characters of TinyShakespeare (`assets/`) to `dir/corpus.txt`, a
/// corpus small enough to tokenise and train on in seconds; returns its path.
pub fn small_corpus(dir: &std::path::Path) -> String {
    let path = data_path("assets/tinyshakespeare.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let p = dir.join("corpus.txt");
    std::fs::write(&p, &text[..20_000]).expect("write the test corpus");
    p.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_fails_on_nan_and_on_large_error_and_passes_on_exact() {
        let want = [1.0, 2.0, 3.0];
        assert!(compare("x", &[1.0, 2.0, 3.0], &want).passes(1e-7));
        assert!(!compare("x", &[1.0, f32::NAN, 3.0], &want).passes(1e9));
        assert!(!compare("x", &[1.0, 2.1, 3.0], &want).passes(1e-3));
    }

    #[test]
    fn first_mismatches_are_listed_in_index_order() {
        let want = [1.0, 2.0, 3.0, 4.0, 5.0];
        let got = [1.0, 2.5, 3.0, f32::NAN, 9.0];
        let idx: Vec<usize> = first_mismatches(&got, &want, 1e-3, 2).iter().map(|m| m.0).collect();
        assert_eq!(idx, [1, 3]);
        assert!(first_mismatches(&[1.0, 2.0, 3.0, 4.0, 5.0], &want, 1e-6, 5).is_empty());
    }
}
