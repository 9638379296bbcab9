//! Cached decoding reproduces the full-sequence forward, for every variant: prefill of a prompt
//! (1 token, and prompts shorter than K−1) then one token at a time.

use ddl::golden::Golden;
use ddl::model::{Layout, Model};

fn model_from_golden(name: &str) -> (Model, Golden) {
    let path = ddl::testing::data_path("tests/golden").join(format!("{name}.safetensors"));
    let g = Golden::load(&path).unwrap();
    let layout = Layout::new(&g.config);
    let mut flat = vec![0.0f32; layout.total];
    for (s, &off) in layout.specs.iter().zip(&layout.offsets) {
        flat[off..off + s.len()].copy_from_slice(g.f32(&format!("param.{}", s.name), Some(&s.shape)).unwrap());
    }
    (Model::with_params(ddl::testing::gpu(), g.config.clone(), &flat).unwrap(), g)
}

fn check(name: &str) {
    let (model, g) = model_from_golden(name);
    let (b, t, v) = (g.batch, g.seq_len, g.config.vocab_size);
    let tokens = g.i32("input.tokens", &[b, t]).unwrap();
    let want = g.f32("out.logits", Some(&[b, t, v])).unwrap();
    for prefill in [1usize, 2, 5].into_iter().filter(|&p| p <= t) {
        for seq in 0..b {
            let toks: Vec<u32> = tokens[seq * t..(seq + 1) * t].iter().map(|&x| x as u32).collect();
            let mut cache = model.decode_cache().unwrap();
            let mut pre = model.decode_program(&cache, prefill).unwrap();
            let mut got = model.decode(&mut pre, &mut cache, &toks[..prefill]).unwrap();
            let mut step = model.decode_program(&cache, 1).unwrap();
            for &tk in &toks[prefill..] {
                got.extend(model.decode(&mut step, &mut cache, &[tk]).unwrap());
            }
            let w: Vec<f64> = want[seq * t * v..(seq + 1) * t * v].iter().map(|&x| x as f64).collect();
            let r = ddl::testing::compare(&format!("{name} seq {seq} prefill {prefill}"), &got, &w);
            assert!(r.passes(1e-4), "{r}");
            assert_eq!(cache.pos, t);
        }
    }
}

#[test]
fn cached_decoding_matches_the_full_forward_baseline() {
    check("baseline");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl_v1() {
    check("ddl_v1");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl() {
    check("ddl");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl_ec() {
    check("ddl_ec");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl_cc() {
    check("ddl_cc");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl_ccec() {
    check("ddl_ccec");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl_v1_vmap() {
    check("ddl_v1_vmap");
}

#[test]
fn cached_decoding_matches_the_full_forward_ddl_vmap() {
    check("ddl_vmap");
}

#[test]
fn cached_decoding_matches_for_odd_shapes() {
    // H·h ≠ d, d_v = 3, K_s = 5 > T, K_e = 2.
    for v in ["odd/ddl", "odd/ddl_ec", "odd/ddl_vmap", "odd/ddl_ccec"] {
        check(v);
    }
}

#[test]
fn a_full_context_is_a_clear_error() {
    let (model, _) = model_from_golden("ddl");
    let mut cache = model.decode_cache().unwrap();
    cache.pos = cache.capacity;
    let mut p = model.decode_program(&cache, 1).unwrap();
    let e = model.decode(&mut p, &mut cache, &[0]).unwrap_err().to_string();
    assert!(e.contains("context is full"), "{e}");
}
