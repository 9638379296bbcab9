//! What `ddl info` says of a device: its adapter, features, limits and the kernels' forms
//! (text and JSON).

use super::Gpu;

impl Gpu {
    /// A human-readable description of the device for `ddl info`.
    pub fn describe(&self) -> String {
        let i = &self.info;
        let mut s = String::new();
        s.push_str(&format!("adapter:   {} ({:?})\n", i.name, i.device_type));
        s.push_str(&format!("backend:   {:?}\n", i.backend));
        s.push_str(&format!("driver:    {} {}\n", i.driver, i.driver_info));
        s.push_str(&format!("vendor:    0x{:04x} device 0x{:04x}\n", i.vendor, i.device));
        let feats: Vec<&str> = [
            (wgpu::Features::TIMESTAMP_QUERY, "TIMESTAMP_QUERY"),
            (wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS, "TIMESTAMP_QUERY_INSIDE_ENCODERS"),
            (wgpu::Features::SHADER_F16, "SHADER_F16"),
            (wgpu::Features::SUBGROUP, "SUBGROUP"),
        ]
        .iter()
        .filter(|(f, _)| self.features.contains(*f))
        .map(|(_, n)| *n)
        .collect();
        s.push_str(&format!(
            "features:  {}\n",
            if feats.is_empty() { "(none of the optional ones)".to_string() } else { feats.join(", ") }
        ));
        if self.features.contains(wgpu::Features::SUBGROUP) {
            s.push_str(&format!("subgroups: {}..{} invocations\n", i.subgroup_min_size, i.subgroup_max_size));
        }
        // What the adapter offers beyond what the engine enables (cooperative matrices, ...):
        // the GPU check records it so that forms for other features can be planned per adapter.
        let offered = self.adapter.features();
        let names: Vec<&str> = offered.iter_names().map(|(n, _)| n).collect();
        s.push_str(&format!("adapter offers ({} optional features):\n", names.len()));
        s.push_str(&wrap_names(&names, "  ", 100));
        let coop = self.coop_configurations();
        if coop.is_empty() {
            s.push_str("cooperative matrices: none offered\n");
        } else {
            s.push_str(&format!(
                "cooperative matrices: {} configurations (M x N x K, A/B type -> C type)\n",
                coop.len()
            ));
            for c in &coop {
                s.push_str(&format!(
                    "  {}x{}x{} {:?} -> {:?}{}\n",
                    c.m_size,
                    c.n_size,
                    c.k_size,
                    c.ab_type,
                    c.cr_type,
                    if c.saturating_accumulation { " (saturating)" } else { "" }
                ));
            }
        }
        for (what, status) in self.coop_forms() {
            s.push_str(&format!("{what}: {status}\n"));
        }
        s.push_str("limits:\n");
        for (name, value) in self.limit_rows() {
            let value = match value.as_array() {
                Some(xyz) => xyz.iter().map(|v| v.to_string()).collect::<Vec<_>>().join("x"),
                None => value.to_string(),
            };
            s.push_str(&format!("  {name:<34} {value}\n"));
        }
        s.push_str(&self.forms.describe());
        s
    }

    /// The cooperative-matrix forms' states (what, and on/off with why), as `ddl info` says
    /// them; the self-tests of the wide and 8x8 forms run only where `matmul_coop` is on.
    fn coop_forms(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![(
            "cooperative-matrix matmuls",
            match crate::kernels::matmul::coop::why_not(self) {
                None => "on (f16 products; the self-test passed)".to_string(),
                Some(why) => format!("off ({why})"),
            },
        )];
        // A form's self-test, run only where `matmul_coop` is on.
        let tested = |test: fn(&Gpu) -> Result<(), String>| {
            if !self.forms.matmul_coop {
                return "not tested (it runs with matmul_coop=1)".to_string();
            }
            match test(self) {
                Ok(()) => "on (its self-test passed)".to_string(),
                Err(why) => format!("off ({why})"),
            }
        };
        if crate::kernels::matmul::coop::configuration8_offered(&self.adapter) {
            out.push(("cooperative-matrix 8x8 form (coop8)", tested(crate::kernels::matmul::coop::status8)));
        }
        if self.coop.is_ok() {
            // Its self-test only where the form is on (the GPU check's info stage sets it).
            out.push(("cooperative-matrix wide form (coop128)", tested(crate::kernels::matmul::coop::wide_status)));
            if self.forms.matmul_coop {
                out.push((
                    "cooperative-matrix form coop128v",
                    match crate::kernels::matmul::coop::wide_v_status(self) {
                        Ok(()) => "self-test passed (picked with matmul_coop_v=1)".to_string(),
                        Err(why) => format!("off ({why})"),
                    },
                ));
                out.push((
                    "cooperative-matrix form coop128vq",
                    match crate::kernels::matmul::coop::wide_vq_status(self) {
                        Ok(()) => "self-test passed (bench only)".to_string(),
                        Err(why) => format!("off ({why})"),
                    },
                ));
                out.push((
                    "cooperative-matrix form coop128v2",
                    match crate::kernels::matmul::coop::wide_v2_status(self) {
                        Ok(()) => "self-test passed (picked with matmul_coop_v=1,matmul_coop_v2=1)".to_string(),
                        Err(why) => format!("off ({why})"),
                    },
                ));
                out.push((
                    "cooperative-matrix form coop128d",
                    match crate::kernels::matmul::coop::direct_status(self) {
                        Ok(()) => "self-test passed (f16-stored operands; bench only)".to_string(),
                        Err(why) => format!("off ({why})"),
                    },
                ));
            }
        }
        out
    }

