//! The collective operations data-parallel training needs, behind one trait so the training loop
//! has a single code path: [`Single`] (one process, every operation a no-op) or, with the `mpi`
//! cargo feature, `train::distributed::Mpi` (one process per adapter, gradients summed through
//! host memory with MPI).

/// Collective operations over the ranks of a run. Every rank must call the same operations in the
/// same order with buffers of the same length; the results are identical on every rank.
pub trait Collective {
    /// This process's index, `0..size()`.
    fn rank(&self) -> usize;
    /// The number of processes.
    fn size(&self) -> usize;
    /// Element-wise sum of every rank's `send` into `recv` (same length). `what` names the
    /// operation in hang reports.
    fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32], what: &str);
    /// Element-wise sum over all ranks, in place.
    fn all_reduce_sum_f64(&self, buf: &mut [f64], what: &str);
    /// Every rank's `values` (all the same length), concatenated in rank order.
    fn all_gather_u64(&self, values: &[u64], what: &str) -> Vec<u64>;
    /// Rank 0's bytes on every rank (`buf` is replaced on the others).
    fn broadcast_bytes(&self, buf: &mut Vec<u8>, what: &str);
    /// Waits until every rank has arrived.
    fn barrier(&self, what: &str);
    /// Called by the training loop once per step so hang reports can name it.
    fn set_step(&self, _step: usize) {}
    /// Whether this is a real multi-process run.
    fn is_distributed(&self) -> bool {
        self.size() > 1
    }
    /// Describes the transport (`"single process"`, `"MPI (Open MPI v4.1.4), 2 ranks"`).
    fn describe(&self) -> String;
}

/// One process: every collective is the identity.
#[derive(Debug, Clone, Copy, Default)]
pub struct Single;

impl Collective for Single {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32], _what: &str) {
        recv.copy_from_slice(send);
    }

    fn all_reduce_sum_f64(&self, _buf: &mut [f64], _what: &str) {}

    fn all_gather_u64(&self, values: &[u64], _what: &str) -> Vec<u64> {
        values.to_vec()
    }

    fn broadcast_bytes(&self, _buf: &mut Vec<u8>, _what: &str) {}

    fn barrier(&self, _what: &str) {}

    fn describe(&self) -> String {
        "single process".to_string()
    }
}

/// A 64-bit digest (the first 8 bytes of SHA-256) of some bytes.
pub fn digest64(bytes: &[u8]) -> u64 {
    use sha2::Digest;
    let h = sha2::Sha256::digest(bytes);
    u64::from_le_bytes(h[..8].try_into().unwrap())
}

/// The digest of a flat f32 buffer's bit patterns (equal iff the buffers are bit-identical, up
/// to hash collisions).
pub fn digest_f32(values: &[f32]) -> u64 {
    digest64(bytemuck::cast_slice(values))
}

/// Lines of `mine` that differ from `theirs` (both TOML documents), each prefixed with its
/// `[table]`, at most `max` of them — to name the settings that differ between ranks.
pub fn toml_diff(mine: &str, theirs: &str, max: usize) -> Vec<String> {
    fn keyed(doc: &str) -> Vec<(String, String)> {
        let mut table = String::new();
        let mut out = Vec::new();
        for line in doc.lines() {
            let l = line.trim();
            if l.starts_with('[') {
                table = l.trim_matches(|c| c == '[' || c == ']').to_string();
            } else if let Some((k, v)) = l.split_once('=') {
                let key = if table.is_empty() { k.trim().to_string() } else { format!("{table}.{}", k.trim()) };
                out.push((key, v.trim().to_string()));
            }
        }
        out
    }
    let a = keyed(mine);
    let b = keyed(theirs);
    let get = |v: &[(String, String)], k: &str| v.iter().find(|(x, _)| x == k).map(|(_, y)| y.clone());
    let mut keys: Vec<String> = a.iter().chain(&b).map(|(k, _)| k.clone()).collect();
    keys.dedup();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for k in keys {
        if !seen.insert(k.clone()) {
            continue;
        }
        let (x, y) = (get(&a, &k), get(&b, &k));
        if x != y {
            let show = |v: Option<String>| v.unwrap_or_else(|| "(missing)".into());
            out.push(format!("{k} = {} here, {} on rank 0", show(x), show(y)));
            if out.len() == max {
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_diff_names_the_differing_keys_with_their_table() {
        let a = "preset = \"tiny\"\n[model]\nd_model = 32\nn_layers = 1\n[train]\nlr = 0.001\n";
        let b = "preset = \"tiny\"\n[model]\nd_model = 64\nn_layers = 1\n[train]\nlr = 0.002\n";
        assert_eq!(
            toml_diff(a, b, 8),
            vec!["model.d_model = 32 here, 64 on rank 0", "train.lr = 0.001 here, 0.002 on rank 0"]
        );
        assert_eq!(toml_diff(a, b, 1).len(), 1);
        assert!(toml_diff(a, a, 8).is_empty());
    }

    #[test]
    fn single_process_collectives_are_the_identity() {
        let c = Single;
        let mut v = vec![0.0f32; 2];
        c.all_reduce_sum_f32(&[1.5, -2.0], &mut v, "test");
        assert_eq!(v, [1.5, -2.0]);
        assert_eq!(c.all_gather_u64(&[7, 8], "test"), [7, 8]);
        assert!(!c.is_distributed());
        assert_ne!(digest_f32(&[0.0]), digest_f32(&[-0.0]), "the digest must see bit patterns");
    }
}
