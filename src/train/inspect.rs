//! `ddl data inspect`: what a shard set holds — its shards per split, their token counts, sizes
//! and id widths, the tokenizer and source its `meta.json` records, a decoded sample of tokens at
//! any position, and (`--verify`) its integrity: every shard's SHA-256 against `meta.json`, every
//! id inside the vocabulary, with the ids used and the end-of-text tokens counted. Reads the
//! shards by memory map (as `ddl train --data` does); writes nothing.

use std::path::{Path, PathBuf};

use super::cache::size;
use super::data::{self, DataError, Meta};
use super::describe::count;
use super::shards::{self, Format, Shard, Stream};
use crate::tokenizer::Tokenizer;

/// One split of a shard set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Train,
    Val,
}

impl Split {
    pub fn parse(s: &str) -> Result<Split, String> {
        match s {
            "train" => Ok(Split::Train),
            "val" | "validation" => Ok(Split::Val),
            _ => Err(format!("unknown split '{s}' (expected train or val)")),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Val => "val",
        }
    }
}

/// What to inspect and how.
pub struct InspectOptions {
    /// A shard folder, or a glob of shard files (as `ddl train --data` takes them).
    pub data: String,
    pub format: Format,
    /// A tokenizer given by the caller (`--tokenizer`), and how to name it; else `meta.json`'s.
    pub tokenizer: Option<(Tokenizer, String)>,
    /// The split, first token and number of tokens of the sample (0: none).
    pub split: Split,
    pub at: usize,
    pub sample: usize,
    /// Digests against `meta.json` and every id against the vocabulary (a pass over every token).
    pub verify: bool,
    /// A progress bar on standard error while verifying (where it is a terminal).
    pub progress: bool,
}

