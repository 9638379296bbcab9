//! The model on one device: the flat parameter buffer (spec names, see [`Layout`]), its gradients
//! and AdamW moments. What runs on it is recorded into programs: [`super::Program`] (training and
//! evaluation) and [`super::DecodeProgram`] (cached generation).

use std::sync::Arc;

use crate::gpu::{DType, Gpu, Result, Tensor, View};
use crate::kernels::delta::VAct;
use crate::kernels::{adamw, rope};

use super::config::{ModelConfig, VActName};
use super::params::Layout;

/// Parameters, gradients and AdamW moments of one model on one device.
pub struct Model {
    pub gpu: Arc<Gpu>,
    pub cfg: ModelConfig,
    pub layout: Layout,
    /// Flat parameter buffer (see [`Layout`]).
    pub params: Tensor,
    pub grads: Tensor,
    pub adam_m: Tensor,
    pub adam_v: Tensor,
    /// Per-64-element decay flags (u32).
    pub decay_mask: Tensor,
    /// RoPE cos/sin table for positions `0..max_seq_len`.
    pub rope_table: Tensor,
    /// Training and evaluation programs store the expanded states X in half precision
    /// ([`Model::set_state_f16`]); decoding programs always keep them in f32.
    pub state_f16: bool,
    /// The arithmetic of the linear layers' products in training and evaluation programs
    /// ([`Model::set_precision`]); decoding programs compute in f32.
    pub precision: Precision,
    /// Training programs recompute cheap activations in the backward instead of keeping one
    /// per layer ([`Model::set_recompute`]).
    pub recompute: bool,
    /// Training programs compute the LM head's logits, loss and logits' gradient in slices of
    /// this many rows in the forward, 0 = all rows at once ([`Model::set_head_chunk`]).
    pub head_chunk: usize,
    /// In f16: the parameters rounded to f16, two per word (the weights f16 products read),
    /// refreshed by every training program's optimizer pass right after AdamW.
    pub params16: Option<Tensor>,
}

