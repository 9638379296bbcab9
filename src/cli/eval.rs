//! `ddl eval`'s flags.

use super::*;

/// `ddl eval`'s options.
#[derive(Args)]
pub(crate) struct EvalArgs {
    /// Checkpoint directory (a `ddl train --out` directory, or one of its kept checkpoints).
    #[arg(long)]
    pub(crate) checkpoint: std::path::PathBuf,
    /// Evaluate a text instead of the run's data: a UTF-8 file or a folder of .txt files,
    /// tokenised with the checkpoint's tokenizer, all of it.
    #[arg(long, conflicts_with = "data")]
    pub(crate) text: Option<std::path::PathBuf>,
    /// Evaluate token shards instead of the run's data: a folder (its validation shards, or
    /// its training shards with --split train), a shard file or a glob.
    #[arg(long)]
    pub(crate) data: Option<String>,
    /// How --data stores tokens: llmc (llm.c's shards) or raw-u16 (headerless uint16).
    #[arg(long, default_value = "llmc", requires = "data")]
    pub(crate) data_format: String,
    /// Which split of the run's data or of a --data folder: val, or train (as many tokens as
    /// the validation split has, unless --batches says otherwise).
    #[arg(long, value_enum, default_value = "val")]
    pub(crate) split: EvalSplit,
    /// Window length in tokens (default: the run's seq_len; at most the model's context).
    #[arg(long, allow_negative_numbers = true, value_parser = positive)]
    pub(crate) seq_len: Option<usize>,
    /// Windows per batch (default: the run's batch_size).
    #[arg(long, allow_negative_numbers = true, value_parser = positive)]
    pub(crate) batch_size: Option<usize>,
    /// Only the first this many batches of windows (default: all of the split or text).
    #[arg(long, allow_negative_numbers = true, value_parser = positive)]
    pub(crate) batches: Option<usize>,
    /// Also evaluate this checkpoint (same tokenizer) on the same windows, and the paired
    /// difference over batches: mean, 95 % t-interval, p.
    #[arg(long, value_name = "CHECKPOINT")]
    pub(crate) against: Option<std::path::PathBuf>,
    /// Also show, per sublayer, the mean β and the shares of the evaluated tokens its delta
    /// write treats as identity, projection or reflection.
    #[arg(long)]
    pub(crate) betas: bool,
    /// The LM head in slices of ROWS rows of a batch (default: the run's train.head_chunk; 0 =
    /// all at once): the same losses, with one slice's logits in memory instead of the batch's.
    #[arg(long, value_name = "ROWS", allow_negative_numbers = true, value_parser = count)]
    pub(crate) head_chunk: Option<usize>,
    /// Also evaluate the model under interventions on its writes (`ddl generate`'s specs except
    /// k=mean, e.g. block1.mlp:beta=0, all:erase=0; repeatable, applied in order) on the same
    /// windows, and the paired difference from the model as trained.
    #[arg(long = "intervene", value_name = "SPEC", conflicts_with_all = ["against", "ablate"])]
    pub(crate) intervene: Vec<String>,
    /// Allow --intervene values of β outside [0, 2] (and erase factors above 1).
    #[arg(long, requires = "intervene")]
    pub(crate) allow_out_of_range: bool,
    /// Also evaluate, for every sublayer in turn, the model with that sublayer's write ablated —
    /// `write` (β = 0), `erase` (its erased part kᵀX: erase=0) or `v` (its value: v=0); several
    /// comma-separated — on the same windows: per sublayer and part the paired difference from
    /// the model as trained, p after Holm over all of them.
    #[arg(long, value_enum, value_name = "PART", value_delimiter = ',', conflicts_with = "against")]
    pub(crate) ablate: Vec<EvalAblate>,
    /// With --ablate: a forest plot of the differences per sublayer (a .png file).
    #[arg(long, value_name = "FILE", requires = "ablate")]
    pub(crate) plot: Option<std::path::PathBuf>,
    /// A reliability diagram of the model's predictions (a .png file): per bin of the likeliest
    /// token's probability, how often that token came, against the bin's mean probability.
    #[arg(long, value_name = "FILE")]
    pub(crate) calibration_plot: Option<std::path::PathBuf>,
    /// A logit lens: the model's own head (its readout compressor where it has one, final norm,
    /// tied embedding) read on the state after the embedding and after every sublayer's write
    /// (of the model as trained), on the same windows: per state its loss, the change from the
    /// state before (paired over batches, 95 % t-interval), top-1 and top-5 accuracy, entropy.
    #[arg(long)]
    pub(crate) lens: bool,
    /// The logit lens as a plot (a .png file): loss and top-1 accuracy per state (implies --lens).
    #[arg(long, value_name = "FILE")]
    pub(crate) lens_plot: Option<std::path::PathBuf>,
    /// Write every evaluated token's loss to FILE, tab-separated with a header: index (the token's
    /// place among the evaluated tokens), token (its id), text (\t, \n, \r, \\ escaped), loss
    /// (nats), rank (1: the likeliest), top, top_text and top_logprob (the likeliest token), entropy
    /// (nats), with --betas each sublayer's β (beta_block0.attn, …), and with --intervene
    /// loss_intervened, with --against loss_against, with --ablate one loss_SPEC per sublayer and
    /// part, with --lens one loss_lens_STATE per state before the output (loss_lens_embedding, …).
    #[arg(long, value_name = "FILE")]
    pub(crate) per_token: Option<std::path::PathBuf>,
    /// One JSON object: loss, perplexity, tokens, bytes, bits_per_byte, windows, seq_len,
    /// batch_size, whole, uncounted, split, source, step, accuracy, top5_accuracy, entropy,
    /// calibration_error, calibration (with --betas: betas; with --against: against; with
    /// --intervene: intervened; with --ablate: ablate, ablations, and with --plot ablate_plot;
    /// with --per-token: per_token; with --calibration-plot: calibration_plot;
    /// with --lens: lens, and with --lens-plot lens_plot).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum EvalAblate {
    Write,
    Erase,
    V,
}

