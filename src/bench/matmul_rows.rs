//! The matmul benchmarks: the products timed (square sizes, a preset's training shapes), the
//! autotuner's rows and plan, and the forms timed against each other or another adapter.

use super::*;

/// A matmul form's constructor from its (m, k, n).
pub type MatmulCtor = fn(usize, usize, usize) -> Matmul;

/// The matmul forms benchmarked: (name, constructor).
pub const MATMUL_CASES: &[(&str, MatmulCtor)] = &[("nn", Matmul::nn), ("nt", Matmul::nt), ("tn", Matmul::tn)];

/// Square products of the given sizes in the given forms (`nn`, `nt`, `tn`), named by form.
pub fn square_matmuls(sizes: &[usize], cases: &[&str]) -> Vec<(String, Matmul)> {
    let mut out = Vec::new();
    for &s in sizes {
        for (name, ctor) in MATMUL_CASES.iter().filter(|(n, _)| cases.contains(n)) {
            out.push((name.to_string(), ctor(s, s, s)));
        }
    }
    out
}

/// The linear-layer products of one training step of a model with width `d`, `dq` = H·h query
/// width, MLP hidden `f` and vocabulary `vocab` at `n` = B·T tokens: for the attention's q/k/v
/// and output projections, the MLP's gate/up and down projections and the tied LM head, the
/// forward x·Wᵀ, the weight gradient dYᵀ·X and the input gradient dY·W (the model's own forms;
/// its MLP rows are padded to a multiple of 4, which these leave out).
pub fn model_matmuls(n: usize, d: usize, dq: usize, f: usize, vocab: usize) -> Vec<(String, Matmul)> {
    let mut out = Vec::new();
    for (layer, fan_in, fan_out) in [
        ("attn.wq/wk/wv", d, dq),
        ("attn.wo", dq, d),
        ("mlp.w_gate/w_up", d, f),
        ("mlp.w_down", f, d),
        ("lm_head", d, vocab),
    ] {
        out.push((format!("{layer} fwd x·Wᵀ"), Matmul::nt(n, fan_out, fan_in)));
        out.push((format!("{layer} dW = dYᵀ·X"), Matmul::tn(fan_out, fan_in, n)));
        out.push((format!("{layer} dX = dY·W"), Matmul::nn(n, fan_in, fan_out)));
    }
    out
}

/// Which tile variants `ddl bench matmul` times for each product.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VariantSet {
    /// Every variant the adapter can run.
    All,
    /// Only the variant [`matmul::pick`] uses (the autotuner's measurement where there is one).
    Auto,
    /// These, by name.
    Named(Vec<String>),
}

impl VariantSet {
    /// `--variants` checked without an adapter (`DDL_CHECK_ARGS`): `all`, `auto`, or names every
    /// one of which some adapter runs (the tiles, the cooperative-matrix kernels and the
    /// diagnostic halves of both).
    pub fn check_names(s: &str) -> std::result::Result<(), String> {
        if s == "all" || s == "auto" {
            return Ok(());
        }
        let mut known = matmul::variants();
        known.extend(matmul::coop::ALL);
        known.extend(matmul::coop::DIAGNOSTIC);
        known.extend(matmul::STAGED_DIAGNOSTIC);
        match s.split(',').map(str::trim).find(|n| !known.contains(n)) {
            Some(bad) => Err(format!(
                "--variants: '{bad}' is not a tile variant of this engine (expected all or auto alone, or a list of: {})",
                known.join(", ")
            )),
            None => Ok(()),
        }
    }

    /// `--variants`: `all`, `auto` or a comma-separated list of tile variants `gpu` runs.
    pub fn parse(s: &str, gpu: &Gpu) -> std::result::Result<VariantSet, String> {
        Ok(match s {
            "all" => VariantSet::All,
            "auto" => VariantSet::Auto,
            list => {
                let names: Vec<String> = list.split(',').map(|x| x.trim().to_string()).collect();
                let mut known = matmul::variants_for(gpu);
                known.extend(matmul::coop::variants_here(gpu));
                if matmul::coop::usable(gpu) {
                    known.extend(matmul::coop::DIAGNOSTIC);
                }
                known.extend(matmul::staged_diagnostics_for(gpu));
                if let Some(bad) = names.iter().find(|n| !known.contains(&n.as_str())) {
                    return Err(format!(
                        "--variants: '{bad}' is not a tile variant this adapter runs (expected all or auto alone, or a list of: {})",
                        known.join(", ")
                    ));
                }
                VariantSet::Named(names)
            }
        })
    }
}

