//! Model configuration: every field of the spec's config, the variants, and the presets.
//!
//! Field names are those of the golden files' `config` JSON (and of our checkpoints' metadata).

use serde::{Deserialize, Serialize};

/// The model families of `DDL_SPEC.md` (sections 4 and 14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// Pre-norm Transformer with plain residual additions (4.1).
    Baseline,
    /// Delta write on the d-dimensional residual, d_v = 1 (4.2).
    DdlV1,
    /// Expanded state d×m, token-axis ShortConv compressor (4.3).
    Ddl,
    /// As `ddl` with the EC embedding expansion (4.4).
    DdlEc,
    /// Expanded state, value-axis compressor (4.5).
    DdlCc,
    /// As `ddl_cc` with the EC embedding expansion (4.6).
    DdlCcec,
    /// v-Map, d_v = 1 (14.3).
    DdlV1Vmap,
    /// v-Map with expanded state and token-axis compressor (14.4).
    DdlVmap,
}

impl Variant {
    pub const ALL: [Variant; 8] = [
        Variant::Baseline,
        Variant::DdlV1,
        Variant::Ddl,
        Variant::DdlEc,
        Variant::DdlCc,
        Variant::DdlCcec,
        Variant::DdlV1Vmap,
        Variant::DdlVmap,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Baseline => "baseline",
            Variant::DdlV1 => "ddl_v1",
            Variant::Ddl => "ddl",
            Variant::DdlEc => "ddl_ec",
            Variant::DdlCc => "ddl_cc",
            Variant::DdlCcec => "ddl_ccec",
            Variant::DdlV1Vmap => "ddl_v1_vmap",
            Variant::DdlVmap => "ddl_vmap",
        }
    }

    pub fn parse(s: &str) -> Result<Variant, String> {
        Variant::ALL.iter().copied().find(|v| v.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
            format!("unknown variant '{s}' (expected one of {})", names.join(", "))
        })
    }

    /// Uses delta writes (everything but the baseline).
    pub fn is_ddl(self) -> bool {
        self != Variant::Baseline
    }

    /// Carries an expanded d×m state with compressors and a readout.
    pub fn expanded(self) -> bool {
        matches!(self, Variant::Ddl | Variant::DdlEc | Variant::DdlCc | Variant::DdlCcec | Variant::DdlVmap)
    }

    /// Uses the value-axis (CC) compressor rather than the token-axis one.
    pub fn value_axis(self) -> bool {
        matches!(self, Variant::DdlCc | Variant::DdlCcec)
    }

    /// Uses the EC embedding expansion.
    pub fn ec(self) -> bool {
        matches!(self, Variant::DdlEc | Variant::DdlCcec)
    }

    /// v-Map parameterisation (section 14).
    pub fn vmap(self) -> bool {
        matches!(self, Variant::DdlV1Vmap | Variant::DdlVmap)
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The value activation (spec 14.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VActName {
    Sigmoid4,
    Sigmoid,
    Linear,
}

/// Everything needed to build a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub variant: Variant,
    /// V.
    pub vocab_size: usize,
    /// d, the model width.
    pub d_model: usize,
    /// L, the number of blocks.
    pub n_layers: usize,
    /// H, attention heads.
    pub n_heads: usize,
    /// h, the head size (H·h may differ from d).
    pub head_dim: usize,
    /// F, the SwiGLU hidden size (⌊8d/3⌋ by default).
    pub mlp_hidden: usize,
    /// m = d_v, value channels (1 for the d_v = 1 variants, ignored by the baseline).
    pub d_v: usize,
    /// K_s (token-axis compressor) or K_c (value-axis compressor).
    pub state_kernel: usize,
    /// K_e, the EC embedding-expansion kernel.
    pub embed_kernel: usize,
    /// β₀: the gate bias starts at logit(β₀/2).
    pub beta_init: f64,
    /// ε_k of the direction normalisation.
    pub k_eps: f64,
    /// ε_n added to the mean square in every RMSNorm.
    pub norm_eps: f64,
    pub rope_base: f64,
    /// Value activation (`sigmoid4` for k-Map by default).
    pub v_act: VActName,
    /// h_k, hidden width of the v-Map direction MLP.
    pub k_mlp_hidden: usize,
    /// v-Map: `w_k2` is initialised N(0, (k_rezero_scale/√h_k)²).
    pub k_rezero_scale: f64,
    /// α of the training loss (spec 14.7).
    pub label_smoothing: f64,
    /// σ_E of the embedding init.
    pub embed_init_std: f64,
    /// σ_H = init_std_factor/√d.
    pub init_std_factor: f64,
    /// Longest sequence (context) the model is used with; sizes the RoPE table and caches.
    pub max_seq_len: usize,
}

/// A setting out of its range: the full key (`model.d_v`, `train.lr`), the value given, what is
/// allowed, and what to do about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value}: {expected}; {remedy}")]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub expected: String,
    pub remedy: String,
}