impl EvalArgs {
    /// What the library evaluates (a malformed --intervene spec refused here, before the
    /// adapter opens).
    pub(crate) fn request(self) -> Result<ddl::train::eval::EvalRequest, ddl::model::intervene::InterventionError> {
        use ddl::train::eval::{Ablate, EvalRequest, EvalSource, Split};
        let source = match (self.text, self.data) {
            (Some(t), _) => EvalSource::Text(t),
            (None, Some(data)) => EvalSource::Data { data, format: self.data_format },
            (None, None) => EvalSource::Run,
        };
        let split = if self.split == EvalSplit::Train { Split::Train } else { Split::Val };
        let (seq_len, batch_size, batches, betas, against, head_chunk) =
            (self.seq_len, self.batch_size, self.batches, self.betas, self.against, self.head_chunk);
        let intervene = if self.intervene.is_empty() {
            None
        } else {
            Some(ddl::model::Interventions::parse(&self.intervene, self.allow_out_of_range)?)
        };
        let mut ablate: Vec<Ablate> = Vec::new();
        for a in self.ablate {
            let part = match a {
                EvalAblate::Write => Ablate::Write,
                EvalAblate::Erase => Ablate::Erase,
                EvalAblate::V => Ablate::Value,
            };
            // (A part named twice is evaluated once.)
            if !ablate.contains(&part) {
                ablate.push(part);
            }
        }
        let (plot, per_token, calibration_plot) = (self.plot, self.per_token, self.calibration_plot);
        let lens = self.lens || self.lens_plot.is_some();
        let lens_plot = self.lens_plot;
        Ok(EvalRequest {
            source,
            split,
            seq_len,
            batch_size,
            batches,
            betas,
            against,
            head_chunk,
            intervene,
            ablate,
            plot,
            per_token,
            calibration_plot,
            lens,
            lens_plot,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum EvalSplit {
    Val,
    Train,
}
