//! Parameters: the spec's names and shapes (section 5, 14.5), initialisation, and the flat
//! layout that carves one buffer into named tensors. Gradients and both AdamW moments use the
//! same layout, so the optimizer and the gradient norm are single passes over flat buffers.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal, Uniform};

use super::config::ModelConfig;

/// Every tensor starts at a multiple of this many elements (256 bytes): any adapter's
/// `min_storage_buffer_offset_alignment` is at most 256, so each tensor can be bound alone.
pub const ALIGN: usize = 64;

/// How a tensor is initialised (spec section 5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    Normal(f64),
    Uniform(f64),
    Const(f64),
    /// EC expansion: tap K−1 = 1, other taps 0.
    EcIdentity,
}

/// One named parameter tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
    /// Gets weight decay (every tensor with ≥ 2 dims, spec 9.2).
    pub decay: bool,
}

impl ParamSpec {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The spec's parameter list in canonical order (golden `params` order).
pub fn specs(c: &ModelConfig) -> Vec<ParamSpec> {
    let d = c.d_model;
    let dq = c.qk_dim();
    let m = c.m();
    let sigma_h = c.init_std_factor / (d as f64).sqrt();
    let sigma_o = sigma_h / (c.n_layers as f64).sqrt();
    let mut v = Vec::new();
    let mut p = |name: String, shape: Vec<usize>, init: Init| {
        let decay = shape.len() >= 2;
        v.push(ParamSpec { name, shape, init, decay });
    };
    p("tok_emb".into(), vec![c.vocab_size, d], Init::Normal(c.embed_init_std));
    if c.variant.ec() {
        p("embed_expand.kernel".into(), vec![d, m, c.embed_kernel], Init::EcIdentity);
    }
    let compressor = |p: &mut dyn FnMut(String, Vec<usize>, Init), prefix: &str| {
        let shape = if c.variant.value_axis() { vec![d, c.state_kernel] } else { vec![d, m, c.state_kernel] };
        p(format!("{prefix}.kernel"), shape, Init::Normal(sigma_h));
        p(format!("{prefix}.read"), vec![m], Init::Const(1.0 / m as f64));
    };
    for i in 0..c.n_layers {
        let b = format!("blocks.{i}");
        if c.variant.expanded() {
            compressor(&mut p, &format!("{b}.compress"));
        }
        p(format!("{b}.attn_norm.gain"), vec![d], Init::Const(1.0));
        p(format!("{b}.attn.wq"), vec![dq, d], Init::Normal(sigma_h));
        p(format!("{b}.attn.wk"), vec![dq, d], Init::Normal(sigma_h));
        p(format!("{b}.attn.wv"), vec![dq, d], Init::Normal(sigma_h));
        p(format!("{b}.attn.wo"), vec![d, dq], Init::Normal(sigma_o));
        p(format!("{b}.attn.q_norm.gain"), vec![c.head_dim], Init::Const(1.0));
        p(format!("{b}.attn.k_norm.gain"), vec![c.head_dim], Init::Const(1.0));
        p(format!("{b}.mlp_norm.gain"), vec![d], Init::Const(1.0));
        p(format!("{b}.mlp.w_gate"), vec![c.mlp_hidden, d], Init::Normal(sigma_h));
        p(format!("{b}.mlp.w_up"), vec![c.mlp_hidden, d], Init::Normal(sigma_h));
        p(format!("{b}.mlp.w_down"), vec![d, c.mlp_hidden], Init::Normal(sigma_o));
        if c.variant.is_ddl() {
            let beta0 = c.beta_init.clamp(0.0, 2.0);
            let pb = (beta0 / 2.0).clamp(1e-6, 1.0 - 1e-6);
            let b_beta = pb.ln() - (1.0 - pb).ln();
            for s in ["attn", "mlp"] {
                let q = format!("{b}.{s}_delta");
                p(format!("{q}.w_beta"), vec![1, d], Init::Normal(sigma_h));
                p(format!("{q}.b_beta"), vec![1], Init::Const(b_beta));
                if c.variant.vmap() {
                    let hk = c.k_mlp_hidden;
                    p(format!("{q}.w_k1"), vec![hk, d], Init::Normal(sigma_h));
                    p(format!("{q}.w_k2"), vec![d, hk], Init::Normal(c.k_rezero_scale / (hk as f64).sqrt()));
                }
                p(format!("{q}.w_v"), vec![m, d], Init::Normal(sigma_h));
                p(format!("{q}.b_v"), vec![m], Init::Uniform(1.0 / (d as f64).sqrt()));
            }
        }
    }
    if c.variant.expanded() {
        compressor(&mut p, "readout");
    }
    p("final_norm.gain".into(), vec![d], Init::Const(1.0));
    v
}

/// Where each parameter lives in the flat buffer.
#[derive(Debug, Clone)]
pub struct Layout {
    pub specs: Vec<ParamSpec>,
    /// Element offset of each spec (multiples of [`ALIGN`]).
    pub offsets: Vec<usize>,
    /// Elements of the flat buffer (padding included).
    pub total: usize,
}

impl Layout {
    pub fn new(c: &ModelConfig) -> Layout {
        let specs = specs(c);
        let mut offsets = Vec::with_capacity(specs.len());
        let mut off = 0;
        for s in &specs {
            offsets.push(off);
            off += s.len().div_ceil(ALIGN) * ALIGN;
        }
        Layout { specs, offsets, total: off.max(ALIGN) }
    }

