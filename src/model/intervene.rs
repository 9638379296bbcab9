//! Interventions on the delta writes while decoding: for chosen sublayers (or all of them), set
//! the gate β to a constant, scale it, or clamp it, before the write uses it; zero the write; or
//! replace the write's direction k by a fixed one. The β actions compile into one [`BetaMap`] per
//! sublayer, which the decode programs put into the delta kernel's uniform (no extra binding,
//! nothing when unused: the identity map is the model's own gate). A fixed direction is the mean
//! of the sublayer's unit k over the prompt's tokens ([`Interventions::k_mean_targets`]; the
//! generator measures it in a first prefill without the replacement and copies it into the
//! write's input k̃ rows before every later write of that sublayer).
//!
//! A spec is `TARGET:ACTION`: TARGET is `all`, `blockN` (both sublayers of block N), `blockN.attn`
//! or `blockN.mlp`; ACTION is `beta=V` (set), `beta*=S` (scale), `beta<=V` or `beta>=V` (clamp),
//! `write=0` (no write: β = 0, X' = X), `k=mean` (the fixed direction), or one of the write's two
//! terms X' = X + β k (vᵀ − kᵀX) removed or scaled: `erase=0` (nothing of the state along k is
//! removed: X' = X + β k vᵀ, a rank-1 addition), `v=0` (nothing written: X' = (I − β k kᵀ) X,
//! the operator alone), `erase*=S`, `v*=S`. Several specs apply in order. Values outside β's
//! range [0, 2] are refused unless allowed.

use crate::kernels::delta::BetaMap;

use super::acts::SubKind;
use super::config::ModelConfig;

/// Sublayer `s`'s name (2l + sublayer, block order): `block{l}.attn` or `block{l}.mlp`, as
/// TARGET takes it.
pub fn sublayer_name(s: usize) -> String {
    format!("block{}.{}", s / 2, if s.is_multiple_of(2) { "attn" } else { "mlp" })
}

/// Which sublayers an intervention touches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    All,
    Block(usize),
    Sub(usize, SubKind),
}

/// What it does to β.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    Set(f32),
    Scale(f32),
    AtMost(f32),
    AtLeast(f32),
    /// k replaced by the mean of the sublayer's unit k over the prompt (renormalised).
    KMean,
    /// The erased part kᵀX times this factor (≥ 0; `erase=0`: none).
    Erase(f32),
    /// The written value v times this factor (≥ 0; `v=0`: none).
    Value(f32),
}

/// One parsed spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Intervention {
    pub target: Target,
    pub action: Action,
    /// The spec as written (for traces and reports).
    pub spec: String,
}

/// A spec that cannot be used, naming it, what was expected and how to fix it.
#[derive(Debug, thiserror::Error)]
#[error("--intervene '{spec}': {msg}")]
pub struct InterventionError {
    pub spec: String,
    pub msg: String,
}

const FORMS: &str = "expected TARGET:ACTION with TARGET all, blockN, blockN.attn or blockN.mlp and ACTION \
                     beta=V, beta*=S, beta<=V, beta>=V, write=0, k=mean, erase=0, erase*=S, v=0 or v*=S \
                     (e.g. block2.mlp:beta=0, all:beta<=1, block1.attn:k=mean, block0.mlp:erase=0)";

