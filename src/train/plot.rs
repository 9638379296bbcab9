//! PNG plots of training curves (plotters, with egui's bundled font so no system fonts are needed).

use std::path::Path;

use plotters::prelude::*;

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/fonts/Ubuntu-Light.ttf")),
        );
    });
}

/// One curve: a name and (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Draws curves into a PNG (`title`, axis labels), y on a linear scale.
pub fn line_plot(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<(), String> {
    register_font();
    let pts: Vec<(f64, f64)> =
        series.iter().flat_map(|s| s.points.iter().copied()).filter(|p| p.1.is_finite()).collect();
    if pts.is_empty() {
        return Ok(());
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in &pts {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let pad = ((y1 - y0) * 0.05).max(1e-6);
    // The image encoder picks the format from the extension: keep .png on the temporary name.
    let tmp = path.with_file_name(format!(".tmp-{}", path.file_name().unwrap().to_string_lossy()));
    {
        let root = BitMapBackend::new(&tmp, (900, 540)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 24))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))
            .map_err(|e| e.to_string())?;
        chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw().map_err(|e| e.to_string())?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied().filter(|p| p.1.is_finite()),
                    color.stroke_width(2),
                ))
                .map_err(|e| e.to_string())?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    std::fs::rename(&tmp, path).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_line_plot_is_written_as_png() {
        let dir = std::env::temp_dir().join(format!("ddl-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.png");
        let s = super::Series {
            name: "train".into(),
            points: (0..50).map(|i| (i as f64, 1.0 / (1.0 + i as f64))).collect(),
        };
        super::line_plot(&p, "loss", "step", "nats", &[s]).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
    }
}
