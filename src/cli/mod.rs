//! The `ddl` command line's arguments (clap); `main.rs` dispatches them.

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use ddl::gpu::{BackendChoice, Gpu, GpuOptions};

mod bench;
mod data;
mod eval;
mod values;
pub(crate) use bench::{BenchCmd, MATMUL_CASES};
pub(crate) use data::{DataCmd, TokenizerCmd};
pub(crate) use eval::EvalArgs;
use values::*;

/// `ddl --help`: the commands grouped by task (a test checks that every command is listed).
const HELP: &str = "\
{about-with-newline}
{usage-heading} {usage}

Train and compare:
  train       Train a model: progress bar, metrics.jsonl, loss.png, checkpoints in --out
  eval        Loss, perplexity, bits per byte, accuracy and calibration of a checkpoint on its data, a text or shards; a logit lens
  experiment  A grid of runs (variants x seeds) and its report (report.md, plots)
  plot        Runs' curves in one picture (validation or training loss, |g|, lr, tok/s, β) and where each ended; an experiment's: each variant's mean

Generate:
  generate    Text from a checkpoint, streamed (--trace: what every delta write did; --logprobs: how likely each token was)
  chat        A conversation that keeps its context and caches (/set, /intervene, /undo, /help)

Check and measure:
  info        Adapters, features, limits, kernel forms; --preset: a memory plan; --checkpoint: a run or an experiment
  golden      Parity with the PyTorch float64 golden files, one row per tensor
  bench       Benchmarks: matmul, kernels, train, precision, generate, data, copy (--json for JSON lines)

Tools:
  data        Prepare token shards (llm.c's format) from text, folders and JSON lines; inspect a set; the --corpus shard cache
  tokenizer   Train a byte-level BPE tokenizer on a corpus, encode text with one, decode ids
  help        This message, or a command's options (`ddl help train`)

Options:
{options}
";

#[derive(Parser)]
#[command(
    name = "ddl",
    version,
    about = "Train, run and explain Deep Delta Learning language models on any GPU (wgpu)",
    help_template = HELP
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) device: DeviceArgs,
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

/// The help section of the device flags: global, so every command's help lists them, apart from
/// its own options (commands that run no kernels — data, tokenizer — ignore them).
const DEVICE_HEADING: &str = "Device (for commands that run kernels)";

#[derive(Args, Clone)]
pub(crate) struct DeviceArgs {
    /// Graphics backend: vulkan, metal, dx12 or gl (default: the best adapter of any).
    #[arg(long, global = true, help_heading = DEVICE_HEADING, env = "DDL_BACKEND")]
    pub(crate) backend: Option<String>,
    /// Adapter index (as `ddl info` lists them, with the same --backend: the indices count the
    /// adapters of that backend) or a name substring.
    #[arg(long, global = true, help_heading = DEVICE_HEADING, env = "DDL_ADAPTER", allow_negative_numbers = true)]
    pub(crate) adapter: Option<String>,
    /// Do not measure matmul tiles on first use (train, experiment, bench train): use earlier
    /// measurements and the heuristic choice. Results are the same bits either way. Also
    /// DDL_NO_AUTOTUNE=1 (e.g. in a shell profile, for every command).
    #[arg(long, global = true, help_heading = DEVICE_HEADING, env = "DDL_NO_AUTOTUNE", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) no_autotune: bool,
}

