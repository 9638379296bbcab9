//! The browser end to end: the static site of `make web` (target/web, or DDL_WEB_DIR) served on
//! localhost, opened in headless Chromium (/usr/bin/chromium, or DDL_CHROMIUM) with WebGPU, driven
//! over the DevTools protocol. The page must load its demo checkpoint; the engine's logits in the
//! browser, teacher-forced over a fixed token sequence, must match the native engine's on the
//! same checkpoint; generation must produce tokens; the β map must show something (its pixels
//! vary). A checkpoint named by `?checkpoint=URL` on another origin must load when that server
//! allows it (CORS) and give a message in the page when it does not. Needs Chromium
//! (scripts/setup.sh test installs it) and the built site: it fails, never skips, when either is
//! missing.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{eval, handled, launch, launch_with, open, poll, request, serve, site, state, wait_for};
use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;

#[test]
fn the_page_loads_the_demo_matches_the_native_logits_generates_and_draws_the_beta_map() {
    let root = site();
    let port = serve(root.clone(), false);
    let browser = launch();
    let tab = open(&browser, &format!("http://127.0.0.1:{port}/index.html"));

    // The demo checkpoint loads on the page's WebGPU device.
    let s = wait_for(&tab, "the demo checkpoint to load", 180, |s| s["model"].is_object() && s["busy"] == false);
    eprintln!("loaded: {}", s["model"]);
    assert_eq!(s["model"]["variant"], "ddl");

    // Teacher-forced logits in the browser against the native engine on the same checkpoint.
    let bytes = std::fs::read(root.join("demo/model.safetensors")).unwrap();
    let gpu = ddl::testing::gpu();
    let (model, tok, _) = ddl::generate::load_for_inference_from_bytes(&gpu, "demo", &bytes).unwrap();
    let tokens = tok.encode("ROMEO:\nWhat light through yonder window breaks?").unwrap();
    let mut cache = model.decode_cache().unwrap();
    let mut p = model.decode_program(&cache, tokens.len()).unwrap();
    let native = p.forward(&model, &tokens, &mut cache).unwrap();
    let js = format!(
        "(async () => {{ try {{ const b = new Uint8Array(await (await fetch('demo/model.safetensors')).arrayBuffer()); \
         const l = await window.ddl.wasm.teacher_forced_logits(b, new Uint32Array({tokens:?})); \
         return JSON.stringify({{logits: Array.from(l)}}); }} catch (e) {{ return JSON.stringify({{error: String(e)}}); }} }})()"
    );
    let r: serde_json::Value = serde_json::from_str(eval(&tab, &js).as_str().expect("a JSON answer")).unwrap();
    assert!(r["error"].is_null(), "the browser's teacher-forced forward failed: {}", r["error"]);
    let web: Vec<f64> = serde_json::from_value(r["logits"].clone()).unwrap();
    assert_eq!(web.len(), native.len(), "logits: {} in the browser, {} native", web.len(), native.len());
    let want: Vec<f64> = native.iter().map(|&x| x as f64).collect();
    let web32: Vec<f32> = web.iter().map(|&x| x as f32).collect();
    let r = ddl::testing::compare("browser logits vs native", &web32, &want);
    eprintln!("{r}");
    // Both in f32 with different reduction orders (SwiftShader and the native adapter).
    assert!(r.passes(1e-4), "{r}");

    // Generation through the visualizer's worker.
    let n = request(&tab, "window.ddl.page.generate('ROMEO:', 12)");
    let s = wait_for(&tab, "12 generated tokens", 180, |s| {
        handled(s, n) && s["generated"].as_u64() >= Some(12) && s["busy"] == false
    });
    eprintln!("generated: {:?}", s["text"]);

    // The page as the browser composites it: the β map must show something.
    let t_views = Instant::now();
    let (n, out) = central_colours(&tab, &s, "beta-map");
    assert!(n > 20, "the β map's area has {n} colours (blank?); screenshot {}", out.display());

    // The other views of the generated tokens draw too.
    for view in ["Eigenvalue regimes", "k directions", "Write strength"] {
        let n = request(&tab, &format!("window.ddl.page.show({view:?})"));
        // The frame that handled the request drew the view (requests are handled before the UI).
        let s = wait_for(&tab, view, 60, |s| handled(s, n) && s["tab"] == view);
        let (n, out) = central_colours(&tab, &s, &view.replace(' ', "-"));
        assert!(n > 20, "the {view} view has {n} colours (blank?); screenshot {}", out.display());
    }

    eprintln!("views drawn in {:.1} s", t_views.elapsed().as_secs_f64());
    let t_compare = Instant::now();
    // The Interventions view: generation without and with interventions, and the change of the
    // original continuation's log-probabilities, which must match the native engine's.
    let specs = ["block0.attn:beta=0", "block1.mlp:k=mean"];
    let n = request(&tab, &format!("window.ddl.page.compare('ROMEO:', 12, {specs:?})"));
    let s =
        wait_for(&tab, "the comparison", 180, |s| handled(s, n) && s["comparison"].is_object() && s["busy"] == false);
    let c = &s["comparison"];
    eprintln!("compared in {:.1} s", t_compare.elapsed().as_secs_f64());
    let original: Vec<u32> = serde_json::from_value(c["original"].clone()).unwrap();
    let intervened: Vec<u32> = serde_json::from_value(c["intervened"].clone()).unwrap();
    let web_delta: Vec<f64> = serde_json::from_value(c["delta_logprob"].clone()).unwrap();
    assert_eq!((original.len(), intervened.len(), web_delta.len()), (12, 12, 12), "comparison {c}");
    let specs: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
    let iv = ddl::model::Interventions::parse(&specs, false).unwrap();
    let maps = iv.maps(&model.cfg).unwrap();
    let k_mean = iv.k_mean_targets(&model.cfg).unwrap();
    let prompt = tok.encode("ROMEO:").unwrap();
    let native_delta = ddl::generate::delta_logprobs(&model, &prompt, &original, maps, &k_mean).unwrap();
    let worst = web_delta.iter().zip(&native_delta).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    eprintln!("Δ log p under {}: browser {web_delta:.4?}, max |browser − native| {worst:.2e}", c["specs"]);
    assert!(worst < 1e-3, "Δ log p: browser {web_delta:?} vs native {native_delta:?}");
    assert!(web_delta.iter().any(|d| d.abs() > 1e-3), "the interventions changed nothing: {web_delta:?}");
    let (n, out) = central_colours(&tab, &s, "interventions");
    assert!(n > 20, "the Interventions view has {n} colours (blank?); screenshot {}", out.display());
}

