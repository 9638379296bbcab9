//! End to end: the real `ddl-viz` window under Xvfb opens a tiny checkpoint, generates a few
//! tokens and saves a screenshot, which must not be blank.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A virtual X display, killed on drop.
struct Xvfb {
    child: Child,
    display: String,
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        // SIGTERM lets Xvfb remove its lock file and socket; SIGKILL only if it does not exit.
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find_xvfb() -> PathBuf {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("Xvfb")).find(|p| p.is_file()))
        .unwrap_or_default()
        .unwrap_or_else(|| panic!("this test needs Xvfb (Debian package `xvfb`; run scripts/setup.sh)"))
}

/// Starts Xvfb on the first free display from :120 (no xauth needed, unlike xvfb-run).
fn start_xvfb(log: &Path) -> Xvfb {
    let bin = find_xvfb();
    let first = 120 + std::process::id() % 100;
    for n in first..first + 40 {
        if Path::new(&format!("/tmp/.X{n}-lock")).exists() {
            continue;
        }
        let mut child = Command::new(&bin)
            .arg(format!(":{n}"))
            .args(["-screen", "0", "1280x800x24", "-nolisten", "tcp"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(15) {
            if child.try_wait().unwrap().is_some() {
                break; // display taken (or Xvfb failed): try the next one
            }
            if Path::new(&format!("/tmp/.X11-unix/X{n}")).exists() {
                return Xvfb { child, display: format!(":{n}") };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("Xvfb did not start on any display: {}", std::fs::read_to_string(log).unwrap_or_default());
}

#[test]
fn the_window_generates_and_screenshots_under_xvfb() {
    let dir = common::tmpdir("window");
    let xvfb = start_xvfb(&dir.join("xvfb.log"));
    let ck = common::tiny_checkpoint(&dir);
    let shot = dir.join("shot.png");
    let xdg = dir.join("xdg");
    std::fs::create_dir_all(&xdg).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let img = screenshot(&ck, &[], &shot, &xvfb.display, &xdg);
    assert!(img.width() >= 800 && img.height() >= 500, "{}x{}", img.width(), img.height());
    let mut counts = std::collections::HashMap::new();
    for p in img.pixels() {
        *counts.entry(p.0).or_insert(0usize) += 1;
    }
    let most = counts.values().max().copied().unwrap_or(0) as f64 / (img.width() * img.height()) as f64;
    assert!(counts.len() > 50, "only {} distinct colours: a blank window", counts.len());
    assert!(most < 0.9, "one colour covers {:.0}% of the window", 100.0 * most);
    // The β map is drawn: some pixels are the projection green or another β colour.
    let beta_px = img
        .pixels()
        .filter(|p| {
            (0..=40).any(|i| {
                let c = ddl_viz::colors::beta_color(i as f32 / 20.0);
                (p.0[0] as i32 - c.r() as i32).abs() <= 2
                    && (p.0[1] as i32 - c.g() as i32).abs() <= 2
                    && (p.0[2] as i32 - c.b() as i32).abs() <= 2
            })
        })
        .count();
    assert!(beta_px > 500, "the β map is missing: {beta_px} β-coloured pixels");
    // The intervention flow: block 0's MLP forced to identity, both continuations generated and
    // shown in the Interventions view: the Δ log p strip's cell of the largest change has the
    // strip's full colour (no other view draws it).
    let shot2 = dir.join("intervene.png");
    let img =
        screenshot(&ck, &["--intervene", "block0.mlp:beta=0", "--tab", "interventions"], &shot2, &xvfb.display, &xdg);
    let strip = img
        .pixels()
        .filter(|p| {
            [ddl_viz::panels::interventions::DROP, ddl_viz::panels::interventions::RISE].iter().any(|c| {
                (p.0[0] as i32 - c.r() as i32).abs() <= 2
                    && (p.0[1] as i32 - c.g() as i32).abs() <= 2
                    && (p.0[2] as i32 - c.b() as i32).abs() <= 2
            })
        })
        .count();
    assert!(strip >= 40, "no Δ log p strip in the Interventions view: {strip} pixels of its colours");
}

/// Runs `ddl-viz` on the tiny checkpoint with `extra` arguments until it saved `shot` and exited;
/// returns the screenshot.
fn screenshot(ck: &Path, extra: &[&str], shot: &Path, display: &str, xdg: &Path) -> image::RgbaImage {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ddl-viz"))
        .arg("--checkpoint")
        .arg(ck)
        .args(["--prompt", "First Citizen:", "--generate", "8", "--width", "1100", "--height", "700"])
        .args(extra)
        .arg("--screenshot")
        .arg(shot)
        .arg("--exit-after-screenshot")
        .env_remove("WAYLAND_DISPLAY")
        .env("DISPLAY", display)
        .env("XDG_RUNTIME_DIR", xdg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting ddl-viz");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("ddl-viz did not exit within 180 s: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(status.success(), "ddl-viz failed ({status}): {stderr}");
    image::open(shot).unwrap_or_else(|e| panic!("no screenshot at {}: {e}; {stderr}", shot.display())).to_rgba8()
}

/// Without a display, or with one named that does not answer (a stale DISPLAY), the window
/// cannot open: exit status 1, and the message says so and how to run under a virtual display.
#[test]
fn without_a_display_the_error_says_to_run_under_one() {
    let dir = common::tmpdir("window-no-display");
    let run = |display: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ddl-viz"));
        c.current_dir(&dir).env_remove("WAYLAND_DISPLAY").env_remove("DISPLAY");
        if let Some(d) = display {
            c.env("DISPLAY", d);
        }
        let out = c.output().expect("starting ddl-viz");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{display:?}: {stderr}");
        assert!(
            stderr.contains("Run ddl-viz in a desktop session") && stderr.contains("xvfb-run -a ddl-viz"),
            "{stderr}"
        );
        stderr
    };
    assert!(run(None).contains("neither DISPLAY nor WAYLAND_DISPLAY is set"));
    // A display number no X server listens on (a test's Xvfb takes one of :120 to :259).
    let e = run(Some(":8997"));
    assert!(e.contains("the display (DISPLAY=:8997) does not answer"), "{e}");
    // winit's words without the place in its sources it names (a path on the building machine).
    assert!(e.contains("(winit: ") && !e.contains(".rs:") && !e.contains("registry"), "{e}");
}

/// Automation flags that cannot work are refused before a window opens (exit status 2, a message
/// naming the flag), and a screenshot never replaces a file that is not an earlier screenshot.
#[test]
fn bad_automation_flags_are_refused_before_the_window_opens() {
    let dir = common::tmpdir("window-flags");
    let refused = |args: &[&str], needle: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_ddl-viz"))
            .args(args)
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .output()
            .expect("starting ddl-viz");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: expected {needle:?} in {stderr}");
    };
    refused(&["--exit-after-screenshot"], "needs --screenshot");
    let photo = dir.join("photo.jpg");
    std::fs::write(&photo, "not mine").unwrap();
    refused(&["--screenshot", photo.to_str().unwrap()], "ending in .png");
    let notes = dir.join("notes.png");
    std::fs::write(&notes, "not an image").unwrap();
    refused(&["--screenshot", notes.to_str().unwrap()], "not a PNG image");
    assert_eq!(std::fs::read(&photo).unwrap(), b"not mine");
    assert_eq!(std::fs::read(&notes).unwrap(), b"not an image");
    refused(&["--screenshot", dir.join("no/such/x.png").to_str().unwrap()], "does not exist; create the folder first");
    refused(&["--width", "0"], "--width 0");
    refused(&["--height", "NaN"], "--height NaN");
    // Not a number, or a negative one after a space: what the flag takes (they were Rust's
    // "invalid float literal" and clap's "unexpected argument '-5'").
    refused(&["--width", "wide"], "expected a window size in points (e.g. 1280), got 'wide'");
    refused(&["--width", "-5"], "--width -5: expected a window size in points from 200");
    refused(&["--checkpoint", dir.to_str().unwrap(), "--generate", "100000000"], "at most");
    // Interventions: a spec of no form, and (with a checkpoint whose metadata reads) a block the
    // model does not have.
    refused(&["--checkpoint", dir.to_str().unwrap(), "--generate", "5", "--intervene", "foo"], "foo");
    // A malformed spec is named before the flags it also needs.
    refused(&["--intervene", "foo"], "foo");
    refused(&["--intervene", "block0.mlp:beta=0"], "--intervene needs --generate");
    let ck = common::tiny_checkpoint(&dir);
    let ck = ck.to_str().unwrap();
    refused(&["--checkpoint", ck, "--generate", "5", "--intervene", "block9.mlp:beta=0"], "block9");
    // β out of range without --allow-out-of-range (which takes an --intervene).
    refused(&["--checkpoint", ck, "--generate", "5", "--intervene", "block0.mlp:beta=5"], "--allow-out-of-range");
    refused(&["--checkpoint", ck, "--generate", "5", "--allow-out-of-range"], "--intervene");
    // A file where the screenshot's folder should be.
    refused(&["--screenshot", photo.join("x.png").to_str().unwrap()], "is a file, not a folder");
    // Paths that do not exist, a run that has saved no checkpoint yet, an empty prompt.
    let none = dir.join("no-such");
    let none = none.to_str().unwrap();
    // (Each says what the flag takes: it said "does not exist" alone.)
    refused(&["--checkpoint", none], "does not exist; give a checkpoint folder (the --out folder of `ddl train`");
    refused(&["--trace", none], "does not exist; give a trace file written by `ddl generate --trace FILE`");
    refused(&["--run", none], "does not exist; give a training run's folder");
    refused(&["--experiment", ck, "--experiment", none], "does not exist; give an experiment folder");
    // Of the wrong kind: said before the window (they were said in it, exit status 1 with
    // --exit-after-screenshot), as the window would say them.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let model = std::path::Path::new(ck).join("model.safetensors");
    refused(&["--trace", ck], "--trace: ");
    refused(&["--trace", ck], "is a folder: a trace is the .safetensors file");
    refused(&["--run", model.to_str().unwrap()], "is a file, not a folder; give a training run's folder");
    refused(&["--run", empty.to_str().unwrap()], "has no metrics.jsonl: not a training run directory");
    refused(&["--experiment", ck, "--experiment", model.to_str().unwrap()], "is a file, not a folder; give an");
    // An experiment folder given as the checkpoint: where it goes instead (it said only that the
    // folder holds no model.safetensors).
    let exp = dir.join("experiment");
    std::fs::create_dir_all(exp.join("runs/ddl-seed1")).unwrap();
    // Its runs keep no model (saved without their checkpoints): said, not advised as checkpoints.
    refused(&["--checkpoint", exp.to_str().unwrap()], "an experiment folder: open it with --experiment");
    refused(&["--checkpoint", exp.to_str().unwrap()], "none of its runs keeps a model.safetensors");
    // A run that keeps one is named as the checkpoint to give.
    let kept = exp.join("runs/ddl-seed2");
    std::fs::create_dir_all(&kept).unwrap();
    std::fs::copy(std::path::Path::new(ck).join("model.safetensors"), kept.join("model.safetensors")).unwrap();
    refused(&["--checkpoint", exp.to_str().unwrap()], &format!("(e.g. --checkpoint {})", kept.display()));
    let training = dir.join("training");
    std::fs::create_dir_all(&training).unwrap();
    std::fs::write(training.join("metrics.jsonl"), "").unwrap();
    refused(&["--checkpoint", training.to_str().unwrap()], "follows its training curves meanwhile");
    refused(&["--checkpoint", dir.to_str().unwrap()], "holds no model.safetensors");
    // The checkpoint's model file given for its folder (it was refused once the window was open).
    let file = std::path::Path::new(ck).join("model.safetensors");
    refused(
        &["--checkpoint", file.to_str().unwrap()],
        "is a file, not a checkpoint folder: give the folder that holds it",
    );
    refused(&["--checkpoint", ck, "--generate", "3", "--prompt", ""], "--prompt is empty");
    // A character the char model never saw is named before the window, as `ddl generate` does.
    refused(&["--checkpoint", ck, "--generate", "3", "--prompt", "ROMEO: ☃"], "'☃'");
}
