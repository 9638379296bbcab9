//! PNG plots of training curves (plotters, with egui's bundled font so no system fonts are needed).

use std::path::Path;

use ab_glyph::{Font, FontRef, ScaleFont};
use plotters::prelude::*;
use plotters_backend::text_anchor::{HPos, VPos};
// The backend traits by path: `BackendStyle::stroke_width` would clash with `Color::stroke_width`.
use plotters_backend::{BackendColor, BackendCoord, DrawingErrorKind};

/// The plots' one font (Ubuntu Light, egui's), registered as plotters' "sans-serif".
const FONT: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/fonts/Ubuntu-Light.ttf"));

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

fn font() -> &'static FontRef<'static> {
    static F: std::sync::OnceLock<FontRef<'static>> = std::sync::OnceLock::new();
    // The bundled file is part of the build (a unit test draws with it).
    F.get_or_init(|| FontRef::try_from_slice(FONT).expect("assets/fonts/Ubuntu-Light.ttf is a valid font"))
}

/// The bitmap backend with the text drawn right. plotters 0.3.7 draws each glyph from the left
/// edge of its ink, dropping the glyph's left side bearing (plotters-rs/plotters#576): "as
/// trained" came out as "astrained" and "block1.mlp" as "block1 .mlp". This backend hands every
/// shape to the wrapped one and draws text itself in the box plotters lays out (advances and
/// kerning; the height and baseline plotters uses), each glyph at its pen position with its bearing.
pub struct Glyphs<B>(pub B);

impl<B: DrawingBackend> DrawingBackend for Glyphs<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }
    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.ensure_prepared()
    }
    fn present(&mut self) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.present()
    }
    fn draw_pixel(&mut self, point: BackendCoord, color: BackendColor) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_pixel(point, color)
    }
    fn draw_line<S: plotters_backend::BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_line(from, to, style)
    }
    fn draw_rect<S: plotters_backend::BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_rect(upper_left, bottom_right, style, fill)
    }
    fn draw_path<S: plotters_backend::BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_path(path, style)
    }
    fn draw_circle<S: plotters_backend::BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.draw_circle(center, radius, style, fill)
    }
    fn fill_polygon<S: plotters_backend::BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.fill_polygon(vert, style)
    }
    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        self.0.blit_bitmap(pos, size, src)
    }

    fn draw_text<T: plotters_backend::BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<B::ErrorType>> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        // The box plotters lays out (and measures with `estimate_text_size`), anchored as it does.
        let ((min_x, min_y), (max_x, max_y)) =
            style.layout_box(text).map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -(max_x - min_x),
            HPos::Center => -(max_x - min_x) / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -(max_y - min_y) / 2,
            VPos::Bottom => -(max_y - min_y),
        };
        let trans = style.transform();
        let (w, h) = self.get_size();
        let size = style.size() as f32;
        let font = font().as_scaled(size);
        let mut pen = 0f32;
        let mut prev = None;
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = prev {
                pen += font.kern(p, id);
            }
            prev = Some(id);
            let glyph = id.with_scale_and_position(font.scale(), ab_glyph::point(pen, 0.0));
            pen += font.h_advance(id);
            let Some(outline) = font.outline_glyph(glyph) else { continue };
            let ink = outline.px_bounds();
            // plotters puts the baseline size/2 below the box's top.
            let (gx, gy) = (ink.min.x as i32, (size / 2.0 + ink.min.y) as i32);
            let mut pixels = Vec::new();
            outline.draw(|x, y, a| pixels.push((x as i32, y as i32, a)));
            for (x, y, a) in pixels {
                let (x, y) = trans.transform(gx + x + dx - min_x, gy + y + dy - min_y);
                let (x, y) = (pos.0 + x, pos.1 + y);
                if x >= 0 && x < w as i32 && y >= 0 && y < h as i32 {
                    self.draw_pixel((x, y), color.mix(a as f64))?;
                }
            }
        }
        Ok(())
    }
}

/// The PNG backend every plot draws on (see [`Glyphs`]).
fn png(path: &Path, size: (u32, u32)) -> Glyphs<BitMapBackend<'_>> {
    Glyphs(BitMapBackend::new(path, size))
}