/// A screenshot of the page (saved as `ddl-web-<name>.png` in $TMPDIR, the β map's also to
/// DDL_WEB_SCREENSHOT when set) and the number of colours in the central view's rectangle
/// (`state`'s `central`, in CSS pixels below the page's bar).
fn central_colours(tab: &headless_chrome::Tab, s: &serde_json::Value, name: &str) -> (usize, PathBuf) {
    std::thread::sleep(Duration::from_millis(500));
    let png = tab.capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true).unwrap();
    let img = image::load_from_memory(&png).unwrap().to_rgba8();
    let out = match std::env::var_os("DDL_WEB_SCREENSHOT") {
        Some(p) if name == "beta-map" => PathBuf::from(p),
        _ if name == "beta-map" => std::env::temp_dir().join("ddl-web-browser-test.png"),
        _ => std::env::temp_dir().join(format!("ddl-web-{name}.png")),
    };
    img.save(&out).unwrap();
    let top = eval(tab, "document.getElementById('canvas').getBoundingClientRect().top").as_f64().unwrap_or(0.0);
    let dpr = eval(tab, "window.devicePixelRatio").as_f64().unwrap_or(1.0);
    let c = s["central"].as_array().expect("the central view's rectangle");
    // egui points are CSS pixels here (the page does not zoom); the screenshot is in device pixels.
    let px = |v: &serde_json::Value, off: f64| ((v.as_f64().unwrap() + off) * dpr) as u32;
    let (x0, y0, x1, y1) = (px(&c[0], 0.0), px(&c[1], top), px(&c[2], 0.0), px(&c[3], top));
    assert!(
        x1 > x0 + 20 && y1 > y0 + 20 && x1 <= img.width() && y1 <= img.height(),
        "central rect {c:?} in {}x{}",
        img.width(),
        img.height()
    );
    let mut colours = std::collections::HashSet::new();
    for y in (y0..y1).step_by(3) {
        for x in (x0..x1).step_by(3) {
            colours.insert(img.get_pixel(x, y).0);
        }
    }
    (colours.len(), out)
}