impl Intervention {
    /// Parses `TARGET:ACTION` (the syntax only; [`Interventions::maps`] checks it against a model).
    pub fn parse(spec: &str) -> Result<Intervention, InterventionError> {
        let err = |msg: String| InterventionError { spec: spec.to_string(), msg };
        let s = spec.trim();
        let (t, a) = s.split_once(':').ok_or_else(|| err(FORMS.into()))?;
        // (Spaces inside the sublayer's name as around it: `block1 . mlp` is `block1.mlp`.)
        // (In any case, as the chat's commands: `ALL:BETA=0` is `all:beta=0`.)
        let t: String = t.chars().filter(|c| !c.is_whitespace()).collect::<String>().to_ascii_lowercase();
        let target = match t.as_str() {
            "all" => Target::All,
            t => {
                let rest = t.strip_prefix("block").ok_or_else(|| err(format!("unknown sublayer '{t}'; {FORMS}")))?;
                let (num, kind) = match rest.split_once('.') {
                    Some((n, k)) => (n, Some(k)),
                    None => (rest, None),
                };
                // (Digits only, as the sublayers are named: `block01` or `block+1` would be
                // recorded as written, under another name than the block's.)
                let block: usize = num
                    .parse()
                    .ok()
                    .filter(|_| num.bytes().all(|b| b.is_ascii_digit()) && (num == "0" || !num.starts_with('0')))
                    .ok_or_else(|| {
                        err(format!("unknown sublayer '{t}': '{num}' is not a block number (0, 1, 2, …); {FORMS}"))
                    })?;
                match kind {
                    None => Target::Block(block),
                    Some("attn") => Target::Sub(block, SubKind::Attn),
                    Some("mlp") => Target::Sub(block, SubKind::Mlp),
                    Some(k) => return Err(err(format!("unknown sublayer '{t}': '{k}' is neither attn nor mlp"))),
                }
            }
        };
        let a = a.trim();
        let compact: String = a.chars().filter(|c| !c.is_whitespace()).collect::<String>().to_ascii_lowercase();
        match compact.as_str() {
            "k=mean" => return Ok(Intervention { target, action: Action::KMean, spec: s.to_string() }),
            "write=0" => return Ok(Intervention { target, action: Action::Set(0.0), spec: s.to_string() }),
            _ if compact.starts_with("write=") => {
                return Err(err(format!("'{a}': a write can only be zeroed (write=0); scale β instead (beta*=S)")));
            }
            _ if compact.starts_with("k=") => {
                return Err(err(format!("'{a}': the fixed direction is the prompt's mean k (k=mean)")));
            }
            _ => {}
        }
        // (Several specs in one: `all:beta=0 block0.mlp:beta=1` read as the value
        // "0block0.mlp:beta=1", which "is not a number".)
        if a.contains(':') {
            let parts: Vec<&str> = s.split([';', ',', ' ', '\t']).filter(|p| !p.is_empty()).collect();
            let each = if parts.iter().all(|p| p.contains(':')) {
                let flags: Vec<String> = parts.iter().map(|p| format!("--intervene {p}")).collect();
                format!(" ({})", flags.join(" "))
            } else {
                String::new()
            };
            return Err(err(format!("several specs in one; give each its own --intervene{each}")));
        }
        // (One action a spec: `erase=0;v=0` would read as a malformed value.)
        if compact.contains([';', ',']) {
            return Err(err(format!(
                "'{a}': one action a spec; give each its own --intervene (e.g. --intervene {t}:erase=0 --intervene \
                 {t}:v=0)"
            )));
        }
        let num = |v: &str| -> Result<f32, InterventionError> {
            let x: f32 = v.trim().parse().map_err(|_| err(format!("'{}' is not a number", v.trim())))?;
            match x {
                x if x.is_finite() => Ok(x),
                // (A finite number written past f32's range parses as ±inf.)
                x if x.is_infinite() && v.trim().parse::<f64>().is_ok_and(f64::is_finite) => {
                    Err(err(format!("{} is beyond the largest float32 (about 3.4e38)", v.trim())))
                }
                x => Err(err(format!("{x} is not a finite number"))),
            }
        };
        // The write's terms: `erase=0` / `v=0`, or a factor `erase*=S` / `v*=S` (S ≥ 0).
        for (name, make) in [("erase", Action::Erase as fn(f32) -> Action), ("v", Action::Value)] {
            let Some(rest) = compact.strip_prefix(name).filter(|r| r.starts_with('=') || r.starts_with("*=")) else {
                continue;
            };
            let factor = if let Some(v) = rest.strip_prefix("*=") {
                let f = num(v)?;
                if f < 0.0 {
                    return Err(err(format!(
                        "'{a}': a negative factor ({f}); factors are 0 or more ({name}*=0.5 halves it, {name}=0 removes it)"
                    )));
                }
                f
            } else {
                match num(&rest[1..])? {
                    0.0 => 0.0,
                    x => {
                        return Err(err(format!(
                            "'{a}': the {} can be removed ({name}=0) or scaled ({name}*=S, S ≥ 0), not set to {x}",
                            if name == "v" { "written value" } else { "erased part kᵀX" }
                        )));
                    }
                }
            };
            return Ok(Intervention { target, action: make(factor), spec: s.to_string() });
        }
        // (Spaces anywhere in the action, as around its sublayer: `beta = 0` is `beta=0`.)
        let body = compact.strip_prefix("beta").ok_or_else(|| err(format!("unknown action '{a}'; {FORMS}")))?;
        let action = if let Some(v) = body.strip_prefix("<=") {
            Action::AtMost(num(v)?)
        } else if let Some(v) = body.strip_prefix(">=") {
            Action::AtLeast(num(v)?)
        } else if let Some(v) = body.strip_prefix("*=") {
            Action::Scale(num(v)?)
        } else if let Some(v) = body.strip_prefix('=') {
            Action::Set(num(v)?)
        } else {
            return Err(err(format!("unknown action '{a}'; {FORMS}")));
        };
        Ok(Intervention { target, action, spec: s.to_string() })
    }

