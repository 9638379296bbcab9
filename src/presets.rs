//! The presets: a model's shape and its training settings together, by name, in one table.
//! [`crate::model::ModelConfig::preset`] and [`crate::train::TrainConfig::preset`] read it; every
//! other setting has the defaults of [`crate::model::ModelConfig::base`] and
//! [`crate::train::TrainConfig::preset`].

/// One preset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    pub name: &'static str,
    /// What it is for.
    pub about: &'static str,
    // The model.
    pub vocab_size: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub head_dim: usize,
    pub max_seq_len: usize,
    // Training.
    pub batch_size: usize,
    pub seq_len: usize,
    pub lr: f64,
    pub warmup_steps: usize,
    pub decay_steps: usize,
}

/// Every preset, smallest first.
pub const PRESETS: [Preset; 4] = [
    Preset {
        name: "tiny",
        about: "fast on a CPU adapter (lavapipe): the size of the burn comparison (issue 13)",
        vocab_size: 65,
        d_model: 128,
        n_layers: 4,
        n_heads: 4,
        head_dim: 32,
        max_seq_len: 64,
        batch_size: 12,
        seq_len: 64,
        lr: 3e-3,
        warmup_steps: 50,
        decay_steps: 2000,
    },
    Preset {
        name: "shakespeare-char",
        about: "nanoGPT's shakespeare-char shapes",
        vocab_size: 65,
        d_model: 384,
        n_layers: 6,
        n_heads: 6,
        head_dim: 64,
        max_seq_len: 256,
        batch_size: 8,
        seq_len: 256,
        lr: 1e-3,
        warmup_steps: 100,
        decay_steps: 5000,
    },
    Preset {
        name: "small-124m",
        about: "the paper's Small (spec section 0), GPT-2 small's size",
        vocab_size: 50304,
        d_model: 768,
        n_layers: 12,
        n_heads: 6,
        head_dim: 128,
        max_seq_len: 1024,
        batch_size: 8,
        seq_len: 1024,
        lr: 1e-3,
        warmup_steps: 2000,
        decay_steps: 100_000,
    },
    Preset {
        name: "medium-353m",
        about: "the paper's Medium (spec section 0)",
        vocab_size: 50304,
        d_model: 1024,
        n_layers: 24,
        n_heads: 8,
        head_dim: 128,
        max_seq_len: 1024,
        batch_size: 8,
        seq_len: 1024,
        lr: 1e-3,
        warmup_steps: 2000,
        decay_steps: 100_000,
    },
];

/// The preset called `name`.
pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The presets' names, for messages: "tiny, shakespeare-char, small-124m, medium-353m".
pub fn names() -> String {
    PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}
