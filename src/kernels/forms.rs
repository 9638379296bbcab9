//! Which form every kernel takes on a device: one [`Forms`] value per device, made from the
//! adapter's type, limits and features by [`Forms::for_adapter`] — the only place that says "on
//! a CPU adapter …" — and overridden by one variable, `DDL_FORMS` (e.g.
//! `DDL_FORMS="conv_quads=0,norm_team=32"`). The launchers read `gpu.forms`; tests make device
//! handles with the forms they want ([`crate::gpu::Gpu::with_forms`]); `ddl info` and `ddl bench`
//! print the table ([`Forms::table`]).
//!
//! Every form of a kernel computes the same function and is tested against float64 on any
//! adapter; forms that give the same bits as each other say so where they are chosen. Where a
//! form depends on the shape too (a layout only pays with enough rows, vec4 loads need aligned
//! views), the field says whether the adapter wants it and the launcher checks the shape.
//!
//! Why each default is what it is: the kernel module's documentation of the field's function
//! and docs/PERF.md. GPU defaults are the forms written for GPUs; they are to be replaced by what
//! the GPU check (docs/GPU.md) measures.

use std::fmt::Write as _;

pub use crate::kernels::attention::Method as AttentionForm;

/// The kernel forms of one device. Fields are public so that a test or a benchmark can ask for
/// any form on any adapter; the launchers still check what a form needs of the shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Forms {
    /// The adapter runs workgroups as SIMD batches on CPU threads (llvmpipe, SwiftShader, WARP):
    /// barriers are coroutine switches and workgroup memory a loop over the lanes. The shape
    /// rules below use it only through the fields that follow; the matmul heuristic and its
    /// split-K rule read it directly (their CPU cost model).
    pub cpu: bool,
    /// Worker threads of a CPU adapter (`LP_NUM_THREADS`, else the cores): the matmul's CPU cost
    /// model and split-K rule.
    pub cpu_threads: usize,
    /// Attention: `attention=tiled|blocked|blocked:ROWS|causal`.
    pub attention: AttentionForm,
    /// Decoding attention (a few queries, head dim ≤ 64) with one invocation per query row and
    /// no workgroup memory instead of the tiled kernel: `attn_rows`.
    pub attention_rows: bool,
    /// The blocked method's softmax steps give a row to a team of this many invocations (a power
    /// of two ≤ 128; 0: one invocation per row): `attn_team=N`.
    pub attention_row_team: usize,
    /// The causal method's products whose tiles sum ragged K ranges (O = P·V, dQ = dS·K over
    /// keys; dV = Pᵀ·dO, dK = dSᵀ·Q over queries) hand out their tiles longest first, every
    /// batch's longest before any batch's next, instead of batch by batch: `causal_lpt`. The
    /// same tiles and sums, so the same bits; only the order the workgroups take them in (what
    /// a GPU's last wave waits for: [`crate::kernels::matmul::Causal`]).
    pub causal_lpt: bool,
    /// RMSNorm reduces a row with one invocation when there are many rows (else a team):
    /// `norm_rows`.
    pub norm_one_row_per_invocation: bool,
    /// A fixed RMSNorm team size (a power of two ≤ 256) instead of the rule: `norm_team=N`.
    pub norm_team: Option<usize>,
    /// One-row-per-invocation RMSNorm loads four features at a time where it can: `norm_quads`.
    /// Off also turns off the dγ pass's four-columns form and the folded heads below.
    pub norm_quads: bool,
    /// A DDL sublayer's gate and value heads are backpropagated inside the norm backward where
    /// that runs in quads: `norm_heads`.
    pub norm_heads: bool,
    /// RMSNorm with teams (GPUs) loads four features at a time, keeps a row in registers between
    /// its passes, and computes dx and dγ's chunk partials in one pass: `norm_vec`.
    pub norm_vec: bool,
    /// The delta write handles a token with one invocation when there are many tokens (else a
    /// segment of invocations): `delta_rows`.
    pub delta_one_token_per_invocation: bool,
    /// A fixed delta-write segment width (a power of two ≤ 128): `delta_seg=N`.
    pub delta_segment: Option<usize>,
    /// One-token-per-invocation delta kernels load four features at a time: `delta_quads`.
    pub delta_quads: bool,
    /// The delta forward reads its heads from one packed buffer and writes its saves to another
    /// (9 storage buffers instead of 15): on wherever the device allows fewer than 15 per shader
    /// stage (a browser's WebGPU; set when the device opens), else off: `delta_packed`.
    pub delta_packed: bool,
    /// Values a whole subgroup needs are loaded once per subgroup and broadcast (needs
    /// SUBGROUP): `subgroup_loads`.
    pub subgroup_loads: bool,
    /// Cross-entropy gives a row to one invocation for vocabularies ≤ 4096 (else a team):
    /// `ce_rows`.
    pub ce_one_row_per_invocation: bool,
    /// A fixed number of invocations per cross-entropy row (a power of two ≤ 256): `ce_tpr=N`.
    pub ce_threads_per_row: Option<usize>,
    /// Rows up to which column sums add in order with one invocation per column: `col_sum_seq=N`
    /// (0: always the tree).
    pub col_sum_seq_rows: usize,
    /// The gradient norm's blocks are summed by one invocation in order: `sum_squares_seq`.
    pub sum_squares_seq: bool,
    /// The compressors walk four features per invocation (d a multiple of 4): `conv_quads`.
    pub conv_quads: bool,
    /// The one-walk compressor backward without quads runs as a sweep (a barrier per token
    /// step): `conv_sweep`.
    pub conv_sweep: bool,
    /// Tokens one invocation of the compressor's forward walks: `conv_fwd_chunk=N`.
    pub conv_forward_chunk: usize,
    /// The compressor kernels with K = 4 have K compiled in (else the general window of 8):
    /// `conv_k4`.
    pub conv_k4: bool,
    /// The token compressor's backward adds its chunk partials over the whole grid (groups of
    /// rows, then one invocation per kernel element) instead of one workgroup per value channel:
    /// `conv_finish_wide` (GPUs; see `shortconv::token_backward_finish`).
    pub conv_finish_wide: bool,
    /// The compressor's GPU-layout walks load four tokens' rows before computing and storing them
    /// (`conv_batch`; the same bits).
    pub conv_batch: bool,
    /// Four elements per invocation where sizes and offsets allow: `rope_vec4`, `swiglu_vec4`,
    /// `adamw_vec4` (the same bits as the scalar forms).
    pub rope_vec4: bool,
    pub swiglu_vec4: bool,
    pub adamw_vec4: bool,
    /// The matmul's `…g` register-block variants (A loaded once per subgroup) are offered: only
    /// where subgroups have one fixed size dividing 8: `matmul_subgroup`.
    pub matmul_subgroup: bool,
    /// A packed product with fewer output tiles than this is split along K into pieces that
    /// together make about this many (`matmul::Matmul::k_pieces`; 0: never split):
    /// `split_k_tiles`. CPU adapters: twice the worker threads, for outputs of at most 2^16
    /// elements (small heads); GPUs: 256 tiles of 128 × 128 (about two workgroups per
    /// multiprocessor of a 132-multiprocessor card), for the weight gradients of a model's
    /// narrow layers (768 × 768 summed over 8192 tokens is 36 such tiles).
    pub split_k_tiles: usize,
    /// `--precision f16` reads the weights of its products from an f16 copy of the parameters
    /// (rewritten after every AdamW step: half the bytes per weight load) instead of rounding the
    /// f32 parameters as it reads them; the same bits either way: `matmul_f16_weights`.
    pub matmul_f16_weights: bool,
    /// `--precision f16` stores the activations that only the linear layers read in f16 (the
    /// MLP's SwiGLU output): the producer rounds to nearest even as it writes, which is what the
    /// products' reads would do, so the same bits with half the bytes written, kept and read:
    /// `f16_acts`.
    pub f16_acts: bool,
    /// `--precision f16`'s blocked attention stores the softmax steps' P and dS in f16 buffers of
    /// their own, which the products read as f16-stored operands, instead of writing them over
    /// the f32 scores and dP (read by the products rounded to f16): the same bits, half the bytes
    /// written by the softmax steps and read by the three products after them: `attn_p16`.
    pub attn_p16: bool,
    /// `--precision f16` runs the tied LM head's three products (logits, ∂E, ∂zn) with f16
    /// operands, the embedding read from the parameters' f16 copy, accumulated in f32: the logits
    /// and the cross-entropy stay float32 (spec 10.3's island, as the attention's f16 score
    /// product feeds its f32 softmax); off: the head in f32 throughout: `head_f16`.
    pub head_f16: bool,
    /// The baseline's residual X_out = X_in + h is added by the sublayer's last product (X_in
    /// copied into X_out first, the product accumulating into it) instead of a separate h and an
    /// add pass: the same bits (the product's epilogue and the add compute the same
    /// float32 sum), no per-sublayer h kept and 2·N·d fewer floats moved a sublayer:
    /// `residual_fused`.
    pub residual_fused: bool,
    /// f16 products run on cooperative matrices where the device has them (the adapter lists
    /// 16×16×16 f16 → f32 and the self-test at device creation passed: `Gpu::coop`):
    /// `matmul_coop`. Not bit-identical to the tiled forms. Off by default: on the H200
    /// (GPU check of 2026-11-27, `docs/gpu-runs/2026-11-27-h200-c`) today's coop kernel ran a
    /// 4096³ f16 product at 2.6 TFLOP/s against the f16 tiles' 24, and small-124m's f16 step
    /// took 5.7× the f32 step with it; on until a faster kernel is measured.
    pub matmul_coop: bool,
    /// Where `matmul_coop` picks the wide 128 × 128 form, it runs `coop128v` (the staging of part
    /// `coop_staging_v`: raw loads in flight, quads in workgroup memory, two buffers) instead of
    /// `coop128`, where that form's own self-test passed: `matmul_coop_v`. Off by default: not
    /// measured on a GPU yet (session 31).
    pub matmul_coop_v: bool,
    /// Where `matmul_coop_v` picks `coop128v`, it runs `coop128v2` instead (two K slices' loads
    /// in flight, not one; the same bits), where that form's own self-test passed:
    /// `matmul_coop_v2`. Off by default: not measured on a GPU yet (session 72).
    pub matmul_coop_v2: bool,
    /// The engine's shader modules keep wgpu's runtime checks (`shader_checks`): naga clamps every
    /// index into a workgroup, private or function array (`min` before each workgroup-memory read:
    /// the staged matmul's inner loop, 64 FMAs, carries four) and bounds every loop with a
    /// 64-bit counter it decrements and tests each iteration. Off: the modules are created with
    /// `create_shader_module_trusted` without those two (buffer accesses stay bounded where the
    /// driver does it itself, as Vulkan's robust buffer access does; the integer-division checks
    /// stay). Every kernel keeps its indices inside its arrays by construction and its loops are
    /// bounded by its parameters; the test suite runs with them off on lavapipe. The same bits
    /// either way on lavapipe. Default: on. Measured on the H200 (GPU check of 2026-11-28,
    /// `docs/gpu-runs/2026-11-28-h200-d`): off, the staged matmul ran 4096³ products 15 % faster
    /// (ratio 0.848–0.850) and the small-124m f32 baseline step took 0.853× the time (245.6
    /// against 287.9 ms, the same losses to the bit), and every golden file passed; but two
    /// kernel tests that hold two forms to the same bits failed there with the checks off (the
    /// delta write's forward with and without k, the CC compressor in quads against the plain
    /// kernels), by rounding (1 ulp; 3.7e-6 relative in the write's X′): the driver contracts
    /// the two forms' arithmetic differently without the clamps. The GPU default stays on until
    /// another card agrees; the H200 runs every module unchecked since GPU run 5, where those
    /// two tests passed so (sessions 31 and 69 rewrote the two forms' arithmetic: explicit fmas,
    /// the write's k stored after its writes), [`MEASURED`]. Setting it (`DDL_FORMS`,
    /// `--against-forms`) also empties [`Forms::unchecked`]: `shader_checks=1` checks every
    /// module, `shader_checks=0` none.
    pub shader_checks: bool,
    /// Shaders (names of `shaders::ALL`) whose modules are created without wgpu's runtime checks
    /// while `shader_checks` keeps them for the rest: `unchecked=matmul+reduce`, `all`, every
    /// shader but some (`all-delta-shortconv`), or `none`. For the kernels measured faster
    /// without them whose tests pass so on the device, where others still have a reason to keep
    /// them. Default: none; on the H200 every shader (`all`, [`MEASURED`]: the baseline's step
    /// 0.853× the time, the ddl step 0.827×; every kernel test and golden file passes so there;
    /// from session 40 to GPU run 5 the delta write and the compressor kept theirs, whose
    /// bit-identity tests failed unchecked by rounding until their arithmetic was rewritten).
    pub unchecked: Vec<&'static str>,
    /// wgpu zeroes each workgroup's workgroup memory before it runs (`wg_zero`, the WebGPU rule
    /// and wgpu's default; the browser always does). Off: the pipelines are built with
    /// `zero_initialize_workgroup_memory: false`, and a workgroup starts with whatever is there.
    /// Every kernel writes its workgroup memory before reading it, which the test suite checks
    /// with `wg_poison` (below). What zeroing costs differs by back end: Vulkan drivers with
    /// `shaderZeroInitializeWorkgroupMemory` (NVIDIA, lavapipe) zero natively; naga's MSL and
    /// HLSL writers (Metal, DX12) have the first invocation alone store every element, then a
    /// barrier, before each workgroup (`w128`'s 16 KiB of stages: 1024 vec4 stores by one
    /// invocation). Default: off on every adapter since session 43: every kernel test, golden
    /// file, decode and training test passes with the memory poisoned, the same bits as zeroed
    /// (it changes no result, only removes work); on lavapipe the tiny ddl step is not
    /// distinguishable (0.971 [0.908, 1.008], 12 blocks). `wg_zero=1` restores wgpu's zeroing.
    pub wg_zero: bool,
    /// A test form: every compute entry point first fills the workgroup variables it uses with
    /// NaN (integers all ones), then a barrier (`shaders::poison`), so a kernel that reads an
    /// element it has not written puts NaN or a wild index into its outputs. With `wg_zero=0`
    /// the test suite runs so (docs/TESTING.md). Off by default (it adds work to every kernel).
    pub wg_poison: bool,
    /// The [`MEASURED`] entries applied to this device (by its adapter's name), in order.
    pub measured: Vec<&'static Measured>,
}

