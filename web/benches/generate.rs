//! `make bench-web`: generation speed in the browser against the native engine on the same
//! machine. The site of `make web` is served on localhost and opened in headless Chromium (WebGPU;
//! on a machine without a GPU, SwiftShader); this process opens the same checkpoint on its native
//! adapter. Both run one procedure, [`ddl::generate::timed_generation`]: prefill a prompt (not
//! timed), then `--tokens` greedy tokens, with the visualizer's per-token traces (`trace`) and
//! without (`plain`). Blocks of four runs in the order native, browser, browser, native give one
//! paired ratio each (the slow drifts of a shared machine cancel); the report gives medians and a
//! distribution-free 95 % interval of the median ratio, and checks that both sides generated the
//! same tokens.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use serde_json::json;

#[derive(Parser)]
#[command(about = "Browser (WebGPU in headless Chromium) vs native generation speed, same machine, same checkpoint")]
struct Args {
    /// The checkpoint (`model.safetensors`; a relative path from the repository root, where
    /// `cargo bench` does not run); default: the site's demo checkpoint.
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// The prompt the generation starts from.
    #[arg(long, default_value = "ROMEO:")]
    prompt: String,
    /// Tokens generated (timed) per run; prompt + tokens must fit the model's context.
    #[arg(long, default_value_t = 48)]
    tokens: usize,
    /// Runs of the page's own visualizer generating (its worker, drawing as it goes), timed
    /// from outside the page; 0 skips them.
    #[arg(long, default_value_t = 3)]
    ui_runs: usize,
    /// Tokens per visualizer run (slow where the page draws in software).
    #[arg(long, default_value_t = 12)]
    ui_tokens: usize,
    /// Blocks of four runs (native, browser, browser, native) per mode; ≥ 6 for an interval.
    #[arg(long, default_value_t = 8)]
    blocks: usize,
    /// Also write the rows (JSON lines) to this file (relative: from the repository root).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) }
}

