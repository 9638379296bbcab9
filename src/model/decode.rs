//! Cached decoding (spec section 7): per-layer KV caches (keys after RoPE and QK-norm, values)
//! and, per variant, the conv buffers of the token-axis compressors, the readout and the EC
//! embedding expansion — the last K−1 inputs of each, zero at the start of a sequence. A prompt is
//! prefilled in one batched forward; then each token is one forward over a single position.
//!
//! A [`DecodeProgram`] is forward-only and owns no training state: `forward(model, tokens,
//! &mut cache)` as candle's models do, its logits copied back in the same submit, blocking or
//! awaited ([`DecodeProgram::forward_async`], for a browser's event loop).

use std::ops::Range;

use crate::gpu::{DType, Op, Readback, Recorder, Result, Tensor, Wait};
use crate::kernels::attention::{self, AttnShape};
use crate::kernels::matmul;
use crate::kernels::rope::{self, RopeShape};

use super::acts::{Acts, Purpose, SubKind};
use super::layers::{self, Objective, Rec};
use super::memory::k_pieces_scratch_elems;
use super::model::Model;

/// The cache of one sequence.
pub struct DecodeCache {
    /// Positions cached so far (= the RoPE position of the next token).
    pub pos: usize,
    /// The β map of every sublayer (2l: block l's attention, 2l + 1 its MLP) that decode programs
    /// made for this cache apply: interventions ([`super::Interventions::maps`]); `None`: the
    /// model's own gates.
    pub beta_maps: Option<Vec<crate::kernels::delta::BetaMap>>,
    /// A fixed write direction k̃ `[d]` per sublayer (same indexing) that decode programs made for
    /// this cache copy into the write's input before the write (`k=mean` interventions); empty:
    /// none.
    pub k_fixed: Vec<Option<Tensor>>,
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

/// Windows and cache handles a decode program binds.
pub(crate) struct DecodeBufs {
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

/// A forward-only program over `q` new tokens of one sequence, bound to a [`DecodeCache`].
pub struct DecodeProgram {
    acts: Acts,
    bufs: DecodeBufs,
    forward: Vec<Op>,
    logits_rb: Readback,
    /// Per delta write in sublayer order: (block, sublayer, the ops that record it in
    /// `forward`). The place where per-sublayer overrides (interventions) bind.
    writes: Vec<(usize, SubKind, Range<usize>)>,
}

/// Whether `gpu` holds the decode caches of `c`'s whole context: the keys (and the values) of
/// every position, one buffer of max_seq_len × H·h floats per layer. The error names the
/// context, the adapter's limit and the context that fits (it said only "tensor 'kcache0' …
/// needs N bytes", after `ddl generate` had printed the prompt, and `ddl train --sample` after
/// the whole run).
pub fn check_decode_cache(c: &super::ModelConfig, gpu: &crate::gpu::Gpu) -> Result<()> {
    let limits = &gpu.limits;
    let row = 4 * c.qk_dim() as u64;
    let bytes = c.max_seq_len as u64 * row;
    if bytes > limits.max_buffer_size {
        let fit = limits.max_buffer_size / row;
        return Err(crate::gpu::GpuError::Unsupported(format!(
            "this model's context, model.max_seq_len = {} tokens, needs decode caches of {} × {} floats \
             ({bytes} bytes) per layer for the keys and as much for the values, more than the adapter '{}' \
             allows a buffer ({} bytes): generating with it (ddl generate, ddl chat) needs an adapter with \
             larger buffers, or a model trained with a context of at most {fit} tokens \
             (--set model.max_seq_len={fit}); `ddl eval` scores texts with it here",
            c.max_seq_len,
            c.max_seq_len,
            c.qk_dim(),
            gpu.info.name,
            limits.max_buffer_size
        )));
    }
    Ok(())
}

impl Model {
    /// Whether this adapter holds the model's decode caches ([`check_decode_cache`]).
    pub fn check_decode_cache(&self) -> Result<()> {
        check_decode_cache(&self.cfg, &self.gpu)
    }

    /// An empty cache (all zeros) for one sequence.
    pub fn decode_cache(&self) -> Result<DecodeCache> {
        self.check_decode_cache()?;
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
        Ok(DecodeCache { pos: 0, beta_maps: None, k_fixed: Vec::new(), capacity: cap, kcache, vcache, hist, ehist })
    }