/// Worker threads a CPU adapter runs workgroups on (llvmpipe: `LP_NUM_THREADS`, else one per
/// core).
fn cpu_threads() -> usize {
    std::env::var("LP_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()))
        .clamp(1, 64)
}

/// Which kind of adapter to open when several are present (higher first): discrete GPUs, then
/// integrated, virtual, CPU (lavapipe, llvmpipe) and other adapters. The only other place that
/// asks what kind an adapter is, besides [`Forms::for_adapter`].
pub fn device_preference(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 4,
        wgpu::DeviceType::IntegratedGpu => 3,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 1,
        wgpu::DeviceType::Other => 0,
    }
}

/// Forms the GPU check measured better than the GPU defaults on one device: on an adapter whose
/// name contains `device`, [`Forms::for_adapter`] applies `forms` (as `DDL_FORMS` spells them,
/// which still overrides them). `evidence`: the measurement and where its numbers are
/// (docs/gpu-runs/). Add a line only for a paired difference whose interval excludes no change;
/// a form that pays on every GPU changes [`Forms::defaults`] instead.
#[derive(Debug, PartialEq)]
pub struct Measured {
    pub device: &'static str,
    pub forms: &'static str,
    pub evidence: &'static str,
}

pub const MEASURED: &[Measured] = &[
    Measured {
        device: "H200",
        forms: "attention=causal",
        evidence: "the whole causal score matrix in one product each way: small-124m f32 baseline step \
                   0.948x [0.944, 0.955] of blocked:256's, 6 blocks A B B A; attention per layer \
                   forward 0.733x, backward 0.742x (docs/gpu-runs/2026-12-04-h200-e, summary-3: \
                   bench-train-small-causal, bench-attention-causal)",
    },
    Measured {
        device: "H200",
        forms: "split_k_tiles=512",
        evidence: "small-124m f32 baseline step 0.983x [0.976, 0.988] of split_k_tiles=256's, 6 blocks \
                   A B B A (docs/gpu-runs/2026-11-28-h200-d, summary-2: bench-train-small-split512)",
    },
    Measured {
        device: "H200",
        forms: "unchecked=all",
        evidence: "every module without wgpu's runtime checks: the small-124m f32 ddl step 0.941x \
                   [0.935, 0.945] of the delta write and compressor checked (the rest already \
                   unchecked), the same bits, 6 blocks A B B A (docs/gpu-runs/2026-12-04-h200-e, \
                   summary-5: bench-train-small-unchecked-all), and 0.827x [0.824, 0.830] of every \
                   module checked (summary-3: bench-train-small-unchecked); the baseline step 0.853x \
                   [0.845, 0.856] (docs/gpu-runs/2026-11-28-h200-d, summary-1); every kernel test \
                   passed so (2026-12-04-h200-e, results-4: 193 and the 4 fixed in session 69, \
                   the delta write's k stored after its writes), every golden file (2026-11-28-h200-d, \
                   summary-3)",
    },
];

