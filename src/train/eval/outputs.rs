//! What `ddl eval` writes besides its text: the per-token table, the plots, and the checks of
//! their paths before anything runs.

use super::*;

/// What was evaluated, for a plot's title: a text, shards or the run's data by their file name
/// (a title stays short), and the split of the run's data.
pub(super) fn short_source(source: &str) -> String {
    // A quoted path anywhere (a text, or "the validation split of the run's corpus '…'"): its
    // file name, and the split where one is named (a long path made the plots' titles wider
    // than the picture).
    let (Some(a), Some(b)) = (source.find('\''), source.rfind('\'')) else { return source.to_string() };
    if b <= a {
        return source.to_string();
    }
    let inner = &source[a + 1..b];
    let name = Path::new(inner).file_name().map_or_else(|| inner.to_string(), |n| n.to_string_lossy().into_owned());
    let split = ["validation", "training"]
        .into_iter()
        .find(|s| source.starts_with(&format!("the {s} split")))
        .map(|s| format!(" ({s} split)"))
        .unwrap_or_default();
    format!("{name}{split}")
}

/// Refuses two of the outputs (`--plot`, `--per-token`, `--calibration-plot`, `--lens-plot`)
/// given the same file: the later written would replace the earlier, and the message would
/// name a file that holds something else.
pub(super) fn check_distinct_outputs(req: &EvalRequest) -> Result<(), TrainError> {
    let outputs: Vec<(&str, &Path)> = [
        ("--plot", &req.plot),
        ("--per-token", &req.per_token),
        ("--calibration-plot", &req.calibration_plot),
        ("--lens-plot", &req.lens_plot),
    ]
    .into_iter()
    .filter_map(|(flag, p)| p.as_deref().map(|p| (flag, p)))
    .collect();
    // The same file: by its real path where both exist, else by the absolute path as written.
    let key = |p: &Path| p.canonicalize().or_else(|_| std::path::absolute(p)).unwrap_or_else(|_| p.to_path_buf());
    for (i, (a, pa)) in outputs.iter().enumerate() {
        for (b, pb) in &outputs[i + 1..] {
            if key(pa) == key(pb) {
                return Err(TrainError::Settings(format!(
                    "{a} {} and {b} {} name the same file: each output needs a file of its own (the one \
                     written later would replace the other); give one of them another name",
                    pa.display(),
                    pb.display()
                )));
            }
        }
    }
    Ok(())
}

/// `--per-token`'s file, checked before any evaluation (the table is written whole at the end, or
/// not at all): not a folder, in a folder that exists and takes files, not inside a run's kept
/// checkpoints (the run prunes them), and absent or an earlier `--per-token` table (which it
/// replaces) — never a text, a checkpoint or a run's own file.
pub(super) fn check_per_token_path(path: &Path) -> Result<(), TrainError> {
    let bad = |why: String| TrainError::Settings(format!("--per-token '{}': {why}", path.display()));
    if path.is_dir() {
        return Err(bad("is a folder: give a file name (e.g. tokens.tsv)".into()));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(bad(format!(
            "the folder '{}' does not exist: make it first, or write the file elsewhere",
            parent.display()
        )));
    }
    if let Some(e) = crate::train::checkpoint::kept_refusal("--per-token", path) {
        return Err(TrainError::Settings(e));
    }
    if path.exists() && !is_per_token_table(path) {
        return Err(bad(
            "exists and is not a table `ddl eval --per-token` wrote, and writing would replace it; choose another \
             file name"
                .into(),
        ));
    }
    crate::train::checkpoint::probe_writable(path)
        .map_err(|e| bad(format!("cannot write there: {e}; choose a folder that takes files")))
}

/// Whether `path` begins with the header [`write_per_token`] writes.
pub(super) fn is_per_token_table(path: &Path) -> bool {
    use std::io::Read;
    pub(super) const HEAD: &[u8] = b"index\ttoken\ttext\tloss";
    let mut head = [0u8; HEAD.len() + 1];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok()
        && head.starts_with(HEAD)
        && matches!(head[HEAD.len()], b'\t' | b'\n')
}