impl ConfigError {
    /// `key` given as `value`, where `expected` says what is allowed; the remedy names the two
    /// places a setting comes from (`--set` and the `--config` file's table).
    pub fn new(key: &str, value: impl std::fmt::Display, expected: impl Into<String>) -> Self {
        let remedy = match key.split_once('.') {
            Some((table @ ("model" | "train"), field)) => {
                format!("change it with --set {key}=VALUE or as `{field} = VALUE` under [{table}] in the --config file")
            }
            _ => format!("change it with --set {key}=VALUE"),
        };
        ConfigError { key: key.to_string(), value: value.to_string(), expected: expected.into(), remedy }
    }

    /// The same error with another remedy.
    pub fn remedy(mut self, remedy: impl Into<String>) -> Self {
        self.remedy = remedy.into();
        self
    }
}

/// `model.{field}` = `value` is not allowed: `expected`.
fn cerr(field: &str, value: impl std::fmt::Display, expected: impl Into<String>) -> ConfigError {
    ConfigError::new(&format!("model.{field}"), value, expected)
}

/// A field of a golden file's or another tool's JSON config that is missing or of the wrong type.
fn json_err(field: &str, what: impl Into<String>) -> ConfigError {
    ConfigError::new(&format!("config.{field}"), "(missing or wrong type)", what)
        .remedy("the file's `config` metadata must hold every field of the format (tests/golden/README.md)")
}

impl ModelConfig {
    /// The `model.` settings a fine-tune (`ddl train --init-from`) may change: none sizes a
    /// parameter. α (`label_smoothing`) weighs the training loss's targets; `max_seq_len` sizes
    /// the RoPE table (computed from the positions, no parameters) and the decode caches;
    /// `rope_base` sets the RoPE frequencies, which the trained queries and keys must adapt to,
    /// as a context-extending fine-tune does on purpose (raising it with `max_seq_len`, as Code
    /// Llama did).
    pub const FINE_TUNE_SETTINGS: [&'static str; 3] = ["label_smoothing", "max_seq_len", "rope_base"];

    /// Why `model.{field}` keeps the checkpoint's value on a fine-tune (`ddl train --init-from`);
    /// `None` for [`Self::FINE_TUNE_SETTINGS`] and for names that are no setting (which `--set`
    /// reports as such).
    pub fn fixed_on_fine_tune(field: &str) -> Option<&'static str> {
        match field {
            "variant" => Some("the variant decides which parameters the model has"),
            "vocab_size" | "d_model" | "n_layers" | "n_heads" | "head_dim" | "mlp_hidden" | "d_v" | "state_kernel"
            | "embed_kernel" | "k_mlp_hidden" => Some("it sizes parameters, which the checkpoint holds at its size"),
            "beta_init" | "embed_init_std" | "init_std_factor" | "k_rezero_scale" => {
                Some("it only sets how parameters start, and a fine-tune starts from the checkpoint's")
            }
            "k_eps" | "norm_eps" | "v_act" => {
                Some("it changes what the parameters compute, and they were trained to compute with the checkpoint's")
            }
            _ => None,
        }
    }

    /// This model with `other`'s [`Self::FINE_TUNE_SETTINGS`]: equal to `other` when the two
    /// differ in nothing else.
    pub fn with_fine_tune_settings_of(&self, other: &ModelConfig) -> ModelConfig {
        ModelConfig {
            label_smoothing: other.label_smoothing,
            max_seq_len: other.max_seq_len,
            rope_base: other.rope_base,
            ..self.clone()
        }
    }