/// Whether an adapter's subgroups (their sizes, its features) let the matmul `…g` variants run:
/// one fixed size dividing 8, so that a row of DX = 8 invocations holds each subgroup (what
/// `matmul_subgroup` defaults to, and what a bound `…g` variant's error names when it is off).
pub fn subgroups_fit_matmul(subgroup_sizes: (u32, u32), features: wgpu::Features) -> bool {
    let (lo, hi) = subgroup_sizes;
    features.contains(wgpu::Features::SUBGROUP) && lo == hi && hi >= 1 && 8 % hi == 0
}

impl Forms {
    /// The forms for an adapter, before `DDL_FORMS`: the defaults of its kind, then what the GPU
    /// check measured better on a device of its name ([`MEASURED`]).
    pub fn for_adapter(info: &wgpu::AdapterInfo, features: wgpu::Features) -> Forms {
        let cpu = info.device_type == wgpu::DeviceType::Cpu;
        Self::defaults(cpu, (info.subgroup_min_size, info.subgroup_max_size), features)
            .with_measured(&info.name, features)
    }

    /// These forms with every [`MEASURED`] entry whose device `name` contains applied (GPUs
    /// only), and listed in [`Forms::measured`].
    pub fn with_measured(mut self, name: &str, features: wgpu::Features) -> Forms {
        if self.cpu {
            return self;
        }
        for m in MEASURED.iter().filter(|m| name.contains(m.device)) {
            // Every entry parses on a GPU's defaults (`measured_entries_parse_and_apply_by_name`);
            // one this adapter cannot run (a feature it lacks) is left out whole.
            let mut f = self.clone();
            if f.apply(m.forms, features).is_ok() {
                self = f;
                self.measured.push(m);
            }
        }
        self
    }