    fn touches(&self, block: usize, kind: SubKind) -> bool {
        match self.target {
            Target::All => true,
            Target::Block(b) => b == block,
            Target::Sub(b, k) => b == block && k == kind,
        }
    }
}

/// The interventions of one generation, in the order they apply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Interventions {
    pub list: Vec<Intervention>,
    /// Allow β outside [0, 2] (`--allow-out-of-range`).
    pub allow_out_of_range: bool,
}

/// Composes `then` after `first` (both with scale ≥ 0): clamp(s₂·clamp(s₁β + a₁, l₁, h₁) + a₂, l₂, h₂).
fn compose(first: BetaMap, then: BetaMap) -> BetaMap {
    let (s, a) = (then.scale * first.scale, then.scale.mul_add(first.add, then.add));
    // The first clamp's bounds moved through the second affine map (scale ≥ 0 keeps their order).
    let (l, h) = (then.scale.mul_add(first.lo, then.add), then.scale.mul_add(first.hi, then.add));
    let (lo, hi) = (l.max(then.lo), h.min(then.hi));
    // (The write's factors multiply.)
    let (erase, value) = (first.erase * then.erase, first.value * then.value);
    if lo <= hi {
        BetaMap { scale: s, add: a, lo, hi, erase, value }
    } else {
        // Disjoint ranges: every β lands on the same bound of the second clamp.
        let c = if h < then.lo { then.lo } else { then.hi };
        BetaMap { scale: 0.0, add: c, lo: c, hi: c, erase, value }
    }
}