/// Distinct line colours (Tableau 10), so six or more curves stay tellable apart.
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn pick(i: usize) -> RGBAColor {
    PALETTE[i % PALETTE.len()].to_rgba()
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
    // (Points at one x sit near the right edge of their axis: the legend goes to the left.)
    let legend_at = if x1 > x0 { SeriesLabelPosition::MiddleRight } else { SeriesLabelPosition::UpperLeft };
    (x0, x1) = x_span(x0, x1);
    let pad = y_pad(y0, y1);
    // The image encoder picks the format from the extension: keep .png on the temporary name.
    via_tmp(path, title, |tmp| {
        let root = png(tmp, (900, 540)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 24))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))
            .map_err(|e| e.to_string())?;
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(x_label).y_desc(y_label);
        if whole_ticks(x0, x1) {
            mesh.x_label_formatter(&|x| format!("{x:.0}"));
        }
        mesh.draw().map_err(|e| e.to_string())?;
        for (i, s) in series.iter().enumerate() {
            let color = pick(i);
            let ok: Vec<(f64, f64)> = s.points.iter().copied().filter(|p| p.1.is_finite()).collect();
            chart
                .draw_series(LineSeries::new(ok.iter().copied(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            // (A line through one point draws nothing: a run's one evaluation is a dot.)
            if ok.len() == 1 {
                chart.draw_series(ok.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(|e| e.to_string())?;
            }
        }
        chart
            .configure_series_labels()
            .position(legend_at)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())
    })
}

/// The margin above and below a y range `y0..=y1`: 5 % of it, and of a range that is one value
/// (a run's one evaluation) 5 % of that value, so that the axis' ticks differ.
/// The x axis (steps or tokens) of points from `x0` to `x1`, as given where they differ. Points
/// at one x (a run's one evaluation, every run's last step) get an axis from 0 with the point at
/// 10/11 of it: an axis from x0 to x0 + 1 put them on its left edge, under ticks of tenths of a
/// step. (At x = 0 or below: one unit centred on the point.)
fn x_span(x0: f64, x1: f64) -> (f64, f64) {
    if x1 > x0 {
        (x0, x1)
    } else if x0 > 0.0 {
        (0.0, x0 + x0 / 10.0)
    } else {
        (x0 - 0.5, x0 + 0.5)
    }
}

/// Whether every tick of an axis from `x0` to `x1` is a whole number (10 or more apart, with
/// plotters' ten ticks at most): their labels drop the ".0" ("5" steps, not "5.0").
fn whole_ticks(x0: f64, x1: f64) -> bool {
    x1 - x0 >= 10.0
}

fn y_pad(y0: f64, y1: f64) -> f64 {
    if y1 > y0 { ((y1 - y0) * 0.05).max(1e-6) } else { (y0.abs() * 0.05).max(0.05) }
}

/// One curve with an uncertainty band: (x, centre, low, high) points.
pub struct Band {
    pub name: String,
    pub points: Vec<(f64, f64, f64, f64)>,
}

/// Writes through a temporary file next to `path` (keeping the .png extension the encoder needs).
fn tmp_png(path: &Path) -> std::path::PathBuf {
    path.with_file_name(format!(".tmp-{}", path.file_name().unwrap_or_default().to_string_lossy()))
}

/// Draws into the temporary file of `path` ([`tmp_png`]) and renames it to `path`: a plot is
/// whole or the earlier one stays, and a failed drawing or rename (a full disk) removes the
/// temporary file rather than leave it beside the run.
/// The drawn PNG carries `Software: ddl` and `Title: title` ([`plot_title`] reads them back).
fn via_tmp(path: &Path, title: &str, draw: impl FnOnce(&Path) -> Result<(), String>) -> Result<(), String> {
    let tmp = tmp_png(path);
    let done = draw(&tmp)
        .and_then(|()| tag_png(&tmp, &[("Software", "ddl"), ("Title", title)]).map_err(|e| e.to_string()))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| e.to_string()));
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// The PNG signature, before the first chunk.
const PNG_SIGNATURE: &[u8; 8] = b"\x89PNG\r\n\x1a\n";

/// Adds a `tEXt` chunk per (keyword, text) after the PNG `path`'s header chunk (a file that is
/// not a PNG is left as it is). Text is Latin-1 in PNG: other characters become `?`.
fn tag_png(path: &Path, texts: &[(&str, &str)]) -> std::io::Result<()> {
    let bytes = std::fs::read(path)?;
    if !bytes.starts_with(PNG_SIGNATURE) || bytes.len() < 33 || &bytes[12..16] != b"IHDR" {
        return Ok(());
    }
    // Signature (8) + IHDR: length (4), type (4), 13 bytes of data, CRC (4).
    let mut out = bytes[..33].to_vec();
    for (key, text) in texts {
        let mut chunk = b"tEXt".to_vec();
        chunk.extend(key.bytes());
        chunk.push(0);
        chunk.extend(text.chars().map(|c| if (c as u32) < 256 && c != '\0' { c as u8 } else { b'?' }));
        out.extend(((chunk.len() - 4) as u32).to_be_bytes());
        out.extend(&chunk);
        out.extend(crc32fast::hash(&chunk).to_be_bytes());
    }
    out.extend(&bytes[33..]);
    std::fs::write(path, out)
}

