//! Cached decoding (spec section 7): per-layer KV caches (keys after RoPE and QK-norm, values)
//! and, per variant, the conv buffers of the token-axis compressors, the readout and the EC
//! embedding expansion — the last K−1 inputs of each, zero at the start of a sequence. A prompt is
//! prefilled in one batched forward; then each token is one forward over a single position.

use crate::gpu::{DType, Op, Recorder, Result, Tensor};
use crate::kernels::adamw::AdamWConfig;
use crate::kernels::attention::{self, AttnShape};
use crate::kernels::rope::{self, RopeShape};

use super::gpu_model::{Model, Program};

/// The cache of one sequence.
pub struct DecodeCache {
    /// Positions cached so far (= the RoPE position of the next token).
    pub pos: usize,
    /// Longest sequence the cache holds (the model's max_seq_len).
    pub capacity: usize,
    pub kcache: Vec<Tensor>,
    pub vcache: Vec<Tensor>,
    /// Last K_s−1 states entering each token-axis compressor: boundary 2l (attention side of
    /// block l), 2l+1 (MLP side), 2L (readout). Empty tensors for other variants.
    pub hist: Vec<Tensor>,
    /// Last K_e−1 raw embeddings (EC variants).
    pub ehist: Option<Tensor>,
}

/// Windows and cache handles a decode chunk program binds (held by [`Program::decode`]).
pub struct DecodeBufs {
    pub capacity: usize,
    pub kcache: Vec<Tensor>,
    pub vcache: Vec<Tensor>,
    pub hist: Vec<Tensor>,
    pub xwin: Vec<Tensor>,
    pub awin: Vec<Tensor>,
    pub ehist: Option<Tensor>,
    pub ewin: Option<Tensor>,
    pub x0win: Option<Tensor>,
}

impl Model {
    /// An empty cache (all zeros) for one sequence.
    pub fn decode_cache(&self) -> Result<DecodeCache> {
        let c = &self.cfg;
        let g = &*self.gpu;
        let cap = c.max_seq_len;
        let dq = c.qk_dim();
        let token_axis = c.variant.expanded() && !c.variant.value_axis();
        let mut kcache = Vec::new();
        let mut vcache = Vec::new();
        for l in 0..c.n_layers {
            kcache.push(Tensor::zeros(g, &format!("kcache{l}"), &[cap, dq], DType::F32)?);
            vcache.push(Tensor::zeros(g, &format!("vcache{l}"), &[cap, dq], DType::F32)?);
        }
        let k1 = if token_axis { c.state_kernel - 1 } else { 0 };
        let hist = (0..=2 * c.n_layers)
            .map(|i| Tensor::zeros(g, &format!("hist{i}"), &[k1, c.d_model, c.m()], DType::F32))
            .collect::<Result<Vec<_>>>()?;
        let ehist = if c.variant.ec() {
            Some(Tensor::zeros(g, "ehist", &[c.embed_kernel - 1, c.d_model], DType::F32)?)
        } else {
            None
        };
        Ok(DecodeCache { pos: 0, capacity: cap, kcache, vcache, hist, ehist })
    }

    /// A program that runs `q` new tokens of one sequence through the model with `cache`.
    pub fn decode_program(&self, cache: &DecodeCache, q: usize) -> Result<Program> {
        let c = &self.cfg;
        let g = &*self.gpu;
        let token_axis = c.variant.expanded() && !c.variant.value_axis();
        let k1 = if token_axis { c.state_kernel - 1 } else { 0 };
        let (d, m) = (c.d_model, c.m());
        let mut xwin = Vec::new();
        let mut awin = Vec::new();
        for i in 0..=2 * c.n_layers {
            xwin.push(Tensor::zeros(g, &format!("xwin{i}"), &[k1 + q, d, m], DType::F32)?);
            awin.push(Tensor::zeros(g, &format!("awin{i}"), &[k1 + q, d], DType::F32)?);
        }
        let ke1 = c.embed_kernel.saturating_sub(1);
        let (ewin, x0win) = if c.variant.ec() {
            (
                Some(Tensor::zeros(g, "ewin", &[ke1 + q, d], DType::F32)?),
                Some(Tensor::zeros(g, "x0win", &[ke1 + q, d, m], DType::F32)?),
            )
        } else {
            (None, None)
        };
        let bufs = DecodeBufs {
            capacity: cache.capacity,
            kcache: cache.kcache.clone(),
            vcache: cache.vcache.clone(),
            hist: cache.hist.clone(),
            xwin,
            awin,
            ehist: cache.ehist.clone(),
            ewin,
            x0win,
        };
        let opt = AdamWConfig::inference();
        self.program_decode(q, &opt, bufs)
    }

    /// Runs the `q` tokens of `tokens` (q = the program's length) at the cache's position and
    /// advances the cache; returns the logits `[q, V]`.
    pub fn decode(&self, p: &mut Program, cache: &mut DecodeCache, tokens: &[u32]) -> Result<Vec<f32>> {
        let q = p.t;
        let c = &self.cfg;
        if tokens.len() != q {
            return Err(crate::gpu::GpuError::Shape(format!("decode program takes {q} tokens, got {}", tokens.len())));
        }
        if cache.pos + q > cache.capacity {
            return Err(crate::gpu::GpuError::Shape(format!(
                "the context is full: {} cached + {q} new tokens exceed max_seq_len {}",
                cache.pos, cache.capacity
            )));
        }
        let x: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let y = vec![-1i32; q];
        p.set_batch(self, &x, &y)?;
        let pos0 = cache.pos;
        let dq = c.qk_dim();
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        let rs = RopeShape { rows: q, seq_len: q, heads: c.n_heads, head_dim: c.head_dim, pos0 };
        let at = AttnShape {
            batch: 1,
            heads: c.n_heads,
            head_dim: c.head_dim,
            q_len: q,
            kv_len: pos0 + q,
            kv_stride: cache.capacity,
            q_pos0: pos0,
        };
        let kc: Vec<_> = cache.kcache.iter().map(|t| t.buffer.clone()).collect();
        let vc: Vec<_> = cache.vcache.iter().map(|t| t.buffer.clone()).collect();
        for op in p.forward.iter_mut() {
            match op {
                Op::Run(d) if d.kernel.name.starts_with("rope[") => {
                    rope::set_pos0(&self.gpu, std::slice::from_ref(d), &rs)?
                }
                Op::Run(d) if attention::is_forward(d) => {
                    attention::set_kv(&self.gpu, std::slice::from_ref(d), &at, scale)?
                }
                Op::Copy { dst, dst_off, len, .. }
                    if *len == q * dq
                        && (kc.iter().any(|b| std::sync::Arc::ptr_eq(b, &dst.buffer))
                            || vc.iter().any(|b| std::sync::Arc::ptr_eq(b, &dst.buffer))) =>
                {
                    *dst_off = pos0 * dq
                }
                _ => {}
            }
        }
        let mut r = Recorder::new(&self.gpu);
        r.ops(&p.forward);
        if let Some(rb) = &p.logits_rb {
            // The logits come back with the forward: one submit, no allocation per token.
            r.read_into(rb);
            r.submit()?;
            cache.pos += q;
            return rb.read_f32(&self.gpu);
        }
        r.submit()?;
        self.gpu.wait()?;
        cache.pos += q;
        p.logits.read_f32(&self.gpu)
    }
}