impl Interventions {
    /// Parses the specs (`--intervene`, repeatable).
    pub fn parse(specs: &[String], allow_out_of_range: bool) -> Result<Interventions, InterventionError> {
        let list = specs.iter().map(|s| Intervention::parse(s)).collect::<Result<Vec<_>, _>>()?;
        Ok(Interventions { list, allow_out_of_range })
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// What a person should know of these interventions that no error says: a scale above 1 is
    /// clamped at 2 (the end of β's range) unless out-of-range values are allowed.
    pub fn notes(&self) -> Vec<String> {
        // (A number as written, in exponent form only when long.)
        let num = |x: f32| if x.abs() < 1e6 { format!("{x}") } else { format!("{x:e}") };
        // A value scaled far up writes states the model never saw (in either mode).
        let values = self.list.iter().filter_map(|i| match i.action {
            Action::Value(s) if s > 10.0 => Some(format!(
                "note: {}: each write puts {} times its trained value along k, far from any state the model saw, so \
                 the text can stop meaning anything",
                i.spec,
                num(s)
            )),
            _ => None,
        });
        if self.allow_out_of_range {
            // Far outside (0, 2) each write multiplies the k-component by |1 − β|: float32
            // overflows within a few layers and the text stops meaning anything.
            return self
                .list
                .iter()
                .filter_map(|i| match i.action {
                    Action::Set(b) | Action::AtLeast(b) if !(-8.0..=10.0).contains(&b) => {
                        Some(format!("{}: β = {}", i.spec, num(b)))
                    }
                    Action::Scale(s) if s.abs() > 5.0 => Some(format!("{}: β up to {}", i.spec, num(2.0 * s))),
                    Action::Erase(s) if s > 5.0 => Some(format!("{}: β × {} on the erased part", i.spec, num(s))),
                    _ => None,
                })
                .map(|what| {
                    format!(
                        "note: {what}: each write scales the state's k-component by |1 − β| (above 9 here), so \
                         the state can overflow float32 within a few writes and the text stop meaning anything"
                    )
                })
                .take(1)
                .chain(values.take(1))
                .collect();
        }
        self.list
            .iter()
            .filter_map(|i| match i.action {
                Action::AtMost(v) if v >= 2.0 => {
                    Some(format!("note: {}: β is never above 2, so this bound changes nothing", i.spec))
                }
                Action::AtLeast(v) if v <= 0.0 => {
                    Some(format!("note: {}: β is never below 0, so this bound changes nothing", i.spec))
                }
                Action::Scale(1.0) => {
                    Some(format!("note: {}: β × 1 leaves every write as trained, so this changes nothing", i.spec))
                }
                Action::Erase(1.0) | Action::Value(1.0) => Some(format!(
                    "note: {}: a factor of 1 leaves every write as trained, so this changes nothing",
                    i.spec
                )),
                Action::Scale(s) if s > 1.0 => Some(format!(
                    "note: {}: β is clamped to [0, 2] after scaling, so every β above {:.3} becomes 2 (a \
                     reflection); --allow-out-of-range lets it pass 2",
                    i.spec,
                    2.0 / s
                )),
                _ => None,
            })
            .chain(values.take(1))
            .collect()
    }

    /// Whether these specs do something else with `--allow-out-of-range` than without it: a β set
    /// outside [0, 2] or clamped beyond it, or an erase factor above 1 (refused without the flag),
    /// or a scale above 1 (clamped at 2 without it). A bound β never passes (`beta<=3`) and every
    /// other action are the same either way.
    pub fn need_out_of_range(&self) -> bool {
        self.list.iter().any(|i| match i.action {
            Action::Set(v) => !(0.0..=2.0).contains(&v),
            Action::AtMost(v) => v < 0.0,
            Action::AtLeast(v) => v > 2.0,
            Action::Scale(s) | Action::Erase(s) => s > 1.0,
            Action::KMean | Action::Value(_) => false,
        })
    }

    /// The specs as written, `; `-separated (for traces and reports).
    pub fn describe(&self) -> String {
        self.list.iter().map(|i| i.spec.as_str()).collect::<Vec<_>>().join("; ")
    }

    /// The sublayers (block l's attention at 2l, its MLP at 2l + 1) whose direction k is replaced
    /// by the prompt's mean (`k=mean`), checked as [`Interventions::maps`] checks.
    pub fn k_mean_targets(&self, cfg: &ModelConfig) -> Result<Vec<bool>, InterventionError> {
        self.maps(cfg)?;
        let mut t = vec![false; 2 * cfg.n_layers];
        for i in self.list.iter().filter(|i| i.action == Action::KMean) {
            for l in 0..cfg.n_layers {
                for (si, kind) in [SubKind::Attn, SubKind::Mlp].into_iter().enumerate() {
                    t[2 * l + si] |= i.touches(l, kind);
                }
            }
        }
        Ok(t)
    }

    /// One map per sublayer (block l's attention at 2l, its MLP at 2l + 1) for `cfg`, after
    /// checking the model has delta writes, the blocks exist and the values are in range
    /// (`k=mean` leaves β as it is).
    pub fn maps(&self, cfg: &ModelConfig) -> Result<Vec<BetaMap>, InterventionError> {
        let (lo, hi) = if self.allow_out_of_range { (-1e30, 1e30) } else { (0.0, 2.0) };
        let base = BetaMap { scale: 1.0, add: 0.0, lo, hi, ..BetaMap::IDENTITY };
        let mut maps = vec![BetaMap::IDENTITY; 2 * cfg.n_layers];
        if self.list.is_empty() {
            return Ok(maps);
        }
        maps.fill(base);
        for i in &self.list {
            let err = |msg: String| InterventionError { spec: i.spec.clone(), msg };
            if !cfg.variant.is_ddl() {
                return Err(err(format!(
                    "the {} variant has residual additions, not delta writes: there is no β or k to intervene on; \
                     use a checkpoint of a delta-write variant (ddl, ddl_v1, ddl_ec, ddl_cc, …)",
                    cfg.variant
                )));
            }
            if let Target::Block(b) | Target::Sub(b, _) = i.target
                && b >= cfg.n_layers
            {
                return Err(err(format!(
                    "unknown sublayer: block {b} (the model has blocks 0 to {})",
                    cfg.n_layers - 1
                )));
            }
            let in_range = |x: f32| self.allow_out_of_range || (0.0..=2.0).contains(&x);
            let map = match i.action {
                Action::KMean => continue,
                Action::Erase(f) if f > 1.0 && !self.allow_out_of_range => {
                    return Err(err(format!(
                        "an erase factor above 1 ({f}) takes the write past a reflection, as β above 2 does: along k \
                         the state is multiplied by 1 − {f}·β, below −1 for β above {:.3}; give a factor of 1 or less, \
                         or pass --allow-out-of-range to use it anyway",
                        2.0 / f
                    )));
                }
                Action::Erase(f) => BetaMap { erase: f, ..base },
                Action::Value(f) => BetaMap { value: f, ..base },
                Action::Set(v) if in_range(v) => BetaMap { scale: 0.0, add: v, ..base },
                Action::Scale(s) if s >= 0.0 => BetaMap { scale: s, ..base },
                // (A bound β never passes, `beta<=3` or `beta>=-1`, changes nothing: taken, and
                // said by `notes`.)
                Action::AtMost(v) if in_range(v) || v > 2.0 => BetaMap { hi: v, ..base },
                Action::AtLeast(v) if in_range(v) || v < 0.0 => BetaMap { lo: v, ..base },
                Action::Scale(s) => {
                    return Err(err(format!(
                        "a negative scale ({s}) would make β negative: scales are 0 or more, with or without \
                         --allow-out-of-range (which lifts the [0, 2] range of beta=V, beta<=V and beta>=V); \
                         give a scale of 0 or more (beta*=0 is identity), or a fixed β below 0 with beta=V \
                         --allow-out-of-range"
                    )));
                }
                Action::Set(v) | Action::AtMost(v) | Action::AtLeast(v) => {
                    return Err(err(format!(
                        "β = {v} is outside [0, 2] (identity 0, projection 1, reflection 2); pass \
                         --allow-out-of-range to use it anyway"
                    )));
                }
            };
            for l in 0..cfg.n_layers {
                for (si, kind) in [SubKind::Attn, SubKind::Mlp].into_iter().enumerate() {
                    if i.touches(l, kind) {
                        maps[2 * l + si] = compose(maps[2 * l + si], map);
                    }
                }
            }
        }
        Ok(maps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Variant;

    /// Specs in any case, as the chat's commands (`ALL:beta=0` was "unknown sublayer 'ALL'").
    #[test]
    fn specs_are_taken_in_any_case() {
        for (typed, plain) in [("ALL:BETA=0", "all:beta=0"), ("Block1.MLP:Erase*=0.5", "block1.mlp:erase*=0.5")] {
            let (a, b) = (Intervention::parse(typed).unwrap(), Intervention::parse(plain).unwrap());
            assert_eq!((a.target, a.action), (b.target, b.action), "{typed}");
        }
        assert_eq!(Intervention::parse("block0.attn:K=MEAN").unwrap().action, Action::KMean);
    }

    fn cfg(v: Variant) -> ModelConfig {
        ModelConfig::preset("tiny", v).unwrap()
    }

    #[test]
    fn specs_compile_into_per_sublayer_maps_that_compose_in_order() {
        let i =
            Interventions::parse(&["block2.mlp:beta=0".into(), "all:beta<=1".into(), "block0:beta*=0.5".into()], false)
                .unwrap();
        let maps = i.maps(&cfg(Variant::Ddl)).unwrap(); // 4 blocks
        assert_eq!(maps.len(), 8);
        // block 2 MLP: set 0, then ≤ 1: always 0.
        assert_eq!(maps[5].apply(1.7), 0.0);
        // Every other sublayer is clamped at 1; block 0's are also halved after the clamp.
        assert_eq!(maps[2].apply(1.7), 1.0);
        assert_eq!(maps[2].apply(0.3), 0.3);
        assert_eq!(maps[0].apply(1.7), 0.5);
        assert_eq!(maps[1].apply(0.6), 0.3);
        // Composition equals applying the maps one after the other, for β across [0, 2].
        let seq = [
            BetaMap { hi: 0.5, ..BetaMap::IDENTITY },
            BetaMap { lo: 1.0, ..BetaMap::IDENTITY },
            BetaMap { scale: 1.5, add: 0.1, ..BetaMap::IDENTITY },
        ];
        for b in (0..=20).map(|k| k as f32 / 10.0) {
            let step = seq.iter().fold(b, |x, m| m.apply(x));
            let once = seq[1..].iter().fold(seq[0], |acc, &m| compose(acc, m)).apply(b);
            assert!((step - once).abs() < 1e-6, "β {b}: {step} vs {once}");
        }
        // No interventions: the identity everywhere.
        assert!(Interventions::default().maps(&cfg(Variant::Ddl)).unwrap().iter().all(|m| *m == BetaMap::IDENTITY));
    }

    /// `need_out_of_range` is true exactly where the flag changes what the specs do: refused
    /// without it, or another β for some model β in (0, 2).
    #[test]
    fn the_flag_is_needed_exactly_where_it_changes_the_maps() {
        let c = cfg(Variant::Ddl);
        for spec in [
            "all:beta=0",
            "all:beta=2",
            "all:beta=2.5",
            "all:beta=-0.1",
            "block1:beta*=0.5",
            "block1:beta*=1",
            "block1:beta*=1.5",
            "all:beta*=0",
            "all:beta<=1",
            "all:beta<=3",
            "all:beta<=-1",
            "all:beta>=1",
            "all:beta>=-1",
            "all:beta>=2.5",
            "block0.attn:k=mean",
            "block2.mlp:write=0",
            "all:erase*=2",
            "all:erase*=0.5",
            "all:v*=3",
        ] {
            let with = Interventions::parse(&[spec.into()], true).unwrap();
            let without = Interventions::parse(&[spec.into()], false).unwrap();
            let differs = match without.maps(&c) {
                Err(_) => true,
                Ok(m0) => {
                    let m1 = with.maps(&c).unwrap();
                    m0.iter().zip(&m1).any(|(a, b)| {
                        (a.erase, a.value) != (b.erase, b.value)
                            || (1..200).any(|k| a.apply(k as f32 / 100.0) != b.apply(k as f32 / 100.0))
                    })
                }
            };
            assert_eq!(with.need_out_of_range(), differs, "{spec}");
            assert_eq!(without.need_out_of_range(), differs, "{spec}: a property of the specs, not of the flag");
        }
    }

    /// `erase=0`, `v=0` and their factors set the write's terms on the sublayers they name, multiply
    /// in order, and leave β alone; the other spellings are clear errors.
    #[test]
    fn the_writes_terms_are_removed_or_scaled() {
        let c = cfg(Variant::Ddl); // 4 blocks
        let specs = ["block1.mlp:erase=0", "all:v*=0.5", "block1:v *= 3", "block0.attn:v=0", "block2.attn:erase*=0.25"];
        let i = Interventions::parse(&specs.map(String::from), false).unwrap();
        let maps = i.maps(&c).unwrap();
        let fx: Vec<(f32, f32)> = maps.iter().map(|m| (m.erase, m.value)).collect();
        assert_eq!(
            fx,
            [(1.0, 0.0), (1.0, 0.5), (1.0, 1.5), (0.0, 1.5), (0.25, 0.5), (1.0, 0.5), (1.0, 0.5), (1.0, 0.5)]
        );
        assert!(maps.iter().all(|m| (1..200).all(|k| m.apply(k as f32 / 100.0) == k as f32 / 100.0)), "β as trained");
        // After a β map too: β = 1 with nothing erased.
        let both = Interventions::parse(&["block0.mlp:beta=1".into(), "block0.mlp:erase=0".into()], false).unwrap();
        let m = both.maps(&c).unwrap()[1];
        assert_eq!((m.apply(0.3), m.erase, m.value), (1.0, 0.0, 1.0));
        for (spec, needle) in [
            ("all:erase=1", "removed (erase=0) or scaled"),
            ("all:v=0.5", "not set"),
            ("all:v*=-1", "a negative factor"),
            ("all:erase*=x", "'x' is not a number"),
            ("all:v*=inf", "not a finite number"),
            ("all:erase*=1e40", "beyond the largest float32"),
            ("all:v==0", "'=0' is not a number"),
            ("all:value=0", "unknown action"),
            ("block0.mlp:erase=0;v=0", "one action a spec; give each its own --intervene"),
            ("block0.mlp:erase=0,v=0", "--intervene block0.mlp:v=0"),
            // Two specs in one flag: each named as its own flag (the second was read as the first's
            // value, "'0block0.mlp:beta=1' is not a number").
            (
                "all:beta=0 block0.mlp:beta=1",
                "give each its own --intervene (--intervene all:beta=0 --intervene block0.mlp",
            ),
            ("all:beta=0;block0.mlp:v=0", "(--intervene all:beta=0 --intervene block0.mlp:v=0)"),
            ("all:beta=0 block0 . mlp:v=0", "several specs in one; give each its own --intervene"),
        ] {
            let e = Interventions::parse(&[spec.into()], false).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains(spec), "{spec}: {e}");
        }
        assert_eq!(Intervention::parse("all:v = 0.0").unwrap().action, Action::Value(0.0));
        // Spaces inside the sublayer's name too.
        let spaced = Intervention::parse(" block1 . mlp : v = 0 ").unwrap();
        assert_eq!((spaced.target, spaced.action), (Target::Sub(1, SubKind::Mlp), Action::Value(0.0)));
        // An erase factor above 1 passes a reflection: refused unless out-of-range values are
        // allowed (and then noted when far out); a large value factor is noted either way.
        let e = Interventions::parse(&["all:erase*=2".into()], false).unwrap().maps(&c).unwrap_err().to_string();
        assert!(e.contains("above 1") && e.contains("--allow-out-of-range"), "{e}");
        let wide = Interventions::parse(&["all:erase*=2".into()], true).unwrap();
        assert_eq!(wide.maps(&c).unwrap()[0].erase, 2.0);
        assert!(wide.notes().is_empty());
        let far = Interventions::parse(&["all:erase*=6".into(), "all:v*=20".into()], true).unwrap().notes();
        assert!(far.len() == 2 && far[0].contains("overflow") && far[1].contains("20 times"), "{far:?}");
        let big = Interventions::parse(&["all:v*=1e30".into()], false).unwrap().notes();
        assert!(big.len() == 1 && big[0].contains("1e30 times its trained value"), "{big:?}");
        assert!(Interventions::parse(&["all:erase=0".into()], false).unwrap().maps(&cfg(Variant::Baseline)).is_err());
    }

    #[test]
    fn k_mean_and_write_zero_select_their_sublayers() {
        let i = Interventions::parse(
            &["block1.attn:k=mean".into(), "block3:k = mean".into(), "block0.mlp:write=0".into()],
            false,
        )
        .unwrap();
        let c = cfg(Variant::Ddl);
        assert_eq!(i.k_mean_targets(&c).unwrap(), [false, false, true, false, false, false, true, true]);
        let maps = i.maps(&c).unwrap();
        // write=0 is β = 0; k=mean leaves β to the model (within [0, 2]).
        assert_eq!(maps[1].apply(1.3), 0.0);
        assert_eq!(maps[2].apply(1.3), 1.3);
        assert!(Interventions::default().k_mean_targets(&c).unwrap().iter().all(|t| !t));
    }

    #[test]
    fn bad_specs_are_clear_errors() {
        let e = |s: &str, v: Variant| {
            Interventions::parse(&[s.into()], false).and_then(|i| i.maps(&cfg(v)).map(|_| ())).unwrap_err().to_string()
        };
        assert!(e("block9.mlp:beta=0", Variant::Ddl).contains("block 9 (the model has blocks 0 to 3)"));
        assert!(e("block1.ffn:beta=0", Variant::Ddl).contains("'ffn' is neither attn nor mlp"));
        assert!(e("layer1:beta=0", Variant::Ddl).contains("unknown sublayer 'layer1'"));
        assert!(e("all:gamma=1", Variant::Ddl).contains("unknown action"));
        assert!(e("all", Variant::Ddl).contains("expected TARGET:ACTION"));
        assert!(
            e("all:beta=2.5", Variant::Ddl).contains("outside [0, 2]")
                && e("all:beta=2.5", Variant::Ddl).contains("--allow-out-of-range")
        );
        assert!(e("all:beta*=-1", Variant::Ddl).contains("negative scale"));
        assert!(e("all:beta=x", Variant::Ddl).contains("'x' is not a number"));
        assert!(
            e("all:beta=0", Variant::Baseline).contains("no β or k to intervene on; use a checkpoint of a delta-write")
        );
        assert!(e("all:k=mean", Variant::Baseline).contains("no β or k to intervene on"));
        assert!(e("block7.attn:k=mean", Variant::Ddl).contains("block 7"));
        assert!(e("all:write=1", Variant::Ddl).contains("can only be zeroed"));
        assert!(e("all:k=first", Variant::Ddl).contains("k=mean"));
        // Block numbers as the sublayers are named: no leading zeros or signs.
        for t in ["block01.mlp", "block+1", "block00"] {
            assert!(e(&format!("{t}:beta=0"), Variant::Ddl).contains("is not a block number"), "{t}");
        }
        assert!(Interventions::parse(&["block10:beta=0".into(), "block0:beta=0".into()], false).is_ok());
        // Spaces inside an action as around it; a bound β never passes is taken and said.
        let spaced = Interventions::parse(&["all:beta = 0.5".into(), "all: beta <= 3".into()], false).unwrap();
        let maps = spaced.maps(&cfg(Variant::Ddl)).unwrap();
        assert_eq!(maps[0].apply(1.7), 0.5);
        let notes = spaced.notes();
        assert!(notes.len() == 1 && notes[0].contains("beta <= 3: β is never above 2"), "{notes:?}");
        let floor = Interventions::parse(&["all:beta>=-1".into()], false).unwrap();
        assert_eq!(floor.maps(&cfg(Variant::Ddl)).unwrap()[3].apply(0.25), 0.25);
        assert!(floor.notes()[0].contains("never below 0"));
        let one = Interventions::parse(&["all:beta*=1".into(), "block0:beta*=1.0".into()], false).unwrap().notes();
        assert!(one.len() == 2 && one.iter().all(|n| n.contains("β × 1 leaves every write as trained")), "{one:?}");
        // Allowed out of range: the value is kept.
        // A scale above 1 is clamped at 2, and said so (not with --allow-out-of-range).
        let notes = Interventions::parse(&["all:beta*=4".into(), "block0:beta*=0.5".into()], false).unwrap().notes();
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("all:beta*=4") && notes[0].contains("above 0.500 becomes 2"), "{notes:?}");
        assert!(Interventions::parse(&["all:beta*=4".into()], true).unwrap().notes().is_empty());
        // Far outside (0, 2), allowed: the overflow it leads to is said.
        let far = Interventions::parse(&["all:beta=1e5".into(), "block0:beta*=100".into()], true).unwrap().notes();
        assert!(
            far.len() == 1 && far[0].contains("all:beta=1e5: β = 100000") && far[0].contains("overflow"),
            "{far:?}"
        );
        let below = Interventions::parse(&["all:beta=-20".into()], true).unwrap().notes();
        assert!(below.len() == 1 && below[0].contains("β = -20:") && !below[0].contains("up to"), "{below:?}");
        let big = Interventions::parse(&["block0:beta*=1e9".into()], true).unwrap().notes();
        assert!(big[0].contains("β up to 2e9"), "{big:?}");
        let i = Interventions::parse(&["all:beta=2.5".into()], true).unwrap();
        assert_eq!(i.maps(&cfg(Variant::Ddl)).unwrap()[0].apply(0.3), 2.5);
    }
}