/// Checks an output PNG `path` (given as `flag`) before the work whose picture it is: a name
/// ending in `.png`, not a folder, in a folder that exists, not inside a run's kept checkpoints,
/// writable, and absent or a plot whose stored title `ours` recognises (`drawer` names what drew
/// those): never a run's `loss.png` or an image of the user's.
pub fn check_png_out(flag: &str, path: &Path, ours: impl Fn(&str) -> bool, drawer: &str) -> Result<(), String> {
    let bad = |why: &str| format!("{flag} '{}': {why}", path.display());
    if !path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")) {
        return Err(bad("the plot is a PNG image: give a file name ending in .png"));
    }
    if path.is_dir() {
        return Err(bad("is a folder: give a file name ending in .png"));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(bad(&format!(
            "the folder '{}' does not exist: make it first, or write the plot elsewhere",
            parent.display()
        )));
    }
    if let Some(e) = super::checkpoint::kept_refusal(flag, path) {
        return Err(e);
    }
    if path.exists() && !plot_title(path).is_some_and(|t| ours(&t)) {
        return Err(bad(&format!(
            "exists and is not a plot {drawer} drew (a run's loss.png, an image of yours), and writing would \
             replace it; choose another file name"
        )));
    }
    super::checkpoint::probe_writable(path)
        .map_err(|e| bad(&format!("cannot write there: {e}; choose a folder that takes files")))
}

/// The title of a plot `ddl` drew (its `Software: ddl` and `Title` text chunks), or `None` for
/// any other file: what lets a plot replace only an earlier plot of its kind.
pub fn plot_title(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let mut at = bytes.starts_with(PNG_SIGNATURE).then_some(8)?;
    let (mut software, mut title) = (None, None);
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().ok()?) as usize;
        let kind = &bytes[at + 4..at + 8];
        let data = bytes.get(at + 8..at + 8 + len)?;
        if kind == b"IDAT" || kind == b"IEND" {
            break;
        }
        if kind == b"tEXt"
            && let Some(nul) = data.iter().position(|&b| b == 0)
        {
            let text: String = data[nul + 1..].iter().map(|&b| b as char).collect();
            match &data[..nul] {
                b"Software" => software = Some(text),
                b"Title" => title = Some(text),
                _ => {}
            }
        }
        at += 12 + len;
    }
    (software.as_deref() == Some("ddl")).then_some(title).flatten()
}