    /// The forms of a CPU adapter (`cpu`) or a GPU with these subgroup sizes (min, max) and
    /// features.
    pub fn defaults(cpu: bool, subgroup_sizes: (u32, u32), features: wgpu::Features) -> Forms {
        let subgroups = features.contains(wgpu::Features::SUBGROUP);
        Forms {
            cpu,
            cpu_threads: cpu_threads(),
            attention: AttentionForm::Blocked(if cpu {
                crate::kernels::attention::BLOCK_ROWS
            } else {
                crate::kernels::attention::GPU_BLOCK_ROWS
            }),
            attention_rows: cpu,
            // GPUs: teams of 32 (GPU run 5 on an H200: the small-124m baseline step 0.953x
            // [0.946, 0.955] of one invocation per row, docs/GPU.md).
            attention_row_team: if cpu { 0 } else { 32 },
            // Off until a GPU measures it (docs/GPU.md, "Prediction for the causal products'
            // longest tiles first"); a CPU adapter's few threads have no last wave to shorten.
            causal_lpt: false,
            norm_one_row_per_invocation: cpu,
            norm_team: None,
            norm_quads: true,
            norm_heads: true,
            // GPUs: on (GPU run 5 on an H200: the baseline step 0.991x [0.989, 0.993], its
            // passes 2.11 / 1.04 ms against run 3's 4.05 / 1.73, docs/GPU.md).
            norm_vec: !cpu,
            delta_one_token_per_invocation: cpu,
            delta_segment: None,
            delta_quads: true,
            delta_packed: false,
            subgroup_loads: cpu && subgroups,
            ce_one_row_per_invocation: cpu,
            ce_threads_per_row: None,
            col_sum_seq_rows: if cpu { 128 } else { 16 },
            sum_squares_seq: cpu,
            conv_quads: cpu,
            conv_sweep: cpu,
            conv_forward_chunk: 16,
            conv_k4: true,
            conv_finish_wide: !cpu,
            conv_batch: false,
            rope_vec4: true,
            swiglu_vec4: true,
            adamw_vec4: true,
            matmul_subgroup: subgroups_fit_matmul(subgroup_sizes, features),
            matmul_f16_weights: true,
            f16_acts: true,
            attn_p16: true,
            head_f16: true,
            residual_fused: true,
            matmul_coop: false,
            matmul_coop_v: false,
            matmul_coop_v2: false,
            shader_checks: true,
            unchecked: Vec::new(),
            wg_zero: false,
            wg_poison: false,
            measured: Vec::new(),
            split_k_tiles: if cpu { 2 * cpu_threads() } else { crate::kernels::matmul::GPU_SPLIT_K_TILES },
        }
    }

    /// The forms for an adapter with `DDL_FORMS` applied; a bad `DDL_FORMS` is an error that
    /// names it.
    pub fn from_env(info: &wgpu::AdapterInfo, features: wgpu::Features) -> Result<Forms, String> {
        let mut f = Self::for_adapter(info, features);
        if let Ok(spec) = std::env::var("DDL_FORMS") {
            f.apply(&spec, features).map_err(|e| format!("DDL_FORMS={spec:?}: {e}"))?;
        }
        Ok(f)
    }

