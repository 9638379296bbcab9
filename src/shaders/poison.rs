//! Workgroup memory poisoned at each workgroup's start (the test form `wg_poison`): a check that
//! no kernel reads workgroup memory it has not written.
//!
//! wgpu zeroes workgroup memory before each workgroup by default (`wg_zero`); without that a GPU
//! leaves whatever an earlier workgroup wrote, and a CPU driver such as lavapipe mostly leaves
//! finite values of the same kernel, which a read of an unwritten element multiplied by zero or
//! by a small weight hides. So [`poisoned`] rewrites a shader: every compute entry point first
//! fills each workgroup variable it uses with NaN (floats), all ones (integers), then a barrier;
//! a kernel that reads an element before writing it then puts NaN or a wild index into its
//! outputs, which the kernel tests' float64 comparisons and NaN checks report.

use naga::{ArraySize, Scalar, ScalarKind, TypeInner};

/// The WGSL of one element of type `inner` filled with the poison (`nan` names an f32 NaN
/// computed at run time: a NaN constant is a shader-creation error in WGSL), or `None` for a
/// type the rewrite does not fill.
fn poison_value(inner: &TypeInner) -> Option<String> {
    let scalar = |s: &Scalar| -> Option<(&'static str, String)> {
        match (s.kind, s.width) {
            (ScalarKind::Float, 4) => Some(("f32", "ddl_nan".into())),
            (ScalarKind::Float, 2) => Some(("f16", "f16(ddl_nan)".into())),
            (ScalarKind::Uint, 4) => Some(("u32", "0xffffffffu".into())),
            (ScalarKind::Sint, 4) => Some(("i32", "-1i".into())),
            _ => None,
        }
    };
    match inner {
        TypeInner::Scalar(s) => scalar(s).map(|(_, v)| v),
        TypeInner::Vector { size, scalar: s } => scalar(s).map(|(t, v)| format!("vec{}<{t}>({v})", *size as u8)),
        _ => None,
    }
}

/// `text` (a validated WGSL module) with every compute entry point starting by filling each
/// workgroup variable it uses with the poison, then `workgroupBarrier()`. Arrays of scalars and
/// vectors and plain scalars and vectors are filled (atomics by `atomicStore`); an entry point
/// that uses a workgroup variable of another type is an error naming it, so that nothing goes
/// unpoisoned silently.
pub fn poisoned(label: &str, text: &str) -> Result<String, String> {
    let (module, info) = super::validate(label, text)?;
    // (insertion offset in `text`, text to insert), applied from the end.
    let mut edits: Vec<(usize, String)> = Vec::new();
    for (i, ep) in module.entry_points.iter().enumerate() {
        if ep.stage != naga::ShaderStage::Compute {
            continue;
        }
        let fi = info.get_entry_point(i);
        let threads: u32 = ep.workgroup_size.iter().product();
        let mut fills = Vec::new();
        for (h, gv) in module.global_variables.iter() {
            if gv.space != naga::AddressSpace::WorkGroup || fi[h].is_empty() {
                continue;
            }
            let name = gv.name.clone().ok_or_else(|| format!("{label}: an unnamed workgroup variable"))?;
            let unsupported = || format!("{label}: entry point {}: cannot poison workgroup variable '{name}'", ep.name);
            match &module.types[gv.ty].inner {
                TypeInner::Array { base, size: ArraySize::Constant(n), .. } => {
                    let n = n.get();
                    let store = match &module.types[*base].inner {
                        TypeInner::Atomic(s) => {
                            let v = poison_value(&TypeInner::Scalar(*s)).ok_or_else(unsupported)?;
                            format!("atomicStore(&{name}[ddl_i], {v});")
                        }
                        other => format!("{name}[ddl_i] = {};", poison_value(other).ok_or_else(unsupported)?),
                    };
                    fills.push(format!(
                        "    for (var ddl_i = ddl_li; ddl_i < {n}u; ddl_i += {threads}u) {{ {store} }}\n"
                    ));
                }
                TypeInner::Atomic(s) => {
                    let v = poison_value(&TypeInner::Scalar(*s)).ok_or_else(unsupported)?;
                    fills.push(format!("    if (ddl_li == 0u) {{ atomicStore(&{name}, {v}); }}\n"));
                }
                other => {
                    let v = poison_value(other).ok_or_else(unsupported)?;
                    fills.push(format!("    if (ddl_li == 0u) {{ {name} = {v}; }}\n"));
                }
            }
        }
        if fills.is_empty() {
            continue;
        }
        let (params_start, params_end, body) = entry_span(text, &ep.name)
            .ok_or_else(|| format!("{label}: entry point {} not found in the text", ep.name))?;
        let params = &text[params_start..params_end];
        let li = match builtin_name(params, "local_invocation_index") {
            Some(n) => n.to_string(),
            None => {
                let sep = if params.trim().is_empty() || params.trim_end().ends_with(',') { "" } else { ", " };
                edits.push((params_end, format!("{sep}@builtin(local_invocation_index) ddl_li_in: u32")));
                "ddl_li_in".to_string()
            }
        };
        let mut code = format!(
            "\n    // (wg_poison: workgroup memory filled before the kernel runs.)\n    let ddl_li = {li};\n    let ddl_nan = bitcast<f32>(0x7fc00000u + ddl_li * 0u);\n"
        );
        code.extend(fills);
        code.push_str("    workgroupBarrier();\n");
        edits.push((body + 1, code));
    }
    edits.sort_by_key(|e| std::cmp::Reverse(e.0));
    let mut out = text.to_string();
    for (at, s) in edits {
        out.insert_str(at, &s);
    }
    // The rewrite must itself be a valid module (its entry points' interfaces included).
    super::validate(&format!("{label} (wg_poison)"), &out)?;
    Ok(out)
}