fn run(mut a: Args) -> Result<(), String> {
    // `cargo bench` runs in web/: relative paths are the repository root's.
    let repo = common::repo();
    a.checkpoint = a.checkpoint.map(|p| repo.join(p));
    a.out = a.out.map(|p| repo.join(p));
    if let Some(dir) = a.out.as_ref().and_then(|o| o.parent()).filter(|d| !d.is_dir()) {
        return Err(format!("--out: the folder {} does not exist; create it or choose another", dir.display()));
    }
    let root = common::site();
    let path = a.checkpoint.clone().unwrap_or_else(|| root.join("demo/model.safetensors"));
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;

    // Native: the adapter the CLI would pick (DDL_ADAPTER and friends apply).
    let opts = ddl::gpu::GpuOptions::from_env().map_err(|e| e.to_string())?;
    let gpu = ddl::gpu::Gpu::new(&opts).map_err(|e| format!("no native adapter: {e}"))?;
    let info = gpu.adapter.get_info();
    let native_adapter = format!("{} ({:?}, {})", info.name, info.backend, info.driver);
    let (model, tok, _) = ddl::generate::load_for_inference_from_bytes(&gpu, &path.display().to_string(), &bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let prompt = tok.encode(&a.prompt).map_err(|e| e.to_string())?;
    let ctx = model.cfg.max_seq_len;
    if prompt.is_empty() || prompt.len() + a.tokens > ctx {
        return Err(format!(
            "--prompt ({} tokens) + --tokens {} must be between 1 and the model's context of {ctx}: shorten one",
            prompt.len(),
            a.tokens
        ));
    }
    let t0 = Instant::now();
    let clock = move || t0.elapsed().as_secs_f64() * 1e3;
    let native = |trace: bool| -> Result<(Vec<u32>, f64), String> {
        ddl::gpu::now(ddl::generate::timed_generation(
            &model,
            &tok,
            &prompt,
            a.tokens,
            trace,
            ddl::gpu::Wait::Block,
            &clock,
        ))
        .map_err(|e| format!("native generation: {e}"))
    };

    // The browser: the site's page, its module's speed entry points.
    let port = common::serve(root.clone(), false);
    let browser = common::launch();
    let tab = common::open(&browser, &format!("http://127.0.0.1:{port}/index.html"));
    common::wait_for(&tab, "the page to start", 180, |s| s.is_object());
    let answer = |js: String| -> Result<serde_json::Value, String> {
        let r = common::eval(
            &tab,
            &format!(
                "(async () => {{ try {{ return JSON.stringify({{ok: await ({js})}}); }} catch (e) {{ return JSON.stringify({{error: String(e)}}); }} }})()"
            ),
        );
        let v: serde_json::Value = serde_json::from_str(r.as_str().unwrap_or("null")).map_err(|e| e.to_string())?;
        match v.get("error") {
            Some(e) => Err(format!("in the browser: {e}")),
            None => Ok(v["ok"].clone()),
        }
    };
    // The page fetches the demo from its own server, another checkpoint from a server of its
    // folder (allowing the page's origin).
    let url = match &a.checkpoint {
        None => "demo/model.safetensors".to_string(),
        Some(_) => {
            let dir = path.parent().map(|d| d.to_path_buf()).unwrap_or_else(|| PathBuf::from("."));
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            format!("http://127.0.0.1:{}/{name}", common::serve(dir, true))
        }
    };
    answer(format!(
        "(async () => {{ const b = new Uint8Array(await (await fetch('{url}')).arrayBuffer()); return await window.ddl.wasm.speed_open(b); }})()"
    ))?;
    // WebGPU hides the driver's name; the adapter's info and the browser say what ran.
    let browser_adapter = answer(
        "(async () => { const i = (await navigator.gpu.requestAdapter()).info || {}; \
         const v = (navigator.userAgent.match(/Chrom[a-z]*\\/[0-9.]+/) || [navigator.userAgent])[0]; \
         return `${[i.vendor, i.architecture, i.description].filter(x => x).join(' ') || 'unnamed adapter'} (WebGPU, ${v})`; })()"
            .to_string(),
    )
    .map(|v| v.as_str().map(str::to_string).unwrap_or_default())
    .unwrap_or_else(|e| format!("unnamed ({e})"));
    let web = |trace: bool| -> Result<(Vec<u32>, f64), String> {
        let r = answer(format!("window.ddl.wasm.speed_run(new Uint32Array({prompt:?}), {}, {trace})", a.tokens))?;
        let v: serde_json::Value = serde_json::from_str(r.as_str().unwrap_or("null")).map_err(|e| e.to_string())?;
        let toks: Vec<u32> = serde_json::from_value(v["tokens"].clone()).map_err(|e| e.to_string())?;
        Ok((toks, v["ms"].as_f64().unwrap_or(f64::NAN)))
    };

    eprintln!("native:  {native_adapter}\nbrowser: {}", browser_adapter);
    eprintln!(
        "{}: {} prompt tokens, {} generated per run, {} blocks per mode",
        path.display(),
        prompt.len(),
        a.tokens,
        a.blocks
    );
    let mut rows = Vec::new();
    for trace in [true, false] {
        let mode = if trace { "trace" } else { "plain" };
        // Warm-up (pipelines, first mappings), not timed.
        let (nt, _) = native(trace)?;
        let (bt, _) = web(trace)?;
        let same = nt == bt;
        let (mut nms, mut bms, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for b in 0..a.blocks.max(1) {
            let n0 = native(trace)?.1;
            let b1 = web(trace)?.1;
            let b2 = web(trace)?.1;
            let n3 = native(trace)?.1;
            nms.extend([n0, n3]);
            bms.extend([b1, b2]);
            ratios.push((b1 + b2) / (n0 + n3));
            eprintln!(
                "  {mode} block {}/{}: native {:.1} ms, browser {:.1} ms",
                b + 1,
                a.blocks,
                0.5 * (n0 + n3),
                0.5 * (b1 + b2)
            );
        }
        let mut sorted = ratios.clone();
        sorted.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let ci = ddl::bench::median_ci95(&sorted);
        let per_s = |ms: f64| a.tokens as f64 / ms * 1e3;
        let row = json!({
            "bench": "web_generate", "mode": mode, "checkpoint": path.display().to_string(),
            "variant": model.cfg.variant.name(), "prompt_tokens": prompt.len(), "tokens": a.tokens,
            "blocks": ratios.len(),
            "native_adapter": native_adapter, "browser_adapter": browser_adapter,
            "native_tok_per_s": per_s(median(&nms)), "browser_tok_per_s": per_s(median(&bms)),
            "native_best_tok_per_s": per_s(nms.iter().cloned().fold(f64::INFINITY, f64::min)),
            "browser_best_tok_per_s": per_s(bms.iter().cloned().fold(f64::INFINITY, f64::min)),
            "browser_over_native_time_median": median(&ratios),
            "browser_over_native_time_ci95": ci.map(|(lo, hi)| [lo, hi]),
            "same_tokens": same,
        });
        println!(
            "{mode:5}: native {:.1} tok/s, browser {:.1} tok/s; the browser takes {:.2}× the native time per token (median of {} blocks, 95 % CI {}); same tokens: {}",
            row["native_tok_per_s"].as_f64().unwrap(),
            row["browser_tok_per_s"].as_f64().unwrap(),
            median(&ratios),
            ratios.len(),
            ci.map(|(lo, hi)| format!("[{lo:.2}, {hi:.2}]")).unwrap_or_else(|| "n/a: fewer than 6 blocks".into()),
            if same { "yes" } else { "NO" },
        );
        rows.push(row);
    }
    // The visualizer as a user sees it: its worker generating while the page redraws as the tokens
    // arrive (egui through WebGL, at most 10 frames a second: app::worker::STREAM_REPAINT).
    // Timed from this process by polling the page's state every 50 ms.
    if a.ui_runs > 0 {
        common::wait_for(&tab, "the demo to load in the visualizer", 180, |s| {
            s["model"].is_object() && s["busy"] == false
        });
        let mut secs = Vec::new();
        for _ in 0..a.ui_runs + 1 {
            let t0 = Instant::now();
            let n = common::request(&tab, &format!("window.ddl.page.generate({:?}, {})", a.prompt, a.ui_tokens));
            let mut s;
            loop {
                std::thread::sleep(std::time::Duration::from_millis(50));
                s = common::state(&tab);
                // Not the previous run's state: the frame that started this one has been drawn.
                if common::handled(&s, n) && s["generated"].as_u64() >= Some(a.ui_tokens as u64) && s["busy"] == false {
                    break;
                }
                if t0.elapsed().as_secs() > 600 {
                    return Err(format!("the visualizer did not generate {} tokens in 600 s: {s}", a.ui_tokens));
                }
            }
            secs.push(t0.elapsed().as_secs_f64());
        }
        // The first run compiles the pipelines: not counted.
        let runs = &secs[1..];
        let row = json!({
            "bench": "web_generate", "mode": "visualizer", "checkpoint": path.display().to_string(),
            "variant": model.cfg.variant.name(), "tokens": a.ui_tokens, "runs": runs.len(),
            "browser_adapter": browser_adapter,
            "browser_tok_per_s": a.ui_tokens as f64 / median(runs),
            "seconds": runs,
        });
        println!(
            "visualizer: {:.2} tok/s in the page's own generation (its worker, the page redrawing as tokens arrive), median of {} runs of {} tokens ({:?} s)",
            row["browser_tok_per_s"].as_f64().unwrap(),
            runs.len(),
            a.ui_tokens,
            runs.iter().map(|x| (x * 10.0).round() / 10.0).collect::<Vec<_>>()
        );
        rows.push(row);
    }
    if let Some(out) = &a.out {
        let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
        // Whole or not at all: a temporary file renamed into place.
        let tmp = out.with_extension("jsonl.tmp");
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, out))
            .map_err(|e| format!("--out {}: {e}", out.display()))?;
    }
    if rows.iter().any(|r| r["same_tokens"] == false) {
        return Err("the browser and the native engine generated different tokens (greedy): a numerical difference to look into".into());
    }
    Ok(())
}