/// Draws curves with shaded bands (e.g. the mean over seeds with a min..max band) into a PNG.
pub fn band_plot(path: &Path, title: &str, x_label: &str, y_label: &str, bands: &[Band]) -> Result<(), String> {
    register_font();
    let pts: Vec<(f64, f64, f64, f64)> = bands
        .iter()
        .flat_map(|b| b.points.iter().copied())
        .filter(|p| p.1.is_finite() && p.2.is_finite() && p.3.is_finite())
        .collect();
    if pts.is_empty() {
        return Err(format!("{}: nothing to plot", path.display()));
    }
    let (x0, x1) = x_span(
        pts.iter().map(|p| p.0).fold(f64::INFINITY, f64::min),
        pts.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max),
    );
    let y0 = pts.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
    let y1 = pts.iter().map(|p| p.3).fold(f64::NEG_INFINITY, f64::max);
    let pad = y_pad(y0, y1);
    via_tmp(path, title, |tmp| {
        let root = png(tmp, (960, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))
            .map_err(|e| e.to_string())?;
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(x_label).y_desc(y_label);
        if whole_ticks(x0, x1) {
            mesh.x_label_formatter(&|x| format!("{x:.0}"));
        }
        mesh.draw().map_err(|e| e.to_string())?;
        for (i, b) in bands.iter().enumerate() {
            let color = pick(i);
            let ok: Vec<_> =
                b.points.iter().copied().filter(|p| p.1.is_finite() && p.2.is_finite() && p.3.is_finite()).collect();
            if ok.len() > 1 {
                let mut poly: Vec<(f64, f64)> = ok.iter().map(|p| (p.0, p.2)).collect();
                poly.extend(ok.iter().rev().map(|p| (p.0, p.3)));
                chart
                    .draw_series(std::iter::once(Polygon::new(poly, color.mix(0.18).filled())))
                    .map_err(|e| e.to_string())?;
            }
            chart
                .draw_series(LineSeries::new(ok.iter().map(|p| (p.0, p.1)), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(b.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            if ok.len() == 1 {
                let p = ok[0];
                chart.draw_series([Circle::new((p.0, p.1), 4, color.filled())]).map_err(|e| e.to_string())?;
                if p.3 > p.2 {
                    chart
                        .draw_series(std::iter::once(PathElement::new(
                            vec![(p.0, p.2), (p.0, p.3)],
                            color.stroke_width(2),
                        )))
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())
    })
}

/// One panel of [`regime_plot`]: per row (sublayer) the shares of identity, projection, reflection.
pub struct RegimePanel {
    pub name: String,
    pub labels: Vec<String>,
    pub shares: Vec<[f64; 3]>,
}

/// Regime colours: identity (β ≈ 0) blue, projection (β ≈ 1) green, reflection (β ≈ 2) red.
pub const REGIME_COLORS: [RGBColor; 3] = [RGBColor(52, 101, 164), RGBColor(78, 154, 6), RGBColor(204, 0, 0)];
pub const REGIME_NAMES: [&str; 3] = ["identity β<0.5", "projection 0.5≤β≤1.5", "reflection β>1.5"];

/// Stacked horizontal bars, one panel per model: for each sublayer the share of tokens in each
/// β regime.
pub fn regime_plot(path: &Path, title: &str, panels: &[RegimePanel]) -> Result<(), String> {
    register_font();
    if panels.is_empty() {
        return Err(format!("{}: nothing to plot", path.display()));
    }
    let cols = panels.len().min(3);
    let rows = panels.len().div_ceil(cols);
    via_tmp(path, title, |tmp| {
        let root = png(tmp, (360 * cols as u32 + 20, 300 * rows as u32 + 90)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let root = root.titled(title, ("sans-serif", 22)).map_err(|e| e.to_string())?;
        let (legend, body) = root.split_vertically(34);
        for (k, name) in REGIME_NAMES.iter().enumerate() {
            let x = 20 + 230 * k as i32;
            legend
                .draw(&Rectangle::new([(x, 8), (x + 18, 26)], REGIME_COLORS[k].filled()))
                .map_err(|e| e.to_string())?;
            legend
                .draw(&Text::new(name.to_string(), (x + 24, 9), ("sans-serif", 16).into_font()))
                .map_err(|e| e.to_string())?;
        }
        let areas = body.split_evenly((rows, cols));
        for (p, area) in panels.iter().zip(areas) {
            let n = p.shares.len();
            let mut chart = ChartBuilder::on(&area)
                .caption(&p.name, ("sans-serif", 18))
                .margin(8)
                .x_label_area_size(28)
                .y_label_area_size(36)
                .margin_right(22)
                .build_cartesian_2d(0.0..1.0f64, (0..n.max(1) as i32 - 1).into_segmented())
                .map_err(|e| e.to_string())?;
            let labels = p.labels.clone();
            chart
                .configure_mesh()
                .disable_y_mesh()
                .x_labels(5)
                .x_label_formatter(&|x| format!("{:.0}%", x * 100.0))
                .y_label_formatter(&|y| match y {
                    SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
                    _ => String::new(),
                })
                .draw()
                .map_err(|e| e.to_string())?;
            for (row, sh) in p.shares.iter().enumerate() {
                let mut x = 0.0;
                for k in 0..3 {
                    let w = sh[k].clamp(0.0, 1.0);
                    if w > 0.0 {
                        chart
                            .draw_series(std::iter::once(Rectangle::new(
                                [
                                    (x, SegmentValue::Exact(row as i32)),
                                    (
                                        x + w,
                                        if row + 1 == n {
                                            SegmentValue::Last
                                        } else {
                                            SegmentValue::Exact(row as i32 + 1)
                                        },
                                    ),
                                ],
                                REGIME_COLORS[k].filled(),
                            )))
                            .map_err(|e| e.to_string())?;
                    }
                    x += w;
                }
            }
        }
        root.present().map_err(|e| e.to_string())
    })
}

/// One panel of [`state_plot`]: a value per state.
pub struct StatePanel {
    pub y_label: String,
    pub values: Vec<f64>,
}

/// Panels stacked vertically over the same named states on the x axis (a logit lens: loss and
/// accuracy per state), each a line through a point per state. With many states every k-th is
/// named (the first and last always).
pub fn state_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    labels: &[String],
    panels: &[StatePanel],
) -> Result<(), String> {
    register_font();
    let n = labels.len();
    if n == 0 || panels.is_empty() {
        return Err(format!("{}: nothing to plot", path.display()));
    }
    let step = n.div_ceil(12).max(1);
    let width = (700 + 34 * n as u32).min(1400);
    via_tmp(path, title, |tmp| {
        let root = png(tmp, (width, 70 + 300 * panels.len() as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let root = root.titled(title, ("sans-serif", 22)).map_err(|e| e.to_string())?;
        let areas = root.split_evenly((panels.len(), 1));
        for (k, (p, area)) in panels.iter().zip(areas).enumerate() {
            let finite: Vec<f64> = p.values.iter().copied().filter(|v| v.is_finite()).collect();
            let (lo, hi) = finite.iter().fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
            let (lo, hi) = if finite.is_empty() { (0.0, 1.0) } else { (lo, hi) };
            let pad = ((hi - lo) * 0.08).max(1e-6);
            let last = k + 1 == panels.len();
            let mut chart = ChartBuilder::on(&area)
                .margin(10)
                .margin_right(28)
                .x_label_area_size(if last { 44 } else { 24 })
                .y_label_area_size(64)
                .build_cartesian_2d(-0.5..(n as f64 - 0.5), (lo - pad)..(hi + pad))
                .map_err(|e| e.to_string())?;
            let names = labels.to_vec();
            let name_of = move |x: &f64| {
                let i = x.round();
                if (x - i).abs() > 1e-6 || i < 0.0 {
                    return String::new();
                }
                let i = i as usize;
                if i.is_multiple_of(step) || i + 1 == n {
                    names.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            };
            let mut mesh = chart.configure_mesh();
            mesh.x_labels(n + 1).x_label_formatter(&name_of).y_desc(p.y_label.clone());
            // (Accuracy in %: 10, 15, not 10.0, 15.0.)
            if whole_ticks(lo - pad, hi + pad) {
                mesh.y_label_formatter(&|y| format!("{y:.0}"));
            }
            if last {
                mesh.x_desc(x_label);
            }
            mesh.draw().map_err(|e| e.to_string())?;
            let color = pick(k);
            let pts: Vec<(f64, f64)> =
                p.values.iter().enumerate().filter(|(_, v)| v.is_finite()).map(|(i, &v)| (i as f64, v)).collect();
            chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2))).map_err(|e| e.to_string())?;
            chart
                .draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 4, color.filled())))
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())
    })
}

/// One row of [`interval_plot`]: an estimate with its 95 % interval, and whether the test
/// behind it is significant (drawn filled and coloured; otherwise hollow and grey).
pub struct Interval {
    pub label: String,
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
    pub significant: bool,
}

/// A value axis's tick label as plotters writes it, except that a tick a rounding error off zero
/// (the sum of a few steps of 0.05 that should be 0: −1.4e-17) reads "0.0", not "-0.0". `span`
/// is the axis's extent, which says what "a rounding error off" is.
fn tick_label(x: f64, span: f64) -> String {
    use plotters::coord::ranged1d::ValueFormatter;
    use plotters::coord::types::RangedCoordf64;
    let x = if x.abs() <= span.abs() * 1e-9 { 0.0 } else { x };
    RangedCoordf64::format(&x)
}

/// A forest plot: one row per estimate (top to bottom in the given order), its point and 95 %
/// interval on a shared horizontal axis, with a vertical line at zero. Rows whose interval ends
/// are not finite are drawn as a point only.
pub fn interval_plot(path: &Path, title: &str, x_label: &str, rows: &[Interval]) -> Result<(), String> {
    register_font();
    let finite: Vec<f64> =
        rows.iter().flat_map(|r| [r.mean, r.lo, r.hi]).filter(|x| x.is_finite()).chain(std::iter::once(0.0)).collect();
    if rows.iter().all(|r| !r.mean.is_finite()) {
        return Err(format!("{}: nothing to plot", path.display()));
    }
    let lo = finite.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let pad = ((hi - lo) * 0.06).max(1e-6);
    let n = rows.len() as i32;
    let label_px = rows.iter().map(|r| r.label.chars().count()).max().unwrap_or(8) as u32 * 9 + 16;
    via_tmp(path, title, |tmp| {
        let root = png(tmp, (960, 90 + 38 * n as u32 + 40)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .margin_right(24)
            .x_label_area_size(40)
            .y_label_area_size(label_px.min(420))
            // (One row: a segment either side of it, as an axis of one value has no extent.)
            .build_cartesian_2d(
                (lo - pad)..(hi + pad),
                if n == 1 { (-1..1).into_segmented() } else { (0..n - 1).into_segmented() },
            )
            .map_err(|e| e.to_string())?;
        let labels: Vec<String> = rows.iter().map(|r| r.label.clone()).collect();
        // Row 0 is drawn at the top: segment n - 1 - i holds row i.
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(x_label)
            .x_label_formatter(&|x| tick_label(*x, hi - lo + 2.0 * pad))
            .y_label_formatter(&|y| match y {
                SegmentValue::CenterOf(i) => {
                    usize::try_from(n - 1 - *i).ok().and_then(|k| labels.get(k)).cloned().unwrap_or_default()
                }
                _ => String::new(),
            })
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, SegmentValue::Exact(if n == 1 { -1 } else { 0 })), (0.0, SegmentValue::Last)],
                BLACK.stroke_width(1),
            )))
            .map_err(|e| e.to_string())?;
        let sig = PALETTE[3].to_rgba();
        let grey = RGBColor(120, 120, 120).to_rgba();
        for (i, r) in rows.iter().enumerate() {
            if !r.mean.is_finite() {
                continue;
            }
            let y = SegmentValue::CenterOf(n - 1 - i as i32);
            let color = if r.significant { sig } else { grey };
            if r.lo.is_finite() && r.hi.is_finite() {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(r.lo, y.clone()), (r.hi, y.clone())],
                        color.stroke_width(3),
                    )))
                    .map_err(|e| e.to_string())?;
            }
            let style = if r.significant { color.filled() } else { color.stroke_width(2) };
            chart.draw_series(std::iter::once(Circle::new((r.mean, y), 6, style))).map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())
    })
}

