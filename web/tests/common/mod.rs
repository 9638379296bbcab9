//! What the browser test and the browser benchmark share: the built site, a static server,
//! headless Chromium with WebGPU, and reading the page's state over the DevTools protocol.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use headless_chrome::{Browser, LaunchOptions, Tab};

/// The repository: the parent of this package's folder (`ddl::testing::package_dir`).
pub fn repo() -> PathBuf {
    ddl::testing::package_dir(env!("CARGO_MANIFEST_DIR"), "static").parent().unwrap().to_path_buf()
}

pub fn site() -> PathBuf {
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

/// Serves `root` on 127.0.0.1 (any free port) from a thread: GET of files only. With `cors`, every
/// answer allows any origin to read it (`Access-Control-Allow-Origin: *`).
pub fn serve(root: PathBuf, cors: bool) -> u16 {
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
                            "HTTP/1.1 200 OK\r\nContent-Type: {ct}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
                            body.len(),
                            if cors { "Access-Control-Allow-Origin: *\r\n" } else { "" }
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

pub fn chromium() -> PathBuf {
    let p = std::env::var_os("DDL_CHROMIUM").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        p.is_file(),
        "{}: no Chromium; install it (`scripts/setup.sh test` does: apt-get install chromium) or set DDL_CHROMIUM",
        p.display()
    );
    p
}

pub fn eval(tab: &Tab, js: &str) -> serde_json::Value {
    let r = tab.evaluate(js, true).unwrap_or_else(|e| panic!("evaluating {js}: {e}"));
    r.value.unwrap_or(serde_json::Value::Null)
}

/// Makes one of the page's requests (`window.ddl.page.generate(…)`, `compare`, `show`) and
/// returns its number: the state answers for it once its `handled` has reached that number.
pub fn request(tab: &Tab, js: &str) -> u64 {
    let n = eval(tab, js);
    n.as_f64().filter(|n| *n >= 1.0).unwrap_or_else(|| panic!("{js} returned {n}, not a request number")) as u64
}

/// Whether the state `s` is from a frame that has handled request `n` ([`request`]).
pub fn handled(s: &serde_json::Value, n: u64) -> bool {
    s["handled"].as_u64().is_some_and(|h| h >= n)
}

pub fn state(tab: &Tab) -> serde_json::Value {
    let s = eval(tab, "window.ddl && window.ddl.ready ? window.ddl.page.state() : ''");
    serde_json::from_str(s.as_str().unwrap_or("")).unwrap_or(serde_json::Value::Null)
}

/// Calls `f` every 200 ms until it gives a value, failing after `secs` with `what` and the last
/// state `f` saw (what it stores in its argument).
pub fn poll<T>(what: &str, secs: u64, mut f: impl FnMut(&mut serde_json::Value) -> Option<T>) -> T {
    let t0 = Instant::now();
    let mut last = serde_json::Value::Null;
    loop {
        if let Some(v) = f(&mut last) {
            return v;
        }
        assert!(t0.elapsed() < Duration::from_secs(secs), "{what}: not after {secs} s; state {last}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Polls `cond` on the page's state until it holds or `secs` pass; the page's errors fail it.
pub fn wait_for(tab: &Tab, what: &str, secs: u64, cond: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    poll(what, secs, |last| {
        let page_error = eval(tab, "window.ddl ? window.ddl.error : 'no window.ddl'");
        let log = eval(tab, "window.ddl && window.ddl.log ? window.ddl.log.join('\\n') : ''");
        assert!(page_error.is_null(), "the page failed: {page_error}\nconsole errors:\n{}", log.as_str().unwrap_or(""));
        *last = state(tab);
        if let Some(errs) = last.get("errors").and_then(|e| e.as_array()) {
            assert!(errs.is_empty(), "while waiting for {what}, the app reported: {errs:?}");
        }
        cond(last).then(|| last.clone())
    })
}

/// Headless Chromium with WebGPU on a machine without a GPU (SwiftShader through its Vulkan path).
pub fn launch() -> Browser {
    launch_with(true)
}

/// Headless Chromium with WebGPU on (SwiftShader), or with WebGPU switched off (`webgpu` false: a
/// browser without it, whose page must say so).
pub fn launch_with(webgpu: bool) -> Browser {
    let gpu_flags: &[&str] = if webgpu {
        &["--enable-unsafe-webgpu", "--enable-features=Vulkan,NetworkService,NetworkServiceInProcess"]
    } else {
        &[
            "--disable-blink-features=WebGPU",
            "--disable-features=WebGPU,WebGPUService",
            "--enable-features=NetworkService,NetworkServiceInProcess",
        ]
    };
    let args: Vec<&OsStr> = gpu_flags
        .iter()
        .chain(
            [
                "--disable-gpu-sandbox",
                "--use-angle=swiftshader",
                "--enable-unsafe-swiftshader",
                "--no-first-run",
                "--disable-component-update",
                "--disable-quic",
            ]
            .iter(),
        )
        .map(OsStr::new)
        .collect();
    Browser::new(
        LaunchOptions::default_builder()
            .path(Some(chromium()))
            .headless(true)
            .sandbox(false)
            .enable_gpu(true)
            .window_size(Some((1280, 800)))
            .idle_browser_timeout(Duration::from_secs(1800))
            .args(args)
            .build()
            .unwrap(),
    )
    .expect("starting headless Chromium")
}

/// A new tab of `browser` at `url`, navigated.
pub fn open(browser: &Browser, url: &str) -> std::sync::Arc<Tab> {
    let tab = browser.new_tab().unwrap();
    tab.set_default_timeout(Duration::from_secs(600));
    tab.navigate_to(url).unwrap().wait_until_navigated().unwrap();
    tab
}