/// `?checkpoint=URL` on another origin: the page loads it when that server allows the page to read
/// it (CORS), and says why in the page when it does not.
#[test]
fn a_checkpoint_url_on_another_origin_loads_with_cors_and_fails_with_a_message_without() {
    let root = site();
    let page = serve(root.clone(), false);
    // Another origin (another port) serving a checkpoint: one server allows any origin, one not.
    let models = std::env::temp_dir().join(format!("ddl-web-cors-{}", std::process::id()));
    std::fs::create_dir_all(&models).unwrap();
    std::fs::copy(root.join("demo/model.safetensors"), models.join("other.safetensors")).unwrap();
    let (open_port, closed_port) = (serve(models.clone(), true), serve(models.clone(), false));
    let browser = launch();

    let url = format!("http://127.0.0.1:{open_port}/other.safetensors");
    let tab = open(&browser, &format!("http://127.0.0.1:{page}/index.html?checkpoint={url}"));
    let s = wait_for(&tab, "the checkpoint from the other origin to load", 180, |s| {
        s["model"].is_object() && s["busy"] == false
    });
    assert_eq!(s["model"]["name"], url.as_str(), "the page opened {} instead of {url}", s["model"]);

    let url = format!("http://127.0.0.1:{closed_port}/other.safetensors");
    let tab = open(&browser, &format!("http://127.0.0.1:{page}/index.html?checkpoint={url}"));
    let errors = poll(&format!("an error in the page for {url}"), 180, |s| {
        *s = state(&tab);
        s["errors"].as_array().filter(|e| !e.is_empty()).cloned()
    });
    let shown = eval(&tab, "document.getElementById('msg').textContent");
    let all = format!("{errors:?} {shown}");
    assert!(all.contains(&url) && all.contains("CORS"), "the page's message should name the URL and CORS: {all}");
    assert!(state(&tab)["model"].is_null(), "no model should be open after a failed download");
    let _ = std::fs::remove_dir_all(&models);
}

/// Every shader variant through the browser's WGSL compiler (Tint in Chromium: stricter than
/// naga in places): a variant the form table may choose must never fail first in a user's page.
/// Modules only: building all pipelines too takes minutes in SwiftShader (the native test builds
/// them on lavapipe; `window.ddl.wasm.compile_every_shader(true)` does it in a page).
#[test]
fn every_shader_variant_compiles_with_the_browsers_wgsl_compiler() {
    let root = site();
    let port = serve(root, false);
    let browser = launch();
    let tab = open(&browser, &format!("http://127.0.0.1:{port}/index.html"));
    wait_for(&tab, "the page to start", 180, |s| s.is_object());
    let js = "(async () => { try { return await window.ddl.wasm.compile_every_shader(false); } \
              catch (e) { return JSON.stringify({error: String(e)}); } })()";
    let r: serde_json::Value = serde_json::from_str(eval(&tab, js).as_str().expect("a JSON answer")).unwrap();
    assert!(r["error"].is_null(), "the check could not run: {}", r["error"]);
    let list = |k: &str| r[k].as_array().cloned().unwrap_or_default();
    let (errors, skipped) = (list("errors"), list("skipped"));
    eprintln!(
        "browser compiler: {} modules, {} pipelines, {} skipped, {} warnings (features {})",
        r["modules"],
        r["pipelines"],
        skipped.len(),
        list("warnings").len(),
        r["features"]
    );
    for s in &skipped {
        eprintln!("  skipped {}", s.as_str().unwrap_or(""));
    }
    assert!(errors.is_empty(), "the browser's compiler rejected {} texts:\n{}", errors.len(), {
        errors.iter().map(|e| e.as_str().unwrap_or("").to_string()).collect::<Vec<_>>().join("\n")
    });
    // What no browser lacks: the f32 forms of every kernel.
    assert!(r["modules"].as_u64() >= Some(60), "only {} modules compiled; skipped {skipped:?}", r["modules"]);
}