    /// Index of a parameter by name.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.specs.iter().position(|s| s.name == name)
    }

    /// `(offset, len)` of block `l`'s parameters, which are contiguous in the flat buffer
    /// (alignment padding included); `None` when there is no such block.
    pub fn block_range(&self, l: usize) -> Option<(usize, usize)> {
        let prefix = format!("blocks.{l}.");
        let first = self.specs.iter().position(|s| s.name.starts_with(&prefix))?;
        let after = (first..self.specs.len()).find(|&i| !self.specs[i].name.starts_with(&prefix));
        let end = after.map_or(self.total, |i| self.offsets[i]);
        Some((self.offsets[first], end - self.offsets[first]))
    }

    /// `(offset, len)` of a parameter by name; panics with the name when it does not exist
    /// (model code asks only for names it built).
    pub fn range(&self, name: &str) -> (usize, usize) {
        let i = self.index(name).unwrap_or_else(|| panic!("no parameter named '{name}' in this model"));
        (self.offsets[i], self.specs[i].len())
    }

    /// Number of parameters (padding excluded).
    pub fn count(&self) -> usize {
        self.specs.iter().map(|s| s.len()).sum()
    }

    /// Per-64-element-block decay flags for AdamW.
    pub fn decay_ranges(&self) -> Vec<(usize, usize)> {
        self.specs.iter().zip(&self.offsets).filter(|(s, _)| s.decay).map(|(s, &o)| (o, s.len())).collect()
    }

    /// Initial values (spec section 5), deterministic in `seed`, as a flat host vector.
    pub fn init(&self, seed: u64) -> Vec<f32> {
        let mut flat = vec![0.0f32; self.total];
        for (i, (s, &off)) in self.specs.iter().zip(&self.offsets).enumerate() {
            // One stream per tensor: adding a tensor does not change the others' values.
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let out = &mut flat[off..off + s.len()];
            match s.init {
                Init::Normal(std) => {
                    let n = Normal::new(0.0, std).unwrap();
                    out.iter_mut().for_each(|x| *x = n.sample(&mut rng) as f32);
                }
                Init::Uniform(a) => {
                    let u = Uniform::new(-a, a).unwrap();
                    out.iter_mut().for_each(|x| *x = u.sample(&mut rng) as f32);
                }
                Init::Const(c) => out.iter_mut().for_each(|x| *x = c as f32),
                Init::EcIdentity => {
                    let k = *s.shape.last().unwrap();
                    for (e, x) in out.iter_mut().enumerate() {
                        *x = if e % k == k - 1 { 1.0 } else { 0.0 };
                    }
                }
            }
        }
        flat
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::{ModelConfig, Variant};

    #[test]
    fn parameter_counts_match_the_spec_table_for_small_and_medium() {
        // Spec tables 5.4 and 14.6.
        let want = [
            (Variant::Baseline, 123_590_400, 353_508_352),
            (Variant::DdlV1, 123_627_312, 353_606_752),
            (Variant::Ddl, 123_842_476, 354_164_052),
            (Variant::DdlEc, 123_854_764, 354_180_436),
            (Variant::DdlCc, 123_722_668, 353_856_852),
            (Variant::DdlCcec, 123_734_956, 353_873_236),
            (Variant::DdlV1Vmap, 130_705_200, 378_772_576),
            (Variant::DdlVmap, 130_920_364, 379_329_876),
        ];
        for (v, small, medium) in want {
            let s = Layout::new(&ModelConfig::preset("small-124m", v).unwrap()).count();
            let m = Layout::new(&ModelConfig::preset("medium-353m", v).unwrap()).count();
            assert_eq!((s, m), (small, medium), "{v}");
        }
    }

    #[test]
    fn offsets_are_aligned_and_disjoint() {
        let l = Layout::new(&ModelConfig::preset("tiny", Variant::DdlCcec).unwrap());
        for w in l.offsets.windows(2) {
            assert!(w[0] % ALIGN == 0 && w[1] > w[0]);
        }
        assert!(l.total >= l.offsets.last().unwrap() + l.specs.last().unwrap().len());
    }

    #[test]
    fn init_follows_the_spec_scales() {
        let c = ModelConfig::preset("shakespeare-char", Variant::DdlEc).unwrap();
        let l = Layout::new(&c);
        let p = l.init(7);
        let rms = |name: &str| {
            let (o, n) = l.range(name);
            (p[o..o + n].iter().map(|x| (*x as f64).powi(2)).sum::<f64>() / n as f64).sqrt()
        };
        let sh = 0.5 / (384f64).sqrt();
        assert!((rms("tok_emb") / 0.02 - 1.0).abs() < 0.05);
        assert!((rms("blocks.0.attn.wq") / sh - 1.0).abs() < 0.05);
        assert!((rms("blocks.0.attn.wo") / (sh / 6f64.sqrt()) - 1.0).abs() < 0.05);
        let (o, _) = l.range("blocks.0.attn_delta.b_beta");
        assert_eq!(p[o], 0.0, "β₀ = 1 gives b_β = 0");
        let (o, n) = l.range("blocks.0.compress.read");
        assert!(p[o..o + n].iter().all(|&x| x == 0.25));
        let (o, _) = l.range("embed_expand.kernel");
        assert_eq!(&p[o..o + 4], &[0.0, 0.0, 0.0, 1.0]);
        assert_eq!(l.init(7), p, "init is deterministic in the seed");
    }
}
