//! Colour scales: β over (0, 2), signed values over (−1, 1), sublayer palettes.

use eframe::egui::Color32;

/// Stops of the β scale: identity (β ≈ 0) blue, projection (β ≈ 1) green, reflection (β ≈ 2) red.
const BETA_STOPS: [(f32, [u8; 3]); 5] =
    [(0.0, [33, 84, 190]), (0.5, [120, 178, 222]), (1.0, [70, 168, 92]), (1.5, [236, 172, 72]), (2.0, [196, 38, 38])];

fn lerp(a: [u8; 3], b: [u8; 3], t: f32) -> Color32 {
    let f = |x: u8, y: u8| (x as f32 + (y as f32 - x as f32) * t).round().clamp(0.0, 255.0) as u8;
    Color32::from_rgb(f(a[0], b[0]), f(a[1], b[1]), f(a[2], b[2]))
}

/// The colour of a gate value β (clamped to [0, 2]).
pub fn beta_color(beta: f32) -> Color32 {
    if !beta.is_finite() {
        return Color32::from_gray(90);
    }
    let b = beta.clamp(0.0, 2.0);
    for w in BETA_STOPS.windows(2) {
        let ((x0, c0), (x1, c1)) = (w[0], w[1]);
        if b <= x1 {
            return lerp(c0, c1, (b - x0) / (x1 - x0));
        }
    }
    lerp(BETA_STOPS[4].1, BETA_STOPS[4].1, 0.0)
}

/// The colour of a regime (0 identity, 1 projection, 2 reflection, 3 outside [0, 2]: grey,
/// none of the β scale's colours).
pub fn regime_color(r: usize) -> Color32 {
    match r {
        0..=2 => beta_color([0.1, 1.0, 1.9][r]),
        _ => Color32::from_gray(150),
    }
}

pub use ddl::generate::REGIMES;

/// A diverging scale for values in [−1, 1]: blue, near-white at 0, red.
pub fn signed_color(x: f64) -> Color32 {
    if !x.is_finite() {
        return Color32::from_gray(90);
    }
    let x = x.clamp(-1.0, 1.0) as f32;
    let mid = [235, 235, 235];
    if x < 0.0 { lerp(mid, [40, 80, 200], -x) } else { lerp(mid, [200, 40, 40], x) }
}

/// A sequential scale for values in [0, 1] (dark to bright amber).
pub fn magnitude_color(x: f32) -> Color32 {
    let x = if x.is_finite() { x.clamp(0.0, 1.0) } else { 0.0 };
    lerp([40, 40, 60], [250, 200, 60], x.sqrt())
}

/// A distinct colour per sublayer (hues spread around the circle; MLP sublayers lighter).
pub fn layer_color(s: usize, n_sub: usize) -> Color32 {
    let h = s as f32 / n_sub.max(1) as f32;
    let (l, sat) = if s.is_multiple_of(2) { (0.55, 0.75) } else { (0.62, 0.7) };
    hsl(h, sat, l)
}

fn hsl(h: f32, s: f32, l: f32) -> Color32 {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let hp = (h.fract() * 6.0).max(0.0);
    let x = c * (1.0 - (hp % 2.0 - 1.0).abs());
    let (r, g, b) = match hp as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let q = |v: f32| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    Color32::from_rgb(q(r), q(g), q(b))
}

/// Black or white text, whichever reads better on `bg`.
pub fn text_on(bg: Color32) -> Color32 {
    let y = 0.299 * bg.r() as f32 + 0.587 * bg.g() as f32 + 0.114 * bg.b() as f32;
    if y > 140.0 { Color32::BLACK } else { Color32::WHITE }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_regimes_have_distinct_colours() {
        let (i, p, r) = (beta_color(0.0), beta_color(1.0), beta_color(2.0));
        assert!(i.b() > i.r() && p.g() > p.r() && p.g() > p.b() && r.r() > r.b() && r.r() > r.g());
        assert_eq!(beta_color(-5.0), beta_color(0.0));
        assert_eq!(beta_color(9.0), beta_color(2.0));
        assert_ne!(layer_color(0, 4), layer_color(2, 4));
    }
}