impl DeviceArgs {
    pub(crate) fn open(&self) -> Result<std::sync::Arc<Gpu>> {
        // A value that came from the environment (a shell profile, say) is named as such.
        let from_env = |var: &str, v: &str| {
            if std::env::var(var).is_ok_and(|e| e == v) {
                format!(" (from the environment variable {var}: unset it, or give the flag)")
            } else {
                String::new()
            }
        };
        if let Some(a) = self.adapter.as_deref()
            && a.trim().is_empty()
        {
            anyhow::bail!(
                "--adapter '{a}'{}: expected an adapter index or a name substring (`ddl info` lists them)",
                from_env("DDL_ADAPTER", a)
            );
        }
        let backend = self
            .backend
            .as_deref()
            .map(|b| BackendChoice::parse(b).map_err(|e| anyhow::anyhow!("{e}{}", from_env("DDL_BACKEND", b))))
            .transpose()?;
        let gpu = Gpu::new(&GpuOptions { backend, adapter: self.adapter.clone() }).map_err(|e| {
            // (Which of the choices came from the environment: a shell profile's, say.)
            let env: Vec<String> = [("DDL_BACKEND", self.backend.as_deref()), ("DDL_ADAPTER", self.adapter.as_deref())]
                .into_iter()
                .filter_map(|(var, v)| v.filter(|v| std::env::var(var).is_ok_and(|e| e == *v)).map(|v| format!("{var}={v}")))
                .collect();
            match e {
                ddl::gpu::GpuError::AdapterNotFound { .. } if !env.is_empty() => {
                    anyhow::anyhow!(
                        "{e}\nThe adapter was asked for by the environment ({}): unset it, or give --backend / --adapter",
                        env.join(", ")
                    )
                }
                e => anyhow::Error::from(e),
            }
        })?;
        if gpu.info.backend == wgpu::Backend::Gl && backend.is_none() && self.adapter.is_none() {
            eprintln!(
                "note: running on OpenGL ({}): no Vulkan, Metal or DX12 adapter was found. The engine is \
                 tested and tuned on those; on Linux without a GPU install Mesa's Vulkan driver \
                 (`make setup`, or apt install mesa-vulkan-drivers libvulkan1) for lavapipe.",
                gpu.info.name
            );
        }
        Ok(gpu)
    }
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Adapters found, the chosen one, its backend, driver, features and limits; with --preset,
    /// the model's parameter count and memory plan; with --checkpoint, what a run holds.
    Info {
        /// A model preset to plan: tiny, shakespeare-char, small-124m, medium-353m.
        #[arg(long)]
        preset: Option<String>,
        /// Describe a run folder or one of its kept checkpoints instead (no device opened): the
        /// model, tokenizer, steps and tokens trained, settings, data, losses, the best and kept
        /// checkpoints, file sizes. An experiment's folder: its runs, how far each is, the
        /// variants' mean losses, its report.
        #[arg(long, value_name = "DIR", conflicts_with = "preset")]
        checkpoint: Option<std::path::PathBuf>,
        /// The variant to plan: baseline, ddl_v1, ddl, ddl_ec, ddl_cc, ddl_ccec, ddl_v1_vmap, ddl_vmap.
        #[arg(long, value_parser = variant_name, default_value = "ddl", requires = "preset")]
        variant: String,
        /// A model setting of the plan over the preset's, as `ddl train --set` takes it
        /// (model.d_model=200, model.d_v=2, model.n_heads=3, model.vocab_size=50257 ...;
        /// repeatable): the memory of a run at that shape. The run's own settings are the flags
        /// --batch, --seq, --f16-state, --precision, --recompute and --head-chunk.
        #[arg(long = "set", value_name = "KEY=VALUE", requires = "preset")]
        sets: Vec<String>,
        /// Batch size of the plan (default: the preset's training value).
        #[arg(long, allow_negative_numbers = true, value_parser = sizes_up_to_2_24, requires = "preset")]
        batch: Option<usize>,
        /// Sequence length of the plan (default: the preset's training value).
        #[arg(long, allow_negative_numbers = true, value_parser = sizes_up_to_2_24, requires = "preset")]
        seq: Option<usize>,
        /// Plan the expanded states in half precision (`ddl train --f16-state`).
        #[arg(long, requires = "preset")]
        f16_state: bool,
        /// Plan this precision (`ddl train --precision`): f16 adds the parameters' f16 copy,
        /// stores the SwiGLU output in f16, and the states where the variant has them.
        #[arg(long, default_value = "f32", value_parser = precision, requires = "preset")]
        precision: ddl::model::Precision,
        /// Plan a run that recomputes (`ddl train --recompute`): one c, a, QK-norm output and ψ
        /// for all layers instead of one per layer.
        #[arg(long, requires = "preset")]
        recompute: bool,
        /// Plan a run whose LM head works in slices of this many rows (`ddl train
        /// --head-chunk`): one slice's logits instead of the batch's.
        #[arg(long, value_name = "ROWS", allow_negative_numbers = true, value_parser = count, default_value_t = 0, requires = "preset")]
        head_chunk: usize,
        /// Also print the largest batch of --seq tokens whose plan fits this much device memory
        /// (e.g. 80GB, 141GiB, 24GiB), for each way of storing the activations.
        #[arg(long, value_name = "SIZE", allow_hyphen_values = true, value_parser = memory_size, requires = "preset")]
        memory: Option<u64>,
        /// Write one JSON object instead of text: the adapters and the chosen one's description
        /// (features, limits, cooperative matrices, kernel forms), or with --preset the memory
        /// plan (and --memory's batches) and whether it fits the adapter, or with --checkpoint
        /// its description.
        #[arg(long)]
        json: bool,
    },
    /// Check the engine against PyTorch golden files (format ddl-golden-1): forward, backward,
    /// traces and AdamW steps, one row per compared tensor; exits non-zero on any failure.
    Golden {
        /// Golden files (e.g. tests/golden/*.safetensors); a folder stands for its .safetensors.
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
        /// Print only failing rows and the per-file summary.
        #[arg(long)]
        quiet: bool,
        /// Check with the expanded states in half precision (as `ddl train --f16-state` stores
        /// them) at their looser stated tolerances: the d_v = 4 files of ddl and ddl_vmap; the
        /// other files are skipped and named.
        #[arg(long)]
        f16_state: bool,
        /// f32, or f16: the linear layers and the tied LM head take f16 operands (f32
        /// accumulation) and the states are f16 where the variant has them, at the f16 tolerances.
        #[arg(long, default_value = "f32", value_parser = precision)]
        precision: ddl::model::Precision,
        /// Train the files' steps with the LM head in slices of this many rows (`ddl train
        /// --head-chunk`; 0 = all rows at once), at the f32 tolerances: the loss and the logits'
        /// gradient are the same bits, the embedding's gradient sums the slices' products.
        #[arg(long, value_name = "ROWS", allow_negative_numbers = true, value_parser = count, default_value_t = 0)]
        head_chunk: usize,
    },
    /// Train a model (headless): progress bar, metrics.jsonl, loss.png, checkpoints in --out.
    Train(TrainArgs),
    /// Run a grid of training runs (variants × seeds, shared settings) from a spec file, then
    /// write report.md, val_loss.png, comparisons.png and beta_regimes.png (and ablations.png where the spec
    /// has `ablate`) into --out. Resumable: finished runs are not re-run, an interrupted one continues from its
    /// checkpoint.
    Experiment {
        /// The spec (e.g. experiments/shakespeare.toml).
        #[arg(long)]
        spec: std::path::PathBuf,
        /// Output directory: one `ddl train` directory per run under runs/, and the report.
        #[arg(long)]
        out: std::path::PathBuf,
        /// Only rebuild the report from the runs finished so far.
        #[arg(long)]
        report_only: bool,
        /// Measure the report's speed section now, again if it was measured (each variant's
        /// training step against the baseline's in one process, at the grid's model and batch);
        /// without it, it is measured once, when the last run finishes.
        #[arg(long)]
        speed: bool,
        /// List the runs and their parameter counts, train nothing (neither a report nor a
        /// speed measurement: refused beside --report-only and --speed, which it would skip).
        #[arg(long, conflicts_with_all = ["report_only", "speed"])]
        dry_run: bool,
        /// Runs to train at once, each on its own device (another instance of the same adapter):
        /// for a machine one run leaves partly idle (a small model on a GPU, a CPU adapter's
        /// cores between dispatches). Each run's numbers are the same bits as one at a time; on a
        /// terminal each run has its own bar under the grid's, else its lines begin with its name.
        #[arg(long, allow_negative_numbers = true, value_parser = positive, default_value_t = 1)]
        jobs: usize,
    },
    /// Loss, perplexity, bits per byte, accuracy and calibration of a checkpoint: its run's
    /// validation split, another text or shards; β per sublayer; a logit lens; against another
    /// checkpoint, under interventions, with each write ablated.
    Eval(EvalArgs),
    /// One metric of several runs as curves in one PNG, from their metrics.jsonl (no device), and
    /// a table of where each ended: last step and tokens, training loss (mean of the last tenth of
    /// the logged steps), the validation curve's last and best points, the whole split's loss. An
    /// experiment's folder gives one curve per variant: the mean over its seeds, a min..max band.
    Plot {
        /// Run folders (`ddl train --out`), or experiments' (`ddl experiment --out`: one curve per
        /// variant, mean ± sd over its runs in the table; its runs/* for each run's own curve).
        #[arg(required = true)]
        runs: Vec<std::path::PathBuf>,
        /// The picture (.png); an existing file only when `ddl plot` drew it.
        #[arg(long)]
        out: std::path::PathBuf,
        /// val (the validation curve: the windows every evaluation covers), val_accuracy (its
        /// top-1 accuracy over the same windows), train, grad_norm, lr, tok_per_s, or beta (one
        /// run: each delta write's mean β; several: each run's mean over its writes).
        #[arg(long, default_value = "val")]
        metric: String,
        /// The x axis: step, tokens (from each run's config.toml) or seconds (of training).
        #[arg(long, default_value = "step")]
        x: String,
        /// Each point the mean of the last N logged steps (not for val, val_accuracy).
        #[arg(long, allow_negative_numbers = true, value_parser = positive, default_value_t = 1)]
        smooth: usize,
        /// The table as one JSON object (with the picture's path) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Generate text from a checkpoint with the KV and conv caches, streaming tokens to stdout.
    Generate {
        /// A run folder (its checkpoint and tokenizer), or one of its kept checkpoints.
        #[arg(long)]
        checkpoint: std::path::PathBuf,
        /// The prompt; `-` reads it from standard input (a prompt may start with `-`: `--prompt
        /// "- item"`).
        #[arg(long, allow_hyphen_values = true)]
        prompt: String,
        #[command(flatten)]
        sampling: SamplingArgs,
        /// Write a per-token trace of every delta write (safetensors + a JSON summary).
        #[arg(long)]
        trace: Option<std::path::PathBuf>,
        /// Refuse a prompt longer than the model's context instead of keeping its last part.
        #[arg(long)]
        strict_context: bool,
        /// Intervene on the delta writes while generating: TARGET:ACTION, TARGET `all`, `blockN`,
        /// `blockN.attn` or `blockN.mlp`, ACTION `beta=V` (0 identity, 1 projection, 2
        /// reflection), `beta*=S`, `beta<=V`, `beta>=V`, `write=0` (no write), `k=mean` (the
        /// direction fixed to the prompt's mean k), `erase=0` (X + βkvᵀ: nothing erased) or `v=0`
        /// ((I − βkkᵀ)X: no value written), `erase*=S`, `v*=S`; repeatable, applied in order.
        #[arg(long = "intervene", value_name = "SPEC")]
        intervene: Vec<String>,
        /// Allow --intervene values of β outside [0, 2] (and erase factors above 1).
        #[arg(long, requires = "intervene")]
        allow_out_of_range: bool,
        /// With --intervene: generate with and without the interventions (same seed), show both
        /// continuations, where they first differ, and the log-probability change of each token of
        /// the original continuation under the interventions (teacher-forced).
        #[arg(long)]
        compare: bool,
        /// Continuations to sample from the prompt, one after another (from two on, each headed
        /// by its seed): the i-th is exactly what `--seed` + i − 1 gives alone. More than one is
        /// refused with --temperature 0, --trace and --compare.
        #[arg(long, allow_negative_numbers = true, value_parser = positive, default_value_t = 1)]
        samples: usize,
        /// After each continuation, a table of its tokens: each one's log-probability and rank
        /// under the model (its softmax at temperature 1, before the sampling's penalty and
        /// filters) and the N most likely tokens at its place (0: none, only the token's own).
        #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = count, conflicts_with = "compare")]
        logprobs: Option<usize>,
        /// With --logprobs: first a table of the prompt's own tokens, each scored as the model
        /// predicts it from the ones before it (in the contexts generation would give them); with
        /// --json as `prompt_logprobs`.
        #[arg(long, requires = "logprobs")]
        score_prompt: bool,
        /// After each continuation, a logit lens of its tokens: each one's probability under the
        /// model's own head read on the state after the embedding and after each sublayer's write
        /// (teacher-forced, in the contexts generation gave it; --json: `lens`, with each state's
        /// rank, likeliest token and entropy).
        #[arg(long, conflicts_with = "compare")]
        lens: bool,
        /// Each continuation as one line of JSON instead of streamed text: prompt, seed, text, token
        /// ids, why it stopped (length, stop_text, end_of_text, interrupted) and, with --logprobs, the scores
        /// (with --lens, the lens).
        #[arg(long, conflicts_with = "compare")]
        json: bool,
    },
    /// Interactive generation that keeps the context (and its caches) across turns (/reset,
    /// /undo, /retry, /set NAME VALUE, /settings, /intervene SPEC, /save FILE, /help, /quit).
    Chat {
        /// A run folder (its checkpoint and tokenizer), or one of its kept checkpoints.
        #[arg(long)]
        checkpoint: std::path::PathBuf,
        #[command(flatten)]
        sampling: SamplingArgs,
        /// Write the trace of the whole conversation (every token read: lines and replies) after
        /// each turn, in `ddl generate --trace`'s format.
        #[arg(long)]
        trace: Option<std::path::PathBuf>,
        /// Chat with the model under interventions on its writes (`ddl generate --intervene`'s
        /// specs, e.g. block1.mlp:beta=0, all:erase=0; repeatable, applied in order); `/intervene
        /// SPEC` adds one during the chat, `/intervene none` ends them.
        #[arg(long = "intervene", value_name = "SPEC")]
        intervene: Vec<String>,
        /// Allow intervention values of β outside [0, 2] (and erase factors above 1), from the
        /// command line and from /intervene.
        #[arg(long)]
        allow_out_of_range: bool,
        /// After each reply, a table of its tokens: log-probability and rank under the model and
        /// the N most likely tokens at each place (`ddl generate --logprobs`; /set logprobs N|off).
        #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = count)]
        logprobs: Option<usize>,
    },
    /// Benchmarks (results as a table, or JSON lines with --json).
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Byte-level BPE tokenizers: train one on a corpus, encode text with one, decode its ids.
    #[command(subcommand)]
    Tokenizer(TokenizerCmd),
    /// Token shards for `ddl train --data` (prepare, inspect), and the shard cache of `ddl train
    /// --corpus`.
    #[command(subcommand)]
    Data(DataCmd),
}

#[derive(Args, Clone)]
pub(crate) struct SamplingArgs {
    /// Tokens to generate at most (at least 1).
    #[arg(long, allow_negative_numbers = true, value_parser = positive, default_value_t = 200)]
    pub(crate) max_tokens: usize,
    /// 0 = greedy.
    #[arg(long, allow_negative_numbers = true, value_parser = sampling_number, default_value_t = 0.8)]
    pub(crate) temperature: f32,
    /// Keep the k most likely tokens (0 = all).
    #[arg(long, allow_negative_numbers = true, value_parser = count, default_value_t = 0)]
    pub(crate) top_k: usize,
    /// Nucleus sampling: keep the most likely tokens up to this probability mass.
    #[arg(long, allow_negative_numbers = true, value_parser = sampling_number, default_value_t = 1.0)]
    pub(crate) top_p: f32,
    /// Min-p sampling: keep the tokens at least this fraction as likely as the most likely one
    /// (0 = off; applied after --top-k and the temperature, before --top-p).
    #[arg(long, allow_negative_numbers = true, value_parser = sampling_number, default_value_t = 0.0)]
    pub(crate) min_p: f32,
    /// Penalise tokens already in the context (1 = off).
    #[arg(long, allow_negative_numbers = true, value_parser = sampling_number, default_value_t = 1.0)]
    pub(crate) repetition_penalty: f32,
    /// Seed of the sampler: the same seed, settings and prompt give the same text.
    #[arg(long, allow_negative_numbers = true, value_parser = whole_u64, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Stop right after the output first contains this text, which is printed (also inside a
    /// token's text: a BPE token may hold several characters); repeatable. `\n` is a newline,
    /// `\t` a tab, `\s` a space, `\\` a backslash (as in chat's `/set stop`); any other
    /// backslash is refused.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) stop: Vec<String>,
}

impl SamplingArgs {
    pub(crate) fn sampler(&self) -> Result<ddl::generate::SamplerConfig> {
        let s = ddl::generate::SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repetition_penalty,
            seed: self.seed,
        };
        s.validate().map_err(anyhow::Error::msg)?;
        if self.stop.iter().any(String::is_empty) {
            anyhow::bail!("--stop \"\": a stop text must not be empty (it would stop nothing)");
        }
        self.stops()?;
        Ok(s)
    }