    /// What a fine-tune from this model to `to` changed of [`Self::FINE_TUNE_SETTINGS`], as
    /// `name from → to` (empty when nothing).
    pub fn fine_tune_changes(&self, to: &ModelConfig) -> Vec<String> {
        let mut changed = Vec::new();
        if self.max_seq_len != to.max_seq_len {
            changed.push(format!("context {} → {} tokens", self.max_seq_len, to.max_seq_len));
        }
        if self.rope_base != to.rope_base {
            changed.push(format!("RoPE base {} → {}", self.rope_base, to.rope_base));
        }
        if self.label_smoothing != to.label_smoothing {
            changed.push(format!("label smoothing {} → {}", self.label_smoothing, to.label_smoothing));
        }
        changed
    }

    /// Floats per row of the MLP activations (gate, up, ψ and their gradients): `mlp_hidden`
    /// rounded up to a multiple of 4, so the matmuls read them with vec4 loads.
    pub fn mlp_stride(&self) -> usize {
        self.mlp_hidden.next_multiple_of(4)
    }

    /// Defaults of the paper's Small model for a variant (spec sections 0, 6, 14.10).
    pub fn base(variant: Variant, vocab_size: usize, d: usize, layers: usize, heads: usize, head_dim: usize) -> Self {
        let d_v = match variant {
            Variant::Baseline => 0,
            Variant::DdlV1 | Variant::DdlV1Vmap => 1,
            _ => 4,
        };
        let v_act = match variant {
            Variant::DdlV1Vmap => VActName::Sigmoid,
            Variant::DdlVmap => VActName::Linear,
            _ => VActName::Sigmoid4,
        };
        ModelConfig {
            variant,
            vocab_size,
            d_model: d,
            n_layers: layers,
            n_heads: heads,
            head_dim,
            mlp_hidden: d.saturating_mul(8) / 3,
            d_v,
            state_kernel: if variant.value_axis() { d_v } else { 4 },
            embed_kernel: 4,
            beta_init: 1.0,
            k_eps: 1e-5,
            norm_eps: 1e-5,
            rope_base: 10000.0,
            v_act,
            k_mlp_hidden: (d / 4).max(1),
            k_rezero_scale: 0.01,
            label_smoothing: 0.0,
            embed_init_std: 0.02,
            init_std_factor: 0.5,
            max_seq_len: 1024,
        }
    }

    /// The model of a named preset ([`crate::presets::PRESETS`]) for a variant.
    pub fn preset(name: &str, variant: Variant) -> Result<Self, ConfigError> {
        let Some(p) = crate::presets::find(name) else {
            return Err(ConfigError::new(
                "preset",
                name,
                format!("unknown preset '{name}', expected one of {}", crate::presets::names()),
            )
            .remedy("choose one of them with --preset NAME"));
        };
        Ok(ModelConfig {
            max_seq_len: p.max_seq_len,
            ..Self::base(variant, p.vocab_size, p.d_model, p.n_layers, p.n_heads, p.head_dim)
        })
    }

    /// m, the state width used by the kernels: 1 for the baseline and the d_v = 1 variants.
    pub fn m(&self) -> usize {
        if self.variant.expanded() { self.d_v } else { 1 }
    }

    /// Whether this config can store its expanded states in half precision (`--f16-state`): the
    /// token-axis variants with replicated embeddings (`ddl`, `ddl_vmap`), d_v = 4, K ≤ 8. The
    /// reason when not (the adapter's part is [`crate::model::Model::set_state_f16`]'s).
    pub fn f16_state_support(&self) -> Result<(), String> {
        let v = self.variant;
        if !v.expanded() || v.value_axis() || v.ec() {
            return Err(format!(
                "f16 states need variant ddl or ddl_vmap (token-axis compressor, replicated embedding), got {}",
                v.name()
            ));
        }
        if self.m() != 4 {
            return Err(format!(
                "f16 states need model.d_v = 4, got {} (rows of d_v = {} values have no f16 form)",
                self.m(),
                self.m()
            ));
        }
        if self.state_kernel > 8 {
            return Err(format!("f16 states need model.state_kernel ≤ 8, got {}", self.state_kernel));
        }
        Ok(())
    }