    /// Applies `key=value,…` overrides (booleans `0`/`1`, `off`/`on`, `false`/`true`; `KEY` alone
    /// means on). Keys: see [`Forms::table`]. Forms the adapter cannot run (`subgroup_loads` or
    /// `matmul_subgroup` without fitting subgroups) are refused. `measured=DEVICE` applies, where
    /// it stands in the list, the [`MEASURED`] entries of a device whose name contains `DEVICE`
    /// (`measured=H200` on an H100: the H200's committed forms, to test or time them on another
    /// card) and lists them in [`Forms::measured`].
    pub fn apply(&mut self, spec: &str, features: wgpu::Features) -> Result<(), String> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), v.trim()),
                None => (item, "1"),
            };
            // The key alone is on, for the on/off forms only: a form that takes a value, given
            // alone, is refused below (`conv_fwd_chunk` alone set a chunk of 1 token).
            let took_flag = std::cell::Cell::new(false);
            let flag = || -> Result<bool, String> {
                took_flag.set(true);
                match value.to_ascii_lowercase().as_str() {
                    "1" | "on" | "true" | "yes" => Ok(true),
                    "0" | "off" | "false" | "no" => Ok(false),
                    _ => Err(format!(
                        "{key}={value}: expected on or off (also 1/0, true/false, yes/no; the key alone is on)"
                    )),
                }
            };
            let pow2 = |max: usize| -> Result<usize, String> {
                match value.parse::<usize>() {
                    Ok(n) if n.is_power_of_two() && n <= max => Ok(n),
                    _ => Err(format!("{key}={value}: expected a power of two from 1 to {max}")),
                }
            };
            match key {
                "attention" => {
                    let v = value.to_ascii_lowercase();
                    self.attention = if v == "tiled" {
                        AttentionForm::Tiled
                    } else if v == "causal" {
                        AttentionForm::Causal
                    } else if let Some(rest) = v.strip_prefix("blocked") {
                        let rows = match rest.strip_prefix(':') {
                            None if rest.is_empty() => crate::kernels::attention::BLOCK_ROWS,
                            Some(r) => r
                                .parse::<usize>()
                                .ok()
                                .filter(|&r| r > 0)
                                .ok_or_else(|| format!("attention={value}: expected blocked:ROWS with ROWS ≥ 1"))?,
                            None => {
                                return Err(format!(
                                    "attention={value}: expected tiled, blocked, blocked:ROWS or causal"
                                ));
                            }
                        };
                        AttentionForm::Blocked(rows)
                    } else {
                        return Err(format!("attention={value}: expected tiled, blocked, blocked:ROWS or causal"));
                    }
                }
                "norm_rows" => self.norm_one_row_per_invocation = flag()?,
                "norm_team" => self.norm_team = Some(pow2(256)?),
                "norm_quads" => self.norm_quads = flag()?,
                "norm_heads" => self.norm_heads = flag()?,
                "norm_vec" => self.norm_vec = flag()?,
                "delta_rows" => self.delta_one_token_per_invocation = flag()?,
                "delta_seg" => self.delta_segment = Some(pow2(128)?),
                "delta_quads" => self.delta_quads = flag()?,
                "delta_packed" => self.delta_packed = flag()?,
                "subgroup_loads" => {
                    let on = flag()?;
                    if on && !features.contains(wgpu::Features::SUBGROUP) {
                        return Err("subgroup_loads=1: this adapter has no subgroup operations".into());
                    }
                    self.subgroup_loads = on;
                }
                "ce_rows" => self.ce_one_row_per_invocation = flag()?,
                "ce_tpr" => self.ce_threads_per_row = Some(pow2(256)?),
                "col_sum_seq" => {
                    self.col_sum_seq_rows =
                        value.parse().map_err(|_| format!("{key}={value}: expected a number of rows (0: never)"))?
                }
                "sum_squares_seq" => self.sum_squares_seq = flag()?,
                "conv_quads" => self.conv_quads = flag()?,
                "conv_sweep" => self.conv_sweep = flag()?,
                "conv_fwd_chunk" => {
                    self.conv_forward_chunk = value
                        .parse::<usize>()
                        .ok()
                        .filter(|&c| c >= 1)
                        .ok_or_else(|| format!("{key}={value}: expected a number of tokens ≥ 1"))?
                }
                "conv_k4" => self.conv_k4 = flag()?,
                "conv_finish_wide" => self.conv_finish_wide = flag()?,
                "conv_batch" => self.conv_batch = flag()?,
                "causal_lpt" => self.causal_lpt = flag()?,
                "rope_vec4" => self.rope_vec4 = flag()?,
                "attn_rows" => self.attention_rows = flag()?,
                "attn_team" => {
                    self.attention_row_team = match value {
                        "0" | "off" => 0,
                        _ => pow2(128).map_err(|e| format!("{e}, or 0 (one invocation per row)"))?,
                    }
                }
                "swiglu_vec4" => self.swiglu_vec4 = flag()?,
                "adamw_vec4" => self.adamw_vec4 = flag()?,
                "matmul_subgroup" => {
                    let on = flag()?;
                    if on && !self.matmul_subgroup {
                        return Err("matmul_subgroup=1: needs subgroups of one fixed size dividing 8 (this adapter's do not fit)".into());
                    }
                    self.matmul_subgroup = on;
                }
                "matmul_f16_weights" => self.matmul_f16_weights = flag()?,
                "f16_acts" => self.f16_acts = flag()?,
                "attn_p16" => self.attn_p16 = flag()?,
                "head_f16" => self.head_f16 = flag()?,
                "residual_fused" => self.residual_fused = flag()?,
                "matmul_coop" => self.matmul_coop = flag()?,
                "matmul_coop_v" => self.matmul_coop_v = flag()?,
                "matmul_coop_v2" => self.matmul_coop_v2 = flag()?,
                "shader_checks" => (self.shader_checks, self.unchecked) = (flag()?, Vec::new()),
                "unchecked" => self.unchecked = Self::shader_list(key, value)?,
                "wg_zero" => self.wg_zero = flag()?,
                "wg_poison" => self.wg_poison = flag()?,
                "split_k_tiles" => {
                    self.split_k_tiles = value
                        .parse()
                        .map_err(|_| format!("{key}={value}: expected a number of tiles (0: never split)"))?
                }
                "measured" => {
                    let want = value.to_ascii_lowercase();
                    let entries: Vec<&'static Measured> = MEASURED
                        .iter()
                        .filter(|m| !want.is_empty() && m.device.to_ascii_lowercase().contains(&want))
                        .collect();
                    if entries.is_empty() {
                        let mut devices: Vec<&str> = MEASURED.iter().map(|m| m.device).collect();
                        devices.sort_unstable();
                        devices.dedup();
                        return Err(format!(
                            "{key}={value}: no forms were measured on a device of that name (measured on: {}; \
                             the entries are MEASURED in src/kernels/forms.rs)",
                            devices.join(", ")
                        ));
                    }
                    for m in entries {
                        self.apply(m.forms, features).map_err(|e| format!("{key}={value} ({}): {e}", m.forms))?;
                        if !self.measured.contains(&m) {
                            self.measured.push(m);
                        }
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown form '{key}' (expected one of: {}; or measured=DEVICE, the forms measured on that card)",
                        Self::KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
                    ));
                }
            }
            if !item.contains('=') && !took_flag.get() {
                return Err(format!(
                    "{key} alone: this form takes a value, not on or off; give {key}=VALUE (`ddl info` lists the \
                     forms with their current values)"
                ));
            }
        }
        Ok(())
    }

    /// Whether `shader`'s modules keep wgpu's runtime checks (`shader_checks`, `unchecked`).
    pub fn checks(&self, shader: &str) -> bool {
        self.shader_checks && !self.unchecked.contains(&shader)
    }

    /// `a+b+…`, `all`, `all-a-b…` (every shader but those) or `none`, as names of the engine's
    /// shaders, sorted, each once.
    fn shader_list(key: &str, value: &str) -> Result<Vec<&'static str>, String> {
        let all: Vec<&'static str> = crate::shaders::ALL.iter().map(|s| s.name).collect();
        let name = |n: &str| {
            crate::shaders::get(n).map(|s| s.name).ok_or_else(|| {
                format!(
                    "{key}={value}: '{n}' is not a shader (expected names joined by '+' from: {}; or all, all-NAME-NAME…, none)",
                    all.join(", ")
                )
            })
        };
        let mut out = Vec::new();
        if value.eq_ignore_ascii_case("none") || value.is_empty() {
            return Ok(out);
        }
        if let Some(rest) = value.strip_prefix("all") {
            if !rest.is_empty() && !rest.starts_with('-') {
                return Err(format!("{key}={value}: expected all, or all-NAME-NAME… (every shader but those)"));
            }
            let except =
                rest.split('-').map(str::trim).filter(|n| !n.is_empty()).map(name).collect::<Result<Vec<_>, _>>()?;
            out = all.iter().copied().filter(|n| !except.contains(n)).collect();
        } else {
            for n in value.split('+').map(str::trim) {
                out.push(name(n)?);
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// [`Forms::unchecked`] as `DDL_FORMS` spells it: `none`, `all`, `all-a-b` when that is
    /// shorter, else `a+b`.
    fn unchecked_spec(&self) -> String {
        let all: Vec<&'static str> = crate::shaders::ALL.iter().map(|s| s.name).collect();
        let mut missing: Vec<&str> = all.iter().copied().filter(|n| !self.unchecked.contains(n)).collect();
        missing.sort_unstable();
        if self.unchecked.is_empty() {
            "none".into()
        } else if missing.is_empty() {
            "all".into()
        } else if missing.len() < self.unchecked.len() {
            format!("all-{}", missing.join("-"))
        } else {
            self.unchecked.join("+")
        }
    }

    /// The override keys and what each chooses.
    pub const KEYS: &'static [(&'static str, &'static str)] = &[
        (
            "attention",
            "tiled flash kernel, blocks of queries through the matmuls (blocked[:ROWS]), or the whole causal score matrix (causal)",
        ),
        ("attn_rows", "decoding attention: one query row per invocation (head dim ≤ 64)"),
        ("attn_team", "blocked attention's softmax steps: a team of N per row (0: one invocation)"),
        ("causal_lpt", "causal attention's products over keys or queries: the longest tiles first"),
        ("norm_rows", "RMSNorm: one row per invocation when rows are many"),
        ("norm_team", "RMSNorm: the team size (rule: chosen per shape; N: forced)"),
        ("norm_quads", "RMSNorm one-row kernels: four features per load"),
        ("norm_heads", "delta heads' backward folded into the norm backward"),
        ("norm_vec", "RMSNorm with teams: rows in vec4 registers, dx and dγ in one pass"),
        ("delta_rows", "delta write: one token per invocation when tokens are many"),
        ("delta_seg", "delta write: the segment width (rule: chosen per shape; N: forced)"),
        ("delta_quads", "delta write one-token kernels: four features per load"),
        ("delta_packed", "delta forward: heads and saves in packed buffers (9 bindings)"),
        ("subgroup_loads", "uniform values loaded once per subgroup and broadcast"),
        ("ce_rows", "cross-entropy: one row per invocation for V ≤ 4096"),
        ("ce_tpr", "cross-entropy: invocations per row (rule: chosen per shape; N: forced)"),
        ("col_sum_seq", "column sums in order up to this many rows"),
        ("sum_squares_seq", "gradient norm: blocks summed in order"),
        ("conv_quads", "compressor walks: four features per invocation"),
        ("conv_sweep", "compressor backward walk: a barrier per token step"),
        ("conv_fwd_chunk", "compressor forward: tokens per walk"),
        ("conv_k4", "compressor: K = 4 compiled in"),
        ("conv_finish_wide", "compressor backward: chunk partials summed over the whole grid"),
        ("conv_batch", "compressor walks (GPU layout): four tokens' loads issued together"),
        ("rope_vec4", "RoPE: four pairs per invocation"),
        ("swiglu_vec4", "SwiGLU: four elements per invocation"),
        ("adamw_vec4", "AdamW: four elements per invocation"),
        ("matmul_subgroup", "matmul: the …g register-block variants offered"),
        ("matmul_f16_weights", "--precision f16: weights read from an f16 copy of the parameters"),
        ("f16_acts", "--precision f16: activations only the linear layers read stored in f16"),
        ("attn_p16", "--precision f16: blocked attention's P and dS stored in f16 for its products"),
        ("head_f16", "--precision f16: the LM head's products on f16 operands (f32 logits and loss)"),
        ("residual_fused", "baseline: the residual added by the sublayer's last product"),
        ("matmul_coop", "f16 products on cooperative matrices where the device has them"),
        ("matmul_coop_v", "matmul_coop: the wide form on coop128v's staging"),
        ("matmul_coop_v2", "matmul_coop_v: coop128v2, two K slices' loads in flight"),
        ("split_k_tiles", "matmul: products with fewer output tiles split along K (0: never)"),
        ("shader_checks", "wgpu's index clamps and loop counters kept in every shader"),
        ("unchecked", "shaders built without those checks all the same (a+b, all-a-b, all, none)"),
        ("wg_zero", "workgroup memory zeroed by wgpu before each workgroup"),
        ("wg_poison", "test: workgroup memory filled with NaN before each workgroup"),
    ];

    /// `(key, value, what)` rows for `ddl info` and `ddl bench`.
    pub fn table(&self) -> Vec<(&'static str, String, &'static str)> {
        let b = |x: bool| if x { "on".to_string() } else { "off".to_string() };
        let opt = |x: Option<usize>| x.map_or("rule".to_string(), |n| n.to_string());
        let value = |key: &str| -> String {
            match key {
                "attention" => match self.attention {
                    AttentionForm::Tiled => "tiled".into(),
                    AttentionForm::Blocked(r) => format!("blocked:{r}"),
                    AttentionForm::Causal => "causal".into(),
                },
                "attn_rows" => b(self.attention_rows),
                "attn_team" => self.attention_row_team.to_string(),
                "causal_lpt" => b(self.causal_lpt),
                "norm_rows" => b(self.norm_one_row_per_invocation),
                "norm_team" => opt(self.norm_team),
                "norm_quads" => b(self.norm_quads),
                "norm_heads" => b(self.norm_heads),
                "norm_vec" => b(self.norm_vec),
                "delta_rows" => b(self.delta_one_token_per_invocation),
                "delta_seg" => opt(self.delta_segment),
                "delta_quads" => b(self.delta_quads),
                "delta_packed" => b(self.delta_packed),
                "subgroup_loads" => b(self.subgroup_loads),
                "ce_rows" => b(self.ce_one_row_per_invocation),
                "ce_tpr" => opt(self.ce_threads_per_row),
                "col_sum_seq" => self.col_sum_seq_rows.to_string(),
                "sum_squares_seq" => b(self.sum_squares_seq),
                "conv_quads" => b(self.conv_quads),
                "conv_sweep" => b(self.conv_sweep),
                "conv_fwd_chunk" => self.conv_forward_chunk.to_string(),
                "conv_k4" => b(self.conv_k4),
                "conv_finish_wide" => b(self.conv_finish_wide),
                "conv_batch" => b(self.conv_batch),
                "rope_vec4" => b(self.rope_vec4),
                "swiglu_vec4" => b(self.swiglu_vec4),
                "adamw_vec4" => b(self.adamw_vec4),
                "matmul_subgroup" => b(self.matmul_subgroup),
                "matmul_f16_weights" => b(self.matmul_f16_weights),
                "f16_acts" => b(self.f16_acts),
                "attn_p16" => b(self.attn_p16),
                "head_f16" => b(self.head_f16),
                "residual_fused" => b(self.residual_fused),
                "matmul_coop" => b(self.matmul_coop),
                "matmul_coop_v" => b(self.matmul_coop_v),
                "matmul_coop_v2" => b(self.matmul_coop_v2),
                "split_k_tiles" => self.split_k_tiles.to_string(),
                "shader_checks" => b(self.shader_checks),
                "unchecked" => self.unchecked_spec(),
                "wg_zero" => b(self.wg_zero),
                "wg_poison" => b(self.wg_poison),
                _ => unreachable!("every key has a value"),
            }
        };
        Self::KEYS.iter().map(|&(k, what)| (k, value(k), what)).collect()
    }

    /// The table as text (`ddl info`, `ddl bench`).
    pub fn describe(&self) -> String {
        let mut s = format!(
            "kernel forms ({} adapter; DDL_FORMS=\"key=value,...\" overrides):\n",
            if self.cpu { "CPU" } else { "GPU" }
        );
        let table = self.table();
        // Keys and values aligned on the longest of each (`matmul_f16_weights` is 18 wide).
        let kw = table.iter().map(|(k, _, _)| k.len()).max().unwrap_or(0);
        let vw = table.iter().map(|(_, v, _)| v.chars().count()).max().unwrap_or(0).max(10);
        for (k, v, what) in table {
            let _ = writeln!(s, "  {k:<kw$} {v:<vw$} {what}");
        }
        for m in &self.measured {
            let _ = writeln!(s, "  measured on {}: {} ({})", m.device, m.forms, m.evidence);
        }
        s
    }

    /// The table as one JSON object (`ddl bench --json`).
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("bench".into(), "forms".into());
        for (k, v, _) in self.table() {
            m.insert(k.into(), v.into());
        }
        serde_json::Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `f.describe()` has the row `key` with the value `value` (columns as printed).
    fn shows(f: &Forms, key: &str, value: &str) -> bool {
        f.describe().lines().any(|l| {
            let mut w = l.split_whitespace();
            w.next() == Some(key) && w.next() == Some(value)
        })
    }

    #[test]
    fn measured_entries_parse_and_apply_by_name() {
        let f = wgpu::Features::SUBGROUP;
        let gpu = Forms::defaults(false, (32, 32), f);
        for m in MEASURED {
            let mut g = gpu.clone();
            g.apply(m.forms, f).unwrap_or_else(|e| panic!("MEASURED {m:?}: {e}"));
            assert_ne!(g, gpu, "{m:?} changes nothing");
            let named = gpu.clone().with_measured(&format!("NVIDIA {}", m.device), f);
            assert!(named.measured.contains(&m), "{m:?}");
            assert!(named.describe().contains(m.forms) && named.describe().contains(m.evidence));
        }
        let h200 = gpu.clone().with_measured("NVIDIA H200", f);
        assert_eq!((gpu.split_k_tiles, h200.split_k_tiles), (256, 512));
        assert!(gpu.checks("matmul") && !h200.checks("matmul") && !h200.checks("norm") && !h200.checks("adamw"));
        assert!(!h200.checks("delta") && !h200.checks("shortconv"), "every module unchecked since GPU run 5");
        assert!(shows(&h200, "unchecked", "all"));
        assert_eq!(h200.attention, AttentionForm::Causal);
        assert_eq!(gpu.attention, AttentionForm::Blocked(crate::kernels::attention::GPU_BLOCK_ROWS));
        // GPU defaults since run 5 (every GPU), CPU adapters unchanged.
        assert!(gpu.norm_vec && gpu.attention_row_team == 32);
        assert_eq!(gpu.clone().with_measured("NVIDIA GeForce RTX 4090", f), gpu, "another device keeps the defaults");
        let cpu = Forms::defaults(true, (8, 8), f);
        assert!(!cpu.norm_vec && cpu.attention_row_team == 0);
        assert_eq!(cpu.clone().with_measured("H200", f), cpu, "CPU adapters take no GPU measurements");
        // DDL_FORMS still overrides a measured form.
        let mut o = h200.clone();
        o.apply("split_k_tiles=256", f).unwrap();
        assert_eq!(o.split_k_tiles, 256);
        // measured=DEVICE: another card's forms on this one, where it stands in the list, listed
        // as measured; an unknown device is refused, naming the devices there are.
        let h100 = gpu.clone().with_measured("NVIDIA H100 80GB HBM3", f);
        assert_eq!(h100, gpu, "no line was measured on an H100");
        let mut like = h100.clone();
        like.apply("measured=h200", f).unwrap();
        assert_eq!(like, h200, "the H200's forms and their lines");
        assert!(like.describe().contains("measured on H200: attention=causal"));
        let mut later = h100.clone();
        later.apply("measured=H200,split_k_tiles=128", f).unwrap();
        assert_eq!((later.split_k_tiles, later.attention), (128, AttentionForm::Causal));
        let mut twice = h200.clone();
        twice.apply("measured=H200", f).unwrap();
        assert_eq!(twice, h200, "an entry applied again is listed once");
        for bad in ["measured=A100", "measured="] {
            let e = h100.clone().apply(bad, f).unwrap_err();
            assert!(e.contains(bad) && e.contains("measured on: H200"), "{e}");
        }
        assert!(h100.clone().apply("nonsense=1", f).unwrap_err().contains("measured=DEVICE"));
    }

    #[test]
    fn workgroup_memory_is_neither_zeroed_nor_poisoned_unless_asked() {
        let f = wgpu::Features::SUBGROUP;
        for d in [Forms::defaults(true, (8, 8), f), Forms::defaults(false, (32, 32), f)] {
            assert!(!d.wg_zero && !d.wg_poison, "{}", d.describe());
            let mut o = d.clone();
            o.apply("wg_zero=1,wg_poison", f).unwrap();
            assert!(o.wg_zero && o.wg_poison);
            assert!(shows(&o, "wg_zero", "on") && shows(&o, "wg_poison", "on"));
        }
    }

    #[test]
    fn cpu_and_gpu_adapters_get_their_forms_and_overrides_apply() {
        let sg = wgpu::Features::SUBGROUP;
        let cpu = Forms::defaults(true, (8, 8), sg);
        let gpu = Forms::defaults(false, (32, 32), sg);
        assert!(cpu.cpu && cpu.conv_quads && cpu.subgroup_loads && cpu.matmul_subgroup);
        assert_eq!(cpu.attention, AttentionForm::Blocked(crate::kernels::attention::BLOCK_ROWS));
        assert!(!gpu.cpu && !gpu.conv_quads && !gpu.subgroup_loads && !gpu.matmul_subgroup);
        assert!(gpu.conv_finish_wide && !cpu.conv_finish_wide);
        assert_eq!(
            (gpu.attention, gpu.col_sum_seq_rows),
            (AttentionForm::Blocked(crate::kernels::attention::GPU_BLOCK_ROWS), 16)
        );
        let mut f = gpu.clone();
        f.apply("conv_quads=1, norm_team=32,attention=blocked:16,col_sum_seq=0,delta_quads=off,conv_finish_wide=0", sg)
            .unwrap();
        assert!(f.conv_quads && !f.delta_quads && !f.conv_finish_wide);
        assert_eq!((f.norm_team, f.attention, f.col_sum_seq_rows), (Some(32), AttentionForm::Blocked(16), 0));
        // The table shows every key once, with the overridden values.
        let t = f.table();
        assert_eq!(t.len(), Forms::KEYS.len());
        assert!(t.iter().any(|(k, v, _)| *k == "norm_team" && v == "32"));
        assert!(shows(&f, "attention", "blocked:16"));
        // Every row's value and description start in the same column, whatever the longest key.
        let d = f.describe();
        let columns = |l: &str| {
            let value = l[2..].find(' ').map(|e| 2 + e + l[2 + e..].find(|c| c != ' ').unwrap()).unwrap();
            let gap = value + l[value..].find(' ').unwrap();
            (value, gap + l[gap..].find(|c| c != ' ').unwrap())
        };
        let rows: Vec<_> = d.lines().skip(1).take(t.len()).map(columns).collect();
        assert!(rows.iter().all(|c| *c == rows[0]), "{d}");
        f.apply("attention=Causal", sg).unwrap();
        assert_eq!(f.attention, AttentionForm::Causal);
        assert!(shows(&f, "attention", "causal"));
    }

    #[test]
    fn unchecked_names_shaders_and_shader_checks_sets_every_module() {
        let sg = wgpu::Features::SUBGROUP;
        let gpu = Forms::defaults(false, (32, 32), sg);
        assert!(gpu.unchecked.is_empty() && crate::shaders::ALL.iter().all(|s| gpu.checks(s.name)));
        let mut f = gpu.clone();
        f.apply("unchecked=reduce+matmul+reduce", sg).unwrap();
        assert_eq!(f.unchecked, ["matmul", "reduce"], "sorted, each once");
        assert!(!f.checks("matmul") && !f.checks("reduce") && f.checks("delta"));
        assert!(shows(&f, "unchecked", "matmul+reduce"));
        // shader_checks decides for every module again: 1 all checked, 0 none.
        let mut on = f.clone();
        on.apply("shader_checks=1", sg).unwrap();
        assert!(crate::shaders::ALL.iter().all(|s| on.checks(s.name)), "{on:?}");
        let mut off = f.clone();
        off.apply("shader_checks=0", sg).unwrap();
        assert!(crate::shaders::ALL.iter().all(|s| !off.checks(s.name)));
        f.apply("unchecked=none", sg).unwrap();
        assert_eq!(f, gpu);
        assert!(shows(&f, "unchecked", "none"));
        // every shader, or every shader but some.
        f.apply("unchecked=all", sg).unwrap();
        assert!(crate::shaders::ALL.iter().all(|s| !f.checks(s.name)) && shows(&f, "unchecked", "all"));
        f.apply("unchecked=all-shortconv-delta", sg).unwrap();
        assert!(f.checks("delta") && f.checks("shortconv") && !f.checks("matmul") && !f.checks("fill"));
        assert_eq!(f.unchecked.len(), crate::shaders::ALL.len() - 2);
        assert!(shows(&f, "unchecked", "all-delta-shortconv"), "{}", f.describe());
    }

    #[test]
    fn bad_overrides_are_clear_errors() {
        let sg = wgpu::Features::SUBGROUP;
        let mut f = Forms::defaults(false, (32, 32), sg);
        for (spec, needle) in [
            ("conv_quadz=1", "unknown form 'conv_quadz'"),
            ("norm_team=3", "power of two from 1 to 256"),
            ("delta_seg=256", "power of two from 1 to 128"),
            ("attn_team=256", "or 0 (one invocation per row)"),
            ("attention=flash", "expected tiled, blocked"),
            ("attention=blocked:0", "ROWS ≥ 1"),
            ("conv_quads=maybe", "expected on or off"),
            ("conv_fwd_chunk=0", "≥ 1"),
            ("matmul_subgroup=1", "fixed size dividing 8"),
            ("unchecked=matmul+matmull", "'matmull' is not a shader (expected names joined by '+' from: fill, matmul,"),
            ("unchecked=all-deltaa", "'deltaa' is not a shader"),
            ("unchecked=allx", "expected all, or all-NAME-NAME"),
        ] {
            let e = f.apply(spec, sg).unwrap_err();
            assert!(e.contains(needle), "{spec}: {e}");
        }
        let e = f.apply("subgroup_loads=1", wgpu::Features::empty()).unwrap_err();
        assert!(e.contains("no subgroup operations"), "{e}");
        let e = f.apply("bogus", sg).unwrap_err();
        assert!(e.contains("conv_quads") && e.contains("attention"), "the keys are listed: {e}");
        // The key alone is on for an on/off form; a form that takes a value is refused alone
        // (`conv_fwd_chunk` alone was a chunk of 1 token, `split_k_tiles` alone 1 tile).
        let mut g = Forms::defaults(false, (32, 32), sg);
        g.apply("conv_quads=0", sg).unwrap();
        g.apply("conv_quads", sg).unwrap();
        assert!(g.conv_quads);
        for key in ["conv_fwd_chunk", "split_k_tiles", "col_sum_seq", "norm_team", "delta_seg", "ce_tpr", "attn_team"] {
            let e = g.apply(key, sg).unwrap_err();
            assert!(
                e.contains(&format!("{key} alone: this form takes a value")) && e.contains(&format!("{key}=VALUE")),
                "{e}"
            );
        }
    }
}