    /// The `--stop` texts as meant (`\n` a newline: [`ddl::generate::unescape_stop`]), or the
    /// first one with an escape there is not.
    pub(crate) fn stops(&self) -> Result<Vec<String>> {
        self.stop.iter().map(|s| ddl::generate::unescape_stop(s).map_err(|e| anyhow::anyhow!("--stop {e}"))).collect()
    }
}

#[derive(Args)]
pub(crate) struct TrainArgs {
    /// Model and schedule preset: tiny, shakespeare-char, small-124m, medium-353m [default: tiny,
    /// or what --config names; with --resume or --init-from, that run's].
    #[arg(long)]
    pub(crate) preset: Option<String>,
    /// baseline, ddl_v1, ddl, ddl_ec, ddl_cc, ddl_ccec, ddl_v1_vmap, ddl_vmap [default: ddl, or
    /// what --config names; with --resume or --init-from, that checkpoint's].
    #[arg(long, value_parser = variant_name)]
    pub(crate) variant: Option<String>,
    /// Stop after this step (the schedule's length is train.decay_steps) [default: 200; with
    /// --resume, the --steps the run was last given].
    #[arg(long, allow_negative_numbers = true, value_parser = positive)]
    pub(crate) steps: Option<usize>,
    /// Train until the run has seen this many tokens, instead of --steps: the step where it has
    /// (tokens ÷ the global batch's tokens, batch_size × seq_len × grad_accum, rounded up); 5M,
    /// 2.5B (k, M, G or B: powers of 1000), 1e9. Counted from step 0, as --steps (`--dry-run`
    /// shows the step).
    #[arg(long, allow_negative_numbers = true, value_parser = token_count, conflicts_with = "steps")]
    pub(crate) tokens: Option<u64>,
    /// Train for this many passes over the training split, instead of --steps: the step where the
    /// run has seen epochs × the split's tokens (÷ the global batch's tokens, rounded up); 1, 2.5.
    /// A corpus not yet tokenised is tokenised (and cached, as the run would) before the run opens
    /// the device to count them (`--dry-run` shows the step).
    #[arg(long, allow_negative_numbers = true, value_parser = epochs, conflicts_with_all = ["steps", "tokens"])]
    pub(crate) epochs: Option<f64>,
    /// Seed of the initialisation and the batch order (0 to 2^63 − 1) [default: 1337,
    /// `train.seed`].
    #[arg(long, allow_negative_numbers = true, value_parser = run_seed)]
    pub(crate) seed: Option<u64>,
    /// A TOML file with [model] / [train] tables and `corpus`.
    #[arg(long)]
    pub(crate) config: Option<std::path::PathBuf>,
    /// A setting: train.lr=3e-4, model.d_v=2, batch_size=16 ... (every key: docs/TRAINING.md,
    /// "Every setting"; a run folder's config.toml holds them all).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) sets: Vec<String>,
    /// A UTF-8 text file or a directory of .txt files [default: assets/tinyshakespeare.txt,
    /// also built into the binary].
    #[arg(long)]
    pub(crate) corpus: Option<String>,
    /// `char` [default], or a tokenizer.json (e.g. from `ddl tokenizer train`; with --data: the
    /// one the shards were made with, when they have no meta.json, e.g. GPT-2's for llm.c's
    /// shards).
    #[arg(long)]
    pub(crate) tokenizer: Option<String>,
    /// Train on token shards instead of --corpus: a folder (`ddl data prepare`'s, or llm.c's
    /// downloaded NAME_train_*.bin / NAME_val_*.bin) or a glob; read by memory map.
    #[arg(long, conflicts_with = "corpus")]
    pub(crate) data: Option<String>,
    /// How --data stores tokens: llmc (llm.c's shards, the default) or raw-u16 (headerless
    /// uint16: nanoGPT's train.bin and val.bin).
    #[arg(long)]
    pub(crate) data_format: Option<String>,
    /// Output directory (a new one, or one without a run: see --resume and --overwrite).
    #[arg(long, required_unless_present = "resume")]
    pub(crate) out: Option<std::path::PathBuf>,
    /// Continue the run in this folder exactly where its checkpoint stopped (with --out NEW: a
    /// copy of it, or of one of its kept checkpoints, continues in NEW).
    #[arg(long)]
    pub(crate) resume: Option<std::path::PathBuf>,
    /// Start a new run from this checkpoint's parameters (a run folder or one of its kept
    /// checkpoints), with its model and tokenizer: fine-tuning, with fresh AdamW moments, a
    /// schedule from step 0 and this run's own settings and data. Of the model, --set may change
    /// model.label_smoothing, model.max_seq_len and model.rope_base (a longer context).
    #[arg(long, value_name = "CHECKPOINT", conflicts_with = "resume")]
    pub(crate) init_from: Option<std::path::PathBuf>,
    /// Replace the run that --out holds (its checkpoint, settings and metrics) instead of refusing.
    #[arg(long, conflicts_with = "resume")]
    pub(crate) overwrite: bool,
    /// Skip steps whose loss or gradients are not finite instead of stopping.
    #[arg(long)]
    pub(crate) skip_nonfinite: bool,
    /// Store the expanded states in half precision (train.state_f16): half their activation
    /// memory, every sum still f32; ddl and ddl_vmap at d_v = 4 on adapters with SHADER_F16.
    #[arg(long)]
    pub(crate) f16_state: bool,
    /// f32, or f16 (train.precision): the linear layers and the tied LM head take f16 operands
    /// with f32 accumulation (the logits and the loss stay f32), dynamic loss scaling
    /// (train.loss_scale, train.loss_scale_growth), f16 states where the variant has them;
    /// master weights, gradients and AdamW moments stay f32. Needs SHADER_F16.
    #[arg(long, value_parser = precision)]
    pub(crate) precision: Option<ddl::model::Precision>,
    /// Rebuild cheap activations in the backward instead of keeping one per layer
    /// (train.recompute): each sublayer's normed input c (and compressed input a), the QK
    /// norms' outputs and the SwiGLU output ψ are kept once for all layers and recomputed by
    /// the forward's own kernels before the backward reads them. The same losses, gradients and
    /// weights to the bit, in less memory (`ddl info --preset P --recompute` says how much), for
    /// one more norm or elementwise pass per sublayer. May be added when a run resumes.
    #[arg(long)]
    pub(crate) recompute: bool,
    /// Compute the tied LM head in slices of ROWS rows of the batch (train.head_chunk; 0 = all
    /// at once): each slice's logits, loss and logits' gradient (and its share of the
    /// embedding's gradient) in the forward, in one buffer of ROWS × V logits instead of
    /// B·T × V — at small-124m's 8 × 1024, 1.65 GB of logits become 206 MB with 1024. The same
    /// losses; the embedding's gradient sums the slices in float32 (a rounding apart). May be
    /// set when a run resumes.
    #[arg(long, value_name = "ROWS", allow_negative_numbers = true, value_parser = count)]
    pub(crate) head_chunk: Option<usize>,
    /// Generate this many tokens from the trained model at the end.
    #[arg(long, allow_negative_numbers = true, value_parser = count, default_value_t = 0)]
    pub(crate) sample: usize,
    /// Say what this command would do and stop: the folder (new, resumed, replaced, or refused
    /// and why), model and parameters, tokenizer and data (epochs where the data's size is known),
    /// steps and tokens, evaluations, checkpoints, memory plan, and the settings config.toml
    /// would hold. No device is opened and nothing is written (a char tokenizer reads the corpus).
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Data-parallel training as one rank of `mpirun -n N ddl train ... --distributed mpi`
    /// (needs a build with `--features mpi`). Each rank drives one adapter (default: its rank on
    /// the machine modulo the adapters of the best kind found; --adapter overrides).
    #[arg(long, value_enum)]
    pub(crate) distributed: Option<Distributed>,
    /// With --distributed: a rank waiting this many seconds in one collective (a dead or hung
    /// peer) reports it and exits, which ends the job (10× as long until the first step is done).
    #[arg(long, requires = "distributed", allow_negative_numbers = true, value_parser = seconds, default_value_t = 300.0)]
    pub(crate) mpi_timeout: f64,
    /// With --distributed: gradients are all-reduced in buckets of this many MiB, overlapping the
    /// readback of the next bucket; 0 = one bucket (no overlap).
    #[arg(long, requires = "distributed", allow_negative_numbers = true, value_parser = bucket_mib, default_value_t = 1.0)]
    pub(crate) mpi_bucket_mib: f64,
    /// With --distributed: what the gradient all-reduce overlaps. `readback`: after the
    /// backward, each bucket's all-reduce overlaps the readback of the next; `backward`: the last
    /// micro-batch's backward is submitted block by block and each finished block is all-reduced
    /// while the GPU computes the next (for real GPUs; slower on a CPU adapter, docs/PERF.md).
    #[arg(long, requires = "distributed", value_enum, default_value = "readback")]
    pub(crate) mpi_overlap: MpiOverlap,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MpiOverlap {
    Backward,
    Readback,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Distributed {
    /// MPI (Open MPI, MPICH ...) through rsmpi; launch with mpirun.
    Mpi,
}