/// A reliability diagram (`ddl eval --calibration-plot`): per bin of the likeliest token's
/// probability a bar to the share of its tokens whose likeliest prediction came, its mean
/// probability marked on it (the gap to the bar's top is the miscalibration), the diagonal of a
/// calibrated model, and each bar's share of the tokens above it. Empty bins are left blank.
pub fn reliability_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    bins: &[super::eval::CalibrationBin],
) -> Result<(), String> {
    register_font();
    let all: u64 = bins.iter().map(|b| b.tokens).sum();
    if all == 0 {
        return Err(format!("{}: no tokens to plot", path.display()));
    }
    via_tmp(path, title, |tmp| {
        let root = png(tmp, (760, 640)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .margin_right(24)
            .x_label_area_size(44)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..1.0, 0.0..1.08)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc("the likeliest token came (share)")
            .y_labels(6)
            .draw()
            .map_err(|e| e.to_string())?;
        let bar = PALETTE[0].to_rgba();
        let gap = PALETTE[3].to_rgba();
        for b in bins {
            let (Some(acc), Some(conf)) = (b.accuracy, b.confidence) else { continue };
            chart
                .draw_series(std::iter::once(Rectangle::new([(b.from, 0.0), (b.to, acc)], bar.mix(0.75).filled())))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(std::iter::once(Rectangle::new([(b.from, 0.0), (b.to, acc)], WHITE.stroke_width(1))))
                .map_err(|e| e.to_string())?;
            // The bin's mean probability: where its bar would end if the model were calibrated.
            chart
                .draw_series(std::iter::once(PathElement::new(vec![(b.from, conf), (b.to, conf)], gap.stroke_width(3))))
                .map_err(|e| e.to_string())?;
            let share = 100.0 * b.tokens as f64 / all as f64;
            let text = if share >= 1.0 { format!("{share:.0}%") } else { format!("{share:.1}%") };
            chart
                .draw_series(std::iter::once(Text::new(
                    text,
                    ((b.from + b.to) / 2.0 - 0.03, acc.max(conf) + 0.045),
                    ("sans-serif", 14),
                )))
                .map_err(|e| e.to_string())?;
        }
        chart
            .draw_series(std::iter::once(PathElement::new(vec![(0.0, 0.0), (1.0, 1.0)], BLACK.stroke_width(1))))
            .map_err(|e| e.to_string())?
            .label("calibrated (share = p)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(1)));
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
            .map_err(|e| e.to_string())?
            .label("how often it came, per bin (above: the bin's share of tokens)")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], bar.mix(0.75).filled()));
        chart
            .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
            .map_err(|e| e.to_string())?
            .label("mean p per bin")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], gap.stroke_width(3)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    /// A forest plot's tick at zero that its axis's steps reach with a rounding error reads "0.0"
    /// (comparisons.png of a grid with differences from −0.17 to +0.08 showed "-0.0"); the other
    /// ticks as plotters writes them.
    #[test]
    fn a_tick_a_rounding_error_off_zero_reads_zero() {
        assert_eq!(super::tick_label(-1.3877787807814457e-17, 0.25), "0.0");
        assert_eq!(super::tick_label(-0.0, 0.25), "0.0");
        assert_eq!(super::tick_label(0.05, 0.25), "0.05");
        assert_eq!(super::tick_label(-0.15, 0.25), "-0.15");
        // On an axis of small values a small tick is a value, not a rounding error.
        assert_eq!(super::tick_label(-2e-5, 1e-4), "-0.00002");
    }

    /// A drawing that fails half-way (a full disk) leaves neither its temporary file nor a
    /// changed plot; one that succeeds replaces the plot.
    #[test]
    fn a_failed_plot_leaves_no_temporary_file() {
        let dir = crate::testing::scratch_dir("plot-fail");
        let p = dir.join("loss.png");
        std::fs::write(&p, b"earlier").unwrap();
        let r = super::via_tmp(&p, "t", |tmp| {
            std::fs::write(tmp, b"half").unwrap();
            Err("No space left on device".into())
        });
        assert!(r.is_err());
        assert!(!super::tmp_png(&p).exists(), "the temporary file was left");
        assert_eq!(std::fs::read(&p).unwrap(), b"earlier");
        super::via_tmp(&p, "t", |tmp| std::fs::write(tmp, b"new").map_err(|e| e.to_string())).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert!(!super::tmp_png(&p).exists());
    }

    /// Each glyph's ink starts at its pen position plus its left side bearing: "1" and "11" at
    /// 40 px, whose "1" has a bearing of several pixels (plotters' own drawing puts the ink at
    /// the pen, the bug [`super::Glyphs`] works around), and the box is the one plotters measures.
    #[test]
    fn text_keeps_each_glyphs_side_bearing() {
        use ab_glyph::{Font, ScaleFont};
        use plotters::prelude::*;
        use plotters_backend::DrawingBackend;
        super::register_font();
        let font = super::font().as_scaled(40.0);
        let one = font.glyph_id('1');
        let bearing = font.h_side_bearing(one);
        assert!(bearing >= 3.0, "the test needs a visible bearing, '1' has {bearing} px");
        let (w, h) = (200u32, 80u32);
        // The first dark column of each run of ink, left to right.
        let ink_starts = |text: &str| -> Vec<i32> {
            let mut buf = vec![255u8; (w * h * 3) as usize];
            {
                let mut b = super::Glyphs(BitMapBackend::with_buffer(&mut buf, (w, h)));
                let style = ("sans-serif", 40).into_font().color(&BLACK);
                b.draw_text(text, &style, (10, 10)).unwrap();
                b.present().unwrap();
            }
            let dark: Vec<bool> = (0..w).map(|x| (0..h).any(|y| buf[((y * w + x) * 3) as usize] < 128)).collect();
            (0..w as usize).filter(|&x| dark[x] && (x == 0 || !dark[x - 1])).map(|x| x as i32).collect()
        };
        let near = |got: i32, want: f32| (got as f32 - want).abs() <= 1.0;
        let single = ink_starts("1");
        assert_eq!(single.len(), 1, "{single:?}");
        assert!(near(single[0], 10.0 + bearing), "'1' ink at {} px, pen 10 + bearing {bearing}", single[0]);
        let pair = ink_starts("11");
        let second = 10.0 + font.h_advance(one) + font.kern(one, one) + bearing;
        assert_eq!(pair.len(), 2, "{pair:?}");
        assert!(near(pair[0], 10.0 + bearing) && near(pair[1], second), "{pair:?}, want {second} for the second");
        // The layout plotters measures (axis label areas are sized from it) is unchanged.
        let style = ("sans-serif", 40).into_font().color(&BLACK);
        let mut pixel = [0u8; 3];
        let b = super::Glyphs(BitMapBackend::with_buffer(&mut pixel, (1, 1)));
        let (tw, _) = b.estimate_text_size("11", &style).unwrap();
        assert_eq!(tw, (2.0 * font.h_advance(one) + font.kern(one, one)) as u32);
    }

    /// A curve of one point (a run's one evaluation) is drawn as a dot (a line through it drew
    /// nothing), and a y range of one value gets a margin its ticks can tell apart.
    #[test]
    fn a_curve_of_one_point_is_a_dot() {
        let dir = crate::testing::scratch_dir("plot-dot");
        let train = || super::Series {
            name: "train".into(),
            points: (1..6).map(|i| (i as f64, 5.0 - 0.2 * i as f64)).collect(),
        };
        let val = |points: Vec<(f64, f64)>| super::Series { name: "val".into(), points };
        let (with, without) = (dir.join("with.png"), dir.join("without.png"));
        super::line_plot(&with, "loss", "step", "nats", &[train(), val(vec![(3.0, 4.5)])]).unwrap();
        super::line_plot(&without, "loss", "step", "nats", &[train(), val(vec![])]).unwrap();
        assert_ne!(std::fs::read(&with).unwrap(), std::fs::read(&without).unwrap(), "the one point was not drawn");
        let b = |points| super::Band { name: "a".into(), points };
        let (with, without) = (dir.join("bwith.png"), dir.join("bwithout.png"));
        let line = (1..6).map(|i| (i as f64, 4.0, 3.9, 4.1)).collect();
        super::band_plot(&with, "bands", "step", "nats", &[b(line), b(vec![(2.0, 4.05, 4.0, 4.09)])]).unwrap();
        let line = (1..6).map(|i| (i as f64, 4.0, 3.9, 4.1)).collect();
        super::band_plot(&without, "bands", "step", "nats", &[b(line), b(vec![])]).unwrap();
        assert_ne!(std::fs::read(&with).unwrap(), std::fs::read(&without).unwrap(), "the one point was not drawn");
        // Points at one step: an axis from 0 with the point inside, not on its left edge.
        assert_eq!(super::x_span(30.0, 30.0), (0.0, 33.0));
        assert_eq!(super::x_span(0.0, 0.0), (-0.5, 0.5));
        assert_eq!(super::x_span(2.0, 7.0), (2.0, 7.0));
        assert!(super::whole_ticks(0.0, 33.0) && !super::whole_ticks(2.0, 7.0));
        assert_eq!(super::y_pad(4.0, 4.0), 0.2);
        assert_eq!(super::y_pad(0.0, 0.0), 0.05);
        assert!((super::y_pad(1.0, 3.0) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn a_line_plot_is_written_as_png() {
        let dir = crate::testing::scratch_dir("plot");
        let p = dir.join("x.png");
        let s = super::Series {
            name: "train".into(),
            points: (0..50).map(|i| (i as f64, 1.0 / (1.0 + i as f64))).collect(),
        };
        super::line_plot(&p, "loss", "step", "nats", &[s]).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        let b = super::Band { name: "a".into(), points: (0..5).map(|i| (i as f64, 2.0, 1.5, 2.5)).collect() };
        super::band_plot(&dir.join("b.png"), "bands", "step", "nats", &[b]).unwrap();
        // Each plot carries its title for `--plot` to know it by; other files have none.
        assert_eq!(super::plot_title(&dir.join("b.png")).as_deref(), Some("bands"));
        assert_eq!(super::plot_title(&p).as_deref(), Some("loss"));
        std::fs::write(dir.join("not.png"), b"\x89PNG\r\n\x1a\nshort").unwrap();
        assert_eq!(super::plot_title(&dir.join("not.png")), None);
        assert_eq!(super::plot_title(&dir.join("missing.png")), None);
        assert_eq!(&std::fs::read(dir.join("b.png")).unwrap()[1..4], b"PNG");
        let r = super::RegimePanel { name: "ddl".into(), labels: vec!["0A".into()], shares: vec![[0.2, 0.5, 0.3]] };
        super::regime_plot(&dir.join("r.png"), "regimes", &[r]).unwrap();
        assert_eq!(&std::fs::read(dir.join("r.png")).unwrap()[1..4], b"PNG");
        assert!(super::band_plot(&dir.join("c.png"), "x", "x", "y", &[]).is_err());
        let rows = [
            super::Interval { label: "a − b".into(), mean: 0.05, lo: 0.01, hi: 0.09, significant: true },
            super::Interval { label: "a − c".into(), mean: -0.01, lo: -0.04, hi: 0.02, significant: false },
            super::Interval { label: "one seed".into(), mean: 0.02, lo: f64::NAN, hi: f64::NAN, significant: false },
        ];
        super::interval_plot(&dir.join("f.png"), "paired differences", "nats", &rows).unwrap();
        assert_eq!(&std::fs::read(dir.join("f.png")).unwrap()[1..4], b"PNG");
        // (One row: every two-variant grid's.)
        super::interval_plot(&dir.join("f1.png"), "one difference", "nats", &rows[..1]).unwrap();
        assert_eq!(&std::fs::read(dir.join("f1.png")).unwrap()[1..4], b"PNG");
        let none = [super::Interval { label: "x".into(), mean: f64::NAN, lo: 0.0, hi: 0.0, significant: false }];
        assert!(super::interval_plot(&dir.join("g.png"), "x", "x", &none).is_err());
    }
}
