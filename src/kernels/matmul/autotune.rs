//! Autotune state: measured choices per (adapter, bucket), persisted as JSON.

use super::*;

static ENABLED: OnceLock<Mutex<bool>> = OnceLock::new();
static CACHE: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();

/// Turns measuring on or off for this process (off by default: the heuristic and earlier
/// measurements are used). The CLI enables it for training and benchmarks.
pub fn set_enabled(on: bool) {
    *ENABLED.get_or_init(|| Mutex::new(false)).lock().unwrap() = on;
}

pub fn enabled() -> bool {
    *ENABLED.get_or_init(|| Mutex::new(false)).lock().unwrap()
}

/// Says once per process, before the first measurement, what tuning does and what it costs.
pub(super) fn announce() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let at = cache_path().map(|p| p.display().to_string()).unwrap_or_else(|| "memory only".into());
    eprintln!(
        "tuning matmul tiles for this adapter (first use of these shapes: each product's tile variants are \
         timed once: seconds on a GPU; on a CPU adapter minutes, more for larger models (a GPT-2-small one takes \
         several); cached in {at}; --no-autotune skips it)"
    );
}

/// `matmul-autotune.json` in the cache directory ([`crate::cache_dir`]; none in the browser).
pub fn cache_path() -> Option<PathBuf> {
    cfg!(feature = "native").then(|| crate::cache_dir().join("matmul-autotune.json"))
}

pub(super) fn cache() -> &'static Mutex<HashMap<String, String>> {
    CACHE.get_or_init(|| {
        let Some(path) = cache_path() else { return Mutex::new(HashMap::new()) };
        let map = match std::fs::read_to_string(&path) {
            Ok(s) => serde_json::from_str(&s).unwrap_or_else(|e| {
                eprintln!(
                    "note: the matmul tile measurements in {} do not read ({e}); measuring again, they replace it",
                    path.display()
                );
                HashMap::new()
            }),
            Err(_) => HashMap::new(),
        };
        Mutex::new(map)
    })
}

/// Set once a measurement could not be written to the cache: later processes measure again.
static UNSAVED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether every measurement of this process reached the cache (what a run says when tuning ends).
pub fn kept() -> bool {
    !UNSAVED.load(std::sync::atomic::Ordering::Relaxed)
}

pub(super) fn save() {
    let Some(path) = cache_path() else { return };
    let map = cache().lock().unwrap().clone();
    // Atomic replace through a temporary file of its own per process and write: a crash never
    // leaves a half-written cache, and two writers (grids side by side, the threads of `ddl
    // experiment --jobs`) never rename each other's half. (A folder that cannot be made is said
    // as such: the write's own error would be "No such file or directory".)
    // (A file in the way, `DDL_CACHE_DIR` at a file, is named: the OS's words named none.)
    let written = match path.parent().map(std::fs::create_dir_all) {
        Some(Err(e)) => Err(format!(
            "cannot make its folder {}: {}",
            path.parent().unwrap_or(&path).display(),
            crate::why_not_written(&path, &e)
        )),
        _ => crate::train::checkpoint::write_atomic(
            &path,
            serde_json::to_string_pretty(&map).unwrap_or_default().as_bytes(),
        )
        .map_err(|e| crate::why_not_written(&path, &e)),
    };
    if let Err(e) = written {
        // Said once: the measurements stay in this process, and later ones measure again.
        if !UNSAVED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!(
                "warning: cannot write the matmul tile measurements to {}: {e}; later runs will measure again \
                 (set DDL_CACHE_DIR to a writable folder, or pass --no-autotune)",
                path.display()
            );
        }
    }
}

/// This process's measurements as bytes (JSON), for [`adopt`] in another process: a
/// data-parallel run's rank 0 measures, the other ranks take its choices instead of timing
/// tiles on the same adapter at the same time (which disturbs every measurement).
pub fn snapshot() -> Vec<u8> {
    serde_json::to_vec(&*cache().lock().unwrap()).unwrap_or_default()
}

