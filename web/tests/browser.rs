//! The browser end to end: the static site of `make web` (target/web, or DDL_WEB_DIR) served on
//! localhost, opened in headless Chromium (/usr/bin/chromium, or DDL_CHROMIUM) with WebGPU, driven
//! over the DevTools protocol. The page must load its demo checkpoint; the engine's logits in the
//! browser, teacher-forced over a fixed token sequence, must match the native engine's on the
//! same checkpoint; generation must produce tokens; the β map must show something (its pixels
//! vary). Needs Chromium (scripts/setup.sh test installs it) and the built site: it fails, never
//! skips, when either is missing.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::{Browser, LaunchOptions, Tab};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn site() -> PathBuf {
    let dir = match std::env::var_os("DDL_WEB_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let target =
                std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo().join("target"));
            target.join("web")
        }
    };
    assert!(
        dir.join("index.html").is_file() && dir.join("pkg/ddl_web_bg.wasm").is_file(),
        "{}: no built site (index.html, pkg/ddl_web_bg.wasm); run `make web` first (or point DDL_WEB_DIR at one)",
        dir.display()
    );
    dir
}

/// Serves `root` on 127.0.0.1 (any free port) from a thread: GET of files only.
fn serve(root: PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let root = root.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(&stream);
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    return;
                }
                // Drain the headers.
                let mut h = String::new();
                while reader.read_line(&mut h).is_ok_and(|n| n > 2) {
                    h.clear();
                }
                let path = line.split_whitespace().nth(1).unwrap_or("/").split('?').next().unwrap_or("/").to_string();
                let rel = if path == "/" { "index.html".to_string() } else { path.trim_start_matches('/').to_string() };
                let file = root.join(&rel);
                let mut s = &stream;
                match (rel.contains(".."), std::fs::read(&file)) {
                    (false, Ok(body)) => {
                        let ct = match file.extension().and_then(|e| e.to_str()) {
                            Some("html") => "text/html; charset=utf-8",
                            Some("js") => "text/javascript",
                            Some("wasm") => "application/wasm",
                            _ => "application/octet-stream",
                        };
                        let _ = write!(
                            s,
                            "HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = s.write_all(&body);
                    }
                    _ => {
                        let _ = write!(s, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    }
                }
            });
        }
    });
    port
}

fn chromium() -> PathBuf {
    let p = std::env::var_os("DDL_CHROMIUM").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        p.is_file(),
        "{}: no Chromium; install it (`scripts/setup.sh test` does: apt-get install chromium) or set DDL_CHROMIUM",
        p.display()
    );
    p
}

fn eval(tab: &Tab, js: &str) -> serde_json::Value {
    let r = tab.evaluate(js, true).unwrap_or_else(|e| panic!("evaluating {js}: {e}"));
    r.value.unwrap_or(serde_json::Value::Null)
}

fn state(tab: &Tab) -> serde_json::Value {
    let s = eval(tab, "window.ddl && window.ddl.ready ? window.ddl.page.state() : ''");
    serde_json::from_str(s.as_str().unwrap_or("")).unwrap_or(serde_json::Value::Null)
}

/// Polls `cond` on the page's state until it holds or `secs` pass; the page's errors fail it.
fn wait_for(tab: &Tab, what: &str, secs: u64, cond: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let page_error = eval(tab, "window.ddl ? window.ddl.error : 'no window.ddl'");
        let log = eval(tab, "window.ddl && window.ddl.log ? window.ddl.log.join('\\n') : ''");
        assert!(page_error.is_null(), "the page failed: {page_error}\nconsole errors:\n{}", log.as_str().unwrap_or(""));
        let s = state(tab);
        if let Some(errs) = s.get("errors").and_then(|e| e.as_array()) {
            assert!(errs.is_empty(), "while waiting for {what}, the app reported: {errs:?}");
        }
        if cond(&s) {
            return s;
        }
        assert!(t0.elapsed() < Duration::from_secs(secs), "{what}: not after {secs} s; state {s}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_page_loads_the_demo_matches_the_native_logits_generates_and_draws_the_beta_map() {
    let root = site();
    let chrome = chromium();
    let port = serve(root.clone());
    // WebGPU on a machine without a GPU: Chromium's SwiftShader through its Vulkan path.
    let args: Vec<&OsStr> = [
        "--enable-unsafe-webgpu",
        "--enable-features=Vulkan,NetworkService,NetworkServiceInProcess",
        "--disable-gpu-sandbox",
        "--use-angle=swiftshader",
        "--enable-unsafe-swiftshader",
        "--no-first-run",
        "--disable-component-update",
        "--disable-quic",
    ]
    .iter()
    .map(OsStr::new)
    .collect();
    let browser = Browser::new(
        LaunchOptions::default_builder()
            .path(Some(chrome))
            .headless(true)
            .sandbox(false)
            .enable_gpu(true)
            .window_size(Some((1280, 800)))
            .idle_browser_timeout(Duration::from_secs(600))
            .args(args)
            .build()
            .unwrap(),
    )
    .expect("starting headless Chromium");
    let tab = browser.new_tab().unwrap();
    tab.set_default_timeout(Duration::from_secs(120));
    tab.navigate_to(&format!("http://127.0.0.1:{port}/index.html")).unwrap().wait_until_navigated().unwrap();

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
    eval(&tab, "window.ddl.page.generate('ROMEO:', 12)");
    let s = wait_for(&tab, "12 generated tokens", 180, |s| s["generated"].as_u64() >= Some(12) && s["busy"] == false);
    eprintln!("generated: {:?}", s["text"]);

    // The page as the browser composites it, the canvas below the page's bar.
    std::thread::sleep(Duration::from_millis(500));
    let png = tab.capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true).unwrap();
    let img = image::load_from_memory(&png).unwrap().to_rgba8();
    let out = std::env::var_os("DDL_WEB_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("ddl-web-browser-test.png"));
    img.save(&out).unwrap();
    let top = eval(&tab, "document.getElementById('canvas').getBoundingClientRect().top").as_f64().unwrap_or(0.0);
    let dpr = eval(&tab, "window.devicePixelRatio").as_f64().unwrap_or(1.0);
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
    assert!(
        colours.len() > 20,
        "the β map's area has {} colours (blank?); screenshot {}",
        colours.len(),
        out.display()
    );
}