/// A shard set's description.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SetInfo {
    /// `--data` as given.
    pub data: String,
    /// The folder of the shards.
    pub folder: PathBuf,
    /// `llmc` or `raw-u16`.
    pub format: &'static str,
    /// The folder has a `meta.json` (`ddl data prepare`'s record of the set).
    pub meta: bool,
    /// What `meta.json` says the tokens were made from.
    pub source: Option<String>,
    pub tokenizer: Option<TokenizerInfo>,
    pub splits: Vec<SplitInfo>,
    pub sample: Option<Sample>,
    /// `--verify`'s findings (it fails on a problem instead).
    pub verified: Option<Verified>,
    /// Things to know: a missing split, a tokenizer that differs from `meta.json`'s, ….
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct TokenizerInfo {
    /// `char` or `bpe`.
    pub kind: &'static str,
    pub vocab_size: usize,
    /// `meta.json`, or the `--tokenizer` given.
    pub from: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct SplitInfo {
    pub split: Split,
    pub tokens: usize,
    pub bytes: u64,
    pub shards: Vec<ShardInfo>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardInfo {
    pub file: PathBuf,
    pub tokens: usize,
    pub bytes: u64,
    /// 16 or 32: how wide each stored id is.
    pub id_bits: u32,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Sample {
    pub split: Split,
    /// The first token's position in the split, and the tokens shown (fewer than asked at the
    /// split's end).
    pub at: usize,
    pub ids: Vec<u32>,
    /// Their text (`None` without a tokenizer).
    pub text: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Verified {
    /// The shards' SHA-256 digests were compared with `meta.json`'s (false: no `meta.json`).
    pub digests: bool,
    /// Per split, in `splits`' order.
    pub splits: Vec<SplitStats>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct SplitStats {
    pub split: Split,
    /// The largest id, and how many distinct ids occur.
    pub max_id: Option<u32>,
    pub distinct: usize,
    /// End-of-text tokens (the document separator of `ddl data prepare` with a BPE); `None`
    /// without a tokenizer that has one.
    pub end_of_text: Option<usize>,
}

/// An inspection problem.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Shard(#[from] shards::ShardError),
    #[error("{0}")]
    Settings(String),
}

/// Inspects the shard set `o.data`.
pub fn inspect(o: &InspectOptions) -> Result<SetInfo, InspectError> {
    let (train, val) = shards::find_parts(&o.data, o.format)?;
    if train.is_empty() && val.is_empty() {
        return Err(InspectError::Settings(format!(
            "--data '{}' holds no shards (llm.c's names: NAME_train_000000.bin, NAME_val_000000.bin; headerless \
             with --data-format raw-u16: train.bin and val.bin; `ddl data prepare` writes a set){}",
            o.data,
            shards::not_shards(&o.data)
        )));
    }
    let folder = train.iter().chain(&val).next().and_then(|p| p.parent()).map(Path::to_path_buf).unwrap_or_default();
    let meta = data::read_data_meta(&folder)?;
    if let Some(m) = &meta
        && o.format == Format::Llmc
    {
        data::check_meta_counts(m, &folder)?;
    }
    let mut notes = Vec::new();
    // A folder whose meta.json lists shards it no longer holds: --verify fails on the first of
    // them (it vouches for the whole set), a plain inspection says so.
    if let Some(m) = &meta
        && Path::new(&o.data).is_dir()
        && let Some(e) = data::missing_listed_shard(m, &folder)
    {
        if o.verify {
            return Err(e.into());
        }
        notes.push(e.to_string());
    }
    let tok = tokenizer_of(o, meta.as_ref(), &folder, &mut notes)?;
    let open = |v: &[PathBuf]| -> Result<Stream, shards::ShardError> {
        Ok(Stream::new(v.iter().map(|p| Shard::open(p, o.format)).collect::<Result<Vec<_>, _>>()?))
    };
    let streams = [(Split::Train, open(&train)?), (Split::Val, open(&val)?)];
    for (split, s) in &streams {
        if s.shards.is_empty() {
            notes.push(match split {
                Split::Train => "no training shards: `ddl train --data` needs some".to_string(),
                Split::Val => "no validation shard: `ddl train --data` needs one (`ddl data prepare --val-tokens N` \
                               writes it)"
                    .to_string(),
            });
        } else if s.is_empty() {
            // (Shards of no token, a headerless val.bin of 0 bytes: listed as "0 tokens" alone.)
            notes.push(format!(
                "the {} split's shards hold no token: `ddl train --data` needs at least one sequence there; prepare \
                 the data again",
                split.name()
            ));
        }
    }
    let splits = streams
        .iter()
        .map(|(split, s)| SplitInfo {
            split: *split,
            tokens: s.len(),
            bytes: s.shards.iter().map(|sh| file_bytes(&sh.path)).sum(),
            shards: s
                .shards
                .iter()
                .map(|sh| ShardInfo {
                    file: sh.path.clone(),
                    tokens: sh.len(),
                    bytes: file_bytes(&sh.path),
                    id_bits: sh.id_bits(),
                })
                .collect(),
        })
        .collect();
    if let Some(t) = &tok
        && let Some(p) = streams.iter().find_map(|(_, s)| s.narrow_for(t.vocab_size()))
    {
        notes.push(format!(
            "{} stores ids in 16 bits but the tokenizer has {} tokens: ids from 65536 up cannot be in it",
            p.display(),
            t.vocab_size()
        ));
    }
    // (Before the sample: its failure names the shard and place of a bad id.)
    let verified =
        if o.verify { Some(verify(o, meta.as_ref(), &folder, &train, &val, &streams, tok.as_ref())?) } else { None };
    let sample = if o.sample == 0 {
        None
    } else {
        let s = &streams[o.split as usize].1;
        if s.is_empty() {
            return Err(InspectError::Settings(format!(
                "--split {}: --data '{}' holds no {} tokens; sample the other split (--split {}), or --sample 0",
                o.split.name(),
                o.data,
                if o.split == Split::Train { "training" } else { "validation" },
                if o.split == Split::Train { "val" } else { "train" }
            )));
        }
        if o.at >= s.len() {
            return Err(InspectError::Settings(format!(
                "--at {}: the {} split holds {} tokens; give a position below that",
                o.at,
                o.split.name(),
                count(s.len() as u64)
            )));
        }
        let end = o.at.saturating_add(o.sample).min(s.len());
        let ids: Vec<u32> = (o.at..end).map(|i| s.get(i)).collect();
        let text = match &tok {
            Some(t) => {
                if let Some(i) = ids.iter().position(|&id| id as usize >= t.vocab_size()) {
                    return Err(InspectError::Settings(format!(
                        "token {} of the {} split is {}, outside the tokenizer's vocabulary of {}: the shards were \
                         made with another tokenizer; give the one they were made with (--tokenizer)",
                        o.at + i,
                        o.split.name(),
                        ids[i],
                        t.vocab_size()
                    )));
                }
                Some(t.decode(&ids).map_err(|e| InspectError::Settings(format!("the sample does not decode: {e}")))?)
            }
            None => None,
        };
        Some(Sample { split: o.split, at: o.at, ids, text })
    };
    Ok(SetInfo {
        data: o.data.clone(),
        folder,
        format: match o.format {
            Format::Llmc => "llmc",
            Format::RawU16 => "raw-u16",
        },
        meta: meta.is_some(),
        source: meta.as_ref().map(|m| m.source.clone()).filter(|s| !s.is_empty()),
        tokenizer: tok.as_ref().map(|t| TokenizerInfo {
            kind: t.kind(),
            vocab_size: t.vocab_size(),
            from: o.tokenizer.as_ref().map(|(_, from)| from.clone()).unwrap_or_else(|| "meta.json".into()),
        }),
        splits,
        sample,
        verified,
        notes,
    })
}

/// The tokenizer to decode and check with: the one given, else `meta.json`'s.
fn tokenizer_of(
    o: &InspectOptions,
    meta: Option<&Meta>,
    folder: &Path,
    notes: &mut Vec<String>,
) -> Result<Option<Tokenizer>, InspectError> {
    let from_meta = match meta {
        Some(m) => Some(Tokenizer::from_json(&m.tokenizer).map_err(|e| DataError::Meta {
            path: folder.join("meta.json"),
            msg: format!("its tokenizer does not load ({e}); prepare the data again (`ddl data prepare`)"),
        })?),
        None => None,
    };
    Ok(match (&o.tokenizer, from_meta) {
        (Some((given, name)), Some(m)) => {
            if given.to_json() != m.to_json() {
                notes.push(format!(
                    "--tokenizer {name} (vocabulary {}) is not the one meta.json records (vocabulary {}): the sample \
                     and the checks use --tokenizer",
                    given.vocab_size(),
                    m.vocab_size()
                ));
            }
            Some(given.clone())
        }
        (Some((given, _)), None) => Some(given.clone()),
        (None, Some(m)) => Some(m),
        (None, None) => {
            notes.push(
                "no meta.json (not made by `ddl data prepare`: llm.c's downloads, nanoGPT's .bin) and no --tokenizer: \
                 ids are shown without their text and not checked against a vocabulary; give --tokenizer FILE (e.g. \
                 GPT-2's tokenizer.json for llm.c's FineWeb shards)"
                    .into(),
            );
            None
        }
    })
}

/// `--verify`: digests against `meta.json`, then one pass over every token: the largest id, the
/// distinct ids, the end-of-text tokens; an id outside the vocabulary fails naming its shard and
/// place.
fn verify(
    o: &InspectOptions,
    meta: Option<&Meta>,
    folder: &Path,
    train: &[PathBuf],
    val: &[PathBuf],
    streams: &[(Split, Stream); 2],
    tok: Option<&Tokenizer>,
) -> Result<Verified, InspectError> {
    if let Some(m) = meta {
        let files: Vec<PathBuf> = train.iter().chain(val).cloned().collect();
        data::verify_shards(m, folder, &files, Path::new(&o.data).is_dir())?;
    }
    let total: usize = streams.iter().map(|(_, s)| s.len()).sum();
    let bar = (o.progress && total > 0).then(|| {
        let b = indicatif::ProgressBar::new(total as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("verifying {bar:30} {human_pos}/{human_len} tokens, eta {eta}")
                .expect("a valid template"),
        );
        b
    });
    let eot = tok.and_then(Tokenizer::eot_id);
    let mut out = Vec::new();
    for (split, s) in streams {
        let mut seen: Vec<u64> = Vec::new();
        let (mut max_id, mut eots) = (None::<u32>, 0usize);
        for sh in &s.shards {
            // In pieces, each let go of once read (the pass does not leave the set resident).
            const PIECE: usize = 1 << 20;
            for a in (0..sh.len()).step_by(PIECE) {
                let b = (a + PIECE).min(sh.len());
                for i in a..b {
                    let id = sh.get(i);
                    let w = id as usize / 64;
                    if w >= seen.len() {
                        seen.resize(w + 1, 0);
                    }
                    seen[w] |= 1 << (id % 64);
                    max_id = Some(max_id.map_or(id, |m: u32| m.max(id)));
                    eots += usize::from(Some(id) == eot);
                }
                sh.release(a, b - a);
                if let Some(bar) = &bar {
                    bar.inc((b - a) as u64);
                }
            }
        }
        if let (Some(t), Some(m)) = (tok, max_id)
            && m as usize >= t.vocab_size()
        {
            if let Some(bar) = &bar {
                bar.finish_and_clear();
            }
            // Names the shard and place of the first such id, and why.
            s.check_vocab(t.vocab_size(), "the tokenizer's")?;
        }
        out.push(SplitStats {
            split: *split,
            max_id,
            distinct: seen.iter().map(|w| w.count_ones() as usize).sum(),
            end_of_text: eot.map(|_| eots),
        });
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(Verified { digests: meta.is_some(), splits: out })
}

fn file_bytes(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

impl SetInfo {
    /// The description as lines of text.
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        let kind = match self.format {
            "llmc" => "llm.c-format token shards",
            _ => "headerless 16-bit token files (raw-u16)",
        };
        let made = if self.meta { "made by `ddl data prepare` (meta.json)" } else { "no meta.json" };
        out.push(format!("{}: {kind}, {made}", self.data));
        if let Some(s) = &self.source {
            out.push(format!("source: {s}"));
        }
        match &self.tokenizer {
            Some(t) => {
                out.push(format!("tokenizer: {}, {} tokens (from {})", t.kind, count(t.vocab_size as u64), t.from))
            }
            None => out.push("tokenizer: unknown (give --tokenizer)".into()),
        }
        for s in &self.splits {
            if s.shards.is_empty() {
                continue;
            }
            let bits: Vec<u32> = s.shards.iter().map(|sh| sh.id_bits).collect();
            let width = if bits.iter().all(|&b| b == bits[0]) {
                format!("{}-bit ids", bits[0])
            } else {
                "mixed id widths".into()
            };
            out.push(format!(
                "{}: {} tokens in {}, {}, {width}",
                s.split.name(),
                count(s.tokens as u64),
                crate::plural(s.shards.len(), "shard"),
                size(s.bytes)
            ));
            for sh in &s.shards {
                let name = sh.file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                out.push(format!("  {name}  {} tokens, {}", count(sh.tokens as u64), size(sh.bytes)));
            }
        }
        if let Some(v) = &self.verified {
            let digests = if v.digests {
                "every shard's SHA-256 matches meta.json"
            } else {
                "no meta.json to compare digests with"
            };
            out.push(format!(
                "verified: {digests}; every id read{}",
                match &self.tokenizer {
                    Some(t) => format!(", all below the vocabulary's {}", count(t.vocab_size as u64)),
                    None => " (no vocabulary to check them against)".into(),
                }
            ));
            for st in &v.splits {
                let Some(max) = st.max_id else { continue };
                let mut line =
                    format!("  {}: {} distinct ids, the largest {max}", st.split.name(), count(st.distinct as u64));
                if let Some(e) = st.end_of_text {
                    line.push_str(&format!(", {} end-of-text tokens", count(e as u64)));
                }
                out.push(line);
            }
        }
        for n in &self.notes {
            out.push(format!("note: {n}"));
        }
        if let Some(s) = &self.sample {
            let split = self.splits.iter().find(|x| x.split == s.split).map_or(0, |x| x.tokens);
            out.push(format!(
                "sample: {} split, tokens {}..{} of {}:",
                s.split.name(),
                s.at,
                s.at + s.ids.len(),
                count(split as u64)
            ));
            match &s.text {
                Some(t) => out.push(t.clone()),
                None => out.push(s.ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")),
            }
        }
        out.join("\n") + "\n"
    }
}