    /// H·h.
    pub fn qk_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Checks every field, the kernels' limits included, before anything is built or written;
    /// the error names the full key, the value, the allowed range and the remedy.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // Upper bounds far beyond any real model, so size arithmetic cannot overflow (and a
        // corrupt config cannot ask for absurd allocations).
        for (f, v, max, what) in [
            ("vocab_size", self.vocab_size, 1usize << 24, "tokens in the vocabulary (set by the tokenizer)"),
            ("d_model", self.d_model, 1 << 17, "the model width"),
            ("n_layers", self.n_layers, 1 << 12, "blocks"),
            ("n_heads", self.n_heads, 1 << 12, "attention heads"),
            ("head_dim", self.head_dim, 1 << 14, "the width of one head, even (RoPE rotates pairs)"),
            ("mlp_hidden", self.mlp_hidden, 1 << 20, "the MLP's hidden width"),
            ("max_seq_len", self.max_seq_len, 1 << 24, "the longest context"),
        ] {
            if v == 0 || v > max {
                return Err(cerr(f, v, format!("expected an integer in 1 ..= {max} ({what})")));
            }
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(cerr("head_dim", self.head_dim, "expected an even number (RoPE rotates pairs)"));
        }
        let v = self.variant;
        match v {
            Variant::Baseline => {}
            Variant::DdlV1 | Variant::DdlV1Vmap => {
                if self.d_v != 1 {
                    return Err(cerr("d_v", self.d_v, format!("variant {v} has d_v = 1")).remedy(format!(
                        "drop the setting, or choose an expanded variant (ddl, ddl_ec, ddl_cc, ddl_ccec, \
                         ddl_vmap) for d_v = {}",
                        self.d_v
                    )));
                }
            }
            _ => {
                if self.d_v == 0 || self.d_v > 1 << 10 {
                    return Err(cerr(
                        "d_v",
                        self.d_v,
                        "expected an integer in 1 ..= 1024 (value channels of the expanded state; 4 in the paper)",
                    ));
                }
            }
        }
        if v.expanded() {
            if self.state_kernel == 0 || self.state_kernel > 1 << 12 {
                let what = if v.value_axis() { "K_c, taps along the value axis" } else { "K_s, causal taps" };
                return Err(cerr(
                    "state_kernel",
                    self.state_kernel,
                    format!("expected an integer in 1 ..= 4096 ({what})"),
                ));
            }
            if v.value_axis() && self.state_kernel != self.d_v {
                return Err(cerr(
                    "state_kernel",
                    self.state_kernel,
                    format!("the value-axis compressor of {v} needs K_c = d_v = {} (spec 3.4)", self.d_v),
                )
                .remedy(format!(
                    "drop the setting (K_c follows model.d_v), or set --set model.state_kernel={}",
                    self.d_v
                )));
            }
        }
        if v.ec() && (self.embed_kernel == 0 || self.embed_kernel > 1 << 12) {
            return Err(cerr(
                "embed_kernel",
                self.embed_kernel,
                "expected an integer in 1 ..= 4096 (K_e, causal taps)",
            ));
        }
        if v.vmap() && (self.k_mlp_hidden == 0 || self.k_mlp_hidden > 1 << 20) {
            return Err(cerr(
                "k_mlp_hidden",
                self.k_mlp_hidden,
                "expected an integer in 1 ..= 2^20 (h_k, the direction MLP's hidden width)",
            ));
        }
        let params = (self.vocab_size as u128 * self.d_model as u128)
            + self.n_layers as u128
                * (4 * self.d_model as u128 * (self.n_heads * self.head_dim) as u128
                    + 3 * self.d_model as u128 * self.mlp_hidden as u128
                    + (self.d_model * self.d_v.max(1)) as u128 * (self.state_kernel + self.embed_kernel + 4) as u128);
        if params > 1u128 << 36 {
            return Err(cerr(
                "d_model",
                self.d_model,
                format!("the model would have about {params} parameters, more than 2^36"),
            )
            .remedy("make the model smaller (model.d_model, model.n_layers, model.mlp_hidden)"));
        }
        // The RoPE table holds every position's angles, max_seq_len × head_dim floats, in one
        // buffer the kernels index with 32 bits (`rope::table`; it refused only as the device
        // opened, naming neither setting).
        let rope = self.max_seq_len as u128 * self.head_dim as u128;
        if rope > (u32::MAX / 2) as u128 {
            let fit = (u32::MAX / 2) as usize / self.head_dim;
            return Err(cerr(
                "max_seq_len",
                self.max_seq_len,
                format!(
                    "model.max_seq_len × model.head_dim ({} × {} = {rope}) at most 2^31 − 1, the RoPE table of \
                     every position's angles",
                    self.max_seq_len, self.head_dim
                ),
            )
            .remedy(format!(
                "lower the context (--set model.max_seq_len={fit} or less) or the head (model.head_dim)"
            )));
        }
        for (f, v) in [("k_eps", self.k_eps), ("norm_eps", self.norm_eps), ("rope_base", self.rope_base)] {
            if !(v > 0.0 && v.is_finite()) {
                return Err(cerr(f, v, "expected a finite number > 0"));
            }
        }
        if !(0.0..=2.0).contains(&self.beta_init) {
            return Err(cerr("beta_init", self.beta_init, "expected a number in [0, 2] (β₀, the gate at init)"));
        }
        if !(0.0..1.0).contains(&self.label_smoothing) {
            return Err(cerr("label_smoothing", self.label_smoothing, "expected a number in [0, 1)"));
        }
        for (f, v) in [
            ("k_rezero_scale", self.k_rezero_scale),
            ("embed_init_std", self.embed_init_std),
            ("init_std_factor", self.init_std_factor),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(cerr(f, v, "expected a finite number ≥ 0"));
            }
        }
        Ok(())
    }

    /// Reads the `config` object of a golden file (or another tool's config): known fields are
    /// taken, absent v-Map fields get the spec's k-Map defaults, unknown fields are ignored.
    pub fn from_golden_json(v: &serde_json::Value) -> Result<Self, ConfigError> {
        let obj = v.as_object().ok_or_else(|| json_err("", "a JSON object"))?;
        let variant_s = obj.get("variant").and_then(|x| x.as_str()).ok_or_else(|| json_err("variant", "a string"))?;
        let variant = Variant::parse(variant_s)
            .map_err(|e| ConfigError::new("config.variant", variant_s, e).remedy(GOLDEN_REMEDY))?;
        let us = |f: &str| -> Result<usize, ConfigError> {
            obj.get(f).and_then(|x| x.as_u64()).map(|x| x as usize).ok_or_else(|| json_err(f, "a non-negative integer"))
        };
        let fl = |f: &str| -> Result<f64, ConfigError> {
            obj.get(f).and_then(|x| x.as_f64()).ok_or_else(|| json_err(f, "a number"))
        };
        let (vocab, d, l, h, hd) =
            (us("vocab_size")?, us("d_model")?, us("n_layers")?, us("n_heads")?, us("head_dim")?);
        let mut c = Self::base(variant, vocab, d, l, h, hd);
        c.mlp_hidden = us("mlp_hidden")?;
        c.d_v = us("d_v")?;
        c.state_kernel = us("state_kernel")?;
        c.embed_kernel = us("embed_kernel")?;
        c.beta_init = fl("beta_init")?;
        c.k_eps = fl("k_eps")?;
        c.norm_eps = fl("norm_eps")?;
        c.rope_base = fl("rope_base")?;
        if let Some(s) = obj.get("v_act") {
            c.v_act = serde_json::from_value(s.clone())
                .map_err(|e| ConfigError::new("config.v_act", s, e.to_string()).remedy(GOLDEN_REMEDY))?;
        } else {
            c.v_act = VActName::Sigmoid4;
        }
        if obj.contains_key("k_mlp_hidden") {
            c.k_mlp_hidden = us("k_mlp_hidden")?;
        }
        if obj.contains_key("k_rezero_scale") {
            c.k_rezero_scale = fl("k_rezero_scale")?;
        }
        c.label_smoothing = if obj.contains_key("label_smoothing") { fl("label_smoothing")? } else { 0.0 };
        if obj.contains_key("embed_init_std") {
            c.embed_init_std = fl("embed_init_std")?;
        }
        if obj.contains_key("init_std_factor") {
            c.init_std_factor = fl("init_std_factor")?;
        }
        if let Ok(t) = us("seq_len") {
            c.max_seq_len = c.max_seq_len.max(t);
        }
        c.validate().map_err(|e| e.remedy(GOLDEN_REMEDY))?;
        Ok(c)
    }
}