/// Adds another process's measurements ([`snapshot`]) to this one's, in memory (entries of
/// another adapter are keyed by its name and stay unused here); bytes that do not read are
/// ignored (this process measures then, as without them).
pub fn adopt(bytes: &[u8]) {
    if let Ok(theirs) = serde_json::from_slice::<HashMap<String, String>>(bytes) {
        cache().lock().unwrap().extend(theirs);
    }
}

/// Times every variant on scratch buffers of this shape (random operands) and returns `(variant, ms)`, fastest
/// first. The heuristic's choice is timed first; a variant whose first timed run takes more
/// than 3× the best median so far is not repeated (the other kernel family is 10–50× slower
/// on some adapters, and repeating it would make tuning cost minutes).
pub fn measure(gpu: &Gpu, mm: &Matmul, reps: usize) -> Result<Vec<(&'static str, f64)>> {
    let [ea, eb, ec] = mm.extents();
    // Random operands, never zeros: a GPU can run a product of zeros faster than one of real data
    // (the device README saw 13 % on an H200).
    let mut rng = crate::testing::Rng::new(0x7a11);
    let a = Tensor::from_f32(gpu, "tune.a", &[ea], &rng.uniform(ea, -1.0, 1.0))?;
    let b = Tensor::from_f32(gpu, "tune.b", &[eb], &rng.uniform(eb, -1.0, 1.0))?;
    let c = Tensor::zeros(gpu, "tune.c", &[ec], crate::gpu::DType::F32)?;
    let first = heuristic(gpu, mm);
    let mut order = vec![first];
    order.extend(variants_for(gpu).into_iter().filter(|v| *v != first));
    let mut out: Vec<(&'static str, f64)> = Vec::new();
    let mut best = f64::INFINITY;
    for v in order {
        let d = mm.bind_variant(gpu, v, a.view(), b.view(), c.view())?;
        gpu.run(&[&d])?; // warm-up (pipeline compile, caches)
        let time_once = || -> Result<f64> {
            let mut r = Recorder::profiled(gpu);
            let t0 = Instant::now();
            r.record(&[&d]);
            let kt = r.submit()?;
            Ok(kt.first().map(|k| k.ns / 1e6).unwrap_or(t0.elapsed().as_secs_f64() * 1e3))
        };
        let mut times = vec![time_once()?];
        if times[0] <= 3.0 * best {
            for _ in 1..reps.max(1) {
                times.push(time_once()?);
            }
        }
        let med = crate::stats::median(&mut times);
        best = best.min(med);
        out.push((v, med));
    }
    out.sort_by(|x, y| x.1.total_cmp(&y.1));
    Ok(out)
}

/// Measures this shape's bucket now (regardless of [`enabled`]) and stores the winner. One
/// measurement at a time in a process: the runs of `ddl experiment --jobs` build their programs
/// at once, on devices of one adapter, and would time each other's tiles (and the same shapes N
/// times); a thread that waited finds the shape measured by the one before it.
pub fn tune(gpu: &Gpu, mm: &Matmul) -> Result<&'static str> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let key = cache_key(gpu, mm);
    if let Some(v) = cache().lock().unwrap().get(&key)
        && let Some(name) = variants_for(gpu).into_iter().find(|n| n == v)
    {
        return Ok(name);
    }
    let t0 = Instant::now();
    let best = measure(gpu, mm, 3)?[0].0;
    cache().lock().unwrap().insert(key, best.to_string());
    save();
    TUNED.with(|t| {
        let (n, s) = t.get();
        t.set((n + 1, s + t0.elapsed().as_secs_f64()));
    });
    Ok(best)
}

thread_local! {
    static TUNED: std::cell::Cell<(usize, f64)> = const { std::cell::Cell::new((0, 0.0)) };
}

/// The product shapes this thread has measured so far and the seconds that took: a command (a
/// run of `ddl experiment --jobs`) says what its first use cost once its programs are built.
pub fn tuned() -> (usize, f64) {
    TUNED.with(|t| t.get())
}