    /// A program that runs `q` new tokens of one sequence through the model with `cache`.
    pub fn decode_program(&self, cache: &DecodeCache, q: usize) -> Result<DecodeProgram> {
        let c = &self.cfg;
        let g = &*self.gpu;
        if q > c.max_seq_len {
            return Err(crate::gpu::GpuError::Shape(format!(
                "a decode program of {q} tokens exceeds the model's max_seq_len {}",
                c.max_seq_len
            )));
        }
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
        // As a training program does: the products' K-pieces scratch at its largest first.
        let kp = k_pieces_scratch_elems(&self.layout, q, &[matmul::KSplit::of(g)]);
        if kp > 0 {
            g.shared_scratch(matmul::K_PIECES_SCRATCH, kp)?;
        }
        let acts = Acts::new(self, 1, q, Purpose::Decode)?;
        let mut r = Rec::new(self, &acts, Objective { label_smoothing: 0.0, loss_scale: 1.0 }, Some(&bufs));
        if let Some(maps) = &cache.beta_maps {
            if maps.len() != 2 * c.n_layers {
                return Err(crate::gpu::GpuError::Shape(format!(
                    "{} β maps for a model of {} sublayers",
                    maps.len(),
                    2 * c.n_layers
                )));
            }
            r.beta_maps = Some(maps.as_slice());
        }
        if !cache.k_fixed.is_empty() {
            if cache.k_fixed.len() != 2 * c.n_layers {
                return Err(crate::gpu::GpuError::Shape(format!(
                    "{} fixed directions for a model of {} sublayers",
                    cache.k_fixed.len(),
                    2 * c.n_layers
                )));
            }
            r.k_fixed = Some(cache.k_fixed.as_slice());
        }
        layers::forward(&mut r)?;
        let (forward, writes) = (std::mem::take(&mut r.ops), std::mem::take(&mut r.writes));
        let logits_rb = Readback::new(&self.gpu, &acts.logits);
        Ok(DecodeProgram { acts, bufs, forward, logits_rb, writes })
    }
}

impl DecodeProgram {
    /// Tokens per call.
    pub fn len(&self) -> usize {
        self.acts.t
    }

    pub fn is_empty(&self) -> bool {
        self.acts.t == 0
    }

    /// The activations and write saves of the last call (β, k, v of every delta write).
    pub fn acts(&self) -> &Acts {
        &self.acts
    }

    /// The delta writes' ops in the forward, per sublayer: where per-sublayer overrides apply.
    pub fn write_ops(&self) -> impl Iterator<Item = (usize, SubKind, &[Op])> {
        self.writes.iter().map(|(l, k, r)| (*l, *k, &self.forward[r.clone()]))
    }

    /// Runs `tokens` (as many as the program's length) at the cache's position and advances
    /// the cache; returns the logits `[q, V]`. Blocks until they are back.
    pub fn forward(&mut self, model: &Model, tokens: &[u32], cache: &mut DecodeCache) -> Result<Vec<f32>> {
        self.submit(model, tokens, cache)?;
        self.logits_rb.read_f32(&model.gpu)
    }

    /// [`DecodeProgram::forward`] whose logits are awaited instead of blocking the thread.
    pub async fn forward_async(&mut self, model: &Model, tokens: &[u32], cache: &mut DecodeCache) -> Result<Vec<f32>> {
        self.forward_with(model, tokens, cache, Wait::Await).await
    }

    /// [`DecodeProgram::forward`] or [`DecodeProgram::forward_async`], as `wait` says.
    pub async fn forward_with(
        &mut self,
        model: &Model,
        tokens: &[u32],
        cache: &mut DecodeCache,
        wait: Wait,
    ) -> Result<Vec<f32>> {
        self.submit(model, tokens, cache)?;
        self.logits_rb.read_f32_with(&model.gpu, wait).await
    }

    /// Sets the cache position in the recorded ops, submits the forward with the logits' copy
    /// (one submit, no allocation per token) and advances the cache.
    fn submit(&mut self, model: &Model, tokens: &[u32], cache: &mut DecodeCache) -> Result<()> {
        let q = self.acts.t;
        let c = &model.cfg;
        if tokens.len() != q {
            return Err(crate::gpu::GpuError::Shape(format!("decode program takes {q} tokens, got {}", tokens.len())));
        }
        if cache.pos + q > cache.capacity {
            return Err(crate::gpu::GpuError::Shape(format!(
                "the context is full: {} cached + {q} new tokens exceed max_seq_len {}",
                cache.pos, cache.capacity
            )));
        }
        let same =
            |a: &[Tensor], b: &[Tensor]| a.iter().zip(b).all(|(x, y)| std::sync::Arc::ptr_eq(&x.buffer, &y.buffer));
        if !same(&cache.kcache, &self.bufs.kcache) || !same(&cache.hist, &self.bufs.hist) {
            return Err(crate::gpu::GpuError::Shape(
                "this decode program was made for another cache: make it with Model::decode_program(&cache, q)".into(),
            ));
        }
        let x: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let y = vec![-1i32; q];
        self.acts.set_batch(model, &x, &y)?;
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
            half: false,
        };
        let kc: Vec<_> = cache.kcache.iter().map(|t| t.buffer.clone()).collect();
        let vc: Vec<_> = cache.vcache.iter().map(|t| t.buffer.clone()).collect();
        for op in self.forward.iter_mut() {
            match op {
                Op::Run(d) if d.kernel.name.starts_with("rope[") => {
                    rope::set_pos0(&model.gpu, std::slice::from_ref(d), &rs)?
                }
                Op::Run(d) if attention::is_forward(d) => {
                    attention::set_kv(&model.gpu, std::slice::from_ref(d), &at, scale)?
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
        let mut r = Recorder::new(&model.gpu);
        r.ops(&self.forward);
        r.read_into(&self.logits_rb);
        r.submit()?;
        cache.pos += q;
        Ok(())
    }
}