/// What to do about a golden file's (or another tool's JSON) config the engine refuses: the
/// file is not one the format allows, not a setting to change here.
const GOLDEN_REMEDY: &str = "the file's `config` metadata is not a model this format allows: regenerate the file (the PyTorch reference's \
     make_golden.py) or correct that metadata (tests/golden/README.md)";

#[cfg(test)]
mod tests {
    #[test]
    fn a_fine_tune_may_change_the_settings_that_fix_no_parameter() {
        use super::{ModelConfig, Variant};
        let c = ModelConfig::preset("tiny", Variant::Ddl).unwrap();
        let json = serde_json::to_value(&c).unwrap();
        let fields: Vec<&String> = json.as_object().unwrap().keys().collect();
        // Every field has its answer: the two allowed, the others a reason.
        for f in fields {
            let allowed = ModelConfig::FINE_TUNE_SETTINGS.contains(&f.as_str());
            assert_eq!(ModelConfig::fixed_on_fine_tune(f).is_none(), allowed, "model.{f}");
        }
        for f in ModelConfig::FINE_TUNE_SETTINGS {
            let mut other = c.clone();
            other.label_smoothing = 0.1;
            other.max_seq_len = 2 * c.max_seq_len;
            other.rope_base = 4.0 * c.rope_base;
            // They size no parameter.
            assert_eq!(super::super::Layout::new(&other).total, super::super::Layout::new(&c).total, "{f}");
            assert_eq!(c.with_fine_tune_settings_of(&other), other);
        }
        let mut other = c.clone();
        other.rope_base = 4.0 * c.rope_base;
        other.max_seq_len = 2 * c.max_seq_len;
        let said = c.fine_tune_changes(&other);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[1].starts_with("RoPE base ") && said[0].starts_with("context "), "{said:?}");
        assert!(c.fine_tune_changes(&c).is_empty());
        let mut wider = c.clone();
        wider.d_model += 8;
        assert_ne!(c.with_fine_tune_settings_of(&wider), wider);
        assert!(ModelConfig::fixed_on_fine_tune("d_model").unwrap().contains("sizes parameters"));
        assert!(ModelConfig::fixed_on_fine_tune("beta_init").unwrap().contains("how parameters start"));
    }
    use super::*;

    #[test]
    fn a_golden_config_with_absurd_sizes_is_an_error_not_an_overflow() {
        // Found by fuzzing the golden reader: d_model near u64::MAX overflowed 8·d/3.
        let mut v = serde_json::json!({
            "variant": "ddl", "vocab_size": 65, "d_model": u64::MAX, "n_layers": 1, "n_heads": 1,
            "head_dim": 8, "mlp_hidden": 8, "d_v": 2, "state_kernel": 4, "embed_kernel": 4,
            "beta_init": 1.0, "k_eps": 1e-5, "norm_eps": 1e-5, "rope_base": 10000.0
        });
        let e = ModelConfig::from_golden_json(&v).unwrap_err().to_string();
        assert!(e.contains("d_model") && e.contains("regenerate the file") && !e.contains("--set"), "{e}");
        v["variant"] = serde_json::json!("zzz");
        let e = ModelConfig::from_golden_json(&v).unwrap_err().to_string();
        assert!(e.contains("zzz") && e.contains("regenerate the file") && !e.contains("--set"), "{e}");
        v["variant"] = serde_json::json!("ddl");
        v["d_model"] = serde_json::json!(8);
        assert!(ModelConfig::from_golden_json(&v).is_ok());
    }

    #[test]
    fn the_pytorch_checkpoint_script_writes_the_fields_this_config_reads() {
        // scripts/torch_checkpoint.py writes checkpoints this crate reads (`deny_unknown_fields`,
        // every field required): its field list and format must follow the config's (no Python
        // here: the script's text is read).
        let script = include_str!("../../scripts/torch_checkpoint.py");
        let list = script.split("DDL_FIELDS = (").nth(1).and_then(|r| r.split(')').next()).expect("DDL_FIELDS");
        let fields: Vec<&str> = list.split(',').map(|f| f.trim().trim_matches('"')).filter(|f| !f.is_empty()).collect();
        let cfg = serde_json::to_value(ModelConfig::preset("tiny", Variant::Ddl).unwrap()).unwrap();
        let want: Vec<&str> = cfg.as_object().unwrap().keys().map(String::as_str).collect();
        let mut sorted = fields.clone();
        sorted.sort_unstable();
        let mut want_sorted = want.clone();
        want_sorted.sort_unstable();
        assert_eq!(sorted, want_sorted, "scripts/torch_checkpoint.py's DDL_FIELDS against ModelConfig's");
        let format = format!("FORMAT = \"{}\"", crate::train::checkpoint::FORMAT);
        let version = format!("VERSION = \"{}\"", crate::train::checkpoint::VERSION);
        assert!(script.contains(&format) && script.contains(&version), "the script's {format} / {version}");
    }
}