    /// The cooperative-matrix configurations the adapter offers (none without the feature).
    fn coop_configurations(&self) -> Vec<wgpu::CooperativeMatrixProperties> {
        if self.adapter.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            self.adapter.cooperative_matrix_properties()
        } else {
            Vec::new()
        }
    }

    /// The limits `ddl info` lists, by name (numbers; the workgroup size as `[x, y, z]`, which
    /// the text writes `XxYxZ`).
    fn limit_rows(&self) -> Vec<(&'static str, serde_json::Value)> {
        let l = &self.limits;
        vec![
            ("max_buffer_size", l.max_buffer_size.into()),
            ("max_storage_buffer_binding_size", l.max_storage_buffer_binding_size.into()),
            ("max_uniform_buffer_binding_size", l.max_uniform_buffer_binding_size.into()),
            ("max_storage_buffers_per_stage", l.max_storage_buffers_per_shader_stage.into()),
            ("min_storage_buffer_offset_align", l.min_storage_buffer_offset_alignment.into()),
            ("max_compute_workgroup_storage_size", l.max_compute_workgroup_storage_size.into()),
            ("max_compute_invocations_per_wg", l.max_compute_invocations_per_workgroup.into()),
            (
                "max_compute_workgroup_size",
                serde_json::json!([
                    l.max_compute_workgroup_size_x,
                    l.max_compute_workgroup_size_y,
                    l.max_compute_workgroup_size_z
                ]),
            ),
            ("max_compute_workgroups_per_dim", l.max_compute_workgroups_per_dimension.into()),
        ]
    }

    /// What [`Gpu::describe`] says, as one JSON object (`ddl info --json`): the adapter, the
    /// features enabled and offered, subgroup sizes, cooperative-matrix configurations and
    /// forms, limits (numbers; the workgroup size as `[x, y, z]`) and the kernel forms.
    pub fn to_json(&self) -> serde_json::Value {
        let i = &self.info;
        let limits: serde_json::Map<String, serde_json::Value> =
            self.limit_rows().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let enabled: Vec<&str> = self.features.iter_names().map(|(n, _)| n).collect();
        let offered: Vec<&str> = self.adapter.features().iter_names().map(|(n, _)| n).collect();
        let configs: Vec<serde_json::Value> = self
            .coop_configurations()
            .iter()
            .map(|c| {
                serde_json::json!({
                    "m": c.m_size, "n": c.n_size, "k": c.k_size,
                    "ab_type": format!("{:?}", c.ab_type), "cr_type": format!("{:?}", c.cr_type),
                    "saturating": c.saturating_accumulation,
                })
            })
            .collect();
        let forms: serde_json::Map<String, serde_json::Value> =
            self.coop_forms().into_iter().map(|(k, v)| (k.to_string(), v.into())).collect();
        // (The forms as their benchmark row has them, without the row's own name.)
        let mut forms_table = self.forms.to_json();
        if let Some(o) = forms_table.as_object_mut() {
            o.remove("bench");
        }
        let subgroups = self
            .features
            .contains(wgpu::Features::SUBGROUP)
            .then(|| serde_json::json!([i.subgroup_min_size, i.subgroup_max_size]));
        serde_json::json!({
            "adapter": i.name,
            "device_type": format!("{:?}", i.device_type),
            "backend": format!("{:?}", i.backend),
            "driver": i.driver,
            "driver_info": i.driver_info,
            "vendor": i.vendor,
            "device": i.device,
            "features": enabled,
            "subgroup_sizes": subgroups,
            "adapter_features": offered,
            "cooperative_matrices": configs,
            "cooperative_forms": forms,
            "limits": limits,
            "forms": forms_table,
        })
    }
}

/// `names` joined by ", " in lines of at most `width` characters, each line starting with
/// `indent` (a name longer than the line stays whole).
fn wrap_names(names: &[&str], indent: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for (i, n) in names.iter().enumerate() {
        let piece = if i + 1 < names.len() { format!("{n},") } else { n.to_string() };
        if !line.is_empty() && indent.len() + line.len() + 1 + piece.len() > width {
            out.push_str(&format!("{indent}{line}\n"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&piece);
    }
    if !line.is_empty() {
        out.push_str(&format!("{indent}{line}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::wrap_names;

    #[test]
    fn feature_names_wrap_at_the_width_and_keep_every_name_once() {
        let names = ["SHADER_F16", "SUBGROUP", "TIMESTAMP_QUERY", "A_NAME_LONGER_THAN_THE_WHOLE_LINE_IS"];
        let text = wrap_names(&names, "  ", 30);
        for line in text.lines() {
            assert!(line.starts_with("  "), "{line:?} lacks the indent");
            assert!(line.len() <= 30 || !line.trim().contains(' '), "{line:?} is longer than 30 with a break in it");
        }
        let back: Vec<&str> = text.split_whitespace().map(|w| w.trim_end_matches(',')).collect();
        assert_eq!(back, names);
        assert_eq!(text.lines().count(), 3, "{text}");
        assert_eq!(wrap_names(&[], "  ", 30), "");
    }
}