/// `ddl bench matmul --tune`: measures and caches the best variant of every product that
/// [`tune_plan`] lists; a `matmul_tune` row each (a piece's with `"piece"`, its index).
pub fn tune_rows(gpu: &Gpu, products: &[(String, Matmul)], mut emit: impl FnMut(Row)) -> Result<()> {
    for (name, piece, mm) in tune_plan(gpu, products)? {
        let v = matmul::autotune::tune(gpu, &mm)?;
        let mut r = json!({"bench": "matmul_tune", "case": name, "m": mm.m, "n": mm.n, "k": mm.k, "variant": v});
        if let Some(i) = piece {
            r["piece"] = json!(i);
        }
        emit(Row(r));
    }
    Ok(())
}

/// The products `--tune` measures: each product that runs as one dispatch, and each piece (by
/// its index among [`Matmul::split_products`], the first of each shape only) of a product that
/// runs in pieces — as a training step's first use tunes them, so that the `pieces:N` row then
/// times what training runs (GPU run 5: the LM head's ∂zn ran 16.4 TFLOP/s on the heuristic's
/// tile and 35.9 on the autotuner's in the step). Products whose operands exceed the adapter's
/// largest buffer are left out (their rows say skipped).
pub fn tune_plan(gpu: &Gpu, products: &[(String, Matmul)]) -> Result<Vec<(String, Option<usize>, Matmul)>> {
    let mut plan = Vec::new();
    for (name, mm) in products.iter().filter(|(_, mm)| buffer_skip(gpu, mm).is_none()) {
        if matmul_skip(gpu, mm).is_none() {
            plan.push((name.clone(), None, *mm));
            continue;
        }
        let mut seen = Vec::new();
        for (i, piece) in mm.split_products(gpu)?.into_iter().enumerate() {
            let shape = (piece.m, piece.n, piece.k, piece.batch, piece.a, piece.b, piece.c);
            if !seen.contains(&shape) {
                seen.push(shape);
                plan.push((name.clone(), Some(i), piece));
            }
        }
    }
    Ok(plan)
}

/// Why `mm` cannot be benchmarked as one dispatch on this adapter (an operand over its storage
/// binding, K over [`matmul::MAX_K_PER_DISPATCH`]), or `None` when it can.
pub fn matmul_skip(gpu: &Gpu, mm: &Matmul) -> Option<String> {
    let binding = gpu.limits.max_storage_buffer_binding_size / 4;
    let too_big = mm.extents().iter().any(|&e| e as u64 > binding) || mm.k > matmul::MAX_K_PER_DISPATCH;
    too_big.then(|| {
        format!(
            "an operand exceeds this adapter's storage binding ({binding} elements) or K > {}",
            matmul::MAX_K_PER_DISPATCH
        )
    })
}

/// Why `mm`'s operands cannot be allocated on this adapter (one over its largest buffer), or
/// `None` when they can.
pub fn buffer_skip(gpu: &Gpu, mm: &Matmul) -> Option<String> {
    let max = gpu.limits.max_buffer_size;
    let bytes = [mm.a_elem.bytes(), mm.b_elem.bytes(), 4];
    let too_big = mm.extents().iter().zip(bytes).any(|(&e, b)| e as u64 * b as u64 > max);
    too_big.then(|| format!("an operand exceeds this adapter's largest buffer ({max} bytes)"))
}

/// GFLOP/s of each product (`(name, product)`) with the chosen tile variants, marking the
/// variant [`matmul::pick`] would use (`"auto"`). Operands are random (never zeros, which can
/// run faster than real data); products too large for one dispatch ([`matmul_skip`]) are timed
/// as the model runs them, in pieces (one `pieces:N` row), and get a row with `"skipped"` only
/// where an operand exceeds the adapter's largest buffer.
pub fn matmul_rows(
    gpu: &Gpu,
    cases: &[(String, Matmul)],
    variants: &VariantSet,
    reps: usize,
    emit: impl FnMut(Row),
) -> Result<()> {
    matmul_rows_against(gpu, None, cases, variants, reps, emit)
}