/// A token's text in one tab-separated field: `\\`, `\t`, `\n` and `\r` escaped.
pub fn tsv_field(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// Writes `--per-token`'s table: a header, then per evaluated token its index among the
/// evaluated tokens (`index`: row i is token i + 1, the first being only read), id (`token`), text (`text`, escaped: [`tsv_field`]; a byte-level
/// token that is part of a character shows U+FFFD), the model's loss in nats (`loss`), its rank
/// among the model's predictions (`rank`: 1 = the likeliest), the likeliest token (`top`,
/// `top_text`) and its log p (`top_logprob`), the entropy of the prediction (`entropy`, nats:
/// `scores`), its β per sublayer (`betas`: `beta_NAME`), and each other run's loss (`columns`:
/// `loss_NAME`, the interventions, the other checkpoint, each ablation).
pub(super) fn write_per_token(
    path: &Path,
    tok: &crate::tokenizer::Tokenizer,
    ids: &[u32],
    loss: &[f32],
    scores: &[[f32; 4]],
    betas: &[(String, Vec<f32>)],
    columns: &[(String, Vec<f32>)],
) -> Result<(), TrainError> {
    use std::fmt::Write as _;
    let texts: Vec<String> =
        (0..tok.vocab_size() as u32).map(|id| tsv_field(&tok.decode(&[id]).unwrap_or_default())).collect();
    let mut out = String::from("index\ttoken\ttext\tloss\trank\ttop\ttop_text\ttop_logprob\tentropy");
    for (name, _) in betas {
        out.push_str("\tbeta_");
        out.push_str(name);
    }
    for (name, _) in columns {
        out.push_str("\tloss_");
        out.push_str(name);
    }
    out.push('\n');
    for (i, &id) in ids.iter().enumerate() {
        let text = texts.get(id as usize).map(String::as_str).unwrap_or("");
        let _ = write!(out, "{}\t{id}\t{text}\t{:.6}", i + 1, loss[i]);
        let [rank, top, top_logprob, entropy] = scores[i];
        let top = top as u32;
        let top_text = texts.get(top as usize).map(String::as_str).unwrap_or("");
        let _ = write!(out, "\t{}\t{top}\t{top_text}\t{top_logprob:.6}\t{entropy:.6}", rank as u32);
        for (_, b) in betas {
            let _ = write!(out, "\t{:.6}", b[i]);
        }
        for (_, c) in columns {
            let _ = write!(out, "\t{:.6}", c[i]);
        }
        out.push('\n');
    }
    crate::train::checkpoint::write_atomic(path, out.as_bytes())
        .map_err(|e| TrainError::Settings(format!("--per-token '{}': cannot write it: {e}", path.display())))
}

/// How `--plot`'s titles begin: an existing file is replaced only when it is such a plot.
pub(super) const ABLATION_PLOT_TITLE: &str = "loss change per sublayer";

/// How `--calibration-plot`'s titles begin: an existing file is replaced only when it is such a plot.
pub(super) const CALIBRATION_PLOT_TITLE: &str = "calibration of";

/// The start of `--lens-plot`'s title (what marks a plot it may replace).
pub(super) const LENS_PLOT_TITLE: &str = "logit lens of";

/// `--lens-plot`: loss and top-1 accuracy per state.
pub(super) fn plot_lens(path: &Path, title: &str, step: &str, rows: &[LensRow]) -> Result<(), TrainError> {
    let labels: Vec<String> = rows.iter().map(|r| r.state.clone()).collect();
    let loss = crate::train::plot::StatePanel {
        y_label: "loss (nats per token)".into(),
        values: rows.iter().map(|r| r.loss).collect(),
    };
    let acc = crate::train::plot::StatePanel {
        y_label: "top-1 accuracy (%)".into(),
        values: rows.iter().map(|r| 100.0 * r.accuracy).collect(),
    };
    let x = format!("the state the head reads: after the embedding, after {step} (last: the model's output)");
    crate::train::plot::state_plot(path, title, &x, &labels, &[loss, acc])
        .map_err(|e| TrainError::Settings(format!("--lens-plot '{}': {e}", path.display())))
}

/// `--calibration-plot`'s file, checked as `--plot`'s before any evaluation.
pub(super) fn check_calibration_plot_path(path: &Path) -> Result<(), TrainError> {
    crate::train::plot::check_png_out(
        "--calibration-plot",
        path,
        |t| t.starts_with(CALIBRATION_PLOT_TITLE),
        "`ddl eval --calibration-plot`",
    )
    .map_err(TrainError::Settings)
}

/// `--plot`'s file: a `.png` in a folder that exists, not a folder itself, absent or an earlier
/// `--plot` (checked before any evaluation; the plot is written whole or not at all).
pub(super) fn check_plot_path(path: &Path) -> Result<(), TrainError> {
    crate::train::plot::check_png_out("--plot", path, |t| t.starts_with(ABLATION_PLOT_TITLE), "`ddl eval --plot`")
        .map_err(TrainError::Settings)
}

/// The forest plot of `--ablate`: per sublayer, ablated − as trained with its 95 % t-interval,
/// filled where Holm's p is below 0.05.
pub(super) fn plot_ablations(path: &Path, parts: &[Ablate], rows: &[Ablation], batch: usize) -> Result<(), TrainError> {
    let pairs = rows.first().map_or(0, |a| a.vs.pairs);
    let rows: Vec<crate::train::plot::Interval> = rows
        .iter()
        .map(|a| {
            // (No spread: a point, no interval.)
            let (lo, hi) = a.vs.ci.filter(|_| !a.vs.no_spread).unwrap_or((f64::NAN, f64::NAN));
            crate::train::plot::Interval {
                label: if parts.len() > 1 { a.spec.clone() } else { a.sublayer.clone() },
                mean: a.vs.mean_paired_difference.unwrap_or(a.vs.difference),
                lo,
                hi,
                significant: a.p_holm.is_some_and(|p| p < 0.05),
            }
        })
        .collect();
    let title = match parts {
        [one] => format!("{ABLATION_PLOT_TITLE} {}", one.short()),
        _ => format!("{ABLATION_PLOT_TITLE} and part of its write removed"),
    };
    let x = if pairs >= 2 {
        format!(
            "ablated − as trained, nats per token (mean over {pairs} batches of {}, 95 % t-interval; filled: p < \
             0.05 after Holm)",
            crate::plural(batch, "window")
        )
    } else {
        "ablated − as trained, nats per token over all the tokens (no intervals: fewer than two full batches)".into()
    };
    crate::train::plot::interval_plot(path, &title, &x, &rows)
        .map_err(|e| TrainError::Settings(format!("--plot '{}': {e}", path.display())))
}
