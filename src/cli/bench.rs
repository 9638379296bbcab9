//! `ddl bench`'s subcommands and their flags.

use super::*;

/// `bench matmul`'s forms of square products by default: all three.
pub(crate) const MATMUL_CASES: &str = "nn,nt,tn";

#[derive(Subcommand)]
pub(crate) enum BenchCmd {
    /// GFLOP/s of the matmul forms (A·B, A·Bᵀ, Aᵀ·B) for every tile variant.
    Matmul {
        /// Square sizes to run.
        #[arg(long, allow_negative_numbers = true, value_parser = positive, value_delimiter = ',', default_value = "128,256,512,1024")]
        sizes: Vec<usize>,
        /// Forms to run: nn, nt, tn.
        #[arg(long, value_delimiter = ',', default_value = MATMUL_CASES)]
        cases: Vec<String>,
        /// Instead of square sizes: the linear-layer products (forward, weight and input
        /// gradients) of one training step of this preset, at --batch × --seq tokens.
        #[arg(long, conflicts_with = "sizes")]
        preset: Option<String>,
        /// With --preset: batch size (default: the preset's).
        #[arg(long, allow_negative_numbers = true, value_parser = sizes_up_to_2_24, requires = "preset")]
        batch: Option<usize>,
        /// With --preset: sequence length (default: the preset's).
        #[arg(long, allow_negative_numbers = true, value_parser = sizes_up_to_2_24, requires = "preset")]
        seq: Option<usize>,
        /// Tile variants to time: all (every one the adapter runs), auto (only the one the
        /// engine picks: the autotuner's measurement where there is one, else its heuristic),
        /// or a comma-separated list of names.
        #[arg(long, default_value = "all")]
        variants: String,
        /// Timed repetitions per measurement (median reported).
        #[arg(long, allow_negative_numbers = true, value_parser = repetitions, default_value_t = 5)]
        reps: usize,
        /// How A and B are read: f32; r16 (f32 storage rounded to f16 as read, the activations of
        /// `--precision f16`); f16 (f16 storage, its weights); rh (A r16, B f16: a linear layer of
        /// `--precision f16`). Accumulation is f32 in every form.
        #[arg(long, default_value = "f32", value_parser = ["f32", "r16", "f16", "rh"])]
        operands: String,
        /// First measure the best variant for each size, as training's first use of a shape
        /// does (among every variant the adapter runs, whatever --variants says), store it in the
        /// autotune cache and print it; then time --variants as without --tune (`auto` is then
        /// the variant just stored).
        #[arg(long)]
        tune: bool,
        /// Also time each variant with these kernel forms changed (`DDL_FORMS` syntax, e.g.
        /// `shader_checks=1`), the two alternated in --reps blocks A B B A; rows add the other
        /// side's time and the median block ratio (this side over the other) with its interval.
        #[arg(long, value_name = "FORMS", conflicts_with = "tune")]
        against_forms: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Every kernel at a preset's shapes: time, GFLOP/s, GB/s against the copy floor.
    Kernels {
        /// Only kernels whose name contains one of these (comma-separated).
        #[arg(long, value_delimiter = ',', value_parser = filter_name)]
        filter: Vec<String>,
        /// Name the cases (those --filter keeps) at these shapes, without building or timing any.
        #[arg(long, conflicts_with_all = ["reps", "peak_tflops"])]
        list: bool,
        /// The preset whose shapes the kernels run at (its ddl model).
        #[arg(long, default_value = "shakespeare-char")]
        preset: String,
        /// Batch size (default: the preset's).
        #[arg(long, allow_negative_numbers = true, value_parser = sizes_up_to_2_24)]
        batch: Option<usize>,
        /// Sequence length (default: the preset's).
        #[arg(long, allow_negative_numbers = true, value_parser = sizes_up_to_2_24)]
        seq: Option<usize>,
        /// Timed repetitions per kernel (median reported).
        #[arg(long, allow_negative_numbers = true, value_parser = repetitions, default_value_t = 5)]
        reps: usize,
        /// The FLOP rate to divide by for the kernels' FLOP floors, in TFLOP/s: the card's datasheet peak for the
        /// precision timed (e.g. 67 for an H100 SXM's f32 FMA rate), fixed across runs and as other
        /// frameworks' MFU use it. Default: the engine's best square matmul rate, measured in each
        /// run (it varies between runs on a busy machine).
        #[arg(long, value_name = "TFLOPS", allow_negative_numbers = true, value_parser = peak_tflops)]
        peak_tflops: Option<f64>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Training throughput (tok/s, step time, MFU estimate, per-kernel split) on random tokens.
    Train {
        /// The model preset: tiny, shakespeare-char, small-124m, medium-353m.
        #[arg(long, default_value = "tiny")]
        preset: String,
        /// The variant to time.
        #[arg(long, value_parser = variant_name, default_value = "ddl")]
        variant: String,
        /// A TOML file with [model] / [train] tables over the preset (as `ddl train --config`):
        /// the model's shapes and the batch; both sides of --against take it.
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// key=value overrides after --config (model.d_model=64, train.batch_size=16 ...), as
        /// `ddl train --set`; both sides of --against take them.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Timed steps (median reported); with --against or --against-forms, blocks of A B B A.
        #[arg(long, allow_negative_numbers = true, value_parser = timed_steps, default_value_t = 5)]
        steps: usize,
        /// Batch size (default: the preset's, or train.batch_size from --config / --set; one that
        /// differs from theirs is refused: drop one of them).
        #[arg(long, allow_negative_numbers = true, value_parser = sizes_up_to_2_24)]
        batch: Option<usize>,
        /// Sequence length (default: the preset's, or train.seq_len from --config / --set; one that
        /// differs from theirs is refused).
        #[arg(long, allow_negative_numbers = true, value_parser = sizes_up_to_2_24)]
        seq: Option<usize>,
        /// Also list every dispatch of the profiled step in order (kernel, workgroups, ms).
        #[arg(long, conflicts_with_all = ["against", "against_forms"])]
        dispatches: bool,
        /// The FLOP rate to divide by for MFU, in TFLOP/s: the card's datasheet peak for the
        /// precision timed (e.g. 67 for an H100 SXM's f32 FMA rate), fixed across runs and as other
        /// frameworks' MFU use it. Default: the engine's best square matmul rate, measured in each
        /// run (it varies between runs on a busy machine).
        #[arg(long, value_name = "TFLOPS", allow_negative_numbers = true, value_parser = peak_tflops, conflicts_with_all = ["against", "against_forms"])]
        peak_tflops: Option<f64>,
        /// Compare against this variant instead: both models' steps alternated in one process
        /// (blocks A B B A, `--steps` blocks), reporting the step ratio per block, which a
        /// machine whose speed drifts cannot skew the way separate runs can: the median block
        /// ratio with its distribution-free 95 % interval (from 6 blocks), the range, best to best.
        #[arg(long, value_parser = variant_name, value_name = "VARIANT")]
        against: Option<String>,
        /// Compare against these kernel forms (`DDL_FORMS` syntax, e.g. `shader_checks=1`): the
        /// other side runs with them, the same variant unless --against names one, in the same
        /// numerics (--precision, --f16-state) as the measured side.
        #[arg(long, value_name = "FORMS")]
        against_forms: Option<String>,
        /// Store the measured variant's expanded states in half precision (SHADER_F16; ddl and
        /// ddl_vmap at d_v = 4); with --against alone, the other side keeps f32.
        #[arg(long)]
        f16_state: bool,
        /// The measured variant's precision (f32 or f16: f16 operands in the linear layers,
        /// f16 states where the variant has them, the initial loss scale); with --against alone,
        /// the other side keeps f32 (`--variant ddl --precision f16 --against ddl` compares them).
        #[arg(long, default_value = "f32", value_parser = precision)]
        precision: ddl::model::Precision,
        /// The measured side recomputes (`ddl train --recompute`), the other side not unless
        /// `--set train.recompute=true` (both sides): `--recompute --against ddl` times its cost.
        #[arg(long)]
        recompute: bool,
        /// The measured side's LM head in slices of this many rows (`ddl train --head-chunk`),
        /// the other side's not unless `--set train.head_chunk=R` (both sides).
        #[arg(long, value_name = "ROWS", allow_negative_numbers = true, value_parser = count, default_value_t = 0)]
        head_chunk: usize,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// f16 against f32 training (`--precision f16`): runs of one preset and variant at each
    /// precision for each seed (a seed's two runs see the same batches), their final
    /// whole-split validation losses, the paired f16 − f32 difference (95 % interval, p) and
    /// whether it lies within the f32 seed spread. Finished runs in --out are reused. Minutes on a
    /// CPU adapter (tiny: ≈ 2 per run on 2 cores).
    Precision {
        /// The model and schedule preset.
        #[arg(long, default_value = "tiny")]
        preset: String,
        /// The variant to train.
        #[arg(long, value_parser = variant_name, default_value = "ddl")]
        variant: String,
        /// A TOML file with [model] / [train] tables over the preset (as `ddl train --config`):
        /// every run takes them, e.g. a smaller model.
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// key=value overrides after --config (model.d_model=64, train.batch_size=16 ...), as
        /// `ddl train --set`. The benchmark sets the precision, the seeds, the schedule and the
        /// corpus itself (its flags): a --set or --config that names one is refused.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Optimizer steps per run (also the schedule's length; warm-up a tenth).
        #[arg(long, allow_negative_numbers = true, value_parser = positive, default_value_t = 300)]
        steps: usize,
        /// Seeds (comma-separated, at least two different ones).
        #[arg(long, allow_negative_numbers = true, value_delimiter = ',', value_parser = run_seed, default_value = "1,2,3")]
        seeds: Vec<u64>,
        /// The text to train on (the default is also built into the binary: it works from any
        /// folder).
        #[arg(long, default_value = "assets/tinyshakespeare.txt")]
        corpus: String,
        /// Where the runs go (one `ddl train` folder each).
        #[arg(long, default_value = "runs/bench-precision")]
        out: std::path::PathBuf,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Per-token latency of cached decoding vs recomputing the full context.
    Generate {
        /// The model preset: tiny, shakespeare-char, small-124m, medium-353m.
        #[arg(long, default_value = "tiny")]
        preset: String,
        /// The variant to time.
        #[arg(long, value_parser = variant_name, default_value = "ddl")]
        variant: String,
        /// Context lengths to time one token at (comma-separated, each from 2 to the model's
        /// context) [default: those of 64 and 256 the model's context holds, else its context].
        #[arg(long, allow_negative_numbers = true, value_parser = context_length, value_delimiter = ',')]
        contexts: Option<Vec<usize>>,
        /// Timed tokens per context (median reported).
        #[arg(long, allow_negative_numbers = true, value_parser = repetitions, default_value_t = 3)]
        reps: usize,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// The data path at scale: makes a small and a large (≥ 1 GB) shard set from synthetic text
    /// with `ddl data prepare`, then per set: opening it, drawing batches from the mapped shards,
    /// and a short `ddl train --data` run (start-up, data wait per step, peak resident memory).
    Data {
        /// Shard size of the large set in MiB (two bytes per token; at most 1 TiB).
        #[arg(long, allow_negative_numbers = true, value_parser = shard_mib, default_value_t = 1100)]
        mib: usize,
        /// Shard size of the small set in MiB.
        #[arg(long, allow_negative_numbers = true, value_parser = shard_mib, default_value_t = 16)]
        small_mib: usize,
        /// Where the sets are made (default: a new folder in the system's temporary directory).
        /// The sets it makes are removed afterwards unless --keep, and so is the folder if it made
        /// it.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
        /// Keep the shard sets and runs (not after an error or Ctrl-C: what this run made then
        /// goes).
        #[arg(long)]
        keep: bool,
        /// Training steps per set.
        #[arg(long, allow_negative_numbers = true, value_parser = positive, default_value_t = 20)]
        steps: usize,
        /// The model trained (a preset: tiny, shakespeare-char, small-124m, medium-353m).
        #[arg(long, default_value = "tiny")]
        preset: String,
        /// Its variant.
        #[arg(long, value_parser = variant_name, default_value = "ddl")]
        variant: String,
        /// Batches drawn and timed per set outside training.
        #[arg(long, allow_negative_numbers = true, value_parser = positive, default_value_t = 200)]
        draws: usize,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Device buffer copy bandwidth (the memory ceiling for bandwidth-bound kernels).
    Copy {
        /// Buffer size in MiB.
        #[arg(long, allow_negative_numbers = true, value_parser = positive, default_value_t = 64)]
        mib: usize,
        /// Timed copies (median reported).
        #[arg(long, allow_negative_numbers = true, value_parser = repetitions, default_value_t = 5)]
        reps: usize,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}