/// For `fn NAME(params) … {`: the byte range of `params` and the offset of the body's `{`.
fn entry_span(text: &str, name: &str) -> Option<(usize, usize, usize)> {
    let mut from = 0;
    while let Some(off) = text[from..].find("fn ") {
        let at = from + off;
        from = at + 3;
        // A whole word `fn` followed by this name and its parenthesis.
        if at > 0 && text.as_bytes()[at - 1].is_ascii_alphanumeric() {
            continue;
        }
        let rest = text[at + 3..].trim_start();
        let Some(after) = rest.strip_prefix(name) else { continue };
        let after_trim = after.trim_start();
        if !after_trim.starts_with('(') {
            continue;
        }
        let open = text.len() - after_trim.len();
        let mut depth = 0usize;
        for (j, ch) in text[open..].char_indices() {
            match ch {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        let close = open + j;
                        let body = close + text[close..].find('{')?;
                        return Some((open + 1, close, body));
                    }
                }
                _ => {}
            }
        }
        return None;
    }
    None
}

/// The parameter name bound to `@builtin(BUILTIN)` in an entry point's parameter list.
fn builtin_name<'a>(params: &'a str, builtin: &str) -> Option<&'a str> {
    let tag = format!("@builtin({builtin})");
    let at = params.find(&tag)? + tag.len();
    let rest = params[at..].trim_start();
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "
var<workgroup> a: array<f32, 40>;
var<workgroup> b: array<vec4<f32>, 3>;
var<workgroup> s: f32;
var<workgroup> n: array<atomic<u32>, 5>;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(8, 2)
fn with_index(@builtin(local_invocation_index) li: u32) {
    a[li] = 1.0;
    out[li] = a[li];
}

@compute @workgroup_size(4)
fn without_index(@builtin(workgroup_id) wid: vec3<u32>) {
    b[0] = vec4<f32>(1.0);
    s = b[0].x;
    atomicAdd(&n[0], 1u);
    out[wid.x] = s;
}

var<workgroup> h: array<f32, 8>;
fn helper(i: u32) -> f32 { h[i] = 2.0; return h[i]; }

@compute @workgroup_size(8)
fn via_call(@builtin(local_invocation_index) li: u32) { out[li] = helper(li); }

@compute @workgroup_size(1)
fn no_workgroup_memory() { out[0] = 0.0; }
";

    #[test]
    fn every_workgroup_variable_an_entry_point_uses_is_filled_before_it_runs() {
        let p = poisoned("test", SRC).unwrap();
        // with_index uses only `a`: its own index, 16 invocations a stride.
        let w = &p[p.find("fn with_index").unwrap()..p.find("fn without_index").unwrap()];
        assert!(w.contains("let ddl_li = li;"), "{w}");
        assert!(w.contains("ddl_i < 40u; ddl_i += 16u) { a[ddl_i] = ddl_nan; }"), "{w}");
        assert!(!w.contains("b[ddl_i]") && !w.contains("s = "), "{w}");
        assert!(w.find("workgroupBarrier()").unwrap() < w.find("a[li] = 1.0").unwrap(), "{w}");
        // without_index gets the builtin as a new parameter and fills b, s and the atomics.
        let wo = &p[p.find("fn without_index").unwrap()..p.find("fn helper").unwrap()];
        assert!(wo.contains("@builtin(local_invocation_index) ddl_li_in: u32"), "{wo}");
        assert!(wo.contains("b[ddl_i] = vec4<f32>(ddl_nan);"), "{wo}");
        assert!(wo.contains("if (ddl_li == 0u) { s = ddl_nan; }"), "{wo}");
        assert!(wo.contains("atomicStore(&n[ddl_i], 0xffffffffu);"), "{wo}");
        // A variable used only in a function the entry point calls is filled too.
        let vc = &p[p.find("fn via_call").unwrap()..p.find("fn no_workgroup_memory").unwrap()];
        assert!(vc.contains("ddl_i < 8u; ddl_i += 8u) { h[ddl_i] = ddl_nan; }"), "{vc}");
        assert!(!w.contains("h[ddl_i]") && !wo.contains("h[ddl_i]"), "{p}");
        // An entry point without workgroup memory is left as it was.
        assert!(p.ends_with("fn no_workgroup_memory() { out[0] = 0.0; }\n"), "{p}");
    }

    #[test]
    fn a_workgroup_variable_of_another_type_is_refused_by_name() {
        let src = "struct P { x: f32, y: u32 }
var<workgroup> st: P;
@compute @workgroup_size(1)
fn e() { st.x = 1.0; }";
        let e = poisoned("t", src).unwrap_err();
        assert!(e.contains("'st'") && e.contains("entry point e"), "{e}");
    }

    #[test]
    fn every_engine_shader_variant_can_be_poisoned() {
        for sh in crate::shaders::ALL {
            for (variant, text) in sh.all_texts() {
                poisoned(&format!("{}[{variant}]", sh.name), &text).unwrap();
            }
        }
    }
}