/// [`matmul_rows`], and with `against` (a handle to the same device with other forms and the
/// `DDL_FORMS`-style text that made it: `ddl bench matmul --against-forms`) each variant also on
/// that handle, the two alternated in `reps` blocks A B B A (A = `against`) as
/// [`train_compare_rows`] does: the rows add `against_ms` (median), `ratio_median_block` (this
/// handle's time over the other's; below 1: these forms are faster) and its 95 % interval. A
/// variant the other handle's forms do not run gets a row with `"skipped"` saying so.
pub fn matmul_rows_against(
    gpu: &Gpu,
    against: Option<(&Gpu, &str)>,
    cases: &[(String, Matmul)],
    variants: &VariantSet,
    reps: usize,
    mut emit: impl FnMut(Row),
) -> Result<()> {
    let mut rng = Rng::new(1);
    for (name, mm) in cases {
        let [ea, eb, ec] = mm.extents();
        let base = json!({
            "bench": "matmul", "case": name, "m": mm.m, "n": mm.n, "k": mm.k,
            "flop": mm.flops(), "bytes": mm.min_bytes(),
            "operands": format!("{}{}", mm.a_elem.code(), mm.b_elem.code()),
        });
        // A product too large for one dispatch is timed as the model runs it: its pieces
        // ([`Matmul::bind_split`]), one `pieces:N` row; skipped only where an operand exceeds
        // the adapter's largest buffer.
        let pieces = matmul_skip(gpu, mm).is_some();
        if pieces && let Some(why) = buffer_skip(gpu, mm) {
            let mut r = base.clone();
            r["skipped"] = json!(why);
            emit(Row(r));
            continue;
        }
        // An f16-stored operand: random values rounded to f16 on the device.
        let mut operand = |label: &str, n: usize, elem: matmul::MatmulElem| -> Result<Tensor> {
            let t = Tensor::from_f32(gpu, label, &[n], &rng.uniform(n, -1.0, 1.0))?;
            if elem != matmul::MatmulElem::F16 {
                return Ok(t);
            }
            let h = Tensor::zeros(gpu, label, &[n.div_ceil(2).next_multiple_of(2)], DType::U32)?;
            let ds = crate::kernels::elementwise::pack_f16(gpu, t.view(), h.view(), n)?;
            gpu.run(&ds.iter().collect::<Vec<_>>())?;
            Ok(h)
        };
        let a = operand("a", ea, mm.a_elem)?;
        let b = operand("b", eb, mm.b_elem)?;
        let c = Tensor::zeros(gpu, "c", &[ec], DType::F32)?;
        if pieces {
            let ds = mm.bind_split(gpu, a.view(), b.view(), c.view())?;
            let mut r = base.clone();
            let ms = time_against(gpu, against, &ds, reps, &mut r, |other| {
                mm.bind_split(other, a.view(), b.view(), c.view())
            })?;
            r["variant"] = json!(format!("pieces:{}", ds.len()));
            r["auto"] = json!(true);
            r["pieces"] = json!(ds.len());
            r["ms"] = json!(ms);
            r["gflop_per_s"] = json!(mm.flops() / ms / 1e6);
            emit(Row(r));
            continue;
        }
        let auto = matmul::pick(gpu, mm);
        let (all, diagnostic) = product_variants(gpu, mm);
        let chosen: Vec<&str> = match variants {
            VariantSet::All => all,
            VariantSet::Auto => vec![auto],
            VariantSet::Named(v) => all.into_iter().chain(diagnostic).filter(|x| v.iter().any(|y| y == x)).collect(),
        };
        // What the other side's forms run (`--against-forms matmul_subgroup=0` leaves out the
        // `…g` variants this side runs): the others get a row that says so.
        let other_runs = against.map(|(o, spec)| {
            let (all, diagnostic) = product_variants(o, mm);
            (spec, all.into_iter().chain(diagnostic).collect::<Vec<_>>())
        });
        for v in chosen {
            if let Some((spec, runs)) = &other_runs
                && !runs.contains(&v)
            {
                let mut r = base.clone();
                r["variant"] = json!(v);
                r["skipped"] = json!(format!(
                    "the other side's forms (--against-forms {spec}) do not run this variant; leave it out of \
                     --variants, or compare forms that both run it"
                ));
                emit(Row(r));
                continue;
            }
            if let Some(why) = mm.diagnostic_unfit(v)? {
                let mut r = base.clone();
                r["variant"] = json!(v);
                r["skipped"] = json!(why);
                emit(Row(r));
                continue;
            }
            let d = mm.bind_variant(gpu, v, a.view(), b.view(), c.view())?;
            let mut r = base.clone();
            let bind_other = |other: &Gpu| mm.bind_variant(other, v, a.view(), b.view(), c.view()).map(|d| vec![d]);
            let ms = time_against(gpu, against, &[d], reps, &mut r, bind_other)?;
            r["variant"] = json!(v);
            r["auto"] = json!(v == auto);
            r["ms"] = json!(ms);
            r["gflop_per_s"] = json!(mm.flops() / ms / 1e6);
            emit(Row(r));
        }
        // A product the model splits along K (a weight gradient with few output tiles): what
        // the model runs, the pieces, the remainder and the column sum together (`split:P`).
        let pieces = mm.k_pieces(gpu);
        if pieces > 1 {
            let ds = mm.bind_split(gpu, a.view(), b.view(), c.view())?;
            let ms = time_dispatches(gpu, &ds.iter().collect::<Vec<_>>(), reps)?;
            let mut r = base.clone();
            r["variant"] = json!(format!("split:{pieces}"));
            r["auto"] = json!(false);
            r["split"] = json!(true);
            r["dispatches"] = json!(ds.len());
            r["ms"] = json!(ms);
            r["gflop_per_s"] = json!(mm.flops() / ms / 1e6);
            emit(Row(r));
        }
    }
    Ok(())
}

