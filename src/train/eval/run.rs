//! One model over the windows: the batches run, each state measured (loss, scores, β, the lens).

use super::*;

/// What [`run_model`] measures besides the loss.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Measure {
    /// The β tally per sublayer.
    pub(super) betas: bool,
    /// Every evaluated token's loss, in order.
    pub(super) rows: bool,
    /// Every token's scores (rank, likeliest token, its log p, entropy): accuracy, calibration.
    pub(super) scores: bool,
    /// The logit lens: the head over every earlier state (implies `scores`).
    pub(super) lens: bool,
}

/// What [`run_model`] measured.
pub(super) struct ModelRun {
    pub(super) eval: crate::train::Eval,
    /// Each batch's (mean loss, tokens).
    pub(super) losses: Vec<(f64, usize)>,
    pub(super) betas: BetaTally,
    /// With [`Measure::rows`]: every evaluated token's loss in order.
    pub(super) rows: Vec<f32>,
    pub(super) scores: Option<ScoreTally>,
    /// With [`Measure::lens`]: per state X_0 … X_2L−1, its tally.
    pub(super) lens: Vec<LensTally>,
}

/// One model over the windows of `span` (`what` says what it measures besides the loss; with
/// `maps`, under interventions on its writes). Shows progress (`label` names the model when
/// there are two).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_model(
    model: &Model,
    ds: &Dataset,
    t: &crate::train::TrainConfig,
    span: EvalSpan,
    windows: usize,
    what: Measure,
    label: &str,
    maps: Option<&[crate::kernels::delta::BetaMap]>,
) -> Result<ModelRun, TrainError> {
    run_model_in(model, ds, t, span, windows, what, label, maps).map_err(|e| match e {
        // A batch of windows whose buffers the adapter cannot bind: the batch that would fit.
        TrainError::Gpu(crate::gpu::GpuError::TooLarge { needed, max, .. }) => {
            let fits = (t.batch_size as u128 * max as u128 / needed.max(1) as u128) as usize;
            let fix = if fits >= 1 {
                format!("pass --batch-size {fits} or less")
            } else {
                "pass --batch-size 1 and a shorter --seq-len".to_string()
            };
            TrainError::Settings(format!(
                "a batch of {} windows of {} tokens does not fit adapter '{}': one of its buffers needs {needed} \
                 bytes, at most {max} can be bound; {fix}",
                t.batch_size, t.seq_len, model.gpu.info.name
            ))
        }
        e => e,
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run_model_in(
    model: &Model,
    ds: &Dataset,
    t: &crate::train::TrainConfig,
    span: EvalSpan,
    windows: usize,
    what: Measure,
    label: &str,
    maps: Option<&[crate::kernels::delta::BetaMap]>,
) -> Result<ModelRun, TrainError> {
    let Measure { betas, rows, scores, lens } = what;
    // (The head in the run's slices, or `--head-chunk`'s: the same loss, less memory.)
    use crate::model::Scoring;
    let scoring = if lens {
        Scoring::Lens
    } else if scores {
        Scoring::Ranks
    } else {
        Scoring::Loss
    };
    let prog = model.loss_program_with(t.batch_size, t.seq_len, t.head_chunk, maps, scoring)?;
    let mut tally = BetaTally { keep: rows, ..Default::default() };
    let mut score_tally = (scores || lens).then(|| ScoreTally { keep: rows, ..Default::default() });
    let mut lens_tally =
        vec![LensTally { keep: rows, ..Default::default() }; if lens { 2 * model.cfg.n_layers } else { 0 }];
    let mut losses = Vec::new();
    let mut token_losses = Vec::new();
    // A bar on a terminal; without one, a line at every tenth of a long evaluation.
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(indicatif::ProgressStyle::with_template(BAR).expect("a valid template"));
        b.set_prefix(label.trim().to_string());
        b
    });
    let mut last = 0;
    let b = t.batch_size;
    let mut failed = None;
    let e = crate::train::evaluate_sharded(model, &prog, ds, t, span, &crate::train::Single, &mut |k| {
        losses.push((k.loss, k.tokens));
        // The batch just run: its β and token losses, while the program still holds them.
        let live = (windows - (k.done - 1) * b).min(b);
        if betas
            && model.cfg.variant.is_ddl()
            && failed.is_none()
            && let Err(e) = tally.add(model, &prog, live)
        {
            failed = Some(e);
        }
        if let Some(st) = &mut score_tally
            && failed.is_none()
        {
            // (The scores evaluate_sharded read back for the accuracy: its live rows.)
            match k.scores {
                Some(l) => st.add(&l[..4 * live * t.seq_len]),
                None => failed = Some(crate::gpu::GpuError::Shape("a loss program without its token scores".into())),
            }
        }
        if lens && failed.is_none() {
            // Each state's live rows (the batch's first `live` windows).
            let (n, m) = (prog.b() * t.seq_len, live * t.seq_len);
            match prog.lens().map(|l| (l.loss.read_f32(&model.gpu), l.ranks.read_f32(&model.gpu))) {
                Some((Ok(l), Ok(r))) => {
                    for (s, st) in lens_tally.iter_mut().enumerate() {
                        st.add(&l[s * n..s * n + m], &r[4 * s * n..4 * (s * n + m)]);
                    }
                }
                Some((Err(e), _) | (_, Err(e))) => failed = Some(e),
                None => failed = Some(crate::gpu::GpuError::Shape("a loss program without its lens".into())),
            }
        }
        if rows && failed.is_none() {
            match prog.row_losses().map(|l| l.read_f32(&model.gpu)) {
                Some(Ok(l)) => token_losses.extend_from_slice(&l[..live * t.seq_len]),
                Some(Err(e)) => failed = Some(e),
                None => failed = Some(crate::gpu::GpuError::Shape("a loss program without its loss head".into())),
            }
        }
        match &bar {
            Some(bar) => {
                bar.set_length(k.of as u64);
                bar.set_position(k.done as u64);
            }
            None if k.next_tenth(&mut last) => eprintln!("evaluation: {label}batch {}/{}", k.done, k.of),
            None => {}
        }
        // Where Ctrl-C stops cleanly (a grid's ablations), it stops here; elsewhere `ddl eval`
        // ends at once on it and this stays false.
        !crate::train::interrupted()
    })?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if !e.complete {
        let what = match label.trim() {
            "" => "the evaluation".to_string(),
            l => format!("the evaluation ({l})"),
        };
        return Err(TrainError::Interrupted { what });
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    Ok(ModelRun { eval: e, losses, betas: tally, rows: token_losses, scores: score_tally, lens: lens_tally })
}