/// The arithmetic of the linear layers' products (`--precision`, `train.precision`): `f32`, or
/// `f16`: the attention projections, the MLP, the direction MLP of the v-Map variants and the
/// tied LM head (form `head_f16`) take f16 operands (rounded as their kernels read them) and
/// accumulate in f32. Everything else stays f32: the float32 islands of spec 10.3 (gates,
/// p = Xᵀk, norms, RoPE, softmax, the logits and the loss) and the master parameters, gradients
/// and AdamW moments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    F16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        }
    }

    /// `f32` or `f16`; the error names the setting, the value and what is allowed.
    pub fn parse(s: &str) -> std::result::Result<Precision, String> {
        match s {
            "f32" => Ok(Precision::F32),
            "f16" => Ok(Precision::F16),
            _ => Err(format!("precision '{s}': expected f32 or f16")),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Model {
    /// A model with parameters initialised from `seed` (spec section 5).
    pub fn new(gpu: Arc<Gpu>, cfg: ModelConfig, seed: u64) -> Result<Model> {
        let layout = Layout::new(&cfg);
        let init = layout.init(seed);
        Self::with_params(gpu, cfg, &init)
    }

    /// A model with the given flat parameters (length `Layout::new(&cfg).total`).
    pub fn with_params(gpu: Arc<Gpu>, cfg: ModelConfig, flat: &[f32]) -> Result<Model> {
        let layout = Layout::new(&cfg);
        let n = layout.total;
        if flat.len() != n {
            return Err(crate::gpu::GpuError::Shape(format!(
                "flat parameters have {} elements, the layout of this config needs {n}",
                flat.len()
            )));
        }
        let model = Self::zeroed(gpu, cfg)?;
        model.params.write_f32(&model.gpu, flat)?;
        Ok(model)
    }

    /// A model whose parameters (and gradients and moments) are zeros, to be written (e.g. by
    /// `checkpoint::load_to_device`, piece by piece).
    pub fn zeroed(gpu: Arc<Gpu>, cfg: ModelConfig) -> Result<Model> {
        let layout = Layout::new(&cfg);
        let n = layout.total;
        let params = Tensor::zeros(&gpu, "params", &[n], DType::F32)?;
        let grads = Tensor::zeros(&gpu, "grads", &[n], DType::F32)?;
        let adam_m = Tensor::zeros(&gpu, "adam.m", &[n], DType::F32)?;
        let adam_v = Tensor::zeros(&gpu, "adam.v", &[n], DType::F32)?;
        let mask = adamw::decay_mask(n, &layout.decay_ranges());
        let decay_mask = Tensor::from_u32(&gpu, "decay_mask", &[mask.len()], &mask)?;
        // The RoPE table is one buffer of max_seq_len × head_dim floats: over the adapter's
        // largest, the context is what to lower (said before the table is computed on the host;
        // it said only "tensor 'rope.table' … needs N bytes", after computing it).
        let rope_bytes = 4 * cfg.max_seq_len.max(1) as u64 * cfg.head_dim as u64;
        if rope_bytes > gpu.limits.max_buffer_size {
            let fit = gpu.limits.max_buffer_size / (4 * cfg.head_dim as u64);
            return Err(crate::gpu::GpuError::Unsupported(format!(
                "model.max_seq_len = {}: the RoPE table of every position (model.max_seq_len × model.head_dim = \
                 {} × {} floats, {rope_bytes} bytes) is larger than the adapter '{}' allows a buffer ({} bytes); \
                 a context of at most {fit} tokens fits it (--set model.max_seq_len={fit} or less when training)",
                cfg.max_seq_len, cfg.max_seq_len, cfg.head_dim, gpu.info.name, gpu.limits.max_buffer_size
            )));
        }
        let rope_table = rope::table(&gpu, cfg.max_seq_len.max(1), cfg.head_dim, cfg.rope_base)?;
        Ok(Model {
            gpu,
            cfg,
            layout,
            params,
            grads,
            adam_m,
            adam_v,
            decay_mask,
            rope_table,
            state_f16: false,
            precision: Precision::F32,
            recompute: false,
            head_chunk: 0,
            params16: None,
        })
    }

    /// Stores the expanded states X of later training / evaluation programs in half precision
    /// (`--f16-state`): half the activation memory of the states and half their bytes moved, with
    /// every sum, the gate, the projection p = Xᵀk and the write's coefficient still in f32 (spec
    /// 10.3). Supported for the token-axis variants with replicated embeddings (`ddl`,
    /// `ddl_vmap`) at d_v = 4 on adapters with SHADER_F16 (not OpenGL).
    pub fn set_state_f16(&mut self, on: bool) -> Result<()> {
        if on {
            let bad = |why: String, remedy: &str| {
                Err(crate::gpu::GpuError::Unsupported(format!("f16 states: {why}; keep them in f32 ({remedy})")))
            };
            self.cfg.f16_state_support().or_else(|why| bad(why, "drop --f16-state"))?;
            // The adapter's refusal meets f16 states implied by `--precision f16` too (where the
            // variant has them; a caller that sets the precision first has its own words): the
            // remedy names both.
            let remedy = "drop --f16-state; with --precision f16, which implies them, use --precision f32";
            if !self.gpu.features.contains(wgpu::Features::SHADER_F16) {
                let why = format!("adapter '{}' has no SHADER_F16 (half-precision shaders)", self.gpu.info.name);
                return bad(why, remedy);
            }
            if self.gpu.info.backend == wgpu::Backend::Gl {
                return bad("not supported on the OpenGL backend (choose another with --backend)".into(), remedy);
            }
        }
        self.state_f16 = on;
        Ok(())
    }

    /// Later training programs (`--recompute`, `train.recompute`) keep one buffer, shared by
    /// every layer, for what an elementwise pass or a norm rebuilds from what they keep anyway —
    /// each sublayer's normed input c (and, expanded, its compressed input a), the QK norms'
    /// outputs and the SwiGLU output ψ — and rebuild it in the backward just before it is read,
    /// by the kernels that made it in the forward: the same bits, and the same losses, gradients
    /// and parameters, for one more pass over them per sublayer ([`crate::model::memory_plan_for`]
    /// says what it saves).
    pub fn set_recompute(&mut self, on: bool) {
        self.recompute = on;
    }

    /// Later training programs (`--head-chunk ROWS`, `train.head_chunk`) never hold the logits
    /// of the whole batch: the forward computes the tied LM head in slices of `rows` rows — a
    /// slice's logits, its rows' losses, the logits' gradient written over them, that gradient's
    /// share of the embedding's gradient and of ∂zn — before the next slice reuses the buffer
    /// (as Liger's fused linear cross-entropy does), and the backward starts at the final norm.
    /// The logits buffer holds `rows` rows instead of B·T (the largest activation of a model with
    /// a big vocabulary: 1.65 GB at small-124m's 8 × 1024); the loss and every row's gradient are
    /// the same bits, the embedding's gradient sums the slices' products in float32 (a rounding
    /// apart). 0, or `rows` ≥ B·T, computes all rows at once. Evaluation programs over a chunked
    /// training program's activations compute the loss in the same slices.
    pub fn set_head_chunk(&mut self, rows: usize) {
        self.head_chunk = rows;
    }

    /// Computes the linear layers of later training and evaluation programs in `p`
    /// ([`Precision`]); f16 needs SHADER_F16 (not OpenGL).
    pub fn set_precision(&mut self, p: Precision) -> Result<()> {
        if p == Precision::F16 {
            let bad = |why: String| Err(crate::gpu::GpuError::Unsupported(format!("precision f16: {why}")));
            if !self.gpu.features.contains(wgpu::Features::SHADER_F16) {
                return bad(format!(
                    "adapter '{}' has no SHADER_F16 (half-precision shaders); use --precision f32",
                    self.gpu.info.name
                ));
            }
            if self.gpu.info.backend == wgpu::Backend::Gl {
                return bad(
                    "not supported on the OpenGL backend; use --precision f32 (or another backend, --backend)".into()
                );
            }
        }
        self.precision = p;
        self.params16 = None;
        if p == Precision::F16 && self.gpu.forms.matmul_f16_weights {
            let t = Tensor::zeros(&self.gpu, "params.f16", &[self.layout.total.div_ceil(2)], DType::U32)?;
            self.params16 = Some(t);
            self.refresh_params16()?;
        }
        Ok(())
    }

    /// Rewrites the f16 copy of the parameters from them now (after the host wrote parameters
    /// while in f16; training programs refresh it themselves after every AdamW step).
    pub fn refresh_params16(&self) -> Result<()> {
        if let Some(t) = &self.params16 {
            let ds = crate::kernels::elementwise::pack_f16(&self.gpu, self.params.view(), t.view(), self.layout.total)?;
            self.gpu.run(&ds.iter().collect::<Vec<_>>())?;
        }
        Ok(())
    }

    /// Parameter `name` in the f16 copy: an aligned view that holds it and its offset there in
    /// f16 elements (a multiple of 4 wherever the adapter's binding alignment allows); `None` in f32.
    pub(crate) fn pv16(&self, name: &str) -> Option<(View<'_>, usize)> {
        let t = self.params16.as_ref()?;
        let (o, n) = self.layout.range(name);
        let q = crate::kernels::reduce::align_elems(&self.gpu);
        let start = (o / 2) / q * q;
        let rem = o - 2 * start;
        Some((t.view().sub(start, (rem + n).div_ceil(2)), rem))
    }

    /// The parameter `name` (a spec name) as a view of the flat buffer.
    pub(crate) fn pv(&self, name: &str) -> View<'_> {
        let (o, n) = self.layout.range(name);
        self.params.view().sub(o, n)
    }

    /// The gradient of parameter `name` as a view of the flat gradient buffer.
    pub(crate) fn gv(&self, name: &str) -> View<'_> {
        let (o, n) = self.layout.range(name);
        self.grads.view().sub(o, n)
    }

    /// The flat parameters on the host.
    pub fn read_params(&self) -> Result<Vec<f32>> {
        self.params.read_f32(&self.gpu)
    }

    pub(crate) fn v_act(&self) -> VAct {
        match self.cfg.v_act {
            VActName::Sigmoid4 => VAct::Sigmoid4,
            VActName::Sigmoid => VAct::Sigmoid,
            VActName::Linear => VAct::Linear,
        }
    }
}