/// The tile variants `gpu` runs for `mm`: those `--variants all` times (the cooperative-matrix
/// ones for f16 products where the device has them, `coop128d` only for products it can run),
/// and the diagnostic halves, timed only when named.
fn product_variants(gpu: &Gpu, mm: &Matmul) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut all = matmul::variants_for(gpu);
    if mm.is_half() {
        let direct = matmul::coop::direct_fits(mm).is_none();
        all.extend(matmul::coop::variants_here(gpu).into_iter().filter(|v| direct || *v != matmul::coop::VARIANT128D));
    }
    let coop_here = mm.is_half() && matmul::coop::usable(gpu);
    let diagnostic =
        matmul::coop::DIAGNOSTIC.into_iter().filter(|_| coop_here).chain(matmul::staged_diagnostics_for(gpu));
    (all, diagnostic.collect())
}

/// The time of `ds` on `gpu` ([`time_dispatches`]), or with `against` (another handle to the
/// device and its forms' text) `ds` against the same product bound there by `bind_other`, in
/// `reps` blocks A B B A ([`ab_blocks`], A = `against`): this side's median, and `r` gains
/// `against_forms`, `against_ms`, `ratio_median_block`, its 95 % interval and `blocks`.
fn time_against(
    gpu: &Gpu,
    against: Option<(&Gpu, &str)>,
    ds: &[crate::gpu::Dispatch],
    reps: usize,
    r: &mut serde_json::Value,
    bind_other: impl Fn(&Gpu) -> Result<Vec<crate::gpu::Dispatch>>,
) -> Result<f64> {
    let Some((other, spec)) = against else {
        return time_dispatches(gpu, &ds.iter().collect::<Vec<_>>(), reps);
    };
    let da = bind_other(other)?;
    let ab = ab_blocks(reps, |who| {
        let (g, list) = if who == 0 { (other, &da[..]) } else { (gpu, ds) };
        steady_ms(g, &list.iter().collect::<Vec<_>>(), 1).map(|t| t.0)
    })?;
    r["against_forms"] = json!(spec);
    r["against_ms"] = json!(ab.a_median);
    r["ratio_median_block"] = json!(ab.ratio_median);
    r["ratio_median_ci95"] = json!(ab.ratio_ci95.map(|(lo, hi)| [lo, hi]));
    r["blocks"] = json!(ab.blocks);
    Ok(ab.b_median)
}