/// Bad input is a message in the page, never a crash or a lost model: a file that is not a
/// checkpoint leaves the model open before it open (and generating), and a browser without WebGPU
/// is told what to use.
#[test]
fn a_bad_file_and_a_browser_without_webgpu_are_messages_in_the_page() {
    let root = site();
    let port = serve(root, false);
    let url = format!("http://127.0.0.1:{port}/index.html");
    let browser = launch();
    let tab = open(&browser, &url);
    wait_for(&tab, "the demo to load", 180, |s| s["model"].is_object() && s["busy"] == false);
    eval(&tab, "window.ddl.page.open('notes.safetensors', new TextEncoder().encode('not a checkpoint')); 0");
    let errors = poll_errors(&tab, "notes.safetensors");
    assert_eq!(errors.len(), 1, "one message for one bad file: {errors:?}");
    let e = errors[0].as_str().unwrap_or("");
    assert!(
        e.contains("notes.safetensors") && e.contains("stays open"),
        "the message should name the file and say the demo stays open: {e}"
    );
    // Still the demo, and it still generates.
    let s = state(&tab);
    assert_eq!(s["model"]["name"], "demo/model.safetensors", "after a bad file: {}", s["model"]);
    let n = request(&tab, "window.ddl.page.generate('ROMEO:', 4)");
    poll("generation after a bad file", 180, |s| {
        *s = state(&tab);
        assert_eq!(s["errors"].as_array().map(Vec::len), Some(1), "generating after a bad file: {}", s["errors"]);
        (handled(s, n) && s["generated"].as_u64() >= Some(4) && s["busy"] == false).then_some(())
    });

    // A browser whose WebGPU offers no adapter (switched off, as Chrome on Linux ships): the page
    // and its UI run (drawn with WebGL), and the UI says why no model opens.
    let browser = launch_with(false);
    let tab = open(&browser, &url);
    let errors = poll_errors(&tab, "no WebGPU adapter");
    let e = errors[0].as_str().unwrap_or("");
    assert!(e.contains("Chrome") && e.contains("enable-unsafe-webgpu"), "the message should say what to use: {e}");
    assert!(!e.contains("not requested"), "wgpu's list of native back ends means nothing in a browser: {e}");
    assert!(state(&tab)["model"].is_null());

    // A browser without the WebGPU API at all: the page's bar says so and nothing starts.
    let tab = browser.new_tab().unwrap();
    tab.call_method(headless_chrome::protocol::cdp::Page::AddScriptToEvaluateOnNewDocument {
        source: "Object.defineProperty(navigator, 'gpu', { get: () => undefined });".to_string(),
        world_name: None,
        include_command_line_api: None,
        run_immediately: None,
    })
    .unwrap();
    tab.navigate_to(&url).unwrap().wait_until_navigated().unwrap();
    let error = poll("a message in a browser without navigator.gpu", 60, |_| {
        eval(&tab, "window.ddl ? window.ddl.error : null").as_str().map(str::to_string)
    });
    assert!(error.contains("no WebGPU") && error.contains("Chrome"), "the message should say what to use: {error}");
    let shown = eval(&tab, "document.getElementById('msg').textContent");
    assert_eq!(shown.as_str(), Some(error.as_str()), "the page's bar should show the message");
}

/// The page opened as a file (target/web/index.html double-clicked): browsers load its module only
/// from a web server, and the bar says to serve the folder — where the failed import stopped the
/// page's script before anything showed (an empty canvas, no word). Needs Chromium only: the page
/// of web/static has no module beside it.
#[test]
fn a_page_opened_as_a_file_says_to_serve_its_folder() {
    let page = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("static/index.html");
    let browser = launch();
    let tab = open(&browser, &format!("file://{}", page.display()));
    let error = poll("a message in a page opened as a file", 30, |_| {
        eval(&tab, "window.ddl ? window.ddl.error : null").as_str().map(str::to_string)
    });
    assert!(error.contains("opened as a file") && error.contains("http.server"), "{error}");
    let shown = eval(&tab, "document.getElementById('msg').textContent");
    assert_eq!(shown.as_str(), Some(error.as_str()), "the page's bar should show the message");
}

/// The page's error messages once there are any that mention `needle` (within 180 s).
fn poll_errors(tab: &headless_chrome::Tab, needle: &str) -> Vec<serde_json::Value> {
    poll(&format!("a message naming {needle} in the page"), 180, |s| {
        *s = state(tab);
        s["errors"].as_array().filter(|e| e.iter().any(|m| m.as_str().is_some_and(|m| m.contains(needle)))).cloned()
    })
}
